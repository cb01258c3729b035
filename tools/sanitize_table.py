#!/usr/bin/env python3
"""The latest compute-sanitizer verdict per tool and GPU test binary, over several passes.

tools/gpu_sanitize.sh writes one summary line per run ("TOOL  BINARY  <time> exit <rc>: <verdict> | ...");
a pass spans device calls and sessions. This merges them, oldest first, into one table: for each
tool x binary the latest run with a verdict (the sanitizer finished: clean, errors, or the test's own
exit), else the latest cut one, else a crashed one, else the latest not reached. A committed table (the
"#  TOOL  BINARY  LABEL ..." lines of an earlier log) can seed it.

Usage: tools/sanitize_table.py LABEL=LOG [LABEL=LOG ...] [--binaries "gpu_a gpu_b ..."]
  LABEL names the call (session, revision, card: "s15c2 d3e6bd0 H100"); a LOG that is itself a table
  (lines starting "#  ") is read with each line's own label and LABEL is ignored.
Prints the table, then the counts per tool.
"""
import re
import sys

TOOLS = ["memcheck", "racecheck", "initcheck", "synccheck"]
RUN = re.compile(r"^(memcheck|racecheck-all|racecheck|initcheck|synccheck)\s+(gpu_\w+)\s+(.*)$")
SEEDED = re.compile(r"^#\s+(memcheck|racecheck|initcheck|synccheck)\s{2,}gpu_")
RANK = {"verdict": 3, "cut": 2, "crashed": 1, "not reached": 0}


def kind(text):
    if "Internal Sanitizer Error" in text or "SANITIZER CRASHED" in text:
        return "crashed"
    if "skipped: the stage budget" in text or "not reached" in text:
        return "not reached"
    if "cut at" in text:
        return "cut"
    if re.search(r"exit\s+\d+:", text):
        return "verdict"
    return None


def main(argv):
    bins = None
    args = []
    i = 0
    while i < len(argv):
        if argv[i] == "--binaries":
            bins = argv[i + 1].split()
            i += 2
            continue
        args.append(argv[i])
        i += 1
    if not args:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    best = {}  # (tool, bin) -> (rank, label, text); later entries of equal rank replace earlier ones
    seen_bins = set()
    for a in args:
        if "=" not in a:
            print(f"sanitize_table.py: '{a}': expected LABEL=LOG", file=sys.stderr)
            return 2
        label, path = a.split("=", 1)
        try:
            lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
        except OSError as e:
            print(f"sanitize_table.py: {path}: {e.strerror}", file=sys.stderr)
            return 1
        table = any(SEEDED.match(line) for line in lines)  # a committed table: its lines only
        for line in lines:
            if table:
                if not SEEDED.match(line):
                    continue
                parts = re.split(r"\s{2,}", line, maxsplit=4)  # '#', tool, binary, label, text
                if len(parts) < 5:
                    continue
                tool, b, lab, text = parts[1:]
            else:
                m = RUN.match(line)
                if not m:
                    continue
                tool, b, text = m.groups()
                lab = label
                if tool == "racecheck-all":
                    tool, lab = "racecheck", label + " [racecheck-all]"
            k = kind(text)
            if k is None:
                continue
            seen_bins.add(b)
            r = RANK[k]
            old = best.get((tool, b))
            if old is None or r >= old[0]:
                best[(tool, b)] = (r, lab, " ".join(text.split()))
    bins = bins or sorted(seen_bins)
    for tool in TOOLS:
        for b in bins:
            r, lab, text = best.get((tool, b), (-1, "-", "no run"))
            print(f"#  {tool:<10} {b:<26} {lab:<52} {text[:170]}")
    print("#")
    for tool in TOOLS:
        n = {k: 0 for k in RANK}
        none = 0
        for b in bins:
            e = best.get((tool, b))
            if e is None:
                none += 1
                continue
            n[[k for k, v in RANK.items() if v == e[0]][0]] += 1
        print(f"#  {tool:<10} {n['verdict']}/{len(bins)} with a verdict, {n['cut']} cut, {n['crashed']} crashed, "
              f"{n['not reached'] + none} not reached")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
