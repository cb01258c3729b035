#!/usr/bin/env bash
# One call on the GPU machine: build, GPU tests, benchmarks, the PyTorch peer side by side.
# Usage: tools/gpu_session.sh OUTDIR [stages...]   stages: build test alloc gpt peer (default: all)
# Writes at most 8 files under OUTDIR (the device tool's limit): session.log, ctest.log,
# runs.csv, torch.csv, bench_alloc.json.
set -uo pipefail
OUT="${1:?usage: tools/gpu_session.sh OUTDIR [stages]}"
shift
stages="${*:-build test alloc gpt peer}"
mkdir -p "$OUT"
log="$OUT/session.log"
exec > >(tee -a "$log") 2>&1
cd "$(dirname "$0")/.."
has() { case " $stages " in *" $1 "*) return 0;; esac; return 1; }
echo "== $(date -u +%FT%TZ) git $(git rev-parse --short=12 HEAD 2>/dev/null) stages: $stages"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem --format=csv
B=build-gpu
if has build; then
  t0=$(date +%s)
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
  cmake --build $B -j 16 2>&1 | grep -E "error|warning|FAILED" | head -40
  [ -x $B/memopt ] || { echo "build failed"; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"
  $B/memopt devices
fi
M=$B/memopt
if has test; then
  ctest --test-dir $B --output-on-failure -j 4 --timeout 300 >"$OUT/ctest.log" 2>&1
  echo "ctest exit $?"; grep -E "tests passed|Passed|Failed|Skipped|\*\*\*" "$OUT/ctest.log" | tail -40
fi
if has alloc && [ -x $B/memopt_bench_alloc ]; then
  $B/memopt_bench_alloc --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
    --benchmark_out="$OUT/bench_alloc.json" --benchmark_out_format=json 2>&1 | tail -40
fi
if has gpt; then
  csv="$OUT/runs.csv"
  for prec in fp32 tf32; do for attn in materialized fused; do
    $M run --preset gpt2-124m --precision $prec --attn $attn --steps 10 --warmup 3 --csv "$csv"
  done; done
  for ck in full sqrt selective; do
    $M run --preset gpt2-124m --precision fp32 --ckpt $ck --steps 10 --warmup 3 --csv "$csv"
  done
  $M run --preset gpt2-124m --precision fp32 --accum 4 --steps 10 --warmup 3 --csv "$csv"
fi
if has peer; then
  PYTHONUNBUFFERED=1 python3 bench/peers/torch_gpt.py --preset gpt2-124m --attn materialized,fused --precision fp32,tf32 --csv "$OUT/torch.csv"
  PYTHONUNBUFFERED=1 python3 bench/peers/torch_gpt.py --preset gpt2-124m --attn materialized --precision fp32 --ckpt full --csv "$OUT/torch.csv"
  PYTHONUNBUFFERED=1 python3 bench/peers/torch_gpt.py --preset gpt2-124m --attn materialized --precision fp32 --accum 4 --csv "$OUT/torch.csv"
fi
echo "== done $(date -u +%FT%TZ)"
