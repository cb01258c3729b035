#!/usr/bin/env bash
# tools/host_mem_sampler.sh, which tools/gpu_session.sh's sanitize stage runs beside the pass: a sample line
# has the used and available memory and the largest processes; a racecheck run not yet ended gets the case
# its test last began, however long it has been silent (an ended one, and another tool's, none); the summary reads a sample file back
# (peak used, each name's largest RSS, largest first); bad arguments exit 2 with one line.
# Usage: cli_host_mem_sampler.sh path/to/memopt [source dir]
set -u
SRC="${2:-$(dirname "$0")/..}"
S="$SRC/tools/host_mem_sampler.sh"
command -v free >/dev/null && command -v ps >/dev/null || { echo "SKIPPED: no free or ps here"; exit 77; }
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check() { # description, then the command that must succeed
  local what="$1"; shift
  if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what"; fi
}
mkdir -p "$tmp/logs"
printf 'MEMOPT_TEST_PART=1/4: case 0 (a) runs here, 0.1 s in\nx\nMEMOPT_TEST_PART=1/4: case 4 (late copies) runs here, 12.5 s in\ny\n' \
  >"$tmp/logs/cs-racecheck-all-gpu_x.part1of4.log"
echo "MEMOPT_TEST_PART=1/2: case 0 (b) runs here, 0.1 s in" >"$tmp/logs/cs-initcheck-gpu_y.part1of2.log"
# silent for an hour, not ended: still followed; ended (its counts and the tool's summary): not
printf 'MEMOPT_TEST_PART=2/4: case 1 (resnet50) runs here, 120.0 s in\n' >"$tmp/logs/cs-racecheck-all-gpu_z.part2of4.log"
touch -d '1 hour ago' "$tmp/logs/cs-racecheck-all-gpu_z.part2of4.log"
printf 'MEMOPT_TEST_PART=3/4: case 2 (a) runs here, 0.1 s in\n3 passed, 0 failed\n========= RACECHECK SUMMARY: 0 hazards displayed\n' \
  >"$tmp/logs/cs-racecheck-all-gpu_w.part3of4.log"
bash "$S" sample "$tmp/logs" "$tmp/mem.log" 1 &
pid=$!
sleep 2.5
kill $pid
wait $pid 2>/dev/null
check "samples: a line with used and available MB and a process's RSS ($(head -1 "$tmp/mem.log"))" \
  grep -qE '^t=[0-9]+ used_mb=[0-9]+ avail_mb=[0-9]+ +[^ ]+:[0-9]+MB' "$tmp/mem.log"
check "a racecheck log: the case its test last began" \
  grep -qx '   cs-racecheck-all-gpu_x.part1of4: MEMOPT_TEST_PART=1/4: case 4 (late copies) runs here, 12.5 s in' "$tmp/mem.log"
check "a log of another tool: not followed" test "$(grep -c gpu_y "$tmp/mem.log")" -eq 0
check "a racecheck run silent for an hour: still followed" \
  grep -qx '   cs-racecheck-all-gpu_z.part2of4: MEMOPT_TEST_PART=2/4: case 1 (resnet50) runs here, 120.0 s in' "$tmp/mem.log"
check "a racecheck run that ended: not followed" test "$(grep -c gpu_w "$tmp/mem.log")" -eq 0

cat >"$tmp/fixed.log" <<'X'
t=10 used_mb=2048 avail_mb=100000 gpu_a:1024MB gpu_b:512MB bash:3MB
   cs-racecheck-all-gpu_a: MEMOPT_TEST_PART=1/2: case 0 (a) runs here, 0.1 s in
t=20 used_mb=107520 avail_mb=20000 gpu_b:104448MB gpu_a:2048MB bash:3MB
X
out=$(bash "$S" summary "$tmp/fixed.log")
check "summary: samples, peak used and each name's largest, largest first ($out)" \
  test "$out" = "2 samples, peak used 105.0 GiB; largest RSS (GiB): gpu_b 102.0 gpu_a 2.0 bash 0.0"

bad() { # description, then the arguments
  local what=$1; shift
  bash "$S" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  check "$what: exit 2 (rc $rc)" test $rc -eq 2
  check "$what: one line ($(head -c 100 "$tmp/err"))" test "$(wc -l <"$tmp/err")" -eq 1
}
bad "an unknown mode" watch "$tmp/logs" "$tmp/x.log"
bad "a bad interval" sample "$tmp/logs" "$tmp/x.log" 0
bad "sample without OUT" sample "$tmp/logs"
bad "summary without OUT" summary
bad "no arguments"
bash "$S" summary "$tmp/none.log" >"$tmp/out" 2>"$tmp/err"
check "summary of a missing file: exit 1, naming it" test $? -eq 1 -a "$(grep -c none.log "$tmp/err")" -eq 1
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
