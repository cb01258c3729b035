// The split MLP (models/mlp_split.c on strategies/ranks.h) on the cpu and dry backends, ranks as
// threads with the local communicator:
//   - the split starts from exactly the unsplit model's parameters (gathered back, bit for bit);
//   - tp 2 and 4, pp 2 and 4 and tp x pp, with accumulation and checkpoint policies, give the unsplit
//     model's loss and every parameter tensor's gradient within 1e-5 relative in fp32 (tf32 too), and
//     within the 16-bit bound in bf16 and fp16; replicated tensors have the same bits on every rank;
//   - one and three optimizer steps give the unsplit model's updated weights within 1e-5 (fp32);
//   - the tensor-parallel all-reduces per step are the ones the design says (2 per block and
//     micro-batch, plus the norm's all-gather);
//   - every rank's peaks on dry equal its peaks on cpu to the byte (split API and run engine rows);
//   - an out-of-memory on a rank unwinds every rank; bad --tp / --pp / --comm are refused naming the flag.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench/config.h"
#include "bench/csv.h"
#include "bench/run_engine.h"
#include "models/mlp.h"
#include "models/model.h"
#include "testlib.h"

static const char *const pname[] = {"win", "bin", "lnw", "lnb", "w1", "b1", "w2", "b2", "wout", "bout"};

// fp32: the split regroups fp32 sums (a GEMM over 4H/tp inputs, then the rank-ordered all-reduce; the
// norm's partial sums), so each tensor agrees to 1e-5 relative L2 and the loss to 1e-6.
#define GRAD_TOL 1e-5
#define LOSS_TOL 1e-6

static mo_config cfg;

// The test shape L4 H32 I16 K8 B8 (4H = 128: tp 2 and 4 divide it; 4 layers: pp 2 and 4) plus kv.
static void config_of(const char *const *kv, mo_run_config *rc) {
    mo_config_defaults(&cfg, MO_CMD_RUN);
    static const char *const base[] = {"--model", "mlp", "--layers", "4", "--hidden", "32", "--input", "16",
                                       "--classes", "8", "--batch", "8", "--backend", "cpu", "--steps", "2",
                                       "--warmup", "1", NULL};
    for (int i = 0; base[i]; i += 2) CHECK_OK(mo_config_set(&cfg, base[i], base[i + 1]));
    for (int i = 0; kv && kv[i]; i += 2) CHECK_OK(mo_config_set(&cfg, kv[i], kv[i + 1]));
    CHECK_OK(mo_config_finish(&cfg));
    CHECK_OK(mo_config_combination(&cfg, 0, rc));
}

// A run's loss and host copies of its parameters and gradients (unsplit layout, n floats).
typedef struct run_out {
    double loss;
    float *params, *grads;
    size_t n;
} run_out;

static void out_free(run_out *o) { free(o->params); free(o->grads); memset(o, 0, sizeof *o); }

// The unsplit model on cpu: steps optimizer steps (0: one forward/backward).
static int unsplit_run(const mo_run_config *rc, int steps, run_out *o) {
    memset(o, 0, sizeof *o);
    mo_allocator *a = NULL;
    mo_ctx *x = NULL;
    void *m = NULL;
    int ok = CHECK_OK(mo_allocator_create(&a, MO_ALLOC_CACHING, MO_BACKEND_CPU, 0, NULL)) &&
             CHECK_OK(mo_ctx_create(&x, MO_BACKEND_CPU, a));
    if (ok) x->tf32 = rc->precision == MO_PREC_TF32;
    ok = ok && CHECK_OK(mo_mlp_model.create(rc, x, &m)) && CHECK_OK(mo_mlp_model.set_synthetic_batch(m, rc->seed));
    if (ok && steps == 0) ok = CHECK_OK(mo_mlp_forward_backward(m));
    for (int i = 0; i < steps && ok; i++) ok = CHECK_OK(mo_mlp_model.step(m));
    if (ok) {
        mo_model_step_info info;
        mo_mlp_model.info(m, &info);
        o->loss = info.loss;
        CHECK_OK(mo_mlp_read(m, NULL, NULL, &o->n));
        o->params = malloc(o->n * sizeof(float));
        o->grads = malloc(o->n * sizeof(float));
        ok = CHECK_OK(mo_mlp_read(m, o->params, o->grads, &o->n));
    }
    if (m) mo_mlp_model.destroy(m);
    mo_ctx_destroy(x);
    mo_allocator_destroy(a);
    return ok;
}

static mo_split_config split_sc(int tp, int pp, mo_backend_kind be) {
    mo_split_config sc;
    memset(&sc, 0, sizeof sc);
    sc.tp = tp; sc.pp = pp; sc.comm = MO_COMM_LOCAL; sc.backend = be; sc.alloc = MO_ALLOC_CACHING;
    return sc;
}

// The same run split over tp x pp ranks (cpu), gathered back; *replicas: every replicated tensor has
// the same bits on every rank that holds it. Every rank gives back what the step allocated.
static int split_run(mo_run_config rc, int tp, int pp, int steps, run_out *o, int *replicas) {
    const mo_model_split_ops *so = mo_mlp_model.split;
    memset(o, 0, sizeof *o);
    rc.tp = tp;
    rc.pp = pp;
    mo_split_config sc = split_sc(tp, pp, MO_BACKEND_CPU);
    void *sp = NULL;
    if (!CHECK_OK(so->create(&rc, &sc, &sp))) return 0;
    int ok = CHECK_OK(so->set_synthetic_batch(sp, rc.seed)), W = so->world(sp);
    uint64_t before[16];
    for (int r = 0; r < W && r < 16; r++) {
        mo_alloc_stats a;
        mo_allocator_stats(so->allocator(sp, r), &a);
        before[r] = a.allocated_bytes;
    }
    if (ok && steps == 0) ok = CHECK_OK(mo_mlp_split_forward_backward(sp));
    for (int i = 0; i < steps && ok; i++) ok = CHECK_OK(so->step(sp));
    for (int r = 0; r < W && r < 16; r++) {
        mo_alloc_stats a;
        mo_allocator_stats(so->allocator(sp, r), &a);
        CHECK_MSG(a.allocated_bytes == before[r], "tp %d pp %d rank %d: %llu bytes allocated after the step, %llu before",
                  tp, pp, r, (unsigned long long)a.allocated_bytes, (unsigned long long)before[r]);
    }
    mo_model_step_info info;
    so->info(sp, &info);
    o->loss = info.loss;
    o->n = mo_mlp_model.num_params(&rc);
    o->params = malloc(o->n * sizeof(float));
    o->grads = malloc(o->n * sizeof(float));
    int rg = 0, rp = 0;
    ok = ok && CHECK_OK(mo_mlp_split_gather(sp, 1, o->grads, &rg)) && CHECK_OK(mo_mlp_split_gather(sp, 0, o->params, &rp));
    *replicas = rg && rp;
    so->destroy(sp);
    return ok;
}

// The worst relative L2 error over the parameter tensors (unsplit layout); *worst_p which one.
static double worst_tensor(const mo_run_config *rc, const float *got, const float *want, int *worst_p) {
    size_t H = (size_t)rc->hidden, L = (size_t)rc->layers, K = (size_t)rc->classes;
    size_t sz[10] = {H * (size_t)rc->input, H, L * H, L * H, L * 4 * H * H, L * 4 * H, L * H * 4 * H, L * H, K * H, K};
    double worst = 0;
    size_t off = 0;
    *worst_p = 0;
    for (int p = 0; p < 10; p++) {
        double e = test_rel_error(got + off, want + off, sz[p]);
        if (!(e <= worst)) { worst = e; *worst_p = p; } // NaN propagates
        off += sz[p];
    }
    return worst;
}

static void test_init_is_unsplit(void) {
    mo_run_config rc;
    config_of(NULL, &rc);
    run_out ref;
    if (!unsplit_run(&rc, 0, &ref)) return;
    int grid[][2] = {{2, 1}, {4, 1}, {1, 2}, {1, 4}, {2, 2}, {4, 2}};
    for (size_t i = 0; i < sizeof grid / sizeof grid[0]; i++) {
        mo_run_config r = rc;
        r.tp = grid[i][0];
        r.pp = grid[i][1];
        mo_split_config sc = split_sc(r.tp, r.pp, MO_BACKEND_CPU);
        void *sp = NULL;
        if (!CHECK_OK(mo_mlp_model.split->create(&r, &sc, &sp))) continue;
        float *p = malloc(ref.n * sizeof(float));
        int eq = 0;
        CHECK_OK(mo_mlp_split_gather(sp, 0, p, &eq));
        CHECK_MSG(!memcmp(p, ref.params, ref.n * sizeof(float)) && eq,
                  "tp %d pp %d: initial parameters differ from the unsplit model's (replicas equal: %d)", r.tp, r.pp, eq);
        free(p);
        mo_mlp_model.split->destroy(sp);
    }
    out_free(&ref);
}

typedef struct split_case {
    int tp, pp;
    const char *precision, *ckpt, *accum;
    double grad_tol, loss_tol;
} split_case;

// 16-bit: a tp all-reduce rounds each rank's partial sum to the 16-bit type before the fp32 sum and
// rounds the sum once more, where the unsplit GEMM rounds once (about one 16-bit ulp per all-reduce;
// gpt_split.h); pp alone moves 16-bit activations exactly (bit-identical). Bounds from the measured
// worst (printed below) with room: bf16 (8-bit mantissa) 3e-2, fp16 (11 bits) 5e-3.
static const split_case cases[] = {
    {2, 1, "fp32", "none", "1", GRAD_TOL, LOSS_TOL},
    {4, 1, "fp32", "none", "1", GRAD_TOL, LOSS_TOL},
    {1, 2, "fp32", "none", "2", GRAD_TOL, LOSS_TOL},
    {1, 2, "fp32", "none", "1", GRAD_TOL, LOSS_TOL},
    {1, 4, "fp32", "none", "4", GRAD_TOL, LOSS_TOL},
    {1, 4, "fp32", "sqrt", "2", GRAD_TOL, LOSS_TOL}, // fewer micro-batches than stages
    {1, 4, "fp32", "full", "8", GRAD_TOL, LOSS_TOL},
    {2, 2, "fp32", "none", "2", GRAD_TOL, LOSS_TOL},
    {2, 2, "fp32", "segments:3", "2", GRAD_TOL, LOSS_TOL}, // segments per stage
    {4, 2, "fp32", "every:2", "4", GRAD_TOL, LOSS_TOL},
    {2, 4, "fp32", "full", "4", GRAD_TOL, LOSS_TOL},
    {2, 1, "fp32", "full", "2", GRAD_TOL, LOSS_TOL},
    {4, 1, "tf32", "every:3", "2", GRAD_TOL, LOSS_TOL},
    {2, 2, "tf32", "none", "4", GRAD_TOL, LOSS_TOL},
    {1, 2, "bf16", "none", "2", 0, 0},        // pp alone: bit-identical
    {1, 4, "fp16", "full", "4", 0, 0},
    {2, 1, "bf16", "none", "1", 3e-2, 1e-2},
    {4, 1, "bf16", "full", "2", 3e-2, 1e-2},
    {2, 2, "bf16", "sqrt", "2", 3e-2, 1e-2},
    {2, 1, "fp16", "none", "1", 5e-3, 2e-3},
    {4, 2, "fp16", "every:2", "4", 5e-3, 2e-3},
    {2, 2, "fp16", "segments:2", "2", 5e-3, 2e-3},
};

static void test_grads_equal_unsplit(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const split_case *k = &cases[i];
        mo_run_config rc, plain;
        const char *kv[] = {"--precision", k->precision, "--ckpt", k->ckpt, "--accum", k->accum, NULL};
        config_of(kv, &rc);
        const char *kv0[] = {"--precision", k->precision, "--accum", k->accum, NULL};
        config_of(kv0, &plain); // checkpointing is bit-identical to none (test_mlp)
        run_out ref, got;
        int rep = 0;
        if (!unsplit_run(&plain, 0, &ref)) return;
        if (!split_run(rc, k->tp, k->pp, 0, &got, &rep)) { out_free(&ref); continue; }
        int wp = 0;
        double e = worst_tensor(&rc, got.grads, ref.grads, &wp);
        double le = fabs(got.loss - ref.loss) / fabs(ref.loss);
        printf("  tp %d pp %d %s ckpt %-10s accum %s: loss %.7f (unsplit %.7f, rel %.1e), worst gradient %s rel %.2e (tol %.0e)\n",
               k->tp, k->pp, k->precision, k->ckpt, k->accum, got.loss, ref.loss, le, pname[wp], e, k->grad_tol);
        CHECK_MSG(e <= k->grad_tol, "tp %d pp %d %s %s accum %s: gradient of %s off by %.3e relative", k->tp, k->pp,
                  k->precision, k->ckpt, k->accum, pname[wp], e);
        CHECK_MSG(le <= k->loss_tol, "tp %d pp %d %s: loss %.9g vs unsplit %.9g", k->tp, k->pp, k->precision, got.loss, ref.loss);
        CHECK_MSG(rep, "tp %d pp %d %s: a replicated tensor differs between ranks", k->tp, k->pp, k->precision);
        if (k->grad_tol == 0) // bit-identical: the gradients themselves, not only their norm
            CHECK_MSG(!memcmp(got.grads, ref.grads, ref.n * sizeof(float)), "tp %d pp %d %s: not bit-identical", k->tp, k->pp,
                      k->precision);
        out_free(&ref);
        out_free(&got);
    }
}

// AdamW steps (clipping at norm 1 is on by default): the updated weights equal the unsplit run's
// within 1e-5 relative after one step and after three (fp32; the loss of the last forward too).
static void test_steps_equal_unsplit(void) {
    static const struct { int tp, pp, steps; const char *ckpt, *accum; } grid[] = {
        {2, 1, 1, "none", "1"}, {4, 1, 1, "full", "2"}, {1, 2, 1, "none", "2"}, {1, 4, 1, "sqrt", "4"},
        {2, 2, 1, "every:2", "2"}, {4, 2, 3, "none", "4"}, {2, 4, 3, "full", "2"},
    };
    for (size_t i = 0; i < sizeof grid / sizeof grid[0]; i++) {
        mo_run_config rc;
        const char *kv[] = {"--ckpt", grid[i].ckpt, "--accum", grid[i].accum, "--lr", "1e-2", NULL};
        config_of(kv, &rc);
        run_out ref, got;
        int rep = 0;
        if (!unsplit_run(&rc, grid[i].steps, &ref)) return;
        if (!split_run(rc, grid[i].tp, grid[i].pp, grid[i].steps, &got, &rep)) { out_free(&ref); continue; }
        int wp = 0;
        double e = worst_tensor(&rc, got.params, ref.params, &wp);
        double le = fabs(got.loss - ref.loss) / fabs(ref.loss);
        printf("  tp %d pp %d ckpt %s accum %s, %d step(s): loss %.7f (unsplit %.7f), worst weight %s rel %.2e\n", grid[i].tp,
               grid[i].pp, grid[i].ckpt, grid[i].accum, grid[i].steps, got.loss, ref.loss, pname[wp], e);
        CHECK_MSG(e <= GRAD_TOL, "tp %d pp %d, %d steps: weights off by %.3e (%s)", grid[i].tp, grid[i].pp, grid[i].steps, e,
                  pname[wp]);
        CHECK_MSG(le <= LOSS_TOL, "tp %d pp %d: loss %.9g vs %.9g", grid[i].tp, grid[i].pp, got.loss, ref.loss);
        CHECK_MSG(rep, "tp %d pp %d: replicas differ after the update", grid[i].tp, grid[i].pp);
        out_free(&ref);
        out_free(&got);
    }
    // fp16 with its loss scaler (65536): one verdict over the ranks, the update unscaled; one step. The
    // bound is the 16-bit one, widened by Adam: its first update is lr*g/(|g|+eps), about lr*sign(g), so
    // an element whose gradient is within 16-bit rounding of 0 moves by +-lr either way (measured: b1,
    // zero at the start, 1.1e-2; every other tensor below 1e-3).
    mo_run_config rc;
    const char *kv[] = {"--precision", "fp16", "--accum", "2", "--lr", "1e-2", NULL};
    config_of(kv, &rc);
    run_out ref, got;
    int rep = 0;
    if (!unsplit_run(&rc, 1, &ref)) return;
    if (split_run(rc, 2, 2, 1, &got, &rep)) {
        int wp = 0;
        double e = worst_tensor(&rc, got.params, ref.params, &wp);
        printf("  fp16 tp 2 pp 2 accum 2, 1 step: worst master weight %s rel %.2e\n", pname[wp], e);
        CHECK_MSG(e <= 5e-2 && rep && fabs(got.loss - ref.loss) <= 2e-3 * fabs(ref.loss),
                  "fp16 tp 2 pp 2: master weights off by %.3e (%s), replicas %d, loss %.7f vs %.7f", e, pname[wp], rep,
                  got.loss, ref.loss);
        out_free(&got);
    }
    out_free(&ref);
}

// The communication of one forward/backward: per tp rank 2 all-reduces per block and micro-batch
// (W2's output, W1's input gradient) plus, in a step, the norm's all-gather over the world; a
// recompute repeats the forward one but for each segment's last block (it skips W2).
static void test_comm_ops(void) {
    static const struct { int tp, pp, M; const char *ckpt; int want_per_rank; } grid[] = {
        {2, 1, 1, "none", 2 * 4 * 1 + 1},      // 4 blocks
        {4, 1, 2, "none", 2 * 4 * 2 + 1},
        {2, 1, 1, "full", 2 * 4 * 1 + 1},      // full: every segment one block, its recompute skips W2
        {2, 1, 1, "every:2", 2 * 4 + 2 + 1},   // two segments of 2: block 0 and 2 re-run W2
    };
    for (size_t i = 0; i < sizeof grid / sizeof grid[0]; i++) {
        mo_run_config rc;
        char m[8];
        snprintf(m, sizeof m, "%d", grid[i].M);
        const char *kv[] = {"--ckpt", grid[i].ckpt, "--accum", m, NULL};
        config_of(kv, &rc);
        rc.tp = grid[i].tp;
        rc.pp = grid[i].pp;
        mo_split_config sc = split_sc(rc.tp, rc.pp, MO_BACKEND_DRY);
        const mo_model_split_ops *so = mo_mlp_model.split;
        void *sp = NULL;
        if (!CHECK_OK(so->create(&rc, &sc, &sp))) continue;
        CHECK_OK(so->set_synthetic_batch(sp, 1));
        CHECK_OK(so->comm_reset(sp));
        CHECK_OK(so->step(sp));
        mo_split_comm c;
        CHECK_OK(so->comm_stats(sp, &c));
        uint64_t want = (uint64_t)so->world(sp) * grid[i].want_per_rank;
        CHECK_MSG(c.ops == want && c.bytes > 0, "tp %d ckpt %s accum %d: %llu comm ops, want %llu", grid[i].tp, grid[i].ckpt,
                  grid[i].M, (unsigned long long)c.ops, (unsigned long long)want);
        so->destroy(sp);
    }
}

// Every rank's peaks and allocation counts on dry equal the cpu's, for each configuration, through the
// split API (two steps) and through the run engine (the row's dry prediction equals its peak).
static void test_dry_equals_cpu(void) {
    static const char *const precisions[] = {"fp32", "tf32", "fp16", "bf16"};
    static const char *const ckpts[] = {"none", "full", "sqrt", "segments:2"};
    static const int splits[][2] = {{2, 1}, {4, 1}, {1, 2}, {1, 4}, {2, 2}, {4, 2}, {2, 4}};
    static const char *const accums[] = {"1", "4"};
    const mo_model_split_ops *so = mo_mlp_model.split;
    int n = 0, same = 0, rows = 0, rows_ok = 0;
    mo_run_env env;
    for (int p = 0; p < 4; p++)
        for (int c = 0; c < 4; c++)
            for (size_t s = 0; s < sizeof splits / sizeof splits[0]; s++)
                for (int a = 0; a < 2; a++) {
                    if ((p + c + (int)s + a) % 2) continue; // half the grid (every axis value still appears)
                    mo_run_config rc;
                    const char *kv[] = {"--precision", precisions[p], "--ckpt", ckpts[c], "--accum", accums[a], NULL};
                    config_of(kv, &rc);
                    rc.tp = splits[s][0];
                    rc.pp = splits[s][1];
                    mo_alloc_stats st[2][8];
                    int W = 0, ok = 1;
                    for (int b = 0; b < 2 && ok; b++) {
                        mo_split_config sc = split_sc(rc.tp, rc.pp, b ? MO_BACKEND_DRY : MO_BACKEND_CPU);
                        void *sp = NULL;
                        ok = CHECK_OK(so->create(&rc, &sc, &sp)) && CHECK_OK(so->set_synthetic_batch(sp, 1)) &&
                             CHECK_OK(so->step(sp)) && CHECK_OK(so->step(sp));
                        if (sp) {
                            W = so->world(sp);
                            for (int r = 0; r < W; r++) mo_allocator_stats(so->allocator(sp, r), &st[b][r]);
                            so->destroy(sp);
                        }
                    }
                    if (!ok) continue;
                    n++;
                    int eq = 1;
                    for (int r = 0; r < W; r++) {
                        int e = st[0][r].peak_allocated_bytes == st[1][r].peak_allocated_bytes &&
                                st[0][r].peak_reserved_bytes == st[1][r].peak_reserved_bytes &&
                                st[0][r].num_allocs == st[1][r].num_allocs &&
                                !memcmp(st[0][r].peak_by_cat, st[1][r].peak_by_cat, sizeof st[0][r].peak_by_cat);
                        CHECK_MSG(e, "%s %s accum %s tp %d pp %d rank %d: cpu peak %llu/%llu, dry %llu/%llu", precisions[p],
                                  ckpts[c], accums[a], rc.tp, rc.pp, r, (unsigned long long)st[0][r].peak_allocated_bytes,
                                  (unsigned long long)st[0][r].peak_reserved_bytes,
                                  (unsigned long long)st[1][r].peak_allocated_bytes,
                                  (unsigned long long)st[1][r].peak_reserved_bytes);
                        eq &= e;
                    }
                    same += eq;
                    // The engine's row: the largest rank's peak, predicted by a dry replay.
                    if (rows == 0) CHECK_OK(mo_run_env_init(&env, &rc));
                    mo_csv_row row;
                    CHECK_OK(mo_run_execute(&rc, &env, &row, NULL));
                    rows++;
                    int rok = !strcmp(row.status, "ok") && row.predicted_peak_bytes == row.peak_allocated_bytes &&
                              row.peak_allocated_bytes > 0 && row.tp == rc.tp && row.pp == rc.pp && isfinite(row.loss_last);
                    rows_ok += rok;
                    CHECK_MSG(rok, "row %s %s accum %s tp %d pp %d: %s, peak %lld, predicted %lld (%s)", precisions[p],
                              ckpts[c], accums[a], rc.tp, rc.pp, row.status, (long long)row.peak_allocated_bytes,
                              (long long)row.predicted_peak_bytes, row.detail);
                }
    CHECK(n > 0 && same == n && rows_ok == rows);
    printf("  dry == cpu on every rank: %d/%d configurations; engine rows with the dry peak exact: %d/%d\n", same, n, rows_ok,
           rows);
}

// The split's memory: tp divides each rank's W1/W2 and their (N,4H) activations by tp; pp gives each
// stage its blocks only. Dry peaks of the parameter category, exact.
static void test_shard_sizes(void) {
    mo_run_config rc;
    config_of(NULL, &rc);
    const mo_model_split_ops *so = mo_mlp_model.split;
    size_t H = 32, I = 16, K = 8, L = 4;
    static const int grid[][2] = {{2, 1}, {4, 1}, {1, 2}, {1, 4}, {2, 2}};
    for (size_t i = 0; i < sizeof grid / sizeof grid[0]; i++) {
        rc.tp = grid[i][0];
        rc.pp = grid[i][1];
        mo_split_config sc = split_sc(rc.tp, rc.pp, MO_BACKEND_DRY);
        void *sp = NULL;
        if (!CHECK_OK(so->create(&rc, &sc, &sp))) continue;
        for (int r = 0; r < so->world(sp); r++) {
            int stage = r / rc.tp, P = rc.pp;
            size_t Ls = L / (size_t)P, F = 4 * H / (size_t)rc.tp;
            size_t n = Ls * (2 * H + F * H + F + H * F + H) + (stage == 0 ? H * I + H : 0) + (stage == P - 1 ? K * H + K : 0);
            mo_alloc_stats a;
            mo_allocator_stats(so->allocator(sp, r), &a);
            CHECK_MSG(a.peak_by_cat[MO_CAT_PARAM] == ((n * 4 + 511) / 512) * 512, "tp %d pp %d rank %d: param bytes %llu, want %zu floats",
                      rc.tp, rc.pp, r, (unsigned long long)a.peak_by_cat[MO_CAT_PARAM], n);
        }
        so->destroy(sp);
    }
}

// A cap that the step does not fit on some rank: an oom row (no hang), every rank given back; then a
// normal run.
static void test_oom(void) {
    mo_run_config rc;
    const char *kv[] = {"--cap", "33MiB", "--layers", "8", "--hidden", "256", "--batch", "256", "--tp", "2", "--pp", "2",
                        "--accum", "2", NULL};
    config_of(kv, &rc);
    mo_run_env env;
    CHECK_OK(mo_run_env_init(&env, &rc));
    mo_csv_row row;
    CHECK_OK(mo_run_execute(&rc, &env, &row, NULL));
    CHECK_MSG(!strcmp(row.status, "oom") && strstr(row.detail, "rank"), "capped split: %s: %s", row.status, row.detail);
    printf("  capped tp 2 pp 2: %s (%s)\n", row.status, row.detail);
    rc.backend = MO_BACKEND_DRY;
    CHECK_OK(mo_run_execute(&rc, &env, &row, NULL));
    CHECK_MSG(!strcmp(row.status, "oom"), "dry: %s", row.status);
    config_of((const char *const[]){"--tp", "2", "--pp", "2", NULL}, &rc);
    CHECK_OK(mo_run_execute(&rc, &env, &row, NULL));
    CHECK_MSG(!strcmp(row.status, "ok"), "after the oom: %s %s", row.status, row.detail);
}

static void expect_refused(const char *const *kv, const char *want) {
    mo_config_defaults(&cfg, MO_CMD_RUN);
    mo_status st = MO_OK;
    for (int i = 0; kv[i] && st == MO_OK; i += 2) st = mo_config_set(&cfg, kv[i], kv[i + 1]);
    if (st == MO_OK) st = mo_config_finish(&cfg);
    mo_run_config rc;
    if (st == MO_OK) st = mo_config_combination(&cfg, 0, &rc);
    if (st == MO_OK) st = mo_run_config_validate(&rc);
    CHECK_MSG(st == MO_ERR_INVALID && strstr(mo_errmsg_plain(), want), "%s %s ...: %s; want '%s'", kv[2], kv[3],
              mo_errmsg_plain(), want);
}

static void test_refusals(void) {
    // tp must divide 4*hidden (hidden itself need not: hidden 6, tp 4 and 8 take 24/tp columns each).
    expect_refused((const char *const[]){"--model", "mlp", "--tp", "3", "--hidden", "32", NULL}, "--tp 3: the block width 4*hidden = 128");
    expect_refused((const char *const[]){"--model", "mlp", "--tp", "16", "--hidden", "6", NULL}, "--tp 16");
    expect_refused((const char *const[]){"--model", "mlp", "--pp", "8", "--layers", "4", NULL}, "--pp 8: more stages than the 4 layers");
    expect_refused((const char *const[]){"--model", "mlp", "--pp", "3", "--layers", "4", NULL}, "--pp 3: the 4 layers are not divisible");
    expect_refused((const char *const[]){"--model", "mlp", "--tp", "2", "--comm", "nccl", "--backend", "cpu", NULL}, "--comm nccl");
    // Accepted: tp 8 of hidden 6 (4H = 24), and the split's rows are made.
    mo_run_config rc;
    config_of((const char *const[]){"--hidden", "6", "--tp", "8", NULL}, &rc);
    CHECK_OK(mo_run_config_validate(&rc));
    run_out ref, got;
    int rep = 0;
    rc.tp = 1;
    if (unsplit_run(&rc, 0, &ref) && split_run(rc, 8, 1, 0, &got, &rep)) {
        int wp = 0;
        double e = worst_tensor(&rc, got.grads, ref.grads, &wp);
        CHECK_MSG(e <= GRAD_TOL && rep, "hidden 6 tp 8: gradient of %s off by %.3e", pname[wp], e);
        out_free(&got);
    }
    out_free(&ref);
}

int main(void) {
    test_refusals();
    test_init_is_unsplit();
    test_grads_equal_unsplit();
    test_steps_equal_unsplit();
    test_comm_ops();
    test_shard_sizes();
    test_oom();
    test_dry_equals_cpu();
    return test_finish();
}
