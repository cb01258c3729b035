#!/usr/bin/env bash
# One call on the GPU machine: build, GPU tests, benchmarks, the PyTorch peer side by side.
# Usage: tools/gpu_session.sh OUTDIR [stages...]
#   stages: build test alloc gpt split peer claims sweep (default: all); "poison" every GPU test binary with
#   MEMOPT_POISON_ALLOC=1, reduced, four at a time (POISON_TESTS a subset); "gpusome" the GPU test binaries
#   named in GPU_TESTS, at once; "attnab" the attention GEMM forms
#   in the whole step; "gputest" runs only the GPU tests
#   of the model, the split and the attention kernels (their timing lines kept in gputest.log); "gpu" runs
#   ctest -L gpu; "probe" runs bench/probes (GEMM algorithms) and ncu's per-kernel times of one fp32 and
#   one bf16 step (ncu-*.csv; summed per kernel by tools/ncu_sum.py); "tune" prints the cuBLASLt table
#   lines (MEMOPT_GEMM_TUNE=1) for the gpt stage's shapes; "abx" A/Bs the GEMM table and the fp32 dpreatt;
#   "peerlite" the PyTorch fp32 / TF32 rows only; "regress" remakes results/baseline-h200.csv and compares a
#   second run of the set with it; "ceab" A/Bs the fp32 cross-entropy kernels; "headline" the
#   split model's GPU test and the eight precision x attention rows ($gk-gpt2-124m-headline.csv), "headlinepeer" the peer's
#   eight beside them; "profile" --profile's measured time
#   per class beside the cost trace's prediction (fp32, tf32, bf16 materialized and fused); "trace" the
#   allocation trace on the GPU (gpu_trace: cuda == dry) and the fp32 ckpt none / full timelines;
#   "bench" times make bench; "shard" the --offload optimizer and --dp 2 --zero 0..3 rows, and --offload activations beside none for GPT, the MLP and ResNet-50 (h200-shard.csv); "revab" A/Bs the GPT step against an older revision (tools/ab_revisions.sh); "faults" fails every allocation of a tiny step on cuda in turn
#   (gpu_alloc_faults); "offopt" the offloaded optimizer's update in order against its thread and chunk knobs; "sanitize" runs compute-sanitizer memcheck (leak check), racecheck, initcheck
#   and synccheck over every gpu_* binary (tools/gpu_sanitize.sh; OUTDIR/sanitize.log; its SAN_* settings pass
#   through, e.g. SAN_RUNS="$(tools/sanitize_table.py seed=LOG --todo)" SAN_ORDER=given), beside a host-memory
#   sampler (tools/host_mem_sampler.sh; results.tgz: sanitize/mem.log); "mlp" the
#   MLP's GPU test, its H200 rows (results h200-mlp.csv) and plan --validate on them; "attnimpl" the
#   fused attention's TF32 kernels tested, then the tf32 / bf16 / T 2048 fused steps beside PyTorch;
#   "resnetops" the ResNet ops' GPU test (gpu_resnet_ops: cuDNN convolutions and batch norm, own pools, against the cpu
#   references per precision; per-op median times at ResNet-50 layer1's shape, batch 128); "resnet" the
#   ResNet model's GPU test (gpu_resnet), its H200 rows at ResNet-50 batch 128 224x224 (h200-resnet50.csv),
#   the PyTorch peer beside them (torch-resnet50.csv) and plan --validate on the rows; "resnetlite" only
#   the fp32/bf16 x none/segments:4 rows of both, 5 steps after 2 warm-up (the checkpointing claim's ratios);
#   "convtune" tunes ResNet-50 batch 128's convolutions (MEMOPT_CONV_TUNE=1), writes the lines into
#   kernels/conv_algo_table.c (copied to OUTDIR) and rebuilds memopt on it; "resnetfast" the TF32 and 16-bit
#   ResNet-50 rows of memopt and the peer; "resnetprof" --profile per class of the ResNet-50 step (RESNETPROF_PRECS);
#   "resnetws" the ResNet-50 step at workspace budgets (MEMOPT_WORKSPACE_MIB in RESNETWS_MIB, default "32 256", for
#   RESNETWS_PRECS, default "fp32 bf16", and RESNETWS_CKPT, default "none"; h100/h200-resnet50-ws.csv) with each cuDNN plan that wants more than 32 MiB
#   and the tuned per-plan times, then the peer's rows of those precisions; "resnetab" the ResNet-50 step A/B against RESNET_OLD_TAR; "resnetncu" one ResNet-50 step's kernels under ncu; "attn32" the fp32 / TF32 fused attention's engines (MEMOPT_ATTN_FUSED32) in the GPT-2 124M step beside the materialized rows and PyTorch's; "attncudnn" the bf16 fused GPT step on the own attention
#   kernels and on cuDNN's fused SDPA (MEMOPT_ATTN_IMPL), T 1024 and 2048, beside PyTorch's; "targets" the open issues' headline rows, each
#   beside the peer's in the same call: resnetfast and attncudnn, then a second fp32 checkpointing round, plan --validate
#   on the ResNet rows, GPT-2 124M's tf32 / fp32 fused rows (attncudnn then also runs GPT-2 350M B 4).
#   resnetfast's, attncudnn's and targets' files are named by the card ($gk: h200-, h100- or gpu-*.csv); "gemmtune"
#   tunes the GPT rows' cuBLASLt GEMMs (MEMOPT_GEMM_TUNE=1), adds the lines the table lacks to kernels/lt_algo_table.c
#   (copied to OUTDIR) and rebuilds memopt on it; "gemmab" A/Bs the stored GEMM choices against the heuristic's first
#   "dbiasab" runs gpu_ops_gemm_attn_mixed (the 16-byte-load bias-gradient kernel, the default, against the cpu
#   reference and, bit for bit, the 2-byte-load one; BGRADB's and DGELU_BGRAD's sums too) and A/Bs the MEMOPT_DBIAS modes in DBIASAB_MODES against each other in the bf16 GPT-2 steps (cuDNN attention); "lnab" runs gpu_ops_mixed and A/Bs MEMOPT_LN_WAVE=0 against the default in the bf16 GPT-2 steps;
#   "lndsum" runs gpu_ops_mixed and gpu_gpt_mixed and A/Bs session 36's defaults (MEMOPT_LN_DSUM=1, MEMOPT_DBIAS=wide)
#   against the old ones in the bf16 GPT-2 steps; "dbiasside" runs gpu_ops_mixed and gpu_gpt_mixed and A/Bs
#   MEMOPT_DBIAS_SIDE 0 / 1 / 2 / 3 (DBIASSIDE_VALUES) in the bf16 GPT-2 steps;
#   "dbiasncu" one bf16 GPT-2 124M step under ncu on each of DBIASAB_MODES, the bias-gradient kernels only
#   (their times and DRAM bytes, ncu-dbias-MODE.csv), then --profile under each
# Writes session.log and results.tgz (every CSV, log and figure) under OUTDIR: the device tool
# brings back at most 8 files. MEMOPT_GIT_REV names the revision when the copy has no .git.
set -uo pipefail
OUT="${1:?usage: tools/gpu_session.sh OUTDIR [stages]}"
shift
stages="${*:-build test alloc gpt split peer claims sweep}"
mkdir -p "$OUT"
log="$OUT/session.log"
R=/tmp/memopt-results
mkdir -p $R
trap 'tar czf "$OUT/results.tgz" -C $R .' EXIT
exec > >(tee -a "$log") 2>&1
cd "$(dirname "$0")/.."
session_t0=$(date +%s)
has() { case " $stages " in *" $1 "*) return 0;; esac; return 1; }
# "targets" is resnetfast and attncudnn (ATTN_T2048 on) plus what they lack
case " $stages " in *" targets "*) stages="$stages resnetfast attncudnn";; esac
# the card, for the names of the files of resnetfast, attncudnn and targets (h200, h100, or gpu)
case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" in
  *H200*) gk=h200;; *H100*) gk=h100;; *) gk=gpu;;
esac
echo "== $(date -u +%FT%TZ) git ${MEMOPT_GIT_REV:-$(git rev-parse --short=12 HEAD 2>/dev/null)} stages: $stages"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem --format=csv
B=build-gpu
if has build; then
  t0=$(date +%s)
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release >"$R/cmake.log" 2>&1 || { tail -30 "$R/cmake.log"; exit 1; }
  cmake --build $B -j 16 2>&1 | grep -E "error|warning|FAILED" | head -40
  [ -x $B/memopt ] || { echo "build failed"; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"
  $B/memopt devices
fi
M=$B/memopt
if has test; then
  ctest --test-dir $B --output-on-failure -j 4 --timeout 300 >"$R/ctest.log" 2>&1
  echo "ctest exit $?"; grep -E "tests passed|Passed|Failed|Skipped|\*\*\*" "$R/ctest.log" | tail -40
fi
if has gpu; then
  ctest --test-dir $B -L gpu -V --timeout 300 >"$R/ctest-gpu.log" 2>&1
  echo "ctest -L gpu exit $?"; grep -E "tests passed|Passed|Failed|Skipped|\*\*\*" "$R/ctest-gpu.log" | tail -20
  grep -hE "attention chunks timing|chunk rows .*forward|median|ms \(" "$R/ctest-gpu.log" | head -40
fi
if has gpufast; then
  # every GPU test binary at once (their time is mostly the cpu references), then the chunk timings alone
  t0=$(date +%s)
  # gpu_alloc reads device-wide memory: it runs alone, after the others
  pids=""
  for t in $(cd $B && ls gpu_* | grep -v -e gpu_attention_chunks -e gpu_alloc -e gpu_dnn_churn); do # alone, below
    (cd $B && timeout 300 ./$t >"$R/$t.log" 2>&1; echo "$t exit $?: $(tail -1 "$R/$t.log")") &
    pids="$pids $!"
  done
  wait $pids # by pid: a bare wait would also wait for this script's own tee
  (cd $B && timeout 60 ./gpu_alloc >"$R/gpu_alloc.log" 2>&1; echo "gpu_alloc exit $?: $(tail -1 "$R/gpu_alloc.log")")
  (cd $B && timeout 120 ./gpu_dnn_churn >"$R/gpu_dnn_churn.log" 2>&1; echo "gpu_dnn_churn exit $?: $(tail -1 "$R/gpu_dnn_churn.log")")
  (cd $B && timeout 300 ./gpu_alloc_faults >"$R/gpu_alloc_faults.log" 2>&1; echo "gpu_alloc_faults exit $?: $(tail -1 "$R/gpu_alloc_faults.log")")
  grep -E "^fault injection" "$R/gpu_alloc_faults.log" | tail -3
  (cd $B && timeout 300 ./gpu_attention_chunks >"$R/gpu_attention_chunks.log" 2>&1; echo "gpu_attention_chunks exit $?: $(tail -1 "$R/gpu_attention_chunks.log")")
  echo "gpu tests: $(( $(date +%s) - t0 )) s"
  grep -hE "attention chunks timing|chunk rows .*forward" "$R/gpu_attention_chunks.log" | head -40
  grep -hE "^(FAIL|  FAIL)|FAILED|failed" $R/gpu_*.log | head -20
fi
if has gpusome; then
  # the GPU test binaries named in GPU_TESTS, at once (for a call about a few of them); those that read
  # device-wide memory (cudaMemGetInfo: gpu_alloc, gpu_alloc_faults, gpu_dnn_churn) after, one at a time,
  # since the others' allocations would move their figures
  t0=$(date +%s)
  pids=""
  alone=""
  for t in ${GPU_TESTS:?stage gpusome needs GPU_TESTS}; do
    case $t in gpu_alloc|gpu_alloc_faults|gpu_dnn_churn) alone="$alone $t"; continue;; esac
    (cd $B && timeout ${GPUSOME_TIMEOUT:-300} ./$t >"$R/$t.log" 2>&1; echo "$t exit $?: $(tail -1 "$R/$t.log")") &
    pids="$pids $!"
  done
  [ -n "$pids" ] && wait $pids # a bare wait would also wait for this script's own tee
  for t in $alone; do
    (cd $B && timeout ${GPUSOME_TIMEOUT:-300} ./$t >"$R/$t.log" 2>&1; echo "$t exit $?: $(tail -1 "$R/$t.log")")
  done
  echo "gpu tests ($GPU_TESTS): $(( $(date +%s) - t0 )) s"
  grep -hE "^(FAIL|  FAIL)|FAILED|SKIP" $R/gpu_*.log | head -30
fi
if has poison; then
  # every gpu_* test binary with MEMOPT_POISON_ALLOC=1 (strategies/alloc.c: each new block 0xff, NaN and -1),
  # natively, at MEMOPT_TEST_REDUCED=1 (no timing loops, which the per-block fill would distort): a kernel
  # reading memory nothing wrote changes a result the test compares. The check of initcheck's reports on no
  # tool; POISON_TESTS names a subset. Four at a time, under MEMOPT_TEST_UNDER_SANITIZER=1 as a sanitizer run
  # is: the device-wide memory checks left out (the runs beside one another move cudaMemGetInfo), and with
  # them the timing-only checks and small sizes it sets (testlib.h test_under_sanitizer).
  t0=$(date +%s)
  pt=${POISON_TESTS:-$(cd $B && ls gpu_* | grep -v '\.')}
  printf '%s\n' $pt | xargs -P 4 -I{} bash -c "cd $B && MEMOPT_POISON_ALLOC=1 MEMOPT_TEST_REDUCED=1 MEMOPT_TEST_UNDER_SANITIZER=1 \
    timeout ${POISON_TIMEOUT:-400} ./{} >$R/poison-{}.log 2>&1; echo \"poison {} exit \$?: \$(tail -1 $R/poison-{}.log)\""
  echo "poison ($(echo $pt | wc -w) binaries): $(( $(date +%s) - t0 )) s"
  grep -hE "^(FAIL|  FAIL)" $R/poison-gpu_*.log | head -20
fi
if has gpu1; then
  # the tests that must run alone: device-wide memory, and the chunk timings
  for t in gpu_alloc gpu_attention_chunks; do
    (cd $B && timeout 300 ./$t >"$R/$t.log" 2>&1; echo "$t exit $?: $(tail -1 "$R/$t.log")")
  done
  grep -hE "attention chunks timing|chunk rows .*forward" "$R/gpu_attention_chunks.log" | head -40
fi
if has fuseoff; then
  for prec in fp32 bf16; do
    MEMOPT_FUSE_EPILOGUES=0 $M run --preset gpt2-124m --precision $prec --steps 10 --warmup 3 --csv "$R/fuseoff.csv" \
      | grep -E "step" | sed "s/^/$prec materialized, epilogue fusions off: /"
  done
fi
if has ab; then
  # the epilogue fusions at their default (16-bit only) and flipped, interleaved twice so the order of
  # runs (clocks, temperature) cannot pose as a difference
  csv="$R/ab.csv"
  for rep in 1 2; do for prec in fp32 bf16; do for fe in default flipped; do
    if [ $fe = default ]; then env=""; elif [ $prec = fp32 ]; then env="MEMOPT_FUSE_EPILOGUES=1"; else env="MEMOPT_FUSE_EPILOGUES=0"; fi
    env $env $M run --preset gpt2-124m --precision $prec --steps 10 --warmup 3 --csv "$csv" \
      | grep -E "step:" | sed "s/^/$prec fusions $fe ($env) rep $rep: /"
  done; done; done
fi
if has attnab; then
  # the materialized attention's GEMM forms (kernels/ctx.h: MEMOPT_ATTN_GEMM, MEMOPT_ATTN_SCORES,
  # MEMOPT_ATTN_CHUNK_ROWS) in the whole step, interleaved twice so the order of runs cannot pose as a
  # difference; "default" is the build's default
  csv="$R/attnab.csv"
  for rep in 1 2; do for prec in fp32 tf32 bf16; do
    if [ $prec = bf16 ]; then vs="MEMOPT_ATTN_GEMM=strided default"
    else vs="MEMOPT_ATTN_GEMM=strided,MEMOPT_ATTN_SCORES=cublas MEMOPT_ATTN_SCORES=cublas default"; fi
    for v in $vs; do
      env $([ $v = default ] || echo ${v//,/ }) $M run --preset gpt2-124m --precision $prec \
        --steps 10 --warmup 3 --csv "$csv" | grep -E "step:" | sed "s/^/$prec attention $v rep $rep: /"
    done
  done; done
fi
if has resnetops; then
  if [ ! -f "$R/gpu_resnet_ops.log" ]; then # not run yet by gpufast or gpusome
    [ -x $B/gpu_resnet_ops ] || cmake --build $B -j 16 --target gpu_resnet_ops 2>&1 | grep -E "error|FAILED" | head -20
    (cd $B && MEMOPT_CONV_LOG=1 timeout 600 ./gpu_resnet_ops) >"$R/gpu_resnet_ops.log" 2>&1
    echo "gpu_resnet_ops exit $?: $(tail -1 "$R/gpu_resnet_ops.log")"
  fi
  cat "$R/gpu_resnet_ops.log"
fi
if has resnet; then
  # the ResNet model (issue 16): its GPU test, then ResNet-50 batch 128 rows and the PyTorch peer's
  if [ ! -f "$R/gpu_resnet.log" ]; then # not run yet by gpufast or gpusome
    [ -x $B/gpu_resnet ] || cmake --build $B -j 16 --target gpu_resnet 2>&1 | grep -E "error|FAILED" | head -20
    (cd $B && timeout 600 ./gpu_resnet) >"$R/gpu_resnet.log" 2>&1
    echo "gpu_resnet exit $?: $(tail -1 "$R/gpu_resnet.log")"
  fi
  grep -vE "^PASS" "$R/gpu_resnet.log" | head -60
  csv="$R/h200-resnet50.csv"
  rr() { timeout 300 $M run --model resnet --preset resnet50 --batch 128 --steps 10 --warmup 3 --csv "$csv" "$@" 2>&1 \
    | grep -E "step:|peak alloc|dry-backend|recompute|error|oom" || echo "(exit $?: run $*)"; }
  for cfg in "fp32 none" "fp32 segments:4" "tf32 none" "bf16 none" "bf16 segments:4" "fp16 none"; do
    set -- $cfg
    echo "== memopt resnet50 b128 --precision $1 --ckpt $2"
    rr --precision "$1" --ckpt "$2"
  done
  PR() { PYTHONUNBUFFERED=1 timeout 300 python3 bench/peers/torch_resnet.py --preset resnet50 --batch 128 \
    --csv "$R/torch-resnet50.csv" "$@" || echo "(peer exit $?: $*)"; }
  PR --precision fp32,bf16 --ckpt none,segments:4
  PR --precision tf32,fp16
  $M plan --validate "$csv" --out-dir "$R" 2>&1 | tail -6
fi
if has convtune; then
  # a tuning run of ResNet-50 batch 128 per precision (MEMOPT_CONV_TUNE=1): its "conv-tune: {" lines go
  # into kernels/conv_algo_table.c (the copy in OUTDIR is the one to commit) and memopt is rebuilt on it
  t0=$(date +%s)
  for p in ${CONVTUNE_PRECISIONS:-fp32 tf32 bf16 fp16}; do
    MEMOPT_CONV_TUNE=1 timeout 200 $M run --model resnet --preset resnet50 --batch 128 --precision $p --steps 1 \
      --warmup 0 2>"$R/conv-tune-$p.log" | grep -E "step:" | sed "s/^/$p tuning run: /"
    grep -c "^conv-tune: {" "$R/conv-tune-$p.log" | sed "s/^/$p: stored choices: /"
  done
  { echo "    // tools/gpu_session.sh stage convtune, ${MEMOPT_GIT_REV:-?}, $(date -u +%F): ResNet-50 batch 128, 224x224"
    cat "$R"/conv-tune-*.log | grep "^conv-tune: {" | sed 's/^conv-tune: /    /'; } >"$R/conv-tune-lines.txt"
  python3 - "$R/conv-tune-lines.txt" kernels/conv_algo_table.c <<'PY'
import sys
lines = open(sys.argv[1]).read()
p = sys.argv[2]
s = open(p).read()
end = "    {NULL, 0, {0}, 0, 0, 0.0f, 0.0f}, // end"
s = s.replace("// No tuning run has been made yet (the table is empty): every convolution takes the first kept candidate.\n", "")
s = s.replace(end, lines + end)
open(p, "w").write(s)
PY
  cp kernels/conv_algo_table.c "$OUT/conv_algo_table.c"
  cmake --build $B -j 16 --target memopt 2>&1 | grep -E "error|FAILED" | head -20
  echo "convtune: $(( $(date +%s) - t0 )) s, $(grep -c '^    {"' kernels/conv_algo_table.c) lines in the table"
fi
if has gemmtune; then
  # tuning runs of the GPT rows (MEMOPT_GEMM_TUNE=GEMMTUNE_MODE, default 2: each new cuBLASLt plan times the
  # heuristic's candidates and each algorithm's own top configurations; 3: also their tiles and stage counts);
  # their "lt-tune: {" lines go into kernels/lt_algo_table.c, replacing the lines of keys tuned again (tools/lt_table_insert.py;
  # the copy in OUTDIR is the one to commit) and memopt is rebuilt on it. GEMMTUNE_CFGS: one run's flags a line
  t0=$(date +%s)
  g="--preset gpt2-124m"
  cfgs="${GEMMTUNE_CFGS:-$(printf '%s\n' "$g --precision fp32" "$g --precision tf32" "$g --precision bf16" "$g --precision fp16" \
    "$g --attn fused --precision fp32" "$g --attn fused --precision tf32" "$g --attn fused --precision bf16" \
    "$g --attn fused --precision fp16" "$g --attn fused --precision bf16 --seq 2048 --batch 4" \
    "--preset gpt2-350m --attn fused --precision bf16 --batch 4")}"
  i=0
  while IFS= read -r cfg; do
    [ -n "$cfg" ] || continue
    i=$((i + 1))
    MEMOPT_GEMM_TUNE=${GEMMTUNE_MODE:-2} timeout 200 $M run $cfg --steps 1 --warmup 0 2>"$R/gemm-tune-$i.log" \
      | grep -E "step:" | sed "s/^/tuning run $cfg: /"
    echo "  $(grep -c '^lt-tune: {' "$R/gemm-tune-$i.log") faster choices, $(grep -c '^lt-tune: //' "$R/gemm-tune-$i.log") first stays"
  done <<<"$cfgs"
  python3 tools/lt_table_insert.py --replace kernels/lt_algo_table.c \
    "tools/gpu_session.sh stage gemmtune, ${MEMOPT_GIT_REV:-?}, $(date -u +%F): MEMOPT_GEMM_TUNE=${GEMMTUNE_MODE:-2} memopt run --steps 1 --warmup 0, each of: $(echo "$cfgs" | paste -sd ';')" \
    $(for j in $(seq $i); do echo "$R/gemm-tune-$j.log"; done)
  cp kernels/lt_algo_table.c "$OUT/lt_algo_table.c"
  cmake --build $B -j 16 --target memopt gpu_lt_table 2>&1 | grep -E "error|FAILED" | head -20
  # every stored line of this card against the heuristic's first, on fresh random operands
  (cd $B && timeout 120 ./gpu_lt_table >"$R/gpu_lt_table.log" 2>&1; echo "gpu_lt_table exit $?: $(tail -1 "$R/gpu_lt_table.log")")
  grep -E "^stored choices" "$R/gpu_lt_table.log"
  echo "gemmtune: $(( $(date +%s) - t0 )) s, $(grep -c '^    {"' kernels/lt_algo_table.c) lines in the table"
fi
if has dbiasab; then
  # MEMOPT_DBIAS=wide (the default since session 36: the cp.async kernel), narrow (the 2-byte-load one, the same
  # bits), lt (kernels/matmul_mixed.cu, matmul_mixed_cuda.c; it moved no step on an H100 or an H200, session 33)
  # and gelu (the fc bias in the fcproj dinp GEMM's DGELU_BGRAD epilogue, session 34; slower): their test, then the step on each of DBIASAB_MODES (default "narrow wide lt") over DBIASAB_SHAPES
  # (";"-separated, default GPT-2 124M B 8 and T 2048 B 4), interleaved, DBIASAB_ROUNDS rounds ($gk-dbias-ab.csv)
  (cd $B && timeout 120 ./gpu_ops_gemm_attn_mixed >"$R/gpu_ops_gemm_attn_mixed.log" 2>&1
   echo "gpu_ops_gemm_attn_mixed exit $?: $(tail -1 "$R/gpu_ops_gemm_attn_mixed.log")")
  grep -E "FAIL|column sums" "$R/gpu_ops_gemm_attn_mixed.log" | head -12
  IFS=';' read -r -a dbshapes <<< "${DBIASAB_SHAPES:---preset gpt2-124m;--preset gpt2-124m --seq 2048 --batch 4}"
  for rep in $(seq ${DBIASAB_ROUNDS:-2}); do
    for shape in "${dbshapes[@]}"; do
      for v in ${DBIASAB_MODES:-narrow wide lt}; do
        v=MEMOPT_DBIAS=$v
        env $v MEMOPT_ATTN_IMPL=cudnn timeout 60 $M run $shape --attn fused --precision bf16 --steps 20 --warmup 3 \
          --csv "$R/$gk-dbias-ab.csv" 2>&1 | grep -E "step:" | sed "s/^/$shape $v rep $rep: /"
      done
    done
  done
fi
if has dbiasncu; then
  # where the bias-gradient kernels' time goes under each engine (thirteenth pass of docs/perf-notes.md: the
  # wide kernels on cp.async were built to keep more bytes in flight): ncu's duration and DRAM bytes of every
  # mm_dbias kernel of one step, summed per kernel, then --profile's classes of 10 steps
  for v in ${DBIASAB_MODES:-narrow wide}; do
    MEMOPT_DBIAS=$v MEMOPT_ATTN_IMPL=cudnn timeout 120 ncu --clock-control none --cache-control none -k regex:mm_dbias \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --print-units base --log-file "$R/ncu-dbias-$v.csv" \
      $M run --preset gpt2-124m --attn fused --precision bf16 --steps 1 --warmup 0 >"$R/ncu-dbias-$v.out" 2>&1
    echo "ncu MEMOPT_DBIAS=$v exit $?"
    python3 tools/ncu_sum.py "$R/ncu-dbias-$v.csv" 8 2>&1 | sed "s/^/MEMOPT_DBIAS=$v: /"
  done
  for v in ${DBIASAB_MODES:-narrow wide}; do
    MEMOPT_DBIAS=$v MEMOPT_ATTN_IMPL=cudnn timeout 60 $M run --preset gpt2-124m --attn fused --precision bf16 --steps 10 \
      --warmup 3 --profile 2>&1 | grep -E "step:|profile \(" | sed "s/^/MEMOPT_DBIAS=$v: /"
  done
fi
if has lnab; then
  # the 16-bit LayerNorm backward in one wave (the default since session 33) against MEMOPT_LN_WAVE=0's 512
  # blocks (kernels/layernorm_mixed.cu): the test (gpu_ops_mixed: dinp's bits, dweight / dbias against the cpu
  # reference), then the bf16 steps (cuDNN attention) under each, interleaved, LNAB_ROUNDS rounds
  # ($gk-ln-wave-ab.csv), and --profile's LayerNorm class under each
  (cd $B && timeout 150 ./gpu_ops_mixed >"$R/gpu_ops_mixed.log" 2>&1
   echo "gpu_ops_mixed exit $?: $(tail -1 "$R/gpu_ops_mixed.log")")
  grep -E "FAIL" "$R/gpu_ops_mixed.log" | head -5
  for rep in $(seq ${LNAB_ROUNDS:-2}); do
    for shape in "--preset gpt2-124m" "--preset gpt2-124m --seq 2048 --batch 4" "--preset gpt2-350m --batch 4"; do
      for v in 0 1; do
        MEMOPT_LN_WAVE=$v MEMOPT_ATTN_IMPL=cudnn timeout 60 $M run $shape --attn fused --precision bf16 --steps 20 --warmup 3 \
          --csv "$R/$gk-ln-wave-ab.csv" 2>&1 | grep -E "step:" | sed "s/^/$shape MEMOPT_LN_WAVE=$v rep $rep: /"
      done
    done
  done
  for v in 0 1; do
    MEMOPT_LN_WAVE=$v MEMOPT_ATTN_IMPL=cudnn timeout 60 $M run --preset gpt2-124m --attn fused --precision bf16 --steps 10 \
      --warmup 3 --profile 2>&1 | grep -E "profile \(" | sed "s/^/MEMOPT_LN_WAVE=$v: /"
  done
fi
if has lndsum; then
  # session 36's defaults, the projections' bias gradients from the LayerNorm backward (MEMOPT_LN_DSUM=1) and the
  # cp.async bias kernel (MEMOPT_DBIAS=wide), against the old ones (0, narrow): the tests of the summing LayerNorm
  # backward (gpu_ops_mixed, gpu_gpt_mixed), then the bf16 steps (cuDNN attention) under each, interleaved,
  # LNDSUM_ROUNDS rounds ($gk-defaults-ab.csv)
  (cd $B && for t in gpu_ops_mixed gpu_gpt_mixed; do timeout 150 ./$t >"$R/$t.log" 2>&1 &
   done; wait; for t in gpu_ops_mixed gpu_gpt_mixed; do echo "$t: $(tail -1 "$R/$t.log")"; done)
  grep -hE "FAIL" "$R/gpu_ops_mixed.log" "$R/gpu_gpt_mixed.log" | head -5
  for rep in $(seq ${LNDSUM_ROUNDS:-2}); do
    for shape in "--preset gpt2-124m" "--preset gpt2-124m --seq 2048 --batch 4" "--preset gpt2-350m --batch 4"; do
      for v in new old; do
        e="MEMOPT_LN_DSUM=1"; [ $v = old ] && e="MEMOPT_LN_DSUM=0 MEMOPT_DBIAS=narrow"
        env $e MEMOPT_ATTN_IMPL=cudnn timeout 60 $M run $shape --attn fused --precision bf16 --steps 20 --warmup 3 \
          --csv "$R/$gk-defaults-ab.csv" 2>&1 | grep -E "step:" | sed "s/^/$shape $v rep $rep: /"
      done
    done
  done
fi
if has dbiasside; then
  # MEMOPT_DBIAS_SIDE: the 16-bit GEMM backward's bias kernels on a side stream (1 before the GEMMs, 2 after; 3 with
  # the dweight GEMM there too) against
  # the compute stream (0): gpu_ops_mixed (the LayerNorm backward), gpu_gpt_mixed (its side-stream bits, in two
  # parts at once) and gpu_ops_gemm_attn_mixed under MEMOPT_DBIAS_SIDE=3 (the GEMM backward with its side stream
  # against the cpu, every shape, narrow and wide), then the bf16 steps (cuDNN attention) under each, interleaved,
  # DBIASSIDE_ROUNDS rounds ($gk-dbias-side-ab.csv)
  (cd $B && timeout 170 ./gpu_ops_mixed >"$R/gpu_ops_mixed.log" 2>&1 &
   cd $B && MEMOPT_DBIAS_SIDE=3 timeout 170 ./gpu_ops_gemm_attn_mixed >"$R/gpu_ops_gemm_attn_mixed-side3.log" 2>&1 &
   cd $B && for k in 1 2; do MEMOPT_TEST_PART=$k/2 timeout 170 ./gpu_gpt_mixed >"$R/gpu_gpt_mixed-$k.log" 2>&1 & done; wait
   for t in gpu_ops_mixed gpu_ops_gemm_attn_mixed-side3 gpu_gpt_mixed-1 gpu_gpt_mixed-2; do echo "$t: $(tail -1 "$R/$t.log")"; done)
  grep -hE "FAIL|MEMOPT_DBIAS_SIDE|MEMOPT_LN_DSUM" "$R/gpu_ops_mixed.log" "$R"/gpu_gpt_mixed-*.log "$R/gpu_ops_gemm_attn_mixed-side3.log" | grep -v "is another part" | head -12
  for rep in $(seq ${DBIASSIDE_ROUNDS:-2}); do
    for shape in "--preset gpt2-124m" "--preset gpt2-124m --seq 2048 --batch 4" "--preset gpt2-350m --batch 4"; do
      for v in ${DBIASSIDE_VALUES:-0 1 2 3}; do
        MEMOPT_DBIAS_SIDE=$v MEMOPT_ATTN_IMPL=cudnn timeout 60 $M run $shape --attn fused --precision bf16 --steps 20 \
          --warmup 3 --csv "$R/$gk-dbias-side-ab.csv" 2>&1 | grep -E "step:" | sed "s/^/$shape side $v rep $rep: /"
      done
    done
  done
fi
if has gemmab; then
  # the stored GEMM choices against the heuristic's first (MEMOPT_GEMM_TABLE=0), interleaved, GEMMAB_ROUNDS rounds
  csv="$R/$gk-gemmab.csv"
  g="--preset gpt2-124m"
  rows="${GEMMAB_ROWS:-$(printf '%s\n' "$g --attn fused --precision fp32" "$g --attn fused --precision tf32" \
    "$g --attn fused --precision bf16" "--preset gpt2-350m --attn fused --precision bf16 --batch 4")}"
  for rep in $(seq ${GEMMAB_ROUNDS:-2}); do
    while IFS= read -r cfg; do
      [ -n "$cfg" ] || continue
      for v in table MEMOPT_GEMM_TABLE=0; do
        env $([ $v = table ] || echo $v) MEMOPT_ATTN_IMPL=${GEMMAB_ATTN_IMPL:-cudnn} timeout 120 $M run $cfg \
          --steps 10 --warmup 3 --csv "$csv" 2>&1 | grep -E "step:" | sed "s/^/$cfg $v rep $rep: /"
      done
    done <<<"$rows"
  done
fi
if has resnetlite; then
  csv="$R/h200-resnet50-lite.csv"
  for cfg in "fp32 none" "fp32 segments:4" "bf16 none" "bf16 segments:4"; do
    set -- $cfg
    echo "== memopt resnet50 b128 --precision $1 --ckpt $2"
    timeout 200 $M run --model resnet --preset resnet50 --batch 128 --steps 5 --warmup 2 --csv "$csv" --precision "$1" \
      --ckpt "$2" 2>&1 | grep -E "step:|peak alloc|dry-backend|recompute|error|oom" || echo "(exit $?)"
  done
  PYTHONUNBUFFERED=1 timeout 240 python3 bench/peers/torch_resnet.py --preset resnet50 --batch 128 --steps 5 --warmup 2 \
    --precision fp32,bf16 --ckpt none,segments:4 --csv "$R/torch-resnet50-lite.csv" || echo "(peer exit $?)"
fi
if has resnetws; then
  # what a larger workspace budget buys each ResNet-50 convolution (session 19: fp32 132.7 -> 115.1 ms, bf16
  # 34.1 -> 25.9 at 256 MiB on an H100): the step at each budget, tuned (MEMOPT_CONV_TUNE=1 picks the best of up
  # to 8 kept engines a plan, the stored table left out), the plans whose engine wants more than 32 MiB, and
  # the tune lines of the budgets' plans; then the peer beside them. RESNETWS_CKPT: the --ckpt values (default none)
  csv="$R/$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -qi h200 && echo h200 || echo h100)-resnet50-ws.csv"
  for prec in ${RESNETWS_PRECS:-fp32 bf16}; do
    for ck in ${RESNETWS_CKPT:-none}; do
      for mib in ${RESNETWS_MIB:-32 256}; do
        f="$R/resnetws-$prec-${ck%%:*}-$mib"
        t1=$(date +%s)
        MEMOPT_WORKSPACE_MIB=$mib MEMOPT_CONV_LOG=1 MEMOPT_CONV_TUNE=1 MEMOPT_CONV_TABLE=0 timeout ${RESNETWS_TIMEOUT:-150} $M run \
          --model resnet --preset resnet50 --batch 128 --precision $prec --ckpt $ck --steps 5 --warmup 2 --csv "$csv" \
          >"$f.out" 2>"$f.err"
        echo "resnet50 $prec $ck workspace $mib MiB: exit $? in $(( $(date +%s) - t1 )) s: $(grep -E 'step:|recompute:|peak alloc|dry-backend' "$f.out" | cut -c1-80 | tr -s ' ' | tr '\n' ' ')"
        awk '/conv-plan/ {for (i = 1; i <= NF; i++) if ($i == "workspace" && $(i + 1) + 0 > 33554432) print "  wants more than 32 MiB:", $0}' \
          "$f.err" | cut -c1-220
      done
    done
  done
  PYTHONUNBUFFERED=1 timeout 240 python3 bench/peers/torch_resnet.py --preset resnet50 --batch 128 --steps 5 --warmup 2 \
    --precision "$(echo ${RESNETWS_PRECS:-fp32 bf16} | tr ' ' ',')" --ckpt "$(echo ${RESNETWS_CKPT:-none} | tr ' ' ',')" \
    --csv "$R/torch-resnet50-ws.csv" || echo "(peer exit $?)"
fi
if has resnetprof; then
  # --profile's device time per class (conv under gemm, batch norm under layernorm) of the ResNet-50 batch 128
  # step, beside the cost trace's prediction: where the step's time goes, before and after a kernel change
  for prec in ${RESNETPROF_PRECS:-fp32 tf32 bf16}; do
    timeout 120 $M run --model resnet --preset resnet50 --batch 128 --steps 5 --warmup 2 --precision $prec --profile \
      --csv "$R/resnetprof.csv" 2>&1 | grep -E "step:|profile|predicted|error" | sed "s/^/resnet50 $prec: /"
  done
fi
if has resnetncu; then
  # one ResNet-50 batch 128 step's kernels under ncu (gpu__time_duration), in launch order (ncu-resnet-*.csv)
  # and summed per kernel: which convolutions and passes hold the step's time
  for prec in ${RESNETNCU_PRECS:-fp32 bf16}; do
    timeout ${RESNETNCU_TIMEOUT:-150} ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
      --print-units base --log-file "$R/ncu-resnet-$prec.csv" $M run --model resnet --preset resnet50 --batch 128 \
      --precision $prec --steps 1 --warmup 0 >"$R/ncu-resnet-$prec.out" 2>&1
    echo "ncu resnet50 $prec exit $?: $(wc -l <"$R/ncu-resnet-$prec.csv") lines"
    python3 tools/ncu_sum.py "$R/ncu-resnet-$prec.csv" 2>&1 | head -30
  done
fi
if has resnetfast; then
  # ResNet-50 batch 128, the issue's six rows, memopt (stored conv choices) and the peer, 10 steps
  csv="$R/$gk-resnet50-fast.csv"
  for cfg in "fp32 none" "fp32 segments:4" "tf32 none" "bf16 none" "bf16 segments:4" "fp16 none"; do
    set -- $cfg
    echo "== memopt resnet50 b128 --precision $1 --ckpt $2"
    timeout 120 $M run --model resnet --preset resnet50 --batch 128 --steps 10 --warmup 3 --csv "$csv" --precision "$1" \
      --ckpt "$2" 2>&1 | grep -E "step:|recompute|peak alloc|dry-backend|error|oom" || echo "(exit $?)"
  done
  PR() { PYTHONUNBUFFERED=1 timeout 150 python3 bench/peers/torch_resnet.py --preset resnet50 --batch 128 \
    --csv "$R/torch-$gk-resnet50-fast.csv" "$@" || echo "(peer exit $?: $*)"; }
  PR --precision fp32,bf16 --ckpt none,segments:4
  PR --precision tf32,fp16 --ckpt none
fi
if has attn32; then
  # issue 17: the fused attention's engines on fp32 data (MEMOPT_ATTN_FUSED32: the blocked cuBLAS GEMMs,
  # the default since 4ec1b80, against the flash kernels) in the whole GPT-2 124M step, fp32 and TF32, the
  # materialized rows beside, then PyTorch's fp32 / TF32 rows (both attention forms) in the same call
  csv="$R/attn32.csv"
  for prec in fp32 tf32; do
    for e in gemm own; do
      MEMOPT_ATTN_FUSED32=$e timeout 60 $M run --preset gpt2-124m --precision $prec --attn fused --steps 10 --warmup 3 \
        --csv "$csv" 2>&1 | grep -E "step:|peak alloc|error" | sed "s/^/$prec fused $e: /"
    done
    timeout 60 $M run --preset gpt2-124m --precision $prec --attn materialized --steps 10 --warmup 3 --csv "$csv" 2>&1 |
      grep -E "step:|peak alloc|error" | sed "s/^/$prec materialized: /"
  done
  PYTHONUNBUFFERED=1 timeout 200 python3 bench/peers/torch_gpt.py --preset gpt2-124m --csv "$R/torch-attn32.csv" \
    --attn materialized,fused --precision fp32,tf32 2>&1 | tail -8
fi
if has attncudnn; then
  # the 16-bit fused attention on the suite's kernels and on cuDNN's fused SDPA (MEMOPT_ATTN_IMPL), in
  # the whole GPT-2 124M bf16 step (B 8 T 1024 and T 2048 B 4; under "targets" also GPT-2 350M B 4),
  # beside PyTorch's SDPA step
  csv="$R/$gk-attn-impl.csv"
  shapes=("--preset gpt2-124m --seq 1024 --batch 8")
  [ "${ATTN_T2048:-1}" = 1 ] && shapes+=("--preset gpt2-124m --seq 2048 --batch 4")
  has targets && shapes+=("--preset gpt2-350m --seq 1024 --batch 4") # issue 17's 350M row, measured nowhere else
  for shape in "${shapes[@]}"; do
    for impl in own cudnn; do
      MEMOPT_ATTN_IMPL=$impl timeout 90 $M run --precision bf16 --attn fused $shape --steps 10 --warmup 3 \
        --csv "$csv" 2>&1 | grep -E "step:|peak alloc|dry-backend|error" | sed "s/^/bf16 fused $shape $impl: /"
    done
  done
  for shape in "${shapes[@]}"; do
    PYTHONUNBUFFERED=1 timeout 90 python3 bench/peers/torch_gpt.py --csv "$R/torch-$gk-attn-impl.csv" \
      --attn fused --precision bf16 $shape 2>&1 | tail -1
  done
fi
if has targets; then
  # The open issues' headline rows, each beside the PyTorch peer in the same call: stages resnetfast
  # (ResNet-50 batch 128's six rows, issue 16) and attncudnn (GPT-2 124M bf16 fused, own kernels and cuDNN's
  # SDPA, T 1024 and 2048, issue 17) ran above; here a second fp32 none / segments:4 round of both (the
  # checkpointing overhead from two rounds), plan --validate on the six rows, and the tf32 / fp32 fused GPT
  # rows. About 230 s in all on an H100.
  for ck in none segments:4; do
    timeout 60 $M run --model resnet --preset resnet50 --batch 128 --steps 10 --warmup 3 --precision fp32 --ckpt $ck \
      --csv "$R/$gk-resnet50-round2.csv" 2>&1 | grep -E "step:|recompute|error" | sed "s/^/round 2 fp32 $ck: /"
  done
  PYTHONUNBUFFERED=1 timeout 80 python3 bench/peers/torch_resnet.py --preset resnet50 --batch 128 \
    --csv "$R/torch-$gk-resnet50-round2.csv" --precision fp32 --ckpt none,segments:4 || echo "(peer exit $?: round 2)"
  $M plan --validate "$R/$gk-resnet50-fast.csv" --out-dir "$R/targets-validate" 2>&1 | grep -E "peak memory:|step time:"
  for prec in tf32 fp32; do
    timeout 90 $M run --preset gpt2-124m --attn fused --precision $prec --steps 10 --warmup 3 --csv "$R/$gk-attn32-fused.csv" \
      2>&1 | grep -E "step:|peak alloc|error" | sed "s/^/$prec fused: /"
  done
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/peers/torch_gpt.py --preset gpt2-124m --csv "$R/torch-$gk-attn32-fused.csv" \
    --attn fused --precision tf32,fp32 2>&1 | tail -2
fi
if has tune; then
  # MEMOPT_GEMM_TUNE=1 (lt_gemm_cuda.c): each new cuBLASLt plan times the heuristic's top candidates and
  # prints a kernels/lt_algo_table.c line for the fastest; the shapes of every row of the gpt stage
  for cfg in "fp32" "tf32" "bf16" "fp16" "fp32 --accum 2" "fp32 --accum 4" "bf16 --accum 2" "bf16 --accum 4"; do
    set -- $cfg
    echo "== tune: --precision $*"
    MEMOPT_GEMM_TUNE=1 $M run --preset gpt2-124m --precision "$@" --steps 10 --warmup 3 2>&1 \
      | tee -a "$R/tune.log" | grep -E "step:|lt-tune: \{" | sed 's/^lt-tune: /    /'
  done
fi
if has abx; then
  # interleaved A/B of this pass: the stored / tuned GEMM choices and the fused dpreatt (fp32)
  csv="$R/abx.csv"
  for rep in 1 2; do for prec in fp32 tf32 bf16; do
    vs="default MEMOPT_GEMM_TABLE=0"
    [ $prec = fp32 ] && vs="$vs MEMOPT_ATTN_DPRE=0"
    for v in $vs; do
      env $([ $v = default ] || echo $v) $M run --preset gpt2-124m --precision $prec \
        --steps 10 --warmup 3 --csv "$csv" 2>/dev/null | grep -E "step:|loss:" | sed "s/^/$prec $v rep $rep: /"
    done
  done; done
fi
if has ceab; then
  # the fp32 cross-entropy's register kernel against the loop kernel (MEMOPT_CE=loop), interleaved, then
  # one 30-step run and the profile at the default
  (cd $B && timeout 200 ./gpu_ops_basic >"$R/gpu_ops_basic.log" 2>&1; echo "gpu_ops_basic exit $?: $(tail -1 "$R/gpu_ops_basic.log")") &
  p1=$!
  (cd $B && timeout 200 ./gpu_gpt >"$R/gpu_gpt.log" 2>&1; echo "gpu_gpt exit $?: $(tail -1 "$R/gpu_gpt.log")") &
  p2=$!
  wait $p1 $p2
  grep -E "crossentropy|FAIL" "$R/gpu_ops_basic.log" | head -20
  for rep in 1 2; do for v in default MEMOPT_CE=loop; do
    env $([ $v = default ] || echo $v) $M run --preset gpt2-124m --precision fp32 --steps 10 --warmup 3 \
      --csv "$R/ceab.csv" | grep -E "step:|loss:" | sed "s/^/fp32 $v rep $rep: /"
  done; done
  $M run --preset gpt2-124m --precision fp32 --steps 30 --warmup 5 --csv "$R/ceab.csv" | grep -E "step:" | sed "s/^/fp32 30 steps: /"
  $M run --preset gpt2-124m --precision fp32 --profile --steps 10 --warmup 3 | grep -E "step:|profile"
fi
if has probe; then
  [ -x $B/memopt_probe_gemm_algos ] && timeout 240 $B/memopt_probe_gemm_algos fp32 bf16 2>&1 | tee "$R/probe-gemm-algos.log"
  for prec in fp32 bf16; do
    timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base --log-file "$R/ncu-$prec.csv" \
      $B/memopt run --preset gpt2-124m --precision $prec --steps 1 --warmup 0 >"$R/ncu-$prec.out" 2>&1
    echo "ncu $prec exit $?: $(wc -l <"$R/ncu-$prec.csv") lines"
    python3 tools/ncu_sum.py "$R/ncu-$prec.csv" 2>&1 | head -45
    $B/memopt run --preset gpt2-124m --precision $prec --profile --steps 10 --warmup 3 | grep -E "step:|profile"
  done
fi
if has gputest; then
  for t in gpu_gpt_split gpu_gpt gpu_gpt_mixed gpu_attention_chunks gpu_attention_fused_mixed; do
    (cd $B && timeout 300 ./$t >"$R/$t.log" 2>&1; echo "$t exit $?: $(tail -1 "$R/$t.log")")
  done
  grep -hiE "median|ms \(|TFLOP" $R/gpu_attention_chunks.log $R/gpu_attention_fused_mixed.log | head -40
  grep -hE "^ *(tp|pp|nccl|local|split|activation|Korthikanti|attn)" $R/gpu_gpt_split.log | head -30
fi
if has alloc && [ -x $B/memopt_bench_alloc ]; then
  $B/memopt_bench_alloc --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
    --benchmark_out="$R/bench_alloc.json" --benchmark_out_format=json 2>&1 | tail -40
fi
if has gpt; then
  csv="$R/h200-gpt2-124m.csv"
  r() { $M run --preset gpt2-124m --steps 10 --warmup 3 --csv "$csv" "$@" || echo "(exit $?: run $*)"; }
  for prec in fp32 tf32 bf16 fp16; do for attn in materialized fused; do r --precision $prec --attn $attn; done; done
  for prec in fp32 bf16; do
    for ck in full sqrt selective every:2; do r --precision $prec --ckpt $ck; done
    for k in 2 4; do r --precision $prec --accum $k; done
  done
  r --precision bf16 --attn fused --ckpt full
  r --precision tf32 --ckpt full
  for al in async raw; do r --precision tf32 --alloc $al; done
  r --precision fp32 --cap 8GiB
  for prec in fp32 tf32 bf16; do $M run --preset gpt2-124m --precision $prec --profile --steps 10 --warmup 3 | grep -E "step:|profile"; done
  $M run --preset gpt2-124m --precision bf16 --attn fused --profile --steps 10 --warmup 3 | grep -E "step:|profile"
fi
if has regress; then
  # the GPU regression baseline remade, then the set run again and compared with it (same call)
  bash bench/gpu_regress.sh --build $B --make-baseline 2>&1 | grep -vE "^memopt run|strategy:" | tail -20
  cp results/baseline-h200.csv results/baseline-h200.md "$R/"
  bash bench/gpu_regress.sh --build $B 2>&1 | tail -14
  echo "gpu_regress compare exit ${PIPESTATUS[0]}"
  cp results/gpu-regress-latest.csv "$R/h200-regress-repeat.csv"
fi
if has headline; then
  # the split model's GPU test, then the eight unsplit precision x attention rows (a subset of stage gpt)
  (cd $B && timeout 100 ./gpu_gpt_split >"$R/gpu_gpt_split.log" 2>&1; echo "gpu_gpt_split exit $?: $(tail -1 "$R/gpu_gpt_split.log")")
  for prec in fp32 tf32 bf16 fp16; do for attn in materialized fused; do
    $M run --preset gpt2-124m --steps 10 --warmup 3 --precision $prec --attn $attn --csv "$R/$gk-gpt2-124m-headline.csv" \
      | grep -E "step:|peak alloc" | sed "s/^/$prec $attn: /"
  done; done
fi
if has shard; then
  # issue 20's rows on the one GPU: --offload optimizer beside none (fp32, bf16), then --dp 2 --zero 0..3
  # with the local communicator (the two ranks as threads on this GPU), into h200-shard.csv
  csv="$R/h200-shard.csv"
  for prec in fp32 bf16; do for off in none optimizer; do
    timeout 120 $M run --preset gpt2-124m --precision $prec --offload $off --steps 10 --warmup 3 --csv "$csv" \
      | grep -E "step:|peak alloc|host|offload" | sed "s/^/$prec offload $off: /"
  done; done
  for z in 0 1 2 3; do
    timeout 120 $M run --preset gpt2-124m --precision fp32 --dp 2 --zero $z --steps 10 --warmup 3 --csv "$csv" \
      | grep -E "step:|peak alloc|rank|comm" | sed "s/^/fp32 dp 2 zero $z: /"
  done
  # --sp beside plain tp (two ranks as threads on this GPU, local communicator): per-rank peaks and time
  for sp in 0 1; do
    timeout 120 $M run --preset gpt2-124m --precision bf16 --tp 2 --sp $sp --steps 10 --warmup 3 --csv "$csv" \
      | grep -E "step:|peak alloc|rank|comm" | sed "s/^/bf16 tp 2 sp $sp: /"
  done
  # --offload activations beside the same checkpointing without it: GPT-2 124M fp32 and bf16 ckpt full,
  # the MLP's mlp-act bf16 ckpt full, ResNet-50 batch 128 bf16 ckpt full (the copy stream's busy time and
  # the compute stream's stall are in the row: offload_copy_ms, offload_stall_ms)
  for a in "--preset gpt2-124m --precision fp32" "--preset gpt2-124m --precision bf16" \
           "--model mlp --preset mlp-act --precision bf16" "--model resnet --preset resnet50 --batch 128 --precision bf16"; do
    for off in none activations; do
      timeout 120 $M run $a --ckpt full --offload $off --steps 10 --warmup 3 --csv "$csv" \
        | grep -E "step:|peak alloc|offload|copy stream" | sed "s/^/$(echo $a | awk '{print $2, $NF}') ckpt full offload $off: /"
    done
  done
fi
if has offopt; then
  # --offload optimizer's update at its default (8 host threads since session 12) against its knobs
  # (strategies/offload_update.h), fp32 and bf16, interleaved twice, into offload-update.csv (the knobs
  # column tells the rows apart; a row always records its thread count). OFFOPT_KNOBS: the settings
  # compared, ';' between them, "-" the default (session 11's set, which chose it:
  # "-;MEMOPT_OFFLOAD_THREADS=8;MEMOPT_OFFLOAD_THREADS=8 MEMOPT_OFFLOAD_CHUNK=4194304" when 1 was the default)
  IFS=';' read -ra kns <<<"${OFFOPT_KNOBS:--;MEMOPT_OFFLOAD_THREADS=1}"
  for rep in 1 2; do for prec in fp32 bf16; do
    # the step without offload beside them: plan --validate fits the device part to it, the host part to
    # the offloaded rows (leave-one-out)
    timeout 60 $M run --preset gpt2-124m --precision $prec --offload none --steps 5 --warmup 2 \
      --csv "$R/offload-update.csv" | grep -E "step:" | sed "s/^/$prec no offload rep $rep: /"
    for kn in "${kns[@]}"; do
      [ "$kn" = - ] && kn=
      env $kn timeout 150 $M run --preset gpt2-124m --precision $prec --offload optimizer --steps 5 --warmup 2 \
        --csv "$R/offload-update.csv" | grep -E "step:|update on" | sed "s/^/$prec ${kn:-default} rep $rep: /"
    done
  done; done
  $M plan --validate "$R/offload-update.csv" --out-dir "$R/offopt-validate" | tail -18
fi
if has revab; then
  # this revision's GPT-2 124M step against an older one built from .old/src-REV.tar, interleaved
  # (tools/ab_revisions.sh; MEMOPT_OLD_TAR names the tarball)
  bash tools/ab_revisions.sh "${MEMOPT_OLD_TAR:-$(ls .old/src-*.tar | head -1)}" $M "$R/revab.csv"
fi
if has resnetab; then
  # the ResNet-50 batch 128 step of this revision against an older one (RESNET_OLD_TAR), interleaved
  AB_ARGS="--model resnet --preset resnet50 --batch 128" AB_REPS=${RESNETAB_REPS:-2} \
    bash tools/ab_revisions.sh "${RESNET_OLD_TAR:?stage resnetab needs RESNET_OLD_TAR}" $M "$R/resnetab.csv" ${RESNETAB_ROWS:-fp32 tf32 bf16 fp16}
fi
if has profile; then
  # measured device time per profiler class beside the planner's prediction from the run's cost trace
  for pa in "fp32 materialized" "tf32 materialized" "bf16 materialized" "bf16 fused"; do
    set -- $pa
    $M run --preset gpt2-124m --steps 10 --warmup 3 --precision $1 --attn $2 --profile \
      | grep -E "step:|profile|predicted" | sed "s/^/$1 $2: /"
  done
fi
if has mlp; then
  # the MLP (second model): its GPU test, then rows for the shape where activations dominate (mlp-act)
  # and the one where parameters do (mlp-param), and plan --validate on them
  if ! has gpufast; then # gpufast already ran it
    (cd $B && timeout 300 ./gpu_mlp >"$R/gpu_mlp.log" 2>&1; echo "gpu_mlp exit $?: $(tail -1 "$R/gpu_mlp.log")")
  fi
  grep -E "FAIL|cuda:|cuda split|cuda tp|nccl" "$R/gpu_mlp.log" | head -30
  csv="$R/h200-mlp.csv"
  for pr in mlp-act mlp-param; do
    $M sweep --model mlp --preset $pr --precision fp32,tf32,bf16,fp16 --ckpt none,full,sqrt --steps 10 --warmup 3 \
      --csv "$csv" 2>&1 | tail -1
    $M sweep --model mlp --preset $pr --precision fp32,bf16 --accum 4 --steps 10 --warmup 3 --csv "$csv" 2>&1 | tail -1
  done
  $M plan --validate "$csv" --out-dir "$R" 2>&1 | tail -6
fi
if has split; then
  csv="$R/h200-gpt2-124m-split.csv"
  r() { $M run --preset gpt2-124m --precision fp32 --steps 10 --warmup 3 --csv "$csv" "$@" | grep -E "split:|communication|step:|peak alloc|error" || echo "(exit $?: run $*)"; }
  r --tp 1 --pp 1 --accum 4; r --tp 2; r --tp 4; r --pp 2 --accum 4; r --pp 4 --accum 4; r --tp 2 --pp 2 --accum 4
  r --comm nccl
fi
if has peer; then
  P() { PYTHONUNBUFFERED=1 python3 bench/peers/torch_gpt.py --preset gpt2-124m --csv "$R/torch-gpt2-124m.csv" "$@"; }
  P --attn materialized,fused --precision fp32,tf32,bf16,fp16
  P --attn materialized --precision fp32,bf16 --ckpt full,sqrt,selective,every:2
  P --attn materialized --precision fp32,bf16 --accum 4
fi
if has headlinepeer; then
  # the PyTorch peer's rows of the eight the stage headline runs (every precision x both attention forms), so
  # that the README's table has each ratio from one call (issue 17); the file named by the card
  PYTHONUNBUFFERED=1 timeout 300 python3 bench/peers/torch_gpt.py --preset gpt2-124m --csv "$R/torch-$gk-gpt2-124m-headline.csv" \
    --attn materialized,fused --precision fp32,tf32,bf16,fp16 2>&1 | tail -8
fi
if has peerlite; then
  # the PyTorch rows of the issue's targets (fp32 and TF32, both attention forms), beside the gpt stage
  PYTHONUNBUFFERED=1 timeout 240 python3 bench/peers/torch_gpt.py --preset gpt2-124m --csv "$R/torch-gpt2-124m.csv" \
    --attn materialized,fused --precision fp32,tf32 2>&1 | tail -8
fi
if has attnimpl; then
  # issue 17: the TF32 tensor-core fused attention (and MEMOPT_ATTN_TF32=0, the fp32 CUDA-core kernels, for
  # the A/B) against the cpu reference, then the step medians beside the PyTorch peer in the same call
  (cd $B && timeout 200 ./gpu_ops_gemm_attn >"$R/gpu_ops_gemm_attn.log" 2>&1; echo "gpu_ops_gemm_attn exit $?")
  grep -E "FAIL|fused (forward|backward) tf32|passed|failed" "$R/gpu_ops_gemm_attn.log" | head -40
  A() { $M run --preset gpt2-124m --steps 10 --warmup 3 --csv "$R/attnimpl.csv" "$@" | grep -E "step:" | sed "s/^/$* : /"; }
  A --precision tf32 --attn fused
  MEMOPT_ATTN_TF32=0 A --precision tf32 --attn fused
  A --precision fp32 --attn fused
  A --precision bf16 --attn fused
  A --precision bf16 --attn fused --seq 2048 --batch 4
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/peers/torch_gpt.py --preset gpt2-124m --csv "$R/torch-attnimpl.csv" \
    --attn fused --precision tf32,bf16 2>&1 | tail -4
  PYTHONUNBUFFERED=1 timeout 90 python3 bench/peers/torch_gpt.py --preset gpt2-124m --csv "$R/torch-attnimpl.csv" \
    --attn fused --precision bf16 --seq 2048 --batch 4 2>&1 | tail -2
fi
if has claims && [ "${MEMOPT_SESSION_BUDGET_S:-100000}" -gt "$SECONDS" ]; then
  $M claims --preset gpt2-124m --out-dir $R/claims 2>&1 | tail -40
fi
if has peerckpt && [ "${MEMOPT_PEER_BUDGET_S:-100000}" -gt "$SECONDS" ]; then
  # only the PyTorch checkpoint policies not yet measured (sqrt, selective, every:2)
  PYTHONUNBUFFERED=1 timeout 170 python3 bench/peers/torch_gpt.py --preset gpt2-124m --csv "$R/torch-gpt2-124m-ckpt.csv" \
    --attn materialized --precision fp32,bf16 --ckpt sqrt,selective,every:2 2>&1 | tail -12
fi
if has sweep; then
  $M sweep --preset gpt2-124m --precision fp32,tf32,bf16 --attn materialized,fused --ckpt none,full,selective --cap none,8GiB \
    --steps 5 --warmup 2 --csv $R/sweep.csv --benchmark_out=$R/sweep_gbench.json --benchmark_out_format=json 2>&1 | tail -5
fi
if has trace; then
  # The allocation timeline on the GPU: gpu_trace (cuda trace == dry trace, event for event), the
  # fp32 ckpt none / full traces with --summary, their figure data, and how long make bench takes.
  has gpufast || (cd $B && timeout 300 ./gpu_trace 2>&1 | tail -6) # gpufast already ran it
  for k in none full; do
    $M run --preset gpt2-124m --ckpt $k --steps 3 --warmup 2 --summary --trace $R/h200-trace-ckpt-$k.csv --csv $R/trace-rows.csv \
      2>&1 | grep -E "peak allocated|at the peak|fragmentation|trace:|inactive split|largest free"
  done
fi
if has bench; then
  # make bench's default set as a user runs it (the fresh folder under build-gpu/bench/), timed
  t0=$(date +%s)
  bash bench/run_bench.sh $B 2>&1 | tail -8
  echo "make bench (run_bench.sh): $(( $(date +%s) - t0 )) s"
  cp -r $B/bench "$R/bench" 2>/dev/null || true
fi
if has faults; then
  # every allocation of a tiny training step failed in turn on cuda (tests/gpu_alloc_faults.c); alone:
  # it checks that device-wide memory (cudaMemGetInfo) comes back after each failure
  if ! has gpufast; then # gpufast already ran it
    (cd $B && timeout 500 ./gpu_alloc_faults >"$R/gpu_alloc_faults.log" 2>&1; echo "gpu_alloc_faults exit $?: $(tail -1 "$R/gpu_alloc_faults.log")")
  fi
  grep -E "^fault injection|FAIL" "$R/gpu_alloc_faults.log" | head -40
fi
if has sanitize; then
  # compute-sanitizer memcheck (leak check), racecheck, initcheck, synccheck over every gpu_* test
  # binary, reduced (tools/gpu_sanitize.sh); sanitize.log is the committed log. The whole pass is more
  # than one device call: by tool is the way (session 12: memcheck of all 21 binaries took 53 s + 18 s,
  # 3 runs at once; racecheck is the slow one, four of its runs passed 128 s), SAN_TOOLS per call and the
  # logs concatenated; SAN_SHARD=i/n deals the runs out instead, SAN_BINS picks binaries
  rm -f "$OUT/sanitize.log"
  # SESSION_LIMIT (seconds since this script began): the stage takes what the earlier stages left of it,
  # less 20 s for the summary and the copy back, instead of a fixed SAN_BUDGET
  budget=${SAN_BUDGET:-220}
  [ -n "${SESSION_LIMIT:-}" ] && budget=$(( SESSION_LIMIT - ($(date +%s) - session_t0) - 20 ))
  echo "sanitize: budget ${budget} s"
  # host memory beside it (tools/host_mem_sampler.sh: racecheck holds tens of GiB a process), every 10 s
  mkdir -p "$R/sanitize"
  bash tools/host_mem_sampler.sh sample "$R/sanitize" "$R/sanitize/mem.log" 10 &
  sampler=$!
  SAN_BUDGET=$budget bash tools/gpu_sanitize.sh $B "$R/sanitize" "$OUT/sanitize.log"
  kill $sampler 2>/dev/null
  wait $sampler 2>/dev/null
  echo "sanitize: host memory $(bash tools/host_mem_sampler.sh summary "$R/sanitize/mem.log")"
  cp "$OUT/sanitize.log" "$R/sanitize.log"
fi
nvidia-smi --query-gpu=name,driver_version,memory.used,clocks.sm --format=csv
echo "== done $(date -u +%FT%TZ)"
