/* cleave core: status codes, the per-thread last-error message, and small
 * helpers every module uses.
 *
 * Contract: every public function that can fail returns a cl_status. On
 * failure it has set a one-line message (cl_last_error) that a person can act
 * on: what was asked, what was found, what would fix it. Only the command-line
 * front end exits; the library never calls exit() or abort() except through
 * CL_ASSERT, which guards broken invariants (bugs), not bad input. */
#ifndef CLEAVE_CORE_H
#define CLEAVE_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    CL_OK = 0,
    CL_ERR_INVALID,     /* a bad argument or configuration (the user's to fix) */
    CL_ERR_OOM,         /* a device allocation exceeded the cap, or the host refused */
    CL_ERR_IO,          /* a file could not be opened, read or written */
    CL_ERR_FORMAT,      /* a file was read but its contents are malformed */
    CL_ERR_UNSUPPORTED, /* asked for something this build or backend lacks */
    CL_ERR_COMM,        /* a communicator failed or timed out */
    CL_ERR_INTERNAL,    /* a bug: an invariant did not hold */
    CL_ERR_NUMERIC      /* training went non-finite (a loss or gradient norm of inf or nan) */
} cl_status;

const char *cl_status_name(cl_status s);

/* Sets this thread's last-error message (printf-style) and returns s, so
 * that `return cl_error(CL_ERR_INVALID, "heads (%d) must divide channels (%d)", h, c);`
 * reads as one statement. The message is kept until the next cl_error. */
cl_status cl_error(cl_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prefixes the current message with more context ("loading X: " + old); the
 * ": " is added here, so fmt ends without one (a trailing ":" or space is dropped). */
cl_status cl_error_context(cl_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
const char *cl_last_error(void);
void cl_error_clear(void);

#define CL_TRY(expr)                          \
    do {                                      \
        cl_status cl_try_s_ = (expr);         \
        if (cl_try_s_ != CL_OK) return cl_try_s_; \
    } while (0)

/* Broken invariants only: prints file, line and the expression, then aborts. */
void cl_assert_fail(const char *expr, const char *file, int line);
#define CL_ASSERT(e) ((e) ? (void)0 : cl_assert_fail(#e, __FILE__, __LINE__))

/* Byte sizes as people write them: "512MiB", "1.5GiB", "4096", "64KiB", "2GB"
 * (B, KB/KiB, MB/MiB, GB/GiB; KB etc. are taken as powers of 1024 too, and
 * said so in --help). Zero and negative sizes are errors. */
cl_status cl_parse_bytes(const char *s, size_t *out);
/* "123.4 MiB" into buf (n >= 16). Returns buf. */
char *cl_format_bytes(size_t bytes, char *buf, size_t n);

/* A growing array: *array (a pointer to elem-byte elements, passed by its
 * address) with room for element n. When n reaches *cap it is reallocated
 * to twice *cap elements (first when *cap is 0); CL_ERR_OOM "cannot
 * allocate WHAT" when that fails or the size overflows, the array then
 * as it was (the caller frees it). */
cl_status cl_grow(void *array, size_t elem, size_t n, size_t *cap, size_t first, const char *what);

/* x86 features of this CPU (0 elsewhere), read once: CL_CPU_* bits. Every
 * run-time choice of a vector path (the comm fold, the kernels, bench peak)
 * asks here. */
enum { CL_CPU_AVX2 = 1, CL_CPU_FMA = 2, CL_CPU_AVX512F = 4, CL_CPU_AVX512BF16 = 8 };
unsigned cl_cpu_features(void);

/* Paths cleave writes: at most CL_PATH_MAX characters (buffers hold 4096). */
#define CL_PATH_MAX 4000

/* Checks, before any work, that a file can be written whole to path later:
 * a non-empty path of at most CL_PATH_MAX characters, nothing but a regular
 * file there now, and its directory writable (a probe file is created and
 * removed). `what` names the flag in messages ("--trace"). */
cl_status cl_check_output_path(const char *path, const char *what);
/* The directory part of path ("." when there is none, "/" for the root) into buf. */
void cl_parent_dir(const char *path, char *buf, size_t n);
/* dir exists and a file can be created there (a probe is created and removed). */
cl_status cl_check_dir_writable(const char *dir, const char *what);
/* Writes buf to a fresh temporary file beside path, fsyncs it and renames it
 * onto path: readers see the old file or the whole new one. Refuses, as
 * cl_check_output_path does, to replace anything but a regular file. */
cl_status cl_write_file_atomic(const char *path, const void *buf, size_t len, const char *what);
/* Host memory this process could still get: MemAvailable, or less when a
 * cgroup (v2) limit leaves less room; 0 when neither can be read. */
size_t cl_host_memory_available(void);
/* Memory this process may hold at most: physical memory, or less when a
 * cgroup (v2) limit, RLIMIT_AS or RLIMIT_DATA allows less. */
size_t cl_host_memory_total(void);

/* The files cleave reads whole, by kind, each with a size bound that fits
 * it (docs/ARCHITECTURE.md, Reliability: "Files read whole"). A reader
 * stops at the bound: it reads at most bound + 1 bytes, of a pipe or a
 * device too, and refuses the file (CL_ERR_FORMAT) with cl_file_too_big's
 * message. */
typedef enum {
    CL_FILE_JSON,      /* a hardware description, a checkpoint's config or state, a Hugging Face config.json */
    CL_FILE_INDEX,     /* a sharded checkpoint's index.json */
    CL_FILE_TOKENIZER, /* a GPT-2 tokenizer's encoder.json or vocab.bpe */
    CL_FILE_TRACE,     /* a Chrome trace (cleave trace --input) */
    CL_FILE_LOG,       /* a training log of JSON lines (cleave plot) */
    CL_FILE_DIGITS,    /* a digits CSV, decompressed */
    CL_FILE_TEXT,      /* a text corpus (train --data, eval --text) */
    CL_FILE_TOKENS,    /* a token cache made from such a text */
    CL_FILE_TENSORS,   /* a single-file checkpoint's safetensors, read whole */
    CL_FILE_NKINDS
} cl_file_kind;
/* The most bytes a file of kind k may hold (the memory-sized kinds follow
 * cl_host_memory_total). */
size_t cl_file_bound(cl_file_kind k);
/* The refusal of path, a file of kind k over its bound: CL_ERR_FORMAT with
 * "PATH holds [N bytes,] more than BOUND (N bytes), the most cleave reads of
 * KIND (WHY)".
 * size is the file's size when known (a regular file), else 0. */
cl_status cl_file_too_big(const char *path, cl_file_kind k, uint64_t size);

/* xxHash64 (Yann Collet's XXH64, as its published specification defines
 * it) of len bytes with a seed: a fast non-cryptographic 64-bit hash for
 * noticing changed or damaged data, not for resisting an adversary. */
uint64_t cl_hash64(const void *data, size_t len, uint64_t seed);

/* A checkpoint's content hash (docs/ARCHITECTURE.md, "Checkpoint
 * integrity"): the bytes cut into CL_HASH_BLOCK-byte blocks, block j hashed
 * with XXH3-64 seeded j, the block hashes summed modulo 2^64. A sum, so that
 * blocks hashed apart (by different ranks, each from what it read) add up
 * to the hash of the whole. Like cl_hash64, for noticing damage, not an
 * adversary. cl_hasher streams it: reset to block `first` (a part that
 * starts there), feed bytes in order, sum. */
#define CL_HASH_BLOCK ((size_t)1 << 20)
typedef struct cl_hasher cl_hasher;
cl_hasher *cl_hasher_new(void); /* NULL when out of memory */
void cl_hasher_reset(cl_hasher *h, uint64_t first);
void cl_hasher_feed(cl_hasher *h, const void *p, size_t n);
uint64_t cl_hasher_sum(cl_hasher *h); /* the fed bytes' hash; ends a partial block */
void cl_hasher_free(cl_hasher *h);
uint64_t cl_hash_sum(const void *data, size_t len); /* all at once (allocates nothing) */
/* XXH3-64 of one block (index j): the term cl_hash_sum adds for it. */
uint64_t cl_hash_block(const void *data, size_t len, uint64_t j);

/* Monotonic wall clock in seconds. */
double cl_now(void);

/* Deterministic RNG (xoshiro256** seeded by splitmix64): the same seed gives
 * the same stream on every machine. State is 4 words, so it can be saved in
 * a checkpoint and restored. */
typedef struct { uint64_t s[4]; } cl_rng;
void cl_rng_seed(cl_rng *r, uint64_t seed);
uint64_t cl_rng_u64(cl_rng *r);
void cl_rng_skip(cl_rng *r, uint64_t n);     /* the state n cl_rng_u64 calls later, in microseconds for any n */
float cl_rng_uniform(cl_rng *r);            /* [0, 1) with 24 random bits */
float cl_rng_uniform_of(uint64_t a);        /* the uniform cl_rng_uniform makes of its draw */
float cl_rng_normal(cl_rng *r);             /* standard normal, Box-Muller */
float cl_rng_normal_of(uint64_t a, uint64_t b); /* the normal cl_rng_normal makes of its two draws, a then b */

#ifdef __cplusplus
}
#endif

#endif
