#!/usr/bin/env bash
# Session 36, call 1. Build; the GPU tests of what changed since session 35's last call (the wide bias-gradient
# engine on cp.async, the fp16 column-sum check; the summing LayerNorm backward, MEMOPT_LN_DSUM); the bf16 step
# under default / MEMOPT_LN_DSUM=0 / MEMOPT_DBIAS=wide interleaved; on an H200 the headline beside the peer;
# ncu of the bias-gradient kernels; racecheck of the LayerNorm kernels. env: REV, LIMIT
set -uo pipefail
T0=$(date +%s); LIMIT=${LIMIT:-580}
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
export MEMOPT_GIT_REV=$REV
R=/tmp/r36; rm -rf $R; mkdir -p $R
save() { tar czf $OUT/results.tgz -C $R . 2>/dev/null; }
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "card: $card"
nvidia-smi --query-gpu=driver_version,clocks.max.sm --format=csv,noheader
gk=gpu; case "$card" in *H200*) gk=h200;; *H100*) gk=h100;; esac
bash tools/gpu_session.sh /tmp/s1 build > /dev/null 2>&1
grep -E "build:|error" /tmp/s1/session.log | head -5
echo "== tests, $(left) s left"
T=(gpu_ops_gemm_attn_mixed gpu_ops_mixed gpu_gpt_mixed gpu_attention_fused_mixed)
(cd build-gpu || exit
 for t in "${T[@]}"; do timeout 220 ./$t > $R/$t.log 2>&1 & done; wait
 for t in "${T[@]}"; do echo "$t: $(tail -1 $R/$t.log)"; done)
grep -hE "FAIL" $R/gpu_*.log | head -8
grep -hE "MEMOPT_LN_DSUM|one wave, summing" $R/gpu_gpt_mixed.log $R/gpu_ops_mixed.log | sort | uniq -c | head -8
save
echo "== A/B default / LN_DSUM=0 / DBIAS=wide, $(left) s left"
IFS=';' read -r -a shapes <<< "--preset gpt2-124m;--preset gpt2-350m --batch 4;--preset gpt2-124m --seq 2048 --batch 4"
for rep in 1 2; do for shape in "${shapes[@]}"; do for v in default dsum0 wide; do
  e="MEMOPT_LN_DSUM=1"; [ $v = dsum0 ] && e="MEMOPT_LN_DSUM=0"; [ $v = wide ] && e="MEMOPT_DBIAS=wide"
  env $e MEMOPT_ATTN_IMPL=cudnn timeout 60 build-gpu/memopt run $shape --attn fused --precision bf16 --steps 20 \
    --warmup 3 --csv "$R/$gk-lndsum-ab.csv" 2>&1 | grep -E "step:|peak alloc" | tr '\n' ' ' | sed "s/^/$shape $v rep $rep: /"; echo
done; done; done
save
if [ "$gk" = h200 ] && [ $(left) -gt 230 ]; then
  echo "== H200: headline rows + the peer's, $(left) s left"
  for prec in fp32 tf32 bf16 fp16; do for attn in materialized fused; do
    timeout 40 build-gpu/memopt run --preset gpt2-124m --steps 10 --warmup 3 --precision $prec --attn $attn \
      --csv "$R/$gk-gpt2-124m-headline.csv" 2>&1 | grep -E "step:|peak alloc" | tr '\n' ' ' | sed "s/^/$prec $attn: /"; echo
  done; done
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/peers/torch_gpt.py --preset gpt2-124m \
    --csv "$R/torch-$gk-gpt2-124m-headline.csv" --attn materialized,fused --precision fp32,tf32,bf16,fp16 2>&1 | tail -10
  save
fi
echo "== profile default / LN_DSUM=0 / wide, $(left) s left"
for v in default dsum0 wide; do
  e="MEMOPT_LN_DSUM=1"; [ $v = dsum0 ] && e="MEMOPT_LN_DSUM=0"; [ $v = wide ] && e="MEMOPT_DBIAS=wide"
  env $e MEMOPT_ATTN_IMPL=cudnn timeout 40 build-gpu/memopt run --preset gpt2-124m --attn fused --precision bf16 \
    --steps 10 --warmup 3 --profile 2>&1 | grep -E "step:|profile \(" | sed "s/^/$v: /"
done
if [ $(left) -gt 100 ]; then
  echo "== ncu of the bias-gradient and LayerNorm-backward kernels, $(left) s left"
  for v in default wide; do
    e="MEMOPT_LN_DSUM=1"; [ $v = wide ] && e="MEMOPT_DBIAS=wide"
    env $e MEMOPT_ATTN_IMPL=cudnn timeout 45 ncu --clock-control none --cache-control none -k regex:"mm_dbias|layernorm_backward" \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --print-units base --log-file $R/ncu-$v.csv \
      build-gpu/memopt run --preset gpt2-124m --attn fused --precision bf16 --steps 1 --warmup 0 > $R/ncu-$v.out 2>&1
    echo "ncu $v exit $?"
    python3 tools/ncu_sum.py $R/ncu-$v.csv 2>&1 | head -8 | sed "s/^/$v: /"
  done
  save
fi
if [ $(left) -gt 60 ]; then
  echo "== racecheck gpu_ops_mixed (reduced), $(left) s left"
  (cd build-gpu && MEMOPT_TEST_REDUCED=1 MEMOPT_TEST_UNDER_SANITIZER=1 timeout $(( $(left) - 15 )) \
    compute-sanitizer --tool racecheck --error-exitcode 9 ./gpu_ops_mixed > $R/racecheck-ops-mixed.log 2>&1
   echo "racecheck exit $?: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $R/racecheck-ops-mixed.log | tail -1) $(tail -1 $R/racecheck-ops-mixed.log)")
fi
save
echo "== done at $(( $(date +%s) - T0 )) s"
