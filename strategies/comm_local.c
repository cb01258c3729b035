// The local communicator kind (behind the front end comm.c, through comm_local_ops): ranks are
// threads of one process exchanging pointers through the group.
//
// Local collectives, rank r of W, all through comm_barrier_and (a mutex + condvar barrier that also
// ANDs an ok flag, so one rank's bad arguments fail every rank instead of hanging them):
//   post     slot[r] := {op, n, buffer, status}; cuda: record slot[r].ev_ready on r's stream (the work
//            that produced the buffer).
//   A        barrier. Every rank checks every slot (same op, same n, all ok); all decide alike.
//   compute  cuda: r's stream waits for every peer's ev_ready. Then
//              all-reduce: r owns chunk r (comm_chunk_off) and sums it over the ranks in rank order,
//                          in place into its own buf (nobody else touches r's chunk r in this phase);
//              reduce-scatter: recv_r := rank-ordered sum of send_p[r*n ..];
//              all-gather: recv_r[p*n ..] := send_p.
//            The _axis forms do the same per outer block o: reduce-scatter recv_r[o] := sum over p of
//            send_p[(o*W + r)*n ..]; all-gather recv_r[(o*W + p)*n ..] := send_p[o*n ..] (bytes: elem each).
//            cuda: record slot[r].ev_done (r finished reading the peers; all-reduce: its chunk is final).
//   B        barrier; cuda: r's stream waits for every peer's ev_done, so nothing r enqueues later can
//            overwrite r's buffers before the peers' reads. Reduce-scatter and all-gather end here.
//   all-reduce only:
//   gather   buf_r[chunk k] := buf_k[chunk k] for every k != r (final since B); record ev_done2.
//   C        barrier; wait for every peer's ev_done2 (their reads of r's chunk r), then return.
// Each element is summed once, by its owner, in rank order, and copied to the others: the same bits
// on every rank and on every run. No scratch memory: the all-reduce is a reduce-scatter and an
// all-gather in place, as NCCL's ring does it.
// Slots are read only between the A and the last barrier of an op, and a rank rewrites its slot only
// after it has passed that last barrier, so no rank reads a slot of the next op. Events are reused
// under the same argument: a rank re-records its event only after a barrier that the waiting peers
// can only reach after their cudaStreamWaitEvent on it (which captures the event's state at the call).
#include "comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"

static int is_cuda(const mo_comm_group *g) { return g->backend == MO_BACKEND_CUDA; }

static void group_free_events(mo_comm_group *g) {
#ifdef MEMOPT_HAVE_CUDA
    if (!g->slot || !g->mbox) return;
    for (int r = 0; r < g->world; r++) {
        comm_dev_event_destroy(g->slot[r].ev_ready);
        comm_dev_event_destroy(g->slot[r].ev_done);
        comm_dev_event_destroy(g->slot[r].ev_done2);
        g->slot[r].ev_ready = g->slot[r].ev_done = g->slot[r].ev_done2 = NULL;
    }
    for (int i = 0; i < g->world * g->world; i++) {
        comm_dev_event_destroy(g->mbox[i].ev_sent);
        comm_dev_event_destroy(g->mbox[i].ev_taken);
        g->mbox[i].ev_sent = g->mbox[i].ev_taken = NULL;
    }
#else
    (void)g;
#endif
}

#ifdef MEMOPT_HAVE_CUDA
// The rank's events of the local kind (owned by the group, destroyed with it: a peer may still be
// about to wait on one when this rank's comm goes away).
// A rank that leaves and joins again keeps the events it made the first time.
static mo_status event_once(void **ev) { return *ev ? MO_OK : comm_dev_event_create(ev); }

static mo_status local_events_create(mo_comm_group *g, int r) {
    int W = g->world;
    MO_TRY(event_once(&g->slot[r].ev_ready));
    MO_TRY(event_once(&g->slot[r].ev_done));
    MO_TRY(event_once(&g->slot[r].ev_done2));
    for (int p = 0; p < W; p++) {
        if (p == r) continue;
        MO_TRY(event_once(&g->mbox[r * W + p].ev_sent));  // r sends to p
        MO_TRY(event_once(&g->mbox[p * W + r].ev_taken)); // r receives from p
    }
    return MO_OK;
}

static void local_events_destroy(mo_comm_group *g, int r) {
    int W = g->world;
    void **evs[3] = {&g->slot[r].ev_ready, &g->slot[r].ev_done, &g->slot[r].ev_done2};
    for (int i = 0; i < 3; i++) { comm_dev_event_destroy(*evs[i]); *evs[i] = NULL; }
    for (int p = 0; p < W; p++) {
        if (p == r) continue;
        comm_dev_event_destroy(g->mbox[r * W + p].ev_sent);
        g->mbox[r * W + p].ev_sent = NULL;
        comm_dev_event_destroy(g->mbox[p * W + r].ev_taken);
        g->mbox[p * W + r].ev_taken = NULL;
    }
}

// Every rank of a local cuda group on one device: checked against the ranks that joined before.
static mo_status local_device_join(mo_comm_group *g, int r, void *stream) {
    int dev = -1;
    MO_TRY(comm_dev_stream_device(stream, &dev));
    mo_status st = MO_OK;
    pthread_mutex_lock(&g->mu);
    for (int p = 0; p < g->world; p++)
        if (p != r && g->slot[p].device >= 0 && g->slot[p].device != dev) {
            st = MO_FAIL(MO_ERR_UNSUPPORTED,
                         "--comm local: rank %d is on device %d but rank %d on device %d (every local rank "
                         "shares one GPU; one rank per GPU is --comm nccl)", r, dev, p, g->slot[p].device);
            break;
        }
    if (st == MO_OK) g->slot[r].device = dev;
    pthread_mutex_unlock(&g->mu);
    return st;
}
#endif


// ------------------------------------------------------------------------------- local data movement

static void cpu_sum(float *out, const float *const *in, int W, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float acc = in[0][i];
        for (int k = 1; k < W; k++) acc += in[k][i]; // rank order; FLT_EVAL_METHOD 0: fp32 adds
        out[i] = acc;
    }
}

// out := rank-ordered sum of in[0..W) (n elements), on the rank's backend (cpu or cuda).
static mo_status local_sum(mo_comm *c, float *out, const float *const *in, int W, size_t n) {
    if (n == 0) return MO_OK;
    if (W == 1 && out == in[0]) return MO_OK;
    if (!is_cuda(c->g)) {
        if (W == 1) memmove(out, in[0], n * sizeof(float));
        else cpu_sum(out, in, W, n);
        return MO_OK;
    }
#ifdef MEMOPT_HAVE_CUDA
    if (W == 1) return comm_dev_copy(c->ctx->stream, out, in[0], n * sizeof(float));
    return comm_dev_sum(c->ctx->stream, out, in, W, n);
#else
    return MO_FAIL(MO_ERR_UNSUPPORTED, "communicator: this build has no CUDA");
#endif
}

static mo_status local_copy(mo_comm *c, void *dst, const void *src, size_t bytes) {
    if (bytes == 0 || dst == src) return MO_OK;
    if (!is_cuda(c->g)) {
        memmove(dst, src, bytes);
        return MO_OK;
    }
#ifdef MEMOPT_HAVE_CUDA
    return comm_dev_copy(c->ctx->stream, dst, src, bytes);
#else
    return MO_FAIL(MO_ERR_UNSUPPORTED, "communicator: this build has no CUDA");
#endif
}

#ifdef MEMOPT_HAVE_CUDA
#define DEV(c, call) (is_cuda((c)->g) ? (call) : MO_OK)
#else
#define DEV(c, call) MO_OK
#endif

// The stream of rank r waits for the event ev (slot field) of every peer.
#define WAIT_PEERS(c, field)                                                                     \
    do {                                                                                         \
        for (int p_ = 0; p_ < (c)->g->world && st == MO_OK; p_++)                                \
            if (p_ != (c)->rank) st = DEV(c, comm_dev_wait((c)->ctx->stream, (c)->g->slot[p_].field)); \
    } while (0)

// A failed barrier (every rank takes this path together): the rank's own error if it has one, else
// the first failed peer's status; a last barrier keeps the slots stable while they are read.
static mo_status local_fail(mo_comm *c, mo_status mine, const char *name) {
    mo_comm_group *g = c->g;
    mo_status st = mine;
    if (st == MO_OK) {
        int p = 0;
        while (p < g->world && g->slot[p].status == MO_OK) p++;
        if (p < g->world)
            st = MO_FAIL((mo_status)g->slot[p].status, "%s on rank %d: rank %d failed its side of the op (%s; see that rank's error)",
                         name, c->rank, p, mo_status_name((mo_status)g->slot[p].status));
        else
            st = MO_FAIL(MO_ERR_INTERNAL, "%s on rank %d: the barrier failed but no rank reports an error", name, c->rank);
    }
    comm_barrier_and(g, 1);
    return st;
}

// Every slot names the same op, count and (the _axis forms) blocks and element size (read after
// barrier A); else a recorded failure.
static mo_status local_agree(mo_comm *c, mo_comm_op op, size_t n, size_t outer, size_t elem) {
    const mo_comm_group *g = c->g;
    for (int p = 0; p < g->world; p++) {
        if (g->slot[p].op != (int)op)
            return MO_FAIL(MO_ERR_INVALID, "%s on rank %d: rank %d calls %s at the same point (every rank must issue the same ops in the same order)",
                           mo_comm_op_name(op), c->rank, p, mo_comm_op_name((mo_comm_op)g->slot[p].op));
        if (g->slot[p].n != n || g->slot[p].outer != outer || g->slot[p].elem != elem)
            return MO_FAIL(MO_ERR_INVALID, "%s on rank %d: count %zu x %zu of %zu bytes but rank %d passes %zu x %zu of %zu "
                           "(every rank must give the same count)", mo_comm_op_name(op), c->rank, outer, n, elem, p,
                           g->slot[p].outer, g->slot[p].n, g->slot[p].elem);
    }
    return MO_OK;
}

// One local collective (see the top of the file). a: what the peers read; b: recv (allgather and
// reduce-scatter). outer blocks of n elements of elem bytes (1 and 4 but for the _axis forms; the
// all-reduce and the reduce-scatter are fp32). mine: the rank's own argument check.
static mo_status local_collective(mo_comm *c, mo_comm_op op, const void *a, void *b, size_t n, size_t outer, size_t elem,
                                  mo_status mine) {
    mo_comm_group *g = c->g;
    const char *name = mo_comm_op_name(op);
    int W = g->world, r = c->rank;
    comm_slot *s = &g->slot[r];
    mo_status st = mine;
    s->op = (int)op;
    s->n = n;
    s->outer = outer;
    s->elem = elem;
    s->a = a;
    if (st == MO_OK) st = DEV(c, comm_dev_record(s->ev_ready, c->ctx->stream));
    s->status = st;
    // A
    if (!comm_barrier_and(g, st == MO_OK)) return local_fail(c, st, name);
    mo_status agree = local_agree(c, op, n, outer, elem);
    if (agree != MO_OK) {
        comm_barrier_and(g, 1);
        return agree;
    }
    WAIT_PEERS(c, ev_ready);
    const float *in[MO_COMM_MAX_WORLD];
    if (st == MO_OK) {
        if (op == MO_COMM_OP_ALLREDUCE) {
            size_t off = comm_chunk_off(n, W, r), len = comm_chunk_off(n, W, r + 1) - off;
            for (int p = 0; p < W; p++) in[p] = (const float *)g->slot[p].a + off;
            st = local_sum(c, (float *)a + off, in, W, len);
        } else if (op == MO_COMM_OP_REDUCE_SCATTER) {
            for (size_t o = 0; o < outer && st == MO_OK; o++) {
                for (int p = 0; p < W; p++) in[p] = (const float *)g->slot[p].a + (o * (size_t)W + (size_t)r) * n;
                st = local_sum(c, (float *)b + o * n, in, W, n);
            }
        } else { // allgather: bytes
            size_t row = n * elem;
            for (size_t o = 0; o < outer && st == MO_OK; o++)
                for (int p = 0; p < W && st == MO_OK; p++)
                    st = local_copy(c, (char *)b + (o * (size_t)W + (size_t)p) * row, (const char *)g->slot[p].a + o * row, row);
        }
    }
    if (st == MO_OK) st = DEV(c, comm_dev_record(s->ev_done, c->ctx->stream));
    s->status = st;
    // B
    if (!comm_barrier_and(g, st == MO_OK)) return local_fail(c, st, name);
    WAIT_PEERS(c, ev_done);
    if (op != MO_COMM_OP_ALLREDUCE) return st;
    for (int k = 0; k < W && st == MO_OK; k++) {
        if (k == r) continue;
        size_t off = comm_chunk_off(n, W, k), len = comm_chunk_off(n, W, k + 1) - off;
        st = local_copy(c, (float *)a + off, (const float *)g->slot[k].a + off, len * sizeof(float));
    }
    if (st == MO_OK) st = DEV(c, comm_dev_record(s->ev_done2, c->ctx->stream));
    s->status = st;
    // C
    if (!comm_barrier_and(g, st == MO_OK)) return local_fail(c, st, name);
    WAIT_PEERS(c, ev_done2);
    return st;
}

// ---- point to point (local): a mailbox per (src, dst) -----------------------------------------

static mo_status local_send_post(mo_comm *c, const void *buf, size_t bytes, int dst) {
    mo_comm_group *g = c->g;
    comm_mbox *m = &g->mbox[c->rank * g->world + dst];
    MO_TRY(DEV(c, comm_dev_record(m->ev_sent, c->ctx->stream)));
    pthread_mutex_lock(&g->mu);
    while (m->state != 0) pthread_cond_wait(&g->cv, &g->mu);
    m->ptr = buf;
    m->bytes = bytes;
    m->state = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return MO_OK;
}

static mo_status local_send_finish(mo_comm *c, int dst) {
    mo_comm_group *g = c->g;
    comm_mbox *m = &g->mbox[c->rank * g->world + dst];
    pthread_mutex_lock(&g->mu);
    while (m->state != 2) pthread_cond_wait(&g->cv, &g->mu);
    int mismatch = m->mismatch;
    size_t want = m->want, bytes = m->bytes;
    m->state = 0;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (mismatch == 1)
        return MO_FAIL(MO_ERR_INVALID, "send from rank %d to rank %d: %zu bytes but the recv expects %zu", c->rank, dst,
                       bytes, want);
    if (mismatch)
        return MO_FAIL(MO_ERR_CUDA, "send from rank %d to rank %d: the receiver failed to copy (see its error)", c->rank, dst);
    // Later writes to buf on this rank's stream wait for the receiver's copy.
    return DEV(c, comm_dev_wait(c->ctx->stream, m->ev_taken));
}

static mo_status local_recv(mo_comm *c, void *buf, size_t bytes, int src) {
    mo_comm_group *g = c->g;
    comm_mbox *m = &g->mbox[src * g->world + c->rank];
    pthread_mutex_lock(&g->mu);
    while (m->state != 1) pthread_cond_wait(&g->cv, &g->mu);
    const void *ptr = m->ptr;
    size_t sent = m->bytes;
    pthread_mutex_unlock(&g->mu);
    mo_status st = MO_OK;
    int mismatch = 0;
    if (sent != bytes) {
        mismatch = 1;
        st = MO_FAIL(MO_ERR_INVALID, "recv on rank %d from rank %d: expects %zu bytes but the peer sends %zu", c->rank, src,
                     bytes, sent);
    } else {
        st = DEV(c, comm_dev_wait(c->ctx->stream, m->ev_sent));
        if (st == MO_OK) st = local_copy(c, buf, ptr, bytes);
        if (st == MO_OK) st = DEV(c, comm_dev_record(m->ev_taken, c->ctx->stream));
        if (st != MO_OK) mismatch = 2;
    }
    pthread_mutex_lock(&g->mu);
    m->want = bytes;
    m->mismatch = mismatch;
    m->state = 2;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return st;
}

// ------------------------------------------------------------------------------- the kind's table

static mo_status local_rank_init(mo_comm *c) {
#ifdef MEMOPT_HAVE_CUDA
    mo_comm_group *g = c->g;
    if (is_cuda(g)) {
        MO_TRY(local_device_join(g, c->rank, c->ctx->stream));
        mo_status st = local_events_create(g, c->rank);
        if (st != MO_OK) local_events_destroy(g, c->rank);
        return st;
    }
#else
    (void)c;
#endif
    return MO_OK;
}

static mo_status local_allreduce(mo_comm *c, float *buf, size_t n, mo_status mine) {
    return local_collective(c, MO_COMM_OP_ALLREDUCE, buf, NULL, n, 1, sizeof(float), mine);
}

static mo_status local_allgather(mo_comm *c, const float *send, float *recv, size_t n, mo_status mine) {
    return local_collective(c, MO_COMM_OP_ALLGATHER, send, recv, n, 1, sizeof(float), mine);
}

static mo_status local_reduce_scatter(mo_comm *c, const float *send, float *recv, size_t n, mo_status mine) {
    return local_collective(c, MO_COMM_OP_REDUCE_SCATTER, send, recv, n, 1, sizeof(float), mine);
}

static mo_status local_allgather_axis(mo_comm *c, const void *send, void *recv, size_t outer, size_t n, size_t elem,
                                      mo_status mine) {
    return local_collective(c, MO_COMM_OP_ALLGATHER, send, recv, n, outer, elem, mine);
}

static mo_status local_reduce_scatter_axis(mo_comm *c, const float *send, float *recv, size_t outer, size_t n,
                                           mo_status mine) {
    return local_collective(c, MO_COMM_OP_REDUCE_SCATTER, send, recv, n, outer, sizeof(float), mine);
}

static mo_status local_send(mo_comm *c, const void *buf, size_t bytes, int peer) {
    MO_TRY(local_send_post(c, buf, bytes, peer));
    return local_send_finish(c, peer);
}

static mo_status local_sendrecv(mo_comm *c, const void *send, size_t send_bytes, int dst, void *recv, size_t recv_bytes,
                                int src) {
    MO_TRY(local_send_post(c, send, send_bytes, dst));
    mo_status st = local_recv(c, recv, recv_bytes, src);
    mo_status st2 = local_send_finish(c, dst); // always: the receiver of our send is waiting on it
    MO_TRY(st);
    return st2;
}

static mo_status local_barrier(mo_comm *c) {
    mo_status st = DEV(c, comm_dev_sync(c->ctx->stream));
    if (!comm_barrier_and(c->g, st == MO_OK)) {
        if (st != MO_OK) return st;
        return MO_FAIL(MO_ERR_CUDA, "barrier on rank %d: another rank failed to finish its stream (see its error)", c->rank);
    }
    return MO_OK;
}

const comm_ops comm_local_ops = {
    .group_init = NULL,
    .group_fini = group_free_events,
    .rank_init = local_rank_init,
    .rank_fini = NULL, // the rank's events stay with the group (a peer may still be about to wait on one)
    .allreduce = local_allreduce,
    .allgather = local_allgather,
    .reduce_scatter = local_reduce_scatter,
    .allgather_axis = local_allgather_axis,
    .reduce_scatter_axis = local_reduce_scatter_axis,
    .send = local_send,
    .recv = local_recv,
    .sendrecv = local_sendrecv,
    .barrier = local_barrier,
    .drain = NULL, // time is modelled, at accounting
};
