#!/usr/bin/python3
# FM-16's training step (NiNo's 16/32/32 conv net, batch 128, AdamW) timed in Python on one thread,
# through oneDNN and through ATen's own im2col path: says whether a slow machine is slow arithmetic.
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# Multiply-adds of a forward pass at batch 128: conv1 1->16 (13 x 13 out), conv2 16->32, conv3 32->32.
MACS = 128 * 169 * 9 * (1 * 16 + 16 * 32 + 32 * 32)
STEP_FLOP = 3 * 2 * MACS  # forward + backward (grad of inputs and of weights), conv1's input grad aside


class FM16(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 16, 3, stride=2)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.c3 = nn.Conv2d(32, 32, 3, padding=1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):  # x: [B, 1, 28, 28]
        x = F.relu(self.c3(F.relu(self.c2(F.relu(self.c1(x))))))  # [B, 32, 13, 13]
        return self.fc(x.mean((2, 3)))  # [B, 10]


def ms_per_step(steps=10):
    torch.manual_seed(0)
    model = FM16()
    opt = torch.optim.AdamW(model.parameters(), 6e-3)
    x, y = torch.randn(128, 1, 28, 28), torch.randint(0, 10, (128,))

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t) / steps * 1000


torch.set_num_threads(1)
for path, onednn in (("oneDNN", True), ("ATen im2col", False)):
    torch.backends.mkldnn.enabled = onednn
    ms = ms_per_step()
    print(f"FM-16 step, {path}: {ms:.1f} ms, {STEP_FLOP / ms / 1e6:.1f} GFLOP/s ({STEP_FLOP / 1e9:.2f} GFLOP a step)")
