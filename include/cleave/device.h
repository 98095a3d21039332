/* cleave devices and their capped, accounted allocators.
 *
 * A device is the only source of a rank's memory. Every allocation names a
 * category; the device keeps current and peak bytes per category and in
 * total, and refuses an allocation that would take the total past the cap,
 * with a message naming the category, the bytes asked, the cap and what each
 * category holds. Allocations are 64-byte aligned and zero-filled.
 *
 * A device is a backend: a table of memory operations (allocate, free,
 * fill, copy within the device and to and from the host, convert between
 * number formats) and a table of the kernels that run on its memory
 * (struct cl_kernels, internal: src/cleave/backend.h). Code outside a
 * backend touches device memory only through these (cpu now, in
 * src/kernels/cpu.c; a GPU later, see docs/ARCHITECTURE.md). The accounting
 * lives above the backend, so every backend enforces the same cap the same
 * way. A device is used by one rank; its counters are protected by a mutex
 * so kernels running on several threads of that rank may allocate. */
#ifndef CLEAVE_DEVICE_H
#define CLEAVE_DEVICE_H

#include "cleave/core.h"
#include "cleave/tensor.h"

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
typedef struct cl_kernels cl_kernels; /* a backend's kernels (internal: src/cleave/backend.h) */

/* A backend. Every entry is non-NULL. Pointers called "device" are this
 * device's memory; "host" ones the program's. */
typedef struct {
    const char *name;                          /* "cpu" */
    /* Behaves like aligned_alloc(64, bytes) followed by memset 0; NULL on failure. */
    void *(*alloc)(void *impl, size_t bytes);
    /* Behaves like free(3); p may be NULL. */
    void (*free)(void *impl, void *p);
    /* Behaves like memset(3) on device memory. */
    void (*fill)(void *impl, void *dst, int byte, size_t bytes);
    /* Behaves like memmove(3) between two ranges of this device. */
    void (*copy)(void *impl, void *dst, const void *src, size_t bytes);
    /* device -> host, host -> device (memcpy on the CPU; the ranges do not overlap). */
    void (*copy_to_host)(void *impl, void *host, const void *src, size_t bytes);
    void (*copy_from_host)(void *impl, void *dst, const void *host, size_t bytes);
    /* n values from src in format st to dst in format dt, on the device
     * (dst and src do not overlap unless the formats are equal and dst ==
     * src); 0 when done, -1 when the backend cannot convert st to dt. */
    int (*convert)(void *impl, void *dst, cl_dtype dt, const void *src, cl_dtype st, size_t n);
    /* Waits until every kernel and copy issued on the device has finished;
     * 0, or -1 when one of them failed. A no-op on the CPU, whose kernels
     * and copies are done when they return. */
    int (*sync)(void *impl);
    const cl_kernels *kernels;
} cl_device_ops;

/* cap == 0: no cap. id is the rank-local device index, for messages. The
 * CPU backend (src/kernels/cpu.c). */
cl_status cl_device_create_cpu(cl_device **out, size_t cap, int id);
/* A device over a backend's ops (kept, not copied) and its state impl. */
cl_status cl_device_create(cl_device **out, const cl_device_ops *ops, void *impl, size_t cap, int id);
void cl_device_destroy(cl_device *d); /* frees anything still allocated */

/* Zero-filled, 64-byte aligned. bytes == 0 gives a valid unique pointer.
 * Over the cap: CL_ERR_OOM naming the device, the category and what it holds.
 * Tests: CLEAVE_ALLOC_FAULT=device:ID:CATEGORY:K (CATEGORY a cl_mem_cat_name)
 * makes device ID refuse its K-th allocation of that category the same way. */
cl_status cl_device_alloc(cl_device *d, cl_mem_cat cat, size_t bytes, void **out);
/* Convenience: count floats. */
cl_status cl_device_alloc_f32(cl_device *d, cl_mem_cat cat, size_t count, float **out);
/* p may be NULL. In AddressSanitizer builds the block's bytes are set to
 * 0xFF (NaN as F32, BF16, F64) before it goes, so a stale read shows. */
void cl_device_free(cl_device *d, void *p);

/* Device memory through the backend (the only way code outside a backend
 * touches it): memset, memmove, copies to and from host memory. */
void cl_device_fill(cl_device *d, void *dst, int byte, size_t bytes);
void cl_device_copy(cl_device *d, void *dst, const void *src, size_t bytes);
void cl_device_copy_to_host(cl_device *d, void *host, const void *src, size_t bytes);
void cl_device_copy_from_host(cl_device *d, void *dst, const void *host, size_t bytes);
/* n values, st -> dt, on the device: F32 <-> BF16 (round to nearest even,
 * NaN kept quiet) and any format to itself; CL_ERR_INVALID naming both
 * formats when the backend cannot. */
cl_status cl_device_convert(cl_device *d, void *dst, cl_dtype dt, const void *src, cl_dtype st, size_t n);
/* The backend's sync: called before the host reads device memory it did
 * not copy itself (the step's loss and gradient-norm sums, a checkpoint
 * save) and before a time is taken; CL_ERR_INTERNAL naming the device when
 * work issued on it failed. */
cl_status cl_device_sync(cl_device *d);
/* The backend's kernel table (src/cleave/backend.h). */
const cl_kernels *cl_device_kernels(const cl_device *d);
const cl_device_ops *cl_device_backend(const cl_device *d);

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
