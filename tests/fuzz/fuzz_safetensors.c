/* libFuzzer target for the safetensors reader and the JSON reader under it.
 *
 * Why: both read files cleave did not write; any input must give CL_OK or
 * an error, never a crash, an out-of-bounds read or undefined behaviour.
 * Each input is parsed as a whole safetensors file, and, when it parses,
 * every tensor is looked up and copied out with cl_st_read_tensor and the
 * parse invariants (offsets tile the buffer, sizes match shapes) are checked
 * with abort() on violation so the fuzzer reports them. The input is also
 * parsed as bare JSON, walking the tree.
 *
 * Built with -DCL_FUZZ_SEEDGEN instead, this file is a small program that
 * writes a seed corpus of valid files with cl_st_write into the directory
 * given as its first argument and, given a second, valid token files (for
 * tests/fuzz/fuzz_tokens.c) with cl_tokens_write into that one (scripts/fuzz.sh
 * does that). */
#include "cleave/data.h"
#include "cleave/json.h"
#include "cleave/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef CL_FUZZ_SEEDGEN

static size_t walk(const cl_json *v, int depth) {
    size_t n = 1;
    if (depth > 64) abort();
    if (v->type == CL_JSON_STRING && strlen(v->string) != v->string_len) abort();
    if (v->key && strlen(v->key) != v->key_len) abort();
    int c = 0;
    for (const cl_json *k = v->child; k; k = k->next, c++) n += walk(k, depth + 1);
    if (c != v->count) abort();
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cl_st_file *f = NULL;
    if (cl_st_parse(&f, data, size, "fuzz") == CL_OK) {
        uint64_t hlen = 0;
        for (int i = 7; i >= 0; i--) hlen = hlen << 8 | data[i];
        uint64_t buflen = size - 8 - hlen, total = 0;
        int n = cl_st_count(f);
        for (int i = 0; i < n; i++) {
            const cl_st_entry *e = cl_st_get(f, i);
            uint64_t numel = 1;
            for (int d = 0; d < e->ndim; d++) numel *= (uint64_t)e->shape[d];
            if (e->begin > e->end || e->end > buflen) abort();
            if (e->end - e->begin != numel * cl_dtype_size(e->dtype)) abort();
            if (cl_st_find(f, e->name) != e) abort();
            total += e->end - e->begin;
            size_t bytes = (size_t)(e->end - e->begin);
            void *dst = malloc(bytes ? bytes : 1);
            if (dst) {
                if (cl_st_read_tensor(f, e->name, e->dtype, e->ndim, e->shape, dst) != CL_OK) abort();
                free(dst);
            }
        }
        if (total != buflen) abort();
        (void)cl_st_metadata(f, "format");
        cl_st_close(f);
    } else if (f != NULL) abort();

    cl_json_doc *d = NULL;
    if (cl_json_parse(&d, (const char *)data, size) == CL_OK) {
        walk(cl_json_root(d), 0);
        cl_json_free(d);
    } else if (d != NULL) abort();
    return 0;
}

#else /* seed generator */

static int write_seed(const char *dir, const char *name, const cl_st_item *it, int n, const cl_st_meta *m, int nm) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (cl_st_write(path, it, n, m, nm) != CL_OK) {
        fprintf(stderr, "fuzz seedgen: %s\n", cl_last_error());
        return 1;
    }
    return 0;
}

static int write_tokens(const char *dir, const char *name, const int32_t *t, size_t n, int vocab, const char *tok) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    cl_tokens_source src = {.text_size = n, .text_hash = cl_hash64(t, n * sizeof *t, 0), .tokenizer_hash = 42};
    if (cl_tokens_write(path, t, n, vocab, tok, &src) != CL_OK) {
        fprintf(stderr, "fuzz seedgen: %s\n", cl_last_error());
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: %s CORPUS_DIR [TOKENS_CORPUS_DIR]\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    float f6[6] = {1, 2, 3, 4, 5, 6};
    int64_t i3[3] = {-1, 0, 1};
    uint8_t u4[4] = {1, 2, 3, 4};
    uint16_t b2[2] = {0x3f80, 0x4000};
    double sc = 0.5;
    int32_t q[2] = {7, 8};
    cl_st_item one[] = {{"w", cl_tensor_make(f6, CL_F32, 2, (int64_t[]){2, 3})}};
    cl_st_item many[] = {
        {"h.0.attn.c_attn.weight", cl_tensor_make(f6, CL_F32, 2, (int64_t[]){3, 2})},
        {"ids", cl_tensor_make(i3, CL_I64, 1, (int64_t[]){3})},
        {"bytes", cl_tensor_make(u4, CL_U8, 4, (int64_t[]){1, 2, 1, 2})},
        {"half", cl_tensor_make(b2, CL_BF16, 1, (int64_t[]){2})},
        {"scalar", cl_tensor_make(&sc, CL_F64, 0, NULL)},
        {"empty", cl_tensor_make(NULL, CL_I32, 2, (int64_t[]){0, 4})},
        {"u16", cl_tensor_make(b2, CL_U16, 1, (int64_t[]){2})},
        {"i32 \"q\"\n\xc3\xa9", cl_tensor_make(q, CL_I32, 1, (int64_t[]){2})},
    };
    cl_st_meta meta[] = {{"format", "pt"}, {"note", "esc \\ \" \t \xe2\x82\xac"}};
    int bad = 0;
    bad |= write_seed(dir, "empty.safetensors", NULL, 0, NULL, 0);
    bad |= write_seed(dir, "one.safetensors", one, 1, NULL, 0);
    bad |= write_seed(dir, "meta.safetensors", one, 1, meta, 2);
    bad |= write_seed(dir, "many.safetensors", many, (int)(sizeof many / sizeof many[0]), meta, 1);
    if (argc == 3) {
        int32_t bytes[64], big[5] = {0, 1, 50256, 65535, 65536};
        for (int i = 0; i < 64; i++) bytes[i] = (i * 37) % 256;
        bad |= write_tokens(argv[2], "byte.tok", bytes, 64, 256, "byte");
        bad |= write_tokens(argv[2], "empty.tok", NULL, 0, 50257, "gpt2");
        bad |= write_tokens(argv[2], "gpt2.tok", big, 3, 50257, "gpt2");
        bad |= write_tokens(argv[2], "wide.tok", big, 5, 70000, "wide");
    }
    return bad;
}

#endif
