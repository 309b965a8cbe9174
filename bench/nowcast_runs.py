#!/usr/bin/env python3
# Pools single-seed hybrid_bench runs (one directory each) into one median, and replays their
# delayed-verification verdicts under another tolerance rule, for BENCHMARKS.md section 9.
"""Usage:
  python3 bench/nowcast_runs.py [--mode wnn-span] [--tail 0.2] DIR ...  per run and median over
      the runs: time to target (recomputed from the curves by the record's best80 rule, whatever
      rule the run's summary used), final loss and the mean over the last 20 % of evaluations
  python3 bench/nowcast_runs.py --smooth 3 DIR ...  the same, with time to target recomputed on
      curves averaged over 3 evaluations centred on each (the target is then not one noisy minimum)
  python3 bench/nowcast_runs.py --replay-tolerance 0.1 DIR ... kept jumps a tolerance of
      T x k / 40 (shrinking with the horizon) would have undone, from each run's verdict lines
  python3 bench/nowcast_runs.py --verdicts [--late-from 3000] DIR ...  the mode's delayed verdicts
      tallied: kept and undone before and from step 3000, undone jumps that ended above their
      pre-jump loss, and how far apart the probe losses of the two states before a jump are
  python3 bench/nowcast_runs.py --yardstick [--late-from 3000] DIR ...  how well plain's next
      evaluation is guessed from its earlier ones, on plain's own curves: the verdict's yardstick
      (carry the last two on at their rate, a rise counting as flat), no progress, a fitted trend
      of four, a power of the step fitted to the first 1000 steps (nowcast.plain_model=power),
      that power with its level averaged over the last five evaluations, and the same judged on
      the mean error of the next two (the least noise a verdict could see from plain's curve);
      rms and mean of log(actual / guess), steps 1000-2999 and from 3000 on
  python3 bench/nowcast_runs.py --norms [--every 1000] DIR ...  per mode against plain, every 1000
      steps: validation loss, accuracy, the weights' L2 norm and each tensor's norm as a ratio to
      plain's at the same step (hybrid_bench's curves since they carry val_accuracy and
      weight_norm, and its hybrid_norms.csv), and the |w| ratio to plain's where plain's loss
      (both averaged over 5 evaluations) reaches the mode's: the norm that would match its progress
      (past plain's end its loss and |w| over the second half carried on as powers of the step:
      meaningful at a constant rate, not past the end of a decaying schedule)
  python3 bench/nowcast_runs.py --gates --mode nino-span-power DIR ...  what gating the mode's
      jumps would have given: no jump from step S on (S = 3000 ... 7000), or none with a horizon
      k <= K; each undone jump a rule removes before the run's target gives back its window's
      steps, each kept one takes back the lead its verdict credited it with (in plain's time per
      step). Exact where every jump a rule removes was undone (the run then trains as it did,
      minus the windows); otherwise an estimate, and a lenient one: the credited lead
      underestimates a kept jump's gain (BENCHMARKS.md 9)
Each DIR holds hybrid_summary.csv and the run's output as DIR/log or DIR.log."""
import argparse
import csv
import math
import os
import re
import statistics

RESULT = re.compile(r"^\S+ seed \d+ (\S+)\s+target ")
EARLIER = re.compile(r"\(([\d.]+) before the jump, ([\d.]+) a recording earlier\)")
WINDOW = re.compile(r"judged (\d+) steps later")
LEAD = re.compile(r"~(\d+) steps ahead of plain")
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


def curve_of(d, mode, seed=None):
    """[(step, seconds, val_loss)] of one mode (of one seed, where DIR holds several), in step order."""
    with open(os.path.join(d, "hybrid_curves.csv")) as f:
        return [(int(r["step"]), float(r["seconds"]), float(r["val_loss"])) for r in csv.DictReader(f)
                if r["mode"] == mode and (seed is None or int(r["seed"]) == seed)]


def smoothed(curve, width):
    """Each evaluation replaced by the mean of the `width` centred on it (fewer at the ends); the
    step-0 evaluation is kept as it is and left out of its neighbours' means."""
    half, out = width // 2, [curve[0]]
    for i in range(1, len(curve)):
        window = curve[max(1, i - half):i + half + 1]
        out.append((curve[i][0], curve[i][1], statistics.mean(p[2] for p in window)))
    return out


def to_target(curve, target):
    """(seconds, steps) of the first point at or below target, interpolated as hybrid_bench does."""
    for (s0, t0, v0), (s1, t1, v1) in zip(curve, curve[1:]):
        if v1 <= target:
            f = 1.0 if v0 == v1 else (v0 - target) / (v0 - v1)
            return t0 + f * (t1 - t0), s0 + f * (s1 - s0)
    return float("nan"), float("nan")


def best80_target(d, width=1, seed=None, mode="plain"):
    """hybrid_bench's best80 rule: plain's (or `mode`'s) best validation loss within 80 % of its steps."""
    plain = smoothed(curve_of(d, mode, seed), width)
    return min(v for s, _, v in plain if 0 < s <= 0.8 * plain[-1][0])


def ratios_on_smoothed(d, mode, width):
    """(wall-clock, steps) ratios to the best80 target on curves smoothed over `width` evaluations
    (1: the curves as they are, which gives hybrid_bench's own figures for a best80 run)."""
    plain, run = smoothed(curve_of(d, "plain"), width), smoothed(curve_of(d, mode), width)
    target = best80_target(d, width)
    (tp, sp), (tr, sr) = to_target(plain, target), to_target(run, target)
    return tp / tr, sp / sr


def pool(dirs, mode, share, smooth=1):
    speed, steps, lower, tail_lower, at80_runs = [], [], 0, 0, []
    done, finals, tails = [], [], []  # (plain's, the mode's) per run
    for d in dirs:
        # A run still in progress has no summary yet (or no row for the mode): said, left out.
        by_mode = {r["mode"]: r for r in rows(d)} if os.path.exists(os.path.join(d, "hybrid_summary.csv")) else {}
        if "plain" not in by_mode or mode not in by_mode:
            print(f"{d}: no finished plain and {mode} rows (in progress, or another mode): left out")
            continue
        done.append(d)
        plain, run = by_mode["plain"], by_mode[mode]
        # Recomputed from the curves by the record's best80 rule, whatever rule the run's summary
        # used (hybrid_bench's default is the earlier records' at80; a run started without
        # --target best80 would otherwise be pooled under another target than the record's).
        # A run that never reached the target has no ratio (nan): it counts as 0x, below all others.
        ratios = ratios_on_smoothed(d, mode, smooth)
        if smooth == 1 and abs(best80_target(d) - float(plain["target"])) > 1e-6:
            at80_runs.append(d)
        s, k = (0.0 if x != x else x for x in ratios)
        fp, fr = float(plain["final_val_loss"]), float(run["final_val_loss"])
        tp, tr = tail_mean(d, "plain", share), tail_mean(d, mode, share)
        speed.append(s)
        steps.append(k)
        lower += fr < fp
        tail_lower += tr <= tp
        finals.append((fp, fr))
        tails.append((tp, tr))
        print(f"{d}: {s:.2f}x [{k:.2f}x], final {fr:.4f} ({fp:.4f}), last {share:.0%} mean {tr:.4f} ({tp:.4f}), "
              f"total {float(run['total_seconds']) / float(plain['total_seconds']) - 1:+.1%}")
    if not done:
        raise SystemExit("no finished runs")
    dirs = done
    if smooth > 1:
        print(f"time to target on curves averaged over {smooth} evaluations")
    if at80_runs:
        print(f"{len(at80_runs)} of {len(dirs)} runs' summaries used another target (hybrid_bench without "
              "--target best80): their ratios above are recomputed from the curves by the best80 rule")
    print(f"{len(dirs)} runs: median {statistics.median(speed):.2f}x wall-clock ({min(speed):.2f}-{max(speed):.2f}x), "
          f"{statistics.median(steps):.2f}x in steps; final loss lower in {lower} of {len(dirs)}, "
          f"mean over the last {share:.0%} of evaluations no higher in {tail_lower} of {len(dirs)}")
    # "No worse" read over the seeds rather than seed by seed: the medians of both measures.
    median = lambda pairs, i: statistics.median(p[i] for p in pairs)
    print(f"median final loss {median(finals, 1):.4f} (plain's {median(finals, 0):.4f}), median of the last "
          f"{share:.0%} means {median(tails, 1):.4f} (plain's {median(tails, 0):.4f})")


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


def verdict_lines(d, mode):
    """(line, VERDICT match) of each of `mode`'s verdict lines in the run's log: they follow the
    mode's result line (hybrid_bench prints each mode's nowcast log under its result)."""
    current = None
    for line in open(log_of(d)):
        r = RESULT.match(line)
        if r:
            current = r.group(1)
            continue
        m = VERDICT.search(line)
        if current == mode and m:
            yield line, m


def verdicts_of(d, mode):
    """[(step, kept, now, before, earlier or None)] of `mode`'s verdict lines in the run's log."""
    out = []
    for line, m in verdict_lines(d, mode):
        step, _, now, _, before, verdict = m.groups()
        e = EARLIER.search(line)
        out.append((int(step), verdict == "kept", float(now), float(before), float(e.group(2)) if e else None))
    return out


def verdicts(dirs, mode, late_from):
    """Kept and undone jumps before and from `late_from`, undone ones that ended above the loss
    they started from, and the spread between the probe losses of the two states before each late
    jump (200 steps apart on FM-16): the noise a single state's verdict has to live with."""
    bands = {"early": [0, 0, 0], "late": [0, 0, 0]}  # kept, undone, undone above the pre-jump loss
    diffs = []
    for d in dirs:
        vs = verdicts_of(d, mode)
        print(f"{d}: " + (", ".join(f"{s} {'kept' if k else 'undone'}" for s, k, *_ in vs) or f"no {mode} verdicts"))
        for step, kept, now, before, earlier in vs:
            b = bands["late" if step >= late_from else "early"]
            b[0 if kept else 1] += 1
            b[2] += (not kept) and now > before
            if step >= late_from and earlier is not None:
                diffs.append(before - earlier)
    for name, (kept, undone, above) in bands.items():
        where = f"before step {late_from}" if name == "early" else f"from step {late_from} on"
        print(f"jumps {where}: {kept} kept, {undone} undone ({above} of them above their pre-jump loss)")
    if diffs:
        print(f"probe loss of the state before a late jump minus the one a recording earlier, {len(diffs)} verdicts: "
              f"{min(diffs):+.3f} to {max(diffs):+.3f}, median {statistics.median(diffs):+.3f}, "
              f"rms {statistics.mean(x * x for x in diffs) ** 0.5:.3f}")


def gated_jumps(d, mode):
    """[(step, k, kept, window, lead)] of `mode`'s verdicts before its target (later ones cannot
    change its time to target), with the seconds plain spends per step and the mode's own time
    and plain's to the target; None where the run has no finished row for the mode."""
    by_mode = {r["mode"]: r for r in rows(d)}
    if "plain" not in by_mode or mode not in by_mode:
        return None
    plain, run = by_mode["plain"], by_mode[mode]
    target_step = float(run["steps_to_target"])
    jumps = []
    for line, m in verdict_lines(d, mode):
        if int(m.group(1)) >= target_step:
            continue
        w, lead = WINDOW.search(line), LEAD.search(line)
        jumps.append((int(m.group(1)), int(m.group(2)), m.group(6) == "kept", int(w.group(1)) if w else 0,
                      int(lead.group(1)) if lead else 0))
    step_seconds = float(plain["seconds_to_target"]) / float(plain["steps_to_target"])
    return jumps, step_seconds, float(run["seconds_to_target"]), float(plain["seconds_to_target"])


def gates(dirs, mode):
    runs = [(d, g) for d in dirs for g in [gated_jumps(d, mode)] if g is not None]
    if not runs:
        raise SystemExit(f"no finished plain and {mode} rows")
    for d, (jumps, _, seconds, plain_seconds) in runs:
        print(f"{d}: {plain_seconds / seconds:.2f}x; before the target: " +
              (", ".join(f"{s} k {k} " + (f"kept +{lead}" if kept else "undone") for s, k, kept, _, lead in jumps) or "no verdicts"))
    rules = [(f"no jump from step {s} on", lambda step, k, s=s: step >= s) for s in range(3000, 8000, 1000)]
    rules += [(f"no jump with k <= {kk}", lambda step, k, kk=kk: k <= kk) for kk in (4, 8, 12, 16)]
    base = [p / t for _, (_, _, t, p) in runs]
    print(f"{len(runs)} runs, {mode} as run: median {statistics.median(base):.3f}x, mean {statistics.mean(base):.3f}x, "
          f"lowest {min(base):.2f}x")
    for name, removes in rules:
        ratios, exact, windows, leads = [], 0, 0, 0
        for _, (jumps, step_seconds, seconds, plain_seconds) in runs:
            removed = [j for j in jumps if removes(j[0], j[1])]
            windows += sum(w for _, _, kept, w, _ in removed if not kept)
            leads += sum(lead for _, _, kept, _, lead in removed if kept)
            exact += not any(kept for _, _, kept, _, _ in removed)
            delta = sum(lead if kept else -w for _, _, kept, w, lead in removed) * step_seconds
            ratios.append(plain_seconds / (seconds + delta))
        print(f"  {name:26s} median {statistics.median(ratios):.3f}x, mean {statistics.mean(ratios):.3f}x, "
              f"lowest {min(ratios):.2f}x; windows given back {windows} steps, leads taken back {leads}; "
              f"exact in {exact} of {len(runs)} runs")


def power_exponent(curve, until):
    """b of loss ~ step^-b, least squares of log loss on log step over the evaluations in
    (0, until]: what nowcast.plain_model=power fits to the states before the first jump."""
    pts = [(s, v) for s, _, v in curve if 0 < s <= until]
    return -least_squares([math.log(s) for s, _ in pts], [math.log(v) for _, v in pts])[0]


def yardstick_errors(curve, first_jump):
    """log(actual / guess) of each evaluation from the first jump's on, guessed from the ones
    before it (plain's run: no jumps, so the guess's error is the yardstick's own): the verdict's
    two-point rate (a rise counted as flat), no progress, a least-squares line through the last
    four log losses (falling or flat), a power of the step fitted once to the evaluations up to
    the first jump, that power's level from the last five evaluations (a * step^-b with log a their
    mean of log loss + b log step: five noisy points instead of one), and the same level judged on
    the next two evaluations' mean error (where there are two). [(step guessed from, {name: error})]"""
    b = power_exponent(curve, first_jump)
    out = []
    for i in range(4, len(curve) - 1):
        (s, _, v), (s1, _, v1) = curve[i], curve[i + 1]
        if s < first_jump:
            continue
        ys = [math.log(p[2]) for p in curve[i - 3:i + 1]]
        slope = min(sum((x - 1.5) * (y - statistics.mean(ys)) for x, y in enumerate(ys)) / 5.0, 0.0)
        level = statistics.mean(math.log(p[2]) + b * math.log(p[0]) for p in curve[i - 4:i + 1] if p[0] > 0)
        errs = {"two-point rate": math.log(v1 / (v * min(v / curve[i - 1][2], 1.0))),
                "no progress": math.log(v1 / v),
                "fitted trend of 4": math.log(v1) - (statistics.mean(ys) + slope * 2.5),
                "power of the step": math.log(v1) - (math.log(v) - b * math.log(s1 / s)),
                "power, level of 5": math.log(v1) - (level - b * math.log(s1))}
        if i + 2 < len(curve):
            s2, _, v2 = curve[i + 2]
            errs["level of 5, judged on 2"] = 0.5 * (errs["power, level of 5"] + math.log(v2) - (level - b * math.log(s2)))
        out.append((s, errs))
    return out


def yardstick(dirs, late_from, first_jump=1000):
    bands = {f"steps {first_jump}-{late_from - 1}": {}, f"from step {late_from} on": {}}
    for d in dirs:
        for s, errs in yardstick_errors(curve_of(d, "plain"), first_jump):
            band = bands[f"from step {late_from} on" if s >= late_from else f"steps {first_jump}-{late_from - 1}"]
            for name, e in errs.items():
                band.setdefault(name, []).append(e)
    print(f"plain's next evaluation guessed from the ones before it, {len(dirs)} runs: log(actual / guess)")
    for band, pooled in bands.items():
        if not pooled:
            continue
        n = len(next(iter(pooled.values())))
        print(f"  {band} ({n} guesses):")
        for name, errs in pooled.items():
            rms = statistics.mean(e * e for e in errs) ** 0.5
            print(f"    {name:24s} rms {rms:.3f}, mean {statistics.mean(errs):+.3f}" +
                  (f" ({len(errs)} guesses)" if len(errs) != n else ""))


def progress_matched(curves, mode, step, width=5):
    """Where plain's loss reaches this mode's at `step` (both averaged over `width` evaluations)
    and the ratio of the mode's |w| to plain's there: 1 is the norm that matches the progress."""
    def series(m):
        pts = [(int(r["step"]), 0.0, float(r["val_loss"])) for r in curves if r["mode"] == m]
        norm = {int(r["step"]): float(r["weight_norm"]) for r in curves if r["mode"] == m}
        return smoothed(sorted(pts), width), norm
    plain, plain_norm = series("plain")
    own, own_norm = series(mode)
    loss = next(v for s, _, v in own if s == step)  # smoothed: one evaluation moves +-0.02
    for (s0, _, v0), (s1, _, v1) in zip(plain[1:], plain[2:]):
        if v1 <= loss:
            f = 1.0 if v0 == v1 else (v0 - loss) / (v0 - v1)
            at, w = s0 + f * (s1 - s0), plain_norm[s0] + f * (plain_norm[s1] - plain_norm[s0])
            return f"plain's loss there at ~{at:.0f} (|w| {w:.1f}): x{own_norm[step] / w:.2f}"
    # Past plain's run: its loss and |w| over the second half carried on as powers of the step.
    half = [(s, v) for s, _, v in plain if s >= plain[-1][0] / 2]
    fit = lambda ys: least_squares([math.log(s) for s, _ in half], [math.log(y) for y in ys])
    (lb, la), (nb, na) = fit([v for _, v in half]), fit([plain_norm[s] for s, _ in half])
    if lb >= 0:
        return "plain's loss stops falling: no match"
    at = math.exp((math.log(loss) - la) / lb)
    w = math.exp(na + nb * math.log(at))
    return f"plain's loss there at ~{at:.0f}, extrapolated (|w| {w:.1f}): x{own_norm[step] / w:.2f}"


def least_squares(xs, ys):
    """(slope, intercept) of the straight line through (xs, ys)."""
    mx, my = statistics.mean(xs), statistics.mean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return slope, my - slope * mx


def norms(dirs, every):
    for d in dirs:
        with open(os.path.join(d, "hybrid_curves.csv")) as f:
            curves = list(csv.DictReader(f))
        if "weight_norm" not in curves[0]:
            raise SystemExit(f"{d}: its curves carry no weight norms (written before hybrid_bench logged them)")
        with open(os.path.join(d, "hybrid_norms.csv")) as f:
            tensors = {}
            for r in csv.DictReader(f):
                tensors.setdefault((r["mode"], int(r["step"])), {})[r["tensor"]] = float(r["norm"])
        at = {(r["mode"], int(r["step"])): r for r in curves}
        modes = list(dict.fromkeys(r["mode"] for r in curves))
        print(f"{d}:")
        for mode in modes:
            print(f"  {mode}")
            for (m, step), r in sorted(at.items(), key=lambda x: x[0][1]):
                if m != mode or step == 0 or step % every:
                    continue
                line = (f"    step {step:5d}: loss {float(r['val_loss']):.4f}, accuracy {float(r['val_accuracy']):.4f},"
                        f" |w| {float(r['weight_norm']):.2f}")
                base = tensors.get(("plain", step))
                if mode != "plain" and base:
                    own = tensors[(mode, step)]
                    line += "; x plain: " + " ".join(f"{t} {own[t] / base[t]:.2f}" for t in own if t.endswith("weight"))
                    line += "; " + progress_matched(curves, mode, step)
                print(line)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--mode", default="wnn-span")
    ap.add_argument("--replay-tolerance", type=float)
    ap.add_argument("--verdicts", action="store_true", help="tally the mode's delayed verdicts (see above)")
    ap.add_argument("--yardstick", action="store_true", help="errors of plain's guessed progress (see above)")
    ap.add_argument("--gates", action="store_true", help="replay gates on the mode's late jumps (see above)")
    ap.add_argument("--norms", action="store_true", help="loss, accuracy and weight norms against plain's (see above)")
    ap.add_argument("--every", type=int, default=1000, help="steps between the rows of --norms")
    ap.add_argument("--late-from", type=int, default=3000, help="first step counted as late (--verdicts, --yardstick)")
    ap.add_argument("--tail", type=float, default=0.2, help="share of the run whose evaluations are averaged")
    ap.add_argument("--smooth", type=int, default=1, help="odd number of evaluations the curves are averaged over "
                    "before time to target is read (1: hybrid_bench's own figures)")
    a = ap.parse_args()
    if a.smooth < 1 or a.smooth % 2 == 0:
        ap.error(f"--smooth {a.smooth}: give an odd count of evaluations (1, 3, 5, ...), centred on each")
    if a.norms:
        norms(a.dirs, a.every)
    elif a.gates:
        gates(a.dirs, a.mode)
    elif a.yardstick:
        yardstick(a.dirs, a.late_from)
    elif a.verdicts:
        verdicts(a.dirs, a.mode, a.late_from)
    elif a.replay_tolerance is not None:
        replay(a.dirs, a.replay_tolerance)
    else:
        pool(a.dirs, a.mode, a.tail, a.smooth)
