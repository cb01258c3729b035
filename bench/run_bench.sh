#!/usr/bin/env bash
# make bench: the main job. Usage: bench/run_bench.sh [BUILD]
#   On a GPU: the default sweep of GPT-2 124M (precision fp32,tf32,bf16 x attn materialized,fused x
#   ckpt none,full,selective x accum 1,4, through Google Benchmark, and one capped row that runs
#   out of memory) into results/sweep.csv, then memopt claims (results/claims.csv), then the
#   figures into plots/ when gnuplot is there, and the allocator benchmarks.
#   With no GPU: the same grid on the dry backend (exact memory, no times), a tiny CPU sweep (real
#   numerics and times, of the CPU reference), claims and mincap on the dry backend, and the
#   figures if gnuplot is there, all into $BUILD/bench/ (nothing to commit), saying so.
set -euo pipefail
BUILD="${1:-build}"
cd "$(dirname "$0")/.."
M="$BUILD/memopt"
GRID=(--preset gpt2-124m --precision fp32,tf32,bf16 --attn materialized,fused --ckpt none,full,selective --accum 1,4)
have_gnuplot=0
command -v gnuplot >/dev/null 2>&1 && have_gnuplot=1

plot() { # plot CSV OUTDIR
  if [ "$have_gnuplot" = 1 ]; then
    "$M" plot "$1" --out-dir "$2"
  else
    echo "memopt bench: no gnuplot here, no figures for $1 (apt-get install gnuplot-nox; then: $M plot $1)"
  fi
}

if "$M" devices 2>/dev/null | grep -q '^GPU 0'; then
  out=results/sweep.csv
  mkdir -p results plots
  rm -f "$out" # this run's measurements, not an accumulation of every run
  echo "memopt bench: GPU found; the sweep goes to $out"
  "$M" sweep "${GRID[@]}" --steps 10 --warmup 3 --csv "$out" \
      --benchmark_out="$BUILD/sweep.json" --benchmark_out_format=json
  # A cap no configuration of the grid fits under: its row says oom (the sweep still exits 0).
  "$M" sweep --preset gpt2-124m --cap 4GiB --steps 10 --warmup 3 --csv "$out"
  "$M" claims --steps 10 --warmup 3
  plot "$out" plots
  [ -x "$BUILD/memopt_bench_alloc" ] && "$BUILD/memopt_bench_alloc" --benchmark_repetitions=3 \
      --benchmark_out="$BUILD/bench_alloc.json" --benchmark_out_format=json || true
else
  dir="$BUILD/bench"
  mkdir -p "$dir"
  rm -f "$dir"/sweep-dry.csv "$dir"/sweep-cpu.csv "$dir"/mincap-dry.csv
  echo "memopt bench: no GPU here. The dry backend gives exact memory for the GPU grid (no times), and a"
  echo "tiny CPU sweep shows real numerics and CPU times; GPU timings need a GPU. Everything goes to $dir/."
  "$M" sweep --backend dry "${GRID[@]}" --steps 2 --warmup 1 --csv "$dir/sweep-dry.csv"
  "$M" sweep --backend dry --preset gpt2-124m --cap 4GiB --steps 2 --warmup 1 --csv "$dir/sweep-dry.csv"
  "$M" sweep --backend cpu --layers 2 --hidden 64 --heads 4 --seq 64 --batch 4 --vocab 512 \
      --ckpt none,full,selective --accum 1,2 --cap none,16MiB --steps 5 --warmup 1 --csv "$dir/sweep-cpu.csv"
  "$M" claims --backend dry --steps 2 --warmup 1 --out-dir "$dir/claims"
  "$M" mincap --backend dry --preset gpt2-124m --steps 2 --warmup 1 --csv "$dir/mincap-dry.csv"
  plot "$dir/sweep-dry.csv" "$dir/plots-dry"
  plot "$dir/sweep-cpu.csv" "$dir/plots-cpu"
  plot "$dir/mincap-dry.csv" "$dir/plots-mincap"
  [ -x "$BUILD/memopt_bench_alloc" ] && "$BUILD/memopt_bench_alloc" --benchmark_min_time=0.05 || true
fi
