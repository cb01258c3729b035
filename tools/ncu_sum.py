#!/usr/bin/env python3
"""Sums ncu's per-kernel durations (a --csv --print-units base log of gpu__time_duration.sum) by kernel
name: where one step's device time goes, kernel by kernel. Usage: tools/ncu_sum.py NCU.csv [TOP]"""
import csv
import sys
from collections import defaultdict


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu's own notes (==PROF==) are not CSV rows
    rows = list(csv.DictReader(lines))
    tot = defaultdict(float)
    cnt = defaultdict(int)
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = r["Kernel Name"].split("(")[0][:90]
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "ns")
        ns = v * {"ns": 1, "nsecond": 1, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6}.get(unit, 1)
        tot[name] += ns
        cnt[name] += 1
    total = sum(tot.values())
    print(f"{path}: {sum(cnt.values())} kernels, {total / 1e6:.3f} ms in all")
    for name, ns in sorted(tot.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {ns / 1e6:9.3f} ms {100 * ns / total:5.1f}%  x{cnt[name]:<4d} {name}")


if __name__ == "__main__":
    main()
