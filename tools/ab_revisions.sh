#!/usr/bin/env bash
# A/B of two revisions on one GPU, in one call: builds the old revision from a source tarball
# (`git archive REV -o .old/src-REV.tar`, carried to the GPU machine, which has no git history), then
# runs the GPT-2 124M headline rows with the old and the new binary interleaved, twice, so that clocks
# and temperature cannot pose as a difference between the revisions.
# Usage: tools/ab_revisions.sh OLD_TAR NEW_MEMOPT CSV [precision:attn ...]
#   default rows: fp32:materialized tf32:materialized bf16:materialized bf16:fused
#   a row without ":attn" runs without --attn (the models that refuse it)
# AB_ARGS: the model's flags (default --preset gpt2-124m; e.g. --model resnet --preset resnet50 --batch 128).
# AB_REPS rounds (default 2). Each run is 10 timed steps after 3 warm-up; rows go to CSV with -old / -new before .csv (the two
# revisions may write different schemas), each with its revision in git_rev.
set -uo pipefail
old_tar="${1:?usage: tools/ab_revisions.sh OLD_TAR NEW_MEMOPT CSV [prec:attn ...]}"
new="${2:?new memopt binary}"
csv="${3:?csv file}"
shift 3
rows="${*:-fp32:materialized tf32:materialized bf16:materialized bf16:fused}"
rev=$(basename "$old_tar" .tar); rev=${rev#src-}
src=/tmp/memopt-old-$rev
rm -rf "$src" && mkdir -p "$src" && tar xf "$old_tar" -C "$src" || exit 1
t0=$(date +%s)
cmake -S "$src" -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$src/cmake.log" 2>&1 \
  || { tail -20 "$src/cmake.log"; exit 1; }
cmake --build "$src/build" -j "$(nproc)" --target memopt >"$src/build.log" 2>&1 \
  || { grep -E "error" "$src/build.log" | head -20; exit 1; }
echo "old revision $rev built in $(( $(date +%s) - t0 )) s"
old="$src/build/memopt"
new_rev="${MEMOPT_GIT_REV:-new}"
for rep in $(seq "${AB_REPS:-2}"); do
  for row in $rows; do
    prec=${row%%:*}; attn=${row#*:}
    aflag="--attn $attn"; [ "$row" = "$prec" ] && { aflag=""; attn=""; }
    for side in old new; do
      if [ $side = old ]; then bin=$old; r=$rev; else bin=$new; r=$new_rev; fi
      MEMOPT_GIT_REV=$r $bin run ${AB_ARGS:---preset gpt2-124m} --precision "$prec" $aflag --steps 10 --warmup 3 \
        --csv "${csv%.csv}-$side.csv" 2>&1 | grep -E "step:" | sed "s/^/$prec $attn $side ($r) rep $rep: /"
    done
  done
done
