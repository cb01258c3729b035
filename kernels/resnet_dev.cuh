// Device helpers of the ResNet's own kernels (pool.cu, batchnorm.cu): an element type per dtype (storage S,
// exact conversion to fp32, fp32 -> S rounded to nearest even as the cpu references' rn_st), the
// grid-stride loop and the launch switch over the three dtypes.
#ifndef MEMOPT_RESNET_DEV_CUH
#define MEMOPT_RESNET_DEV_CUH

#include <stdint.h>
#include "mixed_dev.cuh"

struct rn_f32 {
    typedef float S;
    static __device__ __forceinline__ float to_f(float b) { return b; }
    static __device__ __forceinline__ float from_f(float f) { return f; }
};
struct rn_f16 {
    typedef uint16_t S;
    static __device__ __forceinline__ float to_f(uint16_t b) { return mx_f16::to_f(b); }
    static __device__ __forceinline__ uint16_t from_f(float f) { return mx_f16::from_f(f); }
};
struct rn_bf16 {
    typedef uint16_t S;
    static __device__ __forceinline__ float to_f(uint16_t b) { return mx_bf16::to_f(b); }
    static __device__ __forceinline__ uint16_t from_f(float f) { return mx_bf16::from_f(f); }
};

#define GRID_STRIDE(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// LAUNCH(T) with T the element type of dt (MO_F32, MO_F16, otherwise bf16)
#define DISPATCH(dt, LAUNCH)                     \
    do {                                         \
        if ((dt) == MO_F32) LAUNCH(rn_f32);      \
        else if ((dt) == MO_F16) LAUNCH(rn_f16); \
        else LAUNCH(rn_bf16);                    \
    } while (0)

#endif
