// CPU tests of the MEMOPT_ATTN_IMPL knob and the cudnn implementation's dispatch (attention_cudnn.h); the
// cuDNN graphs themselves are tests/gpu_attention_cudnn.c. Checked here:
//  - the knob: unset and "own" give the own kernels, "cudnn" the cudnn path, any other value fails
//    mo_ctx_create (MO_ERR_INVALID, naming the variable).
//  - under cudnn, the 16-bit dispatchers run the same plain-C references on cpu: out, lse and dqkv are the
//    bits of the own path (a misplaced D inside the bigger scratch, or a swapped argument, would not be).
//  - memory: the backward's scratch is (B*NH*T*HS + B*NH*T) floats in category workspace on cpu and dry
//    alike (the workspace peak of one backward equals that, rounded as the allocator rounds, on both),
//    and nothing is allocated by the forward; under own the backward's scratch stays the (B*NH*T) floats.
//  - refusals on cpu and dry alike: seq not a multiple of 128, head size not a multiple of 8 or above 128
//    (MO_ERR_UNSUPPORTED); fp32 is not refused but goes to the fp32 op (cuDNN's SDPA has no fp32).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention_cudnn.h"
#include "kernels/attention_fused.h"
#include "kernels/attention_fused_mixed.h"
#include "kernels/matmul_mixed.h"
#include "strategies/alloc.h"
#include "tests/testlib.h"

static test_rng rng;
#include "tests/mixed_host.h" // fnew, hnew16, frand_dt, poison16 (on rng)

static mo_ctx *ctx_with(mo_allocator **a, mo_backend_kind be, const char *impl, mo_status *st) {
    if (impl) setenv("MEMOPT_ATTN_IMPL", impl, 1);
    else unsetenv("MEMOPT_ATTN_IMPL");
    mo_ctx *c = NULL;
    *a = NULL;
    if (mo_allocator_create(a, MO_ALLOC_CACHING, be, 0, NULL) != MO_OK) return NULL;
    *st = mo_ctx_create(&c, be, *a);
    unsetenv("MEMOPT_ATTN_IMPL");
    return c;
}
static void ctx_free(mo_ctx *c, mo_allocator *a) {
    mo_ctx_destroy(c);
    mo_allocator_destroy(a);
}

static void test_knob(void) {
    printf("knob MEMOPT_ATTN_IMPL\n");
    const char *vals[3] = {NULL, "own", "cudnn"};
    const int want[3] = {MO_ATTN_IMPL_OWN, MO_ATTN_IMPL_OWN, MO_ATTN_IMPL_CUDNN};
    for (int i = 0; i < 3; i++) {
        mo_allocator *a;
        mo_status st = MO_ERR_INTERNAL;
        mo_ctx *c = ctx_with(&a, MO_BACKEND_CPU, vals[i], &st);
        CHECK_OK(st);
        CHECK_MSG(c && c->attn_impl == want[i], "MEMOPT_ATTN_IMPL=%s: attn_impl %d, want %d",
                  vals[i] ? vals[i] : "(unset)", c ? c->attn_impl : -1, want[i]);
        ctx_free(c, a);
    }
    mo_allocator *a;
    mo_status st = MO_OK;
    mo_ctx *c = ctx_with(&a, MO_BACKEND_DRY, "cuDNN", &st);
    CHECK_MSG(st == MO_ERR_INVALID && c == NULL, "MEMOPT_ATTN_IMPL=cuDNN: status %s, want invalid",
              mo_status_name(st));
    CHECK_MSG(strstr(mo_errmsg(), "MEMOPT_ATTN_IMPL") != NULL, "the message names the variable: %s", mo_errmsg());
    mo_clear_error();
    mo_ctx_destroy(c);
    mo_allocator_destroy(a);
}

// One forward and backward on cpu under own and under cudnn: the same bits (the same references).
static void test_same_as_own(mo_dtype dt, int B, int T, int C, int NH) {
    printf("cpu under cudnn equals own: %s B=%d T=%d C=%d NH=%d\n", mo_dtype_name(dt), B, T, C, NH);
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nl = (size_t)B * NH * T;
    uint16_t *qkv, *dout;
    float *fq = frand_dt(dt, nqkv, -2, 2, &qkv), *fd = frand_dt(dt, nout, -1, 1, &dout);
    uint16_t *out[2], *dqkv[2];
    float *lse[2];
    for (int r = 0; r < 2; r++) {
        mo_allocator *a;
        mo_status st = MO_ERR_INTERNAL;
        mo_ctx *c = ctx_with(&a, MO_BACKEND_CPU, r ? "cudnn" : "own", &st);
        CHECK_OK(st);
        out[r] = hnew16(nout), dqkv[r] = hnew16(nqkv), lse[r] = fnew(nl);
        poison16(dt, out[r], nout);
        poison16(dt, dqkv[r], nqkv);
        for (size_t i = 0; i < nl; i++) lse[r][i] = NAN;
        if (c) {
            CHECK_OK(mo_attention_fused_forward_mixed(c, dt, out[r], lse[r], qkv, B, T, C, NH));
            CHECK_OK(mo_attention_fused_backward_mixed(c, dt, dqkv[r], dout, qkv, out[r], lse[r], B, T, C, NH));
        }
        ctx_free(c, a);
    }
    CHECK_MSG(memcmp(out[0], out[1], nout * 2) == 0, "out differs between own and cudnn on cpu");
    CHECK_MSG(memcmp(lse[0], lse[1], nl * sizeof(float)) == 0, "lse differs between own and cudnn on cpu");
    CHECK_MSG(memcmp(dqkv[0], dqkv[1], nqkv * 2) == 0, "dqkv differs between own and cudnn on cpu");
    int finite = 1;
    for (size_t i = 0; i < nqkv; i++) finite &= isfinite(mo_mmg_load(dt, dqkv[1], i)) != 0;
    CHECK_MSG(finite, "dqkv under cudnn has a NaN (a poisoned element was not written)");
    for (int r = 0; r < 2; r++) { free(out[r]); free(dqkv[r]); free(lse[r]); }
    free(fq); free(fd); free(qkv); free(dout);
}

// The workspace peak of one forward and one backward, on backend be under impl.
static void ws_peaks(mo_backend_kind be, const char *impl, mo_dtype dt, int B, int T, int C, int NH, uint64_t *fwd,
                     uint64_t *bwd) {
    *fwd = *bwd = UINT64_MAX;
    mo_allocator *a;
    mo_status st = MO_ERR_INTERNAL;
    mo_ctx *c = ctx_with(&a, be, impl, &st);
    CHECK_OK(st);
    if (!c) { mo_allocator_destroy(a); return; }
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nl = (size_t)B * NH * T;
    void *qkv = NULL, *out = NULL, *dout = NULL, *dqkv = NULL, *lse = NULL;
    CHECK_OK(mo_alloc(a, nqkv * 2, MO_CAT_ACTIVATION, &qkv));
    CHECK_OK(mo_alloc(a, nqkv * 2, MO_CAT_ACTIVATION, &dqkv));
    CHECK_OK(mo_alloc(a, nout * 2, MO_CAT_ACTIVATION, &out));
    CHECK_OK(mo_alloc(a, nout * 2, MO_CAT_ACTIVATION, &dout));
    CHECK_OK(mo_alloc(a, nl * sizeof(float), MO_CAT_ACTIVATION, &lse));
    if (be == MO_BACKEND_CPU) { // defined inputs for the references
        memset(qkv, 0, nqkv * 2);
        memset(dout, 0, nout * 2);
    }
    mo_alloc_stats s0, s;
    mo_allocator_stats(a, &s0);
    mo_allocator_reset_peaks(a);
    CHECK_OK(mo_attention_fused_forward_mixed(c, dt, out, lse, qkv, B, T, C, NH));
    mo_allocator_stats(a, &s);
    *fwd = s.peak_by_cat[MO_CAT_WORKSPACE] - s0.allocated_by_cat[MO_CAT_WORKSPACE]; // the GEMM workspace held throughout
    mo_allocator_reset_peaks(a);
    CHECK_OK(mo_attention_fused_backward_mixed(c, dt, dqkv, dout, qkv, out, lse, B, T, C, NH));
    mo_allocator_stats(a, &s);
    *bwd = s.peak_by_cat[MO_CAT_WORKSPACE] - s0.allocated_by_cat[MO_CAT_WORKSPACE];
    mo_free(a, qkv); mo_free(a, dqkv); mo_free(a, out); mo_free(a, dout); mo_free(a, lse);
    ctx_free(c, a);
}

static uint64_t round512(uint64_t b) { return (b + 511) / 512 * 512; }

static void test_memory(void) {
    const int B = 2, T = 128, C = 64, NH = 2, HS = C / NH;
    printf("memory: B=%d T=%d C=%d NH=%d\n", B, T, C, NH);
    const uint64_t want_cudnn = round512(((uint64_t)B * NH * T * HS + (uint64_t)B * NH * T) * 4);
    const uint64_t want_own = round512((uint64_t)B * NH * T * 4);
    CHECK_EQ_U64(mo_attention_cudnn_backward_scratch_bytes(B, T, C, NH),
                 ((uint64_t)B * NH * T * HS + (uint64_t)B * NH * T) * 4);
    uint64_t f[2][2], b[2][2]; // [impl][backend]
    const char *impl[2] = {"own", "cudnn"};
    const mo_backend_kind be[2] = {MO_BACKEND_CPU, MO_BACKEND_DRY};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) ws_peaks(be[j], impl[i], MO_BF16, B, T, C, NH, &f[i][j], &b[i][j]);
    for (int i = 0; i < 2; i++) {
        printf("    %s: forward workspace %llu B (cpu) / %llu (dry), backward %llu / %llu\n", impl[i],
               (unsigned long long)f[i][0], (unsigned long long)f[i][1], (unsigned long long)b[i][0],
               (unsigned long long)b[i][1]);
        CHECK_EQ_U64(f[i][0], f[i][1]);
        CHECK_EQ_U64(b[i][0], b[i][1]);
        CHECK_EQ_U64(f[i][0], 0);
    }
    CHECK_EQ_U64(b[0][0], want_own);
    CHECK_EQ_U64(b[1][0], want_cudnn);
}

static void test_refusals(void) {
    printf("refusals under cudnn\n");
    const mo_backend_kind be[2] = {MO_BACKEND_CPU, MO_BACKEND_DRY};
    for (int j = 0; j < 2; j++) {
        mo_allocator *a;
        mo_status st = MO_ERR_INTERNAL;
        mo_ctx *c = ctx_with(&a, be[j], "cudnn", &st);
        CHECK_OK(st);
        if (!c) { mo_allocator_destroy(a); continue; }
        // shapes: (T, C, NH) with T not a multiple of 128, HS 12, HS 136
        const int sh[3][3] = {{64, 64, 2}, {128, 24, 2}, {128, 272, 2}};
        const size_t big = (size_t)2 * 128 * 3 * 272;
        uint16_t *x = hnew16(big), *y = hnew16(big), *o = hnew16(big);
        float *l = fnew(2 * 2 * 128);
        memset(x, 0, big * 2);
        memset(o, 0, big * 2);
        for (int s = 0; s < 3; s++) {
            const int T = sh[s][0], C = sh[s][1], NH = sh[s][2];
            st = mo_attention_fused_forward_mixed(c, MO_F16, o, l, x, 1, T, C, NH);
            CHECK_MSG(st == MO_ERR_UNSUPPORTED, "%s forward T %d C %d NH %d: %s, want unsupported",
                      mo_backend_name(be[j]), T, C, NH, mo_status_name(st));
            CHECK_MSG(strstr(mo_errmsg(), "MEMOPT_ATTN_IMPL=cudnn") != NULL, "the reason names the knob: %s",
                      mo_errmsg());
            st = mo_attention_fused_backward_mixed(c, MO_BF16, y, o, x, o, l, 1, T, C, NH);
            CHECK_MSG(st == MO_ERR_UNSUPPORTED, "%s backward T %d C %d NH %d: %s, want unsupported",
                      mo_backend_name(be[j]), T, C, NH, mo_status_name(st));
            mo_clear_error();
        }
        // fp32 is the fp32 op's (cuDNN's SDPA has no fp32): not refused, at T 64 too
        float *xf = fnew((size_t)64 * 3 * 64), *of = fnew((size_t)64 * 64);
        memset(xf, 0, (size_t)64 * 3 * 64 * sizeof(float));
        CHECK_OK(mo_attention_fused_forward_mixed(c, MO_F32, of, l, xf, 1, 64, 64, 2));
        free(xf); free(of); free(x); free(y); free(o); free(l);
        ctx_free(c, a);
    }
}

int main(void) {
    test_rng_seed(&rng, test_seed_from_time());
    test_knob();
    test_same_as_own(MO_BF16, 2, 128, 64, 2);
    test_same_as_own(MO_F16, 1, 256, 96, 3);
    test_memory();
    test_refusals();
    return test_finish();
}
