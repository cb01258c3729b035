#!/usr/bin/env python3
"""The latest compute-sanitizer verdict per tool and GPU test binary, over several passes.

tools/gpu_sanitize.sh writes one summary line per run ("TOOL  BINARY  <time> exit <rc>: <verdict> | ..."),
then the first lines of each run that reported anything ("---- cs-TOOL-BINARY.log" and the tool's lines);
a pass spans device calls and sessions. This merges them, oldest first, into one table: for each
tool x binary the latest run with a verdict (the sanitizer finished: clean, errors, or the test's own
exit), else the latest cut one, else a crashed one (the tool's "Internal Sanitizer Error", in the summary
or in the run's excerpt: no verdict), else the latest not reached or skipped by the test. A committed
table (the "#  TOOL  BINARY  LABEL  ..." lines of an earlier log) can seed it.

A run of part i of n of a binary's cases ("BINARY@i/n", MEMOPT_TEST_PART) is a row of its own; the binary
has a verdict under a tool when a whole run has one, or when parts 1..n of one n all have one (the parts
then stand in the table in its place, and replace a whole run's verdict when they are all newer).

Runs of racecheck-all, racecheck-ours and memcheck-noapi count as racecheck and memcheck, their kind in
the label; so do "[libraries excluded]" for racecheck and synccheck, and "[marked]" for initcheck, when the
log's header says the run was made so.

Usage: tools/sanitize_table.py LABEL=LOG [LABEL=LOG ...] [--binaries "gpu_a gpu_b ..."] [--todo]
  --todo prints instead, one a line, the runs that would give each pair without a verdict one (its missing
  or unfinished parts, else the whole binary; racecheck as racecheck-all): SAN_RUNS="$(... --todo)".
  LABEL names the call (session, revision, card: "s15c2 d3e6bd0 H100"; no two spaces in a row); a LOG
  that is itself a table (lines starting "#  TOOL  gpu_") is read with each line's own label and LABEL is
  ignored. Prints the table, then the counts per tool. Exit 2 on bad arguments, 1 on an unreadable log.
"""
import math
import re
import sys

TOOLS = ["memcheck", "racecheck", "initcheck", "synccheck"]
KINDS = {"racecheck-all": "racecheck", "racecheck-ours": "racecheck", "memcheck-noapi": "memcheck"}
BIN = r"gpu_\w+(?:@\d+/\d+)?"  # a binary, or part i of n of its cases
RUN = re.compile(r"^(memcheck-noapi|memcheck|racecheck-all|racecheck-ours|racecheck|initcheck|synccheck)\s+(" + BIN +
                 r")\s+(.*)$")
# binary@i/n is binary.partIofN there (binary@i-n in session 16's first call)
EXCERPT = re.compile(r"^---- cs-([a-z-]+)-(gpu_\w+(?:\.part\d+of\d+|@\d+-\d+)?)\.log")
SEEDED = re.compile(r"^#\s+(memcheck|racecheck|initcheck|synccheck)\s{2,}gpu_")
RANK = {"verdict": 3, "cut": 2, "crashed": 1, "not reached": 0}
LABEL_W = 52
LONG_CUT = 120  # seconds: a part cut this late, in a summary that does not say by what, is run again as halves


def kind(text):
    # the tool's own failure, or the test killed (exit 9: SIGKILL, in session 16 the host's OOM killer:
    # dmesg named the racecheck processes, 40-47 GB each): no verdict either way
    if ("Internal Sanitizer Error" in text or "SANITIZER CRASHED" in text or "KILLED" in text or
            "test did not finish" in text):
        return "crashed"
    if re.search(r"exit\s+9: test exit 9\b", text):
        return "crashed"
    if "skipped: the stage budget" in text or "not reached" in text or "skipped by the test" in text:
        return "not reached"
    if "cut at" in text:
        return "cut"
    if re.search(r"exit\s+\d+:", text):
        return "verdict"
    return None


def read_raw(lines, label):
    """(tool, binary, label, text) for each summary line of a log: one call's, or several concatenated,
    each part from its "== compute-sanitizer" header on, with that header's settings."""
    starts = [i for i, l in enumerate(lines) if l.startswith("== compute-sanitizer")] or [0]
    if starts[0] != 0:
        starts.insert(0, 0)
    out = []
    for a, b in zip(starts, starts[1:] + [len(lines)]):
        out += read_part(lines[a:b], label)
    return out


def read_part(lines, label):
    excl = any(l.startswith("== racecheck and synccheck check the suite's kernels") for l in lines)
    marked = any(re.match(r"^== initcheck with MEMOPT_MARK_LIB_WRITES=1", l) for l in lines)
    crashed = set()  # (tool as written, binary) whose excerpt shows the tool's own failure
    cur = None
    for l in lines:
        m = EXCERPT.match(l)
        if m:
            t, b = m.groups()
            cur = (t, re.sub(r"(?:\.part|@)(\d+)(?:of|-)(\d+)$", r"@\1/\2", b))
        elif cur and "Internal Sanitizer Error" in l:
            crashed.add(cur)
    out = []
    for l in lines:
        m = RUN.match(l)
        if not m:
            continue
        raw, b, text = m.groups()
        tool = KINDS.get(raw, raw)
        tags = []
        if raw != tool:
            tags.append(raw)
        elif tool in ("racecheck", "synccheck") and excl:
            tags.append("libraries excluded")
        elif tool == "initcheck" and marked:
            tags.append("marked")
        lab = label + (" [" + ", ".join(tags) + "]" if tags else "")
        if (raw, b) in crashed and "SANITIZER CRASHED" not in text:
            text = "SANITIZER CRASHED (Internal Sanitizer Error in its log): no verdict | " + text
        out.append((tool, b, lab, text))
    return out


def read_table(lines):
    out = []
    for l in lines:
        if not SEEDED.match(l):
            continue
        parts = re.split(r"\s{2,}", l, maxsplit=4)  # '#', tool, binary, label, text
        if len(parts) == 5:
            out.append(tuple(parts[1:]))
    return out


def parts_of(best, tool, b):
    """Binary b's runs in parts under tool: n -> {i: entry} for each binary@i/n read."""
    parts = {}
    for (t, key), e in best.items():
        m = re.match(re.escape(b) + r"@(\d+)/(\d+)$", key)
        if t == tool and m:
            parts.setdefault(int(m.group(2)), {})[int(m.group(1))] = e
    return parts


def most_complete(parts):
    """Of a binary's sets of parts (n -> {i: entry}), the one nearest a verdict: the most parts with a
    verdict, then the most cut or better (a skipped or crashed part counts for nothing), then the larger n."""
    def key(n):
        ranks = [e[0] for e in parts[n].values()]
        return (sum(r == RANK["verdict"] for r in ranks), sum(r >= RANK["cut"] for r in ranks), n)
    return max(parts, key=key)


def covered(have, i, n):
    """Whether part i of n's cases are all run by the parts in have ({(i, n)}): case k is in part k % n + 1,
    so part i of n is part i or i + n of 2n, and so on; the parts need not share one n (a part cut for time
    is run again as its two halves)."""
    ns = {m for _, m in have} | {n}
    l = 1
    for m in ns:
        l = l * m // math.gcd(l, m)
    if l > 4096:  # too many residues to walk: the part itself, or all its parts at one finer n
        return (i, n) in have or any(m % n == 0 and all((j, m) in have for j in range(i, m + 1, n)) for m in ns)
    return all(any(r % m == j - 1 for j, m in have) for r in range(i - 1, l, n))


def verdict_parts(best, tool, b, after=0):
    """The parts of binary b with a verdict under tool, read after entry number after: {(i, n): entry}."""
    return {(i, n): e for n, ps in parts_of(best, tool, b).items() for i, e in ps.items()
            if e[0] == RANK["verdict"] and e[3] > after}


def rows_of(best, tool, b):
    """The table's rows for binary b under tool, and its rank (-1: no run). A whole run with a verdict
    stands alone; else parts that together run every case, all with a verdict, stand in its place (of any
    n: part i of n is covered by parts i and i + n of 2n); else the whole run (or "no run") and whatever
    parts there are, the rank the better of the whole run's and the worst part's of the most complete n (a
    missing part: not reached, a part covered by finer parts: a verdict)."""
    whole = best.get((tool, b))
    parts = parts_of(best, tool, b)
    def name(n, i):
        return f"{b}@{i}/{n}"
    def order(k):
        return (k[1], k[0])
    # parts with a verdict that run every case, all newer than the whole run's verdict, replace it
    after = whole[3] if whole and whole[0] == RANK["verdict"] else 0
    have = verdict_parts(best, tool, b, after)
    if have and covered(set(have), 1, 1):
        return [(name(n, i), have[(i, n)]) for i, n in sorted(have, key=order)], RANK["verdict"]
    if whole and whole[0] == RANK["verdict"]:
        return [(b, whole)], whole[0]
    rows = [(b, whole or (-1, "-", "no run", 0))] if whole or not parts else []
    rank = whole[0] if whole else -1
    if parts:
        n = most_complete(parts)
        have = set(verdict_parts(best, tool, b))
        worst = min(RANK["verdict"] if covered(have, i, n) else parts[n].get(i, (RANK["not reached"],))[0]
                    for i in range(1, n + 1))
        rank = max(rank, worst)
        for m in sorted(parts):
            rows += [(name(m, i), parts[m][i]) for i in sorted(parts[m])]
    return rows, rank


def too_long(e):
    """Whether a part's run e was cut for its own length, so that its two halves should be run instead: cut at
    its time limit (not by the stage's budget) after beginning two or more of its cases (a single case too long
    for one run stays one); a summary from before session 17 says neither, and a cut after LONG_CUT seconds is
    taken as too long (it may have been the budget)."""
    if e[0] != RANK["cut"]:
        return False
    text = e[2]
    if "by the stage budget" in text:
        return False
    m = re.search(r"(\d+) of its cases begun", text)
    if m:
        return int(m.group(1)) >= 2
    if "at its time limit" in text:
        return True
    m = re.search(r"cut at (\d+)s", text)
    return m is not None and int(m.group(1)) >= LONG_CUT


def todo_runs(best, tool, b):
    """The runs (SAN_RUNS's "tool:binary[@i/n]") that would give binary b a verdict under tool: none if it has
    one; else, for each part of its most complete set of parts that no verdict covers, that part again, or
    its two halves (i and i + n of 2n) when it was too long for one run (too_long) or its halves were run;
    else the whole run. racecheck is named racecheck-all (every kernel: the exclusion of the libraries'
    kernels crashes the tool)."""
    _, r = rows_of(best, tool, b)
    if r == RANK["verdict"]:
        return []
    name = "racecheck-all" if tool == "racecheck" else tool
    parts = parts_of(best, tool, b)
    if not parts:
        return [f"{name}:{b}"]
    have = set(verdict_parts(best, tool, b))
    def need(i, n):
        if covered(have, i, n):
            return []
        e = parts.get(n, {}).get(i, (-1, "", ""))
        halve = any(parts.get(2 * n, {}).get(j, (-1,))[0] >= RANK["cut"] for j in (i, i + n)) or too_long(e)
        if n <= 32 and halve:
            return need(i, 2 * n) + need(i + n, 2 * n)
        return [(i, n)]
    n = most_complete(parts)
    return [f"{name}:{b}@{i}/{m}" for j in range(1, n + 1) for i, m in need(j, n)]


def main(argv):
    bins = None
    todo = False
    args = []
    i = 0
    while i < len(argv):
        if argv[i] == "--todo":
            todo = True
            i += 1
            continue
        if argv[i] == "--binaries":
            if i + 1 >= len(argv) or not argv[i + 1].split():
                print("sanitize_table.py: --binaries: expected a list of binaries, e.g. --binaries \"gpu_a gpu_b\"",
                      file=sys.stderr)
                return 2
            bins = argv[i + 1].split()
            i += 2
            continue
        args.append(argv[i])
        i += 1
    if not args:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    best = {}  # (tool, bin) -> (rank, label, text, seq); later entries of equal rank replace earlier ones
    seq = 0  # the order runs were read in: a later log's runs are newer
    seen_bins = set()
    for a in args:
        if "=" not in a:
            print(f"sanitize_table.py: '{a}': expected LABEL=LOG", file=sys.stderr)
            return 2
        label, path = a.split("=", 1)
        if "  " in label or not label.strip():
            print(f"sanitize_table.py: label '{label}': expected a non-empty label without two spaces in a row",
                  file=sys.stderr)
            return 2
        try:
            lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
        except OSError as e:
            print(f"sanitize_table.py: {path}: {e.strerror}", file=sys.stderr)
            return 1
        table = any(SEEDED.match(l) for l in lines)  # a committed table: its lines only
        for tool, b, lab, text in (read_table(lines) if table else read_raw(lines, label)):
            k = kind(text)
            if k is None:
                continue
            seen_bins.add(b)
            r = RANK[k]
            old = best.get((tool, b))
            seq += 1
            if old is None or r >= old[0]:
                best[(tool, b)] = (r, lab, " ".join(text.split()), seq)
    bins = bins or sorted({b.split("@")[0] for b in seen_bins})
    w = max([LABEL_W] + [len(v[1]) for v in best.values()])
    if todo:
        for tool in TOOLS:
            for b in bins:
                for r in todo_runs(best, tool, b):
                    print(r)
        return 0
    counts = {t: {k: 0 for k in RANK} for t in TOOLS}
    table = []
    for tool in TOOLS:
        for b in bins:
            rows, r = rows_of(best, tool, b)
            if r >= 0:
                counts[tool][[k for k, v in RANK.items() if v == r][0]] += 1
            else:
                counts[tool]["not reached"] += 1
            table += [(tool, name, lab, text) for name, (_, lab, text, _) in rows]
    bw = max([26] + [len(t[1]) + 1 for t in table])  # a long binary@i/n still two spaces from its label
    for tool, name, lab, text in table:
        print(f"#  {tool:<10} {name:<{bw}} {lab:<{w}}  {text[:170]}")  # two spaces at least: the seed's separator
    print("#")
    for tool in TOOLS:
        n = counts[tool]
        print(f"#  {tool:<10} {n['verdict']}/{len(bins)} with a verdict, {n['cut']} cut, {n['crashed']} crashed, "
              f"{n['not reached']} not reached")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
