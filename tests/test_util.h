/* test_util.h: a minimal test harness. Each CHECK prints one PASS or FAIL line; tests/run_cpu_tests.sh counts them.
 * A test binary exits with status 1 if any check failed. */
#ifndef TEST_UTIL_H
#define TEST_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int test_failures = 0;
static int test_passes = 0;

#define CHECK(cond, ...)                                   \
    do {                                                   \
        if (cond) {                                        \
            test_passes++;                                 \
            printf("PASS ");                               \
        } else {                                           \
            test_failures++;                               \
            printf("FAIL [%s:%d] ", __FILE__, __LINE__);   \
        }                                                  \
        printf(__VA_ARGS__);                               \
        printf("\n");                                      \
        fflush(stdout);                                    \
    } while (0)

static inline int test_summary_in(const char *file) {
    printf("# %s: %d passed, %d failed\n", file, test_passes, test_failures);
    return test_failures ? 1 : 0;
}
#define test_summary() test_summary_in(__FILE__)

/* ||a - b|| / ||b|| over n elements, in double. */
static inline double rel_error_f(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static inline int all_finite_f(const float *a, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(a[i])) return 0;
    return 1;
}

#endif
