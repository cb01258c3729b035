// bench/config: presets, list parsing, the enumeration (count and order), and that every bad
// value or combination is MO_ERR_INVALID with a one-line message naming the flag.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bench/config.h"
#include "testlib.h"

static mo_config cfg; // large: static

static void fresh(mo_command cmd) { mo_config_defaults(&cfg, cmd); }

// Sets flag=value on a fresh config of cmd and expects MO_ERR_INVALID naming want (the flag).
static void expect_bad(mo_command cmd, const char *flag, const char *value, const char *want) {
    fresh(cmd);
    mo_clear_error();
    mo_status st = mo_config_set(&cfg, flag, value);
    const char *m = mo_errmsg_plain();
    CHECK_MSG(st == MO_ERR_INVALID, "%s %s: status %s, want invalid", flag, value ? value : "(none)", mo_status_name(st));
    CHECK_MSG(strstr(m, want) != NULL, "%s %s: message '%s' does not name '%s'", flag, value ? value : "", m, want);
    CHECK_MSG(strchr(m, '\n') == NULL, "%s: message has a newline: '%s'", flag, m);
}

// Sets the pairs (NULL-terminated) on a fresh config; expects mo_config_finish to fail naming want.
static void expect_bad_combo(mo_command cmd, const char *const *kv, const char *want) {
    fresh(cmd);
    for (int i = 0; kv[i]; i += 2) CHECK_OK(mo_config_set(&cfg, kv[i], kv[i + 1]));
    mo_clear_error();
    mo_status st = mo_config_finish(&cfg);
    const char *m = mo_errmsg_plain();
    CHECK_MSG(st == MO_ERR_INVALID, "%s ...: status %s, want invalid", kv[0], mo_status_name(st));
    CHECK_MSG(strstr(m, want) != NULL, "message '%s' does not contain '%s'", m, want);
}

static void test_defaults_and_presets(void) {
    fresh(MO_CMD_RUN);
    CHECK_OK(mo_config_finish(&cfg));
    CHECK_EQ_U64(mo_config_count(&cfg), 1);
    mo_run_config rc;
    CHECK_OK(mo_config_combination(&cfg, 0, &rc));
    CHECK(!strcmp(rc.preset, "gpt2-124m"));
    CHECK(rc.layers == 12 && rc.hidden == 768 && rc.heads == 12 && rc.seq == 1024 && rc.vocab == 50304 && rc.batch == 8);
    CHECK(rc.backend == MO_BACKEND_CUDA && rc.steps == 10 && rc.warmup == 3 && rc.seed == 1337);
    CHECK(rc.precision == MO_PREC_FP32 && rc.ckpt.kind == MO_CKPT_NONE && rc.accum == 1 && rc.tp == 1 && rc.pp == 1);
    CHECK(rc.alloc == MO_ALLOC_CACHING && rc.cap.kind == 0 && !strcmp(rc.cap_text, "none"));
    CHECK(rc.attn == MO_ATTN_MATERIALIZED && rc.comm == MO_COMM_LOCAL && rc.on_oom == MO_ON_OOM_FAIL);
    CHECK(rc.lr == 3e-4 && rc.monitor == 0 && rc.csv[0] == '\0');
    CHECK_EQ_U64(rc.device_mem_bytes, (uint64_t)143771 * 1048576);

    static const struct { const char *name; int L, C, H; } want[] = {
        {"gpt2-124m", 12, 768, 12}, {"gpt2-350m", 24, 1024, 16}, {"gpt2-774m", 36, 1280, 20}, {"gpt2-1558m", 48, 1600, 25}};
    for (int i = 0; i < 4; i++) {
        fresh(MO_CMD_RUN);
        CHECK_OK(mo_config_set(&cfg, "--preset", want[i].name));
        CHECK_OK(mo_config_finish(&cfg));
        CHECK_OK(mo_config_combination(&cfg, 0, &rc));
        CHECK_MSG(rc.layers == want[i].L && rc.hidden == want[i].C && rc.heads == want[i].H && rc.seq == 1024 &&
                      rc.vocab == 50304 && rc.batch == 8,
                  "%s: L%d C%d H%d T%d V%d B%d", want[i].name, rc.layers, rc.hidden, rc.heads, rc.seq, rc.vocab, rc.batch);
    }
    // Explicit dimensions override the preset.
    fresh(MO_CMD_RUN);
    CHECK_OK(mo_config_set(&cfg, "--preset", "gpt2-350m"));
    CHECK_OK(mo_config_set(&cfg, "--layers", "2"));
    CHECK_OK(mo_config_set(&cfg, "--seq", "64"));
    CHECK_OK(mo_config_set(&cfg, "--batch", "4"));
    CHECK_OK(mo_config_finish(&cfg));
    CHECK_OK(mo_config_combination(&cfg, 0, &rc));
    CHECK(rc.layers == 2 && rc.hidden == 1024 && rc.heads == 16 && rc.seq == 64 && rc.batch == 4);
}

static void test_scalars(void) {
    fresh(MO_CMD_RUN);
    CHECK_OK(mo_config_set(&cfg, "--backend", "dry"));
    CHECK_OK(mo_config_set(&cfg, "--steps", "5"));
    CHECK_OK(mo_config_set(&cfg, "--warmup", "0"));
    CHECK_OK(mo_config_set(&cfg, "--seed", "18446744073709551615"));
    CHECK_OK(mo_config_set(&cfg, "--lr", "1e-3"));
    CHECK_OK(mo_config_set(&cfg, "--device-mem", "80GiB"));
    CHECK_OK(mo_config_set(&cfg, "--csv", "out,with comma.csv"));
    CHECK_OK(mo_config_set(&cfg, "--ckpt", "every:4"));
    CHECK_OK(mo_config_set(&cfg, "--cap", "0.5"));
    CHECK_OK(mo_config_set(&cfg, "--on-oom", "shrink"));
    CHECK_OK(mo_config_set(&cfg, "--monitor", "2"));
    CHECK_OK(mo_config_finish(&cfg));
    mo_run_config rc;
    CHECK_OK(mo_config_combination(&cfg, 0, &rc));
    CHECK(rc.backend == MO_BACKEND_DRY && rc.steps == 5 && rc.warmup == 0 && rc.seed == 18446744073709551615ULL);
    CHECK(rc.lr == 1e-3 && rc.device_mem_bytes == (uint64_t)80 << 30 && !strcmp(rc.csv, "out,with comma.csv"));
    CHECK(rc.ckpt.kind == MO_CKPT_EVERY && rc.ckpt.every == 4 && rc.cap.kind == 1 && rc.cap.fraction == 0.5);
    CHECK(rc.on_oom == MO_ON_OOM_SHRINK && rc.monitor == 2 && !strcmp(rc.cap_text, "0.5"));
    char buf[32];
    CHECK(!strcmp(mo_ckpt_format(rc.ckpt, buf, sizeof buf), "every:4"));
}

static void test_lists_and_order(void) {
    fresh(MO_CMD_SWEEP);
    CHECK_OK(mo_config_set(&cfg, "--precision", "fp32,bf16"));
    CHECK_OK(mo_config_set(&cfg, "--ckpt", "none,full"));
    CHECK_OK(mo_config_set(&cfg, "--accum", "1,4"));
    CHECK_OK(mo_config_set(&cfg, "--cap", "none,24GiB"));
    CHECK_OK(mo_config_set(&cfg, "--alloc", "caching,async"));
    CHECK_OK(mo_config_set(&cfg, "--batch", "4,8"));
    CHECK_OK(mo_config_finish(&cfg));
    CHECK_EQ_U64(mo_config_count(&cfg), 64);
    // The documented order: batch, precision, accum, ckpt, alloc, cap from outermost to fastest.
    int seen = 0;
    for (size_t i = 0; i < 64; i++) {
        mo_run_config rc;
        CHECK_OK(mo_config_combination(&cfg, i, &rc));
        int cap = (int)(i & 1), alloc = (int)(i >> 1 & 1), ckpt = (int)(i >> 2 & 1), accum = (int)(i >> 3 & 1);
        int prec = (int)(i >> 4 & 1), batch = (int)(i >> 5 & 1);
        int ok = rc.cap.kind == (cap ? 2 : 0) && rc.alloc == (alloc ? MO_ALLOC_ASYNC : MO_ALLOC_CACHING) &&
                 rc.ckpt.kind == (ckpt ? MO_CKPT_FULL : MO_CKPT_NONE) && rc.accum == (accum ? 4 : 1) &&
                 rc.precision == (prec ? MO_PREC_BF16 : MO_PREC_FP32) && rc.batch == (batch ? 8 : 4);
        CHECK_MSG(ok, "combination %zu: batch %d precision %s accum %d ckpt %d alloc %s cap %s", i, rc.batch,
                  mo_precision_name(rc.precision), rc.accum, rc.ckpt.kind, mo_alloc_kind_name(rc.alloc), rc.cap_text);
        if (cap) CHECK_EQ_U64(rc.cap.bytes, (uint64_t)24 << 30);
        seen += mo_run_config_validate(&rc) == MO_OK;
    }
    CHECK_EQ_U64(seen, 64); // batch 4 and 8 both divide by accum 4
    mo_run_config rc;
    CHECK(mo_config_combination(&cfg, 64, &rc) == MO_ERR_INTERNAL);

    // Presets and dims across the whole order: preset outermost, cap fastest.
    fresh(MO_CMD_PLAN);
    CHECK_OK(mo_config_set(&cfg, "--preset", "gpt2-124m,gpt2-350m"));
    CHECK_OK(mo_config_set(&cfg, "--seq", "128,256"));
    CHECK_OK(mo_config_set(&cfg, "--tp", "1,2"));
    CHECK_OK(mo_config_set(&cfg, "--pp", "1,2"));
    CHECK_OK(mo_config_set(&cfg, "--attn", "materialized,fused"));
    CHECK_OK(mo_config_finish(&cfg));
    CHECK_EQ_U64(mo_config_count(&cfg), 32);
    CHECK_OK(mo_config_combination(&cfg, 0, &rc));
    CHECK(!strcmp(rc.preset, "gpt2-124m") && rc.seq == 128 && rc.attn == MO_ATTN_MATERIALIZED && rc.tp == 1 && rc.pp == 1);
    CHECK_OK(mo_config_combination(&cfg, 1, &rc));
    CHECK(rc.pp == 2 && rc.tp == 1);
    CHECK_OK(mo_config_combination(&cfg, 2, &rc));
    CHECK(rc.pp == 1 && rc.tp == 2);
    CHECK_OK(mo_config_combination(&cfg, 4, &rc));
    CHECK(rc.attn == MO_ATTN_FUSED && rc.tp == 1);
    CHECK_OK(mo_config_combination(&cfg, 8, &rc));
    CHECK(rc.seq == 256 && rc.attn == MO_ATTN_MATERIALIZED);
    CHECK_OK(mo_config_combination(&cfg, 16, &rc));
    CHECK(!strcmp(rc.preset, "gpt2-350m") && rc.layers == 24 && rc.seq == 128);

    // A later flag replaces the earlier list.
    fresh(MO_CMD_SWEEP);
    CHECK_OK(mo_config_set(&cfg, "--batch", "1,2,3"));
    CHECK_OK(mo_config_set(&cfg, "--batch", "16"));
    CHECK_EQ_U64(mo_config_count(&cfg), 1);

    // Some combinations invalid is fine for a sweep (they become rows with status invalid) ...
    fresh(MO_CMD_SWEEP);
    CHECK_OK(mo_config_set(&cfg, "--accum", "1,3"));
    CHECK_OK(mo_config_finish(&cfg));
    CHECK_OK(mo_config_combination(&cfg, 1, &rc));
    CHECK(mo_run_config_validate(&rc) == MO_ERR_INVALID && strstr(mo_errmsg_plain(), "--accum 3") != NULL);
    // ... none valid is not.
    static const char *const none_valid[] = {"--accum", "3,5", NULL};
    expect_bad_combo(MO_CMD_SWEEP, none_valid, "--accum 3: batch 8 is not divisible by 3");
}

// --offload is a list axis of sweep and plan, appended after --zero (the last, fastest), so a grid
// without it keeps every combination's index; run, mincap and claims take one value; a combination
// the rules refuse (activations without checkpoint segments, optimizer for a model without the offloaded
// update) is one a sweep keeps as an invalid row, with the reason.
static void test_offload_axis(void) {
    fresh(MO_CMD_SWEEP);
    CHECK_OK(mo_config_set(&cfg, "--ckpt", "none,full"));
    CHECK_OK(mo_config_set(&cfg, "--zero", "0"));
    CHECK_OK(mo_config_finish(&cfg));
    mo_run_config without[2];
    for (size_t i = 0; i < 2; i++) CHECK_OK(mo_config_combination(&cfg, i, &without[i]));
    CHECK(without[0].offload == MO_OFFLOAD_NONE && without[1].offload == MO_OFFLOAD_NONE);
    CHECK_OK(mo_config_set(&cfg, "--offload", "none,optimizer,activations"));
    CHECK_OK(mo_config_finish(&cfg));
    CHECK_EQ_U64(mo_config_count(&cfg), 6);
    static const int want_off[6] = {MO_OFFLOAD_NONE, MO_OFFLOAD_OPTIMIZER, MO_OFFLOAD_ACTIVATIONS,
                                    MO_OFFLOAD_NONE, MO_OFFLOAD_OPTIMIZER, MO_OFFLOAD_ACTIVATIONS};
    int valid = 0;
    for (size_t i = 0; i < 6; i++) {
        mo_run_config rc;
        CHECK_OK(mo_config_combination(&cfg, i, &rc));
        CHECK_MSG(rc.offload == want_off[i] && rc.ckpt.kind == (i < 3 ? MO_CKPT_NONE : MO_CKPT_FULL),
                  "combination %zu: offload %s ckpt %d", i, mo_offload_name(rc.offload), rc.ckpt.kind);
        mo_status v = mo_run_config_validate(&rc);
        valid += v == MO_OK;
        if (i == 2) CHECK_MSG(v == MO_ERR_INVALID && strstr(mo_errmsg_plain(), "--offload activations with --ckpt none"),
                              "activations with ckpt none: %s", mo_errmsg_plain());
        mo_clear_error();
    }
    CHECK_EQ_U64(valid, 5);
    // After --dp and --zero, the axes added before it: --dp 1,2 nests outside --offload.
    CHECK_OK(mo_config_set(&cfg, "--dp", "1,2"));
    CHECK_OK(mo_config_finish(&cfg));
    CHECK_EQ_U64(mo_config_count(&cfg), 12);
    for (size_t i = 0; i < 12; i++) {
        mo_run_config rc;
        CHECK_OK(mo_config_combination(&cfg, i, &rc));
        CHECK_MSG(rc.offload == want_off[i % 3] && rc.dp == (int)(i / 3 % 2) + 1 && rc.ckpt.kind == (i < 6 ? MO_CKPT_NONE : MO_CKPT_FULL),
                  "combination %zu: offload %s dp %d ckpt %d", i, mo_offload_name(rc.offload), rc.dp, rc.ckpt.kind);
        if (rc.dp > 1 && rc.offload) {
            CHECK(mo_run_config_validate(&rc) == MO_ERR_INVALID && strstr(mo_errmsg_plain(), "offload runs on one unsplit rank"));
            mo_clear_error();
        }
    }
    // ... and after --sp, appended before it.
    fresh(MO_CMD_SWEEP);
    CHECK_OK(mo_config_set(&cfg, "--tp", "2"));
    CHECK_OK(mo_config_set(&cfg, "--sp", "0,1"));
    CHECK_OK(mo_config_set(&cfg, "--offload", "none,optimizer"));
    CHECK_OK(mo_config_finish(&cfg));
    CHECK_EQ_U64(mo_config_count(&cfg), 4);
    for (size_t i = 0; i < 4; i++) {
        mo_run_config rc;
        CHECK_OK(mo_config_combination(&cfg, i, &rc));
        CHECK_MSG(rc.offload == want_off[i % 2] && rc.sp == (int)(i / 2), "combination %zu: offload %s sp %d", i,
                  mo_offload_name(rc.offload), rc.sp);
    }
    // With one value the grid is the one without the flag, combination by combination.
    fresh(MO_CMD_SWEEP);
    CHECK_OK(mo_config_set(&cfg, "--ckpt", "none,full"));
    CHECK_OK(mo_config_set(&cfg, "--offload", "none"));
    CHECK_EQ_U64(mo_config_count(&cfg), 2);
    for (size_t i = 0; i < 2; i++) {
        mo_run_config rc;
        CHECK_OK(mo_config_combination(&cfg, i, &rc));
        CHECK(!memcmp(&rc, &without[i], sizeof rc));
    }
    // plan takes the list too; the MLP's optimizer row is refused with the reason.
    fresh(MO_CMD_PLAN);
    CHECK_OK(mo_config_set(&cfg, "--model", "mlp"));
    CHECK_OK(mo_config_set(&cfg, "--offload", "none,optimizer"));
    CHECK_OK(mo_config_finish(&cfg));
    mo_run_config rc;
    CHECK_OK(mo_config_combination(&cfg, 1, &rc));
    CHECK(mo_run_config_validate(&rc) == MO_ERR_INVALID && strstr(mo_errmsg_plain(), "--offload optimizer: model mlp"));
    mo_clear_error();
    static const char *const mlp_opt[] = {"--model", "mlp", "--offload", "optimizer", NULL};
    expect_bad_combo(MO_CMD_PLAN, mlp_opt, "--offload optimizer: model mlp has no offloaded update");
    expect_bad(MO_CMD_RUN, "--offload", "none,optimizer", "--offload: memopt run takes one value");
    expect_bad(MO_CMD_PLAN, "--offload", "host", "--offload: unknown value 'host' (accepted: none, optimizer, activations)");
    expect_bad(MO_CMD_SWEEP, "--offload", "none,none", "--offload: 'none' appears twice");
    int o = -1;
    CHECK_OK(mo_offload_parse("activations", &o));
    CHECK(o == MO_OFFLOAD_ACTIVATIONS);
    CHECK(mo_offload_parse("all", &o) == MO_ERR_INVALID && strstr(mo_errmsg_plain(), "--offload: unknown value 'all'"));
    mo_clear_error();
}

static void test_grid_file(void) {
    char path[] = "/tmp/memopt_grid_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "# a grid\n--precision fp32,bf16\nckpt=none,full   # comment\n\n  accum 1,2\nresume\n");
    fclose(f);
    fresh(MO_CMD_SWEEP);
    CHECK_OK(mo_config_set(&cfg, "--grid", path));
    CHECK_OK(mo_config_finish(&cfg));
    CHECK_EQ_U64(mo_config_count(&cfg), 8);
    CHECK(cfg.resume == 1 && !strcmp(cfg.grid, path));

    f = fopen(path, "w");
    fprintf(f, "--precision fp32\n--precision fp8\n");
    fclose(f);
    fresh(MO_CMD_SWEEP);
    CHECK(mo_config_set(&cfg, "--grid", path) == MO_ERR_INVALID);
    CHECK_MSG(strstr(mo_errmsg_plain(), ":2: --precision: unknown value 'fp8'") != NULL, "%s", mo_errmsg_plain());
    unlink(path);
    expect_bad(MO_CMD_SWEEP, "--grid", "/nonexistent/grid.txt", "--grid");
}

static void test_bad_values(void) {
    expect_bad(MO_CMD_RUN, "--precision", "fp8", "--precision: unknown value 'fp8' (accepted: fp32, tf32, fp16, bf16)");
    expect_bad(MO_CMD_RUN, "--batch", "0", "--batch");
    expect_bad(MO_CMD_RUN, "--batch", "abc", "--batch");
    expect_bad(MO_CMD_RUN, "--batch", "-4", "--batch");
    expect_bad(MO_CMD_RUN, "--batch", "99999999999999999999", "--batch");
    expect_bad(MO_CMD_RUN, "--layers", "2000", "--layers");
    expect_bad(MO_CMD_RUN, "--hidden", "", "--hidden");
    expect_bad(MO_CMD_RUN, "--heads", "1.5", "--heads");
    expect_bad(MO_CMD_RUN, "--seq", "65537", "--seq");
    expect_bad(MO_CMD_RUN, "--vocab", "0", "--vocab");
    expect_bad(MO_CMD_RUN, "--accum", "0", "--accum");
    expect_bad(MO_CMD_RUN, "--tp", "0", "--tp");
    expect_bad(MO_CMD_RUN, "--pp", "x", "--pp");
    expect_bad(MO_CMD_RUN, "--steps", "0", "--steps");
    expect_bad(MO_CMD_RUN, "--warmup", "-1", "--warmup");
    expect_bad(MO_CMD_RUN, "--monitor", "1e3", "--monitor");
    expect_bad(MO_CMD_RUN, "--seed", "18446744073709551616", "--seed");
    expect_bad(MO_CMD_RUN, "--seed", "-1", "--seed");
    expect_bad(MO_CMD_RUN, "--lr", "0", "--lr");
    expect_bad(MO_CMD_RUN, "--lr", "nan", "--lr");
    expect_bad(MO_CMD_RUN, "--lr", "1e-3x", "--lr");
    expect_bad(MO_CMD_RUN, "--cap", "2.0", "--cap");
    expect_bad(MO_CMD_RUN, "--cap", "12XB", "--cap");
    expect_bad(MO_CMD_RUN, "--cap", "-1GiB", "--cap");
    expect_bad(MO_CMD_RUN, "--alloc", "slab", "--alloc: unknown value 'slab' (accepted: caching, async, raw)");
    expect_bad(MO_CMD_RUN, "--ckpt", "every:0", "--ckpt");
    expect_bad(MO_CMD_RUN, "--ckpt", "every:", "--ckpt");
    expect_bad(MO_CMD_RUN, "--ckpt", "half", "--ckpt: unknown value 'half' (accepted: none, full, every:K");
    expect_bad(MO_CMD_RUN, "--attn", "flash", "--attn: unknown value 'flash' (accepted: materialized, fused)");
    expect_bad(MO_CMD_RUN, "--comm", "mpi", "--comm: unknown value 'mpi' (accepted: local, nccl)");
    expect_bad(MO_CMD_RUN, "--on-oom", "retry", "--on-oom: unknown value 'retry' (accepted: fail, shrink)");
    expect_bad(MO_CMD_RUN, "--backend", "tpu", "--backend");
    expect_bad(MO_CMD_RUN, "--model", "bert", "--model: unknown value 'bert' (accepted: gpt, mlp, resnet)");
    expect_bad(MO_CMD_RUN, "--preset", "gpt3", "--preset: unknown value 'gpt3' (accepted: gpt2-124m");
    expect_bad(MO_CMD_RUN, "--device-mem", "12", "--device-mem");
    expect_bad(MO_CMD_RUN, "--device-mem", "lots", "--device-mem");
    expect_bad(MO_CMD_RUN, "--csv", "", "--csv");
    expect_bad(MO_CMD_RUN, "--batch", NULL, "--batch: missing value");
    expect_bad(MO_CMD_RUN, "--frobnicate", "1", "unknown flag '--frobnicate'");
    expect_bad(MO_CMD_RUN, "--gpu", "h200", "--gpu: not a flag of memopt run (it is for: plan)");
    expect_bad(MO_CMD_RUN, "--resume", NULL, "--resume: not a flag of memopt run");
    expect_bad(MO_CMD_SWEEP, "--resume", "yes", "--resume: takes no value");
    expect_bad(MO_CMD_PLAN, "--mem", "big", "--mem");
    expect_bad(MO_CMD_PLAN, "--gpu", "h 200", "--gpu");
    expect_bad(MO_CMD_COMPARE, "--tolerance", "2", "--tolerance");
    expect_bad(MO_CMD_COMPARE, "--batch", "8", "--batch: not a flag of memopt compare");
    // Lists: only where they mean something, each value checked, no empties or repeats.
    expect_bad(MO_CMD_RUN, "--precision", "fp32,bf16", "--precision: memopt run takes one value");
    expect_bad(MO_CMD_MINCAP, "--batch", "4,8", "--batch: memopt mincap takes one value");
    expect_bad(MO_CMD_SWEEP, "--precision", "fp32,fp8", "--precision: unknown value 'fp8'");
    expect_bad(MO_CMD_SWEEP, "--batch", "4,,8", "--batch: empty value");
    expect_bad(MO_CMD_SWEEP, "--batch", "4,", "--batch: empty value");
    expect_bad(MO_CMD_SWEEP, "--batch", "8,8", "--batch: '8' appears twice");
    expect_bad(MO_CMD_SWEEP, "--steps", "1,2", "--steps");

    // A failed list leaves the earlier value in place.
    fresh(MO_CMD_SWEEP);
    CHECK_OK(mo_config_set(&cfg, "--batch", "4,8"));
    CHECK(mo_config_set(&cfg, "--batch", "16,x") == MO_ERR_INVALID);
    CHECK(cfg.n_batch == 2 && cfg.batch[0] == 4 && cfg.batch[1] == 8);
}

static void test_bad_combinations(void) {
    static const char *const heads[] = {"--heads", "7", NULL};
    expect_bad_combo(MO_CMD_RUN, heads, "--heads 7: hidden 768 is not divisible by 7");
    static const char *const accum[] = {"--accum", "3", NULL};
    expect_bad_combo(MO_CMD_RUN, accum, "--accum 3: batch 8 is not divisible by 3");
    static const char *const tp_heads[] = {"--tp", "5", NULL};
    expect_bad_combo(MO_CMD_RUN, tp_heads, "--tp 5: heads 12 is not divisible by 5");
    // hidden % heads == 0 and heads % tp == 0 already imply (4*hidden) % tp == 0: the MLP rule can
    // never be the one that fails. Valid splits pass.
    mo_run_config rc;
    fresh(MO_CMD_RUN);
    CHECK_OK(mo_config_combination(&cfg, 0, &rc));
    rc.hidden = 768; rc.heads = 12; rc.tp = 4;
    CHECK_OK(mo_run_config_validate(&rc));
    rc.hidden = 6; rc.heads = 6; rc.tp = 6;
    CHECK_OK(mo_run_config_validate(&rc));
    static const char *const pp[] = {"--pp", "5", NULL};
    expect_bad_combo(MO_CMD_RUN, pp, "--pp 5: layers 12 is not divisible by 5");
    static const char *const every[] = {"--ckpt", "every:13", NULL};
    expect_bad_combo(MO_CMD_RUN, every, "--ckpt every:13: K must be in 1..layers (layers 12)");
    static const char *const nccl[] = {"--comm", "nccl", "--backend", "cpu", NULL};
    expect_bad_combo(MO_CMD_RUN, nccl, "--comm nccl: needs --backend cuda (got cpu)");
    static const char *const gpu_mem[] = {"--gpu", "h200", "--mem", "80GiB", NULL};
    expect_bad_combo(MO_CMD_PLAN, gpu_mem, "--gpu and --mem");
    // Too many combinations.
    fresh(MO_CMD_SWEEP);
    const char *axes[] = {"--layers", "--hidden", "--heads", "--seq", "--batch", "--vocab"};
    for (int i = 0; i < 6; i++) CHECK_OK(mo_config_set(&cfg, axes[i], "1,2,3,4,5,6,7,8"));
    CHECK(mo_config_finish(&cfg) == MO_ERR_INVALID && strstr(mo_errmsg_plain(), "combinations") != NULL);
    // Every valid one passes, every 1..L passes for every:K.
    for (int k = 1; k <= 12; k++) {
        fresh(MO_CMD_RUN);
        char v[16];
        snprintf(v, sizeof v, "every:%d", k);
        CHECK_OK(mo_config_set(&cfg, "--ckpt", v));
        CHECK_OK(mo_config_finish(&cfg));
    }
}

static void test_args_and_commands(void) {
    mo_command c;
    CHECK_OK(mo_command_parse("sweep", &c));
    CHECK(c == MO_CMD_SWEEP);
    CHECK(mo_command_parse("swep", &c) == MO_ERR_INVALID && strstr(mo_errmsg_plain(), "unknown subcommand 'swep'"));
    fresh(MO_CMD_COMPARE);
    CHECK_OK(mo_config_add_arg(&cfg, "a.csv"));
    CHECK(mo_config_finish(&cfg) == MO_ERR_INVALID);
    CHECK_OK(mo_config_add_arg(&cfg, "b.csv"));
    CHECK(mo_config_add_arg(&cfg, "c.csv") == MO_ERR_INVALID);
    CHECK_OK(mo_config_finish(&cfg));
    CHECK(!strcmp(cfg.args[0], "a.csv") && !strcmp(cfg.args[1], "b.csv") && cfg.tolerance == 0.05);
    fresh(MO_CMD_RUN);
    CHECK(mo_config_add_arg(&cfg, "stray") == MO_ERR_INVALID && strstr(mo_errmsg_plain(), "'stray'"));
    // Every flag in the table has help and at least one command.
    size_t n;
    const mo_flag_info *fl = mo_config_flags(&n);
    CHECK(n > 30);
    for (size_t i = 0; i < n; i++) CHECK_MSG(fl[i].help && fl[i].help[0] && fl[i].commands, "%s", fl[i].name);
}

int main(void) {
    test_defaults_and_presets();
    test_scalars();
    test_lists_and_order();
    test_offload_axis();
    test_grid_file();
    test_bad_values();
    test_bad_combinations();
    test_args_and_commands();
    return test_finish();
}
