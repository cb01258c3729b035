#!/usr/bin/env bash
# --offload through the memopt binary: bad input exits 2 with one line naming the flag (activations
# without checkpoint segments; with --dp / a split / optimizer for a model other than gpt: refused with
# the reason); a dry and a cpu run of the same shape write the same host_bytes and device peak to the
# CSV (schema 5 on; 6 now), the
# offloaded run's device peak is lower than without offload by exactly m + v (+ the 16-bit master),
# and the run summary names host_bytes.
# Usage: cli_offload.sh path/to/memopt [source dir]
set -u
M="${1:?usage: cli_offload.sh path/to/memopt}"
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
S="--preset gpt2-124m --layers 1 --hidden 64 --heads 2 --batch 2 --seq 16 --vocab 97 --steps 1 --warmup 1"

bad() {
  local want="$1"
  shift
  "$M" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? lines
  lines=$(wc -l <"$tmp/err")
  if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && grep -qF -- "$want" "$tmp/err"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: memopt $*: exit $rc, $lines stderr lines, want exit 2 and one line with '$want':"
    sed 's/^/    /' "$tmp/err"
  fi
}

bad "--offload: unknown value 'foo' (accepted: none, optimizer, activations)" run $S --backend dry --offload foo
bad "--offload activations with --ckpt none" run $S --backend dry --offload activations
bad "--offload activations with --ckpt selective" run $S --backend dry --offload activations --ckpt selective
bad "--offload activations with --dp 1 --tp 2" run $S --backend dry --offload activations --ckpt full --tp 2
bad "--offload optimizer with --dp 2" run $S --backend dry --offload optimizer --dp 2
bad "--offload optimizer with --dp 1 --tp 2" run $S --backend dry --offload optimizer --tp 2
bad "--offload optimizer: model mlp" run --model mlp --preset mlp-small --backend dry --offload optimizer

for p in fp32 bf16; do
  for o in none optimizer; do
    for b in dry cpu; do
      if "$M" run $S --precision "$p" --ckpt full --accum 2 --offload "$o" --backend "$b" --csv "$tmp/r.csv" >"$tmp/out-$p-$o-$b" 2>"$tmp/err"; then
        pass=$((pass + 1))
      else
        fail=$((fail + 1)); echo "FAIL: run --precision $p --offload $o --backend $b:"; cat "$tmp/err"
      fi
    done
  done
  if grep -q "offload optimizer: host_bytes [1-9]" "$tmp/out-$p-optimizer-cpu"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: no host_bytes line in the $p summary"; cat "$tmp/out-$p-optimizer-cpu"; fi
done
# Rows in order (fp32 none dry, fp32 none cpu, fp32 opt dry, fp32 opt cpu, bf16 ...): schema, offload,
# host_bytes, peak, params.
awk -F, 'NR==1{for(i=1;i<=NF;i++)c[$i]=i; next}{print $c["schema_version"], $c["precision"], $c["offload"], $c["host_bytes"], $c["peak_allocated_bytes"], $c["params"], $c["status"]}' "$tmp/r.csv" >"$tmp/rows"
check() { if eval "$1"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $2"; cat "$tmp/rows"; fi; }
check '[ "$(wc -l <"$tmp/rows")" -eq 8 ] && ! grep -qv " ok$" "$tmp/rows" && ! grep -qv "^7 " "$tmp/rows"' "8 ok rows of schema 7"
k=0
while read -r _ prec off host peak np _; do
  eval "r${k}_host=$host r${k}_peak=$peak r${k}_np=$np r${k}_off=$off"
  k=$((k + 1))
done <"$tmp/rows"
for base in 0 4; do
  a=$base; b=$((base + 1)); c=$((base + 2)); d=$((base + 3))
  eval "ha=\$r${a}_host hb=\$r${b}_host hc=\$r${c}_host hd=\$r${d}_host pa=\$r${a}_peak pb=\$r${b}_peak pc=\$r${c}_peak pd=\$r${d}_peak np=\$r${a}_np"
  check '[ "$ha" = 0 ] && [ "$hb" = 0 ] && [ "$hc" = "$hd" ] && [ "$hc" -gt 0 ]' "rows $a..$d: host_bytes none 0, offload dry == cpu ($ha $hb $hc $hd)"
  check '[ "$pa" = "$pb" ] && [ "$pc" = "$pd" ]' "rows $a..$d: device peak dry == cpu ($pa $pb $pc $pd)"
  fb=$(( (np * 4 + 511) / 512 * 512 ))
  moved=$(( base ? 3 * fb : 2 * fb ))
  check '[ $((pa - pc)) -eq "$moved" ] && [ "$hc" -eq $((4 * fb)) ]' "rows $a..$d: device drop $((pa - pc)) (want $moved), host $hc (want $((4 * fb)))"
done

# The sweep keys an offloaded row apart from the same shape without offload (no --resume collision).
if "$M" sweep $S --backend dry --offload optimizer --csv "$tmp/s.csv" >"$tmp/out" 2>"$tmp/err" &&
   "$M" sweep $S --backend dry --csv "$tmp/s.csv" --resume >"$tmp/out" 2>"$tmp/err"; then
  check '[ "$(tail -n +2 "$tmp/s.csv" | wc -l)" -eq 2 ]' "sweep --resume: offload optimizer and none are two rows"
else
  fail=$((fail + 1)); echo "FAIL: sweep --offload optimizer:"; cat "$tmp/err"
fi

# --offload activations, every model: dry == cpu for the device peak and host_bytes; the device peak is
# lower than without offload, host_bytes is the offloaded segment inputs (all but the last segment's);
# the summary names the copy stream. 4 blocks in full checkpointing: 3 inputs offloaded and fetched back
# (the ResNet 2: its first segment's input is the max pool's output, which the stem's backward reads).
A_GPT="--preset gpt2-124m --layers 4 --hidden 64 --heads 2 --batch 2 --seq 16 --vocab 97"
A_MLP="--model mlp --layers 4 --hidden 64 --batch 8 --input 32 --classes 10"
A_RES="--model resnet --preset resnet-tiny"
for mdl in GPT MLP RES; do
  eval "shape=\$A_$mdl"
  for o in none activations; do
    for b in dry cpu; do
      if ! "$M" run $shape --ckpt full --steps 1 --warmup 1 --offload "$o" --backend "$b" --csv "$tmp/a-$mdl.csv" \
           >"$tmp/out-$mdl-$o-$b" 2>"$tmp/err"; then
        fail=$((fail + 1)); echo "FAIL: run $mdl --offload $o --backend $b:"; cat "$tmp/err"
      fi
    done
  done
  awk -F, 'NR==1{for(i=1;i<=NF;i++)c[$i]=i; next}{print $c["offload"], $c["host_bytes"], $c["peak_allocated_bytes"], $c["status"]}' \
    "$tmp/a-$mdl.csv" >"$tmp/rows"
  read -r _ h0 p0 s0 _ h1 p1 s1 _ h2 p2 s2 _ h3 p3 s3 <<<"$(tr '\n' ' ' <"$tmp/rows")"
  check '[ "$s0$s1$s2$s3" = okokokok ]' "$mdl: 4 ok rows"
  check '[ "$p0" = "$p1" ] && [ "$p2" = "$p3" ] && [ "$h2" = "$h3" ]' "$mdl: dry == cpu (peaks $p0 $p1 $p2 $p3, host $h2 $h3)"
  check '[ "$h2" -gt 0 ] && [ "$p2" -lt "$p0" ]' "$mdl: offloaded host_bytes $h2 > 0 and device peak $p2 < $p0"
  if grep -q "offload activations: host_bytes [1-9]" "$tmp/out-$mdl-activations-cpu" &&
     grep -q "copy stream: $( [ $mdl = RES ] && echo 4 || echo 6 ) copies" "$tmp/out-$mdl-activations-dry"; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL: $mdl: the summary lines"; cat "$tmp/out-$mdl-activations-dry"; fi
done

# claims with --offload activations: the checkpointed rows offload, ckpt none stays the baseline (its
# activation saving is measured against the plain ckpt none row: a number, larger than without offload)
C="--preset gpt2-124m --layers 4 --hidden 64 --heads 2 --batch 2 --seq 16 --vocab 97 --backend dry --steps 1 --warmup 0"
if "$M" claims $C --offload activations --out-dir "$tmp/cl-off" >"$tmp/cl-off.txt" 2>&1 &&
   "$M" claims $C --out-dir "$tmp/cl-none" >"$tmp/cl-none.txt" 2>&1 &&
   grep -q "have none to offload and run without it" "$tmp/cl-off.txt"; then
  a_off=$(awk -F, '$1=="checkpointing" && $2=="full"{print $4}' "$tmp/cl-off/claims_verdicts.csv")
  a_none=$(awk -F, '$1=="checkpointing" && $2=="full"{print $4}' "$tmp/cl-none/claims_verdicts.csv")
  if [ -n "$a_off" ] && [ -n "$a_none" ] && awk -v a="$a_off" -v b="$a_none" 'BEGIN{exit !(a > b)}'; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1)); echo "FAIL: claims --offload activations: full's activation saving '$a_off', without offload '$a_none'"
  fi
else
  fail=$((fail + 1)); echo "FAIL: claims --offload activations:"; cat "$tmp/cl-off.txt"
fi

echo "cli_offload: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
