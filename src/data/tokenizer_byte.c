/* cleave data: the byte tokenizer (token id = byte value, vocabulary 256) and
 * the public tokenizer calls, which dispatch on the tokenizer's kind.
 *
 * Why: the byte tokenizer needs no files, so every text model can train out
 * of the box; GPT-2's BPE (tokenizer_gpt2.c) plugs in behind the same calls.
 * Invariants: encode never fails on any byte string except for memory;
 * decode(encode(x)) == x for both kinds. */
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"

cl_status cl_tokenizer_byte(cl_tokenizer **out)
{
    *out = NULL;
    cl_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return cl_error(CL_ERR_OOM, "byte tokenizer: out of host memory");
    t->kind = CL_TOK_BYTE;
    t->vocab = 256;
    t->files_hash = cl_hash64("cleave byte tokenizer", 21, 0); /* nothing to read: a fixed identity */
    *out = t;
    return CL_OK;
}

void cl_tokenizer_free(cl_tokenizer *t)
{
    if (!t) return;
    if (t->kind == CL_TOK_GPT2) cl_gpt2_release(t);
    if (t->kind == CL_TOK_HF) cl_hf_release(t);
    free(t);
}

const char *cl_tokenizer_name(const cl_tokenizer *t)
{
    return t->kind == CL_TOK_GPT2 ? "gpt2" : t->kind == CL_TOK_HF ? "hf" : "byte";
}

int cl_tokenizer_vocab(const cl_tokenizer *t) { return t->vocab; }

uint64_t cl_tokenizer_hash(const cl_tokenizer *t) { return t->files_hash; }

cl_status cl_tokenizer_encode(const cl_tokenizer *t, const char *text, size_t len,
                              int32_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (!text && len > 0) return cl_error(CL_ERR_INVALID, "tokenizer encode: text is NULL but length is %zu", len);
    if (t->kind == CL_TOK_GPT2) return cl_gpt2_encode(t, text, len, out, n);
    if (t->kind == CL_TOK_HF) return cl_hf_encode(t, text, len, out, n);
    int32_t *ids = malloc((len ? len : 1) * sizeof *ids);
    if (!ids) return cl_error(CL_ERR_OOM, "byte tokenizer: no host memory for %zu tokens", len);
    for (size_t i = 0; i < len; i++) ids[i] = (unsigned char)text[i];
    *out = ids;
    *n = len;
    return CL_OK;
}

int32_t cl_tokenizer_eod(const cl_tokenizer *t)
{
    return t->kind == CL_TOK_BYTE ? 0 : t->eod;
}

/* GPT-2: the pattern's only lookahead is in its whitespace alternatives, and
 * no pre-token holds a space after a non-space, so a cut before a space that
 * follows a printable ASCII character and precedes an ASCII letter falls on
 * a pre-token boundary, and the pre-token ending there ends there whether or
 * not the text goes on (a run of letters, numbers or others stops at the
 * space, a contraction is fixed). The byte tokenizer cuts anywhere; hf
 * (any regex) nowhere. */
size_t cl_tokenizer_cut(const cl_tokenizer *t, const char *text, size_t len, size_t at)
{
    if (at >= len) return len;
    if (t->kind == CL_TOK_BYTE) return at;
    if (t->kind == CL_TOK_HF) return len; /* the file's regex is not known to have safe cuts */
    const unsigned char *s = (const unsigned char *)text;
    for (size_t b = at > 0 ? at : 1; b + 1 < len; b++) {
        if (s[b] != ' ') continue;
        unsigned char p = s[b - 1], n = s[b + 1];
        if (p > ' ' && p < 0x7f && ((n | 0x20) >= 'a' && (n | 0x20) <= 'z')) return b;
    }
    return len;
}

int cl_tokenizer_decode(const cl_tokenizer *t, int32_t id, char *buf, int cap)
{
    if (id < 0 || id >= t->vocab) return -1;
    if (cap <= 0) return 0;
    if (t->kind == CL_TOK_BYTE) {
        buf[0] = (char)(unsigned char)id;
        return 1;
    }
    uint32_t a = t->tok_off[id], b = t->tok_off[id + 1];
    int k = (int)(b - a) < cap ? (int)(b - a) : cap;
    memcpy(buf, t->tok_pool + a, (size_t)k);
    return k;
}
