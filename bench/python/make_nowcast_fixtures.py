#!/usr/bin/python3
# Writes the nowcasting parity fixtures (tests/hybrid/fixtures/nowcast_*.safetensors): real AdamW
# trajectories of four small models and what nino_reference.py predicts from them at a few horizons.
#
# Run from the repository root:  /usr/bin/python3 bench/python/make_nowcast_fixtures.py
# Each file holds  states.<param> [5, *shape] (oldest first),  wnn.k<k>.<param>,  nino.k<k>.<param>,
# graph.lpe [nodes, 8] and graph.degree [nodes]; its metadata lists the parameters in model order.
import gzip
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nino_reference as R  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "hybrid", "fixtures")
MODELS = os.path.join(ROOT, "models", "nino")
FASHION = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
FASHION_LABELS = "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz"

WARMUP = 30   # AdamW steps before the first recorded state
EVERY = 10    # steps between recorded states


def fashion(n=4096):
    """First n Fashion-MNIST training images [n, 1, 28, 28] (normalised) and labels [n]."""
    with gzip.open(FASHION, "rb") as f:
        images = torch.frombuffer(bytearray(f.read()[16:16 + n * 784]), dtype=torch.uint8)
    with gzip.open(FASHION_LABELS, "rb") as f:
        labels = torch.frombuffer(bytearray(f.read()[8:8 + n]), dtype=torch.uint8)
    x = images.float().div(255).sub(0.2860).div(0.3530).view(n, 1, 28, 28)
    return x, labels.long()


class MLP(nn.Module):  # the repo's MLP shape (fc1/fc2/fc3), on 7x7 average-pooled images
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(49, 24), nn.Linear(24, 16), nn.Linear(16, 10)

    def forward(self, x):
        x = F.avg_pool2d(x, 4).flatten(1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class FM16(nn.Module):  # NiNo's FM-16 task: convs 16/32/32 (the first strided), GAP, linear 32->10
    def __init__(self):
        super().__init__()
        self.fc = nn.Sequential(
            nn.Conv2d(1, 16, 3, stride=2), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding="same"), nn.ReLU(),
            nn.Conv2d(32, 32, 3, padding="same"), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))

    def forward(self, x):
        return self.fc(x)


class ConvNet(nn.Module):  # the repo's ConvNet (conv1/conv2/fc, flatten), narrow, on 16x16 images
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 4, 3, padding=1), nn.Conv2d(4, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = F.interpolate(x, size=16, mode="bilinear", align_corners=False)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


class Conv1D(nn.Module):  # GPT-2's linear layer, weight [in, out]
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_in, n_out) * 0.02)
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return x @ self.weight + self.bias


class Attention(nn.Module):
    def __init__(self, d, nh):
        super().__init__()
        self.nh, self.c_attn, self.c_proj = nh, Conv1D(d, 3 * d), Conv1D(d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.nh, C // self.nh).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.nh)
        att = att.masked_fill(torch.ones(T, T).triu(1).bool(), float("-inf")).softmax(-1)
        return self.c_proj((att @ v).transpose(1, 2).reshape(B, T, C))


class MLPBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc, self.c_proj = Conv1D(d, 4 * d), Conv1D(4 * d, d)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):  # parameter order as Hugging Face's GPT-2
    def __init__(self, d, nh):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(d), Attention(d, nh)
        self.ln_2, self.mlp = nn.LayerNorm(d), MLPBlock(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, n_layer=2, n_head=2, d=24, vocab=64, ctx=16):
        super().__init__()
        self.n_head = n_head
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.02)
        self.h = nn.ModuleList(Block(d, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe.weight[:idx.shape[1]]
        for b in self.h:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.t()


def record(model, batches, lr):
    """Trains with AdamW; returns {name: [5, *shape]} of the states at WARMUP + i * EVERY."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    states = {n: [] for n, _ in model.named_parameters()}
    for step in range(1, WARMUP + 4 * EVERY + 1):
        x, y = batches(step)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step >= WARMUP and (step - WARMUP) % EVERY == 0:
            for n, p in model.named_parameters():
                states[n].append(p.detach().clone())
    print(f"  final training loss {loss.item():.4f}")
    return {n: torch.stack(s) for n, s in states.items()}


def vision_batches(x, y, batch=64):
    def get(step):
        g = torch.Generator().manual_seed(step)
        i = torch.randint(0, len(x), (batch,), generator=g)
        return x[i], y[i]
    return get


def text_batches(vocab, ctx, batch=16):
    with open(os.path.join(ROOT, "README.md"), "rb") as f:
        tokens = torch.tensor(list(f.read()), dtype=torch.long) % vocab

    def get(step):
        g = torch.Generator().manual_seed(step)
        i = torch.randint(0, len(tokens) - ctx - 1, (batch,), generator=g)
        seq = torch.stack([tokens[j:j + ctx + 1] for j in i.tolist()])
        return seq[:, :-1], seq[:, 1:]
    return get


def write(tag, model, spec, states, wnn_k, nino_k):
    wnn = R.WNNPlus(os.path.join(MODELS, "nino_mlp.safetensors"))
    nino = R.NiNo(os.path.join(MODELS, "nino_no_posw.safetensors"))
    graph = R.NeuralGraph(spec)
    pe = R.laplacian_pe(graph.num_nodes, graph.src, graph.dst)
    _, degree = R.laplacian(graph.num_nodes, graph.src, graph.dst)
    tensors = {f"states.{n}": states[n] for n, _, _ in spec["params"]}
    for k in wnn_k:
        for n, t in wnn.predict(spec, states, k, graph).items():
            tensors[f"wnn.k{k}.{n}"] = t
    for k in nino_k:
        for n, t in nino.predict(spec, states, k, graph, pe).items():
            tensors[f"nino.k{k}.{n}"] = t
    tensors["graph.lpe"] = pe
    tensors["graph.degree"] = degree.long()
    meta = {"family": spec["family"], "n_head": spec["n_head"],
            "params": ",".join(n for n, _, _ in spec["params"]),
            "wnn_k": ",".join(map(str, wnn_k)), "nino_k": ",".join(map(str, nino_k)),
            "nodes": graph.num_nodes, "edges": graph.num_edges,
            "source": "bench/python/make_nowcast_fixtures.py (AdamW states every "
                      f"{EVERY} steps after {WARMUP})"}
    path = os.path.join(OUT, f"nowcast_{tag}.safetensors")
    R.write_safetensors(path, tensors, meta)
    print(f"  {path}: {sum(p.numel() for p in model.parameters())} parameters, "
          f"graph {graph.num_nodes} nodes / {graph.num_edges} edges, {os.path.getsize(path)} bytes")


def main():
    torch.set_num_threads(2)
    os.makedirs(OUT, exist_ok=True)
    x, y = fashion()
    named = lambda m: [(n, tuple(p.shape)) for n, p in m.named_parameters()]

    print("mlp")
    torch.manual_seed(0)
    m = MLP()
    s = record(m, vision_batches(x, y), lr=3e-3)
    write("mlp", m, R.spec_feedforward(named(m)), s, wnn_k=(1, 17, 40), nino_k=(1, 17, 40))

    print("fm16")
    torch.manual_seed(0)
    m = FM16()
    s = record(m, vision_batches(x, y), lr=6e-3)
    write("fm16", m, R.spec_feedforward(named(m)), s, wnn_k=(1, 40), nino_k=(1, 40))

    print("cnn")
    torch.manual_seed(0)
    m = ConvNet()
    s = record(m, vision_batches(x, y), lr=3e-3)
    write("cnn", m, R.spec_feedforward(named(m)), s, wnn_k=(1, 17, 40), nino_k=(1, 17, 40))

    print("gpt")
    torch.manual_seed(0)
    m = GPT()
    s = record(m, text_batches(64, 16), lr=3e-3)
    write("gpt", m, R.spec_gpt2(named(m), m.n_head), s, wnn_k=(1, 17, 40), nino_k=(1, 17, 40))


if __name__ == "__main__":
    main()
