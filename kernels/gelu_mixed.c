// GELU with 16-bit activations (ops_mixed.h): plain-C reference (gelu.c's formula, called on each
// exactly converted element, the result rounded once) and the dispatchers.
#include "gelu.h"
#include "ops.h"
#include "ops_mixed.h"
#include "ops_mixed_impl.h"
#include "cost.h"

mo_status gelu_forward_mixed_cpu(mo_dtype dt, void *out, const void *inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = mixed_ld(dt, inp, i), y;
        gelu_forward_cpu(&y, &x, 1);
        mixed_st(dt, out, i, y);
    }
    return MO_OK;
}

mo_status gelu_backward_mixed_cpu(mo_dtype dt, void *dinp, const void *inp, const void *dout, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = mixed_ld(dt, inp, i), d = mixed_ld(dt, dout, i), g;
        gelu_backward_cpu(&g, &x, &d, 1);
        mixed_st(dt, dinp, i, g);
    }
    return MO_OK;
}

mo_status mo_gelu_forward_mixed(mo_ctx *c, mo_dtype dt, void *out, const void *inp, size_t n) {
    if (dt == MO_F32) return mo_gelu_forward(c, (float *)out, (const float *)inp, n);
    MO_TRY(mixed_check_dtype(dt, "gelu_forward_mixed"));
    mo_cost_record(c, "gelu_fwd", MO_COST_MEMORY, 8.0 * n, mo_dtype_size(dt) * 2.0 * n);
    switch (c->backend) {
    case MO_BACKEND_CPU: return gelu_forward_mixed_cpu(dt, out, inp, n);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return gelu_forward_mixed_cuda(c, dt, out, inp, n);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "gelu_forward_mixed: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "gelu_forward_mixed: unknown backend %d", (int)c->backend);
}

mo_status mo_gelu_backward_mixed(mo_ctx *c, mo_dtype dt, void *dinp, const void *inp, const void *dout, size_t n) {
    if (dt == MO_F32) return mo_gelu_backward(c, (float *)dinp, (const float *)inp, (const float *)dout, n);
    MO_TRY(mixed_check_dtype(dt, "gelu_backward_mixed"));
    mo_cost_record(c, "gelu_bwd", MO_COST_MEMORY, 8.0 * n, mo_dtype_size(dt) * 3.0 * n);
    switch (c->backend) {
    case MO_BACKEND_CPU: return gelu_backward_mixed_cpu(dt, dinp, inp, dout, n);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return gelu_backward_mixed_cuda(c, dt, dinp, inp, dout, n);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "gelu_backward_mixed: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "gelu_backward_mixed: unknown backend %d", (int)c->backend);
}
