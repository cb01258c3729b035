// CPU tests of the mixed-precision (fp16 / bf16 activation) GEMM and attention ops (ops_mixed_gemm.h):
// each mixed cpu reference against the fp32 reference on the same (16-bit representable) inputs,
// within the precision of the 16-bit type; the fp32 gradients (dweight, dbias) of the GEMM must be
// bit-identical (same fp32 computation on the same values); outputs poisoned first; dispatcher
// contract (scratch on every backend, dry peaks = cpu peaks, formulas, bad dtype and shapes refused).
//
// Tolerances (relative L2): bf16 1e-2, fp16 2e-3. One rounding to bf16 (8 significant bits) has RMS
// relative error about 2^-9 / sqrt(3) = 1.1e-3 (fp16, 11 bits: 2.8e-4); an output carries its own
// rounding plus those of the intermediates (scores, att, datt, dpreatt) it is computed from, a few
// times that, and the softmax backward's (datt - rowsum) difference can amplify the datt rounding.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention_mixed.h"
#include "kernels/matmul_mixed.h"
#include "kernels/ops.h"
#include "kernels/ops_mixed_gemm.h"
#include "strategies/alloc.h"
#include "tests/testlib.h"

static mo_allocator *ha;
static mo_ctx *hc;
static test_rng rng;

static double tol_of(mo_dtype dt) { return dt == MO_BF16 ? 1e-2 : 2e-3; }

#include "tests/mixed_host.h" // fnew, hnew16, frand_dt, poison16, to_f32 (on rng)
static void check_rel16(const char *label, mo_dtype dt, const uint16_t *got16, const float *want, size_t n,
                        double tol, int line) {
    float *g = to_f32(dt, got16, n);
    char what[96];
    snprintf(what, sizeof what, "%s (%s)", label, mo_dtype_name(dt));
    test_check_rel(g, want, n, tol, __FILE__, line, what);
    free(g);
}
#define CHECK_REL16(label, dt, got, want, n, tol) check_rel16((label), (dt), (got), (want), (n), (tol), __LINE__)

// ---------------------------------------------------------------------------------------------
static void test_matmul(mo_dtype dt, int N, int C, int OC, int with_bias, int gelu) {
    printf("matmul_mixed %s N=%d C=%d OC=%d bias=%d gelu=%d\n", mo_dtype_name(dt), N, C, OC, with_bias, gelu);
    const size_t nin = (size_t)N * C, nw = (size_t)OC * C, nout = (size_t)N * OC;
    uint16_t *inp16, *w16, *b16 = NULL, *dout16;
    float *inp = frand_dt(dt, nin, -1, 1, &inp16), *w = frand_dt(dt, nw, -1, 1, &w16);
    float *b = with_bias ? frand_dt(dt, OC, -1, 1, &b16) : NULL;
    float *dout = frand_dt(dt, nout, -1, 1, &dout16);
    float *dw0 = fnew(nw), *db0 = fnew(OC);
    test_fill_uniform(&rng, dw0, nw, -1, 1);
    test_fill_uniform(&rng, db0, OC, -1, 1);

    float *out_ref = fnew(nout), *g_ref = fnew(nout), *dinp_ref = fnew(nin);
    float *dw_ref = fnew(nw), *db_ref = fnew(OC);
    memcpy(dw_ref, dw0, nw * sizeof(float));
    memcpy(db_ref, db0, OC * sizeof(float));
    CHECK_OK(mo_matmul_forward(hc, out_ref, gelu ? g_ref : NULL, inp, w, b, N, C, OC));
    CHECK_OK(mo_matmul_backward(hc, dinp_ref, dw_ref, with_bias ? db_ref : NULL, dout, inp, w, N, C, OC));

    uint16_t *out16 = hnew16(nout), *g16 = hnew16(nout), *dinp16 = hnew16(nin);
    float *dw = fnew(nw), *db = fnew(OC);
    memcpy(dw, dw0, nw * sizeof(float));
    memcpy(db, db0, OC * sizeof(float));
    poison16(dt, out16, nout);
    poison16(dt, g16, nout);
    poison16(dt, dinp16, nin);
    CHECK_OK(mo_matmul_forward_mixed(hc, dt, out16, gelu ? g16 : NULL, inp16, w16, b16, N, C, OC));
    CHECK_OK(mo_matmul_backward_mixed(hc, dt, dinp16, dw, with_bias ? db : NULL, dout16, inp16, w16, N, C, OC));
    const double tol = tol_of(dt);
    CHECK_REL16("out", dt, out16, out_ref, nout, tol);
    if (gelu) CHECK_REL16("gelu_out", dt, g16, g_ref, nout, tol);
    CHECK_REL16("dinp", dt, dinp16, dinp_ref, nin, tol);
    // the fp32 gradients: the same fp32 computation on the same values
    CHECK_MSG(memcmp(dw, dw_ref, nw * sizeof(float)) == 0, "dweight differs from the fp32 reference");
    CHECK_MSG(memcmp(db, with_bias ? db_ref : db0, OC * sizeof(float)) == 0, "dbias differs (or written when NULL)");
    // dinp NULL: skipped
    poison16(dt, dinp16, nin);
    memcpy(dw, dw0, nw * sizeof(float));
    CHECK_OK(mo_matmul_backward_mixed(hc, dt, NULL, dw, NULL, dout16, inp16, w16, N, C, OC));
    int untouched = 1;
    for (size_t i = 0; i < nin; i++) untouched &= dinp16[i] == (dt == MO_BF16 ? 0x7FC0 : 0x7E00);
    CHECK_MSG(untouched, "dinp NULL but a buffer changed");

    free(inp); free(w); free(b); free(dout); free(dw0); free(db0); free(out_ref); free(g_ref); free(dinp_ref);
    free(dw_ref); free(db_ref); free(inp16); free(w16); free(b16); free(dout16); free(out16); free(g16);
    free(dinp16); free(dw); free(db);
}

// ---------------------------------------------------------------------------------------------
static void test_attention(mo_dtype dt, int B, int T, int C, int NH) {
    printf("attention_mixed %s B=%d T=%d C=%d NH=%d\n", mo_dtype_name(dt), B, T, C, NH);
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    uint16_t *qkv16, *dout16;
    float *qkv = frand_dt(dt, nqkv, -2, 2, &qkv16), *dout = frand_dt(dt, nout, -1, 1, &dout16);
    float *out_ref = fnew(nout), *att_ref = fnew(natt), *dqkv_ref = fnew(nqkv);
    CHECK_OK(mo_attention_forward(hc, out_ref, att_ref, qkv, B, T, C, NH));
    CHECK_OK(mo_attention_backward(hc, dqkv_ref, dout, qkv, out_ref, att_ref, B, T, C, NH));

    uint16_t *out16 = hnew16(nout), *att16 = hnew16(natt), *dqkv16 = hnew16(nqkv);
    poison16(dt, out16, nout);
    poison16(dt, att16, natt);
    poison16(dt, dqkv16, nqkv);
    CHECK_OK(mo_attention_forward_mixed(hc, dt, out16, att16, qkv16, B, T, C, NH));
    CHECK_OK(mo_attention_backward_mixed(hc, dt, dqkv16, dout16, qkv16, att16, B, T, C, NH));
    const double tol = tol_of(dt);
    CHECK_REL16("att", dt, att16, att_ref, natt, tol);
    CHECK_REL16("out", dt, out16, out_ref, nout, tol);
    CHECK_REL16("dqkv", dt, dqkv16, dqkv_ref, nqkv, tol);
    // the masked upper triangle is exact zeros; every probability row sums to 1 within dt rounding
    int zeros = 1;
    double worst = 0;
    for (size_t r = 0; r < (size_t)B * NH * T; r++) {
        const int t = (int)(r % T);
        double s = 0;
        for (int j = 0; j < T; j++) {
            const float a = mo_mmg_load(dt, att16, r * T + j);
            if (j > t) zeros &= a == 0.0f; else s += a;
        }
        worst = fmax(worst, fabs(s - 1.0));
    }
    CHECK_MSG(zeros, "att above the diagonal is not exactly 0");
    CHECK_MSG(worst < (dt == MO_BF16 ? 2e-2 : 4e-3), "a probability row sums to 1 +- %.3g", worst);
    free(qkv); free(dout); free(out_ref); free(att_ref); free(dqkv_ref); free(qkv16); free(dout16);
    free(out16); free(att16); free(dqkv16);
}

// ---------------------------------------------------------------------------------------------
static void test_args(void) {
    printf("argument checks\n");
    uint16_t x[64] = {0};
    float f[64] = {0};
    CHECK(mo_matmul_forward_mixed(hc, MO_F32, x, NULL, x, x, NULL, 2, 2, 2) == MO_ERR_INVALID);
    CHECK(mo_matmul_backward_mixed(hc, MO_F32, x, f, NULL, x, x, x, 2, 2, 2) == MO_ERR_INVALID);
    CHECK(mo_matmul_forward_mixed(hc, MO_BF16, x, NULL, x, x, NULL, 0, 2, 2) == MO_ERR_INVALID);
    CHECK(mo_attention_forward_mixed(hc, MO_F32, x, x, x, 1, 2, 4, 2) == MO_ERR_INVALID);
    CHECK(mo_attention_forward_mixed(hc, MO_F16, x, x, x, 1, 2, 5, 2) == MO_ERR_INVALID); // C % NH
    CHECK(mo_attention_backward_mixed(hc, MO_BF16, x, x, x, x, 1, 0, 4, 2) == MO_ERR_INVALID);
    CHECK_EQ_U64(mo_matmul_backward_mixed_scratch_bytes(1000, 50, 1), 4 * 50 * sizeof(float));
    CHECK_EQ_U64(mo_matmul_backward_mixed_scratch_bytes(1000, 50, 0), 0);
    CHECK_EQ_U64(mo_attention_forward_mixed_scratch_bytes(MO_BF16, 2, 9, 12, 3), 3 * 2 * 9 * 12 * 2);
    CHECK_EQ_U64(mo_attention_backward_mixed_scratch_bytes(MO_F16, 2, 9, 12, 3), (6 * 2 * 9 * 12 + 2 * 3 * 81) * 2);
}

enum { OP_MM_FWD, OP_MM_BWD, OP_ATT_FWD, OP_ATT_BWD, OP_COUNT };
static const char *op_names[OP_COUNT] = {"matmul_forward_mixed", "matmul_backward_mixed", "attention_forward_mixed",
                                         "attention_backward_mixed"};

static void run_on(mo_backend_kind kind, int op, mo_dtype dt, mo_alloc_stats *before, mo_alloc_stats *after) {
    const int B = 2, T = 9, C = 12, NH = 3, N = B * T, OC = 20;
    mo_allocator *a;
    mo_ctx *c;
    if (!CHECK_OK(mo_allocator_create(&a, MO_ALLOC_CACHING, kind, 0, NULL))) return;
    if (!CHECK_OK(mo_ctx_create(&c, kind, a))) { mo_allocator_destroy(a); return; }
    const size_t sizes[8] = {(size_t)N * 3 * C, (size_t)N * C, (size_t)B * NH * T * T, (size_t)OC * C,
                             (size_t)N * 3 * C, (size_t)OC * C, (size_t)OC, (size_t)N * OC};
    void *p[8] = {0};
    for (int i = 0; i < 8; i++) {
        CHECK_OK(mo_alloc(a, sizes[i] * sizeof(float), MO_CAT_ACTIVATION, &p[i]));
        if (kind == MO_BACKEND_CPU && p[i]) { // 16-bit inputs where 16-bit, fp32 where fp32 (both defined)
            const float v0 = 0.01f, v1 = 0.05f;
            for (size_t j = 0; j < sizes[i]; j++) {
                const float v = v0 * (float)((j * 7 + i) % 13) - v1;
                if (i == 3 || i == 6) ((float *)p[i])[j] = v;
                else mo_mmg_store(dt, p[i], j, v);
            }
        }
    }
    void *qkv = p[0], *out = p[1], *att = p[2], *dqkv = p[4], *w = p[5], *big = p[7];
    float *dw = p[3], *db = p[6];
    mo_allocator_reset_peaks(a);
    mo_allocator_stats(a, before);
    mo_status st = MO_OK;
    switch (op) {
    case OP_MM_FWD: st = mo_matmul_forward_mixed(c, dt, big, NULL, out, w, NULL, N, C, OC); break;
    case OP_MM_BWD: st = mo_matmul_backward_mixed(c, dt, out, dw, db, big, dqkv, w, N, C, OC); break;
    case OP_ATT_FWD: st = mo_attention_forward_mixed(c, dt, out, att, qkv, B, T, C, NH); break;
    case OP_ATT_BWD: st = mo_attention_backward_mixed(c, dt, dqkv, out, qkv, att, B, T, C, NH); break;
    }
    CHECK_MSG(st == MO_OK, "%s on %s: %s", op_names[op], mo_backend_name(kind), mo_errmsg());
    mo_allocator_stats(a, after);
    for (int i = 0; i < 8; i++) CHECK_OK(mo_free(a, p[i]));
    mo_ctx_destroy(c);
    mo_allocator_destroy(a);
}

static void test_dry_peaks(mo_dtype dt) {
    printf("dispatcher contract (%s): scratch on every backend, dry peaks = cpu peaks\n", mo_dtype_name(dt));
    const size_t want[OP_COUNT] = {0, mo_matmul_backward_mixed_scratch_bytes(18, 20, 1),
                                   mo_attention_forward_mixed_scratch_bytes(dt, 2, 9, 12, 3),
                                   mo_attention_backward_mixed_scratch_bytes(dt, 2, 9, 12, 3)};
    for (int op = 0; op < OP_COUNT; op++) {
        mo_alloc_stats b_cpu, a_cpu, b_dry, a_dry;
        run_on(MO_BACKEND_CPU, op, dt, &b_cpu, &a_cpu);
        run_on(MO_BACKEND_DRY, op, dt, &b_dry, &a_dry);
        uint64_t ws_cpu = a_cpu.peak_by_cat[MO_CAT_WORKSPACE] - b_cpu.allocated_by_cat[MO_CAT_WORKSPACE];
        uint64_t ws_dry = a_dry.peak_by_cat[MO_CAT_WORKSPACE] - b_dry.allocated_by_cat[MO_CAT_WORKSPACE];
        CHECK_MSG(ws_cpu == ws_dry, "%s: scratch peak cpu %llu != dry %llu", op_names[op], (unsigned long long)ws_cpu,
                  (unsigned long long)ws_dry);
        CHECK_MSG(ws_cpu >= want[op] && ws_cpu < want[op] + 1024, "%s: scratch peak %llu, formula %zu", op_names[op],
                  (unsigned long long)ws_cpu, want[op]);
        CHECK_EQ_U64(a_cpu.peak_allocated_bytes, a_dry.peak_allocated_bytes);
        CHECK_MSG(a_cpu.allocated_bytes == b_cpu.allocated_bytes && a_dry.allocated_bytes == b_dry.allocated_bytes,
                  "%s: scratch not given back", op_names[op]);
    }
}

int main(void) {
    test_rng_seed(&rng, test_seed_from_time());
    if (!CHECK_OK(mo_allocator_create(&ha, MO_ALLOC_CACHING, MO_BACKEND_CPU, 0, NULL))) return test_finish();
    if (!CHECK_OK(mo_ctx_create(&hc, MO_BACKEND_CPU, ha))) return test_finish();
    const mo_dtype dts[2] = {MO_BF16, MO_F16};
    for (int i = 0; i < 2; i++) {
        const mo_dtype dt = dts[i];
        test_matmul(dt, 37, 64, 48, 1, 1);
        test_matmul(dt, 16, 100, 37, 0, 1);
        test_matmul(dt, 64, 256, 96, 1, 0);
        test_attention(dt, 2, 37, 96, 3);  // HS 32, odd T
        test_attention(dt, 1, 70, 128, 2); // HS 64
        test_attention(dt, 1, 1, 8, 2);    // T = 1
        test_dry_peaks(dt);
    }
    test_args();
    mo_ctx_destroy(hc);
    mo_allocator_destroy(ha);
    return test_finish();
}
