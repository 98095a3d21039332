/* cleave data: code point classification and strict UTF-8 decoding for the
 * GPT-2 pre-tokenizer.
 *
 * Why here and not ICU: the classes must equal node's \p{L}, \p{N} and \s
 * (what gpt-3-encoder uses), so they come from a table generated with node
 * (unicode_tables.c); decoding is strict so that every byte sequence that
 * node would not read as the same characters falls back to single bytes.
 * Invariant: cl_unicode_class is a pure function of the generated table. */
#include "data/unicode.h"

int cl_unicode_class(uint32_t cp)
{
    if (cp < 128) {
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CL_UCLASS_LETTER;
        if (cp >= '0' && cp <= '9') return CL_UCLASS_NUMBER;
        if (cp == ' ' || (cp >= 9 && cp <= 13)) return CL_UCLASS_SPACE;
        return CL_UCLASS_OTHER;
    }
    int lo = 0, hi = cl_unicode_nranges - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (cp < cl_unicode_ranges[mid].lo) hi = mid - 1;
        else if (cp > cl_unicode_ranges[mid].hi) lo = mid + 1;
        else return cl_unicode_ranges[mid].cls;
    }
    return CL_UCLASS_OTHER;
}
