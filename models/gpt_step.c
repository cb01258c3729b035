// The GPT training step: forward, backward, clipping and AdamW, with activation lifetimes and
// checkpointing. Every activation is allocated when it is produced and freed after its last
// reader, so the allocator's peak is the step's true peak on every backend.
// Activations and activation gradients are in the model's dtype dt (fp32, fp16 or bf16: DT below);
// per-row statistics, losses and parameter gradients are fp32 in every precision.
#include "gpt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "gpt_ops.h"

// The tensors one block produces. in is not owned: it is the previous block's out (or the
// embedding output) and is freed by this block's backward, after its last reader.
typedef struct block_acts {
    void *in;                           // (B,T,C) dt
    void *ln1;                          // (B,T,C) dt
    float *ln1_mean, *ln1_rstd;         // (B,T), (B,T) fp32
    void *qkv;                          // (B,T,3C) dt
    void *att;                          // (B,NH,T,T) dt materialized probabilities, or lse (B,NH,T) fp32 when fused
    void *atty;                         // (B,T,C) dt attention output, heads concatenated
    void *resid2;                       // (B,T,C) dt in + proj(atty)
    void *ln2;                          // (B,T,C) dt
    float *ln2_mean, *ln2_rstd;         // (B,T), (B,T) fp32
    void *fch, *fch_gelu;               // (B,T,4C) dt pre-activation and GELU
    void *out;                          // (B,T,C) dt resid2 + fcproj(fch_gelu)
    void *d4, *dC, *dqkv;               // backward scratch (B,T,4C), (B,T,C), (B,T,3C) dt: here so an
                                        // out-of-memory midway is unwound by block_free_internals
} block_acts;

typedef struct step_state {
    mo_gpt *m;
    int Bm, N;          // micro-batch, rows = Bm*T
    int micro;          // which micro-batch
    block_acts *acts;   // (L)
    void *enc;          // (B,T,C) dt embedding output (acts[0].in)
    void *lnf;          // (B,T,C) dt
    float *lnf_mean, *lnf_rstd; // (B,T) fp32
    void *logits;       // (B,T,V) dt; dlogits in backward
    double recompute_ms;
} step_state;

// An op, timed by the profiler when it is on (x: the mo_ctx in scope).
#define OP_CTX(ctx, cat, call)              \
    do {                                    \
        MO_TRY(mo_prof_begin((ctx), (cat)));\
        MO_TRY(call);                       \
        MO_TRY(mo_prof_end(ctx));           \
    } while (0)
#define OP(cat, call) OP_CTX(x, cat, call)

#define DT (m->cfg.dtype)

// n elements of the activation dtype
static mo_status act_alloc(mo_gpt *m, size_t n, void **p) {
    return mo_alloc(m->ctx->alloc, n * mo_dtype_size(DT), MO_CAT_ACTIVATION, p);
}

// n fp32 per-row statistics (mean, rstd, lse)
static mo_status stat_alloc(mo_gpt *m, size_t n, float **p) {
    return mo_alloc(m->ctx->alloc, n * sizeof(float), MO_CAT_ACTIVATION, (void **)p);
}

static void act_free_(mo_gpt *m, void **p) {
    if (*p) mo_free(m->ctx->alloc, *p);
    *p = NULL;
}
#define act_free(m, p) act_free_((m), (void **)(p))

// Layer l's slice of parameter tensor p in the working copy: elem elements per layer.
static const void *W(mo_gpt *m, int p, int l, size_t elem) {
    return (const char *)m->wparam_ptr[p] + (size_t)l * elem * mo_dtype_size(DT);
}

static void block_free_internals(mo_gpt *m, block_acts *a) {
    act_free(m, &a->ln1); act_free(m, &a->ln1_mean); act_free(m, &a->ln1_rstd);
    act_free(m, &a->qkv); act_free(m, &a->att); act_free(m, &a->atty); act_free(m, &a->resid2);
    act_free(m, &a->ln2); act_free(m, &a->ln2_mean); act_free(m, &a->ln2_rstd);
    act_free(m, &a->fch); act_free(m, &a->fch_gelu);
    act_free(m, &a->d4); act_free(m, &a->dC); act_free(m, &a->dqkv);
}

// Attention forward into a->att (probabilities or lse) and a->atty.
static mo_status attention_fwd(mo_gpt *m, step_state *s, block_acts *a) {
    const mo_gpt_config *c = &m->cfg;
    int B = s->Bm, T = c->seq, C = c->hidden, NH = c->heads;
    if (c->attn_fused) MO_TRY(stat_alloc(m, (size_t)B * NH * T, (float **)&a->att));
    else MO_TRY(act_alloc(m, (size_t)B * NH * T * T, &a->att));
    return gpt_attention_fwd(m->ctx, DT, c->attn_fused, a->atty, a->att, a->qkv, B, T, C, NH);
}

// need_out 0 (a recompute whose output nobody reads: the segment's last block) skips the last
// GEMM and residual add: backward needs fch_gelu, not out.
static mo_status block_forward(mo_gpt *m, step_state *s, int l, block_acts *a, int need_out) {
    const mo_gpt_config *c = &m->cfg;
    mo_ctx *x = m->ctx;
    int N = s->N, C = c->hidden;
    size_t NC = (size_t)N * C, CC = (size_t)C * C;
    MO_TRY(act_alloc(m, NC, &a->ln1));
    MO_TRY(stat_alloc(m, (size_t)N, &a->ln1_mean));
    MO_TRY(stat_alloc(m, (size_t)N, &a->ln1_rstd));
    OP(MO_PROF_NORM, mo_layernorm_forward_mixed(x, DT, a->ln1, a->ln1_mean, a->ln1_rstd, a->in, W(m, GPT_LN1W, l, C),
                                                W(m, GPT_LN1B, l, C), N, C));
    MO_TRY(act_alloc(m, 3 * NC, &a->qkv));
    OP(MO_PROF_GEMM, gpt_matmul_fwd(x, DT, a->qkv, NULL, a->ln1, W(m, GPT_QKVW, l, 3 * CC), W(m, GPT_QKVB, l, 3 * C),
                                    N, C, 3 * C));
    MO_TRY(act_alloc(m, NC, &a->atty));
    MO_TRY(attention_fwd(m, s, a));
    // resid2 = in + proj(atty): the GEMM writes resid2, the residual add adds in place.
    MO_TRY(act_alloc(m, NC, &a->resid2));
    OP(MO_PROF_GEMM, gpt_matmul_fwd(x, DT, a->resid2, NULL, a->atty, W(m, GPT_PROJW, l, CC), W(m, GPT_PROJB, l, C), N,
                                    C, C));
    OP(MO_PROF_ELEMENTWISE, mo_residual_forward_mixed(x, DT, a->resid2, a->resid2, a->in, NC));
    MO_TRY(act_alloc(m, NC, &a->ln2));
    MO_TRY(stat_alloc(m, (size_t)N, &a->ln2_mean));
    MO_TRY(stat_alloc(m, (size_t)N, &a->ln2_rstd));
    OP(MO_PROF_NORM, mo_layernorm_forward_mixed(x, DT, a->ln2, a->ln2_mean, a->ln2_rstd, a->resid2,
                                                W(m, GPT_LN2W, l, C), W(m, GPT_LN2B, l, C), N, C));
    MO_TRY(act_alloc(m, 4 * NC, &a->fch));
    MO_TRY(act_alloc(m, 4 * NC, &a->fch_gelu));
    OP(MO_PROF_GEMM, gpt_matmul_fwd(x, DT, a->fch, a->fch_gelu, a->ln2, W(m, GPT_FCW, l, 4 * CC),
                                    W(m, GPT_FCB, l, 4 * C), N, C, 4 * C));
    if (!need_out) return MO_OK;
    MO_TRY(act_alloc(m, NC, &a->out));
    OP(MO_PROF_GEMM, gpt_matmul_fwd(x, DT, a->out, NULL, a->fch_gelu, W(m, GPT_FCPROJW, l, 4 * CC),
                                    W(m, GPT_FCPROJB, l, C), N, 4 * C, C));
    OP(MO_PROF_ELEMENTWISE, mo_residual_forward_mixed(x, DT, a->out, a->out, a->resid2, NC));
    return MO_OK;
}

// dresid (B,T,C) dt holds d(out) on entry and d(in) on return.
static mo_status block_backward(mo_gpt *m, step_state *s, int l, block_acts *a, void *dresid) {
    const mo_gpt_config *c = &m->cfg;
    mo_ctx *x = m->ctx;
    int N = s->N, C = c->hidden, B = s->Bm, T = c->seq, NH = c->heads;
    size_t NC = (size_t)N * C, CC = (size_t)C * C;
    float *const *G = m->grad_ptr;
    MO_TRY(act_alloc(m, 4 * NC, &a->d4));
    OP(MO_PROF_GEMM, gpt_matmul_bwd(x, DT, a->d4, G[GPT_FCPROJW] + (size_t)l * 4 * CC, G[GPT_FCPROJB] + (size_t)l * C,
                                    dresid, a->fch_gelu, W(m, GPT_FCPROJW, l, 4 * CC), N, 4 * C, C));
    act_free(m, &a->fch_gelu);
    OP(MO_PROF_ELEMENTWISE, mo_gelu_backward_mixed(x, DT, a->d4, a->fch, a->d4, 4 * NC));
    act_free(m, &a->fch);
    MO_TRY(act_alloc(m, NC, &a->dC));
    OP(MO_PROF_GEMM, gpt_matmul_bwd(x, DT, a->dC, G[GPT_FCW] + (size_t)l * 4 * CC, G[GPT_FCB] + (size_t)l * 4 * C, a->d4,
                                    a->ln2, W(m, GPT_FCW, l, 4 * CC), N, C, 4 * C));
    act_free(m, &a->d4);
    act_free(m, &a->ln2);
    OP(MO_PROF_NORM, mo_layernorm_backward_mixed(x, DT, dresid, G[GPT_LN2W] + (size_t)l * C, G[GPT_LN2B] + (size_t)l * C,
                                                 a->dC, a->resid2, W(m, GPT_LN2W, l, C), a->ln2_mean, a->ln2_rstd, N, C));
    act_free(m, &a->ln2_mean); act_free(m, &a->ln2_rstd); act_free(m, &a->resid2);
    // a->dC now receives d(atty).
    OP(MO_PROF_GEMM, gpt_matmul_bwd(x, DT, a->dC, G[GPT_PROJW] + (size_t)l * CC, G[GPT_PROJB] + (size_t)l * C, dresid,
                                    a->atty, W(m, GPT_PROJW, l, CC), N, C, C));
    if (!a->att) {
        // Selective checkpointing dropped the probabilities: recompute them (the attention forward
        // again, its output into scratch), timed as recompute.
        mo_timer t;
        MO_TRY(mo_timer_init(x, &t));
        MO_TRY(mo_timer_start(x, &t));
        void *scratch_out = NULL;
        MO_TRY(act_alloc(m, NC, &scratch_out));
        void *keep = a->atty;
        a->atty = scratch_out;
        mo_status st = attention_fwd(m, s, a);
        a->atty = keep;
        act_free(m, &scratch_out);
        double ms = 0;
        if (st == MO_OK) st = mo_timer_stop(x, &t, &ms);
        mo_timer_destroy(&t);
        MO_TRY(st);
        s->recompute_ms += ms;
    }
    MO_TRY(act_alloc(m, 3 * NC, &a->dqkv));
    OP(MO_PROF_ATTENTION, gpt_attention_bwd(x, DT, c->attn_fused, a->dqkv, a->dC, a->qkv, a->atty, a->att, B, T, C, NH));
    act_free(m, &a->att); act_free(m, &a->atty);
    // a->dC now receives d(ln1).
    OP(MO_PROF_GEMM, gpt_matmul_bwd(x, DT, a->dC, G[GPT_QKVW] + (size_t)l * 3 * CC, G[GPT_QKVB] + (size_t)l * 3 * C,
                                    a->dqkv, a->ln1, W(m, GPT_QKVW, l, 3 * CC), N, C, 3 * C));
    act_free(m, &a->dqkv); act_free(m, &a->qkv); act_free(m, &a->ln1);
    OP(MO_PROF_NORM, mo_layernorm_backward_mixed(x, DT, dresid, G[GPT_LN1W] + (size_t)l * C, G[GPT_LN1B] + (size_t)l * C,
                                                 a->dC, a->in, W(m, GPT_LN1W, l, C), a->ln1_mean, a->ln1_rstd, N, C));
    act_free(m, &a->dC); act_free(m, &a->ln1_mean); act_free(m, &a->ln1_rstd);
    act_free(m, &a->in);
    return MO_OK;
}

// Frees whatever is still live (all of it after a failure): each in is the previous out, so an
// in is freed only where it is not also the previous block's out.
static void free_all(step_state *s) {
    mo_gpt *m = s->m;
    if (s->acts) {
        for (int l = 0; l < m->cfg.layers; l++) {
            block_acts *a = &s->acts[l];
            block_free_internals(m, a);
            if (a->in && (l == 0 || a->in != s->acts[l - 1].out)) mo_free(m->ctx->alloc, a->in);
            a->in = NULL;
        }
        for (int l = 0; l < m->cfg.layers; l++) act_free(m, &s->acts[l].out);
    }
    act_free(m, &s->enc);
    act_free(m, &s->lnf); act_free(m, &s->lnf_mean); act_free(m, &s->lnf_rstd); act_free(m, &s->logits);
}

static mo_status forward(step_state *s) {
    mo_gpt *m = s->m;
    const mo_gpt_config *c = &m->cfg;
    mo_ctx *x = m->ctx;
    int N = s->N, C = c->hidden, T = c->seq, V = c->vocab, L = c->layers;
    size_t NC = (size_t)N * C, off = (size_t)s->micro * N;
    int K = mo_gpt_segment_len(c);
    MO_TRY(act_alloc(m, NC, &s->enc));
    OP(MO_PROF_ELEMENTWISE, mo_encoder_forward_mixed(x, DT, s->enc, m->inputs + off, m->wparam_ptr[GPT_WTE],
                                                     m->wparam_ptr[GPT_WPE], s->Bm, T, C));
    for (int l = 0; l < L; l++) {
        block_acts *a = &s->acts[l];
        a->in = l == 0 ? s->enc : s->acts[l - 1].out;
        if (l == 0) s->enc = NULL; // owned by acts[0] from here on
        MO_TRY(block_forward(m, s, l, a, 1));
        if (K) {
            block_free_internals(m, a);
            // Only a segment's first input is kept; the inputs inside a segment are recomputed.
            if (l % K != 0) { act_free(m, &a->in); s->acts[l - 1].out = NULL; }
        } else if (c->ckpt == MO_CKPT_SELECTIVE && !c->attn_fused) {
            act_free(m, &a->att);
        }
    }
    void *last = s->acts[L - 1].out;
    MO_TRY(act_alloc(m, NC, &s->lnf));
    MO_TRY(stat_alloc(m, (size_t)N, &s->lnf_mean));
    MO_TRY(stat_alloc(m, (size_t)N, &s->lnf_rstd));
    OP(MO_PROF_NORM, mo_layernorm_forward_mixed(x, DT, s->lnf, s->lnf_mean, s->lnf_rstd, last, m->wparam_ptr[GPT_LNFW],
                                                m->wparam_ptr[GPT_LNFB], N, C));
    MO_TRY(act_alloc(m, (size_t)N * V, &s->logits));
    OP(MO_PROF_GEMM, gpt_matmul_fwd(x, DT, s->logits, NULL, s->lnf, m->wparam_ptr[GPT_WTE], NULL, N, C, V));
    // The mean over the global batch: each micro-batch's gradient is its share of the full one; times
    // the loss scale (1 unless fp16's scaler is on), so that small gradients stay representable.
    float dloss = m->loss_scale / ((float)c->batch * (float)T);
    OP(MO_PROF_LOSS, mo_crossentropy_fused_mixed(x, DT, m->losses + off, s->logits, m->targets + off, s->Bm, T, V, dloss));
    return MO_OK;
}

static mo_status backward(step_state *s) {
    mo_gpt *m = s->m;
    const mo_gpt_config *c = &m->cfg;
    mo_ctx *x = m->ctx;
    int N = s->N, C = c->hidden, T = c->seq, V = c->vocab, L = c->layers;
    size_t NC = (size_t)N * C, off = (size_t)s->micro * N;
    int K = mo_gpt_segment_len(c);
    void *dC = NULL, *dresid = NULL;
    // logits now hold dlogits.
    MO_TRY(act_alloc(m, NC, &dC));
    OP(MO_PROF_GEMM, gpt_matmul_bwd(x, DT, dC, m->grad_ptr[GPT_WTE], NULL, s->logits, s->lnf, m->wparam_ptr[GPT_WTE], N,
                                    C, V));
    act_free(m, &s->logits);
    MO_TRY(act_alloc(m, NC, &dresid));
    OP(MO_PROF_ELEMENTWISE, mo_memset_zero(x, dresid, NC * mo_dtype_size(DT)));
    OP(MO_PROF_NORM, mo_layernorm_backward_mixed(x, DT, dresid, m->grad_ptr[GPT_LNFW], m->grad_ptr[GPT_LNFB], dC,
                                                 s->acts[L - 1].out, m->wparam_ptr[GPT_LNFW], s->lnf_mean, s->lnf_rstd,
                                                 N, C));
    act_free(m, &dC); act_free(m, &s->lnf); act_free(m, &s->lnf_mean); act_free(m, &s->lnf_rstd);
    act_free(m, &s->acts[L - 1].out);
    mo_status st = MO_OK;
    if (!K) {
        for (int l = L - 1; l >= 0 && st == MO_OK; l--) {
            st = block_backward(m, s, l, &s->acts[l], dresid);
            if (st == MO_OK && l > 0) s->acts[l - 1].out = NULL; // freed as acts[l].in
        }
    } else {
        int nseg = (L + K - 1) / K;
        for (int g = nseg - 1; g >= 0 && st == MO_OK; g--) {
            int a0 = g * K, b0 = a0 + K - 1 < L - 1 ? a0 + K - 1 : L - 1;
            mo_timer t;
            MO_TRY(mo_timer_init(x, &t));
            st = mo_timer_start(x, &t);
            for (int l = a0; l <= b0 && st == MO_OK; l++) {
                if (l > a0) s->acts[l].in = s->acts[l - 1].out;
                st = block_forward(m, s, l, &s->acts[l], l < b0);
            }
            double ms = 0;
            if (st == MO_OK) st = mo_timer_stop(x, &t, &ms);
            mo_timer_destroy(&t);
            s->recompute_ms += ms;
            for (int l = b0; l >= a0 && st == MO_OK; l--) {
                st = block_backward(m, s, l, &s->acts[l], dresid);
                if (st == MO_OK && l > 0) s->acts[l - 1].out = NULL; // freed as acts[l].in
            }
        }
    }
    if (st == MO_OK) st = mo_prof_begin(x, MO_PROF_ELEMENTWISE);
    if (st == MO_OK)
        st = mo_encoder_backward_mixed(x, DT, m->grad_ptr[GPT_WTE], m->grad_ptr[GPT_WPE], dresid, m->inputs + off,
                                       m->inputs_host + off, s->Bm, T, C, V);
    if (st == MO_OK) st = mo_prof_end(x);
    act_free(m, &dresid);
    return st;
}

mo_status mo_gpt_forward_backward(mo_gpt *m) {
    const mo_gpt_config *c = &m->cfg;
    mo_ctx *x = m->ctx;
    step_state s;
    memset(&s, 0, sizeof s);
    s.m = m;
    s.Bm = c->batch / c->accum;
    s.N = s.Bm * c->seq;
    s.acts = calloc((size_t)c->layers, sizeof *s.acts);
    if (!s.acts) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the step");
    mo_status st = mo_memset_zero(x, m->grads, m->num_params * sizeof(float));
    for (int k = 0; k < c->accum && st == MO_OK; k++) {
        s.micro = k;
        st = forward(&s);
        if (st == MO_OK) st = backward(&s);
        free_all(&s); // a failure (out of memory) unwinds every live activation
    }
    m->recompute_ms = s.recompute_ms;
    free(s.acts);
    MO_TRY(st);
    size_t BT = (size_t)c->batch * c->seq;
    if (x->backend == MO_BACKEND_DRY) { m->last_loss = NAN; return MO_OK; }
    float *h = malloc(BT * sizeof(float));
    if (!h) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the losses");
    st = mo_memcpy_d2h(x, h, m->losses, BT * sizeof(float));
    double sum = 0;
    for (size_t i = 0; i < BT; i++) sum += h[i];
    free(h);
    m->last_loss = sum / (double)BT;
    return st;
}

// The loss scaler's verdict on the gradients of this step (fp16): 1 when the update must be skipped.
// An inf or NaN anywhere halves the scale; scaler_interval clean steps in a row double it.
static mo_status scaler_check(mo_gpt *m, int *skip) {
    *skip = 0;
    if (!m->cfg.loss_scaling) return MO_OK;
    int bad = 0;
    OP_CTX(m->ctx, MO_PROF_OPTIMIZER, mo_nonfinite(m->ctx, m->grads, m->num_params, &bad));
    if (m->inject_nonfinite) { bad = 1; m->inject_nonfinite = 0; }
    if (bad) {
        m->loss_scale *= 0.5f;
        m->scaler_clean = 0;
        m->skipped_steps++;
        *skip = 1;
    } else if (++m->scaler_clean >= m->cfg.scaler_interval) {
        m->loss_scale *= 2.0f;
        m->scaler_clean = 0;
    }
    return MO_OK;
}

mo_status mo_gpt_update(mo_gpt *m) {
    const mo_gpt_config *c = &m->cfg;
    mo_ctx *x = m->ctx;
    // The gradients carry the loss scale of the step that made them (the scaler changes it below).
    float scale_used = m->loss_scale;
    int skip = 0;
    MO_TRY(scaler_check(m, &skip));
    m->last_skipped = skip;
    if (skip) { m->last_grad_norm = NAN; return MO_OK; }
    double ss = 0;
    OP(MO_PROF_OPTIMIZER, mo_sumsq(m->ctx, &ss, m->grads, m->num_params));
    double norm = sqrt(ss) / scale_used;
    m->last_grad_norm = m->ctx->backend == MO_BACKEND_DRY ? NAN : norm;
    float scale = 1.0f / scale_used; // unscale, then clip
    if (c->grad_clip > 0 && norm > c->grad_clip) scale = (float)(c->grad_clip / norm) / scale_used;
    m->step++;
    OP(MO_PROF_OPTIMIZER, mo_adamw_mixed(m->ctx, DT, m->params, m->wparams, m->grads, m->adam_m, m->adam_v,
                                         m->num_params, c->lr, c->beta1, c->beta2, c->eps, c->weight_decay, m->step,
                                         scale));
    return MO_OK;
}

mo_status mo_gpt_step(mo_gpt *m) {
    MO_TRY(mo_gpt_forward_backward(m));
    return mo_gpt_update(m);
}
