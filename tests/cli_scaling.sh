#!/usr/bin/env bash
# Hang detectors, not speed targets: inputs at the sizes memopt allows finish in seconds where a
# quadratic loop took minutes (issue 21 defect 7). Each runs under a limit about 10x its time on
# a 2-core machine; the figures before the fix are in the issue's closing note.
#   compare of 100k rows of one repeated key     (before: 16k rows 7 s, 250k never finished)
#   plot's data files from 100k distinct rows     (before: 16k 2.2 s, 250k over 60 s)
#   a sweep of the allowed maximum, 100,000 combinations, on dry (before: no row in 580 s,
#   stuck in Google Benchmark's registration); --benchmark_ flags past 4096 refused with the count
#   plan of L1000 C65536 H512 T65536 B64          (before: 196 s, printing nothing)
# Usage: cli_scaling.sh path/to/memopt [source dir]
set -u
M=$(realpath "${1:?usage: cli_scaling.sh path/to/memopt}")
SRC=$(realpath "${2:-$(dirname "$0")/..}")
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
check() { local what="$1"; shift; if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what"; fi; }
# within LABEL SECONDS CMD...: CMD exits 0 before SECONDS
within() {
  local label="$1" s="$2" rc t0 t1
  shift 2
  t0=$(date +%s)
  timeout "$s" "$@" >out.txt 2>err.txt
  rc=$?
  t1=$(date +%s)
  echo "  $label: exit $rc in $((t1 - t0)) s (limit $s s)"
  [ "$rc" -eq 0 ]
}

"$M" sweep --backend cpu --layers 2 --hidden 32 --heads 2 --seq 16 --batch 4 --vocab 64 --ckpt none,full --steps 2 \
  --warmup 1 --csv two.csv >/dev/null 2>&1 || { echo "FAIL: the seed sweep"; exit 1; }
# 100k copies of one row (compare: every key repeated)
{ head -1 two.csv; yes "$(sed -n 2p two.csv)" | head -100000; } >rep.csv
check "compare of 100k rows of one key" within compare 60 "$M" compare rep.csv rep.csv
check "compare of 100k rows counts 99999 duplicates" grep -q '99999 duplicate keys in BASE' out.txt
# 100k distinct rows (plot: every key its own): seq, peak and throughput varied by awk (no quoted commas in these rows)
{ head -1 two.csv; awk -F, -v OFS=, 'NR == 2 { for (i = 1; i <= 100000; i++) { $13 = i % 60000 + 1; $12 = 1 + int(i / 60000);
    $39 = 1000000 + (i * 7919) % 100003; $33 = 5000 + (i * 104729) % 7777; $25 = (i % 4) * 1048576; print } }' two.csv; } >var.csv
mkdir bin && printf '#!/bin/sh\nexit 0\n' >bin/gnuplot && chmod +x bin/gnuplot # the data files are the C side's work
check "plot's data files from 100k distinct rows" within plot 60 env PATH="$tmp/bin:$PATH" MEMOPT_PLOT_SCRIPTS="$SRC/plots" \
  "$M" plot var.csv --out-dir figs
check "plot wrote 100k cells to fits_by_cap.dat" [ "$(grep -vc '^#' figs/fits_by_cap.dat)" -eq 100000 ]
# the allowed maximum of combinations
L=$(seq -s, 1 25) S=$(seq -s, 8 8 200) B=$(seq -s, 1 20)
check "a sweep of 100,000 combinations on dry" within sweep 120 "$M" sweep --backend dry --heads 4 --vocab 128 \
  --hidden 64,128,192,256,320,384,448,512 --layers "$L" --seq "$S" --batch "$B" --steps 1 --warmup 0
check "the 100,000-combination sweep wrote every row" grep -q '100000 rows: 100000 ok' out.txt
check "and said it times them by the plain loop" grep -q 'timed by the plain loop' out.txt
"$M" sweep --backend dry --heads 4 --vocab 128 --hidden 64,128,192,256,320,384,448,512 --layers "$L" --seq "$S" \
  --batch "$B" --steps 1 --warmup 0 --benchmark_repetitions=2 >out.txt 2>err.txt
rc=$?
check "--benchmark_ flags with 100,000 configurations: exit $rc, want 2 with the count: $(cat err.txt)" \
  bash -c "[ $rc -eq 2 ] && grep -q '100000 configurations to run' err.txt && grep -q -- '--shard i/n, n >= 25' err.txt"

# a plan of a huge shape: hundreds of dry runs of a thousand layers (before: 196 s, the allocator's
# sorted free list and a pointer hash that piled 2 MiB-aligned addresses into a few slots)
check "plan of L1000 C65536 H512 T65536 B64" within plan 120 "$M" plan --layers 1000 --hidden 65536 --heads 512 --seq 65536 --batch 64
check "the plan finished its report" grep -q 'planned in .* dry runs' out.txt

echo "cli_scaling: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
