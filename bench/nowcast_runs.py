#!/usr/bin/env python3
# Pools single-seed hybrid_bench runs (one directory each) into one median, and replays their
# delayed-verification verdicts under another tolerance rule, for BENCHMARKS.md section 9.
"""Usage:
  python3 bench/nowcast_runs.py [--mode wnn-span] [--tail 0.2] DIR ...  per run and median over
      the runs: time to target, final loss and the mean over the last 20 % of evaluations
  python3 bench/nowcast_runs.py --replay-tolerance 0.1 DIR ... kept jumps a tolerance of
      T x k / 40 (shrinking with the horizon) would have undone, from each run's verdict lines
Each DIR holds hybrid_summary.csv and the run's output as DIR/log or DIR.log."""
import argparse
import csv
import os
import re
import statistics

VERDICT = re.compile(r"step (\d+): k (\d+) .*probe loss ([\d.]+) against plain's ~([\d.]+) \(([\d.]+) before the jump.*: (kept|undone)")


def rows(d):
    with open(os.path.join(d, "hybrid_summary.csv")) as f:
        return list(csv.DictReader(f))


def log_of(d):
    for path in (os.path.join(d, "log"), d.rstrip("/") + ".log"):
        if os.path.exists(path):
            return path
    raise SystemExit(f"{d}: no log (DIR/log or DIR.log)")


def tail_mean(d, mode, share):
    """Mean validation loss over the evaluations in the last `share` of the run: on a plateau a
    single final evaluation moves by more than the differences it is asked to rank."""
    with open(os.path.join(d, "hybrid_curves.csv")) as f:
        curve = [r for r in csv.DictReader(f) if r["mode"] == mode]
    end = max(int(r["step"]) for r in curve)
    return statistics.mean(float(r["val_loss"]) for r in curve if int(r["step"]) >= (1 - share) * end)


def pool(dirs, mode, share):
    speed, steps, lower, tail_lower = [], [], 0, 0
    done = []
    for d in dirs:
        # A run still in progress has no summary yet (or no row for the mode): said, left out.
        by_mode = {r["mode"]: r for r in rows(d)} if os.path.exists(os.path.join(d, "hybrid_summary.csv")) else {}
        if "plain" not in by_mode or mode not in by_mode:
            print(f"{d}: no finished plain and {mode} rows (in progress, or another mode): left out")
            continue
        done.append(d)
        plain, run = by_mode["plain"], by_mode[mode]
        # A run that never reached the target has no ratio (nan): it counts as 0x, below all others.
        s, k = (0.0 if x != x else x for x in (float(run["speedup_vs_plain"]), float(run["step_ratio_vs_plain"])))
        fp, fr = float(plain["final_val_loss"]), float(run["final_val_loss"])
        tp, tr = tail_mean(d, "plain", share), tail_mean(d, mode, share)
        speed.append(s)
        steps.append(k)
        lower += fr < fp
        tail_lower += tr <= tp
        print(f"{d}: {s:.2f}x [{k:.2f}x], final {fr:.4f} ({fp:.4f}), last {share:.0%} mean {tr:.4f} ({tp:.4f}), "
              f"total {float(run['total_seconds']) / float(plain['total_seconds']) - 1:+.1%}")
    if not done:
        raise SystemExit("no finished runs")
    dirs = done
    print(f"{len(dirs)} runs: median {statistics.median(speed):.2f}x wall-clock ({min(speed):.2f}-{max(speed):.2f}x), "
          f"{statistics.median(steps):.2f}x in steps; final loss lower in {lower} of {len(dirs)}, "
          f"mean over the last {share:.0%} of evaluations no higher in {tail_lower} of {len(dirs)}")


def replay(dirs, tolerance, horizon_max=40):
    changed = 0
    for d in dirs:
        flips = []
        for line in open(log_of(d)):
            m = VERDICT.search(line)
            if not m:
                continue
            step, k, now, plain, before, verdict = m.groups()
            keep = float(now) <= float(plain) + tolerance * int(k) / horizon_max * float(before)
            if (verdict == "kept") != keep:
                flips.append(f"step {step} k {k}: {verdict} -> {'kept' if keep else 'undone'}")
        changed += bool(flips)
        print(f"{d}: " + ("; ".join(flips) if flips else "no verdict changes"))
    print(f"{changed} of {len(dirs)} runs change")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--mode", default="wnn-span")
    ap.add_argument("--replay-tolerance", type=float)
    ap.add_argument("--tail", type=float, default=0.2, help="share of the run whose evaluations are averaged")
    a = ap.parse_args()
    replay(a.dirs, a.replay_tolerance) if a.replay_tolerance is not None else pool(a.dirs, a.mode, a.tail)
