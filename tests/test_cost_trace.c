// The cost trace (kernels/cost.h): the cpu backend, which computes, records the same ops as the dry
// backend, which does not, for every precision, attention form, checkpoint policy and accumulation;
// the trace follows what runs (recompute adds the forward ops it repeats, the 16-bit step's fused
// epilogues drop the residual adds and the GELU backward, fp16's loss scaler adds its check); a
// warmed-up timed step traces as a single step does; --profile's prediction per category sums to the
// planner's step time of the same trace.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench/cli.h"
#include "bench/planner.h"
#include "bench/run_engine.h"
#include "tests/testlib.h"

static mo_run_config tiny(void) {
    mo_config *c = malloc(sizeof *c);
    mo_config_defaults(c, MO_CMD_RUN);
    mo_run_config rc = c->base;
    free(c);
    rc.layers = 3; rc.hidden = 32; rc.heads = 4; rc.seq = 16; rc.batch = 4; rc.vocab = 64;
    rc.preset[0] = '\0';
    rc.steps = 1;
    rc.warmup = 0;
    rc.monitor = 0;
    return rc;
}

static int same_op(const mo_cost_op *a, const mo_cost_op *b) {
    return !strcmp(a->name, b->name) && a->cls == b->cls && a->prof == b->prof && a->region == b->region && a->ref == b->ref &&
           a->flops == b->flops && a->bytes == b->bytes;
}

static int same_trace(const mo_cost_trace *a, const mo_cost_trace *b, const char *what) {
    if (!CHECK_MSG(a->n == b->n, "%s: %zu ops vs %zu", what, a->n, b->n)) return 0;
    for (size_t i = 0; i < a->n; i++)
        if (!CHECK_MSG(same_op(&a->ops[i], &b->ops[i]), "%s: op %zu differs: %s %g %g vs %s %g %g", what, i, a->ops[i].name,
                       a->ops[i].flops, a->ops[i].bytes, b->ops[i].name, b->ops[i].flops, b->ops[i].bytes))
            return 0;
    return 1;
}

static size_t count(const mo_cost_trace *t, const char *prefix) {
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++) n += !strncmp(t->ops[i].name, prefix, strlen(prefix));
    return n;
}

static mo_status traced(const mo_run_config *rc, const mo_run_env *env, mo_backend_kind be, mo_cost_trace *t) {
    mo_run_config r = *rc;
    r.backend = be;
    mo_csv_row row;
    MO_TRY(mo_run_execute_traced(&r, env, &row, NULL, t));
    CHECK_MSG(!strcmp(row.status, "ok"), "%s run: %s %s", mo_backend_name(be), row.status, row.detail);
    CHECK_MSG(t->n > 0 && !t->overflow, "%s run: %zu ops traced", mo_backend_name(be), t->n);
    return MO_OK;
}

static void test_cpu_equals_dry(const mo_run_env *env) {
    static const mo_precision P[] = {MO_PREC_FP32, MO_PREC_TF32, MO_PREC_BF16, MO_PREC_FP16};
    static const mo_ckpt K[] = {{MO_CKPT_NONE, 0}, {MO_CKPT_SELECTIVE, 0}, {MO_CKPT_FULL, 0}, {MO_CKPT_EVERY, 2},
                                {MO_CKPT_SEGMENTS, 2}};
    int compared = 0;
    mo_cost_trace a = {0}, b = {0};
    for (int p = 0; p < 4; p++)
        for (int at = 0; at < 2; at++)
            for (int k = 0; k < 5; k++)
                for (int accum = 1; accum <= 2; accum++) {
                    mo_run_config rc = tiny();
                    rc.precision = P[p];
                    rc.attn = at ? MO_ATTN_FUSED : MO_ATTN_MATERIALIZED;
                    rc.ckpt = K[k];
                    rc.accum = accum;
                    if (mo_run_config_validate(&rc) != MO_OK) { mo_clear_error(); continue; }
                    char what[96], ck[24];
                    snprintf(what, sizeof what, "%s %s %s accum %d", mo_precision_name(rc.precision), mo_attn_name(rc.attn),
                             mo_ckpt_format(rc.ckpt, ck, sizeof ck), accum);
                    if (!CHECK_OK(traced(&rc, env, MO_BACKEND_DRY, &a)) || !CHECK_OK(traced(&rc, env, MO_BACKEND_CPU, &b))) continue;
                    compared += same_trace(&a, &b, what);
                }
    printf("  cpu == dry trace: %d configurations\n", compared);
    CHECK(compared == 80);
    mo_cost_trace_free(&a);
    mo_cost_trace_free(&b);
}

static void test_follows_what_runs(const mo_run_env *env) {
    mo_cost_trace none = {0}, t = {0};
    mo_run_config rc = tiny();
    CHECK_OK(traced(&rc, env, MO_BACKEND_DRY, &none));
    const int L = rc.layers;
    // fp32 unsplit: the residual adds and the GELU backward are kernels of their own (ctx.h's
    // fuse_epilogues: 16 bits only), one attention forward per block
    CHECK_EQ_U64(count(&none, "residual"), 2 * (uint64_t)L);
    CHECK_EQ_U64(count(&none, "gelu_bwd"), (uint64_t)L);
    CHECK_EQ_U64(count(&none, "attn_scores"), (uint64_t)L);
    CHECK_EQ_U64(count(&none, "matmul_fwd"), 4 * (uint64_t)L + 1);
    CHECK_EQ_U64(count(&none, "adamw"), 1);
    CHECK_EQ_U64(count(&none, "nonfinite"), 0);
    // selective: the attention forward once more per block, in the backward
    rc.ckpt.kind = MO_CKPT_SELECTIVE;
    CHECK_OK(traced(&rc, env, MO_BACKEND_DRY, &t));
    CHECK_EQ_U64(count(&t, "attn_scores"), 2 * (uint64_t)L);
    CHECK_EQ_U64(t.n, none.n + 3 * (uint64_t)L); // the default in-place form: scores, softmax, av, nothing else
    // full: every block's forward again, the segment's last GEMM and residual add excepted (nobody reads them)
    rc.ckpt.kind = MO_CKPT_FULL;
    CHECK_OK(traced(&rc, env, MO_BACKEND_DRY, &t));
    CHECK_EQ_U64(count(&t, "matmul_fwd"), 4 * (uint64_t)L + 1 + 3 * (uint64_t)L);
    CHECK_EQ_U64(count(&t, "residual"), 2 * (uint64_t)L + (uint64_t)L);
    // accumulation: the micro-batch ops per micro-batch, the optimizer once
    rc.ckpt.kind = MO_CKPT_NONE;
    rc.accum = 2;
    CHECK_OK(traced(&rc, env, MO_BACKEND_DRY, &t));
    CHECK_EQ_U64(count(&t, "attn_scores"), 2 * (uint64_t)L);
    CHECK_EQ_U64(count(&t, "adamw"), 1);
    // bf16: the residual adds in the GEMMs (C input), the GELU backward in the dinp GEMM
    rc.accum = 1;
    rc.precision = MO_PREC_BF16;
    CHECK_OK(traced(&rc, env, MO_BACKEND_DRY, &t));
    CHECK_EQ_U64(count(&t, "residual"), 0);
    CHECK_EQ_U64(count(&t, "gelu_bwd"), 0);
    CHECK_EQ_U64(count(&t, "matmul_fwd_add"), 2 * (uint64_t)L);
    CHECK_EQ_U64(count(&t, "matmul_bwd_dinp_dgelu"), (uint64_t)L);
    // fp16: the loss scaler's check of the gradients
    rc.precision = MO_PREC_FP16;
    CHECK_OK(traced(&rc, env, MO_BACKEND_DRY, &t));
    CHECK_EQ_U64(count(&t, "nonfinite"), 1);
    // fused attention: its kernels instead of the GEMMs
    rc.attn = MO_ATTN_FUSED;
    CHECK_OK(traced(&rc, env, MO_BACKEND_DRY, &t));
    CHECK_EQ_U64(count(&t, "attn_scores"), 0);
    CHECK_EQ_U64(count(&t, "attn_fused_fwd"), (uint64_t)L);
    // regions: the head's ops are the LM head's; the optimizer's include the gradient zeroing
    size_t head = 0, opt = 0;
    for (size_t i = 0; i < t.n; i++) {
        head += t.ops[i].region == MO_COST_HEAD;
        opt += t.ops[i].region == MO_COST_OPTIMIZER;
    }
    CHECK_MSG(head == 7, "head ops %zu (lnf, logits, loss, the logits' 2 backward GEMMs, memset, lnf backward)", head);
    CHECK_MSG(opt == 4, "optimizer ops %zu (the gradients' memset, nonfinite, sumsq, adamw)", opt);
    mo_cost_trace_free(&none);
    mo_cost_trace_free(&t);
}

// --offload's cost ops, which the planner times the offload by: the same on cpu (which copies and runs
// the host AdamW) as on dry (which does neither), and where the code copies: optimizer, the gradients
// down and (fp32) the weights down and back, or (16 bits) the working copy back, the AdamW (and cast) on
// the host and none on the device; activations, each offloaded segment input out and back on the copy
// stream (full checkpointing: every block's but the last), as many bytes as the engine's copy statistics.
static void test_offload_ops(const mo_run_env *env) {
    mo_cost_trace a = {0}, b = {0};
    int compared = 0;
    for (int p = 0; p < 2; p++)
        for (int off = MO_OFFLOAD_OPTIMIZER; off <= MO_OFFLOAD_ACTIVATIONS; off++)
            for (int accum = 1; accum <= 2; accum++) {
                mo_run_config rc = tiny();
                rc.precision = p ? MO_PREC_BF16 : MO_PREC_FP32;
                rc.ckpt.kind = MO_CKPT_FULL;
                rc.offload = off;
                rc.accum = accum;
                char what[96];
                snprintf(what, sizeof what, "%s offload %s accum %d", mo_precision_name(rc.precision), mo_offload_name(off), accum);
                if (!CHECK_OK(traced(&rc, env, MO_BACKEND_DRY, &a)) || !CHECK_OK(traced(&rc, env, MO_BACKEND_CPU, &b))) continue;
                compared += same_trace(&a, &b, what);
                double link = 0, host = 0, stream = 0;
                for (size_t i = 0; i < a.n; i++) {
                    link += a.ops[i].cls == MO_COST_HOST_COPY ? a.ops[i].bytes : 0;
                    host += a.ops[i].cls == MO_COST_HOST ? a.ops[i].bytes : 0;
                    stream += a.ops[i].cls == MO_COST_COPY_OUT || a.ops[i].cls == MO_COST_COPY_BACK ? a.ops[i].bytes : 0;
                }
                mo_gpt_config gc;
                memset(&gc, 0, sizeof gc);
                gc.layers = rc.layers; gc.hidden = rc.hidden; gc.heads = rc.heads; gc.seq = rc.seq; gc.batch = rc.batch;
                gc.vocab = rc.vocab; gc.accum = 1;
                const double n = (double)mo_gpt_num_params(&gc);
                const double act = (double)(rc.batch / accum) * rc.seq * rc.hidden * (p ? 2 : 4);
                if (off == MO_OFFLOAD_OPTIMIZER) {
                    CHECK_MSG(link == (p ? 6 : 12) * n && host == (p ? 34 : 28) * n && stream == 0 && count(&a, "adamw") == 1 &&
                                  count(&a, "adamw_host") == 1,
                              "%s: host link %.0f B, host work %.0f B, copy stream %.0f B, adamw ops %zu", what, link, host, stream,
                              count(&a, "adamw"));
                } else {
                    CHECK_MSG(stream == accum * 2.0 * (rc.layers - 1) * act && link == 0 && host == 0 &&
                                  count(&a, "offload_act_d2h") == (size_t)accum * (rc.layers - 1),
                              "%s: copy stream %.0f B, want %.0f", what, stream, accum * 2.0 * (rc.layers - 1) * act);
                    // every copy is joined once, after it was issued, naming its ticket; a copy out is joined
                    // right after its block's forward (ops in between), a copy back after a segment's
                    // recompute and backward
                    int joined = 0, order = 1;
                    for (size_t i = 0; i < a.n; i++) {
                        if (a.ops[i].cls != MO_COST_COPY_OUT && a.ops[i].cls != MO_COST_COPY_BACK) continue;
                        size_t j = i + 1;
                        int work = 0; // device ops between the copy and its join: what it runs beside
                        for (; j < a.n && !(a.ops[j].cls == MO_COST_COPY_JOIN && a.ops[j].ref == a.ops[i].ref); j++)
                            work += a.ops[j].cls <= MO_COST_MEMORY;
                        joined += j < a.n;
                        order &= work > 0;
                    }
                    CHECK_MSG(joined == 2 * accum * (rc.layers - 1) && order && count(&a, "offload_act_join") == (size_t)joined,
                              "%s: %d of %d copies joined after device work (order %d), %zu joins", what, joined,
                              2 * accum * (rc.layers - 1), order, count(&a, "offload_act_join"));
                    // the engine's own count of the copies (mo_copy_stats, on dry too) is the trace's
                    mo_run_config r = rc;
                    r.backend = MO_BACKEND_DRY;
                    r.steps = 2;
                    r.warmup = 1;
                    FILE *out = tmpfile();
                    mo_csv_row row;
                    if (out && CHECK_OK(mo_run_execute(&r, env, &row, out))) {
                        char line[512], want[64], b1[32];
                        snprintf(want, sizeof want, "copy stream: %zu copies, %s a step", 2 * (size_t)accum * (rc.layers - 1),
                                 mo_format_bytes((uint64_t)stream, b1, sizeof b1));
                        int found = 0;
                        rewind(out);
                        while (fgets(line, sizeof line, out)) found |= strstr(line, want) != NULL;
                        CHECK_MSG(found, "%s: the run summary lacks '%s'", what, want);
                    }
                    if (out) fclose(out);
                }
            }
    printf("  offload: cpu == dry trace, bytes where the code copies: %d configurations\n", compared);
    CHECK(compared == 8);
    mo_cost_trace_free(&a);
    mo_cost_trace_free(&b);
}

// The planner's trace (one step, no warm-up) is the timed step's of a warmed-up run; --profile's
// prediction per category adds up to the step time of the roofline of the same trace.
static void test_planner_trace(const mo_run_env *env) {
    mo_cost_trace a = {0}, b = {0};
    mo_run_config rc = tiny();
    rc.precision = MO_PREC_BF16;
    rc.ckpt.kind = MO_CKPT_SQRT;
    CHECK_OK(mo_plan_trace(&rc, &a));
    mo_csv_row row;
    CHECK_OK(mo_plan_predict_traced(&rc, env, &row, &b)); // warm-up 1, then the timed step
    same_trace(&a, &b, "plan trace vs the timed step");
    mo_gpu_catalog cat;
    if (!CHECK_OK(mo_gpu_catalog_load(NULL, &cat))) return;
    const mo_gpu_spec *g = mo_gpu_catalog_match_device(&cat, "NVIDIA H200");
    if (CHECK(g != NULL)) {
        double ms[MO_PROF_COUNT + 1], sum = 0;
        char how[160];
        CHECK(mo_plan_profile_predict(&a, 1, "NVIDIA H200", rc.precision, ms, how, sizeof how) == 1);
        for (int k = 0; k <= MO_PROF_COUNT; k++) sum += ms[k];
        char dir[MO_PATH_MAX];
        if (!mo_plan_find_file("results", dir, sizeof dir)) snprintf(dir, sizeof dir, "results");
        mo_plan_calib cal;
        mo_plan_calib_load(&cal, g, dir, NULL);
        mo_roofline r;
        mo_roofline_from_trace(&a, &rc, g, &r);
        double step = mo_plan_step_ms(&r, &cal, rc.precision);
        CHECK_MSG(fabs(sum - step) <= 1e-9 * step, "profile prediction %.6f ms vs the step's %.6f", sum, step);
        mo_roofline r2;
        mo_roofline_step(&rc, g, &r2);
        CHECK_MSG(r2.gemm_s == r.gemm_s && r2.mem_s == r.mem_s && r2.kern_s == r.kern_s && r2.kernels == (int)a.n,
                  "mo_roofline_step differs from the trace's roofline");
        printf("  profile prediction (%s): %.4f ms\n", how, sum);
        double none[MO_PROF_COUNT + 1];
        CHECK(mo_plan_profile_predict(&a, 1, "not a GPU", rc.precision, none, how, sizeof how) == 0);
    }
    mo_gpu_catalog_free(&cat);
    mo_cost_trace_free(&a);
    mo_cost_trace_free(&b);
}

int main(void) {
    mo_run_env env;
    mo_run_config rc = tiny();
    rc.backend = MO_BACKEND_DRY;
    if (!CHECK_OK(mo_run_env_init(&env, &rc))) return test_finish();
    test_cpu_equals_dry(&env);
    test_follows_what_runs(&env);
    test_offload_ops(&env);
    test_planner_trace(&env);
    return test_finish();
}
