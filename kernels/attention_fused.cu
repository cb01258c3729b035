// Fused causal attention in fp32 (cuDNN's fused SDPA has no fp32 path), FlashAttention-2 style
// (Dao 2023, Algorithms 1 and 2), written for this suite; the tile scheduling (longest rows first) follows
// karpathy/llm.c's attention kernels.
//
// Kept from the forward: out (B, T, C) and lse (B, NH, T). Recomputed in the backward, tile by tile:
// the scores s = q k^T / sqrt(HS) and P = exp(s - lse); dP = dout v^T; dS = P * (dP - D) with
// D = rowsum(dout * out) (precomputed, the only scratch: (B, NH, T)).
// Deterministic without atomics: dk, dv are summed by one kernel whose block owns a key tile and walks
// the query tiles in order; dq by a second kernel whose block owns a query tile and walks the key tiles.
//
// Tiling, all kernels: a block of 256 threads works on 64-row tiles of one (batch, head); thread
// (ty, tx) = (tid / 16, tid % 16) owns a 4 x 4 micro-tile (rows ty*4.., columns tx*4..) of each 64 x 64
// score tile and, of each 64 x HS output tile, rows ty*4.. and columns tx + 16*cc. A row's 16 owners are
// one half-warp, so row max / sum are 4-step xor shuffles (fixed order, same bits in every lane).
// Tiles live in shared memory transposed, X[d * FA_LD + row] (HS padded up to HSP, a multiple of 16, with
// zeros, rows past T zero too), so a thread reads its 4 rows as one float4; FA_LD = 68 keeps float4
// alignment and spreads the column reads of the accumulation loops over banks.
// Shared memory at HS = 64: forward 69 KB, dk/dv 105 KB, dq 87 KB per block (above 48 KB: opt-in).
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "attention_fused.h"
#include "cuda_check.h"

#define FA_TILE 64
#define FA_LD (FA_TILE + 4)
#define FA_THREADS 256

static __device__ __forceinline__ float fa_half_warp_max(float v) {
    for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static __device__ __forceinline__ float fa_half_warp_sum(float v) {
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// dst (HSP, FA_LD) = transposed tile: dst[d * FA_LD + r] = mul * src[(t0 + r) * ld + d], zero where
// t0 + r >= T or d >= HS. Lanes run along r, so the shared-memory writes do not conflict.
template <int HSP>
static __device__ __forceinline__ void fa_load_t(float *dst, const float *__restrict__ src, size_t ld, int t0,
                                                 int T, int HS, float mul) {
    for (int idx = threadIdx.x; idx < FA_TILE * (HSP / 4); idx += FA_THREADS) {
        const int r = idx % FA_TILE, d0 = (idx / FA_TILE) * 4, t = t0 + r;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int d = d0 + e;
            dst[d * FA_LD + r] = (t < T && d < HS) ? src[(size_t)t * ld + d] * mul : 0.0f;
        }
    }
}

// dst (FA_TILE, HSP) row-major: dst[r * HSP + d] = src[(t0 + r) * ld + d], zero-padded as above.
template <int HSP>
static __device__ __forceinline__ void fa_load_rows(float *dst, const float *__restrict__ src, size_t ld, int t0,
                                                    int T, int HS) {
    for (int idx = threadIdx.x; idx < FA_TILE * HSP; idx += FA_THREADS) {
        const int r = idx / HSP, d = idx % HSP, t = t0 + r;
        dst[idx] = (t < T && d < HS) ? src[(size_t)t * ld + d] : 0.0f;
    }
}

// acc[i][j] += sum_d A[d][a0 + i] * B[d][b0 + j] over transposed tiles A, B (HSP, FA_LD).
template <int HSP>
static __device__ __forceinline__ void fa_outer4x4(float acc[4][4], const float *At, int a0, const float *Bt,
                                                   int b0) {
#pragma unroll 4
    for (int d = 0; d < HSP; d++) {
        const float4 a = *reinterpret_cast<const float4 *>(At + d * FA_LD + a0);
        const float4 b = *reinterpret_cast<const float4 *>(Bt + d * FA_LD + b0);
        const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
}

// Writes the 4 x 4 micro-tile x[i][j] (rows r0 + i, columns c0 + j) transposed: dst[(c0 + j) * FA_LD + r0 + i].
static __device__ __forceinline__ void fa_store_t4x4(float *dst, const float x[4][4], int r0, int c0) {
#pragma unroll
    for (int j = 0; j < 4; j++)
        *reinterpret_cast<float4 *>(dst + (c0 + j) * FA_LD + r0) = make_float4(x[0][j], x[1][j], x[2][j], x[3][j]);
}

// ---- forward: grid (query tiles, NH, B); block = one query tile, walking key tiles 0..qb ----
// smem: Qt (HSP, LD) q * scale | Kt (HSP, LD) | Vs (TILE, HSP) row-major | Pt (TILE, LD): Pt[j][r] = P[r][j]
template <int NC>
__global__ void __launch_bounds__(FA_THREADS)
    fa_forward_kernel(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ qkv, int T, int C,
                      int NH, int HS, float scale) {
    constexpr int HSP = 16 * NC;
    extern __shared__ float4 fa_smem[];
    float *Qt = reinterpret_cast<float *>(fa_smem);
    float *Kt = Qt + HSP * FA_LD;
    float *Vs = Kt + HSP * FA_LD;
    float *Pt = Vs + FA_TILE * HSP;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int qb = gridDim.x - 1 - blockIdx.x; // the longest rows start first
    const int h = blockIdx.y, b = blockIdx.z;
    const int q0 = qb * FA_TILE;
    const size_t ld = 3 * (size_t)C;
    const float *qbase = qkv + (size_t)b * T * ld + (size_t)h * HS; // q of (b, t = 0, h)
    const float *kbase = qbase + C, *vbase = qbase + 2 * (size_t)C;

    fa_load_t<HSP>(Qt, qbase, ld, q0, T, HS, scale);
    float o[4][NC], m[4], l[4]; // running output (unnormalized), row max, row sum of exp(s - m)
#pragma unroll
    for (int i = 0; i < 4; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int cc = 0; cc < NC; cc++) o[i][cc] = 0.0f;
    }
    for (int kb = 0; kb <= qb; kb++) {
        const int k0 = kb * FA_TILE;
        __syncthreads(); // the previous tile's Kt, Vs, Pt are read by all
        fa_load_t<HSP>(Kt, kbase, ld, k0, T, HS, 1.0f);
        fa_load_rows<HSP>(Vs, vbase, ld, k0, T, HS);
        __syncthreads();
        float s[4][4] = {};
        fa_outer4x4<HSP>(s, Qt, ty * 4, Kt, tx * 4);
        // online softmax. Every row has an unmasked key in every tile it visits (key k0 <= its position),
        // so the new max is finite and exp(-inf - max) = 0 for the masked ones and for the first rescale.
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int r = q0 + ty * 4 + i;
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                if (kb == qb && k0 + tx * 4 + j > r) s[i][j] = -INFINITY;
                mx = fmaxf(mx, s[i][j]);
            }
            const float mnew = fmaxf(m[i], fa_half_warp_max(mx));
            const float corr = expf(m[i] - mnew);
            float rs = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                s[i][j] = expf(s[i][j] - mnew);
                rs += s[i][j];
            }
            l[i] = l[i] * corr + fa_half_warp_sum(rs);
            m[i] = mnew;
#pragma unroll
            for (int cc = 0; cc < NC; cc++) o[i][cc] *= corr;
        }
        fa_store_t4x4(Pt, s, ty * 4, tx * 4);
        __syncthreads();
        // o += P (TILE, TILE) @ V (TILE, HSP)
#pragma unroll 4
        for (int j = 0; j < FA_TILE; j++) {
            const float4 p = *reinterpret_cast<const float4 *>(Pt + j * FA_LD + ty * 4);
#pragma unroll
            for (int cc = 0; cc < NC; cc++) {
                const float v = Vs[j * HSP + tx + 16 * cc];
                o[0][cc] = fmaf(p.x, v, o[0][cc]);
                o[1][cc] = fmaf(p.y, v, o[1][cc]);
                o[2][cc] = fmaf(p.z, v, o[2][cc]);
                o[3][cc] = fmaf(p.w, v, o[3][cc]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = q0 + ty * 4 + i;
        if (r >= T) continue;
        const float inv = 1.0f / l[i];
        float *orow = out + ((size_t)b * T + r) * C + (size_t)h * HS;
#pragma unroll
        for (int cc = 0; cc < NC; cc++) {
            const int c = tx + 16 * cc;
            if (c < HS) orow[c] = o[i][cc] * inv;
        }
        // log in double: once per row, and exact enough that the backward's exp(s - lse) matches
        if (tx == 0) lse[((size_t)b * NH + h) * T + r] = m[i] + (float)log((double)l[i]);
    }
}

// ---- backward 1: D (B, NH, T) = rowsum(dout * out) per head; one warp per row ----
__global__ void fa_backward_dot_kernel(float *__restrict__ Dbuf, const float *__restrict__ dout,
                                       const float *__restrict__ out, int rows, int T, int C, int NH, int HS) {
    const int row = blockIdx.x * (FA_THREADS / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    const int t = row % T, h = (row / T) % NH, b = row / (T * NH);
    const size_t off = ((size_t)b * T + t) * C + (size_t)h * HS;
    float s = 0.0f;
    for (int c = lane; c < HS; c += 32) s += dout[off + c] * out[off + c];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) Dbuf[row] = s;
}

// Loads lse and D of query rows q0.. (past T: lse = +inf, so P = exp(s - inf) = 0, and D = 0).
static __device__ __forceinline__ void fa_load_row_stats(float *lse_s, float *D_s, const float *lse_row,
                                                         const float *D_row, int q0, int T) {
    if (threadIdx.x < FA_TILE) {
        const int t = q0 + threadIdx.x;
        lse_s[threadIdx.x] = t < T ? lse_row[t] : INFINITY;
        D_s[threadIdx.x] = t < T ? D_row[t] : 0.0f;
    }
}

// ---- backward 2: dk, dv. grid (key tiles, NH, B); block = one key tile, walking query tiles kb.. ----
// Works on transposed score tiles st[i][j] = s(query tx*4+j, key ty*4+i), so each thread's 4 keys match
// the dk/dv rows it accumulates.
// smem: Kt, Vt, Qt (q * scale), dOt (HSP, LD) | Ps, dSs (TILE, LD): Ps[r][j] = P[r][j] | lse_s, D_s (TILE)
template <int NC>
__global__ void __launch_bounds__(FA_THREADS)
    fa_backward_dkdv_kernel(float *__restrict__ dqkv, const float *__restrict__ dout, const float *__restrict__ qkv,
                            const float *__restrict__ lse, const float *__restrict__ Dbuf, int T, int C, int NH, int HS,
                            float scale) {
    constexpr int HSP = 16 * NC;
    extern __shared__ float4 fa_smem[];
    float *Kt = reinterpret_cast<float *>(fa_smem);
    float *Vt = Kt + HSP * FA_LD;
    float *Qt = Vt + HSP * FA_LD;
    float *dOt = Qt + HSP * FA_LD;
    float *Ps = dOt + HSP * FA_LD;
    float *dSs = Ps + FA_TILE * FA_LD;
    float *lse_s = dSs + FA_TILE * FA_LD;
    float *D_s = lse_s + FA_TILE;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int kb = blockIdx.x, nq = gridDim.x; // key tile 0 has the most query tiles: it starts first
    const int h = blockIdx.y, b = blockIdx.z;
    const int k0 = kb * FA_TILE;
    const size_t ld = 3 * (size_t)C;
    const float *qbase = qkv + (size_t)b * T * ld + (size_t)h * HS;
    const float *kbase = qbase + C, *vbase = qbase + 2 * (size_t)C;
    const float *obase = dout + (size_t)b * T * C + (size_t)h * HS;
    const float *lse_row = lse + ((size_t)b * NH + h) * T, *D_row = Dbuf + ((size_t)b * NH + h) * T;

    fa_load_t<HSP>(Kt, kbase, ld, k0, T, HS, 1.0f);
    fa_load_t<HSP>(Vt, vbase, ld, k0, T, HS, 1.0f);
    float dk[4][NC], dv[4][NC]; // keys ty*4 + i, columns tx + 16*cc
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int cc = 0; cc < NC; cc++) dk[i][cc] = dv[i][cc] = 0.0f;

    for (int qb = kb; qb < nq; qb++) {
        const int q0 = qb * FA_TILE;
        __syncthreads();
        fa_load_t<HSP>(Qt, qbase, ld, q0, T, HS, scale);
        fa_load_t<HSP>(dOt, obase, C, q0, T, HS, 1.0f);
        fa_load_row_stats(lse_s, D_s, lse_row, D_row, q0, T);
        __syncthreads();
        float st[4][4] = {}, dpt[4][4] = {};
        fa_outer4x4<HSP>(st, Kt, ty * 4, Qt, tx * 4);   // s^T
        fa_outer4x4<HSP>(dpt, Vt, ty * 4, dOt, tx * 4); // dP^T = (dout v^T)^T
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int key = k0 + ty * 4 + i, qry = q0 + tx * 4 + j;
                const float p = (qb == kb && key > qry) ? 0.0f : expf(st[i][j] - lse_s[tx * 4 + j]);
                st[i][j] = p;
                dpt[i][j] = p * (dpt[i][j] - D_s[tx * 4 + j]); // dS^T
            }
        // stored query-major, so the accumulation reads each thread's 4 keys as one float4
        fa_store_t4x4(Ps, st, ty * 4, tx * 4);
        fa_store_t4x4(dSs, dpt, ty * 4, tx * 4);
        __syncthreads();
        // dv += P^T @ dout;  dk += dS^T @ (q * scale)
#pragma unroll 2
        for (int r = 0; r < FA_TILE; r++) {
            const float4 p4 = *reinterpret_cast<const float4 *>(Ps + r * FA_LD + ty * 4);
            const float4 s4 = *reinterpret_cast<const float4 *>(dSs + r * FA_LD + ty * 4);
            const float pv[4] = {p4.x, p4.y, p4.z, p4.w}, sv[4] = {s4.x, s4.y, s4.z, s4.w};
#pragma unroll
            for (int cc = 0; cc < NC; cc++) {
                const int c = tx + 16 * cc;
                const float ov = dOt[c * FA_LD + r], qv = Qt[c * FA_LD + r];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    dv[i][cc] = fmaf(pv[i], ov, dv[i][cc]);
                    dk[i][cc] = fmaf(sv[i], qv, dk[i][cc]);
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int key = k0 + ty * 4 + i;
        if (key >= T) continue;
        float *row = dqkv + ((size_t)b * T + key) * ld + (size_t)h * HS;
#pragma unroll
        for (int cc = 0; cc < NC; cc++) {
            const int c = tx + 16 * cc;
            if (c < HS) {
                row[C + c] = dk[i][cc];
                row[2 * (size_t)C + c] = dv[i][cc];
            }
        }
    }
}

// ---- backward 3: dq. grid (query tiles, NH, B); block = one query tile, walking key tiles 0..qb ----
// smem: Qt (q * scale), dOt, Kt, Vt (HSP, LD) | dSt (TILE, LD): dSt[j][r] = dS[r][j] | lse_s, D_s (TILE)
template <int NC>
__global__ void __launch_bounds__(FA_THREADS)
    fa_backward_dq_kernel(float *__restrict__ dqkv, const float *__restrict__ dout, const float *__restrict__ qkv,
                          const float *__restrict__ lse, const float *__restrict__ Dbuf, int T, int C, int NH, int HS,
                          float scale) {
    constexpr int HSP = 16 * NC;
    extern __shared__ float4 fa_smem[];
    float *Qt = reinterpret_cast<float *>(fa_smem);
    float *dOt = Qt + HSP * FA_LD;
    float *Kt = dOt + HSP * FA_LD;
    float *Vt = Kt + HSP * FA_LD;
    float *dSt = Vt + HSP * FA_LD;
    float *lse_s = dSt + FA_TILE * FA_LD;
    float *D_s = lse_s + FA_TILE;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int qb = gridDim.x - 1 - blockIdx.x; // the longest rows start first
    const int h = blockIdx.y, b = blockIdx.z;
    const int q0 = qb * FA_TILE;
    const size_t ld = 3 * (size_t)C;
    const float *qbase = qkv + (size_t)b * T * ld + (size_t)h * HS;
    const float *kbase = qbase + C, *vbase = qbase + 2 * (size_t)C;
    const float *obase = dout + (size_t)b * T * C + (size_t)h * HS;

    fa_load_t<HSP>(Qt, qbase, ld, q0, T, HS, scale);
    fa_load_t<HSP>(dOt, obase, C, q0, T, HS, 1.0f);
    fa_load_row_stats(lse_s, D_s, lse + ((size_t)b * NH + h) * T, Dbuf + ((size_t)b * NH + h) * T, q0, T);
    float dq[4][NC]; // rows ty*4 + i, columns tx + 16*cc
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int cc = 0; cc < NC; cc++) dq[i][cc] = 0.0f;

    for (int kb = 0; kb <= qb; kb++) {
        const int k0 = kb * FA_TILE;
        __syncthreads();
        fa_load_t<HSP>(Kt, kbase, ld, k0, T, HS, 1.0f);
        fa_load_t<HSP>(Vt, vbase, ld, k0, T, HS, 1.0f);
        __syncthreads();
        float s[4][4] = {}, dp[4][4] = {};
        fa_outer4x4<HSP>(s, Qt, ty * 4, Kt, tx * 4);   // same order of sums as the forward: same s bits
        fa_outer4x4<HSP>(dp, dOt, ty * 4, Vt, tx * 4); // dP = dout v^T
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int qry = q0 + ty * 4 + i, key = k0 + tx * 4 + j;
                const float p = (kb == qb && key > qry) ? 0.0f : expf(s[i][j] - lse_s[ty * 4 + i]);
                dp[i][j] = p * (dp[i][j] - D_s[ty * 4 + i]); // dS
            }
        fa_store_t4x4(dSt, dp, ty * 4, tx * 4);
        __syncthreads();
        // dq += dS (TILE, TILE) @ K (TILE, HSP)
#pragma unroll 4
        for (int j = 0; j < FA_TILE; j++) {
            const float4 d4 = *reinterpret_cast<const float4 *>(dSt + j * FA_LD + ty * 4);
#pragma unroll
            for (int cc = 0; cc < NC; cc++) {
                const float kv = Kt[(tx + 16 * cc) * FA_LD + j];
                dq[0][cc] = fmaf(d4.x, kv, dq[0][cc]);
                dq[1][cc] = fmaf(d4.y, kv, dq[1][cc]);
                dq[2][cc] = fmaf(d4.z, kv, dq[2][cc]);
                dq[3][cc] = fmaf(d4.w, kv, dq[3][cc]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = q0 + ty * 4 + i;
        if (r >= T) continue;
        float *row = dqkv + ((size_t)b * T + r) * ld + (size_t)h * HS;
#pragma unroll
        for (int cc = 0; cc < NC; cc++) {
            const int c = tx + 16 * cc;
            if (c < HS) row[c] = dq[i][cc] * scale;
        }
    }
}

// ---- launchers: NC = ceil(HS / 16) picks the instantiation ----
template <int NC>
static mo_status fa_forward_launch(mo_ctx *c, float *out, float *lse, const float *qkv, int B, int T, int C,
                                   int NH) {
    constexpr int HSP = 16 * NC;
    const size_t smem = sizeof(float) * ((size_t)2 * HSP * FA_LD + (size_t)FA_TILE * HSP + (size_t)FA_TILE * FA_LD);
    CUDA_CHECK(cudaFuncSetAttribute(fa_forward_kernel<NC>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const int HS = C / NH;
    const dim3 grid((unsigned)((T + FA_TILE - 1) / FA_TILE), (unsigned)NH, (unsigned)B);
    fa_forward_kernel<NC><<<grid, FA_THREADS, smem, (cudaStream_t)c->stream>>>(out, lse, qkv, T, C, NH, HS,
                                                                               1.0f / sqrtf((float)HS));
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

template <int NC>
static mo_status fa_backward_launch(mo_ctx *c, float *dqkv, const float *dout, const float *qkv, const float *out,
                                    const float *lse, float *Dbuf, int B, int T, int C, int NH) {
    constexpr int HSP = 16 * NC;
    cudaStream_t s = (cudaStream_t)c->stream;
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const int rows = B * NH * T;
    const int warps = FA_THREADS / 32;
    fa_backward_dot_kernel<<<(unsigned)((rows + warps - 1) / warps), FA_THREADS, 0, s>>>(Dbuf, dout, out, rows, T,
                                                                                        C, NH, HS);
    CUDA_CHECK_LAUNCH();
    const dim3 grid((unsigned)((T + FA_TILE - 1) / FA_TILE), (unsigned)NH, (unsigned)B);
    const size_t smem_dkdv =
        sizeof(float) * ((size_t)4 * HSP * FA_LD + (size_t)2 * FA_TILE * FA_LD + (size_t)2 * FA_TILE);
    CUDA_CHECK(cudaFuncSetAttribute(fa_backward_dkdv_kernel<NC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem_dkdv));
    fa_backward_dkdv_kernel<NC><<<grid, FA_THREADS, smem_dkdv, s>>>(dqkv, dout, qkv, lse, Dbuf, T, C, NH, HS, scale);
    CUDA_CHECK_LAUNCH();
    const size_t smem_dq = sizeof(float) * ((size_t)4 * HSP * FA_LD + (size_t)FA_TILE * FA_LD + (size_t)2 * FA_TILE);
    CUDA_CHECK(cudaFuncSetAttribute(fa_backward_dq_kernel<NC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem_dq));
    fa_backward_dq_kernel<NC><<<grid, FA_THREADS, smem_dq, s>>>(dqkv, dout, qkv, lse, Dbuf, T, C, NH, HS, scale);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

#define FA_DISPATCH(call_nc)                                                                            \
    switch ((HS + 15) / 16) {                                                                           \
    case 1: return call_nc(1);                                                                          \
    case 2: return call_nc(2);                                                                          \
    case 3: return call_nc(3);                                                                          \
    case 4: return call_nc(4);                                                                          \
    case 5: return call_nc(5);                                                                          \
    case 6: return call_nc(6);                                                                          \
    case 7: return call_nc(7);                                                                          \
    case 8: return call_nc(8);                                                                          \
    }                                                                                                   \
    return MO_FAIL(MO_ERR_UNSUPPORTED, "fused attention: head size %d > %d", HS, MO_ATTN_FUSED_MAX_HS)

mo_status attention_fused_forward_cuda(mo_ctx *c, float *out, float *lse, const float *qkv, int B, int T, int C,
                                       int NH) {
    const int HS = C / NH;
#define FA_FWD(nc) fa_forward_launch<nc>(c, out, lse, qkv, B, T, C, NH)
    FA_DISPATCH(FA_FWD);
#undef FA_FWD
}

mo_status attention_fused_backward_cuda(mo_ctx *c, float *dqkv, const float *dout, const float *qkv,
                                        const float *out, const float *lse, void *scratch, int B, int T, int C,
                                        int NH) {
    const int HS = C / NH;
    float *Dbuf = (float *)scratch; // (B, NH, T)
#define FA_BWD(nc) fa_backward_launch<nc>(c, dqkv, dout, qkv, out, lse, Dbuf, B, T, C, NH)
    FA_DISPATCH(FA_BWD);
#undef FA_BWD
}
