// GPU test of the mixed-precision ops (ops_mixed.h), fp16 and bf16: each cuda kernel against the cpu
// reference (the same mixed op on the cpu backend) on fresh random data (seed printed), at GPT-2 small
// sizes and at odd sizes / unaligned pointers that take the scalar and tail paths. Overwritten outputs
// are poisoned first (16-bit NaN patterns, fp32 NaN), "+=" outputs start from random values; every op
// runs twice on identical inputs and the two results must be the same bits (determinism). Results are
// compared as fp32 (16-bit outputs converted exactly) by relative L2 error, CHECK_REL.
//
// Tolerances and why:
//   16-bit outputs (activations, activation gradients): bf16 2e-3, fp16 2.5e-4. Both backends compute
//     the same fp32 value up to the fp32 ops' own cpu/cuda differences (<= 1e-5 relative, see
//     gpu_ops_basic.c) and round it once to nearest even, so they differ only where that value straddles
//     a rounding boundary: a small fraction of elements (printed), each by one ulp -> expected error
//     ~1e-5 (bf16), ~1e-5 (fp16). The bounds sit below the error a wrong rounding (truncation instead of
//     nearest-even differs by one ulp in about half the elements: ~4e-3 for bf16, ~5e-4 for fp16) or a
//     lost element would give, and well above the expected value.
//   fp32 parameter gradients of the encoder, adamw master/m/v: 1e-6 (the same float operations in the
//     same order: bit-identical expected). LayerNorm mean/rstd 1e-5, dweight/dbias 2e-5, losses 1e-5:
//     as the fp32 ops (gpu_ops_basic.c), the inputs are exact conversions of the 16-bit tensors.
//   adamw's 16-bit copy, the casts and the non-finite flag: exact.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "kernels/layernorm.h"
#include "kernels/ops.h"
#include "kernels/ops_mixed.h"
#include "strategies/alloc.h"
#include "tests/testlib.h"

#define TOL_EXACT 1e-6
#define TOL_STAT 1e-5
#define TOL_LN_PARAM 2e-5
#define TOL_CE 1e-5

static mo_allocator *ga, *ha;
static mo_ctx *gc, *hc;
static test_rng rng;

static double tol16(mo_dtype dt) { return dt == MO_BF16 ? 2e-3 : 2.5e-4; }

static void *hnew(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) { fprintf(stderr, "out of host memory (%zu bytes)\n", bytes); exit(1); }
    return p;
}
static float *fnew(size_t n) { return hnew(n * sizeof(float)); }
static uint16_t *hnew16(size_t n) { return hnew(n * sizeof(uint16_t)); }
static float *frand(size_t n, float lo, float hi) { float *p = fnew(n); test_fill_uniform(&rng, p, n, lo, hi); return p; }
static float *fdup(const float *x, size_t n) { float *p = fnew(n); memcpy(p, x, n * sizeof(float)); return p; }
static uint16_t *h16dup(const uint16_t *x, size_t n) { uint16_t *p = hnew16(n); memcpy(p, x, n * 2); return p; }
static uint16_t *rand16(mo_dtype dt, size_t n, float lo, float hi) {
    float *f = frand(n, lo, hi);
    uint16_t *h = hnew16(n);
    mo_convert_from_f32(dt, h, f, n);
    free(f);
    return h;
}
static float *to_f32(mo_dtype dt, const uint16_t *x, size_t n) { float *f = fnew(n); mo_convert_to_f32(dt, f, x, n); return f; }

static void *dnew(size_t bytes) {
    void *p = NULL;
    if (!CHECK_OK(mo_alloc(ga, bytes + 16, MO_CAT_ACTIVATION, &p))) exit(test_finish());
    return p;
}
static void dfree(void *p) { CHECK_OK(mo_free(ga, p)); }
static void up(void *d, const void *h, size_t bytes) { CHECK_OK(mo_memcpy_h2d(gc, d, h, bytes)); }
static void down(void *h, const void *d, size_t bytes) { CHECK_OK(mo_memcpy_d2h(gc, h, d, bytes)); }
static void *dup_d(const void *h, size_t bytes) { void *d = dnew(bytes); up(d, h, bytes); return d; }
static void poison16(mo_dtype dt, void *d, size_t n) {
    uint16_t *h = hnew16(n);
    for (size_t i = 0; i < n; i++) h[i] = dt == MO_F16 ? 0x7e00u : 0x7fc0u; // quiet NaN
    up(d, h, n * 2);
    free(h);
}
static void poison32(float *d, size_t n) {
    float *h = fnew(n);
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    up(d, h, n * 4);
    free(h);
}
static void same_bits(const void *a, const void *b, size_t bytes, const char *what, mo_dtype dt) {
    CHECK_MSG(memcmp(a, b, bytes) == 0, "%s %s: two cuda runs on the same inputs differ (not deterministic)",
              mo_dtype_name(dt), what);
}
// A 16-bit cuda result against the 16-bit cpu result: relative L2 as fp32, and the share of elements
// whose bits differ (printed).
static void check16(mo_dtype dt, const uint16_t *got, const uint16_t *want, size_t n, const char *what) {
    float *g = to_f32(dt, got, n), *w = to_f32(dt, want, n);
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) diff += got[i] != want[i];
    double rel = test_rel_error(g, w, n);
    printf("  %-5s %-30s rel err %.2e (tol %.1e), %zu of %zu elements differ in bits\n", mo_dtype_name(dt), what, rel,
           tol16(dt), diff, n);
    CHECK_MSG(rel <= tol16(dt), "%s %s: rel err %.3e > %.1e", mo_dtype_name(dt), what, rel, tol16(dt));
    free(g);
    free(w);
}
static void check32(mo_dtype dt, const float *got, const float *want, size_t n, double tol, const char *what) {
    double rel = test_rel_error(got, want, n);
    printf("  %-5s %-30s rel err %.2e (tol %.1e)%s\n", mo_dtype_name(dt), what, rel, tol,
           memcmp(got, want, n * 4) ? "" : ", bit-identical");
    CHECK_MSG(rel <= tol, "%s %s: rel err %.3e > %.1e", mo_dtype_name(dt), what, rel, tol);
}

// ---------------------------------------------------------------------------------------------
static void gpu_encoder(mo_dtype dt, int B, int T, int C, int V, int tok_range) {
    printf("encoder %s B=%d T=%d C=%d V=%d tokens in [0,%d)\n", mo_dtype_name(dt), B, T, C, V, tok_range);
    size_t BT = (size_t)B * T, BTC = BT * C, VC = (size_t)V * C, TC = (size_t)T * C;
    int *tok = hnew(BT * sizeof(int));
    for (size_t i = 0; i < BT; i++) tok[i] = (int)(test_rng_u64(&rng) % (uint64_t)tok_range);
    uint16_t *wte = rand16(dt, VC, -1, 1), *wpe = rand16(dt, TC, -1, 1), *dout = rand16(dt, BTC, -1, 1);
    float *dwte0 = frand(VC, -1, 1), *dwpe0 = frand(TC, -1, 1);
    uint16_t *out_ref = hnew16(BTC);
    float *dwte_ref = fdup(dwte0, VC), *dwpe_ref = fdup(dwpe0, TC);
    CHECK_OK(mo_encoder_forward_mixed(hc, dt, out_ref, tok, wte, wpe, B, T, C));
    CHECK_OK(mo_encoder_backward_mixed(hc, dt, dwte_ref, dwpe_ref, dout, tok, tok, B, T, C, V));

    int *d_tok = dup_d(tok, BT * sizeof(int));
    void *d_wte = dup_d(wte, VC * 2), *d_wpe = dup_d(wpe, TC * 2), *d_dout = dup_d(dout, BTC * 2);
    void *d_out = dnew(BTC * 2);
    float *d_dwte = dnew(VC * 4), *d_dwpe = dnew(TC * 4);
    uint16_t *o[2] = {hnew16(BTC), hnew16(BTC)};
    float *te[2] = {fnew(VC), fnew(VC)}, *pe[2] = {fnew(TC), fnew(TC)};
    for (int run = 0; run < 2; run++) {
        poison16(dt, d_out, BTC);
        CHECK_OK(mo_encoder_forward_mixed(gc, dt, d_out, d_tok, d_wte, d_wpe, B, T, C));
        down(o[run], d_out, BTC * 2);
        up(d_dwte, dwte0, VC * 4);
        up(d_dwpe, dwpe0, TC * 4);
        CHECK_OK(mo_encoder_backward_mixed(gc, dt, d_dwte, d_dwpe, d_dout, d_tok, tok, B, T, C, V));
        down(te[run], d_dwte, VC * 4);
        down(pe[run], d_dwpe, TC * 4);
    }
    check16(dt, o[0], out_ref, BTC, "encoder forward");
    check32(dt, te[0], dwte_ref, VC, TOL_EXACT, "encoder backward dwte");
    check32(dt, pe[0], dwpe_ref, TC, TOL_EXACT, "encoder backward dwpe");
    same_bits(o[0], o[1], BTC * 2, "encoder forward", dt);
    same_bits(te[0], te[1], VC * 4, "encoder dwte", dt);
    same_bits(pe[0], pe[1], TC * 4, "encoder dwpe", dt);
    free(tok); free(wte); free(wpe); free(dout); free(dwte0); free(dwpe0); free(out_ref); free(dwte_ref); free(dwpe_ref);
    for (int k = 0; k < 2; k++) { free(o[k]); free(te[k]); free(pe[k]); }
    dfree(d_tok); dfree(d_wte); dfree(d_wpe); dfree(d_dout); dfree(d_out); dfree(d_dwte); dfree(d_dwpe);
}

// ---------------------------------------------------------------------------------------------
// off: element offset of the 16-bit device pointers (1: 2-byte aligned only, the scalar path)
static void gpu_layernorm(mo_dtype dt, int N, int C, int off) {
    printf("layernorm %s N=%d C=%d offset=%d\n", mo_dtype_name(dt), N, C, off);
    size_t NC = (size_t)N * C;
    uint16_t *x = rand16(dt, NC, -2, 3), *w = rand16(dt, C, 0.5f, 1.5f), *b = rand16(dt, C, -0.5f, 0.5f);
    uint16_t *dout = rand16(dt, NC, -1, 1), *dinp0 = rand16(dt, NC, -1, 1);
    float *dw0 = frand(C, -1, 1), *db0 = frand(C, -1, 1);
    uint16_t *out_ref = hnew16(NC), *dinp_ref = h16dup(dinp0, NC);
    float *mean_ref = fnew(N), *rstd_ref = fnew(N), *dw_ref = fdup(dw0, C), *db_ref = fdup(db0, C);
    CHECK_OK(mo_layernorm_forward_mixed(hc, dt, out_ref, mean_ref, rstd_ref, x, w, b, N, C));
    // the backward of both backends gets the cpu's mean/rstd, so it is tested on its own
    CHECK_OK(mo_layernorm_backward_mixed(hc, dt, dinp_ref, dw_ref, db_ref, dout, x, w, mean_ref, rstd_ref, N, C));

    uint16_t *bx = dnew((NC + off) * 2), *bw = dnew(((size_t)C + off) * 2), *bb = dnew(((size_t)C + off) * 2);
    uint16_t *bdo = dnew((NC + off) * 2), *bo = dnew((NC + off) * 2), *bdi = dnew((NC + off) * 2);
    uint16_t *d_x = bx + off, *d_w = bw + off, *d_b = bb + off, *d_dout = bdo + off, *d_out = bo + off, *d_dinp = bdi + off;
    up(d_x, x, NC * 2); up(d_w, w, (size_t)C * 2); up(d_b, b, (size_t)C * 2); up(d_dout, dout, NC * 2);
    float *d_mr = dup_d(mean_ref, (size_t)N * 4), *d_rr = dup_d(rstd_ref, (size_t)N * 4);
    float *d_mean = dnew((size_t)N * 4), *d_rstd = dnew((size_t)N * 4), *d_dw = dnew((size_t)C * 4), *d_db = dnew((size_t)C * 4);
    // runs 0 and 1 on the default kernels (register kernels where C allows), run 2 on the loop kernels
    // (MEMOPT_LN=loop): the same bits are asserted, the two kinds doing the same sums in the same order
    uint16_t *o[3] = {hnew16(NC), hnew16(NC), hnew16(NC)}, *gi[3] = {hnew16(NC), hnew16(NC), hnew16(NC)};
    float *m[3] = {fnew(N), fnew(N), fnew(N)}, *r[3] = {fnew(N), fnew(N), fnew(N)};
    float *gw[3] = {fnew(C), fnew(C), fnew(C)}, *gb[3] = {fnew(C), fnew(C), fnew(C)};
    int wave_blocks = 0;
    for (int run = 0; run < 3; run++) {
        gc->ln_loop = run == 2;
        poison16(dt, d_out, NC);
        poison32(d_mean, N);
        poison32(d_rstd, N);
        CHECK_OK(mo_layernorm_forward_mixed(gc, dt, d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C));
        down(o[run], d_out, NC * 2);
        down(m[run], d_mean, (size_t)N * 4);
        down(r[run], d_rstd, (size_t)N * 4);
        up(d_dinp, dinp0, NC * 2);
        up(d_dw, dw0, (size_t)C * 4);
        up(d_db, db0, (size_t)C * 4);
        CHECK_OK(mo_layernorm_backward_mixed(gc, dt, d_dinp, d_dw, d_db, d_dout, d_x, d_w, d_mr, d_rr, N, C));
        down(gi[run], d_dinp, NC * 2);
        down(gw[run], d_dw, (size_t)C * 4);
        down(gb[run], d_db, (size_t)C * 4);
        if (run == 0) wave_blocks = gc->ln_wave.blocks;
    }
    gc->ln_loop = 0;
    // the one-wave launch ran (its block count computed and kept in the context), and the loop kernels' run
    // kept the default kernel's wave (the same rows to the same blocks, so the same bits below)
    if (gc->ln_bwd_wave) {
        printf("  one wave: %d resident blocks (layernorm_backward_blocks %d)\n", wave_blocks, layernorm_backward_blocks(N));
        CHECK_MSG(wave_blocks >= 1, "layernorm backward: MEMOPT_LN_WAVE on but no wave computed (%d blocks)", wave_blocks);
        CHECK_MSG(gc->ln_wave.blocks == wave_blocks, "layernorm backward: MEMOPT_LN=loop changed the wave %d -> %d",
                  wave_blocks, gc->ln_wave.blocks);
    }
    check16(dt, o[0], out_ref, NC, "layernorm forward out");
    check32(dt, m[0], mean_ref, N, TOL_STAT, "layernorm mean");
    check32(dt, r[0], rstd_ref, N, TOL_STAT, "layernorm rstd");
    check16(dt, gi[0], dinp_ref, NC, "layernorm backward dinp");
    check32(dt, gw[0], dw_ref, C, TOL_LN_PARAM, "layernorm backward dweight");
    check32(dt, gb[0], db_ref, C, TOL_LN_PARAM, "layernorm backward dbias");
    // run 1: the same kernels again; run 2: the loop kernels (MEMOPT_LN=loop)
    for (int k = 1; k <= 2; k++) {
        const char *how = k == 1 ? "run twice" : "register vs loop kernels";
        char l[6][64];
        const char *what[6] = {"out", "mean", "rstd", "dinp", "dweight", "dbias"};
        for (int q = 0; q < 6; q++) snprintf(l[q], sizeof l[q], "layernorm %s (%s)", what[q], how);
        same_bits(o[0], o[k], NC * 2, l[0], dt);
        same_bits(m[0], m[k], (size_t)N * 4, l[1], dt);
        same_bits(r[0], r[k], (size_t)N * 4, l[2], dt);
        same_bits(gi[0], gi[k], NC * 2, l[3], dt);
        same_bits(gw[0], gw[k], (size_t)C * 4, l[4], dt);
        same_bits(gb[0], gb[k], (size_t)C * 4, l[5], dt);
    }
    // MEMOPT_LN_WAVE toggled: the backward in G blocks, or in one wave of resident blocks (the default), fewer
    // than G where N is large (N 4096 and 5000 here: G 512). dinp is per row: the default's bits; dweight and
    // dbias are summed over other blocks: against the cpu reference, and the same bits twice.
    const int wave0 = gc->ln_bwd_wave;
    uint16_t *gi2 = hnew16(NC);
    float *gw2[2] = {fnew(C), fnew(C)}, *gb2[2] = {fnew(C), fnew(C)};
    gc->ln_bwd_wave = !wave0;
    for (int k = 0; k < 2; k++) {
        up(d_dinp, dinp0, NC * 2);
        up(d_dw, dw0, (size_t)C * 4);
        up(d_db, db0, (size_t)C * 4);
        CHECK_OK(mo_layernorm_backward_mixed(gc, dt, d_dinp, d_dw, d_db, d_dout, d_x, d_w, d_mr, d_rr, N, C));
        down(gi2, d_dinp, NC * 2);
        down(gw2[k], d_dw, (size_t)C * 4);
        down(gb2[k], d_db, (size_t)C * 4);
    }
    gc->ln_bwd_wave = wave0;
    same_bits(gi[0], gi2, NC * 2, "layernorm dinp (MEMOPT_LN_WAVE toggled)", dt);
    check32(dt, gw2[0], dw_ref, C, TOL_LN_PARAM, "layernorm backward dweight (MEMOPT_LN_WAVE toggled)");
    check32(dt, gb2[0], db_ref, C, TOL_LN_PARAM, "layernorm backward dbias (MEMOPT_LN_WAVE toggled)");
    same_bits(gw2[0], gw2[1], (size_t)C * 4, "layernorm dweight (MEMOPT_LN_WAVE toggled, run twice)", dt);
    same_bits(gb2[0], gb2[1], (size_t)C * 4, "layernorm dbias (MEMOPT_LN_WAVE toggled, run twice)", dt);
    free(gi2); free(gw2[0]); free(gw2[1]); free(gb2[0]); free(gb2[1]);
    // The summing backward (mo_layernorm_backward_sum_mixed: GPT's projection bias gradients): dinp the plain
    // op's bits; dweight and dbias against the cpu reference, and the plain op's bits where both take the same
    // blocks (the plain G, unless the scratch's 2 G_max / 3 rows of 3 C cap it, and all their warps); dsum against
    // the double sums of this run's own dinp (the cpu's dinp differs by an ulp here and there: a bf16 ulp moved a
    // column sum by 3.5e-5 relative on an H100) and, loosely, the cpu's dsum; runs 0 and 1 on the default
    // kernels, 2 on the loop kernels, 3 with MEMOPT_LN_WAVE toggled, the same bits on 0-2.
    if (C <= MO_LN_DSUM_MAX_C) {
        const int blocks = layernorm_backward_blocks(N);
        const int g_plain = wave0 && gc->ln_wave.blocks >= 1 && gc->ln_wave.blocks < blocks ? gc->ln_wave.blocks : blocks;
        const int rows = (2 * blocks > 3 ? 2 * blocks : 3) / 3;
        int warps = 8; // the plain kernel's (layernorm_mixed.cu); the summing one halves them where its slices don't fit
        while (warps > 1 && (size_t)warps * 2 * C * 4 > (size_t)96 * 1024) warps /= 2;
        mo_device_info di;
        memset(&di, 0, sizeof di);
        CHECK_OK(mo_device_query(0, &di));
        const int same_blocks = g_plain <= rows && (size_t)warps * 3 * C * 4 <= (size_t)di.smem_block_optin;
        printf("  summing backward: G %d (plain %d)%s\n", g_plain < rows ? g_plain : rows, g_plain,
               same_blocks ? ", the plain op's blocks" : "");
        float *ds0 = frand(C, -1, 1), *ds_ref = fdup(ds0, C), *dw_ref2 = fdup(dw0, C), *db_ref2 = fdup(db0, C);
        uint16_t *di_ref2 = h16dup(dinp0, NC);
        CHECK_OK(mo_layernorm_backward_sum_mixed(hc, dt, di_ref2, dw_ref2, db_ref2, ds_ref, dout, x, w, mean_ref, rstd_ref,
                                                 N, C));
        float *d_ds = dnew((size_t)C * 4);
        uint16_t *si[4];
        float *sw[4], *sb[4], *sd[4];
        for (int run = 0; run < 4; run++) {
            si[run] = hnew16(NC); sw[run] = fnew(C); sb[run] = fnew(C); sd[run] = fnew(C);
            gc->ln_loop = run == 2;
            gc->ln_bwd_wave = run == 3 ? !wave0 : wave0;
            up(d_dinp, dinp0, NC * 2);
            up(d_dw, dw0, (size_t)C * 4);
            up(d_db, db0, (size_t)C * 4);
            up(d_ds, ds0, (size_t)C * 4);
            CHECK_OK(mo_layernorm_backward_sum_mixed(gc, dt, d_dinp, d_dw, d_db, d_ds, d_dout, d_x, d_w, d_mr, d_rr, N, C));
            down(si[run], d_dinp, NC * 2);
            down(sw[run], d_dw, (size_t)C * 4);
            down(sb[run], d_db, (size_t)C * 4);
            down(sd[run], d_ds, (size_t)C * 4);
        }
        gc->ln_loop = 0;
        gc->ln_bwd_wave = wave0;
        for (int run = 0; run < 4; run++) {
            char l[4][80];
            const char *what[4] = {"dinp", "dweight", "dbias", "dsum"};
            for (int q = 0; q < 4; q++) snprintf(l[q], sizeof l[q], "layernorm sum %s (run %d)", what[q], run);
            same_bits(gi[0], si[run], NC * 2, l[0], dt);
            check32(dt, sw[run], dw_ref2, C, TOL_LN_PARAM, l[1]);
            check32(dt, sb[run], db_ref2, C, TOL_LN_PARAM, l[2]);
            float *own = fnew(C), *gif = to_f32(dt, si[run], NC);
            for (int i = 0; i < C; i++) {
                double t = 0;
                for (int r = 0; r < N; r++) t += gif[(size_t)r * C + i];
                own[i] = (float)((double)ds0[i] + t);
            }
            char lc[96];
            snprintf(lc, sizeof lc, "%s vs the cpu's", l[3]);
            check32(dt, sd[run], own, C, TOL_LN_PARAM, l[3]);
            check32(dt, sd[run], ds_ref, C, 1e-3, lc);
            free(own); free(gif);
            if (same_blocks && (run == 0 || run == 2)) { // the plain op's blocks: its dweight, dbias bits
                same_bits(gw[0], sw[run], (size_t)C * 4, l[1], dt);
                same_bits(gb[0], sb[run], (size_t)C * 4, l[2], dt);
            }
            if (run == 1 || run == 2) {
                same_bits(sw[0], sw[run], (size_t)C * 4, l[1], dt);
                same_bits(sb[0], sb[run], (size_t)C * 4, l[2], dt);
                same_bits(sd[0], sd[run], (size_t)C * 4, l[3], dt);
            }
        }
        for (int run = 0; run < 4; run++) { free(si[run]); free(sw[run]); free(sb[run]); free(sd[run]); }
        free(ds0); free(ds_ref); free(dw_ref2); free(db_ref2); free(di_ref2);
        dfree(d_ds);
    }
    free(x); free(w); free(b); free(dout); free(dinp0); free(dw0); free(db0); free(out_ref); free(dinp_ref);
    free(mean_ref); free(rstd_ref); free(dw_ref); free(db_ref);
    for (int k = 0; k < 3; k++) { free(o[k]); free(gi[k]); free(m[k]); free(r[k]); free(gw[k]); free(gb[k]); }
    dfree(bx); dfree(bw); dfree(bb); dfree(bdo); dfree(bo); dfree(bdi); dfree(d_mr); dfree(d_rr); dfree(d_mean);
    dfree(d_rstd); dfree(d_dw); dfree(d_db);
}

// ---------------------------------------------------------------------------------------------
static void gpu_gelu(mo_dtype dt, size_t n, int off) {
    printf("gelu %s n=%zu offset=%d\n", mo_dtype_name(dt), n, off);
    uint16_t *x = rand16(dt, n, -6, 6), *dout = rand16(dt, n, -1, 1);
    uint16_t *out_ref = hnew16(n), *dinp_ref = hnew16(n);
    CHECK_OK(mo_gelu_forward_mixed(hc, dt, out_ref, x, n));
    CHECK_OK(mo_gelu_backward_mixed(hc, dt, dinp_ref, x, dout, n));
    uint16_t *bx = dnew((n + off) * 2), *bd = dnew((n + off) * 2), *bo = dnew((n + off) * 2);
    uint16_t *d_x = bx + off, *d_dout = bd + off, *d_o = bo + off;
    up(d_x, x, n * 2);
    uint16_t *a[2] = {hnew16(n), hnew16(n)}, *g[2] = {hnew16(n), hnew16(n)}, *ga_[2] = {hnew16(n), hnew16(n)};
    for (int run = 0; run < 2; run++) {
        poison16(dt, d_o, n);
        CHECK_OK(mo_gelu_forward_mixed(gc, dt, d_o, d_x, n));
        down(a[run], d_o, n * 2);
        up(d_dout, dout, n * 2);
        poison16(dt, d_o, n);
        CHECK_OK(mo_gelu_backward_mixed(gc, dt, d_o, d_x, d_dout, n));
        down(g[run], d_o, n * 2);
        CHECK_OK(mo_gelu_backward_mixed(gc, dt, d_dout, d_x, d_dout, n)); // dinp aliases dout
        down(ga_[run], d_dout, n * 2);
    }
    check16(dt, a[0], out_ref, n, "gelu forward");
    check16(dt, g[0], dinp_ref, n, "gelu backward");
    CHECK_MSG(memcmp(ga_[0], g[0], n * 2) == 0, "%s gelu backward in place differs from out of place", mo_dtype_name(dt));
    same_bits(a[0], a[1], n * 2, "gelu forward", dt);
    same_bits(g[0], g[1], n * 2, "gelu backward", dt);
    free(x); free(dout); free(out_ref); free(dinp_ref);
    for (int k = 0; k < 2; k++) { free(a[k]); free(g[k]); free(ga_[k]); }
    dfree(bx); dfree(bd); dfree(bo);
}

// ---------------------------------------------------------------------------------------------
static void gpu_residual(mo_dtype dt, size_t n, int off) {
    printf("residual %s n=%zu offset=%d\n", mo_dtype_name(dt), n, off);
    uint16_t *a = rand16(dt, n, -1, 1), *b = rand16(dt, n, -1, 1), *ref = hnew16(n);
    CHECK_OK(mo_residual_forward_mixed(hc, dt, ref, a, b, n));
    uint16_t *ba = dnew((n + off) * 2), *bb = dnew((n + off) * 2), *bo = dnew((n + off) * 2);
    uint16_t *d_a = ba + off, *d_b = bb + off, *d_o = bo + off;
    up(d_b, b, n * 2);
    uint16_t *r[2] = {hnew16(n), hnew16(n)}, *al = hnew16(n), *acc = hnew16(n);
    for (int run = 0; run < 2; run++) {
        up(d_a, a, n * 2);
        poison16(dt, d_o, n);
        CHECK_OK(mo_residual_forward_mixed(gc, dt, d_o, d_a, d_b, n));
        down(r[run], d_o, n * 2);
    }
    CHECK_OK(mo_residual_forward_mixed(gc, dt, d_a, d_a, d_b, n)); // out aliases a
    down(al, d_a, n * 2);
    up(d_a, a, n * 2);
    CHECK_OK(mo_accumulate_mixed(gc, dt, d_a, d_b, n));
    down(acc, d_a, n * 2);
    check16(dt, r[0], ref, n, "residual");
    check16(dt, al, ref, n, "residual out == a");
    check16(dt, acc, ref, n, "accumulate");
    same_bits(r[0], r[1], n * 2, "residual", dt);
    free(a); free(b); free(ref); free(r[0]); free(r[1]); free(al); free(acc);
    dfree(ba); dfree(bb); dfree(bo);
}

// ---------------------------------------------------------------------------------------------
static void gpu_crossentropy(mo_dtype dt, int B, int T, int V) {
    printf("crossentropy %s B=%d T=%d V=%d\n", mo_dtype_name(dt), B, T, V);
    size_t N = (size_t)B * T, NV = N * V;
    uint16_t *x = rand16(dt, NV, -8, 8);
    int *tg = hnew(N * sizeof(int));
    for (size_t i = 0; i < N; i++) tg[i] = (int)(test_rng_u64(&rng) % (uint64_t)V);
    tg[0] = V - 1;
    // the mean-loss gradient, times the initial loss scale for fp16 (as the step will pass it)
    const float dloss = (dt == MO_F16 ? 65536.0f : 1.0f) / (float)N;
    uint16_t *g_ref = h16dup(x, NV);
    float *l_ref = fnew(N);
    CHECK_OK(mo_crossentropy_fused_mixed(hc, dt, l_ref, g_ref, tg, B, T, V, dloss));
    int *d_tg = dup_d(tg, N * sizeof(int));
    void *d_x = dnew(NV * 2);
    float *d_l = dnew(N * 4);
    uint16_t *g[2] = {hnew16(NV), hnew16(NV)};
    float *l[2] = {fnew(N), fnew(N)};
    for (int run = 0; run < 2; run++) {
        up(d_x, x, NV * 2);
        poison32(d_l, N);
        CHECK_OK(mo_crossentropy_fused_mixed(gc, dt, d_l, d_x, d_tg, B, T, V, dloss));
        down(g[run], d_x, NV * 2);
        down(l[run], d_l, N * 4);
    }
    check32(dt, l[0], l_ref, N, TOL_CE, "crossentropy losses");
    check16(dt, g[0], g_ref, NV, "crossentropy dlogits");
    same_bits(l[0], l[1], N * 4, "crossentropy losses", dt);
    same_bits(g[0], g[1], NV * 2, "crossentropy dlogits", dt);
    free(x); free(tg); free(g_ref); free(l_ref);
    for (int k = 0; k < 2; k++) { free(g[k]); free(l[k]); }
    dfree(d_tg); dfree(d_x); dfree(d_l);
}

// ---------------------------------------------------------------------------------------------
static void gpu_adamw(mo_dtype dt, size_t n, int off) {
    printf("adamw %s n=%zu offset=%d\n", mo_dtype_name(dt), n, off);
    float *p = frand(n, -1, 1), *g = frand(n, -1, 1), *m = frand(n, -0.1f, 0.1f), *v = frand(n, 0.0f, 0.01f);
    const float lr = 3e-4f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, scale = 0.37f;
    const int t = 5;
    float *p_ref = fdup(p, n), *m_ref = fdup(m, n), *v_ref = fdup(v, n);
    uint16_t *p16_ref = hnew16(n);
    CHECK_OK(mo_adamw_mixed(hc, dt, p_ref, p16_ref, g, m_ref, v_ref, n, lr, b1, b2, eps, wd, t, scale));
    float *bp = dnew((n + off) * 4), *bg = dnew((n + off) * 4), *bm = dnew((n + off) * 4), *bv = dnew((n + off) * 4);
    uint16_t *b16 = dnew((n + off) * 2);
    float *d_p = bp + off, *d_g = bg + off, *d_m = bm + off, *d_v = bv + off;
    uint16_t *d_16 = b16 + off;
    up(d_g, g, n * 4);
    float *rp[2] = {fnew(n), fnew(n)}, *rm[2] = {fnew(n), fnew(n)}, *rv[2] = {fnew(n), fnew(n)};
    uint16_t *r16[2] = {hnew16(n), hnew16(n)}, *want16 = hnew16(n);
    for (int run = 0; run < 2; run++) {
        up(d_p, p, n * 4);
        up(d_m, m, n * 4);
        up(d_v, v, n * 4);
        poison16(dt, d_16, n);
        CHECK_OK(mo_adamw_mixed(gc, dt, d_p, d_16, d_g, d_m, d_v, n, lr, b1, b2, eps, wd, t, scale));
        down(rp[run], d_p, n * 4);
        down(rm[run], d_m, n * 4);
        down(rv[run], d_v, n * 4);
        down(r16[run], d_16, n * 2);
    }
    check32(dt, rp[0], p_ref, n, TOL_EXACT, "adamw master");
    check32(dt, rm[0], m_ref, n, TOL_EXACT, "adamw m");
    check32(dt, rv[0], v_ref, n, TOL_EXACT, "adamw v");
    mo_convert_from_f32(dt, want16, rp[0], n);
    CHECK_MSG(memcmp(r16[0], want16, n * 2) == 0, "%s adamw: the 16-bit copy != the rounded new master",
              mo_dtype_name(dt));
    same_bits(rp[0], rp[1], n * 4, "adamw master", dt);
    same_bits(r16[0], r16[1], n * 2, "adamw 16-bit copy", dt);
    free(p); free(g); free(m); free(v); free(p_ref); free(m_ref); free(v_ref); free(p16_ref); free(want16);
    for (int k = 0; k < 2; k++) { free(rp[k]); free(rm[k]); free(rv[k]); free(r16[k]); }
    dfree(bp); dfree(bg); dfree(bm); dfree(bv); dfree(b16);
}

// ---------------------------------------------------------------------------------------------
// Every pair of types: the cuda cast must equal the cpu cast bit for bit (one rounding, same rule).
static void gpu_cast(size_t n, int off) {
    printf("cast n=%zu offset=%d\n", n, off);
    float *f = frand(n, -70000, 70000); // past the fp16 range: overflow to inf is part of the rounding
    // magnitudes 2^0 .. 2^-126: fp16 subnormals and flush-to-zero range, but no fp32 subnormal input (the
    // GPU flushes those, the host conversion does not)
    for (size_t i = 0; i < n && i < 64; i++) f[i] = copysignf(1.0f + fabsf(f[i]) / 70000, f[i]) * ldexpf(1.0f, -(int)(2 * i));
    const mo_dtype all[3] = {MO_F32, MO_F16, MO_BF16};
    void *src_h = hnew(n * 4), *ref = hnew(n * 4), *got = hnew(n * 4);
    char *bs = dnew((n + off) * 4), *bd = dnew((n + off) * 4);
    for (int si = 0; si < 3; si++)
        for (int di = 0; di < 3; di++) {
            mo_dtype s = all[si], d = all[di];
            size_t ss = mo_dtype_size(s), ds = mo_dtype_size(d);
            mo_convert_from_f32(s, src_h, f, n);
            CHECK_OK(mo_cast_mixed(hc, d, ref, s, src_h, n));
            void *d_s = bs + off * ss, *d_d = bd + off * ds;
            up(d_s, src_h, n * ss);
            CHECK_OK(mo_memset_zero(gc, d_d, n * ds));
            CHECK_OK(mo_cast_mixed(gc, d, d_d, s, d_s, n));
            down(got, d_d, n * ds);
            CHECK_MSG(memcmp(got, ref, n * ds) == 0, "cast %s -> %s (n=%zu offset %d): cuda != cpu", mo_dtype_name(s),
                      mo_dtype_name(d), n, off);
        }
    free(f); free(src_h); free(ref); free(got);
    dfree(bs); dfree(bd);
}

static void gpu_nonfinite(size_t n, int off) {
    printf("nonfinite n=%zu offset=%d\n", n, off);
    float *g = frand(n, -1e30f, 1e30f);
    float *bg = dnew((n + off) * 4), *d_g = bg + off;
    up(d_g, g, n * 4);
    int r1 = -1, r2 = -1;
    CHECK_OK(mo_nonfinite(gc, d_g, n, &r1));
    CHECK_OK(mo_nonfinite(gc, d_g, n, &r2));
    CHECK_MSG(r1 == 0 && r2 == 0, "nonfinite: finite data flagged (%d, %d)", r1, r2);
    const float bad[3] = {INFINITY, -INFINITY, NAN};
    const size_t at[3] = {0, n / 2, n - 1}; // first, middle, last (a tail element when n % 4 != 0)
    for (int k = 0; k < 3; k++) {
        float keep = g[at[k]];
        up(d_g + at[k], &bad[k], 4);
        r1 = -1;
        CHECK_OK(mo_nonfinite(gc, d_g, n, &r1));
        CHECK_MSG(r1 == 1, "nonfinite: missed %g at %zu of %zu", (double)bad[k], at[k], n);
        up(d_g + at[k], &keep, 4);
    }
    r1 = -1;
    CHECK_OK(mo_nonfinite(gc, d_g, n, &r1));
    CHECK(r1 == 0);
    r1 = -1;
    CHECK_OK(mo_nonfinite(gc, NULL, 0, &r1));
    CHECK(r1 == 0);
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

    const mo_dtype dts[2] = {MO_BF16, MO_F16};
    for (int k = 0; k < 2; k++) {
        mo_dtype dt = dts[k];
        gpu_encoder(dt, 4, 1024, 768, 50304, 50304); // GPT-2 small: vector path
        gpu_encoder(dt, 8, 512, 768, 1024, 16);      // long runs of repeated tokens
        gpu_encoder(dt, 2, 5, 37, 37, 37);           // odd C: scalar path

        gpu_layernorm(dt, 4096, 768, 0);  // B*T = 4 x 1024
        gpu_layernorm(dt, 5, 37, 0);      // scalar path, one block
        gpu_layernorm(dt, 64, 768, 1);    // unaligned: scalar path
        gpu_layernorm(dt, 1000, 1600, 0); // GPT-2 XL width: > 48 KiB shared memory
        gpu_layernorm(dt, 7, 12288, 0);   // 1 warp per block, 96 KiB shared memory
        // the register kernels' group counts (C / 8 groups over 32 lanes): 1, 2, 4 (and more rows than the
        // backward's 512 blocks x 8 warps: a warp's weight registers over several rows), 5, 6, 8, then 9
        // (the loop kernels); 768 above has 3, 1600 has 7
        gpu_layernorm(dt, 33, 64, 0);
        gpu_layernorm(dt, 200, 512, 0);
        gpu_layernorm(dt, 5000, 1024, 0);
        gpu_layernorm(dt, 77, 1032, 0);
        gpu_layernorm(dt, 64, 1536, 0);
        gpu_layernorm(dt, 50, 2048, 0);
        gpu_layernorm(dt, 40, 2056, 0);

        gpu_gelu(dt, (size_t)4096 * 3072 + 3, 0); // the MLP activation of GPT-2 small, plus a tail
        gpu_gelu(dt, 5, 0);
        gpu_gelu(dt, 1001, 1);

        gpu_residual(dt, (size_t)4096 * 768 + 1, 0);
        gpu_residual(dt, 1001, 1);

        gpu_crossentropy(dt, 4, 256, 50304); // padded GPT-2 vocabulary: vector path
        gpu_crossentropy(dt, 2, 64, 50257);  // real GPT-2 vocabulary: scalar path
        gpu_crossentropy(dt, 1, 5, 37);

        gpu_adamw(dt, (size_t)10 * 1024 * 1024 + 3, 0);
        gpu_adamw(dt, 5, 0);
        gpu_adamw(dt, 1001, 1);
    }
    gpu_cast((size_t)10 * 1024 * 1024 + 3, 0);
    gpu_cast(1001, 1);
    gpu_cast(5, 0);
    gpu_nonfinite((size_t)10 * 1024 * 1024 + 3, 0);
    gpu_nonfinite(1001, 1);
    gpu_nonfinite(5, 0);

    mo_ctx_destroy(gc);
    mo_ctx_destroy(hc);
    mo_allocator_destroy(ga);
    mo_allocator_destroy(ha);
    return test_finish();
}
