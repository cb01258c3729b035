// The ResNet's own elementwise and pooling kernels (pool.h), NHWC, channel fastest so that consecutive
// threads touch consecutive addresses: max pool forward and backward, global average pool forward and
// backward, ReLU backward, the batch norm's in-place ReLU, and the fp32 accumulation of a 16-bit filter
// gradient. Every kernel is a gather (each output element summed by one thread in a fixed order), so
// results are deterministic, and they do the cpu references' float operations in the same order:
// the fp32 results equal the references' bit for bit (divisions are __fdiv_rn: --use_fast_math would
// otherwise approximate them).
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuda_check.h"
#include "mixed_dev.cuh"
#include "pool.h"
#include "resnet_dev.cuh"
#include "resnet_ops_impl.h"

// out (N,P,Q,C): one thread per output element
template <class D>
__global__ void maxpool_fwd_kernel(typename D::S *out, const typename D::S *in, int N, int H, int W, int C, int R,
                                   int st, int pad, int P, int Q) {
    const size_t n_out = (size_t)N * P * Q * C;
    GRID_STRIDE(i, n_out) {
        const int ch = (int)(i % C);
        size_t t = i / C;
        const int q = (int)(t % Q);
        t /= Q;
        const int p = (int)(t % P);
        const int n = (int)(t / P);
        float m = -INFINITY;
        for (int r = 0; r < R; r++) {
            const int h = p * st - pad + r;
            if (h < 0 || h >= H) continue;
            for (int s = 0; s < R; s++) {
                const int w = q * st - pad + s;
                if (w < 0 || w >= W) continue;
                const float v = D::to_f(in[(((size_t)n * H + h) * W + w) * C + ch]);
                if (v > m || isnan(v)) m = v; // NaN propagates, as torch.max_pool2d
            }
        }
        out[i] = D::from_f(m);
    }
}

// din (N,H,W,C): one thread per input element; the windows containing it in output order, each one's
// gradient taken when this position is the window's first equal to its output (the reference's argmax)
template <class D>
__global__ void maxpool_bwd_kernel(typename D::S *din, const typename D::S *dout, const typename D::S *in,
                                   const typename D::S *out, int N, int H, int W, int C, int R, int st, int pad, int P,
                                   int Q) {
    const size_t n_in = (size_t)N * H * W * C;
    GRID_STRIDE(i, n_in) {
        const int ch = (int)(i % C);
        size_t t = i / C;
        const int w = (int)(t % W);
        t /= W;
        const int h = (int)(t % H);
        const int n = (int)(t / H);
        // p with p*st - pad <= h <= p*st - pad + R - 1
        int p0 = h + pad - R + 1;
        p0 = p0 <= 0 ? 0 : (p0 + st - 1) / st;
        int p1 = (h + pad) / st;
        if (p1 > P - 1) p1 = P - 1;
        int q0 = w + pad - R + 1;
        q0 = q0 <= 0 ? 0 : (q0 + st - 1) / st;
        int q1 = (w + pad) / st;
        if (q1 > Q - 1) q1 = Q - 1;
        float acc = 0.0f;
        for (int p = p0; p <= p1; p++)
            for (int q = q0; q <= q1; q++) {
                const size_t o = (((size_t)n * P + p) * Q + q) * C + ch;
                const float m = D::to_f(out[o]);
                int at_h = -1, at_w = -1;
                for (int r = 0; r < R && at_h < 0; r++) {
                    const int hh = p * st - pad + r;
                    if (hh < 0 || hh >= H) continue;
                    for (int s = 0; s < R; s++) {
                        const int ww = q * st - pad + s;
                        if (ww < 0 || ww >= W) continue;
                        if (D::to_f(in[(((size_t)n * H + hh) * W + ww) * C + ch]) == m) {
                            at_h = hh, at_w = ww;
                            break;
                        }
                    }
                }
                if (at_h == h && at_w == w) acc += D::to_f(dout[o]);
            }
        din[i] = D::from_f(acc);
    }
}

// ---- the max pools with a thread per V channels (rn_vec: 16-byte loads), when C is a multiple of V and the
// tensors are 16-byte aligned: the same comparisons per channel as the kernels above, so the same bits. The
// one-channel-a-thread kernels above read 2 bytes a load (the stem's pool, N 128, 112x112x64: one of the
// larger elementwise costs of the ResNet-50 step).
template <class D>
__global__ void maxpool_fwd_vec_kernel(typename D::S *out, const typename D::S *in, int N, int H, int W, int C, int R,
                                       int st, int pad, int P, int Q) {
    typedef rn_vec<D> VD;
    enum { V = VD::V };
    const int CV = C / V;
    GRID_STRIDE(i, (size_t)N * P * Q * CV) {
        const int c0 = (int)(i % CV) * V;
        size_t t = i / CV;
        const int q = (int)(t % Q);
        t /= Q;
        const int p = (int)(t % P);
        const int n = (int)(t / P);
        float m[V];
#pragma unroll
        for (int k = 0; k < V; k++) m[k] = -INFINITY;
        for (int r = 0; r < R; r++) {
            const int h = p * st - pad + r;
            if (h < 0 || h >= H) continue;
            for (int s = 0; s < R; s++) {
                const int w = q * st - pad + s;
                if (w < 0 || w >= W) continue;
                float v[V];
                VD::ld(v, in + (((size_t)n * H + h) * W + w) * C + c0);
#pragma unroll
                for (int k = 0; k < V; k++)
                    if (v[k] > m[k] || isnan(v[k])) m[k] = v[k];
            }
        }
        VD::st(out + (((size_t)n * P + p) * Q + q) * C + c0, m);
    }
}

// din (N,H,W,C), V channels a thread: a window's gradient comes here for channel k when in[h][w][k] equals
// the window's output and no earlier position of the window (row-major) does; only then is the window
// scanned, up to this position.
template <class D>
__global__ void maxpool_bwd_vec_kernel(typename D::S *din, const typename D::S *dout, const typename D::S *in,
                                       const typename D::S *out, int N, int H, int W, int C, int R, int st, int pad,
                                       int P, int Q) {
    typedef rn_vec<D> VD;
    enum { V = VD::V };
    const int CV = C / V;
    GRID_STRIDE(i, (size_t)N * H * W * CV) {
        const int c0 = (int)(i % CV) * V;
        size_t t = i / CV;
        const int w = (int)(t % W);
        t /= W;
        const int h = (int)(t % H);
        const int n = (int)(t / H);
        int p0 = h + pad - R + 1;
        p0 = p0 <= 0 ? 0 : (p0 + st - 1) / st;
        int p1 = (h + pad) / st;
        if (p1 > P - 1) p1 = P - 1;
        int q0 = w + pad - R + 1;
        q0 = q0 <= 0 ? 0 : (q0 + st - 1) / st;
        int q1 = (w + pad) / st;
        if (q1 > Q - 1) q1 = Q - 1;
        float x[V], acc[V];
        VD::ld(x, in + (((size_t)n * H + h) * W + w) * C + c0);
#pragma unroll
        for (int k = 0; k < V; k++) acc[k] = 0.0f;
        for (int p = p0; p <= p1; p++)
            for (int q = q0; q <= q1; q++) {
                const size_t o = (((size_t)n * P + p) * Q + q) * C + c0;
                float m[V];
                VD::ld(m, out + o);
                unsigned cand = 0; // channels whose output this position equals
#pragma unroll
                for (int k = 0; k < V; k++) cand |= (x[k] == m[k] ? 1u : 0u) << k;
                // drop the channels an earlier position of the window equals
                for (int r = 0; r < R && cand; r++) {
                    const int hh = p * st - pad + r;
                    if (hh < 0 || hh >= H || hh > h) continue;
                    for (int s = 0; s < R && cand; s++) {
                        const int ww = q * st - pad + s;
                        if (ww < 0 || ww >= W) continue;
                        if (hh == h && ww >= w) break; // this position and after
                        float v[V];
                        VD::ld(v, in + (((size_t)n * H + hh) * W + ww) * C + c0);
#pragma unroll
                        for (int k = 0; k < V; k++)
                            if (v[k] == m[k]) cand &= ~(1u << k);
                    }
                }
                if (cand) {
                    float d[V];
                    VD::ld(d, dout + o);
#pragma unroll
                    for (int k = 0; k < V; k++)
                        if ((cand >> k) & 1u) acc[k] += d[k];
                }
            }
        VD::st(din + (((size_t)n * H + h) * W + w) * C + c0, acc);
    }
}

// ---- the max pool's backward in two passes, when the window's positions fit a byte (R*R < 255), the
// element counts 32 bits and the argmax bytes the workspace: the vector kernel above scans, per input
// position and per window containing it, the window's earlier positions again (ncu, H200, ResNet-50 fp16
// batch 128: 0.86 ms for the stem's pool, about 0.5 GB moved). Here
//   1. a thread per output window and V channels finds each channel's first position (row-major, r * R + s)
//      whose input equals the window's output: idx (N,P,Q,C) bytes, 255 where none does (a NaN output);
//   2. a thread per input position and V channels sums, windows in output order, dout of each window whose
//      idx names this position.
// The reference's rule (the first position equal to the output takes the gradient) and its order of sums:
// the same bits. Work items index in 32 bits (the host checks the counts fit).
template <class D>
__global__ void maxpool_argmax_vec_kernel(uint8_t *idx, const typename D::S *in, const typename D::S *out, int N, int H,
                                          int W, int C, int R, int st, int pad, int P, int Q) {
    typedef rn_vec<D> VD;
    enum { V = VD::V };
    const unsigned CV = (unsigned)C / V, work = (unsigned)N * P * Q * CV;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < work; i += gridDim.x * blockDim.x) {
        const unsigned c0 = (i % CV) * V, t = i / CV, q = t % Q, p = (t / Q) % P, n = t / ((unsigned)Q * P);
        const size_t o = (size_t)t * C + c0;
        float m[V];
        VD::ld(m, out + o);
        uint8_t at[V];
#pragma unroll
        for (int k = 0; k < V; k++) at[k] = 255;
        for (int r = 0; r < R; r++) {
            const int h = (int)p * st - pad + r;
            if (h < 0 || h >= H) continue;
            for (int s = 0; s < R; s++) {
                const int w = (int)q * st - pad + s;
                if (w < 0 || w >= W) continue;
                float v[V];
                VD::ld(v, in + (((size_t)n * H + h) * W + w) * C + c0);
#pragma unroll
                for (int k = 0; k < V; k++)
                    if (at[k] == 255 && v[k] == m[k]) at[k] = (uint8_t)(r * R + s);
            }
        }
        if (V == 8) {
            uint2 u;
            u.x = at[0] | (unsigned)at[1] << 8 | (unsigned)at[2] << 16 | (unsigned)at[3] << 24;
            u.y = at[4 % V] | (unsigned)at[5 % V] << 8 | (unsigned)at[6 % V] << 16 | (unsigned)at[7 % V] << 24;
            *reinterpret_cast<uint2 *>(idx + o) = u;
        } else {
            *reinterpret_cast<uint32_t *>(idx + o) =
                at[0] | (unsigned)at[1] << 8 | (unsigned)at[2 % V] << 16 | (unsigned)at[3 % V] << 24;
        }
    }
}

template <class D>
__global__ void maxpool_bwd_idx_vec_kernel(typename D::S *din, const typename D::S *dout, const uint8_t *idx, int N,
                                           int H, int W, int C, int R, int st, int pad, int P, int Q) {
    typedef rn_vec<D> VD;
    enum { V = VD::V };
    const unsigned CV = (unsigned)C / V, work = (unsigned)N * H * W * CV;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < work; i += gridDim.x * blockDim.x) {
        const unsigned c0 = (i % CV) * V, t = i / CV;
        const int w = (int)(t % W), h = (int)((t / W) % H), n = (int)(t / ((unsigned)W * H));
        int p0 = h + pad - R + 1;
        p0 = p0 <= 0 ? 0 : (p0 + st - 1) / st;
        int p1 = (h + pad) / st;
        if (p1 > P - 1) p1 = P - 1;
        int q0 = w + pad - R + 1;
        q0 = q0 <= 0 ? 0 : (q0 + st - 1) / st;
        int q1 = (w + pad) / st;
        if (q1 > Q - 1) q1 = Q - 1;
        float acc[V];
#pragma unroll
        for (int k = 0; k < V; k++) acc[k] = 0.0f;
        for (int p = p0; p <= p1; p++)
            for (int q = q0; q <= q1; q++) {
                const size_t o = (((size_t)n * P + p) * Q + q) * C + c0;
                const unsigned me = (unsigned)((h - (p * st - pad)) * R + (w - (q * st - pad)));
                uint8_t at[V];
                if (V == 8) {
                    const uint2 u = *reinterpret_cast<const uint2 *>(idx + o);
#pragma unroll
                    for (int k = 0; k < V; k++) at[k] = (uint8_t)((k < 4 ? u.x : u.y) >> (8 * (k & 3)));
                } else {
                    const uint32_t u = *reinterpret_cast<const uint32_t *>(idx + o);
#pragma unroll
                    for (int k = 0; k < V; k++) at[k] = (uint8_t)(u >> (8 * k));
                }
                unsigned hit = 0;
#pragma unroll
                for (int k = 0; k < V; k++) hit |= (at[k] == me ? 1u : 0u) << k;
                if (hit) {
                    float d[V];
                    VD::ld(d, dout + o);
#pragma unroll
                    for (int k = 0; k < V; k++)
                        if ((hit >> k) & 1u) acc[k] += d[k];
                }
            }
        VD::st(din + (size_t)t * C + c0, acc);
    }
}

// out (N,C): one thread per (n, c), the HW positions summed in order
template <class D>
__global__ void avgpool_fwd_kernel(typename D::S *out, const typename D::S *in, int N, int HW, int C) {
    GRID_STRIDE(i, (size_t)N * C) {
        const size_t n = i / C, ch = i % C;
        float s = 0.0f;
        for (int k = 0; k < HW; k++) s += D::to_f(in[(n * HW + k) * C + ch]);
        out[i] = D::from_f(__fdiv_rn(s, (float)HW));
    }
}

template <class D>
__global__ void avgpool_bwd_kernel(typename D::S *din, const typename D::S *dout, int N, int HW, int C) {
    GRID_STRIDE(i, (size_t)N * HW * C) {
        const size_t ch = i % C, n = i / ((size_t)HW * C);
        din[i] = D::from_f(__fdiv_rn(D::to_f(dout[n * C + ch]), (float)HW));
    }
}

// din may alias dout: each element read, then written, by one thread (no __restrict__)
template <class D>
__global__ void relu_bwd_kernel(typename D::S *din, const typename D::S *dout, const typename D::S *out, size_t n) {
    GRID_STRIDE(i, n) din[i] = D::to_f(out[i]) > 0.0f ? dout[i] : D::from_f(0.0f);
}

// out may alias in (no __restrict__)
template <class D> __global__ void relu_fwd_kernel(typename D::S *out, const typename D::S *in, size_t n) {
    GRID_STRIDE(i, n) out[i] = D::to_f(in[i]) <= 0.0f ? D::from_f(0.0f) : in[i]; // NaN kept, as torch.relu
}

template <class D> __global__ void acc_f32_kernel(float *dw, const typename D::S *g, size_t n) {
    GRID_STRIDE(i, n) dw[i] += D::to_f(g[i]);
}

static cudaStream_t S(mo_ctx *c) { return (cudaStream_t)c->stream; }

extern "C" mo_status maxpool_forward_cuda(mo_ctx *c, mo_dtype dt, void *out, const void *in, int N, int H, int W, int C,
                                          int R, int stride, int pad) {
    const int P = mo_pool_out_dim(H, R, stride, pad), Q = mo_pool_out_dim(W, R, stride, pad);
    const size_t n = (size_t)N * P * Q * C;
    if (rn_vec_ok(mo_dtype_size(dt), C, out, in, in, in)) {
        const size_t nv = n / (16 / mo_dtype_size(dt));
#define L(T) maxpool_fwd_vec_kernel<T><<<mx_grid(nv), MX_THREADS, 0, S(c)>>>((T::S *)out, (const T::S *)in, N, H, W, C, R, stride, pad, P, Q)
        DISPATCH(dt, L);
#undef L
        CUDA_CHECK_LAUNCH();
        return MO_OK;
    }
#define L(T) maxpool_fwd_kernel<T><<<mx_grid(n), MX_THREADS, 0, S(c)>>>((T::S *)out, (const T::S *)in, N, H, W, C, R, stride, pad, P, Q)
    DISPATCH(dt, L);
#undef L
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

extern "C" mo_status maxpool_backward_cuda(mo_ctx *c, mo_dtype dt, void *din, const void *dout, const void *in,
                                           const void *out, int N, int H, int W, int C, int R, int stride, int pad) {
    const int P = mo_pool_out_dim(H, R, stride, pad), Q = mo_pool_out_dim(W, R, stride, pad);
    const size_t n = (size_t)N * H * W * C, nidx = (size_t)N * P * Q * C;
    const int vec = rn_vec_ok(mo_dtype_size(dt), C, din, dout, in, out);
    if (vec && c->maxpool_two_pass && R * R < 255 && n <= UINT32_MAX / 2 && nidx <= UINT32_MAX / 2 && c->gemm_ws &&
        nidx <= c->gemm_ws_bytes && ((uintptr_t)c->gemm_ws & 15u) == 0) {
        uint8_t *idx = (uint8_t *)c->gemm_ws; // (N,P,Q,C): the library workspace, free between library calls
        const size_t V = 16 / mo_dtype_size(dt);
#define L(T)                                                                                                         \
    do {                                                                                                             \
        maxpool_argmax_vec_kernel<T><<<mx_grid(nidx / V), MX_THREADS, 0, S(c)>>>(                                    \
            idx, (const T::S *)in, (const T::S *)out, N, H, W, C, R, stride, pad, P, Q);                             \
        CUDA_CHECK_LAUNCH();                                                                                         \
        maxpool_bwd_idx_vec_kernel<T><<<mx_grid(n / V), MX_THREADS, 0, S(c)>>>((T::S *)din, (const T::S *)dout, idx, \
                                                                              N, H, W, C, R, stride, pad, P, Q);     \
    } while (0)
        DISPATCH(dt, L);
#undef L
        CUDA_CHECK_LAUNCH();
        c->maxpool_two_pass_runs++;
        return MO_OK;
    }
    if (vec) {
        const size_t nv = n / (16 / mo_dtype_size(dt));
#define L(T)                                                                                                        \
    maxpool_bwd_vec_kernel<T><<<mx_grid(nv), MX_THREADS, 0, S(c)>>>((T::S *)din, (const T::S *)dout, (const T::S *)in, \
                                                                   (const T::S *)out, N, H, W, C, R, stride, pad, P, Q)
        DISPATCH(dt, L);
#undef L
        CUDA_CHECK_LAUNCH();
        return MO_OK;
    }
#define L(T)                                                                                                    \
    maxpool_bwd_kernel<T><<<mx_grid(n), MX_THREADS, 0, S(c)>>>((T::S *)din, (const T::S *)dout, (const T::S *)in, \
                                                               (const T::S *)out, N, H, W, C, R, stride, pad, P, Q)
    DISPATCH(dt, L);
#undef L
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

extern "C" mo_status avgpool_forward_cuda(mo_ctx *c, mo_dtype dt, void *out, const void *in, int N, int HW, int C) {
    const size_t n = (size_t)N * C;
#define L(T) avgpool_fwd_kernel<T><<<mx_grid(n), MX_THREADS, 0, S(c)>>>((T::S *)out, (const T::S *)in, N, HW, C)
    DISPATCH(dt, L);
#undef L
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

extern "C" mo_status avgpool_backward_cuda(mo_ctx *c, mo_dtype dt, void *din, const void *dout, int N, int HW, int C) {
    const size_t n = (size_t)N * HW * C;
#define L(T) avgpool_bwd_kernel<T><<<mx_grid(n), MX_THREADS, 0, S(c)>>>((T::S *)din, (const T::S *)dout, N, HW, C)
    DISPATCH(dt, L);
#undef L
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

extern "C" mo_status relu_backward_cuda(mo_ctx *c, mo_dtype dt, void *din, const void *dout, const void *out, size_t n) {
    if (n == 0) return MO_OK;
#define L(T) relu_bwd_kernel<T><<<mx_grid(n), MX_THREADS, 0, S(c)>>>((T::S *)din, (const T::S *)dout, (const T::S *)out, n)
    DISPATCH(dt, L);
#undef L
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

extern "C" mo_status relu_forward_cuda(mo_ctx *c, mo_dtype dt, void *out, const void *in, size_t n) {
    if (n == 0) return MO_OK;
#define L(T) relu_fwd_kernel<T><<<mx_grid(n), MX_THREADS, 0, S(c)>>>((T::S *)out, (const T::S *)in, n)
    DISPATCH(dt, L);
#undef L
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

extern "C" mo_status accumulate_f32_from_cuda(mo_ctx *c, mo_dtype dt, float *dw, const void *g, size_t n) {
    if (n == 0) return MO_OK;
#define L(T) acc_f32_kernel<T><<<mx_grid(n), MX_THREADS, 0, S(c)>>>(dw, (const T::S *)g, n)
    DISPATCH(dt, L);
#undef L
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

// wf (C, R, S, K) = w (K, R, S, C) flipped in R and S: the filter of the forward convolution that gives a
// stride-1 convolution's input gradient (conv_cuda.c): wf[c][r][s][k] = w[k][R-1-r][S-1-s][c]
__global__ void conv_flip_kernel(float *wf, const float *w, int K, int R, int S, int C) {
    GRID_STRIDE(i, (size_t)K * R * S * C) {
        const int k = (int)(i % K);
        size_t t = i / K;
        const int s = (int)(t % S);
        t /= S;
        const int r = (int)(t % R);
        const int c = (int)(t / R);
        wf[i] = w[(((size_t)k * R + (R - 1 - r)) * S + (S - 1 - s)) * C + c];
    }
}

extern "C" mo_status conv_flip_filter_cuda(mo_ctx *c, float *wf, const float *w, int K, int R, int Sw, int C) {
    const size_t n = (size_t)K * R * Sw * C;
    conv_flip_kernel<<<mx_grid(n), MX_THREADS, 0, S(c)>>>(wf, w, K, R, Sw, C);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

// z (n, Hz, Wz, K) = dout (n, P, Q, K) spread to every st-th row and column, zeros between (the input of
// the forward convolution that gives a strided convolution's input gradient, conv_cuda.c)
__global__ void conv_dilate_kernel(float *z, const float *dy, int n, int P, int Q, int K, int Hz, int Wz, int st) {
    GRID_STRIDE(i, (size_t)n * Hz * Wz * K) {
        const int k = (int)(i % K);
        size_t t = i / K;
        const int j = (int)(t % Wz);
        t /= Wz;
        const int h = (int)(t % Hz);
        const size_t b = t / Hz;
        const int p = h / st, q = j / st;
        z[i] = h % st == 0 && j % st == 0 && p < P && q < Q ? dy[((b * P + p) * Q + q) * K + k] : 0.0f;
    }
}

// din (n, H, W, C) = cmp (n, P, Q, C) at every st-th row and column, zeros elsewhere (a strided 1x1
// convolution's input gradient from the compact one)
__global__ void conv_scatter_kernel(float *din, const float *cmp, int n, int H, int W, int C, int P, int Q, int st) {
    GRID_STRIDE(i, (size_t)n * H * W * C) {
        const int ch = (int)(i % C);
        size_t t = i / C;
        const int w = (int)(t % W);
        t /= W;
        const int h = (int)(t % H);
        const size_t b = t / H;
        const int p = h / st, q = w / st;
        din[i] = h % st == 0 && w % st == 0 && p < P && q < Q ? cmp[((b * P + p) * Q + q) * C + ch] : 0.0f;
    }
}

extern "C" mo_status conv_dilate_cuda(mo_ctx *c, float *z, const float *dy, int n, int P, int Q, int K, int Hz, int Wz,
                                      int st) {
    conv_dilate_kernel<<<mx_grid((size_t)n * Hz * Wz * K), MX_THREADS, 0, S(c)>>>(z, dy, n, P, Q, K, Hz, Wz, st);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

extern "C" mo_status conv_scatter_cuda(mo_ctx *c, float *din, const float *cmp, int n, int H, int W, int C, int P,
                                       int Q, int st) {
    conv_scatter_kernel<<<mx_grid((size_t)n * H * W * C), MX_THREADS, 0, S(c)>>>(din, cmp, n, H, W, C, P, Q, st);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}
