// Fused causal attention in fp32 storage on TF32 tensor cores: the path of mo_attention_fused_forward /
// _backward when ctx->tf32 is set (--precision tf32 --attn fused). Same layouts, lse and D scratch as the
// fp32 kernels (attention_fused.h): qkv (B, T, 3C), out (B, T, C), lse (B, NH, T), D (B, NH, T).
//
// Written with WMMA (nvcuda::wmma, m16n16k8, precision::tf32, fp32 accumulators), not mma.sync PTX: the
// accumulator fragments go through shared memory for the softmax (S, P, dS per warp, 16 x 64), so their
// register layout never matters and the kernels could be written without a GPU at hand; the row-wise
// work (max, exp2, sums) runs on CUDA cores over those shared tiles. Every mma operand is rounded to TF32
// (__float_to_tf32, round to nearest) once, when it is stored to shared memory: q, k, v, dout tiles as
// loaded (float4 where HS % 4 == 0), P and dS as computed (from the unrounded P); sums, softmax
// statistics (in log2 units inside the forward), lse and D stay fp32.
//
// Tiling: blocks of 4 warps (128 threads) on 64-row tiles of one (batch, head); each warp owns 16 rows.
// Shared tiles are row-major (rows, HSP + 8) floats, HSP = HS rounded up to 16 with zero columns, rows
// past T zero: ld is a multiple of 8 floats, so every 16-row fragment pointer is 32-byte aligned (WMMA).
// Deterministic without atomics, as the fp32 kernels: dk, dv by a block that owns a key tile and walks
// the query tiles in order, dq by a block that owns a query tile and walks the key tiles.
// Shared memory at HS = 64 (ld 72): forward 91 KB, dk/dv 109 KB, dq 108 KB per block (opt-in).
#include <cuda_runtime.h>
#include <math.h>
#include <mma.h>
#include <stdint.h>

#include "attention_fused.h"
#include "attention_fused_tf32.h"
#include "cuda_check.h"

using namespace nvcuda;

#define AT_TILE 64
#define AT_WARPS 4
#define AT_THREADS (AT_WARPS * 32)
// Score tile row stride (floats): a multiple of 4 (WMMA ldm) whose 16-row offsets stay 32-byte aligned.
// The softmax lanes walk their 32 columns starting at a rotation of (2 r + half) (at_col), so with a
// stride of 68 (4 banks a row) the 32 lanes of a warp hit 32 different banks at every step.
#define AT_LDS (AT_TILE + 4)
#define AT_LOG2E 1.4426950408889634f
#define AT_LN2 0.6931471805599453f

typedef wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> at_a_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> at_b_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> at_b_col;
typedef wmma::fragment<wmma::accumulator, 16, 16, 8, float> at_acc;

// column of step j for the lane of row r, half h: half h's 32 columns, rotated (bank-conflict free)
static __device__ __forceinline__ int at_col(int j, int r, int h) { return h * 32 + ((j + 2 * r + h) & 31); }


static __device__ __forceinline__ float at_tf32(float x) { return wmma::__float_to_tf32(x); }

// dst (AT_TILE, LD) row-major = src rows t0.., columns 0..HS-1, rounded to TF32 (the tiles are mma
// operands only); zero where t0 + r >= T or d >= HS. float4 loads where HS, ld and src allow.
template <int HSP>
static __device__ __forceinline__ void at_load_rows(float *dst, const float *__restrict__ src, size_t ld, int t0,
                                                    int T, int HS) {
    constexpr int LD = HSP + 8, NV = HSP / 4;
    if (HS % 4 == 0 && ld % 4 == 0 && (reinterpret_cast<uintptr_t>(src) & 15) == 0) {
        for (int idx = threadIdx.x; idx < AT_TILE * NV; idx += AT_THREADS) {
            const int r = idx / NV, d = (idx % NV) * 4, t = t0 + r;
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (t < T && d < HS) v = *reinterpret_cast<const float4 *>(src + (size_t)t * ld + d);
            v.x = at_tf32(v.x); v.y = at_tf32(v.y); v.z = at_tf32(v.z); v.w = at_tf32(v.w);
            *reinterpret_cast<float4 *>(dst + r * LD + d) = v;
        }
        return;
    }
    for (int idx = threadIdx.x; idx < AT_TILE * HSP; idx += AT_THREADS) {
        const int r = idx / HSP, d = idx % HSP, t = t0 + r;
        dst[r * LD + d] = (t < T && d < HS) ? at_tf32(src[(size_t)t * ld + d]) : 0.0f;
    }
}

// S (16, 64) at Sw (ld AT_LDS) = A rows (16, HSP) at Aw (ld LD) times the 64 rows of Bt (64, HSP) (ld LD),
// transposed: S[i][j] = sum_d A[i][d] Bt[j][d]. nkeys: only the first nkeys/16 column blocks are needed.
template <int HSP>
static __device__ __forceinline__ void at_abt(float *Sw, const float *Aw, const float *Bt, int nblk) {
    constexpr int LD = HSP + 8;
    for (int n = 0; n < AT_TILE / 16; n++) {
        at_acc acc;
        wmma::fill_fragment(acc, 0.0f);
        if (n < nblk) {
#pragma unroll
            for (int k = 0; k < HSP / 8; k++) {
                at_a_row a;
                at_b_col b;
                wmma::load_matrix_sync(a, Aw + k * 8, LD);
                wmma::load_matrix_sync(b, Bt + n * 16 * LD + k * 8, LD);
                wmma::mma_sync(acc, a, b, acc);
            }
        }
        wmma::store_matrix_sync(Sw + n * 16, acc, AT_LDS, wmma::mem_row_major);
    }
}

// acc[n] (16, 16 columns n*16..) += P (16, 64) at Pw (ld AT_LDS) times X (64, HSP) at Xs (ld LD).
template <int HSP>
static __device__ __forceinline__ void at_pv(at_acc *acc, const float *Pw, const float *Xs, int nblk) {
    constexpr int LD = HSP + 8;
    for (int k = 0; k < nblk * 2; k++) { // 8 rows of X per step, only the first nblk 16-row blocks
        at_a_row a;
        wmma::load_matrix_sync(a, Pw + k * 8, AT_LDS);
#pragma unroll
        for (int n = 0; n < HSP / 16; n++) {
            at_b_row b;
            wmma::load_matrix_sync(b, Xs + k * 8 * LD + n * 16, LD);
            wmma::mma_sync(acc[n], a, b, acc[n]);
        }
    }
}

// ---- forward: a block owns query tile qb; warp w rows q0 + 16 w ..; O kept in shared memory ----
template <int HSP>
__global__ void __launch_bounds__(AT_THREADS)
    at_forward_kernel(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ qkv, int T, int C,
                      int NH, int HS, float scale_log2) {
    constexpr int LD = HSP + 8;
    extern __shared__ __align__(32) float at_smem[];
    float *Qs = at_smem;                    // (64, LD)
    float *Ks = Qs + AT_TILE * LD;          // (64, LD)
    float *Vs = Ks + AT_TILE * LD;          // (64, LD)
    float *Os = Vs + AT_TILE * LD;          // (64, LD): the unnormalized output
    float *Ss = Os + AT_TILE * LD;          // (64, AT_LDS): scores, then P
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int qb = gridDim.x - 1 - blockIdx.x; // the longest rows start first
    const int h = blockIdx.y, b = blockIdx.z, q0 = qb * AT_TILE, wrow = q0 + warp * 16;
    const size_t ld = 3 * (size_t)C;
    const float *qbase = qkv + (size_t)b * T * ld + (size_t)h * HS;
    at_load_rows<HSP>(Qs, qbase, ld, q0, T, HS);
    for (int i = threadIdx.x; i < AT_TILE * LD; i += AT_THREADS) Os[i] = 0.0f;
    float *Sw = Ss + warp * 16 * AT_LDS, *Ow = Os + warp * 16 * LD;
    const float *Qw = Qs + warp * 16 * LD;
    // lane owns row r = lane / 2 of the warp's 16 and 32 columns of the score tile (half = lane % 2; at_col), and
    // half * HSP/2 .. of O; the two lanes of a row combine by one xor-1 shuffle.
    const int r = lane / 2, half = lane % 2, row = wrow + r;
    float m = -INFINITY, l = 0.0f; // running max of the scores in log2 units (s * log2 e), sum exp
    for (int kb = 0; kb <= qb; kb++) {
        const int k0 = kb * AT_TILE;
        __syncthreads(); // the previous tile's K, V are no longer read
        at_load_rows<HSP>(Ks, qbase + C, ld, k0, T, HS);
        at_load_rows<HSP>(Vs, qbase + 2 * (size_t)C, ld, k0, T, HS);
        __syncthreads();
        if (k0 > wrow + 15) continue; // every key after this warp's rows
        const int nblk = min(AT_TILE / 16, (wrow + 15 - k0) / 16 + 1);
        at_abt<HSP>(Sw, Qw, Ks, nblk);
        __syncwarp();
        float *srow = Sw + r * AT_LDS;
        float mt = -INFINITY;
        for (int j = 0; j < 32; j++) {
            const int cc = at_col(j, r, half);
            const float s = k0 + cc <= row ? srow[cc] * scale_log2 : -INFINITY;
            srow[cc] = s;
            mt = fmaxf(mt, s);
        }
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
        const float mnew = fmaxf(m, mt); // finite: key 0 of tile 0 is always visible
        const float corr = exp2f(m - mnew);
        float ls = 0.0f;
        for (int j = 0; j < 32; j++) {
            const int cc = at_col(j, r, half);
            const float p = exp2f(srow[cc] - mnew); // 0 where masked
            srow[cc] = at_tf32(p);                 // rounded for the P @ V mma; l sums it unrounded
            ls += p;
        }
        ls += __shfl_xor_sync(0xffffffffu, ls, 1);
        l = l * corr + ls;
        m = mnew;
        float *orow = Ow + r * LD + half * (HSP / 2);
        for (int d = 0; d < HSP / 2; d++) orow[d] *= corr;
        __syncwarp();
        at_acc acc[HSP / 16];
#pragma unroll
        for (int n = 0; n < HSP / 16; n++) wmma::load_matrix_sync(acc[n], Ow + n * 16, LD, wmma::mem_row_major);
        at_pv<HSP>(acc, Sw, Vs, nblk);
#pragma unroll
        for (int n = 0; n < HSP / 16; n++) wmma::store_matrix_sync(Ow + n * 16, acc[n], LD, wmma::mem_row_major);
        __syncwarp();
    }
    if (row < T) {
        const float inv = 1.0f / l;
        float *orow_g = out + ((size_t)b * T + row) * C + (size_t)h * HS;
        const float *orow = Ow + r * LD;
        for (int d = half; d < HS; d += 2) orow_g[d] = orow[d] * inv;
        if (half == 0) lse[((size_t)b * NH + h) * T + row] = m * AT_LN2 + logf(l);
    }
}

// ---- backward: D = rowsum(dout * out) per (b, h, t), one warp a row ----
__global__ void at_dot_kernel(float *__restrict__ Dbuf, const float *__restrict__ dout, const float *__restrict__ out,
                              long long rows, int T, int C, int NH, int HS) {
    const long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (w >= rows) return;
    const int t = (int)(w % T), h = (int)((w / T) % NH);
    const long long b = w / ((long long)T * NH);
    const size_t off = ((size_t)b * T + t) * C + (size_t)h * HS;
    float s = 0.0f;
    for (int d = lane; d < HS; d += 32) s += dout[off + d] * out[off + d];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) Dbuf[w] = s;
}

static __device__ __forceinline__ void at_load_stats(float *Ls, float *Ds, const float *lse_row, const float *D_row,
                                                     int t0, int T) {
    for (int i = threadIdx.x; i < AT_TILE; i += AT_THREADS) {
        const int t = t0 + i;
        Ls[i] = t < T ? lse_row[t] : 0.0f;
        Ds[i] = t < T ? D_row[t] : 0.0f;
    }
}

// dk, dv: a block owns key tile kb; warp w keys k0 + 16 w ..; walks query tiles qb = kb .. in order.
// Per warp: S^T (16 keys, 64 queries) = K_w Q^T, dP^T = V_w dO^T; P^T = exp(scale S^T - lse) (0 where
// key > query), dS^T = P^T (dP^T - D); dV_w += P^T dO, dK_w += dS^T Q (fragments in registers).
template <int HSP>
__global__ void __launch_bounds__(AT_THREADS)
    at_bwd_dkdv_kernel(float *__restrict__ dqkv, const float *__restrict__ dout, const float *__restrict__ qkv,
                       const float *__restrict__ lse, const float *__restrict__ Dbuf, int T, int C, int NH, int HS,
                       float scale, float scale_log2) {
    constexpr int LD = HSP + 8;
    extern __shared__ __align__(32) float at_smem[];
    float *Ks = at_smem;           // (64, LD)
    float *Vs = Ks + AT_TILE * LD; // (64, LD)
    float *Qs = Vs + AT_TILE * LD; // (64, LD)
    float *Gs = Qs + AT_TILE * LD; // (64, LD): dout
    float *Ss = Gs + AT_TILE * LD; // (64, AT_LDS): S^T, then P^T
    float *Ps = Ss + AT_TILE * AT_LDS; // (64, AT_LDS): dP^T, then dS^T
    float *Ls = Ps + AT_TILE * AT_LDS; // (64)
    float *Dsm = Ls + AT_TILE;         // (64)
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int kb = blockIdx.x, h = blockIdx.y, b = blockIdx.z, k0 = kb * AT_TILE, wkey = k0 + warp * 16;
    const size_t ld = 3 * (size_t)C;
    const float *qbase = qkv + (size_t)b * T * ld + (size_t)h * HS;
    const float *gbase = dout + (size_t)b * T * C + (size_t)h * HS;
    const float *lse_row = lse + ((size_t)b * NH + h) * T, *D_row = Dbuf + ((size_t)b * NH + h) * T;
    at_load_rows<HSP>(Ks, qbase + C, ld, k0, T, HS);
    at_load_rows<HSP>(Vs, qbase + 2 * (size_t)C, ld, k0, T, HS);
    float *Sw = Ss + warp * 16 * AT_LDS, *Pw = Ps + warp * 16 * AT_LDS;
    const float *Kw = Ks + warp * 16 * LD, *Vw = Vs + warp * 16 * LD;
    at_acc dk[HSP / 16], dv[HSP / 16];
#pragma unroll
    for (int n = 0; n < HSP / 16; n++) {
        wmma::fill_fragment(dk[n], 0.0f);
        wmma::fill_fragment(dv[n], 0.0f);
    }
    const int nqb = (T + AT_TILE - 1) / AT_TILE;
    const int r = lane / 2, half = lane % 2, key = wkey + r;
    for (int qb = kb; qb < nqb; qb++) {
        const int q0 = qb * AT_TILE;
        __syncthreads();
        at_load_rows<HSP>(Qs, qbase, ld, q0, T, HS);
        at_load_rows<HSP>(Gs, gbase, C, q0, T, HS);
        at_load_stats(Ls, Dsm, lse_row, D_row, q0, T);
        __syncthreads();
        // every query of the tile is before this warp's keys: nothing (only on the diagonal tile)
        if (q0 + AT_TILE - 1 < wkey) continue;
        at_abt<HSP>(Sw, Kw, Qs, AT_TILE / 16);
        at_abt<HSP>(Pw, Vw, Gs, AT_TILE / 16);
        __syncwarp();
        float *srow = Sw + r * AT_LDS, *prow = Pw + r * AT_LDS;
        for (int j = 0; j < 32; j++) {
            const int qc = at_col(j, r, half), q = q0 + qc;
            const float p = (key <= q && q < T) ? exp2f(srow[qc] * scale_log2 - Ls[qc] * AT_LOG2E) : 0.0f;
            prow[qc] = at_tf32(p * (prow[qc] - Dsm[qc])); // dS from the unrounded P, rounded for dK
            srow[qc] = at_tf32(p);                        // rounded for dV
        }
        __syncwarp();
        at_pv<HSP>(dv, Sw, Gs, AT_TILE / 16);
        at_pv<HSP>(dk, Pw, Qs, AT_TILE / 16);
    }
    __syncthreads(); // Qs, Gs are free: each warp writes its dK, dV rows there
    float *dKw = Qs + warp * 16 * LD, *dVw = Gs + warp * 16 * LD;
#pragma unroll
    for (int n = 0; n < HSP / 16; n++) {
        wmma::store_matrix_sync(dKw + n * 16, dk[n], LD, wmma::mem_row_major);
        wmma::store_matrix_sync(dVw + n * 16, dv[n], LD, wmma::mem_row_major);
    }
    __syncwarp();
    if (key < T) {
        float *grow = dqkv + ((size_t)b * T + key) * ld + (size_t)h * HS;
        for (int d = half; d < HS; d += 2) {
            grow[C + d] = dKw[r * LD + d] * scale;
            grow[2 * (size_t)C + d] = dVw[r * LD + d];
        }
    }
}

// dq: a block owns query tile qb; warp w queries q0 + 16 w ..; walks key tiles 0 .. qb in order.
// Per warp: S = Q_w K^T, dP = dO_w V^T; dS = P (dP - D); dQ_w += dS K.
template <int HSP>
__global__ void __launch_bounds__(AT_THREADS)
    at_bwd_dq_kernel(float *__restrict__ dqkv, const float *__restrict__ dout, const float *__restrict__ qkv,
                     const float *__restrict__ lse, const float *__restrict__ Dbuf, int T, int C, int NH, int HS,
                     float scale, float scale_log2) {
    constexpr int LD = HSP + 8;
    extern __shared__ __align__(32) float at_smem[];
    float *Qs = at_smem;           // (64, LD)
    float *Gs = Qs + AT_TILE * LD; // (64, LD): dout
    float *Ks = Gs + AT_TILE * LD; // (64, LD)
    float *Vs = Ks + AT_TILE * LD; // (64, LD)
    float *Ss = Vs + AT_TILE * LD; // (64, AT_LDS): S, then dS
    float *Ps = Ss + AT_TILE * AT_LDS; // (64, AT_LDS): dP
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int qb = gridDim.x - 1 - blockIdx.x;
    const int h = blockIdx.y, b = blockIdx.z, q0 = qb * AT_TILE, wrow = q0 + warp * 16;
    const size_t ld = 3 * (size_t)C;
    const float *qbase = qkv + (size_t)b * T * ld + (size_t)h * HS;
    const float *gbase = dout + (size_t)b * T * C + (size_t)h * HS;
    at_load_rows<HSP>(Qs, qbase, ld, q0, T, HS);
    at_load_rows<HSP>(Gs, gbase, C, q0, T, HS);
    const int r = lane / 2, half = lane % 2, row = wrow + r;
    const float L2 = row < T ? lse[((size_t)b * NH + h) * T + row] * AT_LOG2E : 0.0f;
    const float Dr = row < T ? Dbuf[((size_t)b * NH + h) * T + row] : 0.0f;
    float *Sw = Ss + warp * 16 * AT_LDS, *Pw = Ps + warp * 16 * AT_LDS;
    float *Qw = Qs + warp * 16 * LD;
    const float *Gw = Gs + warp * 16 * LD;
    at_acc dq[HSP / 16];
#pragma unroll
    for (int n = 0; n < HSP / 16; n++) wmma::fill_fragment(dq[n], 0.0f);
    for (int kb = 0; kb <= qb; kb++) {
        const int k0 = kb * AT_TILE;
        __syncthreads();
        at_load_rows<HSP>(Ks, qbase + C, ld, k0, T, HS);
        at_load_rows<HSP>(Vs, qbase + 2 * (size_t)C, ld, k0, T, HS);
        __syncthreads();
        if (k0 > wrow + 15) continue;
        const int nblk = min(AT_TILE / 16, (wrow + 15 - k0) / 16 + 1);
        at_abt<HSP>(Sw, Qw, Ks, nblk);
        at_abt<HSP>(Pw, Gw, Vs, nblk);
        __syncwarp();
        float *srow = Sw + r * AT_LDS;
        const float *prow = Pw + r * AT_LDS;
        for (int j = 0; j < 32; j++) {
            const int cc = at_col(j, r, half);
            const float p = (k0 + cc <= row && row < T) ? exp2f(srow[cc] * scale_log2 - L2) : 0.0f;
            srow[cc] = at_tf32(p * (prow[cc] - Dr));
        }
        __syncwarp();
        at_pv<HSP>(dq, Sw, Ks, nblk);
    }
    __syncwarp(); // Qw is read by this warp only: its dQ rows go there
#pragma unroll
    for (int n = 0; n < HSP / 16; n++) wmma::store_matrix_sync(Qw + n * 16, dq[n], LD, wmma::mem_row_major);
    __syncwarp();
    if (row < T) {
        float *grow = dqkv + ((size_t)b * T + row) * ld + (size_t)h * HS;
        for (int d = half; d < HS; d += 2) grow[d] = Qw[r * LD + d] * scale;
    }
}

// ---- launchers; HSP = HS rounded up to 16 ----
static size_t at_rows_bytes(int rows, int HSP) { return (size_t)rows * (HSP + 8) * sizeof(float); }

template <int HSP>
static mo_status at_forward_launch(mo_ctx *c, float *out, float *lse, const float *qkv, int B, int T, int C, int NH) {
    const int HS = C / NH;
    const size_t smem = at_rows_bytes(4 * AT_TILE, HSP) + (size_t)AT_TILE * AT_LDS * sizeof(float);
    CUDA_CHECK(cudaFuncSetAttribute(at_forward_kernel<HSP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const dim3 grid((unsigned)((T + AT_TILE - 1) / AT_TILE), (unsigned)NH, (unsigned)B);
    at_forward_kernel<HSP><<<grid, AT_THREADS, smem, (cudaStream_t)c->stream>>>(out, lse, qkv, T, C, NH, HS,
                                                                                AT_LOG2E / sqrtf((float)HS));
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

template <int HSP>
static mo_status at_backward_launch(mo_ctx *c, float *dqkv, const float *dout, const float *qkv, const float *out,
                                    const float *lse, float *Dbuf, int B, int T, int C, int NH) {
    cudaStream_t s = (cudaStream_t)c->stream;
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS), scale_log2 = AT_LOG2E * scale;
    const long long rows = (long long)B * NH * T;
    at_dot_kernel<<<(unsigned)((rows + 7) / 8), 256, 0, s>>>(Dbuf, dout, out, rows, T, C, NH, HS);
    CUDA_CHECK_LAUNCH();
    const dim3 grid((unsigned)((T + AT_TILE - 1) / AT_TILE), (unsigned)NH, (unsigned)B);
    const size_t smem_kv =
        at_rows_bytes(4 * AT_TILE, HSP) + (size_t)(2 * AT_TILE * AT_LDS + 2 * AT_TILE) * sizeof(float);
    CUDA_CHECK(
        cudaFuncSetAttribute(at_bwd_dkdv_kernel<HSP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_kv));
    at_bwd_dkdv_kernel<HSP><<<grid, AT_THREADS, smem_kv, s>>>(dqkv, dout, qkv, lse, Dbuf, T, C, NH, HS, scale, scale_log2);
    CUDA_CHECK_LAUNCH();
    const size_t smem_q = at_rows_bytes(4 * AT_TILE, HSP) + (size_t)2 * AT_TILE * AT_LDS * sizeof(float);
    CUDA_CHECK(cudaFuncSetAttribute(at_bwd_dq_kernel<HSP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_q));
    at_bwd_dq_kernel<HSP><<<grid, AT_THREADS, smem_q, s>>>(dqkv, dout, qkv, lse, Dbuf, T, C, NH, HS, scale, scale_log2);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

#define AT_DISPATCH(call)                                                                               \
    switch ((HS + 15) / 16) {                                                                           \
    case 1: return call(16);                                                                            \
    case 2: return call(32);                                                                            \
    case 3: return call(48);                                                                            \
    case 4: return call(64);                                                                            \
    case 5: return call(80);                                                                            \
    case 6: return call(96);                                                                            \
    case 7: return call(112);                                                                           \
    case 8: return call(128);                                                                           \
    }                                                                                                   \
    return MO_FAIL(MO_ERR_UNSUPPORTED, "fused attention (tf32): head size %d > %d", HS, MO_ATTN_FUSED_MAX_HS)

mo_status attention_fused_tf32_forward_cuda(mo_ctx *c, float *out, float *lse, const float *qkv, int B, int T, int C,
                                            int NH) {
    const int HS = C / NH;
#define AT_FWD(hsp) at_forward_launch<hsp>(c, out, lse, qkv, B, T, C, NH)
    AT_DISPATCH(AT_FWD);
#undef AT_FWD
}

mo_status attention_fused_tf32_backward_cuda(mo_ctx *c, float *dqkv, const float *dout, const float *qkv,
                                             const float *out, const float *lse, void *scratch, int B, int T, int C,
                                             int NH) {
    const int HS = C / NH;
    float *Dbuf = (float *)scratch; // (B, NH, T)
#define AT_BWD(hsp) at_backward_launch<hsp>(c, dqkv, dout, qkv, out, lse, Dbuf, B, T, C, NH)
    AT_DISPATCH(AT_BWD);
#undef AT_BWD
}
