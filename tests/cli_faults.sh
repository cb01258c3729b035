#!/usr/bin/env bash
# MEMOPT_FAIL_ALLOC=k through the memopt binary: the run fails as out of memory with the allocator's
# message (exit 1, one line), --on-oom shrink recovers from it, and in a sweep only the configuration
# holding allocation k gets an oom row; the next one is ok.
# Usage: cli_faults.sh path/to/memopt [source dir]
set -u
M="${1:?usage: cli_faults.sh path/to/memopt}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { if eval "$1"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $2"; sed 's/^/    /' "$tmp/err" | head -5; fi; }
TINY=(--backend cpu --layers 2 --hidden 32 --heads 2 --seq 16 --batch 4 --vocab 64 --steps 2 --warmup 1)

MEMOPT_FAIL_ALLOC=40 "$M" run "${TINY[@]}" >"$tmp/out" 2>"$tmp/err"
rc=$?
ok '[ $rc -eq 1 ] && [ $(wc -l <"$tmp/err") -eq 1 ]' "run with the 40th allocation failing: exit $rc, want 1 and one line"
ok 'grep -q "^memopt run: oom: out of memory: tried to allocate .*(injected fault: allocation 40)$" "$tmp/err"' "the allocator's message"

MEMOPT_FAIL_ALLOC=40 "$M" run "${TINY[@]}" --on-oom shrink >"$tmp/out" 2>"$tmp/err"
rc=$?
ok '[ $rc -eq 0 ] && grep -q "fallback: requested accum 1: oom at accum 1 -> ok at accum 2" "$tmp/out"' "--on-oom shrink after the fault: exit $rc"

"$M" run "${TINY[@]}" >"$tmp/out" 2>"$tmp/err"
ok '[ $? -eq 0 ]' "the same run unarmed"
MEMOPT_FAIL_ALLOC=abc "$M" run "${TINY[@]}" >"$tmp/out" 2>"$tmp/err"
rc=$?
ok '[ $rc -eq 0 ] && grep -q "MEMOPT_FAIL_ALLOC=.abc. ignored" "$tmp/err"' "a bad MEMOPT_FAIL_ALLOC is ignored with a warning (exit $rc)"

# a sweep of two configurations: the fault falls in the first; its row is oom, the second ok
MEMOPT_FAIL_ALLOC=60 "$M" sweep "${TINY[@]}" --backend dry --precision fp32,bf16 --csv "$tmp/s.csv" >"$tmp/out" 2>"$tmp/err"
rc=$?
st=$(awk -F, 'NR==1{for(i=1;i<=NF;i++) if($i=="status") c=i; next} {printf "%s ", $c}' "$tmp/s.csv")
ok '[ $rc -eq 0 ] && [ "$st" = "oom ok " ]' "sweep with a fault: exit $rc, statuses '$st', want 'oom ok '"
ok 'grep -q "injected fault: allocation 60" "$tmp/s.csv"' "the oom row's detail"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
