// CPU-backend properties of the GEMM and attention ops: each backward against central finite
// differences of its own cpu forward on tiny shapes, the forwards against closed forms in double, the
// fused (flash-style) attention against the materialized one, and the dispatcher contract (outputs that
// must be overwritten are poisoned with NaN first, += outputs start from random values, scratch taken
// and given back, dry peaks equal cpu peaks, bad shapes rejected, the scratch formulas).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/attention_fused.h"
#include "kernels/matmul.h"
#include "kernels/attention_fused_gemm.h"
#include "kernels/ops.h"
#include "strategies/alloc.h"
#include "tests/testlib.h"

static mo_allocator *ha;
static mo_ctx *hc; // cpu context: ops take plain host pointers

static float *fnew(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    if (!p) { fprintf(stderr, "out of host memory\n"); exit(1); }
    return p;
}
static float *fdup(const float *x, size_t n) { float *p = fnew(n); memcpy(p, x, n * sizeof(float)); return p; }
static void fill_nan(float *x, size_t n) { for (size_t i = 0; i < n; i++) x[i] = NAN; }

// sum_i a[i]*b[i] in double: the scalar "loss" whose gradient with respect to a is b.
static double dot(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

static double gelu_ref(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

// Central differences of loss() with respect to every element of x (n), into fd.
typedef double (*loss_fn)(void *user);
static void finite_diff(float *fd, float *x, size_t n, float h, loss_fn loss, void *user) {
    for (size_t i = 0; i < n; i++) {
        const float x0 = x[i];
        x[i] = x0 + h;
        double lp = loss(user);
        x[i] = x0 - h;
        double lm = loss(user);
        x[i] = x0;
        fd[i] = (float)((lp - lm) / (2.0 * (double)h));
    }
}

// ---------------------------------------------------------------------------------------------
// matmul: L = sum(out * R). Linear in each input, so central differences are exact but for rounding.
typedef struct {
    int N, C, OC;
    float *inp, *weight, *bias, *out, *R;
} mm_case;

static double mm_loss(void *u) {
    mm_case *m = u;
    if (mo_matmul_forward(hc, m->out, NULL, m->inp, m->weight, m->bias, m->N, m->C, m->OC) != MO_OK) return NAN;
    return dot(m->out, m->R, (size_t)m->N * m->OC);
}

static void test_matmul(int N, int C, int OC, int with_bias) {
    printf("matmul N=%d C=%d OC=%d bias=%d\n", N, C, OC, with_bias);
    test_rng r;
    test_rng_seed(&r, 1000u + (uint64_t)N * 31 + (uint64_t)C * 7 + (uint64_t)OC);
    const size_t nin = (size_t)N * C, nw = (size_t)OC * C, nout = (size_t)N * OC;
    mm_case m = {N, C, OC, fnew(nin), fnew(nw), with_bias ? fnew(OC) : NULL, fnew(nout), fnew(nout)};
    test_fill_uniform(&r, m.inp, nin, -1, 1);
    test_fill_uniform(&r, m.weight, nw, -1, 1);
    if (m.bias) test_fill_uniform(&r, m.bias, OC, -1, 1);
    test_fill_uniform(&r, m.R, nout, -1, 1);

    // forward against a double closed form; every output written
    fill_nan(m.out, nout);
    CHECK_OK(mo_matmul_forward(hc, m.out, NULL, m.inp, m.weight, m.bias, N, C, OC));
    float *want = fnew(nout);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = m.bias ? m.bias[o] : 0;
            for (int i = 0; i < C; i++) s += (double)m.inp[(size_t)n * C + i] * m.weight[(size_t)o * C + i];
            want[(size_t)n * OC + o] = (float)s;
        }
    CHECK_REL(m.out, want, nout, 1e-6);

    // gelu_out: gelu of the pre-activation, which stays in out unchanged
    float *pre = fnew(nout), *g = fnew(nout), *gwant = fnew(nout);
    fill_nan(pre, nout);
    fill_nan(g, nout);
    CHECK_OK(mo_matmul_forward(hc, pre, g, m.inp, m.weight, m.bias, N, C, OC));
    CHECK_MSG(memcmp(pre, m.out, nout * sizeof(float)) == 0, "matmul forward: out differs when gelu_out is asked");
    for (size_t i = 0; i < nout; i++) gwant[i] = (float)gelu_ref(pre[i]);
    CHECK_REL(g, gwant, nout, 1e-6);

    // backward: dinp overwritten (NaN first), dweight/dbias accumulate onto random values
    float *dinp = fnew(nin), *dw = fnew(nw), *db = fnew(OC);
    fill_nan(dinp, nin);
    test_fill_uniform(&r, dw, nw, -1, 1);
    test_fill_uniform(&r, db, OC, -1, 1);
    float *dw0 = fdup(dw, nw), *db0 = fdup(db, OC);
    CHECK_OK(mo_matmul_backward(hc, dinp, dw, m.bias ? db : NULL, m.R, m.inp, m.weight, N, C, OC));
    // the gradients alone, from zero
    float *gw = fnew(nw), *gb = fnew(OC), *gin = fnew(nin);
    memset(gw, 0, nw * sizeof(float));
    memset(gb, 0, OC * sizeof(float));
    CHECK_OK(mo_matmul_backward(hc, gin, gw, gb, m.R, m.inp, m.weight, N, C, OC));
    CHECK_MSG(memcmp(gin, dinp, nin * sizeof(float)) == 0, "matmul backward: dinp depends on its old value");
    float *acc = fnew(nw);
    for (size_t i = 0; i < nw; i++) acc[i] = (float)((double)dw0[i] + gw[i]);
    CHECK_REL(dw, acc, nw, 1e-6);
    if (m.bias) {
        for (int o = 0; o < OC; o++) acc[o] = (float)((double)db0[o] + gb[o]);
        CHECK_REL(db, acc, OC, 1e-6);
    } else {
        CHECK_MSG(memcmp(db, db0, OC * sizeof(float)) == 0, "matmul backward: dbias NULL but dbias touched");
    }
    // dinp NULL skips dinp and still accumulates dweight
    memcpy(dw, dw0, nw * sizeof(float));
    CHECK_OK(mo_matmul_backward(hc, NULL, dw, NULL, m.R, m.inp, m.weight, N, C, OC));
    for (size_t i = 0; i < nw; i++) acc[i] = (float)((double)dw0[i] + gw[i]);
    CHECK_REL(dw, acc, nw, 1e-6);

    // finite differences (h = 1/64 is exact in float)
    const float h = 1.0f / 64;
    float *fd = fnew(nw > nin ? nw : nin);
    finite_diff(fd, m.inp, nin, h, mm_loss, &m);
    CHECK_REL(gin, fd, nin, 1e-4);
    finite_diff(fd, m.weight, nw, h, mm_loss, &m);
    CHECK_REL(gw, fd, nw, 1e-4);
    if (m.bias) {
        finite_diff(fd, m.bias, OC, h, mm_loss, &m);
        CHECK_REL(gb, fd, OC, 1e-4);
    }
    free(m.inp); free(m.weight); free(m.bias); free(m.out); free(m.R); free(want);
    free(pre); free(g); free(gwant); free(dinp); free(dw); free(db); free(dw0); free(db0);
    free(gw); free(gb); free(gin); free(acc); free(fd);
}

// ---------------------------------------------------------------------------------------------
// attention: L = sum(out * R) through the materialized or the fused forward.
typedef struct {
    int B, T, C, NH, fused;
    float *qkv, *out, *att, *lse, *R;
} at_case;

static double at_loss(void *u) {
    at_case *a = u;
    mo_status st = a->fused ? mo_attention_fused_forward(hc, a->out, a->lse, a->qkv, a->B, a->T, a->C, a->NH)
                            : mo_attention_forward(hc, a->out, a->att, a->qkv, a->B, a->T, a->C, a->NH);
    if (st != MO_OK) return NAN;
    return dot(a->out, a->R, (size_t)a->B * a->T * a->C);
}

// scaled score of (b, h, query t, key t2) in double
static double score(const float *qkv, int b, int h, int t, int t2, int T, int C, int NH) {
    const int HS = C / NH;
    const float *q = qkv + ((size_t)b * T + t) * 3 * C + (size_t)h * HS;
    const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + (size_t)h * HS;
    return (double)(1.0f / sqrtf((float)HS)) * dot(q, k, HS);
}

static void test_attention(int B, int T, int C, int NH, int do_fd) {
    printf("attention B=%d T=%d C=%d NH=%d\n", B, T, C, NH);
    test_rng r;
    test_rng_seed(&r, 2000u + (uint64_t)B * 131 + (uint64_t)T * 17 + (uint64_t)C * 3 + NH);
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    const size_t nlse = (size_t)B * NH * T;
    at_case a = {B, T, C, NH, 0, fnew(nqkv), fnew(nout), fnew(natt), fnew(nlse), fnew(nout)};
    test_fill_uniform(&r, a.qkv, nqkv, -2, 2); // wide enough that the softmax is far from uniform
    test_fill_uniform(&r, a.R, nout, -1, 1);

    // materialized forward: every element written, rows are causal distributions
    fill_nan(a.out, nout);
    fill_nan(a.att, natt);
    CHECK_OK(mo_attention_forward(hc, a.out, a.att, a.qkv, B, T, C, NH));
    int ok_rows = 1, ok_upper = 1;
    float *att_want = fnew(natt);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *row = a.att + (((size_t)b * NH + h) * T + t) * T;
                float *wrow = att_want + (((size_t)b * NH + h) * T + t) * T;
                double sum = 0, z = 0, mx = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) mx = fmax(mx, score(a.qkv, b, h, t, t2, T, C, NH));
                for (int t2 = 0; t2 <= t; t2++) z += exp(score(a.qkv, b, h, t, t2, T, C, NH) - mx);
                for (int t2 = 0; t2 < T; t2++) {
                    if (t2 <= t) {
                        sum += row[t2];
                        ok_rows &= row[t2] >= 0;
                        wrow[t2] = (float)(exp(score(a.qkv, b, h, t, t2, T, C, NH) - mx) / z);
                    } else {
                        ok_upper &= row[t2] == 0.0f;
                        wrow[t2] = 0.0f;
                    }
                }
                ok_rows &= fabs(sum - 1.0) < 1e-5;
            }
    CHECK_MSG(ok_rows, "attention forward: a causal row is not a distribution");
    CHECK_MSG(ok_upper, "attention forward: att above the diagonal is not exactly 0");
    CHECK_REL(a.att, att_want, natt, 1e-6);

    // fused forward equals the materialized one; lse is log sum exp of the scaled scores
    float *out_f = fnew(nout), *lse_want = fnew(nlse);
    fill_nan(out_f, nout);
    fill_nan(a.lse, nlse);
    CHECK_OK(mo_attention_fused_forward(hc, out_f, a.lse, a.qkv, B, T, C, NH));
    CHECK_REL(out_f, a.out, nout, 1e-6);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                double mx = -INFINITY, z = 0;
                for (int t2 = 0; t2 <= t; t2++) mx = fmax(mx, score(a.qkv, b, h, t, t2, T, C, NH));
                for (int t2 = 0; t2 <= t; t2++) z += exp(score(a.qkv, b, h, t, t2, T, C, NH) - mx);
                lse_want[((size_t)b * NH + h) * T + t] = (float)(mx + log(z));
            }
    CHECK_REL(a.lse, lse_want, nlse, 1e-6);

    // backwards: dqkv overwritten (NaN first); fused equals materialized
    float *dqkv = fnew(nqkv), *dqkv_f = fnew(nqkv);
    fill_nan(dqkv, nqkv);
    fill_nan(dqkv_f, nqkv);
    CHECK_OK(mo_attention_backward(hc, dqkv, a.R, a.qkv, a.out, a.att, B, T, C, NH));
    CHECK_OK(mo_attention_fused_backward(hc, dqkv_f, a.R, a.qkv, out_f, a.lse, B, T, C, NH));
    CHECK_REL(dqkv_f, dqkv, nqkv, 1e-5);

    if (do_fd) {
        // finite differences of L through each forward: the scores are smooth, h = 2^-10 keeps the
        // truncation error (h^2) and the rounding error (eps / h) both near 1e-6 of the gradient
        float *fd = fnew(nqkv);
        const float h = 1.0f / 1024;
        finite_diff(fd, a.qkv, nqkv, h, at_loss, &a);
        CHECK_REL(dqkv, fd, nqkv, 1e-3);
        a.fused = 1;
        finite_diff(fd, a.qkv, nqkv, h, at_loss, &a);
        CHECK_REL(dqkv_f, fd, nqkv, 1e-3);
        free(fd);
    }
    free(a.qkv); free(a.out); free(a.att); free(a.lse); free(a.R); free(att_want);
    free(out_f); free(lse_want); free(dqkv); free(dqkv_f);
}

// ---------------------------------------------------------------------------------------------
static void test_shapes(void) {
    printf("shape checks\n");
    float x[64] = {0}; // never read: each call is refused on its shape first
    CHECK(mo_attention_forward(hc, x, x, x, 1, 4, 10, 3) == MO_ERR_INVALID); // C % NH
    CHECK(mo_attention_backward(hc, x, x, x, x, x, 1, 4, 10, 3) == MO_ERR_INVALID);
    CHECK(mo_attention_fused_forward(hc, x, x, x, 1, 4, 10, 3) == MO_ERR_INVALID);
    CHECK(mo_attention_fused_backward(hc, x, x, x, x, x, 1, 4, 10, 3) == MO_ERR_INVALID);
    CHECK(mo_attention_forward(hc, x, x, x, 0, 4, 8, 2) == MO_ERR_INVALID);
    CHECK(mo_attention_fused_forward(hc, x, x, x, 1, 4, 258, 2) == MO_ERR_UNSUPPORTED); // HS 129 > 128
    CHECK(mo_attention_fused_backward(hc, x, x, x, x, x, 1, 4, 258, 2) == MO_ERR_UNSUPPORTED);
    CHECK(mo_matmul_forward(hc, x, NULL, x, x, NULL, 0, 4, 4) == MO_ERR_INVALID);
    CHECK(mo_matmul_backward(hc, x, x, x, x, x, x, 4, -1, 4) == MO_ERR_INVALID);
    mo_clear_error();

    printf("scratch formulas\n");
    // B=2 T=8 C=12 NH=3: BTC = 192, B*NH*T*T = 384, B*NH*T = 48 floats
    CHECK_EQ_U64(mo_attention_forward_scratch_bytes(2, 8, 12, 3), 3 * 192 * 4);
    CHECK_EQ_U64(mo_attention_backward_scratch_bytes(2, 8, 12, 3), (6 * 192 + 384) * 4);
    CHECK_EQ_U64(mo_attention_fused_backward_scratch_bytes(2, 8, 12, 3), 48 * 4);
    CHECK_EQ_U64(mo_matmul_backward_scratch_bytes(16, 24, 1), (24 + 16) * 4);
    CHECK_EQ_U64(mo_matmul_backward_scratch_bytes(16, 24, 0), 0);
    // GPT-2 small, B=8 T=1024: the materialized backward scratch is 1.1 GiB, the fused one 384 KiB
    CHECK_EQ_U64(mo_attention_backward_scratch_bytes(8, 1024, 768, 12), (6ull * 8 * 1024 * 768 + 8ull * 12 * 1024 * 1024) * 4);
    CHECK_EQ_U64(mo_attention_fused_backward_scratch_bytes(8, 1024, 768, 12), 8ull * 12 * 1024 * 4);

    // The blocked-GEMM fused attention (attention_fused_gemm.h): at T=1024 a query row of one head in both
    // buffers is 2 * 1024 * 4 = 8 KiB, so 2.5 MiB a head takes 320 rows: 4 chunks, even ones of 256, at
    // any batch. GPT-2 small B=8 (B*NH = 96): forward one (96, 256, 1024) buffer + 3 * 2 jobs * 4 chunks *
    // 96 pointers; backward D (96, 1024) + two buffers + 3 * 5 * 4 * 96 pointers.
    // The default engine is the blocked GEMMs: a context made with MEMOPT_ATTN_FUSED32 unset takes it, and
    // =own / =gemm pick each (ctx.c; cli_attn_fused32.sh checks the same through the binary).
    CHECK_EQ_U64(MO_ATTN_FUSED32_DEFAULT, MO_ATTN_FUSED32_GEMM);
    {
        const char *was = getenv("MEMOPT_ATTN_FUSED32");
        char keep[16] = "";
        if (was) snprintf(keep, sizeof keep, "%s", was);
        const char *vals[3] = {NULL, "own", "gemm"};
        const int want[3] = {MO_ATTN_FUSED32_GEMM, MO_ATTN_FUSED32_OWN, MO_ATTN_FUSED32_GEMM};
        for (int i = 0; i < 3; i++) {
            if (vals[i]) setenv("MEMOPT_ATTN_FUSED32", vals[i], 1);
            else unsetenv("MEMOPT_ATTN_FUSED32");
            mo_ctx *e = NULL;
            if (CHECK_OK(mo_ctx_create(&e, MO_BACKEND_CPU, ha))) {
                CHECK_MSG(e->attn_fused32 == want[i], "MEMOPT_ATTN_FUSED32=%s: engine %d, want %d", vals[i] ? vals[i] : "(unset)",
                          e->attn_fused32, want[i]);
                mo_ctx_destroy(e);
            }
        }
        if (was) setenv("MEMOPT_ATTN_FUSED32", keep, 1);
        else unsetenv("MEMOPT_ATTN_FUSED32");
    }
    mo_ctx *z = calloc(1, sizeof *z); // for the pure-C rules below: no test override (attn_fused_rows 0)
    CHECK_EQ_U64(mo_attn_fused_gemm_rows(z, 8, 1024, 12), 256);
    CHECK_EQ_U64(mo_attn_fused_gemm_rows(z, 2, 1024, 12), 256);  // the batch does not move it
    CHECK_EQ_U64(mo_attn_fused_gemm_rows(z, 4, 2048, 16), 128);  // 160 fit, 128: 16 chunks of 128
    CHECK_EQ_U64(mo_attn_fused_gemm_rows(z, 8, 1000, 12), 256);  // 327 fit, 320: 4 chunks, 250 -> 256
    CHECK_EQ_U64(mo_attn_fused_gemm_rows(z, 1, 300, 1), 300);    // 1092 fit: one chunk of T (320 capped)
    CHECK_EQ_U64(mo_attn_fused_gemm_rows(z, 1, 64, 1), 64);      // at most T
    CHECK_EQ_U64(mo_attn_fused_gemm_rows(z, 1, 65536, 1), 64);   // 5 fit: at least 64
    CHECK_EQ_U64(mo_attention_fused_scratch_bytes(z, 0, 8, 1024, 768, 12), 96ull * 256 * 1024 * 4 + 3 * 2 * 4 * 96 * 8);
    CHECK_EQ_U64(mo_attention_fused_scratch_bytes(z, 1, 8, 1024, 768, 12),
                 96ull * 1024 * 4 + 2 * 96ull * 256 * 1024 * 4 + 3 * 5 * 4 * 96 * 8);
    z->attn_fused_rows = 7; // B=2 T=9 NH=3: chunks of 7 and 2 rows; each part rounded up to 256 bytes
    CHECK_EQ_U64(mo_attn_fused_gemm_rows(z, 2, 9, 3), 7);
    CHECK_EQ_U64(mo_attention_fused_scratch_bytes(z, 0, 2, 9, 12, 3), 1536 + 768);          // 6*7*9*4, 3*2*2*6*8
    CHECK_EQ_U64(mo_attention_fused_scratch_bytes(z, 1, 2, 9, 12, 3), 256 + 2 * 1536 + 1536); // 6*9*4, 3*5*2*6*8
    z->attn_fused32 = MO_ATTN_FUSED32_OWN; // the flash kernels: none forward, D backward
    CHECK_EQ_U64(mo_attention_fused_scratch_bytes(z, 0, 2, 9, 12, 3), 0);
    CHECK_EQ_U64(mo_attention_fused_scratch_bytes(z, 1, 2, 9, 12, 3), 6 * 9 * 4);
    free(z);
}

// ---------------------------------------------------------------------------------------------
// The same op on cpu and dry: the scratch is taken and given back on both, and the peaks agree.
enum { OP_MM_FWD, OP_MM_BWD, OP_ATT_FWD, OP_ATT_BWD, OP_FA_FWD, OP_FA_BWD, OP_COUNT };
static const char *op_names[OP_COUNT] = {"matmul_forward", "matmul_backward", "attention_forward",
                                         "attention_backward", "attention_fused_forward",
                                         "attention_fused_backward"};

static int g_fused32 = MO_ATTN_FUSED32_DEFAULT, g_fused_rows; // the fused attention's engine and chunk rows for run_on's ctx

static void run_on(mo_backend_kind kind, int op, mo_alloc_stats *before, mo_alloc_stats *peak, mo_alloc_stats *after) {
    const int B = 2, T = 9, C = 12, NH = 3, N = B * T, OC = 20;
    mo_allocator *a;
    mo_ctx *c;
    if (!CHECK_OK(mo_allocator_create(&a, MO_ALLOC_CACHING, kind, 0, NULL))) return;
    if (!CHECK_OK(mo_ctx_create(&c, kind, a))) { mo_allocator_destroy(a); return; }
    c->attn_fused32 = g_fused32;
    c->attn_fused_rows = g_fused_rows;
    const size_t sizes[8] = {(size_t)N * 3 * C, (size_t)N * C, (size_t)B * NH * T * T, (size_t)B * NH * T,
                             (size_t)N * 3 * C, (size_t)OC * C, (size_t)OC, (size_t)N * OC};
    float *p[8] = {0};
    for (int i = 0; i < 8; i++) {
        void *v = NULL;
        CHECK_OK(mo_alloc(a, sizes[i] * sizeof(float), MO_CAT_ACTIVATION, &v));
        p[i] = v;
        if (kind == MO_BACKEND_CPU && v) // defined inputs (0.01 * index pattern) for the cpu run
            for (size_t j = 0; j < sizes[i]; j++) p[i][j] = 0.01f * (float)((j * 7 + i) % 13) - 0.05f;
    }
    float *qkv = p[0], *out = p[1], *att = p[2], *lse = p[3], *dqkv = p[4], *w = p[5], *bias = p[6], *big = p[7];
    mo_allocator_reset_peaks(a);
    mo_allocator_stats(a, before);
    mo_status st = MO_OK;
    switch (op) {
    case OP_MM_FWD: st = mo_matmul_forward(c, big, NULL, out, w, bias, N, C, OC); break;
    case OP_MM_BWD: st = mo_matmul_backward(c, out, w, bias, big, dqkv, w, N, C, OC); break;
    case OP_ATT_FWD: st = mo_attention_forward(c, out, att, qkv, B, T, C, NH); break;
    case OP_ATT_BWD: st = mo_attention_backward(c, dqkv, out, qkv, NULL, att, B, T, C, NH); break;
    case OP_FA_FWD: st = mo_attention_fused_forward(c, out, lse, qkv, B, T, C, NH); break;
    case OP_FA_BWD: st = mo_attention_fused_backward(c, dqkv, out, qkv, out, lse, B, T, C, NH); break;
    }
    CHECK_MSG(st == MO_OK, "%s on %s: %s", op_names[op], mo_backend_name(kind), mo_errmsg());
    mo_allocator_stats(a, after);
    *peak = *after;
    for (int i = 0; i < 8; i++) CHECK_OK(mo_free(a, p[i]));
    mo_ctx_destroy(c);
    mo_allocator_destroy(a);
}

// Ops from first_op on, under the fused attention engine fused32 with chunk rows rows (0: the default)
static void dry_peaks_under(int fused32, int rows, int first_op) {
    g_fused32 = fused32;
    g_fused_rows = rows;
    mo_ctx *z = calloc(1, sizeof *z);
    if (!z) { fprintf(stderr, "out of host memory\n"); exit(1); }
    z->attn_fused32 = fused32;
    z->attn_fused_rows = rows;
    const size_t want_scratch[OP_COUNT] = {0, mo_matmul_backward_scratch_bytes(18, 20, 1),
                                           mo_attention_forward_scratch_bytes(2, 9, 12, 3),
                                           mo_attention_backward_scratch_bytes(2, 9, 12, 3),
                                           mo_attention_fused_scratch_bytes(z, 0, 2, 9, 12, 3),
                                           mo_attention_fused_scratch_bytes(z, 1, 2, 9, 12, 3)};
    free(z);
    for (int op = first_op; op < OP_COUNT; op++) {
        mo_alloc_stats b_cpu = {0}, p_cpu = {0}, a_cpu = {0}, b_dry = {0}, p_dry = {0}, a_dry = {0};
        run_on(MO_BACKEND_CPU, op, &b_cpu, &p_cpu, &a_cpu);
        run_on(MO_BACKEND_DRY, op, &b_dry, &p_dry, &a_dry);
        uint64_t ws_cpu = p_cpu.peak_by_cat[MO_CAT_WORKSPACE] - b_cpu.allocated_by_cat[MO_CAT_WORKSPACE];
        uint64_t ws_dry = p_dry.peak_by_cat[MO_CAT_WORKSPACE] - b_dry.allocated_by_cat[MO_CAT_WORKSPACE];
        CHECK_MSG(ws_cpu == ws_dry, "%s: scratch peak cpu %llu != dry %llu", op_names[op], (unsigned long long)ws_cpu,
                  (unsigned long long)ws_dry);
        CHECK_MSG(ws_cpu >= want_scratch[op] && ws_cpu < want_scratch[op] + 1024, "%s: scratch peak %llu, formula %zu",
                  op_names[op], (unsigned long long)ws_cpu, want_scratch[op]);
        CHECK_EQ_U64(p_cpu.peak_allocated_bytes, p_dry.peak_allocated_bytes);
        CHECK_MSG(a_cpu.allocated_bytes == b_cpu.allocated_bytes && a_dry.allocated_bytes == b_dry.allocated_bytes,
                  "%s: scratch not given back", op_names[op]);
    }
    g_fused32 = MO_ATTN_FUSED32_DEFAULT;
    g_fused_rows = 0;
}

static void test_dry_peaks(void) {
    printf("dispatcher contract: scratch on every backend, dry peaks = cpu peaks\n");
    dry_peaks_under(MO_ATTN_FUSED32_OWN, 0, 0); // every op; the fused attention on the flash kernels
    dry_peaks_under(MO_ATTN_FUSED32_GEMM, 0, OP_FA_FWD); // the blocked GEMMs in one chunk
    dry_peaks_under(MO_ATTN_FUSED32_GEMM, 7, OP_FA_FWD); // in chunks of 7 and 2 rows
}

int main(void) {
    if (!CHECK_OK(mo_allocator_create(&ha, MO_ALLOC_CACHING, MO_BACKEND_CPU, 0, NULL))) return test_finish();
    if (!CHECK_OK(mo_ctx_create(&hc, MO_BACKEND_CPU, ha))) return test_finish();

    test_matmul(5, 7, 6, 1);
    test_matmul(3, 4, 9, 0);
    test_matmul(1, 16, 8, 1);
    test_attention(2, 5, 8, 2, 1);  // HS 4
    test_attention(1, 7, 6, 3, 1);  // HS 2
    test_attention(2, 4, 4, 1, 1);  // one head
    test_attention(1, 1, 4, 2, 1);  // T = 1: every row is one key
    test_attention(2, 37, 96, 3, 0); // HS 32, odd T: fused against materialized
    test_attention(1, 70, 64, 1, 0); // HS 64, T past one 64-row tile
    test_shapes();
    test_dry_peaks();

    mo_ctx_destroy(hc);
    mo_allocator_destroy(ha);
    return test_finish();
}
