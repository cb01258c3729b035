#!/usr/bin/env bash
# CI's memory regression check: the dry-backend grid of bench/make_baseline.sh, regenerated now,
# against the committed results/baseline-dry.csv, through `memopt compare` (exit 0 required). Dry
# peaks are exact and deterministic, so any difference is a change in the model or the allocator.
# Also the compare command's contract on planted files: exit 1 on a regression, 0 otherwise,
# --format md, exit 2 on a bad file.
# Usage: cli_baseline.sh path/to/memopt source-dir
set -u
M="${1:?usage: cli_baseline.sh path/to/memopt source-dir}"
SRC="${2:?usage: cli_baseline.sh path/to/memopt source-dir}"
case "$M" in /*) ;; *) M="$(cd "$(dirname "$M")" && pwd)/$(basename "$M")" ;; esac
base="$SRC/results/baseline-dry.csv"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

regen="bash bench/make_baseline.sh"
if [ ! -f "$base" ]; then
  echo "FAIL: $base is missing: generate it with '$regen' (from the source tree) and commit it with results/baseline-dry.md"
  exit 1
fi

# 1. The grid now against the committed baseline.
if ! bash "$SRC/bench/make_baseline.sh" "$M" "$tmp/now.csv" >"$tmp/gen.out" 2>&1; then
  bad "bench/make_baseline.sh could not regenerate the grid:"; sed 's/^/    /' "$tmp/gen.out"
fi
"$M" compare "$base" "$tmp/now.csv" >"$tmp/cmp.out" 2>"$tmp/cmp.err"
rc=$?
if [ "$rc" -eq 0 ]; then
  ok
else
  bad "the dry-backend memory of the baseline grid differs from results/baseline-dry.csv (memopt compare exit $rc):"
  grep -v '^  same ' "$tmp/cmp.out" | sed 's/^/    /'
  sed 's/^/    /' "$tmp/cmp.err"
  echo "    If the model's memory changed on purpose, regenerate the baseline and commit it with the change:"
  echo "      $regen      (writes results/baseline-dry.csv and results/baseline-dry.md)"
fi
grep -q "^verdict: no regression" "$tmp/cmp.out" && ok || bad "compare printed no 'verdict: no regression' line"
# Every row matched and the same: rows that do not pair (a configuration key that changed) would pass
# compare as missing + new without comparing anything.
rows=$(grep -c '^[0-9]' "$base")
grep -q "^summary: $rows configurations: $rows same, " "$tmp/cmp.out" && ok ||
  bad "the regenerated grid does not pair row for row with the baseline ($rows rows): $(grep '^summary' "$tmp/cmp.out")"

# 2. compare's contract on planted changes (small files cut from the baseline).
head -5 "$base" >"$tmp/b.csv"
"$M" compare "$tmp/b.csv" "$tmp/b.csv" >"$tmp/o" 2>"$tmp/e" && ok || bad "an identical file is not 'no regression'"
# +5% peak allocated on the first row: a memory regression, exit 1, one stderr line.
awk -F, 'BEGIN{OFS=","} NR==1{for(i=1;i<=NF;i++) if($i=="peak_allocated_bytes") c=i; print; next}
         NR==2{$c=sprintf("%.0f", $c * 1.05)} {print}' "$tmp/b.csv" >"$tmp/more.csv"
"$M" compare "$tmp/b.csv" "$tmp/more.csv" >"$tmp/o" 2>"$tmp/e"
rc=$?
[ "$rc" -eq 1 ] && [ "$(wc -l <"$tmp/e")" -eq 1 ] && grep -q "more memory" "$tmp/o" && ok ||
  bad "a planted 5% memory regression: exit $rc (want 1 and one stderr line)"
# The reverse is an improvement: reported, exit 0.
"$M" compare "$tmp/more.csv" "$tmp/b.csv" >"$tmp/o" 2>"$tmp/e" && grep -q "less memory" "$tmp/o" && ok ||
  bad "less memory must be reported and pass"
# A row only in one file: reported, exit 0.
head -4 "$tmp/b.csv" >"$tmp/short.csv"
"$M" compare "$tmp/b.csv" "$tmp/short.csv" >"$tmp/o" 2>"$tmp/e" && grep -q "missing" "$tmp/o" && ok ||
  bad "a missing row must be reported and pass"
"$M" compare "$tmp/short.csv" "$tmp/b.csv" >"$tmp/o" 2>"$tmp/e" && grep -q " new " "$tmp/o" && ok ||
  bad "a new row must be reported and pass"
# Markdown for a CI summary.
"$M" compare "$tmp/b.csv" "$tmp/more.csv" --format md >"$tmp/o" 2>/dev/null
grep -q '^| verdict | configuration' "$tmp/o" && grep -q '^| \*\*more memory\*\*' "$tmp/o" && ok || bad "--format md table"
# Bad input: exit 2, one line naming the argument.
"$M" compare "$tmp/no-such.csv" "$tmp/b.csv" >"$tmp/o" 2>"$tmp/e"
rc=$?
[ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/e")" -eq 1 ] && grep -q "BASE" "$tmp/e" && ok || bad "a missing BASE file: exit $rc (want 2)"
echo "not,a,results,file" >"$tmp/junk.csv"
"$M" compare "$tmp/b.csv" "$tmp/junk.csv" >"$tmp/o" 2>"$tmp/e"
rc=$?
[ "$rc" -eq 2 ] && grep -q "NEW" "$tmp/e" && ok || bad "a non-results NEW file: exit $rc (want 2)"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
