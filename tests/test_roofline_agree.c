// The planner's roofline from the cost trace against the hand-written op list it replaces
// (mo_roofline_step_handwritten), over a grid of shapes x precision x attention x checkpointing x
// accumulation on the H200's rates with the default efficiencies; it prints every difference. Where
// the two describe the same kernels (no recompute, fp32 / tf32: no fused epilogues) they must agree to
// rounding; elsewhere the trace is what runs (a recompute segment's last block skips its last GEMM
// and residual add; the 16-bit step fuses the residual adds and the GELU backward into its GEMMs; fp16
// checks its gradients) and the difference is reported, bounded at 20%.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench/planner.h"
#include "tests/testlib.h"

int main(void) {
    mo_gpu_catalog cat;
    if (!CHECK_OK(mo_gpu_catalog_load(NULL, &cat))) return test_finish();
    const mo_gpu_spec *g = mo_gpu_catalog_find(&cat, "h200-sxm");
    if (!CHECK(g != NULL)) return test_finish();
    mo_config *cf = malloc(sizeof *cf);
    mo_config_defaults(cf, MO_CMD_RUN);
    mo_plan_calib cal;
    mo_plan_calib_defaults(&cal);
    static const mo_precision P[] = {MO_PREC_FP32, MO_PREC_TF32, MO_PREC_BF16, MO_PREC_FP16};
    static const mo_ckpt K[] = {{MO_CKPT_NONE, 0}, {MO_CKPT_SELECTIVE, 0}, {MO_CKPT_FULL, 0}, {MO_CKPT_EVERY, 2}, {MO_CKPT_SQRT, 0}};
    static const int A[] = {1, 2, 4};
    struct { int L, C, H, T, B, V; } shapes[] = {{12, 768, 12, 1024, 8, 50257}, {4, 256, 4, 256, 8, 8192}, {24, 1024, 16, 1024, 4, 50257}};
    int n = 0;
    double worst = 0, sum = 0;
    printf("%-28s %-9s %-5s %-8s %3s %10s %10s %8s  %8s %8s %8s\n", "shape", "prec", "attn", "ckpt", "acc", "old ms", "trace ms", "diff",
           "dgemm", "dmem", "dkern");
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int p = 0; p < 4; p++)
            for (int at = 0; at < 2; at++)
                for (int k = 0; k < 5; k++)
                    for (int a = 0; a < 3; a++) {
                        mo_run_config rc = cf->base;
                        rc.layers = shapes[si].L; rc.hidden = shapes[si].C; rc.heads = shapes[si].H; rc.seq = shapes[si].T;
                        rc.batch = shapes[si].B; rc.vocab = shapes[si].V; rc.preset[0] = 0;
                        rc.precision = P[p]; rc.attn = at ? MO_ATTN_FUSED : MO_ATTN_MATERIALIZED; rc.ckpt = K[k]; rc.accum = A[a];
                        rc.backend = MO_BACKEND_DRY;
                        if (mo_run_config_validate(&rc) != MO_OK) { mo_clear_error(); continue; }
                        mo_roofline o, t;
                        mo_roofline_step_handwritten(&rc, g, &o);
                        mo_roofline_step(&rc, g, &t);
                        double mo = mo_plan_step_ms(&o, &cal, rc.precision), mt = mo_plan_step_ms(&t, &cal, rc.precision);
                        double d = mt / mo - 1;
                        char ck[24], sh[40];
                        snprintf(sh, sizeof sh, "L%d C%d T%d B%d", rc.layers, rc.hidden, rc.seq, rc.batch);
                        printf("%-28s %-9s %-5s %-8s %3d %10.3f %10.3f %+7.2f%%  %+7.2f%% %+7.2f%% %+7.2f%%\n", sh, mo_precision_name(rc.precision),
                               at ? "fused" : "mat", mo_ckpt_format(rc.ckpt, ck, sizeof ck), rc.accum, mo, mt, 100 * d,
                               100 * (t.gemm_s / o.gemm_s - 1), 100 * (t.mem_s / o.mem_s - 1),
                               o.kern_s > 0 ? 100 * (t.kern_s / o.kern_s - 1) : 0.0);
                        n++;
                        if (rc.ckpt.kind == MO_CKPT_NONE && (rc.precision == MO_PREC_FP32 || rc.precision == MO_PREC_TF32))
                            CHECK_MSG(fabs(d) < 1e-9 && o.kernels == t.kernels, "same kernels, different time: %+.3g%%, %d vs %d ops",
                                      100 * d, o.kernels, t.kernels);
                        CHECK_MSG(fabs(d) < 0.20, "trace %.3f ms vs hand-written %.3f", mt, mo);
                        sum += fabs(d);
                        if (fabs(d) > fabs(worst)) worst = d;
                    }
    printf("\n%d configurations: mean |diff| %.2f%%, worst %+.2f%%\n", n, 100 * sum / n, 100 * worst);
    CHECK(n == 360);
    mo_gpu_catalog_free(&cat);
    free(cf);
    return test_finish();
}
