#!/usr/bin/env bash
# tools/gpu_sanitize.sh without a GPU: a fake compute-sanitizer (it runs the program, then answers as the
# tool would for what the program's name asks: clean, hazards in a library kernel, hazards then the test
# killed, the tool killed, too slow) over fake test binaries. Checks the summary line of each outcome (a
# hazard run whose test never finished is no verdict; a killed run is KILLED; a slow one is cut), that the
# heavy racecheck runs (SAN_HEAVY) go one at a time in a lane of their own while the others run beside
# them, that part i of n reaches the test as MEMOPT_TEST_PART and names its log binary.partIofN, that the
# tool's "process didn't terminate successfully" is not tallied as a finding of ours, that
# tools/sanitize_table.py reads the summary back with the same verdicts, and that bad settings exit 2
# with one line naming the setting; SAN_ORDER=given keeps SAN_RUNS' order.
# Usage: cli_gpu_sanitize.sh path/to/memopt [source dir]
set -u
SRC="${2:-$(dirname "$0")/..}"
S="$SRC/tools/gpu_sanitize.sh"
pass=0
fail=0
tmp=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
check() { # description, then the command that must succeed
  local what="$1"; shift
  if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what"; fi
}
mkdir -p "$tmp/bin" "$tmp/b"
# The fake tool: --version; the option probe (/bin/true); otherwise it runs its last argument and answers
# by the program's name. Each run's start and end go to $tmp/trace, with the part it was given.
cat >"$tmp/bin/compute-sanitizer" <<'EOF'
#!/usr/bin/env bash
[ "${1:-}" = --version ] && { echo "Compute Sanitizer Version 0.0 (fake)"; exit 0; }
prog="${@: -1}"
[ "$prog" = /bin/true ] && { echo "========= Target application terminated before first instrumented API call"; exit 255; }
echo "$(date +%s.%N) start ${prog#./} ${MEMOPT_TEST_PART:-whole}" >>"$FAKE_TRACE"
"$prog"; rc=$?
echo "$(date +%s.%N) end ${prog#./} ${MEMOPT_TEST_PART:-whole}" >>"$FAKE_TRACE"
case ${prog#./} in
  gpu_hz|gpu_hzkill)
    # a long report (1 MB): a reader that quits at the first line must not lose the excerpt (SIGPIPE)
    for k in $(seq 1 ${FAKE_HAZARDS:-1}); do
      echo "========= Error: Race reported between Write access at nvjet_sm90_fake+0x10"
      echo "=========     and Read access at nvjet_sm90_fake+0x20 [4 hazards]"
    done
    [ $rc -ne 0 ] && { echo "========= Error: process didn't terminate successfully"; echo "========= Target application returned an error"; }
    echo "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)"; exit 99;;
  gpu_toolkilled) exit 9;;
esac
[ $rc -ne 0 ] && { echo "========= Error: process didn't terminate successfully"; echo "========= Target application returned an error"; }
echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
exit $rc
EOF
chmod +x "$tmp/bin/compute-sanitizer"
fake_test() { # name, then the body of its script
  printf '#!/usr/bin/env bash\n%s\n' "$2" >"$tmp/b/$1"; chmod +x "$tmp/b/$1"
}
fake_test gpu_ok 'sleep 0.3; echo "part ${MEMOPT_TEST_PART:-none}"; echo "3 passed, 0 failed"'
fake_test gpu_heavy 'sleep 0.6; echo "2 passed, 0 failed"'
fake_test gpu_hz 'echo "4 passed, 0 failed"'
fake_test gpu_hzkill 'echo "case 1"; exit 137' # the test killed before test_finish: no "N passed" line
fake_test gpu_toolkilled 'echo "1 passed, 0 failed"'
fake_test gpu_slow 'echo "case 1"; sleep 30; echo "1 passed, 0 failed"'
# two cases begun: testlib's line with its time (and without, as before 2026-12-06); "another part's" not counted
fake_test gpu_slowpart 'echo "MEMOPT_TEST_PART=$MEMOPT_TEST_PART: case 0 (a) runs here, 0.4 s in"
  echo "MEMOPT_TEST_PART=$MEMOPT_TEST_PART: case 1 (a) is another part'"'"'s"; echo "MEMOPT_TEST_PART=$MEMOPT_TEST_PART: case 2 (a) runs here"; sleep 30'
fake_test gpu_failed 'echo "FAIL: x"; echo "1 passed, 1 failed"; exit 1'
export FAKE_TRACE="$tmp/trace"

runs="racecheck-all:gpu_heavy@1/3 racecheck-all:gpu_heavy@2/3 racecheck-all:gpu_heavy@3/3 racecheck-all:gpu_ok@2/2"
runs="$runs racecheck-all:gpu_hz racecheck-all:gpu_hzkill racecheck-all:gpu_toolkilled racecheck-all:gpu_slow"
runs="$runs racecheck-all:gpu_failed racecheck-all:gpu_slowpart@1/2"
FAKE_HAZARDS=8000 PATH="$tmp/bin:$PATH" SAN_RUNS="$runs" SAN_HEAVY="gpu_heavy" SAN_HEAVY_SLOTS=1 SAN_JOBS=4 SAN_TIMEOUT=5 SAN_BUDGET=60 \
  bash "$S" "$tmp/b" "$tmp/logs" "$tmp/sum.log" >"$tmp/out" 2>"$tmp/err"
check "a pass: exit 0 (rc $?)" test $? -eq 0
line() { grep -E "^$1 +$2 " "$tmp/sum.log"; }
check "clean: exit 0, 'clean, test passed'" grep -q "exit   0: clean, test passed" <(line racecheck-all "gpu_ok@2/2")
check "hazards, the test finished: SANITIZER ERRORS, a verdict" \
  grep -qE "exit  99: SANITIZER ERRORS \|.*4 passed, 0 failed" <(line racecheck-all gpu_hz)
check "hazards, then the test killed: no verdict, its last line kept" \
  grep -qE "exit  99: SANITIZER ERRORS, but the test did not finish \(killed\?\): no verdict.*last line: case 1" \
  <(line racecheck-all gpu_hzkill)
check "the tool killed (exit 9): KILLED" grep -q "exit   9: KILLED" <(line racecheck-all gpu_toolkilled)
check "too slow: cut at SAN_TIMEOUT (5 s), its last line kept" grep -qE "exit 124: cut at 5s at its time limit .*last line: case 1" \
  <(line racecheck-all gpu_slow)
check "a part cut at its time limit says how many of its cases it began" \
  grep -qE "exit 124: cut at 5s at its time limit, 2 of its cases begun" <(line racecheck-all "gpu_slowpart@1/2")
check "a hazard run's excerpt is printed, however long its report" grep -qx -- "---- cs-racecheck-all-gpu_hz.log" "$tmp/sum.log"
check "a failed check: the test's exit, with its counts" grep -qE "exit   1: test exit 1 .*1 passed, 1 failed" \
  <(line racecheck-all gpu_failed)
check "part i of n: MEMOPT_TEST_PART reaches the test, the log named binary.partIofN" \
  grep -qx "part 2/2" "$tmp/logs/cs-racecheck-all-gpu_ok.part2of2.log"
# the heavy lane: no two gpu_heavy runs overlap, and a light run starts while a heavy one runs
python3 - "$tmp/trace" >"$tmp/lanes" <<'EOF' || echo "python3 failed" >"$tmp/lanes"
import sys
ev = [l.split() for l in open(sys.argv[1])]
span = {}
for t, what, prog, part in ev:
    span.setdefault((prog, part), [0, 0])[what == "end"] = float(t)
heavy = sorted(v for (p, _), v in span.items() if p == "gpu_heavy")
light = [v for (p, _), v in span.items() if p != "gpu_heavy"]
overlap = any(heavy[i + 1][0] < heavy[i][1] for i in range(len(heavy) - 1))
beside = any(l[0] < h[1] and h[0] < l[1] for h in heavy for l in light)
print(len(heavy), "overlap" if overlap else "serial", "beside" if beside else "alone")
EOF
check "heavy runs one at a time, the others beside them ($(cat "$tmp/lanes"))" test "$(cat "$tmp/lanes")" = "3 serial beside"
check "owners: the hazards counted in library code, the tool's 'process didn't terminate' not counted as ours" \
  grep -qE "owners +cs-racecheck-all-gpu_hzkill.log +[1-9][0-9]* in library code .*, 0 in ours" "$tmp/sum.log"
if command -v python3 >/dev/null; then
  python3 "$SRC/tools/sanitize_table.py" "t x H100=$tmp/sum.log" --binaries "gpu_hz gpu_hzkill gpu_toolkilled gpu_slow" \
    >"$tmp/table" 2>"$tmp/err"
  check "sanitize_table.py: gpu_hz a verdict, gpu_hzkill and gpu_toolkilled crashed, gpu_slow cut" \
    grep -qE "^#  racecheck +1/4 with a verdict, 1 cut, 2 crashed, 0 not reached" "$tmp/table"
fi

# A run the stage's budget cuts (it started with less than SAN_TIMEOUT left) says so
PATH="$tmp/bin:$PATH" SAN_RUNS="racecheck-all:gpu_slow" SAN_TIMEOUT=60 SAN_BUDGET=6 \
  bash "$S" "$tmp/b" "$tmp/logs3" "$tmp/sum3.log" >"$tmp/out" 2>"$tmp/err"
check "a budget cut: 'by the stage budget' ($(grep -o 'cut at.*budget' "$tmp/sum3.log"))" \
  grep -qE "exit 124: cut at [56]s by the stage budget" "$tmp/sum3.log"

# SAN_ORDER=given: one lane takes the runs in SAN_RUNS' order (long would take these three, of equal cost
# in its table, by name: gpu_heavy first)
: >"$tmp/trace"
PATH="$tmp/bin:$PATH" FAKE_TRACE="$tmp/trace" SAN_RUNS="racecheck-all:gpu_ok@1/2 racecheck-all:gpu_hz racecheck-all:gpu_heavy@1/3" \
  SAN_ORDER=given SAN_JOBS=1 SAN_HEAVY= SAN_BUDGET=60 bash "$S" "$tmp/b" "$tmp/logs4" "$tmp/sum4.log" >"$tmp/out" 2>"$tmp/err"
check "SAN_ORDER=given: the runs in the order named ($(grep start "$tmp/trace" | awk '{printf "%s ", $3}'))" \
  test "$(grep start "$tmp/trace" | awk '{printf "%s ", $3}')" = "gpu_ok gpu_hz gpu_heavy "
check "SAN_ORDER=given: the summary's header says so" grep -q "in the order given" "$tmp/sum4.log"

# Bad settings: exit 2, one line naming the setting
bad() { # description, the setting's name, then env assignments
  local what=$1 name=$2; shift 2
  env PATH="$tmp/bin:$PATH" "$@" bash "$S" "$tmp/b" "$tmp/logs2" "$tmp/sum2.log" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  check "$what: exit 2 (rc $rc)" test $rc -eq 2
  check "$what: one line naming $name ($(head -c 120 "$tmp/err"))" \
    test "$(wc -l <"$tmp/err")" -eq 1 -a "$(grep -c "$name" "$tmp/err")" -eq 1
}
bad "SAN_HEAVY_SLOTS=0" SAN_HEAVY_SLOTS SAN_HEAVY_SLOTS=0 SAN_RUNS=racecheck-all:gpu_ok
bad "SAN_HEAVY_SLOTS=x" SAN_HEAVY_SLOTS SAN_HEAVY_SLOTS=x SAN_RUNS=racecheck-all:gpu_ok
bad "a part past n" SAN_RUNS "SAN_RUNS=racecheck-all:gpu_ok@3/2"
bad "a part of 0" SAN_RUNS "SAN_RUNS=racecheck-all:gpu_ok@0/2"
bad "an unknown tool" SAN_RUNS "SAN_RUNS=helgrind:gpu_ok"
bad "no such binary" SAN_RUNS "SAN_RUNS=racecheck-all:gpu_none"
bad "SAN_ORDER=x" SAN_ORDER SAN_ORDER=x SAN_RUNS=racecheck-all:gpu_ok
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
