// gnuplot figures from results rows: memopt plot (four figures) and memopt claims (its figure).
// The C side writes plain whitespace-separated data files into the output directory and runs the
// scripts of plots/*.gp on them; the scripts draw PNG (pngcairo, else png) and SVG.
#ifndef MEMOPT_BENCH_PLOT_H
#define MEMOPT_BENCH_PLOT_H

#include <stddef.h>
#include <stdio.h>
#include "bench/csv.h"
#include "kernels/status.h"

#ifdef __cplusplus
extern "C" {
#endif

// MO_OK when a gnuplot program is on PATH; else MO_ERR_UNSUPPORTED with the one-line reason,
// naming the package to install (gnuplot-nox).
mo_status mo_plot_check_gnuplot(void);

// The folder holding the scripts: $MEMOPT_PLOT_SCRIPTS, ./plots, or plots/ next to or above the
// memopt binary (the build folder sits inside the source tree). MO_ERR_UNSUPPORTED when none has them.
mo_status mo_plot_scripts_dir(char *buf, size_t n);

// Runs SCRIPT (a file name in the scripts folder) with gnuplot: outdir holds its data files and
// receives its figures; vars is extra gnuplot assignments ("a=1; b='x'") or NULL.
mo_status mo_plot_run(const char *script, const char *outdir, const char *vars);

// memopt plot: the four figures of rows into outdir (created if missing), their names to out.
//   memory_by_category   stacked bars, each category at its own peak, per configuration (GiB)
//   peak_vs_throughput   peak memory against tokens/s, the Pareto frontier marked
//   recompute_vs_saving  time overhead against memory saving (vs ckpt none), the claim marked
//   fits_by_cap          per configuration and cap: trained (ok) or out of memory
mo_status mo_plot_results(const mo_csv_row *rows, size_t n, const char *outdir, FILE *out);

// 1 when path is an allocation trace (memopt run --trace: its first line is "# memopt trace: ...").
int mo_plot_is_trace(const char *path);
// memopt plot TRACE.csv [TRACE2.csv]: the timeline figure (bench/cmd_plot_timeline.c) into outdir.
mo_status mo_plot_timeline(const char *const *paths, int npaths, const char *outdir, FILE *out);

// The figures' second title line: the model (a preset's name when the shape is one) and the device
// of the rows ("GPT gpt2-124m, batch 8 on NVIDIA H200"), or "several ..." when they differ.
void mo_plot_subtitle(const mo_csv_row *rows, size_t n, char *buf, size_t bn);

// Creates dir and its parents (like mkdir -p).
mo_status mo_plot_mkdir(const char *dir);

#ifdef __cplusplus
}
#endif
#endif
