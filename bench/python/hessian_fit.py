#!/usr/bin/env python3
# The second-order view of the tiny GPT's expected future: the Hessian's top eigen-directions at a
# scan state, and how much of the expected 1000-step future, the gradient and the past lie in them.
#
# usage: python3 bench/python/hessian_fit.py DUMP.safetensors [DUMP ...] [--text KJV] [--k 32]
#                [--iters 96] [--batches 8] [--krylov M] [--threads 1]
#        python3 bench/python/hessian_fit.py --check   (self-test: Lanczos on a known spectrum)
#
# gradient_fit.py found the gradient at the state nearly orthogonal to where training goes (cosine
# +0.01-0.02 with F, the mean of three 1000-step futures minus the state's weights) and left the
# "river valley" reading open: the gradient lives in the few directions of high curvature, across
# which the weights oscillate about a valley's floor, and the progress of 1000 steps runs along
# the floor, in the flat directions. That is testable with Hessian-vector products. Here: the top
# k eigenpairs of the training loss's Hessian at the dumped state (Lanczos with full
# reorthogonalisation; the loss of `--batches` training batches of the scan's shape), and then,
# per state, the share of |x|^2 in the top-r eigenspace V_r (r = 1, 4, 16, k) for x = F, the mean
# gradient G on the scan's 16 probe batches, and the past change (the last 4 intervals), against a
# random r-dimensional subspace's r / n; and cosine(F, .) of the flat-space parts (I - V V^T) x of
# -G and of the past carried on, and of the step to the quadratic model's minimum inside V_r
# (-V Lambda^-1 V^T G, the valley floor's offset). With --krylov M (and --k 0 to skip the above):
# F's share in the Krylov space of G, span{G, HG, ..., H^(M-1) G}, which holds every direction M
# steps of CG / MINRES / Newton-Krylov can build from the gradient - their common ceiling - and the
# cosine with F of the damped Newton step -(H + s I)^-1 G and its saddle-free form -(|H| + s I)^-1 G
# inside it. A paying jump needs ~0.6 (gradient_fit.py).
#
# The dump's weights are loaded into a functional copy of the C++ GPT (names as its safetensors:
# h.<i>.attn.c_attn.weight [C, 3C], ...); the check that it is the same function: its gradient on
# the scan's probe batch 0 (the validation span's first 16 windows) against the dumped grad-0.
import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from future_fit import CONTEXT, read_scan_dump  # noqa: E402
from nino_reference import read_safetensors  # noqa: E402

N_HEAD = 4  # the tiny GPT's (bench_tasks.h: model.preset=tiny)
CONTEXT_T, BATCH = 128, 16


def gpt_loss(p, n_layer, idx, tgt):
    """The C++ GPT's loss (pre-LN, Conv1D weights [in, out], tanh GELU, tied head) on [B, T] bytes."""
    B, T = idx.shape
    x = p["wte.weight"][idx] + p["wpe.weight"][:T]
    C = x.shape[-1]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(n_layer):
        h = f"h.{i}."
        a = F.layer_norm(x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"])
        q, k, v = (a @ p[h + "attn.c_attn.weight"] + p[h + "attn.c_attn.bias"]).split(C, dim=2)
        q, k, v = (t.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // N_HEAD)
        y = (att.masked_fill(~mask, float("-inf")).softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p[h + "attn.c_proj.weight"] + p[h + "attn.c_proj.bias"]
        m = F.layer_norm(x, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"])
        u = F.gelu(m @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"], approximate="tanh")
        x = x + u @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"])
    logits = x @ p["wte.weight"].t()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))


def windows(tokens, starts):
    w = torch.stack([tokens[s:s + CONTEXT_T + 1] for s in starts])
    return w[:, :-1], w[:, 1:]


def lanczos(hvp, start, iters):
    """Lanczos with full reorthogonalisation from `start`: the orthonormal Krylov basis Q [n, m]
    of span{start, H start, ..., H^(m-1) start}, the tridiagonal T = Q^T H Q [m, m] and the last
    off-diagonal beta (0 when the space closed early)."""
    Q = [start / start.norm()]
    alpha, beta = [], []
    b = 0.0
    for j in range(iters):
        w = hvp(Q[j])
        alpha.append(torch.dot(w, Q[j]).item())
        scale = w.norm().item()
        basis = torch.stack(Q, dim=1)
        for _ in range(2):  # twice is enough (Kahan)
            w = w - basis @ (basis.t() @ w)
        b = w.norm().item()
        if b <= 1e-9 * scale or j + 1 == iters:  # the space closed (rounding leaves ~1e-15 x scale)
            break
        beta.append(b)
        Q.append(w / b)
    m = len(alpha)
    T = torch.diag(torch.tensor(alpha, dtype=torch.float64))
    for i, x in enumerate(beta[:m - 1]):
        T[i, i + 1] = T[i + 1, i] = x
    return torch.stack(Q[:m], dim=1), T, (b if b > 1e-9 * scale else 0.0)


def top_eigen(Q, T, last_beta, k):
    """The top-k Ritz pairs of a Lanczos run: (values [k] descending, vectors [n, k], residual
    norms |H y - theta y| [k])."""
    vals, vecs = torch.linalg.eigh(T)
    order = vals.argsort(descending=True)[:k]
    return vals[order], Q @ vecs[:, order], last_beta * vecs[-1, order].abs()


def krylov_solve(Q, T, rhs_norm, shift, absolute):
    """(H + shift I)^-1 b inside the Krylov space of b (Q[:, 0] = b / |b|): what CG / MINRES
    reach in m steps; with `absolute`, |H| in place of H (saddle-free Newton, Dauphin et al. 2014)."""
    vals, vecs = torch.linalg.eigh(T)
    if absolute:
        vals = vals.abs()
    coef = vecs.t()[:, 0] * rhs_norm / (vals + shift)
    return Q @ (vecs @ coef)


def flat(tensors, names):
    return torch.cat([tensors[n].double().flatten() for n in names])


def analyse(path, text, k, iters, n_batches, krylov, log):
    tensors, interval, names, steps, target = read_scan_dump(path, 0)
    state = int(read_safetensors(path)[1].get("state", -1))
    n_layer = len({n.split(".")[1] for n in names if n.startswith("h.")})
    shapes = {n: tensors[f"state-0/{n}"].shape for n in names}
    sizes = [tensors[f"state-0/{n}"].numel() for n in names]
    w0 = flat({n: tensors[f"state-0/{n}"] for n in names}, names)
    future = flat({n: tensors[f"mean-{target}/{n}"] for n in names}, names) - w0
    past = w0 - flat({n: tensors[f"state-{CONTEXT - 1}/{n}"] for n in names}, names)
    probes = len({key.split("/")[0] for key in tensors if key.startswith("grad-")})
    grad = sum(flat({n: tensors[f"grad-{p}/{n}"] for n in names}, names) for p in range(probes)) / probes

    def unflat(v, dtype=torch.float32):
        out, a = {}, 0
        for n, s in zip(names, sizes):
            out[n] = v[a:a + s].view(shapes[n]).to(dtype)
            a += s
        return out

    n_tok = text.numel()
    val_begin = n_tok - int(math.floor(n_tok * 0.1))  # data.val_fraction 0.1
    idx, tgt = windows(text, [val_begin + i * (CONTEXT_T + 1) for i in range(BATCH)])
    params = {n: t.clone().requires_grad_(True) for n, t in unflat(w0).items()}
    loss0 = gpt_loss(params, n_layer, idx, tgt)
    g0 = torch.autograd.grad(loss0, [params[n] for n in names])
    ours = torch.cat([g.double().flatten() for g in g0])
    dumped = flat({n: tensors[f"grad-0/{n}"] for n in names}, names)
    rel = ((ours - dumped).norm() / dumped.norm()).item()
    log(f"{os.path.basename(path)}: state {state}, {len(names)} tensors, {w0.numel()} weights, {n_layer} layers; "
        f"probe batch 0 loss {loss0.item():.4f}, gradient against the dumped grad-0: relative difference {rel:.1e}")
    if rel > 1e-3:
        raise SystemExit(f"{path}: this GPT is not the dumped one (gradient off by {rel:.1e}); check N_HEAD and the names")

    # The Hessian of the loss on n_batches training batches (the training span, drawn once).
    g = torch.Generator().manual_seed(1234)
    starts = torch.randint(0, val_begin - CONTEXT_T - 1, (n_batches * BATCH,), generator=g).tolist()
    batches = [windows(text, starts[i * BATCH:(i + 1) * BATCH]) for i in range(n_batches)]
    plist = [params[n] for n in names]
    loss = sum(gpt_loss(params, n_layer, i, t) for i, t in batches) / n_batches
    grads = torch.autograd.grad(loss, plist, create_graph=True)
    calls = [0]

    def hvp(v):
        calls[0] += 1
        vs = unflat(v)
        dot = sum((gr * vs[n]).sum() for gr, n in zip(grads, names))
        hv = torch.autograd.grad(dot, plist, retain_graph=True)
        return torch.cat([h.double().flatten() for h in hv])

    def cos(a, b):
        return (torch.dot(a, b) / (a.norm() * b.norm() + 1e-300)).item()

    if krylov:
        # Everything a polynomial in H can make of G: the Krylov space K_m(H, G) holds every m-step
        # CG / MINRES / Newton-Krylov direction; F's share in it is their ceiling.
        Q, T, _ = lanczos(hvp, grad, krylov)
        m = Q.shape[1]
        log(f"  the Krylov space of G, span{{G, HG, ..., H^{m - 1} G}} ({m} products): holds "
            f"{(Q.t() @ future).pow(2).sum().item() / future.pow(2).sum().item():.4f} of |F|^2 "
            f"(the past change: {(Q.t() @ past).pow(2).sum().item() / past.pow(2).sum().item():.4f}; "
            f"a random {m}-dimensional space: {m / w0.numel():.1e})")
        log("  | shift | cosine(F, -(H + shift I)^-1 G) | saddle-free, -(|H| + shift I)^-1 G |")
        log("  |---|---|---|")
        for shift in (1.0, 0.1, 0.01, 0.001):
            a = krylov_solve(Q, T, grad.norm().item(), shift, False)
            b = krylov_solve(Q, T, grad.norm().item(), shift, True)
            log(f"  | {shift:g} | {cos(-a, future):+.4f} | {cos(-b, future):+.4f} |")
    if k == 0:
        return
    g = torch.Generator().manual_seed(0)
    calls[0] = 0
    vals, V, res = top_eigen(*lanczos(hvp, torch.randn(w0.numel(), generator=g, dtype=torch.float64), iters), k)
    log(f"  Hessian on {n_batches} training batches ({n_batches * BATCH * CONTEXT_T} tokens), loss {loss.item():.4f}; "
        f"Lanczos {calls[0]} products: top eigenvalues " + ", ".join(f"{x:.3g}" for x in vals[:8].tolist()) +
        f" ... {vals[-1].item():.3g} (eigenvalue {k}); residuals of pairs 1 / {k // 2} / {k}: "
        f"{res[0].item():.1e} / {res[k // 2 - 1].item():.1e} / {res[-1].item():.1e}")

    def share(x, r):
        c = V[:, :r].t() @ x
        return (c.pow(2).sum() / x.pow(2).sum()).item()

    rs = sorted({r for r in (1, 4, 16, k) if r <= k})
    n = w0.numel()
    log("  | x | " + " | ".join(f"share of |x|^2 in the top {r}" for r in rs) + " |")
    log("  |---|" + "---|" * len(rs))
    for label, x in (("F, the expected 1000-step future", future), ("G, the mean probe gradient", grad),
                     ("the past 800 steps' change", past)):
        log(f"  | {label} | " + " | ".join(f"{share(x, r):.4f}" for r in rs) + " |")
    log("  | a random direction (r / n) | " + " | ".join(f"{r / n:.1e}" for r in rs) + " |")
    flat_part = lambda x, r: x - V[:, :r] @ (V[:, :r].t() @ x)  # noqa: E731
    log("  | direction | cosine with F | " + " | ".join(f"flat part (top {r} removed)" for r in rs) + " |")
    log("  |---|---|" + "---|" * len(rs))
    for label, x in (("-G", -grad), ("the past carried on", past)):
        log(f"  | {label} | {cos(x, future):+.4f} | " + " | ".join(f"{cos(flat_part(x, r), future):+.4f}" for r in rs) + " |")
    lam = vals.clamp(min=1e-12)
    floor = [-(V[:, :r] @ ((V[:, :r].t() @ grad) / lam[:r])) for r in rs]
    log("  | the valley floor's offset in the top r, -V L^-1 V^T G | | " +
        " | ".join(f"{cos(x, future):+.4f}" for x in floor) + " |")
    log("  | F's own part in the top r (its ceiling there) | | " +
        " | ".join(f"{math.sqrt(share(future, r)):+.4f}" for r in rs) + " |")
    log("  | F's own flat part (top r removed: cosine = its share's root) | | " +
        " | ".join(f"{math.sqrt(max(0.0, 1 - share(future, r))):+.4f}" for r in rs) + " |")
    curv = lambda x: (torch.dot(x, hvp(x)) / x.pow(2).sum()).item()  # noqa: E731  (Rayleigh quotient)
    log(f"  curvature along x, x^T H x / |x|^2: F {curv(future):.3g}, -G {curv(-grad):.3g}, "
        f"the past {curv(past):.3g}; eigenvalue 1 {vals[0].item():.3g}, eigenvalue {k} {vals[-1].item():.3g}")


def self_check():
    """Lanczos recovers a known top spectrum; inside a full Krylov space the shifted solve is the
    exact (H + shift I)^-1 b, and the saddle-free one (|H| + shift I)^-1 b."""
    n, k = 400, 8
    g = torch.Generator().manual_seed(0)
    Qm, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    lam = torch.cat([torch.tensor([100.0, 50, 30, 20, 12, 9, 7, 5, -1, -3], dtype=torch.float64),
                     torch.rand(n - k - 2, generator=g, dtype=torch.float64) - 0.2])  # some negative
    H = Qm @ torch.diag(lam) @ Qm.t()
    vals, V, res = top_eigen(*lanczos(lambda v: H @ v, torch.randn(n, generator=g, dtype=torch.float64), 60), k)
    assert torch.allclose(vals, lam[:k], rtol=1e-6), vals
    overlap = (V.t() @ Qm[:, :k]).abs().max(dim=1).values
    assert (overlap > 1 - 1e-6).all(), overlap
    # A right-hand side in the span of 10 well-separated eigenvectors: its Krylov space closes at
    # 10, where the solves are exact.
    b = Qm[:, :10] @ torch.randn(10, generator=g, dtype=torch.float64)
    Q, T, _ = lanczos(lambda v: H @ v, b, 20)
    assert Q.shape[1] == 10, Q.shape
    exact = torch.linalg.solve(H + 0.5 * torch.eye(n, dtype=torch.float64), b)
    assert torch.allclose(krylov_solve(Q, T, b.norm().item(), 0.5, False), exact, rtol=1e-8, atol=1e-10)
    H_abs = Qm @ torch.diag(lam.abs()) @ Qm.t()
    exact_abs = torch.linalg.solve(H_abs + 0.1 * torch.eye(n, dtype=torch.float64), b)
    assert torch.allclose(krylov_solve(Q, T, b.norm().item(), 0.1, True), exact_abs, rtol=1e-8, atol=1e-10)
    print(f"hessian_fit self-check: ok (Lanczos recovers the top {k} eigenvalues and vectors of a known spectrum, "
          f"max residual {res.max().item():.1e}; the Krylov solves match the exact ones)")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("dumps", nargs="*")
    ap.add_argument("--text", default=os.path.expanduser("~/.cache/hybrid-trainer/kjv.txt"))
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--iters", type=int, default=96)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--krylov", type=int, default=0, help="M: also F's share in the Krylov space of G (M products)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.check:
        self_check()
        return
    if not a.dumps:
        ap.error("give scan dumps (nowcast-meta scan --task gpt-tiny-kjv --oracle-steps 1000 --dump-dir DIR)")
    if a.k < 0 or (a.k and a.iters <= a.k) or a.krylov < 0 or not (a.k or a.krylov):
        ap.error("--k must be >= 0 with --iters > --k, --krylov >= 0, and one of them > 0")
    with open(a.text, "rb") as f:
        text = torch.tensor(list(f.read()), dtype=torch.int64)
    for path in a.dumps:
        analyse(path, text, a.k, a.iters, a.batches, a.krylov, lambda s: print(s, flush=True))


if __name__ == "__main__":
    main()
