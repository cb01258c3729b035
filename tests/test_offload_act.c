// --offload activations on the cpu and dry backends, for every model (strategies/schedule.c for GPT and
// the MLP, models/resnet_step.c for the ResNet): over precisions x checkpoint policies x accumulation,
// three steps' losses are bit-identical to the same run without offload (the copies move bytes, nothing
// else); dry predicts the cpu run's device and host peaks to the byte; the device peak falls; the copy
// stream moves each offloaded segment input out and back once per micro-batch; nothing stays on the
// host after a step.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "tests/offload_act_fixture.h"

static const char *const gpt_base[] = {"--preset", "gpt2-124m", "--layers", "6", "--hidden", "64", "--heads", "2",
                                       "--batch", "4", "--seq", "16", "--vocab", "97", NULL};
static const char *const mlp_base[] = {"--model", "mlp", "--layers", "6", "--hidden", "32", "--input", "16",
                                       "--classes", "8", "--batch", "8", NULL};
static const char *const res_base[] = {"--model", "resnet", "--layers", "18", "--hidden", "4", "--input", "32",
                                       "--classes", "5", "--batch", "4", NULL};

static void one_case(const char *model, const char *const *base, int blocks, const char *prec, const char *ckpt,
                     const char *accum) {
    const int resnet = !strcmp(model, "resnet");
    const char *kv_none[] = {"--precision", prec, "--ckpt", ckpt, "--accum", accum, NULL};
    const char *kv_off[] = {"--precision", prec, "--ckpt", ckpt, "--accum", accum, "--offload", "activations", NULL};
    mo_run_config rc_none, rc_off, rc_dry;
    oa_config(base, kv_none, MO_BACKEND_CPU, &rc_none);
    oa_config(base, kv_off, MO_BACKEND_CPU, &rc_off);
    oa_config(base, kv_off, MO_BACKEND_DRY, &rc_dry);
    CHECK_OK(mo_run_config_validate(&rc_off));
    oa_result none, off, dry;
    oa_run(&rc_none, &none);
    oa_run(&rc_off, &off);
    oa_run(&rc_dry, &dry);
    if (!CHECK_MSG(none.ok && off.ok && dry.ok, "%s %s %s accum %s: a run failed", model, prec, ckpt, accum)) return;
    const int noff = offloaded_inputs(&rc_off, resnet, blocks), acc = rc_off.accum;
    CHECK_MSG(!memcmp(none.loss, off.loss, sizeof none.loss) && isfinite(off.loss[oa_steps() - 1]),
              "%s %s %s accum %s: losses %.9g %.9g %.9g with offload, %.9g %.9g %.9g without", model, prec, ckpt,
              accum, off.loss[0], off.loss[1], off.loss[2], none.loss[0], none.loss[1], none.loss[2]);
    CHECK_MSG(off.dev_peak == dry.dev_peak && off.host_peak == dry.host_peak,
              "%s %s %s accum %s: cpu device %llu host %llu, dry %llu %llu", model, prec, ckpt, accum,
              (unsigned long long)off.dev_peak, (unsigned long long)off.host_peak, (unsigned long long)dry.dev_peak,
              (unsigned long long)dry.host_peak);
    CHECK_MSG(off.copies.copies == 2 * noff * acc * oa_steps() && dry.copies.copies == off.copies.copies &&
                  dry.copies.bytes == off.copies.bytes,
              "%s %s %s accum %s: %d copies (dry %d), want %d", model, prec, ckpt, accum, off.copies.copies,
              dry.copies.copies, 2 * noff * acc * oa_steps());
    CHECK_MSG(off.host_left == 0 && dry.host_left == 0, "%s %s %s: %llu host bytes left after the step", model, prec,
              ckpt, (unsigned long long)off.host_left);
    if (noff > 0) {
        // every offloaded input lives on the host at once, at the end of forward
        const uint64_t per_copy = off.copies.bytes / (uint64_t)off.copies.copies; // same size for GPT, MLP
        CHECK_MSG(off.host_peak >= (resnet ? 1 : (uint64_t)noff * per_copy),
                  "%s %s %s: host peak %llu for %d inputs of %llu", model, prec, ckpt,
                  (unsigned long long)off.host_peak, noff, (unsigned long long)per_copy);
        // the device keeps at most two offloaded inputs at once (the one recomputed, the one prefetched)
        CHECK_MSG(off.dev_peak < none.dev_peak || noff < 2, "%s %s %s accum %s: device peak %llu with offload, %llu without",
                  model, prec, ckpt, accum, (unsigned long long)off.dev_peak, (unsigned long long)none.dev_peak);
        if (!resnet && noff >= 3)
            CHECK_MSG(none.act_peak - off.act_peak >= (uint64_t)(noff - 2) * per_copy,
                      "%s %s %s: activation peak %llu -> %llu, want at least %d inputs of %llu less", model, prec, ckpt,
                      (unsigned long long)none.act_peak, (unsigned long long)off.act_peak, noff - 2,
                      (unsigned long long)per_copy);
    } else {
        CHECK(off.dev_peak == none.dev_peak && off.host_peak == 0);
    }
}

static void test_models(void) {
    static const char *const precs[] = {"fp32", "bf16", "fp16"};
    static const char *const ckpts[] = {"full", "every:2", "sqrt", "segments:3"};
    static const char *const accums[] = {"1", "2"};
    struct { const char *name; const char *const *base; int blocks; } models[] = {
        {"gpt", gpt_base, 6}, {"mlp", mlp_base, 6}, {"resnet", res_base, 8}};
    for (int m = 0; m < 3; m++)
        for (int p = 0; p < 3; p++)
            for (int c = 0; c < 4; c++)
                for (int a = 0; a < 2; a++) one_case(models[m].name, models[m].base, models[m].blocks, precs[p], ckpts[c], accums[a]);
}

// The refusals of the configuration (the CLI's exit 2): no segments to offload, a split.
static mo_status finish_of(const char *const *base, const char *const *kv) {
    static mo_config cfg;
    mo_config_defaults(&cfg, MO_CMD_RUN);
    for (int i = 0; base[i]; i += 2) CHECK_OK(mo_config_set(&cfg, base[i], base[i + 1]));
    for (int i = 0; kv[i]; i += 2) CHECK_OK(mo_config_set(&cfg, kv[i], kv[i + 1]));
    CHECK_OK(mo_config_set(&cfg, "--backend", "dry"));
    return mo_config_finish(&cfg);
}

static void test_refusals(void) {
    const char *none[] = {"--offload", "activations", NULL};
    CHECK(finish_of(gpt_base, none) == MO_ERR_INVALID && strstr(mo_errmsg(), "--ckpt none"));
    const char *sel[] = {"--offload", "activations", "--ckpt", "selective", NULL};
    CHECK(finish_of(gpt_base, sel) == MO_ERR_INVALID && strstr(mo_errmsg(), "selective has no segments"));
    const char *tp[] = {"--offload", "activations", "--ckpt", "full", "--tp", "2", NULL};
    CHECK(finish_of(gpt_base, tp) == MO_ERR_INVALID && strstr(mo_errmsg(), "unsplit"));
    const char *ok[] = {"--offload", "activations", "--ckpt", "full", NULL};
    CHECK_OK(finish_of(mlp_base, ok));
    CHECK_OK(finish_of(res_base, ok));
}

int main(void) {
    test_refusals();
    test_models();
    return test_finish();
}
