// CPU tests of the 16-bit fused attention (attention_fused_mixed.h): its cpu reference against the fp32
// fused reference (attention_fused.h) on the same 16-bit-representable inputs, forward and backward
// (the backward is checked against the fp32 backward, which test_ops_gemm_attn checks against finite
// differences), for bf16 and fp16, odd T crossing the 64-key tiles and head sizes 8..128; and, at a
// looser tolerance, against the 16-bit materialized reference (the tolerances the GPU test uses for
// that comparison are checked here first). Outputs are poisoned with NaN first. Dispatcher contract:
// MO_F32 routes to the fp32 op bit for bit, scratch on every backend (dry peaks = cpu peaks, formula),
// bad dtypes / shapes / head sizes refused on cpu and dry alike.
//
// Tolerances (relative L2):
//  - against fp32: bf16 1e-2, fp16 2e-3 (as test_ops_gemm_attn_mixed). One rounding to bf16 (8 significant
//    bits) has RMS relative error 2^-9 / sqrt(3) = 1.1e-3 (fp16: 2.8e-4). out carries its own rounding plus
//    the averaged roundings of P (about 1.1e-3 / sqrt(keys) after the sum): measured about 1.2e-3 / 3e-4.
//    dq, dk, dv carry their own rounding plus those of P, dS and of out (through D = rowsum(dout * out),
//    which the (dP - D) difference amplifies where dP is close to D). lse is computed from unrounded probabilities on both sides: 1e-6.
//    Worst over 150 seeds at the shapes below: out 1.9e-3 (bf16) / 2.4e-4 (fp16); dq, dk, dv 2.5e-3..3.5e-3 /
//    3.1e-4..4.2e-4 (T = 1024, GPT-2 heads, one seed: the same). Tiny T (2, 3) is left out: with one or two
//    keys per row dS = P (dP - D) is a near-total cancellation, and the 16-bit out inside D dominates it.
//  - against the materialized 16-bit reference: bf16 2e-2, fp16 5e-3. Same math, different rounding
//    points: the materialized path rounds the scaled scores (an absolute error of about 2^-9 |s| in the
//    exponent, |s| ~ 1.3 here, so about 3e-3 relative in every P), normalizes before rounding att, and
//    keeps datt / dpreatt in 16 bits. Worst over 150 seeds: out 4.9e-3 (bf16) / 6.0e-4 (fp16); dq, dk, dv
//    5.1e-3..5.8e-3 / 6.3e-4..7.0e-4; at T = 1024 (one seed) out 5.2e-3 / 6.5e-4, dqkv up to 5.9e-3 / 7.4e-4.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention_fused.h"
#include "kernels/attention_fused_mixed.h"
#include "kernels/matmul_mixed.h"
#include "kernels/ops.h"
#include "kernels/ops_mixed_gemm.h"
#include "strategies/alloc.h"
#include "tests/testlib.h"

static mo_allocator *ha;
static mo_ctx *hc;
static test_rng rng;

static double tol_fp32_of(mo_dtype dt) { return dt == MO_BF16 ? 1e-2 : 2e-3; }
static double tol_mat_of(mo_dtype dt) { return dt == MO_BF16 ? 2e-2 : 5e-3; }
#define LSE_TOL 1e-6

#include "tests/mixed_host.h" // fnew, hnew16, frand_dt, poison16, to_f32 (on rng)
static void poisonf(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}
// part p (0 q, 1 k, 2 v) of a (B*T, 3C) tensor as a (B*T, C) copy
static float *part_of(const float *x, size_t rows, int C, int p) {
    float *f = fnew(rows * C);
    for (size_t r = 0; r < rows; r++) memcpy(f + r * C, x + r * 3 * C + (size_t)p * C, (size_t)C * sizeof(float));
    return f;
}
static double max_abs(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}
static void check_rel(const char *label, const float *got, const float *want, size_t n, double tol, int line) {
    printf("    max abs err %.3e  ", max_abs(got, want, n));
    test_check_rel(got, want, n, tol, __FILE__, line, label);
}
#define CHECK_REL_L(label, got, want, n, tol) check_rel((label), (got), (want), (n), (tol), __LINE__)
// dqkv per part (dq, dk, dv) and whole
static void check_dqkv(const char *what, mo_dtype dt, const float *got, const float *want, size_t rows, int C,
                       double tol, int line) {
    static const char *names[3] = {"dq", "dk", "dv"};
    char label[128];
    for (int p = 0; p < 3; p++) {
        float *g = part_of(got, rows, C, p), *w = part_of(want, rows, C, p);
        snprintf(label, sizeof label, "%s %s (%s)", what, names[p], mo_dtype_name(dt));
        check_rel(label, g, w, rows * C, tol, line);
        free(g);
        free(w);
    }
}

// ---------------------------------------------------------------------------------------------
static void test_against_refs(mo_dtype dt, int B, int T, int C, int NH) {
    printf("attention_fused_mixed %s B=%d T=%d C=%d NH=%d (HS %d)\n", mo_dtype_name(dt), B, T, C, NH, C / NH);
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nl = (size_t)B * NH * T;
    const size_t rows = (size_t)B * T;
    uint16_t *qkv16, *dout16;
    float *qkv = frand_dt(dt, nqkv, -2, 2, &qkv16), *dout = frand_dt(dt, nout, -1, 1, &dout16);
    char label[128];

    // fp32 fused reference
    float *out32 = fnew(nout), *lse32 = fnew(nl), *dqkv32 = fnew(nqkv);
    CHECK_OK(mo_attention_fused_forward(hc, out32, lse32, qkv, B, T, C, NH));
    CHECK_OK(mo_attention_fused_backward(hc, dqkv32, dout, qkv, out32, lse32, B, T, C, NH));

    // 16-bit fused reference (through the dispatcher)
    uint16_t *out16 = hnew16(nout), *dqkv16 = hnew16(nqkv);
    float *lse = fnew(nl);
    poison16(dt, out16, nout);
    poison16(dt, dqkv16, nqkv);
    poisonf(lse, nl);
    CHECK_OK(mo_attention_fused_forward_mixed(hc, dt, out16, lse, qkv16, B, T, C, NH));
    CHECK_OK(mo_attention_fused_backward_mixed(hc, dt, dqkv16, dout16, qkv16, out16, lse, B, T, C, NH));
    float *out = to_f32(dt, out16, nout), *dqkv = to_f32(dt, dqkv16, nqkv);
    snprintf(label, sizeof label, "out vs fp32 (%s)", mo_dtype_name(dt));
    CHECK_REL_L(label, out, out32, nout, tol_fp32_of(dt));
    snprintf(label, sizeof label, "lse vs fp32 (%s)", mo_dtype_name(dt));
    CHECK_REL_L(label, lse, lse32, nl, LSE_TOL);
    check_dqkv("vs fp32", dt, dqkv, dqkv32, rows, C, tol_fp32_of(dt), __LINE__);

    // 16-bit materialized reference: same math, other rounding points
    uint16_t *outm16 = hnew16(nout), *attm16 = hnew16((size_t)B * NH * T * T), *dqkvm16 = hnew16(nqkv);
    CHECK_OK(mo_attention_forward_mixed(hc, dt, outm16, attm16, qkv16, B, T, C, NH));
    CHECK_OK(mo_attention_backward_mixed(hc, dt, dqkvm16, dout16, qkv16, attm16, B, T, C, NH));
    float *outm = to_f32(dt, outm16, nout), *dqkvm = to_f32(dt, dqkvm16, nqkv);
    snprintf(label, sizeof label, "out vs materialized (%s)", mo_dtype_name(dt));
    CHECK_REL_L(label, out, outm, nout, tol_mat_of(dt));
    check_dqkv("vs materialized", dt, dqkv, dqkvm, rows, C, tol_mat_of(dt), __LINE__);

    free(qkv); free(dout); free(qkv16); free(dout16); free(out32); free(lse32); free(dqkv32); free(out16);
    free(dqkv16); free(lse); free(out); free(dqkv); free(outm16); free(attm16); free(dqkvm16); free(outm);
    free(dqkvm);
}

// T = 1: P = 1, out = v exactly, lse = the one score, dv = dout; dq = dk = scale * (dP - D) * ... are
// rounding noise around 0 (D comes from the rounded out), so they are checked in absolute terms.
static void test_t1(mo_dtype dt) {
    printf("T = 1 (%s)\n", mo_dtype_name(dt));
    enum { B = 2, C = 16, NH = 2 };
    uint16_t *qkv16, *dout16;
    float *qkv = frand_dt(dt, (size_t)B * 3 * C, -2, 2, &qkv16), *dout = frand_dt(dt, (size_t)B * C, -1, 1, &dout16);
    uint16_t out16[B * C], dqkv16[B * 3 * C];
    float lse[B * NH];
    poison16(dt, out16, B * C);
    poison16(dt, dqkv16, B * 3 * C);
    CHECK_OK(mo_attention_fused_forward_mixed(hc, dt, out16, lse, qkv16, B, 1, C, NH));
    CHECK_OK(mo_attention_fused_backward_mixed(hc, dt, dqkv16, dout16, qkv16, out16, lse, B, 1, C, NH));
    int ok = 1;
    double worst = 0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < C; i++) {
            ok &= out16[b * C + i] == qkv16[b * 3 * C + 2 * C + i];
            ok &= dqkv16[b * 3 * C + 2 * C + i] == dout16[b * C + i];
            worst = fmax(worst, fabs(mo_mmg_load(dt, dqkv16, (size_t)b * 3 * C + i)));
            worst = fmax(worst, fabs(mo_mmg_load(dt, dqkv16, (size_t)b * 3 * C + C + i)));
        }
    CHECK_MSG(ok, "T = 1: out != v or dv != dout");
    CHECK_MSG(worst < 1e-5, "T = 1: |dq|, |dk| up to %.3g, not rounding noise", worst);
    free(qkv); free(dout); free(qkv16); free(dout16);
}

// The forward reference rounds P relative to the running max after P's 64-key tile (the kernel's
// rounding point). Checked against a direct evaluation of that definition: the two agree to the bit but
// for rare ties of the final rounding; rounding P against the final row max instead (which the kernel
// does not do) is printed for contrast: it flips a visible fraction of the outputs.
static float rnd16(mo_dtype dt, double v) {
    const float f = (float)v;
    return dt == MO_BF16 ? mo_bf16_to_f32(mo_f32_to_bf16(f)) : mo_f16_to_f32(mo_f32_to_f16(f));
}
static void test_tile_rounding(mo_dtype dt) {
    printf("forward rounding points (%s): P rounded per 64-key tile against the running max\n", mo_dtype_name(dt));
    enum { T = 200, C = 8, HS = 8 };
    uint16_t *qkv16;
    float *qkv = frand_dt(dt, (size_t)T * 3 * C, -3, 3, &qkv16); // wide scores: the max moves between tiles
    uint16_t *out16 = hnew16((size_t)T * C);
    float *lse = fnew(T);
    CHECK_OK(mo_attention_fused_forward_mixed(hc, dt, out16, lse, qkv16, 1, T, C, 1));
    const double scale = (double)(1.0f / sqrtf((float)HS));
    size_t same_tile = 0, same_final = 0, n = 0;
    double worst_lse = 0, worst_ulps = 0;
    for (int t = 0; t < T; t++) {
        double s[T], mt[T], m = -INFINITY, l = 0, acc_t[HS] = {0}, acc_f[HS] = {0};
        for (int j = 0; j <= t; j++) {
            double d = 0;
            for (int i = 0; i < HS; i++) d += (double)qkv[(size_t)t * 3 * C + i] * qkv[(size_t)j * 3 * C + C + i];
            s[j] = scale * d;
            m = fmax(m, s[j]);
            mt[j] = m; // running max after key j
        }
        for (int j = 0; j <= t; j++) l += exp(s[j] - m);
        for (int j = 0; j <= t; j++) {
            const int tile_end = (j / MO_ATTN_FM_KEY_TILE + 1) * MO_ATTN_FM_KEY_TILE - 1;
            const double mj = mt[tile_end < t ? tile_end : t];
            const double pt = rnd16(dt, exp(s[j] - mj)) * exp(mj - m), pf = rnd16(dt, exp(s[j] - m));
            for (int i = 0; i < HS; i++) {
                const double v = qkv[(size_t)j * 3 * C + 2 * C + i];
                acc_t[i] += pt * v;
                acc_f[i] += pf * v;
            }
        }
        for (int i = 0; i < HS; i++, n++) {
            const float got = mo_mmg_load(dt, out16, (size_t)t * C + i);
            const float wt = rnd16(dt, acc_t[i] / l), wf = rnd16(dt, acc_f[i] / l);
            same_tile += got == wt;
            same_final += got == wf;
            const double ulp = fmax(fabs(wt), 1e-3) * (dt == MO_BF16 ? 0x1p-7 : 0x1p-10);
            worst_ulps = fmax(worst_ulps, fabs((double)got - wt) / ulp);
        }
        worst_lse = fmax(worst_lse, fabs(lse[t] - (m + log(l))));
    }
    printf("  out bits equal to the definition: %.4f (rounding against the final max instead: %.4f); "
           "worst %.2f ulp; lse max abs err %.2e\n",
           (double)same_tile / n, (double)same_final / n, worst_ulps, worst_lse);
    CHECK_MSG(same_tile >= n - n / 200 && worst_ulps <= 1.0,
              "the forward reference does not round P per 64-key tile as documented (%zu of %zu equal)", same_tile, n);
    CHECK_MSG(worst_lse < 1e-5, "lse differs from log sum exp by %.3g", worst_lse);
    free(qkv); free(qkv16); free(out16); free(lse);
}

// MO_F32 routes to the fp32 fused ops: same bits
static void test_f32_route(void) {
    printf("dtype fp32 routes to the fp32 fused op\n");
    const int B = 1, T = 20, C = 16, NH = 2;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = fnew(nqkv), *dout = fnew(nout);
    test_fill_uniform(&rng, qkv, nqkv, -1, 1);
    test_fill_uniform(&rng, dout, nout, -1, 1);
    float *o1 = fnew(nout), *o2 = fnew(nout), *l1 = fnew(nl), *l2 = fnew(nl), *d1 = fnew(nqkv), *d2 = fnew(nqkv);
    CHECK_OK(mo_attention_fused_forward(hc, o1, l1, qkv, B, T, C, NH));
    CHECK_OK(mo_attention_fused_backward(hc, d1, dout, qkv, o1, l1, B, T, C, NH));
    CHECK_OK(mo_attention_fused_forward_mixed(hc, MO_F32, o2, l2, qkv, B, T, C, NH));
    CHECK_OK(mo_attention_fused_backward_mixed(hc, MO_F32, d2, dout, qkv, o2, l2, B, T, C, NH));
    CHECK(memcmp(o1, o2, nout * sizeof(float)) == 0);
    CHECK(memcmp(l1, l2, nl * sizeof(float)) == 0);
    CHECK(memcmp(d1, d2, nqkv * sizeof(float)) == 0);
    free(qkv); free(dout); free(o1); free(o2); free(l1); free(l2); free(d1); free(d2);
}

// ---------------------------------------------------------------------------------------------
static void test_args_on(mo_backend_kind kind) {
    printf("argument checks (%s)\n", mo_backend_name(kind));
    mo_allocator *a;
    mo_ctx *c;
    if (!CHECK_OK(mo_allocator_create(&a, MO_ALLOC_CACHING, kind, 0, NULL))) return;
    if (!CHECK_OK(mo_ctx_create(&c, kind, a))) { mo_allocator_destroy(a); return; }
    static uint16_t x[4096];
    static float f[4096];
    const mo_dtype dts[2] = {MO_BF16, MO_F16};
    for (int i = 0; i < 2; i++) {
        const mo_dtype dt = dts[i];
        CHECK(mo_attention_fused_forward_mixed(c, dt, x, f, x, 1, 0, 16, 2) == MO_ERR_INVALID);   // T = 0
        CHECK(mo_attention_fused_forward_mixed(c, dt, x, f, x, 0, 4, 16, 2) == MO_ERR_INVALID);   // B = 0
        CHECK(mo_attention_fused_forward_mixed(c, dt, x, f, x, 1, 4, 18, 4) == MO_ERR_INVALID);   // C % NH
        CHECK(mo_attention_fused_backward_mixed(c, dt, x, x, x, x, f, 1, 4, 16, 0) == MO_ERR_INVALID); // NH = 0
        CHECK(mo_attention_fused_forward_mixed(c, dt, x, f, x, 1, 4, 24, 2) == MO_ERR_UNSUPPORTED);  // HS 12
        CHECK(mo_attention_fused_backward_mixed(c, dt, x, x, x, x, f, 1, 4, 24, 2) == MO_ERR_UNSUPPORTED);
        CHECK(mo_attention_fused_forward_mixed(c, dt, x, f, x, 1, 4, 4, 1) == MO_ERR_UNSUPPORTED);   // HS 4
        CHECK(mo_attention_fused_forward_mixed(c, dt, x, f, x, 1, 2, 272, 2) == MO_ERR_UNSUPPORTED); // HS 136
        CHECK(mo_attention_fused_backward_mixed(c, dt, x, x, x, x, f, 1, 2, 272, 2) == MO_ERR_UNSUPPORTED);
        CHECK(strstr(mo_errmsg(), "attention_fused_backward_mixed") != NULL); // the message names the op
    }
    CHECK(mo_attention_fused_forward_mixed(c, (mo_dtype)7, x, f, x, 1, 4, 16, 2) == MO_ERR_INVALID);
    CHECK(mo_attention_fused_backward_mixed(c, (mo_dtype)7, x, x, x, x, f, 1, 4, 16, 2) == MO_ERR_INVALID);
    mo_clear_error();
    mo_ctx_destroy(c);
    mo_allocator_destroy(a);
}

static void run_on(mo_backend_kind kind, int bwd, mo_dtype dt, mo_alloc_stats *before, mo_alloc_stats *after) {
    const int B = 2, T = 9, C = 16, NH = 2;
    mo_allocator *a;
    mo_ctx *c;
    if (!CHECK_OK(mo_allocator_create(&a, MO_ALLOC_CACHING, kind, 0, NULL))) return;
    if (!CHECK_OK(mo_ctx_create(&c, kind, a))) { mo_allocator_destroy(a); return; }
    const size_t sizes[5] = {(size_t)B * T * 3 * C, (size_t)B * T * C, (size_t)B * NH * T, (size_t)B * T * 3 * C,
                             (size_t)B * T * C};
    void *p[5] = {0};
    for (int i = 0; i < 5; i++) {
        CHECK_OK(mo_alloc(a, sizes[i] * sizeof(float), MO_CAT_ACTIVATION, &p[i]));
        if (kind == MO_BACKEND_CPU && p[i])
            for (size_t j = 0; j < sizes[i]; j++) {
                const float v = 0.01f * (float)((j * 7 + i) % 13) - 0.05f;
                if (i == 2) ((float *)p[i])[j] = v;
                else mo_mmg_store(dt, p[i], j, v);
            }
    }
    mo_allocator_reset_peaks(a);
    mo_allocator_stats(a, before);
    const mo_status st = bwd ? mo_attention_fused_backward_mixed(c, dt, p[3], p[4], p[0], p[1], p[2], B, T, C, NH)
                             : mo_attention_fused_forward_mixed(c, dt, p[1], p[2], p[0], B, T, C, NH);
    CHECK_MSG(st == MO_OK, "attention_fused_%s_mixed on %s: %s", bwd ? "backward" : "forward", mo_backend_name(kind),
              mo_errmsg());
    mo_allocator_stats(a, after);
    for (int i = 0; i < 5; i++) CHECK_OK(mo_free(a, p[i]));
    mo_ctx_destroy(c);
    mo_allocator_destroy(a);
}

static void test_dry_peaks(mo_dtype dt) {
    printf("dispatcher contract (%s): scratch on every backend, dry peaks = cpu peaks\n", mo_dtype_name(dt));
    CHECK_EQ_U64(mo_attention_fused_forward_mixed_scratch_bytes(2, 9, 16, 2), 0);
    CHECK_EQ_U64(mo_attention_fused_backward_mixed_scratch_bytes(2, 9, 16, 2), 2 * 2 * 9 * sizeof(float));
    for (int bwd = 0; bwd < 2; bwd++) {
        const size_t want = bwd ? mo_attention_fused_backward_mixed_scratch_bytes(2, 9, 16, 2) : 0;
        mo_alloc_stats b_cpu, a_cpu, b_dry, a_dry;
        run_on(MO_BACKEND_CPU, bwd, dt, &b_cpu, &a_cpu);
        run_on(MO_BACKEND_DRY, bwd, dt, &b_dry, &a_dry);
        const uint64_t ws_cpu = a_cpu.peak_by_cat[MO_CAT_WORKSPACE] - b_cpu.allocated_by_cat[MO_CAT_WORKSPACE];
        const uint64_t ws_dry = a_dry.peak_by_cat[MO_CAT_WORKSPACE] - b_dry.allocated_by_cat[MO_CAT_WORKSPACE];
        CHECK_MSG(ws_cpu == ws_dry, "scratch peak cpu %llu != dry %llu", (unsigned long long)ws_cpu,
                  (unsigned long long)ws_dry);
        CHECK_MSG(ws_cpu >= want && ws_cpu < want + 1024, "scratch peak %llu, formula %zu", (unsigned long long)ws_cpu,
                  want);
        CHECK_EQ_U64(a_cpu.peak_allocated_bytes, a_dry.peak_allocated_bytes);
        CHECK_MSG(a_cpu.allocated_bytes == b_cpu.allocated_bytes && a_dry.allocated_bytes == b_dry.allocated_bytes,
                  "scratch not given back");
    }
}

int main(void) {
    test_rng_seed(&rng, test_seed_from_time());
    if (!CHECK_OK(mo_allocator_create(&ha, MO_ALLOC_CACHING, MO_BACKEND_CPU, 0, NULL))) return test_finish();
    if (!CHECK_OK(mo_ctx_create(&hc, MO_BACKEND_CPU, ha))) return test_finish();
    const mo_dtype dts[2] = {MO_BF16, MO_F16};
    for (int i = 0; i < 2; i++) {
        const mo_dtype dt = dts[i];
        // the small shapes of gpu_attention_fused_mixed, whose materialized tolerances are checked here
        test_against_refs(dt, 1, 77, 768, 12); // GPT-2 heads (HS 64), odd T over two key tiles
        test_against_refs(dt, 2, 129, 256, 2); // HS 128, T = 2 * 64 + 1
        test_against_refs(dt, 3, 100, 96, 3);  // HS 32
        test_against_refs(dt, 2, 130, 80, 2);  // HS 40 (padded)
        test_against_refs(dt, 1, 200, 192, 2); // HS 96
        test_against_refs(dt, 2, 65, 24, 3);   // HS 8
        test_t1(dt);
        test_tile_rounding(dt);
        test_dry_peaks(dt);
    }
    test_f32_route();
    test_args_on(MO_BACKEND_CPU);
    test_args_on(MO_BACKEND_DRY);
    mo_ctx_destroy(hc);
    mo_allocator_destroy(ha);
    return test_finish();
}
