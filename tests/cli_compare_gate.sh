#!/usr/bin/env bash
# memopt compare fails a corrupt NEW file instead of calling every row "same": a step time of
# nan, inf or -5, a missing step_ms or peak column, a negative peak. (Before issue 21 all six
# passed with exit 0, skipping the exact-memory gate silently.)
# Usage: cli_compare_gate.sh path/to/memopt [source dir]
set -u
M=$(realpath "${1:?usage: cli_compare_gate.sh path/to/memopt}")
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1

"$M" sweep --backend cpu --layers 2 --hidden 64 --heads 4 --seq 32 --batch 4 --vocab 128 --steps 3 --warmup 1 \
  --ckpt none,full --csv base.csv >/dev/null 2>&1 || { echo "FAIL: the base sweep"; exit 1; }
# The tiny rows hold no quoted comma: awk may split them on commas.
nf=$(awk -F, '{print NF}' base.csv | sort -u)
if [ "$(echo "$nf" | wc -l)" != 1 ] || [ "$nf" != "$(head -1 base.csv | tr , '\n' | wc -l)" ]; then
  echo "FAIL: base.csv is not one plain field per column on every line"; exit 1
fi
col() { head -1 base.csv | tr , '\n' | grep -nx "$1" | cut -d: -f1; }
STEP=$(col step_ms) PEAK=$(col peak_allocated_bytes)
set_col() { awk -F, -v OFS=, -v c="$1" -v v="$2" 'NR > 1 { $c = v } { print }' base.csv; }
drop_col() { cut -d, -f"$1" --complement base.csv; }

# expect CODE WHAT NEW.csv: compare base.csv NEW.csv exits CODE, and stderr or stdout says WHAT.
expect() {
  local code="$1" what="$2" f="$3" rc
  "$M" compare base.csv "$f" >out.txt 2>err.txt
  rc=$?
  if [ "$rc" -eq "$code" ] && grep -qF -- "$what" out.txt err.txt; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: compare base.csv $f: exit $rc, want $code and '$what':"
    sed 's/^/    /' out.txt err.txt | tail -6
  fi
}

expect 0 "no regression" base.csv
set_col "$STEP" nan >nan.csv;   expect 2 "column step_ms: 'nan' is not a number" nan.csv
set_col "$STEP" inf >inf.csv;   expect 1 "no measurement" inf.csv
set_col "$STEP" -5 >neg.csv;    expect 1 "no measurement" neg.csv
expect 1 "a step time that is not a positive number (-5)" neg.csv
drop_col "$STEP" >nostep.csv;   expect 1 "NEW has no step_ms" nostep.csv
drop_col "$PEAK" >nopeak.csv;   expect 1 "NEW has no peak_allocated_bytes" nopeak.csv
set_col "$PEAK" -12345 >negpeak.csv; expect 2 "column peak_allocated_bytes: '-12345' is negative" negpeak.csv
# the verdict names the regression on the exit-1 line
expect 1 "2 regressions against base.csv (first: no measurement" nostep.csv

echo "cli_compare_gate: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
