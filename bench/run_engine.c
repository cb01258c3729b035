#include "bench/run_engine.h"
#include "bench/planner.h" // the GPU catalog
#include "bench/sweep.h"   // mo_config_name
#include "bench/trace.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kernels/copy_stream.h"
#include "models/model.h" // the model is reached through its table only

#ifdef MEMOPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

double mo_device_peak_tflops(const char *name, mo_precision p) {
    // The dense datasheet figures of the planner's catalog (bench/gpus.txt, sources in docs/gpus.md):
    // one table of GPUs for the MFU of a run and for the plan.
    mo_gpu_catalog cat;
    if (mo_gpu_catalog_load(NULL, &cat) != MO_OK) { mo_clear_error(); return 0; }
    const mo_gpu_spec *g = mo_gpu_catalog_match_device(&cat, name);
    double r = 0;
    if (g) {
        switch (p) {
        case MO_PREC_FP32: r = g->fp32; break;
        case MO_PREC_TF32: r = g->tf32; break;
        case MO_PREC_FP16: r = g->fp16; break;
        case MO_PREC_BF16: r = g->bf16; break;
        }
    }
    mo_gpu_catalog_free(&cat);
    return r;
}

static void git_rev(char *buf, size_t n) {
    // A copy of the tree without .git (the GPU machine gets one) names its revision here.
    const char *env = getenv("MEMOPT_GIT_REV");
    if (env && *env) { snprintf(buf, n, "%s", env); return; }
    snprintf(buf, n, "unknown");
    FILE *f = popen("git rev-parse --short=12 HEAD 2>/dev/null && git status --porcelain --untracked-files=no 2>/dev/null | head -1", "r");
    if (!f) return;
    char line[128];
    if (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char dirty[128];
        int is_dirty = fgets(dirty, sizeof dirty, f) != NULL;
        snprintf(buf, n, "%.32s%s", line, is_dirty ? "-dirty" : "");
    }
    pclose(f);
}

mo_status mo_run_env_init(mo_run_env *env, const mo_run_config *rc) {
    memset(env, 0, sizeof *env);
    git_rev(env->git_rev, sizeof env->git_rev);
    int n = 0;
    if (rc->backend == MO_BACKEND_CUDA) {
        MO_TRY(mo_device_count(&n));
        if (n == 0) return MO_FAIL(MO_ERR_UNSUPPORTED, "--backend cuda: no CUDA device here (try --backend dry or cpu)");
        MO_TRY(mo_device_query(0, &env->dev));
        env->have_device = 1;
    } else {
        // A row records the driver and runtime versions only: a dry or cpu run does not load cuBLASLt
        // (~0.3 s) for a version it would not print.
        mo_runtime_versions(&env->dev);
        snprintf(env->dev.name, sizeof env->dev.name, "%s (no device: %s backend)", "none", mo_backend_name(rc->backend));
        env->dev.total_mem_bytes = rc->device_mem_bytes;
    }
    return MO_OK;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// Nearest-rank percentile of a sorted array.
static double percentile(const double *v, int n, double q) {
    if (n <= 0) return NAN;
    int i = (int)ceil(q * n) - 1;
    if (i < 0) i = 0;
    if (i >= n) i = n - 1;
    return v[i];
}

static double median(const double *v, int n) {
    if (n <= 0) return NAN;
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The split of a --tp/--pp run (every rank with its own allocator under the same per-rank cap).
static mo_split_config split_config_of(const mo_run_config *rc, mo_backend_kind be, uint64_t cap) {
    mo_split_config sc;
    memset(&sc, 0, sizeof sc);
    sc.tp = rc->tp; sc.pp = rc->pp;
    sc.dp = rc->dp > 1 ? rc->dp : 1;
    sc.zero = rc->zero;
    sc.sp = rc->sp;
    sc.comm = rc->comm;
    sc.backend = be;
    sc.alloc = rc->alloc;
    sc.cap_bytes = cap;
    return sc;
}

// tp 1 x pp 1 is the plain model whatever --comm says: one rank has nothing to communicate (the NCCL
// path itself at one rank is tests/gpu_comm.c's).
static int is_split(const mo_run_config *rc) { return rc->tp * rc->pp * (rc->dp > 1 ? rc->dp : 1) > 1; }
static int ranks_of(const mo_run_config *rc) { return rc->tp * rc->pp * (rc->dp > 1 ? rc->dp : 1); }

static uint64_t used_device_bytes(void) {
#ifdef MEMOPT_HAVE_CUDA
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) == cudaSuccess) return (uint64_t)(t - f);
#endif
    return 0;
}

static void utc_now(char *buf, size_t n) {
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

struct mo_run_session {
    mo_run_config rc;
    const mo_run_env *env;
    const mo_model_ops *ops; // the model's table
    mo_backend_kind be;
    uint64_t cap;
    FILE *out;               // monitor lines; NULL: quiet
    int config_failed;       // the configuration was refused before anything was allocated
    mo_status st;            // the first failure (config, OOM, error); MO_OK while all is well
    char detail[1024];
    mo_allocator *a;
    mo_ctx *x;
    void *m;                 // the model's instance (ops->create)
    void *sp;                // --tp/--pp above 1: the ranks (ops->split->create; then a, x, m are NULL)
    mo_split_comm comm;      // taken when the split is released
    mo_model_step_info info; // of the last step
    int peak_rank;
    uint64_t rank_peak[64];  // a split's per-rank peak allocated bytes (taken when it is released)
    int n_ranks;
    mo_timer t;
    int timer_ok;
    int steps_run, timed;
    double *times, *recompute;
    int n, cap_n;
    double loss_first, loss_last;
    int skipped_steps;       // loss-scaler skips over all steps (warm-up included); final loss scale
    double loss_scale;
    mo_alloc_stats stats;    // taken when the model is released
    mo_allocator *ha;        // --offload: the host allocator (NULL otherwise)
    uint64_t host_bytes;     // its peak allocated bytes, taken at release
    mo_copy_stats copies;    // --offload activations: the copy stream over the timed steps (summed)
    uint64_t static_bytes;
    uint64_t dev_used_before, dev_used_peak_seen;
    double prof_ms[MO_PROF_COUNT]; // --profile: summed over the timed steps
    mo_cost_trace *trace;    // the ops of the timed steps (unsplit runs; NULL: none kept)
    mo_cost_trace own_trace; // --profile's, when the caller asked for none
    int oom_in_build;        // out of memory before the first step (static bytes alone do not fit)
    char *summary;           // --summary: the allocator's report at the end of the last step
    mo_trace *alloc_trace;   // --trace: the allocation trace, recording the first timed step
    int traced;              // the trace is written (events in trace_events)
    size_t trace_events;
};

static mo_status session_fail(mo_run_session *s, mo_status st) {
    s->st = st;
    snprintf(s->detail, sizeof s->detail, "%s", st == MO_ERR_OOM || st == MO_ERR_INVALID || st == MO_ERR_UNSUPPORTED ? mo_errmsg_plain() : mo_errmsg());
    return st;
}

// The run's batch (the same synthetic batch every step), given to the model or to every rank.
static mo_status set_synthetic_batch(mo_run_session *s) {
    if (s->be == MO_BACKEND_DRY) return MO_OK; // nothing is computed: no host batch (B x T tokens for gpt)
    return s->sp ? s->ops->split->set_synthetic_batch(s->sp, s->rc.seed) : s->ops->set_synthetic_batch(s->m, s->rc.seed);
}

// static_bytes (docs/DESIGN.md): params + grads + optimizer + master, as allocated.
static uint64_t static_of(const mo_alloc_stats *a) {
    return a->allocated_by_cat[MO_CAT_PARAM] + a->allocated_by_cat[MO_CAT_GRAD] + a->allocated_by_cat[MO_CAT_OPTIM] +
           a->allocated_by_cat[MO_CAT_MASTER];
}

// A split run: the ranks' threads, allocators, contexts and shards (the model's split table).
static mo_status session_build_split(mo_run_session *s) {
    mo_split_config sc = split_config_of(&s->rc, s->be, s->cap);
    mo_status cs = s->ops->split->create(&s->rc, &sc, &s->sp);
    // A create that ran out of memory gave every rank back: its statistics are gone, but an OOM happened.
    if (cs == MO_ERR_OOM) s->stats.num_ooms = s->oom_in_build = 1;
    MO_TRY(cs);
    return set_synthetic_batch(s);
}

static mo_status session_build_one(mo_run_session *s);

static mo_status session_build(mo_run_session *s) {
    s->dev_used_before = s->be == MO_BACKEND_CUDA ? used_device_bytes() : 0;
    if (is_split(&s->rc)) return session_build_split(s);
    mo_status st = session_build_one(s);
    // Everything built here (parameters, gradients, optimizer state, master copy, full-batch inputs,
    // the GEMM workspace) is independent of the micro-batch: an out-of-memory now cannot be cured by
    // a smaller one.
    if (st == MO_ERR_OOM) s->oom_in_build = 1;
    return st;
}

static mo_status session_build_one(mo_run_session *s) {
    MO_TRY(mo_allocator_create(&s->a, s->rc.alloc, s->be, s->cap, NULL));
    MO_TRY(mo_ctx_create_ws(&s->x, s->be, s->a, mo_model_workspace_bytes(s->ops)));
    if (s->rc.offload) { // --offload: the host allocator of the offloaded state (its peak is host_bytes)
        // activations come and go every step: a caching one keeps its pinned segments
        MO_TRY(mo_allocator_create_host_kind(&s->ha, s->rc.offload == MO_OFFLOAD_ACTIVATIONS ? MO_ALLOC_CACHING : MO_ALLOC_RAW,
                                             s->be));
        s->x->host_alloc = s->ha;
        s->x->offload_act = s->rc.offload == MO_OFFLOAD_ACTIVATIONS;
    }
    s->x->tf32 = s->rc.precision == MO_PREC_TF32;
    MO_TRY(s->ops->create(&s->rc, s->x, &s->m));
    MO_TRY(set_synthetic_batch(s));
    mo_alloc_stats s0;
    mo_allocator_stats(s->a, &s0);
    s->static_bytes = static_of(&s0);
    if (s->rc.profile) {
        MO_TRY(mo_prof_enable(s->x));
        if (!s->trace) s->trace = &s->own_trace; // predicted time per class beside the measured
    }
    if (s->trace) mo_cost_trace_attach(s->x, s->trace);
    MO_TRY(mo_timer_init(s->x, &s->t));
    s->timer_ok = 1;
    return MO_OK;
}

// --summary: the report of the allocator a, kept for the printed summary (which comes after release).
static void take_summary(mo_run_session *s, const mo_allocator *a) {
    if (!s->rc.summary || !a || s->summary) return;
    const size_t n = 8192;
    s->summary = malloc(n);
    if (s->summary) mo_memory_summary(a, s->summary, n);
}

// Gives back everything the run holds, keeping the allocator's final statistics.
static void session_release(mo_run_session *s) {
    if (s->sp) {
        const mo_model_split_ops *so = s->ops->split;
        // The run's peak is its largest rank's (docs/DESIGN.md); static bytes are that rank's at the end.
        int r = s->peak_rank = so->peak_rank(s->sp);
        mo_allocator_stats(so->allocator(s->sp, r), &s->stats);
        take_summary(s, so->allocator(s->sp, r));
        s->static_bytes = static_of(&s->stats);
        uint64_t ooms = 0, retries = 0, reserved = 0;
        for (int k = 0; k < so->world(s->sp); k++) {
            mo_alloc_stats a;
            mo_allocator_stats(so->allocator(s->sp, k), &a);
            ooms += a.num_ooms;
            retries += a.num_alloc_retries;
            if (a.peak_reserved_bytes > reserved) reserved = a.peak_reserved_bytes; // the cap counts reserved
            if (k < 64) s->rank_peak[k] = a.peak_allocated_bytes;
        }
        s->n_ranks = so->world(s->sp) < 64 ? so->world(s->sp) : 64;
        s->stats.peak_reserved_bytes = reserved;
        s->stats.num_ooms = ooms;
        s->stats.num_alloc_retries = retries;
        if (so->comm_stats(s->sp, &s->comm) != MO_OK) memset(&s->comm, 0, sizeof s->comm);
        so->destroy(s->sp);
        s->sp = NULL;
        return;
    }
    if (s->a) mo_allocator_stats(s->a, &s->stats);
    if (s->ha) {
        mo_alloc_stats h;
        mo_allocator_stats(s->ha, &h);
        s->host_bytes = h.peak_allocated_bytes;
    }
    take_summary(s, s->a);
    mo_trace_end(s->alloc_trace);
    s->alloc_trace = NULL;
    if (s->timer_ok) mo_timer_destroy(&s->t);
    s->timer_ok = 0;
    if (s->m) s->ops->destroy(s->m);
    mo_ctx_destroy(s->x);
    mo_allocator_destroy(s->a);
    mo_allocator_destroy(s->ha);
    s->m = NULL; s->x = NULL; s->a = NULL; s->ha = NULL;
}

static mo_status session_open(const mo_run_config *rc, const mo_run_env *env, mo_backend_kind be, FILE *out,
                              mo_cost_trace *trace, mo_run_session **res) {
    *res = NULL;
    mo_run_session *s = calloc(1, sizeof *s);
    if (!s) return MO_FAIL(MO_ERR_OOM, "host memory exhausted");
    s->trace = trace;
    if (trace) mo_cost_trace_reset(trace);
    s->rc = *rc;
    s->env = env;
    s->be = be;
    s->out = out;
    uint64_t total = env->have_device ? env->dev.total_mem_bytes : rc->device_mem_bytes;
    s->cap = mo_cap_resolve(&rc->cap, total);
    *res = s;
    mo_status st = mo_model_of(rc, &s->ops);
    if (st == MO_OK && s->ops->check) st = s->ops->check(rc);
    if (st == MO_OK && is_split(rc) && !s->ops->split)
        st = MO_FAIL(MO_ERR_INVALID, "--tp %d --pp %d --dp %d: model %s cannot be split over ranks yet", rc->tp, rc->pp,
                     rc->dp, s->ops->name);
    if (st == MO_OK && is_split(rc)) {
        mo_split_config sc = split_config_of(rc, be, s->cap);
        st = s->ops->split->validate(rc, &sc);
        if (st == MO_OK && rc->profile)
            st = MO_FAIL(MO_ERR_INVALID, "--profile: not available on split runs (--tp/--pp above 1); profile the unsplit model");
        if (st == MO_OK && rc->trace[0])
            st = MO_FAIL(MO_ERR_INVALID, "--trace: not available on split runs (--tp/--pp above 1); trace the unsplit model");
    }
    if (st != MO_OK) s->config_failed = 1;
    else st = session_build(s);
    if (st != MO_OK) {
        session_fail(s, st);
        session_release(s);
    }
    return MO_OK;
}

mo_status mo_run_begin(const mo_run_config *rc, const mo_run_env *env, FILE *out, mo_run_session **res) {
    return session_open(rc, env, rc->backend, out, NULL, res);
}

mo_status mo_run_status(const mo_run_session *s) { return s->st; }

void mo_run_mark_timed(mo_run_session *s) {
    if (s->a) mo_allocator_reset_peaks(s->a); // peaks over the timed steps
    if (s->trace) mo_cost_trace_reset(s->trace); // and the ops
    if (s->sp) {
        s->ops->split->reset_peaks(s->sp);
        s->ops->split->comm_reset(s->sp); // communication over the timed steps
    }
    s->timed = 1;
}

static mo_status write_trace(mo_run_session *s) {
    char name[256], title[512];
    mo_config_name(&s->rc, name, sizeof name);
    snprintf(title, sizeof title, "%s; %s; step %d", name, s->env->dev.name, s->steps_run + 1);
    mo_status st = mo_trace_write(s->alloc_trace, s->rc.trace, title);
    s->trace_events = mo_trace_events(s->alloc_trace);
    mo_trace_end(s->alloc_trace);
    s->alloc_trace = NULL;
    s->traced = st == MO_OK;
    return st;
}

mo_status mo_run_step(mo_run_session *s, double *ms_out) {
    if (s->st != MO_OK) return s->st;
    double ms = 0;
    mo_status st = MO_OK;
    if (s->sp) {
        // Each rank times itself on its own stream; the step takes as long as its slowest rank.
        st = s->ops->split->step(s->sp);
        ms = s->ops->split->step_ms(s->sp);
    } else {
        // --trace: the first timed step (the allocator in its steady state), or the first step
        // when there is no warm-up.
        const int trace_now = s->rc.trace[0] && !s->traced && (s->timed || s->rc.warmup == 0);
        if (trace_now) st = mo_trace_begin(s->a, &s->alloc_trace);
        if (st == MO_OK) st = mo_timer_start(s->x, &s->t);
        if (st == MO_OK) st = s->ops->step(s->m);
        if (st == MO_OK) st = mo_timer_stop(s->x, &s->t, &ms);
        if (trace_now && st == MO_OK) st = write_trace(s);
    }
    if (st != MO_OK) {
        session_fail(s, st);
        session_release(s); // an out-of-memory unwinds here: nothing stays allocated
        return st;
    }
    if (!s->sp && s->rc.offload) { // the copy stream's figures of this step (none: the optimizer's update in order)
        mo_copy_stats cs = {0};
        if ((st = mo_copy_collect(s->x, &cs)) != MO_OK) return session_fail(s, st);
        if (s->timed) s->copies.copy_ms += cs.copy_ms, s->copies.stall_ms += cs.stall_ms, s->copies.bytes += cs.bytes,
                      s->copies.copies += cs.copies;
    }
    if (s->rc.profile) {
        double ms_cat[MO_PROF_COUNT] = {0};
        if ((st = mo_prof_collect(s->x, ms_cat)) != MO_OK) return session_fail(s, st);
        if (s->timed)
            for (int k = 0; k < MO_PROF_COUNT; k++) s->prof_ms[k] += ms_cat[k];
    }
    if (s->sp) s->ops->split->info(s->sp, &s->info);
    else s->ops->info(s->m, &s->info);
    double loss = s->info.loss;
    if (s->steps_run == 0) s->loss_first = loss;
    s->loss_last = loss;
    s->skipped_steps = s->info.skipped_steps;
    s->loss_scale = s->info.loss_scale;
    s->steps_run++;
    if (s->timed) {
        if (s->n == s->cap_n) {
            int nc = s->cap_n ? 2 * s->cap_n : 64;
            double *t2 = realloc(s->times, (size_t)nc * sizeof(double));
            if (t2) s->times = t2;
            double *r2 = realloc(s->recompute, (size_t)nc * sizeof(double));
            if (r2) s->recompute = r2;
            if (!t2 || !r2) return session_fail(s, MO_FAIL(MO_ERR_OOM, "host memory exhausted"));
            s->cap_n = nc;
        }
        s->times[s->n] = ms;
        s->recompute[s->n] = s->info.recompute_ms;
        s->n++;
    }
    if (s->rc.monitor > 0 && s->steps_run % s->rc.monitor == 0 && s->out) {
        mo_alloc_stats a;
        // A split run shows its rank 0.
        mo_allocator_stats(s->sp ? s->ops->split->allocator(s->sp, 0) : s->a, &a);
        char b1[32], b2[32], b3[32];
        uint64_t used = s->be == MO_BACKEND_CUDA ? used_device_bytes() - s->dev_used_before : 0;
        fprintf(s->out, "  step %4d  loss %.4f  %.2f ms  allocated %s  reserved %s  device used (since start) %s\n",
                s->steps_run, loss, ms, mo_format_bytes(a.allocated_bytes, b1, 32),
                mo_format_bytes(a.reserved_bytes, b2, 32), s->be == MO_BACKEND_CUDA ? mo_format_bytes(used, b3, 32) : "n/a");
    }
    if (s->be == MO_BACKEND_CUDA) {
        uint64_t u = used_device_bytes();
        if (u > s->dev_used_peak_seen) s->dev_used_peak_seen = u;
    }
    if (ms_out) *ms_out = ms;
    return MO_OK;
}

// The dry backend's peak for the same configuration and the same number of steps.
static int64_t predicted_peak(const mo_run_session *s) {
    if (s->be == MO_BACKEND_DRY) return (int64_t)s->stats.peak_allocated_bytes;
    mo_run_session *d = NULL;
    int64_t r = -1;
    mo_run_config rc = s->rc;
    // nccl needs GPUs: the dry replay runs the same ranks over local (nccl's ordered sums take scratch
    // from the rank's allocator that local does not, so a nccl row's prediction may differ).
    rc.comm = MO_COMM_LOCAL;
    rc.trace[0] = '\0'; // the replay writes nothing and reports nothing
    rc.summary = 0;
    if (session_open(&rc, s->env, MO_BACKEND_DRY, NULL, NULL, &d) != MO_OK || !d) return -1;
    int warm = s->steps_run - s->n;
    for (int i = 0; i < s->steps_run && d->st == MO_OK; i++) {
        if (i == warm) mo_run_mark_timed(d);
        mo_run_step(d, NULL);
    }
    if (d->st == MO_OK) {
        session_release(d);
        r = (int64_t)d->stats.peak_allocated_bytes;
    }
    session_release(d);
    mo_cost_trace_free(&d->own_trace); // a --profile row's replay traced too
    free(d->summary); free(d->times); free(d->recompute); free(d);
    return r;
}

static void print_summary(const mo_run_session *s, const mo_csv_row *row, FILE *out);

mo_status mo_run_end(mo_run_session *s, mo_csv_row *row) {
    const mo_run_config *rc = &s->rc;
    const mo_run_env *env = s->env;
    session_release(s);
    mo_csv_row_init(row);
    mo_csv_row_from_config(row, rc, s->cap);
    utc_now(row->utc_time, sizeof row->utc_time);
    snprintf(row->git_rev, sizeof row->git_rev, "%s", env->git_rev);
    snprintf(row->device_name, sizeof row->device_name, "%s", env->dev.name);
    row->device_mem_bytes = (int64_t)(env->have_device ? env->dev.total_mem_bytes : rc->device_mem_bytes);
    snprintf(row->driver, sizeof row->driver, "%s", env->dev.driver);
    snprintf(row->cuda_runtime, sizeof row->cuda_runtime, "%s", env->dev.runtime);
    row->steps = s->n;
    if (s->config_failed) {
        snprintf(row->status, sizeof row->status, "%s", s->st == MO_ERR_INVALID ? "invalid" : "error");
        snprintf(row->detail, sizeof row->detail, "%s", s->detail);
        goto finish;
    }
    const mo_model_ops *ops = s->ops;
    row->params = (int64_t)ops->num_params(rc);
    const mo_alloc_stats *a = &s->stats;
    row->num_ooms = (int64_t)a->num_ooms;
    row->num_alloc_retries = (int64_t)a->num_alloc_retries;
    row->peak_allocated_bytes = (int64_t)a->peak_allocated_bytes;
    row->peak_reserved_bytes = (int64_t)a->peak_reserved_bytes;
    row->param_bytes = (int64_t)a->peak_by_cat[MO_CAT_PARAM];
    row->grad_bytes = (int64_t)a->peak_by_cat[MO_CAT_GRAD];
    row->optim_bytes = (int64_t)a->peak_by_cat[MO_CAT_OPTIM];
    row->master_bytes = (int64_t)a->peak_by_cat[MO_CAT_MASTER];
    row->activation_bytes = (int64_t)a->peak_by_cat[MO_CAT_ACTIVATION];
    row->workspace_bytes = (int64_t)a->peak_by_cat[MO_CAT_WORKSPACE];
    row->host_bytes = (int64_t)s->host_bytes;
    // activations, or the optimizer's update chunked on the copy stream (MEMOPT_OFFLOAD_CHUNK): the stall is
    // then the host's waits for chunks down and the compute stream's for the last one back
    if (rc->offload && s->n > 0 && s->be != MO_BACKEND_DRY && s->copies.copies > 0) {
        row->offload_copy_ms = s->copies.copy_ms / s->n; // means over the timed steps
        row->offload_stall_ms = s->copies.stall_ms / s->n;
    }
    row->inactive_split_bytes = (int64_t)a->inactive_split_bytes;
    row->largest_free_block_bytes = (int64_t)a->largest_free_block;
    row->segments = (int64_t)a->num_segments;
    row->oom_before_step = s->oom_in_build;
    // A run that failed has no peak to predict (the dry replay under the same cap fails the same way).
    if (s->st == MO_OK) row->predicted_peak_bytes = predicted_peak(s);
    if (s->st != MO_OK) {
        // A shape refused mid-build (its byte counts overflow: MO_ERR_INVALID) is invalid input.
        snprintf(row->status, sizeof row->status, "%s", s->st == MO_ERR_OOM ? "oom" : s->st == MO_ERR_INVALID ? "invalid" : "error");
        snprintf(row->detail, sizeof row->detail, "%s", s->detail);
        goto finish;
    }
    snprintf(row->status, sizeof row->status, "ok");
    row->static_bytes = (int64_t)s->static_bytes;
    // The activations at the overall peak: the library workspace (cuBLASLt's, op scratch) is its own
    // figure, workspace_bytes.
    row->activation_peak_bytes = (int64_t)a->at_peak_by_cat[MO_CAT_ACTIVATION];
    row->loss_first = s->loss_first;
    row->loss_last = s->loss_last;
    row->skipped_steps = s->skipped_steps;
    row->loss_scale = s->loss_scale;
    if (is_split(rc) && s->n > 0) row->comm_bytes_rank = (int64_t)(s->comm.bytes_max_rank / (uint64_t)s->n);
    if (s->n > 0 && s->be != MO_BACKEND_DRY) {
        qsort(s->recompute, (size_t)s->n, sizeof(double), cmp_double);
        double rec_med = median(s->recompute, s->n);
        qsort(s->times, (size_t)s->n, sizeof(double), cmp_double);
        double med = median(s->times, s->n);
        row->step_ms = med;
        row->step_ms_p10 = percentile(s->times, s->n, 0.10);
        row->step_ms_p90 = percentile(s->times, s->n, 0.90);
        row->recompute_ms = rc->ckpt.kind != MO_CKPT_NONE ? rec_med : 0.0;
        double items = (double)rc->batch * ops->items_per_sample(rc);
        row->items_per_s = items / (med * 1e-3);
        if (!strcmp(ops->item, "tokens")) row->tokens_per_s = row->items_per_s;
        double flops = ops->step_flops(rc);
        row->model_tflops = flops / (med * 1e-3) / 1e12;
        double rflops = is_split(rc) ? ops->split->recompute_flops(rc) : ops->recompute_flops(rc);
        row->hw_tflops = (flops + rflops) / (med * 1e-3) / 1e12;
        double peak = s->be == MO_BACKEND_CUDA ? mo_device_peak_tflops(env->dev.name, rc->precision) : 0;
        // local ranks share the one GPU; nccl ranks each have one
        if (is_split(rc) && rc->comm == MO_COMM_NCCL) peak *= ranks_of(rc);
        row->mfu = peak > 0 ? row->model_tflops / peak : NAN;
        if (is_split(rc)) {
            row->comm_ms = s->n > 0 ? s->comm.ms_max_rank / s->n : NAN; // the busiest rank's, per step
            row->comm_modelled = rc->comm == MO_COMM_NCCL ? 0 : 1; // nccl: CUDA events; local: the model
        }
    }
finish:
    if (s->out) print_summary(s, row, s->out);
    mo_cost_trace_free(&s->own_trace);
    if (s->out && s->summary) fprintf(s->out, "%s", s->summary);
    free(s->summary);
    free(s->times);
    free(s->recompute);
    free(s);
    return MO_OK;
}

mo_status mo_run_execute(const mo_run_config *rc, const mo_run_env *env, mo_csv_row *row, FILE *out) {
    return mo_run_execute_traced(rc, env, row, out, NULL);
}

mo_status mo_run_execute_traced(const mo_run_config *rc, const mo_run_env *env, mo_csv_row *row, FILE *out,
                                mo_cost_trace *trace) {
    mo_run_session *s = NULL;
    MO_TRY(session_open(rc, env, rc->backend, out, trace, &s));
    for (int i = 0; i < rc->warmup + rc->steps && mo_run_status(s) == MO_OK; i++) {
        if (i == rc->warmup) mo_run_mark_timed(s);
        mo_run_step(s, NULL);
    }
    return mo_run_end(s, row);
}

static void print_summary(const mo_run_session *s, const mo_csv_row *row, FILE *out) {
    const mo_run_config *rc = &s->rc;
    const mo_alloc_stats *a = &s->stats;
    // A failed row's reason is printed by the caller (main prints the command's status).
    if (strcmp(row->status, "ok") && strcmp(row->status, "oom")) return;
    char b1[32], b2[32], b3[32];
    fprintf(out, "memopt run: %s, %s backend, %s, %s B%d (micro %d), %.1fM params\n", s->ops->name,
            mo_backend_name(rc->backend), s->env->dev.name, row->dims, rc->batch, rc->batch / rc->accum,
            (double)s->ops->num_params(rc) / 1e6);
    char at[32] = "";
    if (s->ops->dims & MO_OPT_ATTN) snprintf(at, sizeof at, ", attn %s", mo_attn_name(rc->attn)); // only a model with attention has a form
    fprintf(out, "  strategy: precision %s%s, ckpt %s, accum %d, alloc %s, cap %s\n", mo_precision_name(rc->precision),
            at, row->ckpt, rc->accum, mo_alloc_kind_name(rc->alloc),
            s->cap ? mo_format_bytes(s->cap, b1, 32) : "none");
    if (is_split(rc) && !s->config_failed && rc->dp > 1)
        fprintf(out, "  data parallel: dp %d (batch %d per rank), ZeRO %d (comm %s), each rank with its own allocator%s; peaks below are rank %d's (the largest; reserved: the largest of any rank)\n",
                rc->dp, rc->batch / rc->dp, rc->zero, mo_comm_kind_name(rc->comm), s->cap ? " and cap" : "", s->peak_rank);
    else if (is_split(rc) && !s->config_failed)
        fprintf(out, "  split: tp %d x pp %d = %d ranks%s (comm %s), each with its own allocator%s; peaks below are rank %d's (the largest; reserved: the largest of any rank)\n",
                rc->tp, rc->pp, rc->tp * rc->pp, rc->sp ? ", sequence parallel" : "", mo_comm_kind_name(rc->comm),
                s->cap ? " and cap" : "", s->peak_rank);
    if (is_split(rc) && !strcmp(row->status, "ok") && s->n_ranks > 0) {
        // Every rank's own peak, in bytes (exact: dry equals cpu and cuda rank by rank).
        fprintf(out, "  rank peaks (allocated bytes, rank 0 first):");
        for (int k = 0; k < s->n_ranks; k++) fprintf(out, " %llu", (unsigned long long)s->rank_peak[k]);
        fprintf(out, "\n");
    }
    if (is_split(rc) && !strcmp(row->status, "ok") && rc->backend != MO_BACKEND_DRY && s->n > 0)
        fprintf(out, "  communication: %.3f ms per step on the busiest rank (%s), %llu bytes per step over all ranks\n",
                row->comm_ms, row->comm_modelled ? "modelled: bytes / link bandwidth + latency" : "measured",
                (unsigned long long)(s->comm.bytes / (uint64_t)s->n));
    if (!strcmp(row->status, "ok")) {
        if (rc->backend != MO_BACKEND_DRY && s->n > 0) {
            fprintf(out, "  step: median %.2f ms (p10 %.2f, p90 %.2f) over %d steps after %d warm-up\n", row->step_ms,
                    row->step_ms_p10, row->step_ms_p90, s->n, s->steps_run - s->n);
            fprintf(out, "  %.0f %s/s, %.1f model TFLOP/s, %.1f hardware TFLOP/s", row->items_per_s, s->ops->item,
                    row->model_tflops, row->hw_tflops);
            if (!isnan(row->mfu)) fprintf(out, ", MFU %.1f%%", 100 * row->mfu);
            fprintf(out, "\n");
            if (rc->ckpt.kind != MO_CKPT_NONE) fprintf(out, "  recompute: %.2f ms per step (median)\n", row->recompute_ms);
            if (rc->profile) {
                double sum = 0;
                for (int k = 0; k < MO_PROF_COUNT; k++) sum += s->prof_ms[k];
                fprintf(out, "  profile (device time per step, mean over %d timed steps; %.2f ms in ops):", s->n, sum / s->n);
                for (int k = 0; k < MO_PROF_COUNT; k++)
                    fprintf(out, " %s %.2f%s", mo_prof_name((mo_prof_cat)k), s->prof_ms[k] / s->n, k + 1 < MO_PROF_COUNT ? "," : "\n");
                // The same categories from the cost trace of the timed steps, at the planner's calibrated rates.
                double pred[MO_PROF_COUNT + 1];
                char how[160];
                if (s->trace && mo_plan_profile_predict(s->trace, s->n, s->env->dev.name, rc->precision, pred, how, sizeof how)) {
                    double psum = 0;
                    for (int k = 0; k <= MO_PROF_COUNT; k++) psum += pred[k];
                    fprintf(out, "  predicted (the planner's roofline of the traced ops, %s; %.2f ms):", how, psum);
                    for (int k = 0; k < MO_PROF_COUNT; k++)
                        fprintf(out, " %s %.2f%s", mo_prof_name((mo_prof_cat)k), pred[k], k + 1 < MO_PROF_COUNT ? "," : "");
                    fprintf(out, "; outside the profiled ops %.2f\n", pred[MO_PROF_COUNT]);
                } else {
                    fprintf(out, "  predicted: %s\n", how);
                }
            }
            fprintf(out, "  loss: %.4f (first step) -> %.4f (last)\n", row->loss_first, row->loss_last);
            if (s->info.loss_scaling)
                fprintf(out, "  loss scaler: final scale %g, %lld steps skipped (inf/nan gradients)\n", row->loss_scale,
                        (long long)row->skipped_steps);
        } else {
            fprintf(out, "  (dry backend: no compute, no times; memory is exact)\n");
        }
    }
    fprintf(out, "  peak allocated %s, peak reserved %s\n", mo_format_bytes(a->peak_allocated_bytes, b1, 32),
            mo_format_bytes(a->peak_reserved_bytes, b2, 32));
    if (!strcmp(row->status, "ok"))
        fprintf(out, "  at the peak: static (params+grads+optimizer+master) %s, activations %s, workspace %s\n",
                mo_format_bytes(s->static_bytes, b1, 32), mo_format_bytes((uint64_t)row->activation_peak_bytes, b2, 32),
                mo_format_bytes(a->at_peak_by_cat[MO_CAT_WORKSPACE], b3, 32));
    fprintf(out, "  each category's own peak:");
    for (int c = 0; c < MO_CAT_COUNT; c++)
        fprintf(out, " %s %s%s", mo_category_name((mo_category)c), mo_format_bytes(a->peak_by_cat[c], b1, 32),
                c + 1 < MO_CAT_COUNT ? "," : "\n");
    if (rc->offload == MO_OFFLOAD_ACTIVATIONS) {
        fprintf(out, "  offload activations: host_bytes %llu (%s: the checkpointed segments' inputs, %s), not in the device "
                     "figures above\n", (unsigned long long)s->host_bytes, mo_format_bytes(s->host_bytes, b1, 32),
                rc->backend == MO_BACKEND_CUDA ? "pinned" : rc->backend == MO_BACKEND_DRY ? "modelled" : "malloc");
        if (s->n > 0 && s->copies.copies == 0)
            fprintf(out, "  copy stream: nothing to offload (the checkpoint layout has no segment input but the ones "
                         "kept on the device)\n");
    } else if (rc->offload)
        fprintf(out, "  offload %s: host_bytes %llu (%s: AdamW m, v%s and the update's staging, %s), not in the device figures above\n",
                mo_offload_name(rc->offload), (unsigned long long)s->host_bytes, mo_format_bytes(s->host_bytes, b1, 32),
                rc->precision == MO_PREC_FP16 || rc->precision == MO_PREC_BF16 ? ", the fp32 master" : "",
                rc->backend == MO_BACKEND_CUDA ? "pinned" : rc->backend == MO_BACKEND_DRY ? "modelled" : "malloc");
    // The copy stream: the activations' copies, or the optimizer's update chunked on it (MEMOPT_OFFLOAD_CHUNK),
    // where the host waits for its chunks as well as the compute stream for the last one back.
    if (rc->offload && s->n > 0 && s->copies.copies > 0) {
        char how[64] = "overlap n/a";
        if (rc->backend == MO_BACKEND_DRY) snprintf(how, sizeof how, "dry: nothing copied");
        else if (rc->backend == MO_BACKEND_CPU) snprintf(how, sizeof how, "cpu: synchronous memcpy, no overlap");
        else if (s->copies.copy_ms > 0)
            snprintf(how, sizeof how, "overlap %.0f%%", 100.0 * (1.0 - s->copies.stall_ms / s->copies.copy_ms));
        const int update = rc->offload == MO_OFFLOAD_OPTIMIZER;
        fprintf(out, "  copy stream: %d copies, %s a step%s; copies %.3f ms, %s stalled %.3f ms a step (%s)\n",
                s->copies.copies / s->n, mo_format_bytes(s->copies.bytes / (uint64_t)s->n, b1, 32),
                update ? " (the update, MEMOPT_OFFLOAD_CHUNK)" : "", s->copies.copy_ms / s->n,
                update ? "the host and compute" : "compute", s->copies.stall_ms / s->n, how);
    }
    if (rc->backend == MO_BACKEND_CUDA)
        fprintf(out, "  cross-check: device memory in use rose by %s at most between steps (allocator reserved peak %s;"
                     " the rest is the cuBLAS handles and the CUDA context)\n",
                mo_format_bytes(s->dev_used_peak_seen > s->dev_used_before ? s->dev_used_peak_seen - s->dev_used_before : 0, b1, 32),
                mo_format_bytes(a->peak_reserved_bytes, b2, 32));
    if (row->segments >= 0 && !strcmp(row->status, "ok"))
        fprintf(out, "  fragmentation after the last step: %lld segments, inactive split %s, largest free block %s\n",
                (long long)row->segments, mo_format_bytes((uint64_t)row->inactive_split_bytes, b1, 32),
                mo_format_bytes((uint64_t)row->largest_free_block_bytes, b2, 32));
    if (s->traced)
        fprintf(out, "  trace: %s (%zu allocations and frees of step %d)\n", rc->trace, s->trace_events, rc->warmup + 1 > 1 ? rc->warmup + 1 : 1);
    if (row->predicted_peak_bytes >= 0 && rc->backend != MO_BACKEND_DRY)
        fprintf(out, "  dry-backend prediction of the peak: %s (%s)\n", mo_format_bytes((uint64_t)row->predicted_peak_bytes, b1, 32),
                (uint64_t)row->predicted_peak_bytes == a->peak_allocated_bytes ? "exact" : "differs");
}
