#!/usr/bin/env bash
# memopt plan as a user runs it: the report's parts, the predicted peak equal to `memopt run
# --backend dry`'s to the byte, bad input (exit 2, one line naming the flag), a bad catalog refused
# with its line number, --validate (exact peaks pass, a planted difference fails with exit 1), and
# rows at another workspace budget left out of the time calibration and of --validate's times, a lone precision's
# time calibrated from results/ without the validated file, and the wall time of a gpt2-1558m
# and a 7B-shape plan (printed, not asserted).
# Usage: cli_plan.sh path/to/memopt source-dir
set -u
M="${1:?usage: cli_plan.sh path/to/memopt source-dir}"
SRC="${2:?usage: cli_plan.sh path/to/memopt source-dir}"
case "$M" in /*) ;; *) M="$(cd "$(dirname "$M")" && pwd)/$(basename "$M")" ;; esac
SRC="$(CDPATH= cd -- "$SRC" && pwd)" || { echo "cli_plan.sh: no source dir '$2'"; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
has() { grep -qE -- "$1" "$tmp/out" && ok || { bad "plan output lacks /$1/"; sed 's/^/    /' "$tmp/out" | head -40; }; }
refused() { # WANT ARGS...: exit 2 and one stderr line containing WANT
  local want="$1"; shift
  "$M" "$@" >"$tmp/o" 2>"$tmp/e"
  local rc=$?
  if [ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/e")" -eq 1 ] && grep -qF -- "$want" "$tmp/e"; then ok; else
    bad "memopt $*: exit $rc, want 2 and one line with '$want':"; sed 's/^/    /' "$tmp/e"; fi
}

cd "$SRC" # the catalog and results/ are found from the source tree, as a user runs it

# 1. The report.
"$M" plan --gpu h100-sxm --preset gpt2-124m >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && ok || { bad "plan --gpu h100-sxm exited non-zero"; cat "$tmp/err"; }
has "^target: NVIDIA H100 SXM5 80GB"
has "headroom .* = total less 512.00 MiB"
has "predicted peak \(dry backend, exact\): allocated [0-9]+ B"
has "by category: param .*activation .*workspace"
has "fits: yes"
has "largest batch that fits: [0-9]+"
has "predicted step [0-9.]+ ms"
has "^strategy combinations at batch 8: [0-9]+ planned"
has "^  best: "
[ -s "$tmp/err" ] && { bad "plan wrote to stderr:"; cat "$tmp/err"; } || ok

# 2. The predicted peak is the dry run's, to the byte.
pred=$(sed -n 's/.*predicted peak (dry backend, exact): allocated \([0-9]*\) B.*/\1/p' "$tmp/out")
"$M" run --backend dry --preset gpt2-124m --csv "$tmp/dry.csv" >/dev/null
col=$(head -1 "$tmp/dry.csv" | tr , '\n' | grep -n '^peak_allocated_bytes$' | cut -d: -f1)
real=$(sed -n 2p "$tmp/dry.csv" | cut -d, -f"$col")
[ -n "$pred" ] && [ "$pred" = "$real" ] && ok || bad "plan's peak $pred != memopt run --backend dry's $real"

# 3. A small device: does not fit, but a smaller batch does; lists restrict the table.
"$M" plan --mem 8GiB --preset gpt2-124m --ckpt none,full --precision fp32,tf32 >"$tmp/out" 2>&1
has "target: 8.00 GiB device \(--mem\)"
has "fits: NO, it needs"
has "largest batch that fits: [1-7]$"
has "strategy combinations at batch 8: 32 planned"
has "times on the reference h200-sxm"

# 4. Bad input.
refused "--gpu: unknown GPU 'nosuch' (accepted: h200-sxm" plan --gpu nosuch
refused "--mem" plan --mem 256MiB
refused "--gpu and --mem" plan --gpu h200 --mem 80GiB
refused "--validate: cannot read" plan --validate "$tmp/none.csv"
printf '[g]\nname = G\nmemory = 8GB\n' >"$tmp/cat.txt"
MEMOPT_GPU_CATALOG="$tmp/cat.txt" "$M" plan --gpu g >"$tmp/o" 2>"$tmp/e"
rc=$?
[ "$rc" -eq 2 ] && grep -qF "cat.txt:3: memory: no source" "$tmp/e" && ok || { bad "a bad catalog: exit $rc"; cat "$tmp/e"; }

# 5. --validate: the dry rows' peaks are reproduced exactly; a planted byte of difference fails.
"$M" run --backend dry --preset gpt2-124m --ckpt full --accum 2 --csv "$tmp/dry.csv" >/dev/null
"$M" plan --validate "$tmp/dry.csv" --out-dir "$tmp" >"$tmp/out" 2>&1
[ $? -eq 0 ] && ok || { bad "plan --validate on dry rows failed"; cat "$tmp/out"; }
has "peak memory: 2 rows compared, 2 exact to the byte"
[ -s "$tmp/plan_validate.csv" ] && ok || bad "no plan_validate.csv"
awk -F, 'BEGIN{OFS=","} NR==1{for(i=1;i<=NF;i++) if($i=="peak_allocated_bytes") c=i; print; next}
         NR==2{$c=sprintf("%.0f", $c + 512)} {print}' "$tmp/dry.csv" >"$tmp/off.csv"
"$M" plan --validate "$tmp/off.csv" --out-dir "$tmp" >"$tmp/out" 2>"$tmp/e"
rc=$?
[ "$rc" -eq 1 ] && grep -q "differ from the dry prediction" "$tmp/e" && ok || bad "a planted peak difference: exit $rc (want 1)"

# 6. Rows measured at another workspace budget than their model's default (MEMOPT_WORKSPACE_MIB; the
# ResNet's default is 256 MiB, models/resnet.c) do not calibrate the plan of the default: the committed
# ResNet-50 rows at 32-512 MiB plan as their 256 MiB rows alone do.
ws=results/h100-resnet50-workspace-680ab23.csv
wsd=256
mkdir -p "$tmp/wsd" "$tmp/wsall"
head -1 "$ws" >"$tmp/wsd/rows.csv"
grep "MEMOPT_WORKSPACE_MIB=$wsd\$" "$ws" >>"$tmp/wsd/rows.csv"
cp "$ws" "$tmp/wsall/rows.csv"
[ "$(wc -l <"$tmp/wsall/rows.csv")" -gt "$(wc -l <"$tmp/wsd/rows.csv")" ] && [ "$(wc -l <"$tmp/wsd/rows.csv")" -gt 2 ] && ok ||
  bad "$ws: expected rows at $wsd MiB and at other budgets"
for d in wsd wsall; do
  "$M" plan --model resnet --preset resnet50 --batch 128 --gpu h100-sxm --out-dir "$tmp/$d" 2>&1 | grep -m1 'predicted step' >"$tmp/$d.pred"
done
[ -s "$tmp/wsd.pred" ] && cmp -s "$tmp/wsd.pred" "$tmp/wsall.pred" && ok ||
  bad "rows at other workspace budgets moved the plan: '$(cat "$tmp/wsd.pred")' against '$(cat "$tmp/wsall.pred")'"
# ... and --validate compares their peaks but not their times, saying why. (Their peaks are not asserted
# exact: they are the step's of 680ab23, and later revisions moved the ResNet's; section 5 asserts
# exactness on rows of this revision. --validate exits 1 when a peak differs, so 0 and 1 both pass here.)
nws=$(grep -vc "MEMOPT_WORKSPACE_MIB=$wsd\$" "$ws")
"$M" plan --validate "$ws" --out-dir "$tmp/wsv" >"$tmp/wsv.out" 2>&1
rc=$?
[ $rc -le 1 ] && [ "$(grep -c "another workspace budget ([0-9]* MiB): the roofline models the model's default (peak compared only)" "$tmp/wsv.out")" -eq $((nws - 1)) ] &&
  grep -q "step time: $(( $(wc -l <"$ws") - nws )) rows compared" "$tmp/wsv.out" &&
  grep -q "peak memory: $(( $(wc -l <"$ws") - 1 )) rows compared" "$tmp/wsv.out" && ok ||
  { bad "--validate of $ws (exit $rc):"; tail -5 "$tmp/wsv.out"; }

# 6b. --validate: a precision the file has no other row of (nor a near one's) takes the fit of the committed
# results/ rows of its device, with the validated file itself left out. The H200 file of one fp32 and one
# tf32 fused row: both calibrated from results/; the same predictions as from a results/ folder without the
# file (cwd's results/ comes first), and other ones when a copy of the file is there under another name
# (so leaving the file out is what gives the first ones).
lone=results/h200-attn32-fused-39e78b2.csv
preds() { awk -F, 'NR > 1 { print $17 }' "$1/plan_validate.csv"; }
mkdir -p "$tmp/root/results"
for f in results/*.csv; do [ "$f" = "$lone" ] || cp "$f" "$tmp/root/results/"; done
"$M" plan --validate "$lone" --out-dir "$tmp/lone1" >"$tmp/out" 2>&1
rc1=$?
(cd "$tmp/root" && "$M" plan --validate "$SRC/$lone" --out-dir "$tmp/lone2" >/dev/null 2>&1)
rc2=$?
cp "$lone" "$tmp/root/results/copy-of-lone.csv"
(cd "$tmp/root" && "$M" plan --validate "$SRC/$lone" --out-dir "$tmp/lone3" >/dev/null 2>&1)
rc3=$?
[ $rc1 -eq 0 ] && [ "$(grep -c "results/'s" "$tmp/lone1/plan_validate.csv")" -eq 2 ] && ok ||
  { bad "--validate $lone: want both rows calibrated from results/ (exit $rc1)"; cut -d, -f17- "$tmp/lone1/plan_validate.csv"; }
[ -n "$(preds "$tmp/lone1")" ] && [ "$(preds "$tmp/lone1")" = "$(preds "$tmp/lone2")" ] && ok ||
  bad "--validate $lone: results/ with the file ($(preds "$tmp/lone1" | tr '\n' ' ')) against without it ($(preds "$tmp/lone2" | tr '\n' ' '))"
[ $rc2 -eq 0 ] && [ $rc3 -eq 0 ] && [ -n "$(preds "$tmp/lone3")" ] && [ "$(preds "$tmp/lone3")" != "$(preds "$tmp/lone2")" ] && ok ||
  bad "--validate $lone: a copy of the file in results/ did not move the fit: the test shows nothing"

# 7. Wall time of the whole process (CUDA builds spend most of it loading cuBLAS/cuDNN).
for shape in "--preset gpt2-1558m" "--layers 32 --hidden 4096 --heads 32 --seq 4096"; do
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  "$M" plan --gpu h100-sxm $shape >"$tmp/out" 2>&1 || bad "plan $shape failed"
  t1=$(date +%s.%N)
  echo "memopt plan --gpu h100-sxm $shape: $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b - a}') s wall; $(grep '^planned in' "$tmp/out")"
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
