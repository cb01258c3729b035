// The communicator front end: kinds, groups, ranks, argument checks, accounting, the group-wide
// abort, and the public ops, each dispatched to its kind through the group's table (comm_ops in
// comm_internal.h): the local kind in comm_local.c, nccl in comm_nccl_cuda.c. The kinds never call
// each other; the dry backend is handled here (nothing moves, nothing waits).
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
#ifdef MEMOPT_HAVE_CUDA
    g->ops = kind == MO_COMM_NCCL ? &comm_nccl_ops : &comm_local_ops;
#else
    g->ops = &comm_local_ops; // nccl needs cuda: refused above
#endif
    g->world = world;
    g->backend = backend;
    g->link_gbps = MO_COMM_DEFAULT_LINK_GBPS;
    g->base_us = MO_COMM_DEFAULT_BASE_US;
    g->step_us = MO_COMM_DEFAULT_STEP_US;
    g->ordered = 1;
    g->joined = calloc((size_t)world, sizeof *g->joined);
    g->slot = calloc((size_t)world, sizeof *g->slot);
    g->mbox = calloc((size_t)world * (size_t)world, sizeof *g->mbox);
    g->pair_arrived = calloc((size_t)world * (size_t)world, sizeof *g->pair_arrived);
    g->pair_gen = calloc((size_t)world * (size_t)world, sizeof *g->pair_gen);
    if (!g->joined || !g->slot || !g->mbox || !g->pair_arrived || !g->pair_gen) {
        mo_comm_group_destroy(g);
        return MO_FAIL(MO_ERR_OOM, "host out of memory for the communicator group (world %d)", world);
    }
    for (int r = 0; r < world; r++) g->slot[r].device = -1;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    pthread_mutex_init(&g->guard_mu, NULL);
    pthread_cond_init(&g->guard_cv, NULL);
    g->inited = 1;
    *out = g;
    return MO_OK;
}

mo_status mo_comm_group_create(mo_comm_kind kind, int world, mo_backend_kind backend, mo_comm_group **out) {
    if (!out) return MO_FAIL(MO_ERR_INVALID, "mo_comm_group_create: out is NULL");
    *out = NULL;
    mo_comm_group *g = NULL;
    MO_TRY(comm_group_alloc(kind, world, backend, &g));
    if (g->ops->group_init) {
        mo_status st = g->ops->group_init(g); // nccl: the NCCL id, made once for the world
        if (st != MO_OK) {
            mo_comm_group_destroy(g);
            return st;
        }
    }
    *out = g;
    return MO_OK;
}

void mo_comm_group_destroy(mo_comm_group *g) {
    if (!g) return;
    if (g->ops) g->ops->group_fini(g);
    if (g->inited) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->guard_cv);
        pthread_mutex_destroy(&g->guard_mu);
    }
    free(g->pair_arrived);
    free(g->pair_gen);
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
    st = g->ops->rank_init(c);
    if (st != MO_OK) goto fail;
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
    if (g->ops->rank_fini) g->ops->rank_fini(c);
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
    if (c->g->ops->drain) MO_TRY(c->g->ops->drain(c));
    *out = c->st;
    return MO_OK;
}

mo_status mo_comm_stats_reset(mo_comm *c) {
    if (!c) return MO_FAIL(MO_ERR_INVALID, "mo_comm_stats_reset: comm is NULL");
    if (c->g->ops->drain) MO_TRY(c->g->ops->drain(c));
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

// The rank's own arguments of an _axis collective: counts that fit, buffers given, no overlap at all.
static mo_status check_axis(const mo_comm *c, mo_comm_op op, const void *send, const void *recv, size_t outer, size_t n,
                            size_t elem) {
    const char *name = op == MO_COMM_OP_ALLGATHER ? "allgather_axis" : "reduce_scatter_axis";
    int W = c->g->world, r = c->rank;
    if (elem < 1 || elem > 16) return MO_FAIL(MO_ERR_INVALID, "%s on rank %d: element size %zu (accepted: 1..16 bytes)", name, r, elem);
    if ((outer && n > SIZE_MAX / elem / (size_t)W / outer))
        return MO_FAIL(MO_ERR_INVALID, "%s on rank %d: %zu x %zu elements overflow the buffer size", name, r, outer, n);
    if (c->g->backend == MO_BACKEND_DRY || n == 0 || outer == 0) return MO_OK; // dry pointers are never dereferenced
    if (!send || !recv) return MO_FAIL(MO_ERR_INVALID, "%s on rank %d: NULL buffer with %zu x %zu elements", name, r, outer, n);
    size_t mine = outer * n * elem, whole = mine * (size_t)W;
    int ov = op == MO_COMM_OP_ALLGATHER ? ranges_overlap(send, mine, recv, whole) : ranges_overlap(send, whole, recv, mine);
    if (ov) return MO_FAIL(MO_ERR_INVALID, "%s on rank %d: send and recv overlap (not in place)", name, r);
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

// ------------------------------------------------------------------------------- the group-wide abort

mo_status mo_comm_group_guard(mo_comm_group *g) {
    if (!g) return MO_FAIL(MO_ERR_INVALID, "mo_comm_group_guard: group is NULL");
    if (g->mpi) return MO_FAIL(MO_ERR_INVALID, "mo_comm_group_guard: an MPI group has one rank per process (no host barrier)");
    pthread_mutex_lock(&g->guard_mu);
    g->guarded = 1;
    pthread_mutex_unlock(&g->guard_mu);
    return MO_OK;
}

void mo_comm_group_abort(mo_comm_group *g) {
    if (!g) return;
    pthread_mutex_lock(&g->guard_mu);
    g->aborted = 1;
    pthread_cond_broadcast(&g->guard_cv);
    pthread_mutex_unlock(&g->guard_mu);
}

void mo_comm_group_clear_abort(mo_comm_group *g) {
    if (!g) return;
    pthread_mutex_lock(&g->guard_mu);
    g->aborted = 0;
    pthread_mutex_unlock(&g->guard_mu);
}

// One entry barrier of `parties` ranks on (arrived, gen): MO_OK once all arrived, an error once the
// group is aborted. A barrier that completed lets every party through, even if the abort came after
// it: they are all entering the op.
static mo_status guard_wait(mo_comm_group *g, int *arrived, int *gen_p, int parties) {
    pthread_mutex_lock(&g->guard_mu);
    int gen = *gen_p, ok;
    if (g->aborted) {
        ok = 0;
    } else if (++*arrived == parties) {
        *arrived = 0;
        (*gen_p)++;
        pthread_cond_broadcast(&g->guard_cv);
        ok = 1;
    } else {
        while (*gen_p == gen && !g->aborted) pthread_cond_wait(&g->guard_cv, &g->guard_mu);
        ok = *gen_p != gen;
    }
    pthread_mutex_unlock(&g->guard_mu);
    return ok ? MO_OK : MO_FAIL(MO_ERR_INTERNAL, "stopped: another rank failed");
}

// Before a collective of a guarded group: every rank of the group.
static mo_status guard_all(mo_comm *c) {
    mo_comm_group *g = c->g;
    if (!g->guarded) return MO_OK;
    return guard_wait(g, &g->guard_arrived, &g->guard_gen, g->world);
}

static mo_status guard_one_pair(mo_comm_group *g, int a, int b) {
    int lo = a < b ? a : b, hi = a < b ? b : a, i = lo * g->world + hi;
    return guard_wait(g, &g->pair_arrived[i], &g->pair_gen[i], 2);
}

// Before a send / recv / sendrecv of a guarded group: the rank and each peer, pair by pair in one
// global order (lower pair first), so a ring of sendrecvs cannot deadlock on its entry barriers.
static mo_status guard_pair(mo_comm *c, int dst, int src) {
    mo_comm_group *g = c->g;
    if (!g->guarded) return MO_OK;
    int r = c->rank;
    if (dst == src) return guard_one_pair(g, r, dst);
    int d_lo = r < dst ? r : dst, d_hi = r < dst ? dst : r, s_lo = r < src ? r : src, s_hi = r < src ? src : r;
    int dst_first = d_lo < s_lo || (d_lo == s_lo && d_hi < s_hi);
    MO_TRY(guard_one_pair(g, r, dst_first ? dst : src));
    return guard_one_pair(g, r, dst_first ? src : dst);
}

// ------------------------------------------------------------------------------- the public ops

#define CHECK_COMM(c, name) \
    do { if (!(c)) return MO_FAIL(MO_ERR_INVALID, "%s: comm is NULL", (name)); } while (0)

static int is_dry(const mo_comm *c) { return c->g->backend == MO_BACKEND_DRY; }

mo_status mo_comm_allreduce_sum(mo_comm *c, float *buf, size_t n) {
    CHECK_COMM(c, "allreduce");
    mo_comm_op op = MO_COMM_OP_ALLREDUCE;
    mo_status mine = check_coll(c, op, buf, NULL, n);
    MO_TRY(guard_all(c));
    if (is_dry(c)) MO_TRY(mine);
    else MO_TRY(c->g->ops->allreduce(c, buf, n, mine));
    uint64_t b = mo_comm_op_bytes(op, c->g->world, (uint64_t)n * sizeof(float));
    comm_account(c, op, b, b);
    return MO_OK;
}

mo_status mo_comm_allgather(mo_comm *c, const float *send, float *recv, size_t n_per_rank) {
    CHECK_COMM(c, "allgather");
    mo_comm_op op = MO_COMM_OP_ALLGATHER;
    mo_status mine = check_coll(c, op, send, recv, n_per_rank);
    MO_TRY(guard_all(c));
    if (is_dry(c)) MO_TRY(mine);
    else MO_TRY(c->g->ops->allgather(c, send, recv, n_per_rank, mine));
    uint64_t b = mo_comm_op_bytes(op, c->g->world, (uint64_t)n_per_rank * sizeof(float) * (uint64_t)c->g->world);
    comm_account(c, op, b, b);
    return MO_OK;
}

mo_status mo_comm_reduce_scatter_sum(mo_comm *c, const float *send, float *recv, size_t n_per_rank) {
    CHECK_COMM(c, "reduce_scatter");
    mo_comm_op op = MO_COMM_OP_REDUCE_SCATTER;
    mo_status mine = check_coll(c, op, send, recv, n_per_rank);
    MO_TRY(guard_all(c));
    if (is_dry(c)) MO_TRY(mine);
    else MO_TRY(c->g->ops->reduce_scatter(c, send, recv, n_per_rank, mine));
    uint64_t b = mo_comm_op_bytes(op, c->g->world, (uint64_t)n_per_rank * sizeof(float) * (uint64_t)c->g->world);
    comm_account(c, op, b, b);
    return MO_OK;
}

mo_status mo_comm_allgather_axis(mo_comm *c, const void *send, void *recv, size_t outer, size_t n_per_rank, size_t elem) {
    CHECK_COMM(c, "allgather_axis");
    mo_comm_op op = MO_COMM_OP_ALLGATHER;
    mo_status mine = check_axis(c, op, send, recv, outer, n_per_rank, elem);
    MO_TRY(guard_all(c));
    if (is_dry(c)) MO_TRY(mine);
    else MO_TRY(c->g->ops->allgather_axis(c, send, recv, outer, n_per_rank, elem, mine));
    uint64_t b = mo_comm_op_bytes(op, c->g->world, (uint64_t)outer * n_per_rank * elem * (uint64_t)c->g->world);
    comm_account(c, op, b, b);
    return MO_OK;
}

mo_status mo_comm_reduce_scatter_axis(mo_comm *c, const float *send, float *recv, size_t outer, size_t n_per_rank) {
    CHECK_COMM(c, "reduce_scatter_axis");
    mo_comm_op op = MO_COMM_OP_REDUCE_SCATTER;
    mo_status mine = check_axis(c, op, send, recv, outer, n_per_rank, sizeof(float));
    MO_TRY(guard_all(c));
    if (is_dry(c)) MO_TRY(mine);
    else MO_TRY(c->g->ops->reduce_scatter_axis(c, send, recv, outer, n_per_rank, mine));
    uint64_t b = mo_comm_op_bytes(op, c->g->world, (uint64_t)outer * n_per_rank * sizeof(float) * (uint64_t)c->g->world);
    comm_account(c, op, b, b);
    return MO_OK;
}

mo_status mo_comm_send(mo_comm *c, const void *buf, size_t bytes, int peer) {
    CHECK_COMM(c, "send");
    MO_TRY(check_p2p(c, "send", buf, bytes, peer));
    MO_TRY(guard_pair(c, peer, peer));
    if (!is_dry(c)) MO_TRY(c->g->ops->send(c, buf, bytes, peer));
    comm_account(c, MO_COMM_OP_SEND, bytes, bytes);
    return MO_OK;
}

mo_status mo_comm_recv(mo_comm *c, void *buf, size_t bytes, int peer) {
    CHECK_COMM(c, "recv");
    MO_TRY(check_p2p(c, "recv", buf, bytes, peer));
    MO_TRY(guard_pair(c, peer, peer));
    if (!is_dry(c)) MO_TRY(c->g->ops->recv(c, buf, bytes, peer));
    comm_account(c, MO_COMM_OP_RECV, bytes, bytes);
    return MO_OK;
}

mo_status mo_comm_sendrecv(mo_comm *c, const void *send, size_t send_bytes, int dst, void *recv,
                           size_t recv_bytes, int src) {
    CHECK_COMM(c, "sendrecv");
    MO_TRY(check_p2p(c, "sendrecv (send side)", send, send_bytes, dst));
    MO_TRY(check_p2p(c, "sendrecv (recv side)", recv, recv_bytes, src));
    MO_TRY(guard_pair(c, dst, src));
    if (!is_dry(c)) MO_TRY(c->g->ops->sendrecv(c, send, send_bytes, dst, recv, recv_bytes, src));
    uint64_t wire = send_bytes > recv_bytes ? send_bytes : recv_bytes;
    comm_account(c, MO_COMM_OP_SENDRECV, (uint64_t)send_bytes + recv_bytes, wire);
    return MO_OK;
}

mo_status mo_comm_barrier(mo_comm *c) {
    CHECK_COMM(c, "barrier");
    MO_TRY(guard_all(c));
    if (!is_dry(c)) MO_TRY(c->g->ops->barrier(c));
    comm_account(c, MO_COMM_OP_BARRIER, 0, 0);
    return MO_OK;
}
