// The ResNet model (models/resnet*.c) through its table on the cpu backend: torchvision's parameter
// counts; the dry backend's peak equals the cpu run's to the byte over checkpoint policies x precisions x
// accumulation x batch; checkpointing gives bit-identical gradients and running statistics to none;
// accumulation equals the mean of the micro-batches' separate gradients (not the full batch: BN's
// statistics are per micro-batch); the shortcut's gradient added in a convolution's pass gives fp32's bits
// of a pass of its own, at no higher a peak; the gradients match finite differences of the loss; it trains; what it
// lacks is refused with the reason.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench/config.h"
#include "bench/csv.h"
#include "bench/run_engine.h"
#include "models/ckpt_layout.h"
#include "models/model.h"
#include "models/resnet.h"
#include "testlib.h"

static mo_config cfg;

// A run configuration of the tiny test shape (depth 10: basic blocks [1,1,1,1], width 4, 32x32, 5
// classes, batch 4) plus the flag pairs in kv.
static void config_of(const char *const *kv, mo_run_config *rc) {
    mo_config_defaults(&cfg, MO_CMD_RUN);
    static const char *const base[] = {"--model", "resnet", "--layers", "10", "--hidden", "4", "--input", "32",
                                       "--classes", "5", "--batch", "4", "--backend", "cpu", "--steps", "2",
                                       "--warmup", "1", NULL};
    for (int i = 0; base[i]; i += 2) CHECK_OK(mo_config_set(&cfg, base[i], base[i + 1]));
    for (int i = 0; kv && kv[i]; i += 2) CHECK_OK(mo_config_set(&cfg, kv[i], kv[i + 1]));
    CHECK_OK(mo_config_finish(&cfg));
    CHECK_OK(mo_config_combination(&cfg, 0, rc));
}

static void test_params(void) {
    static const struct { const char *preset; size_t n; } tv[] = {
        {"resnet18", 11689512}, {"resnet34", 21797672}, {"resnet50", 25557032}, {"resnet101", 44549160},
        {"resnet152", 60192808}}; // torchvision.models.resnetD(num_classes=1000), sum of numel
    for (int i = 0; i < 5; i++) {
        mo_run_config rc;
        const char *kv[] = {"--preset", tv[i].preset, "--layers", "0", NULL};
        mo_config_defaults(&cfg, MO_CMD_RUN);
        CHECK_OK(mo_config_set(&cfg, "--model", "resnet"));
        CHECK_OK(mo_config_set(&cfg, kv[0], kv[1]));
        CHECK_OK(mo_config_finish(&cfg));
        CHECK_OK(mo_config_combination(&cfg, 0, &rc));
        size_t n = mo_resnet_model.num_params(&rc);
        CHECK_MSG(n == tv[i].n, "%s: %zu parameters, torchvision's %zu", tv[i].preset, n, tv[i].n);
        // The tensor table's parameter rows (all but the running statistics) add up to it.
        mo_tensor_info t[16];
        int k = mo_resnet_model.tensor_table(&rc, t, 16);
        size_t sum = 0;
        for (int j = 0; j < k; j++) sum += strcmp(t[j].name, "bn.running_stats") ? t[j].numel : 0;
        CHECK(k == 6 && sum == n);
        char d[64];
        mo_run_config back = rc;
        CHECK_OK(mo_resnet_model.dims_parse(mo_resnet_model.dims_text(&rc, d, sizeof d), &back));
        CHECK(back.layers == rc.layers && back.hidden == 64 && back.input == 224 && back.classes == 1000);
        CHECK(mo_resnet_model.step_flops(&rc) > 0 && mo_resnet_model.items_per_sample(&rc) == 1);
    }
    // ResNet-50 at batch 1, 224x224: 4,089,184,256 multiply-adds a forward (v1.5; v1 has 3,857,973,248), of them
    // the stem's 118,013,952 and the FC's 2,048,000; 3 passes of 2 FLOPs each (the stem's 2), so exactly
    // 24,299,077,632 FLOPs a step an image.
    mo_run_config rc;
    mo_config_defaults(&cfg, MO_CMD_RUN);
    CHECK_OK(mo_config_set(&cfg, "--model", "resnet"));
    CHECK_OK(mo_config_set(&cfg, "--batch", "1"));
    CHECK_OK(mo_config_finish(&cfg));
    CHECK_OK(mo_config_combination(&cfg, 0, &rc));
    double f = mo_resnet_model.step_flops(&rc);
    CHECK_MSG(f == 24299077632.0, "resnet50 step FLOPs at batch 1: %.4g", f);
    CHECK_OK(mo_config_set(&cfg, "--ckpt", "full"));
    rc.ckpt.kind = MO_CKPT_FULL;
    double r = mo_resnet_model.recompute_flops(&rc);
    CHECK_MSG(r > 0.3 * f && r < 0.34 * f, "full recompute %.4g of %.4g", r, f); // the blocks' forward, no stem
    rc.ckpt.kind = MO_CKPT_NONE;
    CHECK(mo_resnet_model.recompute_flops(&rc) == 0);
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
    expect_refused((const char *const[]){"--model", "resnet", "--ckpt", "selective", NULL},
                   "--ckpt selective: model resnet has no attention");
    expect_refused((const char *const[]){"--model", "resnet", "--attn", "fused", NULL}, "--attn: not a flag of model resnet");
    expect_refused((const char *const[]){"--model", "resnet", "--tp", "2", NULL}, "model resnet cannot be split over ranks yet (accepted: --tp 1 --pp 1): a ResNet has no attention heads");
    expect_refused((const char *const[]){"--model", "resnet", "--pp", "2", NULL}, "no pipeline split of its stages is built");
    expect_refused((const char *const[]){"--model", "resnet", "--ckpt", "segments:17", NULL},
                   "--ckpt segments:17: more than the 16 residual blocks of resnet50");
    expect_refused((const char *const[]){"--model", "resnet", "--heads", "2", NULL}, "--heads: not a flag of model resnet");
    expect_refused((const char *const[]){"--model", "resnet", "--layers", "20", NULL}, "--layers 20: not a ResNet depth");
    expect_refused((const char *const[]){"--model", "resnet", "--input", "16", NULL}, "--input 16: the image side must be at least 32");
    expect_refused((const char *const[]){"--model", "resnet", "--preset", "resnet51", NULL}, "--preset");
    expect_refused((const char *const[]){"--model", "resnet", "--preset", "gpt2-124m", NULL}, "not a preset of model resnet");
    expect_refused((const char *const[]){"--model", "resnet", "--preset", "resnet-tiny", "--ckpt", "every:5", NULL},
                   "--ckpt every:5: more than the 4 residual blocks");
    expect_refused((const char *const[]){"--model", "resnet", "--preset", "resnet-tiny", "--batch", "1", NULL},
                   "batch norm needs more than one value per channel");
    expect_refused((const char *const[]){"--model", "resnet", "--classes", "1", NULL}, "--classes");
    // Depths: the five of torchvision, 8n+2 basic below 50, 12n+2 bottleneck.
    mo_run_config rc;
    const char *kv[] = {"--layers", "14", NULL};
    config_of(kv, &rc);
    CHECK_OK(mo_run_config_validate(&rc));
}

// The gradients (and running statistics) of one forward/backward on the cpu backend (malloc'ed).
static float *grads_of(const mo_run_config *rc, size_t *n, double *loss, float **running, size_t *nr) {
    mo_allocator *a = NULL;
    mo_ctx *x = NULL;
    void *m = NULL;
    const mo_model_ops *ops = &mo_resnet_model;
    CHECK_OK(mo_allocator_create(&a, MO_ALLOC_CACHING, MO_BACKEND_CPU, 0, NULL));
    CHECK_OK(mo_ctx_create(&x, MO_BACKEND_CPU, a));
    x->tf32 = rc->precision == MO_PREC_TF32;
    CHECK_OK(ops->create(rc, x, &m));
    CHECK_OK(ops->set_synthetic_batch(m, rc->seed));
    CHECK_OK(mo_resnet_forward_backward(m, loss));
    CHECK_OK(mo_resnet_read(m, NULL, NULL, n));
    float *g = malloc(*n * sizeof(float));
    CHECK_OK(mo_resnet_read(m, NULL, g, n));
    if (running) {
        CHECK_OK(mo_resnet_read_running(m, NULL, nr));
        *running = malloc(*nr * sizeof(float));
        CHECK_OK(mo_resnet_read_running(m, *running, nr));
    }
    ops->destroy(m);
    mo_ctx_destroy(x);
    mo_allocator_destroy(a);
    return g;
}

static void test_checkpointing_bit_identical(void) {
    static const char *const precisions[] = {"fp32", "fp16", "bf16"};
    static const char *const ckpts[] = {"full", "every:2", "every:3", "sqrt", "segments:2", "segments:3", "segments:4"};
    static const char *const depths[] = {"10", "14"}; // basic, bottleneck
    int n_ok = 0, n_all = 0;
    for (int d = 0; d < 2; d++)
        for (int p = 0; p < 3; p++) {
            mo_run_config rc;
            const char *kv0[] = {"--layers", depths[d], "--precision", precisions[p], "--batch", "8", "--accum", "2", NULL};
            config_of(kv0, &rc);
            size_t n0, n, nr0, nr;
            double l0, l;
            float *r0, *r;
            float *g0 = grads_of(&rc, &n0, &l0, &r0, &nr0);
            for (int c = 0; c < 7; c++) {
                const char *kv[] = {"--layers", depths[d], "--precision", precisions[p], "--batch", "8", "--accum", "2",
                                    "--ckpt", ckpts[c], NULL};
                config_of(kv, &rc);
                float *g = grads_of(&rc, &n, &l, &r, &nr);
                int same = n == n0 && !memcmp(g, g0, n * sizeof(float)) && l == l0 && nr == nr0 &&
                           !memcmp(r, r0, nr * sizeof(float));
                n_ok += same;
                n_all++;
                CHECK_MSG(same, "depth %s %s %s: gradients, loss or running statistics differ from none", depths[d],
                          precisions[p], ckpts[c]);
                free(g);
                free(r);
            }
            free(g0);
            free(r0);
        }
    printf("checkpointing bit-identical to none (gradients, loss, running statistics): %d/%d\n", n_ok, n_all);
}

// One instance of batch B/k run on each slice in turn, against one of batch B with --accum k: the
// gradients are the mean of the slices' (within 1e-5 of the largest), the running statistics the same
// bits (each micro-batch moves them once, in the same order). The full batch (accum 1) differs: its BN
// statistics are over all B images.
static void test_accumulation(void) {
    for (int k = 2; k <= 4; k += 2) {
        mo_run_config rc;
        char kb[8], ks[8];
        snprintf(kb, sizeof kb, "%d", 4 * k);
        snprintf(ks, sizeof ks, "%d", k);
        const char *kv[] = {"--batch", kb, "--accum", ks, NULL};
        config_of(kv, &rc);
        size_t n, nr;
        double l;
        float *r;
        float *g = grads_of(&rc, &n, &l, &r, &nr);
        // The same images, k separate runs of batch 4.
        const int S = 32, B = 4 * k;
        float *img = malloc((size_t)B * S * S * 3 * sizeof(float));
        int *y = malloc((size_t)B * sizeof(int));
        // The model's synthetic batch (the same generator, so the same bits).
        mo_resnet_synthetic_images(rc.seed, B, S, 5, img, y);
        const char *kv1[] = {"--batch", "4", NULL};
        mo_run_config r1;
        config_of(kv1, &r1);
        mo_allocator *a = NULL;
        mo_ctx *x = NULL;
        void *m = NULL;
        CHECK_OK(mo_allocator_create(&a, MO_ALLOC_CACHING, MO_BACKEND_CPU, 0, NULL));
        CHECK_OK(mo_ctx_create(&x, MO_BACKEND_CPU, a));
        CHECK_OK(mo_resnet_model.create(&r1, x, &m));
        double *mean = calloc(n, sizeof(double));
        float *gj = malloc(n * sizeof(float));
        double lsum = 0;
        for (int j = 0; j < k; j++) {
            CHECK_OK(mo_resnet_set_batch(m, img + (size_t)j * 4 * S * S * 3, y + 4 * j));
            double lj;
            CHECK_OK(mo_resnet_forward_backward(m, &lj));
            size_t nj;
            CHECK_OK(mo_resnet_read(m, NULL, gj, &nj));
            for (size_t i = 0; i < n; i++) mean[i] += gj[i] / (double)k;
            lsum += lj / k;
        }
        float *rj = malloc(nr * sizeof(float));
        size_t nrj;
        CHECK_OK(mo_resnet_read_running(m, rj, &nrj));
        double gmax = 0, worst = 0;
        for (size_t i = 0; i < n; i++) {
            gmax = fmax(gmax, fabs(mean[i]));
            worst = fmax(worst, fabs(g[i] - mean[i]));
        }
        CHECK_MSG(gmax > 0 && worst <= 1e-5 * gmax, "accum %d: max |accum - mean of slices| %.3g (max |g| %.3g)", k, worst, gmax);
        CHECK_MSG(fabs(l - lsum) <= 1e-6 * fabs(lsum), "accum %d: loss %.9g, mean of slices %.9g", k, l, lsum);
        CHECK_MSG(nrj == nr && !memcmp(rj, r, nr * sizeof(float)), "accum %d: running statistics differ", k);
        printf("accum %d of batch %d == mean of %d batch-4 gradients: max |diff| %.3g of max |g| %.3g\n", k, B, k, worst, gmax);
        // The full batch is another function (BN over 4k images): its gradients differ by far more.
        const char *kvf[] = {"--batch", kb, NULL};
        mo_run_config rf;
        config_of(kvf, &rf);
        size_t nf;
        double lf;
        float *gf = grads_of(&rf, &nf, &lf, NULL, NULL);
        double dfull = 0;
        for (size_t i = 0; i < n; i++) dfull = fmax(dfull, fabs(gf[i] - g[i]));
        CHECK_MSG(dfull > 1e-3 * gmax, "accum %d vs the full batch: max |diff| %.3g (want BN's per-micro-batch statistics to show)", k, dfull);
        printf("  accum %d vs the full batch %d: max |diff| %.3g (not equivalent: BN statistics per micro-batch)\n", k, B, dfull);
        free(gf);
        free(rj); free(gj); free(mean);
        mo_resnet_model.destroy(m);
        mo_ctx_destroy(x);
        mo_allocator_destroy(a);
        free(img); free(y); free(g); free(r);
    }
}

// The dry backend's peak is the cpu run's, to the byte, over policies x precisions x accumulation x batch,
// basic and bottleneck blocks.
static void test_dry_equals_cpu(void) {
    static const char *const precisions[] = {"fp32", "tf32", "fp16", "bf16"};
    static const char *const ckpts[] = {"none", "full", "every:2", "sqrt", "segments:2", "segments:4"};
    static const char *const accums[] = {"1", "2"};
    static const char *const batches[] = {"4", "8"};
    static const char *const depths[] = {"10", "14"};
    mo_run_env env;
    int n = 0, ok = 0;
    for (int d = 0; d < 2; d++)
        for (int p = 0; p < 4; p++)
            for (int c = 0; c < 6; c++)
                for (int a = 0; a < 2; a++)
                    for (int b = 0; b < 2; b++) {
                        if (d == 1 && (b == 0 || p == 1)) continue; // bottleneck: batch 8, three precisions
                        mo_run_config rc;
                        const char *kv[] = {"--layers", depths[d], "--precision", precisions[p], "--ckpt", ckpts[c],
                                            "--accum", accums[a], "--batch", batches[b], NULL};
                        config_of(kv, &rc);
                        if (n == 0) CHECK_OK(mo_run_env_init(&env, &rc));
                        mo_csv_row row;
                        CHECK_OK(mo_run_execute(&rc, &env, &row, NULL));
                        n++;
                        int same = !strcmp(row.status, "ok") && row.predicted_peak_bytes == row.peak_allocated_bytes &&
                                   row.peak_allocated_bytes > 0;
                        ok += same;
                        CHECK_MSG(same, "depth %s %s %s accum %s batch %s: %s, cpu peak %lld, dry %lld (%s)", depths[d],
                                  precisions[p], ckpts[c], accums[a], batches[b], row.status,
                                  (long long)row.peak_allocated_bytes, (long long)row.predicted_peak_bytes, row.detail);
                        char want[32];
                        snprintf(want, sizeof want, "D%s W4 S32 K5", depths[d]);
                        CHECK_MSG(!strcmp(row.dims, want) && !strcmp(row.model, "resnet"), "dims %s", row.dims);
                        CHECK(row.items_per_s > 0 && isfinite(row.loss_last));
                    }
    CHECK_EQ_U64(ok, n);
    printf("dry == cpu peak: %d/%d configurations\n", ok, n);
}

// Checkpointing saves activation memory at ResNet-50's shape (dry, exact): none > segments:4 > sqrt, full
// below none; segments:1 == none.
static void test_ckpt_saves(void) {
    static const char *const ckpts[] = {"none", "segments:4", "full", "segments:1", "every:4"};
    int64_t act[5];
    mo_run_env env;
    for (int c = 0; c < 5; c++) {
        mo_run_config rc;
        mo_config_defaults(&cfg, MO_CMD_RUN);
        const char *kv[] = {"--model", "resnet", "--preset", "resnet50", "--batch", "64", "--backend", "dry",
                            "--steps", "1", "--warmup", "0", "--ckpt", ckpts[c], NULL};
        for (int i = 0; kv[i]; i += 2) CHECK_OK(mo_config_set(&cfg, kv[i], kv[i + 1]));
        CHECK_OK(mo_config_finish(&cfg));
        CHECK_OK(mo_config_combination(&cfg, 0, &rc));
        if (c == 0) CHECK_OK(mo_run_env_init(&env, &rc));
        mo_csv_row row;
        CHECK_OK(mo_run_execute(&rc, &env, &row, NULL));
        CHECK(!strcmp(row.status, "ok"));
        act[c] = row.activation_peak_bytes;
    }
    printf("resnet50 batch 64 fp32 activation peaks (dry): none %.0f MiB, segments:4 %.0f, full %.0f, every:4 %.0f\n",
           act[0] / 1048576.0, act[1] / 1048576.0, act[2] / 1048576.0, act[4] / 1048576.0);
    CHECK(act[0] > act[1] && act[1] > act[2] && act[3] == act[0] && act[4] < act[0]);
}

// Device allocations one forward/backward of rc makes on the cpu backend
static uint64_t allocs_of(const mo_run_config *rc) {
    mo_allocator *a = NULL;
    mo_ctx *x = NULL;
    void *m = NULL;
    CHECK_OK(mo_allocator_create(&a, MO_ALLOC_CACHING, MO_BACKEND_CPU, 0, NULL));
    CHECK_OK(mo_ctx_create(&x, MO_BACKEND_CPU, a));
    CHECK_OK(mo_resnet_model.create(rc, x, &m));
    CHECK_OK(mo_resnet_model.set_synthetic_batch(m, rc->seed));
    mo_alloc_stats s0, s1;
    mo_allocator_stats(a, &s0);
    CHECK_OK(mo_resnet_forward_backward(m, NULL));
    mo_allocator_stats(a, &s1);
    mo_resnet_model.destroy(m);
    mo_ctx_destroy(x);
    mo_allocator_destroy(a);
    return s1.num_allocs - s0.num_allocs;
}

// The allocator's peak of one ResNet-50 batch-64 fp32 step with checkpointing ckpt on the dry backend
// (exact: test_dry_equals_cpu), under the MEMOPT_* knobs set now.
static int64_t resnet50_dry_peak(const char *ckpt) {
    mo_run_config rc;
    mo_run_env env;
    mo_config_defaults(&cfg, MO_CMD_RUN);
    const char *kv[] = {"--model", "resnet", "--preset", "resnet50", "--batch", "64", "--backend", "dry",
                        "--steps", "1", "--warmup", "0", "--ckpt", ckpt, NULL};
    for (int i = 0; kv[i]; i += 2) CHECK_OK(mo_config_set(&cfg, kv[i], kv[i + 1]));
    CHECK_OK(mo_config_finish(&cfg));
    CHECK_OK(mo_config_combination(&cfg, 0, &rc));
    CHECK_OK(mo_run_env_init(&env, &rc));
    mo_csv_row row;
    CHECK_OK(mo_run_execute(&rc, &env, &row, NULL));
    CHECK(!strcmp(row.status, "ok"));
    return row.peak_allocated_bytes;
}

// peak[0]: resnet50_dry_peak with knob=0, peak[1]: with knob unset (its default)
static void dry_peaks_off_on(const char *knob, const char *ckpt, int64_t peak[2]) {
    setenv(knob, "0", 1);
    peak[0] = resnet50_dry_peak(ckpt);
    unsetenv(knob);
    peak[1] = resnet50_dry_peak(ckpt);
}

// The shortcut's gradient added in the convolution's input gradient (MEMOPT_DGRAD_ADD, default 1) against
// a pass of its own (=0): in fp32 the same float additions (a + b either way), so the same gradient bits,
// basic and bottleneck blocks, with one allocation fewer a block (the knob took effect); in bf16 one
// allocation fewer a block too, and gradients within BF16_ADD_TOL (the sum is rounded once instead of
// twice: a bf16 ulp here and there); and
// at ResNet-50's shape (dry, exact) no higher a peak (the buffer it saves lives in backward, after the
// step's peak: the same peak, 5852 MiB, either way at batch 64).
#define BF16_ADD_TOL 3e-2
static void test_dgrad_add(void) {
    static const char *const depths[] = {"10", "14"};
    for (int d = 0; d < 2; d++) {
        mo_run_config rc;
        const char *kv[] = {"--layers", depths[d], "--batch", "8", "--ckpt", "segments:2", NULL};
        config_of(kv, &rc);
        size_t n0, n1;
        double l0, l1;
        setenv("MEMOPT_DGRAD_ADD", "0", 1);
        float *g0 = grads_of(&rc, &n0, &l0, NULL, NULL);
        const uint64_t a0 = allocs_of(&rc);
        unsetenv("MEMOPT_DGRAD_ADD");
        float *g1 = grads_of(&rc, &n1, &l1, NULL, NULL);
        const uint64_t a1 = allocs_of(&rc);
        CHECK_MSG(n0 == n1 && l0 == l1 && !memcmp(g0, g1, n0 * sizeof(float)),
                  "depth %s fp32: MEMOPT_DGRAD_ADD=0 and 1 give different gradients or loss", depths[d]);
        CHECK_MSG(a1 + 4 <= a0, "depth %s fp32: %llu allocations with the add in the convolution, %llu without "
                  "(4 blocks: 4 fewer at least)", depths[d], (unsigned long long)a1, (unsigned long long)a0);
        free(g0);
        free(g1);
        const char *kh[] = {"--layers", depths[d], "--batch", "8", "--precision", "bf16", NULL};
        config_of(kh, &rc);
        setenv("MEMOPT_DGRAD_ADD", "0", 1);
        g0 = grads_of(&rc, &n0, &l0, NULL, NULL);
        const uint64_t h0 = allocs_of(&rc);
        unsetenv("MEMOPT_DGRAD_ADD");
        g1 = grads_of(&rc, &n1, &l1, NULL, NULL);
        const uint64_t h1 = allocs_of(&rc);
        // 16 bits: the sum rounded once (the op's reference) instead of the gradient and then the sum
        const double rel = n0 == n1 ? test_rel_error(g1, g0, n0) : 1;
        printf("depth %s bf16: gradients with the add in the convolution against the pass: rel err %.2e\n", depths[d],
               rel);
        CHECK_MSG(rel <= BF16_ADD_TOL, "depth %s bf16: the add in the convolution moves the gradients by %.3e (> %.0e)",
                  depths[d], rel, BF16_ADD_TOL);
        CHECK_MSG(h1 + 4 <= h0, "depth %s bf16: %llu allocations with the add in the convolution, %llu without",
                  depths[d], (unsigned long long)h1, (unsigned long long)h0);
        free(g0);
        free(g1);
    }
    int64_t peak[2];
    dry_peaks_off_on("MEMOPT_DGRAD_ADD", "none", peak);
    printf("shortcut gradient in the input gradient's pass: fp32 gradients == a pass of its own; resnet50 batch 64 "
           "peak (dry) %.0f MiB against %.0f\n", peak[1] / 1048576.0, peak[0] / 1048576.0);
    CHECK(peak[1] > 0 && peak[1] <= peak[0]);
}

// A checkpointed segment's recompute with its last block's output kept from the forward (the default)
// against one that rebuilds it (MEMOPT_RECOMPUTE_TAIL=0): the same gradient, loss and running statistics
// bits (the kept output is what the rebuild gives), basic blocks (identity shortcuts at the tail) and
// bottleneck ones (downsampling ones), one allocation fewer per recomputed segment (the knob took effect);
// and at ResNet-50's segments:4 (dry, exact) no higher a peak.
static void test_recompute_tail(void) {
    static const char *const depths[] = {"10", "14"};
    static const char *const ckpts[] = {"full", "segments:2"};
    for (int d = 0; d < 2; d++)
        for (int c = 0; c < 2; c++) {
            mo_run_config rc;
            const char *kv[] = {"--layers", depths[d], "--batch", "8", "--ckpt", ckpts[c], NULL};
            config_of(kv, &rc);
            size_t n0, n1, nr0, nr1;
            double l0, l1;
            float *r0, *r1;
            setenv("MEMOPT_RECOMPUTE_TAIL", "0", 1);
            float *g0 = grads_of(&rc, &n0, &l0, &r0, &nr0);
            const uint64_t a0 = allocs_of(&rc);
            unsetenv("MEMOPT_RECOMPUTE_TAIL");
            float *g1 = grads_of(&rc, &n1, &l1, &r1, &nr1);
            const uint64_t a1 = allocs_of(&rc);
            const int segs = mo_ckpt_layout_segments(mo_ckpt_layout_of(rc.ckpt.kind, rc.ckpt.every, 4)); // 4 blocks
            CHECK_MSG(n0 == n1 && l0 == l1 && !memcmp(g0, g1, n0 * sizeof(float)) && nr0 == nr1 &&
                          !memcmp(r0, r1, nr0 * sizeof(float)),
                      "depth %s %s: the recompute's kept tail changes gradients, loss or running statistics",
                      depths[d], ckpts[c]);
            CHECK_MSG(segs > 0 && a1 + (uint64_t)segs == a0,
                      "depth %s %s: %llu allocations with the tail kept, %llu rebuilt (%d segments: one fewer each)",
                      depths[d], ckpts[c], (unsigned long long)a1, (unsigned long long)a0, segs);
            free(g0), free(g1), free(r0), free(r1);
        }
    int64_t peak[2];
    dry_peaks_off_on("MEMOPT_RECOMPUTE_TAIL", "segments:4", peak);
    printf("recompute with the segment's last output kept: the bits of a rebuild; resnet50 batch 64 segments:4 "
           "peak (dry) %.0f MiB against %.0f\n", peak[1] / 1048576.0, peak[0] / 1048576.0);
    CHECK(peak[1] > 0 && peak[1] <= peak[0]);
}

// Central differences of the tiny ResNet's loss (fp32, cpu; BN in training mode, so the loss is a function
// of the parameters and the batch) against its gradients, at parameters of every kind.
static void test_finite_differences(void) {
    for (int d = 0; d < 2; d++) {
        mo_run_config rc;
        const char *kv[] = {"--layers", d ? "14" : "10", NULL};
        config_of(kv, &rc);
        mo_allocator *a = NULL;
        mo_ctx *x = NULL;
        void *m = NULL;
        CHECK_OK(mo_allocator_create(&a, MO_ALLOC_CACHING, MO_BACKEND_CPU, 0, NULL));
        CHECK_OK(mo_ctx_create(&x, MO_BACKEND_CPU, a));
        CHECK_OK(mo_resnet_model.create(&rc, x, &m));
        CHECK_OK(mo_resnet_model.set_synthetic_batch(m, rc.seed));
        size_t n;
        CHECK_OK(mo_resnet_read(m, NULL, NULL, &n));
        float *p = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
        double loss;
        CHECK_OK(mo_resnet_forward_backward(m, &loss));
        CHECK_OK(mo_resnet_read(m, p, g, &n));
        // Directional derivatives: along a random unit direction v over a slice of the parameters,
        // (L(p + h v) - L(p - h v)) / 2h against g . v. One direction a slice (the whole array, the stem's
        // conv, the first and the second half, the FC), so every kind of parameter is in some; the many
        // ReLU / max-pool kinks of single elements average out along a direction.
        static const double slice[][2] = {{0, 1}, {0, 0.02}, {0, 0.5}, {0.5, 1}, {0.9, 1}};
        int checked = 0, good = 0;
        double worst = 0;
        float *q = malloc(n * sizeof(float));
        double *v = malloc(n * sizeof(double));
        for (int t = 0; t < 5; t++) {
            // The stem's conv alone, in the bottleneck net: the loss along it is kinked within +-h (max-pool
            // argmax and ReLU switches of its 16x16 maps: h 1e-3, 3e-4, 1e-4 give -0.045, 0.030, 0.155 for a
            // g.v of 0.152), so it is checked in the basic net only; the whole array and the first half cover
            // the stem here.
            if (d == 1 && t == 1) continue;
            uint64_t seed = 77 + (uint64_t)t;
            size_t i0 = (size_t)(slice[t][0] * n), i1 = (size_t)(slice[t][1] * n);
            double norm = 0, gv = 0;
            for (size_t i = 0; i < n; i++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                v[i] = i >= i0 && i < i1 ? ((seed >> 33) & 1 ? 1.0 : -1.0) : 0.0;
                norm += v[i] * v[i];
            }
            for (size_t i = 0; i < n; i++) { v[i] /= sqrt(norm); gv += v[i] * g[i]; }
            const double h = 3e-4;
            double lp, lm;
            for (size_t i = 0; i < n; i++) q[i] = (float)(p[i] + h * v[i]);
            CHECK_OK(mo_resnet_write(m, q));
            CHECK_OK(mo_resnet_forward_backward(m, &lp));
            for (size_t i = 0; i < n; i++) q[i] = (float)(p[i] - h * v[i]);
            CHECK_OK(mo_resnet_write(m, q));
            CHECK_OK(mo_resnet_forward_backward(m, &lm));
            double fd = (lp - lm) / (2 * h), e = fabs(fd - gv) / fmax(fmax(fabs(fd), fabs(gv)), 1e-2); // 1e-2: fp32's noise floor at h
            checked++;
            good += e < 5e-2;
            worst = fmax(worst, e);
            printf("  depth %s, params [%zu, %zu): g.v %.6g, finite difference %.6g\n", kv[1], i0, i1, gv, fd);
        }
        free(q);
        free(v);
        CHECK_OK(mo_resnet_write(m, p));
        CHECK_MSG(good == checked, "depth %s: %d/%d within 5e-2 (worst %.3g)", kv[1], good, checked, worst);
        printf("finite differences, depth %s: %d/%d within 5e-2 relative (worst %.3g)\n", kv[1], good, checked, worst);
        free(p); free(g);
        mo_resnet_model.destroy(m);
        mo_ctx_destroy(x);
        mo_allocator_destroy(a);
    }
}

// It learns the synthetic classes of its one batch: the loss falls.
static void test_trains(void) {
    mo_run_config rc;
    const char *kv[] = {"--steps", "30", "--lr", "1e-2", "--batch", "8", NULL};
    config_of(kv, &rc);
    mo_run_env env;
    CHECK_OK(mo_run_env_init(&env, &rc));
    mo_csv_row row;
    CHECK_OK(mo_run_execute(&rc, &env, &row, NULL));
    CHECK(!strcmp(row.status, "ok"));
    CHECK_MSG(row.loss_last < 0.5 * row.loss_first, "loss %.4f -> %.4f", row.loss_first, row.loss_last);
    printf("trains: loss %.4f -> %.4f over 30 steps\n", row.loss_first, row.loss_last);
}

// Under a cap too small for it: an out-of-memory row on both backends.
static void test_cap(void) {
    mo_run_config rc;
    const char *kv[] = {"--cap", "33MiB", "--hidden", "16", "--batch", "64", NULL};
    config_of(kv, &rc);
    mo_run_env env;
    CHECK_OK(mo_run_env_init(&env, &rc));
    mo_csv_row row;
    CHECK_OK(mo_run_execute(&rc, &env, &row, NULL));
    CHECK_MSG(!strcmp(row.status, "oom") && row.num_ooms >= 1, "%s: %s", row.status, row.detail);
    rc.backend = MO_BACKEND_DRY;
    CHECK_OK(mo_run_execute(&rc, &env, &row, NULL));
    CHECK_MSG(!strcmp(row.status, "oom"), "dry: %s", row.status);
}

// Out of memory at every allocation of a run (the k-th mo_alloc fails, k = 1..all, every
// MEMOPT_TEST_FAULT_STRIDE-th under the sanitizers): the row is oom with the allocator's message (or, a
// fault in the dry replay, ok without a prediction), nothing is left allocated, the next run is normal.
static void test_alloc_faults(void) {
    mo_run_config rc;
    const char *kv[] = {"--layers", "14", "--precision", "bf16", "--ckpt", "segments:2", "--accum", "2", "--batch", "8",
                        "--steps", "1", "--warmup", "1", NULL};
    config_of(kv, &rc);
    mo_run_env env;
    CHECK_OK(mo_run_env_init(&env, &rc));
    mo_csv_row row;
    mo_alloc_fail_at(0);
    CHECK_OK(mo_run_execute(&rc, &env, &row, NULL));
    uint64_t n = mo_alloc_calls();
    int64_t ref = row.peak_allocated_bytes;
    CHECK(!strcmp(row.status, "ok"));
    const char *e = getenv("MEMOPT_TEST_FAULT_STRIDE");
    uint64_t stride = e && atoi(e) > 1 ? (uint64_t)atoi(e) : 1;
    int tried = 0, good = 0;
    for (uint64_t k = 1; k <= n; k += stride) {
        mo_alloc_global g0, g1;
        mo_alloc_global_stats(&g0);
        mo_alloc_fail_at(k);
        CHECK_OK(mo_run_execute(&rc, &env, &row, NULL));
        mo_alloc_fail_at(0);
        mo_alloc_global_stats(&g1);
        int ok = (!strcmp(row.status, "oom") && strstr(row.detail, "injected fault")) ||
                 (!strcmp(row.status, "ok") && row.predicted_peak_bytes == -1);
        ok &= g1.allocated_bytes == g0.allocated_bytes && g1.reserved_bytes == g0.reserved_bytes &&
              g1.live_allocators == g0.live_allocators;
        tried++;
        good += ok;
        CHECK_MSG(ok, "fault at allocation %llu: row %s (%s), allocated %llu -> %llu", (unsigned long long)k, row.status,
                  row.detail, (unsigned long long)g0.allocated_bytes, (unsigned long long)g1.allocated_bytes);
        if (!ok) break;
    }
    CHECK_OK(mo_run_execute(&rc, &env, &row, NULL));
    CHECK(!strcmp(row.status, "ok") && row.peak_allocated_bytes == ref);
    printf("out of memory at allocation k of %llu (every %llu): %d/%d unwound cleanly\n", (unsigned long long)n,
           (unsigned long long)stride, good, tried);
}

int main(void) {
    test_params();
    test_refusals();
    test_checkpointing_bit_identical();
    test_accumulation();
    test_finite_differences();
    test_trains();
    test_cap();
    test_ckpt_saves();
    test_dgrad_add();
    test_recompute_tail();
    test_dry_equals_cpu();
    test_alloc_faults();
    return test_finish();
}
