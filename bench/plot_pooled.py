#!/usr/bin/env python3
# One plot for many seeds: each run's validation loss over its seed's plain target, against the
# share of plain's training time, median and quartiles over the runs, for plain and one other mode.
"""Usage: python3 bench/plot_pooled.py --mode MODE --out PNG [--title T] [--label L] DIR...

Each DIR is a hybrid_bench output (hybrid_curves.csv, hybrid_summary.csv) holding plain and MODE
for one or more seeds. A run's curve is rescaled so that 1.0 on the y axis is its seed's target
(plain's best validation loss within 80 % of its budget) and 1.0 on the x axis is plain's whole
training time for that seed: where a mode's median curve first reaches 1.0 is its typical time to
the target as a share of plain's run. Prints that crossing for each mode and draws the PNG with
gnuplot (median line, 25-75 % band).
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys

from nowcast_runs import best80_target

GRID = [i / 200 for i in range(1, 201)]  # shares of plain's training time


def runs_in(directory, mode):
    """[(seed, target, plain_total_seconds, {mode: [(seconds, val_loss), ...]})] for one DIR."""
    for name in ("hybrid_summary.csv", "hybrid_curves.csv"):
        if not os.path.isfile(os.path.join(directory, name)):
            sys.exit(f"{directory}: no {name} - pass folders that build/bench/hybrid_bench --out wrote")
    curves = {}
    with open(os.path.join(directory, "hybrid_curves.csv")) as f:
        for r in csv.DictReader(f):
            if r["mode"] not in ("plain", mode) or int(r["step"]) == 0:  # step 0: the untrained model
                continue
            curves.setdefault(int(r["seed"]), {}).setdefault(r["mode"], []).append(
                (float(r["seconds"]), float(r["val_loss"])))
    out = []
    for seed, by_mode in sorted(curves.items()):
        if "plain" not in by_mode or mode not in by_mode:
            continue
        plain_total = by_mode["plain"][-1][0]
        # The target by the best80 rule from plain's curve, not the summary's: a run started
        # without --target best80 has hybrid_bench's at80 target there.
        out.append((seed, best80_target(directory, seed=seed), plain_total, by_mode))
    return out


def at(curve, t):
    """Linear interpolation of a [(seconds, loss)] curve at t; None outside it."""
    if t < curve[0][0] or t > curve[-1][0]:
        return None
    for (t0, y0), (t1, y1) in zip(curve, curve[1:]):
        if t0 <= t <= t1:
            return y0 if t1 == t0 else y0 + (y1 - y0) * (t - t0) / (t1 - t0)
    return curve[-1][1]


def quartiles(values):
    if len(values) < 2:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], statistics.median(values), q[2]


def pooled(runs, mode):
    """{mode: [(x, q25, median, q75, n)]} over the grid, each run scaled by its seed's target."""
    table = {}
    for m in ("plain", mode):
        rows = []
        for x in GRID:
            ys = [v / target for _, target, total, by_mode in runs
                  if (v := at(by_mode[m], x * total)) is not None]
            if ys:
                rows.append((x, *quartiles(ys), len(ys)))
        table[m] = rows
    return table


def first_crossing(rows):
    """The first share of plain's time where the median is at or below 1.0 (the target)."""
    for x, _, med, _, _ in rows:
        if med <= 1.0:
            return x
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", required=True)
    ap.add_argument("--out", required=True, help="PNG to write")
    ap.add_argument("--title", default="")
    ap.add_argument("--label", default="", help="the mode's name in the key (default: the mode)")
    ap.add_argument("dirs", nargs="+")
    a = ap.parse_args()
    runs = [r for d in a.dirs for r in runs_in(d, a.mode)]
    if not runs:
        sys.exit(f"no run in {' '.join(a.dirs)} has both plain and {a.mode}: check --mode against hybrid_summary.csv")
    table = pooled(runs, a.mode)
    for m, rows in table.items():
        x = first_crossing(rows)
        where = f"{x:.3f} of plain's time" if x is not None else "never"
        print(f"{m}: median over {len(runs)} runs first at the target at {where}")
    dat = os.path.splitext(a.out)[0] + ".dat"
    with open(dat, "w") as f:
        for i, m in enumerate(table):
            f.write(f"# {m}: share of plain's time, q25, median, q75, runs\n")
            for row in table[m]:
                f.write("%.4f %.5f %.5f %.5f %d\n" % row)
            f.write("\n\n")
    label = a.label or a.mode.replace("@nowcast.", " ").replace("@", " ")
    script = f"""
set terminal pngcairo noenhanced size 1000,600
set output "{a.out}"
set title "{a.title} ({len(runs)} runs): validation loss / the seed's target, median and 25-75 %"
set xlabel "share of plain's training time"
set ylabel "validation loss / plain's target"
set yrange [0.85:1.6]
set grid
set key top right box opaque
set style fill transparent solid 0.2 noborder
plot "{dat}" index 0 using 1:2:4 with filledcurves lc rgb "#8000a0" notitle, \\
     "{dat}" index 0 using 1:3 with lines lw 2 lc rgb "#8000a0" title "plain", \\
     "{dat}" index 1 using 1:2:4 with filledcurves lc rgb "#009e73" notitle, \\
     "{dat}" index 1 using 1:3 with lines lw 2 lc rgb "#009e73" title "{label}", \\
     1 with lines dt 2 lc rgb "black" title "target"
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    print(f"plot: {a.out} (data {dat})")


if __name__ == "__main__":
    main()
