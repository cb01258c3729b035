// Fused causal attention with 16-bit activations on tensor cores (FlashAttention-2, Dao 2023, Algorithms 1
// and 2, written for this suite): mma.sync.m16n8k16 with bf16 / fp16 A and B and fp32 accumulators,
// ldmatrix fragment loads, cp.async double-buffered tiles. sm_80+ instructions only (sm_90 target).
// Rounding points and semantics: attention_fused_mixed.h (the references round at the same points).
//
// Shapes (per (batch b, head h); HS = C / NH, a multiple of 8, padded with zeros in shared memory to
// HSP = 32, 64, 96 or 128; the mma loops skip k- and n-tiles of 16 that lie wholly in the padding):
//   forward   grid (ceil(T/64), NH, B), 4 warps. Block = 64 query rows (warp w: rows 16w..16w+15), walks
//             the key tiles kb = 0 .. (last row) / 64 of 64 keys, the longest rows first.
//               S (16, 64) = Q_w (16, HSP) @ K_kb (64, HSP)^T      fp32 in registers, scaled by log2(e)/sqrt(HS)
//               online softmax on S (row max / sum: quad shuffles), P rounded to dt in registers, and
//               O (16, HSP) += P (16, 64) @ V_kb (64, HSP)          the S accumulators become the A fragments
//             smem: Q (64, HSP+8) | K, V (2 buffers of (64, HSP+8)) dt: 46 KB at HS 64, 87 KB at HS 128.
//   backward  1. D (B, NH, T) = rowsum(dout * out), fp32, one warp per row.
//             2. dk, dv: grid (ceil(T/64), NH, B); block = 64 keys (warp w: keys 16w..), walks the query
//                tiles of BQ (64, or 32 for HSP > 64: registers) from its diagonal on, in order. Works on
//                transposed tiles so the accumulators feed the next mma directly:
//                  S^T (16, BQ) = K_w @ Q^T,  dP^T (16, BQ) = V_w @ dO^T
//                  P^T = exp(S^T - lse),  dS^T = P^T * (dP^T - D)
//                  dV (16, HSP) += round(P^T) @ dO (BQ, HSP),   dK (16, HSP) += round(dS^T) @ Q (BQ, HSP)
//                smem: K, V (64, HSP+8) | Q, dO (2 buffers of (BQ, HSP+8)) dt | lse, D (2 x BQ) fp32:
//                56 KB at HS 64, 70 KB at HS 128.
//             3. dq: grid (ceil(T/64), NH, B); block = 64 queries, walks key tiles of 64 up to its diagonal:
//                  S = Q_w @ K^T, dP = dO_w @ V^T, dS = P * (dP - D),  dQ (16, HSP) += round(dS) @ K
//                smem: Q, dO (64, HSP+8) | K, V (2 buffers of (64, HSP+8)) | lse, D (64): 56 / 105 KB.
//             Every output element is summed by one thread in a fixed order: no atomics, same bits each run.
// Shared-memory rows are HSP + 8 elements long (16 B * odd), so the 8 row addresses of an ldmatrix hit
// 8 different 16-byte bank groups (no conflicts) and every row start stays 16-byte aligned (cp.async).
// Tiles above the causal diagonal are skipped per block, and per warp in groups of 16 keys / queries
// (skipping only terms that are exact zeros, so results do not depend on it).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "attention_fused.h"
#include "attention_fused_mixed.h"
#include "cuda_check.h"
#include "mixed_dev.cuh"

#define FM_THREADS 128 // 4 warps, 16 rows each
#define FM_BR 64       // query rows per block (forward, dq)
#define FM_BC 64       // keys per block (dk/dv) and per key tile (forward: where P is rounded)
#define FM_LOG2E 1.4426950408889634f
#define FM_LN2 0.6931471805599453f

static_assert(FM_BC == MO_ATTN_FM_KEY_TILE, "the forward's key tile is the references' MO_ATTN_FM_KEY_TILE");
static_assert(FM_BR == FM_BC, "the causal skips below assume square diagonal tiles in forward and dq");

// ---- PTX wrappers (cp.async's: mixed_dev.cuh) ----
// Four 8x8 16-bit matrices; lane l gives the address of row l % 8 of matrix l / 8 and receives, of each
// matrix i, r[i] = elements (row l / 4, columns 2 (l % 4), +1) (.trans: (rows 2 (l % 4), +1, column l / 4)).
static __device__ __forceinline__ void fm_ldsm_x4(uint32_t r[4], const uint16_t *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(mx_smem_u32(p)));
}
static __device__ __forceinline__ void fm_ldsm_x4_t(uint32_t r[4], const uint16_t *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(mx_smem_u32(p)));
}

// c (16 x 8, fp32) += a (16 x 16) @ b (16 x 8). Fragments (g = lane / 4, tq = lane % 4):
//   a[0]: (row g, k 2tq..+1)  a[1]: (row g+8, k 2tq..)  a[2]: (row g, k 2tq+8..)  a[3]: (row g+8, k 2tq+8..)
//   b0: (k 2tq..+1, col g)  b1: (k 2tq+8..+9, col g)
//   c[0], c[1]: (row g, cols 2tq, 2tq+1)   c[2], c[3]: (row g+8, cols 2tq, 2tq+1)
// The lower-indexed element of a pair sits in the low 16 bits.
static __device__ __forceinline__ void fm_mma(mx_bf16, float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
static __device__ __forceinline__ void fm_mma(mx_f16, float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// (lo, hi) rounded to nearest even into one 32-bit register, lo in the low half
static __device__ __forceinline__ uint32_t fm_pack(mx_bf16, float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return (uint32_t)__bfloat16_as_ushort(v.x) | ((uint32_t)__bfloat16_as_ushort(v.y) << 16);
}
static __device__ __forceinline__ uint32_t fm_pack(mx_f16, float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return (uint32_t)__half_as_ushort(v.x) | ((uint32_t)__half_as_ushort(v.y) << 16);
}

// 2^x (ex2.approx: 2 ulp; 2^-inf = +0), the same instruction whatever the compiler flags
static __device__ __forceinline__ float fm_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

static __device__ __forceinline__ float fm_quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
static __device__ __forceinline__ float fm_quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// A fragment (16 rows x 16 k) of a row-major smem tile, rows r0.., k columns k0..
template <int LDS>
static __device__ __forceinline__ void fm_ld_a(uint32_t r[4], const uint16_t *tile, int r0, int k0, int lane) {
    fm_ldsm_x4(r, tile + (r0 + (lane & 15)) * LDS + k0 + ((lane >> 4) << 3));
}
// B fragments of two n-tiles (n0.., n0+8..; k0..k0+15) from a smem tile stored (n, k) row-major:
// r[0], r[1] = b0, b1 of n-tile n0; r[2], r[3] of n-tile n0 + 8.
template <int LDS>
static __device__ __forceinline__ void fm_ld_b_nk(uint32_t r[4], const uint16_t *tile, int n0, int k0, int lane) {
    fm_ldsm_x4(r, tile + (n0 + (lane & 7) + ((lane >> 4) << 3)) * LDS + k0 + (((lane >> 3) & 1) << 3));
}
// The same from a smem tile stored (k, n) row-major (ldmatrix .trans).
template <int LDS>
static __device__ __forceinline__ void fm_ld_b_kn(uint32_t r[4], const uint16_t *tile, int k0, int n0, int lane) {
    fm_ldsm_x4_t(r, tile + (k0 + (lane & 7) + (((lane >> 3) & 1) << 3)) * LDS + n0 + ((lane >> 4) << 3));
}

// dst (ROWS, HSP + 8) in smem <- rows t0.. of src (row stride ld elements, HS columns): 16-byte cp.async
// per 8 elements; rows t0 + r >= T and columns HS.. HSP-1 are zeros.
template <int HSP, int ROWS>
static __device__ __forceinline__ void fm_load_tile(uint16_t *dst, const uint16_t *__restrict__ src, size_t ld,
                                                    int t0, int T, int HS) {
    constexpr int LDS = HSP + 8, CH = HSP / 8;
    for (int idx = threadIdx.x; idx < ROWS * CH; idx += FM_THREADS) {
        const int r = idx / CH, c = (idx % CH) * 8, t = t0 + r;
        uint16_t *d = dst + r * LDS + c;
        if (t < T && c < HS) mx_cp_async16(d, src + (size_t)t * ld + c);
        else *reinterpret_cast<uint4 *>(d) = make_uint4(0u, 0u, 0u, 0u);
    }
}
// lse and D of rows t0 .. t0 + ROWS - 1 (past T: lse = +inf, so P = 0, and D = 0)
template <int ROWS>
static __device__ __forceinline__ void fm_load_stats(float *Ls, float *Ds, const float *__restrict__ lse_row,
                                                     const float *__restrict__ D_row, int t0, int T) {
    for (int i = threadIdx.x; i < ROWS; i += FM_THREADS) {
        const int t = t0 + i;
        if (t < T) {
            mx_cp_async4(Ls + i, lse_row + t);
            mx_cp_async4(Ds + i, D_row + t);
        } else {
            Ls[i] = INFINITY;
            Ds[i] = 0.0f;
        }
    }
}

// ================================= forward =================================
template <class E, int HSP>
__global__ void __launch_bounds__(FM_THREADS)
    fm_forward_kernel(uint16_t *__restrict__ out, float *__restrict__ lse, const uint16_t *__restrict__ qkv, int T,
                      int C, int NH, int HS, float scale_log2) {
    constexpr int LDS = HSP + 8, NKT = HSP / 16, NDT = HSP / 8, NST = FM_BC / 8;
    extern __shared__ uint4 fm_smem[];
    uint16_t *Qs = reinterpret_cast<uint16_t *>(fm_smem); // (BR, LDS)
    uint16_t *Ks = Qs + FM_BR * LDS;                      // 2 x (BC, LDS)
    uint16_t *Vs = Ks + 2 * FM_BC * LDS;                  // 2 x (BC, LDS)
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    const int qb = gridDim.x - 1 - blockIdx.x; // the longest rows start first
    const int h = blockIdx.y, b = blockIdx.z;
    const int q0 = qb * FM_BR, wrow = q0 + warp * 16; // this warp's first row
    const int row0 = wrow + g;                        // this thread's rows: row0, row0 + 8
    const size_t ld = 3 * (size_t)C;
    const uint16_t *qbase = qkv + (size_t)b * T * ld + (size_t)h * HS; // q of (b, t = 0, h)
    const uint16_t *kbase = qbase + C, *vbase = qbase + 2 * (size_t)C;
    const int nkb = (min(q0 + FM_BR, T) - 1) / FM_BC + 1;

    fm_load_tile<HSP, FM_BR>(Qs, qbase, ld, q0, T, HS);
    fm_load_tile<HSP, FM_BC>(Ks, kbase, ld, 0, T, HS);
    fm_load_tile<HSP, FM_BC>(Vs, vbase, ld, 0, T, HS);
    mx_cp_async_commit();

    uint32_t qf[NKT][4];
    float o[NDT][4]; // O (16, HSP): unnormalized, fp32
    float m2[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}; // running max (log2 units), this thread's row sums
#pragma unroll
    for (int j = 0; j < NDT; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

    for (int kb = 0; kb < nkb; kb++) {
        mx_cp_async_wait_all();
        __syncthreads(); // tile kb landed; everyone is done with the buffer refilled below
        if (kb == 0) {
#pragma unroll
            for (int kt = 0; kt < NKT; kt++) fm_ld_a<LDS>(qf[kt], Qs, warp * 16, kt * 16, lane);
        }
        if (kb + 1 < nkb) {
            const int nb = (kb + 1) & 1;
            fm_load_tile<HSP, FM_BC>(Ks + nb * FM_BC * LDS, kbase, ld, (kb + 1) * FM_BC, T, HS);
            fm_load_tile<HSP, FM_BC>(Vs + nb * FM_BC * LDS, vbase, ld, (kb + 1) * FM_BC, T, HS);
            mx_cp_async_commit();
        }
        const uint16_t *Kt = Ks + (kb & 1) * FM_BC * LDS, *Vt = Vs + (kb & 1) * FM_BC * LDS;
        const int k0 = kb * FM_BC;
        // S (16, 64) = Q K^T; key groups of 16 wholly above this warp's rows stay 0 (masked below)
        float s[NST][4];
#pragma unroll
        for (int j = 0; j < NST; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int kt = 0; kt < NKT; kt++) {
            if (kt * 16 >= HS) continue;
#pragma unroll
            for (int np = 0; np < NST / 2; np++) {
                if (k0 + np * 16 > wrow + 15) continue;
                uint32_t kf[4];
                fm_ld_b_nk<LDS>(kf, Kt, np * 16, kt * 16, lane);
                fm_mma(E(), s[2 * np], qf[kt], kf[0], kf[1]);
                fm_mma(E(), s[2 * np + 1], qf[kt], kf[2], kf[3]);
            }
        }
        // online softmax (log2 units). Every row has an unmasked key in every tile it visits (key k0 <= row),
        // so the new max is finite, and exp2(-inf - max) = 0 for masked keys and for the first rescale.
        const bool diag = k0 + FM_BC - 1 > wrow;
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < NST; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float v = s[j][e] * scale_log2;
                if (diag && k0 + j * 8 + tq * 2 + (e & 1) > row0 + (e >> 1) * 8) v = -INFINITY;
                s[j][e] = v;
                mx[e >> 1] = fmaxf(mx[e >> 1], v);
            }
        float corr[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const float mnew = fmaxf(m2[i], fm_quad_max(mx[i]));
            corr[i] = fm_exp2(m2[i] - mnew);
            m2[i] = mnew;
            l[i] *= corr[i];
        }
#pragma unroll
        for (int j = 0; j < NDT; j++) {
            o[j][0] *= corr[0]; o[j][1] *= corr[0];
            o[j][2] *= corr[1]; o[j][3] *= corr[1];
        }
#pragma unroll
        for (int j = 0; j < NST; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float p = fm_exp2(s[j][e] - m2[e >> 1]);
                l[e >> 1] += p; // the sum of the unrounded probabilities
                s[j][e] = p;
            }
        // O += round(P) (16, 64) @ V (64, HSP)
#pragma unroll
        for (int kk = 0; kk < FM_BC / 16; kk++) {
            if (k0 + kk * 16 > wrow + 15) continue; // all zeros
            const uint32_t pa[4] = {fm_pack(E(), s[2 * kk][0], s[2 * kk][1]), fm_pack(E(), s[2 * kk][2], s[2 * kk][3]),
                                    fm_pack(E(), s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                    fm_pack(E(), s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int dp = 0; dp < NKT; dp++) {
                if (dp * 16 >= HS) continue;
                uint32_t vf[4];
                fm_ld_b_kn<LDS>(vf, Vt, kk * 16, dp * 16, lane);
                fm_mma(E(), o[2 * dp], pa, vf[0], vf[1]);
                fm_mma(E(), o[2 * dp + 1], pa, vf[2], vf[3]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const float li = fm_quad_sum(l[i]);
        const int r = row0 + 8 * i;
        if (r >= T) continue;
        const float inv = 1.0f / li;
        uint16_t *orow = out + ((size_t)b * T + r) * C + (size_t)h * HS;
#pragma unroll
        for (int j = 0; j < NDT; j++) {
            const int d = j * 8 + tq * 2;
            if (d < HS)
                *reinterpret_cast<uint32_t *>(orow + d) = fm_pack(E(), o[j][2 * i] * inv, o[j][2 * i + 1] * inv);
        }
        // natural log units; log in double once per row, so the backward's exp(s - lse) matches closely
        if (tq == 0) lse[((size_t)b * NH + h) * T + r] = m2[i] * FM_LN2 + (float)log((double)li);
    }
}

// ================================= backward =================================
// 1. D (B, NH, T) = rowsum(dout * out) per head, fp32; one warp per row, fixed order.
template <class E>
__global__ void fm_dot_kernel(float *__restrict__ Dbuf, const uint16_t *__restrict__ dout,
                              const uint16_t *__restrict__ out, long long rows, int T, int C, int NH, int HS) {
    const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const long long t = row % T, h = (row / T) % NH, b = row / ((long long)T * NH);
    const size_t off = ((size_t)b * T + t) * C + (size_t)h * HS;
    float s = 0.0f;
    for (int c = lane; c < HS; c += 32) s += E::to_f(dout[off + c]) * E::to_f(out[off + c]);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) Dbuf[row] = s;
}

// 2. dk, dv. Thread's keys key0, key0 + 8; its query columns (of each 8-wide n-tile j) j*8 + 2tq, +1.
template <class E, int HSP, int BQ>
__global__ void __launch_bounds__(FM_THREADS)
    fm_bwd_dkdv_kernel(uint16_t *__restrict__ dqkv, const uint16_t *__restrict__ dout,
                       const uint16_t *__restrict__ qkv, const float *__restrict__ lse,
                       const float *__restrict__ Dbuf, int T, int C, int NH, int HS, float scale, float scale_log2) {
    constexpr int LDS = HSP + 8, NKT = HSP / 16, NDT = HSP / 8, NQT = BQ / 8;
    extern __shared__ uint4 fm_smem[];
    uint16_t *Ks = reinterpret_cast<uint16_t *>(fm_smem); // (BC, LDS)
    uint16_t *Vs = Ks + FM_BC * LDS;                      // (BC, LDS)
    uint16_t *Qs = Vs + FM_BC * LDS;                      // 2 x (BQ, LDS)
    uint16_t *Os = Qs + 2 * BQ * LDS;                     // 2 x (BQ, LDS): dout
    float *Ls = reinterpret_cast<float *>(Os + 2 * BQ * LDS); // 2 x BQ
    float *Dsm = Ls + 2 * BQ;                                 // 2 x BQ
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    const int kb = blockIdx.x; // key tile 0 has the most query tiles: it starts first
    const int h = blockIdx.y, b = blockIdx.z;
    const int k0 = kb * FM_BC, wkey = k0 + warp * 16, key0 = wkey + g;
    const size_t ld = 3 * (size_t)C;
    const uint16_t *qbase = qkv + (size_t)b * T * ld + (size_t)h * HS;
    const uint16_t *kbase = qbase + C, *vbase = qbase + 2 * (size_t)C;
    const uint16_t *obase = dout + (size_t)b * T * C + (size_t)h * HS;
    const float *lse_row = lse + ((size_t)b * NH + h) * T, *D_row = Dbuf + ((size_t)b * NH + h) * T;
    const int qt0 = k0 / BQ, nq = (T + BQ - 1) / BQ;

    fm_load_tile<HSP, FM_BC>(Ks, kbase, ld, k0, T, HS);
    fm_load_tile<HSP, FM_BC>(Vs, vbase, ld, k0, T, HS);
    fm_load_tile<HSP, BQ>(Qs, qbase, ld, qt0 * BQ, T, HS);
    fm_load_tile<HSP, BQ>(Os, obase, C, qt0 * BQ, T, HS);
    fm_load_stats<BQ>(Ls, Dsm, lse_row, D_row, qt0 * BQ, T);
    mx_cp_async_commit();

    float dk[NDT][4], dv[NDT][4]; // (16 keys, HSP) each, fp32
#pragma unroll
    for (int j = 0; j < NDT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[j][e] = dv[j][e] = 0.0f;

    for (int qt = qt0; qt < nq; qt++) {
        const int buf = (qt - qt0) & 1;
        mx_cp_async_wait_all();
        __syncthreads();
        if (qt + 1 < nq) {
            const int nb = buf ^ 1, t1 = (qt + 1) * BQ;
            fm_load_tile<HSP, BQ>(Qs + nb * BQ * LDS, qbase, ld, t1, T, HS);
            fm_load_tile<HSP, BQ>(Os + nb * BQ * LDS, obase, C, t1, T, HS);
            fm_load_stats<BQ>(Ls + nb * BQ, Dsm + nb * BQ, lse_row, D_row, t1, T);
            mx_cp_async_commit();
        }
        const uint16_t *Qt = Qs + buf * BQ * LDS, *Ot = Os + buf * BQ * LDS;
        const float *Lt = Ls + buf * BQ, *Dt = Dsm + buf * BQ;
        const int q0 = qt * BQ;
        if (q0 + BQ - 1 < wkey) continue; // every query of the tile is before this warp's keys
        // S^T (16, BQ) = K_w Q^T, dP^T (16, BQ) = V_w dO^T; query groups of 16 wholly before the keys stay 0
        float st[NQT][4], dpt[NQT][4];
#pragma unroll
        for (int j = 0; j < NQT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) st[j][e] = dpt[j][e] = 0.0f;
#pragma unroll
        for (int kt = 0; kt < NKT; kt++) {
            if (kt * 16 >= HS) continue;
            uint32_t ka[4], va[4];
            fm_ld_a<LDS>(ka, Ks, warp * 16, kt * 16, lane);
            fm_ld_a<LDS>(va, Vs, warp * 16, kt * 16, lane);
#pragma unroll
            for (int np = 0; np < NQT / 2; np++) {
                if (q0 + np * 16 + 15 < wkey) continue;
                uint32_t bf[4];
                fm_ld_b_nk<LDS>(bf, Qt, np * 16, kt * 16, lane);
                fm_mma(E(), st[2 * np], ka, bf[0], bf[1]);
                fm_mma(E(), st[2 * np + 1], ka, bf[2], bf[3]);
                fm_ld_b_nk<LDS>(bf, Ot, np * 16, kt * 16, lane);
                fm_mma(E(), dpt[2 * np], va, bf[0], bf[1]);
                fm_mma(E(), dpt[2 * np + 1], va, bf[2], bf[3]);
            }
        }
        // P^T = exp(S^T - lse) (0 where key > query), dS^T = P^T (dP^T - D)
        const bool diag = q0 < wkey + 15;
#pragma unroll
        for (int j = 0; j < NQT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int qc = j * 8 + tq * 2 + (e & 1);
                float p = fm_exp2(st[j][e] * scale_log2 - Lt[qc] * FM_LOG2E);
                if (diag && key0 + (e >> 1) * 8 > q0 + qc) p = 0.0f;
                dpt[j][e] = p * (dpt[j][e] - Dt[qc]);
                st[j][e] = p;
            }
        // dV += round(P^T) (16, BQ) @ dO (BQ, HSP);  dK += round(dS^T) (16, BQ) @ Q (BQ, HSP)
#pragma unroll
        for (int kk = 0; kk < BQ / 16; kk++) {
            if (q0 + kk * 16 + 15 < wkey) continue; // all zeros
            const uint32_t pa[4] = {fm_pack(E(), st[2 * kk][0], st[2 * kk][1]),
                                    fm_pack(E(), st[2 * kk][2], st[2 * kk][3]),
                                    fm_pack(E(), st[2 * kk + 1][0], st[2 * kk + 1][1]),
                                    fm_pack(E(), st[2 * kk + 1][2], st[2 * kk + 1][3])};
            const uint32_t sa[4] = {fm_pack(E(), dpt[2 * kk][0], dpt[2 * kk][1]),
                                    fm_pack(E(), dpt[2 * kk][2], dpt[2 * kk][3]),
                                    fm_pack(E(), dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]),
                                    fm_pack(E(), dpt[2 * kk + 1][2], dpt[2 * kk + 1][3])};
#pragma unroll
            for (int dp = 0; dp < NKT; dp++) {
                if (dp * 16 >= HS) continue;
                uint32_t bf[4];
                fm_ld_b_kn<LDS>(bf, Ot, kk * 16, dp * 16, lane);
                fm_mma(E(), dv[2 * dp], pa, bf[0], bf[1]);
                fm_mma(E(), dv[2 * dp + 1], pa, bf[2], bf[3]);
                fm_ld_b_kn<LDS>(bf, Qt, kk * 16, dp * 16, lane);
                fm_mma(E(), dk[2 * dp], sa, bf[0], bf[1]);
                fm_mma(E(), dk[2 * dp + 1], sa, bf[2], bf[3]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int key = key0 + 8 * i;
        if (key >= T) continue;
        uint16_t *row = dqkv + ((size_t)b * T + key) * ld + (size_t)h * HS;
#pragma unroll
        for (int j = 0; j < NDT; j++) {
            const int d = j * 8 + tq * 2;
            if (d >= HS) continue;
            *reinterpret_cast<uint32_t *>(row + C + d) =
                fm_pack(E(), dk[j][2 * i] * scale, dk[j][2 * i + 1] * scale);
            *reinterpret_cast<uint32_t *>(row + 2 * (size_t)C + d) = fm_pack(E(), dv[j][2 * i], dv[j][2 * i + 1]);
        }
    }
}

// 3. dq. Thread's rows row0, row0 + 8; its key columns (of each n-tile j) k0 + j*8 + 2tq, +1.
template <class E, int HSP>
__global__ void __launch_bounds__(FM_THREADS)
    fm_bwd_dq_kernel(uint16_t *__restrict__ dqkv, const uint16_t *__restrict__ dout, const uint16_t *__restrict__ qkv,
                     const float *__restrict__ lse, const float *__restrict__ Dbuf, int T, int C, int NH, int HS,
                     float scale, float scale_log2) {
    constexpr int LDS = HSP + 8, NKT = HSP / 16, NDT = HSP / 8, NKN = FM_BC / 8;
    extern __shared__ uint4 fm_smem[];
    uint16_t *Qs = reinterpret_cast<uint16_t *>(fm_smem); // (BR, LDS)
    uint16_t *Os = Qs + FM_BR * LDS;                      // (BR, LDS): dout
    uint16_t *Ks = Os + FM_BR * LDS;                      // 2 x (BC, LDS)
    uint16_t *Vs = Ks + 2 * FM_BC * LDS;                  // 2 x (BC, LDS)
    float *Ls = reinterpret_cast<float *>(Vs + 2 * FM_BC * LDS); // (BR)
    float *Dsm = Ls + FM_BR;                                     // (BR)
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    const int qb = gridDim.x - 1 - blockIdx.x; // the longest rows start first
    const int h = blockIdx.y, b = blockIdx.z;
    const int q0 = qb * FM_BR, wrow = q0 + warp * 16, row0 = wrow + g;
    const size_t ld = 3 * (size_t)C;
    const uint16_t *qbase = qkv + (size_t)b * T * ld + (size_t)h * HS;
    const uint16_t *kbase = qbase + C, *vbase = qbase + 2 * (size_t)C;
    const uint16_t *obase = dout + (size_t)b * T * C + (size_t)h * HS;
    const int nkb = (min(q0 + FM_BR, T) - 1) / FM_BC + 1;

    fm_load_tile<HSP, FM_BR>(Qs, qbase, ld, q0, T, HS);
    fm_load_tile<HSP, FM_BR>(Os, obase, C, q0, T, HS);
    fm_load_stats<FM_BR>(Ls, Dsm, lse + ((size_t)b * NH + h) * T, Dbuf + ((size_t)b * NH + h) * T, q0, T);
    fm_load_tile<HSP, FM_BC>(Ks, kbase, ld, 0, T, HS);
    fm_load_tile<HSP, FM_BC>(Vs, vbase, ld, 0, T, HS);
    mx_cp_async_commit();

    float dq[NDT][4]; // (16 rows, HSP), fp32
#pragma unroll
    for (int j = 0; j < NDT; j++) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.0f;
    float lse2[2] = {0.0f, 0.0f}, Dr[2] = {0.0f, 0.0f};

    for (int kb = 0; kb < nkb; kb++) {
        mx_cp_async_wait_all();
        __syncthreads();
        if (kb == 0) {
#pragma unroll
            for (int i = 0; i < 2; i++) {
                lse2[i] = Ls[warp * 16 + g + 8 * i] * FM_LOG2E;
                Dr[i] = Dsm[warp * 16 + g + 8 * i];
            }
        }
        if (kb + 1 < nkb) {
            const int nb = (kb + 1) & 1;
            fm_load_tile<HSP, FM_BC>(Ks + nb * FM_BC * LDS, kbase, ld, (kb + 1) * FM_BC, T, HS);
            fm_load_tile<HSP, FM_BC>(Vs + nb * FM_BC * LDS, vbase, ld, (kb + 1) * FM_BC, T, HS);
            mx_cp_async_commit();
        }
        const uint16_t *Kt = Ks + (kb & 1) * FM_BC * LDS, *Vt = Vs + (kb & 1) * FM_BC * LDS;
        const int k0 = kb * FM_BC;
        if (k0 > wrow + 15) continue; // every key of the tile is after this warp's rows
        float s[NKN][4], dp[NKN][4];
#pragma unroll
        for (int j = 0; j < NKN; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[j][e] = dp[j][e] = 0.0f;
#pragma unroll
        for (int kt = 0; kt < NKT; kt++) {
            if (kt * 16 >= HS) continue;
            uint32_t qa[4], oa[4];
            fm_ld_a<LDS>(qa, Qs, warp * 16, kt * 16, lane);
            fm_ld_a<LDS>(oa, Os, warp * 16, kt * 16, lane);
#pragma unroll
            for (int np = 0; np < NKN / 2; np++) {
                if (k0 + np * 16 > wrow + 15) continue;
                uint32_t bf[4];
                fm_ld_b_nk<LDS>(bf, Kt, np * 16, kt * 16, lane);
                fm_mma(E(), s[2 * np], qa, bf[0], bf[1]);
                fm_mma(E(), s[2 * np + 1], qa, bf[2], bf[3]);
                fm_ld_b_nk<LDS>(bf, Vt, np * 16, kt * 16, lane);
                fm_mma(E(), dp[2 * np], oa, bf[0], bf[1]);
                fm_mma(E(), dp[2 * np + 1], oa, bf[2], bf[3]);
            }
        }
        // P = exp(S - lse) (0 where key > row), dS = P (dP - D), kept in s
        const bool diag = k0 + FM_BC - 1 > wrow;
#pragma unroll
        for (int j = 0; j < NKN; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float p = fm_exp2(s[j][e] * scale_log2 - lse2[e >> 1]);
                if (diag && k0 + j * 8 + tq * 2 + (e & 1) > row0 + (e >> 1) * 8) p = 0.0f;
                s[j][e] = p * (dp[j][e] - Dr[e >> 1]);
            }
        // dQ += round(dS) (16, 64) @ K (64, HSP)
#pragma unroll
        for (int kk = 0; kk < FM_BC / 16; kk++) {
            if (k0 + kk * 16 > wrow + 15) continue; // all zeros
            const uint32_t sa[4] = {fm_pack(E(), s[2 * kk][0], s[2 * kk][1]), fm_pack(E(), s[2 * kk][2], s[2 * kk][3]),
                                    fm_pack(E(), s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                    fm_pack(E(), s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int dpi = 0; dpi < NKT; dpi++) {
                if (dpi * 16 >= HS) continue;
                uint32_t bf[4];
                fm_ld_b_kn<LDS>(bf, Kt, kk * 16, dpi * 16, lane);
                fm_mma(E(), dq[2 * dpi], sa, bf[0], bf[1]);
                fm_mma(E(), dq[2 * dpi + 1], sa, bf[2], bf[3]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int r = row0 + 8 * i;
        if (r >= T) continue;
        uint16_t *row = dqkv + ((size_t)b * T + r) * ld + (size_t)h * HS;
#pragma unroll
        for (int j = 0; j < NDT; j++) {
            const int d = j * 8 + tq * 2;
            if (d < HS) *reinterpret_cast<uint32_t *>(row + d) = fm_pack(E(), dq[j][2 * i] * scale, dq[j][2 * i + 1] * scale);
        }
    }
}

// ================================= launchers =================================
static constexpr size_t fm_tile_bytes(int rows, int HSP) { return (size_t)rows * (HSP + 8) * sizeof(uint16_t); }
static constexpr int fm_bwd_bq(int HSP) { return HSP <= 64 ? 64 : 32; } // dk/dv query tile (registers)

static mo_status fm_check_ptrs(const char *op, const void *a, const void *b, const void *c, const void *d) {
    const void *p[4] = {a, b, c, d};
    for (int i = 0; i < 4; i++)
        if (p[i] && !mx_aligned16(p[i]))
            return MO_FAIL(MO_ERR_INVALID, "%s: tensors must be 16-byte aligned for the cuda kernels (%p)", op, p[i]);
    return MO_OK;
}

template <class E, int HSP>
static mo_status fm_forward_launch(mo_ctx *c, void *out, float *lse, const void *qkv, int B, int T, int C, int NH) {
    const int HS = C / NH;
    const size_t smem = fm_tile_bytes(FM_BR + 4 * FM_BC, HSP);
    CUDA_CHECK(cudaFuncSetAttribute(fm_forward_kernel<E, HSP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const dim3 grid((unsigned)((T + FM_BR - 1) / FM_BR), (unsigned)NH, (unsigned)B);
    fm_forward_kernel<E, HSP><<<grid, FM_THREADS, smem, (cudaStream_t)c->stream>>>(
        (uint16_t *)out, lse, (const uint16_t *)qkv, T, C, NH, HS, FM_LOG2E / sqrtf((float)HS));
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

template <class E, int HSP>
static mo_status fm_backward_launch(mo_ctx *c, void *dqkv, const void *dout, const void *qkv, const void *out,
                                    const float *lse, float *Dbuf, int B, int T, int C, int NH) {
    constexpr int BQ = fm_bwd_bq(HSP);
    cudaStream_t s = (cudaStream_t)c->stream;
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS), scale_log2 = FM_LOG2E * scale;
    const long long rows = (long long)B * NH * T;
    const int dot_warps = 8;
    fm_dot_kernel<E><<<(unsigned)((rows + dot_warps - 1) / dot_warps), dot_warps * 32, 0, s>>>(
        Dbuf, (const uint16_t *)dout, (const uint16_t *)out, rows, T, C, NH, HS);
    CUDA_CHECK_LAUNCH();
    const dim3 grid((unsigned)((T + FM_BC - 1) / FM_BC), (unsigned)NH, (unsigned)B);
    const size_t smem_kv = fm_tile_bytes(2 * FM_BC + 4 * BQ, HSP) + 4 * BQ * sizeof(float);
    CUDA_CHECK(cudaFuncSetAttribute(fm_bwd_dkdv_kernel<E, HSP, BQ>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem_kv));
    fm_bwd_dkdv_kernel<E, HSP, BQ><<<grid, FM_THREADS, smem_kv, s>>>((uint16_t *)dqkv, (const uint16_t *)dout,
                                                                    (const uint16_t *)qkv, lse, Dbuf, T, C, NH, HS,
                                                                    scale, scale_log2);
    CUDA_CHECK_LAUNCH();
    const size_t smem_q = fm_tile_bytes(2 * FM_BR + 4 * FM_BC, HSP) + 2 * FM_BR * sizeof(float);
    CUDA_CHECK(cudaFuncSetAttribute(fm_bwd_dq_kernel<E, HSP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem_q));
    fm_bwd_dq_kernel<E, HSP><<<grid, FM_THREADS, smem_q, s>>>((uint16_t *)dqkv, (const uint16_t *)dout,
                                                             (const uint16_t *)qkv, lse, Dbuf, T, C, NH, HS, scale,
                                                             scale_log2);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

// HSP: HS rounded up to 32, 64, 96 or 128 (the dispatcher admits multiples of 8 up to 128 only)
#define FM_DISPATCH(op, CALL)                                                                               \
    do {                                                                                                    \
        const int HS_ = C / NH;                                                                             \
        if (HS_ <= 0 || HS_ > MO_ATTN_FUSED_MAX_HS || HS_ % 8 != 0)                                         \
            return MO_FAIL(MO_ERR_UNSUPPORTED, "%s: head size %d (a multiple of 8 up to %d)", op, HS_,      \
                           MO_ATTN_FUSED_MAX_HS);                                                           \
        if (dt == MO_BF16) {                                                                                \
            if (HS_ <= 32) return CALL(mx_bf16, 32);                                                        \
            if (HS_ <= 64) return CALL(mx_bf16, 64);                                                        \
            if (HS_ <= 96) return CALL(mx_bf16, 96);                                                        \
            return CALL(mx_bf16, 128);                                                                      \
        }                                                                                                   \
        if (dt == MO_F16) {                                                                                 \
            if (HS_ <= 32) return CALL(mx_f16, 32);                                                         \
            if (HS_ <= 64) return CALL(mx_f16, 64);                                                         \
            if (HS_ <= 96) return CALL(mx_f16, 96);                                                         \
            return CALL(mx_f16, 128);                                                                       \
        }                                                                                                   \
        return MO_FAIL(MO_ERR_INVALID, "%s: dtype %s is not fp16 or bf16", op, mo_dtype_name(dt));         \
    } while (0)

mo_status attention_fused_forward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *out, float *lse, const void *qkv, int B,
                                             int T, int C, int NH) {
    const char *op = "attention_fused_forward_mixed";
    MO_TRY(fm_check_ptrs(op, out, qkv, NULL, NULL));
#define FM_FWD(E, HSP) fm_forward_launch<E, HSP>(c, out, lse, qkv, B, T, C, NH)
    FM_DISPATCH(op, FM_FWD);
#undef FM_FWD
}

mo_status attention_fused_backward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *dqkv, const void *dout,
                                              const void *qkv, const void *out, const float *lse, void *scratch,
                                              int B, int T, int C, int NH) {
    const char *op = "attention_fused_backward_mixed";
    MO_TRY(fm_check_ptrs(op, dqkv, dout, qkv, out));
    float *Dbuf = (float *)scratch; // (B, NH, T)
#define FM_BWD(E, HSP) fm_backward_launch<E, HSP>(c, dqkv, dout, qkv, out, lse, Dbuf, B, T, C, NH)
    FM_DISPATCH(op, FM_BWD);
#undef FM_BWD
}
