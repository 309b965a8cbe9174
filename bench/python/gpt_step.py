#!/usr/bin/python3
# The Python side of the step-time benchmark: the same GPT-2 (pre-LN, tanh GELU, tied head) and
# the same AdamW loop in PyTorch (Debian's python3-torch), timed per full step, in fp32 or under
# torch.autocast("cpu", dtype=torch.bfloat16) (--autocast). Prints one JSON line.
import argparse, json, math, statistics, time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {"tiny": (4, 4, 128, 256, 128), "gpt2": (12, 12, 768, 50257, 1024)}


class Block(nn.Module):
    def __init__(self, d, nh, ctx):
        super().__init__()
        self.nh = nh
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.register_buffer("mask", torch.tril(torch.ones(ctx, ctx)).view(1, 1, ctx, ctx))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.nh, C // self.nh).transpose(1, 2) for t in (q, k, v))  # [B,nh,T,hs]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = F.softmax(att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, n_layer, n_head, d, vocab, ctx):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.h = nn.ModuleList(Block(d, n_head, ctx) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d)
        for name, p in self.named_parameters():  # GPT-2 init, as the C++ model does
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02 / (math.sqrt(2 * n_layer) if name.endswith("proj.weight") else 1.0))
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied head, [B, T, V]
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--autocast", action="store_true", help="bf16 autocast around the forward")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    n_layer, n_head, d, vocab, ctx = PRESETS[a.preset]
    model = GPT(n_layer, n_head, d, vocab, ctx)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    idx = torch.randint(0, vocab, (a.batch, a.seq))
    tgt = torch.randint(0, vocab, (a.batch, a.seq))
    times, cpu = [], []
    for i in range(a.warmup + a.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast):
            loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i >= a.warmup:
            times.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.process_time() - c0) * 1000)  # all threads: robust to a busy machine
    print(json.dumps({"impl": "python", "preset": a.preset, "batch": a.batch, "seq": a.seq,
                      "threads": a.threads, "precision": "autocast-bf16" if a.autocast else "fp32",
                      "median_ms": statistics.median(times),
                      "min_ms": min(times), "max_ms": max(times), "loss": loss.item(),
                      "cpu_ms": statistics.median(cpu)}))


if __name__ == "__main__":
    main()
