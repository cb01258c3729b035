// Sequence parallelism (--sp) of the split GPT (models/gpt_split.h) on the cpu and dry backends, ranks
// as threads with the local communicator:
//   - loss and every gradient, gathered back to the unsplit layout, equal the unsplit model's within the
//     non-sp split test's bounds (test_gpt_split.c: fp32 1e-5 relative L2 per tensor and 1e-6 on the
//     loss; bf16 5e-2 and 2e-3, fp16 1e-2 and 5e-4), for tp 2 and 4, ckpt none / full / selective /
//     every:K, accum 1 / 2 / 4, fused attention and pp 2; the replicated tensors have the same bits on
//     every rank; five optimizer steps track the unsplit model; two runs give the same bits;
//   - every rank's peaks on dry equal its peaks on cpu (each category, the allocation count);
//   - one layer's activation bytes per rank equal the formula of gpt_split.h to the byte, in fp32 and bf16,
//     materialized and fused: the no-sp figure less (t-1)/t of the block input, ln1, resid2, ln2 and
//     the LayerNorm statistics;
//   - the tp communicator's ops per step: no all-reduce inside the blocks (only the 4 reductions of the
//     partial gradients), 6 all-gathers and 4 reduce-scatters per block and micro-batch (recompute adds
//     its forward ones), with their bytes (gathers in the activation dtype, scatters in fp32);
//   - every rank's peak is lower with --sp;
//   - bad input (--sp without tp, seq not divisible by tp, --sp 2) refused naming --sp.
#include <math.h>
#include <stdio.h>
#include "strategies/comm.h"
#include "tests/gpt_split_fixture.h"

#define GRAD_TOL 1e-5
#define LOSS_TOL 1e-6

static mo_gpt_split_config sp_sc(int tp, int pp, mo_backend_kind be) {
    mo_gpt_split_config sc = split_sc(tp, pp, be);
    sc.sp = 1;
    return sc;
}

typedef struct sp_case {
    int tp, pp, accum;
    mo_ckpt_kind ckpt;
    int every, fused;
    mo_dtype dt;
    const char *what;
} sp_case;

static void test_grads_equal_unsplit(void) {
    const sp_case cases[] = {
        {2, 1, 1, MO_CKPT_NONE, 0, 0, MO_F32, "fp32 tp 2"},
        {4, 1, 1, MO_CKPT_NONE, 0, 0, MO_F32, "fp32 tp 4"},
        {2, 1, 2, MO_CKPT_NONE, 0, 0, MO_F32, "fp32 tp 2, accum 2"},
        {4, 1, 2, MO_CKPT_NONE, 0, 0, MO_F32, "fp32 tp 4, accum 2"},
        {2, 1, 1, MO_CKPT_FULL, 0, 0, MO_F32, "fp32 tp 2, ckpt full"},
        {4, 1, 1, MO_CKPT_FULL, 0, 0, MO_F32, "fp32 tp 4, ckpt full"},
        {2, 1, 2, MO_CKPT_FULL, 0, 0, MO_F32, "fp32 tp 2, accum 2, ckpt full"},
        {4, 1, 2, MO_CKPT_FULL, 0, 0, MO_F32, "fp32 tp 4, accum 2, ckpt full"},
        {4, 1, 1, MO_CKPT_SELECTIVE, 0, 0, MO_F32, "fp32 tp 4, ckpt selective"},
        {2, 1, 2, MO_CKPT_EVERY, 2, 1, MO_F32, "fp32 tp 2, accum 2, ckpt every:2, attn fused"},
        {2, 2, 2, MO_CKPT_NONE, 0, 0, MO_F32, "fp32 tp 2 pp 2, accum 2"},
        {2, 2, 4, MO_CKPT_FULL, 0, 1, MO_F32, "fp32 tp 2 pp 2, accum 4, ckpt full, attn fused"},
        {2, 1, 1, MO_CKPT_NONE, 0, 0, MO_BF16, "bf16 tp 2"},
        {4, 1, 1, MO_CKPT_NONE, 0, 0, MO_BF16, "bf16 tp 4"},
        {2, 1, 2, MO_CKPT_FULL, 0, 0, MO_BF16, "bf16 tp 2, accum 2, ckpt full"},
        {4, 1, 2, MO_CKPT_FULL, 0, 1, MO_BF16, "bf16 tp 4, accum 2, ckpt full, attn fused"},
        {2, 2, 2, MO_CKPT_NONE, 0, 0, MO_BF16, "bf16 tp 2 pp 2, accum 2"},
        {2, 1, 2, MO_CKPT_NONE, 0, 0, MO_F16, "fp16 tp 2, accum 2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const sp_case *k = &cases[i];
        mo_gpt_config c = split_config(); // seq 8: tp 4 leaves 2 positions per rank
        c.accum = k->accum; c.ckpt = k->ckpt; c.ckpt_every = k->every; c.attn_fused = k->fused;
        c.dtype = k->dt;
        c.loss_scaling = k->dt == MO_F16;
        if (k->dt != MO_F32) c.hidden = 64; // head size 16: the 16-bit fused kernel takes multiples of 8
        mo_gpt_config plain = c;
        plain.ckpt = MO_CKPT_NONE; // checkpointing is bit-identical to none (test_gpt)
        split_ref ref, got;
        int rep = 0;
        if (!split_ref_run(MO_BACKEND_CPU, plain, 11, 0, &ref)) return;
        if (!split_run(c, sp_sc(k->tp, k->pp, MO_BACKEND_CPU), 11, 0, &got, &rep)) { split_ref_free(&ref); continue; }
        int wp = 0;
        double e = split_worst_tensor(&c, got.grads, ref.grads, &wp);
        double le = fabs(got.loss - ref.loss) / fabs(ref.loss);
        // The non-sp split test's bounds for the same precision (test_gpt_split.c says why 16 bits are looser).
        double gt = k->dt == MO_F32 ? GRAD_TOL : k->dt == MO_BF16 ? 5e-2 : 1e-2;
        double lt = k->dt == MO_F32 ? LOSS_TOL : k->dt == MO_BF16 ? 2e-3 : 5e-4;
        printf("  sp %-48s loss %.7f (unsplit %.7f, rel %.1e), worst gradient %s rel %.2e (tol %.0e)\n", k->what, got.loss,
               ref.loss, le, split_pname[wp], e, gt);
        CHECK_MSG(e <= gt, "sp %s: gradient of %s off by %.3e relative", k->what, split_pname[wp], e);
        CHECK_MSG(le <= lt, "sp %s: loss %.9g vs unsplit %.9g", k->what, got.loss, ref.loss);
        CHECK_MSG(rep, "sp %s: a replicated tensor differs between ranks", k->what);
        split_ref_free(&ref);
        split_ref_free(&got);
    }
}

// Five AdamW steps with clipping active track the unsplit model as the non-sp split does (1e-4: Adam
// amplifies rounding, test_gpt_split.c says how); two identical runs give the same bits.
static void test_steps_and_determinism(void) {
    const int grid[][3] = {{2, 1, 2}, {4, 1, 1}, {2, 2, 2}};
    for (size_t i = 0; i < sizeof grid / sizeof grid[0]; i++) {
        mo_gpt_config c = split_config();
        c.accum = grid[i][2];
        c.lr = 1e-2f;
        c.grad_clip = 0.3f;
        split_ref ref, got, again;
        int rep = 0, rep2 = 0;
        if (!split_ref_run(MO_BACKEND_CPU, c, 5, 5, &ref)) return;
        if (!split_run(c, sp_sc(grid[i][0], grid[i][1], MO_BACKEND_CPU), 5, 5, &got, &rep)) { split_ref_free(&ref); continue; }
        if (!split_run(c, sp_sc(grid[i][0], grid[i][1], MO_BACKEND_CPU), 5, 5, &again, &rep2)) {
            split_ref_free(&ref);
            split_ref_free(&got);
            continue;
        }
        int wp = 0;
        double e = split_worst_tensor(&c, got.params, ref.params, &wp);
        double ne = fabs(got.norm - ref.norm) / ref.norm;
        printf("  sp tp %d pp %d accum %d, 5 steps: loss %.6f (unsplit %.6f), norm %.6f (unsplit %.6f), worst parameter %s rel %.2e\n",
               grid[i][0], grid[i][1], grid[i][2], got.loss, ref.loss, got.norm, ref.norm, split_pname[wp], e);
        CHECK(ref.norm > c.grad_clip); // clipping is on
        CHECK_MSG(e <= 1e-4, "sp tp %d pp %d: parameters after 5 steps off by %.3e (%s)", grid[i][0], grid[i][1], e, split_pname[wp]);
        CHECK_MSG(ne <= 1e-4, "sp tp %d pp %d: gradient norm %.9g vs %.9g", grid[i][0], grid[i][1], got.norm, ref.norm);
        CHECK_MSG(fabs(got.loss - ref.loss) <= 1e-5 * fabs(ref.loss), "sp: loss %.9g vs %.9g", got.loss, ref.loss);
        CHECK(rep && rep2);
        CHECK_MSG(got.loss == again.loss && !memcmp(got.grads, again.grads, ref.n * 4) && !memcmp(got.params, again.params, ref.n * 4),
                  "sp tp %d pp %d: two runs differ", grid[i][0], grid[i][1]);
        split_ref_free(&ref);
        split_ref_free(&got);
        split_ref_free(&again);
    }
}

// Every rank's peaks on dry equal its peaks on cpu.
static void test_dry_equals_cpu(void) {
    const sp_case grid[] = {
        {2, 1, 1, MO_CKPT_NONE, 0, 0, MO_F32, "fp32 tp 2"},
        {4, 1, 2, MO_CKPT_FULL, 0, 0, MO_F32, "fp32 tp 4, accum 2, ckpt full"},
        {4, 1, 2, MO_CKPT_SQRT, 0, 1, MO_F32, "fp32 tp 4, accum 2, ckpt sqrt, attn fused"},
        {2, 2, 4, MO_CKPT_SELECTIVE, 0, 0, MO_F32, "fp32 tp 2 pp 2, accum 4, ckpt selective"},
        {2, 1, 2, MO_CKPT_FULL, 0, 0, MO_BF16, "bf16 tp 2, accum 2, ckpt full"},
        {4, 2, 2, MO_CKPT_NONE, 0, 1, MO_F16, "fp16 tp 4 pp 2, accum 2, attn fused"},
    };
    for (size_t i = 0; i < sizeof grid / sizeof grid[0]; i++) {
        const sp_case *k = &grid[i];
        mo_gpt_config c = split_config();
        c.accum = k->accum; c.ckpt = k->ckpt; c.ckpt_every = k->every; c.attn_fused = k->fused;
        c.dtype = k->dt;
        c.loss_scaling = k->dt == MO_F16;
        c.grad_clip = 1.0f;
        if (k->dt != MO_F32) c.hidden = 64;
        int W = k->tp * k->pp;
        char what[96];
        snprintf(what, sizeof what, "sp %s", k->what);
        uint64_t peak[8] = {0};
        int same = split_dry_equals_cpu(&c, sp_sc(k->tp, k->pp, MO_BACKEND_CPU), W, what, peak);
        if (same < 0) return;
        printf("  sp %-44s dry == cpu on all %d ranks: %s (rank 0 peak %llu)\n", k->what, W, same ? "yes" : "NO",
               (unsigned long long)peak[0]);
    }
}

// The activation category's peak over its resting bytes (the batch's tokens, targets, losses) of one
// forward/backward on each of the first nranks ranks, dry.
static int act_peaks(mo_gpt_config c, mo_gpt_split_config sc, uint64_t *peak, int nranks) {
    mo_gpt_split *s = NULL;
    if (!CHECK_OK(split_open(&s, &c, &sc, 1))) return 0;
    uint64_t rest[64];
    for (int r = 0; r < nranks; r++) {
        mo_alloc_stats a;
        mo_allocator_stats(mo_gpt_split_allocator(s, r), &a);
        rest[r] = a.allocated_by_cat[MO_CAT_ACTIVATION];
    }
    mo_gpt_split_reset_peaks(s);
    int ok = CHECK_OK(mo_gpt_split_forward_backward(s));
    for (int r = 0; r < nranks; r++) {
        mo_alloc_stats a;
        mo_allocator_stats(mo_gpt_split_allocator(s, r), &a);
        peak[r] = a.peak_by_cat[MO_CAT_ACTIVATION] - rest[r];
    }
    mo_gpt_split_destroy(s);
    return ok;
}

// One layer's activations per rank (models/gpt_split.h), s = seq, b = micro-batch, h = hidden, a = heads,
// d the activation dtype's bytes, t = tp, no checkpointing. What block_forward keeps for backward:
//   no sp: the block input, ln1 out, resid2, ln2 out: 4 d sbh, whole on every rank; qkv 3sbh/t, attention
//          output sbh/t, fc pre-activation and GELU output 4sbh/t each: 12 d sbh/t; the LayerNorms'
//          mean and rstd, fp32: 16sb; the attention's A: d as^2b/t (probabilities) or 4asb/t (lse);
//   sp:    the same but the first four and the statistics are the rank's T/t positions:
//          4 d sbh/t + 12 d sbh/t + 16sb/t + A = (16 d sbh + 16sb)/t + A,
// i.e. the no-sp figure less (t-1)/t (4 d sbh + 16sb). 16 bits: sbh(32/t + 2as/(ht)) + 16sb/t, against
// Korthikanti et al.'s sbh(34/t + 5as/(ht)) (their 2 sbh/t of dropout masks and 3as^2b/t of dropout mask
// and output are not here: this model has no dropout; they leave the statistics out).
// Measured: the difference of the activation peaks of 4 and 2 layers, halved, on every rank, under the
// raw allocator: the caching one hands a large-pool request the whole free block when less than 1 MiB
// would remain, so its per-category bytes of large tensors depend on the free list (they varied by
// +-2% per layer at this shape), while raw counts each request rounded to 512 bytes, nothing more.
static double layer_bytes(int sp, double s, double b, double h, double a, double t, double d, int fused) {
    double A = fused ? 4 * a * s * b / t : d * a * s * s * b / t;
    if (sp) return (16 * d * s * b * h + 16 * s * b) / t + A;
    return 4 * d * s * b * h + 12 * d * s * b * h / t + 16 * s * b + A;
}

static void test_activation_formula(void) {
    // Every per-layer tensor a multiple of the allocator's 512-byte rounding: the statistics of the
    // rank's s*b/t = 128 rows at t = 8 are 512 bytes.
    const int S = 512, Bm = 2, H = 256, A = 8;
    printf("  per-layer activation bytes per rank, s=%d b=%d h=%d a=%d, no checkpointing:\n", S, Bm, H, A);
    printf("    %-5s %-6s %-3s %12s %12s %12s %12s\n", "dtype", "attn", "t", "no sp", "sp", "sp formula", "paper (16-bit)");
    const mo_dtype dts[2] = {MO_F32, MO_BF16};
    for (int di = 0; di < 2; di++)
        for (int fused = 0; fused <= 1; fused++)
            for (int t = 2; t <= 8; t *= 2) {
                mo_gpt_config c = split_config();
                c.hidden = H; c.heads = A; c.seq = S; c.batch = Bm; c.vocab = 256; c.attn_fused = fused;
                c.dtype = dts[di];
                double d = mo_dtype_size(dts[di]), got[2] = {0, 0};
                for (int sp = 0; sp <= 1; sp++) {
                    uint64_t p2[8], p4[8];
                    mo_gpt_split_config sc = split_sc(t, 1, MO_BACKEND_DRY);
                    sc.sp = sp;
                    sc.alloc = MO_ALLOC_RAW;
                    c.layers = 2;
                    if (!act_peaks(c, sc, p2, t)) return;
                    c.layers = 4;
                    if (!act_peaks(c, sc, p4, t)) return;
                    double want = layer_bytes(sp, S, Bm, H, A, t, d, fused);
                    for (int r = 0; r < t; r++) {
                        double per = (double)(p4[r] - p2[r]) / 2;
                        if (r == 0) got[sp] = per;
                        CHECK_MSG(per == want, "%s t %d sp %d rank %d (attn %s): %.0f bytes per layer, formula %.0f", mo_dtype_name(dts[di]),
                                  t, sp, r, fused ? "fused" : "materialized", per, want);
                    }
                }
                // sp = no sp less the (t-1)/t share of the LayerNorm and residual terms, as measured.
                double share = (double)(t - 1) / t * (4 * d * S * Bm * H + 16.0 * S * Bm);
                CHECK_MSG(got[1] == got[0] - share, "%s t %d: sp %.0f, no sp %.0f, less the LN/residual share %.0f",
                          mo_dtype_name(dts[di]), t, got[1], got[0], share);
                double paper = (double)S * Bm * H * (34.0 / t + 5.0 * A * S / ((double)H * t));
                printf("    %-5s %-6s %-3d %12.0f %12.0f %12.0f %12.0f\n", mo_dtype_name(dts[di]), fused ? "fused" : "mat.", t,
                       got[0], got[1], layer_bytes(1, S, Bm, H, A, t, d, fused), fused || d != 2 ? NAN : paper);
            }
}

// The tp communicator of one rank over one step (forward/backward of accum micro-batches and the
// update): per block and micro-batch 2 all-gathers and 2 reduce-scatters forward, 4 all-gathers and 2
// reduce-scatters backward, recompute (every:1 segments: each block is its segment's last, so without
// fcproj) 2 all-gathers and 1 reduce-scatter more; all-reduces only sp_reduce_grads' 4 (wte+wpe, ln1,
// ln2, lnf), whatever the layers; gathers of N*C activations (N = B/accum x T) in the activation dtype,
// scatters of N*C fp32 sums, each ring moving (t-1)/t. Without --sp: 4 all-reduces per block and
// micro-batch and nothing else on the tp communicator.
static void test_comm_ops(void) {
    const struct { int tp, accum; mo_ckpt_kind ckpt; mo_dtype dt; int sp; } grid[] = {
        {2, 2, MO_CKPT_NONE, MO_F32, 1}, {4, 1, MO_CKPT_FULL, MO_F32, 1}, {2, 2, MO_CKPT_NONE, MO_BF16, 1},
        {2, 2, MO_CKPT_NONE, MO_F32, 0},
    };
    for (size_t i = 0; i < sizeof grid / sizeof grid[0]; i++) {
        mo_gpt_config c = split_config();
        c.accum = grid[i].accum; c.ckpt = grid[i].ckpt; c.dtype = grid[i].dt;
        if (c.dtype != MO_F32) c.hidden = 64;
        int t = grid[i].tp, sp = grid[i].sp;
        uint64_t L = (uint64_t)c.layers, M = (uint64_t)c.accum, C = (uint64_t)c.hidden, T = (uint64_t)c.seq, V = (uint64_t)c.vocab;
        uint64_t N = (uint64_t)(c.batch / c.accum) * T, d = mo_dtype_size(c.dtype);
        uint64_t rec = c.ckpt == MO_CKPT_FULL;
        mo_gpt_split *s = NULL;
        mo_gpt_split_config sc = split_sc(t, 1, MO_BACKEND_CPU);
        sc.sp = sp;
        if (!CHECK_OK(split_open(&s, &c, &sc, 2))) return;
        CHECK_OK(mo_gpt_split_comm_reset(s));
        CHECK_OK(mo_gpt_split_step(s));
        uint64_t ag = sp ? (6 + 2 * rec) * L * M : 0, rs = sp ? (4 + rec) * L * M : 0;
        uint64_t ar = sp ? 4 : 4 * L * M + (rec ? 2 * L * M : 0);
        uint64_t ag_b = ag * mo_comm_op_bytes(MO_COMM_OP_ALLGATHER, t, N * C * d);
        uint64_t rs_b = rs * mo_comm_op_bytes(MO_COMM_OP_REDUCE_SCATTER, t, N * C * 4);
        uint64_t ar_b = sp ? mo_comm_op_bytes(MO_COMM_OP_ALLREDUCE, t, (V * C + T * C) * 4) +
                                 2 * mo_comm_op_bytes(MO_COMM_OP_ALLREDUCE, t, 2 * L * C * 4) +
                                 mo_comm_op_bytes(MO_COMM_OP_ALLREDUCE, t, 2 * C * 4)
                           : ar * mo_comm_op_bytes(MO_COMM_OP_ALLREDUCE, t, N * C * 4);
        for (int r = 0; r < t; r++) {
            mo_comm_stat st;
            CHECK_OK(mo_gpt_split_tp_comm_stats(s, r, &st));
            uint64_t *n = st.op_count, *b = st.op_bytes;
            if (r == 0)
                printf("  %s tp %d accum %d ckpt %s%s, tp comm per step: %llu all-gathers (%llu B), %llu reduce-scatters (%llu B), "
                       "%llu all-reduces (%llu B)\n", mo_dtype_name(c.dtype), t, c.accum, c.ckpt == MO_CKPT_FULL ? "full" : "none",
                       sp ? ", sp" : ", no sp", (unsigned long long)n[MO_COMM_OP_ALLGATHER],
                       (unsigned long long)b[MO_COMM_OP_ALLGATHER], (unsigned long long)n[MO_COMM_OP_REDUCE_SCATTER],
                       (unsigned long long)b[MO_COMM_OP_REDUCE_SCATTER], (unsigned long long)n[MO_COMM_OP_ALLREDUCE],
                       (unsigned long long)b[MO_COMM_OP_ALLREDUCE]);
            CHECK_MSG(n[MO_COMM_OP_ALLGATHER] == ag && n[MO_COMM_OP_REDUCE_SCATTER] == rs && n[MO_COMM_OP_ALLREDUCE] == ar &&
                          st.ops == ag + rs + ar,
                      "tp %d sp %d rank %d: %llu all-gathers, %llu reduce-scatters, %llu all-reduces, %llu ops (want %llu, %llu, %llu)",
                      t, sp, r, (unsigned long long)n[MO_COMM_OP_ALLGATHER], (unsigned long long)n[MO_COMM_OP_REDUCE_SCATTER],
                      (unsigned long long)n[MO_COMM_OP_ALLREDUCE], (unsigned long long)st.ops, (unsigned long long)ag,
                      (unsigned long long)rs, (unsigned long long)ar);
            CHECK_EQ_U64(b[MO_COMM_OP_ALLGATHER], ag_b);
            CHECK_EQ_U64(b[MO_COMM_OP_REDUCE_SCATTER], rs_b);
            CHECK_EQ_U64(b[MO_COMM_OP_ALLREDUCE], ar_b);
        }
        mo_gpt_split_destroy(s);
    }
}

// Every rank's peak (allocated and reserved) is lower with --sp, on a GPT-2-like shape (dry).
static void test_peak_lower(void) {
    mo_gpt_config c = split_config();
    c.layers = 4; c.hidden = 256; c.heads = 8; c.seq = 256; c.batch = 4; c.vocab = 4096;
    c.dtype = MO_BF16;
    for (int t = 2; t <= 4; t *= 2) {
        uint64_t peak[2][4];
        for (int sp = 0; sp <= 1; sp++) {
            mo_gpt_split *s = NULL;
            mo_gpt_split_config sc = split_sc(t, 1, MO_BACKEND_DRY);
            sc.sp = sp;
            if (!CHECK_OK(split_open(&s, &c, &sc, 1))) return;
            CHECK_OK(mo_gpt_split_step(s));
            mo_gpt_split_reset_peaks(s);
            CHECK_OK(mo_gpt_split_step(s));
            for (int r = 0; r < t; r++) {
                mo_alloc_stats a;
                mo_allocator_stats(mo_gpt_split_allocator(s, r), &a);
                peak[sp][r] = a.peak_allocated_bytes;
            }
            mo_gpt_split_destroy(s);
        }
        for (int r = 0; r < t; r++)
            CHECK_MSG(peak[1][r] < peak[0][r], "tp %d rank %d: peak %llu with sp, %llu without", t, r,
                      (unsigned long long)peak[1][r], (unsigned long long)peak[0][r]);
        printf("  bf16 L4 C256 T256 B4 V4096, tp %d: rank 0 peak %llu without sp, %llu with\n", t,
               (unsigned long long)peak[0][0], (unsigned long long)peak[1][0]);
    }
}

static void expect_bad(mo_gpt_config c, mo_gpt_split_config sc, const char *flag) {
    mo_gpt_split *s = NULL;
    mo_status st = mo_gpt_split_create(&s, &c, &sc);
    const char *msg = mo_errmsg();
    CHECK_MSG(st == MO_ERR_INVALID && strstr(msg, flag) && !s, "tp %d sp %d seq %d: got %s (%s), want invalid naming %s",
              sc.tp, sc.sp, c.seq, mo_status_name(st), msg, flag);
    printf("  refused: %s\n", msg);
    if (s) mo_gpt_split_destroy(s);
}

static void test_bad_input(void) {
    mo_gpt_config c = split_config();
    expect_bad(c, sp_sc(1, 1, MO_BACKEND_CPU), "--sp 1");
    expect_bad(c, sp_sc(1, 2, MO_BACKEND_DRY), "--sp 1");
    mo_gpt_split_config two = sp_sc(2, 1, MO_BACKEND_CPU);
    two.sp = 2;
    expect_bad(c, two, "--sp 2");
    c.seq = 6; // tp 4 divides the heads but not the sequence
    expect_bad(c, sp_sc(4, 1, MO_BACKEND_DRY), "--sp 1");
    CHECK(strstr(mo_errmsg(), "seq 6") != NULL);
    c.seq = 8;
    mo_gpt_split_config ok = sp_sc(4, 2, MO_BACKEND_DRY);
    CHECK_OK(mo_gpt_split_validate(&c, &ok));
}

int main(void) {
    test_seed_from_time();
    test_bad_input();
    test_grads_equal_unsplit();
    test_steps_and_determinism();
    test_dry_equals_cpu();
    test_activation_formula();
    test_comm_ops();
    test_peak_lower();
    return test_finish();
}
