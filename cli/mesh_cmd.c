/* `cleave mesh`: prints how a world of ranks is arranged as dp x cp x tp x pp and
 * every communication group, as Megatron-LM's documentation lists them, so a
 * layout can be checked before a run. Pure arithmetic over cl_mesh; starts
 * no ranks.
 *
 * Sizes left out: with --ranks, the first of --dp, --tp, --pp left out is
 * derived and the others are 1 (so `--ranks 8 --tp 2` gives dp 4, pp 1);
 * without --ranks, sizes left out are 1 and the world is their product.
 * --cp is never derived (default 1); with cp 1 the output is dp x tp x pp's.
 * Errors exit 2 with one line (cli_fail). */
#include "args.h"
#include "cleave/mesh.h"

#include <stdio.h>
#include <stdlib.h>

#define MESH_MAX_RANKS (1 << 16)

static const cli_flag mesh_flags[] = {
    {"help", "h", 0, "show this help"},
    {"ranks", "", 1, "world size (default: the product of the sizes)"},
    {"dp", "", 1, "data-parallel size: model replicas"},
    {"tp", "", 1, "tensor-parallel size: shards of each layer"},
    {"pp", "", 1, "pipeline-parallel size: stages"},
    {"cp", "", 1, "context-parallel size: ranks sharing each sequence (default 1)"},
    {"context-parallel-size", "", 1, "same as --cp"},
    {"ep", "", 1, "expert-parallel size: ep consecutive data-parallel ranks split the experts (default 1)"},
    {"expert-model-parallel-size", "", 1, "same as --ep"},
    {"data-parallel-size", "", 1, "same as --dp"},
    {"tensor-model-parallel-size", "", 1, "same as --tp"},
    {"pipeline-model-parallel-size", "", 1, "same as --pp"},
};

/* One size from its short flag or its Megatron-style long form; *given says whether either was given. */
static cl_status get_size(const cli_args *a, const char *name, const char *longname, int *out, int *given) {
    const char *s = cli_get(a, name), *l = cli_get(a, longname);
    if (s && l) return cl_error(CL_ERR_INVALID, "--%s and --%s are the same flag; give one of them", name, longname);
    *given = s || l;
    return cli_int(a, s ? name : longname, out, 1, MESH_MAX_RANKS);
}

/* Expert parallelism's groups (cl_mesh_ep_group): each listed once, at its smallest member. */
static void print_ep_groups(const cl_mesh *m, int ep, int expert_dp, int *mem) {
    printf("%-25s", expert_dp ? "expert-data groups:" : "expert-parallel groups:");
    for (int r = 0; r < m->world; r++) {
        int n = cl_mesh_ep_group(m, ep, expert_dp, r, mem);
        if (mem[0] != r) continue;
        printf(" [");
        for (int i = 0; i < n; i++) printf("%s%d", i ? ", " : "", mem[i]);
        printf("]");
    }
    printf("\n");
}

static void print_groups(const cl_mesh *m, cl_axis axis, int *mem) {
    char label[48];
    snprintf(label, sizeof label, "%s groups:", cl_axis_name(axis));
    printf("%-25s", label);
    for (int g = 0; g < cl_mesh_ngroups(m, axis); g++) {
        int n = cl_mesh_group_members(m, axis, g, mem);
        printf(" [");
        for (int i = 0; i < n; i++) printf("%s%d", i ? ", " : "", mem[i]);
        printf("]");
    }
    printf("\n");
}

int cleave_cmd_mesh(int argc, char **argv) {
    cli_args a;
    cl_status s = cli_parse(&a, mesh_flags, NFLAGS(mesh_flags), argc, argv, 2);
    if (s) return cli_fail(s);
    if (cli_get(&a, "help")) {
        cli_print_help("usage: cleave mesh [--ranks N] [--dp D] [--cp C] [--tp T] [--pp P] [--ep E]\n\n"
                       "Prints how N ranks are arranged as dp x cp x tp x pp and every communication group.\n"
                       "Ranks are numbered as Megatron-LM does, tp fastest, then cp, then dp, then pp:\n"
                       "rank = tp_i + tp * (cp_i + cp * (dp_i + dp * pp_i)).\n\n"
                       "With --ranks, the first of --dp, --tp, --pp left out is derived from it and the\n"
                       "others left out are 1 (--ranks 8 --tp 2 gives dp 4, pp 1); without --ranks, sizes\n"
                       "left out are 1 and the world is their product. Embedding groups join the first and\n"
                       "last pipeline stage of each (dp, tp) pair; model-parallel groups hold the tp x pp\n"
                       "ranks of one model replica. With --cp, context-parallel groups share one sequence\n"
                       "(--cp is never derived) and data-context groups (dp x cp) sum the gradients. With --ep,\n"
                       "expert-parallel groups are ep consecutive members of each data-parallel group (they\n"
                       "split the experts, Megatron-core's rule) and expert-data groups the dp / ep members\n"
                       "computing the same experts.",
                       mesh_flags, NFLAGS(mesh_flags));
        return 0;
    }
    static const char *const names[3][2] = {
        {"dp", "data-parallel-size"}, {"tp", "tensor-model-parallel-size"}, {"pp", "pipeline-model-parallel-size"}};
    int size[3] = {1, 1, 1}, given[3], world = 0;
    for (int i = 0; i < 3; i++)
        if ((s = get_size(&a, names[i][0], names[i][1], &size[i], &given[i]))) return cli_fail(s);
    int cp = 1, cp_given;
    if ((s = get_size(&a, "cp", "context-parallel-size", &cp, &cp_given))) return cli_fail(s);
    if ((s = cli_int(&a, "ranks", &world, 1, MESH_MAX_RANKS))) return cli_fail(s);
    int ep = 1, ep_given;
    if ((s = get_size(&a, "ep", "expert-model-parallel-size", &ep, &ep_given))) return cli_fail(s);
    if (cli_get(&a, "ranks")) {
        for (int i = 0; i < 3; i++)
            if (!given[i]) {
                size[i] = 0;
                break;
            }
    } else {
        long long p = (long long)size[0] * size[1] * size[2] * cp;
        if (p > MESH_MAX_RANKS)
            return cli_fail(cl_error(CL_ERR_INVALID, "--dp %d x --tp %d x --pp %d = %lld ranks; at most %d", size[0], size[1], size[2], p,
                                     MESH_MAX_RANKS));
        world = (int)p;
    }
    cl_mesh m;
    if ((s = cl_mesh_init_cp(&m, world, size[0], cp, size[1], size[2]))) return cli_fail(s);
    if ((s = cl_mesh_check_ep(&m, ep))) return cli_fail(s);
    int *mem = malloc((size_t)m.world * sizeof *mem);
    if (!mem) return cli_fail(cl_error(CL_ERR_OOM, "cannot allocate %d ranks", m.world));

    if (m.cp > 1)
        printf("mesh: %d ranks = dp %d x cp %d x tp %d x pp %d (tp fastest, then cp, then dp, then pp)\n", m.world, m.dp, m.cp, m.tp, m.pp);
    else
        printf("mesh: %d rank%s = dp %d x tp %d x pp %d (tp fastest, then dp, then pp)\n", m.world, m.world == 1 ? "" : "s", m.dp, m.tp,
               m.pp);
    static const cl_axis order[] = {CL_AXIS_TP, CL_AXIS_CP, CL_AXIS_DP, CL_AXIS_PP, CL_AXIS_EMBED, CL_AXIS_MP, CL_AXIS_DPCP};
    for (int i = 0; i < 7; i++)
        if (m.cp > 1 || (order[i] != CL_AXIS_CP && order[i] != CL_AXIS_DPCP)) print_groups(&m, order[i], mem);
    if (ep > 1) {
        printf("experts: split over ep %d consecutive data-parallel ranks (dp_i / %d), each computing E / %d\n", ep, ep, ep);
        print_ep_groups(&m, ep, 0, mem);
        print_ep_groups(&m, ep, 1, mem);
    }
    for (int r = 0; r < m.world; r++) {
        cl_coord c = cl_mesh_coord(&m, r);
        int e = cl_mesh_group_index(&m, CL_AXIS_EMBED, r);
        char emb[16];
        if (e < 0) snprintf(emb, sizeof emb, "-");
        else snprintf(emb, sizeof emb, "%d", e);
        if (m.cp > 1)
            printf("rank %d: dp %d, cp %d, tp %d, pp %d | groups: tp %d, cp %d, dp %d, pp %d, embedding %s, mp %d, data-context %d\n", r,
                   c.dp, c.cp, c.tp, c.pp, cl_mesh_group_index(&m, CL_AXIS_TP, r), cl_mesh_group_index(&m, CL_AXIS_CP, r),
                   cl_mesh_group_index(&m, CL_AXIS_DP, r), cl_mesh_group_index(&m, CL_AXIS_PP, r), emb, cl_mesh_group_index(&m, CL_AXIS_MP, r),
                   cl_mesh_group_index(&m, CL_AXIS_DPCP, r));
        else
            printf("rank %d: dp %d, tp %d, pp %d | groups: tp %d, dp %d, pp %d, embedding %s, mp %d\n", r, c.dp, c.tp, c.pp,
                   cl_mesh_group_index(&m, CL_AXIS_TP, r), cl_mesh_group_index(&m, CL_AXIS_DP, r), cl_mesh_group_index(&m, CL_AXIS_PP, r),
                   emb, cl_mesh_group_index(&m, CL_AXIS_MP, r));
    }
    free(mem);
    return 0;
}
