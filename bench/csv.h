// The results CSV of docs/DESIGN.md: one header line, one row per run, appended and made durable as
// each run ends, so an interrupted sweep loses nothing and can resume.
//
// Empty cells: a value that is unknown or does not apply is an empty cell. In mo_csv_row that is
//   -1   for the integer (int64_t) columns (no column is negative when known),
//   NaN  for the real (double) columns (a NaN measured value is written empty too),
//   ""   for the text columns.
// mo_csv_row_init sets every field to unknown.
#ifndef MEMOPT_BENCH_CSV_H
#define MEMOPT_BENCH_CSV_H

#include <stddef.h>
#include <stdint.h>
#include "bench/config.h"
#include "kernels/status.h"

#ifdef __cplusplus
extern "C" {
#endif

// 2: dims and items_per_s (the model's own dimension text and items per second); activation_peak_bytes
//    excludes the library workspace (it is the activation category's bytes at the overall peak);
//    inactive_split_bytes, largest_free_block_bytes, segments; knobs (the MEMOPT_* settings, kernels/knobs.h).
//    All added at the end. Schema 1 files (and schema 2 files written before knobs, whose knobs read empty)
//    are read too (see mo_csv_read); schema 1 had gpt rows only.
// 3: dp and zero (data-parallel ranks and the ZeRO level), at the end. Older rows read as dp 1, zero 0.
// 4: offload and host_bytes (--offload and the host allocator's peak), before knobs. Older rows read as
//    offload none, host_bytes 0.
// 5: offload_copy_ms and offload_stall_ms (--offload activations: the copy stream's busy time and the
//    compute stream's wait for it, means over the timed steps), before knobs. Empty in older rows and
//    wherever nothing was copied.
// 6: sp (--sp: sequence parallelism over the tp ranks, 0 or 1), before knobs. Older rows read as sp 0.
// 7: no new column: the fused attention on fp32 data runs the blocked GEMMs by default
//    (MEMOPT_ATTN_FUSED32, kernels/attention_fused_gemm.h). Older gpt rows with --attn fused in fp32 or
//    tf32 ran the flash kernels: they read with MEMOPT_ATTN_FUSED32=own in their knobs (unless set).
#define MO_CSV_SCHEMA_VERSION 7
#define MO_CSV_SCHEMA_OLDEST 1

typedef struct mo_csv_row {
    int64_t schema_version;        // MO_CSV_SCHEMA_VERSION
    char utc_time[32];             // "2026-12-02T10:00:00Z"
    char git_rev[48];
    char backend[8];               // cuda | cpu | dry
    char device_name[128];
    int64_t device_mem_bytes;
    char driver[32];
    char cuda_runtime[32];
    char model[32];                // "gpt" (models/model.h)
    int64_t layers, hidden, heads, seq, batch, micro_batch, vocab, params; // GPT's; empty for other models

    char precision[8];
    char attn[16];
    char ckpt[24];                 // "every:4"
    int64_t accum, tp, pp;
    char comm[8];
    int64_t cap_bytes;             // 0: no cap
    char alloc[16];
    char status[16];               // ok | oom | fallback | invalid | error
    char detail[1024];             // why, for anything but ok
    int64_t steps;
    double step_ms, step_ms_p10, step_ms_p90;
    double tokens_per_s, model_tflops, hw_tflops, mfu;
    double recompute_ms, recompute_overhead;
    int64_t peak_allocated_bytes, peak_reserved_bytes, static_bytes, activation_peak_bytes;
    int64_t param_bytes, grad_bytes, optim_bytes, master_bytes, activation_bytes, workspace_bytes;
    int64_t num_ooms, num_alloc_retries, skipped_steps;
    double loss_scale, loss_first, loss_last;
    int64_t predicted_peak_bytes;
    double comm_ms;
    int64_t comm_modelled;         // 1: comm_ms is modelled, not measured; 0 measured
    // Fragmentation (torch.cuda.memory_stats' inactive_split_bytes, largest free block, segment count),
    // at the end of the last step, the model still allocated (schema 2).
    int64_t inactive_split_bytes, largest_free_block_bytes, segments;

    // Not a column: the run ran out of memory before its first step (the parameters, gradients,
    // optimizer state and full-batch inputs alone exceed the cap), so no micro-batch can fit.
    int oom_before_step;
    // Not a column: the busiest rank's communicated bytes per timed step (split and dp runs; -1 none).
    // The communicator counts every op's ring volume per rank (mo_comm_op_bytes) on every backend, dry
    // included, so a dry run gives the planner the exact volume its link time is taken from.
    int64_t comm_bytes_rank;

    // schema 2: the model's dimensions and rate
    char dims[128];                // the model's own dimension text, "L12 C768 H12 T1024 V50304"
    double items_per_s;            // the model's items (tokens for gpt) per second
    char knobs[320];               // the MEMOPT_* knobs set (kernels/knobs.h): "NAME=value;NAME=value", "" none
    int64_t dp, zero;              // schema 3: data-parallel ranks (1: none) and the ZeRO level 0..3
    char offload[16];              // schema 4: none | optimizer | activations (schema 5)
    int64_t host_bytes;            // schema 4: peak bytes of the host allocator (offloaded state and staging)
    double offload_copy_ms;        // schema 5: --offload activations, the copies' busy time a step
    double offload_stall_ms;       // schema 5: the time compute waited for them a step (overlap 1 - stall / copy)
    int64_t sp;                    // schema 6: sequence parallelism over the tp ranks (--sp), 0 or 1
} mo_csv_row;

// Every field unknown, schema_version set.
void mo_csv_row_init(mo_csv_row *row);
// The configuration columns (backend .. alloc, micro_batch) from one combination; cap_bytes is
// the resolved cap (mo_cap_resolve against the device's total). Everything else stays unknown.
void mo_csv_row_from_config(mo_csv_row *row, const mo_run_config *rc, uint64_t cap_bytes);

// The header line, without the newline: the column names in order, comma-separated.
const char *mo_csv_header(void);
size_t mo_csv_num_columns(void);

// Writer. Opens FILE for append; a new or empty file gets the header. An existing file must have
// exactly this header (else MO_ERR_INVALID, nothing written); a torn last line (a run interrupted
// while writing) is cut off. Each row is one write(2) followed by fsync(2). Writers of one file,
// in any process, take turns under flock(2), so the header is written once and rows never
// interleave; a row whose write fails (full disk) is cut off again, and the status says why.
typedef struct mo_csv_writer mo_csv_writer;
mo_status mo_csv_open(const char *path, mo_csv_writer **out);
// Bytes of a torn last line (or a torn header) mo_csv_open cut off; 0 when the file was whole.
size_t mo_csv_repaired_bytes(const mo_csv_writer *w);
mo_status mo_csv_append(mo_csv_writer *w, const mo_csv_row *row);
void mo_csv_close(mo_csv_writer *w);
// One row as CSV text (RFC 4180 quoting), with the trailing newline; MO_ERR_INVALID if n is short.
mo_status mo_csv_format_row(const mo_csv_row *row, char *buf, size_t n);

// Creates dir and its parents (mkdir -p); flag names the flag in the message.
mo_status mo_mkdir_p(const char *dir, const char *flag);
// Creates the folder a file will be written into (nothing for a bare name).
mo_status mo_mkdir_parent(const char *path, const char *flag);

// Reader. Columns are found by header name (any order; a missing column reads as unknown, an
// unknown column is an error). Every row's schema_version must be MO_CSV_SCHEMA_OLDEST ..
// MO_CSV_SCHEMA_VERSION. A schema 1 row (always a gpt one) is read as close to schema 2 as its columns
// allow: its dims and items_per_s come from its GPT columns and tokens_per_s; its activation_peak_bytes
// becomes min(activation_peak_bytes - 32 MiB, activation_bytes), the 32 MiB being the cuBLASLt
// workspace every schema 1 run held throughout. That is an upper bound of the schema 2 figure, equal
// to it when the activations peak with the whole (28 of the 32 rows of the dry baseline; the sqrt rows,
// whose op scratch is live at the peak, are 60-340 MiB above). Its fragmentation cells are unknown.
// A gpt row of either version without dims (schema 2 files from before dims, like results/baseline-dry.csv)
// gets them from its GPT columns too, so that its configuration key matches today's.
// *rows is malloc'ed (free it); *n may be 0.
mo_status mo_csv_read(const char *path, mo_csv_row **rows, size_t *n);

// A string naming the configuration of a row (backend, model and its dims text, the GPT columns, precision, attn, ckpt,
// accum, tp, pp, comm, cap_bytes, alloc, knobs; dp and zero, offload, sp where not their defaults): rows with equal
// keys are the same experiment, for sweep --resume and compare. Device, times and results are not part of it.
const char *mo_csv_config_key(const mo_csv_row *row, char *buf, size_t n);

// A row index with its configuration key, for sorting rows by key (ties by index: row order kept)
// and binary searches over them (compare, plot, derive).
#define MO_CSV_KEY_MAX 1024
typedef struct mo_csv_keyed {
    char key[MO_CSV_KEY_MAX];
    size_t index;
} mo_csv_keyed;
int mo_csv_keyed_cmp(const void *a, const void *b); // qsort/bsearch order of mo_csv_keyed

#ifdef __cplusplus
}
#endif

#endif
