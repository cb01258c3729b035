#!/usr/bin/env bash
# Host memory beside a sanitizer pass: racecheck holds tens of GiB of host memory a process, and the host's OOM
# killer ends the largest (sessions 16-18: up to 124 GiB of the 125). Every INTERVAL seconds one line: the
# seconds since the start, used and available memory (MB), the 4 largest processes' RSS; then, for each
# racecheck log in LOG_DIR whose run has not ended (no "N passed, M failed" and no RACECHECK SUMMARY line yet,
# however long its test has been silent: session 18's gpu_resnet@2/4 printed nothing for the 88 s of its last
# case before the OOM killer ended it), the case its test last began (testlib.c's "runs here, N s in" lines),
# so that a process's growth can be put down to a case.
# Usage: host_mem_sampler.sh sample LOG_DIR OUT [INTERVAL]   (appends to OUT until killed)
#        host_mem_sampler.sh summary OUT                    (the samples, the peak used, each process name's
#                                                            largest RSS, in GiB, the 6 largest)
set -uo pipefail
mode=${1:-}
usage() { echo "host_mem_sampler.sh: usage: host_mem_sampler.sh sample LOG_DIR OUT [INTERVAL] | summary OUT ($1)" >&2; exit 2; }
case $mode in
  sample)
    [ $# -ge 3 ] && [ $# -le 4 ] || usage "sample takes LOG_DIR, OUT and an optional INTERVAL"
    dir=$2 out=$3 every=${4:-10}
    [[ $every =~ ^[1-9][0-9]*$ ]] || usage "INTERVAL '$every' is not a whole number of seconds"
    t0=$(date +%s)
    while :; do
      sleep "$every"
      echo "t=$(( $(date +%s) - t0 )) $(free -m | awk '/^Mem:/ { print "used_mb=" $3 " avail_mb=" $7 }')" \
        "$(ps -eo rss=,comm= --sort=-rss | head -4 | awk '{ printf "%s:%dMB ", $2, $1 / 1024 }')"
      find "$dir" -maxdepth 1 -name 'cs-racecheck*.log' 2>/dev/null | sort | while read -r f; do
        grep -qE '^[0-9]+ passed, [0-9]+ failed|RACECHECK SUMMARY' "$f" && continue # ended
        echo "   $(basename "$f" .log): $(grep -E 'runs here' "$f" | tail -1 | cut -c1-90)"
      done
    done >>"$out" 2>&1;;
  summary)
    [ $# -eq 2 ] || usage "summary takes OUT"
    out=$2
    [ -r "$out" ] || { echo "host_mem_sampler.sh: cannot read '$out'" >&2; exit 1; }
    awk '/^t=/ { n++; for (i = 2; i <= NF; i++) {
           if ($i ~ /^used_mb=/) { u = substr($i, 9) + 0; if (u > peak) peak = u }
           else if ($i ~ /:[0-9]+MB$/) { p = $i; sub(/:[0-9]+MB$/, "", p); v = $i; sub(/^.*:/, "", v); v += 0; if (v > big[p]) big[p] = v } } }
         END { printf "%d samples, peak used %.1f GiB; largest RSS (GiB):", n, peak / 1024
               for (k = 0; k < 6; k++) { best = ""; for (p in big) if (best == "" || big[p] > big[best]) best = p
                 if (best == "") break; printf " %s %.1f", best, big[best] / 1024; delete big[best] }
               print "" }' "$out";;
  *) usage "the first argument '$mode' is not sample or summary";;
esac
