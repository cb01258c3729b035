// The GPT on the cpu and dry backends: gradients against finite differences, the loss falls when
// overfitting one batch, checkpointing is bit-identical to none, accumulation equals the full batch,
// and the dry backend's peaks equal the cpu backend's to the byte.
#include <math.h>
#include <stdio.h>
#include "tests/gpt_fixture.h"

static double loss_at(gpt_fixture *f) {
    CHECK_OK(mo_gpt_forward_backward(f->m));
    return f->m->last_loss;
}

// Central differences on a sample of every parameter tensor. The loss is fp32, so the difference
// quotient carries ~1e-4 of noise at h = 1e-3: the bound is 5e-2 relative plus 3e-4 absolute, far
// below the O(1) error a wrong backward gives.
static void test_finite_differences(void) {
    mo_gpt_config c = tiny_config();
    gpt_fixture f;
    if (!fixture_open(&f, MO_BACKEND_CPU, &c, 7)) return;
    CHECK_OK(mo_gpt_forward_backward(f.m));
    size_t n = f.m->num_params;
    float *g = malloc(n * sizeof(float));
    memcpy(g, f.m->grads, n * sizeof(float));
    test_rng r;
    test_rng_seed(&r, 99);
    int bad = 0, checked = 0;
    double worst = 0;
    for (int p = 0; p < GPT_NPARAMS; p++) {
        size_t base = (size_t)(f.m->param_ptr[p] - f.m->params);
        for (int k = 0; k < 12; k++) {
            size_t i = base + test_rng_u64(&r) % f.m->param_sizes[p];
            float keep = f.m->params[i];
            const float h = 1e-3f;
            f.m->params[i] = keep + h;
            double lp = loss_at(&f);
            f.m->params[i] = keep - h;
            double lm = loss_at(&f);
            f.m->params[i] = keep;
            double fd = (lp - lm) / (2.0 * h);
            double err = fabs(fd - g[i]);
            double tol = 3e-4 + 5e-2 * fmax(fabs(fd), fabs(g[i]));
            if (err > worst) worst = err;
            checked++;
            if (!(err <= tol)) {
                bad++;
                fprintf(stderr, "  param %d index %zu: analytic %.6g, finite difference %.6g\n", p, i - base, g[i], fd);
            }
        }
    }
    printf("  finite differences: %d entries checked, worst abs error %.3g\n", checked, worst);
    CHECK_MSG(bad == 0, "%d of %d gradient entries disagree with finite differences", bad, checked);
    free(g);
    fixture_close(&f);
}

static void test_overfit(void) {
    mo_gpt_config c = tiny_config();
    c.lr = 1e-2f;
    gpt_fixture f;
    if (!fixture_open(&f, MO_BACKEND_CPU, &c, 3)) return;
    double first = 0, last = 0;
    for (int s = 0; s < 60; s++) {
        CHECK_OK(mo_gpt_step(f.m));
        if (s == 0) first = f.m->last_loss;
        last = f.m->last_loss;
    }
    printf("  overfit one batch: loss %.4f -> %.4f (ln V = %.4f)\n", first, last, log((double)c.vocab));
    CHECK(fabs(first - log((double)c.vocab)) < 0.5); // a fresh model predicts about uniformly
    CHECK_MSG(last < 0.5 * first, "loss did not fall: %.4f -> %.4f", first, last);
    fixture_close(&f);
}

// Loss and gradients of one forward/backward under a config, on the cpu backend.
static float *grads_of(mo_gpt_config c, double *loss, double *recompute_ms) {
    gpt_fixture f;
    if (!fixture_open(&f, MO_BACKEND_CPU, &c, 11)) return NULL;
    CHECK_OK(mo_gpt_forward_backward(f.m));
    *loss = f.m->last_loss;
    if (recompute_ms) *recompute_ms = f.m->recompute_ms;
    float *g = malloc(f.m->num_params * sizeof(float));
    memcpy(g, f.m->grads, f.m->num_params * sizeof(float));
    fixture_close(&f);
    return g;
}

static void test_checkpoint_bit_identical(void) {
    for (int fused = 0; fused <= 1; fused++) {
        mo_gpt_config c = tiny_config();
        c.layers = 5;
        c.attn_fused = fused;
        double l0 = 0;
        float *g0 = grads_of(c, &l0, NULL);
        size_t n = mo_gpt_num_params(&c);
        struct { mo_ckpt_kind k; int every; const char *name; } pol[] = {
            {MO_CKPT_FULL, 0, "full"}, {MO_CKPT_EVERY, 2, "every:2"}, {MO_CKPT_EVERY, 5, "every:5"},
            {MO_CKPT_SQRT, 0, "sqrt"}, {MO_CKPT_SELECTIVE, 0, "selective"}, {MO_CKPT_SEGMENTS, 1, "segments:1"},
            {MO_CKPT_SEGMENTS, 2, "segments:2"}, {MO_CKPT_SEGMENTS, 3, "segments:3"}, {MO_CKPT_SEGMENTS, 5, "segments:5"}};
        for (size_t i = 0; i < sizeof pol / sizeof pol[0]; i++) {
            mo_gpt_config d = c;
            d.ckpt = pol[i].k;
            d.ckpt_every = pol[i].every;
            double l1 = 0;
            float *g1 = grads_of(d, &l1, NULL);
            CHECK_MSG(g0 && g1 && l0 == l1 && memcmp(g0, g1, n * sizeof(float)) == 0,
                      "--ckpt %s (attn %s): loss or gradients differ from none (loss %.9g vs %.9g)", pol[i].name,
                      fused ? "fused" : "materialized", l1, l0);
            free(g1);
        }
        free(g0);
    }
}

// Accumulation: K micro-batches of B/K sum to the full batch's gradient. The sums are over
// different groupings of the same terms, so they agree to fp32 rounding: the bound is a relative
// L2 error of 1e-5 on the whole gradient and 1e-6 on the loss.
static void test_accumulation(void) {
    mo_gpt_config c = tiny_config();
    c.batch = 8;
    double l1 = 0;
    float *g1 = grads_of(c, &l1, NULL);
    size_t n = mo_gpt_num_params(&c);
    for (int K = 2; K <= 8; K *= 2) {
        mo_gpt_config d = c;
        d.accum = K;
        double lk = 0;
        float *gk = grads_of(d, &lk, NULL);
        char what[64];
        snprintf(what, sizeof what, "accum %d gradients", K);
        CHECK_REL(gk, g1, n, 1e-5);
        CHECK_MSG(fabs(lk - l1) <= 1e-6 * fabs(l1), "accum %d: loss %.9g vs %.9g", K, lk, l1);
        free(gk);
    }
    free(g1);
}

// The dry backend makes the same allocations as the cpu backend: peaks equal to the byte.
static void test_dry_equals_cpu(void) {
    struct { mo_ckpt_kind k; int every; int fused; int accum; } grid[] = {
        {MO_CKPT_NONE, 0, 0, 1}, {MO_CKPT_NONE, 0, 1, 1}, {MO_CKPT_FULL, 0, 0, 1}, {MO_CKPT_EVERY, 2, 0, 2},
        {MO_CKPT_SQRT, 0, 1, 4}, {MO_CKPT_SELECTIVE, 0, 0, 2}, {MO_CKPT_SEGMENTS, 2, 0, 2}, {MO_CKPT_SEGMENTS, 3, 1, 1},
        {MO_CKPT_SEGMENTS, 4, 0, 4}};
    for (size_t i = 0; i < sizeof grid / sizeof grid[0]; i++) {
        mo_gpt_config c = tiny_config();
        c.layers = 4; c.batch = 8;
        c.ckpt = grid[i].k; c.ckpt_every = grid[i].every; c.attn_fused = grid[i].fused; c.accum = grid[i].accum;
        mo_alloc_stats s[2];
        for (int b = 0; b < 2; b++)
            if (!fixture_two_step_stats(b == 0 ? MO_BACKEND_CPU : MO_BACKEND_DRY, &c, 5, &s[b])) return;
        CHECK_MSG(s[0].peak_allocated_bytes == s[1].peak_allocated_bytes && s[0].peak_reserved_bytes == s[1].peak_reserved_bytes &&
                      s[0].num_allocs == s[1].num_allocs,
                  "grid row %zu: cpu peak %llu/%llu, dry peak %llu/%llu", i, (unsigned long long)s[0].peak_allocated_bytes,
                  (unsigned long long)s[0].peak_reserved_bytes, (unsigned long long)s[1].peak_allocated_bytes,
                  (unsigned long long)s[1].peak_reserved_bytes);
        for (int k = 0; k < MO_CAT_COUNT; k++) CHECK_EQ_U64(s[0].peak_by_cat[k], s[1].peak_by_cat[k]);
    }
}

// Checkpointing must lower the activation peak, and full keeps ~one (B,T,C) input per layer.
static void test_checkpoint_saves_memory(void) {
    mo_gpt_config c = tiny_config();
    c.layers = 8; c.hidden = 64; c.heads = 4; c.seq = 64; c.batch = 4; c.vocab = 64;
    uint64_t peak[3];
    mo_ckpt_kind k[3] = {MO_CKPT_NONE, MO_CKPT_SQRT, MO_CKPT_FULL};
    for (int i = 0; i < 3; i++) {
        c.ckpt = k[i];
        gpt_fixture f;
        if (!fixture_open(&f, MO_BACKEND_DRY, &c, 5)) return;
        mo_allocator_reset_peaks(f.alloc);
        CHECK_OK(mo_gpt_forward_backward(f.m));
        mo_alloc_stats s;
        mo_allocator_stats(f.alloc, &s);
        peak[i] = s.peak_by_cat[MO_CAT_ACTIVATION];
        fixture_close(&f);
    }
    printf("  activation peak: none %llu, sqrt %llu, full %llu bytes\n", (unsigned long long)peak[0],
           (unsigned long long)peak[1], (unsigned long long)peak[2]);
    CHECK(peak[2] < peak[0]);
    CHECK(peak[1] < peak[0]);
    // segments:N (checkpoint_sequential's layout: N-1 checkpointed segments of L/N blocks, the rest kept):
    // between full and none, the same as none for N = 1; more segments keep less.
    uint64_t seg[5];
    static const int Ns[5] = {1, 2, 4, 8, 3};
    for (int i = 0; i < 5; i++) {
        c.ckpt = MO_CKPT_SEGMENTS;
        c.ckpt_every = Ns[i];
        gpt_fixture f;
        if (!fixture_open(&f, MO_BACKEND_DRY, &c, 5)) return;
        mo_allocator_reset_peaks(f.alloc);
        CHECK_OK(mo_gpt_forward_backward(f.m));
        mo_alloc_stats s;
        mo_allocator_stats(f.alloc, &s);
        seg[i] = s.peak_by_cat[MO_CAT_ACTIVATION];
        fixture_close(&f);
    }
    printf("  activation peak: segments:1 %llu, :2 %llu, :4 %llu, :8 %llu, :3 %llu bytes\n", (unsigned long long)seg[0],
           (unsigned long long)seg[1], (unsigned long long)seg[2], (unsigned long long)seg[3], (unsigned long long)seg[4]);
    CHECK_MSG(seg[0] == peak[0], "segments:1 %llu, none %llu", (unsigned long long)seg[0], (unsigned long long)peak[0]);
    // segments:L (every block checkpointed but the last, which keeps its internals) peaks with full, whose
    // peak is the last block's recompute with the same inputs live; 1 < N < L lie strictly between.
    CHECK_MSG(seg[3] == peak[2], "segments:8 %llu, full %llu", (unsigned long long)seg[3], (unsigned long long)peak[2]);
    for (int i = 1; i < 5; i++)
        if (i != 3)
            CHECK_MSG(seg[i] > peak[2] && seg[i] < peak[0], "segments:%d activation peak %llu not between full %llu and none %llu",
                      Ns[i], (unsigned long long)seg[i], (unsigned long long)peak[2], (unsigned long long)peak[0]);
    CHECK(seg[1] > seg[2] && seg[2] > seg[3]);
    // The recompute FLOPs: only the checkpointed blocks are re-run; segments:1 re-runs nothing.
    c.ckpt = MO_CKPT_SEGMENTS; c.ckpt_every = 1;
    CHECK(mo_gpt_recompute_flops(&c) == 0);
    mo_gpt_config e = c, f = c;
    e.ckpt_every = 2;                                 // blocks 0-3 in one segment of 4, 4-7 kept
    f.ckpt = MO_CKPT_EVERY; f.ckpt_every = 4; f.layers = 4; // one segment of 4 blocks
    CHECK(mo_gpt_recompute_flops(&e) == mo_gpt_recompute_flops(&f) && mo_gpt_recompute_flops(&e) > 0);
}

int main(void) {
    test_seed_from_time();
    test_finite_differences();
    test_overfit();
    test_checkpoint_bit_identical();
    test_accumulation();
    test_dry_equals_cpu();
    test_checkpoint_saves_memory();
    return test_finish();
}
