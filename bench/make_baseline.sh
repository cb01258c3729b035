#!/usr/bin/env bash
# Regenerates the committed dry-backend memory baseline: a fixed grid of configurations, each run
# with `memopt run --backend dry` (exact peaks, no GPU needed), one CSV row each, in a fixed order.
#
#   bash bench/make_baseline.sh [MEMOPT] [OUT.csv]
#     MEMOPT   the memopt binary (default: build/memopt, else the first build*/memopt found)
#     OUT.csv  where the rows go (default results/baseline-dry.csv, with its provenance written to
#              results/baseline-dry.md; any other OUT gets no provenance file: tests use that)
#
# Run it, and commit both files, whenever the model's memory changes on purpose: tests/cli_baseline.sh
# compares a fresh run of this grid against the committed file on every CI run and fails on any
# byte of difference.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
M="${1:-}"
if [ -z "$M" ]; then
  for c in "$root/build/memopt" "$root"/build*/memopt; do
    if [ -x "$c" ]; then M="$c"; break; fi
  done
fi
if [ -z "$M" ] || [ ! -x "$M" ]; then
  echo "make_baseline.sh: no memopt binary (build it: make build, or pass its path as the first argument)" >&2
  exit 2
fi
out="${2:-$root/results/baseline-dry.csv}"
default_out=0
[ "$out" = "$root/results/baseline-dry.csv" ] && default_out=1

# The grid. Its order is the file's order.
presets="gpt2-124m gpt2-350m"
ckpts="none full sqrt selective"
accums="1 4"
attns="materialized fused"

# One file per configuration, runs in parallel ($JOBS at a time, default the core count), then
# concatenated in the grid's order: the output does not depend on which run finished first.
jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
work="$(mktemp -d "${TMPDIR:-/tmp}/memopt_baseline.XXXXXX")"
trap 'rm -rf "$work"' EXIT
n=0
running=0
for p in $presets; do
  for c in $ckpts; do
    for a in $accums; do
      for t in $attns; do
        n=$((n + 1))
        f="$work/$(printf %03d "$n").csv"
        ( "$M" run --backend dry --preset "$p" --ckpt "$c" --accum "$a" --attn "$t" --steps 1 --warmup 1 --csv "$f" >"$f.log" 2>&1 ||
            { echo "make_baseline.sh: memopt run --preset $p --ckpt $c --accum $a --attn $t failed:" >&2; cat "$f.log" >&2; exit 1; } ) &
        running=$((running + 1))
        if [ "$running" -ge "$jobs" ]; then wait -n || { wait; exit 1; }; running=$((running - 1)); fi
      done
    done
  done
done
while [ "$running" -gt 0 ]; do wait -n || { wait; exit 1; }; running=$((running - 1)); done
tmp="$work/all.csv"
first=1
for f in "$work"/[0-9]*.csv; do
  if [ "$first" -eq 1 ]; then cat "$f" >"$tmp"; first=0; else tail -n +2 "$f" >>"$tmp"; fi
done
[ "$(($(wc -l <"$tmp") - 1))" -eq "$n" ] || { echo "make_baseline.sh: expected $n rows" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
mv "$tmp" "$out"
echo "make_baseline.sh: $n rows -> $out"

if [ "$default_out" -eq 1 ]; then
  rev="$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
  if [ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]; then rev="$rev-dirty"; fi
  cat >"$root/results/baseline-dry.md" <<MD
# results/baseline-dry.csv: provenance

The dry-backend memory baseline that \`tests/cli_baseline.sh\` checks on every CI run: the exact
peak allocated and reserved bytes (and the peak by category) of a fixed grid, computed by the run
engine on the dry backend (the allocator over a fake address space: no GPU, no times).

- command: \`bash bench/make_baseline.sh\` (memopt: \`$("$M" --version | head -1)\`)
- git revision: $rev
- date (UTC): $(date -u +%Y-%m-%dT%H:%M:%SZ)
- grid ($n rows, in this order): preset $presets x ckpt $ckpts x accum $accums x attn $attns;
  precision fp32, alloc caching, no cap, batch 8, seq 1024; \`memopt run --backend dry --steps 1 --warmup 1\`

When the model's memory changes on purpose (a new tensor, a different lifetime, a different
workspace), the check fails; regenerate this file with \`bash bench/make_baseline.sh\` and commit
both \`results/baseline-dry.csv\` and this file with the change that explains it.
MD
  echo "make_baseline.sh: provenance -> results/baseline-dry.md"
fi
