// The split MLP (--tp T --pp P): its table's split half (models/model.h). The ranks (threads,
// allocators, contexts, communicators, failures) are strategies/ranks.h's, as the GPT split's; each
// rank holds the shard of models/mlp_shard.h and runs models/mlp.c's step on it. The same seed gives
// the unsplit model's initial parameters and batch; every sum is in rank order, so loss and gradients
// equal the unsplit model's to fp32 rounding (tests/test_mlp_split.c).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "models/mlp.h"
#include "models/mlp_shard.h"
#include "models/model.h"
#include "strategies/ranks.h"

typedef struct mlp_split {
    mo_run_config rc;
    int tp, pp, W;
    mo_ranks *rk;
    uint64_t seed;          // set_synthetic_batch's
    int read_what;          // the gather: 0 params, 1 grads
    float **host;           // [W] the gather's per-rank copies
    double last_loss, recompute_ms;
} mlp_split;

static mo_status split_validate(const mo_run_config *rc, const mo_split_config *sc) {
    MO_TRY(mo_ranks_validate_shape(sc->tp, sc->pp, 1, sc->comm));
    // The MLP has no data-parallel step (its update is not sharded, its batch not sliced per rank).
    if (sc->dp > 1 || sc->zero)
        return MO_FAIL(MO_ERR_INVALID, "--dp %d: model mlp has no data-parallel ranks yet (accepted: --dp 1)", sc->dp);
    mo_run_config r = *rc;
    r.tp = sc->tp;
    r.pp = sc->pp;
    MO_TRY(mo_mlp_model.validate(&r)); // 4*hidden % tp, layers % pp
    return mo_ranks_validate_devices(sc->tp, sc->pp, 1, sc->comm, sc->backend);
}

static mo_status rank_make(mo_rank *r, void *arg) {
    mlp_split *s = arg;
    int Ls = s->rc.layers / s->pp;
    mlp_shard sh = {
        .tp = r->tp, .tp_rank = r->tp_rank, .pp = r->pp, .stage = r->stage, .world = r->world, .rank = r->rank,
        .layer0 = r->stage * Ls, .layers = Ls, .first = r->first, .last = r->last,
        .tp_comm = r->tp_comm, .pp_comm = r->pp_comm, .world_comm = r->world_comm,
    };
    return mlp_create_shard(&s->rc, r->ctx, s->W == 1 ? NULL : &sh, &r->model);
}

static void rank_unmake(mo_rank *r, void *arg) {
    (void)arg;
    mo_mlp_model.destroy(r->model);
    r->model = NULL;
}

static void split_destroy(void *p) {
    mlp_split *s = p;
    if (!s) return;
    mo_ranks_destroy(s->rk);
    free(s->host);
    free(s);
}

static mo_status split_create(const mo_run_config *rc, const mo_split_config *sc, void **out) {
    *out = NULL;
    MO_TRY(split_validate(rc, sc));
    mlp_split *s = calloc(1, sizeof *s);
    if (s) s->host = calloc((size_t)sc->tp * sc->pp, sizeof *s->host);
    if (!s || !s->host) { free(s); return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the split"); }
    s->rc = *rc;
    s->rc.tp = sc->tp;
    s->rc.pp = sc->pp;
    s->tp = sc->tp;
    s->pp = sc->pp;
    s->W = sc->tp * sc->pp;
    s->last_loss = NAN;
    mo_ranks_config kc = {
        .tp = sc->tp, .pp = sc->pp, .comm = sc->comm, .backend = sc->backend, .alloc = sc->alloc,
        .cap_bytes = sc->cap_bytes, .tf32 = rc->precision == MO_PREC_TF32,
    };
    mo_status st = mo_ranks_create(&s->rk, &kc, rank_make, rank_unmake, s);
    if (st != MO_OK) { split_destroy(s); return st; }
    *out = s;
    return MO_OK;
}

static mo_status rank_batch(mo_rank *r, void *arg) {
    return mo_mlp_model.set_synthetic_batch(r->model, ((mlp_split *)arg)->seed);
}

static mo_status split_set_synthetic_batch(void *p, uint64_t seed) {
    mlp_split *s = p;
    s->seed = seed;
    return mo_ranks_run(s->rk, rank_batch, s);
}

static mo_status rank_step(mo_rank *r, void *arg) {
    (void)arg;
    return mo_mlp_model.step(r->model);
}

static mo_status rank_fb(mo_rank *r, void *arg) {
    (void)arg;
    return mo_mlp_forward_backward(r->model);
}

// The loss is the last stage's (its tp rank 0's; every tp rank has the same); recompute the slowest rank's.
static void collect(mlp_split *s) {
    s->recompute_ms = 0;
    for (int r = 0; r < s->W; r++) {
        double ms = mlp_recompute_ms(mo_ranks_at(s->rk, r)->model);
        if (ms > s->recompute_ms) s->recompute_ms = ms;
    }
    s->last_loss = mlp_last_loss(mo_ranks_at(s->rk, (s->pp - 1) * s->tp)->model);
}

static mo_status split_step(void *p) {
    mlp_split *s = p;
    MO_TRY(mo_ranks_run_timed(s->rk, rank_step, s));
    collect(s);
    return MO_OK;
}

mo_status mo_mlp_split_forward_backward(void *p) {
    mlp_split *s = p;
    MO_TRY(mo_ranks_run_timed(s->rk, rank_fb, s));
    collect(s);
    return MO_OK;
}

static double split_step_ms(void *p) { return mo_ranks_step_ms(((mlp_split *)p)->rk); }

static void split_info(void *p, mo_model_step_info *out) {
    mlp_split *s = p;
    // The ranks share one loss-scaler verdict: rank 0's figures are every rank's.
    mo_mlp_model.info(mo_ranks_at(s->rk, 0)->model, out);
    out->loss = s->last_loss;
    out->recompute_ms = s->recompute_ms;
}

static int split_world(void *p) { return ((mlp_split *)p)->W; }
static mo_allocator *split_allocator(void *p, int rank) { return mo_ranks_at(((mlp_split *)p)->rk, rank)->alloc; }
static int split_peak_rank(void *p) { return mo_ranks_peak_rank(((mlp_split *)p)->rk); }
static void split_reset_peaks(void *p) { mo_ranks_reset_peaks(((mlp_split *)p)->rk); }

static mo_status split_comm_stats(void *p, mo_split_comm *out) {
    mo_ranks_comm c;
    memset(out, 0, sizeof *out);
    MO_TRY(mo_ranks_comm_stats(((mlp_split *)p)->rk, &c));
    out->ops = c.ops; out->bytes = c.bytes; out->bytes_max_rank = c.bytes_max_rank;
    out->ms_max_rank = c.ms_max_rank; out->measured = c.measured;
    return MO_OK;
}

static mo_status split_comm_reset(void *p) { return mo_ranks_comm_reset(((mlp_split *)p)->rk); }

// Each stage recomputes its own layers/pp blocks (segments over the stage); tp splits each GEMM, not
// the total.
static double split_recompute_flops(const mo_run_config *rc) {
    mo_run_config st = *rc;
    if (rc->pp < 1 || rc->layers % rc->pp) return mo_mlp_model.recompute_flops(rc);
    st.layers = rc->layers / rc->pp;
    return rc->pp * mo_mlp_model.recompute_flops(&st);
}

// ---- test access (models/mlp.h) -------------------------------------------------------------------

static mo_status rank_read(mo_rank *r, void *arg) {
    mlp_split *s = arg;
    size_t n = 0;
    MO_TRY(mo_mlp_read(r->model, NULL, NULL, &n));
    s->host[r->rank] = malloc((n ? n : 1) * sizeof(float));
    if (!s->host[r->rank]) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the gather");
    return mo_mlp_read(r->model, s->read_what ? NULL : s->host[r->rank], s->read_what ? s->host[r->rank] : NULL, &n);
}

mo_status mo_mlp_split_gather(void *p, int what, float *full, int *replicas_equal) {
    mlp_split *s = p;
    s->read_what = what;
    mo_status st = mo_ranks_run(s->rk, rank_read, s);
    size_t fs[MLP_NPARAMS], foff[MLP_NPARAMS], o = 0;
    mlp_tensor_sizes(NULL, &s->rc, fs);
    for (int q = 0; q < MLP_NPARAMS; q++) { foff[q] = o; o += fs[q]; }
    size_t n = o;
    unsigned char *seen = st == MO_OK ? calloc(n, 1) : NULL;
    if (st == MO_OK && !seen) st = MO_FAIL(MO_ERR_OOM, "host memory exhausted for the gather");
    int equal = 1;
    // Owners first (a tp-split element has one; a replicated one: tp rank 0 of the stage holding it),
    // then every replica is compared with what its owner wrote.
    for (int pass = 0; pass < 2 && st == MO_OK; pass++) {
        for (int r = 0; r < s->W; r++) {
            const mo_rank *k = mo_ranks_at(s->rk, r);
            size_t ls[MLP_NPARAMS], lo = 0;
            mlp_tensor_sizes(k->model, NULL, ls);
            for (int q = 0; q < MLP_NPARAMS; q++) {
                int owner = mlp_param_is_tp_split(q) || k->tp_rank == 0;
                if (owner == (pass == 0)) {
                    for (size_t i = 0; i < ls[q]; i++) {
                        size_t g = foff[q] + mlp_shard_global_index(k->model, q, i);
                        float v = s->host[r][lo + i];
                        if (pass == 0) { full[g] = v; seen[g] = 1; }
                        else if (!seen[g] || memcmp(&full[g], &v, sizeof v)) equal = 0;
                    }
                }
                lo += ls[q];
            }
        }
    }
    if (st == MO_OK)
        for (size_t i = 0; i < n; i++)
            if (!seen[i]) { st = MO_FAIL(MO_ERR_INTERNAL, "gather: element %zu of the unsplit model has no owner", i); break; }
    free(seen);
    for (int r = 0; r < s->W; r++) { free(s->host[r]); s->host[r] = NULL; }
    if (replicas_equal) *replicas_equal = equal;
    return st;
}

const mo_model_split_ops mo_mlp_split_ops = {
    .validate = split_validate,
    .create = split_create,
    .destroy = split_destroy,
    .set_synthetic_batch = split_set_synthetic_batch,
    .step = split_step,
    .step_ms = split_step_ms,
    .info = split_info,
    .world = split_world,
    .allocator = split_allocator,
    .peak_rank = split_peak_rank,
    .reset_peaks = split_reset_peaks,
    .comm_stats = split_comm_stats,
    .comm_reset = split_comm_reset,
    .recompute_flops = split_recompute_flops,
    .tp_allreduces_per_block = 2, // W2's output forward, d(ln) backward
    .stage_tie_bytes = NULL,
};
