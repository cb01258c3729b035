// Residual add and gradient accumulation with 16-bit tensors (ops_mixed.h): plain-C reference (one fp32
// add of the exactly converted operands, rounded once) and the dispatchers.
#include "ops.h"
#include "ops_mixed.h"
#include "ops_mixed_impl.h"
#include "cost.h"

mo_status residual_forward_mixed_cpu(mo_dtype dt, void *out, const void *a, const void *b, size_t n) {
    for (size_t i = 0; i < n; i++) mixed_st(dt, out, i, mixed_ld(dt, a, i) + mixed_ld(dt, b, i));
    return MO_OK;
}

mo_status mo_residual_forward_mixed(mo_ctx *c, mo_dtype dt, void *out, const void *a, const void *b, size_t n) {
    if (dt == MO_F32) return mo_residual_forward(c, (float *)out, (const float *)a, (const float *)b, n);
    MO_TRY(mixed_check_dtype(dt, "residual_forward_mixed"));
    mo_cost_record(c, "residual", MO_COST_MEMORY, (double)n, mo_dtype_size(dt) * 3.0 * n);
    switch (c->backend) {
    case MO_BACKEND_CPU: return residual_forward_mixed_cpu(dt, out, a, b, n);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return residual_forward_mixed_cuda(c, dt, out, a, b, n);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "residual_forward_mixed: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "residual_forward_mixed: unknown backend %d", (int)c->backend);
}

// dst += src is out = dst + src with out aliasing dst (each element read, then written, by one thread).
mo_status mo_accumulate_mixed(mo_ctx *c, mo_dtype dt, void *dst, const void *src, size_t n) {
    if (dt == MO_F32) return mo_accumulate(c, (float *)dst, (const float *)src, n);
    MO_TRY(mixed_check_dtype(dt, "accumulate_mixed"));
    mo_cost_record(c, "accumulate", MO_COST_MEMORY, (double)n, mo_dtype_size(dt) * 3.0 * n);
    switch (c->backend) {
    case MO_BACKEND_CPU: return residual_forward_mixed_cpu(dt, dst, dst, src, n);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return residual_forward_mixed_cuda(c, dt, dst, dst, src, n);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "accumulate_mixed: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "accumulate_mixed: unknown backend %d", (int)c->backend);
}
