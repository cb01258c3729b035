// Batch norm on the GPU (batchnorm.h): the suite's own kernels (batchnorm.cu, the default: why there), or
// with MEMOPT_BN=cudnn (ctx->bn_cudnn) cuDNN's: cudnnBatchNormalizationForwardTraining / Backward, the still-shipped
// (deprecated in cuDNN 9, present in 9.14 and 9.19) spatial batch norm, on NHWC descriptors of
// (N = M, C, 1, 1): the statistics of each channel are over the M rows either way.
// Why not the graph API's NORM_FORWARD / NORM_BACKWARD: they need the same engine search as the
// convolutions but return the batch variance-derived statistics through extra virtual tensors per mode,
// and one GPU session was all this work could be checked on; the legacy calls have no workspace, no
// reserve space between forward and backward (so the op's contract stays the model's), take the running
// statistics with PyTorch's momentum (exponentialAverageFactor) and unbiased variance, and save mean and
// 1/sqrt(var + eps) as the API's mean and rstd.
// ReLU is not fused by cuDNN here: the fused form (cudnnBatchNormalizationForwardTrainingEx with
// CUDNN_BATCHNORM_OPS_BN_ACTIVATION) wants a reserve space that lives from forward to backward, and
// fp16 NHWC only. The forward's ReLU is a separate in-place pass (pool.cu), its backward the mask of
// mo_relu_backward into scratch (batchnorm.c).
#include "batchnorm.h"

#include <cudnn.h>
#include <stdio.h>
#include "cuda_check.h"
#include "ops_mixed_impl.h"
#include "residual.h"
#include "resnet_ops_impl.h"

typedef struct bn_desc {
    cudnnTensorDescriptor_t x, p;
} bn_desc;

static void bn_desc_free(bn_desc *d) {
    if (d->x) cudnnDestroyTensorDescriptor(d->x);
    if (d->p) cudnnDestroyTensorDescriptor(d->p);
}

static mo_status bn_desc_make(bn_desc *d, mo_dtype dt, int M, int C) {
    const cudnnDataType_t ty = dt == MO_F16 ? CUDNN_DATA_HALF : dt == MO_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&d->x));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&d->p));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NHWC, ty, M, C, 1, 1));
    CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(d->p, d->x, CUDNN_BATCHNORM_SPATIAL)); // fp32 for 16-bit data
    return MO_OK;
}

// A failure names the op and its shape before cuDNN's message.
static mo_status bn_context(mo_status st, const char *what, mo_dtype dt, int M, int C) {
    if (st == MO_OK) return st;
    char why[1024];
    snprintf(why, sizeof why, "%s", mo_errmsg());
    return MO_FAIL(st, "batchnorm %s (%s, M %d C %d, NHWC (M, C, 1, 1) spatial): %s", what, mo_dtype_name(dt), M, C,
                   why);
}

mo_status batchnorm_forward_cuda(mo_ctx *c, mo_dtype dt, void *out, float *mean, float *rstd, float *run_mean,
                                 float *run_var, const void *in, const float *gamma, const float *beta,
                                 const void *res, int M, int C, float momentum, int relu) {
    if (!c->bn_cudnn)
        return bn_context(bn_own_forward_cuda(c, dt, out, mean, rstd, run_mean, run_var, in, gamma, beta, res, M, C,
                                              momentum, relu), "forward", dt, M, C);
    void *h;
    MO_TRY(mo_dnn_handle(c, &h));
    bn_desc d = {0};
    mo_status st = bn_desc_make(&d, dt, M, C);
    const float one = 1.0f, zero = 0.0f;
    if (st == MO_OK)
        CUDNN_CHECK_GOTO(st, cudnnBatchNormalizationForwardTraining((cudnnHandle_t)h, CUDNN_BATCHNORM_SPATIAL, &one,
                                                                    &zero, d.x, in, d.x, out, d.p, gamma, beta,
                                                                    (double)momentum, run_mean, run_var, MO_BN_EPS,
                                                                    mean, rstd), done);
    const size_t n = (size_t)M * C;
    if (st == MO_OK && res) // the residual add as the unfused step did it
        st = dt == MO_F32 ? residual_forward_cuda(c, (float *)out, (const float *)out, (const float *)res, n)
                          : residual_forward_mixed_cuda(c, dt, out, out, res, n);
    if (st == MO_OK && relu) st = relu_forward_cuda(c, dt, out, out, n);
done:
    bn_desc_free(&d);
    return bn_context(st, "forward", dt, M, C);
}

// dgamma, dbeta accumulate: betaParamDiff 1. mask != NULL: dout is masked in place by mask > 0 first.
mo_status batchnorm_backward_cuda(mo_ctx *c, mo_dtype dt, void *din, float *dgamma, float *dbeta, void *dout,
                                  const void *mask, const void *in, const float *gamma, const float *mean,
                                  const float *rstd, int M, int C) {
    if (!c->bn_cudnn)
        return bn_context(bn_own_backward_cuda(c, dt, din, dgamma, dbeta, dout, mask, in, gamma, NULL, mean, rstd, M,
                                               C),
                          "backward", dt, M, C);
    if (mask) MO_TRY(relu_backward_cuda(c, dt, dout, dout, mask, (size_t)M * C));
    void *h;
    MO_TRY(mo_dnn_handle(c, &h));
    bn_desc d = {0};
    mo_status st = bn_desc_make(&d, dt, M, C);
    const float one = 1.0f, zero = 0.0f;
    if (st == MO_OK)
        CUDNN_CHECK_GOTO(st, cudnnBatchNormalizationBackward((cudnnHandle_t)h, CUDNN_BATCHNORM_SPATIAL, &one, &zero,
                                                             &one, &one, d.x, in, d.x, dout, d.x, din, d.p, gamma,
                                                             dgamma, dbeta, MO_BN_EPS, mean, rstd), done);
done:
    bn_desc_free(&d);
    return bn_context(st, "backward", dt, M, C);
}

// The ReLU's mask recomputed from in, gamma and beta (mo_batchnorm_relu_backward_remask, which refuses
// MEMOPT_BN=cudnn): the own kernels, whose forward computed the output the mask stands for; dout only read
mo_status batchnorm_relu_remask_backward_cuda(mo_ctx *c, mo_dtype dt, void *din, float *dgamma, float *dbeta,
                                              const void *dout, const void *in, const float *gamma, const float *beta,
                                              const float *mean, const float *rstd, int M, int C) {
    return bn_context(bn_own_backward_cuda(c, dt, din, dgamma, dbeta, (void *)dout, NULL, in, gamma, beta, mean, rstd,
                                           M, C),
                      "backward", dt, M, C);
}
