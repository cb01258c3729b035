// Max pool, global average pool and ReLU backward (pool.h): the plain-C references and the dispatchers.
#include "pool.h"

#include <math.h>
#include <stdlib.h>
#include "cost.h"
#include "resnet_ops_impl.h"

int mo_pool_out_dim(int H, int R, int stride, int pad) {
    if (stride < 1 || H + 2 * pad - R < 0) return 0;
    return (H + 2 * pad - R) / stride + 1;
}

mo_status maxpool_forward_cpu(mo_dtype dt, void *out, const void *in, int N, int H, int W, int C, int R, int stride,
                              int pad) {
    const int P = mo_pool_out_dim(H, R, stride, pad), Q = mo_pool_out_dim(W, R, stride, pad);
    for (int n = 0; n < N; n++)
        for (int p = 0; p < P; p++)
            for (int q = 0; q < Q; q++)
                for (int ch = 0; ch < C; ch++) {
                    float m = -INFINITY;
                    for (int r = 0; r < R; r++) {
                        const int h = p * stride - pad + r;
                        if (h < 0 || h >= H) continue;
                        for (int t = 0; t < R; t++) {
                            const int w = q * stride - pad + t;
                            if (w < 0 || w >= W) continue;
                            const float v = rn_ld(dt, in, (((size_t)n * H + h) * W + w) * C + ch);
                            if (v > m || isnan(v)) m = v; // NaN propagates, as torch.max_pool2d
                        }
                    }
                    rn_st(dt, out, (((size_t)n * P + p) * Q + q) * C + ch, m);
                }
    return MO_OK;
}

mo_status maxpool_backward_cpu(mo_dtype dt, void *din, const void *dout, const void *in, const void *out, int N,
                               int H, int W, int C, int R, int stride, int pad) {
    const int P = mo_pool_out_dim(H, R, stride, pad), Q = mo_pool_out_dim(W, R, stride, pad);
    const size_t nin = (size_t)N * H * W * C;
    float *acc = calloc(nin ? nin : 1, sizeof *acc);
    if (!acc) return MO_FAIL(MO_ERR_OOM, "maxpool_backward_cpu: host out of memory");
    for (int n = 0; n < N; n++)
        for (int p = 0; p < P; p++)
            for (int q = 0; q < Q; q++)
                for (int ch = 0; ch < C; ch++) {
                    const size_t o = (((size_t)n * P + p) * Q + q) * C + ch;
                    const float m = rn_ld(dt, out, o);
                    size_t at = (size_t)-1;
                    for (int r = 0; r < R && at == (size_t)-1; r++) {
                        const int h = p * stride - pad + r;
                        if (h < 0 || h >= H) continue;
                        for (int t = 0; t < R; t++) {
                            const int w = q * stride - pad + t;
                            if (w < 0 || w >= W) continue;
                            const size_t i = (((size_t)n * H + h) * W + w) * C + ch;
                            if (rn_ld(dt, in, i) == m) { at = i; break; }
                        }
                    }
                    if (at != (size_t)-1) acc[at] += rn_ld(dt, dout, o);
                }
    for (size_t i = 0; i < nin; i++) rn_st(dt, din, i, acc[i]);
    free(acc);
    return MO_OK;
}

mo_status avgpool_forward_cpu(mo_dtype dt, void *out, const void *in, int N, int HW, int C) {
    for (int n = 0; n < N; n++)
        for (int ch = 0; ch < C; ch++) {
            float s = 0.0f;
            for (int i = 0; i < HW; i++) s += rn_ld(dt, in, ((size_t)n * HW + i) * C + ch);
            rn_st(dt, out, (size_t)n * C + ch, s / (float)HW);
        }
    return MO_OK;
}

mo_status avgpool_backward_cpu(mo_dtype dt, void *din, const void *dout, int N, int HW, int C) {
    for (int n = 0; n < N; n++)
        for (int ch = 0; ch < C; ch++) {
            const float g = rn_ld(dt, dout, (size_t)n * C + ch) / (float)HW;
            for (int i = 0; i < HW; i++) rn_st(dt, din, ((size_t)n * HW + i) * C + ch, g);
        }
    return MO_OK;
}

mo_status relu_forward_cpu(mo_dtype dt, void *out, const void *in, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float v = rn_ld(dt, in, i);
        rn_st(dt, out, i, v <= 0.0f ? 0.0f : v); // NaN kept, as torch.relu
    }
    return MO_OK;
}

mo_status relu_backward_cpu(mo_dtype dt, void *din, const void *dout, const void *out, size_t n) {
    for (size_t i = 0; i < n; i++) rn_st(dt, din, i, rn_ld(dt, out, i) > 0.0f ? rn_ld(dt, dout, i) : 0.0f);
    return MO_OK;
}

// ---- dispatchers ----
static mo_status pool_check(mo_dtype dt, int N, int H, int W, int C, int R, int stride, int pad, const char *op) {
    MO_TRY(resnet_check_dtype(dt, op));
    if (N < 1 || H < 1 || W < 1 || C < 1 || R < 1 || stride < 1 || pad < 0 || 2 * pad > R ||
        mo_pool_out_dim(H, R, stride, pad) < 1 || mo_pool_out_dim(W, R, stride, pad) < 1)
        return MO_FAIL(MO_ERR_INVALID, "%s: bad shape N %d H %d W %d C %d window %d stride %d pad %d (pad at most half the window)",
                       op, N, H, W, C, R, stride, pad);
    return MO_OK;
}

#ifdef MEMOPT_HAVE_CUDA
#define POOL_CUDA(call) return (call)
#else
#define POOL_CUDA(call) return MO_FAIL(MO_ERR_UNSUPPORTED, "%s: this build has no CUDA", __func__)
#endif

mo_status mo_maxpool_forward(mo_ctx *c, mo_dtype dt, void *out, const void *in, int N, int H, int W, int C, int R,
                             int stride, int pad) {
    MO_TRY(pool_check(dt, N, H, W, C, R, stride, pad, "maxpool_forward"));
    const double e = (double)mo_dtype_size(dt), no = (double)N * mo_pool_out_dim(H, R, stride, pad) *
                                                     mo_pool_out_dim(W, R, stride, pad) * C;
    mo_cost_record(c, "maxpool_fwd", MO_COST_MEMORY, no * R * R, e * ((double)N * H * W * C + no));
    switch (c->backend) {
    case MO_BACKEND_CPU: return maxpool_forward_cpu(dt, out, in, N, H, W, C, R, stride, pad);
    case MO_BACKEND_CUDA: POOL_CUDA(maxpool_forward_cuda(c, dt, out, in, N, H, W, C, R, stride, pad));
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "maxpool_forward: unknown backend %d", (int)c->backend);
}

mo_status mo_maxpool_backward(mo_ctx *c, mo_dtype dt, void *din, const void *dout, const void *in, const void *out,
                              int N, int H, int W, int C, int R, int stride, int pad) {
    MO_TRY(pool_check(dt, N, H, W, C, R, stride, pad, "maxpool_backward"));
    const double e = (double)mo_dtype_size(dt), ni = (double)N * H * W * C,
                 no = (double)N * mo_pool_out_dim(H, R, stride, pad) * mo_pool_out_dim(W, R, stride, pad) * C;
    // in read for each candidate window, out and dout read, din written
    mo_cost_record(c, "maxpool_bwd", MO_COST_MEMORY, no * R * R, e * (2 * ni + 2 * no));
    switch (c->backend) {
    case MO_BACKEND_CPU: return maxpool_backward_cpu(dt, din, dout, in, out, N, H, W, C, R, stride, pad);
    case MO_BACKEND_CUDA: POOL_CUDA(maxpool_backward_cuda(c, dt, din, dout, in, out, N, H, W, C, R, stride, pad));
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "maxpool_backward: unknown backend %d", (int)c->backend);
}

static mo_status avg_check(mo_dtype dt, int N, int HW, int C, const char *op) {
    MO_TRY(resnet_check_dtype(dt, op));
    if (N < 1 || HW < 1 || C < 1) return MO_FAIL(MO_ERR_INVALID, "%s: N %d HW %d C %d must be >= 1", op, N, HW, C);
    return MO_OK;
}

mo_status mo_avgpool_forward(mo_ctx *c, mo_dtype dt, void *out, const void *in, int N, int HW, int C) {
    MO_TRY(avg_check(dt, N, HW, C, "avgpool_forward"));
    const double e = (double)mo_dtype_size(dt), n = (double)N * HW * C;
    mo_cost_record(c, "avgpool_fwd", MO_COST_MEMORY, n, e * (n + (double)N * C));
    switch (c->backend) {
    case MO_BACKEND_CPU: return avgpool_forward_cpu(dt, out, in, N, HW, C);
    case MO_BACKEND_CUDA: POOL_CUDA(avgpool_forward_cuda(c, dt, out, in, N, HW, C));
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "avgpool_forward: unknown backend %d", (int)c->backend);
}

mo_status mo_avgpool_backward(mo_ctx *c, mo_dtype dt, void *din, const void *dout, int N, int HW, int C) {
    MO_TRY(avg_check(dt, N, HW, C, "avgpool_backward"));
    const double e = (double)mo_dtype_size(dt), n = (double)N * HW * C;
    mo_cost_record(c, "avgpool_bwd", MO_COST_MEMORY, n, e * (n + (double)N * C));
    switch (c->backend) {
    case MO_BACKEND_CPU: return avgpool_backward_cpu(dt, din, dout, N, HW, C);
    case MO_BACKEND_CUDA: POOL_CUDA(avgpool_backward_cuda(c, dt, din, dout, N, HW, C));
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "avgpool_backward: unknown backend %d", (int)c->backend);
}

mo_status mo_relu_forward(mo_ctx *c, mo_dtype dt, void *out, const void *in, size_t n) {
    MO_TRY(resnet_check_dtype(dt, "relu_forward"));
    mo_cost_record(c, "relu_fwd", MO_COST_MEMORY, (double)n, (double)mo_dtype_size(dt) * 2.0 * n);
    switch (c->backend) {
    case MO_BACKEND_CPU: return relu_forward_cpu(dt, out, in, n);
    case MO_BACKEND_CUDA: POOL_CUDA(relu_forward_cuda(c, dt, out, in, n));
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "relu_forward: unknown backend %d", (int)c->backend);
}

mo_status mo_relu_backward(mo_ctx *c, mo_dtype dt, void *din, const void *dout, const void *out, size_t n) {
    MO_TRY(resnet_check_dtype(dt, "relu_backward"));
    mo_cost_record(c, "relu_bwd", MO_COST_MEMORY, (double)n, (double)mo_dtype_size(dt) * 3.0 * n);
    switch (c->backend) {
    case MO_BACKEND_CPU: return relu_backward_cpu(dt, din, dout, out, n);
    case MO_BACKEND_CUDA: POOL_CUDA(relu_backward_cuda(c, dt, din, dout, out, n));
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "relu_backward: unknown backend %d", (int)c->backend);
}
