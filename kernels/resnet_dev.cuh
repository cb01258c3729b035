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

// 16 bytes of S as fp32: V = 4 fp32 or 8 16-bit elements, for the vectorized kernels (batchnorm.cu,
// pool.cu). p must be 16-byte aligned; element k of the vector is p[k].
template <class D> struct rn_vec {
    typedef typename D::S S;
    enum { V = 16 / sizeof(S) };
    union U {
        uint4 u;
        S e[V];
    };
    static __device__ __forceinline__ void ld(float *f, const S *p) {
        U x;
        x.u = *reinterpret_cast<const uint4 *>(p);
#pragma unroll
        for (int k = 0; k < V; k++) f[k] = D::to_f(x.e[k]);
    }
    static __device__ __forceinline__ void st(S *p, const float *f) {
        U x;
#pragma unroll
        for (int k = 0; k < V; k++) x.e[k] = D::from_f(f[k]);
        *reinterpret_cast<uint4 *>(p) = x.u;
    }
};

// Every pointer 16-byte aligned and C a multiple of the vector: the vectorized kernels apply
static inline int rn_vec_ok(size_t elem, int C, const void *a, const void *b, const void *c, const void *d) {
    const size_t V = 16 / elem;
    return C % (int)V == 0 && ((uintptr_t)a & 15u) == 0 && ((uintptr_t)b & 15u) == 0 && ((uintptr_t)c & 15u) == 0 &&
           ((uintptr_t)d & 15u) == 0;
}

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
