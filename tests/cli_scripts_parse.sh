#!/usr/bin/env bash
# The suite's scripts that only run on the GPU machine or by hand (tools/, bench/, .ci/run) parse: bash -n
# over every shell script, python3's compile over every Python one. CI runs none of the GPU ones, so a
# quote lost in an edit would otherwise first show on the device, costing a call (tools/gpu_sanitize.sh lost
# one in 4b0df91). Usage: cli_scripts_parse.sh path/to/memopt [source dir]
set -u
SRC="${2:-$(dirname "$0")/..}"
pass=0
fail=0
for f in "$SRC"/tools/*.sh "$SRC"/bench/*.sh "$SRC"/.ci/run "$SRC"/tests/*.sh; do
  [ -f "$f" ] || continue
  if out=$(bash -n "$f" 2>&1); then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: bash -n $f: $out"; fi
done
if command -v python3 >/dev/null; then
  for f in "$SRC"/tools/*.py "$SRC"/bench/peers/*.py; do
    [ -f "$f" ] || continue
    if out=$(python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' "$f" 2>&1); then
      pass=$((pass + 1))
    else
      fail=$((fail + 1)); echo "FAIL: python3 parse $f: $out"
    fi
  done
else
  echo "python3 not found: the Python scripts are not checked"
fi
# the check can fail: a script with a lost quote must not parse
bad=$(mktemp)
trap 'rm -f "$bad"' EXIT
printf 'x="unterminated\n' >"$bad"
if bash -n "$bad" 2>/dev/null; then fail=$((fail + 1)); echo "FAIL: bash -n accepted an unterminated string"; else pass=$((pass + 1)); fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
