// --on-oom: what a configuration does when it runs out of memory. Shared by run and sweep.
//   fail    one attempt; out of memory is the row's status (oom) and the allocator's message its
//           detail. The engine has given everything back, so the next configuration starts clean.
//   shrink  after an out-of-memory, halve the micro-batch (double accum, keeping the global batch)
//           and try again, until a step fits or micro-batch 1 fails. A run that fitted after
//           shrinking gets status fallback and the path in its detail:
//             "requested accum 1: oom at accum 1 -> oom at accum 2 -> ok at accum 4"
//           The row's accum and micro_batch are those of the attempt that trained, because every
//           measurement in it belongs to that attempt (sweep --resume reads the requested accum
//           back from the detail). "Halve" means the next accum that divides the batch and is at
//           least twice the current one (batch 6: accum 1 -> 2 -> 6).
// Both also check, on the cuda backend, that device memory in use (cudaMemGetInfo) is back where it
// was before the configuration, within MO_LEAK_SLACK_BYTES; if not, the row's detail says so.
#ifndef MEMOPT_BENCH_FALLBACK_H
#define MEMOPT_BENCH_FALLBACK_H

#include <stdint.h>
#include <stdio.h>
#include "bench/config.h"
#include "bench/csv.h"
#include "bench/run_engine.h"

#ifdef __cplusplus
extern "C" {
#endif

// What the CUDA context itself may take between two configurations without any leak: lazily
// loaded kernel modules (our kernels, cuBLASLt's) stay resident after the first use, and
// cudaMemGetInfo moves in 2 MiB pages.
#define MO_LEAK_SLACK_BYTES ((uint64_t)64 << 20)

// One attempt at rc: fills row (any status: ok, oom, invalid, error). Sets *committed to 1 when
// no retry may follow, even after an out-of-memory (a benchmark's timing loop had started).
typedef mo_status (*mo_attempt_fn)(const mo_run_config *rc, void *user, mo_csv_row *row, int *committed);

// Runs rc under rc->on_oom through fn. *used (may be NULL) is the configuration of the attempt
// that produced the row. Notes on the retries go to out (may be NULL). MO_OK when a row was made.
mo_status mo_fallback_run(const mo_run_config *rc, mo_attempt_fn fn, void *user, mo_csv_row *row,
                          mo_run_config *used, FILE *out);

// mo_run_execute under rc->on_oom: what memopt run does. Summaries of every attempt go to out.
mo_status mo_fallback_execute(const mo_run_config *rc, const mo_run_env *env, mo_csv_row *row, FILE *out);

// The accum after accum for a global batch: the smallest divisor of batch >= 2*accum; 0 when
// micro-batch 1 has been reached.
mo_status mo_fallback_next_accum(int batch, int accum, int *next);

// The requested accum of a fallback row, read back from its detail ("requested accum K: ...");
// 0 when the row is not one.
mo_status mo_fallback_requested_accum(const mo_csv_row *row, int *accum);

// Device memory in use before and after a configuration (cuda backend; elsewhere a no-op).
typedef struct mo_leak_probe {
    int active;
    uint64_t used_before;
} mo_leak_probe;
mo_status mo_leak_probe_begin(mo_leak_probe *p, mo_backend_kind backend);
// Appends to row->detail when device memory in use grew by more than MO_LEAK_SLACK_BYTES.
mo_status mo_leak_probe_end(const mo_leak_probe *p, mo_csv_row *row);

#ifdef __cplusplus
}
#endif
#endif
