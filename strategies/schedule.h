// The generic training schedule: drives any model's blocks through one optimizer step.
//
// A model is, to the schedule, an input stage (GPT's embedding, the MLP's input layer, a ResNet's
// stem), L body blocks (on a pipeline stage: the stage's blocks) and a head that ends in the loss;
// each with a forward and a backward. The schedule owns the order: gradient accumulation over M
// micro-batches, the checkpoint segments of every --ckpt policy (models/ckpt_layout.h: none, full,
// every:K, sqrt, segments:N), the 1F1B pipeline over pp stages, and, in mo_sched_update, the fp16
// loss scaler, clipping at a global norm and AdamW. An unsplit run is a world of one rank through the
// same schedule (pp 1, no communicator): its micro-batches run one after another in one slot, with
// the same block calls, checkpoint segments and update as each stage of a pipeline; pp > 1 orders
// them 1F1B.
//
// Buffers. The schedule owns the stream: x[0] (the input stage's output, the body's input), x[l+1]
// (block l's output), each (N, ...) of one micro-batch, allocated by the model (in input_fwd /
// block_fwd, from its ctx's allocator, so the trace names them) and freed by the schedule after
// their last reader: x[l] after block l's backward (or, inside a checkpointed segment, right after
// block l's forward), x[L] after the head's backward (or after it is sent to the next stage). It
// also owns the stream's gradient d (one buffer, overwritten in place: d(x[l+1]) on entry to block
// l's backward, d(x[l]) on return), which the head's backward allocates (or the schedule, receiving
// it on a pipeline stage before the last) and the schedule frees after the input stage's backward
// (or after sending it to the previous stage). Everything else (a block's internals, the head's and
// input stage's tensors) is the model's: it lives in zeroed per-micro-batch state the schedule hands
// to every callback (slot: slot_bytes; blk: block_bytes per block), and the model frees it when its
// backward is done with it; block_unwind / slot_unwind free whatever is still live after a failure.
//
// Checkpointing and recompute. In forward, a block of a checkpointed segment runs with
// MO_SCHED_FWD_DROP: it computes its output and then frees its internals itself (the schedule then
// frees its input unless it is the segment's first). In backward each segment is recomputed (its
// blocks' forward with MO_SCHED_FWD_RECOMPUTE, the segment's last block with
// MO_SCHED_FWD_RECOMPUTE_NO_OUT: backward needs its internals, not its output; a model may skip the
// ops that only make the output), timed as recompute and marked phase "recompute" in the allocation
// trace; then its blocks' backward, last first. A recompute mode tells the model this forward already
// ran for this micro-batch: side effects such as batch-norm running statistics must be skipped.
// A model-only strategy is an option of the model, applied in its own callbacks: the keep level
// (MO_SCHED_FWD_KEEP: keep for backward) is the model's to refine (GPT's selective checkpointing
// frees the attention probabilities in KEEP mode and recomputes them in its block backward, adding
// the time to its own figure; GPT's tensor parallelism all-reduces inside its blocks on its own
// communicator). The schedule never looks inside a block.
//
// Pipeline (pp > 1): stage s of P runs min(P-s-1, M) forwards, then one forward / one backward
// alternately, then the remaining backwards (non-interleaved 1F1B, PipeDream-Flush / Megatron-LM);
// stage s holds at most min(P-s, M) micro-batches at once. x[0] of a stage after the first is
// received from the previous stage, x[L] of a stage before the last is sent to the next one (so the
// input stage runs on stage 0 only and the head on stage P-1 only), and d travels back the same way.
// Buffers on the wire are stream_elems elements of dt per micro-batch.
//
// Trace and cost regions: forward marks phase "forward" and runs the input stage and blocks in cost
// region BODY, the head in HEAD; backward marks "backward", the head's backward in HEAD, the rest in
// BODY; the gradients are zeroed in OPTIMIZER; mo_sched_update marks "optimizer" (kernels/cost.h).
#ifndef MEMOPT_SCHEDULE_H
#define MEMOPT_SCHEDULE_H

#include <stddef.h>
#include "kernels/ctx.h"
#include "kernels/dtype.h"
#include "kernels/status.h"
#include "models/ckpt_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mo_comm; // strategies/comm.h

// How a block's forward is run (the model's keep level and the recompute signal).
typedef enum mo_sched_fwd {
    MO_SCHED_FWD_KEEP = 0,          // first run; keep what backward reads (the model may keep less: selective)
    MO_SCHED_FWD_DROP,              // first run inside a checkpointed segment: make *out, free the internals
    MO_SCHED_FWD_RECOMPUTE,         // re-run in backward: keep the internals, make *out; no side effects
    MO_SCHED_FWD_RECOMPUTE_NO_OUT,  // the segment's last block re-run: keep the internals, *out not needed
} mo_sched_fwd;

// A recompute mode: the model must skip side effects (batch-norm running statistics, RNG draws that
// advance a stream, counters).
static inline int mo_sched_is_recompute(mo_sched_fwd f) {
    return f == MO_SCHED_FWD_RECOMPUTE || f == MO_SCHED_FWD_RECOMPUTE_NO_OUT;
}

// A model's blocks. m: the model object; slot: the micro-batch's zeroed state (slot_bytes);
// blk: block l's zeroed state (block_bytes) in this slot; micro: which micro-batch (0..M-1), for the
// model's slice of its batch. Every function returns a status; an out-of-memory anywhere unwinds
// (the schedule frees the stream, then calls block_unwind for every block and slot_unwind).
typedef struct mo_sched_model {
    size_t slot_bytes;  // the model's per-micro-batch state (input stage's and head's tensors)
    size_t block_bytes; // the model's per-block state (a block's internals)
    // The input stage (pipeline stage 0 only): *x0 (N, C) dt, allocated here, becomes the schedule's.
    mo_status (*input_fwd)(void *m, void *slot, int micro, void **x0);
    // Block l (0..L-1 of this stage): reads in (N, C), allocates *out (N, C) unless mode is
    // RECOMPUTE_NO_OUT, keeps in its blk what backward needs (per mode). in stays the schedule's.
    mo_status (*block_fwd)(void *m, void *slot, void *blk, int l, int micro, const void *in, void **out,
                           mo_sched_fwd mode);
    // The head (last stage only): reads h = x[L] (N, C) and computes the loss (scaled by the loss
    // scale the model holds; the mean over the global batch, so micro-batch gradients add up).
    mo_status (*head_fwd)(void *m, void *slot, int micro, const void *h);
    // The head's backward: allocates *d (N, C) dt = d(loss)/d(h), its parameter gradients added.
    mo_status (*head_bwd)(void *m, void *slot, int micro, const void *h, void **d);
    // Block l's backward: d (N, C) holds d(out) on entry and d(in) on return; parameter gradients
    // added (accumulated over micro-batches). Frees its internals.
    mo_status (*block_bwd)(void *m, void *slot, void *blk, int l, int micro, const void *in, void *d);
    // The input stage's backward (stage 0 only): its parameter gradients from d = d(x0). May be NULL.
    mo_status (*input_bwd)(void *m, void *slot, int micro, const void *d);
    // Frees whatever the model still holds in blk / slot (after a failure; NULLs what it frees).
    void (*block_unwind)(void *m, void *blk);
    void (*slot_unwind)(void *m, void *slot);
} mo_sched_model;

// One forward_backward: what to run and where.
typedef struct mo_sched_config {
    mo_ctx *ctx;             // the rank's context (allocator, stream, timers, trace marks)
    int blocks;              // L: this stage's blocks
    int accum;               // M micro-batches per optimizer step
    mo_ckpt_layout seg;      // the checkpoint segments over the L blocks (mo_ckpt_layout_of)
    float *grads;            // (n_grads) fp32: zeroed before the first micro-batch (NULL: not zeroed)
    size_t n_grads;
    // Pipeline: pp 1 (and pp_comm NULL) for none. stage in [0, pp).
    int pp, stage;
    struct mo_comm *pp_comm; // the stages of this tp index, rank = stage
    size_t stream_elems;     // elements of one micro-batch's x (and d) on the wire
    mo_dtype dt;             // their dtype
} mo_sched_config;

// Forward and backward of the M micro-batches (1F1B when pp > 1), gradients zeroed first and
// accumulated; no update. *recompute_ms (may be NULL): the checkpoint recompute time of this call.
mo_status mo_sched_forward_backward(const mo_sched_config *c, const mo_sched_model *ops, void *m,
                                    double *recompute_ms);

// ---- the update: loss scaler, clipping, AdamW ------------------------------------------------------

// The dynamic loss scaler (fp16): start 65536, x2 after interval clean steps, x0.5 and the update
// skipped on an inf or NaN in any rank's gradients. on 0: scale stays 1, no check.
typedef struct mo_sched_scaler {
    int on;
    float scale;
    int clean, interval; // clean steps in a row; steps to double after (2000)
    int skipped;         // updates skipped so far
    int inject;          // test hook: the next check sees an inf (ignored on dry); cleared by the check
} mo_sched_scaler;
void mo_sched_scaler_init(mo_sched_scaler *s, int on, int interval);

// A parameter group for the global norm: a rank sums the groups it counts (a tensor replicated over
// ranks is counted by one of them only).
typedef struct mo_sched_group {
    const float *grad;
    size_t n;
    int counted;
} mo_sched_group;

// ZeRO (data parallelism with sharded optimizer state, models/gpt_zero.c): one contiguous piece of the
// rank's shard. The update runs AdamW on each part (n floats of master params, working copy wparams
// of dt, gradients and moments) instead of the whole buffers below; the global norm is the sum of the
// parts' squares over the world (every element is in one rank's parts only), and the loss scaler's
// verdict looks at the parts' gradients and travels over the world.
typedef struct mo_sched_part {
    float *params, *grads, *adam_m, *adam_v;
    void *wparams;
    size_t n;
} mo_sched_part;

// The optimizer over one flat fp32 master buffer (params) with its dt working copy (wparams ==
// params for fp32), gradients and Adam moments, all n floats.
typedef struct mo_sched_optim {
    mo_ctx *ctx;
    mo_dtype dt;
    float *params, *grads, *adam_m, *adam_v;
    void *wparams;
    size_t n;
    float lr, beta1, beta2, eps, weight_decay, grad_clip; // grad_clip 0: no clipping
    // The global norm: groups NULL: one sum of squares over grads[0, n) (an unsplit model); else the
    // counted groups' sums, gathered over world (world_size ranks, this one `rank`) and added in rank
    // order (the same bits on every rank). world also carries the scaler's verdict (any rank bad).
    const mo_sched_group *groups;
    int n_groups;
    struct mo_comm *world;
    int world_size, rank;
    // ZeRO: n_parts > 0 runs the update on these parts of the rank's shard (params .. n above unused;
    // groups NULL: the parts are the norm's groups). 0: the whole buffers, as before.
    const mo_sched_part *parts;
    int n_parts;
    // Offload (--offload optimizer; the whole buffers only, n_parts 0): adam_m, adam_v and, in 16 bits,
    // params (the fp32 master) are host memory; host_grads (n fp32) and, in fp32, host_params (n fp32,
    // the device weights' host image) are the host staging. The update copies the gradients (and fp32
    // weights) device->host, runs the CPU AdamW there and copies the weights (16-bit: cast on the host)
    // back, synchronously. NULL host_grads: no offload.
    float *host_grads, *host_params;
} mo_sched_optim;

// What one update did.
typedef struct mo_sched_update_info {
    int skipped;       // the scaler skipped it
    double grad_norm;  // the unscaled global norm before clipping (NAN when skipped or on dry)
} mo_sched_update_info;

// The scaler's check (fp16), the global norm, clipping and one AdamW step (*step incremented).
mo_status mo_sched_update(const mo_sched_optim *o, mo_sched_scaler *sc, int *step, mo_sched_update_info *out);

#ifdef __cplusplus
}
#endif
#endif
