/* bpe_encode: prints cleave's GPT-2 token ids for a file, one per line, for
 * tests/cli_bpe_node.sh to compare with the gpt-3-encoder npm package (with
 * --hf, a Hugging Face tokenizer.json's, for tests/cli_hf_tokenizer.sh).
 * It also checks that decoding the ids gives back the file's bytes.
 * Usage: bpe_encode [--hf] DIR FILE   (exit 0 on success, 1 on any failure) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleave/data.h"

int main(int argc, char **argv)
{
    int hf = argc == 4 && !strcmp(argv[1], "--hf");
    if (argc != 3 + hf) {
        fprintf(stderr, "usage: %s [--hf] DIR FILE\n", argv[0]);
        return 2;
    }
    argv += hf;
    cl_tokenizer *t;
    char *text;
    size_t len, n;
    int32_t *ids;
    if ((hf ? cl_tokenizer_hf(&t, argv[1]) : cl_tokenizer_gpt2(&t, argv[1])) != CL_OK || cl_read_file(argv[2], CL_FILE_TEXT, &text, &len) != CL_OK ||
        cl_tokenizer_encode(t, text, len, &ids, &n) != CL_OK) {
        fprintf(stderr, "bpe_encode: %s\n", cl_last_error());
        return 1;
    }
    size_t pos = 0;
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++) {
        char buf[256];
        int k = cl_tokenizer_decode(t, ids[i], buf, (int)sizeof buf);
        if (k < 0 || pos + (size_t)k > len || memcmp(buf, text + pos, (size_t)k) != 0) {
            fprintf(stderr, "bpe_encode: token %zu (id %d) does not decode to the text at byte %zu\n", i, ids[i], pos);
            ok = 0;
        }
        pos += k > 0 ? (size_t)k : 0;
    }
    if (ok && pos != len) {
        fprintf(stderr, "bpe_encode: the ids decode to %zu bytes, the file has %zu\n", pos, len);
        ok = 0;
    }
    for (size_t i = 0; i < n; i++) printf("%d\n", ids[i]);
    free(ids);
    free(text);
    cl_tokenizer_free(t);
    return ok ? 0 : 1;
}
