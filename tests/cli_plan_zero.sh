#!/usr/bin/env bash
# memopt plan --gpus N and the dp/ZeRO step time: the table's four levels with per-rank peaks that
# shrink with the level; the suggestion skips the levels that do not fit (gpt2-1558m on a 24 GB A10 at
# dp 8: levels 0 and 1 do not fit, 2 does); the communication time equals the ring volume of the
# parameters' fp32 bytes at half the stated link (levels 0-2: 2(D-1)/D; level 3: 3(D-1)/D, its two
# extra gathers), so level 3 is slower; a dp plan row has a time; the non-dp plan prints no dp line
# and equals `--gpus 1`'s; bad input exits 2 with one line naming --gpus.
# Usage: cli_plan_zero.sh path/to/memopt source-dir
set -u
M="${1:?usage: cli_plan_zero.sh path/to/memopt source-dir}"
SRC="${2:?usage: cli_plan_zero.sh path/to/memopt source-dir}"
case "$M" in /*) ;; *) M="$(cd "$(dirname "$M")" && pwd)/$(basename "$M")" ;; esac
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
  if [ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/e")" -eq 1 ] && grep -qF -- "$want" "$tmp/e" && [ ! -s "$tmp/o" ]; then ok; else
    bad "memopt $*: exit $rc, want 2, one line with '$want' and no stdout:"; sed 's/^/    /' "$tmp/e" "$tmp/o" | head -5; fi
}
# field K of level Z's table row: 1 zero, 2-3 peak allocated (number, unit), 4-5 reserved, 6 fits,
# 7 compute ms, 8 comm ms, 9 step ms, 10 tokens/s
row() { awk -v z="$1" -v k="$2" '/^  zero /{t=1; next} t && $1==z {print $k; exit}' "$tmp/out"; }

cd "$SRC"

# 1. gpt2-1558m (fp32, batch 8) on A10s (22.49 GiB visible) at dp 8.
"$M" plan --gpu a10 --preset gpt2-1558m --gpus 8 >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && ok || { bad "plan --gpus 8 exited non-zero"; cat "$tmp/err"; }
[ -s "$tmp/err" ] && { bad "plan --gpus wrote to stderr:"; cat "$tmp/err"; } || ok
has "^data parallel over 8 GPUs \(one a10 each\): ZeRO levels at dp 8, batch 1 per rank"
has "communication and compute are assumed not to overlap"
for z in 0 1 2 3; do [ -n "$(row $z 10)" ] && ok || bad "no row for ZeRO $z"; done
[ "$(row 0 6)" = no ] && [ "$(row 1 6)" = no ] && [ "$(row 2 6)" = yes ] && [ "$(row 3 6)" = yes ] && ok ||
  bad "fits by level: $(row 0 6) $(row 1 6) $(row 2 6) $(row 3 6), want no no yes yes"
has "^  suggested: ZeRO 2, the fastest that fits"
# Per-rank peaks (GiB, column 2) shrink strictly with the level.
awk -v a="$(row 0 2)" -v b="$(row 1 2)" -v c="$(row 2 2)" -v d="$(row 3 2)" 'BEGIN{exit !(a > b && b > c && c > d)}' && ok ||
  bad "per-rank peaks do not shrink with the level: $(row 0 2) $(row 1 2) $(row 2 2) $(row 3 2)"
# The same compute for every level (one rank's batch-1 step), more communication at level 3.
c0=$(row 0 7)
[ "$(row 1 7)" = "$c0" ] && [ "$(row 2 7)" = "$c0" ] && [ "$(row 3 7)" = "$c0" ] && ok || bad "compute differs by level"
awk -v a="$(row 0 9)" -v b="$(row 1 9)" -v c="$(row 2 9)" -v d="$(row 3 9)" 'BEGIN{exit !(a <= b && b <= c && c < d)}' && ok ||
  bad "step times do not grow with the level: $(row 0 9) $(row 1 9) $(row 2 9) $(row 3 9)"
# The volume: Psi = 1557.7M fp32 parameters (4 Psi bytes; the exact count from the plan's first line),
# A10's link 64 GB/s both directions -> 32e9 B/s. Levels 0-2 move 2 x 7/8 of it, level 3 3 x 7/8.
psi=$(sed -n 's/.*, \([0-9.]*\)M parameters$/\1/p' "$tmp/out" | head -1)
for z in 0 3; do
  want=$(awk -v p="$psi" -v z="$z" 'BEGIN{k = z == 3 ? 3 : 2; printf "%.1f", 1e3 * k * 7 / 8 * 4 * p * 1e6 / 32e9}')
  awk -v g="$(row $z 8)" -v w="$want" 'BEGIN{d = g - w; if (d < 0) d = -d; exit !(d <= 0.01 * w)}' && ok ||
    bad "ZeRO $z communication $(row $z 8) ms, want about $want ms (ring volume of 4 x ${psi}M bytes at 32 GB/s)"
done

# 2. A larger GPU fits every level: the tie between 0, 1 and 2 goes to the lowest.
"$M" plan --gpu h200 --preset gpt2-1558m --gpus 8 >"$tmp/out" 2>&1
[ "$(row 0 6)" = yes ] && [ "$(row 3 6)" = yes ] && ok || bad "h200: not every level fits"
has "^  suggested: ZeRO 0, the fastest that fits"

# 3. A dp row of the ordinary plan has a predicted time now, with its split into compute and comm.
"$M" plan --gpu h100 --preset gpt2-124m --dp 8 --zero 3 --precision bf16 --ckpt none,full --accum 1,2 >"$tmp/out" 2>&1
has "^  predicted step [0-9.]+ ms"
has "^  data parallel: dp 8, ZeRO 3: one rank's batch-1 step [0-9.]+ ms plus communication [0-9.]+ ms \([0-9]+ bytes per rank"
awk '/^strategy combinations/{t=1; next} t && /^ +[0-9]+ +bf16/ && $7 == "-" {bad=1} END{exit bad}' "$tmp/out" && ok ||
  bad "a dp table row without a step time"

# 4. The non-dp plan: no dp line, and the same output as --gpus 1 (one GPU: the ordinary plan).
"$M" plan --gpu h100 --preset gpt2-124m --ckpt none,full >"$tmp/a" 2>&1
"$M" plan --gpu h100 --preset gpt2-124m --ckpt none,full --gpus 1 >"$tmp/b" 2>&1
grep -q "data parallel" "$tmp/a" && bad "a non-dp plan prints a data-parallel line" || ok
diff <(grep -v '^planned in' "$tmp/a") <(grep -v '^planned in' "$tmp/b") >/dev/null && ok || bad "--gpus 1 differs from the plain plan"

# 5. Bad input: exit 2, one line naming --gpus, nothing on stdout.
refused "--gpus: invalid value '0' (accepted: an integer in 1..64)" plan --gpu a10 --gpus 0
refused "--gpus: invalid value 'x'" plan --gpu a10 --gpus x
refused "--gpus 3: batch 8 is not divisible by gpus x accum = 3" plan --gpu a10 --preset gpt2-1558m --gpus 3
refused "--gpus 4: batch 8 is not divisible by gpus x accum = 16" plan --gpu a10 --gpus 4 --accum 4
refused "--gpus 2: model mlp has no data-parallel ranks" plan --gpu a10 --model mlp --gpus 2
refused "--gpus 8: sets dp to 8" plan --gpu a10 --gpus 8 --dp 2
refused "--gpus 2 with --tp 2" plan --gpu a10 --gpus 2 --tp 2
refused "--gpus 2: the ZeRO table is printed" plan --gpu a10 --gpus 2 --csv "$tmp/t.csv"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
