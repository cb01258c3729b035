#!/usr/bin/env bash
# compute-sanitizer over every GPU test binary (tools/gpu_session.sh stage sanitize): memcheck with
# leak checking, racecheck, initcheck and synccheck, each binary under each tool, reduced
# (MEMOPT_TEST_REDUCED=1 skips the timing loops; gpu_alloc_faults tries every 150th fault), JOBS at once,
# all within BUDGET seconds (a run that would pass the deadline is cut there and says so).
# Usage: tools/gpu_sanitize.sh BUILD_DIR LOG_DIR SUMMARY_LOG   env: SAN_JOBS (8) SAN_BUDGET (220) SAN_TIMEOUT (150)
#   SAN_TOOLS="memcheck racecheck" and SAN_BINS="gpu_a gpu_b" select a part of the pass, so that one pass
#   can be split over several GPU calls and their summaries concatenated into one log.
# SUMMARY_LOG gets one line per run: tool, binary, the test's exit code, compute-sanitizer's summary.
# Runs share the GPU: gpu_alloc and gpu_alloc_faults check device-wide memory, which the other runs and the
# sanitizer itself move, so their own checks may fail here; the sanitizer verdict (exit 99) is what counts.
set -uo pipefail
B="${1:?usage: gpu_sanitize.sh BUILD_DIR LOG_DIR SUMMARY_LOG}"
L="${2:?}"
S="${3:?}"
mkdir -p "$L"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$CS" ] || { echo "sanitize: compute-sanitizer not found" | tee -a "$S"; exit 1; }
deadline=$(( $(date +%s) + ${SAN_BUDGET:-220} ))
export CS B L deadline SAN_TIMEOUT="${SAN_TIMEOUT:-150}"
one() {
  local tool=$1 bin=$2 opts="" now left t0 rc
  case $tool in memcheck) opts="--leak-check full";; esac
  now=$(date +%s); left=$((deadline - now))
  [ $left -gt "$SAN_TIMEOUT" ] && left=$SAN_TIMEOUT
  if [ $left -lt 5 ]; then printf '%-9s %-28s skipped: the stage budget is spent\n' "$tool" "$bin"; return; fi
  local log="$L/cs-$tool-$bin.log"
  t0=$(date +%s)
  (cd "$B" && MEMOPT_TEST_REDUCED=1 MEMOPT_TEST_FAULT_STRIDE=150 NCCL_NVLS_ENABLE=0 timeout "$left" \
     "$CS" --tool "$tool" $opts --error-exitcode 99 --print-limit 30 "./$bin") >"$log" 2>&1
  rc=$?
  local verdict
  case $rc in 0) verdict="clean, test passed";; 99) verdict="SANITIZER ERRORS";; 124|137) verdict="cut at ${left}s (errors so far below)";;
              77) verdict="skipped by the test";; *) verdict="test exit $rc (sanitizer clean unless listed)";; esac
  printf '%-9s %-28s %4ds exit %3d: %s | %s | %s\n' "$tool" "$bin" $(( $(date +%s) - t0 )) $rc "$verdict" \
    "$(grep -hE '(ERROR|LEAK|RACECHECK|INITCHECK|SYNCCHECK) SUMMARY' "$log" | tr '\n' ' ')" \
    "$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)"
}
export -f one
bins=$(echo ${SAN_BINS:-$(cd "$B" && ls gpu_* 2>/dev/null | grep -v '\.')}) # one line, blank-separated
tools=${SAN_TOOLS:-memcheck racecheck initcheck synccheck}
# the longest runs start first (measured in the last pass), so that none starts near the deadline
slow="gpu_attention_chunks gpu_trace gpu_ops_gemm_attn_mixed gpu_ops_gemm_attn gpu_mlp gpu_lt_table gpu_alloc_faults"
ordered=""
for b in $slow; do case " $bins " in *" $b "*) ordered="$ordered $b";; esac; done
for b in $bins; do case " $slow " in *" $b "*) ;; *) ordered="$ordered $b";; esac; done
bins=$ordered
echo "== compute-sanitizer $("$CS" --version | grep -i version | head -1); binaries: $(echo $bins)" | tee -a "$S"
echo "== tools: $tools" | tee -a "$S"
for b in $bins; do for tool in $tools; do echo "$tool $b"; done; done |
  xargs -P "${SAN_JOBS:-8}" -L 1 bash -c 'one "$@"' _ | sort | tee -a "$S"
# Whose code each finding is in. An error record that names a library (NCCL, cuBLAS/cuBLASLt's nvjet_*
# and cutlass kernels, cuDNN) is counted apart from ours: memcheck reports API errors that a library
# raises and handles itself (NCCL's initialization probes kernel images for other architectures and
# gets cudaErrorNoKernelImageForDevice), and racecheck reports shared-memory hazards inside library
# kernels we cannot read or change. Both are listed, never dropped: the verdict on our own kernels is
# the count with no library in the record.
for f in "$L"/cs-*.log; do
  awk -v f="$(basename "$f")" '
    /^========= (Invalid|Race|Uninitialized|Barrier|Error|Program hit|Potential|Warning)/ { if (rec != "") tally(); rec = $0; next }
    /^=========/ { if (rec != "") rec = rec " " $0; next }
    function tally() { if (rec ~ /libnccl|nccl|nvjet|cutlass|cublas|cudnn|sm90_xmma/) lib++; else own++; rec = "" }
    END { if (rec != "") tally(); if (lib + own) printf "owners    %-36s %d in library code (NCCL, cuBLAS, cuDNN), %d in ours\n", f, lib, own }' "$f"
done | tee -a "$S"
# the errors themselves (first lines of each run that had any)
for f in "$L"/cs-*.log; do
  if grep -qE '^========= (Invalid|Race|Uninitialized|Barrier|Leaked|Error|Program hit|Potential)' "$f"; then
    echo "---- $(basename "$f")"; grep -E '^=========' "$f" | head -40
  fi
done | tee -a "$S"
