// Cast kernels (fp32 <-> fp16/bf16, fp16 <-> bf16; each element rounded once to nearest even, widening
// exact) and the non-finite check (ops_mixed.h). Elementwise, 8 elements per thread and iteration with
// 16-byte accesses when both pointers are 16-byte aligned; the first n % 8 threads also take the tail.
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_check.h"
#include "mixed_dev.cuh"
#include "ops_mixed_impl.h"

// Element access of one side of a cast: fp32 storage, or 16-bit storage with its conversion tag.
struct cast_f32 {
    typedef float T;
    static __device__ __forceinline__ void ld8(float f[8], const T *p) { mx_ld8f(f, p); }
    static __device__ __forceinline__ void st8(T *p, const float f[8]) { mx_st8f(p, f); }
    static __device__ __forceinline__ float ld(const T *p, size_t i) { return p[i]; }
    static __device__ __forceinline__ void st(T *p, size_t i, float f) { p[i] = f; }
};
template <class D> struct cast_16 {
    typedef uint16_t T;
    static __device__ __forceinline__ void ld8(float f[8], const T *p) { mx_ld8<D>(f, p); }
    static __device__ __forceinline__ void st8(T *p, const float f[8]) { mx_st8<D>(p, f); }
    static __device__ __forceinline__ float ld(const T *p, size_t i) { return D::to_f(p[i]); }
    static __device__ __forceinline__ void st(T *p, size_t i, float f) { p[i] = D::from_f(f); }
};

template <class S, class Dst, bool VEC>
__global__ void cast_kernel(typename Dst::T *dst, const typename S::T *src, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x, id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (VEC) {
        size_t n8 = n / 8;
        for (size_t i = id; i < n8; i += stride) {
            float f[8];
            S::ld8(f, src + 8 * i);
            Dst::st8(dst + 8 * i, f);
        }
        if (id < n - n8 * 8) Dst::st(dst, n8 * 8 + id, S::ld(src, n8 * 8 + id));
    } else {
        for (size_t i = id; i < n; i += stride) Dst::st(dst, i, S::ld(src, i));
    }
}

template <class S, class Dst> static mo_status cast_launch(mo_ctx *c, void *dst, const void *src, size_t n) {
    cudaStream_t s = (cudaStream_t)c->stream;
    typename Dst::T *d = (typename Dst::T *)dst;
    const typename S::T *x = (const typename S::T *)src;
    if (mx_aligned16(dst) && mx_aligned16(src))
        cast_kernel<S, Dst, true><<<mx_grid(n / 8), MX_THREADS, 0, s>>>(d, x, n);
    else
        cast_kernel<S, Dst, false><<<mx_grid(n), MX_THREADS, 0, s>>>(d, x, n);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

extern "C" mo_status cast_mixed_cuda(mo_ctx *c, mo_dtype dst_dt, void *dst, mo_dtype src_dt, const void *src,
                                     size_t n) {
    if (n == 0) return MO_OK;
    typedef cast_16<mx_f16> H;
    typedef cast_16<mx_bf16> BH;
    if (src_dt == MO_F32 && dst_dt == MO_F16) return cast_launch<cast_f32, H>(c, dst, src, n);
    if (src_dt == MO_F32 && dst_dt == MO_BF16) return cast_launch<cast_f32, BH>(c, dst, src, n);
    if (src_dt == MO_F16 && dst_dt == MO_F32) return cast_launch<H, cast_f32>(c, dst, src, n);
    if (src_dt == MO_BF16 && dst_dt == MO_F32) return cast_launch<BH, cast_f32>(c, dst, src, n);
    if (src_dt == MO_F16 && dst_dt == MO_BF16) return cast_launch<H, BH>(c, dst, src, n);
    if (src_dt == MO_BF16 && dst_dt == MO_F16) return cast_launch<BH, H>(c, dst, src, n);
    return MO_FAIL(MO_ERR_INTERNAL, "cast_mixed_cuda: no kernel for %d -> %d", (int)src_dt, (int)dst_dt);
}

// ---- non-finite check: *flag = 1 if any element has an all-ones exponent (inf / NaN) ----
// Every thread that finds one contributes to the block's __syncthreads_or; thread 0 of such a block
// stores 1 (all stores write the same value, so the result never depends on timing).
__device__ __forceinline__ bool nf_bad(float x) { return (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u; }

template <bool VEC> __global__ void nonfinite_kernel(int *flag, const float *g, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x, id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    bool bad = false;
    if (VEC) {
        size_t n4 = n / 4;
        for (size_t i = id; i < n4; i += stride) {
            float4 v = reinterpret_cast<const float4 *>(g)[i];
            bad |= nf_bad(v.x) | nf_bad(v.y) | nf_bad(v.z) | nf_bad(v.w);
        }
        if (id < n - n4 * 4) bad |= nf_bad(g[n4 * 4 + id]);
    } else {
        for (size_t i = id; i < n; i += stride) bad |= nf_bad(g[i]);
    }
    if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;
}

extern "C" mo_status nonfinite_cuda(mo_ctx *c, const float *g, void *scratch, size_t n, int *out_host) {
    if (n == 0) {
        *out_host = 0;
        return MO_OK;
    }
    cudaStream_t s = (cudaStream_t)c->stream;
    int *flag = (int *)scratch;
    CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), s));
    if (mx_aligned16(g))
        nonfinite_kernel<true><<<mx_grid(n / 4), MX_THREADS, 0, s>>>(flag, g, n);
    else
        nonfinite_kernel<false><<<mx_grid(n), MX_THREADS, 0, s>>>(flag, g, n);
    CUDA_CHECK_LAUNCH();
    int h = 0;
    CUDA_CHECK(cudaMemcpyAsync(&h, flag, sizeof(int), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    *out_host = h != 0;
    return MO_OK;
}
