/* Flag parsing for the cleave command (see args.h). Accepts --flag VALUE and
 * --flag=VALUE; short aliases like -h. */
#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int find_flag(const cli_flag *flags, int n, const char *name, size_t len) {
    for (int i = 0; i < n; i++) {
        if (strlen(flags[i].name) == len && !strncmp(flags[i].name, name, len)) return i;
        if (flags[i].alias[0] && strlen(flags[i].alias) == len && !strncmp(flags[i].alias, name, len)) return i;
    }
    return -1;
}

cl_status cli_parse(cli_args *a, const cli_flag *flags, int nflags, int argc, char **argv, int start) {
    memset(a, 0, sizeof *a);
    a->flags = flags;
    a->nflags = nflags;
    for (int i = start; i < argc; i++) {
        const char *arg = argv[i];
        if (arg[0] != '-' || !arg[1]) return cl_error(CL_ERR_INVALID, "unexpected argument '%s' (flags start with --)", arg);
        const char *name = arg + 1;
        if (*name == '-') name++;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        int f = find_flag(flags, nflags, name, len);
        if (f < 0) return cl_error(CL_ERR_INVALID, "unknown flag '%.*s' (see --help)", (int)(len + (size_t)(name - arg)), arg);
        if (flags[f].takes_value) {
            if (eq) a->values[f] = eq + 1;
            else if (i + 1 < argc) a->values[f] = argv[++i];
            else return cl_error(CL_ERR_INVALID, "flag --%s needs a value", flags[f].name);
        } else {
            if (eq) return cl_error(CL_ERR_INVALID, "flag --%s takes no value", flags[f].name);
            a->values[f] = "1";
        }
    }
    return CL_OK;
}

const char *cli_get(const cli_args *a, const char *name) {
    int f = find_flag(a->flags, a->nflags, name, strlen(name));
    return f >= 0 ? a->values[f] : NULL;
}

void cli_default(cli_args *a, const char *name, const char *value) {
    int f = find_flag(a->flags, a->nflags, name, strlen(name));
    if (f >= 0 && !a->values[f]) a->values[f] = value;
}

cl_status cli_int(const cli_args *a, const char *name, int *out, int min, int max) {
    const char *v = cli_get(a, name);
    if (!v) return CL_OK;
    errno = 0;
    char *end;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || errno) return cl_error(CL_ERR_INVALID, "--%s: '%s' is not an integer", name, v);
    if (x < min || x > max) {
        if (min == 1 && x < 1) return cl_error(CL_ERR_INVALID, "--%s must be positive (got %s)", name, v);
        return cl_error(CL_ERR_INVALID, "--%s must be between %d and %d (got %s)", name, min, max, v);
    }
    *out = (int)x;
    return CL_OK;
}

cl_status cli_u64(const cli_args *a, const char *name, uint64_t *out) {
    const char *v = cli_get(a, name);
    if (!v) return CL_OK;
    errno = 0;
    char *end;
    if (*v == '-') return cl_error(CL_ERR_INVALID, "--%s must be non-negative (got %s)", name, v);
    unsigned long long x = strtoull(v, &end, 10);
    if (end == v || *end || errno) return cl_error(CL_ERR_INVALID, "--%s: '%s' is not a non-negative integer", name, v);
    *out = x;
    return CL_OK;
}

cl_status cli_float(const cli_args *a, const char *name, float *out, double min, double max) {
    const char *v = cli_get(a, name);
    if (!v) return CL_OK;
    errno = 0;
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(x)) return cl_error(CL_ERR_INVALID, "--%s: '%s' is not a number", name, v);
    if (x < min || x > max) return cl_error(CL_ERR_INVALID, "--%s must be between %g and %g (got %s)", name, min, max, v);
    *out = (float)x;
    return CL_OK;
}

cl_status cli_bytes(const cli_args *a, const char *name, size_t *out) {
    const char *v = cli_get(a, name);
    if (!v) return CL_OK;
    cl_status s = cl_parse_bytes(v, out);
    return s ? cl_error_context(s, "--%s", name) : CL_OK;
}

void cli_print_help(const char *usage, const cli_flag *flags, int nflags) {
    printf("%s\n\nFlags:\n", usage);
    for (int i = 0; i < nflags; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s%s", flags[i].name, flags[i].alias[0] ? ", -" : "", flags[i].alias,
                 flags[i].takes_value ? " X" : "");
        printf("  %-34s %s\n", left, flags[i].help);
    }
}

int cli_exit_status(cl_status s) { return (s == CL_ERR_INTERNAL || s == CL_ERR_COMM || s == CL_ERR_NUMERIC) ? 1 : 2; }

int cli_fail(cl_status s) {
    fprintf(stderr, "cleave: error: %s\n", cl_last_error());
    return cli_exit_status(s);
}
