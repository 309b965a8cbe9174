#!/usr/bin/env python3
# What a cross-parameter model that works on whole weight matrices could say of plain training's
# expected future: low-rank views of the recorded history against the mean future in scan dumps.
#
# usage: python3 bench/python/subspace_fit.py DUMP.safetensors [DUMP ...] [--target D]
#        python3 bench/python/subspace_fit.py --check [DUMP]   (self-test: synthetic matrices, a dump's bounds)
#
# future_fit.py showed that no per-scalar model of a scalar's own history lines up with the tiny
# GPT's expected 1000-step future beyond cosine ~0.2. A scalar's history is one noisy draw; a
# matrix's history is many, and if the future moves in a few directions of the matrix (as
# gradients of linear layers are often near low rank) those directions can be read from the past
# with its noise averaged out. Per 2-D tensor W [out, in], with the recorded states w_{t-j}
# (j = 0 .. 4, one interval apart), the past change P = w_t - w_{t-4} and the future F = mean-D - w_t:
#   - rank-r trend:   the best rank-r approximation of P, carried on (a denoised trend)
#   - subspace ceiling: F projected onto P's top-r left and right singular vectors,
#                       U_r U_r^T F V_r V_r^T: the most any predictor confined to the past's
#                       rank-r subspaces could get right (it knows F's coordinates there)
#   - weights' subspace ceiling: the same with the singular vectors of w_t itself
#   - F's own rank: the best rank-r approximation of F (how low-rank the target is at all)
#   - subspace extrapolation: the four interval changes' coordinates in P's rank-r subspaces,
#     carried on linearly (a DMD-like model with r x r numbers per tensor)
#   - per-tensor gain ceiling: each tensor's trend with the gain that fits F best (sign included),
#     the most a model could get from the trend's direction by learning one number per tensor
# Every row is the cosine with F over all matrices (1-D tensors, biases and norms, are left out;
# their share of |F|^2 is printed), as the scan scores a jump.
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from future_fit import read_scan_dump, scan_main  # noqa: E402

CONTEXT = 5  # recorded states per context (t - 4 .. t), as the nowcasters read them
RANKS = (1, 2, 4, 8, 16, 32)


def low_rank(m, r):
    u, s, vh = torch.linalg.svd(m, full_matrices=False)
    r = min(r, s.numel())
    return (u[:, :r] * s[:r]) @ vh[:r]


def project(f, basis_of, r):
    # f [out, in] onto the top-r left and right singular vectors of basis_of [out, in]
    u, _, vh = torch.linalg.svd(basis_of, full_matrices=False)
    r = min(r, u.shape[1])
    ur, vr = u[:, :r], vh[:r].T
    return ur @ (ur.T @ f @ vr) @ vr.T


def subspace_extrapolation(deltas, basis_of, r, steps_ahead):
    # deltas: the interval changes oldest first, each [out, in]; their coordinates C_j = U^T D_j V
    # [r, r] are fitted by a line in j and the line's mean rate carried on steps_ahead intervals.
    u, _, vh = torch.linalg.svd(basis_of, full_matrices=False)
    r = min(r, u.shape[1])
    ur, vr = u[:, :r], vh[:r].T
    cs = torch.stack([ur.T @ d @ vr for d in deltas])  # [4, r, r]
    j = torch.arange(len(deltas), dtype=cs.dtype) - (len(deltas) - 1) / 2
    mean, slope = cs.mean(0), (j[:, None, None] * cs).sum(0) / (j * j).sum()
    # change per interval at the last recorded one, and growing along the line from there
    last = len(deltas) - 1 - (len(deltas) - 1) / 2
    total = sum(mean + slope * (last + i) for i in range(1, steps_ahead + 1))
    return ur @ total @ vr.T


class Dump:
    """One state's 2-D tensors: the context, the mean future at D steps and any looks."""

    def __init__(self, path, target):
        tensors, self.interval, names, _, self.target = read_scan_dump(path, target)
        self.path = path
        self.mats, f2_all, f2_mat = [], 0.0, 0.0
        for name in names:
            w = [tensors[f"state-{j}/{name}"].double() for j in range(CONTEXT)]
            f = tensors[f"mean-{self.target}/{name}"].double() - w[0]
            f2_all += f.pow(2).sum().item()
            if w[0].dim() < 2 or w[0].shape[0] < 2 or w[0][0].numel() < 2:
                continue
            # a conv kernel [out, in, kh, kw] is the matrix [out, in * kh * kw] it multiplies by
            w, f = [x.reshape(x.shape[0], -1) for x in w], f.reshape(f.shape[0], -1)
            f2_mat += f.pow(2).sum().item()
            deltas = [w[j - 1] - w[j] for j in range(CONTEXT - 1, 0, -1)]  # oldest first
            self.mats.append({"name": name, "w": w[0], "past": w[0] - w[CONTEXT - 1], "deltas": deltas, "future": f})
        self.matrix_share = f2_mat / max(f2_all, 1e-300)


def cosine(pairs):
    # pairs: (prediction, future) per tensor; one cosine over all of them
    dot = sum((p * f).sum().item() for p, f in pairs)
    pp = sum(p.pow(2).sum().item() for p, _ in pairs)
    ff = sum(f.pow(2).sum().item() for _, f in pairs)
    return dot / ((pp * ff) ** 0.5 + 1e-300)


def gain_ceiling(pairs):
    # each prediction scaled by the gain that fits its future best: cos = sqrt(sum <p,f>^2/|p|^2) / |F|
    num = sum((p * f).sum().item() ** 2 / max(p.pow(2).sum().item(), 1e-300) for p, f in pairs)
    ff = sum(f.pow(2).sum().item() for _, f in pairs)
    return (num / ff) ** 0.5


def rows(d):
    ahead = max(1, round(d.target / d.interval))
    m = d.mats
    out = [("trend: the last 4 intervals' change carried on", cosine([(x["past"], x["future"]) for x in m]))]
    for r in RANKS:
        out.append((f"rank-{r} trend", cosine([(low_rank(x["past"], r), x["future"]) for x in m])))
    for r in RANKS:
        out.append((f"ceiling: F in the past change's rank-{r} subspaces",
                    cosine([(project(x["future"], x["past"], r), x["future"]) for x in m])))
    for r in RANKS:
        out.append((f"ceiling: F in the weights' rank-{r} subspaces",
                    cosine([(project(x["future"], x["w"], r), x["future"]) for x in m])))
    for r in RANKS:
        out.append((f"F's own best rank-{r}", cosine([(low_rank(x["future"], r), x["future"]) for x in m])))
    for r in (1, 4, 16):
        out.append((f"subspace extrapolation, rank {r}",
                    cosine([(subspace_extrapolation(x["deltas"], x["past"], r, ahead), x["future"]) for x in m])))
    out.append(("ceiling: the trend with its best gain per tensor", gain_ceiling([(x["past"], x["future"]) for x in m])))
    out.append(("ceiling: the rank-4 trend with its best gain per tensor",
                gain_ceiling([(low_rank(x["past"], 4), x["future"]) for x in m])))
    return out


def report(dumps):
    names = [os.path.basename(d.path).replace(".safetensors", "") for d in dumps]
    for d, n in zip(dumps, names):
        print(f"{n}: {len(d.mats)} matrices, {d.matrix_share:.3f} of |F|^2 at {d.target} steps; per matrix, "
              "the trend's cosine with F / F in the past's rank-4 subspaces; the share of |F|^2 in F's top direction "
              "u v^T, and |u . 1| / sqrt(rows) (1: every row moves the same way)")
        for x in d.mats:
            c1 = cosine([(x["past"], x["future"])])
            c2 = cosine([(project(x["future"], x["past"], 4), x["future"])])
            u, sv, _ = torch.linalg.svd(x["future"], full_matrices=False)
            top = (sv[0] ** 2 / sv.pow(2).sum()).item()
            rows_alike = abs(u[:, 0].sum().item()) / u.shape[0] ** 0.5
            print(f"  {x['name']:<28} {tuple(x['w'].shape)!s:<12} |F| {x['future'].norm().item():8.4f}  "
                  f"{c1:+.3f} / {c2:+.3f}  top {top:.3f}, rows alike {rows_alike:.3f}")
    table = [rows(d) for d in dumps]
    print(f"cosine with the mean future at {dumps[0].target} steps over all weight matrices, per dump")
    print("| model | " + " | ".join(names) + " | mean |")
    print("|---|" + "---|" * (len(dumps) + 1))
    for i, (label, _) in enumerate(table[0]):
        cells = [t[i][1] for t in table]
        print(f"| {label} | " + " | ".join(f"{c:+.3f}" for c in cells) + f" | {sum(cells) / len(cells):+.3f} |")


def self_check(dump_path):
    # A future that lies in the past's rank-2 subspaces must be found by the rank-2 ceiling (1) and
    # not by rank 1; a future of noise must be outside any low-rank subspace of the past. On a real
    # dump: no rank-r projection of F holds more of it than F's own best rank r (Ky Fan).
    torch.manual_seed(1)
    out_dim, in_dim = 64, 48
    u = torch.linalg.qr(torch.randn(out_dim, 2, dtype=torch.float64))[0]
    v = torch.linalg.qr(torch.randn(in_dim, 2, dtype=torch.float64))[0]
    past = u @ torch.diag(torch.tensor([3.0, 1.0], dtype=torch.float64)) @ v.T
    future = u @ torch.tensor([[0.0, 2.0], [1.0, 0.5]], dtype=torch.float64) @ v.T
    noise = torch.randn(out_dim, in_dim, dtype=torch.float64)
    r2 = cosine([(project(future, past, 2), future)])
    r1 = cosine([(project(future, past, 1), future)])
    rn = cosine([(project(noise, past, 4), noise)])
    # a constant change per interval, carried on, is the future exactly
    step = past / 4
    ext = cosine([(subspace_extrapolation([step] * 4, past, 2, 5), step * 5)])
    gain = gain_ceiling([(past, -2 * past), (future, future)])
    print(f"in-subspace future: rank 2 {r2:+.4f}, rank 1 {r1:+.4f}; noise in rank 4 {rn:+.4f}; "
          f"constant rate extrapolated {ext:+.4f}; gains fitted {gain:+.4f}")
    ok = abs(r2 - 1) < 1e-9 and r1 < 0.9 and abs(rn) < 0.35 and abs(ext - 1) < 1e-9 and abs(gain - 1) < 1e-9
    if dump_path:
        d = Dump(dump_path, None)
        table = dict(rows(d))
        for r in RANKS:
            best = table[f"F's own best rank-{r}"]
            for kind in ("the past change's", "the weights'"):
                ok &= table[f"ceiling: F in {kind} rank-{r} subspaces"] <= best + 1e-9
        best32, past32 = table["F's own best rank-32"], table["ceiling: F in the past change's rank-32 subspaces"]
        print(f"dump {os.path.basename(dump_path)}: {len(d.mats)} matrices, {d.matrix_share:.3f} of |F|^2; "
              f"F's best rank 32 {best32:+.3f}, the past's rank-32 subspaces hold {past32:+.3f}")
        ok &= len(d.mats) > 0
    print("subspace_fit self-check: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def main():
    return scan_main("low-rank models of the expected future, on scan dumps", Dump, report, self_check,
                     has_fits=False)


if __name__ == "__main__":
    sys.exit(main())
