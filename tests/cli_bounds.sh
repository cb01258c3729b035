#!/usr/bin/env bash
# Every flag's boundaries, on every subcommand that takes it (issue 19): 0, negative, huge, 64-bit
# overflow of counts and byte sizes, non-numbers, hex and other strtod spellings, empty values, lists
# where one value is taken, bad lists, an exploding grid. Each must exit 2 with exactly one stderr line
# "memopt: ..." that names the flag. Prints how many were tried per subcommand.
# Usage: cli_bounds.sh path/to/memopt [source dir]
set -u
M="${1:?usage: cli_bounds.sh path/to/memopt}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
declare -A tried

# bad FLAG_TEXT ARGS... : exit 2, one stderr line starting "memopt: " and containing FLAG_TEXT.
bad() {
  local want="$1"
  shift
  local key="${1:-(empty)}"
  tried[$key]=$((${tried[$key]:-0} + 1))
  timeout 60 "$M" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? lines
  lines=$(wc -l <"$tmp/err")
  if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && grep -qF -- "$want" "$tmp/err" && grep -q '^memopt: ' "$tmp/err"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: memopt $*: exit $rc, $lines stderr lines, want exit 2 and one line with '$want':"
    head -5 "$tmp/err" | sed 's/^/    /'
  fi
}

TINY=(--backend dry --layers 2 --hidden 32 --heads 2 --seq 16 --batch 4 --vocab 64 --steps 1 --warmup 0)
HUGE=(99999999999 18446744073709551616 2147483648 4294967296 4294967297 9223372036854775808 99999999999999999999999)
NONNUM=(abc "" 1x " 8" "8 " 0x10 +3 1.5 1e3 - ,)
SIZES=(0 -1 abc "" 1.5.5 18446744073709551616 99999999999999TiB 1e30GiB nan inf NaN 12XB GiB 0x100000 1KiB 1e-9 " 1GiB")
CAPS=(-1 abc "" 1.5.5 18446744073709551616 99999999999999TiB 1e30GiB nan inf -0.5 0.0 1.0000001 2.0 12XB GiB 0x10 0x0.8 " 0.5")
LRS=(0 -1 abc "" 1e-400 1e400 nan inf 11 0x1 " 1e-3" 1e-3x)
ENUMS=("" abc 0 -1 FP32 "fp32 ")
EVERY=(every: every:-1 every:0 every:99999999999 every:1x every:1025 "every: 2" every)
SEEDS=(-1 18446744073709551616 99999999999999999999999 abc "" 1.5 0x10 " 1" +1)
INT0=(-1 "${HUGE[@]}" abc "" 1x 0x10 1.5)
CONFIG_CMDS=(run sweep claims plan mincap)
# A CUDA build's binary took ~0.45 s to start when it linked cuBLAS (loaded on first use since
# kernels/cublas_lazy_cuda.c): there every list is cut to a few values per kind. The parser is the
# same code; the cpu-only build (and make sanitize's) tries them all.
if "$M" --version | grep -q "built with CUDA"; then
  echo "a CUDA build: a few values of each kind (the cpu-only build tries all)"
  HUGE=(18446744073709551616 4294967297)
  NONNUM=(abc "" 0x10 1.5)
  SIZES=(0 abc 18446744073709551616 1e30GiB 0x100000 1KiB)
  CAPS=(-1 abc 18446744073709551616 0.0 2.0 0x10 " 0.5")
  LRS=(0 abc 1e400 nan 0x1)
  ENUMS=("" abc)
  EVERY=(every:0 every:99999999999)
  SEEDS=(-1 18446744073709551616 abc)
  INT0=(-1 18446744073709551616 abc)
  CONFIG_CMDS=(run sweep) # claims, plan and mincap: the few checks after the matrix
fi

# ---- integer flags (1..max)
for cmd in "${CONFIG_CMDS[@]}"; do
  for f in --layers --hidden --heads --seq --batch --vocab --accum --tp --pp --steps; do
    for v in 0 -1 "${HUGE[@]}" "${NONNUM[@]}"; do bad "$f" "$cmd" "$f" "$v"; done
  done
  # integer flags that take 0
  for f in --warmup --monitor; do
    for v in "${INT0[@]}"; do bad "$f" "$cmd" "$f" "$v"; done
  done
  for v in "${SEEDS[@]}"; do bad --seed "$cmd" --seed "$v"; done
  # above each documented limit by one
  bad --layers "$cmd" --layers 1025
  bad --hidden "$cmd" --hidden 65537
  bad --heads "$cmd" --heads 1025
  bad --seq "$cmd" --seq 65537
  bad --batch "$cmd" --batch 65537
  bad --vocab "$cmd" --vocab 2097153
  bad --tp "$cmd" --tp 257
  bad --pp "$cmd" --pp 1025
  bad --steps "$cmd" --steps 1000001
  # sizes and caps
  for v in "${SIZES[@]}"; do bad --device-mem "$cmd" --device-mem "$v"; done
  for v in "${CAPS[@]}"; do bad --cap "$cmd" --cap "$v"; done
  for v in "${LRS[@]}"; do bad --lr "$cmd" --lr "$v"; done
  # enums
  for f in --precision --attn --alloc --ckpt --comm --on-oom --backend --model --preset; do
    for v in "${ENUMS[@]}"; do bad "$f" "$cmd" "$f" "$v"; done
  done
  for v in "${EVERY[@]}"; do bad --ckpt "$cmd" --ckpt "$v"; done
  # paths
  bad --csv "$cmd" --csv ""
  bad --csv "$cmd" --csv "$(printf 'a%.0s' $(seq 1100))"
  bad --out-dir "$cmd" --out-dir ""
  # a flag without its value, a switch with one, flags of another command
  bad --batch "$cmd" --batch
  bad --batch "$cmd" --batch --seq 8
  bad --profile "$cmd" --profile=yes
  bad --tolerance "$cmd" --tolerance 0.1
  bad --format "$cmd" --format md
  bad "unexpected argument" "$cmd" stray
  # the cross-flag rules
  bad "--heads 7" "$cmd" --heads 7 --hidden 768
  # the model's own rules: run refuses them; a sweep records the combination as an invalid row
  [ "$cmd" = run ] && bad "--batch 65536 --seq 65536: a micro-batch" "$cmd" "${TINY[@]}" --batch 65536 --seq 65536
done

# ---- every configuration command, also where the matrix above ran on two of them only
for cmd in run sweep claims plan mincap; do
  bad --batch "$cmd" --batch 0
  bad --layers "$cmd" --layers 18446744073709551616
  bad --cap "$cmd" --cap 0x10
  bad --device-mem "$cmd" --device-mem 1e30GiB
  bad --precision "$cmd" --precision abc
  bad --lr "$cmd" --lr nan
  bad "unexpected argument" "$cmd" stray
  bad "--heads 7" "$cmd" --heads 7 --hidden 768
done

# ---- single-configuration commands: one value, not a list
for cmd in run claims mincap; do
  for f in --precision --batch --ckpt --cap --accum; do bad "$f" "$cmd" "$f" "a,b"; done
done

# ---- sweep and plan: lists
for cmd in sweep plan; do
  for v in "4,,8" "," "4," ",4" "4,4" "$(seq -s, 1 33)" "4,x" "4,-1" "4,0"; do bad --batch "$cmd" --batch "$v"; done
  bad --precision "$cmd" --precision fp32,fp8
  bad --cap "$cmd" --cap none,0x10
  # an explosion: 2^20 combinations, refused with the count
  L=$(seq -s, 1 16)
  bad "1048576 combinations" "$cmd" --batch "$L" --seq "$L" --hidden "$L" --layers "$L" --vocab "$L"
  L=$(seq -s, 1 32)
  bad "combinations (--layers 32 x" "$cmd" --batch "$L" --seq "$L" --hidden "$L" --layers "$L" --vocab "$L" --heads "$L" --tp "$L"
done

# ---- sweep's own flags
for v in "" 1/0 0/0 -1/2 2/2 1/ /2 a/b 1/2/3 99999999999/99999999999 1x/2 0/-1; do
  bad --shard sweep "${TINY[@]}" --shard "$v"
done
# --shard: overflowing and space-led parts are refused (sscanf %d used to overflow and skip leading spaces).
for v in 0/99999999999 4294967297/4294967298 " 0/2"; do
  bad --shard sweep "${TINY[@]}" --shard "$v"
done
bad --resume sweep --resume=yes
bad --grid sweep --grid ""
bad --grid sweep --grid "$tmp/no-such-grid"
bad --grid sweep --grid "$tmp"
bad --grid sweep --grid /dev/zero
printf -- '--batch 0\n' >"$tmp/bad-value.grid"
bad "--grid $tmp/bad-value.grid:1: --batch" sweep --grid "$tmp/bad-value.grid"
printf -- '--frobnicate 3\n' >"$tmp/bad-flag.grid"
bad "--grid $tmp/bad-flag.grid:1: unknown flag '--frobnicate'" sweep --grid "$tmp/bad-flag.grid"
printf -- '--grid other.grid\n' >"$tmp/nested.grid"
bad "cannot include another" sweep --grid "$tmp/nested.grid"
printf -- '--precision %s\n' "$(printf 'fp32,%.0s' $(seq 14000))fp32" >"$tmp/long.grid"
bad "line longer than" sweep --grid "$tmp/long.grid"
L=$(seq -s, 1 16)
printf -- '--batch %s\n--seq %s\n--hidden %s\n--layers %s\n--vocab %s\n' "$L" "$L" "$L" "$L" "$L" >"$tmp/explode.grid"
bad "1048576 combinations" sweep --grid "$tmp/explode.grid"
bad --benchmark_ run --benchmark_repetitions=2

# ---- plan's own flags
for v in "${SIZES[@]}"; do bad --mem plan --mem "$v"; done
for v in "" "h 200" "h200;rm" nosuchgpu "$(printf 'h%.0s' $(seq 100))"; do bad --gpu plan --gpu "$v"; done
bad "--gpu and --mem" plan --gpu h200 --mem 80GiB
bad --validate plan --validate ""
bad --validate plan --validate "$tmp/none.csv"
printf 'not,a,results,file\n1,2,3,4\n' >"$tmp/other.csv"
bad --validate plan --validate "$tmp/other.csv"

# ---- compare
printf 'schema_version\n' >"$tmp/empty.csv"
for v in -0.1 -1 abc "" nan inf 1.01 1e400 0x1 " 0.1"; do bad --tolerance compare "$tmp/empty.csv" "$tmp/empty.csv" --tolerance "$v"; done
for v in "" xml MD; do bad --format compare "$tmp/empty.csv" "$tmp/empty.csv" --format "$v"; done
bad "compare" compare
bad "compare" compare "$tmp/empty.csv"
bad "unexpected argument" compare "$tmp/empty.csv" "$tmp/empty.csv" third.csv
bad "$tmp/none.csv" compare "$tmp/none.csv" "$tmp/empty.csv"
bad "$tmp/other.csv" compare "$tmp/other.csv" "$tmp/empty.csv"
bad --batch compare "$tmp/empty.csv" "$tmp/empty.csv" --batch 8
bad "compare" compare "" "$tmp/empty.csv"

# ---- plot
bad "plot" plot
bad "unexpected argument" plot a.csv b.csv c.csv
bad --out-dir plot "$tmp/empty.csv" --out-dir ""
bad --batch plot "$tmp/empty.csv" --batch 8
bad "plot" plot ""

# ---- devices
bad --batch devices --batch 8
bad "unexpected argument" devices extra
bad --csv devices --csv x.csv

# ---- before the subcommand
bad "unknown flag '--batch' before the subcommand" --batch 8 run
bad "unknown subcommand" RUN
bad "unknown subcommand" ""

for cmd in run sweep claims plan mincap compare plot devices; do
  echo "bad inputs: memopt $cmd: ${tried[$cmd]:-0} tried"
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
