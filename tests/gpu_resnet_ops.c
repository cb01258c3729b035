// GPU test of the ResNet ops (conv.h on cuDNN's graph API, batchnorm.h on cuDNN, pool.h's own kernels,
// ReLU forward and backward among them):
// every op on cuda against its cpu reference on fresh random data (seed printed), per precision (fp32,
// tf32, bf16, fp16), at ResNet-50's layer shapes (batch 2) and odd sizes; every cuda op runs twice on the
// same inputs and must give the same bits (determinism: checkpointing recomputes must equal the first
// forward). fp32 convolutions other than 1x1 stride-1 run as im2col GEMMs (by default the passes where
// those measured faster): each such case is also run with every pass as GEMMs (MEMOPT_CONV_GEMM=all) in a
// few chunks (rows cutting images, the last chunk short) and under MEMOPT_CONV_GEMM=1x1 (the
// paths those GEMMs replace, still the fallback), and the im2col / col2im kernels are checked against
// their cpu references bit for bit. Then per-op median times of the cuDNN calls at one ResNet-50 layer
// shape, batch 128, and of the im2col GEMMs against cuDNN at ResNet-50's shapes.
//
// Tolerances (relative L2 error against the cpu reference) and why:
//   fp32 convolutions 1e-4: fp32 accumulation in another order (~1e-6 expected; the cpu reference's own
//     sequential sums over up to 25088 terms carry ~7e-6, a deterministic Winograd engine ~1e-5); a TF32
//     engine that slipped through the filter would give ~5e-4 and fail.
//   tf32 convolutions 5e-3: 10-bit mantissa products (~5e-4 expected).
//   16-bit outputs (convolutions, batch norm, pools): bf16 1e-2, fp16 2e-3 (the suite's 16-bit bounds,
//     docs/DESIGN.md): both sides round an fp32 value once, cuDNN's accumulation order differs.
//   batch norm fp32: outputs and din 1e-4, mean / rstd / running statistics 1e-5, dgamma / dbeta 1e-4
//     (cuDNN's reductions run in another order over M rows).
//   pools, ReLU, im2col and col2im: the same float operations in the same order: bit-identical to the
//     reference, checked (tolerance 0: every value's bits equal).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/batchnorm.h"
#include "kernels/conv.h"
#include "kernels/conv_table.h" // MO_CONV_FWD, _BWD_DATA, _BWD_FILTER: conv_col_runs' index
#include "kernels/ops_mixed.h"
#include "kernels/pool.h"
#ifdef MEMOPT_HAVE_CUDA
#include "kernels/resnet_ops_impl.h"
#endif
#include "strategies/alloc.h"
#include "tests/testlib.h"

static mo_allocator *ga, *ha;
static mo_ctx *gc, *hc;
static test_rng rng;

typedef struct prec { const char *name; mo_dtype dt; int tf32; } prec;
static const prec precs[4] = {{"fp32", MO_F32, 0}, {"tf32", MO_F32, 1}, {"bf16", MO_BF16, 0}, {"fp16", MO_F16, 0}};

static double tol_conv(const prec *p) {
    return p->dt == MO_BF16 ? 1e-2 : p->dt == MO_F16 ? 2e-3 : p->tf32 ? 5e-3 : 1e-4;
}
static double tol_act(mo_dtype dt, double f32) { return dt == MO_BF16 ? 1e-2 : dt == MO_F16 ? 2e-3 : f32; }

static void *hnew(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) { fprintf(stderr, "out of host memory (%zu bytes)\n", bytes); exit(1); }
    return p;
}
static float *fnew(size_t n) { return hnew(n * sizeof(float)); }
static float *frand(size_t n, float lo, float hi) { float *p = fnew(n); test_fill_uniform(&rng, p, n, lo, hi); return p; }
// n random elements of dt (host bytes)
static void *hrand(mo_dtype dt, size_t n, float lo, float hi) {
    float *f = frand(n, lo, hi);
    if (dt == MO_F32) return f;
    void *h = hnew(n * 2);
    mo_convert_from_f32(dt, h, f, n);
    free(f);
    return h;
}
static float *as_f32(mo_dtype dt, const void *x, size_t n) {
    float *f = fnew(n);
    mo_convert_to_f32(dt, f, x, n);
    return f;
}
static void *dnew(size_t bytes) {
    void *p = NULL;
    if (!CHECK_OK(mo_alloc(ga, bytes ? bytes : 1, MO_CAT_ACTIVATION, &p))) exit(test_finish());
    return p;
}
static void dfree(void *p) { CHECK_OK(mo_free(ga, p)); }
static void up(void *d, const void *h, size_t bytes) { CHECK_OK(mo_memcpy_h2d(gc, d, h, bytes)); }
static void down(void *h, const void *d, size_t bytes) { CHECK_OK(mo_memcpy_d2h(gc, h, d, bytes)); }
static void *dup_d(const void *h, size_t bytes) { void *d = dnew(bytes); up(d, h, bytes); return d; }
static void poison(void *d, size_t bytes) {
    unsigned char *h = hnew(bytes);
    memset(h, 0xff, bytes); // NaN in fp32, fp16 and bf16
    up(d, h, bytes);
    free(h);
}

// got against want (both dt, n elements) as fp32; the two cuda runs' bits
static void check(const char *pname, mo_dtype dt, const void *got, const void *got2, const void *want, size_t n,
                  double tol, const char *what) {
    float *g = as_f32(dt, got, n), *w = as_f32(dt, want, n);
    const size_t e = mo_dtype_size(dt);
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) diff += memcmp((const char *)got + i * e, (const char *)want + i * e, e) != 0;
    double rel = test_rel_error(g, w, n);
    printf("  %-4s %-44s rel err %.2e (tol %.0e), %zu of %zu differ in bits%s\n", pname, what, rel, tol, diff, n,
           memcmp(got, got2, n * e) ? ", NOT DETERMINISTIC" : "");
    CHECK_MSG(rel <= tol, "%s %s: rel err %.3e > %.1e", pname, what, rel, tol);
    if (tol == 0) CHECK_MSG(diff == 0, "%s %s: %zu of %zu values differ in bits from the cpu reference", pname, what, diff, n);
    CHECK_MSG(memcmp(got, got2, n * e) == 0, "%s %s: two cuda runs on the same inputs differ", pname, what);
    free(g);
    free(w);
}

// ---------------------------------------------------------------------------------------------
// The device buffers of one convolution: x (N,H,W,C), w (K,R,S,C), dy (N,P,Q,K) inputs; y, dx, dw outputs
typedef struct conv_dev { void *x, *w, *dy, *y, *dx; float *dw; } conv_dev;

// The three passes twice on the same inputs (y and dx poisoned, dw from dw0 each time), into y[run],
// dx[run], dw[run] (dw: dw0 + the gradient). 0 when a call failed.
static int conv_twice(mo_dtype dt, const mo_conv_shape *s, const conv_dev *d, const float *dw0, void *y[2],
                      void *dx[2], float *dw[2]) {
    const size_t e = mo_dtype_size(dt), nx = (size_t)s->N * s->H * s->W * s->C, nw = (size_t)s->K * s->R * s->S * s->C,
                 ny = (size_t)s->N * s->P * s->Q * s->K;
    int ok = 1;
    for (int run = 0; run < 2 && ok; run++) {
        poison(d->y, ny * e);
        poison(d->dx, nx * e);
        up(d->dw, dw0, nw * 4);
        ok &= CHECK_OK(mo_conv_forward(gc, dt, d->y, d->x, d->w, s));
        ok &= CHECK_OK(mo_conv_backward_data(gc, dt, d->dx, d->dy, d->w, s));
        ok &= CHECK_OK(mo_conv_backward_filter(gc, dt, d->dw, d->dy, d->x, s));
        down(y[run], d->y, ny * e);
        down(dx[run], d->dx, nx * e);
        down(dw[run], d->dw, nw * 4);
    }
    return ok;
}

// conv_twice's outputs against the references (dwr: the reference's gradient, dw minus dw0), how: which path
static void conv_check(const char *pname, mo_dtype dt, double tol, const mo_conv_shape *s, void *y[2], void *dx[2],
                       float *dw[2], const void *y_ref, const void *dx_ref, const float *dwr, const float *dw0,
                       const char *how) {
    const size_t nx = (size_t)s->N * s->H * s->W * s->C, nw = (size_t)s->K * s->R * s->S * s->C,
                 ny = (size_t)s->N * s->P * s->Q * s->K;
    char what[3][96];
    snprintf(what[0], sizeof what[0], "forward%s", how);
    snprintf(what[1], sizeof what[1], "backward data%s", how);
    snprintf(what[2], sizeof what[2], "backward filter (dw += ...)%s", how);
    check(pname, dt, y[0], y[1], y_ref, ny, tol, what[0]);
    check(pname, dt, dx[0], dx[1], dx_ref, nx, tol, what[1]);
    // the gradient added to dw0 (fp32 in every precision)
    for (size_t i = 0; i < nw; i++) dw[0][i] -= dw0[i], dw[1][i] -= dw0[i];
    check(pname, MO_F32, dw[0], dw[1], dwr, nw, tol, what[2]);
}

static void gpu_conv(const prec *pr, int N, int H, int W, int C, int K, int R, int st, int pad, const char *label) {
    mo_conv_shape s;
    mo_conv_shape_init(&s, N, H, W, C, K, R, R, st, pad);
    const mo_dtype dt = pr->dt;
    const size_t e = mo_dtype_size(dt), nx = (size_t)N * H * W * C, nw = (size_t)K * R * R * C,
                 ny = (size_t)N * s.P * s.Q * K;
    printf("conv %s %s: N %d %dx%dx%d -> K %d %dx%d s%d p%d (%dx%d)\n", pr->name, label, N, H, W, C, K, R, R, st, pad,
           s.P, s.Q);
    void *x = hrand(dt, nx, -1, 1), *w = hrand(dt, nw, -1, 1), *dy = hrand(dt, ny, -1, 1);
    float *dw0 = frand(nw, -1, 1);
    void *y_ref = hnew(ny * e), *dx_ref = hnew(nx * e);
    float *dw_ref = fnew(nw);
    memcpy(dw_ref, dw0, nw * 4);
    CHECK_OK(mo_conv_forward(hc, dt, y_ref, x, w, &s));
    CHECK_OK(mo_conv_backward_data(hc, dt, dx_ref, dy, w, &s));
    CHECK_OK(mo_conv_backward_filter(hc, dt, dw_ref, dy, x, &s));
    const conv_dev d = {dup_d(x, nx * e), dup_d(w, nw * e), dup_d(dy, ny * e), dnew(ny * e), dnew(nx * e), dnew(nw * 4)};
    void *y[2] = {hnew(ny * e), hnew(ny * e)}, *dx[2] = {hnew(nx * e), hnew(nx * e)};
    float *dw[2] = {fnew(nw), fnew(nw)}, *dwr = fnew(nw);
    for (size_t i = 0; i < nw; i++) dwr[i] = dw_ref[i] - dw0[i]; // the reference's gradient added to dw0
    // fp32 inputs and reference serve tf32 too (the same op, a looser bound): pr and then pr + 1
    for (const prec *q = pr; q < precs + 4 && q->dt == dt && (q == pr || q->tf32); q++) {
    if (q != pr) printf("conv %s %s: the same inputs and reference\n", q->name, label);
    gc->tf32 = q->tf32;
#ifdef MEMOPT_HAVE_CUDA
    const long wruns0 = gc->conv_col_runs[MO_CONV_BWD_FILTER], iruns0 = gc->conv_implicit_runs;
#endif
    int ok = conv_twice(dt, &s, &d, dw0, y, dx, dw);
#ifdef MEMOPT_HAVE_CUDA
    // fp32 (no TF32) with a filter wider than 1x1, C % 8 and K % 64: the forward, and the stride-1 input
    // gradient (the flipped filter's forward: K % 8, C % 64), on the implicit-GEMM kernel (conv_implicit.cu)
    if (ok && dt == MO_F32 && !q->tf32 && R > 1) {
        mo_conv_shape t;
        const long want = 2 * conv_implicit_takes(&s) +
                          2 * (mo_conv_dgrad_forward_shape(&s, &t) && conv_implicit_takes(&t));
        CHECK_MSG(gc->conv_implicit_runs - iruns0 == want, "%s %s: %ld convolutions ran on the implicit-GEMM kernel, "
                  "want %ld", q->name, label, gc->conv_implicit_runs - iruns0, want);
        printf("  %-4s implicit-GEMM kernel: %ld of the passes\n", q->name, gc->conv_implicit_runs - iruns0);
        // every tile shape gives each output the same sum (one fma chain in tap order): the same bits
        for (int tile = MO_CONV_TILE_128X64; conv_implicit_takes(&s) && tile <= MO_CONV_TILE_128X128; tile++) {
            if (tile == MO_CONV_TILE_128X128 && K % 128) continue;
            void *yt = hnew(ny * e);
            gc->conv_implicit_tile = tile;
            poison(d.y, ny * e);
            ok &= CHECK_OK(mo_conv_forward(gc, dt, d.y, d.x, d.w, &s));
            gc->conv_implicit_tile = MO_CONV_TILE_DEFAULT;
            down(yt, d.y, ny * e);
            CHECK_MSG(memcmp(yt, y[0], ny * e) == 0, "%s %s: the implicit kernel's tiles %s change the bits", q->name,
                      label, tile == MO_CONV_TILE_128X64 ? "128x64" : "128x128");
            free(yt);
        }
    }
    // TF32 takes the stem's weight gradient (C not a multiple of 4, not 1x1 stride 1) as TF32 GEMMs over
    // row slabs, not cuDNN's engine (conv_cuda.c): both runs must have gone that way, or the check below is
    // of cuDNN
    if (ok && q->tf32 && C % 4 != 0 && !(R == 1 && st == 1 && pad == 0))
        CHECK_MSG(gc->conv_col_runs[MO_CONV_BWD_FILTER] - wruns0 == 2,
                  "%s %s: the weight gradient ran %ld times as TF32 slab GEMMs of 2 (a fallback to cuDNN)", q->name,
                  label, gc->conv_col_runs[MO_CONV_BWD_FILTER] - wruns0);
    // cuDNN writes every element of the staged filter gradient: the same call with its scratch poisoned
    // (NaN) must give run 0's bits, NaN-free. compute-sanitizer's initcheck reports acc_f32_kernel's reads
    // of that scratch when it is fresh memory (tools/gpu_sanitize.sh); this shows the bytes it reads are
    // cuDNN's output. (fp32's GEMM paths leave the scratch alone: the same bits all the more.)
    if (ok) {
        void *d_scr = dnew(mo_conv_backward_filter_scratch_bytes(dt, &s));
        float *dwp = fnew(nw);
        poison(d_scr, mo_conv_backward_filter_scratch_bytes(dt, &s));
        up(d.dw, dw0, nw * 4);
        ok &= CHECK_OK(conv_backward_filter_cuda(gc, dt, d.dw, d.dy, d.x, &s, d_scr));
        down(dwp, d.dw, nw * 4);
        size_t nan = 0;
        for (size_t i = 0; i < nw; i++) nan += dwp[i] != dwp[i];
        CHECK_MSG(nan == 0, "%s %s: %zu of %zu dw values NaN with the scratch poisoned (cuDNN left them unwritten)",
                  q->name, label, nan, nw);
        CHECK_MSG(memcmp(dwp, dw[0], nw * 4) == 0, "%s %s: dw with a poisoned scratch differs from run 0", q->name,
                  label);
        printf("  %-4s backward filter, scratch poisoned: %zu NaN, %s run 0\n", q->name, nan,
               memcmp(dwp, dw[0], nw * 4) ? "differs from" : "the bits of");
        free(dwp);
        dfree(d_scr);
    }
    // fp32 (no TF32) convolutions other than 1x1 stride-1 run as GEMMs over the column matrix, in chunks
    // (conv_cuda.c): with a few chunks (rows that cut images, the last chunk short; one or two images a
    // chunk of the input gradient, two then one when N > 2) they must give the reference too, and the
    // same bits twice. Then the paths the GEMMs replace, which still run where they do not fit, under
    // MEMOPT_CONV_GEMM=1x1 (cuDNN; the input gradient as a forward convolution, the strided one a chunk
    // of one or two images at a time).
    // Where the workspace itself takes more than one chunk (the layer1 case at batch 4), every pass as
    // GEMMs in those natural chunks too. Each GEMM run counts its passes (conv_col_runs), so a silent
    // fallback to cuDNN, which would match the reference as well, fails the check.
    void *yc[2] = {NULL, NULL}, *dxc[2] = {NULL, NULL}, *yf[2] = {NULL, NULL}, *dxf[2] = {NULL, NULL};
    void *yn[2] = {NULL, NULL}, *dxn[2] = {NULL, NULL}, *yu[2] = {NULL, NULL}, *dxu[2] = {NULL, NULL};
    float *dwc[2] = {NULL, NULL}, *dwf[2] = {NULL, NULL}, *dwn[2] = {NULL, NULL}, *dwu[2] = {NULL, NULL};
    int okc = 0, okf = 0, okn = 0, oku = 0;
    if (ok && dt == MO_F32 && !q->tf32 && !(R == 1 && st == 1 && pad == 0)) {
        for (int k = 0; k < 2; k++) {
            yc[k] = hnew(ny * e), dxc[k] = hnew(nx * e), dwc[k] = fnew(nw);
            yf[k] = hnew(ny * e), dxf[k] = hnew(nx * e), dwf[k] = fnew(nw);
        }
        const int M = N * s.P * s.Q;
        int rows0, imgs0, rows, imgs;
        conv_col_chunks(gc, &s, &rows0, &imgs0);
        gc->conv_col_rows = (M + 2) / 3 + 1; // three chunks, the last one short
        gc->conv_dgrad_chunk = N > 2 ? 2 : 1;
        conv_col_chunks(gc, &s, &rows, &imgs);
        printf("  %-4s im2col chunks: %d rows a chunk (%d in all; unchunked %d), %d images (of %d; unchunked %d)\n",
               q->name, rows, M, rows0, imgs, N, imgs0);
        CHECK_MSG(rows0 > 0 && imgs0 > 0, "%s %s: the GEMM path does not fit (rows %d, images %d)", q->name, label,
                  rows0, imgs0);
        gc->conv_gemm = MO_CONV_GEMM_ALL; // every pass as GEMMs (the default leaves some on cuDNN)
        long runs0[3];
        memcpy(runs0, gc->conv_col_runs, sizeof runs0);
        okc = rows > 0 && imgs > 0 && conv_twice(dt, &s, &d, dw0, yc, dxc, dwc);
        for (int k = 0; k < 3 && okc; k++)
            CHECK_MSG(gc->conv_col_runs[k] - runs0[k] == 2, "%s %s: pass %d ran %ld times as im2col GEMMs of 2 (a fallback)",
                      q->name, label, k, gc->conv_col_runs[k] - runs0[k]);
        // the same chunks with the weight gradient as one GEMM a chunk (MEMOPT_CONV_WGRAD_SPLIT=0), not the
        // row slabs' batched GEMMs and their in-order sum that the default runs where the output is small
        for (int k = 0; k < 2; k++) yu[k] = hnew(ny * e), dxu[k] = hnew(nx * e), dwu[k] = fnew(nw);
        gc->conv_wgrad_split = 0;
        memcpy(runs0, gc->conv_col_runs, sizeof runs0);
        oku = rows > 0 && imgs > 0 && conv_twice(dt, &s, &d, dw0, yu, dxu, dwu);
        if (oku)
            CHECK_MSG(gc->conv_col_runs[MO_CONV_BWD_FILTER] - runs0[MO_CONV_BWD_FILTER] == 2,
                      "%s %s: the unsplit weight gradient ran %ld times as im2col GEMMs of 2", q->name, label,
                      gc->conv_col_runs[MO_CONV_BWD_FILTER] - runs0[MO_CONV_BWD_FILTER]);
        gc->conv_wgrad_split = 1;
        gc->conv_col_rows = 0;
        gc->conv_dgrad_chunk = 0;
        if (rows0 < M || imgs0 < N) {
            for (int k = 0; k < 2; k++) yn[k] = hnew(ny * e), dxn[k] = hnew(nx * e), dwn[k] = fnew(nw);
            memcpy(runs0, gc->conv_col_runs, sizeof runs0);
            okn = conv_twice(dt, &s, &d, dw0, yn, dxn, dwn);
            for (int k = 0; k < 3 && okn; k++)
                CHECK_MSG(gc->conv_col_runs[k] - runs0[k] == 2, "%s %s: pass %d ran %ld times as im2col GEMMs of 2 "
                          "(natural chunks)", q->name, label, k, gc->conv_col_runs[k] - runs0[k]);
        }
        gc->conv_dgrad_chunk = N > 2 ? 2 : 1;
        gc->conv_gemm = MO_CONV_GEMM_1X1;
        if (st == 1 || N == 1) gc->conv_dgrad_chunk = 0;
        okf = conv_twice(dt, &s, &d, dw0, yf, dxf, dwf);
        gc->conv_gemm = MO_CONV_GEMM_AUTO;
        gc->conv_dgrad_chunk = 0;
    }
#endif
    gc->tf32 = 0;
    if (ok) conv_check(q->name, dt, tol_conv(q), &s, y, dx, dw, y_ref, dx_ref, dwr, dw0, "");
#ifdef MEMOPT_HAVE_CUDA
    if (okc) conv_check(q->name, dt, tol_conv(q), &s, yc, dxc, dwc, y_ref, dx_ref, dwr, dw0, ", all passes im2col, chunked");
    if (oku) conv_check(q->name, dt, tol_conv(q), &s, yu, dxu, dwu, y_ref, dx_ref, dwr, dw0, ", all passes im2col, chunked, weight gradient unsplit");
    if (okf) conv_check(q->name, dt, tol_conv(q), &s, yf, dxf, dwf, y_ref, dx_ref, dwr, dw0, ", CONV_GEMM=1x1");
    if (okn) conv_check(q->name, dt, tol_conv(q), &s, yn, dxn, dwn, y_ref, dx_ref, dwr, dw0, ", all passes im2col, workspace chunks");
    for (int k = 0; k < 2; k++) free(yc[k]), free(dxc[k]), free(dwc[k]), free(yf[k]), free(dxf[k]), free(dwf[k]);
    for (int k = 0; k < 2; k++) free(yn[k]), free(dxn[k]), free(dwn[k]), free(yu[k]), free(dxu[k]), free(dwu[k]);
#endif
    }
    dfree(d.x); dfree(d.w); dfree(d.dy); dfree(d.y); dfree(d.dx); dfree(d.dw);
    free(x); free(w); free(dy); free(dw0); free(y_ref); free(dx_ref); free(dw_ref); free(dwr);
    for (int k = 0; k < 2; k++) { free(y[k]); free(dx[k]); free(dw[k]); }
}

#ifdef MEMOPT_HAVE_CUDA
// din += the input gradient (mo_conv_backward_data_add, the ResNet's shortcut gradient) against the cpu
// reference (round(din + the fp32 gradient)), per precision, twice for the same bits; the route it took
// (conv_cuda.c): the fp32 1x1 stride-1 GEMM's beta 1, cuDNN's beta 1 (TF32, 16 bits) or the chunks in the
// workspace (every other fp32 one), which must have run where the test says; and
// the chunked path itself at most 2 images a chunk (N 3: two chunks, the last short) in every precision.
static void gpu_conv_add(mo_dtype dt, int N, int H, int W, int C, int K, int R, int st, int pad, const char *label) {
    mo_conv_shape s;
    mo_conv_shape_init(&s, N, H, W, C, K, R, R, st, pad);
    const size_t e = mo_dtype_size(dt), nx = (size_t)N * H * W * C, nw = (size_t)K * R * R * C,
                 ny = (size_t)N * s.P * s.Q * K;
    void *w = hrand(dt, nw, -1, 1), *dy = hrand(dt, ny, -1, 1), *d0 = hrand(dt, nx, -1, 1);
    void *ref = hnew(nx * e), *got[2] = {hnew(nx * e), hnew(nx * e)};
    memcpy(ref, d0, nx * e);
    CHECK_OK(mo_conv_backward_data_add(hc, dt, ref, dy, w, &s));
    void *dw = dup_d(w, nw * e), *ddy = dup_d(dy, ny * e), *dd = dnew(nx * e);
    for (int tf = 0; tf < (dt == MO_F32 ? 2 : 1); tf++) {
        const prec *q = dt == MO_F32 ? &precs[tf] : dt == MO_BF16 ? &precs[2] : &precs[3];
        gc->tf32 = tf;
        for (int chunked = 0; chunked < 2; chunked++) {
            const long ch0 = gc->conv_dgrad_add_chunked;
            int ok = 1;
            for (int run = 0; run < 2 && ok; run++) {
                up(dd, d0, nx * e);
                ok &= CHECK_OK(chunked ? conv_dgrad_add_chunked_cuda(gc, dt, dd, ddy, dw, &s, 2)
                                       : mo_conv_backward_data_add(gc, dt, dd, ddy, dw, &s));
                down(got[run], dd, nx * e);
            }
            if (!ok) break;
            const long nch = gc->conv_dgrad_add_chunked - ch0;
            // where it must go (conv_cuda.c): fp32 (no TF32) 1x1 stride 1 the GEMM, the other fp32 ones the
            // chunks, TF32 and 16 bits cuDNN's beta-1 plans (every case here had one on the H100, session 22)
            const int gemm = dt == MO_F32 && !tf && R == 1 && st == 1 && pad == 0;
            const int want_chunked = chunked || (dt == MO_F32 && !tf && !gemm);
            CHECK_MSG((nch == 2) == want_chunked && (nch == 0) == !want_chunked,
                      "%s %s: %ld of 2 runs through the workspace chunks, want %d", q->name, label, nch,
                      2 * want_chunked);
            char what[96];
            const char *route = chunked        ? "2-image chunks"
                                : nch          ? "chunks (fp32's other paths)"
                                : gemm         ? "GEMM beta 1"
                                               : "cuDNN beta 1";
            snprintf(what, sizeof what, "backward data add, %s", route);
            check(q->name, dt, got[0], got[1], ref, nx, tol_conv(q), what);
        }
    }
    gc->tf32 = 0;
    dfree(dw); dfree(ddy); dfree(dd);
    free(w); free(dy); free(d0); free(ref); free(got[0]); free(got[1]);
}

// The im2col and col2im kernels (im2col.cu) against their cpu references (im2col.c) on fresh random data:
// the same bits (tolerance 0; im2col copies, col2im adds each element's taps in the reference's order),
// and the same bits twice. im2col of all rows at once and in three pieces (cut inside images); both
// kernels also with a pointer 4 bytes off the 16-byte alignment (the channel-a-thread kernels when C is a
// multiple of 4; they run anyway when it is not).
static void gpu_im2col(int N, int H, int W, int C, int R, int st, int pad) {
    mo_conv_shape s;
    mo_conv_shape_init(&s, N, H, W, C, 1, R, R, st, pad);
    const int M = N * s.P * s.Q, RSC = R * R * C;
    const size_t nx = (size_t)N * H * W * C, ncol = (size_t)M * RSC;
    printf("im2col / col2im: N %d %dx%dx%d %dx%d s%d p%d (M %d, RSC %d, %s)\n", N, H, W, C, R, R, st, pad, M, RSC,
           C % 4 ? "a channel a thread" : "float4");
    float *x = frand(nx, -1, 1), *dcol = frand(ncol, -1, 1), *col_ref = fnew(ncol), *dx_ref = fnew(nx);
    conv_im2col_cpu(col_ref, x, &s, 0, M);
    conv_col2im_cpu(dx_ref, dcol, &s, N);
    float *d_x = dnew((nx + 1) * 4), *d_col = dnew((ncol + 1) * 4), *d_dcol = dnew((ncol + 1) * 4),
          *d_dx = dnew((nx + 1) * 4);
    float *col[2] = {fnew(ncol), fnew(ncol)}, *dx[2] = {fnew(nx), fnew(nx)};
    const int cut[4] = {0, M / 3 + 1, 2 * M / 3 + 1, M};
    for (int off = 0; off < 2; off++) { // off 1: every pointer 4 bytes past 16-byte alignment
        up(d_x + off, x, nx * 4);
        up(d_dcol + off, dcol, ncol * 4);
        int ok = 1;
        for (int run = 0; run < 2 && ok; run++) {
            poison(d_col, (ncol + 1) * 4);
            poison(d_dx, (nx + 1) * 4);
            if (run == 0) {
                ok &= CHECK_OK(conv_im2col_cuda(gc, d_col + off, d_x + off, &s, 0, M));
            } else {
                for (int k = 0; k < 3 && ok; k++)
                    ok &= CHECK_OK(conv_im2col_cuda(gc, d_col + off + (size_t)cut[k] * RSC, d_x + off, &s, cut[k],
                                                    cut[k + 1] - cut[k]));
            }
            ok &= CHECK_OK(conv_col2im_cuda(gc, d_dx + off, d_dcol + off, &s, N));
            down(col[run], d_col + off, ncol * 4);
            down(dx[run], d_dx + off, nx * 4);
        }
        if (!ok) break;
        check("fp32", MO_F32, col[0], col[1], col_ref, ncol, 0,
              off ? "im2col, unaligned (run 2: in 3 pieces)" : "im2col (run 2: in 3 pieces)");
        check("fp32", MO_F32, dx[0], dx[1], dx_ref, nx, 0, off ? "col2im, unaligned" : "col2im");
    }
    dfree(d_x), dfree(d_col), dfree(d_dcol), dfree(d_dx);
    free(x), free(dcol), free(col_ref), free(dx_ref);
    for (int k = 0; k < 2; k++) free(col[k]), free(dx[k]);
}
#endif

// impl: 0 the suite's own kernels (batchnorm.cu), 1 cuDNN's (MEMOPT_BN=cudnn)
static void gpu_bn(mo_dtype dt, int M, int C, int relu, int impl) {
    const size_t e = mo_dtype_size(dt), n = (size_t)M * C;
    const char *pn = mo_dtype_name(dt);
    gc->bn_cudnn = impl;
    printf("batchnorm %s M %d C %d relu %d on %s\n", pn, M, C, relu, impl ? "cudnn" : "own kernels");
    void *x = hrand(dt, n, -2, 3), *dy = hrand(dt, n, -1, 1);
    float *g = frand(C, 0.5f, 1.5f), *b = frand(C, -0.5f, 0.5f), *rm0 = frand(C, -1, 1), *rv0 = frand(C, 0.5f, 2);
    float *dg0 = frand(C, -1, 1), *db0 = frand(C, -1, 1);
    void *y_ref = hnew(n * e), *dx_ref = hnew(n * e);
    float *m_ref = fnew(C), *r_ref = fnew(C), *rm_ref = fnew(C), *rv_ref = fnew(C), *dg_ref = fnew(C), *db_ref = fnew(C);
    memcpy(rm_ref, rm0, C * 4), memcpy(rv_ref, rv0, C * 4), memcpy(dg_ref, dg0, C * 4), memcpy(db_ref, db0, C * 4);
    CHECK_OK(mo_batchnorm_forward(hc, dt, y_ref, m_ref, r_ref, rm_ref, rv_ref, x, g, b, M, C, 0.1f, relu));
    void *d_x = dup_d(x, n * e), *d_dy = dup_d(dy, n * e), *d_y = dnew(n * e), *d_dx = dnew(n * e);
    float *d_g = dup_d(g, C * 4), *d_b = dup_d(b, C * 4), *d_m = dnew(C * 4), *d_r = dnew(C * 4);
    float *d_rm = dnew(C * 4), *d_rv = dnew(C * 4), *d_dg = dnew(C * 4), *d_db = dnew(C * 4);
    void *y[2] = {hnew(n * e), hnew(n * e)}, *dx[2] = {hnew(n * e), hnew(n * e)};
    float *st[2][6];
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 6; j++) st[k][j] = fnew(C);
    int ok = 1;
    for (int run = 0; run < 2 && ok; run++) {
        poison(d_y, n * e), poison(d_dx, n * e), poison(d_m, C * 4), poison(d_r, C * 4);
        up(d_rm, rm0, C * 4), up(d_rv, rv0, C * 4), up(d_dg, dg0, C * 4), up(d_db, db0, C * 4);
        ok &= CHECK_OK(mo_batchnorm_forward(gc, dt, d_y, d_m, d_r, d_rm, d_rv, d_x, d_g, d_b, M, C, 0.1f, relu));
        ok &= CHECK_OK(mo_batchnorm_backward(gc, dt, d_dx, d_dg, d_db, d_dy, d_x, d_y, d_g, d_m, d_r, M, C, relu));
        down(y[run], d_y, n * e), down(dx[run], d_dx, n * e);
        float *dd[6] = {d_m, d_r, d_rm, d_rv, d_dg, d_db};
        for (int j = 0; j < 6; j++) down(st[run][j], dd[j], C * 4);
    }
    if (ok && relu && !impl) {
        // the remask (the ReLU's mask recomputed from x, gamma and beta, by the forward's arithmetic): the
        // same bits as the backward masked by the stored output, and dout only read
        void *dxq = hnew(n * e), *dyq = hnew(n * e);
        float *dgq = fnew(C), *dbq = fnew(C);
        poison(d_dx, n * e), up(d_dg, dg0, C * 4), up(d_db, db0, C * 4);
        ok &= CHECK_OK(mo_batchnorm_relu_backward_remask(gc, dt, d_dx, d_dg, d_db, d_dy, d_x, d_g, d_b, d_m, d_r, M, C));
        down(dxq, d_dx, n * e), down(dyq, d_dy, n * e), down(dgq, d_dg, C * 4), down(dbq, d_db, C * 4);
        CHECK_MSG(memcmp(dxq, dx[0], n * e) == 0 && memcmp(dgq, st[0][4], C * 4) == 0 &&
                      memcmp(dbq, st[0][5], C * 4) == 0,
                  "%s batchnorm M %d C %d: the remask backward differs in bits from the masked one", pn, M, C);
        CHECK_MSG(memcmp(dyq, dy, n * e) == 0, "%s batchnorm remask backward wrote its dout", pn);
        free(dxq), free(dyq), free(dgq), free(dbq);
    }
    if (ok) {
        // the reference's backward from the cuda forward's output (its ReLU mask) and statistics' inputs
        CHECK_OK(mo_batchnorm_backward(hc, dt, dx_ref, dg_ref, db_ref, dy, x, y[0], g, m_ref, r_ref, M, C, relu));
        check(pn, dt, y[0], y[1], y_ref, n, tol_act(dt, 1e-4), "forward out");
        check(pn, MO_F32, st[0][0], st[1][0], m_ref, C, 1e-5, "forward mean");
        check(pn, MO_F32, st[0][1], st[1][1], r_ref, C, 1e-5, "forward rstd");
        check(pn, MO_F32, st[0][2], st[1][2], rm_ref, C, 1e-5, "running mean (momentum 0.1)");
        check(pn, MO_F32, st[0][3], st[1][3], rv_ref, C, 1e-5, "running var (unbiased)");
        check(pn, dt, dx[0], dx[1], dx_ref, n, tol_act(dt, 1e-4), "backward din");
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < C; i++) st[k][4][i] -= dg0[i], st[k][5][i] -= db0[i];
        for (int i = 0; i < C; i++) dg_ref[i] -= dg0[i], db_ref[i] -= db0[i];
        check(pn, MO_F32, st[0][4], st[1][4], dg_ref, C, 1e-4, "backward dgamma (+=)");
        check(pn, MO_F32, st[0][5], st[1][5], db_ref, C, 1e-4, "backward dbeta (+=)");
        // NULL running statistics: a recompute leaves them alone and gives the same output
        up(d_rm, rm0, C * 4);
        CHECK_OK(mo_batchnorm_forward(gc, dt, d_y, d_m, d_r, NULL, NULL, d_x, d_g, d_b, M, C, 0.1f, relu));
        void *y3 = hnew(n * e);
        float *rm3 = fnew(C);
        down(y3, d_y, n * e), down(rm3, d_rm, C * 4);
        CHECK_MSG(memcmp(y3, y[0], n * e) == 0 && memcmp(rm3, rm0, C * 4) == 0,
                  "%s batchnorm with NULL running statistics: output differs or the statistics moved", pn);
        free(y3), free(rm3);
    }
    dfree(d_x); dfree(d_dy); dfree(d_y); dfree(d_dx); dfree(d_g); dfree(d_b); dfree(d_m); dfree(d_r);
    dfree(d_rm); dfree(d_rv); dfree(d_dg); dfree(d_db);
    free(x); free(dy); free(g); free(b); free(rm0); free(rv0); free(dg0); free(db0); free(y_ref); free(dx_ref);
    free(m_ref); free(r_ref); free(rm_ref); free(rv_ref); free(dg_ref); free(db_ref);
    for (int k = 0; k < 2; k++) {
        free(y[k]), free(dx[k]);
        for (int j = 0; j < 6; j++) free(st[k][j]);
    }    gc->bn_cudnn = 0;
}

// What the model runs in place and in a recompute (batchnorm.h), on the own kernels: the fused forward over
// res, the normalize pass with the forward's mean and rstd (with res, over res, plain with and without
// ReLU) and the fused backward with din over in, each the bits of gpu_bn_fused's out-of-place forms (y, dx,
// dgamma of its fused run: d_yf, d_mean, d_rstd; h_y, h_dx, h_dg). MEMOPT_BN=cudnn (impl 1) refuses them.
static void gpu_bn_inplace(mo_dtype dt, int M, int C, int impl, const void *d_x, const void *d_res, const void *dy,
                           const void *d_yf, const float *d_g, const float *d_b, const float *d_mean,
                           const float *d_rstd, const void *h_y, const void *h_dx, const float *h_dg) {
    const size_t e = mo_dtype_size(dt), n = (size_t)M * C;
    const char *pn = mo_dtype_name(dt);
    void *d_w = dnew(n * e), *d_v = dnew(n * e), *hw = hnew(n * e), *hv = hnew(n * e);
    float *d_m = dnew(C * 4), *d_r = dnew(C * 4), *d_dg = dnew(C * 4), *d_db = dnew(C * 4), *hg = fnew(C);
    CHECK_OK(mo_memset_zero(gc, d_dg, C * 4));
    CHECK_OK(mo_memset_zero(gc, d_db, C * 4));
    CHECK_OK(mo_memcpy_d2d(gc, d_w, d_res, n * e));
    CHECK_OK(mo_memcpy_d2d(gc, d_v, d_x, n * e));
    if (impl) {
        CHECK(mo_batchnorm_add_relu_forward(gc, dt, d_w, d_m, d_r, NULL, NULL, d_x, d_g, d_b, d_w, M, C, 0.1f) == MO_ERR_INVALID);
        CHECK(mo_batchnorm_relu_backward_inplace(gc, dt, d_v, d_dg, d_db, d_w, d_v, d_yf, d_g, d_mean, d_rstd, M, C) ==
              MO_ERR_INVALID);
        CHECK(mo_batchnorm_backward(gc, dt, d_v, d_dg, d_db, d_w, d_v, NULL, d_g, d_mean, d_rstd, M, C, 0) == MO_ERR_INVALID);
        printf("  %s in place with MEMOPT_BN=cudnn: refused\n", pn);
    } else {
        CHECK_OK(mo_batchnorm_add_relu_forward(gc, dt, d_w, d_m, d_r, NULL, NULL, d_x, d_g, d_b, d_w, M, C, 0.1f));
        down(hw, d_w, n * e);
        CHECK_MSG(memcmp(hw, h_y, n * e) == 0, "%s fused forward over res: not the bits of out apart", pn);
        CHECK_OK(mo_batchnorm_normalize(gc, dt, d_w, d_x, d_g, d_b, d_mean, d_rstd, d_res, M, C, 1));
        down(hw, d_w, n * e);
        CHECK_MSG(memcmp(hw, h_y, n * e) == 0, "%s normalize + res + relu with the forward's statistics: not its bits", pn);
        CHECK_OK(mo_memcpy_d2d(gc, d_w, d_res, n * e));
        CHECK_OK(mo_batchnorm_normalize(gc, dt, d_w, d_x, d_g, d_b, d_mean, d_rstd, d_w, M, C, 1));
        down(hw, d_w, n * e);
        CHECK_MSG(memcmp(hw, h_y, n * e) == 0, "%s normalize over res: not the fused forward's bits", pn);
        for (int relu = 0; relu < 2; relu++) {
            CHECK_OK(mo_batchnorm_forward(gc, dt, d_w, d_m, d_r, NULL, NULL, d_x, d_g, d_b, M, C, 0.1f, relu));
            CHECK_OK(mo_batchnorm_normalize(gc, dt, d_v, d_x, d_g, d_b, d_m, d_r, NULL, M, C, relu));
            down(hw, d_w, n * e), down(hv, d_v, n * e);
            CHECK_MSG(memcmp(hw, hv, n * e) == 0, "%s normalize relu %d with the forward's statistics: not its bits", pn, relu);
        }
        CHECK_OK(mo_memcpy_d2d(gc, d_v, d_x, n * e));
        up(d_w, dy, n * e);
        CHECK_OK(mo_batchnorm_relu_backward_inplace(gc, dt, d_v, d_dg, d_db, d_w, d_v, d_yf, d_g, d_mean, d_rstd, M, C));
        down(hv, d_v, n * e), down(hg, d_dg, C * 4);
        CHECK_MSG(memcmp(hv, h_dx, n * e) == 0 && memcmp(hg, h_dg, C * 4) == 0,
                  "%s fused backward with din over in: not the bits apart", pn);
        printf("  %s over res, normalize with kept statistics, din over in: the bits apart\n", pn);
    }
    dfree(d_w); dfree(d_v); dfree(d_m); dfree(d_r); dfree(d_dg); dfree(d_db);
    free(hw); free(hv); free(hg);
}

// The fused forms the bottleneck runs (batchnorm.h): mo_batchnorm_add_relu_forward must give the bits of
// BN (relu 0), residual add, ReLU run apart on the GPU, and mo_batchnorm_relu_backward_inplace those of
// ReLU backward in place then BN backward (relu 0), the masked dout included; both against the cpu
// references of the fused forms by relative error. impl as gpu_bn.
static void gpu_bn_fused(mo_dtype dt, int M, int C, int impl) {
    const size_t e = mo_dtype_size(dt), n = (size_t)M * C;
    const char *pn = mo_dtype_name(dt);
    gc->bn_cudnn = impl;
    printf("batchnorm + residual + relu fused %s M %d C %d on %s\n", pn, M, C, impl ? "cudnn" : "own kernels");
    void *x = hrand(dt, n, -2, 3), *res = hrand(dt, n, -1.5f, 1), *dy = hrand(dt, n, -1, 1);
    float *g = frand(C, 0.5f, 1.5f), *b = frand(C, -0.5f, 0.5f), *rm0 = frand(C, -1, 1), *rv0 = frand(C, 0.5f, 2);
    float *z = fnew(C);
    for (int i = 0; i < C; i++) z[i] = 0.0f;
    void *d_x = dup_d(x, n * e), *d_res = dup_d(res, n * e), *d_yf = dnew(n * e), *d_yu = dnew(n * e);
    void *d_dya = dup_d(dy, n * e), *d_dyb = dup_d(dy, n * e), *d_dxa = dnew(n * e), *d_dxb = dnew(n * e);
    float *d_g = dup_d(g, C * 4), *d_b = dup_d(b, C * 4);
    float *d_s[2][6]; // per form: mean, rstd, run mean, run var, dgamma, dbeta
    for (int f = 0; f < 2; f++) {
        d_s[f][0] = dnew(C * 4), d_s[f][1] = dnew(C * 4);
        d_s[f][2] = dup_d(rm0, C * 4), d_s[f][3] = dup_d(rv0, C * 4);
        d_s[f][4] = dup_d(z, C * 4), d_s[f][5] = dup_d(z, C * 4);
    }
    int ok = CHECK_OK(mo_batchnorm_add_relu_forward(gc, dt, d_yf, d_s[0][0], d_s[0][1], d_s[0][2], d_s[0][3], d_x, d_g,
                                                    d_b, d_res, M, C, 0.1f));
    ok &= CHECK_OK(mo_batchnorm_forward(gc, dt, d_yu, d_s[1][0], d_s[1][1], d_s[1][2], d_s[1][3], d_x, d_g, d_b, M, C,
                                        0.1f, 0));
    ok &= CHECK_OK(mo_residual_forward_mixed(gc, dt, d_yu, d_yu, d_res, n));
    ok &= CHECK_OK(mo_relu_forward(gc, dt, d_yu, d_yu, n));
    ok &= CHECK_OK(mo_batchnorm_relu_backward_inplace(gc, dt, d_dxa, d_s[0][4], d_s[0][5], d_dya, d_x, d_yf, d_g,
                                                      d_s[0][0], d_s[0][1], M, C));
    ok &= CHECK_OK(mo_relu_backward(gc, dt, d_dyb, d_dyb, d_yu, n));
    ok &= CHECK_OK(mo_batchnorm_backward(gc, dt, d_dxb, d_s[1][4], d_s[1][5], d_dyb, d_x, NULL, d_g, d_s[1][0],
                                         d_s[1][1], M, C, 0));
    void *h[2][3]; // per form: y, dx, masked dy
    float *hs[2][6];
    for (int f = 0; f < 2; f++) {
        for (int j = 0; j < 3; j++) h[f][j] = hnew(n * e);
        for (int j = 0; j < 6; j++) hs[f][j] = fnew(C), down(hs[f][j], d_s[f][j], C * 4);
    }
    down(h[0][0], d_yf, n * e), down(h[1][0], d_yu, n * e), down(h[0][1], d_dxa, n * e), down(h[1][1], d_dxb, n * e);
    down(h[0][2], d_dya, n * e), down(h[1][2], d_dyb, n * e);
    if (ok) {
        static const char *const what[3] = {"out", "din", "dout masked in place"};
        for (int j = 0; j < 3; j++)
            CHECK_MSG(memcmp(h[0][j], h[1][j], n * e) == 0, "%s fused batchnorm %s: not the bits of the ops apart", pn,
                      what[j]);
        for (int j = 0; j < 6; j++)
            CHECK_MSG(memcmp(hs[0][j], hs[1][j], C * 4) == 0, "%s fused batchnorm: statistic %d not the bits of the ops apart", pn, j);
        gpu_bn_inplace(dt, M, C, impl, d_x, d_res, dy, d_yf, d_g, d_b, d_s[0][0], d_s[0][1], h[0][0], h[0][1], hs[0][4]);
        // the cpu references of the fused forms (the backward's mask: the cuda forward's output)
        void *y_ref = hnew(n * e), *dx_ref = hnew(n * e), *dy_ref = hnew(n * e);
        float *m_ref = fnew(C), *r_ref = fnew(C), *rm_ref = fnew(C), *rv_ref = fnew(C), *dg_ref = fnew(C), *db_ref = fnew(C);
        memcpy(rm_ref, rm0, C * 4), memcpy(rv_ref, rv0, C * 4), memcpy(dg_ref, z, C * 4), memcpy(db_ref, z, C * 4);
        memcpy(dy_ref, dy, n * e);
        CHECK_OK(mo_batchnorm_add_relu_forward(hc, dt, y_ref, m_ref, r_ref, rm_ref, rv_ref, x, g, b, res, M, C, 0.1f));
        CHECK_OK(mo_batchnorm_relu_backward_inplace(hc, dt, dx_ref, dg_ref, db_ref, dy_ref, x, h[0][0], g, m_ref, r_ref,
                                                    M, C));
        check(pn, dt, h[0][0], h[1][0], y_ref, n, tol_act(dt, 1e-4), "fused forward out");
        check(pn, MO_F32, hs[0][2], hs[1][2], rm_ref, C, 1e-5, "fused running mean");
        check(pn, dt, h[0][2], h[1][2], dy_ref, n, 0, "fused dout masked in place");
        check(pn, dt, h[0][1], h[1][1], dx_ref, n, tol_act(dt, 1e-4), "fused backward din");
        check(pn, MO_F32, hs[0][4], hs[1][4], dg_ref, C, 1e-4, "fused backward dgamma");
        check(pn, MO_F32, hs[0][5], hs[1][5], db_ref, C, 1e-4, "fused backward dbeta");
        free(y_ref), free(dx_ref), free(dy_ref), free(m_ref), free(r_ref), free(rm_ref), free(rv_ref), free(dg_ref),
            free(db_ref);
    }
    dfree(d_x); dfree(d_res); dfree(d_yf); dfree(d_yu); dfree(d_dya); dfree(d_dyb); dfree(d_dxa); dfree(d_dxb);
    dfree(d_g); dfree(d_b);
    for (int f = 0; f < 2; f++) {
        for (int j = 0; j < 6; j++) dfree(d_s[f][j]), free(hs[f][j]);
        for (int j = 0; j < 3; j++) free(h[f][j]);
    }
    free(x); free(res); free(dy); free(g); free(b); free(rm0); free(rv0); free(z);
    gc->bn_cudnn = 0;
}

// relu_in: the max pool's input ReLU'd (as the stem's: half of it zeros, so windows tie, all-zero ones
// too, and the first equal position must take the gradient). The max pool's backward runs its two paths
// (pool.cu: the argmax bytes in the workspace, the default; the one-pass scan, maxpool_two_pass 0): both
// must give the reference's bits.
static void gpu_pool(mo_dtype dt, int N, int H, int W, int C, int R, int st, int pad, int relu_in) {
    const char *pn = mo_dtype_name(dt);
    const int P = mo_pool_out_dim(H, R, st, pad), Q = mo_pool_out_dim(W, R, st, pad);
    const size_t e = mo_dtype_size(dt), nx = (size_t)N * H * W * C, ny = (size_t)N * P * Q * C, na = (size_t)N * C;
    printf("pools %s N %d %dx%dx%d window %d s%d p%d%s\n", pn, N, H, W, C, R, st, pad, relu_in ? ", input ReLU'd" : "");
    void *x = hrand(dt, relu_in ? 0 : nx, -1, 1), *dy = hrand(dt, ny, -1, 1), *da = hrand(dt, na, -1, 1),
         *dr = hrand(dt, nx, -1, 1);
    if (relu_in) { // max(u, 0), u uniform in [-1, 1)
        free(x);
        float *f = frand(nx, -1, 1);
        for (size_t i = 0; i < nx; i++) f[i] = f[i] > 0 ? f[i] : 0.0f;
        x = f;
        if (dt != MO_F32) {
            x = hnew(nx * 2);
            mo_convert_from_f32(dt, x, f, nx);
            free(f);
        }
    }
    void *y_ref = hnew(ny * e), *dx_ref = hnew(nx * e), *a_ref = hnew(na * e), *dxa_ref = hnew(nx * e),
         *dxr_ref = hnew(nx * e), *rf_ref = hnew(nx * e);
    CHECK_OK(mo_maxpool_forward(hc, dt, y_ref, x, N, H, W, C, R, st, pad));
    CHECK_OK(mo_maxpool_backward(hc, dt, dx_ref, dy, x, y_ref, N, H, W, C, R, st, pad));
    CHECK_OK(mo_avgpool_forward(hc, dt, a_ref, x, N, H * W, C));
    CHECK_OK(mo_avgpool_backward(hc, dt, dxa_ref, da, N, H * W, C));
    CHECK_OK(mo_relu_backward(hc, dt, dxr_ref, dr, x, nx));
    CHECK_OK(mo_relu_forward(hc, dt, rf_ref, dr, nx));
    void *d_x = dup_d(x, nx * e), *d_dy = dup_d(dy, ny * e), *d_da = dup_d(da, na * e), *d_dr = dnew(nx * e);
    void *d_y = dnew(ny * e), *d_dx = dnew(nx * e), *d_a = dnew(na * e);
    void *o[2][7];
    for (int k = 0; k < 2; k++) {
        o[k][0] = hnew(ny * e), o[k][1] = hnew(nx * e), o[k][2] = hnew(na * e), o[k][3] = hnew(nx * e);
        o[k][4] = hnew(nx * e), o[k][5] = hnew(nx * e), o[k][6] = hnew(nx * e);
    }
    int ok = 1;
    const long two0 = gc->maxpool_two_pass_runs;
    for (int run = 0; run < 2 && ok; run++) {
        poison(d_y, ny * e), poison(d_dx, nx * e), poison(d_a, na * e);
        ok &= CHECK_OK(mo_maxpool_forward(gc, dt, d_y, d_x, N, H, W, C, R, st, pad));
        ok &= CHECK_OK(mo_maxpool_backward(gc, dt, d_dx, d_dy, d_x, d_y, N, H, W, C, R, st, pad));
        down(o[run][0], d_y, ny * e), down(o[run][1], d_dx, nx * e);
        poison(d_dx, nx * e);
        gc->maxpool_two_pass = 0;
        ok &= CHECK_OK(mo_maxpool_backward(gc, dt, d_dx, d_dy, d_x, d_y, N, H, W, C, R, st, pad));
        gc->maxpool_two_pass = 1;
        down(o[run][6], d_dx, nx * e);
        ok &= CHECK_OK(mo_avgpool_forward(gc, dt, d_a, d_x, N, H * W, C));
        ok &= CHECK_OK(mo_avgpool_backward(gc, dt, d_dx, d_da, N, H * W, C));
        down(o[run][2], d_a, na * e), down(o[run][3], d_dx, nx * e);
        up(d_dr, dr, nx * e);
        ok &= CHECK_OK(mo_relu_backward(gc, dt, d_dr, d_dr, d_x, nx)); // in place
        down(o[run][4], d_dr, nx * e);
        up(d_dr, dr, nx * e);
        ok &= CHECK_OK(mo_relu_forward(gc, dt, d_dr, d_dr, nx)); // in place
        down(o[run][5], d_dr, nx * e);
    }
    // the default ran the two-pass kernels where C takes the 16-byte vector (twice), the scan otherwise
    const int two_want = C % (int)(16 / e) == 0 ? 2 : 0;
    CHECK_MSG(!ok || gc->maxpool_two_pass_runs - two0 == two_want, "%s pool: %ld two-pass max pool backwards, want %d",
              pn, gc->maxpool_two_pass_runs - two0, two_want);
    if (ok) {
        check(pn, dt, o[0][0], o[1][0], y_ref, ny, 0, "maxpool forward");
        check(pn, dt, o[0][1], o[1][1], dx_ref, nx, 0, "maxpool backward");
        check(pn, dt, o[0][6], o[1][6], dx_ref, nx, 0, "maxpool backward, one-pass scan");
        check(pn, dt, o[0][2], o[1][2], a_ref, na, 0, "avgpool forward");
        check(pn, dt, o[0][3], o[1][3], dxa_ref, nx, 0, "avgpool backward");
        check(pn, dt, o[0][4], o[1][4], dxr_ref, nx, 0, "relu backward (in place)");
        check(pn, dt, o[0][5], o[1][5], rf_ref, nx, 0, "relu forward (in place)");
    }
    dfree(d_x); dfree(d_dy); dfree(d_da); dfree(d_dr); dfree(d_y); dfree(d_dx); dfree(d_a);
    free(x); free(dy); free(da); free(dr); free(y_ref); free(dx_ref); free(a_ref); free(dxa_ref); free(dxr_ref); free(rf_ref);
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 7; j++) free(o[k][j]);
}

// ---------------------------------------------------------------------------------------------
static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
#define TREPS 10
// median ms of one op (a switch over which) on the device buffers
static double time_op(int which, const prec *pr, const mo_conv_shape *s, void *x, void *w, void *y, float *dw,
                      float *bn[6], int relu) {
    const mo_dtype dt = pr->dt;
    const int M = s->N * s->H * s->W;
    double t[TREPS];
    mo_timer tm;
    if (!CHECK_OK(mo_timer_init(gc, &tm))) return -1;
    gc->tf32 = pr->tf32;
    for (int r = -2; r < TREPS; r++) {
        double ms = 0;
        CHECK_OK(mo_timer_start(gc, &tm));
        mo_status st = MO_OK;
        switch (which) {
        case 0: st = mo_conv_forward(gc, dt, y, x, w, s); break;
        case 1: st = mo_conv_backward_data(gc, dt, x, y, w, s); break;
        case 2: st = mo_conv_backward_filter(gc, dt, dw, y, x, s); break;
        case 3: st = mo_batchnorm_forward(gc, dt, y, bn[0], bn[1], bn[2], bn[3], x, bn[4], bn[5], M, s->C, 0.1f, relu); break;
        case 4: st = mo_batchnorm_backward(gc, dt, w, bn[2], bn[3], y, x, x, bn[4], bn[0], bn[1], M, s->C, relu); break;
        case 5: st = mo_batchnorm_add_relu_forward(gc, dt, y, bn[0], bn[1], bn[2], bn[3], x, bn[4], bn[5], w, M, s->C, 0.1f); break;
        case 6: st = mo_batchnorm_relu_backward_inplace(gc, dt, w, bn[2], bn[3], y, x, x, bn[4], bn[0], bn[1], M, s->C); break;
        }
        if (!CHECK_OK(st)) { mo_timer_destroy(&tm); gc->tf32 = 0; return -1; }
        CHECK_OK(mo_timer_stop(gc, &tm, &ms));
        if (r >= 0) t[r] = ms;
    }
    gc->tf32 = 0;
    mo_timer_destroy(&tm);
    qsort(t, TREPS, sizeof t[0], cmp_d);
    return 0.5 * (t[TREPS / 2 - 1] + t[TREPS / 2]);
}

// ResNet-50 layer1's 3x3 convolution (56x56, 64 -> 64, batch 128) and its batch norm
static void timing(void) {
    if (test_reduced("resnet ops timing")) return;
    mo_conv_shape s;
    mo_conv_shape_init(&s, 128, 56, 56, 64, 64, 3, 3, 1, 1);
    const size_t n = (size_t)128 * 56 * 56 * 64, nw = 64 * 9 * 64;
    printf("timing: ResNet-50 layer1 conv 3x3 64->64 at 56x56, batch 128 (%.1f GFLOP each), its batch norm (M %d, C 64); "
           "median of %d\n", mo_conv_flops(&s) * 1e-9, 128 * 56 * 56, TREPS);
    void *x = dnew(n * 4), *y = dnew(n * 4), *w = dnew(n * 4);
    float *dw = dnew(nw * 4), *bn[6];
    for (int j = 0; j < 6; j++) bn[j] = dnew(64 * 4);
    CHECK_OK(mo_memset_zero(gc, x, n * 4));
    CHECK_OK(mo_memset_zero(gc, y, n * 4));
    CHECK_OK(mo_memset_zero(gc, w, n * 4));
    CHECK_OK(mo_memset_zero(gc, dw, nw * 4));
    for (int j = 0; j < 6; j++) CHECK_OK(mo_memset_zero(gc, bn[j], 64 * 4));
    for (int k = 0; k < 4; k++) {
        const prec *pr = &precs[k];
        const double f = time_op(0, pr, &s, x, w, y, dw, bn, 0), bd = time_op(1, pr, &s, x, w, y, dw, bn, 0),
                     bf = time_op(2, pr, &s, x, w, y, dw, bn, 0), nf = time_op(3, pr, &s, x, w, y, dw, bn, 1),
                     nb = time_op(4, pr, &s, x, w, y, dw, bn, 1);
        const double ff = time_op(5, pr, &s, x, w, y, dw, bn, 1), fb = time_op(6, pr, &s, x, w, y, dw, bn, 1);
        gc->bn_cudnn = 1;
        const double cf = time_op(3, pr, &s, x, w, y, dw, bn, 1), cb = time_op(4, pr, &s, x, w, y, dw, bn, 1);
        gc->bn_cudnn = 0;
        if (pr->dt == MO_F32 && !pr->tf32) { // the input gradient on cuDNN's backward-data engine, to compare
            gc->conv_dgrad_cudnn = 1;
            printf("  fp32 bwd data on cuDNN's backward-data engine (MEMOPT_CONV_DGRAD=cudnn): %.3f ms\n",
                   time_op(1, pr, &s, x, w, y, dw, bn, 0));
            gc->conv_dgrad_cudnn = 0;
        }
        const double g = mo_conv_flops(&s) * 1e-9;
        printf("  %-4s conv fwd %.3f ms (%.0f TFLOP/s), bwd data %.3f (%.0f), bwd filter %.3f (%.0f); "
               "bn+relu fwd %.3f ms, bwd %.3f ms (cuDNN's: %.3f, %.3f)\n",
               pr->name, f, g / f, bd, g / bd, bf, g / bf, nf, nb, cf, cb);
        // bytes the fused forms move at the least: forward in twice, res, out; backward 7 passes
        const double mb = (double)n * mo_dtype_size(pr->dt) * 1e-6;
        printf("  %-4s bn+add+relu fwd %.3f ms (%.0f GB/s at 4 passes), bn+relu bwd in place %.3f ms (%.0f GB/s at 7)\n",
               pr->name, ff, 4 * mb / ff, fb, 7 * mb / fb);
    }
    // the max pool's backward at the stem's shape (batch 128, 112x112x64 -> 56x56, the input ReLU'd as
    // the stem's: zeros and uniform values), its two paths (pool.cu)
    {
        const size_t nx = (size_t)128 * 112 * 112 * 64, ny = (size_t)128 * 56 * 56 * 64;
        for (int k = 0; k < 3; k++) {
            const mo_dtype dt = k == 0 ? MO_F32 : k == 1 ? MO_BF16 : MO_F16;
            const size_t e = mo_dtype_size(dt);
            float *f = frand(nx, -1, 1);
            for (size_t i = 0; i < nx; i++) f[i] = f[i] > 0 ? f[i] : 0.0f;
            void *h = f;
            if (dt != MO_F32) h = hnew(nx * 2), mo_convert_from_f32(dt, h, f, nx);
            void *px = dup_d(h, nx * e), *py = dnew(ny * e), *pdx = dnew(nx * e), *pdy = dnew(ny * e);
            CHECK_OK(mo_memset_zero(gc, pdy, ny * e));
            CHECK_OK(mo_maxpool_forward(gc, dt, py, px, 128, 112, 112, 64, 3, 2, 1));
            double ms[2];
            for (int two = 1; two >= 0; two--) {
                double t[TREPS];
                mo_timer tm;
                CHECK_OK(mo_timer_init(gc, &tm));
                gc->maxpool_two_pass = two;
                for (int r = -2; r < TREPS; r++) {
                    double x = 0;
                    CHECK_OK(mo_timer_start(gc, &tm));
                    CHECK_OK(mo_maxpool_backward(gc, dt, pdx, pdy, px, py, 128, 112, 112, 64, 3, 2, 1));
                    CHECK_OK(mo_timer_stop(gc, &tm, &x));
                    if (r >= 0) t[r] = x;
                }
                mo_timer_destroy(&tm);
                qsort(t, TREPS, sizeof t[0], cmp_d);
                ms[two] = 0.5 * (t[TREPS / 2 - 1] + t[TREPS / 2]);
            }
            gc->maxpool_two_pass = 1;
            printf("  %-4s maxpool bwd (stem, batch 128): argmax bytes, two passes %.3f ms; one-pass scan %.3f ms\n",
                   mo_dtype_name(dt), ms[1], ms[0]);
            dfree(px), dfree(py), dfree(pdx), dfree(pdy);
            if (h != f) free(h);
            free(f);
        }
    }
    // fp32's strided input gradients: as chunked forward convolutions (the default) and on the engine
    {
        const size_t nbig = (size_t)128 * 56 * 56 * 256, nd = (size_t)128 * 28 * 28 * 512, nwb = (size_t)512 * 256 * 9;
        void *bx = dnew(nbig * 4), *bd = dnew(nd * 4), *bw = dnew(nwb * 4);
        CHECK_OK(mo_memset_zero(gc, bd, nd * 4));
        CHECK_OK(mo_memset_zero(gc, bw, nwb * 4));
        static const int shp[2][5] = {{56, 128, 128, 3, 1}, {56, 256, 512, 1, 0}}; // H, C, K, R, pad; stride 2
        for (int j = 0; j < 2; j++) {
            mo_conv_shape t;
            mo_conv_shape_init(&t, 128, shp[j][0], shp[j][0], shp[j][1], shp[j][2], shp[j][3], shp[j][3], 2, shp[j][4]);
            const double col = time_op(1, &precs[0], &t, bx, bw, bd, dw, bn, 0);
            gc->conv_gemm = MO_CONV_GEMM_1X1;
            const double fwd = time_op(1, &precs[0], &t, bx, bw, bd, dw, bn, 0);
            gc->conv_gemm = MO_CONV_GEMM_AUTO;
            gc->conv_dgrad_cudnn = 1;
            const double eng = time_op(1, &precs[0], &t, bx, bw, bd, dw, bn, 0);
            gc->conv_dgrad_cudnn = 0;
            const double g = mo_conv_flops(&t) * 1e-9;
            printf("  fp32 bwd data %dx%d stride 2, %d -> %d at %dx%d: %.3f ms as im2col GEMMs (%.1f TFLOP/s), %.3f as "
                   "forward convolutions (%.1f; MEMOPT_CONV_GEMM=1x1), %.3f on cuDNN's backward-data engine (%.1f)\n",
                   shp[j][3], shp[j][3], shp[j][1], shp[j][2], shp[j][0], shp[j][0], col, g / col, fwd, g / fwd, eng,
                   g / eng);
        }
        // a 1x1 stride-1 convolution (layer1's 64 -> 256): cuBLASLt GEMMs (the default) against cuDNN
        mo_conv_shape t;
        mo_conv_shape_init(&t, 128, 56, 56, 64, 256, 1, 1, 1, 0);
        double ms[2][3];
        for (int cg = 1; cg >= 0; cg--) {
            gc->conv_gemm = cg ? MO_CONV_GEMM_1X1 : MO_CONV_GEMM_NONE;
            // x (25.7M floats) in bd, y (102.8M) in bx: the buffers above, roles swapped to fit
            for (int op = 0; op < 3; op++) ms[cg][op] = time_op(op, &precs[0], &t, bd, bw, bx, dw, bn, 0);
        }
        gc->conv_gemm = MO_CONV_GEMM_AUTO;
        const double g = mo_conv_flops(&t) * 1e-9;
        printf("  fp32 1x1 64 -> 256 at 56x56: as GEMMs fwd %.3f ms (%.1f TFLOP/s), bwd data %.3f (%.1f), bwd filter "
               "%.3f (%.1f); on cuDNN %.3f (%.1f), %.3f (%.1f), %.3f (%.1f)\n", ms[1][0], g / ms[1][0], ms[1][1],
               g / ms[1][1], ms[1][2], g / ms[1][2], ms[0][0], g / ms[0][0], ms[0][1], g / ms[0][1], ms[0][2],
               g / ms[0][2]);
        dfree(bx), dfree(bd), dfree(bw);
    }
    long hits, misses;
    mo_conv_cache_stats(gc, &hits, &misses);
    printf("  conv plan cache: %ld hits, %ld plans built\n", hits, misses);
    dfree(x); dfree(y); dfree(w); dfree(dw);
    for (int j = 0; j < 6; j++) dfree(bn[j]);
}

#ifdef MEMOPT_HAVE_CUDA
// fp32 convolutions other than 1x1 stride-1 (ResNet-50's at batch 128) as im2col GEMMs (MEMOPT_CONV_GEMM=all)
// against MEMOPT_CONV_GEMM=1x1, each pass (the default takes the faster of the two per pass: conv_cuda.c): cuDNN's forward and weight gradient, the input gradient as a
// cuDNN forward convolution (stride 1: of the flipped filter; stride 2: of dout dilated; the 1x1 stride 2:
// a 1x1 GEMM scattered), which is MEMOPT_CONV_GEMM=0 too but for the 1x1 stride 2's GEMM.
static void timing_col_gemm(void) {
    if (test_reduced("conv im2col GEMM timing")) return;
    static const struct { const char *name; int H, C, K, R, st, pad; } sh[7] = {
        {"stem 7x7 s2", 224, 3, 64, 7, 2, 3},    {"layer1 3x3", 56, 64, 64, 3, 1, 1},
        {"layer2 3x3 s2", 56, 128, 128, 3, 2, 1}, {"layer2 3x3", 28, 128, 128, 3, 1, 1},
        {"layer3 3x3", 14, 256, 256, 3, 1, 1},   {"layer4 3x3", 7, 512, 512, 3, 1, 1},
        {"layer2 downsample 1x1 s2", 56, 256, 512, 1, 2, 0}};
    const size_t nbig = (size_t)128 * 56 * 56 * 256, nw = (size_t)512 * 9 * 512; // the largest x or y, w
    void *x = dnew(nbig * 4), *y = dnew(nbig * 4), *w = dnew(nw * 4);
    float *dw = dnew(nw * 4), *bn[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
    CHECK_OK(mo_memset_zero(gc, x, nbig * 4));
    CHECK_OK(mo_memset_zero(gc, y, nbig * 4));
    CHECK_OK(mo_memset_zero(gc, w, nw * 4));
    CHECK_OK(mo_memset_zero(gc, dw, nw * 4));
    mo_ctx *g256 = NULL; // the ResNet's workspace budget (models/resnet.c)
    CHECK_OK(mo_ctx_create_ws(&g256, MO_BACKEND_CUDA, ga, (size_t)256 << 20));
    printf("timing: fp32 convolutions at batch 128, im2col GEMMs (MEMOPT_CONV_GEMM=all) against =1x1 (cuDNN); "
           "median of %d\n", TREPS);
    double sum[2] = {0, 0};
    for (int j = 0; j < 7; j++) {
        mo_conv_shape t;
        mo_conv_shape_init(&t, 128, sh[j].H, sh[j].H, sh[j].C, sh[j].K, sh[j].R, sh[j].R, sh[j].st, sh[j].pad);
        int rows, imgs;
        conv_col_chunks(gc, &t, &rows, &imgs);
        double ms[2][3];
        for (int v = 0; v < 2; v++) {
            gc->conv_gemm = v ? MO_CONV_GEMM_1X1 : MO_CONV_GEMM_ALL;
            for (int op = 0; op < 3; op++) ms[v][op] = time_op(op, &precs[0], &t, x, w, y, dw, bn, 0);
            sum[v] += ms[v][0] + ms[v][1] + ms[v][2];
        }
        gc->conv_gemm = MO_CONV_GEMM_AUTO; // the implicit-GEMM kernel (gc: wherever it takes the shape)
        const long i0 = gc->conv_implicit_runs;
        const double fi = time_op(0, &precs[0], &t, x, w, y, dw, bn, 0), di = time_op(1, &precs[0], &t, x, w, y, dw, bn, 0);
        const long iruns = gc->conv_implicit_runs - i0;
        gc->conv_gemm = MO_CONV_GEMM_ALL; // the weight gradient as one GEMM a chunk (what the slabs replace)
        gc->conv_wgrad_split = 0;
        const double unsplit = time_op(2, &precs[0], &t, x, w, y, dw, bn, 0);
        gc->conv_wgrad_split = 1;
        gc->conv_gemm = MO_CONV_GEMM_AUTO;
        const double g = mo_conv_flops(&t) * 1e-9;
        const int M = 128 * t.P * t.Q;
        printf("  %-25s %.1f GFLOP; chunks: %d x %d rows, %d x %d images\n", sh[j].name, g, (M + rows - 1) / rows,
               rows, (128 + imgs - 1) / imgs, imgs);
        printf("    im2col GEMMs fwd %.3f ms (%.1f TFLOP/s), bwd data %.3f (%.1f), bwd filter %.3f (%.1f)\n", ms[0][0],
               g / ms[0][0], ms[0][1], g / ms[0][1], ms[0][2], g / ms[0][2]);
        printf("    cuDNN        fwd %.3f ms (%.1f TFLOP/s), bwd data %.3f (%.1f), bwd filter %.3f (%.1f)\n", ms[1][0],
               g / ms[1][0], ms[1][1], g / ms[1][1], ms[1][2], g / ms[1][2]);
        printf("    implicit     fwd %.3f ms (%.1f TFLOP/s), bwd data %.3f (%.1f); %ld of the runs on the implicit-GEMM "
               "kernel\n", fi, g / fi, di, g / di, iruns);
        printf("    bwd filter as one GEMM a chunk (MEMOPT_CONV_WGRAD_SPLIT=0) %.3f ms (%.1f); %d row slabs a chunk\n",
               unsplit, g / unsplit, conv_wgrad_slabs(gc, &t));
        if (j == 0) { // the stem under TF32: its weight gradient as TF32 slab GEMMs (auto) or on cuDNN (1x1)
            const double ta = time_op(2, &precs[1], &t, x, w, y, dw, bn, 0);
            gc->conv_gemm = MO_CONV_GEMM_1X1;
            const double tc = time_op(2, &precs[1], &t, x, w, y, dw, bn, 0);
            gc->conv_gemm = MO_CONV_GEMM_AUTO;
            printf("    tf32 bwd filter: TF32 slab GEMMs %.3f ms (%.1f), cuDNN %.3f (%.1f)\n", ta, g / ta, tc, g / tc);
        }
        if (g256 && sh[j].R > 1 && sh[j].C % 8 == 0) { // at the ResNet's budget: the im2col chunks 8x longer
            mo_ctx *g32 = gc;
            gc = g256;
            // im2col, the implicit kernel (its default tiles), the default route (auto), then the kernel on
            // tiles 128x64, 128x128 (K % 128)
            double m2[5][2] = {{0}};
            for (int v = 0; v < 5; v++) {
                if (v == 4 && t.K % 128) continue;
                gc->conv_gemm = v ? MO_CONV_GEMM_AUTO : MO_CONV_GEMM_ALL;
                gc->conv_implicit = v == 2 ? MO_CONV_IMPLICIT_AUTO : MO_CONV_IMPLICIT_ALWAYS;
                gc->conv_implicit_tile = v == 3 ? MO_CONV_TILE_128X64 : v == 4 ? MO_CONV_TILE_128X128
                                                                               : MO_CONV_TILE_DEFAULT;
                for (int op = 0; op < 2; op++) m2[v][op] = time_op(op, &precs[0], &t, x, w, y, dw, bn, 0);
            }
            gc->conv_gemm = MO_CONV_GEMM_AUTO;
            gc->conv_implicit = MO_CONV_IMPLICIT_AUTO;
            gc->conv_implicit_tile = MO_CONV_TILE_DEFAULT;
            gc = g32;
            printf("    256 MiB workspace: im2col GEMMs fwd %.3f ms (%.1f), bwd data %.3f (%.1f); implicit-GEMM kernel "
                   "fwd %.3f (%.1f), bwd data %.3f (%.1f); the default route fwd %.3f, bwd data %.3f\n", m2[0][0],
                   g / m2[0][0], m2[0][1], g / m2[0][1], m2[1][0], g / m2[1][0], m2[1][1], g / m2[1][1], m2[2][0],
                   m2[2][1]);
            printf("    the kernel's tiles: 128x64 fwd %.3f ms (%.1f), bwd data %.3f; 128x128 fwd %.3f, bwd data %.3f "
                   "(0: K %% 128)\n", m2[3][0], g / m2[3][0], m2[3][1], m2[4][0], m2[4][1]);
        }
    }
    printf("  the seven shapes' three passes: %.3f ms as im2col GEMMs, %.3f on cuDNN\n", sum[0], sum[1]);
    if (g256) mo_ctx_destroy(g256);
    dfree(x), dfree(y), dfree(w), dfree(dw);
}
#endif

// A case of MEMOPT_TEST_PART (testlib.h): run in this part only.
#define TEST_PART(call) do { if (test_part_take(#call)) call; } while (0)

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0); // the FAIL lines (stderr) stay next to the op they are about
    test_require_gpu();
    const uint64_t seed = test_seed_from_time();
    test_rng_seed(&rng, seed);
    printf("seed %llu\n", (unsigned long long)seed);
    CHECK_OK(mo_allocator_create(&ga, MO_ALLOC_CACHING, MO_BACKEND_CUDA, 0, NULL));
    CHECK_OK(mo_allocator_create(&ha, MO_ALLOC_CACHING, MO_BACKEND_CPU, 0, NULL));
    if (!ga || !ha) return test_finish();
    CHECK_OK(mo_ctx_create(&gc, MO_BACKEND_CUDA, ga));
    CHECK_OK(mo_ctx_create(&hc, MO_BACKEND_CPU, ha));
    if (!gc || !hc) return test_finish();
    // the implicit-GEMM kernel wherever it takes the shape (by default only where it measured faster than
    // im2col at batch 128: these batch-2 shapes would all go to im2col), so that both paths are checked
    gc->conv_implicit = MO_CONV_IMPLICIT_ALWAYS;
    // MEMOPT_TEST_REDUCED=2 (racecheck, initcheck): the ResNet-50 shapes keep their filter, stride, padding
    // and channels (what picks the path and the engine) at one image of 8x8 (the stem 32x32): the
    // sanitized library kernels cost in proportion to the work, and session 13's racecheck of every kernel
    // spent 248 s in fp32's and tf32's full-size cases
    const int small = test_reduced_level() >= 2;
    if (small) printf("MEMOPT_TEST_REDUCED=2: the ResNet-50 convolution shapes at batch 1, 8x8 (the stem 32x32)\n");
    const int n = small ? 1 : 2, hw = small ? 8 : 56, hw2 = small ? 8 : 28, hw4 = small ? 8 : 7, stem = small ? 32 : 224;
    for (int k = 0; k < 4; k++) {
        const prec *p = &precs[k];
        if (p->tf32) continue; // run by gpu_conv with fp32's inputs and reference
        TEST_PART(gpu_conv(p, n, stem, stem, 3, 64, 7, 2, 3, "ResNet-50 stem 7x7"));
        TEST_PART(gpu_conv(p, n, hw, hw, 64, 64, 3, 1, 1, "layer1 3x3"));
        TEST_PART(gpu_conv(p, n, hw, hw, 64, 256, 1, 1, 0, "layer1 1x1 expand"));
        TEST_PART(gpu_conv(p, n, hw2, hw2, 128, 128, 3, 2, 1, "layer2 3x3 stride 2 (v1.5)"));
        TEST_PART(gpu_conv(p, n, hw, hw, 256, 512, 1, 2, 0, "layer2 downsample 1x1 s2"));
        TEST_PART(gpu_conv(p, n, hw4, hw4, 512, 512, 3, 1, 1, "layer4 3x3"));
        TEST_PART(gpu_conv(p, 3, 13, 11, 5, 7, 3, 2, 1, "odd sizes"));
        TEST_PART(gpu_conv(p, 1, 9, 7, 3, 10, 1, 1, 0, "odd 1x1"));
        TEST_PART(gpu_conv(p, 3, 13, 11, 6, 8, 1, 2, 0, "odd 1x1 stride 2"));
        TEST_PART(gpu_conv(p, 3, 9, 10, 7, 6, 3, 1, 1, "odd C 3x3 stride 1"));
        TEST_PART(gpu_conv(p, 2, 8, 9, 4, 5, 3, 1, 2, "3x3 pad 2 (> R - 1)"));
        // the implicit-GEMM kernel's tiles cut at odd sizes: 64 and 128 channels, both strides
        TEST_PART(gpu_conv(p, 3, 13, 11, 8, 64, 3, 1, 1, "odd 3x3, C 8 K 64"));
        TEST_PART(gpu_conv(p, 3, 13, 11, 64, 128, 3, 2, 1, "odd 3x3 stride 2, C 64 K 128"));
    }
    // fp32 and tf32: layer1's 3x3 at batch 4 takes two chunks of the workspace in every pass (10880 + 1664
    // rows; 3 + 1 images)
    TEST_PART(gpu_conv(&precs[0], 4, 56, 56, 64, 64, 3, 1, 1, "layer1 3x3, two workspace chunks"));
#ifdef MEMOPT_HAVE_CUDA
    for (int k = 0; k < 3; k++) {
        const mo_dtype dt = k == 0 ? MO_F32 : k == 1 ? MO_BF16 : MO_F16;
        printf("conv backward data add %s\n", mo_dtype_name(dt));
        TEST_PART(gpu_conv_add(dt, 3, hw, hw, 256, 64, 1, 1, 0, "layer1 1x1 (bottleneck unit 0)"));
        TEST_PART(gpu_conv_add(dt, 3, hw, hw, 256, 512, 1, 2, 0, "layer2 downsample 1x1 s2"));
        TEST_PART(gpu_conv_add(dt, 3, hw2, hw2, 64, 64, 3, 1, 1, "3x3 (basic block unit 0)"));
        TEST_PART(gpu_conv_add(dt, 3, 13, 11, 6, 8, 1, 2, 0, "odd 1x1 stride 2"));
    }
    TEST_PART(gpu_im2col(2, 56, 56, 64, 3, 1, 1));
    TEST_PART(gpu_im2col(2, 56, 56, 128, 3, 2, 1));
    TEST_PART(gpu_im2col(2, 224, 224, 3, 7, 2, 3));
    TEST_PART(gpu_im2col(3, 13, 11, 5, 3, 2, 1));
    TEST_PART(gpu_im2col(3, 13, 11, 8, 1, 2, 0));
    TEST_PART(gpu_im2col(2, 9, 9, 4, 3, 1, 2));
    TEST_PART(gpu_im2col(2, 7, 8, 12, 3, 3, 0));
#endif
    const mo_dtype dts[3] = {MO_F32, MO_BF16, MO_F16};
    for (int k = 0; k < 3; k++) {
        for (int impl = 0; impl < 2; impl++) {
            TEST_PART(gpu_bn(dts[k], 2 * 56 * 56, 64, 1, impl));
            TEST_PART(gpu_bn(dts[k], 2 * 7 * 7, 2048, 0, impl));
            TEST_PART(gpu_bn(dts[k], 37, 5, 1, impl));
        }
        TEST_PART(gpu_bn(dts[k], 3 * 41 * 37 + 5, 96, 1, 0)); // many row groups, the last one short
        TEST_PART(gpu_bn(dts[k], 8 * 28 * 28, 40, 0, 0));    // C not a multiple of the block's 32 channels
        TEST_PART(gpu_bn(dts[k], 2 * 9 * 9 + 3, 12, 1, 0));  // 16-bit: C not a multiple of 8 (the scalar kernels)
        TEST_PART(gpu_bn(dts[k], 100, 4, 1, 0));             // fp32: one vector a row, fewer rows than row lanes
        TEST_PART(gpu_bn(dts[k], 2 * 28 * 28, 160, 1, 0));   // fp32: 40 vectors a row, the second block part idle
        // the per-channel merges' block (batchnorm.cu's BN_FT threads, BN_UNROLL_FINAL loads): C 64 has row
        // groups of 512 rows (fp32) or 1024 (16-bit), so 300 and 150 groups (a part of the block's threads),
        // then 2071 and 1036 (every thread, the unrolled loop and its tail); not under MEMOPT_TEST_REDUCED=2
        // (racecheck, initcheck: 10 and 68 million elements)
        if (test_reduced_level() < 2) {
            TEST_PART(gpu_bn(dts[k], 300 * 512 + 77, 64, 0, 0));
            TEST_PART(gpu_bn(dts[k], 2071 * 512 - 100, 64, 1, 0));
        }
        for (int impl = 0; impl < 2; impl++) TEST_PART(gpu_bn_fused(dts[k], 2 * 56 * 56, 64, impl));
        TEST_PART(gpu_bn_fused(dts[k], 3 * 41 * 37 + 5, 96, 0));
        TEST_PART(gpu_bn_fused(dts[k], 37, 5, 0)); // the scalar kernels
        TEST_PART(gpu_pool(dts[k], 2, 112, 112, 64, 3, 2, 1, 0));
        TEST_PART(gpu_pool(dts[k], 2, 112, 112, 64, 3, 2, 1, 1));
        TEST_PART(gpu_pool(dts[k], 3, 9, 7, 8, 3, 2, 1, 1)); // odd sizes, the vector kernels (C 8)
        TEST_PART(gpu_pool(dts[k], 3, 9, 7, 5, 3, 2, 1, 0));
        TEST_PART(gpu_pool(dts[k], 1, 6, 5, 3, 2, 1, 0, 1));
    }
    timing();
#ifdef MEMOPT_HAVE_CUDA
    timing_col_gemm();
#endif
    mo_ctx_destroy(gc);
    mo_ctx_destroy(hc);
    mo_allocator_destroy(ga);
    mo_allocator_destroy(ha);
    return test_finish();
}
