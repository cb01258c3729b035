// LayerNorm kernels. Forward adapted from karpathy/llm.c (train_gpt2_fp32.cu, layernorm_forward_kernel3:
// one warp per row, shuffle reductions). Backward follows llm.c's layernorm_backward_kernel2 for dinp, but
// reduces dweight/dbias without float atomics: each warp owns a (2, C) slice of shared memory (lane l
// touches only columns = l mod 32, so no two threads ever update one address), the block sums its warps in
// warp order into a partial row of the scratch, and a second kernel sums the partials in fixed order.
// Per-row scalars (mean, 1/sqrt, the two row means of the backward) use IEEE division and square root
// (__fdiv_rn, __fsqrt_rn) so they match the cpu reference despite --use_fast_math.
// Rows of 16-byte groups up to C 1024 run the register kernels (a lane's groups of a row held in
// registers, below the loop kernels), the rest the loop kernels.
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_check.h"
#include "layernorm.h"

#define LN_FWD_THREADS 256 // 8 rows per block
#define LN_BWD_WARPS_MAX 8

static inline int ln_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

__device__ __forceinline__ float ln_warp_sum(float v) {
    // xor butterfly: every lane ends with the same bits (each step adds the same two values)
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The per-group arithmetic (a float4), shared by the loop kernels' VEC paths and the register kernels
// (MEMOPT_LN=loop picks the former), so that the two kinds give the same bits
__device__ __forceinline__ float ln_sum4(float4 v) { return v.x + v.y + v.z + v.w; }
__device__ __forceinline__ float ln_sq4(float4 v, float m) {
    float a = v.x - m, b = v.y - m, cc = v.z - m, d = v.w - m;
    return a * a + b * b + cc * cc + d * d;
}
// the backward's row sums of a group: a += dnorm, b += dnorm * norm
__device__ __forceinline__ void ln_bwd_sums4(float &a, float &b, float4 d, float4 xv, float4 wv, float mu, float rs) {
    float n0 = (xv.x - mu) * rs, n1 = (xv.y - mu) * rs, n2 = (xv.z - mu) * rs, n3 = (xv.w - mu) * rs;
    float g0 = wv.x * d.x, g1 = wv.y * d.y, g2 = wv.z * d.z, g3 = wv.w * d.w;
    a += g0 + g1 + g2 + g3;
    b += g0 * n0 + g1 * n1 + g2 * n2 + g3 * n3;
}
// the backward's second pass on a group: the warp's dweight (sw) and dbias (sb) slices, dinp (gx) +=
__device__ __forceinline__ void ln_bwd_apply4(float4 &gx, float4 &sw, float4 &sb, float4 d, float4 xv, float4 wv,
                                              float mu, float rs, float dnorm_mean, float dnorm_norm_mean) {
    float n;
#define LN_BWD_ONE(k)                                                   \
    n = (xv.k - mu) * rs;                                               \
    sb.k += d.k;                                                        \
    sw.k += n * d.k;                                                    \
    gx.k += ((wv.k * d.k - dnorm_mean) - n * dnorm_norm_mean) * rs;
    LN_BWD_ONE(x) LN_BWD_ONE(y) LN_BWD_ONE(z) LN_BWD_ONE(w)
#undef LN_BWD_ONE
}
// the block's partial (dweight, dbias) row: its warps' slices summed in warp order
__device__ __forceinline__ void ln_block_partial(float *p, const float *sh, int warps, int C) {
    for (int i = threadIdx.x; i < 2 * C; i += blockDim.x) {
        float s = 0.0f;
        for (int k = 0; k < warps; k++) s += sh[(size_t)k * 2 * C + i];
        p[i] = s;
    }
}
__device__ __forceinline__ float4 ln_out4(float4 v, float4 w, float4 b, float s, float m) {
    float4 r;
    r.x = (s * (v.x - m)) * w.x + b.x;
    r.y = (s * (v.y - m)) * w.y + b.y;
    r.z = (s * (v.z - m)) * w.z + b.z;
    r.w = (s * (v.w - m)) * w.w + b.w;
    return r;
}

// ---- forward: out (N,C), mean (N), rstd (N); one warp per row ----
template <bool VEC>
__global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *__restrict__ inp,
                                         const float *__restrict__ weight, const float *__restrict__ bias, int N,
                                         int C) {
    int warps = blockDim.x / 32, lane = threadIdx.x % 32;
    int row = blockIdx.x * warps + threadIdx.x / 32;
    if (row >= N) return; // the whole warp leaves together
    const float *x = inp + (size_t)row * C;
    float *o = out + (size_t)row * C;
    const int C4 = C / 4;

    float sum = 0.0f;
    if (VEC) {
        for (int i = lane; i < C4; i += 32) {
            sum += ln_sum4(reinterpret_cast<const float4 *>(x)[i]);
        }
    } else {
        for (int i = lane; i < C; i += 32) sum += x[i];
    }
    float m = __fdiv_rn(ln_warp_sum(sum), (float)C);

    sum = 0.0f;
    if (VEC) {
        for (int i = lane; i < C4; i += 32) {
            sum += ln_sq4(reinterpret_cast<const float4 *>(x)[i], m);
        }
    } else {
        for (int i = lane; i < C; i += 32) {
            float d = x[i] - m;
            sum += d * d;
        }
    }
    float var = __fdiv_rn(ln_warp_sum(sum), (float)C);
    float s = __fdiv_rn(1.0f, __fsqrt_rn(var + MO_LAYERNORM_EPS));
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = s;
    }

    if (VEC) {
        for (int i = lane; i < C4; i += 32) {
            float4 v = reinterpret_cast<const float4 *>(x)[i];
            float4 w = reinterpret_cast<const float4 *>(weight)[i];
            float4 b = reinterpret_cast<const float4 *>(bias)[i];
            reinterpret_cast<float4 *>(o)[i] = ln_out4(v, w, b, s, m);
        }
    } else {
        for (int i = lane; i < C; i += 32) o[i] = (s * (x[i] - m)) * weight[i] + bias[i];
    }
}

// The register kernel: a lane's NG float4 groups of a row (i = lane + 32 j, j < NG, those with i < C / 4)
// read once into registers (the loop kernel reads the row three times); up to LN_REG_GROUPS groups
// (C <= 1024), with 16-byte rows, unless MEMOPT_LN=loop. The loop kernel's sums in the same order.
#define LN_REG_GROUPS 8
template <int NG>
__global__ void __launch_bounds__(LN_FWD_THREADS) layernorm_forward_regs(float *out, float *mean, float *rstd,
                                                                         const float *__restrict__ inp,
                                                                         const float *__restrict__ weight,
                                                                         const float *__restrict__ bias, int N, int C) {
    int warps = blockDim.x / 32, lane = threadIdx.x % 32;
    int row = blockIdx.x * warps + threadIdx.x / 32;
    if (row >= N) return; // the whole warp leaves together
    const float4 *x = reinterpret_cast<const float4 *>(inp + (size_t)row * C);
    float4 *o = reinterpret_cast<float4 *>(out + (size_t)row * C);
    const int C4 = C / 4;
    float4 v[NG];
#pragma unroll
    for (int j = 0; j < NG; j++)
        if (lane + 32 * j < C4) v[j] = x[lane + 32 * j];
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < NG; j++)
        if (lane + 32 * j < C4) sum += ln_sum4(v[j]);
    float m = __fdiv_rn(ln_warp_sum(sum), (float)C);
    sum = 0.0f;
#pragma unroll
    for (int j = 0; j < NG; j++)
        if (lane + 32 * j < C4) sum += ln_sq4(v[j], m);
    float var = __fdiv_rn(ln_warp_sum(sum), (float)C);
    float s = __fdiv_rn(1.0f, __fsqrt_rn(var + MO_LAYERNORM_EPS));
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = s;
    }
#pragma unroll
    for (int j = 0; j < NG; j++) {
        const int i = lane + 32 * j;
        if (i < C4)
            o[i] = ln_out4(v[j], reinterpret_cast<const float4 *>(weight)[i], reinterpret_cast<const float4 *>(bias)[i], s, m);
    }
}

extern "C" mo_status layernorm_forward_cuda(mo_ctx *c, float *out, float *mean, float *rstd, const float *inp,
                                            const float *weight, const float *bias, int N, int C) {
    cudaStream_t s = (cudaStream_t)c->stream;
    int vec = C % 4 == 0 && ln_aligned16(out) && ln_aligned16(inp) && ln_aligned16(weight) && ln_aligned16(bias);
    int rows_per_block = LN_FWD_THREADS / 32;
    unsigned grid = (unsigned)((N + rows_per_block - 1) / rows_per_block);
    const int ng = vec && !c->ln_loop ? (C / 4 + 31) / 32 : 0;
    switch (ng <= LN_REG_GROUPS ? ng : 0) {
#define LN_FWD_CASE(k)                                                                                        \
    case k:                                                                                                   \
        layernorm_forward_regs<k><<<grid, LN_FWD_THREADS, 0, s>>>(out, mean, rstd, inp, weight, bias, N, C); \
        CUDA_CHECK_LAUNCH();                                                                                  \
        return MO_OK;
        LN_FWD_CASE(1) LN_FWD_CASE(2) LN_FWD_CASE(3) LN_FWD_CASE(4) LN_FWD_CASE(5) LN_FWD_CASE(6) LN_FWD_CASE(7)
        LN_FWD_CASE(8)
#undef LN_FWD_CASE
    default: break;
    }
    if (vec)
        layernorm_forward_kernel<true><<<grid, LN_FWD_THREADS, 0, s>>>(out, mean, rstd, inp, weight, bias, N, C);
    else
        layernorm_forward_kernel<false><<<grid, LN_FWD_THREADS, 0, s>>>(out, mean, rstd, inp, weight, bias, N, C);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

// ---- backward stage 1: dinp (N,C) +=; partial (G, 2, C) = per-block (dweight, dbias) sums ----
// One warp per row (rows strided over the grid). Shared memory: (warps, 2, C) floats.
template <bool VEC>
__global__ void layernorm_backward_rows(float *dinp, float *partial, const float *dout, const float *__restrict__ inp,
                                        const float *__restrict__ weight, const float *__restrict__ mean,
                                        const float *__restrict__ rstd, int N, int C) {
    extern __shared__ __align__(16) float ln_sh[];
    int warps = blockDim.x / 32, w = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int i = threadIdx.x; i < warps * 2 * C; i += blockDim.x) ln_sh[i] = 0.0f;
    __syncthreads();
    float *sdw = ln_sh + (size_t)w * 2 * C; // this warp's dweight slice (C), then dbias (C)
    float *sdb = sdw + C;
    const int C4 = C / 4;

    for (int row = blockIdx.x * warps + w; row < N; row += gridDim.x * warps) {
        const float *dy = dout + (size_t)row * C;
        const float *x = inp + (size_t)row * C;
        float *dx = dinp + (size_t)row * C;
        const float mu = mean[row], rs = rstd[row];

        float a = 0.0f, b = 0.0f; // sums of dnorm and of dnorm * norm
        if (VEC) {
            for (int i = lane; i < C4; i += 32) {
                float4 d = reinterpret_cast<const float4 *>(dy)[i];
                float4 xv = reinterpret_cast<const float4 *>(x)[i];
                float4 wv = reinterpret_cast<const float4 *>(weight)[i];
                ln_bwd_sums4(a, b, d, xv, wv, mu, rs);
            }
        } else {
            for (int i = lane; i < C; i += 32) {
                float n = (x[i] - mu) * rs;
                float g = weight[i] * dy[i];
                a += g;
                b += g * n;
            }
        }
        const float dnorm_mean = __fdiv_rn(ln_warp_sum(a), (float)C);
        const float dnorm_norm_mean = __fdiv_rn(ln_warp_sum(b), (float)C);

        if (VEC) {
            float4 *sdw4 = reinterpret_cast<float4 *>(sdw), *sdb4 = reinterpret_cast<float4 *>(sdb);
            for (int i = lane; i < C4; i += 32) {
                float4 d = reinterpret_cast<const float4 *>(dy)[i];
                float4 xv = reinterpret_cast<const float4 *>(x)[i];
                float4 wv = reinterpret_cast<const float4 *>(weight)[i];
                float4 gx = reinterpret_cast<float4 *>(dx)[i];
                float4 sw = sdw4[i], sb = sdb4[i];
                ln_bwd_apply4(gx, sw, sb, d, xv, wv, mu, rs, dnorm_mean, dnorm_norm_mean);
                sdw4[i] = sw;
                sdb4[i] = sb;
                reinterpret_cast<float4 *>(dx)[i] = gx;
            }
        } else {
            for (int i = lane; i < C; i += 32) {
                float n = (x[i] - mu) * rs;
                float d = dy[i];
                sdb[i] += d;
                sdw[i] += n * d;
                dx[i] += ((weight[i] * d - dnorm_mean) - n * dnorm_norm_mean) * rs;
            }
        }
    }
    __syncthreads();
    ln_block_partial(partial + (size_t)blockIdx.x * 2 * C, ln_sh, warps, C);
}

// The backward's register kernel: a lane's NG float4 groups of a row (i = lane + 32 j, j < NG, those
// with i < C / 4); its weight groups loaded once for all of its warp's rows, a row's dout and inp groups
// loaded once, before the first reduction (the loop kernel loads them twice, each pass after a
// reduction). The loop kernel's sums in the same order. Up to LN_REG_GROUPS groups (C <= 1024): 8 take
// 128 registers, no spill, under the bound that keeps 2 blocks (16 warps) an SM.
template <int NG>
__global__ void __launch_bounds__(LN_BWD_WARPS_MAX * 32, 2)
    layernorm_backward_regs(float *dinp, float *partial, const float *dout, const float *__restrict__ inp,
                            const float *__restrict__ weight, const float *__restrict__ mean,
                            const float *__restrict__ rstd, int N, int C) {
    extern __shared__ __align__(16) float ln_sh[];
    int warps = blockDim.x / 32, w = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int i = threadIdx.x; i < warps * 2 * C; i += blockDim.x) ln_sh[i] = 0.0f;
    __syncthreads();
    float4 *sdw4 = reinterpret_cast<float4 *>(ln_sh + (size_t)w * 2 * C); // this warp's dweight slice, then dbias
    float4 *sdb4 = sdw4 + C / 4;
    const int C4 = C / 4;
    float4 wv[NG];
#pragma unroll
    for (int j = 0; j < NG; j++)
        if (lane + 32 * j < C4) wv[j] = reinterpret_cast<const float4 *>(weight)[lane + 32 * j];

    for (int row = blockIdx.x * warps + w; row < N; row += gridDim.x * warps) {
        const float4 *dy = reinterpret_cast<const float4 *>(dout + (size_t)row * C);
        const float4 *x = reinterpret_cast<const float4 *>(inp + (size_t)row * C);
        float4 *dx = reinterpret_cast<float4 *>(dinp + (size_t)row * C);
        const float mu = mean[row], rs = rstd[row];
        float4 d[NG], xv[NG];
#pragma unroll
        for (int j = 0; j < NG; j++)
            if (lane + 32 * j < C4) d[j] = dy[lane + 32 * j], xv[j] = x[lane + 32 * j];
        float a = 0.0f, b = 0.0f; // sums of dnorm and of dnorm * norm
#pragma unroll
        for (int j = 0; j < NG; j++)
            if (lane + 32 * j < C4) ln_bwd_sums4(a, b, d[j], xv[j], wv[j], mu, rs);
        const float dnorm_mean = __fdiv_rn(ln_warp_sum(a), (float)C);
        const float dnorm_norm_mean = __fdiv_rn(ln_warp_sum(b), (float)C);
#pragma unroll
        for (int j = 0; j < NG; j++) {
            const int i = lane + 32 * j;
            if (i >= C4) continue;
            float4 gx = dx[i], sw = sdw4[i], sb = sdb4[i];
            ln_bwd_apply4(gx, sw, sb, d[j], xv[j], wv[j], mu, rs, dnorm_mean, dnorm_norm_mean);
            sdw4[i] = sw;
            sdb4[i] = sb;
            dx[i] = gx;
        }
    }
    __syncthreads();
    ln_block_partial(partial + (size_t)blockIdx.x * 2 * C, ln_sh, warps, C);
}

// ---- backward stage 2: dweight (C) +=, dbias (C) += sum over g of partial (G, 2, C) ----
// Block of 32 x 32 threads per 32 columns: warp w sums partials g = w, w+32, ... (coalesced rows), then
// warp 0 adds the 32 warp sums in warp order.
__global__ void layernorm_backward_reduce(float *dweight, float *dbias, const float *partial, int G, int C) {
    __shared__ float sh[32][33];
    int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    int col = blockIdx.x * 32 + lane; // in [0, 2C): dweight columns, then dbias columns
    float s = 0.0f;
    if (col < 2 * C)
        for (int g = w; g < G; g += 32) s += partial[(size_t)g * 2 * C + col];
    sh[w][lane] = s;
    __syncthreads();
    if (w == 0 && col < 2 * C) {
        float t = 0.0f;
        for (int k = 0; k < 32; k++) t += sh[k][lane];
        if (col < C)
            dweight[col] += t;
        else
            dbias[col - C] += t;
    }
}

extern "C" mo_status layernorm_backward_cuda(mo_ctx *c, float *dinp, float *dweight, float *dbias, const float *dout,
                                             const float *inp, const float *weight, const float *mean,
                                             const float *rstd, void *scratch, int N, int C) {
    cudaStream_t s = (cudaStream_t)c->stream;
    int G = layernorm_backward_blocks(N);
    // warps per block from C alone: 8, halved while the (warps, 2, C) slices exceed 96 KiB
    int warps = LN_BWD_WARPS_MAX;
    while (warps > 1 && (size_t)warps * 2 * C * sizeof(float) > (size_t)96 * 1024) warps /= 2;
    size_t smem = (size_t)warps * 2 * C * sizeof(float);
    int dev = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (smem > (size_t)optin)
        return MO_FAIL(MO_ERR_UNSUPPORTED, "layernorm_backward: C=%d needs %zu B of shared memory per block, device has %d",
                       C, smem, optin);
    int vec = C % 4 == 0 && ln_aligned16(dinp) && ln_aligned16(dout) && ln_aligned16(inp) && ln_aligned16(weight);
    float *partial = (float *)scratch;
    void (*kern)(float *, float *, const float *, const float *, const float *, const float *, const float *, int,
                 int) = vec ? layernorm_backward_rows<true> : layernorm_backward_rows<false>;
    const int ng = vec && !c->ln_loop ? (C / 4 + 31) / 32 : 0;
    switch (ng <= LN_REG_GROUPS ? ng : 0) {
    case 1: kern = layernorm_backward_regs<1>; break;
    case 2: kern = layernorm_backward_regs<2>; break;
    case 3: kern = layernorm_backward_regs<3>; break;
    case 4: kern = layernorm_backward_regs<4>; break;
    case 5: kern = layernorm_backward_regs<5>; break;
    case 6: kern = layernorm_backward_regs<6>; break;
    case 7: kern = layernorm_backward_regs<7>; break;
    case 8: kern = layernorm_backward_regs<8>; break;
    default: break;
    }
    if (smem > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    kern<<<(unsigned)G, (unsigned)(warps * 32), smem, s>>>(dinp, partial, dout, inp, weight, mean, rstd, N, C);
    CUDA_CHECK_LAUNCH();
    unsigned grid2 = (unsigned)((2 * C + 31) / 32);
    layernorm_backward_reduce<<<grid2, 1024, 0, s>>>(dweight, dbias, partial, G, C);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

// Stage 2 alone, for the mixed-precision backward (layernorm_mixed.cu): dweight, dbias (C) += the sum
// over g of partial (G, 2, C), in the fixed order of layernorm_backward_reduce.
extern "C" mo_status layernorm_backward_reduce_cuda(mo_ctx *c, float *dweight, float *dbias, const float *partial,
                                                    int G, int C) {
    cudaStream_t s = (cudaStream_t)c->stream;
    unsigned grid2 = (unsigned)((2 * C + 31) / 32);
    layernorm_backward_reduce<<<grid2, 1024, 0, s>>>(dweight, dbias, partial, G, C);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}
