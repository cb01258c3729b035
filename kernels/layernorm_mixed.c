// LayerNorm with 16-bit activations and weights (ops_mixed.h): plain-C reference (the float operations
// of layernorm.c on exactly converted inputs, outputs rounded once) and the dispatchers.
#include <math.h>

#include "layernorm.h"
#include "ops.h"
#include "ops_mixed.h"
#include "ops_mixed_impl.h"
#include "cost.h"

mo_status layernorm_forward_mixed_cpu(mo_dtype dt, void *out, float *mean, float *rstd, const void *inp,
                                      const void *weight, const void *bias, int N, int C) {
    for (int r = 0; r < N; r++) {
        size_t x = (size_t)r * C;
        float m = 0.0f;
        for (int i = 0; i < C; i++) m += mixed_ld(dt, inp, x + i);
        m = m / C;
        float v = 0.0f;
        for (int i = 0; i < C; i++) {
            float d = mixed_ld(dt, inp, x + i) - m;
            v += d * d;
        }
        v = v / C;
        float s = 1.0f / sqrtf(v + MO_LAYERNORM_EPS);
        for (int i = 0; i < C; i++) {
            float n = s * (mixed_ld(dt, inp, x + i) - m);
            mixed_st(dt, out, x + i, n * mixed_ld(dt, weight, i) + mixed_ld(dt, bias, i));
        }
        if (mean) mean[r] = m;
        if (rstd) rstd[r] = s;
    }
    return MO_OK;
}

mo_status layernorm_backward_mixed_cpu(mo_dtype dt, void *dinp, float *dweight, float *dbias, float *dsum,
                                       const void *dout, const void *inp, const void *weight, const float *mean,
                                       const float *rstd, int N, int C) {
    for (int r = 0; r < N; r++) {
        size_t o = (size_t)r * C;
        float mu = mean[r], rs = rstd[r];
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int i = 0; i < C; i++) {
            float norm = (mixed_ld(dt, inp, o + i) - mu) * rs;
            float dnorm = mixed_ld(dt, weight, i) * mixed_ld(dt, dout, o + i);
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean = dnorm_mean / C;
        dnorm_norm_mean = dnorm_norm_mean / C;
        for (int i = 0; i < C; i++) {
            float dy = mixed_ld(dt, dout, o + i);
            float norm = (mixed_ld(dt, inp, o + i) - mu) * rs;
            float dnorm = mixed_ld(dt, weight, i) * dy;
            dbias[i] += dy;
            dweight[i] += norm * dy;
            float dval = 0.0f;
            dval += dnorm;
            dval -= dnorm_mean;
            dval -= norm * dnorm_norm_mean;
            dval *= rs;
            mixed_st(dt, dinp, o + i, mixed_ld(dt, dinp, o + i) + dval);
        }
    }
    // dsum: each column of the new dinp summed in double in row order, added once (matmul_backward_cpu's dbias)
    if (dsum)
        for (int i = 0; i < C; i++) {
            double s = 0;
            for (int r = 0; r < N; r++) s += mixed_ld(dt, dinp, (size_t)r * C + i);
            dsum[i] = (float)((double)dsum[i] + s);
        }
    return MO_OK;
}

mo_status mo_layernorm_forward_mixed(mo_ctx *c, mo_dtype dt, void *out, float *mean, float *rstd, const void *inp,
                                     const void *weight, const void *bias, int N, int C) {
    if (dt == MO_F32)
        return mo_layernorm_forward(c, (float *)out, mean, rstd, (const float *)inp, (const float *)weight,
                                    (const float *)bias, N, C);
    MO_TRY(mixed_check_dtype(dt, "layernorm_forward_mixed"));
    if (N <= 0 || C <= 0) return MO_FAIL(MO_ERR_INVALID, "layernorm_forward_mixed: bad shape N=%d C=%d", N, C);
    mo_cost_record(c, "layernorm_fwd", MO_COST_MEMORY, 8.0 * N * C, mo_dtype_size(dt) * 2.0 * N * C + 8.0 * N);
    switch (c->backend) {
    case MO_BACKEND_CPU: return layernorm_forward_mixed_cpu(dt, out, mean, rstd, inp, weight, bias, N, C);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return layernorm_forward_mixed_cuda(c, dt, out, mean, rstd, inp, weight, bias, N, C);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "layernorm_forward_mixed: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "layernorm_forward_mixed: unknown backend %d", (int)c->backend);
}

// The scratch of the summing backward: (G, 3, C) partial rows in the bytes of the plain one's (G, 2, C)
// (layernorm_mixed.cu takes fewer blocks), at least one row: the peak moves only where N <= 8.
size_t mo_layernorm_backward_sum_scratch_bytes(int N, int C) {
    if (N <= 0 || C <= 0) return 0;
    size_t plain = mo_layernorm_backward_scratch_bytes(N, C), one = (size_t)3 * C * sizeof(float);
    return plain > one ? plain : one;
}

static mo_status backward_mixed(const char *op, mo_ctx *c, mo_dtype dt, void *dinp, float *dweight, float *dbias,
                                float *dsum, const void *dout, const void *inp, const void *weight, const float *mean,
                                const float *rstd, int N, int C) {
    MO_TRY(mixed_check_dtype(dt, op));
    if (N <= 0 || C <= 0) return MO_FAIL(MO_ERR_INVALID, "%s: bad shape N=%d C=%d", op, N, C);
    if (dsum && C > MO_LN_DSUM_MAX_C)
        return MO_FAIL(MO_ERR_INVALID, "%s: C=%d above the %d the column sums take", op, C, MO_LN_DSUM_MAX_C);
    if (dsum) c->ln_dsum_runs++;
    const size_t sb = dsum ? mo_layernorm_backward_sum_scratch_bytes(N, C) : mo_layernorm_backward_scratch_bytes(N, C);
    void *scratch = NULL;
    MO_TRY(mo_scratch_alloc(c, sb, &scratch));
    mo_status st;
    // the sums read nothing more from memory: they are kept in the kernel's shared slices
    mo_cost_record(c, "layernorm_bwd", MO_COST_MEMORY, (dsum ? 13.0 : 12.0) * N * C,
                   mo_dtype_size(dt) * 4.0 * N * C + 8.0 * N);
    switch (c->backend) {
    case MO_BACKEND_CPU:
        st = layernorm_backward_mixed_cpu(dt, dinp, dweight, dbias, dsum, dout, inp, weight, mean, rstd, N, C);
        break;
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        st = layernorm_backward_mixed_cuda(c, dt, dinp, dweight, dbias, dsum, dout, inp, weight, mean, rstd, scratch,
                                           sb, N, C);
#else
        st = MO_FAIL(MO_ERR_UNSUPPORTED, "%s: this build has no CUDA", op);
#endif
        break;
    case MO_BACKEND_DRY: st = MO_OK; break;
    default: st = MO_FAIL(MO_ERR_INTERNAL, "%s: unknown backend %d", op, (int)c->backend); break;
    }
    mo_status st2 = mo_scratch_free(c, scratch);
    return st != MO_OK ? st : st2;
}

mo_status mo_layernorm_backward_mixed(mo_ctx *c, mo_dtype dt, void *dinp, float *dweight, float *dbias,
                                      const void *dout, const void *inp, const void *weight, const float *mean,
                                      const float *rstd, int N, int C) {
    if (dt == MO_F32)
        return mo_layernorm_backward(c, (float *)dinp, dweight, dbias, (const float *)dout, (const float *)inp,
                                     (const float *)weight, mean, rstd, N, C);
    return backward_mixed("layernorm_backward_mixed", c, dt, dinp, dweight, dbias, NULL, dout, inp, weight, mean,
                          rstd, N, C);
}

mo_status mo_layernorm_backward_sum_mixed(mo_ctx *c, mo_dtype dt, void *dinp, float *dweight, float *dbias, float *dsum,
                                          const void *dout, const void *inp, const void *weight, const float *mean,
                                          const float *rstd, int N, int C) {
    if (!dsum) return MO_FAIL(MO_ERR_INVALID, "layernorm_backward_sum_mixed: dsum is NULL");
    if (dt == MO_F32) return MO_FAIL(MO_ERR_INVALID, "layernorm_backward_sum_mixed: 16-bit dtypes only");
    return backward_mixed("layernorm_backward_sum_mixed", c, dt, dinp, dweight, dbias, dsum, dout, inp, weight, mean,
                          rstd, N, C);
}
