// The ranks of a split run (--tp T --pp P, and --dp D replicas of that split), whatever the model:
// W = D * T * P threads of this process,
// each with its own allocator (and cap), context, timer and communicators, so every rank's peak is
// exact; the model puts its shard on each rank through a callback. models/gpt_split.c and
// models/mlp_split.c run on it; what is theirs is the shard (which parameters a rank holds) and the
// step, not the threads.
//
// Layout. Rank r = dp_rank * T * P + stage * T + tp_rank. Communicators (strategies/comm.h), each
// guarded (mo_comm_group_guard); every group but dp's and world's lies within one dp replica:
//   tp_comm    the T ranks of one stage (T > 1), rank tp_rank: the tensor-parallel all-reduces
//   pp_comm    the P stages of one tp index (P > 1), rank stage: 1F1B's sends and receives
//   emb_comm   stage 0 (rank 0) and stage P-1 (rank 1) of one tp index (P > 1, only with
//              mo_ranks_config.emb_groups: GPT's tied embedding)
//   dp_comm    the D replicas of one (stage, tp index) (D > 1), rank dp_rank: data parallelism's
//              gradient reductions and ZeRO's gathers; with T * P = 1 it is world_comm itself
//   world_comm every rank (W > 1), rank r: the global gradient norm and the loss scaler's verdict
// With W = 1 there are none (the plain model).
//
// Threads. Every op runs fn on every rank at once, each in its own thread (cuda: the rank's device
// made current first; nccl puts rank r on device r, local every rank on the caller's device), and
// waits for all. A rank that fails aborts every communicator group, so every rank waiting in (or
// entering) a collective returns instead of hanging; the op returns the first failure in time, its
// message prefixed "rank r (stage s, tp rank t): ". mo_ranks_run marks the ranks dead after a failure:
// every later mo_ranks_run returns that error (destroy them).
#ifndef MEMOPT_RANKS_H
#define MEMOPT_RANKS_H

#include <stdint.h>
#include "kernels/ctx.h"
#include "kernels/dtype.h"
#include "kernels/status.h"
#include "strategies/alloc.h"
#include "strategies/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mo_ranks_config {
    int tp, pp;               // >= 1 each; W = dp * tp * pp <= MO_COMM_MAX_WORLD
    int dp;                   // data-parallel replicas of the tp x pp split; 0 is read as 1
    mo_comm_kind comm;        // local (threads on one device, or cpu/dry) or nccl (one GPU per rank, cuda)
    mo_backend_kind backend;
    mo_alloc_kind alloc;      // each rank's allocator
    uint64_t cap_bytes;       // each rank's cap, 0 none
    double link_gbps;         // local kind's modelled link bandwidth (0: MO_COMM_DEFAULT_LINK_GBPS)
    int tf32;                 // every rank's ctx->tf32
    int emb_groups;           // make the emb_comm groups (stage 0 and stage P-1 of each tp index)
} mo_ranks_config;

typedef struct mo_rank {
    int rank, tp_rank, stage;      // rank = dp_rank * tp * pp + stage * tp + tp_rank
    int dp_rank;
    int tp, pp, dp, world;
    int first, last;               // stage 0; stage pp-1
    int device;                    // cuda: the device this rank's thread runs on
    mo_allocator *alloc;
    mo_ctx *ctx;
    mo_comm *tp_comm, *pp_comm, *emb_comm, *world_comm; // NULL where the layout has none
    mo_comm *dp_comm;              // NULL with dp 1; world_comm (the same object) with tp * pp 1
    mo_timer timer;
    int timer_ok;
    double step_ms;                // the last mo_ranks_run_timed's time on this rank's stream
    void *model;                   // the model's rank object (its make callback sets it)
    mo_status st;                  // the last op's status on this rank
} mo_rank;

typedef struct mo_ranks mo_ranks;
typedef mo_status (*mo_rank_fn)(mo_rank *r, void *arg);
typedef void (*mo_rank_free_fn)(mo_rank *r, void *arg);

// The model-independent checks of a split, in two halves so a model can put its own between them
// (its messages name --tp, --pp, --dp or --comm): the shape (tp, pp, dp >= 1, the comm kind, W <= the
// communicator's world), then the devices (nccl needs cuda and one GPU per rank). dp 0 is read as 1.
mo_status mo_ranks_validate_shape(int tp, int pp, int dp, mo_comm_kind comm);
mo_status mo_ranks_validate_devices(int tp, int pp, int dp, mo_comm_kind comm, mo_backend_kind backend);

// Makes the groups, then on every rank's thread its allocator, context and timer, waits for all
// (nccl's joins wait for every rank), joins the communicators and calls make(r, arg), which builds
// the model's shard into r->model. On failure everything is given back (unmake(r, arg) first on
// ranks whose model exists) and *out is NULL. unmake runs again from mo_ranks_destroy.
mo_status mo_ranks_create(mo_ranks **out, const mo_ranks_config *c, mo_rank_fn make, mo_rank_free_fn unmake,
                          void *arg);
// unmake on every rank's thread, then its communicators, timer, context and allocator; the groups.
void mo_ranks_destroy(mo_ranks *s);

// fn on every rank (threads), the first failure returned; a failure makes the ranks dead.
mo_status mo_ranks_run(mo_ranks *s, mo_rank_fn fn, void *arg);
// The same with each rank's stream timed around fn (r->step_ms).
mo_status mo_ranks_run_timed(mo_ranks *s, mo_rank_fn fn, void *arg);

// The tensor-parallel sum of n partial results of dtype dt in buf (rank order, the same bits on every
// rank; c NULL: nothing to do). The communicator sums fp32: a 16-bit buffer is widened into fp32
// scratch (ctx's, taken before the all-reduce: an out-of-memory inside it would hang the peers),
// summed, and rounded back once, so a 16-bit split rounds each rank's partial GEMM output to dt
// before the sum where the unsplit GEMM rounds the whole sum once: about one ulp of dt per all-reduce.
mo_status mo_ranks_allreduce(struct mo_comm *c, mo_ctx *ctx, mo_dtype dt, void *buf, size_t n);

// Sequence parallelism's pair (models/gpt_split.h, --sp), over the tp ranks c along an axis: a tensor
// of outer blocks (GPT: the micro-batch's B sequences) of which each rank holds n_per_rank elements per
// block (T/tp positions x C channels), as mo_comm_allgather_axis / mo_comm_reduce_scatter_axis.
// Gather: recv (outer, W, n_per_rank) of dt := every rank's send (outer, n_per_rank); the bits move as
// they are (no widening), so no scratch. Scatter: recv (outer, n_per_rank) of dt := the rank-ordered sum
// of every rank's partial send (outer, W, n_per_rank); a 16-bit send is widened into fp32 scratch (ctx's,
// W n + n floats per block, taken before the op), summed, and the rank's part rounded once, as
// mo_ranks_allreduce does (so a 16-bit scatter gives the bits of the all-reduce's same elements).
mo_status mo_ranks_allgather_seq(struct mo_comm *c, mo_dtype dt, const void *send, void *recv, size_t outer,
                                 size_t n_per_rank);
mo_status mo_ranks_reduce_scatter_seq(struct mo_comm *c, mo_ctx *ctx, mo_dtype dt, const void *send, void *recv,
                                      size_t outer, size_t n_per_rank);

// MO_OK, or the failure that made the ranks dead (its message re-raised).
mo_status mo_ranks_alive(const mo_ranks *s);
int mo_ranks_world(const mo_ranks *s);
mo_rank *mo_ranks_at(mo_ranks *s, int rank);
double mo_ranks_step_ms(const mo_ranks *s); // the slowest rank's last timed op
// The rank with the largest peak_allocated_bytes (the first such).
int mo_ranks_peak_rank(mo_ranks *s);
void mo_ranks_reset_peaks(mo_ranks *s);

// Communication since create or the last reset, per rank summed over its communicators.
typedef struct mo_ranks_comm {
    uint64_t ops, bytes;      // all ranks
    uint64_t bytes_max_rank;  // the largest single rank's bytes
    double ms_max_rank;       // the largest single rank's comm time
    int measured;             // 1: CUDA-event times (nccl), 0: modelled (local)
} mo_ranks_comm;
mo_status mo_ranks_comm_stats(mo_ranks *s, mo_ranks_comm *out);
mo_status mo_ranks_comm_reset(mo_ranks *s);

#ifdef __cplusplus
}
#endif
#endif
