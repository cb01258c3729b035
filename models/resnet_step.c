// The ResNet's instance and training step (the layer list: resnet_arch.h; the table: resnet.c).
// Every tensor from the run's allocator, every activation allocated when produced and freed after its
// last reader, so the allocator's peak is the step's true peak on every backend (dry included).
// What backward keeps of a block (as PyTorch's autograd keeps it): each unit's conv output (its BN's
// input) and BN mean, rstd; each main unit's BN+ReLU output but the last (the next conv's input, and the
// ReLU mask); the block's output (the final ReLU's mask, the next block's input). The last BN writes
// into the output, the shortcut is added in place and the ReLU is applied in place (torchvision's
// `out += identity; relu(out)`), so its pre-activation is not kept.
// Where this goes below PyTorch (both only with the suite's own BN kernels, not MEMOPT_BN=cudnn):
//   - a downsampled block's output is written over its shortcut branch's BN output, which nothing reads
//     after (PyTorch holds both while `out += identity` runs);
//   - each BN's input gradient is written over its input (the conv's output, dead after the BN's
//     backward) instead of a new buffer.
// Checkpointing (models/ckpt_layout.h) over the residual blocks: a checkpointed segment keeps only its
// input and its BN batch statistics (2 floats a channel); backward re-runs its blocks' forward with the
// running statistics left alone (they move once per micro-batch) and the kept statistics, so each BN's
// recompute is its normalize pass alone and gives the forward's bits (PyTorch's recompute computes the
// statistics again), then their backward. Stem and head are never recomputed.
// Gradient accumulation: micro-batches of B/accum images, each with its own BN batch statistics.
#include "models/resnet.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpt_ops.h"
#include "step_ops.h"
#include "kernels/batchnorm.h"
#include "kernels/conv.h"
#include "kernels/copy_stream.h"
#include "kernels/cost.h"
#include "kernels/pool.h"
#include "models/ckpt_layout.h"
#include "models/model.h"
#include "models/resnet_arch.h"
#include "models/rng.h"

#define BN_MOMENTUM 0.1f

typedef struct rn_cfg {
    int B, accum;
    mo_ckpt_layout seg; // over the residual blocks
    mo_dtype dt;
    int loss_scaling;
    float lr, beta1, beta2, eps, weight_decay, grad_clip;
    uint64_t seed;
} rn_cfg;

typedef struct resnet {
    rn_cfg c;
    rn_arch a;
    mo_ctx *ctx;
    float *params;   // (n_params) fp32, the master copy when 16-bit
    void *wparams;   // (n_params) dt: the weights the convs and the FC read (== params for fp32)
    float *grads, *adam_m, *adam_v;
    float *running;  // (n_running) BN running mean, var of each unit
    float *images;   // (B,S,S,3) fp32
    int *targets;    // (B)
    float *losses;   // (B)
    int step;
    float loss_scale;
    int scaler_clean, skipped_steps;
    double last_loss, recompute_ms;
} resnet;

void mo_resnet_destroy(void *p) {
    resnet *m = p;
    if (!m) return;
    mo_allocator *a = m->ctx->alloc;
    mo_free(a, m->losses); mo_free(a, m->targets); mo_free(a, m->images);
    mo_free(a, m->running);
    mo_free(a, m->adam_v); mo_free(a, m->adam_m); mo_free(a, m->grads);
    if (m->wparams != m->params) mo_free(a, m->wparams);
    mo_free(a, m->params);
    rn_arch_free(&m->a);
    free(m);
}

static float normal(uint64_t *s) { return (float)(sqrt(-2 * log(uniform01(s))) * cos(6.283185307179586 * uniform01(s))); }

// torchvision's initialization: conv weights kaiming_normal_(fan_out, relu): normal(0, sqrt(2 / (K R S))),
// BN weight 1, bias 0; the FC as nn.Linear: uniform(-1/sqrt(C), 1/sqrt(C)) for weight and bias.
static void init_params(const resnet *m, float *h) {
    const rn_arch *a = &m->a;
    uint64_t r = m->c.seed * 0x2545f4914f6cdd1dull + 17;
    for (int i = 0; i < a->nunits; i++) {
        const rn_unit *u = &a->units[i];
        size_t nw = (size_t)u->cout * u->R * u->R * u->cin;
        float sd = sqrtf(2.0f / (float)(u->cout * u->R * u->R));
        for (size_t j = 0; j < nw; j++) h[u->w_off + j] = sd * normal(&r);
        for (int j = 0; j < u->cout; j++) { h[u->g_off + j] = 1.0f; h[u->b_off + j] = 0.0f; }
    }
    float bound = 1.0f / sqrtf((float)a->Cf);
    for (size_t j = 0; j < (size_t)a->K * a->Cf + a->K; j++) h[a->fc_w + j] = bound * (float)(2 * uniform01(&r) - 1);
}

mo_status mo_resnet_create(const mo_run_config *rc, mo_ctx *ctx, void **out) {
    resnet *m = calloc(1, sizeof *m);
    if (!m) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the model");
    m->ctx = ctx;
    mo_status st = rn_arch_build(rc, &m->a);
    if (st != MO_OK) { free(m); return st; }
    rn_cfg *c = &m->c;
    c->B = rc->batch; c->accum = rc->accum;
    c->seg = mo_ckpt_layout_of(rc->ckpt.kind, rc->ckpt.every, m->a.nblocks);
    c->dt = rc->precision == MO_PREC_FP16 ? MO_F16 : rc->precision == MO_PREC_BF16 ? MO_BF16 : MO_F32;
    c->loss_scaling = rc->precision == MO_PREC_FP16;
    c->lr = (float)rc->lr; c->beta1 = 0.9f; c->beta2 = 0.95f; c->eps = 1e-8f; c->weight_decay = 0.0f; c->grad_clip = 1.0f;
    c->seed = rc->seed;
    size_t n = m->a.n_params, pb = n * sizeof(float), rb = m->a.n_running * sizeof(float);
    size_t img = (size_t)c->B * m->a.S * m->a.S * 3;
    mo_allocator *a = ctx->alloc;
    int mixed = c->dt != MO_F32;
    MO_TRY_GOTO(st, mo_alloc(a, pb, mixed ? MO_CAT_MASTER : MO_CAT_PARAM, (void **)&m->params), fail);
    if (mixed) MO_TRY_GOTO(st, mo_alloc(a, n * mo_dtype_size(c->dt), MO_CAT_PARAM, &m->wparams), fail);
    else m->wparams = m->params;
    MO_TRY_GOTO(st, mo_alloc(a, pb, MO_CAT_GRAD, (void **)&m->grads), fail);
    MO_TRY_GOTO(st, mo_alloc(a, pb, MO_CAT_OPTIM, (void **)&m->adam_m), fail);
    MO_TRY_GOTO(st, mo_alloc(a, pb, MO_CAT_OPTIM, (void **)&m->adam_v), fail);
    MO_TRY_GOTO(st, mo_alloc(a, rb, MO_CAT_PARAM, (void **)&m->running), fail); // buffers, with the parameters
    MO_TRY_GOTO(st, mo_alloc(a, img * sizeof(float), MO_CAT_ACTIVATION, (void **)&m->images), fail);
    MO_TRY_GOTO(st, mo_alloc(a, (size_t)c->B * sizeof(int), MO_CAT_ACTIVATION, (void **)&m->targets), fail);
    MO_TRY_GOTO(st, mo_alloc(a, (size_t)c->B * sizeof(float), MO_CAT_ACTIVATION, (void **)&m->losses), fail);
    if (ctx->backend != MO_BACKEND_DRY) {
        float *h = malloc(pb > rb ? pb : rb);
        if (!h) { st = MO_FAIL(MO_ERR_OOM, "host memory exhausted for the initial parameters"); goto fail; }
        init_params(m, h);
        st = mo_memcpy_h2d(ctx, m->params, h, pb);
        for (int i = 0; i < m->a.nunits; i++) { // running mean 0, var 1
            const rn_unit *u = &m->a.units[i];
            for (int j = 0; j < u->cout; j++) { h[u->rs_off + j] = 0.0f; h[u->rs_off + u->cout + j] = 1.0f; }
        }
        if (st == MO_OK) st = mo_memcpy_h2d(ctx, m->running, h, rb);
        free(h);
        if (st != MO_OK) goto fail;
    }
    if (mixed) MO_TRY_GOTO(st, mo_cast_mixed(ctx, c->dt, m->wparams, MO_F32, m->params, n), fail);
    MO_TRY_GOTO(st, mo_memset_zero(ctx, m->adam_m, pb), fail);
    MO_TRY_GOTO(st, mo_memset_zero(ctx, m->adam_v, pb), fail);
    MO_TRY_GOTO(st, mo_memset_zero(ctx, m->grads, pb), fail);
    m->loss_scale = c->loss_scaling ? 65536.0f : 1.0f;
    *out = m;
    return MO_OK;
fail:
    mo_resnet_destroy(m);
    return st;
}

mo_status mo_resnet_set_batch(void *p, const float *images, const int *targets) {
    resnet *m = p;
    size_t img = (size_t)m->c.B * m->a.S * m->a.S * 3;
    MO_TRY(mo_memcpy_h2d(m->ctx, m->images, images, img * sizeof(float)));
    return mo_memcpy_h2d(m->ctx, m->targets, targets, (size_t)m->c.B * sizeof(int));
}

// Images uniform in [-1, 1), classes uniform: the same seed gives the same batch everywhere.
void mo_resnet_synthetic_images(uint64_t seed, int B, int S, int K, float *img, int *y) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 5;
    for (size_t i = 0; i < (size_t)B * S * S * 3; i++) img[i] = (float)(2 * uniform01(&s) - 1);
    for (int b = 0; b < B; b++) y[b] = (int)(splitmix(&s) % (uint64_t)K);
}

mo_status mo_resnet_set_synthetic_batch(void *p, uint64_t seed) {
    resnet *m = p;
    size_t img = (size_t)m->c.B * m->a.S * m->a.S * 3;
    float *x = malloc(img * sizeof(float));
    int *y = malloc((size_t)m->c.B * sizeof(int));
    mo_status st = MO_OK;
    if (!x || !y) st = MO_FAIL(MO_ERR_OOM, "host memory exhausted for the batch");
    if (st == MO_OK) {
        mo_resnet_synthetic_images(seed, m->c.B, m->a.S, m->a.K, x, y);
        st = mo_resnet_set_batch(m, x, y);
    }
    free(x);
    free(y);
    return st;
}

// ---------------------------------------------------------------- the step

typedef struct unit_acts {
    void *c;            // (N,P,P,cout) dt the conv's output, the BN's input
    void *a;            // (N,P,P,cout) dt BN(+ReLU) output: a main unit's but the last; the shortcut's, briefly
    float *mean, *rstd; // (cout) fp32 the BN's batch statistics
} unit_acts;

typedef struct block_acts {
    void *in;           // (N,H,H,cin) dt, not owned: the previous block's out (block 0: the max pool's)
    unit_acts u[3], ds;
    void *out;          // (N,P,P,cout) dt
} block_acts;

typedef struct step_state {
    resnet *m;
    int N, micro;
    void *xin;          // (N,S,S,3) dt the images cast (16-bit); NULL in fp32 (read in place)
    unit_acts stem;
    void *pool;         // (N,pool_P,pool_P,W0) dt
    block_acts *acts;   // (nblocks)
    void *pooled;       // (N,Cf) dt
    void *logits;       // (N,K) dt; dlogits after the loss
    void *g, *gi, *dc, *dsc; // backward: the gradient in flight (of a block's out), inside a block, a conv's
                             // output gradient, the shortcut's input gradient
    double recompute_ms;
    // --offload activations (ctx->offload_act): block l's output while it lives on the host (the input of
    // a checkpointed segment), its requested bytes and its copy in flight (-1: none); (nblocks) each
    void **h;
    size_t *hb;
    int *tk;
} step_state;

#define DT (m->c.dt)

static const void *Wt(const resnet *m, size_t off) { return (const char *)m->wparams + off * mo_dtype_size(DT); }

static void unit_shape(const rn_unit *u, int N, mo_conv_shape *s) {
    mo_conv_shape_init(s, N, u->H, u->H, u->cin, u->cout, u->R, u->R, u->stride, u->pad);
}

static void unit_free(resnet *m, unit_acts *ua) {
    act_free(m, &ua->c); act_free(m, &ua->a); act_free(m, &ua->mean); act_free(m, &ua->rstd);
}

// *out = BN(conv(in)) (ReLU'd when relu); running statistics updated when update. res != NULL (the
// block's last unit): *out = ReLU(BN(conv(in)) + res), the residual add and the ReLU in the BN's pass;
// with *out == res on entry the result is written over res (a downsampled block's shortcut branch, which
// nothing reads after: one (N,P,P,cout) buffer fewer at the block's end, where a recompute's peak is).
// kept: a recompute's, whose mean and rstd the step's forward kept (ua->mean, ua->rstd): only the BN's
// normalize pass runs, with them, which gives the forward's bits without its statistics passes.
// out == NULL: the convolution alone (a recompute's, whose BN output is not wanted: kept must be set).
static mo_status unit_forward(resnet *m, step_state *s, const rn_unit *u, unit_acts *ua, const void *in, int relu,
                              const void *res, int update, int kept, void **out, const char *out_name) {
    mo_ctx *x = m->ctx;
    mo_conv_shape sh;
    unit_shape(u, s->N, &sh);
    size_t M = (size_t)s->N * u->P * u->P;
    MO_TRY(act_alloc(m, M * u->cout, &ua->c));
    OP(MO_PROF_GEMM, mo_conv_forward(x, DT, ua->c, in, Wt(m, u->w_off), &sh));
    if (!out) return kept ? MO_OK : MO_FAIL(MO_ERR_INTERNAL, "a convolution alone without its kept statistics");
    if (!kept) {
        MO_TRY(stat_alloc(m, (size_t)u->cout, &ua->mean));
        MO_TRY(stat_alloc(m, (size_t)u->cout, &ua->rstd));
    }
    if (!(res && *out == res)) MO_TRY(mo_step_act_alloc(m->ctx, DT, M * u->cout, out, out_name)); // the trace's tensor name
    const float *g = m->params + u->g_off, *b = m->params + u->b_off;
    float *rm = update ? m->running + u->rs_off : NULL, *rv = update ? m->running + u->rs_off + u->cout : NULL;
    if (kept)
        OP(MO_PROF_NORM, mo_batchnorm_normalize(x, DT, *out, ua->c, g, b, ua->mean, ua->rstd, res, (int)M, u->cout,
                                                relu || res));
    else if (res)
        OP(MO_PROF_NORM, mo_batchnorm_add_relu_forward(x, DT, *out, ua->mean, ua->rstd, rm, rv, ua->c, g, b, res,
                                                       (int)M, u->cout, BN_MOMENTUM));
    else
        OP(MO_PROF_NORM, mo_batchnorm_forward(x, DT, *out, ua->mean, ua->rstd, rm, rv, ua->c, g, b, (int)M, u->cout,
                                              BN_MOMENTUM, relu));
    return MO_OK;
}

// The ReLU after a unit's BN, for its backward: none; its output's gradient masked in place by bn_out (the
// ReLU's output; the block's last unit, whose masked gradient the shortcut reads too); or its mask
// recomputed from the BN's input (a ReLU right after its BN with dout read by nobody else: 5 passes over the
// tensor instead of 7, bit-identical; the in-place form with MEMOPT_BN=cudnn, whose forward it cannot redo).
enum { RELU_NONE, RELU_INPLACE, RELU_REMASK };
// How a ReLU right after its BN, whose gradient nobody else reads, has its backward
static int relu_after_bn(const mo_ctx *x) { return x->bn_cudnn ? RELU_INPLACE : RELU_REMASK; }

// dout (N,P,P,cout of u): the gradient of the unit's BN output (relu: of its ReLU's, RELU_INPLACE masked
// here in place by bn_out, the ReLU's output: whoever reads dout after sees the masked gradient; RELU_REMASK
// only read, bn_out unused). The BN's and the conv's
// weight gradients accumulate; *din (N,H,H,cin) gets the input gradient (NULL: not wanted), or with
// add_to != NULL the input gradient is added to add_to (N,H,H,cin) in the convolution's pass instead
// (mo_conv_backward_data_add: add_to holds the block input's gradient from its other path, the shortcut
// or the main path; nothing allocated). in: the conv's input.
// free_dout: *free_dout (== dout) is freed after the BN.
static mo_status unit_backward(resnet *m, step_state *s, const rn_unit *u, unit_acts *ua, const void *dout,
                               void **free_dout, const void *in, const void *bn_out, int relu, void **din,
                               void *add_to) {
    mo_ctx *x = m->ctx;
    mo_conv_shape sh;
    unit_shape(u, s->N, &sh);
    size_t M = (size_t)s->N * u->P * u->P;
    // The ReLU's mask in place on dout (in the BN backward's first pass), or recomputed in both of its
    // passes (RELU_REMASK), then the BN backward: the mask-into-scratch path of mo_batchnorm_backward
    // (relu 1) would take an (M, cout) scratch. The BN's
    // input gradient is written over its input, the conv's output, which nothing reads after (one
    // (M, cout) buffer fewer; not with MEMOPT_BN=cudnn, whose backward does not promise it).
    if (x->bn_cudnn) MO_TRY(act_alloc(m, M * u->cout, &s->dc));
    else s->dc = ua->c, ua->c = NULL;
    const void *bn_in = ua->c ? ua->c : s->dc;
    if (relu == RELU_REMASK)
        OP(MO_PROF_NORM, mo_batchnorm_relu_backward_remask(x, DT, s->dc, m->grads + u->g_off, m->grads + u->b_off, dout,
                                                           bn_in, m->params + u->g_off, m->params + u->b_off,
                                                           ua->mean, ua->rstd, (int)M, u->cout));
    else if (relu)
        OP(MO_PROF_NORM, mo_batchnorm_relu_backward_inplace(x, DT, s->dc, m->grads + u->g_off, m->grads + u->b_off,
                                                            (void *)dout, bn_in, bn_out, m->params + u->g_off,
                                                            ua->mean, ua->rstd, (int)M, u->cout));
    else
        OP(MO_PROF_NORM, mo_batchnorm_backward(x, DT, s->dc, m->grads + u->g_off, m->grads + u->b_off, dout, bn_in,
                                               NULL, m->params + u->g_off, ua->mean, ua->rstd, (int)M, u->cout, 0));
    act_free(m, &ua->c); act_free(m, &ua->mean); act_free(m, &ua->rstd);
    if (free_dout) act_free(m, free_dout);
    OP(MO_PROF_GEMM, mo_conv_backward_filter(x, DT, m->grads + u->w_off, s->dc, in, &sh));
    if (add_to) {
        OP(MO_PROF_GEMM, mo_conv_backward_data_add(x, DT, add_to, s->dc, Wt(m, u->w_off), &sh));
    } else if (din) {
        MO_TRY(mo_step_act_alloc(m->ctx, DT, (size_t)s->N * u->H * u->H * u->cin, din, "&s->dsc"));
        OP(MO_PROF_GEMM, mo_conv_backward_data(x, DT, *din, s->dc, Wt(m, u->w_off), &sh));
    }
    act_free(m, &s->dc);
    return MO_OK;
}

static void block_free_internals(resnet *m, block_acts *a) {
    for (int j = 0; j < 3; j++) unit_free(m, &a->u[j]);
    unit_free(m, &a->ds);
}

// A checkpointed block after its forward: every activation goes but the BN statistics (2 cout floats a
// unit), which its recompute reuses (unit_forward's kept) unless MEMOPT_BN=cudnn.
static void block_free_for_recompute(resnet *m, block_acts *a) {
    if (m->ctx->bn_cudnn) { block_free_internals(m, a); return; }
    for (int j = 0; j < 4; j++) {
        unit_acts *ua = j < 3 ? &a->u[j] : &a->ds;
        act_free(m, &ua->c); act_free(m, &ua->a);
    }
}

// kept: a recompute with the forward's statistics kept (block_free_for_recompute). tail: also a->out
// kept from the forward (a segment's last block, ctx->recompute_tail): what only builds it is skipped, the
// last unit's and the downsampling unit's BN passes (and the shortcut add, the ReLU); their convolutions
// run, their outputs being what those BNs' backward reads. The kept output has the bits a rebuild gives.
static mo_status block_forward(resnet *m, step_state *s, int l, block_acts *a, int update, int kept, int tail) {
    const rn_arch *ar = &m->a;
    const rn_block *k = &ar->blocks[l];
    if (k->ds >= 0)
        MO_TRY(unit_forward(m, s, &ar->units[k->ds], &a->ds, a->in, 0, NULL, update, kept, tail ? NULL : &a->ds.a,
                            "&a->ds.a"));
    const void *prev = a->in;
    for (int j = 0; j < k->nu; j++) {
        int last = j == k->nu - 1;
        if (last && tail) {
            MO_TRY(unit_forward(m, s, &ar->units[k->u[j]], &a->u[j], prev, 0, NULL, update, kept, NULL, NULL));
            break;
        }
        // the last unit: out = ReLU(BN(conv) + shortcut), in the BN's pass, over the downsampled shortcut's
        // buffer when there is one (its own kernels; cuDNN's BN writes out before the add reads it)
        const void *res = !last ? NULL : k->ds >= 0 ? a->ds.a : a->in;
        if (last && k->ds >= 0 && !m->ctx->bn_cudnn) a->out = a->ds.a, a->ds.a = NULL;
        MO_TRY(unit_forward(m, s, &ar->units[k->u[j]], &a->u[j], prev, !last, res, update, kept,
                            last ? &a->out : &a->u[j].a, last ? "&a->out" : "&a->u[j].a"));
        prev = a->u[j].a;
    }
    act_free(m, &a->ds.a);
    return MO_OK;
}

// s->g: the gradient of the block's out on entry (owned), of its in on return; frees the block's out.
// ctx->conv_dgrad_add (the default): the shortcut's gradient joins the main path's in the convolution that
// comes last: the first main unit's input gradient is added to s->g (an identity shortcut), the
// downsampling unit's to the main path's (mo_conv_backward_data_add), so no input gradient is allocated
// for it and no residual-add pass runs. MEMOPT_DGRAD_ADD=0: a buffer for it and the add as a pass. (16 bits
// kept the pass in session 22: through one cuDNN engine the op's beta-1 sum was wrong, which conv_cuda.c
// now refuses.)
static mo_status block_backward(resnet *m, step_state *s, int l, block_acts *a) {
    mo_ctx *x = m->ctx;
    const rn_arch *ar = &m->a;
    const rn_block *k = &ar->blocks[l];
    size_t nin = (size_t)s->N * k->H * k->H * k->cin;
    const int fuse = x->conv_dgrad_add;
    // The main path, last unit first; s->gi: the gradient of the unit's output, then of its input. The last
    // unit's backward masks s->g in place by the block's final ReLU (its output a->out) first: s->g is then
    // the gradient of the sum (the last BN's output and the shortcut's) for the shortcut below (fused: the
    // tensor unit 0's input gradient is added to when the shortcut is the identity).
    for (int j = k->nu - 1; j >= 0; j--) {
        int last = j == k->nu - 1;
        const void *in = j == 0 ? a->in : a->u[j - 1].a;
        void *add_to = fuse && j == 0 && k->ds < 0 ? s->g : NULL; // s->g: then the block input's gradient
        // a unit's ReLU output other than the last's: unit j + 1's input, whose backward came first; its
        // mask recomputed (RELU_REMASK) needs it no more
        const int relu = last ? RELU_INPLACE : relu_after_bn(x);
        if (relu == RELU_REMASK) act_free(m, &a->u[j].a);
        MO_TRY(unit_backward(m, s, &ar->units[k->u[j]], &a->u[j], last ? s->g : s->gi, last ? NULL : &s->gi, in,
                             last ? a->out : a->u[j].a, relu, &s->dsc, add_to));
        if (!last) act_free(m, &a->u[j].a);
        s->gi = s->dsc;
        s->dsc = NULL;
    }
    if (k->ds >= 0 && fuse) {
        MO_TRY(unit_backward(m, s, &ar->units[k->ds], &a->ds, s->g, NULL, a->in, NULL, RELU_NONE, NULL, s->gi));
    } else if (k->ds >= 0) {
        MO_TRY(unit_backward(m, s, &ar->units[k->ds], &a->ds, s->g, NULL, a->in, NULL, RELU_NONE, &s->dsc, NULL));
        OP(MO_PROF_ELEMENTWISE, mo_residual_forward_mixed(x, DT, s->gi, s->gi, s->dsc, nin));
        act_free(m, &s->dsc);
    } else if (!fuse) {
        OP(MO_PROF_ELEMENTWISE, mo_residual_forward_mixed(x, DT, s->gi, s->gi, s->g, nin));
    }
    act_free(m, &a->out);
    if (k->ds < 0 && fuse) return MO_OK; // s->g is the block input's gradient already
    act_free(m, &s->g);
    s->g = s->gi;
    s->gi = NULL;
    return MO_OK;
}

static void free_all(step_state *s) {
    resnet *m = s->m;
    int live = 0; // after a clean backward every host copy is freed and every copy joined
    for (int l = 0; m->ctx->offload_act && l < m->a.nblocks; l++) live |= s->h[l] != NULL || s->tk[l] >= 0;
    if (live) { // a failure: no copy may still read or write what is freed below
        (void)mo_ctx_sync(m->ctx);
        (void)mo_copy_sync(m->ctx);
        for (int l = 0; l < m->a.nblocks; l++) {
            if (s->h[l]) (void)mo_free(m->ctx->host_alloc, s->h[l]);
            s->h[l] = NULL, s->tk[l] = -1;
        }
    }
    for (int l = 0; l < m->a.nblocks; l++) {
        block_free_internals(m, &s->acts[l]);
        act_free(m, &s->acts[l].out);
        s->acts[l].in = NULL;
    }
    unit_free(m, &s->stem);
    act_free(m, &s->xin); act_free(m, &s->pool); act_free(m, &s->pooled); act_free(m, &s->logits);
    act_free(m, &s->g); act_free(m, &s->gi); act_free(m, &s->dc); act_free(m, &s->dsc);
}

static const void *images_of(step_state *s) {
    const rn_arch *a = &s->m->a;
    return s->xin ? s->xin : (const void *)(s->m->images + (size_t)s->micro * s->N * a->S * a->S * 3);
}

// ---- --offload activations: the schedule's policy (strategies/schedule.c) on this model's own loops ----
// Segment g's input is block a0-1's output (a0 = g * len; segment 0's is the max pool's output, which the
// stem's backward reads anyway). Segments 1 .. n-2 have theirs copied to the host while block a0 runs
// forward, the device copy freed after it; in backward segment g fetches g-1's input while it runs and
// joins its own before its recompute.
static int rn_offloaded(const step_state *s, int g) {
    const mo_ckpt_layout K = s->m->c.seg;
    return s->m->ctx->offload_act && g >= 1 && g < mo_ckpt_layout_segments(K) - 1;
}

static mo_status rn_fetch(step_state *s, int o) { // block o's output back to the device
    resnet *m = s->m;
    mo_alloc_trace_tensor(m->ctx->alloc, "acts[l].out (from host)");
    MO_TRY(mo_alloc(m->ctx->alloc, s->hb[o], MO_CAT_ACTIVATION, &s->acts[o].out));
    return mo_copy_async(m->ctx, s->acts[o].out, s->h[o], s->hb[o], 0, &s->tk[o]);
}

static mo_status rn_segment_start(step_state *s, int g) {
    resnet *m = s->m;
    const int len = m->c.seg.len, o = g * len - 1; // o: the block whose output is segment g's input
    if (g > 1 && rn_offloaded(s, g - 1)) MO_TRY(rn_fetch(s, o - len));
    if (rn_offloaded(s, g)) {
        MO_TRY(mo_copy_join(m->ctx, s->tk[o]));
        s->tk[o] = -1;
        MO_TRY(mo_free(m->ctx->host_alloc, s->h[o]));
        s->h[o] = NULL;
        s->acts[o + 1].in = s->acts[o].out;
    }
    return MO_OK;
}

static mo_status forward(step_state *s) {
    resnet *m = s->m;
    mo_ctx *x = m->ctx;
    const rn_arch *ar = &m->a;
    int N = s->N, L = ar->nblocks;
    mo_ckpt_layout seg = m->c.seg;
    size_t off = (size_t)s->micro * N, img = (size_t)N * ar->S * ar->S * 3;
    mo_cost_set_region(x, MO_COST_BODY);
    PHASE(m, "forward");
    if (DT != MO_F32) {
        MO_TRY(act_alloc(m, img, &s->xin));
        OP(MO_PROF_ELEMENTWISE, mo_cast_mixed(x, DT, s->xin, MO_F32, m->images + off * ar->S * ar->S * 3, img));
    }
    MO_TRY(unit_forward(m, s, &ar->units[0], &s->stem, images_of(s), 1, NULL, 1, 0, &s->stem.a, "&s->stem.a"));
    MO_TRY(act_alloc(m, (size_t)N * ar->pool_P * ar->pool_P * ar->W0, &s->pool));
    OP(MO_PROF_ELEMENTWISE, mo_maxpool_forward(x, DT, s->pool, s->stem.a, N, ar->pool_H, ar->pool_H, ar->W0, 3, 2, 1));
    for (int l = 0; l < L; l++) {
        block_acts *a = &s->acts[l];
        a->in = l == 0 ? s->pool : s->acts[l - 1].out;
        const int off = l < seg.blocks && l % seg.len == 0 && rn_offloaded(s, l / seg.len);
        if (off) { // segment l/len's input to the host, during block l's forward
            s->hb[l - 1] = mo_alloc_requested_bytes(x->alloc, a->in);
            MO_TRY(mo_alloc(x->host_alloc, s->hb[l - 1], MO_CAT_ACTIVATION, &s->h[l - 1]));
            MO_TRY(mo_copy_async(x, s->h[l - 1], a->in, s->hb[l - 1], 1, &s->tk[l - 1]));
        }
        MO_TRY(block_forward(m, s, l, a, 1, 0, 0));
        if (l < seg.blocks) { // in a checkpointed segment: only the segment's input is kept (and BN statistics)
            block_free_for_recompute(m, a);
            if (l % seg.len != 0) { act_free(m, &s->acts[l - 1].out); a->in = NULL; }
        }
        if (off) {
            MO_TRY(mo_copy_join(x, s->tk[l - 1]));
            s->tk[l - 1] = -1;
            act_free(m, &s->acts[l - 1].out);
            a->in = NULL;
        }
    }
    mo_cost_set_region(x, MO_COST_HEAD);
    MO_TRY(act_alloc(m, (size_t)N * ar->Cf, &s->pooled));
    OP(MO_PROF_ELEMENTWISE, mo_avgpool_forward(x, DT, s->pooled, s->acts[L - 1].out, N, ar->Pf * ar->Pf, ar->Cf));
    MO_TRY(act_alloc(m, (size_t)N * ar->K, &s->logits));
    OP(MO_PROF_GEMM, gpt_matmul_fwd(x, DT, s->logits, NULL, s->pooled, Wt(m, ar->fc_w), Wt(m, ar->fc_b), N, ar->Cf, ar->K));
    // The mean over the global batch, times the loss scale (1 unless fp16's scaler is on).
    float dloss = m->loss_scale / (float)m->c.B;
    OP(MO_PROF_LOSS, mo_crossentropy_fused_mixed(x, DT, m->losses + off, s->logits, m->targets + off, N, 1, ar->K, dloss));
    mo_cost_set_region(x, MO_COST_BODY);
    return MO_OK;
}

static mo_status backward(step_state *s) {
    resnet *m = s->m;
    mo_ctx *x = m->ctx;
    const rn_arch *ar = &m->a;
    int N = s->N, L = ar->nblocks;
    mo_ckpt_layout seg = m->c.seg;
    mo_cost_set_region(x, MO_COST_HEAD);
    PHASE(m, "backward");
    MO_TRY(act_alloc(m, (size_t)N * ar->Cf, &s->gi));
    OP(MO_PROF_GEMM, gpt_matmul_bwd(x, DT, s->gi, m->grads + ar->fc_w, m->grads + ar->fc_b, s->logits, s->pooled,
                                    Wt(m, ar->fc_w), N, ar->Cf, ar->K));
    act_free(m, &s->logits);
    act_free(m, &s->pooled);
    MO_TRY(act_alloc(m, (size_t)N * ar->Pf * ar->Pf * ar->Cf, &s->g));
    OP(MO_PROF_ELEMENTWISE, mo_avgpool_backward(x, DT, s->g, s->gi, N, ar->Pf * ar->Pf, ar->Cf));
    act_free(m, &s->gi);
    mo_cost_set_region(x, MO_COST_BODY);
    // The blocks outside checkpointed segments (all of them under none), then the segments, last first.
    for (int l = L - 1; l >= seg.blocks; l--) MO_TRY(block_backward(m, s, l, &s->acts[l]));
    for (int g = mo_ckpt_layout_segments(seg) - 1; g >= 0; g--) {
        int a0 = g * seg.len, b0 = a0 + seg.len - 1 < seg.blocks - 1 ? a0 + seg.len - 1 : seg.blocks - 1;
        // The segment's last output was kept (the next block's input, or the head's, read by its backward,
        // done now). With ctx->recompute_tail (and the statistics kept) it stays and the recompute skips
        // what only builds it; else it is recomputed with the rest, so the old copy goes first (before an
        // offloaded input is fetched: two of those on the device until the recompute's end rebuilds it). The
        // recompute's peak, at its end, holds it either way.
        const int tail = x->recompute_tail && !x->bn_cudnn;
        if (!tail) act_free(m, &s->acts[b0].out);
        if (x->offload_act) MO_TRY(rn_segment_start(s, g));
        mo_timer t;
        MO_TRY(mo_timer_init(x, &t));
        mo_status st = mo_timer_start(x, &t);
        PHASE(m, "recompute");
        for (int l = a0; l <= b0 && st == MO_OK; l++) {
            if (l > a0) s->acts[l].in = s->acts[l - 1].out;
            // the running statistics moved in forward; its batch statistics kept (but with MEMOPT_BN=cudnn)
            st = block_forward(m, s, l, &s->acts[l], 0, !x->bn_cudnn, tail && l == b0);
        }
        double ms = 0;
        if (st == MO_OK) st = mo_timer_stop(x, &t, &ms);
        mo_timer_destroy(&t);
        MO_TRY(st);
        s->recompute_ms += ms;
        PHASE(m, "backward");
        for (int l = b0; l >= a0; l--) MO_TRY(block_backward(m, s, l, &s->acts[l]));
    }
    // The stem: max pool, BN + ReLU, the conv's weight gradient (the images need none).
    const rn_unit *u = &ar->units[0];
    MO_TRY(act_alloc(m, (size_t)N * ar->pool_H * ar->pool_H * ar->W0, &s->gi));
    OP(MO_PROF_ELEMENTWISE, mo_maxpool_backward(x, DT, s->gi, s->g, s->stem.a, s->pool, N, ar->pool_H, ar->pool_H, ar->W0,
                                                3, 2, 1));
    act_free(m, &s->g);
    act_free(m, &s->pool);
    MO_TRY(unit_backward(m, s, u, &s->stem, s->gi, &s->gi, images_of(s), s->stem.a, relu_after_bn(x), NULL, NULL));
    act_free(m, &s->stem.a);
    act_free(m, &s->xin);
    return MO_OK;
}

static mo_status forward_backward(resnet *m) {
    mo_ctx *x = m->ctx;
    step_state s;
    mo_status st0 = MO_OK;
    memset(&s, 0, sizeof s);
    s.m = m;
    s.N = m->c.B / m->c.accum;
    s.acts = calloc((size_t)m->a.nblocks, sizeof *s.acts);
    s.h = calloc((size_t)m->a.nblocks, sizeof *s.h);
    s.hb = calloc((size_t)m->a.nblocks, sizeof *s.hb);
    s.tk = malloc((size_t)m->a.nblocks * sizeof *s.tk);
    if (!s.acts || !s.h || !s.hb || !s.tk) {
        free(s.acts), free(s.h), free(s.hb), free(s.tk);
        return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the step");
    }
    for (int l = 0; l < m->a.nblocks; l++) s.tk[l] = -1;
    if (x->offload_act && !x->host_alloc) st0 = MO_FAIL(MO_ERR_INVALID, "--offload activations: no host allocator");
    mo_cost_set_region(x, MO_COST_OPTIMIZER); // zeroing the gradients
    mo_status st = st0 != MO_OK ? st0 : mo_memset_zero(x, m->grads, m->a.n_params * sizeof(float));
    for (int k = 0; k < m->c.accum && st == MO_OK; k++) {
        s.micro = k;
        st = forward(&s);
        if (st == MO_OK) st = backward(&s);
        free_all(&s); // a failure (out of memory) unwinds every live activation
    }
    free(s.acts), free(s.h), free(s.hb), free(s.tk);
    m->recompute_ms = s.recompute_ms;
    MO_TRY(st);
    if (x->backend == MO_BACKEND_DRY) { m->last_loss = NAN; return MO_OK; }
    float *h = malloc((size_t)m->c.B * sizeof(float));
    if (!h) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the losses");
    st = mo_memcpy_d2h(x, h, m->losses, (size_t)m->c.B * sizeof(float));
    double sum = 0;
    for (int i = 0; i < m->c.B; i++) sum += h[i];
    free(h);
    m->last_loss = sum / m->c.B;
    return st;
}

// Loss scaler (fp16), clipping at norm 1, AdamW: as the GPT's and the MLP's update.
static mo_status update(resnet *m) {
    const rn_cfg *c = &m->c;
    mo_ctx *x = m->ctx;
    size_t n = m->a.n_params;
    float scale_used = m->loss_scale;
    mo_cost_set_region(x, MO_COST_OPTIMIZER);
    PHASE(m, "optimizer");
    if (c->loss_scaling) {
        int bad = 0;
        OP(MO_PROF_OPTIMIZER, mo_nonfinite(m->ctx, m->grads, n, &bad));
        if (bad) {
            m->loss_scale *= 0.5f;
            m->scaler_clean = 0;
            m->skipped_steps++;
            return MO_OK;
        }
        if (++m->scaler_clean >= 2000) {
            m->loss_scale *= 2.0f;
            m->scaler_clean = 0;
        }
    }
    double ss = 0;
    OP(MO_PROF_OPTIMIZER, mo_sumsq(m->ctx, &ss, m->grads, n));
    double norm = sqrt(ss) / scale_used;
    float scale = 1.0f / scale_used;
    if (c->grad_clip > 0 && norm > c->grad_clip) scale = (float)(c->grad_clip / norm) / scale_used;
    m->step++;
    OP(MO_PROF_OPTIMIZER, mo_adamw_mixed(m->ctx, DT, m->params, m->wparams, m->grads, m->adam_m, m->adam_v, n, c->lr,
                                         c->beta1, c->beta2, c->eps, c->weight_decay, m->step, scale));
    return MO_OK;
}

mo_status mo_resnet_step(void *p) {
    resnet *m = p;
    MO_TRY(forward_backward(m));
    return update(m);
}

void mo_resnet_info(void *p, mo_model_step_info *out) {
    const resnet *m = p;
    out->loss = m->last_loss;
    out->recompute_ms = m->recompute_ms;
    out->skipped_steps = m->skipped_steps;
    out->loss_scale = m->loss_scale;
    out->loss_scaling = m->c.loss_scaling;
}

mo_status mo_resnet_read(void *p, float *params, float *grads, size_t *n) {
    resnet *m = p;
    *n = m->a.n_params;
    if (params) MO_TRY(mo_memcpy_d2h(m->ctx, params, m->params, *n * sizeof(float)));
    if (grads) MO_TRY(mo_memcpy_d2h(m->ctx, grads, m->grads, *n * sizeof(float)));
    return MO_OK;
}

mo_status mo_resnet_write(void *p, const float *params) {
    resnet *m = p;
    MO_TRY(mo_memcpy_h2d(m->ctx, m->params, params, m->a.n_params * sizeof(float)));
    if (m->wparams != m->params) MO_TRY(mo_cast_mixed(m->ctx, DT, m->wparams, MO_F32, m->params, m->a.n_params));
    return MO_OK;
}

mo_status mo_resnet_read_running(void *p, float *stats, size_t *n) {
    resnet *m = p;
    *n = m->a.n_running;
    if (stats) MO_TRY(mo_memcpy_d2h(m->ctx, stats, m->running, *n * sizeof(float)));
    return MO_OK;
}

void mo_resnet_set_loss_scale(void *p, float scale) {
    resnet *m = p;
    if (m->c.loss_scaling) m->loss_scale = scale;
}

mo_status mo_resnet_forward_backward(void *p, double *loss) {
    resnet *m = p;
    MO_TRY(forward_backward(m));
    if (loss) *loss = m->last_loss;
    return MO_OK;
}
