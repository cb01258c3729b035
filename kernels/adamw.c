// AdamW: plain-C reference in float (as karpathy/llm.c train_gpt2.c gpt2_update) and the dispatcher.
// Built as ISO C11 (-std=c11): gcc does not contract a*b+c into an FMA there, so each line below is the
// sequence of correctly rounded float operations the cuda kernel reproduces with __f*_rn intrinsics.
#include "adamw.h"

#include <math.h>
#include "ops.h"
#include "cost.h"

float adamw_bias_correction(float beta, int t) { return 1.0f - powf(beta, (float)t); }

mo_status adamw_cpu(float *param, const float *grad, float *m, float *v, size_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, int t, float grad_scale) {
    float bc1 = adamw_bias_correction(beta1, t);
    float bc2 = adamw_bias_correction(beta2, t);
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        float mhat = mi / bc1;
        float vhat = vi / bc2;
        m[i] = mi;
        v[i] = vi;
        param[i] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * param[i]);
    }
    return MO_OK;
}

mo_status mo_adamw(mo_ctx *c, float *param, const float *grad, float *m, float *v, size_t n, float lr,
                   float beta1, float beta2, float eps, float weight_decay, int t, float grad_scale) {
    if (t < 1) return MO_FAIL(MO_ERR_INVALID, "adamw: step t=%d must be >= 1", t);
    mo_cost_record(c, "adamw", MO_COST_MEMORY, 12.0 * n, 28.0 * n); // p, g, m, v read; p, m, v written
    switch (c->backend) {
    case MO_BACKEND_CPU:
        return adamw_cpu(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return adamw_cuda(c, param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "adamw: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "adamw: unknown backend %d", (int)c->backend);
}
