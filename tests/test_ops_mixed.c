// CPU-backend properties of the mixed-precision ops (ops_mixed.h), for fp16 and bf16:
//   - each op against the fp32 reference (ops.h) on the same inputs rounded to the 16-bit type, within
//     the 16-bit tolerance of docs/DESIGN.md (relative L2 1e-2 for bf16, 2e-3 for fp16);
//   - stronger, because the cpu references do the fp32 references' float operations on the exactly
//     converted inputs: every 16-bit output is exactly round(fp32 reference output), and every fp32
//     output (parameter gradients, mean, rstd, losses, the master, m, v) is bit-identical;
//   - adamw_mixed's 16-bit copy == the rounded new master; casts exact; the non-finite check;
//   - dispatch: MO_F32 routes to the fp32 ops, other dtypes are rejected, scratch is given back and dry
//     peaks equal cpu peaks.
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/ops_mixed.h"
#include "strategies/alloc.h"
#include "tests/testlib.h"

static mo_allocator *ha;
static mo_ctx *hc;
static test_rng rng;

#include "tests/mixed_host.h" // hnew, fnew, hnew16, frand_dt, to_f32 (on rng)
static float *fdup(const float *x, size_t n) { float *p = fnew(n); memcpy(p, x, n * sizeof(float)); return p; }

static double tol16(mo_dtype dt) { return dt == MO_BF16 ? 1e-2 : 2e-3; }

// A random 16-bit tensor x16 (n) and its exact fp32 value xf (n).
static void rand16(mo_dtype dt, size_t n, float lo, float hi, uint16_t **x16, float **xf) {
    *xf = frand_dt(dt, n, lo, hi, x16);
}

// got (16-bit) against the fp32 reference want: within tol16 and exactly round(want).
static void check16(mo_dtype dt, const uint16_t *got, const float *want, size_t n, const char *what) {
    float *g = to_f32(dt, got, n);
    double rel = test_rel_error(g, want, n);
    CHECK_MSG(rel <= tol16(dt), "%s %s: rel err %.3e vs the fp32 reference > %.1e", mo_dtype_name(dt), what, rel,
              tol16(dt));
    uint16_t *r = hnew16(n);
    mo_convert_from_f32(dt, r, want, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += r[i] != got[i];
    CHECK_MSG(bad == 0, "%s %s: %zu of %zu elements != round(fp32 reference)", mo_dtype_name(dt), what, bad, n);
    printf("  %-5s %-28s rel err %.2e vs fp32 (tol %.0e), %s\n", mo_dtype_name(dt), what, rel, tol16(dt),
           bad ? "NOT rounded fp32" : "== rounded fp32");
    free(g);
    free(r);
}
static void check_same_f32(const float *got, const float *want, size_t n, const char *what, mo_dtype dt) {
    CHECK_MSG(memcmp(got, want, n * sizeof(float)) == 0, "%s %s: fp32 output not bit-identical to the fp32 reference",
              mo_dtype_name(dt), what);
}

// ---------------------------------------------------------------------------------------------
static void test_encoder(mo_dtype dt) {
    enum { B = 2, T = 5, C = 37, V = 11 };
    int tok[B * T] = {3, 7, 3, 0, 10, 7, 7, 3, 1, 3};
    uint16_t *wte, *wpe, *dout;
    float *wtef, *wpef, *doutf;
    rand16(dt, V * C, -1, 1, &wte, &wtef);
    rand16(dt, T * C, -1, 1, &wpe, &wpef);
    rand16(dt, B * T * C, -1, 1, &dout, &doutf);
    float *ref = fnew(B * T * C);
    uint16_t *out = hnew16(B * T * C);
    CHECK_OK(mo_encoder_forward(hc, ref, tok, wtef, wpef, B, T, C));
    CHECK_OK(mo_encoder_forward_mixed(hc, dt, out, tok, wte, wpe, B, T, C));
    check16(dt, out, ref, B * T * C, "encoder forward");

    float *dwte = fnew(V * C), *dwpe = fnew(T * C);
    test_fill_uniform(&rng, dwte, V * C, -1, 1);
    test_fill_uniform(&rng, dwpe, T * C, -1, 1);
    float *dwte_ref = fdup(dwte, V * C), *dwpe_ref = fdup(dwpe, T * C);
    CHECK_OK(mo_encoder_backward(hc, dwte_ref, dwpe_ref, doutf, tok, tok, B, T, C, V));
    CHECK_OK(mo_encoder_backward_mixed(hc, dt, dwte, dwpe, dout, tok, tok, B, T, C, V));
    check_same_f32(dwte, dwte_ref, V * C, "encoder backward dwte", dt);
    check_same_f32(dwpe, dwpe_ref, T * C, "encoder backward dwpe", dt);
    int bad_tok[B * T];
    memcpy(bad_tok, tok, sizeof tok);
    bad_tok[4] = V;
    CHECK(mo_encoder_backward_mixed(hc, dt, dwte, dwpe, dout, bad_tok, bad_tok, B, T, C, V) == MO_ERR_INVALID);
    free(wte); free(wpe); free(dout); free(wtef); free(wpef); free(doutf); free(ref); free(out);
    free(dwte); free(dwpe); free(dwte_ref); free(dwpe_ref);
}

// A LayerNorm test's random inputs (N, C): x, weight, bias, dout and the dinp to add to, in dt and as fp32.
typedef struct {
    uint16_t *x, *w, *b, *dout, *dinp;
    float *xf, *wf, *bf, *doutf, *dinpf;
} ln_inputs;
static void ln_inputs_make(mo_dtype dt, int N, int C, ln_inputs *in) {
    size_t NC = (size_t)N * C;
    rand16(dt, NC, -2, 3, &in->x, &in->xf);
    rand16(dt, C, 0.5f, 1.5f, &in->w, &in->wf);
    rand16(dt, C, -0.5f, 0.5f, &in->b, &in->bf);
    rand16(dt, NC, -1, 1, &in->dout, &in->doutf);
    rand16(dt, NC, -1, 1, &in->dinp, &in->dinpf);
}
static void ln_inputs_free(ln_inputs *in) {
    free(in->x); free(in->w); free(in->b); free(in->dout); free(in->dinp);
    free(in->xf); free(in->wf); free(in->bf); free(in->doutf); free(in->dinpf);
}

static void test_layernorm(mo_dtype dt, int N, int C) {
    size_t NC = (size_t)N * C;
    ln_inputs in;
    ln_inputs_make(dt, N, C, &in);
    uint16_t *x = in.x, *w = in.w, *b = in.b, *dout = in.dout, *dinp = in.dinp;
    float *xf = in.xf, *wf = in.wf, *bf = in.bf, *doutf = in.doutf, *dinpf = in.dinpf;
    float *ref = fnew(NC), *mr = fnew(N), *rr = fnew(N), *m = fnew(N), *r = fnew(N);
    uint16_t *out = hnew16(NC);
    CHECK_OK(mo_layernorm_forward(hc, ref, mr, rr, xf, wf, bf, N, C));
    CHECK_OK(mo_layernorm_forward_mixed(hc, dt, out, m, r, x, w, b, N, C));
    check16(dt, out, ref, NC, "layernorm forward");
    check_same_f32(m, mr, N, "layernorm mean", dt);
    check_same_f32(r, rr, N, "layernorm rstd", dt);
    CHECK_OK(mo_layernorm_forward_mixed(hc, dt, out, NULL, NULL, x, w, b, N, C)); // statistics optional

    float *dw = fnew(C), *db = fnew(C);
    test_fill_uniform(&rng, dw, C, -1, 1);
    test_fill_uniform(&rng, db, C, -1, 1);
    float *dw_ref = fdup(dw, C), *db_ref = fdup(db, C), *dinp_ref = fdup(dinpf, NC);
    CHECK_OK(mo_layernorm_backward(hc, dinp_ref, dw_ref, db_ref, doutf, xf, wf, mr, rr, N, C));
    CHECK_OK(mo_layernorm_backward_mixed(hc, dt, dinp, dw, db, dout, x, w, mr, rr, N, C));
    check16(dt, dinp, dinp_ref, NC, "layernorm backward dinp");
    check_same_f32(dw, dw_ref, C, "layernorm backward dweight", dt);
    check_same_f32(db, db_ref, C, "layernorm backward dbias", dt);
    ln_inputs_free(&in);
    free(ref); free(mr); free(rr); free(m); free(r); free(out); free(dw); free(db); free(dw_ref); free(db_ref);
    free(dinp_ref);
}

// The summing backward: dinp, dweight, dbias the plain op's bits, and dsum += each column of the new dinp
// summed in double in row order (matmul_backward_cpu's dbias on that dinp: the same bits, so a GPT step on
// the cpu is the same with the sums moved out of the projection GEMMs). Refused: no dsum, fp32, C too wide.
static void test_layernorm_sum(mo_dtype dt, int N, int C) {
    size_t NC = (size_t)N * C;
    ln_inputs in;
    ln_inputs_make(dt, N, C, &in);
    uint16_t *x = in.x, *w = in.w, *b = in.b, *dout = in.dout, *dinp = in.dinp;
    float *m = fnew(N), *r = fnew(N), *dw = fnew(C), *db = fnew(C), *ds = fnew(C), *dsum_ref = fnew(C);
    uint16_t *out = hnew16(NC), *dinp2 = hnew16(NC);
    CHECK_OK(mo_layernorm_forward_mixed(hc, dt, out, m, r, x, w, b, N, C));
    test_fill_uniform(&rng, dw, C, -1, 1);
    test_fill_uniform(&rng, db, C, -1, 1);
    test_fill_uniform(&rng, ds, C, -1, 1);
    float *dw2 = fdup(dw, C), *db2 = fdup(db, C), *ds0 = fdup(ds, C);
    memcpy(dinp2, dinp, NC * 2);
    CHECK_OK(mo_layernorm_backward_mixed(hc, dt, dinp, dw, db, dout, x, w, m, r, N, C));
    long runs = hc->ln_dsum_runs;
    CHECK_OK(mo_layernorm_backward_sum_mixed(hc, dt, dinp2, dw2, db2, ds, dout, x, w, m, r, N, C));
    CHECK_MSG(hc->ln_dsum_runs == runs + 1, "layernorm backward sum: counted %ld runs, want %ld", hc->ln_dsum_runs, runs + 1);
    CHECK_MSG(memcmp(dinp, dinp2, NC * 2) == 0, "%s layernorm backward sum: dinp differs from the plain op's", mo_dtype_name(dt));
    CHECK_MSG(memcmp(dw, dw2, C * sizeof(float)) == 0 && memcmp(db, db2, C * sizeof(float)) == 0,
              "%s layernorm backward sum: dweight or dbias differs from the plain op's", mo_dtype_name(dt));
    float *dinp_f = fnew(NC);
    mo_convert_to_f32(dt, dinp_f, dinp, NC);
    memcpy(dsum_ref, ds0, C * sizeof(float));
    float *unused_dw = fnew(C); // matmul_backward_cpu's dbias of dout = the new dinp: the sums the GEMM would take
    float *xin = fnew(N), *wone = fnew(C); // (N, 1) input, (C, 1) weight: only dbias is looked at
    memset(xin, 0, N * sizeof(float));
    memset(wone, 0, C * sizeof(float));
    memset(unused_dw, 0, C * sizeof(float));
    CHECK_OK(matmul_backward_cpu(NULL, unused_dw, dsum_ref, dinp_f, xin, wone, N, 1, C));
    CHECK_MSG(memcmp(ds, dsum_ref, C * sizeof(float)) == 0, "%s layernorm backward sum: dsum differs from the GEMM's dbias",
              mo_dtype_name(dt));
    int moved = 0;
    for (int i = 0; i < C; i++) moved |= ds[i] != ds0[i];
    CHECK_MSG(moved, "%s layernorm backward sum: dsum unchanged", mo_dtype_name(dt));
    CHECK(mo_layernorm_backward_sum_mixed(hc, dt, dinp2, dw2, db2, NULL, dout, x, w, m, r, N, C) == MO_ERR_INVALID);
    CHECK(mo_layernorm_backward_sum_mixed(hc, MO_F32, dinp2, dw2, db2, ds, dout, x, w, m, r, N, C) == MO_ERR_INVALID);
    CHECK(mo_layernorm_backward_sum_mixed(hc, dt, dinp2, dw2, db2, ds, dout, x, w, m, r, 1, MO_LN_DSUM_MAX_C + 1) ==
          MO_ERR_INVALID);
    ln_inputs_free(&in);
    free(m); free(r); free(dw); free(db); free(ds); free(dsum_ref); free(out); free(dinp2); free(dw2); free(db2);
    free(ds0); free(dinp_f); free(unused_dw); free(xin); free(wone);
}

static void test_gelu(mo_dtype dt) {
    const size_t n = 1001;
    uint16_t *x, *d;
    float *xf, *df;
    rand16(dt, n, -6, 6, &x, &xf);
    rand16(dt, n, -1, 1, &d, &df);
    float *ref = fnew(n), *gref = fnew(n);
    uint16_t *out = hnew16(n), *g = hnew16(n);
    CHECK_OK(mo_gelu_forward(hc, ref, xf, n));
    CHECK_OK(mo_gelu_forward_mixed(hc, dt, out, x, n));
    check16(dt, out, ref, n, "gelu forward");
    CHECK_OK(mo_gelu_backward(hc, gref, xf, df, n));
    CHECK_OK(mo_gelu_backward_mixed(hc, dt, g, x, d, n));
    check16(dt, g, gref, n, "gelu backward");
    CHECK_OK(mo_gelu_backward_mixed(hc, dt, d, x, d, n)); // dinp aliases dout
    CHECK_MSG(memcmp(d, g, n * 2) == 0, "%s gelu backward in place differs", mo_dtype_name(dt));
    CHECK_OK(mo_gelu_forward_mixed(hc, dt, x, x, n)); // out aliases inp
    CHECK_MSG(memcmp(x, out, n * 2) == 0, "%s gelu forward in place differs", mo_dtype_name(dt));
    free(x); free(d); free(xf); free(df); free(ref); free(gref); free(out); free(g);
}

static void test_residual(mo_dtype dt) {
    const size_t n = 1001;
    uint16_t *a, *b;
    float *af, *bf;
    rand16(dt, n, -1, 1, &a, &af);
    rand16(dt, n, -1, 1, &b, &bf);
    float *ref = fnew(n);
    uint16_t *out = hnew16(n);
    CHECK_OK(mo_residual_forward(hc, ref, af, bf, n));
    CHECK_OK(mo_residual_forward_mixed(hc, dt, out, a, b, n));
    check16(dt, out, ref, n, "residual");
    CHECK_OK(mo_accumulate_mixed(hc, dt, a, b, n));
    check16(dt, a, ref, n, "accumulate");
    free(a); free(b); free(af); free(bf); free(ref); free(out);
}

static void test_crossentropy(mo_dtype dt, int B, int T, int V, float dloss) {
    size_t N = (size_t)B * T, NV = N * V;
    uint16_t *x;
    float *xf;
    rand16(dt, NV, -8, 8, &x, &xf);
    int *tg = hnew(N * sizeof(int));
    for (size_t i = 0; i < N; i++) tg[i] = (int)(test_rng_u64(&rng) % (uint64_t)V);
    tg[0] = V - 1;
    float *lref = fnew(N), *l = fnew(N);
    CHECK_OK(mo_crossentropy_fused(hc, lref, xf, tg, B, T, V, dloss));
    CHECK_OK(mo_crossentropy_fused_mixed(hc, dt, l, x, tg, B, T, V, dloss));
    check_same_f32(l, lref, N, "crossentropy losses", dt);
    check16(dt, x, xf, NV, "crossentropy dlogits");
    free(x); free(xf); free(tg); free(lref); free(l);
}

static void test_cast(mo_dtype dt) {
    const size_t n = 1003;
    float *f = fnew(n), *back = fnew(n);
    test_fill_uniform(&rng, f, n, -70000, 70000); // beyond the fp16 range: overflow to inf is part of rounding
    f[0] = 0.0f; f[1] = -0.0f; f[2] = 1e-30f; f[3] = INFINITY; f[4] = 3.0e-8f; f[5] = 1.0f + 1.0f / 2048;
    uint16_t *h = hnew16(n), *want = hnew16(n), *o = hnew16(n);
    CHECK_OK(mo_cast_mixed(hc, dt, h, MO_F32, f, n));
    mo_convert_from_f32(dt, want, f, n);
    CHECK_MSG(memcmp(h, want, n * 2) == 0, "cast fp32 -> %s != host rounding", mo_dtype_name(dt));
    CHECK_OK(mo_cast_mixed(hc, MO_F32, back, dt, h, n));
    float *wantf = to_f32(dt, h, n);
    CHECK_MSG(memcmp(back, wantf, n * 4) == 0, "cast %s -> fp32 not exact", mo_dtype_name(dt));
    mo_dtype other = dt == MO_F16 ? MO_BF16 : MO_F16;
    CHECK_OK(mo_cast_mixed(hc, other, o, dt, h, n));
    mo_convert_from_f32(other, want, wantf, n);
    CHECK_MSG(memcmp(o, want, n * 2) == 0, "cast %s -> %s != rounding of the exact value", mo_dtype_name(dt),
              mo_dtype_name(other));
    CHECK_OK(mo_cast_mixed(hc, dt, o, dt, h, n));
    CHECK_MSG(memcmp(o, h, n * 2) == 0, "cast %s -> %s not a copy", mo_dtype_name(dt), mo_dtype_name(dt));
    CHECK(mo_cast_mixed(hc, (mo_dtype)9, o, dt, h, n) == MO_ERR_INVALID);
    free(f); free(back); free(h); free(want); free(o); free(wantf);
}

static void test_adamw(mo_dtype dt) {
    const size_t n = 1001;
    float *p = fnew(n), *g = fnew(n), *m = fnew(n), *v = fnew(n);
    test_fill_uniform(&rng, p, n, -1, 1);
    test_fill_uniform(&rng, g, n, -1, 1);
    test_fill_uniform(&rng, m, n, -0.1f, 0.1f);
    test_fill_uniform(&rng, v, n, 0, 0.01f);
    float *pr = fdup(p, n), *mr = fdup(m, n), *vr = fdup(v, n);
    uint16_t *p16 = hnew16(n), *want = hnew16(n);
    for (int t = 1; t <= 3; t++) {
        CHECK_OK(mo_adamw(hc, pr, g, mr, vr, n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 0.37f));
        CHECK_OK(mo_adamw_mixed(hc, dt, p, p16, g, m, v, n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 0.37f));
    }
    check_same_f32(p, pr, n, "adamw master", dt);
    check_same_f32(m, mr, n, "adamw m", dt);
    check_same_f32(v, vr, n, "adamw v", dt);
    mo_convert_from_f32(dt, want, p, n);
    int finite = 1;
    for (size_t i = 0; i < n; i++) finite &= isfinite(dt == MO_F16 ? mo_f16_to_f32(p16[i]) : mo_bf16_to_f32(p16[i]));
    CHECK_MSG(finite && memcmp(p16, want, n * 2) == 0, "%s adamw 16-bit copy != rounded master", mo_dtype_name(dt));
    CHECK(mo_adamw_mixed(hc, dt, p, p16, g, m, v, n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0, 1.0f) == MO_ERR_INVALID);
    free(p); free(g); free(m); free(v); free(pr); free(mr); free(vr); free(p16); free(want);
}

static void test_nonfinite(void) {
    printf("nonfinite\n");
    const size_t n = 1001;
    float *g = fnew(n);
    test_fill_uniform(&rng, g, n, -1, 1);
    g[7] = FLT_MAX;
    g[8] = -FLT_MAX;
    g[9] = 1e-45f; // denormal: finite
    int out = -1;
    CHECK_OK(mo_nonfinite(hc, g, n, &out));
    CHECK(out == 0);
    float bad[3] = {INFINITY, -INFINITY, NAN};
    for (int k = 0; k < 3; k++)
        for (size_t at = 0; at < n; at += n - 1) {
            float keep = g[at];
            g[at] = bad[k];
            out = -1;
            CHECK_OK(mo_nonfinite(hc, g, n, &out));
            CHECK_MSG(out == 1, "nonfinite missed %g at %zu", (double)bad[k], at);
            g[at] = keep;
        }
    out = -1;
    CHECK_OK(mo_nonfinite(hc, g, 0, &out));
    CHECK(out == 0);
    free(g);
}

// MO_F32 routes to the fp32 ops; other dtypes are rejected.
static void test_routing(void) {
    printf("routing\n");
    const size_t n = 64;
    float *a = fnew(n), *b = fnew(n), *o1 = fnew(n), *o2 = fnew(n);
    test_fill_uniform(&rng, a, n, -3, 3);
    test_fill_uniform(&rng, b, n, -1, 1);
    CHECK_OK(mo_gelu_forward(hc, o1, a, n));
    CHECK_OK(mo_gelu_forward_mixed(hc, MO_F32, o2, a, n));
    CHECK(memcmp(o1, o2, n * 4) == 0);
    CHECK_OK(mo_residual_forward(hc, o1, a, b, n));
    CHECK_OK(mo_residual_forward_mixed(hc, MO_F32, o2, a, b, n));
    CHECK(memcmp(o1, o2, n * 4) == 0);
    CHECK(mo_gelu_forward_mixed(hc, (mo_dtype)7, o2, a, n) == MO_ERR_INVALID);
    CHECK(mo_accumulate_mixed(hc, (mo_dtype)-1, o2, a, n) == MO_ERR_INVALID);
    CHECK(mo_layernorm_forward_mixed(hc, MO_BF16, o2, NULL, NULL, a, a, a, 0, 8) == MO_ERR_INVALID);
    CHECK(mo_crossentropy_fused_mixed(hc, MO_F16, o1, o2, NULL, 0, 1, 8, 1.0f) == MO_ERR_INVALID);
    free(a); free(b); free(o1); free(o2);
}

// Scratch from the allocator on every backend, given back; dry peaks equal cpu peaks.
static uint64_t run_scratch(mo_backend_kind be, int which, uint64_t *leak) {
    mo_allocator *a = NULL;
    mo_ctx *c = NULL;
    *leak = 1;
    CHECK_OK(mo_allocator_create(&a, MO_ALLOC_CACHING, be, 0, NULL));
    if (!a) return 0;
    CHECK_OK(mo_ctx_create(&c, be, a));
    if (!c) { mo_allocator_destroy(a); return 0; }
    enum { B = 3, T = 64, C = 48, V = 50, N = B * T };
    void *f[6] = {0};
    for (int i = 0; i < 6; i++) CHECK_OK(mo_alloc(a, (size_t)V * T * C * sizeof(float), MO_CAT_ACTIVATION, &f[i]));
    static int tok[N];
    for (int i = 0; i < N; i++) tok[i] = (i * 7) % V;
    float *mean = NULL, *rstd = NULL;
    CHECK_OK(mo_alloc(a, N * sizeof(float), MO_CAT_ACTIVATION, (void **)&mean));
    CHECK_OK(mo_alloc(a, N * sizeof(float), MO_CAT_ACTIVATION, (void **)&rstd));
    if (be == MO_BACKEND_CPU) {
        for (int i = 0; i < 6; i++) memset(f[i], 0x3c, (size_t)V * T * C * sizeof(float)); // 1.0 in fp16 pairs
        for (int i = 0; i < N; i++) { mean[i] = 0.5f; rstd[i] = 1.0f; }
    }
    mo_alloc_stats s0, s1;
    mo_allocator_stats(a, &s0);
    mo_allocator_reset_peaks(a);
    switch (which) {
    case 0: CHECK_OK(mo_encoder_backward_mixed(c, MO_F16, f[0], f[1], f[2], tok, tok, B, T, C, V)); break;
    case 1: CHECK_OK(mo_layernorm_backward_mixed(c, MO_BF16, f[0], f[1], f[2], f[3], f[4], f[5], mean, rstd, N, C)); break;
    case 2: {
        int out = -1;
        CHECK_OK(mo_nonfinite(c, f[0], (size_t)N * C, &out));
        CHECK(out == 0);
        break;
    }
    }
    mo_allocator_stats(a, &s1);
    uint64_t rise = s1.peak_by_cat[MO_CAT_WORKSPACE] - s0.allocated_by_cat[MO_CAT_WORKSPACE];
    *leak = s1.allocated_bytes - s0.allocated_bytes;
    for (int i = 0; i < 6; i++) mo_free(a, f[i]);
    mo_free(a, mean);
    mo_free(a, rstd);
    mo_ctx_destroy(c);
    mo_allocator_destroy(a);
    return rise;
}

static void test_scratch_contract(void) {
    printf("scratch contract\n");
    enum { B = 3, T = 64, C = 48, N = B * T };
    size_t want[3] = {mo_encoder_backward_scratch_bytes(B, T), mo_layernorm_backward_scratch_bytes(N, C),
                      mo_nonfinite_scratch_bytes((size_t)N * C)};
    const char *name[3] = {"encoder_backward_mixed", "layernorm_backward_mixed", "nonfinite"};
    for (int w = 0; w < 3; w++) {
        uint64_t lc = 1, ld = 1;
        uint64_t cpu = run_scratch(MO_BACKEND_CPU, w, &lc), dry = run_scratch(MO_BACKEND_DRY, w, &ld);
        CHECK_MSG(lc == 0 && ld == 0, "%s: scratch not given back", name[w]);
        CHECK_MSG(cpu >= want[w] && want[w] > 0, "%s: workspace peak rose %llu < scratch %zu", name[w],
                  (unsigned long long)cpu, want[w]);
        CHECK_MSG(cpu == dry, "%s: dry workspace peak %llu != cpu %llu", name[w], (unsigned long long)dry,
                  (unsigned long long)cpu);
    }
    CHECK_EQ_U64(mo_nonfinite_scratch_bytes(0), 0);
    CHECK_EQ_U64(mo_nonfinite_scratch_bytes(5), sizeof(int));
}

int main(void) {
    test_rng_seed(&rng, 2024);
    CHECK_OK(mo_allocator_create(&ha, MO_ALLOC_CACHING, MO_BACKEND_CPU, 0, NULL));
    CHECK_OK(mo_ctx_create(&hc, MO_BACKEND_CPU, ha));
    if (!hc) return test_finish();
    const mo_dtype dts[2] = {MO_F16, MO_BF16};
    for (int k = 0; k < 2; k++) {
        mo_dtype dt = dts[k];
        printf("%s\n", mo_dtype_name(dt));
        test_encoder(dt);
        test_layernorm(dt, 5, 37);
        test_layernorm(dt, 16, 768);
        test_layernorm_sum(dt, 5, 37);
        test_layernorm_sum(dt, 16, 768);
        test_gelu(dt);
        test_residual(dt);
        // dloss: mean over rows, times the fp16 loss scale for fp16 (keeps small probabilities normal)
        test_crossentropy(dt, 2, 3, 1000, (dt == MO_F16 ? 65536.0f : 1.0f) / 6.0f);
        test_crossentropy(dt, 1, 2, 37, 0.5f);
        test_cast(dt);
        test_adamw(dt);
    }
    test_nonfinite();
    test_routing();
    test_scratch_contract();
    mo_ctx_destroy(hc);
    mo_allocator_destroy(ha);
    return test_finish();
}
