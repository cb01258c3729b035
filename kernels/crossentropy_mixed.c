// Fused softmax cross-entropy with 16-bit logits (ops_mixed.h): plain-C reference and the dispatcher.
// The reference converts one row of logits exactly to fp32 (a host buffer of V floats), runs
// crossentropy.c's reference on it, and rounds the row's gradient once back into the 16-bit logits.
#include <stdlib.h>

#include "crossentropy.h"
#include "ops.h"
#include "ops_mixed.h"
#include "ops_mixed_impl.h"
#include "cost.h"

mo_status crossentropy_fused_mixed_cpu(mo_dtype dt, float *losses, void *logits, const int *targets, int N, int V,
                                       float dloss) {
    float *row = malloc((size_t)V * sizeof(float));
    if (!row) return MO_FAIL(MO_ERR_OOM, "crossentropy_mixed: host out of memory for a row of %d logits", V);
    for (int r = 0; r < N; r++) {
        size_t o = (size_t)r * V;
        for (int j = 0; j < V; j++) row[j] = mixed_ld(dt, logits, o + j);
        crossentropy_fused_cpu(losses + r, row, targets + r, 1, V, dloss);
        for (int j = 0; j < V; j++) mixed_st(dt, logits, o + j, row[j]);
    }
    free(row);
    return MO_OK;
}

mo_status mo_crossentropy_fused_mixed(mo_ctx *c, mo_dtype dt, float *losses, void *logits, const int *targets,
                                      int B, int T, int V, float dloss) {
    if (dt == MO_F32) return mo_crossentropy_fused(c, losses, (float *)logits, targets, B, T, V, dloss);
    MO_TRY(mixed_check_dtype(dt, "crossentropy_mixed"));
    if (B <= 0 || T <= 0 || V <= 0)
        return MO_FAIL(MO_ERR_INVALID, "crossentropy_mixed: bad shape B=%d T=%d V=%d", B, T, V);
    if ((size_t)B * T > (size_t)0x7fffffff)
        return MO_FAIL(MO_ERR_INVALID, "crossentropy_mixed: B*T=%zu rows too many", (size_t)B * T);
    int N = B * T;
    mo_cost_record(c, "crossentropy", MO_COST_MEMORY, 5.0 * B * T * V, mo_dtype_size(dt) * 2.0 * B * T * V);
    switch (c->backend) {
    case MO_BACKEND_CPU: return crossentropy_fused_mixed_cpu(dt, losses, logits, targets, N, V, dloss);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return crossentropy_fused_mixed_cuda(c, dt, losses, logits, targets, N, V, dloss);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "crossentropy_mixed: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "crossentropy_mixed: unknown backend %d", (int)c->backend);
}
