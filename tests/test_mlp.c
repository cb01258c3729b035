// The MLP model (models/mlp.c) through its table: the dry backend's peak equals the cpu run's to the
// byte over every strategy x precision; checkpointing gives bit-identical gradients to none;
// accumulation equals the full batch within 1e-5; it trains; what it lacks is refused with the reason.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench/config.h"
#include "bench/csv.h"
#include "bench/run_engine.h"
#include "models/ckpt_layout.h"
#include "models/mlp.h"
#include "models/model.h"
#include "testlib.h"

static mo_config cfg;

// A run configuration of the small test shape (L4 H32 I16 K8 B8) plus the flag pairs in kv.
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

static void test_dry_equals_cpu(void) {
    static const char *const precisions[] = {"fp32", "tf32", "fp16", "bf16"};
    static const char *const ckpts[] = {"none", "full", "every:3", "sqrt", "segments:3"};
    static const char *const accums[] = {"1", "2", "4"};
    static const char *const allocs[] = {"caching", "async", "raw"};
    mo_run_env env;
    int n = 0, ok = 0;
    for (int p = 0; p < 4; p++)
        for (int c = 0; c < 5; c++)
            for (int a = 0; a < 3; a++)
                for (int al = 0; al < 3; al++) {
                    mo_run_config rc;
                    const char *kv[] = {"--precision", precisions[p], "--ckpt", ckpts[c], "--accum", accums[a],
                                        "--alloc", allocs[al], NULL};
                    config_of(kv, &rc);
                    if (n == 0) CHECK_OK(mo_run_env_init(&env, &rc));
                    mo_csv_row row;
                    CHECK_OK(mo_run_execute(&rc, &env, &row, NULL));
                    n++;
                    // The row's prediction is the dry replay of the same steps.
                    int same = !strcmp(row.status, "ok") && row.predicted_peak_bytes == row.peak_allocated_bytes &&
                               row.peak_allocated_bytes > 0;
                    ok += same;
                    CHECK_MSG(same, "%s %s accum %s %s: %s, cpu peak %lld, dry %lld (%s)", precisions[p], ckpts[c], accums[a],
                              allocs[al], row.status, (long long)row.peak_allocated_bytes,
                              (long long)row.predicted_peak_bytes, row.detail);
                    CHECK(!strcmp(row.dims, "L4 H32 I16 K8") && row.heads == -1 && row.vocab == -1 && !row.attn[0]);
                    CHECK_MSG(!strcmp(row.ckpt, ckpts[c]), "ckpt column '%s', want '%s'", row.ckpt, ckpts[c]);
                    CHECK(row.items_per_s > 0 && isnan(row.tokens_per_s) && isfinite(row.loss_last));
                }
    CHECK_EQ_U64(ok, n);
    printf("dry == cpu peak: %d/%d configurations\n", ok, n);
}

// Checkpointing saves activation memory (dry peaks, exact): none > every:4 > full, and sqrt (K 3 of
// 8 layers) below none; the recompute FLOPs count the re-run forward.
static void test_ckpt_saves(void) {
    static const char *const ckpts[] = {"none", "every:4", "full", "sqrt"};
    int64_t act[4];
    mo_run_env env;
    for (int c = 0; c < 4; c++) {
        mo_run_config rc;
        const char *kv[] = {"--layers", "8", "--hidden", "64", "--batch", "256", "--backend", "dry", "--ckpt", ckpts[c], NULL};
        config_of(kv, &rc);
        if (c == 0) CHECK_OK(mo_run_env_init(&env, &rc));
        mo_csv_row row;
        CHECK_OK(mo_run_execute(&rc, &env, &row, NULL));
        CHECK(!strcmp(row.status, "ok"));
        act[c] = row.activation_peak_bytes;
        double rf = mo_mlp_model.recompute_flops(&rc);
        CHECK(c == 0 ? rf == 0 : rf > 0);
    }
    CHECK_MSG(act[0] > act[1] && act[1] > act[2] && act[3] < act[0], "activation peaks none %lld every:4 %lld full %lld sqrt %lld",
              (long long)act[0], (long long)act[1], (long long)act[2], (long long)act[3]);
    // Exact: the step's peak is the last segment's backward, with the other segments' inputs live, so
    // doubling the layers at the same K adds exactly those inputs, one (N,H) fp32 each (64 x 64 x 4 B,
    // a multiple of the allocator's 512-byte blocks): every:4 one more segment, full four more.
    static const struct { const char *ckpt; int extra; } rel[] = {{"every:4", 1}, {"full", 4}, {"none", -1}};
    for (int k = 0; k < 3; k++) {
        int64_t a[2];
        for (int half = 0; half < 2; half++) {
            mo_run_config rc;
            const char *kv[] = {"--layers", half ? "4" : "8", "--hidden", "64", "--batch", "64", "--backend", "dry",
                                "--ckpt", rel[k].ckpt, NULL};
            config_of(kv, &rc);
            mo_csv_row row;
            CHECK_OK(mo_run_execute(&rc, &env, &row, NULL));
            a[half] = row.activation_peak_bytes;
        }
        if (rel[k].extra >= 0)
            CHECK_MSG(a[0] - a[1] == rel[k].extra * 64 * 64 * 4, "%s: L8 - L4 activation peak %lld, want %d", rel[k].ckpt,
                      (long long)(a[0] - a[1]), rel[k].extra * 64 * 64 * 4);
        else // none keeps every block's internals: 4 more blocks' worth (ln, 2 x 4H, out, mean, rstd)
            CHECK_MSG(a[0] - a[1] == 4 * (64 * 64 * 4 * 10 + 2 * 512), "none: L8 - L4 activation peak %lld",
                      (long long)(a[0] - a[1]));
    }
}

// segments:N is torch.utils.checkpoint.checkpoint_sequential's layout (models/ckpt_layout.h): N-1
// checkpointed segments of L // N blocks, the rest run unchecked. The layout itself, then the MLP's
// exact dry activation peaks against every:K runs with the same checkpointed part.
static void test_segments(void) {
    static const struct { int L, N, len, blocks; } want[] = {
        {12, 4, 3, 9}, {10, 3, 3, 6}, {8, 2, 4, 4}, {5, 5, 1, 4}, {7, 1, 0, 0}, {8, 3, 2, 4}, {4, 9, 1, 3}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        mo_ckpt_layout y = mo_ckpt_layout_of(MO_CKPT_SEGMENTS, want[i].N, want[i].L);
        CHECK_MSG(y.len == want[i].len && y.blocks == want[i].blocks, "segments:%d of %d: len %d blocks %d, want %d %d",
                  want[i].N, want[i].L, y.len, y.blocks, want[i].len, want[i].blocks);
        CHECK(mo_ckpt_layout_segments(y) == (want[i].N < want[i].L ? want[i].N : want[i].L) - 1);
    }
    mo_ckpt_layout e = mo_ckpt_layout_of(MO_CKPT_EVERY, 3, 8), q = mo_ckpt_layout_of(MO_CKPT_SQRT, 0, 8);
    CHECK(e.len == 3 && e.blocks == 8 && mo_ckpt_layout_segments(e) == 3 && q.len == 3 && q.blocks == 8);
    mo_ckpt_layout f = mo_ckpt_layout_of(MO_CKPT_FULL, 0, 8), n = mo_ckpt_layout_of(MO_CKPT_NONE, 0, 8);
    CHECK(f.len == 1 && f.blocks == 8 && n.len == 0 && n.blocks == 0);

    // Activation peaks (dry, exact): full = segments:8 < segments:4 < segments:2 < none = segments:1.
    static const char *const ckpts[] = {"none", "full", "segments:1", "segments:2", "segments:4", "segments:8"};
    int64_t act[6];
    mo_run_env env;
    for (int c = 0; c < 6; c++) {
        mo_run_config rc;
        const char *kv[] = {"--layers", "8", "--hidden", "64", "--batch", "256", "--backend", "dry", "--ckpt", ckpts[c], NULL};
        config_of(kv, &rc);
        if (c == 0) CHECK_OK(mo_run_env_init(&env, &rc));
        mo_csv_row row;
        CHECK_OK(mo_run_execute(&rc, &env, &row, NULL));
        CHECK_MSG(!strcmp(row.status, "ok") && !strcmp(row.ckpt, ckpts[c]), "%s: %s, ckpt '%s'", ckpts[c], row.status, row.ckpt);
        act[c] = row.activation_peak_bytes;
        double rf = mo_mlp_model.recompute_flops(&rc);
        CHECK_MSG(c == 0 || c == 2 ? rf == 0 : rf > 0, "%s: recompute FLOPs %g", ckpts[c], rf);
    }
    printf("activation peak: none %lld full %lld segments:1 %lld :2 %lld :4 %lld :8 %lld\n", (long long)act[0],
           (long long)act[1], (long long)act[2], (long long)act[3], (long long)act[4], (long long)act[5]);
    // segments:1 keeps everything (none); segments:8 of 8 checkpoints all blocks but the last, whose
    // internals are live at the peak just as full's recompute of it is: the same peak as full.
    CHECK(act[2] == act[0] && act[5] == act[1]);
    CHECK_MSG(act[1] < act[4] && act[4] < act[3] && act[3] < act[0], "not full < segments:4 < :2 < none");
    // segments:2 of 8 checkpoints blocks 0-3 as one segment and keeps 4-7: its recompute is every:4's of 4
    // layers, and it keeps exactly what none keeps for blocks 4-7 while the segment's input is live.
    mo_run_config a, b;
    const char *kva[] = {"--layers", "8", "--hidden", "64", "--batch", "256", "--ckpt", "segments:2", NULL};
    const char *kvb[] = {"--layers", "4", "--hidden", "64", "--batch", "256", "--ckpt", "every:4", NULL};
    config_of(kva, &a);
    config_of(kvb, &b);
    CHECK(mo_mlp_model.recompute_flops(&a) == mo_mlp_model.recompute_flops(&b));
}

// Under a cap too small for it: an out-of-memory row on both backends, nothing left allocated.
static void test_cap(void) {
    mo_run_config rc;
    const char *kv[] = {"--cap", "40MiB", NULL}; // the context's 32 MiB workspace fits, the step does not
    config_of(kv, &rc);
    mo_run_env env;
    CHECK_OK(mo_run_env_init(&env, &rc));
    mo_csv_row row;
    CHECK_OK(mo_run_execute(&rc, &env, &row, NULL));
    CHECK_MSG(!strcmp(row.status, "ok") || !strcmp(row.status, "oom"), "%s", row.status);
    const char *kv2[] = {"--cap", "33MiB", "--layers", "8", "--hidden", "256", "--batch", "256", NULL};
    config_of(kv2, &rc);
    CHECK_OK(mo_run_execute(&rc, &env, &row, NULL));
    CHECK_MSG(!strcmp(row.status, "oom") && row.num_ooms >= 1, "%s: %s", row.status, row.detail);
    rc.backend = MO_BACKEND_DRY;
    CHECK_OK(mo_run_execute(&rc, &env, &row, NULL));
    CHECK_MSG(!strcmp(row.status, "oom"), "dry: %s", row.status);
}

// The gradients of one forward/backward of a configuration on the cpu backend (malloc'ed, *n floats).
static float *grads_of(const mo_run_config *rc, size_t *n, double *loss) {
    mo_allocator *a = NULL;
    mo_ctx *x = NULL;
    void *m = NULL;
    float *g = NULL;
    const mo_model_ops *ops = &mo_mlp_model;
    CHECK_OK(mo_allocator_create(&a, MO_ALLOC_CACHING, MO_BACKEND_CPU, 0, NULL));
    CHECK_OK(mo_ctx_create(&x, MO_BACKEND_CPU, a));
    x->tf32 = rc->precision == MO_PREC_TF32;
    CHECK_OK(ops->create(rc, x, &m));
    CHECK_OK(ops->set_synthetic_batch(m, rc->seed));
    CHECK_OK(mo_mlp_forward_backward(m));
    mo_model_step_info info;
    ops->info(m, &info);
    *loss = info.loss;
    CHECK_OK(mo_mlp_read(m, NULL, NULL, n));
    g = malloc(*n * sizeof(float));
    CHECK_OK(mo_mlp_read(m, NULL, g, n));
    ops->destroy(m);
    mo_ctx_destroy(x);
    mo_allocator_destroy(a);
    return g;
}

static void test_checkpointing_bit_identical(void) {
    static const char *const precisions[] = {"fp32", "tf32", "fp16", "bf16"};
    static const char *const ckpts[] = {"full", "every:2", "every:3", "sqrt", "segments:1", "segments:2", "segments:3",
                                        "segments:4"};
    for (int p = 0; p < 4; p++) {
        mo_run_config rc;
        const char *kv0[] = {"--precision", precisions[p], "--accum", "2", NULL};
        config_of(kv0, &rc);
        size_t n0, n;
        double l0, l;
        float *g0 = grads_of(&rc, &n0, &l0);
        for (int c = 0; c < 8; c++) {
            const char *kv[] = {"--precision", precisions[p], "--accum", "2", "--ckpt", ckpts[c], NULL};
            config_of(kv, &rc);
            float *g = grads_of(&rc, &n, &l);
            CHECK_MSG(n == n0 && !memcmp(g, g0, n * sizeof(float)) && l == l0, "%s %s: gradients differ from none",
                      precisions[p], ckpts[c]);
            free(g);
        }
        free(g0);
    }
}

static void test_accumulation(void) {
    mo_run_config rc;
    config_of(NULL, &rc);
    size_t n1, n;
    double l1, l;
    float *g1 = grads_of(&rc, &n1, &l1);
    double gmax = 0;
    for (size_t i = 0; i < n1; i++) gmax = fmax(gmax, fabs(g1[i]));
    CHECK(gmax > 0);
    static const char *const accums[] = {"2", "4", "8"};
    for (int k = 0; k < 3; k++) {
        const char *kv[] = {"--accum", accums[k], NULL};
        config_of(kv, &rc);
        float *g = grads_of(&rc, &n, &l);
        double worst = 0;
        for (size_t i = 0; i < n && i < n1; i++) worst = fmax(worst, fabs((double)g[i] - g1[i]));
        CHECK_MSG(n == n1 && worst <= 1e-5 * gmax, "accum %s: max |diff| %.3g (max |g| %.3g)", accums[k], worst, gmax);
        CHECK_MSG(fabs(l - l1) <= 1e-5 * fabs(l1), "accum %s: loss %.9g vs %.9g", accums[k], l, l1);
        free(g);
    }
    free(g1);
}

// It learns the synthetic classes of its one batch: the loss falls.
static void test_trains(void) {
    mo_run_config rc;
    const char *kv[] = {"--steps", "20", "--lr", "3e-3", NULL};
    config_of(kv, &rc);
    mo_run_env env;
    CHECK_OK(mo_run_env_init(&env, &rc));
    mo_csv_row row;
    CHECK_OK(mo_run_execute(&rc, &env, &row, NULL));
    CHECK(!strcmp(row.status, "ok"));
    CHECK_MSG(fabs(row.loss_first - log(8.0)) < 0.2 && row.loss_last < 0.5 * row.loss_first, "loss %.4f -> %.4f",
              row.loss_first, row.loss_last);
    CHECK(row.params == (int64_t)mo_mlp_model.num_params(&rc));
    CHECK(row.params == 32 * 16 + 32 + 4 * (2 * 32 + 4 * 32 * 32 + 4 * 32 + 32 * 4 * 32 + 32) + 8 * 32 + 8);
}

static void expect_refused(const char *const *kv, const char *want) {
    mo_config_defaults(&cfg, MO_CMD_RUN);
    mo_status st = MO_OK;
    for (int i = 0; kv[i] && st == MO_OK; i += 2) st = mo_config_set(&cfg, kv[i], kv[i + 1]);
    if (st == MO_OK) st = mo_config_finish(&cfg);
    CHECK_MSG(st == MO_ERR_INVALID && strstr(mo_errmsg_plain(), want), "%s %s ...: %s; want '%s'", kv[0], kv[1],
              mo_errmsg_plain(), want);
}

static void test_refusals(void) {
    expect_refused((const char *const[]){"--model", "mlp", "--ckpt", "selective", NULL},
                   "--ckpt selective: model mlp has no attention");
    expect_refused((const char *const[]){"--model", "mlp", "--attn", "fused", NULL}, "--attn: not a flag of model mlp");
    // It splits (tests/test_mlp_split.c); a split its shape cannot take is refused naming the flag.
    expect_refused((const char *const[]){"--model", "mlp", "--hidden", "5", "--tp", "8", NULL}, "--tp 8: the block width 4*hidden = 20");
    expect_refused((const char *const[]){"--model", "mlp", "--layers", "4", "--pp", "5", NULL}, "--pp 5: more stages than the 4 layers");
    expect_refused((const char *const[]){"--model", "mlp", "--heads", "2", NULL}, "--heads: not a flag of model mlp");
    expect_refused((const char *const[]){"--model", "mlp", "--vocab", "2", NULL}, "--vocab: not a flag of model mlp");
    expect_refused((const char *const[]){"--input", "16", NULL}, "--input: not a flag of model gpt");
    expect_refused((const char *const[]){"--classes", "16", NULL}, "--classes: not a flag of model gpt");
    expect_refused((const char *const[]){"--model", "mlp", "--classes", "1", NULL}, "--classes");
    expect_refused((const char *const[]){"--model", "mlp", "--preset", "gpt2-124m", NULL}, "not a preset of model mlp");
    // Its presets.
    mo_config_defaults(&cfg, MO_CMD_RUN);
    CHECK_OK(mo_config_set(&cfg, "--model", "mlp"));
    CHECK_OK(mo_config_set(&cfg, "--preset", "mlp-param"));
    CHECK_OK(mo_config_finish(&cfg));
    mo_run_config rc;
    CHECK_OK(mo_config_combination(&cfg, 0, &rc));
    CHECK(rc.layers == 8 && rc.hidden == 4096 && rc.input == 1024 && rc.classes == 1000 && rc.batch == 64);
}

int main(void) {
    test_refusals();
    test_trains();
    test_accumulation();
    test_checkpointing_bit_identical();
    test_ckpt_saves();
    test_segments();
    test_cap();
    test_dry_equals_cpu();
    return test_finish();
}
