// The nccl communicator: one rank per GPU. Threads of one process: the group makes one ncclUniqueId
// (ncclGetUniqueId) and each rank's thread calls ncclCommInitRank on the device of its ctx stream.
// MPI processes (MEMOPT_HAVE_MPI): mo_comm_group_create_mpi below, rank 0 makes the id and MPI_Bcast
// shares it. Every op is enqueued on the rank's ctx stream between two timing events; their elapsed
// times are read lazily (a ring of COMM_TIMING_PAIRS pairs, the oldest resolved when it is full, all
// of them in mo_comm_stats), so timing never stalls the stream. The time of an op includes waiting
// for the peers to reach it, as NCCL kernel times in any profiler do.
//
// Ordered sums (mo_comm_set_ordered, default 1) give the local kind's bits: the buffer goes in
// segments of at most W x COMM_NCCL_PIECE floats, each split into W chunks (comm_chunk_off); rank r
// receives chunk r from every peer (ncclSend/ncclRecv in one group) into scratch, sums the W copies
// in rank order with the kernel of the local kind (comm_dev_sum), in place into its own chunk, and
// every chunk is then broadcast from its owner (W ncclBroadcast in one group). Volume per rank:
// (W-1)/W of the segment out and in for the exchange, the same for the broadcasts: 2(W-1)/W, the
// ring's. Reduce-scatter: the exchange and the sum only (the _axis form: once per outer block).
// Scratch: (W-1) x chunk floats from the rank's allocator (workspace), freed in stream order at the end
// of the op.
// W = 1 always calls NCCL's own collective (a copy or nothing): a single term is in rank order.
#define MEMOPT_COMM_NCCL_SOURCE 1
#include "comm.h"

#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"

#ifdef MEMOPT_HAVE_NCCL

#include <cuda_runtime_api.h>
#include "../kernels/cuda_check.h"

#define COMM_NCCL_PIECE ((size_t)1 << 20) // floats per chunk of an ordered segment: 4 MiB

typedef struct comm_nccl {
    ncclComm_t comm;
    float *bar; // one float for the barrier's all-reduce, from the rank's allocator
    cudaEvent_t ev[2 * COMM_TIMING_PAIRS];
    int op[COMM_TIMING_PAIRS];
    int head, count; // ring of pending pairs
    int open;        // a pair is started
} comm_nccl;

static mo_status nccl_status(ncclResult_t r, const char *what) {
    if (r == ncclSuccess) return MO_OK;
    return MO_FAIL(MO_ERR_NCCL, "%s: %s (%s)", what, ncclGetErrorString(r), ncclGetLastError(NULL));
}

static cudaStream_t stream_of(const mo_comm *c) { return (cudaStream_t)c->ctx->stream; }

// ---- timing ----

static mo_status timing_resolve_oldest(mo_comm *c) {
    comm_nccl *n = c->impl;
    int i = n->head;
    float ms = 0;
    CUDA_CHECK(cudaEventSynchronize(n->ev[2 * i + 1]));
    CUDA_CHECK(cudaEventElapsedTime(&ms, n->ev[2 * i], n->ev[2 * i + 1]));
    c->st.time_ms += ms;
    c->st.op_ms[n->op[i]] += ms;
    n->head = (n->head + 1) % COMM_TIMING_PAIRS;
    n->count--;
    return MO_OK;
}

static mo_status timing_begin(mo_comm *c, mo_comm_op op) {
    comm_nccl *n = c->impl;
    if (n->count == COMM_TIMING_PAIRS) MO_TRY(timing_resolve_oldest(c));
    int i = (n->head + n->count) % COMM_TIMING_PAIRS;
    n->op[i] = (int)op;
    CUDA_CHECK(cudaEventRecord(n->ev[2 * i], stream_of(c)));
    n->open = 1;
    return MO_OK;
}

static mo_status timing_end(mo_comm *c) {
    comm_nccl *n = c->impl;
    if (!n->open) return MO_OK;
    n->open = 0;
    int i = (n->head + n->count) % COMM_TIMING_PAIRS;
    CUDA_CHECK(cudaEventRecord(n->ev[2 * i + 1], stream_of(c)));
    n->count++;
    return MO_OK;
}

// An op's body between the two events; the pair is dropped when the body fails.
#define TIMED(c, op, body)                                 \
    do {                                                   \
        MO_TRY(timing_begin((c), (op)));                   \
        mo_status timed_st_ = (body);                      \
        if (timed_st_ != MO_OK) {                          \
            ((comm_nccl *)(c)->impl)->open = 0;            \
            return timed_st_;                              \
        }                                                  \
        return timing_end(c);                              \
    } while (0)

static mo_status comm_nccl_drain(mo_comm *c) {
    comm_nccl *n = c->impl;
    while (n && n->count > 0) MO_TRY(timing_resolve_oldest(c));
    return MO_OK;
}

// ---- groups and ranks ----

static mo_status comm_nccl_group_init(mo_comm_group *g) {
    ncclUniqueId *id = calloc(1, sizeof *id);
    if (!id) return MO_FAIL(MO_ERR_OOM, "host out of memory for the NCCL id");
    g->impl = id;
    if (!g->mpi) NCCL_CHECK(ncclGetUniqueId(id));
    return MO_OK;
}

static void comm_nccl_group_fini(mo_comm_group *g) {
    free(g->impl);
    g->impl = NULL;
}

// Threads of one process: every rank registers its device, and after a barrier every rank checks
// that no two share one (NCCL would refuse, or hang the others in ncclCommInitRank); a second barrier
// makes every rank fail together.
static mo_status nccl_device_check(mo_comm *c, int dev) {
    mo_comm_group *g = c->g;
    pthread_mutex_lock(&g->mu);
    g->slot[c->rank].device = dev;
    pthread_mutex_unlock(&g->mu);
    comm_barrier_and(g, 1);
    mo_status st = MO_OK;
    int clash = -1;
    for (int p = 0; p < g->world; p++)
        if (p != c->rank && g->slot[p].device == dev) { clash = p; break; }
    if (clash >= 0)
        st = MO_FAIL(MO_ERR_INVALID,
                     "--comm nccl: ranks %d and %d are both on device %d (NCCL needs one GPU per rank; several "
                     "ranks on one GPU is --comm local)", c->rank < clash ? c->rank : clash,
                     c->rank < clash ? clash : c->rank, dev);
    int all = comm_barrier_and(g, st == MO_OK);
    if (st == MO_OK && !all)
        st = MO_FAIL(MO_ERR_INVALID, "--comm nccl: rank %d: another rank failed to join (see its error)", c->rank);
    return st;
}

static void nccl_rank_free(mo_comm *c) {
    comm_nccl *n = c->impl;
    if (!n) return;
    for (int i = 0; i < 2 * COMM_TIMING_PAIRS; i++)
        if (n->ev[i]) cudaEventDestroy(n->ev[i]);
    if (n->bar) mo_free(c->ctx->alloc, n->bar);
    if (n->comm) ncclCommDestroy(n->comm);
    free(n);
    c->impl = NULL;
}

static mo_status nccl_rank_setup(mo_comm *c) {
    mo_comm_group *g = c->g;
    comm_nccl *n = c->impl;
    int dev = -1;
    CUDA_CHECK(cudaStreamGetDevice(stream_of(c), &dev));
    if (!g->mpi) MO_TRY(nccl_device_check(c, dev));
    CUDA_CHECK(cudaSetDevice(dev)); // ncclCommInitRank takes the calling thread's device
    NCCL_CHECK(ncclCommInitRank(&n->comm, g->world, *(ncclUniqueId *)g->impl, c->rank));
    for (int i = 0; i < 2 * COMM_TIMING_PAIRS; i++) CUDA_CHECK(cudaEventCreate(&n->ev[i]));
    MO_TRY(mo_alloc(c->ctx->alloc, sizeof(float), MO_CAT_WORKSPACE, (void **)&n->bar));
    CUDA_CHECK(cudaMemsetAsync(n->bar, 0, sizeof(float), stream_of(c)));
    return MO_OK;
}

static mo_status comm_nccl_rank_init(mo_comm *c) {
    if (!c->ctx->stream) return MO_FAIL(MO_ERR_INVALID, "--comm nccl: rank %d's context has no stream", c->rank);
    c->impl = calloc(1, sizeof(comm_nccl));
    if (!c->impl) return MO_FAIL(MO_ERR_OOM, "host out of memory for nccl rank %d", c->rank);
    mo_status st = nccl_rank_setup(c);
    if (st != MO_OK) nccl_rank_free(c);
    return st;
}

static void comm_nccl_rank_fini(mo_comm *c) {
    if (!c->impl) return;
    comm_nccl_drain(c);
    nccl_rank_free(c);
}

// ---- ops ----

// Index of peer p's slot in a scratch of W-1 slots for rank r.
static int slot_of(int p, int r) { return p < r ? p : p - 1; }

// One exchange of an ordered op: rank r sends send_base[send_off[p] ..+ send_len[p]) to every peer p
// and receives recv_len floats from every peer into its scratch slot (slot_of). Both sides of every
// pair compute the same lengths, so skipping the empty ones stays symmetric.
typedef struct exch {
    const float *send_base; // this rank's buffer
    size_t send_off[MO_COMM_MAX_WORLD], send_len[MO_COMM_MAX_WORLD]; // what goes to peer p
    size_t recv_len;        // what comes from every peer (the same for each)
} exch;

static mo_status exchange(mo_comm *c, const exch *e, float *scratch, size_t slot_len) {
    comm_nccl *n = c->impl;
    int W = c->g->world, r = c->rank;
    ncclResult_t res = ncclGroupStart();
    const char *what = "ncclGroupStart()";
    for (int p = 0; p < W && res == ncclSuccess; p++) {
        if (p == r) continue;
        if (e->send_len[p]) {
            res = ncclSend(e->send_base + e->send_off[p], e->send_len[p], ncclFloat, p, n->comm, stream_of(c));
            what = "ncclSend(chunk)";
        }
        if (res == ncclSuccess && e->recv_len) {
            res = ncclRecv(scratch + (size_t)slot_of(p, r) * slot_len, e->recv_len, ncclFloat, p, n->comm, stream_of(c));
            what = "ncclRecv(chunk)";
        }
    }
    ncclResult_t end = ncclGroupEnd();
    MO_TRY(nccl_status(res, what));
    return nccl_status(end, "ncclGroupEnd()");
}

static mo_status sum_with_scratch(mo_comm *c, float *out, const float *mine, const float *scratch, size_t slot_len,
                                  size_t len) {
    int W = c->g->world, r = c->rank;
    const float *in[MO_COMM_MAX_WORLD];
    for (int p = 0; p < W; p++) in[p] = p == r ? mine : scratch + (size_t)slot_of(p, r) * slot_len;
    return comm_dev_sum(c->ctx->stream, out, in, W, len);
}

static mo_status ordered_allreduce(mo_comm *c, float *buf, size_t count) {
    comm_nccl *n = c->impl;
    int W = c->g->world, r = c->rank;
    size_t seg_max = (size_t)W * COMM_NCCL_PIECE;
    size_t first = count < seg_max ? count : seg_max;
    size_t slot_len = 0; // the longest chunk of the longest segment
    for (int k = 0; k < W; k++) {
        size_t l = comm_chunk_off(first, W, k + 1) - comm_chunk_off(first, W, k);
        if (l > slot_len) slot_len = l;
    }
    float *scratch = NULL;
    MO_TRY(mo_scratch_alloc(c->ctx, (size_t)(W - 1) * slot_len * sizeof(float), (void **)&scratch));
    mo_status st = MO_OK;
    for (size_t s0 = 0; s0 < count && st == MO_OK; s0 += seg_max) {
        size_t seg = count - s0 < seg_max ? count - s0 : seg_max;
        float *base = buf + s0;
        exch e;
        e.send_base = base;
        for (int p = 0; p < W; p++) {
            e.send_off[p] = comm_chunk_off(seg, W, p);
            e.send_len[p] = comm_chunk_off(seg, W, p + 1) - e.send_off[p];
        }
        e.recv_len = e.send_len[r];
        st = exchange(c, &e, scratch, slot_len);
        if (st == MO_OK && e.recv_len)
            st = sum_with_scratch(c, base + e.send_off[r], base + e.send_off[r], scratch, slot_len, e.recv_len);
        if (st != MO_OK) break;
        ncclResult_t res = ncclGroupStart();
        for (int k = 0; k < W && res == ncclSuccess; k++)
            if (e.send_len[k])
                res = ncclBroadcast(base + e.send_off[k], base + e.send_off[k], e.send_len[k], ncclFloat, k, n->comm,
                                    stream_of(c));
        ncclResult_t end = ncclGroupEnd();
        st = nccl_status(res, "ncclBroadcast(chunk)");
        if (st == MO_OK) st = nccl_status(end, "ncclGroupEnd()");
    }
    mo_status st2 = mo_scratch_free(c->ctx, scratch); // stream order: after the last sum
    return st != MO_OK ? st : st2;
}

static mo_status ordered_reduce_scatter(mo_comm *c, const float *send, float *recv, size_t count) {
    int W = c->g->world, r = c->rank;
    size_t slot_len = count < COMM_NCCL_PIECE ? count : COMM_NCCL_PIECE;
    float *scratch = NULL;
    MO_TRY(mo_scratch_alloc(c->ctx, (size_t)(W - 1) * slot_len * sizeof(float), (void **)&scratch));
    mo_status st = MO_OK;
    for (size_t o = 0; o < count && st == MO_OK; o += COMM_NCCL_PIECE) {
        size_t len = count - o < COMM_NCCL_PIECE ? count - o : COMM_NCCL_PIECE;
        exch e;
        e.send_base = send;
        for (int p = 0; p < W; p++) {
            e.send_off[p] = (size_t)p * count + o;
            e.send_len[p] = len;
        }
        e.recv_len = len;
        st = exchange(c, &e, scratch, slot_len);
        if (st == MO_OK) st = sum_with_scratch(c, recv + o, send + (size_t)r * count + o, scratch, slot_len, len);
    }
    mo_status st2 = mo_scratch_free(c->ctx, scratch);
    return st != MO_OK ? st : st2;
}

// The group's setting, read under its lock (another rank's thread may set it between ops).
static int group_ordered(mo_comm_group *g) {
    pthread_mutex_lock(&g->mu);
    int o = g->ordered;
    pthread_mutex_unlock(&g->mu);
    return o;
}

static mo_status allreduce_body(mo_comm *c, float *buf, size_t count) {
    comm_nccl *n = c->impl;
    if (c->g->world == 1 || !group_ordered(c->g)) {
        NCCL_CHECK(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, n->comm, stream_of(c)));
        return MO_OK;
    }
    return ordered_allreduce(c, buf, count);
}

static mo_status comm_nccl_allreduce(mo_comm *c, float *buf, size_t count) {
    if (count == 0) return MO_OK;
    TIMED(c, MO_COMM_OP_ALLREDUCE, allreduce_body(c, buf, count));
}

static mo_status allgather_body(mo_comm *c, const float *send, float *recv, size_t count) {
    NCCL_CHECK(ncclAllGather(send, recv, count, ncclFloat, ((comm_nccl *)c->impl)->comm, stream_of(c)));
    return MO_OK;
}

static mo_status comm_nccl_allgather(mo_comm *c, const float *send, float *recv, size_t count) {
    if (count == 0) return MO_OK;
    TIMED(c, MO_COMM_OP_ALLGATHER, allgather_body(c, send, recv, count));
}

static mo_status reduce_scatter_body(mo_comm *c, const float *send, float *recv, size_t count) {
    comm_nccl *n = c->impl;
    if (c->g->world == 1 || !group_ordered(c->g)) {
        NCCL_CHECK(ncclReduceScatter(send, recv, count, ncclFloat, ncclSum, n->comm, stream_of(c)));
        return MO_OK;
    }
    return ordered_reduce_scatter(c, send, recv, count);
}

static mo_status comm_nccl_reduce_scatter(mo_comm *c, const float *send, float *recv, size_t count) {
    if (count == 0) return MO_OK;
    TIMED(c, MO_COMM_OP_REDUCE_SCATTER, reduce_scatter_body(c, send, recv, count));
}

// Along an axis (comm.h): one contiguous op per outer block, all in one op's timing pair. The gather
// moves bytes (ncclUint8), its blocks' ncclAllGather calls aggregated in one NCCL group; the reduce-
// scatter runs reduce_scatter_body per block (ordered: in turn, each with its own scratch).
static mo_status allgather_axis_body(mo_comm *c, const void *send, void *recv, size_t outer, size_t count, size_t elem) {
    comm_nccl *n = c->impl;
    size_t row = count * elem, W = (size_t)c->g->world;
    ncclResult_t res = ncclGroupStart();
    for (size_t o = 0; o < outer && res == ncclSuccess; o++)
        res = ncclAllGather((const char *)send + o * row, (char *)recv + o * W * row, row, ncclUint8, n->comm, stream_of(c));
    ncclResult_t end = ncclGroupEnd();
    MO_TRY(nccl_status(res, "ncclAllGather(block)"));
    return nccl_status(end, "ncclGroupEnd()");
}

static mo_status comm_nccl_allgather_axis(mo_comm *c, const void *send, void *recv, size_t outer, size_t count, size_t elem) {
    if (count == 0 || outer == 0) return MO_OK;
    TIMED(c, MO_COMM_OP_ALLGATHER, allgather_axis_body(c, send, recv, outer, count, elem));
}

static mo_status reduce_scatter_axis_body(mo_comm *c, const float *send, float *recv, size_t outer, size_t count) {
    size_t W = (size_t)c->g->world;
    for (size_t o = 0; o < outer; o++) MO_TRY(reduce_scatter_body(c, send + o * W * count, recv + o * count, count));
    return MO_OK;
}

static mo_status comm_nccl_reduce_scatter_axis(mo_comm *c, const float *send, float *recv, size_t outer, size_t count) {
    if (count == 0 || outer == 0) return MO_OK;
    TIMED(c, MO_COMM_OP_REDUCE_SCATTER, reduce_scatter_axis_body(c, send, recv, outer, count));
}

static mo_status sendrecv_body(mo_comm *c, const void *send, size_t send_bytes, int dst, void *recv,
                               size_t recv_bytes, int src) {
    comm_nccl *n = c->impl;
    ncclResult_t res = ncclGroupStart();
    const char *what = "ncclGroupStart()";
    if (res == ncclSuccess && dst >= 0 && send_bytes) {
        res = ncclSend(send, send_bytes, ncclUint8, dst, n->comm, stream_of(c));
        what = "ncclSend";
    }
    if (res == ncclSuccess && src >= 0 && recv_bytes) {
        res = ncclRecv(recv, recv_bytes, ncclUint8, src, n->comm, stream_of(c));
        what = "ncclRecv";
    }
    ncclResult_t end = ncclGroupEnd();
    MO_TRY(nccl_status(res, what));
    return nccl_status(end, "ncclGroupEnd()");
}

static mo_status comm_nccl_sendrecv(mo_comm *c, const void *send, size_t send_bytes, int dst, void *recv,
                             size_t recv_bytes, int src) {
    if (!(dst >= 0 && send_bytes) && !(src >= 0 && recv_bytes)) return MO_OK; // nothing on either side
    mo_comm_op op = dst >= 0 && src >= 0 ? MO_COMM_OP_SENDRECV : dst >= 0 ? MO_COMM_OP_SEND : MO_COMM_OP_RECV;
    TIMED(c, op, sendrecv_body(c, send, send_bytes, dst, recv, recv_bytes, src));
}

static mo_status barrier_body(mo_comm *c) {
    comm_nccl *n = c->impl;
    NCCL_CHECK(ncclAllReduce(n->bar, n->bar, 1, ncclFloat, ncclSum, n->comm, stream_of(c)));
    return MO_OK;
}

// Returns when every rank's all-reduce of one float has completed: each rank's earlier work on its
// stream came before its part of the all-reduce, and no rank's part completes before every rank's
// has started.
static mo_status comm_nccl_barrier(mo_comm *c) {
    MO_TRY(timing_begin(c, MO_COMM_OP_BARRIER));
    mo_status st = barrier_body(c);
    if (st != MO_OK) {
        ((comm_nccl *)c->impl)->open = 0;
        return st;
    }
    MO_TRY(timing_end(c));
    CUDA_CHECK(cudaStreamSynchronize(stream_of(c)));
    return MO_OK;
}

#ifdef MEMOPT_HAVE_MPI
#include <mpi.h>

// One rank per MPI process (not built by this tree's CMakeLists: define MEMOPT_HAVE_MPI and link MPI).
// Every process calls this after MPI_Init, then mo_comm_rank(g, *my_rank, ctx, &c) with ctx on its GPU.
mo_status mo_comm_group_create_mpi(mo_backend_kind backend, mo_comm_group **out, int *my_rank) {
    if (!out || !my_rank) return MO_FAIL(MO_ERR_INVALID, "mo_comm_group_create_mpi: NULL argument");
    *out = NULL;
    int size = 0, rank = 0;
    if (MPI_Comm_size(MPI_COMM_WORLD, &size) != MPI_SUCCESS || MPI_Comm_rank(MPI_COMM_WORLD, &rank) != MPI_SUCCESS)
        return MO_FAIL(MO_ERR_UNSUPPORTED, "--comm nccl over MPI: MPI_Comm_size/MPI_Comm_rank failed (is MPI initialized?)");
    mo_comm_group *g = NULL;
    MO_TRY(comm_group_alloc(MO_COMM_NCCL, size, backend, &g));
    g->mpi = 1; // no host barriers: this process holds one rank
    mo_status st = comm_nccl_group_init(g);
    if (st == MO_OK && rank == 0) st = nccl_status(ncclGetUniqueId((ncclUniqueId *)g->impl), "ncclGetUniqueId");
    // Every process takes part in the broadcast, so a failure on rank 0 still leaves no one waiting.
    int ok = st == MO_OK, all_ok = 0;
    if (MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS) all_ok = 0;
    if (all_ok && MPI_Bcast(g->impl, (int)sizeof(ncclUniqueId), MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        all_ok = 0;
    if (!all_ok) {
        mo_comm_group_destroy(g);
        return st != MO_OK ? st : MO_FAIL(MO_ERR_NCCL, "--comm nccl over MPI: making or sharing the NCCL id failed on some rank");
    }
    *my_rank = rank;
    *out = g;
    return MO_OK;
}
#endif

#else // !MEMOPT_HAVE_NCCL: the kind exists, every entry point says why it cannot run

#define NO_NCCL() MO_FAIL(MO_ERR_UNSUPPORTED, "--comm nccl: built without NCCL (nccl.h / libnccl not found at configure time)")

static mo_status comm_nccl_group_init(mo_comm_group *g) { (void)g; return NO_NCCL(); }
static void comm_nccl_group_fini(mo_comm_group *g) { (void)g; }
static mo_status comm_nccl_rank_init(mo_comm *c) { (void)c; return NO_NCCL(); }
static void comm_nccl_rank_fini(mo_comm *c) { (void)c; }
static mo_status comm_nccl_allreduce(mo_comm *c, float *buf, size_t n) { (void)c; (void)buf; (void)n; return NO_NCCL(); }
static mo_status comm_nccl_allgather(mo_comm *c, const float *send, float *recv, size_t n) {
    (void)c; (void)send; (void)recv; (void)n;
    return NO_NCCL();
}
static mo_status comm_nccl_reduce_scatter(mo_comm *c, const float *send, float *recv, size_t n) {
    (void)c; (void)send; (void)recv; (void)n;
    return NO_NCCL();
}
static mo_status comm_nccl_allgather_axis(mo_comm *c, const void *send, void *recv, size_t outer, size_t n, size_t elem) {
    (void)c; (void)send; (void)recv; (void)outer; (void)n; (void)elem;
    return NO_NCCL();
}
static mo_status comm_nccl_reduce_scatter_axis(mo_comm *c, const float *send, float *recv, size_t outer, size_t n) {
    (void)c; (void)send; (void)recv; (void)outer; (void)n;
    return NO_NCCL();
}
static mo_status comm_nccl_sendrecv(mo_comm *c, const void *send, size_t send_bytes, int dst, void *recv,
                             size_t recv_bytes, int src) {
    (void)c; (void)send; (void)send_bytes; (void)dst; (void)recv; (void)recv_bytes; (void)src;
    return NO_NCCL();
}
static mo_status comm_nccl_barrier(mo_comm *c) { (void)c; return NO_NCCL(); }
static mo_status comm_nccl_drain(mo_comm *c) { (void)c; return MO_OK; }

#ifdef MEMOPT_HAVE_MPI
mo_status mo_comm_group_create_mpi(mo_backend_kind backend, mo_comm_group **out, int *my_rank) {
    (void)backend; (void)my_rank;
    if (out) *out = NULL;
    return NO_NCCL();
}
#endif

#endif

// ---- the kind's table (the front end, comm.c, calls nothing else here) ----

static mo_status nccl_allreduce_op(mo_comm *c, float *buf, size_t n, mo_status mine) {
    MO_TRY(mine);
    return comm_nccl_allreduce(c, buf, n);
}
static mo_status nccl_allgather_op(mo_comm *c, const float *send, float *recv, size_t n, mo_status mine) {
    MO_TRY(mine);
    return comm_nccl_allgather(c, send, recv, n);
}
static mo_status nccl_reduce_scatter_op(mo_comm *c, const float *send, float *recv, size_t n, mo_status mine) {
    MO_TRY(mine);
    return comm_nccl_reduce_scatter(c, send, recv, n);
}
static mo_status nccl_allgather_axis_op(mo_comm *c, const void *send, void *recv, size_t outer, size_t n, size_t elem,
                                        mo_status mine) {
    MO_TRY(mine);
    return comm_nccl_allgather_axis(c, send, recv, outer, n, elem);
}
static mo_status nccl_reduce_scatter_axis_op(mo_comm *c, const float *send, float *recv, size_t outer, size_t n,
                                             mo_status mine) {
    MO_TRY(mine);
    return comm_nccl_reduce_scatter_axis(c, send, recv, outer, n);
}
static mo_status nccl_send_op(mo_comm *c, const void *buf, size_t bytes, int peer) {
    return comm_nccl_sendrecv(c, buf, bytes, peer, NULL, 0, -1);
}
static mo_status nccl_recv_op(mo_comm *c, void *buf, size_t bytes, int peer) {
    return comm_nccl_sendrecv(c, NULL, 0, -1, buf, bytes, peer);
}

const comm_ops comm_nccl_ops = {
    .group_init = comm_nccl_group_init,
    .group_fini = comm_nccl_group_fini,
    .rank_init = comm_nccl_rank_init,
    .rank_fini = comm_nccl_rank_fini,
    .allreduce = nccl_allreduce_op,
    .allgather = nccl_allgather_op,
    .reduce_scatter = nccl_reduce_scatter_op,
    .allgather_axis = nccl_allgather_axis_op,
    .reduce_scatter_axis = nccl_reduce_scatter_axis_op,
    .send = nccl_send_op,
    .recv = nccl_recv_op,
    .sendrecv = comm_nccl_sendrecv,
    .barrier = comm_nccl_barrier,
    .drain = comm_nccl_drain,
};
