// The MLP on the GPU (label gpu; skipped with the reason without one): every precision x checkpoint
// policy x accumulation through the run engine on cuda, with the dry backend's peak equal to the
// measured one to the byte and the first loss close to the cpu reference's; on the GPU,
// checkpointing is bit-identical to none and accumulation equals the full batch within 1e-5.
// Split (--tp/--pp, models/mlp_split.c): the ranks as threads on one GPU (comm local) and, where the
// build has NCCL and the machine the GPUs, one rank per GPU (comm nccl): through the engine every
// split row is ok with its dry prediction equal to the cuda peak (the largest rank's) and each rank's
// dry peaks equal to its cuda peaks, the first loss close to the cpu split's; the gathered gradients of
// one forward/backward within 1e-4 (fp32; tf32/16-bit bounds below) of the unsplit cpu model's, the
// replicas bit-identical, two runs the same bits, and nccl the same bits as local.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench/config.h"
#include "bench/csv.h"
#include "bench/run_engine.h"
#include "kernels/device.h"
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
    // MEMOPT_TEST_REDUCED=2 (racecheck, initcheck): each precision once, the policies and accumulations in turn
    const int diag = test_reduced_level() >= 2;
    for (int p = 0; p < 4; p++)
        for (int c = 0; c < 3; c++)
            for (int a = 0; a < 2; a++) {
                if (diag && (c != p % 3 || a != p % 2)) continue;
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

static float *grads_on(mo_backend_kind be, const mo_run_config *rc, size_t *n, double *loss) {
    mo_allocator *a = NULL;
    mo_ctx *x = NULL;
    void *m = NULL;
    const mo_model_ops *ops = &mo_mlp_model;
    CHECK_OK(mo_allocator_create(&a, MO_ALLOC_CACHING, be, 0, NULL));
    CHECK_OK(mo_ctx_create(&x, be, a));
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
static float *grads_of(const mo_run_config *rc, size_t *n, double *loss) { return grads_on(MO_BACKEND_CUDA, rc, n, loss); }
static float *grads_of_cpu(const mo_run_config *rc, size_t *n, double *loss) { return grads_on(MO_BACKEND_CPU, rc, n, loss); }

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

// ---- split --------------------------------------------------------------------------------------

// Split rows through the engine: cuda ok, dry prediction exact, the first loss near the cpu split's.
static void test_split_engine(void) {
    static const struct { const char *tp, *pp, *precision, *ckpt, *accum; double tol; } grid[] = {
        {"2", "1", "fp32", "none", "1", 1e-4},  {"4", "1", "fp32", "full", "2", 1e-4},
        {"1", "2", "fp32", "none", "2", 1e-4},  {"1", "4", "fp32", "sqrt", "4", 1e-4},
        {"2", "2", "fp32", "segments:2", "2", 1e-4}, {"2", "2", "tf32", "none", "2", 1e-2},
        {"2", "2", "bf16", "full", "2", 2e-2},  {"4", "1", "fp16", "none", "1", 2e-2},
        {"1", "2", "bf16", "every:1", "4", 2e-2},
    };
    mo_run_env genv, cenv;
    int n = 0, exact = 0;
    for (size_t i = 0; i < sizeof grid / sizeof grid[0]; i++) {
        if (test_reduced_level() >= 2 && i % 3 != 0) continue; // tp 2, tp 1 x pp 4, tp 4 fp16
        const char *kv[] = {"--tp", grid[i].tp, "--pp", grid[i].pp, "--precision", grid[i].precision, "--ckpt", grid[i].ckpt,
                            "--accum", grid[i].accum, NULL};
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
        CHECK_MSG(!strcmp(rg.status, "ok") && !strcmp(rh.status, "ok"), "split tp %s pp %s %s: cuda %s %s, cpu %s", grid[i].tp,
                  grid[i].pp, grid[i].precision, rg.status, rg.detail, rh.status);
        exact += rg.predicted_peak_bytes == rg.peak_allocated_bytes;
        CHECK_MSG(rg.predicted_peak_bytes == rg.peak_allocated_bytes, "split tp %s pp %s %s %s: cuda peak %lld, dry %lld",
                  grid[i].tp, grid[i].pp, grid[i].precision, grid[i].ckpt, (long long)rg.peak_allocated_bytes,
                  (long long)rg.predicted_peak_bytes);
        // The cuda and cpu splits hold the same bytes (one allocator, the same requests).
        CHECK_MSG(rg.peak_allocated_bytes == rh.peak_allocated_bytes, "split tp %s pp %s: cuda peak %lld, cpu %lld", grid[i].tp,
                  grid[i].pp, (long long)rg.peak_allocated_bytes, (long long)rh.peak_allocated_bytes);
        CHECK_MSG(fabs(rg.loss_first - rh.loss_first) <= grid[i].tol * fabs(rh.loss_first),
                  "split tp %s pp %s %s: first loss cuda %.6f, cpu %.6f", grid[i].tp, grid[i].pp, grid[i].precision,
                  rg.loss_first, rh.loss_first);
        CHECK(rg.step_ms > 0 && rg.comm_modelled == 1);
    }
    printf("cuda split rows: %d/%d with the dry peak exact\n", exact, n);
}

// One forward/backward split over tp x pp ranks on backend be with comm; gathered into the unsplit
// layout (malloc'ed, *n floats). Every rank's peaks into st (W <= 8) when non-NULL.
static float *split_grads(const mo_run_config *rc0, int tp, int pp, mo_backend_kind be, mo_comm_kind comm, double *loss,
                          int *replicas, mo_alloc_stats *st) {
    const mo_model_split_ops *so = mo_mlp_model.split;
    mo_run_config rc = *rc0;
    rc.tp = tp;
    rc.pp = pp;
    mo_split_config sc;
    memset(&sc, 0, sizeof sc);
    sc.tp = tp; sc.pp = pp; sc.comm = comm; sc.backend = be; sc.alloc = MO_ALLOC_CACHING;
    void *sp = NULL;
    if (!CHECK_OK(so->create(&rc, &sc, &sp))) return NULL;
    size_t n = mo_mlp_model.num_params(&rc);
    float *g = malloc(n * sizeof(float));
    CHECK_OK(so->set_synthetic_batch(sp, rc.seed));
    CHECK_OK(mo_mlp_split_forward_backward(sp));
    mo_model_step_info info;
    so->info(sp, &info);
    *loss = info.loss;
    if (st)
        for (int r = 0; r < so->world(sp) && r < 8; r++) mo_allocator_stats(so->allocator(sp, r), &st[r]);
    if (be == MO_BACKEND_DRY) *replicas = 1;
    else CHECK_OK(mo_mlp_split_gather(sp, 1, g, replicas));
    so->destroy(sp);
    return g;
}

static double worst_rel(const mo_run_config *rc, const float *got, const float *want) {
    size_t H = (size_t)rc->hidden, L = (size_t)rc->layers, K = (size_t)rc->classes;
    size_t sz[10] = {H * (size_t)rc->input, H, L * H, L * H, L * 4 * H * H, L * 4 * H, L * H * 4 * H, L * H, K * H, K};
    double worst = 0;
    size_t off = 0;
    for (int p = 0; p < 10; p++) {
        double e = test_rel_error(got + off, want + off, sz[p]);
        if (!(e <= worst)) worst = e;
        off += sz[p];
    }
    return worst;
}

// Gradients of the split on cuda against the unsplit model: fp32 against the cpu's (gpu_gpt's GPU
// tolerance, 1e-4 per tensor); tf32 and 16 bits against the cuda unsplit model of the same precision
// (the split regroups the sums; 16 bits: one ulp per tp all-reduce, test_mlp_split's bounds widened
// for the GPU kernels). Per-rank dry peaks equal cuda's; two runs give the same bits; nccl the same
// bits as local where there are the GPUs.
static void test_split_grads(void) {
    static const struct { int tp, pp; const char *precision, *ckpt, *accum; double tol; } grid[] = {
        {2, 1, "fp32", "none", "1", 1e-4}, {4, 1, "fp32", "full", "2", 1e-4}, {1, 2, "fp32", "none", "2", 1e-4},
        {1, 4, "fp32", "sqrt", "4", 1e-4}, {2, 2, "fp32", "every:1", "2", 1e-4}, {2, 2, "tf32", "none", "2", 2e-2},
        {2, 2, "bf16", "none", "2", 5e-2}, {2, 2, "fp16", "full", "2", 1e-2}, {1, 2, "bf16", "none", "2", 1e-3},
    };
    int ndev = 0;
    CHECK_OK(mo_device_count(&ndev));
    for (size_t i = 0; i < sizeof grid / sizeof grid[0]; i++) {
        const char *kv[] = {"--precision", grid[i].precision, "--ckpt", grid[i].ckpt, "--accum", grid[i].accum, NULL};
        const char *kv0[] = {"--precision", grid[i].precision, "--accum", grid[i].accum, NULL};
        mo_run_config rc, plain;
        config_of("cuda", kv, &rc);
        int fp32 = !strcmp(grid[i].precision, "fp32");
        config_of(fp32 ? "cpu" : "cuda", kv0, &plain);
        size_t n0;
        double l0, lg, lg2, ld;
        float *g0 = fp32 ? grads_of_cpu(&plain, &n0, &l0) : grads_of(&plain, &n0, &l0);
        mo_alloc_stats sg[8], sd[8];
        int rep = 0, rep2 = 0, repd = 0;
        int W = grid[i].tp * grid[i].pp;
        float *g = split_grads(&rc, grid[i].tp, grid[i].pp, MO_BACKEND_CUDA, MO_COMM_LOCAL, &lg, &rep, sg);
        float *g2 = split_grads(&rc, grid[i].tp, grid[i].pp, MO_BACKEND_CUDA, MO_COMM_LOCAL, &lg2, &rep2, NULL);
        float *gd = split_grads(&rc, grid[i].tp, grid[i].pp, MO_BACKEND_DRY, MO_COMM_LOCAL, &ld, &repd, sd);
        if (g && g2 && gd && g0) {
            double e = worst_rel(&rc, g, g0), le = fabs(lg - l0) / fabs(l0);
            printf("  cuda tp %d pp %d %s %s accum %s: loss %.7f (%s unsplit %.7f), worst gradient rel %.2e (tol %.0e)\n",
                   grid[i].tp, grid[i].pp, grid[i].precision, grid[i].ckpt, grid[i].accum, lg, fp32 ? "cpu" : "cuda", l0, e,
                   grid[i].tol);
            CHECK_MSG(e <= grid[i].tol && le <= grid[i].tol, "cuda tp %d pp %d %s: gradients off by %.3e, loss by %.3e",
                      grid[i].tp, grid[i].pp, grid[i].precision, e, le);
            CHECK_MSG(rep && rep2, "cuda tp %d pp %d %s: a replicated tensor differs between ranks", grid[i].tp, grid[i].pp,
                      grid[i].precision);
            CHECK_MSG(!memcmp(g, g2, n0 * sizeof(float)) && lg == lg2, "cuda tp %d pp %d %s: two runs differ", grid[i].tp,
                      grid[i].pp, grid[i].precision);
            for (int r = 0; r < W; r++)
                CHECK_MSG(sg[r].peak_allocated_bytes == sd[r].peak_allocated_bytes &&
                              sg[r].peak_reserved_bytes == sd[r].peak_reserved_bytes,
                          "cuda tp %d pp %d %s rank %d: cuda peak %llu/%llu, dry %llu/%llu", grid[i].tp, grid[i].pp,
                          grid[i].precision, r, (unsigned long long)sg[r].peak_allocated_bytes,
                          (unsigned long long)sg[r].peak_reserved_bytes, (unsigned long long)sd[r].peak_allocated_bytes,
                          (unsigned long long)sd[r].peak_reserved_bytes);
#ifdef MEMOPT_HAVE_NCCL
            if (ndev >= W) {
                double ln;
                int repn = 0;
                float *gn = split_grads(&rc, grid[i].tp, grid[i].pp, MO_BACKEND_CUDA, MO_COMM_NCCL, &ln, &repn, NULL);
                if (gn)
                    CHECK_MSG(!memcmp(gn, g, n0 * sizeof(float)) && ln == lg && repn,
                              "nccl tp %d pp %d %s: not the same bits as local", grid[i].tp, grid[i].pp, grid[i].precision);
                free(gn);
            } else {
                printf("  nccl tp %d pp %d: needs %d GPUs, %d here: skipped\n", grid[i].tp, grid[i].pp, W, ndev);
            }
#else
            if (i == 0) printf("  nccl: not built (no NCCL found at configure time): skipped\n");
#endif
        }
        free(g0); free(g); free(g2); free(gd);
    }
}

int main(void) {
    test_require_gpu();
    test_engine_grid();
    test_ckpt_and_accum();
    test_split_engine();
    test_split_grads();
    return test_finish();
}
