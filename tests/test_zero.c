// Data parallelism with ZeRO sharding (models/gpt_zero.h) on the cpu and dry backends, ranks as
// threads with the local communicator:
//   - dp 2 and 4 at ZeRO levels 0..3, fp32 and bf16 (and fp16, accumulation, checkpointing on a few):
//     after 2 optimizer steps (clipping and weight decay on) the weights equal the unsharded model's
//     trained on the full batch within fp32 rounding, as do the loss and the last gradients;
//   - the initial weights are the unsharded model's, bit for bit;
//   - every rank's peaks on dry equal its peaks on cpu, to the byte;
//   - each rank's model-state bytes per allocator category are ZeRO's formula (Rajbhandari et al.
//     2020, section 5: (2 + 2 + K) Psi for 16-bit, levels 1/2/3 dividing the optimizer state, then
//     the gradients, then the parameters by Nd), exactly, and the transient units of levels 2 and 3
//     are what the design says (one block's gradient beside the outer tensors', one gathered unit);
//   - a bad --dp / --zero is refused naming the flag.
#include <math.h>
#include <stdio.h>
#include "models/gpt_zero.h"
#include "strategies/comm.h"
#include "tests/gpt_split_fixture.h"

// Tolerances. The dp ranks sum the same per-row terms as the unsharded model in another grouping (each
// rank's weight-gradient GEMM over its B/dp rows, then the rank-ordered sum over ranks; the norm's
// partial sums per shard), so in fp32 gradients and loss agree to fp32 rounding: relative L2 1e-5 per
// tensor, loss 1e-6 relative. The weights after 2 steps are compared by their change from the start
// (the update itself, about lr per element, not the weights' own size that would hide it): relative
// L2 of that change per tensor <= 1e-4 in fp32. AdamW divides by sqrt(v) + eps, which turns a 1e-7
// relative gradient difference into about as much in the update, except for near-zero gradients whose
// update m/(sqrt(v)+eps) is sign-sensitive; 1e-4 leaves room for those and is still 10x below what one
// wrong micro-batch or a missed reduction gives (those move the update by O(1)). bf16: the 16-bit
// working copy is rounded from the fp32 master, so a master that differs in its last fp32 bit can
// round to another bf16 value (2^-8 relative) at step 2, and the activations are rounded to bf16 after
// every op: 16-bit rounding, not fp32 rounding, bounds that case (1e-2 on the update, 1e-2 on the
// gradients, as test_gpt_split's 16-bit bound).
#define GRAD_TOL_F32 1e-5
#define LOSS_TOL_F32 1e-6
#define UPD_TOL_F32 1e-4
#define TOL_16 1e-2

static mo_gpt_config zero_config(mo_dtype dt) {
    mo_gpt_config c = split_config(); // L4 C32 H4 T8 B8 V37
    c.dtype = dt;
    c.grad_clip = 1.0f;        // the norm over the shards
    c.weight_decay = 0.1f;
    c.loss_scaling = dt == MO_F16;
    return c;
}

static mo_gpt_split_config zero_sc(int dp, int zero, mo_backend_kind be) {
    mo_gpt_split_config sc = split_sc(1, 1, be);
    sc.dp = dp;
    sc.zero = zero;
    return sc;
}

// Relative L2 per tensor of (got - init) against (want - init); the worst.
static double worst_update(const mo_gpt_config *c, const float *got, const float *want, const float *init, size_t n,
                           int *worst_p) {
    float *dg = malloc(n * sizeof(float)), *dw = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { dg[i] = got[i] - init[i]; dw[i] = want[i] - init[i]; }
    double e = split_worst_tensor(c, dg, dw, worst_p);
    free(dg);
    free(dw);
    return e;
}

typedef struct zcase { int dp, zero, accum; mo_ckpt_kind ckpt; mo_dtype dt; } zcase;

static void test_equal_unsharded(void) {
    zcase cases[64];
    int nc = 0;
    mo_dtype dts[2] = {MO_F32, MO_BF16};
    for (int d = 0; d < 2; d++)
        for (int dp = 2; dp <= 4; dp += 2)
            for (int z = 0; z <= 3; z++) cases[nc++] = (zcase){dp, z, 1, MO_CKPT_NONE, dts[d]};
    cases[nc++] = (zcase){2, 3, 2, MO_CKPT_FULL, MO_F32};  // accumulation (reduce-scatter per micro-batch) and recompute
    cases[nc++] = (zcase){2, 2, 2, MO_CKPT_NONE, MO_BF16};
    cases[nc++] = (zcase){4, 1, 2, MO_CKPT_SQRT, MO_F32};
    cases[nc++] = (zcase){2, 3, 1, MO_CKPT_NONE, MO_F16};  // the loss scaler's verdict over the shards
    cases[nc++] = (zcase){2, 1, 1, MO_CKPT_NONE, MO_F16};
    for (int i = 0; i < nc; i++) {
        const zcase *k = &cases[i];
        mo_gpt_config c = zero_config(k->dt);
        c.accum = k->accum; c.ckpt = k->ckpt;
        split_ref init, ref, got;
        int rep = 0;
        mo_gpt_config plain = c;
        plain.accum = 1; // the unsharded model on the full batch, in one micro-batch
        plain.ckpt = MO_CKPT_NONE;
        if (!split_ref_run(MO_BACKEND_CPU, plain, 5, 0, &init)) return;
        if (!split_ref_run(MO_BACKEND_CPU, plain, 5, 2, &ref)) { split_ref_free(&init); return; }
        if (!split_run(c, zero_sc(k->dp, k->zero, MO_BACKEND_CPU), 5, 2, &got, &rep)) {
            split_ref_free(&init); split_ref_free(&ref);
            continue;
        }
        int mixed = k->dt != MO_F32;
        double gtol = mixed ? TOL_16 : GRAD_TOL_F32, utol = mixed ? TOL_16 : UPD_TOL_F32, ltol = mixed ? TOL_16 : LOSS_TOL_F32;
        int pg = 0, pu = 0;
        double eg = split_worst_tensor(&c, got.grads, ref.grads, &pg);
        double eu = worst_update(&c, got.params, ref.params, init.params, ref.n, &pu);
        double el = fabs(got.loss - ref.loss) / fabs(ref.loss);
        char what[96];
        snprintf(what, sizeof what, "dp %d zero %d %s accum %d ckpt %d", k->dp, k->zero, mo_dtype_name(k->dt), k->accum,
                 (int)k->ckpt);
        CHECK_MSG(eg <= gtol, "%s: last gradients differ from the unsharded model's: worst %s rel L2 %.3g > %.0e", what,
                  split_pname[pg], eg, gtol);
        CHECK_MSG(eu <= utol, "%s: the 2-step update differs from the unsharded model's: worst %s rel L2 %.3g > %.0e", what,
                  split_pname[pu], eu, utol);
        CHECK_MSG(el <= ltol, "%s: loss %.9g, unsharded %.9g", what, got.loss, ref.loss);
        // Level 0 keeps a replica of everything on every rank: they must have the same bits.
        if (k->zero == 0) CHECK_MSG(rep, "%s: the replicas of level 0 differ between ranks", what);
        // The update is not zero (the test would pass on a model that never moved).
        double moved = 0;
        for (size_t j = 0; j < ref.n; j++) moved += fabs((double)ref.params[j] - init.params[j]);
        CHECK_MSG(moved > 0, "%s: the reference did not move", what);
        printf("  %-36s grads %.2e (%s)  update %.2e (%s)  loss %.2e\n", what, eg, split_pname[pg], eu, split_pname[pu], el);
        split_ref_free(&init); split_ref_free(&ref); split_ref_free(&got);
    }
}

static void test_init_is_unsharded(void) {
    for (int dt = 0; dt < 2; dt++) {
        mo_gpt_config c = zero_config(dt ? MO_BF16 : MO_F32);
        split_ref ref;
        if (!split_ref_run(MO_BACKEND_CPU, c, 3, 0, &ref)) return;
        for (int z = 0; z <= 3; z++) {
            mo_gpt_split *s = NULL;
            mo_gpt_split_config sc = zero_sc(4, z, MO_BACKEND_CPU);
            if (!CHECK_OK(mo_gpt_split_create(&s, &c, &sc))) continue;
            float *p = malloc(ref.n * sizeof(float));
            int eq = 0;
            CHECK_OK(mo_gpt_split_gather(s, 0, p, &eq));
            CHECK_MSG(!memcmp(p, ref.params, ref.n * sizeof(float)) && eq, "dp 4 zero %d %s: initial weights differ from the unsharded model's",
                      z, dt ? "bf16" : "fp32");
            free(p);
            mo_gpt_split_destroy(s);
        }
        split_ref_free(&ref);
    }
}

// One run of 2 steps; every rank's statistics after it (and, before the first step, the categories).
static int zero_stats(const mo_gpt_config *c, mo_gpt_split_config sc, mo_alloc_stats *after, mo_alloc_stats *built) {
    mo_gpt_split *s = NULL;
    if (!CHECK_OK(split_open(&s, c, &sc, 9))) return 0;
    int W = mo_gpt_split_world(s), ok = 1;
    for (int r = 0; r < W; r++) mo_allocator_stats(mo_gpt_split_allocator(s, r), &built[r]);
    for (int i = 0; i < 2 && ok; i++) ok = CHECK_OK(mo_gpt_split_step(s));
    for (int r = 0; r < W; r++) mo_allocator_stats(mo_gpt_split_allocator(s, r), &after[r]);
    mo_gpt_split_destroy(s);
    return ok;
}

static void test_dry_equals_cpu(void) {
    for (int dt = 0; dt < 2; dt++)
        for (int dp = 2; dp <= 4; dp += 2)
            for (int z = 0; z <= 3; z++)
                for (int v = 0; v < 2; v++) {
                    mo_gpt_config c = zero_config(dt ? MO_BF16 : MO_F32);
                    if (v) { c.accum = 2; c.ckpt = MO_CKPT_FULL; }
                    mo_alloc_stats cpu[4], dry[4], b0[4], b1[4];
                    if (!zero_stats(&c, zero_sc(dp, z, MO_BACKEND_CPU), cpu, b0)) continue;
                    if (!zero_stats(&c, zero_sc(dp, z, MO_BACKEND_DRY), dry, b1)) continue;
                    int same = 1;
                    for (int r = 0; r < dp; r++) {
                        int eq = cpu[r].peak_allocated_bytes == dry[r].peak_allocated_bytes &&
                                 cpu[r].peak_reserved_bytes == dry[r].peak_reserved_bytes &&
                                 !memcmp(cpu[r].peak_by_cat, dry[r].peak_by_cat, sizeof cpu[r].peak_by_cat);
                        CHECK_MSG(eq, "dp %d zero %d %s%s rank %d: cpu peak %llu/%llu, dry %llu/%llu", dp, z,
                                  dt ? "bf16" : "fp32", v ? " accum 2 ckpt full" : "", r,
                                  (unsigned long long)cpu[r].peak_allocated_bytes, (unsigned long long)cpu[r].peak_reserved_bytes,
                                  (unsigned long long)dry[r].peak_allocated_bytes, (unsigned long long)dry[r].peak_reserved_bytes);
                        same = same && eq;
                    }
                    if (!v)
                        printf("  dp %d zero %d %-4s dry == cpu on all ranks: %s (rank 0 peak %llu)\n", dp, z,
                               dt ? "bf16" : "fp32", same ? "yes" : "NO", (unsigned long long)cpu[0].peak_allocated_bytes);
                }
}

// ---- ZeRO's formula ---------------------------------------------------------------------------------
// Psi parameters; the paper's (2 + 2 + K) Psi for 16-bit training counts 16-bit weights (2), 16-bit
// gradients (2) and K = 12 bytes of fp32 master, m and v. This suite keeps fp32 gradients in every
// precision (DESIGN.md), so its 16-bit formula is (2 + 4 + 12) Psi, and fp32 training (4 + 4 + 8) Psi.
// Level 1 divides the optimizer state (master, m, v) by Nd, level 2 the gradients too, level 3 the
// parameters too. The shard is computed here independently of the implementation: units of Psi
// (level 1: the whole model) or the outer tensors and one per block (levels 2, 3), each padded to Nd
// chunks of a multiple of 256 elements.
static size_t up(size_t x, size_t k) { return (x + k - 1) / k * k; }
static size_t chunk_of(size_t n, int D) { return up((n + D - 1) / D, 256); }

typedef struct want_bytes { uint64_t param, grad, optim, master; } want_bytes;

static want_bytes zero_formula(const mo_gpt_config *c, int D, int z, size_t *c_outer, size_t *c_block) {
    size_t L = c->layers, C = c->hidden, V = c->vocab, T = c->seq;
    size_t outer = V * C + T * C + 2 * C, block = 12 * C * C + 13 * C, psi = outer + L * block;
    size_t S, F; // the rank's shard and the padded whole, in elements
    if (z == 1) { S = chunk_of(psi, D); F = D * S; }
    else { *c_outer = chunk_of(outer, D); *c_block = chunk_of(block, D); S = *c_outer + L * *c_block; F = D * S; }
    size_t ds = c->dtype == MO_F32 ? 4 : 2;
    int mixed = c->dtype != MO_F32;
    want_bytes w = {0, 0, 0, 0};
    if (z == 0) { // the unsharded model; the allocator rounds each buffer to 512 B
        w.param = up(psi * ds, 512);
        w.master = mixed ? up(psi * 4, 512) : 0;
        w.grad = up(psi * 4, 512);
        w.optim = 2 * up(psi * 4, 512);
        return w;
    }
    w.param = (z == 3 ? S : F) * ds;             // working weights: divided by Nd at level 3
    w.master = mixed ? S * 4 : 0;                // K: divided at level >= 1
    w.grad = (z >= 2 ? S : F) * 4;               // divided at level >= 2
    w.optim = 2 * S * 4;
    return w;
}

static void test_state_bytes(void) {
    mo_gpt_config cs[3] = {zero_config(MO_F32), zero_config(MO_BF16), zero_config(MO_F32)};
    cs[2].layers = 3; cs[2].hidden = 48; cs[2].heads = 4; cs[2].vocab = 101; // other unit sizes
    for (int i = 0; i < 3; i++)
        for (int dp = 2; dp <= 4; dp += 2)
            for (int z = 0; z <= 3; z++) {
                const mo_gpt_config *c = &cs[i];
                mo_alloc_stats after[4], built[4];
                if (!zero_stats(c, zero_sc(dp, z, MO_BACKEND_CPU), after, built)) continue;
                size_t co = 0, cb = 0, ds = c->dtype == MO_F32 ? 4 : 2;
                want_bytes w = zero_formula(c, dp, z, &co, &cb);
                for (int r = 0; r < dp; r++) {
                    const uint64_t *g = built[r].allocated_by_cat;
                    CHECK_MSG(g[MO_CAT_PARAM] == w.param && g[MO_CAT_GRAD] == w.grad && g[MO_CAT_OPTIM] == w.optim &&
                                  g[MO_CAT_MASTER] == w.master,
                              "config %d dp %d zero %d rank %d: param/grad/optim/master %llu/%llu/%llu/%llu bytes, formula "
                              "%llu/%llu/%llu/%llu", i, dp, z, r, (unsigned long long)g[MO_CAT_PARAM],
                              (unsigned long long)g[MO_CAT_GRAD], (unsigned long long)g[MO_CAT_OPTIM],
                              (unsigned long long)g[MO_CAT_MASTER], (unsigned long long)w.param,
                              (unsigned long long)w.grad, (unsigned long long)w.optim, (unsigned long long)w.master);
                    // The step gives every transient unit back, and holds at most: level 2/3 the outer
                    // tensors' gradient (head to embedding) beside one block's; level 3 one gathered unit.
                    const uint64_t *pk = after[r].peak_by_cat;
                    if (z >= 2)
                        CHECK_MSG(pk[MO_CAT_GRAD] == w.grad + (uint64_t)dp * (co + cb) * 4,
                                  "config %d dp %d zero %d rank %d: gradient peak %llu, want shard + outer + one block = %llu",
                                  i, dp, z, r, (unsigned long long)pk[MO_CAT_GRAD],
                                  (unsigned long long)(w.grad + (uint64_t)dp * (co + cb) * 4));
                    if (z == 3) {
                        uint64_t unit = (uint64_t)dp * (co > cb ? co : cb) * ds;
                        CHECK_MSG(pk[MO_CAT_PARAM] == w.param + unit,
                                  "config %d dp %d zero %d rank %d: parameter peak %llu, want shard + one unit = %llu", i,
                                  dp, z, r, (unsigned long long)pk[MO_CAT_PARAM], (unsigned long long)(w.param + unit));
                    }
                    CHECK_MSG(after[r].allocated_by_cat[MO_CAT_GRAD] == w.grad && after[r].allocated_by_cat[MO_CAT_PARAM] == w.param,
                              "config %d dp %d zero %d rank %d: a unit stays allocated after the step", i, dp, z, r);
                }
            }
}

// The formula at GPT-2 124M, bf16, dp 8 on dry (no compute): the per-rank model state falls as ZeRO says, about
// (2+4+12)Psi -> (2+4)Psi + 12Psi/Nd -> 2Psi + 16Psi/Nd -> 18Psi/Nd (the paper's figure 1 in this
// suite's bytes, fp32 gradients), and each level's bytes are the formula's exactly.
static void test_gpt2_bytes(void) {
    mo_gpt_config c = zero_config(MO_BF16);
    c.layers = 12; c.hidden = 768; c.heads = 12; c.seq = 1024; c.vocab = 50304; c.batch = 8;
    c.grad_clip = 1.0f;
    uint64_t prev = 0;
    for (int z = 0; z <= 3; z++) {
        mo_gpt_split *s = NULL;
        mo_gpt_split_config sc = zero_sc(8, z, MO_BACKEND_DRY);
        // raw: a block per request, rounded to 512 B only (the caching allocator does not split a large
        // segment whose rest would be 1 MiB or less, so its blocks here would carry up to 2 MiB more)
        sc.alloc = MO_ALLOC_RAW;
        if (!CHECK_OK(mo_gpt_split_create(&s, &c, &sc))) continue;
        mo_alloc_stats a;
        mo_allocator_stats(mo_gpt_split_allocator(s, 0), &a);
        size_t co = 0, cb = 0;
        want_bytes w = zero_formula(&c, 8, z, &co, &cb);
        const uint64_t *g = a.allocated_by_cat;
        uint64_t tot = g[MO_CAT_PARAM] + g[MO_CAT_GRAD] + g[MO_CAT_OPTIM] + g[MO_CAT_MASTER];
        CHECK_MSG(g[MO_CAT_PARAM] == w.param && g[MO_CAT_GRAD] == w.grad && g[MO_CAT_OPTIM] == w.optim &&
                      g[MO_CAT_MASTER] == w.master, "gpt2-124m bf16 dp 8 zero %d: state bytes are not the formula's", z);
        CHECK_MSG(z == 0 || tot < prev, "gpt2-124m bf16 dp 8 zero %d: %llu bytes, not below level %d's %llu", z,
                  (unsigned long long)tot, z - 1, (unsigned long long)prev);
        printf("  gpt2-124m bf16 dp 8 zero %d: per-rank model state %.1f MiB (param %.1f grad %.1f optim %.1f master %.1f)\n",
               z, tot / 1048576.0, g[MO_CAT_PARAM] / 1048576.0, g[MO_CAT_GRAD] / 1048576.0, g[MO_CAT_OPTIM] / 1048576.0,
               g[MO_CAT_MASTER] / 1048576.0);
        prev = tot;
        mo_gpt_split_destroy(s);
    }
}

static void test_refusals(void) {
    mo_gpt_config c = zero_config(MO_F32); // batch 8
    struct { int dp, zero, tp, accum; const char *flag; } bad[] = {
        {3, 0, 1, 1, "--dp 3"},   // 8 % 3
        {4, 0, 1, 4, "--dp 4"},   // 8 / 4 = 2 rows, accum 4
        {2, 4, 1, 1, "--zero 4"},
        {2, -1, 1, 1, "--zero -1"},
        {-2, 0, 1, 1, "--dp -2"},
        {2, 1, 2, 1, "--dp 2"},   // with --tp 2
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mo_gpt_config k = c;
        k.accum = bad[i].accum;
        mo_gpt_split_config sc = zero_sc(bad[i].dp, bad[i].zero, MO_BACKEND_DRY);
        sc.tp = bad[i].tp;
        mo_status st = mo_gpt_split_validate(&k, &sc);
        CHECK_MSG(st == MO_ERR_INVALID && strstr(mo_errmsg(), bad[i].flag), "%s: status %d, message '%s'", bad[i].flag,
                  (int)st, mo_errmsg());
        mo_clear_error();
    }
}

int main(void) {
    test_init_is_unsharded();
    test_refusals();
    test_state_bytes();
    test_gpt2_bytes();
    test_dry_equals_cpu();
    test_equal_unsharded();
    return test_finish();
}
