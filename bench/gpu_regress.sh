#!/usr/bin/env bash
# The GPU regression set: a few gpt2-124m configurations on the cuda backend, compared with the
# committed H200 baseline results/baseline-h200.csv by `memopt compare` (exit 1 on a regression:
# memory exact, time by median and separated p10/p90 spreads; see README, "Capacity planning and
# regression tracking").
#
#   bash bench/gpu_regress.sh [--build DIR] [--make-baseline] [--tolerance F]
#     --build DIR       where memopt was built (default build)
#     --make-baseline   run the set and write results/baseline-h200.csv and its provenance
#                       results/baseline-h200.md instead of comparing (done once, on the H200,
#                       and committed; again when a change makes the GPU legitimately faster or
#                       leaner)
#     --tolerance F     compare's time tolerance (default 0.05)
# The new rows go to results/gpu-regress-latest.csv (replaced on each run), so plan's calibration
# can use them too. With $GITHUB_STEP_SUMMARY set, the Markdown table is appended there.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build"
make_baseline=0
tol=0.05
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --make-baseline) make_baseline=1; shift ;;
    --tolerance) tol="$2"; shift 2 ;;
    *) echo "gpu_regress.sh: unknown argument '$1' (accepted: --build DIR, --make-baseline, --tolerance F)" >&2; exit 2 ;;
  esac
done
M="$build/memopt"
base="$root/results/baseline-h200.csv"
new="$root/results/gpu-regress-latest.csv"
if [ ! -x "$M" ]; then
  echo "gpu_regress.sh: $M not found: build first (make build, or --build DIR)" >&2
  exit 2
fi
if ! "$M" devices | grep -q '^GPU 0:'; then
  echo "gpu_regress.sh: no CUDA GPU here ($("$M" devices | tail -1)): run this on the GPU machine" >&2
  exit 2
fi
if [ "$make_baseline" -eq 0 ] && [ ! -f "$base" ]; then
  cat >&2 <<MSG
gpu_regress.sh: results/baseline-h200.csv is missing, so there is nothing to compare against.
  It is produced once from a run on the H200 (by the lead), then committed with its provenance:
    bash bench/gpu_regress.sh --make-baseline && git add results/baseline-h200.csv results/baseline-h200.md
MSG
  exit 2
fi
device="$("$M" devices | grep '^GPU 0:' | sed 's/^GPU 0: //; s/,.*//')"
case "$device" in
  *H200*) ;;
  *) echo "gpu_regress.sh: note: this GPU is '$device'; the baseline is an H200's: times compare only on the same model" ;;
esac

# The set: gpt2-124m, batch 8 x 1024 tokens; 30 timed steps give p10/p90 worth comparing. A change
# to the set needs the baseline remade.
configs=(
  "--precision fp32 --attn materialized --ckpt none --accum 1"
  "--precision tf32 --attn materialized --ckpt none --accum 1"
  "--precision tf32 --attn fused --ckpt none --accum 1"
  "--precision tf32 --attn materialized --ckpt full --accum 1"
  "--precision tf32 --attn fused --ckpt none --accum 4"
  "--precision bf16 --attn materialized --ckpt none --accum 1"
  "--precision bf16 --attn fused --ckpt none --accum 1"
)
# the revision before the runs (which rewrite a tracked file: the baseline); MEMOPT_GIT_REV names it in
# a copy without .git (the GPU machine's)
rev="${MEMOPT_GIT_REV:-$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}"
[ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ] && rev="$rev-dirty"
out="$new"
[ "$make_baseline" -eq 1 ] && out="$base"
rm -f "$out"
failed=0
for c in "${configs[@]}"; do
  # shellcheck disable=SC2086
  "$M" run --backend cuda --preset gpt2-124m $c --steps 30 --warmup 5 --csv "$out" | head -3 || failed=1
done
[ "$failed" -eq 0 ] || echo "gpu_regress.sh: a run failed (its row records why)"

if [ "$make_baseline" -eq 1 ]; then
  {
    echo "# results/baseline-h200.csv: provenance"
    echo
    echo "The GPU regression baseline that \`bench/gpu_regress.sh\` compares against (memory exact; time by"
    echo "median with separated p10/p90 spreads)."
    echo
    echo "- command: \`bash bench/gpu_regress.sh --make-baseline\`"
    echo "- git revision: $rev"
    echo "- date (UTC): $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "- device: $("$M" devices | grep '^GPU 0:')"
    echo "- libraries: $("$M" devices | grep '^libraries:')"
    echo "- set: gpt2-124m, batch 8, seq 1024, 30 timed steps after 5 warm-up, one row each of:"
    for c in "${configs[@]}"; do echo "  - \`$c\`"; done
  } >"$root/results/baseline-h200.md"
  echo "gpu_regress.sh: wrote results/baseline-h200.csv and results/baseline-h200.md: commit both"
  exit "$failed"
fi

"$M" compare "$base" "$new" --tolerance "$tol"
rc=$?
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
  "$M" compare "$base" "$new" --tolerance "$tol" --format md >>"$GITHUB_STEP_SUMMARY" 2>/dev/null
fi
exit "$rc"
