// AdamW for mixed precision (ops_mixed.h): the fp32 master updated exactly as mo_adamw, and its 16-bit
// working copy written in the same step. Plain-C reference and the dispatcher.
#include "adamw.h"
#include "ops.h"
#include "ops_mixed.h"
#include "ops_mixed_impl.h"
#include "cost.h"

mo_status adamw_mixed_cpu(mo_dtype dt, float *master, void *param16, const float *grad, float *m, float *v, size_t n,
                          float lr, float beta1, float beta2, float eps, float weight_decay, int t, float grad_scale) {
    MO_TRY(adamw_cpu(master, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale));
    for (size_t i = 0; i < n; i++) mixed_st(dt, param16, i, master[i]);
    return MO_OK;
}

mo_status mo_adamw_mixed(mo_ctx *c, mo_dtype dt, float *master, void *param16, const float *grad, float *m,
                         float *v, size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                         int t, float grad_scale) {
    if (dt == MO_F32) return mo_adamw(c, master, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale);
    MO_TRY(mixed_check_dtype(dt, "adamw_mixed"));
    if (t < 1) return MO_FAIL(MO_ERR_INVALID, "adamw_mixed: step t=%d must be >= 1", t);
    mo_cost_record(c, "adamw", MO_COST_MEMORY, 12.0 * n, 28.0 * n + 6.0 * n); // and the 16-bit copy
    switch (c->backend) {
    case MO_BACKEND_CPU:
        return adamw_mixed_cpu(dt, master, param16, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, t,
                               grad_scale);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return adamw_mixed_cuda(c, dt, master, param16, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, t,
                                grad_scale);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "adamw_mixed: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "adamw_mixed: unknown backend %d", (int)c->backend);
}
