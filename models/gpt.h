// GPT-2-style decoder: tied token embedding, learned positions, pre-LayerNorm blocks, causal
// attention, 4x GELU MLP, final LayerNorm, softmax cross-entropy. AdamW with fp32 state.
//
// The model is the single source of truth for memory: its tensor table (every parameter-like
// tensor with its shape, dtype and category) and its step (gpt_step: the ops in order, each
// activation allocated from the run's allocator when produced and freed when its last reader has
// run, shaped by the checkpoint and accumulation strategies). The same code runs on every backend;
// the dry backend computes nothing but makes the same allocations in the same order, so its peaks
// are the real ones.
#ifndef MEMOPT_GPT_H
#define MEMOPT_GPT_H

#include <stddef.h>
#include <stdint.h>
#include "kernels/ctx.h"
#include "kernels/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mo_ckpt_kind {
    MO_CKPT_NONE = 0,  // keep every activation
    MO_CKPT_FULL,      // keep each block's input; recompute the block in backward (every:1)
    MO_CKPT_EVERY,     // segments of K blocks: keep each segment's input; recompute the segment
    MO_CKPT_SQRT,      // segments of ceil(sqrt(L)) blocks (Chen et al. 2016)
    MO_CKPT_SELECTIVE, // drop only the attention probabilities (T,T); recompute them in backward
    MO_CKPT_SEGMENTS   // N segments as torch.utils.checkpoint.checkpoint_sequential makes them (ckpt_layout.h)
} mo_ckpt_kind;

typedef struct mo_gpt_config {
    int layers, hidden, heads, seq, batch, vocab; // L, C, NH, T, B (the global batch), V
    int attn_fused;      // 0: materialized scores/softmax (B,NH,T,T) kept; 1: flash-style, only lse kept
    mo_ckpt_kind ckpt;
    int ckpt_every;      // K for MO_CKPT_EVERY, N for MO_CKPT_SEGMENTS
    int accum;           // micro-batches per optimizer step; micro batch = batch / accum
    int tf32;            // fp32 GEMMs on TF32 tensor cores
    // Mixed precision: MO_F32 (default; 0 is MO_F32), MO_F16 or MO_BF16. 16-bit: activations and the
    // working copy of the weights in dt, tensor-core GEMMs with fp32 accumulation; fp32 master weights,
    // gradients and Adam state.
    mo_dtype dtype;
    // Dynamic loss scaling (on by default for fp16, off otherwise; docs/DESIGN.md): start loss_scale_init,
    // x2 after scaler_interval steps without inf/nan, x0.5 and skip the update on one.
    int loss_scaling;
    float loss_scale_init; // 0: 65536
    int scaler_interval;   // 0: 2000
    float lr, beta1, beta2, eps, weight_decay, grad_clip; // AdamW; grad_clip 0 disables clipping
    uint64_t seed;
    // --offload optimizer: 1 keeps AdamW's m, v and, in 16 bits, the fp32 master in host memory
    // (ctx->host_alloc, which must be set), with host staging for the update (strategies/schedule.h).
    // Unsplit models only.
    int offload;
} mo_gpt_config;

// The parameter tensors, in the order of the parameter buffer (llm.c's layout).
enum {
    GPT_WTE, GPT_WPE, GPT_LN1W, GPT_LN1B, GPT_QKVW, GPT_QKVB, GPT_PROJW, GPT_PROJB,
    GPT_LN2W, GPT_LN2B, GPT_FCW, GPT_FCB, GPT_FCPROJW, GPT_FCPROJB, GPT_LNFW, GPT_LNFB, GPT_NPARAMS
};

// One row of the tensor table.
typedef struct mo_tensor_info {
    const char *name;
    int ndim;
    int64_t shape[4];
    mo_dtype dtype;
    mo_category cat;
    size_t numel;
} mo_tensor_info;

typedef struct mo_gpt {
    mo_gpt_config cfg;
    mo_ctx *ctx;
    size_t param_sizes[GPT_NPARAMS];
    size_t num_params;
    float *params;       // (num_params) all parameters in one buffer, fp32 (the master copy when 16-bit)
    float *param_ptr[GPT_NPARAMS];
    void *wparams;       // (num_params) dtype: the weights the ops read (== params for fp32, else a 16-bit copy)
    void *wparam_ptr[GPT_NPARAMS];
    float *grads;        // (num_params)
    float *grad_ptr[GPT_NPARAMS];
    float *adam_m, *adam_v; // (num_params) each; host memory under cfg.offload
    float *host_grads;      // (num_params) offload: the gradients' host staging (ctx->host_alloc), else NULL
    float *host_params;     // (num_params) offload in fp32: the weights' host image for the update, else NULL
    int *inputs, *targets;  // (B,T) on the device: the current batch
    int *inputs_host, *targets_host; // (B,T)
    float *losses;          // (B,T) per-position losses of the last step
    int step;               // optimizer steps taken (skipped steps not counted)
    // Loss scaler (fp16): the current scale (1 when off), clean steps since the last change, steps skipped.
    float loss_scale;
    int scaler_clean;
    int skipped_steps;
    int last_skipped;       // the last update was skipped (inf/nan in the gradients)
    int inject_nonfinite;   // test hook: the next update finds an inf in the gradients (then reset)
    // Measurements of the last step.
    double last_loss;
    double last_grad_norm;
    double recompute_ms;    // time re-running forward inside backward (cuda events; host clock on cpu)
    int checkpointing;      // the strategy recomputes anything
    // Splitting (models/gpt_split.h): this rank's part of a tensor- and pipeline-parallel model, or
    // NULL for the whole model (everything above is then as documented; with a shard the tensors
    // are the rank's shard, inputs only on the first stage, targets and losses only on the last).
    const struct mo_gpt_shard *shard;
    // Data parallelism (shard->dp > 1, models/gpt_zero.h): the ZeRO layout of this rank's model state
    // and its collectives; NULL otherwise. With it, params / wparams / grads / adam_m / adam_v may be
    // the rank's shards (gpt_zero.h says which at each level) and num_params is still the model's.
    struct gpt_zero *zero;
} mo_gpt;

// Validates the shapes (positive, hidden % heads == 0, batch % accum == 0, ...).
mo_status mo_gpt_validate(const mo_gpt_config *cfg);
// Parameter count, without allocating.
size_t mo_gpt_num_params(const mo_gpt_config *cfg);
// The tensor table: fills up to max rows and returns the number of rows (params, grads, Adam state,
// then the per-layer activations a step keeps under no checkpointing, for reference).
int mo_gpt_tensor_table(const mo_gpt_config *cfg, mo_tensor_info *rows, int max);

// Allocates the parameters, gradients and optimizer state from ctx->alloc and initializes the
// parameters as GPT-2 does (normal(0, 0.02), residual projections scaled by 1/sqrt(2L), LayerNorm
// weights 1, biases 0) from cfg.seed. On OOM everything taken is given back.
mo_status mo_gpt_create(mo_gpt **out, const mo_gpt_config *cfg, mo_ctx *ctx);
void mo_gpt_destroy(mo_gpt *m);

// Sets the batch: tokens (B,T) and targets (B,T), host arrays, copied to the device.
mo_status mo_gpt_set_batch(mo_gpt *m, const int *tokens, const int *targets);
// A deterministic synthetic batch from a seed: the same seed gives the same tokens everywhere.
void mo_gpt_synthetic_batch(const mo_gpt_config *cfg, uint64_t seed, int *tokens, int *targets);

// One training step: zero grads, accum x (forward, backward), clip, AdamW. Sets last_loss.
mo_status mo_gpt_step(mo_gpt *m);
// Forward and backward only (gradients accumulated into m->grads, zeroed first); sets last_loss.
mo_status mo_gpt_forward_backward(mo_gpt *m);
// The AdamW update from the current gradients (with clipping); sets last_grad_norm.
mo_status mo_gpt_update(mo_gpt *m);

// FLOPs of one training step (forward + backward): 6*N*tokens (N without the position embedding,
// as is usual) + attention 6*L*T*C*tokens (causal halving not taken), recompute excluded.
double mo_gpt_step_flops(const mo_gpt_config *cfg);
// FLOPs re-run in backward by the checkpoint strategy (for hw_tflops).
double mo_gpt_recompute_flops(const mo_gpt_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
