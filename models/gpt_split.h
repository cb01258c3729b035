// The GPT split over W = tp * pp ranks (docs/DESIGN.md, "Splitting"; issue 5): tensor parallelism of
// degree tp inside every block (Megatron-LM) and pp pipeline stages of layers/pp blocks each, 1F1B.
// Every rank is a thread of this process with its own allocator (and cap), context and model shard,
// so each rank's peak memory is exact; the ranks talk through strategies/comm.h (kind local: threads
// on one GPU, or on the cpu/dry backends; kind nccl: one GPU per rank, cuda only).
//
// Layout. Ranks are numbered r = stage * tp + tp_rank. Stage s holds global layers
// [s*L/pp, (s+1)*L/pp) (layers % pp != 0 is bad input, as in bench/config.h); stage 0 also wte and wpe
// (the embedding), stage pp-1 lnf and a copy of the tied wte (the LM head). Within a stage, tp rank r
// keeps of each block: for each of q, k, v the rows of heads [r*NH/tp, (r+1)*NH/tp) of qkv (and their
// bias), rows [r*4C/tp, (r+1)*4C/tp) of fc and its bias (column-parallel), the matching columns of
// proj and fcproj (row-parallel); the LayerNorms and the biases of proj and fcproj are replicated.
// Each shard's tensors have the unsplit model's layout for C/tp channels and NH/tp heads, so the
// unsplit kernels run on them. The split starts from exactly the unsplit model's initial values of the
// same seed (each rank computes its own elements of the same random stream: gpt_params.c).
//
// Communication of one step (all fp32 but sequence parallelism's gathers, below; every sum in rank order:
// the same bits on every rank):
//   tp  forward: all-reduce of proj's and fcproj's outputs (partial sums; the bias is added by tp
//       rank 0 only) before the residual add; backward: all-reduce of d(ln1) and d(ln2), the
//       column-parallel GEMMs' partial input gradients, before the LayerNorm backward. Checkpoint
//       recompute repeats the forward all-reduces. Per block per micro-batch: 4 all-reduces of
//       (B/accum)*T*C floats (2 forward, 2 backward; recompute adds up to 2).
//   pp  1F1B (strategies/schedule.c): activations (B/accum, T, C) forward, their gradients back, by
//       send/recv and sendrecv between neighbouring stages of the same tp index. Stage s holds at most
//       min(pp - s, accum) micro-batches' activations at once (GPipe would hold accum on every stage).
//   wte the first and last stage's wte gradients are summed (all-reduce of the two; Megatron's
//       embedding group) before the update.
//   norm the global gradient norm (clipping): each rank's share gathered from every rank (all-gather).
// Precision: every one. In fp16/bf16 the tp all-reduces widen the 16-bit partial sums to fp32, sum
// them in rank order and round back once (so a 16-bit split differs from the unsplit model by about one
// ulp of the 16-bit type per all-reduce, not by fp32 rounding; pp alone moves 16-bit activations
// exactly); fp16's loss scaler takes one verdict for all ranks (inf/nan on any rank skips the step on
// every rank), so the scale stays the same everywhere. W = 1 (tp 1, pp 1) is the plain model, unchanged.
//
// Sequence parallelism (sp 1, with tp > 1; Korthikanti et al. 2022, "Reducing Activation Recomputation
// in Large Transformer Models"): what the tp ranks of a stage kept whole and alike (the residual stream,
// the LayerNorms' inputs, outputs and statistics) is sharded along the sequence: tp rank r holds
// positions [r T/tp, (r+1) T/tp) of every sequence, (B, T/tp, C) slices. Per block, the all-reduces give
// way to all-gathers of the LN outputs along T before qkv and fc and reduce-scatters of proj's and
// fcproj's partial outputs; backward, all-gathers of the output gradients of proj and fcproj,
// reduce-scatters of d(ln1), d(ln2), and the stored LN output slices gathered again for the weight
// gradients: per block per micro-batch 2 all-gathers + 2 reduce-scatters forward, 4 all-gathers + 2
// reduce-scatters backward, each of one (B/accum, T, C) tensor (gathers in the activation dtype, the
// scatters' sums in fp32, 16 bits widened as the all-reduces are); checkpoint recompute repeats the
// forward ones (a segment's last block without fcproj's scatter). A rank embeds its own positions and
// runs the final LayerNorm, the LM head (logits (B/accum, T/tp, V)) and the loss on them, so wte, wpe and
// the LayerNorms' gradients are partial: all-reduced over the tp ranks once per step (4 all-reduces on
// the last stage, wte+wpe, ln1, ln2, lnf; fewer on others). The loss is the mean of the last stage's tp
// ranks' means. The schedule's stream, and so the pipeline's messages, are the (B/accum, T/tp, C) slices.
// What one layer keeps per rank for backward, in bytes, d the activation dtype's size, s = T, b the
// micro-batch, h = C, a = heads (tests/test_gpt_sp.c checks it to the byte):
//   no sp:  sbh(4d + 12d/t) + 16sb + A,   sp:  sbh(16d)/t + 16sb/t + A,
//   A = d as^2b/t materialized (the softmax probabilities), 4asb/t fused (the log-sum-exp),
// i.e. sp removes (t-1)/t of the 4d sbh of the block input, ln1 and ln2 outputs and resid2 and of the
// 16sb of the LayerNorms' fp32 mean and rstd. In 16 bits: sbh(32/t + 2as/(ht)) + 16sb/t against the
// paper's sbh(34/t + 5as/(ht)): no dropout here (no masks, no dropout outputs), and the statistics, which
// the paper leaves out.
//
// Numerics: the split sums the same terms as the unsplit model in other groupings (a GEMM over C/tp
// inputs, then the all-reduce; wte's two halves; the norm's partial sums), so loss and gradients agree
// to fp32 rounding: tests/test_gpt_split.c bounds the relative L2 error of every gradient tensor, after
// gathering the shards back to the unsplit layout, by 1e-5, and the loss by 1e-6 relative;
// tests/test_gpt_sp.c the same with sequence parallelism (which regroups the wte, wpe and LayerNorm
// gradients' sums over positions too).
//
// Failures: a rank that fails (out of memory under its cap, most likely) stops, and every other rank
// stops at its next communication (host barriers before each op: no rank enters an op that a failed
// peer will not join), unwinding its activations; the call returns the first failure (in time), its
// message prefixed with the rank. A split that failed a step is dead: later steps return that error;
// destroy it.
#ifndef MEMOPT_GPT_SPLIT_H
#define MEMOPT_GPT_SPLIT_H

#include <stdint.h>
#include "gpt.h"
#include "strategies/alloc.h"
#include "strategies/comm.h" // mo_comm_stat

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mo_gpt_split mo_gpt_split;

typedef struct mo_gpt_split_config {
    int tp, pp;               // tensor-parallel degree and pipeline stages (each >= 1); W = tp * pp
    int comm;                 // the mo_comm_kind of strategies/comm.h: 0 local, 1 nccl (same values as
                              // bench/config.h's enum; an int so that this header includes neither)
    mo_backend_kind backend;  // cuda, cpu or dry (nccl: cuda only)
    mo_alloc_kind alloc;      // each rank's allocator
    uint64_t cap_bytes;       // each rank's cap, 0 none (like --cap on a one-GPU run, per rank)
    double link_gbps;         // local kind's modelled link bandwidth (0: MO_COMM_DEFAULT_LINK_GBPS)
    // Data parallelism (issue 20, models/gpt_zero.h): dp ranks of the whole model, each on batch/dp of
    // the global batch (dp * accum must divide it), with ZeRO level zero (0..3). 0 is read as 1 (dp)
    // and 0 (zero), so a config that never sets them is the split as before. dp > 1 needs tp 1, pp 1.
    int dp, zero;
    // Sequence parallelism (--sp; needs tp > 1 and seq % tp == 0): see "Sequence parallelism" above. 0 off.
    int sp;
} mo_gpt_split_config;

// Bad shapes or combinations: MO_ERR_INVALID naming --tp, --pp or --comm (nccl with fewer GPUs than
// ranks too). Includes mo_gpt_validate(cfg).
mo_status mo_gpt_split_validate(const mo_gpt_config *cfg, const mo_gpt_split_config *sc);

// Makes the W rank threads' allocators, contexts, communicators and shards (initialized as the
// unsplit model of cfg->seed). cuda: local puts every rank on the calling thread's current device;
// nccl puts rank r on device r (W devices needed). On failure everything is given back.
mo_status mo_gpt_split_create(mo_gpt_split **out, const mo_gpt_config *cfg, const mo_gpt_split_config *sc);
void mo_gpt_split_destroy(mo_gpt_split *s);

int mo_gpt_split_world(const mo_gpt_split *s);
int mo_gpt_split_tp(const mo_gpt_split *s);
int mo_gpt_split_pp(const mo_gpt_split *s);

// The batch (B,T) tokens and targets, host arrays: given to every rank (the device copies live on
// the first stage (tokens) and the last (targets)).
mo_status mo_gpt_split_set_batch(mo_gpt_split *s, const int *tokens, const int *targets);

// One training step on every rank (forward and backward of the accum micro-batches through the
// stages, the wte tie, the global norm, clipping, AdamW), each rank timed on its own stream.
mo_status mo_gpt_split_step(mo_gpt_split *s);
// Forward and backward only (gradients complete, the wte tie included), timed the same way.
mo_status mo_gpt_split_forward_backward(mo_gpt_split *s);

// Of the last step: the loss (the last stage's), the global gradient norm (the same on every rank),
// the slowest rank's time (ms, the step's wall time on that rank's stream, waits for peers included)
// and the slowest rank's recompute time.
double mo_gpt_split_last_loss(const mo_gpt_split *s);
double mo_gpt_split_last_grad_norm(const mo_gpt_split *s);
double mo_gpt_split_step_ms(const mo_gpt_split *s);
double mo_gpt_split_rank_step_ms(const mo_gpt_split *s, int rank);
double mo_gpt_split_recompute_ms(const mo_gpt_split *s);

// Rank r's allocator (its stats: mo_allocator_stats; mo_allocator_reset_peaks between steps is fine),
// context and model shard. Not to be used while a call on the split runs.
mo_allocator *mo_gpt_split_allocator(mo_gpt_split *s, int rank);
mo_ctx *mo_gpt_split_ctx(mo_gpt_split *s, int rank);
mo_gpt *mo_gpt_split_model(mo_gpt_split *s, int rank);
// The rank with the largest peak_allocated_bytes (the first such): the run's peak is that rank's.
int mo_gpt_split_peak_rank(mo_gpt_split *s);
void mo_gpt_split_reset_peaks(mo_gpt_split *s); // every rank's allocator

// Communication since create or the last reset, per rank summed over its communicators (tp, pp,
// embedding, world), from mo_comm_stats.
typedef struct mo_gpt_split_comm {
    uint64_t ops;             // all ranks
    uint64_t bytes;           // all ranks: bytes moved over the links (mo_comm_op_bytes)
    uint64_t bytes_max_rank;  // the largest single rank's
    double ms_max_rank;       // the largest single rank's comm time
    int measured;             // 1: CUDA-event times (nccl), 0: modelled (local: bytes / link + latency)
} mo_gpt_split_comm;
mo_status mo_gpt_split_comm_stats(mo_gpt_split *s, mo_gpt_split_comm *out);
mo_status mo_gpt_split_comm_reset(mo_gpt_split *s);
// Rank r's tensor-parallel communicator's own statistics (per op kind: mo_comm_stat's op_count,
// op_bytes), since create or the last reset; all zero without one (tp 1). Not while a call runs.
mo_status mo_gpt_split_tp_comm_stats(mo_gpt_split *s, int rank, mo_comm_stat *out);

// The parameters (what 0) or gradients (what 1) of all ranks in the unsplit model's layout
// (mo_gpt_num_params(cfg) floats, the order of mo_gpt's buffers). Replicated tensors are taken from
// tp rank 0 and the first stage; *replicas_equal (if non-NULL) says whether every replica (the other
// tp ranks' LayerNorms, biases and embeddings, the last stage's wte) has the same bits.
mo_status mo_gpt_split_gather(mo_gpt_split *s, int what, float *full, int *replicas_equal);

// FLOPs the checkpoint strategy re-runs per step over all ranks (for hw_tflops): each stage
// recomputes its own layers/pp blocks (segments of mo_gpt_segment_len of the stage).
double mo_gpt_split_recompute_flops(const mo_gpt_config *cfg, int tp, int pp);

#ifdef __cplusplus
}
#endif
#endif
