// Regression verdicts between two results files (memopt compare BASE.csv NEW.csv).
//
// Rows are matched by mo_csv_config_key (the same experiment: backend, model, shapes, strategy;
// not the device or the time). When a file holds a key twice, its last row counts (a re-run
// appended later supersedes the earlier one).
//
// Memory: peak_allocated_bytes and peak_reserved_bytes, compared exactly. Both are deterministic:
// the same requests through the same allocator give the same bytes on every backend, so any change
// is a change in the code, never noise. The one exception is peak_reserved under --alloc async on
// cuda, which the driver's pool decides: there reserved is compared with the time tolerance.
//
// Time (rows with a step time on both sides): slower only when BOTH
//     new median > base median x (1 + tolerance)   and   new p10 > base p90,
// faster only when new median < base median x (1 - tolerance) and new p90 < base p10; otherwise
// the same. The second condition asks that the two distributions separate: on a shared, noisy GPU a
// median moves by more than any small tolerance from one run to the next, but the bulk of one run's
// steps rarely lies entirely above the bulk of another's unless the code got slower. Without p10/p90
// on both sides only the median rule applies (said in the row's note).
//
// Status: ok in base but oom/error/invalid in new is a regression; the reverse an improvement.
// Measurements: a row ok on both sides whose NEW lacks a peak or step time that BASE has, or holds
// a step time that is not positive, is a regression ("no measurement"): a corrupt file must fail.
// Regressions: slower, more memory, status worse, no measurement. Improvements and rows in one file only are
// reported, never failed.
#ifndef MEMOPT_BENCH_COMPARE_H
#define MEMOPT_BENCH_COMPARE_H

#include <stddef.h>
#include <stdint.h>
#include "bench/csv.h"
#include "kernels/status.h"

#ifdef __cplusplus
extern "C" {
#endif

// Exact: memory is deterministic.
#define MO_COMPARE_MEM_TOLERANCE_BYTES 0

enum {
    MO_CMP_SLOWER = 1u << 0,
    MO_CMP_FASTER = 1u << 1,
    MO_CMP_MORE_MEMORY = 1u << 2,
    MO_CMP_LESS_MEMORY = 1u << 3,
    MO_CMP_MISSING = 1u << 4,      // in base only
    MO_CMP_NEW = 1u << 5,          // in new only
    MO_CMP_STATUS_WORSE = 1u << 6, // ok -> not ok
    MO_CMP_STATUS_BETTER = 1u << 7,
    MO_CMP_NOISY = 1u << 8,        // the median moved past the tolerance but the spreads overlap
    MO_CMP_INVALID = 1u << 9,      // ok in both, but NEW lacks a measurement BASE has, or holds an invalid one
};
#define MO_CMP_REGRESSION (MO_CMP_SLOWER | MO_CMP_MORE_MEMORY | MO_CMP_STATUS_WORSE | MO_CMP_INVALID)

typedef struct mo_compare_item {
    const mo_csv_row *base, *neu; // either may be NULL (missing / new)
    unsigned flags;               // MO_CMP_*; 0: the same
    double time_ratio;            // new median / base median (NaN when not compared)
    int64_t alloc_diff, reserved_diff; // new - base peaks
    char note[160];
} mo_compare_item;

typedef struct mo_compare_summary {
    size_t rows, same, slower, faster, more_memory, less_memory, missing, added, status_worse, status_better, noisy;
    size_t invalid;               // items flagged MO_CMP_INVALID
    size_t regressions;           // items with any MO_CMP_REGRESSION flag
    size_t duplicates_base, duplicates_new;
} mo_compare_summary;

// Compares; *items (malloc'ed, free it) holds base's keys in base order, then new-only keys.
mo_status mo_compare_rows(const mo_csv_row *base, size_t nb, const mo_csv_row *neu, size_t nn, double tolerance,
                          mo_compare_item **items, size_t *n, mo_compare_summary *sum);

// "same", or the flags in words: "slower, more memory".
const char *mo_compare_verdict(unsigned flags, char *buf, size_t n);
// The row's configuration in one short line: "dry gpt L12 C768 H12 T1024 B8 V50304 fp32 materialized ckpt none accum 1 caching".
const char *mo_compare_row_label(const mo_csv_row *r, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
