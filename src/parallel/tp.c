/* The tensor-parallel region mappings (see include/cleave/tp.h).
 *
 * Why one function per direction with the mapping as an argument: the
 * four mappings are two pairs of transposes, and writing each direction
 * once makes that visible: forward of COPY is backward of REDUCE, forward
 * of GATHER is backward of SCATTER, and so on. */
#include "cleave/tp.h"

#include <string.h>

const char *cl_tp_mapping_name(cl_tp_mapping m) {
    static const char *names[] = {"copy", "reduce", "gather", "scatter"};
    return (unsigned)m < CL_TP_NMAPPINGS ? names[m] : "?";
}

cl_tp cl_tp_of(cl_comm *comm) {
    cl_tp t = {comm, comm ? cl_comm_size(comm) : 1, comm ? cl_comm_rank(comm) : 0};
    if (t.size <= 1) t = (cl_tp){NULL, 1, 0};
    return t;
}

typedef enum { OP_IDENTITY, OP_ALLREDUCE, OP_ALLGATHER, OP_REDUCE_SCATTER } tp_op;

static cl_status run(const cl_tp *tp, tp_op op, const void *in, void *out, size_t n, cl_dtype dt) {
    if (tp->size <= 1 || op == OP_IDENTITY) {
        if (in != out) memmove(out, in, n * cl_dtype_size(dt));
        return CL_OK;
    }
    switch (op) {
    case OP_ALLREDUCE:
        if (in != out) memmove(out, in, n * cl_dtype_size(dt));
        return cl_comm_allreduce(tp->comm, out, n, dt, CL_RED_SUM);
    case OP_ALLGATHER: return cl_comm_allgather_n(tp->comm, in, out, n, dt);
    case OP_REDUCE_SCATTER: return cl_comm_reduce_scatter(tp->comm, in, out, n, dt, CL_RED_SUM);
    default: break;
    }
    return cl_error(CL_ERR_INTERNAL, "unknown tensor-parallel operation %d", (int)op);
}

/* forward, backward of each mapping: each row is the reverse of another */
static const tp_op ops[CL_TP_NMAPPINGS][2] = {
    [CL_TP_COPY] = {OP_IDENTITY, OP_ALLREDUCE},
    [CL_TP_REDUCE] = {OP_ALLREDUCE, OP_IDENTITY},
    [CL_TP_GATHER] = {OP_ALLGATHER, OP_REDUCE_SCATTER},
    [CL_TP_SCATTER] = {OP_REDUCE_SCATTER, OP_ALLGATHER},
};

static cl_status map(const cl_tp *tp, cl_tp_mapping m, int dir, const void *in, void *out, size_t n, cl_dtype dt) {
    if ((unsigned)m >= CL_TP_NMAPPINGS) return cl_error(CL_ERR_INVALID, "unknown tensor-parallel mapping %d", (int)m);
    return run(tp, ops[m][dir], in, out, n, dt);
}

cl_status cl_tp_forward(const cl_tp *tp, cl_tp_mapping m, const float *in, float *out, size_t n) {
    return map(tp, m, 0, in, out, n, CL_F32);
}

cl_status cl_tp_backward(const cl_tp *tp, cl_tp_mapping m, const float *in, float *out, size_t n) {
    return map(tp, m, 1, in, out, n, CL_F32);
}

cl_status cl_tp_forward_n(const cl_tp *tp, cl_tp_mapping m, const void *in, void *out, size_t n, cl_dtype dt) {
    return map(tp, m, 0, in, out, n, dt);
}
