/* cl_hash64: XXH64 from the xxHash library (Debian's libxxhash-dev).
 *
 * Why: the token cache records a hash of the text it was made from and a
 * checksum of its own content; XXH64 runs at several GB/s, so hashing a few
 * MB of text on every start costs about a millisecond. The library replaces
 * the hand-written XXH64 this file held: the values are the same (XXH64 is
 * a fixed algorithm), so token caches written before stay valid.
 * Invariants: XXH64 reads its input as little-endian lanes whatever the
 * host's byte order, so a hash is the same on every machine (test_data
 * checks the specification's known values). */
#include "cleave/core.h"

#include <errno.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#include <xxhash.h>
#include <xxh_x86dispatch.h>

uint64_t cl_hash64(const void *data, size_t len, uint64_t seed) {
    static const char none = 0;
    return XXH64(len ? data : &none, len, seed); /* data may be NULL when len is 0 */
}

/* ---- the checkpoint hash: XXH3-64 per CL_HASH_BLOCK bytes, summed ---------- */

struct cl_hasher {
    XXH3_state_t *st;
    uint64_t sum, block;
    size_t fill; /* bytes of the current block fed */
};

/* The library's dispatching entry points pick the widest vector unit the CPU
 * has (SSE2, AVX2, AVX-512) at run time: XXH3 runs 3 to 4 times faster on
 * AVX-512 than the plain entry points, which are built for SSE2 (Debian's
 * build); the values are the same. */
uint64_t cl_hash_block(const void *data, size_t len, uint64_t j) {
    static const char none = 0;
    return XXH3_64bits_withSeed_dispatch(len ? data : &none, len, j);
}

/* The blocks are independent and their sum does not depend on the order,
 * so they are shared out over the rank's threads (cl_set_threads). */
uint64_t cl_hash_sum(const void *data, size_t len) {
    const unsigned char *p = data;
    int64_t nb = (int64_t)((len + CL_HASH_BLOCK - 1) / CL_HASH_BLOCK);
    uint64_t sum = 0;
#pragma omp parallel for schedule(static) reduction(+ : sum) if (nb > 1)
    for (int64_t j = 0; j < nb; j++) {
        size_t at = (size_t)j * CL_HASH_BLOCK, take = len - at < CL_HASH_BLOCK ? len - at : CL_HASH_BLOCK;
        sum += cl_hash_block(p + at, take, (uint64_t)j);
    }
    return sum;
}

cl_hasher *cl_hasher_new(void) {
    cl_hasher *h = calloc(1, sizeof *h);
    if (h && !(h->st = XXH3_createState())) {
        free(h);
        return NULL;
    }
    if (h) cl_hasher_reset(h, 0);
    return h;
}

void cl_hasher_reset(cl_hasher *h, uint64_t first) {
    h->sum = 0;
    h->block = first;
    h->fill = 0;
    XXH3_64bits_reset_withSeed(h->st, first);
}

void cl_hasher_feed(cl_hasher *h, const void *p, size_t n) {
    const unsigned char *q = p;
    while (n) {
        size_t take = CL_HASH_BLOCK - h->fill < n ? CL_HASH_BLOCK - h->fill : n;
        XXH3_64bits_update_dispatch(h->st, q, take);
        h->fill += take;
        q += take;
        n -= take;
        if (h->fill == CL_HASH_BLOCK) {
            h->sum += XXH3_64bits_digest(h->st);
            XXH3_64bits_reset_withSeed(h->st, ++h->block);
            h->fill = 0;
        }
    }
}

uint64_t cl_hasher_sum(cl_hasher *h) { return h->sum + (h->fill ? XXH3_64bits_digest(h->st) : 0); }

void cl_hasher_free(cl_hasher *h) {
    if (!h) return;
    XXH3_freeState(h->st);
    free(h);
}

/* ---- reading and hashing together ------------------------------------------------- */

#define READ_PIECE ((int64_t)4 << 20) /* bytes: one pread; a few blocks, well inside the last-level cache */

/* The blocks of blk from *c on that end by `upto` and begin at or after
 * off (the first byte of dst), hashed from dst; *c moves past them. */
static void hash_upto(cl_hash_blk *blk, int n, int *c, int64_t off, const unsigned char *dst, int64_t upto) {
    for (; *c < n && blk[*c].end <= upto; ++*c) {
        cl_hash_blk *b = &blk[*c];
        if (b->begin < off) continue; /* starts before this read: not all here */
        b->hash = cl_hash_block(dst + (b->begin - off), (size_t)(b->end - b->begin), b->seed);
        b->done = 1;
    }
}

/* Piece k of the read whole into dst; returns 0, or errno (-1 for a short file). */
static int read_piece(int fd, unsigned char *dst, int64_t off, int64_t len, int64_t k, _Atomic int64_t *got) {
    int64_t at = k * READ_PIECE, end = at + READ_PIECE < len ? at + READ_PIECE : len;
    while (at < end) {
        ssize_t r = pread(fd, dst + at, (size_t)(end - at), off + at);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return r < 0 ? errno : -1;
        at += r;
        atomic_store(got, at);
    }
    return 0;
}

int64_t cl_pread_hashed(int fd, void *dst, int64_t off, int64_t len, cl_hash_blk *blk, int n) {
    unsigned char *d = dst;
    int lo = 0, hi = n;
    while (lo < hi) { /* the first block that begins at or after off */
        int mid = (lo + hi) / 2;
        if (blk[mid].begin < off) lo = mid + 1;
        else hi = mid;
    }
    int c = lo;
    _Atomic int64_t got = 0;
    int err = 0;
    int64_t np = (len + READ_PIECE - 1) / READ_PIECE;
    int two = np > 1 && c < n && blk[c].end <= off + len && omp_get_max_threads() > 1;
    if (!two) {
        for (int64_t k = 0; k < np && !err; k++) {
            err = read_piece(fd, d, off, len, k, &got);
            hash_upto(blk, n, &c, off, d, off + atomic_load(&got));
        }
    } else {
#pragma omp parallel num_threads(2)
        {
            int me = omp_get_thread_num();
            for (int64_t k = 0; k <= np; k++) { /* thread 0 reads piece k while thread 1 hashes what is read */
                if (me == 0 && k < np && !err) err = read_piece(fd, d, off, len, k, &got);
                if (me == 1) hash_upto(blk, n, &c, off, d, off + atomic_load(&got));
#pragma omp barrier
            }
        }
        hash_upto(blk, n, &c, off, d, off + atomic_load(&got));
    }
    if (err) errno = err > 0 ? err : 0;
    return atomic_load(&got);
}
