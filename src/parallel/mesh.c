/* The device mesh (see include/cleave/mesh.h): rank <-> (dp, cp, tp, pp)
 * coordinates and the groups along each axis, in Megatron-LM's order
 * (tp fastest, then cp, then dp, then pp).
 *
 * Why pure functions: every rank computes the same groups from the same
 * sizes, so no rank has to ask another; tests and `cleave mesh` can list
 * them without starting a communicator.
 *
 * Invariants: a mesh from cl_mesh_init has dp, cp, tp, pp >= 1 and
 * dp * cp * tp * pp == world. Groups are numbered by their smallest member and
 * list members in increasing order. */
#include "cleave/mesh.h"

#include <stdio.h>

static const char *const flag_name[3] = {"--dp", "--tp", "--pp"};

cl_status cl_mesh_init(cl_mesh *m, int world, int dp, int tp, int pp) { return cl_mesh_init_cp(m, world, dp, 1, tp, pp); }

cl_status cl_mesh_init_cp(cl_mesh *m, int world, int dp, int cp, int tp, int pp) {
    CL_ASSERT(m != NULL);
    if (world < 1) return cl_error(CL_ERR_INVALID, "the world must have at least one rank (got %d)", world);
    if (cp < 1) return cl_error(CL_ERR_INVALID, "--cp must be positive (got %d)", cp);
    if (world % cp)
        return cl_error(CL_ERR_INVALID, "--cp %d does not divide the world of %d ranks", cp, world);
    world /= cp; /* the dp x tp x pp of one context rank */
    int size[3] = {dp, tp, pp};
    int nzero = 0, derive = -1;
    for (int i = 0; i < 3; i++) {
        if (size[i] < 0) return cl_error(CL_ERR_INVALID, "%s must be positive (got %d)", flag_name[i], size[i]);
        if (size[i] == 0) {
            nzero++;
            if (derive < 0) derive = i;
        }
    }
    if (nzero > 1) {
        char zeros[64];
        int n = 0;
        for (int i = 0, k = 0; i < 3; i++)
            if (size[i] == 0)
                n += snprintf(zeros + n, sizeof zeros - (size_t)n, "%s%s", k++ ? (k == nzero ? " and " : ", ") : "", flag_name[i]);
        return cl_error(CL_ERR_INVALID, "only one of --dp, --tp, --pp can be left to derive (0), but %s are %s 0", zeros,
                        nzero == 2 ? "both" : "all");
    }
    if (derive >= 0) {
        int a = derive == 0 ? 1 : 0, b = derive == 2 ? 1 : 2; /* the two given sizes, in dp, tp, pp order */
        long long given = (long long)size[a] * size[b];
        char cps[24] = "";
        if (cp > 1) snprintf(cps, sizeof cps, " x --cp %d", cp);
        if (given > world || world % given)
            return cl_error(CL_ERR_INVALID, "cannot derive %s: %s %d x %s %d%s = %lld ranks do not divide the world of %d", flag_name[derive],
                            flag_name[a], size[a], flag_name[b], size[b], cps, given * cp, world * cp);
        size[derive] = (int)(world / given);
    } else {
        long long p2 = (long long)size[0] * size[1];
        if (p2 > world || p2 * size[2] != world)
        {
            if (cp > 1)
                return cl_error(CL_ERR_INVALID, "--dp %d x --cp %d x --tp %d x --pp %d = %.0f ranks, but the world has %d", size[0], cp,
                                size[1], size[2], (double)size[0] * size[1] * size[2] * cp, world * cp);
            return cl_error(CL_ERR_INVALID, "--dp %d x --tp %d x --pp %d = %.0f ranks, but the world has %d", size[0], size[1], size[2],
                            (double)size[0] * size[1] * size[2], world);
        }
    }
    m->world = world * cp;
    m->cp = cp;
    m->dp = size[0];
    m->tp = size[1];
    m->pp = size[2];
    return CL_OK;
}

static void check_mesh(const cl_mesh *m) {
    CL_ASSERT(m != NULL && m->world >= 1 && m->dp >= 1 && m->tp >= 1 && m->pp >= 1 && m->cp >= 1);
    CL_ASSERT((long long)m->dp * m->cp * m->tp * m->pp == m->world);
}

cl_coord cl_mesh_coord(const cl_mesh *m, int rank) {
    check_mesh(m);
    CL_ASSERT(rank >= 0 && rank < m->world);
    cl_coord c;
    c.tp = rank % m->tp;
    c.cp = (rank / m->tp) % m->cp;
    c.dp = (rank / (m->tp * m->cp)) % m->dp;
    c.pp = rank / (m->tp * m->cp * m->dp);
    return c;
}

int cl_mesh_rank(const cl_mesh *m, cl_coord c) {
    check_mesh(m);
    CL_ASSERT(c.dp >= 0 && c.dp < m->dp && c.tp >= 0 && c.tp < m->tp && c.pp >= 0 && c.pp < m->pp && c.cp >= 0 && c.cp < m->cp);
    return c.tp + m->tp * (c.cp + m->cp * (c.dp + m->dp * c.pp));
}

const char *cl_axis_name(cl_axis axis) {
    switch (axis) {
    case CL_AXIS_TP: return "tensor-parallel";
    case CL_AXIS_DP: return "data-parallel";
    case CL_AXIS_PP: return "pipeline-parallel";
    case CL_AXIS_EMBED: return "embedding";
    case CL_AXIS_MP: return "model-parallel";
    case CL_AXIS_CP: return "context-parallel";
    case CL_AXIS_DPCP: return "data-context";
    default: return "unknown axis";
    }
}

int cl_mesh_ngroups(const cl_mesh *m, cl_axis axis) {
    check_mesh(m);
    switch (axis) {
    case CL_AXIS_TP: return m->dp * m->cp * m->pp;
    case CL_AXIS_DP: return m->tp * m->cp * m->pp;
    case CL_AXIS_PP:
    case CL_AXIS_EMBED: return m->dp * m->cp * m->tp;
    case CL_AXIS_MP: return m->dp * m->cp;
    case CL_AXIS_CP: return m->dp * m->tp * m->pp;
    case CL_AXIS_DPCP: return m->tp * m->pp;
    default: CL_ASSERT(!"valid axis"); return 0;
    }
}

/* Group numbers follow the smallest member: for tp, dp and mp groups the
 * smallest member has the varying coordinates at 0, and ordering those by
 * rank orders the fixed coordinates slowest-first, as written below. */
int cl_mesh_group_index(const cl_mesh *m, cl_axis axis, int rank) {
    cl_coord c = cl_mesh_coord(m, rank);
    switch (axis) {
    case CL_AXIS_TP: return c.cp + m->cp * (c.dp + m->dp * c.pp);
    case CL_AXIS_DP: return c.tp + m->tp * (c.cp + m->cp * c.pp);
    case CL_AXIS_PP: return c.tp + m->tp * (c.cp + m->cp * c.dp);
    case CL_AXIS_EMBED: return (c.pp == 0 || c.pp == m->pp - 1) ? c.tp + m->tp * (c.cp + m->cp * c.dp) : -1;
    case CL_AXIS_MP: return c.cp + m->cp * c.dp;
    case CL_AXIS_CP: return c.tp + m->tp * (c.dp + m->dp * c.pp);
    case CL_AXIS_DPCP: return c.tp + m->tp * c.pp;
    default: CL_ASSERT(!"valid axis"); return -1;
    }
}

int cl_mesh_group_members(const cl_mesh *m, cl_axis axis, int index, int *members) {
    CL_ASSERT(index >= 0 && index < cl_mesh_ngroups(m, axis) && members != NULL);
    int n = 0;
    cl_coord c;
    switch (axis) {
    case CL_AXIS_TP:
        c.cp = index % m->cp;
        c.dp = index / m->cp % m->dp;
        c.pp = index / (m->cp * m->dp);
        for (c.tp = 0; c.tp < m->tp; c.tp++) members[n++] = cl_mesh_rank(m, c);
        break;
    case CL_AXIS_DP:
        c.tp = index % m->tp;
        c.cp = index / m->tp % m->cp;
        c.pp = index / (m->tp * m->cp);
        for (c.dp = 0; c.dp < m->dp; c.dp++) members[n++] = cl_mesh_rank(m, c);
        break;
    case CL_AXIS_PP:
        c.tp = index % m->tp;
        c.cp = index / m->tp % m->cp;
        c.dp = index / (m->tp * m->cp);
        for (c.pp = 0; c.pp < m->pp; c.pp++) members[n++] = cl_mesh_rank(m, c);
        break;
    case CL_AXIS_CP:
        c.tp = index % m->tp;
        c.dp = index / m->tp % m->dp;
        c.pp = index / (m->tp * m->dp);
        for (c.cp = 0; c.cp < m->cp; c.cp++) members[n++] = cl_mesh_rank(m, c);
        break;
    case CL_AXIS_DPCP:
        c.tp = index % m->tp;
        c.pp = index / m->tp;
        for (c.dp = 0; c.dp < m->dp; c.dp++)
            for (c.cp = 0; c.cp < m->cp; c.cp++) members[n++] = cl_mesh_rank(m, c);
        break;
    case CL_AXIS_EMBED:
        c.tp = index % m->tp;
        c.cp = index / m->tp % m->cp;
        c.dp = index / (m->tp * m->cp);
        c.pp = 0;
        members[n++] = cl_mesh_rank(m, c);
        if (m->pp > 1) {
            c.pp = m->pp - 1;
            members[n++] = cl_mesh_rank(m, c);
        }
        break;
    case CL_AXIS_MP:
        c.cp = index % m->cp;
        c.dp = index / m->cp;
        for (c.pp = 0; c.pp < m->pp; c.pp++)
            for (c.tp = 0; c.tp < m->tp; c.tp++) members[n++] = cl_mesh_rank(m, c);
        break;
    default: CL_ASSERT(!"valid axis");
    }
    return n;
}

int cl_mesh_group(const cl_mesh *m, cl_axis axis, int rank, int *members) {
    int g = cl_mesh_group_index(m, axis, rank);
    return g < 0 ? 0 : cl_mesh_group_members(m, axis, g, members);
}

cl_status cl_mesh_check_ep(const cl_mesh *m, int ep) {
    check_mesh(m);
    if (ep < 1) return cl_error(CL_ERR_INVALID, "--ep must be positive (got %d)", ep);
    if (m->dp % ep)
        return cl_error(CL_ERR_INVALID, "--ep %d must divide the %d data-parallel ranks (the experts are split over ep of them)", ep, m->dp);
    return CL_OK;
}

int cl_mesh_ep_group(const cl_mesh *m, int ep, int expert_dp, int rank, int *members) {
    CL_ASSERT(ep >= 1 && m->dp % ep == 0 && members != NULL);
    int n = cl_mesh_group(m, CL_AXIS_DP, rank, members), me = cl_mesh_coord(m, rank).dp, k = 0;
    for (int i = 0; i < n; i++) /* in place: k <= i */
        if (expert_dp ? i % ep == me % ep : i / ep == me / ep) members[k++] = members[i];
    return k;
}
