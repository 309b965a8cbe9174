#!/usr/bin/python3
# What the tiny GPT's early loss plateau is: the validation set's n-gram entropies (fitted on the
# training span) next to the loss, and when attention starts to use the previous byte.
# Usage: plateau_probe.py [--text ~/.cache/hybrid-trainer/kjv.txt] [--seeds 1 2] [--steps 1200]
#        [--qk-boost 3 --boost-until 600]: the attention maps (q and k) trained faster early
import argparse, collections, math, os

import torch
import torch.nn.functional as F

from gpt_step import GPT, PRESETS


def ngram_levels(train, val, max_order, alpha=0.01, vocab=256):
    """Validation cross-entropy (nats/byte) of additively smoothed n-gram models fitted on train."""
    levels = []
    for order in range(max_order + 1):
        pair, ctx = collections.Counter(), collections.Counter()
        for i in range(order, len(train)):
            c = train[i - order:i]
            pair[(c, train[i])] += 1
            ctx[c] += 1
        nll = 0.0
        for i in range(order, len(val)):
            c = val[i - order:i]
            nll -= math.log((pair[(c, val[i])] + alpha) / (ctx[c] + alpha * vocab))
        levels.append(nll / (len(val) - order))
    return levels


def attention_maps(model, idx):
    """Each block's attention probabilities on idx: a list of [B, nh, T, T]."""
    maps, x = [], model.wte(idx) + model.wpe(torch.arange(idx.size(1)))
    for block in model.h:
        B, T, C = x.shape
        q, k, _ = block.c_attn(block.ln_1(x)).split(C, dim=2)
        q, k = (t.view(B, T, block.nh, C // block.nh).transpose(1, 2) for t in (q, k))  # [B,nh,T,hs]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        maps.append(F.softmax(att.masked_fill(block.mask[:, :, :T, :T] == 0, float("-inf")), dim=-1))
        x = block(x)
    return maps


def self_check():
    """ngram_levels on texts whose levels are known: each byte decides the next (bigram level ~0),
    each byte's successor a fair coin between two (ln 2), bytes drawn uniformly from four (ln 4)."""
    g = torch.Generator().manual_seed(0)
    cycle = bytes(b"abcd" * 2000)
    coin = bytes(b"ab"[int(c)] for c in torch.randint(0, 2, (8000,), generator=g))
    pairs = bytes(v for c in coin for v in (c, c + 2))  # a or b, then c or d: decided by its predecessor
    four = bytes(b"abcd"[int(c)] for c in torch.randint(0, 4, (8000,), generator=g))
    checks = [(ngram_levels(cycle[:6000], cycle[6000:], 1)[1], 0.0),
              (ngram_levels(four[:6000], four[6000:], 1)[0], math.log(4)),
              (ngram_levels(four[:6000], four[6000:], 1)[1], math.log(4)),
              (ngram_levels(pairs[:12000], pairs[12000:], 1)[1], math.log(2) / 2)]
    for got, want in checks:
        if abs(got - want) > 0.02:
            raise SystemExit(f"plateau_probe self-check: an n-gram level is {got:.4f}, expected {want:.4f}")
    print("plateau_probe self-check: ok")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", default=os.path.expanduser("~/.cache/hybrid-trainer/kjv.txt"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--val-fraction", type=float, default=0.1)
    ap.add_argument("--ngram-order", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--qk-boost", type=float, default=1.0,
                    help="multiply the steps of the attention maps' parameters (q and k rows of c_attn) by this")
    ap.add_argument("--boost-until", type=int, default=0, help="... for the steps before this one (0: throughout)")
    ap.add_argument("--check", action="store_true", help="check the n-gram levels on synthetic texts and exit")
    a = ap.parse_args()
    if a.check:
        return self_check()
    torch.set_num_threads(a.threads)
    data = open(a.text, "rb").read()
    split = len(data) - int(len(data) * a.val_fraction)  # the C++ TextSource's split: the tail is validation
    levels = ngram_levels(data[:split], data[split:], a.ngram_order)
    print("# n-gram levels on the validation span (nats/byte): " +
          ", ".join(f"order {n} {l:.3f}" for n, l in enumerate(levels)))

    n_layer, n_head, d, vocab, ctx = PRESETS["tiny"]
    B, T = 16, ctx
    tokens = torch.tensor(list(data), dtype=torch.long)
    g = torch.Generator().manual_seed(0)
    starts = torch.randint(split, len(data) - T - 1, (20 * B,), generator=g)
    val = torch.stack([tokens[s:s + T + 1] for s in starts]).view(20, B, T + 1)
    print("seed,step,val_loss,best_prev_token_attention,layer,head,mean_attention_entropy_over_uniform")
    for seed in a.seeds:
        torch.manual_seed(seed)
        model = GPT(n_layer, n_head, d, vocab, ctx)
        decay = [p for p in model.parameters() if p.dim() >= 2]
        other = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                                lr=a.lr, betas=(0.9, 0.95))
        for step in range(a.steps + 1):
            if step % a.every == 0:
                with torch.no_grad():
                    loss = sum(model(v[:, :-1], v[:, 1:].contiguous()).item() for v in val) / len(val)
                    maps = attention_maps(model, val[0][:, :-1])
                    t = torch.arange(1, T)
                    best, where = 0.0, (0, 0)
                    entropy = []
                    for l, m in enumerate(maps):  # m [B, nh, T, T]
                        prev = m[:, :, t, t - 1].mean(dim=(0, 2))  # [nh]: mass on the byte before
                        h = int(prev.argmax())
                        if prev[h] > best:
                            best, where = float(prev[h]), (l, h)
                        ent = -(m[:, :, t] * m[:, :, t].clamp_min(1e-12).log()).sum(-1)  # [B, nh, T-1]
                        entropy.append(float((ent / (t + 1).float().log()).mean()))
                print(f"{seed},{step},{loss:.4f},{best:.3f},{where[0]},{where[1]},{sum(entropy) / len(entropy):.3f}",
                      flush=True)
            if step == a.steps:
                break
            s = torch.randint(0, split - T - 1, (B,))
            x = torch.stack([tokens[i:i + T + 1] for i in s])
            opt.zero_grad(set_to_none=True)
            model(x[:, :-1], x[:, 1:].contiguous()).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            boost = a.qk_boost != 1.0 and (a.boost_until == 0 or step < a.boost_until)
            if boost:
                before = [blk.c_attn.weight[:2 * d].detach().clone() for blk in model.h]  # q and k rows, [2C, C]
            opt.step()
            if boost:
                with torch.no_grad():
                    for blk, w0 in zip(model.h, before):
                        w = blk.c_attn.weight[:2 * d]
                        w.copy_(w0 + a.qk_boost * (w - w0))


if __name__ == "__main__":
    main()
