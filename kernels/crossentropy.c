// Fused softmax cross-entropy: plain-C reference (after karpathy/llm.c crossentropy_softmax_backward)
// and the dispatcher. The row sum of exponentials is accumulated in double: the reference should not be
// the less accurate side (a sequential fp32 sum of 50304 terms drifts by ~4e-6).
#include "crossentropy.h"

#include <float.h>
#include <math.h>
#include "ops.h"
#include "cost.h"

mo_status crossentropy_fused_cpu(float *losses, float *logits, const int *targets, int N, int V, float dloss) {
    for (int r = 0; r < N; r++) {
        float *x = logits + (size_t)r * V;
        int t = targets[r];
        float m = -FLT_MAX;
        for (int j = 0; j < V; j++)
            if (x[j] > m) m = x[j];
        double sum = 0.0;
        for (int j = 0; j < V; j++) sum += expf(x[j] - m);
        float S = (float)sum;
        float inv = 1.0f / S;
        int valid = t >= 0 && t < V;
        losses[r] = valid ? logf(S) - (x[t] - m) : NAN;
        for (int j = 0; j < V; j++) {
            float p = expf(x[j] - m) * inv;
            float onehot = j == t ? 1.0f : 0.0f;
            x[j] = (p - onehot) * dloss;
        }
    }
    return MO_OK;
}

mo_status mo_crossentropy_fused(mo_ctx *c, float *losses, float *logits, const int *targets, int B, int T, int V,
                                float dloss) {
    if (B <= 0 || T <= 0 || V <= 0)
        return MO_FAIL(MO_ERR_INVALID, "crossentropy: bad shape B=%d T=%d V=%d", B, T, V);
    if ((size_t)B * T > (size_t)0x7fffffff)
        return MO_FAIL(MO_ERR_INVALID, "crossentropy: B*T=%zu rows too many", (size_t)B * T);
    int N = B * T;
    mo_cost_record(c, "crossentropy", MO_COST_MEMORY, 5.0 * B * T * V, 4 * 2.0 * B * T * V); // logits read, dlogits written
    switch (c->backend) {
    case MO_BACKEND_CPU: return crossentropy_fused_cpu(losses, logits, targets, N, V, dloss);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return crossentropy_fused_cuda(c, losses, logits, targets, N, V, dloss);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "crossentropy: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "crossentropy: unknown backend %d", (int)c->backend);
}
