/* A sharded checkpoint's box arithmetic and index reader (shard_index.h). */
#include "train/shard_index.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const cl_shard_kind_key[CL_NKINDS] = {"param", "exp_avg", "exp_avg_sq"};

/* The boxes of the whole tensor that local range [a, b) of tensor-parallel
 * rank r's slice of p holds (at most 9). */
int cl_shard_slice_boxes(const cl_param_spec *p, int r, int64_t a, int64_t b, cl_box out[9]) {
    int64_t lc = cl_shard_local_cols(p), gc = cl_shard_whole_cols(p), gr = cl_shard_whole_rows(p);
    cl_box lb[3];
    int nl = 0, n = 0;
    if (a < b && a % lc) {
        int64_t e = cl_shard_min(a - a % lc + lc, b);
        lb[nl++] = (cl_box){a / lc, a % lc, 1, e - a, 0};
        a = e;
    }
    if (b - a >= lc) {
        int64_t k = (b - a) / lc;
        lb[nl++] = (cl_box){a / lc, 0, k, lc, 0};
        a += k * lc;
    }
    if (a < b) lb[nl++] = (cl_box){a / lc, 0, 1, b - a, 0};
    int64_t part = p->part, off = (int64_t)cl_param_slice_of(p, r) * part;
    int heads = p->split == CL_SPLIT_HEADS3;
    for (int i = 0; i < nl; i++)
        for (int g = 0; g < (heads ? 3 : 1); g++) {
            int64_t w = heads ? part : lc;
            int64_t c0 = cl_shard_max(lb[i].c0, g * w), c1 = cl_shard_min(lb[i].c0 + lb[i].nc, (g + 1) * w);
            if (c1 <= c0) continue;
            cl_box o = {lb[i].r0, c0, lb[i].nr, c1 - c0, lb[i].r0 * lc + c0};
            if (p->split == CL_SPLIT_ROWS) o.r0 += off;
            if (p->split == CL_SPLIT_COLS) o.c0 += off;
            if (heads) o.c0 = g * (gc / 3) + off + (c0 - g * w);
            o.nr = cl_shard_min(o.r0 + o.nr, gr) - o.r0; /* padded vocabulary rows: not data */
            if (o.nr > 0) out[n++] = o;
        }
    return n;
}

void cl_shard_index_free(cl_shard_index *ix) {
    for (int f = 0; ix->fd && f < ix->nfiles; f++)
        if (ix->fd[f] >= 0) close(ix->fd[f]);
    for (int i = 0; ix->bx && i < ix->nt * CL_NKINDS; i++) free(ix->bx[i]);
    free(ix->bx);
    free(ix->nbx);
    free(ix->fd);
    free(ix->fname);
    free(ix->seg);
}

int cl_shard_hex_parse(const char *s, uint64_t *out) {
    uint64_t v = 0;
    if (!s || strlen(s) != 16) return 0;
    for (int i = 0; i < 16; i++) {
        int d = s[i] >= '0' && s[i] <= '9' ? s[i] - '0' : s[i] >= 'a' && s[i] <= 'f' ? s[i] - 'a' + 10 : -1;
        if (d < 0) return 0;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return 1;
}

static int get_i64(const cl_json *j, int64_t *out) {
    if (!j || j->type != CL_JSON_NUMBER || !j->number_is_int) return 0;
    *out = j->integer;
    return 1;
}

static int shard_name_ok(const char *s) {
    size_t n = strlen(s);
    if (n != 5 + 5 + 12 || strncmp(s, "rank-", 5) || strcmp(s + 10, ".safetensors")) return 0;
    for (int i = 5; i < 10; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

/* Boxes of tensor p's kind k: within the matrix, of the stated bytes, and
 * covering it exactly (their areas sum to it and no two overlap). */
static cl_status check_boxes(const cl_shard_index *ix, const cl_param_spec *p, int k, const cl_sbox *b, int n) {
    int64_t R = cl_shard_whole_rows(p), C = cl_shard_whole_cols(p), area = 0;
    for (int j = 0; j < n; j++) {
        const cl_sbox *x = &b[j];
        if (x->file < 0 || x->file >= ix->nfiles)
            return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' %s box %d names file %d, not one of the %d listed", ix->path, p->name,
                            cl_shard_kind_key[k], j, x->file, ix->nfiles);
        if (x->r0 < 0 || x->c0 < 0 || x->nr < 1 || x->nc < 1 || x->nr > R - x->r0 || x->nc > C - x->c0)
            return cl_error(CL_ERR_FORMAT,
                            "%s: tensor '%s' %s box %d (rows %" PRId64 "+%" PRId64 ", columns %" PRId64 "+%" PRId64
                            ") is out of the tensor's %" PRId64 " x %" PRId64 " range",
                            ix->path, p->name, cl_shard_kind_key[k], j, x->r0, x->nr, x->c0, x->nc, R, C);
        if (x->begin < 8 || x->end < x->begin || x->end - x->begin != x->nr * x->nc * (int64_t)sizeof(float))
            return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' %s box %d: byte range [%" PRId64 ", %" PRId64 ") does not hold its %" PRId64
                            " floats",
                            ix->path, p->name, cl_shard_kind_key[k], j, x->begin, x->end, x->nr * x->nc);
        area += x->nr * x->nc;
        for (int q = 0; q < j; q++) {
            const cl_sbox *y = &b[q];
            if (x->r0 < y->r0 + y->nr && y->r0 < x->r0 + x->nr && x->c0 < y->c0 + y->nc && y->c0 < x->c0 + x->nc)
                return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' %s boxes %d and %d overlap", ix->path, p->name, cl_shard_kind_key[k], q, j);
        }
    }
    if (area != R * C)
        return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' %s: the boxes hold %" PRId64 " of its %" PRId64 " floats (a hole)", ix->path,
                        p->name, cl_shard_kind_key[k], area, R * C);
    return CL_OK;
}

cl_status cl_shard_index_parse(cl_shard_index *ix, const cl_json *root, const cl_model_desc *full) {
    const cl_json *fmt = cl_json_get(root, "format"), *ver = cl_json_get(root, "version");
    int64_t v;
    if (!fmt || fmt->type != CL_JSON_STRING || strcmp(fmt->string, CL_SHARD_FORMAT) || !get_i64(ver, &v))
        return cl_error(CL_ERR_FORMAT, "%s: not a cleave sharded checkpoint index (no \"format\" or \"version\")", ix->path);
    if (v > CL_SHARD_VERSION)
        return cl_error(CL_ERR_FORMAT, "%s: format version %" PRId64 " comes from a newer cleave (this one reads version %d)", ix->path, v,
                        CL_SHARD_VERSION);
    if (v < 1) return cl_error(CL_ERR_FORMAT, "%s: format version %" PRId64 " is not valid", ix->path, v);
    ix->version = (int)v;
    ix->full = full;
    int nel = v >= 2 ? 8 : 7; /* version 2: [..., end, "hash"] */
    const cl_json *files = cl_json_get(root, "files"), *tensors = cl_json_get(root, "tensors");
    if (!files || files->type != CL_JSON_ARRAY || !tensors || tensors->type != CL_JSON_ARRAY)
        return cl_error(CL_ERR_FORMAT, "%s: \"files\" and \"tensors\" must be arrays", ix->path);
    ix->nfiles = files->count;
    ix->nt = full->nparams;
    ix->fname = calloc((size_t)(ix->nfiles ? ix->nfiles : 1), sizeof *ix->fname);
    ix->fd = malloc((size_t)(ix->nfiles ? ix->nfiles : 1) * sizeof *ix->fd);
    ix->bx = calloc((size_t)ix->nt * CL_NKINDS, sizeof *ix->bx);
    ix->nbx = calloc((size_t)ix->nt * CL_NKINDS, sizeof *ix->nbx);
    for (int f = 0; ix->fd && f < ix->nfiles; f++) ix->fd[f] = -1;
    if (!ix->fname || !ix->fd || !ix->bx || !ix->nbx) return cl_error(CL_ERR_OOM, "%s: cannot allocate the index", ix->path);
    int f = 0;
    for (const cl_json *e = files->child; e; e = e->next, f++) {
        const cl_json *nm = cl_json_get(e, "name");
        if (!nm || nm->type != CL_JSON_STRING || !shard_name_ok(nm->string))
            return cl_error(CL_ERR_FORMAT, "%s: file %d has no name of the form rank-NNNNN.safetensors", ix->path, f);
        snprintf(ix->fname[f], sizeof ix->fname[f], "%s", nm->string);
        for (int q = 0; q < f; q++)
            if (!strcmp(ix->fname[q], ix->fname[f])) return cl_error(CL_ERR_FORMAT, "%s: file %s is listed twice", ix->path, nm->string);
    }
    if (tensors->count != full->nparams)
        return cl_error(CL_ERR_FORMAT, "%s: %d tensors listed, the model has %d", ix->path, tensors->count, full->nparams);
    int i = 0;
    for (const cl_json *e = tensors->child; e; e = e->next, i++) {
        const cl_param_spec *p = &full->params[i];
        const cl_json *nm = cl_json_get(e, "name"), *sh = cl_json_get(e, "shape"), *dt = cl_json_get(e, "dtype");
        if (!nm || nm->type != CL_JSON_STRING || strcmp(nm->string, p->name))
            return cl_error(CL_ERR_FORMAT, "%s: tensor %d is not '%s' (the model's tensors in order)", ix->path, i, p->name);
        if (!dt || dt->type != CL_JSON_STRING || strcmp(dt->string, "F32"))
            return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' is not F32", ix->path, p->name);
        int ok = sh && sh->type == CL_JSON_ARRAY && sh->count == p->ndim;
        int d = 0;
        for (const cl_json *x = ok ? sh->child : NULL; x && ok; x = x->next, d++) ok = get_i64(x, &v) && v == p->full_shape[d];
        if (!ok) return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' has a shape that disagrees with the config", ix->path, p->name);
        for (int k = 0; k < CL_NKINDS; k++) {
            const cl_json *l = cl_json_get(e, cl_shard_kind_key[k]);
            if (!l || l->type != CL_JSON_ARRAY)
                return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' has no \"%s\" box list", ix->path, p->name, cl_shard_kind_key[k]);
            cl_sbox *b = malloc((size_t)(l->count ? l->count : 1) * sizeof *b);
            if (!b) return cl_error(CL_ERR_OOM, "%s: cannot allocate the index", ix->path);
            ix->bx[i * CL_NKINDS + k] = b;
            int j = 0;
            for (const cl_json *x = l->child; x; x = x->next, j++) {
                int64_t a[7];
                uint64_t h = 0;
                int q = 0, good = x->type == CL_JSON_ARRAY && x->count == nel;
                for (const cl_json *y = good ? x->child : NULL; y && good; y = y->next, q++)
                    good = q < 7 ? get_i64(y, &a[q]) : y->type == CL_JSON_STRING && cl_shard_hex_parse(y->string, &h);
                if (!good || a[0] < 0 || a[0] > INT32_MAX)
                    return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' %s box %d is not [file, row, column, rows, columns, begin, end%s]",
                                    ix->path, p->name, cl_shard_kind_key[k], j, nel == 8 ? ", \"hash\"" : "");
                b[j] = (cl_sbox){(int)a[0], a[1], a[2], a[3], a[4], a[5], a[6], h};
            }
            ix->nbx[i * CL_NKINDS + k] = j;
            CL_TRY(check_boxes(ix, p, k, b, j));
        }
    }
    return CL_OK;
}
