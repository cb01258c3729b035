#!/usr/bin/env bash
# memopt on --model resnet from the command line: bad input exits 2 with one line naming the flag (an
# unknown preset, a depth that is no ResNet's, an image too small, a strategy it cannot take; an unknown
# MEMOPT_CONV_GEMM value, naming the variable and the values it takes); the dry
# backend plans ResNet-50 (plan, mincap, --on-oom shrink's fallback row); a cpu sweep of the tiny ResNet
# writes rows whose dry peaks plan --validate finds exact.
# Usage: cli_resnet.sh path/to/memopt [source dir]
set -u
M="${1:?usage: cli_resnet.sh path/to/memopt [source dir]}"
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass + 1)); }
no() { fail=$((fail + 1)); echo "FAIL: $*"; }
# bad WANT ARGS...: exit 2, one stderr line containing WANT
bad() {
  local want="$1"; shift
  "$M" "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -qF -- "$want" "$tmp/err"; then ok; else
    no "memopt $*: exit $rc, $(wc -l <"$tmp/err") stderr lines, want exit 2 and one line with '$want': $(head -2 "$tmp/err")"; fi
}
R=(--model resnet --backend dry)
bad "--preset: unknown value 'resnet51'" run "${R[@]}" --preset resnet51
bad "--layers 49: not a ResNet depth" run "${R[@]}" --layers 49
bad "--input 31: the image side must be at least 32" run "${R[@]}" --input 31
bad "--ckpt selective: model resnet has no attention" run "${R[@]}" --ckpt selective
bad "--attn: not a flag of model resnet" run "${R[@]}" --attn fused
bad "a ResNet has no attention heads to split over --tp" run "${R[@]}" --tp 2
bad "no pipeline split of its stages is built for --pp" run "${R[@]}" --pp 2
bad "--ckpt segments:17: more than the 16 residual blocks" run "${R[@]}" --ckpt segments:17
MEMOPT_CONV_GEMM=1 "$M" run "${R[@]}" >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -qF "MEMOPT_CONV_GEMM=1: expected auto, all, 1x1 or 0" "$tmp/err" &&
  ok || no "MEMOPT_CONV_GEMM=1: exit $rc, want 2 and one line naming the values: $(head -2 "$tmp/err")"
MEMOPT_CONV_WGRAD_SPLIT=yes "$M" run "${R[@]}" >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -qF "MEMOPT_CONV_WGRAD_SPLIT=yes: expected 0 or 1" "$tmp/err" &&
  ok || no "MEMOPT_CONV_WGRAD_SPLIT=yes: exit $rc, want 2 and one line naming the values: $(head -2 "$tmp/err")"
MEMOPT_CONV_IMPLICIT=yes "$M" run "${R[@]}" >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -qF "MEMOPT_CONV_IMPLICIT=yes: expected 0 or 1" "$tmp/err" &&
  ok || no "MEMOPT_CONV_IMPLICIT=yes: exit $rc, want 2 and one line naming the values: $(head -2 "$tmp/err")"
MEMOPT_DGRAD_ADD=on "$M" run "${R[@]}" >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -qF "MEMOPT_DGRAD_ADD=on: expected 0 or 1" "$tmp/err" &&
  ok || no "MEMOPT_DGRAD_ADD=on: exit $rc, want 2 and one line naming the values: $(head -2 "$tmp/err")"
MEMOPT_RECOMPUTE_TAIL=yes "$M" run "${R[@]}" >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -qF "MEMOPT_RECOMPUTE_TAIL=yes: expected 0 or 1" "$tmp/err" &&
  ok || no "MEMOPT_RECOMPUTE_TAIL=yes: exit $rc, want 2 and one line naming the values: $(head -2 "$tmp/err")"
bad "--ckpt every:17: more than the 16 residual blocks" run "${R[@]}" --ckpt every:17
bad "--heads: not a flag of model resnet" run "${R[@]}" --heads 4

# plan on ResNet-50, batch 128, an H100 of the catalog: rows, a best row, exit 0
"$M" plan --model resnet --preset resnet50 --batch 128 --gpu h100 >"$tmp/plan" 2>&1 && grep -q "best:" "$tmp/plan" && ok ||
  no "plan --model resnet: $(tail -3 "$tmp/plan")"
# mincap finds a smallest cap
"$M" mincap "${R[@]}" --preset resnet50 --batch 64 >"$tmp/mc" 2>&1 && grep -q "smallest cap that trains" "$tmp/mc" && ok ||
  no "mincap: $(tail -2 "$tmp/mc")"
# --on-oom shrink: ResNet-50 batch 128 under 4 GiB falls back to more micro-batches and trains
"$M" run "${R[@]}" --preset resnet50 --batch 128 --cap 4GiB --on-oom shrink --steps 1 --warmup 0 --csv "$tmp/shrink.csv" \
  >"$tmp/sh" 2>&1
grep -q "fallback: requested accum 1" "$tmp/sh" && grep -q ",fallback," "$tmp/shrink.csv" && ok || no "shrink: $(tail -3 "$tmp/sh")"
# a cpu sweep of the tiny ResNet, then plan --validate: every row's dry peak exact
"$M" sweep --model resnet --preset resnet-tiny --backend cpu --precision fp32,bf16 --ckpt none,segments:2 --accum 1,2 \
  --steps 2 --warmup 1 --csv "$tmp/t.csv" >"$tmp/sw" 2>&1 && grep -q "8 rows: 8 ok" "$tmp/sw" && ok || no "sweep: $(tail -2 "$tmp/sw")"
grep -q ",D10 W4 S32 K5," "$tmp/t.csv" && ok || no "dims column: $(head -2 "$tmp/t.csv" | tail -1)"
"$M" plan --validate "$tmp/t.csv" --out-dir "$tmp" >"$tmp/v" 2>&1
grep -q "8 rows compared, 8 exact to the byte" "$tmp/v" && ok || no "plan --validate: $(grep -E 'peak memory|error' "$tmp/v")"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
