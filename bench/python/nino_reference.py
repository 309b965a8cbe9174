#!/usr/bin/python3
# An independent Python implementation of the WNN+ and NiNo weight-nowcasting models (inference):
# graph construction, Laplacian node features, both forwards. The C++ port is tested against it.
#
# Written from the papers (Knyazev et al., ICLR 2025; Jang et al., ICML 2023) and a reading of the
# authors' public code (SamsungSAILMontreal/nino); it shares no code with either. Plain torch only:
# no torch_geometric, no safetensors package, no scipy. Everything runs in float32 except the
# eigensolver (float64), as the C++ side does. The graph here is built the direct way (explicit edge
# tensors, one parameter at a time); the C++ side builds it from block descriptors instead.
import json
import struct

import torch
import torch.nn.functional as F

CTX = 5          # states per prediction: the last is the current weights
LPE_DIM = 8      # Laplacian eigenvectors per node (the NiNo GNN's node features)
NORM_EPS = 1e-6  # per-tensor normalisation: (w - mean) / (std + eps), as the reference code

# Parameter (edge) kinds: the rows of the models' type embedding.
PADDING, LINEAR, BIAS, CONV, NORM, WTE, WPE, ATTN_Q, ATTN_K, ATTN_V, RESIDUAL, HEAD, SELF_LOOP = (
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13)
ATTN_QKV = 100   # not an edge type: GPT-2's fused c_attn weight [C, 3C], thirds q|k|v = 7|8|9

# ----------------------------------------------------------------------------------------------
# safetensors, by hand: 8-byte little-endian header length, JSON header, raw little-endian data.

_DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "I32": torch.int32,
           "U8": torch.uint8}
_NAMES = {v: k for k, v in _DTYPES.items()}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    data = blob[8 + n:]
    out = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        dtype = _DTYPES[entry["dtype"]]
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype) if end > begin else \
            torch.empty(0, dtype=dtype)
        out[name] = t.reshape(entry["shape"]).clone()
    return out, meta


def write_safetensors(path, tensors, metadata=None):
    header, chunks, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        raw = t.numpy().tobytes()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)  # data 8-byte aligned, as the reference writer does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text.encode("utf-8"))
        for raw in chunks:
            f.write(raw)

# ----------------------------------------------------------------------------------------------
# Model descriptions: (name, shape, kind) in named_parameters() order, plus the family.


def spec_feedforward(named_shapes):
    """MLPs and CNNs: torch Linear [out, in] and Conv2d [out, in, kh, kw] weights, 1-D biases and
    norm weights. Kinds come from the shapes (and '.weight' for 1-D norm gains)."""
    params = []
    for name, shape in named_shapes:
        shape = tuple(int(s) for s in shape)
        if len(shape) == 4:
            kind = CONV
        elif len(shape) == 2:
            kind = LINEAR
        elif len(shape) == 1:
            kind = NORM if name.endswith(".weight") else BIAS
        else:
            raise ValueError(f"{name}: {len(shape)}-D parameters are not supported")
        params.append((name, shape, kind))
    return {"family": "feedforward", "n_head": 0, "params": params}


def _gpt_prefix(names):
    for n in names:
        if n.endswith("wte.weight"):
            return n[:-len("wte.weight")]
    raise ValueError("GPT-2 description: no 'wte.weight' parameter")


def spec_gpt2(named_shapes, n_head):
    """GPT-2 with Hugging Face names (maybe prefixed, e.g. 'transformer.'), Conv1D [in, out]."""
    named_shapes = [(n, tuple(int(s) for s in shape)) for n, shape in named_shapes]
    prefix = _gpt_prefix([n for n, _ in named_shapes])
    params = []
    for name, shape in named_shapes:
        rel = name[len(prefix):]
        if rel == "wte.weight":
            kind = WTE
        elif rel == "wpe.weight":
            kind = WPE
        elif rel.endswith("attn.c_attn.weight"):
            kind = ATTN_QKV
        elif len(shape) == 1:
            kind = NORM if rel.endswith(".weight") else BIAS
        else:
            kind = LINEAR
        params.append((name, shape, kind))
    return {"family": "gpt2", "n_head": int(n_head), "params": params}

# ----------------------------------------------------------------------------------------------
# The neural graph: nodes are neurons (plus one node per bias / norm vector, per attention head,
# and the embedding rows); every parameter scalar is one edge (a conv kernel's 9 values are one
# edge's features). Edges run input -> output; NiNo's GPT graph reverses the key weights.


class NeuralGraph:
    def __init__(self, spec):
        self.spec = spec
        self.num_nodes = 0
        self._src, self._dst, self._type = [], [], []
        self._const = []     # per edge block: None (parameter) or the constant feature value
        self.pieces = []     # (param name, first edge, edge count, to_edges, from_edges)
        self.feat = 1        # features per edge: 9 when a 3x3 conv is present
        self.num_edges = 0
        if spec["family"] == "feedforward":
            self._build_feedforward(spec["params"])
        elif spec["family"] == "gpt2":
            self._build_gpt2(spec["params"], spec["n_head"])
        else:
            raise ValueError(spec["family"])
        n = self.num_nodes
        loops = torch.arange(n)
        self._add(loops, loops, SELF_LOOP, const=2.0)  # NiNo's self-loop feature is 2
        self.src = torch.cat(self._src)
        self.dst = torch.cat(self._dst)
        self.edge_type = torch.cat(self._type)

    # -- helpers -------------------------------------------------------------------------------

    def _nodes(self, count):
        first = self.num_nodes
        self.num_nodes += count
        return torch.arange(first, first + count)

    def _add(self, src, dst, etype, const=None, name=None, to_edges=None, from_edges=None):
        self._src.append(src)
        self._dst.append(dst)
        self._type.append(torch.full((len(src),), etype, dtype=torch.long))
        self._const.append((self.num_edges, len(src), const))
        if name is not None:
            self.pieces.append((name, self.num_edges, len(src), to_edges, from_edges))
        self.num_edges += len(src)

    def _dense(self, a, b, etype, **kw):
        """Every node of a to every node of b, a-major (the order of a weight stored [in, out])."""
        self._add(a.repeat_interleave(len(b)), b.repeat(len(a)), etype, **kw)

    # -- feed-forward (MLP / CNN) --------------------------------------------------------------

    def _build_feedforward(self, params):
        layers = []  # (weight, [1-D params that act on its outputs])
        for p in params:
            if len(p[1]) == 1:
                if not layers:
                    raise ValueError(f"{p[0]}: a 1-D parameter before the first weight")
                if p[1][0] != layers[-1][0][1][0]:
                    raise ValueError(f"{p[0]}: size {p[1][0]} does not match its layer's outputs")
                layers[-1][1].append(p)
            else:
                layers.append((p, []))
        for (_, shape, kind), _ in layers:
            if kind == CONV:
                k = shape[2] * shape[3]
                if k > 9:
                    raise ValueError("NiNo takes conv kernels of at most 9 values (3x3)")
                self.feat = max(self.feat, k)
        prev, prev_conv = self._nodes(layers[0][0][1][1]), False
        for (name, shape, kind), extras in layers:
            n_out, n_in = shape[0], shape[1]
            if n_in != len(prev):
                if kind == LINEAR and prev_conv and n_in % len(prev) == 0:
                    # Flatten after a conv: channel c feeds inputs c*S .. c*S+S-1 through fixed
                    # identity edges (our extension; the reference graph has no flatten).
                    spatial = n_in // len(prev)
                    flat = self._nodes(n_in)
                    self._add(prev.repeat_interleave(spatial), flat, RESIDUAL, const=1.0)
                    prev = flat
                else:
                    raise ValueError(f"{name}: {n_in} inputs but the previous layer has "
                                     f"{len(prev)} outputs")
            extra_nodes = [self._nodes(1) for _ in extras]
            out = self._nodes(n_out)
            if kind == CONV:
                kk = shape[2] * shape[3]
                # [5, out, in, kh, kw] -> [in*out, kk, 5]
                to_e = (lambda s, kk=kk: s.flatten(3).permute(2, 1, 3, 0).reshape(-1, kk, CTX))
                from_e = (lambda e, shape=shape, kk=kk:
                          e[:, :kk].reshape(shape[1], shape[0], kk).transpose(0, 1).reshape(shape))
            else:
                to_e = lambda s: s.permute(2, 1, 0).reshape(-1, 1, CTX)  # [5, out, in] -> [in*out]
                from_e = (lambda e, shape=shape:
                          e[:, 0].reshape(shape[1], shape[0]).t().contiguous())
            self._dense(prev, out, kind, name=name, to_edges=to_e, from_edges=from_e)
            for (ename, _, ekind), node in zip(extras, extra_nodes):
                self._dense(node, out, ekind, name=ename, to_edges=_vec_to_edges,
                            from_edges=_vec_from_edges)
            prev, prev_conv = out, kind == CONV

    # -- GPT-2 ---------------------------------------------------------------------------------

    def _build_gpt2(self, params, n_head):
        shapes = {n: s for n, s, _ in params}
        prefix = _gpt_prefix(shapes)
        V, C = shapes[prefix + "wte.weight"]
        P = shapes[prefix + "wpe.weight"][0]
        L = 0
        while f"{prefix}h.{L}.ln_1.weight" in shapes:
            L += 1
        H = n_head
        if H < 1 or C % H:
            raise ValueError(f"n_head {H} does not divide n_embd {C}")
        d = C // H
        expected = {prefix + n for n in ("wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias")}
        for i in range(L):
            for n in ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                      "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                      "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"):
                expected.add(f"{prefix}h.{i}.{n}")
        if set(shapes) != expected:
            missing, unexpected = sorted(expected - set(shapes)), sorted(set(shapes) - expected)
            raise ValueError(f"not a GPT-2 parameter set: missing {missing}, "
                             f"unexpected {unexpected}")

        # Node layout (the numbering the authors' construction produces): the nodes that feed a
        # residual stream (bias, norm, key-bias nodes) come just before it.
        tok, pos = self._nodes(V), self._nodes(P)
        blk = []
        for i in range(L):
            b = {}
            for key, count in (("ln1w", 1), ("ln1b", 1), ("kb", 1), ("x", C), ("heads", H),
                               ("qb", 1), ("vb", 1), ("q", C), ("v", C), ("apb", 1), ("ln2w", 1),
                               ("ln2b", 1), ("xm", C), ("fcb", 1), ("hid", 4 * C), ("mpb", 1)):
                b[key] = self._nodes(count)
            blk.append(b)
        lnfw, lnfb, x_final = self._nodes(1), self._nodes(1), self._nodes(C)

        def nm(i, n):
            return f"{prefix}h.{i}.{n}"

        conv1d_to = lambda s: s.permute(1, 2, 0).reshape(-1, 1, CTX)  # [5, in, out] -> [in*out]

        def conv1d_from(shape):
            return lambda e: e[:, 0].reshape(shape)

        self._dense(tok, blk[0]["x"] if L else x_final, WTE, name=prefix + "wte.weight",
                    to_edges=conv1d_to, from_edges=conv1d_from((V, C)))
        self._dense(pos, blk[0]["x"] if L else x_final, WPE, name=prefix + "wpe.weight",
                    to_edges=conv1d_to, from_edges=conv1d_from((P, C)))
        for i, b in enumerate(blk):
            x_next = blk[i + 1]["x"] if i + 1 < L else x_final
            self._dense(b["ln1w"], b["x"], NORM, name=nm(i, "ln_1.weight"),
                        to_edges=_vec_to_edges, from_edges=_vec_from_edges)
            self._dense(b["ln1b"], b["x"], BIAS, name=nm(i, "ln_1.bias"),
                        to_edges=_vec_to_edges, from_edges=_vec_from_edges)
            w, bias = nm(i, "attn.c_attn.weight"), nm(i, "attn.c_attn.bias")
            parts = ((ATTN_Q, "qb"), (ATTN_K, "kb"), (ATTN_V, "vb"))
            for j, (etype, bias_node) in enumerate(parts):
                to_w = (lambda s, j=j:
                        s[:, :, j * C:(j + 1) * C].permute(1, 2, 0).reshape(-1, 1, CTX))
                to_b = (lambda s, j=j: s[:, j * C:(j + 1) * C].t().reshape(-1, 1, CTX))
                if etype == ATTN_K:
                    # key weights point from the query neurons back to the stream (edge (r, o)
                    # for element [r, C + o]), so queries and keys meet in the stream nodes
                    src = b["q"].repeat(C)
                    dst = b["x"].repeat_interleave(C)
                    self._add(src, dst, etype, name=w + f"#{j}", to_edges=to_w,
                              from_edges=_part_from(j, C))
                else:
                    neurons = b["q"] if etype == ATTN_Q else b["v"]
                    self._dense(b["x"], neurons, etype, name=w + f"#{j}", to_edges=to_w,
                                from_edges=_part_from(j, C))
                    for h in range(H):  # one node per head, tying the head's neurons together
                        self._dense(b["heads"][h:h + 1], neurons[h * d:(h + 1) * d], HEAD,
                                    const=1.0)
                stream = {ATTN_Q: b["q"], ATTN_K: b["x"], ATTN_V: b["v"]}[etype]
                self._dense(b[bias_node], stream, BIAS, name=bias + f"#{j}", to_edges=to_b,
                            from_edges=_part_from(j, C, bias=True))
                if etype == ATTN_V:
                    self._add(b["x"], b["xm"], RESIDUAL, const=1.0)  # attention's residual
            self._dense(b["v"], b["xm"], LINEAR, name=nm(i, "attn.c_proj.weight"),
                        to_edges=conv1d_to, from_edges=conv1d_from((C, C)))
            self._dense(b["apb"], b["xm"], BIAS, name=nm(i, "attn.c_proj.bias"),
                        to_edges=_vec_to_edges, from_edges=_vec_from_edges)
            self._dense(b["ln2w"], b["xm"], NORM, name=nm(i, "ln_2.weight"),
                        to_edges=_vec_to_edges, from_edges=_vec_from_edges)
            self._dense(b["ln2b"], b["xm"], BIAS, name=nm(i, "ln_2.bias"),
                        to_edges=_vec_to_edges, from_edges=_vec_from_edges)
            self._dense(b["xm"], b["hid"], LINEAR, name=nm(i, "mlp.c_fc.weight"),
                        to_edges=conv1d_to, from_edges=conv1d_from((C, 4 * C)))
            self._dense(b["fcb"], b["hid"], BIAS, name=nm(i, "mlp.c_fc.bias"),
                        to_edges=_vec_to_edges, from_edges=_vec_from_edges)
            self._add(b["xm"], x_next, RESIDUAL, const=1.0)  # the MLP's residual
            self._dense(b["hid"], x_next, LINEAR, name=nm(i, "mlp.c_proj.weight"),
                        to_edges=conv1d_to, from_edges=conv1d_from((4 * C, C)))
            self._dense(b["mpb"], x_next, BIAS, name=nm(i, "mlp.c_proj.bias"),
                        to_edges=_vec_to_edges, from_edges=_vec_from_edges)
        self._dense(lnfw, x_final, NORM, name=prefix + "ln_f.weight",
                    to_edges=_vec_to_edges, from_edges=_vec_from_edges)
        self._dense(lnfb, x_final, BIAS, name=prefix + "ln_f.bias",
                    to_edges=_vec_to_edges, from_edges=_vec_from_edges)

    # -- features --------------------------------------------------------------------------------

    def edge_features(self, normed):
        """normed: {name: [5, *shape]} normalised states -> [E, feat, 5] edge features (zero
        padded; residual/head edges carry 1 and self-loops 2 in feature 0 at every state)."""
        ef = torch.zeros(self.num_edges, self.feat, CTX)
        for first, count, const in self._const:
            if const is not None:
                ef[first:first + count, 0, :] = const
        for name, first, count, to_edges, _ in self.pieces:
            base = name.split("#")[0]
            e = to_edges(normed[base])
            ef[first:first + count, :e.shape[1], :] = e
        return ef

    def edge_params(self, pred, shapes):
        """pred [E, feat] -> {name: tensor} (only parameter edges; fused q|k|v reassembled)."""
        out = {}
        for name, first, count, _, from_edges in self.pieces:
            base, _, part = name.partition("#")
            piece = from_edges(pred[first:first + count])
            if part:
                if base not in out:
                    out[base] = torch.empty(shapes[base])
                j = int(part)
                c = shapes[base][-1] // 3
                out[base][..., j * c:(j + 1) * c] = piece
            else:
                out[base] = piece
        return out

    def scalar_types(self, shapes):
        """Per parameter, the edge type of each scalar (what WNN+ embeds)."""
        types = {}
        for name, first, count, _, from_edges in self.pieces:
            t = self.edge_type[first:first + count].float().unsqueeze(1).expand(count, self.feat)
            piece = from_edges(t)
            base, _, part = name.partition("#")
            if part:
                if base not in types:
                    types[base] = torch.empty(shapes[base])
                j = int(part)
                c = shapes[base][-1] // 3
                types[base][..., j * c:(j + 1) * c] = piece
            else:
                types[base] = piece
        return {k: v.long() for k, v in types.items()}


def _vec_to_edges(s):  # [5, n] -> [n, 1, 5]
    return s.t().reshape(-1, 1, CTX)


def _vec_from_edges(e):
    return e[:, 0].clone()


def _part_from(j, C, bias=False):
    if bias:
        return lambda e: e[:, 0].clone()
    return lambda e: e[:, 0].reshape(C, C)

# ----------------------------------------------------------------------------------------------
# Laplacian positional features: the 8 eigenvectors of the symmetric normalised Laplacian of the
# undirected simple graph (no self-loops) after the trivial one. Eigenvectors are only defined up
# to sign, and up to a rotation inside a repeated eigenvalue (neural graphs are full of them); the
# reference draws random signs. We make them canonical, so two solvers give the same features.

CLUSTER_TOL = 1e-6  # eigenvalues closer than this form one eigenspace
PIVOT_TOL = 1e-3    # rows below this fraction of the largest row norm never pick a direction


def laplacian(num_nodes, src, dst):
    keep = src != dst
    a = torch.zeros(num_nodes, num_nodes, dtype=torch.float64)
    a[src[keep], dst[keep]] = 1.0
    a[dst[keep], src[keep]] = 1.0
    deg = a.sum(1)
    dinv = torch.where(deg > 0, deg.clamp(min=1).rsqrt(), torch.zeros_like(deg))
    return torch.eye(num_nodes, dtype=torch.float64) - dinv[:, None] * a * dinv[None, :], deg


def canonical_basis(vecs, count):
    """First `count` vectors of the canonical orthonormal basis of span(vecs) [N, m]: Gram-Schmidt
    on the projections of the unit vectors e_0, e_1, ... (a choice that depends only on the
    subspace); each vector is positive at the node that introduced it."""
    norms = vecs.norm(dim=1)
    thr = PIVOT_TOL * norms.max()
    basis = []
    for i in range(vecs.shape[0]):
        if norms[i] <= thr:
            continue
        g = vecs[i].clone()
        for _ in range(2):  # twice is enough (Kahan)
            for q in basis:
                g -= (q @ g) * q
        n = g.norm()
        if n > thr:
            basis.append(g / n)
            if len(basis) == count:
                break
    return [vecs @ q for q in basis]


def canonical_eigenvectors(evals, evecs, count):
    """The first `count` canonical eigenvectors, eigenvalues ascending."""
    cols, i, n = [], 0, len(evals)
    while len(cols) < count and i < n:
        j = i
        while j + 1 < n and evals[j + 1] - evals[j] <= CLUSTER_TOL:
            j += 1
        cols += canonical_basis(evecs[:, i:j + 1], min(j - i + 1, count - len(cols)))
        i = j + 1
    return cols


def laplacian_pe(num_nodes, src, dst, k=LPE_DIM):
    lap, _ = laplacian(num_nodes, src, dst)
    evals, evecs = torch.linalg.eigh(lap)
    cols = canonical_eigenvectors(evals, evecs, k + 1)[1:]  # skip the trivial eigenvector
    pe = torch.zeros(num_nodes, k, dtype=torch.float64)
    for c, v in enumerate(cols):
        pe[:, c] = v
    return pe.float()

# ----------------------------------------------------------------------------------------------
# Per-tensor normalisation over all 5 states (mean and unbiased std in float64, applied in float32).


def tensor_scale(stack):
    """stack [5, *shape] -> (mean, std) as Python floats."""
    x = stack.double()
    return x.mean().item(), x.std().item()


def normalise(stack, mean, std):
    return (stack - mean) / (std + NORM_EPS)


def denormalise(x, mean, std):
    return x * std + mean

# ----------------------------------------------------------------------------------------------
# The two models.


def _load(path):
    tensors, meta = read_safetensors(path)
    return {k: v.float() for k, v in tensors.items()}, meta


class WNNPlus:
    """Per scalar: Linear(5 -> 128) + type embedding, then 128-128-128-128-40 with SiLU."""

    def __init__(self, path):
        self.w, _ = _load(path)
        self.horizons = self.w["edge_mlp.fc.6.weight"].shape[0]

    def forward(self, x, types, k):  # x [n, 5], types [n] -> [n] normalised prediction
        w = self.w
        h = (x @ w["edge_proj.fc.0.weight"].t() + w["edge_proj.fc.0.bias"]
             + w["layer_embed.weight"][types])
        for i in (0, 2, 4):
            h = F.silu(h @ w[f"edge_mlp.fc.{i}.weight"].t() + w[f"edge_mlp.fc.{i}.bias"])
        out = h @ w["edge_mlp.fc.6.weight"][k - 1] + w["edge_mlp.fc.6.bias"][k - 1]
        return x[:, CTX - 1] + out

    def predict(self, spec, states, k, graph=None):
        """states {name: [5, *shape]} -> {name: predicted tensor}."""
        graph = graph or NeuralGraph(spec)
        shapes = {n: s for n, s, _ in spec["params"]}
        types = graph.scalar_types(shapes)
        out = {}
        for name, shape, _ in spec["params"]:
            mean, std = tensor_scale(states[name])
            x = normalise(states[name], mean, std).reshape(CTX, -1).t()
            y = self.forward(x, types[name].reshape(-1), k)
            out[name] = denormalise(y.reshape(shape), mean, std)
        return out


class NiNo:
    """The NiNo GNN: edge/node projections, 3 message-passing layers of width 128 (edge features
    modulate messages, then edges are updated from their end nodes), edge decoder 9 x 40."""

    def __init__(self, path):
        self.w, _ = _load(path)
        self.layers = 0
        while f"gnn.convs.{self.layers}.lin.weight" in self.w:
            self.layers += 1
        self.horizons = self.w["edge_out.fc.2.weight"].shape[0] // 9

    def forward(self, graph, pe, ef, k):  # ef [E, feat, 5] -> [E, feat] normalised prediction
        w = self.w
        E, feat, _ = ef.shape
        src, dst = graph.src, graph.dst
        lin = lambda x, n: x @ w[n + ".weight"].t() + w[n + ".bias"]
        x = lin(pe, "node_proj.fc.0")
        e = (ef.reshape(E, -1) @ w["edge_proj.fc.0.weight"][:, :feat * CTX].t()
             + w["edge_proj.fc.0.bias"] + w["layer_embed.weight"][graph.edge_type])
        count = torch.zeros(graph.num_nodes).index_add_(0, dst, torch.ones(E))
        # Only edge features reach the output; message-passing layer i updates them after its
        # node update for i < layers - 1, so the last layer's node update cannot matter.
        for i in range(self.layers - 1):
            c = f"gnn.convs.{i}"
            m = lin(torch.cat([x[dst], x[src]], 1), c + ".pre_nns.0.0")  # [x_target, x_source]
            scale, shift = lin(e, c + ".edge_encoder").chunk(2, dim=1)
            m = scale * m + shift
            agg = torch.zeros_like(x).index_add_(0, dst, m) / count[:, None]
            x = lin(lin(torch.cat([x, agg], 1), c + ".post_nns.0.0"), c + ".lin")
            x = F.silu(x)
            u = f"gnn.edge_update.{i}"
            u_in = lin(e, u + ".lin_e") + lin(x, u + ".lin_s")[src] + lin(x, u + ".lin_t")[dst]
            e = lin(F.silu(u_in), u + ".lin1")
        h = F.silu(lin(e, "edge_out.fc.0"))
        rows = [f * self.horizons + k - 1 for f in range(feat)]
        out = h @ w["edge_out.fc.2.weight"][rows].t() + w["edge_out.fc.2.bias"][rows]
        return ef[:, :, CTX - 1] + out

    def predict(self, spec, states, k, graph=None, pe=None):
        graph = graph or NeuralGraph(spec)
        if pe is None:
            pe = laplacian_pe(graph.num_nodes, graph.src, graph.dst)
        shapes = {n: s for n, s, _ in spec["params"]}
        scales = {n: tensor_scale(states[n]) for n in shapes}
        normed = {n: normalise(states[n], *scales[n]) for n in shapes}
        pred = self.forward(graph, pe, graph.edge_features(normed), k)
        params = graph.edge_params(pred, shapes)
        return {n: denormalise(params[n], *scales[n]) for n in shapes}
