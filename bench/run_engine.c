#include "bench/run_engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "models/gpt.h"

#ifdef MEMOPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

double mo_device_peak_tflops(const char *name, mo_precision p) {
    // Dense (no sparsity) datasheet figures of the SXM parts; sources in docs/gpus.md.
    static const struct { const char *match; double fp32, tf32, half; } t[] = {
        {"H200", 67.0, 494.7, 989.4},
        {"H100", 67.0, 494.7, 989.4},
        {"A100", 19.5, 156.0, 312.0},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (!strstr(name, t[i].match)) continue;
        switch (p) {
        case MO_PREC_FP32: return t[i].fp32;
        case MO_PREC_TF32: return t[i].tf32;
        default: return t[i].half;
        }
    }
    return 0;
}

static void git_rev(char *buf, size_t n) {
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
        mo_library_versions(&env->dev);
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

static mo_status gpt_config_of(const mo_run_config *rc, mo_gpt_config *g) {
    memset(g, 0, sizeof *g);
    g->layers = rc->layers; g->hidden = rc->hidden; g->heads = rc->heads; g->seq = rc->seq;
    g->batch = rc->batch; g->vocab = rc->vocab;
    g->attn_fused = rc->attn == MO_ATTN_FUSED;
    g->ckpt = rc->ckpt.kind; g->ckpt_every = rc->ckpt.every;
    g->accum = rc->accum;
    g->tf32 = rc->precision == MO_PREC_TF32;
    g->lr = (float)rc->lr; g->beta1 = 0.9f; g->beta2 = 0.95f; g->eps = 1e-8f; g->weight_decay = 0.0f; g->grad_clip = 1.0f;
    g->seed = rc->seed;
    if (rc->precision == MO_PREC_FP16 || rc->precision == MO_PREC_BF16)
        return MO_FAIL(MO_ERR_UNSUPPORTED, "--precision %s: mixed precision is not built yet (fp32 and tf32 are)", mo_precision_name(rc->precision));
    if (rc->tp != 1 || rc->pp != 1)
        return MO_FAIL(MO_ERR_UNSUPPORTED, "--tp %d --pp %d: model splitting is not built yet (tp 1, pp 1 are)", rc->tp, rc->pp);
    return mo_gpt_validate(g);
}

static uint64_t used_device_bytes(void) {
#ifdef MEMOPT_HAVE_CUDA
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) == cudaSuccess) return (uint64_t)(t - f);
#endif
    return 0;
}

typedef struct run_out {
    double *times, *recompute;
    int n;
    double loss_first, loss_last;
    mo_alloc_stats st;
    uint64_t static_bytes;
    uint64_t dev_used_before, dev_used_peak_seen;
} run_out;

// Builds and trains; everything is given back before it returns.
static mo_status train(const mo_run_config *rc, const mo_gpt_config *g, mo_backend_kind be, uint64_t cap, run_out *o,
                       FILE *out) {
    mo_allocator *a = NULL;
    mo_ctx *x = NULL;
    mo_gpt *m = NULL;
    int *tok = NULL, *tgt = NULL;
    mo_status st;
    o->dev_used_before = be == MO_BACKEND_CUDA ? used_device_bytes() : 0;
    MO_TRY_GOTO(st, mo_allocator_create(&a, rc->alloc, be, cap, NULL), done);
    MO_TRY_GOTO(st, mo_ctx_create(&x, be, a), done);
    x->tf32 = g->tf32;
    MO_TRY_GOTO(st, mo_gpt_create(&m, g, x), done);
    size_t BT = (size_t)g->batch * g->seq;
    tok = malloc(BT * sizeof(int));
    tgt = malloc(BT * sizeof(int));
    if (!tok || !tgt) { st = MO_FAIL(MO_ERR_OOM, "host memory exhausted for the batch"); goto done; }
    mo_gpt_synthetic_batch(g, rc->seed, tok, tgt);
    MO_TRY_GOTO(st, mo_gpt_set_batch(m, tok, tgt), done);
    mo_alloc_stats s0;
    mo_allocator_stats(a, &s0);
    o->static_bytes = s0.allocated_by_cat[MO_CAT_PARAM] + s0.allocated_by_cat[MO_CAT_GRAD] +
                      s0.allocated_by_cat[MO_CAT_OPTIM] + s0.allocated_by_cat[MO_CAT_MASTER];
    mo_timer t;
    MO_TRY_GOTO(st, mo_timer_init(x, &t), done);
    int total = rc->warmup + rc->steps;
    for (int i = 0; i < total && st == MO_OK; i++) {
        if (i == rc->warmup) mo_allocator_reset_peaks(a); // peaks over the timed steps
        double ms = 0;
        st = mo_timer_start(x, &t);
        if (st == MO_OK) st = mo_gpt_step(m);
        if (st == MO_OK) st = mo_timer_stop(x, &t, &ms);
        if (st != MO_OK) break;
        if (i == 0) o->loss_first = m->last_loss;
        o->loss_last = m->last_loss;
        if (i >= rc->warmup) {
            o->times[o->n] = ms;
            o->recompute[o->n] = m->recompute_ms;
            o->n++;
        }
        if (rc->monitor > 0 && (i + 1) % rc->monitor == 0 && out) {
            mo_alloc_stats s;
            mo_allocator_stats(a, &s);
            char b1[32], b2[32], b3[32];
            uint64_t used = be == MO_BACKEND_CUDA ? used_device_bytes() - o->dev_used_before : 0;
            fprintf(out, "  step %4d  loss %.4f  %.2f ms  allocated %s  reserved %s  device used (since start) %s\n", i + 1,
                    m->last_loss, ms, mo_format_bytes(s.allocated_bytes, b1, 32), mo_format_bytes(s.reserved_bytes, b2, 32),
                    be == MO_BACKEND_CUDA ? mo_format_bytes(used, b3, 32) : "n/a");
        }
        if (be == MO_BACKEND_CUDA) {
            uint64_t u = used_device_bytes();
            if (u > o->dev_used_peak_seen) o->dev_used_peak_seen = u;
        }
    }
    mo_timer_destroy(&t);
    mo_allocator_stats(a, &o->st);
done:
    free(tok);
    free(tgt);
    if (st != MO_OK && a) mo_allocator_stats(a, &o->st);
    mo_gpt_destroy(m);
    mo_ctx_destroy(x);
    mo_allocator_destroy(a);
    return st;
}

static void utc_now(char *buf, size_t n) {
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

mo_status mo_run_execute(const mo_run_config *rc, const mo_run_env *env, mo_csv_row *row, FILE *out) {
    uint64_t total = env->have_device ? env->dev.total_mem_bytes : rc->device_mem_bytes;
    uint64_t cap = mo_cap_resolve(&rc->cap, total);
    mo_csv_row_init(row);
    mo_csv_row_from_config(row, rc, cap);
    utc_now(row->utc_time, sizeof row->utc_time);
    snprintf(row->git_rev, sizeof row->git_rev, "%s", env->git_rev);
    snprintf(row->device_name, sizeof row->device_name, "%s", env->dev.name);
    row->device_mem_bytes = (int64_t)total;
    snprintf(row->driver, sizeof row->driver, "%s", env->dev.driver);
    snprintf(row->cuda_runtime, sizeof row->cuda_runtime, "%s", env->dev.runtime);
    row->steps = rc->steps;

    mo_gpt_config g;
    mo_status st = gpt_config_of(rc, &g);
    if (st != MO_OK) {
        snprintf(row->status, sizeof row->status, "%s", st == MO_ERR_INVALID ? "invalid" : "error");
        snprintf(row->detail, sizeof row->detail, "%s", mo_errmsg_plain());
        if (out) fprintf(out, "memopt run: %s: %s\n", row->status, row->detail);
        return MO_OK;
    }
    row->params = (int64_t)mo_gpt_num_params(&g);

    run_out o;
    memset(&o, 0, sizeof o);
    o.times = calloc((size_t)rc->steps + 1, sizeof(double));
    o.recompute = calloc((size_t)rc->steps + 1, sizeof(double));
    if (!o.times || !o.recompute) { free(o.times); free(o.recompute); return MO_FAIL(MO_ERR_OOM, "host memory exhausted"); }
    st = train(rc, &g, rc->backend, cap, &o, out);

    // The planner's figure: the same configuration on the dry backend (no compute, same allocations).
    if (rc->backend != MO_BACKEND_DRY) {
        run_out d;
        memset(&d, 0, sizeof d);
        d.times = calloc((size_t)rc->steps + 1, sizeof(double));
        d.recompute = calloc((size_t)rc->steps + 1, sizeof(double));
        if (d.times && d.recompute && train(rc, &g, MO_BACKEND_DRY, cap, &d, NULL) == MO_OK)
            row->predicted_peak_bytes = (int64_t)d.st.peak_allocated_bytes;
        free(d.times);
        free(d.recompute);
    }

    const mo_alloc_stats *s = &o.st;
    row->num_ooms = (int64_t)s->num_ooms;
    row->num_alloc_retries = (int64_t)s->num_alloc_retries;
    row->peak_allocated_bytes = (int64_t)s->peak_allocated_bytes;
    row->peak_reserved_bytes = (int64_t)s->peak_reserved_bytes;
    row->param_bytes = (int64_t)s->peak_by_cat[MO_CAT_PARAM];
    row->grad_bytes = (int64_t)s->peak_by_cat[MO_CAT_GRAD];
    row->optim_bytes = (int64_t)s->peak_by_cat[MO_CAT_OPTIM];
    row->master_bytes = (int64_t)s->peak_by_cat[MO_CAT_MASTER];
    row->activation_bytes = (int64_t)s->peak_by_cat[MO_CAT_ACTIVATION];
    row->workspace_bytes = (int64_t)s->peak_by_cat[MO_CAT_WORKSPACE];
    if (rc->backend == MO_BACKEND_DRY) row->predicted_peak_bytes = row->peak_allocated_bytes;
    if (st == MO_ERR_OOM) {
        snprintf(row->status, sizeof row->status, "oom");
        snprintf(row->detail, sizeof row->detail, "%s", mo_errmsg_plain());
        if (out) fprintf(out, "memopt run: out of memory: %s\n", row->detail);
        free(o.times); free(o.recompute);
        return MO_OK;
    }
    if (st != MO_OK) {
        snprintf(row->status, sizeof row->status, "error");
        snprintf(row->detail, sizeof row->detail, "%s", mo_errmsg());
        if (out) fprintf(out, "memopt run: error: %s\n", row->detail);
        free(o.times); free(o.recompute);
        return MO_OK;
    }
    snprintf(row->status, sizeof row->status, "ok");
    row->static_bytes = (int64_t)o.static_bytes;
    row->activation_peak_bytes = (int64_t)(s->peak_allocated_bytes - o.static_bytes);
    row->loss_first = o.loss_first;
    row->loss_last = o.loss_last;
    if (o.n > 0 && rc->backend != MO_BACKEND_DRY) {
        double rec_med = 0;
        qsort(o.recompute, (size_t)o.n, sizeof(double), cmp_double);
        rec_med = median(o.recompute, o.n);
        qsort(o.times, (size_t)o.n, sizeof(double), cmp_double);
        double med = median(o.times, o.n);
        row->step_ms = med;
        row->step_ms_p10 = percentile(o.times, o.n, 0.10);
        row->step_ms_p90 = percentile(o.times, o.n, 0.90);
        row->recompute_ms = g.ckpt != MO_CKPT_NONE ? rec_med : 0.0;
        double tokens = (double)g.batch * g.seq;
        row->tokens_per_s = tokens / (med * 1e-3);
        row->model_tflops = mo_gpt_step_flops(&g) / (med * 1e-3) / 1e12;
        row->hw_tflops = (mo_gpt_step_flops(&g) + mo_gpt_recompute_flops(&g)) / (med * 1e-3) / 1e12;
        double peak = rc->backend == MO_BACKEND_CUDA ? mo_device_peak_tflops(env->dev.name, rc->precision) : 0;
        row->mfu = peak > 0 ? row->model_tflops / peak : NAN;
    }
    if (out) {
        char b1[32], b2[32];
        fprintf(out, "memopt run: %s, %s backend, %s, L%d C%d H%d T%d B%d (micro %d) V%d, %.1fM params\n", "gpt",
                mo_backend_name(rc->backend), env->dev.name, g.layers, g.hidden, g.heads, g.seq, g.batch, g.batch / g.accum,
                g.vocab, row->params / 1e6);
        fprintf(out, "  strategy: precision %s, attn %s, ckpt %s, accum %d, alloc %s, cap %s\n", mo_precision_name(rc->precision),
                mo_attn_name(rc->attn), row->ckpt, g.accum, mo_alloc_kind_name(rc->alloc),
                cap ? mo_format_bytes(cap, b1, 32) : "none");
        if (rc->backend != MO_BACKEND_DRY && o.n > 0) {
            fprintf(out, "  step: median %.2f ms (p10 %.2f, p90 %.2f) over %d steps after %d warm-up\n", row->step_ms,
                    row->step_ms_p10, row->step_ms_p90, o.n, rc->warmup);
            fprintf(out, "  %.0f tokens/s, %.1f model TFLOP/s, %.1f hardware TFLOP/s", row->tokens_per_s, row->model_tflops,
                    row->hw_tflops);
            if (!isnan(row->mfu)) fprintf(out, ", MFU %.1f%%", 100 * row->mfu);
            fprintf(out, "\n");
            if (g.ckpt != MO_CKPT_NONE) fprintf(out, "  recompute: %.2f ms per step (median)\n", row->recompute_ms);
            fprintf(out, "  loss: %.4f (first step) -> %.4f (last)\n", row->loss_first, row->loss_last);
        } else {
            fprintf(out, "  (dry backend: no compute, no times; memory is exact)\n");
        }
        fprintf(out, "  peak allocated %s, peak reserved %s\n", mo_format_bytes(s->peak_allocated_bytes, b1, 32),
                mo_format_bytes(s->peak_reserved_bytes, b2, 32));
        fprintf(out, "  static (params+grads+optimizer) %s, activation peak %s\n", mo_format_bytes(o.static_bytes, b1, 32),
                mo_format_bytes(s->peak_allocated_bytes - o.static_bytes, b2, 32));
        fprintf(out, "  peak by category:");
        for (int c = 0; c < MO_CAT_COUNT; c++)
            fprintf(out, " %s %s%s", mo_category_name((mo_category)c), mo_format_bytes(s->peak_by_cat[c], b1, 32),
                    c + 1 < MO_CAT_COUNT ? "," : "\n");
        if (rc->backend == MO_BACKEND_CUDA)
            fprintf(out, "  cross-check: device memory in use rose by at most %s during the run (allocator reserved peak %s;"
                         " the rest is cuBLAS/cuDNN handles and the CUDA context)\n",
                    mo_format_bytes(o.dev_used_peak_seen > o.dev_used_before ? o.dev_used_peak_seen - o.dev_used_before : 0, b1, 32),
                    mo_format_bytes(s->peak_reserved_bytes, b2, 32));
        if (row->predicted_peak_bytes >= 0 && rc->backend != MO_BACKEND_DRY)
            fprintf(out, "  dry-backend prediction of the peak: %s (%s)\n",
                    mo_format_bytes((uint64_t)row->predicted_peak_bytes, b1, 32),
                    (uint64_t)row->predicted_peak_bytes == s->peak_allocated_bytes ? "exact" : "differs");
    }
    free(o.times);
    free(o.recompute);
    return MO_OK;
}
