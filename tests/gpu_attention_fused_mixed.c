// GPU tests of the 16-bit fused attention (attention_fused_mixed.h): the cuda forward and backward against
// the cpu reference on fresh random 16-bit data (the seed is printed; MEMOPT_TEST_SEED replays it), for
// bf16 and fp16, GPT-2-small shapes, odd T (77, 129, 130, 65, 100, 200) and head sizes 8..128. Outputs
// are poisoned with NaN first; every cuda op runs twice and the two results must be the same bits
// (determinism). The backward gets the cpu forward's out and lse on both sides, so each op is tested on
// its own. The fused out and dqkv are also compared with the 16-bit materialized op on the GPU
// (mo_attention_forward_mixed / _backward_mixed): same math, other rounding points, looser tolerance.
// Every comparison prints max abs error and relative L2 error, per tensor (out, lse, dq, dk, dv) and
// shape. At the end, timings (printed, never asserted): median of 10 runs (cudaEvent) of forward and of
// backward at B 8, T 1024, C 768, NH 12 (GPT-2 124M, one layer), bf16 and fp16, and at HS 128.
//
// Tolerances (relative L2, in fp32 after converting the 16-bit results):
//  - against the cpu reference: bf16 2e-3, fp16 5e-4. The reference rounds at the same points (P per
//    64-key tile against the same running max, dS, the outputs), so the two differ only where the GPU's
//    fp32 values (tensor-core sums in another order, ex2.approx: about 1e-6 relative) and the
//    reference's double values round to adjacent 16-bit numbers: a fraction of about 1e-3 of the
//    elements, off by one ulp (2^-8..2^-7 relative in bf16), so about 1e-4 expected (the host emulation
//    of the kernels measured 1e-5..3e-5). One ulp on a quarter of the elements would give about the
//    tolerance: far above what such flips give, and far below a wrong mask, transpose, tile or scale
//    (O(1)) or a misplaced rounding point (rounding P against the final row max instead: 6% of outputs
//    off by one ulp, about 1e-3 in bf16).
//  - lse (fp32, from unrounded probabilities): 1e-5 relative L2 (fp32 sums, ex2.approx, log in double).
//  - against the materialized 16-bit op: bf16 2e-2, fp16 5e-3. That path rounds the scaled scores to
//    16 bits (about 2^-9 |s| absolute in every exponent), normalizes before rounding att, and keeps datt
//    and dpreatt in 16 bits. The cpu references of the two differ by at most 5.8e-3 (bf16) and 7.0e-4
//    (fp16) over 150 seeds at the small shapes below (test_attention_fused_mixed checks these tolerances
//    there on every run), and by 5.2e-3..5.9e-3 / 6.5e-4..7.4e-4 at GPT-2 T = 1024.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention_fused_mixed.h"
#include "kernels/matmul_mixed.h"
#include "kernels/ops.h"
#include "kernels/ops_mixed_gemm.h"
#include "strategies/alloc.h"
#include "tests/testlib.h"

static mo_allocator *ga, *ha;
static mo_ctx *gc, *hc;
static test_rng rng;

static double tol_ref(mo_dtype dt) { return dt == MO_BF16 ? 2e-3 : 5e-4; }
static double tol_mat(mo_dtype dt) { return dt == MO_BF16 ? 2e-2 : 5e-3; }
#define LSE_TOL 1e-5

static void *hmem(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) { fprintf(stderr, "out of host memory\n"); exit(1); }
    return p;
}
static float *fnew(size_t n) { return hmem(n * sizeof(float)); }
static uint16_t *hnew16(size_t n) { return hmem(n * sizeof(uint16_t)); }
static uint16_t *hrand16(mo_dtype dt, size_t n, float lo, float hi) {
    float *f = fnew(n);
    test_fill_uniform(&rng, f, n, lo, hi);
    uint16_t *h = hnew16(n);
    mo_convert_from_f32(dt, h, f, n);
    free(f);
    return h;
}
#include "tests/devmem.h" // dnew, dfree, h2d, d2h, dup_dev (on gc)
static uint16_t nan16(mo_dtype dt) { return dt == MO_BF16 ? 0x7FC0 : 0x7E00; }
static void dpoison16(mo_dtype dt, void *d, size_t n) {
    uint16_t *h = hnew16(n);
    for (size_t i = 0; i < n; i++) h[i] = nan16(dt);
    h2d(d, h, n * sizeof(uint16_t));
    free(h);
}
static void dpoisonf(float *d, size_t n) {
    float *h = fnew(n);
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    h2d(d, h, n * sizeof(float));
    free(h);
}

static double max_abs(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        m = fmax(m, fabs((double)a[i] - b[i]));
    }
    return m;
}
static void checkf(const char *label, const float *got, const float *want, size_t n, double tol, int line) {
    printf("    max abs err %.3e  ", max_abs(got, want, n));
    test_check_rel(got, want, n, tol, __FILE__, line, label);
}
// 16-bit got / want, compared in fp32; part >= 0 picks q, k or v (columns part*C..) of a (rows, 3C) tensor
static void check16(const char *label, mo_dtype dt, const uint16_t *got, const uint16_t *want, size_t rows, int C,
                    int part, double tol, int line) {
    const size_t n = rows * C;
    float *g = fnew(n), *w = fnew(n);
    for (size_t r = 0; r < rows; r++) {
        const size_t src = part < 0 ? r * C : r * 3 * C + (size_t)part * C;
        mo_convert_to_f32(dt, g + r * C, got + src, C);
        mo_convert_to_f32(dt, w + r * C, want + src, C);
    }
    checkf(label, g, w, n, tol, line);
    free(g);
    free(w);
}
static void check_dqkv(const char *what, mo_dtype dt, const uint16_t *got, const uint16_t *want, size_t rows, int C,
                       double tol, int line) {
    static const char *names[3] = {"dq", "dk", "dv"};
    char label[160];
    for (int p = 0; p < 3; p++) {
        snprintf(label, sizeof label, "%s %s", what, names[p]);
        check16(label, dt, got, want, rows, C, p, tol, line);
    }
}
static void check_same(const char *label, const void *a, const void *b, size_t bytes) {
    CHECK_MSG(memcmp(a, b, bytes) == 0, "%s: two cuda runs differ (not deterministic)", label);
}

// ---------------------------------------------------------------------------------------------
typedef struct { int B, T, C, NH; const char *what; } at_shape;

static void gpu_fused(mo_dtype dt, const at_shape *s) {
    const int B = test_reduced_batch(s->B), T = s->T, C = s->C, NH = s->NH;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nl = (size_t)B * NH * T;
    const size_t rows = (size_t)B * T, e = sizeof(uint16_t);
    const char *pn = mo_dtype_name(dt);
    printf("attention_fused_mixed %s %s: B=%d T=%d C=%d NH=%d (HS %d)\n", pn, s->what, B, T, C, NH, C / NH);
    uint16_t *qkv = hrand16(dt, nqkv, -2, 2), *dout = hrand16(dt, nout, -1, 1);
    uint16_t *out_ref = hnew16(nout), *dqkv_ref = hnew16(nqkv);
    float *lse_ref = fnew(nl);
    CHECK_OK(mo_attention_fused_forward_mixed(hc, dt, out_ref, lse_ref, qkv, B, T, C, NH));
    CHECK_OK(mo_attention_fused_backward_mixed(hc, dt, dqkv_ref, dout, qkv, out_ref, lse_ref, B, T, C, NH));

    void *d_qkv = dup_dev(qkv, nqkv * e), *d_dout = dup_dev(dout, nout * e), *d_out = dnew(nout * e);
    float *d_lse = dnew(nl * sizeof(float));
    void *d_out_in = dup_dev(out_ref, nout * e), *d_dqkv = dnew(nqkv * e);
    float *d_lse_in = dup_dev(lse_ref, nl * sizeof(float));
    uint16_t *got_out[2], *got_dqkv[2];
    float *got_lse[2];
    for (int r = 0; r < 2; r++) { got_out[r] = hnew16(nout); got_dqkv[r] = hnew16(nqkv); got_lse[r] = fnew(nl); }
    char label[160];

    for (int r = 0; r < 2; r++) {
        dpoison16(dt, d_out, nout);
        dpoisonf(d_lse, nl);
        CHECK_OK(mo_attention_fused_forward_mixed(gc, dt, d_out, d_lse, d_qkv, B, T, C, NH));
        d2h(got_out[r], d_out, nout * e);
        d2h(got_lse[r], d_lse, nl * sizeof(float));
    }
    snprintf(label, sizeof label, "%s %s out", pn, s->what);
    check16(label, dt, got_out[0], out_ref, rows, C, -1, tol_ref(dt), __LINE__);
    check_same(label, got_out[0], got_out[1], nout * e);
    snprintf(label, sizeof label, "%s %s lse (fp32)", pn, s->what);
    checkf(label, got_lse[0], lse_ref, nl, LSE_TOL, __LINE__);
    check_same(label, got_lse[0], got_lse[1], nl * sizeof(float));

    for (int r = 0; r < 2; r++) {
        dpoison16(dt, d_dqkv, nqkv);
        CHECK_OK(mo_attention_fused_backward_mixed(gc, dt, d_dqkv, d_dout, d_qkv, d_out_in, d_lse_in, B, T, C, NH));
        d2h(got_dqkv[r], d_dqkv, nqkv * e);
    }
    snprintf(label, sizeof label, "%s %s", pn, s->what);
    if (T > 1) {
        check_dqkv(label, dt, got_dqkv[0], dqkv_ref, rows, C, tol_ref(dt), __LINE__);
    } else {
        // T = 1: P = 1, dv = dout exactly; dq, dk = scale * (dP - D) * ... are rounding noise around 0
        int ok = 1;
        double worst = 0;
        for (size_t r = 0; r < rows; r++)
            for (int i = 0; i < C; i++) {
                ok &= got_dqkv[0][r * 3 * C + 2 * C + i] == dout[r * C + i];
                ok &= got_out[0][r * C + i] == qkv[r * 3 * C + 2 * C + i];
                worst = fmax(worst, fabs(mo_mmg_load(dt, got_dqkv[0], r * 3 * C + i)));
                worst = fmax(worst, fabs(mo_mmg_load(dt, got_dqkv[0], r * 3 * C + C + i)));
            }
        printf("    T = 1: out == v, dv == dout: %s; max |dq|, |dk| %.3e\n", ok ? "yes" : "NO", worst);
        CHECK_MSG(ok, "%s: T = 1 needs out == v and dv == dout exactly", label);
        CHECK_MSG(worst < 1e-5, "%s: T = 1: |dq|, |dk| up to %.3g, not rounding noise", label, worst);
    }
    snprintf(label, sizeof label, "%s %s dqkv", pn, s->what);
    check_same(label, got_dqkv[0], got_dqkv[1], nqkv * e);

    // against the 16-bit materialized op on the GPU
    if (T > 1) {
        const size_t natt = (size_t)B * NH * T * T;
        void *d_outm = dnew(nout * e), *d_att = dnew(natt * e), *d_dqkvm = dnew(nqkv * e);
        uint16_t *outm = hnew16(nout), *dqkvm = hnew16(nqkv);
        CHECK_OK(mo_attention_forward_mixed(gc, dt, d_outm, d_att, d_qkv, B, T, C, NH));
        CHECK_OK(mo_attention_backward_mixed(gc, dt, d_dqkvm, d_dout, d_qkv, d_att, B, T, C, NH));
        d2h(outm, d_outm, nout * e);
        d2h(dqkvm, d_dqkvm, nqkv * e);
        snprintf(label, sizeof label, "%s %s out vs materialized", pn, s->what);
        check16(label, dt, got_out[0], outm, rows, C, -1, tol_mat(dt), __LINE__);
        snprintf(label, sizeof label, "%s %s vs materialized", pn, s->what);
        check_dqkv(label, dt, got_dqkv[0], dqkvm, rows, C, tol_mat(dt), __LINE__);
        dfree(d_outm); dfree(d_att); dfree(d_dqkvm);
        free(outm); free(dqkvm);
    }

    for (int r = 0; r < 2; r++) { free(got_out[r]); free(got_dqkv[r]); free(got_lse[r]); }
    dfree(d_qkv); dfree(d_dout); dfree(d_out); dfree(d_lse); dfree(d_out_in); dfree(d_dqkv); dfree(d_lse_in);
    free(qkv); free(dout); free(out_ref); free(dqkv_ref); free(lse_ref);
}

// Misaligned tensors are refused on cuda (the kernels use 16-byte cp.async)
static void gpu_alignment(void) {
    printf("alignment check\n");
    const int B = 1, T = 8, C = 64, NH = 1;
    char *d = dnew((size_t)B * T * 3 * C * 2 + 64);
    float *lse = dnew((size_t)B * NH * T * sizeof(float));
    CHECK(mo_attention_fused_forward_mixed(gc, MO_BF16, d + 2, lse, d + 16, B, T, C, NH) == MO_ERR_INVALID);
    CHECK(mo_attention_fused_backward_mixed(gc, MO_F16, d, d + 16, d + 2, d, lse, B, T, C, NH) == MO_ERR_INVALID);
    mo_clear_error();
    dfree(d);
    dfree(lse);
}

// ---------------------------------------------------------------------------------------------
static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
#define NRUNS 10

static void time_shape(mo_dtype dt, int B, int T, int C, int NH, int with_materialized) {
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nl = (size_t)B * NH * T;
    const size_t e = sizeof(uint16_t);
    const int HS = C / NH;
    uint16_t *qkv = hrand16(dt, nqkv, -2, 2), *dout = hrand16(dt, nout, -1, 1);
    void *d_qkv = dup_dev(qkv, nqkv * e), *d_dout = dup_dev(dout, nout * e), *d_out = dnew(nout * e);
    void *d_dqkv = dnew(nqkv * e);
    float *d_lse = dnew(nl * sizeof(float));
    mo_timer tm;
    CHECK_OK(mo_timer_init(gc, &tm));
    double f[NRUNS], b[NRUNS];
    for (int r = 0; r < 2; r++) { // warm-up
        CHECK_OK(mo_attention_fused_forward_mixed(gc, dt, d_out, d_lse, d_qkv, B, T, C, NH));
        CHECK_OK(mo_attention_fused_backward_mixed(gc, dt, d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, C, NH));
    }
    for (int r = 0; r < NRUNS; r++) {
        CHECK_OK(mo_timer_start(gc, &tm));
        CHECK_OK(mo_attention_fused_forward_mixed(gc, dt, d_out, d_lse, d_qkv, B, T, C, NH));
        CHECK_OK(mo_timer_stop(gc, &tm, &f[r]));
        CHECK_OK(mo_timer_start(gc, &tm));
        CHECK_OK(mo_attention_fused_backward_mixed(gc, dt, d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, C, NH));
        CHECK_OK(mo_timer_stop(gc, &tm, &b[r]));
    }
    qsort(f, NRUNS, sizeof f[0], cmp_double);
    qsort(b, NRUNS, sizeof b[0], cmp_double);
    const double fm = 0.5 * (f[NRUNS / 2 - 1] + f[NRUNS / 2]), bm = 0.5 * (b[NRUNS / 2 - 1] + b[NRUNS / 2]);
    // causal FLOPs, algorithmic: forward 2 GEMMs (QK^T, PV), backward 5 (the kernels do 7: S and dP twice)
    const double gemm = 2.0 * B * NH * HS * ((double)T * (T + 1) / 2);
    printf("timing %s fused B=%d T=%d C=%d NH=%d (HS %d): forward median %.4f ms (min %.4f max %.4f) %.1f TFLOP/s | "
           "backward median %.4f ms (min %.4f max %.4f) %.1f TFLOP/s | fwd+bwd %.4f ms\n",
           mo_dtype_name(dt), B, T, C, NH, HS, fm, f[0], f[NRUNS - 1], 2 * gemm / (fm * 1e9), bm, b[0],
           b[NRUNS - 1], 5 * gemm / (bm * 1e9), fm + bm);
    if (with_materialized) {
        void *d_att = dnew((size_t)B * NH * T * T * e);
        for (int r = 0; r < NRUNS + 1; r++) { // run 0: warm-up
            CHECK_OK(mo_timer_start(gc, &tm));
            CHECK_OK(mo_attention_forward_mixed(gc, dt, d_out, d_att, d_qkv, B, T, C, NH));
            CHECK_OK(mo_timer_stop(gc, &tm, &f[r ? r - 1 : 0]));
            CHECK_OK(mo_timer_start(gc, &tm));
            CHECK_OK(mo_attention_backward_mixed(gc, dt, d_dqkv, d_dout, d_qkv, d_att, B, T, C, NH));
            CHECK_OK(mo_timer_stop(gc, &tm, &b[r ? r - 1 : 0]));
        }
        qsort(f, NRUNS, sizeof f[0], cmp_double);
        qsort(b, NRUNS, sizeof b[0], cmp_double);
        printf("timing %s materialized (for comparison), same shape: forward median %.4f ms | backward median "
               "%.4f ms\n",
               mo_dtype_name(dt), 0.5 * (f[NRUNS / 2 - 1] + f[NRUNS / 2]), 0.5 * (b[NRUNS / 2 - 1] + b[NRUNS / 2]));
        dfree(d_att);
    }
    mo_timer_destroy(&tm);
    dfree(d_qkv); dfree(d_dout); dfree(d_out); dfree(d_dqkv); dfree(d_lse);
    free(qkv); free(dout);
}

int main(void) {
    test_require_gpu();
    test_rng_seed(&rng, test_seed_from_time());
    CHECK_OK(mo_allocator_create(&ga, MO_ALLOC_CACHING, MO_BACKEND_CUDA, 0, NULL));
    CHECK_OK(mo_allocator_create(&ha, MO_ALLOC_CACHING, MO_BACKEND_CPU, 0, NULL));
    if (!ga || !ha) return test_finish();
    CHECK_OK(mo_ctx_create(&gc, MO_BACKEND_CUDA, ga));
    CHECK_OK(mo_ctx_create(&hc, MO_BACKEND_CPU, ha));
    if (!gc || !hc) return test_finish();

    const at_shape at[] = {
        {2, 1024, 768, 12, "gpt2 T=1024"},
        {1, 77, 768, 12, "gpt2 heads, odd T=77"},
        {2, 129, 256, 2, "HS=128 T=129"},
        {3, 100, 96, 3, "HS=32 T=100"},
        {2, 130, 80, 2, "HS=40 T=130"},
        {1, 200, 192, 2, "HS=96 T=200"},
        {2, 65, 24, 3, "HS=8 T=65"},
        {1, 1, 64, 4, "T=1 HS=16"},
    };
    const mo_dtype dts[2] = {MO_BF16, MO_F16};
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) gpu_fused(dts[d], &at[i]);
    gpu_alignment();

    if (!test_reduced("the fused attention timings")) {
        time_shape(MO_BF16, 8, 1024, 768, 12, 1); // GPT-2 124M, one layer
        time_shape(MO_F16, 8, 1024, 768, 12, 0);
        time_shape(MO_BF16, 4, 2048, 2048, 16, 0); // HS 128
    }

    mo_ctx_destroy(gc);
    mo_ctx_destroy(hc);
    mo_allocator_destroy(ga);
    mo_allocator_destroy(ha);
    return test_finish();
}
