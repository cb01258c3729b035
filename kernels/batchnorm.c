// Batch normalization, training mode (batchnorm.h): the plain-C reference and the dispatchers.
// The reference sums the batch statistics in double (it is the numerical reference), then works in fp32.
#include "batchnorm.h"

#include <math.h>
#include <stdlib.h>
#include "cost.h"
#include "pool.h"
#include "resnet_ops_impl.h"

// mean, rstd (C) of in (M, C); the running statistics moved when run_mean != NULL
static void batchnorm_stats_cpu(mo_dtype dt, float *mean, float *rstd, float *run_mean, float *run_var, const void *in,
                                int M, int C, float momentum) {
    for (int ch = 0; ch < C; ch++) {
        double s = 0.0, ss = 0.0;
        for (int i = 0; i < M; i++) s += rn_ld(dt, in, (size_t)i * C + ch);
        const double mu = s / M;
        for (int i = 0; i < M; i++) {
            const double d = rn_ld(dt, in, (size_t)i * C + ch) - mu;
            ss += d * d;
        }
        const double var = ss / M; // biased: what normalizes
        const float m = (float)mu;
        mean[ch] = m;
        rstd[ch] = (float)(1.0 / sqrt(var + MO_BN_EPS));
        if (run_mean) {
            const double unbiased = M > 1 ? ss / (M - 1) : var;
            run_mean[ch] = (1.0f - momentum) * run_mean[ch] + momentum * m;
            run_var[ch] = (1.0f - momentum) * run_var[ch] + momentum * (float)unbiased;
        }
    }
}

// element j's BN output, gamma (in - mean) rstd + beta, before rounding: the normalize's, and what the
// remask backward recomputes its ReLU mask from
static float bn_y_cpu(mo_dtype dt, const void *in, size_t j, int ch, const float *gamma, const float *beta,
                      const float *mean, const float *rstd) {
    return gamma[ch] * ((rn_ld(dt, in, j) - mean[ch]) * rstd[ch]) + beta[ch];
}

// out = gamma (in - mean) rstd + beta; res: rounded to dt, + res (rounded again at the store); ReLU.
// Element by element, each read before its out is written, so out may be res.
mo_status batchnorm_normalize_cpu(mo_dtype dt, void *out, const void *in, const float *gamma, const float *beta,
                                  const float *mean, const float *rstd, const void *res, int M, int C, int relu) {
    for (size_t j = 0; j < (size_t)M * C; j++) {
        const int ch = (int)(j % (size_t)C);
        float y = bn_y_cpu(dt, in, j, ch, gamma, beta, mean, rstd);
        if (res) y = rn_round(dt, y) + rn_ld(dt, res, j);
        if (relu && y <= 0.0f) y = 0.0f; // NaN kept, as torch.relu
        rn_st(dt, out, j, y);
    }
    return MO_OK;
}

mo_status batchnorm_forward_cpu(mo_dtype dt, void *out, float *mean, float *rstd, float *run_mean, float *run_var,
                                const void *in, const float *gamma, const float *beta, int M, int C, float momentum,
                                int relu) {
    batchnorm_stats_cpu(dt, mean, rstd, run_mean, run_var, in, M, C, momentum);
    return batchnorm_normalize_cpu(dt, out, in, gamma, beta, mean, rstd, NULL, M, C, relu);
}

// element j's dy: dout's, or with beta (the remask) 0 where the ReLU's output, the BN output rounded to dt,
// was not > 0
static float bn_dy_cpu(mo_dtype dt, const void *dout, const void *in, size_t j, int ch, const float *gamma,
                       const float *beta, const float *mean, const float *rstd) {
    if (beta && !(rn_round(dt, bn_y_cpu(dt, in, j, ch, gamma, beta, mean, rstd)) > 0.0f)) return 0.0f;
    return rn_ld(dt, dout, j);
}

// xhat = (x - mean) rstd; dbeta += sum dy; dgamma += sum dy xhat;
// dx = gamma rstd (dy - sum(dy) / M - xhat sum(dy xhat) / M)
mo_status batchnorm_backward_cpu(mo_dtype dt, void *din, float *dgamma, float *dbeta, const void *dout,
                                 const void *in, const float *gamma, const float *beta, const float *mean,
                                 const float *rstd, int M, int C) {
    for (int ch = 0; ch < C; ch++) {
        double sdy = 0.0, sdyx = 0.0;
        const float m = mean[ch], r = rstd[ch];
        for (int i = 0; i < M; i++) {
            const size_t j = (size_t)i * C + ch;
            const float dy = bn_dy_cpu(dt, dout, in, j, ch, gamma, beta, mean, rstd), xh = (rn_ld(dt, in, j) - m) * r;
            sdy += dy;
            sdyx += (double)dy * xh;
        }
        dbeta[ch] += (float)sdy;
        dgamma[ch] += (float)sdyx;
        const float a = (float)(sdy / M), b = (float)(sdyx / M), g = gamma[ch] * r;
        for (int i = 0; i < M; i++) {
            const size_t j = (size_t)i * C + ch;
            const float dy = bn_dy_cpu(dt, dout, in, j, ch, gamma, beta, mean, rstd), xh = (rn_ld(dt, in, j) - m) * r;
            rn_st(dt, din, j, g * (dy - a - xh * b));
        }
    }
    return MO_OK;
}

static mo_status bn_check(mo_dtype dt, int M, int C, const char *op) {
    MO_TRY(resnet_check_dtype(dt, op));
    if (M < 1 || C < 1) return MO_FAIL(MO_ERR_INVALID, "%s: M %d and C %d must be >= 1", op, M, C);
    return MO_OK;
}

mo_status mo_batchnorm_forward(mo_ctx *c, mo_dtype dt, void *out, float *mean, float *rstd, float *run_mean,
                               float *run_var, const void *in, const float *gamma, const float *beta, int M, int C,
                               float momentum, int relu) {
    MO_TRY(bn_check(dt, M, C, "batchnorm_forward"));
    if ((run_mean == NULL) != (run_var == NULL))
        return MO_FAIL(MO_ERR_INVALID, "batchnorm_forward: run_mean and run_var must be both set or both NULL");
    const double n = (double)M * C, e = (double)mo_dtype_size(dt);
    // statistics pass and normalize pass read in twice, out written (and read and written by a separate ReLU)
    mo_cost_record(c, relu ? "batchnorm_relu_fwd" : "batchnorm_fwd", MO_COST_MEMORY, 8 * n, e * n * (relu ? 5 : 3));
    switch (c->backend) {
    case MO_BACKEND_CPU:
        return batchnorm_forward_cpu(dt, out, mean, rstd, run_mean, run_var, in, gamma, beta, M, C, momentum, relu);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return batchnorm_forward_cuda(c, dt, out, mean, rstd, run_mean, run_var, in, gamma, beta, NULL, M, C,
                                      momentum, relu);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "batchnorm_forward: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "batchnorm_forward: unknown backend %d", (int)c->backend);
}

mo_status mo_batchnorm_normalize(mo_ctx *c, mo_dtype dt, void *out, const void *in, const float *gamma,
                                 const float *beta, const float *mean, const float *rstd, const void *res, int M,
                                 int C, int relu) {
    MO_TRY(bn_check(dt, M, C, "batchnorm_normalize"));
    const double n = (double)M * C, e = (double)mo_dtype_size(dt);
    // in (and res) read, out written
    mo_cost_record(c, "batchnorm_normalize", MO_COST_MEMORY, 5 * n, e * n * (res ? 3 : 2));
    switch (c->backend) {
    case MO_BACKEND_CPU: return batchnorm_normalize_cpu(dt, out, in, gamma, beta, mean, rstd, res, M, C, relu);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return bn_own_normalize_cuda(c, dt, out, in, res, mean, rstd, gamma, beta, M, C, relu);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "batchnorm_normalize: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "batchnorm_normalize: unknown backend %d", (int)c->backend);
}

// din == in: each own kernel and the cpu reference read an element of in before they write its din;
// cuDNN's backward does not say it allows it
static mo_status bn_inplace_check(const mo_ctx *c, const void *din, const void *in, const char *op) {
    if (din == in && c->bn_cudnn) return MO_FAIL(MO_ERR_INVALID, "%s: din must not be in with MEMOPT_BN=cudnn", op);
    return MO_OK;
}

size_t mo_batchnorm_backward_scratch_bytes(mo_dtype dt, int M, int C, int relu) {
    return relu ? (size_t)M * C * mo_dtype_size(dt) : 0;
}

mo_status mo_batchnorm_backward(mo_ctx *c, mo_dtype dt, void *din, float *dgamma, float *dbeta, const void *dout,
                                const void *in, const void *out, const float *gamma, const float *mean,
                                const float *rstd, int M, int C, int relu) {
    MO_TRY(bn_check(dt, M, C, "batchnorm_backward"));
    MO_TRY(bn_inplace_check(c, din, in, "batchnorm_backward"));
    if (relu && !out && c->backend != MO_BACKEND_DRY)
        return MO_FAIL(MO_ERR_INVALID, "batchnorm_backward: relu needs the forward's out");
    const double n = (double)M * C, e = (double)mo_dtype_size(dt);
    void *masked = NULL;
    // The ReLU mask first (relu_backward's cost is recorded by it), into scratch: dout stays as it was.
    MO_TRY(mo_scratch_alloc(c, mo_batchnorm_backward_scratch_bytes(dt, M, C, relu), &masked));
    mo_status rs = MO_OK;
    if (relu) rs = mo_relu_backward(c, dt, masked, dout, out, (size_t)n);
    const void *dy = relu ? masked : dout;
    if (rs == MO_OK) {
        // dout and in read twice (the sums, then dx), din written
        mo_cost_record(c, "batchnorm_bwd", MO_COST_MEMORY, 12 * n, e * n * 5);
        switch (c->backend) {
        case MO_BACKEND_CPU:
            rs = batchnorm_backward_cpu(dt, din, dgamma, dbeta, dy, in, gamma, NULL, mean, rstd, M, C);
            break;
        case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
            rs = batchnorm_backward_cuda(c, dt, din, dgamma, dbeta, (void *)dy, NULL, in, gamma, mean, rstd, M, C);
#else
            rs = MO_FAIL(MO_ERR_UNSUPPORTED, "batchnorm_backward: this build has no CUDA");
#endif
            break;
        case MO_BACKEND_DRY: break;
        default: rs = MO_FAIL(MO_ERR_INTERNAL, "batchnorm_backward: unknown backend %d", (int)c->backend);
        }
    }
    const mo_status fs = mo_scratch_free(c, masked);
    return rs != MO_OK ? rs : fs;
}

mo_status mo_batchnorm_add_relu_forward(mo_ctx *c, mo_dtype dt, void *out, float *mean, float *rstd, float *run_mean,
                                        float *run_var, const void *in, const float *gamma, const float *beta,
                                        const void *res, int M, int C, float momentum) {
    MO_TRY(bn_check(dt, M, C, "batchnorm_add_relu_forward"));
    if ((run_mean == NULL) != (run_var == NULL))
        return MO_FAIL(MO_ERR_INVALID, "batchnorm_add_relu_forward: run_mean and run_var must be both set or both NULL");
    if (!res && c->backend != MO_BACKEND_DRY)
        return MO_FAIL(MO_ERR_INVALID, "batchnorm_add_relu_forward: res is NULL");
    if (res && res == out && c->bn_cudnn) // cuDNN's BN writes out before the add reads res
        return MO_FAIL(MO_ERR_INVALID, "batchnorm_add_relu_forward: res must not be out with MEMOPT_BN=cudnn");
    const double n = (double)M * C, e = (double)mo_dtype_size(dt);
    // in read twice (statistics, normalize), res read, out written
    mo_cost_record(c, "batchnorm_add_relu_fwd", MO_COST_MEMORY, 10 * n, e * n * 4);
    switch (c->backend) {
    case MO_BACKEND_CPU:
        // the three ops' roundings, in their order: BN to dt, + res to dt, ReLU
        batchnorm_stats_cpu(dt, mean, rstd, run_mean, run_var, in, M, C, momentum);
        return batchnorm_normalize_cpu(dt, out, in, gamma, beta, mean, rstd, res, M, C, 1);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return batchnorm_forward_cuda(c, dt, out, mean, rstd, run_mean, run_var, in, gamma, beta, res, M, C, momentum,
                                      1);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "batchnorm_add_relu_forward: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "batchnorm_add_relu_forward: unknown backend %d", (int)c->backend);
}

mo_status mo_batchnorm_relu_backward_inplace(mo_ctx *c, mo_dtype dt, void *din, float *dgamma, float *dbeta,
                                             void *dout, const void *in, const void *out, const float *gamma,
                                             const float *mean, const float *rstd, int M, int C) {
    MO_TRY(bn_check(dt, M, C, "batchnorm_relu_backward_inplace"));
    MO_TRY(bn_inplace_check(c, din, in, "batchnorm_relu_backward_inplace"));
    if (!out && c->backend != MO_BACKEND_DRY)
        return MO_FAIL(MO_ERR_INVALID, "batchnorm_relu_backward_inplace: the mask needs the forward's out");
    const double n = (double)M * C, e = (double)mo_dtype_size(dt);
    // sums: dout, out, in read, the masked dout written; dx: dout and in read, din written
    mo_cost_record(c, "batchnorm_relu_bwd", MO_COST_MEMORY, 14 * n, e * n * 7);
    switch (c->backend) {
    case MO_BACKEND_CPU:
        MO_TRY(relu_backward_cpu(dt, dout, dout, out, (size_t)n));
        return batchnorm_backward_cpu(dt, din, dgamma, dbeta, dout, in, gamma, NULL, mean, rstd, M, C);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return batchnorm_backward_cuda(c, dt, din, dgamma, dbeta, dout, out, in, gamma, mean, rstd, M, C);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "batchnorm_relu_backward_inplace: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "batchnorm_relu_backward_inplace: unknown backend %d", (int)c->backend);
}

mo_status mo_batchnorm_relu_backward_remask(mo_ctx *c, mo_dtype dt, void *din, float *dgamma, float *dbeta,
                                            const void *dout, const void *in, const float *gamma, const float *beta,
                                            const float *mean, const float *rstd, int M, int C) {
    MO_TRY(bn_check(dt, M, C, "batchnorm_relu_backward_remask"));
    // refused on every backend, as the aliasing above, so the model's choice (and the dry backend's
    // allocations) are the cuda ones
    if (c->bn_cudnn)
        return MO_FAIL(MO_ERR_INVALID, "batchnorm_relu_backward_remask: not with MEMOPT_BN=cudnn (its forward is cuDNN's, "
                                       "whose output the mask cannot be recomputed from)");
    MO_TRY(bn_inplace_check(c, din, in, "batchnorm_relu_backward_remask"));
    const double n = (double)M * C, e = (double)mo_dtype_size(dt);
    // sums: dout and in read; dx: dout and in read, din written (the mask recomputed in both)
    mo_cost_record(c, "batchnorm_relu_remask_bwd", MO_COST_MEMORY, 18 * n, e * n * 5);
    switch (c->backend) {
    case MO_BACKEND_CPU:
        return batchnorm_backward_cpu(dt, din, dgamma, dbeta, dout, in, gamma, beta, mean, rstd, M, C);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return batchnorm_relu_remask_backward_cuda(c, dt, din, dgamma, dbeta, dout, in, gamma, beta, mean, rstd, M, C);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "batchnorm_relu_backward_remask: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "batchnorm_relu_backward_remask: unknown backend %d", (int)c->backend);
}
