// CPU-backend properties of the basic ops (encoder, layernorm, gelu, residual, crossentropy, adamw,
// sumsq): each backward against central finite differences of its own cpu forward, closed forms
// computed in double, hand-computed AdamW steps, and the dispatcher contract (scratch taken and given
// back on every backend, dry peaks equal cpu peaks, bad shapes rejected).
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

// sum_i a[i]*b[i] in double: the scalar "loss" whose gradient with respect to a is b.
static double dot(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

// ---------------------------------------------------------------------------------------------
// encoder: out = wte[tok] + wpe[t]; the backward is a sum of dout rows, checked against a double sum
// and against finite differences of L = sum(out * r).
static void test_encoder(void) {
    printf("encoder\n");
    enum { B = 2, T = 5, C = 37, V = 11 };
    test_rng r;
    test_rng_seed(&r, 11);
    int tok[B * T] = {3, 7, 3, 0, 10, 7, 7, 3, 1, 3}; // repeats inside and across sequences
    float *wte = fnew(V * C), *wpe = fnew(T * C), *out = fnew(B * T * C), *dout = fnew(B * T * C);
    test_fill_uniform(&r, wte, V * C, -1, 1);
    test_fill_uniform(&r, wpe, T * C, -1, 1);
    test_fill_uniform(&r, dout, B * T * C, -1, 1);
    CHECK_OK(mo_encoder_forward(hc, out, tok, wte, wpe, B, T, C));
    int exact = 1;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                exact &= out[(b * T + t) * C + c] == wte[tok[b * T + t] * C + c] + wpe[t * C + c];
    CHECK_MSG(exact, "encoder forward: out != wte[tok] + wpe[t]");

    // backward accumulates (+=) onto random initial gradients
    float *dwte = fnew(V * C), *dwpe = fnew(T * C);
    test_fill_uniform(&r, dwte, V * C, -1, 1);
    test_fill_uniform(&r, dwpe, T * C, -1, 1);
    float *dwte0 = fdup(dwte, V * C), *dwpe0 = fdup(dwpe, T * C);
    CHECK_OK(mo_encoder_backward(hc, dwte, dwpe, dout, tok, tok, B, T, C, V));
    float *want_te = fnew(V * C), *want_pe = fnew(T * C);
    for (int v = 0; v < V; v++)
        for (int c = 0; c < C; c++) {
            double s = dwte0[v * C + c];
            for (int p = 0; p < B * T; p++)
                if (tok[p] == v) s += dout[p * C + c];
            want_te[v * C + c] = (float)s;
        }
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            double s = dwpe0[t * C + c];
            for (int b = 0; b < B; b++) s += dout[(b * T + t) * C + c];
            want_pe[t * C + c] = (float)s;
        }
    CHECK_REL(dwte, want_te, V * C, 1e-6);
    CHECK_REL(dwpe, want_pe, T * C, 1e-6);

    // finite differences of L = sum(out * dout): the gradient is the backward from zero
    float *g_te = fnew(V * C), *g_pe = fnew(T * C), *fd_te = fnew(V * C), *fd_pe = fnew(T * C);
    memset(g_te, 0, V * C * sizeof(float));
    memset(g_pe, 0, T * C * sizeof(float));
    CHECK_OK(mo_encoder_backward(hc, g_te, g_pe, dout, tok, tok, B, T, C, V));
    const float h = 1.0f / 64; // exact in float; L is linear, so the difference is exact but for rounding
    for (int i = 0; i < V * C; i++) {
        float w = wte[i];
        wte[i] = w + h;
        mo_encoder_forward(hc, out, tok, wte, wpe, B, T, C);
        double lp = dot(out, dout, B * T * C);
        wte[i] = w - h;
        mo_encoder_forward(hc, out, tok, wte, wpe, B, T, C);
        double lm = dot(out, dout, B * T * C);
        wte[i] = w;
        fd_te[i] = (float)((lp - lm) / (2.0 * h));
    }
    for (int i = 0; i < T * C; i++) {
        float w = wpe[i];
        wpe[i] = w + h;
        mo_encoder_forward(hc, out, tok, wte, wpe, B, T, C);
        double lp = dot(out, dout, B * T * C);
        wpe[i] = w - h;
        mo_encoder_forward(hc, out, tok, wte, wpe, B, T, C);
        double lm = dot(out, dout, B * T * C);
        wpe[i] = w;
        fd_pe[i] = (float)((lp - lm) / (2.0 * h));
    }
    CHECK_REL(g_te, fd_te, V * C, 1e-5);
    CHECK_REL(g_pe, fd_pe, T * C, 1e-5);

    // a token outside [0, V) is rejected before anything is written
    int bad[B * T];
    memcpy(bad, tok, sizeof bad);
    bad[4] = V;
    memcpy(g_te, dwte0, V * C * sizeof(float));
    CHECK(mo_encoder_backward(hc, g_te, g_pe, dout, bad, bad, B, T, C, V) == MO_ERR_INVALID);
    CHECK(memcmp(g_te, dwte0, V * C * sizeof(float)) == 0);
    CHECK(mo_encoder_forward(hc, out, tok, wte, wpe, 0, T, C) == MO_ERR_INVALID);

    free(wte); free(wpe); free(out); free(dout); free(dwte); free(dwpe); free(dwte0); free(dwpe0);
    free(want_te); free(want_pe); free(g_te); free(g_pe); free(fd_te); free(fd_pe);
}

// ---------------------------------------------------------------------------------------------
// layernorm: forward against a double computation; backward against finite differences of
// L = sum(out * dout) with respect to inp, weight and bias; "+=" semantics.
static void ln_loss_grads(int N, int C, const float *inp, const float *w, const float *b, const float *dout,
                          float *dinp, float *dw, float *db) {
    float *out = fnew((size_t)N * C), *mean = fnew(N), *rstd = fnew(N);
    CHECK_OK(mo_layernorm_forward(hc, out, mean, rstd, inp, w, b, N, C));
    memset(dinp, 0, (size_t)N * C * sizeof(float));
    memset(dw, 0, C * sizeof(float));
    memset(db, 0, C * sizeof(float));
    CHECK_OK(mo_layernorm_backward(hc, dinp, dw, db, dout, inp, w, mean, rstd, N, C));
    free(out); free(mean); free(rstd);
}

static double ln_loss(int N, int C, const float *inp, const float *w, const float *b, const float *dout) {
    float *out = fnew((size_t)N * C);
    mo_layernorm_forward(hc, out, NULL, NULL, inp, w, b, N, C);
    double l = dot(out, dout, (size_t)N * C);
    free(out);
    return l;
}

// central differences of ln_loss with respect to every element of x (n of them)
static void ln_fd(int N, int C, float *inp, float *w, float *b, const float *dout, float *x, size_t n, float h,
                  float *fd) {
    for (size_t i = 0; i < n; i++) {
        float x0 = x[i];
        x[i] = x0 + h;
        double lp = ln_loss(N, C, inp, w, b, dout);
        x[i] = x0 - h;
        double lm = ln_loss(N, C, inp, w, b, dout);
        x[i] = x0;
        fd[i] = (float)((lp - lm) / (2.0 * h));
    }
}

static void test_layernorm(int N, int C) {
    printf("layernorm N=%d C=%d\n", N, C);
    test_rng r;
    test_rng_seed(&r, 100 + C);
    size_t NC = (size_t)N * C;
    float *inp = fnew(NC), *w = fnew(C), *b = fnew(C), *dout = fnew(NC);
    test_fill_uniform(&r, inp, NC, -2, 3);
    test_fill_uniform(&r, w, C, 0.5f, 1.5f);
    test_fill_uniform(&r, b, C, -0.5f, 0.5f);
    test_fill_uniform(&r, dout, NC, -1, 1);

    float *out = fnew(NC), *mean = fnew(N), *rstd = fnew(N);
    CHECK_OK(mo_layernorm_forward(hc, out, mean, rstd, inp, w, b, N, C));
    float *want = fnew(NC), *want_m = fnew(N), *want_r = fnew(N);
    for (int i = 0; i < N; i++) {
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += inp[i * C + c];
        m /= C;
        for (int c = 0; c < C; c++) v += (inp[i * C + c] - m) * (inp[i * C + c] - m);
        v /= C;
        double s = 1.0 / sqrt(v + 1e-5);
        want_m[i] = (float)m;
        want_r[i] = (float)s;
        for (int c = 0; c < C; c++) want[i * C + c] = (float)((inp[i * C + c] - m) * s * w[c] + b[c]);
    }
    CHECK_REL(out, want, NC, 1e-6);
    CHECK_REL(mean, want_m, N, 1e-6);
    CHECK_REL(rstd, want_r, N, 1e-6);

    float *dinp = fnew(NC), *dw = fnew(C), *db = fnew(C), *fd = fnew(NC);
    ln_loss_grads(N, C, inp, w, b, dout, dinp, dw, db);
    const float h = 1e-2f;
    ln_fd(N, C, inp, w, b, dout, inp, NC, h, fd);
    CHECK_REL(dinp, fd, NC, 5e-4); // observed ~5e-5 (h = 1e-2: truncation + fp32 rounding of L)
    ln_fd(N, C, inp, w, b, dout, w, C, h, fd);
    CHECK_REL(dw, fd, C, 5e-5);
    ln_fd(N, C, inp, w, b, dout, b, C, h, fd);
    CHECK_REL(db, fd, C, 5e-5);

    // "+=": a second backward onto the first doubles every gradient: exactly for dinp (one add per
    // element, x + x is exact), up to rounding for dweight/dbias (N adds onto a nonzero start)
    float *dinp2 = fdup(dinp, NC), *dw2 = fdup(dw, C), *db2 = fdup(db, C), *w2 = fnew(C), *b2 = fnew(C);
    CHECK_OK(mo_layernorm_backward(hc, dinp2, dw2, db2, dout, inp, w, mean, rstd, N, C));
    int twice = 1;
    for (size_t i = 0; i < NC; i++) twice &= dinp2[i] == 2 * dinp[i];
    CHECK_MSG(twice, "layernorm backward must accumulate (+=) into dinp");
    for (int c = 0; c < C; c++) { w2[c] = 2 * dw[c]; b2[c] = 2 * db[c]; }
    CHECK_REL(dw2, w2, C, 1e-6);
    CHECK_REL(db2, b2, C, 1e-6);
    free(w2); free(b2);

    free(inp); free(w); free(b); free(dout); free(out); free(mean); free(rstd); free(want); free(want_m);
    free(want_r); free(dinp); free(dw); free(db); free(fd); free(dinp2); free(dw2); free(db2);
}

// ---------------------------------------------------------------------------------------------
// gelu: forward and derivative against double formulas; backward against finite differences; dinp may
// alias dout.
static double gelu_d(double x) { return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
static double gelu_grad_d(double x) {
    double u = sqrt(2 / M_PI) * (x + 0.044715 * x * x * x), t = tanh(u);
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * sqrt(2 / M_PI) * (1 + 3 * 0.044715 * x * x);
}

static void test_gelu(void) {
    printf("gelu\n");
    enum { n = 2401 };
    float *x = fnew(n), *out = fnew(n), *want = fnew(n), *ones = fnew(n), *g = fnew(n), *gw = fnew(n);
    for (int i = 0; i < n; i++) x[i] = -12.0f + 24.0f * i / (n - 1); // through 0 and both tails
    CHECK_OK(mo_gelu_forward(hc, out, x, n));
    for (int i = 0; i < n; i++) want[i] = (float)gelu_d(x[i]);
    CHECK_REL(out, want, n, 1e-6);

    for (int i = 0; i < n; i++) ones[i] = 1.0f;
    CHECK_OK(mo_gelu_backward(hc, g, x, ones, n));
    for (int i = 0; i < n; i++) gw[i] = (float)gelu_grad_d(x[i]);
    CHECK_REL(g, gw, n, 1e-6);

    // finite differences of the float forward, elementwise (h = 1e-2: truncation ~1e-5, rounding ~3e-6)
    float *xp = fnew(n), *xm = fnew(n), *op = fnew(n), *om = fnew(n), *fd = fnew(n);
    const float h = 1e-2f;
    for (int i = 0; i < n; i++) { xp[i] = x[i] + h; xm[i] = x[i] - h; }
    mo_gelu_forward(hc, op, xp, n);
    mo_gelu_forward(hc, om, xm, n);
    for (int i = 0; i < n; i++) fd[i] = (float)(((double)op[i] - om[i]) / ((double)xp[i] - xm[i]));
    CHECK_REL(g, fd, n, 5e-5);

    // chain rule with a random dout, and dinp aliasing dout (in place)
    test_rng r;
    test_rng_seed(&r, 7);
    float *dout = fnew(n), *dinp = fnew(n);
    test_fill_uniform(&r, dout, n, -1, 1);
    CHECK_OK(mo_gelu_backward(hc, dinp, x, dout, n));
    int ok = 1;
    for (int i = 0; i < n; i++) ok &= dinp[i] == g[i] * dout[i];
    CHECK_MSG(ok, "gelu backward: dinp != gelu'(x) * dout");
    CHECK_OK(mo_gelu_backward(hc, dout, x, dout, n));
    CHECK(memcmp(dout, dinp, n * sizeof(float)) == 0);
    free(x); free(out); free(want); free(ones); free(g); free(gw); free(xp); free(xm); free(op); free(om);
    free(fd); free(dout); free(dinp);
}

// ---------------------------------------------------------------------------------------------
static void test_residual(void) {
    printf("residual\n");
    enum { n = 1003 };
    test_rng r;
    test_rng_seed(&r, 5);
    float *a = fnew(n), *b = fnew(n), *out = fnew(n);
    test_fill_uniform(&r, a, n, -1, 1);
    test_fill_uniform(&r, b, n, -1, 1);
    CHECK_OK(mo_residual_forward(hc, out, a, b, n));
    int ok = 1;
    for (int i = 0; i < n; i++) ok &= out[i] == a[i] + b[i];
    CHECK_MSG(ok, "residual: out != a + b");
    float *a2 = fdup(a, n), *b2 = fdup(b, n);
    CHECK_OK(mo_residual_forward(hc, a2, a2, b, n)); // out aliases a
    CHECK(memcmp(a2, out, n * sizeof(float)) == 0);
    CHECK_OK(mo_residual_forward(hc, b2, a, b2, n)); // out aliases b
    CHECK(memcmp(b2, out, n * sizeof(float)) == 0);
    float *d = fdup(a, n);
    CHECK_OK(mo_accumulate(hc, d, b, n));
    CHECK(memcmp(d, out, n * sizeof(float)) == 0);
    CHECK_OK(mo_accumulate(hc, d, b, 0)); // n = 0 is a no-op
    CHECK(memcmp(d, out, n * sizeof(float)) == 0);
    free(a); free(b); free(out); free(a2); free(b2); free(d);
}

// ---------------------------------------------------------------------------------------------
// crossentropy: loss = log-sum-exp - x[target] in double; gradient rows sum to zero; gradient equals
// finite differences of dloss * sum(losses); stable for huge logits; bad targets give NaN.
static double ce_loss_sum(const float *logits, const int *tg, int B, int T, int V, float *scratch) {
    float *losses = fnew((size_t)B * T);
    memcpy(scratch, logits, (size_t)B * T * V * sizeof(float));
    mo_crossentropy_fused(hc, losses, scratch, tg, B, T, V, 1.0f);
    double s = 0;
    for (int i = 0; i < B * T; i++) s += losses[i];
    free(losses);
    return s;
}

static void test_crossentropy(void) {
    printf("crossentropy\n");
    enum { B = 1, T = 5, V = 37, N = B * T };
    test_rng r;
    test_rng_seed(&r, 9);
    int tg[N] = {0, 36, 17, 17, 5};
    float *x = fnew(N * V), *g = fnew(N * V), *losses = fnew(N), *want = fnew(N);
    test_fill_uniform(&r, x, N * V, -4, 4);
    const float dloss = 1.0f / N;
    memcpy(g, x, sizeof(float) * N * V);
    CHECK_OK(mo_crossentropy_fused(hc, losses, g, tg, B, T, V, dloss));
    for (int i = 0; i < N; i++) {
        double m = -INFINITY, s = 0;
        for (int j = 0; j < V; j++) m = fmax(m, x[i * V + j]);
        for (int j = 0; j < V; j++) s += exp((double)x[i * V + j] - m);
        want[i] = (float)(log(s) + m - x[i * V + tg[i]]);
        double rowsum = 0, dev = 0;
        for (int j = 0; j < V; j++) {
            rowsum += g[i * V + j];
            double p = exp((double)x[i * V + j] - m) / s;
            double e = (p - (j == tg[i])) * dloss;
            dev = fmax(dev, fabs(g[i * V + j] - e));
        }
        CHECK_MSG(fabs(rowsum) <= 1e-6 * dloss, "crossentropy row %d: gradient sums to %g, not 0", i, rowsum);
        CHECK_MSG(dev <= 1e-6 * dloss, "crossentropy row %d: gradient off (softmax - onehot)*dloss by %g", i, dev);
    }
    CHECK_REL(losses, want, N, 1e-6);

    // finite differences of dloss * sum(losses)
    float *fd = fnew(N * V), *scratch = fnew(N * V);
    const float h = 1e-2f;
    for (int k = 0; k < N * V; k++) {
        float x0 = x[k];
        x[k] = x0 + h;
        double lp = ce_loss_sum(x, tg, B, T, V, scratch);
        x[k] = x0 - h;
        double lm = ce_loss_sum(x, tg, B, T, V, scratch);
        x[k] = x0;
        fd[k] = (float)((lp - lm) / (2.0 * h) * dloss);
    }
    CHECK_REL(g, fd, N * V, 5e-4);

    // stability: shifting a row by +1000 or -1000 changes nothing but rounding; one dominant logit
    float *xs = fnew(N * V), *ls = fnew(N);
    for (int k = 0; k < N * V; k++) xs[k] = x[k] + ((k / V) % 2 ? 1000.0f : -1000.0f);
    CHECK_OK(mo_crossentropy_fused(hc, ls, xs, tg, B, T, V, dloss));
    CHECK_REL(ls, losses, N, 1e-4); // the shifted logits themselves are rounded by ulp(1000) = 6e-5
    for (int k = 0; k < N * V; k++) xs[k] = (k % V == 3) ? 200.0f : 0.0f;
    CHECK_OK(mo_crossentropy_fused(hc, ls, xs, tg, B, T, V, dloss));
    int finite = 1;
    for (int k = 0; k < N * V; k++) finite &= isfinite(xs[k]);
    CHECK_MSG(finite && ls[0] == 200.0f, "crossentropy: dominant logit: loss %g (want 200), grads finite %d", ls[0],
              finite);

    int bad[N] = {0, V, -1, 2, 3};
    memcpy(xs, x, sizeof(float) * N * V);
    CHECK_OK(mo_crossentropy_fused(hc, ls, xs, bad, B, T, V, dloss));
    CHECK(!isnan(ls[0]) && isnan(ls[1]) && isnan(ls[2]) && !isnan(ls[3]));
    free(x); free(g); free(losses); free(want); free(fd); free(scratch); free(xs); free(ls);
}

// ---------------------------------------------------------------------------------------------
// adamw: two hand-computed first steps, then step t = 3 on random data against the formula in double.
static void test_adamw(void) {
    printf("adamw\n");
    // t = 1, m = v = 0: mhat = g', vhat = g'^2, so param -= lr * (g'/(|g'| + eps) + wd * param)
    //   p =  1, g =  0.5, scale 2: g' =  1;  m = 0.1, v = 0.001, p = 1 - 0.1*(1/(1+1e-8) + 0.01) = 0.899
    //   p = -2, g = -0.25, scale 2: g' = -0.5; m = -0.05, v = 0.00025, p = -2 - 0.1*(-1/(1+2e-8) - 0.02) = -1.898
    float p[2] = {1.0f, -2.0f}, gr[2] = {0.5f, -0.25f}, m[2] = {0, 0}, v[2] = {0, 0};
    CHECK_OK(mo_adamw(hc, p, gr, m, v, 2, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 2.0f));
    CHECK_MSG(fabs(p[0] - 0.899) < 1e-6 && fabs(p[1] + 1.898) < 1e-6, "adamw hand step: p = %.9g %.9g", p[0], p[1]);
    // (0.9f and 0.999f are not exact decimals: 1 - 0.999f = 0.000999987, so compare m, v to 1e-4 relative)
    CHECK_MSG(fabs(m[0] - 0.1) < 1e-5 && fabs(v[0] - 0.001) < 1e-7, "adamw hand step: m %.9g v %.9g", m[0], v[0]);
    CHECK_MSG(fabs(m[1] + 0.05) < 5e-6 && fabs(v[1] - 0.00025) < 2.5e-8, "adamw hand step: m %.9g v %.9g", m[1], v[1]);

    enum { n = 1001 };
    test_rng r;
    test_rng_seed(&r, 3);
    float *pp = fnew(n), *g = fnew(n), *mm = fnew(n), *vv = fnew(n);
    test_fill_uniform(&r, pp, n, -1, 1);
    test_fill_uniform(&r, g, n, -1, 1);
    test_fill_uniform(&r, mm, n, -0.1f, 0.1f);
    test_fill_uniform(&r, vv, n, 0.0f, 0.01f);
    float *wp = fnew(n), *wm = fnew(n), *wv = fnew(n);
    const double lr = 3e-4, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, sc = 0.7;
    for (int i = 0; i < n; i++) {
        double gg = (double)g[i] * sc;
        double mi = b1 * mm[i] + (1 - b1) * gg, vi = b2 * vv[i] + (1 - b2) * gg * gg;
        double mh = mi / (1 - pow(b1, 3)), vh = vi / (1 - pow(b2, 3));
        wm[i] = (float)mi;
        wv[i] = (float)vi;
        wp[i] = (float)(pp[i] - lr * (mh / (sqrt(vh) + eps) + wd * pp[i]));
    }
    CHECK_OK(mo_adamw(hc, pp, g, mm, vv, n, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, 3, (float)sc));
    CHECK_REL(pp, wp, n, 1e-6);
    CHECK_REL(mm, wm, n, 1e-6);
    CHECK_REL(vv, wv, n, 1e-6);
    CHECK(mo_adamw(hc, pp, g, mm, vv, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 0, 1.0f) == MO_ERR_INVALID);
    free(pp); free(g); free(mm); free(vv); free(wp); free(wm); free(wv);
}

// ---------------------------------------------------------------------------------------------
static void test_sumsq(void) {
    printf("sumsq\n");
    float small[3] = {1, 2, 3};
    double s = -1;
    CHECK_OK(mo_sumsq(hc, &s, small, 3));
    CHECK_MSG(s == 14.0, "sumsq [1,2,3] = %.17g", s);
    CHECK_OK(mo_sumsq(hc, &s, small, 0));
    CHECK(s == 0.0);
    enum { n = 100003 };
    test_rng r;
    test_rng_seed(&r, 4);
    float *g = fnew(n);
    test_fill_uniform(&r, g, n, -3, 3);
    long double want = 0;
    for (int i = 0; i < n; i++) want += (long double)g[i] * g[i];
    CHECK_OK(mo_sumsq(hc, &s, g, n));
    CHECK_MSG(fabsl(s - want) <= 1e-12L * want, "sumsq: %.17g vs long double %.17Lg", s, want);
    free(g);
}

// ---------------------------------------------------------------------------------------------
// Dispatcher contract: scratch comes from the allocator (category workspace) on every backend and is
// given back before the op returns; the dry backend computes nothing yet has the cpu's peaks.
typedef struct {
    uint64_t ws_peak_rise, allocated_after_minus_before;
} op_mem;

static op_mem run_scratch_ops(mo_backend_kind be, int which) {
    op_mem r = {0, 0};
    mo_allocator *a = NULL;
    mo_ctx *c = NULL;
    CHECK_OK(mo_allocator_create(&a, MO_ALLOC_CACHING, be, 0, NULL));
    if (!a) return r;
    CHECK_OK(mo_ctx_create(&c, be, a));
    if (!c) { mo_allocator_destroy(a); return r; }
    enum { B = 3, T = 64, C = 48, V = 50, N = B * T };
    float *f[6] = {0};
    for (int i = 0; i < 6; i++) CHECK_OK(mo_alloc(a, (size_t)V * T * C * sizeof(float), MO_CAT_ACTIVATION, (void **)&f[i]));
    static int tok[N];
    for (int i = 0; i < N; i++) tok[i] = (i * 7) % V;
    float *mean = NULL, *rstd = NULL;
    CHECK_OK(mo_alloc(a, N * sizeof(float), MO_CAT_ACTIVATION, (void **)&mean));
    CHECK_OK(mo_alloc(a, N * sizeof(float), MO_CAT_ACTIVATION, (void **)&rstd));
    int *dtok = NULL;
    CHECK_OK(mo_alloc(a, sizeof tok, MO_CAT_ACTIVATION, (void **)&dtok));
    CHECK_OK(mo_memcpy_h2d(c, dtok, tok, sizeof tok));
    if (be == MO_BACKEND_CPU) { // real numbers on cpu so nothing reads garbage
        for (int i = 0; i < 6; i++)
            for (size_t k = 0; k < (size_t)V * T * C; k++) f[i][k] = 0.5f;
        for (int i = 0; i < N; i++) { mean[i] = 0.5f; rstd[i] = 1.0f; }
    }
    mo_alloc_stats s0, s1;
    mo_allocator_stats(a, &s0);
    mo_allocator_reset_peaks(a);
    switch (which) {
    case 0: CHECK_OK(mo_encoder_backward(c, f[0], f[1], f[2], dtok, tok, B, T, C, V)); break;
    case 1: CHECK_OK(mo_layernorm_backward(c, f[0], f[1], f[2], f[3], f[4], f[5], mean, rstd, N, C)); break;
    case 2: {
        double out = -1;
        CHECK_OK(mo_sumsq(c, &out, f[0], (size_t)N * C));
        if (be == MO_BACKEND_DRY) CHECK(out == 0.0);
        break;
    }
    }
    mo_allocator_stats(a, &s1);
    r.ws_peak_rise = s1.peak_by_cat[MO_CAT_WORKSPACE] - s0.allocated_by_cat[MO_CAT_WORKSPACE];
    r.allocated_after_minus_before = s1.allocated_bytes - s0.allocated_bytes;
    for (int i = 0; i < 6; i++) mo_free(a, f[i]);
    mo_free(a, mean);
    mo_free(a, rstd);
    mo_free(a, dtok);
    mo_ctx_destroy(c);
    mo_allocator_destroy(a);
    return r;
}

static void test_scratch_contract(void) {
    printf("scratch contract\n");
    enum { B = 3, T = 64, C = 48, N = B * T };
    size_t want[3] = {mo_encoder_backward_scratch_bytes(B, T), mo_layernorm_backward_scratch_bytes(N, C),
                      mo_sumsq_scratch_bytes((size_t)N * C)};
    const char *name[3] = {"encoder_backward", "layernorm_backward", "sumsq"};
    for (int w = 0; w < 3; w++) {
        op_mem cpu = run_scratch_ops(MO_BACKEND_CPU, w), dry = run_scratch_ops(MO_BACKEND_DRY, w);
        CHECK_MSG(cpu.allocated_after_minus_before == 0 && dry.allocated_after_minus_before == 0,
                  "%s: scratch not given back (cpu %llu, dry %llu bytes still allocated)", name[w],
                  (unsigned long long)cpu.allocated_after_minus_before, (unsigned long long)dry.allocated_after_minus_before);
        CHECK_MSG(cpu.ws_peak_rise >= want[w] && want[w] > 0, "%s: workspace peak rose %llu < scratch %zu", name[w],
                  (unsigned long long)cpu.ws_peak_rise, want[w]);
        CHECK_MSG(cpu.ws_peak_rise == dry.ws_peak_rise, "%s: dry workspace peak %llu != cpu %llu", name[w],
                  (unsigned long long)dry.ws_peak_rise, (unsigned long long)cpu.ws_peak_rise);
    }
    // sizes are functions of the shapes alone
    CHECK_EQ_U64(mo_encoder_backward_scratch_bytes(4, 1024), (3 * 4096 + 1) * sizeof(int));
    CHECK_EQ_U64(mo_layernorm_backward_scratch_bytes(4096, 768), 512ull * 2 * 768 * sizeof(float));
    CHECK_EQ_U64(mo_layernorm_backward_scratch_bytes(5, 37), 1ull * 2 * 37 * sizeof(float));
    CHECK_EQ_U64(mo_sumsq_scratch_bytes(0), 0);
    CHECK_EQ_U64(mo_sumsq_scratch_bytes(5), 2 * sizeof(double));
    CHECK_EQ_U64(mo_sumsq_scratch_bytes((size_t)1 << 30), 1025 * sizeof(double));
    CHECK(mo_layernorm_backward(hc, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, 8) == MO_ERR_INVALID);
}

int main(void) {
    CHECK_OK(mo_allocator_create(&ha, MO_ALLOC_CACHING, MO_BACKEND_CPU, 0, NULL));
    CHECK_OK(mo_ctx_create(&hc, MO_BACKEND_CPU, ha));
    if (!hc) return test_finish();
    test_encoder();
    test_layernorm(5, 37);
    test_layernorm(3, 64);
    test_gelu();
    test_residual();
    test_crossentropy();
    test_adamw();
    test_sumsq();
    test_scratch_contract();
    mo_ctx_destroy(hc);
    mo_allocator_destroy(ha);
    return test_finish();
}
