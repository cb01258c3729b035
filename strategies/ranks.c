// The ranks of a split run (strategies/ranks.h): threads, communicator groups, a creation barrier that
// unwinds on a failure anywhere, and the per-rank allocators, contexts and timers.
#include "strategies/ranks.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/device.h"
#include "kernels/ops_mixed.h"

// cuda: the device a rank's thread runs on (ranks_cuda.c); nothing to do elsewhere.
#ifdef MEMOPT_HAVE_CUDA
mo_status mo_ranks_get_device(int *dev);
mo_status mo_ranks_set_device(int dev);
#else
static mo_status mo_ranks_get_device(int *dev) { *dev = 0; return MO_OK; }
static mo_status mo_ranks_set_device(int dev) { (void)dev; return MO_OK; }
#endif

// ---- a host barrier that unwinds on a failure anywhere ---------------------------------------------

typedef struct ranks_world {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int failed;              // some rank failed: every waiter returns an error
    mo_status root_st;       // the first failure in time
    int root_rank;
    char root_msg[1024];
} ranks_world;

typedef struct ranks_sync {
    ranks_world *w;
    int parties, arrived, gen;
} ranks_sync;

// The creation barrier (before the communicators exist); the ops of a step are guarded by the
// communicators themselves (mo_comm_group_guard, aborted by world_fail).
static mo_status sync_wait(ranks_sync *b) {
    ranks_world *w = b->w;
    pthread_mutex_lock(&w->mu);
    int gen = b->gen, ok;
    if (w->failed) {
        ok = 0;
    } else if (++b->arrived == b->parties) {
        b->arrived = 0;
        b->gen++;
        pthread_cond_broadcast(&w->cv);
        ok = 1;
    } else {
        // A barrier that completed lets every party through, even if a failure came after it: they
        // are all entering the op.
        while (b->gen == gen && !w->failed) pthread_cond_wait(&w->cv, &w->mu);
        ok = b->gen != gen;
    }
    pthread_mutex_unlock(&w->mu);
    return ok ? MO_OK : MO_FAIL(MO_ERR_INTERNAL, "stopped: another rank failed");
}

struct mo_ranks {
    mo_ranks_config c;
    int W;
    int D;                   // dp replicas (c.dp, 0 read as 1)
    mo_comm_group *g_world, **g_tp, **g_pp, **g_emb, **g_dp; // [D*pp], [D*tp], [D*tp], [pp*tp] (NULL: world's)
    ranks_world w;
    ranks_sync create_sync;
    mo_rank *r;              // [W]
    mo_ranks_comm *comm;     // [W] mo_ranks_comm_stats's per-rank figures
    // the op of the current run_all
    mo_rank_fn fn;
    void *arg;
    int timed, creating, destroying;
    mo_rank_fn make;
    mo_rank_free_fn unmake;
    void *make_arg;
    mo_status broken;        // a failed op: every later mo_ranks_run returns it
    char broken_msg[1200];
};

// Every communicator group (NULL entries are skipped by the callee).
static void for_each_group(mo_ranks *s, void (*fn)(mo_comm_group *)) {
    for (int i = 0; s->g_tp && i < s->D * s->c.pp; i++) fn(s->g_tp[i]);
    for (int i = 0; s->g_pp && i < s->D * s->c.tp; i++) fn(s->g_pp[i]);
    for (int i = 0; s->g_emb && i < s->D * s->c.tp; i++) fn(s->g_emb[i]);
    for (int i = 0; s->g_dp && i < s->c.pp * s->c.tp; i++) fn(s->g_dp[i]);
    fn(s->g_world);
}

// A rank failed: every rank waiting at the creation barrier or at the entry barrier of any of its
// communicators' ops returns an error, and so does every later op.
static void world_fail(mo_ranks *s, int rank, mo_status st, const char *msg) {
    ranks_world *w = &s->w;
    pthread_mutex_lock(&w->mu);
    if (!w->failed) {
        w->failed = 1;
        w->root_st = st;
        w->root_rank = rank;
        snprintf(w->root_msg, sizeof w->root_msg, "%s", msg);
    }
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    for_each_group(s, mo_comm_group_abort);
}

static mo_status rank_create(mo_ranks *s, mo_rank *r) {
    MO_TRY(mo_allocator_create(&r->alloc, s->c.alloc, s->c.backend, s->c.cap_bytes, NULL));
    MO_TRY(mo_ctx_create(&r->ctx, s->c.backend, r->alloc));
    r->ctx->tf32 = s->c.tf32;
    MO_TRY(mo_timer_init(r->ctx, &r->timer));
    r->timer_ok = 1;
    // Everyone has a context before anyone joins a communicator (nccl's joins wait for all ranks).
    MO_TRY(sync_wait(&s->create_sync));
    if (s->W > 1) {
        int d = r->dp_rank, T = s->c.tp, P = s->c.pp;
        if (T > 1) MO_TRY(mo_comm_rank(s->g_tp[d * P + r->stage], r->tp_rank, r->ctx, &r->tp_comm));
        if (P > 1) MO_TRY(mo_comm_rank(s->g_pp[d * T + r->tp_rank], r->stage, r->ctx, &r->pp_comm));
        if (P > 1 && s->c.emb_groups && (r->first || r->last))
            MO_TRY(mo_comm_rank(s->g_emb[d * T + r->tp_rank], r->last, r->ctx, &r->emb_comm));
        if (s->D > 1 && T * P > 1) MO_TRY(mo_comm_rank(s->g_dp[r->stage * T + r->tp_rank], d, r->ctx, &r->dp_comm));
        MO_TRY(mo_comm_rank(s->g_world, r->rank, r->ctx, &r->world_comm));
        if (s->D > 1 && T * P == 1) r->dp_comm = r->world_comm; // the dp ranks are the world
    }
    return s->make(r, s->make_arg);
}

static void rank_destroy(mo_ranks *s, mo_rank *r) {
    if (r->model && s->unmake) s->unmake(r, s->make_arg);
    r->model = NULL;
    if (r->dp_comm != r->world_comm) mo_comm_destroy(r->dp_comm);
    mo_comm_destroy(r->world_comm);
    mo_comm_destroy(r->emb_comm);
    mo_comm_destroy(r->pp_comm);
    mo_comm_destroy(r->tp_comm);
    r->dp_comm = r->world_comm = r->emb_comm = r->pp_comm = r->tp_comm = NULL;
    if (r->timer_ok) mo_timer_destroy(&r->timer);
    r->timer_ok = 0;
    mo_ctx_destroy(r->ctx);
    r->ctx = NULL;
    mo_allocator_destroy(r->alloc);
    r->alloc = NULL;
}

static mo_status rank_do(mo_ranks *s, mo_rank *r) {
    if (s->c.backend == MO_BACKEND_CUDA) MO_TRY(mo_ranks_set_device(r->device));
    if (s->creating) return rank_create(s, r);
    if (s->destroying) { rank_destroy(s, r); return MO_OK; }
    if (!s->timed) return s->fn(r, s->arg);
    MO_TRY(mo_timer_start(r->ctx, &r->timer));
    MO_TRY(s->fn(r, s->arg));
    return mo_timer_stop(r->ctx, &r->timer, &r->step_ms);
}

typedef struct rank_thread {
    mo_ranks *s;
    mo_rank *r;
} rank_thread;

static void *rank_main(void *arg) {
    rank_thread *t = arg;
    t->r->st = rank_do(t->s, t->r);
    if (t->r->st != MO_OK) world_fail(t->s, t->r->rank, t->r->st, mo_errmsg());
    return NULL;
}

// "file.c:123: message" -> "message"
static const char *plain(const char *m) {
    const char *p = m;
    while (*p && *p != ':' && *p != ' ') p++;
    if (*p != ':' || !isdigit((unsigned char)p[1])) return m;
    p++;
    while (isdigit((unsigned char)*p)) p++;
    return p[0] == ':' && p[1] == ' ' ? p + 2 : m;
}

// The current op on every rank, each in its own thread; waits for all. Returns the first failure in
// time (re-raised on this thread, its message prefixed with the rank).
static mo_status run_all(mo_ranks *s) {
    int W = s->W;
    pthread_t *th = calloc((size_t)W, sizeof *th);
    int *started = calloc((size_t)W, sizeof *started);
    rank_thread *rt = calloc((size_t)W, sizeof *rt);
    if (!th || !started || !rt) {
        free(th); free(started); free(rt);
        return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the rank threads");
    }
    for (int r = 0; r < W; r++) {
        rt[r] = (rank_thread){s, &s->r[r]};
        started[r] = pthread_create(&th[r], NULL, rank_main, &rt[r]) == 0;
        if (!started[r]) {
            s->r[r].st = MO_ERR_INTERNAL;
            world_fail(s, r, MO_ERR_INTERNAL, "pthread_create failed");
        }
    }
    for (int r = 0; r < W; r++)
        if (started[r]) pthread_join(th[r], NULL);
    free(th);
    free(started);
    free(rt);
    if (!s->w.failed) return MO_OK;
    int r = s->w.root_rank;
    if (W == 1) return MO_FAIL(s->w.root_st, "%s", plain(s->w.root_msg));
    if (s->D > 1)
        return MO_FAIL(s->w.root_st, "rank %d (dp rank %d, stage %d, tp rank %d): %s", r, s->r[r].dp_rank, s->r[r].stage,
                       s->r[r].tp_rank, plain(s->w.root_msg));
    return MO_FAIL(s->w.root_st, "rank %d (stage %d, tp rank %d): %s", r, s->r[r].stage, s->r[r].tp_rank,
                   plain(s->w.root_msg));
}

static mo_status run_or_break(mo_ranks *s, mo_rank_fn fn, void *arg, int timed) {
    if (s->broken != MO_OK) return MO_FAIL(s->broken, "%s", s->broken_msg);
    s->fn = fn;
    s->arg = arg;
    s->timed = timed;
    mo_status st = run_all(s);
    if (st != MO_OK) {
        s->broken = st;
        snprintf(s->broken_msg, sizeof s->broken_msg, "%s", plain(mo_errmsg()));
    }
    return st;
}

mo_status mo_ranks_run(mo_ranks *s, mo_rank_fn fn, void *arg) { return run_or_break(s, fn, arg, 0); }
mo_status mo_ranks_run_timed(mo_ranks *s, mo_rank_fn fn, void *arg) { return run_or_break(s, fn, arg, 1); }

mo_status mo_ranks_validate_shape(int tp, int pp, int dp, mo_comm_kind comm) {
    if (dp == 0) dp = 1;
    if (tp < 1) return MO_FAIL(MO_ERR_INVALID, "--tp %d: must be a positive integer", tp);
    if (pp < 1) return MO_FAIL(MO_ERR_INVALID, "--pp %d: must be a positive integer", pp);
    if (dp < 1) return MO_FAIL(MO_ERR_INVALID, "--dp %d: must be a positive integer", dp);
    if (comm != MO_COMM_LOCAL && comm != MO_COMM_NCCL)
        return MO_FAIL(MO_ERR_INVALID, "--comm: kind %d is not local or nccl", (int)comm);
    if (dp > 1 && (long)dp * tp * pp > MO_COMM_MAX_WORLD)
        return MO_FAIL(MO_ERR_INVALID, "--dp %d --tp %d --pp %d: %ld ranks, more than the communicator's %d", dp, tp, pp,
                       (long)dp * tp * pp, MO_COMM_MAX_WORLD);
    if ((long)tp * pp > MO_COMM_MAX_WORLD)
        return MO_FAIL(MO_ERR_INVALID, "--tp %d --pp %d: %d ranks, more than the communicator's %d", tp, pp, tp * pp,
                       MO_COMM_MAX_WORLD);
    return MO_OK;
}

static mo_status nccl_devices(int W) {
    int n = 0;
    MO_TRY(mo_device_count(&n));
    if (n < W)
        return MO_FAIL(MO_ERR_INVALID, "--comm nccl: %d ranks need %d GPUs (one each), this machine has %d; "
                       "--comm local runs every rank on one GPU", W, W, n);
    return MO_OK;
}

mo_status mo_ranks_validate_devices(int tp, int pp, int dp, mo_comm_kind comm, mo_backend_kind backend) {
    if (dp < 1) dp = 1;
    if (comm == MO_COMM_NCCL && backend != MO_BACKEND_CUDA)
        return MO_FAIL(MO_ERR_INVALID, "--comm nccl: needs --backend cuda (--comm local runs on every backend)");
    // One GPU per rank: checked before anything is built, so the run says "invalid" (exit 2).
    if (comm == MO_COMM_NCCL) return nccl_devices(tp * pp * dp);
    return MO_OK;
}

static mo_status group(mo_ranks *s, int world, mo_comm_group **g) {
    MO_TRY(mo_comm_group_create(s->c.comm, world, s->c.backend, g));
    if (s->c.link_gbps > 0) MO_TRY(mo_comm_set_link_gbps(*g, s->c.link_gbps));
    // No rank enters an op that a failed peer will not join (world_fail aborts every group).
    return mo_comm_group_guard(*g);
}

static void ranks_free(mo_ranks *s) {
    if (s->g_tp) for (int i = 0; i < s->D * s->c.pp; i++) mo_comm_group_destroy(s->g_tp[i]);
    if (s->g_pp) for (int i = 0; i < s->D * s->c.tp; i++) mo_comm_group_destroy(s->g_pp[i]);
    if (s->g_emb) for (int i = 0; i < s->D * s->c.tp; i++) mo_comm_group_destroy(s->g_emb[i]);
    if (s->g_dp) for (int i = 0; i < s->c.pp * s->c.tp; i++) mo_comm_group_destroy(s->g_dp[i]);
    mo_comm_group_destroy(s->g_world);
    free(s->g_tp); free(s->g_pp); free(s->g_emb); free(s->g_dp);
    free(s->r);
    free(s->comm);
    pthread_cond_destroy(&s->w.cv);
    pthread_mutex_destroy(&s->w.mu);
    free(s);
}

void mo_ranks_destroy(mo_ranks *s) {
    if (!s) return;
    // Destroy is not a step: it runs on dead ranks too (the failure flag would stop nothing here).
    s->w.failed = 0;
    for_each_group(s, mo_comm_group_clear_abort);
    s->destroying = 1;
    run_all(s);
    ranks_free(s);
}

mo_status mo_ranks_create(mo_ranks **out, const mo_ranks_config *c, mo_rank_fn make, mo_rank_free_fn unmake,
                          void *arg) {
    *out = NULL;
    MO_TRY(mo_ranks_validate_shape(c->tp, c->pp, c->dp, c->comm));
    mo_ranks *s = calloc(1, sizeof *s);
    if (!s) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the ranks");
    pthread_mutex_init(&s->w.mu, NULL);
    pthread_cond_init(&s->w.cv, NULL);
    s->c = *c;
    s->D = c->dp > 1 ? c->dp : 1;
    s->c.dp = s->D;
    s->W = s->D * c->tp * c->pp;
    s->make = make;
    s->unmake = unmake;
    s->make_arg = arg;
    int T = c->tp, P = c->pp, D = s->D, W = s->W;
    mo_status st = MO_OK;
    s->r = calloc((size_t)W, sizeof *s->r);
    s->comm = calloc((size_t)W, sizeof *s->comm);
    s->g_tp = calloc((size_t)D * P, sizeof *s->g_tp);
    s->g_pp = calloc((size_t)D * T, sizeof *s->g_pp);
    s->g_emb = calloc((size_t)D * T, sizeof *s->g_emb);
    s->g_dp = calloc((size_t)P * T, sizeof *s->g_dp);
    s->create_sync = (ranks_sync){&s->w, W, 0, 0};
    if (!s->r || !s->comm || !s->g_tp || !s->g_pp || !s->g_emb || !s->g_dp) {
        ranks_free(s);
        return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the ranks");
    }
    int dev0 = 0;
    if (c->backend == MO_BACKEND_CUDA) {
        st = mo_ranks_get_device(&dev0);
        if (st == MO_OK && c->comm == MO_COMM_NCCL) st = nccl_devices(W);
    }
    if (st == MO_OK && W > 1) {
        for (int i = 0; i < D * P && st == MO_OK && T > 1; i++) st = group(s, T, &s->g_tp[i]);
        for (int i = 0; i < D * T && st == MO_OK && P > 1; i++) st = group(s, P, &s->g_pp[i]);
        for (int i = 0; i < D * T && st == MO_OK && P > 1 && c->emb_groups; i++) st = group(s, 2, &s->g_emb[i]);
        // dp's groups; with T * P 1 the world is the one dp group (no second communicator).
        for (int i = 0; i < P * T && st == MO_OK && D > 1 && T * P > 1; i++) st = group(s, D, &s->g_dp[i]);
        if (st == MO_OK) st = group(s, W, &s->g_world);
    }
    if (st != MO_OK) { ranks_free(s); return st; }
    for (int k = 0; k < W; k++) {
        mo_rank *r = &s->r[k];
        r->rank = k;
        r->dp = D; r->dp_rank = k / (T * P);
        r->tp = T; r->tp_rank = k % T;
        r->pp = P; r->stage = (k / T) % P;
        r->world = W;
        r->first = r->stage == 0; r->last = r->stage == P - 1;
        r->device = c->comm == MO_COMM_NCCL ? k : dev0;
    }
    s->creating = 1;
    st = run_all(s);
    s->creating = 0;
    if (st != MO_OK) {
        mo_ranks_destroy(s);
        return st;
    }
    *out = s;
    return MO_OK;
}

mo_status mo_ranks_allreduce(mo_comm *c, mo_ctx *ctx, mo_dtype dt, void *buf, size_t n) {
    if (!c) return MO_OK;
    if (dt == MO_F32) return mo_comm_allreduce_sum(c, (float *)buf, n);
    void *f = NULL; // (n) fp32
    MO_TRY(mo_scratch_alloc(ctx, n * sizeof(float), &f));
    mo_status st = mo_cast_mixed(ctx, MO_F32, f, dt, buf, n);
    if (st == MO_OK) st = mo_comm_allreduce_sum(c, (float *)f, n);
    if (st == MO_OK) st = mo_cast_mixed(ctx, dt, buf, MO_F32, f, n);
    mo_status st2 = mo_scratch_free(ctx, f);
    return st != MO_OK ? st : st2;
}

mo_status mo_ranks_allgather_seq(mo_comm *c, mo_dtype dt, const void *send, void *recv, size_t outer, size_t n_per_rank) {
    if (!c) return MO_OK;
    return mo_comm_allgather_axis(c, send, recv, outer, n_per_rank, mo_dtype_size(dt));
}

mo_status mo_ranks_reduce_scatter_seq(mo_comm *c, mo_ctx *ctx, mo_dtype dt, const void *send, void *recv, size_t outer,
                                      size_t n_per_rank) {
    if (!c) return MO_OK;
    if (dt == MO_F32) return mo_comm_reduce_scatter_axis(c, (const float *)send, (float *)recv, outer, n_per_rank);
    size_t whole = outer * (size_t)mo_comm_world(c) * n_per_rank, part = outer * n_per_rank;
    void *f = NULL; // (whole) the widened partial sums, then (part) the rank's sums
    MO_TRY(mo_scratch_alloc(ctx, (whole + part) * sizeof(float), &f));
    float *wide = f, *mine = (float *)f + whole;
    mo_status st = mo_cast_mixed(ctx, MO_F32, wide, dt, send, whole);
    if (st == MO_OK) st = mo_comm_reduce_scatter_axis(c, wide, mine, outer, n_per_rank);
    if (st == MO_OK) st = mo_cast_mixed(ctx, dt, recv, MO_F32, mine, part);
    mo_status st2 = mo_scratch_free(ctx, f);
    return st != MO_OK ? st : st2;
}

mo_status mo_ranks_alive(const mo_ranks *s) {
    return s->broken == MO_OK ? MO_OK : MO_FAIL(s->broken, "%s", s->broken_msg);
}

int mo_ranks_world(const mo_ranks *s) { return s->W; }
mo_rank *mo_ranks_at(mo_ranks *s, int rank) { return &s->r[rank]; }

double mo_ranks_step_ms(const mo_ranks *s) {
    double ms = 0;
    for (int r = 0; r < s->W; r++)
        if (s->r[r].step_ms > ms) ms = s->r[r].step_ms;
    return ms;
}

int mo_ranks_peak_rank(mo_ranks *s) {
    int best = 0;
    uint64_t peak = 0;
    for (int r = 0; r < s->W; r++) {
        mo_alloc_stats st;
        mo_allocator_stats(s->r[r].alloc, &st);
        if (r == 0 || st.peak_allocated_bytes > peak) { best = r; peak = st.peak_allocated_bytes; }
    }
    return best;
}

void mo_ranks_reset_peaks(mo_ranks *s) {
    for (int r = 0; r < s->W; r++) mo_allocator_reset_peaks(s->r[r].alloc);
}

static mo_status rank_comm_stats(mo_rank *r, void *arg) {
    mo_ranks_comm *out = &((mo_ranks *)arg)->comm[r->rank];
    memset(out, 0, sizeof *out);
    // dp_comm counted once: with tp * pp 1 it is world_comm.
    mo_comm *cs[5] = {r->tp_comm, r->pp_comm, r->emb_comm, r->world_comm, r->dp_comm != r->world_comm ? r->dp_comm : NULL};
    for (int i = 0; i < 5; i++) {
        if (!cs[i]) continue;
        mo_comm_stat st;
        MO_TRY(mo_comm_stats(cs[i], &st));
        out->ops += st.ops;
        out->bytes += st.bytes;
        out->ms_max_rank += st.time_ms;
        out->measured = st.measured;
    }
    return MO_OK;
}

static mo_status rank_comm_reset(mo_rank *r, void *arg) {
    (void)arg;
    mo_comm *cs[5] = {r->tp_comm, r->pp_comm, r->emb_comm, r->world_comm, r->dp_comm != r->world_comm ? r->dp_comm : NULL};
    for (int i = 0; i < 5; i++)
        if (cs[i]) MO_TRY(mo_comm_stats_reset(cs[i]));
    return MO_OK;
}

mo_status mo_ranks_comm_stats(mo_ranks *s, mo_ranks_comm *out) {
    memset(out, 0, sizeof *out);
    if (s->W == 1) return MO_OK;
    MO_TRY(mo_ranks_run(s, rank_comm_stats, s));
    for (int r = 0; r < s->W; r++) {
        const mo_ranks_comm *c = &s->comm[r];
        out->ops += c->ops;
        out->bytes += c->bytes;
        if (c->bytes > out->bytes_max_rank) out->bytes_max_rank = c->bytes;
        if (c->ms_max_rank > out->ms_max_rank) out->ms_max_rank = c->ms_max_rank;
        out->measured = c->measured;
    }
    return MO_OK;
}

mo_status mo_ranks_comm_reset(mo_ranks *s) {
    if (s->W == 1) return MO_OK;
    return mo_ranks_run(s, rank_comm_reset, NULL);
}
