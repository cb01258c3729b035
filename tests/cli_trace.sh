#!/usr/bin/env bash
# memopt run --trace: the allocation trace of a step. The dry and cpu backends give the same
# timeline (every event, byte for byte, but the comment line naming the backend); the events are
# labelled (op, phase, tensor), the MLP's as the GPT's; the checkpointed step has recompute events; sweep --trace DIR writes
# one file per row; memopt plot draws two traces (when gnuplot is there). The cuda-against-dry check
# is tests/gpu_trace.c (label gpu).
# Usage: cli_trace.sh path/to/memopt [source dir]
set -u
M="${1:?usage: cli_trace.sh path/to/memopt [source dir]}"
SRC="${2:-$(dirname "$0")/..}"
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass + 1)); }
no() { fail=$((fail + 1)); echo "FAIL: $*"; }
DIMS=(--layers 2 --hidden 64 --heads 4 --seq 32 --batch 4 --vocab 256 --steps 2 --warmup 1)

for k in none full selective; do
  for be in dry cpu; do
    "$M" run --backend $be "${DIMS[@]}" --ckpt $k --trace "$tmp/$be-$k.csv" >"$tmp/out" 2>&1 || no "run $be ckpt $k: exit $?"
  done
  if [ -s "$tmp/dry-$k.csv" ] && cmp -s <(tail -n +2 "$tmp/dry-$k.csv") <(tail -n +2 "$tmp/cpu-$k.csv"); then ok
  else no "ckpt $k: the dry and cpu traces differ"; diff <(tail -n +2 "$tmp/dry-$k.csv") <(tail -n +2 "$tmp/cpu-$k.csv") | head -5; fi
done
f="$tmp/cpu-full.csv"
head -1 "$f" | grep -q '^# memopt trace: cpu/' && ok || no "the comment line"
sed -n 2p "$f" | grep -qx 'event,op_index,op,phase,action,tensor,category,bytes,allocated_after,reserved_after' && ok || no "the header"
# Six "live" rows (one per category), then events 1, 2, ... in order.
[ "$(awk -F, 'NR>2 && $5=="live"' "$f" | wc -l)" -eq 6 ] && ok || no "six live rows"
awk -F, 'NR>8 { if ($1 != NR-8) bad=1 } END { exit bad }' "$f" && ok || no "events are not numbered 1, 2, ..."
for p in forward backward recompute; do
  grep -q ",$p,alloc," "$f" && ok || no "no $p allocation in the ckpt full trace"
done
grep -q ",recompute," "$tmp/cpu-none.csv" && no "ckpt none has recompute events" || ok
grep -q ",recompute,alloc,att,activation," "$tmp/cpu-selective.csv" && ok || no "selective: the probabilities are not recomputed"
# Every activation allocation names its tensor and op; allocations and frees balance per tensor name.
awk -F, 'NR>8 && $7=="activation" && $5=="alloc" && ($6=="" || $3=="")' "$f" | grep -q . && no "an unnamed activation" || ok
grep -q ',layernorm_forward,forward,alloc,ln1,activation,' "$f" && ok || no "ln1 is not attributed to layernorm_forward"
# allocated_after: each event moves it by its bytes.
awk -F, 'NR==9 {prev=$9-$8} NR>8 { want = ($5=="alloc") ? prev+$8 : prev-$8; if ($9 != want) bad=1; prev=$9 } END { exit bad }' "$f" \
  && ok || no "allocated_after does not follow the events"
# The step's peak in the trace is the run's peak allocated (the timed steps all peak alike).
"$M" run --backend dry "${DIMS[@]}" --ckpt full --csv "$tmp/row.csv" >/dev/null 2>&1
peak=$(awk -F, 'NR==1 { for (i=1;i<=NF;i++) if ($i=="peak_allocated_bytes") c=i } NR==2 { print $c }' "$tmp/row.csv")
tpeak=$(awk -F, 'NR>2 && $9>m {m=$9} END {print m}' "$tmp/dry-full.csv")
[ "$peak" = "$tpeak" ] && ok || no "trace peak $tpeak, run peak $peak"

# The MLP's trace carries the same labels (models/step_ops.h): dry == cpu, every event after the live
# rows in an op, forward/backward/optimizer phases, and recompute under ckpt full only.
MLP=(--model mlp --preset mlp-small --steps 2 --warmup 1)
for k in none full; do
  for be in dry cpu; do
    "$M" run --backend $be "${MLP[@]}" --ckpt $k --trace "$tmp/mlp-$be-$k.csv" >"$tmp/out" 2>&1 || no "mlp run $be ckpt $k: exit $?"
  done
  if [ -s "$tmp/mlp-dry-$k.csv" ] && cmp -s <(tail -n +2 "$tmp/mlp-dry-$k.csv") <(tail -n +2 "$tmp/mlp-cpu-$k.csv"); then ok
  else no "mlp ckpt $k: the dry and cpu traces differ"; fi
done
f="$tmp/mlp-dry-full.csv"
awk -F, 'NR>8 && $3==""' "$f" | grep -q . && no "mlp: an event without an op" || ok
awk -F, 'NR>8 && $7=="activation" && $5=="alloc" && $6==""' "$f" | grep -q . && no "mlp: an unnamed activation" || ok
for p in forward backward recompute; do
  grep -q ",$p,alloc," "$f" && ok || no "mlp: no $p allocation in the ckpt full trace"
done
grep -q ',optimizer,' "$f" && ok || no "mlp: no optimizer phase"
grep -q ',layernorm_forward,forward,alloc,ln,activation,' "$f" && ok || no "mlp: ln is not attributed to layernorm_forward"
grep -q ',matmul_bwd,backward,alloc,d4,activation,' "$f" && ok || no "mlp: d4 is not attributed to the backward GEMM"
grep -q ',recompute,' "$tmp/mlp-dry-none.csv" && no "mlp ckpt none has recompute events" || ok

"$M" sweep --backend dry "${DIMS[@]}" --ckpt none,full --trace "$tmp/traces" --csv "$tmp/s.csv" >"$tmp/out" 2>&1 || no "sweep --trace"
[ "$(ls "$tmp/traces" | wc -l)" -eq 2 ] && ok || no "sweep --trace DIR: want 2 files"
"$M" run --backend dry --tp 2 "${DIMS[@]}" --trace "$tmp/x.csv" >"$tmp/out" 2>&1
[ $? -eq 2 ] && ok || no "--trace on a split run is refused"

if command -v gnuplot >/dev/null 2>&1; then
  MEMOPT_PLOT_SCRIPTS="$SRC/plots" "$M" plot "$tmp/cpu-none.csv" "$tmp/cpu-full.csv" --out-dir "$tmp/fig" >"$tmp/out" 2>&1 \
    && ok || no "plot of two traces: $(tail -2 "$tmp/out")"
  [ -s "$tmp/fig/timeline.png" ] && [ -s "$tmp/fig/timeline.svg" ] && ok || no "no timeline figure"
  [ "$(awk '$1==2' "$tmp/fig/timeline_phases.dat" | grep -c ' 3$')" -ge 1 ] && ok || no "no recompute phase in the second run's strip"
else
  echo "(gnuplot not installed: the timeline figure is not drawn here)"
fi
"$M" plot "$tmp/cpu-none.csv" "$tmp/s.csv" >"$tmp/out" 2>"$tmp/err"
rc=$?
{ [ $rc -eq 2 ] || [ $rc -eq 1 ]; } && ok || no "plot of a trace and a results CSV: exit $rc"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
