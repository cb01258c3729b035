// Mixed-precision materialized causal attention: plain-C references (the loops of attention.c on
// fp32 copies of the 16-bit inputs, sums in double, with the 16-bit roundings of the GPU path at the
// same points; see attention_mixed.h) and the mo_attention_*_mixed dispatchers.
#include "attention_mixed.h"

#include <math.h>
#include <stdlib.h>
#include "attention.h"
#include "matmul_mixed.h"
#include "ops_mixed_gemm.h"
#include "cost.h"

size_t mo_attention_forward_mixed_scratch_bytes(mo_dtype dt, int B, int T, int C, int NH) {
    (void)NH;
    if (B <= 0 || T <= 0 || C <= 0) return 0;
    return 3 * (size_t)B * T * C * mo_dtype_size(dt);
}

size_t mo_attention_backward_mixed_scratch_bytes(mo_dtype dt, int B, int T, int C, int NH) {
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return 0;
    return (attention_mixed_datt_offset(B, T, C) + (size_t)B * NH * T * T) * mo_dtype_size(dt);
}

static double dot_f64(const float *a, const float *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

// v rounded to dt and back
static float rnd(mo_dtype dt, double v) {
    const float f = (float)v;
    return dt == MO_BF16 ? mo_bf16_to_f32(mo_f32_to_bf16(f)) : mo_f16_to_f32(mo_f32_to_f16(f));
}

mo_status attention_forward_mixed_cpu(mo_dtype dt, void *out, void *att, const void *qkv, int B, int T, int C,
                                      int NH) {
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const size_t C3 = 3 * (size_t)C;
    float *x = mo_mmg_to_f32_alloc(dt, qkv, (size_t)B * T * C3);
    float *s = malloc(((size_t)T + HS) * sizeof *s); // one row of scores / probabilities, one output row
    double *acc = malloc((size_t)HS * sizeof *acc);
    if (!x || !s || !acc) {
        free(x); free(s); free(acc);
        return MO_FAIL(MO_ERR_OOM, "attention_forward_mixed_cpu: host out of memory");
    }
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = x + ((size_t)b * T + t) * C3 + (size_t)h * HS;
                const size_t arow = (((size_t)b * NH + h) * T + t) * T;
                // scores: the GEMM's alpha = scale applied to the fp32 sum, rounded to dt
                float mx = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = x + ((size_t)b * T + t2) * C3 + C + (size_t)h * HS;
                    s[t2] = rnd(dt, (double)scale * dot_f64(q, k, HS));
                    if (s[t2] > mx) mx = s[t2];
                }
                double sum = 0;
                for (int t2 = 0; t2 <= t; t2++) sum += exp((double)s[t2] - mx);
                for (int t2 = 0; t2 <= t; t2++) s[t2] = rnd(dt, exp((double)s[t2] - mx) / sum);
                for (int t2 = 0; t2 < T; t2++) mo_mmg_store(dt, att, arow + t2, t2 <= t ? s[t2] : 0.0f);
                for (int i = 0; i < HS; i++) acc[i] = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v = x + ((size_t)b * T + t2) * C3 + 2 * (size_t)C + (size_t)h * HS;
                    for (int i = 0; i < HS; i++) acc[i] += (double)s[t2] * v[i];
                }
                const size_t orow = ((size_t)b * T + t) * C + (size_t)h * HS;
                for (int i = 0; i < HS; i++) mo_mmg_store(dt, out, orow + i, (float)acc[i]);
            }
    free(x); free(s); free(acc);
    return MO_OK;
}

mo_status attention_backward_mixed_cpu(mo_dtype dt, void *dqkv, void *scratch, const void *dout, const void *qkv,
                                       const void *att, int B, int T, int C, int NH) {
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const size_t C3 = 3 * (size_t)C;
    // dpreatt (dt) in the scratch's datt part, as the GPU path keeps it
    void *P_all = (char *)scratch + attention_mixed_datt_offset(B, T, C) * mo_dtype_size(dt);
    float *x = mo_mmg_to_f32_alloc(dt, qkv, (size_t)B * T * C3);
    float *dy = mo_mmg_to_f32_alloc(dt, dout, (size_t)B * T * C);
    float *g = malloc((size_t)T * sizeof *g);
    double *acc = malloc((size_t)HS * sizeof *acc);
    if (!x || !dy || !g || !acc) {
        free(x); free(dy); free(g); free(acc);
        return MO_FAIL(MO_ERR_OOM, "attention_backward_mixed_cpu: host out of memory");
    }
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const size_t a0 = ((size_t)b * NH + h) * T * T; // (T, T) of this head in att and P
#define A_AT(t, t2) mo_mmg_load(dt, att, a0 + (size_t)(t) * T + (t2))
#define P_AT(t, t2) mo_mmg_load(dt, P_all, a0 + (size_t)(t) * T + (t2))
#define QKV_ROW(t, part) (x + ((size_t)b * T + (t)) * C3 + (size_t)(part) * C + (size_t)h * HS)
#define DOUT_ROW(t) (dy + ((size_t)b * T + (t)) * C + (size_t)h * HS)
#define DQKV_OFF(t, part) (((size_t)b * T + (t)) * C3 + (size_t)(part) * C + (size_t)h * HS)
            for (int t = 0; t < T; t++) {
                double s = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    g[t2] = rnd(dt, dot_f64(DOUT_ROW(t), QKV_ROW(t2, 2), HS)); // datt, rounded as the GEMM's
                    s += (double)A_AT(t, t2) * g[t2];
                }
                for (int t2 = 0; t2 < T; t2++)
                    mo_mmg_store(dt, P_all, a0 + (size_t)t * T + t2,
                                 t2 <= t ? (float)(scale * (double)A_AT(t, t2) * ((double)g[t2] - s)) : 0.0f);
            }
            for (int t = 0; t < T; t++) { // dq[t] = sum_{t2 <= t} P[t, t2] k[t2]
                for (int i = 0; i < HS; i++) acc[i] = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const double p = P_AT(t, t2);
                    const float *k = QKV_ROW(t2, 1);
                    for (int i = 0; i < HS; i++) acc[i] += p * k[i];
                }
                for (int i = 0; i < HS; i++) mo_mmg_store(dt, dqkv, DQKV_OFF(t, 0) + i, (float)acc[i]);
            }
            for (int t2 = 0; t2 < T; t2++) { // dk[t2] = sum_{t >= t2} P[t, t2] q[t]
                for (int i = 0; i < HS; i++) acc[i] = 0;
                for (int t = t2; t < T; t++) {
                    const double p = P_AT(t, t2);
                    const float *q = QKV_ROW(t, 0);
                    for (int i = 0; i < HS; i++) acc[i] += p * q[i];
                }
                for (int i = 0; i < HS; i++) mo_mmg_store(dt, dqkv, DQKV_OFF(t2, 1) + i, (float)acc[i]);
            }
            for (int t2 = 0; t2 < T; t2++) { // dv[t2] = sum_{t >= t2} att[t, t2] dout[t]
                for (int i = 0; i < HS; i++) acc[i] = 0;
                for (int t = t2; t < T; t++) {
                    const double a = A_AT(t, t2);
                    const float *d = DOUT_ROW(t);
                    for (int i = 0; i < HS; i++) acc[i] += a * d[i];
                }
                for (int i = 0; i < HS; i++) mo_mmg_store(dt, dqkv, DQKV_OFF(t2, 2) + i, (float)acc[i]);
            }
#undef A_AT
#undef P_AT
#undef QKV_ROW
#undef DOUT_ROW
#undef DQKV_OFF
        }
    free(x); free(dy); free(g); free(acc);
    return MO_OK;
}

static mo_status check_args(const char *op, mo_dtype dt, int B, int T, int C, int NH) {
    if (!mo_mmg_is_16bit(dt))
        return MO_FAIL(MO_ERR_INVALID, "%s: dtype %s is not a 16-bit type (fp16 or bf16)", op, mo_dtype_name(dt));
    return attention_check_shape(op, B, T, C, NH);
}

mo_status mo_attention_forward_mixed(mo_ctx *c, mo_dtype dt, void *out, void *att, const void *qkv, int B, int T,
                                     int C, int NH) {
    MO_TRY(check_args("attention_forward_mixed", dt, B, T, C, NH));
    void *scratch = NULL;
    MO_TRY(mo_scratch_alloc(c, mo_attention_forward_mixed_scratch_bytes(dt, B, T, C, NH), &scratch));
    mo_status st;
    mo_cost_attention_forward(c, (int)mo_dtype_size(dt), B, T, C, NH);
    switch (c->backend) {
    case MO_BACKEND_CPU: st = attention_forward_mixed_cpu(dt, out, att, qkv, B, T, C, NH); break;
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        st = attention_forward_mixed_cuda(c, dt, out, att, qkv, scratch, B, T, C, NH);
#else
        st = MO_FAIL(MO_ERR_UNSUPPORTED, "attention_forward_mixed: this build has no CUDA");
#endif
        break;
    case MO_BACKEND_DRY: st = MO_OK; break;
    default: st = MO_FAIL(MO_ERR_INTERNAL, "attention_forward_mixed: unknown backend %d", (int)c->backend); break;
    }
    mo_status st2 = mo_scratch_free(c, scratch);
    return st != MO_OK ? st : st2;
}

mo_status mo_attention_backward_mixed(mo_ctx *c, mo_dtype dt, void *dqkv, const void *dout, const void *qkv,
                                      const void *att, int B, int T, int C, int NH) {
    MO_TRY(check_args("attention_backward_mixed", dt, B, T, C, NH));
    void *scratch = NULL;
    MO_TRY(mo_scratch_alloc(c, mo_attention_backward_mixed_scratch_bytes(dt, B, T, C, NH), &scratch));
    mo_status st;
    mo_cost_attention_backward(c, (int)mo_dtype_size(dt), B, T, C, NH, 0);
    switch (c->backend) {
    case MO_BACKEND_CPU: st = attention_backward_mixed_cpu(dt, dqkv, scratch, dout, qkv, att, B, T, C, NH); break;
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        st = attention_backward_mixed_cuda(c, dt, dqkv, dout, qkv, att, scratch, B, T, C, NH);
#else
        st = MO_FAIL(MO_ERR_UNSUPPORTED, "attention_backward_mixed: this build has no CUDA");
#endif
        break;
    case MO_BACKEND_DRY: st = MO_OK; break;
    default: st = MO_FAIL(MO_ERR_INTERNAL, "attention_backward_mixed: unknown backend %d", (int)c->backend); break;
    }
    mo_status st2 = mo_scratch_free(c, scratch);
    return st != MO_OK ? st : st2;
}
