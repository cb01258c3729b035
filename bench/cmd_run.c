// memopt run: one configuration, a summary on stdout, one CSV row with --csv FILE.
#include <string.h>
#include <stdio.h>
#include "bench/cli.h"
#include "bench/csv.h"
#include "bench/fallback.h"
#include "bench/run_engine.h"

mo_status mo_cmd_run(const mo_run_config *rc) {
    mo_run_env env;
    MO_TRY(mo_run_env_init(&env, rc));
    mo_csv_writer *w = NULL;
    if (rc->csv[0]) MO_TRY(mo_csv_open(rc->csv, &w)); // a bad file is refused before any work
    if (mo_csv_repaired_bytes(w))
        printf("memopt run: %s: cut %zu bytes of a torn last line (an interrupted write)\n", rc->csv, mo_csv_repaired_bytes(w));
    mo_csv_row row;
    mo_status st = mo_fallback_execute(rc, &env, &row, stdout); // --on-oom fail|shrink
    if (st == MO_OK && w) {
        st = mo_csv_append(w, &row);
        if (st == MO_OK) printf("  row appended to %s\n", rc->csv);
    }
    mo_csv_close(w);
    MO_TRY(st);
    if (!strcmp(row.status, "ok")) return MO_OK;
    if (!strcmp(row.status, "fallback")) { // trained, with a smaller micro-batch than asked
        printf("  fallback: %s\n", row.detail);
        return MO_OK;
    }
    // The row is written; the exit code says the run did not train.
    return MO_FAIL(!strcmp(row.status, "invalid") ? MO_ERR_INVALID : !strcmp(row.status, "oom") ? MO_ERR_OOM : MO_ERR_INTERNAL,
                   "%s: %s", row.status, row.detail);
}
