// Private to models/: one rank's part of a split GPT (tensor parallel degree tp, pipeline stages pp;
// the public API is models/gpt_split.h). A mo_gpt with a shard holds only its rank's parameters, in
// the unsplit layout of a smaller model (see gpt_shard_global_index), and its step issues the
// communication of the split: all-reduces among the tp ranks of its stage inside every block, the
// activations and their gradients to and from the neighbouring stages (1F1B), the tied embedding's
// gradient between the first and last stage, and the global gradient norm over every rank.
// A mo_gpt without a shard (shard == NULL) is the whole model and runs exactly as before.
#ifndef MEMOPT_GPT_SHARD_H
#define MEMOPT_GPT_SHARD_H

#include "gpt.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mo_comm;          // strategies/comm.h

typedef struct mo_gpt_shard {
    int tp, tp_rank;          // tensor-parallel degree; this rank's index among the tp ranks of its stage
    int pp, stage;            // pipeline stages; this rank's stage
    int world, rank;          // W = tp * pp; rank = stage * tp + tp_rank
    int layer0, layers;       // the stage's blocks: global layers [layer0, layer0 + layers)
    int first, last;          // stage 0 (embedding: wte, wpe), stage pp-1 (lnf and the tied LM head: wte)
    struct mo_comm *tp_comm;  // the tp ranks of this stage (tp > 1), rank tp_rank
    struct mo_comm *pp_comm;  // the stages of this tp index (pp > 1), rank stage
    struct mo_comm *emb_comm; // stage 0 (rank 0) and stage pp-1 (rank 1) of this tp index (pp > 1)
    struct mo_comm *world_comm; // every rank (W > 1), rank `rank`
    // Data parallelism (issue 20): dp ranks of the whole model (tp 1, pp 1 then), each on batch/dp of
    // the global batch; zero 0..3 the ZeRO level (models/gpt_zero.h). dp 1: no data parallelism.
    int dp, dp_rank, zero;
    struct mo_comm *dp_comm;    // the dp ranks (dp > 1), rank dp_rank
    // Sequence parallelism (--sp, tp > 1; models/gpt_split.h): the residual stream, the LayerNorms and the
    // embedding and head live as (B, T/tp, C) slices, this rank's positions [tp_rank T/tp, (tp_rank+1) T/tp).
    int sp;
    // The groups of these comms are guarded (mo_comm_group_guard): a rank never enters an op that a
    // failed peer will not join; models/gpt_split.c aborts them all when any rank fails.
} mo_gpt_shard;

// The positions of each sequence this rank holds: seq/tp under sequence parallelism, else seq.
static inline int gpt_shard_seq(const mo_gpt_config *cfg, const mo_gpt_shard *sh) {
    return sh && sh->sp && sh->tp > 1 ? cfg->seq / sh->tp : cfg->seq;
}
// The first of them: tp_rank * seq/tp under sequence parallelism, else 0.
static inline int gpt_shard_seq0(const mo_gpt_config *cfg, const mo_gpt_shard *sh) {
    return sh && sh->sp && sh->tp > 1 ? sh->tp_rank * (cfg->seq / sh->tp) : 0;
}

// Allocates the shard's parameters, gradients and optimizer state (sh NULL: the whole model, as
// mo_gpt_create) and initializes them to the unsplit model's initial values of the same seed.
// sh is not copied: it must outlive the model.
mo_status mo_gpt_create_shard(mo_gpt **out, const mo_gpt_config *cfg, mo_ctx *ctx, const mo_gpt_shard *sh);

// Element i of the shard's parameter tensor p is element gpt_shard_global_index(cfg, sh, p, i) of
// the unsplit model's tensor p (both counted from the start of tensor p).
size_t gpt_shard_global_index(const mo_gpt_config *cfg, const mo_gpt_shard *sh, int p, size_t i);
// Tensor p is split over the tp ranks (qkv, proj.weight, fc, fcproj.weight), not replicated.
int gpt_param_is_tp_split(int p);
// The shard's tensor sizes (sh NULL: the whole model's).
void gpt_param_sizes(const mo_gpt_config *cfg, const mo_gpt_shard *sh, size_t s[GPT_NPARAMS]);

#ifdef __cplusplus
}
#endif
#endif
