// Host buffers of the CPU tests of the 16-bit ops, shared so each test file does not carry its own
// copy. The including file declares its generator first: `static test_rng rng;`. Out of host memory
// ends the test program (nothing after it could be checked).
#ifndef MEMOPT_TESTS_MIXED_HOST_H
#define MEMOPT_TESTS_MIXED_HOST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "kernels/dtype.h"
#include "tests/testlib.h"

static inline void *hnew(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) { fprintf(stderr, "out of host memory\n"); exit(1); }
    return p;
}
static inline float *fnew(size_t n) { return hnew(n * sizeof(float)); }
static inline uint16_t *hnew16(size_t n) { return hnew(n * sizeof(uint16_t)); }
// random fp32 values that are exactly representable in dt, and their dt copy
static inline float *frand_dt(mo_dtype dt, size_t n, float lo, float hi, uint16_t **h16) {
    float *f = fnew(n);
    test_fill_uniform(&rng, f, n, lo, hi);
    *h16 = hnew16(n);
    mo_convert_from_f32(dt, *h16, f, n);
    mo_convert_to_f32(dt, f, *h16, n);
    return f;
}
static inline void poison16(mo_dtype dt, uint16_t *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = dt == MO_BF16 ? 0x7FC0 : 0x7E00; // quiet NaN
}
// an fp32 copy of n dt values
static inline float *to_f32(mo_dtype dt, const uint16_t *x, size_t n) {
    float *f = fnew(n);
    mo_convert_to_f32(dt, f, x, n);
    return f;
}

#endif
