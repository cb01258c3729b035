// The split GPT (models/gpt_split.h): each rank's shard on the generic ranks (strategies/ranks.h:
// threads, allocators, contexts, communicators, failures), and the gather back to the unsplit layout.
// The model side of each rank is gpt_step.c / gpt_params.c with a shard.
#include "gpt_split.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpt_shard.h"
#include "gpt_zero.h"
#include "strategies/comm.h"
#include "strategies/ranks.h"

// One rank's part: its shard and model (the threads, allocators, contexts and communicators are
// strategies/ranks.c's).
typedef struct gpt_rank {
    mo_gpt_shard sh;
    mo_gpt *m;
    float *host;            // the gather: the rank's params or grads
    unsigned char *seen;    // the gather, data parallel: the elements of host the rank owns (the usual layout)
} gpt_rank;

struct mo_gpt_split {
    mo_gpt_config cfg;
    mo_gpt_config rank_cfg;  // a rank's model: cfg, with batch / dp under data parallelism
    mo_gpt_split_config sc;
    int tp, pp, dp, W;
    mo_ranks *rk;
    gpt_rank *g;            // [W]
    int read_what;
    const int *tokens, *targets;
    double last_loss, last_grad_norm, step_ms, recompute_ms;
};

// The rank's shard (W 1: the plain model), made on its thread with its context and communicators.
static mo_status rank_make(mo_rank *r, void *arg) {
    mo_gpt_split *s = arg;
    gpt_rank *gr = &s->g[r->rank];
    mo_gpt_shard *sh = &gr->sh;
    int Ls = s->cfg.layers / s->pp;
    sh->tp = r->tp; sh->tp_rank = r->tp_rank;
    sh->pp = r->pp; sh->stage = r->stage;
    sh->world = r->world; sh->rank = r->rank;
    sh->layer0 = r->stage * Ls; sh->layers = Ls;
    sh->first = r->first; sh->last = r->last;
    sh->tp_comm = r->tp_comm;
    sh->pp_comm = r->pp_comm;
    sh->emb_comm = r->emb_comm;
    sh->world_comm = r->world_comm;
    // Data parallel: the whole model on each rank (tp 1, pp 1), on its share of the batch.
    sh->dp = r->dp; sh->dp_rank = r->dp_rank; sh->zero = s->sc.zero;
    sh->dp_comm = r->dp_comm;
    sh->sp = s->sc.sp && r->tp > 1; // sequence parallel (gpt_split.h)
    MO_TRY(mo_gpt_create_shard(&gr->m, &s->rank_cfg, r->ctx, s->W == 1 ? NULL : sh));
    r->model = gr->m;
    return MO_OK;
}

static void rank_unmake(mo_rank *r, void *arg) {
    mo_gpt_split *s = arg;
    mo_gpt_destroy(s->g[r->rank].m);
    s->g[r->rank].m = NULL;
}

// A data-parallel rank takes rows [r B/dp, (r+1) B/dp) of the global batch.
static mo_status rank_set_batch(mo_rank *r, void *arg) {
    mo_gpt_split *s = arg;
    size_t off = (size_t)r->dp_rank * (size_t)s->rank_cfg.batch * (size_t)s->cfg.seq;
    return mo_gpt_set_batch(s->g[r->rank].m, s->tokens + off, s->targets + off);
}

static mo_status rank_step(mo_rank *r, void *arg) {
    mo_gpt *m = ((mo_gpt_split *)arg)->g[r->rank].m;
    MO_TRY(mo_gpt_forward_backward(m));
    return mo_gpt_update(m);
}

static mo_status rank_fb(mo_rank *r, void *arg) {
    return mo_gpt_forward_backward(((mo_gpt_split *)arg)->g[r->rank].m);
}

static mo_status rank_read(mo_rank *r, void *arg) {
    mo_gpt_split *s = arg;
    gpt_rank *gr = &s->g[r->rank];
    mo_gpt *m = gr->m;
    size_t n = m->num_params;
    gr->host = malloc((n ? n : 1) * sizeof(float));
    if (!gr->host) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the gather");
    if (m->zero) { // data parallel: the rank's own chunks, into the usual layout
        gr->seen = calloc(n ? n : 1, 1);
        if (!gr->seen) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the gather");
        return gpt_zero_export(m, s->read_what, gr->host, gr->seen);
    }
    return mo_memcpy_d2h(r->ctx, gr->host, s->read_what ? (const float *)m->grads : m->params, n * sizeof(float));
}

mo_status mo_gpt_split_validate(const mo_gpt_config *c, const mo_gpt_split_config *sc) {
    MO_TRY(mo_gpt_validate(c));
    int tp = sc->tp, pp = sc->pp, dp = sc->dp ? sc->dp : 1, zero = sc->zero;
    MO_TRY(mo_ranks_validate_shape(tp, pp, dp, (mo_comm_kind)sc->comm));
    if (zero < 0 || zero > 3) return MO_FAIL(MO_ERR_INVALID, "--zero %d: accepted 0, 1, 2, 3", zero);
    if (sc->sp < 0 || sc->sp > 1) return MO_FAIL(MO_ERR_INVALID, "--sp %d: accepted 0, 1", sc->sp);
    if (dp > 1 && tp * pp > 1)
        return MO_FAIL(MO_ERR_INVALID, "--dp %d with --tp %d --pp %d: data parallelism runs on unsplit models only for now "
                       "(accepted: --tp 1 --pp 1 with --dp)", dp, tp, pp);
    if (c->batch % dp || (c->batch / dp) % c->accum)
        return MO_FAIL(MO_ERR_INVALID, "--dp %d: batch %d is not divisible by dp x accum = %d (each rank takes batch/dp "
                       "rows, in accum micro-batches)", dp, c->batch, dp * c->accum);
    if (c->heads % tp)
        return MO_FAIL(MO_ERR_INVALID, "--tp %d: the %d attention heads are not divisible by it (each tp rank takes heads/tp)",
                       tp, c->heads);
    if ((4 * c->hidden) % tp)
        return MO_FAIL(MO_ERR_INVALID, "--tp %d: the MLP width 4*hidden = %d is not divisible by it", tp, 4 * c->hidden);
    if (c->layers % pp)
        return MO_FAIL(MO_ERR_INVALID, "--pp %d: the %d layers are not divisible by it (every stage holds layers/pp blocks)",
                       pp, c->layers);
    if (sc->sp && tp < 2)
        return MO_FAIL(MO_ERR_INVALID, "--sp %d: needs --tp above 1 (sequence parallelism shards the tensor-parallel ranks' "
                       "LayerNorms and residual stream; accepted with --tp 1: --sp 0)", sc->sp);
    if (sc->sp && c->seq % tp)
        return MO_FAIL(MO_ERR_INVALID, "--sp %d: seq %d is not divisible by --tp %d (each tp rank holds seq/tp positions; "
                       "accepted: a --tp that divides --seq, or --sp 0)", sc->sp, c->seq, tp);
    return mo_ranks_validate_devices(tp, pp, dp, (mo_comm_kind)sc->comm, sc->backend);
}

void mo_gpt_split_destroy(mo_gpt_split *s) {
    if (!s) return;
    mo_ranks_destroy(s->rk);
    free(s->g);
    free(s);
}

mo_status mo_gpt_split_create(mo_gpt_split **out, const mo_gpt_config *cfg, const mo_gpt_split_config *sc) {
    *out = NULL;
    MO_TRY(mo_gpt_split_validate(cfg, sc));
    mo_gpt_split *s = calloc(1, sizeof *s);
    int dp = sc->dp > 1 ? sc->dp : 1;
    if (s) s->g = calloc((size_t)sc->tp * sc->pp * dp, sizeof *s->g);
    if (!s || !s->g) { free(s); return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the split"); }
    s->cfg = *cfg;
    s->sc = *sc;
    s->tp = sc->tp;
    s->pp = sc->pp;
    s->dp = dp;
    s->W = sc->tp * sc->pp * dp;
    s->rank_cfg = *cfg;
    s->rank_cfg.batch = cfg->batch / dp;
    s->last_loss = s->last_grad_norm = NAN;
    mo_ranks_config rc = {
        .tp = sc->tp, .pp = sc->pp, .dp = dp, .comm = (mo_comm_kind)sc->comm, .backend = sc->backend, .alloc = sc->alloc,
        .cap_bytes = sc->cap_bytes, .link_gbps = sc->link_gbps, .tf32 = cfg->tf32, .emb_groups = 1,
    };
    mo_status st = mo_ranks_create(&s->rk, &rc, rank_make, rank_unmake, s);
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
    MO_TRY(mo_ranks_alive(s->rk));
    // Bad tokens are bad input, not a dead split: checked here once, then every rank copies.
    size_t BT = (size_t)s->cfg.batch * s->cfg.seq;
    for (size_t i = 0; i < BT; i++)
        if (tokens[i] < 0 || tokens[i] >= s->cfg.vocab || targets[i] < 0 || targets[i] >= s->cfg.vocab)
            return MO_FAIL(MO_ERR_INVALID, "batch: token %zu out of range 0..%d", i, s->cfg.vocab - 1);
    s->tokens = tokens;
    s->targets = targets;
    return mo_ranks_run(s->rk, rank_set_batch, s);
}

static void collect_step(mo_gpt_split *s) {
    s->recompute_ms = 0;
    s->step_ms = mo_ranks_step_ms(s->rk);
    for (int r = 0; r < s->W; r++)
        if (s->g[r].m->recompute_ms > s->recompute_ms) s->recompute_ms = s->g[r].m->recompute_ms;
    s->last_loss = s->g[(s->pp - 1) * s->tp].m->last_loss; // the last stage's tp rank 0
    if (s->sc.sp && s->tp > 1) { // sequence parallel: the mean of the last stage's tp ranks' equal shares
        double sum = 0;
        for (int t = 0; t < s->tp; t++) sum += s->g[(s->pp - 1) * s->tp + t].m->last_loss;
        s->last_loss = sum / s->tp;
    }
    if (s->dp > 1) { // data parallel: the mean of the ranks' equal shares
        double sum = 0;
        for (int r = 0; r < s->W; r++) sum += s->g[r].m->last_loss;
        s->last_loss = sum / s->W;
    }
    s->last_grad_norm = s->g[0].m->last_grad_norm;
}

mo_status mo_gpt_split_step(mo_gpt_split *s) {
    MO_TRY(mo_ranks_run_timed(s->rk, rank_step, s));
    collect_step(s);
    return MO_OK;
}

mo_status mo_gpt_split_forward_backward(mo_gpt_split *s) {
    MO_TRY(mo_ranks_run_timed(s->rk, rank_fb, s));
    collect_step(s);
    return MO_OK;
}

double mo_gpt_split_last_loss(const mo_gpt_split *s) { return s->last_loss; }
double mo_gpt_split_last_grad_norm(const mo_gpt_split *s) { return s->last_grad_norm; }
double mo_gpt_split_step_ms(const mo_gpt_split *s) { return s->step_ms; }
double mo_gpt_split_rank_step_ms(const mo_gpt_split *s, int rank) { return mo_ranks_at(s->rk, rank)->step_ms; }
double mo_gpt_split_recompute_ms(const mo_gpt_split *s) { return s->recompute_ms; }
mo_allocator *mo_gpt_split_allocator(mo_gpt_split *s, int rank) { return mo_ranks_at(s->rk, rank)->alloc; }
mo_ctx *mo_gpt_split_ctx(mo_gpt_split *s, int rank) { return mo_ranks_at(s->rk, rank)->ctx; }
mo_gpt *mo_gpt_split_model(mo_gpt_split *s, int rank) { return s->g[rank].m; }
int mo_gpt_split_peak_rank(mo_gpt_split *s) { return mo_ranks_peak_rank(s->rk); }
void mo_gpt_split_reset_peaks(mo_gpt_split *s) { mo_ranks_reset_peaks(s->rk); }

mo_status mo_gpt_split_comm_stats(mo_gpt_split *s, mo_gpt_split_comm *out) {
    mo_ranks_comm c;
    memset(out, 0, sizeof *out);
    MO_TRY(mo_ranks_comm_stats(s->rk, &c));
    out->ops = c.ops; out->bytes = c.bytes; out->bytes_max_rank = c.bytes_max_rank;
    out->ms_max_rank = c.ms_max_rank; out->measured = c.measured;
    return MO_OK;
}

mo_status mo_gpt_split_comm_reset(mo_gpt_split *s) { return mo_ranks_comm_reset(s->rk); }

mo_status mo_gpt_split_tp_comm_stats(mo_gpt_split *s, int rank, mo_comm_stat *out) {
    memset(out, 0, sizeof *out);
    if (rank < 0 || rank >= s->W) return MO_FAIL(MO_ERR_INVALID, "tp comm stats: rank %d of %d", rank, s->W);
    mo_comm *c = mo_ranks_at(s->rk, rank)->tp_comm;
    return c ? mo_comm_stats(c, out) : MO_OK;
}

// Data parallel: every element from the ranks that own it (all of them at ZeRO level 0, which must agree).
static mo_status gather_dp(mo_gpt_split *s, float *full, int *replicas_equal) {
    size_t n = mo_gpt_num_params(&s->cfg);
    unsigned char *have = calloc(n ? n : 1, 1);
    if (!have) return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the gather");
    int equal = 1;
    for (int r = 0; r < s->W; r++)
        for (size_t i = 0; i < n; i++) {
            if (!s->g[r].seen[i]) continue;
            float v = s->g[r].host[i];
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
    mo_status st = mo_ranks_run(s->rk, rank_read, s);
    if (s->dp > 1) {
        if (st == MO_OK) st = gather_dp(s, full, replicas_equal);
        for (int r = 0; r < s->W; r++) { free(s->g[r].host); free(s->g[r].seen); s->g[r].host = NULL; s->g[r].seen = NULL; }
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
            gpt_rank *rs = &s->g[r];
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
    for (int r = 0; r < s->W; r++) { free(s->g[r].host); s->g[r].host = NULL; }
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
