/* cleave devices and their capped, accounted allocators.
 *
 * A device is the only source of a rank's memory. Every allocation names a
 * category; the device keeps current and peak bytes per category and in
 * total, and refuses an allocation that would take the total past the cap,
 * with a message naming the category, the bytes asked, the cap and what each
 * category holds. Allocations are 64-byte aligned and zero-filled.
 *
 * A device is a struct of function pointers (cpu now; cuda later). The
 * accounting lives above the backend, so every backend enforces the same cap
 * the same way. A device is used by one rank; its counters are protected by
 * a mutex so kernels running on several threads of that rank may allocate. */
#ifndef CLEAVE_DEVICE_H
#define CLEAVE_DEVICE_H

#include "cleave/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    CL_MEM_PARAMS = 0,
    CL_MEM_GRADS,
    CL_MEM_OPTIM,
    CL_MEM_ACTS,
    CL_MEM_WORKSPACE,
    CL_MEM_COMM,
    CL_MEM_NCAT
} cl_mem_cat;

const char *cl_mem_cat_name(cl_mem_cat c); /* "params", "grads", "optimizer", ... */

typedef struct cl_device cl_device;

typedef struct {
    const char *name;                          /* "cpu" */
    /* Behaves like aligned_alloc(64, bytes) followed by memset 0; NULL on failure. */
    void *(*alloc)(void *impl, size_t bytes);
    /* Behaves like free(3); p may be NULL. */
    void (*free)(void *impl, void *p);
    /* Behaves like memcpy(3) between two pointers of this device. */
    void (*copy)(void *impl, void *dst, const void *src, size_t bytes);
} cl_device_ops;

/* cap == 0: no cap. id is the rank-local device index, for messages. */
cl_status cl_device_create_cpu(cl_device **out, size_t cap, int id);
void cl_device_destroy(cl_device *d); /* frees anything still allocated */

/* Zero-filled, 64-byte aligned. bytes == 0 gives a valid unique pointer. */
cl_status cl_device_alloc(cl_device *d, cl_mem_cat cat, size_t bytes, void **out);
/* Convenience: count floats. */
cl_status cl_device_alloc_f32(cl_device *d, cl_mem_cat cat, size_t count, float **out);
/* p may be NULL. In AddressSanitizer builds the block's bytes are set to
 * 0xFF (NaN as F32, BF16, F64) before it goes, so a stale read shows. */
void cl_device_free(cl_device *d, void *p);

size_t cl_device_cap(const cl_device *d);
size_t cl_device_current(const cl_device *d, cl_mem_cat cat);
size_t cl_device_peak(const cl_device *d, cl_mem_cat cat);
size_t cl_device_current_total(const cl_device *d);
size_t cl_device_peak_total(const cl_device *d);
void cl_device_reset_peaks(cl_device *d);
int cl_device_id(const cl_device *d);
const char *cl_device_name(const cl_device *d);

/* One line "params 1.2 MiB, grads 1.2 MiB, ..." of current bytes into buf. */
char *cl_device_describe(const cl_device *d, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
