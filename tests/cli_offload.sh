#!/usr/bin/env bash
# --offload through the memopt binary: bad input exits 2 with one line naming the flag (activations:
# "not built yet"; with --dp / a split / a model other than gpt: refused with the reason); a dry and a
# cpu run of the same shape write the same host_bytes and device peak to the CSV (schema 4 on; 6 now), the
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

bad "--offload: unknown value 'foo' (accepted: none, optimizer)" run $S --backend dry --offload foo
bad "--offload activations: not built yet" run $S --backend dry --offload activations
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
check '[ "$(wc -l <"$tmp/rows")" -eq 8 ] && ! grep -qv " ok$" "$tmp/rows" && ! grep -qv "^6 " "$tmp/rows"' "8 ok rows of schema 6"
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

echo "cli_offload: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
