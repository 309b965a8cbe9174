#!/usr/bin/env python3
# Pools `nowcast-meta scan` logs of single runs (one process per seed, run side by side) into the
# table one scan over all those runs would print, for BENCHMARKS.md section 9.
"""Usage: python3 bench/pool_scans.py LOG ...
Each cell's lead is N x sum(B - J) / sum(B - B2) over all rows of all logs; a log gives its cells'
leads and the baseline lines (B, B2 per state), from which sum(B - J) per log is recovered."""
import re
import sys

STATE = re.compile(r"without a jump after (\d+) steps ([0-9.]+), after \d+ ([0-9.]+)")
CELL = re.compile(r"^\| (\S+) \| (\S+) \| (\d+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \| ([-+]\d+) \| (\d+) \|$", re.M)


def main(paths):
    if not paths:
        sys.exit(__doc__)
    cells, n = {}, None
    for path in paths:
        text = open(path).read()
        states = STATE.findall(text)
        if not states:
            sys.exit(f"{path}: no baseline lines (\"without a jump after N steps ...\"): not a finished scan log")
        n = int(states[0][0])
        progress = sum(float(b) - float(b2) for _, b, b2 in states)  # sum(B - B2) of this log
        for m in CELL.finditer(text):
            rows = int(m.group(8))
            c = cells.setdefault(m.group(1, 2, 3, 4), {"at": 0.0, "after": 0.0, "rows": 0, "gained": 0.0, "progress": 0.0})
            c["at"] += float(m.group(5)) * rows
            c["after"] += float(m.group(6)) * rows
            c["rows"] += rows
            c["gained"] += int(m.group(7)) * progress / n  # the log's rounded lead, back to sum(B - J)
            c["progress"] += progress
    print(f"| nowcaster | moved | k | scale | loss at the jump / now | after {n} steps: jump / no jump | lead in steps | rows |")
    print("|---|---|---|---|---|---|---|---|")
    for (model, part, k, scale), c in cells.items():
        lead = n * c["gained"] / c["progress"] if c["progress"] > 0 else float("nan")
        print(f"| {model} | {part} | {k} | {scale} | {c['at'] / c['rows']:.4f} | {c['after'] / c['rows']:.4f} | {lead:+.0f} | {c['rows']} |")


if __name__ == "__main__":
    main(sys.argv[1:])
