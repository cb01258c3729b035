// GPU tests of the mixed-precision GEMM and attention ops (ops_mixed_gemm.h): each cuda op against the
// cpu mixed reference on fresh random 16-bit data (the seed is printed; MEMOPT_TEST_SEED replays it), for
// bf16 and fp16, GPT-2-small shapes and odd tails. Overwritten outputs are poisoned with NaN first;
// += outputs (dweight, dbias; fp32) start from the same random values on both sides. Every cuda op runs
// twice and the two results must be the same bits (determinism). The backward gets the cpu forward's
// att as input on both sides, so each op is tested on its own.
//
// Tolerances (relative L2, in fp32 after converting the 16-bit results):
//  - 16-bit outputs, bf16 4e-3, fp16 1e-3. The reference rounds at the same points as the GPU path, so
//    the two differ only where the GPU's fp32 sum (tensor-core accumulation, another order; fast-math
//    expf in the softmax) and the reference's double sum round to adjacent 16-bit values: about 1e-6
//    relative before rounding against a half-ulp of 2e-3 (bf16) / 2.4e-4 (fp16), so a small fraction of
//    elements is off by one ulp (3.9e-3 / 4.9e-4), and flips in the stored scores / att propagate to
//    out and dqkv. One ulp on every element would give about the tolerance: far above what flips give,
//    far below what a wrong transpose, mask or scale gives (O(1)). The unfused GELU path (OC % 8 != 0)
//    computes GELU from the rounded pre-activation, one rounding (RMS 1.1e-3 / 2.8e-4) off the reference.
//  - dweight (fp32, from a 16-bit tensor-core GEMM): 1e-3. Products of 16-bit values are exact in
//    fp32; the tensor cores' fp32 accumulation may truncate instead of rounding, a bias that does not
//    average out: about 2^-24 * (2/3) * K relative for a sequential sum over K = N rows, 3.3e-4 at
//    K = 8192 (the largest N here is 1024, so this is a wide margin).
//  - dbias (fp32, the suite's own fixed-order fp32 reduction): the fp32 tolerance of the fp32 tests,
//    1e-5 * max(1, sqrt(N / 1024)).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "kernels/ops_mixed_gemm.h"
#include "strategies/alloc.h"
#include "tests/testlib.h"

static mo_allocator *ga, *ha;
static mo_ctx *gc, *hc;
static test_rng rng;

static double tol16(mo_dtype dt) { return dt == MO_BF16 ? 4e-3 : 1e-3; }
#define DWEIGHT_TOL 1e-3
static double tol_fp32(double K) { return 1e-5 * fmax(1.0, sqrt(K / 1024.0)); }

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
static float *frand(size_t n, float lo, float hi) {
    float *f = fnew(n);
    test_fill_uniform(&rng, f, n, lo, hi);
    return f;
}
static float *f32_of(mo_dtype dt, const uint16_t *x, size_t n) {
    float *f = fnew(n);
    mo_convert_to_f32(dt, f, x, n);
    return f;
}

#include "tests/devmem.h" // dnew, dfree, h2d, d2h, dup_dev (on gc)
static uint16_t nan16(mo_dtype dt) { return dt == MO_BF16 ? 0x7FC0 : 0x7E00; }
static void dpoison16(mo_dtype dt, void *d, size_t n) {
    uint16_t *h = hnew16(n);
    for (size_t i = 0; i < n; i++) h[i] = nan16(dt);
    h2d(d, h, n * sizeof(uint16_t));
    free(h);
}

// got (16-bit, from the device) against want (16-bit, cpu reference), compared in fp32
static void check16(const char *label, mo_dtype dt, const uint16_t *got, const uint16_t *want, size_t n, double tol,
                    int line) {
    float *g = f32_of(dt, got, n), *w = f32_of(dt, want, n);
    test_check_rel(g, w, n, tol, __FILE__, line, label);
    free(g);
    free(w);
}
#define CHECK16(label, dt, got, want, n, tol) check16((label), (dt), (got), (want), (n), (tol), __LINE__)
static void check_same(const char *label, const void *a, const void *b, size_t bytes) {
    CHECK_MSG(memcmp(a, b, bytes) == 0, "%s: two cuda runs differ (not deterministic)", label);
}

static double timer_ms;
static mo_timer timer;
static void tstart(void) { mo_timer_start(gc, &timer); }
static void tstop(void) { mo_timer_stop(gc, &timer, &timer_ms); }

// ---------------------------------------------------------------------------------------------
typedef struct { int N, C, OC, bias, gelu; const char *what; } mm_shape;

static void gpu_matmul(mo_dtype dt, const mm_shape *s) {
    const int N = s->N, C = s->C, OC = s->OC;
    const size_t nin = (size_t)N * C, nw = (size_t)OC * C, nout = (size_t)N * OC;
    const size_t e = sizeof(uint16_t);
    const char *pn = mo_dtype_name(dt);
    printf("matmul_mixed %s %s: N=%d C=%d OC=%d bias=%d gelu=%d\n", pn, s->what, N, C, OC, s->bias, s->gelu);
    uint16_t *inp = hrand16(dt, nin, -1, 1), *w = hrand16(dt, nw, -1, 1);
    uint16_t *b = s->bias ? hrand16(dt, OC, -1, 1) : NULL, *dout = hrand16(dt, nout, -1, 1);
    float *dw0 = frand(nw, -1, 1), *db0 = frand(OC, -1, 1);

    uint16_t *out_ref = hnew16(nout), *g_ref = hnew16(nout), *dinp_ref = hnew16(nin);
    float *dw_ref = fnew(nw), *db_ref = fnew(OC);
    memcpy(dw_ref, dw0, nw * sizeof(float));
    memcpy(db_ref, db0, OC * sizeof(float));
    CHECK_OK(mo_matmul_forward_mixed(hc, dt, out_ref, s->gelu ? g_ref : NULL, inp, w, b, N, C, OC));
    CHECK_OK(mo_matmul_backward_mixed(hc, dt, dinp_ref, dw_ref, s->bias ? db_ref : NULL, dout, inp, w, N, C, OC));

    void *d_inp = dup_dev(inp, nin * e), *d_w = dup_dev(w, nw * e), *d_b = b ? dup_dev(b, OC * e) : NULL;
    void *d_dout = dup_dev(dout, nout * e), *d_out = dnew(nout * e), *d_g = dnew(nout * e), *d_dinp = dnew(nin * e);
    float *d_dw = dnew(nw * sizeof(float)), *d_db = dnew(OC * sizeof(float));
    uint16_t *got[2], *got_g[2], *got_dinp[2];
    float *got_dw[2], *got_db[2];
    for (int r = 0; r < 2; r++) {
        got[r] = hnew16(nout); got_g[r] = hnew16(nout); got_dinp[r] = hnew16(nin);
        got_dw[r] = fnew(nw); got_db[r] = fnew(OC);
    }
    char label[160];
    for (int r = 0; r < 2; r++) {
        dpoison16(dt, d_out, nout);
        dpoison16(dt, d_g, nout);
        if (r) tstart();
        CHECK_OK(mo_matmul_forward_mixed(gc, dt, d_out, s->gelu ? d_g : NULL, d_inp, d_w, d_b, N, C, OC));
        if (r) tstop();
        d2h(got[r], d_out, nout * e);
        if (s->gelu) d2h(got_g[r], d_g, nout * e);
    }
    printf("  forward %.3f ms\n", timer_ms);
    snprintf(label, sizeof label, "%s %s fwd out", pn, s->what);
    CHECK16(label, dt, got[0], out_ref, nout, tol16(dt));
    check_same(label, got[0], got[1], nout * e);
    if (s->gelu) {
        snprintf(label, sizeof label, "%s %s fwd gelu_out", pn, s->what);
        CHECK16(label, dt, got_g[0], g_ref, nout, tol16(dt));
        check_same(label, got_g[0], got_g[1], nout * e);
    }
    for (int r = 0; r < 2; r++) {
        dpoison16(dt, d_dinp, nin);
        h2d(d_dw, dw0, nw * sizeof(float));
        h2d(d_db, db0, OC * sizeof(float));
        if (r) tstart();
        CHECK_OK(mo_matmul_backward_mixed(gc, dt, d_dinp, d_dw, s->bias ? d_db : NULL, d_dout, d_inp, d_w, N, C, OC));
        if (r) tstop();
        d2h(got_dinp[r], d_dinp, nin * e);
        d2h(got_dw[r], d_dw, nw * sizeof(float));
        d2h(got_db[r], d_db, OC * sizeof(float));
    }
    printf("  backward %.3f ms\n", timer_ms);
    snprintf(label, sizeof label, "%s %s bwd dinp", pn, s->what);
    CHECK16(label, dt, got_dinp[0], dinp_ref, nin, tol16(dt));
    check_same(label, got_dinp[0], got_dinp[1], nin * e);
    snprintf(label, sizeof label, "%s %s bwd dweight (fp32)", pn, s->what);
    test_check_rel(got_dw[0], dw_ref, nw, DWEIGHT_TOL, __FILE__, __LINE__, label);
    check_same(label, got_dw[0], got_dw[1], nw * sizeof(float));
    snprintf(label, sizeof label, "%s %s bwd dbias (fp32)", pn, s->what);
    if (s->bias) {
        test_check_rel(got_db[0], db_ref, OC, tol_fp32(N), __FILE__, __LINE__, label);
        check_same(label, got_db[0], got_db[1], OC * sizeof(float));
        // the bias-gradient engines (MEMOPT_DBIAS), each on the same random dout, whichever the run set:
        //   narrow and wide (16-byte loads, where OC % 8 == 0) make the same sums in the same order: the
        //   bits of got_db[0] when it came from either;
        //   lt (cuBLASLt's BGRADB epilogue on the dweight GEMM) sums in its own order: against the cpu
        //   reference, twice for the same bits, and dweight still right beside it.
        const int mode0 = gc->dbias_mode;
        static const char *mode_name[] = {"narrow", "wide", "lt"};
        // the bits narrow and wide must both give: got_db[0], or narrow's below when the run set lt
        float *bits = mode0 == MO_DBIAS_LT ? fnew(OC) : got_db[0];
        for (int m = MO_DBIAS_NARROW; m <= MO_DBIAS_LT; m++) {
            if (m == mode0) continue;
            float *db_m[2] = {got_db[1], fnew(OC)};
            const long fb0 = gc->epilogue_fallbacks;
            gc->dbias_mode = m;
            for (int r = 0; r < 2; r++) {
                h2d(d_dw, dw0, nw * sizeof(float));
                h2d(d_db, db0, OC * sizeof(float));
                CHECK_OK(mo_matmul_backward_mixed(gc, dt, NULL, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC));
                d2h(db_m[r], d_db, OC * sizeof(float));
            }
            gc->dbias_mode = mode0;
            d2h(got_dw[1], d_dw, nw * sizeof(float));
            snprintf(label, sizeof label, "%s %s bwd dbias, MEMOPT_DBIAS=%s%s", pn, s->what, mode_name[m],
                     m == MO_DBIAS_WIDE && OC % 8 ? " (OC % 8 != 0: the narrow kernel)" : "");
            test_check_rel(db_m[0], db_ref, OC, tol_fp32(N), __FILE__, __LINE__, label);
            check_same(label, db_m[0], db_m[1], OC * sizeof(float));
            if (m == MO_DBIAS_NARROW && mode0 == MO_DBIAS_LT) memcpy(bits, db_m[0], OC * sizeof(float));
            else if (m != MO_DBIAS_LT)
                CHECK_MSG(memcmp(bits, db_m[0], OC * sizeof(float)) == 0, "%s: not the bits of MEMOPT_DBIAS=%s", label,
                          mode0 == MO_DBIAS_LT ? "narrow" : mode_name[mode0]);
            if (m == MO_DBIAS_LT) // which engine ran: BGRADB, or (no algorithm for the shape) the kernels
                printf("  %s: %s\n", label,
                       gc->epilogue_fallbacks > fb0 ? "no BGRADB algorithm, the reduction kernels ran" : "BGRADB epilogue");
            snprintf(label, sizeof label, "%s %s bwd dweight beside MEMOPT_DBIAS=%s", pn, s->what, mode_name[m]);
            test_check_rel(got_dw[1], dw_ref, nw, DWEIGHT_TOL, __FILE__, __LINE__, label);
            free(db_m[1]);
        }
        if (bits != got_db[0]) free(bits);
    } else {
        CHECK_MSG(memcmp(got_db[0], db0, OC * sizeof(float)) == 0, "%s: dbias NULL but the buffer changed", label);
    }
    // dinp NULL: dinp untouched, dweight as before
    dpoison16(dt, d_dinp, nin);
    h2d(d_dw, dw0, nw * sizeof(float));
    CHECK_OK(mo_matmul_backward_mixed(gc, dt, NULL, d_dw, NULL, d_dout, d_inp, d_w, N, C, OC));
    d2h(got_dinp[0], d_dinp, nin * e);
    d2h(got_dw[0], d_dw, nw * sizeof(float));
    int untouched = 1;
    for (size_t i = 0; i < nin; i++) untouched &= got_dinp[0][i] == nan16(dt);
    CHECK_MSG(untouched, "%s %s: backward with dinp NULL wrote dinp", pn, s->what);
    snprintf(label, sizeof label, "%s %s bwd dweight, dinp NULL", pn, s->what);
    test_check_rel(got_dw[0], dw_ref, nw, DWEIGHT_TOL, __FILE__, __LINE__, label);

    for (int r = 0; r < 2; r++) { free(got[r]); free(got_g[r]); free(got_dinp[r]); free(got_dw[r]); free(got_db[r]); }
    dfree(d_inp); dfree(d_w); dfree(d_b); dfree(d_dout); dfree(d_out); dfree(d_g); dfree(d_dinp); dfree(d_dw); dfree(d_db);
    free(inp); free(w); free(b); free(dout); free(dw0); free(db0); free(out_ref); free(g_ref); free(dinp_ref);
    free(dw_ref); free(db_ref);
}


// The dgelu backward's dinp against the reference (tol16) and the same bits twice, dweight and dbias (fp32)
// against theirs: after the plain op (what "with dgelu") and the one that also sums dinp's columns
static void check_dgelu_grads(mo_dtype dt, const mm_shape *s, const char *what, uint16_t *const got_dinp[2],
                              const uint16_t *dinp_ref, const float *got_dw, const float *dw_ref, const float *got_db,
                              const float *db_ref) {
    const size_t nin = (size_t)s->N * s->C, nw = (size_t)s->OC * s->C;
    const char *pn = mo_dtype_name(dt);
    char label[160];
    snprintf(label, sizeof label, "%s %s bwd dinp %s", pn, s->what, what);
    CHECK16(label, dt, got_dinp[0], dinp_ref, nin, tol16(dt));
    check_same(label, got_dinp[0], got_dinp[1], nin * sizeof(uint16_t));
    snprintf(label, sizeof label, "%s %s bwd dweight, dbias %s (fp32)", pn, s->what, what);
    test_check_rel(got_dw, dw_ref, nw, DWEIGHT_TOL, __FILE__, __LINE__, label);
    test_check_rel(got_db, db_ref, s->OC, tol_fp32(s->N), __FILE__, __LINE__, label);
}

// The epilogue fusions (ops_mixed_gemm.h): the residual as the GEMM's C input and the dinp GEMM with
// the GELU backward, each rounded once; against the cpu reference, which rounds at the same point.
// C % 8 != 0 takes the unfused fallback (one more rounding): still within tol16.
static void gpu_matmul_fused(mo_dtype dt, const mm_shape *s) {
    const int N = s->N, C = s->C, OC = s->OC;
    const size_t nin = (size_t)N * C, nw = (size_t)OC * C, nout = (size_t)N * OC;
    const size_t e = sizeof(uint16_t);
    const char *pn = mo_dtype_name(dt);
    printf("matmul_mixed fused %s %s: N=%d C=%d OC=%d\n", pn, s->what, N, C, OC);
    uint16_t *inp = hrand16(dt, nin, -1, 1), *w = hrand16(dt, nw, -1, 1), *b = hrand16(dt, OC, -1, 1);
    uint16_t *add = hrand16(dt, nout, -2, 2), *dout = hrand16(dt, nout, -1, 1), *pre = hrand16(dt, nin, -3, 3);
    float *dw0 = frand(nw, -1, 1), *db0 = frand(OC, -1, 1);
    uint16_t *out_ref = hnew16(nout), *dinp_ref = hnew16(nin);
    float *dw_ref = fnew(nw), *db_ref = fnew(OC);
    memcpy(dw_ref, dw0, nw * sizeof(float));
    memcpy(db_ref, db0, OC * sizeof(float));
    CHECK_OK(mo_matmul_forward_add_mixed(hc, dt, out_ref, inp, w, b, add, N, C, OC));
    CHECK_OK(mo_matmul_backward_dgelu_mixed(hc, dt, dinp_ref, dw_ref, db_ref, dout, inp, w, pre, N, C, OC));
    void *d_inp = dup_dev(inp, nin * e), *d_w = dup_dev(w, nw * e), *d_b = dup_dev(b, OC * e);
    void *d_add = dup_dev(add, nout * e), *d_dout = dup_dev(dout, nout * e), *d_pre = dup_dev(pre, nin * e);
    void *d_out = dnew(nout * e), *d_dinp = dnew(nin * e);
    float *d_dw = dnew(nw * sizeof(float)), *d_db = dnew(OC * sizeof(float));
    uint16_t *got[2], *got_dinp[2];
    float *got_dw = fnew(nw), *got_db = fnew(OC);
    for (int r = 0; r < 2; r++) { got[r] = hnew16(nout); got_dinp[r] = hnew16(nin); }
    const long fb0 = gc->epilogue_fallbacks;
    for (int r = 0; r < 2; r++) {
        dpoison16(dt, d_out, nout);
        CHECK_OK(mo_matmul_forward_add_mixed(gc, dt, d_out, d_inp, d_w, d_b, d_add, N, C, OC));
        d2h(got[r], d_out, nout * e);
        dpoison16(dt, d_dinp, nin);
        h2d(d_dw, dw0, nw * sizeof(float));
        h2d(d_db, db0, OC * sizeof(float));
        CHECK_OK(mo_matmul_backward_dgelu_mixed(gc, dt, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_pre, N, C, OC));
        d2h(got_dinp[r], d_dinp, nin * e);
    }
    d2h(got_dw, d_dw, nw * sizeof(float));
    d2h(got_db, d_db, OC * sizeof(float));
    printf("  %ld fallbacks in the 4 fused calls (no cuBLASLt algorithm; under MEMOPT_DBIAS=lt a BGRADB one counts too)\n",
           gc->epilogue_fallbacks - fb0);
    char label[160];
    snprintf(label, sizeof label, "%s %s fwd + add", pn, s->what);
    CHECK16(label, dt, got[0], out_ref, nout, tol16(dt));
    check_same(label, got[0], got[1], nout * e);
    check_dgelu_grads(dt, s, "with dgelu", got_dinp, dinp_ref, got_dw, dw_ref, got_db, db_ref);

    // MEMOPT_DBIAS=gelu's op: the same GEMM, and dinp_dbias (C, fp32, from zero here) += dinp's column sums.
    // bf16: cuBLASLt's DGELU_BGRAD epilogue rounds each sum to bf16, as the cpu reference does to its double
    // sum of the unrounded values; the two round sums that differ in their last bits (the GPU's fp32 order,
    // gelu' inside cuBLASLt not being the reference's tanhf to the bit, perhaps the rounded terms summed)
    // to the same or the adjacent bf16 value: within 2 ulps (8e-3) of the reference, where sums over the
    // wrong axis, of the wrong values (before gelu', dout) or none are O(1) off. Where bf16 has no such
    // algorithm (C % 8 != 0) it falls back to the fp32 reduction of the rounded dinp, also within 8e-3.
    // fp16: the reduction kernel against double sums of the dinp this call rounded (its own input), tol_fp32:
    // the reference's dinp may differ by an fp16 ulp an element, which its column sums carry past tol_fp32
    // (up to 4.2e-4 on an H100, session 35).
    // A third call without the reset must add the same sums again: exactly twice the first (x + x is exact).
    float *sums_ref = fnew(C), *got_sums[3] = {fnew(C), fnew(C), fnew(C)}, *d_sums = dnew(C * sizeof(float));
    float *zeros = fnew(C);
    for (int j = 0; j < C; j++) zeros[j] = 0.0f;
    memcpy(sums_ref, zeros, C * sizeof(float));
    memcpy(dw_ref, dw0, nw * sizeof(float));
    memcpy(db_ref, db0, OC * sizeof(float));
    CHECK_OK(mo_matmul_backward_dgelu_bsum_mixed(hc, dt, dinp_ref, sums_ref, dw_ref, db_ref, dout, inp, w, pre, N, C, OC));
    const long fb1 = gc->epilogue_fallbacks;
    for (int r = 0; r < 3; r++) {
        dpoison16(dt, d_dinp, nin);
        h2d(d_dw, dw0, nw * sizeof(float));
        h2d(d_db, db0, OC * sizeof(float));
        if (r < 2) h2d(d_sums, zeros, C * sizeof(float));
        CHECK_OK(mo_matmul_backward_dgelu_bsum_mixed(gc, dt, d_dinp, d_sums, d_dw, d_db, d_dout, d_inp, d_w, d_pre, N, C,
                                                     OC));
        if (r < 2) d2h(got_dinp[r], d_dinp, nin * e);
        d2h(got_sums[r], d_sums, C * sizeof(float));
        if (r == 0) { d2h(got_dw, d_dw, nw * sizeof(float)); d2h(got_db, d_db, OC * sizeof(float)); }
    }
    const int bsum_fallback = gc->epilogue_fallbacks > fb1;
    const char *how = dt != MO_BF16 ? "fp16: the reduction kernel"
                      : bsum_fallback ? "no DGELU_BGRAD algorithm: the reduction kernel" : "DGELU_BGRAD epilogue";
    snprintf(label, sizeof label, "%s %s bwd dinp's column sums (%s)", pn, s->what, how);
    if (dt != MO_BF16) { // (N, C) rows summed in double: the kernel's input, not the reference's
        float *g = f32_of(dt, got_dinp[0], nin);
        for (int j = 0; j < C; j++) {
            double t = 0.0;
            for (int i = 0; i < N; i++) t += g[(size_t)i * C + j];
            sums_ref[j] = (float)t;
        }
        free(g);
    }
    printf("  %s: rel err %.3g\n", label, test_rel_error(got_sums[0], sums_ref, C));
    test_check_rel(got_sums[0], sums_ref, C, dt == MO_BF16 ? 8e-3 : tol_fp32(N), __FILE__, __LINE__, label);
    check_same(label, got_sums[0], got_sums[1], C * sizeof(float));
    int twice = 1;
    for (int j = 0; j < C; j++) twice &= got_sums[2][j] == 2.0f * got_sums[0][j];
    CHECK_MSG(twice, "%s: a second call did not add the same sums again", label);
    check_dgelu_grads(dt, s, "beside dinp's sums", got_dinp, dinp_ref, got_dw, dw_ref, got_db, db_ref);
    free(sums_ref); free(got_sums[0]); free(got_sums[1]); free(got_sums[2]); free(zeros); dfree(d_sums);

    for (int r = 0; r < 2; r++) { free(got[r]); free(got_dinp[r]); }
    free(got_dw); free(got_db);
    dfree(d_inp); dfree(d_w); dfree(d_b); dfree(d_add); dfree(d_dout); dfree(d_pre); dfree(d_out); dfree(d_dinp);
    dfree(d_dw); dfree(d_db);
    free(inp); free(w); free(b); free(add); free(dout); free(pre); free(dw0); free(db0);
    free(out_ref); free(dinp_ref); free(dw_ref); free(db_ref);
}

// ---------------------------------------------------------------------------------------------
typedef struct { int B, T, C, NH; const char *what; } at_shape;

static void gpu_attention(mo_dtype dt, const at_shape *s) {
    const int B = test_reduced_batch(s->B), T = s->T, C = s->C, NH = s->NH;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    const size_t e = sizeof(uint16_t);
    const char *pn = mo_dtype_name(dt);
    printf("attention_mixed %s %s: B=%d T=%d C=%d NH=%d (HS %d)\n", pn, s->what, B, T, C, NH, C / NH);
    uint16_t *qkv = hrand16(dt, nqkv, -2, 2), *dout = hrand16(dt, nout, -1, 1);
    uint16_t *out_ref = hnew16(nout), *att_ref = hnew16(natt), *dqkv_ref = hnew16(nqkv);
    CHECK_OK(mo_attention_forward_mixed(hc, dt, out_ref, att_ref, qkv, B, T, C, NH));
    CHECK_OK(mo_attention_backward_mixed(hc, dt, dqkv_ref, dout, qkv, att_ref, B, T, C, NH));

    void *d_qkv = dup_dev(qkv, nqkv * e), *d_dout = dup_dev(dout, nout * e), *d_out = dnew(nout * e);
    void *d_att = dnew(natt * e), *d_dqkv = dnew(nqkv * e), *d_att_in = dup_dev(att_ref, natt * e);
    uint16_t *got_out[2], *got_att[2], *got_dqkv[2];
    for (int r = 0; r < 2; r++) { got_out[r] = hnew16(nout); got_att[r] = hnew16(natt); got_dqkv[r] = hnew16(nqkv); }
    char label[160];
    for (int r = 0; r < 2; r++) {
        dpoison16(dt, d_out, nout);
        dpoison16(dt, d_att, natt);
        if (r) tstart();
        CHECK_OK(mo_attention_forward_mixed(gc, dt, d_out, d_att, d_qkv, B, T, C, NH));
        if (r) tstop();
        d2h(got_out[r], d_out, nout * e);
        d2h(got_att[r], d_att, natt * e);
    }
    printf("  forward %.3f ms\n", timer_ms);
    snprintf(label, sizeof label, "%s %s att", pn, s->what);
    CHECK16(label, dt, got_att[0], att_ref, natt, tol16(dt));
    check_same(label, got_att[0], got_att[1], natt * e);
    int zeros = 1;
    for (size_t r = 0; r < (size_t)B * NH * T; r++)
        for (int j = (int)(r % T) + 1; j < T; j++) zeros &= got_att[0][r * T + j] == 0;
    CHECK_MSG(zeros, "%s: att above the diagonal is not exactly +0", label);
    snprintf(label, sizeof label, "%s %s out", pn, s->what);
    CHECK16(label, dt, got_out[0], out_ref, nout, tol16(dt));
    check_same(label, got_out[0], got_out[1], nout * e);
    for (int r = 0; r < 2; r++) {
        dpoison16(dt, d_dqkv, nqkv);
        if (r) tstart();
        CHECK_OK(mo_attention_backward_mixed(gc, dt, d_dqkv, d_dout, d_qkv, d_att_in, B, T, C, NH));
        if (r) tstop();
        d2h(got_dqkv[r], d_dqkv, nqkv * e);
    }
    printf("  backward %.3f ms\n", timer_ms);
    snprintf(label, sizeof label, "%s %s dqkv", pn, s->what);
    CHECK16(label, dt, got_dqkv[0], dqkv_ref, nqkv, tol16(dt));
    check_same(label, got_dqkv[0], got_dqkv[1], nqkv * e);

    for (int r = 0; r < 2; r++) { free(got_out[r]); free(got_att[r]); free(got_dqkv[r]); }
    dfree(d_qkv); dfree(d_dout); dfree(d_out); dfree(d_att); dfree(d_dqkv); dfree(d_att_in);
    free(qkv); free(dout); free(out_ref); free(att_ref); free(dqkv_ref);
}

// MEMOPT_TEST_REDUCED (compute-sanitizer): the GPT-2-sized cases at a fraction of their size, every other
// case as it is. GEMMs: N (rows) / 8 at 128 rows and more (1024 -> 128, the lm head 128 -> 16; C, OC and so the
// alignment, the fused epilogues and the dgelu width stay); attention at the GPT-2 head size HS 64 with
// B 1 and NH 2 instead of NH 12 (the same kernels, a sixth to a twelfth of the work).
static int reduced;
static void reduce_mm(mm_shape *s, size_t n) {
    for (size_t i = 0; reduced && i < n; i++)
        if (s[i].N >= 128) s[i].N /= 8;
}
static void reduce_at(at_shape *s, size_t n) {
    for (size_t i = 0; reduced && i < n; i++)
        if (s[i].NH == 12) { s[i].B = 1; s[i].NH = 2; s[i].C = 2 * (s[i].C / 12); }
}

int main(void) {
    test_require_gpu();
    test_rng_seed(&rng, test_seed_from_time());
    reduced = test_reduced("the GPT-2-sized GEMM rows and attention heads");
    CHECK_OK(mo_allocator_create(&ga, MO_ALLOC_CACHING, MO_BACKEND_CUDA, 0, NULL));
    CHECK_OK(mo_allocator_create(&ha, MO_ALLOC_CACHING, MO_BACKEND_CPU, 0, NULL));
    if (!ga || !ha) return test_finish();
    CHECK_OK(mo_ctx_create(&gc, MO_BACKEND_CUDA, ga));
    CHECK_OK(mo_ctx_create(&hc, MO_BACKEND_CPU, ha));
    if (!gc || !hc) return test_finish();
    CHECK_OK(mo_timer_init(gc, &timer));

    // GPT-2 small (C = 768) at B*T = 1024 rows, the lm head at 128 rows, and odd tails
    mm_shape mm[] = {
        {1024, 768, 2304, 1, 0, "qkv"},
        {1024, 768, 768, 1, 0, "attn proj"},
        {1024, 768, 3072, 1, 1, "fc+gelu"},
        {1024, 3072, 768, 1, 0, "fc proj"},
        {128, 768, 50304, 0, 0, "lm head"},
        {74, 96, 384, 1, 1, "tail fc+gelu"},
        {74, 96, 100, 1, 1, "gelu unfused (OC % 8)"},
        {37, 100, 37, 1, 0, "odd"},
        {37, 100, 36, 0, 1, "odd gelu no bias"},
        {300, 64, 40, 1, 0, "dbias 2 chunks + tail"},
        {33000, 16, 64, 1, 0, "dbias 129 chunks + tail (wide: two row batches, 9 chunk batches)"},
        {5, 16, 64, 1, 0, "dbias 5 rows (lanes with none)"},
    };
    reduce_mm(mm, sizeof mm / sizeof mm[0]);
    at_shape at[] = {
        {2, 1024, 768, 12, "gpt2 T=1024"},
        {4, 256, 768, 12, "gpt2 T=256"},
        {3, 64, 768, 12, "gpt2 T=64"},
        {2, 37, 96, 3, "tail T=37 HS=32"},
        {1, 100, 256, 2, "HS=128 T=100"},
        {2, 130, 80, 2, "HS=40 T=130"},
        {1, 1, 64, 4, "T=1 HS=16"},
        {2, 40, 90, 3, "HS=30 (element permutes)"},
        {1, 512, 128, 2, "T=512 (4 or 2 vectors a lane)"},
        {1, 2048, 128, 2, "T=2048 (fp32 loop, 16-bit 8 vectors a lane)"},
    };
    reduce_at(at, sizeof at / sizeof at[0]);
    // the step's fused GEMMs (attn proj and fc proj + residual, dgelu with C = 3072), a tail, and C % 8
    // != 0 (the unfused fallback)
    mm_shape fz[] = {
        {1024, 768, 768, 1, 0, "attn proj"},
        {1024, 3072, 768, 1, 0, "fc proj"},
        {74, 96, 100, 1, 0, "tail"},
        {37, 100, 37, 1, 0, "odd (dgelu fallback)"},
    };
    reduce_mm(fz, sizeof fz / sizeof fz[0]);
    const mo_dtype dts[2] = {MO_BF16, MO_F16};
    for (int d = 0; d < 2; d++) {
        for (size_t i = 0; i < sizeof mm / sizeof mm[0]; i++) gpu_matmul(dts[d], &mm[i]);
        for (size_t i = 0; i < sizeof fz / sizeof fz[0]; i++) gpu_matmul_fused(dts[d], &fz[i]);
        for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) gpu_attention(dts[d], &at[i]);
    }

    mo_timer_destroy(&timer);
    mo_ctx_destroy(gc);
    mo_ctx_destroy(hc);
    mo_allocator_destroy(ga);
    mo_allocator_destroy(ha);
    return test_finish();
}
