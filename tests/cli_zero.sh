#!/usr/bin/env bash
# --dp and --zero through the memopt binary: bad input exits 2 with one line naming the flag; a dry
# run records dp and zero in its CSV row and its per-rank static bytes fall with the level; the sweep
# takes them as axes (an invalid combination is a row, not an exit); plan accepts them.
# Usage: cli_zero.sh path/to/memopt [source dir]
set -u
M="${1:?usage: cli_zero.sh path/to/memopt}"
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
S="--preset gpt2-124m --layers 2 --batch 8 --seq 64 --backend dry --steps 1 --warmup 0"

bad() {
  local want="$1"
  shift
  "$M" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? lines
  lines=$(wc -l <"$tmp/err")
  if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && grep -qF -- "$want" "$tmp/err"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: memopt $*: exit $rc, $lines stderr lines, want exit 2 and one line with '$want':"
    sed 's/^/    /' "$tmp/err"
  fi
}

bad "--zero" run $S --dp 2 --zero 5
bad "--zero" run $S --dp 2 --zero -1
bad "--zero" run $S --dp 2 --zero x
bad "--dp 3" run $S --dp 3
bad "--dp 4" run $S --dp 4 --accum 4
bad "--zero 2" run $S --zero 2
bad "--dp" run $S --dp 0
bad "--dp 2 with --tp 2" run $S --dp 2 --tp 2
bad "--dp" run --model mlp --preset mlp-small --backend dry --dp 2

# A dry run per level: exit 0, dp and zero in the row, static bytes falling with the level.
prev=""
for z in 0 1 2 3; do
  if ! "$M" run $S --dp 4 --zero "$z" --precision bf16 --csv "$tmp/z.csv" >"$tmp/out" 2>"$tmp/err"; then
    fail=$((fail + 1)); echo "FAIL: run --dp 4 --zero $z:"; cat "$tmp/err"; continue
  fi
  pass=$((pass + 1))
done
# columns by name: dp, zero, static_bytes, status
read -r got <<<"$(awk -F, 'NR==1{for(i=1;i<=NF;i++)c[$i]=i; next}{printf "%s:%s:%s:%s ", $c["dp"], $c["zero"], $c["status"], $c["static_bytes"]}' "$tmp/z.csv")"
set -- $got
ok=1
last=""
k=0
for row in "$@"; do
  IFS=: read -r dp zero status st <<<"$row"
  if [ "$dp" != 4 ] || [ "$zero" != "$k" ] || [ "$status" != ok ]; then ok=0; fi
  if [ -n "$last" ] && [ "$st" -ge "$last" ]; then ok=0; fi
  last="$st"
  k=$((k + 1))
done
if [ "$ok" -eq 1 ] && [ "$k" -eq 4 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: CSV rows dp:zero:status:static = $got"; fi

# The sweep: dp and zero as axes; --zero 1 at --dp 1 is an invalid row, the sweep exits 0.
if "$M" sweep $S --dp 1,2 --zero 0,1 --csv "$tmp/s.csv" >"$tmp/out" 2>"$tmp/err"; then
  rows=$(tail -n +2 "$tmp/s.csv" | wc -l)
  inval=$(grep -c ',invalid,' "$tmp/s.csv")
  if [ "$rows" -eq 4 ] && [ "$inval" -eq 1 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: sweep rows $rows, invalid $inval (want 4, 1)"; fi
else
  fail=$((fail + 1)); echo "FAIL: sweep --dp 1,2 --zero 0,1:"; cat "$tmp/err"
fi

# plan: a data-parallel configuration is planned (its dry peak).
if "$M" plan --preset gpt2-124m --layers 2 --batch 8 --seq 64 --dp 2 --zero 3 --device-mem 80GiB >"$tmp/out" 2>"$tmp/err"; then
  pass=$((pass + 1))
else
  fail=$((fail + 1)); echo "FAIL: plan --dp 2 --zero 3:"; cat "$tmp/err"
fi

echo "cli_zero: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
