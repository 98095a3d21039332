/* cleave device mesh: how a world of ranks is arranged as dp x cp x tp x pp,
 * and which ranks form each communication group. Pure arithmetic: no state,
 * no communication, no allocation.
 *
 * Rank order is Megatron-LM's default: tensor-parallel fastest, then
 * context-parallel, then data, then pipeline,
 *
 *     rank = tp_i + tp * (cp_i + cp * (dp_i + dp * pp_i)),
 *
 * which with cp = 1 (the default) is rank = tp_i + tp * (dp_i + dp * pp_i).
 * The context-parallel ranks of one (dp, tp, pp) hold the same weights and
 * different tokens of the same samples: for the gradients they are
 * data-parallel ranks, so the data-context group (CL_AXIS_DPCP, dp x cp
 * ranks of one (tp, pp)) is the one that sums gradients and holds ZeRO's
 * shards; the context group (CL_AXIS_CP) passes keys and values.
 *
 * So the tp ranks of one layer shard are neighbours (on one machine, where
 * their frequent all-reduces are cheap) and the pipeline stages are furthest
 * apart. For 8 ranks, dp 2 x tp 2 x pp 2:
 *
 *     tensor-parallel groups:   [0, 1] [2, 3] [4, 5] [6, 7]
 *     data-parallel groups:     [0, 2] [1, 3] [4, 6] [5, 7]
 *     pipeline-parallel groups: [0, 4] [1, 5] [2, 6] [3, 7]
 *     embedding groups:         [0, 4] [1, 5] [2, 6] [3, 7]
 *     model-parallel groups:    [0, 1, 4, 5] [2, 3, 6, 7]
 *
 * Groups along an axis are numbered 0..ngroups-1 in the order of their
 * smallest member, and list their members in increasing order; a group's
 * number is the color to give cl_comm_split so that each rank lands in its
 * group. A rank's position inside its group is its coordinate along the axis
 * (tp_i in its tensor group, dp_i in its data group, pp_i in its pipeline
 * group, cp_i in its context group; cp_i + cp * dp_i in its data-context
 * group).
 *
 * The embedding group joins the first and the last pipeline stage of one
 * (dp, tp) column, which both hold the tied word embedding and must sum its
 * gradient. Ranks of middle stages (0 < pp_i < pp-1) belong to no embedding
 * group: cl_mesh_group gives them 0 members and cl_mesh_group_index gives -1.
 * With pp == 1 a rank's embedding group is itself.
 *
 * Ranks, coordinates and group numbers out of range are bugs of the caller,
 * caught by CL_ASSERT; only cl_mesh_init checks input. */
#ifndef CLEAVE_MESH_H
#define CLEAVE_MESH_H

#include "cleave/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int world, dp, tp, pp;
    int cp; /* context-parallel size (1: none) */
} cl_mesh;

/* Any one of dp/tp/pp given as 0 is derived as world / (product of the other
 * two); if all are given their product must equal world. Errors
 * (CL_ERR_INVALID, m untouched): world < 1; a negative size; more than one
 * size 0; the other two not dividing world when deriving; a product that is
 * not world ("--dp 2 x --tp 3 x --pp 1 = 6 ranks, but the world has 4"). */
cl_status cl_mesh_init(cl_mesh *m, int world, int dp, int tp, int pp);
/* The same with a context-parallel size cp >= 1 (given, never derived): the
 * derived size is world / (cp x the other two). */
cl_status cl_mesh_init_cp(cl_mesh *m, int world, int dp, int cp, int tp, int pp);

typedef struct {
    int dp, tp, pp;
    int cp;
} cl_coord;

cl_coord cl_mesh_coord(const cl_mesh *m, int rank); /* 0 <= rank < world */
int cl_mesh_rank(const cl_mesh *m, cl_coord c);      /* inverse of cl_mesh_coord */

typedef enum {
    CL_AXIS_TP = 0, /* same (dp, cp, pp): the shards of one layer */
    CL_AXIS_DP,     /* same (tp, cp, pp): replicas that see different samples */
    CL_AXIS_PP,     /* same (dp, cp, tp): the stages of one pipeline */
    CL_AXIS_EMBED,  /* first and last stage of one pipeline (tied embedding) */
    CL_AXIS_MP,     /* same (dp, cp): tp x pp, the model-parallel group holding one whole model */
    CL_AXIS_CP,     /* same (dp, tp, pp): the ranks of one sequence (the attention ring) */
    CL_AXIS_DPCP,   /* same (tp, pp): dp x cp, the ranks that sum gradients (ZeRO's shards) */
    CL_AXIS_COUNT
} cl_axis;

/* "tensor-parallel", "data-parallel", "pipeline-parallel", "embedding", "model-parallel",
 * "context-parallel", "data-context". */
const char *cl_axis_name(cl_axis axis);

/* Members of rank's group along axis, in increasing order; returns the count
 * (0 for a middle-stage rank on CL_AXIS_EMBED). members has room for world
 * ints (the group size along an axis is at most world; tp, dp, pp, 2,
 * tp * pp, cp or dp * cp). */
int cl_mesh_group(const cl_mesh *m, cl_axis axis, int rank, int *members);

/* Number of rank's group among the groups along axis, 0..ngroups-1 (-1 for
 * a middle-stage rank on CL_AXIS_EMBED), and the number of groups: tp groups
 * dp * cp * pp, dp groups tp * cp * pp, pp and embedding groups dp * cp * tp,
 * mp groups dp * cp, cp groups dp * tp * pp, data-context groups tp * pp. */
int cl_mesh_group_index(const cl_mesh *m, cl_axis axis, int rank);
int cl_mesh_ngroups(const cl_mesh *m, cl_axis axis);

/* Members of group number index (0 <= index < ngroups) along axis, in
 * increasing order; returns the count. members has room for world ints. */
int cl_mesh_group_members(const cl_mesh *m, cl_axis axis, int index, int *members);

/* Expert parallelism (--ep N, drawn from the data-parallel ranks as Megatron-core draws its expert-model-parallel
 * group): the expert-parallel group of a rank is N consecutive members of its data-parallel group (dp_i / N equal:
 * for dp 4, ep 2 the dp group [a, b, c, d] gives [a, b] and [c, d]); its expert-data-parallel group the dp / N
 * members that hold the same experts (dp_i mod N equal: [a, c] and [b, d]). A rank's place in its expert-parallel
 * group is dp_i mod N. cl_mesh_check_ep: CL_ERR_INVALID unless N >= 1 divides dp (cp must be 1 with N > 1: the
 * caller refuses --cp with experts). cl_mesh_ep_group: the members of rank's expert-parallel group (expert_dp 0)
 * or expert-data-parallel group (expert_dp 1), increasing; returns the count. */
cl_status cl_mesh_check_ep(const cl_mesh *m, int ep);
int cl_mesh_ep_group(const cl_mesh *m, int ep, int expert_dp, int rank, int *members);

#ifdef __cplusplus
}
#endif

#endif
