// Precision plumbing of the mixed-precision step (ops_mixed.h): dtype casts (the 16-bit working copy of
// the fp32 master weights, widening copies) and the non-finite check of the fp16 loss scaler. Plain-C
// references and the dispatchers; also the dtype check every mixed dispatcher uses.
#include <string.h>

#include "ops.h"
#include "ops_mixed.h"
#include "ops_mixed_impl.h"
#include "cost.h"

mo_status mixed_check_dtype(mo_dtype dt, const char *op) {
    if (dt == MO_F16 || dt == MO_BF16) return MO_OK;
    return MO_FAIL(MO_ERR_INVALID, "%s: dtype %d is not fp16 or bf16", op, (int)dt);
}

static int cast_dtype_ok(mo_dtype t) { return t == MO_F32 || t == MO_F16 || t == MO_BF16; }

mo_status cast_mixed_cpu(mo_dtype dst_dt, void *dst, mo_dtype src_dt, const void *src, size_t n) {
    if (dst_dt == src_dt) {
        if (n) memcpy(dst, src, n * mo_dtype_size(src_dt));
        return MO_OK;
    }
    for (size_t i = 0; i < n; i++) {
        float f = src_dt == MO_F32 ? ((const float *)src)[i] : mixed_ld(src_dt, src, i);
        if (dst_dt == MO_F32)
            ((float *)dst)[i] = f;
        else
            mixed_st(dst_dt, dst, i, f);
    }
    return MO_OK;
}

mo_status mo_cast_mixed(mo_ctx *c, mo_dtype dst_dt, void *dst, mo_dtype src_dt, const void *src, size_t n) {
    if (!cast_dtype_ok(dst_dt) || !cast_dtype_ok(src_dt))
        return MO_FAIL(MO_ERR_INVALID, "cast_mixed: dtypes %d -> %d (accepted: fp32, fp16, bf16)", (int)src_dt,
                       (int)dst_dt);
    if (n == 0) return MO_OK;
    if (dst_dt == src_dt) return mo_memcpy_d2d(c, dst, src, n * mo_dtype_size(src_dt)); // no-op on dry
    mo_cost_record(c, "cast", MO_COST_MEMORY, 0, (double)n * (mo_dtype_size(src_dt) + mo_dtype_size(dst_dt)));
    switch (c->backend) {
    case MO_BACKEND_CPU: return cast_mixed_cpu(dst_dt, dst, src_dt, src, n);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return cast_mixed_cuda(c, dst_dt, dst, src_dt, src, n);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "cast_mixed: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "cast_mixed: unknown backend %d", (int)c->backend);
}

size_t mo_nonfinite_scratch_bytes(size_t n) { return n ? sizeof(int) : 0; }

// inf or NaN: the exponent field all ones (a bit test, independent of any floating-point mode)
mo_status nonfinite_cpu(const float *g, size_t n, int *out) {
    int bad = 0;
    for (size_t i = 0; i < n && !bad; i++) {
        uint32_t u;
        memcpy(&u, g + i, sizeof u);
        bad = (u & 0x7f800000u) == 0x7f800000u;
    }
    *out = bad;
    return MO_OK;
}

mo_status mo_nonfinite(mo_ctx *c, const float *g, size_t n, int *out_host) {
    void *scratch = NULL;
    MO_TRY(mo_scratch_alloc(c, mo_nonfinite_scratch_bytes(n), &scratch));
    mo_status st;
    mo_cost_record(c, "nonfinite", MO_COST_MEMORY, (double)n, 4.0 * n);
    switch (c->backend) {
    case MO_BACKEND_CPU: st = nonfinite_cpu(g, n, out_host); break;
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        st = nonfinite_cuda(c, g, scratch, n, out_host);
#else
        st = MO_FAIL(MO_ERR_UNSUPPORTED, "nonfinite: this build has no CUDA");
#endif
        break;
    case MO_BACKEND_DRY:
        *out_host = 0;
        st = MO_OK;
        break;
    default: st = MO_FAIL(MO_ERR_INTERNAL, "nonfinite: unknown backend %d", (int)c->backend); break;
    }
    mo_status st2 = mo_scratch_free(c, scratch);
    return st != MO_OK ? st : st2;
}
