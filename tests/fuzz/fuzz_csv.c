// libFuzzer harness: reading a results CSV (bench/csv.c) and everything the readers do with the rows:
// compare (mo_compare_rows), plot (mo_plot_results up to gnuplot, which is kept off PATH), plan
// --validate (mo_plan_config_from_row, the roofline and its calibration against the h200 entry of
// bench/gpus.txt) and sweep --resume (mo_csv_config_key, mo_fallback_requested_accum).
// Invariant: a row that was read, written back with mo_csv_format_row and read again has the same key.
#include <sys/stat.h>
#include "bench/compare.h"
#include "bench/csv.h"
#include "bench/fallback.h"
#include "bench/planner.h"
#include "bench/plot.h"
#include "tests/fuzz/fuzz_util.h"

static mo_gpu_catalog cat;
static const mo_gpu_spec *h200;
static char outdir[128];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    mo_gpu_catalog_load(NULL, &cat); // the source tree's bench/gpus.txt (this binary is built inside it)
    h200 = cat.n ? mo_gpu_catalog_find(&cat, "h200") : NULL;
    mo_clear_error();
    setenv("PATH", "/nonexistent", 1); // mo_plot_results stops at "gnuplot not found": no process per input
    snprintf(outdir, sizeof outdir, "/tmp/memopt_fuzz_plot_%d", (int)getpid());
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    if (n > 262144) return 0;
    const char *path = fuzz_file(data, n, ".csv");
    mo_csv_row *rows = NULL;
    size_t nr = 0;
    if (mo_csv_read(path, &rows, &nr) != MO_OK) {
        FUZZ_ASSERT(*mo_errmsg_plain(), "a read error without a message");
        return 0;
    }
    // sweep --resume, and the write-back round trip
    static char buf[16384];
    for (size_t i = 0; i < nr; i++) {
        char k1[1024], k2[1024];
        mo_csv_config_key(&rows[i], k1, sizeof k1);
        int asked = 0;
        (void)mo_fallback_requested_accum(&rows[i], &asked);
        if (mo_csv_format_row(&rows[i], buf, sizeof buf) != MO_OK) continue;
        char whole[20000];
        snprintf(whole, sizeof whole, "%s\n%s", mo_csv_header(), buf);
        const char *p2 = fuzz_file((const uint8_t *)whole, strlen(whole), ".rt.csv");
        mo_csv_row *back = NULL;
        size_t nb = 0;
        mo_status st = mo_csv_read(p2, &back, &nb);
        FUZZ_ASSERT(st == MO_OK && nb == 1, "row %zu written back does not read (%s): %s", i, mo_errmsg(), buf);
        mo_csv_config_key(&back[0], k2, sizeof k2);
        FUZZ_ASSERT(!strcmp(k1, k2), "row %zu: key '%s' became '%s'", i, k1, k2);
        free(back);
    }
    // compare: the file against itself, and against its first half
    mo_compare_item *items = NULL;
    size_t ni = 0;
    mo_compare_summary sum;
    if (mo_compare_rows(rows, nr, rows, nr, 0.05, &items, &ni, &sum) == MO_OK) {
        // A row without a valid measurement (an inf step time, say) is a regression wherever it stands,
        // also against itself (compare's rule since issue 21): the only ones a file may have against itself.
        FUZZ_ASSERT(sum.regressions == sum.invalid, "a file compared with itself has %zu regressions, %zu of them invalid rows",
                    sum.regressions, sum.invalid);
        free(items);
    }
    if (mo_compare_rows(rows, nr / 2, rows, nr, 0.05, &items, &ni, &sum) == MO_OK) free(items);
    // plan --validate, without the dry replay. The roofline traces a dry step, linear in layers x
    // micro-batches: a 121726-layer row took 5 s in a release build and passed the 10 s unit timeout under
    // ASan (session 15's long run: a slow input, not a hang), and the calibration traces every usable row
    // of the file, so a 1000000-layer one beside the row timed took 2 GB and the unit timeout (session 20's
    // CI). Rows past 4096 of them are read, keyed, compared and plotted, not traced: neither timed nor
    // given to the fit.
    mo_csv_row *tr = nr ? malloc(nr * sizeof *tr) : NULL;
    mo_run_config *trc = nr ? malloc(nr * sizeof *trc) : NULL; // tr[i]'s configuration, validated once
    size_t nt = 0;
    for (size_t i = 0; tr && trc && i < nr; i++) {
        mo_run_config rc;
        if (mo_plan_config_from_row(&rows[i], &rc) != MO_OK) continue;
        if (mo_run_config_validate(&rc) != MO_OK) continue;
        if ((long long)rc.layers * (rc.accum > 0 ? rc.accum : 1) > 4096) continue;
        trc[nt] = rc;
        tr[nt++] = rows[i];
    }
    for (size_t i = 0; h200 && i < nt; i++) {
        mo_roofline roof;
        mo_roofline_step(&trc[i], h200, &roof);
        mo_plan_calib c;
        mo_plan_calib_fit(&c, h200, tr, nt, (long)i);
        (void)mo_plan_step_ms(&roof, &c, trc[i].precision);
    }
    free(tr);
    free(trc);
    // plot: the data files of the four figures
    (void)mo_plot_results(rows, nr, outdir, NULL);
    mo_clear_error();
    free(rows);
    return 0;
}
