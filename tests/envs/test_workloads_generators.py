"""Seeded generators: determinism, meta, and the statistical shape of each."""

from __future__ import annotations

import inspect
import json
from typing import Any

import numpy as np
import pytest

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.trace import Kind, Op, Trace
from cachegym.envs.workloads import GENERATORS, generate
from cachegym.envs.workloads.stats import reuse_distances

SMALL: dict[str, dict[str, Any]] = {
    "zipf": {"n_requests": 5000, "n_objects": 500},
    "uniform": {"n_requests": 5000, "n_objects": 500},
    "scan": {"n_requests": 5000, "n_hot": 100, "scan_length": 200, "scan_every": 1000},
    "loop": {"n_requests": 5000, "n_objects": 110},
    "phase_change": {"n_requests": 5000, "n_objects": 500},
    "mixture": {"n_requests": 5000, "components": [
        {"name": "zipf", "weight": 3, "n_objects": 100}, {"name": "loop", "weight": 1, "n_objects": 50}]},
    "web_cdn": {"n_requests": 5000, "n_objects": 1000},
    "web_session": {"n_requests": 5000, "n_pages": 300, "concurrency": 8},
    "storage": {"n_requests": 5000, "n_objects": 500, "n_hot": 100, "scan_length": 200, "scan_every": 300},
    "dl_training": {"n_layers": 3, "steps": 2, "hidden": 64, "batch_tokens": 32},
    "llm_kv_cache": {"n_steps": 60},
    "embedding": {"n_batches": 10, "n_rows": 10_000},
}
COLUMNS = ("key", "size", "op", "compute_ns", "kind", "step")


def _equal(a: Trace, b: Trace) -> bool:
    return all(np.array_equal(getattr(a, c), getattr(b, c)) for c in COLUMNS)


def test_every_generator_is_covered() -> None:
    assert set(SMALL) == set(GENERATORS)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_same_seed_same_trace_and_meta(name: str) -> None:
    a, b = generate(name, seed=7, **SMALL[name]), generate(name, seed=7, **SMALL[name])
    assert len(a) > 0 and _equal(a, b)
    assert not _equal(a, generate(name, seed=8, **SMALL[name]))
    assert a.meta["generator"] == name and a.meta["params"]["seed"] == 7
    json.dumps(a.meta)  # serialisable, so it survives save/load


def test_no_global_rng_use() -> None:
    np.random.seed(1)
    a = generate("zipf", seed=2, **SMALL["zipf"])
    np.random.seed(99)
    assert _equal(a, generate("zipf", seed=2, **SMALL["zipf"]))


def test_generate_errors() -> None:
    with pytest.raises(ConfigError, match="unknown generator"):
        generate("nope")
    with pytest.raises(ConfigError, match="zipf"):
        generate("zipf", bogus=1)
    with pytest.raises(ConfigError, match="alpha"):
        generate("zipf", alpha=-1)
    for name, fn in GENERATORS.items():  # a negative length is named, whichever generator
        # takes one, called by name or directly (not NumPy's "negative dimensions")
        if "n_requests" in inspect.signature(fn).parameters:
            more = {"components": [{"name": "zipf"}]} if name == "mixture" else {}
            with pytest.raises(ConfigError, match="n_requests=-5 is invalid"):
                generate(name, n_requests=-5, **more)
            with pytest.raises(ConfigError, match="n_requests=-5 is invalid"):
                fn(n_requests=-5, **more)
    with pytest.raises(ConfigError, match="generator 'mixture'.*components"):
        generate("mixture")  # (a parameter it needs: named, not a TypeError)


def _rank_slope(key: np.ndarray, top: int) -> float:
    counts = np.sort(np.bincount(key))[::-1][:top]
    ranks = np.arange(1, len(counts) + 1)
    return float(np.polyfit(np.log(ranks), np.log(counts), 1)[0])


@pytest.mark.parametrize("alpha", [0.8, 1.0, 1.2])
def test_zipf_rank_frequency_slope(alpha: float) -> None:
    t = generate("zipf", seed=0, n_requests=200_000, n_objects=2000, alpha=alpha)
    assert _rank_slope(t.key, 100) == pytest.approx(-alpha, abs=0.1)


def test_sizes_fixed_or_drawn_per_object() -> None:
    fixed = generate("zipf", seed=0, n_requests=2000, size=512)
    assert (fixed.size == 512).all()
    drawn = generate("zipf", seed=0, n_requests=2000, size=512, size_sigma=1.0)
    assert len(np.unique(drawn.size)) > 10
    for k in np.unique(drawn.key)[:50]:
        assert len(np.unique(drawn.size[drawn.key == k])) == 1


def test_uniform_is_flat() -> None:
    t = generate("uniform", seed=0, n_requests=100_000, n_objects=100)
    counts = np.bincount(t.key, minlength=100)
    assert counts.min() > 850 and counts.max() < 1150


def test_loop_breaks_lru() -> None:
    t = generate("loop", seed=0, n_requests=1000, n_objects=110)
    np.testing.assert_array_equal(t.key[:110], t.key[110:220])
    d = reuse_distances(t)
    assert (d[d >= 0] == 109).all()  # an LRU cache of < 110 objects misses every request


def test_scan_objects_are_used_once() -> None:
    p = SMALL["scan"]
    t = generate("scan", seed=0, **p)
    scanned = t.key >= p["n_hot"]
    assert scanned.sum() == 4 * p["scan_length"]  # 5000 = 4 periods of 1200, then 200 hot
    assert len(np.unique(t.key[scanned])) == scanned.sum()


def test_phase_change_moves_the_popular_set() -> None:
    t = generate("phase_change", seed=0, n_requests=40_000, n_objects=1000, n_phases=2)
    first, second = t.key[:20_000], t.key[20_000:]
    top = lambda k: set(np.argsort(np.bincount(k, minlength=1000))[-20:])  # noqa: E731
    assert len(top(first) & top(second)) < 5


def test_mixture_weights_and_disjoint_keys() -> None:
    t = generate("mixture", seed=0, **SMALL["mixture"])
    comp = t.key >> 40
    assert set(np.unique(comp)) == {0, 1}
    assert (comp == 0).mean() == pytest.approx(0.75, abs=0.03)


def test_dl_training_pattern() -> None:
    p = SMALL["dl_training"]
    t = generate("dl_training", seed=0, **p)
    assert set(np.unique(t.kind)) == {Kind.PARAMETER, Kind.GRADIENT, Kind.OPTIMIZER_STATE, Kind.ACTIVATION}
    act = t.kind == Kind.ACTIVATION
    # per activation object: written in forward, read in backward, then freed
    obj = t.object_ids()
    for o in np.unique(obj[act]):
        assert "".join("RWF"[x] for x in t.op[obj == o]) == "WRF"
    # gradients: written in backward before the optimizer reads them; freed at the end
    for o in np.unique(obj[t.kind == Kind.GRADIENT]):
        assert "".join("RWF"[x] for x in t.op[obj == o]) == "WRF"
    params = t.kind == Kind.PARAMETER
    assert t.size[params].min() > 0 and (t.compute_ns[params] > 0).any()
    assert set(np.unique(t.step)) == {0, 1}
    # optimizer state is as large as the parameters (Adam: two per layer)
    ws = {k: t.size[t.kind == k].sum() for k in (Kind.PARAMETER, Kind.OPTIMIZER_STATE)}
    assert ws[Kind.OPTIMIZER_STATE] > 0


def test_llm_kv_cache_pattern() -> None:
    t = generate("llm_kv_cache", seed=0, n_steps=80, max_running=4, block_tokens=16,
                 kv_bytes_per_token=1024, shared_prefix_fraction=0.5)
    assert (t.kind == Kind.KV_BLOCK).all() and (t.size == 16 * 1024).all()
    assert (t.op == Op.FREE).any()
    prefix = t.key >= 1 << 40
    assert prefix.any() and not (t.op[prefix] == Op.FREE).any()
    # every decode step reads each running request's blocks, so reads dominate writes
    assert (t.op == Op.READ).sum() > 3 * (t.op == Op.WRITE).sum()
    # paged: live own blocks never exceed max_running requests' worth
    own = ~prefix
    obj = t.object_ids()
    live = np.cumsum(np.where(t.op[own] == Op.FREE, -1, 0) + _firsts(obj[own]))
    assert live.max() <= 4 * (4096 // 16 + 2048 // 16 + 2)


def _firsts(obj: np.ndarray) -> np.ndarray:
    f = np.zeros(len(obj), np.int64)
    f[np.unique(obj, return_index=True)[1]] = 1
    return f


def test_embedding_rows_zipf_and_write_back() -> None:
    t = generate("embedding", seed=0, n_batches=50, batch_size=256, pooling=4, n_rows=20_000, alpha=1.0)
    assert (t.kind == Kind.EMBEDDING_ROW).all()
    assert (t.op == Op.READ).sum() == (t.op == Op.WRITE).sum()
    # popularity: the hottest rows appear in (almost) every batch, the tail rarely
    counts = np.sort(np.bincount(t.key[t.op == Op.READ]))[::-1]
    assert counts[0] == 50 and np.median(counts) <= 2


def _one_size_per_object(t: Trace) -> bool:
    order = np.argsort(t.key, kind="stable")
    k, sz = t.key[order], t.size[order]
    same = k[1:] == k[:-1]
    return bool((sz[1:][same] == sz[:-1][same]).all())


@pytest.mark.parametrize("name", ["web_cdn", "web_session"])
def test_web_sizes_heavy_tailed_fixed_per_object(name: str) -> None:
    t = generate(name, seed=3, n_requests=50_000, max_size=64 << 20)
    assert _one_size_per_object(t)
    assert t.size.min() >= 1024 and t.size.max() <= 64 << 20
    _, first = np.unique(t.key, return_index=True)
    sizes = t.size[first]
    # a heavy tail: objects of 1 MiB and more are rare but hold a large share of the bytes
    big = sizes >= 1 << 20
    assert 0 < big.mean() < 0.1 and sizes[big].sum() > 0.3 * sizes.sum()


def test_web_cdn_one_hit_wonders_and_read_mostly() -> None:
    t = generate("web_cdn", seed=0, n_requests=40_000, n_objects=5_000, one_hit_fraction=0.3)
    _, counts = np.unique(t.key, return_counts=True)
    once = int((counts == 1).sum())
    assert once >= 0.3 * 40_000 * 0.9  # the one-hit objects, plus the catalogue's rarely asked
    assert once > 0.5 * len(counts)  # most objects are one-hit wonders, as in CDN traces
    assert 0 < (t.op == Op.WRITE).mean() < 0.03 and not (t.op == Op.FREE).any()
    none = generate("web_cdn", seed=0, n_requests=40_000, n_objects=5_000, one_hit_fraction=0.0)
    assert (np.unique(none.key, return_counts=True)[1] == 1).sum() < 0.5 * once


def test_web_cdn_popularity_churns() -> None:
    def overlap(churn: float) -> int:
        t = generate("web_cdn", seed=0, n_requests=60_000, n_objects=3_000, churn=churn,
                     one_hit_fraction=0.0)
        top = lambda k: set(np.argsort(np.bincount(k, minlength=t.key.max() + 1))[-50:])  # noqa: E731
        return len(top(t.key[:15_000]) & top(t.key[-15_000:]))

    assert overlap(0.0) > 35 and overlap(2.0) == 0


def test_web_session_bursts_and_revisits() -> None:
    def near_reuse(**kw: Any) -> float:
        t = generate("web_session", seed=0, n_requests=30_000, n_pages=2_000, n_shared=50, **kw)
        d = reuse_distances(t)
        return float((d[d >= 0] < 100).mean())

    # a page view requests its objects in one burst: with one session at a time, an own object
    # (key >= n_shared) is mostly followed by the next of its page
    t = generate("web_session", seed=0, n_requests=20_000, n_pages=500, n_shared=50, concurrency=1)
    own = t.key[:-1] >= 50
    assert (t.key[1:][own] == t.key[:-1][own] + 1).mean() > 0.6
    assert (t.key < 50).any()  # the shared assets
    # revisits within sessions reuse objects soon after; many concurrent sessions spread them
    assert near_reuse(revisit=0.8, concurrency=4) > near_reuse(revisit=0.0, concurrency=4) + 0.1
    assert near_reuse(revisit=0.8, concurrency=4) > near_reuse(revisit=0.8, concurrency=256)


def test_storage_blocks_fixed_sizes_scans_and_writes() -> None:
    t = generate("storage", seed=4, n_requests=40_000, n_objects=4_000, write_fraction=0.25)
    keys, first, counts = np.unique(t.key, return_index=True, return_counts=True)
    per_key = dict(zip(keys.tolist(), t.size[first].tolist()))
    assert all(per_key[k] == s for k, s in zip(t.key.tolist(), t.size.tolist()))  # fixed per object
    sizes = t.size[first]
    assert sizes.min() >= 512 and sizes.max() <= 65_536
    # log-uniform over 2^9..2^16: about a seventh of the objects in each octave
    octave = np.floor(np.log2(sizes)).astype(int)
    assert np.all(np.abs(np.bincount(octave, minlength=17)[9:16] / len(sizes) - 1 / 7) < 0.03)
    assert (counts == 1).sum() > 0.2 * len(keys)  # the scans' blocks, read once
    assert abs((t.op == Op.WRITE).mean() - 0.25) < 0.02
    assert (generate("storage", seed=4, n_requests=1000).op == 0).all()  # reads by default
    assert len(generate("storage", seed=4, n_requests=0)) == 0
    narrow = generate("storage", seed=4, n_requests=2000, min_size=4096, max_size=4096)
    assert (narrow.size == 4096).all()


@pytest.mark.parametrize(("name", "params", "match"), [
    ("storage", {"scan_weight": 1.5}, "scan_weight"),
    ("storage", {"n_hot": 0}, "n_hot"),
    ("storage", {"max_size": 2**60}, "2[*][*]48"),
    ("storage", {"min_size": 4096, "max_size": 512}, "min_size"),
    ("storage", {"min_size": 0}, "min_size"),
    ("storage", {"n_objects": 0}, "n_objects"),
    ("web_cdn", {"one_hit_fraction": 1.0}, "one_hit_fraction"),
    ("web_cdn", {"churn": -0.5}, "churn"),
    ("web_cdn", {"alpha": -1}, "alpha"),
    ("web_cdn", {"n_objects": 0}, "n_objects"),
    ("web_cdn", {"tail_fraction": 1.5}, "tail_fraction"),
    ("web_cdn", {"max_size": 512}, "min_size"),
    ("web_cdn", {"write_fraction": 2}, "write_fraction"),
    ("web_session", {"objects_per_page": 0.5}, "objects_per_page"),
    ("web_session", {"shared_per_page": 5, "n_shared": 2}, "shared_per_page"),
    ("web_session", {"revisit": 1.0}, "revisit"),
    ("web_session", {"concurrency": 0}, "concurrency"),
    ("web_session", {"pages_per_session": 0}, "pages_per_session"),
    ("web_session", {"size_sigma": -1}, "size_sigma"),
])
def test_web_bad_params_raise(name: str, params: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        generate(name, seed=0, n_requests=100, **params)


@pytest.mark.parametrize("name, params, match", [
    ("zipf", {"alpha": "abc"}, "parameter alpha must be a number .* got 'abc'"),
    ("zipf", {"n_requests": "abc"}, "parameter n_requests must be a whole number .* got 'abc'"),
    ("dl_training", {"n_layers": 2.5}, "parameter n_layers must be a whole number .* got 2.5"),
    ("zipf", {"n_objects": True}, "parameter n_objects must be a whole number"),
])
def test_a_parameter_of_the_wrong_type_is_named(name: str, params: dict[str, Any], match: str) -> None:
    """trace.params.alpha=abc failed deep in the generator ("'>=' not supported between
    instances of 'str' and 'int'"), naming neither (a helper's audit)."""
    with pytest.raises(ConfigError, match=f"generator {name!r}: {match}"):
        generate(name, **params)


def test_a_generator_that_makes_no_requests_is_refused_as_a_trace() -> None:
    """trace.params.n_requests=0 replayed nothing, at a capacity of 1 byte, and exited 0."""
    from cachegym.envs.config import load_traces

    with pytest.raises(ConfigError, match="trace.params: generator 'zipf' made no requests with "
                                          ".*n_requests"):
        load_traces(generator="zipf", params={"n_requests": 0})
