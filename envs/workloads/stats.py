"""Trace statistics: request counts, working set, peak live bytes, bytes by kind, reuse distance."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numba
import numpy as np

from allocator.trace import Kind, Op, Trace

__all__ = ["TraceStats", "trace_stats", "reuse_distances", "plot_reuse_histogram", "format_stats"]


@dataclass(frozen=True)
class TraceStats:
    """Summary of a trace. Reuse distance is the LRU stack distance: the number of distinct
    objects accessed between two accesses to the same object (frees excluded)."""

    requests: int
    reads: int
    writes: int
    frees: int
    unique_objects: int
    working_set_bytes: int
    peak_live_bytes: int
    bytes_by_kind: dict[str, int]
    compute_ns: int
    reuses: int
    cold: int
    reuse_p50: float
    reuse_p90: float
    reuse_p99: float
    reuse_mean: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@numba.njit(cache=True)
def _fenwick_add(tree: np.ndarray, i: int, w: int) -> None:  # pragma: no cover - jitted
    n = len(tree) - 1
    while i <= n:
        tree[i] += w
        i += i & -i


@numba.njit(cache=True)
def _fenwick_sum(tree: np.ndarray, i: int) -> int:  # pragma: no cover - jitted
    s = 0
    while i > 0:
        s += tree[i]
        i -= i & -i
    return s


@numba.njit(cache=True)
def _stack_distances(obj: np.ndarray, weight: np.ndarray, free: np.ndarray,
                     n_obj: int) -> np.ndarray:  # pragma: no cover - jitted
    """Weighted LRU stack distances. A Fenwick tree over row positions holds one mark per
    object on the stack, of the object's weight, at its last access; a free takes the mark off.
    ``out[i]`` is the total weight of the marks strictly between the previous access to
    ``obj[i]`` and row ``i`` (the objects above it on the stack); -1 for a first access and
    for a free row."""
    n = len(obj)
    tree = np.zeros(n + 1, np.int64)
    last = np.full(n_obj, -1, np.int64)
    last_w = np.zeros(n_obj, np.int64)
    out = np.full(n, -1, np.int64)
    for i in range(n):
        o = obj[i]
        p = last[o]
        if p >= 0:
            if not free[i]:
                out[i] = _fenwick_sum(tree, i) - _fenwick_sum(tree, p + 1)
            _fenwick_add(tree, p + 1, -last_w[o])
        if free[i]:
            last[o] = -1
            continue
        _fenwick_add(tree, i + 1, weight[i])
        last[o] = i
        last_w[o] = weight[i]
    return out


def reuse_distances(trace: Trace) -> np.ndarray:
    """Stack distance of every read/write row (in order; -1 for a first access)."""
    access = trace.op != Op.FREE
    obj = trace.object_ids()[access]
    if len(obj) == 0:
        return np.zeros(0, np.int64)
    ones = np.ones(len(obj), np.int64)
    return _stack_distances(obj, ones, np.zeros(len(obj), np.bool_), int(obj.max()) + 1)


def trace_stats(trace: Trace) -> TraceStats:
    """Compute :class:`TraceStats` for ``trace``."""
    ops = np.bincount(trace.op, minlength=3)
    obj = trace.object_ids()
    _, first = np.unique(obj, return_index=True)
    by_kind = np.bincount(trace.kind[first], weights=trace.size[first], minlength=len(Kind))
    d = reuse_distances(trace)
    reused = d[d >= 0]
    pct = np.percentile(reused, [50, 90, 99]) if len(reused) else np.zeros(3)
    return TraceStats(
        requests=int(ops[Op.READ] + ops[Op.WRITE]),
        reads=int(ops[Op.READ]),
        writes=int(ops[Op.WRITE]),
        frees=int(ops[Op.FREE]),
        unique_objects=len(first),
        working_set_bytes=trace.working_set_bytes(),
        peak_live_bytes=trace.peak_live_bytes(),
        bytes_by_kind={k.name.lower(): int(by_kind[k]) for k in Kind if by_kind[k]},
        compute_ns=int(trace.compute_ns.sum()),
        reuses=len(reused),
        cold=int((d < 0).sum()),
        reuse_p50=float(pct[0]),
        reuse_p90=float(pct[1]),
        reuse_p99=float(pct[2]),
        reuse_mean=float(reused.mean()) if len(reused) else 0.0,
    )


def format_stats(s: TraceStats) -> str:
    """Human-readable multi-line summary."""
    lines = [
        f"requests           {s.requests} ({s.reads} reads, {s.writes} writes, {s.frees} frees)",
        f"unique objects     {s.unique_objects}",
        f"working-set bytes  {s.working_set_bytes}",
        f"peak live bytes    {s.peak_live_bytes}",
        f"compute ns         {s.compute_ns}",
        "bytes by kind      (working set) " + ", ".join(f"{k} {v}" for k, v in s.bytes_by_kind.items()),
        f"reuse distance     {s.reuses} reuses, {s.cold} first accesses; p50 {s.reuse_p50:.0f}, "
        f"p90 {s.reuse_p90:.0f}, p99 {s.reuse_p99:.0f}, mean {s.reuse_mean:.1f}",
    ]
    return "\n".join(lines)


def plot_reuse_histogram(trace: Trace, path: str, bins: int = 50) -> None:
    """Save a log-binned histogram of reuse (stack) distances as a PNG (Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = reuse_distances(trace)
    d = d[d >= 0]
    fig, ax = plt.subplots(figsize=(6, 4))
    if len(d):
        edges = np.unique(np.logspace(0, np.log10(d.max() + 2), bins).astype(np.int64)) - 1
        ax.hist(d, bins=np.append(edges, d.max() + 1).tolist())
        ax.set_xscale("symlog")
    ax.set_xlabel("reuse distance (distinct objects between accesses)")
    ax.set_ylabel("accesses")
    ax.set_title(f"{trace.name}: {len(d)} reuses")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
