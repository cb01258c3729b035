#!/usr/bin/env bash
# tools/sanitize_table.py: the latest verdict per tool and binary over several compute-sanitizer
# summaries. Two synthetic summaries (the line format tools/gpu_sanitize.sh writes) and a seed table:
# a later verdict replaces an earlier one, a later cut run does not replace a verdict, a crashed run
# (in the summary or only in the run's excerpt) ranks below a cut one, exit 77 is no verdict, racecheck-all
# and racecheck-ours count as racecheck, a header's settings tag the label, the counts add up, and a
# printed table read back as a seed is the same table; parts of a binary (binary@i/n) stand in for it when
# all of one n have a verdict.
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
== compute-sanitizer Version 2025.3.1.0; shard 1/1
== racecheck and synccheck check the suite's kernels: --kernel-name-exclude regex=nvjet|cudnn
memcheck       gpu_a                         4s exit   1: test exit 1 (sanitizer clean unless listed) | ========= ERROR SUMMARY: 0 errors | 9 passed, 1 failed
synccheck      gpu_b                        30s exit 124: cut at 30s (errors so far below) |  |  | last line: y
racecheck      gpu_b                         8s exit  99: SANITIZER ERRORS | ========= RACECHECK SUMMARY: 0 hazards displayed |
initcheck      gpu_c                         1s exit  77: skipped by the test |  |
racecheck      gpu_c                         5s exit  99: SANITIZER CRASHED (Internal Sanitizer Error): no verdict |  |
racecheck-ours gpu_c                         3s exit   0: clean, test passed | ========= RACECHECK SUMMARY: 0 hazards displayed |
---- cs-racecheck-gpu_b.log
========= Error: Race reported between Write access at k+0x10
========= Internal Sanitizer Error: The Sanitizer failed to handle a hardware exception.
EOF
python3 "$T" seed="$tmp/seed.log" "c1 bbbb H200=$tmp/c1.log" "c2 cccc H100=$tmp/c2.log" >"$tmp/out" 2>"$tmp/err"
check "exit 0 on three logs (rc $?)" test $? -eq 0
row() { grep -E "^#  $1 +$2 " "$tmp/out"; }
check "a later verdict replaces an earlier one (memcheck gpu_a: c2)" grep -q "c2 cccc H100 .*test exit 1" <(row memcheck gpu_a)
check "racecheck-all counts as racecheck and replaces not reached" grep -q "c1 bbbb H200 \[racecheck-all\] .*clean" <(row racecheck gpu_a)
check "a later cut run keeps the earlier verdict (initcheck gpu_b: s1)" grep -q "s1 aaaa H100 \[initcheck, unmarked\] .*SANITIZER ERRORS" <(row initcheck gpu_b)
check "a cut run ranks above a crashed one (synccheck gpu_b: c2)" grep -q "c2 cccc H100 .*cut at 30s" <(row synccheck gpu_b)
check "a pair with no run says so (initcheck gpu_a)" grep -q "no run" <(row initcheck gpu_a)
check "a header's library exclusion tags synccheck (gpu_b)" grep -q "c2 cccc H100 \[libraries excluded\]" <(row synccheck gpu_b)
check "a crash seen in a run's excerpt is no verdict (racecheck gpu_b)" grep -q "SANITIZER CRASHED" <(row racecheck gpu_b)
check "exit 77 is not a verdict (initcheck gpu_c)" grep -q "skipped by the test" <(row initcheck gpu_c)
check "racecheck-ours counts as racecheck, above the crash (gpu_c)" grep -q "\[racecheck-ours\] .*clean" <(row racecheck gpu_c)
check "the counts: memcheck 1/3 with a verdict, 2 not reached" grep -qE "^#  memcheck +1/3 with a verdict, 0 cut, 0 crashed, 2 not reached" "$tmp/out"
check "the counts: racecheck 2/3, 1 crashed" grep -qE "^#  racecheck +2/3 with a verdict, 0 cut, 1 crashed, 0 not reached" "$tmp/out"
check "the counts: initcheck 1/3, 1 not reached by a skip" grep -qE "^#  initcheck +1/3 with a verdict, 0 cut, 0 crashed, 2 not reached" "$tmp/out"
check "the counts: synccheck 0/3, 1 cut" grep -qE "^#  synccheck +0/3 with a verdict, 1 cut, 0 crashed, 2 not reached" "$tmp/out"

# The printed table seeds a later merge to the same table (labels longer than the column too)
python3 "$T" seed="$tmp/seed.log" "c1 bbbb H200 with a label longer than the fifty-two characters of the column=$tmp/c1.log" \
  "c2 cccc H100=$tmp/c2.log" >"$tmp/t1" 2>"$tmp/err"
python3 "$T" seed="$tmp/t1" >"$tmp/t2" 2>"$tmp/err"
check "a printed table read back as a seed gives the same table" cmp -s "$tmp/t1" "$tmp/t2"

# Parts (binary@i/n, MEMOPT_TEST_PART): all parts of one n with a verdict stand in for the whole run; a part
# missing or cut leaves the binary without one; a whole run's verdict stands alone; a part's crash seen in its
# excerpt (the file names part i of n binary.partIofN) is no verdict
cat >"$tmp/p1.log" <<'EOF2'
== compute-sanitizer Version 2025.3.1.0; shard 1/1
racecheck-all  gpu_a@1/2                   100s exit   0: clean, test passed | ========= RACECHECK SUMMARY: 0 hazards displayed | 5 passed, 0 failed
racecheck-all  gpu_a@2/2                   120s exit   0: clean, test passed | ========= RACECHECK SUMMARY: 0 hazards displayed | 6 passed, 0 failed
initcheck      gpu_a                       470s exit 124: cut at 470s (errors so far below) |  |  | last line: x
initcheck      gpu_a@1/3                    90s exit   0: clean, test passed | ========= ERROR SUMMARY: 0 errors | 4 passed, 0 failed
initcheck      gpu_a@3/3                   300s exit 124: cut at 300s (errors so far below) |  |  | last line: z
memcheck       gpu_b@1/2                    20s exit   0: clean, test passed | ========= ERROR SUMMARY: 0 errors | 4 passed, 0 failed
synccheck      gpu_b                         3s exit   0: clean, test passed | ========= ERROR SUMMARY: 0 errors | 4 passed, 0 failed
synccheck      gpu_b@1/2                     3s exit   0: clean, test passed | ========= ERROR SUMMARY: 0 errors | 4 passed, 0 failed
racecheck-all  gpu_b@1/2                     3s exit  99: SANITIZER ERRORS | ========= RACECHECK SUMMARY: 1 hazards displayed |
synccheck      gpu_a@1/2                   210s exit   9: test exit 9 (sanitizer clean unless listed) | ========= ERROR SUMMARY: 0 errors |  | last line: x
synccheck      gpu_a@2/2                     5s exit   0: clean, test passed | ========= ERROR SUMMARY: 0 errors | 4 passed, 0 failed
---- cs-racecheck-all-gpu_b.part1of2.log
========= Internal Sanitizer Error: The Sanitizer failed to handle a hardware exception.
EOF2
python3 "$T" "p1 dddd H100=$tmp/p1.log" --binaries "gpu_a gpu_b" >"$tmp/out" 2>"$tmp/err"
check "parts: exit 0 (rc $?)" test $? -eq 0
check "parts: both racecheck parts of gpu_a stand as rows" test "$(grep -cE "^#  racecheck +gpu_a@[12]/2 " "$tmp/out")" -eq 2
check "parts: initcheck gpu_a, part 2 of 3 missing: the cut whole run and the parts listed" \
  test "$(grep -cE "^#  initcheck +gpu_a(@[13]/3)? " "$tmp/out")" -eq 3
check "parts: a whole run's verdict stands alone (synccheck gpu_b)" test "$(grep -cE "^#  synccheck +gpu_b" "$tmp/out")" -eq 1
check "parts: a crash in a part's excerpt is no verdict" grep -q "SANITIZER CRASHED" <(grep -E "^#  racecheck +gpu_b@1/2 " "$tmp/out")
check "parts: racecheck 1/2 with a verdict (gpu_a by its parts; gpu_b's part 2 of 2 missing: not reached)" \
  grep -qE "^#  racecheck +1/2 with a verdict, 0 cut, 0 crashed, 1 not reached" "$tmp/out"
check "parts: initcheck 0/2, gpu_a cut (its best: the cut whole run), gpu_b not reached" \
  grep -qE "^#  initcheck +0/2 with a verdict, 1 cut, 0 crashed, 1 not reached" "$tmp/out"
check "parts: memcheck gpu_b, one part of 2: not reached" \
  grep -qE "^#  memcheck +0/2 with a verdict, 0 cut, 0 crashed, 2 not reached" "$tmp/out"
check "parts: a killed part (exit 9) is no verdict: synccheck 1/2 (gpu_b's whole run), 1 crashed" \
  grep -qE "^#  synccheck +1/2 with a verdict, 0 cut, 1 crashed, 0 not reached" "$tmp/out"
python3 "$T" seed="$tmp/out" >"$tmp/t3" 2>"$tmp/err"
check "parts: the printed table read back as a seed gives the same table" cmp -s "$tmp/out" "$tmp/t3"

# Newer parts replace an older whole run's verdict; a newer whole verdict stands over older parts
cat >"$tmp/q0.log" <<'EOF2'
initcheck      gpu_c                       141s exit  99: SANITIZER ERRORS | ========= ERROR SUMMARY: 9 errors | 5 passed, 0 failed
initcheck      gpu_d@1/2                    50s exit   0: clean, test passed | ========= ERROR SUMMARY: 0 errors | 2 passed, 0 failed
initcheck      gpu_d@2/2                    50s exit   0: clean, test passed | ========= ERROR SUMMARY: 0 errors | 2 passed, 0 failed
EOF2
cat >"$tmp/q1.log" <<'EOF2'
initcheck      gpu_c@1/2                    90s exit   0: clean, test passed | ========= ERROR SUMMARY: 0 errors | 3 passed, 0 failed
initcheck      gpu_c@2/2                    80s exit   0: clean, test passed | ========= ERROR SUMMARY: 0 errors | 2 passed, 0 failed
initcheck      gpu_d                        99s exit  99: SANITIZER ERRORS | ========= ERROR SUMMARY: 1 errors | 4 passed, 0 failed
EOF2
python3 "$T" "q0 x H100=$tmp/q0.log" "q1 y H100=$tmp/q1.log" >"$tmp/out" 2>"$tmp/err"
check "newer parts replace the older whole verdict (gpu_c: two part rows, no whole row)" \
  test "$(grep -cE "^#  initcheck +gpu_c@[12]/2 +q1 y H100 .*clean" "$tmp/out")" -eq 2 -a "$(grep -cE "^#  initcheck +gpu_c " "$tmp/out")" -eq 0
check "a newer whole verdict stands over older parts (gpu_d: the whole row alone)" \
  test "$(grep -cE "^#  initcheck +gpu_d " "$tmp/out")" -eq 1 -a "$(grep -cE "^#  initcheck +gpu_d@" "$tmp/out")" -eq 0

# --todo: the runs that would give each pair without a verdict one (p1.log above, binaries gpu_a and gpu_b)
python3 "$T" "p1 dddd H100=$tmp/p1.log" --binaries "gpu_a gpu_b" --todo >"$tmp/todo" 2>"$tmp/err"
check "--todo: exit 0 (rc $?)" test $? -eq 0
check "--todo: gpu_a's initcheck, its missing part 2/3 and its part 3/3 (cut at 300 s) as halves 3/6 and 6/6, not 1/3" \
  test "$(grep -c "^initcheck:gpu_a@" "$tmp/todo")" -eq 3 -a "$(grep -c "^initcheck:gpu_a@1/3" "$tmp/todo")" -eq 0 \
    -a "$(grep -cxE "initcheck:gpu_a@(2/3|3/6|6/6)" "$tmp/todo")" -eq 3
check "--todo: gpu_b's racecheck as racecheck-all, its crashed part 1/2 and missing 2/2" \
  test "$(grep -cE "^racecheck-all:gpu_b@[12]/2$" "$tmp/todo")" -eq 2
check "--todo: a binary with no run, whole (initcheck:gpu_b), and none with a verdict (racecheck gpu_a, synccheck gpu_b)" \
  test "$(grep -cx "initcheck:gpu_b" "$tmp/todo")" -eq 1 -a "$(grep -cE "^racecheck-all:gpu_a|^synccheck:gpu_b" "$tmp/todo")" -eq 0

# A long binary@i/n keeps two spaces before its label (the table reads back); KILLED is no verdict; the
# set of parts nearest a verdict is the one with the most verdicts, then cut runs, not the one with the most
# skipped parts
cat >"$tmp/r.log" <<'EOF2'
racecheck-all  gpu_ops_gemm_attn_mixed@10/12  5s exit   0: clean, test passed | ========= RACECHECK SUMMARY: 0 hazards displayed | 2 passed, 0 failed
memcheck       gpu_e                         3s exit   9: KILLED (exit 9, SIGKILL: the host out of memory?): no verdict |  |
synccheck      gpu_f@1/2                     5s exit   0: clean, test passed | ========= ERROR SUMMARY: 0 errors | 2 passed, 0 failed
synccheck      gpu_f@2/2                    90s exit 124: cut at 90s (errors so far below) |  |  | last line: y
synccheck      gpu_f@1/4                  skipped: the stage budget is spent
synccheck      gpu_f@2/4                  skipped: the stage budget is spent
synccheck      gpu_f@3/4                  skipped: the stage budget is spent
EOF2
python3 "$T" "r x H100=$tmp/r.log" >"$tmp/out" 2>"$tmp/err"
python3 "$T" seed="$tmp/out" >"$tmp/t4" 2>"$tmp/err"
check "a long binary@i/n: the table reads back the same" cmp -s "$tmp/out" "$tmp/t4"
check "a long binary@i/n: its row kept" grep -qE "^#  racecheck +gpu_ops_gemm_attn_mixed@10/12 +r x H100" "$tmp/t4"
check "KILLED is no verdict (memcheck gpu_e: crashed)" grep -qE "^#  memcheck +0/[0-9]+ with a verdict, 0 cut, 1 crashed" "$tmp/out"
check "parts nearest a verdict: gpu_f's set of 2 (one clean, one cut), so cut, not not reached" \
  grep -qE "^#  synccheck +0/[0-9]+ with a verdict, 1 cut" "$tmp/out"
python3 "$T" "r x H100=$tmp/r.log" --todo >"$tmp/todo2" 2>"$tmp/err"
check "--todo: gpu_f's part 2/2 only, cut at 90 s (under LONG_CUT: again whole, not halved)" test "$(grep -c "^synccheck:gpu_f" "$tmp/todo2")" -eq 1 -a "$(grep -cx "synccheck:gpu_f@2/2" "$tmp/todo2")" -eq 1

# Parts of different n: part 2 of 2 is parts 2 and 4 of 4 (case k is in part k % n + 1); gpu_g is whole in
# 1/2, 2/4 and 4/4; gpu_h's 4/4 was cut at 400 s, so --todo names its halves 4/8 and 8/8, and once those have
# a verdict gpu_h is whole too
cat >"$tmp/m.log" <<'EOF2'
racecheck-all  gpu_g@1/2                    5s exit   0: clean, test passed | ========= RACECHECK SUMMARY: 0 hazards displayed | 2 passed, 0 failed
racecheck-all  gpu_g@2/4                    5s exit   0: clean, test passed | ========= RACECHECK SUMMARY: 0 hazards displayed | 2 passed, 0 failed
racecheck-all  gpu_g@4/4                    5s exit   0: clean, test passed | ========= RACECHECK SUMMARY: 0 hazards displayed | 2 passed, 0 failed
racecheck-all  gpu_h@1/2                    5s exit   0: clean, test passed | ========= RACECHECK SUMMARY: 0 hazards displayed | 2 passed, 0 failed
racecheck-all  gpu_h@2/4                    5s exit   0: clean, test passed | ========= RACECHECK SUMMARY: 0 hazards displayed | 2 passed, 0 failed
racecheck-all  gpu_h@4/4                  400s exit 124: cut at 400s (errors so far below) |  |  | last line: y
EOF2
python3 "$T" "m x H100=$tmp/m.log" >"$tmp/out" 2>"$tmp/err"
check "parts of different n running every case are a verdict (gpu_g: 1/2, 2/4, 4/4), a gap is not (gpu_h)" \
  grep -qE "^#  racecheck +1/2 with a verdict, 1 cut" "$tmp/out"
python3 "$T" "m x H100=$tmp/m.log" --todo >"$tmp/todo3" 2>"$tmp/err"
check "--todo: gpu_h's 4/4, cut at 400 s, as its halves 4/8 and 8/8, nothing for gpu_g" \
  test "$(grep ^racecheck "$tmp/todo3" | tr '\n' ' ')" = "racecheck-all:gpu_h@4/8 racecheck-all:gpu_h@8/8 "
cat >>"$tmp/m.log" <<'EOF2'
racecheck-all  gpu_h@4/8                    5s exit   0: clean, test passed | ========= RACECHECK SUMMARY: 0 hazards displayed | 2 passed, 0 failed
racecheck-all  gpu_h@8/8                    5s exit  99: SANITIZER ERRORS | ========= RACECHECK SUMMARY: 1 hazards displayed | 2 passed, 0 failed
EOF2
python3 "$T" "m x H100=$tmp/m.log" >"$tmp/out" 2>"$tmp/err"
check "gpu_h's halves 4/8 and 8/8 complete it: 2/2 with a verdict, its four parts with a verdict listed" \
  test "$(grep -cE "^#  racecheck +2/2 with a verdict" "$tmp/out")" -eq 1 -a "$(grep -cE "^#  racecheck +gpu_h@" "$tmp/out")" -eq 4
python3 "$T" "m x H100=$tmp/m.log" --todo >"$tmp/todo3" 2>"$tmp/err"
check "--todo: no racecheck run left (the other tools: whole runs, none made)" \
  test "$(grep -c ^racecheck "$tmp/todo3")" -eq 0 -a "$(grep -cxE "(memcheck|initcheck|synccheck):gpu_[gh]" "$tmp/todo3")" -eq 6

# Which cut parts --todo halves (too_long): one cut at its time limit after beginning 3 cases (gpu_i: 1/2 ->
# 1/4 and 3/4); not one cut by the stage budget (gpu_j, 300 s), nor a single case too long for a run (gpu_k)
cat >"$tmp/n.log" <<'EOF2'
racecheck-all  gpu_i@1/2                  460s exit 124: cut at 460s at its time limit, 3 of its cases begun (errors so far below) |  |  | last line: y
racecheck-all  gpu_i@2/2                    5s exit   0: clean, test passed | ========= RACECHECK SUMMARY: 0 hazards displayed | 2 passed, 0 failed
racecheck-all  gpu_j@1/2                  300s exit 124: cut at 300s by the stage budget, 3 of its cases begun (errors so far below) |  |  | last line: y
racecheck-all  gpu_j@2/2                    5s exit   0: clean, test passed | ========= RACECHECK SUMMARY: 0 hazards displayed | 2 passed, 0 failed
racecheck-all  gpu_k@1/2                  460s exit 124: cut at 460s at its time limit, 1 of its cases begun (errors so far below) |  |  | last line: y
racecheck-all  gpu_k@2/2                    5s exit   0: clean, test passed | ========= RACECHECK SUMMARY: 0 hazards displayed | 2 passed, 0 failed
EOF2
python3 "$T" "n x H100=$tmp/n.log" --todo >"$tmp/todo4" 2>"$tmp/err"
check "--todo: a part cut at its time limit in its 3rd case as halves, a budget cut and a single long case again whole" \
  test "$(grep ^racecheck "$tmp/todo4" | tr '\n' ' ')" = \
    "racecheck-all:gpu_i@1/4 racecheck-all:gpu_i@3/4 racecheck-all:gpu_j@1/2 racecheck-all:gpu_k@1/2 "
# Many parts: all 64 of 64 cover the binary, whatever other parts there are (1/63 and 1/5: an lcm past 4096)
for i in $(seq 1 64); do
  echo "racecheck-all  gpu_l@$i/64                   5s exit   0: clean, test passed | ========= RACECHECK SUMMARY: 0 hazards displayed | 2 passed, 0 failed"
done >"$tmp/l.log"
echo "racecheck-all  gpu_l@1/63                   5s exit   0: clean, test passed | | 2 passed, 0 failed" >>"$tmp/l.log"
echo "racecheck-all  gpu_l@1/5                    5s exit   0: clean, test passed | | 2 passed, 0 failed" >>"$tmp/l.log"
python3 "$T" "l x H100=$tmp/l.log" >"$tmp/out" 2>"$tmp/err"
check "64 parts of 64 beside parts of 63 and 5: a verdict" grep -qE "^#  racecheck +1/1 with a verdict" "$tmp/out"

# Usage errors: no log (2, the usage), an argument without LABEL= (2), a missing file (1, its path)
python3 "$T" >"$tmp/out" 2>"$tmp/err"
check "no arguments: exit 2 (rc $?)" test $? -eq 2
python3 "$T" "$tmp/c1.log" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "no LABEL=: exit 2 (rc $rc)" test $rc -eq 2
check "no LABEL=: one line naming the argument" grep -q "expected LABEL=LOG" "$tmp/err"
python3 "$T" "$tmp/seed.log" --binaries >"$tmp/out" 2>"$tmp/err"
rc=$?
check "--binaries without a list: exit 2 (rc $rc)" test $rc -eq 2
check "--binaries without a list: one line naming the flag" grep -q "^sanitize_table.py: --binaries" "$tmp/err"
python3 "$T" "x=$tmp/absent.log" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "a missing log: exit 1 (rc $rc)" test $rc -eq 1
check "a missing log: its path in the message" grep -q "absent.log" "$tmp/err"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
