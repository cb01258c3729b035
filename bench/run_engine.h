// Runs one configuration end to end (allocator, context, model, warm-up, timed steps) and fills
// its CSV row. The engine behind `memopt run`, and behind every row of sweep and claims.
#ifndef MEMOPT_BENCH_RUN_ENGINE_H
#define MEMOPT_BENCH_RUN_ENGINE_H

#include <stdio.h>
#include "bench/config.h"
#include "bench/csv.h"
#include "kernels/cost.h"
#include "kernels/device.h"

#ifdef __cplusplus
extern "C" {
#endif

// What every row records about where it ran.
typedef struct mo_run_env {
    int have_device;     // a CUDA device answered
    mo_device_info dev;  // device 0 (or, without one, the library versions and --device-mem)
    char git_rev[48];
} mo_run_env;

mo_status mo_run_env_init(mo_run_env *env, const mo_run_config *rc);

// Runs rc. Returns MO_OK when a row was produced, whatever the row's status (ok, oom, invalid,
// error); the row's status says how the run went. Prints a summary to out when out is non-NULL.
// Everything the run took is given back before it returns, also after an out-of-memory.
mo_status mo_run_execute(const mo_run_config *rc, const mo_run_env *env, mo_csv_row *row, FILE *out);
// The same, also keeping the cost trace (kernels/cost.h) of the timed steps in *trace (reset first;
// the caller frees it with mo_cost_trace_free). Unsplit runs only: a split run leaves it empty.
mo_status mo_run_execute_traced(const mo_run_config *rc, const mo_run_env *env, mo_csv_row *row, FILE *out,
                                mo_cost_trace *trace);

// The same, step by step, for callers that drive the loop themselves (the Google Benchmark shim):
// begin builds the model (a failure, out of memory included, is recorded in the session, not
// returned: mo_run_status says), step runs one training step and gives its time, mark_timed
// starts the timed part (peaks reset), end releases everything and fills the row. A session
// whose status is not MO_OK has already given its memory back.
typedef struct mo_run_session mo_run_session;
mo_status mo_run_begin(const mo_run_config *rc, const mo_run_env *env, FILE *out, mo_run_session **s);
mo_status mo_run_status(const mo_run_session *s);
void mo_run_mark_timed(mo_run_session *s);
mo_status mo_run_step(mo_run_session *s, double *ms);
mo_status mo_run_end(mo_run_session *s, mo_csv_row *row); // frees s

// The dense datasheet peak (TFLOP/s) of a device for a precision, 0 when unknown.
double mo_device_peak_tflops(const char *device_name, mo_precision p);

#ifdef __cplusplus
}
#endif
#endif
