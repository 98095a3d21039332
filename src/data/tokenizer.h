/* cleave data (internal): the tokenizer object shared by the byte tokenizer
 * (tokenizer_byte.c, which also holds the public dispatch) and GPT-2's BPE
 * (tokenizer_gpt2.c) and Hugging Face tokenizer.json BPE (tokenizer_hf.c);
 * both pre-tokenize through pretok.c (PCRE2).
 *
 * Invariants: vocab > 0; for gpt2, token id i has the raw bytes
 * tok_pool[tok_off[i] .. tok_off[i+1]), ids are dense 0..vocab-1, and both
 * hash maps are read-only after loading (so encode may run on many threads). */
#ifndef CLEAVE_DATA_TOKENIZER_H
#define CLEAVE_DATA_TOKENIZER_H

#include "cleave/data.h"
#include "data/pretok.h"

enum { CL_TOK_BYTE = 1, CL_TOK_GPT2 = 2, CL_TOK_HF = 3 };

struct cl_hf; /* tokenizer_hf.c's maps, regex and added tokens */

/* Open-addressing map from byte strings to ints; keys point into a pool
 * that outlives the map. */
typedef struct {
    const unsigned char *key;
    uint32_t len;
    uint32_t hash;     /* 0 marks an empty slot (real hashes are forced nonzero) */
    int32_t value;
} cl_strmap_slot;

typedef struct {
    cl_strmap_slot *slots;
    size_t cap;        /* a power of two, at least twice n */
    size_t n;
} cl_strmap;

struct cl_tokenizer {
    int kind;
    int vocab;
    /* identity of what encodes: for gpt2 cl_hash64 of encoder.json's bytes,
     * then of vocab.bpe's seeded with that; for byte a fixed value */
    uint64_t files_hash;
    /* gpt2 only */
    unsigned char *tok_pool;
    uint32_t *tok_off;        /* vocab + 1 entries */
    cl_strmap tokens;         /* raw token bytes -> id, keys in tok_pool */
    unsigned char *merge_pool;
    cl_strmap merges;         /* "first,second" raw bytes -> rank, keys in merge_pool */
    int32_t byte_id[256];     /* id of each single-byte token */
    int32_t eod;              /* <|endoftext|>'s id (hf: <|end_of_text|>'s first), -1 when the vocabulary lacks it */
    cl_pretok *pretok;        /* gpt2 and hf: the pre-tokenizer's compiled regex (pretok.c) */
    /* hf only (tok_pool, tok_off, byte_id, eod shared with gpt2) */
    struct cl_hf *hf;
};

cl_status cl_gpt2_encode(const cl_tokenizer *t, const char *text, size_t len,
                         int32_t **out, size_t *n);
void cl_gpt2_release(cl_tokenizer *t);
/* GPT-2's byte-level alphabet inverted (tokenizer_gpt2.c): u2b[code point] is
 * its byte, -1 for code points outside the 256 characters. */
void cl_byte_unicode_inverse(int u2b[324]);
cl_status cl_hf_encode(const cl_tokenizer *t, const char *text, size_t len,
                       int32_t **out, size_t *n);
void cl_hf_release(cl_tokenizer *t);

#endif
