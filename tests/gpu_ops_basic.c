// GPU test of the basic ops (encoder, layernorm, gelu, residual, crossentropy, adamw, sumsq): the cuda
// kernel against the cpu reference on fresh random data (seed printed), at GPT-2 small sizes and at odd
// sizes (C=37, N=5, V=50257, unaligned pointers) that take the scalar and tail paths.
// Outputs that are overwritten are poisoned with NaN before every run, so an element a kernel fails to
// write fails the check; "+=" outputs start from random values. Every op runs twice on identical inputs
// and the two results must be the same bits (determinism).
//
// Tolerances (relative L2 error, CHECK_REL), per op and why:
//   encoder fwd/bwd 1e-6   one add per element, and the backward adds in the cpu's order: bit-identical
//                          is expected; 1e-6 leaves room only for denormal flushing.
//   residual/accumulate 1e-6   one IEEE add per element: bit-identical expected.
//   adamw 1e-6             the kernel performs the cpu's float operations in the cpu's order with
//                          __f*_rn intrinsics (no FMA, no fast math): bit-identical expected.
//   gelu fwd/bwd 1e-5      tanh from expm1f + IEEE division (a few ulp vs glibc tanhf); sech^2 as 1 - t^2
//                          instead of 1/cosh^2; FMA contraction. Expected ~1e-7.
//   layernorm fwd 1e-5     row sums over C in another order (warp tree vs sequential), FMA. Expected ~1e-7.
//   layernorm bwd dinp 1e-5; dweight/dbias 2e-5: sums over N = 4096 rows in fp32, sequential on the cpu
//                          (error ~eps*sqrt(N/2) = 1.4e-6 relative for random-sign terms) vs a blocked
//                          tree on the GPU; 2e-5 keeps a >10x margin.
//   crossentropy 1e-5      __expf/__logf (fast math, ~1e-6 relative for the logit ranges used) and a
//                          tree sum of exp over V = 50304 vs the cpu's double sum. Expected ~1e-6.
//   sumsq 1e-10 (double)   both sides accumulate squares in double; only the order differs (~1e-15).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "strategies/alloc.h"
#include "tests/testlib.h"

#define TOL_EXACT 1e-6
#define TOL_GELU 1e-5
#define TOL_LN 1e-5
#define TOL_LN_PARAM 2e-5
#define TOL_CE 1e-5
#define TOL_SUMSQ 1e-10

static mo_allocator *ga, *ha;
static mo_ctx *gc, *hc; // cuda context; cpu context for the references
static test_rng rng;

static void *hnew(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) { fprintf(stderr, "out of host memory (%zu bytes)\n", bytes); exit(1); }
    return p;
}
static float *fnew(size_t n) { return hnew(n * sizeof(float)); }
static float *frand(size_t n, float lo, float hi) { float *p = fnew(n); test_fill_uniform(&rng, p, n, lo, hi); return p; }
static float *fdup(const float *x, size_t n) { float *p = fnew(n); memcpy(p, x, n * sizeof(float)); return p; }

static void *dnew(size_t bytes) {
    void *p = NULL;
    if (!CHECK_OK(mo_alloc(ga, bytes, MO_CAT_ACTIVATION, &p))) exit(test_finish());
    return p;
}
static void dfree(void *p) { CHECK_OK(mo_free(ga, p)); }
static void up(void *d, const void *h, size_t bytes) { CHECK_OK(mo_memcpy_h2d(gc, d, h, bytes)); }
static void down(void *h, const void *d, size_t bytes) { CHECK_OK(mo_memcpy_d2h(gc, h, d, bytes)); }
static float *dup_f(const float *h, size_t n) { float *d = dnew(n * sizeof(float) + 16); up(d, h, n * sizeof(float)); return d; }
static void poison(float *d, size_t n) {
    float *h = fnew(n);
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    up(d, h, n * sizeof(float));
    free(h);
}

static void same_bits(const void *a, const void *b, size_t bytes, const char *what) {
    CHECK_MSG(memcmp(a, b, bytes) == 0, "%s: two cuda runs on the same inputs differ (not deterministic)", what);
}
static void note_identical(const float *a, const float *b, size_t n, const char *what) {
    printf("  %-40s %s the cpu reference\n", what, memcmp(a, b, n * sizeof(float)) ? "differs in bits from" : "bit-identical to");
}

// ---------------------------------------------------------------------------------------------
static void gpu_encoder(int B, int T, int C, int V, int tok_range) {
    printf("encoder B=%d T=%d C=%d V=%d tokens in [0,%d)\n", B, T, C, V, tok_range);
    size_t BT = (size_t)B * T, BTC = BT * C, VC = (size_t)V * C, TC = (size_t)T * C;
    int *tok = hnew(BT * sizeof(int));
    for (size_t i = 0; i < BT; i++) tok[i] = (int)(test_rng_u64(&rng) % (uint64_t)tok_range);
    float *wte = frand(VC, -1, 1), *wpe = frand(TC, -1, 1), *dout = frand(BTC, -1, 1);
    float *dwte0 = frand(VC, -1, 1), *dwpe0 = frand(TC, -1, 1);

    float *out_ref = fnew(BTC), *dwte_ref = fdup(dwte0, VC), *dwpe_ref = fdup(dwpe0, TC);
    CHECK_OK(mo_encoder_forward(hc, out_ref, tok, wte, wpe, B, T, C));
    CHECK_OK(mo_encoder_backward(hc, dwte_ref, dwpe_ref, dout, tok, tok, B, T, C, V));

    int *d_tok = dnew(BT * sizeof(int));
    up(d_tok, tok, BT * sizeof(int));
    float *d_wte = dup_f(wte, VC), *d_wpe = dup_f(wpe, TC), *d_dout = dup_f(dout, BTC);
    float *d_out = dnew(BTC * sizeof(float)), *d_dwte = dnew(VC * sizeof(float)), *d_dwpe = dnew(TC * sizeof(float));
    float *o1 = fnew(BTC), *o2 = fnew(BTC), *te1 = fnew(VC), *te2 = fnew(VC), *pe1 = fnew(TC), *pe2 = fnew(TC);
    for (int run = 0; run < 2; run++) {
        poison(d_out, BTC);
        CHECK_OK(mo_encoder_forward(gc, d_out, d_tok, d_wte, d_wpe, B, T, C));
        down(run ? o2 : o1, d_out, BTC * sizeof(float));
        up(d_dwte, dwte0, VC * sizeof(float));
        up(d_dwpe, dwpe0, TC * sizeof(float));
        CHECK_OK(mo_encoder_backward(gc, d_dwte, d_dwpe, d_dout, d_tok, tok, B, T, C, V));
        down(run ? te2 : te1, d_dwte, VC * sizeof(float));
        down(run ? pe2 : pe1, d_dwpe, TC * sizeof(float));
    }
    CHECK_REL(o1, out_ref, BTC, TOL_EXACT);
    CHECK_REL(te1, dwte_ref, VC, TOL_EXACT);
    CHECK_REL(pe1, dwpe_ref, TC, TOL_EXACT);
    note_identical(te1, dwte_ref, VC, "dwte");
    same_bits(o1, o2, BTC * sizeof(float), "encoder forward");
    same_bits(te1, te2, VC * sizeof(float), "encoder backward dwte");
    same_bits(pe1, pe2, TC * sizeof(float), "encoder backward dwpe");

    free(tok); free(wte); free(wpe); free(dout); free(dwte0); free(dwpe0); free(out_ref); free(dwte_ref);
    free(dwpe_ref); free(o1); free(o2); free(te1); free(te2); free(pe1); free(pe2);
    dfree(d_tok); dfree(d_wte); dfree(d_wpe); dfree(d_dout); dfree(d_out); dfree(d_dwte); dfree(d_dwpe);
}

// ---------------------------------------------------------------------------------------------
static void gpu_layernorm(int N, int C) {
    printf("layernorm N=%d C=%d\n", N, C);
    size_t NC = (size_t)N * C;
    float *inp = frand(NC, -2, 3), *w = frand(C, 0.5f, 1.5f), *b = frand(C, -0.5f, 0.5f), *dout = frand(NC, -1, 1);
    float *dinp0 = frand(NC, -1, 1), *dw0 = frand(C, -1, 1), *db0 = frand(C, -1, 1);
    float *out_ref = fnew(NC), *mean_ref = fnew(N), *rstd_ref = fnew(N);
    CHECK_OK(mo_layernorm_forward(hc, out_ref, mean_ref, rstd_ref, inp, w, b, N, C));
    float *dinp_ref = fdup(dinp0, NC), *dw_ref = fdup(dw0, C), *db_ref = fdup(db0, C);
    // the backward of both backends gets the cpu's mean/rstd, so it is tested on its own
    CHECK_OK(mo_layernorm_backward(hc, dinp_ref, dw_ref, db_ref, dout, inp, w, mean_ref, rstd_ref, N, C));

    float *d_inp = dup_f(inp, NC), *d_w = dup_f(w, C), *d_b = dup_f(b, C), *d_dout = dup_f(dout, NC);
    float *d_mr = dup_f(mean_ref, N), *d_rr = dup_f(rstd_ref, N);
    float *d_out = dnew(NC * 4), *d_mean = dnew((size_t)N * 4), *d_rstd = dnew((size_t)N * 4);
    float *d_dinp = dnew(NC * 4), *d_dw = dnew((size_t)C * 4), *d_db = dnew((size_t)C * 4);
    float *o[2] = {fnew(NC), fnew(NC)}, *m[2] = {fnew(N), fnew(N)}, *r[2] = {fnew(N), fnew(N)};
    float *gi[2] = {fnew(NC), fnew(NC)}, *gw[2] = {fnew(C), fnew(C)}, *gb[2] = {fnew(C), fnew(C)};
    for (int run = 0; run < 2; run++) {
        poison(d_out, NC);
        poison(d_mean, N);
        poison(d_rstd, N);
        CHECK_OK(mo_layernorm_forward(gc, d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C));
        down(o[run], d_out, NC * 4);
        down(m[run], d_mean, (size_t)N * 4);
        down(r[run], d_rstd, (size_t)N * 4);
        up(d_dinp, dinp0, NC * 4);
        up(d_dw, dw0, (size_t)C * 4);
        up(d_db, db0, (size_t)C * 4);
        CHECK_OK(mo_layernorm_backward(gc, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mr, d_rr, N, C));
        down(gi[run], d_dinp, NC * 4);
        down(gw[run], d_dw, (size_t)C * 4);
        down(gb[run], d_db, (size_t)C * 4);
    }
    CHECK_REL(o[0], out_ref, NC, TOL_LN);
    CHECK_REL(m[0], mean_ref, N, TOL_LN);
    CHECK_REL(r[0], rstd_ref, N, TOL_LN);
    CHECK_REL(gi[0], dinp_ref, NC, TOL_LN);
    CHECK_REL(gw[0], dw_ref, C, TOL_LN_PARAM);
    CHECK_REL(gb[0], db_ref, C, TOL_LN_PARAM);
    same_bits(o[0], o[1], NC * 4, "layernorm forward out");
    same_bits(m[0], m[1], (size_t)N * 4, "layernorm forward mean");
    same_bits(r[0], r[1], (size_t)N * 4, "layernorm forward rstd");
    same_bits(gi[0], gi[1], NC * 4, "layernorm backward dinp");
    same_bits(gw[0], gw[1], (size_t)C * 4, "layernorm backward dweight");
    same_bits(gb[0], gb[1], (size_t)C * 4, "layernorm backward dbias");

    free(inp); free(w); free(b); free(dout); free(dinp0); free(dw0); free(db0); free(out_ref); free(mean_ref);
    free(rstd_ref); free(dinp_ref); free(dw_ref); free(db_ref);
    for (int k = 0; k < 2; k++) { free(o[k]); free(m[k]); free(r[k]); free(gi[k]); free(gw[k]); free(gb[k]); }
    dfree(d_inp); dfree(d_w); dfree(d_b); dfree(d_dout); dfree(d_mr); dfree(d_rr); dfree(d_out); dfree(d_mean);
    dfree(d_rstd); dfree(d_dinp); dfree(d_dw); dfree(d_db);
}

// ---------------------------------------------------------------------------------------------
// off: element offset of every device pointer (1 makes them 4-byte but not 16-byte aligned: scalar path)
static void gpu_gelu(size_t n, int off) {
    printf("gelu n=%zu offset=%d\n", n, off);
    float *x = frand(n, -6, 6), *dout = frand(n, -1, 1);
    float *out_ref = fnew(n), *dinp_ref = fnew(n);
    CHECK_OK(mo_gelu_forward(hc, out_ref, x, n));
    CHECK_OK(mo_gelu_backward(hc, dinp_ref, x, dout, n));
    float *bx = dnew((n + off) * 4), *bd = dnew((n + off) * 4), *bo = dnew((n + off) * 4);
    float *d_x = bx + off, *d_dout = bd + off, *d_o = bo + off;
    up(d_x, x, n * 4);
    float *a[2] = {fnew(n), fnew(n)}, *g[2] = {fnew(n), fnew(n)}, *ga_[2] = {fnew(n), fnew(n)};
    for (int run = 0; run < 2; run++) {
        poison(d_o, n);
        CHECK_OK(mo_gelu_forward(gc, d_o, d_x, n));
        down(a[run], d_o, n * 4);
        up(d_dout, dout, n * 4);
        poison(d_o, n);
        CHECK_OK(mo_gelu_backward(gc, d_o, d_x, d_dout, n));
        down(g[run], d_o, n * 4);
        CHECK_OK(mo_gelu_backward(gc, d_dout, d_x, d_dout, n)); // dinp aliases dout
        down(ga_[run], d_dout, n * 4);
    }
    CHECK_REL(a[0], out_ref, n, TOL_GELU);
    CHECK_REL(g[0], dinp_ref, n, TOL_GELU);
    CHECK_MSG(memcmp(ga_[0], g[0], n * 4) == 0, "gelu backward in place (dinp == dout) differs from out of place");
    same_bits(a[0], a[1], n * 4, "gelu forward");
    same_bits(g[0], g[1], n * 4, "gelu backward");
    free(x); free(dout); free(out_ref); free(dinp_ref);
    for (int k = 0; k < 2; k++) { free(a[k]); free(g[k]); free(ga_[k]); }
    dfree(bx); dfree(bd); dfree(bo);
}

// ---------------------------------------------------------------------------------------------
static void gpu_residual(size_t n, int off) {
    printf("residual n=%zu offset=%d\n", n, off);
    float *a = frand(n, -1, 1), *b = frand(n, -1, 1), *ref = fnew(n);
    CHECK_OK(mo_residual_forward(hc, ref, a, b, n));
    float *ba = dnew((n + off) * 4), *bb = dnew((n + off) * 4), *bo = dnew((n + off) * 4);
    float *d_a = ba + off, *d_b = bb + off, *d_o = bo + off;
    up(d_b, b, n * 4);
    float *r[2] = {fnew(n), fnew(n)}, *al = fnew(n), *acc = fnew(n);
    for (int run = 0; run < 2; run++) {
        up(d_a, a, n * 4);
        poison(d_o, n);
        CHECK_OK(mo_residual_forward(gc, d_o, d_a, d_b, n));
        down(r[run], d_o, n * 4);
    }
    CHECK_OK(mo_residual_forward(gc, d_a, d_a, d_b, n)); // out aliases a
    down(al, d_a, n * 4);
    up(d_a, a, n * 4);
    CHECK_OK(mo_accumulate(gc, d_a, d_b, n));
    down(acc, d_a, n * 4);
    CHECK_REL(r[0], ref, n, TOL_EXACT);
    CHECK_REL(al, ref, n, TOL_EXACT);
    CHECK_REL(acc, ref, n, TOL_EXACT);
    note_identical(r[0], ref, n, "residual");
    same_bits(r[0], r[1], n * 4, "residual forward");
    free(a); free(b); free(ref); free(r[0]); free(r[1]); free(al); free(acc);
    dfree(ba); dfree(bb); dfree(bo);
}

// ---------------------------------------------------------------------------------------------
static void gpu_crossentropy(int B, int T, int V) {
    printf("crossentropy B=%d T=%d V=%d\n", B, T, V);
    size_t N = (size_t)B * T, NV = N * V;
    float *x = frand(NV, -8, 8);
    int *tg = hnew(N * sizeof(int));
    for (size_t i = 0; i < N; i++) tg[i] = (int)(test_rng_u64(&rng) % (uint64_t)V);
    tg[0] = V - 1; // the last column (a tail element when V % 4 != 0)
    if (N > 2) tg[1] = -1, tg[2] = V; // invalid targets: NaN loss, no one-hot term
    const float dloss = 1.0f / (float)N;
    float *g_ref = fdup(x, NV), *l_ref = fnew(N);
    CHECK_OK(mo_crossentropy_fused(hc, l_ref, g_ref, tg, B, T, V, dloss));
    int *d_tg = dnew(N * sizeof(int));
    up(d_tg, tg, N * sizeof(int));
    float *d_x = dnew(NV * 4), *d_l = dnew(N * 4);
    float *g[2] = {fnew(NV), fnew(NV)}, *l[2] = {fnew(N), fnew(N)};
    for (int run = 0; run < 2; run++) {
        up(d_x, x, NV * 4);
        poison(d_l, N);
        CHECK_OK(mo_crossentropy_fused(gc, d_l, d_x, d_tg, B, T, V, dloss));
        down(g[run], d_x, NV * 4);
        down(l[run], d_l, N * 4);
    }
    if (N > 2) {
        CHECK_MSG(isnan(l[0][1]) && isnan(l[0][2]) && isnan(l_ref[1]) && isnan(l_ref[2]),
                  "crossentropy V=%d: invalid targets must give NaN losses", V);
        l[0][1] = l[0][2] = l[1][1] = l[1][2] = l_ref[1] = l_ref[2] = 0.0f; // the rest compared as usual
    }
    CHECK_REL(l[0], l_ref, N, TOL_CE);
    CHECK_REL(g[0], g_ref, NV, TOL_CE);
    same_bits(l[0], l[1], N * 4, "crossentropy losses");
    same_bits(g[0], g[1], NV * 4, "crossentropy dlogits");
    free(x); free(tg); free(g_ref); free(l_ref);
    for (int k = 0; k < 2; k++) { free(g[k]); free(l[k]); }
    dfree(d_tg); dfree(d_x); dfree(d_l);
}

// ---------------------------------------------------------------------------------------------
static void gpu_adamw(size_t n, int off) {
    printf("adamw n=%zu offset=%d\n", n, off);
    float *p = frand(n, -1, 1), *g = frand(n, -1, 1), *m = frand(n, -0.1f, 0.1f), *v = frand(n, 0.0f, 0.01f);
    const float lr = 3e-4f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, scale = 0.37f;
    const int t = 5;
    float *p_ref = fdup(p, n), *m_ref = fdup(m, n), *v_ref = fdup(v, n);
    CHECK_OK(mo_adamw(hc, p_ref, g, m_ref, v_ref, n, lr, b1, b2, eps, wd, t, scale));
    float *bp = dnew((n + off) * 4), *bg = dnew((n + off) * 4), *bm = dnew((n + off) * 4), *bv = dnew((n + off) * 4);
    float *d_p = bp + off, *d_g = bg + off, *d_m = bm + off, *d_v = bv + off;
    up(d_g, g, n * 4);
    float *rp[2] = {fnew(n), fnew(n)}, *rm[2] = {fnew(n), fnew(n)}, *rv[2] = {fnew(n), fnew(n)};
    for (int run = 0; run < 2; run++) {
        up(d_p, p, n * 4);
        up(d_m, m, n * 4);
        up(d_v, v, n * 4);
        CHECK_OK(mo_adamw(gc, d_p, d_g, d_m, d_v, n, lr, b1, b2, eps, wd, t, scale));
        down(rp[run], d_p, n * 4);
        down(rm[run], d_m, n * 4);
        down(rv[run], d_v, n * 4);
    }
    CHECK_REL(rp[0], p_ref, n, TOL_EXACT);
    CHECK_REL(rm[0], m_ref, n, TOL_EXACT);
    CHECK_REL(rv[0], v_ref, n, TOL_EXACT);
    note_identical(rp[0], p_ref, n, "adamw param");
    same_bits(rp[0], rp[1], n * 4, "adamw param");
    same_bits(rm[0], rm[1], n * 4, "adamw m");
    same_bits(rv[0], rv[1], n * 4, "adamw v");
    free(p); free(g); free(m); free(v); free(p_ref); free(m_ref); free(v_ref);
    for (int k = 0; k < 2; k++) { free(rp[k]); free(rm[k]); free(rv[k]); }
    dfree(bp); dfree(bg); dfree(bm); dfree(bv);
}

// ---------------------------------------------------------------------------------------------
static void gpu_sumsq(size_t n, int off) {
    printf("sumsq n=%zu offset=%d\n", n, off);
    float *g = frand(n, -2, 2);
    double ref = -1, r1 = -1, r2 = -2;
    CHECK_OK(mo_sumsq(hc, &ref, g, n));
    float *bg = dnew((n + off) * 4), *d_g = bg + off;
    up(d_g, g, n * 4);
    CHECK_OK(mo_sumsq(gc, &r1, d_g, n));
    CHECK_OK(mo_sumsq(gc, &r2, d_g, n));
    double rel = ref != 0 ? fabs(r1 - ref) / fabs(ref) : fabs(r1);
    int ok = isfinite(r1) && rel <= TOL_SUMSQ;
    if (ok) printf("  %-40s rel err %.3e (tol %.1e)\n", "sumsq", rel, TOL_SUMSQ);
    CHECK_MSG(ok, "sumsq n=%zu: cuda %.17g vs cpu %.17g (rel %.3e)", n, r1, ref, rel);
    same_bits(&r1, &r2, sizeof r1, "sumsq");
    free(g);
    dfree(bg);
}

int main(void) {
    test_require_gpu();
    uint64_t seed = test_seed_from_time();
    test_rng_seed(&rng, seed);
    CHECK_OK(mo_allocator_create(&ga, MO_ALLOC_CACHING, MO_BACKEND_CUDA, 0, NULL));
    CHECK_OK(mo_allocator_create(&ha, MO_ALLOC_CACHING, MO_BACKEND_CPU, 0, NULL));
    if (!ga || !ha) return test_finish();
    CHECK_OK(mo_ctx_create(&gc, MO_BACKEND_CUDA, ga));
    CHECK_OK(mo_ctx_create(&hc, MO_BACKEND_CPU, ha));
    if (!gc || !hc) return test_finish();

    gpu_encoder(4, 1024, 768, 50304, 50304); // GPT-2 small, float4 path
    gpu_encoder(8, 512, 768, 1024, 16);      // long runs of repeated tokens
    gpu_encoder(2, 5, 37, 37, 37);           // odd C: scalar path

    gpu_layernorm(4096, 768);  // B*T = 4 x 1024
    gpu_layernorm(5, 37);      // scalar path, one block
    gpu_layernorm(1000, 1600); // GPT-2 XL width: 4 warps per block, > 48 KiB shared memory
    gpu_layernorm(7, 12288);   // 1 warp per block, 96 KiB shared memory
    // widths of 1 to 9 float4 groups a lane (C / 4 over 32 lanes), 5000 rows: more than the backward's
    // 512 blocks x 8 warps take in one round
    gpu_layernorm(33, 32);
    gpu_layernorm(200, 256);
    gpu_layernorm(5000, 512);
    gpu_layernorm(77, 516);
    gpu_layernorm(64, 896);
    gpu_layernorm(50, 1024);
    gpu_layernorm(40, 1028);

    gpu_gelu((size_t)4096 * 3072 + 3, 0); // the MLP activation of GPT-2 small, plus a tail
    gpu_gelu(5, 0);
    gpu_gelu(1001, 1);

    gpu_residual((size_t)4096 * 768 + 1, 0);
    gpu_residual(1001, 1);

    gpu_crossentropy(4, 256, 50304); // padded GPT-2 vocabulary: register kernel, 25 float4 a thread
    gpu_crossentropy(2, 16, 51200);  // register kernel full to the last float4 of every thread
    gpu_crossentropy(1, 8, 51204);   // one float4 more than it holds: the float4 loop kernel
    gpu_crossentropy(2, 8, 32768);   // register kernel, 16 a thread
    gpu_crossentropy(2, 8, 12000);   // 8 a thread
    gpu_crossentropy(3, 4, 8);       // 4 a thread, most threads past V
    gpu_crossentropy(2, 64, 50257);  // real GPT-2 vocabulary: scalar path
    gpu_crossentropy(1, 5, 37);

    gpu_adamw((size_t)10 * 1024 * 1024 + 3, 0);
    gpu_adamw(5, 0);
    gpu_adamw(1001, 1);

    gpu_sumsq(124439808, 0); // GPT-2 small parameter count
    gpu_sumsq(5, 0);
    gpu_sumsq(1001, 1);
    {
        double z = -1;
        CHECK_OK(mo_sumsq(gc, &z, NULL, 0));
        CHECK(z == 0.0);
    }

    mo_ctx_destroy(gc);
    mo_ctx_destroy(hc);
    mo_allocator_destroy(ga);
    mo_allocator_destroy(ha);
    return test_finish();
}
