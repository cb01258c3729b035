// Mixed precision in the GPT model on the CPU backend (the 16-bit references round where the GPU
// kernels round): bf16 and fp16 track fp32 over 50 steps, the fp16 loss scaler (skip + halve on
// inf/nan, growth after its interval, a real overflow), MEMOPT_DBIAS=gelu's fc bias gradient, checkpointing bit-identical and accumulation
// equal to the full batch in 16 bits, the dry backend's peaks equal to the cpu peaks over a grid of
// precision x checkpointing x accumulation x attention, and the exact activation figure of --ckpt full.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpt_fixture.h"

static const mo_dtype DTS[] = {MO_BF16, MO_F16};

static mo_gpt_config mixed_config(mo_dtype dt) {
    mo_gpt_config c = tiny_config();
    c.layers = 2; c.hidden = 32; c.heads = 2; c.seq = 16; c.batch = 4; c.vocab = 64;
    c.dtype = dt;
    c.loss_scaling = dt == MO_F16;
    c.grad_clip = 1.0f;
    return c;
}

// Losses and gradient norms of `steps` optimizer steps on one fixed batch.
static int train(mo_gpt_config c, int steps, double *loss, double *gnorm) {
    gpt_fixture f;
    if (!fixture_open(&f, MO_BACKEND_CPU, &c, 3)) return 0;
    int ok = 1;
    for (int i = 0; i < steps && ok; i++) {
        ok = CHECK_OK(mo_gpt_step(f.m));
        loss[i] = f.m->last_loss;
        gnorm[i] = f.m->last_grad_norm;
    }
    fixture_close(&f);
    return ok;
}

// Over 50 steps of AdamW (lr 1e-3) the 16-bit runs stay within a fixed distance of fp32: bf16 keeps
// 8 significant bits, so each rounded activation is off by up to 2^-9 relative; over 2 blocks and 50
// steps the measured gap is a few 1e-3 in a loss of ~4 (the tolerance, 0.05 absolute, is ~10x that and
// far below the 1.0 the loss falls by). fp16 keeps 11 bits: 0.01. The gradient norm (unscaled: a
// scaler that forgot to divide by its scale reports 65536x) must agree within 2% over the first 10
// steps (measured: about 1e-3); later Adam's norm spikes (0.93 -> 1.32 -> 0.96 in fp32) amplify the
// small differences into 10-20%, so later norms are not compared.
// AdamW alone would hide a missing unscale (it is invariant to a gradient scale), so the norm is the check.
static void test_tracks_fp32(void) {
    enum { STEPS = 50 };
    double l32[STEPS], g32[STEPS];
    if (!train(mixed_config(MO_F32), STEPS, l32, g32)) return;
    CHECK_MSG(l32[STEPS - 1] < l32[0] - 1.0, "fp32 loss did not fall: %.4f -> %.4f", l32[0], l32[STEPS - 1]);
    for (int d = 0; d < 2; d++) {
        double l16[STEPS], g16[STEPS];
        if (!train(mixed_config(DTS[d]), STEPS, l16, g16)) return;
        double tol = DTS[d] == MO_BF16 ? 0.05 : 0.01, worst = 0, worst_g = 0;
        for (int i = 0; i < STEPS; i++) {
            worst = fmax(worst, fabs(l16[i] - l32[i]));
            if (i < 10) worst_g = fmax(worst_g, fabs(g16[i] - g32[i]) / g32[i]);
        }
        printf("  %s vs fp32 over %d steps: worst |loss diff| %.2e (tol %.2g), worst grad-norm rel diff (first 10 steps) %.2e; loss %.4f -> %.4f\n",
               mo_dtype_name(DTS[d]), STEPS, worst, tol, worst_g, l16[0], l16[STEPS - 1]);
        CHECK_MSG(worst <= tol, "%s loss strays from fp32 by %.3g", mo_dtype_name(DTS[d]), worst);
        CHECK_MSG(worst_g <= 0.02, "%s gradient norm strays from fp32 by %.3g relative", mo_dtype_name(DTS[d]), worst_g);
    }
}

// The scaler: an injected inf skips the update (parameters, Adam state and the step count unchanged)
// and halves the scale; scaler_interval clean steps double it.
static void test_scaler_inject(void) {
    mo_gpt_config c = mixed_config(MO_F16);
    c.loss_scale_init = 1024.0f;
    c.scaler_interval = 3;
    gpt_fixture f;
    if (!fixture_open(&f, MO_BACKEND_CPU, &c, 3)) return;
    mo_gpt *m = f.m;
    size_t n = m->num_params;
    CHECK(m->loss_scale == 1024.0f);
    CHECK_OK(mo_gpt_step(m)); // one clean step first, so the Adam state is not all zeros
    float *p0 = malloc(n * sizeof(float)), *m0 = malloc(n * sizeof(float));
    uint16_t *w0 = malloc(n * sizeof(uint16_t));
    memcpy(p0, m->params, n * sizeof(float));
    memcpy(m0, m->adam_m, n * sizeof(float));
    memcpy(w0, m->wparams, n * sizeof(uint16_t));
    m->inject_nonfinite = 1;
    CHECK_OK(mo_gpt_step(m));
    CHECK_MSG(m->last_skipped == 1 && m->skipped_steps == 1, "inf: step not skipped (skipped %d)", m->skipped_steps);
    CHECK_MSG(m->loss_scale == 512.0f, "inf: scale %g, want 512", (double)m->loss_scale);
    CHECK_MSG(m->step == 1, "inf: optimizer step count %d, want 1", m->step);
    CHECK(memcmp(p0, m->params, n * sizeof(float)) == 0);
    CHECK(memcmp(m0, m->adam_m, n * sizeof(float)) == 0);
    CHECK(memcmp(w0, m->wparams, n * sizeof(uint16_t)) == 0);
    // Three clean steps: 512 -> 1024; three more: 2048. Each updates the parameters.
    for (int i = 0; i < 6; i++) {
        CHECK_OK(mo_gpt_step(m));
        CHECK(m->last_skipped == 0);
        if (i == 2) CHECK_MSG(m->loss_scale == 1024.0f, "after 3 clean steps: scale %g, want 1024", (double)m->loss_scale);
    }
    CHECK_MSG(m->loss_scale == 2048.0f, "after 6 clean steps: scale %g, want 2048", (double)m->loss_scale);
    CHECK(m->step == 7 && m->skipped_steps == 1);
    CHECK(memcmp(p0, m->params, n * sizeof(float)) != 0); // the clean steps updated them
    free(p0); free(m0); free(w0);
    fixture_close(&f);
}

// A real overflow: a scale of 2^24 makes the fp16 dlogits (up to scale / (B*T)) overflow to inf; the
// scaler must skip and halve until the gradients are finite, then train normally.
static void test_scaler_overflow(void) {
    mo_gpt_config c = mixed_config(MO_F16);
    c.loss_scale_init = 16777216.0f;
    gpt_fixture f;
    if (!fixture_open(&f, MO_BACKEND_CPU, &c, 3)) return;
    mo_gpt *m = f.m;
    for (int i = 0; i < 12; i++) CHECK_OK(mo_gpt_step(m));
    printf("  fp16 from scale 2^24: %d steps skipped, scale now %g, %d updates, loss %.4f\n", m->skipped_steps,
           (double)m->loss_scale, m->step, m->last_loss);
    CHECK_MSG(m->skipped_steps >= 1, "no step was skipped at scale 2^24");
    CHECK(m->loss_scale == 16777216.0f / (float)(1 << m->skipped_steps));
    CHECK(m->step + m->skipped_steps == 12);
    CHECK(m->step >= 1 && isfinite(m->last_loss) && isfinite(m->last_grad_norm));
    int finite = 1;
    for (size_t i = 0; i < m->num_params; i++) finite &= isfinite(m->params[i]);
    CHECK_MSG(finite, "a parameter became inf/nan");
    fixture_close(&f);
}

static float *grads_of(mo_gpt_config c, double *loss) {
    gpt_fixture f;
    if (!fixture_open(&f, MO_BACKEND_CPU, &c, 11)) return NULL;
    CHECK_OK(mo_gpt_forward_backward(f.m));
    *loss = f.m->last_loss;
    float *g = malloc(f.m->num_params * sizeof(float));
    memcpy(g, f.m->grads, f.m->num_params * sizeof(float));
    fixture_close(&f);
    return g;
}

// Gradients with the context's epilogue fusions forced on (1) or off (0), or left at the default (-1), under
// a MEMOPT_DBIAS mode; *fcb_off, *fcb_n (may be NULL): where fc's bias gradient lies in them.
static float *grads_ctx(mo_gpt_config c, int fuse, int dbias_mode, double *loss, size_t *fcb_off, size_t *fcb_n) {
    gpt_fixture f;
    if (!fixture_open(&f, MO_BACKEND_CPU, &c, 11)) return NULL;
    if (fuse >= 0) f.ctx->fuse_epilogues = fuse;
    f.ctx->dbias_mode = dbias_mode;
    CHECK_OK(mo_gpt_forward_backward(f.m));
    *loss = f.m->last_loss;
    if (fcb_off) *fcb_off = (size_t)(f.m->grad_ptr[GPT_FCB] - f.m->grads);
    if (fcb_n) *fcb_n = f.m->param_sizes[GPT_FCB];
    float *g = malloc(f.m->num_params * sizeof(float));
    memcpy(g, f.m->grads, f.m->num_params * sizeof(float));
    fixture_close(&f);
    return g;
}
static float *grads_fuse(mo_gpt_config c, int fuse, double *loss) {
    return grads_ctx(c, fuse, MO_DBIAS_NARROW, loss, NULL, NULL);
}

// MEMOPT_DBIAS=gelu: fc's bias gradient from the fcproj dinp op, in bf16 the sum of the unrounded values
// rounded once to bf16 (the cuBLASLt epilogue's form) instead of the fp32 sum of the rounded ones. Every
// other gradient and the loss keep their bits; fc's bias differs (the mode ran) by less than 2 bf16 ulps
// relative (8e-3; measured below), where a double add, a missing one or a sum over the wrong values is
// O(1). fp16 keeps the reduction over the rounded dinp, in the same order: every bit the default's.
static void test_dbias_gelu(void) {
    for (int d = 0; d < 2; d++) {
        mo_gpt_config c = mixed_config(DTS[d]);
        double l0 = 0, l1 = 0;
        size_t off = 0, n_fcb = 0, off1 = 0, n1 = 0;
        float *g0 = grads_ctx(c, -1, MO_DBIAS_NARROW, &l0, &off, &n_fcb);
        float *g1 = grads_ctx(c, -1, MO_DBIAS_GELU, &l1, &off1, &n1);
        size_t n = mo_gpt_num_params(&c);
        if (!g0 || !g1) { free(g0); free(g1); continue; }
        const char *pn = mo_dtype_name(DTS[d]);
        CHECK_MSG(l0 == l1, "%s MEMOPT_DBIAS=gelu: loss %.9g vs %.9g", pn, l1, l0);
        CHECK_MSG(memcmp(g0, g1, off * sizeof(float)) == 0 &&
                      memcmp(g0 + off + n_fcb, g1 + off + n_fcb, (n - off - n_fcb) * sizeof(float)) == 0,
                  "%s MEMOPT_DBIAS=gelu: a gradient other than fc's bias changed", pn);
        double rel = test_rel_error(g1 + off, g0 + off, n_fcb);
        printf("MEMOPT_DBIAS=gelu %s: fc bias gradient rel L2 %.3e against the default\n", pn, rel);
        if (DTS[d] == MO_BF16) {
            CHECK_MSG(rel > 0 && rel <= 8e-3, "bf16 MEMOPT_DBIAS=gelu: fc bias gradient rel L2 %.3e (want (0, 8e-3])", rel);
        } else {
            CHECK_MSG(rel == 0, "fp16 MEMOPT_DBIAS=gelu: fc bias gradient rel L2 %.3e (want the default's bits)", rel);
        }
        free(g0);
        free(g1);
    }
}

// The projections' bias gradients from the LayerNorm backwards (MEMOPT_LN_DSUM, the default) against the
// GEMMs' own reduction (MEMOPT_LN_DSUM=0): on the cpu the same sums in the same order (double, row order),
// so every gradient and the loss keep their bits, with and without accumulation, full and selective
// checkpointing and MEMOPT_DBIAS=gelu (the fcproj GEMM that also sums fc's bias then takes no bias of its own), and the
// summing backward ran 2 L times a micro-batch (block l's ln2 for attproj l, ln1 for fcproj l - 1, the
// final LayerNorm for fcproj L - 1; none in fp32). A bias summed into the wrong layer, twice or not at all
// changes bits; a wiring that never takes the summing op fails the count.
static void test_ln_dsum(void) {
    const mo_dtype dts[] = {MO_BF16, MO_F16, MO_F32};
    for (int d = 0; d < 3; d++)
        for (int v = 0; v < 5; v++) {
            mo_gpt_config c = mixed_config(dts[d]);
            if (v == 1) c.accum = 2;
            if (v == 2) c.ckpt = MO_CKPT_FULL;
            if (v == 3) c.ckpt = MO_CKPT_SELECTIVE;
            float *g[2] = {NULL, NULL};
            double loss[2] = {0, 0};
            long runs[2] = {0, 0};
            size_t n = mo_gpt_num_params(&c);
            for (int on = 0; on < 2; on++) {
                gpt_fixture f;
                if (!fixture_open(&f, MO_BACKEND_CPU, &c, 11)) break;
                f.ctx->ln_dsum = on;
                if (v == 4) f.ctx->dbias_mode = MO_DBIAS_GELU;
                CHECK_OK(mo_gpt_forward_backward(f.m));
                loss[on] = f.m->last_loss;
                runs[on] = f.ctx->ln_dsum_runs;
                g[on] = malloc(n * sizeof(float));
                memcpy(g[on], f.m->grads, n * sizeof(float));
                fixture_close(&f);
            }
            if (g[0] && g[1]) {
                const char *pn = mo_dtype_name(dts[d]);
                long want = dts[d] == MO_F32 ? 0 : 2L * c.layers * c.accum;
                CHECK_MSG(runs[0] == 0 && runs[1] == want, "%s variant %d MEMOPT_LN_DSUM: %ld summing backwards (want %ld), %ld off",
                          pn, v, runs[1], want, runs[0]);
                CHECK_MSG(loss[0] == loss[1], "%s variant %d MEMOPT_LN_DSUM: loss %.9g vs %.9g", pn, v, loss[1], loss[0]);
                CHECK_MSG(memcmp(g[0], g[1], n * sizeof(float)) == 0, "%s variant %d MEMOPT_LN_DSUM: gradients differ", pn, v);
            }
            free(g[0]);
            free(g[1]);
        }
}

// The epilogue fusions (residual add and GELU backward inside the GEMMs) against the unfused ops. fp32:
// the cpu reference of a fused op runs the unfused pair, so bit-identical. 16 bits: the fused op rounds
// once where the pair rounds twice (the GEMM output, then the add / the GELU backward), one 16-bit ulp
// of difference at those points: the gradients agree to relative L2 2e-2 in bf16 (8 bits; measured
// 3.1e-3 on this config) and 3e-3 in fp16 (11 bits; measured 4.2e-4), the loss to 1e-3 relative
// (measured 1.3e-5). Identical bits in 16 bits would mean the fused ops never ran.
static void test_epilogue_fusion(void) {
    const mo_dtype dts[] = {MO_F32, MO_BF16, MO_F16};
    for (int d = 0; d < 3; d++) {
        mo_gpt_config c = mixed_config(dts[d]);
        double l0 = 0, l1 = 0;
        float *g0 = grads_fuse(c, 0, &l0), *g1 = grads_fuse(c, 1, &l1);
        size_t n = mo_gpt_num_params(&c);
        if (!g0 || !g1) { free(g0); free(g1); continue; }
        if (dts[d] == MO_F32) {
            CHECK_MSG(l0 == l1 && memcmp(g0, g1, n * sizeof(float)) == 0, "fp32: fused epilogues changed the bits");
        } else {
            double rel = test_rel_error(g1, g0, n);
            printf("epilogue fusion %s: gradients rel L2 %.3e, loss %.6f vs %.6f\n", mo_dtype_name(dts[d]), rel, l1, l0);
            CHECK_MSG(rel <= (dts[d] == MO_BF16 ? 2e-2 : 3e-3), "%s: fused vs unfused gradients rel L2 %.3e",
                      mo_dtype_name(dts[d]), rel);
            CHECK_MSG(fabs(l1 - l0) <= 1e-3 * fabs(l0), "%s: loss %.6f fused vs %.6f", mo_dtype_name(dts[d]), l1, l0);
            CHECK_MSG(rel > 0, "%s: fused and unfused gave the same bits (the fusion did not run)", mo_dtype_name(dts[d]));
        }
        free(g0);
        free(g1);
    }
}

// Every checkpoint policy recomputes the same 16-bit values in the same order: bit-identical.
static void test_checkpoint_bit_identical(void) {
    for (int d = 0; d < 2; d++)
        for (int fused = 0; fused <= 1; fused++) {
            mo_gpt_config c = mixed_config(DTS[d]);
            c.layers = 4;
            c.attn_fused = fused;
            double l0 = 0;
            float *g0 = grads_of(c, &l0);
            size_t n = mo_gpt_num_params(&c);
            struct { mo_ckpt_kind k; int every; } pol[] = {
                {MO_CKPT_FULL, 0}, {MO_CKPT_EVERY, 3}, {MO_CKPT_SQRT, 0}, {MO_CKPT_SELECTIVE, 0}};
            for (size_t i = 0; i < sizeof pol / sizeof pol[0]; i++) {
                mo_gpt_config e = c;
                e.ckpt = pol[i].k;
                e.ckpt_every = pol[i].every;
                double l1 = 0;
                float *g1 = grads_of(e, &l1);
                CHECK_MSG(g0 && g1 && l0 == l1 && memcmp(g0, g1, n * sizeof(float)) == 0,
                          "%s attn %s ckpt %d: loss or gradients differ from none", mo_dtype_name(DTS[d]),
                          fused ? "fused" : "materialized", (int)pol[i].k);
                free(g1);
            }
            free(g0);
        }
}

// Accumulation in 16 bits: every per-row value (activations, dlogits with the same dloss) is computed
// exactly as in the full batch; only the fp32 sums over rows (dweight, dbias, LayerNorm's dweight) are
// grouped differently, so the gradients agree to fp32 rounding: relative L2 1e-5, as in fp32.
static void test_accumulation(void) {
    for (int d = 0; d < 2; d++) {
        mo_gpt_config c = mixed_config(DTS[d]);
        c.batch = 8;
        double l1 = 0;
        float *g1 = grads_of(c, &l1);
        size_t n = mo_gpt_num_params(&c);
        for (int K = 2; K <= 8; K *= 2) {
            mo_gpt_config e = c;
            e.accum = K;
            double lk = 0;
            float *gk = grads_of(e, &lk);
            CHECK_REL(gk, g1, n, 1e-5);
            CHECK_MSG(fabs(lk - l1) <= 1e-6 * fabs(l1), "%s accum %d: loss %.9g vs %.9g", mo_dtype_name(DTS[d]), K, lk, l1);
            free(gk);
        }
        free(g1);
    }
}

// The dry backend's peaks equal the cpu backend's for every combination of a small grid.
static void test_dry_equals_cpu_grid(void) {
    const mo_dtype dts[] = {MO_F32, MO_BF16, MO_F16};
    struct { mo_ckpt_kind k; int every; } pol[] = {{MO_CKPT_NONE, 0}, {MO_CKPT_FULL, 0}, {MO_CKPT_EVERY, 2}, {MO_CKPT_SELECTIVE, 0}};
    const int accums[] = {1, 2};
    int rows = 0, bad = 0;
    for (int d = 0; d < 3; d++)
        for (size_t p = 0; p < sizeof pol / sizeof pol[0]; p++)
            for (int a = 0; a < 2; a++)
                for (int fused = 0; fused <= 1; fused++) {
                    mo_gpt_config c = mixed_config(dts[d]);
                    c.layers = 3; c.batch = 4;
                    c.ckpt = pol[p].k; c.ckpt_every = pol[p].every; c.accum = accums[a]; c.attn_fused = fused;
                    mo_alloc_stats s[2];
                    for (int b = 0; b < 2; b++)
                        if (!fixture_two_step_stats(b == 0 ? MO_BACKEND_CPU : MO_BACKEND_DRY, &c, 5, &s[b])) return;
                    rows++;
                    int same = s[0].peak_allocated_bytes == s[1].peak_allocated_bytes &&
                               s[0].peak_reserved_bytes == s[1].peak_reserved_bytes && s[0].num_allocs == s[1].num_allocs;
                    for (int k = 0; k < MO_CAT_COUNT; k++) same &= s[0].peak_by_cat[k] == s[1].peak_by_cat[k];
                    if (!same) bad++;
                    CHECK_MSG(same, "%s ckpt %d accum %d fused %d: cpu peak %llu/%llu, dry %llu/%llu", mo_dtype_name(dts[d]),
                              (int)pol[p].k, accums[a], fused, (unsigned long long)s[0].peak_allocated_bytes,
                              (unsigned long long)s[0].peak_reserved_bytes, (unsigned long long)s[1].peak_allocated_bytes,
                              (unsigned long long)s[1].peak_reserved_bytes);
                }
    printf("  dry == cpu peaks: %d of %d grid rows\n", rows - bad, rows);
}

// --ckpt full keeps exactly one block input (B,T,C) in the activation dtype per layer between forward
// and backward: 4*B*T*C bytes in fp32, 2*B*T*C in fp16/bf16. Adding a layer must add exactly that to
// the activation peak (the rest of the peak, one block's internals in backward or the logits, does
// not depend on the layer count). Shapes keep every size a multiple of the allocator's 512 B.
static void test_full_ckpt_activation_figure(void) {
    const mo_dtype dts[] = {MO_F32, MO_BF16, MO_F16};
    for (int d = 0; d < 3; d++) {
        uint64_t peak[2];
        mo_gpt_config c = mixed_config(dts[d]);
        c.hidden = 64; c.heads = 4; c.seq = 64; c.batch = 4; c.vocab = 128;
        c.ckpt = MO_CKPT_FULL;
        for (int i = 0; i < 2; i++) {
            c.layers = 6 + i;
            gpt_fixture f;
            if (!fixture_open(&f, MO_BACKEND_DRY, &c, 5)) return;
            mo_allocator_reset_peaks(f.alloc);
            CHECK_OK(mo_gpt_forward_backward(f.m));
            mo_alloc_stats s;
            mo_allocator_stats(f.alloc, &s);
            peak[i] = s.peak_by_cat[MO_CAT_ACTIVATION];
            fixture_close(&f);
        }
        uint64_t want = (uint64_t)c.batch * c.seq * c.hidden * mo_dtype_size(dts[d]);
        printf("  ckpt full, %s: activation peak %llu (L=6) -> %llu (L=7): +%llu bytes per layer, B*T*C*%zu = %llu\n",
               mo_dtype_name(dts[d]), (unsigned long long)peak[0], (unsigned long long)peak[1],
               (unsigned long long)(peak[1] - peak[0]), mo_dtype_size(dts[d]), (unsigned long long)want);
        CHECK_EQ_U64(peak[1] - peak[0], want);
    }
}

int main(void) {
    test_seed_from_time();
    test_tracks_fp32();
    test_scaler_inject();
    test_scaler_overflow();
    test_checkpoint_bit_identical();
    test_epilogue_fusion();
    test_dbias_gelu();
    test_ln_dsum();
    test_accumulation();
    test_dry_equals_cpu_grid();
    test_full_ckpt_activation_figure();
    return test_finish();
}
