#!/usr/bin/env bash
# MEMOPT_ATTN_IMPL=own|cudnn through the memopt binary (kernels/attention_cudnn.h): under cudnn a 16-bit fused
# GPT run gives the same allocation trace on dry and cpu (the dry backend accounts what the cudnn path
# allocates), differs from the own path's trace only in the attention backward's scratch (the (B, NH, T)
# D becomes the (B, NH, T, HS) fp32 dQ accumulator plus the (B, NH, T) softmax_sum), records the knob in the
# row, and trains to the own path's losses on cpu (the same references); own is the unset trace; fp32
# ignores the knob; seq not a multiple of 128 and an unknown value fail with the reason.
# Usage: cli_attn_impl.sh path/to/memopt [source dir]
set -u
M="${1:?usage: cli_attn_impl.sh path/to/memopt [source dir]}"
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass + 1)); }
no() { fail=$((fail + 1)); echo "FAIL: $*"; }
unset MEMOPT_ATTN_IMPL
B=2 T=128 C=64 H=2
DIMS=(--layers 2 --hidden $C --heads $H --seq $T --batch $B --vocab 64 --steps 2 --warmup 1 --attn fused)
col() { awk -F, -v n="$2" 'NR==1 { for (i=1;i<=NF;i++) if ($i==n) c=i } NR==2 { print $c }' "$1"; }

for p in bf16 fp16; do
  for be in dry cpu; do
    for impl in unset own cudnn; do
      env_=(); [ $impl = unset ] || env_=(MEMOPT_ATTN_IMPL=$impl)
      env "${env_[@]}" "$M" run --backend $be "${DIMS[@]}" --precision $p --trace "$tmp/$p-$be-$impl.trace" \
        --csv "$tmp/$p-$be-$impl.csv" >"$tmp/out" 2>&1 || no "$p $be $impl: exit $? ($(tail -1 "$tmp/out"))"
    done
  done
  f="$tmp/$p-cpu-cudnn.trace"
  cmp -s <(tail -n +2 "$tmp/$p-dry-cudnn.trace") <(tail -n +2 "$f") && ok || no "$p cudnn: dry and cpu traces differ"
  cmp -s <(tail -n +2 "$tmp/$p-dry-own.trace") <(tail -n +2 "$tmp/$p-dry-unset.trace") && ok ||
    no "$p: MEMOPT_ATTN_IMPL=own is not the default's trace"
  # cudnn against own: only the attention backward's scratch rows (and the running totals) differ
  own_b=$((B * H * T * 4)) dnn_b=$(((B * H * T * (C / H) + B * H * T) * 4))
  n_own=$(grep -c ",attention_bwd,backward,alloc,scratch,workspace,$own_b," "$tmp/$p-dry-own.trace")
  n_dnn=$(grep -c ",attention_bwd,backward,alloc,scratch,workspace,$dnn_b," "$tmp/$p-dry-cudnn.trace")
  [ "$n_own" = 2 ] && [ "$n_dnn" = 2 ] && ok || no "$p: backward scratch rows: own $n_own of $own_b B, cudnn $n_dnn of $dnn_b B (want 2 each)"
  strip() { tail -n +3 "$1" | cut -d, -f1-8 | grep -v ',attention_bwd,backward,[a-z]*,scratch,workspace,'; }
  cmp -s <(strip "$tmp/$p-dry-own.trace") <(strip "$tmp/$p-dry-cudnn.trace") && ok || no "$p: cudnn changes more than the scratch"
  # the dry peak moves by at most the scratch difference, never down
  po=$(col "$tmp/$p-dry-own.csv" peak_allocated_bytes) pd=$(col "$tmp/$p-dry-cudnn.csv" peak_allocated_bytes)
  [ -n "$po" ] && [ "$pd" -ge "$po" ] && [ $((pd - po)) -le $((dnn_b - own_b + 512)) ] && ok || no "$p: peaks own $po cudnn $pd"
  [ "$(col "$tmp/$p-cpu-cudnn.csv" peak_allocated_bytes)" = "$pd" ] && ok || no "$p: cpu peak differs from dry under cudnn"
  [ "$(col "$tmp/$p-cpu-cudnn.csv" knobs)" = "MEMOPT_ATTN_IMPL=cudnn" ] && ok || no "$p: knobs '$(col "$tmp/$p-cpu-cudnn.csv" knobs)'"
  lo=$(col "$tmp/$p-cpu-own.csv" loss_last) ld=$(col "$tmp/$p-cpu-cudnn.csv" loss_last)
  [ -n "$lo" ] && [ "$ld" = "$lo" ] && ok || no "$p: cpu loss_last under cudnn $ld, own $lo"
done

# fp32 ignores the knob (cuDNN's SDPA has no fp32): the same trace
for impl in own cudnn; do
  MEMOPT_ATTN_IMPL=$impl "$M" run --backend dry "${DIMS[@]}" --trace "$tmp/f32-$impl.trace" >/dev/null 2>&1 || no "fp32 $impl failed"
done
cmp -s <(tail -n +2 "$tmp/f32-own.trace") <(tail -n +2 "$tmp/f32-cudnn.trace") && ok || no "fp32: the knob changed the trace"

# refusals: seq 64 under cudnn; an unknown value
MEMOPT_ATTN_IMPL=cudnn "$M" run --backend dry --layers 1 --hidden 64 --heads 2 --seq 64 --batch 2 --vocab 64 --steps 1 \
  --warmup 0 --attn fused --precision bf16 >"$tmp/o64" 2>&1 && no "seq 64 under cudnn ran" || ok
grep -q 'not a multiple of 128' "$tmp/o64" && ok || no "seq 64: no reason: $(tail -2 "$tmp/o64")"
MEMOPT_ATTN_IMPL=cuDNN "$M" run --backend dry "${DIMS[@]}" --precision bf16 >"$tmp/obad" 2>&1 && no "MEMOPT_ATTN_IMPL=cuDNN ran" || ok
grep -q 'MEMOPT_ATTN_IMPL=cuDNN: expected own or cudnn' "$tmp/obad" && ok || no "unknown value: $(tail -2 "$tmp/obad")"

echo "cli_attn_impl: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
