// The split GPT on the GPU (models/gpt_split.h): every rank a thread on one GPU with the local
// communicator (its own stream and allocator), and with nccl (one GPU per rank) where the build has
// NCCL and the machine enough GPUs.
//   - tp 2 and 4, pp 2 and 4, tp 2 x pp 2: loss and every gradient tensor against the unsplit model
//     on the CPU (the GPU tolerance of gpu_gpt: 1e-4 per tensor, 1e-5 on the loss) and against the
//     unsplit model on the GPU; replicated tensors bit-identical across the ranks;
//   - two split runs give the same bits (the local kind sums in rank order on the device too);
//   - tf32 split runs within tf32's tolerance of the fp32 unsplit CPU model;
//   - bf16 and fp16 tp 2 x pp 2 against the cuda unsplit model of the same precision (one 16-bit ulp
//     per tp all-reduce: tolerances of test_gpt_split.c), the same bits twice;
//   - every rank's dry-backend peaks equal its cuda peaks (allocated and reserved, to the byte);
//   - an out-of-memory on one rank (a cap between the stages' peaks) unwinds every rank, no hang;
//   - nccl: the same bits as local (both sum in rank order), times measured, not modelled;
//   - sequence parallelism (--sp) in each of these: the axis all-gathers and reduce-scatters on the
//     device (local: copies and the rank-order sum kernel per sequence; nccl: one collective per sequence).
#include <math.h>
#include <stdio.h>
#include "kernels/device.h"
#include "tests/gpt_split_fixture.h"

// Reduced: batch 4 (accum 4 still divides it, one-row micro-batches; T, C and the heads, which pick the
// kernels, unchanged).
static mo_gpt_config gpu_config(void) {
    mo_gpt_config c = split_config();
    c.layers = 4; c.hidden = 128; c.heads = 4; c.seq = 64; c.batch = test_is_reduced() ? 4 : 8; c.vocab = 1000;
    return c;
}

static void compare(const char *what, const mo_gpt_config *c, const split_ref *got, const split_ref *want, double tol,
                    double ltol) {
    int wp = 0;
    double e = split_worst_tensor(c, got->grads, want->grads, &wp);
    double le = fabs(got->loss - want->loss) / fabs(want->loss);
    printf("  %-50s loss %.7f vs %.7f (rel %.1e), worst gradient %s rel %.2e (tol %.0e)\n", what, got->loss, want->loss, le,
           split_pname[wp], e, tol);
    CHECK_MSG(e <= tol, "%s: gradient %s off by %.3e", what, split_pname[wp], e);
    CHECK_MSG(le <= ltol, "%s: loss %.9g vs %.9g", what, got->loss, want->loss);
}

static void test_split_equals_unsplit(uint64_t seed) {
    // tp, pp, accum, fused, sp
    int grid[][5] = {{2, 1, 1, 0, 0}, {4, 1, 2, 0, 0}, {1, 2, 4, 0, 0}, {1, 4, 4, 0, 0}, {2, 2, 4, 0, 0}, {4, 1, 1, 1, 0},
                     {2, 2, 2, 1, 0}, {2, 1, 2, 0, 1}, {4, 1, 1, 1, 1}, {2, 2, 4, 0, 1}};
    // Reduced: pp 4 (accum 4), tp 4 fused with sp (accum 1), tp 2 x pp 2 materialized with sp (accum 4):
    // every axis, both attention forms and sp on tp alone and on tp x pp; the second run (same bits) once.
    static const int keep[] = {3, 8, 9};
    const int reduced = test_is_reduced();
    for (size_t i = 0; i < sizeof grid / sizeof grid[0]; i++) {
        int kept = !reduced;
        for (int k = 0; k < 3; k++) kept |= (size_t)keep[k] == i;
        if (!kept || !test_part_take("split equals unsplit")) continue;
        const int twice = !reduced || i == 9;
        mo_gpt_config c = gpu_config();
        c.accum = grid[i][2];
        c.attn_fused = grid[i][3];
        mo_gpt_split_config sc = split_sc(grid[i][0], grid[i][1], MO_BACKEND_CUDA);
        sc.sp = grid[i][4];
        split_ref cpu, gpu, got, again;
        int rep = 0, rep2 = 1;
        memset(&again, 0, sizeof again);
        if (!split_ref_run(MO_BACKEND_CPU, c, seed, 0, &cpu)) return;
        if (!split_ref_run(MO_BACKEND_CUDA, c, seed, 0, &gpu)) return;
        if (!split_run(c, sc, seed, 0, &got, &rep)) return;
        if (twice && !split_run(c, sc, seed, 0, &again, &rep2)) return;
        char what[96];
        snprintf(what, sizeof what, "tp %d pp %d accum %d attn %s%s vs cpu unsplit", grid[i][0], grid[i][1], c.accum,
                 c.attn_fused ? "fused" : "mat.", sc.sp ? " sp" : "");
        compare(what, &c, &got, &cpu, 1e-4, 1e-5);
        snprintf(what, sizeof what, "tp %d pp %d accum %d attn %s%s vs cuda unsplit", grid[i][0], grid[i][1], c.accum,
                 c.attn_fused ? "fused" : "mat.", sc.sp ? " sp" : "");
        compare(what, &c, &got, &gpu, 1e-4, 1e-5);
        CHECK_MSG(rep && rep2, "tp %d pp %d: replicated tensors differ between ranks on the GPU", grid[i][0], grid[i][1]);
        if (twice)
            CHECK_MSG(got.loss == again.loss && !memcmp(got.grads, again.grads, got.n * sizeof(float)),
                      "tp %d pp %d: two GPU split runs differ", grid[i][0], grid[i][1]);
        split_ref_free(&cpu); split_ref_free(&gpu); split_ref_free(&got);
        if (twice) split_ref_free(&again);
    }
}

static void test_tf32(uint64_t seed) {
    mo_gpt_config c = gpu_config();
    c.accum = 2;
    split_ref cpu, got;
    int rep = 0;
    if (!split_ref_run(MO_BACKEND_CPU, c, seed, 0, &cpu)) return;
    c.tf32 = 1;
    if (!split_run(c, split_sc(2, 2, MO_BACKEND_CUDA), seed, 0, &got, &rep)) return;
    compare("tf32, tp 2 pp 2 accum 2 vs cpu fp32 unsplit", &c, &got, &cpu, 2e-2, 1e-3);
    CHECK(rep);
    split_ref_free(&cpu);
    split_ref_free(&got);
}

// 16-bit splits on the GPU against the cuda unsplit model of the same precision (tolerances and why:
// test_gpt_split.c, test_mixed_split: one 16-bit ulp per tp all-reduce), plus the same bits twice.
// Reduced: the second run (same bits) for bf16 only.
static void test_mixed(uint64_t seed) {
    const mo_dtype dts[2] = {MO_BF16, MO_F16};
    for (int d = 0; d < 2; d++) {
        if (!test_part_take("16-bit split")) continue;
        const int twice = !test_is_reduced() || d == 0;
        mo_gpt_config c = gpu_config();
        c.dtype = dts[d];
        c.loss_scaling = dts[d] == MO_F16;
        c.accum = 2;
        split_ref gpu, got, again;
        int rep = 0, rep2 = 1;
        memset(&got, 0, sizeof got);
        memset(&again, 0, sizeof again);
        int ok = split_ref_run(MO_BACKEND_CUDA, c, seed, 0, &gpu) &&
                 split_run(c, split_sc(2, 2, MO_BACKEND_CUDA), seed, 0, &got, &rep) &&
                 (!twice || split_run(c, split_sc(2, 2, MO_BACKEND_CUDA), seed, 0, &again, &rep2));
        if (!ok) { split_ref_free(&gpu); split_ref_free(&got); split_ref_free(&again); return; }
        char what[96];
        snprintf(what, sizeof what, "%s tp 2 pp 2 accum 2 vs cuda unsplit", mo_dtype_name(dts[d]));
        compare(what, &c, &got, &gpu, dts[d] == MO_BF16 ? 5e-2 : 1e-2, dts[d] == MO_BF16 ? 2e-3 : 5e-4);
        CHECK(rep && rep2);
        if (twice)
            CHECK_MSG(got.loss == again.loss && !memcmp(got.grads, again.grads, got.n * sizeof(float)),
                      "%s tp 2 pp 2: two GPU split runs differ", mo_dtype_name(dts[d]));
        split_ref_free(&gpu); split_ref_free(&got);
        if (twice) split_ref_free(&again);
    }
}

static void test_dry_equals_cuda(void) {
    // tp, pp, accum, ckpt, fused, sp
    int grid[][6] = {{2, 1, 1, MO_CKPT_NONE, 0, 0}, {1, 2, 2, MO_CKPT_FULL, 0, 0}, {2, 2, 4, MO_CKPT_SELECTIVE, 0, 0},
                     {4, 1, 2, MO_CKPT_SQRT, 1, 0}, {2, 1, 2, MO_CKPT_FULL, 0, 1}, {4, 2, 2, MO_CKPT_NONE, 1, 1}};
    // Reduced: 4 of the 6, every policy (full with tp 2 sp, not pp 2 alone: pp is in the others).
    for (size_t i = 0; i < sizeof grid / sizeof grid[0]; i++) {
        if ((test_is_reduced() && (i == 0 || i == 1)) || !test_part_take("dry equals cuda")) continue;
        mo_gpt_config c = gpu_config();
        c.accum = grid[i][2]; c.ckpt = (mo_ckpt_kind)grid[i][3]; c.attn_fused = grid[i][4];
        c.grad_clip = 1.0f;
        int W = grid[i][0] * grid[i][1];
        mo_alloc_stats st[2][8];
        for (int b = 0; b < 2; b++) {
            mo_gpt_split *s = NULL;
            mo_gpt_split_config sc = split_sc(grid[i][0], grid[i][1], b ? MO_BACKEND_DRY : MO_BACKEND_CUDA);
            sc.sp = grid[i][5];
            if (!CHECK_OK(split_open(&s, &c, &sc, 4))) return;
            CHECK_OK(mo_gpt_split_step(s));
            CHECK_OK(mo_gpt_split_step(s));
            for (int r = 0; r < W; r++) mo_allocator_stats(mo_gpt_split_allocator(s, r), &st[b][r]);
            mo_gpt_split_destroy(s);
        }
        for (int r = 0; r < W; r++) {
            CHECK_EQ_U64(st[0][r].peak_allocated_bytes, st[1][r].peak_allocated_bytes);
            CHECK_EQ_U64(st[0][r].peak_reserved_bytes, st[1][r].peak_reserved_bytes);
        }
        printf("  tp %d pp %d accum %d%s: cuda rank peaks %llu .. %llu, dry equal: checked\n", grid[i][0], grid[i][1], c.accum,
               grid[i][5] ? " sp" : "",
               (unsigned long long)st[0][0].peak_allocated_bytes, (unsigned long long)st[0][W - 1].peak_allocated_bytes);
    }
}

static void test_oom_unwinds(void) {
    mo_gpt_config c = split_config();
    c.seq = 64; c.batch = 8; c.accum = 2; c.vocab = 32768;
    uint64_t res[4];
    {
        mo_gpt_split *s = NULL;
        mo_gpt_split_config sc = split_sc(2, 2, MO_BACKEND_DRY);
        if (!CHECK_OK(split_open(&s, &c, &sc, 1))) return;
        CHECK_OK(mo_gpt_split_step(s));
        for (int r = 0; r < 4; r++) {
            mo_alloc_stats a;
            mo_allocator_stats(mo_gpt_split_allocator(s, r), &a);
            res[r] = a.peak_reserved_bytes;
        }
        mo_gpt_split_destroy(s);
    }
    uint64_t lo = res[0] > res[1] ? res[0] : res[1], hi = res[2] < res[3] ? res[2] : res[3];
    if (!CHECK(lo < hi)) return;
    mo_gpt_split *s = NULL;
    mo_gpt_split_config sc = split_sc(2, 2, MO_BACKEND_CUDA);
    sc.cap_bytes = lo + (hi - lo) / 2;
    if (!CHECK_OK(split_open(&s, &c, &sc, 1))) return;
    uint64_t before[4];
    for (int r = 0; r < 4; r++) {
        mo_alloc_stats a;
        mo_allocator_stats(mo_gpt_split_allocator(s, r), &a);
        before[r] = a.allocated_bytes;
    }
    mo_status st = mo_gpt_split_step(s);
    printf("  cuda, cap %llu per rank: step -> %s: %s\n", (unsigned long long)sc.cap_bytes, mo_status_name(st), mo_errmsg());
    CHECK(st == MO_ERR_OOM);
    for (int r = 0; r < 4; r++) {
        mo_alloc_stats a;
        mo_allocator_stats(mo_gpt_split_allocator(s, r), &a);
        CHECK_EQ_U64(a.allocated_bytes, before[r]);
    }
    mo_gpt_split_destroy(s);
}

// nccl (ordered, the default) sums in rank order as local does: the same bits. Needs W GPUs.
static void test_nccl(uint64_t seed) {
#ifndef MEMOPT_HAVE_NCCL
    (void)seed;
    printf("  nccl: not built (no NCCL found at configure time): skipped\n");
#else
    int n = 0;
    CHECK_OK(mo_device_count(&n));
    int grid[][4] = {{2, 1, 1, 0}, {1, 2, 2, 0}, {2, 2, 4, 0}, {4, 2, 4, 0}, {2, 1, 2, 1}, {2, 2, 4, 1}}; // tp, pp, accum, sp
    // Reduced: tp 2 and tp 2 x pp 2 with sp (tp, pp and sp collectives each once).
    for (size_t i = 0; i < sizeof grid / sizeof grid[0]; i++) {
        if ((test_is_reduced() && i != 0 && i != 5) || !test_part_take("nccl")) continue;
        int W = grid[i][0] * grid[i][1];
        if (W > n) {
            printf("  nccl tp %d pp %d: needs %d GPUs, %d here: skipped\n", grid[i][0], grid[i][1], W, n);
            continue;
        }
        mo_gpt_config c = gpu_config();
        c.accum = grid[i][2];
        split_ref loc, nc, cpu;
        int rep = 0;
        mo_gpt_split_config sc = split_sc(grid[i][0], grid[i][1], MO_BACKEND_CUDA);
        sc.sp = grid[i][3];
        if (!split_ref_run(MO_BACKEND_CPU, c, seed, 0, &cpu)) return;
        if (!split_run(c, sc, seed, 0, &loc, &rep)) return;
        sc.comm = 1;
        if (!split_run(c, sc, seed, 0, &nc, &rep)) return;
        char what[64];
        snprintf(what, sizeof what, "nccl tp %d pp %d accum %d%s vs cpu unsplit", grid[i][0], grid[i][1], c.accum,
                 sc.sp ? " sp" : "");
        compare(what, &c, &nc, &cpu, 1e-4, 1e-5);
        CHECK(rep);
        CHECK_MSG(nc.loss == loc.loss && !memcmp(nc.grads, loc.grads, nc.n * sizeof(float)),
                  "nccl tp %d pp %d: not the same bits as local", grid[i][0], grid[i][1]);
        // Times are measured on nccl.
        mo_gpt_split *s = NULL;
        if (CHECK_OK(split_open(&s, &c, &sc, seed))) {
            CHECK_OK(mo_gpt_split_step(s));
            mo_gpt_split_comm cs;
            CHECK_OK(mo_gpt_split_comm_stats(s, &cs));
            printf("    nccl step %.3f ms (slowest rank), comm %.3f ms measured: %d, %llu bytes\n", mo_gpt_split_step_ms(s),
                   cs.ms_max_rank, cs.measured, (unsigned long long)cs.bytes);
            CHECK(cs.measured == 1);
            mo_gpt_split_destroy(s);
        }
        split_ref_free(&loc); split_ref_free(&nc); split_ref_free(&cpu);
    }
#endif
}

int main(void) {
    test_require_gpu();
    uint64_t seed = test_seed_from_time();
    test_reduced("batch 8 (4 instead), 7 of the 10 split-vs-unsplit cases, 2 of 6 dry cases, 4 of 6 nccl cases,"
                 " 3 repeat runs");
    test_split_equals_unsplit(seed);
    if (test_part_take("tf32 split")) test_tf32(seed + 1);
    test_mixed(seed + 3);
    test_dry_equals_cuda();
    if (test_part_take("oom unwinds")) test_oom_unwinds();
    test_nccl(seed + 2);
    return test_finish();
}
