// Sum of squares: plain-C reference (double accumulation) and the dispatcher.
#include "sumsq.h"

#include "ops.h"
#include "cost.h"

// One block per 8 Ki elements up to 1024 blocks: a single wave on an H200 (132 SMs x 8 blocks of 256
// threads), each thread then reads ~32 float4 per 128 Mi elements.
int sumsq_blocks(size_t n) {
    if (n == 0) return 0;
    size_t g = (n + 8191) / 8192;
    return (int)(g < 1024 ? g : 1024);
}

size_t mo_sumsq_scratch_bytes(size_t n) {
    int g = sumsq_blocks(n);
    return g ? ((size_t)g + 1) * sizeof(double) : 0;
}

mo_status sumsq_cpu(double *out, const float *g, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)g[i] * (double)g[i];
    *out = s;
    return MO_OK;
}

mo_status mo_sumsq(mo_ctx *c, double *out, const float *g, size_t n) {
    void *scratch = NULL;
    MO_TRY(mo_scratch_alloc(c, mo_sumsq_scratch_bytes(n), &scratch));
    mo_status st;
    mo_cost_record(c, "sumsq", MO_COST_MEMORY, 2.0 * n, 4.0 * n);
    switch (c->backend) {
    case MO_BACKEND_CPU: st = sumsq_cpu(out, g, n); break;
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        st = sumsq_cuda(c, out, g, scratch, n);
#else
        st = MO_FAIL(MO_ERR_UNSUPPORTED, "sumsq: this build has no CUDA");
#endif
        break;
    case MO_BACKEND_DRY:
        *out = 0.0;
        st = MO_OK;
        break;
    default: st = MO_FAIL(MO_ERR_INTERNAL, "sumsq: unknown backend %d", (int)c->backend); break;
    }
    mo_status st2 = mo_scratch_free(c, scratch);
    return st != MO_OK ? st : st2;
}
