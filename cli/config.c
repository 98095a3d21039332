/* cleave train --config FILE: a JSON object of settings read into the same
 * cli_args the command line fills (see args.h, cli_config_load).
 *
 * Why: a run is repeated from one file (its checkpoint's run_config.json,
 * or one a user keeps) instead of a long command line. The reader knows no
 * flag by name: it reads the command's own flag table, so a flag added
 * there is a key at once (top level; in a section once a section lists it).
 * Invariants: the command line wins over the file; every value reaches the
 * flags' own parsers as the text a flag would carry, so a setting means the
 * same from either place; every refusal is one line naming the file and the
 * key; nothing is set in *a when the file is refused. */
#include "args.h"

#include "cleave/data.h"
#include "cleave/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The parsed file and the number texts stay for the process's life: the
 * resolved job points into them. */
static cl_json_doc *config_doc;
static char config_text[CLI_MAX_FLAGS][40];
static char config_keys[CLI_MAX_FLAGS][160];

static int flag_index(const cli_args *a, const char *name) {
    for (int i = 0; i < a->nflags; i++)
        if (!strcmp(a->flags[i].name, name)) return i;
    return -1;
}

int cli_flag_canon(const cli_args *a, int f) {
    const char *h = a->flags[f].help, *p = "same as --";
    if (strncmp(h, p, strlen(p))) return f;
    char name[64];
    size_t n = strcspn(h + strlen(p), " ,;:()");
    if (n >= sizeof name) return f;
    memcpy(name, h + strlen(p), n);
    name[n] = 0;
    int g = flag_index(a, name);
    return g >= 0 ? g : f;
}

/* Whether the space-separated list holds word w. */
static int listed(const char *list, const char *w) {
    size_t n = strlen(w);
    for (const char *p = list; *p;) {
        size_t k = strcspn(p, " ");
        if (k == n && !strncmp(p, w, n)) return 1;
        p += k;
        while (*p == ' ') p++;
    }
    return 0;
}

const char *cli_config_section(const cli_section *sections, const char *name) {
    for (int i = 0; sections && sections[i].name; i++)
        if (listed(sections[i].keys, name)) return sections[i].name;
    return NULL;
}

static int is_section(const cli_section *sections, const char *name) {
    for (int i = 0; sections && sections[i].name; i++)
        if (!strcmp(sections[i].name, name)) return 1;
    return 0;
}

/* Edit distance (insertions, deletions, substitutions), capped at 99. */
static int distance(const char *x, const char *y) {
    size_t n = strlen(x), m = strlen(y);
    if (n > 60 || m > 60) return 99;
    int row[64];
    for (size_t j = 0; j <= m; j++) row[j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= m; j++) {
            int up = row[j], best = diag + (x[i - 1] != y[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[m];
}

/* The unknown key's refusal: the nearest known key (as written at top
 * level, or SECTION.KEY) when it is close. */
static cl_status unknown_key(const cli_args *a, const cli_section *sections, const char *path, const char *key) {
    const char *bare = strchr(key, '.') ? strchr(key, '.') + 1 : key;
    char best[160] = "";
    int bd = 99;
    for (int i = 0; i < a->nflags; i++) {
        const char *nm = a->flags[i].name, *sec = cli_config_section(sections, nm);
        char full[160];
        snprintf(full, sizeof full, "%s%s%s", sec ? sec : "", sec ? "." : "", nm);
        int d = distance(bare, nm), d2 = distance(key, full);
        if (d2 < d) d = d2;
        if (d < bd) bd = d, snprintf(best, sizeof best, "%s", strcmp(bare, nm) || !sec ? nm : full);
    }
    for (int i = 0; sections && sections[i].name; i++) {
        int d = distance(key, sections[i].name);
        if (d < bd) bd = d, snprintf(best, sizeof best, "%s", sections[i].name);
    }
    size_t len = strlen(bare);
    if (best[0] && (bd <= 2 || (size_t)bd * 3 <= len))
        return cl_error(CL_ERR_INVALID, "%s: unknown key \"%s\" (did you mean \"%s\"?)", path, key, best);
    return cl_error(CL_ERR_INVALID, "%s: unknown key \"%s\" (the keys are the long flag names: see cleave train --help)", path, key);
}

static const char *type_name(cl_json_type t) {
    static const char *const names[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
    return names[t];
}

/* A JSON number as the text a flag would carry: an integer's digits, else
 * the fewest digits that read back as the same double. */
static void number_text(const cl_json *v, char *out, size_t n) {
    if (v->number_is_int) {
        snprintf(out, n, "%lld", (long long)v->integer);
        return;
    }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(out, n, "%.*g", prec, v->number);
        if (strtod(out, NULL) == v->number) return;
    }
}

typedef struct {
    const char *value; /* NULL: not given (false, null) */
    unsigned char json;
    const char *key;
} setting;

/* One key's value (key as written) for flag f, typed and converted. */
static cl_status read_value(const cli_args *a, const char *path, const char *key, int f, const cl_json *v, int slot, setting *out) {
    const cli_flag *fl = &a->flags[f];
    out->key = key;
    out->json = (unsigned char)(v->type + 1);
    out->value = NULL;
    if (!fl->takes_value) {
        if (v->type != CL_JSON_BOOL)
            return cl_error(CL_ERR_INVALID, "%s: \"%s\" is %s; it is a switch: true or false", path, key, type_name(v->type));
        out->value = v->boolean ? "1" : NULL;
        return CL_OK;
    }
    switch (v->type) {
    case CL_JSON_NULL: return CL_OK;
    case CL_JSON_NUMBER:
        number_text(v, config_text[slot], sizeof config_text[slot]);
        out->value = config_text[slot];
        return CL_OK;
    case CL_JSON_STRING:
        if (strlen(v->string) != v->string_len) return cl_error(CL_ERR_INVALID, "%s: \"%s\" holds a NUL character", path, key);
        out->value = v->string;
        return CL_OK;
    default:
        return cl_error(CL_ERR_INVALID, "%s: \"%s\" is %s; --%s takes a number or a string", path, key, type_name(v->type), fl->name);
    }
}

/* Whether the command line gave the setting of flag f (f or a flag that is "same as" it). */
static int on_command_line(const cli_args *a, int f) {
    int c = cli_flag_canon(a, f);
    for (int g = 0; g < a->nflags; g++)
        if (cli_flag_canon(a, g) == c && a->values[g] && !a->key[g]) return 1;
    return 0;
}

static int same(const char *x, const char *y) { return x == y || (x && y && !strcmp(x, y)); }

cl_status cli_config_load(cli_args *a, const char *path, const cli_section *sections) {
    if (config_doc) return cl_error(CL_ERR_INTERNAL, "cli_config_load: a second --config in one process");
    cl_json_doc *doc;
    cl_status s = cl_json_parse_file(&doc, path);
    if (s) return cl_error_context(s, "--config");
    const cl_json *root = cl_json_root(doc);
    if (root->type != CL_JSON_OBJECT) {
        s = cl_error(CL_ERR_INVALID, "%s: the top level is %s; a config file is a JSON object of settings", path, type_name(root->type));
        cl_json_free(doc);
        return s;
    }
    /* every key read first (by the setting it names), then applied: a refused file sets nothing */
    setting *got = calloc((size_t)CLI_MAX_FLAGS, sizeof *got);
    if (!got) {
        cl_json_free(doc);
        return cl_error(CL_ERR_OOM, "no host memory for --config %s", path);
    }
    int nkeys = 0;
    for (const cl_json *m = root->child; m && !s; m = m->next) {
        const cl_json *items = m, *one = m;
        /* "model" and "data" are flags and sections both: an object is the section */
        int nested = is_section(sections, m->key) && (m->type == CL_JSON_OBJECT || flag_index(a, m->key) < 0);
        if (nested && m->type != CL_JSON_OBJECT) {
            s = cl_error(CL_ERR_INVALID, "%s: \"%s\" is %s; it is a section: an object of settings", path, m->key, type_name(m->type));
            break;
        }
        if (nested) items = m->child;
        for (const cl_json *v = nested ? items : one; v && !s; v = nested ? v->next : NULL) {
            char *key = config_keys[nkeys % CLI_MAX_FLAGS];
            snprintf(key, sizeof config_keys[0], "%s%s%s", nested ? m->key : "", nested ? "." : "", v->key);
            int f = flag_index(a, v->key);
            const char *sec = f >= 0 ? cli_config_section(sections, a->flags[cli_flag_canon(a, f)].name) : NULL;
            if (f < 0 || (nested && !(sec && !strcmp(sec, m->key)))) {
                s = unknown_key(a, sections, path, key);
                break;
            }
            if (!strcmp(v->key, "help") || !strcmp(v->key, "config") || !strcmp(v->key, "print-config")) {
                s = cl_error(CL_ERR_INVALID, "%s: \"%s\" is not a setting (give --%s on the command line)", path, key, v->key);
                break;
            }
            if (nkeys++ >= CLI_MAX_FLAGS) {
                s = cl_error(CL_ERR_INVALID, "%s: more than %d keys", path, CLI_MAX_FLAGS);
                break;
            }
            int c = cli_flag_canon(a, f);
            setting now;
            if ((s = read_value(a, path, key, f, v, nkeys - 1, &now))) break;
            if (got[c].key && (!same(got[c].value, now.value) || got[c].json != now.json)) {
                s = cl_error(CL_ERR_INVALID, "%s: \"%s\" and \"%s\" are one setting, given %s and %s", path, got[c].key, key,
                             got[c].value ? got[c].value : "unset", now.value ? now.value : "unset");
                break;
            }
            got[c] = now;
        }
    }
    if (!s) {
        for (int f = 0; f < a->nflags; f++) {
            if (!got[f].key || on_command_line(a, f)) continue;
            a->values[f] = got[f].value;
            a->key[f] = got[f].key;
            a->json[f] = got[f].json;
        }
        a->config = path;
        config_doc = doc; /* kept: the values point into it */
    } else {
        cl_json_free(doc);
    }
    free(got);
    return s;
}

void cli_print_help_sections(const char *usage, const cli_flag *flags, int nflags, const cli_section *sections) {
    if (cli_man_summary) { /* the man page lists them as one table */
        cli_print_help(usage, flags, nflags);
        return;
    }
    printf("%s\n\nFlags:\n", usage);
    for (int i = 0; i < nflags; i++)
        if (!cli_config_section(sections, flags[i].name)) cli_print_flag(&flags[i]);
    for (int k = 0; sections && sections[k].name; k++) {
        printf("\n%c%s (--config section \"%s\"):\n", sections[k].name[0] - 'a' + 'A', sections[k].name + 1, sections[k].name);
        for (int i = 0; i < nflags; i++) {
            const char *sec = cli_config_section(sections, flags[i].name);
            if (sec && !strcmp(sec, sections[k].name)) cli_print_flag(&flags[i]);
        }
    }
}
