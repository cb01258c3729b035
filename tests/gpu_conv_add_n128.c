// GPU test of mo_conv_backward_data_add in 16 bits at ResNet-50 batch 128: din (N, H, W, C) += the input
// gradient of dout (N, P, Q, K) through w (K, 1, 1, C), at the eight shapes where the ResNet step adds the
// shortcut's gradient, on fresh random data (seed printed).
//
// Why a test of its own: with the add in cuDNN's beta-1 backward-data plans, ResNet-50's batch-128 fp16
// and bf16 steps trained wrongly on the H100 (session 22), while gpu_resnet_ops' batch-3 cases of the op
// matched the cpu reference. This test found the engine (session 23: 78, on every stride-1 shape it was
// kept for; conv_cuda.c now refuses it for 16-bit beta-1 keys). Per shape and precision:
//   - the op through chunks in the workspace (tests' ctx->conv_add16_beta1 0: the gradient of a chunk of
//     images, then added) against the cpu reference on the first and the last image (per image: a
//     batch-128 direct convolution on the cpu would take minutes), by relative L2 error;
//   - the default route (cuDNN's beta-1 plans), its default pick (the stored choice or the first) and the
//     kept candidate of every rank (ctx->conv_force_rank; the plans dropped between ranks), each against
//     the chunked result over all 128 images, twice (the same bits), its engine printed: a beta-1 engine
//     that gets the sum wrong fails here with its number, and a refused one must not run. (The default pick
//     here may differ from the step's: the stored choices are keyed by pointer alignment too, and these
//     buffers are all 256-byte aligned; the ranks cover every kept engine either way.)
// Tolerances: relative L2 error bf16 1e-2, fp16 2e-3 (the suite's 16-bit bounds); the chunked route rounds
// twice (the gradient, then the sum), a beta-1 epilogue once.
#include <stdlib.h>
#include <string.h>

#include "kernels/conv.h"
#include "kernels/ops_mixed.h"
#ifdef MEMOPT_HAVE_CUDA
#include "kernels/resnet_ops_impl.h" // mo_dnn_destroy
#endif
#include "strategies/alloc.h"
#include "tests/testlib.h"

static mo_allocator *ga, *ha;
static mo_ctx *gc, *hc;
static test_rng rng;

#ifdef MEMOPT_HAVE_CUDA
static void *hnew(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) { fprintf(stderr, "out of host memory (%zu bytes)\n", bytes); exit(1); }
    return p;
}
static void *hrand(mo_dtype dt, size_t n) { // n random elements of dt in [-1, 1]
    float *f = hnew(n * sizeof(float));
    test_fill_uniform(&rng, f, n, -1, 1);
    void *h = hnew(n * 2);
    mo_convert_from_f32(dt, h, f, n);
    free(f);
    return h;
}
static float *as_f32(mo_dtype dt, const void *x, size_t n) {
    float *f = hnew(n * sizeof(float));
    mo_convert_to_f32(dt, f, x, n);
    return f;
}
static void *dnew(size_t bytes) {
    void *p = NULL;
    if (!CHECK_OK(mo_alloc(ga, bytes, MO_CAT_ACTIVATION, &p))) exit(test_finish());
    return p;
}

// The relative L2 error of got against want (n elements of dt), and the largest |got - want| with its index.
static double rel_err(mo_dtype dt, const void *got, const void *want, size_t n, double *worst, size_t *at) {
    float *g = as_f32(dt, got, n), *w = as_f32(dt, want, n);
    const double rel = test_rel_error(g, w, n);
    *worst = 0, *at = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = g[i] > w[i] ? (double)g[i] - w[i] : (double)w[i] - g[i];
        if (d > *worst) *worst = d, *at = i;
    }
    free(g), free(w);
    return rel;
}

static void one_shape(mo_dtype dt, int H, int C, int K, int st) {
    const int N = 128;
    const double tol = dt == MO_BF16 ? 1e-2 : 2e-3;
    mo_conv_shape s;
    mo_conv_shape_init(&s, N, H, H, C, K, 1, 1, st, 0);
    const size_t e = mo_dtype_size(dt), img = (size_t)H * H * C, nx = (size_t)N * img,
                 nw = (size_t)K * C, ny = (size_t)N * s.P * s.Q * K;
    printf("%s N %d H %d C %d K %d 1x1 stride %d\n", mo_dtype_name(dt), N, H, C, K, st);
    void *w = hrand(dt, nw), *dy = hrand(dt, ny), *d0 = hrand(dt, nx);
    void *ref = hnew(nx * e), *got = hnew(nx * e), *got2 = hnew(nx * e);
    void *dw = dnew(nw * e), *ddy = dnew(ny * e), *dd = dnew(nx * e);
    CHECK_OK(mo_memcpy_h2d(gc, dw, w, nw * e));
    CHECK_OK(mo_memcpy_h2d(gc, ddy, dy, ny * e));
    // the reference route: the chunks
    gc->conv_add16_beta1 = 0;
    const long ch0 = gc->conv_dgrad_add_chunked;
    CHECK_OK(mo_memcpy_h2d(gc, dd, d0, nx * e));
    CHECK_OK(mo_conv_backward_data_add(gc, dt, dd, ddy, dw, &s));
    CHECK_OK(mo_memcpy_d2h(gc, ref, dd, nx * e));
    CHECK_MSG(gc->conv_dgrad_add_chunked == ch0 + 1, "%s: conv_add16_beta1 0 did not run through the chunks",
              mo_dtype_name(dt));
    // its first and last images against the cpu reference
    mo_conv_shape s1;
    mo_conv_shape_init(&s1, 1, H, H, C, K, 1, 1, st, 0);
    const int imgs[2] = {0, N - 1};
    for (int i = 0; i < 2; i++) {
        const int n = imgs[i];
        void *c = hnew(img * e);
        memcpy(c, (char *)d0 + (size_t)n * img * e, img * e);
        CHECK_OK(mo_conv_backward_data_add(hc, dt, c, (char *)dy + (size_t)n * s.P * s.Q * K * e, w, &s1));
        double worst;
        size_t at;
        const double rel = rel_err(dt, (char *)ref + (size_t)n * img * e, c, img, &worst, &at);
        printf("  chunks, image %3d against the cpu reference: rel err %.2e (tol %.0e)\n", n, rel, tol);
        CHECK_MSG(rel <= tol, "%s H %d C %d K %d s%d: chunks, image %d: rel err %.3e > %.0e", mo_dtype_name(dt), H, C,
                  K, st, n, rel, tol);
        free(c);
    }
    // cuDNN's beta-1 plans, the default pick (-1) then every kept rank
    gc->conv_add16_beta1 = 1;
    for (int rank = -1; rank < 8; rank++) {
        mo_dnn_destroy(gc); // the plans go: the next one is built for this rank
        gc->conv_force_rank = rank;
        gc->conv_last_engine = -1;
        const long c0 = gc->conv_dgrad_add_chunked;
        // (a rank past the kept beta-1 candidates, or no beta-1 engine at all, is MO_ERR_UNSUPPORTED inside
        // the op, which then runs the chunks; their beta-0 plans take the forced rank too, so a rank past
        // theirs ends the op with MO_ERR_UNSUPPORTED "rank r asked, n kept": the end of the ranks. Any other
        // error is a failure.)
        int ok = 1, past = 0;
        for (int run = 0; run < 2 && ok; run++) {
            ok &= CHECK_OK(mo_memcpy_h2d(gc, dd, d0, nx * e));
            const mo_status rc = mo_conv_backward_data_add(gc, dt, dd, ddy, dw, &s);
            if (rc == MO_ERR_UNSUPPORTED && rank >= 0 && strstr(mo_errmsg(), "asked,") != NULL) {
                printf("  beta 1: no more candidates kept (%s)\n", mo_errmsg());
                mo_clear_error();
                past = 1;
                break;
            }
            ok &= CHECK_OK(rc);
            if (ok) ok &= CHECK_OK(mo_memcpy_d2h(gc, run ? got2 : got, dd, nx * e));
        }
        if (!ok || past) break;
        if (gc->conv_dgrad_add_chunked != c0) { // no candidate of this rank: the chunks ran
            printf("  beta 1: %s (the chunks ran)\n", rank < 0 ? "no engine" : "no more candidates kept");
            CHECK_MSG(rank >= 0, "%s H %d C %d K %d s%d: no cuDNN beta-1 engine at all", mo_dtype_name(dt), H, C, K, st);
            break;
        }
        double worst;
        size_t at;
        const double rel = rel_err(dt, got, ref, nx, &worst, &at);
        const size_t px = at / C, ch = at % C;
        printf("  beta 1 %-8s engine %3ld: rel err %.2e against the chunks, max |diff| %.3g at image %zu pixel %zu "
               "channel %zu%s\n",
               rank < 0 ? "default" : "rank", gc->conv_last_engine, rel, worst, px / ((size_t)H * H),
               px % ((size_t)H * H), ch, memcmp(got, got2, nx * e) ? ", NOT DETERMINISTIC" : "");
        CHECK_MSG(gc->conv_last_engine != 78, "%s H %d C %d K %d s%d: engine 78 ran a 16-bit beta-1 pass (refused: "
                  "conv_cuda.c BETA1_16_BAD)", mo_dtype_name(dt), H, C, K, st);
        CHECK_MSG(rel <= tol, "%s H %d C %d K %d s%d: beta-1 engine %ld (rank %d): rel err %.3e > %.0e",
                  mo_dtype_name(dt), H, C, K, st, gc->conv_last_engine, rank, rel, tol);
        CHECK_MSG(memcmp(got, got2, nx * e) == 0, "%s H %d C %d K %d s%d: engine %ld: two runs differ",
                  mo_dtype_name(dt), H, C, K, st, gc->conv_last_engine);
    }
    gc->conv_force_rank = -1;
    mo_dnn_destroy(gc);
    CHECK_OK(mo_free(ga, dw)); CHECK_OK(mo_free(ga, ddy)); CHECK_OK(mo_free(ga, dd));
    free(w), free(dy), free(d0), free(ref), free(got), free(got2);
}
#endif

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_require_gpu();
    if (test_reduced("batch-128 convolutions")) return test_finish();
    const uint64_t seed = test_seed_from_time();
    test_rng_seed(&rng, seed);
    printf("seed %llu\n", (unsigned long long)seed);
    CHECK_OK(mo_allocator_create(&ga, MO_ALLOC_CACHING, MO_BACKEND_CUDA, 0, NULL));
    CHECK_OK(mo_allocator_create(&ha, MO_ALLOC_CACHING, MO_BACKEND_CPU, 0, NULL));
    if (!ga || !ha) return test_finish();
    // the ResNet's 256 MiB workspace (models/resnet.c), the budget its stored engine choices are keyed by
    CHECK_OK(mo_ctx_create_ws(&gc, MO_BACKEND_CUDA, ga, (size_t)256 << 20));
    CHECK_OK(mo_ctx_create(&hc, MO_BACKEND_CPU, ha));
    if (!gc || !hc) return test_finish();
    // (H, C, K, stride): the step's eight adds, layer4 down to layer1 (conv_cuda.c's MEMOPT_CONV_LOG list)
    static const int shapes[8][4] = {{7, 2048, 512, 1},   {14, 1024, 2048, 2}, {14, 1024, 256, 1},
                                     {28, 512, 1024, 2},  {28, 512, 128, 1},   {56, 256, 512, 2},
                                     {56, 256, 64, 1},    {56, 64, 256, 1}};
#ifdef MEMOPT_HAVE_CUDA
    const mo_dtype dts[2] = {MO_F16, MO_BF16};
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < 8; i++) one_shape(dts[d], shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3]);
#else
    (void)shapes;
#endif
    mo_ctx_destroy(gc);
    mo_ctx_destroy(hc);
    mo_allocator_destroy(ga);
    mo_allocator_destroy(ha);
    return test_finish();
}
