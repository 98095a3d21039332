/* Devices and their capped, accounted allocators (see device.h): the front
 * end every backend shares. The backends' own code (the CPU's:
 * src/kernels/cpu.c) allocates, fills, copies and computes; this file only
 * counts, checks the cap and passes calls on.
 *
 * Each block carries a 64-byte header (size, category, magic) in front of the
 * pointer handed out, so freeing needs no lookup table and a bad free is
 * caught. Invariant: cur[c] is the sum of the sizes of live blocks of
 * category c; total == sum of cur; total <= cap whenever cap > 0. */
#include "cleave/device.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HDR 64
#define MAGIC 0x636c65617665ULL /* "cleave" */

/* In AddressSanitizer builds a freed block is first filled with all-one
 * bytes, a NaN as F32, BF16 and F64: ASan then quarantines the block and
 * reports an instrumented read of it, and a read it does not see (an
 * uninstrumented library, a copy through MPI) gets NaNs, which a loss or
 * a bitwise comparison shows, rather than the old values. */
#if defined(__SANITIZE_ADDRESS__)
#define CL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CL_ASAN 1
#endif
#endif
#ifndef CL_ASAN
#define CL_ASAN 0
#endif
#define FREED_BYTE 0xFF

typedef struct {
    uint64_t magic;
    uint64_t bytes;
    uint32_t cat;
} block_hdr;

struct cl_device {
    const cl_device_ops *ops;
    void *impl;
    int id;
    size_t cap;
    size_t cur[CL_MEM_NCAT], peak[CL_MEM_NCAT];
    size_t total, peak_total;
    size_t reserved; /* bytes that passed the cap check and are being asked of the host */
    int fault_cat;    /* CLEAVE_ALLOC_FAULT: the category whose fault_nth-th allocation is refused, or -1 */
    long fault_nth, nallocs[CL_MEM_NCAT];
    pthread_mutex_t mu;
};

/* CLEAVE_ALLOC_FAULT=device:ID:CATEGORY:K (tests): device ID refuses its K-th allocation of CATEGORY (a
 * cl_mem_cat_name) as over its cap, so a failure after every check passed can be tested. Another value:
 * no fault. */
static void alloc_fault(cl_device *d) {
    d->fault_cat = -1;
    const char *e = getenv("CLEAVE_ALLOC_FAULT");
    int id, used = 0;
    long nth;
    char cat[32];
    if (!e || sscanf(e, "device:%d:%31[a-z]:%ld%n", &id, cat, &nth, &used) != 3 || e[used] || id != d->id || nth < 1) return;
    for (int c = 0; c < CL_MEM_NCAT; c++)
        if (!strcmp(cat, cl_mem_cat_name(c))) d->fault_cat = c, d->fault_nth = nth;
}

const char *cl_mem_cat_name(cl_mem_cat c) {
    static const char *names[CL_MEM_NCAT] = {"params", "grads", "optimizer", "activations", "workspace", "comm"};
    return (unsigned)c < CL_MEM_NCAT ? names[c] : "?";
}

cl_status cl_device_create(cl_device **out, const cl_device_ops *ops, void *impl, size_t cap, int id) {
    *out = NULL;
    cl_device *d = calloc(1, sizeof *d);
    if (!d) return cl_error(CL_ERR_OOM, "cannot allocate a device");
    d->ops = ops;
    d->impl = impl;
    d->id = id;
    d->cap = cap;
    alloc_fault(d);
    pthread_mutex_init(&d->mu, NULL);
    *out = d;
    return CL_OK;
}

void cl_device_destroy(cl_device *d) {
    if (!d) return;
    pthread_mutex_destroy(&d->mu);
    free(d);
}

char *cl_device_describe(const cl_device *d, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = 0;
    for (int c = 0; c < CL_MEM_NCAT && used < n; c++) {
        char b[32];
        cl_format_bytes(d->cur[c], b, sizeof b);
        used += (size_t)snprintf(buf + used, n - used, "%s%s %s", c ? ", " : "", cl_mem_cat_name(c), b);
    }
    return buf;
}

cl_status cl_device_alloc(cl_device *d, cl_mem_cat cat, size_t bytes, void **out) {
    CL_ASSERT((unsigned)cat < CL_MEM_NCAT);
    *out = NULL;
    if (bytes > SIZE_MAX - 2 * HDR) return cl_error(CL_ERR_OOM, "allocation of %zu bytes is too large", bytes);
    /* the check and the reservation under one lock: two allocations at once
     * cannot both pass a cap that has room for one */
    pthread_mutex_lock(&d->mu);
    size_t held = d->total + d->reserved;
    int fault = (int)cat == d->fault_cat && ++d->nallocs[cat] == d->fault_nth;
    if (fault || (d->cap && (bytes > d->cap || held > d->cap - bytes))) {
        char asked[32], cap[32], heldb[32], desc[256];
        cl_format_bytes(bytes, asked, sizeof asked);
        if (d->cap) cl_format_bytes(d->cap, cap, sizeof cap);
        else snprintf(cap, sizeof cap, "unlimited");
        cl_format_bytes(held, heldb, sizeof heldb);
        cl_device_describe(d, desc, sizeof desc);
        pthread_mutex_unlock(&d->mu);
        return cl_error(CL_ERR_OOM,
                        "device %s:%d: %s: asked %s, %s of the %s cap held (%s)%s; raise --device-memory or split the model over more ranks",
                        d->ops->name, d->id, cl_mem_cat_name(cat), asked, heldb, cap, desc, fault ? " (refused by CLEAVE_ALLOC_FAULT)" : "");
    }
    d->reserved += bytes;
    pthread_mutex_unlock(&d->mu);
    char *raw = d->ops->alloc(d->impl, bytes + HDR);
    pthread_mutex_lock(&d->mu);
    d->reserved -= bytes;
    if (raw) {
        d->cur[cat] += bytes;
        d->total += bytes;
        if (d->cur[cat] > d->peak[cat]) d->peak[cat] = d->cur[cat];
        if (d->total > d->peak_total) d->peak_total = d->total;
    }
    pthread_mutex_unlock(&d->mu);
    if (!raw) {
        char asked[32];
        cl_format_bytes(bytes, asked, sizeof asked);
        return cl_error(CL_ERR_OOM, "device %s:%d: %s: the host refused %s", d->ops->name, d->id, cl_mem_cat_name(cat), asked);
    }
    block_hdr *h = (block_hdr *)raw;
    h->magic = MAGIC;
    h->bytes = bytes;
    h->cat = (uint32_t)cat;
    *out = raw + HDR;
    return CL_OK;
}

cl_status cl_device_alloc_f32(cl_device *d, cl_mem_cat cat, size_t count, float **out) {
    if (count > SIZE_MAX / sizeof(float)) return cl_error(CL_ERR_OOM, "allocation of %zu floats is too large", count);
    void *p;
    CL_TRY(cl_device_alloc(d, cat, count * sizeof(float), &p));
    *out = p;
    return CL_OK;
}

void cl_device_free(cl_device *d, void *p) {
    if (!p) return;
    block_hdr *h = (block_hdr *)((char *)p - HDR);
    CL_ASSERT(h->magic == MAGIC);
    CL_ASSERT(h->cat < CL_MEM_NCAT);
    pthread_mutex_lock(&d->mu);
    CL_ASSERT(d->cur[h->cat] >= h->bytes);
    d->cur[h->cat] -= h->bytes;
    d->total -= h->bytes;
    pthread_mutex_unlock(&d->mu);
    h->magic = 0;
    if (CL_ASAN) d->ops->fill(d->impl, p, FREED_BYTE, h->bytes);
    d->ops->free(d->impl, h);
}

void cl_device_fill(cl_device *d, void *dst, int byte, size_t bytes) {
    if (bytes) d->ops->fill(d->impl, dst, byte, bytes);
}
void cl_device_copy(cl_device *d, void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) d->ops->copy(d->impl, dst, src, bytes);
}
void cl_device_copy_to_host(cl_device *d, void *host, const void *src, size_t bytes) {
    if (bytes) d->ops->copy_to_host(d->impl, host, src, bytes);
}
void cl_device_copy_from_host(cl_device *d, void *dst, const void *host, size_t bytes) {
    if (bytes) d->ops->copy_from_host(d->impl, dst, host, bytes);
}

cl_status cl_device_convert(cl_device *d, void *dst, cl_dtype dt, const void *src, cl_dtype st, size_t n) {
    if (d->ops->convert(d->impl, dst, dt, src, st, n))
        return cl_error(CL_ERR_INVALID, "device %s:%d cannot convert %s to %s", d->ops->name, d->id, cl_dtype_name(st),
                        cl_dtype_name(dt));
    return CL_OK;
}

cl_status cl_device_sync(cl_device *d) {
    if (d->ops->sync(d->impl)) return cl_error(CL_ERR_INTERNAL, "device %s:%d: work issued on it failed", d->ops->name, d->id);
    return CL_OK;
}

const cl_kernels *cl_device_kernels(const cl_device *d) { return d->ops->kernels; }
const cl_device_ops *cl_device_backend(const cl_device *d) { return d->ops; }

size_t cl_device_cap(const cl_device *d) { return d->cap; }
size_t cl_device_current(const cl_device *d, cl_mem_cat c) { return d->cur[c]; }
size_t cl_device_peak(const cl_device *d, cl_mem_cat c) { return d->peak[c]; }
size_t cl_device_current_total(const cl_device *d) { return d->total; }
size_t cl_device_peak_total(const cl_device *d) { return d->peak_total; }
int cl_device_id(const cl_device *d) { return d->id; }
const char *cl_device_name(const cl_device *d) { return d->ops->name; }

void cl_device_reset_peaks(cl_device *d) {
    pthread_mutex_lock(&d->mu);
    for (int c = 0; c < CL_MEM_NCAT; c++) d->peak[c] = d->cur[c];
    d->peak_total = d->total;
    pthread_mutex_unlock(&d->mu);
}
