// The engines behind memopt sweep and memopt mincap, callable without the command line (the
// tests drive them in-process; mo_cmd_sweep / mo_cmd_mincap are thin wrappers).
#ifndef MEMOPT_BENCH_SWEEP_H
#define MEMOPT_BENCH_SWEEP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "bench/config.h"
#include "bench/csv.h"
#include "bench/run_engine.h"

#ifdef __cplusplus
extern "C" {
#endif

// The combinations one sweep process runs: index % shard_count == shard_index, then, with
// --resume, less those whose row (mo_csv_config_key of mo_csv_row_from_config) is in --csv.
typedef struct mo_sweep_plan {
    size_t total;     // mo_config_count
    size_t in_shard;  // combinations of this shard
    size_t resumed;   // of those, already in --csv
    size_t n;         // to run
    size_t *index;    // (n) combination indices, ascending
} mo_sweep_plan;
mo_status mo_sweep_select(const mo_config *cfg, const mo_run_env *env, mo_sweep_plan *plan);
void mo_sweep_plan_free(mo_sweep_plan *plan);

// Runs the sweep: every planned combination gets one row (invalid ones included). use_gbench 1
// times each configuration as a Google Benchmark benchmark (needs MEMOPT_HAVE_GBENCH, and may be
// used once per process: the library keeps its registrations); 0 a plain loop of --steps steps.
// Lines go to out. MO_OK when every combination has its row, whatever the rows' statuses.
mo_status mo_sweep_execute(const mo_config *cfg, int use_gbench, FILE *out);

// A readable name of one configuration, also its Google Benchmark name:
//   dry/gpt2-124m-B8/fp32/materialized/ckpt:none/accum:1/alloc:caching/cap:none
mo_status mo_config_name(const mo_run_config *rc, char *buf, size_t n);

// memopt mincap. Caps are whole percents of the device memory (cfg->device_mem_bytes on dry and
// cpu, the device total on cuda).
typedef struct mo_mincap_result {
    int percent;                   // the smallest cap that trained; 0: none did, even 100%
    uint64_t cap_bytes;            // percent of device_bytes
    int failed_percent;            // percent - 1 probed and failed (0 when percent is 1)
    uint64_t device_bytes;
    mo_csv_row unconstrained;      // the no-cap run: peak_allocated_bytes, peak_reserved_bytes
    int probes;                    // capped runs made
} mo_mincap_result;
// Every probe's row (and the no-cap row) goes to w when w is non-NULL; a line per probe to out.
mo_status mo_mincap_search(const mo_run_config *cfg, const mo_run_env *env, mo_csv_writer *w, FILE *out,
                           mo_mincap_result *res);

#ifdef __cplusplus
}
#endif
#endif
