#!/usr/bin/env python3
"""Inserts a GEMM tuning run's table lines into kernels/lt_algo_table.c (gpu_session.sh stage gemmtune).

Usage: lt_table_insert.py TABLE_C HEADER LOG...
Each "lt-tune: {...}" line of the logs (MEMOPT_GEMM_TUNE=1, kernels/lt_gemm_cuda.c) whose device, cuBLASLt
version and key no line of the table has yet goes in before the end marker, under the comment HEADER; the
first line of a key wins (a key tuned twice, in two runs, keeps the first run's choice)."""
import re
import sys

END = "    {NULL, 0, {0}, {0}, 0, 0.0f, 0.0f}, // end"
# device, version and the key: the line up to the key's closing brace
KEY = re.compile(r'^\s*(\{"[^"]*", \d+, \{[^}]*\})')


def key_of(line):
    m = KEY.match(line)
    return m.group(1) if m else None


def main():
    table, header, logs = sys.argv[1], sys.argv[2], sys.argv[3:]
    src = open(table).read()
    if END not in src:
        sys.exit(f"lt_table_insert: {table} has no end marker")
    have = {key_of(l) for l in src.splitlines()} - {None}
    new = []
    for path in logs:
        for l in open(path, errors="replace"):
            if not l.startswith("lt-tune: {"):
                continue
            l = l[len("lt-tune: "):].rstrip("\n")
            k = key_of(l)
            if k and k not in have:
                have.add(k)
                new.append("    " + l)
    if new:
        src = src.replace(END, "    // " + header + "\n" + "\n".join(new) + "\n" + END)
        open(table, "w").write(src)
    print(f"lt_table_insert: {len(new)} new lines")


main()
