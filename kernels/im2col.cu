// im2col and its col2im gather for the fp32 convolutions that conv_cuda.c runs as cuBLASLt GEMMs (the
// column matrix: im2col.c, whose plain-C references these kernels follow). NHWC, channel fastest, so
// consecutive threads touch consecutive addresses on both sides. A thread per 4 channels (float4) when C
// is a multiple of 4 and the pointers are 16-byte aligned, a thread per channel otherwise.
//   im2col: a copy (zeros in the padding): the references' bits.
//   col2im: a gather: each din element sums its taps' entries in the reference's order (r, then s), so
//   the result is deterministic (no atomics) and equals the reference bit for bit (nvcc's fast math
//   flushes subnormal sums to zero, which the reference does not: the only way the two could differ).
// Indices are int: a launch's work (rows * R*S*C, n*H*W*C) is checked to fit, every tensor's element
// count fits an int (mo_conv_shape_check); the grid-stride step is unsigned (work + a grid's threads fits
// 32 bits), the offsets into x and dcol size_t.
#include <cuda_runtime.h>
#include <limits.h>
#include <stdint.h>

#include "cuda_check.h"
#include "mixed_dev.cuh"
#include "resnet_ops_impl.h"

static cudaStream_t stream_of(mo_ctx *c) { return (cudaStream_t)c->stream; }

// T: float (a channel a thread) or float4 (four)
__device__ __forceinline__ void zero(float &v) { v = 0.0f; }
__device__ __forceinline__ void zero(float4 &v) { v = make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
__device__ __forceinline__ void add(float &a, float b) { a += b; }
__device__ __forceinline__ void add(float4 &a, float4 b) { a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w; }

// col (rows, R, S, CV) = rows m0 .. m0 + rows - 1 of x (N, H, W, CV)'s column matrix; CV = C / (T's floats);
// a thread per element of col, in col's order
template <class T>
__global__ void im2col_kernel(T *col, const T *x, int m0, int work, int H, int W, int CV, int R, int S, int st,
                              int pad, int P, int Q) {
    for (unsigned u = blockIdx.x * blockDim.x + threadIdx.x; u < (unsigned)work; u += gridDim.x * blockDim.x) {
        const int i = (int)u, c = i % CV;
        int t = i / CV;
        const int s = t % S;
        t /= S;
        const int r = t % R;
        const int m = m0 + t / R; // the output position (n, p, q)
        const int q = m % Q, p = (m / Q) % P, n = m / (P * Q);
        const int h = p * st - pad + r, w = q * st - pad + s;
        T v;
        zero(v);
        if (h >= 0 && h < H && w >= 0 && w < W) v = x[(((size_t)n * H + h) * W + w) * CV + c];
        col[i] = v;
    }
}

// din (n, H, W, CV) = col2im of dcol (n P Q, R, S, CV): a thread per element of din, its taps summed r then s
template <class T>
__global__ void col2im_kernel(T *din, const T *dcol, int work, int H, int W, int CV, int R, int S, int st, int pad,
                              int P, int Q) {
    const size_t rsc = (size_t)R * S * CV;
    for (unsigned u = blockIdx.x * blockDim.x + threadIdx.x; u < (unsigned)work; u += gridDim.x * blockDim.x) {
        const int i = (int)u, c = i % CV;
        int t = i / CV;
        const int w = t % W;
        t /= W;
        const int h = t % H;
        const int b = t / H;
        T acc;
        zero(acc);
        for (int r = 0; r < R; r++) {
            const int ph = h + pad - r;
            if (ph < 0 || ph % st != 0 || ph / st >= P) continue;
            for (int s = 0; s < S; s++) {
                const int qw = w + pad - s;
                if (qw < 0 || qw % st != 0 || qw / st >= Q) continue;
                const size_t m = ((size_t)b * P + ph / st) * Q + qw / st;
                add(acc, dcol[m * rsc + ((size_t)r * S + s) * CV + c]);
            }
        }
        din[i] = acc;
    }
}

static int aligned16(const void *a, const void *b) { return (((uintptr_t)a | (uintptr_t)b) & 15u) == 0; }

extern "C" mo_status conv_im2col_cuda(mo_ctx *c, float *col, const float *x, const mo_conv_shape *s, int m0,
                                      int rows) {
    const size_t work = (size_t)rows * s->R * s->S * s->C;
    if (rows < 0 || m0 < 0 || (size_t)m0 + rows > (size_t)s->N * s->P * s->Q || work > INT_MAX)
        return MO_FAIL(MO_ERR_INVALID, "conv_im2col: rows %d from %d of %d x %d x %d (%zu elements)", rows, m0, s->N,
                       s->P, s->Q, work);
    if (work == 0) return MO_OK;
    if (s->C % 4 == 0 && aligned16(col, x)) {
        const int wv = (int)(work / 4);
        im2col_kernel<float4><<<mx_grid(wv), MX_THREADS, 0, stream_of(c)>>>(
            (float4 *)col, (const float4 *)x, m0, wv, s->H, s->W, s->C / 4, s->R, s->S, s->stride, s->pad, s->P, s->Q);
    } else {
        im2col_kernel<float><<<mx_grid(work), MX_THREADS, 0, stream_of(c)>>>(col, x, m0, (int)work, s->H, s->W, s->C,
                                                                            s->R, s->S, s->stride, s->pad, s->P, s->Q);
    }
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

extern "C" mo_status conv_col2im_cuda(mo_ctx *c, float *din, const float *dcol, const mo_conv_shape *s, int n) {
    const size_t work = (size_t)n * s->H * s->W * s->C;
    if (n < 0 || n > s->N || work > INT_MAX)
        return MO_FAIL(MO_ERR_INVALID, "conv_col2im: %d images of %d (%zu elements)", n, s->N, work);
    if (work == 0) return MO_OK;
    if (s->C % 4 == 0 && aligned16(din, dcol)) {
        const int wv = (int)(work / 4);
        col2im_kernel<float4><<<mx_grid(wv), MX_THREADS, 0, stream_of(c)>>>(
            (float4 *)din, (const float4 *)dcol, wv, s->H, s->W, s->C / 4, s->R, s->S, s->stride, s->pad, s->P, s->Q);
    } else {
        col2im_kernel<float><<<mx_grid(work), MX_THREADS, 0, stream_of(c)>>>(din, dcol, (int)work, s->H, s->W, s->C,
                                                                            s->R, s->S, s->stride, s->pad, s->P, s->Q);
    }
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

// acc (n) = (add ? acc : 0) + part[0] + part[1] + ... + part[count - 1], each part (n) fp32, summed in that
// order (the split weight gradient's slabs, conv_cuda.c col_wgrad_slabs): a thread per element, the
// partials read coalesced across threads. Deterministic: a fixed order, no atomics.
__global__ void sum_partials_kernel(float *acc, const float *part, int count, int n, int add) {
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < (unsigned)n; i += gridDim.x * blockDim.x) {
        float s = add ? acc[i] : 0.0f;
        for (int j = 0; j < count; j++) s += part[(size_t)j * n + i];
        acc[i] = s;
    }
}

extern "C" mo_status conv_sum_partials_cuda(mo_ctx *c, float *acc, const float *part, int count, size_t n, int add) {
    if (n > INT_MAX || count < 0) return MO_FAIL(MO_ERR_INVALID, "conv_sum_partials: %d partials of %zu", count, n);
    if (n == 0) return MO_OK;
    sum_partials_kernel<<<mx_grid(n), MX_THREADS, 0, stream_of(c)>>>(acc, part, count, (int)n, add);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}
