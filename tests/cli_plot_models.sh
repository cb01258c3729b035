#!/usr/bin/env bash
# memopt plot names the model: the title's second line gives the rows' model and its dims text
# ("MLP L16 H1024 I1024 K1000, batch 16384 on ..."; GPT by its preset, "GPT gpt2-124m, batch 8 on ...")
# and the labels tell apart rows that differ only in the MLP's input width, or a gpt row from an mlp
# row. memopt writes the data files and the title itself: a stand-in gnuplot on PATH records the
# title it is given and draws nothing, so this runs with or without gnuplot installed.
# Usage: cli_plot_models.sh path/to/memopt [source dir]
set -u
M="${1:?usage: cli_plot_models.sh path/to/memopt [source dir]}"
SRC="${2:-$(dirname "$0")/..}"
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass + 1)); }
no() { fail=$((fail + 1)); echo "FAIL: $*"; }

mkdir "$tmp/bin"
cat >"$tmp/bin/gnuplot" <<'EOF'
#!/bin/sh
printf '%s\n' "$2" >>"$GNUPLOT_LOG"
EOF
chmod +x "$tmp/bin/gnuplot"
# plot DIR CSV: the figures' data into DIR; the title it gave gnuplot on stdout.
plot() {
  rm -f "$tmp/g.log"
  GNUPLOT_LOG="$tmp/g.log" PATH="$tmp/bin:$PATH" MEMOPT_PLOT_SCRIPTS="$SRC/plots" "$M" plot "$2" --out-dir "$1" \
    >"$tmp/out" 2>&1 || { no "plot $2: $(tail -1 "$tmp/out")"; return; }
  head -1 "$tmp/g.log" | sed -n "s/.*subtitle='\([^']*\)'.*/\1/p"
}
# labels DAT: the quoted first field of each data line.
labels() { grep -v '^#' "$1" | cut -d'"' -f2; }
distinct() { [ -s "$1" ] && [ -z "$(sort "$1" | uniq -d)" ]; }

# One MLP shape: the model and its dims text, not GPT's columns.
"$M" sweep --model mlp --backend dry --preset mlp-act --ckpt none,full --csv "$tmp/act.csv" >"$tmp/out" 2>&1 || no "mlp-act sweep"
t=$(plot "$tmp/act" "$tmp/act.csv")
[ "$t" = "MLP L16 H1024 I1024 K1000, batch 16384 on dry backend (no GPU: memory exact, no times)" ] && ok || no "mlp-act title: '$t'"
labels "$tmp/act/memory_by_category.dat" >"$tmp/l"
[ "$(cat "$tmp/l")" = "$(printf 'ckpt:none\nckpt:full')" ] && ok || no "mlp-act labels: $(tr '\n' '|' <"$tmp/l")"

# MLP rows that differ only in --input: one model, several shapes; the labels carry the input width.
"$M" sweep --model mlp --backend dry --preset mlp-small --input 256,512 --ckpt none,full --csv "$tmp/in.csv" \
  >"$tmp/out" 2>&1 || no "mlp --input sweep"
t=$(plot "$tmp/in" "$tmp/in.csv")
[ "$t" = "several MLP shapes, batch 64 on dry backend (no GPU: memory exact, no times)" ] && ok || no "mlp --input title: '$t'"
for d in memory_by_category fits_by_cap; do
  [ "$d" = fits_by_cap ] && awk -F'"' '!/^#/ {print $4}' "$tmp/in/$d.dat" >"$tmp/l" || labels "$tmp/in/$d.dat" >"$tmp/l"
  distinct "$tmp/l" && ok || no "$d: labels not distinct: $(tr '\n' '|' <"$tmp/l")"
  grep -q '^I512 ckpt:full$' "$tmp/l" && ok || no "$d: no 'I512 ckpt:full' label: $(tr '\n' '|' <"$tmp/l")"
  grep -q 'mat\|C256' "$tmp/l" && no "$d: a GPT field in an MLP label" || ok
done

# A gpt row beside an mlp row of the same layers and batch: the labels name the models.
"$M" run --backend dry --layers 4 --hidden 256 --heads 4 --seq 64 --vocab 256 --batch 64 --csv "$tmp/mix.csv" >"$tmp/out" 2>&1 \
  || no "gpt run"
"$M" run --model mlp --backend dry --preset mlp-small --csv "$tmp/mix.csv" >"$tmp/out" 2>&1 || no "mlp run"
t=$(plot "$tmp/mix" "$tmp/mix.csv")
[ "$t" = "several models, batch 64 on dry backend (no GPU: memory exact, no times)" ] && ok || no "mixed title: '$t'"
labels "$tmp/mix/memory_by_category.dat" >"$tmp/l"
distinct "$tmp/l" && ok || no "gpt beside mlp: labels not distinct: $(tr '\n' '|' <"$tmp/l")"
grep -q '^gpt ' "$tmp/l" && grep -q '^mlp ' "$tmp/l" && ok || no "gpt beside mlp: labels lack the model: $(tr '\n' '|' <"$tmp/l")"

# A GPT CSV keeps its title: the preset's name.
"$M" run --backend dry --preset gpt2-124m --csv "$tmp/gpt.csv" >"$tmp/out" 2>&1 || no "gpt2-124m run"
t=$(plot "$tmp/gpt" "$tmp/gpt.csv")
[ "$t" = "GPT gpt2-124m, batch 8 on dry backend (no GPU: memory exact, no times)" ] && ok || no "gpt title: '$t'"

# plan --validate's table names an MLP row by its model and dims, without an attention form.
"$M" plan --validate "$tmp/in.csv" --out-dir "$tmp/v" >"$tmp/out" 2>&1
grep -q ' dry mlp L4 H256 I512 K10 B64 fp32 full a1 caching ' "$tmp/out" && ok || no "plan --validate: no MLP configuration: $(grep -m1 ' 1  ' "$tmp/out")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
