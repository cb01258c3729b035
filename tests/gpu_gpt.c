// The whole GPT on the GPU against the CPU reference: loss and every parameter gradient on a
// small config (fresh batch each run), determinism (two GPU runs give the same bits),
// checkpointing bit-identical to none on the GPU, accumulation against the full batch, and the
// dry backend's peak equal to the cuda backend's to the byte.
#include <math.h>
#include <stdio.h>
#include "kernels/copy_stream.h" // mo_copy_spin_cuda: holding the compute stream back
#include "kernels/zero_side.h"
#include "tests/gpt_fixture.h"

static mo_gpt_config small_config(void) {
    mo_gpt_config c = tiny_config();
    c.layers = 3; c.hidden = 128; c.heads = 4; c.seq = 64; c.batch = 4; c.vocab = 1000;
    return c;
}

// One forward/backward on backend be; returns the host gradients and the loss.
static float *run_grads(mo_backend_kind be, mo_gpt_config c, uint64_t batch_seed, double *loss, mo_alloc_stats *st) {
    gpt_fixture f;
    if (!fixture_open(&f, be, &c, batch_seed)) return NULL;
    CHECK_OK(mo_gpt_forward_backward(f.m));
    *loss = f.m->last_loss;
    float *g = fixture_read(&f, f.m->grads, f.m->num_params);
    if (st) mo_allocator_stats(f.alloc, st);
    fixture_close(&f);
    return g;
}

static const char *pname[GPT_NPARAMS] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "projw", "projb",
                                         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

// fp32: the GPU sums in other orders (GEMM tiles, warp reductions), so gradients agree to about
// 1e-6 relative per op and compound over the layers; 1e-4 on each parameter tensor leaves a
// margin and still fails any indexing or formula error (those give O(1)). tf32 rounds GEMM inputs
// to 10 mantissa bits: 2e-2.
static void compare_model(int fused, int tf32, uint64_t seed) {
    mo_gpt_config c = small_config();
    c.attn_fused = fused;
    c.tf32 = tf32;
    double lc = 0, lg = 0;
    float *gc = run_grads(MO_BACKEND_CPU, c, seed, &lc, NULL);
    float *gg = run_grads(MO_BACKEND_CUDA, c, seed, &lg, NULL);
    if (!gc || !gg) { free(gc); free(gg); return; }
    double tol = tf32 ? 2e-2 : 1e-4;
    printf(" attn %s, %s: loss cpu %.7f cuda %.7f\n", fused ? "fused" : "materialized", tf32 ? "tf32" : "fp32", lc, lg);
    CHECK_MSG(fabs(lc - lg) <= (tf32 ? 1e-3 : 1e-5) * fabs(lc), "loss cpu %.9g vs cuda %.9g", lc, lg);
    size_t s[GPT_NPARAMS], off = 0;
    // The parameter sizes, as the model lays them out.
    {
        gpt_fixture f;
        if (!fixture_open(&f, MO_BACKEND_DRY, &c, seed)) return;
        memcpy(s, f.m->param_sizes, sizeof s);
        fixture_close(&f);
    }
    for (int p = 0; p < GPT_NPARAMS; p++) {
        char what[64];
        snprintf(what, sizeof what, "grad %s", pname[p]);
        double e = test_rel_error(gg + off, gc + off, s[p]);
        CHECK_MSG(!isnan(e) && e <= tol, "%s (attn %s, %s): relative error %.3e > %.1e", what, fused ? "fused" : "materialized",
                  tf32 ? "tf32" : "fp32", e, tol);
        printf("  %-14s rel err %.3e\n", what, e);
        off += s[p];
    }
    free(gc);
    free(gg);
}

// The gradients' clear on its side stream (kernels/zero_side.h), held back 20 ms by the test hook: a
// second forward/backward of the same model on the same batch (no update between) gives the first's
// gradients bit for bit, as the join before the first backward orders every gradient write after the
// clear. The negative control skips the join: the backward then adds onto the first run's gradients and
// the clear lands in the middle of it, so the gradients must differ (else this test could not fail).
static void test_zero_side(uint64_t seed) {
    mo_gpt_config c = small_config();
    c.layers = 4; // a backward longer than nothing, shorter than the delay
    gpt_fixture f;
    if (!fixture_open(&f, MO_BACKEND_CUDA, &c, seed)) return;
    f.ctx->zero_side_on = 1; // whatever MEMOPT_ZERO_SIDE says: this test is about the side stream
    // Under compute-sanitizer the tool runs the two streams' work one after the other (gpu_offload_act.c:
    // session 12's pass kept the losses with the joins skipped): the held-back clear then lands before the
    // forward, or the held-back read before the clear, and the negative controls could not see anything.
    // They are left out there; the positive controls still run.
    const int controls = !test_under_sanitizer();
    if (!controls) printf("MEMOPT_TEST_UNDER_SANITIZER: the zero-side negative controls left out (the sanitizer serializes the streams)\n");
    const size_t n = f.m->num_params;
    float *g[3] = {NULL, NULL, NULL};
    for (int r = 0; r < (controls ? 3 : 2); r++) {
        mo_zero_side_testing = (mo_zero_side_test){.delay_us = 20000, .skip_join = r == 2};
        CHECK_OK(mo_gpt_forward_backward(f.m));
        mo_zero_side_testing = (mo_zero_side_test){0, 0, 0};
        CHECK_OK(mo_ctx_sync(f.ctx));
        g[r] = fixture_read(&f, f.m->grads, n);
    }
    if (g[0] && g[1]) {
        CHECK_MSG(!memcmp(g[0], g[1], n * sizeof(float)), "a second step's gradients differ with the clear held back 20 ms");
        if (controls)
            CHECK_MSG(g[2] && memcmp(g[0], g[2], n * sizeof(float)) != 0,
                      "negative control: without the join, the held-back clear still gave the same gradients");
        printf("zero side: a held-back clear gives the same gradients bit for bit%s\n",
               controls ? "; without the join they differ" : " (the control without the join left out)");
    }
    mo_zero_side_destroy(f.ctx); // the control's late clear drained before the gradients are freed
#ifdef MEMOPT_HAVE_CUDA
    // The other order: the clear waits for what the compute stream had enqueued before it (the last
    // update's read of the gradients). A copy of the gradients held back 20 ms on the compute stream and
    // enqueued before the clear still sees them; without that wait (skip_ready, the control) it sees zeros.
    void *keep = NULL;
    if (g[0] && CHECK_OK(mo_alloc(f.alloc, n * sizeof(float), MO_CAT_ACTIVATION, &keep))) {
        for (int r = 0; r < (controls ? 2 : 1); r++) {
            CHECK_OK(mo_gpt_forward_backward(f.m)); // the gradients g[0] again
            CHECK_OK(mo_copy_spin_cuda(f.ctx->stream, 20000));
            CHECK_OK(mo_memcpy_d2d(f.ctx, keep, f.m->grads, n * sizeof(float)));
            mo_zero_side_testing = (mo_zero_side_test){.skip_ready = r == 1};
            CHECK_OK(mo_zero_side_begin(f.ctx, f.m->grads, n * sizeof(float)));
            mo_zero_side_testing = (mo_zero_side_test){0, 0, 0};
            CHECK_OK(mo_zero_side_join(f.ctx));
            CHECK_OK(mo_ctx_sync(f.ctx));
            float *k = fixture_read(&f, keep, n);
            if (k && r == 0) CHECK_MSG(!memcmp(k, g[0], n * sizeof(float)), "a read enqueued before the clear saw it");
            if (k && r == 1)
                CHECK_MSG(memcmp(k, g[0], n * sizeof(float)) != 0,
                          "negative control: a clear that does not wait still let the held-back read see the gradients");
            free(k);
        }
        CHECK_OK(mo_free(f.alloc, keep));
        printf("zero side: a read enqueued before the clear sees the gradients%s\n",
               controls ? "; without the wait it does not" : " (the control without the wait left out)");
    }
#endif
    for (int r = 0; r < 3; r++) free(g[r]);
    fixture_close(&f);
}

// Reduced: batch 2 (bit-identity does not depend on it), both runs for each attention form, the
// policies split between the forms, accumulation (2: one-row micro-batches) with the materialized one.
static void test_deterministic_and_checkpoint(uint64_t seed) {
    const int reduced = test_is_reduced();
    for (int fused = 0; fused <= 1; fused++) {
        mo_gpt_config c = small_config();
        c.layers = 4;
        if (reduced) c.batch = 2;
        c.attn_fused = fused;
        size_t n = mo_gpt_num_params(&c);
        double l0 = 0, l1 = 0;
        float *g0 = run_grads(MO_BACKEND_CUDA, c, seed, &l0, NULL);
        float *g1 = run_grads(MO_BACKEND_CUDA, c, seed, &l1, NULL);
        CHECK_MSG(g0 && g1 && l0 == l1 && !memcmp(g0, g1, n * sizeof(float)), "two GPU runs differ (attn %s)", fused ? "fused" : "materialized");
        mo_ckpt_kind ks[] = {MO_CKPT_FULL, MO_CKPT_EVERY, MO_CKPT_SQRT, MO_CKPT_SELECTIVE, MO_CKPT_SEGMENTS}; // segments:2
        for (int i = 0; i < 5; i++) {
            if (reduced && i % 2 != fused) continue;
            mo_gpt_config d = c;
            d.ckpt = ks[i];
            d.ckpt_every = 2;
            double lk = 0;
            float *gk = run_grads(MO_BACKEND_CUDA, d, seed, &lk, NULL);
            CHECK_MSG(gk && lk == l0 && !memcmp(gk, g0, n * sizeof(float)),
                      "GPU checkpoint policy %d (attn %s) is not bit-identical to none", (int)ks[i], fused ? "fused" : "materialized");
            free(gk);
        }
        // Accumulation: the same gradient within fp32 rounding (1e-5 relative, as on the CPU).
        mo_gpt_config a = c;
        a.accum = reduced ? 2 : 4;
        double la = 0;
        float *ga = reduced && fused ? NULL : run_grads(MO_BACKEND_CUDA, a, seed, &la, NULL);
        if (ga && g0) CHECK_REL(ga, g0, n, 1e-5);
        free(ga);
        free(g0);
        free(g1);
    }
}

// Reduced: batch 2 (accum 2 still divides it).
static void test_dry_equals_cuda(void) {
    mo_gpt_config c = small_config();
    if (test_is_reduced()) c.batch = 2;
    for (int k = 0; k < 3; k++) {
        c.ckpt = k == 0 ? MO_CKPT_NONE : k == 1 ? MO_CKPT_SQRT : MO_CKPT_SELECTIVE;
        c.accum = k == 1 ? 2 : 1;
        c.attn_fused = k == 1;
        mo_alloc_stats s[2];
        for (int b = 0; b < 2; b++) {
            gpt_fixture f;
            if (!fixture_open(&f, b ? MO_BACKEND_DRY : MO_BACKEND_CUDA, &c, 5)) return;
            CHECK_OK(mo_gpt_step(f.m));
            CHECK_OK(mo_gpt_step(f.m));
            mo_allocator_stats(f.alloc, &s[b]);
            fixture_close(&f);
        }
        CHECK_EQ_U64(s[0].peak_allocated_bytes, s[1].peak_allocated_bytes);
        CHECK_EQ_U64(s[0].peak_reserved_bytes, s[1].peak_reserved_bytes);
    }
}

// The loss falls when overfitting one batch on the GPU too.
// Reduced: batch 2 and 12 steps instead of 40 (the cpu backend at that shape: 6.92 -> 2.67 by the 12th
// step, under the half, 3.46, with room).
static void test_overfit(void) {
    const int steps = test_is_reduced() ? 12 : 40;
    mo_gpt_config c = small_config();
    c.lr = 3e-3f;
    if (test_is_reduced()) c.batch = 2;
    gpt_fixture f;
    if (!fixture_open(&f, MO_BACKEND_CUDA, &c, 3)) return;
    double first = 0, last = 0;
    for (int i = 0; i < steps; i++) {
        CHECK_OK(mo_gpt_step(f.m));
        if (i == 0) first = f.m->last_loss;
        last = f.m->last_loss;
    }
    printf(" overfit on the GPU: loss %.4f -> %.4f\n", first, last);
    CHECK(last < 0.5 * first);
    fixture_close(&f);
}

int main(void) {
    test_require_gpu();
    uint64_t seed = test_seed_from_time();
    test_reduced("batch 4 outside the cpu comparisons (2 instead), 4 of 10 ckpt runs, 1 of 2 accum runs,"
                 " 28 of 40 overfit steps");
    compare_model(0, 0, seed);
    compare_model(1, 0, seed + 1);
    compare_model(0, 1, seed + 2);
    test_deterministic_and_checkpoint(seed + 3);
    test_zero_side(seed + 4);
    test_dry_equals_cuda();
    test_overfit();
    return test_finish();
}
