/* cleave data (internal): pre-tokenizer regexes written in JavaScript's
 * dialect (a /u pattern, as gpt-3-encoder and @lenml/tokenizers run them),
 * compiled and run by PCRE2 (pretok.c); used by GPT-2's BPE
 * (tokenizer_gpt2.c) and Hugging Face tokenizer.json BPE (tokenizer_hf.c).
 *
 * Invariants: a compiled cl_pretok is read-only, so one may split texts on
 * many threads at once (each call has its own match data); pieces are handed
 * out in order and, joined, are exactly the text split. */
#ifndef CLEAVE_DATA_PRETOK_H
#define CLEAVE_DATA_PRETOK_H

#include <stddef.h>

#include "cleave/core.h"

typedef struct cl_pretok cl_pretok;

/* GPT-2's pattern, as gpt-3-encoder writes it (its /u regex) and as a
 * tokenizer.json ByteLevel pre-tokenizer with use_regex applies it:
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * Its \s, \S, \p{L} and \p{N} are JavaScript's once compiled (pretok.c). */
extern const char cl_pretok_gpt2[];

/* The Unicode version whose letters and numbers pretok.c adds to PCRE2's
 * \p{L} and \p{N} (node v20's; PCRE2 10.42 has 15.0). The tests that
 * compare with node (tests/cli_unicode_classes.sh, cli_hf_tokenizer.sh) hold
 * the added code points to node only when node's Unicode is this one. */
#define CL_PRETOK_UNICODE "17.0"

/* What an invalid UTF-8 byte is to the pattern: a piece of its own (the hf
 * path), or one character that is neither letter, number nor space, as
 * U+FFFD (what gpt-3-encoder's node sees after decoding) is. */
enum { CL_PRETOK_INVALID_ALONE = 0, CL_PRETOK_INVALID_OTHER = 1 };

/* Compiles a JavaScript /u pattern (see pretok.c for what is rewritten).
 * what names it in errors, e.g. "FILE: field pre_tokenizer's Regex"; a bad
 * pattern is CL_ERR_FORMAT; a build without PCRE2 gives CL_ERR_UNSUPPORTED. */
cl_status cl_pretok_compile(cl_pretok **out, const char *pattern, const char *what);
void cl_pretok_free(cl_pretok *p);

/* Calls piece(ctx, s + a, b - a) for each pre-token of s[0..n), in order:
 * the pattern's matches and the text between them (empty matches skipped).
 * Returns 1; 0 when piece returned 0 (it stops there); -1 on a PCRE2 or
 * memory failure of its own. */
typedef int (*cl_pretok_piece)(void *ctx, const unsigned char *s, size_t n);
int cl_pretok_split(const cl_pretok *p, int invalid, const unsigned char *s, size_t n,
                    cl_pretok_piece piece, void *ctx);

/* 1 when the pattern's match at the start of s[0..n) (valid UTF-8) is all of
 * it, else 0: for scripts/unicode_classes.sh, which checks the rewritten
 * classes against node's code point by code point. */
int cl_pretok_whole(const cl_pretok *p, const unsigned char *s, size_t n);

/* Decodes one strict UTF-8 sequence at s[0..n) (n >= 1): no overlongs, no
 * surrogates, nothing above U+10FFFF. Returns its length (1..4) and sets *cp;
 * returns 0 when s[0] does not start a valid sequence. */
int cl_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);

#endif
