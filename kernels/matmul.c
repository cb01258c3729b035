// GEMMs: plain-C references (the loops of karpathy/llm.c train_gpt2.c matmul_forward/backward, with the
// sums in double so the reference is well inside the GPU tolerances) and the mo_matmul_* dispatchers.
#include "matmul.h"

#include <math.h>
#include <stdlib.h>
#include "gelu.h"
#include "ops.h"
#include "residual.h"
#include "cost.h"

size_t mo_matmul_backward_scratch_bytes(int N, int OC, int has_dbias) {
    if (!has_dbias || N <= 0 || OC <= 0) return 0;
    return ((size_t)OC + (size_t)N) * sizeof(float);
}

// GPT-2's GELU (tanh approximation), in double.
static double gelu_tanh(double x) {
    const double s = 0.79788456080286535588; // sqrt(2/pi)
    return 0.5 * x * (1.0 + tanh(s * (x + 0.044715 * x * x * x)));
}

// sum_i a[i] * b[i] in double. Four partial sums give four independent add chains (the loop is
// latency-bound otherwise); the order is still fixed.
static double dot_f64(const float *a, const float *b, int n) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += (double)a[i] * b[i];
        s1 += (double)a[i + 1] * b[i + 1];
        s2 += (double)a[i + 2] * b[i + 2];
        s3 += (double)a[i + 3] * b[i + 3];
    }
    for (; i < n; i++) s0 += (double)a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

mo_status matmul_forward_cpu(float *out, float *gelu_out, const float *inp, const float *weight,
                             const float *bias, int N, int C, int OC) {
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C; // (C)
        float *y = out + (size_t)n * OC;      // (OC)
        for (int o = 0; o < OC; o++) {
            double s = dot_f64(x, weight + (size_t)o * C, C);
            if (bias) s += bias[o];
            y[o] = (float)s;
        }
        if (gelu_out) {
            float *g = gelu_out + (size_t)n * OC;
            for (int o = 0; o < OC; o++) g[o] = (float)gelu_tanh((double)y[o]);
        }
    }
    return MO_OK;
}

mo_status matmul_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                              const float *weight, int N, int C, int OC) {
    // host accumulators of the reference (C doubles): not device memory, so not from the allocator
    double *acc = malloc((size_t)C * sizeof *acc);
    if (!acc) return MO_FAIL(MO_ERR_OOM, "matmul_backward_cpu: host out of memory (%d doubles)", C);

    // dinp[n,:] = sum_o dout[n,o] * weight[o,:]   (overwritten)
    if (dinp) {
        for (int n = 0; n < N; n++) {
            for (int i = 0; i < C; i++) acc[i] = 0;
            const float *dy = dout + (size_t)n * OC;
            for (int o = 0; o < OC; o++) {
                const double d = dy[o];
                const float *w = weight + (size_t)o * C;
                for (int i = 0; i < C; i++) acc[i] += d * w[i];
            }
            float *dx = dinp + (size_t)n * C;
            for (int i = 0; i < C; i++) dx[i] = (float)acc[i];
        }
    }
    // dweight[o,:] += sum_n dout[n,o] * inp[n,:]
    for (int o = 0; o < OC; o++) {
        for (int i = 0; i < C; i++) acc[i] = 0;
        for (int n = 0; n < N; n++) {
            const double d = dout[(size_t)n * OC + o];
            const float *x = inp + (size_t)n * C;
            for (int i = 0; i < C; i++) acc[i] += d * x[i];
        }
        float *dw = dweight + (size_t)o * C;
        for (int i = 0; i < C; i++) dw[i] = (float)((double)dw[i] + acc[i]);
    }
    // dbias[o] += sum_n dout[n,o]
    if (dbias) {
        for (int o = 0; o < OC; o++) {
            double s = 0;
            for (int n = 0; n < N; n++) s += dout[(size_t)n * OC + o];
            dbias[o] = (float)((double)dbias[o] + s);
        }
    }
    free(acc);
    return MO_OK;
}

static mo_status check_shape(const char *op, int N, int C, int OC) {
    if (N <= 0 || C <= 0 || OC <= 0) return MO_FAIL(MO_ERR_INVALID, "%s: bad shape N=%d C=%d OC=%d", op, N, C, OC);
    return MO_OK;
}

mo_status mo_matmul_forward(mo_ctx *c, float *out, float *gelu_out, const float *inp, const float *weight,
                            const float *bias, int N, int C, int OC) {
    MO_TRY(check_shape("matmul_forward", N, C, OC));
    mo_cost_matmul_forward(c, 4, N, C, OC, gelu_out != NULL, 0);
    switch (c->backend) {
    case MO_BACKEND_CPU: return matmul_forward_cpu(out, gelu_out, inp, weight, bias, N, C, OC);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return matmul_forward_cuda(c, out, gelu_out, inp, weight, bias, NULL, N, C, OC);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "matmul_forward: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "matmul_forward: unknown backend %d", (int)c->backend);
}

mo_status mo_matmul_backward(mo_ctx *c, float *dinp, float *dweight, float *dbias, const float *dout,
                             const float *inp, const float *weight, int N, int C, int OC) {
    MO_TRY(check_shape("matmul_backward", N, C, OC));
    void *scratch = NULL;
    MO_TRY(mo_scratch_alloc(c, mo_matmul_backward_scratch_bytes(N, OC, dbias != NULL), &scratch));
    mo_status st;
    mo_cost_matmul_backward(c, 4, N, C, OC, dinp != NULL, dbias != NULL, 0);
    switch (c->backend) {
    case MO_BACKEND_CPU: st = matmul_backward_cpu(dinp, dweight, dbias, dout, inp, weight, N, C, OC); break;
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        st = matmul_backward_cuda(c, dinp, dweight, dbias, dout, inp, weight, NULL, scratch, N, C, OC);
#else
        st = MO_FAIL(MO_ERR_UNSUPPORTED, "matmul_backward: this build has no CUDA");
#endif
        break;
    case MO_BACKEND_DRY: st = MO_OK; break;
    default: st = MO_FAIL(MO_ERR_INTERNAL, "matmul_backward: unknown backend %d", (int)c->backend); break;
    }
    mo_status st2 = mo_scratch_free(c, scratch);
    return st != MO_OK ? st : st2;
}

mo_status mo_matmul_forward_add(mo_ctx *c, float *out, const float *inp, const float *weight, const float *bias,
                                const float *add, int N, int C, int OC) {
    MO_TRY(check_shape("matmul_forward_add", N, C, OC));
    if (!add) return MO_FAIL(MO_ERR_INVALID, "matmul_forward_add: add is required");
    mo_cost_matmul_forward(c, 4, N, C, OC, 0, 1);
    switch (c->backend) {
    case MO_BACKEND_CPU:
        MO_TRY(matmul_forward_cpu(out, NULL, inp, weight, bias, N, C, OC));
        return residual_forward_cpu(out, out, add, (size_t)N * OC);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return matmul_forward_cuda(c, out, NULL, inp, weight, bias, add, N, C, OC);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "matmul_forward_add: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "matmul_forward_add: unknown backend %d", (int)c->backend);
}

mo_status mo_matmul_backward_dgelu(mo_ctx *c, float *dinp, float *dweight, float *dbias, const float *dout,
                                   const float *inp, const float *weight, const float *gelu_pre, int N, int C, int OC) {
    MO_TRY(check_shape("matmul_backward_dgelu", N, C, OC));
    if (!dinp || !gelu_pre) return MO_FAIL(MO_ERR_INVALID, "matmul_backward_dgelu: dinp and gelu_pre are required");
    void *scratch = NULL;
    MO_TRY(mo_scratch_alloc(c, mo_matmul_backward_scratch_bytes(N, OC, dbias != NULL), &scratch));
    mo_status st;
    mo_cost_matmul_backward(c, 4, N, C, OC, 1, dbias != NULL, 1);
    switch (c->backend) {
    case MO_BACKEND_CPU:
        st = matmul_backward_cpu(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
        if (st == MO_OK) st = gelu_backward_cpu(dinp, gelu_pre, dinp, (size_t)N * C);
        break;
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        st = matmul_backward_cuda(c, dinp, dweight, dbias, dout, inp, weight, gelu_pre, scratch, N, C, OC);
#else
        st = MO_FAIL(MO_ERR_UNSUPPORTED, "matmul_backward_dgelu: this build has no CUDA");
#endif
        break;
    case MO_BACKEND_DRY: st = MO_OK; break;
    default: st = MO_FAIL(MO_ERR_INTERNAL, "matmul_backward_dgelu: unknown backend %d", (int)c->backend); break;
    }
    mo_status st2 = mo_scratch_free(c, scratch);
    return st != MO_OK ? st : st2;
}
