"""The compiled replay takes the same decisions as the pool's access loop, request by request."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.pool import Pool
from allocator.trace import Op, Trace
from policies.base import EvictionPolicy
from policies.fastreplay import (
    BYPASS,
    FAST_POLICIES,
    FREE,
    HIT,
    MISS,
    UNTIMED_ONLY,
    _next_use,
    dense_ids,
    replay_fast,
    warm_up,
)
from policies.registry import make_eviction


def make_policy(name: str, trace: Trace) -> EvictionPolicy:
    """The pool-path policy object for ``name``, from the registry (the kernels must equal it)."""
    return make_eviction(name, trace=trace, seed=0)  # type: ignore[no-any-return]


class Recorder:
    """Wraps a policy; logs ``(tick, victim)`` of every eviction decision."""

    def __init__(self, inner: EvictionPolicy) -> None:
        self.inner = inner
        self.name = inner.name
        self.victims: list[tuple[int, int]] = []

    def victim(self, view):  # type: ignore[no-untyped-def]
        v = self.inner.victim(view)
        self.victims.append((view.tick, int(v)))  # type: ignore[arg-type]
        return v

    def __getattr__(self, attr):  # type: ignore[no-untyped-def]
        return getattr(self.inner, attr)


def gen_trace(seed: int, n: int = 2000, n_keys: int = 120, frees: float = 0.03,
              writes: float = 0.2, big_keys: bool = False) -> Trace:
    """Zipf-ish keys, per-object sizes (a few change on re-creation), reads, writes, frees."""
    rng = np.random.default_rng(seed)
    ranks = np.minimum(rng.zipf(1.3, n) - 1, n_keys - 1)
    perm = rng.permutation(n_keys)
    keys = perm[ranks].astype(np.int64)
    if big_keys:  # not dense: forces the np.unique remap
        keys = keys * 1_000_003 - 7_777_777_777
    base = rng.integers(1, 2000, n_keys)
    sizes = base[ranks].copy()
    jitter = rng.random(n) < 0.02  # a miss may carry a new size (libCacheSim semantics)
    sizes[jitter] = rng.integers(1, 2000, int(jitter.sum()))
    ops = np.where(rng.random(n) < writes, Op.WRITE, Op.READ).astype(np.uint8)
    live: set[int] = set()
    for i in range(n):
        k = int(keys[i])
        if k in live and rng.random() < frees:
            ops[i] = Op.FREE
            live.discard(k)
        else:
            live.add(k)
    compute = rng.integers(0, 20_000, n)
    return Trace.from_arrays(keys, sizes, ops, compute_ns=compute)


def pool_replay(trace: Trace, capacity: int, policy: str, mode: str, **pool_kw):  # type: ignore[no-untyped-def]
    """Reference: drive Pool.access / Pool.free row by row, recording outcomes and victims."""
    rec = Recorder(make_policy(policy, trace))
    pool = Pool(capacity, rec, placement="bytes", oversize="bypass", **pool_kw)  # type: ignore[arg-type]
    size = trace.size if mode == "bytes" else np.ones(len(trace), np.int64)
    outcome = np.zeros(len(trace), np.uint8)
    for i in range(len(trace)):
        k, o = int(trace.key[i]), int(trace.op[i])
        if o == Op.FREE:
            pool.free(k)
            outcome[i] = FREE
            continue
        before = pool.stats.bypasses
        hit = pool.access(k, int(size[i]), o == Op.WRITE, compute_ns=int(trace.compute_ns[i]))
        outcome[i] = HIT if hit else (BYPASS if pool.stats.bypasses > before else MISS)
    return pool.snapshot(), outcome, rec.victims


def _hands_over(policy: str, trace: Trace, capacity: int, mode: str, cost: str | None) -> bool:
    """Where the kernel may hand a trace to the pool: S3-FIFO, SLRU and GDSF with a timing model
    (:data:`UNTIMED_ONLY`). Nowhere else."""
    return policy in UNTIMED_ONLY and cost is not None


CASES = [
    # (mode, capacity, cost, write_policy)
    ("bytes", 8_000, None, "write-back"),
    ("bytes", 30_000, None, "write-back"),
    ("bytes", 1_500, None, "write-back"),  # many objects larger than the pool: bypass
    ("objects", 10, None, "write-back"),
    ("objects", 40, None, "write-through"),
    ("bytes", 20_000, "a100_pcie4", "write-back"),  # timing model: write-backs delay space
    ("bytes", 6_000, "h100_pcie5", "write-through"),
    ("objects", 25, "gh200_c2c", "write-back"),
]


@pytest.fixture(scope="module", autouse=True)
def _compiled() -> None:
    warm_up()


@pytest.mark.parametrize("policy", FAST_POLICIES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}-{c[3]}")
@pytest.mark.parametrize("seed", [0, 1])
def test_kernel_equals_pool_loop(policy: str, case: tuple, seed: int) -> None:
    mode, capacity, cost, wp = case
    trace = gen_trace(seed, big_keys=seed == 1)
    fast = replay_fast(trace, capacity, policy, mode, cost=cost, write_policy=wp, record=True)
    if fast is None:  # the pool replays it (with a timing model: _hands_over)
        assert _hands_over(policy, trace, capacity, mode, cost)
        return
    ref_stats, ref_outcome, ref_victims = pool_replay(trace, capacity, policy, mode, cost=cost,
                                                      write_policy=wp)
    first_diff = np.flatnonzero(fast.outcome != ref_outcome)
    assert not len(first_diff), f"first differing row {first_diff[:1]}"
    victims = list(zip(fast.victim_rows.tolist(), fast.victim_keys.tolist()))
    assert victims == ref_victims
    ref = dataclasses.asdict(ref_stats)
    got = dataclasses.asdict(fast.stats)
    for f in ("fragmentation", "fallbacks", "prefetches", "prefetch_hits", "late_prefetches",
              "useless_prefetches"):
        ref.pop(f)
        got.pop(f)
    assert got == ref
    # the case exercises eviction (S3-FIFO in a pool of 10 objects: refusals of all, as its
    # small queue holds 1 and libCacheSim refuses objects of that size)
    assert (ref_stats.evictions > 0 and ref_stats.hits > 0) or (policy == "s3fifo" and ref_stats.bypasses > 0)


def test_replay_equals_pool_replay_method() -> None:
    """Same counters as Pool.replay itself (the evaluator's fallback)."""
    trace = gen_trace(3)
    for policy in ("lru", "fifo"):
        pool = Pool(9_000, make_policy(policy, trace), placement="bytes", oversize="bypass")
        ref = pool.replay(trace)
        fast = replay_fast(trace, 9_000, policy)
        assert fast is not None
        assert (fast.stats.hits, fast.stats.misses, fast.stats.evictions, fast.stats.bytes_d2h) == (
            ref.hits, ref.misses, ref.evictions, ref.bytes_d2h)


def test_not_applicable_returns_none() -> None:
    trace = gen_trace(4, n=200)
    assert replay_fast(trace, 5_000, "lirs") is None
    for policy in UNTIMED_ONLY:  # their models with a timing model: the pool
        assert replay_fast(trace, 5_000, policy) is not None
        assert replay_fast(trace, 5_000, policy, cost="a100_pcie4") is None
    assert replay_fast(trace, 5_000, "lru", placement="arena") is None
    assert replay_fast(trace, 5_000, "lru", prefetch="next") is None
    # an object larger than the pool with oversize="error": the pool must raise, not the kernel
    assert replay_fast(trace, 10, "lru", oversize="error") is None


@pytest.mark.parametrize("seed", [5, 6])
def test_next_use_pass_equals_trace_next_use(seed: int) -> None:
    trace = gen_trace(seed, n=1500, n_keys=40, frees=0.1, big_keys=seed == 6)
    ids, _, n_ids = dense_ids(trace.key)
    got = _next_use(ids, trace.op, n_ids)
    want = trace.next_use()
    never = want == np.iinfo(np.int64).max
    assert never.any() and (trace.op == Op.FREE).any()
    assert np.array_equal(got[never], np.full(int(never.sum()), len(trace)))
    assert np.array_equal(got[~never], want[~never])


def test_record_false_returns_counters_only() -> None:
    trace = gen_trace(7, n=500)
    full = replay_fast(trace, 5_000, "lfu", record=True)
    bare = replay_fast(trace, 5_000, "lfu")
    assert full is not None and bare is not None
    assert bare.stats == full.stats and len(bare.outcome) == 0 and len(bare.victim_keys) == 0
    assert len(full.outcome) == len(trace) and len(full.victim_keys) == full.stats.evictions


def test_bench_replay_smoke_agrees_with_libcachesim() -> None:
    """scripts/bench_replay.py on a small Zipf trace: the kernel's miss ratios equal
    libCacheSim's for every compiled policy (the same trace, read by its C reader)."""
    pytest.importorskip("libcachesim")
    import argparse
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    try:
        import bench_replay
    finally:
        sys.path.pop(0)
    p = argparse.ArgumentParser()
    bench_replay.add_args(p)
    figs = bench_replay.run(p.parse_args(["--requests", "20000", "--objects", "2000",
                                          "--repeat", "1", "--preset", "a100_pcie4",
                                          "--dl-tiled", "50000"]))
    for tname in ("zipf", "dl", "dl_tiled"):
        for pol in FAST_POLICIES:
            row = figs[tname][pol]
            assert row["ours_miss_ratio"] == pytest.approx(row["lcs_miss_ratio"], abs=1e-12)
            assert row["ours_rps"] > 0 and row["lcs_rps"] > 0
            assert row["pool_rps"] > 0  # (run() raised had Pool.replay's stats differed)
            assert pol in UNTIMED_ONLY or row["ours_timed_rps"] > 0  # (timed: the pool)


@st.composite
def small_cases(draw: st.DrawFn) -> tuple[Trace, int, str, str, str | None, str]:
    n = draw(st.integers(1, 250))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n_keys = draw(st.integers(1, 25))
    keys = rng.integers(0, n_keys, n)
    sizes = rng.integers(1, draw(st.integers(2, 300)), n)
    ops = np.where(rng.random(n) < draw(st.floats(0, 0.6)), Op.WRITE, Op.READ).astype(np.uint8)
    p_free = draw(st.floats(0, 0.3))
    live: set[int] = set()
    for i in range(n):
        k = int(keys[i])
        if k in live and rng.random() < p_free:
            ops[i] = Op.FREE
            live.discard(k)
        else:
            live.add(k)
    compute = rng.integers(0, 5_000, n) * (rng.random(n) < 0.7)
    trace = Trace.from_arrays(keys, sizes, ops, compute_ns=compute)
    return (trace, draw(st.integers(1, 2_000)), draw(st.sampled_from(FAST_POLICIES)),
            draw(st.sampled_from(["bytes", "objects"])),
            draw(st.sampled_from([None, "a100_pcie4", "gh200_c2c"])),
            draw(st.sampled_from(["write-back", "write-through"])))


@settings(max_examples=60, deadline=None)
@given(small_cases())
def test_kernel_equals_pool_loop_on_random_small_traces(case: tuple) -> None:
    trace, capacity, policy, mode, cost, wp = case
    if mode == "objects":
        capacity = max(1, capacity // 100)
    ref_stats, ref_outcome, ref_victims = pool_replay(trace, capacity, policy, mode, cost=cost,
                                                      write_policy=wp)
    fast = replay_fast(trace, capacity, policy, mode, cost=cost, write_policy=wp, record=True)
    if fast is None:
        assert _hands_over(policy, trace, capacity, mode, cost)
        return
    assert np.array_equal(fast.outcome, ref_outcome)
    assert list(zip(fast.victim_rows.tolist(), fast.victim_keys.tolist())) == ref_victims
    for f in ("hits", "misses", "byte_misses", "allocations", "evictions", "writebacks",
              "bypasses", "frees", "bytes_h2d", "bytes_d2h", "stall_ns", "compute_ns",
              "total_ns", "device_bytes", "peak_device_bytes"):
        assert getattr(fast.stats, f) == getattr(ref_stats, f), f


def test_s3fifo_serves_an_object_its_model_refuses_after_evicting():
    """An object of exactly S3-FIFO's small-queue size (10% of 1,000 bytes) makes the model
    evict and then refuse it: the pool bypasses it and evicts the model's drops after the event
    (Pool._evict_due). The kernel does the same (it handed such traces to the pool before S3-FIFO
    moved to the model-following kernel); with a timing model the pool replays."""
    keys, sizes = list(range(20)) + [99, 5], [60] * 20 + [100, 60]
    trace = Trace.from_arrays(keys, sizes)
    fast = replay_fast(trace, 1000, "s3fifo", record=True)
    assert fast is not None
    ref_stats, ref_outcome, ref_victims = pool_replay(trace, 1000, "s3fifo", "bytes")
    assert fast.outcome[20] == BYPASS and np.array_equal(fast.outcome, ref_outcome)
    assert list(zip(fast.victim_rows.tolist(), fast.victim_keys.tolist())) == ref_victims
    assert fast.stats.evictions == ref_stats.evictions > len(ref_victims)  # (drops after the event)
    assert replay_fast(trace, 1000, "s3fifo", cost="a100_pcie4") is None
