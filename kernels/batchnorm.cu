// The suite's own batch norm kernels (batchnorm.h), NHWC: x (M, C), channel fastest.
// Why not cuDNN's: on the H200 at c995ff5 (gpu_resnet_ops timing, ResNet-50 layer1, M 401408 rows of
// C 64) cudnnBatchNormalizationForwardTraining took 32.5 ms and the backward 13.9 ms on the (M, C, 1, 1)
// NHWC descriptor, about 3 GB/s, which made the ResNet-50 fp32 step 3.1 s; its faster NHWC mode
// (CUDNN_BATCHNORM_SPATIAL_PERSISTENT) uses atomics, and a checkpointed step must give the same bits as
// an uncheckpointed one. MEMOPT_BN=cudnn still runs cuDNN's (batchnorm_cuda.c).
// Deterministic: every sum is in a fixed order, no atomics.
//   forward:  (1) per (row group g, channel) Welford mean and M2 of the group's rows (a block: 32
//                 channels x 8 row lanes, lanes merged in order), (2) per channel the groups merged in
//                 double by the parallel formula's two sums (a block per channel, a fixed tree), the
//                 mean, rstd and running statistics, (3) out = gamma (x - mean) rstd + beta, ReLU.
//   backward: (1) per (g, channel) sums of dy and dy xhat, (2) per channel in double: dbeta += sum dy,
//                 dgamma += sum dy xhat, and the two means, (3) dx = gamma rstd (dy - mean dy - xhat
//                 mean(dy xhat)).
// Each pass has a vectorized form (16 bytes a thread, below the scalar kernels) used when C and the
// pointers allow; the forward's normalize pass can add a residual before the ReLU, and the backward's
// first pass can apply a ReLU mask to dy in place, or both passes a mask recomputed from x, gamma and beta
// (batchnorm.h's fused forms).
// The partial sums live in the context's library workspace (ctx->gemm_ws, the model's budget unless
// MEMOPT_WORKSPACE_MIB, already counted as workspace on every backend), so the dry backend's peak needs
// nothing new; the rows per group grow until the partials fit it.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "batchnorm.h"
#include "cuda_check.h"
#include "resnet_dev.cuh"
#include "resnet_ops_impl.h"

#define BN_TX 32   // channels per block
#define BN_TY 8    // row lanes per block
#ifndef BN_RPB
#define BN_RPB 256 // rows per group at least (-D overridable to A/B)
#endif
// Rows whose loads a vectorized kernel's thread issues at once: the statistics, the normalize and the
// backward's two passes; BN_UNROLL_FINAL: groups' partials a thread of the final merges loads at once. Any
// value gives the same bits; 1 gives the one-row loops. Set at build time (-DBN_UNROLL_STATS=1 ...) to A/B
// them in one call. ResNet-50 batch 128 on an H100 (session 21, two interleaved rounds, median of 10
// steps), the one-row loops against these: fp32 115.44 / 115.48 -> 114.79 / 114.84 ms, tf32 49.62 / 49.67
// -> 49.13 / 49.07, bf16 26.68 / 26.64 -> 26.52 / 26.62. Normalize 2 rows: bf16 27.09 / 27.11; BN_RPB 512:
// bf16 27.22 / 27.17 (slower).
#ifndef BN_UNROLL_STATS
#define BN_UNROLL_STATS 4
#endif
#ifndef BN_UNROLL_NORM
#define BN_UNROLL_NORM 4
#endif
#ifndef BN_UNROLL_BWD
#define BN_UNROLL_BWD 2
#endif
#ifndef BN_UNROLL_FINAL
#define BN_UNROLL_FINAL 4
#endif
// Rows a lane of the vectorized reduction kernels (statistics, backward sums) takes at least: their groups
// then have BN_RED_LANE_ROWS x TY rows (BN_RPB at least), so the block's merge and the partials are paid
// for fewer rows when TY is large (narrow C in 16 bits: C 64 gives TY 32, 8 rows a lane at BN_RPB). 0: BN_RPB.
// The elementwise passes keep BN_RPB-row groups (more blocks). -D overridable to A/B. ResNet-50 batch 128 on
// an H100 (session 21, two interleaved rounds, median of 10 steps), 0 / 16 / 32 / 64: fp16 25.51 / 25.26 /
// 25.04 / 25.39 and 25.59 / 25.23 / 25.01 / 25.45 ms; bf16 26.48 / 26.22 / 25.85 / 26.46 and 26.46 / 26.08 /
// 25.87 / 26.56.
#ifndef BN_RED_LANE_ROWS
#define BN_RED_LANE_ROWS 32
#endif

// i's channel: 32-bit arithmetic when the tensor allows (the branch is the same for every thread)
#define BN_CH(i, n, C) ((n) <= 0xffffffffu ? (int)((unsigned)(i) % (unsigned)(C)) : (int)((i) % (size_t)(C)))

static cudaStream_t S(mo_ctx *c) { return (cudaStream_t)c->stream; }
// L(T) as DISPATCH's, with RM a compile-time bool equal to rm (the backward kernels' remask form)
#define DISPATCH_RM(rm, dt, L)        \
    do {                              \
        if (rm) {                     \
            constexpr bool RM = true; \
            DISPATCH(dt, L);          \
        } else {                      \
            constexpr bool RM = false;\
            DISPATCH(dt, L);          \
        }                             \
    } while (0)

// gamma ((x - mean) rstd) + beta: every kernel's BN output, one fused multiply-add spelled out so that the
// backward's recomputed ReLU mask (bn_keep) has the forward's bits whatever the compiler contracts
__device__ __forceinline__ float bn_y(float x, float m, float rs, float g, float b) { return __fmaf_rn(g, (x - m) * rs, b); }
// The ReLU after a BN kept x's gradient: its output, the BN output rounded to dt, was > 0 (NaN: not kept,
// as the mask of the stored output)
template <class D>
__device__ __forceinline__ bool bn_keep(float x, float m, float rs, float g, float b) {
    return D::to_f(D::from_f(bn_y(x, m, rs, g, b))) > 0.0f;
}

// Rows per group, min_rows at least (a power of two times it), such that the (G, C) float2 partials and 2C
// floats fit the workspace, and G fits gridDim.y.
static mo_status bn_groups(const mo_ctx *c, int M, int C, int min_rows, int *rpb, int *G) {
    long long r = min_rows;
    for (;;) {
        const long long g = (M + r - 1) / r;
        const size_t bytes = (size_t)g * C * sizeof(float2) + 2 * (size_t)C * sizeof(float);
        if (bytes <= c->gemm_ws_bytes && g <= 65535) {
            *rpb = (int)r, *G = (int)g;
            return MO_OK;
        }
        if (r >= M) return MO_FAIL(MO_ERR_INTERNAL, "batchnorm: C %d too wide for the %zu-byte workspace", C, c->gemm_ws_bytes);
        r *= 2;
    }
}

// part (G, C): Welford (mean, M2) of rows [g rpb, min(M, (g+1) rpb)) of each channel
template <class D>
__global__ void bn_stats_kernel(float2 *part, const typename D::S *in, int M, int C, int rpb) {
    __shared__ float sm[BN_TY][BN_TX], s2[BN_TY][BN_TX];
    __shared__ int sn[BN_TY][BN_TX];
    const int ch = blockIdx.x * BN_TX + threadIdx.x;
    const int r0 = blockIdx.y * rpb, r1 = (int)min((long long)M, (long long)r0 + rpb);
    float mean = 0.0f, m2 = 0.0f;
    int n = 0;
    if (ch < C)
        for (int r = r0 + threadIdx.y; r < r1; r += BN_TY) {
            const float x = D::to_f(in[(size_t)r * C + ch]);
            n++;
            const float d = x - mean;
            mean += d / (float)n;
            m2 += d * (x - mean);
        }
    sm[threadIdx.y][threadIdx.x] = mean, s2[threadIdx.y][threadIdx.x] = m2, sn[threadIdx.y][threadIdx.x] = n;
    __syncthreads();
    if (threadIdx.y != 0 || ch >= C) return;
    for (int k = 1; k < BN_TY; k++) { // Chan's merge, lanes in order
        const int nb = sn[k][threadIdx.x];
        if (!nb) continue;
        const float mb = sm[k][threadIdx.x], n_ab = (float)(n + nb), d = mb - mean;
        mean += d * ((float)nb / n_ab);
        m2 += s2[k][threadIdx.x] + d * d * ((float)n * (float)nb / n_ab);
        n += nb;
    }
    part[(size_t)blockIdx.y * C + ch] = make_float2(mean, m2);
}

// The per-channel merges of the groups' partials: a block of BN_FT threads per channel (blockIdx.x), thread
// t taking groups t, t + BN_FT, ... in order, BN_UNROLL_FINAL loads at once, then the threads' sums added
// in a fixed tree (bn_block_sum2), so the result does not depend on scheduling. The sums are in double.
// A block per channel with all of its loads in flight: the one-warp-per-channel form took 14 and 7 us a
// BN on the H100 (ncu, session 20), latency-bound, about 1.1 ms of the 26 ms bf16 ResNet-50 step.
#ifndef BN_FT
#define BN_FT 256
#endif

// (a, b) summed over the block's threads in a fixed order: each warp's by a shuffle tree, then the warps'
// in order by thread 0; the block's sums returned to thread 0 (others: their warp's partial, unused)
__device__ __forceinline__ void bn_block_sum2(double &a, double &b) {
    __shared__ double sa[BN_FT / 32], sb[BN_FT / 32];
    for (int off = 16; off > 0; off /= 2) {
        a += __shfl_down_sync(0xffffffffu, a, off);
        b += __shfl_down_sync(0xffffffffu, b, off);
    }
    const int w = threadIdx.x / 32, nw = blockDim.x / 32;
    if (threadIdx.x % 32 == 0) sa[w] = a, sb[w] = b;
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int k = 1; k < nw; k++) a += sa[k], b += sb[k];
}

// rows of group g of rpb rows in M
__device__ __forceinline__ double bn_group_rows(int g, int rpb, int M) {
    const long long r0 = (long long)g * rpb, r1 = min((long long)M, r0 + rpb);
    return (double)(r1 - r0);
}

// Per channel: the groups' Welford (mean, M2) merged by the parallel formula's two sums, S = sum n_g mean_g
// and Q = sum (M2_g + n_g mean_g^2), then mean = S / M and M2 = Q - S mean, in double (no division per
// group; the cancellation costs about 1e-16 mean^2 / var of the variance, relative); the mean, rstd and the
// running statistics.
__global__ void __launch_bounds__(BN_FT) bn_stats_final_kernel(float *mean, float *rstd, float *run_mean, float *run_var,
                                                              const float2 *part, int G, int M, int C, int rpb, float momentum) {
    const int ch = blockIdx.x, T = blockDim.x;
    double sum = 0.0, sq = 0.0;
    int g = threadIdx.x;
    for (; g + T * (BN_UNROLL_FINAL - 1) < G; g += T * BN_UNROLL_FINAL) { // the loads first, in the groups' order
        float2 p[BN_UNROLL_FINAL];
#pragma unroll
        for (int u = 0; u < BN_UNROLL_FINAL; u++) p[u] = part[(size_t)(g + T * u) * C + ch];
#pragma unroll
        for (int u = 0; u < BN_UNROLL_FINAL; u++) {
            const double n = bn_group_rows(g + T * u, rpb, M), mu = p[u].x;
            sum += n * mu;
            sq += (double)p[u].y + n * mu * mu;
        }
    }
    for (; g < G; g += T) {
        const float2 p = part[(size_t)g * C + ch];
        const double n = bn_group_rows(g, rpb, M), mu = p.x;
        sum += n * mu;
        sq += (double)p.y + n * mu * mu;
    }
    bn_block_sum2(sum, sq);
    if (threadIdx.x != 0) return;
    const double mu = sum / M, m2 = fmax(sq - sum * mu, 0.0);
    const double var = m2 / M; // biased: what normalizes
    const float m = (float)mu;
    mean[ch] = m;
    rstd[ch] = (float)(1.0 / sqrt(var + MO_BN_EPS));
    if (run_mean) {
        const double unbiased = M > 1 ? m2 / (M - 1) : var;
        run_mean[ch] = (1.0f - momentum) * run_mean[ch] + momentum * m;
        run_var[ch] = (1.0f - momentum) * run_var[ch] + momentum * (float)unbiased;
    }
}

// threads of a final merge's block: G rounded up to a warp, BN_FT at most
static unsigned bn_final_threads(int G) {
    const int t = (G + 31) / 32 * 32;
    return (unsigned)(t < BN_FT ? t : BN_FT);
}

// out (M, C) = gamma ((x - mean) rstd) + beta, then ReLU (NaN kept, as torch.relu)
// res != NULL: the result rounded to dt, + res, rounded again (the residual add), before the ReLU
template <class D>
__global__ void bn_norm_kernel(typename D::S *out, const typename D::S *in, const typename D::S *res, const float *mean,
                               const float *rstd, const float *gamma, const float *beta, size_t n, int C, int relu) {
    GRID_STRIDE(i, n) {
        const int ch = BN_CH(i, n, C);
        float y = bn_y(D::to_f(in[i]), mean[ch], rstd[ch], gamma[ch], beta[ch]);
        if (res) y = D::to_f(D::from_f(y)) + D::to_f(res[i]);
        if (relu && y <= 0.0f) y = 0.0f;
        out[i] = D::from_f(y);
    }
}

// ---- vectorized kernels: 16 bytes a thread (4 fp32 or 8 16-bit channels), used when C is a multiple of
// the vector and the tensors are 16-byte aligned (rn_vec_ok); the scalar kernels above otherwise. The
// scalar kernels moved 2 or 4 bytes a thread and reached about a quarter of the H100's bandwidth
// (session 11 --profile, ResNet-50 bf16 batch 128: batch norm 15.2 of a 49.5 ms step).
// Block (TX, TY): TX threads across TX*V channels, TY row lanes; a row group's lanes merged in a fixed
// tree (lane t takes lane t+s, s = 1, 2, 4, ...), so the result does not depend on scheduling.
#define BN_VT 256 // threads per block of the vectorized statistics kernels

// rows of [r0, r1) that lane t of TY takes: r0 + t, r0 + t + TY, ...
__device__ __forceinline__ int bn_lane_rows(int t, int TY, int rows) { return t < rows ? (rows - 1 - t) / TY + 1 : 0; }
// rows of lanes [t, min(t + w, TY))
__device__ __forceinline__ int bn_span_rows(int t, int w, int TY, int rows) {
    int n = 0;
    for (int k = t; k < t + w && k < TY; k++) n += bn_lane_rows(k, TY, rows);
    return n;
}

// One row's V values into a lane's Welford (mean, M2) of its n-th row
template <int V>
__device__ __forceinline__ void welford_row(float *mean, float *m2, int n, const float *x) {
    const float inv = 1.0f / (float)n;
#pragma unroll
    for (int k = 0; k < V; k++) {
        const float d = x[k] - mean[k];
        mean[k] += d * inv;
        m2[k] += d * (x[k] - mean[k]);
    }
}

// part (G, C): Welford (mean, M2) of the group's rows, V channels a thread
template <class D>
__global__ void __launch_bounds__(BN_VT) bn_stats_vec_kernel(float2 *part, const typename D::S *in, int M, int C, int rpb) {
    typedef rn_vec<D> VD;
    enum { V = VD::V };
    __shared__ float sm[BN_VT * V], s2[BN_VT * V];
    const int TX = blockDim.x, TY = blockDim.y, tx = threadIdx.x, ty = threadIdx.y;
    const int c0 = (blockIdx.x * TX + tx) * V;
    const int r0 = blockIdx.y * rpb, r1 = (int)min((long long)M, (long long)r0 + rpb);
    float mean[V], m2[V];
#pragma unroll
    for (int k = 0; k < V; k++) mean[k] = 0.0f, m2[k] = 0.0f;
    if (c0 < C) {
        int n = 0, r = r0 + ty;
        // BN_UNROLL_STATS rows' loads issued before their updates (with one row's load in flight a thread the
        // pass read at 1.4 TB/s on the H100: ncu, session 20); the updates keep the rows' order, so the sums
        // are those of the one-row loop below, bit for bit
        for (; r + (BN_UNROLL_STATS - 1) * TY < r1; r += BN_UNROLL_STATS * TY) {
            float x[BN_UNROLL_STATS][V];
#pragma unroll
            for (int u = 0; u < BN_UNROLL_STATS; u++) VD::ld(x[u], in + (size_t)(r + u * TY) * C + c0);
#pragma unroll
            for (int u = 0; u < BN_UNROLL_STATS; u++) welford_row<V>(mean, m2, ++n, x[u]);
        }
        for (; r < r1; r += TY) {
            float x[V];
            VD::ld(x, in + (size_t)r * C + c0);
            welford_row<V>(mean, m2, ++n, x);
        }
    }
    const int at = (ty * TX + tx) * V;
#pragma unroll
    for (int k = 0; k < V; k++) sm[at + k] = mean[k], s2[at + k] = m2[k];
    __syncthreads();
    const int rows = r1 - r0;
    for (int w = 1; w < TY; w *= 2) { // Chan's merge of lane ty+w's span into lane ty's
        if (ty % (2 * w) == 0 && ty + w < TY && c0 < C) {
            const float na = (float)bn_span_rows(ty, w, TY, rows), nb = (float)bn_span_rows(ty + w, w, TY, rows);
            if (nb > 0.0f) {
                const int bt = ((ty + w) * TX + tx) * V;
                const float nab = na + nb, fb = nb / nab, fab = na * nb / nab;
#pragma unroll
                for (int k = 0; k < V; k++) {
                    const float d = sm[bt + k] - sm[at + k];
                    sm[at + k] += d * fb;
                    s2[at + k] += s2[bt + k] + d * d * fab;
                }
            }
        }
        __syncthreads();
    }
    if (ty != 0 || c0 >= C) return;
#pragma unroll
    for (int k = 0; k < V; k++) part[(size_t)blockIdx.y * C + c0 + k] = make_float2(sm[at + k], s2[at + k]);
}

// x := gamma ((x - mean) rstd) + beta, + y (the residual, after rounding to dt) when res, ReLU when relu
template <class D, int V>
__device__ __forceinline__ void bn_norm_row(float *x, const float *y, const float *m, const float *rs, const float *g,
                                            const float *b, bool res, int relu) {
#pragma unroll
    for (int k = 0; k < V; k++) x[k] = bn_y(x[k], m[k], rs[k], g[k], b[k]);
    if (res)
#pragma unroll
        for (int k = 0; k < V; k++) x[k] = D::to_f(D::from_f(x[k])) + y[k];
    if (relu)
#pragma unroll
        for (int k = 0; k < V; k++) x[k] = x[k] <= 0.0f ? 0.0f : x[k]; // NaN kept
}

// out (M, C) = gamma ((x - mean) rstd) + beta; res: rounded to dt, + res, rounded again (the residual add);
// then ReLU when relu. The statistics kernel's block over BN_RPB-row groups: a thread keeps its V channels'
// parameters in registers over the group's rows (read per element, they cost more L1 traffic than the tensor).
template <class D>
__global__ void __launch_bounds__(BN_VT) bn_norm_vec_kernel(typename D::S *out, const typename D::S *in, const typename D::S *res,
                                   const float *mean, const float *rstd, const float *gamma, const float *beta,
                                   int M, int C, int rpb, int relu) {
    typedef rn_vec<D> VD;
    enum { V = VD::V };
    const int TX = blockDim.x, TY = blockDim.y;
    const int c0 = (blockIdx.x * TX + threadIdx.x) * V;
    if (c0 >= C) return;
    const int r0 = blockIdx.y * rpb, r1 = (int)min((long long)M, (long long)r0 + rpb);
    float m[V], rs[V], g[V], b[V];
#pragma unroll
    for (int k = 0; k < V; k++) m[k] = mean[c0 + k], rs[k] = rstd[c0 + k], g[k] = gamma[c0 + k], b[k] = beta[c0 + k];
    // BN_UNROLL_NORM rows a step, their loads first (elementwise: the same values whatever the grouping)
    int r = r0 + threadIdx.y;
    for (; r + (BN_UNROLL_NORM - 1) * TY < r1; r += BN_UNROLL_NORM * TY) {
        float x[BN_UNROLL_NORM][V], y[BN_UNROLL_NORM][V];
#pragma unroll
        for (int u = 0; u < BN_UNROLL_NORM; u++) {
            VD::ld(x[u], in + (size_t)(r + u * TY) * C + c0);
            if (res) VD::ld(y[u], res + (size_t)(r + u * TY) * C + c0);
        }
#pragma unroll
        for (int u = 0; u < BN_UNROLL_NORM; u++) {
            bn_norm_row<D, V>(x[u], y[u], m, rs, g, b, res != NULL, relu);
            VD::st(out + (size_t)(r + u * TY) * C + c0, x[u]);
        }
    }
    for (; r < r1; r += TY) {
        const size_t j = (size_t)r * C + c0;
        float x[V], y[V];
        VD::ld(x, in + j);
        if (res) VD::ld(y, res + j);
        bn_norm_row<D, V>(x, y, m, rs, g, b, res != NULL, relu);
        VD::st(out + j, x);
    }
}

// One row into a lane's sums: dy masked by y (the forward's output) and stored back to dym when dym != NULL;
// RM (remask): dy masked by bn_keep of x, (pg, pb) the channels' gamma and beta; then a += dy, b += dy xhat
template <class D, int V, bool RM>
__device__ __forceinline__ void bn_bwd_row(float *a, float *b, float *g, const float *x, const float *y,
                                           const float *m, const float *rs, typename D::S *dym, const float *pg,
                                           const float *pb) {
    if (RM)
#pragma unroll
        for (int k = 0; k < V; k++) g[k] = bn_keep<D>(x[k], m[k], rs[k], pg[k], pb[k]) ? g[k] : 0.0f;
    if (dym) {
#pragma unroll
        for (int k = 0; k < V; k++) g[k] = y[k] > 0.0f ? g[k] : 0.0f;
        rn_vec<D>::st(dym, g); // g is a dt value or 0: the same value back (a 16-bit NaN's payload aside)
    }
#pragma unroll
    for (int k = 0; k < V; k++) {
        a[k] += g[k];
        b[k] += g[k] * ((x[k] - m[k]) * rs[k]);
    }
}

// part (G, C): (sum dy, sum dy xhat) over the group's rows, V channels a thread. mask (the forward's
// output) != NULL: dy is taken as 0 where mask <= 0 and written back so (dy: the caller's, masked in place).
// RM (remask; mask NULL): dy is taken as 0 where the forward's BN + ReLU output, recomputed from in with
// gamma and beta, is not > 0; dy only read.
template <class D, bool RM>
__global__ void __launch_bounds__(BN_VT) bn_bwd_sums_vec_kernel(float2 *part, typename D::S *dy, const typename D::S *mask,
                                                           const typename D::S *in, const float *mean, const float *rstd,
                                                           const float *gamma, const float *beta, int M, int C, int rpb) {
    typedef rn_vec<D> VD;
    enum { V = VD::V };
    __shared__ float sa[BN_VT * V], sb[BN_VT * V];
    const int TX = blockDim.x, TY = blockDim.y, tx = threadIdx.x, ty = threadIdx.y;
    const int c0 = (blockIdx.x * TX + tx) * V;
    const int r0 = blockIdx.y * rpb, r1 = (int)min((long long)M, (long long)r0 + rpb);
    float a[V], b[V];
#pragma unroll
    for (int k = 0; k < V; k++) a[k] = 0.0f, b[k] = 0.0f;
    if (c0 < C) {
        float m[V], rs[V], pg[V], pb[V];
#pragma unroll
        for (int k = 0; k < V; k++) {
            m[k] = mean[c0 + k], rs[k] = rstd[c0 + k];
            if (RM) pg[k] = gamma[c0 + k], pb[k] = beta[c0 + k];
        }
        // BN_UNROLL_BWD rows' loads first, then their sums in the rows' order (the one-row loop's bits)
        int r = r0 + ty;
        for (; r + (BN_UNROLL_BWD - 1) * TY < r1; r += BN_UNROLL_BWD * TY) {
            float g[BN_UNROLL_BWD][V], x[BN_UNROLL_BWD][V], y[BN_UNROLL_BWD][V];
#pragma unroll
            for (int u = 0; u < BN_UNROLL_BWD; u++) {
                const size_t j = (size_t)(r + u * TY) * C + c0;
                VD::ld(g[u], dy + j);
                VD::ld(x[u], in + j);
                if (mask) VD::ld(y[u], mask + j);
            }
#pragma unroll
            for (int u = 0; u < BN_UNROLL_BWD; u++)
                bn_bwd_row<D, V, RM>(a, b, g[u], x[u], y[u], m, rs, mask ? dy + (size_t)(r + u * TY) * C + c0 : NULL, pg,
                                     pb);
        }
        for (; r < r1; r += TY) {
            const size_t j = (size_t)r * C + c0;
            float g[V], x[V], y[V];
            VD::ld(g, dy + j);
            VD::ld(x, in + j);
            if (mask) VD::ld(y, mask + j);
            bn_bwd_row<D, V, RM>(a, b, g, x, y, m, rs, mask ? dy + j : NULL, pg, pb);
        }
    }
    const int at = (ty * TX + tx) * V;
#pragma unroll
    for (int k = 0; k < V; k++) sa[at + k] = a[k], sb[at + k] = b[k];
    __syncthreads();
    for (int w = 1; w < TY; w *= 2) {
        if (ty % (2 * w) == 0 && ty + w < TY) {
            const int bt = ((ty + w) * TX + tx) * V;
#pragma unroll
            for (int k = 0; k < V; k++) sa[at + k] += sa[bt + k], sb[at + k] += sb[bt + k];
        }
        __syncthreads();
    }
    if (ty != 0 || c0 >= C) return;
#pragma unroll
    for (int k = 0; k < V; k++) part[(size_t)blockIdx.y * C + c0 + k] = make_float2(sa[at + k], sb[at + k]);
}

// x := gamma rstd (dy - mean dy - xhat mean(dy xhat)) of x, dy = g; RM: dy masked first as bn_bwd_row's
template <class D, int V, bool RM>
__device__ __forceinline__ void bn_dx_row(float *x, const float *g, const float *m, const float *rs, const float *gr,
                                          const float *ca, const float *cb, const float *pg, const float *pb) {
#pragma unroll
    for (int k = 0; k < V; k++) {
        const float dy = !RM || bn_keep<D>(x[k], m[k], rs[k], pg[k], pb[k]) ? g[k] : 0.0f;
        const float xh = (x[k] - m[k]) * rs[k];
        x[k] = gr[k] * (dy - ca[k] - xh * cb[k]);
    }
}

// din = gamma rstd (dy - mean dy - xhat mean(dy xhat)), V channels a thread over BN_RPB-row groups; RM: dy
// masked by the recomputed ReLU output (bn_bwd_sums_vec_kernel's)
template <class D, bool RM>
__global__ void __launch_bounds__(BN_VT) bn_dx_vec_kernel(typename D::S *din, const typename D::S *dy, const typename D::S *in,
                                 const float *gamma, const float *beta, const float *mean, const float *rstd,
                                 const float *coef, int M, int C, int rpb) {
    typedef rn_vec<D> VD;
    enum { V = VD::V };
    const int TX = blockDim.x, TY = blockDim.y;
    const int c0 = (blockIdx.x * TX + threadIdx.x) * V;
    if (c0 >= C) return;
    const int r0 = blockIdx.y * rpb, r1 = (int)min((long long)M, (long long)r0 + rpb);
    float m[V], rs[V], gr[V], ca[V], cb[V], pg[V], pb[V];
#pragma unroll
    for (int k = 0; k < V; k++) {
        const int ch = c0 + k;
        m[k] = mean[ch], rs[k] = rstd[ch], gr[k] = gamma[ch] * rs[k], ca[k] = coef[ch], cb[k] = coef[C + ch];
        if (RM) pg[k] = gamma[ch], pb[k] = beta[ch];
    }
    int r = r0 + threadIdx.y;
    for (; r + (BN_UNROLL_BWD - 1) * TY < r1; r += BN_UNROLL_BWD * TY) { // the loads first (elementwise)
        float g[BN_UNROLL_BWD][V], x[BN_UNROLL_BWD][V];
#pragma unroll
        for (int u = 0; u < BN_UNROLL_BWD; u++) {
            VD::ld(g[u], dy + (size_t)(r + u * TY) * C + c0);
            VD::ld(x[u], in + (size_t)(r + u * TY) * C + c0);
        }
#pragma unroll
        for (int u = 0; u < BN_UNROLL_BWD; u++) {
            bn_dx_row<D, V, RM>(x[u], g[u], m, rs, gr, ca, cb, pg, pb);
            VD::st(din + (size_t)(r + u * TY) * C + c0, x[u]);
        }
    }
    for (; r < r1; r += TY) {
        const size_t j = (size_t)r * C + c0;
        float g[V], x[V];
        VD::ld(g, dy + j);
        VD::ld(x, in + j);
        bn_dx_row<D, V, RM>(x, g, m, rs, gr, ca, cb, pg, pb);
        VD::st(din + j, x);
    }
}

// The statistics kernels' block for V-channel threads: TX across min(C / V, 32) vectors, TY = 256 / TX lanes
static void bn_vec_block(int C, int V, dim3 *block, unsigned *gx) {
    int tx = C / V;
    if (tx > 32) tx = 32;
    *block = dim3((unsigned)tx, (unsigned)(BN_VT / tx));
    *gx = (unsigned)((C / V + tx - 1) / tx);
}
// the reduction kernels' rows per group at least, for their block
static int bn_red_rows(dim3 block) {
    const int r = BN_RED_LANE_ROWS * (int)block.y;
    return r > BN_RPB ? r : BN_RPB;
}

extern "C" mo_status bn_own_forward_cuda(mo_ctx *c, mo_dtype dt, void *out, float *mean, float *rstd, float *run_mean,
                                         float *run_var, const void *in, const float *gamma, const float *beta,
                                         const void *res, int M, int C, float momentum, int relu) {
    const int vec = rn_vec_ok(mo_dtype_size(dt), C, in, out, res ? res : out, out);
    dim3 vblock;
    unsigned gx = 0;
    if (vec) bn_vec_block(C, 16 / (int)mo_dtype_size(dt), &vblock, &gx);
    int rpb = 0, G = 0;
    MO_TRY(bn_groups(c, M, C, vec ? bn_red_rows(vblock) : BN_RPB, &rpb, &G));
    float2 *part = (float2 *)c->gemm_ws;
    const dim3 vgrid(gx, (unsigned)G);
    if (vec) {
#define L(T) bn_stats_vec_kernel<T><<<vgrid, vblock, 0, S(c)>>>(part, (const T::S *)in, M, C, rpb)
        DISPATCH(dt, L);
#undef L
    } else {
        const dim3 grid((unsigned)((C + BN_TX - 1) / BN_TX), (unsigned)G), block(BN_TX, BN_TY);
#define L(T) bn_stats_kernel<T><<<grid, block, 0, S(c)>>>(part, (const T::S *)in, M, C, rpb)
        DISPATCH(dt, L);
#undef L
    }
    CUDA_CHECK_LAUNCH();
    bn_stats_final_kernel<<<(unsigned)C, bn_final_threads(G), 0, S(c)>>>(mean, rstd, run_mean, run_var, part, G, M, C, rpb, momentum);
    CUDA_CHECK_LAUNCH();
    return bn_own_normalize_cuda(c, dt, out, in, res, mean, rstd, gamma, beta, M, C, relu);
}

// The normalize pass (the forward's last, or alone: mo_batchnorm_normalize); each element's in and res are
// read by the thread that writes its out, so out may be res.
extern "C" mo_status bn_own_normalize_cuda(mo_ctx *c, mo_dtype dt, void *out, const void *in, const void *res,
                                           const float *mean, const float *rstd, const float *gamma,
                                           const float *beta, int M, int C, int relu) {
    const size_t n = (size_t)M * C;
    if (rn_vec_ok(mo_dtype_size(dt), C, in, out, res ? res : out, out)) {
        int rpb = 0, G = 0;
        MO_TRY(bn_groups(c, M, C, BN_RPB, &rpb, &G));
        dim3 vblock;
        unsigned gx = 0;
        bn_vec_block(C, 16 / (int)mo_dtype_size(dt), &vblock, &gx);
        const dim3 vgrid(gx, (unsigned)G);
#define L(T) bn_norm_vec_kernel<T><<<vgrid, vblock, 0, S(c)>>>((T::S *)out, (const T::S *)in, (const T::S *)res, mean, rstd, gamma, beta, M, C, rpb, relu)
        DISPATCH(dt, L);
#undef L
    } else {
#define L(T) bn_norm_kernel<T><<<mx_grid(n), MX_THREADS, 0, S(c)>>>((T::S *)out, (const T::S *)in, (const T::S *)res, mean, rstd, gamma, beta, n, C, relu)
        DISPATCH(dt, L);
#undef L
    }
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

// part (G, C): (sum dy, sum dy xhat) over the group's rows; beta != NULL: dy masked by the recomputed
// ReLU output (bn_keep with gamma, beta)
template <class D>
__global__ void bn_bwd_sums_kernel(float2 *part, const typename D::S *dy, const typename D::S *in, const float *mean,
                                   const float *rstd, const float *gamma, const float *beta, int M, int C, int rpb) {
    __shared__ float sa[BN_TY][BN_TX], sb[BN_TY][BN_TX];
    const int ch = blockIdx.x * BN_TX + threadIdx.x;
    const int r0 = blockIdx.y * rpb, r1 = (int)min((long long)M, (long long)r0 + rpb);
    float a = 0.0f, b = 0.0f;
    if (ch < C) {
        const float m = mean[ch], r = rstd[ch], pg = beta ? gamma[ch] : 0.0f, pb = beta ? beta[ch] : 0.0f;
        for (int row = r0 + threadIdx.y; row < r1; row += BN_TY) {
            const size_t j = (size_t)row * C + ch;
            const float x = D::to_f(in[j]), xh = (x - m) * r;
            const float g = !beta || bn_keep<D>(x, m, r, pg, pb) ? D::to_f(dy[j]) : 0.0f;
            a += g;
            b += g * xh;
        }
    }
    sa[threadIdx.y][threadIdx.x] = a, sb[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y != 0 || ch >= C) return;
    for (int k = 1; k < BN_TY; k++) a += sa[k][threadIdx.x], b += sb[k][threadIdx.x];
    part[(size_t)blockIdx.y * C + ch] = make_float2(a, b);
}

// Per channel (a block, as bn_stats_final_kernel): dbeta += sum dy, dgamma += sum dy xhat; coef (2, C) = the
// two sums / M
__global__ void __launch_bounds__(BN_FT) bn_bwd_final_kernel(float *dgamma, float *dbeta, float *coef, const float2 *part,
                                                            int G, int M, int C) {
    const int ch = blockIdx.x, T = blockDim.x;
    double a = 0.0, b = 0.0;
    int g = threadIdx.x;
    for (; g + T * (BN_UNROLL_FINAL - 1) < G; g += T * BN_UNROLL_FINAL) { // loads first, sums in order
        float2 p[BN_UNROLL_FINAL];
#pragma unroll
        for (int u = 0; u < BN_UNROLL_FINAL; u++) p[u] = part[(size_t)(g + T * u) * C + ch];
#pragma unroll
        for (int u = 0; u < BN_UNROLL_FINAL; u++) a += p[u].x, b += p[u].y;
    }
    for (; g < G; g += T) {
        const float2 p = part[(size_t)g * C + ch];
        a += p.x, b += p.y;
    }
    bn_block_sum2(a, b);
    if (threadIdx.x != 0) return;
    dbeta[ch] += (float)a;
    dgamma[ch] += (float)b;
    coef[ch] = (float)(a / M);
    coef[C + ch] = (float)(b / M);
}

// beta != NULL: dy masked as bn_bwd_sums_kernel's
template <class D>
__global__ void bn_dx_kernel(typename D::S *din, const typename D::S *dy, const typename D::S *in, const float *gamma,
                             const float *beta, const float *mean, const float *rstd, const float *coef, size_t n, int C) {
    GRID_STRIDE(i, n) {
        const int ch = BN_CH(i, n, C);
        const float x = D::to_f(in[i]), r = rstd[ch], xh = (x - mean[ch]) * r;
        const float g = !beta || bn_keep<D>(x, mean[ch], r, gamma[ch], beta[ch]) ? D::to_f(dy[i]) : 0.0f;
        din[i] = D::from_f(gamma[ch] * r * (g - coef[ch] - xh * coef[C + ch]));
    }
}

extern "C" mo_status bn_own_backward_cuda(mo_ctx *c, mo_dtype dt, void *din, float *dgamma, float *dbeta, void *dout,
                                          const void *mask, const void *in, const float *gamma, const float *beta,
                                          const float *mean, const float *rstd, int M, int C) {
    if (mask && beta) return MO_FAIL(MO_ERR_INTERNAL, "batchnorm backward: a mask and a remask at once");
    const size_t n = (size_t)M * C;
    const int vec = rn_vec_ok(mo_dtype_size(dt), C, din, dout, in, mask ? mask : in);
    dim3 vblock;
    unsigned gx = 0;
    if (vec) bn_vec_block(C, 16 / (int)mo_dtype_size(dt), &vblock, &gx);
    int rpb = 0, G = 0, erpb = 0, eG = 0; // the sums' groups; the input gradient's (elementwise) groups
    MO_TRY(bn_groups(c, M, C, vec ? bn_red_rows(vblock) : BN_RPB, &rpb, &G));
    MO_TRY(bn_groups(c, M, C, BN_RPB, &erpb, &eG));
    float2 *part = (float2 *)c->gemm_ws;
    float *coef = (float *)(part + (size_t)G * C);
    const dim3 vgrid(gx, (unsigned)G), egrid(gx, (unsigned)eG);
    if (vec) {
#define L(T) bn_bwd_sums_vec_kernel<T, RM><<<vgrid, vblock, 0, S(c)>>>(part, (T::S *)dout, (const T::S *)mask, (const T::S *)in, mean, rstd, gamma, beta, M, C, rpb)
        DISPATCH_RM(beta != NULL, dt, L);
#undef L
    } else {
        if (mask) MO_TRY(relu_backward_cuda(c, dt, dout, dout, mask, n)); // the mask in place, then unmasked
        const dim3 grid((unsigned)((C + BN_TX - 1) / BN_TX), (unsigned)G), block(BN_TX, BN_TY);
#define L(T) bn_bwd_sums_kernel<T><<<grid, block, 0, S(c)>>>(part, (const T::S *)dout, (const T::S *)in, mean, rstd, gamma, beta, M, C, rpb)
        DISPATCH(dt, L);
#undef L
    }
    CUDA_CHECK_LAUNCH();
    bn_bwd_final_kernel<<<(unsigned)C, bn_final_threads(G), 0, S(c)>>>(dgamma, dbeta, coef, part, G, M, C);
    CUDA_CHECK_LAUNCH();
    if (vec) {
#define L(T) bn_dx_vec_kernel<T, RM><<<egrid, vblock, 0, S(c)>>>((T::S *)din, (const T::S *)dout, (const T::S *)in, gamma, beta, mean, rstd, coef, M, C, erpb)
        DISPATCH_RM(beta != NULL, dt, L);
#undef L
    } else {
#define L(T) bn_dx_kernel<T><<<mx_grid(n), MX_THREADS, 0, S(c)>>>((T::S *)din, (const T::S *)dout, (const T::S *)in, gamma, beta, mean, rstd, coef, n, C)
        DISPATCH(dt, L);
#undef L
    }
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}
