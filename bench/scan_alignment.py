#!/usr/bin/env python3
# One table of how jumps line up with plain's expected future, from `nowcast-meta scan --oracle-steps`
# logs: a row per scanned state, a column per aligned jump (BENCHMARKS.md 9, "Why the rate decides").
"""Usage: python3 bench/scan_alignment.py LOG ...
Each cell is the cosine of a jump's change with the mean of the oracle futures (norm ratio in
brackets), as the scan printed it; a row also names the run (task, shape, rate, seed) and the state."""
import re
import sys

RUN = re.compile(r"^run \d+/\d+: (\S+) (\d+ x \d+|channels \S+|784-\S+).*? lr (\S+) .*?seed (\d+)", re.M)
STATE = re.compile(r"^  state \d+ \(step (\d+)\): loss at the state ([0-9.]+)", re.M)
ALIGNED = re.compile(r"^    (.+?) against the mean future at (\d+) steps: cosine ([-+][0-9.]+), norm ratio ([0-9.]+)", re.M)


def main(paths):
    if not paths:
        sys.exit(__doc__)
    rows, columns = [], []
    for path in paths:
        text = open(path).read()
        run = RUN.search(text)
        if not run:
            sys.exit(f"{path}: no \"run 1/N: ...\" line: not a scan log")
        states = list(STATE.finditer(text))
        if not states:
            sys.exit(f"{path}: no finished state (\"state T (step S): ...\"): the scan has not printed one yet")
        for i, state in enumerate(states):
            # A state's alignment lines come right after its own line.
            end = states[i + 1].start() if i + 1 < len(states) else len(text)
            cells = {}
            for m in ALIGNED.finditer(text, state.end(), end):
                label = f"{m.group(1)} (D {m.group(2)})"
                cells[label] = f"{m.group(3)} ({m.group(4)})"
                if label not in columns:
                    columns.append(label)
            task, shape, lr, seed = run.groups()
            rows.append((f"{task} {shape}", f"{float(lr):.0e}", seed, f"{state.group(1)}, {state.group(2)}", cells))
    print("| run | lr | seed | state: step, loss | " + " | ".join(columns) + " |")
    print("|---" * (4 + len(columns)) + "|")
    for run, lr, seed, state, cells in rows:
        print(f"| {run} | {lr} | {seed} | {state} | " + " | ".join(cells.get(c, "-") for c in columns) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
