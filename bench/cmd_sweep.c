// memopt sweep: every combination of the list-valued axes (or --grid FILE), one row each, in one
// process. Each configuration builds its own allocator, context and model (the engine does), so
// every configuration starts from an empty allocator, also after an out-of-memory.
//
// Timing goes through Google Benchmark when it is built in: one benchmark per configuration,
// named by its configuration, whose body runs the engine's session (warm-up, then one timed step
// per benchmark iteration, manual time). Its iteration count is fixed to --steps, so one body
// call is one repetition of warm-up + --steps timed steps, exactly what memopt run measures; the
// CSV row is written by the first repetition, and later repetitions (--benchmark_repetitions)
// only feed Google Benchmark's own report and aggregates (console, --benchmark_out JSON). With
// --benchmark_min_time, Google Benchmark picks the iteration count itself, calling the body
// several times as it searches: the row then comes from the first call that timed at least
// --steps steps, or else from the last call made for that configuration.
#include "bench/sweep.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "bench/cli.h"
#include "bench/derive.h"
#include "bench/fallback.h"
#include "models/model.h"
#ifdef MEMOPT_HAVE_GBENCH
#include "bench/gbench_shim.h"
#endif

#define KEY_MAX 1024
// Google Benchmark (1.7) registers every benchmark up front and its run is quadratic in their
// number (no-op benchmarks: 4k take 1.3 s, 16k 35 s, 100k would take most of an hour before the
// first row). Past this many configurations in one process the sweep times with its plain loop,
// the same measurement, and refuses --benchmark_* flags (a shard brings the count under it).
#define MO_GBENCH_MAX_CONFIGS 4096

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t device_total(const mo_run_env *env, const mo_run_config *rc) {
    return env->have_device ? env->dev.total_mem_bytes : rc->device_mem_bytes;
}

// The key a combination's row will have: the row's configuration columns, as the engine fills them.
static void combination_key(const mo_run_config *rc, const mo_run_env *env, char *key) {
    mo_csv_row r;
    mo_csv_row_init(&r);
    mo_csv_row_from_config(&r, rc, mo_cap_resolve(&rc->cap, device_total(env, rc)));
    mo_csv_config_key(&r, key, KEY_MAX);
}

// ---------------------------------------------------------------- plan: shard, then resume

typedef struct key_set {
    char (*keys)[KEY_MAX];
    size_t n;
} key_set;

static int cmp_key(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

// The keys of the rows already in path: each row's own, and for a row that shrank its
// micro-batch (--on-oom shrink) also the key of the configuration that was asked for.
static mo_status done_keys(const char *path, key_set *ks) {
    ks->keys = NULL;
    ks->n = 0;
    if (access(path, F_OK) != 0) return MO_OK; // a first run: nothing done yet
    mo_csv_row *rows = NULL;
    size_t n = 0;
    mo_status st = mo_csv_read(path, &rows, &n);
    if (st != MO_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", mo_errmsg_plain());
        return MO_FAIL(MO_ERR_INVALID, "--resume: cannot read the rows of --csv %s: %s", path, why);
    }
    ks->keys = malloc((2 * n + 1) * sizeof *ks->keys);
    if (!ks->keys) {
        free(rows);
        return MO_FAIL(MO_ERR_INTERNAL, "host out of memory for %zu resume keys", n);
    }
    for (size_t i = 0; i < n; i++) {
        mo_csv_config_key(&rows[i], ks->keys[ks->n++], KEY_MAX);
        int asked = 0;
        mo_fallback_requested_accum(&rows[i], &asked);
        if (asked > 0 && asked != rows[i].accum) {
            mo_csv_row r = rows[i];
            r.accum = asked;
            r.micro_batch = r.batch / asked;
            mo_csv_config_key(&r, ks->keys[ks->n++], KEY_MAX);
        }
    }
    free(rows);
    qsort(ks->keys, ks->n, KEY_MAX, cmp_key);
    return MO_OK;
}

mo_status mo_sweep_select(const mo_config *cfg, const mo_run_env *env, mo_sweep_plan *plan) {
    memset(plan, 0, sizeof *plan);
    if (cfg->resume && !cfg->base.csv[0])
        return MO_FAIL(MO_ERR_INVALID, "--resume: needs --csv FILE (the rows to resume from)");
    if (cfg->shard_count < 1 || cfg->shard_index < 0 || cfg->shard_index >= cfg->shard_count)
        return MO_FAIL(MO_ERR_INVALID, "--shard %d/%d: needs 0 <= i < n", cfg->shard_index, cfg->shard_count);
    plan->total = mo_config_count(cfg);
    key_set ks = {NULL, 0};
    if (cfg->resume) MO_TRY(done_keys(cfg->base.csv, &ks));
    plan->index = malloc((plan->total / (size_t)cfg->shard_count + 1) * sizeof *plan->index);
    if (!plan->index) {
        free(ks.keys);
        return MO_FAIL(MO_ERR_INTERNAL, "host out of memory planning %zu combinations", plan->total);
    }
    mo_status st = MO_OK;
    for (size_t i = (size_t)cfg->shard_index; i < plan->total && st == MO_OK; i += (size_t)cfg->shard_count) {
        plan->in_shard++;
        if (ks.n) {
            mo_run_config rc;
            char key[KEY_MAX];
            st = mo_config_combination(cfg, i, &rc);
            if (st != MO_OK) break;
            combination_key(&rc, env, key);
            if (bsearch(key, ks.keys, ks.n, KEY_MAX, cmp_key)) {
                plan->resumed++;
                continue;
            }
        }
        plan->index[plan->n++] = i;
    }
    free(ks.keys);
    if (st != MO_OK) mo_sweep_plan_free(plan);
    return st;
}

void mo_sweep_plan_free(mo_sweep_plan *plan) {
    free(plan->index);
    plan->index = NULL;
    plan->n = 0;
}

// ---------------------------------------------------------------- the sweep's state

typedef struct sweep sweep;

typedef struct job {
    sweep *sw;
    size_t index;      // the combination
    int invalid;       // mo_run_config_validate refused it
    int calls;         // benchmark body calls so far
    int written;       // its row is in the CSV
    int used_accum;    // the accum the first call trained with (--on-oom shrink may have raised it)
    mo_csv_row *pending; // Google Benchmark may call again: the latest row, not yet written
} job;

struct sweep {
    const mo_config *cfg;
    mo_run_env env;
    mo_csv_writer *w;
    FILE *out;
    int tty;
    size_t planned, done;
    size_t n_ok, n_fallback, n_oom, n_invalid, n_error;
    double t0;
    mo_csv_row *bases; // measured ckpt-none rows, the baselines of recompute_overhead
    size_t n_bases, cap_bases;
    // bases by configuration key (open addressing, hash -> index + 1): the baseline of a row is
    // found in O(1), not by scanning every earlier row (a 100k-row sweep would be quadratic).
    uint64_t *bhash;
    size_t *bslot, bcap, bcount;
    int fixed_iterations;
    job *jobs;
    job *last;         // the job whose benchmark body ran last
    // Google Benchmark calls the bodies: the first failure (a row that could not be written) is
    // kept here, later bodies run nothing, and run_gbench returns it (exit 1, not a quiet 0).
    mo_status failed;
    char failed_msg[1024];
};

static void utc_now(char *buf, size_t n) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

// A row for a combination that never reached the engine.
static void invalid_row(const sweep *sw, const mo_run_config *rc, const char *reason, mo_csv_row *row) {
    mo_csv_row_init(row);
    mo_csv_row_from_config(row, rc, mo_cap_resolve(&rc->cap, device_total(&sw->env, rc)));
    utc_now(row->utc_time, sizeof row->utc_time);
    snprintf(row->git_rev, sizeof row->git_rev, "%s", sw->env.git_rev);
    snprintf(row->device_name, sizeof row->device_name, "%s", sw->env.dev.name);
    row->device_mem_bytes = (int64_t)device_total(&sw->env, rc);
    snprintf(row->driver, sizeof row->driver, "%s", sw->env.dev.driver);
    snprintf(row->cuda_runtime, sizeof row->cuda_runtime, "%s", sw->env.dev.runtime);
    row->steps = 0;
    snprintf(row->status, sizeof row->status, "invalid");
    snprintf(row->detail, sizeof row->detail, "%s", reason);
}

// A readable benchmark name: backend/model/precision/attn/ckpt/accum/alloc/cap (attn only for a model
// with attention). A custom GPT shape is L-C-H-T-B-V as in the committed results; another model's is
// its name and dims text ("mlp-L4-H256-I256-K10-B64").
mo_status mo_config_name(const mo_run_config *rc, char *buf, size_t n) {
    const mo_model_ops *m = mo_model_find(rc->model);
    const mo_preset *p = m ? mo_model_preset(m, rc->preset) : NULL;
    char model[160], ckpt[24], extra[80] = "", attn[24] = "";
    if (p && p->layers == rc->layers && p->hidden == rc->hidden && p->heads == rc->heads && p->seq == rc->seq &&
        p->vocab == rc->vocab && p->input == rc->input && p->classes == rc->classes)
        snprintf(model, sizeof model, "%s-B%d", p->name, rc->batch);
    else if (!m || m == &mo_gpt_model)
        snprintf(model, sizeof model, "L%d-C%d-H%d-T%d-B%d-V%d", rc->layers, rc->hidden, rc->heads, rc->seq, rc->batch,
                 rc->vocab);
    else {
        char dims[128];
        m->dims_text(rc, dims, sizeof dims);
        for (char *c = dims; *c; c++) if (*c == ' ') *c = '-';
        snprintf(model, sizeof model, "%s-%s-B%d", m->name, dims, rc->batch);
    }
    if (!m || (m->dims & MO_OPT_ATTN)) snprintf(attn, sizeof attn, "/%s", mo_attn_name(rc->attn));
    if (rc->tp != 1 || rc->pp != 1) snprintf(extra, sizeof extra, "/tp:%d/pp:%d", rc->tp, rc->pp);
    if (rc->dp > 1 || rc->zero) {
        size_t k = strlen(extra);
        snprintf(extra + k, sizeof extra - k, "/dp:%d/zero:%d", rc->dp, rc->zero);
    }
    if (rc->offload) {
        size_t k = strlen(extra);
        snprintf(extra + k, sizeof extra - k, "/offload:%s", mo_offload_name(rc->offload));
    }
    if (rc->sp) {
        size_t k = strlen(extra);
        snprintf(extra + k, sizeof extra - k, "/sp:%d", rc->sp);
    }
    snprintf(buf, n, "%s/%s/%s%s/ckpt:%s/accum:%d%s/alloc:%s/cap:%s", mo_backend_name(rc->backend), model,
             mo_precision_name(rc->precision), attn, mo_ckpt_format(rc->ckpt, ckpt, sizeof ckpt),
             rc->accum, extra, mo_alloc_kind_name(rc->alloc), rc->cap_text[0] ? rc->cap_text : "none");
    return MO_OK;
}

static void format_eta(double s, char *buf, size_t n) {
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, n, "%lds", t);
}

// On a terminal: done/total and the time left, before each configuration.
static void progress(sweep *sw, const mo_run_config *rc) {
    if (!sw->tty || !sw->out) return;
    char name[256], eta[32] = "?";
    mo_config_name(rc, name, sizeof name);
    if (sw->done > 0) format_eta((now_s() - sw->t0) / (double)sw->done * (double)(sw->planned - sw->done), eta, sizeof eta);
    fprintf(sw->out, "sweep: %zu/%zu done, ETA %s; next %s\n", sw->done, sw->planned, eta, name);
    fflush(sw->out);
}

static uint64_t hash_key(const char *k) {
    uint64_t h = 1469598103934665603ull; // FNV-1a
    for (; *k; k++) h = (h ^ (unsigned char)*k) * 1099511628211ull;
    return h;
}

// Where key sits in the table, or the empty slot it would take.
static size_t base_slot(const sweep *sw, const char *key, uint64_t h) {
    char have[KEY_MAX];
    size_t i = (size_t)h & (sw->bcap - 1);
    for (; sw->bslot[i]; i = (i + 1) & (sw->bcap - 1)) {
        if (sw->bhash[i] != h) continue;
        mo_csv_config_key(&sw->bases[sw->bslot[i] - 1], have, KEY_MAX);
        if (!strcmp(have, key)) break;
    }
    return i;
}

// Indexes bases[j] under its own key; a later row of the same key replaces it (the last counts).
static void base_index(sweep *sw, size_t j) {
    if (!mo_derive_measured(&sw->bases[j])) return;
    if ((sw->bcount + 1) * 2 > sw->bcap) {
        size_t nc = sw->bcap ? 2 * sw->bcap : 64;
        uint64_t *nh = calloc(nc, sizeof *nh);
        size_t *ns = calloc(nc, sizeof *ns);
        if (!nh || !ns) { free(nh); free(ns); return; } // only recompute_overhead cells go empty
        uint64_t *oh = sw->bhash;
        size_t *os = sw->bslot, oc = sw->bcap;
        sw->bhash = nh; sw->bslot = ns; sw->bcap = nc;
        for (size_t i = 0; i < oc; i++) {
            if (!os[i]) continue;
            size_t k = (size_t)oh[i] & (nc - 1);
            while (ns[k]) k = (k + 1) & (nc - 1);
            nh[k] = oh[i];
            ns[k] = os[i];
        }
        free(oh);
        free(os);
    }
    char key[KEY_MAX];
    mo_csv_config_key(&sw->bases[j], key, KEY_MAX);
    uint64_t h = hash_key(key);
    size_t i = base_slot(sw, key, h);
    if (!sw->bslot[i]) sw->bcount++;
    sw->bhash[i] = h;
    sw->bslot[i] = j + 1;
}

// The baseline of row (the same configuration with ckpt none), or NULL.
static const mo_csv_row *base_of(const sweep *sw, const mo_csv_row *row) {
    if (!sw->bcap) return NULL;
    mo_csv_row t = *row;
    snprintf(t.ckpt, sizeof t.ckpt, "none");
    char key[KEY_MAX];
    mo_csv_config_key(&t, key, KEY_MAX);
    size_t i = base_slot(sw, key, hash_key(key));
    return sw->bslot[i] ? &sw->bases[sw->bslot[i] - 1] : NULL;
}

static mo_status keep_baseline(sweep *sw, const mo_csv_row *row) {
    if (!mo_derive_measured(row) || strcmp(row->ckpt, "none") || !isfinite(row->step_ms)) return MO_OK;
    if (sw->n_bases == sw->cap_bases) {
        size_t nc = sw->cap_bases ? 2 * sw->cap_bases : 16;
        mo_csv_row *b = realloc(sw->bases, nc * sizeof *b);
        if (!b) return MO_OK; // only recompute_overhead cells go empty
        sw->bases = b;
        sw->cap_bases = nc;
    }
    sw->bases[sw->n_bases++] = *row;
    base_index(sw, sw->n_bases - 1);
    return MO_OK;
}

// A finished row: the sweep's status rules, the derived overhead, the CSV, one line of output.
static mo_status emit(sweep *sw, job *j, mo_csv_row *row) {
    // A configuration the engine refused before allocating anything (it reports status error,
    // e.g. a precision not built yet) is an invalid combination; an error during a run stays error.
    if (!strcmp(row->status, "error") && row->peak_allocated_bytes < 0)
        snprintf(row->status, sizeof row->status, "invalid");
    const mo_csv_row *base = base_of(sw, row);
    MO_TRY(mo_derive_fill_overhead(base, base ? 1 : 0, row));
    if (sw->w) MO_TRY(mo_csv_append(sw->w, row));
    MO_TRY(keep_baseline(sw, row));
    j->written = 1;
    sw->done++;
    if (!strcmp(row->status, "ok")) sw->n_ok++;
    else if (!strcmp(row->status, "fallback")) sw->n_fallback++;
    else if (!strcmp(row->status, "oom")) sw->n_oom++;
    else if (!strcmp(row->status, "invalid")) sw->n_invalid++;
    else sw->n_error++;
    if (!sw->out) return MO_OK;
    mo_run_config rc;
    MO_TRY(mo_config_combination(sw->cfg, j->index, &rc));
    rc.accum = (int)row->accum > 0 ? (int)row->accum : rc.accum;
    char name[256], b1[32], b2[32];
    mo_config_name(&rc, name, sizeof name);
    fprintf(sw->out, "[%zu/%zu] %s: %s", sw->done, sw->planned, name, row->status);
    if (mo_derive_measured(row)) {
        fprintf(sw->out, ", peak %s allocated, %s reserved", mo_format_bytes((uint64_t)row->peak_allocated_bytes, b1, 32),
                mo_format_bytes((uint64_t)row->peak_reserved_bytes, b2, 32));
        if (isfinite(row->step_ms)) {
            const mo_model_ops *mo = mo_model_find(row->model);
            fprintf(sw->out, ", %.2f ms/step, %.0f %s/s", row->step_ms, row->items_per_s, mo ? mo->item : "items");
        }
    }
    if (row->detail[0]) fprintf(sw->out, " (%s)", row->detail);
    fprintf(sw->out, "\n");
    fflush(sw->out);
    return MO_OK;
}

static mo_status emit_invalid(sweep *sw, job *j) {
    mo_run_config rc;
    MO_TRY(mo_config_combination(sw->cfg, j->index, &rc));
    mo_status v = mo_run_config_validate(&rc);
    mo_csv_row row;
    invalid_row(sw, &rc, v == MO_OK ? "refused" : mo_errmsg_plain(), &row);
    return emit(sw, j, &row);
}

// --trace DIR: this row's trace file, DIR/<index>-<configuration name with '/' and ':' as '_'>.csv.
static void trace_path_of(const job *j, mo_run_config *rc) {
    if (!rc->trace[0]) return;
    char name[256], dir[MO_PATH_MAX];
    mo_config_name(rc, name, sizeof name);
    for (char *p = name; *p; p++)
        if (*p == '/' || *p == ':') *p = '_';
    snprintf(dir, sizeof dir, "%s", rc->trace);
    int k = snprintf(rc->trace, sizeof rc->trace, "%s/%04zu-%s.csv", dir, j->index, name);
    if (k < 0 || (size_t)k >= sizeof rc->trace) rc->trace[0] = '\0'; // too long a path: no trace
}

// ---------------------------------------------------------------- the plain loop

static mo_status run_plain(sweep *sw) {
    for (size_t k = 0; k < sw->planned; k++) {
        job *j = &sw->jobs[k];
        if (j->invalid) {
            MO_TRY(emit_invalid(sw, j));
            continue;
        }
        mo_run_config rc;
        MO_TRY(mo_config_combination(sw->cfg, j->index, &rc));
        trace_path_of(j, &rc);
        progress(sw, &rc);
        mo_csv_row row;
        MO_TRY(mo_fallback_execute(&rc, &sw->env, &row, NULL));
        MO_TRY(emit(sw, j, &row));
    }
    return MO_OK;
}

// ---------------------------------------------------------------- Google Benchmark

#ifdef MEMOPT_HAVE_GBENCH
typedef struct gb_attempt_ctx {
    mo_gb_state *st;
    const mo_run_env *env;
} gb_attempt_ctx;

// One attempt inside a benchmark body: the warm-up is untimed and may still be retried with a
// smaller micro-batch; once the timing loop starts the attempt is committed.
static mo_status gb_attempt(const mo_run_config *rc, void *user, mo_csv_row *row, int *committed) {
    gb_attempt_ctx *x = user;
    mo_run_session *s = NULL;
    *committed = 0;
    MO_TRY(mo_run_begin(rc, x->env, NULL, &s));
    for (int i = 0; i < rc->warmup && mo_run_status(s) == MO_OK; i++) mo_run_step(s, NULL);
    if (mo_run_status(s) != MO_OK) return mo_run_end(s, row);
    mo_run_mark_timed(s);
    *committed = 1;
    while (mo_gb_keep_running(x->st)) {
        double ms = 0;
        if (mo_run_step(s, &ms) != MO_OK) {
            char why[1100];
            snprintf(why, sizeof why, "failed in a timed step: %s", mo_errmsg_plain());
            mo_gb_skip_with_error(x->st, why);
            break;
        }
        mo_gb_set_iteration_time(x->st, ms / 1e3);
    }
    return mo_run_end(s, row);
}

// Keeps the first failure of a benchmark body; returns st.
static mo_status gb_fail(sweep *sw, mo_status st) {
    if (st != MO_OK && sw->failed == MO_OK) {
        sw->failed = st;
        snprintf(sw->failed_msg, sizeof sw->failed_msg, "%s", mo_errmsg_plain());
    }
    return st;
}

static mo_status flush_pending(sweep *sw, job *j) {
    if (!j || j->written || !j->pending) return MO_OK;
    mo_status st = emit(sw, j, j->pending);
    free(j->pending);
    j->pending = NULL;
    return st;
}

static void gb_body(mo_gb_state *st, void *user) {
    job *j = user;
    sweep *sw = j->sw;
    if (sw->last != j) {
        // The previous configuration is finished: its row, if still pending, is final now.
        if (sw->failed == MO_OK) gb_fail(sw, flush_pending(sw, sw->last));
        sw->last = j;
    }
    if (sw->failed != MO_OK) {
        mo_gb_skip_with_error(st, "not run: the sweep failed before it (see the error at the end)");
        return;
    }
    mo_run_config rc;
    if (mo_config_combination(sw->cfg, j->index, &rc) != MO_OK) {
        mo_gb_skip_with_error(st, mo_errmsg_plain());
        return;
    }
    if (j->invalid) {
        mo_status v = mo_run_config_validate(&rc);
        char why[1024];
        snprintf(why, sizeof why, "invalid: %s", v == MO_OK ? "refused" : mo_errmsg_plain());
        if (!j->written) gb_fail(sw, emit_invalid(sw, j));
        mo_gb_skip_with_error(st, why);
        return;
    }
    trace_path_of(j, &rc);
    if (j->calls++ == 0) progress(sw, &rc);
    else if (j->used_accum > 0) rc.accum = j->used_accum; // repetitions run what the first call trained with
    gb_attempt_ctx x = {st, &sw->env};
    mo_csv_row row;
    mo_run_config used;
    if (mo_fallback_run(&rc, gb_attempt, &x, &row, &used, NULL) != MO_OK) {
        mo_gb_skip_with_error(st, mo_errmsg_plain());
        return;
    }
    if (j->used_accum == 0) j->used_accum = used.accum;
    if (!j->written) {
        // The first call whose measurements are final writes the row (see the top of the file).
        int final = sw->fixed_iterations || !mo_derive_measured(&row) || mo_gb_iterations(st) >= rc.steps;
        if (final) {
            free(j->pending);
            j->pending = NULL;
            if (gb_fail(sw, emit(sw, j, &row)) != MO_OK) {
                mo_gb_skip_with_error(st, sw->failed_msg);
                return;
            }
        } else {
            if (!j->pending) j->pending = malloc(sizeof *j->pending);
            if (j->pending) *j->pending = row;
        }
    }
    if (!mo_derive_measured(&row)) {
        char why[1100];
        snprintf(why, sizeof why, "%s: %s", row.status, row.detail);
        mo_gb_skip_with_error(st, why);
        return;
    }
    mo_gb_counter(st, "peak_allocated_bytes", (double)row.peak_allocated_bytes, MO_GB_COUNTER_BYTES);
    mo_gb_counter(st, "peak_reserved_bytes", (double)row.peak_reserved_bytes, MO_GB_COUNTER_BYTES);
    mo_gb_counter(st, "activation_peak_bytes", (double)row.activation_peak_bytes, MO_GB_COUNTER_BYTES);
    if (isfinite(row.items_per_s)) mo_gb_counter(st, "items_per_s", row.items_per_s, MO_GB_COUNTER_DEFAULT); // tokens for gpt
    if (isfinite(row.recompute_ms)) mo_gb_counter(st, "recompute_ms", row.recompute_ms, MO_GB_COUNTER_DEFAULT);
    if (!strcmp(row.status, "fallback")) mo_gb_set_label(st, row.detail);
}

static mo_status run_gbench(sweep *sw) {
    const mo_config *cfg = sw->cfg;
    sw->fixed_iterations = 1;
    for (int i = 0; i < cfg->n_gbench; i++)
        if (!strncmp(cfg->gbench[i], "--benchmark_min_time", 20)) sw->fixed_iterations = 0;
    for (size_t k = 0; k < sw->planned; k++) {
        job *j = &sw->jobs[k];
        mo_run_config rc;
        MO_TRY(mo_config_combination(cfg, j->index, &rc));
        char name[256];
        mo_config_name(&rc, name, sizeof name);
        mo_gb_bench *b = NULL;
        MO_TRY(mo_gb_register(name, gb_body, j, &b));
        mo_gb_use_manual_time(b);
        mo_gb_set_unit(b, MO_GB_MS);
        if (sw->fixed_iterations) mo_gb_set_iterations(b, rc.steps > 0 ? rc.steps : 1);
    }
    char arg0[] = "memopt sweep";
    char *argv[1 + 8 + 1];
    char args[8][256];
    int argc = 0;
    argv[argc++] = arg0;
    for (int i = 0; i < cfg->n_gbench && i < 8; i++) {
        snprintf(args[i], sizeof args[i], "%s", cfg->gbench[i]);
        argv[argc++] = args[i];
    }
    argv[argc] = NULL;
    mo_status st = mo_gb_run(&argc, argv);
    if (st != MO_OK) return st;
    if (sw->failed != MO_OK) return MO_FAIL(sw->failed, "%s", sw->failed_msg);
    // Rows still pending, and invalid combinations --benchmark_filter kept from running: an
    // invalid combination is never dropped. Valid ones filtered out were not asked for.
    MO_TRY(flush_pending(sw, sw->last));
    for (size_t k = 0; k < sw->planned; k++) {
        job *j = &sw->jobs[k];
        MO_TRY(flush_pending(sw, j));
        if (j->invalid && !j->written) MO_TRY(emit_invalid(sw, j));
    }
    return MO_OK;
}
#endif

// ---------------------------------------------------------------- the command

mo_status mo_sweep_execute(const mo_config *cfg, int use_gbench, FILE *out) {
    sweep *sw = calloc(1, sizeof *sw);
    if (!sw) return MO_FAIL(MO_ERR_INTERNAL, "host out of memory");
    mo_sweep_plan plan = {0};
    mo_status st = MO_OK;
    sw->cfg = cfg;
    sw->out = out;
    sw->tty = out == stdout && isatty(STDOUT_FILENO);
    MO_TRY_GOTO(st, mo_run_env_init(&sw->env, &cfg->base), done);
    // A bad --csv (another schema) is refused before any work; a torn last line (an interrupted
    // write) is cut off here, before --resume reads the rows already done.
    if (cfg->base.csv[0]) {
        MO_TRY_GOTO(st, mo_csv_open(cfg->base.csv, &sw->w), done);
        size_t cut = mo_csv_repaired_bytes(sw->w);
        if (cut && out)
            fprintf(out, "memopt sweep: %s: cut %zu bytes of a torn last line (an interrupted write)%s\n", cfg->base.csv, cut,
                    cfg->resume ? "; resuming from the whole rows" : "");
    }
    MO_TRY_GOTO(st, mo_sweep_select(cfg, &sw->env, &plan), done);
    if (cfg->resume && cfg->base.csv[0]) MO_TRY_GOTO(st, mo_csv_read(cfg->base.csv, &sw->bases, &sw->n_bases), done);
    sw->cap_bases = sw->n_bases;
    for (size_t j = 0; j < sw->n_bases; j++) base_index(sw, j);
#ifdef MEMOPT_HAVE_GBENCH
    if (use_gbench && plan.n > MO_GBENCH_MAX_CONFIGS) {
        if (cfg->n_gbench) {
            st = MO_FAIL(MO_ERR_INVALID,
                         "%s: %zu configurations to run; Google Benchmark takes at most %d in one process (its setup is "
                         "quadratic in their number): split the sweep with --shard i/n, n >= %zu",
                         cfg->gbench[0], plan.n, MO_GBENCH_MAX_CONFIGS,
                         (plan.n + MO_GBENCH_MAX_CONFIGS - 1) / MO_GBENCH_MAX_CONFIGS);
            goto done;
        }
        if (out)
            fprintf(out, "memopt sweep: %zu configurations, above the %d Google Benchmark takes in one process (its setup is"
                         " quadratic): each is timed by the plain loop of --warmup + --steps steps, the same measurement\n",
                    plan.n, MO_GBENCH_MAX_CONFIGS);
        use_gbench = 0;
    }
#endif
    sw->planned = plan.n;
    sw->jobs = calloc(plan.n ? plan.n : 1, sizeof *sw->jobs);
    if (!sw->jobs) {
        st = MO_FAIL(MO_ERR_INTERNAL, "host out of memory for %zu configurations", plan.n);
        goto done;
    }
    for (size_t k = 0; k < plan.n; k++) {
        mo_run_config rc;
        MO_TRY_GOTO(st, mo_config_combination(cfg, plan.index[k], &rc), done);
        sw->jobs[k].sw = sw;
        sw->jobs[k].index = plan.index[k];
        sw->jobs[k].invalid = mo_run_config_validate(&rc) != MO_OK;
    }
    if (out) {
        fprintf(out, "memopt sweep: %zu combinations", plan.total);
        if (cfg->shard_count > 1) fprintf(out, ", shard %d/%d holds %zu", cfg->shard_index, cfg->shard_count, plan.in_shard);
        if (cfg->resume) fprintf(out, ", %zu already in %s (--resume)", plan.resumed, cfg->base.csv);
        fprintf(out, ": %zu to run on the %s backend%s%s\n", plan.n, mo_backend_name(cfg->base.backend),
                cfg->base.csv[0] ? ", rows to " : "", cfg->base.csv);
    }
    sw->t0 = now_s();
#ifdef MEMOPT_HAVE_GBENCH
    if (use_gbench && plan.n > 0) { // nothing to run: no benchmark library report either
        st = run_gbench(sw);
        goto summary;
    }
#else
    if (use_gbench && out)
        fprintf(out, "memopt sweep: Google Benchmark is not built in: each configuration is timed by a plain loop of"
                     " --warmup + --steps steps%s\n",
                cfg->n_gbench ? " (the --benchmark_* flags are ignored)" : "");
#endif
    st = run_plain(sw);
#ifdef MEMOPT_HAVE_GBENCH
summary:
#endif
    if (st == MO_OK && out)
        fprintf(out, "memopt sweep: %zu rows: %zu ok, %zu fallback, %zu oom, %zu invalid, %zu error (%.1f s)\n", sw->done,
                sw->n_ok, sw->n_fallback, sw->n_oom, sw->n_invalid, sw->n_error, now_s() - sw->t0);
done:
    mo_csv_close(sw->w);
    if (sw->jobs)
        for (size_t k = 0; k < sw->planned; k++) free(sw->jobs[k].pending);
    free(sw->jobs);
    free(sw->bases);
    free(sw->bhash);
    free(sw->bslot);
    mo_sweep_plan_free(&plan);
    free(sw);
    return st;
}

// Through Google Benchmark when it is built in; otherwise the plain loop, saying so.
mo_status mo_cmd_sweep(const mo_config *cfg) { return mo_sweep_execute(cfg, 1, stdout); }
