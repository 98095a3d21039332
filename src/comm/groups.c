/* The process groups of a mesh (see cl_groups in include/cleave/comm.h).
 *
 * Why one value: the trainer, the pipeline and the checkpoint code each need
 * some of the mesh's communicators; made here once, from the same pure
 * functions that `cleave mesh` prints (src/parallel/mesh.c), nobody splits
 * on their own and every rank splits in the same order.
 *
 * Invariants: every rank of world calls cl_comm_split exactly once per axis,
 * in the order of cl_axis (tp, dp, pp, embd, mp, cp, dpcp), so the collective splits
 * match up on every rank; a group's color is its number along the axis and
 * the key the world rank, so group ranks follow the members' increasing
 * order. A middle stage has no embedding group (index -1): it takes a color
 * past the last group's number, unique to it, and gets a group of itself. */
#include "cleave/comm.h"

#include <string.h>

static cl_comm **slot(cl_groups *g, cl_axis axis) {
    switch (axis) {
    case CL_AXIS_TP: return &g->tp;
    case CL_AXIS_DP: return &g->dp;
    case CL_AXIS_PP: return &g->pp;
    case CL_AXIS_EMBED: return &g->embd;
    case CL_AXIS_MP: return &g->mp;
    case CL_AXIS_CP: return &g->cp;
    case CL_AXIS_DPCP: return &g->dpcp;
    default: CL_ASSERT(!"valid axis"); return NULL;
    }
}

cl_status cl_groups_create(cl_comm *world, const cl_mesh *mesh, cl_groups *out) {
    CL_ASSERT(world != NULL && mesh != NULL && out != NULL);
    memset(out, 0, sizeof *out);
    int n = cl_comm_size(world), rank = cl_comm_rank(world);
    if (mesh->world != n)
        return cl_error(CL_ERR_INVALID, "the mesh dp %d x cp %d x tp %d x pp %d has %d ranks, but the communicator has %d", mesh->dp,
                        mesh->cp, mesh->tp, mesh->pp, mesh->world, n);
    cl_groups g;
    memset(&g, 0, sizeof g);
    g.mesh = *mesh;
    g.world = world;
    for (int a = 0; a < CL_AXIS_COUNT; a++) {
        int color = cl_mesh_group_index(mesh, (cl_axis)a, rank);
        if (color < 0) color = cl_mesh_ngroups(mesh, (cl_axis)a) + rank; /* a middle stage: alone */
        cl_status s = cl_comm_split(world, color, rank, slot(&g, (cl_axis)a));
        if (s) {
            cl_groups_free(&g);
            return s;
        }
    }
    *out = g;
    return CL_OK;
}

cl_status cl_groups_add_ep(cl_groups *g, int ep) {
    CL_ASSERT(g != NULL && g->dp != NULL && g->ep == NULL);
    CL_TRY(cl_mesh_check_ep(&g->mesh, ep));
    if (ep <= 1) return CL_OK;
    int me = cl_comm_rank(g->dp);
    CL_TRY(cl_comm_split(g->dp, me / ep, me, &g->ep)); /* dp_i / ep: cl_mesh_ep_group's rule */
    if (cl_comm_size(g->dp) == ep) return CL_OK;
    return cl_comm_split(g->dp, me % ep, me, &g->edp); /* dp_i mod ep: its expert-data group */
}

void cl_groups_free(cl_groups *g) {
    if (!g) return;
    cl_comm_free(g->ep);
    cl_comm_free(g->edp);
    g->ep = g->edp = NULL;
    for (int a = 0; a < CL_AXIS_COUNT; a++) {
        cl_comm **c = slot(g, (cl_axis)a);
        cl_comm_free(*c);
        *c = NULL;
    }
}
