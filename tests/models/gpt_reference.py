# Independent GPT-2 forward/backward in PyTorch (python3-torch) for gpt_reference_test.cpp:
# reads weights and tokens from a safetensors file, writes logits, loss and gradients back.
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "I64": torch.int64}


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = bytearray(data[8 + n + b:8 + n + e])
        out[name] = torch.frombuffer(raw, dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


def save(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        t = t.detach().contiguous().float()
        blob = t.numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main(inp, outp, n_head):
    t = load(inp)
    idx, targets = t.pop("idx"), t.pop("targets")
    p = {k: v.clone().requires_grad_() for k, v in t.items()}
    B, T = idx.shape
    C = p["wte.weight"].shape[1]
    n_layer = 1 + max(int(k.split(".")[1]) for k in p if k.startswith("h."))
    x = p["wte.weight"][idx] + p["wpe.weight"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    for i in range(n_layer):
        g = lambda name: p[f"h.{i}.{name}"]
        h = F.layer_norm(x, (C,), g("ln_1.weight"), g("ln_1.bias"), 1e-5)
        q, k, v = (h @ g("attn.c_attn.weight") + g("attn.c_attn.bias")).split(C, dim=2)
        q, k, v = (z.view(B, T, n_head, C // n_head).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // n_head)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ g("attn.c_proj.weight") + g("attn.c_proj.bias")
        h = F.layer_norm(x, (C,), g("ln_2.weight"), g("ln_2.bias"), 1e-5)
        h = F.gelu(h @ g("mlp.c_fc.weight") + g("mlp.c_fc.bias"), approximate="tanh")
        x = x + h @ g("mlp.c_proj.weight") + g("mlp.c_proj.bias")
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], 1e-5)
    logits = x @ p["wte.weight"].t()
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
    loss.backward()
    out = {"logits": logits, "loss": loss.reshape(1)}
    out.update({"grad." + k: v.grad for k, v in p.items()})
    save(outp, out)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
