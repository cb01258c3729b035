// The generic schedule's update (strategies/schedule.h): the fp16 loss scaler, the global gradient
// norm and clipping, AdamW; on one rank or over a split's world.
#include "strategies/schedule.h"

#include <math.h>
#include <stdlib.h>
#include "kernels/cost.h"
#include "kernels/ops.h"
#include "kernels/ops_mixed.h"
#include "models/step_ops.h"
#include "strategies/comm.h"
#include "strategies/offload_update.h"

void mo_sched_scaler_init(mo_sched_scaler *s, int on, int interval) {
    s->on = on;
    s->scale = on ? 65536.0f : 1.0f;
    s->clean = 0;
    s->interval = interval > 0 ? interval : 2000;
    s->skipped = 0;
    s->inject = 0;
}

// The squared gradient norm over every rank, the same on each: each rank sums its counted groups,
// then every rank gathers all W partial sums (each as two floats, hi + lo, ~48 bits) and adds them in
// rank order.
static mo_status split_sumsq(const mo_sched_optim *o, double *ss) {
    mo_ctx *ctx = o->ctx;
    double local = 0;
    for (int g = 0; g < o->n_groups; g++) {
        if (!o->groups[g].n || !o->groups[g].counted) continue;
        double v = 0;
        OP_CTX(ctx, MO_PROF_OPTIMIZER, mo_sumsq(ctx, &v, o->groups[g].grad, o->groups[g].n));
        local += v;
    }
    for (int g = 0; !o->groups && g < o->n_parts; g++) { // ZeRO: the rank's parts
        if (!o->parts[g].n) continue;
        double v = 0;
        OP_CTX(ctx, MO_PROF_OPTIMIZER, mo_sumsq(ctx, &v, o->parts[g].grads, o->parts[g].n));
        local += v;
    }
    if (o->world_size <= 1 || !o->world) { *ss = local; return MO_OK; }
    int W = o->world_size;
    float *all = malloc((size_t)W * 2 * sizeof(float)), mine[2];
    if (!all) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the gradient norm");
    mine[0] = (float)local;
    mine[1] = (float)(local - (double)mine[0]);
    void *dev = NULL;
    mo_status st = mo_scratch_alloc(ctx, (size_t)W * 2 * sizeof(float), &dev);
    float *d = dev;
    if (st == MO_OK) st = mo_memcpy_h2d(ctx, d + 2 * o->rank, mine, sizeof mine);
    if (st == MO_OK) st = mo_comm_allgather(o->world, d + 2 * o->rank, d, 2);
    if (st == MO_OK) st = mo_memcpy_d2h(ctx, all, d, (size_t)W * 2 * sizeof(float));
    if (dev) mo_scratch_free(ctx, dev);
    if (st != MO_OK) { // all was never (fully) written
        free(all);
        return st;
    }
    double sum = 0;
    for (int r = 0; r < W; r++) sum += (double)all[2 * r] + (double)all[2 * r + 1];
    free(all);
    *ss = sum;
    return st;
}

// *flag := 1 on every rank if it is non-zero on any rank (a world all-reduce of 0/1 as fp32): the loss
// scaler of a split must skip, halve and grow on all ranks together, or their scales and weights part.
static mo_status world_any(const mo_sched_optim *o, int *flag) {
    void *dev = NULL;
    float v = *flag ? 1.0f : 0.0f;
    MO_TRY(mo_scratch_alloc(o->ctx, sizeof(float), &dev));
    mo_status st = mo_memcpy_h2d(o->ctx, dev, &v, sizeof v);
    if (st == MO_OK) st = mo_comm_allreduce_sum(o->world, (float *)dev, 1);
    if (st == MO_OK && o->ctx->backend != MO_BACKEND_DRY) st = mo_memcpy_d2h(o->ctx, &v, dev, sizeof v);
    mo_status st2 = mo_scratch_free(o->ctx, dev);
    if (st != MO_OK) return st;
    *flag = v > 0;
    return st2;
}

// The scaler's verdict on this step's gradients (fp16): 1 when the update must be skipped. An inf or
// NaN anywhere halves the scale; interval clean steps in a row double it.
static mo_status scaler_check(const mo_sched_optim *o, mo_sched_scaler *sc, int *skip) {
    *skip = 0;
    if (!sc->on) return MO_OK;
    int bad = 0;
    if (o->n_parts > 0) {
        for (int g = 0; g < o->n_parts && !bad; g++)
            if (o->parts[g].n) OP_CTX(o->ctx, MO_PROF_OPTIMIZER, mo_nonfinite(o->ctx, o->parts[g].grads, o->parts[g].n, &bad));
    } else {
        OP_CTX(o->ctx, MO_PROF_OPTIMIZER, mo_nonfinite(o->ctx, o->grads, o->n, &bad));
    }
    // The test hook is ignored on dry: there the verdict does not travel (nothing moves), so one rank's
    // injected inf would leave the others waiting in the norm's all-gather.
    if (sc->inject && o->ctx->backend != MO_BACKEND_DRY) bad = 1;
    sc->inject = 0;
    if (o->world && o->world_size > 1) MO_TRY(world_any(o, &bad)); // one verdict for every rank
    if (bad) {
        sc->scale *= 0.5f;
        sc->clean = 0;
        sc->skipped++;
        *skip = 1;
    } else if (++sc->clean >= sc->interval) {
        sc->scale *= 2.0f;
        sc->clean = 0;
    }
    return MO_OK;
}

mo_status mo_sched_update(const mo_sched_optim *o, mo_sched_scaler *sc, int *step, mo_sched_update_info *out) {
    mo_ctx *x = o->ctx;
    // The gradients carry the loss scale of the step that made them (the scaler changes it below).
    float scale_used = sc->on ? sc->scale : 1.0f;
    mo_cost_set_region(x, MO_COST_OPTIMIZER); // until the next forward
    int skip = 0;
    mo_alloc_trace_mark(x->alloc, MO_TRACE_PHASE, "optimizer");
    MO_TRY(scaler_check(o, sc, &skip));
    if (out) { out->skipped = skip; out->grad_norm = NAN; }
    if (skip) return MO_OK;
    double ss = 0;
    if (o->groups || o->n_parts > 0) MO_TRY(split_sumsq(o, &ss));
    else OP_CTX(x, MO_PROF_OPTIMIZER, mo_sumsq(x, &ss, o->grads, o->n));
    double norm = sqrt(ss) / scale_used;
    if (out) out->grad_norm = x->backend == MO_BACKEND_DRY ? NAN : norm;
    float scale = 1.0f / scale_used; // unscale, then clip
    if (o->grad_clip > 0 && norm > o->grad_clip) scale = (float)(o->grad_clip / norm) / scale_used;
    ++*step;
    for (int g = 0; g < o->n_parts; g++) { // ZeRO: each part of the shard, the same per-element update
        const mo_sched_part *p = &o->parts[g];
        if (!p->n) continue;
        OP_CTX(x, MO_PROF_OPTIMIZER, mo_adamw_mixed(x, o->dt, p->params, p->wparams, p->grads, p->adam_m, p->adam_v,
                                                    p->n, o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, *step,
                                                    scale));
    }
    if (o->n_parts > 0) return MO_OK;
    if (o->host_grads) {
        if (*step < 1) return MO_FAIL(MO_ERR_INVALID, "adamw: step t=%d must be >= 1", *step);
        OP_CTX(x, MO_PROF_OPTIMIZER, mo_offload_update(o, *step, scale)); // strategies/offload_update.c
        return MO_OK;
    }
    OP_CTX(x, MO_PROF_OPTIMIZER, mo_adamw_mixed(x, o->dt, o->params, o->wparams, o->grads, o->adam_m, o->adam_v, o->n,
                                                o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, *step, scale));
    return MO_OK;
}
