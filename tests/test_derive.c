// bench/derive: recompute_overhead and mem_saving as docs/DESIGN.md defines them, against the right
// baseline row (same configuration but the varied axis), and nothing when there is none.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "bench/derive.h"
#include "testlib.h"

static void row(mo_csv_row *r, const char *ckpt, const char *prec, int accum, double step_ms, int64_t peak, int64_t act,
                const char *status) {
    mo_csv_row_init(r);
    snprintf(r->backend, sizeof r->backend, "cuda");
    snprintf(r->model, sizeof r->model, "gpt");
    r->layers = 12; r->hidden = 768; r->heads = 12; r->seq = 1024; r->batch = 8; r->vocab = 50304;
    r->micro_batch = 8 / accum;
    snprintf(r->precision, sizeof r->precision, "%s", prec);
    snprintf(r->attn, sizeof r->attn, "materialized");
    snprintf(r->ckpt, sizeof r->ckpt, "%s", ckpt);
    r->accum = accum; r->tp = 1; r->pp = 1;
    snprintf(r->comm, sizeof r->comm, "local");
    r->cap_bytes = 0;
    snprintf(r->alloc, sizeof r->alloc, "caching");
    snprintf(r->status, sizeof r->status, "%s", status);
    r->step_ms = step_ms;
    r->peak_allocated_bytes = peak;
    r->peak_reserved_bytes = peak + 100;
    r->activation_peak_bytes = act;
}

static int near(double a, double b) { return fabs(a - b) < 1e-12; }

static void test_ckpt(void) {
    mo_csv_row r[7];
    row(&r[0], "none", "fp32", 1, 100, 1000, 800, "ok");
    row(&r[1], "full", "fp32", 1, 120, 500, 300, "ok");
    row(&r[2], "full", "fp32", 2, 150, 400, 200, "ok");  // accum 2: its baseline is r[3]
    row(&r[3], "none", "fp32", 2, 125, 800, 600, "ok");
    row(&r[4], "sqrt", "fp32", 4, 130, 300, 100, "ok");   // no accum-4 baseline
    row(&r[5], "selective", "fp32", 1, 110, 700, 500, "oom"); // not measured
    row(&r[6], "none", "fp32", 1, 200, 2000, 1800, "oom");   // a later baseline that did not train: ignored
    mo_derived d[7];
    CHECK_OK(mo_derive_all(r, 7, MO_VARY_CKPT, "none", d));
    CHECK(d[0].baseline == 0 && near(d[0].mem_saving, 0) && near(d[0].recompute_overhead, 0));
    CHECK(d[1].baseline == 0);
    CHECK_MSG(near(d[1].recompute_overhead, 0.2), "overhead %g, want 0.2", d[1].recompute_overhead);
    CHECK_MSG(near(d[1].mem_saving, 0.5), "mem_saving %g, want 0.5", d[1].mem_saving);
    CHECK(near(d[1].act_saving, 1.0 - 300.0 / 800.0));
    CHECK(near(d[1].reserved_saving, 1.0 - 600.0 / 1100.0));
    CHECK(near(d[1].speedup, 100.0 / 120.0));
    CHECK(d[2].baseline == 3 && near(d[2].recompute_overhead, 150.0 / 125.0 - 1) && near(d[2].mem_saving, 0.5));
    CHECK(d[4].baseline == -1 && isnan(d[4].mem_saving) && isnan(d[4].recompute_overhead));
    CHECK(d[5].baseline == -1 && isnan(d[5].mem_saving));
    CHECK(d[6].baseline == -1);
}

static void test_last_baseline_and_dry(void) {
    mo_csv_row r[3];
    row(&r[0], "none", "fp32", 1, 100, 1000, 800, "ok");
    row(&r[1], "none", "fp32", 1, 50, 2000, 1800, "ok"); // the same experiment again: the last counts
    row(&r[2], "full", "fp32", 1, NAN, 500, 300, "ok");  // dry: no times
    mo_derived d[3];
    CHECK_OK(mo_derive_all(r, 3, MO_VARY_CKPT, "none", d));
    CHECK(d[2].baseline == 1 && near(d[2].mem_saving, 0.75));
    CHECK(isnan(d[2].recompute_overhead) && isnan(d[2].speedup));
    CHECK(d[0].baseline == 1); // both ckpt-none rows point at the last one
}

static void test_precision(void) {
    mo_csv_row r[4];
    row(&r[0], "none", "fp32", 1, 300, 1000, 800, "ok");
    row(&r[1], "none", "tf32", 1, 100, 1000, 800, "ok");
    row(&r[2], "none", "bf16", 1, 50, 600, 400, "ok");
    row(&r[3], "none", "fp16", 1, 60, 600, 400, "error");
    mo_derived d[4];
    CHECK_OK(mo_derive_all(r, 4, MO_VARY_PRECISION, "fp32", d));
    CHECK(d[2].baseline == 0 && near(d[2].speedup, 6.0) && near(d[2].mem_saving, 0.4));
    CHECK(d[3].baseline == -1);
    CHECK_OK(mo_derive_all(r, 4, MO_VARY_PRECISION, "tf32", d));
    CHECK(d[2].baseline == 1 && near(d[2].speedup, 2.0));
}

static void test_fill(void) {
    mo_csv_row prior[2], r;
    row(&prior[0], "none", "fp32", 1, 100, 1000, 800, "ok");
    row(&prior[1], "none", "tf32", 1, 40, 1000, 800, "ok");
    row(&r, "full", "fp32", 1, 130, 500, 300, "ok");
    CHECK_OK(mo_derive_fill_overhead(prior, 2, &r));
    CHECK_MSG(near(r.recompute_overhead, 0.3), "overhead %g", r.recompute_overhead);
    row(&r, "full", "fp32", 2, 130, 500, 300, "ok"); // no accum-2 baseline: stays unknown
    CHECK_OK(mo_derive_fill_overhead(prior, 2, &r));
    CHECK(isnan(r.recompute_overhead));
    row(&r, "none", "fp32", 2, 130, 500, 300, "ok"); // a baseline itself: 0
    CHECK_OK(mo_derive_fill_overhead(prior, 2, &r));
    CHECK(near(r.recompute_overhead, 0));
    row(&r, "full", "fp32", 1, NAN, 500, 300, "ok"); // dry: unknown
    CHECK_OK(mo_derive_fill_overhead(prior, 2, &r));
    CHECK(isnan(r.recompute_overhead));
    CHECK_OK(mo_derive_all(NULL, 0, MO_VARY_CKPT, "none", NULL));
}

int main(void) {
    test_ckpt();
    test_last_baseline_and_dry();
    test_precision();
    test_fill();
    return test_finish();
}
