/* Tests of the device mesh (src/parallel/mesh.c): coordinates and groups.
 *
 * Hand-written expected groups for small shapes and for the 16-rank example
 * Megatron-LM documents (tp 2, pp 4, dp 2); properties (round trips, each
 * axis partitions the world, a rank's place in its group is its coordinate,
 * groups numbered by smallest member) for every shape of up to 48 ranks;
 * every error of cl_mesh_init, with its message. The process groups
 * (cl_groups_create, comm.h) on thread ranks: each group's size, members and
 * rank order, gathered inside the group, equal the pure functions' groups. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleave/comm.h"
#include "cleave/mesh.h"
#include "common/check.h"

/* All groups along axis as "[0, 1] [2, 3]" into buf. */
static const char *groups_text(const cl_mesh *m, cl_axis axis, char *buf, size_t n) {
    int *mem = malloc((size_t)m->world * sizeof *mem);
    size_t k = 0;
    buf[0] = 0;
    for (int g = 0; g < cl_mesh_ngroups(m, axis) && mem; g++) {
        int c = cl_mesh_group_members(m, axis, g, mem);
        k += (size_t)snprintf(buf + k, n - k, "%s[", g ? " " : "");
        for (int i = 0; i < c && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%d", i ? ", " : "", mem[i]);
        if (k < n) k += (size_t)snprintf(buf + k, n - k, "]");
        if (k >= n) break;
    }
    free(mem);
    return buf;
}

static void expect_groups(const cl_mesh *m, cl_axis axis, const char *want) {
    char got[1024];
    groups_text(m, axis, got, sizeof got);
    CHECK(!strcmp(got, want), "dp %d x tp %d x pp %d, %s groups:\n  got  %s\n  want %s", m->dp, m->tp, m->pp, cl_axis_name(axis), got,
          want);
}

static void expect_shape(int world, int dp, int tp, int pp, const char *tpg, const char *dpg, const char *ppg, const char *emb,
                         const char *mpg) {
    cl_mesh m;
    cl_status s = cl_mesh_init(&m, world, dp, tp, pp);
    CHECK(s == CL_OK, "init %d = %d x %d x %d: %s", world, dp, tp, pp, cl_last_error());
    if (s) return;
    CHECK(m.world == world && m.dp == dp && m.tp == tp && m.pp == pp, "mesh fields %d %d %d %d", m.world, m.dp, m.tp, m.pp);
    expect_groups(&m, CL_AXIS_TP, tpg);
    expect_groups(&m, CL_AXIS_DP, dpg);
    expect_groups(&m, CL_AXIS_PP, ppg);
    expect_groups(&m, CL_AXIS_EMBED, emb);
    expect_groups(&m, CL_AXIS_MP, mpg);
}

static void test_hand_written(void) {
    expect_shape(8, 2, 2, 2, "[0, 1] [2, 3] [4, 5] [6, 7]", "[0, 2] [1, 3] [4, 6] [5, 7]", "[0, 4] [1, 5] [2, 6] [3, 7]",
                 "[0, 4] [1, 5] [2, 6] [3, 7]", "[0, 1, 4, 5] [2, 3, 6, 7]");
    expect_shape(4, 1, 4, 1, "[0, 1, 2, 3]", "[0] [1] [2] [3]", "[0] [1] [2] [3]", "[0] [1] [2] [3]", "[0, 1, 2, 3]");
    expect_shape(4, 4, 1, 1, "[0] [1] [2] [3]", "[0, 1, 2, 3]", "[0] [1] [2] [3]", "[0] [1] [2] [3]", "[0] [1] [2] [3]");
    expect_shape(4, 1, 1, 4, "[0] [1] [2] [3]", "[0] [1] [2] [3]", "[0, 1, 2, 3]", "[0, 3]", "[0, 1, 2, 3]");
    expect_shape(6, 2, 1, 3, "[0] [1] [2] [3] [4] [5]", "[0, 1] [2, 3] [4, 5]", "[0, 2, 4] [1, 3, 5]", "[0, 4] [1, 5]",
                 "[0, 2, 4] [1, 3, 5]");
    /* Megatron-LM's documented example: 16 ranks, tp 2, pp 4, so dp 2. */
    expect_shape(16, 2, 2, 4, "[0, 1] [2, 3] [4, 5] [6, 7] [8, 9] [10, 11] [12, 13] [14, 15]",
                 "[0, 2] [1, 3] [4, 6] [5, 7] [8, 10] [9, 11] [12, 14] [13, 15]",
                 "[0, 4, 8, 12] [1, 5, 9, 13] [2, 6, 10, 14] [3, 7, 11, 15]", "[0, 12] [1, 13] [2, 14] [3, 15]",
                 "[0, 1, 4, 5, 8, 9, 12, 13] [2, 3, 6, 7, 10, 11, 14, 15]");
    expect_shape(1, 1, 1, 1, "[0]", "[0]", "[0]", "[0]", "[0]");
    /* context parallelism: dp 2 x cp 2 x tp 2, rank = tp_i + 2 (cp_i + 2 dp_i) (tp fastest, then cp, then dp) */
    cl_mesh m; /* also reused below */
    CHECK_OK(cl_mesh_init_cp(&m, 8, 2, 2, 2, 1));
    expect_groups(&m, CL_AXIS_TP, "[0, 1] [2, 3] [4, 5] [6, 7]");
    expect_groups(&m, CL_AXIS_CP, "[0, 2] [1, 3] [4, 6] [5, 7]");
    expect_groups(&m, CL_AXIS_DP, "[0, 4] [1, 5] [2, 6] [3, 7]");
    expect_groups(&m, CL_AXIS_DPCP, "[0, 2, 4, 6] [1, 3, 5, 7]");
    expect_groups(&m, CL_AXIS_MP, "[0, 1] [2, 3] [4, 5] [6, 7]");
    cl_coord c5 = cl_mesh_coord(&m, 5);
    CHECK(c5.tp == 1 && c5.cp == 0 && c5.dp == 1 && c5.pp == 0 && cl_mesh_group_index(&m, CL_AXIS_CP, 5) == 3, "rank 5 coordinates");
    CHECK_OK(cl_mesh_init_cp(&m, 8, 0, 4, 1, 2)); /* dp derived: 8 / (4 x 2) */
    CHECK(m.dp == 1 && m.cp == 4, "derived dp %d", m.dp);
    expect_groups(&m, CL_AXIS_CP, "[0, 1, 2, 3] [4, 5, 6, 7]");
    expect_groups(&m, CL_AXIS_PP, "[0, 4] [1, 5] [2, 6] [3, 7]");
    CHECK(cl_mesh_init_cp(&m, 6, 0, 4, 1, 1) == CL_ERR_INVALID && strstr(cl_last_error(), "--cp 4 does not divide the world of 6"),
          "cp not dividing the world: %s", cl_last_error());


    CHECK_OK(cl_mesh_init(&m, 16, 0, 2, 4));
    CHECK(m.dp == 2, "derived dp %d, want 2", m.dp);
    cl_coord c = cl_mesh_coord(&m, 6);
    CHECK(c.tp == 0 && c.dp == 1 && c.pp == 1, "rank 6 -> dp %d tp %d pp %d, want dp 1 tp 0 pp 1", c.dp, c.tp, c.pp);
    c = cl_mesh_coord(&m, 13);
    CHECK(c.tp == 1 && c.dp == 0 && c.pp == 3, "rank 13 -> dp %d tp %d pp %d, want dp 0 tp 1 pp 3", c.dp, c.tp, c.pp);
    CHECK(cl_mesh_rank(&m, (cl_coord){.dp = 1, .tp = 1, .pp = 2}) == 11, "(dp 1, tp 1, pp 2) -> %d, want 11",
          cl_mesh_rank(&m, (cl_coord){.dp = 1, .tp = 1, .pp = 2}));
    int mem[16];
    /* middle stages have no embedding group */
    for (int r = 4; r < 12; r++) {
        CHECK(cl_mesh_group_index(&m, CL_AXIS_EMBED, r) == -1, "rank %d (stage %d) embedding index %d, want -1", r,
              cl_mesh_coord(&m, r).pp, cl_mesh_group_index(&m, CL_AXIS_EMBED, r));
        CHECK(cl_mesh_group(&m, CL_AXIS_EMBED, r, mem) == 0, "rank %d has embedding members", r);
    }
    int n = cl_mesh_group(&m, CL_AXIS_EMBED, 14, mem);
    CHECK(n == 2 && mem[0] == 2 && mem[1] == 14, "rank 14 embedding group: %d members [%d, %d]", n, mem[0], n > 1 ? mem[1] : -1);
    CHECK(cl_mesh_group_index(&m, CL_AXIS_EMBED, 14) == 2, "rank 14 embedding index %d", cl_mesh_group_index(&m, CL_AXIS_EMBED, 14));
    n = cl_mesh_group(&m, CL_AXIS_DP, 9, mem);
    CHECK(n == 2 && mem[0] == 9 && mem[1] == 11, "rank 9 dp group: %d members", n);
    CHECK(cl_mesh_group_index(&m, CL_AXIS_DP, 9) == 5, "rank 9 dp index %d, want 5", cl_mesh_group_index(&m, CL_AXIS_DP, 9));
    CHECK(cl_mesh_ngroups(&m, CL_AXIS_TP) == 8 && cl_mesh_ngroups(&m, CL_AXIS_DP) == 8 && cl_mesh_ngroups(&m, CL_AXIS_PP) == 4 &&
              cl_mesh_ngroups(&m, CL_AXIS_EMBED) == 4 && cl_mesh_ngroups(&m, CL_AXIS_MP) == 2,
          "group counts %d %d %d %d %d", cl_mesh_ngroups(&m, CL_AXIS_TP), cl_mesh_ngroups(&m, CL_AXIS_DP),
          cl_mesh_ngroups(&m, CL_AXIS_PP), cl_mesh_ngroups(&m, CL_AXIS_EMBED), cl_mesh_ngroups(&m, CL_AXIS_MP));

    CHECK(!strcmp(cl_axis_name(CL_AXIS_TP), "tensor-parallel") && !strcmp(cl_axis_name(CL_AXIS_DP), "data-parallel") &&
              !strcmp(cl_axis_name(CL_AXIS_PP), "pipeline-parallel") && !strcmp(cl_axis_name(CL_AXIS_EMBED), "embedding") &&
              !strcmp(cl_axis_name(CL_AXIS_MP), "model-parallel"),
          "axis names");
}

/* The coordinate a rank's position in its group along axis must equal. */
static int axis_coord(cl_coord c, cl_axis axis) {
    return axis == CL_AXIS_TP ? c.tp : axis == CL_AXIS_DP ? c.dp : axis == CL_AXIS_CP ? c.cp : axis == CL_AXIS_DPCP ? c.dp : c.pp;
}

static int same_group(const cl_mesh *m, cl_axis axis, cl_coord a, cl_coord b) {
    switch (axis) {
    case CL_AXIS_TP: return a.dp == b.dp && a.pp == b.pp;
    case CL_AXIS_DP: return a.tp == b.tp && a.pp == b.pp;
    case CL_AXIS_PP: return a.tp == b.tp && a.dp == b.dp;
    case CL_AXIS_EMBED:
        return a.tp == b.tp && a.dp == b.dp && (a.pp == 0 || a.pp == m->pp - 1) && (b.pp == 0 || b.pp == m->pp - 1);
    case CL_AXIS_CP: return a.tp == b.tp && a.dp == b.dp && a.pp == b.pp;
    case CL_AXIS_DPCP: return a.tp == b.tp && a.pp == b.pp;
    default: return a.dp == b.dp;
    }
}

static int shapes_checked;

static void test_properties_of(int world, int dp, int tp, int pp) {
    cl_mesh m;
    cl_status s = cl_mesh_init(&m, world, dp, tp, pp);
    CHECK(s == CL_OK, "init %d = %d x %d x %d: %s", world, dp, tp, pp, cl_last_error());
    if (s) return;
    shapes_checked++;
    /* each size left 0 is derived back */
    int sz[3] = {dp, tp, pp};
    for (int d = 0; d < 3; d++) {
        int g[3] = {dp, tp, pp};
        g[d] = 0;
        cl_mesh m2;
        s = cl_mesh_init(&m2, world, g[0], g[1], g[2]);
        CHECK(s == CL_OK && m2.dp == dp && m2.tp == tp && m2.pp == pp, "deriving size %d of %d x %d x %d: %s", d, sz[0], sz[1], sz[2],
              s ? cl_last_error() : "wrong sizes");
    }
    int *mem = malloc((size_t)world * sizeof *mem), *seen = calloc((size_t)world, sizeof *seen);
    if (!mem || !seen) {
        CHECK(0, "out of memory");
        free(mem);
        free(seen);
        return;
    }
    int bad = 0;
    for (int r = 0; r < world && !bad; r++) {
        cl_coord c = cl_mesh_coord(&m, r);
        if (c.dp < 0 || c.dp >= dp || c.tp < 0 || c.tp >= tp || c.pp < 0 || c.pp >= pp || cl_mesh_rank(&m, c) != r ||
            r != c.tp + tp * (c.dp + dp * c.pp)) {
            CHECK(0, "%d x %d x %d: rank %d -> (dp %d, tp %d, pp %d) -> %d", dp, tp, pp, r, c.dp, c.tp, c.pp, cl_mesh_rank(&m, c));
            bad = 1;
        }
    }
    for (int axis = 0; axis < CL_AXIS_COUNT && !bad; axis++) {
        int ng = cl_mesh_ngroups(&m, axis);
        int want_size = axis == CL_AXIS_TP ? tp : axis == CL_AXIS_DP || axis == CL_AXIS_DPCP ? dp : axis == CL_AXIS_PP ? pp
                        : axis == CL_AXIS_EMBED ? (pp > 1 ? 2 : 1) : axis == CL_AXIS_CP ? 1 : tp * pp; /* cp 1 here */
        CHECK(ng * (axis == CL_AXIS_EMBED ? pp : want_size) == world, "%d x %d x %d: %s: %d groups", dp, tp, pp, cl_axis_name(axis), ng);
        memset(seen, 0, (size_t)world * sizeof *seen);
        int prev_first = -1;
        for (int g = 0; g < ng && !bad; g++) {
            int n = cl_mesh_group_members(&m, axis, g, mem);
            if (n != want_size || mem[0] <= prev_first) {
                CHECK(0, "%d x %d x %d: %s group %d: %d members (want %d), first %d after %d", dp, tp, pp, cl_axis_name(axis), g, n,
                      want_size, mem[0], prev_first);
                bad = 1;
                break;
            }
            prev_first = mem[0];
            for (int i = 0; i < n && !bad; i++) {
                int r = mem[i];
                cl_coord c = cl_mesh_coord(&m, r), c0 = cl_mesh_coord(&m, mem[0]);
                int pos_ok = axis == CL_AXIS_MP ? 1 : axis == CL_AXIS_EMBED ? (i == 0 ? c.pp == 0 : c.pp == pp - 1) : axis_coord(c, axis) == i;
                if ((i > 0 && mem[i - 1] >= r) || !same_group(&m, axis, c, c0) || !pos_ok ||
                    cl_mesh_group_index(&m, axis, r) != g) {
                    CHECK(0, "%d x %d x %d: %s group %d member %d is rank %d (index %d)", dp, tp, pp, cl_axis_name(axis), g, i, r,
                          cl_mesh_group_index(&m, axis, r));
                    bad = 1;
                }
                seen[r]++;
            }
        }
        /* every rank in exactly one group (embedding: first and last stages only), and cl_mesh_group agrees */
        for (int r = 0; r < world && !bad; r++) {
            cl_coord c = cl_mesh_coord(&m, r);
            int member = axis != CL_AXIS_EMBED || c.pp == 0 || c.pp == pp - 1;
            int n = cl_mesh_group(&m, axis, r, mem);
            int has = 0;
            for (int i = 0; i < n; i++) has += mem[i] == r;
            if (seen[r] != member || n != (member ? want_size : 0) || has != member ||
                (!member && cl_mesh_group_index(&m, axis, r) != -1)) {
                CHECK(0, "%d x %d x %d: %s: rank %d in %d groups, its group has %d members", dp, tp, pp, cl_axis_name(axis), r, seen[r], n);
                bad = 1;
            }
        }
    }
    free(mem);
    free(seen);
}

static void test_properties(void) {
    for (int world = 1; world <= 48; world++)
        for (int dp = 1; dp <= world; dp++)
            for (int tp = 1; tp <= world / dp; tp++)
                if (world % (dp * tp) == 0) test_properties_of(world, dp, tp, world / (dp * tp));
    CHECK(shapes_checked > 500, "only %d shapes checked", shapes_checked);
}

static void expect_error(int world, int dp, int tp, int pp, const char *want) {
    cl_mesh m = {-7, -7, -7, -7, -7};
    cl_status s = cl_mesh_init(&m, world, dp, tp, pp);
    CHECK(s == CL_ERR_INVALID, "init(%d, %d, %d, %d) -> %s, want invalid", world, dp, tp, pp, cl_status_name(s));
    CHECK(strstr(cl_last_error(), want) != NULL, "init(%d, %d, %d, %d): message '%s' lacks '%s'", world, dp, tp, pp, cl_last_error(),
          want);
    CHECK(!strchr(cl_last_error(), '\n'), "message has a newline: '%s'", cl_last_error());
    CHECK(m.world == -7 && m.dp == -7 && m.tp == -7 && m.pp == -7, "mesh written on error");
}

static void test_errors(void) {
    expect_error(4, 2, 3, 1, "--dp 2 x --tp 3 x --pp 1 = 6 ranks, but the world has 4");
    expect_error(16, 2, 2, 2, "--dp 2 x --tp 2 x --pp 2 = 8 ranks, but the world has 16");
    expect_error(4, INT_MAX, INT_MAX, INT_MAX, "ranks, but the world has 4");
    expect_error(INT_MAX, INT_MAX, INT_MAX, 1, "ranks, but the world has 2147483647");
    expect_error(0, 1, 1, 1, "the world must have at least one rank (got 0)");
    expect_error(-3, 1, 1, 1, "at least one rank (got -3)");
    expect_error(0, 0, 0, 0, "at least one rank");
    expect_error(4, -1, 2, 2, "--dp must be positive (got -1)");
    expect_error(4, 2, -2, 1, "--tp must be positive (got -2)");
    expect_error(4, 2, 2, -1, "--pp must be positive (got -1)");
    expect_error(4, 0, -2, 1, "--tp must be positive");
    expect_error(4, 0, 0, 1, "only one of --dp, --tp, --pp can be left to derive (0), but --dp and --tp are both 0");
    expect_error(4, 2, 0, 0, "--tp and --pp are both 0");
    expect_error(4, 0, 0, 0, "--dp, --tp and --pp are all 0");
    expect_error(4, 0, 3, 1, "cannot derive --dp: --tp 3 x --pp 1 = 3 ranks do not divide the world of 4");
    expect_error(6, 4, 0, 1, "cannot derive --tp: --dp 4 x --pp 1 = 4 ranks do not divide the world of 6");
    expect_error(4, 1, 8, 0, "cannot derive --pp: --dp 1 x --tp 8 = 8 ranks do not divide the world of 4");
    expect_error(1, 0, INT_MAX, INT_MAX, "cannot derive --dp");
    cl_mesh m;
    CHECK_OK(cl_mesh_init(&m, INT_MAX, 0, 1, 1));
    CHECK(m.dp == INT_MAX, "derived dp %d", m.dp);
    cl_coord c = cl_mesh_coord(&m, INT_MAX - 1);
    CHECK(c.dp == INT_MAX - 1 && cl_mesh_rank(&m, c) == INT_MAX - 1, "largest rank round trip");
}

/* ---- process groups on thread ranks ---- */

static cl_comm *group_of(const cl_groups *g, cl_axis axis) {
    switch (axis) {
    case CL_AXIS_TP: return g->tp;
    case CL_AXIS_DP: return g->dp;
    case CL_AXIS_PP: return g->pp;
    case CL_AXIS_EMBED: return g->embd;
    case CL_AXIS_MP: return g->mp;
    case CL_AXIS_CP: return g->cp;
    case CL_AXIS_DPCP: return g->dpcp;
    default: return NULL;
    }
}

/* Every axis: the group's world ranks, all-gathered inside the group, are
 * cl_mesh_group's members in order (a middle stage's embd: the rank alone),
 * and a sum over the group adds exactly those ranks. */
static cl_status groups_rank(cl_comm *world, void *arg) {
    const cl_mesh *m = arg;
    int me = cl_comm_rank(world);
    cl_groups g;
    cl_status s = cl_groups_create(world, m, &g);
    TCHECK(s == CL_OK, "rank %d: cl_groups_create: %s", me, cl_last_error());
    if (s) return s;
    TCHECK(g.world == world && g.mesh.dp == m->dp && g.mesh.tp == m->tp && g.mesh.pp == m->pp, "rank %d: world or mesh", me);
    int *want = malloc((size_t)m->world * sizeof *want), *got = malloc((size_t)m->world * sizeof *got);
    if (!want || !got) s = cl_error(CL_ERR_OOM, "test buffers");
    for (int a = 0; a < CL_AXIS_COUNT && !s; a++) {
        cl_comm *c = group_of(&g, (cl_axis)a);
        TCHECK(c != NULL, "rank %d: no %s group", me, cl_axis_name((cl_axis)a));
        if (!c) continue;
        int n = cl_mesh_group(m, (cl_axis)a, me, want);
        if (n == 0) want[n++] = me; /* a middle stage's embedding group: itself */
        int size = cl_comm_size(c), r = cl_comm_rank(c);
        TCHECK(size == n, "rank %d: %s group has %d ranks, want %d", me, cl_axis_name((cl_axis)a), size, n);
        TCHECK(cl_comm_world_rank(c) == me, "rank %d: %s group's world rank %d", me, cl_axis_name((cl_axis)a), cl_comm_world_rank(c));
        if (size != n) continue;
        TCHECK(r >= 0 && r < n && want[r] == me, "rank %d: %s group rank %d is not its place in the members", me,
               cl_axis_name((cl_axis)a), r);
        if ((s = cl_comm_allgather(c, &me, got, sizeof me))) break;
        for (int i = 0; i < n; i++)
            TCHECK(got[i] == want[i], "rank %d: %s group member %d is world rank %d, want %d", me, cl_axis_name((cl_axis)a), i, got[i],
                   want[i]);
        float sum = (float)me, wsum = 0;
        if ((s = cl_comm_allreduce(c, &sum, 1, CL_F32, CL_RED_SUM))) break;
        for (int i = 0; i < n; i++) wsum += (float)want[i];
        TCHECK(sum == wsum, "rank %d: %s group sums to %g, want %g", me, cl_axis_name((cl_axis)a), sum, wsum);
    }
    free(want);
    free(got);
    cl_groups_free(&g);
    TCHECK(!g.tp && !g.dp && !g.pp && !g.embd && !g.mp && !g.cp && !g.dpcp, "rank %d: cl_groups_free left a communicator", me);
    cl_groups_free(&g); /* again: a no-op */
    return s;
}

/* A mesh of another world size: refused on every rank, nothing split. */
static cl_status groups_wrong_world(cl_comm *world, void *arg) {
    (void)arg;
    cl_mesh m;
    cl_groups g;
    CL_TRY(cl_mesh_init(&m, 2, 2, 1, 1));
    cl_status s = cl_groups_create(world, &m, &g);
    TCHECK(s == CL_ERR_INVALID && strstr(cl_last_error(), "but the communicator has 4"), "mesh of 2 on 4 ranks: %s: %s",
           cl_status_name(s), cl_last_error());
    TCHECK(!g.tp && !g.dp && !g.pp && !g.embd && !g.mp, "a refused cl_groups_create left a communicator");
    return CL_OK;
}

static void test_groups(void) {
    static const int shapes[][3] = {{2, 2, 2}, {1, 2, 3}, {2, 1, 4}, {1, 1, 1}, {3, 1, 1}};
    cl_launch_opts o = {.timeout_s = 60};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int world = shapes[i][0] * shapes[i][1] * shapes[i][2];
        cl_mesh m;
        CHECK_OK(cl_mesh_init(&m, world, shapes[i][0], shapes[i][1], shapes[i][2]));
        cl_status s = cl_launch_threads(world, groups_rank, &m, &o);
        CHECK(s == CL_OK, "groups of dp %d x tp %d x pp %d: %s", m.dp, m.tp, m.pp, cl_last_error());
    }
    CHECK_OK(cl_launch_threads(4, groups_wrong_world, NULL, &o));
}

/* Expert parallelism's groups: for every mesh of up to 16 ranks and ep dividing dp, a rank's expert-parallel group
 * is the ep members of its dp group with dp_i / ep equal (consecutive), its expert-data group the dp / ep with
 * dp_i mod ep equal; the two meet in the rank alone; ep not dividing dp refused naming --ep. */
static void test_ep(void) {
    int mem[16], dpm[16];
    for (int dp = 1; dp <= 8; dp++)
        for (int tp = 1; tp <= 2; tp++)
            for (int pp = 1; dp * tp * pp <= 16; pp++) {
                cl_mesh m;
                CHECK_OK(cl_mesh_init(&m, dp * tp * pp, dp, tp, pp));
                for (int ep = 1; ep <= dp + 1; ep++) {
                    if (dp % ep) {
                        CHECK(cl_mesh_check_ep(&m, ep) == CL_ERR_INVALID && strstr(cl_last_error(), "--ep"), "dp %d ep %d not refused", dp, ep);
                        continue;
                    }
                    CHECK_OK(cl_mesh_check_ep(&m, ep));
                    for (int r = 0; r < m.world; r++) {
                        int me = cl_mesh_coord(&m, r).dp, ndp = cl_mesh_group(&m, CL_AXIS_DP, r, dpm);
                        int n = cl_mesh_ep_group(&m, ep, 0, r, mem), ok = n == ep, in = 0;
                        for (int i = 0; i < n; i++) ok &= mem[i] == dpm[me / ep * ep + i], in |= mem[i] == r;
                        CHECK(ok && in && ndp == dp, "dp %d tp %d pp %d ep %d: rank %d's expert-parallel group", dp, tp, pp, ep, r);
                        int k = cl_mesh_ep_group(&m, ep, 1, r, mem), meet = 0;
                        ok = k == dp / ep;
                        for (int i = 0; i < k; i++) {
                            ok &= mem[i] == dpm[me % ep + i * ep];
                            for (int j = 0; j < ep; j++) meet += mem[i] == dpm[me / ep * ep + j];
                        }
                        CHECK(ok && meet == 1, "dp %d tp %d pp %d ep %d: rank %d's expert-data group", dp, tp, pp, ep, r);
                    }
                }
            }
}

int main(void) {
    test_hand_written();
    test_ep();
    test_properties();
    test_errors();
    test_groups();
    return cl_test_report("test_mesh");
}
