// The split GPT (models/gpt_split.h) on the cpu and dry backends, ranks as threads with the local
// communicator:
//   - the split starts from exactly the unsplit model's parameters (gathered back, bit for bit);
//   - tp 2 and 4, pp 2 and 4 (and both, with accumulation, checkpointing, fused attention) give the
//     unsplit model's loss and gradients within fp32 rounding, and replicated tensors have the same
//     bits on every rank; a few optimizer steps (clipping on) track the unsplit model;
//   - tp 1 pp 1 through the split API is the plain model, bit for bit; two split runs give the same bits;
//   - the communication each step issues (counts and bytes) is the one the design says;
//   - every rank's peaks on the dry backend equal its peaks on the cpu backend;
//   - per-rank activation memory per layer against Korthikanti et al. 2022, and 1F1B's bound on
//     what each pipeline stage holds;
//   - an out-of-memory on one rank unwinds every rank (no hang, nothing left allocated);
//   - bad --tp / --pp / --comm / precision combinations are refused with the flag named.
#include <math.h>
#include <stdio.h>
#include "strategies/comm.h"
#include "tests/gpt_split_fixture.h"

// Equivalence bound (see gpt_split.h): the split regroups fp32 sums (a GEMM over C/tp inputs and an
// all-reduce of tp partial sums; wte's two halves), so each gradient tensor agrees to a relative L2
// error of 1e-5 (measured: about 1e-7) and the loss to 1e-6 relative.
#define GRAD_TOL 1e-5
#define LOSS_TOL 1e-6

static void test_init_is_unsplit(void) {
    mo_gpt_config c = split_config();
    split_ref ref;
    if (!split_ref_run(MO_BACKEND_CPU, c, 3, 0, &ref)) return;
    int grid[][2] = {{2, 1}, {4, 1}, {1, 2}, {1, 4}, {2, 2}, {4, 2}};
    for (size_t i = 0; i < sizeof grid / sizeof grid[0]; i++) {
        mo_gpt_split *s = NULL;
        mo_gpt_split_config sc = split_sc(grid[i][0], grid[i][1], MO_BACKEND_CPU);
        if (!CHECK_OK(mo_gpt_split_create(&s, &c, &sc))) continue;
        float *p = malloc(ref.n * sizeof(float));
        int eq = 0;
        CHECK_OK(mo_gpt_split_gather(s, 0, p, &eq));
        CHECK_MSG(!memcmp(p, ref.params, ref.n * sizeof(float)) && eq,
                  "tp %d pp %d: initial parameters differ from the unsplit model's (replicas equal: %d)", grid[i][0],
                  grid[i][1], eq);
        free(p);
        mo_gpt_split_destroy(s);
    }
    split_ref_free(&ref);
}

typedef struct split_case {
    int tp, pp, accum;
    mo_ckpt_kind ckpt;
    int every, fused;
    const char *what;
} split_case;

static void test_grads_equal_unsplit(void) {
    split_case cases[] = {
        {2, 1, 1, MO_CKPT_NONE, 0, 0, "tp 2"},
        {4, 1, 1, MO_CKPT_NONE, 0, 0, "tp 4"},
        {1, 2, 4, MO_CKPT_NONE, 0, 0, "pp 2, accum 4"},
        {1, 4, 4, MO_CKPT_NONE, 0, 0, "pp 4, accum 4"},
        {1, 4, 8, MO_CKPT_NONE, 0, 0, "pp 4, accum 8"},
        {1, 4, 2, MO_CKPT_SQRT, 0, 0, "pp 4, accum 2 (fewer micro-batches than stages), ckpt sqrt"},
        {1, 2, 1, MO_CKPT_NONE, 0, 0, "pp 2, accum 1"},
        {2, 2, 2, MO_CKPT_NONE, 0, 0, "tp 2 pp 2, accum 2"},
        {2, 4, 4, MO_CKPT_NONE, 0, 0, "tp 2 pp 4, accum 4"},
        {4, 2, 4, MO_CKPT_EVERY, 2, 0, "tp 4 pp 2, accum 4, ckpt every:2"},
        {2, 1, 2, MO_CKPT_FULL, 0, 0, "tp 2, accum 2, ckpt full"},
        {4, 1, 1, MO_CKPT_SELECTIVE, 0, 0, "tp 4, ckpt selective"},
        {4, 1, 2, MO_CKPT_NONE, 0, 1, "tp 4, accum 2, attn fused"},
        {2, 2, 2, MO_CKPT_FULL, 0, 1, "tp 2 pp 2, accum 2, ckpt full, attn fused"},
        {2, 2, 2, MO_CKPT_SEGMENTS, 3, 0, "tp 2 pp 2, accum 2, ckpt segments:3 (per stage)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const split_case *k = &cases[i];
        mo_gpt_config c = split_config();
        c.accum = k->accum; c.ckpt = k->ckpt; c.ckpt_every = k->every; c.attn_fused = k->fused;
        split_ref ref, got;
        int rep = 0;
        mo_gpt_config plain = c;
        plain.ckpt = MO_CKPT_NONE; // checkpointing is bit-identical to none (test_gpt)
        if (!split_ref_run(MO_BACKEND_CPU, plain, 11, 0, &ref)) return;
        if (!split_run(c, split_sc(k->tp, k->pp, MO_BACKEND_CPU), 11, 0, &got, &rep)) { split_ref_free(&ref); continue; }
        int wp = 0;
        double e = split_worst_tensor(&c, got.grads, ref.grads, &wp);
        double le = fabs(got.loss - ref.loss) / fabs(ref.loss);
        printf("  %-58s loss %.7f (unsplit %.7f, rel %.1e), worst gradient %s rel %.2e\n", k->what, got.loss, ref.loss,
               le, split_pname[wp], e);
        CHECK_MSG(e <= GRAD_TOL, "%s: gradient of %s off by %.3e relative", k->what, split_pname[wp], e);
        CHECK_MSG(le <= LOSS_TOL, "%s: loss %.9g vs unsplit %.9g", k->what, got.loss, ref.loss);
        CHECK_MSG(rep, "%s: a replicated tensor differs between ranks", k->what);
        split_ref_free(&ref);
        split_ref_free(&got);
    }
}

// Five AdamW steps with clipping active (grad_clip below the norm, so the global norm over the ranks
// scales every update): the parameters stay within 1e-4 relative of the unsplit run's and the norm
// within 1e-4. Looser than one step's 1e-5 because Adam amplifies noise: its first update is lr*sign(g),
// and the key bias's exact gradient is 0 (softmax is invariant to adding q.b_k to a whole row; measured
// |grad| ~1e-11, pure rounding), so either run moves those elements by +-lr on the sign of its own
// rounding. Measured: qkvb worst at ~3e-5, the norm at ~1e-5 after five steps (tp 4 pp 4); every
// other tensor ~1e-6.
static void test_steps_track_unsplit(void) {
    int grid[][3] = {{2, 1, 1}, {1, 2, 2}, {2, 2, 4}, {4, 4, 4}};
    for (size_t i = 0; i < sizeof grid / sizeof grid[0]; i++) {
        mo_gpt_config c = split_config();
        c.accum = grid[i][2];
        c.lr = 1e-2f;
        c.grad_clip = 0.3f;
        split_ref ref, got;
        int rep = 0;
        if (!split_ref_run(MO_BACKEND_CPU, c, 5, 5, &ref)) return;
        if (!split_run(c, split_sc(grid[i][0], grid[i][1], MO_BACKEND_CPU), 5, 5, &got, &rep)) { split_ref_free(&ref); continue; }
        int wp = 0;
        double e = split_worst_tensor(&c, got.params, ref.params, &wp);
        double ne = fabs(got.norm - ref.norm) / ref.norm;
        printf("  tp %d pp %d accum %d, 5 steps: loss %.6f (unsplit %.6f), norm %.6f (unsplit %.6f, clip %.1f), worst parameter %s rel %.2e\n",
               grid[i][0], grid[i][1], grid[i][2], got.loss, ref.loss, got.norm, ref.norm, (double)c.grad_clip,
               split_pname[wp], e);
        CHECK(ref.norm > c.grad_clip); // clipping is on
        CHECK_MSG(e <= 1e-4, "tp %d pp %d: parameters after 5 steps off by %.3e (%s)", grid[i][0], grid[i][1], e, split_pname[wp]);
        CHECK_MSG(ne <= 1e-4, "tp %d pp %d: gradient norm %.9g vs %.9g", grid[i][0], grid[i][1], got.norm, ref.norm);
        CHECK_MSG(fabs(got.loss - ref.loss) <= 1e-5 * fabs(ref.loss), "loss %.9g vs %.9g", got.loss, ref.loss);
        CHECK(rep);
        split_ref_free(&ref);
        split_ref_free(&got);
    }
}

// tp 1 pp 1 is the plain model (no shard): bit for bit. Split runs are deterministic: bit for bit.
static void test_plain_and_deterministic(void) {
    mo_gpt_config c = split_config();
    c.accum = 2;
    c.grad_clip = 1.0f;
    split_ref ref, got, again;
    int rep = 0;
    if (!split_ref_run(MO_BACKEND_CPU, c, 9, 2, &ref)) return;
    if (split_run(c, split_sc(1, 1, MO_BACKEND_CPU), 9, 2, &got, &rep)) {
        CHECK_MSG(got.loss == ref.loss && !memcmp(got.grads, ref.grads, ref.n * 4) && !memcmp(got.params, ref.params, ref.n * 4),
                  "tp 1 pp 1 through the split differs from the plain model");
        split_ref_free(&got);
    }
    if (split_run(c, split_sc(2, 2, MO_BACKEND_CPU), 9, 2, &got, &rep) &&
        split_run(c, split_sc(2, 2, MO_BACKEND_CPU), 9, 2, &again, &rep)) {
        CHECK_MSG(got.loss == again.loss && !memcmp(got.grads, again.grads, ref.n * 4) &&
                      !memcmp(got.params, again.params, ref.n * 4),
                  "two tp 2 pp 2 runs differ");
        split_ref_free(&got);
        split_ref_free(&again);
    }
    split_ref_free(&ref);
}

// What one forward/backward sends: tp, per rank: 4 all-reduces of N*C floats per block per
// micro-batch (ring volume 2(W-1)/W of the payload), 1 all-gather of the norm's 2 floats in the update;
// pp (tp 1, 2 stages), per rank: M activations one way and M gradients the other (N*C floats each),
// the tied wte's all-reduce, the norm's all-gather.
static void test_comm_volume(void) {
    mo_gpt_config c = split_config();
    c.accum = 2;
    size_t N = (size_t)(c.batch / c.accum) * c.seq, NC4 = N * c.hidden * 4, L = c.layers, M = c.accum;
    size_t V = c.vocab, C = c.hidden;
    for (int k = 0; k < 2; k++) {
        int tp = k == 0 ? 2 : 1, pp = k == 0 ? 1 : 2, W = tp * pp;
        mo_gpt_split *s = NULL;
        mo_gpt_split_config sc = split_sc(tp, pp, MO_BACKEND_CPU);
        if (!CHECK_OK(split_open(&s, &c, &sc, 2))) return;
        CHECK_OK(mo_gpt_split_step(s));
        mo_gpt_split_comm cs;
        CHECK_OK(mo_gpt_split_comm_stats(s, &cs));
        uint64_t gather = mo_comm_op_bytes(MO_COMM_OP_ALLGATHER, W, (uint64_t)W * 2 * 4);
        uint64_t want_ops, want_bytes;
        if (tp == 2) {
            want_ops = (uint64_t)W * (4 * L * M + 1);
            want_bytes = (uint64_t)W * (4 * L * M * mo_comm_op_bytes(MO_COMM_OP_ALLREDUCE, 2, NC4) + gather);
        } else {
            // stage 0: send, sendrecv (1F1B steady state), recv; stage 1: recv, sendrecv, send: 3 ops
            // for M = 2, the same bytes as 2M one-way messages; plus the wte all-reduce and the gather.
            want_ops = (uint64_t)W * (3 + 1 + 1);
            want_bytes = (uint64_t)W * (2 * M * NC4 + mo_comm_op_bytes(MO_COMM_OP_ALLREDUCE, 2, V * C * 4) + gather);
        }
        printf("  tp %d pp %d accum %d: %llu comm ops, %llu bytes over all ranks (want %llu, %llu); slowest rank %.3f ms %s\n",
               tp, pp, c.accum, (unsigned long long)cs.ops, (unsigned long long)cs.bytes, (unsigned long long)want_ops,
               (unsigned long long)want_bytes, cs.ms_max_rank, cs.measured ? "measured" : "modelled");
        CHECK_EQ_U64(cs.ops, want_ops);
        CHECK_EQ_U64(cs.bytes, want_bytes);
        CHECK(!cs.measured && cs.ms_max_rank > 0);
        CHECK_OK(mo_gpt_split_comm_reset(s));
        CHECK_OK(mo_gpt_split_comm_stats(s, &cs));
        CHECK_EQ_U64(cs.ops, 0);
        mo_gpt_split_destroy(s);
    }
}

// Every rank's peaks on dry equal its peaks on cpu (same allocations in the same order).
static void test_dry_equals_cpu(void) {
    split_case grid[] = {
        {2, 1, 1, MO_CKPT_NONE, 0, 0, "tp 2"},
        {1, 2, 2, MO_CKPT_FULL, 0, 0, "pp 2, accum 2, ckpt full"},
        {2, 2, 4, MO_CKPT_SELECTIVE, 0, 0, "tp 2 pp 2, accum 4, ckpt selective"},
        {4, 1, 2, MO_CKPT_SQRT, 0, 1, "tp 4, accum 2, ckpt sqrt, attn fused"},
        {1, 4, 4, MO_CKPT_EVERY, 1, 0, "pp 4, accum 4, ckpt every:1"},
        {2, 4, 8, MO_CKPT_NONE, 0, 0, "tp 2 pp 4, accum 8"},
        {2, 2, 2, MO_CKPT_SELECTIVE, 0, 0, "bf16 tp 2 pp 2, accum 2, ckpt selective"},
        {2, 1, 1, MO_CKPT_NONE, 0, 1, "fp16 tp 2, attn fused"},
    };
    const mo_dtype gdt[] = {MO_F32, MO_F32, MO_F32, MO_F32, MO_F32, MO_F32, MO_BF16, MO_F16};
    for (size_t i = 0; i < sizeof grid / sizeof grid[0]; i++) {
        const split_case *k = &grid[i];
        mo_gpt_config c = split_config();
        c.accum = k->accum; c.ckpt = k->ckpt; c.ckpt_every = k->every; c.attn_fused = k->fused;
        c.dtype = gdt[i];
        c.loss_scaling = gdt[i] == MO_F16;
        c.grad_clip = 1.0f;
        int W = k->tp * k->pp;
        uint64_t peak[8] = {0};
        int same = split_dry_equals_cpu(&c, split_sc(k->tp, k->pp, MO_BACKEND_CPU), W, k->what, peak);
        if (same < 0) return;
        printf("  %-42s dry == cpu on all %d ranks: %s (rank 0 peak %llu, rank %d peak %llu)\n", k->what, W,
               same ? "yes" : "NO", (unsigned long long)peak[0], W - 1,
               (unsigned long long)peak[W - 1]);
    }
}

// Activation peak (bytes, over the resting allocation) of one forward/backward on rank r, dry.
static int act_peaks(mo_gpt_config c, int tp, int pp, uint64_t *peak, int nranks) {
    mo_gpt_split *s = NULL;
    mo_gpt_split_config sc = split_sc(tp, pp, MO_BACKEND_DRY);
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

// Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models", eq. 2 with
// tensor parallelism, no sequence parallelism): one layer stores s*b*h*(10 + 24/t + 5*a*s/(h*t))
// bytes with materialized attention. Its accounting: 16-bit activations (2 bytes) and 1-byte dropout
// masks. Not split over t: the LayerNorm inputs 4sbh (2 LNs x 2 bytes), the QKV and MLP inputs (the
// LN outputs) 4sbh, 2 dropout masks (attention output and MLP output) 2sbh = 10sbh. Split: Q, K 4sbh,
// V 2sbh, proj input 2sbh, fc output 8sbh, GELU output 8sbh = 24sbh/t. Attention: softmax 2as^2b,
// its dropout mask as^2b, dropout output 2as^2b = 5as^2b/t.
// Ours, per layer per rank, counted from what block_forward keeps (fp32; 16-bit halves the tensors):
//   not split   block input (= the previous block's output) sbh, ln1 out sbh, resid2 (LN2 input) sbh,
//               ln2 out sbh: 4 sbh elements = 16sbh bytes (16-bit: 8sbh), against 10sbh: no dropout, so
//               no masks (-2sbh), and everything in 4 bytes (+ 8sbh against 16-bit);
//   split       qkv 3sbh, attention output sbh, fc pre-activation 4sbh, GELU output 4sbh: 12sbh/t
//               elements = 48sbh/t bytes (16-bit: 24sbh/t, exactly Korthikanti's);
//   attention   the softmax probabilities only, as^2b/t elements = 4as^2b/t bytes (16-bit 2as^2b/t;
//               Korthikanti's 5 counts the dropout mask and the dropout output too); fused: the
//               log-sum-exp only, 4asb/t bytes;
//   statistics  mean and rstd of both LayerNorms, fp32 always: 16sb bytes, which the paper leaves out.
// So ours(fp32) = sbh(16 + 48/t) + 4as^2b/t + 16sb. The test measures it (the difference between
// 4 and 2 layers of the activation peak, per rank on the dry backend) and checks it to the byte.
static double korthikanti(double s, double b, double h, double a, double t) { return s * b * h * (10 + 24 / t + 5 * a * s / (h * t)); }

static void test_activation_formula(void) {
    const int S = 128, Bm = 2, H = 256, A = 8;
    printf("  per-layer activation memory per rank, s=%d b=%d h=%d a=%d, fp32, no checkpointing (bytes):\n", S, Bm, H, A);
    printf("    %-6s %-6s %12s %12s %14s %8s\n", "attn", "t", "measured", "ours(fp32)", "Korthikanti", "ratio");
    for (int fused = 0; fused <= 1; fused++) {
        for (int t = 1; t <= 8; t *= 2) {
            uint64_t p2[8], p4[8];
            mo_gpt_config c = split_config();
            c.hidden = H; c.heads = A; c.seq = S; c.batch = Bm; c.vocab = 256; c.attn_fused = fused;
            c.layers = 2;
            if (!act_peaks(c, t, 1, p2, t)) return;
            c.layers = 4;
            if (!act_peaks(c, t, 1, p4, t)) return;
            double s = S, b = Bm, h = H, a = A;
            double ours = s * b * h * (16 + 48.0 / t) + (fused ? 4 * a * s * b / t : 4 * a * s * s * b / t) + 16 * s * b;
            double kor = korthikanti(s, b, h, a, t);
            for (int r = 0; r < t; r++) {
                uint64_t per = (p4[r] - p2[r]) / 2;
                if (r == 0)
                    printf("    %-6s %-6d %12llu %12.0f %14.0f %8.3f\n", fused ? "fused" : "mat.", t, (unsigned long long)per,
                           ours, fused ? NAN : kor, fused ? NAN : (double)per / kor);
                CHECK_MSG((double)per == ours, "t %d rank %d (attn %s): %llu bytes per layer, formula %.0f", t, r,
                          fused ? "fused" : "materialized", (unsigned long long)per, ours);
            }
        }
    }
    printf("    (ratio ~1.5: fp32 doubles every tensor against the paper's 16 bits, while we keep no dropout masks or\n"
           "     dropout outputs: in 16 bits ours would be sbh(8 + 24/t + 2as/(ht)) + 16sb against sbh(10 + 24/t + 5as/(ht));\n"
           "     16sb: the LayerNorm mean/rstd the paper leaves out; fused attention keeps 4asb/t (lse) instead of 4as^2b/t)\n");
}

// 1F1B: stage s holds at most min(P - s, M) micro-batches' activations at once. Measured as the growth
// of the stage's activation peak from M = 1 to M = 8 micro-batches of the same size, in units of one
// micro-batch's stage activations (its layers/P blocks): held = 1 + growth / per_micro.
static void test_pipeline_memory(void) {
    const int P = 4, M = 8;
    mo_gpt_config c = split_config();
    c.layers = 8; c.hidden = 256; c.heads = 8; c.seq = 64; c.vocab = 128;
    uint64_t p1[P], pm[P];
    c.accum = 1; c.batch = 2;
    if (!act_peaks(c, 1, P, p1, P)) return;
    c.accum = M; c.batch = 2 * M;
    if (!act_peaks(c, 1, P, pm, P)) return;
    double s = c.seq, b = 2, h = c.hidden, a = c.heads;
    double per_layer = s * b * h * (16 + 48.0) + 4 * a * s * s * b + 16 * s * b;
    double per_micro = per_layer * (c.layers / P);
    printf("  1F1B, pp %d, accum %d (micro-batch %d): activations each stage holds (GPipe would hold %d on every stage):\n", P,
           M, 2, M);
    for (int st = 0; st < P; st++) {
        double held = 1 + (double)(pm[st] - p1[st]) / per_micro;
        int want = P - st < M ? P - st : M;
        printf("    stage %d: activation peak %llu bytes (%llu with accum 1): %.2f micro-batches held, 1F1B bound %d\n", st,
               (unsigned long long)pm[st], (unsigned long long)p1[st], held, want);
        CHECK_MSG(fabs(held - want) < 0.25, "stage %d holds %.2f micro-batches, 1F1B says %d", st, held, want);
    }
}

// A rank that runs out of memory mid-step stops every rank: no hang, the error names the rank, every
// activation is given back everywhere, and the dead split refuses further steps. The cap sits between
// the first stage's reserved peak and the last stage's (whose logits are large), found on dry.
static void test_oom_unwinds(void) {
    mo_gpt_config c = split_config();
    c.seq = 64; c.batch = 8; c.accum = 2; c.vocab = 32768;
    int tp = 2, pp = 2, W = 4;
    uint64_t res[4];
    for (int b = 0; b < 2; b++) {
        mo_gpt_split *s = NULL;
        mo_gpt_split_config sc = split_sc(tp, pp, MO_BACKEND_DRY);
        uint64_t cap = 0;
        if (b == 1) {
            uint64_t lo = res[0] > res[1] ? res[0] : res[1], hi = res[2] < res[3] ? res[2] : res[3];
            if (!CHECK_MSG(lo < hi, "no cap separates the stages: first %llu, last %llu", (unsigned long long)lo,
                           (unsigned long long)hi))
                return;
            cap = lo + (hi - lo) / 2;
            sc.backend = MO_BACKEND_CPU;
        }
        sc.cap_bytes = cap;
        if (!CHECK_OK(split_open(&s, &c, &sc, 1))) return;
        uint64_t before[4];
        for (int r = 0; r < W; r++) {
            mo_alloc_stats a;
            mo_allocator_stats(mo_gpt_split_allocator(s, r), &a);
            before[r] = a.allocated_bytes;
        }
        mo_status st = mo_gpt_split_step(s);
        if (b == 0) {
            CHECK_OK(st);
            for (int r = 0; r < W; r++) {
                mo_alloc_stats a;
                mo_allocator_stats(mo_gpt_split_allocator(s, r), &a);
                res[r] = a.peak_reserved_bytes;
            }
        } else {
            char msg[1100];
            snprintf(msg, sizeof msg, "%s", mo_errmsg());
            printf("  cap %llu per rank (reserved peaks on dry: %llu %llu %llu %llu): step -> %s: %s\n",
                   (unsigned long long)cap, (unsigned long long)res[0], (unsigned long long)res[1],
                   (unsigned long long)res[2], (unsigned long long)res[3], mo_status_name(st), msg);
            CHECK_MSG(st == MO_ERR_OOM, "the step under a cap returned %s, not oom", mo_status_name(st));
            CHECK_MSG(strstr(msg, "rank 2") || strstr(msg, "rank 3"), "the error names no last-stage rank: %s", msg);
            for (int r = 0; r < W; r++) {
                mo_alloc_stats a;
                mo_allocator_stats(mo_gpt_split_allocator(s, r), &a);
                CHECK_MSG(a.allocated_bytes == before[r], "rank %d: %llu bytes still allocated after the failed step (%llu before)",
                          r, (unsigned long long)a.allocated_bytes, (unsigned long long)before[r]);
                if (r < 2) CHECK_EQ_U64(a.num_ooms, 0);
            }
            CHECK(mo_gpt_split_step(s) == MO_ERR_OOM); // dead: the same error, at once
        }
        mo_gpt_split_destroy(s);
    }
}

// A cap below the context's GEMM workspace: every rank fails while creating; create returns the
// out-of-memory and gives everything back (no rank waits for a peer that will never join).
static void test_create_oom(void) {
    mo_gpt_config c = split_config();
    mo_gpt_split_config sc = split_sc(2, 2, MO_BACKEND_CPU);
    sc.cap_bytes = 1 << 20;
    mo_gpt_split *s = NULL;
    mo_status st = mo_gpt_split_create(&s, &c, &sc);
    printf("  create under a 1 MiB cap -> %s: %s\n", mo_status_name(st), mo_errmsg());
    CHECK(st == MO_ERR_OOM && !s);
    // The first stage fails this time (it holds 2 micro-batches under 1F1B, the last stage 1, and the
    // logits are small): the last stage is left waiting in a receive and must be woken.
    c.hidden = 64; c.seq = 64; c.batch = 16; c.accum = 4;
    uint64_t res[4];
    sc.cap_bytes = 0;
    sc.backend = MO_BACKEND_DRY;
    if (!CHECK_OK(split_open(&s, &c, &sc, 1))) return;
    CHECK_OK(mo_gpt_split_step(s));
    for (int r = 0; r < 4; r++) {
        mo_alloc_stats a;
        mo_allocator_stats(mo_gpt_split_allocator(s, r), &a);
        res[r] = a.peak_reserved_bytes;
    }
    mo_gpt_split_destroy(s);
    uint64_t lo = res[2] > res[3] ? res[2] : res[3], hi = res[0] < res[1] ? res[0] : res[1];
    if (!CHECK_MSG(lo < hi, "no cap separates the stages: last %llu, first %llu", (unsigned long long)lo,
                   (unsigned long long)hi))
        return;
    sc.backend = MO_BACKEND_CPU;
    sc.cap_bytes = lo + (hi - lo) / 2;
    if (!CHECK_OK(split_open(&s, &c, &sc, 1))) return;
    st = mo_gpt_split_step(s);
    printf("  cap %llu (reserved peaks on dry %llu %llu %llu %llu): step -> %s: %s\n", (unsigned long long)sc.cap_bytes,
           (unsigned long long)res[0], (unsigned long long)res[1], (unsigned long long)res[2], (unsigned long long)res[3],
           mo_status_name(st), mo_errmsg());
    CHECK(st == MO_ERR_OOM && (strstr(mo_errmsg(), "rank 0") || strstr(mo_errmsg(), "rank 1")));
    mo_gpt_split_destroy(s);
}

static void expect_bad(mo_gpt_config c, int tp, int pp, int comm, mo_backend_kind be, mo_status want, const char *flag) {
    mo_gpt_split_config sc = split_sc(tp, pp, be);
    sc.comm = comm;
    mo_gpt_split *s = NULL;
    mo_status st = mo_gpt_split_create(&s, &c, &sc);
    const char *msg = mo_errmsg();
    CHECK_MSG(st == want && strstr(msg, flag) && !s, "tp %d pp %d comm %d: got %s (%s), want %s naming %s", tp, pp, comm,
              mo_status_name(st), msg, mo_status_name(want), flag);
    printf("  refused: %s\n", msg);
    if (s) mo_gpt_split_destroy(s);
}

static void test_bad_input(void) {
    mo_gpt_config c = split_config(); // 4 heads, 4 layers
    expect_bad(c, 3, 1, 0, MO_BACKEND_CPU, MO_ERR_INVALID, "--tp 3");
    expect_bad(c, 8, 1, 0, MO_BACKEND_CPU, MO_ERR_INVALID, "--tp 8");
    expect_bad(c, 0, 1, 0, MO_BACKEND_CPU, MO_ERR_INVALID, "--tp 0");
    expect_bad(c, 1, 3, 0, MO_BACKEND_CPU, MO_ERR_INVALID, "--pp 3");
    expect_bad(c, 1, 0, 0, MO_BACKEND_CPU, MO_ERR_INVALID, "--pp 0");
    expect_bad(c, 2, 1, 1, MO_BACKEND_CPU, MO_ERR_INVALID, "--comm nccl");
    // 16-bit splits, with fp16's loss scaler, are accepted (test_mixed_split checks them).
    mo_gpt_config h = c;
    h.dtype = MO_F16;
    h.loss_scaling = 1;
    mo_gpt_split *s = NULL;
    mo_gpt_split_config sc = split_sc(2, 2, MO_BACKEND_DRY);
    CHECK_OK(mo_gpt_split_validate(&h, &sc));
    CHECK_OK(mo_gpt_split_create(&s, &h, &sc));
    mo_gpt_split_destroy(s);
}

// fp16 and bf16 splits against the unsplit model of the same precision. pp alone passes 16-bit
// activations between stages unchanged and only regroups fp32 sums (wte's two halves): fp32 rounding,
// 1e-5 as in fp32. tp rounds each rank's partial proj/fcproj output (and partial d ln1, d ln2) to the
// 16-bit type before the all-reduce, where the unsplit GEMM rounds the full sum once: one ulp (2^-8
// bf16, 2^-11 fp16) on those tensors, compounded over 4 layers forward and back. Tolerances per
// gradient tensor: bf16 5e-2, fp16 1e-2 (the GPU-vs-CPU 16-bit model test measured 3e-3..6e-3 bf16 and
// 6e-4..8e-4 fp16 for the same kind of one-ulp flips); loss 2e-3 / 5e-4 relative. Measured here: bf16
// tp worst 7.8e-3, fp16 1.0e-3; pp alone 3e-8 (fp32 rounding), losses within 4e-5 / 8e-6. A wrong conversion
// (no widening, a missing round back) or a dropped partial gives O(1); a sum in 16 bits would not show
// (at tp 2 it rounds the same as the fp32 sum), and needs no test: the communicator has no 16-bit sum. fp16's scaler:
// an inf injected on one rank only must skip the step on every rank and halve every rank's scale.
static void test_mixed_split(void) {
    const mo_dtype dts[2] = {MO_BF16, MO_F16};
    split_case cases[] = {
        {1, 2, 2, MO_CKPT_NONE, 0, 0, "pp 2, accum 2"},
        {2, 1, 1, MO_CKPT_NONE, 0, 0, "tp 2"},
        {2, 2, 2, MO_CKPT_FULL, 0, 0, "tp 2 pp 2, accum 2, ckpt full"},
        {4, 1, 1, MO_CKPT_NONE, 0, 1, "tp 4, attn fused"},
    };
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            const split_case *k = &cases[i];
            mo_gpt_config c = split_config();
            c.hidden = 64; // head size 16: the 16-bit fused kernel takes multiples of 8
            c.dtype = dts[d];
            c.loss_scaling = dts[d] == MO_F16;
            c.accum = k->accum; c.ckpt = k->ckpt; c.attn_fused = k->fused;
            mo_gpt_config plain = c;
            plain.ckpt = MO_CKPT_NONE;
            split_ref ref, got;
            int rep = 0;
            if (!split_ref_run(MO_BACKEND_CPU, plain, 11, 0, &ref)) return;
            if (!split_run(c, split_sc(k->tp, k->pp, MO_BACKEND_CPU), 11, 0, &got, &rep)) { split_ref_free(&ref); continue; }
            int wp = 0;
            double e = split_worst_tensor(&c, got.grads, ref.grads, &wp);
            double le = fabs(got.loss - ref.loss) / fabs(ref.loss);
            int bf = dts[d] == MO_BF16, tp_only_pp = k->tp == 1;
            double gt = tp_only_pp ? GRAD_TOL : bf ? 5e-2 : 1e-2, lt = tp_only_pp ? LOSS_TOL : bf ? 2e-3 : 5e-4;
            printf("  %s %-40s loss %.7f (unsplit %.7f, rel %.1e), worst gradient %s rel %.2e (tol %.0e)\n",
                   mo_dtype_name(dts[d]), k->what, got.loss, ref.loss, le, split_pname[wp], e, gt);
            CHECK_MSG(e <= gt, "%s %s: gradient of %s off by %.3e", mo_dtype_name(dts[d]), k->what, split_pname[wp], e);
            CHECK_MSG(le <= lt, "%s %s: loss %.9g vs unsplit %.9g", mo_dtype_name(dts[d]), k->what, got.loss, ref.loss);
            CHECK_MSG(rep, "%s %s: a replicated tensor differs between ranks", mo_dtype_name(dts[d]), k->what);
            split_ref_free(&ref);
            split_ref_free(&got);
        }
    // The scaler's one verdict: inject an inf on the last rank only.
    mo_gpt_config c = split_config();
    c.hidden = 64;
    c.dtype = MO_F16;
    c.loss_scaling = 1;
    c.loss_scale_init = 1024.0f;
    c.scaler_interval = 2;
    mo_gpt_split *s = NULL;
    mo_gpt_split_config sc = split_sc(2, 2, MO_BACKEND_CPU);
    if (!CHECK_OK(split_open(&s, &c, &sc, 3))) return;
    int W = mo_gpt_split_world(s);
    CHECK_OK(mo_gpt_split_step(s));
    mo_gpt_split_model(s, W - 1)->inject_nonfinite = 1;
    CHECK_OK(mo_gpt_split_step(s));
    int same = 1;
    for (int r = 0; r < W; r++) {
        mo_gpt *m = mo_gpt_split_model(s, r);
        same &= m->skipped_steps == 1 && m->loss_scale == 512.0f && m->step == 1 && m->last_skipped == 1;
    }
    CHECK_MSG(same, "an inf on rank %d did not skip the step and halve the scale on every rank", W - 1);
    CHECK_OK(mo_gpt_split_step(s));
    CHECK_OK(mo_gpt_split_step(s));
    for (int r = 0; r < W; r++) {
        mo_gpt *m = mo_gpt_split_model(s, r);
        CHECK_MSG(m->loss_scale == 1024.0f && m->step == 3, "rank %d: scale %g after 2 clean steps (want 1024), %d updates",
                  r, (double)m->loss_scale, m->step);
    }
    float *p = malloc(mo_gpt_num_params(&c) * sizeof(float));
    int rep = 0;
    CHECK_OK(mo_gpt_split_gather(s, 0, p, &rep));
    CHECK_MSG(rep, "fp16 split: replicas differ after a skipped step");
    free(p);
    mo_gpt_split_destroy(s);
    printf("  fp16 tp 2 pp 2: an inf on rank %d skipped the step on all %d ranks (scale 1024 -> 512 -> 1024)\n", W - 1, W);
}

int main(void) {
    test_seed_from_time();
    test_bad_input();
    test_init_is_unsplit();
    test_grads_equal_unsplit();
    test_steps_track_unsplit();
    test_plain_and_deterministic();
    test_comm_volume();
    test_dry_equals_cpu();
    test_activation_formula();
    test_pipeline_memory();
    test_oom_unwinds();
    test_create_oom();
    test_mixed_split();
    return test_finish();
}
