// LayerNorm kernels. Forward adapted from karpathy/llm.c (train_gpt2_fp32.cu, layernorm_forward_kernel3:
// one warp per row, shuffle reductions). Backward follows llm.c's layernorm_backward_kernel2 for dinp, but
// reduces dweight/dbias without float atomics: each warp owns a (2, C) slice of shared memory (lane l
// touches only columns = l mod 32, so no two threads ever update one address), the block sums its warps in
// warp order into a partial row of the scratch, and a second kernel sums the partials in fixed order.
// Per-row scalars (mean, 1/sqrt, the two row means of the backward) use IEEE division and square root
// (__fdiv_rn, __fsqrt_rn) so they match the cpu reference despite --use_fast_math.
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
            float4 v = reinterpret_cast<const float4 *>(x)[i];
            sum += v.x + v.y + v.z + v.w;
        }
    } else {
        for (int i = lane; i < C; i += 32) sum += x[i];
    }
    float m = __fdiv_rn(ln_warp_sum(sum), (float)C);

    sum = 0.0f;
    if (VEC) {
        for (int i = lane; i < C4; i += 32) {
            float4 v = reinterpret_cast<const float4 *>(x)[i];
            float a = v.x - m, b = v.y - m, cc = v.z - m, d = v.w - m;
            sum += a * a + b * b + cc * cc + d * d;
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
            float4 r;
            r.x = (s * (v.x - m)) * w.x + b.x;
            r.y = (s * (v.y - m)) * w.y + b.y;
            r.z = (s * (v.z - m)) * w.z + b.z;
            r.w = (s * (v.w - m)) * w.w + b.w;
            reinterpret_cast<float4 *>(o)[i] = r;
        }
    } else {
        for (int i = lane; i < C; i += 32) o[i] = (s * (x[i] - m)) * weight[i] + bias[i];
    }
}

extern "C" mo_status layernorm_forward_cuda(mo_ctx *c, float *out, float *mean, float *rstd, const float *inp,
                                            const float *weight, const float *bias, int N, int C) {
    cudaStream_t s = (cudaStream_t)c->stream;
    int vec = C % 4 == 0 && ln_aligned16(out) && ln_aligned16(inp) && ln_aligned16(weight) && ln_aligned16(bias);
    int rows_per_block = LN_FWD_THREADS / 32;
    unsigned grid = (unsigned)((N + rows_per_block - 1) / rows_per_block);
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
                float n0 = (xv.x - mu) * rs, n1 = (xv.y - mu) * rs, n2 = (xv.z - mu) * rs, n3 = (xv.w - mu) * rs;
                float g0 = wv.x * d.x, g1 = wv.y * d.y, g2 = wv.z * d.z, g3 = wv.w * d.w;
                a += g0 + g1 + g2 + g3;
                b += g0 * n0 + g1 * n1 + g2 * n2 + g3 * n3;
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
                float n;
#define LN_BWD_ONE(k)                                                   \
    n = (xv.k - mu) * rs;                                               \
    sb.k += d.k;                                                        \
    sw.k += n * d.k;                                                    \
    gx.k += ((wv.k * d.k - dnorm_mean) - n * dnorm_norm_mean) * rs;
                LN_BWD_ONE(x) LN_BWD_ONE(y) LN_BWD_ONE(z) LN_BWD_ONE(w)
#undef LN_BWD_ONE
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
    float *p = partial + (size_t)blockIdx.x * 2 * C;
    for (int i = threadIdx.x; i < 2 * C; i += blockDim.x) {
        float s = 0.0f;
        for (int k = 0; k < warps; k++) s += ln_sh[(size_t)k * 2 * C + i];
        p[i] = s;
    }
}

// ---- backward stage 2: dweight (C) +=, dbias (C) += (and dsum (C) +=) sum over g of partial (G, S, C) ----
// Block of 32 x 32 threads per 32 columns: warp w sums partials g = w, w+32, ... (coalesced rows), then
// warp 0 adds the 32 warp sums in warp order. S = 2 rows a partial (dweight, dbias), or 3 with dsum (the
// 16-bit backward's column sums of its dinp: layernorm_mixed.cu).
__global__ void layernorm_backward_reduce(float *dweight, float *dbias, float *dsum, const float *partial, int G, int C) {
    __shared__ float sh[32][33];
    const int S = dsum ? 3 : 2;
    int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    int col = blockIdx.x * 32 + lane; // in [0, S C): dweight columns, then dbias columns, then dsum's
    float s = 0.0f;
    if (col < S * C)
        for (int g = w; g < G; g += 32) s += partial[(size_t)g * S * C + col];
    sh[w][lane] = s;
    __syncthreads();
    if (w == 0 && col < S * C) {
        float t = 0.0f;
        for (int k = 0; k < 32; k++) t += sh[k][lane];
        if (col < C)
            dweight[col] += t;
        else if (col < 2 * C)
            dbias[col - C] += t;
        else
            dsum[col - 2 * C] += t;
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
    if (vec) {
        if (smem > 48 * 1024)
            CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_rows<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)smem));
        layernorm_backward_rows<true><<<(unsigned)G, (unsigned)(warps * 32), smem, s>>>(dinp, partial, dout, inp,
                                                                                        weight, mean, rstd, N, C);
    } else {
        if (smem > 48 * 1024)
            CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_rows<false>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        layernorm_backward_rows<false><<<(unsigned)G, (unsigned)(warps * 32), smem, s>>>(dinp, partial, dout, inp,
                                                                                         weight, mean, rstd, N, C);
    }
    CUDA_CHECK_LAUNCH();
    unsigned grid2 = (unsigned)((2 * C + 31) / 32);
    layernorm_backward_reduce<<<grid2, 1024, 0, s>>>(dweight, dbias, NULL, partial, G, C);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

// Stage 2 alone, for the mixed-precision backward (layernorm_mixed.cu): dweight, dbias (C) += the sum
// over g of partial (G, 2, C), in the fixed order of layernorm_backward_reduce; with dsum, partial is
// (G, 3, C) and dsum (C) += its third rows' sum, in the same order.
extern "C" mo_status layernorm_backward_reduce_cuda(mo_ctx *c, float *dweight, float *dbias, float *dsum,
                                                    const float *partial, int G, int C) {
    cudaStream_t s = (cudaStream_t)c->stream;
    unsigned grid2 = (unsigned)(((dsum ? 3 : 2) * C + 31) / 32);
    layernorm_backward_reduce<<<grid2, 1024, 0, s>>>(dweight, dbias, dsum, partial, G, C);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}
