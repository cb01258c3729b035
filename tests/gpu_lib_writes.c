// MEMOPT_MARK_LIB_WRITES (kernels/lib_writes.h: what a cuBLAS, cuBLASLt or cuDNN call writes is cleared
// just before it, for compute-sanitizer initcheck) on the GPU:
// - a GEMM whose output columns are shorter than its leading dimension keeps the bytes of the gap (the
//   mark clears what the call writes and nothing else) and computes the reference;
// - every marked call site gives the same bits with the mark as without it, on fresh random data: the
//   materialized attention's GEMMs in fp32 (cuBLAS scores) and bf16, strided and batched, forward and
//   backward, in chunks of query rows; cuDNN's convolution passes in fp32 and bf16; the GEMMs of a linear
//   layer with their epilogues (GELU, the residual add, the GELU backward) in fp32, bf16 and fp16;
// - the mark itself zeroes exactly its region (rows x width at a pitch), whatever the alignment;
// - the knob itself: 1 sets the context's flag, a value other than 0 or 1 fails mo_ctx_create.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/conv.h"
#include "kernels/ctx.h"
#include "kernels/dtype.h"
#include "kernels/lib_writes.h"
#include "kernels/ops.h"
#include "kernels/ops_mixed_gemm.h"
#include "strategies/alloc.h"
#include "tests/testlib.h"
#ifdef MEMOPT_HAVE_CUDA
#include "kernels/lt_gemm.h"
#endif

static mo_allocator *ga;
static mo_ctx *gc;
static test_rng rng;
#include "tests/devmem.h"

#ifdef MEMOPT_HAVE_CUDA
// n random elements of dt in [lo, hi] on the device
static void *drand(mo_dtype dt, size_t n, float lo, float hi) {
    float *f = malloc(n * sizeof(float));
    test_fill_uniform(&rng, f, n, lo, hi);
    const size_t e = mo_dtype_size(dt);
    void *h = malloc(n * e);
    if (dt == MO_F32) memcpy(h, f, n * e);
    else mo_convert_from_f32(dt, h, f, n);
    void *d = dup_dev(h, n * e);
    free(f);
    free(h);
    return d;
}

// bytes of d, copied to a new host buffer
static void *host_copy(const void *d, size_t bytes) {
    void *h = malloc(bytes);
    d2h(h, d, bytes);
    return h;
}

static void same(const char *what, const void *a, const void *b, size_t bytes) {
    CHECK_MSG(memcmp(a, b, bytes) == 0, "%s: the marked run's bits differ from the unmarked run's", what);
}

// D (m 5, n 7) at ldd 8, column-major, = A (5, 3) @ B (3, 7), the 3 gap rows of each column holding 42.
static void gap_case(void) {
    const int m = 5, n = 7, k = 3, ldd = 8;
    float A[15], B[21], D[56];
    test_fill_uniform(&rng, A, 15, -1.0f, 1.0f);
    test_fill_uniform(&rng, B, 21, -1.0f, 1.0f);
    for (int i = 0; i < 56; i++) D[i] = 42.0f;
    float *dA = dup_dev(A, sizeof A), *dB = dup_dev(B, sizeof B), *dD = dup_dev(D, sizeof D);
    mo_lt_gemm g = {CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, dA, m, dB, k, dD, ldd, CUDA_R_32F, CUDA_R_32F, 0.0f,
                    CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0, 0, NULL};
    int no_algo = 0;
    gc->mark_lib_writes = 1;
    CHECK_OK(mo_lt_matmul(gc, &g, &no_algo));
    gc->mark_lib_writes = 0;
    CHECK(!no_algo);
    d2h(D, dD, sizeof D);
    int gap_kept = 1;
    double err = 0, ref_max = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < ldd; i++) {
            if (i >= m) { gap_kept &= D[j * ldd + i] == 42.0f; continue; }
            double r = 0;
            for (int p = 0; p < k; p++) r += (double)A[p * m + i] * B[j * k + p];
            err = fmax(err, fabs(D[j * ldd + i] - r));
            ref_max = fmax(ref_max, fabs(r));
        }
    CHECK_MSG(gap_kept, "the mark cleared bytes between the GEMM's columns and its leading dimension");
    CHECK_MSG(err <= 1e-5 * fmax(ref_max, 1.0), "marked GEMM: max abs err %.3e (reference max %.3e)", err, ref_max);
    printf("gap case: the 3 gap rows of 7 columns kept, max abs err %.2e\n", err);
    dfree(dA); dfree(dB); dfree(dD);
}

// The materialized attention forward and backward, unmarked then marked, in one GEMM form, in causal
// chunks of `rows` query rows (so the marks' chunk offsets and the score rows' whole-row exception run).
static void attention_case(mo_dtype dt, int form, int rows, int B, int T, int C, int NH) {
    const size_t e = mo_dtype_size(dt), nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C,
                 natt = (size_t)B * NH * T * T;
    void *qkv = drand(dt, nqkv, -2, 2), *dout = drand(dt, nout, -1, 1);
    void *out = dnew(nout * e), *att = dnew(natt * e), *dqkv = dnew(nqkv * e);
    void *got[2][3];
    gc->attn_gemm = form;
    gc->attn_chunk_rows = rows;
    gc->attn_own_scores = 0; // fp32: the scores and datt on cuBLAS too (the marked call)
    for (int r = 0; r < 2; r++) {
        gc->mark_lib_writes = r;
        if (dt == MO_F32) {
            CHECK_OK(mo_attention_forward(gc, out, att, qkv, B, T, C, NH));
            CHECK_OK(mo_attention_backward(gc, dqkv, dout, qkv, out, att, B, T, C, NH));
        } else {
            CHECK_OK(mo_attention_forward_mixed(gc, dt, out, att, qkv, B, T, C, NH));
            CHECK_OK(mo_attention_backward_mixed(gc, dt, dqkv, dout, qkv, att, B, T, C, NH));
        }
        got[r][0] = host_copy(out, nout * e);
        got[r][1] = host_copy(att, natt * e);
        got[r][2] = host_copy(dqkv, nqkv * e);
    }
    gc->mark_lib_writes = 0;
    gc->attn_chunk_rows = 0;
    char what[128];
    const char *names[3] = {"out", "att", "dqkv"};
    const size_t bytes[3] = {nout * e, natt * e, nqkv * e};
    for (int i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "attention %s %s chunks of %d B %d T %d C %d NH %d %s", mo_dtype_name(dt),
                 form == MO_ATTN_GEMM_STRIDED ? "strided" : "batched", rows, B, T, C, NH, names[i]);
        same(what, got[0][i], got[1][i], bytes[i]);
        free(got[0][i]);
        free(got[1][i]);
    }
    printf("attention %s %s, chunks of %d rows: marked == unmarked\n", mo_dtype_name(dt),
           form == MO_ATTN_GEMM_STRIDED ? "strided" : "batched", rows);
    dfree(qkv); dfree(dout); dfree(out); dfree(att); dfree(dqkv);
}

// cuDNN's three convolution passes, unmarked then marked (fp32 on cuDNN: MEMOPT_CONV_GEMM=0 and
// MEMOPT_CONV_DGRAD=cudnn's paths).
static void conv_case(mo_dtype dt, int stride) {
    mo_conv_shape s;
    mo_conv_shape_init(&s, 2, 9, 9, 16, 32, 3, 3, stride, 1);
    const size_t e = mo_dtype_size(dt), nx = (size_t)s.N * s.H * s.W * s.C, nw = (size_t)s.K * s.R * s.S * s.C,
                 ny = (size_t)s.N * s.P * s.Q * s.K;
    void *x = drand(dt, nx, -1, 1), *w = drand(dt, nw, -1, 1), *dy = drand(dt, ny, -1, 1);
    void *y = dnew(ny * e), *dx = dnew(nx * e);
    float *dw = dnew(nw * sizeof(float));
    void *got[2][3];
    const int conv_gemm = gc->conv_gemm;
    gc->conv_gemm = MO_CONV_GEMM_NONE;
    gc->conv_dgrad_cudnn = 1;
    for (int r = 0; r < 2; r++) {
        gc->mark_lib_writes = r;
        CHECK_OK(mo_memset_zero(gc, dw, nw * sizeof(float)));
        CHECK_OK(mo_conv_forward(gc, dt, y, x, w, &s));
        CHECK_OK(mo_conv_backward_data(gc, dt, dx, dy, w, &s));
        CHECK_OK(mo_conv_backward_filter(gc, dt, dw, dy, x, &s));
        got[r][0] = host_copy(y, ny * e);
        got[r][1] = host_copy(dx, nx * e);
        got[r][2] = host_copy(dw, nw * sizeof(float));
    }
    gc->mark_lib_writes = 0;
    gc->conv_gemm = conv_gemm;
    gc->conv_dgrad_cudnn = 0;
    const char *names[3] = {"forward", "input gradient", "filter gradient"};
    const size_t bytes[3] = {ny * e, nx * e, nw * sizeof(float)};
    char what[128];
    for (int i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "conv %s 3x3 stride %d %s", mo_dtype_name(dt), stride, names[i]);
        same(what, got[0][i], got[1][i], bytes[i]);
        free(got[0][i]);
        free(got[1][i]);
    }
    printf("conv %s stride %d: marked == unmarked\n", mo_dtype_name(dt), stride);
    dfree(x); dfree(w); dfree(dy); dfree(y); dfree(dx); dfree(dw);
}

// A linear layer with the GELU epilogue (GELU_AUX*: the pre-activation written too), forward and backward
// (fp32: the bias gradient through BGRADB), unmarked then marked.
static void matmul_case(mo_dtype dt) {
    const int N = 64, C = 96, OC = 128;
    const size_t e = mo_dtype_size(dt), no = (size_t)N * OC, ni = (size_t)N * C, nw = (size_t)OC * C;
    void *inp = drand(dt, ni, -1, 1), *wt = drand(dt, nw, -1, 1), *b = drand(dt, OC, -1, 1);
    void *dout = drand(dt, no, -1, 1);
    void *pre = dnew(no * e), *act = dnew(no * e), *dinp = dnew(ni * e);
    void *add = drand(dt, no, -1, 1), *sum = dnew(no * e), *gpre = drand(dt, ni, -2, 2), *dgin = dnew(ni * e);
    float *dwt = dnew(nw * sizeof(float)), *db = dnew(OC * sizeof(float));
    void *got[2][7];
    for (int r = 0; r < 2; r++) {
        gc->mark_lib_writes = r;
        CHECK_OK(mo_memset_zero(gc, dwt, nw * sizeof(float)));
        CHECK_OK(mo_memset_zero(gc, db, OC * sizeof(float)));
        if (dt == MO_F32) {
            CHECK_OK(mo_matmul_forward(gc, pre, act, inp, wt, b, N, C, OC));
            CHECK_OK(mo_matmul_backward(gc, dinp, dwt, db, dout, inp, wt, N, C, OC));
            CHECK_OK(mo_matmul_forward_add(gc, sum, inp, wt, b, add, N, C, OC));
            CHECK_OK(mo_matmul_backward_dgelu(gc, dgin, dwt, db, dout, inp, wt, gpre, N, C, OC));
        } else {
            CHECK_OK(mo_matmul_forward_mixed(gc, dt, pre, act, inp, wt, b, N, C, OC));
            CHECK_OK(mo_matmul_backward_mixed(gc, dt, dinp, dwt, db, dout, inp, wt, N, C, OC));
            CHECK_OK(mo_matmul_forward_add_mixed(gc, dt, sum, inp, wt, b, add, N, C, OC));
            CHECK_OK(mo_matmul_backward_dgelu_mixed(gc, dt, dgin, dwt, db, dout, inp, wt, gpre, N, C, OC));
        }
        got[r][0] = host_copy(pre, no * e);
        got[r][1] = host_copy(act, no * e);
        got[r][2] = host_copy(dinp, ni * e);
        got[r][3] = host_copy(dwt, nw * sizeof(float));
        got[r][4] = host_copy(db, OC * sizeof(float));
        got[r][5] = host_copy(sum, no * e);
        got[r][6] = host_copy(dgin, ni * e);
    }
    gc->mark_lib_writes = 0;
    const char *names[7] = {"pre-activation", "gelu", "dinp", "dweight", "dbias", "out + add", "dinp with dgelu"};
    const size_t bytes[7] = {no * e, no * e, ni * e, nw * sizeof(float), OC * sizeof(float), no * e, ni * e};
    char what[128];
    for (int i = 0; i < 7; i++) {
        snprintf(what, sizeof what, "matmul %s gelu %s", mo_dtype_name(dt), names[i]);
        same(what, got[0][i], got[1][i], bytes[i]);
        free(got[0][i]);
        free(got[1][i]);
    }
    printf("matmul %s with gelu: marked == unmarked\n", mo_dtype_name(dt));
    dfree(inp); dfree(wt); dfree(b); dfree(dout); dfree(pre); dfree(act); dfree(dinp); dfree(dwt); dfree(db);
    dfree(add); dfree(sum); dfree(gpre); dfree(dgin);
}

// The mark itself (lib_writes_zero.cu): a buffer of random bytes, then mo_mark_lib_write over rows x width
// at pitch from an offset; the CPU reference zeroes the same bytes. Offsets, pitches and widths that make
// each store width (16, 8, 4, 2, 1 bytes) the widest that fits, one row and many, a pitch equal to the
// width; every byte outside the region must keep its value. A pitch below the width is refused.
static void mark_case(size_t off, size_t pitch, size_t width, size_t rows) {
    const size_t bytes = off + (rows - 1) * pitch + width + 40;
    unsigned char *h = malloc(bytes), *want = malloc(bytes), *got = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) h[i] = (unsigned char)(test_rng_u64(&rng) | 1); // never 0
    memcpy(want, h, bytes);
    for (size_t r = 0; r < rows; r++) memset(want + off + r * pitch, 0, width);
    unsigned char *d = dup_dev(h, bytes);
    gc->mark_lib_writes = 1;
    CHECK_OK(mo_mark_lib_write(gc, d + off, pitch, width, rows));
    gc->mark_lib_writes = 0;
    d2h(got, d, bytes);
    size_t bad = 0;
    for (size_t i = 0; i < bytes; i++) bad += got[i] != want[i];
    CHECK_MSG(bad == 0, "mark at +%zu, pitch %zu, width %zu, %zu rows: %zu of %zu bytes differ from the reference",
              off, pitch, width, rows, bad, bytes);
    dfree(d);
    free(h); free(want); free(got);
}

static void mark_cases(void) {
    static const size_t c[][4] = {
        {0, 64, 48, 5},  {0, 48, 48, 7},   {8, 40, 24, 3},  {4, 36, 20, 9},  {2, 34, 10, 4},  {1, 33, 17, 6},
        {0, 0, 4096, 1}, {3, 0, 1001, 1}, {16, 2048, 2000, 256}, {6, 1000, 998, 33}, {0, 20, 20, 1},
        // the pitch alone narrows the store (16 -> 8, 4, 2, 1 bytes)
        {0, 40, 32, 3},  {0, 36, 16, 4},   {0, 34, 16, 3},  {0, 33, 16, 3},
        // more words than the grid's 1024 x 256 threads: the grid-stride loop
        {1, 0, 300001, 1}, {0, 4160, 4096, 1100}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) mark_case(c[i][0], c[i][1], c[i][2], c[i][3]);
    unsigned char *d = dnew(64);
    gc->mark_lib_writes = 1;
    CHECK(mo_mark_lib_write(gc, d, 8, 16, 2) == MO_ERR_INVALID);
    mo_clear_error();
    gc->mark_lib_writes = 0;
    dfree(d);
    printf("mark: %zu regions zeroed exactly, a pitch below the width refused\n", sizeof c / sizeof c[0]);
}
#endif

int main(void) {
    test_require_gpu();
    test_rng_seed(&rng, test_seed_from_time());
#ifdef MEMOPT_HAVE_CUDA
    CHECK_OK(mo_allocator_create(&ga, MO_ALLOC_CACHING, MO_BACKEND_CUDA, 0, NULL));
    if (!ga) return test_finish();
    // the knob: 1 sets the flag (and clears the workspace once), another value is refused
    setenv("MEMOPT_MARK_LIB_WRITES", "2", 1);
    mo_ctx *bad = NULL;
    CHECK(mo_ctx_create(&bad, MO_BACKEND_CUDA, ga) == MO_ERR_INVALID && bad == NULL);
    mo_clear_error();
    setenv("MEMOPT_MARK_LIB_WRITES", "1", 1);
    CHECK_OK(mo_ctx_create(&gc, MO_BACKEND_CUDA, ga));
    unsetenv("MEMOPT_MARK_LIB_WRITES");
    if (!gc) return test_finish();
    CHECK(gc->mark_lib_writes == 1);
    gc->mark_lib_writes = 0;
    gc->tf32 = 0;
    mark_cases();
    gap_case();
    // T 136: a multiple of 8 (the 16-byte softmax kernels); chunks of 64 (64 + 64 + 8) and of 40, not a
    // multiple of 8 (40 x 3 + 16); one chunk (0: the default at this batch)
    const int chunk_rows[3] = {64, 40, 0};
    for (int form = MO_ATTN_GEMM_STRIDED; form <= MO_ATTN_GEMM_BATCHED; form++)
        for (int r = 0; r < 3; r++) {
            attention_case(MO_F32, form, chunk_rows[r], 2, 136, 128, 2);
            attention_case(MO_BF16, form, chunk_rows[r], 2, 136, 128, 2);
        }
    conv_case(MO_F32, 1);
    conv_case(MO_F32, 2);
    conv_case(MO_BF16, 1);
    conv_case(MO_BF16, 2);
    matmul_case(MO_F32);
    matmul_case(MO_BF16);
    matmul_case(MO_F16);
    mo_ctx_destroy(gc);
    mo_allocator_destroy(ga);
#endif
    return test_finish();
}
