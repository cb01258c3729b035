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
// go to the next stage and their gradients come back, in the 1F1B order.
//
// Sequence parallelism (--sp, m->shard->sp; Korthikanti et al. 2022): the replicated part is sharded
// along the sequence instead. Each tp rank holds positions [r T/tp, (r+1) T/tp) of every sequence of the
// residual stream, the LayerNorms' inputs, outputs and statistics, the embedding and the head: (B, T/tp,
// C) slices, Ts = T/tp below. In a block, the LayerNorm output is all-gathered along T (T/tp -> T) before
// the column-parallel qkv and fc GEMMs, and the row-parallel proj and fcproj outputs are reduce-scattered
// (summed over the tp ranks, scattered along T) where the all-reduces were. Backward, the conjugates: the
// output gradient of proj and fcproj all-gathered, the gathered input's gradient (d ln1, d ln2)
// reduce-scattered; the stored LayerNorm output slice is all-gathered again for the weight gradient
// (Megatron-LM's choice: the slice is what is kept, so the kept activations are all divided by tp). The
// embedding and the head work on the rank's slice too: it embeds its own positions (wpe rows [r T/tp,
// ...)), and the final LayerNorm, the tied LM head (logits (B, T/tp, V)) and the cross-entropy run on
// the slice; the loss is the mean over the ranks' slices. So wte, wpe and every LayerNorm's gradient are
// partial sums over the rank's positions: summed over the tp ranks once per step (sp_reduce_grads).
//
// The order of it all (micro-batches, checkpoint segments, the pipeline, the update) is the generic
// schedule's (strategies/schedule.h); this file gives it GPT's embedding, blocks and head.
#include "gpt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "gpt_ops.h"
#include "gpt_shard.h"
#include "gpt_zero.h"
#include "models/ckpt_layout.h"
#include "step_ops.h"
#include "kernels/cost.h"
#include "strategies/comm.h"
#include "strategies/ranks.h"
#include "strategies/schedule.h"

// The tensors one block produces (the schedule's block state, strategies/schedule.h). in is not
// owned: it is the schedule's x[l] (the previous block's out, or the embedding output); out is handed
// to the schedule as x[l+1] once made.
typedef struct block_acts {
    const void *in;                     // (B,T,C) dt
    void *ln1;                          // (B,T,C) dt
    float *ln1_mean, *ln1_rstd;         // (B,T), (B,T) fp32
    void *qkv;                          // (B,T,3C) dt
    void *att;                          // (B,NH,T,T) dt materialized probabilities, or lse (B,NH,T) fp32 when fused
    void *atty;                         // (B,T,C) dt attention output, heads concatenated
    void *resid2;                       // (B,T,C) dt in + proj(atty)
    void *ln2;                          // (B,T,C) dt
    float *ln2_mean, *ln2_rstd;         // (B,T), (B,T) fp32
    void *fch, *fch_gelu;               // (B,T,4C) dt pre-activation and GELU
    void *out;                          // (B,T,C) dt resid2 + fcproj(fch_gelu), until handed over
    void *d4, *dC, *dqkv;               // backward scratch (B,T,4C), (B,T,C), (B,T,3C) dt: here so an
                                        // out-of-memory midway is unwound by block_free_internals
    // Sequence parallel: in, ln1, resid2, ln2, out and their statistics are the (B,T/tp,C) slices;
    void *g;                            // (B,T,C) dt the gathered LN output or gradient, or the
                                        // row-parallel partial sums before their reduce-scatter (transient)
    void *ds;                           // (B,T/tp,C) dt backward: the reduce-scattered d(ln1), d(ln2)
} block_acts;

// One micro-batch's own tensors (the schedule's slot state).
typedef struct step_state {
    int Bm, N;          // micro-batch, rows = Bm*T
    int Ts, Ns;         // the positions this rank holds of each sequence (T/tp under --sp, else T); Ns = Bm*Ts
    // The embedding's and head's tensors hold the rank's Ts positions of each sequence (T unless --sp).
    void *enc;          // (B,Ts,C) dt embedding output, until handed over as x[0]
    void *lnf;          // (B,Ts,C) dt
    float *lnf_mean, *lnf_rstd; // (B,Ts) fp32
    void *logits;       // (B,Ts,V) dt; dlogits in backward
    void *dhead;        // (B,Ts,C) dt d(lnf) in backward
    void *dresid;       // (B,Ts,C) dt the residual stream's gradient, until handed over
    double recompute_ms; // selective checkpointing's attention recompute
} step_state;

// OP / OP_CTX (an op, timed and named in the allocation trace), PHASE, act_alloc, stat_alloc and
// act_free are models/step_ops.h's, on DT: the activation dtype.
#define DT (m->cfg.dtype)

// The split (NULL shard: the whole model).
static int tp_of(const mo_gpt *m) { return m->shard ? m->shard->tp : 1; }
static int tp_rank_of(const mo_gpt *m) { return m->shard ? m->shard->tp_rank : 0; }
static int layers_of(const mo_gpt *m) { return m->shard ? m->shard->layers : m->cfg.layers; }
static int seqpar(const mo_gpt *m) { return m->shard && m->shard->sp && m->shard->tp > 1; }

// Whether this step fuses the residual adds and the GELU backward into its GEMMs (ctx.h's
// fuse_epilogues: by default in 16 bits only).
static int fuse_epilogues(const mo_gpt *m) {
    const int f = m->ctx->fuse_epilogues;
    return f < 0 ? DT != MO_F32 : f;
}

// Whether the projections' bias gradients (attproj's, fcproj's: column sums of the residual stream's gradient)
// come from the LayerNorm backward that makes that gradient (ctx.h's ln_dsum, mo_layernorm_backward_sum_mixed):
// block l's ln2 backward sums attproj l's, its ln1 backward fcproj l-1's, the final LayerNorm's fcproj L-1's, and
// the projections' GEMM backwards then read dresid for dinp and dweight only (one pass over it less a GEMM, and
// two launches). 16 bits, an unsplit model only (no shard of any kind, kept simple): a pipeline stage's edge
// block gets its gradient from another stage, ZeRO's block units make a block's gradient only around its own
// backward, sequence parallel holds a slice of the rows. (Offload copies the gradients to the host in the
// update, after them all.)
static int proj_bias_in_ln(const mo_gpt *m) {
    return DT != MO_F32 && m->ctx->ln_dsum && !m->shard && !m->zero && m->cfg.hidden <= MO_LN_DSUM_MAX_C;
}

// The 16-bit LayerNorm backward, summing dinp's columns into dsum as well when dsum is given (proj_bias_in_ln)
static mo_status ln_backward(mo_gpt *m, void *dinp, float *dweight, float *dbias, float *dsum, const void *dout,
                             const void *inp, const void *weight, const float *mean, const float *rstd, int N) {
    const int C = m->cfg.hidden;
    return dsum ? mo_layernorm_backward_sum_mixed(m->ctx, DT, dinp, dweight, dbias, dsum, dout, inp, weight, mean, rstd, N, C)
                : mo_layernorm_backward_mixed(m->ctx, DT, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

// The checkpoint segments over this model's (or stage's) layers (ckpt_layout.h): a stage's sqrt is that of
// its own layer count, and every:K and segments:N are at most the stage's layers.
static mo_ckpt_layout segment_layout(const mo_gpt *m) {
    return mo_ckpt_layout_of(m->cfg.ckpt, m->cfg.ckpt_every, m->shard ? m->shard->layers : m->cfg.layers);
}

// Sum of the tp ranks' partial results (n elements of dt), the same bits on each: strategies/ranks.h
// (16-bit buffers summed in fp32 and rounded back once: about one ulp of dt per all-reduce).
static mo_status tp_allreduce(mo_gpt *m, void *buf, size_t n) {
    const mo_gpt_shard *sh = m->shard;
    if (!sh || sh->tp == 1) return MO_OK;
    return mo_ranks_allreduce(sh->tp_comm, m->ctx, DT, buf, n);
}

// Sequence parallel: buf (B, T, C) dt := every tp rank's slice (B, T/tp, C) of it, along T (the B
// sequences are the collective's outer blocks). The bits move as they are.
static mo_status sp_gather(mo_gpt *m, step_state *s, const void *slice, void *buf) {
    return mo_ranks_allgather_seq(m->shard->tp_comm, DT, slice, buf, (size_t)s->Bm, (size_t)s->Ts * m->cfg.hidden);
}

// Sequence parallel: slice (B, T/tp, C) dt := the rank's positions of the sum over the tp ranks of
// their partial buf (B, T, C) (rank order; 16 bits summed in fp32 and rounded once, as tp_allreduce).
static mo_status sp_scatter(mo_gpt *m, step_state *s, const void *buf, void *slice) {
    return mo_ranks_reduce_scatter_seq(m->shard->tp_comm, m->ctx, DT, buf, slice, (size_t)s->Bm,
                                       (size_t)s->Ts * m->cfg.hidden);
}

// Layer l's slice of parameter tensor p in the working copy: elem elements per layer. ZeRO's blockwise
// levels (gpt_zero.h) keep block l's tensors together in unit 1 + l (level 3: while gathered).
static const void *W(mo_gpt *m, int p, int l, size_t elem) {
    const gpt_zero *z = m->zero;
    if (z && z->blockwise) return (const char *)z->wunit[1 + l] + z->in_unit[p] * mo_dtype_size(DT);
    return (const char *)m->wparam_ptr[p] + (size_t)l * elem * mo_dtype_size(DT);
}

// Layer l's slice of the gradient of tensor p (fp32): in the blockwise levels, in unit 1 + l's full
// gradient, made before the block's backward.
static float *GB(mo_gpt *m, int p, int l, size_t elem) {
    const gpt_zero *z = m->zero;
    if (z && z->blockwise) return z->gunit[1 + l] + z->in_unit[p];
    return m->grad_ptr[p] + (size_t)l * elem;
}

// The global batch the loss is the mean of: a data-parallel rank holds batch/dp of it (gpt_zero.h).
static float global_batch(const mo_gpt *m) { return (float)m->cfg.batch * (float)(m->shard ? m->shard->dp > 1 ? m->shard->dp : 1 : 1); }

static void block_free_internals(mo_gpt *m, block_acts *a) {
    act_free(m, &a->ln1); act_free(m, &a->ln1_mean); act_free(m, &a->ln1_rstd);
    act_free(m, &a->qkv); act_free(m, &a->att); act_free(m, &a->atty); act_free(m, &a->resid2);
    act_free(m, &a->ln2); act_free(m, &a->ln2_mean); act_free(m, &a->ln2_rstd);
    act_free(m, &a->fch); act_free(m, &a->fch_gelu);
    act_free(m, &a->d4); act_free(m, &a->dC); act_free(m, &a->dqkv);
    act_free(m, &a->g); act_free(m, &a->ds);
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
// Sequence parallel (seqpar): in, ln1, resid2, ln2, out and the statistics are the rank's (B,T/tp,C)
// slices (Ns rows); the LN outputs are gathered into a->g before the column-parallel GEMMs and the
// row-parallel partial outputs reduce-scattered out of a->g.
static mo_status block_forward(mo_gpt *m, step_state *s, int l, block_acts *a, int need_out) {
    const mo_gpt_config *c = &m->cfg;
    mo_ctx *x = m->ctx;
    // Cl, Fl: this rank's attention channels and MLP width (C and 4C unsplit); CC: C * Cl.
    int N = s->N, Ns = s->Ns, C = c->hidden, Cl = C / tp_of(m), Fl = 4 * C / tp_of(m);
    size_t NC = (size_t)N * C, CC = (size_t)C * Cl, NCl = (size_t)N * Cl, NF = (size_t)N * Fl, NsC = (size_t)Ns * C;
    int bias0 = tp_rank_of(m) == 0; // a row-parallel GEMM's bias is added by one tp rank only
    const int sp = seqpar(m);
    MO_TRY(act_alloc(m, NsC, &a->ln1));
    MO_TRY(stat_alloc(m, (size_t)Ns, &a->ln1_mean));
    MO_TRY(stat_alloc(m, (size_t)Ns, &a->ln1_rstd));
    OP(MO_PROF_NORM, mo_layernorm_forward_mixed(x, DT, a->ln1, a->ln1_mean, a->ln1_rstd, a->in, W(m, GPT_LN1W, l, C),
                                                W(m, GPT_LN1B, l, C), Ns, C));
    const void *ln1_all = a->ln1; // (B,T,C): the qkv GEMM reads every position
    if (sp) {
        MO_TRY(act_alloc(m, NC, &a->g));
        MO_TRY(sp_gather(m, s, a->ln1, a->g));
        ln1_all = a->g;
    }
    MO_TRY(act_alloc(m, 3 * NCl, &a->qkv));
    OP(MO_PROF_GEMM, gpt_matmul_fwd(x, DT, a->qkv, NULL, ln1_all, W(m, GPT_QKVW, l, 3 * CC), W(m, GPT_QKVB, l, 3 * Cl),
                                    N, C, 3 * Cl));
    act_free(m, &a->g);
    MO_TRY(act_alloc(m, NCl, &a->atty));
    OP(MO_PROF_ATTENTION, attention_fwd(m, s, a));
    // resid2 = in + proj(atty). Unsplit, the residual is the GEMM's C input (fuse_epilogues); else the
    // GEMM writes resid2 (tp: a partial sum, all-reduced) and the residual add adds in place. Sequence
    // parallel: the GEMM writes the (B,T,C) partial sum into a->g, reduce-scattered into the slice.
    const int fuse_add = fuse_epilogues(m) && tp_of(m) == 1;
    MO_TRY(act_alloc(m, NsC, &a->resid2));
    if (fuse_add) {
        OP(MO_PROF_GEMM, gpt_matmul_fwd_add(x, DT, a->resid2, a->atty, W(m, GPT_PROJW, l, CC), W(m, GPT_PROJB, l, C),
                                            a->in, N, Cl, C));
    } else if (sp) {
        MO_TRY(act_alloc(m, NC, &a->g));
        OP(MO_PROF_GEMM, gpt_matmul_fwd(x, DT, a->g, NULL, a->atty, W(m, GPT_PROJW, l, CC),
                                        bias0 ? W(m, GPT_PROJB, l, C) : NULL, N, Cl, C));
        MO_TRY(sp_scatter(m, s, a->g, a->resid2));
        act_free(m, &a->g);
        OP(MO_PROF_ELEMENTWISE, mo_residual_forward_mixed(x, DT, a->resid2, a->resid2, a->in, NsC));
    } else {
        OP(MO_PROF_GEMM, gpt_matmul_fwd(x, DT, a->resid2, NULL, a->atty, W(m, GPT_PROJW, l, CC),
                                        bias0 ? W(m, GPT_PROJB, l, C) : NULL, N, Cl, C));
        MO_TRY(tp_allreduce(m, a->resid2, NC));
        OP(MO_PROF_ELEMENTWISE, mo_residual_forward_mixed(x, DT, a->resid2, a->resid2, a->in, NC));
    }
    MO_TRY(act_alloc(m, NsC, &a->ln2));
    MO_TRY(stat_alloc(m, (size_t)Ns, &a->ln2_mean));
    MO_TRY(stat_alloc(m, (size_t)Ns, &a->ln2_rstd));
    OP(MO_PROF_NORM, mo_layernorm_forward_mixed(x, DT, a->ln2, a->ln2_mean, a->ln2_rstd, a->resid2,
                                                W(m, GPT_LN2W, l, C), W(m, GPT_LN2B, l, C), Ns, C));
    const void *ln2_all = a->ln2;
    if (sp) {
        MO_TRY(act_alloc(m, NC, &a->g));
        MO_TRY(sp_gather(m, s, a->ln2, a->g));
        ln2_all = a->g;
    }
    MO_TRY(act_alloc(m, NF, &a->fch));
    MO_TRY(act_alloc(m, NF, &a->fch_gelu));
    OP(MO_PROF_GEMM, gpt_matmul_fwd(x, DT, a->fch, a->fch_gelu, ln2_all, W(m, GPT_FCW, l, 4 * CC),
                                    W(m, GPT_FCB, l, Fl), N, C, Fl));
    act_free(m, &a->g);
    if (!need_out) return MO_OK;
    MO_TRY(act_alloc(m, NsC, &a->out));
    if (fuse_add) {
        OP(MO_PROF_GEMM, gpt_matmul_fwd_add(x, DT, a->out, a->fch_gelu, W(m, GPT_FCPROJW, l, 4 * CC),
                                            W(m, GPT_FCPROJB, l, C), a->resid2, N, Fl, C));
        return MO_OK;
    }
    if (sp) {
        MO_TRY(act_alloc(m, NC, &a->g));
        OP(MO_PROF_GEMM, gpt_matmul_fwd(x, DT, a->g, NULL, a->fch_gelu, W(m, GPT_FCPROJW, l, 4 * CC),
                                        bias0 ? W(m, GPT_FCPROJB, l, C) : NULL, N, Fl, C));
        MO_TRY(sp_scatter(m, s, a->g, a->out));
        act_free(m, &a->g);
        OP(MO_PROF_ELEMENTWISE, mo_residual_forward_mixed(x, DT, a->out, a->out, a->resid2, NsC));
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
// Sequence parallel: dresid is the rank's (B,T/tp,C) slice. It is all-gathered into a->g before each
// row-parallel GEMM's backward (so the row-parallel biases still get every position's gradient, the same
// on every rank), the stored LN output slice is gathered again for the column-parallel weight gradient,
// and the partial input gradient d(ln) is reduce-scattered into a->ds for the LayerNorm backward on the
// slice (whose weight gradients are then partial over the rank's positions: sp_reduce_grads).
static mo_status block_backward(mo_gpt *m, step_state *s, int l, block_acts *a, void *dresid) {
    const mo_gpt_config *c = &m->cfg;
    mo_ctx *x = m->ctx;
    int N = s->N, Ns = s->Ns, C = c->hidden, B = s->Bm, T = c->seq, Cl = C / tp_of(m), NHl = c->heads / tp_of(m);
    int Fl = 4 * C / tp_of(m);
    size_t NC = (size_t)N * C, CC = (size_t)C * Cl, NCl = (size_t)N * Cl, NF = (size_t)N * Fl, NsC = (size_t)Ns * C;
    const int sp = seqpar(m);
    const int ln_bias = proj_bias_in_ln(m); // fcproj's and attproj's bias gradients from the LayerNorm backwards
    float *fcproj_b = ln_bias ? NULL : GB(m, GPT_FCPROJB, l, C), *proj_b = ln_bias ? NULL : GB(m, GPT_PROJB, l, C);
    const void *dout = dresid; // (B,T,C) d(out) for the fcproj backward
    if (sp) {
        MO_TRY(act_alloc(m, NC, &a->g));
        MO_TRY(sp_gather(m, s, dresid, a->g));
        dout = a->g;
    }
    MO_TRY(act_alloc(m, NF, &a->d4));
    // d4 = d(fch): the GELU backward inside the fcproj dinp GEMM (fuse_epilogues), else after it. With
    // MEMOPT_DBIAS=gelu (16-bit) that op also adds d4's column sums to fc's bias gradient (in the GEMM's
    // epilogue in bf16), so fc's backward below does not read d4 for them.
    const int fcb_sums = fuse_epilogues(m) && DT != MO_F32 && x->dbias_mode == MO_DBIAS_GELU;
    if (fcb_sums) {
        OP(MO_PROF_GEMM, gpt_matmul_bwd_dgelu_bsum(x, DT, a->d4, GB(m, GPT_FCB, l, Fl), GB(m, GPT_FCPROJW, l, 4 * CC),
                                                   fcproj_b, dout, a->fch_gelu,
                                                   W(m, GPT_FCPROJW, l, 4 * CC), a->fch, N, Fl, C));
        act_free(m, &a->fch_gelu);
    } else if (fuse_epilogues(m)) {
        OP(MO_PROF_GEMM, gpt_matmul_bwd_dgelu(x, DT, a->d4, GB(m, GPT_FCPROJW, l, 4 * CC),
                                              fcproj_b, dout, a->fch_gelu,
                                              W(m, GPT_FCPROJW, l, 4 * CC), a->fch, N, Fl, C));
        act_free(m, &a->fch_gelu);
    } else {
        OP(MO_PROF_GEMM, gpt_matmul_bwd(x, DT, a->d4, GB(m, GPT_FCPROJW, l, 4 * CC),
                                        fcproj_b, dout, a->fch_gelu,
                                        W(m, GPT_FCPROJW, l, 4 * CC), N, Fl, C));
        act_free(m, &a->fch_gelu);
        OP(MO_PROF_ELEMENTWISE, mo_gelu_backward_mixed(x, DT, a->d4, a->fch, a->d4, NF));
    }
    act_free(m, &a->g);
    act_free(m, &a->fch);
    MO_TRY(act_alloc(m, NC, &a->dC));
    const void *ln2_all = a->ln2;
    if (sp) {
        MO_TRY(act_alloc(m, NC, &a->g));
        MO_TRY(sp_gather(m, s, a->ln2, a->g));
        ln2_all = a->g;
    }
    OP(MO_PROF_GEMM, gpt_matmul_bwd(x, DT, a->dC, GB(m, GPT_FCW, l, 4 * CC), fcb_sums ? NULL : GB(m, GPT_FCB, l, Fl),
                                    a->d4, ln2_all, W(m, GPT_FCW, l, 4 * CC), N, C, Fl));
    act_free(m, &a->g);
    const void *dln2 = a->dC; // (Ns,C) d(ln2) for the LayerNorm backward
    if (sp) {
        MO_TRY(act_alloc(m, NsC, &a->ds));
        MO_TRY(sp_scatter(m, s, a->dC, a->ds));
        dln2 = a->ds;
    } else {
        MO_TRY(tp_allreduce(m, a->dC, NC));
    }
    act_free(m, &a->d4);
    act_free(m, &a->ln2);
    // with ln_bias, attproj's bias gradient too: the column sums of the new dresid, its output gradient
    OP(MO_PROF_NORM, ln_backward(m, dresid, GB(m, GPT_LN2W, l, C), GB(m, GPT_LN2B, l, C),
                                 ln_bias ? GB(m, GPT_PROJB, l, C) : NULL, dln2, a->resid2, W(m, GPT_LN2W, l, C),
                                 a->ln2_mean, a->ln2_rstd, Ns));
    act_free(m, &a->ds);
    act_free(m, &a->ln2_mean); act_free(m, &a->ln2_rstd); act_free(m, &a->resid2);
    const void *dresid2 = dresid; // (B,T,C) d(resid2) for the proj backward
    if (sp) {
        MO_TRY(act_alloc(m, NC, &a->g));
        MO_TRY(sp_gather(m, s, dresid, a->g));
        dresid2 = a->g;
    }
    // a->dC now receives d(atty) (N, Cl).
    OP(MO_PROF_GEMM, gpt_matmul_bwd(x, DT, a->dC, GB(m, GPT_PROJW, l, CC), proj_b, dresid2,
                                    a->atty, W(m, GPT_PROJW, l, CC), N, Cl, C));
    act_free(m, &a->g);
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
    const void *ln1_all = a->ln1;
    if (sp) {
        MO_TRY(act_alloc(m, NC, &a->g));
        MO_TRY(sp_gather(m, s, a->ln1, a->g));
        ln1_all = a->g;
    }
    // a->dC now receives d(ln1).
    OP(MO_PROF_GEMM, gpt_matmul_bwd(x, DT, a->dC, GB(m, GPT_QKVW, l, 3 * CC), GB(m, GPT_QKVB, l, 3 * Cl),
                                    a->dqkv, ln1_all, W(m, GPT_QKVW, l, 3 * CC), N, C, 3 * Cl));
    act_free(m, &a->g);
    const void *dln1 = a->dC; // (Ns,C) d(ln1) for the LayerNorm backward
    if (sp) {
        MO_TRY(act_alloc(m, NsC, &a->ds));
        MO_TRY(sp_scatter(m, s, a->dC, a->ds));
        dln1 = a->ds;
    } else {
        MO_TRY(tp_allreduce(m, a->dC, NC));
    }
    act_free(m, &a->dqkv); act_free(m, &a->qkv); act_free(m, &a->ln1);
    // with ln_bias (l > 0), fcproj l-1's bias gradient too: the new dresid is block l-1's output gradient
    OP(MO_PROF_NORM, ln_backward(m, dresid, GB(m, GPT_LN1W, l, C), GB(m, GPT_LN1B, l, C),
                                 ln_bias && l > 0 ? GB(m, GPT_FCPROJB, l - 1, C) : NULL, dln1, a->in,
                                 W(m, GPT_LN1W, l, C), a->ln1_mean, a->ln1_rstd, Ns));
    act_free(m, &a->ds);
    act_free(m, &a->dC); act_free(m, &a->ln1_mean); act_free(m, &a->ln1_rstd);
    a->in = NULL; // the schedule frees it
    return MO_OK;
}

// ---- the schedule's callbacks (strategies/schedule.h) ----------------------------------------------
// The schedule drives the step: accumulation, the checkpoint segments, the 1F1B pipeline over the
// stages (a stage after the first gets x[0] from the previous one; a stage before the last sends x[L]
// and runs no head). GPT's own options stay here: selective checkpointing (the KEEP mode drops the
// attention probabilities; block_backward recomputes them) and the tp all-reduces inside the blocks.

static step_state *slot_of(mo_gpt *m, void *sp) {
    step_state *s = sp;
    s->Bm = m->cfg.batch / m->cfg.accum;
    s->N = s->Bm * m->cfg.seq;
    s->Ts = gpt_shard_seq(&m->cfg, m->shard);
    s->Ns = s->Bm * s->Ts;
    return s;
}

// The embedding (the first stage): enc = wte[tokens] + wpe. Sequence parallel: the rank's positions
// only, (B, T/tp, C), with wpe's rows of them (the tokens are the rank's slice: mo_gpt_set_batch).
static mo_status sched_input_fwd(void *mp, void *sp, int micro, void **x0) {
    mo_gpt *m = mp;
    step_state *s = slot_of(m, sp);
    const mo_gpt_config *c = &m->cfg;
    mo_ctx *x = m->ctx;
    size_t off = (size_t)micro * s->Ns;
    MO_TRY(gpt_zero_weights_get(m, 0)); // ZeRO-3: wte and wpe gathered for the embedding
    const void *wpe = (const char *)m->wparam_ptr[GPT_WPE] +
                      (size_t)gpt_shard_seq0(c, m->shard) * c->hidden * mo_dtype_size(DT); // rows [t0, t0 + Ts)
    MO_TRY(act_alloc(m, (size_t)s->Ns * c->hidden, &s->enc));
    OP(MO_PROF_ELEMENTWISE, mo_encoder_forward_mixed(x, DT, s->enc, m->inputs + off, m->wparam_ptr[GPT_WTE],
                                                     wpe, s->Bm, s->Ts, c->hidden));
    gpt_zero_weights_put(m, 0);
    *x0 = s->enc;
    s->enc = NULL; // the schedule's from here on
    return MO_OK;
}

static mo_status sched_block_fwd(void *mp, void *sp, void *bp, int l, int micro, const void *in, void **out,
                                 mo_sched_fwd mode) {
    mo_gpt *m = mp;
    step_state *s = slot_of(m, sp);
    block_acts *a = bp;
    (void)micro;
    a->in = in;
    MO_TRY(gpt_zero_weights_get(m, 1 + l)); // ZeRO-3: the block's weights, gathered for this forward only
    MO_TRY(block_forward(m, s, l, a, mode != MO_SCHED_FWD_RECOMPUTE_NO_OUT));
    gpt_zero_weights_put(m, 1 + l);
    if (mode != MO_SCHED_FWD_RECOMPUTE_NO_OUT) {
        *out = a->out;
        a->out = NULL;
    }
    if (mode == MO_SCHED_FWD_DROP) block_free_internals(m, a);
    else if (mode == MO_SCHED_FWD_KEEP && m->cfg.ckpt == MO_CKPT_SELECTIVE && !m->cfg.attn_fused) act_free(m, &a->att);
    return MO_OK;
}

// The head (the last stage): the final LayerNorm, the tied LM head and the cross-entropy. Sequence
// parallel: all three on the rank's (B, T/tp) positions (N below is Ns), the loss still the mean over
// the global batch's B*T tokens.
static mo_status sched_head_fwd(void *mp, void *sp, int micro, const void *last) {
    mo_gpt *m = mp;
    step_state *s = slot_of(m, sp);
    const mo_gpt_config *c = &m->cfg;
    mo_ctx *x = m->ctx;
    int N = s->Ns, C = c->hidden, T = c->seq, V = c->vocab;
    size_t NC = (size_t)N * C, off = (size_t)micro * N;
    MO_TRY(gpt_zero_weights_get(m, 0)); // ZeRO-3: lnf and the tied wte, held until the head's backward
    MO_TRY(act_alloc(m, NC, &s->lnf));
    MO_TRY(stat_alloc(m, (size_t)N, &s->lnf_mean));
    MO_TRY(stat_alloc(m, (size_t)N, &s->lnf_rstd));
    OP(MO_PROF_NORM, mo_layernorm_forward_mixed(x, DT, s->lnf, s->lnf_mean, s->lnf_rstd, last, m->wparam_ptr[GPT_LNFW],
                                                m->wparam_ptr[GPT_LNFB], N, C));
    MO_TRY(act_alloc(m, (size_t)N * V, &s->logits));
    OP(MO_PROF_GEMM, gpt_matmul_fwd(x, DT, s->logits, NULL, s->lnf, m->wparam_ptr[GPT_WTE], NULL, N, C, V));
    // The mean over the global batch: each micro-batch's gradient is its share of the full one; times
    // the loss scale (1 unless fp16's scaler is on), so that small gradients stay representable.
    float dloss = m->loss_scale / (global_batch(m) * (float)T);
    OP(MO_PROF_LOSS, mo_crossentropy_fused_mixed(x, DT, m->losses + off, s->logits, m->targets + off, s->Bm, s->Ts, V, dloss));
    return MO_OK;
}

static mo_status sched_head_bwd(void *mp, void *sp, int micro, const void *last, void **d) {
    mo_gpt *m = mp;
    step_state *s = slot_of(m, sp);
    const mo_gpt_config *c = &m->cfg;
    mo_ctx *x = m->ctx;
    int N = s->Ns, C = c->hidden, V = c->vocab; // the rank's positions (all of them but under --sp)
    size_t NC = (size_t)N * C;
    (void)micro;
    MO_TRY(gpt_zero_weights_get(m, 0));
    MO_TRY(gpt_zero_grad_begin(m, 0)); // ZeRO-2/3: the outer tensors' gradient, until the embedding's backward
    // logits now hold dlogits.
    MO_TRY(act_alloc(m, NC, &s->dhead));
    OP(MO_PROF_GEMM, gpt_matmul_bwd(x, DT, s->dhead, m->grad_ptr[GPT_WTE], NULL, s->logits, s->lnf,
                                    m->wparam_ptr[GPT_WTE], N, C, V));
    act_free(m, &s->logits);
    MO_TRY(act_alloc(m, NC, &s->dresid));
    OP(MO_PROF_ELEMENTWISE, mo_memset_zero(x, s->dresid, NC * mo_dtype_size(DT)));
    // with proj_bias_in_ln, the last block's fcproj bias gradient too: dresid is that block's output gradient
    OP(MO_PROF_NORM, ln_backward(m, s->dresid, m->grad_ptr[GPT_LNFW], m->grad_ptr[GPT_LNFB],
                                 proj_bias_in_ln(m) ? GB(m, GPT_FCPROJB, layers_of(m) - 1, C) : NULL, s->dhead, last,
                                 m->wparam_ptr[GPT_LNFW], s->lnf_mean, s->lnf_rstd, N));
    act_free(m, &s->dhead); act_free(m, &s->lnf); act_free(m, &s->lnf_mean); act_free(m, &s->lnf_rstd);
    gpt_zero_weights_put(m, 0);
    *d = s->dresid;
    s->dresid = NULL; // the schedule's from here on
    return MO_OK;
}

static mo_status sched_block_bwd(void *mp, void *sp, void *bp, int l, int micro, const void *in, void *d) {
    mo_gpt *m = mp;
    block_acts *a = bp;
    (void)micro;
    a->in = in;
    // ZeRO-3: the block's weights gathered again; ZeRO-2/3: its full gradient made, and reduce-scattered
    // into the rank's shard right after (every micro-batch).
    MO_TRY(gpt_zero_weights_get(m, 1 + l));
    MO_TRY(gpt_zero_grad_begin(m, 1 + l));
    MO_TRY(block_backward(m, slot_of(m, sp), l, a, d));
    gpt_zero_weights_put(m, 1 + l);
    return gpt_zero_grad_end(m, 1 + l);
}

// The embedding's backward (the first stage): wte and wpe gradients from d(enc). Sequence parallel:
// of the rank's positions (wpe's rows [t0, t0 + T/tp)), partial sums for sp_reduce_grads.
static mo_status sched_input_bwd(void *mp, void *sp, int micro, const void *dresid) {
    mo_gpt *m = mp;
    step_state *s = slot_of(m, sp);
    const mo_gpt_config *c = &m->cfg;
    mo_ctx *x = m->ctx;
    size_t off = (size_t)micro * s->Ns;
    float *dwpe = m->grad_ptr[GPT_WPE] + (size_t)gpt_shard_seq0(c, m->shard) * c->hidden;
    MO_TRY(mo_prof_begin(x, MO_PROF_ELEMENTWISE));
    MO_TRY(mo_encoder_backward_mixed(x, DT, m->grad_ptr[GPT_WTE], dwpe, dresid, m->inputs + off,
                                     m->inputs_host ? m->inputs_host + off : NULL, s->Bm, s->Ts, c->hidden,
                                     c->vocab)); // NULL on dry
    MO_TRY(mo_prof_end(x));
    return gpt_zero_grad_end(m, 0); // ZeRO-2/3: the outer tensors' gradient, complete for this micro-batch
}

static void sched_block_unwind(void *mp, void *bp) {
    mo_gpt *m = mp;
    block_acts *a = bp;
    block_free_internals(m, a);
    act_free(m, &a->out);
    a->in = NULL;
}

static void sched_slot_unwind(void *mp, void *sp) {
    mo_gpt *m = mp;
    step_state *s = sp;
    act_free(m, &s->enc);
    act_free(m, &s->lnf); act_free(m, &s->lnf_mean); act_free(m, &s->lnf_rstd); act_free(m, &s->logits);
    act_free(m, &s->dhead); act_free(m, &s->dresid);
    m->recompute_ms += s->recompute_ms; // selective's, of the micro-batches this slot ran
    s->recompute_ms = 0;
    gpt_zero_unwind(m); // ZeRO units still in flight (none after a clean micro-batch)
}

static const mo_sched_model gpt_sched = {
    .slot_bytes = sizeof(step_state),
    .block_bytes = sizeof(block_acts),
    .input_fwd = sched_input_fwd,
    .block_fwd = sched_block_fwd,
    .head_fwd = sched_head_fwd,
    .head_bwd = sched_head_bwd,
    .block_bwd = sched_block_bwd,
    .input_bwd = sched_input_bwd,
    .block_unwind = sched_block_unwind,
    .slot_unwind = sched_slot_unwind,
};

// The tied embedding: the first stage's wte gradient (the embedding's) plus the last stage's (the LM
// head's), summed on both (Megatron's embedding group), so both copies take the same update.
static mo_status tie_embedding(mo_gpt *m) {
    const mo_gpt_shard *sh = m->shard;
    if (!sh || sh->pp == 1 || !(sh->first || sh->last)) return MO_OK;
    return mo_comm_allreduce_sum(sh->emb_comm, m->grad_ptr[GPT_WTE], m->param_sizes[GPT_WTE]);
}

// Sequence parallel: the gradients each tp rank took over its own positions only (wte from the
// embedding and the LM head, wpe, every LayerNorm's weight and bias) summed over the tp ranks of the
// stage, in rank order, once per step after the last micro-batch: fp32, in place, four contiguous
// ranges of the gradient buffer (wte+wpe, ln1, ln2, lnf; a stage's empty ones skipped alike on its ranks).
static mo_status sp_reduce_grads(mo_gpt *m) {
    if (!seqpar(m)) return MO_OK;
    static const int range[4][2] = {{GPT_WTE, GPT_WPE}, {GPT_LN1W, GPT_LN1B}, {GPT_LN2W, GPT_LN2B}, {GPT_LNFW, GPT_LNFB}};
    for (int k = 0; k < 4; k++) {
        size_t n = m->param_sizes[range[k][0]] + m->param_sizes[range[k][1]];
        if (n) MO_TRY(mo_comm_allreduce_sum(m->shard->tp_comm, m->grad_ptr[range[k][0]], n));
    }
    return MO_OK;
}

mo_status mo_gpt_forward_backward(mo_gpt *m) {
    const mo_gpt_config *c = &m->cfg;
    mo_ctx *x = m->ctx;
    const mo_gpt_shard *sh = m->shard;
    size_t n_grads = 0;
    float *grads = gpt_zero_grads(m, &n_grads); // m->grads; a ZeRO level's own length
    mo_sched_config sc = {
        .ctx = x, .blocks = layers_of(m), .accum = c->accum, .seg = segment_layout(m),
        .grads = grads, .n_grads = n_grads,
        .pp = sh ? sh->pp : 1, .stage = sh ? sh->stage : 0, .pp_comm = sh ? sh->pp_comm : NULL,
        .stream_elems = (size_t)(c->batch / c->accum) * gpt_shard_seq(c, sh) * c->hidden, .dt = DT, // (B, Ts, C)
    };
    m->recompute_ms = 0; // selective's adds up in slot_unwind
    double seg_ms = 0;
    mo_status st = mo_sched_forward_backward(&sc, &gpt_sched, m, &seg_ms);
    m->recompute_ms += seg_ms;
    MO_TRY(st);
    MO_TRY(sp_reduce_grads(m));
    MO_TRY(tie_embedding(m));
    MO_TRY(gpt_zero_reduce(m)); // data parallel: the ranks' gradients summed (level 0) or reduce-scattered (1)
    size_t BT = (size_t)c->batch * gpt_shard_seq(c, sh); // sequence parallel: the rank's positions' losses
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

// The update: the schedule's (strategies/schedule.h), over the whole buffer, or on a split over the
// rank's tensors as parameter groups for the global norm: the tp-split ones counted on every rank, the
// replicated ones on tp rank 0, the tied wte on the first stage; the loss scaler's verdict and the norm
// over the world.
mo_status mo_gpt_update(mo_gpt *m) {
    const mo_gpt_config *c = &m->cfg;
    const mo_gpt_shard *sh = m->shard;
    mo_sched_group groups[GPT_NPARAMS];
    for (int p = 0; p < GPT_NPARAMS; p++) {
        groups[p].grad = m->grad_ptr[p];
        groups[p].n = m->param_sizes[p];
        groups[p].counted = sh && (gpt_param_is_tp_split(p) || sh->tp_rank == 0) && (p != GPT_WTE || sh->first);
    }
    mo_sched_optim o = {
        .ctx = m->ctx, .dt = DT, .params = m->params, .grads = m->grads, .adam_m = m->adam_m, .adam_v = m->adam_v,
        .wparams = m->wparams, .n = m->num_params, .lr = c->lr, .beta1 = c->beta1, .beta2 = c->beta2, .eps = c->eps,
        .weight_decay = c->weight_decay, .grad_clip = c->grad_clip,
        .groups = sh ? groups : NULL, .n_groups = sh ? GPT_NPARAMS : 0,
        .world = sh && sh->world > 1 ? sh->world_comm : NULL, .world_size = sh ? sh->world : 1, .rank = sh ? sh->rank : 0,
        .host_grads = m->host_grads, .host_params = m->host_params,
    };
    if (sh && sh->dp > 1) {
        // Data parallel (gpt_zero.h): level 0 has every rank's gradients equal (all-reduced), so each
        // updates the whole model alike with no communication; levels >= 1 update the rank's chunks,
        // the norm and the scaler's verdict over the dp ranks.
        int n_parts = 0;
        o.parts = gpt_zero_parts(m, &n_parts);
        o.n_parts = n_parts;
        o.groups = NULL;
        o.n_groups = 0;
        o.world = n_parts ? sh->dp_comm : NULL;
        o.world_size = n_parts ? sh->dp : 1;
        o.rank = n_parts ? sh->dp_rank : 0;
    }
    // The scaler's state lives in mo_gpt's documented fields (tests read and set them).
    mo_sched_scaler sc = {.on = c->loss_scaling, .scale = m->loss_scale, .clean = m->scaler_clean,
                          .interval = c->scaler_interval > 0 ? c->scaler_interval : 2000,
                          .skipped = m->skipped_steps, .inject = m->inject_nonfinite};
    mo_sched_update_info info = {0, NAN};
    mo_status st = mo_sched_update(&o, &sc, &m->step, &info);
    m->loss_scale = sc.scale;
    m->scaler_clean = sc.clean;
    m->skipped_steps = sc.skipped;
    m->inject_nonfinite = sc.inject;
    MO_TRY(st);
    m->last_skipped = info.skipped;
    m->last_grad_norm = info.grad_norm;
    if (!info.skipped) MO_TRY(gpt_zero_gather_weights(m)); // ZeRO-1/2: every rank's updated chunk to all
    return MO_OK;
}

mo_status mo_gpt_step(mo_gpt *m) {
    MO_TRY(mo_gpt_forward_backward(m));
    return mo_gpt_update(m);
}
