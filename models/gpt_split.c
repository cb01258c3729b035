// The split GPT's ranks: threads, communicators, host barriers and the gather back to the unsplit
// layout (models/gpt_split.h). The model side of each rank is gpt_step.c / gpt_params.c with a shard.
#include "gpt_split.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpt_shard.h"
#include "gpt_zero.h"
#include "kernels/device.h"
#include "strategies/comm.h"

// cuda: the device a rank's thread runs on (gpt_split_cuda.c); nothing to do elsewhere.
#ifdef MEMOPT_HAVE_CUDA
mo_status gpt_split_get_device(int *dev);
mo_status gpt_split_set_device(int dev);
#else
static mo_status gpt_split_get_device(int *dev) { *dev = 0; return MO_OK; }
static mo_status gpt_split_set_device(int dev) { (void)dev; return MO_OK; }
#endif

// ---- a host barrier that unwinds on a failure anywhere ---------------------------------------------

typedef struct split_world {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int failed;              // some rank failed: every waiter returns an error
    mo_status root_st;       // the first failure in time
    int root_rank;
    char root_msg[1024];
} split_world;

typedef struct gpt_sync {
    split_world *w;
    int parties, arrived, gen;
} gpt_sync;

// The split's own barrier (the ranks' creation, before their communicators exist); the ops of the
// step are guarded by the communicators themselves (mo_comm_group_guard, aborted by world_fail).
static mo_status gpt_sync_wait(gpt_sync *b) {
    split_world *w = b->w;
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

// ---- the split -----------------------------------------------------------------------------------

typedef enum rank_op { OP_CREATE, OP_SET_BATCH, OP_STEP, OP_FB, OP_READ, OP_COMM_STATS, OP_COMM_RESET, OP_DESTROY } rank_op;

typedef struct rank_state {
    struct mo_gpt_split *s;
    int rank, device;
    mo_gpt_shard sh;
    mo_allocator *a;
    mo_ctx *x;
    mo_gpt *m;
    mo_comm *c_tp, *c_pp, *c_emb, *c_world;
    mo_timer t;
    int timer_ok;
    double step_ms;
    mo_gpt_split_comm comm; // OP_COMM_STATS
    float *host;            // OP_READ: the rank's params or grads
    unsigned char *seen;    // OP_READ, data parallel: the elements of host the rank owns (the usual layout)
    mo_status st;
} rank_state;

struct mo_gpt_split {
    mo_gpt_config cfg;
    mo_gpt_config rank_cfg;  // a rank's model: cfg, with batch / dp under data parallelism
    int dp;
    mo_gpt_split_config sc;
    int tp, pp, W;
    mo_comm_group *g_world, **g_tp, **g_pp, **g_emb; // [pp], [tp], [tp]
    split_world w;
    gpt_sync create_sync;
    rank_state *r;          // [W]
    rank_op op;             // the op of the current run_all
    int read_what;
    const int *tokens, *targets;
    mo_status broken;       // a failed step: every later call returns it
    char broken_msg[1200];
    double last_loss, last_grad_norm, step_ms, recompute_ms;
};

// Every communicator group of the split (NULL entries are skipped by the callee).
static void for_each_group(mo_gpt_split *s, void (*fn)(mo_comm_group *)) {
    for (int i = 0; s->g_tp && i < s->pp; i++) fn(s->g_tp[i]);
    for (int i = 0; s->g_pp && i < s->tp; i++) fn(s->g_pp[i]);
    for (int i = 0; s->g_emb && i < s->tp; i++) fn(s->g_emb[i]);
    fn(s->g_world);
}

// A rank failed: every rank waiting at a barrier of the split (its creation barrier, or the entry
// barrier of any of its communicators' ops) returns an error, and so does every later op.
static void world_fail(mo_gpt_split *s, int rank, mo_status st, const char *msg) {
    split_world *w = &s->w;
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

static mo_status rank_create(rank_state *rs) {
    mo_gpt_split *s = rs->s;
    mo_gpt_shard *sh = &rs->sh;
    MO_TRY(mo_allocator_create(&rs->a, s->sc.alloc, s->sc.backend, s->sc.cap_bytes, NULL));
    MO_TRY(mo_ctx_create(&rs->x, s->sc.backend, rs->a));
    rs->x->tf32 = s->cfg.tf32;
    MO_TRY(mo_timer_init(rs->x, &rs->t));
    rs->timer_ok = 1;
    // Everyone has a context before anyone joins a communicator (nccl's joins wait for all ranks).
    MO_TRY(gpt_sync_wait(&s->create_sync));
    if (s->W == 1) return mo_gpt_create_shard(&rs->m, &s->cfg, rs->x, NULL); // the plain model
    if (s->dp > 1) { // data parallel: the whole model on each rank, its batch share
        MO_TRY(mo_comm_rank(s->g_world, rs->rank, rs->x, &rs->c_world));
        sh->world_comm = sh->dp_comm = rs->c_world;
        return mo_gpt_create_shard(&rs->m, &s->rank_cfg, rs->x, sh);
    }
    if (s->tp > 1) MO_TRY(mo_comm_rank(s->g_tp[sh->stage], sh->tp_rank, rs->x, &rs->c_tp));
    if (s->pp > 1) MO_TRY(mo_comm_rank(s->g_pp[sh->tp_rank], sh->stage, rs->x, &rs->c_pp));
    if (s->pp > 1 && (sh->first || sh->last)) MO_TRY(mo_comm_rank(s->g_emb[sh->tp_rank], sh->last, rs->x, &rs->c_emb));
    MO_TRY(mo_comm_rank(s->g_world, rs->rank, rs->x, &rs->c_world));
    sh->tp_comm = rs->c_tp;
    sh->pp_comm = rs->c_pp;
    sh->emb_comm = rs->c_emb;
    sh->world_comm = rs->c_world;
    return mo_gpt_create_shard(&rs->m, &s->cfg, rs->x, sh);
}

static mo_status rank_timed(rank_state *rs, int update) {
    MO_TRY(mo_timer_start(rs->x, &rs->t));
    MO_TRY(mo_gpt_forward_backward(rs->m));
    if (update) MO_TRY(mo_gpt_update(rs->m));
    return mo_timer_stop(rs->x, &rs->t, &rs->step_ms);
}

static mo_status rank_comm_stats(rank_state *rs) {
    memset(&rs->comm, 0, sizeof rs->comm);
    mo_comm *cs[4] = {rs->c_tp, rs->c_pp, rs->c_emb, rs->c_world};
    for (int i = 0; i < 4; i++) {
        if (!cs[i]) continue;
        mo_comm_stat st;
        MO_TRY(mo_comm_stats(cs[i], &st));
        rs->comm.ops += st.ops;
        rs->comm.bytes += st.bytes;
        rs->comm.ms_max_rank += st.time_ms;
        rs->comm.measured = st.measured;
    }
    return MO_OK;
}

static mo_status rank_comm_reset(rank_state *rs) {
    mo_comm *cs[4] = {rs->c_tp, rs->c_pp, rs->c_emb, rs->c_world};
    for (int i = 0; i < 4; i++)
        if (cs[i]) MO_TRY(mo_comm_stats_reset(cs[i]));
    return MO_OK;
}

static mo_status rank_read(rank_state *rs) {
    mo_gpt *m = rs->m;
    size_t n = m->num_params;
    rs->host = malloc((n ? n : 1) * sizeof(float));
    if (!rs->host) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the gather");
    if (m->zero) { // data parallel: the rank's own chunks, into the usual layout
        rs->seen = calloc(n ? n : 1, 1);
        if (!rs->seen) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the gather");
        return gpt_zero_export(m, rs->s->read_what, rs->host, rs->seen);
    }
    return mo_memcpy_d2h(rs->x, rs->host, rs->s->read_what ? (const float *)m->grads : m->params, n * sizeof(float));
}

static void rank_destroy(rank_state *rs) {
    mo_gpt_destroy(rs->m);
    rs->m = NULL;
    mo_comm_destroy(rs->c_world);
    mo_comm_destroy(rs->c_emb);
    mo_comm_destroy(rs->c_pp);
    mo_comm_destroy(rs->c_tp);
    rs->c_world = rs->c_emb = rs->c_pp = rs->c_tp = NULL;
    if (rs->timer_ok) mo_timer_destroy(&rs->t);
    rs->timer_ok = 0;
    mo_ctx_destroy(rs->x);
    rs->x = NULL;
    mo_allocator_destroy(rs->a);
    rs->a = NULL;
}

static mo_status rank_do(rank_state *rs) {
    mo_gpt_split *s = rs->s;
    if (s->sc.backend == MO_BACKEND_CUDA) MO_TRY(gpt_split_set_device(rs->device));
    switch (s->op) {
    case OP_CREATE: return rank_create(rs);
    case OP_SET_BATCH: { // a data-parallel rank takes rows [r B/dp, (r+1) B/dp) of the global batch
        size_t off = (size_t)rs->sh.dp_rank * (size_t)s->rank_cfg.batch * (size_t)s->cfg.seq;
        return mo_gpt_set_batch(rs->m, s->tokens + off, s->targets + off);
    }
    case OP_STEP: return rank_timed(rs, 1);
    case OP_FB: return rank_timed(rs, 0);
    case OP_READ: return rank_read(rs);
    case OP_COMM_STATS: return rank_comm_stats(rs);
    case OP_COMM_RESET: return rank_comm_reset(rs);
    case OP_DESTROY: rank_destroy(rs); return MO_OK;
    }
    return MO_OK;
}

static void *rank_main(void *arg) {
    rank_state *rs = arg;
    rs->st = rank_do(rs);
    if (rs->st != MO_OK) world_fail(rs->s, rs->rank, rs->st, mo_errmsg());
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

// Runs op on every rank, each in its own thread, and waits for all. Returns the first failure in time
// (re-raised on this thread, its message prefixed with the rank).
static mo_status run_all(mo_gpt_split *s, rank_op op) {
    s->op = op;
    pthread_t *th = calloc((size_t)s->W, sizeof *th);
    int *started = calloc((size_t)s->W, sizeof *started);
    if (!th || !started) { free(th); free(started); return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the rank threads"); }
    for (int r = 0; r < s->W; r++) {
        started[r] = pthread_create(&th[r], NULL, rank_main, &s->r[r]) == 0;
        if (!started[r]) {
            s->r[r].st = MO_ERR_INTERNAL;
            world_fail(s, r, MO_ERR_INTERNAL, "pthread_create failed");
        }
    }
    for (int r = 0; r < s->W; r++)
        if (started[r]) pthread_join(th[r], NULL);
    free(th);
    free(started);
    if (!s->w.failed) return MO_OK;
    int r = s->w.root_rank;
    if (s->W == 1) return MO_FAIL(s->w.root_st, "%s", plain(s->w.root_msg));
    return MO_FAIL(s->w.root_st, "rank %d (stage %d, tp rank %d): %s", r, s->r[r].sh.stage, s->r[r].sh.tp_rank,
                   plain(s->w.root_msg));
}

// An op that may fail on a rank midway (a step): a failure makes the split dead.
static mo_status run_or_break(mo_gpt_split *s, rank_op op) {
    if (s->broken != MO_OK) return MO_FAIL(s->broken, "%s", s->broken_msg);
    mo_status st = run_all(s, op);
    if (st != MO_OK) {
        s->broken = st;
        snprintf(s->broken_msg, sizeof s->broken_msg, "%s", plain(mo_errmsg()));
    }
    return st;
}

mo_status mo_gpt_split_validate(const mo_gpt_config *c, const mo_gpt_split_config *sc) {
    MO_TRY(mo_gpt_validate(c));
    int tp = sc->tp, pp = sc->pp;
    if (tp < 1) return MO_FAIL(MO_ERR_INVALID, "--tp %d: must be a positive integer", tp);
    if (pp < 1) return MO_FAIL(MO_ERR_INVALID, "--pp %d: must be a positive integer", pp);
    int dp = sc->dp ? sc->dp : 1, zero = sc->zero;
    if (dp < 1) return MO_FAIL(MO_ERR_INVALID, "--dp %d: must be a positive integer", dp);
    if (zero < 0 || zero > 3) return MO_FAIL(MO_ERR_INVALID, "--zero %d: accepted 0, 1, 2, 3", zero);
    if (dp > 1 && tp * pp > 1)
        return MO_FAIL(MO_ERR_INVALID, "--dp %d with --tp %d --pp %d: data parallelism runs on unsplit models only for now "
                       "(accepted: --tp 1 --pp 1 with --dp)", dp, tp, pp);
    if (dp > MO_COMM_MAX_WORLD)
        return MO_FAIL(MO_ERR_INVALID, "--dp %d: more ranks than the communicator's %d", dp, MO_COMM_MAX_WORLD);
    if (c->batch % dp || (c->batch / dp) % c->accum)
        return MO_FAIL(MO_ERR_INVALID, "--dp %d: batch %d is not divisible by dp x accum = %d (each rank takes batch/dp "
                       "rows, in accum micro-batches)", dp, c->batch, dp * c->accum);
    if (sc->comm != MO_COMM_LOCAL && sc->comm != MO_COMM_NCCL)
        return MO_FAIL(MO_ERR_INVALID, "--comm: kind %d is not local or nccl", sc->comm);
    if ((long)tp * pp > MO_COMM_MAX_WORLD)
        return MO_FAIL(MO_ERR_INVALID, "--tp %d --pp %d: %d ranks, more than the communicator's %d", tp, pp, tp * pp,
                       MO_COMM_MAX_WORLD);
    if (c->heads % tp)
        return MO_FAIL(MO_ERR_INVALID, "--tp %d: the %d attention heads are not divisible by it (each tp rank takes heads/tp)",
                       tp, c->heads);
    if ((4 * c->hidden) % tp)
        return MO_FAIL(MO_ERR_INVALID, "--tp %d: the MLP width 4*hidden = %d is not divisible by it", tp, 4 * c->hidden);
    if (c->layers % pp)
        return MO_FAIL(MO_ERR_INVALID, "--pp %d: the %d layers are not divisible by it (every stage holds layers/pp blocks)",
                       pp, c->layers);
    if (sc->comm == MO_COMM_NCCL && sc->backend != MO_BACKEND_CUDA)
        return MO_FAIL(MO_ERR_INVALID, "--comm nccl: needs --backend cuda (--comm local runs on every backend)");
    if (sc->comm == MO_COMM_NCCL) {
        // One GPU per rank: checked here, before anything is built, so the run says "invalid" (exit 2).
        int n = 0, W = tp * pp * dp;
        MO_TRY(mo_device_count(&n));
        if (n < W)
            return MO_FAIL(MO_ERR_INVALID, "--comm nccl: %d ranks need %d GPUs (one each), this machine has %d; "
                           "--comm local runs every rank on one GPU", W, W, n);
    }
    return MO_OK;
}

static mo_status group(mo_gpt_split *s, int world, mo_comm_group **g) {
    MO_TRY(mo_comm_group_create((mo_comm_kind)s->sc.comm, world, s->sc.backend, g));
    if (s->sc.link_gbps > 0) MO_TRY(mo_comm_set_link_gbps(*g, s->sc.link_gbps));
    // No rank enters an op that a failed peer will not join (world_fail aborts every group).
    return mo_comm_group_guard(*g);
}

static void split_free(mo_gpt_split *s) {
    if (s->g_tp) for (int i = 0; i < s->pp; i++) mo_comm_group_destroy(s->g_tp[i]);
    if (s->g_pp) for (int i = 0; i < s->tp; i++) mo_comm_group_destroy(s->g_pp[i]);
    if (s->g_emb) for (int i = 0; i < s->tp; i++) mo_comm_group_destroy(s->g_emb[i]);
    mo_comm_group_destroy(s->g_world);
    free(s->g_tp); free(s->g_pp); free(s->g_emb);
    free(s->r);
    pthread_cond_destroy(&s->w.cv);
    pthread_mutex_destroy(&s->w.mu);
    free(s);
}

void mo_gpt_split_destroy(mo_gpt_split *s) {
    if (!s) return;
    // Destroy is not a step: it runs on a dead split too (the failure flag would stop nothing here).
    s->w.failed = 0;
    for_each_group(s, mo_comm_group_clear_abort);
    run_all(s, OP_DESTROY);
    split_free(s);
}

mo_status mo_gpt_split_create(mo_gpt_split **out, const mo_gpt_config *cfg, const mo_gpt_split_config *sc) {
    *out = NULL;
    MO_TRY(mo_gpt_split_validate(cfg, sc));
    mo_gpt_split *s = calloc(1, sizeof *s);
    if (!s) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the split");
    pthread_mutex_init(&s->w.mu, NULL);
    pthread_cond_init(&s->w.cv, NULL);
    s->cfg = *cfg;
    s->sc = *sc;
    s->tp = sc->tp;
    s->pp = sc->pp;
    s->dp = sc->dp > 1 ? sc->dp : 1;
    s->W = sc->tp * sc->pp * s->dp;
    s->rank_cfg = *cfg;
    s->rank_cfg.batch = cfg->batch / s->dp;
    s->last_loss = s->last_grad_norm = NAN;
    int T = s->tp, P = s->pp, W = s->W;
    mo_status st = MO_OK;
    s->r = calloc((size_t)W, sizeof *s->r);
    s->g_tp = calloc((size_t)P, sizeof *s->g_tp);
    s->g_pp = calloc((size_t)T, sizeof *s->g_pp);
    s->g_emb = calloc((size_t)T, sizeof *s->g_emb);
    s->create_sync = (gpt_sync){&s->w, W, 0, 0};
    if (!s->r || !s->g_tp || !s->g_pp || !s->g_emb) {
        split_free(s);
        return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the split");
    }
    int dev0 = 0;
    if (sc->backend == MO_BACKEND_CUDA) {
        st = gpt_split_get_device(&dev0);
        if (st == MO_OK && sc->comm == MO_COMM_NCCL) {
            int n = 0;
            st = mo_device_count(&n);
            if (st == MO_OK && n < W)
                st = MO_FAIL(MO_ERR_INVALID, "--comm nccl: %d ranks need %d GPUs (one each), this machine has %d; "
                             "--comm local runs every rank on one GPU", W, W, n);
        }
    }
    if (st == MO_OK && W > 1) {
        for (int i = 0; i < P && st == MO_OK && T > 1; i++) st = group(s, T, &s->g_tp[i]);
        for (int i = 0; i < T && st == MO_OK && P > 1; i++) st = group(s, P, &s->g_pp[i]);
        for (int i = 0; i < T && st == MO_OK && P > 1; i++) st = group(s, 2, &s->g_emb[i]);
        if (st == MO_OK) st = group(s, W, &s->g_world);
    }
    if (st != MO_OK) { split_free(s); return st; }
    int Ls = cfg->layers / P;
    for (int r = 0; r < W; r++) {
        rank_state *rs = &s->r[r];
        mo_gpt_shard *sh = &rs->sh;
        rs->s = s;
        rs->rank = r;
        rs->device = sc->comm == MO_COMM_NCCL ? r : dev0;
        sh->tp = T; sh->tp_rank = r % T;
        sh->pp = P; sh->stage = r / T;
        sh->world = W; sh->rank = r;
        sh->layer0 = sh->stage * Ls; sh->layers = Ls;
        sh->first = sh->stage == 0; sh->last = sh->stage == P - 1;
        sh->dp = s->dp; sh->dp_rank = s->dp > 1 ? r : 0; sh->zero = sc->zero;
        if (s->dp > 1) { sh->tp_rank = 0; sh->stage = 0; sh->layer0 = 0; sh->first = sh->last = 1; }
    }
    st = run_all(s, OP_CREATE);
    if (st != MO_OK) {
        mo_gpt_split_destroy(s);
        return st;
    }
    *out = s;
    return MO_OK;
}

int mo_gpt_split_world(const mo_gpt_split *s) { return s->W; }
int mo_gpt_split_tp(const mo_gpt_split *s) { return s->tp; }
int mo_gpt_split_pp(const mo_gpt_split *s) { return s->pp; }

mo_status mo_gpt_split_set_batch(mo_gpt_split *s, const int *tokens, const int *targets) {
    if (s->broken != MO_OK) return MO_FAIL(s->broken, "%s", s->broken_msg);
    // Bad tokens are bad input, not a dead split: checked here once, then every rank copies.
    size_t BT = (size_t)s->cfg.batch * s->cfg.seq;
    for (size_t i = 0; i < BT; i++)
        if (tokens[i] < 0 || tokens[i] >= s->cfg.vocab || targets[i] < 0 || targets[i] >= s->cfg.vocab)
            return MO_FAIL(MO_ERR_INVALID, "batch: token %zu out of range 0..%d", i, s->cfg.vocab - 1);
    s->tokens = tokens;
    s->targets = targets;
    return run_or_break(s, OP_SET_BATCH);
}

static void collect_step(mo_gpt_split *s) {
    s->step_ms = s->recompute_ms = 0;
    for (int r = 0; r < s->W; r++) {
        if (s->r[r].step_ms > s->step_ms) s->step_ms = s->r[r].step_ms;
        if (s->r[r].m->recompute_ms > s->recompute_ms) s->recompute_ms = s->r[r].m->recompute_ms;
    }
    s->last_loss = s->r[(s->pp - 1) * s->tp].m->last_loss; // the last stage's tp rank 0
    if (s->dp > 1) { // data parallel: the mean of the ranks' equal shares
        double sum = 0;
        for (int r = 0; r < s->W; r++) sum += s->r[r].m->last_loss;
        s->last_loss = sum / s->W;
    }
    s->last_grad_norm = s->r[0].m->last_grad_norm;
}

mo_status mo_gpt_split_step(mo_gpt_split *s) {
    MO_TRY(run_or_break(s, OP_STEP));
    collect_step(s);
    return MO_OK;
}

mo_status mo_gpt_split_forward_backward(mo_gpt_split *s) {
    MO_TRY(run_or_break(s, OP_FB));
    collect_step(s);
    return MO_OK;
}

double mo_gpt_split_last_loss(const mo_gpt_split *s) { return s->last_loss; }
double mo_gpt_split_last_grad_norm(const mo_gpt_split *s) { return s->last_grad_norm; }
double mo_gpt_split_step_ms(const mo_gpt_split *s) { return s->step_ms; }
double mo_gpt_split_rank_step_ms(const mo_gpt_split *s, int rank) { return s->r[rank].step_ms; }
double mo_gpt_split_recompute_ms(const mo_gpt_split *s) { return s->recompute_ms; }
mo_allocator *mo_gpt_split_allocator(mo_gpt_split *s, int rank) { return s->r[rank].a; }
mo_ctx *mo_gpt_split_ctx(mo_gpt_split *s, int rank) { return s->r[rank].x; }
mo_gpt *mo_gpt_split_model(mo_gpt_split *s, int rank) { return s->r[rank].m; }

int mo_gpt_split_peak_rank(mo_gpt_split *s) {
    int best = 0;
    uint64_t peak = 0;
    for (int r = 0; r < s->W; r++) {
        mo_alloc_stats st;
        mo_allocator_stats(s->r[r].a, &st);
        if (r == 0 || st.peak_allocated_bytes > peak) { best = r; peak = st.peak_allocated_bytes; }
    }
    return best;
}

void mo_gpt_split_reset_peaks(mo_gpt_split *s) {
    for (int r = 0; r < s->W; r++) mo_allocator_reset_peaks(s->r[r].a);
}

mo_status mo_gpt_split_comm_stats(mo_gpt_split *s, mo_gpt_split_comm *out) {
    memset(out, 0, sizeof *out);
    if (s->W == 1) return MO_OK;
    MO_TRY(run_or_break(s, OP_COMM_STATS));
    for (int r = 0; r < s->W; r++) {
        const mo_gpt_split_comm *c = &s->r[r].comm;
        out->ops += c->ops;
        out->bytes += c->bytes;
        if (c->bytes > out->bytes_max_rank) out->bytes_max_rank = c->bytes;
        if (c->ms_max_rank > out->ms_max_rank) out->ms_max_rank = c->ms_max_rank;
        out->measured = c->measured;
    }
    return MO_OK;
}

mo_status mo_gpt_split_comm_reset(mo_gpt_split *s) {
    if (s->W == 1) return MO_OK;
    return run_or_break(s, OP_COMM_RESET);
}

// Data parallel: every element from the ranks that own it (all of them at ZeRO level 0, which must agree).
static mo_status gather_dp(mo_gpt_split *s, float *full, int *replicas_equal) {
    size_t n = mo_gpt_num_params(&s->cfg);
    unsigned char *have = calloc(n ? n : 1, 1);
    if (!have) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the gather");
    int equal = 1;
    for (int r = 0; r < s->W; r++)
        for (size_t i = 0; i < n; i++) {
            if (!s->r[r].seen[i]) continue;
            float v = s->r[r].host[i];
            if (!have[i]) { full[i] = v; have[i] = 1; }
            else if (memcmp(&full[i], &v, sizeof v)) equal = 0;
        }
    mo_status st = MO_OK;
    for (size_t i = 0; i < n; i++)
        if (!have[i]) { st = MO_FAIL(MO_ERR_INTERNAL, "gather: element %zu of the model has no owner among the dp ranks", i); break; }
    free(have);
    if (replicas_equal) *replicas_equal = equal;
    return st;
}

mo_status mo_gpt_split_gather(mo_gpt_split *s, int what, float *full, int *replicas_equal) {
    s->read_what = what;
    mo_status st = run_or_break(s, OP_READ);
    if (s->dp > 1) {
        if (st == MO_OK) st = gather_dp(s, full, replicas_equal);
        for (int r = 0; r < s->W; r++) { free(s->r[r].host); free(s->r[r].seen); s->r[r].host = NULL; s->r[r].seen = NULL; }
        return st;
    }
    size_t fs[GPT_NPARAMS], foff[GPT_NPARAMS], o = 0, n = mo_gpt_num_params(&s->cfg);
    gpt_param_sizes(&s->cfg, NULL, fs);
    for (int p = 0; p < GPT_NPARAMS; p++) { foff[p] = o; o += fs[p]; }
    unsigned char *seen = st == MO_OK ? calloc(n, 1) : NULL;
    if (st == MO_OK && !seen) st = MO_FAIL(MO_ERR_OOM, "host memory exhausted for the gather");
    int equal = 1;
    // Owners first (every tp-split element has one owner; replicated ones: tp rank 0 of the first
    // stage that holds them), then the replicas are compared with what the owners wrote.
    for (int pass = 0; pass < 2 && st == MO_OK; pass++) {
        for (int r = 0; r < s->W; r++) {
            rank_state *rs = &s->r[r];
            const mo_gpt_shard *sh = s->W == 1 ? NULL : &rs->sh;
            size_t lo = 0;
            for (int p = 0; p < GPT_NPARAMS; p++) {
                size_t ln = rs->m->param_sizes[p];
                int owner = !sh || gpt_param_is_tp_split(p) || sh->tp_rank == 0;
                if (sh && p == GPT_WTE && !sh->first) owner = 0;
                if (owner == (pass == 0)) {
                    for (size_t i = 0; i < ln; i++) {
                        size_t g = foff[p] + gpt_shard_global_index(&s->cfg, sh, p, i);
                        float v = rs->host[lo + i];
                        if (pass == 0) { full[g] = v; seen[g] = 1; }
                        else if (!seen[g] || memcmp(&full[g], &v, sizeof v)) equal = 0;
                    }
                }
                lo += ln;
            }
        }
    }
    if (st == MO_OK)
        for (size_t i = 0; i < n; i++)
            if (!seen[i]) { st = MO_FAIL(MO_ERR_INTERNAL, "gather: element %zu of the unsplit model has no owner", i); break; }
    free(seen);
    for (int r = 0; r < s->W; r++) { free(s->r[r].host); s->r[r].host = NULL; }
    if (replicas_equal) *replicas_equal = equal;
    return st;
}

double mo_gpt_split_recompute_flops(const mo_gpt_config *cfg, int tp, int pp) {
    (void)tp; // tp splits each GEMM, not the total
    mo_gpt_config st = *cfg;
    if (pp < 1 || cfg->layers % pp) return mo_gpt_recompute_flops(cfg);
    st.layers = cfg->layers / pp;
    if (st.ckpt == MO_CKPT_EVERY && st.ckpt_every > st.layers) st.ckpt_every = st.layers;
    return pp * mo_gpt_recompute_flops(&st);
}
