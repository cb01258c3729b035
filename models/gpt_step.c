// The GPT training step: forward, backward, clipping and AdamW, with activation lifetimes and
// checkpointing. Every activation is allocated when it is produced and freed after its last
// reader, so the allocator's peak is the step's true peak on every backend.
// Activations and activation gradients are in the model's dtype dt (fp32, fp16 or bf16: DT below);
// per-row statistics, losses and parameter gradients are fp32 in every precision.
//
// Split (m->shard, models/gpt_split.h): the same code runs one rank's part. Tensor parallelism
// (Megatron-LM, Shoeybi et al. 2019): the rank holds the qkv and fc weights' rows of its heads / of
// its quarter of the MLP (column-parallel GEMMs) and the matching columns of proj and fcproj
// (row-parallel GEMMs), so its attention runs on C/tp channels and NH/tp heads with the unsplit
// kernels; the row-parallel outputs are all-reduced before the residual add (forward) and the
// column-parallel input gradients d(ln1), d(ln2) before the LayerNorm backward (backward). Everything
// else (embeddings, LayerNorms, residual stream, the LM head) is replicated: the same compute and the
// same gradients on every tp rank. Pipeline: the stage runs its blocks only; activations (B/accum,T,C)
// go to the next stage and their gradients come back, in the 1F1B order (pipeline() below).
#include "gpt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "gpt_ops.h"
#include "gpt_shard.h"
#include "models/ckpt_layout.h"
#include "step_ops.h"
#include "kernels/cost.h"
#include "strategies/comm.h"

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
    void *dhead;        // (B,T,C) dt d(lnf) in backward
    void *dresid;       // (B,T,C) dt the residual stream's gradient in backward (given by the next
                        // stage on a split one; left for the previous stage after a non-first stage)
    double recompute_ms;
} step_state;

// OP / OP_CTX (an op, timed and named in the allocation trace), PHASE, act_alloc, stat_alloc and
// act_free are models/step_ops.h's, on DT: the activation dtype.
#define DT (m->cfg.dtype)

// The split (NULL shard: the whole model).
static int tp_of(const mo_gpt *m) { return m->shard ? m->shard->tp : 1; }
static int tp_rank_of(const mo_gpt *m) { return m->shard ? m->shard->tp_rank : 0; }
static int layers_of(const mo_gpt *m) { return m->shard ? m->shard->layers : m->cfg.layers; }
static int is_first(const mo_gpt *m) { return !m->shard || m->shard->first; }
static int is_last(const mo_gpt *m) { return !m->shard || m->shard->last; }

// Whether this step fuses the residual adds and the GELU backward into its GEMMs (ctx.h's
// fuse_epilogues: by default in 16 bits only).
static int fuse_epilogues(const mo_gpt *m) {
    const int f = m->ctx->fuse_epilogues;
    return f < 0 ? DT != MO_F32 : f;
}

// The checkpoint segments over this model's (or stage's) layers (ckpt_layout.h): a stage's sqrt is that of
// its own layer count, and every:K and segments:N are at most the stage's layers.
static mo_ckpt_layout segment_layout(const mo_gpt *m) {
    return mo_ckpt_layout_of(m->cfg.ckpt, m->cfg.ckpt_every, m->shard ? m->shard->layers : m->cfg.layers);
}

// Sum of the tp ranks' partial results (n elements of dt), the same bits on each. The communicator sums
// fp32: a 16-bit buffer is widened into fp32 scratch (exact), summed in rank order, and rounded back
// once. So a 16-bit split rounds each rank's partial GEMM output to dt before the sum, where the
// unsplit GEMM rounds the whole sum once: about one ulp of dt per all-reduce, not fp32 rounding.
static mo_status tp_allreduce(mo_gpt *m, void *buf, size_t n) {
    const mo_gpt_shard *sh = m->shard;
    if (!sh || sh->tp == 1) return MO_OK;
    if (DT == MO_F32) {
        return mo_comm_allreduce_sum(sh->tp_comm, (float *)buf, n);
    }
    void *f = NULL; // (n) fp32; taken before the all-reduce (an out-of-memory inside it would hang the peers)
    MO_TRY(mo_scratch_alloc(m->ctx, n * sizeof(float), &f));
    mo_status st = mo_cast_mixed(m->ctx, MO_F32, f, DT, buf, n);
    if (st == MO_OK) st = mo_comm_allreduce_sum(sh->tp_comm, (float *)f, n);
    if (st == MO_OK) st = mo_cast_mixed(m->ctx, DT, buf, MO_F32, f, n);
    mo_status st2 = mo_scratch_free(m->ctx, f);
    return st != MO_OK ? st : st2;
}

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

// Attention forward into a->att (probabilities or lse) and a->atty: the rank's heads (all of them
// unsplit), C and NH being its share of the channels and heads.
static mo_status attention_fwd(mo_gpt *m, step_state *s, block_acts *a) {
    const mo_gpt_config *c = &m->cfg;
    int B = s->Bm, T = c->seq, C = c->hidden / tp_of(m), NH = c->heads / tp_of(m);
    if (c->attn_fused) MO_TRY(stat_alloc(m, (size_t)B * NH * T, (float **)&a->att));
    else MO_TRY(act_alloc(m, (size_t)B * NH * T * T, &a->att));
    return gpt_attention_fwd(m->ctx, DT, c->attn_fused, a->atty, a->att, a->qkv, B, T, C, NH);
}

// need_out 0 (a recompute whose output nobody reads: the segment's last block) skips the last
// GEMM and residual add: backward needs fch_gelu, not out.
static mo_status block_forward(mo_gpt *m, step_state *s, int l, block_acts *a, int need_out) {
    const mo_gpt_config *c = &m->cfg;
    mo_ctx *x = m->ctx;
    // Cl, Fl: this rank's attention channels and MLP width (C and 4C unsplit); CC: C * Cl.
    int N = s->N, C = c->hidden, Cl = C / tp_of(m), Fl = 4 * C / tp_of(m);
    size_t NC = (size_t)N * C, CC = (size_t)C * Cl, NCl = (size_t)N * Cl, NF = (size_t)N * Fl;
    int bias0 = tp_rank_of(m) == 0; // a row-parallel GEMM's bias is added by one tp rank only
    MO_TRY(act_alloc(m, NC, &a->ln1));
    MO_TRY(stat_alloc(m, (size_t)N, &a->ln1_mean));
    MO_TRY(stat_alloc(m, (size_t)N, &a->ln1_rstd));
    OP(MO_PROF_NORM, mo_layernorm_forward_mixed(x, DT, a->ln1, a->ln1_mean, a->ln1_rstd, a->in, W(m, GPT_LN1W, l, C),
                                                W(m, GPT_LN1B, l, C), N, C));
    MO_TRY(act_alloc(m, 3 * NCl, &a->qkv));
    OP(MO_PROF_GEMM, gpt_matmul_fwd(x, DT, a->qkv, NULL, a->ln1, W(m, GPT_QKVW, l, 3 * CC), W(m, GPT_QKVB, l, 3 * Cl),
                                    N, C, 3 * Cl));
    MO_TRY(act_alloc(m, NCl, &a->atty));
    OP(MO_PROF_ATTENTION, attention_fwd(m, s, a));
    // resid2 = in + proj(atty). Unsplit, the residual is the GEMM's C input (fuse_epilogues); else the
    // GEMM writes resid2 (tp: a partial sum, all-reduced) and the residual add adds in place.
    const int fuse_add = fuse_epilogues(m) && tp_of(m) == 1;
    MO_TRY(act_alloc(m, NC, &a->resid2));
    if (fuse_add) {
        OP(MO_PROF_GEMM, gpt_matmul_fwd_add(x, DT, a->resid2, a->atty, W(m, GPT_PROJW, l, CC), W(m, GPT_PROJB, l, C),
                                            a->in, N, Cl, C));
    } else {
        OP(MO_PROF_GEMM, gpt_matmul_fwd(x, DT, a->resid2, NULL, a->atty, W(m, GPT_PROJW, l, CC),
                                        bias0 ? W(m, GPT_PROJB, l, C) : NULL, N, Cl, C));
        MO_TRY(tp_allreduce(m, a->resid2, NC));
        OP(MO_PROF_ELEMENTWISE, mo_residual_forward_mixed(x, DT, a->resid2, a->resid2, a->in, NC));
    }
    MO_TRY(act_alloc(m, NC, &a->ln2));
    MO_TRY(stat_alloc(m, (size_t)N, &a->ln2_mean));
    MO_TRY(stat_alloc(m, (size_t)N, &a->ln2_rstd));
    OP(MO_PROF_NORM, mo_layernorm_forward_mixed(x, DT, a->ln2, a->ln2_mean, a->ln2_rstd, a->resid2,
                                                W(m, GPT_LN2W, l, C), W(m, GPT_LN2B, l, C), N, C));
    MO_TRY(act_alloc(m, NF, &a->fch));
    MO_TRY(act_alloc(m, NF, &a->fch_gelu));
    OP(MO_PROF_GEMM, gpt_matmul_fwd(x, DT, a->fch, a->fch_gelu, a->ln2, W(m, GPT_FCW, l, 4 * CC),
                                    W(m, GPT_FCB, l, Fl), N, C, Fl));
    if (!need_out) return MO_OK;
    MO_TRY(act_alloc(m, NC, &a->out));
    if (fuse_add) {
        OP(MO_PROF_GEMM, gpt_matmul_fwd_add(x, DT, a->out, a->fch_gelu, W(m, GPT_FCPROJW, l, 4 * CC),
                                            W(m, GPT_FCPROJB, l, C), a->resid2, N, Fl, C));
        return MO_OK;
    }
    OP(MO_PROF_GEMM, gpt_matmul_fwd(x, DT, a->out, NULL, a->fch_gelu, W(m, GPT_FCPROJW, l, 4 * CC),
                                    bias0 ? W(m, GPT_FCPROJB, l, C) : NULL, N, Fl, C));
    MO_TRY(tp_allreduce(m, a->out, NC));
    OP(MO_PROF_ELEMENTWISE, mo_residual_forward_mixed(x, DT, a->out, a->out, a->resid2, NC));
    return MO_OK;
}

// dresid (B,T,C) dt holds d(out) on entry and d(in) on return.
// tp: dresid is the same on every tp rank (the stream is replicated), so the replicated parameters
// (LayerNorms, the row-parallel biases) get the same gradients everywhere; the column-parallel GEMMs'
// input gradients are partial sums over the rank's rows, all-reduced before the LayerNorm backward.
static mo_status block_backward(mo_gpt *m, step_state *s, int l, block_acts *a, void *dresid) {
    const mo_gpt_config *c = &m->cfg;
    mo_ctx *x = m->ctx;
    int N = s->N, C = c->hidden, B = s->Bm, T = c->seq, Cl = C / tp_of(m), NHl = c->heads / tp_of(m);
    int Fl = 4 * C / tp_of(m);
    size_t NC = (size_t)N * C, CC = (size_t)C * Cl, NCl = (size_t)N * Cl, NF = (size_t)N * Fl;
    float *const *G = m->grad_ptr;
    MO_TRY(act_alloc(m, NF, &a->d4));
    // d4 = d(fch): the GELU backward inside the fcproj dinp GEMM (fuse_epilogues), else after it
    if (fuse_epilogues(m)) {
        OP(MO_PROF_GEMM, gpt_matmul_bwd_dgelu(x, DT, a->d4, G[GPT_FCPROJW] + (size_t)l * 4 * CC,
                                              G[GPT_FCPROJB] + (size_t)l * C, dresid, a->fch_gelu,
                                              W(m, GPT_FCPROJW, l, 4 * CC), a->fch, N, Fl, C));
        act_free(m, &a->fch_gelu);
    } else {
        OP(MO_PROF_GEMM, gpt_matmul_bwd(x, DT, a->d4, G[GPT_FCPROJW] + (size_t)l * 4 * CC,
                                        G[GPT_FCPROJB] + (size_t)l * C, dresid, a->fch_gelu,
                                        W(m, GPT_FCPROJW, l, 4 * CC), N, Fl, C));
        act_free(m, &a->fch_gelu);
        OP(MO_PROF_ELEMENTWISE, mo_gelu_backward_mixed(x, DT, a->d4, a->fch, a->d4, NF));
    }
    act_free(m, &a->fch);
    MO_TRY(act_alloc(m, NC, &a->dC));
    OP(MO_PROF_GEMM, gpt_matmul_bwd(x, DT, a->dC, G[GPT_FCW] + (size_t)l * 4 * CC, G[GPT_FCB] + (size_t)l * Fl, a->d4,
                                    a->ln2, W(m, GPT_FCW, l, 4 * CC), N, C, Fl));
    MO_TRY(tp_allreduce(m, a->dC, NC));
    act_free(m, &a->d4);
    act_free(m, &a->ln2);
    OP(MO_PROF_NORM, mo_layernorm_backward_mixed(x, DT, dresid, G[GPT_LN2W] + (size_t)l * C, G[GPT_LN2B] + (size_t)l * C,
                                                 a->dC, a->resid2, W(m, GPT_LN2W, l, C), a->ln2_mean, a->ln2_rstd, N, C));
    act_free(m, &a->ln2_mean); act_free(m, &a->ln2_rstd); act_free(m, &a->resid2);
    // a->dC now receives d(atty) (N, Cl).
    OP(MO_PROF_GEMM, gpt_matmul_bwd(x, DT, a->dC, G[GPT_PROJW] + (size_t)l * CC, G[GPT_PROJB] + (size_t)l * C, dresid,
                                    a->atty, W(m, GPT_PROJW, l, CC), N, Cl, C));
    if (!a->att) {
        // Selective checkpointing dropped the probabilities: recompute them (the attention forward
        // again, its output into scratch), timed as recompute.
        void *scratch_out = NULL;
        MO_TRY(act_alloc(m, NCl, &scratch_out)); // before the timer: an out-of-memory leaks no events
        mo_timer t;
        mo_status ts = mo_timer_init(x, &t);
        if (ts != MO_OK) { act_free(m, &scratch_out); return ts; }
        if ((ts = mo_timer_start(x, &t)) != MO_OK) { mo_timer_destroy(&t); act_free(m, &scratch_out); return ts; }
        void *keep = a->atty;
        a->atty = scratch_out;
        PHASE(m, "recompute");
        mo_alloc_trace_mark(x->alloc, MO_TRACE_OP, "attention_fwd(m, s, a)");
        mo_status st = attention_fwd(m, s, a);
        mo_alloc_trace_mark(x->alloc, MO_TRACE_OP_END, NULL);
        PHASE(m, "backward");
        a->atty = keep;
        act_free(m, &scratch_out);
        double ms = 0;
        if (st == MO_OK) st = mo_timer_stop(x, &t, &ms);
        mo_timer_destroy(&t);
        MO_TRY(st);
        s->recompute_ms += ms;
    }
    MO_TRY(act_alloc(m, 3 * NCl, &a->dqkv));
    OP(MO_PROF_ATTENTION, gpt_attention_bwd(x, DT, c->attn_fused, a->dqkv, a->dC, a->qkv, a->atty, a->att, B, T, Cl,
                                            NHl));
    act_free(m, &a->att); act_free(m, &a->atty);
    // a->dC now receives d(ln1).
    OP(MO_PROF_GEMM, gpt_matmul_bwd(x, DT, a->dC, G[GPT_QKVW] + (size_t)l * 3 * CC, G[GPT_QKVB] + (size_t)l * 3 * Cl,
                                    a->dqkv, a->ln1, W(m, GPT_QKVW, l, 3 * CC), N, C, 3 * Cl));
    MO_TRY(tp_allreduce(m, a->dC, NC));
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
    int L = layers_of(m);
    if (s->acts) {
        for (int l = 0; l < L; l++) {
            block_acts *a = &s->acts[l];
            block_free_internals(m, a);
            if (a->in && (l == 0 || a->in != s->acts[l - 1].out)) mo_free(m->ctx->alloc, a->in);
            a->in = NULL;
        }
        for (int l = 0; l < L; l++) act_free(m, &s->acts[l].out);
    }
    act_free(m, &s->enc);
    act_free(m, &s->lnf); act_free(m, &s->lnf_mean); act_free(m, &s->lnf_rstd); act_free(m, &s->logits);
    act_free(m, &s->dhead); act_free(m, &s->dresid);
}

// A stage after the first finds its input (the previous stage's output) in s->enc; a stage before
// the last leaves its output in acts[L-1].out (to send) and computes no loss.
static mo_status forward(step_state *s) {
    mo_gpt *m = s->m;
    const mo_gpt_config *c = &m->cfg;
    mo_ctx *x = m->ctx;
    int N = s->N, C = c->hidden, T = c->seq, V = c->vocab, L = layers_of(m);
    size_t NC = (size_t)N * C, off = (size_t)s->micro * N;
    mo_ckpt_layout K = segment_layout(m);
    mo_cost_set_region(x, MO_COST_BODY); // the cost trace's part of the step (kernels/cost.h)
    PHASE(m, "forward");
    if (is_first(m)) {
        MO_TRY(act_alloc(m, NC, &s->enc));
        OP(MO_PROF_ELEMENTWISE, mo_encoder_forward_mixed(x, DT, s->enc, m->inputs + off, m->wparam_ptr[GPT_WTE],
                                                         m->wparam_ptr[GPT_WPE], s->Bm, T, C));
    }
    for (int l = 0; l < L; l++) {
        block_acts *a = &s->acts[l];
        a->in = l == 0 ? s->enc : s->acts[l - 1].out;
        if (l == 0) s->enc = NULL; // owned by acts[0] from here on
        MO_TRY(block_forward(m, s, l, a, 1));
        if (l < K.blocks) { // in a checkpointed segment
            block_free_internals(m, a);
            // Only a segment's first input is kept; the inputs inside a segment are recomputed.
            if (l % K.len != 0) { act_free(m, &a->in); s->acts[l - 1].out = NULL; }
        } else if (c->ckpt == MO_CKPT_SELECTIVE && !c->attn_fused) {
            act_free(m, &a->att);
        }
    }
    if (!is_last(m)) return MO_OK;
    mo_cost_set_region(x, MO_COST_HEAD);
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
    mo_cost_set_region(x, MO_COST_BODY);
    return MO_OK;
}

// A stage before the last finds d(its output) in s->dresid (received); a stage after the first leaves
// d(its input) there (to send).
static mo_status backward(step_state *s) {
    mo_gpt *m = s->m;
    const mo_gpt_config *c = &m->cfg;
    mo_ctx *x = m->ctx;
    int N = s->N, C = c->hidden, T = c->seq, V = c->vocab, L = layers_of(m);
    size_t NC = (size_t)N * C, off = (size_t)s->micro * N;
    mo_ckpt_layout K = segment_layout(m);
    mo_cost_set_region(x, MO_COST_HEAD);
    PHASE(m, "backward");
    if (is_last(m)) {
        // logits now hold dlogits.
        MO_TRY(act_alloc(m, NC, &s->dhead));
        OP(MO_PROF_GEMM, gpt_matmul_bwd(x, DT, s->dhead, m->grad_ptr[GPT_WTE], NULL, s->logits, s->lnf,
                                        m->wparam_ptr[GPT_WTE], N, C, V));
        act_free(m, &s->logits);
        MO_TRY(act_alloc(m, NC, &s->dresid));
        OP(MO_PROF_ELEMENTWISE, mo_memset_zero(x, s->dresid, NC * mo_dtype_size(DT)));
        OP(MO_PROF_NORM, mo_layernorm_backward_mixed(x, DT, s->dresid, m->grad_ptr[GPT_LNFW], m->grad_ptr[GPT_LNFB],
                                                     s->dhead, s->acts[L - 1].out, m->wparam_ptr[GPT_LNFW], s->lnf_mean,
                                                     s->lnf_rstd, N, C));
        act_free(m, &s->dhead); act_free(m, &s->lnf); act_free(m, &s->lnf_mean); act_free(m, &s->lnf_rstd);
        act_free(m, &s->acts[L - 1].out);
    }
    mo_cost_set_region(x, MO_COST_BODY);
    void *dresid = s->dresid;
    mo_status st = MO_OK;
    // The blocks outside checkpointed segments (all of them under none and selective), then the
    // segments, last first: each recomputed, then its backward.
    for (int l = L - 1; l >= K.blocks && st == MO_OK; l--) {
        st = block_backward(m, s, l, &s->acts[l], dresid);
        if (st == MO_OK && l > 0) s->acts[l - 1].out = NULL; // freed as acts[l].in
    }
    for (int g = mo_ckpt_layout_segments(K) - 1; g >= 0 && st == MO_OK; g--) {
        int a0 = g * K.len, b0 = a0 + K.len - 1 < K.blocks - 1 ? a0 + K.len - 1 : K.blocks - 1;
        mo_timer t;
        MO_TRY(mo_timer_init(x, &t));
        st = mo_timer_start(x, &t);
        PHASE(m, "recompute");
        for (int l = a0; l <= b0 && st == MO_OK; l++) {
            if (l > a0) s->acts[l].in = s->acts[l - 1].out;
            st = block_forward(m, s, l, &s->acts[l], l < b0);
        }
        double ms = 0;
        if (st == MO_OK) st = mo_timer_stop(x, &t, &ms);
        mo_timer_destroy(&t);
        s->recompute_ms += ms;
        PHASE(m, "backward");
        for (int l = b0; l >= a0 && st == MO_OK; l--) {
            st = block_backward(m, s, l, &s->acts[l], dresid);
            if (st == MO_OK && l > 0) s->acts[l - 1].out = NULL; // freed as acts[l].in
        }
    }
    if (!is_first(m)) return st; // s->dresid: d(input), for the previous stage
    if (st == MO_OK) st = mo_prof_begin(x, MO_PROF_ELEMENTWISE);
    if (st == MO_OK)
        st = mo_encoder_backward_mixed(x, DT, m->grad_ptr[GPT_WTE], m->grad_ptr[GPT_WPE], dresid, m->inputs + off,
                                       m->inputs_host ? m->inputs_host + off : NULL, s->Bm, T, C, V); // NULL on dry
    if (st == MO_OK) st = mo_prof_end(x);
    act_free(m, &s->dresid);
    return st;
}

// ---- the pipeline (pp > 1): 1F1B ------------------------------------------------------------------
// Stage st of P runs min(P-st-1, M) forwards (warm-up), then alternates one forward and one backward,
// then runs the remaining backwards (cool-down): the non-interleaved 1F1B schedule of PipeDream-Flush
// (Narayanan et al. 2021) and Megatron-LM, the same gradients as GPipe (all forwards, then all
// backwards) with the same bubble, but stage st holds at most min(P - st, M) micro-batches'
// activations at once (stage 0: P, against GPipe's M). Sends and receives pair one-to-one between
// neighbours (Megatron's send_forward_recv_backward / send_backward_recv_forward are sendrecvs here),
// so the blocking point-to-point ops never deadlock.

static size_t stage_bytes(const step_state *s) { return (size_t)s->N * s->m->cfg.hidden * mo_dtype_size(s->m->cfg.dtype); }

// recv_forward: the previous stage's output into s->enc (the input of this stage's first block).
static mo_status recv_input(step_state *s) {
    mo_gpt *m = s->m;
    const mo_gpt_shard *sh = m->shard;
    if (sh->first) return MO_OK;
    MO_TRY(act_alloc(m, (size_t)s->N * m->cfg.hidden, &s->enc));
    return mo_comm_recv(sh->pp_comm, s->enc, stage_bytes(s), sh->stage - 1);
}

// send_forward: this stage's output to the next stage, then freed (no backward reads it).
static mo_status send_output(step_state *s) {
    mo_gpt *m = s->m;
    const mo_gpt_shard *sh = m->shard;
    if (sh->last) return MO_OK;
    void **out = &s->acts[sh->layers - 1].out;
    MO_TRY(mo_comm_send(sh->pp_comm, *out, stage_bytes(s), sh->stage + 1));
    act_free(m, out);
    return MO_OK;
}

// send_forward_recv_backward: f's output out, d(output) of b in (b->dresid).
static mo_status send_output_recv_grad(step_state *f, step_state *b) {
    mo_gpt *m = f->m;
    const mo_gpt_shard *sh = m->shard;
    if (sh->last) return MO_OK; // the loss makes the last stage's gradient
    void **out = &f->acts[sh->layers - 1].out;
    MO_TRY(act_alloc(m, (size_t)b->N * m->cfg.hidden, &b->dresid));
    MO_TRY(mo_comm_sendrecv(sh->pp_comm, *out, stage_bytes(f), sh->stage + 1, b->dresid, stage_bytes(b), sh->stage + 1));
    act_free(m, out);
    return MO_OK;
}

// recv_backward: d(output) of b from the next stage.
static mo_status recv_grad(step_state *b) {
    mo_gpt *m = b->m;
    const mo_gpt_shard *sh = m->shard;
    if (sh->last) return MO_OK;
    MO_TRY(act_alloc(m, (size_t)b->N * m->cfg.hidden, &b->dresid));
    return mo_comm_recv(sh->pp_comm, b->dresid, stage_bytes(b), sh->stage + 1);
}

// send_backward (f == NULL) or send_backward_recv_forward: d(input) of b out, then freed; f's input in.
static mo_status send_grad_recv_input(step_state *b, step_state *f) {
    mo_gpt *m = b->m;
    const mo_gpt_shard *sh = m->shard;
    if (sh->first) return MO_OK; // the embedding took d(input)
    // Allocate before the op, as the other stage helpers do: an out-of-memory after the communicator's
    // entry barrier would leave the previous stage waiting in its sendrecv forever.
    if (f) MO_TRY(act_alloc(m, (size_t)f->N * m->cfg.hidden, &f->enc));
    if (f) {
        MO_TRY(mo_comm_sendrecv(sh->pp_comm, b->dresid, stage_bytes(b), sh->stage - 1, f->enc, stage_bytes(f),
                                sh->stage - 1));
    } else {
        MO_TRY(mo_comm_send(sh->pp_comm, b->dresid, stage_bytes(b), sh->stage - 1));
    }
    act_free(m, &b->dresid);
    return MO_OK;
}

static mo_status pipeline(step_state *slot, int nslots) {
    mo_gpt *m = slot[0].m;
    const mo_gpt_shard *sh = m->shard;
    int P = sh->pp, M = m->cfg.accum;
    int warm = P - sh->stage - 1 < M ? P - sh->stage - 1 : M, rem = M - warm;
#define SLOT(k) (&slot[(k) % nslots])
    for (int i = 0; i < warm; i++) {
        step_state *f = SLOT(i);
        f->micro = i;
        MO_TRY(recv_input(f));
        MO_TRY(forward(f));
        MO_TRY(send_output(f));
    }
    if (rem > 0) MO_TRY(recv_input(SLOT(warm)));
    for (int i = 0; i < rem; i++) {
        step_state *f = SLOT(warm + i), *b = SLOT(i);
        f->micro = warm + i;
        MO_TRY(forward(f));
        MO_TRY(send_output_recv_grad(f, b));
        MO_TRY(backward(b));
        MO_TRY(send_grad_recv_input(b, i + 1 < rem ? SLOT(warm + i + 1) : NULL));
    }
    for (int i = 0; i < warm; i++) {
        step_state *b = SLOT(rem + i);
        MO_TRY(recv_grad(b));
        MO_TRY(backward(b));
        MO_TRY(send_grad_recv_input(b, NULL));
    }
#undef SLOT
    return MO_OK;
}

// The tied embedding: the first stage's wte gradient (the embedding's) plus the last stage's (the LM
// head's), summed on both (Megatron's embedding group), so both copies take the same update.
static mo_status tie_embedding(mo_gpt *m) {
    const mo_gpt_shard *sh = m->shard;
    if (!sh || sh->pp == 1 || !(sh->first || sh->last)) return MO_OK;
    return mo_comm_allreduce_sum(sh->emb_comm, m->grad_ptr[GPT_WTE], m->param_sizes[GPT_WTE]);
}

mo_status mo_gpt_forward_backward(mo_gpt *m) {
    const mo_gpt_config *c = &m->cfg;
    mo_ctx *x = m->ctx;
    const mo_gpt_shard *sh = m->shard;
    // One micro-batch in flight (no pipeline), or min(P - stage, M) on a pipeline stage.
    int nslots = 1;
    if (sh && sh->pp > 1) nslots = sh->pp - sh->stage < c->accum ? sh->pp - sh->stage : c->accum;
    step_state *slot = calloc((size_t)nslots, sizeof *slot);
    if (!slot) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the step");
    mo_status st = MO_OK;
    for (int i = 0; i < nslots; i++) {
        slot[i].m = m;
        slot[i].Bm = c->batch / c->accum;
        slot[i].N = slot[i].Bm * c->seq;
        slot[i].acts = calloc((size_t)layers_of(m), sizeof *slot[i].acts);
        if (!slot[i].acts) st = MO_FAIL(MO_ERR_OOM, "host memory exhausted for the step");
    }
    mo_cost_set_region(x, MO_COST_OPTIMIZER); // zeroing the gradients: the optimizer's part of the step
    if (st == MO_OK) st = mo_memset_zero(x, m->grads, m->num_params * sizeof(float));
    mo_cost_set_region(x, MO_COST_BODY);
    if (nslots == 1 && !(sh && sh->pp > 1)) {
        step_state *s = &slot[0];
        for (int k = 0; k < c->accum && st == MO_OK; k++) {
            s->micro = k;
            st = forward(s);
            if (st == MO_OK) st = backward(s);
            free_all(s); // a failure (out of memory) unwinds every live activation
        }
    } else if (st == MO_OK) {
        st = pipeline(slot, nslots);
    }
    m->recompute_ms = 0;
    for (int i = 0; i < nslots; i++) {
        if (slot[i].acts) free_all(&slot[i]);
        m->recompute_ms += slot[i].recompute_ms;
        free(slot[i].acts);
    }
    free(slot);
    MO_TRY(st);
    MO_TRY(tie_embedding(m));
    size_t BT = (size_t)c->batch * c->seq;
    if (x->backend == MO_BACKEND_DRY || !m->losses) { m->last_loss = NAN; return MO_OK; } // no loss before the last stage
    float *h = malloc(BT * sizeof(float));
    if (!h) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the losses");
    st = mo_memcpy_d2h(x, h, m->losses, BT * sizeof(float));
    double sum = 0;
    for (size_t i = 0; i < BT; i++) sum += h[i];
    free(h);
    m->last_loss = sum / (double)BT;
    return st;
}

// The squared gradient norm of the whole split model, the same on every rank: each rank sums its
// own tensors once (the tp-split ones on every rank, the replicated ones on tp rank 0, the tied wte
// on the first stage), then every rank gathers all W partial sums (each as two floats, hi + lo, ~48
// bits) and adds them in rank order.
static mo_status split_sumsq(mo_gpt *m, double *ss) {
    const mo_gpt_shard *sh = m->shard;
    double local = 0;
    for (int p = 0; p < GPT_NPARAMS; p++) {
        if (!m->param_sizes[p]) continue;
        if (!gpt_param_is_tp_split(p) && sh->tp_rank != 0) continue;
        if (p == GPT_WTE && !sh->first) continue;
        double v = 0;
        OP_CTX(m->ctx, MO_PROF_OPTIMIZER, mo_sumsq(m->ctx, &v, m->grad_ptr[p], m->param_sizes[p]));
        local += v;
    }
    if (sh->world == 1) { *ss = local; return MO_OK; }
    int W = sh->world;
    float *all = malloc((size_t)W * 2 * sizeof(float)), mine[2];
    if (!all) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the gradient norm");
    mine[0] = (float)local;
    mine[1] = (float)(local - (double)mine[0]);
    void *dev = NULL;
    mo_status st = mo_scratch_alloc(m->ctx, (size_t)W * 2 * sizeof(float), &dev);
    float *d = dev;
    if (st == MO_OK) st = mo_memcpy_h2d(m->ctx, d + 2 * sh->rank, mine, sizeof mine);
    if (st == MO_OK) st = mo_comm_allgather(sh->world_comm, d + 2 * sh->rank, d, 2);
    if (st == MO_OK) st = mo_memcpy_d2h(m->ctx, all, d, (size_t)W * 2 * sizeof(float));
    if (dev) mo_scratch_free(m->ctx, dev);
    double sum = 0;
    for (int r = 0; r < W; r++) sum += (double)all[2 * r] + (double)all[2 * r + 1];
    free(all);
    *ss = sum;
    return st;
}

// *flag := 1 on every rank if it is non-zero on any rank (a world all-reduce of 0/1 as fp32): the loss
// scaler of a split must skip, halve and grow on all ranks together, or their scales and weights part.
static mo_status split_any(mo_gpt *m, int *flag) {
    const mo_gpt_shard *sh = m->shard;
    void *dev = NULL;
    float v = *flag ? 1.0f : 0.0f;
    MO_TRY(mo_scratch_alloc(m->ctx, sizeof(float), &dev));
    mo_status st = mo_memcpy_h2d(m->ctx, dev, &v, sizeof v);
    if (st == MO_OK) st = mo_comm_allreduce_sum(sh->world_comm, (float *)dev, 1);
    if (st == MO_OK && m->ctx->backend != MO_BACKEND_DRY) st = mo_memcpy_d2h(m->ctx, &v, dev, sizeof v);
    mo_status st2 = mo_scratch_free(m->ctx, dev);
    if (st != MO_OK) return st;
    *flag = v > 0;
    return st2;
}

// The loss scaler's verdict on the gradients of this step (fp16): 1 when the update must be skipped.
// An inf or NaN anywhere halves the scale; scaler_interval clean steps in a row double it.
static mo_status scaler_check(mo_gpt *m, int *skip) {
    *skip = 0;
    if (!m->cfg.loss_scaling) return MO_OK;
    int bad = 0;
    OP_CTX(m->ctx, MO_PROF_OPTIMIZER, mo_nonfinite(m->ctx, m->grads, m->num_params, &bad));
    // The test hook is ignored on dry: there the verdict does not travel (nothing moves), so one rank's
    // injected inf would leave the others waiting in the norm's all-gather.
    if (m->inject_nonfinite && m->ctx->backend != MO_BACKEND_DRY) bad = 1;
    m->inject_nonfinite = 0;
    if (m->shard && m->shard->world > 1) MO_TRY(split_any(m, &bad)); // one verdict for every rank
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
    mo_cost_set_region(x, MO_COST_OPTIMIZER); // until the next forward
    int skip = 0;
    PHASE(m, "optimizer");
    MO_TRY(scaler_check(m, &skip));
    m->last_skipped = skip;
    if (skip) { m->last_grad_norm = NAN; return MO_OK; }
    double ss = 0;
    if (m->shard) MO_TRY(split_sumsq(m, &ss));
    else OP(MO_PROF_OPTIMIZER, mo_sumsq(m->ctx, &ss, m->grads, m->num_params));
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
