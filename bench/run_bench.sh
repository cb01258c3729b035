#!/usr/bin/env bash
# make bench: the main job. On a GPU: the GPT-2 124M benchmark set and the allocator benchmarks,
# rows appended to results/bench.csv. With no GPU: the dry backend (exact memory, no times) for
# the same set and a small CPU run, saying so; rows go to $BUILD/bench/ (nothing committed).
set -euo pipefail
BUILD="${1:-build}"
M="$BUILD/memopt"
cd "$(dirname "$0")/.."
if "$M" devices 2>/dev/null | grep -q '^GPU 0'; then
  out=results/bench.csv
  echo "memopt bench: GPU found; rows go to $out"
  for prec in fp32 tf32; do
    for attn in materialized fused; do
      "$M" run --preset gpt2-124m --precision "$prec" --attn "$attn" --steps 10 --warmup 3 --csv "$out" || true
    done
  done
  for ck in full sqrt selective; do
    "$M" run --preset gpt2-124m --precision fp32 --ckpt "$ck" --steps 10 --warmup 3 --csv "$out" || true
  done
  "$M" run --preset gpt2-124m --precision fp32 --accum 4 --steps 10 --warmup 3 --csv "$out" || true
  [ -x "$BUILD/memopt_bench_alloc" ] && "$BUILD/memopt_bench_alloc" --benchmark_repetitions=3 \
      --benchmark_out="$BUILD/bench_alloc.json" --benchmark_out_format=json || true
else
  mkdir -p "$BUILD/bench"
  out="$BUILD/bench/dry.csv"
  echo "memopt bench: no GPU here: the dry backend gives exact memory for GPT-2 124M (no times),"
  echo "and a small CPU run shows the real numerics; GPU timings need a GPU. Rows go to $BUILD/bench/."
  for ck in none full sqrt selective; do
    "$M" run --backend dry --preset gpt2-124m --ckpt "$ck" --steps 2 --warmup 1 --csv "$out"
  done
  "$M" run --backend dry --preset gpt2-124m --attn fused --steps 2 --warmup 1 --csv "$out"
  "$M" run --backend dry --preset gpt2-124m --accum 4 --steps 2 --warmup 1 --csv "$out"
  "$M" run --backend cpu --layers 2 --hidden 64 --heads 4 --seq 64 --batch 4 --vocab 512 --steps 5 --warmup 1 \
      --csv "$BUILD/bench/cpu.csv"
  [ -x "$BUILD/memopt_bench_alloc" ] && "$BUILD/memopt_bench_alloc" --benchmark_min_time=0.05 || true
fi
