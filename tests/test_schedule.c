// The generic schedule (strategies/schedule.h) on a toy model, on the cpu backend: a chain of L
// scalar-weight blocks out = w_l * in over n floats, the head's loss sum(h), so every gradient is known
// in closed form. Checks what a model plugging in relies on: the modes each block's forward gets under
// every checkpoint policy (KEEP / DROP in forward; RECOMPUTE for a segment's blocks and
// RECOMPUTE_NO_OUT for its last one in backward), that a side effect guarded by mo_sched_is_recompute
// (a batch-norm running statistic) happens exactly once per block per micro-batch, that the gradients
// are the same bits with and without checkpointing and accumulate over micro-batches, that nothing
// is left allocated after a step, and that an out-of-memory midway unwinds every tensor.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "kernels/ctx.h"
#include "models/ckpt_layout.h"
#include "strategies/alloc.h"
#include "strategies/schedule.h"
#include "testlib.h"

enum { MAXL = 8, MAXLOG = 256 };

typedef struct toy {
    mo_ctx *ctx;
    int L, n, accum;
    float w[MAXL], gw[MAXL];  // the weights and their gradients (host: the cpu backend's memory is host memory)
    const float *input;       // (accum * n)
    int side_effects[MAXL];   // the "running statistics" updates per block
    char log[MAXLOG][8];      // "F0k" forward of block 0 in mode k, "B2" backward of block 2, ...
    int nlog;
    int fail_at_alloc;        // > 0: the fail_at_alloc-th allocation fails (out of memory)
    int allocs;
} toy;

typedef struct toy_blk { const float *in; float *keep; } toy_blk; // keep: (n) a copy of in, for backward

static void logf_(toy *t, const char *s) { if (t->nlog < MAXLOG) snprintf(t->log[t->nlog++], 8, "%s", s); }

static mo_status toy_alloc(toy *t, void **p) {
    if (t->fail_at_alloc > 0 && ++t->allocs == t->fail_at_alloc) return MO_FAIL(MO_ERR_OOM, "toy: injected out of memory");
    return mo_alloc(t->ctx->alloc, (size_t)t->n * sizeof(float), MO_CAT_ACTIVATION, p);
}
static void toy_free(toy *t, void *p) { if (p) mo_free(t->ctx->alloc, p); }

static mo_status input_fwd(void *mp, void *sp, int micro, void **x0) {
    toy *t = mp;
    (void)sp;
    MO_TRY(toy_alloc(t, x0));
    memcpy(*x0, t->input + (size_t)micro * t->n, (size_t)t->n * sizeof(float));
    logf_(t, "I");
    return MO_OK;
}

static mo_status block_fwd(void *mp, void *sp, void *bp, int l, int micro, const void *in, void **out, mo_sched_fwd mode) {
    toy *t = mp;
    toy_blk *b = bp;
    (void)sp; (void)micro;
    char s[8];
    snprintf(s, sizeof s, "F%d%d", l, (int)mode);
    logf_(t, s);
    if (!mo_sched_is_recompute(mode)) t->side_effects[l]++;
    b->in = in;
    MO_TRY(toy_alloc(t, (void **)&b->keep));
    memcpy(b->keep, in, (size_t)t->n * sizeof(float));
    if (mode != MO_SCHED_FWD_RECOMPUTE_NO_OUT) {
        MO_TRY(toy_alloc(t, out));
        for (int i = 0; i < t->n; i++) ((float *)*out)[i] = t->w[l] * ((const float *)in)[i];
    }
    if (mode == MO_SCHED_FWD_DROP) { toy_free(t, b->keep); b->keep = NULL; }
    return MO_OK;
}

static mo_status head_fwd(void *mp, void *sp, int micro, const void *h) { (void)sp; (void)micro; (void)h; logf_(mp, "H"); return MO_OK; }

static mo_status head_bwd(void *mp, void *sp, int micro, const void *h, void **d) {
    toy *t = mp;
    (void)sp; (void)micro; (void)h;
    MO_TRY(toy_alloc(t, d));
    for (int i = 0; i < t->n; i++) ((float *)*d)[i] = 1.0f; // d sum(h) / dh
    logf_(t, "h");
    return MO_OK;
}

static mo_status block_bwd(void *mp, void *sp, void *bp, int l, int micro, const void *in, void *d) {
    toy *t = mp;
    toy_blk *b = bp;
    (void)sp; (void)micro;
    char s[8];
    snprintf(s, sizeof s, "B%d", l);
    logf_(t, s);
    if (!b->keep || b->in != in) return MO_FAIL(MO_ERR_INTERNAL, "toy: block %d's backward without its forward", l);
    float *dd = d;
    float g = 0;
    for (int i = 0; i < t->n; i++) { g += b->keep[i] * dd[i]; dd[i] *= t->w[l]; }
    t->gw[l] += g;
    toy_free(t, b->keep);
    b->keep = NULL;
    return MO_OK;
}

static void block_unwind(void *mp, void *bp) { toy_blk *b = bp; toy_free(mp, b->keep); b->keep = NULL; }
static void slot_unwind(void *mp, void *sp) { (void)mp; (void)sp; }

static const mo_sched_model toy_ops = {
    .slot_bytes = 0, .block_bytes = sizeof(toy_blk),
    .input_fwd = input_fwd, .block_fwd = block_fwd, .head_fwd = head_fwd, .head_bwd = head_bwd,
    .block_bwd = block_bwd, .input_bwd = NULL, .block_unwind = block_unwind, .slot_unwind = slot_unwind,
};

// One forward_backward of the toy under a policy; its log as one string.
static mo_status run(toy *t, mo_ckpt_kind kind, int k, char *log, size_t logn) {
    memset(t->gw, 0, sizeof t->gw);
    memset(t->side_effects, 0, sizeof t->side_effects);
    t->nlog = 0;
    t->allocs = 0;
    mo_sched_config c = {.ctx = t->ctx, .blocks = t->L, .accum = t->accum, .seg = mo_ckpt_layout_of(kind, k, t->L), .pp = 1};
    mo_status st = mo_sched_forward_backward(&c, &toy_ops, t, NULL);
    log[0] = 0;
    for (int i = 0; i < t->nlog; i++) {
        strncat(log, t->log[i], logn - strlen(log) - 1);
        strncat(log, " ", logn - strlen(log) - 1);
    }
    return st;
}

int main(void) {
    mo_allocator *a = NULL;
    mo_ctx *x = NULL;
    CHECK_OK(mo_allocator_create(&a, MO_ALLOC_CACHING, MO_BACKEND_CPU, 0, NULL));
    CHECK_OK(mo_ctx_create(&x, MO_BACKEND_CPU, a));
    if (!a || !x) return test_finish();
    mo_alloc_stats s0, s1;
    mo_allocator_stats(a, &s0);

    float input[2 * 16];
    for (int i = 0; i < 32; i++) input[i] = 0.25f + 0.01f * (float)i;
    toy t;
    memset(&t, 0, sizeof t);
    t.ctx = x; t.L = 5; t.n = 16; t.accum = 1; t.input = input;
    for (int l = 0; l < t.L; l++) t.w[l] = 1.0f + 0.1f * (float)l;
    char log[2048];

    // none: every block KEEP (mode 0), backward last first, no recompute.
    CHECK_OK(run(&t, MO_CKPT_NONE, 0, log, sizeof log));
    CHECK_MSG(!strcmp(log, "I F00 F10 F20 F30 F40 H h B4 B3 B2 B1 B0 "), "none: %s", log);
    float g_none[MAXL];
    memcpy(g_none, t.gw, sizeof g_none);
    // The closed form: d loss / d w_l = sum(x) * prod_{j != l} w_j.
    double sx = 0;
    for (int i = 0; i < t.n; i++) sx += input[i];
    for (int l = 0; l < t.L; l++) {
        double p = sx;
        for (int j = 0; j < t.L; j++) if (j != l) p *= t.w[j];
        CHECK_MSG(fabs(g_none[l] - p) <= 1e-5 * fabs(p), "none: grad w%d %g, want %g", l, (double)g_none[l], p);
    }
    // every:2 over 5 blocks: segments [0,1] [2,3] [4], all DROP (1) in forward; in backward the last
    // segment first, each recomputed (RECOMPUTE 2, the segment's last block RECOMPUTE_NO_OUT 3).
    CHECK_OK(run(&t, MO_CKPT_EVERY, 2, log, sizeof log));
    CHECK_MSG(!strcmp(log, "I F01 F11 F21 F31 F41 H h F43 B4 F22 F33 B3 B2 F02 F13 B1 B0 "), "every:2: %s", log);
    CHECK_MSG(!memcmp(g_none, t.gw, sizeof g_none), "every:2: gradients differ from none's bits");
    for (int l = 0; l < t.L; l++) CHECK_MSG(t.side_effects[l] == 1, "every:2: block %d's side effect ran %d times", l, t.side_effects[l]);
    // segments:2 over 5 (checkpoint_sequential): one checkpointed segment of 2 blocks, the last 3 kept.
    CHECK_OK(run(&t, MO_CKPT_SEGMENTS, 2, log, sizeof log));
    CHECK_MSG(!strcmp(log, "I F01 F11 F20 F30 F40 H h B4 B3 B2 F02 F13 B1 B0 "), "segments:2: %s", log);
    CHECK_MSG(!memcmp(g_none, t.gw, sizeof g_none), "segments:2: gradients differ from none's bits");
    // full and sqrt: the same bits, one side effect per block.
    mo_ckpt_kind kinds[] = {MO_CKPT_FULL, MO_CKPT_SQRT};
    for (int i = 0; i < 2; i++) {
        CHECK_OK(run(&t, kinds[i], 0, log, sizeof log));
        CHECK_MSG(!memcmp(g_none, t.gw, sizeof g_none), "ckpt %d: gradients differ from none's bits", (int)kinds[i]);
        for (int l = 0; l < t.L; l++) CHECK(t.side_effects[l] == 1);
    }
    mo_allocator_stats(a, &s1);
    CHECK_EQ_U64(s1.allocated_bytes, s0.allocated_bytes); // the stream and every internal freed

    // Accumulation: two micro-batches add their gradients (the second batch's half added to the first's).
    t.accum = 2;
    CHECK_OK(run(&t, MO_CKPT_FULL, 0, log, sizeof log));
    double sx2 = 0;
    for (int i = 0; i < 2 * t.n; i++) sx2 += input[i];
    for (int l = 0; l < t.L; l++) {
        double p = sx2;
        for (int j = 0; j < t.L; j++) if (j != l) p *= t.w[j];
        CHECK_MSG(fabs(t.gw[l] - p) <= 1e-5 * fabs(p), "accum 2: grad w%d %g, want %g", l, (double)t.gw[l], p);
        CHECK_MSG(t.side_effects[l] == 2, "accum 2: block %d's side effect ran %d times", l, t.side_effects[l]);
    }

    // Out of memory at every allocation in turn: the status comes back and nothing stays allocated.
    t.accum = 1;
    int unwound = 0, tries = 0;
    for (int f = 1; f < 40; f++) {
        t.fail_at_alloc = f;
        mo_status st = run(&t, MO_CKPT_EVERY, 2, log, sizeof log);
        if (st == MO_OK) break;
        tries++;
        mo_allocator_stats(a, &s1);
        if (st == MO_ERR_OOM && s1.allocated_bytes == s0.allocated_bytes) unwound++;
    }
    t.fail_at_alloc = 0;
    CHECK_MSG(tries > 10 && unwound == tries, "out of memory: %d of %d failures unwound", unwound, tries);

    // Bad configurations are refused, not run.
    mo_sched_config bad = {.ctx = x, .blocks = 0, .accum = 1, .pp = 1};
    CHECK(mo_sched_forward_backward(&bad, &toy_ops, &t, NULL) == MO_ERR_INVALID);
    mo_sched_config nopipe = {.ctx = x, .blocks = 2, .accum = 1, .pp = 2, .stage = 0, .pp_comm = NULL};
    CHECK(mo_sched_forward_backward(&nopipe, &toy_ops, &t, NULL) == MO_ERR_INVALID);
    mo_sched_config badseg = {.ctx = x, .blocks = 2, .accum = 1, .pp = 1, .seg = {.len = 0, .blocks = 2}};
    CHECK(mo_sched_forward_backward(&badseg, &toy_ops, &t, NULL) == MO_ERR_INVALID);
    badseg.seg = (mo_ckpt_layout){.len = 1, .blocks = 3};
    CHECK(mo_sched_forward_backward(&badseg, &toy_ops, &t, NULL) == MO_ERR_INVALID);

    // The update: the scaler skips on an injected inf and halves; AdamW moves the weights otherwise.
    float p[4] = {1, 2, 3, 4}, g[4] = {0.5f, -0.5f, 0.25f, 0}, mm[4] = {0}, vv[4] = {0};
    mo_sched_optim o = {.ctx = x, .dt = MO_F32, .params = p, .grads = g, .adam_m = mm, .adam_v = vv, .wparams = p, .n = 4,
                        .lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_clip = 1.0f};
    mo_sched_scaler sc;
    mo_sched_scaler_init(&sc, 1, 2);
    CHECK(sc.scale == 65536.0f);
    int step = 0;
    mo_sched_update_info info;
    sc.inject = 1;
    CHECK_OK(mo_sched_update(&o, &sc, &step, &info));
    CHECK(info.skipped == 1 && sc.skipped == 1 && sc.scale == 32768.0f && step == 0 && p[0] == 1.0f);
    CHECK_OK(mo_sched_update(&o, &sc, &step, &info));
    CHECK_OK(mo_sched_update(&o, &sc, &step, &info));
    CHECK_MSG(info.skipped == 0 && step == 2 && sc.scale == 65536.0f, "2 clean steps: step %d scale %g", step, (double)sc.scale);
    CHECK_MSG(p[0] < 1.0f && p[1] > 2.0f && p[3] == 4.0f, "AdamW: %g %g %g %g", (double)p[0], (double)p[1], (double)p[2], (double)p[3]);
    // The last clean update's norm is unscaled: sqrt(0.5^2 + 0.5^2 + 0.25^2) = 0.75 over the scale it ran at.
    // (the third call ran at 32768: the scale grows after its check)
    CHECK_MSG(fabs(info.grad_norm - 0.75 / 32768.0) <= 1e-6 * 0.75 / 32768.0, "grad norm %g, want 0.75 / 32768",
              info.grad_norm);

    // One step against its closed form. AdamW's first step moves w by lr * g' / (|g'| + eps) (the bias
    // corrections cancel), g' the unscaled, clipped gradient; eps 0.1 makes the step depend on g''s size,
    // so a wrong unscale or a missing clip shows in the weights (with eps 1e-8 AdamW hides both).
    {
        float q[3] = {1, 2, 3}, gq[3] = {0.5f, -0.5f, 0.25f}, m3[3] = {0}, v3[3] = {0};
        mo_sched_optim oc = {.ctx = x, .dt = MO_F32, .params = q, .grads = gq, .adam_m = m3, .adam_v = v3, .wparams = q,
                             .n = 3, .lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 0.1f, .grad_clip = 0.5f};
        mo_sched_scaler off;
        mo_sched_scaler_init(&off, 0, 2);
        int st1 = 0;
        CHECK_OK(mo_sched_update(&oc, &off, &st1, &info));
        const double norm = 0.75, c = 0.5 / norm, g0[3] = {0.5, -0.5, 0.25}, w0[3] = {1, 2, 3};
        CHECK_MSG(fabs(info.grad_norm - norm) <= 1e-6, "clip: grad norm %g, want %g", info.grad_norm, norm);
        for (int i = 0; i < 3; i++) {
            const double gc = g0[i] * c, want = w0[i] - 0.1 * gc / (fabs(gc) + 0.1);
            CHECK_MSG(fabs(q[i] - want) <= 1e-5, "clip: w%d %.7f, want %.7f", i, (double)q[i], want);
        }
    }

    mo_ctx_destroy(x);
    mo_allocator_destroy(a);
    return test_finish();
}
