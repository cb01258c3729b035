// The training steps' op and activation helpers, shared by the models' steps (gpt_step.c, mlp.c) and the schedule (strategies/schedule.c) so
// that every model's allocation trace (memopt run --trace) carries the same labels: the op each
// allocation happens in (the call as written), the step's phase (forward, backward, recompute,
// optimizer) and the tensor (the destination as written, "&a->ln1").
//
// A file that includes it defines DT, its activation dtype (mo_dtype), before the first act_alloc;
// OP needs a `mo_ctx *x` in scope, PHASE / act_alloc / stat_alloc / act_free a model pointer m with
// an `mo_ctx *ctx` member.
#ifndef MEMOPT_STEP_OPS_H
#define MEMOPT_STEP_OPS_H

#include "kernels/ctx.h"
#include "kernels/dtype.h"
#include "strategies/alloc.h"

// An op, timed by the profiler when it is on, and named in the allocation trace by the call as
// written.
#define OP_CTX(ctx, cat, call)                                     \
    do {                                                           \
        mo_alloc_trace_mark((ctx)->alloc, MO_TRACE_OP, #call);     \
        MO_TRY(mo_prof_begin((ctx), (cat)));                       \
        MO_TRY(call);                                              \
        mo_alloc_trace_mark((ctx)->alloc, MO_TRACE_OP_END, NULL);  \
        MO_TRY(mo_prof_end(ctx));                                  \
    } while (0)
#define OP(cat, call) OP_CTX(x, cat, call)

// The step's phase from here on, for the allocation trace.
#define PHASE(m, name) mo_alloc_trace_mark((m)->ctx->alloc, MO_TRACE_PHASE, (name))

// n elements of dtype dt from ctx's allocator, as an activation; the trace names the block name.
static inline mo_status mo_step_act_alloc(mo_ctx *ctx, mo_dtype dt, size_t n, void **p, const char *name) {
    mo_alloc_trace_tensor(ctx->alloc, name);
    return mo_alloc(ctx->alloc, n * mo_dtype_size(dt), MO_CAT_ACTIVATION, p);
}

// n fp32 per-row statistics (mean, rstd, lse), as an activation.
static inline mo_status mo_step_stat_alloc(mo_ctx *ctx, size_t n, float **p, const char *name) {
    mo_alloc_trace_tensor(ctx->alloc, name);
    return mo_alloc(ctx->alloc, n * sizeof(float), MO_CAT_ACTIVATION, (void **)p);
}

// Frees *p when set and clears it, so a later unwind (out of memory midway) frees nothing twice.
static inline void mo_step_free(mo_ctx *ctx, void **p) {
    if (*p) mo_free(ctx->alloc, *p);
    *p = NULL;
}

#define act_alloc(m, n, p) mo_step_act_alloc((m)->ctx, DT, (n), (p), #p)
#define stat_alloc(m, n, p) mo_step_stat_alloc((m)->ctx, (n), (p), #p)
#define act_free(m, p) mo_step_free((m)->ctx, (void **)(p))

#endif
