/* Minimal test harness: CHECK prints what differed and where, counts
 * failures; a test binary returns non-zero if any check failed.
 *
 * Counting: a test case is one CHECK in the source (one site), however
 * often it runs: it passed when every run of it held, failed when one did
 * not. cl_test_skip counts a case that could not run. cl_test_report ends
 * with "name: N checks; P passed, F failed, S skipped", the line
 * tests/run.sh adds up. */
#ifndef CLEAVE_TEST_CHECK_H
#define CLEAVE_TEST_CHECK_H

#include <math.h>
#include <pthread.h>
#include <stdio.h>

extern int cl_test_failures;
extern int cl_test_checks;
extern int cl_test_cases, cl_test_cases_failed;

/* A site's state: 0 not run yet, 1 every run held, 2 a run failed. */
#define CL_TEST_SITE(site_, ok_)                                           \
    do {                                                                   \
        if (site_ == 0) { cl_test_cases++; site_ = 1; }                    \
        if (!(ok_) && site_ == 1) { cl_test_cases_failed++; site_ = 2; }   \
    } while (0)

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        static int cl_site_;                                               \
        int cl_ok_ = (cond) ? 1 : 0;                                       \
        cl_test_checks++;                                                  \
        CL_TEST_SITE(cl_site_, cl_ok_);                                    \
        if (!cl_ok_) {                                                     \
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
/* A part that cannot run here (what: why), counted as a skipped case. With
 * setup non-zero the missing thing is one scripts/setup.sh installs: under
 * CI=true it is a failed case instead. */
void cl_test_skip(const char *what, int setup);
int cl_test_report(const char *name); /* prints the closing line above; returns the exit code */

#endif
