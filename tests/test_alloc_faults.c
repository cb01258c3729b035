// Fault injection at every allocation of a tiny training run, cpu backend (tests/alloc_faults.h):
// the plain model under several strategies and split runs of tp 2 and pp 2 over the local
// communicator. Then the run engine behind memopt run / sweep (bench/run_engine.c) with the k-th
// allocation failing: a row of status oom with the allocator's message, nothing left allocated in the
// process, the next configuration's row ok.
#include <stdlib.h>
#include "bench/config.h"
#include "bench/run_engine.h"
#include "tests/alloc_faults.h"

// The engine: run config rc, k-th allocation failing. Returns the row.
static void engine_run(const mo_run_config *rc, const mo_run_env *env, uint64_t k, mo_csv_row *row) {
    mo_alloc_global g0, g1;
    mo_alloc_global_stats(&g0);
    mo_alloc_fail_at(k);
    alarm(60);
    CHECK_OK(mo_run_execute(rc, env, row, NULL));
    alarm(0);
    fault_last_calls = mo_alloc_calls();
    mo_alloc_fail_at(0);
    mo_alloc_global_stats(&g1);
    CHECK_MSG(g1.allocated_bytes == g0.allocated_bytes && g1.reserved_bytes == g0.reserved_bytes &&
                  g1.leaked_bytes == g0.leaked_bytes && g1.live_allocators == g0.live_allocators,
              "engine k=%llu: allocated %llu reserved %llu leaked %llu allocators %llu after the run",
              (unsigned long long)k, (unsigned long long)g1.allocated_bytes, (unsigned long long)g1.reserved_bytes,
              (unsigned long long)(g1.leaked_bytes - g0.leaked_bytes), (unsigned long long)g1.live_allocators);
}

static void test_engine(mo_backend_kind be, int tp, fault_totals *tot) {
    signal(SIGALRM, fault_alarm);
    mo_config c;
    mo_config_defaults(&c, MO_CMD_RUN);
    mo_run_config rc = c.base;
    rc.layers = 2; rc.hidden = 32; rc.heads = 2; rc.seq = 16; rc.batch = 4; rc.vocab = 64;
    rc.backend = be; rc.steps = 2; rc.warmup = 1; rc.tp = tp;
    mo_run_env env;
    CHECK_OK(mo_run_env_init(&env, &rc));
    // The dry replay that predicts a cpu run's peak makes as many allocations as a dry run.
    mo_run_config dry = rc;
    dry.backend = MO_BACKEND_DRY;
    mo_csv_row row;
    engine_run(&dry, &env, 0, &row);
    uint64_t n_dry = fault_last_calls;
    engine_run(&rc, &env, 0, &row);
    uint64_t n = fault_last_calls;
    CHECK_MSG(!strcmp(row.status, "ok"), "engine reference: %s %s", row.status, row.detail);
    int64_t ref_peak = row.peak_allocated_bytes;
    uint64_t n_run = be == MO_BACKEND_DRY ? n : n - n_dry;
    int bad = 0;
    for (uint64_t k = 1; k <= n && bad < 5; k += fault_stride()) {
        engine_run(&rc, &env, k, &row);
        tot->injected++;
        char want[64];
        snprintf(want, sizeof want, "injected fault: allocation %llu)", (unsigned long long)k);
        int ok;
        if (k <= n_run) {
            ok = CHECK_MSG(!strcmp(row.status, "oom") && strstr(row.detail, "out of memory: tried to allocate") &&
                               strstr(row.detail, want),
                           "engine %s tp %d k=%llu: row %s: %s", mo_backend_name(be), tp, (unsigned long long)k,
                           row.status, row.detail);
        } else {
            // The fault hit the dry replay: the run itself is ok, its prediction unknown (an empty cell).
            ok = CHECK_MSG(!strcmp(row.status, "ok") && row.predicted_peak_bytes == -1,
                           "engine %s k=%llu (in the dry replay): row %s, predicted %lld", mo_backend_name(be),
                           (unsigned long long)k, row.status, (long long)row.predicted_peak_bytes);
        }
        // The next configuration of a sweep runs normally.
        engine_run(&rc, &env, 0, &row);
        ok &= CHECK_MSG(!strcmp(row.status, "ok") && row.peak_allocated_bytes == ref_peak,
                        "engine after k=%llu: %s %s", (unsigned long long)k, row.status, row.detail);
        if (ok) tot->survived++;
        else bad++;
    }
    printf("fault injection: engine (memopt run) tp %d           %s: %4llu allocations (%llu in the run), every %llu failed once: %s\n",
           tp, mo_backend_name(be), (unsigned long long)n, (unsigned long long)n_run, (unsigned long long)fault_stride(),
           bad ? "FAILURES" : "all rows right");
}

int main(void) {
    fault_case cases[16];
    int n = fault_cases(cases, 16);
    fault_totals tot = {0};
    uint64_t allocs = 0;
    for (int i = 0; i < n; i++) allocs += fault_sweep(&cases[i], MO_BACKEND_CPU, &tot);
    test_engine(MO_BACKEND_CPU, 1, &tot);
    test_engine(MO_BACKEND_DRY, 1, &tot);
    test_engine(MO_BACKEND_DRY, 2, &tot);
    printf("fault injection total: %llu faults injected, %llu survived (unwound as oom, next run normal), %llu bytes leaked\n",
           (unsigned long long)tot.injected, (unsigned long long)tot.survived, (unsigned long long)tot.leaked_bytes);
    CHECK_EQ_U64(tot.leaked_bytes, 0);
    CHECK_EQ_U64(tot.survived, tot.injected);
    (void)allocs;
    return test_finish();
}
