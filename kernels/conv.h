// 2-D convolution of the ResNet (NHWC), forward and both backwards. Dispatch as ops.h: cpu -> the plain-C
// direct convolution (conv.c), cuda -> cuDNN 9's backend graph API (conv_cuda.c), dry -> nothing computed.
// On cuda, fp32 without TF32 runs as cuBLASLt GEMMs instead where it can (MEMOPT_CONV_GEMM, conv_cuda.c):
// 1x1 stride-1 convolutions directly, the others over their im2col column matrix, a chunk at a time in
// the workspace, or (their forwards and stride-1 input gradients, where mo_conv_implicit_prefers) on the
// suite's implicit-GEMM kernel (conv_implicit.cu).
//
// Shapes: input (N, H, W, C), filter (K, R, S, C), output (N, P, Q, K), all NHWC / KRSC row-major;
// cross-correlation (as PyTorch), the same stride and zero padding in both dims, no dilation, groups 1.
// Precision (ops_mixed.h's conventions): in, out, w, din, dout are of dtype dt (MO_F32, MO_F16, MO_BF16);
// fp32 accumulation; each dt output rounded once. fp32 convolutions use TF32 tensor cores only when
// ctx->tf32. dw is fp32 and accumulates (+=); in 16 bits the gradient of the 16-bit weight copy is
// rounded to dt first and then added in fp32 (dw += float(round_dt(g))), as PyTorch autocast does.
// Workspace: the context's GEMM workspace (c->gemm_ws, c->gemm_ws_bytes: a fixed budget per context, the
// model's (the ResNet's 256 MiB) unless MEMOPT_WORKSPACE_MIB; cuDNN engines that need more are not used),
// so a convolution allocates nothing but the backward filter's staging buffer (mo_conv_backward_filter_scratch_bytes), taken on every backend: cuDNN writes the
// gradient there (beta 0, which every engine takes; beta 1 in place is not guaranteed) and a kernel adds
// it to dw.
// Deterministic: only cuDNN engines without CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC run. The engine is chosen
// per shape and per alignment class of the three pointers (largest power of two <= 256 dividing them): a
// recompute gives the first forward's bits when its buffers have the same classes, which allocator bases
// (256-byte aligned) and views at 256-byte multiples always have. MEMOPT_CONV_LOG=1 prints each new
// plan's engine, its numerical notes and why the other candidates were dropped.
#ifndef MEMOPT_CONV_H
#define MEMOPT_CONV_H

#include <stddef.h>
#include "ctx.h"
#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mo_conv_shape {
    int N, H, W, C;  // input (N, H, W, C)
    int K, R, S;     // filter (K, R, S, C)
    int stride, pad; // same in both dims; no dilation, groups 1
    int P, Q;        // output (N, P, Q, K)
} mo_conv_shape;

// Sets every field; P = (H + 2 pad - R) / stride + 1, Q likewise (<= 0 when the filter does not fit).
void mo_conv_shape_init(mo_conv_shape *s, int N, int H, int W, int C, int K, int R, int S, int stride, int pad);
// MO_OK when every dimension is positive (P, Q included) and every tensor's element count fits an int.
mo_status mo_conv_shape_check(const mo_conv_shape *s, const char *op);

// out (N,P,Q,K) = conv(in (N,H,W,C), w (K,R,S,C)); out overwritten.
mo_status mo_conv_forward(mo_ctx *c, mo_dtype dt, void *out, const void *in, const void *w, const mo_conv_shape *s);
// din (N,H,W,C) = the input gradient from dout (N,P,Q,K) and w; din overwritten.
mo_status mo_conv_backward_data(mo_ctx *c, mo_dtype dt, void *din, const void *dout, const void *w,
                                const mo_conv_shape *s);
// din (N,H,W,C) += the input gradient: din = round_dt(float(din) + the gradient's fp32 sum) (the cpu
// reference; on cuda it adds in the pass's epilogue, cuDNN's and cuBLASLt's beta 1, where it can, else a
// chunk of images' gradient is rounded first, then the sum: conv_cuda.c says where); the ResNet's shortcut
// gradient added without a pass of its own.
mo_status mo_conv_backward_data_add(mo_ctx *c, mo_dtype dt, void *din, const void *dout, const void *w,
                                    const mo_conv_shape *s);
// A stride-1 convolution's input gradient is the forward convolution t of dout (N, P, Q, K) with the filter
// flipped in R and S and transposed to (C, R, S, K), padding R-1-pad (conv_cuda.c runs fp32 input gradients
// so): 1 and t where s has stride 1, R == S and pad <= R-1; 0 otherwise (t untouched).
int mo_conv_dgrad_forward_shape(const mo_conv_shape *s, mo_conv_shape *t);
// Whether the fp32 implicit-GEMM kernel (conv_implicit.cu) should take s, with ws_bytes of library workspace,
// where it takes the shape at all: where it measured faster than the im2col GEMMs, at 512 output tiles or
// more (128 positions by 64 or 128 channels), or where s's column matrix with the 8 MiB the GEMM keeps is
// over the workspace (im2col's chunks: short GEMMs). conv_cuda.c gives the times.
int mo_conv_implicit_prefers(const mo_conv_shape *s, size_t ws_bytes);
// dw (K,R,S,C) fp32 += the filter gradient from dout (N,P,Q,K) and in (N,H,W,C).
mo_status mo_conv_backward_filter(mo_ctx *c, mo_dtype dt, float *dw, const void *dout, const void *in,
                                  const mo_conv_shape *s);

// Scratch of mo_conv_backward_filter: K*R*S*C elements of dt (the staged gradient).
size_t mo_conv_backward_filter_scratch_bytes(mo_dtype dt, const mo_conv_shape *s);

// Plan cache statistics of c (for tests): convolutions that found their execution plan cached, plans built
// (0, 0 on cpu and dry, and before the first cuDNN convolution).
void mo_conv_cache_stats(const mo_ctx *c, long *hits, long *misses);

// FLOPs of one convolution (forward, or either backward): 2 N P Q K R S C.
double mo_conv_flops(const mo_conv_shape *s);

#ifdef __cplusplus
}
#endif

#endif
