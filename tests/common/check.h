/* Minimal test harness: CHECK prints what differed and where, counts
 * failures; a test binary returns non-zero if any check failed. */
#ifndef CLEAVE_TEST_CHECK_H
#define CLEAVE_TEST_CHECK_H

#include <math.h>
#include <pthread.h>
#include <stdio.h>

extern int cl_test_failures;
extern int cl_test_checks;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        cl_test_checks++;                                                  \
        if (!(cond)) {                                                     \
            cl_test_failures++;                                            \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
        }                                                                  \
    } while (0)

#define CHECK_OK(expr)                                                     \
    do {                                                                   \
        cl_status s_ = (expr);                                             \
        CHECK(s_ == CL_OK, "%s -> %s: %s", #expr, cl_status_name(s_), cl_last_error()); \
    } while (0)

/* CHECK and CHECK_OK from several threads at once (rank functions): one
 * at a time, under cl_test_mu. */
extern pthread_mutex_t cl_test_mu;
#define TCHECK(...)                        \
    do {                                   \
        pthread_mutex_lock(&cl_test_mu);   \
        CHECK(__VA_ARGS__);                \
        pthread_mutex_unlock(&cl_test_mu); \
    } while (0)
#define TCHECK_OK(expr)                                                                  \
    do {                                                                                 \
        cl_status s_ = (expr);                                                           \
        TCHECK(s_ == CL_OK, "%s -> %s: %s", #expr, cl_status_name(s_), cl_last_error()); \
    } while (0)

/* max |a-b| / max |b| over n floats; prints the worst index on failure */
double cl_test_rel_err(const float *a, const float *b, long n, long *worst);
int cl_test_report(const char *name); /* prints "name: N checks, M failed"; returns exit code */

#endif
