// Residual add and gradient accumulation: plain-C reference and the dispatchers.
#include "residual.h"

#include "ops.h"
#include "cost.h"

mo_status residual_forward_cpu(float *out, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
    return MO_OK;
}

mo_status accumulate_cpu(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
    return MO_OK;
}

mo_status mo_residual_forward(mo_ctx *c, float *out, const float *a, const float *b, size_t n) {
    mo_cost_record(c, "residual", MO_COST_MEMORY, (double)n, 4 * 3.0 * n);
    switch (c->backend) {
    case MO_BACKEND_CPU: return residual_forward_cpu(out, a, b, n);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return residual_forward_cuda(c, out, a, b, n);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "residual_forward: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "residual_forward: unknown backend %d", (int)c->backend);
}

mo_status mo_accumulate(mo_ctx *c, float *dst, const float *src, size_t n) {
    mo_cost_record(c, "accumulate", MO_COST_MEMORY, (double)n, 4 * 3.0 * n);
    switch (c->backend) {
    case MO_BACKEND_CPU: return accumulate_cpu(dst, src, n);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return accumulate_cuda(c, dst, src, n);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "accumulate: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "accumulate: unknown backend %d", (int)c->backend);
}
