// models/model.h: the registry; GPT's table gives GPT's own numbers; the config and the run engine
// reach a model only through its table (a toy model registered here runs end to end, and what it
// lacks, attention and a split, is refused with the reason).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench/config.h"
#include "bench/csv.h"
#include "bench/run_engine.h"
#include "models/gpt.h"
#include "models/model.h"
#include "testlib.h"

// ---------------------------------------------------------------- a toy model
// layers x (hidden, hidden) fp32 weights with their gradients; a step holds one (batch, hidden)
// activation per layer until its end. Nothing is computed: the table's plumbing is what is tested.

static const mo_preset toy_presets[] = {{"toy-s", 2, 32, 0, 0, 4, 0, 0, 0}, {"toy-m", 4, 32, 0, 0, 8, 0, 0, 0}};

typedef struct toy {
    mo_ctx *ctx;
    mo_run_config rc;
    void *w, *g;
    int steps;
} toy;

static mo_status toy_validate(const mo_run_config *rc) {
    if (rc->hidden < 2) return MO_FAIL(MO_ERR_INVALID, "--hidden %d: the toy needs at least 2", rc->hidden);
    return MO_OK;
}
static const char *toy_dims(const mo_run_config *rc, char *buf, size_t n) {
    snprintf(buf, n, "L%d H%d", rc->layers, rc->hidden);
    return buf;
}
static size_t toy_params(const mo_run_config *rc) { return (size_t)rc->layers * rc->hidden * rc->hidden; }
static double toy_items(const mo_run_config *rc) { (void)rc; return 1; }
static double toy_flops(const mo_run_config *rc) { return 6.0 * toy_params(rc) * rc->batch; }
static double toy_rflops(const mo_run_config *rc) { (void)rc; return 0; }

static mo_status toy_create(const mo_run_config *rc, mo_ctx *ctx, void **out) {
    toy *t = calloc(1, sizeof *t);
    if (!t) return MO_FAIL(MO_ERR_OOM, "host");
    t->ctx = ctx;
    t->rc = *rc;
    size_t bytes = toy_params(rc) * sizeof(float);
    mo_status st = mo_alloc(ctx->alloc, bytes, MO_CAT_PARAM, &t->w);
    if (st == MO_OK) st = mo_alloc(ctx->alloc, bytes, MO_CAT_GRAD, &t->g);
    if (st != MO_OK) {
        mo_free(ctx->alloc, t->w);
        free(t);
        return st;
    }
    *out = t;
    return MO_OK;
}
static void toy_destroy(void *p) {
    toy *t = p;
    mo_free(t->ctx->alloc, t->g);
    mo_free(t->ctx->alloc, t->w);
    free(t);
}
static mo_status toy_batch(void *p, uint64_t seed) { (void)p, (void)seed; return MO_OK; }
static mo_status toy_step(void *p) {
    toy *t = p;
    void *act[64] = {0};
    mo_status st = MO_OK;
    int L = t->rc.layers < 64 ? t->rc.layers : 64;
    for (int l = 0; l < L && st == MO_OK; l++)
        st = mo_alloc(t->ctx->alloc, (size_t)t->rc.batch * t->rc.hidden * sizeof(float), MO_CAT_ACTIVATION, &act[l]);
    for (int l = 0; l < L; l++) mo_free(t->ctx->alloc, act[l]);
    t->steps++;
    return st;
}
static void toy_info(void *p, mo_model_step_info *out) {
    toy *t = p;
    memset(out, 0, sizeof *out);
    out->loss = 1.0 / t->steps;
    out->loss_scale = 1;
}

static const mo_model_ops toy_model = {
    .name = "toy",
    .about = "a test model",
    .item = "samples",
    .dims = MO_DIM_LAYERS | MO_DIM_HIDDEN,
    .dims_help = "layers, hidden, batch",
    .presets = toy_presets,
    .n_presets = 2,
    .validate = toy_validate,
    .dims_text = toy_dims,
    .num_params = toy_params,
    .items_per_sample = toy_items,
    .step_flops = toy_flops,
    .recompute_flops = toy_rflops,
    .create = toy_create,
    .destroy = toy_destroy,
    .set_synthetic_batch = toy_batch,
    .step = toy_step,
    .info = toy_info,
    .split = NULL,
};

// ---------------------------------------------------------------- tests

static mo_config cfg;

static void test_registry(void) {
    CHECK(mo_model_find("gpt") == &mo_gpt_model && mo_model_default() == &mo_gpt_model);
    CHECK(mo_model_find("nosuch") == NULL);
    mo_model_ops bad_ws = toy_model; // a workspace budget the context would refuse: refused at registration
    bad_ws.name = "toy-ws";
    for (int k = 0; k < 2; k++) {
        bad_ws.workspace_mib = k ? MO_WORKSPACE_MIB_MAX + 1 : 16;
        CHECK(mo_model_register(&bad_ws) == MO_ERR_INVALID && strstr(mo_errmsg(), "workspace_mib"));
    }
    CHECK(mo_model_workspace_bytes(&toy_model) == MO_GEMM_WORKSPACE_BYTES && mo_model_workspace_bytes(NULL) == MO_GEMM_WORKSPACE_BYTES);
    CHECK_OK(mo_model_register(&toy_model));
    CHECK(mo_model_find("toy") == &toy_model);
    CHECK(mo_model_register(&toy_model) == MO_ERR_INVALID && strstr(mo_errmsg(), "exists"));
    char names[128];
    CHECK_MSG(!strcmp(mo_model_names(names, sizeof names), "gpt, mlp, resnet, toy"), "%s", names);
    CHECK(mo_preset_find("toy-m") == &toy_presets[1] && mo_preset_find("gpt2-350m") != NULL);
    CHECK(mo_model_preset(&toy_model, "gpt2-124m") == NULL);
}

// GPT's table gives exactly the numbers of models/gpt.h.
static void test_gpt_table(void) {
    static const char *const presets[] = {"gpt2-124m", "gpt2-1558m"};
    for (int i = 0; i < 2; i++) {
        mo_config_defaults(&cfg, MO_CMD_RUN);
        CHECK_OK(mo_config_set(&cfg, "--preset", presets[i]));
        CHECK_OK(mo_config_set(&cfg, "--ckpt", "every:2"));
        CHECK_OK(mo_config_set(&cfg, "--accum", "2"));
        CHECK_OK(mo_config_finish(&cfg));
        mo_run_config rc;
        CHECK_OK(mo_config_combination(&cfg, 0, &rc));
        mo_gpt_config g = {0};
        g.layers = rc.layers; g.hidden = rc.hidden; g.heads = rc.heads; g.seq = rc.seq; g.batch = rc.batch;
        g.vocab = rc.vocab; g.accum = 2; g.ckpt = MO_CKPT_EVERY; g.ckpt_every = 2;
        const mo_model_ops *m = NULL;
        CHECK_OK(mo_model_of(&rc, &m));
        CHECK(m == &mo_gpt_model);
        CHECK_EQ_U64(m->num_params(&rc), mo_gpt_num_params(&g));
        CHECK(m->step_flops(&rc) == mo_gpt_step_flops(&g));
        CHECK(m->recompute_flops(&rc) == mo_gpt_recompute_flops(&g) && m->recompute_flops(&rc) > 0);
        CHECK(m->items_per_sample(&rc) == rc.seq);
        mo_tensor_info a[64], b[64];
        int na = m->tensor_table(&rc, a, 64), nb = mo_gpt_tensor_table(&g, b, 64);
        CHECK(na == nb && na > 0);
        for (int k = 0; k < na && k < nb && k < 64; k++) CHECK(a[k].numel == b[k].numel && !strcmp(a[k].name, b[k].name));
        char d[64];
        char want[64];
        snprintf(want, sizeof want, "L%d C%d H%d T%d V%d", rc.layers, rc.hidden, rc.heads, rc.seq, rc.vocab);
        CHECK_MSG(!strcmp(m->dims_text(&rc, d, sizeof d), want), "%s", d);
    }
}

// Sets the pairs on a fresh run config; mo_config_finish must refuse naming want.
static void expect_refused(const char *const *kv, const char *want) {
    mo_config_defaults(&cfg, MO_CMD_RUN);
    mo_status st = MO_OK;
    for (int i = 0; kv[i] && st == MO_OK; i += 2) st = mo_config_set(&cfg, kv[i], kv[i + 1]);
    if (st == MO_OK) st = mo_config_finish(&cfg);
    CHECK_MSG(st == MO_ERR_INVALID && strstr(mo_errmsg_plain(), want), "%s %s ...: %s; want '%s'", kv[0], kv[1],
              mo_errmsg_plain(), want);
}

static void test_config_through_table(void) {
    // --model toy starts from its first preset.
    mo_config_defaults(&cfg, MO_CMD_RUN);
    CHECK_OK(mo_config_set(&cfg, "--model", "toy"));
    CHECK_OK(mo_config_finish(&cfg));
    mo_run_config rc;
    CHECK_OK(mo_config_combination(&cfg, 0, &rc));
    CHECK(!strcmp(rc.model, "toy") && !strcmp(rc.preset, "toy-s") && rc.layers == 2 && rc.hidden == 32 && rc.batch == 4);
    // Its other preset, given before or after --model; its dims.
    mo_config_defaults(&cfg, MO_CMD_RUN);
    CHECK_OK(mo_config_set(&cfg, "--preset", "toy-m"));
    CHECK_OK(mo_config_set(&cfg, "--model", "toy"));
    CHECK_OK(mo_config_set(&cfg, "--hidden", "8"));
    CHECK_OK(mo_config_finish(&cfg));
    CHECK_OK(mo_config_combination(&cfg, 0, &rc));
    CHECK(rc.layers == 4 && rc.hidden == 8 && rc.batch == 8);
    // What it refuses, with the reason.
    expect_refused((const char *const[]){"--model", "nosuch", NULL}, "--model: unknown value 'nosuch' (accepted: gpt, mlp, resnet, toy)");
    expect_refused((const char *const[]){"--model", "toy", "--heads", "4", NULL}, "--heads: not a flag of model toy");
    expect_refused((const char *const[]){"--model", "toy", "--seq", "4", NULL}, "--seq: not a flag of model toy");
    expect_refused((const char *const[]){"--model", "toy", "--attn", "fused", NULL}, "--attn: not a flag of model toy");
    expect_refused((const char *const[]){"--model", "toy", "--ckpt", "selective", NULL},
                   "--ckpt selective: model toy has no attention");
    expect_refused((const char *const[]){"--model", "toy", "--tp", "2", NULL}, "model toy cannot be split");
    expect_refused((const char *const[]){"--model", "toy", "--pp", "2", NULL}, "model toy cannot be split");
    expect_refused((const char *const[]){"--model", "toy", "--preset", "gpt2-124m", NULL}, "not a preset of model toy");
    expect_refused((const char *const[]){"--model", "toy", "--hidden", "1", NULL}, "the toy needs at least 2");
    expect_refused((const char *const[]){"--preset", "toy-s", NULL}, "--preset toy-s: not a preset of model gpt");
    // The generic rules hold for it too.
    expect_refused((const char *const[]){"--model", "toy", "--accum", "3", NULL}, "--accum 3: batch 4 is not divisible by 3");
    expect_refused((const char *const[]){"--model", "toy", "--ckpt", "every:3", NULL}, "K must be in 1..layers");
}

// The engine runs the toy through its table: params, dims, peaks, items per second.
static void test_engine_through_table(void) {
    mo_config_defaults(&cfg, MO_CMD_RUN);
    CHECK_OK(mo_config_set(&cfg, "--model", "toy"));
    CHECK_OK(mo_config_set(&cfg, "--backend", "cpu"));
    CHECK_OK(mo_config_set(&cfg, "--steps", "3"));
    CHECK_OK(mo_config_set(&cfg, "--warmup", "1"));
    CHECK_OK(mo_config_finish(&cfg));
    mo_run_config rc;
    CHECK_OK(mo_config_combination(&cfg, 0, &rc));
    mo_run_env env;
    CHECK_OK(mo_run_env_init(&env, &rc));
    mo_csv_row row;
    CHECK_OK(mo_run_execute(&rc, &env, &row, NULL));
    CHECK_MSG(!strcmp(row.status, "ok"), "%s: %s", row.status, row.detail);
    CHECK(!strcmp(row.model, "toy") && !strcmp(row.dims, "L2 H32"));
    CHECK(row.params == 2 * 32 * 32 && row.steps == 3);
    // GPT's columns it lacks are empty; layers and hidden it has.
    CHECK(row.layers == 2 && row.hidden == 32 && row.heads == -1 && row.seq == -1 && row.vocab == -1 && !row.attn[0]);
    // params + grads, then one (4,32) fp32 activation per layer (512 bytes: the allocator's block
    // size, so no rounding): the peak is exact on every backend.
    CHECK_EQ_U64(row.param_bytes, 2 * 32 * 32 * 4);
    CHECK_EQ_U64(row.grad_bytes, 2 * 32 * 32 * 4);
    CHECK_EQ_U64(row.activation_bytes, 2 * 4 * 32 * 4);
    CHECK_EQ_U64(row.peak_allocated_bytes, 2 * (2 * 32 * 32 * 4) + 2 * 4 * 32 * 4 + row.workspace_bytes); // + the context's
    CHECK(row.predicted_peak_bytes == row.peak_allocated_bytes);
    CHECK(row.step_ms >= 0 && row.items_per_s > 0 && isnan(row.tokens_per_s)); // samples, not tokens
    CHECK(fabs(row.items_per_s - 4 / (row.step_ms * 1e-3)) <= 1e-9 * row.items_per_s || row.step_ms == 0);
    CHECK(row.loss_last == 1.0 / 4); // 4 steps (1 warm-up + 3), through the table's info
    // GPT rows get their dims and tokens are the items.
    mo_config_defaults(&cfg, MO_CMD_RUN);
    CHECK_OK(mo_config_set(&cfg, "--backend", "cpu"));
    CHECK_OK(mo_config_set(&cfg, "--layers", "1"));
    CHECK_OK(mo_config_set(&cfg, "--hidden", "32"));
    CHECK_OK(mo_config_set(&cfg, "--heads", "2"));
    CHECK_OK(mo_config_set(&cfg, "--seq", "16"));
    CHECK_OK(mo_config_set(&cfg, "--vocab", "64"));
    CHECK_OK(mo_config_set(&cfg, "--batch", "2"));
    CHECK_OK(mo_config_set(&cfg, "--steps", "2"));
    CHECK_OK(mo_config_set(&cfg, "--warmup", "0"));
    CHECK_OK(mo_config_finish(&cfg));
    CHECK_OK(mo_config_combination(&cfg, 0, &rc));
    CHECK_OK(mo_run_execute(&rc, &env, &row, NULL));
    CHECK_MSG(!strcmp(row.status, "ok"), "%s: %s", row.status, row.detail);
    CHECK_MSG(!strcmp(row.dims, "L1 C32 H2 T16 V64"), "%s", row.dims);
    CHECK(row.items_per_s > 0 && row.items_per_s == row.tokens_per_s);
    CHECK(fabs(row.tokens_per_s - 32 / (row.step_ms * 1e-3)) <= 1e-9 * row.tokens_per_s);
}

int main(void) {
    test_registry();
    test_gpt_table();
    test_config_through_table();
    test_engine_through_table();
    return test_finish();
}
