#!/usr/bin/env bash
# --sp (sequence parallelism over the tp ranks) through the memopt binary: bad input exits 2 with one
# line naming --sp; a dry run records sp 1 in its CSV row with a lower per-rank peak than sp 0, and a
# cpu run of the same shape the same peak; the rank peaks in the summary fall too; the sweep takes
# --sp as an axis (an invalid combination is a row, not an exit); plan accepts it with --tp.
# Usage: cli_sp.sh path/to/memopt [source dir]
set -u
M="${1:?usage: cli_sp.sh path/to/memopt}"
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
S="--preset gpt2-124m --layers 2 --batch 4 --seq 64 --vocab 512 --backend dry --steps 1 --warmup 0"

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

bad "--sp 1 with --tp 1" run $S --sp 1
bad "--sp 1 with --tp 1" run $S --sp 1 --pp 2
bad "--sp 1 with --tp 1" run $S --sp 1 --dp 2
bad "--sp 1: seq 62 is not divisible by --tp 4" run $S --tp 4 --seq 62 --sp 1
bad "--sp 1: model mlp" run --model mlp --preset mlp-small --backend dry --tp 2 --sp 1
bad "--sp" run $S --tp 2 --sp 2
bad "--sp" run $S --tp 2 --sp yes
bad "--sp" run $S --tp 2 --sp
bad "--sp" compare --sp 1 a.csv b.csv

# Dry and cpu, sp 0 and 1: exit 0, sp in the row, dry == cpu per configuration, sp 1 lower.
for be in dry cpu; do
  for sp in 0 1; do
    if "$M" run $S --backend "$be" --tp 2 --precision bf16 --sp "$sp" --csv "$tmp/r.csv" >"$tmp/out.$be.$sp" 2>"$tmp/err"; then
      pass=$((pass + 1))
    else
      fail=$((fail + 1)); echo "FAIL: run --backend $be --tp 2 --sp $sp:"; cat "$tmp/err"
    fi
  done
done
awk -F, 'NR==1{for(i=1;i<=NF;i++)c[$i]=i; next}{print $c["backend"], $c["tp"], $c["sp"], $c["status"], $c["peak_allocated_bytes"]}' "$tmp/r.csv" >"$tmp/rows"
check() { if eval "$1"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $2"; cat "$tmp/rows"; fi; }
check '[ "$(wc -l <"$tmp/rows")" -eq 4 ] && ! grep -qv " ok " "$tmp/rows"' "4 ok rows"
read -r _ _ sp0 _ dry0 <<<"$(sed -n 1p "$tmp/rows")"
read -r _ _ sp1 _ dry1 <<<"$(sed -n 2p "$tmp/rows")"
read -r _ _ _ _ cpu0 <<<"$(sed -n 3p "$tmp/rows")"
read -r _ _ _ _ cpu1 <<<"$(sed -n 4p "$tmp/rows")"
check '[ "$sp0" = 0 ] && [ "$sp1" = 1 ]' "the rows record sp 0 and sp 1"
check '[ "$dry1" -lt "$dry0" ]' "the sp 1 peak ($dry1) is below the sp 0 peak ($dry0)"
check '[ "$cpu0" = "$dry0" ] && [ "$cpu1" = "$dry1" ]' "cpu peaks ($cpu0, $cpu1) equal dry ($dry0, $dry1)"
# The summary: sequence parallel named, every rank's peak lower.
r0=$(sed -n 's/.*rank peaks (allocated bytes, rank 0 first): //p' "$tmp/out.dry.0")
r1=$(sed -n 's/.*rank peaks (allocated bytes, rank 0 first): //p' "$tmp/out.dry.1")
lower=1
set -- $r1
for p0 in $r0; do
  if [ -z "${1:-}" ] || [ "$1" -ge "$p0" ]; then lower=0; fi
  shift
done
check '[ -n "$r0" ] && [ "$lower" -eq 1 ] && grep -q "sequence parallel" "$tmp/out.dry.1"' "rank peaks with sp ($r1) each below without ($r0)"

# A compare of the two files keeps sp 0 and sp 1 apart (different configurations).
if "$M" compare "$tmp/r.csv" "$tmp/r.csv" >"$tmp/out" 2>"$tmp/err"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: compare"; cat "$tmp/err"; fi

# The sweep: sp as an axis; --sp 1 at --tp 1 is an invalid row, the sweep exits 0.
if "$M" sweep $S --tp 1,2 --sp 0,1 --csv "$tmp/s.csv" >"$tmp/out" 2>"$tmp/err"; then
  rows=$(tail -n +2 "$tmp/s.csv" | wc -l)
  inval=$(grep -c ',invalid,' "$tmp/s.csv")
  if [ "$rows" -eq 4 ] && [ "$inval" -eq 1 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: sweep rows $rows, invalid $inval (want 4, 1)"; fi
else
  fail=$((fail + 1)); echo "FAIL: sweep --tp 1,2 --sp 0,1:"; cat "$tmp/err"
fi

# plan: a sequence-parallel split is planned (its dry peak per rank) and named.
if "$M" plan --preset gpt2-124m --layers 2 --batch 4 --seq 64 --tp 2 --sp 1 --precision bf16 --device-mem 80GiB >"$tmp/out" 2>"$tmp/err"; then
  if grep -q "accum 1, sp" "$tmp/out"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: plan output does not name sp:"; head -20 "$tmp/out"; fi
else
  fail=$((fail + 1)); echo "FAIL: plan --tp 2 --sp 1:"; cat "$tmp/err"
fi

echo "cli_sp: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
