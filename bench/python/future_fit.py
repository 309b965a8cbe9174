#!/usr/bin/env python3
# What a per-scalar model can say of plain training's expected future: fits models of each scalar's
# recorded history (and optionally a short real look ahead) to the mean future that
# `nowcast-meta scan --dump-dir` wrote, and scores them as the scan does (cosine over all weights).
#
# usage: python3 bench/python/future_fit.py DUMP.safetensors [DUMP ...] [--target D]
#        python3 bench/python/future_fit.py --check [DUMP]   (self-test: synthetic data, a dump's layout)
#
# A dump holds, per parameter, the recorded states t - j ("state-j/<name>", j = 0 .. 4, one
# interval apart), the mean of the futures plain training reached from state t at S steps
# ("mean-S/<name>"), one future at each jump length D ("one-D/<name>") and, with `scan --averages`,
# the run's moving averages of the weights at t ("average-h/<name>"). Per tensor everything is
# measured in units of s = rms(w_t - w_{t-4}) (as WNN+ normalises per tensor), so the models see
# the same numbers for a big and a small tensor. Features per scalar: h_j = (w_{t-j} - w_t) / s,
# j = 1 .. 4, with a look ahead l_S = (mean-S - w_t) / s, with the averages a_h = (average-h - w_t) / s,
# with the tensor's role (its name without the layer index, one-hot).
# Target: (mean-D - w_t) / s.
# Each model is fitted on the other dumps (leave one out; weighted by s^2, so that the fit's loss
# is the raw units' squared error the cosine is taken in) and on the dump itself (in sample: how
# much the features hold at all), and scored by the cosine between predicted and real change.
import argparse
import math
import os
import re
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nino_reference import read_safetensors  # noqa: E402

CONTEXT = 5  # recorded states per context (t - 4 .. t), as the nowcasters read them


def read_scan_dump(path, target):
    """A scan dump's tensors, its recording interval, the parameter names (sorted), the captured
    steps of the mean future and the target D (the largest captured step unless given); exits
    with the problem named when the file is not a dump or lacks that target. Shared by
    future_fit.py, subspace_fit.py and gradient_fit.py."""
    try:
        tensors, meta = read_safetensors(path)
        interval = int(meta["interval"])
    except (OSError, ValueError, KeyError, struct.error) as e:  # json's errors are ValueErrors
        raise SystemExit(f"{path}: not a scan dump written by `nowcast-meta scan --dump-dir` ({type(e).__name__}: {e})")
    names = sorted({k.split("/", 1)[1] for k in tensors if k.startswith("state-0/")})
    steps = sorted({int(k.split("/")[0][len("mean-"):]) for k in tensors if k.startswith("mean-")})
    if not names or not steps:
        raise SystemExit(f"{path}: not a scan dump (no state-0/... or mean-S/... tensors)")
    target = target if target else max(steps)
    if target not in steps:
        raise SystemExit(f"{path}: no mean future at {target} steps (it has {steps})")
    return tensors, interval, names, steps, target


class Dump:
    """One state's context and futures, flattened per scalar in tensor units."""

    def __init__(self, path, target):
        tensors, self.interval, names, steps, self.target = read_scan_dump(path, target)
        self.path = path
        self.halves = sorted({int(k.split("/")[0][len("average-"):]) for k in tensors if k.startswith("average-")})
        self.looks = [s for s in steps if s < self.target]
        hist, looks, y, scale, group = [], {s: [] for s in self.looks}, [], [], []
        avgs = {h: [] for h in self.halves}
        groups = {}
        for name in names:
            w = [tensors[f"state-{j}/{name}"].double().flatten() for j in range(CONTEXT)]
            s = (w[0] - w[CONTEXT - 1]).pow(2).mean().sqrt().item()
            if s == 0:
                continue  # a tensor that did not move: nothing to normalise by
            hist.append(torch.stack([(w[j] - w[0]) / s for j in range(1, CONTEXT)], dim=1))
            for la in self.looks:
                looks[la].append((tensors[f"mean-{la}/{name}"].double().flatten() - w[0]) / s)
            for h in self.halves:
                avgs[h].append((tensors[f"average-{h}/{name}"].double().flatten() - w[0]) / s)
            y.append((tensors[f"mean-{self.target}/{name}"].double().flatten() - w[0]) / s)
            scale.append(torch.full_like(w[0], s))
            key = re.sub(r"\.\d+\.", ".", name)  # the tensor's role, without its layer index
            group.append(torch.full(w[0].shape, groups.setdefault(key, len(groups)), dtype=torch.int64))
        self.hist, self.y, self.scale = torch.cat(hist), torch.cat(y), torch.cat(scale)
        self.looks_t = {s: torch.cat(v) for s, v in looks.items()}
        self.avgs_t = {h: torch.cat(v) for h, v in avgs.items()}
        self.group_names = list(groups)
        self.group = torch.cat(group)

    def features(self, look):
        # look: None (the history alone), S (and the look at S) or "averages" (and every average)
        if look is None:
            return self.hist
        if look == "role":  # and which tensor role the scalar is in (one-hot), as WNN+ embeds kinds
            return torch.cat([self.hist, torch.nn.functional.one_hot(self.group, len(self.group_names)).double()], dim=1)
        if look == "averages":
            return torch.cat([self.hist] + [self.avgs_t[h][:, None] for h in self.halves], dim=1)
        return torch.cat([self.hist, self.looks_t[look][:, None]], dim=1)


def cosine(pred, dump):
    a, b = pred * dump.scale, dump.y * dump.scale  # back in raw units
    return (a @ b / (a.norm() * b.norm() + 1e-300)).item()


def fit_linear(dumps, look):
    # Weighted least squares, no intercept (the change of a scalar that did not move is zero).
    xs = torch.cat([d.features(look) for d in dumps])
    ys = torch.cat([d.y for d in dumps])
    w = torch.cat([d.scale for d in dumps]).pow(2)
    sw = w.sqrt()[:, None]
    coef = torch.linalg.lstsq(xs * sw, ys[:, None] * sw).solution[:, 0]
    return lambda d: d.features(look) @ coef


def fit_mlp(dumps, look, steps=600, sample=200_000, seed=0):
    # Two hidden layers of 64, as small as WNN+'s per-scalar MLP; weighted MSE, Adam.
    g = torch.Generator().manual_seed(seed)
    xs = torch.cat([d.features(look) for d in dumps]).float()
    ys = torch.cat([d.y for d in dumps]).float()
    w = torch.cat([d.scale for d in dumps]).pow(2).float()
    w = w / w.mean()
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(xs.shape[1], 64), torch.nn.SiLU(), torch.nn.Linear(64, 64),
                              torch.nn.SiLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    for _ in range(steps):
        i = torch.randint(len(ys), (min(sample, len(ys)) // 20,), generator=g)
        loss = (w[i] * (net(xs[i])[:, 0] - ys[i]).pow(2)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return lambda d: net(d.features(look).float())[:, 0].double()


def report(dumps, fits=True):
    looks = sorted(set.intersection(*[set(d.looks) for d in dumps]))
    D = dumps[0].target
    # A look at S is part of the D-step future it is compared with: its overlap-free part is the
    # direction of the first S steps against that of the remaining D - S.
    for d in dumps:
        cells = []
        for s in looks:
            first, rest = d.looks_t[s] * d.scale, (d.y - d.looks_t[s]) * d.scale
            cells.append(f"{s}: {(first @ rest / (first.norm() * rest.norm() + 1e-300)).item():+.3f}")
        print(f"{os.path.basename(d.path)}: the mean future's first S steps against its other {D} - S, cosine: "
              + ", ".join(cells))
    rows = [("trend: the last 4 intervals' change carried on", lambda train, d:
             -d.hist[:, CONTEXT - 2] * D / ((CONTEXT - 1) * d.interval), False)]
    for s in looks:
        rows.append((f"the mean future at {s} steps carried on", lambda train, d, s=s: d.looks_t[s] * D / s, False))
    halves = sorted(set.intersection(*[set(d.halves) for d in dumps]))
    for h in halves:
        rows.append((f"the moving average of half-life {h}", lambda train, d, h=h: d.avgs_t[h], False))
    for look in [None, "role"] + looks + (["averages"] if halves else []):
        what = {None: "history", "role": "history + tensor role", "averages": "history + averages"}.get(look, f"history + look at {look}")
        if look != "role":  # a one-hot role adds only an offset per role to a linear fit
            rows.append((f"linear, {what}", lambda train, d, look=look: fit_linear(train, look)(d), True))
        if not isinstance(look, int):  # with a look the linear fit matched the MLP to 0.01 (BENCHMARKS 9)
            rows.append((f"MLP 64x64, {what}", lambda train, d, look=look: fit_mlp(train, look)(d), True))
    names = [os.path.basename(d.path).replace(".safetensors", "") for d in dumps]
    print(f"cosine with the mean future at {D} steps, per dump (fitted models: on the other dumps | on the dump itself)")
    print("| model | " + " | ".join(names) + " | mean |")
    print("|---|" + "---|" * (len(dumps) + 1))
    for label, predict, fitted in [r for r in rows if fits or not r[2]]:
        cells, held = [], []
        for i, d in enumerate(dumps):
            if fitted:
                others = [e for j, e in enumerate(dumps) if j != i]
                out = cosine(predict(others, d), d) if others else float("nan")
                inside = cosine(predict([d], d), d)
                cells.append(f"{out:+.3f} / {inside:+.3f}")
                held.append(out)
            else:
                c = cosine(predict(None, d), d)
                cells.append(f"{c:+.3f}")
                held.append(c)
        mean = sum(held) / len(held)
        print(f"| {label} | " + " | ".join(cells) + f" | {mean:+.3f} |")
        sys.stdout.flush()


def self_check(dump_path):
    # Synthetic features whose target is a known function of them: the linear fit must find a
    # linear target, the MLP a non-linear one, and a model of noise must not.
    torch.manual_seed(1)
    ok = True
    fake = []
    for k in range(2):
        d = Dump.__new__(Dump)
        n = 20000
        d.path, d.interval, d.target, d.looks = f"fake{k}", 10, 40, [5]
        d.hist = torch.randn(n, CONTEXT - 1, dtype=torch.float64)
        d.looks_t = {5: torch.randn(n, dtype=torch.float64)}
        d.scale = torch.rand(n, dtype=torch.float64) + 0.5
        d.y = 1.5 * d.hist[:, 0] - 0.5 * d.hist[:, 3] + 0.8 * d.looks_t[5]
        fake.append(d)
    lin = cosine(fit_linear(fake[:1], 5)(fake[1]), fake[1])
    mlp = cosine(fit_mlp(fake[:1], 5)(fake[1]), fake[1])
    for d in fake:
        d.y = torch.tanh(2 * d.hist[:, 1]) * d.looks_t[5]
    mlp_nl = cosine(fit_mlp(fake[:1], 5)(fake[1]), fake[1])
    lin_nl = cosine(fit_linear(fake[:1], 5)(fake[1]), fake[1])
    for d in fake:
        d.y = torch.randn(len(d.y), dtype=torch.float64)
    noise = cosine(fit_linear(fake[:1], 5)(fake[1]), fake[1])
    print(f"linear target: linear {lin:+.4f}, MLP {mlp:+.4f}; non-linear target: MLP {mlp_nl:+.4f}, linear {lin_nl:+.4f}; "
          f"noise: linear {noise:+.4f}")
    ok &= lin > 0.9999 and mlp > 0.98 and mlp_nl > 0.9 and lin_nl < 0.3 and abs(noise) < 0.05
    if dump_path:
        d = Dump(dump_path, None)
        la = d.looks[0] if d.looks else None
        # A look at the target itself, carried on by D / D, is the target: cosine 1 exactly.
        d2 = Dump(dump_path, None)
        d2.looks_t = {d2.target: d2.y.clone()}
        same = cosine(d2.looks_t[d2.target], d2)
        print(f"dump {os.path.basename(dump_path)}: {len(d.y)} scalars in {len(d.group_names)} tensor roles, interval "
              f"{d.interval}, target {d.target} steps, looks {d.looks}; the target against itself {same:+.4f}")
        ok &= abs(same - 1) < 1e-9 and len(d.y) > 0 and (la is None or d.looks_t[la].shape == d.y.shape)
    print("future_fit self-check: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def scan_main(description, load_dump, report, self_check, has_fits=True, needs=""):
    """The command line the scan-dump scripts share: DUMP ... [--target D] [--check] [--no-fits]."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("dumps", nargs="*")
    ap.add_argument("--target", type=int, default=0, help="D: the mean future to compare with (default the largest)")
    ap.add_argument("--check", action="store_true", help="self-test on synthetic data (with a dump: also its layout)")
    if has_fits:
        ap.add_argument("--no-fits", action="store_true", help="only the rows that fit nothing (fast)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.check:
        return self_check(a.dumps[0] if a.dumps else None)
    if not a.dumps:
        ap.error("give one or more dumps of `nowcast-meta scan --dump-dir`" + needs)
    dumps = [load_dump(p, a.target) for p in a.dumps]
    if has_fits:
        report(dumps, fits=not a.no_fits)
    else:
        report(dumps)
    return 0


def main():
    return scan_main("per-scalar models of the expected future, on scan dumps", Dump, report, self_check)


if __name__ == "__main__":
    sys.exit(main())
