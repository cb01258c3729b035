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

# Number labels never print over each other: on a dense committed sweep (36 points, clusters at one
# peak), no label starts on the line of another (within 3% of the y axis) and inside that one's text,
# which runs right at about 1.1% of the x axis (ending near 1.15x the largest peak) a character.
"$M" plot "$SRC/results/h100-bench-3837bf5/sweep.csv" --out-dir "$tmp/dense" >"$tmp/out" 2>"$tmp/err" \
  && ok || no "memopt plot of the committed bench sweep failed"
awk -F'"' '!/^#/ { split($3, v, " "); n++; x[n] = v[1]; y[n] = v[2]; t[n] = $4
                    if (v[1] > mx) mx = v[1]; if (v[2] > my) my = v[2] }
  END { bad = 0; labels = 0
        for (i = 1; i <= n; i++) { if (t[i] == "") continue; labels++
          for (j = 1; j <= n; j++) if (j != i && t[j] != "" && x[j] >= x[i] &&
              x[j] - x[i] <= (length(t[i]) + 1) * 0.011 * 1.15 * mx && (y[j] - y[i] <= 0.03 * my && y[i] - y[j] <= 0.03 * my)) {
            print "labels " t[i] " and " t[j] " overprint"; bad = 1 } }
        if (labels < 10) { print "only " labels " labels"; bad = 1 }
        exit bad }' "$tmp/dense/peak_vs_throughput.dat" >"$tmp/err" && ok || no "peak_vs_throughput: overprinting labels"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
