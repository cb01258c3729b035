// Fused (flash-style) causal attention with 16-bit activations: plain-C references and the
// mo_attention_fused_*_mixed dispatchers. The references follow the math of the kernels, not their
// tiling, except where the tiling decides a rounding: the forward walks the key tiles of
// MO_ATTN_FM_KEY_TILE keys with an online max, as the kernel does, so P is rounded relative to
// the same running max (attention_fused_mixed.h). Inputs converted to fp32 (exact), sums in double,
// 16-bit roundings at the kernel's points.
#include "attention_fused_mixed.h"

#include <math.h>
#include <stdlib.h>
#include "attention.h"
#include "attention_cudnn.h"
#include "attention_fused.h"
#include "matmul_mixed.h"
#include "ops.h"
#include "cost.h"

size_t mo_attention_fused_forward_mixed_scratch_bytes(int B, int T, int C, int NH) {
    (void)B; (void)T; (void)C; (void)NH;
    return 0;
}

size_t mo_attention_fused_backward_mixed_scratch_bytes(int B, int T, int C, int NH) {
    (void)C;
    if (B <= 0 || T <= 0 || NH <= 0) return 0;
    return (size_t)B * NH * T * sizeof(float);
}

static mo_status check_args(const char *op, mo_dtype dt, int B, int T, int C, int NH) {
    if (!mo_mmg_is_16bit(dt))
        return MO_FAIL(MO_ERR_INVALID, "%s: dtype %s is not fp16, bf16 or fp32", op, mo_dtype_name(dt));
    MO_TRY(attention_check_shape(op, B, T, C, NH));
    const int HS = C / NH;
    if (HS > MO_ATTN_FUSED_MAX_HS || HS % 8 != 0)
        return MO_FAIL(MO_ERR_UNSUPPORTED,
                       "%s: head size %d is not supported by 16-bit fused attention (a multiple of 8 up to %d; "
                       "use --attn materialized)",
                       op, HS, MO_ATTN_FUSED_MAX_HS);
    return MO_OK;
}

static double dot_f64(const float *a, const float *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

// v rounded to fp32, then to dt, and back (the GPU rounds its fp32 value to dt)
static double rnd(mo_dtype dt, double v) {
    const float f = (float)v;
    return dt == MO_BF16 ? mo_bf16_to_f32(mo_f32_to_bf16(f)) : mo_f16_to_f32(mo_f32_to_f16(f));
}

mo_status attention_fused_forward_mixed_cpu(mo_dtype dt, void *out, float *lse, const void *qkv, int B, int T, int C,
                                            int NH) {
    const int HS = C / NH, KT = MO_ATTN_FM_KEY_TILE;
    const float scale = 1.0f / sqrtf((float)HS);
    const size_t C3 = 3 * (size_t)C;
    float *x = mo_mmg_to_f32_alloc(dt, qkv, (size_t)B * T * C3);
    double *s = malloc((size_t)T * sizeof *s); // one row of scores
    double *acc = malloc((size_t)HS * sizeof *acc);
    if (!x || !s || !acc) {
        free(x); free(s); free(acc);
        return MO_FAIL(MO_ERR_OOM, "attention_fused_forward_mixed_cpu: host out of memory");
    }
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = x + ((size_t)b * T + t) * C3 + (size_t)h * HS;
                for (int t2 = 0; t2 <= t; t2++)
                    s[t2] = (double)scale * dot_f64(q, x + ((size_t)b * T + t2) * C3 + C + (size_t)h * HS, HS);
                for (int i = 0; i < HS; i++) acc[i] = 0;
                double m = -INFINITY, l = 0;
                for (int k0 = 0; k0 <= t; k0 += KT) { // the kernel's key tiles, in its order
                    const int k1 = k0 + KT - 1 < t ? k0 + KT - 1 : t;
                    double mt = -INFINITY;
                    for (int t2 = k0; t2 <= k1; t2++) mt = s[t2] > mt ? s[t2] : mt;
                    const double mnew = mt > m ? mt : m;
                    const double corr = exp(m - mnew); // 0 on the first tile (m = -inf)
                    l *= corr;
                    for (int i = 0; i < HS; i++) acc[i] *= corr;
                    for (int t2 = k0; t2 <= k1; t2++) {
                        const double p = exp(s[t2] - mnew);
                        l += p;                     // unrounded
                        const double pr = rnd(dt, p); // rounded before P @ V
                        const float *v = x + ((size_t)b * T + t2) * C3 + 2 * (size_t)C + (size_t)h * HS;
                        for (int i = 0; i < HS; i++) acc[i] += pr * v[i];
                    }
                    m = mnew;
                }
                const size_t orow = ((size_t)b * T + t) * C + (size_t)h * HS;
                for (int i = 0; i < HS; i++) mo_mmg_store(dt, out, orow + i, (float)(acc[i] / l));
                lse[((size_t)b * NH + h) * T + t] = (float)(m + log(l));
            }
    free(x); free(s); free(acc);
    return MO_OK;
}

mo_status attention_fused_backward_mixed_cpu(mo_dtype dt, void *dqkv, float *Dbuf, const void *dout, const void *qkv,
                                             const void *out, const float *lse, int B, int T, int C, int NH) {
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const size_t C3 = 3 * (size_t)C;
    float *x = mo_mmg_to_f32_alloc(dt, qkv, (size_t)B * T * C3);
    float *dy = mo_mmg_to_f32_alloc(dt, dout, (size_t)B * T * C);
    float *o = mo_mmg_to_f32_alloc(dt, out, (size_t)B * T * C);
    double *dk = malloc((size_t)T * HS * sizeof *dk), *dv = malloc((size_t)T * HS * sizeof *dv); // one head
    double *dq = malloc((size_t)HS * sizeof *dq);
    if (!x || !dy || !o || !dk || !dv || !dq) {
        free(x); free(dy); free(o); free(dk); free(dv); free(dq);
        return MO_FAIL(MO_ERR_OOM, "attention_fused_backward_mixed_cpu: host out of memory");
    }
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
#define QKV_ROW(t, part) (x + ((size_t)b * T + (t)) * C3 + (size_t)(part) * C + (size_t)h * HS)
#define HEAD_ROW(p, t) ((p) + ((size_t)b * T + (t)) * C + (size_t)h * HS)
#define DQKV_OFF(t, part) (((size_t)b * T + (t)) * C3 + (size_t)(part) * C + (size_t)h * HS)
            const float *L = lse + ((size_t)b * NH + h) * T; // (T)
            float *D = Dbuf + ((size_t)b * NH + h) * T;      // (T), fp32 as the kernel's scratch
            for (int t = 0; t < T; t++) D[t] = (float)dot_f64(HEAD_ROW(dy, t), HEAD_ROW(o, t), HS);
            for (size_t i = 0; i < (size_t)T * HS; i++) dk[i] = dv[i] = 0;
            for (int t = 0; t < T; t++) {
                const float *q = QKV_ROW(t, 0), *g = HEAD_ROW(dy, t);
                for (int i = 0; i < HS; i++) dq[i] = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = QKV_ROW(t2, 1);
                    const double p = exp((double)scale * dot_f64(q, k, HS) - (double)L[t]);
                    const double ds = p * (dot_f64(g, QKV_ROW(t2, 2), HS) - (double)D[t]);
                    const double pr = rnd(dt, p), dsr = rnd(dt, ds); // rounded before the dV, dK, dQ mmas
                    double *dkr = dk + (size_t)t2 * HS, *dvr = dv + (size_t)t2 * HS;
                    for (int i = 0; i < HS; i++) {
                        dvr[i] += pr * g[i];
                        dkr[i] += dsr * q[i];
                        dq[i] += dsr * k[i];
                    }
                }
                for (int i = 0; i < HS; i++) mo_mmg_store(dt, dqkv, DQKV_OFF(t, 0) + i, (float)(scale * dq[i]));
            }
            for (int t2 = 0; t2 < T; t2++)
                for (int i = 0; i < HS; i++) {
                    mo_mmg_store(dt, dqkv, DQKV_OFF(t2, 1) + i, (float)(scale * dk[(size_t)t2 * HS + i]));
                    mo_mmg_store(dt, dqkv, DQKV_OFF(t2, 2) + i, (float)dv[(size_t)t2 * HS + i]);
                }
#undef QKV_ROW
#undef HEAD_ROW
#undef DQKV_OFF
        }
    free(x); free(dy); free(o); free(dk); free(dv); free(dq);
    return MO_OK;
}

mo_status mo_attention_fused_forward_mixed(mo_ctx *c, mo_dtype dt, void *out, float *lse, const void *qkv, int B,
                                           int T, int C, int NH) {
    if (dt == MO_F32) return mo_attention_fused_forward(c, (float *)out, lse, (const float *)qkv, B, T, C, NH);
    if (c->attn_impl == MO_ATTN_IMPL_CUDNN) return mo_attention_cudnn_forward(c, dt, out, lse, qkv, B, T, C, NH);
    MO_TRY(check_args("attention_fused_forward_mixed", dt, B, T, C, NH));
    mo_cost_attention_fused_forward(c, (int)mo_dtype_size(dt), B, T, C, NH);
    switch (c->backend) {
    case MO_BACKEND_CPU: return attention_fused_forward_mixed_cpu(dt, out, lse, qkv, B, T, C, NH);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return attention_fused_forward_mixed_cuda(c, dt, out, lse, qkv, B, T, C, NH);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "attention_fused_forward_mixed: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "attention_fused_forward_mixed: unknown backend %d", (int)c->backend);
}

mo_status mo_attention_fused_backward_mixed(mo_ctx *c, mo_dtype dt, void *dqkv, const void *dout, const void *qkv,
                                            const void *out, const float *lse, int B, int T, int C, int NH) {
    if (dt == MO_F32)
        return mo_attention_fused_backward(c, (float *)dqkv, (const float *)dout, (const float *)qkv,
                                           (const float *)out, lse, B, T, C, NH);
    if (c->attn_impl == MO_ATTN_IMPL_CUDNN)
        return mo_attention_cudnn_backward(c, dt, dqkv, dout, qkv, out, lse, B, T, C, NH);
    MO_TRY(check_args("attention_fused_backward_mixed", dt, B, T, C, NH));
    void *scratch = NULL;
    MO_TRY(mo_scratch_alloc(c, mo_attention_fused_backward_mixed_scratch_bytes(B, T, C, NH), &scratch));
    mo_status st;
    mo_cost_attention_fused_backward(c, (int)mo_dtype_size(dt), B, T, C, NH);
    switch (c->backend) {
    case MO_BACKEND_CPU:
        st = attention_fused_backward_mixed_cpu(dt, dqkv, (float *)scratch, dout, qkv, out, lse, B, T, C, NH);
        break;
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        st = attention_fused_backward_mixed_cuda(c, dt, dqkv, dout, qkv, out, lse, scratch, B, T, C, NH);
#else
        st = MO_FAIL(MO_ERR_UNSUPPORTED, "attention_fused_backward_mixed: this build has no CUDA");
#endif
        break;
    case MO_BACKEND_DRY: st = MO_OK; break;
    default:
        st = MO_FAIL(MO_ERR_INTERNAL, "attention_fused_backward_mixed: unknown backend %d", (int)c->backend);
        break;
    }
    mo_status st2 = mo_scratch_free(c, scratch);
    return st != MO_OK ? st : st2;
}
