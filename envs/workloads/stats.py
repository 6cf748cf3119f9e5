"""Trace statistics: request counts, working set, peak live bytes, bytes by kind, reuse distance,
LRU's miss-ratio curve (exact, or SHARDS-sampled)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, NamedTuple

import numba
import numpy as np

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.trace import Kind, Op, Trace

__all__ = ["TraceStats", "trace_stats", "reuse_distances", "shards_rate", "SHARDS_MIN_OBJECTS", "plot_reuse_histogram", "format_stats",
           "MissRatioCurve", "lru_mrc", "auto_sample_rate", "plot_mrc", "SAMPLE_ABOVE"]


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


SAMPLE_ABOVE = 2_000_000
""":func:`lru_mrc` samples (SHARDS) a trace with more read/write rows than this, unless told."""

_HASH_MODULUS = 1 << 24


class MissRatioCurve(NamedTuple):
    """LRU's miss ratio (misses / reads and writes) at each capacity (bytes or objects)."""

    capacities: np.ndarray
    miss_ratios: np.ndarray


SHARDS_MIN_OBJECTS = 1024
"""Fewest objects a SHARDS sample keeps (in expectation): below it the rate is raised (to 1,
exact, on a trace of fewer objects). A sample of a few objects says nothing about the curve:
one of 1 in 1,000 of 150 objects kept none, and the curve read 1.0 at every capacity."""


def shards_rate(trace: Trace, sample: float | None = None) -> float:
    """The SHARDS rate :func:`lru_mrc` samples ``trace`` at: ``sample`` (``None``:
    :func:`auto_sample_rate`), raised so that the sample keeps about
    :data:`SHARDS_MIN_OBJECTS` objects (1: exact). Raises :class:`ConfigError` for a rate
    outside (0, 1]."""
    access = trace.op != Op.FREE
    n_access = int(access.sum())
    rate = auto_sample_rate(n_access) if sample is None else float(sample)
    if not 0 < rate <= 1:
        raise ConfigError(f"lru_mrc: sample must be a rate in (0, 1], got {sample!r}")
    if rate < 1:
        objects = int(np.count_nonzero(np.bincount(trace.object_ids()[access]))) if n_access else 0
        if rate * objects < SHARDS_MIN_OBJECTS:
            rate = min(1.0, SHARDS_MIN_OBJECTS / max(objects, 1))
    return rate


def auto_sample_rate(n_requests: int) -> float:
    """The SHARDS rate :func:`lru_mrc` uses by default: 1 (exact) up to :data:`SAMPLE_ABOVE`
    requests, then a rate keeping about that many."""
    return 1.0 if n_requests <= SAMPLE_ABOVE else SAMPLE_ABOVE / n_requests


def _spatial_hash(obj: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser of each id, modulo :data:`_HASH_MODULUS` (SHARDS' hash)."""
    with np.errstate(over="ignore"):
        x = obj.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x % np.uint64(_HASH_MODULUS)).astype(np.int64)


def _default_capacities(trace: Trace, mode: str, points: int = 200) -> np.ndarray:
    if mode == "objects":
        lo, hi = 1, int(len(np.unique(trace.object_ids())))
    else:
        lo, hi = int(trace.size.min()), trace.working_set_bytes()
    return np.unique(np.geomspace(lo, max(hi, lo), points).round().astype(np.int64))


def lru_mrc(trace: Trace, mode: Literal["bytes", "objects"] = "bytes",
            capacities: Any = None, sample: float | None = None) -> MissRatioCurve:
    """LRU's miss-ratio curve from stack distances, in one pass over the trace.

    A read or write hits under LRU at capacity ``C`` iff its stack distance, counting the object
    itself, is at most ``C``: in ``"bytes"`` mode the bytes of the distinct objects used since its
    last use plus its own size, in ``"objects"`` mode their number plus one (as a pool replaying
    ``trace.with_sizes(1)``). First accesses always miss. This is exactly the miss ratio of
    ``Pool(C, LRU(), placement="bytes", oversize="bypass")`` on a trace without frees whose
    objects keep their size: an object larger than ``C`` is streamed and never on the stack, so
    capacities below the largest object take one more pass each (per distinct set of objects
    that fit).

    A free takes its object off the stack. The pool does not refill the space it leaves, so with
    frees the curve is a lower bound on the pool's miss ratio (the pool's contents are always a
    prefix of this stack, the curve assumes the longest prefix that fits).

    ``sample``: a rate ``0 < R <= 1`` for SHARDS (Waldspurger et al., FAST 2015): the stack holds
    only the objects whose hash falls in one ``m = round(1 / R)``-th of its range, each standing
    for ``m`` (its weight in the distances is ``m`` times its own). Unlike SHARDS, heavy objects
    (at least ``m`` times the mean requests per object: no more of them than the hash keeps) are
    kept whole with weight 1: spatial sampling's error is dominated by whether a few very
    popular objects fall in the sample (SHARDS-adj's correction, the missing requests counted as
    hits, then errs at small capacities). The sampled objects' hits are scaled to their true
    number of requests (a ratio estimator). On Zipf traces of 200,000 requests at ``R = 0.1``
    the curve is within 0.02 of the exact one; at ``R = 0.01`` only a few thousand requests
    remain and errors reach 0.1. ``None`` (default): :func:`auto_sample_rate`; ``1``: exact.
    The rate is raised where the sample would keep fewer than :data:`SHARDS_MIN_OBJECTS`
    objects (:func:`shards_rate`).
    ``capacities``: default a geometric grid of 200 from the smallest object (or one object) to
    the working set.
    """
    if mode not in ("bytes", "objects"):
        raise ConfigError(f"lru_mrc: mode must be 'bytes' or 'objects', got {mode!r}")
    access = trace.op != Op.FREE
    n_access = int(access.sum())
    rate = shards_rate(trace, sample)
    caps = (_default_capacities(trace, mode) if capacities is None
            else np.asarray(capacities, np.int64).reshape(-1))
    if n_access == 0:
        return MissRatioCurve(caps, np.zeros(len(caps)))
    obj = trace.object_ids()
    size = trace.size.astype(np.int64) if mode == "bytes" else np.ones(len(obj), np.int64)
    mult = np.ones(len(obj), np.int64)  # requests each row stands for
    if rate < 1:
        keep, mult = _shards(obj, access, rate)
        obj, size, access, mult = obj[keep], size[keep], access[keep], mult[keep]
    free = ~access
    n_obj = int(obj.max()) + 1 if len(obj) else 0
    hits = np.zeros(len(caps), np.float64)
    # each kept read/write stands for this many: m of the other objects' rows, scaled by the
    # ratio of their true count to m times the sampled one (a ratio estimator)
    stands = np.ones(len(obj))
    tail = mult > 1
    if tail.any():
        stands[tail] = (n_access - int(access[~tail].sum())) / int(access[tail].sum())
    fits = np.unique(size)  # capacities that admit the same set of sizes share a pass
    group = np.searchsorted(fits, caps, side="right")
    for g in np.unique(group):
        at = group == g
        if g == 0 or len(obj) == 0:
            continue  # nothing fits: every request misses
        limit = fits[g - 1]
        d = _stack_distances(obj, np.where(size <= limit, size * mult, 0), free, n_obj)
        reuse = np.flatnonzero((d >= 0) & (size <= limit))
        need = d[reuse] + size[reuse]
        order = np.argsort(need, kind="stable")
        cum = np.concatenate(([0], np.cumsum(stands[reuse][order])))
        hits[at] = cum[np.searchsorted(need[order], caps[at], side="right")]
    return MissRatioCurve(caps, np.clip((n_access - hits) / n_access, 0.0, 1.0))


def _shards(obj: np.ndarray, access: np.ndarray, rate: float) -> tuple[np.ndarray, np.ndarray]:
    """Rows kept and the requests each stands for: every row of a heavy object (one request
    each) and the rows of the objects whose hash falls in one ``m = round(1 / rate)``-th of the
    range (``m`` each). Heavy: at least ``m`` times the mean requests per object, so there are
    at most ``rate`` times as many heavy objects as objects, as many as the hash keeps."""
    m = max(1, round(1 / rate))
    count = np.bincount(obj[access], minlength=int(obj.max()) + 1)
    heavy = count * np.count_nonzero(count) >= m * int(access.sum())
    sampled = _spatial_hash(np.arange(len(count))) < _HASH_MODULUS // m
    return (heavy | sampled)[obj], np.where(heavy, 1, m)[obj]


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
        f"requests           {s.requests} ({s.reads} reads, {s.writes} writes; and {s.frees} frees)",
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


def plot_mrc(curve: MissRatioCurve, path: str, mode: str = "bytes", title: str = "") -> None:
    """Save a miss-ratio curve as a PNG: miss ratio against capacity, log x axis (bytes written
    human-readably in ``"bytes"`` mode)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    from cachegym.envs.evaluation import human_bytes

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.step(curve.capacities, curve.miss_ratios, where="post", label="LRU")
    ax.set_xscale("log")
    if mode == "bytes":
        ax.xaxis.set_major_locator(LogLocator(base=2, numticks=9))  # 1KiB, 32KiB, ..., not 9.77KiB
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: human_bytes(v)))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("capacity (bytes)" if mode == "bytes" else "capacity (objects)")
    ax.set_ylabel("miss ratio")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
