// The derived metrics of docs/DESIGN.md, computed in one place so that plot and claims cannot disagree:
//   recompute_overhead = step_ms(row) / step_ms(baseline) - 1
//   mem_saving         = 1 - peak_allocated(row) / peak_allocated(baseline)
// The baseline of a row is the row that equals it in every configuration column of
// mo_csv_config_key except one varied axis, which holds the base value: ckpt "none" for
// checkpointing (the docs/DESIGN.md definition), precision "fp32" or "tf32" for mixed precision.
// Only measured rows (status ok or fallback) take part; when several rows have the baseline's
// key (a CSV appended to twice), the last one counts. Unknown values are NaN.
#ifndef MEMOPT_BENCH_DERIVE_H
#define MEMOPT_BENCH_DERIVE_H

#include <stddef.h>
#include "bench/csv.h"
#include "kernels/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mo_vary { MO_VARY_CKPT = 0, MO_VARY_PRECISION } mo_vary;

typedef struct mo_derived {
    long baseline;             // index of the baseline row; -1 when there is none
    double mem_saving;         // 1 - peak_allocated / baseline's
    double reserved_saving;    // 1 - peak_reserved / baseline's
    double act_saving;         // 1 - activation_peak / baseline's
    double time_ratio;         // step_ms / baseline's (NaN without times, e.g. the dry backend)
    double recompute_overhead; // time_ratio - 1
    double speedup;            // 1 / time_ratio
} mo_derived;

// 1 when the row trained and its measurements are usable (status ok or fallback).
int mo_derive_measured(const mo_csv_row *r);

// out[i] for every rows[i] against its baseline (axis vary at value base, e.g. "none").
mo_status mo_derive_all(const mo_csv_row *rows, size_t n, mo_vary vary, const char *base, mo_derived *out);

// Sets row->recompute_overhead from the rows already produced (prior[0..n)), when the row and its
// ckpt-none baseline are both measured and timed; a ckpt-none row gets 0. Used as rows are written.
mo_status mo_derive_fill_overhead(const mo_csv_row *prior, size_t n, mo_csv_row *row);

#ifdef __cplusplus
}
#endif
#endif
