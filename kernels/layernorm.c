// LayerNorm: plain-C reference (as karpathy/llm.c train_gpt2.c, float accumulation) and dispatchers.
#include "layernorm.h"

#include <math.h>
#include "ops.h"
#include "cost.h"

// 8 rows per block (one warp each) up to 512 blocks: enough blocks to fill an H200 (132 SMs x 4 blocks),
// few enough that the second stage reads little (512 x 2C floats = 3 MiB at C=768).
int layernorm_backward_blocks(int N) {
    if (N <= 0) return 0;
    int g = (N + 7) / 8;
    return g < 512 ? g : 512;
}

size_t mo_layernorm_backward_scratch_bytes(int N, int C) {
    if (N <= 0 || C <= 0) return 0;
    return (size_t)layernorm_backward_blocks(N) * 2 * (size_t)C * sizeof(float);
}

mo_status layernorm_forward_cpu(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                                const float *bias, int N, int C) {
    for (int r = 0; r < N; r++) {
        const float *x = inp + (size_t)r * C;
        float m = 0.0f;
        for (int i = 0; i < C; i++) m += x[i];
        m = m / C;
        float v = 0.0f;
        for (int i = 0; i < C; i++) {
            float d = x[i] - m;
            v += d * d;
        }
        v = v / C;
        float s = 1.0f / sqrtf(v + MO_LAYERNORM_EPS);
        float *o = out + (size_t)r * C;
        for (int i = 0; i < C; i++) {
            float n = s * (x[i] - m);
            o[i] = n * weight[i] + bias[i];
        }
        if (mean) mean[r] = m;
        if (rstd) rstd[r] = s;
    }
    return MO_OK;
}

mo_status layernorm_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                 const float *weight, const float *mean, const float *rstd, int N, int C) {
    for (int r = 0; r < N; r++) {
        const float *dy = dout + (size_t)r * C;
        const float *x = inp + (size_t)r * C;
        float *dx = dinp + (size_t)r * C;
        float mu = mean[r], rs = rstd[r];
        // two reductions: mean of dnorm and of dnorm * norm
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - mu) * rs;
            float dnorm = weight[i] * dy[i];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean = dnorm_mean / C;
        dnorm_norm_mean = dnorm_norm_mean / C;
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - mu) * rs;
            float dnorm = weight[i] * dy[i];
            dbias[i] += dy[i];
            dweight[i] += norm * dy[i];
            float dval = 0.0f;
            dval += dnorm;
            dval -= dnorm_mean;
            dval -= norm * dnorm_norm_mean;
            dval *= rs;
            dx[i] += dval;
        }
    }
    return MO_OK;
}

mo_status mo_layernorm_forward(mo_ctx *c, float *out, float *mean, float *rstd, const float *inp,
                               const float *weight, const float *bias, int N, int C) {
    if (N <= 0 || C <= 0) return MO_FAIL(MO_ERR_INVALID, "layernorm_forward: bad shape N=%d C=%d", N, C);
    mo_cost_record(c, "layernorm_fwd", MO_COST_MEMORY, 8.0 * N * C, 4 * 2.0 * N * C + 8.0 * N);
    switch (c->backend) {
    case MO_BACKEND_CPU: return layernorm_forward_cpu(out, mean, rstd, inp, weight, bias, N, C);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return layernorm_forward_cuda(c, out, mean, rstd, inp, weight, bias, N, C);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "layernorm_forward: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "layernorm_forward: unknown backend %d", (int)c->backend);
}

mo_status mo_layernorm_backward(mo_ctx *c, float *dinp, float *dweight, float *dbias, const float *dout,
                                const float *inp, const float *weight, const float *mean, const float *rstd, int N,
                                int C) {
    if (N <= 0 || C <= 0) return MO_FAIL(MO_ERR_INVALID, "layernorm_backward: bad shape N=%d C=%d", N, C);
    void *scratch = NULL;
    MO_TRY(mo_scratch_alloc(c, mo_layernorm_backward_scratch_bytes(N, C), &scratch));
    mo_status st;
    mo_cost_record(c, "layernorm_bwd", MO_COST_MEMORY, 12.0 * N * C, 4 * 4.0 * N * C + 8.0 * N);
    switch (c->backend) {
    case MO_BACKEND_CPU:
        st = layernorm_backward_cpu(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
        break;
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        st = layernorm_backward_cuda(c, dinp, dweight, dbias, dout, inp, weight, mean, rstd, scratch, N, C);
#else
        st = MO_FAIL(MO_ERR_UNSUPPORTED, "layernorm_backward: this build has no CUDA");
#endif
        break;
    case MO_BACKEND_DRY: st = MO_OK; break;
    default: st = MO_FAIL(MO_ERR_INTERNAL, "layernorm_backward: unknown backend %d", (int)c->backend); break;
    }
    mo_status st2 = mo_scratch_free(c, scratch);
    return st != MO_OK ? st : st2;
}
