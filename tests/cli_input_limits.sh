#!/usr/bin/env bash
# Numbers and files past memopt's limits are refused with exit 2 and one line naming the flag or
# file and the size, instead of being stored wrongly (issue 21 defects 3, 6, 8, 9, 10):
#   byte counts that would pass 2^63 on the dry backend; sizes and shards that overflowed their
#   integers; grid lines longer than the old 4095-byte buffer, NUL bytes, a BOM, CR-only endings;
#   unknown --benchmark_ flags (one line, not Google Benchmark's and ours); a 100 KB subcommand.
# And the dry backend holds no token data: an in-range shape whose tokens alone are 32 GiB runs
# in a few MB of host memory.
# Usage: cli_input_limits.sh path/to/memopt [source dir]
set -u
M=$(realpath "${1:?usage: cli_input_limits.sh path/to/memopt}")
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
TINY="--backend dry --layers 2 --hidden 64 --heads 4 --seq 32 --batch 4 --vocab 128 --steps 1 --warmup 0"

# bad WANT ARGS...: exit 2, one stderr line starting "memopt: " and holding WANT.
bad() {
  local want="$1" rc lines
  shift
  "$M" "$@" >out.txt 2>err.txt
  rc=$?
  lines=$(wc -l <err.txt)
  if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && grep -qF -- "$want" err.txt && grep -q '^memopt' err.txt; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: memopt ${*:1:10}: exit $rc, $lines stderr lines, want exit 2 and one line with '$want':"
    head -c 600 err.txt | sed 's/^/    /'
  fi
}
check() { local what="$1"; shift; if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what"; fi; }

# ---- 3: 64-bit byte counts on the dry backend (was: status ok, a peak of 16774049 TiB, allocated
# above reserved, a negative peak in the CSV)
bad "overflows the 64-bit byte counts" run --backend dry --layers 1024 --hidden 65536 --heads 1024 --seq 65536 --batch 1024 \
  --steps 1 --warmup 0 --csv big.csv
check "the overflowing run's row says invalid, with no negative count" \
  bash -c "tail -1 big.csv | grep -q ',invalid,' && ! tail -1 big.csv | grep -qE ',-[0-9]'"
bad "overflows the ops' 32-bit row count" run --backend dry --layers 2 --hidden 64 --heads 4 --seq 65536 --batch 65536 \
  --vocab 128 --steps 1 --warmup 0

# ---- 6: no token data on dry: 32767 x 65536 tokens (4 host arrays of 8 GiB before) in 1 GiB of address space
# (an address-space limit stops a sanitizer build from starting: then these two checks skip, saying so)
if ! ( ulimit -v 1048576; exec "$M" --version ) >/dev/null 2>&1; then
  echo "SKIP: memopt does not start under a 1 GiB address-space limit (a sanitizer build?): the host-memory checks"
else
  ( ulimit -v 1048576; exec "$M" run --backend dry --layers 2 --hidden 64 --heads 4 --seq 65536 --batch 32767 --vocab 128 \
      --steps 1 --warmup 0 ) >out.txt 2>err.txt
  rc=$?
  check "dry run of 32767 x 65536 tokens under a 1 GiB address-space limit: exit $rc, want 0 ($(head -c 300 err.txt))" [ "$rc" -eq 0 ]
  # a host allocation that is refused (cpu backend, same limit) fails cleanly: exit 1 and the reason
  ( ulimit -v 1048576; exec "$M" run --backend cpu --layers 2 --hidden 64 --heads 4 --seq 4096 --batch 4096 --vocab 128 \
      --steps 1 --warmup 0 ) >out.txt 2>err.txt
  rc=$?
  check "cpu run whose host memory is refused: exit $rc, want 1, one line: $(head -c 300 err.txt)" \
    bash -c "[ $rc -eq 1 ] && [ \$(wc -l <err.txt) -eq 1 ] && grep -q 'memory exhausted' err.txt"
fi

# ---- 9: numbers past their range (were stored as -2^63 and as shard 0/1215752191)
bad "--cap: '10000000000000000000' is out of range" run $TINY --cap 10000000000000000000
bad "--device-mem: '18000000000000000000' is out of range" run $TINY --device-mem 18000000000000000000
bad "--cap: '9EiB' is not a cap" run $TINY --cap 9EiB
bad "--cap: '8388608TiB' is out of range" run $TINY --cap 8388608TiB
bad "--shard: invalid value '0/99999999999'" sweep $TINY --shard 0/99999999999
bad "--shard: invalid value '4294967296/4294967297'" sweep $TINY --shard 4294967296/4294967297
bad "--shard: invalid value '-1/4'" sweep $TINY --shard -1/4
bad "--shard: invalid value '1/+4'" sweep $TINY --shard 1/+4
"$M" run $TINY --cap 0 >out.txt 2>&1
check "--cap 0 means no cap (documented): exit 0, cap none" grep -q 'cap none' out.txt
check "--help documents --cap 0" bash -c "'$M' --help 2>&1 | grep -- '--cap' | grep -q '0: no cap'"

# ---- 8: grid lines read whole (a 5000-byte comment ending in 'layers=1' used to set --layers 1)
{ printf '# %s layers=1\n' "$(head -c 5000 /dev/zero | tr '\0' x)"; echo "--ckpt none,full"; } >long.grid
"$M" sweep $TINY --layers 3 --grid long.grid >out.txt 2>err.txt
check "a long comment line is a comment: exit 0 and layers stay 3 ($(head -c 200 err.txt))" \
  bash -c "grep -q 'L3-C64' out.txt && ! grep -q 'L1-C64' out.txt"
{ echo "--ckpt none,full"; printf '\0--layers 1\n'; } >nul.grid
bad "--grid nul.grid:2: a NUL byte" sweep $TINY --grid nul.grid
printf '\xEF\xBB\xBF--ckpt none,full\n' >bom.grid
bad "--grid bom.grid:1: starts with a UTF-8 byte-order mark" sweep $TINY --grid bom.grid
printf -- '--ckpt none,full\r--accum 1,2\r' >cr.grid
bad "--grid cr.grid:1: a line ends in CR alone" sweep $TINY --grid cr.grid
printf -- '--ckpt none,full\r\n--accum 1,2\r\n' >crlf.grid
"$M" sweep $TINY --grid crlf.grid >out.txt 2>&1
check "CRLF grid lines are fine: 4 combinations" grep -q '4 combinations' out.txt
# the same encodings in a results CSV
"$M" run $TINY --csv r.csv >/dev/null 2>&1
{ printf '\xEF\xBB\xBF'; cat r.csv; } >bom.csv
bad "bom.csv: starts with a UTF-8 byte-order mark" compare r.csv bom.csv
bad "bom.csv: starts with a UTF-8 byte-order mark" run $TINY --csv bom.csv
tr '\n' '\r' <r.csv >cr.csv
bad "cr.csv: its lines end in CR alone" compare r.csv cr.csv
bad "cr.csv: its lines end in CR alone" run $TINY --csv cr.csv

# a grid that explodes: refused with its count (issue 19 point 5)
V32=$(seq -s, 1 32)
bad "the axis lists make 1048576 combinations" sweep $TINY --layers "$V32" --seq "$V32" --batch "$V32" --accum "$V32"

# ---- 10: messages
bad "--benchmark_frobnicate: not a Google Benchmark flag" sweep $TINY --benchmark_frobnicate=1
long=$(head -c 100000 /dev/zero | tr '\0' q)
bad "unknown subcommand 'qqqq" "$long"
check "a 100 KB subcommand is not echoed whole: $(wc -c <err.txt) bytes" [ "$(wc -c <err.txt)" -lt 400 ]
bad "unknown flag '--qqqq" run "--$long"
check "a 100 KB flag is not echoed whole: $(wc -c <err.txt) bytes" [ "$(wc -c <err.txt)" -lt 400 ]

echo "cli_input_limits: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
