// memopt compare's verdicts on planted changes: an identical file passes; a 5% memory regression and
// a 20% slowdown with separated spreads are regressions; a noisy change within the spread is no
// change; improvements, missing and new rows are reported, never regressions; status changes count.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench/compare.h"
#include "tests/testlib.h"

// A measured row: gpt2-124m-like, with a median and a p10/p90 spread.
static mo_csv_row row(int accum, const char *ckpt, double ms, double p10, double p90, int64_t peak) {
    mo_csv_row r;
    mo_csv_row_init(&r);
    snprintf(r.backend, sizeof r.backend, "cuda");
    snprintf(r.model, sizeof r.model, "gpt");
    r.layers = 12; r.hidden = 768; r.heads = 12; r.seq = 1024; r.batch = 8; r.vocab = 50304;
    snprintf(r.precision, sizeof r.precision, "tf32");
    snprintf(r.attn, sizeof r.attn, "fused");
    snprintf(r.ckpt, sizeof r.ckpt, "%s", ckpt);
    r.accum = accum; r.tp = 1; r.pp = 1; r.cap_bytes = 0;
    snprintf(r.comm, sizeof r.comm, "local");
    snprintf(r.alloc, sizeof r.alloc, "caching");
    snprintf(r.status, sizeof r.status, "ok");
    r.step_ms = ms; r.step_ms_p10 = p10; r.step_ms_p90 = p90;
    r.peak_allocated_bytes = peak;
    r.peak_reserved_bytes = peak + (2 << 20);
    return r;
}

// Compares one pair and returns the item's flags (and whether it is a regression).
static unsigned one(const mo_csv_row *b, const mo_csv_row *n, double tol, size_t *regressions) {
    mo_compare_item *items = NULL;
    size_t k = 0;
    mo_compare_summary s;
    if (!CHECK_OK(mo_compare_rows(b, 1, n, 1, tol, &items, &k, &s))) return ~0u;
    CHECK(k == 1);
    unsigned f = k ? items[0].flags : ~0u;
    if (regressions) *regressions = s.regressions;
    free(items);
    return f;
}

int main(void) {
    const int64_t G = (int64_t)1 << 30;
    mo_csv_row base = row(1, "none", 30.0, 29.5, 30.6, 8 * G);
    size_t reg = 0;
    char buf[96];

    // Identical: same, no regression.
    CHECK(one(&base, &base, 0.05, &reg) == 0 && reg == 0);
    CHECK(!strcmp(mo_compare_verdict(0, buf, sizeof buf), "same"));

    // A planted 5% memory regression: exact compare flags it (a single byte would, too).
    mo_csv_row more = base;
    more.peak_allocated_bytes = base.peak_allocated_bytes + base.peak_allocated_bytes / 20;
    more.peak_reserved_bytes = base.peak_reserved_bytes + base.peak_reserved_bytes / 20;
    unsigned f = one(&base, &more, 0.05, &reg);
    CHECK((f & MO_CMP_MORE_MEMORY) && reg == 1);
    CHECK(!strcmp(mo_compare_verdict(f, buf, sizeof buf), "more memory"));
    mo_csv_row byte = base;
    byte.peak_allocated_bytes += 1;
    CHECK((one(&base, &byte, 0.05, &reg) & MO_CMP_MORE_MEMORY) && reg == 1);
    // Less memory: reported, not a regression.
    f = one(&more, &base, 0.05, &reg);
    CHECK((f & MO_CMP_LESS_MEMORY) && reg == 0);

    // A planted 20% slowdown whose spread lies wholly above the base's: slower, a regression.
    mo_csv_row slow = base;
    slow.step_ms = 36.0; slow.step_ms_p10 = 35.2; slow.step_ms_p90 = 37.1;
    f = one(&base, &slow, 0.05, &reg);
    CHECK((f & MO_CMP_SLOWER) && reg == 1);
    // The reverse: faster, reported, not failed.
    f = one(&slow, &base, 0.05, &reg);
    CHECK((f & MO_CMP_FASTER) && reg == 0);

    // Noise: the median up 8% (past the 5% tolerance) but the new p10 below the base p90 (a shared
    // GPU's jitter): no change.
    mo_csv_row noisy_base = row(1, "none", 30.0, 27.0, 34.0, 8 * G);
    mo_csv_row noisy = noisy_base;
    noisy.step_ms = 32.4; noisy.step_ms_p10 = 28.0; noisy.step_ms_p90 = 37.0;
    f = one(&noisy_base, &noisy, 0.05, &reg);
    CHECK(!(f & MO_CMP_SLOWER) && (f & MO_CMP_NOISY) && reg == 0);
    CHECK(!strcmp(mo_compare_verdict(f, buf, sizeof buf), "same"));
    // Separated spreads but within the tolerance: no change either (both conditions are needed).
    mo_csv_row tight = base;
    tight.step_ms = 31.0; tight.step_ms_p10 = 30.7; tight.step_ms_p90 = 31.2;
    CHECK(one(&base, &tight, 0.05, &reg) == 0 && reg == 0);
    // No spread recorded: the median rule alone.
    mo_csv_row nospread = base, slow2 = slow;
    nospread.step_ms_p10 = nospread.step_ms_p90 = NAN;
    slow2.step_ms_p10 = slow2.step_ms_p90 = NAN;
    CHECK(one(&nospread, &slow2, 0.05, &reg) & MO_CMP_SLOWER);

    // Status: ok -> oom is a regression; oom -> ok an improvement.
    mo_csv_row oom = base;
    snprintf(oom.status, sizeof oom.status, "oom");
    oom.step_ms = NAN;
    f = one(&base, &oom, 0.05, &reg);
    CHECK((f & MO_CMP_STATUS_WORSE) && reg == 1);
    f = one(&oom, &base, 0.05, &reg);
    CHECK((f & MO_CMP_STATUS_BETTER) && reg == 0);

    // Files: matched by configuration key, not by order; missing and new rows reported, not failed;
    // a duplicate key's last row counts.
    mo_csv_row b3[3] = {row(1, "none", 30, 29.5, 30.6, 8 * G), row(4, "none", 31, 30.5, 31.6, 4 * G), row(1, "full", 40, 39, 41, 3 * G)};
    mo_csv_row n3[4] = {row(4, "none", 31, 30.5, 31.6, 4 * G), row(1, "none", 99, 98, 100, 8 * G), row(1, "none", 30, 29.5, 30.6, 8 * G),
                        row(8, "none", 33, 32, 34, 2 * G)};
    mo_compare_item *items = NULL;
    size_t k = 0;
    mo_compare_summary s;
    if (CHECK_OK(mo_compare_rows(b3, 3, n3, 4, 0.05, &items, &k, &s))) {
        CHECK(k == 4 && s.rows == 4);
        CHECK(items[0].base == &b3[0] && items[0].neu == &n3[2] && items[0].flags == 0); // the last duplicate: 30 ms
        CHECK(items[1].neu == &n3[0] && items[1].flags == 0);
        CHECK(items[2].flags == MO_CMP_MISSING && items[2].neu == NULL);
        CHECK(items[3].flags == MO_CMP_NEW && items[3].base == NULL && items[3].neu == &n3[3]);
        CHECK(s.regressions == 0 && s.missing == 1 && s.added == 1 && s.duplicates_new == 1 && s.same == 2);
        free(items);
    }
    // A corrupt NEW (issue 21): a measurement BASE has is missing or invalid in NEW: a regression,
    // never "same".
    mo_csv_row bad = base;
    bad.step_ms = NAN;
    f = one(&base, &bad, 0.05, &reg);
    CHECK((f & MO_CMP_INVALID) && reg == 1);
    CHECK(!strcmp(mo_compare_verdict(f, buf, sizeof buf), "no measurement"));
    bad = base;
    bad.step_ms = -5;
    CHECK((one(&base, &bad, 0.05, &reg) & MO_CMP_INVALID) && reg == 1);
    bad = base;
    bad.step_ms = INFINITY;
    CHECK((one(&base, &bad, 0.05, &reg) & MO_CMP_INVALID) && reg == 1);
    bad = base;
    bad.step_ms_p10 = 0;
    CHECK((one(&base, &bad, 0.05, &reg) & MO_CMP_INVALID) && reg == 1);
    bad = base;
    bad.peak_allocated_bytes = -1; // the column was absent
    CHECK((one(&base, &bad, 0.05, &reg) & MO_CMP_INVALID) && reg == 1);
    bad = base;
    bad.peak_reserved_bytes = -1;
    CHECK((one(&base, &bad, 0.05, &reg) & MO_CMP_INVALID) && reg == 1);
    // A BASE without times asks for none.
    mo_csv_row untimed = base;
    untimed.step_ms = untimed.step_ms_p10 = untimed.step_ms_p90 = NAN;
    CHECK(one(&untimed, &untimed, 0.05, &reg) == 0 && reg == 0);

    // Many rows of one key: the last one counts, and the lookup is not quadratic (40k rows here
    // took seconds before; this only checks the verdict, the time is in tests/cli_scaling.sh).
    size_t nr = 40000;
    mo_csv_row *many = malloc(nr * sizeof *many);
    if (CHECK(many != NULL)) {
        for (size_t i = 0; i < nr; i++) many[i] = base;
        many[nr - 1].peak_allocated_bytes += 1;
        if (CHECK_OK(mo_compare_rows(&base, 1, many, nr, 0.05, &items, &k, &s))) {
            CHECK(k == 1 && items[0].neu == &many[nr - 1] && (items[0].flags & MO_CMP_MORE_MEMORY));
            CHECK(s.duplicates_new == nr - 1);
            free(items);
        }
        free(many);
    }

    // Dry rows (no times): memory alone decides.
    mo_csv_row d = base;
    snprintf(d.backend, sizeof d.backend, "dry");
    d.step_ms = d.step_ms_p10 = d.step_ms_p90 = NAN;
    CHECK(one(&d, &d, 0.05, &reg) == 0);
    return test_finish();
}
