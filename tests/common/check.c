#include "common/check.h"

#include <stdlib.h>

int cl_test_failures = 0;
int cl_test_checks = 0;
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

int cl_test_report(const char *name) {
    printf("%s: %d checks, %d failed\n", name, cl_test_checks, cl_test_failures);
    return cl_test_failures ? 1 : 0;
}
