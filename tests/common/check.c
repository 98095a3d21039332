#include "common/check.h"

#include <stdlib.h>
#include <string.h>

int cl_test_failures = 0;
int cl_test_checks = 0;
int cl_test_cases = 0, cl_test_cases_failed = 0;
static int skipped = 0;
pthread_mutex_t cl_test_mu = PTHREAD_MUTEX_INITIALIZER;

double cl_test_rel_err(const float *a, const float *b, long n, long *worst) {
    double maxdiff = 0, maxref = 0;
    long w = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > maxdiff || isnan(d)) { maxdiff = isnan(d) ? INFINITY : d; w = i; }
        if (fabs((double)b[i]) > maxref) maxref = fabs((double)b[i]);
    }
    if (worst) *worst = w;
    return maxref > 0 ? maxdiff / maxref : maxdiff;
}

void cl_test_skip(const char *what, int setup) {
    const char *ci = getenv("CI");
    pthread_mutex_lock(&cl_test_mu);
    if (setup && ci && !strcmp(ci, "true")) {
        fprintf(stderr, "check failed: %s: missing, though the set-up installs it (CI=true)\n", what);
        cl_test_cases++;
        cl_test_cases_failed++;
        cl_test_failures++;
    } else {
        printf("SKIP: %s\n", what);
        skipped++;
    }
    pthread_mutex_unlock(&cl_test_mu);
}

int cl_test_report(const char *name) {
    printf("%s: %d checks; %d passed, %d failed, %d skipped\n", name, cl_test_checks, cl_test_cases - cl_test_cases_failed,
           cl_test_cases_failed, skipped);
    return cl_test_failures ? 1 : 0;
}
