/* unicode_classes: for every code point (surrogates skipped) prints which of
 * \p{L} (1), \p{N} (2) and \s (4) match it, as "HEX SUM" lines for code
 * points in at least one, for scripts/unicode_classes.sh to compare with
 * node's /u regexes.
 *   unicode_classes          cleave's classes: the patterns through
 *                            src/data/pretok.c (rewritten, then PCRE2)
 *   unicode_classes --raw    PCRE2's own (PCRE2_UTF | PCRE2_UCP), what the
 *                            rewriting corrects, and \p{Cn} (8): code points
 *                            PCRE2's Unicode has not assigned
 * Exit 0, or 1 when a pattern does not compile. */
#include <stdio.h>
#include <string.h>

#include "data/pretok.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

static int enc(uint32_t cp, unsigned char *b)
{
    if (cp < 0x80) { b[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { b[0] = (unsigned char)(0xC0 | cp >> 6); b[1] = (unsigned char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | cp >> 12); b[1] = (unsigned char)(0x80 | ((cp >> 6) & 63));
        b[2] = (unsigned char)(0x80 | (cp & 63));
        return 3;
    }
    b[0] = (unsigned char)(0xF0 | cp >> 18); b[1] = (unsigned char)(0x80 | ((cp >> 12) & 63));
    b[2] = (unsigned char)(0x80 | ((cp >> 6) & 63)); b[3] = (unsigned char)(0x80 | (cp & 63));
    return 4;
}

int main(int argc, char **argv)
{
    int raw = argc > 1 && !strcmp(argv[1], "--raw");
    const char *pats[4] = {"\\p{L}", "\\p{N}", "\\s", "\\p{Cn}"};
    int npat = raw ? 4 : 3;
    cl_pretok *p[4] = {0};
    pcre2_code *r[4] = {0};
    pcre2_match_data *md = pcre2_match_data_create(4, NULL);
    for (int k = 0; k < npat; k++) {
        if (raw) {
            char re[32];
            snprintf(re, sizeof re, "^%s$", pats[k]);
            int err;
            PCRE2_SIZE at;
            r[k] = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &at, NULL);
            if (!r[k]) return 1;
        } else if (cl_pretok_compile(&p[k], pats[k], pats[k]) != CL_OK) {
            fprintf(stderr, "unicode_classes: %s\n", cl_last_error());
            return 1;
        }
    }
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        unsigned char b[4];
        int n = enc(cp, b), sum = 0;
        for (int k = 0; k < npat; k++) {
            int in = raw ? pcre2_match(r[k], b, (size_t)n, 0, 0, md, NULL) >= 0 : cl_pretok_whole(p[k], b, (size_t)n);
            if (in) sum |= 1 << k;
        }
        if (sum) printf("%X %d\n", (unsigned)cp, sum);
    }
    for (int k = 0; k < npat; k++) {
        cl_pretok_free(p[k]);
        pcre2_code_free(r[k]);
    }
    pcre2_match_data_free(md);
    return 0;
}
