"""Ready-made PyTorch workloads for the recorder: model, optimizer, batches and loss, by name.

``WORKLOADS[name](seed)`` returns a :class:`Workload`; pass its fields to
:func:`envs.workloads.recorder.record`. Imports torch (only the recorder's users import this).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["Workload", "WORKLOADS", "make_workload", "TinyGPT", "SmallResNet", "EmbeddingMLP", "RecurrentLM",
           "SpeechGRU", "UNet", "VAE", "MLPMixer", "ViT", "TCN", "DenseNet", "MobileNet", "MixtureOfExperts",
           "ConvAutoencoder", "GraphConvNet", "record_workload"]


@dataclass(frozen=True)
class Workload:
    """Everything :func:`record` needs: ``record(w.model, w.optimizer, w.make_batch, w.loss_fn)``."""

    model: nn.Module
    optimizer: torch.optim.Optimizer | None
    make_batch: Callable[[int], Any]
    loss_fn: Callable[[nn.Module, Any], torch.Tensor]
    description: str


# ---------------------------------------------------------------------- models
class _Block(nn.Module):
    """Pre-norm decoder block: causal self-attention and a 4x MLP."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyGPT(nn.Module):
    """A small GPT-style decoder (token + position embeddings, blocks, tied-free LM head)."""

    def __init__(self, vocab: int, d: int, layers: int, heads: int, seq: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(_Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


class _Basic(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(y)) + self.skip(x))


class SmallResNet(nn.Module):
    """A ResNet-style CNN: a stem, ``stages`` stages of ``blocks`` basic blocks, a classifier."""

    def __init__(self, width: int, stages: int, blocks: int, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        layers: list[nn.Module] = []
        c = width
        for s in range(stages):
            for b in range(blocks):
                out = width * 2**s
                layers.append(_Basic(c, out, 2 if (b == 0 and s > 0) else 1))
                c = out
        self.body = nn.Sequential(*layers)
        self.fc = nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.body(self.stem(x)).mean(dim=(2, 3)))


class EmbeddingMLP(nn.Module):
    """A recommender: a large embedding table (bag of ids, summed) feeding an MLP."""

    def __init__(self, rows: int, dim: int, hidden: int, dense: int, depth: int) -> None:
        super().__init__()
        self.table = nn.EmbeddingBag(rows, dim, mode="sum")
        layers: list[nn.Module] = [nn.Linear(dim + dense, hidden), nn.ReLU()]
        for _ in range(depth - 1):
            layers += [nn.Linear(hidden, hidden), nn.ReLU()]
        self.mlp = nn.Sequential(*layers, nn.Linear(hidden, 1))

    def forward(self, ids: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(torch.cat([self.table(ids), x], dim=1)).squeeze(1)


class RecurrentLM(nn.Module):
    """A language model: token embedding, a stacked GRU or LSTM, a vocabulary head."""

    def __init__(self, cell: str, vocab: int, d: int, hidden: int, layers: int) -> None:
        super().__init__()
        rnn = {"gru": nn.GRU, "lstm": nn.LSTM}[cell]
        self.emb = nn.Embedding(vocab, d)
        self.rnn = rnn(d, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(self.emb(idx))[0])


class SpeechGRU(nn.Module):
    """Speech-style: three Conv1d layers over feature frames, a 2-layer GRU, a label per frame."""

    def __init__(self, feats: int, labels: int, hidden: int = 128) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv1d(feats, 64, 5, padding=2), nn.ReLU(),
                                  nn.Conv1d(64, 64, 5, padding=2), nn.ReLU(),
                                  nn.Conv1d(64, 96, 3, padding=1), nn.ReLU())
        self.rnn = nn.GRU(96, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, labels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (batch, labels, frames)
        return self.head(self.rnn(self.conv(x).transpose(1, 2))[0]).transpose(1, 2)


def _conv_bn(cin: int, cout: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU())


class UNet(nn.Module):
    """A two-level U-Net: encoder, bottleneck, decoder with concatenated skips, per-pixel labels."""

    def __init__(self, width: int = 16, classes: int = 2) -> None:
        super().__init__()
        w = width
        self.d1, self.d2, self.d3 = _conv_bn(3, w), _conv_bn(w, 2 * w), _conv_bn(2 * w, 4 * w)
        self.u2, self.u1 = _conv_bn(6 * w, 2 * w), _conv_bn(3 * w, w)
        self.out = nn.Conv2d(w, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.d1(x)
        b = self.d2(F.max_pool2d(a, 2))
        c = self.d3(F.max_pool2d(b, 2))
        y = self.u2(torch.cat([F.interpolate(c, scale_factor=2.0), b], 1))
        return self.out(self.u1(torch.cat([F.interpolate(y, scale_factor=2.0), a], 1)))


class VAE(nn.Module):
    """A variational autoencoder of MLPs (reparameterised latent); ``forward`` returns the loss."""

    def __init__(self, dim: int = 784, hidden: int = 400, latent: int = 20) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden // 2), nn.ReLU())
        self.mu, self.logvar = nn.Linear(hidden // 2, latent), nn.Linear(hidden // 2, latent)
        self.dec = nn.Sequential(nn.Linear(latent, hidden // 2), nn.ReLU(), nn.Linear(hidden // 2, hidden),
                                 nn.ReLU(), nn.Linear(hidden, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.enc(x)
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        kl = -0.5 * (1 + logvar - mu**2 - logvar.exp()).mean()
        return F.mse_loss(self.dec(z), x) + kl


class MLPMixer(nn.Module):
    """MLP-Mixer: token-mixing and channel-mixing MLPs over a sequence of patches."""

    def __init__(self, patch_dim: int, tokens: int, d: int, blocks: int, classes: int = 10) -> None:
        super().__init__()
        self.inp = nn.Linear(patch_dim, d)
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(2 * blocks))
        self.token_mlps = nn.ModuleList(nn.Sequential(nn.Linear(tokens, 2 * tokens), nn.GELU(),
                                                      nn.Linear(2 * tokens, tokens)) for _ in range(blocks))
        self.channel_mlps = nn.ModuleList(nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
                                          for _ in range(blocks))
        self.head = nn.Linear(d, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for i, (tok, ch) in enumerate(zip(self.token_mlps, self.channel_mlps)):
            h = h + tok(self.norms[2 * i](h).transpose(1, 2)).transpose(1, 2)
            h = h + ch(self.norms[2 * i + 1](h))
        return self.head(h.mean(1))


class ViT(nn.Module):
    """A small vision transformer: patch embedding, class token, ``nn.TransformerEncoder``."""

    def __init__(self, d: int = 96, layers: int = 4, heads: int = 4, patch: int = 4, classes: int = 10) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, d, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        layer = nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0, batch_first=True)
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.patch(x).flatten(2).transpose(1, 2)
        h = torch.cat([self.cls.expand(h.shape[0], -1, -1), h], 1)
        return self.head(self.body(h)[:, 0])


class TCN(nn.Module):
    """A temporal convolutional network: residual dilated Conv1d layers (dilation 1, 2, 4, ...)."""

    def __init__(self, feats: int, channels: int, layers: int, classes: int = 5) -> None:
        super().__init__()
        self.inp = nn.Conv1d(feats, channels, 1)
        self.layers = nn.ModuleList(
            nn.Sequential(nn.Conv1d(channels, channels, 3, padding=2**i, dilation=2**i),
                          nn.BatchNorm1d(channels), nn.ReLU()) for i in range(layers))
        self.head = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for layer in self.layers:
            h = h + layer(h)
        return self.head(h.mean(2))


class DenseNet(nn.Module):
    """One dense block: each layer (BN, ReLU, conv) sees the concatenation of all before it."""

    def __init__(self, growth: int, layers: int, stem: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, stem, 3, padding=1)
        self.layers = nn.ModuleList(
            nn.Sequential(nn.BatchNorm2d(stem + i * growth), nn.ReLU(),
                          nn.Conv2d(stem + i * growth, growth, 3, padding=1)) for i in range(layers))
        self.head = nn.Linear(stem + layers * growth, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        for layer in self.layers:
            h = torch.cat([h, layer(h)], 1)
        return self.head(h.mean((2, 3)))


class MobileNet(nn.Module):
    """Depthwise-separable CNN (MobileNet-style): per block a depthwise 3x3 and a pointwise 1x1
    convolution, each with BN and ReLU6; two blocks halve the resolution and double the width."""

    def __init__(self, width: int = 16, blocks: int = 6, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU6())
        layers: list[nn.Module] = []
        c = width
        for i in range(blocks):
            stride = 2 if i in (1, 3) else 1
            co = 2 * c if stride == 2 else c
            layers += [nn.Conv2d(c, c, 3, stride=stride, padding=1, groups=c, bias=False), nn.BatchNorm2d(c),
                       nn.ReLU6(), nn.Conv2d(c, co, 1, bias=False), nn.BatchNorm2d(co), nn.ReLU6()]
            c = co
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.stem(x)).mean((2, 3)))


class MixtureOfExperts(nn.Module):
    """Residual layers of a softmax-gated mixture of expert MLPs (dense routing: every expert
    runs, its output weighted by the gate), over a sequence of feature vectors."""

    def __init__(self, d_in: int = 32, d: int = 64, experts: int = 4, layers: int = 3, classes: int = 10) -> None:
        super().__init__()
        self.inp = nn.Linear(d_in, d)
        self.gates = nn.ModuleList(nn.Linear(d, experts) for _ in range(layers))
        self.experts = nn.ModuleList(
            nn.ModuleList(nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d)) for _ in range(experts))
            for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for norm, gate, experts in zip(self.norms, self.gates, self.experts):
            w = torch.softmax(gate(norm(h)), -1)
            # each expert normalises its input itself (more activations than one shared norm)
            h = h + sum(w[..., i:i + 1] * e(norm(h)) for i, e in enumerate(cast(nn.ModuleList, experts)))
        return self.head(h.mean(1))


class ConvAutoencoder(nn.Module):
    """Strided convolutions down, transposed convolutions up; ``forward`` returns the
    reconstruction's mean squared error."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        w = width
        self.enc = nn.Sequential(nn.Conv2d(3, w, 3, 2, 1), nn.ReLU(), nn.Conv2d(w, 2 * w, 3, 2, 1), nn.ReLU(),
                                 nn.Conv2d(2 * w, 4 * w, 3, 2, 1), nn.ReLU())
        self.dec = nn.Sequential(nn.ConvTranspose2d(4 * w, 2 * w, 4, 2, 1), nn.ReLU(),
                                 nn.ConvTranspose2d(2 * w, w, 4, 2, 1), nn.ReLU(), nn.ConvTranspose2d(w, 3, 4, 2, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(self.dec(self.enc(x)), x)


class GraphConvNet(nn.Module):
    """Graph convolutions ``relu(A h W)`` over a fixed random graph (a dense normalised adjacency
    ``A``, a buffer), one label per node."""

    def __init__(self, d_in: int = 32, d: int = 96, layers: int = 4, classes: int = 8, nodes: int = 256) -> None:
        super().__init__()
        self.lins = nn.ModuleList(nn.Linear(d_in if i == 0 else d, d) for i in range(layers))
        self.head = nn.Linear(d, classes)
        g = torch.Generator().manual_seed(1)
        a = (torch.rand(nodes, nodes, generator=g) < 0.05).float()
        a = a + a.T + torch.eye(nodes)
        deg = a.sum(1)
        self.register_buffer("adj", a / torch.sqrt(deg[:, None] * deg[None, :]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for lin in self.lins:
            h = F.relu(self.adj @ lin(h))
        return self.head(h)


# ---------------------------------------------------------------------- workloads
def _gpt(seed: int, vocab: int, d: int, layers: int, heads: int, seq: int, batch: int) -> Workload:
    torch.manual_seed(seed)
    model = TinyGPT(vocab, d, layers, heads, seq)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=False)
    gen = torch.Generator().manual_seed(seed)

    def make_batch(step: int) -> torch.Tensor:
        return torch.randint(0, vocab, (batch, seq + 1), generator=gen)

    def loss_fn(m: nn.Module, idx: torch.Tensor) -> torch.Tensor:
        logits = m(idx[:, :-1])
        return F.cross_entropy(logits.reshape(-1, vocab), idx[:, 1:].reshape(-1))

    desc = f"TinyGPT(vocab={vocab}, d={d}, layers={layers}, heads={heads}, seq={seq}), batch {batch}, AdamW"
    return Workload(model, opt, make_batch, loss_fn, desc)


def _resnet(seed: int, width: int, stages: int, blocks: int, batch: int, hw: int) -> Workload:
    torch.manual_seed(seed)
    model = SmallResNet(width, stages, blocks)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4, foreach=False)
    gen = torch.Generator().manual_seed(seed)

    def make_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(batch, 3, hw, hw, generator=gen), torch.randint(0, 10, (batch,), generator=gen)

    def loss_fn(m: nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(m(b[0]), b[1])

    desc = f"SmallResNet(width={width}, stages={stages}, blocks={blocks}), batch {batch}x3x{hw}x{hw}, SGD momentum"
    return Workload(model, opt, make_batch, loss_fn, desc)


def _mlp_embedding(seed: int, rows: int, dim: int, hidden: int, depth: int, batch: int,
                   bag: int) -> Workload:
    torch.manual_seed(seed)
    dense = 16
    model = EmbeddingMLP(rows, dim, hidden, dense, depth)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    gen = torch.Generator().manual_seed(seed)
    popularity = torch.arange(1, rows + 1, dtype=torch.float64) ** -1.05  # Zipf ids

    def make_batch(step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ids = torch.multinomial(popularity, batch * bag, replacement=True, generator=gen)
        return ids.view(batch, bag), torch.randn(batch, dense, generator=gen), torch.rand(batch, generator=gen)

    def loss_fn(m: nn.Module, b: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(m(b[0], b[1]), b[2])

    desc = f"EmbeddingMLP(rows={rows}, dim={dim}, hidden={hidden}, depth={depth}), batch {batch}, bag {bag}, Adam"
    return Workload(model, opt, make_batch, loss_fn, desc)


def _supervised(seed: int, model_fn: Callable[[], nn.Module], optimizer: str,
                make_input: Callable[[torch.Generator], Any], loss_fn: Callable[[nn.Module, Any], torch.Tensor],
                desc: str) -> Workload:
    """A workload from a model constructor, an optimizer name (``sgd`` with momentum, ``adam``,
    ``adamw``) and a batch drawn from a seeded generator; the model is built after
    ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)
    model = model_fn()
    opts: dict[str, Callable[[], torch.optim.Optimizer]] = {
        "sgd": lambda: torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=False),
        "adam": lambda: torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False),
        "adamw": lambda: torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False),
    }
    gen = torch.Generator().manual_seed(seed)
    return Workload(model, opts[optimizer](), lambda step: make_input(gen), loss_fn, f"{desc}, {optimizer}")


def _lm(seed: int, cell: str, vocab: int, d: int, hidden: int, layers: int, seq: int, batch: int) -> Workload:
    def loss(m: nn.Module, idx: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(m(idx[:, :-1]).reshape(-1, vocab), idx[:, 1:].reshape(-1))

    return _supervised(seed, lambda: RecurrentLM(cell, vocab, d, hidden, layers), "adam",
                       lambda g: torch.randint(0, vocab, (batch, seq + 1), generator=g), loss,
                       f"RecurrentLM({cell}, vocab={vocab}, d={d}, hidden={hidden}, layers={layers}), "
                       f"batch {batch}x{seq}")


def _classify(seed: int, model_fn: Callable[[], nn.Module], optimizer: str, shape: tuple[int, ...],
              classes: int, desc: str, labels: tuple[int, ...] | None = None) -> Workload:
    """Random inputs of ``shape`` (batch first) and labels of shape ``labels`` (default: one per
    sample; a per-position model, whose output has classes in dimension 1, gives its own)."""
    def make_input(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(*shape, generator=g), torch.randint(0, classes, labels or shape[:1], generator=g)

    def loss(m: nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(m(b[0]), b[1])

    return _supervised(seed, model_fn, optimizer, make_input, loss, f"{desc}, batch {shape}")


WORKLOADS: dict[str, Callable[[int], Workload]] = {
    "gpt": lambda seed: _gpt(seed, vocab=512, d=64, layers=12, heads=4, seq=32, batch=4),
    "gpt_wide": lambda seed: _gpt(seed, vocab=1024, d=128, layers=8, heads=8, seq=64, batch=4),
    "resnet": lambda seed: _resnet(seed, width=8, stages=3, blocks=3, batch=4, hw=16),
    "resnet_deep": lambda seed: _resnet(seed, width=8, stages=4, blocks=4, batch=4, hw=16),
    "mlp_embedding": lambda seed: _mlp_embedding(seed, rows=100_000, dim=32, hidden=128, depth=6,
                                                 batch=64, bag=8),
    # more architectures (none is trained on by default; see conf/train.yaml and the README)
    "gru_lm": lambda seed: _lm(seed, "gru", vocab=3000, d=96, hidden=192, layers=3, seq=24, batch=8),
    "lstm_lm": lambda seed: _lm(seed, "lstm", vocab=2000, d=128, hidden=256, layers=2, seq=32, batch=8),
    "speech_gru": lambda seed: _classify(seed, lambda: SpeechGRU(40, 30), "sgd", (8, 40, 60), 30,
                                         "SpeechGRU(40 features, 30 labels)", labels=(8, 60)),
    "unet": lambda seed: _classify(seed, lambda: UNet(16, 2), "adamw", (4, 3, 32, 32), 2, "UNet(width=16)",
                                   labels=(4, 32, 32)),
    "vae": lambda seed: _supervised(seed, VAE, "adam", lambda g: torch.rand(32, 784, generator=g),
                                    lambda m, x: m(x), "VAE(784-400-200-20), batch 32"),
    "mixer": lambda seed: _classify(seed, lambda: MLPMixer(48, 64, 128, 4), "adam", (16, 64, 48), 10,
                                    "MLPMixer(64 tokens, d=128, 4 blocks)"),
    "vit": lambda seed: _classify(seed, ViT, "adamw", (8, 3, 32, 32), 10, "ViT(d=96, 4 layers, patch 4)"),
    "tcn": lambda seed: _classify(seed, lambda: TCN(16, 64, 6), "sgd", (16, 16, 128), 5,
                                  "TCN(64 channels, 6 dilated layers)"),
    "densenet": lambda seed: _classify(seed, lambda: DenseNet(12, 6), "sgd", (8, 3, 16, 16), 10,
                                       "DenseNet(growth 12, 6 layers)"),
    "mobilenet": lambda seed: _classify(seed, lambda: MobileNet(16, 6), "adam", (8, 3, 32, 32), 10,
                                        "MobileNet(width 16, 6 depthwise-separable blocks)"),
    "moe": lambda seed: _classify(seed, MixtureOfExperts, "adamw", (16, 16, 32), 10,
                                  "MixtureOfExperts(d=64, 4 experts, 3 layers)"),
    "conv_ae": lambda seed: _supervised(seed, ConvAutoencoder, "sgd",
                                        lambda g: torch.rand(8, 3, 32, 32, generator=g), lambda m, b: m(b),
                                        "ConvAutoencoder(width 16), batch (8, 3, 32, 32)"),
    "gcn": lambda seed: _classify(seed, GraphConvNet, "adam", (256, 32), 8,
                                  "GraphConvNet(4 layers, 256 nodes)", labels=(256,)),
}
"""Ready-made workloads by name; each takes the seed."""


def make_workload(name: str, seed: int = 0) -> Workload:
    """The ready-made workload called ``name`` (see :data:`WORKLOADS`)."""
    from cachegym.allocator.errors import ConfigError

    if name not in WORKLOADS:
        raise ConfigError(f"unknown model {name!r}; choose one of {sorted(WORKLOADS)}")
    return WORKLOADS[name](seed)


def record_workload(name: str, steps: int, cache_dir: str, *, seed: int = 0, inference: bool = False) -> str:
    """The path of a trace of ``steps`` iterations of the ready-made workload ``name`` (forward
    passes only with ``inference``), recorded with :func:`envs.workloads.recorder.record` into
    ``cache_dir`` on first use and reused after (the file name holds name, seed and steps)."""
    import os

    from cachegym.envs.workloads.recorder import record

    tag = f"{name}_infer" if inference else name
    path = os.path.join(cache_dir, f"{tag}_s{seed}_steps{steps}.npz")
    if not os.path.isfile(path):
        w = make_workload(name, seed)
        t = record(w.model, None if inference else w.optimizer, w.make_batch, w.loss_fn, steps=steps, seed=seed,
                   name=tag, meta={"workload": name, "description": w.description, "inference": inference})
        os.makedirs(cache_dir, exist_ok=True)
        t.save(path)
    return path
