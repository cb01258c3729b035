// LayerNorm kernels with 16-bit activations and weights (ops_mixed.h), the schemes of layernorm.cu:
// forward one warp per row (8 elements per 16-byte load), shuffle reductions, IEEE division/sqrt for the
// row scalars; backward one warp per row into per-warp shared (dweight, dbias) slices, a per-block
// partial row in the scratch, then layernorm.cu's fixed-order reduce (layernorm_backward_reduce_cuda).
// Deterministic; all arithmetic in fp32, 16-bit outputs rounded once.
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_check.h"
#include "layernorm.h"
#include "mixed_dev.cuh"
#include "ops_mixed.h"
#include "ops_mixed_impl.h"

#define LNM_FWD_THREADS 256 // 8 rows per block
#define LNM_BWD_WARPS_MAX 8
// The register kernels (below the loop kernels) hold a lane's 8-element groups of a row, i, i + 32, ...,
// in registers: the forward up to LNM_REG_GROUPS_FWD groups (C <= 2048), the backward up to
// LNM_REG_GROUPS_BWD (C <= 1024: with 5 groups ptxas spills at the 128 registers that keep 2 blocks an
// SM); wider rows, rows that are not 16-byte groups, and MEMOPT_LN=loop take the loop kernels. Both kinds
// run the per-group arithmetic below in the same order, so they give the same bits.
#define LNM_REG_GROUPS_FWD 8
#define LNM_REG_GROUPS_BWD 4

__device__ __forceinline__ float lnm_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// ---- the per-group arithmetic (8 elements) of both kernel kinds ----
// the forward's sum of a group
__device__ __forceinline__ float lnm_sum8(const float v[8]) {
    return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}
// sum += the group's squared deviations from m
__device__ __forceinline__ void lnm_sq8(float &sum, const float v[8], float m) {
#pragma unroll
    for (int k = 0; k < 8; k++) {
        float d = v[k] - m;
        sum += d * d;
    }
}
// v := the forward's output of the group
__device__ __forceinline__ void lnm_out8(float v[8], const float w[8], const float b[8], float s, float m) {
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] = (s * (v[k] - m)) * w[k] + b[k];
}
// the backward's row sums: a += dnorm, b += dnorm * norm
__device__ __forceinline__ void lnm_bwd_sums8(float &a, float &b, const float d[8], const float xv[8], const float wv[8],
                                              float mu, float rs) {
#pragma unroll
    for (int k = 0; k < 8; k++) {
        float n = (xv[k] - mu) * rs;
        float g = wv[k] * d[k];
        a += g;
        b += g * n;
    }
}
// the backward's second pass on a group: the warp's dbias and dweight slices, dinp +=
__device__ __forceinline__ void lnm_bwd_apply8(float gx[8], float sw[8], float sb[8], const float d[8], const float xv[8],
                                               const float wv[8], float mu, float rs, float dnorm_mean,
                                               float dnorm_norm_mean) {
#pragma unroll
    for (int k = 0; k < 8; k++) {
        float n = (xv[k] - mu) * rs;
        sb[k] += d[k];
        sw[k] += n * d[k];
        gx[k] += ((wv[k] * d[k] - dnorm_mean) - n * dnorm_norm_mean) * rs;
    }
}
// the backward's column sums of its new dinp (SUM kernels): sg += the group's values as stored (rounded to D)
template <class D> __device__ __forceinline__ void lnm_bwd_dsum8(float sg[8], const float gx[8]) {
#pragma unroll
    for (int k = 0; k < 8; k++) sg[k] += D::to_f(D::from_f(gx[k]));
}
// the block's (warps, S, C) shared slices zeroed (and the block synchronized), SC = S C floats a warp; this
// warp's slice returned
__device__ __forceinline__ float *lnm_zero_slices(float *sh, int SC) {
    for (int i = threadIdx.x; i < (int)(blockDim.x / 32) * SC; i += blockDim.x) sh[i] = 0.0f;
    __syncthreads();
    return sh + (size_t)(threadIdx.x / 32) * SC;
}
// the block's partial (dweight, dbias[, dsum]) row of SC floats: its warps' slices summed in warp order
__device__ __forceinline__ void lnm_block_partial(float *p, const float *sh, int warps, int SC) {
    for (int i = threadIdx.x; i < SC; i += blockDim.x) {
        float s = 0.0f;
        for (int k = 0; k < warps; k++) s += sh[(size_t)k * SC + i];
        p[i] = s;
    }
}

template <class D, bool VEC>
__global__ void layernorm_forward_mixed_kernel(uint16_t *out, float *mean, float *rstd,
                                               const uint16_t *__restrict__ inp, const uint16_t *__restrict__ weight,
                                               const uint16_t *__restrict__ bias, int N, int C) {
    int warps = blockDim.x / 32, lane = threadIdx.x % 32;
    int row = blockIdx.x * warps + threadIdx.x / 32;
    if (row >= N) return; // the whole warp leaves together
    const uint16_t *x = inp + (size_t)row * C;
    uint16_t *o = out + (size_t)row * C;
    const int C8 = C / 8;

    float sum = 0.0f;
    if (VEC) {
        for (int i = lane; i < C8; i += 32) {
            float v[8];
            mx_ld8<D>(v, x + 8 * i);
            sum += lnm_sum8(v);
        }
    } else {
        for (int i = lane; i < C; i += 32) sum += D::to_f(x[i]);
    }
    const float m = __fdiv_rn(lnm_warp_sum(sum), (float)C);

    sum = 0.0f;
    if (VEC) {
        for (int i = lane; i < C8; i += 32) {
            float v[8];
            mx_ld8<D>(v, x + 8 * i);
            lnm_sq8(sum, v, m);
        }
    } else {
        for (int i = lane; i < C; i += 32) {
            float d = D::to_f(x[i]) - m;
            sum += d * d;
        }
    }
    const float var = __fdiv_rn(lnm_warp_sum(sum), (float)C);
    const float s = __fdiv_rn(1.0f, __fsqrt_rn(var + MO_LAYERNORM_EPS));
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = s;
    }

    if (VEC) {
        for (int i = lane; i < C8; i += 32) {
            float v[8], w[8], b[8];
            mx_ld8<D>(v, x + 8 * i);
            mx_ld8<D>(w, weight + 8 * i);
            mx_ld8<D>(b, bias + 8 * i);
            lnm_out8(v, w, b, s, m);
            mx_st8<D>(o + 8 * i, v);
        }
    } else {
        for (int i = lane; i < C; i += 32)
            o[i] = D::from_f((s * (D::to_f(x[i]) - m)) * D::to_f(weight[i]) + D::to_f(bias[i]));
    }
}

// ---- backward stage 1: dinp (N,C) dt +=; partial (G, S, C) fp32 = per-block (dweight, dbias) sums, and
// with SUM (S = 3) the sums of the new dinp's columns (as stored, rounded to D) ----
// One warp per row (rows strided over the grid); shared memory (warps, S, C) floats; in the VEC path
// lane l owns the 8-column groups l, l+32, ... of its warp's slice (no two threads share an address).
template <class D, bool VEC, bool SUM>
__global__ void layernorm_backward_mixed_rows(uint16_t *dinp, float *partial, const uint16_t *dout,
                                              const uint16_t *__restrict__ inp, const uint16_t *__restrict__ weight,
                                              const float *__restrict__ mean, const float *__restrict__ rstd, int N,
                                              int C) {
    extern __shared__ __align__(16) float lnm_sh[];
    int warps = blockDim.x / 32, w = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int SC = (SUM ? 3 : 2) * C;
    float *sdw = lnm_zero_slices(lnm_sh, SC); // this warp's dweight slice (C), then dbias (C), then dsum (C)
    float *sdb = sdw + C, *sdg = sdw + 2 * C;
    const int C8 = C / 8;

    for (int row = blockIdx.x * warps + w; row < N; row += gridDim.x * warps) {
        const uint16_t *dy = dout + (size_t)row * C;
        const uint16_t *x = inp + (size_t)row * C;
        uint16_t *dx = dinp + (size_t)row * C;
        const float mu = mean[row], rs = rstd[row];

        float a = 0.0f, b = 0.0f; // sums of dnorm and of dnorm * norm
        if (VEC) {
            for (int i = lane; i < C8; i += 32) {
                float d[8], xv[8], wv[8];
                mx_ld8<D>(d, dy + 8 * i);
                mx_ld8<D>(xv, x + 8 * i);
                mx_ld8<D>(wv, weight + 8 * i);
                lnm_bwd_sums8(a, b, d, xv, wv, mu, rs);
            }
        } else {
            for (int i = lane; i < C; i += 32) {
                float n = (D::to_f(x[i]) - mu) * rs;
                float g = D::to_f(weight[i]) * D::to_f(dy[i]);
                a += g;
                b += g * n;
            }
        }
        const float dnorm_mean = __fdiv_rn(lnm_warp_sum(a), (float)C);
        const float dnorm_norm_mean = __fdiv_rn(lnm_warp_sum(b), (float)C);

        if (VEC) {
            for (int i = lane; i < C8; i += 32) {
                float d[8], xv[8], wv[8], gx[8], sw[8], sb[8];
                mx_ld8<D>(d, dy + 8 * i);
                mx_ld8<D>(xv, x + 8 * i);
                mx_ld8<D>(wv, weight + 8 * i);
                mx_ld8<D>(gx, dx + 8 * i);
                mx_ld8f(sw, sdw + 8 * i);
                mx_ld8f(sb, sdb + 8 * i);
                lnm_bwd_apply8(gx, sw, sb, d, xv, wv, mu, rs, dnorm_mean, dnorm_norm_mean);
                mx_st8f(sdw + 8 * i, sw);
                mx_st8f(sdb + 8 * i, sb);
                if (SUM) {
                    float sg[8];
                    mx_ld8f(sg, sdg + 8 * i);
                    lnm_bwd_dsum8<D>(sg, gx);
                    mx_st8f(sdg + 8 * i, sg);
                }
                mx_st8<D>(dx + 8 * i, gx);
            }
        } else {
            for (int i = lane; i < C; i += 32) {
                float n = (D::to_f(x[i]) - mu) * rs;
                float d = D::to_f(dy[i]);
                sdb[i] += d;
                sdw[i] += n * d;
                const uint16_t g = D::from_f(D::to_f(dx[i]) + ((D::to_f(weight[i]) * d - dnorm_mean) - n * dnorm_norm_mean) * rs);
                if (SUM) sdg[i] += D::to_f(g);
                dx[i] = g;
            }
        }
    }
    __syncthreads();
    lnm_block_partial(partial + (size_t)blockIdx.x * SC, lnm_sh, warps, SC);
}

// ---- register kernels: a lane's NG groups of a row (i = lane + 32 j, j < NG, those with i < C / 8),
// held packed (a uint4 each: 4 registers where fp32 would take 8) and widened to fp32 where used ----
#define LNM_LD(p) (*reinterpret_cast<const uint4 *>(p))
// Forward: the row read once (the loop kernel reads it three times), the three phases on registers.
template <class D, int NG>
__global__ void __launch_bounds__(LNM_FWD_THREADS) layernorm_forward_mixed_regs(uint16_t *out, float *mean, float *rstd,
                                                                                const uint16_t *__restrict__ inp,
                                                                                const uint16_t *__restrict__ weight,
                                                                                const uint16_t *__restrict__ bias, int N,
                                                                                int C) {
    int warps = blockDim.x / 32, lane = threadIdx.x % 32;
    int row = blockIdx.x * warps + threadIdx.x / 32;
    if (row >= N) return; // the whole warp leaves together
    const uint16_t *x = inp + (size_t)row * C;
    uint16_t *o = out + (size_t)row * C;
    const int C8 = C / 8;
    uint4 xr[NG];
#pragma unroll
    for (int j = 0; j < NG; j++)
        if (lane + 32 * j < C8) xr[j] = LNM_LD(x + 8 * (lane + 32 * j));
    float sum = 0.0f, v[8];
#pragma unroll
    for (int j = 0; j < NG; j++)
        if (lane + 32 * j < C8) mx_cvt8<D>(v, xr[j]), sum += lnm_sum8(v);
    const float m = __fdiv_rn(lnm_warp_sum(sum), (float)C);
    sum = 0.0f;
#pragma unroll
    for (int j = 0; j < NG; j++)
        if (lane + 32 * j < C8) mx_cvt8<D>(v, xr[j]), lnm_sq8(sum, v, m);
    const float var = __fdiv_rn(lnm_warp_sum(sum), (float)C);
    const float s = __fdiv_rn(1.0f, __fsqrt_rn(var + MO_LAYERNORM_EPS));
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = s;
    }
#pragma unroll
    for (int j = 0; j < NG; j++) {
        const int i = lane + 32 * j;
        if (i >= C8) continue;
        float w[8], b[8];
        mx_ld8<D>(w, weight + 8 * i);
        mx_ld8<D>(b, bias + 8 * i);
        mx_cvt8<D>(v, xr[j]);
        lnm_out8(v, w, b, s, m);
        mx_st8<D>(o + 8 * i, v);
    }
}

// Backward: the lane's weight groups loaded once for all of its warp's rows; a row's dout, inp and dinp
// groups loaded once, all before the first reduction (the loop kernel loads dout and inp twice, each pass
// after a reduction).
template <class D, int NG, bool SUM>
__global__ void __launch_bounds__(LNM_BWD_WARPS_MAX * 32, 2)
    layernorm_backward_mixed_regs(uint16_t *dinp, float *partial, const uint16_t *dout, const uint16_t *__restrict__ inp,
                                  const uint16_t *__restrict__ weight, const float *__restrict__ mean,
                                  const float *__restrict__ rstd, int N, int C) {
    extern __shared__ __align__(16) float lnm_sh[];
    int warps = blockDim.x / 32, w = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int SC = (SUM ? 3 : 2) * C;
    float *sdw = lnm_zero_slices(lnm_sh, SC); // this warp's dweight slice (C), then dbias (C), then dsum (C)
    float *sdb = sdw + C, *sdg = sdw + 2 * C;
    const int C8 = C / 8;
    uint4 wr[NG];
#pragma unroll
    for (int j = 0; j < NG; j++)
        if (lane + 32 * j < C8) wr[j] = LNM_LD(weight + 8 * (lane + 32 * j));

    for (int row = blockIdx.x * warps + w; row < N; row += gridDim.x * warps) {
        const uint16_t *dy = dout + (size_t)row * C;
        const uint16_t *x = inp + (size_t)row * C;
        uint16_t *dx = dinp + (size_t)row * C;
        const float mu = mean[row], rs = rstd[row];
        uint4 dr[NG], xr[NG], gr[NG];
#pragma unroll
        for (int j = 0; j < NG; j++) {
            const int i = lane + 32 * j;
            if (i < C8) dr[j] = LNM_LD(dy + 8 * i), xr[j] = LNM_LD(x + 8 * i), gr[j] = LNM_LD(dx + 8 * i);
        }
        float a = 0.0f, b = 0.0f; // sums of dnorm and of dnorm * norm
#pragma unroll
        for (int j = 0; j < NG; j++)
            if (lane + 32 * j < C8) {
                float d[8], xv[8], wv[8];
                mx_cvt8<D>(d, dr[j]), mx_cvt8<D>(xv, xr[j]), mx_cvt8<D>(wv, wr[j]);
                lnm_bwd_sums8(a, b, d, xv, wv, mu, rs);
            }
        const float dnorm_mean = __fdiv_rn(lnm_warp_sum(a), (float)C);
        const float dnorm_norm_mean = __fdiv_rn(lnm_warp_sum(b), (float)C);
#pragma unroll
        for (int j = 0; j < NG; j++) {
            const int i = lane + 32 * j;
            if (i >= C8) continue;
            float d[8], xv[8], wv[8], gx[8], sw[8], sb[8];
            mx_cvt8<D>(d, dr[j]), mx_cvt8<D>(xv, xr[j]), mx_cvt8<D>(wv, wr[j]), mx_cvt8<D>(gx, gr[j]);
            mx_ld8f(sw, sdw + 8 * i);
            mx_ld8f(sb, sdb + 8 * i);
            lnm_bwd_apply8(gx, sw, sb, d, xv, wv, mu, rs, dnorm_mean, dnorm_norm_mean);
            mx_st8f(sdw + 8 * i, sw);
            mx_st8f(sdb + 8 * i, sb);
            if (SUM) {
                float sg[8];
                mx_ld8f(sg, sdg + 8 * i);
                lnm_bwd_dsum8<D>(sg, gx);
                mx_st8f(sdg + 8 * i, sg);
            }
            mx_st8<D>(dx + 8 * i, gx);
        }
    }
    __syncthreads();
    lnm_block_partial(partial + (size_t)blockIdx.x * SC, lnm_sh, warps, SC);
}
#undef LNM_LD

// The register kernels' groups a lane holds for C (C / 8 groups over 32 lanes), or 0: the loop kernels
// (MEMOPT_LN=loop, rows not of 16-byte groups, or more than max groups a lane)
static int lnm_reg_groups_of(int vec, int C, int max) {
    const int ng = (C / 8 + 31) / 32;
    return vec && ng <= max ? ng : 0;
}
static int lnm_reg_groups(const mo_ctx *c, int vec, int C, int max) {
    return c->ln_loop ? 0 : lnm_reg_groups_of(vec, C, max);
}
// X(ng) for each register kernel's group count
#define LNM_FWD_CASES(X) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8)
#define LNM_BWD_CASES(X) X(1) X(2) X(3) X(4)

template <class D>
static mo_status layernorm_forward_mixed_launch(mo_ctx *c, void *out, float *mean, float *rstd, const void *inp,
                                                const void *weight, const void *bias, int N, int C) {
    cudaStream_t s = (cudaStream_t)c->stream;
    int vec = C % 8 == 0 && mx_aligned16(out) && mx_aligned16(inp) && mx_aligned16(weight) && mx_aligned16(bias);
    int rows_per_block = LNM_FWD_THREADS / 32;
    unsigned grid = (unsigned)((N + rows_per_block - 1) / rows_per_block);
    uint16_t *o = (uint16_t *)out;
    const uint16_t *x = (const uint16_t *)inp, *w = (const uint16_t *)weight, *b = (const uint16_t *)bias;
    void (*kern)(uint16_t *, float *, float *, const uint16_t *, const uint16_t *, const uint16_t *, int, int) =
        vec ? layernorm_forward_mixed_kernel<D, true> : layernorm_forward_mixed_kernel<D, false>;
    switch (lnm_reg_groups(c, vec, C, LNM_REG_GROUPS_FWD)) {
#define LNM_FWD_CASE(ng) \
    case ng: kern = layernorm_forward_mixed_regs<D, ng>; break;
        LNM_FWD_CASES(LNM_FWD_CASE)
#undef LNM_FWD_CASE
    default: break;
    }
    kern<<<grid, LNM_FWD_THREADS, 0, s>>>(o, mean, rstd, x, w, b, N, C);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

extern "C" mo_status layernorm_forward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *out, float *mean, float *rstd,
                                                  const void *inp, const void *weight, const void *bias, int N,
                                                  int C) {
    return dt == MO_F16 ? layernorm_forward_mixed_launch<mx_f16>(c, out, mean, rstd, inp, weight, bias, N, C)
                        : layernorm_forward_mixed_launch<mx_bf16>(c, out, mean, rstd, inp, weight, bias, N, C);
}

// kern: a stage-1 kernel (loop or register) of the mixed backward
typedef void (*lnm_bwd_kernel)(uint16_t *, float *, const uint16_t *, const uint16_t *, const uint16_t *, const float *,
                               const float *, int, int);
static mo_status layernorm_backward_mixed_rows_launch(lnm_bwd_kernel kern, cudaStream_t s, unsigned G, int warps,
                                                      size_t smem, uint16_t *dinp, float *partial, const uint16_t *dout,
                                                      const uint16_t *inp, const uint16_t *weight, const float *mean,
                                                      const float *rstd, int N, int C) {
    if (smem > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    kern<<<G, (unsigned)(warps * 32), smem, s>>>(dinp, partial, dout, inp, weight, mean, rstd, N, C);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

// The stage-1 kernel: the register kernel of ng groups a lane, or (ng 0) the loop kernel, vectorized or not;
// SUM: the kernels that also sum dinp's columns
template <class D, bool SUM>
static lnm_bwd_kernel lnm_bwd_pick(int vec, int ng) {
    switch (ng) {
#define LNM_BWD_CASE(n) \
    case n: return layernorm_backward_mixed_regs<D, n, SUM>;
        LNM_BWD_CASES(LNM_BWD_CASE)
#undef LNM_BWD_CASE
    default: return vec ? layernorm_backward_mixed_rows<D, true, SUM> : layernorm_backward_mixed_rows<D, false, SUM>;
    }
}

// One wave of kern (the kernel without MEMOPT_LN=loop, so that both kinds split the rows over the same blocks and
// give the same bits): *blocks = the blocks an SM fits x SMs, cached in c->ln_wave (the occupancy query runs once
// a shape, not on every backward).
static mo_status lnm_wave(mo_ctx *c, lnm_bwd_kernel kern, int threads, size_t smem, int dev, int *blocks) {
    mo_ln_wave *lw = &c->ln_wave;
    if (lw->kern != (const void *)kern || lw->threads != threads || lw->smem != smem) {
        if (smem > 48 * 1024)
            CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        int per_sm = 0, sms = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, threads, smem));
        CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        lw->kern = (const void *)kern;
        lw->threads = threads;
        lw->smem = smem;
        lw->blocks = per_sm * sms;
    }
    *blocks = lw->blocks;
    return MO_OK;
}

template <class D, bool SUM>
static mo_status layernorm_backward_mixed_launch(mo_ctx *c, void *dinp, float *dweight, float *dbias, float *dsum,
                                                 const void *dout, const void *inp, const void *weight,
                                                 const float *mean, const float *rstd, void *scratch,
                                                 size_t scratch_bytes, int N, int C) {
    cudaStream_t s = (cudaStream_t)c->stream;
    int G = layernorm_backward_blocks(N);
    // warps per block from C alone (as layernorm.cu): 8, halved while the (dweight, dbias) slices exceed 96 KiB;
    // the same with SUM, whose third slice adds half again (at most 144 KiB: within the 227 KiB of sm_90)
    int warps = LNM_BWD_WARPS_MAX;
    while (warps > 1 && (size_t)warps * 2 * C * sizeof(float) > (size_t)96 * 1024) warps /= 2;
    const int plain_warps = warps, S = SUM ? 3 : 2;
    int dev = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    // The summing kernel's third slice takes half again (144 KiB at most for C <= MO_LN_DSUM_MAX_C: within sm_90's
    // 227); where a device has less, fewer warps (other rows to other blocks: other dweight / dbias bits than
    // the plain kernel's there)
    while (SUM && warps > 1 && (size_t)warps * S * C * sizeof(float) > (size_t)optin) warps /= 2;
    size_t smem = (size_t)warps * S * C * sizeof(float);
    if (smem > (size_t)optin)
        return MO_FAIL(MO_ERR_UNSUPPORTED,
                       "layernorm_backward_mixed: C=%d needs %zu B of shared memory per block, device has %d", C, smem,
                       optin);
    int vec = C % 8 == 0 && mx_aligned16(dinp) && mx_aligned16(dout) && mx_aligned16(inp) && mx_aligned16(weight);
    float *partial = (float *)scratch;
    uint16_t *gx = (uint16_t *)dinp;
    const uint16_t *dy = (const uint16_t *)dout, *x = (const uint16_t *)inp, *w = (const uint16_t *)weight;
    lnm_bwd_kernel kern = lnm_bwd_pick<D, SUM>(vec, lnm_reg_groups(c, vec, C, LNM_REG_GROUPS_BWD));
    // One wave (the default; MEMOPT_LN_WAVE=0 launches G): as many blocks as are resident at once (blocks an
    // SM fits x SMs), when fewer than G, so no second, partly filled wave and half as many per-block passes
    // (zeroing the slices, the partial row) and partial rows for the reduce; the scratch keeps G rows (the
    // peak is the same on every backend). Other rows go to other blocks, so dweight and dbias take other
    // (still fixed) bits than G blocks give; dinp is per row. Measured on an H200 (session 33, interleaved,
    // medians of 20 steps): bf16 GPT-2 124M 15.58 / 15.65 ms -> 15.56 / 15.52, T 2048 B 4 17.06 / 17.04 ->
    // 16.91 / 16.94 (results/h200-ln-wave-ab-720cf68.csv).
    // The wave is the default kernel's (the register one where C allows) also under MEMOPT_LN=loop, so that
    // both kinds split the rows over the same blocks and still give the same bits (gpu_ops_mixed).
    // The summing kernel takes the plain kernel's wave (of plain_warps; it runs those blocks in more than one
    // wave where it fits fewer: at C 1280-1536 on an H100, where its slices allow one block an SM), so both give
    // the same dweight and dbias bits unless the scratch's cap below binds for it: the plain path keeps its own
    // launch. The query is skipped where the plain kernel could not run (its slices above the device's limit).
    if (c->ln_bwd_wave && (size_t)plain_warps * 2 * C * sizeof(float) <= (size_t)optin) {
        int wave = 0;
        MO_TRY(lnm_wave(c, lnm_bwd_pick<D, false>(vec, lnm_reg_groups_of(vec, C, LNM_REG_GROUPS_BWD)), plain_warps * 32,
                        (size_t)plain_warps * 2 * C * sizeof(float), dev, &wave));
        if (wave >= 1 && wave < G) G = wave;
    }
    // The scratch holds scratch_bytes / (S C floats) partial rows (SUM: 2 G_max / 3 of the (G, 2, C) scratch
    // the plain backward takes, at least one: mo_layernorm_backward_sum_scratch_bytes), so no peak moves. At
    // GPT-2's N 8192 on 132 SMs the wave (264 blocks at C 768 and 1024) is below the summing kernel's cap of 341;
    // where the cap binds (fewer rows, or a wider wave: 396 blocks at C 1032, 528 at 1600 on an H100), the
    // summing kernel's dweight and dbias take other fixed bits than the plain kernel's.
    const size_t rows = scratch_bytes / ((size_t)S * C * sizeof(float));
    if ((size_t)G > rows) G = (int)rows;
    if (G < 1) return MO_FAIL(MO_ERR_INTERNAL, "layernorm_backward_mixed: scratch of %zu B holds no partial row", scratch_bytes);
    MO_TRY(layernorm_backward_mixed_rows_launch(kern, s, (unsigned)G, warps, smem, gx, partial, dy, x, w, mean, rstd, N,
                                                C));
    return layernorm_backward_reduce_cuda(c, dweight, dbias, SUM ? dsum : NULL, partial, G, C);
}

extern "C" mo_status layernorm_backward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *dinp, float *dweight, float *dbias,
                                                   float *dsum, const void *dout, const void *inp, const void *weight,
                                                   const float *mean, const float *rstd, void *scratch,
                                                   size_t scratch_bytes, int N, int C) {
#define LNM_BWD_ARGS c, dinp, dweight, dbias, dsum, dout, inp, weight, mean, rstd, scratch, scratch_bytes, N, C
    if (dt == MO_F16)
        return dsum ? layernorm_backward_mixed_launch<mx_f16, true>(LNM_BWD_ARGS)
                    : layernorm_backward_mixed_launch<mx_f16, false>(LNM_BWD_ARGS);
    return dsum ? layernorm_backward_mixed_launch<mx_bf16, true>(LNM_BWD_ARGS)
                : layernorm_backward_mixed_launch<mx_bf16, false>(LNM_BWD_ARGS);
#undef LNM_BWD_ARGS
}
