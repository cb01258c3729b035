// The GPT's tensor table, parameter layout, initialization and batch handling.
#include "gpt.h"
#include "models/rng.h"
#include "gpt_shard.h"
#include "gpt_zero.h"
#include "models/ckpt_layout.h"
#include "kernels/ops_mixed.h"
#include "kernels/ops_mixed_impl.h"
#include "strategies/offload_update.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

mo_status mo_gpt_validate(const mo_gpt_config *c) {
    if (c->layers < 1) return MO_FAIL(MO_ERR_INVALID, "--layers: must be a positive integer (got %d)", c->layers);
    if (c->hidden < 1) return MO_FAIL(MO_ERR_INVALID, "--hidden: must be a positive integer (got %d)", c->hidden);
    if (c->heads < 1) return MO_FAIL(MO_ERR_INVALID, "--heads: must be a positive integer (got %d)", c->heads);
    if (c->seq < 1) return MO_FAIL(MO_ERR_INVALID, "--seq: must be a positive integer (got %d)", c->seq);
    if (c->batch < 1) return MO_FAIL(MO_ERR_INVALID, "--batch: must be a positive integer (got %d)", c->batch);
    if (c->vocab < 2) return MO_FAIL(MO_ERR_INVALID, "--vocab: must be at least 2 (got %d)", c->vocab);
    if (c->hidden % c->heads)
        return MO_FAIL(MO_ERR_INVALID, "--heads %d: hidden %d is not divisible by it", c->heads, c->hidden);
    if (c->accum < 1 || c->batch % c->accum)
        return MO_FAIL(MO_ERR_INVALID, "--accum %d: batch %d is not divisible by it", c->accum, c->batch);
    // The ops take a micro-batch's rows (batch/accum x seq) as an int.
    if ((long long)(c->batch / c->accum) * c->seq > 2147483647LL)
        return MO_FAIL(MO_ERR_INVALID,
                       "--batch %d --seq %d: a micro-batch of %lld tokens overflows the ops' 32-bit row count (at most "
                       "2147483647; raise --accum or lower --batch or --seq)",
                       c->batch / c->accum, c->seq, (long long)(c->batch / c->accum) * c->seq);
    if (c->ckpt == MO_CKPT_EVERY && (c->ckpt_every < 1 || c->ckpt_every > c->layers))
        return MO_FAIL(MO_ERR_INVALID, "--ckpt every:%d: K must be in 1..%d (the layer count)", c->ckpt_every, c->layers);
    if (c->ckpt == MO_CKPT_SEGMENTS && (c->ckpt_every < 1 || c->ckpt_every > c->layers))
        return MO_FAIL(MO_ERR_INVALID, "--ckpt segments:%d: N must be in 1..%d (the layer count)", c->ckpt_every, c->layers);
    if (c->dtype != MO_F32 && c->dtype != MO_F16 && c->dtype != MO_BF16)
        return MO_FAIL(MO_ERR_INVALID, "--precision: activation dtype %d is not fp32, fp16 or bf16", (int)c->dtype);
    if (c->dtype != MO_F32 && c->tf32)
        return MO_FAIL(MO_ERR_INVALID, "--precision: tf32 applies to fp32 only, not %s", mo_dtype_name(c->dtype));
    if (c->loss_scaling && c->loss_scale_init < 0)
        return MO_FAIL(MO_ERR_INVALID, "loss scale: initial scale %g is not positive", (double)c->loss_scale_init);
    if (c->attn_fused && c->dtype != MO_F32 && (c->hidden / c->heads) % 8)
        return MO_FAIL(MO_ERR_INVALID, "--attn fused: the 16-bit kernel needs a head size that is a multiple of 8 (got %d)",
                       c->hidden / c->heads);
    if (c->hidden / c->heads > 128 && c->attn_fused)
        return MO_FAIL(MO_ERR_INVALID, "--attn fused: head size %d is above the kernel's 128", c->hidden / c->heads);
    return MO_OK;
}

void gpt_param_sizes(const mo_gpt_config *c, const mo_gpt_shard *sh, size_t s[GPT_NPARAMS]) {
    size_t L = (size_t)c->layers, C = (size_t)c->hidden, V = (size_t)c->vocab, T = (size_t)c->seq;
    // A shard: the stage's layers, the tp split of qkv, fc (rows) and proj, fcproj (columns), the
    // embeddings on the first stage and lnf on the last (the tied wte on both).
    size_t tp = sh ? (size_t)sh->tp : 1;
    int first = sh ? sh->first : 1, last = sh ? sh->last : 1;
    if (sh) L = (size_t)sh->layers;
    s[GPT_WTE] = first || last ? V * C : 0;
    s[GPT_WPE] = first ? T * C : 0;
    s[GPT_LN1W] = L * C;
    s[GPT_LN1B] = L * C;
    s[GPT_QKVW] = L * 3 * C * C / tp;
    s[GPT_QKVB] = L * 3 * C / tp;
    s[GPT_PROJW] = L * C * C / tp;
    s[GPT_PROJB] = L * C;
    s[GPT_LN2W] = L * C;
    s[GPT_LN2B] = L * C;
    s[GPT_FCW] = L * 4 * C * C / tp;
    s[GPT_FCB] = L * 4 * C / tp;
    s[GPT_FCPROJW] = L * C * 4 * C / tp;
    s[GPT_FCPROJB] = L * C;
    s[GPT_LNFW] = last ? C : 0;
    s[GPT_LNFB] = last ? C : 0;
}

static void param_sizes(const mo_gpt_config *c, size_t s[GPT_NPARAMS]) { gpt_param_sizes(c, NULL, s); }

int gpt_param_is_tp_split(int p) {
    return p == GPT_QKVW || p == GPT_QKVB || p == GPT_PROJW || p == GPT_FCW || p == GPT_FCB || p == GPT_FCPROJW;
}

size_t gpt_shard_global_index(const mo_gpt_config *c, const mo_gpt_shard *sh, int p, size_t i) {
    if (!sh || p == GPT_WTE || p == GPT_WPE || p == GPT_LNFW || p == GPT_LNFB) return i;
    size_t C = (size_t)c->hidden, tp = (size_t)sh->tp, r = (size_t)sh->tp_rank;
    size_t Cl = C / tp, Fl = 4 * C / tp; // the rank's attention width (its heads) and MLP width
    size_t full[GPT_NPARAMS], local[GPT_NPARAMS];
    gpt_param_sizes(c, NULL, full);
    gpt_param_sizes(c, sh, local);
    size_t per_l = local[p] / (size_t)sh->layers, per_g = full[p] / (size_t)c->layers;
    size_t l = i / per_l, k = i % per_l, g; // layer, and the index inside the layer
    switch (p) {
    case GPT_QKVW: { // (3C/tp, C): for each of q, k, v the rows of this rank's heads
        size_t row = k / C, col = k % C, part = row / Cl, w = row % Cl;
        g = (part * C + r * Cl + w) * C + col;
        break;
    }
    case GPT_QKVB: g = (k / Cl) * C + r * Cl + k % Cl; break;
    case GPT_PROJW: g = (k / Cl) * C + r * Cl + k % Cl; break;           // (C, C/tp): columns
    case GPT_FCW: g = (r * Fl + k / C) * C + k % C; break;               // (4C/tp, C): rows
    case GPT_FCB: g = r * Fl + k; break;
    case GPT_FCPROJW: g = (k / Fl) * 4 * C + r * Fl + k % Fl; break;     // (C, 4C/tp): columns
    default: g = k; break;                                               // replicated (C) per layer
    }
    return ((size_t)sh->layer0 + l) * per_g + g;
}

size_t mo_gpt_num_params(const mo_gpt_config *c) {
    size_t s[GPT_NPARAMS], n = 0;
    param_sizes(c, s);
    for (int i = 0; i < GPT_NPARAMS; i++) n += s[i];
    return n;
}

static const char *param_names[GPT_NPARAMS] = {
    "wte", "wpe", "ln1.weight", "ln1.bias", "qkv.weight", "qkv.bias", "proj.weight", "proj.bias",
    "ln2.weight", "ln2.bias", "fc.weight", "fc.bias", "fcproj.weight", "fcproj.bias", "lnf.weight", "lnf.bias"};

static void row(mo_tensor_info *r, const char *name, mo_dtype t, mo_category cat, int ndim, int64_t a, int64_t b,
                int64_t c, int64_t d) {
    r->name = name;
    r->ndim = ndim;
    r->shape[0] = a; r->shape[1] = b; r->shape[2] = c; r->shape[3] = d;
    r->dtype = t;
    r->cat = cat;
    r->numel = (size_t)a * (ndim > 1 ? (size_t)b : 1) * (ndim > 2 ? (size_t)c : 1) * (ndim > 3 ? (size_t)d : 1);
}

int mo_gpt_tensor_table(const mo_gpt_config *c, mo_tensor_info *rows, int max) {
    int64_t L = c->layers, C = c->hidden, V = c->vocab, T = c->seq, NH = c->heads, B = c->batch / c->accum;
    mo_tensor_info all[64];
    int n = 0;
    // Whole buffers, as allocated: one each for params, grads and the two Adam moments; 16-bit runs
    // keep the fp32 parameters as the master copy and give the ops a 16-bit working copy.
    mo_dtype dt = c->dtype, F = MO_F32;
    int mixed = dt != MO_F32;
    size_t np = mo_gpt_num_params(c);
    if (mixed) {
        row(&all[n++], "master", F, MO_CAT_MASTER, 1, (int64_t)np, 0, 0, 0);
        row(&all[n++], "params", dt, MO_CAT_PARAM, 1, (int64_t)np, 0, 0, 0);
    } else {
        row(&all[n++], "params", F, MO_CAT_PARAM, 1, (int64_t)np, 0, 0, 0);
    }
    row(&all[n++], "grads", F, MO_CAT_GRAD, 1, (int64_t)np, 0, 0, 0);
    row(&all[n++], "adam.m", F, MO_CAT_OPTIM, 1, (int64_t)np, 0, 0, 0);
    row(&all[n++], "adam.v", F, MO_CAT_OPTIM, 1, (int64_t)np, 0, 0, 0);
    // The parameter views inside "params" (the working copy the ops read).
    row(&all[n++], param_names[GPT_WTE], dt, MO_CAT_PARAM, 2, V, C, 0, 0);
    row(&all[n++], param_names[GPT_WPE], dt, MO_CAT_PARAM, 2, T, C, 0, 0);
    row(&all[n++], param_names[GPT_LN1W], dt, MO_CAT_PARAM, 2, L, C, 0, 0);
    row(&all[n++], param_names[GPT_LN1B], dt, MO_CAT_PARAM, 2, L, C, 0, 0);
    row(&all[n++], param_names[GPT_QKVW], dt, MO_CAT_PARAM, 3, L, 3 * C, C, 0);
    row(&all[n++], param_names[GPT_QKVB], dt, MO_CAT_PARAM, 2, L, 3 * C, 0, 0);
    row(&all[n++], param_names[GPT_PROJW], dt, MO_CAT_PARAM, 3, L, C, C, 0);
    row(&all[n++], param_names[GPT_PROJB], dt, MO_CAT_PARAM, 2, L, C, 0, 0);
    row(&all[n++], param_names[GPT_LN2W], dt, MO_CAT_PARAM, 2, L, C, 0, 0);
    row(&all[n++], param_names[GPT_LN2B], dt, MO_CAT_PARAM, 2, L, C, 0, 0);
    row(&all[n++], param_names[GPT_FCW], dt, MO_CAT_PARAM, 3, L, 4 * C, C, 0);
    row(&all[n++], param_names[GPT_FCB], dt, MO_CAT_PARAM, 2, L, 4 * C, 0, 0);
    row(&all[n++], param_names[GPT_FCPROJW], dt, MO_CAT_PARAM, 3, L, C, 4 * C, 0);
    row(&all[n++], param_names[GPT_FCPROJB], dt, MO_CAT_PARAM, 2, L, C, 0, 0);
    row(&all[n++], param_names[GPT_LNFW], dt, MO_CAT_PARAM, 1, C, 0, 0, 0);
    row(&all[n++], param_names[GPT_LNFB], dt, MO_CAT_PARAM, 1, C, 0, 0, 0);
    // Activations one block keeps for backward (per micro-batch, no checkpointing): tensors in dt,
    // per-row statistics in fp32.
    row(&all[n++], "block.ln1", dt, MO_CAT_ACTIVATION, 3, B, T, C, 0);
    row(&all[n++], "block.ln1.mean", F, MO_CAT_ACTIVATION, 2, B, T, 0, 0);
    row(&all[n++], "block.ln1.rstd", F, MO_CAT_ACTIVATION, 2, B, T, 0, 0);
    row(&all[n++], "block.qkv", dt, MO_CAT_ACTIVATION, 3, B, T, 3 * C, 0);
    if (c->attn_fused) row(&all[n++], "block.att.lse", F, MO_CAT_ACTIVATION, 3, B, NH, T, 0);
    else row(&all[n++], "block.att", dt, MO_CAT_ACTIVATION, 4, B, NH, T, T);
    row(&all[n++], "block.atty", dt, MO_CAT_ACTIVATION, 3, B, T, C, 0);
    row(&all[n++], "block.resid2", dt, MO_CAT_ACTIVATION, 3, B, T, C, 0);
    row(&all[n++], "block.ln2", dt, MO_CAT_ACTIVATION, 3, B, T, C, 0);
    row(&all[n++], "block.ln2.mean", F, MO_CAT_ACTIVATION, 2, B, T, 0, 0);
    row(&all[n++], "block.ln2.rstd", F, MO_CAT_ACTIVATION, 2, B, T, 0, 0);
    row(&all[n++], "block.fch", dt, MO_CAT_ACTIVATION, 3, B, T, 4 * C, 0);
    row(&all[n++], "block.fch_gelu", dt, MO_CAT_ACTIVATION, 3, B, T, 4 * C, 0);
    row(&all[n++], "block.out", dt, MO_CAT_ACTIVATION, 3, B, T, C, 0);
    row(&all[n++], "lnf", dt, MO_CAT_ACTIVATION, 3, B, T, C, 0);
    row(&all[n++], "logits", dt, MO_CAT_ACTIVATION, 3, B, T, V, 0);
    for (int i = 0; i < n && i < max; i++) rows[i] = all[i];
    return n;
}

// Box-Muller over models/rng.h's uniforms: a fixed normal stream per seed, the same on every machine.

static void init_params(const mo_gpt_config *c, const size_t sizes[GPT_NPARAMS], float *h) {
    uint64_t s = c->seed * 0x2545f4914f6cdd1dull + 1;
    float resid_std = 0.02f / sqrtf(2.0f * c->layers);
    size_t o = 0;
    for (int p = 0; p < GPT_NPARAMS; p++) {
        int is_ln_w = p == GPT_LN1W || p == GPT_LN2W || p == GPT_LNFW;
        int is_bias = p == GPT_LN1B || p == GPT_LN2B || p == GPT_LNFB || p == GPT_QKVB || p == GPT_PROJB ||
                      p == GPT_FCB || p == GPT_FCPROJB;
        float std = (p == GPT_PROJW || p == GPT_FCPROJW) ? resid_std : 0.02f;
        for (size_t i = 0; i < sizes[p]; i++) {
            if (is_ln_w) h[o + i] = 1.0f;
            else if (is_bias) h[o + i] = 0.0f;
            else {
                double u1 = uniform01(&s), u2 = uniform01(&s);
                h[o + i] = (float)(std * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
            }
        }
        o += sizes[p];
    }
}

void gpt_init_full(const mo_gpt_config *c, float *h) {
    size_t s[GPT_NPARAMS];
    param_sizes(c, s);
    init_params(c, s, h);
}

// The initial value of element i of the unsplit model's tensor p, on its own. init_params draws
// from splitmix64, whose state after k draws is s0 + k * 0x9e37..., so the j-th normally distributed
// element (draws 2j+1 and 2j+2, counted over the random tensors in order) needs none of the draws
// before it: the same draws and the same arithmetic as init_params, so the same bits. A shard is
// initialized this way, each rank computing only its own elements.
static float init_value(const mo_gpt_config *c, const size_t full[GPT_NPARAMS], int p, size_t i) {
    int is_ln_w = p == GPT_LN1W || p == GPT_LN2W || p == GPT_LNFW;
    int is_bias = p == GPT_LN1B || p == GPT_LN2B || p == GPT_LNFB || p == GPT_QKVB || p == GPT_PROJB ||
                  p == GPT_FCB || p == GPT_FCPROJB;
    if (is_ln_w) return 1.0f;
    if (is_bias) return 0.0f;
    size_t j = i;
    for (int q = 0; q < p; q++) {
        int q_const = q == GPT_LN1W || q == GPT_LN2W || q == GPT_LNFW || q == GPT_LN1B || q == GPT_LN2B ||
                      q == GPT_LNFB || q == GPT_QKVB || q == GPT_PROJB || q == GPT_FCB || q == GPT_FCPROJB;
        if (!q_const) j += full[q];
    }
    float resid_std = 0.02f / sqrtf(2.0f * c->layers);
    float std = (p == GPT_PROJW || p == GPT_FCPROJW) ? resid_std : 0.02f;
    uint64_t s1 = c->seed * 0x2545f4914f6cdd1dull + 1 + (uint64_t)(2 * j) * 0x9e3779b97f4a7c15ull;
    uint64_t s2 = s1 + 0x9e3779b97f4a7c15ull;
    double u1 = uniform01(&s1), u2 = uniform01(&s2);
    return (float)(std * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static void init_shard(const mo_gpt_config *c, const mo_gpt_shard *sh, const size_t sizes[GPT_NPARAMS], float *h) {
    size_t full[GPT_NPARAMS], o = 0;
    param_sizes(c, full);
    for (int p = 0; p < GPT_NPARAMS; p++) {
        for (size_t i = 0; i < sizes[p]; i++) h[o + i] = init_value(c, full, p, gpt_shard_global_index(c, sh, p, i));
        o += sizes[p];
    }
}

void mo_gpt_destroy(mo_gpt *m) {
    if (!m) return;
    mo_allocator *a = m->ctx->alloc;
    mo_allocator *h = m->cfg.offload ? m->ctx->host_alloc : a; // where m, v (and a 16-bit master) live
    int mixed = m->cfg.dtype != MO_F32;
    mo_free(a, m->losses);
    mo_free(a, m->targets);
    mo_free(a, m->inputs);
    if (m->cfg.offload) {
        mo_free(h, m->host_params);
        mo_free(h, m->host_grads);
    }
    mo_free(h, m->adam_v);
    mo_free(h, m->adam_m);
    mo_free(a, m->grads);
    if (m->wparams != m->params) mo_free(a, m->wparams);
    mo_free(mixed ? h : a, m->params);
    gpt_zero_destroy(m); // after the buffers above (some are the ZeRO shards)
    free(m->inputs_host);
    free(m->targets_host);
    free(m);
}

mo_status mo_gpt_create(mo_gpt **out, const mo_gpt_config *cfg, mo_ctx *ctx) {
    return mo_gpt_create_shard(out, cfg, ctx, NULL);
}

mo_status mo_gpt_create_shard(mo_gpt **out, const mo_gpt_config *cfg, mo_ctx *ctx, const mo_gpt_shard *sh) {
    *out = NULL;
    MO_TRY(mo_gpt_validate(cfg));
    mo_gpt *m = calloc(1, sizeof *m);
    if (!m) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the model");
    m->cfg = *cfg;
    m->ctx = ctx;
    m->shard = sh;
    gpt_param_sizes(cfg, sh, m->param_sizes);
    for (int p = 0; p < GPT_NPARAMS; p++) m->num_params += m->param_sizes[p];
    // BT: the tokens this rank embeds or scores (sequence parallel: its seq/tp positions of each sequence).
    size_t pb = m->num_params * sizeof(float), BT = (size_t)cfg->batch * gpt_shard_seq(cfg, sh);
    mo_allocator *a = ctx->alloc;
    mo_status st;
    int mixed = cfg->dtype != MO_F32;
    if (cfg->offload && (sh || !ctx->host_alloc)) {
        free(m);
        return MO_FAIL(MO_ERR_INVALID, "--offload optimizer: %s",
                       sh ? "not built for a split or data-parallel model yet (accepted there: --offload none)"
                          : "the context has no host allocator (ctx->host_alloc)");
    }
    if (cfg->offload) { // the update's knobs (offload_update.h) refused now, not after the first step's compute
        size_t chunk;
        int threads;
        if ((st = mo_offload_knobs(&chunk, &threads)) != MO_OK) {
            free(m);
            return st;
        }
    }
    // Offload: AdamW's moments and a 16-bit run's master in host memory, plus the update's host staging.
    mo_allocator *h = cfg->offload ? ctx->host_alloc : a;
    int on_host = cfg->offload && ctx->backend != MO_BACKEND_DRY; // host buffers are written directly
    // Data parallelism (gpt_zero.h): ZeRO levels >= 1 make their own (sharded) model state.
    if (sh && sh->dp > 1) MO_TRY_GOTO(st, gpt_zero_create(m), fail);
    int own_state = !m->zero || m->zero->level == 0;
    if (own_state) {
        MO_TRY_GOTO(st, mo_alloc(mixed ? h : a, pb, mixed ? MO_CAT_MASTER : MO_CAT_PARAM, (void **)&m->params), fail);
        if (mixed) MO_TRY_GOTO(st, mo_alloc(a, m->num_params * mo_dtype_size(cfg->dtype), MO_CAT_PARAM, &m->wparams), fail);
        else m->wparams = m->params;
        MO_TRY_GOTO(st, mo_alloc(a, pb, MO_CAT_GRAD, (void **)&m->grads), fail);
        MO_TRY_GOTO(st, mo_alloc(h, pb, MO_CAT_OPTIM, (void **)&m->adam_m), fail);
        MO_TRY_GOTO(st, mo_alloc(h, pb, MO_CAT_OPTIM, (void **)&m->adam_v), fail);
        if (cfg->offload) { // the update's staging: the gradients, and in fp32 the weights
            MO_TRY_GOTO(st, mo_alloc(h, pb, MO_CAT_GRAD, (void **)&m->host_grads), fail);
            if (!mixed) MO_TRY_GOTO(st, mo_alloc(h, pb, MO_CAT_PARAM, (void **)&m->host_params), fail);
        }
    }
    // A shard: the tokens on the first stage (the embedding), the targets and losses on the last.
    if (!sh || sh->first) MO_TRY_GOTO(st, mo_alloc(a, BT * sizeof(int), MO_CAT_ACTIVATION, (void **)&m->inputs), fail);
    if (!sh || sh->last) {
        MO_TRY_GOTO(st, mo_alloc(a, BT * sizeof(int), MO_CAT_ACTIVATION, (void **)&m->targets), fail);
        MO_TRY_GOTO(st, mo_alloc(a, BT * sizeof(float), MO_CAT_ACTIVATION, (void **)&m->losses), fail);
    }
    // The dry backend computes nothing: no host copy of the tokens (batch x seq ints each, 16 GiB
    // at 65536 x 65536, which the OOM killer would end before any status could be written).
    if (ctx->backend != MO_BACKEND_DRY) {
        m->inputs_host = calloc(BT, sizeof(int));
        m->targets_host = calloc(BT, sizeof(int));
        if (!m->inputs_host || !m->targets_host) { st = MO_FAIL(MO_ERR_OOM, "host memory exhausted for the batch"); goto fail; }
    }
    size_t o = 0;
    for (int p = 0; own_state && p < GPT_NPARAMS; p++) {
        m->param_ptr[p] = m->params + o;
        m->grad_ptr[p] = m->grads + o;
        m->wparam_ptr[p] = (char *)m->wparams + o * mo_dtype_size(cfg->dtype);
        o += m->param_sizes[p];
    }
    if (own_state && ctx->backend != MO_BACKEND_DRY) {
        float *h = malloc(pb);
        if (!h) { st = MO_FAIL(MO_ERR_OOM, "host memory exhausted for the initial parameters"); goto fail; }
        if (sh) init_shard(cfg, sh, m->param_sizes, h);
        else init_params(cfg, m->param_sizes, h);
        if (on_host && mixed) memcpy(m->params, h, pb); // the master is host memory
        else st = mo_memcpy_h2d(ctx, m->params, h, pb);
        free(h);
        if (st != MO_OK) goto fail;
    }
    if (own_state && on_host) {
        if (mixed) { // the 16-bit working copy: cast on the host (as the offloaded update does), then up
            MO_TRY_GOTO(st, cast_mixed_cpu(cfg->dtype, m->host_grads, MO_F32, m->params, m->num_params), fail);
            MO_TRY_GOTO(st, mo_memcpy_h2d(ctx, m->wparams, m->host_grads, m->num_params * mo_dtype_size(cfg->dtype)), fail);
        }
        memset(m->adam_m, 0, pb);
        memset(m->adam_v, 0, pb);
        MO_TRY_GOTO(st, mo_memset_zero(ctx, m->grads, pb), fail);
    } else if (own_state) {
        if (mixed) MO_TRY_GOTO(st, mo_cast_mixed(ctx, cfg->dtype, m->wparams, MO_F32, m->params, m->num_params), fail);
        MO_TRY_GOTO(st, mo_memset_zero(ctx, m->adam_m, pb), fail);
        MO_TRY_GOTO(st, mo_memset_zero(ctx, m->adam_v, pb), fail);
        MO_TRY_GOTO(st, mo_memset_zero(ctx, m->grads, pb), fail);
    }
    m->checkpointing = cfg->ckpt != MO_CKPT_NONE;
    if (cfg->loss_scaling) {
        m->cfg.loss_scale_init = cfg->loss_scale_init > 0 ? cfg->loss_scale_init : 65536.0f;
        m->cfg.scaler_interval = cfg->scaler_interval > 0 ? cfg->scaler_interval : 2000;
        m->loss_scale = m->cfg.loss_scale_init;
    } else {
        m->loss_scale = 1.0f;
    }
    *out = m;
    return MO_OK;
fail:
    mo_gpt_destroy(m);
    return st;
}

void mo_gpt_synthetic_batch(const mo_gpt_config *cfg, uint64_t seed, int *tokens, int *targets) {
    // Random tokens; the target of position t is the token at t+1 of the same stream, as in LM data.
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 7;
    size_t T = (size_t)cfg->seq;
    for (int b = 0; b < cfg->batch; b++) {
        int next = (int)(splitmix(&s) % (uint64_t)cfg->vocab);
        for (size_t t = 0; t < T; t++) {
            int cur = next;
            next = (int)(splitmix(&s) % (uint64_t)cfg->vocab);
            tokens[b * T + t] = cur;
            targets[b * T + t] = next;
        }
    }
}

mo_status mo_gpt_set_batch(mo_gpt *m, const int *tokens, const int *targets) {
    size_t BT = (size_t)m->cfg.batch * m->cfg.seq;
    for (size_t i = 0; i < BT; i++) {
        if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab || targets[i] < 0 || targets[i] >= m->cfg.vocab)
            return MO_FAIL(MO_ERR_INVALID, "batch: token %zu out of range 0..%d", i, m->cfg.vocab - 1);
    }
    if (!m->inputs_host) return MO_OK; // dry: no data to hold
    // The rank's positions [t0, t0 + Ts) of every sequence (sequence parallel; else all of them): (B, Ts).
    size_t T = (size_t)m->cfg.seq, Ts = (size_t)gpt_shard_seq(&m->cfg, m->shard), t0 = (size_t)gpt_shard_seq0(&m->cfg, m->shard);
    size_t B = (size_t)m->cfg.batch, BTs = B * Ts;
    for (size_t b = 0; b < B; b++) {
        memcpy(m->inputs_host + b * Ts, tokens + b * T + t0, Ts * sizeof(int));
        memcpy(m->targets_host + b * Ts, targets + b * T + t0, Ts * sizeof(int));
    }
    if (m->inputs) MO_TRY(mo_memcpy_h2d(m->ctx, m->inputs, m->inputs_host, BTs * sizeof(int)));   // NULL: not the first stage
    if (m->targets) MO_TRY(mo_memcpy_h2d(m->ctx, m->targets, m->targets_host, BTs * sizeof(int))); // NULL: not the last stage
    return MO_OK;
}

double mo_gpt_step_flops(const mo_gpt_config *c) {
    double N = (double)mo_gpt_num_params(c) - (double)c->seq * c->hidden; // without wpe
    double tokens = (double)c->batch * c->seq;
    return 6.0 * N * tokens + 6.0 * c->layers * (double)c->seq * c->hidden * tokens;
}

double mo_gpt_recompute_flops(const mo_gpt_config *c) {
    double tokens = (double)c->batch * c->seq, C = c->hidden, T = c->seq;
    double attn_fwd = 4.0 * tokens * T * C;                       // q.k^T and att.v
    double block_fwd = 2.0 * tokens * 12.0 * C * C + attn_fwd;    // one block's forward GEMMs
    double fcproj = 2.0 * tokens * 4.0 * C * C;                   // skipped for each segment's last block
    if (c->ckpt == MO_CKPT_NONE) return 0;
    if (c->ckpt == MO_CKPT_SELECTIVE) return c->attn_fused ? 0 : c->layers * attn_fwd; // attention forward again
    mo_ckpt_layout y = mo_ckpt_layout_of(c->ckpt, c->ckpt_every, c->layers);
    return y.blocks * block_fwd - mo_ckpt_layout_segments(y) * fcproj; // the checkpointed blocks only
}
