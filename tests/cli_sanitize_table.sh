#!/usr/bin/env bash
# tools/sanitize_table.py: the latest verdict per tool and binary over several compute-sanitizer
# summaries. Two synthetic summaries (the line format tools/gpu_sanitize.sh writes) and a seed table:
# a later verdict replaces an earlier one, a later cut run does not replace a verdict, a crashed run
# ranks below a cut one, a run of racecheck-all counts as racecheck, and the counts line adds up.
# Skips (77) without python3. Usage: cli_sanitize_table.sh path/to/memopt [source dir]
set -u
SRC="${2:-$(dirname "$0")/..}"
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
T="$SRC/tools/sanitize_table.py"
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check() { # description, then the command that must succeed
  local what="$1"; shift
  if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what"; fi
}

cat >"$tmp/seed.log" <<'EOF'
# a committed table
#  memcheck   gpu_a                      s1 aaaa H100                                         3s exit 0: clean, test passed | ========= ERROR SUMMARY: 0 errors | 10 passed, 0 failed
#  racecheck  gpu_a                      s1 aaaa H100                                         skipped: the stage budget is spent
#  initcheck  gpu_b                      s1 aaaa H100 [initcheck, unmarked]                   9s exit 99: SANITIZER ERRORS | ========= ERROR SUMMARY: 7 errors | 5 passed, 0 failed
EOF
cat >"$tmp/c1.log" <<'EOF'
== compute-sanitizer Version 2025.3.1.0; shard 1/1
initcheck      gpu_b                       470s exit 124: cut at 470s (errors so far below) |  |  | last line: x
racecheck-all  gpu_a                        12s exit   0: clean, test passed | ========= RACECHECK SUMMARY: 0 hazards displayed | 10 passed, 0 failed
synccheck      gpu_b                       SANITIZER CRASHED ("Internal Sanitizer Error: ...") | 8s exit 99: SANITIZER ERRORS
EOF
cat >"$tmp/c2.log" <<'EOF'
memcheck       gpu_a                         4s exit   1: test exit 1 (sanitizer clean unless listed) | ========= ERROR SUMMARY: 0 errors | 9 passed, 1 failed
synccheck      gpu_b                        30s exit 124: cut at 30s (errors so far below) |  |  | last line: y
EOF
python3 "$T" seed="$tmp/seed.log" "c1 bbbb H200=$tmp/c1.log" "c2 cccc H100=$tmp/c2.log" >"$tmp/out" 2>"$tmp/err"
check "exit 0 on three logs (rc $?)" test $? -eq 0
row() { grep -E "^#  $1 +$2 " "$tmp/out"; }
check "a later verdict replaces an earlier one (memcheck gpu_a: c2)" grep -q "c2 cccc H100 .*test exit 1" <(row memcheck gpu_a)
check "racecheck-all counts as racecheck and replaces not reached" grep -q "c1 bbbb H200 \[racecheck-all\] .*clean" <(row racecheck gpu_a)
check "a later cut run keeps the earlier verdict (initcheck gpu_b: s1)" grep -q "s1 aaaa H100 \[initcheck, unmarked\] .*SANITIZER ERRORS" <(row initcheck gpu_b)
check "a cut run ranks above a crashed one (synccheck gpu_b: c2)" grep -q "c2 cccc H100 .*cut at 30s" <(row synccheck gpu_b)
check "a pair with no run says so (initcheck gpu_a)" grep -q "no run" <(row initcheck gpu_a)
check "the counts: memcheck 1/2 with a verdict, 1 not reached" grep -qE "^#  memcheck +1/2 with a verdict, 0 cut, 0 crashed, 1 not reached" "$tmp/out"
check "the counts: synccheck 0/2, 1 cut" grep -qE "^#  synccheck +0/2 with a verdict, 1 cut, 0 crashed, 1 not reached" "$tmp/out"

# Usage errors: no log (2, the usage), an argument without LABEL= (2), a missing file (1, its path)
python3 "$T" >"$tmp/out" 2>"$tmp/err"
check "no arguments: exit 2 (rc $?)" test $? -eq 2
python3 "$T" "$tmp/c1.log" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "no LABEL=: exit 2 (rc $rc)" test $rc -eq 2
check "no LABEL=: one line naming the argument" grep -q "expected LABEL=LOG" "$tmp/err"
python3 "$T" "x=$tmp/absent.log" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "a missing log: exit 1 (rc $rc)" test $rc -eq 1
check "a missing log: its path in the message" grep -q "absent.log" "$tmp/err"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
