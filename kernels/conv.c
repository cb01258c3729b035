// 2-D convolution (conv.h): the plain-C direct convolution and its two backwards, and the dispatchers.
// The references convert the dt inputs to fp32 once, accumulate in fp32 in a fixed order and round
// each dt output once.
#include "conv.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "cost.h"
#include "resnet_ops_impl.h"

void mo_conv_shape_init(mo_conv_shape *s, int N, int H, int W, int C, int K, int R, int S, int stride, int pad) {
    s->N = N, s->H = H, s->W = W, s->C = C;
    s->K = K, s->R = R, s->S = S;
    s->stride = stride, s->pad = pad;
    s->P = stride > 0 ? (H + 2 * pad - R) / stride + 1 : 0;
    s->Q = stride > 0 ? (W + 2 * pad - S) / stride + 1 : 0;
    if (stride > 0 && H + 2 * pad - R < 0) s->P = 0;
    if (stride > 0 && W + 2 * pad - S < 0) s->Q = 0;
}

int mo_conv_dgrad_forward_shape(const mo_conv_shape *s, mo_conv_shape *t) {
    if (s->stride != 1 || s->R != s->S || s->pad > s->R - 1) return 0;
    mo_conv_shape_init(t, s->N, s->P, s->Q, s->K, s->C, s->R, s->S, 1, s->R - 1 - s->pad);
    return 1;
}

int mo_conv_implicit_prefers(const mo_conv_shape *s, size_t ws_bytes) {
    const size_t M = (size_t)s->N * s->P * s->Q, tiles = (M + 127) / 128 * (size_t)(s->K % 128 == 0 ? s->K / 128 : s->K / 64);
    const size_t col = M * s->R * s->S * s->C * sizeof(float), keep = (size_t)8 << 20;
    return tiles >= 512 || col + keep > ws_bytes;
}

mo_status mo_conv_shape_check(const mo_conv_shape *s, const char *op) {
    if (s->N < 1 || s->H < 1 || s->W < 1 || s->C < 1 || s->K < 1 || s->R < 1 || s->S < 1 || s->stride < 1 ||
        s->pad < 0 || s->P < 1 || s->Q < 1)
        return MO_FAIL(MO_ERR_INVALID, "%s: bad shape N %d H %d W %d C %d K %d R %d S %d stride %d pad %d (P %d Q %d)",
                       op, s->N, s->H, s->W, s->C, s->K, s->R, s->S, s->stride, s->pad, s->P, s->Q);
    const int P = (s->H + 2 * s->pad - s->R) / s->stride + 1, Q = (s->W + 2 * s->pad - s->S) / s->stride + 1;
    if (s->P != P || s->Q != Q) // the cpu reference indexes by s->P, s->Q; cuDNN derives them
        return MO_FAIL(MO_ERR_INVALID, "%s: output %d x %d given, the shape gives %d x %d", op, s->P, s->Q, P, Q);
    const double in = (double)s->N * s->H * s->W * s->C, out = (double)s->N * s->P * s->Q * s->K,
                 w = (double)s->K * s->R * s->S * s->C;
    if (in > INT_MAX || out > INT_MAX || w > INT_MAX)
        return MO_FAIL(MO_ERR_INVALID, "%s: a tensor has more than 2^31-1 elements (in %.0f, out %.0f, w %.0f)", op,
                       in, out, w);
    return MO_OK;
}

size_t mo_conv_backward_filter_scratch_bytes(mo_dtype dt, const mo_conv_shape *s) {
    return (size_t)s->K * s->R * s->S * s->C * mo_dtype_size(dt);
}

double mo_conv_flops(const mo_conv_shape *s) {
    return 2.0 * s->N * s->P * s->Q * (double)s->K * s->R * s->S * s->C;
}

#ifndef MEMOPT_HAVE_CUDA
void mo_conv_cache_stats(const mo_ctx *c, long *hits, long *misses) {
    (void)c;
    *hits = *misses = 0;
}
#endif

// ---- cpu references ----
static float *to_f32(mo_dtype dt, const void *p, size_t n) {
    float *f = malloc((n ? n : 1) * sizeof *f);
    if (f) for (size_t i = 0; i < n; i++) f[i] = rn_ld(dt, p, i);
    return f;
}

#define CONV_DIMS                                                                                   \
    const int N = s->N, H = s->H, W = s->W, C = s->C, K = s->K, R = s->R, S = s->S, st = s->stride, \
              pad = s->pad, P = s->P, Q = s->Q;                                                     \
    (void)N, (void)H, (void)W, (void)C, (void)K, (void)R, (void)S, (void)st, (void)pad, (void)P, (void)Q

// out[n,p,q,k] = sum over r, s, c of in[n, p*st-pad+r, q*st-pad+s, c] * w[k,r,s,c]
mo_status conv_forward_cpu(mo_dtype dt, void *out, const void *in, const void *w, const mo_conv_shape *s) {
    CONV_DIMS;
    const size_t nin = (size_t)N * H * W * C, nw = (size_t)K * R * S * C;
    float *x = to_f32(dt, in, nin), *f = to_f32(dt, w, nw), *acc = malloc((size_t)K * sizeof *acc);
    mo_status rs = MO_OK;
    if (!x || !f || !acc) { rs = MO_FAIL(MO_ERR_OOM, "conv_forward_cpu: host out of memory"); goto done; }
    for (int n = 0; n < N; n++)
        for (int p = 0; p < P; p++)
            for (int q = 0; q < Q; q++) {
                for (int k = 0; k < K; k++) acc[k] = 0.0f;
                for (int r = 0; r < R; r++) {
                    const int h = p * st - pad + r;
                    if (h < 0 || h >= H) continue;
                    for (int t = 0; t < S; t++) {
                        const int ww = q * st - pad + t;
                        if (ww < 0 || ww >= W) continue;
                        const float *xr = x + (((size_t)n * H + h) * W + ww) * C;
                        for (int k = 0; k < K; k++) {
                            const float *fr = f + (((size_t)k * R + r) * S + t) * C;
                            float a = acc[k];
                            for (int ch = 0; ch < C; ch++) a += xr[ch] * fr[ch];
                            acc[k] = a;
                        }
                    }
                }
                const size_t o = (((size_t)n * P + p) * Q + q) * K;
                for (int k = 0; k < K; k++) rn_st(dt, out, o + k, acc[k]);
            }
done:
    free(x), free(f), free(acc);
    return rs;
}

// din[n,h,w,c] = sum over r, s with h = p*st-pad+r, w = q*st-pad+s, and k of dout[n,p,q,k] * w[k,r,s,c]
// add: din = round_dt(float(din) + that sum) instead (one rounding)
static mo_status dgrad_cpu(mo_dtype dt, void *din, const void *dout, const void *w, const mo_conv_shape *s, int add) {
    CONV_DIMS;
    const size_t nout = (size_t)N * P * Q * K, nw = (size_t)K * R * S * C;
    float *dy = to_f32(dt, dout, nout), *f = to_f32(dt, w, nw), *acc = malloc((size_t)C * sizeof *acc);
    mo_status rs = MO_OK;
    if (!dy || !f || !acc) { rs = MO_FAIL(MO_ERR_OOM, "conv_backward_data_cpu: host out of memory"); goto done; }
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++)
            for (int ww = 0; ww < W; ww++) {
                for (int ch = 0; ch < C; ch++) acc[ch] = 0.0f;
                for (int r = 0; r < R; r++) {
                    const int ph = h + pad - r;
                    if (ph < 0 || ph % st != 0 || ph / st >= P) continue;
                    const int p = ph / st;
                    for (int t = 0; t < S; t++) {
                        const int qw = ww + pad - t;
                        if (qw < 0 || qw % st != 0 || qw / st >= Q) continue;
                        const int q = qw / st;
                        const float *dyr = dy + (((size_t)n * P + p) * Q + q) * K;
                        for (int k = 0; k < K; k++) {
                            const float d = dyr[k];
                            const float *fr = f + (((size_t)k * R + r) * S + t) * C;
                            for (int ch = 0; ch < C; ch++) acc[ch] += d * fr[ch];
                        }
                    }
                }
                const size_t o = (((size_t)n * H + h) * W + ww) * C;
                for (int ch = 0; ch < C; ch++)
                    rn_st(dt, din, o + ch, add ? rn_ld(dt, din, o + ch) + acc[ch] : acc[ch]);
            }
done:
    free(dy), free(f), free(acc);
    return rs;
}

mo_status conv_backward_data_cpu(mo_dtype dt, void *din, const void *dout, const void *w, const mo_conv_shape *s) {
    return dgrad_cpu(dt, din, dout, w, s, 0);
}

mo_status conv_backward_data_add_cpu(mo_dtype dt, void *din, const void *dout, const void *w, const mo_conv_shape *s) {
    return dgrad_cpu(dt, din, dout, w, s, 1);
}

// g[k,r,s,c] = sum over n, p, q of dout[n,p,q,k] * in[n, p*st-pad+r, q*st-pad+s, c]; dw += float(round_dt(g))
mo_status conv_backward_filter_cpu(mo_dtype dt, float *dw, const void *dout, const void *in, const mo_conv_shape *s) {
    CONV_DIMS;
    const size_t nout = (size_t)N * P * Q * K, nin = (size_t)N * H * W * C, nw = (size_t)K * R * S * C;
    float *dy = to_f32(dt, dout, nout), *x = to_f32(dt, in, nin), *g = calloc(nw ? nw : 1, sizeof *g);
    mo_status rs = MO_OK;
    if (!dy || !x || !g) { rs = MO_FAIL(MO_ERR_OOM, "conv_backward_filter_cpu: host out of memory"); goto done; }
    for (int n = 0; n < N; n++)
        for (int p = 0; p < P; p++)
            for (int q = 0; q < Q; q++) {
                const float *dyr = dy + (((size_t)n * P + p) * Q + q) * K;
                for (int r = 0; r < R; r++) {
                    const int h = p * st - pad + r;
                    if (h < 0 || h >= H) continue;
                    for (int t = 0; t < S; t++) {
                        const int ww = q * st - pad + t;
                        if (ww < 0 || ww >= W) continue;
                        const float *xr = x + (((size_t)n * H + h) * W + ww) * C;
                        for (int k = 0; k < K; k++) {
                            const float d = dyr[k];
                            float *gr = g + (((size_t)k * R + r) * S + t) * C;
                            for (int ch = 0; ch < C; ch++) gr[ch] += d * xr[ch];
                        }
                    }
                }
            }
    for (size_t i = 0; i < nw; i++) dw[i] += rn_round(dt, g[i]);
done:
    free(dy), free(x), free(g);
    return rs;
}

// ---- dispatchers ----
mo_status resnet_check_dtype(mo_dtype dt, const char *op) {
    if (dt == MO_F32 || dt == MO_F16 || dt == MO_BF16) return MO_OK;
    return MO_FAIL(MO_ERR_INVALID, "%s: dtype %d is not fp32, fp16 or bf16", op, (int)dt);
}

static double conv_bytes(mo_dtype dt, const mo_conv_shape *s) {
    const double e = (double)mo_dtype_size(dt);
    return e * ((double)s->N * s->H * s->W * s->C + (double)s->N * s->P * s->Q * s->K +
                (double)s->K * s->R * s->S * s->C);
}

#ifdef MEMOPT_HAVE_CUDA
#define CONV_CUDA(call) return (call)
#else
#define CONV_CUDA(call) return MO_FAIL(MO_ERR_UNSUPPORTED, "%s: this build has no CUDA", __func__)
#endif

mo_status mo_conv_forward(mo_ctx *c, mo_dtype dt, void *out, const void *in, const void *w, const mo_conv_shape *s) {
    MO_TRY(resnet_check_dtype(dt, "conv_forward"));
    MO_TRY(mo_conv_shape_check(s, "conv_forward"));
    mo_cost_record(c, "conv_fwd", MO_COST_CONV, mo_conv_flops(s), conv_bytes(dt, s));
    switch (c->backend) {
    case MO_BACKEND_CPU: return conv_forward_cpu(dt, out, in, w, s);
    case MO_BACKEND_CUDA: CONV_CUDA(conv_forward_cuda(c, dt, out, in, w, s));
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "conv_forward: unknown backend %d", (int)c->backend);
}

mo_status mo_conv_backward_data(mo_ctx *c, mo_dtype dt, void *din, const void *dout, const void *w,
                                const mo_conv_shape *s) {
    MO_TRY(resnet_check_dtype(dt, "conv_backward_data"));
    MO_TRY(mo_conv_shape_check(s, "conv_backward_data"));
    mo_cost_record(c, "conv_bwd_data", MO_COST_CONV, mo_conv_flops(s), conv_bytes(dt, s));
    switch (c->backend) {
    case MO_BACKEND_CPU: return conv_backward_data_cpu(dt, din, dout, w, s);
    case MO_BACKEND_CUDA: CONV_CUDA(conv_backward_data_cuda(c, dt, din, dout, w, s));
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "conv_backward_data: unknown backend %d", (int)c->backend);
}

mo_status mo_conv_backward_data_add(mo_ctx *c, mo_dtype dt, void *din, const void *dout, const void *w,
                                    const mo_conv_shape *s) {
    MO_TRY(resnet_check_dtype(dt, "conv_backward_data_add"));
    MO_TRY(mo_conv_shape_check(s, "conv_backward_data_add"));
    // conv_bwd_data's bytes and din read once more (the add in the epilogue)
    const double e = (double)mo_dtype_size(dt), nin = (double)s->N * s->H * s->W * s->C;
    mo_cost_record(c, "conv_bwd_data", MO_COST_CONV, mo_conv_flops(s), conv_bytes(dt, s) + e * nin);
    switch (c->backend) {
    case MO_BACKEND_CPU: return conv_backward_data_add_cpu(dt, din, dout, w, s);
    case MO_BACKEND_CUDA: CONV_CUDA(conv_backward_data_add_cuda(c, dt, din, dout, w, s));
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "conv_backward_data_add: unknown backend %d", (int)c->backend);
}

mo_status mo_conv_backward_filter(mo_ctx *c, mo_dtype dt, float *dw, const void *dout, const void *in,
                                  const mo_conv_shape *s) {
    MO_TRY(resnet_check_dtype(dt, "conv_backward_filter"));
    MO_TRY(mo_conv_shape_check(s, "conv_backward_filter"));
    const double nw = (double)s->K * s->R * s->S * s->C, e = (double)mo_dtype_size(dt);
    // dout and in read, the staged gradient written and read, the fp32 dw read and written
    const double bytes = e * ((double)s->N * s->H * s->W * s->C + (double)s->N * s->P * s->Q * s->K) + 8 * nw +
                         2 * e * nw;
    mo_cost_record(c, "conv_bwd_filter", MO_COST_CONV, mo_conv_flops(s), bytes);
    const size_t sb = mo_conv_backward_filter_scratch_bytes(dt, s);
    void *scratch = NULL;
    MO_TRY(mo_scratch_alloc(c, sb, &scratch));
    mo_status rs = MO_OK;
    switch (c->backend) {
    case MO_BACKEND_CPU: rs = conv_backward_filter_cpu(dt, dw, dout, in, s); break;
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        rs = conv_backward_filter_cuda(c, dt, dw, dout, in, s, scratch);
#else
        rs = MO_FAIL(MO_ERR_UNSUPPORTED, "conv_backward_filter: this build has no CUDA");
#endif
        break;
    case MO_BACKEND_DRY: break;
    default: rs = MO_FAIL(MO_ERR_INTERNAL, "conv_backward_filter: unknown backend %d", (int)c->backend);
    }
    const mo_status fs = mo_scratch_free(c, scratch);
    return rs != MO_OK ? rs : fs;
}
