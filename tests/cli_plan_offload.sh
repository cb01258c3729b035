#!/usr/bin/env bash
# --offload as an axis of sweep and plan, and the plan of an offloaded configuration.
# Sweep: --offload none,optimizer,activations x --ckpt none,full gives six rows in the grid's order
# (offload the fastest axis), activations without checkpoint segments an invalid row with the reason,
# optimizer for the MLP likewise; the rows of offload none keep their configuration keys (a resumed
# sweep without the flag finds them done).
# Plan: each offload value is planned with its exact dry device peak (equal to memopt run --backend
# dry's) and host_bytes; activations and optimizer peak lower than none; the optimizer's time is not
# less than none's and is none's device work plus the copies and the host AdamW of its cost trace
# (12 B a parameter over the host link at the catalog's 64 GB/s a direction, 28 B at the stated host
# rate); the copy stream's bytes are every offloaded segment input out and back, exposed only past
# the blocks' compute; the comparison suggests the fastest that fits; --csv and --validate carry the
# offload. Bad input exits 2 with one line naming the flag; a catalog entry's host_gbs is checked.
# Usage: cli_plan_offload.sh path/to/memopt source-dir
set -u
M="${1:?usage: cli_plan_offload.sh path/to/memopt source-dir}"
SRC="${2:?usage: cli_plan_offload.sh path/to/memopt source-dir}"
case "$M" in /*) ;; *) M="$(cd "$(dirname "$M")" && pwd)/$(basename "$M")" ;; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
check() { if eval "$1"; then ok; else bad "$2"; fi; } # EXPR MESSAGE; a command's status: rc=$? first
has() { grep -qE -- "$1" "$tmp/out" && ok || { bad "output lacks /$1/"; sed 's/^/    /' "$tmp/out" | head -60; }; }
refused() { # WANT ARGS...: exit 2, one stderr line containing WANT, nothing on stdout
  local want="$1"; shift
  "$M" "$@" >"$tmp/o" 2>"$tmp/e"
  local rc=$?
  if [ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/e")" -eq 1 ] && grep -qF -- "$want" "$tmp/e" && [ ! -s "$tmp/o" ]; then ok; else
    bad "memopt $*: exit $rc, want 2, one line with '$want' and no stdout:"; sed 's/^/    /' "$tmp/e" "$tmp/o" | head -5; fi
}
# CSV columns by name (python's csv module: the detail column is quoted and holds commas).
cols() { python3 -c 'import csv,sys
for r in csv.DictReader(open(sys.argv[1])): print("|".join(r[c] for c in sys.argv[2:]))' "$@"; }

cd "$SRC" # the catalog and results/ are found from the source tree, as a user runs it

# ---- 1. sweep ---------------------------------------------------------------------------------------
S="--preset gpt2-124m --layers 4 --hidden 64 --heads 2 --batch 2 --seq 16 --vocab 97 --steps 1 --warmup 1 --backend dry"
# shellcheck disable=SC2086
"$M" sweep $S --offload none,optimizer,activations --ckpt none,full --csv "$tmp/s.csv" >"$tmp/out" 2>&1
rc=$?
check '[ $rc -eq 0 ]' "sweep --offload none,optimizer,activations exited non-zero"
cols "$tmp/s.csv" ckpt offload status host_bytes detail >"$tmp/rows"
want="none|none|ok|0
none|optimizer|ok|+
none|activations|invalid||--offload activations with --ckpt none
full|none|ok|0
full|optimizer|ok|+
full|activations|ok|+"
i=0
while IFS='|' read -r ck off st host det; do
  i=$((i + 1))
  w=$(sed -n "${i}p" <<<"$want")
  IFS='|' read -r wck woff wst whost wdet <<<"$w"
  okrow=1
  [ "$ck|$off|$st" = "$wck|$woff|$wst" ] || okrow=0
  case "$whost" in +) [ "${host:-0}" -gt 0 ] || okrow=0 ;; *) [ "$host" = "$whost" ] || okrow=0 ;; esac
  [ -z "$wdet" ] || case "$det" in *"$wdet"*) ;; *) okrow=0 ;; esac
  check '[ $okrow -eq 1 ]' "sweep row $i: '$ck|$off|$st|$host|${det:0:60}', want '$w'"
done <"$tmp/rows"
check '[ "$i" -eq 6 ]' "sweep wrote $i rows, want 6"
# The device peaks: optimizer below none (ckpt none and full), activations below none (ckpt full).
cols "$tmp/s.csv" peak_allocated_bytes >"$tmp/peaks"
mapfile -t pk <"$tmp/peaks"
check '[ "${pk[1]}" -lt "${pk[0]}" ] && [ "${pk[4]}" -lt "${pk[3]}" ] && [ "${pk[5]}" -lt "${pk[3]}" ]' \
  "sweep peaks: none ${pk[0]} optimizer ${pk[1]}; full none ${pk[3]} optimizer ${pk[4]} activations ${pk[5]}"
# offload none keeps its keys: the same grid without the flag, resumed, has nothing left to run.
# shellcheck disable=SC2086
"$M" sweep $S --ckpt none,full --csv "$tmp/s.csv" --resume >"$tmp/out" 2>&1
rc=$?
check '[ $rc -eq 0 ] && [ "$(tail -n +2 "$tmp/s.csv" | wc -l)" -eq 6 ]' "a resumed sweep without --offload ran rows again: $(cat "$tmp/out")"
has "2 combinations, 2 already in .* \(--resume\): 0 to run"
# The MLP: no offloaded update (invalid, with the reason); its activations can go to the host.
"$M" sweep --model mlp --layers 4 --hidden 64 --batch 8 --input 32 --classes 10 --steps 1 --warmup 1 --backend dry \
  --ckpt full --offload none,optimizer,activations --csv "$tmp/m.csv" >"$tmp/out" 2>&1
rc=$?
check '[ $rc -eq 0 ]' "sweep --model mlp --offload exited non-zero"
cols "$tmp/m.csv" offload status detail >"$tmp/rows"
check 'sed -n 1p "$tmp/rows" | grep -q "^none|ok|" && sed -n 2p "$tmp/rows" | grep -q "^optimizer|invalid|--offload optimizer: model mlp has no offloaded update" && sed -n 3p "$tmp/rows" | grep -q "^activations|ok|"' \
  "mlp sweep rows: $(cat "$tmp/rows")"
# A grid file takes the list too.
printf -- '--preset gpt2-124m\nlayers 4\nhidden 64\nheads 2\nbatch 2\nseq 16\nvocab 97\nckpt full\noffload=none,activations\n' >"$tmp/g.grid"
"$M" sweep --grid "$tmp/g.grid" --backend dry --steps 1 --warmup 1 --csv "$tmp/g.csv" >"$tmp/out" 2>&1
check '[ "$(cols "$tmp/g.csv" offload status | tr "\n" " ")" = "none|ok activations|ok " ]' "grid --offload: $(cols "$tmp/g.csv" offload status)"

# ---- 2. plan ----------------------------------------------------------------------------------------
# gpt2-124m fp32 (B 8, T 1024, C 768, L 12), full checkpointing, on an H200 (host link 64 GB/s a direction).
P="--gpu h200 --preset gpt2-124m --precision fp32 --attn materialized --ckpt full --accum 1"
# shellcheck disable=SC2086
"$M" plan $P --offload none,optimizer,activations --csv "$tmp/plan.csv" >"$tmp/out" 2>"$tmp/err"
rc=$?
check '[ $rc -eq 0 ] && [ ! -s "$tmp/err" ]' "plan --offload exited non-zero or wrote to stderr: $(cat "$tmp/err")"
cp "$tmp/out" "$tmp/plan.txt"
# per offload value (the asked block's): device peak, host memory, step ms
asked() { # OFFLOAD FIELD: peak | host | step
  awk -v o="$1" -v f="$2" '
    /^asked: /{cur = "none"; if (match($0, /offload [a-z]+$/)) cur = substr($0, RSTART + 8)}
    cur == o && f == "peak" && /predicted peak \(dry backend, exact\): allocated/{for (i = 1; i <= NF; i++) if ($i == "allocated") {print $(i + 1); exit}}
    cur == o && f == "host" && /^  offload [a-z]+: host memory/{print $5; exit}
    cur == o && f == "step" && /^  predicted step/{print $3; exit}' "$tmp/plan.txt"; }
for o in none optimizer activations; do
  # shellcheck disable=SC2086
  "$M" run --backend dry --preset gpt2-124m --ckpt full --offload "$o" --steps 1 --warmup 1 --csv "$tmp/run-$o.csv" >/dev/null 2>&1
  IFS='|' read -r rpeak rhost params <<<"$(cols "$tmp/run-$o.csv" peak_allocated_bytes host_bytes params)"
  check '[ -n "$(asked $o peak)" ] && [ "$(asked $o peak)" = "$rpeak" ]' "plan's $o peak $(asked $o peak) != memopt run --backend dry's $rpeak"
  [ "$o" = none ] || check '[ "$(asked $o host)" = "$rhost" ] && [ "$rhost" -gt 0 ]' "plan's $o host memory $(asked $o host) != the run's host_bytes $rhost"
done
n=$params
check '[ "$(asked optimizer peak)" -lt "$(asked none peak)" ] && [ "$(asked activations peak)" -lt "$(asked none peak)" ]' \
  "peaks: none $(asked none peak), optimizer $(asked optimizer peak), activations $(asked activations peak)"
awk -v a="$(asked none step)" -v b="$(asked optimizer step)" -v c="$(asked activations step)" 'BEGIN{exit !(b >= a && c >= a)}' && ok ||
  bad "step ms: none $(asked none step), optimizer $(asked optimizer step) (must not be less), activations $(asked activations step)"
# The optimizer's copies and host work, from the trace: 12 B and 28 B a parameter (fp32), at 64 GB/s and, on
# the default 8 threads, MO_PLAN_HOST_GBS_MAX = 34 GB/s (5.5 a thread), times the host scale that committed
# offloaded rows of the GPU's kind give ("host rate x S"; none: "as assumed", 1).
line=$(grep -A1 "^  offloaded update:" "$tmp/plan.txt" | tr '\n' ' ')
cb=$(sed -n 's/.*offloaded update: \([0-9]*\) B a step.*/\1/p' <<<"$line")
cms=$(sed -n 's/.* GB\/s a direction = \([0-9.]*\) ms;.*/\1/p' <<<"$line")
hb=$(sed -n 's/.*the host AdamW: \([0-9]*\) B of host memory traffic at \([0-9.]*\) GB\/s.*/\1/p' <<<"$line")
hrate() { sed -n "s/.*host memory traffic at \([0-9.]*\) GB\/s = [0-9.]* ms ($1 thread.*/\1/p"; }
hms_of() { sed -n "s/.*host memory traffic at [0-9.]* GB\/s = \([0-9.]*\) ms ($1 thread.*/\1/p"; }
hscale() { local s; s=$(sed -n 's/.*host rate x \([0-9.]*\),.*/\1/p'); echo "${s:-1}"; }
line3=$(grep -A2 "^  offloaded update:" "$tmp/plan.txt" | tr '\n' ' ')
hr=$(hrate 8 <<<"$line") hms=$(hms_of 8 <<<"$line") hs=$(hscale <<<"$line3")
check '[ "$cb" = $((12 * n)) ] && [ "$hb" = $((28 * n)) ]' "offloaded update: copies $cb B (want $((12 * n))), host work $hb B (want $((28 * n)))"
awk -v b="$cb" -v ms="$cms" -v h="$hb" -v hm="$hms" -v r="$hr" -v s="$hs" 'BEGIN{d1 = ms - 1e3 * b / 64e9;
  d2 = hm / (1e3 * h / (r * 1e9)) - 1; d3 = r / (34 * s) - 1
  tol = 0.003 + 0.005 / s # the printed rate (3 digits) and scale (2 decimals)
  exit !(d1 < 0.051 && d1 > -0.051 && hm != "" && d2 < 0.003 && d2 > -0.003 && d3 < tol && d3 > -tol)}' && ok ||
  bad "offloaded update times: copies $cms ms for $cb B at 64 GB/s, host '$hms' ms for $hb B at '$hr' GB/s (want 34 x $hs, 8 threads)"
# MEMOPT_OFFLOAD_THREADS=1: one thread's 5.5 GB/s; 4: 22
for t in 1 4; do
  # shellcheck disable=SC2086
  MEMOPT_OFFLOAD_THREADS=$t "$M" plan $P --offload optimizer >"$tmp/plan-t$t.txt" 2>&1
  want=$(awk -v t=$t 'BEGIN{print t == 1 ? 5.5 : 22}')
  l=$(grep -A1 "^  offloaded update:" "$tmp/plan-t$t.txt" | tr '\n' ' ')
  r=$(hrate $t <<<"$l") h1=$(hms_of $t <<<"$l")
  awk -v h="$hb" -v hm="$h1" -v r="$r" -v w="$want" -v s="$hs" 'BEGIN{d = hm / (1e3 * h / (r * 1e9)) - 1; d2 = r / (w * s) - 1
    tol = 0.003 + 0.005 / s; exit !(hm != "" && d < 0.003 && d > -0.003 && d2 < tol && d2 > -tol)}' && ok ||
    bad "MEMOPT_OFFLOAD_THREADS=$t: host '$h1' ms for $hb B at '$r' GB/s (want $want x $hs): $l"
done
# step(optimizer) - step(none) = the copies + the host AdamW - the device AdamW (28 B a parameter at the
# H200's 4800 GB/s over the memory efficiency: under 2 ms here)
awk -v a="$(asked none step)" -v b="$(asked optimizer step)" -v c="$cms" -v h="$hms" 'BEGIN{d = b - a - c - h; exit !(d <= 0.15 && d > -2)}' && ok ||
  bad "optimizer step $(asked optimizer step) ms is not none's $(asked none step) plus copies $cms and host $hms (less the device AdamW)"
has "both added to the step whole: the copies are synchronous and the update waits for the host \(no overlap\)"
# The copy stream: 11 segment inputs of (8, 1024, 768) fp32, out and back; hidden behind the blocks' compute here.
cs=$(sed -n 's/^  copy stream: \([0-9]*\) B a step.*/\1/p' "$tmp/plan.txt")
check '[ "$cs" = $((2 * 11 * 8 * 1024 * 768 * 4)) ]' "copy stream $cs B, want $((2 * 11 * 8 * 1024 * 768 * 4))"
has "^    backward: 0.0 ms exposed, added to the step"
check '[ "$(asked activations step)" = "$(asked none step)" ]' "activations step $(asked activations step) != none's $(asked none step) with nothing exposed"
has "^offload compared: fp32, attn materialized, ckpt full, accum 1, batch 8"
has "^  suggested: --offload none, the fastest that fits"
has "^strategy combinations at batch 8 with --offload activations: "
has "combinations skipped: --offload activations needs checkpoint segments"
# --csv: the offload and the host bytes of every row
check '[ "$(head -1 "$tmp/plan.csv" | awk -F, "{print \$(NF-1), \$NF}")" = "offload host_bytes" ]' "plan --csv header: $(head -1 "$tmp/plan.csv")"
check '[ "$(cols "$tmp/plan.csv" offload | sort -u | tr "\n" " ")" = "activations none optimizer " ]' "plan --csv offload values: $(cols "$tmp/plan.csv" offload | sort -u)"
check '! cols "$tmp/plan.csv" offload host_bytes | grep -qE "^(optimizer|activations)\|0$|^none\|[1-9]"' "plan --csv host_bytes: $(cols "$tmp/plan.csv" offload host_bytes | sort -u | head)"

# A shape whose copies out outlast their blocks' forward: the rest is exposed and added to the step.
X="--gpu h200 --layers 2 --hidden 64 --heads 2 --seq 64 --batch 8192 --vocab 97 --precision bf16 --attn fused --ckpt full --accum 1"
# shellcheck disable=SC2086
"$M" plan $X --offload none,activations >"$tmp/out" 2>&1
cp "$tmp/out" "$tmp/plan.txt"
cp_line=$(grep -A2 "^  copy stream:" "$tmp/out" | tr '\n' ' ')
read -r co wo cb wb ex <<<"$(sed -n 's/.*: out \([0-9.]*\) ms beside *the \([0-9.]*\) ms of their blocks. forward, back \([0-9.]*\) ms beside the \([0-9.]*\) ms of the next segments. recompute and *backward: \([0-9.]*\) ms exposed.*/\1 \2 \3 \4 \5/p' <<<"$cp_line")"
awk -v co="$co" -v wo="$wo" -v cb="$cb" -v wb="$wb" -v e="$ex" 'BEGIN{
  w = (co > wo ? co - wo : 0) + (cb > wb ? cb - wb : 0); d = e - w
  exit !(co > wo && e > 0 && d < 0.16 && d > -0.16)}' && ok ||
  bad "exposed copy time '$ex' ms, want out $co - $wo (+ back $cb - $wb if positive): $cp_line"
awk -v a="$(asked none step)" -v b="$(asked activations step)" -v e="$ex" 'BEGIN{d = b - a - e; exit !(d < 0.11 && d > -0.11)}' && ok ||
  bad "activations step $(asked activations step) ms != none's $(asked none step) + exposed $ex"

# --validate replays offloaded rows with their offload: their dry peaks are exact.
for o in optimizer activations; do
  "$M" run --backend dry --preset gpt2-124m --layers 4 --ckpt full --offload "$o" --precision bf16 --csv "$tmp/v.csv" >/dev/null 2>&1
done
"$M" plan --validate "$tmp/v.csv" --out-dir "$tmp/val" >"$tmp/out" 2>&1
rc=$?
check '[ $rc -eq 0 ]' "plan --validate on offloaded dry rows failed: $(tail -3 "$tmp/out")"
has "peak memory: 2 rows compared, 2 exact to the byte"
has "caching offload opt" # the configuration column (62 characters) names the offload

# ---- 3. bad input: exit 2, one line naming the flag -------------------------------------------------
refused "--offload: unknown value 'host' (accepted: none, optimizer, activations)" plan --gpu h200 --offload host
refused "--offload: unknown value 'x' (accepted: none, optimizer, activations)" sweep --backend dry --offload none,x
refused "--offload: 'none' appears twice" plan --offload none,none
refused "--offload activations with --ckpt none" plan --gpu h200 --offload activations
refused "--offload optimizer: model mlp has no offloaded update" plan --model mlp --offload optimizer
refused "--gpus 2 with --offload optimizer" plan --gpu h200 --gpus 2 --offload optimizer
refused "--offload: memopt run takes one value" run --backend dry --offload none,optimizer

# ---- 4. the catalog's host link ---------------------------------------------------------------------
entry='[g]\nname = G\nmemory = 80GB @ s\nfp32 = 60 @ s\ntf32 = 400 @ s\nfp16 = 800 @ s\nbf16 = 800 @ s\nmem_bw = 3000 @ s\n'
printf "${entry}host_gbs = 0 @ s\n" >"$tmp/cat0.txt"
MEMOPT_GPU_CATALOG="$tmp/cat0.txt" "$M" plan --gpu g >"$tmp/o" 2>"$tmp/e"
rc=$?
check '[ $rc -eq 2 ] && grep -qF "cat0.txt:9: host_gbs: must be positive" "$tmp/e"' "host_gbs = 0: $(cat "$tmp/e")"
printf "${entry}host_gbs = 64\n" >"$tmp/cat1.txt"
MEMOPT_GPU_CATALOG="$tmp/cat1.txt" "$M" plan --gpu g >"$tmp/o" 2>"$tmp/e"
rc=$?
check '[ $rc -eq 2 ] && grep -qF "cat1.txt:9: host_gbs: no source" "$tmp/e"' "host_gbs without a source: $(cat "$tmp/e")"
printf "${entry}" >"$tmp/cat2.txt" # no host link: the offloaded plan has its peaks, not a time
MEMOPT_GPU_CATALOG="$tmp/cat2.txt" "$M" plan --gpu g --preset gpt2-124m --ckpt full --offload activations >"$tmp/out" 2>&1
rc=$?
check '[ $rc -eq 0 ]' "plan without host_gbs failed: $(tail -3 "$tmp/out")"
has "no step time: the catalog entry g has no host_gbs"
has "offload activations: host memory [1-9][0-9]* B"

echo "cli_plan_offload: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
