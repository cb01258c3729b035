#!/usr/bin/env bash
# make bench: the main job. Usage: bench/run_bench.sh [BUILD]   (measure, then draw if gnuplot is there)
#                                  bench/run_bench.sh --plot DIR (draw the figures of an earlier run)
#   Every run writes into a fresh folder, $BUILD/bench/<UTC time>/ (printed at the start and the end),
#   never over the committed results/ and plots/.
#   On a GPU: the default sweep of GPT-2 124M (precision fp32,tf32,bf16 x attn materialized,fused x
#   ckpt none,full,selective x accum 1,4: 36 rows, through Google Benchmark, and one capped row that
#   runs out of memory) into sweep.csv, memopt claims into claims/, the allocation timelines of fp32
#   ckpt none and full (trace-*.csv), the allocator benchmarks, and a ResNet-50 part (batch 128, 224x224:
#   fp32,tf32,bf16,fp16 x ckpt none,segments:4 into sweep-resnet50.csv; claims into claims-resnet50/). On the H200 the GPT part took
#   287 s at 0d21768 (tools/gpu_session.sh stage bench; results/h200-bench-0d21768/).
#   With no GPU: the same grid on the dry backend (exact memory, no times), a tiny CPU sweep (real
#   numerics and times, of the CPU reference), claims and mincap on the dry backend, the timelines on
#   dry, saying so; the ResNet-50 grid on dry and a tiny ResNet on the CPU.
#   Without gnuplot nothing stops: the measurements are the job; one line at the end says how to draw
#   the figures later (this script's --plot mode).
set -euo pipefail
cd "$(dirname "$0")/.."

# The figures of a bench folder: every CSV it holds that memopt plot draws.
draw() { # draw MEMOPT DIR
  local M="$1" dir="$2"
  for csv in "$dir"/sweep*.csv "$dir"/mincap*.csv; do
    [ -f "$csv" ] || continue
    local name
    name=$(basename "$csv" .csv)
    "$M" plot "$csv" --out-dir "$dir/plots-$name"
  done
  if [ -f "$dir/trace-ckpt-none.csv" ] && [ -f "$dir/trace-ckpt-full.csv" ]; then
    "$M" plot "$dir/trace-ckpt-none.csv" "$dir/trace-ckpt-full.csv" --out-dir "$dir/plots-timeline"
  fi
  return 0
}

if [ "${1:-}" = --plot ]; then
  dir="${2:?usage: bench/run_bench.sh --plot DIR}"
  M="${MEMOPT:-}"
  [ -n "$M" ] || for c in build/memopt build*/memopt; do [ -x "$c" ] && { M="$c"; break; }; done
  [ -x "$M" ] || { echo "memopt bench: no memopt binary (make build, or MEMOPT=path)" >&2; exit 2; }
  command -v gnuplot >/dev/null 2>&1 || { echo "memopt bench: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
  draw "$M" "$dir"
  exit 0
fi

BUILD="${1:-build}"
M="$BUILD/memopt"
RESNET=(--model resnet --preset resnet50 --batch 128 --precision fp32,tf32,bf16,fp16 --ckpt none,segments:4)
GRID=(--preset gpt2-124m --precision fp32,tf32,bf16 --attn materialized,fused --ckpt none,full,selective --accum 1,4)
dir="$BUILD/bench/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$dir"
start=$(date +%s)

if "$M" devices 2>/dev/null | grep -q '^GPU 0'; then
  echo "memopt bench: GPU found; everything goes to $dir/"
  "$M" sweep "${GRID[@]}" --steps 10 --warmup 3 --csv "$dir/sweep.csv" \
      --benchmark_out="$dir/sweep-gbench.json" --benchmark_out_format=json
  # A cap no configuration of the grid fits under: its row says oom (the sweep still exits 0).
  "$M" sweep --preset gpt2-124m --cap 4GiB --steps 10 --warmup 3 --csv "$dir/sweep.csv"
  "$M" claims --steps 10 --warmup 3 --out-dir "$dir/claims"
  for k in none full; do
    "$M" run --preset gpt2-124m --ckpt $k --steps 1 --warmup 1 --trace "$dir/trace-ckpt-$k.csv" | grep -E "trace:|peak allocated"
  done
  "$M" sweep "${RESNET[@]}" --steps 10 --warmup 3 --csv "$dir/sweep-resnet50.csv"
  "$M" claims --model resnet --preset resnet50 --batch 128 --steps 10 --warmup 3 --out-dir "$dir/claims-resnet50"
  [ -x "$BUILD/memopt_bench_alloc" ] && "$BUILD/memopt_bench_alloc" --benchmark_repetitions=3 \
      --benchmark_out="$dir/bench_alloc.json" --benchmark_out_format=json || true
else
  echo "memopt bench: no GPU here. The dry backend gives exact memory for the GPU grid (no times), and a"
  echo "tiny CPU sweep shows real numerics and CPU times; GPU timings need a GPU. Everything goes to $dir/."
  "$M" sweep --backend dry "${GRID[@]}" --steps 2 --warmup 1 --csv "$dir/sweep-dry.csv"
  "$M" sweep --backend dry --preset gpt2-124m --cap 4GiB --steps 2 --warmup 1 --csv "$dir/sweep-dry.csv"
  "$M" sweep --backend cpu --layers 2 --hidden 64 --heads 4 --seq 64 --batch 4 --vocab 512 \
      --ckpt none,full,selective --accum 1,2 --cap none,16MiB --steps 5 --warmup 1 --csv "$dir/sweep-cpu.csv"
  "$M" claims --backend dry --steps 2 --warmup 1 --out-dir "$dir/claims"
  "$M" mincap --backend dry --preset gpt2-124m --steps 2 --warmup 1 --csv "$dir/mincap-dry.csv"
  for k in none full; do
    "$M" run --backend dry --preset gpt2-124m --ckpt $k --steps 1 --warmup 1 --trace "$dir/trace-ckpt-$k.csv" | grep -E "trace:"
  done
  "$M" sweep --backend dry "${RESNET[@]}" --steps 1 --warmup 0 --csv "$dir/sweep-resnet50-dry.csv"
  "$M" sweep --backend cpu --model resnet --preset resnet-tiny --precision fp32,bf16 --ckpt none,segments:2 --accum 1,2 \
      --steps 5 --warmup 1 --csv "$dir/sweep-resnet-cpu.csv"
  [ -x "$BUILD/memopt_bench_alloc" ] && "$BUILD/memopt_bench_alloc" --benchmark_min_time=0.05 || true
fi

echo "memopt bench: measured in $(( $(date +%s) - start )) s; results in $dir/"
if command -v gnuplot >/dev/null 2>&1; then
  draw "$M" "$dir"
else
  echo "memopt bench: no gnuplot, so no figures yet; to draw them: apt-get install gnuplot-nox && bash bench/run_bench.sh --plot $dir"
fi
