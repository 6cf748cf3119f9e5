"""Ready-made PyTorch workloads for the recorder: model, optimizer, batches and loss, by name.

``WORKLOADS[name](seed)`` returns a :class:`Workload`; pass its fields to
:func:`envs.workloads.recorder.record`. Imports torch (only the recorder's users import this).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["Workload", "WORKLOADS", "make_workload", "TinyGPT", "SmallResNet", "EmbeddingMLP"]


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


WORKLOADS: dict[str, Callable[[int], Workload]] = {
    "gpt": lambda seed: _gpt(seed, vocab=512, d=64, layers=12, heads=4, seq=32, batch=4),
    "gpt_wide": lambda seed: _gpt(seed, vocab=1024, d=128, layers=8, heads=8, seq=64, batch=4),
    "resnet": lambda seed: _resnet(seed, width=8, stages=3, blocks=3, batch=4, hw=16),
    "resnet_deep": lambda seed: _resnet(seed, width=8, stages=4, blocks=4, batch=4, hw=16),
    "mlp_embedding": lambda seed: _mlp_embedding(seed, rows=100_000, dim=32, hidden=128, depth=6,
                                                 batch=64, bag=8),
}
"""Ready-made workloads by name; each takes the seed."""


def make_workload(name: str, seed: int = 0) -> Workload:
    """The ready-made workload called ``name`` (see :data:`WORKLOADS`)."""
    from allocator.errors import ConfigError

    if name not in WORKLOADS:
        raise ConfigError(f"unknown model {name!r}; choose one of {sorted(WORKLOADS)}")
    return WORKLOADS[name](seed)
