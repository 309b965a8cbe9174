#!/usr/bin/env python3
# What a model that sees the loss gradient at the state could say of plain training's expected
# future: gradient-aware directions, per-scalar fits and whole-matrix subspaces, on scan dumps.
#
# usage: python3 bench/python/gradient_fit.py DUMP.safetensors [DUMP ...] [--target D] [--no-fits]
#        python3 bench/python/gradient_fit.py --check [DUMP]   (self-test: synthetic data, a dump's bounds)
#
# future_fit.py and subspace_fit.py rule out models that read only the weights' trajectory (per
# scalar and per matrix) on the tiny GPT. The class they leave open sees what training computes:
# gradients on data. `nowcast-meta scan --dump-dir` writes, per state, the loss gradient on each
# probe batch at the state's weights ("grad-p/<param>", p = 0 .. P-1; the scan's validation
# batches). From them, per tensor: G = the mean gradient over the P batches, v = the mean of the
# squared per-batch gradients (a fresh second moment, as AdamW's over its last ~20 steps at
# beta2 0.95), and the preconditioned direction A = G / (sqrt(v) + eps), AdamW's update with no
# momentum. Against F = the mean of the futures at D steps minus the state's weights:
#   - directions: -G, -A, -sign(G) and -w (AdamW's weight decay pulls along it), each with its best
#     gain per tensor (an oracle's one number per tensor), beside the trend and the mean future's own
#     look at S steps carried on (references); and how much of G is signal (its halves' agreement);
#   - per-scalar fits (future_fit.py's linear and 64 x 64 MLP, on the other dumps / in sample) of F
#     from the history with -G, -A and the gradient's signal-to-noise G^2 / v added;
#   - whole matrices: F inside the rank-r left and right singular subspaces of G, of A, of the P
#     per-batch gradients side by side (the gradients' uncentred covariance) and of the looks -
#     the most any predictor confined to those subspaces could get right - against F's own best
#     rank r (subspace_fit.py's ceilings, with the gradient's subspaces in place of the past's).
# Every row is the cosine with F as the scan scores a jump: over all parameters for directions and
# fits, over the weight matrices for subspaces (their share of |F|^2 is printed).
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import future_fit  # noqa: E402
from subspace_fit import gain_ceiling, low_rank, project  # noqa: E402
from subspace_fit import cosine as matrix_cosine  # noqa: E402

CONTEXT = future_fit.CONTEXT
RANKS = (1, 4, 8, 32)
EPS = 1e-8  # AdamW's


class GradDump:
    """One state's context, gradients and futures: per scalar in tensor units (future_fit's layout)
    and per weight matrix (subspace_fit's)."""

    def __init__(self, path, target):
        tensors, self.interval, names, steps, self.target = future_fit.read_scan_dump(path, target)
        self.path = path
        self.batches = len({k.split("/")[0] for k in tensors if k.startswith("grad-")})
        if self.batches == 0:
            raise SystemExit(f"{path}: no gradients (grad-p/...): dumped before the scan wrote them; scan again")
        self.looks = [s for s in steps if s < self.target]
        cols = {k: [] for k in ("grad", "adam", "snr")}
        hist, y, scale, full = [], [], [], []
        self.mats, f2_all, f2_mat = [], 0.0, 0.0
        self.halves = [0.0, 0.0, 0.0]  # <G1, G2>, |G1|^2, |G2|^2 over all parameters
        for name in names:
            w = [tensors[f"state-{j}/{name}"].double() for j in range(CONTEXT)]
            f = tensors[f"mean-{self.target}/{name}"].double() - w[0]
            gs = torch.stack([tensors[f"grad-{p}/{name}"].double() for p in range(self.batches)])  # [P, *shape]
            g, v = gs.mean(0), gs.pow(2).mean(0)
            a = g / (v.sqrt() + EPS)
            looks = {s: tensors[f"mean-{s}/{name}"].double() - w[0] for s in self.looks}
            half = self.batches // 2  # the two halves' mean gradients: how much of G is signal
            if half:
                g1, g2 = gs[:half].mean(0), gs[half:2 * half].mean(0)
                self.halves[0] += (g1 * g2).sum().item()
                self.halves[1] += g1.pow(2).sum().item()
                self.halves[2] += g2.pow(2).sum().item()
            full.append({"future": f, "grad": -g, "adam": -a, "sign": -torch.sign(g), "decay": -w[0],
                         "past": w[0] - w[CONTEXT - 1],
                         **{f"look-{s}": looks[s] * (self.target / s) for s in self.looks}})
            f2_all += f.pow(2).sum().item()
            s = (w[0] - w[CONTEXT - 1]).pow(2).mean().sqrt().item()
            if s > 0:  # per scalar, in units of the tensor's past change (future_fit's)
                hist.append(torch.stack([((w[j] - w[0]) / s).flatten() for j in range(1, CONTEXT)], dim=1))
                y.append((f / s).flatten())
                scale.append(torch.full((f.numel(),), s, dtype=torch.float64))
                for key, x in (("grad", -g), ("adam", -a)):
                    cols[key].append((x / (x.pow(2).mean().sqrt() + 1e-300)).flatten())
                cols["snr"].append((g.pow(2) / (v + 1e-300)).flatten())
            if w[0].dim() >= 2 and w[0].shape[0] >= 2 and w[0][0].numel() >= 2:
                as_matrix = lambda x: x.reshape(x.shape[0], -1)  # noqa: E731  (a conv kernel: [out, in * kh * kw])
                f2_mat += f.pow(2).sum().item()
                # the P gradients side by side: their left (right) singular vectors span the
                # directions the batches' gradients use on the output (input) side
                stacked = gs.reshape(self.batches, w[0].shape[0], -1)
                self.mats.append({"name": name, "future": as_matrix(f), "grad": as_matrix(g), "adam": as_matrix(a),
                                  "left": torch.cat(list(stacked), dim=1), "right": torch.cat(list(stacked), dim=0),
                                  "past": as_matrix(w[0] - w[CONTEXT - 1]),
                                  **{f"look-{s}": as_matrix(looks[s]) for s in self.looks}})
        self.full = full
        self.hist, self.y, self.scale = torch.cat(hist), torch.cat(y), torch.cat(scale)
        self.cols = {k: torch.cat(v) for k, v in cols.items()}
        self.matrix_share = f2_mat / max(f2_all, 1e-300)
        # cosine of the two halves' mean gradients; for G over both halves its signal's share of
        # |G|^2 is about 2 c / (1 + c) (independent noise of equal size in each half)
        self.half_cosine = self.halves[0] / ((self.halves[1] * self.halves[2]) ** 0.5 + 1e-300)

    def features(self, look):
        # future_fit's interface: the history and the named gradient columns of `look`
        return torch.cat([self.hist] + [self.cols[k][:, None] for k in look], dim=1)


def direction_cosine(d, key):
    dot = sum((x[key] * x["future"]).sum().item() for x in d.full)
    pp = sum(x[key].pow(2).sum().item() for x in d.full)
    ff = sum(x["future"].pow(2).sum().item() for x in d.full)
    return dot / ((pp * ff) ** 0.5 + 1e-300)


def gradient_subspace(f, x, r):
    # F onto the top-r left singular vectors of the stacked-by-columns gradients and the top-r
    # right singular vectors of the stacked-by-rows ones
    u = torch.linalg.svd(x["left"], full_matrices=False)[0][:, :r]
    vh = torch.linalg.svd(x["right"], full_matrices=False)[2][:r]
    return u @ (u.T @ f @ vh.T) @ vh


def direction_rows(d):
    out = [("trend: the last 4 intervals' change carried on", direction_cosine(d, "past"))]
    out += [(f"the mean future at {s} steps carried on", direction_cosine(d, f"look-{s}")) for s in d.looks]
    out += [("-G: the mean gradient at the state", direction_cosine(d, "grad")),
            ("-A: G / sqrt(v), AdamW's step without momentum", direction_cosine(d, "adam")),
            ("-sign(G)", direction_cosine(d, "sign")),
            ("-w: the weights' own direction (weight decay's pull)", direction_cosine(d, "decay")),
            ("ceiling: -G with its best gain per tensor", gain_ceiling([(x["grad"], x["future"]) for x in d.full])),
            ("ceiling: -A with its best gain per tensor", gain_ceiling([(x["adam"], x["future"]) for x in d.full])),
            ("ceiling: -w with its best gain per tensor", gain_ceiling([(x["decay"], x["future"]) for x in d.full])),
            ("ceiling: the trend with its best gain per tensor", gain_ceiling([(x["past"], x["future"]) for x in d.full]))]
    return out


def subspace_rows(d):
    m = d.mats
    out = []
    for r in RANKS:
        out.append((f"F's own best rank-{r}", matrix_cosine([(low_rank(x["future"], r), x["future"]) for x in m])))
    for r in RANKS:
        out.append((f"ceiling: F in G's rank-{r} subspaces", matrix_cosine([(project(x["future"], x["grad"], r), x["future"]) for x in m])))
    for r in RANKS:
        out.append((f"ceiling: F in A's rank-{r} subspaces", matrix_cosine([(project(x["future"], x["adam"], r), x["future"]) for x in m])))
    for r in RANKS:
        out.append((f"ceiling: F in the {d.batches} batch gradients' rank-{r} subspaces",
                    matrix_cosine([(gradient_subspace(x["future"], x, r), x["future"]) for x in m])))
    for r in RANKS:
        out.append((f"ceiling: F in the past change's rank-{r} subspaces",
                    matrix_cosine([(project(x["future"], x["past"], r), x["future"]) for x in m])))
    for s in d.looks:
        for r in RANKS:
            out.append((f"ceiling: F in the look at {s} steps' rank-{r} subspaces",
                        matrix_cosine([(project(x["future"], x[f"look-{s}"], r), x["future"]) for x in m])))
    for r in (1, 8):
        out.append((f"rank-{r} -G", matrix_cosine([(low_rank(x["grad"], r), x["future"]) for x in m])))
    return out


FITS = [((), "history alone (future_fit.py's)"), (("grad",), "history + -G"), (("grad", "adam"), "history + -G + -A"),
        (("grad", "adam", "snr"), "history + -G + -A + G^2/v")]


def table(label, dumps, rows_of):
    names = [os.path.basename(d.path).replace(".safetensors", "") for d in dumps]
    rows = [rows_of(d) for d in dumps]
    print(label)
    print("| model | " + " | ".join(names) + " | mean |")
    print("|---|" + "---|" * (len(dumps) + 1))
    for i, (what, _) in enumerate(rows[0]):
        cells = [r[i][1] for r in rows]
        print(f"| {what} | " + " | ".join(f"{c:+.3f}" for c in cells) + f" | {sum(cells) / len(cells):+.3f} |")
    sys.stdout.flush()


def report(dumps, fits=True):
    for d in dumps:
        print(f"{os.path.basename(d.path)}: {d.batches} probe batches' gradients, {len(d.mats)} matrices holding "
              f"{d.matrix_share:.3f} of |F|^2 at {d.target} steps; looks {d.looks}; the two halves' mean gradients "
              f"line up at {d.half_cosine:+.3f} (G's signal ~{2 * d.half_cosine / (1 + d.half_cosine):.2f} of |G|^2)")
    table(f"cosine with the mean future at {dumps[0].target} steps over all parameters", dumps, direction_rows)
    table("cosine with it over the weight matrices (subspace ceilings)", dumps, subspace_rows)
    if not fits:
        return
    names = [os.path.basename(d.path).replace(".safetensors", "") for d in dumps]
    print("per-scalar fits (future_fit.py's), cosine on the other dumps / on the dump itself")
    print("| model | " + " | ".join(names) + " | mean |")
    print("|---|" + "---|" * (len(dumps) + 1))
    for look, what in FITS:
        for kind, fit in (("linear", future_fit.fit_linear), ("MLP 64x64", future_fit.fit_mlp)):
            cells, held = [], []
            for i, d in enumerate(dumps):
                others = [e for j, e in enumerate(dumps) if j != i]
                out = future_fit.cosine(fit(others, look)(d), d) if others else float("nan")
                cells.append(f"{out:+.3f} / {future_fit.cosine(fit([d], look)(d), d):+.3f}")
                held.append(out)
            print(f"| {kind}, {what} | " + " | ".join(cells) + f" | {sum(held) / len(held):+.3f} |")
            sys.stdout.flush()


def self_check(dump_path):
    # A future that is the gradient's descent direction must be found by -G (cosine 1) and inside
    # G's rank-2 subspaces when G is rank 2; noise must be found by neither. On a real dump: no
    # subspace ceiling holds more of F than F's own best rank r (Ky Fan), and the gradients exist.
    torch.manual_seed(1)
    out_dim, in_dim = 40, 30
    u = torch.linalg.qr(torch.randn(out_dim, 2, dtype=torch.float64))[0]
    v = torch.linalg.qr(torch.randn(in_dim, 2, dtype=torch.float64))[0]
    g = u @ torch.diag(torch.tensor([2.0, 1.0], dtype=torch.float64)) @ v.T
    future = u @ torch.tensor([[-1.0, 0.3], [0.2, -2.0]], dtype=torch.float64) @ v.T
    noise = torch.randn(out_dim, in_dim, dtype=torch.float64)
    inside = matrix_cosine([(project(future, g, 2), future)])
    outside = matrix_cosine([(project(noise, g, 2), noise)])
    descent = matrix_cosine([(-g, -3 * g)])
    ok = abs(inside - 1) < 1e-9 and abs(outside) < 0.35 and abs(descent - 1) < 1e-9
    print(f"future in G's rank-2 subspaces {inside:+.4f}; noise {outside:+.4f}; -G against a descent future {descent:+.4f}")
    if dump_path:
        d = GradDump(dump_path, None)
        sub = dict(subspace_rows(d))
        for r in RANKS:
            best = sub[f"F's own best rank-{r}"]
            ok &= all(c <= best + 1e-9 for k, c in sub.items() if k.startswith("ceiling") and f"rank-{r} " in k)
        grad = dict(direction_rows(d))["-G: the mean gradient at the state"]
        ok &= d.batches >= 1 and len(d.mats) > 0 and -1 <= grad <= 1 and d.features(FITS[-1][0]).shape[1] == CONTEXT - 1 + 3
        print(f"dump {os.path.basename(dump_path)}: {d.batches} batches' gradients, {len(d.mats)} matrices; "
              f"-G against F {grad:+.3f}, F's best rank 1 {sub['F' + chr(39) + 's own best rank-1']:+.3f}")
    print("gradient_fit self-check: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def main():
    return future_fit.scan_main("gradient-aware models of the expected future, on scan dumps", GradDump, report,
                                self_check, needs=" (with gradients)")


if __name__ == "__main__":
    sys.exit(main())
