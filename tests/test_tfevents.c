/* Tests for the TensorBoard event writer (tfevents.h): CRC32C's published
 * check values and the TFRecord mask; a written file parsed back here
 * record by record (length, both masked CRCs, the Event's fields and every
 * scalar's tag and bits, a step that needs a multi-byte varint); a new file
 * for each writer in the same second; a directory made with its parents;
 * a path that is a file refused by name. */
#include "cleave/tfevents.h"

#include "common/check.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint64_t varint(const unsigned char **p) {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
        unsigned char c = *(*p)++;
        v |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80)) return v;
    }
}

/* The next record at *off in file f[0..n): its data, checked framing. */
static const unsigned char *record(const unsigned char *f, size_t n, size_t *off, size_t *len) {
    CHECK(*off + 12 <= n, "a record header at %zu of %zu", *off, n);
    if (*off + 12 > n) return NULL;
    const unsigned char *p = f + *off;
    *len = (size_t)le(p, 8);
    CHECK(le(p + 8, 4) == cl_tfevents_mask(cl_tfevents_crc32c(p, 8)), "length crc at %zu", *off);
    CHECK(*off + 16 + *len <= n, "a record of %zu bytes at %zu of %zu", *len, *off, n);
    if (*off + 16 + *len > n) return NULL;
    CHECK(le(p + 12 + *len, 4) == cl_tfevents_mask(cl_tfevents_crc32c(p + 12, *len)), "data crc at %zu", *off);
    *off += 16 + *len;
    return p + 12;
}

static void test_crc(void) {
    CHECK(cl_tfevents_crc32c("123456789", 9) == 0xE3069283u, "crc32c check value: %08x", cl_tfevents_crc32c("123456789", 9));
    unsigned char z[32] = {0}, ff[32];
    memset(ff, 0xFF, sizeof ff);
    CHECK(cl_tfevents_crc32c(z, 32) == 0x8A9136AAu, "crc32c of 32 zero bytes: %08x", cl_tfevents_crc32c(z, 32));
    CHECK(cl_tfevents_crc32c(ff, 32) == 0x62A8AB43u, "crc32c of 32 0xFF bytes: %08x", cl_tfevents_crc32c(ff, 32));
    CHECK(cl_tfevents_crc32c("", 0) == 0, "crc32c of nothing");
    CHECK(cl_tfevents_mask(0) == 0xa282ead8u, "mask(0)");
    CHECK(cl_tfevents_mask(0x00008000u) == 0xa282ead9u, "mask rotates right by 15: %08x", cl_tfevents_mask(0x00008000u));
}

static void test_file(const char *tmp) {
    char dir[512], path[1024];
    snprintf(dir, sizeof dir, "%s/a/b", tmp);
    cl_tfevents *w = NULL;
    cl_status s = cl_tfevents_open(&w, dir, "7");
    CHECK(s == CL_OK && w, "open in a new directory: %s", cl_last_error());
    if (s) return;
    snprintf(path, sizeof path, "%s", cl_tfevents_path(w));
    const char *base = strrchr(path, '/') + 1;
    CHECK(!strncmp(base, "events.out.tfevents.", 20) && !strcmp(base + strlen(base) - 2, ".7"), "file name %s", base);
    cl_tfevents_scalar v[3] = {{"loss/train", 2.5f}, {"memory/rank1/activations", 123456.0f}, {"x", -1e-30f}};
    CHECK(cl_tfevents_write(w, 1, v, 3) == CL_OK, "write step 1: %s", cl_last_error());
    CHECK(cl_tfevents_write(w, 300, v, 1) == CL_OK, "write step 300: %s", cl_last_error());
    cl_tfevents *w2 = NULL;
    s = cl_tfevents_open(&w2, dir, "7"); /* the same second, the same suffix: a new file all the same */
    CHECK(s == CL_OK && w2 && strcmp(cl_tfevents_path(w2), path), "a second writer opened %s", w2 ? cl_tfevents_path(w2) : "nothing");
    CHECK(cl_tfevents_close(w2) == CL_OK && cl_tfevents_close(w) == CL_OK, "close");

    FILE *f = fopen(path, "rb");
    unsigned char buf[4096];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    size_t off = 0, len = 0;
    const unsigned char *d = record(buf, n, &off, &len);
    /* wall_time (key 0x09, 8 bytes), file_version (key 0x1a) */
    CHECK(d && len == 24 && d[0] == 0x09 && d[9] == 0x1a && d[10] == 13 && !memcmp(d + 11, "brain.Event:2", 13), "the first record");
    d = record(buf, n, &off, &len);
    if (d) {
        const unsigned char *p = d + 9, *end = d + len;
        double wall;
        uint64_t u = le(d + 1, 8);
        memcpy(&wall, &u, sizeof wall);
        CHECK(d[0] == 0x09 && wall > 1.5e9, "step 1's wall time %f", wall);
        CHECK(*p++ == 0x10 && varint(&p) == 1, "step 1's step");
        CHECK(*p++ == 0x2a, "step 1's summary key");
        size_t slen = (size_t)varint(&p);
        const unsigned char *send = p + slen;
        CHECK(send == end, "the summary ends the event");
        for (int i = 0; i < 3 && p < send; i++) {
            CHECK(*p++ == 0x0a, "value %d's key", i);
            size_t vlen = (size_t)varint(&p);
            const unsigned char *vend = p + vlen;
            size_t tl = strlen(v[i].tag);
            CHECK(*p++ == 0x0a && varint(&p) == tl && !memcmp(p, v[i].tag, tl), "value %d's tag", i);
            p += tl;
            uint32_t bits;
            memcpy(&bits, &v[i].value, 4);
            CHECK(*p++ == 0x15 && le(p, 4) == bits, "value %d's simple_value", i);
            p += 4;
            CHECK(p == vend, "value %d ends", i);
        }
    }
    d = record(buf, n, &off, &len);
    if (d) {
        const unsigned char *p = d + 9;
        CHECK(*p++ == 0x10 && varint(&p) == 300 && p == d + 12, "step 300 as a two-byte varint");
    }
    CHECK(off == n, "the file ends after three records (%zu of %zu bytes)", off, n);

    /* a path that is a file, and a path under one */
    char file[600], under[700];
    snprintf(file, sizeof file, "%s/plain", tmp);
    FILE *pf = fopen(file, "w");
    if (pf) fclose(pf);
    snprintf(under, sizeof under, "%s/sub", file);
    const char *bad[2] = {file, under};
    for (int i = 0; i < 2; i++) {
        s = cl_tfevents_check_dir(bad[i], "--tensorboard");
        CHECK(s == CL_ERR_INVALID && strstr(cl_last_error(), "is a file, not a directory"), "%s: %s", bad[i], cl_last_error());
        w = (cl_tfevents *)1;
        s = cl_tfevents_open(&w, bad[i], NULL);
        CHECK(s == CL_ERR_INVALID && w == NULL, "open %s: %s", bad[i], cl_last_error());
    }
    CHECK(cl_tfevents_check_dir("", "--tensorboard") == CL_ERR_INVALID, "an empty path");
}

static void rm_tree(const char *p) {
    struct stat st;
    if (lstat(p, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(p);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char c[1024];
            snprintf(c, sizeof c, "%s/%s", p, e->d_name);
            rm_tree(c);
        }
        if (d) closedir(d);
        rmdir(p);
    } else {
        unlink(p);
    }
}

int main(void) {
    test_crc();
    char tmp[] = "/tmp/cleave-tfevents-XXXXXX";
    CHECK(mkdtemp(tmp) != NULL, "mkdtemp");
    test_file(tmp);
    rm_tree(tmp);
    return cl_test_report("test_tfevents");
}
