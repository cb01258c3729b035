// Materialized causal attention: plain-C references (the math of karpathy/llm.c train_gpt2.c
// attention_forward/backward, with sums in double and the (T, T) gradient kept whole so each output is
// one plain sum) and the mo_attention_* dispatchers.
#include "attention.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include "ops.h"
#include "cost.h"

size_t mo_attention_forward_scratch_bytes(int B, int T, int C, int NH) {
    (void)NH;
    if (B <= 0 || T <= 0 || C <= 0) return 0;
    return 3 * (size_t)B * T * C * sizeof(float);
}

size_t mo_attention_backward_scratch_bytes(int B, int T, int C, int NH) {
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return 0;
    return (attention_backward_datt_offset(B, T, C) + (size_t)B * NH * T * T) * sizeof(float);
}

mo_status attention_check_shape(const char *op, int B, int T, int C, int NH) {
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0)
        return MO_FAIL(MO_ERR_INVALID, "%s: bad shape B=%d T=%d C=%d NH=%d", op, B, T, C, NH);
    if (C % NH != 0)
        return MO_FAIL(MO_ERR_INVALID, "%s: channels %d not divisible by heads %d", op, C, NH);
    return MO_OK;
}

static double dot_f64(const float *a, const float *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

int attention_scores_cuda_supported(int BH, int T, int HS, int ldx, int ldy, const void *S, const void *X,
                                    const void *Y) {
    const int aligned = ((uintptr_t)S & 15u) == 0 && ((uintptr_t)X & 15u) == 0 && ((uintptr_t)Y & 15u) == 0;
    return HS == ATTENTION_SCORES_HS && T > 0 && T % 4 == 0 && ldx % 4 == 0 && ldy % 4 == 0 && aligned && BH >= 1 &&
           BH <= 65535;
}

int attention_dpreatt_cuda_supported(int BH, int T, int HS, int ldx, int ldy, const void *dP, const void *X,
                                     const void *Y, const void *P, const void *D) {
    const int aligned = ((uintptr_t)P & 15u) == 0 && ((uintptr_t)D & 15u) == 0;
    return aligned && attention_scores_cuda_supported(BH, T, HS, ldx, ldy, dP, X, Y);
}

mo_status attention_scores_cpu(float *S, const float *X, long long xsb, long long xsh, int ldx, const float *Y,
                               long long ysb, long long ysh, int ldy, float alpha, int B, int NH, int T, int HS) {
    if (B <= 0 || NH <= 0 || T <= 0 || HS <= 0 || ldx < HS || ldy < HS)
        return MO_FAIL(MO_ERR_INVALID, "attention_scores_cpu: bad shape B=%d NH=%d T=%d HS=%d ldx=%d ldy=%d", B, NH,
                       T, HS, ldx, ldy);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *x = X + b * xsb + h * xsh, *y = Y + b * ysb + h * ysh;
            float *s = S + ((size_t)b * NH + h) * T * T;
            for (int i = 0; i < T; i++)
                for (int j = 0; j <= i; j++)
                    s[(size_t)i * T + j] = (float)(alpha * dot_f64(x + (size_t)i * ldx, y + (size_t)j * ldy, HS));
        }
    return MO_OK;
}

mo_status attention_dpreatt_cpu(float *dP, const float *X, long long xsb, long long xsh, int ldx, const float *Y,
                                long long ysb, long long ysh, int ldy, float alpha, const float *P, const float *D,
                                float scale, int L, int B, int NH, int T, int HS) {
    if (B <= 0 || NH <= 0 || T <= 0 || HS <= 0 || ldx < HS || ldy < HS)
        return MO_FAIL(MO_ERR_INVALID, "attention_dpreatt_cpu: bad shape B=%d NH=%d T=%d HS=%d ldx=%d ldy=%d", B, NH,
                       T, HS, ldx, ldy);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const size_t m = (size_t)b * NH + h;
            const float *x = X + b * xsb + h * xsh, *y = Y + b * ysb + h * ysh;
            for (int i = 0; i < T; i++) {
                const float *p = P + (m * T + i) * T;
                float *o = dP + (m * T + i) * T;
                for (int j = 0; j <= i; j++) {
                    const double g = alpha * dot_f64(x + (size_t)i * ldx, y + (size_t)j * ldy, HS);
                    o[j] = (float)(scale * (double)p[j] * (g - D[m * T + i]));
                }
                for (int j = i + 1; j < attention_dpreatt_zero_end(i, T, L); j++) o[j] = 0.0f;
            }
        }
    return MO_OK;
}

mo_status attention_rowdot_cpu(float *D, const float *X, long long xsb, long long xsh, int ldx, const float *Y,
                               long long ysb, long long ysh, int ldy, int B, int NH, int T, int HS) {
    if (B <= 0 || NH <= 0 || T <= 0 || HS <= 0)
        return MO_FAIL(MO_ERR_INVALID, "attention_rowdot_cpu: bad shape B=%d NH=%d T=%d HS=%d", B, NH, T, HS);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++)
                D[((size_t)b * NH + h) * T + t] =
                    (float)dot_f64(X + b * xsb + h * xsh + (size_t)t * ldx, Y + b * ysb + h * ysh + (size_t)t * ldy, HS);
    return MO_OK;
}

mo_status attention_forward_cpu(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const size_t C3 = 3 * (size_t)C;
    // host temporaries of the reference: scores of one row (T) and one output row (HS)
    double *s = malloc(((size_t)T + HS) * sizeof *s);
    if (!s) return MO_FAIL(MO_ERR_OOM, "attention_forward_cpu: host out of memory");
    double *acc = s + T;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * HS;
                float *a = att + (((size_t)b * NH + h) * T + t) * T; // (T)
                double mx = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * C3 + C + (size_t)h * HS;
                    s[t2] = (double)scale * dot_f64(q, k, HS);
                    if (s[t2] > mx) mx = s[t2];
                }
                double sum = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    s[t2] = exp(s[t2] - mx);
                    sum += s[t2];
                }
                for (int t2 = 0; t2 < T; t2++) a[t2] = t2 <= t ? (float)(s[t2] / sum) : 0.0f;
                // out[b,t,h] = sum over t2 of att * v, with the stored (float) probabilities
                for (int i = 0; i < HS; i++) acc[i] = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * C3 + 2 * (size_t)C + (size_t)h * HS;
                    for (int i = 0; i < HS; i++) acc[i] += (double)a[t2] * v[i];
                }
                float *o = out + ((size_t)b * T + t) * C + (size_t)h * HS;
                for (int i = 0; i < HS; i++) o[i] = (float)acc[i];
            }
    free(s);
    return MO_OK;
}

mo_status attention_backward_cpu(float *dqkv, float *scratch, const float *dout, const float *qkv,
                                 const float *att, int B, int T, int C, int NH) {
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const size_t C3 = 3 * (size_t)C;
    float *dpre_all = scratch + attention_backward_datt_offset(B, T, C); // (B, NH, T, T)
    double *g = malloc(((size_t)T + HS) * sizeof *g); // one row of datt (T), one output row (HS)
    if (!g) return MO_FAIL(MO_ERR_OOM, "attention_backward_cpu: host out of memory");
    double *acc = g + T;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *A = att + ((size_t)b * NH + h) * T * T; // (T, T)
            float *P = dpre_all + ((size_t)b * NH + h) * T * T;  // (T, T) dpreatt
#define QKV_ROW(t, part) (qkv + ((size_t)b * T + (t)) * C3 + (size_t)(part) * C + (size_t)h * HS)
#define DOUT_ROW(t) (dout + ((size_t)b * T + (t)) * C + (size_t)h * HS)
#define DQKV_ROW(t, part) (dqkv + ((size_t)b * T + (t)) * C3 + (size_t)(part) * C + (size_t)h * HS)
            // datt[t, t2] = dout[t] . v[t2]; dpreatt = scale * att * (datt - sum_j att[t, j] datt[t, j])
            for (int t = 0; t < T; t++) {
                double s = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    g[t2] = dot_f64(DOUT_ROW(t), QKV_ROW(t2, 2), HS);
                    s += (double)A[(size_t)t * T + t2] * g[t2];
                }
                for (int t2 = 0; t2 < T; t2++)
                    P[(size_t)t * T + t2] =
                        t2 <= t ? (float)(scale * (double)A[(size_t)t * T + t2] * (g[t2] - s)) : 0.0f;
            }
            // dq[t] = sum_{t2 <= t} dpreatt[t, t2] k[t2]
            for (int t = 0; t < T; t++) {
                for (int i = 0; i < HS; i++) acc[i] = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const double p = P[(size_t)t * T + t2];
                    const float *k = QKV_ROW(t2, 1);
                    for (int i = 0; i < HS; i++) acc[i] += p * k[i];
                }
                float *dq = DQKV_ROW(t, 0);
                for (int i = 0; i < HS; i++) dq[i] = (float)acc[i];
            }
            // dk[t2] = sum_{t >= t2} dpreatt[t, t2] q[t]
            for (int t2 = 0; t2 < T; t2++) {
                for (int i = 0; i < HS; i++) acc[i] = 0;
                for (int t = t2; t < T; t++) {
                    const double p = P[(size_t)t * T + t2];
                    const float *q = QKV_ROW(t, 0);
                    for (int i = 0; i < HS; i++) acc[i] += p * q[i];
                }
                float *dk = DQKV_ROW(t2, 1);
                for (int i = 0; i < HS; i++) dk[i] = (float)acc[i];
            }
            // dv[t2] = sum_{t >= t2} att[t, t2] dout[t]
            for (int t2 = 0; t2 < T; t2++) {
                for (int i = 0; i < HS; i++) acc[i] = 0;
                for (int t = t2; t < T; t++) {
                    const double a = A[(size_t)t * T + t2];
                    const float *dy = DOUT_ROW(t);
                    for (int i = 0; i < HS; i++) acc[i] += a * dy[i];
                }
                float *dv = DQKV_ROW(t2, 2);
                for (int i = 0; i < HS; i++) dv[i] = (float)acc[i];
            }
#undef QKV_ROW
#undef DOUT_ROW
#undef DQKV_ROW
        }
    free(g);
    return MO_OK;
}

mo_status mo_attention_forward(mo_ctx *c, float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    MO_TRY(attention_check_shape("attention_forward", B, T, C, NH));
    void *scratch = NULL;
    MO_TRY(mo_scratch_alloc(c, mo_attention_forward_scratch_bytes(B, T, C, NH), &scratch));
    mo_status st;
    mo_cost_attention_forward(c, 4, B, T, C, NH);
    switch (c->backend) {
    case MO_BACKEND_CPU: st = attention_forward_cpu(out, att, qkv, B, T, C, NH); break;
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        st = attention_forward_cuda(c, out, att, qkv, scratch, B, T, C, NH);
#else
        st = MO_FAIL(MO_ERR_UNSUPPORTED, "attention_forward: this build has no CUDA");
#endif
        break;
    case MO_BACKEND_DRY: st = MO_OK; break;
    default: st = MO_FAIL(MO_ERR_INTERNAL, "attention_forward: unknown backend %d", (int)c->backend); break;
    }
    mo_status st2 = mo_scratch_free(c, scratch);
    return st != MO_OK ? st : st2;
}

mo_status mo_attention_backward(mo_ctx *c, float *dqkv, const float *dout, const float *qkv, const float *out,
                                const float *att, int B, int T, int C, int NH) {
    MO_TRY(attention_check_shape("attention_backward", B, T, C, NH));
    void *scratch = NULL;
    MO_TRY(mo_scratch_alloc(c, mo_attention_backward_scratch_bytes(B, T, C, NH), &scratch));
    mo_status st;
    mo_cost_attention_backward(c, 4, B, T, C, NH, out != NULL);
    switch (c->backend) {
    case MO_BACKEND_CPU: st = attention_backward_cpu(dqkv, scratch, dout, qkv, att, B, T, C, NH); break;
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        st = attention_backward_cuda(c, dqkv, dout, qkv, out, att, scratch, B, T, C, NH);
#else
        st = MO_FAIL(MO_ERR_UNSUPPORTED, "attention_backward: this build has no CUDA");
#endif
        break;
    case MO_BACKEND_DRY: (void)out; st = MO_OK; break;
    default: st = MO_FAIL(MO_ERR_INTERNAL, "attention_backward: unknown backend %d", (int)c->backend); break;
    }
    mo_status st2 = mo_scratch_free(c, scratch);
    return st != MO_OK ? st : st2;
}
