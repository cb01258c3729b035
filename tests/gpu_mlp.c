// The MLP on the GPU (label gpu; skipped with the reason without one): every precision x checkpoint
// policy x accumulation through the run engine on cuda, with the dry backend's peak equal to the
// measured one to the byte and the first loss close to the cpu reference's; on the GPU,
// checkpointing is bit-identical to none and accumulation equals the full batch within 1e-5.
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

static mo_config cfg;

static void config_of(const char *backend, const char *const *kv, mo_run_config *rc) {
    mo_config_defaults(&cfg, MO_CMD_RUN);
    static const char *const base[] = {"--model", "mlp", "--layers", "4", "--hidden", "256", "--input", "128",
                                       "--classes", "64", "--batch", "64", "--steps", "2", "--warmup", "1", NULL};
    // MEMOPT_TEST_REDUCED (compute-sanitizer): the same 4 layers (every checkpoint policy still has segments),
    // steps and grid at a quarter of the width and batch (hidden 64, input 32, classes 16, batch 16: ~30x less work)
    static const char *const small[] = {"--model", "mlp", "--layers", "4", "--hidden", "64", "--input", "32",
                                        "--classes", "16", "--batch", "16", "--steps", "2", "--warmup", "1", NULL};
    static int reduced = -1;
    if (reduced < 0) reduced = test_reduced("the MLP width (hidden 64, batch 16)");
    const char *const *b0 = reduced ? small : base;
    for (int i = 0; b0[i]; i += 2) CHECK_OK(mo_config_set(&cfg, b0[i], b0[i + 1]));
    CHECK_OK(mo_config_set(&cfg, "--backend", backend));
    for (int i = 0; kv && kv[i]; i += 2) CHECK_OK(mo_config_set(&cfg, kv[i], kv[i + 1]));
    CHECK_OK(mo_config_finish(&cfg));
    CHECK_OK(mo_config_combination(&cfg, 0, rc));
}

static void test_engine_grid(void) {
    static const char *const precisions[] = {"fp32", "tf32", "fp16", "bf16"};
    static const double tol[] = {1e-4, 1e-2, 2e-2, 2e-2}; // the first loss against the cpu's, relative
    static const char *const ckpts[] = {"none", "full", "sqrt"};
    static const char *const accums[] = {"1", "2"};
    mo_run_env genv, cenv;
    int n = 0, exact = 0;
    for (int p = 0; p < 4; p++)
        for (int c = 0; c < 3; c++)
            for (int a = 0; a < 2; a++) {
                const char *kv[] = {"--precision", precisions[p], "--ckpt", ckpts[c], "--accum", accums[a], NULL};
                mo_run_config g, h;
                config_of("cuda", kv, &g);
                config_of("cpu", kv, &h);
                if (n == 0) {
                    CHECK_OK(mo_run_env_init(&genv, &g));
                    CHECK_OK(mo_run_env_init(&cenv, &h));
                }
                mo_csv_row rg, rh;
                CHECK_OK(mo_run_execute(&g, &genv, &rg, NULL));
                CHECK_OK(mo_run_execute(&h, &cenv, &rh, NULL));
                n++;
                CHECK_MSG(!strcmp(rg.status, "ok"), "%s %s accum %s: %s %s", precisions[p], ckpts[c], accums[a], rg.status,
                          rg.detail);
                exact += rg.predicted_peak_bytes == rg.peak_allocated_bytes;
                CHECK_MSG(rg.predicted_peak_bytes == rg.peak_allocated_bytes, "%s %s accum %s: cuda peak %lld, dry %lld",
                          precisions[p], ckpts[c], accums[a], (long long)rg.peak_allocated_bytes,
                          (long long)rg.predicted_peak_bytes);
                CHECK_MSG(fabs(rg.loss_first - rh.loss_first) <= tol[p] * fabs(rh.loss_first),
                          "%s %s accum %s: first loss cuda %.6f, cpu %.6f", precisions[p], ckpts[c], accums[a], rg.loss_first,
                          rh.loss_first);
                CHECK(rg.step_ms > 0 && rg.items_per_s > 0);
            }
    printf("cuda: %d/%d configurations with the dry peak exact\n", exact, n);
}

static float *grads_of(const mo_run_config *rc, size_t *n, double *loss) {
    mo_allocator *a = NULL;
    mo_ctx *x = NULL;
    void *m = NULL;
    const mo_model_ops *ops = &mo_mlp_model;
    CHECK_OK(mo_allocator_create(&a, MO_ALLOC_CACHING, MO_BACKEND_CUDA, 0, NULL));
    CHECK_OK(mo_ctx_create(&x, MO_BACKEND_CUDA, a));
    x->tf32 = rc->precision == MO_PREC_TF32;
    CHECK_OK(ops->create(rc, x, &m));
    CHECK_OK(ops->set_synthetic_batch(m, rc->seed));
    CHECK_OK(mo_mlp_forward_backward(m));
    mo_model_step_info info;
    ops->info(m, &info);
    *loss = info.loss;
    CHECK_OK(mo_mlp_read(m, NULL, NULL, n));
    float *g = malloc(*n * sizeof(float));
    CHECK_OK(mo_mlp_read(m, NULL, g, n));
    ops->destroy(m);
    mo_ctx_destroy(x);
    mo_allocator_destroy(a);
    return g;
}

static void test_ckpt_and_accum(void) {
    static const char *const precisions[] = {"fp32", "tf32", "fp16", "bf16"};
    for (int p = 0; p < 4; p++) {
        mo_run_config rc;
        const char *kv0[] = {"--precision", precisions[p], NULL};
        config_of("cuda", kv0, &rc);
        size_t n0, n;
        double l0, l;
        float *g0 = grads_of(&rc, &n0, &l0);
        static const char *const ckpts[] = {"full", "every:3", "sqrt", "segments:2"};
        for (int c = 0; c < 4; c++) {
            const char *kv[] = {"--precision", precisions[p], "--ckpt", ckpts[c], NULL};
            config_of("cuda", kv, &rc);
            float *g = grads_of(&rc, &n, &l);
            CHECK_MSG(n == n0 && l == l0 && !memcmp(g, g0, n * sizeof(float)), "cuda %s %s: not bit-identical to none",
                      precisions[p], ckpts[c]);
            free(g);
        }
        if (p == 0) { // accumulation, fp32
            double gmax = 0;
            for (size_t i = 0; i < n0; i++) gmax = fmax(gmax, fabs(g0[i]));
            const char *kv[] = {"--accum", "4", NULL};
            config_of("cuda", kv, &rc);
            float *g = grads_of(&rc, &n, &l);
            double worst = 0;
            for (size_t i = 0; i < n && i < n0; i++) worst = fmax(worst, fabs((double)g[i] - g0[i]));
            CHECK_MSG(worst <= 1e-5 * gmax, "cuda accum 4: max |diff| %.3g (max |g| %.3g)", worst, gmax);
            free(g);
        }
        free(g0);
    }
}

int main(void) {
    test_require_gpu();
    test_engine_grid();
    test_ckpt_and_accum();
    return test_finish();
}
