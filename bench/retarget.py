#!/usr/bin/env python3
# Steps to a target set by another plain run: a mode's curves, measured earlier, against plain
# re-run at another setting (e.g. its learning rate re-tuned), seed by seed, without re-running the mode.
#
# usage: python3 bench/retarget.py --plain DIR [DIR ...] [--plain-mode P] --runs DIR [DIR ...] --mode MODE
#
# Each --plain DIR is a hybrid_bench output whose mode P (default "plain") is the new baseline (one
# seed per DIR); each --runs DIR holds MODE for the same seed (matched by the seed column). The target is the
# new plain's best80 (its best validation loss within 80 % of its steps); steps to it are
# interpolated between evaluations as hybrid_bench does. Only steps are compared: runs made at
# different times on a shared machine have no common clock (hybrid_bench's own wall-clock ratios
# come from modes run side by side).
import argparse
import csv
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nowcast_runs import best80_target, curve_of, to_target  # noqa: E402


def seed_of(d):
    with open(os.path.join(d, "hybrid_curves.csv")) as f:
        seeds = {int(r["seed"]) for r in csv.DictReader(f)}
    if len(seeds) != 1:
        raise SystemExit(f"{d}: expected one seed, found {sorted(seeds)}")
    return seeds.pop()


def main():
    ap = argparse.ArgumentParser(description="steps to a target set by another plain run")
    ap.add_argument("--plain", nargs="+", required=True)
    ap.add_argument("--runs", nargs="+", required=True)
    ap.add_argument("--plain-mode", default="plain")
    ap.add_argument("--mode", required=True)
    a = ap.parse_args()
    runs = {seed_of(d): d for d in a.runs}
    ratios = []
    for d in sorted(a.plain, key=seed_of):
        seed = seed_of(d)
        if seed not in runs:
            raise SystemExit(f"seed {seed}: no --runs DIR holds it")
        plain = curve_of(d, a.plain_mode)
        if not plain:
            raise SystemExit(f"{d}: no mode {a.plain_mode}")
        target = best80_target(d, mode=a.plain_mode)
        _, plain_steps = to_target(plain, target)
        run = curve_of(runs[seed], a.mode)
        if not run:
            raise SystemExit(f"{runs[seed]}: no mode {a.mode}")
        _, steps = to_target(run, target)
        ratio = plain_steps / steps if steps == steps else 0.0  # NaN: never reached
        ratios.append(ratio)
        reached = f"{steps:.0f} steps" if steps == steps else "never"
        print(f"seed {seed}: target {target:.4f}, {a.plain_mode} {plain_steps:.0f} steps, final {plain[-1][2]:.4f}; "
              f"{a.mode} {reached}: {ratio:.2f}x in steps, final {run[-1][2]:.4f}")
    print(f"median {statistics.median(ratios):.2f}x in steps ({min(ratios):.2f}-{max(ratios):.2f}x), "
          f"{len(ratios)} seeds")


if __name__ == "__main__":
    main()
