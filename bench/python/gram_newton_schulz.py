#!/usr/bin/python3
# Is the Gram form of Muon's Newton-Schulz iteration a cheaper orthogonalization here? It iterates
# on the small [r, r] Gram matrix and touches the wide [r, n] matrix twice instead of twice per step.
#
# usage: /usr/bin/python3 bench/python/gram_newton_schulz.py [--repeats 30]
# Debian's python3-torch is the same 1.13 build as the LibTorch the library links, so its matmuls
# (fp32 through OpenBLAS, bf16 through oneDNN) are the ones src/kernels/muon.cpp calls.
#
# Standard (src/kernels/muon.cpp): A = X X^T, X <- a X + (b A + c A^2) X, five times: per step
# 2 r^2 n + r^3 multiply-adds. Gram: with P = a I + b A + c A^2 (a polynomial of A, so it commutes
# with it), X_k = Q_k X_0 and A_{k+1} = P A P; only Q (r x r) is carried, X_0 multiplied once at
# the end: 2 r^2 n + ~4 r^3 per run's steps. Fewer multiply-adds when n > ~1.9 r (GPT MLP 4:1).
import argparse
import statistics
import time

import torch

A, B, C = 3.4445, -4.7750, 2.0315  # Jordan's quintic, as in muon.cpp


def standard(m, steps, dtype):
    x = (m / (m.norm() + 1e-7)).to(dtype)  # [r, n], r <= n
    for _ in range(steps):
        gram = x @ x.T  # [r, r]
        x = A * x + (B * gram + C * gram @ gram) @ x
    return x.float()


def gram_form(m, steps, dtype):
    x = (m / (m.norm() + 1e-7)).to(dtype)  # [r, n]
    gram = x @ x.T  # [r, r], A_0
    eye = torch.eye(gram.shape[0]).to(dtype)
    q = None
    for i in range(steps):
        p = A * eye + B * gram + C * gram @ gram  # [r, r]
        q = p if q is None else p @ q
        if i + 1 < steps:
            gram = p @ gram @ p  # A_{k+1} = P A_k P
    return (q @ x).float()


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown CPU"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=30)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    print(f"cpu: {cpu_model()}, torch {torch.__version__}, 1 thread, 5 iterations")

    # Accuracy against the standard iteration in fp32: a full-rank matrix with singular values
    # spread over ~300x, and a rank-8 one plus 1e-3 noise (momentum is often close to low rank).
    cases = {"full rank, spread spectrum": torch.randn(128, 512) * torch.linspace(0.01, 3, 512),
             "rank 8 + 1e-3 noise": torch.randn(128, 8) @ torch.randn(8, 512) + 1e-3 * torch.randn(128, 512)}
    print("relative distance to the fp32 standard iteration's result:")
    for name, m in cases.items():
        ref = standard(m, 5, torch.float32)
        row = []
        for dtype in (torch.float32, torch.bfloat16):
            for f in (standard, gram_form):
                row.append(f"{f.__name__} {str(dtype)[6:]} {((f(m, 5, dtype) - ref).norm() / ref.norm()).item():.2e}")
        print(f"  {name:28s} " + ", ".join(row))

    # Time per orthogonalization, median of interleaved repeats (a busy moment falls on all alike).
    print("ms per orthogonalization (median):")
    for shape in [(128, 512), (128, 128), (256, 1024), (256, 256)]:
        m = torch.randn(*shape)
        variants = [(f, d) for d in (torch.float32, torch.bfloat16) for f in (standard, gram_form)]
        times = {v: [] for v in variants}
        for f, d in variants:
            f(m, 5, d)  # warm up oneDNN's kernels
        for _ in range(a.repeats):
            for f, d in variants:
                t = time.perf_counter()
                f(m, 5, d)
                times[(f, d)].append((time.perf_counter() - t) * 1e3)
        print(f"  {str(list(shape)):12s} " +
              ", ".join(f"{f.__name__} {str(d)[6:]} {statistics.median(times[(f, d)]):.3f}" for f, d in variants))


if __name__ == "__main__":
    main()
