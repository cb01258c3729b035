// Communicators for model and tensor splitting (docs/DESIGN.md, "Splitting"): all-reduce, all-gather,
// reduce-scatter, send/recv and barrier between the W ranks of a tensor- or pipeline-parallel run.
//
// kinds:
//   local  ranks are threads of one process. On the cuda backend every rank lives on the same GPU,
//          each with its own mo_ctx (stream) and allocator made by the caller, so per-rank peak memory
//          is exact; peers read each other's device buffers directly (one device, one address space),
//          ordered by CUDA events between the ranks' streams. On cpu the same protocol runs on host
//          buffers (the real numerics); on dry nothing moves and nothing waits (see "dry" below).
//          Time is modelled: bytes / link bandwidth + latency (see mo_comm_model_ms).
//   nccl   one rank per GPU, the ranks threads of one process (ncclGetUniqueId once in the group,
//          ncclCommInitRank in each rank's thread) or, with MEMOPT_HAVE_MPI, one rank per MPI process
//          (mo_comm_group_create_mpi). Time is measured with CUDA events around each op.
//
// Use: one group for the world, made once (any thread); then each rank's thread calls
// mo_comm_rank(group, r, ctx, &comm) with its own context and issues the same sequence of
// collectives as every other rank. The group is destroyed after every rank's comm.
//
//   mo_comm_group *g;  mo_comm_group_create(MO_COMM_LOCAL, W, MO_BACKEND_CUDA, &g);
//   thread r:  mo_comm *c;  mo_comm_rank(g, r, ctx_r, &c);  mo_comm_allreduce_sum(c, grad, n);  mo_comm_destroy(c);
//   mo_comm_group_destroy(g);
//
// Buffers are fp32 (or raw bytes for send/recv) in the rank's memory: device pointers on cuda, host
// pointers on cpu, anything (never dereferenced) on dry. Ops are enqueued on the rank's ctx stream
// and return without waiting for the device (mo_ctx_sync waits); work that the caller enqueues
// later on the same stream is ordered after the op, including after every peer's reads of this
// rank's buffers, so a buffer may be overwritten or freed (through the rank's allocator) as soon as
// the call returns. Work on another stream must first wait for the ctx stream.
//
// Determinism (every reduction, both kinds unless mo_comm_set_ordered(g, 0) on nccl): element i of
// a sum is  (((x_0[i] + x_1[i]) + x_2[i]) + ...) + x_{W-1}[i]  in fp32, IEEE round-to-nearest, no
// FTZ, x_r being rank r's contribution: the rank order, whatever W, n, timing or kind. Each element
// is summed by exactly one rank (its owner) and copied to the others, so every rank holds the same
// bits, and every run gives the same bits. nccl with ordered off uses ncclAllReduce /
// ncclReduceScatter: NCCL's own order (ring/tree), the same on every rank, repeatable on a fixed
// topology, NCCL version and NCCL_ALGO/NCCL_PROTO, but not the rank order above.
//
// Errors: every function returns mo_status with the reason in mo_errmsg(). In the local kind a rank
// whose arguments are bad still takes part in the collective, so every rank fails with
// MO_ERR_INVALID and none hangs; counts or ops that differ between ranks are caught the same way.
// send/recv and the nccl kind cannot tell a peer about a local error: as with NCCL or MPI, a rank
// that never calls its side of an op leaves the peer waiting.
#ifndef MEMOPT_COMM_H
#define MEMOPT_COMM_H

#include <stddef.h>
#include <stdint.h>
#include "../kernels/ctx.h"
#include "../kernels/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mo_comm_kind { MO_COMM_LOCAL = 0, MO_COMM_NCCL } mo_comm_kind;

// Largest world: the reduction kernel takes the W input pointers as one by-value argument.
#define MO_COMM_MAX_WORLD 64

const char *mo_comm_kind_name(mo_comm_kind k);
// "local" | "nccl"; the message names --comm.
mo_status mo_comm_kind_parse(const char *s, mo_comm_kind *out);

typedef struct mo_comm_group mo_comm_group;
typedef struct mo_comm mo_comm;

// 1 <= world <= MO_COMM_MAX_WORLD. nccl needs the cuda backend (MO_ERR_INVALID otherwise) and a
// build with NCCL (MO_ERR_UNSUPPORTED "built without NCCL" otherwise).
mo_status mo_comm_group_create(mo_comm_kind kind, int world, mo_backend_kind backend, mo_comm_group **out);
void mo_comm_group_destroy(mo_comm_group *g); // after every rank's mo_comm_destroy; NULL is a no-op

#ifdef MEMOPT_HAVE_MPI
// nccl across MPI processes, one rank per process (MPI_Init done by the caller): world = the size of
// MPI_COMM_WORLD, rank 0 makes the NCCL id and MPI_Bcast gives it to the others; then this process
// calls mo_comm_rank(g, its MPI rank, ctx, &c) once. Not built here (no MPI in this tree's builds).
mo_status mo_comm_group_create_mpi(mo_backend_kind backend, mo_comm_group **out, int *my_rank);
#endif

// Join the group as rank r (0 <= r < world), from that rank's thread, with its context (its backend
// must be the group's). Each rank joins once. nccl: every rank must join (ncclCommInitRank waits for
// all of them) on its own GPU, the device of ctx's stream; two ranks on one GPU are refused with
// MO_ERR_INVALID on both (use the local kind for that). local on cuda: every rank on one GPU.
mo_status mo_comm_rank(mo_comm_group *g, int rank, mo_ctx *ctx, mo_comm **out);
void mo_comm_destroy(mo_comm *c); // NULL is a no-op

int mo_comm_world(const mo_comm *c);
int mo_comm_rank_of(const mo_comm *c);
mo_comm_kind mo_comm_kind_of(const mo_comm *c);

// ---- ops (n, n_per_rank: fp32 element counts; bytes: raw bytes) ----

// In place: buf (n) := the rank-ordered sum over ranks of buf (n), the same bits on every rank.
mo_status mo_comm_allreduce_sum(mo_comm *c, float *buf, size_t n);
// recv (W * n_per_rank) := send_0 | send_1 | ... | send_{W-1} (each n_per_rank). In place when
// send == recv + rank * n_per_rank; otherwise send and recv must not overlap.
mo_status mo_comm_allgather(mo_comm *c, const float *send, float *recv, size_t n_per_rank);
// recv (n_per_rank) on rank r := rank-ordered sum over ranks p of send_p[r * n_per_rank + i]
// (send is W * n_per_rank). In place when recv == send + rank * n_per_rank; otherwise no overlap.
mo_status mo_comm_reduce_scatter_sum(mo_comm *c, const float *send, float *recv, size_t n_per_rank);
// Along an axis (sequence parallelism, models/gpt_split.h: a (B, T, C) tensor of which rank p holds
// the (B, T/W, C) slice of positions [p T/W, (p+1) T/W)). Each buffer is outer blocks; rank p's slice of
// block o is the n_per_rank elements at o * n_per_rank of its send (gather) or at (o * W + p) *
// n_per_rank of the whole (scatter). outer 1 is the contiguous op above. send and recv never overlap.
// recv (outer, W, n_per_rank) := recv[o][p] = send_p[o] for every o and p; send is (outer, n_per_rank).
// Elements of elem bytes (1..16): a gather moves bits only, so any dtype (fp16/bf16 activations too).
mo_status mo_comm_allgather_axis(mo_comm *c, const void *send, void *recv, size_t outer, size_t n_per_rank, size_t elem);
// recv (outer, n_per_rank) on rank r := recv[o] = rank-ordered fp32 sum over p of send_p[o][r] (send is
// (outer, W, n_per_rank) fp32), element by element as mo_comm_reduce_scatter_sum.
mo_status mo_comm_reduce_scatter_axis(mo_comm *c, const float *send, float *recv, size_t outer, size_t n_per_rank);
// Point to point, peer != self. The two sides must give the same byte count (MO_ERR_INVALID on both
// otherwise, local kind). A send returns once the peer's matching recv has taken the data (local:
// the copy is enqueued on the receiver's stream; nccl: the GPU-side rendezvous, as ncclSend), so a
// ring of plain send-then-recv deadlocks, as with NCCL outside a group: order it (even ranks send
// first, odd ranks receive first) or use mo_comm_sendrecv.
mo_status mo_comm_send(mo_comm *c, const void *buf, size_t bytes, int peer);
mo_status mo_comm_recv(mo_comm *c, void *buf, size_t bytes, int peer);
// Both at once, without deadlock in a ring (nccl: one ncclGroupStart/End). dst and src may be equal.
mo_status mo_comm_sendrecv(mo_comm *c, const void *send, size_t send_bytes, int dst, void *recv,
                           size_t recv_bytes, int src);
// Returns on every rank once every rank has called it, with all work enqueued on every rank's stream
// before the barrier complete (each rank waits for its own stream first). dry: returns at once.
mo_status mo_comm_barrier(mo_comm *c);

// ---- settings (on the group, before or between ops; every rank sees them) ----

// Link bandwidth for the modelled time, GB/s (1e9 bytes/s) per direction. Default 450: NVLink 4 on
// H100/H200 SXM, 18 links x 25 GB/s = 450 GB/s per direction (NVIDIA H100/H200 datasheets:
// "NVLink: 900GB/s", both directions together).
#define MO_COMM_DEFAULT_LINK_GBPS 450.0
// Latency of the model: base_us once per op plus step_us per ring step (2(W-1) steps for all-reduce,
// W-1 for all-gather and reduce-scatter, 1 for send/recv). Defaults are NCCL's own tuning constants
// (NVIDIA/nccl src/graph/tuning.cc): baseLat Ring/Simple 8.4 us and hwLat NVLink Ring/Simple 3.4 us.
// They are Simple-protocol figures, so small messages (where NCCL would pick LL) are overestimated.
#define MO_COMM_DEFAULT_BASE_US 8.4
#define MO_COMM_DEFAULT_STEP_US 3.4
mo_status mo_comm_set_link_gbps(mo_comm_group *g, double gbps);                 // > 0
mo_status mo_comm_set_latency_us(mo_comm_group *g, double base_us, double step_us); // >= 0
// nccl only: 1 (default) rank-ordered sums (send/recv of chunks + the rank-order sum kernel + broadcast,
// same volume as a ring, scratch from the rank's allocator, at most W x 4 MiB per op); 0 = NCCL's own
// ncclAllReduce / ncclReduceScatter. The local kind is always ordered (0 is refused there).
mo_status mo_comm_set_ordered(mo_comm_group *g, int ordered);

// ---- the group-wide abort (for callers that run the ranks as threads and unwind them together) ----

// After mo_comm_group_guard(g), every op of g first waits at a host barrier of the ranks it involves
// (every rank of g for a collective and the barrier; the rank and its peer for send / recv, pair by
// pair for a sendrecv), so no rank enters an op that a failed peer will not join: once
// mo_comm_group_abort(g) is called (by any thread, e.g. the failing rank's), every rank waiting at
// such a barrier, and every later op, returns MO_ERR_INTERNAL "stopped: another rank failed". A
// barrier that completed before the abort lets its parties into the op. mo_comm_group_clear_abort
// makes the group usable again. Unguarded groups (the default) take no barrier. Not for MPI groups.
mo_status mo_comm_group_guard(mo_comm_group *g);
void mo_comm_group_abort(mo_comm_group *g);       // NULL is a no-op
void mo_comm_group_clear_abort(mo_comm_group *g); // NULL is a no-op

// ---- accounting ----

typedef enum mo_comm_op {
    MO_COMM_OP_ALLREDUCE = 0,
    MO_COMM_OP_ALLGATHER,
    MO_COMM_OP_REDUCE_SCATTER,
    MO_COMM_OP_SEND,
    MO_COMM_OP_RECV,
    MO_COMM_OP_SENDRECV,
    MO_COMM_OP_BARRIER,
    MO_COMM_OP_COUNT
} mo_comm_op;
const char *mo_comm_op_name(mo_comm_op op);

// Per rank, since mo_comm_rank or the last mo_comm_stats_reset; only successful ops are counted.
typedef struct mo_comm_stat {
    uint64_t ops;     // ops issued by this rank
    uint64_t bytes;   // bytes this rank moves over its links (mo_comm_op_bytes)
    double time_ms;   // modelled (local) or measured on the rank's stream (nccl)
    int measured;     // 0: time_ms is modelled, 1: measured with CUDA events
    uint64_t op_count[MO_COMM_OP_COUNT];
    uint64_t op_bytes[MO_COMM_OP_COUNT];
    double op_ms[MO_COMM_OP_COUNT];
} mo_comm_stat;

// nccl: waits for the timing events of the ops not yet read (the rank's stream up to its last op).
mo_status mo_comm_stats(mo_comm *c, mo_comm_stat *out);
mo_status mo_comm_stats_reset(mo_comm *c); // nccl: reads pending events first, then zeroes

// The ring-algorithm volume per rank of one op, in bytes, W = world:
//   all-reduce      payload = n*4 (the buffer):           floor(2(W-1) * payload / W)
//   all-gather      payload = W*n_per_rank*4 (recv):       (W-1) * payload / W  = (W-1)*n_per_rank*4
//                   (_axis: W*outer*n_per_rank*elem, the whole recv)
//   reduce-scatter  payload = W*n_per_rank*4 (send):       (W-1) * payload / W  = (W-1)*n_per_rank*4
//                   (_axis: W*outer*n_per_rank*4, the whole send)
//   send, recv      payload = bytes:                       payload
//   sendrecv        payload = send_bytes + recv_bytes:     payload
//   barrier                                                0
// W = 1 gives 0 for the collectives (they are local copies or nothing).
uint64_t mo_comm_op_bytes(mo_comm_op op, int world, uint64_t payload);
// Modelled time of one op, ms: wire / (gbps * 1e6) + (W > 1 ? (base_us + steps * step_us) / 1e3 : 0),
// wire = the bytes above, except sendrecv: max(send, recv) bytes (the link is full duplex, so the
// two directions overlap); steps = 2(W-1) all-reduce and barrier (a 0-byte all-reduce), W-1
// all-gather and reduce-scatter, 1 send/recv/sendrecv. 0 when W = 1, and for an op that moves no
// bytes (count 0) other than the barrier.
double mo_comm_model_ms(mo_comm_op op, int world, uint64_t wire_bytes, double gbps, double base_us,
                        double step_us);

#ifdef __cplusplus
}
#endif

#endif
