// CPU-backend checks of the ResNet ops (conv.h, batchnorm.h, pool.h):
//   - hand-computed small cases of every op;
//   - every backward against its forward by central finite differences of L = sum(out * G) (in double);
//     the convolutions also by the adjoint identities <conv(x, w), G> = <x, bwd_data(G, w)> = <w, bwd_filter(G, x)>;
//   - batch norm's running statistics (PyTorch's momentum, unbiased variance), left alone with run_mean NULL;
//     the fused ReLU's backward = the plain backward of the masked gradient; dgamma, dbeta, dw accumulate;
//   - fp16 / bf16 (ops_mixed.h's convention): every 16-bit output == round(fp32 reference on the same
//     exactly converted inputs), fp32 outputs bit-identical (16-bit dw: dw += round(g));
//   - the fused BN + residual + ReLU forms: the bits of their ops run apart, every dtype; so are the add over
//     res, the backward's din over in, and the normalize pass with the forward's statistics (a recompute's);
//   - the input gradient added to din (the ResNet's shortcut gradient): round(din + the fp32 gradient);
//   - bad shapes and dtypes refused; scratch given back; dry workspace peaks equal cpu peaks;
//   - the column matrix (im2col.c, the references of the kernels under the fp32 GEMM path): im2col and a
//     plain matmul give the direct convolution's forward and weight gradient bit for bit, col2im of
//     dout @ w its input gradient; col2im is im2col's adjoint; rows and images in pieces give the whole;
//   - MEMOPT_CONV_GEMM: unset / auto, all, 1x1, 0 set the context's mode, another value fails mo_ctx_create.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/batchnorm.h"
#include "kernels/conv.h"
#include "kernels/conv_table.h"
#include "kernels/ops_mixed.h"
#include "kernels/pool.h"
#include "kernels/resnet_ops_impl.h"
#include "strategies/alloc.h"
#include "tests/testlib.h"

static mo_allocator *ha;
static mo_ctx *hc;
static test_rng rng;

#include "tests/mixed_host.h" // hnew, fnew, hnew16, frand_dt, to_f32 (on rng)

static float *frand(size_t n, float lo, float hi) {
    float *f = fnew(n);
    test_fill_uniform(&rng, f, n, lo, hi);
    return f;
}
static float *fdup(const float *x, size_t n) { float *p = fnew(n); memcpy(p, x, n * sizeof(float)); return p; }
static double dot(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}
// ---------------------------------------------------------------------------------------------
static void test_conv_hand(void) {
    printf("conv: hand-computed\n");
    // 3x3 image 1..9, one channel, a 3x3 filter of ones, pad 1: each output is the sum of its neighbourhood
    float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w[9], out[9], want[9] = {12, 21, 16, 27, 45, 33, 24, 39, 28};
    for (int i = 0; i < 9; i++) w[i] = 1;
    mo_conv_shape s;
    mo_conv_shape_init(&s, 1, 3, 3, 1, 1, 3, 3, 1, 1);
    CHECK(s.P == 3 && s.Q == 3);
    CHECK_OK(mo_conv_forward(hc, MO_F32, out, x, w, &s));
    CHECK(memcmp(out, want, sizeof want) == 0);
    // stride 2: the corners of the above
    mo_conv_shape_init(&s, 1, 3, 3, 1, 1, 3, 3, 2, 1);
    CHECK(s.P == 2 && s.Q == 2);
    CHECK_OK(mo_conv_forward(hc, MO_F32, out, x, w, &s));
    CHECK(out[0] == 12 && out[1] == 16 && out[2] == 24 && out[3] == 28);
    // two channels, two filters, 1x1: out[k] = sum_c x[c] w[k][c]
    float x2[2] = {2, 3}, w2[4] = {1, 10, -1, 100}, o2[2];
    mo_conv_shape_init(&s, 1, 1, 1, 2, 2, 1, 1, 1, 0);
    CHECK_OK(mo_conv_forward(hc, MO_F32, o2, x2, w2, &s));
    CHECK(o2[0] == 32 && o2[1] == 298);
    // backward data of the 1x1: din[c] = sum_k dout[k] w[k][c]; filter: dw[k][c] += dout[k] x[c]
    float dy[2] = {1, 2}, dx[2], dw[4] = {1, 1, 1, 1};
    CHECK_OK(mo_conv_backward_data(hc, MO_F32, dx, dy, w2, &s));
    CHECK(dx[0] == -1 && dx[1] == 210);
    CHECK_OK(mo_conv_backward_filter(hc, MO_F32, dw, dy, x2, &s));
    CHECK(dw[0] == 3 && dw[1] == 4 && dw[2] == 5 && dw[3] == 7);
    // backward data of the 3x3 ones filter, stride 1 pad 1, dout one at the centre: din is all ones
    float dyc[9] = {0, 0, 0, 0, 1, 0, 0, 0, 0}, dxc[9];
    mo_conv_shape_init(&s, 1, 3, 3, 1, 1, 3, 3, 1, 1);
    CHECK_OK(mo_conv_backward_data(hc, MO_F32, dxc, dyc, w, &s));
    int ones = 1;
    for (int i = 0; i < 9; i++) ones &= dxc[i] == 1.0f;
    CHECK(ones);
}

// L(x, w) = sum out * G in double
static double conv_loss(const float *x, const float *w, const float *G, const mo_conv_shape *s, float *out) {
    CHECK_OK(mo_conv_forward(hc, MO_F32, out, x, w, s));
    return dot(out, G, (size_t)s->N * s->P * s->Q * s->K);
}

static void test_conv_grad(int N, int H, int W, int C, int K, int R, int S, int st, int pad) {
    mo_conv_shape s;
    mo_conv_shape_init(&s, N, H, W, C, K, R, S, st, pad);
    const size_t nx = (size_t)N * H * W * C, nw = (size_t)K * R * S * C, no = (size_t)N * s.P * s.Q * K;
    float *x = frand(nx, -1, 1), *w = frand(nw, -1, 1), *G = frand(no, -1, 1), *out = fnew(no);
    float *dx = fnew(nx), *dw0 = frand(nw, -1, 1), *dw = fdup(dw0, nw);
    CHECK_OK(mo_conv_backward_data(hc, MO_F32, dx, G, w, &s));
    CHECK_OK(mo_conv_backward_filter(hc, MO_F32, dw, G, x, &s));
    for (size_t i = 0; i < nw; i++) dw[i] -= dw0[i]; // the gradient itself (dw accumulated onto dw0)
    const double L = conv_loss(x, w, G, &s, out);
    const double a1 = dot(x, dx, nx), a2 = dot(w, dw, nw);
    CHECK_MSG(fabs(a1 - L) <= 1e-4 * fmax(1, fabs(L)) && fabs(a2 - L) <= 1e-4 * fmax(1, fabs(L)),
              "conv %dx%d s%d p%d: adjoint <x,dx> %.6f <w,dw> %.6f vs L %.6f", R, S, st, pad, a1, a2, L);
    // central differences at a sample of inputs and weights (L is linear in each: the difference is exact
    // up to fp32 rounding of the forward)
    const float eps = 0.25f;
    int bad = 0;
    for (int t = 0; t < 12; t++) {
        size_t i = test_rng_u64(&rng) % nx, j = test_rng_u64(&rng) % nw;
        float xi = x[i];
        x[i] = xi + eps;
        double lp = conv_loss(x, w, G, &s, out);
        x[i] = xi - eps;
        double lm = conv_loss(x, w, G, &s, out);
        x[i] = xi;
        double fd = (lp - lm) / (2 * eps);
        if (fabs(fd - dx[i]) > 1e-3 * fmax(1, fabs(fd))) bad++;
        float wj = w[j];
        w[j] = wj + eps;
        lp = conv_loss(x, w, G, &s, out);
        w[j] = wj - eps;
        lm = conv_loss(x, w, G, &s, out);
        w[j] = wj;
        fd = (lp - lm) / (2 * eps);
        if (fabs(fd - dw[j]) > 1e-3 * fmax(1, fabs(fd))) bad++;
    }
    CHECK_MSG(bad == 0, "conv N%d H%d W%d C%d K%d %dx%d s%d p%d: %d finite differences off", N, H, W, C, K, R, S, st,
              pad, bad);
    printf("  conv N%d %dx%dx%d K%d %dx%d s%d p%d (P %d Q %d): adjoint %.2e %.2e, fd %s\n", N, H, W, C, K, R, S, st,
           pad, s.P, s.Q, fabs(a1 - L), fabs(a2 - L), bad ? "OFF" : "ok");
    free(x); free(w); free(G); free(out); free(dx); free(dw0); free(dw);
}

// 16-bit: every dt output == round(fp32 output on the converted inputs); dw += round(g)
static void test_conv_mixed(mo_dtype dt, int N, int H, int W, int C, int K, int R, int st, int pad) {
    mo_conv_shape s;
    mo_conv_shape_init(&s, N, H, W, C, K, R, R, st, pad);
    const size_t nx = (size_t)N * H * W * C, nw = (size_t)K * R * R * C, no = (size_t)N * s.P * s.Q * K;
    uint16_t *x, *w, *g;
    float *xf = frand_dt(dt, nx, -1, 1, &x), *wf = frand_dt(dt, nw, -1, 1, &w), *gf = frand_dt(dt, no, -1, 1, &g);
    float *of = fnew(no), *dxf = fnew(nx), *dwf = calloc(nw, sizeof(float));
    uint16_t *o = hnew16(no), *dx = hnew16(nx), *want = hnew16(no > nx ? no : nx);
    float *dw0 = frand(nw, -1, 1), *dw = fdup(dw0, nw);
    CHECK_OK(mo_conv_forward(hc, MO_F32, of, xf, wf, &s));
    CHECK_OK(mo_conv_forward(hc, dt, o, x, w, &s));
    mo_convert_from_f32(dt, want, of, no);
    CHECK_MSG(memcmp(o, want, no * 2) == 0, "%s conv forward != round(fp32)", mo_dtype_name(dt));
    CHECK_OK(mo_conv_backward_data(hc, MO_F32, dxf, gf, wf, &s));
    CHECK_OK(mo_conv_backward_data(hc, dt, dx, g, w, &s));
    mo_convert_from_f32(dt, want, dxf, nx);
    CHECK_MSG(memcmp(dx, want, nx * 2) == 0, "%s conv backward data != round(fp32)", mo_dtype_name(dt));
    CHECK_OK(mo_conv_backward_filter(hc, MO_F32, dwf, gf, xf, &s));
    CHECK_OK(mo_conv_backward_filter(hc, dt, dw, g, x, &s));
    size_t bad = 0;
    for (size_t i = 0; i < nw; i++) {
        uint16_t h = dt == MO_F16 ? mo_f32_to_f16(dwf[i]) : mo_f32_to_bf16(dwf[i]);
        float r = dt == MO_F16 ? mo_f16_to_f32(h) : mo_bf16_to_f32(h);
        bad += dw[i] != dw0[i] + r;
    }
    CHECK_MSG(bad == 0, "%s conv backward filter: %zu of %zu dw != dw0 + round(g)", mo_dtype_name(dt), bad, nw);
    float *o32 = to_f32(dt, o, no);
    double rel = test_rel_error(o32, of, no);
    free(o32);
    printf("  %-5s conv %dx%d s%d: outputs == round(fp32) (forward rel %.1e from unrounded)\n", mo_dtype_name(dt), R,
           R, st, rel);
    free(x); free(w); free(g); free(xf); free(wf); free(gf); free(of); free(dxf); free(dwf); free(o); free(dx);
    free(want); free(dw0); free(dw);
}

// din += the input gradient (mo_conv_backward_data_add): din = round_dt(float(din) + the fp32 gradient),
// one rounding; in fp32 the bits of mo_conv_backward_data and a residual add
static void test_conv_add(mo_dtype dt, int N, int H, int W, int C, int K, int R, int st, int pad) {
    mo_conv_shape s;
    mo_conv_shape_init(&s, N, H, W, C, K, R, R, st, pad);
    const size_t nx = (size_t)N * H * W * C, nw = (size_t)K * R * R * C, no = (size_t)N * s.P * s.Q * K;
    const size_t e = mo_dtype_size(dt);
    uint16_t *w16 = NULL, *g16 = NULL, *d16 = NULL; // the 16-bit operands (fp32: the float arrays themselves)
    const int h = dt != MO_F32;
    float *wf = h ? frand_dt(dt, nw, -1, 1, &w16) : frand(nw, -1, 1);
    float *gf = h ? frand_dt(dt, no, -1, 1, &g16) : frand(no, -1, 1);
    float *d0f = h ? frand_dt(dt, nx, -1, 1, &d16) : frand(nx, -1, 1);
    const void *w = h ? (void *)w16 : wf, *g = h ? (void *)g16 : gf, *d0 = h ? (void *)d16 : d0f;
    float *dxf = fnew(nx);
    void *d = malloc(nx * e), *want = malloc(nx * e);
    CHECK_OK(mo_conv_backward_data(hc, MO_F32, dxf, gf, wf, &s));
    for (size_t i = 0; i < nx; i++) rn_st(dt, want, i, d0f[i] + dxf[i]);
    memcpy(d, d0, nx * e);
    CHECK_OK(mo_conv_backward_data_add(hc, dt, d, g, w, &s));
    CHECK_MSG(memcmp(d, want, nx * e) == 0, "%s conv backward data add %dx%d s%d != round(din + fp32 gradient)",
              mo_dtype_name(dt), R, R, st);
    printf("  %-5s conv backward data add %dx%d s%d: == round(din + fp32 gradient)\n", mo_dtype_name(dt), R, R, st);
    free(w16); free(g16); free(d16);
    free(wf); free(gf); free(d0f); free(dxf); free(d); free(want);
}

// ---------------------------------------------------------------------------------------------
static void test_bn_hand(void) {
    printf("batchnorm: hand-computed\n");
    float x[4] = {1, 2, 3, 4}, g = 2, b = 0.5f, out[4], mean, rstd, rm = 0, rv = 1;
    CHECK_OK(mo_batchnorm_forward(hc, MO_F32, out, &mean, &rstd, &rm, &rv, x, &g, &b, 4, 1, 0.1f, 0));
    const double r = 1 / sqrt(1.25 + 1e-5);
    CHECK(mean == 2.5f && fabs(rstd - r) < 1e-6);
    for (int i = 0; i < 4; i++) CHECK(fabs(out[i] - (2 * (x[i] - 2.5) * r + 0.5)) < 1e-5);
    CHECK(fabs(rm - 0.25f) < 1e-7);
    CHECK(fabs(rv - (0.9 + 0.1 * 5.0 / 3.0)) < 1e-6); // unbiased variance 5/3
    // ReLU fused: the two negative outputs become 0; NULL running statistics are not touched
    float out2[4];
    CHECK_OK(mo_batchnorm_forward(hc, MO_F32, out2, &mean, &rstd, NULL, NULL, x, &g, &b, 4, 1, 0.1f, 1));
    CHECK(out2[0] == 0 && out2[1] == 0 && out2[2] == out[2] && out2[3] == out[3]);
    // backward of a constant dout: dx = 0, dbeta += 4, dgamma += sum xhat = 0
    float dy[4] = {1, 1, 1, 1}, dx[4], dg = 1, db = 1;
    CHECK_OK(mo_batchnorm_backward(hc, MO_F32, dx, &dg, &db, dy, x, out, &g, &mean, &rstd, 4, 1, 0));
    CHECK(db == 5 && fabs(dg - 1) < 1e-6);
    for (int i = 0; i < 4; i++) CHECK(fabs(dx[i]) < 1e-6);
    float bad_rm = 0;
    CHECK(mo_batchnorm_forward(hc, MO_F32, out, &mean, &rstd, &bad_rm, NULL, x, &g, &b, 4, 1, 0.1f, 0) ==
          MO_ERR_INVALID);
}

static double bn_loss(const float *x, const float *gm, const float *bt, const float *G, int M, int C, int relu,
                      float *out, float *mean, float *rstd) {
    CHECK_OK(mo_batchnorm_forward(hc, MO_F32, out, mean, rstd, NULL, NULL, x, gm, bt, M, C, 0.1f, relu));
    return dot(out, G, (size_t)M * C);
}

static void test_bn_grad(int M, int C) {
    const size_t n = (size_t)M * C;
    float *x = frand(n, -2, 3), *gm = frand(C, 0.5f, 1.5f), *bt = frand(C, -0.5f, 0.5f), *G = frand(n, -1, 1);
    float *out = fnew(n), *mean = fnew(C), *rstd = fnew(C), *dx = fnew(n), *dg = fnew(C), *db = fnew(C);
    memset(dg, 0, C * sizeof(float));
    memset(db, 0, C * sizeof(float));
    bn_loss(x, gm, bt, G, M, C, 0, out, mean, rstd);
    CHECK_OK(mo_batchnorm_backward(hc, MO_F32, dx, dg, db, G, x, out, gm, mean, rstd, M, C, 0));
    const float eps = 1e-2f;
    float *o2 = fnew(n), *m2 = fnew(C), *r2 = fnew(C);
    int bad = 0;
    for (int t = 0; t < 16; t++) {
        size_t i = test_rng_u64(&rng) % n;
        int ch = (int)(test_rng_u64(&rng) % C);
        float v = x[i];
        x[i] = v + eps;
        double lp = bn_loss(x, gm, bt, G, M, C, 0, o2, m2, r2);
        x[i] = v - eps;
        double lm = bn_loss(x, gm, bt, G, M, C, 0, o2, m2, r2);
        x[i] = v;
        double fd = (lp - lm) / (2 * eps);
        if (fabs(fd - dx[i]) > 2e-3 * fmax(1, fabs(fd))) bad++;
        v = gm[ch];
        gm[ch] = v + eps;
        lp = bn_loss(x, gm, bt, G, M, C, 0, o2, m2, r2);
        gm[ch] = v - eps;
        lm = bn_loss(x, gm, bt, G, M, C, 0, o2, m2, r2);
        gm[ch] = v;
        fd = (lp - lm) / (2 * eps);
        if (fabs(fd - dg[ch]) > 2e-3 * fmax(1, fabs(fd))) bad++;
        v = bt[ch];
        bt[ch] = v + eps;
        lp = bn_loss(x, gm, bt, G, M, C, 0, o2, m2, r2);
        bt[ch] = v - eps;
        lm = bn_loss(x, gm, bt, G, M, C, 0, o2, m2, r2);
        bt[ch] = v;
        fd = (lp - lm) / (2 * eps);
        if (fabs(fd - db[ch]) > 2e-3 * fmax(1, fabs(fd))) bad++;
    }
    CHECK_MSG(bad == 0, "batchnorm M %d C %d: %d finite differences off", M, C, bad);
    // the mean of a normalized channel is beta, its biased variance gamma^2 (1 - eps rstd^2)
    double worst = 0;
    for (int ch = 0; ch < C; ch++) {
        double s = 0;
        for (int i = 0; i < M; i++) s += out[(size_t)i * C + ch];
        worst = fmax(worst, fabs(s / M - bt[ch]));
    }
    CHECK_MSG(worst < 1e-5, "batchnorm: normalized channel mean off beta by %.2e", worst);
    // ReLU fused: its backward equals the plain backward of dout masked where out <= 0
    float *outr = fnew(n), *dxr = fnew(n), *dgr = fnew(C), *dbr = fnew(C), *Gm = fnew(n), *dxm = fnew(n);
    float *dgm = fnew(C), *dbm = fnew(C);
    for (int ch = 0; ch < C; ch++) dgr[ch] = dgm[ch] = 0.5f, dbr[ch] = dbm[ch] = -0.25f;
    bn_loss(x, gm, bt, G, M, C, 1, outr, mean, rstd);
    int relu_ok = 1;
    for (size_t i = 0; i < n; i++) {
        relu_ok &= outr[i] == (out[i] > 0 ? out[i] : 0);
        Gm[i] = outr[i] > 0 ? G[i] : 0;
    }
    CHECK_MSG(relu_ok, "batchnorm relu: out != max(0, plain out)");
    CHECK_OK(mo_batchnorm_backward(hc, MO_F32, dxr, dgr, dbr, G, x, outr, gm, mean, rstd, M, C, 1));
    CHECK_OK(mo_batchnorm_backward(hc, MO_F32, dxm, dgm, dbm, Gm, x, outr, gm, mean, rstd, M, C, 0));
    CHECK(memcmp(dxr, dxm, n * 4) == 0 && memcmp(dgr, dgm, C * 4) == 0 && memcmp(dbr, dbm, C * 4) == 0);
    // the remask: the mask recomputed from x, gamma and beta gives the same bits, and G is left as it was
    float *dxq = fnew(n), *dgq = fnew(C), *dbq = fnew(C), *G0 = fdup(G, n);
    for (int ch = 0; ch < C; ch++) dgq[ch] = 0.5f, dbq[ch] = -0.25f;
    CHECK_OK(mo_batchnorm_relu_backward_remask(hc, MO_F32, dxq, dgq, dbq, G, x, gm, bt, mean, rstd, M, C));
    CHECK_MSG(memcmp(dxq, dxm, n * 4) == 0 && memcmp(dgq, dgm, C * 4) == 0 && memcmp(dbq, dbm, C * 4) == 0,
              "batchnorm relu remask backward != masked plain backward");
    CHECK_MSG(memcmp(G, G0, n * 4) == 0, "batchnorm relu remask backward wrote its dout");
    free(dxq); free(dgq); free(dbq); free(G0);
    printf("  batchnorm M %d C %d: fd %s, relu backward (mask, remask) == masked plain backward\n", M, C, bad ? "OFF" : "ok");
    free(x); free(gm); free(bt); free(G); free(out); free(mean); free(rstd); free(dx); free(dg); free(db);
    free(o2); free(m2); free(r2); free(outr); free(dxr); free(dgr); free(dbr); free(Gm); free(dxm); free(dgm);
    free(dbm);
}

static void test_bn_mixed(mo_dtype dt, int M, int C, int relu) {
    const size_t n = (size_t)M * C;
    uint16_t *x, *dy;
    float *xf = frand_dt(dt, n, -2, 3, &x), *dyf = frand_dt(dt, n, -1, 1, &dy);
    float *gm = frand(C, 0.5f, 1.5f), *bt = frand(C, -0.5f, 0.5f);
    float *of = fnew(n), *mf = fnew(C), *rf = fnew(C), *m = fnew(C), *r = fnew(C);
    float *rmf = frand(C, -1, 1), *rvf = frand(C, 0.5f, 2), *rm = fdup(rmf, C), *rv = fdup(rvf, C);
    uint16_t *o = hnew16(n), *want = hnew16(n), *dx = hnew16(n);
    CHECK_OK(mo_batchnorm_forward(hc, MO_F32, of, mf, rf, rmf, rvf, xf, gm, bt, M, C, 0.1f, relu));
    CHECK_OK(mo_batchnorm_forward(hc, dt, o, m, r, rm, rv, x, gm, bt, M, C, 0.1f, relu));
    mo_convert_from_f32(dt, want, of, n);
    CHECK_MSG(memcmp(o, want, n * 2) == 0, "%s batchnorm forward != round(fp32)", mo_dtype_name(dt));
    CHECK(memcmp(m, mf, C * 4) == 0 && memcmp(r, rf, C * 4) == 0 && memcmp(rm, rmf, C * 4) == 0 &&
          memcmp(rv, rvf, C * 4) == 0);
    // backward: the fp32 reference takes the 16-bit forward's output (the mask it sees)
    float *o16f = to_f32(dt, o, n), *dxf = fnew(n), *dgf = frand(C, -1, 1), *dbf = frand(C, -1, 1);
    float *dg = fdup(dgf, C), *db = fdup(dbf, C);
    CHECK_OK(mo_batchnorm_backward(hc, MO_F32, dxf, dgf, dbf, dyf, xf, o16f, gm, mf, rf, M, C, relu));
    CHECK_OK(mo_batchnorm_backward(hc, dt, dx, dg, db, dy, x, o, gm, m, r, M, C, relu));
    mo_convert_from_f32(dt, want, dxf, n);
    CHECK_MSG(memcmp(dx, want, n * 2) == 0, "%s batchnorm backward != round(fp32)", mo_dtype_name(dt));
    CHECK(memcmp(dg, dgf, C * 4) == 0 && memcmp(db, dbf, C * 4) == 0);
    printf("  %-5s batchnorm M %d C %d relu %d: == round(fp32), statistics bit-identical\n", mo_dtype_name(dt), M, C,
           relu);
    free(x); free(dy); free(xf); free(dyf); free(gm); free(bt); free(of); free(mf); free(rf); free(m); free(r);
    free(rmf); free(rvf); free(rm); free(rv); free(o); free(want); free(dx); free(o16f); free(dxf); free(dgf);
    free(dbf); free(dg); free(db);
}

// The fused forms (batchnorm.h) against their ops run apart, bit for bit, in dtype dt: BN (relu 0), the
// residual add, the ReLU; the ReLU's backward in place, then the BN backward (relu 0). M*C*e bytes each.
static void test_bn_fused(mo_dtype dt, int M, int C) {
    const size_t n = (size_t)M * C, e = mo_dtype_size(dt);
    void *x = hnew(n * e), *res = hnew(n * e), *dy = hnew(n * e);
    float *t = frand(n, -2, 3);
    mo_convert_from_f32(dt, x, t, n);
    test_fill_uniform(&rng, t, n, -1.5f, 1);
    mo_convert_from_f32(dt, res, t, n);
    test_fill_uniform(&rng, t, n, -1, 1);
    mo_convert_from_f32(dt, dy, t, n);
    float *gm = frand(C, 0.5f, 1.5f), *bt = frand(C, -0.5f, 0.5f);
    void *y[2] = {hnew(n * e), hnew(n * e)}, *dx[2] = {hnew(n * e), hnew(n * e)}, *g[2] = {hnew(n * e), hnew(n * e)};
    float *st[2][6];
    for (int f = 0; f < 2; f++) {
        for (int j = 0; j < 6; j++) st[f][j] = fnew(C);
        for (int i = 0; i < C; i++) st[f][2][i] = 0.5f, st[f][3][i] = 1.0f, st[f][4][i] = st[f][5][i] = 0.0f;
        memcpy(g[f], dy, n * e);
    }
    CHECK_OK(mo_batchnorm_add_relu_forward(hc, dt, y[0], st[0][0], st[0][1], st[0][2], st[0][3], x, gm, bt, res, M, C,
                                           0.1f));
    CHECK_OK(mo_batchnorm_forward(hc, dt, y[1], st[1][0], st[1][1], st[1][2], st[1][3], x, gm, bt, M, C, 0.1f, 0));
    CHECK_OK(mo_residual_forward_mixed(hc, dt, y[1], y[1], res, n));
    CHECK_OK(mo_relu_forward(hc, dt, y[1], y[1], n));
    CHECK_OK(mo_batchnorm_relu_backward_inplace(hc, dt, dx[0], st[0][4], st[0][5], g[0], x, y[0], gm, st[0][0],
                                                st[0][1], M, C));
    CHECK_OK(mo_relu_backward(hc, dt, g[1], g[1], y[1], n));
    CHECK_OK(mo_batchnorm_backward(hc, dt, dx[1], st[1][4], st[1][5], g[1], x, NULL, gm, st[1][0], st[1][1], M, C, 0));
    CHECK_MSG(memcmp(y[0], y[1], n * e) == 0, "%s fused forward: not the bits of the ops apart", mo_dtype_name(dt));
    CHECK_MSG(memcmp(g[0], g[1], n * e) == 0, "%s fused backward: dout not masked as apart", mo_dtype_name(dt));
    CHECK_MSG(memcmp(dx[0], dx[1], n * e) == 0, "%s fused backward: din not the bits of the ops apart", mo_dtype_name(dt));
    for (int j = 0; j < 6; j++)
        CHECK_MSG(memcmp(st[0][j], st[1][j], C * 4) == 0, "%s fused: statistic %d differs", mo_dtype_name(dt), j);
    // In place and with kept statistics (what the model runs: batchnorm.h), the same bits again: the add
    // over res; normalize with the forward's mean, rstd (with res, over res, and plain with and without
    // ReLU); the BN backward's din over its in.
    void *w = hnew(n * e), *v2 = hnew(n * e);
    float *s2[6];
    for (int j = 0; j < 6; j++) s2[j] = fnew(C);
    for (int i = 0; i < C; i++) s2[2][i] = 0.5f, s2[3][i] = 1.0f, s2[4][i] = s2[5][i] = 0.0f;
    memcpy(w, res, n * e);
    CHECK_OK(mo_batchnorm_add_relu_forward(hc, dt, w, s2[0], s2[1], s2[2], s2[3], x, gm, bt, w, M, C, 0.1f));
    CHECK_MSG(memcmp(w, y[0], n * e) == 0, "%s fused forward over res: not the bits of out apart", mo_dtype_name(dt));
    for (int j = 0; j < 4; j++) CHECK_MSG(memcmp(s2[j], st[0][j], C * 4) == 0, "%s fused over res: statistic %d differs", mo_dtype_name(dt), j);
    CHECK_OK(mo_batchnorm_normalize(hc, dt, v2, x, gm, bt, st[0][0], st[0][1], res, M, C, 1));
    CHECK_MSG(memcmp(v2, y[0], n * e) == 0, "%s normalize + res + relu: not the fused forward's bits", mo_dtype_name(dt));
    memcpy(w, res, n * e);
    CHECK_OK(mo_batchnorm_normalize(hc, dt, w, x, gm, bt, st[0][0], st[0][1], w, M, C, 1));
    CHECK_MSG(memcmp(w, y[0], n * e) == 0, "%s normalize over res: not the fused forward's bits", mo_dtype_name(dt));
    for (int relu = 0; relu < 2; relu++) {
        CHECK_OK(mo_batchnorm_forward(hc, dt, w, s2[0], s2[1], NULL, NULL, x, gm, bt, M, C, 0.1f, relu));
        CHECK_OK(mo_batchnorm_normalize(hc, dt, v2, x, gm, bt, s2[0], s2[1], NULL, M, C, relu));
        CHECK_MSG(memcmp(v2, w, n * e) == 0, "%s normalize relu %d: not the forward's bits", mo_dtype_name(dt), relu);
    }
    memcpy(w, x, n * e), memcpy(v2, dy, n * e);
    for (int i = 0; i < C; i++) s2[4][i] = s2[5][i] = 0.0f;
    CHECK_OK(mo_batchnorm_relu_backward_inplace(hc, dt, w, s2[4], s2[5], v2, w, y[0], gm, st[0][0], st[0][1], M, C));
    CHECK_MSG(memcmp(w, dx[0], n * e) == 0 && memcmp(s2[4], st[0][4], C * 4) == 0 && memcmp(s2[5], st[0][5], C * 4) == 0,
              "%s fused backward with din over in: not the bits apart", mo_dtype_name(dt));
    memcpy(w, x, n * e);
    CHECK_OK(mo_batchnorm_backward(hc, dt, w, s2[4], s2[5], g[1], w, NULL, gm, st[1][0], st[1][1], M, C, 0));
    CHECK_MSG(memcmp(w, dx[1], n * e) == 0, "%s backward with din over in: not the bits apart", mo_dtype_name(dt));
    free(w); free(v2);
    for (int j = 0; j < 6; j++) free(s2[j]);
    size_t zeros = 0, masked = 0;
    for (size_t i = 0; i < n; i++) {
        float v = dt == MO_F32 ? ((float *)y[0])[i] : 0.0f;
        if (dt != MO_F32) mo_convert_to_f32(dt, &v, (const char *)y[0] + i * e, 1);
        zeros += v == 0.0f;
        masked += memcmp((const char *)g[0] + i * e, (const char *)dy + i * e, e) != 0;
    }
    CHECK_MSG(zeros > 0 && zeros < n && masked > 0, "%s fused: the ReLU did nothing (%zu zeros, %zu masked of %zu)",
              mo_dtype_name(dt), zeros, masked, n);
    printf("  %-5s batchnorm + residual + relu fused, in place, normalize with kept statistics, M %d C %d: the bits of the "
           "ops apart (%zu of %zu zeroed)\n",
           mo_dtype_name(dt), M, C, zeros, n);
    free(x); free(res); free(dy); free(t); free(gm); free(bt);
    for (int f = 0; f < 2; f++) {
        free(y[f]), free(dx[f]), free(g[f]);
        for (int j = 0; j < 6; j++) free(st[f][j]);
    }
}

// ---------------------------------------------------------------------------------------------
static void test_pool_hand(void) {
    printf("pools and relu: hand-computed\n");
    // 4x4 image 0..15, window 3, stride 2, pad 1 (ResNet's stem pool): P = Q = 2
    float x[16], out[4], dy[4] = {1, 2, 3, 4}, dx[16];
    for (int i = 0; i < 16; i++) x[i] = (float)i;
    CHECK(mo_pool_out_dim(4, 3, 2, 1) == 2 && mo_pool_out_dim(112, 3, 2, 1) == 56);
    CHECK_OK(mo_maxpool_forward(hc, MO_F32, out, x, 1, 4, 4, 1, 3, 2, 1));
    CHECK(out[0] == 5 && out[1] == 7 && out[2] == 13 && out[3] == 15);
    CHECK_OK(mo_maxpool_backward(hc, MO_F32, dx, dy, x, out, 1, 4, 4, 1, 3, 2, 1));
    float want[16] = {0};
    want[5] = 1, want[7] = 2, want[13] = 3, want[15] = 4;
    CHECK(memcmp(dx, want, sizeof want) == 0);
    // ties: a constant image sends each window's gradient to its first position; overlaps sum
    for (int i = 0; i < 16; i++) x[i] = 1;
    CHECK_OK(mo_maxpool_forward(hc, MO_F32, out, x, 1, 4, 4, 1, 3, 2, 1));
    CHECK_OK(mo_maxpool_backward(hc, MO_F32, dx, dy, x, out, 1, 4, 4, 1, 3, 2, 1));
    // windows start at (-1,-1), (-1,1), (1,-1), (1,1): first inside positions (0,0), (0,1), (1,0), (1,1)
    memset(want, 0, sizeof want);
    want[0] = 1, want[1] = 2, want[4] = 3, want[5] = 4;
    CHECK(memcmp(dx, want, sizeof want) == 0);
    // global average: N 1, HW 4, C 2
    float a[8] = {1, 10, 2, 20, 3, 30, 6, 40}, ao[2], ad[8], ag[2] = {4, 8};
    CHECK_OK(mo_avgpool_forward(hc, MO_F32, ao, a, 1, 4, 2));
    CHECK(ao[0] == 3 && ao[1] == 25);
    CHECK_OK(mo_avgpool_backward(hc, MO_F32, ad, ag, 1, 4, 2));
    int ok = 1;
    for (int i = 0; i < 4; i++) ok &= ad[2 * i] == 1 && ad[2 * i + 1] == 2;
    CHECK(ok);
    // relu forward (out of place, then in place) and backward, in place
    float ri[4] = {-1, 0, 2, -0.5f}, rf[4];
    CHECK_OK(mo_relu_forward(hc, MO_F32, rf, ri, 4));
    CHECK(rf[0] == 0 && rf[1] == 0 && rf[2] == 2 && rf[3] == 0);
    CHECK_OK(mo_relu_forward(hc, MO_F32, ri, ri, 4));
    CHECK(memcmp(ri, rf, sizeof rf) == 0);
    float rn[2] = {NAN, -INFINITY}, rno[2];
    CHECK_OK(mo_relu_forward(hc, MO_F32, rno, rn, 2)); // NaN kept, as torch.relu
    CHECK(isnan(rno[0]) && rno[1] == 0);
    float ro[4] = {-1, 0, 2, 3}, rd[4] = {5, 6, 7, 8};
    CHECK_OK(mo_relu_backward(hc, MO_F32, rd, rd, ro, 4));
    CHECK(rd[0] == 0 && rd[1] == 0 && rd[2] == 7 && rd[3] == 8);
}

static double pool_loss(const float *x, const float *G, int N, int H, int W, int C, int R, int st, int pad, float *out) {
    CHECK_OK(mo_maxpool_forward(hc, MO_F32, out, x, N, H, W, C, R, st, pad));
    const int P = mo_pool_out_dim(H, R, st, pad), Q = mo_pool_out_dim(W, R, st, pad);
    return dot(out, G, (size_t)N * P * Q * C);
}

static void test_pool_grad(int N, int H, int W, int C, int R, int st, int pad) {
    const size_t nx = (size_t)N * H * W * C;
    const int P = mo_pool_out_dim(H, R, st, pad), Q = mo_pool_out_dim(W, R, st, pad);
    const size_t no = (size_t)N * P * Q * C;
    // distinct values 0.01 apart (a shuffled ramp), so a step of 1e-3 never changes a window's argmax
    float *x = fnew(nx), *G = frand(no, -1, 1), *out = fnew(no), *dx = fnew(nx);
    for (size_t i = 0; i < nx; i++) x[i] = 0.01f * (float)i - 0.005f * (float)nx;
    for (size_t i = nx - 1; i > 0; i--) {
        size_t j = test_rng_u64(&rng) % (i + 1);
        float t = x[i]; x[i] = x[j]; x[j] = t;
    }
    pool_loss(x, G, N, H, W, C, R, st, pad, out);
    CHECK_OK(mo_maxpool_backward(hc, MO_F32, dx, G, x, out, N, H, W, C, R, st, pad));
    const float eps = 1e-3f;
    float *o2 = fnew(no);
    int bad = 0;
    for (size_t i = 0; i < nx; i++) {
        float v = x[i];
        x[i] = v + eps;
        double lp = pool_loss(x, G, N, H, W, C, R, st, pad, o2);
        x[i] = v - eps;
        double lm = pool_loss(x, G, N, H, W, C, R, st, pad, o2);
        x[i] = v;
        double fd = (lp - lm) / (2 * eps);
        if (fabs(fd - dx[i]) > 1e-2 * fmax(1, fabs(fd))) bad++;
    }
    CHECK_MSG(bad == 0, "maxpool %dx%d s%d p%d: %d of %zu finite differences off", R, R, st, pad, bad, nx);
    // average pool: dL/dx = G / HW by the same differences
    float *ao = fnew((size_t)N * C), *ag = frand((size_t)N * C, -1, 1), *ad = fnew(nx);
    CHECK_OK(mo_avgpool_backward(hc, MO_F32, ad, ag, N, H * W, C));
    int abad = 0;
    for (int t = 0; t < 8; t++) {
        size_t i = test_rng_u64(&rng) % nx;
        float v = x[i];
        x[i] = v + 0.5f;
        CHECK_OK(mo_avgpool_forward(hc, MO_F32, ao, x, N, H * W, C));
        double lp = dot(ao, ag, (size_t)N * C);
        x[i] = v - 0.5f;
        CHECK_OK(mo_avgpool_forward(hc, MO_F32, ao, x, N, H * W, C));
        double lm = dot(ao, ag, (size_t)N * C);
        x[i] = v;
        if (fabs((lp - lm) - ad[i]) > 1e-4 * fmax(1, fabs(ad[i])) * H * W) abad++;
    }
    CHECK_MSG(abad == 0, "avgpool: %d finite differences off", abad);
    printf("  maxpool N%d %dx%dx%d %dx%d s%d p%d: fd %s; avgpool fd %s\n", N, H, W, C, R, R, st, pad,
           bad ? "OFF" : "ok", abad ? "OFF" : "ok");
    free(x); free(G); free(out); free(dx); free(o2); free(ao); free(ag); free(ad);
}

static void test_pool_mixed(mo_dtype dt) {
    enum { N = 2, H = 9, W = 7, C = 5, R = 3, ST = 2, PAD = 1 };
    const int P = mo_pool_out_dim(H, R, ST, PAD), Q = mo_pool_out_dim(W, R, ST, PAD);
    const size_t nx = (size_t)N * H * W * C, no = (size_t)N * P * Q * C;
    uint16_t *x, *g, *o = hnew16(no), *dx = hnew16(nx), *want = hnew16(nx);
    float *xf = frand_dt(dt, nx, -1, 1, &x), *gf = frand_dt(dt, no, -1, 1, &g), *of = fnew(no), *dxf = fnew(nx);
    CHECK_OK(mo_maxpool_forward(hc, MO_F32, of, xf, N, H, W, C, R, ST, PAD));
    CHECK_OK(mo_maxpool_forward(hc, dt, o, x, N, H, W, C, R, ST, PAD));
    mo_convert_from_f32(dt, want, of, no);
    CHECK_MSG(memcmp(o, want, no * 2) == 0, "%s maxpool forward != fp32", mo_dtype_name(dt));
    CHECK_OK(mo_maxpool_backward(hc, MO_F32, dxf, gf, xf, of, N, H, W, C, R, ST, PAD));
    CHECK_OK(mo_maxpool_backward(hc, dt, dx, g, x, o, N, H, W, C, R, ST, PAD));
    mo_convert_from_f32(dt, want, dxf, nx);
    CHECK_MSG(memcmp(dx, want, nx * 2) == 0, "%s maxpool backward != round(fp32)", mo_dtype_name(dt));
    uint16_t *ao = hnew16(N * C), *ad = hnew16(nx);
    float *aof = fnew(N * C), *adf = fnew(nx);
    CHECK_OK(mo_avgpool_forward(hc, MO_F32, aof, xf, N, H * W, C));
    CHECK_OK(mo_avgpool_forward(hc, dt, ao, x, N, H * W, C));
    mo_convert_from_f32(dt, want, aof, N * C);
    CHECK_MSG(memcmp(ao, want, N * C * 2) == 0, "%s avgpool forward != round(fp32)", mo_dtype_name(dt));
    CHECK_OK(mo_avgpool_backward(hc, MO_F32, adf, gf, N, H * W, C)); // gf's first N*C as dout
    CHECK_OK(mo_avgpool_backward(hc, dt, ad, g, N, H * W, C));
    mo_convert_from_f32(dt, want, adf, nx);
    CHECK_MSG(memcmp(ad, want, nx * 2) == 0, "%s avgpool backward != round(fp32)", mo_dtype_name(dt));
    uint16_t *rd = hnew16(no);
    float *rdf = fnew(no);
    CHECK_OK(mo_relu_backward(hc, MO_F32, rdf, gf, xf, no));
    CHECK_OK(mo_relu_backward(hc, dt, rd, g, x, no));
    mo_convert_from_f32(dt, want, rdf, no);
    CHECK_MSG(memcmp(rd, want, no * 2) == 0, "%s relu backward != fp32", mo_dtype_name(dt));
    CHECK_OK(mo_relu_forward(hc, MO_F32, rdf, gf, no));
    CHECK_OK(mo_relu_forward(hc, dt, rd, g, no));
    mo_convert_from_f32(dt, want, rdf, no);
    CHECK_MSG(memcmp(rd, want, no * 2) == 0, "%s relu forward != fp32", mo_dtype_name(dt));
    printf("  %-5s maxpool, avgpool, relu forward and backward: == round(fp32)\n", mo_dtype_name(dt));
    free(x); free(g); free(o); free(dx); free(want); free(xf); free(gf); free(of); free(dxf); free(ao); free(ad);
    free(aof); free(adf); free(rd); free(rdf);
}

// ---------------------------------------------------------------------------------------------
static void test_bad_input(void) {
    printf("bad input\n");
    float b[64] = {0};
    mo_conv_shape s;
    mo_conv_shape_init(&s, 1, 2, 2, 1, 1, 3, 3, 1, 0); // filter larger than the image
    CHECK(s.P == 0);
    CHECK(mo_conv_forward(hc, MO_F32, b, b, b, &s) == MO_ERR_INVALID);
    mo_conv_shape_init(&s, 1, 2, 2, 1, 1, 1, 1, 0, 0); // stride 0
    CHECK(mo_conv_backward_data(hc, MO_F32, b, b, b, &s) == MO_ERR_INVALID);
    mo_conv_shape_init(&s, 1, 2, 2, 1, 1, 1, 1, 1, 0);
    CHECK(mo_conv_backward_filter(hc, (mo_dtype)7, b, b, b, &s) == MO_ERR_INVALID);
    mo_conv_shape_init(&s, 1 << 20, 64, 64, 64, 1, 1, 1, 1, 0); // 2^38 input elements
    CHECK(mo_conv_forward(hc, MO_F32, b, b, b, &s) == MO_ERR_INVALID);
    CHECK(mo_batchnorm_forward(hc, MO_F32, b, b, b, NULL, NULL, b, b, b, 0, 4, 0.1f, 0) == MO_ERR_INVALID);
    CHECK(mo_batchnorm_backward(hc, MO_F16, b, b, b, b, b, NULL, b, b, b, 4, 4, 1) == MO_ERR_INVALID);
    CHECK(mo_maxpool_forward(hc, MO_F32, b, b, 1, 4, 4, 1, 3, 2, 2) == MO_ERR_INVALID); // pad > window / 2
    CHECK(mo_maxpool_backward(hc, MO_F32, b, b, b, b, 1, 2, 2, 1, 3, 1, 0) == MO_ERR_INVALID);
    CHECK(mo_avgpool_forward(hc, MO_BF16, b, b, 1, 0, 4) == MO_ERR_INVALID);
    CHECK(mo_relu_backward(hc, (mo_dtype)9, b, b, b, 4) == MO_ERR_INVALID);
    CHECK(mo_relu_forward(hc, (mo_dtype)9, b, b, 4) == MO_ERR_INVALID);
    // in place is the own kernels' and the cpu reference's; with MEMOPT_BN=cudnn (bn_cudnn) it is refused on
    // every backend, so the dry backend's allocations stay the cuda ones
    CHECK(mo_batchnorm_normalize(hc, MO_F32, b, b, b, b, b, b, NULL, 4, 0, 0) == MO_ERR_INVALID);
    hc->bn_cudnn = 1;
    CHECK(mo_batchnorm_add_relu_forward(hc, MO_F32, b, b, b, NULL, NULL, b, b, b, b, 4, 4, 0.1f) == MO_ERR_INVALID); // res == out
    CHECK(mo_batchnorm_backward(hc, MO_F32, b, b, b, b, b, NULL, b, b, b, 4, 4, 0) == MO_ERR_INVALID);            // din == in
    CHECK(mo_batchnorm_relu_backward_inplace(hc, MO_F32, b, b, b, b, b, b, b, b, b, 4, 4) == MO_ERR_INVALID);
    // the remask recomputes the own forward's output, not cuDNN's: refused even without aliasing
    float *r[6];
    for (int i = 0; i < 6; i++) r[i] = fnew(16);
    CHECK(mo_batchnorm_relu_backward_remask(hc, MO_F32, r[0], r[1], r[2], r[3], r[4], r[5], r[5], r[5], r[5], 4, 4) ==
          MO_ERR_INVALID);
    for (int i = 0; i < 6; i++) free(r[i]);
    hc->bn_cudnn = 0;
    CHECK(mo_batchnorm_add_relu_forward(hc, MO_F32, b, b, b, NULL, NULL, b, b, b, NULL, 4, 4, 0.1f) == MO_ERR_INVALID);
    CHECK(mo_batchnorm_relu_backward_inplace(hc, MO_F32, b, b, b, b, b, NULL, b, b, b, 4, 4) == MO_ERR_INVALID);
}

// Scratch from the allocator on every backend, given back; the dry workspace peak equals the cpu one.
static uint64_t run_scratch(mo_backend_kind be, int which, uint64_t *leak) {
    mo_allocator *a = NULL;
    mo_ctx *c = NULL;
    *leak = 1;
    CHECK_OK(mo_allocator_create(&a, MO_ALLOC_CACHING, be, 0, NULL));
    if (!a) return 0;
    CHECK_OK(mo_ctx_create(&c, be, a));
    if (!c) { mo_allocator_destroy(a); return 0; }
    enum { M = 2 * 6 * 6, C = 40 };
    void *f[5] = {0};
    for (int i = 0; i < 5; i++) CHECK_OK(mo_alloc(a, (size_t)M * C * sizeof(float), MO_CAT_ACTIVATION, &f[i]));
    if (be == MO_BACKEND_CPU)
        for (int i = 0; i < 5; i++) memset(f[i], 0x3c, (size_t)M * C * sizeof(float)); // 1.0 in fp16 pairs
    mo_conv_shape s;
    mo_conv_shape_init(&s, 2, 6, 6, C, 8, 3, 3, 1, 1);
    mo_alloc_stats s0, s1;
    mo_allocator_stats(a, &s0);
    mo_allocator_reset_peaks(a);
    if (which == 0) CHECK_OK(mo_conv_backward_filter(c, MO_F16, f[0], f[1], f[2], &s));
    else CHECK_OK(mo_batchnorm_backward(c, MO_BF16, f[0], f[1], f[2], f[3], f[4], f[4], f[1], f[2], f[3], M, C, 1));
    mo_allocator_stats(a, &s1);
    uint64_t rise = s1.peak_by_cat[MO_CAT_WORKSPACE] - s0.allocated_by_cat[MO_CAT_WORKSPACE];
    *leak = s1.allocated_bytes - s0.allocated_bytes;
    for (int i = 0; i < 5; i++) mo_free(a, f[i]);
    mo_ctx_destroy(c);
    mo_allocator_destroy(a);
    return rise;
}

static void test_scratch_contract(void) {
    printf("scratch contract\n");
    mo_conv_shape s;
    mo_conv_shape_init(&s, 2, 6, 6, 40, 8, 3, 3, 1, 1);
    size_t want[2] = {mo_conv_backward_filter_scratch_bytes(MO_F16, &s),
                      mo_batchnorm_backward_scratch_bytes(MO_BF16, 72, 40, 1)};
    const char *name[2] = {"conv_backward_filter f16", "batchnorm_backward bf16 relu"};
    for (int w = 0; w < 2; w++) {
        uint64_t lc = 1, ld = 1;
        uint64_t cpu = run_scratch(MO_BACKEND_CPU, w, &lc), dry = run_scratch(MO_BACKEND_DRY, w, &ld);
        CHECK_MSG(lc == 0 && ld == 0, "%s: scratch not given back", name[w]);
        CHECK_MSG(cpu >= want[w] && want[w] > 0, "%s: workspace peak rose %llu < scratch %zu", name[w],
                  (unsigned long long)cpu, want[w]);
        CHECK_MSG(cpu == dry, "%s: dry workspace peak %llu != cpu %llu", name[w], (unsigned long long)dry,
                  (unsigned long long)cpu);
    }
    CHECK_EQ_U64(mo_conv_backward_filter_scratch_bytes(MO_F32, &s), (size_t)8 * 3 * 3 * 40 * 4);
    CHECK_EQ_U64(mo_batchnorm_backward_scratch_bytes(MO_F32, 72, 40, 0), 0);
}

// ---------------------------------------------------------------------------------------------
// col2im(im2col(ones)) counts the output windows each input element lies in: by hand on a 3x3 image
static void test_im2col_hand(void) {
    printf("im2col: hand-computed\n");
    float x[9], col[4 * 9 * 9], cnt[9];
    for (int i = 0; i < 9; i++) x[i] = 1;
    const float want1[9] = {4, 6, 4, 6, 9, 6, 4, 6, 4}, want2[9] = {1, 2, 1, 2, 4, 2, 1, 2, 1};
    mo_conv_shape s;
    mo_conv_shape_init(&s, 1, 3, 3, 1, 1, 3, 3, 1, 1); // 3x3 pad 1: 9 windows
    conv_im2col_cpu(col, x, &s, 0, 9);
    CHECK(col[0] == 0 && col[4] == 1 && col[8] == 1 && col[9 * 4 + 4] == 1); // (0,0)'s corner is padding
    conv_col2im_cpu(cnt, col, &s, 1);
    CHECK(memcmp(cnt, want1, sizeof cnt) == 0);
    mo_conv_shape_init(&s, 1, 3, 3, 1, 1, 3, 3, 2, 1); // stride 2: 4 windows, overlapping on the middle row and column
    conv_im2col_cpu(col, x, &s, 0, 4);
    conv_col2im_cpu(cnt, col, &s, 1);
    CHECK(memcmp(cnt, want2, sizeof cnt) == 0);
}

static int bits_equal(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

// The column matrix of s against the direct convolution (conv.c):
//   out (M, K) = col @ w^T and dw (K, RSC) = dout^T @ col, plain loops in the column's order: the
//     reference's bits (the same products added in the same order; a padding column adds +-0 to a sum,
//     which changes nothing, where the reference skips it);
//   din = col2im(dout @ w): the reference's din up to fp32 rounding (the reference adds every (r, s, k)
//     product in one running sum, col2im each tap's sum over k);
//   <col, Y> = <x, col2im(Y)> (col2im is im2col's adjoint);
//   rows m0.. in two pieces cut inside an image, and images in two pieces, give the whole's bits (the
//     chunks conv_cuda.c runs them in).
static void test_im2col(int N, int H, int W, int C, int K, int R, int S, int st, int pad) {
    mo_conv_shape s;
    mo_conv_shape_init(&s, N, H, W, C, K, R, S, st, pad);
    const int M = N * s.P * s.Q, RSC = R * S * C;
    const size_t nx = (size_t)N * H * W * C, nw = (size_t)K * RSC, no = (size_t)M * K, ncol = (size_t)M * RSC;
    float *x = frand(nx, -1, 1), *w = frand(nw, -1, 1), *dy = frand(no, -1, 1);
    float *col = fnew(ncol), *col2 = fnew(ncol), *dcol = fnew(ncol);
    float *y = fnew(no), *y_ref = fnew(no), *g = fnew(nw), *g_ref = fnew(nw), *dx = fnew(nx), *dx2 = fnew(nx),
          *dx_ref = fnew(nx);
    conv_im2col_cpu(col, x, &s, 0, M);
    const int cut = M > 1 ? M / 2 + (s.P * s.Q > 2) : M; // inside an image when it has more than 2 positions
    conv_im2col_cpu(col2, x, &s, 0, cut);
    conv_im2col_cpu(col2 + (size_t)cut * RSC, x, &s, cut, M - cut);
    CHECK_MSG(bits_equal(col, col2, ncol), "im2col %dx%d s%d p%d: rows in two pieces differ", R, S, st, pad);
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) {
            float a = 0.0f;
            for (int j = 0; j < RSC; j++) a += col[(size_t)m * RSC + j] * w[(size_t)k * RSC + j];
            y[(size_t)m * K + k] = a;
        }
    for (int k = 0; k < K; k++)
        for (int j = 0; j < RSC; j++) {
            float a = 0.0f;
            for (int m = 0; m < M; m++) a += dy[(size_t)m * K + k] * col[(size_t)m * RSC + j];
            g[(size_t)k * RSC + j] = a;
        }
    for (int m = 0; m < M; m++)
        for (int j = 0; j < RSC; j++) {
            float a = 0.0f;
            for (int k = 0; k < K; k++) a += dy[(size_t)m * K + k] * w[(size_t)k * RSC + j];
            dcol[(size_t)m * RSC + j] = a;
        }
    conv_col2im_cpu(dx, dcol, &s, N);
    conv_col2im_cpu(dx2, dcol, &s, 1);
    if (N > 1) conv_col2im_cpu(dx2 + (size_t)H * W * C, dcol + (size_t)s.P * s.Q * RSC, &s, N - 1);
    CHECK_OK(mo_conv_forward(hc, MO_F32, y_ref, x, w, &s));
    memset(g_ref, 0, nw * sizeof(float)); // dw += g onto zeros: g itself
    CHECK_OK(mo_conv_backward_filter(hc, MO_F32, g_ref, dy, x, &s));
    CHECK_OK(mo_conv_backward_data(hc, MO_F32, dx_ref, dy, w, &s));
    CHECK_MSG(bits_equal(y, y_ref, no), "im2col %dx%d s%d p%d: col @ w^T is not the forward's bits", R, S, st, pad);
    CHECK_MSG(bits_equal(g, g_ref, nw), "im2col %dx%d s%d p%d: dout^T @ col is not the weight gradient's bits", R, S,
              st, pad);
    const double rel = test_rel_error(dx, dx_ref, nx);
    CHECK_MSG(rel <= 1e-5, "im2col %dx%d s%d p%d: col2im(dout @ w) rel err %.2e against the input gradient", R, S, st,
              pad, rel);
    CHECK_MSG(bits_equal(dx, dx2, nx), "col2im %dx%d s%d p%d: images in two pieces differ", R, S, st, pad);
    const double a = dot(col, dcol, ncol), b = dot(x, dx, nx);
    CHECK_MSG(fabs(a - b) <= 1e-5 * fmax(1, fabs(a)), "col2im %dx%d s%d p%d: <col, Y> %.6f != <x, col2im(Y)> %.6f", R,
              S, st, pad, a, b);
    printf("  im2col N%d %dx%dx%d K%d %dx%d s%d p%d (M %d, RSC %d): forward and weight gradient bits %s, input "
           "gradient rel err %.2e, adjoint %.2e\n", N, H, W, C, K, R, S, st, pad, M, RSC,
           bits_equal(y, y_ref, no) && bits_equal(g, g_ref, nw) ? "equal" : "DIFFER", rel, fabs(a - b));
    free(x); free(w); free(dy); free(col); free(col2); free(dcol); free(y); free(y_ref); free(g); free(g_ref);
    free(dx); free(dx2); free(dx_ref);
}

// MEMOPT_CONV_GEMM: unset, "" and auto give MO_CONV_GEMM_AUTO, all, 1x1 and 0 theirs; another value fails
// mo_ctx_create naming the variable (a row would record a setting that ran the default)
static void test_conv_gemm_knob(void) {
    printf("knob MEMOPT_CONV_GEMM\n");
    const char *vals[7] = {NULL, "", "all", "1x1", "0", "1", "auto"};
    const int want[7] = {MO_CONV_GEMM_AUTO, MO_CONV_GEMM_AUTO, MO_CONV_GEMM_ALL, MO_CONV_GEMM_1X1, MO_CONV_GEMM_NONE, -1,
                         MO_CONV_GEMM_AUTO};
    for (int i = 0; i < 7; i++) {
        if (vals[i]) setenv("MEMOPT_CONV_GEMM", vals[i], 1);
        else unsetenv("MEMOPT_CONV_GEMM");
        mo_allocator *a = NULL;
        mo_ctx *c = NULL;
        mo_status st = MO_ERR_INTERNAL;
        if (CHECK_OK(mo_allocator_create(&a, MO_ALLOC_CACHING, i % 2 ? MO_BACKEND_DRY : MO_BACKEND_CPU, 0, NULL)))
            st = mo_ctx_create(&c, i % 2 ? MO_BACKEND_DRY : MO_BACKEND_CPU, a);
        unsetenv("MEMOPT_CONV_GEMM");
        if (want[i] >= 0) {
            CHECK_OK(st);
            CHECK_MSG(c && c->conv_gemm == want[i], "MEMOPT_CONV_GEMM=%s: conv_gemm %d, want %d",
                      vals[i] ? vals[i] : "(unset)", c ? c->conv_gemm : -1, want[i]);
        } else {
            CHECK_MSG(st == MO_ERR_INVALID && c == NULL, "MEMOPT_CONV_GEMM=%s: status %s, want invalid", vals[i],
                      mo_status_name(st));
            CHECK_MSG(strstr(mo_errmsg(), "MEMOPT_CONV_GEMM=1: expected auto, all, 1x1 or 0") != NULL,
                      "the message names the variable and the values: %s", mo_errmsg());
            mo_clear_error();
        }
        mo_ctx_destroy(c);
        mo_allocator_destroy(a);
    }
}

// The stored engine choices: terminated, every line for a real device and version, keys compared field
// by field (one field changed is another key).
static void test_conv_table(void) {
    printf("conv table: %d stored choices\n", mo_conv_table_n);
    CHECK(mo_conv_table_n >= 0 && mo_conv_table[mo_conv_table_n].device == NULL);
    for (int i = 0; i < mo_conv_table_n; i++)
        CHECK(mo_conv_table[i].device && mo_conv_table[i].cudnn_version > 0 && mo_conv_table[i].key.ws_bytes > 0);
    mo_conv_key a = {MO_CONV_BWD_FILTER, MO_BF16, 0, 128, 56, 56, 64, 64, 3, 3, 1, 1, 256, 256, 256, 0, 32u << 20};
    mo_conv_key b = a;
    CHECK(mo_conv_key_eq(&a, &b));
    b.al_w = 128;
    CHECK(!mo_conv_key_eq(&a, &b));
    b = a, b.pad = 0;
    CHECK(!mo_conv_key_eq(&a, &b));
    b = a, b.tf32 = 1;
    CHECK(!mo_conv_key_eq(&a, &b));
}

// The flipped filter's forward that gives a stride-1 input gradient: layer1's 3x3 (pad 1) is a 3x3 forward
// of dout (N, 56, 56, K) to C channels with pad 1; a 3x3 without padding takes pad 2 (the output's size
// back); strided, R != S or pad > R-1 have none.
static void test_dgrad_forward_shape(void) {
    mo_conv_shape s, t;
    mo_conv_shape_init(&s, 2, 56, 56, 64, 128, 3, 3, 1, 1);
    CHECK(mo_conv_dgrad_forward_shape(&s, &t) && t.N == 2 && t.H == 56 && t.W == 56 && t.C == 128 && t.K == 64 &&
          t.R == 3 && t.S == 3 && t.stride == 1 && t.pad == 1 && t.P == 56 && t.Q == 56);
    mo_conv_shape_init(&s, 1, 9, 7, 8, 4, 3, 3, 1, 0); // valid 3x3: dout 7x5, padding 2 brings back 9x7
    CHECK(mo_conv_dgrad_forward_shape(&s, &t) && t.H == 7 && t.W == 5 && t.pad == 2 && t.P == 9 && t.Q == 7);
    mo_conv_shape_init(&s, 1, 9, 9, 8, 4, 3, 3, 2, 1);
    CHECK(!mo_conv_dgrad_forward_shape(&s, &t));
    mo_conv_shape_init(&s, 1, 9, 9, 8, 4, 2, 3, 1, 0);
    CHECK(!mo_conv_dgrad_forward_shape(&s, &t));
    mo_conv_shape_init(&s, 1, 9, 9, 8, 4, 3, 3, 1, 3);
    CHECK(!mo_conv_dgrad_forward_shape(&s, &t));
}

// Which ResNet-50 3x3s (batch 128) the fp32 implicit-GEMM kernel takes (mo_conv_implicit_prefers, where
// it measured faster than im2col): with the ResNet's 256 MiB workspace layer1 and layer2 (3136 and 784
// output tiles, both strides), not layer3 or layer4 (392 and 196 tiles; their column matrices, 231 and 116
// MB, fit whole: one long SGEMM); with 32 MiB every one of them (the matrices over the workspace); at
// batch 2 none at 256 MiB.
static void test_implicit_prefers(void) {
    static const struct { int H, C, st, at256, at32; } sh[5] = {
        {56, 64, 1, 1, 1}, {56, 128, 2, 1, 1}, {28, 128, 1, 1, 1}, {14, 256, 1, 0, 1}, {7, 512, 1, 0, 1}};
    for (int i = 0; i < 5; i++) {
        mo_conv_shape s;
        mo_conv_shape_init(&s, 128, sh[i].H, sh[i].H, sh[i].C, sh[i].C, 3, 3, sh[i].st, 1);
        CHECK_MSG(mo_conv_implicit_prefers(&s, (size_t)256 << 20) == sh[i].at256,
                  "3x3 H %d C %d stride %d, 256 MiB: the implicit kernel %s", sh[i].H, sh[i].C, sh[i].st,
                  sh[i].at256 ? "not taken" : "taken");
        CHECK_MSG(mo_conv_implicit_prefers(&s, (size_t)32 << 20) == sh[i].at32,
                  "3x3 H %d C %d stride %d, 32 MiB: the implicit kernel %s", sh[i].H, sh[i].C, sh[i].st,
                  sh[i].at32 ? "not taken" : "taken");
        mo_conv_shape_init(&s, 2, sh[i].H, sh[i].H, sh[i].C, sh[i].C, 3, 3, sh[i].st, 1);
        CHECK_MSG(!mo_conv_implicit_prefers(&s, (size_t)256 << 20), "3x3 H %d C %d batch 2: the implicit kernel taken",
                  sh[i].H, sh[i].C);
    }
}

int main(void) {
    test_rng_seed(&rng, 1616);
    test_implicit_prefers();
    test_dgrad_forward_shape();
    CHECK_OK(mo_allocator_create(&ha, MO_ALLOC_CACHING, MO_BACKEND_CPU, 0, NULL));
    CHECK_OK(mo_ctx_create(&hc, MO_BACKEND_CPU, ha));
    if (!hc) return test_finish();
    test_conv_hand();
    printf("conv: gradients\n");
    test_conv_grad(2, 5, 6, 3, 4, 3, 3, 1, 1);
    test_conv_grad(1, 7, 5, 2, 3, 3, 3, 2, 1);  // odd size, stride 2
    test_conv_grad(2, 6, 6, 4, 5, 1, 1, 2, 0);  // the bottleneck's downsampling 1x1
    test_conv_grad(1, 11, 9, 3, 4, 7, 7, 2, 3); // the stem's 7x7
    test_conv_grad(1, 4, 5, 2, 3, 2, 3, 1, 0);  // R != S
    for (int k = 0; k < 2; k++) {
        const mo_dtype dt = k ? MO_BF16 : MO_F16;
        test_conv_mixed(dt, 2, 6, 5, 8, 6, 3, 1, 1);
        test_conv_mixed(dt, 1, 9, 9, 3, 4, 7, 2, 3);
    }
    for (int k = 0; k < 3; k++) {
        const mo_dtype dt = k == 0 ? MO_F32 : k == 1 ? MO_F16 : MO_BF16;
        test_conv_add(dt, 2, 6, 5, 8, 6, 1, 1, 0); // the first unit of a bottleneck
        test_conv_add(dt, 2, 7, 7, 4, 8, 1, 2, 0); // a downsampling 1x1
        test_conv_add(dt, 1, 6, 6, 4, 4, 3, 1, 1); // the first unit of a basic block
    }
    test_bn_hand();
    printf("batchnorm: gradients\n");
    test_bn_grad(6, 3);
    test_bn_grad(50, 7);
    for (int k = 0; k < 2; k++) {
        const mo_dtype dt = k ? MO_BF16 : MO_F16;
        test_bn_mixed(dt, 40, 12, 0);
        test_bn_mixed(dt, 40, 12, 1);
        test_bn_fused(dt, 40, 12);
    }
    test_bn_fused(MO_F32, 40, 12);
    test_pool_hand();
    printf("pools: gradients\n");
    test_pool_grad(1, 6, 6, 2, 3, 2, 1);
    test_pool_grad(2, 7, 5, 3, 3, 2, 1);
    test_pool_grad(1, 5, 5, 1, 2, 1, 0);
    test_pool_mixed(MO_F16);
    test_pool_mixed(MO_BF16);
    test_im2col_hand();
    printf("im2col: against the direct convolution\n");
    test_im2col(2, 5, 6, 3, 4, 3, 3, 1, 1);
    test_im2col(1, 7, 5, 2, 3, 3, 3, 2, 1);  // odd size, stride 2
    test_im2col(2, 8, 8, 8, 6, 3, 3, 2, 1);  // stride 2, C a multiple of 4
    test_im2col(2, 6, 6, 4, 5, 1, 1, 2, 0);  // the bottleneck's downsampling 1x1
    test_im2col(1, 11, 9, 3, 4, 7, 7, 2, 3); // the stem's 7x7
    test_im2col(1, 4, 5, 2, 3, 2, 3, 1, 0);  // R != S
    test_im2col(2, 5, 5, 2, 3, 3, 3, 1, 2);  // pad > R - 1 (the flipped filter's forward does not take it)
    test_im2col(3, 6, 7, 5, 2, 3, 3, 3, 0);  // stride 3 > R - 1 - pad: input rows no window reads
    test_conv_gemm_knob();
    test_bad_input();
    test_scratch_contract();
    test_conv_table();
    mo_ctx_destroy(hc);
    mo_allocator_destroy(ha);
    return test_finish();
}
