// Device helpers of the mixed-precision kernels (*_mixed.cu): 16-bit element types as raw uint16_t
// storage with a conversion tag (mx_f16, mx_bf16), and 16-byte vector loads/stores of 8 elements.
// Conversions: 16 -> fp32 is exact; fp32 -> 16 rounds to nearest even (__float2half_rn,
// __float2bfloat16_rn), as mo_f32_to_f16 / mo_f32_to_bf16 on the host.
#ifndef MEMOPT_MIXED_DEV_CUH
#define MEMOPT_MIXED_DEV_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

struct mx_f16 {
    static __device__ __forceinline__ float to_f(uint16_t b) { return __half2float(__ushort_as_half(b)); }
    static __device__ __forceinline__ uint16_t from_f(float f) { return __half_as_ushort(__float2half_rn(f)); }
};
struct mx_bf16 {
    static __device__ __forceinline__ float to_f(uint16_t b) { return __bfloat162float(__ushort_as_bfloat16(b)); }
    static __device__ __forceinline__ uint16_t from_f(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
};

static inline int mx_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

// 8 elements loaded as a uint4 as fp32; element 2k is the low half of word k (little-endian), so f[j] is
// the j-th element (kernels that keep a row's groups in registers hold them packed: half the registers
// of fp32).
template <class D> __device__ __forceinline__ void mx_cvt8(float f[8], uint4 u) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        f[2 * k] = D::to_f((uint16_t)(w[k] & 0xffffu));
        f[2 * k + 1] = D::to_f((uint16_t)(w[k] >> 16));
    }
}
// 8 consecutive elements at p (16-byte aligned) as fp32: f[j] is p[j]
template <class D> __device__ __forceinline__ void mx_ld8(float f[8], const uint16_t *p) {
    mx_cvt8<D>(f, *reinterpret_cast<const uint4 *>(p));
}
template <class D> __device__ __forceinline__ void mx_st8(uint16_t *p, const float f[8]) {
    unsigned w[4];
#pragma unroll
    for (int k = 0; k < 4; k++) w[k] = (unsigned)D::from_f(f[2 * k]) | ((unsigned)D::from_f(f[2 * k + 1]) << 16);
    *reinterpret_cast<uint4 *>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}
// 8 consecutive fp32 at p (16-byte aligned)
__device__ __forceinline__ void mx_ld8f(float f[8], const float *p) {
    float4 a = reinterpret_cast<const float4 *>(p)[0], b = reinterpret_cast<const float4 *>(p)[1];
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
    f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}
__device__ __forceinline__ void mx_st8f(float *p, const float f[8]) {
    reinterpret_cast<float4 *>(p)[0] = make_float4(f[0], f[1], f[2], f[3]);
    reinterpret_cast<float4 *>(p)[1] = make_float4(f[4], f[5], f[6], f[7]);
}

// Grid sizes of the elementwise kernels: one thread per `work` item, at most 65536 blocks (grid-stride).
#define MX_THREADS 256
static inline unsigned mx_grid(size_t work) {
    size_t g = (work + MX_THREADS - 1) / MX_THREADS;
    if (g < 1) g = 1;
    return (unsigned)(g > 65536 ? 65536 : g);
}

// cp.async (sm_80+): a 16- or 4-byte global -> shared copy that holds no register while in flight, so a thread
// can have many outstanding (attention_fused_mixed.cu's tiles, matmul_mixed.cu's wide bias-gradient rows)
static __device__ __forceinline__ uint32_t mx_smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
static __device__ __forceinline__ void mx_cp_async16(void *dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(mx_smem_u32(dst)), "l"(src) : "memory");
}
static __device__ __forceinline__ void mx_cp_async4(void *dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(mx_smem_u32(dst)), "l"(src) : "memory");
}
static __device__ __forceinline__ void mx_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
static __device__ __forceinline__ void mx_cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

#endif
