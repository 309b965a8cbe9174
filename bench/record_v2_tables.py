#!/usr/bin/env python3
# Tables for BENCHMARKS.md from the benchmark of record v2 (bench/record_v2.sh): one row per part
# and mode, medians over seeds with their ranges, read from each part's hybrid_summary.csv.
"""Usage: python3 bench/record_v2_tables.py [bench/results/record_v2] > tables.md"""
import csv
import math
import os
import statistics
import sys


def fmt_ratio(x):
    return "never" if x == 0 or math.isnan(x) else f"{x:.2f}x"


def median_speedup(values):
    # A run that never reached the target counts as infinitely slow (0), as hybrid_bench does.
    vals = [0.0 if math.isnan(v) else v for v in values]
    return statistics.median(vals), min(vals), max(vals)


def load(path):
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            for k, v in r.items():
                if k not in ("task", "protocol", "mode"):
                    try:
                        r[k] = float(v)
                    except ValueError:
                        r[k] = float("nan")
            rows.append(r)
    return rows


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "bench/results/record_v2"
    for part in sorted(os.listdir(root)):
        path = os.path.join(root, part, "hybrid_summary.csv")
        if not os.path.exists(path):
            continue
        rows = load(path)
        if not rows:
            continue
        seeds = sorted({int(r["seed"]) for r in rows})
        plain = {int(r["seed"]): r for r in rows if r["mode"] == "plain"}
        print(f"\n#### {part} ({rows[0]['task']}, protocol {rows[0]['protocol']}, seeds "
              f"{', '.join(str(s) for s in seeds)})\n")
        print("| mode | time to target vs plain: median [min-max] | steps to target vs plain | "
              "final val loss (median; plain's) | lower final loss than plain | "
              "best val loss (median) | total s (median) | nowcaster s (median) | peak MiB | jumps kept |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        modes = []
        for r in rows:
            if r["mode"] not in modes:
                modes.append(r["mode"])
        for mode in modes:
            rs = [r for r in rows if r["mode"] == mode]
            med, lo, hi = median_speedup([r["speedup_vs_plain"] for r in rs])
            smed, _, _ = median_speedup([r["step_ratio_vs_plain"] for r in rs])
            final = statistics.median(r["final_val_loss"] for r in rs)
            plain_final = statistics.median(plain[int(r["seed"])]["final_val_loss"] for r in rs)
            lower = sum(r["final_val_loss"] < plain[int(r["seed"])]["final_val_loss"] for r in rs)
            best = statistics.median(r["best_val_loss"] for r in rs)
            total = statistics.median(r["total_seconds"] for r in rs)
            now = statistics.median(r["nowcast_seconds"] for r in rs)
            peak = statistics.median(r["peak_mib"] for r in rs)
            kept = ", ".join(f"{int(r['predicted_kept'])}/{int(r['predicted_applied'])}" for r in rs)
            print(f"| {mode} | {fmt_ratio(med)} [{fmt_ratio(lo)}-{fmt_ratio(hi)}] | {fmt_ratio(smed)} | "
                  f"{final:.4f} ({plain_final:.4f}) | {lower} of {len(rs)} | {best:.4f} | {total:.1f} | "
                  f"{now:.2f} | {peak:.1f} | {kept if mode not in ('plain', 'snoo') else '-'} |")


if __name__ == "__main__":
    main()
