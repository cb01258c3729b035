// The communicator front end (kinds, groups, argument checks, accounting, dispatch to nccl) and the
// local kind: ranks are threads of one process exchanging pointers through the group.
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

// ------------------------------------------------------------------------------- names, formulas

const char *mo_comm_kind_name(mo_comm_kind k) {
    switch (k) {
    case MO_COMM_LOCAL: return "local";
    case MO_COMM_NCCL: return "nccl";
    }
    return "?";
}

mo_status mo_comm_kind_parse(const char *s, mo_comm_kind *out) {
    if (s && !strcmp(s, "local")) { *out = MO_COMM_LOCAL; return MO_OK; }
    if (s && !strcmp(s, "nccl")) { *out = MO_COMM_NCCL; return MO_OK; }
    return MO_FAIL(MO_ERR_INVALID, "--comm: unknown communicator '%s' (accepted: local, nccl)", s ? s : "(null)");
}

const char *mo_comm_op_name(mo_comm_op op) {
    static const char *n[MO_COMM_OP_COUNT] = {"allreduce", "allgather", "reduce_scatter", "send",
                                              "recv", "sendrecv", "barrier"};
    return (unsigned)op < MO_COMM_OP_COUNT ? n[op] : "?";
}

// floor(a * num / den) without overflowing a * num (num, den small).
static uint64_t muldiv(uint64_t a, uint64_t num, uint64_t den) { return a / den * num + a % den * num / den; }

uint64_t mo_comm_op_bytes(mo_comm_op op, int world, uint64_t payload) {
    uint64_t W = world > 0 ? (uint64_t)world : 1;
    switch (op) {
    case MO_COMM_OP_ALLREDUCE: return muldiv(payload, 2 * (W - 1), W);
    case MO_COMM_OP_ALLGATHER:
    case MO_COMM_OP_REDUCE_SCATTER: return muldiv(payload, W - 1, W);
    case MO_COMM_OP_SEND:
    case MO_COMM_OP_RECV:
    case MO_COMM_OP_SENDRECV: return payload;
    case MO_COMM_OP_BARRIER:
    case MO_COMM_OP_COUNT: break;
    }
    return 0;
}

double mo_comm_model_ms(mo_comm_op op, int world, uint64_t wire_bytes, double gbps, double base_us,
                        double step_us) {
    if (world <= 1) return 0.0;                          // nothing crosses a link
    if (wire_bytes == 0 && op != MO_COMM_OP_BARRIER) return 0.0; // an empty op returns at once
    double steps;
    switch (op) {
    case MO_COMM_OP_ALLREDUCE:
    case MO_COMM_OP_BARRIER: steps = 2.0 * (world - 1); break;
    case MO_COMM_OP_ALLGATHER:
    case MO_COMM_OP_REDUCE_SCATTER: steps = world - 1; break;
    default: steps = 1.0; break;
    }
    return (double)wire_bytes / (gbps * 1e6) + (base_us + steps * step_us) * 1e-3;
}

void comm_account(mo_comm *c, mo_comm_op op, uint64_t bytes, uint64_t wire) {
    c->st.ops++;
    c->st.bytes += bytes;
    c->st.op_count[op]++;
    c->st.op_bytes[op] += bytes;
    if (!c->st.measured) {
        mo_comm_group *g = c->g;
        pthread_mutex_lock(&g->mu); // the settings may change between ops, from any rank's thread
        double gbps = g->link_gbps, base = g->base_us, step = g->step_us;
        pthread_mutex_unlock(&g->mu);
        double ms = mo_comm_model_ms(op, g->world, wire, gbps, base, step);
        c->st.time_ms += ms;
        c->st.op_ms[op] += ms;
    }
}

size_t comm_chunk_off(size_t n, int W, int k) {
    size_t units = (n + 63) / 64;
    size_t off = (size_t)muldiv(units, (uint64_t)k, (uint64_t)W) * 64;
    return off < n ? off : n;
}

// ------------------------------------------------------------------------------- the barrier

int comm_barrier_and(mo_comm_group *g, int ok) {
    if (g->world == 1 || g->mpi) return ok;
    pthread_mutex_lock(&g->mu);
    int gen = g->gen;
    if (!ok) g->bad++;
    if (++g->arrived == g->world) {
        g->last_ok = g->bad == 0;
        g->bad = 0;
        g->arrived = 0;
        g->gen++;
        pthread_cond_broadcast(&g->cv);
    } else {
        while (gen == g->gen) pthread_cond_wait(&g->cv, &g->mu);
    }
    // Safe to read after waking: the next barrier cannot complete (and rewrite last_ok) before this
    // thread arrives at it.
    int res = g->last_ok;
    pthread_mutex_unlock(&g->mu);
    return res;
}

// ------------------------------------------------------------------------------- groups and ranks

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

mo_status comm_group_alloc(mo_comm_kind kind, int world, mo_backend_kind backend, mo_comm_group **out) {
    if (!out) return MO_FAIL(MO_ERR_INVALID, "mo_comm_group_create: out is NULL");
    *out = NULL;
    if (kind != MO_COMM_LOCAL && kind != MO_COMM_NCCL)
        return MO_FAIL(MO_ERR_INVALID, "--comm: unknown communicator kind %d (accepted: local, nccl)", (int)kind);
    if (world < 1 || world > MO_COMM_MAX_WORLD)
        return MO_FAIL(MO_ERR_INVALID, "communicator world size %d: must be between 1 and %d", world, MO_COMM_MAX_WORLD);
    if (backend != MO_BACKEND_CUDA && backend != MO_BACKEND_CPU && backend != MO_BACKEND_DRY)
        return MO_FAIL(MO_ERR_INVALID, "communicator: unknown backend %d", (int)backend);
    if (kind == MO_COMM_NCCL && backend != MO_BACKEND_CUDA)
        return MO_FAIL(MO_ERR_INVALID, "--comm nccl needs --backend cuda (got %s; use --comm local)",
                       mo_backend_name(backend));
#ifndef MEMOPT_HAVE_CUDA
    if (backend == MO_BACKEND_CUDA)
        return MO_FAIL(MO_ERR_UNSUPPORTED, "--comm %s with --backend cuda: this build has no CUDA (built with MEMOPT_CUDA=OFF)",
                       mo_comm_kind_name(kind));
#endif
    mo_comm_group *g = calloc(1, sizeof *g);
    if (!g) return MO_FAIL(MO_ERR_OOM, "host out of memory for the communicator group");
    g->kind = kind;
    g->world = world;
    g->backend = backend;
    g->link_gbps = MO_COMM_DEFAULT_LINK_GBPS;
    g->base_us = MO_COMM_DEFAULT_BASE_US;
    g->step_us = MO_COMM_DEFAULT_STEP_US;
    g->ordered = 1;
    g->joined = calloc((size_t)world, sizeof *g->joined);
    g->slot = calloc((size_t)world, sizeof *g->slot);
    g->mbox = calloc((size_t)world * (size_t)world, sizeof *g->mbox);
    if (!g->joined || !g->slot || !g->mbox) {
        mo_comm_group_destroy(g);
        return MO_FAIL(MO_ERR_OOM, "host out of memory for the communicator group (world %d)", world);
    }
    for (int r = 0; r < world; r++) g->slot[r].device = -1;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    *out = g;
    return MO_OK;
}

mo_status mo_comm_group_create(mo_comm_kind kind, int world, mo_backend_kind backend, mo_comm_group **out) {
    if (!out) return MO_FAIL(MO_ERR_INVALID, "mo_comm_group_create: out is NULL");
    *out = NULL;
    mo_comm_group *g = NULL;
    MO_TRY(comm_group_alloc(kind, world, backend, &g));
#ifdef MEMOPT_HAVE_CUDA
    if (kind == MO_COMM_NCCL) {
        mo_status st = comm_nccl_group_init(g); // the NCCL id, made once for the world
        if (st != MO_OK) {
            mo_comm_group_destroy(g);
            return st;
        }
    }
#endif
    *out = g;
    return MO_OK;
}

void mo_comm_group_destroy(mo_comm_group *g) {
    if (!g) return;
#ifdef MEMOPT_HAVE_CUDA
    if (g->kind == MO_COMM_NCCL) comm_nccl_group_fini(g);
#endif
    group_free_events(g);
    if (g->joined) { // the mutex and condvar exist once the arrays do
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
    }
    free(g->joined);
    free(g->slot);
    free(g->mbox);
    free(g);
}

mo_status mo_comm_set_link_gbps(mo_comm_group *g, double gbps) {
    if (!g) return MO_FAIL(MO_ERR_INVALID, "mo_comm_set_link_gbps: group is NULL");
    if (!(gbps > 0) || gbps > 1e9) return MO_FAIL(MO_ERR_INVALID, "communicator link bandwidth %g GB/s: must be > 0", gbps);
    pthread_mutex_lock(&g->mu);
    g->link_gbps = gbps;
    pthread_mutex_unlock(&g->mu);
    return MO_OK;
}

mo_status mo_comm_set_latency_us(mo_comm_group *g, double base_us, double step_us) {
    if (!g) return MO_FAIL(MO_ERR_INVALID, "mo_comm_set_latency_us: group is NULL");
    if (!(base_us >= 0) || !(step_us >= 0) || base_us > 1e12 || step_us > 1e12)
        return MO_FAIL(MO_ERR_INVALID, "communicator latency base %g us, step %g us: must be >= 0", base_us, step_us);
    pthread_mutex_lock(&g->mu);
    g->base_us = base_us;
    g->step_us = step_us;
    pthread_mutex_unlock(&g->mu);
    return MO_OK;
}

mo_status mo_comm_set_ordered(mo_comm_group *g, int ordered) {
    if (!g) return MO_FAIL(MO_ERR_INVALID, "mo_comm_set_ordered: group is NULL");
    if (g->kind == MO_COMM_LOCAL && !ordered)
        return MO_FAIL(MO_ERR_INVALID, "the local communicator always sums in rank order (ordered 0 is nccl only)");
    pthread_mutex_lock(&g->mu);
    g->ordered = ordered ? 1 : 0;
    pthread_mutex_unlock(&g->mu);
    return MO_OK;
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

mo_status mo_comm_rank(mo_comm_group *g, int rank, mo_ctx *ctx, mo_comm **out) {
    if (!out) return MO_FAIL(MO_ERR_INVALID, "mo_comm_rank: out is NULL");
    *out = NULL;
    if (!g || !ctx) return MO_FAIL(MO_ERR_INVALID, "mo_comm_rank: %s is NULL", g ? "ctx" : "group");
    if (rank < 0 || rank >= g->world)
        return MO_FAIL(MO_ERR_INVALID, "communicator rank %d out of range: world size %d (ranks 0..%d)", rank,
                       g->world, g->world - 1);
    if (ctx->backend != g->backend)
        return MO_FAIL(MO_ERR_INVALID, "communicator rank %d: context backend %s but group backend %s", rank,
                       mo_backend_name(ctx->backend), mo_backend_name(g->backend));
    pthread_mutex_lock(&g->mu);
    int dup = g->joined[rank];
    if (!dup) g->joined[rank] = 1;
    pthread_mutex_unlock(&g->mu);
    if (dup) return MO_FAIL(MO_ERR_INVALID, "communicator rank %d joined twice", rank);

    mo_status st = MO_OK;
    mo_comm *c = calloc(1, sizeof *c);
    if (!c) { st = MO_FAIL(MO_ERR_OOM, "host out of memory for communicator rank %d", rank); goto fail; }
    c->g = g;
    c->rank = rank;
    c->ctx = ctx;
    c->st.measured = g->kind == MO_COMM_NCCL;
#ifdef MEMOPT_HAVE_CUDA
    if (g->kind == MO_COMM_NCCL) {
        st = comm_nccl_rank_init(c);
        if (st != MO_OK) goto fail;
    } else if (is_cuda(g)) {
        st = local_device_join(g, rank, ctx->stream);
        if (st != MO_OK) goto fail;
        st = local_events_create(g, rank);
        if (st != MO_OK) {
            local_events_destroy(g, rank);
            goto fail;
        }
    }
#endif
    *out = c;
    return MO_OK;
fail:
    free(c);
    pthread_mutex_lock(&g->mu);
    g->joined[rank] = 0;
    g->slot[rank].device = -1;
    pthread_mutex_unlock(&g->mu);
    return st;
}

// Not collective: the rank's events stay with the group (a peer may still be about to wait on one).
void mo_comm_destroy(mo_comm *c) {
    if (!c) return;
    mo_comm_group *g = c->g;
#ifdef MEMOPT_HAVE_CUDA
    if (g->kind == MO_COMM_NCCL) comm_nccl_rank_fini(c);
#endif
    pthread_mutex_lock(&g->mu);
    g->joined[c->rank] = 0;
    g->slot[c->rank].device = -1;
    pthread_mutex_unlock(&g->mu);
    free(c);
}

int mo_comm_world(const mo_comm *c) { return c ? c->g->world : 0; }
int mo_comm_rank_of(const mo_comm *c) { return c ? c->rank : -1; }
mo_comm_kind mo_comm_kind_of(const mo_comm *c) { return c ? c->g->kind : MO_COMM_LOCAL; }

mo_status mo_comm_stats(mo_comm *c, mo_comm_stat *out) {
    if (!c || !out) return MO_FAIL(MO_ERR_INVALID, "mo_comm_stats: %s is NULL", c ? "out" : "comm");
#ifdef MEMOPT_HAVE_CUDA
    if (c->g->kind == MO_COMM_NCCL) MO_TRY(comm_nccl_drain(c));
#endif
    *out = c->st;
    return MO_OK;
}

mo_status mo_comm_stats_reset(mo_comm *c) {
    if (!c) return MO_FAIL(MO_ERR_INVALID, "mo_comm_stats_reset: comm is NULL");
#ifdef MEMOPT_HAVE_CUDA
    if (c->g->kind == MO_COMM_NCCL) MO_TRY(comm_nccl_drain(c));
#endif
    int measured = c->st.measured;
    memset(&c->st, 0, sizeof c->st);
    c->st.measured = measured;
    return MO_OK;
}

// ------------------------------------------------------------------------------- argument checks

static int ranges_overlap(const void *a, size_t an, const void *b, size_t bn) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return an && bn && x < y + bn && y < x + an;
}

// The rank's own arguments of a collective: MO_OK or a recorded failure.
static mo_status check_coll(const mo_comm *c, mo_comm_op op, const void *a, const void *b, size_t n) {
    const char *name = mo_comm_op_name(op);
    int W = c->g->world, r = c->rank;
    if (n > SIZE_MAX / sizeof(float) / (size_t)W)
        return MO_FAIL(MO_ERR_INVALID, "%s on rank %d: count %zu overflows the buffer size", name, r, n);
    if (c->g->backend == MO_BACKEND_DRY || n == 0) return MO_OK; // dry pointers are never dereferenced
    if (!a || (op != MO_COMM_OP_ALLREDUCE && !b))
        return MO_FAIL(MO_ERR_INVALID, "%s on rank %d: NULL buffer with count %zu", name, r, n);
    size_t nb = n * sizeof(float), tb = nb * (size_t)W;
    if (op == MO_COMM_OP_ALLGATHER && ranges_overlap(a, nb, b, tb) && (const float *)a != (const float *)b + (size_t)r * n)
        return MO_FAIL(MO_ERR_INVALID, "allgather on rank %d: send overlaps recv (in place needs send == recv + rank * n)", r);
    if (op == MO_COMM_OP_REDUCE_SCATTER && ranges_overlap(a, tb, b, nb) && (const float *)b != (const float *)a + (size_t)r * n)
        return MO_FAIL(MO_ERR_INVALID, "reduce_scatter on rank %d: recv overlaps send (in place needs recv == send + rank * n)", r);
    return MO_OK;
}

static mo_status check_peer(const mo_comm *c, const char *what, int peer) {
    if (peer < 0 || peer >= c->g->world)
        return MO_FAIL(MO_ERR_INVALID, "%s on rank %d: peer %d out of range (world size %d)", what, c->rank, peer, c->g->world);
    if (peer == c->rank) return MO_FAIL(MO_ERR_INVALID, "%s on rank %d: peer is the rank itself", what, c->rank);
    return MO_OK;
}

static mo_status check_p2p(const mo_comm *c, const char *what, const void *buf, size_t bytes, int peer) {
    MO_TRY(check_peer(c, what, peer));
    if (bytes && !buf && c->g->backend != MO_BACKEND_DRY)
        return MO_FAIL(MO_ERR_INVALID, "%s on rank %d: NULL buffer with %zu bytes", what, c->rank, bytes);
    return MO_OK;
}

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

// Every slot names the same op and count (read after barrier A); else a recorded failure.
static mo_status local_agree(mo_comm *c, mo_comm_op op, size_t n) {
    const mo_comm_group *g = c->g;
    for (int p = 0; p < g->world; p++) {
        if (g->slot[p].op != (int)op)
            return MO_FAIL(MO_ERR_INVALID, "%s on rank %d: rank %d calls %s at the same point (every rank must issue the same ops in the same order)",
                           mo_comm_op_name(op), c->rank, p, mo_comm_op_name((mo_comm_op)g->slot[p].op));
        if (g->slot[p].n != n)
            return MO_FAIL(MO_ERR_INVALID, "%s on rank %d: count %zu but rank %d passes %zu (every rank must give the same count)",
                           mo_comm_op_name(op), c->rank, n, p, g->slot[p].n);
    }
    return MO_OK;
}

// One local collective (see the top of the file). a: what the peers read; b: recv (allgather and
// reduce-scatter). mine: the rank's own argument check.
static mo_status local_collective(mo_comm *c, mo_comm_op op, const float *a, float *b, size_t n, mo_status mine) {
    mo_comm_group *g = c->g;
    const char *name = mo_comm_op_name(op);
    int W = g->world, r = c->rank;
    comm_slot *s = &g->slot[r];
    mo_status st = mine;
    s->op = (int)op;
    s->n = n;
    s->a = a;
    if (st == MO_OK) st = DEV(c, comm_dev_record(s->ev_ready, c->ctx->stream));
    s->status = st;
    // A
    if (!comm_barrier_and(g, st == MO_OK)) return local_fail(c, st, name);
    mo_status agree = local_agree(c, op, n);
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
            for (int p = 0; p < W; p++) in[p] = (const float *)g->slot[p].a + (size_t)r * n;
            st = local_sum(c, b, in, W, n);
        } else { // allgather
            for (int p = 0; p < W && st == MO_OK; p++)
                st = local_copy(c, b + (size_t)p * n, g->slot[p].a, n * sizeof(float));
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

// ------------------------------------------------------------------------------- the public ops

#define CHECK_COMM(c, name) \
    do { if (!(c)) return MO_FAIL(MO_ERR_INVALID, "%s: comm is NULL", (name)); } while (0)

static int is_dry(const mo_comm *c) { return c->g->backend == MO_BACKEND_DRY; }
static int is_nccl(const mo_comm *c) { return c->g->kind == MO_COMM_NCCL; }

mo_status mo_comm_allreduce_sum(mo_comm *c, float *buf, size_t n) {
    CHECK_COMM(c, "allreduce");
    mo_comm_op op = MO_COMM_OP_ALLREDUCE;
    mo_status mine = check_coll(c, op, buf, NULL, n);
    if (is_dry(c) || is_nccl(c)) {
        MO_TRY(mine);
#ifdef MEMOPT_HAVE_CUDA
        if (is_nccl(c)) MO_TRY(comm_nccl_allreduce(c, buf, n));
#endif
    } else {
        MO_TRY(local_collective(c, op, buf, NULL, n, mine));
    }
    uint64_t b = mo_comm_op_bytes(op, c->g->world, (uint64_t)n * sizeof(float));
    comm_account(c, op, b, b);
    return MO_OK;
}

mo_status mo_comm_allgather(mo_comm *c, const float *send, float *recv, size_t n_per_rank) {
    CHECK_COMM(c, "allgather");
    mo_comm_op op = MO_COMM_OP_ALLGATHER;
    mo_status mine = check_coll(c, op, send, recv, n_per_rank);
    if (is_dry(c) || is_nccl(c)) {
        MO_TRY(mine);
#ifdef MEMOPT_HAVE_CUDA
        if (is_nccl(c)) MO_TRY(comm_nccl_allgather(c, send, recv, n_per_rank));
#endif
    } else {
        MO_TRY(local_collective(c, op, send, recv, n_per_rank, mine));
    }
    uint64_t b = mo_comm_op_bytes(op, c->g->world, (uint64_t)n_per_rank * sizeof(float) * (uint64_t)c->g->world);
    comm_account(c, op, b, b);
    return MO_OK;
}

mo_status mo_comm_reduce_scatter_sum(mo_comm *c, const float *send, float *recv, size_t n_per_rank) {
    CHECK_COMM(c, "reduce_scatter");
    mo_comm_op op = MO_COMM_OP_REDUCE_SCATTER;
    mo_status mine = check_coll(c, op, send, recv, n_per_rank);
    if (is_dry(c) || is_nccl(c)) {
        MO_TRY(mine);
#ifdef MEMOPT_HAVE_CUDA
        if (is_nccl(c)) MO_TRY(comm_nccl_reduce_scatter(c, send, recv, n_per_rank));
#endif
    } else {
        MO_TRY(local_collective(c, op, send, recv, n_per_rank, mine));
    }
    uint64_t b = mo_comm_op_bytes(op, c->g->world, (uint64_t)n_per_rank * sizeof(float) * (uint64_t)c->g->world);
    comm_account(c, op, b, b);
    return MO_OK;
}

mo_status mo_comm_send(mo_comm *c, const void *buf, size_t bytes, int peer) {
    CHECK_COMM(c, "send");
    MO_TRY(check_p2p(c, "send", buf, bytes, peer));
    if (is_nccl(c)) {
#ifdef MEMOPT_HAVE_CUDA
        MO_TRY(comm_nccl_sendrecv(c, buf, bytes, peer, NULL, 0, -1));
#endif
    } else if (!is_dry(c)) {
        MO_TRY(local_send_post(c, buf, bytes, peer));
        MO_TRY(local_send_finish(c, peer));
    }
    comm_account(c, MO_COMM_OP_SEND, bytes, bytes);
    return MO_OK;
}

mo_status mo_comm_recv(mo_comm *c, void *buf, size_t bytes, int peer) {
    CHECK_COMM(c, "recv");
    MO_TRY(check_p2p(c, "recv", buf, bytes, peer));
    if (is_nccl(c)) {
#ifdef MEMOPT_HAVE_CUDA
        MO_TRY(comm_nccl_sendrecv(c, NULL, 0, -1, buf, bytes, peer));
#endif
    } else if (!is_dry(c)) {
        MO_TRY(local_recv(c, buf, bytes, peer));
    }
    comm_account(c, MO_COMM_OP_RECV, bytes, bytes);
    return MO_OK;
}

mo_status mo_comm_sendrecv(mo_comm *c, const void *send, size_t send_bytes, int dst, void *recv,
                           size_t recv_bytes, int src) {
    CHECK_COMM(c, "sendrecv");
    MO_TRY(check_p2p(c, "sendrecv (send side)", send, send_bytes, dst));
    MO_TRY(check_p2p(c, "sendrecv (recv side)", recv, recv_bytes, src));
    if (is_nccl(c)) {
#ifdef MEMOPT_HAVE_CUDA
        MO_TRY(comm_nccl_sendrecv(c, send, send_bytes, dst, recv, recv_bytes, src));
#endif
    } else if (!is_dry(c)) {
        MO_TRY(local_send_post(c, send, send_bytes, dst));
        mo_status st = local_recv(c, recv, recv_bytes, src);
        mo_status st2 = local_send_finish(c, dst); // always: the receiver of our send is waiting on it
        MO_TRY(st);
        MO_TRY(st2);
    }
    uint64_t wire = send_bytes > recv_bytes ? send_bytes : recv_bytes;
    comm_account(c, MO_COMM_OP_SENDRECV, (uint64_t)send_bytes + recv_bytes, wire);
    return MO_OK;
}

mo_status mo_comm_barrier(mo_comm *c) {
    CHECK_COMM(c, "barrier");
    if (is_nccl(c)) {
#ifdef MEMOPT_HAVE_CUDA
        MO_TRY(comm_nccl_barrier(c));
#endif
    } else if (!is_dry(c)) {
        mo_status st = DEV(c, comm_dev_sync(c->ctx->stream));
        if (!comm_barrier_and(c->g, st == MO_OK)) {
            if (st != MO_OK) return st;
            return MO_FAIL(MO_ERR_CUDA, "barrier on rank %d: another rank failed to finish its stream (see its error)", c->rank);
        }
    }
    comm_account(c, MO_COMM_OP_BARRIER, 0, 0);
    return MO_OK;
}
