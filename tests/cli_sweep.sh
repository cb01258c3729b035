#!/usr/bin/env bash
# memopt sweep, run --cap/--on-oom, mincap and claims through the binary (the Google Benchmark
# path included), on the dry and cpu backends. Each memopt start costs about a second here (it
# loads the CUDA libraries), so the checks share few invocations.
# Usage: cli_sweep.sh path/to/memopt [source dir]
set -u
M="${1:?usage: cli_sweep.sh path/to/memopt [source dir]}"
SRC="${2:-$(dirname "$0")/..}"
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
TINY="--layers 2 --hidden 32 --heads 2 --seq 16 --batch 4 --vocab 64"

ok() { pass=$((pass + 1)); }
no() { fail=$((fail + 1)); echo "FAIL: $*"; [ -f "$tmp/out" ] && sed 's/^/    out: /' "$tmp/out" | tail -20; [ -f "$tmp/err" ] && sed 's/^/    err: /' "$tmp/err" | tail -5; }
# run WANT_RC ARGS...: memopt ARGS exits WANT_RC.
run() {
  local want="$1"
  shift
  "$M" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -eq "$want" ]; then ok; else no "memopt $*: exit $rc, want $want"; fi
}
has() { if grep -qE -- "$2" "$1"; then ok; else no "$1 lacks /$2/"; fi; }
hasnt() { if grep -qE -- "$2" "$1"; then no "$1 has /$2/"; else ok; fi; }
# col FILE NAME: the values of column NAME, one per line (the CSV's text cells hold no commas here
# but for the detail column, which is last of those read and quoted).
col() { python3 -c 'import csv,sys; [print(r[sys.argv[2]]) for r in csv.DictReader(open(sys.argv[1]))]' "$1" "$2"; }
eq() { if [ "$1" = "$2" ]; then ok; else no "$3: got '$1', want '$2'"; fi; }

# ---- a grid file: one flag per line, '#' comments, through Google Benchmark, repetitions
cat >"$tmp/grid.txt" <<EOF
# the grid of the test: 2 x 2 x 2 = 8 combinations
--backend dry          # scalar flags may be in the file too
layers 2               # the leading -- is optional
--hidden=32
--heads 2
--seq 16
--batch 4
--vocab 64
--ckpt none,full
--accum 1,3            # 3 does not divide batch 4: invalid rows, with the reason
--cap none,1MiB        # 1 MiB cannot hold the workspace: oom rows
EOF
run 0 sweep --grid "$tmp/grid.txt" --steps 2 --warmup 1 --csv "$tmp/g.csv" --benchmark_repetitions=2 \
    --benchmark_out="$tmp/g.json" --benchmark_out_format=json
has "$tmp/out" "memopt sweep: 8 combinations"
has "$tmp/out" "8 rows: 2 ok, 0 fallback, 2 oom, 4 invalid, 0 error"
eq "$(col "$tmp/g.csv" status | sort | uniq -c | tr -s ' ' | tr '\n' ';')" " 4 invalid; 2 ok; 2 oom;" "statuses of the grid rows"
eq "$(col "$tmp/g.csv" detail | grep -c 'accum 3: batch 4 is not divisible by 3')" 4 "invalid rows say why"
eq "$(col "$tmp/g.csv" detail | grep -c 'out of memory: tried to allocate')" 2 "oom rows carry the allocator's message"
# one row per configuration although each ran twice; Google Benchmark saw both repetitions
eq "$(($(wc -l <"$tmp/g.csv") - 1))" 8 "rows with --benchmark_repetitions=2"
eq "$(grep -c '"run_type": "iteration"' "$tmp/g.json")" 16 "benchmark runs in the JSON (8 configurations x 2)"
has "$tmp/g.json" '"name": "dry/L2-C32-H2-T16-B4-V64/fp32/materialized/ckpt:full/accum:1/alloc:caching/cap:none'
has "$tmp/g.json" '"peak_allocated_bytes"'
hasnt "$tmp/err" "leak"

# ---- --resume: nothing left to run; the file keeps its 8 rows
run 0 sweep --grid "$tmp/grid.txt" --steps 2 --warmup 1 --csv "$tmp/g.csv" --resume
has "$tmp/out" "8 already in .*: 0 to run"
eq "$(($(wc -l <"$tmp/g.csv") - 1))" 8 "rows after --resume"
run 2 sweep --backend dry $TINY --resume
has "$tmp/err" "^memopt: --resume: needs --csv"

# ---- a run under a tiny cap: exit 1, the oom row written, nothing leaked
run 1 run --backend cpu $TINY --cap 1MiB --steps 2 --warmup 1 --csv "$tmp/oom.csv"
eq "$(col "$tmp/oom.csv" status)" oom "status of the capped run"
has "$tmp/err" "^memopt run: oom: out of memory"
hasnt "$tmp/err" "leak"

# ---- --on-oom shrink: gpt2-124m under 5 GiB fits at accum 4
run 0 run --backend dry --cap 5GiB --on-oom shrink --steps 1 --warmup 1 --csv "$tmp/shrink.csv"
eq "$(col "$tmp/shrink.csv" status),$(col "$tmp/shrink.csv" accum)" "fallback,4" "status and accum after shrinking"
eq "$(col "$tmp/shrink.csv" detail)" "requested accum 1: oom at accum 1 -> oom at accum 2 -> ok at accum 4" "the path"

# ---- mincap: the reported cap trains, one percent less does not
run 0 mincap --backend dry --preset gpt2-124m --steps 1 --warmup 1 --csv "$tmp/mincap.csv"
pct=$(sed -n 's/^smallest cap that trains: \([0-9]*\)% .*/\1/p' "$tmp/out")
has "$tmp/out" "^unconstrained peak: allocated [0-9.]+ GiB, reserved [0-9.]+ GiB"
if [ -n "$pct" ]; then
  ok
  dev=$((143771 << 20)) # the default --device-mem
  at() { echo $((dev / 100 * $1 + dev % 100 * $1 / 100)); }
  run 0 run --backend dry --cap "$(at "$pct")" --steps 1 --warmup 1
  run 1 run --backend dry --cap "$(at $((pct - 1)))" --steps 1 --warmup 1
  has "$tmp/err" "oom: out of memory"
  # the rows: the no-cap run and every probe, the last probe at the answer or one below
  eq "$(col "$tmp/mincap.csv" status | head -1)" ok "mincap's no-cap row"
else
  no "mincap printed no answer"
fi
run 2 mincap --backend dry --cap 0.5
has "$tmp/err" "^memopt: --cap: memopt mincap finds the cap itself"

# ---- claims on the dry backend: memory measured (both claims), times honestly not
# the figure scripts from the source tree, wherever the build folder is
export MEMOPT_PLOT_SCRIPTS="$(cd "$SRC" && pwd)/plots"
run 0 claims --backend dry --steps 1 --warmup 1 --out-dir "$tmp/claims"
has "$tmp/out" "times need a GPU"
has "$tmp/out" "rule: holds when the activation saving .* is within \[40%, 60%\]"
has "$tmp/out" "^  full +[0-9.]+% +[0-9.]+% +n/a "
has "$tmp/out" "^  fp16 vs fp32 +[0-9.]+% +n/a .*time not measured"
has "$tmp/out" "^  bf16 vs tf32 +[0-9.]+% +n/a "
eq "$(($(wc -l <"$tmp/claims/claims.csv") - 1))" 8 "claims.csv rows"
eq "$(($(wc -l <"$tmp/claims/claims_verdicts.csv") - 1))" 8 "claims_verdicts.csv rows"
if command -v gnuplot >/dev/null 2>&1; then
  if [ -s "$tmp/claims/claims.png" ]; then ok; else no "claims.png missing or empty"; fi
else
  has "$tmp/out" "no figure: gnuplot not found"
fi

# ---- --tp/--pp through the engine: the split's loss is the unsplit model's (within fp32 rounding;
# printed to 4 decimals here), communication is modelled on local, the dry prediction is exact
run 0 run --backend cpu $TINY --layers 4 --steps 2 --warmup 1 --accum 2 --csv "$tmp/split.csv"
run 0 run --backend cpu $TINY --layers 4 --steps 2 --warmup 1 --accum 2 --tp 2 --pp 2 --csv "$tmp/split.csv"
has "$tmp/out" "split: tp 2 x pp 2 = 4 ranks \(comm local\)"
has "$tmp/out" "dry-backend prediction of the peak: .* \(exact\)"
eq "$(col "$tmp/split.csv" loss_last | sed -n 1p | cut -c1-8)" "$(col "$tmp/split.csv" loss_last | sed -n 2p | cut -c1-8)" "split loss_last vs unsplit"
eq "$(col "$tmp/split.csv" comm_modelled | sed -n 2p)" 1 "split comm_modelled"
eq "$(col "$tmp/split.csv" status | tr '\n' ' ')" "ok ok " "split rows' status"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
