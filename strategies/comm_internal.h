// Private to the communicator sources: the front end (comm.c: groups, ranks, argument checks,
// accounting, the group-wide abort) and the kinds behind it (comm_local.c + comm_local_cuda.cu,
// comm_nccl_cuda.c). A kind is a table of functions (comm_ops below); the front end reaches a kind
// only through its table, and the kinds use only the front end's helpers declared here, never each
// other. Also: the group and rank structures, the device helpers of the local kind, NCCL_CHECK.
#ifndef MEMOPT_COMM_INTERNAL_H
#define MEMOPT_COMM_INTERNAL_H

#include <pthread.h>
#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

// One rank's part of a local collective, posted before the first barrier and read by the peers
// until the last barrier of the op.
typedef struct comm_slot {
    int op;              // mo_comm_op
    size_t n;            // element count (n or n_per_rank)
    size_t outer, elem;  // the _axis ops' blocks and element bytes (1 and 4 for the plain ops)
    const void *a;       // the buffer peers read (allreduce: buf; allgather/reduce-scatter: send)
    int status;          // mo_status of the rank's part so far (its arguments, then its work)
    // cuda: recorded on the rank's stream (created by the rank, owned by the group)
    void *ev_ready;      // after the work that produced a (posted before barrier A)
    void *ev_done;       // after this rank's reads of the peers (and, all-reduce, its owned chunk)
    void *ev_done2;      // all-reduce: after this rank's reads of the peers' owned chunks
    int device;          // cuda: the device of the rank's stream (-1 until it joins)
} comm_slot;

// A local send from src to dst: at most one in flight per (src, dst), since a send waits for its recv.
typedef struct comm_mbox {
    int state;           // 0 empty, 1 posted by the sender, 2 taken by the receiver
    const void *ptr;
    size_t bytes;        // the sender's count
    size_t want;         // the receiver's count (set on state 2)
    int mismatch;        // state 2: the counts differed, nothing was copied
    void *ev_sent;       // cuda: recorded by the sender on its stream when posting
    void *ev_taken;      // cuda: recorded by the receiver on its stream after its copy
} comm_mbox;

typedef struct comm_ops comm_ops;

struct mo_comm_group {
    mo_comm_kind kind;
    const comm_ops *ops;            // the kind's functions
    int world;
    mo_backend_kind backend;
    double link_gbps, base_us, step_us;
    int ordered;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived, bad, gen, last_ok; // barrier among the local threads
    int *joined;                    // [world]
    comm_slot *slot;                // [world]
    comm_mbox *mbox;                // [world * world], index src * world + dst
    int mpi;                        // nccl over MPI: one rank per process, no host barriers
    void *impl;                     // nccl: the group's ncclUniqueId

    // The group-wide abort (mo_comm_group_guard): entry barriers of the ranks each op involves, under
    // their own lock (the kinds' barriers and mailboxes above are not touched by it).
    pthread_mutex_t guard_mu;
    pthread_cond_t guard_cv;
    int inited;                     // the mutexes and condvars exist
    int guarded, aborted;
    int guard_arrived, guard_gen;   // collectives: every rank
    int *pair_arrived, *pair_gen;   // [world * world] send/recv: the two ranks, index lo * world + hi
};

// Pending CUDA timing events of the nccl kind, read in mo_comm_stats.
#define COMM_TIMING_PAIRS 256

struct mo_comm {
    mo_comm_group *g;
    int rank;
    mo_ctx *ctx;
    mo_comm_stat st;
    void *impl; // nccl: struct comm_nccl (comm_nccl_cuda.c)
};

// A kind's functions. The front end has checked the arguments (mine: the rank's own check of a
// collective, which the local kind still takes into the op so that every rank fails together; the
// nccl kind returns it), handled the dry backend (nothing moves), and accounts each op after it.
struct comm_ops {
    mo_status (*group_init)(mo_comm_group *g); // after comm_group_alloc (NULL: nothing to do)
    void (*group_fini)(mo_comm_group *g);      // before the group's memory goes
    mo_status (*rank_init)(mo_comm *c);        // on a failure it leaves nothing behind
    void (*rank_fini)(mo_comm *c);             // NULL: nothing to do
    mo_status (*allreduce)(mo_comm *c, float *buf, size_t n, mo_status mine);
    mo_status (*allgather)(mo_comm *c, const float *send, float *recv, size_t n, mo_status mine);
    mo_status (*reduce_scatter)(mo_comm *c, const float *send, float *recv, size_t n, mo_status mine);
    // Along an axis (comm.h's mo_comm_allgather_axis, mo_comm_reduce_scatter_axis).
    mo_status (*allgather_axis)(mo_comm *c, const void *send, void *recv, size_t outer, size_t n, size_t elem,
                                mo_status mine);
    mo_status (*reduce_scatter_axis)(mo_comm *c, const float *send, float *recv, size_t outer, size_t n, mo_status mine);
    mo_status (*send)(mo_comm *c, const void *buf, size_t bytes, int peer);
    mo_status (*recv)(mo_comm *c, void *buf, size_t bytes, int peer);
    mo_status (*sendrecv)(mo_comm *c, const void *send, size_t send_bytes, int dst, void *recv, size_t recv_bytes,
                          int src);
    mo_status (*barrier)(mo_comm *c);
    mo_status (*drain)(mo_comm *c);            // measured kinds: reads pending timings (NULL: none)
};
extern const comm_ops comm_local_ops; // comm_local.c
#ifdef MEMOPT_HAVE_CUDA
extern const comm_ops comm_nccl_ops;  // comm_nccl_cuda.c (stubs that say why without NCCL)
#endif

// mo_comm_group_create without the kind's group_init (the MPI path makes the nccl id on rank 0 and
// broadcasts it).
mo_status comm_group_alloc(mo_comm_kind kind, int world, mo_backend_kind backend, mo_comm_group **out);

// The barrier of the local threads: returns 1 on every rank if every rank passed ok != 0, else 0.
int comm_barrier_and(mo_comm_group *g, int ok);
void comm_account(mo_comm *c, mo_comm_op op, uint64_t bytes, uint64_t wire);

// Chunk k of n elements split over W owners: 64-element units (256 B, so chunk starts keep the
// buffer's alignment), sizes differ by at most 64. [comm_chunk_off(n,W,k), comm_chunk_off(n,W,k+1)).
size_t comm_chunk_off(size_t n, int W, int k);

// ---- device helpers (comm_local_cuda.cu; cuda builds only): the local kind's, and comm_dev_sum for
//      the nccl kind's ordered sums too ----
mo_status comm_dev_event_create(void **ev);
void comm_dev_event_destroy(void *ev);
mo_status comm_dev_record(void *ev, void *stream);
mo_status comm_dev_wait(void *stream, void *ev);
mo_status comm_dev_stream_device(void *stream, int *device);
mo_status comm_dev_sync(void *stream);
mo_status comm_dev_copy(void *stream, void *dst, const void *src, size_t bytes);
// out[i] = rank-ordered fp32 sum of in[0][i] .. in[W-1][i] (IEEE add.rn, no FTZ), i < n, on stream.
// out may be one of the inputs (element-wise in place); otherwise no overlap. 1 <= W <= MO_COMM_MAX_WORLD.
mo_status comm_dev_sum(void *stream, float *out, const float *const *in, int W, size_t n);

#ifdef __cplusplus
}
#endif

// comm_nccl_cuda.c only: NCCL's header and its checking macro, in the manner of CUDA_CHECK.
#if defined(MEMOPT_COMM_NCCL_SOURCE) && defined(MEMOPT_HAVE_NCCL)
#include <nccl.h>
#define NCCL_CHECK(call)                                                                  \
    do {                                                                                  \
        ncclResult_t r_ = (call);                                                         \
        if (r_ != ncclSuccess)                                                            \
            return MO_FAIL(MO_ERR_NCCL, "%s: %s (%s)", #call, ncclGetErrorString(r_),     \
                           ncclGetLastError(NULL));                                       \
    } while (0)
#endif

#endif
