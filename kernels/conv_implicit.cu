// The fp32 convolution forward (no TF32) as an implicit GEMM on CUDA cores: y (M = N P Q, K) = A (M, R S C)
// @ B (R S C, K), A the column matrix of x (N, H, W, C) read straight from x (never written out, unlike the
// im2col path in conv_cuda.c), B the filter w (K, R, S, C) transposed into the workspace's head first.
//
// Why: the 3x3 fp32 forwards ran at 15-21 TFLOP/s as im2col + SGEMM (gpu_resnet_ops timing, batch 128,
// H100, session 21: layer1 1.94 ms for 29.6 GFLOP, of which writing and reading the 925 MB column matrix
// is a third) and at about 10 on cuDNN, while they are most of the fp32 step's recompute under
// checkpointing. The reference is the cpu backend's direct convolution (conv.c); gpu_resnet_ops checks
// this kernel against it at ResNet-50's shapes.
//
// The kernel: a block computes a BM x BN tile of y (128 x 128 where K % 128 == 0, else 128 x 64; the tests
// time both where K takes them); the reduction runs in chunks of BK = 8 taps of one (r, s)
// (C % 8 == 0), double-buffered in shared memory with the next chunk's loads in registers while the
// current one is multiplied; each thread walks the chunks' (r, s, c0) by increments, not divisions. Each
// thread holds 8 x 8 outputs: rows ty*4 .. +3 and BM/2 + ty*4 .. +3, columns tx*4 .. +3 and BN/2 + tx*4 .. +3
// (so the float4 reads of shared memory are conflict-free). Every output sums its R S C products in tap
// order (r, s, c) with one fma chain whatever the tiles: deterministic, the same bits every run
// (checkpointing's recompute equals the forward).
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_check.h"
#include "resnet_ops_impl.h"

#define IG_BK 8
#define IG_PAD 4 // As rows padded: the transposed stores of the two channel halves fall in other banks

// wt (RSC, K) = w (K, RSC): 32 x 32 tiles through shared memory
__global__ void implicit_transpose_kernel(float *wt, const float *w, int K, int RSC) {
    __shared__ float t[32][33];
    const int k0 = blockIdx.y * 32, j0 = blockIdx.x * 32;
    for (int i = threadIdx.y; i < 32; i += 8) {
        const int k = k0 + i, j = j0 + threadIdx.x;
        if (k < K && j < RSC) t[i][threadIdx.x] = w[(size_t)k * RSC + j];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += 8) {
        const int j = j0 + i, k = k0 + threadIdx.x;
        if (k < K && j < RSC) wt[(size_t)j * K + k] = t[threadIdx.x][i];
    }
}

// y (M, K): the BM x BN tile at rows m0, channels n0; T = BM BN / 64 threads (8 x 8 outputs each). Minimum
// blocks an SM: 3 for 128 threads (at most 170 registers), 2 for 256 (128). (256 x 64 tiles, tried in
// session 24, spilled at 128 registers and were slower at every ResNet-50 shape: 0.844 against 0.764 ms
// at layer1 on an H100.)
template <int BM, int BN>
__global__ void __launch_bounds__(BM * BN / 64, BM * BN == 128 * 64 ? 3 : 2)
    conv_implicit_fwd_kernel(float *__restrict__ y, const float *__restrict__ x, const float *__restrict__ wt, int M,
                             int H, int W, int C, int K, int S, int st, int pad, int P, int Q, int nchunks) {
    constexpr int T = BM * BN / 64, AL = BM * IG_BK / 4 / T; // float4 loads of A a thread (1 or 2)
    static_assert(AL >= 1 && AL * T == BM * IG_BK / 4 && 2 * BN <= T, "one float4 of A per thread and load");
    __shared__ __align__(16) float As[2][IG_BK][BM + IG_PAD];
    __shared__ __align__(16) float Bs[2][IG_BK][BN];
    const int tid = threadIdx.x, tx = tid % (BN / 8), ty = tid / (BN / 8);
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    // this thread's A loads: row (an output position) and which half of the chunk's 8 channels
    // (load i: row tid / 2 + i T / 2, channels (tid % 2) * 4 .. +3 of the chunk's 8). a_pix: the pixel of
    // x under the row's tap (0, 0) (n H + h0) W + w0 (outside its image for a padded tap: only read in
    // bounds; N H W < 2^31, conv_implicit_takes); a_h0 -2^30 for a row past M, so that no tap is in bounds.
    const int a_row = tid / 2, a_cv = tid % 2;
    int a_pix[AL], a_h0[AL], a_w0[AL];
#pragma unroll
    for (int i = 0; i < AL; i++) {
        const int m = m0 + a_row + i * (T / 2);
        const int q = m % Q, p = (m / Q) % P, n = m / (P * Q);
        a_h0[i] = m < M ? p * st - pad : -(1 << 30), a_w0[i] = q * st - pad;
        a_pix[i] = m < M ? (n * H + p * st - pad) * W + a_w0[i] : 0;
    }
    x += a_cv * 4;
    const int b_k = tid / (BN / 4), b_c = (tid % (BN / 4)) * 4; // this thread's B load (threads < 2 BN)
    // the next chunk's tap (r, s), its first channel c0 and its row of wt: advanced by load(), in the
    // chunks' order (kc = 0, 1, ...), instead of divisions a chunk
    int cr = 0, cs = 0, cc = 0, kk0 = 0;
    float4 ra[AL], rb = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    auto load = [&]() {
        const int off = cr * W + cs; // pixels
#pragma unroll
        for (int i = 0; i < AL; i++) {
            const int h = a_h0[i] + cr, w = a_w0[i] + cs;
            ra[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if ((unsigned)h < (unsigned)H && (unsigned)w < (unsigned)W)
                ra[i] = *(const float4 *)(x + (long long)(a_pix[i] + off) * C + cc);
        }
        if (tid < 2 * BN) rb = *(const float4 *)(wt + (size_t)(kk0 + b_k) * K + n0 + b_c);
        kk0 += IG_BK;
        cc += IG_BK;
        if (cc == C) {
            cc = 0;
            if (++cs == S) cs = 0, cr++;
        }
    };
    auto store = [&](int buf) {
#pragma unroll
        for (int i = 0; i < AL; i++) {
            const int row = a_row + i * (T / 2);
            As[buf][a_cv * 4 + 0][row] = ra[i].x;
            As[buf][a_cv * 4 + 1][row] = ra[i].y;
            As[buf][a_cv * 4 + 2][row] = ra[i].z;
            As[buf][a_cv * 4 + 3][row] = ra[i].w;
        }
        if (tid < 2 * BN) *(float4 *)&Bs[buf][b_k][b_c] = rb;
    };
    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = 0.0f;
    load();
    store(0);
    __syncthreads();
    for (int kc = 0; kc < nchunks; kc++) {
        const int buf = kc & 1;
        if (kc + 1 < nchunks) load();
#pragma unroll
        for (int kk = 0; kk < IG_BK; kk++) {
            const float4 a0 = *(const float4 *)&As[buf][kk][ty * 4], a1 = *(const float4 *)&As[buf][kk][BM / 2 + ty * 4];
            const float4 b0 = *(const float4 *)&Bs[buf][kk][tx * 4], b1 = *(const float4 *)&Bs[buf][kk][BN / 2 + tx * 4];
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int j = 0; j < 8; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        if (kc + 1 < nchunks) store(buf ^ 1);
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int m = m0 + (i < 4 ? ty * 4 + i : BM / 2 + ty * 4 + i - 4);
        if (m >= M) continue;
        float *row = y + (size_t)m * K + n0;
        *(float4 *)(row + tx * 4) = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
        *(float4 *)(row + BN / 2 + tx * 4) = make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
    }
}

extern "C" size_t conv_implicit_ws_bytes(const mo_conv_shape *s) {
    return ((size_t)s->R * s->S * s->C * s->K * sizeof(float) + 255) & ~(size_t)255;
}

extern "C" int conv_implicit_takes(const mo_conv_shape *s) {
    const long long M = (long long)s->N * s->P * s->Q;
    return s->C % IG_BK == 0 && s->K % 64 == 0 && M + 256 < INT32_MAX && (long long)s->R * s->S * s->C < INT32_MAX &&
           (long long)s->N * s->H * s->W + 2LL * (s->H + s->W) * (s->pad + 1) < INT32_MAX; // the pixel indices
}

extern "C" mo_status conv_implicit_forward_cuda(mo_ctx *c, float *y, const float *x, const float *w,
                                                const mo_conv_shape *s, int *done) {
    *done = 0;
    const size_t need = conv_implicit_ws_bytes(s);
    if (!conv_implicit_takes(s) || need > c->gemm_ws_bytes || ((uintptr_t)x | (uintptr_t)y) % 16) return MO_OK;
    const int RSC = s->R * s->S * s->C, M = s->N * s->P * s->Q;
    float *wt = (float *)c->gemm_ws; // (RSC, K)
    const cudaStream_t st = (cudaStream_t)c->stream;
    implicit_transpose_kernel<<<dim3((RSC + 31) / 32, (s->K + 31) / 32), dim3(32, 8), 0, st>>>(wt, w, s->K, RSC);
    CUDA_CHECK_LAUNCH();
    // the tiles: ctx->conv_implicit_tile (tests), else 128 x 128 where K takes them, else 128 x 64
    int tile = c->conv_implicit_tile;
    if (tile == MO_CONV_TILE_128X128 && s->K % 128) tile = MO_CONV_TILE_DEFAULT;
    if (tile == MO_CONV_TILE_DEFAULT) tile = s->K % 128 == 0 ? MO_CONV_TILE_128X128 : MO_CONV_TILE_128X64;
    const int bm = 128, bn = tile == MO_CONV_TILE_128X128 ? 128 : 64;
    const dim3 grid((M + bm - 1) / bm, s->K / bn);
#define IG_LAUNCH(BM_, BN_)                                                                                          \
    conv_implicit_fwd_kernel<BM_, BN_><<<grid, BM_ * BN_ / 64, 0, st>>>(y, x, wt, M, s->H, s->W, s->C, s->K, s->S,  \
                                                                       s->stride, s->pad, s->P, s->Q, RSC / IG_BK)
    if (tile == MO_CONV_TILE_128X128) IG_LAUNCH(128, 128);
    else IG_LAUNCH(128, 64);
#undef IG_LAUNCH
    CUDA_CHECK_LAUNCH();
    *done = 1;
    return MO_OK;
}
