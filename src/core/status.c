/* Status codes and the per-thread last-error message (see core.h). */
#include "cleave/core.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char err_msg[1024];

const char *cl_status_name(cl_status s) {
    switch (s) {
    case CL_OK: return "ok";
    case CL_ERR_INVALID: return "invalid argument";
    case CL_ERR_OOM: return "out of memory";
    case CL_ERR_IO: return "i/o error";
    case CL_ERR_FORMAT: return "bad format";
    case CL_ERR_UNSUPPORTED: return "unsupported";
    case CL_ERR_COMM: return "communication error";
    case CL_ERR_INTERNAL: return "internal error";
    case CL_ERR_NUMERIC: return "non-finite value";
    }
    return "unknown status";
}

cl_status cl_error(cl_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    va_end(ap);
    return s;
}

cl_status cl_error_context(cl_status s, const char *fmt, ...) {
    char prefix[512], old[sizeof err_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err_msg, sizeof old);
    size_t n = strlen(prefix);
    /* the separator is ours: a prefix that ends in one of its own would print ": :" */
    while (n > 0 && (prefix[n - 1] == ' ' || prefix[n - 1] == ':')) n--;
    if (n > sizeof err_msg - 3) n = sizeof err_msg - 3;
    memcpy(err_msg, prefix, n);
    memcpy(err_msg + n, ": ", 2);
    size_t m = strlen(old);
    if (m > sizeof err_msg - n - 3) m = sizeof err_msg - n - 3;
    memcpy(err_msg + n + 2, old, m);
    err_msg[n + 2 + m] = 0;
    return s;
}

const char *cl_last_error(void) { return err_msg[0] ? err_msg : "no error"; }

void cl_error_clear(void) { err_msg[0] = 0; }

void cl_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "cleave: internal error: assertion '%s' failed at %s:%d\n", expr, file, line);
    abort();
}
