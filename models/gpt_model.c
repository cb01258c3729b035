// GPT behind the model interface (models/model.h): the table's functions are thin wrappers over
// models/gpt.h (one device) and models/gpt_split.h (--tp/--pp ranks); the step is gpt_step.c's.
#include "models/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "models/gpt.h"
#include "models/gpt_split.h"

// GPT-2 sizes, seq 1024, vocab 50304 (50257 padded to a multiple of 128), batch 8; the first is the default.
static const mo_preset gpt_presets[] = {
    {"gpt2-124m", 12, 768, 12, 1024, 8, 50304, 0, 0},
    {"gpt2-350m", 24, 1024, 16, 1024, 8, 50304, 0, 0},
    {"gpt2-774m", 36, 1280, 20, 1024, 8, 50304, 0, 0},
    {"gpt2-1558m", 48, 1600, 25, 1024, 8, 50304, 0, 0},
};

// The model's configuration of one run: dims, attention, checkpointing, accumulation, precision,
// AdamW (lr from --lr; beta 0.9/0.95, eps 1e-8, no weight decay, clip 1.0), the seed.
static void gpt_config_of(const mo_run_config *rc, mo_gpt_config *g) {
    memset(g, 0, sizeof *g);
    g->layers = rc->layers; g->hidden = rc->hidden; g->heads = rc->heads; g->seq = rc->seq;
    g->batch = rc->batch; g->vocab = rc->vocab;
    g->attn_fused = rc->attn == MO_ATTN_FUSED;
    g->ckpt = rc->ckpt.kind; g->ckpt_every = rc->ckpt.every;
    g->accum = rc->accum;
    g->tf32 = rc->precision == MO_PREC_TF32;
    g->dtype = rc->precision == MO_PREC_FP16 ? MO_F16 : rc->precision == MO_PREC_BF16 ? MO_BF16 : MO_F32;
    g->loss_scaling = rc->precision == MO_PREC_FP16; // DESIGN.md: fp16 with the dynamic loss scaler
    g->lr = (float)rc->lr; g->beta1 = 0.9f; g->beta2 = 0.95f; g->eps = 1e-8f; g->weight_decay = 0.0f; g->grad_clip = 1.0f;
    g->seed = rc->seed;
    g->offload = rc->offload == MO_OFFLOAD_OPTIMIZER; // activations are the schedule's (ctx->offload_act)
}

// The cross-flag rules of a GPT combination, in the order config.c had them (the generic accum rule
// among them, so that a combination breaking two rules names the same one as before).
static mo_status gpt_validate(const mo_run_config *r) {
    if (r->heads < 1 || r->hidden % r->heads)
        return MO_FAIL(MO_ERR_INVALID, "--heads %d: hidden %d is not divisible by %d", r->heads, r->hidden, r->heads);
    MO_TRY(mo_run_config_check_accum(r));
    if (r->tp > 1 && r->heads % r->tp)
        return MO_FAIL(MO_ERR_INVALID, "--tp %d: heads %d is not divisible by %d", r->tp, r->heads, r->tp);
    if (r->tp > 1 && (4 * r->hidden) % r->tp)
        return MO_FAIL(MO_ERR_INVALID, "--tp %d: the MLP width 4*hidden = %d is not divisible by %d", r->tp,
                       4 * r->hidden, r->tp);
    if (r->pp > 1 && r->layers % r->pp)
        return MO_FAIL(MO_ERR_INVALID, "--pp %d: layers %d is not divisible by %d (every stage holds layers/pp blocks)",
                       r->pp, r->layers, r->pp);
    return mo_run_config_check_every(r);
}

// The model's own shape checks (the engine's, before anything is built).
static mo_status gpt_check(const mo_run_config *r) {
    mo_gpt_config g;
    gpt_config_of(r, &g);
    return mo_gpt_validate(&g);
}

static const char *gpt_dims_text(const mo_run_config *rc, char *buf, size_t n) {
    snprintf(buf, n, "L%d C%d H%d T%d V%d", rc->layers, rc->hidden, rc->heads, rc->seq, rc->vocab);
    return buf;
}

static mo_status gpt_dims_parse(const char *t, mo_run_config *rc) {
    int L, C, H, T, V, used = 0;
    if (sscanf(t, "L%d C%d H%d T%d V%d%n", &L, &C, &H, &T, &V, &used) != 5 || t[used] || L < 1 || C < 1 || H < 1 || T < 1 ||
        V < 1)
        return MO_FAIL(MO_ERR_INVALID, "dims '%s': not gpt's 'L12 C768 H12 T1024 V50304'", t);
    rc->layers = L; rc->hidden = C; rc->heads = H; rc->seq = T; rc->vocab = V;
    return MO_OK;
}

static size_t gpt_num_params(const mo_run_config *rc) {
    mo_gpt_config g;
    gpt_config_of(rc, &g);
    return mo_gpt_num_params(&g);
}

static double gpt_items_per_sample(const mo_run_config *rc) { return rc->seq; }

static double gpt_step_flops(const mo_run_config *rc) {
    mo_gpt_config g;
    gpt_config_of(rc, &g);
    return mo_gpt_step_flops(&g);
}

static double gpt_recompute_flops(const mo_run_config *rc) {
    mo_gpt_config g;
    gpt_config_of(rc, &g);
    return mo_gpt_recompute_flops(&g);
}

static int gpt_tensor_table(const mo_run_config *rc, mo_tensor_info *rows, int max) {
    mo_gpt_config g;
    gpt_config_of(rc, &g);
    return mo_gpt_tensor_table(&g, rows, max);
}

// The run's batch: the same synthetic tokens every step, (B,T) tokens and targets.
static mo_status synthetic_tokens(const mo_gpt_config *g, uint64_t seed, int **tok, int **tgt) {
    size_t BT = (size_t)g->batch * g->seq;
    *tok = malloc(BT * sizeof(int));
    *tgt = malloc(BT * sizeof(int));
    if (!*tok || !*tgt) {
        free(*tok); free(*tgt);
        *tok = *tgt = NULL;
        return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the batch");
    }
    mo_gpt_synthetic_batch(g, seed, *tok, *tgt);
    return MO_OK;
}

// ---------------------------------------------------------------- one device

static mo_status gpt_create(const mo_run_config *rc, mo_ctx *ctx, void **out) {
    mo_gpt_config g;
    gpt_config_of(rc, &g);
    mo_gpt *m = NULL;
    MO_TRY(mo_gpt_create(&m, &g, ctx));
    *out = m;
    return MO_OK;
}

static void gpt_destroy(void *m) { mo_gpt_destroy(m); }

static mo_status gpt_set_synthetic_batch(void *p, uint64_t seed) {
    mo_gpt *m = p;
    int *tok, *tgt;
    MO_TRY(synthetic_tokens(&m->cfg, seed, &tok, &tgt));
    mo_status st = mo_gpt_set_batch(m, tok, tgt);
    free(tok);
    free(tgt);
    return st;
}

static mo_status gpt_step_fn(void *m) { return mo_gpt_step(m); }

static void gpt_info(void *p, mo_model_step_info *out) {
    const mo_gpt *m = p;
    out->loss = m->last_loss;
    out->recompute_ms = m->recompute_ms;
    out->skipped_steps = m->skipped_steps;
    out->loss_scale = m->loss_scale;
    out->loss_scaling = m->cfg.loss_scaling;
}

// ---------------------------------------------------------------- split over ranks

static mo_gpt_split_config split_config_of(const mo_split_config *sc) {
    mo_gpt_split_config g;
    memset(&g, 0, sizeof g);
    g.tp = sc->tp; g.pp = sc->pp;
    g.dp = sc->dp; g.zero = sc->zero;
    g.sp = sc->sp;
    g.comm = (int)sc->comm;
    g.backend = sc->backend;
    g.alloc = sc->alloc;
    g.cap_bytes = sc->cap_bytes;
    return g;
}

static mo_status split_validate(const mo_run_config *rc, const mo_split_config *sc) {
    mo_gpt_config g;
    gpt_config_of(rc, &g);
    mo_gpt_split_config gs = split_config_of(sc);
    return mo_gpt_split_validate(&g, &gs);
}

// A split instance: the ranks and the whole model's configuration (its batch is the global one).
typedef struct gpt_split_inst {
    mo_gpt_split *sp;
    mo_gpt_config g;
} gpt_split_inst;
#define SP(p) (((gpt_split_inst *)(p))->sp)

static mo_status split_create(const mo_run_config *rc, const mo_split_config *sc, void **out) {
    gpt_split_inst *in = calloc(1, sizeof *in);
    if (!in) return MO_FAIL(MO_ERR_OOM, "host memory exhausted");
    gpt_config_of(rc, &in->g);
    mo_gpt_split_config gs = split_config_of(sc);
    mo_status st = mo_gpt_split_create(&in->sp, &in->g, &gs);
    if (st != MO_OK) { free(in); return st; }
    *out = in;
    return MO_OK;
}

static void split_destroy(void *p) {
    if (!p) return;
    mo_gpt_split_destroy(SP(p));
    free(p);
}

static mo_status split_set_synthetic_batch(void *p, uint64_t seed) {
    int *tok, *tgt;
    MO_TRY(synthetic_tokens(&((gpt_split_inst *)p)->g, seed, &tok, &tgt));
    mo_status st = mo_gpt_split_set_batch(SP(p), tok, tgt);
    free(tok);
    free(tgt);
    return st;
}

static mo_status split_step(void *p) { return mo_gpt_split_step(SP(p)); }
static double split_step_ms(void *p) { return mo_gpt_split_step_ms(SP(p)); }

static void split_info(void *p, mo_model_step_info *out) {
    // A split's ranks share one loss-scaler verdict: rank 0's figures are every rank's.
    const mo_gpt *m0 = mo_gpt_split_model(SP(p), 0);
    out->loss = mo_gpt_split_last_loss(SP(p));
    out->recompute_ms = mo_gpt_split_recompute_ms(SP(p));
    out->skipped_steps = m0->skipped_steps;
    out->loss_scale = m0->loss_scale;
    out->loss_scaling = m0->cfg.loss_scaling;
}

static int split_world(void *p) { return mo_gpt_split_world(SP(p)); }
static mo_allocator *split_allocator(void *p, int rank) { return mo_gpt_split_allocator(SP(p), rank); }
static int split_peak_rank(void *p) { return mo_gpt_split_peak_rank(SP(p)); }
static void split_reset_peaks(void *p) { mo_gpt_split_reset_peaks(SP(p)); }

static mo_status split_comm_stats(void *p, mo_split_comm *out) {
    mo_gpt_split_comm c;
    MO_TRY(mo_gpt_split_comm_stats(SP(p), &c));
    out->ops = c.ops; out->bytes = c.bytes; out->bytes_max_rank = c.bytes_max_rank;
    out->ms_max_rank = c.ms_max_rank; out->measured = c.measured;
    return MO_OK;
}

static mo_status split_comm_reset(void *p) { return mo_gpt_split_comm_reset(SP(p)); }

static double split_recompute_flops(const mo_run_config *rc) {
    mo_gpt_config g;
    gpt_config_of(rc, &g);
    return mo_gpt_split_recompute_flops(&g, rc->tp, rc->pp);
}

// The tied wte's gradient, summed between the first and last stage once per step (fp32).
static double split_tie_bytes(const mo_run_config *rc) { return (double)rc->vocab * rc->hidden * 4.0; }

static const mo_model_split_ops gpt_split_ops = {
    .validate = split_validate,
    .create = split_create,
    .destroy = split_destroy,
    .set_synthetic_batch = split_set_synthetic_batch,
    .step = split_step,
    .step_ms = split_step_ms,
    .info = split_info,
    .world = split_world,
    .allocator = split_allocator,
    .peak_rank = split_peak_rank,
    .reset_peaks = split_reset_peaks,
    .comm_stats = split_comm_stats,
    .comm_reset = split_comm_reset,
    .recompute_flops = split_recompute_flops,
    .tp_allreduces_per_block = 4, // proj, fcproj forward; d(ln1), d(ln2) backward
    .stage_tie_bytes = split_tie_bytes,
};

const mo_model_ops mo_gpt_model = {
    .name = "gpt",
    .about = "GPT-2-style decoder (pre-LN blocks, causal attention, 4x GELU MLP, tied embedding)",
    .item = "tokens",
    .dims = MO_DIM_LAYERS | MO_DIM_HIDDEN | MO_DIM_HEADS | MO_DIM_SEQ | MO_DIM_VOCAB | MO_OPT_ATTN,
    .dims_help = "layers, hidden, heads, seq, vocab, batch, attn",
    .presets = gpt_presets,
    .n_presets = (int)(sizeof gpt_presets / sizeof gpt_presets[0]),
    .validate = gpt_validate,
    .check = gpt_check,
    .dims_text = gpt_dims_text,
    .dims_parse = gpt_dims_parse,
    .num_params = gpt_num_params,
    .items_per_sample = gpt_items_per_sample,
    .step_flops = gpt_step_flops,
    .recompute_flops = gpt_recompute_flops,
    .tensor_table = gpt_tensor_table,
    .create = gpt_create,
    .destroy = gpt_destroy,
    .set_synthetic_batch = gpt_set_synthetic_batch,
    .step = gpt_step_fn,
    .info = gpt_info,
    .split = &gpt_split_ops,
};
