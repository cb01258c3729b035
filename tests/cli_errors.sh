#!/usr/bin/env bash
# The memopt binary's bad-input contract: exit code 2 and exactly one line on stderr, naming the
# flag (or the argument) that is wrong. Plus --help, --version and devices exiting 0.
# Usage: cli_errors.sh path/to/memopt [source dir]
set -u
M="${1:?usage: cli_errors.sh path/to/memopt}"
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# bad WANT_SUBSTRING ARGS... : exit 2, one stderr line containing WANT_SUBSTRING, starting "memopt: ".
bad() {
  local want="$1"
  shift
  "$M" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? lines
  lines=$(wc -l <"$tmp/err")
  if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && grep -qF -- "$want" "$tmp/err" && grep -q '^memopt: ' "$tmp/err"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: memopt $*: exit $rc, $lines stderr lines, want exit 2 and one line with '$want':"
    sed 's/^/    /' "$tmp/err"
  fi
}

# good ARGS... : exit 0.
good() {
  "$M" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -eq 0 ]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: memopt $*: exit $rc, want 0"
    sed 's/^/    /' "$tmp/err"
  fi
}

# expect GREP_PATTERN : the last command's stdout contains it.
expect_out() {
  if grep -qE -- "$1" "$tmp/out"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: stdout lacks /$1/:"
    sed 's/^/    /' "$tmp/out"
  fi
}

bad "frobnicate" frobnicate
bad "missing subcommand"
bad "--frobnicate" run --frobnicate 3
bad "--frobnicate" sweep --frobnicate=3
bad "--precision" run --precision fp8
bad "accepted: fp32, tf32, fp16, bf16" run --precision fp8
bad "--batch" run --batch 0
bad "--batch" run --batch abc
bad "--accum 3: batch 8 is not divisible by 3" run --accum 3
bad "--accum 3" run --accum 3 --batch 8
bad "--cap" run --cap 2.0
bad "--cap" run --cap 12XB
bad "--ckpt" run --ckpt every:0
bad "--ckpt every:13" run --ckpt every:13
bad "--ckpt" run --ckpt segments:0
bad "--ckpt segments:13: N must be in 1..layers (layers 12)" run --ckpt segments:13
bad "--ckpt segments:5: N must be in 1..layers (layers 4)" run --model mlp --layers 4 --ckpt segments:5
bad "--heads 7" run --heads 7 --hidden 768
bad "--batch" run --batch
bad "--csv" run --csv
bad "--steps" run --steps --batch 4
bad "--precision" run --precision fp32,bf16
bad "--precision" sweep --precision fp32,fp8
bad "--batch" sweep --batch 4,,8
bad "--tp 5" run --tp 5
bad "--pp 5" run --pp 5
bad "--comm nccl" run --comm nccl --backend cpu
bad "--profile: not available on split runs" run --backend dry --tp 2 --profile
bad "--attn fused: the 16-bit kernel needs a head size that is a multiple of 8" run --backend dry --heads 64 --precision bf16 --attn fused
bad "--gpu" run --gpu h200
bad "--resume" sweep --resume=yes
bad "--grid" sweep --grid "$tmp/no-such-grid"
bad "stray" run stray
bad "--model: unknown value 'nosuch' (accepted: gpt, mlp, resnet)" run --model nosuch --backend dry
bad "compare" compare only-one.csv
bad "--tolerance" compare a.csv b.csv --tolerance 2
bad "plot" plot
bad "--versio" --versio

good --help
expect_out "^usage: memopt <command>"
for word in run sweep claims plan mincap compare plot devices --preset --cap --alloc --ckpt --accum \
            --precision --tp --pp --comm --on-oom --backend --steps --warmup --seed --csv --monitor --lr \
            --device-mem --out-dir --grid --resume --gpu --mem --tolerance --attn --layers --hidden \
            --heads --seq --batch --vocab --model; do
  expect_out "(^| )$word( |$)"
done
good run --help
expect_out "^usage: memopt"
# Per-command help: the command's own flags, each group once; a flag the command does not use exits 2.
good plan --help
expect_out "^usage: memopt plan"
expect_out "--validate"
if grep -qE -- "--steps|--monitor|--resume|--tolerance|sweep flags" "$tmp/out" || [ "$(grep -c '^plan flags' "$tmp/out")" -ne 1 ]; then
  fail=$((fail + 1)); echo "FAIL: plan --help lists flags plan does not take, or a group twice"; else pass=$((pass + 1)); fi
good compare --help
expect_out "--tolerance"
bad "--steps: not a flag of memopt plan" plan --steps 5
bad "--monitor: not a flag of memopt plan" plan --monitor 3
bad "--out-dir: not a flag of memopt run" run --backend dry --out-dir x
bad "--profile: not a flag of memopt sweep" sweep --backend dry --profile
bad "--on-oom: not a flag of memopt mincap" mincap --backend dry --on-oom shrink
# plan --csv writes the ranked table; output folders are created.
good plan --csv "$tmp/new/deeper/plan.csv"
if [ "$(head -1 "$tmp/new/deeper/plan.csv" | cut -d, -f1-3)" = "rank,layers,hidden" ] && [ "$(wc -l <"$tmp/new/deeper/plan.csv")" -gt 10 ]; then
  pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: plan --csv wrote no ranked table"; fi
good run --backend dry --steps 1 --warmup 0 --csv "$tmp/made/here/run.csv"
[ -s "$tmp/made/here/run.csv" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: run --csv did not create its folder"; }
good --version
expect_out "^memopt [0-9]"
good devices
expect_out "^libraries: "
expect_out "^(GPU [0-9]+: |no CUDA device: )"

# A valid configuration gets past validation to its hook (the engine, or "not implemented yet").
"$M" sweep --precision fp32,bf16 --accum 1,3 --backend dry --steps 1 >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -ne 2 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: a sweep with some valid combinations was refused:"; cat "$tmp/err"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
