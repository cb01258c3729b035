#!/usr/bin/env bash
# memopt run --model mlp with --tp / --pp from the command line: on cpu and dry the rows are ok, every
# rank's peak (the summary's "rank peaks" line) and the row's peak are equal between dry and cpu, the
# cpu row's dry prediction is exact, the split's loss is the unsplit model's, communication is modelled;
# a split the shape cannot take (tp not dividing 4*hidden, pp above the layers or not dividing them,
# nccl off cuda) exits 2 with one line naming the flag.
# Usage: cli_mlp_split.sh path/to/memopt [source dir]
set -u
M="${1:?usage: cli_mlp_split.sh path/to/memopt [source dir]}"
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass + 1)); }
no() { fail=$((fail + 1)); echo "FAIL: $*"; }
eq() { if [ "$1" == "$2" ]; then ok; else no "$3: '$1' != '$2'"; fi; }
col() { python3 -c 'import csv,sys; [print(r[sys.argv[2]]) for r in csv.DictReader(open(sys.argv[1]))]' "$1" "$2"; }
# bad WANT ARGS...: exit 2, one stderr line containing WANT
bad() {
  local want="$1"; shift
  "$M" "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -qF -- "$want" "$tmp/err"; then ok; else
    no "memopt $*: exit $rc, $(wc -l <"$tmp/err") stderr lines, want exit 2 and one line with '$want': $(head -2 "$tmp/err")"; fi
}
S=(--model mlp --layers 4 --hidden 32 --input 16 --classes 8 --batch 8 --steps 2 --warmup 1)

bad "--tp 3: the block width 4*hidden = 128 is not divisible by it" run "${S[@]}" --backend cpu --tp 3
bad "--tp 8: the block width 4*hidden = 20 is not divisible by it" run "${S[@]}" --backend dry --hidden 5 --tp 8
bad "--pp 8: more stages than the 4 layers" run "${S[@]}" --backend cpu --pp 8
bad "--pp 3: the 4 layers are not divisible by it" run "${S[@]}" --backend dry --pp 3
bad "--comm nccl: needs --backend cuda" run "${S[@]}" --backend cpu --tp 2 --comm nccl
# in a sweep the bad split is an invalid row, the good ones run
"$M" sweep "${S[@]}" --backend dry --tp 1,3,4 --csv "$tmp/sw.csv" >"$tmp/sw" 2>&1 && ok || no "sweep: $(tail -2 "$tmp/sw")"
eq "$(col "$tmp/sw.csv" status | tr '\n' ' ')" "ok invalid ok " "sweep --tp 1,3,4 statuses"

# The unsplit reference, then each split on cpu and on dry.
"$M" run "${S[@]}" --backend cpu --accum 2 --csv "$tmp/ref.csv" >"$tmp/ref" 2>&1 && ok || no "unsplit: $(tail -2 "$tmp/ref")"
ref_loss=$(col "$tmp/ref.csv" loss_last | cut -c1-7)
for split in "--tp 2" "--pp 2" "--tp 4" "--pp 4" "--tp 2 --pp 2" "--tp 2 --pp 2 --precision bf16 --ckpt full" \
  "--tp 4 --precision fp16 --ckpt sqrt" "--pp 2 --precision bf16 --ckpt segments:2"; do
  for be in cpu dry; do
    "$M" run "${S[@]}" --accum 2 $split --backend $be --csv "$tmp/$be.csv" >"$tmp/$be.out" 2>&1 && ok ||
      no "$split $be: exit $?, $(tail -2 "$tmp/$be.out")"
    grep -q "split: tp .* ranks (comm local)" "$tmp/$be.out" && ok || no "$split $be: no split line"
  done
  cpu_ranks=$(grep "rank peaks" "$tmp/cpu.out")
  dry_ranks=$(grep "rank peaks" "$tmp/dry.out")
  [ -n "$cpu_ranks" ] && ok || no "$split: no rank peaks line"
  eq "$dry_ranks" "$cpu_ranks" "$split: per-rank peaks dry vs cpu"
  eq "$(col "$tmp/dry.csv" peak_allocated_bytes | tail -1)" "$(col "$tmp/cpu.csv" peak_allocated_bytes | tail -1)" "$split: row peak dry vs cpu"
  eq "$(col "$tmp/cpu.csv" predicted_peak_bytes | tail -1)" "$(col "$tmp/cpu.csv" peak_allocated_bytes | tail -1)" "$split: cpu row's dry prediction"
  grep -q "dry-backend prediction of the peak: .* (exact)" "$tmp/cpu.out" && ok || no "$split: prediction not exact"
  eq "$(col "$tmp/cpu.csv" tp | tail -1) $(col "$tmp/cpu.csv" pp | tail -1)" \
    "$(echo "$split" | sed -n 's/.*--tp \([0-9]*\).*/\1/p' | grep . || echo 1) $(echo "$split" | sed -n 's/.*--pp \([0-9]*\).*/\1/p' | grep . || echo 1)" "$split: tp/pp columns"
  if ! echo "$split" | grep -q precision; then
    eq "$(col "$tmp/cpu.csv" loss_last | cut -c1-7)" "$ref_loss" "$split: loss_last vs unsplit"
  fi
  eq "$(col "$tmp/cpu.csv" comm_modelled | tail -1)" 1 "$split: comm_modelled"
  rm -f "$tmp/cpu.csv" "$tmp/dry.csv"
done
# tp splits the block width: each of 4 tp ranks holds less than the unsplit model (dry, exact)
"$M" run --model mlp --preset mlp-param --backend dry --steps 1 --warmup 0 --csv "$tmp/p1.csv" >/dev/null 2>&1
"$M" run --model mlp --preset mlp-param --backend dry --steps 1 --warmup 0 --tp 4 --csv "$tmp/p4.csv" >/dev/null 2>&1
p1=$(col "$tmp/p1.csv" static_bytes); p4=$(col "$tmp/p4.csv" static_bytes)
[ -n "$p1" ] && [ -n "$p4" ] && [ "$p4" -lt $((p1 / 3)) ] && ok || no "mlp-param static bytes: unsplit $p1, tp 4 $p4 (want < 1/3)"
# plan models the split's link time from the MLP's own all-reduces (2 per block; none of GPT's tie)
"$M" plan --model mlp --preset mlp-act --tp 2 --pp 2 --gpu h100 >"$tmp/plan" 2>&1 && ok || no "plan: $(tail -2 "$tmp/plan")"
ms=$(sed -n 's/.*split: 4 ranks.*communication \([0-9.]*\) ms.*/\1/p' "$tmp/plan")
python3 -c "import sys; sys.exit(0 if float('${ms:-0}') > 0 else 1)" && ok || no "plan: modelled communication '$ms' ms, want > 0"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
