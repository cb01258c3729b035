// Internals of the ResNet ops (conv.h, batchnorm.h, pool.h): the plain-C references, the CUDA launchers
// (on c->stream) and the element access the references share. dt is MO_F32, MO_F16 or MO_BF16.
#ifndef MEMOPT_RESNET_OPS_IMPL_H
#define MEMOPT_RESNET_OPS_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include "conv.h"
#include "ctx.h"
#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

// MO_OK for MO_F32 / MO_F16 / MO_BF16, MO_ERR_INVALID (naming op) otherwise.
mo_status resnet_check_dtype(mo_dtype dt, const char *op);

#ifndef __CUDACC__
// Element i of an array of dtype dt, exactly as fp32; and its store, rounded to nearest even.
static inline float rn_ld(mo_dtype dt, const void *p, size_t i) {
    if (dt == MO_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == MO_F16 ? mo_f16_to_f32(h) : mo_bf16_to_f32(h);
}
static inline void rn_st(mo_dtype dt, void *p, size_t i, float f) {
    if (dt == MO_F32) ((float *)p)[i] = f;
    else ((uint16_t *)p)[i] = dt == MO_F16 ? mo_f32_to_f16(f) : mo_f32_to_bf16(f);
}
// f rounded to dt and back (identity for fp32).
static inline float rn_round(mo_dtype dt, float f) {
    if (dt == MO_F32) return f;
    return dt == MO_F16 ? mo_f16_to_f32(mo_f32_to_f16(f)) : mo_bf16_to_f32(mo_f32_to_bf16(f));
}
#endif

// ---- cpu references ----
mo_status conv_forward_cpu(mo_dtype dt, void *out, const void *in, const void *w, const mo_conv_shape *s);
mo_status conv_backward_data_cpu(mo_dtype dt, void *din, const void *dout, const void *w, const mo_conv_shape *s);
mo_status conv_backward_data_add_cpu(mo_dtype dt, void *din, const void *dout, const void *w, const mo_conv_shape *s);
mo_status conv_backward_filter_cpu(mo_dtype dt, float *dw, const void *dout, const void *in, const mo_conv_shape *s);
mo_status batchnorm_forward_cpu(mo_dtype dt, void *out, float *mean, float *rstd, float *run_mean, float *run_var,
                                const void *in, const float *gamma, const float *beta, int M, int C, float momentum,
                                int relu);
// out = BN(in) with the given statistics (+ res, ReLU: batchnorm.h's mo_batchnorm_normalize); out may be res
mo_status batchnorm_normalize_cpu(mo_dtype dt, void *out, const void *in, const float *gamma, const float *beta,
                                  const float *mean, const float *rstd, const void *res, int M, int C, int relu);
// dout already masked (the dispatcher applies the ReLU mask first, into scratch); beta != NULL: dout taken
// as 0 where the forward's BN + ReLU output, recomputed from in (batchnorm_normalize_cpu's), is not > 0
mo_status batchnorm_backward_cpu(mo_dtype dt, void *din, float *dgamma, float *dbeta, const void *dout,
                                 const void *in, const float *gamma, const float *beta, const float *mean,
                                 const float *rstd, int M, int C);
mo_status maxpool_forward_cpu(mo_dtype dt, void *out, const void *in, int N, int H, int W, int C, int R, int stride,
                              int pad);
mo_status maxpool_backward_cpu(mo_dtype dt, void *din, const void *dout, const void *in, const void *out, int N,
                               int H, int W, int C, int R, int stride, int pad);
mo_status avgpool_forward_cpu(mo_dtype dt, void *out, const void *in, int N, int HW, int C);
mo_status avgpool_backward_cpu(mo_dtype dt, void *din, const void *dout, int N, int HW, int C);
mo_status relu_forward_cpu(mo_dtype dt, void *out, const void *in, size_t n);
mo_status relu_backward_cpu(mo_dtype dt, void *din, const void *dout, const void *out, size_t n);
// The column matrix of s (im2col.c): a row per output position m = (n, p, q), a column per filter tap
// (r, s, c); fp32. col (rows, R, S, C) = its rows m0 .. m0 + rows - 1 from x (N, H, W, C), 0 in the padding.
void conv_im2col_cpu(float *col, const float *x, const mo_conv_shape *s, int m0, int rows);
// din (n, H, W, C) = col2im of dcol (n P Q, R, S, C): each element the sum of the entries copied from it,
// r then s ascending (0 where none is: a strided convolution's skipped rows and columns)
void conv_col2im_cpu(float *din, const float *dcol, const mo_conv_shape *s, int n);

// ---- cuda (conv_cuda.c, batchnorm_cuda.c: cuDNN; pool.cu: own kernels) ----
mo_status conv_forward_cuda(mo_ctx *c, mo_dtype dt, void *out, const void *in, const void *w, const mo_conv_shape *s);
mo_status conv_backward_data_cuda(mo_ctx *c, mo_dtype dt, void *din, const void *dout, const void *w,
                                  const mo_conv_shape *s);
mo_status conv_backward_data_add_cuda(mo_ctx *c, mo_dtype dt, void *din, const void *dout, const void *w,
                                      const mo_conv_shape *s);
// its path through image chunks in the workspace (conv_cuda.c), at most max_images a chunk (0: as many as
// half the workspace takes); counts c->conv_dgrad_add_chunked
mo_status conv_dgrad_add_chunked_cuda(mo_ctx *c, mo_dtype dt, void *din, const void *dout, const void *w,
                                      const mo_conv_shape *s, int max_images);
// scratch: mo_conv_backward_filter_scratch_bytes (the gradient, in dt, before it is added to dw)
mo_status conv_backward_filter_cuda(mo_ctx *c, mo_dtype dt, float *dw, const void *dout, const void *in,
                                    const mo_conv_shape *s, void *scratch);
// res != NULL: the BN output rounded to dt, + res (the residual add), then the ReLU when relu
mo_status batchnorm_forward_cuda(mo_ctx *c, mo_dtype dt, void *out, float *mean, float *rstd, float *run_mean,
                                 float *run_var, const void *in, const float *gamma, const float *beta,
                                 const void *res, int M, int C, float momentum, int relu);
// mask != NULL: dout := mask > 0 ? dout : 0 in place first (the ReLU's backward), then the BN's
mo_status batchnorm_backward_cuda(mo_ctx *c, mo_dtype dt, void *din, float *dgamma, float *dbeta, void *dout,
                                  const void *mask, const void *in, const float *gamma, const float *mean,
                                  const float *rstd, int M, int C);
// the suite's own batch norm kernels (batchnorm.cu; batchnorm_cuda.c picks them unless MEMOPT_BN=cudnn)
mo_status bn_own_forward_cuda(mo_ctx *c, mo_dtype dt, void *out, float *mean, float *rstd, float *run_mean,
                              float *run_var, const void *in, const float *gamma, const float *beta, const void *res,
                              int M, int C, float momentum, int relu);
// the forward's normalize pass alone (mo_batchnorm_normalize), with the statistics given
mo_status bn_own_normalize_cuda(mo_ctx *c, mo_dtype dt, void *out, const void *in, const void *res, const float *mean,
                                const float *rstd, const float *gamma, const float *beta, int M, int C, int relu);
// mask != NULL: dout masked in place by mask > 0 first; beta != NULL (mask NULL): dout, only read, taken as
// 0 where the forward's BN + ReLU output, recomputed from in, gamma and beta, is not > 0
mo_status bn_own_backward_cuda(mo_ctx *c, mo_dtype dt, void *din, float *dgamma, float *dbeta, void *dout,
                               const void *mask, const void *in, const float *gamma, const float *beta,
                               const float *mean, const float *rstd, int M, int C);
// mo_batchnorm_relu_backward_remask's (batchnorm_cuda.c)
mo_status batchnorm_relu_remask_backward_cuda(mo_ctx *c, mo_dtype dt, void *din, float *dgamma, float *dbeta,
                                              const void *dout, const void *in, const float *gamma, const float *beta,
                                              const float *mean, const float *rstd, int M, int C);
mo_status maxpool_forward_cuda(mo_ctx *c, mo_dtype dt, void *out, const void *in, int N, int H, int W, int C, int R,
                               int stride, int pad);
mo_status maxpool_backward_cuda(mo_ctx *c, mo_dtype dt, void *din, const void *dout, const void *in,
                                const void *out, int N, int H, int W, int C, int R, int stride, int pad);
mo_status avgpool_forward_cuda(mo_ctx *c, mo_dtype dt, void *out, const void *in, int N, int HW, int C);
mo_status avgpool_backward_cuda(mo_ctx *c, mo_dtype dt, void *din, const void *dout, int N, int HW, int C);
mo_status relu_forward_cuda(mo_ctx *c, mo_dtype dt, void *out, const void *in, size_t n); // out may alias in
mo_status relu_backward_cuda(mo_ctx *c, mo_dtype dt, void *din, const void *dout, const void *out, size_t n);
// The fp32 forward as an implicit GEMM (conv_implicit.cu): y (N, P, Q, K) of x (N, H, W, C) and w (K, R, S, C),
// the filter transposed into the head of c's workspace (conv_implicit_ws_bytes of it). *done 0 (nothing run)
// when the kernel does not take s (conv_implicit_takes: C % 8 == 0, K % 64 == 0), the workspace is too small
// or x or y is not 16-byte aligned.
int conv_implicit_takes(const mo_conv_shape *s);
size_t conv_implicit_ws_bytes(const mo_conv_shape *s);
mo_status conv_implicit_forward_cuda(mo_ctx *c, float *y, const float *x, const float *w, const mo_conv_shape *s,
                                     int *done);
// wf (C, R, S, K) = w (K, R, S, C) flipped in R and S (fp32)
mo_status conv_flip_filter_cuda(mo_ctx *c, float *wf, const float *w, int K, int R, int S, int C);
// z (n, Hz, Wz, K) = dy (n, P, Q, K) at every st-th row and column, zeros between (fp32)
mo_status conv_dilate_cuda(mo_ctx *c, float *z, const float *dy, int n, int P, int Q, int K, int Hz, int Wz, int st);
// din (n, H, W, C) = cmp (n, P, Q, C) at every st-th row and column, zeros elsewhere (fp32)
mo_status conv_scatter_cuda(mo_ctx *c, float *din, const float *cmp, int n, int H, int W, int C, int P, int Q, int st);
// conv_im2col_cpu's and conv_col2im_cpu's kernels (im2col.cu), the same bits (fp32)
mo_status conv_im2col_cuda(mo_ctx *c, float *col, const float *x, const mo_conv_shape *s, int m0, int rows);
mo_status conv_col2im_cuda(mo_ctx *c, float *din, const float *dcol, const mo_conv_shape *s, int n);
// acc (n) = (add ? acc : 0) + part[0] + ... + part[count - 1] (count partials of n fp32 each), in that order
mo_status conv_sum_partials_cuda(mo_ctx *c, float *acc, const float *part, int count, size_t n, int add);
// The chunks conv_cuda.c runs s's fp32 im2col GEMMs in with the context's workspace now: rows of the
// column matrix a chunk of the forward and the weight gradient, images a chunk of the input gradient
// (0: the path does not fit, or does not take s)
void conv_col_chunks(const mo_ctx *c, const mo_conv_shape *s, int *rows, int *images);
// The row slabs a chunk of s's im2col weight gradient is split into (conv_cuda.c col_wgrad_slabs; 0: one GEMM)
int conv_wgrad_slabs(const mo_ctx *c, const mo_conv_shape *s);
// dw (n) fp32 += float(g (n) of dt)
mo_status accumulate_f32_from_cuda(mo_ctx *c, mo_dtype dt, float *dw, const void *g, size_t n);
// The context's cuDNN handle (cudnnHandle_t), created at the first use, on c->stream.
mo_status mo_dnn_handle(mo_ctx *c, void **handle);
// Frees the plan cache of c and gives its cuDNN handle back to the process's pool, where the next
// context of the device takes it (mo_ctx_destroy calls it; no-op when none was made).
void mo_dnn_destroy(mo_ctx *c);
// The pool: cudnnDestroy of every pooled handle (also run at exit); handles pooled now and ever created.
void mo_dnn_pool_drain(void);
void mo_dnn_pool_stats(int *pooled, long *created);

#ifdef __cplusplus
}
#endif

#endif
