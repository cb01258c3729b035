// The GELU device functions (tanh approximation) shared by gelu.cu and gelu_mixed.cu, so the fp32 and
// the mixed-precision kernels compute the same fp32 values. See gelu.cu for the accuracy notes.
#ifndef MEMOPT_GELU_DEV_CUH
#define MEMOPT_GELU_DEV_CUH

#include <cuda_runtime.h>
#include "gelu.h"

__device__ __forceinline__ float gelu_tanh(float u) {
    float a = fabsf(u);
    float t = 1.0f; // tanh(a) = 1 - 2e-13 for a >= 15: exactly 1 in fp32
    if (a < 15.0f) {
        float e = expm1f(2.0f * a);
        t = __fdiv_rn(e, e + 2.0f);
    }
    return copysignf(t, u);
}

__device__ __forceinline__ float gelu_fwd(float x) {
    float cube = 0.044715f * x * x * x;
    return 0.5f * x * (1.0f + gelu_tanh(MO_GELU_SCALE * (x + cube)));
}

__device__ __forceinline__ float gelu_grad(float x) {
    float cube = 0.044715f * x * x * x;
    float t = gelu_tanh(MO_GELU_SCALE * (x + cube));
    float sech2 = 1.0f - t * t;
    return 0.5f * (1.0f + t) + x * 0.5f * sech2 * MO_GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}

#endif
