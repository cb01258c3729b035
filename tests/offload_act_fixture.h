// One model run through its table (models/model.h) with and without --offload activations, as the run
// engine builds it (bench/run_engine.c session_build_one): a caching device allocator, a caching host
// allocator as the context's host_alloc, ctx->offload_act set, the copy stream's figures collected after
// every step. Shared by test_offload_act.c (cpu, dry) and gpu_offload_act.c (cuda, dry).
#ifndef MEMOPT_TESTS_OFFLOAD_ACT_FIXTURE_H
#define MEMOPT_TESTS_OFFLOAD_ACT_FIXTURE_H

#include <stdio.h>
#include <string.h>
#include "bench/config.h"
#include "kernels/copy_stream.h"
#include "models/ckpt_layout.h"
#include "models/model.h"
#include "testlib.h"

#define OA_STEPS 3 // at most; oa_steps() says how many a run takes

// Optimizer steps a run takes: OA_STEPS, 2 at MEMOPT_TEST_REDUCED=2 (racecheck, initcheck: each step of the
// GPU test's small GPT took tens of seconds under initcheck in session 18). Two still test the offload: the
// second step's loss comes from weights the first updated with gradients that read the restored inputs.
static inline int oa_steps(void) { return test_reduced_level() >= 2 ? 2 : OA_STEPS; }

typedef struct oa_result {
    int ok;
    double loss[OA_STEPS];        // each step's loss (NaN on dry); 0 past oa_steps()
    uint64_t dev_peak;            // the device allocator's peak allocated bytes over the steps
    uint64_t dev_reserved;        // its peak reserved bytes
    uint64_t act_peak;            // its activation category's peak
    uint64_t host_peak;           // the host allocator's (0 without offload)
    uint64_t host_left;           // host bytes still allocated after the last step (want 0)
    mo_copy_stats copies;         // summed over the steps
} oa_result;

// The configuration of a base flag list plus extra pairs (each NULL-terminated), backend be.
static void oa_config(const char *const *base, const char *const *kv, mo_backend_kind be, mo_run_config *rc) {
    static mo_config cfg;
    mo_config_defaults(&cfg, MO_CMD_RUN);
    for (int i = 0; base && base[i]; i += 2) CHECK_OK(mo_config_set(&cfg, base[i], base[i + 1]));
    for (int i = 0; kv && kv[i]; i += 2) CHECK_OK(mo_config_set(&cfg, kv[i], kv[i + 1]));
    CHECK_OK(mo_config_set(&cfg, "--backend", be == MO_BACKEND_CUDA ? "cuda" : be == MO_BACKEND_CPU ? "cpu" : "dry"));
    CHECK_OK(mo_config_finish(&cfg));
    CHECK_OK(mo_config_combination(&cfg, 0, rc));
}

// The segment inputs that go to the host: every checkpointed segment's but the last one's (GPT, MLP);
// the ResNet's first segment input is the max pool's output, which the stem's backward reads anyway.
static int offloaded_inputs(const mo_run_config *rc, int resnet, int blocks) {
    mo_ckpt_layout K = mo_ckpt_layout_of(rc->ckpt.kind, rc->ckpt.every, blocks);
    int n = mo_ckpt_layout_segments(K) - 1 - resnet;
    return n > 0 ? n : 0;
}

// oa_steps() optimizer steps of rc with rc->offload as given; *r filled (r->ok 0 on any failure).
static void oa_run(const mo_run_config *rc, oa_result *r) {
    memset(r, 0, sizeof *r);
    const mo_model_ops *ops = NULL;
    mo_allocator *a = NULL, *h = NULL;
    mo_ctx *x = NULL;
    void *m = NULL;
    if (!CHECK_OK(mo_model_of(rc, &ops))) return;
    if (!CHECK_OK(mo_allocator_create(&a, MO_ALLOC_CACHING, rc->backend, 0, NULL))) return;
    if (!CHECK_OK(mo_ctx_create(&x, rc->backend, a))) goto out;
    if (rc->offload == MO_OFFLOAD_ACTIVATIONS) {
        if (!CHECK_OK(mo_allocator_create_host_kind(&h, MO_ALLOC_CACHING, rc->backend))) goto out;
        x->host_alloc = h;
        x->offload_act = 1;
    }
    x->tf32 = rc->precision == MO_PREC_TF32;
    if (!CHECK_OK(ops->create(rc, x, &m))) goto out;
    if (!CHECK_OK(ops->set_synthetic_batch(m, rc->seed))) goto out;
    mo_allocator_reset_peaks(a);
    r->ok = 1;
    // under a sanitizer (reduced), each step's time (the collect waits for its copies): where a run that the
    // tool slows spends it
    const int timed = test_is_reduced(), steps = oa_steps();
    for (int s = 0; s < steps && r->ok; s++) {
        const double t0 = timed ? mo_host_ms() : 0;
        r->ok = CHECK_OK(ops->step(m));
        if (r->ok) r->ok = CHECK_OK(mo_copy_collect(x, &r->copies));
        if (timed)
            printf("  %s %s %s step %d: %.1f ms\n", rc->model, mo_backend_name(rc->backend),
                   rc->offload == MO_OFFLOAD_ACTIVATIONS ? "offload" : "no offload", s, mo_host_ms() - t0);
        mo_model_step_info info;
        ops->info(m, &info);
        r->loss[s] = info.loss;
    }
    mo_alloc_stats st;
    mo_allocator_stats(a, &st);
    r->dev_peak = st.peak_allocated_bytes;
    r->dev_reserved = st.peak_reserved_bytes;
    r->act_peak = st.peak_by_cat[MO_CAT_ACTIVATION];
    if (h) {
        mo_allocator_stats(h, &st);
        r->host_peak = st.peak_allocated_bytes;
        r->host_left = st.allocated_bytes;
    }
out:
    if (m) ops->destroy(m);
    mo_ctx_destroy(x);
    mo_allocator_destroy(h);
    mo_allocator_destroy(a);
}

#endif
