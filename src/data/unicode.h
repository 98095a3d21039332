/* cleave data (internal): Unicode code point classes for the GPT-2
 * pre-tokenizer, and strict UTF-8 decoding.
 *
 * The ranges come from scripts/gen_unicode_tables.js (node's own \p{L}, \p{N}
 * and \s), so classification matches the JavaScript encoder exactly.
 * Invariant: cl_unicode_ranges is sorted by lo and its ranges are disjoint. */
#ifndef CLEAVE_DATA_UNICODE_H
#define CLEAVE_DATA_UNICODE_H

#include <stddef.h>
#include <stdint.h>

enum { CL_UCLASS_OTHER = 0, CL_UCLASS_LETTER = 1, CL_UCLASS_NUMBER = 2, CL_UCLASS_SPACE = 3 };

typedef struct { uint32_t lo, hi; uint8_t cls; } cl_urange;

extern const cl_urange cl_unicode_ranges[];
extern const int cl_unicode_nranges;

/* Class of one code point (CL_UCLASS_*). */
int cl_unicode_class(uint32_t cp);

#endif
