// memopt plan: for each model the flags describe, the predicted peak by category (dry backend,
// exact), fits or not in the target's headroom, the largest batch that fits, and a ranked table of
// the strategy combinations (precision x attn x ckpt x accum) with a predicted step time.
//
// Which combinations the table explores: an axis given as a list (--ckpt none,full) is explored over
// that list; an axis given one value or none is explored over the default set plus that value
// (precision fp32,tf32,bf16,fp16; attn materialized,fused; ckpt none,selective,sqrt,full; accum
// 1,2,4,8 where the batch divides). The single values (or the first of each list) are "the asked
// configuration", planned in detail first.
//
// --offload is an axis of model points, as --dp and --zero are: each value is planned in full (its
// exact device peak and host_bytes from the dry run; its time with the offloaded copies and host work of
// its cost trace, planner_roofline.c), and with a list the values are compared at the end.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench/cli.h"
#include "bench/planner.h"
#include "models/model.h"

#define TABLE_ROWS_MAX 24 // rows printed; the rest are counted
// The largest batch is searched (about 10 dry runs at growing batch sizes each) for the asked
// configuration and the fastest few that fit: for all 64 default combinations it would take
// seconds, and past the leaders the column is rarely what anyone reads.
#define MAX_BATCH_ROWS 5

typedef struct target {
    mo_gpu_catalog cat;
    int have_cat;
    const mo_gpu_spec *gpu;      // --gpu's entry; NULL with --mem or neither
    const mo_gpu_spec *time_gpu; // whose rates time the step: gpu, or a stated reference
    uint64_t total, headroom;
    char what[256];              // how the device size was chosen
    mo_plan_calib cal;
    char results_dir[MO_PATH_MAX];
    FILE *csv;                   // --csv FILE: the ranked table of every model point, NULL without
} target;

typedef struct entry {
    mo_run_config rc;
    mo_plan_fit fit;
    mo_roofline roof;
    double ms;        // predicted step time; NAN without a GPU to time on
    int max_batch, at_limit, max_done;
} entry;

static const char *gib(uint64_t b, char *buf) { return mo_format_bytes(b, buf, 32); }

static mo_status resolve_target(const mo_config *cfg, target *t) {
    memset(t, 0, sizeof *t);
    mo_status st = mo_gpu_catalog_load(NULL, &t->cat);
    t->have_cat = st == MO_OK;
    char b1[32];
    if (cfg->gpu[0]) {
        if (!t->have_cat) return st; // --gpu needs the catalog: its message says where it looked
        t->gpu = mo_gpu_catalog_find(&t->cat, cfg->gpu);
        if (!t->gpu) {
            char names[512];
            return MO_FAIL(MO_ERR_INVALID, "--gpu: unknown GPU '%s' (accepted: %s; catalog %s)", cfg->gpu,
                           mo_gpu_catalog_names(&t->cat, names, sizeof names), t->cat.path);
        }
        t->time_gpu = t->gpu;
        t->total = mo_gpu_total_bytes(t->gpu);
        snprintf(t->what, sizeof t->what, "%s (%s): %s as CUDA reports it%s", t->gpu->name, t->gpu->key, gib(t->total, b1),
                 t->gpu->visible_bytes ? (t->gpu->unsure & MO_GPU_F_VISIBLE ? " (unsure figure)" : "") : " (the datasheet's figure)");
    } else {
        mo_clear_error();
        int dflt = !cfg->mem_bytes;
        t->total = cfg->mem_bytes ? cfg->mem_bytes : cfg->base.device_mem_bytes;
        // Times need a GPU's rates: the H200 (the suite's reference machine) stands in, said so.
        if (t->have_cat) t->time_gpu = mo_gpu_catalog_find(&t->cat, "h200-sxm");
        snprintf(t->what, sizeof t->what, "%s device (%s)", gib(t->total, b1),
                 dflt ? (cfg->base.device_mem_bytes == MO_DEFAULT_DEVICE_MEM ? "the default: an H200's 143771 MiB; --gpu NAME or --mem SIZE to choose"
                                                                            : "--device-mem")
                      : "--mem");
    }
    if (t->total <= MO_PLAN_CONTEXT_RESERVE)
        return MO_FAIL(MO_ERR_INVALID, "%s: %s is not more than the %s the CUDA context keeps (accepted: a size like 24GiB)",
                       cfg->gpu[0] ? "--gpu" : "--mem", gib(t->total, b1), "512 MiB");
    t->headroom = t->total - MO_PLAN_CONTEXT_RESERVE;
    if (cfg->base.out_dir[0]) snprintf(t->results_dir, sizeof t->results_dir, "%s", cfg->base.out_dir);
    else if (!mo_plan_find_file("results", t->results_dir, sizeof t->results_dir)) snprintf(t->results_dir, sizeof t->results_dir, "results");
    if (t->time_gpu) mo_plan_calib_load(&t->cal, t->time_gpu, t->results_dir, stdout);
    else mo_plan_calib_defaults(&t->cal);
    return MO_OK;
}

static void print_target(const target *t) {
    char b1[32], b2[32];
    printf("target: %s\n", t->what);
    printf("  headroom %s = total less %s for the CUDA context and library handles (never seen by the allocator)\n",
           gib(t->headroom, b1), gib(MO_PLAN_CONTEXT_RESERVE, b2));
    const mo_gpu_spec *g = t->time_gpu;
    if (!g) {
        printf("  no GPU catalog: no step times (bench/gpus.txt not found)\n");
        return;
    }
    printf("  %s%s dense peaks: fp32 %g%s, tf32 %g%s, bf16 %g%s, fp16 %g%s TFLOP/s; memory %g%s GB/s; link %g GB/s (%s)\n",
           t->gpu ? "" : "times on the reference ", g->key, g->fp32, g->unsure & MO_GPU_F_FP32 ? "?" : "", g->tf32,
           g->unsure & MO_GPU_F_TF32 ? "?" : "", g->bf16, g->unsure & MO_GPU_F_BF16 ? "?" : "", g->fp16,
           g->unsure & MO_GPU_F_FP16 ? "?" : "", g->mem_bw_gbs, g->unsure & MO_GPU_F_MEM_BW ? "?" : "", g->link_gbs,
           g->link[0] ? g->link : "?");
    if (g->unsure) printf("  (? marks a figure not confirmed against the vendor's document; sources: %s, docs/gpus.md)\n", t->cat.path);
}

// Only a model with attention has an attention form to print.
static int has_attn(const mo_run_config *rc) {
    const mo_model_ops *m = mo_model_find(rc->model);
    return !m || (m->dims & MO_OPT_ATTN);
}

static void short_strategy(const mo_run_config *rc, char *buf, size_t n) {
    char ck[24], at[32] = "";
    if (has_attn(rc)) snprintf(at, sizeof at, ", attn %s", mo_attn_name(rc->attn));
    snprintf(buf, n, "%s%s, ckpt %s, accum %d%s", mo_precision_name(rc->precision), at, mo_ckpt_format(rc->ckpt, ck, sizeof ck),
             rc->accum, rc->sp ? ", sp" : "");
}

// What the model's items are ("tokens" for gpt, "samples" for mlp).
static const char *item_name(const mo_run_config *rc) {
    const mo_model_ops *m = mo_model_find(rc->model);
    return m ? m->item : "items";
}

// The model's items (gpt: tokens) per second.
static double tokens_per_s(const mo_run_config *rc, double ms) {
    const mo_model_ops *m = mo_model_find(rc->model);
    return m ? (double)rc->batch * m->items_per_sample(rc) / (ms * 1e-3) : NAN;
}

static double model_tflops(const mo_run_config *rc, double ms) {
    const mo_model_ops *m = mo_model_find(rc->model);
    return m ? m->step_flops(rc) / (ms * 1e-3) / 1e12 : NAN;
}

static mo_status evaluate(entry *e, const target *t, const mo_run_env *env, int want_max, int *runs) {
    // The fit check's first run is the step on the dry backend: its cost trace times it (a split run,
    // or one that ran out of memory under its own cap, is traced again unsplit and uncapped).
    static mo_cost_trace trace; // reused from one configuration to the next
    const int split = e->rc.tp * e->rc.pp * (e->rc.dp > 1 ? e->rc.dp : 1) > 1;
    MO_TRY(mo_plan_fit_check_traced(&e->rc, env, t->headroom, &e->fit, t->time_gpu && !split ? &trace : NULL));
    *runs += e->fit.runs;
    e->ms = NAN;
    if (t->time_gpu) {
        if (e->rc.dp > 1) // one rank's batch/dp step plus the link time of the bytes its communicator counted
            mo_roofline_dp(&e->rc, t->time_gpu, (double)e->fit.row.comm_bytes_rank, &e->roof);
        else if (!split && !strcmp(e->fit.row.status, "ok") && !trace.overflow && trace.n > 0)
            mo_roofline_from_trace(&trace, &e->rc, t->time_gpu, &e->roof);
        else
            mo_roofline_step(&e->rc, t->time_gpu, &e->roof);
        e->ms = mo_plan_step_ms(&e->roof, &t->cal, e->rc.precision); // NAN when comm_s is (no link rate, no count)
    }
    if (want_max && e->fit.plannable) {
        int r = 0;
        MO_TRY(mo_plan_max_batch(&e->rc, env, t->headroom, &e->max_batch, &e->at_limit, &r));
        *runs += r;
        e->max_done = 1;
    }
    return MO_OK;
}

// --offload: the host memory the dry run counted, and what the copies and the host's work add to the
// step and why (the assumptions are stated where the figures are).
static void print_offload(const entry *e, const target *t) {
    const mo_csv_row *r = &e->fit.row;
    char b1[32];
    if (!e->rc.offload || strcmp(r->status, "ok")) return;
    const int opt = e->rc.offload == MO_OFFLOAD_OPTIMIZER;
    const int half = e->rc.precision == MO_PREC_FP16 || e->rc.precision == MO_PREC_BF16;
    printf("  offload %s: host memory %lld B (%s: %s; pinned on cuda), not in the device figures above\n",
           mo_offload_name(e->rc.offload), (long long)r->host_bytes, gib((uint64_t)(r->host_bytes > 0 ? r->host_bytes : 0), b1),
           opt ? (half ? "AdamW m, v, the fp32 master and the update's gradient staging" : "AdamW m, v and the update's staging of the gradients and weights")
               : "the checkpointed segments' inputs but the last, while they wait for their recompute");
    if (isnan(e->ms) || !t->time_gpu) return;
    const mo_gpu_spec *g = t->time_gpu;
    const mo_roofline *f = &e->roof;
    const char *unsure = g->unsure & MO_GPU_F_HOST ? "?" : "";
    if (opt) {
        printf("  offloaded update: %.0f B a step over the host link (the gradients down, %s) at %g%s GB/s a direction = %.1f ms;\n"
               "    the host AdamW%s: %.0f B of host memory traffic at %.3g GB/s = %.1f ms (%d thread%s, MO_PLAN_HOST_GBS %g a thread,\n"
               "    at most MO_PLAN_HOST_GBS_MAX %g, fitted to the H100 machine's host; MEMOPT_OFFLOAD_THREADS sets the count; %s);\n"
               "    both added to the step whole: the copies are synchronous and the update waits for the host (no overlap)\n",
               f->host_copy_bytes, half ? "the 16-bit weights back" : "the weights down and back", g->host_gbs, unsure,
               1e3 * f->host_copy_s, half ? " and its cast to 16 bits" : "", f->host_work_bytes,
               mo_plan_host_gbs(mo_plan_host_threads()) * t->cal.eff_host, 1e3 * f->host_s / t->cal.eff_host,
               mo_plan_host_threads(), mo_plan_host_threads() == 1 ? "" : "s", MO_PLAN_HOST_GBS, MO_PLAN_HOST_GBS_MAX,
               t->cal.host_how);
    } else {
        const mo_precision p = e->rc.precision;
        printf("  copy stream: %.0f B a step (each offloaded input out and back) at %g%s GB/s a direction: out %.1f ms beside\n"
               "    the %.1f ms of their blocks' forward, back %.1f ms beside the %.1f ms of the next segments' recompute and\n"
               "    backward: %.1f ms exposed, added to the step (first order: per direction, the copies' time beyond the compute\n"
               "    between each copy and its join, from the trace; the link at its stated rate; offload_stall_ms of a GPU row\n"
               "    measures the wait)\n",
               f->copy_bytes, g->host_gbs, unsure, 1e3 * f->copy_dir_s[0], mo_plan_copy_window_ms(f, &t->cal, p, 0),
               1e3 * f->copy_dir_s[1], mo_plan_copy_window_ms(f, &t->cal, p, 1), mo_plan_offload_exposed_ms(f, &t->cal, p));
    }
}

static void print_asked(const entry *e, const target *t) {
    char b1[32], b2[32], s[128];
    const mo_csv_row *r = &e->fit.row;
    short_strategy(&e->rc, s, sizeof s);
    printf("\nasked: %s, alloc %s, cap %s%s%s\n", s, mo_alloc_kind_name(e->rc.alloc), e->rc.cap_text,
           e->rc.offload ? ", offload " : "", e->rc.offload ? mo_offload_name(e->rc.offload) : "");
    if (!e->fit.plannable) {
        printf("  not plannable: %s: %s\n", r->status, r->detail);
        return;
    }
    printf("  predicted peak (dry backend, exact): allocated %lld B (%s), reserved %lld B (%s)\n", (long long)r->peak_allocated_bytes,
           gib((uint64_t)r->peak_allocated_bytes, b1), (long long)r->peak_reserved_bytes, gib((uint64_t)r->peak_reserved_bytes, b2));
    printf("  by category:");
    const int64_t cats[] = {r->param_bytes, r->grad_bytes, r->optim_bytes, r->master_bytes, r->activation_bytes, r->workspace_bytes};
    for (int c = 0; c < MO_CAT_COUNT; c++)
        printf(" %s %s%s", mo_category_name((mo_category)c), gib((uint64_t)(cats[c] > 0 ? cats[c] : 0), b1), c + 1 < MO_CAT_COUNT ? "," : "\n");
    if (!strcmp(r->status, "ok"))
        printf("  static (params, grads, optimizer, master) %s, activation peak %s\n", gib((uint64_t)r->static_bytes, b1),
               gib((uint64_t)r->activation_peak_bytes, b2));
    else
        printf("  out of memory under its own --cap %s: %s\n", e->rc.cap_text, r->detail);
    uint64_t need = r->peak_reserved_bytes > 0 ? (uint64_t)r->peak_reserved_bytes : 0;
    uint64_t own = mo_cap_resolve(&e->rc.cap, e->rc.device_mem_bytes);
    uint64_t room = own && own < t->headroom ? own : t->headroom; // a tighter --cap is the limit
    const char *room_what = own && own < t->headroom ? "--cap" : "headroom";
    if (e->fit.fits && !e->fit.retries)
        printf("  fits: yes, %s reserved of the %s %s (%.0f%%)\n", gib(need, b1), gib(room, b2), room_what, 100.0 * (double)need / (double)room);
    else if (e->fit.fits)
        printf("  fits: yes, after the allocator released its cached free segments %d time%s (uncapped it would reserve %s)\n",
               e->fit.retries, e->fit.retries == 1 ? "" : "s", gib(need, b1));
    else if (!strcmp(r->status, "ok"))
        printf("  fits: NO, it needs %s reserved, %s more than the %s\n", gib(need, b1), gib(need - room, b2), room_what);
    else
        printf("  fits: NO\n");
    if (e->max_done) {
        if (e->max_batch == 0) printf("  largest batch that fits: none (not even batch %d)\n", e->rc.accum);
        else printf("  largest batch that fits: %d%s%s\n", e->max_batch, e->at_limit ? " (the search limit: at least this)" : "",
                    e->rc.accum > 1 ? " (a multiple of accum)" : "");
    }
    if (!isnan(e->ms)) {
        const char *note = NULL;
        mo_gpu_gemm_tflops(t->time_gpu, e->rc.precision, &note);
        printf("  predicted step %.1f ms (%s): GEMM floor %.1f ms / %.2f, memory-bound floor %.1f ms / %.2f; %.0f %s/s, %.1f model TFLOP/s%s%s\n",
               e->ms, t->cal.how[e->rc.precision], 1e3 * e->roof.gemm_s, t->cal.eff_gemm[e->rc.precision], 1e3 * e->roof.mem_s,
               t->cal.eff_mem[e->rc.precision], tokens_per_s(&e->rc, e->ms), item_name(&e->rc), model_tflops(&e->rc, e->ms), note ? "; " : "", note ? note : "");
        if (e->rc.dp > 1)
            printf("  data parallel: dp %d, ZeRO %d: one rank's batch-%d step %.1f ms plus communication %.1f ms (%lld bytes per rank "
                   "at half the stated link, %s), no overlap of the two assumed\n",
                   e->rc.dp, e->rc.zero, e->rc.batch / e->rc.dp, e->ms - 1e3 * e->roof.comm_s, 1e3 * e->roof.comm_s,
                   (long long)e->fit.row.comm_bytes_rank, t->time_gpu->link);
        if (e->rc.tp * e->rc.pp > 1)
            printf("  split: %d ranks, one %s each; the last stage's rank: blocks / %d plus %s, x 1F1B bubble %.2f; "
                   "communication %.1f ms at half the stated link (%s)\n",
                   e->rc.tp * e->rc.pp, t->time_gpu->key, e->rc.tp * e->rc.pp,
                   e->rc.sp ? "the head / tp (sequence parallel: its seq/tp positions)" : "the whole head", e->roof.bubble,
                   1e3 * e->roof.comm_s, t->time_gpu->link);
    } else if (e->rc.offload && t->time_gpu && !(t->time_gpu->host_gbs > 0)) {
        printf("  no step time: the catalog entry %s has no host_gbs (the host link the offloaded copies take)\n", t->time_gpu->key);
    }
    print_offload(e, t);
}

static int cmp_entry(const void *x, const void *y) {
    const entry *a = x, *b = y;
    if (a->fit.fits != b->fit.fits) return b->fit.fits - a->fit.fits;
    if (a->fit.fits) {
        if (!isnan(a->ms) && !isnan(b->ms) && a->ms != b->ms) return a->ms < b->ms ? -1 : 1;
    }
    int64_t pa = a->fit.row.peak_reserved_bytes, pb = b->fit.row.peak_reserved_bytes;
    return (pa > pb) - (pa < pb);
}

// The table's values of one axis: the list when one was given, else the default set plus the value.
static int axis_precision(const mo_config *c, mo_precision *out) {
    if (c->n_precision > 1) { memcpy(out, c->precision, (size_t)c->n_precision * sizeof *out); return c->n_precision; }
    static const mo_precision d[] = {MO_PREC_FP32, MO_PREC_TF32, MO_PREC_BF16, MO_PREC_FP16};
    memcpy(out, d, sizeof d);
    return 4; // the given value is one of the four
}

static int axis_attn(const mo_config *c, mo_attn_kind *out) {
    if (c->n_attn > 1) { memcpy(out, c->attn, (size_t)c->n_attn * sizeof *out); return c->n_attn; }
    out[0] = MO_ATTN_MATERIALIZED;
    out[1] = MO_ATTN_FUSED;
    return 2;
}

static int same_ckpt(mo_ckpt a, mo_ckpt b) { return a.kind == b.kind && a.every == b.every; }

static int axis_ckpt(const mo_config *c, mo_ckpt *out) {
    if (c->n_ckpt > 1) { memcpy(out, c->ckpt, (size_t)c->n_ckpt * sizeof *out); return c->n_ckpt; }
    static const mo_ckpt d[] = {{MO_CKPT_NONE, 0}, {MO_CKPT_SELECTIVE, 0}, {MO_CKPT_SQRT, 0}, {MO_CKPT_FULL, 0}};
    int n = 4;
    memcpy(out, d, sizeof d);
    int have = 0;
    for (int i = 0; i < n; i++) have |= same_ckpt(out[i], c->ckpt[0]);
    if (!have) out[n++] = c->ckpt[0]; // every:K
    return n;
}

static int axis_accum(const mo_config *c, int *out) {
    if (c->n_accum > 1) { memcpy(out, c->accum, (size_t)c->n_accum * sizeof *out); return c->n_accum; }
    static const int d[] = {1, 2, 4, 8};
    int n = 4;
    memcpy(out, d, sizeof d);
    int have = 0;
    for (int i = 0; i < n; i++) have |= out[i] == c->accum[0];
    if (!have) out[n++] = c->accum[0];
    return n;
}

static mo_status plan_table(const mo_config *cfg, const mo_run_config *point, const target *t, const mo_run_env *env, int *runs) {
    mo_precision P[MO_LIST_MAX];
    mo_attn_kind A[MO_LIST_MAX];
    mo_ckpt K[MO_LIST_MAX + 1];
    int Q[MO_LIST_MAX + 1];
    int np = axis_precision(cfg, P), na = axis_attn(cfg, A), nk = axis_ckpt(cfg, K), nq = axis_accum(cfg, Q);
    size_t cap = (size_t)np * na * nk * nq;
    entry *es = calloc(cap, sizeof *es);
    if (!es) return MO_FAIL(MO_ERR_INTERNAL, "out of host memory");
    size_t n = 0;
    int skipped_accum = 0, skipped_offload = 0;
    char notes[4][256];
    int nnotes = 0;
    mo_status st = MO_OK;
    for (int ip = 0; ip < np && st == MO_OK; ip++)
        for (int ia = 0; ia < na && st == MO_OK; ia++)
            for (int ik = 0; ik < nk && st == MO_OK; ik++)
                for (int iq = 0; iq < nq && st == MO_OK; iq++) {
                    entry *e = &es[n];
                    e->rc = *point;
                    e->rc.precision = P[ip];
                    e->rc.attn = A[ia];
                    e->rc.ckpt = K[ik];
                    e->rc.accum = Q[iq];
                    if (mo_run_config_validate(&e->rc) != MO_OK) {
                        mo_clear_error();
                        skipped_accum += point->batch % Q[iq] != 0;
                        skipped_offload += point->batch % Q[iq] == 0 && point->offload == MO_OFFLOAD_ACTIVATIONS &&
                                           (K[ik].kind == MO_CKPT_NONE || K[ik].kind == MO_CKPT_SELECTIVE);
                        continue;
                    }
                    st = evaluate(e, t, env, 0, runs);
                    if (st != MO_OK) break;
                    if (!e->fit.plannable) {
                        // The engine refuses it (mixed precision not built yet, say): one note per reason.
                        int seen = 0;
                        for (int i = 0; i < nnotes; i++) seen |= !strcmp(notes[i], e->fit.row.detail);
                        if (!seen && nnotes < 4) snprintf(notes[nnotes++], sizeof notes[0], "%.250s", e->fit.row.detail);
                        continue;
                    }
                    n++;
                }
    if (st != MO_OK) { free(es); return st; }
    qsort(es, n, sizeof *es, cmp_entry);
    for (size_t i = 0; i < n && i < MAX_BATCH_ROWS && st == MO_OK; i++) {
        // The fastest that fit; when none fits, the smallest peaks (they sort first): how far to shrink.
        if (!es[i].fit.fits && es[0].fit.fits) break;
        int r = 0;
        st = mo_plan_max_batch(&es[i].rc, env, t->headroom, &es[i].max_batch, &es[i].at_limit, &r);
        *runs += r;
        es[i].max_done = 1;
    }
    if (st != MO_OK) { free(es); return st; }
    char b1[32];
    size_t nfit = 0;
    for (size_t i = 0; i < n; i++) nfit += es[i].fit.fits;
    char with[48] = "";
    if (point->offload) snprintf(with, sizeof with, " with --offload %s", mo_offload_name(point->offload));
    printf("\nstrategy combinations at batch %d%s: %zu planned, %zu fit, ranked by predicted step time%s\n", point->batch, with, n,
           nfit, t->time_gpu ? "" : " (no GPU rates: by peak)");
    char items_hdr[24];
    snprintf(items_hdr, sizeof items_hdr, "%s/s", n ? item_name(&es[0].rc) : "items"); // one model per plan
    printf("  %4s  %-9s %-12s %-9s %5s  %13s  %4s  %9s  %10s  %9s\n", "rank", "precision", "attn", "ckpt", "accum", "peak reserved",
           "fits", "step ms", items_hdr, "max batch");
    size_t shown = 0;
    for (size_t i = 0; i < n; i++) {
        const entry *e = &es[i];
        if (shown == TABLE_ROWS_MAX) {
            size_t rest_fit = 0;
            for (size_t j = i; j < n; j++) rest_fit += es[j].fit.fits;
            printf("  ... %zu more (%zu of them fit)\n", n - i, rest_fit);
            break;
        }
        char ck[24], rank[8], mb[16], ms[16], tps[16];
        snprintf(rank, sizeof rank, e->fit.fits ? "%zu" : "-", i + 1);
        if (!e->max_done) snprintf(mb, sizeof mb, "-");
        else if (!e->max_batch) snprintf(mb, sizeof mb, "none");
        else snprintf(mb, sizeof mb, e->at_limit ? ">=%d" : "%d", e->max_batch);
        if (isnan(e->ms)) snprintf(ms, sizeof ms, "-"), snprintf(tps, sizeof tps, "-");
        else snprintf(ms, sizeof ms, "%.1f", e->ms), snprintf(tps, sizeof tps, "%.0f", tokens_per_s(&e->rc, e->ms));
        printf("  %4s  %-9s %-12s %-9s %5d  %13s  %4s  %9s  %10s  %9s\n", rank, mo_precision_name(e->rc.precision),
               has_attn(&e->rc) ? mo_attn_name(e->rc.attn) : "-", mo_ckpt_format(e->rc.ckpt, ck, sizeof ck), e->rc.accum,
               gib((uint64_t)e->fit.row.peak_reserved_bytes, b1), e->fit.fits ? (e->fit.retries ? "yes*" : "yes") : "no", ms, tps, mb);
        shown++;
    }
    if (n && es[0].fit.fits) {
        char s[128];
        short_strategy(&es[0].rc, s, sizeof s);
        if (isnan(es[0].ms)) printf("  best: %s (the smallest peak that fits)\n", s);
        else printf("  best: %s: %.1f ms per step, %.0f %s/s, peak reserved %s\n", s, es[0].ms, tokens_per_s(&es[0].rc, es[0].ms), item_name(&es[0].rc),
                    gib((uint64_t)es[0].fit.row.peak_reserved_bytes, b1));
    } else if (n) {
        printf("  nothing fits at batch %d: the smallest peak is %s; see max batch\n", point->batch, gib((uint64_t)es[0].fit.row.peak_reserved_bytes, b1));
        if (es[0].fit.row.static_bytes > 0 && (uint64_t)es[0].fit.row.static_bytes > t->headroom) {
            char b2[32];
            printf("  the parameters, gradients and optimizer state alone take %s of the %s headroom: no activation strategy\n"
                   "  can fit it (mixed precision keeps fp32 master weights and Adam state: no fewer bytes); it needs\n"
                   "  the model split across GPUs (--tp, --pp), its state sharded (--gpus N), AdamW's state in host\n"
                   "  memory (gpt: --offload optimizer) or a GPU with more memory\n",
                   gib((uint64_t)es[0].fit.row.static_bytes, b1), gib(t->headroom, b2));
        }
    }
    if (t->csv) // every combination, not only the rows printed; empty cells for what was not computed
        for (size_t i = 0; i < n; i++) {
            const entry *e = &es[i];
            char ck[24], dims[128] = "";
            const mo_model_ops *mo = mo_model_find(e->rc.model);
            if (mo) mo->dims_text(&e->rc, dims, sizeof dims);
            fprintf(t->csv, "%zu,%d,%d,%d,%d,%d,%d,%s,%s,%s,%d,%lld,%lld,%s,", e->fit.fits ? i + 1 : 0, e->rc.layers,
                    e->rc.hidden, e->rc.heads, e->rc.seq, e->rc.vocab, e->rc.batch, mo_precision_name(e->rc.precision),
                    has_attn(&e->rc) ? mo_attn_name(e->rc.attn) : "", mo_ckpt_format(e->rc.ckpt, ck, sizeof ck), e->rc.accum,
                    (long long)e->fit.row.peak_allocated_bytes, (long long)e->fit.row.peak_reserved_bytes,
                    e->fit.fits ? (e->fit.retries ? "yes*" : "yes") : "no");
            if (isnan(e->ms)) fprintf(t->csv, ",,");
            else fprintf(t->csv, "%.3f,%.0f,", e->ms, tokens_per_s(&e->rc, e->ms));
            if (e->max_done) fprintf(t->csv, "%d,%d,", e->max_batch, e->at_limit);
            else fprintf(t->csv, ",,");
            fprintf(t->csv, "%s,%s,%s,%lld\n", e->rc.model, dims, mo_offload_name(e->rc.offload),
                    (long long)e->fit.row.host_bytes); // the model, its own dimension text (no commas), what lives on the host
        }
    for (int i = 0; i < nnotes; i++) printf("  not plannable: %s\n", notes[i]);
    if (skipped_accum) printf("  (%d combinations skipped: accum does not divide batch %d)\n", skipped_accum, point->batch);
    if (skipped_offload)
        printf("  (%d combinations skipped: --offload activations needs checkpoint segments, which ckpt none and selective lack)\n",
               skipped_offload);
    printf("  (yes* fits only after the allocator releases cached segments; max batch: the largest global batch that fits, searched for the first %d rows)\n", MAX_BATCH_ROWS);
    free(es);
    return MO_OK;
}

// --gpus N: the ZeRO levels 0..3 at dp N for the asked configuration, each with its exact per-rank
// peak (the largest rank's, dry), fits or not in one GPU's headroom, and the first-order step time
// (mo_roofline_dp); the suggestion is the fastest that fits, a tie going to the lower level (less
// communication to go wrong, the same memory bought for nothing otherwise).
static mo_status plan_zero(const mo_run_config *point, int N, const target *t, const mo_run_env *env, int *runs) {
    entry es[4];
    memset(es, 0, sizeof es);
    char b1[32], b2[32], s[128];
    short_strategy(point, s, sizeof s);
    printf("\ndata parallel over %d GPUs (one %s each): ZeRO levels at dp %d, batch %d per rank, %s\n", N,
           t->gpu ? t->gpu->key : "device of the target", N, point->batch / N, s);
    char items_hdr[24];
    snprintf(items_hdr, sizeof items_hdr, "%s/s", item_name(point));
    printf("  %4s  %15s  %13s  %4s  %10s  %7s  %9s  %10s\n", "zero", "peak allocated", "peak reserved", "fits", "compute ms",
           "comm ms", "step ms", items_hdr);
    int best = -1;
    for (int z = 0; z < 4; z++) {
        entry *e = &es[z];
        e->rc = *point;
        e->rc.dp = N;
        e->rc.zero = z;
        MO_TRY(evaluate(e, t, env, 0, runs));
        const mo_csv_row *r = &e->fit.row;
        if (!e->fit.plannable) {
            printf("  %4d  not plannable: %s: %s\n", z, r->status, r->detail);
            continue;
        }
        char comp[16] = "-", comm[16] = "-", ms[16] = "-", tps[16] = "-";
        if (!isnan(e->ms)) {
            snprintf(comp, sizeof comp, "%.1f", e->ms - 1e3 * e->roof.comm_s);
            snprintf(comm, sizeof comm, "%.1f", 1e3 * e->roof.comm_s);
            snprintf(ms, sizeof ms, "%.1f", e->ms);
            snprintf(tps, sizeof tps, "%.0f", tokens_per_s(&e->rc, e->ms));
        }
        printf("  %4d  %15s  %13s  %4s  %10s  %7s  %9s  %10s\n", z, gib((uint64_t)(r->peak_allocated_bytes > 0 ? r->peak_allocated_bytes : 0), b1),
               gib((uint64_t)(r->peak_reserved_bytes > 0 ? r->peak_reserved_bytes : 0), b2),
               e->fit.fits ? (e->fit.retries ? "yes*" : "yes") : "no", comp, comm, ms, tps);
        if (!e->fit.fits) continue;
        // The fastest; without times (no catalog, no link rate) the lowest level that fits.
        if (best < 0 || (!isnan(e->ms) && !isnan(es[best].ms) && e->ms < es[best].ms)) best = z;
    }
    if (best >= 0) {
        const entry *e = &es[best];
        if (isnan(e->ms))
            printf("  suggested: ZeRO %d (the lowest level that fits; no step times), peak reserved %s per rank\n", best,
                   gib((uint64_t)e->fit.row.peak_reserved_bytes, b1));
        else
            printf("  suggested: ZeRO %d, the fastest that fits: %.1f ms per step, %.0f %s/s over the %d GPUs, peak reserved %s per rank\n",
                   best, e->ms, tokens_per_s(&e->rc, e->ms), item_name(&e->rc), N, gib((uint64_t)e->fit.row.peak_reserved_bytes, b1));
    } else {
        printf("  no ZeRO level fits at batch %d on %d GPUs: fewer rows per GPU (a smaller --batch, more --gpus), --ckpt, or a GPU with more memory\n",
               point->batch, N);
    }
    printf("  (per rank: the largest rank's exact dry peak against the %s headroom; time: one rank's batch/%d step (optimizer counted whole)\n"
           "   plus the bytes its communicator counted at half the stated link (ring: all-reduce 2(D-1)/D, reduce-scatter and\n"
           "   all-gather (D-1)/D of the payload); communication and compute are assumed not to overlap)\n",
           gib(t->headroom, b1), N);
    return MO_OK;
}

// --offload with a list: the asked configuration under each value side by side (exact device peak,
// host memory, the step time with the offload's copies and host work), and the fastest that fits, a
// tie going to the value that keeps less in host memory. have[k] 0: value k was not plannable.
static void plan_offload_compare(const entry *es, const int *have, int n) {
    char b1[32], b2[32], b3[32], s[128];
    int first = -1;
    for (int k = 0; k < n && first < 0; k++)
        if (have[k]) first = k;
    if (first < 0) return;
    short_strategy(&es[first].rc, s, sizeof s);
    printf("\noffload compared: %s, batch %d\n", s, es[first].rc.batch);
    char items_hdr[24];
    snprintf(items_hdr, sizeof items_hdr, "%s/s", item_name(&es[first].rc));
    printf("  %-12s %15s  %13s  %4s  %12s  %9s  %10s\n", "offload", "peak allocated", "peak reserved", "fits", "host memory",
           "step ms", items_hdr);
    int best = -1;
    for (int k = 0; k < n; k++) {
        const entry *e = &es[k];
        if (!have[k]) continue;
        const mo_csv_row *r = &e->fit.row;
        if (!e->fit.plannable) {
            printf("  %-12s not plannable: %s: %s\n", mo_offload_name(e->rc.offload), r->status, r->detail);
            continue;
        }
        char ms[16] = "-", tps[16] = "-";
        if (!isnan(e->ms)) {
            snprintf(ms, sizeof ms, "%.1f", e->ms);
            snprintf(tps, sizeof tps, "%.0f", tokens_per_s(&e->rc, e->ms));
        }
        printf("  %-12s %15s  %13s  %4s  %12s  %9s  %10s\n", mo_offload_name(e->rc.offload),
               gib((uint64_t)(r->peak_allocated_bytes > 0 ? r->peak_allocated_bytes : 0), b1),
               gib((uint64_t)(r->peak_reserved_bytes > 0 ? r->peak_reserved_bytes : 0), b2),
               e->fit.fits ? (e->fit.retries ? "yes*" : "yes") : "no", gib((uint64_t)(r->host_bytes > 0 ? r->host_bytes : 0), b3), ms,
               tps);
        if (!e->fit.fits) continue;
        if (best < 0) { best = k; continue; }
        const entry *b = &es[best];
        int faster = !isnan(e->ms) && (isnan(b->ms) || e->ms < b->ms);
        int tie = (isnan(e->ms) && isnan(b->ms)) || e->ms == b->ms;
        if (faster || (tie && r->host_bytes < b->fit.row.host_bytes)) best = k;
    }
    if (best < 0) {
        printf("  no --offload value fits at batch %d\n", es[first].rc.batch);
        return;
    }
    const entry *e = &es[best];
    if (isnan(e->ms))
        printf("  suggested: --offload %s (no step times: the least host memory of those that fit), peak reserved %s\n",
               mo_offload_name(e->rc.offload), gib((uint64_t)e->fit.row.peak_reserved_bytes, b1));
    else
        printf("  suggested: --offload %s, the fastest that fits: %.1f ms per step, peak reserved %s, host memory %s\n",
               mo_offload_name(e->rc.offload), e->ms, gib((uint64_t)e->fit.row.peak_reserved_bytes, b1),
               gib((uint64_t)(e->fit.row.host_bytes > 0 ? e->fit.row.host_bytes : 0), b2));
}

static void print_model(const mo_run_config *rc) {
    const mo_model_ops *m = mo_model_find(rc->model);
    if (!m) return;
    // The preset's name only when the dimensions are still the preset's.
    const mo_preset *p = mo_model_preset(m, rc->preset);
    int is_preset = p && p->layers == rc->layers && p->hidden == rc->hidden && p->heads == rc->heads && p->seq == rc->seq &&
                    p->vocab == rc->vocab && p->input == rc->input && p->classes == rc->classes;
    char dims[128];
    printf("memopt plan: %s %s, %s, batch %d, %.1fM parameters\n", m->name, is_preset ? rc->preset : "(custom shape)",
           m->dims_text(rc, dims, sizeof dims), rc->batch, (double)m->num_params(rc) / 1e6);
}

// --gpus N against every model point, before anything is printed: N x accum divides the batch, and
// the model has data-parallel ranks (GPT only for now: the engine refuses --dp elsewhere only when it
// builds the model, too late for a one-line bad-input exit).
static mo_status check_gpus(const mo_config *pts, int N) {
    for (size_t i = 0, n = mo_config_count(pts); i < n; i++) {
        mo_run_config rc;
        MO_TRY(mo_config_combination(pts, i, &rc));
        if (strcmp(rc.model, "gpt"))
            return MO_FAIL(MO_ERR_INVALID, "--gpus %d: model %s has no data-parallel ranks yet (accepted: --model gpt)", N, rc.model);
        if (rc.batch % N || (rc.batch / N) % rc.accum)
            return MO_FAIL(MO_ERR_INVALID, "--gpus %d: batch %d is not divisible by gpus x accum = %d (each GPU takes batch/%d rows; "
                           "accepted: N with N x accum dividing the batch)", N, rc.batch, N * rc.accum, N);
        if (N > 1 && rc.tp * rc.pp > 1)
            return MO_FAIL(MO_ERR_INVALID, "--gpus %d with --tp %d --pp %d: data parallelism runs on unsplit models only for now "
                           "(accepted: --tp 1 --pp 1 with --gpus)", N, rc.tp, rc.pp);
        if (N > 1 && rc.offload)
            return MO_FAIL(MO_ERR_INVALID, "--gpus %d with --offload %s: offload runs on one unsplit rank only for now "
                           "(accepted: --offload none with --gpus)", N, mo_offload_name(rc.offload));
    }
    return MO_OK;
}

mo_status mo_cmd_plan(const mo_config *cfg) {
    if (cfg->validate[0]) return mo_plan_validate(cfg);
    if (cfg->gpus) {
        // --gpus N sets dp itself and lists every level: a --dp or --zero beside it would be ignored.
        if (cfg->n_dp > 1 || cfg->dp[0] != 1 || cfg->n_zero > 1 || cfg->zero[0] != 0)
            return MO_FAIL(MO_ERR_INVALID, "--gpus %d: sets dp to %d and lists ZeRO 0..3 itself (accepted: --gpus without --dp and --zero)",
                           cfg->gpus, cfg->gpus);
        if (cfg->base.csv[0])
            return MO_FAIL(MO_ERR_INVALID, "--gpus %d: the ZeRO table is printed, not written (accepted: --gpus or --csv, not both)", cfg->gpus);
    }
    double t0 = mo_plan_now();
    target *t = calloc(1, sizeof *t);
    mo_config *pts = malloc(sizeof *pts);
    if (!t || !pts) { free(t); free(pts); return MO_FAIL(MO_ERR_INTERNAL, "out of host memory"); }
    // The model points: every combination of the axes but the four the table explores.
    memcpy(pts, cfg, sizeof *pts);
    pts->n_precision = pts->n_attn = pts->n_ckpt = pts->n_accum = 1;
    mo_status st = cfg->gpus ? check_gpus(pts, cfg->gpus) : MO_OK;
    if (st == MO_OK) st = resolve_target(cfg, t);
    if (st == MO_OK && cfg->base.csv[0]) { // opened before any work: a bad path is refused at once
        st = mo_mkdir_parent(cfg->base.csv, "--csv");
        if (st == MO_OK && !(t->csv = fopen(cfg->base.csv, "w")))
            st = MO_FAIL(MO_ERR_IO, "--csv: cannot write '%s': %s", cfg->base.csv, strerror(errno));
        if (st == MO_OK)
            fprintf(t->csv, "rank,layers,hidden,heads,seq,vocab,batch,precision,attn,ckpt,accum,peak_allocated_bytes,"
                            "peak_reserved_bytes,fits,step_ms,items_per_s,max_batch,max_batch_at_limit,model,dims,offload,host_bytes\n");
    }
    mo_run_env env;
    if (st == MO_OK) st = mo_plan_env_init(&env);
    size_t npts = st == MO_OK ? mo_config_count(pts) : 0;
    int runs = 0;
    // --offload is the last axis (the fastest): a group of n_offload consecutive points differs only in it.
    const int n_off = pts->n_offload > 1 ? pts->n_offload : 1;
    entry *group = n_off > 1 ? calloc((size_t)n_off, sizeof *group) : NULL;
    int have[MO_LIST_MAX] = {0};
    if (n_off > 1 && !group && st == MO_OK) st = MO_FAIL(MO_ERR_INTERNAL, "out of host memory");
    for (size_t i = 0; i < npts && st == MO_OK; i++) {
        mo_run_config rc;
        st = mo_config_combination(pts, i, &rc);
        if (st != MO_OK) break;
        rc.device_mem_bytes = t->total; // fractional caps resolve against the target
        const int k_off = (int)(i % (size_t)n_off);
        if (k_off == 0) memset(have, 0, sizeof have);
        if (i) printf("\n");
        print_model(&rc);
        if (i == 0) print_target(t);
        if (mo_run_config_validate(&rc) != MO_OK) {
            printf("  skipped: %s\n", mo_errmsg_plain());
            mo_clear_error();
        } else if (cfg->gpus > 1) {
            st = plan_zero(&rc, cfg->gpus, t, &env, &runs);
        } else {
            entry asked;
            memset(&asked, 0, sizeof asked);
            asked.rc = rc;
            st = evaluate(&asked, t, &env, 1, &runs);
            if (st != MO_OK) break;
            print_asked(&asked, t);
            if (group) group[k_off] = asked, have[k_off] = 1;
            st = plan_table(cfg, &rc, t, &env, &runs);
        }
        if (st == MO_OK && group && k_off == n_off - 1) plan_offload_compare(group, have, n_off);
    }
    free(group);
    if (st == MO_OK)
        printf("\nplanned in %.3f s (%d dry runs of the engine; memory exact, times modelled)\n", mo_plan_now() - t0, runs);
    if (t->csv) {
        int bad = ferror(t->csv) | (fclose(t->csv) != 0);
        if (st == MO_OK && bad) st = MO_FAIL(MO_ERR_IO, "--csv: error writing '%s'", cfg->base.csv);
        if (st == MO_OK) printf("ranked table: %s\n", cfg->base.csv);
    }
    if (t->have_cat) mo_gpu_catalog_free(&t->cat);
    free(t);
    free(pts);
    return st;
}
