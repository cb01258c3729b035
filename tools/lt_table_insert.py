#!/usr/bin/env python3
"""Inserts a GEMM tuning run's table lines into kernels/lt_algo_table.c (gpu_session.sh stage gemmtune).

Usage: lt_table_insert.py [--replace] TABLE_C HEADER LOG...
Each "lt-tune: {...}" line of the logs (MEMOPT_GEMM_TUNE, kernels/lt_gemm_cuda.c) whose device, cuBLASLt
version and key no line of the table has yet goes in before the end marker, under the comment HEADER; the
first line of a key wins (a key tuned twice, in two runs, keeps the first run's choice). --replace: a table
line of a key the logs tuned again is taken out first (the new run's choice supersedes it)."""
import re
import sys

END = "    {NULL, 0, {0}, {0}, 0, 0.0f, 0.0f}, // end"
# device, version and the key: the line up to the key's closing brace
KEY = re.compile(r'^\s*(\{"[^"]*", \d+, \{[^}]*\})')


def key_of(line):
    m = KEY.match(line)
    return m.group(1) if m else None


def main():
    args = sys.argv[1:]
    replace = args[:1] == ["--replace"]
    if replace:
        args = args[1:]
    table, header, logs = args[0], args[1], args[2:]
    src = open(table).read()
    if END not in src:
        sys.exit(f"lt_table_insert: {table} has no end marker")
    have = {key_of(l) for l in src.splitlines()} - {None}
    removed = 0
    if replace:
        tuned = set()
        for path in logs:
            for l in open(path, errors="replace"):
                if l.startswith("lt-tune: {"):
                    tuned.add(key_of(l[len("lt-tune: "):]))
        kept = [l for l in src.split("\n") if key_of(l) not in tuned or key_of(l) is None]
        removed = src.count("\n") - len(kept) + 1
        src = "\n".join(kept)
        have -= tuned
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
    if new or removed:
        open(table, "w").write(src)
    print(f"lt_table_insert: {len(new)} new lines, {removed} replaced lines taken out")


main()
