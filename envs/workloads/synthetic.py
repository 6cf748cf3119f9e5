"""Seeded synthetic cache workloads: zipf, uniform, scan, loop, mixture, phase change, the
web-like families (a CDN edge cache, web sessions) and a storage-like (block I/O) family.

Every generator takes ``seed`` and draws from ``np.random.default_rng(seed)`` only (no global
RNG), so the same seed gives the same trace (given the same NumPy version). Each returns a
:class:`Trace` whose ``meta`` records ``{"generator": name, "params": {...}}``.

Object sizes: ``size`` bytes for every object, or, with ``size_sigma > 0``, drawn once per
object from a log-normal around ``size`` (median ``size``, clipped to ``[1, 64 * size]``); the
web-like families draw theirs once per object from :func:`web_sizes` (a heavy tail), the
storage-like family log-uniform in 512 B - 64 KiB.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.trace import MAX_SIZE, Op, Trace

__all__ = ["zipf", "uniform", "scan", "loop", "mixture", "phase_change", "web_cdn", "web_session",
           "storage", "zipf_ranks", "object_sizes", "web_sizes", "make_trace"]

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
    _check(n_requests >= 0, "n_requests", n_requests, ">= 0")
    _check(n_objects >= 1, "n_objects", n_objects, ">= 1")
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
    _check(n_requests >= 0, "n_requests", n_requests, ">= 0")
    _check(n_objects >= 1, "n_objects", n_objects, ">= 1")
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
    _check(n_requests >= 0, "n_requests", n_requests, ">= 0")
    _check(n_objects >= 1, "n_objects", n_objects, ">= 1")
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
    _check(n_requests >= 0, "n_requests", n_requests, ">= 0")
    _check(n_hot >= 1, "n_hot", n_hot, ">= 1")
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
    _check(n_requests >= 0, "n_requests", n_requests, ">= 0")
    _check(n_objects >= 1, "n_objects", n_objects, ">= 1")
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
    _check(n_requests >= 0, "n_requests", n_requests, ">= 0")
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


# ---------------------------------------------------------------------- web-like families
_KIB, _MIB = 1 << 10, 1 << 20


def web_sizes(
    rng: np.random.Generator,
    n_objects: int,
    size: int = 32 * _KIB,
    size_sigma: float = 1.5,
    tail_fraction: float = 0.02,
    tail_size: int = _MIB,
    tail_shape: float = 1.2,
    min_size: int = _KIB,
    max_size: int = 100 * _MIB,
) -> np.ndarray:
    """One size per web object: a log-normal body (median ``size``, ``size_sigma``) and, for a
    ``tail_fraction`` of the objects, a Pareto tail (scale ``tail_size``, shape ``tail_shape``:
    videos, software downloads), clipped to ``[min_size, max_size]`` -- the body-and-tail shape
    of web object sizes (Barford & Crovella, SIGMETRICS 1998; Berger et al., AdaptSize, NSDI
    2017)."""
    _check(size >= 1, "size", size, ">= 1")
    _check(size_sigma >= 0, "size_sigma", size_sigma, ">= 0")
    _check(0 <= tail_fraction <= 1, "tail_fraction", tail_fraction, "in [0, 1]")
    _check(tail_size >= 1, "tail_size", tail_size, ">= 1")
    _check(tail_shape > 0, "tail_shape", tail_shape, "> 0")
    _check(1 <= min_size <= max_size, "min_size", (min_size, max_size), "1 <= min_size <= max_size")
    body = size * rng.lognormal(0.0, size_sigma, n_objects)
    tail = tail_size * (1.0 + rng.pareto(tail_shape, n_objects))
    drawn = np.where(rng.random(n_objects) < tail_fraction, tail, body)
    return np.clip(np.round(drawn), min_size, max_size).astype(np.int64)


def web_cdn(
    n_requests: int = 100_000,
    n_objects: int = 20_000,
    alpha: float = 0.8,
    one_hit_fraction: float = 0.25,
    churn: float = 1.0,
    size: int = 32 * _KIB,
    size_sigma: float = 1.5,
    tail_fraction: float = 0.02,
    max_size: int = 100 * _MIB,
    write_fraction: float = 0.01,
    *,
    seed: int = 0,
) -> Trace:
    """A CDN edge cache: Zipf(``alpha``) popularity over a catalogue of ``n_objects``
    (0.6-1.0 in web and CDN traces: Breslau et al., INFOCOM 1999), web object sizes
    (:func:`web_sizes`, fixed per object, 1 KiB - ``max_size``), one-hit wonders and popularity
    churn. Read-mostly: a ``write_fraction`` of the catalogue requests are updates.

    One-hit wonders: a ``one_hit_fraction`` of the requests go to objects requested once and
    never again (most of a CDN's objects are: Maggs & Sitaraman, SIGCOMM CCR 2015), spread over
    the trace. Churn: objects arrive in a stream and the catalogue is the window of the
    ``n_objects`` newest; it slides forward by ``churn * n_objects`` objects over the trace (new
    objects keep arriving, the oldest leave), and in the older half of the window an object's
    popularity fades linearly to 0 as it nears leaving (content popularity decays with age:
    Traverso et al., SIGCOMM CCR 2013). Each object's Zipf rank is drawn once (uniformly over
    ``n_objects`` ranks), so every window holds a Zipf-like mix. Keys: catalogue objects by
    arrival (0, 1, ...), then the one-hit objects."""
    params = dict(locals())
    _check(n_requests >= 0, "n_requests", n_requests, ">= 0")
    _check(n_objects >= 1, "n_objects", n_objects, ">= 1")
    _check(alpha >= 0, "alpha", alpha, ">= 0")
    _check(0 <= one_hit_fraction < 1, "one_hit_fraction", one_hit_fraction, "in [0, 1)")
    _check(churn >= 0, "churn", churn, ">= 0")
    rng = np.random.default_rng(seed)
    n_stream = n_objects + int(np.ceil(churn * n_objects))
    rank = rng.integers(0, n_objects, n_stream)
    weight = (rank + 1.0) ** -alpha
    one_hit = rng.random(n_requests) < one_hit_fraction
    n_cat = n_requests - int(one_hit.sum())
    # the catalogue requests, in epochs over which the window holds still
    n_epochs = max(1, min(n_cat, 256))
    bounds = np.linspace(0, n_cat, n_epochs + 1).round().astype(np.int64)
    pos = np.arange(n_objects, dtype=np.float64)
    fade = np.minimum(1.0, 2.0 * (pos + 1) / n_objects)  # position 0: the oldest
    cat = np.empty(n_cat, np.int64)
    for e in range(n_epochs):
        lo, hi = bounds[e], bounds[e + 1]
        start = int(churn * n_objects * (lo + hi) / 2 / max(n_cat, 1))
        cdf = np.cumsum(weight[start:start + n_objects] * fade)
        u = rng.random(hi - lo) * cdf[-1]
        cat[lo:hi] = start + np.minimum(np.searchsorted(cdf, u, side="right"), n_objects - 1)
    key = np.empty(n_requests, np.int64)
    key[~one_hit] = cat
    key[one_hit] = n_stream + np.arange(n_requests - n_cat)
    sizes = web_sizes(rng, n_stream + n_requests - n_cat, size, size_sigma, tail_fraction,
                      max_size=max_size)
    op = np.where(one_hit, np.uint8(Op.READ), _ops(rng, n_requests, write_fraction))
    return make_trace("web_cdn", params, key, sizes[key], op.astype(np.uint8))


def web_session(
    n_requests: int = 100_000,
    n_pages: int = 5_000,
    alpha: float = 0.9,
    objects_per_page: float = 8.0,
    n_shared: int = 200,
    shared_per_page: int = 3,
    pages_per_session: float = 5.0,
    revisit: float = 0.3,
    concurrency: int = 32,
    size: int = 16 * _KIB,
    size_sigma: float = 1.5,
    tail_fraction: float = 0.01,
    max_size: int = 100 * _MIB,
    write_fraction: float = 0.0,
    *,
    seed: int = 0,
) -> Trace:
    """A web server's or proxy's cache under user sessions (the SURGE model: Barford &
    Crovella, SIGMETRICS 1998): temporal locality in bursts. A session views pages picked by
    Zipf(``alpha``) popularity over ``n_pages`` -- or, with probability ``revisit``, a page it
    viewed already (back navigation) -- ``pages_per_session`` views on average (geometric); a
    view requests the page's objects in a burst: its own (``1 + Poisson(objects_per_page -
    1)``, fixed per page) and ``shared_per_page`` of ``n_shared`` site-wide assets (style
    sheets, scripts, logos; Zipf(1) popular, fixed per page). ``concurrency`` sessions run at
    once, their requests interleaved at random; a finished session is replaced by a new one.
    Sizes: :func:`web_sizes`, fixed per object (median ``size``). Read-mostly. Keys: the
    shared assets first, then the pages' objects page by page."""
    params = dict(locals())
    _check(n_requests >= 0, "n_requests", n_requests, ">= 0")
    _check(n_pages >= 1, "n_pages", n_pages, ">= 1")
    _check(objects_per_page >= 1, "objects_per_page", objects_per_page, ">= 1")
    _check(n_shared >= 0, "n_shared", n_shared, ">= 0")
    _check(0 <= shared_per_page <= n_shared, "shared_per_page", shared_per_page,
           f"in [0, n_shared={n_shared}]")
    _check(pages_per_session >= 1, "pages_per_session", pages_per_session, ">= 1")
    _check(0 <= revisit < 1, "revisit", revisit, "in [0, 1)")
    _check(concurrency >= 1, "concurrency", concurrency, ">= 1")
    rng = np.random.default_rng(seed)
    own = 1 + rng.poisson(objects_per_page - 1, n_pages)
    first_own = n_shared + np.concatenate([[0], np.cumsum(own)[:-1]])
    shared = (zipf_ranks(rng, n_pages * shared_per_page, n_shared, 1.0).reshape(n_pages, shared_per_page)
              if shared_per_page else np.zeros((n_pages, 0), np.int64))
    pages = [np.concatenate([shared[p], first_own[p] + np.arange(own[p])]) for p in range(n_pages)]
    perm = rng.permutation(n_pages)  # popularity rank -> page
    sizes = web_sizes(rng, n_shared + int(own.sum()), size, size_sigma, tail_fraction,
                      max_size=max_size)
    slot = rng.integers(0, concurrency, n_requests)
    # fresh page views in popularity order, drawn up front (a view requests >= 1 object, so
    # the slots use at most n_requests + concurrency of them)
    fresh = iter(perm[zipf_ranks(rng, n_requests + concurrency, n_pages, alpha)].tolist())
    key = np.empty(n_requests, np.int64)
    for s in range(concurrency):
        rows = np.flatnonzero(slot == s)
        stream: list[np.ndarray] = []
        got = 0
        while got < len(rows):  # whole sessions, one after the other, until the slot's share
            viewed: list[int] = []
            for _ in range(int(rng.geometric(1.0 / pages_per_session))):
                revisits = bool(viewed) and rng.random() < revisit
                p = viewed[int(rng.integers(len(viewed)))] if revisits else next(fresh)
                viewed.append(p)
                stream.append(pages[p])
                got += len(pages[p])
        if stream:
            key[rows] = np.concatenate(stream)[:len(rows)]
    return make_trace("web_session", params, key, sizes[key], _ops(rng, n_requests, write_fraction))


# ---------------------------------------------------------------------- storage-like family
def storage(
    n_requests: int = 100_000,
    n_objects: int = 20_000,
    alpha: float = 0.8,
    scan_weight: float = 0.3,
    n_hot: int = 2_000,
    scan_length: int = 3_000,
    scan_every: int = 2_000,
    min_size: int = 512,
    max_size: int = 65_536,
    write_fraction: float = 0.0,
    *,
    seed: int = 0,
) -> Trace:
    """Block-I/O-like, as libCacheSim's CloudPhysics traces: Zipf(``alpha``) over ``n_objects``
    blocks mixed (``scan_weight`` of the requests) with a scan-heavy component (a Zipf(0.9) hot
    set of ``n_hot`` blocks interrupted every ``scan_every`` requests by ``scan_length`` blocks
    read once, as :func:`scan`); each object's size is fixed, log-uniform in ``min_size`` -
    ``max_size`` bytes; a ``write_fraction`` of the requests are writes."""
    params = dict(locals())
    _check(n_requests >= 0, "n_requests", n_requests, ">= 0")
    _check(n_objects >= 1, "n_objects", n_objects, ">= 1")
    _check(n_hot >= 1, "n_hot", n_hot, ">= 1")
    _check(0 <= scan_weight <= 1, "scan_weight", scan_weight, "in [0, 1]")
    _check(1 <= min_size <= max_size <= MAX_SIZE, "min_size, max_size", (min_size, max_size),
           "1 <= min_size <= max_size <= 2**48")
    t = mixture([{"name": "zipf", "weight": 1.0 - scan_weight, "n_objects": n_objects, "alpha": alpha},
                 {"name": "scan", "weight": scan_weight, "n_hot": n_hot, "alpha": 0.9,
                  "scan_length": scan_length, "scan_every": scan_every}], n_requests, seed=seed)
    rng = np.random.default_rng(seed)
    blocks, obj = np.unique(t.key, return_inverse=True)
    per_obj = (2.0 ** rng.uniform(np.log2(min_size), np.log2(max_size), len(blocks))).astype(np.int64)
    return make_trace("storage", params, t.key, per_obj[obj], _ops(rng, n_requests, write_fraction))
