#!/usr/bin/env bash
# compute-sanitizer over the GPU test binaries (tools/gpu_session.sh stage sanitize): memcheck with leak
# checking, racecheck, initcheck and synccheck, each binary under each tool, reduced (MEMOPT_TEST_REDUCED=1:
# small shapes for the GPT-2-sized cases, no timing loops; gpu_alloc_faults tries every 150th fault under
# memcheck, every 500th under synccheck; racecheck and initcheck at MEMOPT_TEST_REDUCED=2, every 2000th),
# JOBS at once, longest runs first, all within BUDGET seconds (a run that would pass the deadline is cut
# there and says so).
# Usage: tools/gpu_sanitize.sh BUILD_DIR LOG_DIR SUMMARY_LOG
#   env: SAN_TOOLS ("memcheck racecheck initcheck synccheck")  SAN_BINS (every gpu_* in BUILD_DIR)
#        SAN_SHARD=i/n (the i-th of n parts of the tool x binary list; the parts together are the whole
#        pass, each about the same length: the list sorted longest first, dealt out round-robin)
#        SAN_JOBS (3: the runs share one GPU and slow one another far more than they gain; memcheck of
#        gpu_resnet_ops took 71 s among 16 runs, 9 s among 2, and 15 memcheck runs took 53 s 3 at a time:
#        results/h100-h200-sanitize-session12.log)
#        SAN_HEAVY ("gpu_gpt_mixed gpu_gpt_split gpu_offload_act gpu_resnet": binaries whose racecheck takes 39-102 GiB
#        of host memory a process, seen in sessions 16 and 17; they run in a lane of their own, below)
#        SAN_HEAVY_SLOTS (1: how many of those racecheck runs at once, in a lane of their own: below)
#        SAN_BUDGET (220) SAN_TIMEOUT (420) SAN_RUNS ("tool:binary ...": these runs only; "tool:binary@i/n" runs
#        part i of n of the binary's cases, MEMOPT_TEST_PART=i/n (tests/testlib.h), so that a test too long for
#        one run under racecheck or initcheck is checked whole by n runs: its summary line names binary@i/n;
#        a test that takes no MEMOPT_TEST_PART runs whole in every part, and sanitize_table.py trusts a set of
#        parts made at different revisions: name parts of the tests that call test_part_take, in one pass)
#        SAN_SKIP ("tool:binary ...": not these, e.g. runs an earlier call of the pass gave a verdict)
#        (the tests' own MEMOPT_TEST_* settings pass through, e.g. MEMOPT_TEST_FAULT_CASES='split tp 2' for
#        gpu_alloc_faults' split cases alone: tests/alloc_faults.h)
#        SAN_ORDER (long: the longest expected runs first, so that the budget cuts short ones; short: the
#        short ones first, when a few long runs would hold every slot until the budget ends, as in session
#        13's third call; given: SAN_RUNS' own order, each lane taking its runs in it) SAN_RACE_OPTS (more racecheck options, e.g. "--racecheck-num-workers 4": racecheck's
#        analysis runs on CPU worker threads, their number the tool's choice by default (0), and JOBS runs at once share the
#        16 cores; --racecheck-memcpy-async is about sm80's cp.async, not the TMA copies)
#        SAN_LIB (exclude: racecheck and synccheck leave the libraries' kernels unchecked, with
#        --kernel-name-exclude regex=$LIB_KERNELS, so that the pass checks our kernels in the time a call
#        has; "check": every kernel, the raw runs of sessions 10-12, plus racecheck-ours beside the known
#        findings). memcheck and initcheck always check every kernel: a bad argument of ours faults inside
#        a library's kernel, and initcheck must see the libraries' stores to judge our reads of them.
#        SAN_MARK (1: initcheck runs with MEMOPT_MARK_LIB_WRITES=1, kernels/lib_writes.h: what the libraries'
#        Hopper kernels store through TMA, which initcheck does not see, is cleared just before they store
#        it, so that our reads of it are not reported and do not cost the run its time; 0: the raw runs of
#        sessions 10-13, with the known class below)
#        The tool "none" runs the reduced test without a sanitizer: its time is the floor of each run;
#        "racecheck-all" is racecheck of every kernel whatever SAN_LIB says.
#        Measured at 51368aa (H100, results/h100-h200-sanitize-session13.log): the exclusion made synccheck of
#        the 17 binaries it reached take 1-12 s, all clean; but racecheck with it ends in "Internal Sanitizer Error: The
#        Sanitizer failed to handle a hardware exception" (then cudaErrorIllegalAddress) in 12 binaries,
#        at some cuBLAS or cuDNN kernel it left unchecked (gpu_gpt, gpu_comm, gpu_ops_mixed
#        and gpu_lt_table passed with it), as session 10's kns=nvjet_ filter did: those binaries need
#        racecheck-all, which is slow on the same kernels.
# A pass split over device calls: one call per shard, each appending its summary; concatenate the
# summaries (cat shard1.log shard2.log) into the committed log.
# SUMMARY_LOG gets one line per run: tool, binary, seconds, the test's exit code, compute-sanitizer's summary.
# Runs share the GPU: gpu_alloc, gpu_alloc_faults and gpu_dnn_churn check device-wide memory, which the other runs and the
# sanitizer itself move; every run gets MEMOPT_TEST_UNDER_SANITIZER=1, under which the tests leave those checks out and say
# so (testlib.h), and tool "none" runs them. The sanitizer verdict (exit 99) is what counts.
#
# Two known findings, and the filtered run beside each raw one (docs/DESIGN.md, "What keeps it honest"):
# - memcheck gpu_comm: 4 "Program hit cudaErrorNoKernelImageForDevice ... on CUDA API call to
#   cudaFuncGetAttributes" from inside pncclCommInitRank. These are memcheck's API-error reports (the
#   --report-api-errors option, default "explicit": any failing CUDA API call is printed and counted), not
#   memory errors: NCCL probes its kernels with cudaFuncGetAttributes and handles the failure of the ones not
#   built for this GPU. The raw run stays; a second run "memcheck-noapi" with --report-api-errors no
#   (documented: turns the API-error reports off, the memory access and leak checks stay) gives the memory
#   verdict for gpu_comm.
# - racecheck gpu_attention_fused_mixed: 12 hazards, all inside cuBLAS's nvjet_sm90_*ptrBatch GEMM kernels
#   (closed source, they stage operands in shared memory through TMA/mbarrier async copies). racecheck
#   checks shared memory of every kernel; its documented --kernel-name-exclude filter (kns=SUBSTRING)
#   leaves named kernels unchecked. We cannot change or inspect those kernels, and whether racecheck
#   follows the asynchronous-proxy ordering of TMA/mbarrier is not documented (NVIDIA's own tracker has
#   sanitizer false reports on Hopper's asynchronous WGMMA: compute-sanitizer-samples#19, memcheck), so
#   they are not claimed to be false: the raw run stays with its count, and a second run "racecheck-ours"
#   with --kernel-name-exclude kns=nvjet_ checks every kernel but cuBLAS's nvjet ones (our kernels' verdict).
#   The same holds for gpu_ops_gemm_attn_mixed (nvjet_: 25 hazards in a pass at 7886e10 whose log was lost
#   with its machine) and for gpu_attention_cudnn,
#   whose hazards are all inside cuDNN's generated SDPA kernels (cudnn_generated_fort_native_sdpa_sm90_*):
#   its filtered run excludes kns=cudnn_generated.
# One open finding, in our kernels' reads of what a library wrote, explained but not fixed (docs/DESIGN.md):
# - initcheck: "Uninitialized __global__ memory read" in the materialized softmax (am_load16 / at
#   3837bf5 am_load_upto: score columns, which the score GEMM writes), layernorm_forward_mixed's mx_ld8
#   (a GEMM's output), bn_stats_kernel (cuDNN's convolution output), acc_f32_kernel (pool.cu: the staged
#   filter gradient, which cuDNN's backward-filter engine writes), and cuBLASLt's own splitKreduce_kernel
#   (its partial sums). The GPU tests show every byte used is the library's output:
#   gpu_attention_chunks and gpu_ops_gemm_attn_mixed poison att with NaN before the forward and compare
#   it with the reference; gpu_resnet_ops runs the filter gradient into a NaN-poisoned scratch and
#   requires run 0's bits. So initcheck does not see those library kernels' stores (nvjet and cuDNN's
#   Hopper kernels store through TMA); the reports stay in the log, counted as ours
#   (results/h100-sanitize-3837bf5.log).
set -uo pipefail
B="${1:?usage: gpu_sanitize.sh BUILD_DIR LOG_DIR SUMMARY_LOG}"
L="${2:?}"
S="${3:?}"
mkdir -p "$L"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$CS" ] || { echo "sanitize: compute-sanitizer not found" | tee -a "$S"; exit 1; }
tools="${SAN_TOOLS:-memcheck racecheck initcheck synccheck}"
for t in $tools; do
  case $t in memcheck|racecheck|racecheck-all|initcheck|synccheck|none) ;;
    *) echo "sanitize: SAN_TOOLS: unknown tool '$t' (memcheck racecheck initcheck synccheck none)" >&2; exit 2;; esac
done
# The libraries' kernels, by a substring of their mangled names: cuBLAS (nvjet_*, cutlass, xmma, gemv,
# gemmSN, gemmk1, splitKreduce, the cublasLt namespace), cuDNN (its namespaces, generated kernels, the
# legacy convolution engines) and NCCL. None of the suite's own kernels (kernels/*.cu, models/, strategies/)
# contains any of these; a kernel matched by none is checked.
LIB_KERNELS='nvjet|cutlass|xmma|gemv|gemmSN|gemmk1|splitKreduce|cublas|cudnn|cask|convolve|fft|winograd|nchwToNhwc|nhwcToNchw|flip_filter|nccl'
case ${SAN_LIB:=exclude} in
  exclude|check) ;;
  *) echo "sanitize: SAN_LIB: '$SAN_LIB' is not exclude or check" >&2; exit 2;;
esac
if [ -n "${SAN_BINS:-}" ]; then
  bins=$SAN_BINS
  for b in $bins; do [ -x "$B/$b" ] || { echo "sanitize: SAN_BINS: no binary $B/$b" >&2; exit 2; }; done
else
  bins=$(cd "$B" && ls gpu_* 2>/dev/null | grep -v '\.')
fi
shard_i=1 shard_n=1
if [ -n "${SAN_SHARD:-}" ]; then
  [[ $SAN_SHARD =~ ^([0-9]+)/([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" -ge 1 ] && [ "${BASH_REMATCH[1]}" -le "${BASH_REMATCH[2]}" ] ||
    { echo "sanitize: SAN_SHARD: '$SAN_SHARD' is not i/n with 1 <= i <= n" >&2; exit 2; }
  shard_i=${BASH_REMATCH[1]} shard_n=${BASH_REMATCH[2]}
fi
deadline=$(( $(date +%s) + ${SAN_BUDGET:-220} ))
dmesg0=$(dmesg 2>/dev/null | wc -l) # the kernel log's lines before this pass (its OOM kills are printed at the end)
if [ "$SAN_LIB" = exclude ]; then
  # a program with no CUDA call: the sanitizer parses the options, then says it saw no instrumented call
  # (exit 255, "Target application terminated before first instrumented API call"); a refused option is
  # another message
  probe=$("$CS" --tool racecheck --kernel-name-exclude "regex=$LIB_KERNELS" /bin/true 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && ! echo "$probe" | grep -q "terminated before first instrumented API call"; then
    echo "sanitize: compute-sanitizer refused --kernel-name-exclude regex=... (exit $rc: $(echo "$probe" | head -2 | tr '\n' ' ')): every kernel is checked (SAN_LIB=check)" | tee -a "$S"
    SAN_LIB=check
  fi
fi
case ${SAN_MARK:=1} in 0|1) ;; *) echo "sanitize: SAN_MARK: '$SAN_MARK' is not 0 or 1" >&2; exit 2;; esac
[[ ${SAN_HEAVY_SLOTS:=1} =~ ^[1-9][0-9]?$ ]] || { echo "sanitize: SAN_HEAVY_SLOTS: '$SAN_HEAVY_SLOTS' is not a count 1-99" >&2; exit 2; }
case ${SAN_ORDER:=long} in long) SAN_ORDER_REV=r;; short|given) SAN_ORDER_REV=;;
  *) echo "sanitize: SAN_ORDER: '$SAN_ORDER' is not long, short or given" >&2; exit 2;; esac
export CS B L deadline SAN_TIMEOUT="${SAN_TIMEOUT:-420}" SAN_LIB LIB_KERNELS SAN_RACE_OPTS SAN_MARK SAN_HEAVY_SLOTS

# Expected seconds of a run, to start the longest first (a long run started last is the one the budget
# cuts): the memcheck times of results/h200-sanitize-2a5f4f8.log (full shapes; racecheck about 1.5x),
# 150 for those that session 10's pass (results/h100-sanitize-3837bf5.log) cut at 150 s under most tools,
# 100 for those it cut sooner by its budget, 10 for a binary not listed. Only the order depends on these.
cost() {
  local c
  case ${2%%@*} in
    gpu_attention_chunks|gpu_trace|gpu_alloc_faults|gpu_gpt_mixed|gpu_mlp) c=150;; gpu_ops_gemm_attn_mixed) c=110;;
    gpu_ops_gemm_attn|gpu_gpt_split) c=90;; gpu_lt_table) c=60;; gpu_comm) c=36;;
    gpu_ops_mixed) c=23;; gpu_attention_fused_mixed|gpu_gpt) c=20;; gpu_ops_basic) c=8;;
    gpu_alloc) c=2;; gpu_offload_act|gpu_resnet|gpu_resnet_ops|gpu_offload) c=100;; *) c=10;;
  esac
  case $1 in racecheck*) c=$((c * 3 / 2));; none) c=$((c / 10));; esac
  echo $c
}
# racecheck-ours: the library kernels a binary's raw racecheck found hazards in (a --kernel-name-exclude
# filter); empty: no filtered run
ours_filter() {
  case $1 in
    gpu_attention_fused_mixed|gpu_ops_gemm_attn_mixed) echo kns=nvjet_;;
    gpu_attention_cudnn) echo kns=cudnn_generated;;
    gpu_resnet_ops) echo kns=xmma_dgrad;; # session 16: cuDNN's sm90_xmma_dgrad_implicit_gemm_*_cudnn
  esac
}
export -f ours_filter
# the run list: tool and binary, plus the filtered runs beside the raw ones of the two known findings;
# SAN_RUNS="tool:binary ..." names the runs instead (to finish a pass whose earlier calls cut some)
runs=$(if [ -n "${SAN_RUNS:-}" ]; then echo "$SAN_RUNS" | tr ' ' '\n' | grep . | tr ':' ' '; else
       for t in $tools; do for b in $bins; do
         echo "$t $b"
         [ "$t $b" = "memcheck gpu_comm" ] && echo "memcheck-noapi $b"
         [ "$t" = racecheck ] && [ "$SAN_LIB" = check ] && [ -n "$(ours_filter "$b")" ] && echo "racecheck-ours $b"
       done; done; fi | while read -r t b; do case " ${SAN_SKIP:-} " in *" $t:$b "*) ;; *) echo "$t $b";; esac; done |
       while read -r t b; do k=$((${k:-0} + 1)); [ "$SAN_ORDER" = given ] && echo "$k $t $b" || echo "$(cost "$t" "$b") $t $b"; done |
       sort -k1,1n${SAN_ORDER_REV-r} -k2 -k3 |
       awk -v i="$shard_i" -v n="$shard_n" '(NR - 1) % n == i - 1 { print $2, $3 }')

# a run's log name: binary@i/n as binary.partIofN (the device tool's file names take no "@" or "/")
logname() { local b=$1; case $b in *@*) local p=${b#*@}; echo "${b%%@*}.part${p%/*}of${p#*/}";; *) echo "$b";; esac; }
export -f logname
one() {
  local tool=$1 bin=$2 opts now left t0 rc part=""
  # binary@i/n: part i of n of its cases
  case $bin in *@*) part=${bin#*@}; bin=${bin%%@*};; esac
  local name=$bin${part:+@$part}
  case $tool in
    memcheck) opts="--tool memcheck --leak-check full";;
    memcheck-noapi) opts="--tool memcheck --leak-check full --report-api-errors no";;
    racecheck-ours) opts="--tool racecheck --kernel-name-exclude $(ours_filter "$bin")";;
    racecheck-all) opts="--tool racecheck ${SAN_RACE_OPTS:-}";;
    racecheck|synccheck)
      opts="--tool $tool"
      [ "$SAN_LIB" = exclude ] && opts="$opts --kernel-name-exclude regex=$LIB_KERNELS"
      [ "$tool" = racecheck ] && opts="$opts ${SAN_RACE_OPTS:-}";;
    *) opts="--tool $tool";;
  esac
  # synccheck of cuDNN's SDPA at 3837bf5 (H100): "Detected overflow of tracked cuda::barrier structures ...
  # Try using --num-cuda-barriers", then a launch failure inside the sanitizer; more tracked barriers per CTA
  [ "$tool $bin" = "synccheck gpu_attention_cudnn" ] && opts="$opts --num-cuda-barriers 64"
  now=$(date +%s); left=$((deadline - now))
  [ $left -gt "$SAN_TIMEOUT" ] && left=$SAN_TIMEOUT
  if [ $left -lt 5 ]; then printf '%-14s %-26s skipped: the stage budget is spent\n' "$tool" "$name"; return; fi
  local log="$L/cs-$tool-$(logname "$name").log"
  t0=$(date +%s)
  # gpu_alloc_faults: every 150th fault under memcheck (the unwinding's memory errors and leaks), every
  # 500th under synccheck (a run of it was cut at 150 s under each tool in session 10's pass);
  # racecheck and initcheck, the slowest tools, at MEMOPT_TEST_REDUCED=2 (the longest tests cut their
  # grids to a diagonal: testlib.h) and every 2000th fault (the tests line-buffer their output when
  # reduced, so that a cut run's last line says how far it got)
  local stride=150 level=1
  case $tool in memcheck*) ;; synccheck) stride=500;; *) stride=2000 level=2;; esac
  local run=("$CS" $opts --error-exitcode 99 --print-limit 30)
  [ "$tool" = none ] && run=()
  # initcheck: what cuBLAS, cuBLASLt and cuDNN write is cleared just before they write it
  # (kernels/lib_writes.h), unless SAN_MARK=0
  local mark=0
  [ "$tool" = initcheck ] && mark=$SAN_MARK
  # MEMOPT_TEST_UNDER_SANITIZER: the tests leave out their device-wide memory checks (cudaMemGetInfo: the tool's
  # own allocations move it; gpu_alloc and gpu_dnn_churn failed only those under initcheck and synccheck at
  # 4dd646c), saying so (testlib.h); tool none runs them
  local under=1
  [ "$tool" = none ] && under=0
  (cd "$B" && MEMOPT_TEST_UNDER_SANITIZER=$under MEMOPT_TEST_REDUCED=$level MEMOPT_TEST_FAULT_STRIDE=$stride MEMOPT_MARK_LIB_WRITES=$mark MEMOPT_TEST_PART=$part NCCL_NVLS_ENABLE=0 \
     timeout "$left" "${run[@]}" "./$bin") >"$log" 2>&1
  rc=$?
  local verdict cutby="by the stage budget"
  # which limit cut it: the run's own (SAN_TIMEOUT: too long for one run, so --todo halves a part) or the
  # stage's budget (it started late); a part says how many of its cases it began (testlib.c: "runs here")
  if [ $rc = 124 ]; then
    [ "$left" -ge "$SAN_TIMEOUT" ] && cutby="at its time limit"
    [ -n "$part" ] && cutby="$cutby, $(grep -cE '^MEMOPT_TEST_PART=[0-9]+/[0-9]+: case [0-9]+ .* runs here(, [0-9.]+ s in)?$' "$log") of its cases begun"
  fi
  # exit 9: the test died of SIGKILL (compute-sanitizer returns the signal's number): in session 16 the host's
  # OOM killer, racecheck of gpu_gpt_mixed holding 40-47 GB a process (dmesg, printed at the end)
  # (137: SIGKILL from outside, since timeout itself sends SIGTERM and returns 124)
  case $rc in 9|137) verdict="KILLED (exit $rc, SIGKILL: the host out of memory?): no verdict";; 0) verdict="clean, test passed"; [ "$tool" = none ] && verdict="test passed (no sanitizer)";; 99) verdict="SANITIZER ERRORS";; 124) verdict="cut at ${left}s $cutby (errors so far below)";;
              77) verdict="skipped by the test";; *) verdict="test exit $rc (sanitizer clean unless listed)";; esac
  # the tool failing inside a kernel it left unchecked is no verdict on the binary (session 13)
  grep -q "Internal Sanitizer Error" "$log" && verdict="SANITIZER CRASHED (Internal Sanitizer Error): no verdict"
  # hazards found, then the test killed before its end (session 17: racecheck of gpu_resnet@2/4, exit 99 for its
  # 30 hazards in cuDNN, the test killed by the host's OOM killer): the sanitizer's exit code hides the kill; a
  # test that ran to its end prints "N passed, M failed", even when a check failed
  local counts finished=0
  counts=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
  [ -n "$counts" ] && finished=1
  if [ $rc = 99 ] && [ $finished = 0 ] && grep -q "process didn't terminate successfully" "$log"; then
    verdict="SANITIZER ERRORS, but the test did not finish (killed?): no verdict"
  fi
  # a cut run says how far it got: its test's last line of output (the sanitizer's own lines left out);
  # so does a run whose test failed or died (session 16's racecheck of gpu_gpt_split@2/3 ended in exit 9,
  # "process didn't terminate successfully", with no FAIL line in its summary)
  local last=" | last line: $(grep -v '^=========' "$log" | grep . | tail -1 | cut -c1-110)"
  case $rc in 0|77) last="";; 99) [ $finished = 1 ] && last="";; esac
  printf '%-14s %-26s %4ds exit %3d: %s | %s | %s%s\n' "$tool" "$name" $(( $(date +%s) - t0 )) $rc "$verdict" \
    "$(grep -hE '(ERROR|LEAK|RACECHECK|INITCHECK|SYNCCHECK) SUMMARY' "$log" | tr '\n' ' ')" \
    "$counts" "$last"
}
export -f one
if [ -n "${SAN_RUNS:-}" ]; then
  for r in $SAN_RUNS; do
    case ${r%%:*} in memcheck|memcheck-noapi|racecheck|racecheck-all|racecheck-ours|initcheck|synccheck|none) ;;
      *) echo "sanitize: SAN_RUNS: unknown tool in '$r'" >&2; exit 2;; esac
    rb=${r#*:}
    [ -x "$B/${rb%%@*}" ] || { echo "sanitize: SAN_RUNS: no binary $B/${rb%%@*} ('$r')" >&2; exit 2; }
    case $rb in *@*) [[ ${rb#*@} =~ ^([0-9]+)/([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" -ge 1 ] &&
                       [ "${BASH_REMATCH[1]}" -le "${BASH_REMATCH[2]}" ] && [ "${BASH_REMATCH[2]}" -le 64 ] ||
                       { echo "sanitize: SAN_RUNS: '$r': a part is binary@i/n with 1 <= i <= n <= 64" >&2; exit 2; };; esac
  done
fi
nruns=$(echo "$runs" | grep -c .)
order="${SAN_ORDER}est first"; [ "$SAN_ORDER" = given ] && order="in the order given"
echo "== compute-sanitizer $("$CS" --version | grep -i version | head -1); shard $shard_i/$shard_n ($nruns runs, $order); $([ -n "${SAN_RUNS:-}" ] && echo "runs: $SAN_RUNS" || echo "tools: $(echo $tools); binaries: $(echo $bins)")" | tee -a "$S"
run_tools=" $(echo "$runs" | awk '{print $1}' | sort -u | tr '\n' ' ') "
case "$run_tools" in *" initcheck "*)
  echo "== initcheck with MEMOPT_MARK_LIB_WRITES=${SAN_MARK:-1} (kernels/lib_writes.h)" | tee -a "$S";; esac
[ "$SAN_LIB" = exclude ] && case "$run_tools" in *" racecheck "*|*" synccheck "*)
  echo "== racecheck and synccheck check the suite's kernels: --kernel-name-exclude regex=$LIB_KERNELS" | tee -a "$S";; esac
# racecheck of a binary in SAN_HEAVY holds tens of GiB of host memory a process (session 16: gpu_gpt_mixed 39-45 GiB,
# two of them among 9 runs killed by the host's OOM killer on 125 GiB; session 17, the top processes sampled every
# 10 s: gpu_offload_act 102 GiB, gpu_resnet 78, gpu_gpt_mixed 72, gpu_gpt_split 70, and three runs OOM-killed,
# the others below 7): those runs go in a lane of their own, SAN_HEAVY_SLOTS at once,
# in their listed order, beside the others' lane of SAN_JOBS - SAN_HEAVY_SLOTS (at least 1: with SAN_JOBS=1 and a
# heavy run, two runs go at once)
HEAVY_DEFAULT="gpu_gpt_mixed gpu_gpt_split gpu_offload_act gpu_resnet"
is_heavy='{ b = $2; sub(/@.*/, "", b) } ($1 ~ /^racecheck/ && index(h, " " b " ") > 0) == want'
heavy=$(echo "$runs" | awk -v h=" ${SAN_HEAVY-$HEAVY_DEFAULT} " -v want=1 "$is_heavy")
light=$(echo "$runs" | awk -v h=" ${SAN_HEAVY-$HEAVY_DEFAULT} " -v want=0 "$is_heavy")
lanes=$(( ${SAN_JOBS:-3} - (${#heavy} > 0 ? SAN_HEAVY_SLOTS : 0) ))
[ $lanes -ge 1 ] || lanes=1
[ "$nruns" -gt 0 ] && {
  [ -n "$heavy" ] && echo "$heavy" | xargs -P "$SAN_HEAVY_SLOTS" -L 1 bash -c 'one "$@"' _ &
  [ -n "$light" ] && echo "$light" | xargs -P "$lanes" -L 1 bash -c 'one "$@"' _
  wait
} | sort | tee -a "$S"
# the tool's own lines that a test failed or died ("Error: process didn't terminate successfully", then "Target
# application returned an error"): no finding (session 17 counted racecheck gpu_gpt_mixed@3/4's as one of ours)
NOT_FINDING="process didn't terminate successfully|Target application returned an error"
# the errors themselves (first lines of each run of this shard that had any)
echo "$runs" | while read -r t b; do
  f="$L/cs-$t-$(logname "$b").log"
  [ -n "$t" ] && [ -f "$f" ] || continue
  # (one awk, not grep | grep -q: under pipefail the first grep's SIGPIPE, when -q quits early on a long log,
  # made the test false and the excerpt was left out)
  if awk -v nf="$NOT_FINDING" '/^========= (Invalid|Race|Uninitialized|Barrier|Leaked|Error|Program hit|Potential)/ && $0 !~ nf { found = 1; exit } END { exit !found }' "$f"; then
    echo "---- $(basename "$f")"; grep -E '^=========' "$f" | grep -v 'Host Frame' | head -40
  fi
done | tee -a "$S"
# Whose code each finding is in, by its first "at" (device code) line or first host frame above the CUDA
# runtime and driver: one in a library
# (NCCL, cuBLAS's nvjet_* and cutlass kernels, cuDNN's libraries and generated kernels) is counted apart from ours; both are listed, never
# dropped.
echo "$runs" | while read -r t b; do
  f="$L/cs-$t-$(logname "$b").log"
  [ -n "$t" ] && [ -f "$f" ] || continue
  awk -v f="$(basename "$f")" -v nf="$NOT_FINDING" '
    $0 ~ nf { next }
    /^========= (Invalid|Race|Uninitialized|Barrier|Error|Program hit|Potential|Warning|Leaked)/ { if (rec != "") tally(); rec = $0; where = ""; next }
    /^=========/ { if (rec != "" && where == "" && ($0 ~ /^=========     at / || ($0 ~ /Host Frame/ && $0 !~ /libcuda\.so|libcudart/))) where = $0; next }
    function tally() { w = where != "" ? where : rec; if (w ~ /libnccl|libcublas|libcudnn|nvjet|cutlass|xmma|cudnn_generated|cudnn::|cublasLt::/) lib++; else own++; rec = "" }
    END { if (rec != "") tally(); if (lib + own) printf "owners    %-40s %d in library code (NCCL, cuBLAS, cuDNN), %d in ours\n", f, lib, own }' "$f"
done | tee -a "$S"
# a test killed by the host's OOM killer (exit 9 above) is named in the kernel's log, when it can be read:
# its lines since this pass began (a machine kept warm keeps an earlier call's)
dmesg 2>/dev/null | tail -n +$((dmesg0 + 1)) | grep -E "Out of memory: Killed process" | tail -10 | sed 's/^/oom-kill  /' | tee -a "$S"
exit 0
