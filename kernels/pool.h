// Pooling and ReLU backward of the ResNet, NHWC. Dispatch as ops.h: cpu -> plain C (pool.c), cuda -> the
// suite's own kernels (pool.cu), dry -> nothing computed. Tensors of dtype dt (MO_F32, MO_F16, MO_BF16);
// fp32 arithmetic, each output rounded once (ops_mixed.h).
#ifndef MEMOPT_POOL_H
#define MEMOPT_POOL_H

#include <stddef.h>
#include "ctx.h"
#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

// Output size of a window R, stride, zero padding pad over H: (H + 2 pad - R) / stride + 1.
int mo_pool_out_dim(int H, int R, int stride, int pad);

// Max pool, window R x R: out (N,P,Q,C) = the max over the window's positions inside the image (padding
// never wins: it is -inf, as PyTorch's); a NaN in the window gives NaN, as torch.max_pool2d (an fp16
// overflow stays visible to the loss scaler).
mo_status mo_maxpool_forward(mo_ctx *c, mo_dtype dt, void *out, const void *in, int N, int H, int W, int C, int R,
                             int stride, int pad);
// din (N,H,W,C) overwritten: each output's gradient goes to the first position of its window (row-major
// window order) whose input equals the output (PyTorch's argmax); contributions of overlapping windows
// are summed in fp32 in output order and rounded once.
mo_status mo_maxpool_backward(mo_ctx *c, mo_dtype dt, void *din, const void *dout, const void *in, const void *out,
                              int N, int H, int W, int C, int R, int stride, int pad);
// Global average pool: out (N,C) = the mean over HW positions of in (N,HW,C).
mo_status mo_avgpool_forward(mo_ctx *c, mo_dtype dt, void *out, const void *in, int N, int HW, int C);
// din (N,HW,C) = dout (N,C) / HW, overwritten.
mo_status mo_avgpool_backward(mo_ctx *c, mo_dtype dt, void *din, const void *dout, int N, int HW, int C);
// out (n) = max(0, in), NaN kept (as torch.relu: an fp16 overflow stays visible to the loss scaler);
// out may alias in (the bottleneck's ReLU after the residual add).
mo_status mo_relu_forward(mo_ctx *c, mo_dtype dt, void *out, const void *in, size_t n);
// din (n) = out > 0 ? dout : 0, from the ReLU's output; din may alias dout.
mo_status mo_relu_backward(mo_ctx *c, mo_dtype dt, void *din, const void *dout, const void *out, size_t n);

#ifdef __cplusplus
}
#endif

#endif
