"""Seeded synthetic cache workloads: zipf, uniform, scan, loop, mixture, phase change.

Every generator takes ``seed`` and draws from ``np.random.default_rng(seed)`` only (no global
RNG), so the same seed gives the same trace (given the same NumPy version). Each returns a
:class:`Trace` whose ``meta`` records ``{"generator": name, "params": {...}}``.

Object sizes: ``size`` bytes for every object, or, with ``size_sigma > 0``, drawn once per
object from a log-normal around ``size`` (median ``size``, clipped to ``[1, 64 * size]``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.trace import Op, Trace

__all__ = ["zipf", "uniform", "scan", "loop", "mixture", "phase_change", "zipf_ranks",
           "object_sizes", "make_trace"]

_COMPONENT_STRIDE = 1 << 40
"""Key offset between mixture components, so their objects are disjoint."""


# ---------------------------------------------------------------------- shared helpers
def zipf_ranks(rng: np.random.Generator, n: int, n_objects: int, alpha: float) -> np.ndarray:
    """``n`` draws of 0-based popularity ranks with P(rank r) proportional to (r+1)^-alpha."""
    _check(n_objects >= 1, "n_objects", n_objects, ">= 1")
    _check(alpha >= 0, "alpha", alpha, ">= 0")
    cdf = np.cumsum(np.arange(1, n_objects + 1, dtype=np.float64) ** -alpha)
    u = rng.random(n) * cdf[-1]
    return np.minimum(np.searchsorted(cdf, u, side="right"), n_objects - 1)


def object_sizes(rng: np.random.Generator, n_objects: int, size: int, size_sigma: float) -> np.ndarray:
    """One size per object: fixed, or log-normal around ``size`` when ``size_sigma > 0``."""
    _check(size >= 1, "size", size, ">= 1")
    _check(size_sigma >= 0, "size_sigma", size_sigma, ">= 0")
    if size_sigma == 0:
        return np.full(n_objects, size, np.int64)
    drawn = np.round(size * rng.lognormal(0.0, size_sigma, n_objects))
    return np.clip(drawn, 1, 64 * size).astype(np.int64)


def make_trace(
    name: str,
    params: Mapping[str, Any],
    key: np.ndarray,
    size: np.ndarray,
    op: np.ndarray | None = None,
    **cols: Any,
) -> Trace:
    """Build a generator's trace with ``meta = {"generator": name, "params": params}``."""
    meta = {"generator": name, "params": _jsonable(params)}
    return Trace.from_arrays(key, size, op, meta=meta, name=name, **cols)


def _ops(rng: np.random.Generator, n: int, write_fraction: float) -> np.ndarray:
    _check(0 <= write_fraction <= 1, "write_fraction", write_fraction, "in [0, 1]")
    if write_fraction == 0:
        return np.zeros(n, np.uint8)
    return (rng.random(n) < write_fraction).astype(np.uint8) * np.uint8(Op.WRITE)


def _check(ok: bool, name: str, value: Any, want: str) -> None:
    if not ok:
        raise ConfigError(f"generator parameter {name}={value!r} is invalid: must be {want}")


def _jsonable(params: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in params.items():
        if isinstance(v, np.generic):
            v = v.item()
        elif isinstance(v, Mapping):
            v = _jsonable(v)
        elif isinstance(v, (list, tuple)):
            v = [_jsonable(x) if isinstance(x, Mapping) else x for x in v]
        out[k] = v
    return out


# ---------------------------------------------------------------------- generators
def zipf(
    n_requests: int = 100_000,
    n_objects: int = 10_000,
    alpha: float = 1.0,
    size: int = 4096,
    size_sigma: float = 0.0,
    write_fraction: float = 0.0,
    *,
    seed: int = 0,
) -> Trace:
    """Independent requests with Zipf(alpha) popularity over ``n_objects``; the rank -> key
    mapping is a random permutation, so popularity is not key order."""
    params = dict(locals())
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n_objects)
    sizes = object_sizes(rng, n_objects, size, size_sigma)
    key = perm[zipf_ranks(rng, n_requests, n_objects, alpha)]
    return make_trace("zipf", params, key, sizes[key], _ops(rng, n_requests, write_fraction))


def uniform(
    n_requests: int = 100_000,
    n_objects: int = 10_000,
    size: int = 4096,
    size_sigma: float = 0.0,
    write_fraction: float = 0.0,
    *,
    seed: int = 0,
) -> Trace:
    """Independent requests, every object equally likely."""
    params = dict(locals())
    rng = np.random.default_rng(seed)
    sizes = object_sizes(rng, n_objects, size, size_sigma)
    key = rng.integers(0, n_objects, n_requests)
    return make_trace("uniform", params, key, sizes[key], _ops(rng, n_requests, write_fraction))


def loop(
    n_requests: int = 100_000,
    n_objects: int = 1_100,
    size: int = 4096,
    size_sigma: float = 0.0,
    *,
    seed: int = 0,
) -> Trace:
    """Cyclic access to ``n_objects`` in a fixed order: LRU misses on every request once the
    pool holds fewer objects (size the pool at ~``n_objects / 1.1`` to break LRU; Belady keeps
    most of the loop)."""
    params = dict(locals())
    rng = np.random.default_rng(seed)
    order = rng.permutation(n_objects)
    sizes = object_sizes(rng, n_objects, size, size_sigma)
    key = order[np.arange(n_requests) % n_objects]
    return make_trace("loop", params, key, sizes[key])


def scan(
    n_requests: int = 100_000,
    n_hot: int = 1_000,
    alpha: float = 0.8,
    scan_length: int = 2_000,
    scan_every: int = 10_000,
    size: int = 4096,
    size_sigma: float = 0.0,
    *,
    seed: int = 0,
) -> Trace:
    """A Zipf hot set of ``n_hot`` objects, interrupted every ``scan_every`` requests by a
    sequential scan of ``scan_length`` fresh objects that are never reused (scan pollution:
    LRU flushes the hot set, scan-resistant policies keep it)."""
    params = dict(locals())
    _check(scan_every >= 1, "scan_every", scan_every, ">= 1")
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n_hot)
    hot_sizes = object_sizes(rng, n_hot, size, size_sigma)
    period = scan_every + scan_length
    pos = np.arange(n_requests)
    in_scan = pos % period >= scan_every
    n_scan = int(in_scan.sum())
    key = np.empty(n_requests, np.int64)
    sz = np.empty(n_requests, np.int64)
    hot = perm[zipf_ranks(rng, n_requests - n_scan, n_hot, alpha)]
    key[~in_scan], sz[~in_scan] = hot, hot_sizes[hot]
    key[in_scan] = n_hot + np.arange(n_scan)  # each scanned object is new
    sz[in_scan] = object_sizes(rng, n_scan, size, size_sigma)
    return make_trace("scan", params, key, sz)


def phase_change(
    n_requests: int = 100_000,
    n_objects: int = 10_000,
    alpha: float = 1.0,
    n_phases: int = 4,
    size: int = 4096,
    size_sigma: float = 0.0,
    *,
    seed: int = 0,
) -> Trace:
    """Zipf requests whose popular set moves: each of ``n_phases`` equal phases draws a fresh
    rank -> object permutation, so yesterday's hot objects turn cold (adaptation matters)."""
    params = dict(locals())
    _check(n_phases >= 1, "n_phases", n_phases, ">= 1")
    rng = np.random.default_rng(seed)
    sizes = object_sizes(rng, n_objects, size, size_sigma)
    phase = np.arange(n_requests) * n_phases // max(n_requests, 1)
    ranks = zipf_ranks(rng, n_requests, n_objects, alpha)
    perms = np.stack([rng.permutation(n_objects) for _ in range(n_phases)])
    key = perms[phase, ranks]
    return make_trace("phase_change", params, key, sizes[key])


def mixture(
    components: Sequence[Mapping[str, Any]],
    n_requests: int = 100_000,
    *,
    seed: int = 0,
    registry: Mapping[str, Callable[..., Trace]] | None = None,
) -> Trace:
    """Interleave generators: each request comes from component ``i`` with probability
    proportional to its ``weight``. A component is ``{"name": ..., "weight": ..., **params}``
    (``"generator"`` is accepted for ``"name"``, as in the environments' trace specs);
    components get disjoint keys (offset by ``i * 2**40``) and their own derived seeds."""
    params = {"components": [dict(c) for c in components], "n_requests": n_requests, "seed": seed}
    from cachegym.envs.workloads.registry import GENERATORS

    reg = GENERATORS if registry is None else registry
    _check(len(components) >= 1, "components", components, "a non-empty list")
    rng = np.random.default_rng(seed)
    weights = np.array([float(c.get("weight", 1.0)) for c in components])
    _check(bool((weights >= 0).all() and weights.sum() > 0), "weight", weights.tolist(), ">= 0, not all 0")
    which = rng.choice(len(components), size=n_requests, p=weights / weights.sum())
    child_seeds = np.random.SeedSequence(seed).spawn(len(components))
    key = np.empty(n_requests, np.int64)
    size = np.empty(n_requests, np.int64)
    op = np.empty(n_requests, np.uint8)
    for i, comp in enumerate(components):
        rows = np.flatnonzero(which == i)
        sub_params = {k: v for k, v in comp.items() if k not in ("name", "generator", "weight")}
        name = str(comp.get("name", comp.get("generator")))  # "generator" as in env trace specs
        if name not in reg:
            raise ConfigError(f"mixture component {i}: unknown generator {name!r}; choose from {sorted(reg)}")
        sub_seed = int(child_seeds[i].generate_state(1)[0])
        t = reg[name](n_requests=len(rows), seed=sub_seed, **sub_params)
        if (t.op == Op.FREE).any() or len(t) != len(rows):
            raise ConfigError(f"mixture component {name!r} must be a request-stream generator "
                              "(no frees, exactly n_requests rows)")
        key[rows] = t.key + i * _COMPONENT_STRIDE
        size[rows], op[rows] = t.size, t.op
    return make_trace("mixture", params, key, size, op)
