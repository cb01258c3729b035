// strategies/ranks.h's layout on its own (cpu, local comm), with no model: rank = dp_rank * T * P +
// stage * T + tp_rank; each communicator joins exactly the ranks its comment names (checked by summing
// the ranks' ids over it); with tp * pp 1 the dp communicator is the world's and is counted once; the
// shape refusals name the flag; a failing rank's message names its dp rank.
#include <stdlib.h>
#include <string.h>
#include "strategies/ranks.h"
#include "testlib.h"

static int dummy_model;

static mo_status make(mo_rank *r, void *arg) {
    (void)arg;
    r->model = &dummy_model;
    return MO_OK;
}

static void unmake(mo_rank *r, void *arg) {
    (void)r;
    (void)arg;
}

// What every rank saw: the sums over its communicators of (rank + 1).
typedef struct seen {
    float dp_sum, tp_sum, pp_sum, world_sum;
    int dp_world, dp_rank_of, tp_rank_of, pp_rank_of, world_world;
    int dp_is_world;
} seen;

static seen got[MO_COMM_MAX_WORLD];

static mo_status sum_over(mo_comm *c, int rank, float *out) {
    float v = (float)(rank + 1);
    if (!c) { *out = -1; return MO_OK; }
    MO_TRY(mo_comm_allreduce_sum(c, &v, 1));
    *out = v;
    return MO_OK;
}

static mo_status rank_sums(mo_rank *r, void *arg) {
    (void)arg;
    seen *g = &got[r->rank];
    g->dp_is_world = r->dp_comm && r->dp_comm == r->world_comm;
    g->dp_world = r->dp_comm ? mo_comm_world(r->dp_comm) : 0;
    g->dp_rank_of = r->dp_comm ? mo_comm_rank_of(r->dp_comm) : -1;
    g->tp_rank_of = r->tp_comm ? mo_comm_rank_of(r->tp_comm) : -1;
    g->pp_rank_of = r->pp_comm ? mo_comm_rank_of(r->pp_comm) : -1;
    g->world_world = r->world_comm ? mo_comm_world(r->world_comm) : 0;
    MO_TRY(sum_over(r->dp_comm, r->rank, &g->dp_sum));
    MO_TRY(sum_over(r->tp_comm, r->rank, &g->tp_sum));
    MO_TRY(sum_over(r->pp_comm, r->rank, &g->pp_sum));
    return sum_over(r->world_comm, r->rank, &g->world_sum);
}

static mo_status fail_on_5(mo_rank *r, void *arg) {
    (void)arg;
    if (r->rank == 5) return MO_FAIL(MO_ERR_INTERNAL, "planted failure");
    return MO_OK;
}

static mo_ranks_config cfg(int dp, int tp, int pp) {
    mo_ranks_config c = {.tp = tp, .pp = pp, .dp = dp, .comm = MO_COMM_LOCAL, .backend = MO_BACKEND_CPU,
                         .alloc = MO_ALLOC_CACHING};
    return c;
}

static void test_layout(int D, int T, int P) {
    mo_ranks_config c = cfg(D, T, P);
    mo_ranks *s = NULL;
    if (!CHECK_OK(mo_ranks_create(&s, &c, make, unmake, NULL))) return;
    int W = D * T * P;
    CHECK(mo_ranks_world(s) == W);
    memset(got, 0, sizeof got);
    CHECK_OK(mo_ranks_run(s, rank_sums, NULL));
    for (int k = 0; k < W; k++) {
        mo_rank *r = mo_ranks_at(s, k);
        int d = k / (T * P), st = (k / T) % P, t = k % T;
        CHECK_MSG(r->dp_rank == d && r->stage == st && r->tp_rank == t && r->dp == D && r->world == W,
                  "D%d T%d P%d rank %d: dp rank %d stage %d tp rank %d, want %d %d %d", D, T, P, k, r->dp_rank, r->stage,
                  r->tp_rank, d, st, t);
        CHECK(r->first == (st == 0) && r->last == (st == P - 1));
        // dp: the ranks k' = d' T P + st T + t over d'; tp: over t' in (d, st); pp: over st' in (d, t).
        float want_dp = 0, want_tp = 0, want_pp = 0;
        for (int e = 0; e < D; e++) want_dp += (float)(e * T * P + st * T + t + 1);
        for (int e = 0; e < T; e++) want_tp += (float)(d * T * P + st * T + e + 1);
        for (int e = 0; e < P; e++) want_pp += (float)(d * T * P + e * T + t + 1);
        const seen *g = &got[k];
        CHECK_MSG(D == 1 ? g->dp_sum == -1 : g->dp_sum == want_dp, "D%d T%d P%d rank %d: dp sum %g, want %g", D, T, P, k,
                  g->dp_sum, D == 1 ? -1.0 : want_dp);
        CHECK_MSG(T == 1 ? g->tp_sum == -1 : g->tp_sum == want_tp, "D%d T%d P%d rank %d: tp sum %g, want %g", D, T, P, k,
                  g->tp_sum, want_tp);
        CHECK_MSG(P == 1 ? g->pp_sum == -1 : g->pp_sum == want_pp, "D%d T%d P%d rank %d: pp sum %g, want %g", D, T, P, k,
                  g->pp_sum, want_pp);
        CHECK(W == 1 ? g->world_sum == -1 && g->world_world == 0 : g->world_sum == (float)(W * (W + 1) / 2) && g->world_world == W);
        if (D > 1) CHECK(g->dp_world == D && g->dp_rank_of == d);
        if (T > 1) CHECK(g->tp_rank_of == t);
        if (P > 1) CHECK(g->pp_rank_of == st);
        CHECK_MSG(g->dp_is_world == (D > 1 && T * P == 1), "D%d T%d P%d rank %d: dp_comm is world_comm: %d", D, T, P, k,
                  g->dp_is_world);
    }
    // Each rank's all-reduces counted once: one per communicator it has (dp, tp, pp, world); with dp_comm
    // the world's object, its two ops are two, not four (the stats visit each communicator once).
    mo_ranks_comm cs;
    CHECK_OK(mo_ranks_comm_stats(s, &cs));
    int per_rank = W == 1 ? 0 : 1 + (D > 1) + (T > 1) + (P > 1);
    CHECK_MSG(cs.ops == (uint64_t)(W * per_rank), "D%d T%d P%d: %llu comm ops, want %d", D, T, P,
              (unsigned long long)cs.ops, W * per_rank);
    CHECK_OK(mo_ranks_comm_reset(s));
    CHECK_OK(mo_ranks_comm_stats(s, &cs));
    CHECK(cs.ops == 0);
    if (W > 5) { // a failing rank names its dp rank (with dp above 1) and kills the ranks
        mo_status st = mo_ranks_run(s, fail_on_5, NULL);
        const char *want = D > 1 ? "dp rank" : "stage";
        CHECK_MSG(st == MO_ERR_INTERNAL && strstr(mo_errmsg(), want) && strstr(mo_errmsg(), "planted failure"),
                  "D%d T%d P%d: failure status %d '%s'", D, T, P, (int)st, mo_errmsg());
        mo_clear_error();
        CHECK(mo_ranks_alive(s) != MO_OK);
        mo_clear_error();
    }
    mo_ranks_destroy(s);
}

static void test_refusals(void) {
    CHECK_OK(mo_ranks_validate_shape(2, 2, 0, MO_COMM_LOCAL)); // dp 0 reads as 1
    struct { int tp, pp, dp; const char *flag; } bad[] = {
        {1, 1, -1, "--dp -1"},
        {0, 1, 2, "--tp 0"},
        {8, 1, MO_COMM_MAX_WORLD, "--dp"}, // more ranks than the communicator's world
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mo_status st = mo_ranks_validate_shape(bad[i].tp, bad[i].pp, bad[i].dp, MO_COMM_LOCAL);
        CHECK_MSG(st == MO_ERR_INVALID && strstr(mo_errmsg(), bad[i].flag), "%s: status %d '%s'", bad[i].flag, (int)st,
                  mo_errmsg());
        mo_clear_error();
    }
    mo_status st = mo_ranks_validate_devices(1, 1, 2, MO_COMM_NCCL, MO_BACKEND_CPU);
    CHECK(st == MO_ERR_INVALID && strstr(mo_errmsg(), "--comm nccl"));
    mo_clear_error();
}

int main(void) {
    test_layout(1, 1, 1);
    test_layout(1, 2, 2);
    test_layout(4, 1, 1);
    test_layout(2, 2, 1);
    test_layout(2, 1, 3);
    test_layout(2, 2, 2);
    test_refusals();
    return test_finish();
}
