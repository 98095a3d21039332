/* Tests for the mixture-of-experts kernels (src/kernels/moe.c).
 *
 *   test_moe                     the whole chain of a MoE layer on a tiny
 *       shape (router GEMM, softmax, top-k, renormalized weights, aux loss,
 *       dispatch, gather, per-expert GEMMs on contiguous rows, combine) and
 *       its backward, against a double reference written here: forward
 *       values within 1e-5, every gradient (x, W_g, expert outputs) against
 *       central finite differences of the reference in double; the routing
 *       rules (ties to the lower expert index, the stable by-expert order,
 *       capacity drops in token order and their count); backward adds.
 *   test_moe --write-input IN    the inputs of the PyTorch comparison
 *   test_moe --torch IN REF      the chain on IN against what
 *       tests/moe_ref.py computed from the Mixtral equations: probabilities,
 *       weights, output, aux loss and gradients within 1e-5 relative, the
 *       chosen experts exactly (a tie case included).
 * tests/cli_moe_kernels.sh runs the last two.
 *
 * The experts are SwiGLU MLPs (cl_moe_experts_*, HF's w1, w3, w2) in the
 * PyTorch comparison and in one finite-difference case (with their weights'
 * gradients), linear maps A_e [C, C] (ye = x A_e) in the others: the
 * routing kernels see only rows in and rows out. */
#include "cleave/backend.h"
#include "cleave/core.h"
#include "cleave/kernels.h"
#include "cleave/safetensors.h"
#include "common/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cl_rng rng;

static void *alloc0(long n, size_t es) {
    void *p = calloc(n > 0 ? (size_t)n : 1, es);
    if (!p) abort();
    return p;
}
static float *newf(long n) { return alloc0(n, sizeof(float)); }
static float *randf(long n, float s) {
    float *p = newf(n);
    for (long i = 0; i < n; i++) p[i] = s * cl_rng_normal(&rng);
    return p;
}
/* max |a - b| / max |b| */
static double relerr(const float *a, const double *b, long n) {
    double md = 0, mb = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        md = isnan(d) || d > md ? (isnan(d) ? INFINITY : d) : md;
        mb = fabs(b[i]) > mb ? fabs(b[i]) : mb;
    }
    return mb > 0 ? md / mb : md;
}
static void report(const char *what, double err, double tol) {
    printf("  %-40s %.2e (tol %.0e)\n", what, err, tol);
    CHECK(err <= tol, "%s: relative error %.3e > %.0e", what, err, tol);
}

/* ---- the chain in the kernels ------------------------------------------- */

typedef struct {
    int T, C, E, K, cap;
    float daux;
    const float *x, *wg, *a, *dy; /* x[T,C], wg[C,E], a[E,C,C], dy[T,C] */
    int F;                          /* with w1: SwiGLU experts of width F (cl_moe_experts_*), else x a[e] */
    const float *w1, *w3, *w2;      /* [E,F,C], [E,F,C], [E,C,F] */
    double *w1d, *w3d, *w2d;        /* the same in double, for the reference */
    float *dw1, *dw3, *dw2;
    /* results */
    float *logits, *probs, *wts, *frac, *pmean, *y, aux;
    int32_t *idx, *perm, *row, *counts;
    int64_t rows, dropped;
    float *ye, *dye, *dx, *dwg, *dlogits, *dwts;
} chain;

static void chain_run(chain *c) {
    int T = c->T, C = c->C, E = c->E, K = c->K;
    long S = (long)T * K;
    c->logits = newf((long)T * E);
    c->probs = newf((long)T * E);
    c->wts = newf(S);
    c->frac = newf(E);
    c->pmean = newf(E);
    c->y = newf((long)T * C);
    c->idx = alloc0(S, 4);
    c->perm = alloc0(S, 4);
    c->row = alloc0(S, 4);
    c->counts = alloc0(E, 4);
    cl_gemm(0, 0, T, E, C, 1.0f, c->x, C, c->wg, E, 0.0f, c->logits, E);
    cl_moe_router_forward(c->probs, c->idx, c->wts, c->logits, T, E, K);
    c->aux = cl_moe_aux_loss(c->frac, c->pmean, c->probs, c->idx, T, E, K);
    c->dropped = cl_moe_dispatch(c->perm, c->row, c->counts, c->idx, T, E, K, c->cap);
    c->rows = 0;
    for (int e = 0; e < E; e++) c->rows += c->counts[e];
    float *xe = newf(c->rows * C), *dxe = newf(c->rows * C);
    c->ye = newf(c->rows * C);
    cl_moe_gather(xe, c->x, c->perm, c->rows, C, K);
    long off = 0, F = c->F, nf = c->rows * F > 0 ? c->rows * F : 1;
    const cl_kernels *kt = &cl_cpu_kernels;
    float *gate = newf(nf), *up = newf(nf), *h = newf(nf);
    if (c->w1)
        cl_moe_experts_forward(kt, c->ye, gate, up, h, xe, c->counts, c->w1, c->w3, c->w2, E, C, c->F);
    else
        for (int e = 0; e < E; e++) { /* each expert's rows are contiguous: one GEMM each */
            cl_gemm(0, 0, c->counts[e], C, C, 1.0f, xe + off * C, C, c->a + (long)e * C * C, C, 0.0f, c->ye + off * C,
                    C);
            off += c->counts[e];
        }
    cl_moe_combine_forward(c->y, c->ye, c->wts, c->row, T, C, K);
    /* backward */
    c->dye = newf(c->rows * C);
    c->dwts = newf(S);
    c->dx = newf((long)T * C);
    c->dwg = newf((long)C * E);
    c->dlogits = newf((long)T * E);
    cl_moe_combine_backward(c->dye, c->dwts, c->dy, c->ye, c->wts, c->row, T, C, K);
    off = 0;
    if (c->w1) {
        float *dg = newf(nf), *du = newf(nf), *dh = newf(nf);
        long nw = (long)E * F * C;
        c->dw1 = newf(nw);
        c->dw3 = newf(nw);
        c->dw2 = newf(nw);
        cl_moe_experts_backward(kt, dxe, c->dw1, c->dw3, c->dw2, dg, du, dh, c->dye, xe, gate, up, h, c->counts, c->w1,
                                c->w3, c->w2, E, C, c->F);
        free(dg);
        free(du);
        free(dh);
    } else
        for (int e = 0; e < E; e++) {
            cl_gemm(0, 1, c->counts[e], C, C, 1.0f, c->dye + off * C, C, c->a + (long)e * C * C, C, 0.0f,
                    dxe + off * C, C);
            off += c->counts[e];
        }
    free(gate);
    free(up);
    free(h);
    cl_moe_gather_backward(c->dx, dxe, c->row, T, C, K);
    cl_moe_router_backward(c->dlogits, c->dwts, c->probs, c->idx, c->wts, c->frac, c->daux, T, E, K);
    cl_gemm(1, 0, C, E, T, 1.0f, c->x, C, c->dlogits, E, 0.0f, c->dwg, E);
    cl_gemm(0, 1, T, C, E, 1.0f, c->dlogits, E, c->wg, E, 1.0f, c->dx, C);
    free(xe);
    free(dxe);
}

static void chain_free(chain *c) {
    void *p[] = {c->logits, c->probs, c->wts, c->frac, c->pmean, c->y, c->idx, c->perm, c->row, c->counts,
                 c->ye, c->dye, c->dx, c->dwg, c->dlogits, c->dwts, c->dw1, c->dw3, c->dw2};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
}

/* ---- the double reference ------------------------------------------------ */

/* J = sum y . dy + daux * aux for inputs in double, routing as the equations
 * say (capacity by token order); the top-k into idx when given. ye_in:
 * when not NULL, the expert outputs per slot [T K, C] replace x A_e (for the
 * derivative with respect to them). Outputs of the forward into the
 * optional arrays. */
typedef struct {
    double *probs, *wts, *y, aux;
    int idx[1024];
} refout;

static double ref_J(const chain *c, const double *x, const double *wg, const double *ye_in, refout *o) {
    int T = c->T, C = c->C, E = c->E, K = c->K;
    double J = 0, pm[CL_MOE_MAX_EXPERTS] = {0}, cnt[CL_MOE_MAX_EXPERTS] = {0};
    int kept[CL_MOE_MAX_EXPERTS] = {0};
    for (int t = 0; t < T; t++) {
        double l[CL_MOE_MAX_EXPERTS], p[CL_MOE_MAX_EXPERTS], mx = -INFINITY, s = 0;
        for (int e = 0; e < E; e++) {
            l[e] = 0;
            for (int k = 0; k < C; k++) l[e] += x[t * C + k] * wg[k * E + e];
            mx = l[e] > mx ? l[e] : mx;
        }
        for (int e = 0; e < E; e++) s += p[e] = exp(l[e] - mx);
        for (int e = 0; e < E; e++) {
            p[e] /= s;
            pm[e] += p[e] / T;
            if (o && o->probs) o->probs[t * E + e] = p[e];
        }
        int ix[16];
        double w[16], ws = 0;
        for (int i = 0; i < K; i++) {
            int b = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int j = 0; j < i; j++) taken |= ix[j] == e;
                if (!taken && (b < 0 || p[e] > p[b])) b = e;
            }
            ix[i] = b;
            ws += w[i] = p[b];
            cnt[b] += 1.0 / ((double)T * K);
        }
        for (int i = 0; i < K; i++) {
            w[i] /= ws;
            if (o) o->idx[t * K + i] = ix[i];
            if (o && o->wts) o->wts[t * K + i] = w[i];
        }
        double v[16][64], hh[64];
        int keep[16];
        for (int i = 0; i < K; i++) {
            int e = ix[i];
            keep[i] = !(c->cap > 0 && ++kept[e] > c->cap); /* else dropped */
            const double *xt = x + (long)t * C;
            if (c->w1 && !ye_in)
                for (int f = 0; f < c->F; f++) { /* w2(silu(w1 x) * w3 x) */
                    double g = 0, u = 0;
                    for (int j = 0; j < C; j++) {
                        g += xt[j] * c->w1d[((long)e * c->F + f) * C + j];
                        u += xt[j] * c->w3d[((long)e * c->F + f) * C + j];
                    }
                    hh[f] = g / (1 + exp(-g)) * u;
                }
            for (int k = 0; k < C; k++) {
                double s = 0;
                if (ye_in) s = ye_in[((long)t * K + i) * C + k];
                else if (c->w1)
                    for (int f = 0; f < c->F; f++) s += hh[f] * c->w2d[((long)e * C + k) * c->F + f];
                else
                    for (int j = 0; j < C; j++) s += xt[j] * c->a[((long)e * C + j) * C + k];
                v[i][k] = s;
            }
        }
        for (int k = 0; k < C; k++) {
            double yv = 0;
            for (int i = 0; i < K; i++)
                if (keep[i]) yv += w[i] * v[i][k];
            if (o && o->y) o->y[t * C + k] = yv;
            J += yv * c->dy[t * C + k];
        }
    }
    double aux = 0;
    for (int e = 0; e < E; e++) aux += cnt[e] * pm[e];
    aux *= E;
    if (o) o->aux = aux;
    return J + c->daux * aux;
}

static double *widen(const float *x, long n) {
    double *d = alloc0(n, sizeof(double));
    for (long i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* d J / d v[i] by central differences, for every i of v (n values). */
static void fd(const chain *c, double *x, double *wg, double *ye, double *v, long n, double *g) {
    for (long i = 0; i < n; i++) {
        double h = 1e-6 * (fabs(v[i]) > 1 ? fabs(v[i]) : 1), s = v[i];
        v[i] = s + h;
        double jp = ref_J(c, x, wg, ye, NULL);
        v[i] = s - h;
        double jm = ref_J(c, x, wg, ye, NULL);
        v[i] = s;
        g[i] = (jp - jm) / (2 * h);
    }
}

static void chain_checks(int T, int C, int E, int K, int cap, float daux, int F) {
    chain c = {.T = T, .C = C, .E = E, .K = K, .cap = cap, .daux = daux, .F = F};
    float *x = randf((long)T * C, 1.0f), *wg = randf((long)C * E, 0.5f), *a = randf((long)E * C * C, 0.3f);
    float *dy = randf((long)T * C, 1.0f), *w[3] = {NULL, NULL, NULL};
    c.x = x, c.wg = wg, c.a = a, c.dy = dy;
    long nw = (long)E * F * C;
    if (F) {
        for (int i = 0; i < 3; i++) w[i] = randf(nw, 0.4f);
        c.w1 = w[0], c.w3 = w[1], c.w2 = w[2];
        c.w1d = widen(w[0], nw), c.w3d = widen(w[1], nw), c.w2d = widen(w[2], nw);
    }
    chain_run(&c);
    long S = (long)T * K;
    double *xd = widen(x, (long)T * C), *wgd = widen(wg, (long)C * E);
    refout o = {alloc0((long)T * E, 8), alloc0(S, 8), alloc0((long)T * C, 8), 0, {0}};
    ref_J(&c, xd, wgd, NULL, &o);
    char what[96];
    printf("T %d C %d E %d K %d capacity %d%s (dropped %lld):\n", T, C, E, K, cap, F ? ", SwiGLU experts" : "",
           (long long)c.dropped);
    long same = 0;
    for (long s = 0; s < S; s++) same += o.idx[s] == c.idx[s];
    CHECK(same == S, "the chosen experts: %ld of %ld as the double reference's", same, S);
    report("probs", relerr(c.probs, o.probs, (long)T * E), 1e-5);
    report("weights", relerr(c.wts, o.wts, S), 1e-5);
    report("y", relerr(c.y, o.y, (long)T * C), 1e-5);
    report("aux", fabs(c.aux - o.aux) / o.aux, 1e-5);
    /* gradients against central differences of the double reference */
    double *g = alloc0((long)T * C > (long)C * E ? (long)T * C : (long)C * E, 8);
    fd(&c, xd, wgd, NULL, xd, (long)T * C, g);
    snprintf(what, sizeof what, "dx (finite differences)");
    report(what, relerr(c.dx, g, (long)T * C), 1e-4);
    fd(&c, xd, wgd, NULL, wgd, (long)C * E, g);
    report("dW_g (finite differences)", relerr(c.dwg, g, (long)C * E), 1e-4);
    /* expert outputs: J as a function of each slot's output row */
    double *ye = alloc0(S * C, 8), *gy = alloc0(S * C, 8);
    float *dye_slot = newf(S * C);
    for (long s = 0; s < S; s++)
        if (c.row[s] >= 0)
            for (int k = 0; k < C; k++) {
                ye[s * C + k] = c.ye[(long)c.row[s] * C + k];
                dye_slot[s * C + k] = c.dye[(long)c.row[s] * C + k];
            }
    fd(&c, xd, wgd, ye, ye, S * C, gy);
    report("d expert outputs (finite differences)", relerr(dye_slot, gy, S * C), 1e-4);
    if (F) { /* the experts' weights */
        double *gw = alloc0(nw, 8);
        double *wd[3] = {c.w1d, c.w3d, c.w2d};
        const float *got[3] = {c.dw1, c.dw3, c.dw2};
        const char *nm[3] = {"dw1 (finite differences)", "dw3 (finite differences)", "dw2 (finite differences)"};
        for (int i = 0; i < 3; i++) {
            fd(&c, xd, wgd, NULL, wd[i], nw, gw);
            report(nm[i], relerr(got[i], gw, nw), 1e-4);
        }
        free(gw);
    }
    /* the dispatch order: by expert, then token; counts; drops */
    long bad = 0, kept = 0;
    for (long r = 0; r < c.rows; r++) {
        bad += c.row[c.perm[r]] != r;
        if (r > 0) {
            int ea = c.idx[c.perm[r - 1]], eb = c.idx[c.perm[r]];
            bad += ea > eb || (ea == eb && c.perm[r - 1] / K >= c.perm[r] / K);
        }
    }
    for (long s = 0; s < S; s++) kept += c.row[s] >= 0;
    CHECK(bad == 0 && kept == c.rows && c.rows + c.dropped == S,
          "dispatch: %ld rows out of order or unmatched; %ld kept, %lld rows, %lld dropped of %ld", bad, kept,
          (long long)c.rows, (long long)c.dropped, S);
    if (cap > 0) {
        long over = 0;
        for (int e = 0; e < E; e++) over += c.counts[e] > cap;
        CHECK(over == 0 && c.dropped > 0, "capacity %d: %ld experts over it, %lld dropped", cap, over,
              (long long)c.dropped);
    }
    /* backward adds: a second router backward doubles dlogits */
    float *dl2 = newf((long)T * E);
    memcpy(dl2, c.dlogits, (size_t)T * E * sizeof *dl2);
    cl_moe_router_backward(dl2, c.dwts, c.probs, c.idx, c.wts, c.frac, daux, T, E, K);
    long nd = 0;
    for (long i = 0; i < (long)T * E; i++) nd += fabsf(dl2[i] - 2 * c.dlogits[i]) > 1e-6f * (1 + fabsf(dl2[i]));
    CHECK(nd == 0, "router backward does not add into dlogits (%ld values)", nd);
    free(dl2);
    free(ye);
    free(gy);
    free(dye_slot);
    free(g);
    free(o.probs);
    free(o.wts);
    free(o.y);
    free(xd);
    free(wgd);
    chain_free(&c);
    free(x);
    free(wg);
    free(a);
    free(dy);
    for (int i = 0; i < 3; i++) free(w[i]);
    free(c.w1d);
    free(c.w3d);
    free(c.w2d);
}

/* Ties: equal logits go to the lower expert index, at every position. */
static void tie_checks(void) {
    enum { T = 4, E = 6, K = 3 };
    float l[T * E] = {
        1, 2, 2, 0, 2, 0, /* 2 three ways: 1, 2, 4 */
        0, 0, 0, 0, 0, 0, /* all equal: 0, 1, 2 */
        5, 1, 1, 1, 1, 5, /* 0 and 5, then 1 */
        -1, 3, -1, 3, -1, -1, /* 1, 3, then 0 */
    };
    const int32_t want[T * K] = {1, 2, 4, 0, 1, 2, 0, 5, 1, 1, 3, 0};
    float p[T * E], w[T * K];
    int32_t idx[T * K];
    cl_moe_router_forward(p, idx, w, l, T, E, K);
    CHECK(!memcmp(idx, want, sizeof want), "ties: experts %d %d %d | %d %d %d | %d %d %d | %d %d %d", idx[0], idx[1],
          idx[2], idx[3], idx[4], idx[5], idx[6], idx[7], idx[8], idx[9], idx[10], idx[11]);
    CHECK(w[3] == w[4] && w[4] == w[5] && fabsf(w[0] + w[1] + w[2] - 1) < 1e-6f, "tied weights %g %g %g", w[3], w[4],
          w[5]);
    /* capacity 1 over tokens choosing expert 0 thrice: the first token keeps it */
    int32_t ix[6] = {0, 1, 0, 2, 0, 1}, perm[6], row[6], cnt[3];
    int64_t dr = cl_moe_dispatch(perm, row, cnt, ix, 3, 3, 2, 1);
    CHECK(dr == 3 && row[0] == 0 && row[2] == -1 && row[4] == -1 && row[1] == 1 && row[5] == -1 && row[3] == 2 &&
              cnt[0] == 1 && cnt[1] == 1 && cnt[2] == 1,
          "capacity 1: dropped %lld, rows %d %d %d %d %d %d", (long long)dr, row[0], row[1], row[2], row[3], row[4],
          row[5]);
    dr = cl_moe_dispatch(perm, row, cnt, ix, 3, 3, 2, 0);
    CHECK(dr == 0 && cnt[0] == 3 && perm[0] == 0 && perm[1] == 2 && perm[2] == 4 && perm[3] == 1 && perm[4] == 5 &&
              perm[5] == 3,
          "dropless: dropped %lld, perm %d %d %d %d %d %d", (long long)dr, perm[0], perm[1], perm[2], perm[3], perm[4],
          perm[5]);
}

/* ---- the PyTorch comparison ---------------------------------------------- */

enum { PT = 40, PC = 32, PE = 8, PK = 2, TT = 6, PF = 24 };
static const float DAUX = 0.37f;

static float *st_get(const cl_st_file *f, const char *name, long n) {
    float *p = newf(n);
    cl_status s = cl_st_read_tensor(f, name, CL_F32, 1, (int64_t[]){n}, p);
    CHECK(s == CL_OK, "%s: %s", name, cl_last_error());
    return p;
}

/* logits of the tie case: rows with two, three and all experts equal */
static void tie_logits(float *l) {
    for (int t = 0; t < TT; t++)
        for (int e = 0; e < PE; e++) l[t * PE + e] = (float)((t * 7 + e * 3) % 5) - 2.0f;
    for (int e = 0; e < PE; e++) l[PE + e] = 0.5f;
}

static int write_input(const char *path) {
    long nw = (long)PE * PF * PC;
    float *x = randf(PT * PC, 1.0f), *wg = randf(PC * PE, 0.5f), *w1 = randf(nw, 0.3f), *w3 = randf(nw, 0.3f);
    float *w2 = randf(nw, 0.3f), *dy = randf(PT * PC, 1.0f), tl[TT * PE];
    tie_logits(tl);
    cl_st_item it[] = {
        {"x", cl_tensor_make(x, CL_F32, 1, (int64_t[]){PT * PC})},
        {"wg", cl_tensor_make(wg, CL_F32, 1, (int64_t[]){PC * PE})},
        {"w1", cl_tensor_make(w1, CL_F32, 1, (int64_t[]){nw})},
        {"w3", cl_tensor_make(w3, CL_F32, 1, (int64_t[]){nw})},
        {"w2", cl_tensor_make(w2, CL_F32, 1, (int64_t[]){nw})},
        {"dy", cl_tensor_make(dy, CL_F32, 1, (int64_t[]){PT * PC})},
        {"tie.logits", cl_tensor_make(tl, CL_F32, 1, (int64_t[]){TT * PE})},
    };
    char shapes[128], daux[32];
    snprintf(shapes, sizeof shapes, "%d %d %d %d %d %d", PT, PC, PE, PK, TT, PF);
    snprintf(daux, sizeof daux, "%.9g", (double)DAUX);
    cl_st_meta meta[] = {{"shapes", shapes}, {"daux", daux}};
    cl_status s = cl_st_write(path, it, 7, meta, 2);
    free(x);
    free(wg);
    free(w1);
    free(w3);
    free(w2);
    free(dy);
    if (s != CL_OK) fprintf(stderr, "test_moe: %s\n", cl_last_error());
    return s == CL_OK ? 0 : 1;
}

static void vs_torch(const cl_st_file *ref, const char *name, const float *got, long n) {
    float *want = st_get(ref, name, n);
    double *wd = widen(want, n);
    char what[96];
    snprintf(what, sizeof what, "torch %s", name);
    report(what, relerr(got, wd, n), 1e-5);
    free(want);
    free(wd);
}

static void idx_vs_torch(const cl_st_file *ref, const char *name, const int32_t *got, long n) {
    float *want = st_get(ref, name, n);
    long same = 0;
    for (long i = 0; i < n; i++) same += want[i] == (float)got[i];
    printf("  torch %-34s %ld of %ld the same\n", name, same, n);
    CHECK(same == n, "%s: %ld of %ld chosen experts as torch's", name, same, n);
    free(want);
}

static void torch_compare(const char *in_path, const char *ref_path) {
    cl_st_file *in = NULL, *ref = NULL;
    CHECK_OK(cl_st_open(&in, in_path));
    CHECK_OK(cl_st_open(&ref, ref_path));
    if (!in || !ref) return;
    long nw = (long)PE * PF * PC;
    float *x = st_get(in, "x", PT * PC), *wg = st_get(in, "wg", PC * PE), *w1 = st_get(in, "w1", nw);
    float *w3 = st_get(in, "w3", nw), *w2 = st_get(in, "w2", nw);
    float *dy = st_get(in, "dy", PT * PC), *tl = st_get(in, "tie.logits", TT * PE);
    chain c = {.T = PT, .C = PC, .E = PE, .K = PK, .cap = 0, .daux = DAUX, .x = x, .wg = wg, .dy = dy,
               .F = PF, .w1 = w1, .w3 = w3, .w2 = w2};
    chain_run(&c);
    vs_torch(ref, "probs", c.probs, PT * PE);
    idx_vs_torch(ref, "idx", c.idx, PT * PK);
    vs_torch(ref, "wts", c.wts, PT * PK);
    vs_torch(ref, "y", c.y, PT * PC);
    vs_torch(ref, "aux", &c.aux, 1);
    float hf = c.aux * PK;
    vs_torch(ref, "aux_hf", &hf, 1); /* HF's load_balancing_loss_func: K times the Switch form */
    vs_torch(ref, "dx", c.dx, PT * PC);
    vs_torch(ref, "dwg", c.dwg, PC * PE);
    /* the expert outputs' gradient, [T, E, C] dense (zero where not routed) */
    float *dense = newf((long)PT * PE * PC);
    for (long s = 0; s < PT * PK; s++)
        memcpy(dense + ((s / PK) * PE + c.idx[s]) * PC, c.dye + (long)c.row[s] * PC, PC * sizeof(float));
    vs_torch(ref, "dye", dense, (long)PT * PE * PC);
    vs_torch(ref, "dw1", c.dw1, nw);
    vs_torch(ref, "dw3", c.dw3, nw);
    vs_torch(ref, "dw2", c.dw2, nw);
    /* ties */
    float tp[TT * PE], tw[TT * PK];
    int32_t ti[TT * PK];
    cl_moe_router_forward(tp, ti, tw, tl, TT, PE, PK);
    vs_torch(ref, "tie.probs", tp, TT * PE);
    idx_vs_torch(ref, "tie.idx", ti, TT * PK);
    vs_torch(ref, "tie.wts", tw, TT * PK);
    free(dense);
    chain_free(&c);
    free(x);
    free(wg);
    free(w1);
    free(w3);
    free(w2);
    free(dy);
    free(tl);
    cl_st_close(in);
    cl_st_close(ref);
}

int main(int argc, char **argv) {
    cl_rng_seed(&rng, 20261206);
    if (argc == 3 && !strcmp(argv[1], "--write-input")) return write_input(argv[2]);
    if (argc == 4 && !strcmp(argv[1], "--torch")) {
        torch_compare(argv[2], argv[3]);
        return cl_test_report("test_moe --torch");
    }
    tie_checks();
    chain_checks(16, 32, 8, 2, 0, 0.37f, 0);
    chain_checks(24, 16, 8, 2, 4, 1.0f, 0); /* capacity 4 of the 6 slots an expert averages: drops */
    chain_checks(12, 8, 4, 1, 0, 0.5f, 0);  /* top-1 (Switch): the router learns through the aux loss alone */
    chain_checks(12, 8, 4, 2, 5, 0.37f, 6); /* SwiGLU experts (cl_moe_experts_*), with drops */
    return cl_test_report("test_moe");
}
