#include "testlib.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kernels/backend.h"
#include "kernels/status.h"
#ifdef MEMOPT_HAVE_CUDA
#include "kernels/resnet_ops_impl.h"
#endif

int test_passed, test_failed;

int test_check(int ok, const char *file, int line, const char *what) {
    if (ok) { test_passed++; return 1; }
    test_failed++;
    fprintf(stderr, "FAIL %s:%d: %s\n", file, line, what);
    return 0;
}

int test_checkf(int ok, const char *file, int line, const char *fmt, ...) {
    if (ok) { test_passed++; return 1; }
    test_failed++;
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 0;
}

int test_check_eq_u64(uint64_t a, uint64_t b, const char *file, int line, const char *ea, const char *eb) {
    return test_checkf(a == b, file, line, "%s == %s: %llu != %llu", ea, eb, (unsigned long long)a,
                       (unsigned long long)b);
}

int test_check_ok(int status, const char *file, int line, const char *what) {
    return test_checkf(status == MO_OK, file, line, "%s: %s: %s", what, mo_status_name((mo_status)status),
                       mo_errmsg());
}

double test_rel_error(const float *got, const float *want, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return NAN;
        double d = (double)got[i] - (double)want[i];
        num += d * d;
        den += (double)want[i] * want[i];
    }
    if (den == 0) return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}

int test_check_rel(const float *got, const float *want, size_t n, double tol, const char *file, int line,
                   const char *what) {
    double e = test_rel_error(got, want, n);
    int ok = !isnan(e) && e <= tol;
    if (ok) printf("  %-40s rel err %.3e (tol %.1e)\n", what, e, tol);
    return test_checkf(ok, file, line, "%s: relative error %.3e > tol %.1e (n=%zu)", what, e, tol, n);
}

// Seconds since the test's first call here (test_require_gpu, or the first case), for "runs here" lines
static double test_seconds(void) {
    static struct timespec t0;
    static int started;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (!started) t0 = t, started = 1;
    return (double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec);
}

void test_require_gpu(void) {
    // Under compute-sanitizer (MEMOPT_TEST_REDUCED) stdout goes to a file: line-buffered, so that a run cut
    // at its time limit shows how far it got (tools/gpu_sanitize.sh prints its last line)
    if (test_is_reduced()) setvbuf(stdout, NULL, _IOLBF, 0);
    (void)test_seconds(); // the clock of the "runs here" lines starts here
    const char *why = NULL;
    if (!mo_cuda_available(&why)) {
        printf("SKIPPED: this GPU test needs a CUDA device: %s\n", why ? why : "?");
        exit(77);
    }
}

// MEMOPT_TEST_PART's state: part (1-based) of n, cases seen and taken so far
static int part_i, part_n, part_read;
static long part_seen, part_taken;

static void part_parse(void) {
    if (part_read) return;
    part_read = 1;
    part_i = part_n = 1;
    const char *e = getenv("MEMOPT_TEST_PART");
    if (!e || !*e) return;
    char *end = NULL;
    long i = strtol(e, &end, 10), n = 0;
    if (end && *end == '/') n = strtol(end + 1, &end, 10);
    if (!end || *end || i < 1 || n < i || n > 64) {
        fprintf(stderr, "MEMOPT_TEST_PART=%s: accepted i/n with 1 <= i <= n <= 64, e.g. 2/3\n", e);
        exit(2);
    }
    part_i = (int)i;
    part_n = (int)n;
}

int test_part_take(const char *what) {
    part_parse();
    const long k = part_seen++;
    if (part_n == 1) return 1;
    if (k % part_n == part_i - 1) {
        part_taken++;
        // said, so that a run cut for time shows how many of its cases it began (tools/gpu_sanitize.sh),
        // and when: under a sanitizer a case's time is its start to the next one's
        printf("MEMOPT_TEST_PART=%d/%d: case %ld (%s) runs here, %.1f s in\n", part_i, part_n, k, what, test_seconds());
        return 1;
    }
    printf("MEMOPT_TEST_PART=%d/%d: case %ld (%s) is another part's\n", part_i, part_n, k, what);
    return 0;
}

int test_finish(void) {
#ifdef MEMOPT_HAVE_CUDA
    // The pooled cuDNN handles destroyed here, before exit: with only the pool's atexit drain,
    // compute-sanitizer's leak check (session 12, gpu_resnet_ops) still found a pooled handle's three
    // cudnnCreate allocations (25352 bytes) live when it checked.
    mo_dnn_pool_drain();
#endif
    if (part_read && part_n > 1)
        printf("MEMOPT_TEST_PART=%d/%d: %ld of the %ld cases run here\n", part_i, part_n, part_taken, part_seen);
    printf("%d passed, %d failed\n", test_passed, test_failed);
    return test_failed ? 1 : 0;
}

void test_rng_seed(test_rng *r, uint64_t seed) { r->s = seed ? seed : 0x9e3779b97f4a7c15ull; }

uint64_t test_rng_u64(test_rng *r) {
    uint64_t x = r->s;
    x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
    r->s = x;
    return x * 0x2545f4914f6cdd1dull;
}

float test_rng_uniform(test_rng *r, float lo, float hi) {
    return lo + (hi - lo) * (float)((test_rng_u64(r) >> 40) * (1.0 / 16777216.0));
}

void test_fill_uniform(test_rng *r, float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = test_rng_uniform(r, lo, hi);
}

uint64_t test_seed_from_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t s = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
    const char *env = getenv("MEMOPT_TEST_SEED");
    if (env) s = strtoull(env, NULL, 0);
    printf("seed %llu (replay with MEMOPT_TEST_SEED=%llu)\n", (unsigned long long)s, (unsigned long long)s);
    return s;
}

int test_is_reduced(void) {
    const char *e = getenv("MEMOPT_TEST_REDUCED");
    return e && strcmp(e, "0") != 0 && *e;
}

int test_reduced_level(void) {
    if (!test_is_reduced()) return 0;
    const long v = strtol(getenv("MEMOPT_TEST_REDUCED"), NULL, 10);
    return v >= 2 ? 2 : 1;
}

int test_reduced_batch(int B) { return test_is_reduced() ? 1 : B; }

int test_under_sanitizer(void) {
    const char *e = getenv("MEMOPT_TEST_UNDER_SANITIZER");
    return e && *e && strcmp(e, "0") != 0;
}

int test_device_wide_skip(const char *what) {
    if (!test_under_sanitizer()) return 0;
    static const char *said[16];
    static int nsaid;
    for (int i = 0; i < nsaid; i++)
        if (said[i] == what) return 1;
    if (nsaid < 16) said[nsaid++] = what;
    printf("SKIP (MEMOPT_TEST_UNDER_SANITIZER): %s: compute-sanitizer's own device allocations move cudaMemGetInfo\n", what);
    return 1;
}

int test_reduced(const char *what) {
    const int r = test_is_reduced();
    if (r) printf("MEMOPT_TEST_REDUCED: skipping %s\n", what);
    return r;
}
