// A C interface to Google Benchmark, so the benchmarks can be plain C like the rest of the suite.
// Only API present in both 1.7.1 (development machine) and 1.8.3 (GPU machine) is used.
//
//   static void bench(mo_gb_state *st, void *user) {
//       while (mo_gb_keep_running(st)) {
//           ... time one iteration with CUDA events ...
//           mo_gb_set_iteration_time(st, seconds); // with mo_gb_use_manual_time
//       }
//       mo_gb_counter(st, "pairs_per_s", (double)mo_gb_iterations(st), MO_GB_COUNTER_RATE);
//   }
//   mo_gb_bench *b; mo_gb_register("alloc/caching/512B", bench, user, &b);
//   return mo_gb_run(&argc, argv) == MO_OK ? 0 : 2;
//
// mo_gb_run takes Google Benchmark's own flags (--benchmark_filter, --benchmark_repetitions,
// --benchmark_min_time, --benchmark_out=FILE --benchmark_out_format=json, ...).
#ifndef MEMOPT_BENCH_GBENCH_SHIM_H
#define MEMOPT_BENCH_GBENCH_SHIM_H

#include <stdint.h>
#include "kernels/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mo_gb_state mo_gb_state; // a benchmark::State
typedef struct mo_gb_bench mo_gb_bench; // a registered benchmark, for its options
typedef void (*mo_gb_fn)(mo_gb_state *st, void *user);

// Counter flags (combine with |): how Google Benchmark reports the value.
enum {
    MO_GB_COUNTER_DEFAULT = 0,
    MO_GB_COUNTER_RATE = 1,           // value / elapsed seconds
    MO_GB_COUNTER_AVG_ITERATIONS = 2, // value / iterations
    MO_GB_COUNTER_AVG_THREADS = 4,    // value / threads
    MO_GB_COUNTER_BYTES = 8,          // printed in binary units (1024: Ki, Mi, Gi)
};

typedef enum mo_gb_unit { MO_GB_NS = 0, MO_GB_US, MO_GB_MS, MO_GB_S } mo_gb_unit;

// Registers fn under name (copied); user is passed back on every call. *out may be NULL.
mo_status mo_gb_register(const char *name, mo_gb_fn fn, void *user, mo_gb_bench **out);
// Options of a registered benchmark.
void mo_gb_use_manual_time(mo_gb_bench *b);     // iteration times come from mo_gb_set_iteration_time
void mo_gb_use_real_time(mo_gb_bench *b);       // wall clock rather than CPU time
void mo_gb_set_unit(mo_gb_bench *b, mo_gb_unit u);
void mo_gb_set_iterations(mo_gb_bench *b, int64_t n); // a fixed count instead of Google Benchmark's choice

// Inside the callback.
int mo_gb_keep_running(mo_gb_state *st);        // the loop condition; times the iterations
void mo_gb_set_iteration_time(mo_gb_state *st, double seconds);
void mo_gb_pause_timing(mo_gb_state *st);
void mo_gb_resume_timing(mo_gb_state *st);
int64_t mo_gb_iterations(const mo_gb_state *st); // iterations run so far
void mo_gb_counter(mo_gb_state *st, const char *name, double value, int flags);
void mo_gb_set_items_processed(mo_gb_state *st, int64_t items);
void mo_gb_set_bytes_processed(mo_gb_state *st, int64_t bytes);
void mo_gb_set_label(mo_gb_state *st, const char *label);
// Marks the run failed with a message; the loop then stops (call it before or instead of looping).
void mo_gb_skip_with_error(mo_gb_state *st, const char *message);

// benchmark::Initialize, ReportUnrecognizedArguments, RunSpecifiedBenchmarks, Shutdown.
// An unrecognized argument is MO_ERR_INVALID (Google Benchmark has printed it).
mo_status mo_gb_run(int *argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
