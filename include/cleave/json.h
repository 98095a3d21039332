/* cleave json: a small, strict JSON reader (RFC 8259) and a writer helper.
 *
 * The reader builds a tree in one allocation arena; it rejects trailing
 * garbage, bad escapes, invalid UTF-8 in strings, nesting deeper than 64 and
 * numbers it cannot represent, with the byte offset in the message. It is
 * used for safetensors headers, config.json, encoder.json and trainer state. */
#ifndef CLEAVE_JSON_H
#define CLEAVE_JSON_H

#include "cleave/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { CL_JSON_NULL, CL_JSON_BOOL, CL_JSON_NUMBER, CL_JSON_STRING,
               CL_JSON_ARRAY, CL_JSON_OBJECT } cl_json_type;

typedef struct cl_json cl_json;
struct cl_json {
    cl_json_type type;
    int boolean;
    double number;
    int number_is_int;     /* the text was an integer that fits int64 */
    int64_t integer;       /* valid when number_is_int */
    char *string;          /* decoded UTF-8, NUL-terminated (may contain no NUL) */
    size_t string_len;
    char *key;             /* member name when inside an object */
    size_t key_len;
    cl_json *child;        /* first element/member */
    cl_json *next;         /* next sibling */
    int count;             /* number of children */
};

typedef struct cl_json_doc cl_json_doc;

cl_status cl_json_parse(cl_json_doc **out, const char *text, size_t len);
/* cl_json_parse_file (a whole file, errors naming it) is in data.h. */
const cl_json *cl_json_root(const cl_json_doc *d);
void cl_json_free(cl_json_doc *d);
const cl_json *cl_json_get(const cl_json *obj, const char *key); /* NULL if absent or not an object */
/* 1 and *out set if obj's key is an integer in int range, else 0 (*out untouched). */
int cl_json_get_int(const cl_json *obj, const char *key, int *out);
/* 1 if s[0..len) is valid UTF-8 (no overlong forms, surrogates or code
 * points past U+10FFFF), else 0. */
int cl_json_utf8_valid(const char *s, size_t len);

/* Appends s to a growing buffer as a JSON string literal with escapes. */
typedef struct { char *buf; size_t len, cap; int failed; } cl_strbuf;
void cl_sb_printf(cl_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cl_sb_json_string(cl_strbuf *b, const char *s, size_t len);
void cl_sb_free(cl_strbuf *b);

#ifdef __cplusplus
}
#endif

#endif
