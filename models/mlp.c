// An MLP classifier behind the model interface (models/model.h), the second model:
//   x (B,I) fp32 synthetic inputs -> h0 = x Win^T + bin (B,H)
//   L residual blocks: h += W2 gelu(W1 LN(h) + b1) + b2    (W1 (4H,H), W2 (H,4H))
//   logits = h Wout^T + bout (B,K), softmax cross-entropy over K synthetic classes.
// On the GPT's kernels (kernels/ops_mixed*.h, the GEMMs of gpt_ops.h) with the same strategies:
// activation lifetimes from the run's allocator (every activation allocated when produced, freed
// after its last reader, so the allocator's peak is the step's true peak on every backend),
// checkpoint segments (full, every:K, sqrt, segments:N: each segment's input kept, the segment recomputed in
// backward), gradient accumulation, fp32/tf32/fp16/bf16 (16-bit activations and working weights,
// fp32 master weights, gradients and Adam state; fp16 with the dynamic loss scaler), clipping and
// AdamW, all of it the generic schedule's (strategies/schedule.h: this file gives it the input layer,
// the blocks and the head). It has no attention (--attn and selective are refused).
// Split (--tp/--pp, models/mlp_shard.h; the ranks are mlp_split.c's): the same code runs one rank's
// part. Tensor parallelism as Megatron-LM's MLP: W1 by columns (the rank's F = 4H/tp rows of W1 and
// b1), W2 by rows (the same F columns), so fch and fch_gelu are (N,F) on each rank; W2's partial
// outputs are all-reduced before the residual add (b2 added by tp rank 0 only), and W1's partial
// input gradients d(ln) before the LayerNorm backward: one all-reduce of (N,H) forward and one
// backward per block and micro-batch (a recompute repeats the forward one). Pipeline: the stage runs
// its blocks, the input layer on stage 0 and the head on the last; the schedule moves (N,H) x and d
// between stages in the 1F1B order.
#include "models/model.h"
#include "models/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpt_ops.h"
#include "step_ops.h"
#include "kernels/cost.h"
#include "models/mlp.h"
#include "models/ckpt_layout.h"
#include "models/mlp_shard.h"
#include "strategies/ranks.h"
#include "strategies/schedule.h"
static const char *const param_names[MLP_NPARAMS] = {"win", "bin", "lnw", "lnb", "w1", "b1", "w2", "b2", "wout", "bout"};

typedef struct mlp_cfg {
    int L, H, I, K, B, accum; // layers, hidden, input width, classes, global batch, micro-batches
    mo_ckpt_layout seg;       // the checkpoint segments (models/ckpt_layout.h)
    mo_dtype dt;
    int loss_scaling;
    float lr, beta1, beta2, eps, weight_decay, grad_clip;
    uint64_t seed;
} mlp_cfg;

typedef struct mlp {
    mlp_cfg c;
    mlp_shard sh;             // this rank's part (the whole model: tp 1, pp 1, every layer, first and last)
    int sharded;              // made with a shard (world > 1): the norm over parameter groups and the world
    mo_ctx *ctx;
    size_t sizes[MLP_NPARAMS], n;
    float *params;            // (n) fp32 (the master copy when 16-bit)
    void *wparams;            // (n) dt: the weights the ops read (== params for fp32)
    float *grads, *adam_m, *adam_v;
    float *inputs;            // (B,I) fp32 on the device (the first stage's)
    int *targets;             // (B) (the last stage's)
    float *losses;            // (B) (the last stage's)
    int step;
    mo_sched_scaler scaler;   // fp16's dynamic loss scaler (off: scale 1)
    double last_loss, recompute_ms;
} mlp;

// ---------------------------------------------------------------- the configuration

static void cfg_of(const mo_run_config *rc, mlp_cfg *c) {
    memset(c, 0, sizeof *c);
    c->L = rc->layers; c->H = rc->hidden; c->I = rc->input; c->K = rc->classes; c->B = rc->batch;
    c->accum = rc->accum;
    c->seg = mo_ckpt_layout_of(rc->ckpt.kind, rc->ckpt.every, rc->layers);
    c->dt = rc->precision == MO_PREC_FP16 ? MO_F16 : rc->precision == MO_PREC_BF16 ? MO_BF16 : MO_F32;
    c->loss_scaling = rc->precision == MO_PREC_FP16;
    c->lr = (float)rc->lr; c->beta1 = 0.9f; c->beta2 = 0.95f; c->eps = 1e-8f; c->weight_decay = 0.0f; c->grad_clip = 1.0f;
    c->seed = rc->seed;
}

// The whole model's shard: every layer, tp 1, pp 1.
static mlp_shard whole(const mlp_cfg *c) {
    mlp_shard w;
    memset(&w, 0, sizeof w);
    w.tp = w.pp = w.world = 1;
    w.layers = c->L;
    w.first = w.last = 1;
    return w;
}

// The tensor sizes of shard sh: its layers, its F = 4H/tp of each block's width, the input layer on the
// first stage, the head on the last.
static void param_sizes(const mlp_cfg *c, const mlp_shard *sh, size_t s[MLP_NPARAMS]) {
    size_t L = (size_t)sh->layers, H = (size_t)c->H, F = 4 * H / (size_t)sh->tp;
    s[MLP_WIN] = sh->first ? H * (size_t)c->I : 0; s[MLP_BIN] = sh->first ? H : 0;
    s[MLP_LNW] = L * H; s[MLP_LNB] = L * H;
    s[MLP_W1] = L * F * H; s[MLP_B1] = L * F;
    s[MLP_W2] = L * H * F; s[MLP_B2] = L * H;
    s[MLP_WOUT] = sh->last ? (size_t)c->K * H : 0; s[MLP_BOUT] = sh->last ? (size_t)c->K : 0;
}

int mlp_param_is_tp_split(int p) { return p == MLP_W1 || p == MLP_B1 || p == MLP_W2; }

// Element i of shard tensor p -> element of the unsplit tensor p (mlp_shard.h's layout).
static size_t global_index(const mlp_cfg *c, const mlp_shard *sh, int p, size_t i) {
    size_t H = (size_t)c->H, F4 = 4 * H, F = F4 / (size_t)sh->tp, l0 = (size_t)sh->layer0, t0 = (size_t)sh->tp_rank * F;
    switch (p) {
    case MLP_LNW: case MLP_LNB: case MLP_B2: return l0 * H + i;
    case MLP_W1: { size_t l = i / (F * H), r = i % (F * H); return (l0 + l) * F4 * H + (t0 + r / H) * H + r % H; }
    case MLP_B1: return (l0 + i / F) * F4 + t0 + i % F;
    case MLP_W2: { size_t l = i / (H * F), r = i % (H * F); return (l0 + l) * H * F4 + (r / F) * F4 + t0 + r % F; }
    default: return i; // the input layer and the head: whole where held
    }
}

static mo_status mlp_validate(const mo_run_config *r) {
    if (r->layers < 1) return MO_FAIL(MO_ERR_INVALID, "--layers: must be a positive integer (got %d)", r->layers);
    if (r->hidden < 1) return MO_FAIL(MO_ERR_INVALID, "--hidden: must be a positive integer (got %d)", r->hidden);
    if (r->input < 1) return MO_FAIL(MO_ERR_INVALID, "--input: must be a positive integer (got %d)", r->input);
    if (r->classes < 2) return MO_FAIL(MO_ERR_INVALID, "--classes: must be at least 2 (got %d)", r->classes);
    if ((double)4 * r->hidden * r->hidden * r->layers > 4e12)
        return MO_FAIL(MO_ERR_INVALID, "--hidden %d --layers %d: more than 4e12 parameters", r->hidden, r->layers);
    // The split (Megatron's MLP): each tp rank takes 4*hidden/tp of every block's width (hidden itself
    // need not divide), each stage layers/pp blocks.
    if (r->tp > 1 && (4 * r->hidden) % r->tp)
        return MO_FAIL(MO_ERR_INVALID, "--tp %d: the block width 4*hidden = %d is not divisible by it (each tp rank "
                       "takes 4*hidden/tp columns of W1 and rows of W2)", r->tp, 4 * r->hidden);
    if (r->pp > r->layers)
        return MO_FAIL(MO_ERR_INVALID, "--pp %d: more stages than the %d layers (every stage holds layers/pp >= 1 blocks)",
                       r->pp, r->layers);
    if (r->pp > 1 && r->layers % r->pp)
        return MO_FAIL(MO_ERR_INVALID, "--pp %d: the %d layers are not divisible by it (every stage holds layers/pp blocks)",
                       r->pp, r->layers);
    return MO_OK;
}

static const char *mlp_dims_text(const mo_run_config *rc, char *buf, size_t n) {
    snprintf(buf, n, "L%d H%d I%d K%d", rc->layers, rc->hidden, rc->input, rc->classes);
    return buf;
}

static mo_status mlp_dims_parse(const char *t, mo_run_config *rc) {
    int L, H, I, K, used = 0;
    if (sscanf(t, "L%d H%d I%d K%d%n", &L, &H, &I, &K, &used) != 4 || t[used] || L < 1 || H < 1 || I < 1 || K < 2)
        return MO_FAIL(MO_ERR_INVALID, "dims '%s': not the mlp's 'L4 H256 I256 K10'", t);
    rc->layers = L; rc->hidden = H; rc->input = I; rc->classes = K;
    rc->heads = rc->seq = rc->vocab = 0;
    return MO_OK;
}

static size_t mlp_num_params(const mo_run_config *rc) {
    mlp_cfg c;
    cfg_of(rc, &c);
    mlp_shard w = whole(&c);
    size_t s[MLP_NPARAMS], n = 0;
    param_sizes(&c, &w, s);
    for (int p = 0; p < MLP_NPARAMS; p++) n += s[p];
    return n;
}

static double mlp_items(const mo_run_config *rc) { (void)rc; return 1; } // one sample is one item

// 6 FLOPs per GEMM weight per sample (forward 2, backward 4); the input layer has no input gradient (4).
static double mlp_step_flops(const mo_run_config *rc) {
    double H = rc->hidden, B = rc->batch;
    return B * (4.0 * rc->input * H + 6.0 * rc->layers * 8 * H * H + 6.0 * rc->classes * H);
}

// Each segment re-runs its blocks' forward, but for its last block's second GEMM (not needed).
static double mlp_recompute_flops(const mo_run_config *rc) {
    mo_ckpt_layout y = mo_ckpt_layout_of(rc->ckpt.kind, rc->ckpt.every, rc->layers);
    double H = rc->hidden;
    return (double)rc->batch * 8 * H * H * (2.0 * y.blocks - mo_ckpt_layout_segments(y)); // checkpointed blocks only
}

static int mlp_tensor_table(const mo_run_config *rc, mo_tensor_info *rows, int max) {
    mlp_cfg c;
    cfg_of(rc, &c);
    mlp_shard w = whole(&c);
    size_t s[MLP_NPARAMS];
    param_sizes(&c, &w, s);
    int n = 0;
    for (int p = 0; p < MLP_NPARAMS; p++) {
        if (n < max) {
            mo_tensor_info *t = &rows[n];
            memset(t, 0, sizeof *t);
            t->name = param_names[p];
            t->ndim = 1;
            t->shape[0] = (int64_t)s[p];
            t->dtype = c.dt;
            t->cat = MO_CAT_PARAM;
            t->numel = s[p];
        }
        n++;
    }
    return n;
}

// ---------------------------------------------------------------- parameters

static float normal(uint64_t *s) { return (float)(sqrt(-2 * log(uniform01(s))) * cos(6.283185307179586 * uniform01(s))); }

// GPT-2's initialization: weights normal(0, 0.02), the residual projection W2 scaled by 1/sqrt(2L),
// LayerNorm weights 1, biases 0. The weights draw one normal each from one stream, in the unsplit
// order (Win, W1, W2, Wout); a normal takes two splitmix steps, and a splitmix state after k steps is
// the seed's plus k times its increment, so a shard computes each of its elements' draw directly: the
// same bits as the unsplit model's.
static void init_params(const mlp_cfg *c, const mlp_shard *sh, const size_t s[MLP_NPARAMS], float *h) {
    const uint64_t r0 = c->seed * 0x2545f4914f6cdd1dull + 11;
    mlp_shard w = whole(c);
    size_t full[MLP_NPARAMS], draw0 = 0;
    param_sizes(c, &w, full);
    for (int p = 0; p < MLP_NPARAMS; p++) {
        int drawn = p == MLP_WIN || p == MLP_W1 || p == MLP_W2 || p == MLP_WOUT;
        float sd = p == MLP_W2 ? 0.02f / sqrtf(2.0f * c->L) : 0.02f;
        for (size_t i = 0; i < s[p]; i++) {
            if (p == MLP_LNW) h[i] = 1.0f;
            else if (drawn) {
                uint64_t r = r0 + 2 * (uint64_t)(draw0 + global_index(c, sh, p, i)) * 0x9e3779b97f4a7c15ull;
                h[i] = sd * normal(&r);
            } else h[i] = 0.0f;
        }
        if (drawn) draw0 += full[p];
        h += s[p];
    }
}

static void mlp_destroy(void *p) {
    mlp *m = p;
    if (!m) return;
    mo_allocator *a = m->ctx->alloc;
    mo_free(a, m->losses); mo_free(a, m->targets); mo_free(a, m->inputs);
    mo_free(a, m->adam_v); mo_free(a, m->adam_m); mo_free(a, m->grads);
    if (m->wparams != m->params) mo_free(a, m->wparams);
    mo_free(a, m->params);
    free(m);
}

mo_status mlp_create_shard(const mo_run_config *rc, mo_ctx *ctx, const mlp_shard *sh, void **out) {
    MO_TRY(mlp_validate(rc));
    mlp *m = calloc(1, sizeof *m);
    if (!m) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the model");
    cfg_of(rc, &m->c);
    m->sh = sh ? *sh : whole(&m->c);
    m->sharded = sh != NULL;
    m->c.seg = mo_ckpt_layout_of(rc->ckpt.kind, rc->ckpt.every, m->sh.layers); // over the stage's blocks
    m->ctx = ctx;
    param_sizes(&m->c, &m->sh, m->sizes);
    for (int p = 0; p < MLP_NPARAMS; p++) m->n += m->sizes[p];
    const mlp_cfg *c = &m->c;
    size_t pb = m->n * sizeof(float);
    mo_allocator *a = ctx->alloc;
    int mixed = c->dt != MO_F32;
    mo_status st;
    MO_TRY_GOTO(st, mo_alloc(a, pb, mixed ? MO_CAT_MASTER : MO_CAT_PARAM, (void **)&m->params), fail);
    if (mixed) MO_TRY_GOTO(st, mo_alloc(a, m->n * mo_dtype_size(c->dt), MO_CAT_PARAM, &m->wparams), fail);
    else m->wparams = m->params;
    MO_TRY_GOTO(st, mo_alloc(a, pb, MO_CAT_GRAD, (void **)&m->grads), fail);
    MO_TRY_GOTO(st, mo_alloc(a, pb, MO_CAT_OPTIM, (void **)&m->adam_m), fail);
    MO_TRY_GOTO(st, mo_alloc(a, pb, MO_CAT_OPTIM, (void **)&m->adam_v), fail);
    if (m->sh.first)
        MO_TRY_GOTO(st, mo_alloc(a, (size_t)c->B * c->I * sizeof(float), MO_CAT_ACTIVATION, (void **)&m->inputs), fail);
    if (m->sh.last) {
        MO_TRY_GOTO(st, mo_alloc(a, (size_t)c->B * sizeof(int), MO_CAT_ACTIVATION, (void **)&m->targets), fail);
        MO_TRY_GOTO(st, mo_alloc(a, (size_t)c->B * sizeof(float), MO_CAT_ACTIVATION, (void **)&m->losses), fail);
    }
    if (ctx->backend != MO_BACKEND_DRY) {
        float *h = malloc(pb ? pb : 1);
        if (!h) { st = MO_FAIL(MO_ERR_OOM, "host memory exhausted for the initial parameters"); goto fail; }
        init_params(c, &m->sh, m->sizes, h);
        st = mo_memcpy_h2d(ctx, m->params, h, pb);
        free(h);
        if (st != MO_OK) goto fail;
    }
    if (mixed) MO_TRY_GOTO(st, mo_cast_mixed(ctx, c->dt, m->wparams, MO_F32, m->params, m->n), fail);
    MO_TRY_GOTO(st, mo_memset_zero(ctx, m->adam_m, pb), fail);
    MO_TRY_GOTO(st, mo_memset_zero(ctx, m->adam_v, pb), fail);
    MO_TRY_GOTO(st, mo_memset_zero(ctx, m->grads, pb), fail);
    mo_sched_scaler_init(&m->scaler, c->loss_scaling, 2000);
    *out = m;
    return MO_OK;
fail:
    mlp_destroy(m);
    return st;
}

static mo_status mlp_create(const mo_run_config *rc, mo_ctx *ctx, void **out) { return mlp_create_shard(rc, ctx, NULL, out); }

void mlp_tensor_sizes(const void *p, const mo_run_config *rc, size_t s[MLP_NPARAMS]) {
    const mlp *m = p;
    if (m) { memcpy(s, m->sizes, sizeof m->sizes); return; }
    mlp_cfg c;
    cfg_of(rc, &c);
    mlp_shard w = whole(&c);
    param_sizes(&c, &w, s);
}

size_t mlp_shard_global_index(const void *p, int q, size_t i) { const mlp *m = p; return global_index(&m->c, &m->sh, q, i); }
double mlp_last_loss(const void *p) { return ((const mlp *)p)->last_loss; }
double mlp_recompute_ms(const void *p) { return ((const mlp *)p)->recompute_ms; }

// Inputs uniform in [-1, 1), classes uniform: the same seed gives the same batch everywhere.
static mo_status mlp_set_synthetic_batch(void *p, uint64_t seed) {
    mlp *m = p;
    size_t BI = (size_t)m->c.B * m->c.I;
    float *x = malloc(BI * sizeof(float));
    int *y = malloc((size_t)m->c.B * sizeof(int));
    mo_status st = MO_OK;
    if (!x || !y) st = MO_FAIL(MO_ERR_OOM, "host memory exhausted for the batch");
    if (st == MO_OK) {
        uint64_t s = seed * 0x9e3779b97f4a7c15ull + 3;
        for (size_t i = 0; i < BI; i++) x[i] = (float)(2 * uniform01(&s) - 1);
        for (int b = 0; b < m->c.B; b++) y[b] = (int)(splitmix(&s) % (uint64_t)m->c.K);
        // The inputs where the input layer is (the first stage), the targets where the head is.
        if (m->inputs) st = mo_memcpy_h2d(m->ctx, m->inputs, x, BI * sizeof(float));
        if (st == MO_OK && m->targets) st = mo_memcpy_h2d(m->ctx, m->targets, y, (size_t)m->c.B * sizeof(int));
    }
    free(x);
    free(y);
    return st;
}

// ---------------------------------------------------------------- the step
// Driven by the generic schedule (strategies/schedule.h): the input layer, the blocks and the head as
// its callbacks; the schedule owns the stream between them (each block's in and out) and its gradient.

// The tensors one block produces (the schedule's block state). in is not owned: it is the schedule's
// x[l]; out is handed to the schedule as x[l+1] once made.
typedef struct block_acts {
    const void *in;           // (N,H) dt
    void *ln;                 // (N,H) dt
    float *mean, *rstd;       // (N) fp32
    void *fch, *fch_gelu;     // (N,F) dt, F = 4H/tp (4H unsplit)
    void *out;                // (N,H) dt in + W2 gelu(...) + b2, until handed over
    void *d4, *dH;            // backward scratch (N,F), (N,H) dt
} block_acts;

// One micro-batch's own tensors (the schedule's slot state).
typedef struct step_state {
    int micro;                // which micro-batch
    void *xin;                // (N,I) dt the inputs cast to dt (16-bit), NULL for fp32 (read in place)
    void *h0;                 // (N,H) dt, until handed over as x[0]
    void *logits;             // (N,K) dt; dlogits in backward
    void *dresid;             // (N,H) dt the residual stream's gradient, until handed over
} step_state;

// OP (an op, timed and named in the allocation trace), act_alloc, stat_alloc and act_free are
// models/step_ops.h's, as in the GPT's step, on DT: the activation dtype.
#define DT (m->c.dt)

static int rows_of(const mlp *m) { return m->c.B / m->c.accum; }
static int width_of(const mlp *m) { return 4 * m->c.H / m->sh.tp; } // F: this rank's share of 4H

// The tp ranks' partial sums (N,H) summed on every rank (strategies/ranks.h; nothing unsplit).
static mo_status tp_allreduce(mlp *m, void *buf, size_t n) {
    return m->sh.tp > 1 ? mo_ranks_allreduce(m->sh.tp_comm, m->ctx, DT, buf, n) : MO_OK;
}

// Parameter tensor p's slice of layer l (elem elements a layer): working copy, and gradient.
static const void *W(mlp *m, int p, int l, size_t elem) {
    size_t o = 0;
    for (int q = 0; q < p; q++) o += m->sizes[q];
    return (const char *)m->wparams + (o + (size_t)l * elem) * mo_dtype_size(DT);
}
static float *G(mlp *m, int p, int l, size_t elem) {
    size_t o = 0;
    for (int q = 0; q < p; q++) o += m->sizes[q];
    return m->grads + o + (size_t)l * elem;
}

static void block_free_internals(mlp *m, block_acts *a) {
    act_free(m, &a->ln); act_free(m, &a->mean); act_free(m, &a->rstd);
    act_free(m, &a->fch); act_free(m, &a->fch_gelu);
    act_free(m, &a->d4); act_free(m, &a->dH);
}

static const void *inputs_of(mlp *m, step_state *s) {
    return s->xin ? s->xin : (const void *)(m->inputs + (size_t)s->micro * rows_of(m) * m->c.I);
}

// The input layer: h0 = x Win^T + bin.
static mo_status input_fwd(void *mp, void *sp, int micro, void **x0) {
    mlp *m = mp;
    step_state *s = sp;
    mo_ctx *x = m->ctx;
    int N = rows_of(m), H = m->c.H, I = m->c.I;
    s->micro = micro;
    if (DT != MO_F32) {
        MO_TRY(act_alloc(m, (size_t)N * I, &s->xin));
        OP(MO_PROF_ELEMENTWISE, mo_cast_mixed(x, DT, s->xin, MO_F32, m->inputs + (size_t)micro * N * I, (size_t)N * I));
    }
    MO_TRY(act_alloc(m, (size_t)N * H, &s->h0));
    OP(MO_PROF_GEMM, gpt_matmul_fwd(x, DT, s->h0, NULL, inputs_of(m, s), W(m, MLP_WIN, 0, 0), W(m, MLP_BIN, 0, 0), N, I, H));
    *x0 = s->h0;
    s->h0 = NULL; // the schedule's from here on
    return MO_OK;
}

// Block l (of this stage): out = in + W2 gelu(W1 LN(in) + b1) + b2. RECOMPUTE_NO_OUT (the last block of
// a recomputed segment) skips the second GEMM: backward needs fch_gelu, not out. DROP frees the
// internals after. tp: W1's F rows make fch (N,F); W2's F columns a partial (N,H), all-reduced, b2 added
// by tp rank 0 alone.
static mo_status block_fwd(void *mp, void *sp, void *bp, int l, int micro, const void *in, void **out, mo_sched_fwd mode) {
    mlp *m = mp;
    block_acts *a = bp;
    (void)sp; (void)micro;
    mo_ctx *x = m->ctx;
    int N = rows_of(m), H = m->c.H, F = width_of(m);
    size_t NH = (size_t)N * H, NF = (size_t)N * F, FH = (size_t)F * H;
    a->in = in;
    MO_TRY(act_alloc(m, NH, &a->ln));
    MO_TRY(stat_alloc(m, (size_t)N, &a->mean));
    MO_TRY(stat_alloc(m, (size_t)N, &a->rstd));
    OP(MO_PROF_NORM, mo_layernorm_forward_mixed(x, DT, a->ln, a->mean, a->rstd, a->in, W(m, MLP_LNW, l, H),
                                                W(m, MLP_LNB, l, H), N, H));
    MO_TRY(act_alloc(m, NF, &a->fch));
    MO_TRY(act_alloc(m, NF, &a->fch_gelu));
    OP(MO_PROF_GEMM, gpt_matmul_fwd(x, DT, a->fch, a->fch_gelu, a->ln, W(m, MLP_W1, l, FH), W(m, MLP_B1, l, F), N,
                                    H, F));
    if (mode == MO_SCHED_FWD_RECOMPUTE_NO_OUT) return MO_OK;
    MO_TRY(act_alloc(m, NH, &a->out));
    OP(MO_PROF_GEMM, gpt_matmul_fwd(x, DT, a->out, NULL, a->fch_gelu, W(m, MLP_W2, l, FH),
                                    m->sh.tp_rank == 0 ? W(m, MLP_B2, l, H) : NULL, N, F, H));
    MO_TRY(tp_allreduce(m, a->out, NH));
    OP(MO_PROF_ELEMENTWISE, mo_residual_forward_mixed(x, DT, a->out, a->out, a->in, NH));
    *out = a->out;
    a->out = NULL;
    if (mode == MO_SCHED_FWD_DROP) block_free_internals(m, a);
    return MO_OK;
}

// The head: logits = h Wout^T + bout, the softmax cross-entropy (its gradient into logits).
static mo_status head_fwd(void *mp, void *sp, int micro, const void *h) {
    mlp *m = mp;
    step_state *s = sp;
    mo_ctx *x = m->ctx;
    int N = rows_of(m), H = m->c.H, K = m->c.K;
    size_t off = (size_t)micro * N;
    MO_TRY(act_alloc(m, (size_t)N * K, &s->logits));
    OP(MO_PROF_GEMM, gpt_matmul_fwd(x, DT, s->logits, NULL, h, W(m, MLP_WOUT, 0, 0), W(m, MLP_BOUT, 0, 0), N, H, K));
    // The mean over the global batch, times the loss scale (1 unless fp16's scaler is on).
    float dloss = m->scaler.scale / (float)m->c.B;
    OP(MO_PROF_LOSS, mo_crossentropy_fused_mixed(x, DT, m->losses + off, s->logits, m->targets + off, N, 1, K, dloss));
    return MO_OK;
}

static mo_status head_bwd(void *mp, void *sp, int micro, const void *h, void **d) {
    mlp *m = mp;
    step_state *s = sp;
    (void)micro;
    mo_ctx *x = m->ctx;
    int N = rows_of(m), H = m->c.H, K = m->c.K;
    MO_TRY(act_alloc(m, (size_t)N * H, &s->dresid));
    OP(MO_PROF_GEMM, gpt_matmul_bwd(x, DT, s->dresid, G(m, MLP_WOUT, 0, 0), G(m, MLP_BOUT, 0, 0), s->logits, h,
                                    W(m, MLP_WOUT, 0, 0), N, H, K));
    act_free(m, &s->logits);
    *d = s->dresid;
    s->dresid = NULL; // the schedule's from here on
    return MO_OK;
}

// dresid (N,H) holds d(out) on entry and d(in) on return (the residual passes it through; the
// LayerNorm backward adds its part). tp: dresid is the same on every tp rank (the stream is
// replicated), so b2 and the LayerNorm get the same gradients everywhere; W1's input gradient d(ln) is
// a partial sum over the rank's F rows, all-reduced before the LayerNorm backward.
static mo_status block_bwd(void *mp, void *sp, void *bp, int l, int micro, const void *in, void *dresid) {
    mlp *m = mp;
    block_acts *a = bp;
    (void)sp; (void)micro;
    mo_ctx *x = m->ctx;
    int N = rows_of(m), H = m->c.H, F = width_of(m);
    size_t NH = (size_t)N * H, NF = (size_t)N * F, FH = (size_t)F * H;
    a->in = in;
    MO_TRY(act_alloc(m, NF, &a->d4));
    OP(MO_PROF_GEMM, gpt_matmul_bwd(x, DT, a->d4, G(m, MLP_W2, l, FH), G(m, MLP_B2, l, H), dresid, a->fch_gelu,
                                    W(m, MLP_W2, l, FH), N, F, H));
    act_free(m, &a->fch_gelu);
    OP(MO_PROF_ELEMENTWISE, mo_gelu_backward_mixed(x, DT, a->d4, a->fch, a->d4, NF));
    act_free(m, &a->fch);
    MO_TRY(act_alloc(m, NH, &a->dH));
    OP(MO_PROF_GEMM, gpt_matmul_bwd(x, DT, a->dH, G(m, MLP_W1, l, FH), G(m, MLP_B1, l, F), a->d4, a->ln,
                                    W(m, MLP_W1, l, FH), N, H, F));
    MO_TRY(tp_allreduce(m, a->dH, NH));
    act_free(m, &a->d4);
    act_free(m, &a->ln);
    OP(MO_PROF_NORM, mo_layernorm_backward_mixed(x, DT, dresid, G(m, MLP_LNW, l, H), G(m, MLP_LNB, l, H), a->dH, a->in,
                                                 W(m, MLP_LNW, l, H), a->mean, a->rstd, N, H));
    act_free(m, &a->dH); act_free(m, &a->mean); act_free(m, &a->rstd);
    a->in = NULL;
    return MO_OK;
}

// The input layer: its weight gradient only (the inputs need none).
static mo_status input_bwd(void *mp, void *sp, int micro, const void *dresid) {
    mlp *m = mp;
    step_state *s = sp;
    (void)micro;
    mo_ctx *x = m->ctx;
    int N = rows_of(m), H = m->c.H, I = m->c.I;
    OP(MO_PROF_GEMM, gpt_matmul_bwd(x, DT, NULL, G(m, MLP_WIN, 0, 0), G(m, MLP_BIN, 0, 0), dresid, inputs_of(m, s),
                                    W(m, MLP_WIN, 0, 0), N, I, H));
    act_free(m, &s->xin);
    return MO_OK;
}

static void block_unwind(void *mp, void *bp) {
    mlp *m = mp;
    block_acts *a = bp;
    block_free_internals(m, a);
    act_free(m, &a->out);
    a->in = NULL;
}

static void slot_unwind(void *mp, void *sp) {
    mlp *m = mp;
    step_state *s = sp;
    act_free(m, &s->xin); act_free(m, &s->h0); act_free(m, &s->logits); act_free(m, &s->dresid);
}

static const mo_sched_model mlp_sched = {
    .slot_bytes = sizeof(step_state),
    .block_bytes = sizeof(block_acts),
    .input_fwd = input_fwd,
    .block_fwd = block_fwd,
    .head_fwd = head_fwd,
    .head_bwd = head_bwd,
    .block_bwd = block_bwd,
    .input_bwd = input_bwd,
    .block_unwind = block_unwind,
    .slot_unwind = slot_unwind,
};

static mo_status forward_backward(mlp *m) {
    mo_ctx *x = m->ctx;
    const mlp_shard *sh = &m->sh;
    mo_sched_config sc = {
        .ctx = x, .blocks = sh->layers, .accum = m->c.accum, .seg = m->c.seg,
        .grads = m->grads, .n_grads = m->n, .pp = sh->pp, .stage = sh->stage, .pp_comm = sh->pp_comm,
        .stream_elems = (size_t)rows_of(m) * m->c.H, .dt = m->c.dt,
    };
    MO_TRY(mo_sched_forward_backward(&sc, &mlp_sched, m, &m->recompute_ms));
    // No loss on dry, nor before the last stage.
    if (x->backend == MO_BACKEND_DRY || !m->losses) { m->last_loss = NAN; return MO_OK; }
    float *h = malloc((size_t)m->c.B * sizeof(float));
    if (!h) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the losses");
    mo_status st = mo_memcpy_d2h(x, h, m->losses, (size_t)m->c.B * sizeof(float));
    double sum = 0;
    for (int i = 0; i < m->c.B; i++) sum += h[i];
    free(h);
    m->last_loss = sum / m->c.B;
    return st;
}

// Loss scaler (fp16), clipping at norm 1, AdamW: the schedule's update over the one flat buffer. A
// shard counts its tensors as parameter groups for the global norm (the tp-split ones on every rank,
// the replicated ones on tp rank 0), gathered over the world with the scaler's verdict.
static mo_status update(mlp *m) {
    const mlp_cfg *c = &m->c;
    const mlp_shard *sh = &m->sh;
    mo_sched_group groups[MLP_NPARAMS];
    size_t o0 = 0;
    for (int p = 0; p < MLP_NPARAMS; p++) {
        groups[p].grad = m->grads + o0;
        groups[p].n = m->sizes[p];
        groups[p].counted = mlp_param_is_tp_split(p) || sh->tp_rank == 0;
        o0 += m->sizes[p];
    }
    mo_sched_optim o = {
        .ctx = m->ctx, .dt = c->dt, .params = m->params, .grads = m->grads, .adam_m = m->adam_m, .adam_v = m->adam_v,
        .wparams = m->wparams, .n = m->n, .lr = c->lr, .beta1 = c->beta1, .beta2 = c->beta2, .eps = c->eps,
        .weight_decay = c->weight_decay, .grad_clip = c->grad_clip,
        .groups = m->sharded ? groups : NULL, .n_groups = m->sharded ? MLP_NPARAMS : 0,
        .world = m->sharded ? sh->world_comm : NULL, .world_size = sh->world, .rank = sh->rank,
    };
    return mo_sched_update(&o, &m->scaler, &m->step, NULL);
}

static mo_status mlp_step(void *p) {
    mlp *m = p;
    MO_TRY(forward_backward(m));
    return update(m);
}

static void mlp_info(void *p, mo_model_step_info *out) {
    const mlp *m = p;
    out->loss = m->last_loss;
    out->recompute_ms = m->recompute_ms;
    out->skipped_steps = m->scaler.skipped;
    out->loss_scale = m->scaler.scale;
    out->loss_scaling = m->c.loss_scaling;
}

// Test access: the fp32 parameters and gradients (host copies of n floats), models/mlp.h.
mo_status mo_mlp_read(void *p, float *params, float *grads, size_t *n) {
    mlp *m = p;
    *n = m->n;
    if (params) MO_TRY(mo_memcpy_d2h(m->ctx, params, m->params, m->n * sizeof(float)));
    if (grads) MO_TRY(mo_memcpy_d2h(m->ctx, grads, m->grads, m->n * sizeof(float)));
    return MO_OK;
}
mo_status mo_mlp_forward_backward(void *p) { return forward_backward(p); }

// Presets: one where the activations dominate (a large batch of narrow rows), one where the
// parameters and their optimizer state do (a wide model, a small batch), and a small one.
static const mo_preset mlp_presets[] = {
    {.name = "mlp-small", .layers = 4, .hidden = 256, .batch = 64, .input = 256, .classes = 10},
    {.name = "mlp-act", .layers = 16, .hidden = 1024, .batch = 16384, .input = 1024, .classes = 1000},
    {.name = "mlp-param", .layers = 8, .hidden = 4096, .batch = 64, .input = 1024, .classes = 1000},
};

const mo_model_ops mo_mlp_model = {
    .name = "mlp",
    .about = "MLP classifier: residual LayerNorm -> Linear(H,4H) -> GELU -> Linear(4H,H) blocks, softmax head",
    .item = "samples",
    .dims = MO_DIM_LAYERS | MO_DIM_HIDDEN | MO_DIM_INPUT | MO_DIM_CLASSES,
    .dims_help = "layers, hidden, input, classes, batch",
    .presets = mlp_presets,
    .n_presets = (int)(sizeof mlp_presets / sizeof mlp_presets[0]),
    .validate = mlp_validate,
    .check = mlp_validate,
    .dims_text = mlp_dims_text,
    .dims_parse = mlp_dims_parse,
    .num_params = mlp_num_params,
    .items_per_sample = mlp_items,
    .step_flops = mlp_step_flops,
    .recompute_flops = mlp_recompute_flops,
    .tensor_table = mlp_tensor_table,
    .create = mlp_create,
    .destroy = mlp_destroy,
    .set_synthetic_batch = mlp_set_synthetic_batch,
    .step = mlp_step,
    .info = mlp_info,
    .split = &mo_mlp_split_ops, // models/mlp_split.c
};
