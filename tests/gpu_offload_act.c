// --offload activations on the GPU, for every model: the checkpointed segments' inputs go to pinned host
// memory on the copy stream (kernels/copy_stream.c) and come back before their recompute. Over
// precisions x checkpoint policies x accumulation, three steps' losses are bit-identical to the same
// cuda run without offload (the kernels are deterministic; a copy that came back late or not at all
// would change them), the dry backend predicts the cuda run's device peak (allocated and reserved)
// and the pinned host peak to the byte, and every copy was made. The copy stream's busy time and the
// compute stream's stall are printed (the overlap is a benchmark figure, not asserted).
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "tests/offload_act_fixture.h"

static const char *const gpt_base[] = {"--preset", "gpt2-124m", "--layers", "6", "--hidden", "128", "--heads", "4",
                                       "--batch", "4", "--seq", "64", "--vocab", "1000", NULL};
// MEMOPT_TEST_REDUCED=2 (racecheck, initcheck): 3 blocks and batch 2. Session 18 timed a forward and backward
// of a 3-block GPT of this width at about 40 s under initcheck (3 ms natively), and this test's first case at
// 6 blocks ran past 470 s under initcheck and under racecheck (102 GiB of host memory). At 3 blocks full
// offloads two inputs, every:2, sqrt and segments:3 one each, so the check that offload lowers the device peak
// (two inputs or more) holds there in the full cases only; at 6 blocks also in every:2 and sqrt.
static const char *const gpt_base_l2[] = {"--preset", "gpt2-124m", "--layers", "3", "--hidden", "128", "--heads", "4",
                                          "--batch", "2", "--seq", "64", "--vocab", "1000", NULL};
static const char *const mlp_base[] = {"--model", "mlp", "--layers", "6", "--hidden", "128", "--input", "64",
                                       "--classes", "10", "--batch", "64", NULL};
static const char *const res_base[] = {"--model", "resnet", "--layers", "18", "--hidden", "8", "--input", "32",
                                       "--classes", "5", "--batch", "8", NULL};

static void one_case(const char *model, const char *const *base, int blocks, const char *prec, const char *ckpt, const char *accum) {
    const char *kv_none[] = {"--precision", prec, "--ckpt", ckpt, "--accum", accum, NULL};
    const char *kv_off[] = {"--precision", prec, "--ckpt", ckpt, "--accum", accum, "--offload", "activations", NULL};
    mo_run_config rc_none, rc_off, rc_dry;
    oa_config(base, kv_none, MO_BACKEND_CUDA, &rc_none);
    oa_config(base, kv_off, MO_BACKEND_CUDA, &rc_off);
    oa_config(base, kv_off, MO_BACKEND_DRY, &rc_dry);
    oa_result none, off, dry;
    oa_run(&rc_none, &none);
    oa_run(&rc_off, &off);
    oa_run(&rc_dry, &dry);
    if (!CHECK_MSG(none.ok && off.ok && dry.ok, "%s %s %s accum %s: a run failed", model, prec, ckpt, accum)) return;
    CHECK_MSG(!memcmp(none.loss, off.loss, sizeof none.loss) && isfinite(off.loss[oa_steps() - 1]),
              "%s %s %s accum %s: losses %.9g %.9g %.9g with offload, %.9g %.9g %.9g without", model, prec, ckpt,
              accum, off.loss[0], off.loss[1], off.loss[2], none.loss[0], none.loss[1], none.loss[2]);
    CHECK_MSG(off.dev_peak == dry.dev_peak && off.dev_reserved == dry.dev_reserved && off.host_peak == dry.host_peak,
              "%s %s %s accum %s: cuda device %llu (reserved %llu) host %llu, dry %llu (%llu) %llu", model, prec, ckpt,
              accum, (unsigned long long)off.dev_peak, (unsigned long long)off.dev_reserved,
              (unsigned long long)off.host_peak, (unsigned long long)dry.dev_peak, (unsigned long long)dry.dev_reserved,
              (unsigned long long)dry.host_peak);
    const int noff = offloaded_inputs(&rc_off, !strcmp(model, "resnet"), blocks);
    CHECK_MSG(off.copies.copies == 2 * noff * rc_off.accum * oa_steps() && off.copies.copies == dry.copies.copies &&
                  off.copies.bytes == dry.copies.bytes,
              "%s %s %s: %d copies on cuda, %d on dry, want %d", model, prec, ckpt, off.copies.copies, dry.copies.copies,
              2 * noff * rc_off.accum * oa_steps());
    CHECK_MSG(off.dev_peak < none.dev_peak || noff < 2, "%s %s %s accum %s: device peak %llu with offload, %llu without", model,
              prec, ckpt, accum, (unsigned long long)off.dev_peak, (unsigned long long)none.dev_peak);
    CHECK_MSG(off.host_left == 0 && (off.copies.copy_ms > 0 || noff == 0) && off.copies.stall_ms >= 0,
              "%s %s %s: host left %llu, copies %.4f ms, stall %.4f ms", model, prec, ckpt,
              (unsigned long long)off.host_left, off.copies.copy_ms, off.copies.stall_ms);
    printf(" %s %s %s accum %s: device peak %llu -> %llu, host %llu; %d copies of %llu bytes, copy %.3f ms, stall %.3f ms"
           " over %d steps\n", model, prec, ckpt, accum, (unsigned long long)none.dev_peak,
           (unsigned long long)off.dev_peak, (unsigned long long)off.host_peak, off.copies.copies,
           (unsigned long long)off.copies.bytes, off.copies.copy_ms, off.copies.stall_ms, oa_steps());
}

// The copies made late on purpose (the copy stream spins before each) and every fetched block poisoned with
// NaN before its copy: still bit-identical, so every read waits for its copy. Then the negative control:
// with the device -> host joins skipped (each offloaded block freed and reused while its late copy still
// reads it) the same runs must come out different, or this test could not see a missing join at all.
static void test_late_copies(void) {
    static const struct { const char *const *base; const char *prec, *ckpt, *accum; } cases[] = {
        {gpt_base, "bf16", "full", "2"}, {gpt_base, "fp32", "every:2", "1"}, {mlp_base, "fp32", "full", "2"},
        {res_base, "bf16", "full", "1"}};
    // MEMOPT_TEST_REDUCED=2 (racecheck, initcheck): the GPT at gpt_base_l2, accumulation 1 (the grid below
    // offloads it with accumulation 2), and no run with the joins skipped (its check is left out when reduced)
    const int l2 = test_reduced_level() >= 2;
    for (int i = 0; i < 4; i++) {
        if (!test_part_take("late copies")) continue;
        const char *const *base = l2 && cases[i].base == gpt_base ? gpt_base_l2 : cases[i].base;
        const char *accum = l2 && cases[i].base == gpt_base ? "1" : cases[i].accum;
        const char *kv_none[] = {"--precision", cases[i].prec, "--ckpt", cases[i].ckpt, "--accum", accum, NULL};
        const char *kv_off[] = {"--precision", cases[i].prec, "--ckpt", cases[i].ckpt, "--accum", accum,
                                "--offload", "activations", NULL};
        mo_run_config rc_none, rc_off;
        oa_config(base, kv_none, MO_BACKEND_CUDA, &rc_none);
        oa_config(base, kv_off, MO_BACKEND_CUDA, &rc_off);
        oa_result none, late, skip;
        memset(&skip, 0, sizeof skip);
        oa_run(&rc_none, &none);
        mo_copy_testing = (mo_copy_test){.delay_us = 1000, .poison = 1, .skip_out_joins = 0};
        oa_run(&rc_off, &late);
        mo_copy_testing.skip_out_joins = 1;
        if (!l2) oa_run(&rc_off, &skip);
        mo_copy_testing = (mo_copy_test){0};
        const char *model = rc_off.model;
        CHECK_MSG(none.ok && late.ok && !memcmp(none.loss, late.loss, sizeof none.loss),
                  "%s %s %s: late, poisoned copies: losses %.9g %.9g %.9g, without offload %.9g %.9g %.9g", model,
                  cases[i].prec, cases[i].ckpt, late.loss[0], late.loss[1], late.loss[2], none.loss[0], none.loss[1],
                  none.loss[2]);
        // Under compute-sanitizer (MEMOPT_TEST_REDUCED) the negative control cannot work: the tool runs
        // the copy stream's work and the compute one after the other, so a missing join loses nothing
        // (the sanitizer pass of session 12 saw two of the four cases keep their losses)
        if (!test_is_reduced())
            CHECK_MSG(memcmp(none.loss, skip.loss, sizeof none.loss) != 0,
                      "%s %s %s: with the joins skipped the losses stayed the same: the test cannot see a missing join",
                      model, cases[i].prec, cases[i].ckpt);
        else if (i == 0)
            printf("MEMOPT_TEST_REDUCED: the negative control's check skipped (the sanitizer serializes the streams)\n");
        if (l2)
            printf(" late copies %s %s %s accum %s: stall %.3f ms of %.3f ms copying (same bits)\n", model, cases[i].prec,
                   cases[i].ckpt, accum, late.copies.stall_ms, late.copies.copy_ms);
        else
            printf(" late copies %s %s %s: stall %.3f ms of %.3f ms copying (same bits); joins skipped: losses %.6g %.6g %.6g"
                   " (want different from %.6g %.6g %.6g)\n", model, cases[i].prec, cases[i].ckpt, late.copies.stall_ms,
                   late.copies.copy_ms, skip.loss[0], skip.loss[1], skip.loss[2], none.loss[0], none.loss[1], none.loss[2]);
    }
}

int main(void) {
    test_require_gpu();
    test_late_copies(); // first: the stream-ordering checks
    static const char *const precs[] = {"fp32", "tf32", "bf16", "fp16"};
    static const char *const ckpts[] = {"full", "every:2", "sqrt", "segments:3"};
    static const char *const accums[] = {"1", "2"};
    const int l2 = test_reduced_level() >= 2;
    struct { const char *name; const char *const *base; int blocks; } models[] = {
        {"gpt", l2 ? gpt_base_l2 : gpt_base, l2 ? 3 : 6}, {"mlp", mlp_base, 6}, {"resnet", res_base, 8}};
    // Reduced: every model in every precision (12 of the 96 cases; the late-copy cases and the negative
    // control above unchanged), the policy and accumulation rotated so that each model meets every
    // policy, each policy both accumulations, and each model both accumulations.
    const int reduced = test_reduced("the full model x precision x ckpt x accum grid (12 covering cases of 96); at level 2"
                                     " the GPT at 3 blocks and batch 2, 2 steps a run, the late copies' GPT at"
                                     " accumulation 1 and no run with the joins skipped");
    for (int m = 0; m < 3; m++)
        for (int p = 0; p < 4; p++)
            for (int c = 0; c < 4; c++)
                for (int a = 0; a < 2; a++) {
                    if (reduced && (c != (p + m) % 4 || a != ((p >> 1) ^ (m & 1)))) continue;
                    if (!test_part_take(models[m].name)) continue;
                    one_case(models[m].name, models[m].base, models[m].blocks, precs[p], ckpts[c], accums[a]);
                }
    return test_finish();
}
