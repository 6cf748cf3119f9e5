"""Prefetchers: what they return, and what they do to a pool.

* Markov learns a repeated sequence and turns its misses into prefetch hits;
* stride detects a constant key stride;
* the lookahead oracle returns the next known, non-resident objects of the future trace, and
  under a cost preset its prefetches land in time (stall collapses, few late prefetches).
"""

from __future__ import annotations

import numpy as np
import pytest

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.pool import Pool
from cachegym.allocator.trace import Op, Trace
from cachegym.envs.workloads import synthetic
from cachegym.policies.base import PrefetchPolicy
from cachegym.policies.lru import LRU
from cachegym.policies.prefetch import (
    LookaheadPrefetcher,
    MarkovPrefetcher,
    NoPrefetch,
    StridePrefetcher,
)
from cachegym.policies.registry import PREFETCH_NAMES, make_prefetch


def _feed(p: PrefetchPolicy, keys: list[int], pool: Pool | None = None) -> list[list[int]]:
    pool = pool or Pool(1 << 20, LRU(), placement="bytes")
    out = []
    for k in keys:
        pool.access(k, 1)
        out.append(list(p.prefetch(pool.view, k)))
    return out


def test_markov_returns_last_successor() -> None:
    out = _feed(MarkovPrefetcher(), [1, 2, 3, 1, 5, 1])
    assert out[3] == [2]  # 1 was followed by 2
    assert out[5] == [5]  # ... and most recently by 5
    wide = _feed(MarkovPrefetcher(width=2), [1, 2, 3, 1, 5, 1])
    assert wide[5] == [5, 2]


def test_markov_follows_the_chain() -> None:
    out = _feed(MarkovPrefetcher(depth=3), [1, 2, 3, 4, 9, 1])
    assert out[-1] == [2, 3, 4]


def test_markov_forgets_beyond_max_entries() -> None:
    p = MarkovPrefetcher(max_entries=2)
    _feed(p, [1, 2, 3, 4])
    assert _feed(p, [1])[0] == []  # 1 -> 2 was the oldest entry


def _loop(n_objects: int, passes: int, seed: int = 0) -> Trace:
    return synthetic.loop(n_objects * passes, n_objects=n_objects, size=4096, seed=seed)


def test_markov_learns_a_repeated_sequence() -> None:
    """A loop larger than the pool: LRU alone misses every access; after one pass the Markov
    prefetcher brings each next object in ahead of its use."""
    trace = _loop(60, 6)
    cap = 30 * 4096
    plain = Pool(cap, LRU(), placement="bytes").replay(trace)
    assert plain.hits == 0
    st = Pool(cap, LRU(), prefetcher=MarkovPrefetcher(depth=2), placement="bytes").replay(trace)
    later = len(trace) - 60  # accesses after the first pass
    assert st.prefetch_hits >= 0.9 * later
    assert st.misses <= 60 + 0.1 * later


def test_stride_detects_constant_stride() -> None:
    out = _feed(StridePrefetcher(degree=2), [10, 14, 18, 22])
    assert out[0] == [] and out[1] == []  # stride seen once: not confirmed yet
    assert out[2] == [22, 26]
    assert out[3] == [26, 30]
    nxt = _feed(StridePrefetcher(degree=3, confirm=0), [5])
    assert nxt[0] == [6, 7, 8]  # plain next-N before any stride is known


def test_stride_prefetches_a_sequential_scan() -> None:
    keys = list(range(200)) * 3
    trace = Trace.from_arrays(np.array(keys), 4096)
    cap = 50 * 4096
    plain = Pool(cap, LRU(), placement="bytes").replay(trace)
    st = Pool(cap, LRU(), prefetcher=StridePrefetcher(degree=2),
              placement="bytes").replay(trace)
    later = len(keys) - 200  # the first pass touches unknown keys, which nobody can prefetch
    assert plain.misses == len(keys)
    assert st.prefetch_hits > 0.95 * later
    assert st.misses <= 200 + 0.05 * later


def test_lookahead_returns_next_known_nonresident_objects() -> None:
    keys = [1, 2, 3, 1, 4, 2, 5, 3]
    trace = Trace.from_arrays(np.array(keys), 1)
    p = LookaheadPrefetcher(trace, depth=2)
    pool = Pool(3, LRU(), placement="bytes")
    seen = []
    for k in keys:
        pool.access(k, 1)
        seen.append(list(p.prefetch(pool.view, k)))
    # after row 3 (key 1) resident are {2, 3, 1}: next rows touch 4 (unknown), 2, 5, 3
    assert seen[3] == []
    pool2 = Pool(2, LRU(), placement="bytes")
    for k in keys[:5]:
        pool2.access(k, 1)
    # resident {1, 4}; the future (rows 5..) touches 2, 5 (unknown), 3: held from now on, 3
    # would take the room of 2 or 5, both used before it (do no harm: a pool of 2 holds 2 and 5)
    assert list(p.prefetch(pool2.view, 4)) == [2]


def test_lookahead_skips_freed_objects() -> None:
    key = np.array([1, 2, 3, 2, 3])
    op = np.array([Op.READ, Op.READ, Op.READ, Op.FREE, Op.READ], np.uint8)
    trace = Trace.from_arrays(key, 1, op)
    pool = Pool(1, LRU(), placement="bytes")
    for k in (1, 2, 3):
        pool.access(k, 1)
    # at row 2: 2 is freed before any use, 3 is resident
    assert list(LookaheadPrefetcher(trace, depth=4).prefetch(pool.view, 3)) == []


def test_lookahead_prefetches_are_timely_under_a_cost_preset() -> None:
    """4 KiB objects over a PCIe 4 link take ~8 us to copy; with 20 us of compute per access
    the oracle's prefetches (issued one access ahead) land before their use."""
    trace = _loop(200, 5)
    trace = Trace.from_arrays(trace.key, trace.size, compute_ns=np.full(len(trace), 20_000))
    cap = 100 * 4096
    base = Pool(cap, LRU(), cost="a100_pcie4", placement="bytes").replay(trace)
    st = Pool(cap, LRU(), prefetcher=LookaheadPrefetcher(trace, depth=2), cost="a100_pcie4",
              placement="bytes").replay(trace)
    later = len(trace) - 200
    assert base.stall_ns > 0
    assert st.prefetch_hits >= 0.95 * later
    assert st.late_prefetches <= 0.02 * st.prefetch_hits
    assert st.stall_ns < 0.25 * base.stall_ns
    assert st.total_ns < base.total_ns


def test_no_prefetch_never_prefetches() -> None:
    trace = _loop(50, 3)
    st = Pool(20 * 4096, LRU(), prefetcher=NoPrefetch(), placement="bytes").replay(trace)
    assert st.prefetches == 0


def test_registry_builds_every_prefetcher() -> None:
    trace = _loop(10, 2)
    for name in PREFETCH_NAMES:
        p = make_prefetch(name, trace=trace)
        assert isinstance(p, PrefetchPolicy) and p.name == name
    assert isinstance(make_prefetch(None), NoPrefetch)
    assert make_prefetch("markov", depth=3).depth == 3  # type: ignore[attr-defined]


@pytest.mark.parametrize("bad", [
    lambda: make_prefetch("nope"),
    lambda: make_prefetch("lookahead"),
    lambda: make_prefetch("markov", deep=2),
    lambda: MarkovPrefetcher(depth=0),
    lambda: StridePrefetcher(degree=0),
])
def test_bad_prefetch_configs_raise_config_error(bad) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError):
        bad()


def test_unknown_prefetch_name_lists_valid_names() -> None:
    with pytest.raises(ConfigError, match="markov.*stride.*lookahead.*history"):
        make_prefetch("bogus")
