/* cleave tfevents: TensorBoard event files written by hand (see tfevents.h).
 *
 * Why: users watch training in TensorBoard; its event format is small and
 * stable (TFRecord framing around protobuf Event messages), so cleave writes
 * it directly instead of depending on TensorFlow or a protobuf library.
 *
 * Invariants: every record is built whole in memory and handed to the
 * system with one write loop before cl_tfevents_write returns, so a reader
 * (or a crash) sees complete records, with at most the last one cut short;
 * an event file is always a new file (O_EXCL), never one already there; all
 * integers are little-endian on disk whatever the host. Field numbers
 * (event.proto, summary.proto): Event.wall_time 1 (double), .step 2
 * (int64), .file_version 3 (string), .summary 5; Summary.value 1 (repeated
 * Value); Value.tag 1 (string), .simple_value 2 (float). */
#include "cleave/tfevents.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct cl_tfevents {
    int fd;
    char *path;
};

/* ---- CRC32C ------------------------------------------------------------- */

static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t cl_tfevents_crc32c(const void *data, size_t n) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, crc_init);
    const unsigned char *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return ~c;
}

uint32_t cl_tfevents_mask(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* ---- protobuf encoding into a growing buffer ----------------------------- */

typedef struct {
    unsigned char *p;
    size_t len, cap;
    int failed;
} buf_t;

static void put_bytes(buf_t *b, const void *src, size_t n) {
    if (b->failed || n == 0) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q) {
            b->failed = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void put_varint(buf_t *b, uint64_t v) {
    unsigned char t[10];
    int n = 0;
    do {
        t[n] = (unsigned char)(v & 0x7F);
        v >>= 7;
        if (v) t[n] |= 0x80;
        n++;
    } while (v);
    put_bytes(b, t, (size_t)n);
}

static void put_le(buf_t *b, uint64_t v, int bytes) {
    unsigned char t[8];
    for (int i = 0; i < bytes; i++) t[i] = (unsigned char)(v >> (8 * i));
    put_bytes(b, t, (size_t)bytes);
}

/* wire types: 0 varint, 1 fixed 64 bits, 2 length-delimited, 5 fixed 32 bits */
static void put_key(buf_t *b, int field, int wire) {
    put_varint(b, (uint64_t)field << 3 | (uint64_t)wire);
}

static void put_delimited(buf_t *b, int field, const void *data, size_t n) {
    put_key(b, field, 2);
    put_varint(b, n);
    put_bytes(b, data, n);
}

static void put_double(buf_t *b, int field, double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    put_key(b, field, 1);
    put_le(b, u, 8);
}

static void put_float(buf_t *b, int field, float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    put_key(b, field, 5);
    put_le(b, u, 4);
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- records -------------------------------------------------------------- */

/* The record framing around event[0..n), written with one write loop. */
static cl_status write_record(cl_tfevents *w, const buf_t *event, const char *what) {
    buf_t r = {0};
    put_le(&r, event->len, 8);
    put_le(&r, cl_tfevents_mask(cl_tfevents_crc32c(r.p, 8)), 4);
    put_bytes(&r, event->p, event->len);
    put_le(&r, cl_tfevents_mask(cl_tfevents_crc32c(event->p, event->len)), 4);
    if (r.failed) {
        free(r.p);
        return cl_error(CL_ERR_OOM, "%s: no host memory for a record of %zu bytes", w->path, event->len);
    }
    size_t off = 0;
    while (off < r.len) {
        ssize_t k = write(w->fd, r.p + off, r.len - off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = k < 0 ? errno : EIO;
            free(r.p);
            return cl_error(CL_ERR_IO, "%s: writing %s failed: %s", w->path, what, strerror(e));
        }
        off += (size_t)k;
    }
    free(r.p);
    return CL_OK;
}

/* mkdir -p: each missing component made; one that is there must be a directory. */
static cl_status make_dirs(const char *dir, const char *what) {
    size_t n = strlen(dir);
    char *p = malloc(n + 1);
    if (!p) return cl_error(CL_ERR_OOM, "%s %s: no host memory for a path", what, dir);
    memcpy(p, dir, n + 1);
    cl_status s = CL_OK;
    for (size_t i = 1; i <= n && !s; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        char keep = p[i];
        p[i] = 0;
        struct stat st;
        if (stat(p, &st) == 0) {
            if (!S_ISDIR(st.st_mode))
                s = cl_error(CL_ERR_INVALID, "%s %s: %s is a file, not a directory (TensorBoard reads a directory of event files)",
                             what, dir, p);
        } else if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            s = cl_error(CL_ERR_INVALID, "%s %s: cannot create the directory %s: %s", what, dir, p, strerror(errno));
        }
        p[i] = keep;
    }
    free(p);
    return s;
}

cl_status cl_tfevents_check_dir(const char *dir, const char *what) {
    if (!dir || !*dir) return cl_error(CL_ERR_INVALID, "%s: empty path", what);
    if (strlen(dir) > CL_PATH_MAX - 128)
        return cl_error(CL_ERR_INVALID, "%s: path of %zu characters, at most %d", what, strlen(dir), CL_PATH_MAX - 128);
    CL_TRY(make_dirs(dir, what));
    return cl_check_dir_writable(dir, what);
}

cl_status cl_tfevents_open(cl_tfevents **out, const char *dir, const char *suffix) {
    *out = NULL;
    CL_TRY(cl_tfevents_check_dir(dir, "tensorboard"));
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    cl_tfevents *w = calloc(1, sizeof *w);
    size_t n = strlen(dir) + strlen(host) + (suffix ? strlen(suffix) : 0) + 96;
    if (w) w->path = malloc(n);
    if (!w || !w->path) {
        free(w);
        return cl_error(CL_ERR_OOM, "tensorboard %s: no host memory for the writer", dir);
    }
    double now = wall_now();
    long secs = (long)now;
    w->fd = -1;
    for (int tries = 0; w->fd < 0 && tries < 1000; tries++) {
        int k = snprintf(w->path, n, "%s/events.out.tfevents.%010ld.%s", dir, secs, host);
        if (suffix) k += snprintf(w->path + k, n - (size_t)k, ".%s", suffix);
        if (tries) snprintf(w->path + k, n - (size_t)k, ".%ld.%d", (long)getpid(), tries);
        w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (w->fd < 0 && errno != EEXIST) break;
    }
    if (w->fd < 0) {
        cl_status s = cl_error(CL_ERR_IO, "tensorboard %s: cannot create the event file %s: %s", dir, w->path, strerror(errno));
        free(w->path);
        free(w);
        return s;
    }
    buf_t ev = {0};
    put_double(&ev, 1, now);
    put_delimited(&ev, 3, "brain.Event:2", 13);
    cl_status s = ev.failed ? cl_error(CL_ERR_OOM, "%s: no host memory for the first record", w->path)
                            : write_record(w, &ev, "the file_version record");
    free(ev.p);
    if (s) {
        cl_tfevents_close(w);
        return s;
    }
    *out = w;
    return CL_OK;
}

cl_status cl_tfevents_write(cl_tfevents *w, int64_t step, const cl_tfevents_scalar *v, int n) {
    buf_t sum = {0}, val = {0}, ev = {0};
    for (int i = 0; i < n; i++) {
        val.len = 0;
        put_delimited(&val, 1, v[i].tag, strlen(v[i].tag));
        put_float(&val, 2, v[i].value);
        if (val.failed) break;
        put_delimited(&sum, 1, val.p, val.len);
    }
    put_double(&ev, 1, wall_now());
    if (step) { /* proto3 leaves a zero out; an int64 is its two's complement as a varint */
        put_key(&ev, 2, 0);
        put_varint(&ev, (uint64_t)step);
    }
    if (!val.failed && !sum.failed) put_delimited(&ev, 5, sum.p, sum.len);
    cl_status s;
    if (val.failed || sum.failed || ev.failed) s = cl_error(CL_ERR_OOM, "%s: no host memory for step %lld's event", w->path, (long long)step);
    else {
        char what[64];
        snprintf(what, sizeof what, "step %lld", (long long)step);
        s = write_record(w, &ev, what);
    }
    free(sum.p);
    free(val.p);
    free(ev.p);
    return s;
}

const char *cl_tfevents_path(const cl_tfevents *w) {
    return w->path;
}

cl_status cl_tfevents_close(cl_tfevents *w) {
    if (!w) return CL_OK;
    cl_status s = CL_OK;
    if (w->fd >= 0 && close(w->fd) != 0) s = cl_error(CL_ERR_IO, "%s: closing failed: %s", w->path, strerror(errno));
    free(w->path);
    free(w);
    return s;
}
