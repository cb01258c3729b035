// Batch normalization in training mode (the ResNet's), over M = N*H*W rows of C channels (NHWC: channel
// fastest), eps 1e-5. Dispatch as ops.h: cpu -> plain C (batchnorm.c), cuda -> the suite's own kernels
// (batchnorm.cu; MEMOPT_BN=cudnn: cuDNN's, batchnorm_cuda.c), dry -> nothing computed.
// Precision: in, out, din, dout of dtype dt; gamma, beta, mean, rstd, running statistics and dgamma,
// dbeta fp32 in every precision (PyTorch AMP keeps batch norm in fp32); fp32 arithmetic, each dt output
// rounded once.
#ifndef MEMOPT_BATCHNORM_H
#define MEMOPT_BATCHNORM_H

#include <stddef.h>
#include "ctx.h"
#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MO_BN_EPS 1e-5

// out (M,C) = gamma * (in - mean) * rstd + beta, then max(0, .) when relu != 0 (NaN kept, as torch.relu).
// mean (C), rstd (C) = 1/sqrt(biased variance + eps) of the batch are saved (for the backward).
// run_mean, run_var (C): when run_mean != NULL (run_var then too), updated as PyTorch does:
//   run_mean = (1 - momentum) run_mean + momentum mean; run_var likewise with the unbiased variance
//   (times M / (M - 1)); a recompute passes NULL so the statistics move once per step.
mo_status mo_batchnorm_forward(mo_ctx *c, mo_dtype dt, void *out, float *mean, float *rstd, float *run_mean,
                               float *run_var, const void *in, const float *gamma, const float *beta, int M, int C,
                               float momentum, int relu);
// The forward's normalize pass alone, with statistics already computed (a recompute's: the mean and rstd
// the step's forward saved): out (M,C) = gamma * (in - mean) * rstd + beta; with res (M,C) != NULL that
// rounded to dt, + res, rounded again (the residual add, as mo_batchnorm_add_relu_forward); then
// max(0, .) when relu. The forward runs this same pass after its statistics, so given the forward's mean
// and rstd the result has the forward's bits (every backend; on cuda the suite's own kernel even when
// MEMOPT_BN=cudnn, whose forward computes out its own way). out may be res.
mo_status mo_batchnorm_normalize(mo_ctx *c, mo_dtype dt, void *out, const void *in, const float *gamma,
                                 const float *beta, const float *mean, const float *rstd, const void *res, int M,
                                 int C, int relu);
// din (M,C) dt overwritten, and may be in (each element of in is read before its din is written; not with
// MEMOPT_BN=cudnn, whose backward does not promise it: MO_ERR_INVALID); dgamma, dbeta (C) fp32 +=. out is
// the forward's output: read for the ReLU mask when relu (dout is taken as 0 where out <= 0), ignored otherwise (may be NULL).
// Scratch: mo_batchnorm_backward_scratch_bytes (the masked dout, when relu).
mo_status mo_batchnorm_backward(mo_ctx *c, mo_dtype dt, void *din, float *dgamma, float *dbeta, const void *dout,
                                const void *in, const void *out, const float *gamma, const float *mean,
                                const float *rstd, int M, int C, int relu);
size_t mo_batchnorm_backward_scratch_bytes(mo_dtype dt, int M, int C, int relu);

// The bottleneck's last BN, its residual add and ReLU in one pass: out (M,C) = max(0, BN(in) + res), with
// the roundings of the three ops done apart (BN rounded to dt, the sum rounded to dt, the ReLU), so the
// result equals mo_batchnorm_forward (relu 0), then mo_residual_forward_mixed, then mo_relu_forward, bit for
// bit. Statistics, mean, rstd and the running statistics as mo_batchnorm_forward. res (M,C) dt; out may be
// res (the block's shortcut branch written over; not with MEMOPT_BN=cudnn, whose BN writes out before the
// add reads res: MO_ERR_INVALID).
mo_status mo_batchnorm_add_relu_forward(mo_ctx *c, mo_dtype dt, void *out, float *mean, float *rstd, float *run_mean,
                                        float *run_var, const void *in, const float *gamma, const float *beta,
                                        const void *res, int M, int C, float momentum);
// The ReLU's backward in place, then the BN's: dout := out > 0 ? dout : 0 (whoever reads dout after sees
// the masked gradient: the block's shortcut), then as mo_batchnorm_backward with relu 0. No scratch; one
// pass fewer than mo_relu_backward then mo_batchnorm_backward. out: the ReLU's output. din may be in, as
// for mo_batchnorm_backward.
mo_status mo_batchnorm_relu_backward_inplace(mo_ctx *c, mo_dtype dt, void *din, float *dgamma, float *dbeta,
                                             void *dout, const void *in, const void *out, const float *gamma,
                                             const float *mean, const float *rstd, int M, int C);
// The backward of a BN then a ReLU (mo_batchnorm_forward with relu 1) with the ReLU's mask recomputed from
// in: dout is taken as 0 where the forward's output, gamma (in - mean) rstd + beta rounded to dt, was not
// > 0 (the forward's own arithmetic, so the mask of its stored output, bit for bit), then as
// mo_batchnorm_backward with relu 0. dout is only read and the forward's output not at all: 5 passes over
// the tensor where mo_batchnorm_relu_backward_inplace takes 7. din, dgamma, dbeta as mo_batchnorm_backward's
// (din may be in), and equal bit for bit to mo_batchnorm_relu_backward_inplace's when the tensors are
// 16-byte aligned or when none is (the kernels' vector form is chosen by it). Not with MEMOPT_BN=cudnn,
// whose forward computed the output its own way (MO_ERR_INVALID on every backend).
mo_status mo_batchnorm_relu_backward_remask(mo_ctx *c, mo_dtype dt, void *din, float *dgamma, float *dbeta,
                                            const void *dout, const void *in, const float *gamma, const float *beta,
                                            const float *mean, const float *rstd, int M, int C);

#ifdef __cplusplus
}
#endif

#endif
