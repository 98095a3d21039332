/* Finding cleave's prepared data from anywhere (see data.h, cl_data_find).
 *
 * Why: the default corpus, digits and GPT-2 BPE files are prepared once by
 * scripts/setup.sh into the checkout's data/ and installed by `make install`
 * into PREFIX/share/cleave; a command run from any directory, a checkout's or
 * an installed one, must find them without flags. Every default data path
 * (trainer, tokenizer, commands) is resolved here and nowhere else. */
#include "cleave/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The installed data directory, PREFIX/share/cleave (the Makefile sets it). */
#ifndef CL_DATADIR
#define CL_DATADIR "/usr/local/share/cleave"
#endif

enum { MAX_PLACES = 6, PLACE_LEN = 4096 };

typedef struct {
    char dir[MAX_PLACES][PLACE_LEN];
    int n;
} places;

static void add_place(places *p, const char *dir) {
    if (!*dir || p->n == MAX_PLACES || strlen(dir) >= PLACE_LEN) return;
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->dir[i], dir)) return;
    snprintf(p->dir[p->n++], PLACE_LEN, "%s", dir);
}

/* Cuts the last path component off buf; 0 when there is none left. */
static int up(char *buf) {
    char *slash = strrchr(buf, '/');
    if (!slash || slash == buf) return 0;
    *slash = 0;
    return 1;
}

/* The places in the order they are searched: $CLEAVE_DATA; the checkout's
 * data/ beside the running program (build/cleave, or build/examples/x: one
 * or two directories up); PREFIX/share/cleave beside an installed program
 * (BIN/../share/cleave, so a DESTDIR or moved install works); the PREFIX
 * the library was built for. */
static void data_places(places *p) {
    p->n = 0;
    const char *env = getenv("CLEAVE_DATA");
    if (env && *env) add_place(p, env);
    char bin[PLACE_LEN], dir[PLACE_LEN + 16];
    ssize_t k = readlink("/proc/self/exe", bin, sizeof bin - 1);
    if (k > 0) {
        bin[k] = 0;
        if (up(bin)) { /* bin: the program's directory */
            char top[PLACE_LEN];
            snprintf(top, sizeof top, "%s", bin);
            for (int level = 0; level < 2 && up(top); level++) {
                snprintf(dir, sizeof dir, "%s/data", top);
                add_place(p, dir);
            }
            snprintf(top, sizeof top, "%s", bin);
            if (up(top)) {
                snprintf(dir, sizeof dir, "%s/share/cleave", top);
                add_place(p, dir);
            }
        }
    }
    add_place(p, CL_DATADIR);
}

cl_status cl_data_find(const char *name, char *out, size_t n) {
    places p;
    data_places(&p);
    struct stat st;
    for (int i = 0; i < p.n; i++) {
        int len = snprintf(out, n, "%s/%s", p.dir[i], name);
        if (len > 0 && (size_t)len < n && stat(out, &st) == 0) return CL_OK;
    }
    if (n) out[0] = 0;
    char looked[MAX_PLACES * 256] = "";
    size_t used = 0;
    const char *env = getenv("CLEAVE_DATA");
    if (!env || !*env) used += (size_t)snprintf(looked, sizeof looked, "CLEAVE_DATA (not set), ");
    for (int i = 0; i < p.n && used < sizeof looked; i++)
        used += (size_t)snprintf(looked + used, sizeof looked - used, "%s%s", p.dir[i], i + 1 < p.n ? ", " : "");
    return cl_error(CL_ERR_IO,
                    "cleave's data file %s was not found; looked in %s; prepare it with 'bash scripts/setup.sh' in cleave's "
                    "checkout (then 'make install' for an installed cleave), set CLEAVE_DATA to a directory holding it, "
                    "or give the file's path with a flag",
                    name, looked);
}
