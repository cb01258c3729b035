// The suite's own batch norm kernels (batchnorm.h), NHWC: x (M, C), channel fastest.
// Why not cuDNN's: on the H200 at c995ff5 (gpu_resnet_ops timing, ResNet-50 layer1, M 401408 rows of
// C 64) cudnnBatchNormalizationForwardTraining took 32.5 ms and the backward 13.9 ms on the (M, C, 1, 1)
// NHWC descriptor, about 3 GB/s, which made the ResNet-50 fp32 step 3.1 s; its faster NHWC mode
// (CUDNN_BATCHNORM_SPATIAL_PERSISTENT) uses atomics, and a checkpointed step must give the same bits as
// an uncheckpointed one. MEMOPT_BN=cudnn still runs cuDNN's (batchnorm_cuda.c).
// Deterministic: every sum is in a fixed order, no atomics.
//   forward:  (1) per (row group g, channel) Welford mean and M2 of the group's rows (a block: 32
//                 channels x 8 row lanes, lanes merged in order), (2) per channel the groups merged by
//                 Chan's formula in double (a warp per channel, lanes in order, then a shuffle tree), the
//                 mean, rstd and running statistics, (3) out = gamma (x - mean) rstd + beta, ReLU.
//   backward: (1) per (g, channel) sums of dy and dy xhat, (2) per channel in double: dbeta += sum dy,
//                 dgamma += sum dy xhat, and the two means, (3) dx = gamma rstd (dy - mean dy - xhat
//                 mean(dy xhat)).
// The partial sums live in the context's library workspace (ctx->gemm_ws, 32 MiB, already counted as
// workspace on every backend), so the dry backend's peak needs nothing new; the rows per group grow
// until the partials fit it.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "batchnorm.h"
#include "cuda_check.h"
#include "resnet_dev.cuh"
#include "resnet_ops_impl.h"

#define BN_TX 32   // channels per block
#define BN_TY 8    // row lanes per block
#define BN_RPB 256 // rows per group at least

// i's channel: 32-bit arithmetic when the tensor allows (the branch is the same for every thread)
#define BN_CH(i, n, C) ((n) <= 0xffffffffu ? (int)((unsigned)(i) % (unsigned)(C)) : (int)((i) % (size_t)(C)))

static cudaStream_t S(mo_ctx *c) { return (cudaStream_t)c->stream; }

// Rows per group such that the (G, C) float2 partials and 2C floats fit the workspace, and G fits gridDim.y.
static mo_status bn_groups(const mo_ctx *c, int M, int C, int *rpb, int *G) {
    long long r = BN_RPB;
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

// Chan's merge of (n, mean, m2) with (nb, mb, m2b), in double
__device__ __forceinline__ void chan_merge(double &n, double &mean, double &m2, double nb, double mb, double m2b) {
    if (nb == 0.0) return;
    const double nab = n + nb, d = mb - mean;
    mean += d * (nb / nab);
    m2 += m2b + d * d * (n * nb / nab);
    n = nab;
}

// One warp per channel (blockIdx.x): lane l merges groups l, l+32, ... in order, then a shuffle tree.
__global__ void bn_stats_final_kernel(float *mean, float *rstd, float *run_mean, float *run_var, const float2 *part,
                                      int G, int M, int C, int rpb, float momentum) {
    const int ch = blockIdx.x, l = threadIdx.x;
    double n = 0.0, mu = 0.0, m2 = 0.0;
    for (int g = l; g < G; g += 32) {
        const float2 p = part[(size_t)g * C + ch];
        const int r0 = g * rpb, r1 = (int)min((long long)M, (long long)r0 + rpb);
        chan_merge(n, mu, m2, (double)(r1 - r0), p.x, p.y);
    }
    for (int off = 1; off < 32; off *= 2) { // lane l takes lane l+off's; lane 0 ends with all, in one order
        const double nb = __shfl_down_sync(0xffffffffu, n, off), mb = __shfl_down_sync(0xffffffffu, mu, off),
                     m2b = __shfl_down_sync(0xffffffffu, m2, off);
        if (l + off < 32) chan_merge(n, mu, m2, nb, mb, m2b);
    }
    if (l != 0) return;
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

// out (M, C) = gamma ((x - mean) rstd) + beta, then ReLU (NaN kept, as torch.relu)
template <class D>
__global__ void bn_norm_kernel(typename D::S *out, const typename D::S *in, const float *mean, const float *rstd,
                               const float *gamma, const float *beta, size_t n, int C, int relu) {
    GRID_STRIDE(i, n) {
        const int ch = BN_CH(i, n, C);
        float y = gamma[ch] * ((D::to_f(in[i]) - mean[ch]) * rstd[ch]) + beta[ch];
        if (relu && y <= 0.0f) y = 0.0f;
        out[i] = D::from_f(y);
    }
}

extern "C" mo_status bn_own_forward_cuda(mo_ctx *c, mo_dtype dt, void *out, float *mean, float *rstd, float *run_mean,
                                         float *run_var, const void *in, const float *gamma, const float *beta, int M,
                                         int C, float momentum, int relu) {
    int rpb = 0, G = 0;
    MO_TRY(bn_groups(c, M, C, &rpb, &G));
    float2 *part = (float2 *)c->gemm_ws;
    const dim3 grid((unsigned)((C + BN_TX - 1) / BN_TX), (unsigned)G), block(BN_TX, BN_TY);
    const size_t n = (size_t)M * C;
#define L(T) bn_stats_kernel<T><<<grid, block, 0, S(c)>>>(part, (const T::S *)in, M, C, rpb)
    DISPATCH(dt, L);
#undef L
    CUDA_CHECK_LAUNCH();
    bn_stats_final_kernel<<<(unsigned)C, 32, 0, S(c)>>>(mean, rstd, run_mean, run_var, part, G, M, C, rpb, momentum);
    CUDA_CHECK_LAUNCH();
#define L(T) bn_norm_kernel<T><<<mx_grid(n), MX_THREADS, 0, S(c)>>>((T::S *)out, (const T::S *)in, mean, rstd, gamma, beta, n, C, relu)
    DISPATCH(dt, L);
#undef L
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

// part (G, C): (sum dy, sum dy xhat) over the group's rows
template <class D>
__global__ void bn_bwd_sums_kernel(float2 *part, const typename D::S *dy, const typename D::S *in, const float *mean,
                                   const float *rstd, int M, int C, int rpb) {
    __shared__ float sa[BN_TY][BN_TX], sb[BN_TY][BN_TX];
    const int ch = blockIdx.x * BN_TX + threadIdx.x;
    const int r0 = blockIdx.y * rpb, r1 = (int)min((long long)M, (long long)r0 + rpb);
    float a = 0.0f, b = 0.0f;
    if (ch < C) {
        const float m = mean[ch], r = rstd[ch];
        for (int row = r0 + threadIdx.y; row < r1; row += BN_TY) {
            const size_t j = (size_t)row * C + ch;
            const float g = D::to_f(dy[j]), xh = (D::to_f(in[j]) - m) * r;
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

// One warp per channel: dbeta += sum dy, dgamma += sum dy xhat; coef (2, C) = the two sums / M
__global__ void bn_bwd_final_kernel(float *dgamma, float *dbeta, float *coef, const float2 *part, int G, int M, int C) {
    const int ch = blockIdx.x, l = threadIdx.x;
    double a = 0.0, b = 0.0;
    for (int g = l; g < G; g += 32) {
        const float2 p = part[(size_t)g * C + ch];
        a += p.x, b += p.y;
    }
    for (int off = 16; off > 0; off /= 2) {
        a += __shfl_down_sync(0xffffffffu, a, off);
        b += __shfl_down_sync(0xffffffffu, b, off);
    }
    if (l != 0) return;
    dbeta[ch] += (float)a;
    dgamma[ch] += (float)b;
    coef[ch] = (float)(a / M);
    coef[C + ch] = (float)(b / M);
}

template <class D>
__global__ void bn_dx_kernel(typename D::S *din, const typename D::S *dy, const typename D::S *in, const float *gamma,
                             const float *mean, const float *rstd, const float *coef, size_t n, int C) {
    GRID_STRIDE(i, n) {
        const int ch = BN_CH(i, n, C);
        const float r = rstd[ch], xh = (D::to_f(in[i]) - mean[ch]) * r;
        din[i] = D::from_f(gamma[ch] * r * (D::to_f(dy[i]) - coef[ch] - xh * coef[C + ch]));
    }
}

extern "C" mo_status bn_own_backward_cuda(mo_ctx *c, mo_dtype dt, void *din, float *dgamma, float *dbeta,
                                          const void *dout, const void *in, const float *gamma, const float *mean,
                                          const float *rstd, int M, int C) {
    int rpb = 0, G = 0;
    MO_TRY(bn_groups(c, M, C, &rpb, &G));
    float2 *part = (float2 *)c->gemm_ws;
    float *coef = (float *)(part + (size_t)G * C);
    const dim3 grid((unsigned)((C + BN_TX - 1) / BN_TX), (unsigned)G), block(BN_TX, BN_TY);
    const size_t n = (size_t)M * C;
#define L(T) bn_bwd_sums_kernel<T><<<grid, block, 0, S(c)>>>(part, (const T::S *)dout, (const T::S *)in, mean, rstd, M, C, rpb)
    DISPATCH(dt, L);
#undef L
    CUDA_CHECK_LAUNCH();
    bn_bwd_final_kernel<<<(unsigned)C, 32, 0, S(c)>>>(dgamma, dbeta, coef, part, G, M, C);
    CUDA_CHECK_LAUNCH();
#define L(T) bn_dx_kernel<T><<<mx_grid(n), MX_THREADS, 0, S(c)>>>((T::S *)din, (const T::S *)dout, (const T::S *)in, gamma, mean, rstd, coef, n, C)
    DISPATCH(dt, L);
#undef L
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}
