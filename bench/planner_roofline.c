// The planner's time side: a roofline of the training step and its calibration against measured rows.
// The op list is the cost trace of the step on the dry backend (kernels/cost.h: every op dispatch
// records its class, FLOPs and bytes, recompute included, as the model and the dispatchers run it);
// nothing here restates the model's schedule, so a new model adds no planner code. Each op costs the
// larger of its FLOPs at the rate of its class and its bytes at the bandwidth. It is a model of time
// only: memory is always the dry run's.
#include "bench/planner.h"
#include "models/model.h"
#include "kernels/cost.h"
#include "kernels/knobs.h"
#include "strategies/offload_update.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// Seconds of one traced op at the datasheet rates: its compute at the rate of its class, its traffic
// at the bandwidth, at least a launch. GEMMs (and convolutions) at the dense rate of the precision;
// the fused attention kernels in 16 bits at MO_PLAN_EFF_FLASH16 of it and cuDNN's at MO_PLAN_EFF_SDPA16
// (kern_s, not fitted), in fp32
// (CUDA-core code) as memory-bound ops; memory-bound ops at the fp32 rate where they compute more than
// they move.
typedef struct rates {
    double gemm, vec, bw, flash, sdpa;
    double host_link, host; // --offload: the host link per direction (NAN: unknown), the CPU's memory traffic
    int half;
} rates;

static void rates_of(const mo_gpu_spec *g, mo_precision p, rates *r) {
    r->half = p == MO_PREC_FP16 || p == MO_PREC_BF16;
    r->gemm = 1e12 * mo_gpu_gemm_tflops(g, p, NULL);
    r->vec = 1e12 * g->fp32;
    r->bw = 1e9 * g->mem_bw_gbs;
    r->flash = MO_PLAN_EFF_FLASH16 * r->gemm;
    r->sdpa = MO_PLAN_EFF_SDPA16 * r->gemm;
    r->host_link = g->host_gbs > 0 ? 1e9 * g->host_gbs : NAN;
    r->host = 1e9 * mo_plan_host_gbs(mo_plan_host_threads());
}

double mo_plan_host_gbs(int threads) {
    const double r = MO_PLAN_HOST_GBS * (threads > 1 ? threads : 1);
    return r < MO_PLAN_HOST_GBS_MAX ? r : MO_PLAN_HOST_GBS_MAX;
}

double mo_plan_host_s(const mo_roofline *r, int threads) {
    return r->host_work_bytes / (1e9 * mo_plan_host_gbs(threads));
}

int mo_plan_row_host_threads(const char *knobs) {
    const char *k = strstr(knobs, "MEMOPT_OFFLOAD_THREADS=");
    if (!k) return 1;
    const long t = strtol(k + strlen("MEMOPT_OFFLOAD_THREADS="), NULL, 10);
    return t >= 1 && t <= 256 ? (int)t : 1;
}

int mo_plan_host_threads(void) {
    size_t chunk;
    int t = MO_OFFLOAD_THREADS_DEFAULT;
    if (mo_offload_knobs(&chunk, &t) != MO_OK) {
        mo_clear_error();
        t = MO_OFFLOAD_THREADS_DEFAULT;
    }
    return t;
}

// The parts of a step's time: 0 GEMM (gemm_s), 1 memory-bound (mem_s), 2 fixed-rate kernels (kern_s);
// --offload's 3 synchronous host copies (host_copy_s), 4 host work (host_s), 5 copy stream (copy_s), and
// 6 the copy stream's joins (no time of their own).
enum { PART_GEMM, PART_MEM, PART_KERN, PART_HOST_COPY, PART_HOST, PART_COPY_STREAM, PART_JOIN, PARTS };

static int part_of(const rates *r, int cls) {
    if (cls == MO_COST_GEMM || cls == MO_COST_CONV) return PART_GEMM;
    if ((cls == MO_COST_ATTENTION && r->half) || cls == MO_COST_ATTENTION_LIB) return PART_KERN;
    if (cls == MO_COST_HOST_COPY) return PART_HOST_COPY;
    if (cls == MO_COST_HOST) return PART_HOST;
    if (cls == MO_COST_COPY_OUT || cls == MO_COST_COPY_BACK) return PART_COPY_STREAM;
    if (cls == MO_COST_COPY_JOIN) return PART_JOIN;
    return PART_MEM;
}

static double op_seconds(const rates *r, const mo_cost_op *o, int part) {
    // A copy moves its bytes over the host link; the CPU's work streams its bytes through host memory.
    if (part == PART_HOST_COPY || part == PART_COPY_STREAM) { // NAN (no host link rate) stays NAN: fmax would drop it
        double t = o->bytes / r->host_link;
        return isnan(t) ? t : fmax(t, MO_PLAN_KERNEL_FLOOR_S);
    }
    if (part == PART_HOST) return o->bytes / r->host;
    if (part == PART_JOIN) return 0;
    double rate = part == PART_GEMM ? r->gemm
                  : part == PART_KERN ? (o->cls == MO_COST_ATTENTION_LIB ? r->sdpa : r->flash)
                                      : r->vec;
    double t = fmax(o->flops / rate, o->bytes / r->bw);
    return fmax(t, MO_PLAN_KERNEL_FLOOR_S);
}

// The unsplit step's roofline and its parts per region (what the split model divides).
typedef struct roof_parts {
    mo_roofline r;
    double s[MO_COST_REGIONS][PARTS]; // seconds by region and part
} roof_parts;

// The copies on the copy stream not yet joined, each with the compute floors recorded since it was
// issued (what it runs beside). The schedules keep at most two open (in backward a segment's fetch is
// issued just before the join of the fetch before it); past OPEN_MAX the oldest is closed early (its
// window only shortens: the wait is overstated, never hidden).
#define OPEN_MAX 16
typedef struct open_copy {
    int ref, dir;
    double s, win[3];
} open_copy;

static void close_copy(mo_roofline *r, const open_copy *c) {
    r->copy_dir_s[c->dir] += c->s;
    for (int k = 0; k < 3; k++) r->window_s[c->dir][k] += c->win[k];
}

static void roof_of_trace(const mo_cost_trace *t, const mo_gpu_spec *g, mo_precision p, roof_parts *out) {
    memset(out, 0, sizeof *out);
    rates rt;
    rates_of(g, p, &rt);
    open_copy open[OPEN_MAX];
    int n_open = 0;
    for (size_t i = 0; i < t->n; i++) {
        const mo_cost_op *o = &t->ops[i];
        int part = part_of(&rt, o->cls);
        double sec = op_seconds(&rt, o, part);
        int region = o->region < MO_COST_REGIONS ? o->region : 0;
        out->s[region][part] += sec;
        switch (part) {
        case PART_GEMM: out->r.gemm_s += sec; out->r.gemm_flops += o->flops; break;
        case PART_MEM: out->r.mem_s += sec; out->r.mem_bytes += o->bytes; break;
        case PART_KERN: out->r.kern_s += sec; break;
        case PART_HOST_COPY: out->r.host_copy_s += sec; out->r.host_copy_bytes += o->bytes; break;
        case PART_HOST: out->r.host_s += sec; out->r.host_work_bytes += o->bytes; break;
        case PART_COPY_STREAM:
            out->r.copy_s += sec;
            out->r.copy_bytes += o->bytes;
            if (n_open == OPEN_MAX) { // cannot happen with the schedules as written: see OPEN_MAX
                close_copy(&out->r, &open[0]);
                memmove(open, open + 1, (OPEN_MAX - 1) * sizeof *open);
                n_open--;
            }
            open[n_open++] = (open_copy){o->ref, o->cls == MO_COST_COPY_OUT ? 0 : 1, sec, {0, 0, 0}};
            break;
        default: // the join of copy ref: the latest open copy of that ticket (tickets restart every step)
            for (int k = n_open - 1; k >= 0; k--)
                if (open[k].ref == o->ref) {
                    close_copy(&out->r, &open[k]);
                    memmove(open + k, open + k + 1, (size_t)(n_open - k - 1) * sizeof *open);
                    n_open--;
                    break;
                }
            break;
        }
        if (part <= PART_KERN)
            for (int k = 0; k < n_open; k++) open[k].win[part] += sec; // compute beside the copies in flight
        if (part != PART_JOIN) { // a join is a wait, not an op that runs
            out->r.flops += o->flops;
            out->r.kernels++;
        }
    }
    for (int k = 0; k < n_open; k++) close_copy(&out->r, &open[k]); // never joined in the trace: its window so far
    out->r.bubble = 1.0;
}

// A split's time per rank, first order, for the critical rank: a tp rank of the last stage (it runs
// the LM head, replicated on every tp rank, besides its share of the blocks). Per micro-batch its
// compute is the body (embedding and blocks) / (tp*pp) plus the whole head; the 1F1B pipeline
// stretches the micro-batch part by (accum + pp - 1) / accum; the optimizer (not pipelined) is divided
// by tp*pp (optimistic: the replicated LayerNorms and the tied wte copies are updated on several
// ranks). The link carries, per micro-batch and block of the stage, the model's tp all-reduces of one
// (B/accum x items per sample, C) activation (GPT 4, (B/accum, T, C); the MLP 2) in fp32 (16-bit runs
// widen to fp32 before the sum; a ring moves 2 (tp-1)/tp of each), one activation forward and one
// gradient back per stage boundary (16 bits when mixed), and once per step what the first and last
// stage sum (GPT's tied wte gradient, V*C fp32); recompute's extra forward all-reduces are ignored.
// Sequence parallel (--sp, GPT): the head runs on T/tp positions, so it is divided by tp too; the link
// carries what gpt_step.c sends instead of the 4 all-reduces: per block and micro-batch 4 reduce-scatters
// of the (B/accum, T, C) partial sums in fp32 and 6 all-gathers of (B/accum, T, C) in the activation
// dtype (2 forward, 4 backward: 2 output gradients, the 2 LayerNorm outputs gathered again), each ring
// moving (tp-1)/tp of it (so a gather and a scatter of one tensor move what one all-reduce of it
// does), and once per step the all-reduce of the gradients each rank took over its own positions (the
// critical rank's: wte, the stage's LayerNorms and lnf, wpe too when pp is 1; fp32). The parts per region
// come from the unsplit step's trace.
static void split_of(const mo_run_config *rc, const mo_gpu_spec *g, const roof_parts *pp_, mo_roofline *out) {
    int tp = rc->tp, pp = rc->pp, W = tp * pp;
    if (W <= 1) return;
    double bubble = (double)(rc->accum + pp - 1) / rc->accum;
    double part[3]; // the device parts (offload runs unsplit only)
    const double head_div = rc->sp ? tp : 1; // sequence parallel: the head on the rank's T/tp positions
    for (int k = 0; k < 3; k++)
        part[k] = (pp_->s[MO_COST_BODY][k] / W + pp_->s[MO_COST_HEAD][k] / head_div) * bubble + pp_->s[MO_COST_OPTIMIZER][k] / W;
    out->gemm_s = part[0];
    out->mem_s = part[1];
    out->kern_s = part[2];
    out->bubble = bubble;
    int half = rc->precision == MO_PREC_FP16 || rc->precision == MO_PREC_BF16;
    const mo_model_ops *ops = NULL;
    if (mo_model_of(rc, &ops) != MO_OK || !ops->split) return;
    const mo_model_split_ops *so = ops->split;
    double N = (double)(rc->batch / rc->accum) * ops->items_per_sample(rc), C = rc->hidden;
    double act32 = N * C * 4, act = N * C * (half ? 2 : 4); // one (B/accum, T, C) activation, bytes
    double bytes = 0;
    if (tp > 1 && !rc->sp) bytes += rc->accum * (double)(rc->layers / pp) * so->tp_allreduces_per_block * act32 * 2.0 * (tp - 1) / tp;
    if (tp > 1 && rc->sp) {
        double ring = (double)(tp - 1) / tp, Lp = (double)(rc->layers / pp), T = rc->seq, V = rc->vocab;
        bytes += rc->accum * Lp * (4 * act32 + 6 * act) * ring;
        bytes += (V * C + 4 * Lp * C + 2 * C + (pp == 1 ? T * C : 0)) * 4 * 2 * ring; // the partial gradients
    }
    if (pp > 1) bytes += rc->accum * 2 * act + (so->stage_tie_bytes ? so->stage_tie_bytes(rc) : 0); // boundaries; the tie (2 ranks)
    double link = g->link_gbs > 0 ? 0.5e9 * g->link_gbs : 0; // the vendor states both directions together
    out->comm_s = link > 0 ? bytes / link : 0;
}

void mo_roofline_from_trace(const mo_cost_trace *t, const mo_run_config *rc, const mo_gpu_spec *g, mo_roofline *out) {
    roof_parts p;
    roof_of_trace(t, g, rc->precision, &p);
    *out = p.r;
    split_of(rc, g, &p, out);
}

double mo_plan_op_ms(const mo_cost_op *o, const mo_gpu_spec *g, mo_precision p, const mo_plan_calib *c) {
    rates rt;
    rates_of(g, p, &rt);
    int part = part_of(&rt, o->cls);
    if (part == PART_COPY_STREAM || part == PART_JOIN) return 0; // beside the compute stream: its exposed part is no one op's
    double sec = op_seconds(&rt, o, part);
    return 1e3 * (part == PART_GEMM ? sec / c->eff_gemm[p] : part == PART_MEM ? sec / c->eff_mem[p] : sec);
}

// The run whose trace times rc: its step on the dry backend, unsplit (the split model divides the
// unsplit step), uncapped (a plan times configurations that do not fit too), one step, no warm-up (the
// op list of every step is the same).
mo_status mo_plan_trace(const mo_run_config *rc, mo_cost_trace *t) {
    static mo_run_env env;
    static int have_env;
    if (!have_env) {
        MO_TRY(mo_plan_env_init(&env));
        have_env = 1;
    }
    mo_run_config d = *rc;
    d.backend = MO_BACKEND_DRY;
    d.steps = 1;
    d.warmup = 0;
    d.monitor = 0;
    d.csv[0] = '\0';
    d.profile = 0;
    d.tp = d.pp = 1;
    d.sp = 0; // sequence parallelism is a split's (split_of)
    d.comm = MO_COMM_LOCAL;
    memset(&d.cap, 0, sizeof d.cap);
    snprintf(d.cap_text, sizeof d.cap_text, "none");
    mo_csv_row row;
    MO_TRY(mo_run_execute_traced(&d, &env, &row, NULL, t));
    if (strcmp(row.status, "ok") || t->overflow)
        return MO_FAIL(MO_ERR_INTERNAL, "the dry run that traces the step: %s %s", row.status, row.detail);
    return MO_OK;
}

// Rooflines already made, by what the trace depends on (the model and every dimension it takes, batch,
// accum, precision, attention, checkpointing, the MEMOPT_* knobs: kernels/knobs.h) and the GPU's
// rates: --validate's leave-one-out fits time every row once per other row.
#define ROOF_CACHE 512
typedef struct roof_cached {
    char key[768];
    roof_parts p;
} roof_cached;
static roof_cached roof_cache[ROOF_CACHE];
static int roof_cache_n, roof_cache_next;

static void trace_key(const mo_run_config *rc, const mo_gpu_spec *g, char *key, size_t n) {
    char knobs[320];
    snprintf(key, n, "%s L%d C%d H%d T%d B%d V%d I%d K%d a%d p%d at%d ck%d/%d o%d | %s %g %g %g %g %g %g | %s", rc->model,
             rc->layers, rc->hidden, rc->heads, rc->seq, rc->batch, rc->vocab, rc->input, rc->classes, rc->accum,
             (int)rc->precision, (int)rc->attn, (int)rc->ckpt.kind, rc->ckpt.every, rc->offload, g->key, g->fp32, g->tf32,
             g->fp16, g->bf16, g->mem_bw_gbs, g->host_gbs, mo_knobs_text(knobs, sizeof knobs));
}

void mo_roofline_step(const mo_run_config *rc, const mo_gpu_spec *g, mo_roofline *out) {
    memset(out, 0, sizeof *out);
    char key[768];
    trace_key(rc, g, key, sizeof key);
    const roof_parts *p = NULL;
    for (int i = 0; i < roof_cache_n && !p; i++)
        if (!strcmp(roof_cache[i].key, key)) p = &roof_cache[i].p;
    if (!p) {
        mo_cost_trace t = {0};
        mo_status st = mo_plan_trace(rc, &t);
        if (st != MO_OK) {
            mo_cost_trace_free(&t);
            mo_clear_error(); // a configuration the engine refuses: no time (callers test plannable first)
            return;
        }
        roof_cached *c = &roof_cache[roof_cache_next];
        roof_cache_next = (roof_cache_next + 1) % ROOF_CACHE;
        if (roof_cache_n < ROOF_CACHE) roof_cache_n++;
        snprintf(c->key, sizeof c->key, "%s", key);
        roof_of_trace(&t, g, rc->precision, &c->p);
        mo_cost_trace_free(&t);
        p = &c->p;
    }
    *out = p->r;
    split_of(rc, g, p, out);
}

void mo_plan_row_roofline(const mo_csv_row *row, const mo_run_config *rc, const mo_gpu_spec *g, mo_roofline *out) {
    char saved[512], ignored[512];
    const int applied = mo_knobs_apply(row->knobs, saved, sizeof saved) == 0;
    mo_roofline_step(rc, g, out);
    if (applied) mo_knobs_apply(saved, ignored, sizeof ignored);
}

void mo_roofline_dp(const mo_run_config *rc, const mo_gpu_spec *g, double comm_bytes_rank, mo_roofline *out) {
    memset(out, 0, sizeof *out);
    if (rc->dp <= 1 || rc->batch % rc->dp || comm_bytes_rank < 0) {
        out->comm_s = NAN;
        return;
    }
    mo_run_config one = *rc; // one rank's step: the whole model on batch/dp
    one.batch = rc->batch / rc->dp;
    one.dp = 1;
    one.zero = 0;
    mo_roofline_step(&one, g, out);
    double link = g->link_gbs > 0 ? 0.5e9 * g->link_gbs : 0;
    out->comm_s = link > 0 ? comm_bytes_rank / link : NAN;
}

// ---------------------------------------------------------------- calibration

void mo_plan_calib_defaults(mo_plan_calib *c) {
    memset(c, 0, sizeof *c);
    for (int p = 0; p < 4; p++) {
        c->eff_gemm[p] = MO_PLAN_EFF_GEMM;
        c->eff_mem[p] = MO_PLAN_EFF_MEM;
        snprintf(c->how[p], sizeof c->how[p], "defaults %.1f GEMM, %.1f memory", MO_PLAN_EFF_GEMM, MO_PLAN_EFF_MEM);
    }
    c->eff_host = 1;
    snprintf(c->host_how, sizeof c->host_how, "host rate as assumed");
}

double mo_plan_copy_window_ms(const mo_roofline *r, const mo_plan_calib *c, mo_precision p, int dir) {
    const double *w = r->window_s[dir];
    return 1e3 * (w[PART_GEMM] / c->eff_gemm[p] + w[PART_MEM] / c->eff_mem[p] + w[PART_KERN]);
}

double mo_plan_offload_exposed_ms(const mo_roofline *r, const mo_plan_calib *c, mo_precision p) {
    if (r->copy_s == 0) return 0; // nothing on the copy stream
    if (isnan(r->copy_s)) return NAN; // no host link rate: no time (fmax would drop the NAN)
    double ms = 0;
    for (int d = 0; d < 2; d++) ms += fmax(0.0, 1e3 * r->copy_dir_s[d] - mo_plan_copy_window_ms(r, c, p, d));
    return ms;
}

double mo_plan_step_ms(const mo_roofline *r, const mo_plan_calib *c, mo_precision p) {
    double ms = 1e3 * (r->gemm_s / c->eff_gemm[p] + r->mem_s / c->eff_mem[p] + r->comm_s + r->kern_s);
    // --offload: zero terms without it, so every other plan's time is what it was
    if (r->host_copy_s != 0 || r->host_s != 0) ms += 1e3 * (r->host_copy_s + r->host_s / c->eff_host);
    if (r->copy_s != 0) ms += mo_plan_offload_exposed_ms(r, c, p);
    return ms;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

// The workspace budget a row ran at, MiB: its MEMOPT_WORKSPACE_MIB knob; else its model's default
// (mo_model_ops.workspace_mib), unless the row's workspace peak, which holds the budget's whole buffer, is
// below that default: then it ran at the suite's 32 MiB (a ResNet row from before its default was raised).
long mo_plan_row_workspace_mib(const mo_csv_row *r) {
    static const char name[] = "MEMOPT_WORKSPACE_MIB=";
    const char *k = strstr(r->knobs, name);
    if (k) return strtol(k + sizeof name - 1, NULL, 10);
    const size_t dflt = mo_model_workspace_bytes(mo_model_find(r->model));
    if (dflt > MO_GEMM_WORKSPACE_BYTES && (r->workspace_bytes < 0 || (uint64_t)r->workspace_bytes < dflt))
        return (long)(MO_GEMM_WORKSPACE_BYTES >> 20);
    return (long)(dflt >> 20);
}

// A row measured at another workspace budget than its model's default: the roofline has no term for what
// a larger budget buys (cuDNN's engines, larger im2col chunks: ResNet-50 fp32 on the H100 took 132.7 ms at
// 32 MiB, 115.1 at 256), so such a row would move its precision's fitted efficiencies for every default row
// (the planner plans the default budget).
int mo_plan_row_other_workspace(const mo_csv_row *r) {
    return mo_plan_row_workspace_mib(r) != (long)(mo_model_workspace_bytes(mo_model_find(r->model)) >> 20);
}

static int usable_row(const mo_csv_row *r, const mo_gpu_spec *g, const mo_gpu_catalog *one) {
    if (strcmp(r->backend, "cuda") || strcmp(r->status, "ok") || !(r->step_ms > 0) || !isfinite(r->step_ms)) return 0;
    if (r->tp * r->pp > 1 || r->dp > 1) return 0; // the roofline models the unsplit step only
    // ... on the device alone: an offloaded row's host copies and host work have no fitted term, and
    // would move its precision's device efficiencies for every other row.
    if (r->offload[0] && strcmp(r->offload, "none")) return 0;
    // ... and no allocator cost: a raw-allocator row (cudaMalloc/cudaFree per tensor, 2x slower on the
    // H200) would drag its precision's fitted efficiency down for every other row.
    if (strcmp(r->alloc, "raw") == 0) return 0;
    if (mo_plan_row_other_workspace(r)) return 0;
    return mo_gpu_catalog_match_device(one, r->device_name) == g;
}

// An --offload optimizer row of g's kind that can scale the host rate: measured, unsplit, not chunked
// (the chunked update's pipeline is not modelled)
static int host_row(const mo_csv_row *r, const mo_gpu_spec *g, const mo_gpu_catalog *one) {
    if (strcmp(r->backend, "cuda") || strcmp(r->status, "ok") || !(r->step_ms > 0) || !isfinite(r->step_ms)) return 0;
    if (r->tp * r->pp > 1 || r->dp > 1 || strcmp(r->offload, "optimizer") || strcmp(r->alloc, "raw") == 0) return 0;
    if (strstr(r->knobs, "MEMOPT_OFFLOAD_CHUNK=") || mo_plan_row_other_workspace(r)) return 0;
    return mo_gpu_catalog_match_device(one, r->device_name) == g;
}

// The host rate's scale: the median over the offloaded rows of planned / measured host time, where the
// measured host time is the step less the device part (under c's fitted efficiencies) and the copies.
static void host_fit(mo_plan_calib *c, const mo_gpu_spec *g, const mo_gpu_catalog *one, const mo_csv_row *rows, size_t n,
                     long skip) {
    double *ratio = malloc((n ? n : 1) * sizeof *ratio);
    int k = 0;
    for (size_t i = 0; ratio && i < n; i++) {
        if ((long)i == skip || !host_row(&rows[i], g, one)) continue;
        mo_run_config rc;
        if (mo_plan_config_from_row(&rows[i], &rc) != MO_OK) continue;
        mo_roofline r;
        mo_plan_row_roofline(&rows[i], &rc, g, &r);
        const int p = rc.precision;
        const double dev = 1e3 * (r.gemm_s / c->eff_gemm[p] + r.mem_s / c->eff_mem[p] + r.kern_s + r.host_copy_s);
        const double planned = 1e3 * mo_plan_host_s(&r, mo_plan_row_host_threads(rows[i].knobs));
        const double host = rows[i].step_ms - dev;
        if (host > 0 && planned > 0) ratio[k++] = planned / host;
    }
    mo_clear_error();
    if (k > 0) {
        qsort(ratio, (size_t)k, sizeof *ratio, cmp_double);
        c->eff_host = k % 2 ? ratio[k / 2] : 0.5 * (ratio[k / 2 - 1] + ratio[k / 2]);
        c->host_rows = k;
        snprintf(c->host_how, sizeof c->host_how, "host rate x %.2f, scaled to %d offloaded row%s", c->eff_host, k, k == 1 ? "" : "s");
    }
    free(ratio);
}

void mo_plan_calib_fit(mo_plan_calib *c, const mo_gpu_spec *g, const mo_csv_row *rows, size_t n, long skip) {
    mo_plan_calib_defaults(c);
    // Match device names against this one GPU's entry only: a one-entry catalog view.
    mo_gpu_catalog one = {(mo_gpu_spec *)g, 1, ""};
    for (int p = 0; p < 4; p++) {
        // Fit t_i - kern_i = gemm_i / eg + mem_i / em with relative residuals (a 2-parameter least
        // squares in a = 1/eg, b = 1/em, each row divided by t_i), so a 20 ms row weighs as much as a
        // 2 s one; kern_i (the 16-bit fused attention) is taken at its stated rate.
        double suu = 0, suv = 0, svv = 0, su = 0, sv = 0;
        double *ratio = malloc((n ? n : 1) * sizeof *ratio);
        int k = 0;
        for (size_t i = 0; i < n; i++) {
            if ((long)i == skip || !usable_row(&rows[i], g, &one)) continue;
            mo_precision rp;
            if (mo_precision_parse(rows[i].precision, &rp) != MO_OK || (int)rp != p) continue;
            mo_run_config rc;
            if (mo_plan_config_from_row(&rows[i], &rc) != MO_OK) continue;
            mo_roofline r;
            mo_plan_row_roofline(&rows[i], &rc, g, &r);
            double t = rows[i].step_ms / 1e3, u = r.gemm_s / t, v = r.mem_s / t, y = (t - r.kern_s) / t;
            if (!(y > 0)) continue; // the fused kernels alone would take longer than the step
            suu += u * u; suv += u * v; svv += v * v; su += u * y; sv += v * y;
            if (ratio) ratio[k] = (t - r.kern_s) / (r.gemm_s / MO_PLAN_EFF_GEMM + r.mem_s / MO_PLAN_EFF_MEM);
            k++;
        }
        mo_clear_error(); // rows the fit could not use leave no message behind
        if (k == 0 || !ratio) { free(ratio); continue; }
        c->rows[p] = k;
        double det = suu * svv - suv * suv;
        int two = 0;
        if (k >= 3 && det > 1e-6 * suu * svv) {
            double ia = (su * svv - sv * suv) / det, ib = (sv * suu - su * suv) / det;
            if (ia > 0 && ib > 0 && 1 / ia <= 1.5 && 1 / ib <= 1.5 && 1 / ia >= 0.01 && 1 / ib >= 0.01) {
                c->eff_gemm[p] = 1 / ia;
                c->eff_mem[p] = 1 / ib;
                snprintf(c->how[p], sizeof c->how[p], "fitted to %d rows: %.2f GEMM, %.2f memory", k, c->eff_gemm[p], c->eff_mem[p]);
                two = 1;
            }
        }
        if (!two) {
            // One scale on the defaults: the median of measured / predicted (robust to an outlier row).
            qsort(ratio, (size_t)k, sizeof *ratio, cmp_double);
            double s = k % 2 ? ratio[k / 2] : 0.5 * (ratio[k / 2 - 1] + ratio[k / 2]);
            c->eff_gemm[p] = MO_PLAN_EFF_GEMM / s;
            c->eff_mem[p] = MO_PLAN_EFF_MEM / s;
            snprintf(c->how[p], sizeof c->how[p], "scaled to %d row%s: %.2f GEMM, %.2f memory", k, k == 1 ? "" : "s", c->eff_gemm[p],
                     c->eff_mem[p]);
        }
        free(ratio);
    }
    // A precision with no rows of its own on this GPU borrows from one fitted to rows (its rows count stays
    // 0: no row of it was measured; rows[] is not changed here, so one borrows only a fit of rows):
    //  - fp16 and bf16 both efficiencies from each other: the suite's own kernels are one template for both,
    //    the libraries' GEMMs and convolutions take both at the same tensor-core rate, and they move the same
    //    bytes (plan --validate of session 25's H100 ResNet-50 file: the lone fp16 row 27.0% off on the
    //    defaults, 3.6% on bf16's fit);
    //  - tf32 both efficiencies of a 16-bit precision (bf16 first): its GEMMs and convolutions run on tensor
    //    cores as theirs do (the roofline takes them at the TF32 rate, half the 16-bit one), and the rest is
    //    the same templated kernels (batch norm, LayerNorm, loss) on 4-byte elements, whose share of the
    //    bandwidth does not depend on the element's width. fp32's memory efficiency was tried first: its fits
    //    come from steps whose time is CUDA-core GEMMs, and on session 25's H100 GPT-2 file it moved the
    //    lone tf32 row from +8.2% to -15.9%. The default memory efficiency (0.5) left the lone tf32 ResNet-50
    //    rows of the H100 files 10-20% slow (97d16ba's +19.7%); bf16's took them to +3.0 to +7.0%, moved the
    //    two lone GPT-2 tf32 rows from -2.6% / -2.4% to -10.2% / -9.6% and H200 e06bb93's ResNet row from
    //    +4.6% to +8.6%: plan --validate over the committed files, 4 more tf32 rows within 15%, none fewer.
    static const int from[4][2] = {{-1, -1}, {MO_PREC_BF16, MO_PREC_FP16}, {MO_PREC_BF16, -1}, {MO_PREC_FP16, -1}};
    for (int p = 0; p < 4; p++) {
        int q = -1;
        for (int j = 0; j < 2 && q < 0 && !c->rows[p]; j++)
            if (from[p][j] >= 0 && c->rows[from[p][j]]) q = from[p][j];
        if (q < 0) continue;
        c->eff_gemm[p] = c->eff_gemm[q];
        c->eff_mem[p] = c->eff_mem[q];
        snprintf(c->how[p], sizeof c->how[p], "%s's, %.80s", mo_precision_name((mo_precision)q), c->how[q]);
    }
    host_fit(c, g, &one, rows, n, skip);
}

mo_status mo_plan_calib_load(mo_plan_calib *c, const mo_gpu_spec *g, const char *dir, FILE *notes) {
    return mo_plan_calib_load_except(c, g, dir, NULL, notes);
}

// Whether path names the same file as the stat of the left-out one (the same device and inode).
static int same_file(const char *path, const struct stat *except) {
    struct stat s;
    return except && stat(path, &s) == 0 && s.st_dev == except->st_dev && s.st_ino == except->st_ino;
}

mo_status mo_plan_calib_load_except(mo_plan_calib *c, const mo_gpu_spec *g, const char *dir, const char *except,
                                    FILE *notes) {
    mo_plan_calib_defaults(c);
    struct stat ex;
    const int have_ex = except && stat(except, &ex) == 0;
    DIR *d = opendir(dir);
    if (!d) return MO_OK; // no results yet: the defaults
    mo_csv_row *all = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".csv")) continue;
        char path[MO_PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
        if (have_ex && same_file(path, &ex)) continue;
        mo_csv_row *rows = NULL;
        size_t k = 0;
        if (mo_csv_read(path, &rows, &k) != MO_OK) {
            if (notes) fprintf(notes, "  calibration: skipped %s: %s\n", path, mo_errmsg_plain());
            mo_clear_error();
            continue;
        }
        mo_csv_row *na = k ? realloc(all, (n + k) * sizeof *na) : all;
        if (k && !na) { free(rows); break; }
        all = na;
        if (k) memcpy(all + n, rows, k * sizeof *rows);
        n += k;
        free(rows);
    }
    closedir(d);
    mo_plan_calib_fit(c, g, all, n, -1);
    free(all);
    return MO_OK;
}

// ---------------------------------------------------------------- --profile: predicted beside measured

int mo_plan_profile_predict(const mo_cost_trace *t, int steps, const char *device_name, mo_precision p,
                            double ms[MO_PROF_COUNT + 1], char *how, size_t n) {
    for (int k = 0; k <= MO_PROF_COUNT; k++) ms[k] = 0;
    snprintf(how, n, "no prediction");
    mo_gpu_catalog cat;
    if (mo_gpu_catalog_load(NULL, &cat) != MO_OK) {
        mo_clear_error();
        snprintf(how, n, "no prediction: the GPU catalog bench/gpus.txt was not found");
        return 0;
    }
    const mo_gpu_spec *g = mo_gpu_catalog_match_device(&cat, device_name);
    if (!g || steps < 1) {
        snprintf(how, n, "no prediction: '%s' is not a GPU of the catalog", device_name);
        mo_gpu_catalog_free(&cat);
        return 0;
    }
    char dir[MO_PATH_MAX];
    if (!mo_plan_find_file("results", dir, sizeof dir)) snprintf(dir, sizeof dir, "results");
    mo_plan_calib cal;
    mo_plan_calib_load(&cal, g, dir, NULL);
    for (size_t i = 0; i < t->n; i++) {
        int k = t->ops[i].prof < MO_PROF_COUNT ? t->ops[i].prof : MO_PROF_COUNT;
        ms[k] += mo_plan_op_ms(&t->ops[i], g, p, &cal) / steps;
    }
    snprintf(how, n, "%s, %s", g->key, cal.how[p]);
    mo_gpu_catalog_free(&cat);
    return 1;
}
