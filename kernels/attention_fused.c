// Fused (flash-style) causal attention: plain-C references and the mo_attention_fused_* dispatchers.
// The references follow the math of the kernels, not their tiling: forward keeps only out and lse;
// backward recomputes P = exp(s - lse) for each (query, key) pair, once in a pass by key (dk, dv) and
// once in a pass by query (dq), as FlashAttention-2 splits them. Sums in double.
#include "attention_fused.h"
#include "attention_fused_gemm.h"
#include "attention_fused_tf32.h"

#include <math.h>
#include "attention.h"
#include "ops.h"
#include "cost.h"

size_t mo_attention_fused_backward_scratch_bytes(int B, int T, int C, int NH) {
    (void)C;
    if (B <= 0 || T <= 0 || NH <= 0) return 0;
    return (size_t)B * NH * T * sizeof(float);
}

// The scratch the op takes on every backend: the blocked GEMMs' (attention_fused_gemm.h) where they run
// (fp32 data, MEMOPT_ATTN_FUSED32=gemm, the default), else the flash kernels' (none forward, D backward).
// Both start with D (B, NH, T) in the backward, where the cpu reference keeps it.
size_t mo_attention_fused_scratch_bytes(const mo_ctx *c, int backward, int B, int T, int C, int NH) {
    if (c->attn_fused32 == MO_ATTN_FUSED32_GEMM) return mo_attn_fused_gemm_scratch_bytes(c, backward, B, T, C, NH);
    return backward ? mo_attention_fused_backward_scratch_bytes(B, T, C, NH) : 0;
}

static mo_status fused_check_shape(const char *op, int B, int T, int C, int NH) {
    MO_TRY(attention_check_shape(op, B, T, C, NH));
    if (C / NH > MO_ATTN_FUSED_MAX_HS)
        return MO_FAIL(MO_ERR_UNSUPPORTED, "%s: head size %d > %d is not supported by fused attention (use --attn materialized)",
                       op, C / NH, MO_ATTN_FUSED_MAX_HS);
    return MO_OK;
}

static double dot_f64(const float *a, const float *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

mo_status attention_fused_forward_cpu(float *out, float *lse, const float *qkv, int B, int T, int C, int NH) {
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const size_t C3 = 3 * (size_t)C;
    double acc[MO_ATTN_FUSED_MAX_HS];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * HS;
#define K_ROW(t2) (qkv + ((size_t)b * T + (t2)) * C3 + C + (size_t)h * HS)
#define V_ROW(t2) (qkv + ((size_t)b * T + (t2)) * C3 + 2 * (size_t)C + (size_t)h * HS)
                // lse = m + log sum exp(s - m), m = max s; the scores are recomputed (nothing (T) is stored)
                double m = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    double s = (double)scale * dot_f64(q, K_ROW(t2), HS);
                    if (s > m) m = s;
                }
                double l = 0;
                for (int t2 = 0; t2 <= t; t2++) l += exp((double)scale * dot_f64(q, K_ROW(t2), HS) - m);
                const double L = m + log(l);
                for (int i = 0; i < HS; i++) acc[i] = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const double p = exp((double)scale * dot_f64(q, K_ROW(t2), HS) - L);
                    const float *v = V_ROW(t2);
                    for (int i = 0; i < HS; i++) acc[i] += p * v[i];
                }
                float *o = out + ((size_t)b * T + t) * C + (size_t)h * HS;
                for (int i = 0; i < HS; i++) o[i] = (float)acc[i];
                lse[((size_t)b * NH + h) * T + t] = (float)L;
#undef K_ROW
#undef V_ROW
            }
    return MO_OK;
}

mo_status attention_fused_backward_cpu(float *dqkv, float *Dbuf, const float *dout, const float *qkv,
                                       const float *out, const float *lse, int B, int T, int C, int NH) {
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const size_t C3 = 3 * (size_t)C;
    double acc_a[MO_ATTN_FUSED_MAX_HS], acc_b[MO_ATTN_FUSED_MAX_HS];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
#define QKV_ROW(t, part) (qkv + ((size_t)b * T + (t)) * C3 + (size_t)(part) * C + (size_t)h * HS)
#define DQKV_ROW(t, part) (dqkv + ((size_t)b * T + (t)) * C3 + (size_t)(part) * C + (size_t)h * HS)
#define HEAD_ROW(x, t) ((x) + ((size_t)b * T + (t)) * C + (size_t)h * HS)
            const float *L = lse + ((size_t)b * NH + h) * T; // (T)
            float *D = Dbuf + ((size_t)b * NH + h) * T;      // (T)
            for (int t = 0; t < T; t++) D[t] = (float)dot_f64(HEAD_ROW(dout, t), HEAD_ROW(out, t), HS);
            // P, and dS = P * (dP - D), dP = dout_t . v_t2, for the pair (query t, key t2 <= t)
#define P_DS(t, t2, p, ds)                                                                      \
    do {                                                                                        \
        (p) = exp((double)scale * dot_f64(QKV_ROW(t, 0), QKV_ROW(t2, 1), HS) - (double)L[t]);   \
        (ds) = (p) * (dot_f64(HEAD_ROW(dout, t), QKV_ROW(t2, 2), HS) - (double)D[t]);           \
    } while (0)
            // by key: dk[t2] = scale * sum_{t >= t2} dS q[t];  dv[t2] = sum_{t >= t2} P dout[t]
            for (int t2 = 0; t2 < T; t2++) {
                for (int i = 0; i < HS; i++) acc_a[i] = acc_b[i] = 0;
                for (int t = t2; t < T; t++) {
                    double p, ds;
                    P_DS(t, t2, p, ds);
                    const float *q = QKV_ROW(t, 0), *dy = HEAD_ROW(dout, t);
                    for (int i = 0; i < HS; i++) {
                        acc_a[i] += ds * q[i];
                        acc_b[i] += p * dy[i];
                    }
                }
                float *dk = DQKV_ROW(t2, 1), *dv = DQKV_ROW(t2, 2);
                for (int i = 0; i < HS; i++) {
                    dk[i] = (float)(scale * acc_a[i]);
                    dv[i] = (float)acc_b[i];
                }
            }
            // by query: dq[t] = scale * sum_{t2 <= t} dS k[t2]
            for (int t = 0; t < T; t++) {
                for (int i = 0; i < HS; i++) acc_a[i] = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    double p, ds;
                    P_DS(t, t2, p, ds);
                    const float *k = QKV_ROW(t2, 1);
                    for (int i = 0; i < HS; i++) acc_a[i] += ds * k[i];
                }
                float *dq = DQKV_ROW(t, 0);
                for (int i = 0; i < HS; i++) dq[i] = (float)(scale * acc_a[i]);
            }
#undef P_DS
#undef QKV_ROW
#undef DQKV_ROW
#undef HEAD_ROW
        }
    return MO_OK;
}

mo_status mo_attention_fused_forward(mo_ctx *c, float *out, float *lse, const float *qkv, int B, int T, int C,
                                     int NH) {
    MO_TRY(fused_check_shape("attention_fused_forward", B, T, C, NH));
    const int gemm = c->attn_fused32 == MO_ATTN_FUSED32_GEMM;
    void *scratch = NULL;
    const size_t sb = mo_attention_fused_scratch_bytes(c, 0, B, T, C, NH);
    if (sb) MO_TRY(mo_scratch_alloc(c, sb, &scratch));
    if (gemm) mo_cost_attention_fused_gemm(c, 0, B, T, C, NH);
    else mo_cost_attention_fused_forward(c, 4, B, T, C, NH);
    mo_status st;
    switch (c->backend) {
    case MO_BACKEND_CPU: st = attention_fused_forward_cpu(out, lse, qkv, B, T, C, NH); break;
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        st = gemm                     ? attention_fused_gemm_forward_cuda(c, out, lse, qkv, scratch, B, T, C, NH)
             : c->tf32 && c->attn_tf32 ? attention_fused_tf32_forward_cuda(c, out, lse, qkv, B, T, C, NH)
                                       : attention_fused_forward_cuda(c, out, lse, qkv, B, T, C, NH);
#else
        st = MO_FAIL(MO_ERR_UNSUPPORTED, "attention_fused_forward: this build has no CUDA");
#endif
        break;
    case MO_BACKEND_DRY: st = MO_OK; break;
    default: st = MO_FAIL(MO_ERR_INTERNAL, "attention_fused_forward: unknown backend %d", (int)c->backend); break;
    }
    mo_status st2 = sb ? mo_scratch_free(c, scratch) : MO_OK;
    return st != MO_OK ? st : st2;
}

mo_status mo_attention_fused_backward(mo_ctx *c, float *dqkv, const float *dout, const float *qkv,
                                      const float *out, const float *lse, int B, int T, int C, int NH) {
    MO_TRY(fused_check_shape("attention_fused_backward", B, T, C, NH));
    void *scratch = NULL;
    const int gemm = c->attn_fused32 == MO_ATTN_FUSED32_GEMM;
    MO_TRY(mo_scratch_alloc(c, mo_attention_fused_scratch_bytes(c, 1, B, T, C, NH), &scratch));
    mo_status st;
    if (gemm) mo_cost_attention_fused_gemm(c, 1, B, T, C, NH);
    else mo_cost_attention_fused_backward(c, 4, B, T, C, NH);
    switch (c->backend) {
    case MO_BACKEND_CPU:
        st = attention_fused_backward_cpu(dqkv, (float *)scratch, dout, qkv, out, lse, B, T, C, NH);
        break;
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        st = gemm ? attention_fused_gemm_backward_cuda(c, dqkv, dout, qkv, out, lse, scratch, B, T, C, NH)
             : c->tf32 && c->attn_tf32
                 ? attention_fused_tf32_backward_cuda(c, dqkv, dout, qkv, out, lse, scratch, B, T, C, NH)
                 : attention_fused_backward_cuda(c, dqkv, dout, qkv, out, lse, scratch, B, T, C, NH);
#else
        st = MO_FAIL(MO_ERR_UNSUPPORTED, "attention_fused_backward: this build has no CUDA");
#endif
        break;
    case MO_BACKEND_DRY: st = MO_OK; break;
    default: st = MO_FAIL(MO_ERR_INTERNAL, "attention_fused_backward: unknown backend %d", (int)c->backend); break;
    }
    mo_status st2 = mo_scratch_free(c, scratch);
    return st != MO_OK ? st : st2;
}
