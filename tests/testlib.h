// A tiny assertion library for the C tests: each CHECK counts, a failure prints file:line and the
// values, and test_finish() prints "N passed, N failed" and returns the exit code.
// GPU tests call test_require_gpu() first: with no GPU they print the reason and exit 77,
// which ctest reports as skipped.
#ifndef MEMOPT_TESTLIB_H
#define MEMOPT_TESTLIB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

extern int test_passed, test_failed;

#define CHECK(cond) test_check((cond), __FILE__, __LINE__, #cond)
#define CHECK_MSG(cond, ...) test_checkf((cond), __FILE__, __LINE__, __VA_ARGS__)
// Exact equality of unsigned 64-bit values, printing both.
#define CHECK_EQ_U64(a, b) test_check_eq_u64((uint64_t)(a), (uint64_t)(b), __FILE__, __LINE__, #a, #b)
// An mo_status call that must succeed; prints mo_errmsg() if not.
#define CHECK_OK(expr) test_check_ok((int)(expr), __FILE__, __LINE__, #expr)
// Relative error ||got - want|| / ||want|| (L2, over n floats) at most tol; NaN never passes.
#define CHECK_REL(got, want, n, tol) test_check_rel((got), (want), (n), (tol), __FILE__, __LINE__, #got)

int test_check(int ok, const char *file, int line, const char *what);
int test_checkf(int ok, const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
int test_check_eq_u64(uint64_t a, uint64_t b, const char *file, int line, const char *ea, const char *eb);
int test_check_ok(int status, const char *file, int line, const char *what);
int test_check_rel(const float *got, const float *want, size_t n, double tol, const char *file, int line,
                   const char *what);
double test_rel_error(const float *got, const float *want, size_t n); // NaN if any NaN/inf in got

void test_require_gpu(void); // exits 77 with the reason when there is no usable CUDA device
int test_finish(void);       // prints the summary; returns 0 if nothing failed, else 1

// Deterministic random numbers for tests (xorshift64*): fresh data per seed.
typedef struct { uint64_t s; } test_rng;
void test_rng_seed(test_rng *r, uint64_t seed);
uint64_t test_rng_u64(test_rng *r);
float test_rng_uniform(test_rng *r, float lo, float hi);
void test_fill_uniform(test_rng *r, float *x, size_t n, float lo, float hi);
uint64_t test_seed_from_time(void); // a new seed per run, printed so a failure can be replayed
// MEMOPT_TEST_REDUCED=1: skip the timing loops (compute-sanitizer runs the GPU tests ~10-100x slower;
// tools/gpu_session.sh stage sanitize). Prints the skip once per caller.
int test_reduced(const char *what);
// The same switch, asked without printing: tests pass smaller shapes and fewer repetitions under it
// (every code path kept; see the sizes at each use) so that a compute-sanitizer pass of every binary
// fits in a GPU call.
int test_is_reduced(void);
// MEMOPT_TEST_REDUCED=2, for compute-sanitizer's slowest tools (racecheck, initcheck: tools/gpu_sanitize.sh):
// the longest tests also cut their grids to a diagonal (every precision, policy and kernel still once).
// Returns 0 (not reduced), 1 or 2.
int test_reduced_level(void);
// Under MEMOPT_TEST_REDUCED: the batch of an attention shape reduced to 1 (the paths depend on T, C,
// NH and the head size; the batch only repeats them); otherwise B.
int test_reduced_batch(int B);
// MEMOPT_TEST_UNDER_SANITIZER=1 (tools/gpu_sanitize.sh sets it): compute-sanitizer allocates device memory of
// its own as the program runs, so a check of device-wide memory (cudaMemGetInfo against the allocator's
// figures) says nothing about the suite there. Returns 1 and prints, once per caller's what, that such a
// check is not made; 0 (check) otherwise.
int test_device_wide_skip(const char *what);
// The same switch (MEMOPT_TEST_UNDER_SANITIZER), asked without printing: 1 under compute-sanitizer.
int test_under_sanitizer(void);
// MEMOPT_TEST_PART=i/n (1 <= i <= n <= 64): a long GPU test split over n processes, so that each compute-sanitizer
// run of it fits a device call (tools/gpu_sanitize.sh, runs named TOOL:BINARY@i/n). A test calls this once per
// case, in the same order in every process: the k-th call (k from 0) returns 1 in part k % n + 1 only, so the n
// parts together run every case once. Unset: 1 always. A bad value prints the accepted form and exits 2.
// test_finish() prints how many cases the part ran.
int test_part_take(const char *what);

#endif
