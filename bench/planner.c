// The planner's memory side: every figure is a dry run of the run engine (no second model of memory).
//
// Why steps 1 after warm-up 1 is a real run's timed-step peak. A real run reports the allocator's
// peaks over its timed steps, after its warm-up (mo_run_mark_timed resets them). Every training step
// makes the same requests in the same order (the schedule depends on the configuration only, not on
// data or step number: Adam's state is allocated at model creation, not lazily), so a step's peak can
// differ from another's only through the caching allocator's state at the step's start: which
// segments are cached and how they are split. After one full step that state is the steady one:
// each later step starts from the blocks the previous step freed. So the one timed step after one
// warm-up step peaks where every timed step of a longer run peaks. tests/test_plan.c checks this
// claim against runs of 3 warm-up + 5 timed steps and against the cpu backend, to the byte; a dry
// step costs microseconds per allocation, not the shapes' FLOPs, so the second step is nearly free
// (a 7B-parameter shape plans in milliseconds) and there is no reason to trade it away.
#include "bench/planner.h"
#include "models/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

mo_status mo_plan_env_init(mo_run_env *env) {
#ifdef __GLIBC__
    // A plan makes hundreds of dry runs, each allocating and freeing the same host buffers (the
    // batch's tokens, the allocator's maps). glibc serves large ones with mmap and unmaps them on
    // free, so every run would fault their pages in again; kept in the heap they are reused. Host
    // memory only: no figure of the plan depends on it.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
    mo_config *c = malloc(sizeof *c);
    if (!c) return MO_FAIL(MO_ERR_INTERNAL, "out of host memory");
    mo_config_defaults(c, MO_CMD_PLAN);
    mo_run_config rc = c->base;
    free(c);
    rc.backend = MO_BACKEND_DRY;
    return mo_run_env_init(env, &rc);
}

static void dry_config(const mo_run_config *rc, mo_run_config *d) {
    *d = *rc;
    d->backend = MO_BACKEND_DRY;
    d->steps = 1;
    d->warmup = 1;
    d->monitor = 0;
    d->csv[0] = '\0';
}

mo_status mo_plan_predict(const mo_run_config *rc, const mo_run_env *env, mo_csv_row *row) {
    return mo_plan_predict_traced(rc, env, row, NULL);
}

mo_status mo_plan_predict_traced(const mo_run_config *rc, const mo_run_env *env, mo_csv_row *row, mo_cost_trace *trace) {
    mo_run_config d;
    dry_config(rc, &d);
    return mo_run_execute_traced(&d, env, row, NULL, trace);
}

static int plannable_status(const mo_csv_row *r) { return !strcmp(r->status, "ok") || !strcmp(r->status, "oom"); }

// rc under a cap of the headroom (or rc's own cap, when that is tighter).
static void capped(const mo_run_config *rc, uint64_t headroom, mo_run_config *out) {
    *out = *rc;
    uint64_t own = mo_cap_resolve(&rc->cap, rc->device_mem_bytes);
    uint64_t cap = own && own < headroom ? own : headroom;
    out->cap.kind = 2;
    out->cap.bytes = cap;
    out->cap.fraction = 0;
    snprintf(out->cap_text, sizeof out->cap_text, "%llu", (unsigned long long)cap);
}

mo_status mo_plan_fit_check(const mo_run_config *rc, const mo_run_env *env, uint64_t headroom, mo_plan_fit *out) {
    return mo_plan_fit_check_traced(rc, env, headroom, out, NULL);
}

mo_status mo_plan_fit_check_traced(const mo_run_config *rc, const mo_run_env *env, uint64_t headroom, mo_plan_fit *out,
                                   mo_cost_trace *trace) {
    memset(out, 0, sizeof *out);
    MO_TRY(mo_plan_predict_traced(rc, env, &out->row, trace));
    out->runs = 1;
    out->plannable = plannable_status(&out->row);
    if (!out->plannable || strcmp(out->row.status, "ok")) return MO_OK; // its own cap already fails it
    if ((uint64_t)out->row.peak_reserved_bytes <= headroom) {
        out->fits = 1; // the run never reserved more than the headroom: under a cap it runs the same
        return MO_OK;
    }
    // Reserved bytes went past the headroom, but cached free segments may be what did it: under the
    // cap the allocator releases them and retries, as it would on the device.
    mo_run_config c;
    capped(rc, headroom, &c);
    mo_csv_row r;
    MO_TRY(mo_plan_predict(&c, env, &r));
    out->runs++;
    out->fits = !strcmp(r.status, "ok");
    out->retries = out->fits ? (int)r.num_alloc_retries : 0;
    return MO_OK;
}

// Fits, with the global batch m * accum.
static mo_status fits_batch(const mo_run_config *rc, const mo_run_env *env, uint64_t headroom, int m, int *fits) {
    mo_run_config c;
    capped(rc, headroom, &c);
    c.batch = m * rc->accum;
    mo_csv_row r;
    MO_TRY(mo_plan_predict(&c, env, &r));
    *fits = !strcmp(r.status, "ok");
    return MO_OK;
}

// The dry run holds the batch's tokens on the host (4 int arrays of batch x seq): past this many
// tokens a probe would cost more host memory (1 GiB) than any plan is worth.
#define MAX_PROBE_TOKENS ((int64_t)64 << 20)

mo_status mo_plan_max_batch(const mo_run_config *rc, const mo_run_env *env, uint64_t headroom, int *best,
                            int *at_limit, int *runs) {
    *best = 0;
    *at_limit = 0;
    *runs = 0;
    int64_t limit_batch = MO_MAX_BATCH;
    if ((int64_t)rc->seq * limit_batch > MAX_PROBE_TOKENS) limit_batch = MAX_PROBE_TOKENS / rc->seq;
    int max_m = (int)(limit_batch / rc->accum);
    if (max_m < 1) return MO_OK;
    int m0 = rc->batch / rc->accum;
    if (m0 < 1) m0 = 1;
    if (m0 > max_m) m0 = max_m;
    int lo = 0, hi = -1, f = 0; // lo fits (0: none known), hi does not (-1: none known)
    MO_TRY(fits_batch(rc, env, headroom, m0, &f));
    (*runs)++;
    if (f) {
        lo = m0;
        while (hi < 0) {
            if (lo == max_m) { *at_limit = 1; break; }
            int m = lo > max_m / 2 ? max_m : 2 * lo;
            MO_TRY(fits_batch(rc, env, headroom, m, &f));
            (*runs)++;
            if (f) lo = m;
            else hi = m;
        }
    } else {
        hi = m0;
    }
    while (hi > 0 && hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        MO_TRY(fits_batch(rc, env, headroom, mid, &f));
        (*runs)++;
        if (f) lo = mid;
        else hi = mid;
    }
    *best = lo * rc->accum;
    return MO_OK;
}

mo_status mo_plan_config_from_row(const mo_csv_row *r, mo_run_config *rc) {
    mo_config *c = malloc(sizeof *c);
    if (!c) return MO_FAIL(MO_ERR_INTERNAL, "out of host memory");
    mo_config_defaults(c, MO_CMD_RUN);
    *rc = c->base;
    free(c);
    rc->preset[0] = '\0';
    // The model's dimensions from its dims text (an empty model column: a gpt row; a schema-1 row's
    // dims are derived from its GPT columns by the reader).
    const mo_model_ops *m = mo_model_find(r->model[0] ? r->model : "gpt");
    if (!m) return MO_FAIL(MO_ERR_INVALID, "model '%s': not a model of this memopt", r->model);
    snprintf(rc->model, sizeof rc->model, "%s", m->name);
    if (!r->dims[0]) return MO_FAIL(MO_ERR_INVALID, "column dims: missing (or the GPT columns of a schema-1 row)");
    MO_TRY(m->dims_parse(r->dims, rc));
    if (r->batch < 1 || r->batch > (1 << 30)) return MO_FAIL(MO_ERR_INVALID, "column batch: missing or out of range");
    rc->batch = (int)r->batch;
    rc->accum = r->accum > 0 ? (int)r->accum : 1;
    rc->tp = r->tp > 0 ? (int)r->tp : 1;
    rc->pp = r->pp > 0 ? (int)r->pp : 1;
    rc->dp = r->dp > 0 ? (int)r->dp : 1;
    rc->zero = r->zero > 0 ? (int)r->zero : 0;
    rc->sp = r->sp > 0 ? 1 : 0;
    if (r->precision[0]) MO_TRY(mo_precision_parse(r->precision, &rc->precision));
    if (!strcmp(r->attn, "fused")) rc->attn = MO_ATTN_FUSED;
    else if (!r->attn[0] || !strcmp(r->attn, "materialized")) rc->attn = MO_ATTN_MATERIALIZED;
    else return MO_FAIL(MO_ERR_INVALID, "column attn: '%s' (accepted: materialized, fused)", r->attn);
    if (r->ckpt[0]) MO_TRY(mo_ckpt_parse(r->ckpt, &rc->ckpt));
    if (r->alloc[0]) MO_TRY(mo_alloc_kind_parse(r->alloc, &rc->alloc));
    // The offloaded state is in the host allocator: without it the replay would put it on the device.
    if (r->offload[0] && mo_offload_parse(r->offload, &rc->offload) != MO_OK)
        return MO_FAIL(MO_ERR_INVALID, "column offload: '%s' (accepted: none, optimizer, activations)", r->offload);
    // The dry replay runs every rank's allocations in this process: the communicator does not change them.
    rc->comm = MO_COMM_LOCAL;
    if (r->cap_bytes > 0) {
        rc->cap.kind = 2;
        rc->cap.bytes = (uint64_t)r->cap_bytes;
        snprintf(rc->cap_text, sizeof rc->cap_text, "%lld", (long long)r->cap_bytes);
    }
    if (r->device_mem_bytes > 0) rc->device_mem_bytes = (uint64_t)r->device_mem_bytes;
    rc->backend = MO_BACKEND_DRY;
    return mo_run_config_validate(rc);
}
