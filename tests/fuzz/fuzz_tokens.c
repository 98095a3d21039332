/* libFuzzer target for the token file reader (cl_tokens_parse, the part of
 * cl_tokens_read after the file is in memory).
 *
 * Why: a token cache sits beside the text, where anything may overwrite it;
 * any bytes must give CL_OK or CL_ERR_FORMAT, never a crash or undefined
 * behaviour. When an input is accepted the reader's promises are checked
 * with abort() on violation: the size is exactly the 120-byte header plus
 * count tokens of 2 or 4 bytes, every token is below the vocabulary, and
 * the name is NUL-terminated. Each input is parsed twice: as it is, and with
 * bytes 112..119 set to the checksum its other bytes call for (the format's
 * definition, XXH64), so that mutations also reach the checks behind the
 * checksum. Seeds: scripts/fuzz.sh writes valid files with
 * fuzz_seedgen (tests/fuzz/fuzz_safetensors.c built with CL_FUZZ_SEEDGEN). */
#include "cleave/data.h"

#include <stdlib.h>
#include <string.h>

static void check_one(const uint8_t *data, size_t size) {
    cl_tokens t;
    cl_status s = cl_tokens_parse(data, size, "fuzz", &t);
    if (s != CL_OK) {
        if (s != CL_ERR_FORMAT && s != CL_ERR_OOM) abort();
        if (t.tokens || t.count) abort();
        return;
    }
    size_t bpt = t.vocab <= 65536 ? 2 : 4;
    if (t.vocab <= 0 || size != 120 + t.count * bpt) abort();
    if (!memchr(t.tokenizer, '\0', sizeof t.tokenizer)) abort();
    for (size_t i = 0; i < t.count; i++)
        if (t.tokens[i] < 0 || t.tokens[i] >= t.vocab) abort();
    cl_tokens_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    check_one(data, size);
    if (size < 120) return 0;
    uint8_t *fixed = malloc(size);
    if (!fixed) return 0;
    memcpy(fixed, data, size);
    uint64_t sum = cl_hash64(fixed + 120, size - 120, cl_hash64(fixed, 112, 0));
    for (int i = 0; i < 8; i++) fixed[112 + i] = (uint8_t)(sum >> (8 * i));
    check_one(fixed, size);
    free(fixed);
    return 0;
}
