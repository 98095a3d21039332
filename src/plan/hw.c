/* Hardware descriptions (see plan.h and docs/ARCHITECTURE.md "Planner"):
 * parsing, the built-in A100 and H100 DGX descriptions, and the costs of
 * products, other kernels and collectives derived from them. */
#include "plan/plan.h"

#include "cleave/data.h"
#include "cleave/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where each number comes from is in the "sources" member (kept in the file
 * so that a copy carries its provenance). The GEMM curve and the achieved
 * shares of the link and memory bandwidths are the only figures that are
 * not on a datasheet; ARCHITECTURE.md says how they were set. */
static const char a100_json[] =
    "{\"name\": \"a100-80gb-dgx\",\n"
    " \"peak_flops\": {\"fp32\": 19.5e12, \"bf16\": 312e12},\n"
    " \"gemm\": {\"max_efficiency\": 0.70, \"half_dim\": 64},\n"
    " \"memory_bandwidth\": 2039e9, \"memory_efficiency\": 0.80,\n"
    " \"device_memory\": 85899345920,\n"
    " \"devices_per_node\": 8,\n"
    " \"intra_node\": {\"bandwidth\": 300e9, \"efficiency\": 0.75, \"latency\": 8e-6},\n"
    " \"inter_node\": {\"bandwidth\": 25e9, \"efficiency\": 0.90, \"latency\": 12e-6},\n"
    " \"sources\": {\n"
    "  \"peak_flops\": \"NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB): FP32 19.5 TFLOPS, BF16/FP16 Tensor 312 TFLOPS dense\",\n"
    "  \"memory_bandwidth\": \"same datasheet: HBM2e 2,039 GB/s; 80 GB\",\n"
    "  \"intra_node\": \"DGX A100: NVLink 3 through NVSwitch, 600 GB/s per GPU both directions (300 GB/s each way); efficiency: the bus bandwidth NCCL all-reduce reaches on 8 GPUs is about 3/4 of it\",\n"
    "  \"inter_node\": \"DGX A100: 8 x ConnectX-6 HDR InfiniBand 200 Gb/s, one per GPU (25 GB/s each way)\",\n"
    "  \"gemm\": \"set once for all shapes, see docs/ARCHITECTURE.md Planner\"}}\n";

static const char h100_json[] =
    "{\"name\": \"h100-80gb-dgx\",\n"
    " \"peak_flops\": {\"fp32\": 67e12, \"bf16\": 989.4e12},\n"
    " \"gemm\": {\"max_efficiency\": 0.70, \"half_dim\": 64},\n"
    " \"memory_bandwidth\": 3350e9, \"memory_efficiency\": 0.80,\n"
    " \"device_memory\": 85899345920,\n"
    " \"devices_per_node\": 8,\n"
    " \"intra_node\": {\"bandwidth\": 450e9, \"efficiency\": 0.75, \"latency\": 8e-6},\n"
    " \"inter_node\": {\"bandwidth\": 50e9, \"efficiency\": 0.90, \"latency\": 12e-6},\n"
    " \"sources\": {\n"
    "  \"peak_flops\": \"NVIDIA H100 Tensor Core GPU datasheet (SXM5): FP32 67 TFLOPS, BF16 Tensor 1,979 TFLOPS with sparsity, 989.4 dense\",\n"
    "  \"memory_bandwidth\": \"same datasheet: HBM3 3.35 TB/s; 80 GB\",\n"
    "  \"intra_node\": \"DGX H100: NVLink 4 through NVSwitch, 900 GB/s per GPU both directions (450 GB/s each way)\",\n"
    "  \"inter_node\": \"DGX H100: 8 x ConnectX-7 400 Gb/s InfiniBand/Ethernet, one per GPU (50 GB/s each way)\",\n"
    "  \"gemm\": \"the A100's curve (no published Table 1 to check it against here)\"}}\n";

cl_status cl_hw_builtin(const char *name, cl_hw *out) {
    if (!strcmp(name, "a100")) return cl_hw_parse(a100_json, sizeof a100_json - 1, "the built-in a100", out);
    if (!strcmp(name, "h100")) return cl_hw_parse(h100_json, sizeof h100_json - 1, "the built-in h100", out);
    return cl_error(CL_ERR_INVALID, "unknown built-in hardware '%s' (a100, h100)", name);
}

/* Every number of a description has a plausible range (docs/ARCHITECTURE.md
 * "Planner" states them); a value outside it is refused naming the field,
 * the value and the range, so that 1e308 or 1e-300 never reaches the costs. */
typedef struct {
    double lo, hi;
    const char *unit;
} hw_range;
static const hw_range R_FLOPS = {1e6, 1e18, "FLOP/s"}, R_EFF = {1e-3, 1, "a share"}, R_HALF = {1e-3, 1e6, "elements"},
                      R_DIM = {1, 1e9, "elements"}, R_MEMBW = {1e6, 1e15, "bytes/s"}, R_LINKBW = {1e3, 1e15, "bytes/s"},
                      R_BYTES = {1048576, 1e15, "bytes"}, R_DEV = {1, 1048576, "devices"}, R_LAT = {0, 1, "seconds"};

static cl_status in_range(double x, const hw_range *r, const char *what, const char *path, const char *key) {
    if (x >= r->lo && x <= r->hi) return CL_OK; /* (NaN fails both) */
    return cl_error(CL_ERR_INVALID, "%s: field %s%s = %g is outside its plausible range %g to %g (%s)", what, path, key, x, r->lo, r->hi,
                    r->unit);
}

/* A required number at obj.key within r (or an optional one: *out unchanged when absent). */
static cl_status num(const cl_json *obj, const char *path, const char *key, const char *what, int required, const hw_range *r,
                     double *out) {
    const cl_json *v = obj ? cl_json_get(obj, key) : NULL;
    if (!v) {
        if (!required) return CL_OK;
        return cl_error(CL_ERR_INVALID, "%s: missing field %s%s", what, path, key);
    }
    if (v->type != CL_JSON_NUMBER) return cl_error(CL_ERR_INVALID, "%s: field %s%s must be a number", what, path, key);
    CL_TRY(in_range(v->number, r, what, path, key));
    *out = v->number;
    return CL_OK;
}

static cl_status link(const cl_json *root, const char *key, const char *what, double *bw, double *lat) {
    const cl_json *o = cl_json_get(root, key);
    char path[32];
    snprintf(path, sizeof path, "%s.", key);
    if (!o || o->type != CL_JSON_OBJECT) return cl_error(CL_ERR_INVALID, "%s: missing object %s", what, key);
    double eff = 1;
    CL_TRY(num(o, path, "bandwidth", what, 1, &R_LINKBW, bw));
    CL_TRY(num(o, path, "efficiency", what, 0, &R_EFF, &eff));
    CL_TRY(num(o, path, "latency", what, 1, &R_LAT, lat));
    *bw *= eff;
    return CL_OK;
}

/* A gemm table (rows [m, n, k, efficiency] or [m, n, k, nn, nt, tn]) into pts, its row count into *n; key
 * names the object ("gemm", "gemm_bf16") in the messages. */
static cl_status parse_table(const cl_json *tab, const char *what, const char *key, double (*pts)[3 + CL_GEMM_NLAYOUTS], int *n) {
    if (tab->type != CL_JSON_ARRAY || tab->count < 1 || tab->count > CL_HW_MAX_GEMM_POINTS)
        return cl_error(CL_ERR_INVALID, "%s: %s.table must be an array of 1 to %d [m, n, k, efficiency] rows (or [m, n, "
                        "k, nn, nt, tn]: one efficiency per operand layout)", what, key, CL_HW_MAX_GEMM_POINTS);
    int i = 0;
    for (const cl_json *row = tab->child; row; row = row->next, i++) {
        if (row->type != CL_JSON_ARRAY || (row->count != 4 && row->count != 3 + CL_GEMM_NLAYOUTS))
            return cl_error(CL_ERR_INVALID, "%s: %s.table row %d must be [m, n, k, efficiency] or [m, n, k, nn, nt, tn]", what, key, i);
        int j = 0;
        for (const cl_json *x = row->child; x; x = x->next, j++) {
            if (x->type != CL_JSON_NUMBER)
                return cl_error(CL_ERR_INVALID, "%s: %s.table row %d: every entry must be a number", what, key, i);
            char path[48];
            snprintf(path, sizeof path, "%s.table[%d]", key, i);
            static const char *const col[] = {"[0] (m)", "[1] (n)", "[2] (k)", "[3] (efficiency)", "[4] (efficiency nt)",
                                              "[5] (efficiency tn)"};
            CL_TRY(in_range(x->number, j < 3 ? &R_DIM : &R_EFF, what, path, col[j]));
            pts[i][j] = x->number;
        }
        for (int j = (int)row->count; j < 3 + CL_GEMM_NLAYOUTS; j++) pts[i][j] = pts[i][3];
    }
    *n = i;
    return CL_OK;
}

static cl_status parse_root(const cl_json *r, const char *what, cl_hw *hw) {
    memset(hw, 0, sizeof *hw);
    if (!r || r->type != CL_JSON_OBJECT) return cl_error(CL_ERR_INVALID, "%s: not a JSON object", what);
    const cl_json *nm = cl_json_get(r, "name");
    if (!nm || nm->type != CL_JSON_STRING) return cl_error(CL_ERR_INVALID, "%s: missing field name (a string)", what);
    snprintf(hw->name, sizeof hw->name, "%s", nm->string);
    const cl_json *pk = cl_json_get(r, "peak_flops");
    if (!pk || pk->type != CL_JSON_OBJECT) return cl_error(CL_ERR_INVALID, "%s: missing object peak_flops", what);
    CL_TRY(num(pk, "peak_flops.", "fp32", what, 1, &R_FLOPS, &hw->peak_fp32));
    CL_TRY(num(pk, "peak_flops.", "bf16", what, 0, &R_FLOPS, &hw->peak_bf16));
    const cl_json *g = cl_json_get(r, "gemm");
    if (!g || g->type != CL_JSON_OBJECT) return cl_error(CL_ERR_INVALID, "%s: missing object gemm", what);
    const cl_json *tab = cl_json_get(g, "table");
    if (tab) {
        CL_TRY(parse_table(tab, what, "gemm", hw->gemm_points, &hw->ngemm_points));
    } else {
        CL_TRY(num(g, "gemm.", "max_efficiency", what, 1, &R_EFF, &hw->gemm_max_eff));
        CL_TRY(num(g, "gemm.", "half_dim", what, 1, &R_HALF, &hw->gemm_half));
    }
    const cl_json *gb = cl_json_get(r, "gemm_bf16"), *tb = gb ? cl_json_get(gb, "table") : NULL;
    if (gb && (gb->type != CL_JSON_OBJECT || !tb))
        return cl_error(CL_ERR_INVALID, "%s: gemm_bf16 must be an object with a table (as gemm's)", what);
    if (tb) {
        if (!(hw->peak_bf16 > 0)) return cl_error(CL_ERR_INVALID, "%s: gemm_bf16 needs peak_flops.bf16 (its efficiencies are over it)", what);
        CL_TRY(parse_table(tb, what, "gemm_bf16", hw->gemm_points_bf16, &hw->ngemm_points_bf16));
    }
    double meff = 1, dpn = 0;
    CL_TRY(num(r, "", "memory_bandwidth", what, 1, &R_MEMBW, &hw->mem_bw));
    CL_TRY(num(r, "", "memory_efficiency", what, 0, &R_EFF, &meff));
    hw->mem_bw *= meff;
    CL_TRY(num(r, "", "kernel_bandwidth", what, 0, &R_MEMBW, &hw->kern_bw));
    CL_TRY(num(r, "", "disk_bandwidth", what, 0, &R_MEMBW, &hw->disk_bw));
    CL_TRY(num(r, "", "device_memory", what, 1, &R_BYTES, &hw->device_memory));
    CL_TRY(num(r, "", "devices_per_node", what, 1, &R_DEV, &dpn));
    if (dpn != floor(dpn)) return cl_error(CL_ERR_INVALID, "%s: field devices_per_node = %g must be a whole number", what, dpn);
    hw->devices_per_node = (int)dpn;
    CL_TRY(link(r, "intra_node", what, &hw->intra_bw, &hw->intra_lat));
    CL_TRY(link(r, "inter_node", what, &hw->inter_bw, &hw->inter_lat));
    const cl_json *ex = cl_json_get(r, "exact_memory");
    hw->exact_memory = ex && ex->type == CL_JSON_BOOL && ex->boolean;
    static const char *const flags[] = {"collectives_on_cores", "attention_causal_blocks"};
    int *dst[] = {&hw->coll_on_cores, &hw->attn_causal};
    for (int i = 0; i < 2; i++) {
        const cl_json *f = cl_json_get(r, flags[i]);
        if (f && f->type != CL_JSON_BOOL) return cl_error(CL_ERR_INVALID, "%s: %s must be true or false", what, flags[i]);
        *dst[i] = f && f->boolean;
    }
    return CL_OK;
}

cl_status cl_hw_parse(const char *text, size_t len, const char *what, cl_hw *out) {
    cl_json_doc *doc;
    cl_status s = cl_json_parse(&doc, text, len);
    if (s) return cl_error(CL_ERR_INVALID, "%s: %s", what, cl_last_error());
    s = parse_root(cl_json_root(doc), what, out);
    cl_json_free(doc);
    return s;
}

cl_status cl_hw_load(const char *path, cl_hw *out) {
    cl_json_doc *doc;
    CL_TRY(cl_json_parse_file(&doc, path));
    cl_status s = parse_root(cl_json_root(doc), path, out);
    cl_json_free(doc);
    return s;
}

/* "table": [rows]} of a gemm object. */
static void write_table(cl_strbuf *b, const double (*pts)[3 + CL_GEMM_NLAYOUTS], int n) {
    cl_sb_printf(b, "\"table\": [");
    for (int i = 0; i < n; i++) {
        const double *pt = pts[i];
        cl_sb_printf(b, "%s\n   [%.0f, %.0f, %.0f, %.4f", i ? "," : "", pt[0], pt[1], pt[2], pt[3]);
        if (pt[4] != pt[3] || pt[5] != pt[3]) cl_sb_printf(b, ", %.4f, %.4f", pt[4], pt[5]);
        cl_sb_printf(b, "]");
    }
    cl_sb_printf(b, "]}");
}

char *cl_hw_to_json(const cl_hw *hw, const char *note) {
    cl_strbuf b = {0};
    cl_sb_printf(&b, "{\"name\": ");
    cl_sb_json_string(&b, hw->name, strlen(hw->name));
    cl_sb_printf(&b, ",\n \"peak_flops\": {\"fp32\": %.6g%s", hw->peak_fp32, hw->peak_bf16 > 0 ? ", \"bf16\": " : "");
    if (hw->peak_bf16 > 0) cl_sb_printf(&b, "%.6g", hw->peak_bf16);
    cl_sb_printf(&b, "},\n \"gemm\": {");
    if (hw->ngemm_points) {
        write_table(&b, hw->gemm_points, hw->ngemm_points);
    } else {
        cl_sb_printf(&b, "\"max_efficiency\": %.4g, \"half_dim\": %.4g}", hw->gemm_max_eff, hw->gemm_half);
    }
    if (hw->ngemm_points_bf16) {
        cl_sb_printf(&b, ",\n \"gemm_bf16\": {");
        write_table(&b, hw->gemm_points_bf16, hw->ngemm_points_bf16);
    }
    cl_sb_printf(&b, ",\n \"memory_bandwidth\": %.6g,\n", hw->mem_bw);
    if (hw->kern_bw > 0) cl_sb_printf(&b, " \"kernel_bandwidth\": %.6g,\n", hw->kern_bw);
    if (hw->disk_bw > 0) cl_sb_printf(&b, " \"disk_bandwidth\": %.6g,\n", hw->disk_bw);
    cl_sb_printf(&b, " \"device_memory\": %.0f,\n \"devices_per_node\": %d,\n", hw->device_memory, hw->devices_per_node);
    cl_sb_printf(&b, " \"intra_node\": {\"bandwidth\": %.6g, \"latency\": %.3g},\n", hw->intra_bw, hw->intra_lat);
    cl_sb_printf(&b, " \"inter_node\": {\"bandwidth\": %.6g, \"latency\": %.3g},\n", hw->inter_bw, hw->inter_lat);
    if (hw->coll_on_cores) cl_sb_printf(&b, " \"collectives_on_cores\": true,\n");
    if (hw->attn_causal) cl_sb_printf(&b, " \"attention_causal_blocks\": true,\n");
    cl_sb_printf(&b, " \"exact_memory\": %s,\n \"sources\": ", hw->exact_memory ? "true" : "false");
    cl_sb_json_string(&b, note ? note : "", note ? strlen(note) : 0);
    cl_sb_printf(&b, "}\n");
    if (b.failed) {
        cl_sb_free(&b);
        return NULL;
    }
    return b.buf;
}

/* The table's distinct values on axis a, ascending; their count. */
static int axis_values(const double (*pts)[3 + CL_GEMM_NLAYOUTS], int np, int a, double *v) {
    int n = 0;
    for (int i = 0; i < np; i++) {
        double x = pts[i][a];
        int j = 0;
        while (j < n && v[j] < x) j++;
        if (j < n && v[j] == x) continue;
        memmove(v + j + 1, v + j, (size_t)(n - j) * sizeof *v);
        v[j] = x, n++;
    }
    return n;
}

/* A table that is a full grid (every combination of its m, n and k values
 * once, as calibrate writes it): trilinear interpolation in log2 of the
 * dimensions, clamped to the grid's edges, so a shape between measured ones
 * (gpt2-mini's 128 and 512 between 64, 256 and 1024, say) gets the
 * efficiency between theirs rather than the one a tie in distance picks.
 * Returns -1 when the table is not a full grid. */
static double grid_eff(const double (*pts)[3 + CL_GEMM_NLAYOUTS], int np, double m, double n, double k, int layout) {
    double ax[3][CL_HW_MAX_GEMM_POINTS], q[3] = {m, n, k}, t[3];
    int na[3], lo[3];
    for (int a = 0; a < 3; a++) na[a] = axis_values(pts, np, a, ax[a]);
    if (na[0] * na[1] * na[2] != np) return -1;
    for (int a = 0; a < 3; a++) {
        int i = 0;
        while (i + 2 < na[a] && q[a] > ax[a][i + 1]) i++;
        lo[a] = i;
        if (na[a] == 1) t[a] = 0, lo[a] = 0;
        else {
            double x = q[a] < ax[a][0] ? ax[a][0] : q[a] > ax[a][na[a] - 1] ? ax[a][na[a] - 1] : q[a];
            t[a] = log(x / ax[a][i]) / log(ax[a][i + 1] / ax[a][i]);
        }
    }
    double e = 0;
    for (int c = 0; c < 8; c++) {
        double w = 1, want[3];
        for (int a = 0; a < 3; a++) {
            int up = (c >> a) & 1;
            if (up && na[a] == 1) w = 0;
            want[a] = ax[a][lo[a] + (up && na[a] > 1)];
            w *= up ? t[a] : 1 - t[a];
        }
        if (w == 0) continue;
        int i = 0;
        while (i < np && !(pts[i][0] == want[0] && pts[i][1] == want[1] && pts[i][2] == want[2])) i++;
        if (i == np) return -1; /* a combination twice, another missing */
        e += w * pts[i][3 + layout];
    }
    return e;
}

double cl_hw_gemm_eff(const cl_hw *hw, double m, double n, double k) { return cl_hw_gemm_eff_layout(hw, m, n, k, CL_GEMM_NN); }

/* A table's efficiency: the full grid's interpolation, else the nearest row in log space. */
static double table_eff(const double (*pts)[3 + CL_GEMM_NLAYOUTS], int np, double m, double n, double k, int layout) {
    double g = grid_eff(pts, np, m, n, k, layout);
    if (g > 0) return g;
    double best = INFINITY, eff = pts[0][3 + layout];
    for (int i = 0; i < np; i++) {
        double dm = log(m / pts[i][0]), dn = log(n / pts[i][1]), dk = log(k / pts[i][2]);
        double dist = dm * dm + dn * dn + dk * dk;
        if (dist < best) best = dist, eff = pts[i][3 + layout];
    }
    return eff;
}

double cl_hw_gemm_eff_of(const cl_hw *hw, double m, double n, double k, int layout, int bf16) {
    if (layout < 0 || layout >= CL_GEMM_NLAYOUTS) layout = CL_GEMM_NN;
    if (bf16 && hw->ngemm_points_bf16) return table_eff(hw->gemm_points_bf16, hw->ngemm_points_bf16, m, n, k, layout);
    if (hw->ngemm_points) return table_eff(hw->gemm_points, hw->ngemm_points, m, n, k, layout);
    double h = hw->gemm_half;
    return hw->gemm_max_eff * (m / (m + h)) * (n / (n + h)) * (k / (k + h));
}

double cl_hw_gemm_eff_layout(const cl_hw *hw, double m, double n, double k, int layout) {
    return cl_hw_gemm_eff_of(hw, m, n, k, layout, 0);
}

/* A product's seconds: at bf16 on a description of cleave's engine (exact_memory: calibrate's) the work it runs in F32
 * whatever the step's dtype (g->f32: the attention products) at the F32 peak and table, the rest at the BF16 ones; on
 * a GPU description every product at the precision's (the field's bf16 attention: FlashAttention, Megatron-LM). */
static double gemm_time(const cl_hw *hw, const cl_gemm_shape *g, int bf16) {
    double peak = bf16 ? hw->peak_bf16 : hw->peak_fp32;
    if (!(bf16 && hw->exact_memory && g->f32 > 0))
        return 2.0 * g->m * g->n * g->k * g->count / (peak * cl_hw_gemm_eff_of(hw, g->m, g->n, g->k, g->layout, bf16));
    double a = 2.0 * g->m * g->n * g->k, lo = g->count - g->f32;
    double t = a * g->f32 / (hw->peak_fp32 * cl_hw_gemm_eff_of(hw, g->m, g->n, g->k, g->layout, 0));
    return lo > 0 ? t + a * lo / (peak * cl_hw_gemm_eff_of(hw, g->m, g->n, g->k, g->layout, 1)) : t;
}

/* On a description of cleave's engine in bf16 the other kernels' bytes, which the kinds count at the activation
 * width (2 in bf16: a GPU description's, activations BF16 throughout), go at F32's: cleave's layernorms, GELU,
 * softmax, residuals and their backward read and write F32 tensors in either dtype (only the GEMMs' inputs are BF16:
 * docs/ARCHITECTURE.md "Planner"), so twice the count; and the narrowings are added. */
double cl_hw_pass_compute(const cl_hw *hw, const cl_pass_cost *c, int bf16) {
    double t = 0, kbw = hw->kern_bw > 0 ? hw->kern_bw : hw->mem_bw;
    for (int i = 0; i < c->ngemm; i++) t += gemm_time(hw, &c->gemm[i], bf16);
    if (bf16 && hw->exact_memory) return t + (2 * c->bytes + c->narrow) / kbw + 2 * c->stream / hw->mem_bw;
    return t + c->bytes / kbw + c->stream / hw->mem_bw;
}

double cl_hw_coll(const cl_hw *hw, cl_coll_kind kind, double bytes, int g, int inter) {
    if (g <= 1 || bytes <= 0) return 0;
    double bw = inter ? hw->inter_bw : hw->intra_bw, lat = inter ? hw->inter_lat : hw->intra_lat;
    double f = (double)(g - 1) / g;
    if (kind != CL_COLL_ALLREDUCE) return f * bytes / bw + (g - 1) * lat;
    double ring = 2 * f * bytes / bw + 2 * (g - 1) * lat;
    double tree = 2 * bytes / bw + 2 * ceil(log2((double)g)) * lat; /* reduce then broadcast down a (double binary) tree */
    return ring < tree ? ring : tree;
}

/* The pairwise exchange (Thakur, Rabenseifner and Gropp, "Optimization of Collective Communication Operations in
 * MPICH", IJHPCA 2005): g - 1 steps, in step i each rank sends its block for rank r + i and receives the block of
 * rank r - i, so (g - 1)/g of its buffer leaves it: (g - 1) lat + (g - 1)/g n / bw. */
double cl_hw_alltoall(const cl_hw *hw, double bytes, int g, int inter) {
    if (g <= 1 || bytes <= 0) return 0;
    double bw = inter ? hw->inter_bw : hw->intra_bw, lat = inter ? hw->inter_lat : hw->intra_lat;
    return (double)(g - 1) / g * bytes / bw + (g - 1) * lat;
}

double cl_hw_p2p(const cl_hw *hw, double bytes, int inter) {
    return bytes / (inter ? hw->inter_bw : hw->intra_bw) + (inter ? hw->inter_lat : hw->intra_lat);
}
