// The AdamW element update shared by adamw.cu and adamw_mixed.cu (the fp32 master of the mixed step is
// updated by the very same operations as mo_adamw's parameters). See adamw.cu: every operation is an
// explicit round-to-nearest intrinsic, so the kernels match the cpu reference bit for bit.
#ifndef MEMOPT_ADAMW_DEV_CUH
#define MEMOPT_ADAMW_DEV_CUH

#include <cuda_runtime.h>
#include "adamw.h"

struct adamw_hp {
    float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay, bc1, bc2, grad_scale;
};

__device__ __forceinline__ void adamw_one(float &p, float grad, float &m, float &v, const adamw_hp &h) {
    float g = __fmul_rn(grad, h.grad_scale);
    float mi = __fadd_rn(__fmul_rn(h.beta1, m), __fmul_rn(h.one_minus_beta1, g));
    float vi = __fadd_rn(__fmul_rn(h.beta2, v), __fmul_rn(__fmul_rn(h.one_minus_beta2, g), g));
    float mhat = __fdiv_rn(mi, h.bc1);
    float vhat = __fdiv_rn(vi, h.bc2);
    m = mi;
    v = vi;
    float upd = __fadd_rn(__fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), h.eps)), __fmul_rn(h.weight_decay, p));
    p = __fsub_rn(p, __fmul_rn(h.lr, upd));
}

// The hyperparameters as the kernels take them; 1 - beta in host float arithmetic, as the cpu's.
static inline adamw_hp adamw_make_hp(float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                                     float grad_scale) {
    adamw_hp h;
    h.lr = lr;
    h.beta1 = beta1;
    h.beta2 = beta2;
    h.one_minus_beta1 = 1.0f - beta1;
    h.one_minus_beta2 = 1.0f - beta2;
    h.eps = eps;
    h.weight_decay = weight_decay;
    h.bc1 = adamw_bias_correction(beta1, t);
    h.bc2 = adamw_bias_correction(beta2, t);
    h.grad_scale = grad_scale;
    return h;
}

#endif
