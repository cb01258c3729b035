#!/usr/bin/env bash
# memopt plot: the four gnuplot figures from a sample CSV (a tiny cpu sweep, so it has times,
# checkpointed rows with their baselines, and an out-of-memory row) are non-empty PNG and SVG
# files; without gnuplot, one line naming gnuplot-nox and exit 1. Skips (77) without gnuplot.
# Usage: cli_plot.sh path/to/memopt [source dir]
set -u
M="${1:?usage: cli_plot.sh path/to/memopt [source dir]}"
SRC="${2:-$(dirname "$0")/..}"
M="$(cd "$(dirname "$M")" && pwd)/$(basename "$M")" # the plot runs from another folder
SRC="$(cd "$SRC" && pwd)"
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass + 1)); }
no() { fail=$((fail + 1)); echo "FAIL: $*"; sed 's/^/    err: /' "$tmp/err" 2>/dev/null | tail -5; }

# No gnuplot on PATH (the binary is called by its path, so it still starts): exit 1, one line.
PATH=/nonexistent "$M" plot "$tmp/none.csv" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "gnuplot-nox" "$tmp/err"; then ok; else no "plot without gnuplot: exit $rc"; fi

if ! command -v gnuplot >/dev/null 2>&1; then
  echo "skipped: gnuplot is not installed (apt-get install gnuplot-nox); $pass passed, $fail failed"
  [ "$fail" -eq 0 ] && exit 77
  exit 1
fi

"$M" plot "$tmp/none.csv" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 2 ] && grep -q "^memopt: memopt plot $tmp/none.csv" "$tmp/err"; then ok; else no "plot of a missing file: exit $rc, want 2"; fi

"$M" sweep --backend cpu --layers 2 --hidden 32 --heads 2 --seq 16 --batch 4 --vocab 64 --ckpt none,full,selective \
    --accum 1,2 --cap none,1MiB --steps 3 --warmup 1 --csv "$tmp/sample.csv" >"$tmp/out" 2>"$tmp/err" \
  && ok || no "the sample sweep failed"

# Run from elsewhere: the scripts are found beside the binary's source tree (or MEMOPT_PLOT_SCRIPTS).
(cd "$tmp" && MEMOPT_PLOT_SCRIPTS="$SRC/plots" "$M" plot sample.csv --out-dir "$tmp/figs") >"$tmp/out" 2>"$tmp/err" \
  && ok || no "memopt plot failed"
for fig in memory_by_category peak_vs_throughput recompute_vs_saving fits_by_cap; do
  f="$tmp/figs/$fig.png"
  if [ -s "$f" ] && [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = "211PNG" ]; then ok; else no "$f: not a PNG"; fi
  if [ -s "$tmp/figs/$fig.svg" ] && grep -q "<svg" "$tmp/figs/$fig.svg"; then ok; else no "$fig.svg missing"; fi
done
# The data behind the figures: derived from the rows (the checkpointed rows have a baseline).
[ "$(grep -vc '^#' "$tmp/figs/recompute_vs_saving.dat")" -eq 4 ] && ok || no "recompute_vs_saving.dat: want 4 checkpointed rows"
[ "$(grep -vc '^#' "$tmp/figs/fits_by_cap.dat")" -eq 12 ] && ok || no "fits_by_cap.dat: want 12 cells"
grep -q ' oom "1.00 MiB' "$tmp/figs/fits_by_cap.dat" && ok || no "fits_by_cap.dat lacks the oom cells"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
