// The planner: its predicted peak is the run engine's, to the byte (against dry runs of a real run's
// step counts and against the cpu backend, which computes); the GPU catalog parses and a bad entry
// is refused with its line number; fits and the largest batch agree with dry runs; the roofline
// moves the right way; the calibration recovers known efficiencies. It also times a plan of
// gpt2-1558m and of a 7B shape (printed, not asserted: timings are benchmarks, not tests).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench/cli.h"
#include "bench/planner.h"
#include "bench/run_engine.h"
#include "models/model.h"
#include "tests/testlib.h"

static mo_run_config base_config(void) {
    mo_config *c = malloc(sizeof *c);
    mo_config_defaults(c, MO_CMD_RUN);
    mo_run_config rc = c->base;
    free(c);
    return rc;
}

static mo_run_config tiny(void) {
    mo_run_config rc = base_config();
    rc.layers = 3; rc.hidden = 32; rc.heads = 4; rc.seq = 16; rc.batch = 4; rc.vocab = 64;
    rc.preset[0] = '\0';
    return rc;
}

static int same_peaks(const mo_csv_row *a, const mo_csv_row *b, const char *what) {
    int ok = a->peak_allocated_bytes == b->peak_allocated_bytes && a->peak_reserved_bytes == b->peak_reserved_bytes &&
             a->param_bytes == b->param_bytes && a->grad_bytes == b->grad_bytes && a->optim_bytes == b->optim_bytes &&
             a->master_bytes == b->master_bytes && a->activation_bytes == b->activation_bytes &&
             a->workspace_bytes == b->workspace_bytes && !strcmp(a->status, b->status);
    return CHECK_MSG(ok, "%s: peaks differ: allocated %lld vs %lld, reserved %lld vs %lld, activation %lld vs %lld, status %s vs %s",
                     what, (long long)a->peak_allocated_bytes, (long long)b->peak_allocated_bytes, (long long)a->peak_reserved_bytes,
                     (long long)b->peak_reserved_bytes, (long long)a->activation_bytes, (long long)b->activation_bytes, a->status,
                     b->status);
}

// The plan's peak equals the engine's on the real run's step counts (warm-up 3, 5 timed), on the dry
// backend, and on the cpu backend, which really computes, for every strategy and allocator.
static void test_plan_equals_runs(const mo_run_env *env) {
    static const mo_ckpt ckpts[] = {{MO_CKPT_NONE, 0}, {MO_CKPT_FULL, 0}, {MO_CKPT_EVERY, 2}, {MO_CKPT_SQRT, 0}, {MO_CKPT_SELECTIVE, 0}};
    int compared = 0;
    for (int ia = 0; ia < 2; ia++)
        for (int ik = 0; ik < 5; ik++)
            for (int accum = 1; accum <= 2; accum++)
                for (int al = 0; al < 2; al++) {
                    mo_run_config rc = tiny();
                    rc.attn = ia ? MO_ATTN_FUSED : MO_ATTN_MATERIALIZED;
                    rc.ckpt = ckpts[ik];
                    rc.accum = accum;
                    rc.alloc = al ? MO_ALLOC_RAW : MO_ALLOC_CACHING;
                    mo_csv_row plan, dry, cpu;
                    if (!CHECK_OK(mo_plan_predict(&rc, env, &plan))) return;
                    CHECK_MSG(!strcmp(plan.status, "ok"), "plan status %s: %s", plan.status, plan.detail);
                    mo_run_config r = rc;
                    r.backend = MO_BACKEND_DRY; r.warmup = 3; r.steps = 5;
                    CHECK_OK(mo_run_execute(&r, env, &dry, NULL));
                    r.backend = MO_BACKEND_CPU; r.warmup = 1; r.steps = 2;
                    CHECK_OK(mo_run_execute(&r, env, &cpu, NULL));
                    char what[96];
                    snprintf(what, sizeof what, "attn %d ckpt %d/%d accum %d alloc %d", ia, ckpts[ik].kind, ckpts[ik].every, accum, al);
                    same_peaks(&plan, &dry, what);
                    same_peaks(&plan, &cpu, what);
                    compared++;
                }
    printf("  plan == dry run (3+5 steps) == cpu run, to the byte: %d configurations\n", compared);
    // A full-size preset against a real run's default step counts (warm-up 3, 10 timed), dry.
    mo_run_config rc = base_config();
    for (int ck = 0; ck < 2; ck++) {
        rc.ckpt = ck ? (mo_ckpt){MO_CKPT_FULL, 0} : (mo_ckpt){MO_CKPT_NONE, 0};
        mo_csv_row plan, dry;
        CHECK_OK(mo_plan_predict(&rc, env, &plan));
        mo_run_config r = rc;
        r.backend = MO_BACKEND_DRY;
        CHECK_OK(mo_run_execute(&r, env, &dry, NULL));
        same_peaks(&plan, &dry, ck ? "gpt2-124m ckpt full" : "gpt2-124m");
    }
}

// The committed catalog: every GPU of the issue, dense figures, names and device matching.
static void test_catalog(void) {
    mo_gpu_catalog c;
    if (!CHECK_OK(mo_gpu_catalog_load(NULL, &c))) return;
    static const char *need[] = {"h200-sxm", "h100-sxm", "h100-pcie", "a100-80gb-sxm", "a100-40gb", "l40s", "rtx-4090", "a10", "v100-32gb"};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
        const mo_gpu_spec *g = mo_gpu_catalog_find(&c, need[i]);
        if (!CHECK_MSG(g != NULL, "catalog lacks %s", need[i])) continue;
        CHECK(g->fp32 > 0 && g->mem_bw_gbs > 0 && g->memory_bytes > 0);
        // Dense, not sparse: tensor rates within 64x of the CUDA-core rate (a doubled figure on the
        // H100 would read 1979 vs 67: 30x; the check below pins the known dense values).
        CHECK(g->tf32 <= g->bf16 || g->bf16 == 0);
    }
    const mo_gpu_spec *h = mo_gpu_catalog_find(&c, "h100-sxm");
    if (h) {
        CHECK(h->bf16 == 989.4 && h->tf32 == 494.7 && h->fp32 == 67 && h->mem_bw_gbs == 3350);
        CHECK_EQ_U64(mo_gpu_total_bytes(h), (uint64_t)81559 << 20);
    }
    const mo_gpu_spec *h2 = mo_gpu_catalog_find(&c, "H200"); // an alias, any case
    CHECK(h2 && !strcmp(h2->key, "h200-sxm") && mo_gpu_total_bytes(h2) == MO_DEFAULT_DEVICE_MEM);
    const mo_gpu_spec *a = mo_gpu_catalog_find(&c, "a100-80gb-sxm");
    CHECK(a && a->bf16 == 312 && a->tf32 == 156);
    CHECK(mo_gpu_catalog_find(&c, "nosuch") == NULL);
    const mo_gpu_spec *m = mo_gpu_catalog_match_device(&c, "NVIDIA H200");
    CHECK(m && !strcmp(m->key, "h200-sxm"));
    m = mo_gpu_catalog_match_device(&c, "NVIDIA A100-SXM4-80GB");
    CHECK(m && !strcmp(m->key, "a100-80gb-sxm"));
    m = mo_gpu_catalog_match_device(&c, "NVIDIA A10");
    CHECK(m && !strcmp(m->key, "a10"));
    CHECK(mo_gpu_catalog_match_device(&c, "NVIDIA A100 80GB PCIe") == NULL); // not the A10, not in the catalog
    m = mo_gpu_catalog_match_device(&c, "NVIDIA H100 80GB HBM3");
    CHECK(m && !strcmp(m->key, "h100-sxm"));
    // The host link, per direction: every entry has one, at most the PCIe of its generation.
    for (size_t i = 0; i < c.n; i++)
        CHECK_MSG(c.gpus[i].host_gbs > 0 && c.gpus[i].host_gbs <= 64, "%s: host_gbs %g", c.gpus[i].key, c.gpus[i].host_gbs);
    CHECK(h && h->host_gbs == 64 && !(h->unsure & MO_GPU_F_HOST));
    CHECK(h2 && h2->host_gbs == 64 && a && a->host_gbs == 32);
    const mo_gpu_spec *v = mo_gpu_catalog_find(&c, "v100");
    CHECK(v && v->host_gbs == 16 && (v->unsure & MO_GPU_F_HOST));
    const char *note = NULL;
    CHECK(v && mo_gpu_gemm_tflops(v, MO_PREC_TF32, &note) == v->fp32 && note != NULL);
    CHECK(v && mo_gpu_gemm_tflops(v, MO_PREC_FP16, NULL) == 125);
    mo_gpu_catalog_free(&c);
}

static const char good_entry[] =
    "# a comment\n"
    "[x1]\n"
    "name = Test GPU\n"
    "aliases = x, x-one\n"
    "memory = 16GB @ a datasheet\n"
    "fp32 = 10 @ a datasheet\n"
    "tf32 = 20? @ unsure\n"
    "fp16 = 40 @ a datasheet\n"
    "bf16 = 40 @ a datasheet   # trailing comment\n"
    "mem_bw = 500 @ a datasheet\n";

// Parses text that must be refused with `want` (a substring: the line number and the field).
static void expect_refused(const char *text, const char *want) {
    mo_gpu_catalog c;
    mo_status st = mo_gpu_catalog_parse(text, "cat.txt", &c);
    if (st == MO_OK) mo_gpu_catalog_free(&c);
    CHECK_MSG(st == MO_ERR_INVALID && strstr(mo_errmsg_plain(), want), "want refusal with '%s', got status %d '%s'", want, st,
              mo_errmsg_plain());
    mo_clear_error();
}

static void test_catalog_errors(void) {
    mo_gpu_catalog c;
    if (CHECK_OK(mo_gpu_catalog_parse(good_entry, "cat.txt", &c))) {
        CHECK(c.n == 1 && c.gpus[0].line == 2 && (c.gpus[0].unsure & MO_GPU_F_TF32) && c.gpus[0].tf32 == 20);
        CHECK(mo_gpu_catalog_find(&c, "x-one") == &c.gpus[0]);
        mo_gpu_catalog_free(&c);
    }
    char buf[2048];
    snprintf(buf, sizeof buf, "%s%s", good_entry, "link_gbs = 64\n"); // line 11: no source
    expect_refused(buf, "cat.txt:11: link_gbs: no source");
    snprintf(buf, sizeof buf, "%s%s", good_entry, "speed = 3 @ x\n");
    expect_refused(buf, "cat.txt:11: unknown field 'speed'");
    snprintf(buf, sizeof buf, "%s%s", good_entry, "[x2]\nname = B\nmemory = 8GB @ s\n"); // x2 lacks fields
    expect_refused(buf, "cat.txt:11: [x2]: missing field 'fp32'");
    snprintf(buf, sizeof buf, "%s%s", good_entry, "[x]\n"); // an alias of x1
    expect_refused(buf, "cat.txt:11: [x]: the name is already used");
    snprintf(buf, sizeof buf, "%s%s", good_entry, "[x3]\nname = C\nmemory = lots @ s\n");
    expect_refused(buf, "cat.txt:13: memory: 'lots' is not a size");
    snprintf(buf, sizeof buf, "%s", "fp32 = 1 @ s\n");
    expect_refused(buf, "cat.txt:1: a field before the first '[key]'");
    snprintf(buf, sizeof buf, "%s%s", good_entry, "fp32 = 11 @ again\n");
    expect_refused(buf, "cat.txt:11: [x1]: field 'fp32' given twice");
    expect_refused("[z]\nname = Z\nmemory = 8GB @ s\nmem_bw = -5 @ s\n", "cat.txt:4: mem_bw: '-5' is not a number");
    expect_refused("[y]\nname = Y\nmemory = 8GB @ s\nfp32 = 1e9 @ s\n", "cat.txt:4: fp32: '1e9' is not a number");
    expect_refused("# nothing\n", "no GPU entries");
    // host_gbs: a number with a source, positive (unknown is the field left out), '?' marks it unsure.
    snprintf(buf, sizeof buf, "%s%s", good_entry, "host_gbs = fast @ a datasheet\n");
    expect_refused(buf, "cat.txt:11: host_gbs: 'fast' is not a number");
    snprintf(buf, sizeof buf, "%s%s", good_entry, "host_gbs = 0 @ a datasheet\n");
    expect_refused(buf, "cat.txt:11: host_gbs: must be positive");
    snprintf(buf, sizeof buf, "%s%s", good_entry, "host_gbs = 32\n");
    expect_refused(buf, "cat.txt:11: host_gbs: no source");
    snprintf(buf, sizeof buf, "%s%s", good_entry, "host_gbs = 32 @ a\nhost_gbs = 16 @ b\n");
    expect_refused(buf, "cat.txt:12: [x1]: field 'host_gbs' given twice");
    snprintf(buf, sizeof buf, "%s%s", good_entry, "hostgbs = 32 @ a\n");
    expect_refused(buf, "link_gbs, link, host_gbs)"); // the accepted fields name it
    snprintf(buf, sizeof buf, "%s%s", good_entry, "host_gbs = 32? @ a PCI-SIG figure\n");
    if (CHECK_OK(mo_gpu_catalog_parse(buf, "cat.txt", &c))) {
        CHECK(c.gpus[0].host_gbs == 32 && (c.gpus[0].unsure & MO_GPU_F_HOST));
        mo_gpu_catalog_free(&c);
    }
    if (CHECK_OK(mo_gpu_catalog_parse(good_entry, "cat.txt", &c))) { // optional: absent is 0, unknown
        CHECK(c.gpus[0].host_gbs == 0 && !(c.gpus[0].unsure & MO_GPU_F_HOST));
        mo_gpu_catalog_free(&c);
    }
}

// --offload's time, from the dry run's cost trace: the offloaded update's copies (fp32: the gradients
// down, the weights down and back, 12 B a parameter; 16 bits: the gradients down, the 16-bit weights
// back, 6 B) at the catalog's host link per direction and the host AdamW (28 B a parameter; 16 bits
// also the cast, 6) at the host rate of 8 threads, both whole on the step, and no device AdamW; the copy stream's
// bytes (every offloaded segment input out and back) exposed only beyond the blocks' compute.
static void test_offload_roofline(void) {
    mo_gpu_catalog c;
    if (!CHECK_OK(mo_gpu_catalog_load(NULL, &c))) return;
    const mo_gpu_spec *g = mo_gpu_catalog_find(&c, "h200-sxm");
    if (!CHECK(g && g->host_gbs > 0)) { mo_gpu_catalog_free(&c); return; }
    mo_plan_calib cal;
    mo_plan_calib_defaults(&cal);
    mo_run_config rc = base_config(); // gpt2-124m, B 8 x T 1024, fp32
    mo_gpt_config gc;
    memset(&gc, 0, sizeof gc);
    gc.layers = rc.layers; gc.hidden = rc.hidden; gc.heads = rc.heads; gc.seq = rc.seq; gc.batch = rc.batch; gc.vocab = rc.vocab;
    gc.accum = 1;
    // the host rate: MO_PLAN_HOST_GBS a thread up to MO_PLAN_HOST_GBS_MAX, on the default 8 threads (the
    // caller's MEMOPT_OFFLOAD_THREADS left out); a row's count from its knobs, 1 when it has none
    unsetenv("MEMOPT_OFFLOAD_THREADS");
    CHECK(mo_plan_host_threads() == 8 && mo_plan_host_gbs(1) == MO_PLAN_HOST_GBS && mo_plan_host_gbs(0) == MO_PLAN_HOST_GBS);
    CHECK(mo_plan_host_gbs(2) == 2 * MO_PLAN_HOST_GBS && mo_plan_host_gbs(8) == MO_PLAN_HOST_GBS_MAX &&
          mo_plan_host_gbs(256) == MO_PLAN_HOST_GBS_MAX && 8 * MO_PLAN_HOST_GBS > MO_PLAN_HOST_GBS_MAX);
    CHECK(mo_plan_row_host_threads("") == 1 && mo_plan_row_host_threads("MEMOPT_OFFLOAD_THREADS=8") == 8);
    CHECK(mo_plan_row_host_threads("MEMOPT_CE=loop;MEMOPT_OFFLOAD_CHUNK=64;MEMOPT_OFFLOAD_THREADS=3") == 3);
    CHECK(mo_plan_row_host_threads("MEMOPT_OFFLOAD_THREADS=0") == 1 && mo_plan_row_host_threads("MEMOPT_OFFLOAD_THREADS=x") == 1);
    setenv("MEMOPT_OFFLOAD_THREADS", "3", 1);
    CHECK(mo_plan_host_threads() == 3);
    setenv("MEMOPT_OFFLOAD_THREADS", "bad", 1); // the run refuses it; the plan takes the default
    CHECK(mo_plan_host_threads() == 8);
    unsetenv("MEMOPT_OFFLOAD_THREADS");
    const double n = (double)mo_gpt_num_params(&gc), link = 1e9 * g->host_gbs, host = 1e9 * MO_PLAN_HOST_GBS_MAX;
    for (int half = 0; half < 2; half++) {
        rc.precision = half ? MO_PREC_BF16 : MO_PREC_FP32;
        mo_roofline none, off;
        rc.offload = MO_OFFLOAD_NONE;
        mo_roofline_step(&rc, g, &none);
        rc.offload = MO_OFFLOAD_OPTIMIZER;
        mo_roofline_step(&rc, g, &off);
        const double copy = half ? 6 * n : 12 * n, work = half ? 34 * n : 28 * n;
        CHECK_MSG(none.host_copy_s == 0 && none.host_s == 0 && none.copy_s == 0, "no offload: host parts %g %g %g", none.host_copy_s,
                  none.host_s, none.copy_s);
        CHECK_MSG(off.host_copy_bytes == copy && off.host_work_bytes == work, "%s: host copies %.0f B (want %.0f), host work %.0f B (want %.0f)",
                  mo_precision_name(rc.precision), off.host_copy_bytes, copy, off.host_work_bytes, work);
        CHECK_MSG(fabs(off.host_copy_s - copy / link) < 1e-9 && fabs(off.host_s - work / host) < 1e-9, "host times %g %g, want %g %g",
                  off.host_copy_s, off.host_s, copy / link, work / host);
        // The same device work but AdamW's 28 B a parameter, which the host does now.
        CHECK_MSG(off.gemm_s == none.gemm_s && off.mem_s < none.mem_s && off.kernels == none.kernels + 3,
                  "device parts: gemm %g vs %g, mem %g vs %g, ops %d vs %d", off.gemm_s, none.gemm_s, off.mem_s, none.mem_s, off.kernels,
                  none.kernels);
        double s0 = mo_plan_step_ms(&none, &cal, rc.precision), s1 = mo_plan_step_ms(&off, &cal, rc.precision);
        double want = 1e3 * (off.gemm_s / cal.eff_gemm[rc.precision] + off.mem_s / cal.eff_mem[rc.precision] + off.kern_s +
                             off.host_copy_s + off.host_s);
        CHECK_MSG(fabs(s1 - want) < 1e-9 * want && s1 > s0, "%s: offloaded step %.3f ms (want %.3f), not offloaded %.3f",
                  mo_precision_name(rc.precision), s1, want, s0);
        printf("  %s gpt2-124m on %s: step %.1f ms, offload optimizer %.1f ms (copies %.1f ms, host AdamW %.1f ms)\n",
               mo_precision_name(rc.precision), g->key, s0, s1, 1e3 * off.host_copy_s, 1e3 * off.host_s);
    }
    // activations, full checkpointing: L-1 segment inputs of (B, T, C) fp32, out and back.
    rc.precision = MO_PREC_FP32;
    rc.ckpt = (mo_ckpt){MO_CKPT_FULL, 0};
    rc.offload = MO_OFFLOAD_NONE;
    mo_roofline full, act;
    mo_roofline_step(&rc, g, &full);
    rc.offload = MO_OFFLOAD_ACTIVATIONS;
    mo_roofline_step(&rc, g, &act);
    const double bytes = 2.0 * (rc.layers - 1) * rc.batch * rc.seq * rc.hidden * 4;
    CHECK_MSG(act.copy_bytes == bytes && fabs(act.copy_s - bytes / link) < 1e-9 && act.host_copy_s == 0 && act.host_s == 0,
              "copy stream %.0f B (want %.0f), %g s", act.copy_bytes, bytes, act.copy_s);
    CHECK(act.gemm_s == full.gemm_s && act.mem_s == full.mem_s && act.copy_dir_s[0] == act.copy_dir_s[1] &&
          fabs(act.copy_dir_s[0] + act.copy_dir_s[1] - act.copy_s) < 1e-12);
    // What the copies run beside: out, the forward of the blocks whose inputs they are (L-1 of the L
    // blocks' forwards, under a third of the step's device work); back, the next segments' recompute
    // and backward (more than the forwards, less than the whole step).
    double w_out = mo_plan_copy_window_ms(&act, &cal, rc.precision, 0), w_back = mo_plan_copy_window_ms(&act, &cal, rc.precision, 1);
    double device = 1e3 * (act.gemm_s / cal.eff_gemm[rc.precision] + act.mem_s / cal.eff_mem[rc.precision] + act.kern_s);
    CHECK_MSG(w_out > 0 && w_out < device / 3 && w_back > w_out && w_back < device, "windows: out %g ms, back %g ms, step %g ms",
              w_out, w_back, device);
    double exposed = mo_plan_offload_exposed_ms(&act, &cal, rc.precision);
    CHECK_MSG(exposed == fmax(0, 1e3 * act.copy_dir_s[0] - w_out) + fmax(0, 1e3 * act.copy_dir_s[1] - w_back),
              "exposed %g ms: copies %g + %g ms, windows %g, %g ms", exposed, 1e3 * act.copy_dir_s[0], 1e3 * act.copy_dir_s[1], w_out,
              w_back);
    CHECK(mo_plan_step_ms(&act, &cal, rc.precision) == mo_plan_step_ms(&full, &cal, rc.precision) + exposed);
    // Copies longer than the compute they hide behind: the rest is exposed, to the microsecond, per
    // direction (the back copies' slack hides none of the out copies' wait).
    mo_roofline r = act;
    r.copy_dir_s[0] = 1e-3 * w_out + 0.005;
    r.copy_dir_s[1] = 1e-3 * w_back - 0.003;
    CHECK(fabs(mo_plan_offload_exposed_ms(&r, &cal, rc.precision) - 5.0) < 1e-9);
    // Without the GPU's host link the offloaded rows have no time.
    mo_gpu_spec nolink = *g;
    nolink.host_gbs = 0;
    mo_roofline_step(&rc, &nolink, &r);
    CHECK(isnan(mo_plan_step_ms(&r, &cal, rc.precision)));
    mo_gpu_catalog_free(&c);
}

// Fits and the largest batch agree with dry runs made directly.
static void test_fit_and_max_batch(const mo_run_env *env) {
    mo_run_config rc = tiny();
    rc.accum = 2;
    mo_csv_row r;
    CHECK_OK(mo_plan_predict(&rc, env, &r));
    uint64_t peak = (uint64_t)r.peak_reserved_bytes;
    mo_plan_fit f;
    CHECK_OK(mo_plan_fit_check(&rc, env, peak, &f));
    CHECK(f.plannable && f.fits && f.retries == 0);
    CHECK_OK(mo_plan_fit_check(&rc, env, peak / 2, &f));
    CHECK(f.plannable && !f.fits);
    // A headroom that fits batch 16 but not much more: the search lands where a direct run says.
    rc.batch = 16;
    CHECK_OK(mo_plan_predict(&rc, env, &r));
    uint64_t headroom = (uint64_t)r.peak_reserved_bytes + ((uint64_t)3 << 20);
    rc.batch = 4;
    int best = 0, at_limit = 0, runs = 0;
    CHECK_OK(mo_plan_max_batch(&rc, env, headroom, &best, &at_limit, &runs));
    CHECK_MSG(best >= 16 && best % 2 == 0 && !at_limit, "max batch %d", best);
    mo_run_config c = rc;
    c.batch = best;
    CHECK_OK(mo_plan_fit_check(&c, env, headroom, &f));
    CHECK_MSG(f.fits, "batch %d should fit", best);
    c.batch = best + rc.accum;
    CHECK_OK(mo_plan_fit_check(&c, env, headroom, &f));
    CHECK_MSG(!f.fits, "batch %d should not fit", best + rc.accum);
    printf("  largest batch in %s: %d (%d dry runs)\n", "a tight headroom", best, runs);
    // Not even the smallest batch: 0.
    CHECK_OK(mo_plan_max_batch(&rc, env, (uint64_t)1 << 20, &best, &at_limit, &runs));
    CHECK(best == 0);
}

// A measured-looking row of r: ok, on the cuda backend of an "NVIDIA H200" (the caller sets its times)
static void h200_row(mo_csv_row *row, const mo_run_config *r) {
    mo_csv_row_init(row);
    mo_csv_row_from_config(row, r, 0);
    snprintf(row->backend, sizeof row->backend, "cuda");
    snprintf(row->device_name, sizeof row->device_name, "NVIDIA H200");
    snprintf(row->status, sizeof row->status, "ok");
}

// 8 H200 rows of precision p (both attention forms, ckpt none / full, accum 1 / 2) whose step times are
// the roofline's at GEMM efficiency eg and memory efficiency em (the fused 16-bit attention, kern_s,
// at its own stated rate): a fit must give eg and em back. Returns the row count.
static int synthetic_rows(mo_csv_row rows[8], const mo_gpu_spec *g, mo_precision p, double eg, double em) {
    int k = 0;
    for (int ia = 0; ia < 2; ia++)
        for (int ik = 0; ik < 2; ik++)
            for (int acc = 1; acc <= 2; acc++) {
                mo_run_config r = base_config();
                r.precision = p;
                r.attn = ia ? MO_ATTN_FUSED : MO_ATTN_MATERIALIZED;
                r.ckpt = ik ? (mo_ckpt){MO_CKPT_FULL, 0} : (mo_ckpt){MO_CKPT_NONE, 0};
                r.accum = acc;
                mo_roofline f;
                mo_roofline_step(&r, g, &f);
                h200_row(&rows[k], &r);
                rows[k].step_ms = 1e3 * (f.gemm_s / eg + f.mem_s / em + f.kern_s);
                k++;
            }
    return k;
}

// The planner's roofline cache is keyed by everything the trace depends on: two MLPs that differ only in
// --input (or --classes) are different steps, not one cached time.
static void test_roofline_cache_key(void) {
    mo_gpu_catalog c;
    if (!CHECK_OK(mo_gpu_catalog_load(NULL, &c))) return;
    const mo_gpu_spec *g = mo_gpu_catalog_find(&c, "h200-sxm");
    const mo_preset *p = mo_preset_find("mlp-small");
    if (!CHECK(g && p)) { mo_gpu_catalog_free(&c); return; }
    mo_run_config rc = base_config();
    snprintf(rc.model, sizeof rc.model, "mlp");
    snprintf(rc.preset, sizeof rc.preset, "mlp-small");
    rc.layers = p->layers; rc.hidden = p->hidden; rc.input = p->input; rc.classes = p->classes; rc.batch = p->batch;
    rc.heads = rc.seq = rc.vocab = 0;
    mo_roofline small, wide, many;
    mo_roofline_step(&rc, g, &small);
    rc.input = 64 * p->input;
    mo_roofline_step(&rc, g, &wide);
    rc.input = p->input;
    rc.classes = 64 * p->classes;
    mo_roofline_step(&rc, g, &many);
    CHECK_MSG(small.flops > 0 && wide.flops > small.flops && many.flops > small.flops,
              "mlp roofline flops: input %d -> %.3g, input x64 -> %.3g, classes x64 -> %.3g", p->input, small.flops, wide.flops,
              many.flops);
    mo_gpu_catalog_free(&c);
}

static void test_roofline(void) {
    mo_gpu_catalog c;
    if (!CHECK_OK(mo_gpu_catalog_load(NULL, &c))) return;
    const mo_gpu_spec *g = mo_gpu_catalog_find(&c, "h200-sxm");
    mo_run_config rc = base_config();
    mo_roofline none, full, sel, tf;
    mo_roofline_step(&rc, g, &none);
    rc.ckpt = (mo_ckpt){MO_CKPT_FULL, 0};
    mo_roofline_step(&rc, g, &full);
    rc.ckpt = (mo_ckpt){MO_CKPT_SELECTIVE, 0};
    mo_roofline_step(&rc, g, &sel);
    CHECK(full.flops > none.flops && sel.flops > none.flops && full.flops > sel.flops);
    rc.ckpt = (mo_ckpt){MO_CKPT_NONE, 0};
    rc.precision = MO_PREC_TF32;
    mo_roofline_step(&rc, g, &tf);
    // fp32 (no TF32) runs the score and datt GEMMs on its own kernel's 128-row tiles, fewer FLOPs than
    // the causal chunks TF32 keeps on cuBLAS; everything else is the same work
    CHECK(tf.gemm_s < none.gemm_s / 5 && tf.gemm_flops > none.gemm_flops);
    // The GEMM FLOPs cover the model's 6·N·tokens (the attention terms come on top).
    mo_gpt_config gc;
    memset(&gc, 0, sizeof gc);
    gc.layers = rc.layers; gc.hidden = rc.hidden; gc.heads = rc.heads; gc.seq = rc.seq; gc.batch = rc.batch; gc.vocab = rc.vocab;
    gc.accum = 1;
    double six_n = 6.0 * ((double)mo_gpt_num_params(&gc) - (double)rc.seq * rc.hidden) * rc.batch * rc.seq;
    CHECK_MSG(none.gemm_flops > six_n && none.gemm_flops < 1.5 * six_n, "GEMM flops %.3g vs 6N·tokens %.3g", none.gemm_flops, six_n);
    // Calibration: rows made with known efficiencies come back.
    mo_csv_row rows[8];
    int k = synthetic_rows(rows, g, MO_PREC_TF32, 0.7, 0.4);
    mo_plan_calib cal;
    mo_plan_calib_fit(&cal, g, rows, (size_t)k, -1);
    CHECK_MSG(cal.rows[MO_PREC_TF32] == k && fabs(cal.eff_gemm[MO_PREC_TF32] - 0.7) < 1e-3 && fabs(cal.eff_mem[MO_PREC_TF32] - 0.4) < 1e-3,
              "fit gave %.4f GEMM, %.4f memory from %d rows (%s)", cal.eff_gemm[MO_PREC_TF32], cal.eff_mem[MO_PREC_TF32],
              cal.rows[MO_PREC_TF32], cal.how[MO_PREC_TF32]);
    CHECK(cal.rows[MO_PREC_FP32] == 0 && cal.eff_gemm[MO_PREC_FP32] == MO_PLAN_EFF_GEMM);
    // One row: a single scale on the defaults, reproducing that row.
    mo_plan_calib_fit(&cal, g, rows, 1, -1);
    mo_run_config r0;
    CHECK_OK(mo_plan_config_from_row(&rows[0], &r0));
    mo_roofline f0;
    mo_roofline_step(&r0, g, &f0);
    CHECK(fabs(mo_plan_step_ms(&f0, &cal, MO_PREC_TF32) / rows[0].step_ms - 1) < 1e-9);

    // The 16-bit fused attention is its own class (kern_s, at MO_PLAN_EFF_FLASH16 of the peak, not
    // fitted): only 16-bit fused rows have it; its time is the causal FLOPs (forward 2, backward 8
    // products of q k^T per layer, halved) at that rate; and bf16 rows made with known efficiencies
    // plus that time give the efficiencies back.
    mo_run_config b = base_config();
    b.precision = MO_PREC_BF16;
    mo_roofline bm, bfz, ffz;
    mo_roofline_step(&b, g, &bm);
    b.attn = MO_ATTN_FUSED;
    mo_roofline_step(&b, g, &bfz);
    mo_run_config f32 = base_config();
    f32.attn = MO_ATTN_FUSED;
    mo_roofline_step(&f32, g, &ffz);
    const double qk = 2.0 * b.batch * (double)b.seq * b.seq * b.hidden;
    const double want = b.layers * 5 * qk / (MO_PLAN_EFF_FLASH16 * 1e12 * g->bf16);
    CHECK_MSG(bm.kern_s == 0 && ffz.kern_s == 0 && fabs(bfz.kern_s / want - 1) < 1e-6, "kern_s %.4g (want %.4g), mat %.3g, fp32 %.3g",
              bfz.kern_s, want, bm.kern_s, ffz.kern_s);
    // cuDNN's SDPA (MEMOPT_ATTN_IMPL=cudnn) is a library kernel of its own rate: its forward 2 and backward 5
    // products of the causal half at MO_PLAN_EFF_SDPA16 of the peak; the rest of the step as the own
    // kernels' (the knob is in the trace's key, so the two traces are not confused)
    mo_roofline bcz;
    setenv("MEMOPT_ATTN_IMPL", "cudnn", 1);
    mo_roofline_step(&b, g, &bcz);
    unsetenv("MEMOPT_ATTN_IMPL");
    const double want_sdpa = b.layers * 3.5 * qk / (MO_PLAN_EFF_SDPA16 * 1e12 * g->bf16);
    CHECK_MSG(fabs(bcz.kern_s / want_sdpa - 1) < 1e-6 && bcz.gemm_s == bfz.gemm_s,
              "cudnn kern_s %.4g (want %.4g), gemm_s %.4g (own kernels' %.4g)", bcz.kern_s, want_sdpa, bcz.gemm_s, bfz.gemm_s);
    k = synthetic_rows(rows, g, MO_PREC_BF16, 0.55, 0.45);
    mo_plan_calib_fit(&cal, g, rows, (size_t)k, -1);
    CHECK_MSG(fabs(cal.eff_gemm[MO_PREC_BF16] - 0.55) < 1e-3 && fabs(cal.eff_mem[MO_PREC_BF16] - 0.45) < 1e-3,
              "bf16 fit gave %.4f GEMM, %.4f memory (%s)", cal.eff_gemm[MO_PREC_BF16], cal.eff_mem[MO_PREC_BF16],
              cal.how[MO_PREC_BF16]);
    // fp16 has no row of its own here: it takes bf16's efficiencies (the same kernels, rate and bytes),
    // says so, and counts no row; tf32 takes both of bf16's too (tensor cores, the same kernels on 4-byte
    // elements), counting no row; fp32 keeps the defaults.
    CHECK_MSG(cal.rows[MO_PREC_FP16] == 0 && cal.eff_gemm[MO_PREC_FP16] == cal.eff_gemm[MO_PREC_BF16] &&
                  cal.eff_mem[MO_PREC_FP16] == cal.eff_mem[MO_PREC_BF16] && !strncmp(cal.how[MO_PREC_FP16], "bf16's, ", 8),
              "fp16 without rows: %.4f GEMM, %.4f memory, %d rows (%s)", cal.eff_gemm[MO_PREC_FP16], cal.eff_mem[MO_PREC_FP16],
              cal.rows[MO_PREC_FP16], cal.how[MO_PREC_FP16]);
    CHECK_MSG(cal.rows[MO_PREC_TF32] == 0 && cal.eff_gemm[MO_PREC_TF32] == cal.eff_gemm[MO_PREC_BF16] &&
                  cal.eff_mem[MO_PREC_TF32] == cal.eff_mem[MO_PREC_BF16] && !strncmp(cal.how[MO_PREC_TF32], "bf16's, ", 8),
              "tf32 without rows: %.4f GEMM, %.4f memory, %d rows (%s)", cal.eff_gemm[MO_PREC_TF32],
              cal.eff_mem[MO_PREC_TF32], cal.rows[MO_PREC_TF32], cal.how[MO_PREC_TF32]);
    CHECK(cal.eff_gemm[MO_PREC_FP32] == MO_PLAN_EFF_GEMM && cal.eff_mem[MO_PREC_FP32] == MO_PLAN_EFF_MEM);
    // tf32 rows of its own (other efficiencies): its own fit, not bf16's
    {
        mo_csv_row mix[16];
        memcpy(mix, rows, (size_t)k * sizeof *rows);
        const int k32 = synthetic_rows(mix + k, g, MO_PREC_TF32, 0.35, 0.6);
        mo_plan_calib own;
        mo_plan_calib_fit(&own, g, mix, (size_t)(k + k32), -1);
        CHECK_MSG(own.rows[MO_PREC_TF32] == k32 && fabs(own.eff_gemm[MO_PREC_TF32] - 0.35) < 1e-3 &&
                      fabs(own.eff_mem[MO_PREC_TF32] - 0.6) < 1e-3,
                  "tf32 with rows: %.4f / %.4f (%s)", own.eff_gemm[MO_PREC_TF32], own.eff_mem[MO_PREC_TF32], own.how[MO_PREC_TF32]);
    }
    // With fp16 rows of its own (other efficiencies), each 16-bit precision keeps its own fit.
    mo_csv_row both[16];
    memcpy(both, rows, (size_t)k * sizeof *rows);
    const int k16 = synthetic_rows(both + k, g, MO_PREC_FP16, 0.8, 0.3);
    mo_plan_calib_fit(&cal, g, both, (size_t)(k + k16), -1);
    CHECK_MSG(cal.rows[MO_PREC_FP16] == k16 && fabs(cal.eff_gemm[MO_PREC_FP16] - 0.8) < 1e-3 && fabs(cal.eff_mem[MO_PREC_FP16] - 0.3) < 1e-3 &&
                  fabs(cal.eff_gemm[MO_PREC_BF16] - 0.55) < 1e-3 && fabs(cal.eff_mem[MO_PREC_BF16] - 0.45) < 1e-3,
              "fp16 %.4f / %.4f (%s), bf16 %.4f / %.4f", cal.eff_gemm[MO_PREC_FP16], cal.eff_mem[MO_PREC_FP16], cal.how[MO_PREC_FP16],
              cal.eff_gemm[MO_PREC_BF16], cal.eff_mem[MO_PREC_BF16]);
    mo_gpu_catalog_free(&c);
}

// The host rate's scale (mo_plan_calib_fit): offloaded rows made with the host eff times faster than
// planned, on 1 and 8 threads (their knobs; none: one thread) and both precisions, give eff back and
// their own step times; a chunked row and a split row do not count; no offloaded row: 1.
static void test_host_calibration(void) {
    mo_gpu_catalog c;
    if (!CHECK_OK(mo_gpu_catalog_load(NULL, &c))) return;
    const mo_gpu_spec *g = mo_gpu_catalog_find(&c, "h200-sxm");
    if (!CHECK(g != NULL)) { mo_gpu_catalog_free(&c); return; }
    const double eff = 1.7;
    mo_csv_row rows[6];
    const char *knobs[6] = {"", "MEMOPT_OFFLOAD_THREADS=8", "MEMOPT_OFFLOAD_THREADS=1", "MEMOPT_OFFLOAD_THREADS=8",
                            "MEMOPT_OFFLOAD_CHUNK=4194304;MEMOPT_OFFLOAD_THREADS=8", "MEMOPT_OFFLOAD_THREADS=8"};
    mo_plan_calib def;
    mo_plan_calib_defaults(&def);
    CHECK(def.eff_host == 1 && def.host_rows == 0);
    for (int i = 0; i < 6; i++) {
        mo_run_config r = base_config();
        r.precision = i % 2 ? MO_PREC_BF16 : MO_PREC_FP32;
        r.offload = MO_OFFLOAD_OPTIMIZER;
        if (i == 5) r.tp = 2;
        mo_roofline f;
        mo_roofline_step(&r, g, &f);
        h200_row(&rows[i], &r);
        snprintf(rows[i].knobs, sizeof rows[i].knobs, "%s", knobs[i]);
        const double host = f.host_work_bytes / (1e9 * mo_plan_host_gbs(mo_plan_row_host_threads(knobs[i])) * eff);
        // the chunked and split rows far off: counted, they would move the scale
        rows[i].step_ms = 1e3 * (f.gemm_s / MO_PLAN_EFF_GEMM + f.mem_s / MO_PLAN_EFF_MEM + f.kern_s + f.host_copy_s + host) *
                          (i >= 4 ? 3 : 1);
    }
    mo_plan_calib cal;
    mo_plan_calib_fit(&cal, g, rows, 6, -1);
    CHECK_MSG(cal.host_rows == 4 && fabs(cal.eff_host - eff) < 1e-6, "host scale %.6f from %d rows (%s), want %.2f from 4",
              cal.eff_host, cal.host_rows, cal.host_how, eff);
    mo_plan_calib_fit(&cal, g, rows, 6, 1); // leave-one-out: three rows left
    CHECK(cal.host_rows == 3 && fabs(cal.eff_host - eff) < 1e-6);
    for (int i = 0; i < 4; i++) { // each row's own time back, its thread count taken from its knobs
        mo_run_config r;
        CHECK_OK(mo_plan_config_from_row(&rows[i], &r));
        mo_roofline f;
        mo_roofline_step(&r, g, &f);
        f.host_s = mo_plan_host_s(&f, mo_plan_row_host_threads(rows[i].knobs));
        const double ms = mo_plan_step_ms(&f, &cal, r.precision);
        CHECK_MSG(fabs(ms / rows[i].step_ms - 1) < 1e-6, "row %d (%s): planned %.3f ms, measured %.3f", i, rows[i].knobs, ms,
                  rows[i].step_ms);
    }
    mo_plan_calib_fit(&cal, g, rows + 4, 2, -1);
    CHECK(cal.host_rows == 0 && cal.eff_host == 1);
    mo_gpu_catalog_free(&c);
}

// The whole command, as the CLI runs it, timed.
static void time_plan(const char *label, int argc, char **argv) {
    mo_cli *cli = malloc(sizeof *cli);
    if (!CHECK_OK(mo_cli_parse(argc, argv, cli))) { free(cli); return; }
    double t0 = mo_plan_now();
    FILE *keep = stdout;
    FILE *null = fopen("/dev/null", "w");
    if (null) stdout = null; // the plan's report is cli_plan.sh's to check; here only its time
    mo_status st = mo_cli_execute(cli);
    if (null) { stdout = keep; fclose(null); }
    double dt = mo_plan_now() - t0;
    CHECK_OK(st);
    printf("  memopt plan %s: %.3f s in-process\n", label, dt);
    free(cli);
}

// The MFU of a run divides by the catalog's dense figure for the device (one table of GPUs).
static void test_mfu_peak_from_catalog(void) {
    mo_gpu_catalog cat;
    if (!CHECK_OK(mo_gpu_catalog_load(NULL, &cat))) return;
    const mo_gpu_spec *g = mo_gpu_catalog_find(&cat, "h200");
    CHECK(g != NULL);
    if (g) {
        CHECK(mo_device_peak_tflops("NVIDIA H200", MO_PREC_FP32) == g->fp32);
        CHECK(mo_device_peak_tflops("NVIDIA H200", MO_PREC_TF32) == g->tf32);
        CHECK(mo_device_peak_tflops("NVIDIA H200", MO_PREC_BF16) == g->bf16 && g->bf16 > 0);
        CHECK(mo_device_peak_tflops("NVIDIA H200", MO_PREC_FP16) == g->fp16 && g->fp16 > 0);
    }
    CHECK(mo_device_peak_tflops("Some Unknown Accelerator", MO_PREC_BF16) == 0);
    mo_gpu_catalog_free(&cat);
}

// A split's roofline (critical rank: a tp rank of the last stage): the blocks / (tp*pp) and the whole
// LM head, stretched by the 1F1B bubble (accum + pp - 1) / accum, the optimizer / (tp*pp), plus the
// link time of the stated volume; an unsplit run has no communication term.
static void test_split_roofline(void) {
    mo_gpu_catalog cat;
    if (!CHECK_OK(mo_gpu_catalog_load(NULL, &cat))) return;
    const mo_gpu_spec *g = mo_gpu_catalog_find(&cat, "h100-sxm");
    if (!g) { mo_gpu_catalog_free(&cat); return; }
    mo_run_config rc = base_config(); // gpt2-124m shapes, B 8 x T 1024
    rc.layers = 12; rc.hidden = 768; rc.heads = 12; rc.seq = 1024; rc.batch = 8; rc.vocab = 50304;
    rc.accum = 4;
    mo_roofline u, sp;
    mo_roofline_step(&rc, g, &u);
    CHECK(u.comm_s == 0 && u.bubble == 1.0);
    rc.tp = 2; rc.pp = 2;
    mo_roofline_step(&rc, g, &sp);
    double bubble = (4.0 + 2 - 1) / 4, even = (u.gemm_s + u.mem_s) / 4 * bubble;
    CHECK(sp.bubble == bubble);
    // The replicated head (a quarter of GPT-2 small's FLOPs) keeps the rank well above an even share.
    CHECK_MSG(sp.gemm_s + sp.mem_s > 1.3 * even && sp.gemm_s + sp.mem_s < u.gemm_s + u.mem_s,
              "split compute %g s: want between 1.3 x the even share %g and the unsplit %g", sp.gemm_s + sp.mem_s, even,
              u.gemm_s + u.mem_s);
    // tp: 4 fp32 all-reduces per block of the stage (6 of 12), ring 2(t-1)/t = 1; pp: 2 transfers per
    // micro-batch and the wte tie once (V*C fp32).
    double act = 2.0 * 1024 * 768 * 4, bytes = 4 * (6 * 4 * act * 1.0 + 2 * act) + 50304.0 * 768 * 4;
    CHECK_MSG(fabs(sp.comm_s - bytes / (0.5e9 * g->link_gbs)) < 1e-12, "comm %g s, want %g", sp.comm_s,
              bytes / (0.5e9 * g->link_gbs));
    // bf16: the tp all-reduces still move fp32 (widened), the stage boundaries 16 bits.
    rc.precision = MO_PREC_BF16;
    mo_roofline_step(&rc, g, &sp);
    double bytes16 = 4 * (6 * 4 * act * 1.0 + 2 * act / 2) + 50304.0 * 768 * 4;
    CHECK_MSG(fabs(sp.comm_s - bytes16 / (0.5e9 * g->link_gbs)) < 1e-12, "bf16 comm %g s, want %g", sp.comm_s,
              bytes16 / (0.5e9 * g->link_gbs));
    // A tiny vocabulary makes the head negligible: then the rank's share is even (within 3%).
    rc.precision = MO_PREC_FP32;
    rc.vocab = 64;
    rc.tp = 1; rc.pp = 1;
    mo_roofline_step(&rc, g, &u);
    rc.tp = 2; rc.pp = 2;
    mo_roofline_step(&rc, g, &sp);
    even = (u.gemm_s + u.mem_s) / 4 * bubble;
    CHECK_MSG(fabs(sp.gemm_s + sp.mem_s - even) < 0.03 * even, "tiny vocab: split %g s vs even %g", sp.gemm_s + sp.mem_s, even);
    mo_gpu_catalog_free(&cat);
}

// The workspace budget of a row (mo_plan_row_workspace_mib): the knob when set; else the model's default,
// or 32 MiB for a row whose workspace peak is below that default (it ran before the ResNet's was 256).
static void test_row_workspace(void) {
    printf("workspace budget of a row\n");
    mo_csv_row r;
    mo_csv_row_init(&r);
    snprintf(r.model, sizeof r.model, "resnet");
    const int64_t mib = (int64_t)1 << 20;
    r.workspace_bytes = 260 * mib; // the buffer and a conv's scratch: at the default
    CHECK(mo_model_workspace_bytes(mo_model_find("resnet")) == (size_t)256 << 20);
    CHECK(mo_plan_row_workspace_mib(&r) == 256 && !mo_plan_row_other_workspace(&r));
    r.workspace_bytes = 36 * mib + 512 * 1024; // a ResNet row from before: 32 MiB and a little scratch
    CHECK(mo_plan_row_workspace_mib(&r) == 32 && mo_plan_row_other_workspace(&r));
    r.workspace_bytes = -1; // not recorded: before too
    CHECK(mo_plan_row_workspace_mib(&r) == 32);
    snprintf(r.knobs, sizeof r.knobs, "MEMOPT_CONV_TUNE=1;MEMOPT_WORKSPACE_MIB=512");
    CHECK(mo_plan_row_workspace_mib(&r) == 512 && mo_plan_row_other_workspace(&r));
    snprintf(r.knobs, sizeof r.knobs, "MEMOPT_WORKSPACE_MIB=256");
    CHECK(mo_plan_row_workspace_mib(&r) == 256 && !mo_plan_row_other_workspace(&r));
    snprintf(r.model, sizeof r.model, "gpt"); // the suite's 32 MiB
    CHECK(mo_plan_row_other_workspace(&r));
    r.knobs[0] = '\0';
    r.workspace_bytes = 33 * mib;
    CHECK(mo_plan_row_workspace_mib(&r) == 32 && !mo_plan_row_other_workspace(&r));
}

int main(void) {
    test_mfu_peak_from_catalog();
    test_split_roofline();
    mo_run_env env;
    if (!CHECK_OK(mo_plan_env_init(&env))) return test_finish();
    test_plan_equals_runs(&env);
    test_catalog();
    test_catalog_errors();
    test_fit_and_max_batch(&env);
    test_roofline();
    test_roofline_cache_key();
    test_offload_roofline();
    test_host_calibration();
    test_row_workspace();
    char *a1[] = {"memopt", "plan", "--gpu", "h100-sxm", "--preset", "gpt2-1558m"};
    time_plan("--gpu h100-sxm --preset gpt2-1558m", 6, a1);
    char *a2[] = {"memopt", "plan", "--gpu", "h100-sxm", "--layers", "32", "--hidden", "4096", "--heads", "32", "--seq", "4096"};
    time_plan("--gpu h100-sxm (7B: L32 C4096 H32 T4096)", 12, a2);
    return test_finish();
}
