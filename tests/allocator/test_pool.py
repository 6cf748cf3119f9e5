"""Pool semantics: residency, dirty tracking, write policies, pins, frees, errors and the
externally driven loop (``Pool.steps``)."""

from __future__ import annotations

import io
import json
from collections import OrderedDict

import numpy as np
import pytest

from cachegym.allocator.arena import ALIGN
from cachegym.allocator.backends import NumpyBackend
from cachegym.allocator.errors import (
    CachegymError,
    ConfigError,
    InvalidVictim,
    NotPinned,
    NotResident,
    ObjectPinned,
    ObjectTooLarge,
    PolicyError,
    PoolError,
    PoolExhausted,
    UnknownKey,
)
from cachegym.allocator.pool import EvictionRequest, Pool
from cachegym.allocator.seams import PoolView
from cachegym.allocator.stats import JsonlHook, PoolStats
from cachegym.allocator.trace import Kind, Op, Trace
from cachegym.policies.base import EvictionPolicyBase
from cachegym.policies.classic import FIFO
from cachegym.policies.lru import LRU
from tests.trace_makers import free_some

B = ALIGN  # one aligned block


def _state(p: Pool) -> tuple:
    """Everything observable about a pool (for "the error changed nothing" checks)."""
    return (sorted((k, p.state(k)) for k in list(p._objs)), p.snapshot(), p._place.used,
            p.resident_keys())


def random_trace(seed: int, n: int = 1500, n_keys: int = 40, frees: float = 0.03, *,
                 alpha: float = 1.4, unit: int = B, kinds: bool = False) -> Trace:
    """Zipf(``alpha``) keys, sizes up to ``3 * unit`` (not multiples of 512: rounding), 30%
    writes, and frees (a ``frees`` share) of live objects only, as a trace allows; with
    ``kinds``, a random tensor kind per object."""
    rng = np.random.default_rng(seed)
    key = rng.zipf(alpha, n) % n_keys
    sizes = rng.integers(1, 3 * unit, n_keys)
    op = np.where(rng.random(n) < 0.3, int(Op.WRITE), int(Op.READ))
    free_some(key, op, rng, frees)
    comp = rng.integers(0, 3000, n)
    kind = rng.integers(0, len(Kind), n_keys)[key] if kinds else None
    return Trace.from_arrays(key, sizes[key], op, comp, kind=kind)


def pool_full_of_pinned(block: int = B, **kwargs: object) -> Pool:
    """A pool of two ``block``-byte blocks, both held by pinned objects (1 and 2): a third
    object cannot be placed (PoolExhausted)."""
    p = Pool(2 * block, LRU(), **kwargs)  # type: ignore[arg-type]
    for key in (1, 2):
        p.access(key, block)
        p.pin(key)
    return p


# ---------------------------------------------------------------------- residency and data
def test_hit_miss_and_allocation_counters() -> None:
    p = Pool(4 * B)
    assert not p.access(1, B, write=True)  # first write: allocation
    assert not p.access(2, B)  # first read: compulsory miss
    assert p.access(1, B) and p.access(2, B, write=True)
    s = p.snapshot()
    assert (s.accesses, s.hits, s.misses, s.allocations, s.byte_misses) == (4, 2, 2, 1, 2 * B)
    assert s.bytes_h2d == B and s.device_bytes == 2 * B == s.peak_device_bytes
    assert p.state(1) == p.state(2) == "device"
    assert len(p) == 2 and 1 in p and 3 not in p


def test_byte_placement_counts_exact_bytes() -> None:
    p = Pool(1000, placement="bytes")
    for k in range(10):
        p.access(k, 100)
    assert p.snapshot().device_bytes == 1000 and p.snapshot().evictions == 0
    p.access(10, 100)
    assert p.snapshot().evictions == 1 and p.state(0) == "host"


def test_fragmentation_forces_more_evictions_not_overcommit() -> None:
    p = Pool(4 * B, policy=LRU(), placement="arena")
    for k in range(4):
        p.access(k, B)
    p.free(1)
    p.free(3)
    assert p.snapshot().fragmentation == pytest.approx(0.5)
    p.access(9, 2 * B)  # 2 blocks free in bytes, but not adjacent: evicts 0 (LRU) to join
    s = p.snapshot()
    assert s.evictions == 1 and p.state(0) == "host" and p.state(2) == "device"
    assert s.device_bytes == 3 * B <= p.capacity
    p._check()
    # byte accounting would have fitted it without an eviction
    q = Pool(4 * B, placement="bytes")
    for k in range(4):
        q.access(k, B)
    q.free(1)
    q.free(3)
    q.access(9, 2 * B)
    assert q.snapshot().evictions == 0


def test_write_back_keeps_data_through_eviction(numpy_backend: NumpyBackend) -> None:
    p = Pool(2 * B, backend=numpy_backend, cost="a100_pcie4")
    a = np.arange(B, dtype=np.uint8)
    p.put(1, a)
    assert p.state(1) == "device"
    p.put(2, a[::-1].copy())
    p.put(3, np.full(B, 7, np.uint8))  # evicts 1 (dirty): write-back
    assert p.snapshot().writebacks == 1
    np.testing.assert_array_equal(p.get(1), a)  # evicts 2; 1 comes back from host
    np.testing.assert_array_equal(p.get(2), a[::-1])
    np.testing.assert_array_equal(p.get(3), np.full(B, 7, np.uint8))
    p._check()
    p.close()


def test_clean_victim_is_not_written_back(numpy_backend: NumpyBackend) -> None:
    p = Pool(B, backend=numpy_backend)
    p.put(1, np.ones(B, np.uint8))
    p.access(2, B)  # evicts dirty 1
    p.get(1)  # 1 is clean now; evicting it for 2 costs no copy
    s = p.snapshot()
    p.access(2, B)
    assert p.snapshot().writebacks == s.writebacks == 1
    assert p.snapshot().bytes_d2h == B
    p.close()


def test_write_through_copies_every_write(numpy_backend: NumpyBackend) -> None:
    p = Pool(2 * B, backend=numpy_backend, write_policy="write-through")
    p.put(1, np.full(B, 3, np.uint8))
    p.access(1, B, write=True)
    assert p.snapshot().bytes_d2h == 2 * B
    assert not p._objs[1].dirty
    p.access(2, B)
    p.access(3, B)  # evicts 1: clean, no write-back
    s = p.snapshot()
    assert s.evictions == 1 and s.writebacks == 0 and s.bytes_d2h == 2 * B
    np.testing.assert_array_equal(p.get(1), np.full(B, 3, np.uint8))
    p.close()


def test_free_invalidates_without_write_back(numpy_backend: NumpyBackend) -> None:
    p = Pool(2 * B, backend=numpy_backend)
    p.put(1, np.full(B, 9, np.uint8))
    p.free(1)
    s = p.snapshot()
    assert s.frees == 1 and s.bytes_d2h == 0 and s.device_bytes == 0
    assert 1 not in p and numpy_backend.host_buffer(1) is None
    with pytest.raises(UnknownKey):
        p.get(1)
    p.access(1, B)  # the key again: a new object (zeros from host, not the freed data)
    np.testing.assert_array_equal(p.get(1), np.zeros(B, np.uint8))
    p.close()


def test_free_of_an_in_flight_prefetch() -> None:
    p = Pool(4 * B, cost="a100_pcie4")
    p.prefetch(1, B)
    assert p.state(1) == "h2d"
    p.free(1)
    p._check()
    assert p.snapshot().useless_prefetches == 1
    p.access(2, 4 * B, write=True)  # the freed block is reusable (after the copy into it lands)
    p._check()


def test_pinned_objects_are_never_evicted() -> None:
    p = Pool(3 * B)
    for k in range(3):
        p.access(k, B)
    p.pin(0)
    p.pin(0)  # pins nest
    for k in range(3, 20):
        p.access(k, B)
        assert p.state(0) == "device"
    p.unpin(0)
    p.access(50, B)
    p.access(51, B)
    assert p.state(0) == "device"  # still pinned once
    p.unpin(0)
    p.access(52, B)
    p.access(53, B)
    p.access(54, B)
    assert p.state(0) == "host"
    p._check()


def test_pin_waits_for_a_prefetch_in_flight() -> None:
    p = Pool(4 * B, cost="a100_pcie4")
    p.prefetch(1, B)
    p.pin(1)
    assert p.state(1) == "device" and p.snapshot().stall_ns > 0
    p._check()


def test_hook_writes_json_lines() -> None:
    buf = io.StringIO()
    p = Pool(B, hook=JsonlHook(buf))
    p.access(1, B, write=True)
    p.access(1, B)
    p.access(2, B)
    p.prefetch(1)
    p.free(2)
    events = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert [e["event"] for e in events] == [
        "miss", "hit", "writeback", "evict", "release", "miss", "evict", "release", "prefetch",
        "free"]
    for e in events:
        assert set(e) >= {"event", "key", "size", "tick", "now_ns", "state", "offset", "nbytes"}
    assert events[-1]["key"] == 2 and events[-1]["offset"] == -1  # in host memory: no block
    # an eviction names the block it gives up, its release the same block
    assert [(e["offset"], e["nbytes"]) for e in events[3:5]] == [(0, B)] * 2


def test_stats_as_dict() -> None:
    p = Pool(B)
    p.access(1, B)
    p.access(1, B)
    d = p.snapshot().as_dict()
    assert d["miss_ratio"] == 0.5 and d["hits"] == 1
    assert set(PoolStats.__dataclass_fields__) <= set(d)


def test_memory_stats_and_reset_peak_stats_as_torch_names_them() -> None:
    p = Pool(4 * B, LRU(), placement="arena")  # blocks: rounding, a split arena
    for k in (1, 2, 3, 4):
        p.access(k, B, write=True)
    want = {"allocated_bytes.all.current": 4 * B, "allocated_bytes.all.peak": 4 * B,
            "requested_bytes.all.current": 4 * B, "allocation.all.current": 4,
            "active_bytes.all.current": 4 * B, "active_bytes.all.peak": 4 * B,
            "active.all.current": 4, "reserved_bytes.all.current": 4 * B,
            "reserved_bytes.all.peak": 4 * B, "segment.all.current": 1, "segment.all.peak": 1,
            "inactive_split_bytes.all.current": 0, "inactive_split.all.current": 0,
            "num_alloc_retries": 0, "num_ooms": 0, "num_device_alloc": 1, "num_device_free": 0}
    assert p.memory_stats() == want
    p.access(5, 2 * B)  # evicts 1 and 2 (one allocation, retried after evicting)
    p.free(3)  # a hole between 5 and 4: the arena is split
    m = p.memory_stats()
    assert (m["allocated_bytes.all.current"], m["allocation.all.current"]) == (3 * B, 2)
    assert (m["allocated_bytes.all.peak"], m["num_alloc_retries"]) == (4 * B, 1)
    assert (m["inactive_split_bytes.all.current"], m["inactive_split.all.current"]) == (B, 1)
    p.reset_peak_stats()
    assert p.memory_stats()["allocated_bytes.all.peak"] == 3 * B == p.snapshot().peak_device_bytes
    p.access(6, 100)  # 100 bytes requested, one 512-byte block allocated
    m = p.memory_stats()
    assert (m["allocated_bytes.all.current"], m["requested_bytes.all.current"]) == (
        3 * B + 512, 3 * B + 100)
    assert m["allocated_bytes.all.peak"] == m["active_bytes.all.peak"] == 3 * B + 512
    assert m["num_alloc_retries"] == 1  # reset_peak_stats keeps the counters


def test_memory_stats_count_out_of_memory_errors() -> None:
    p = pool_full_of_pinned()
    with pytest.raises(PoolExhausted):
        p.access(3, B)
    assert p.memory_stats()["num_ooms"] == 1
    p.unpin(2)
    p.access(3, B)  # evicts 2: no error
    assert p.memory_stats()["num_ooms"] == 1


def test_a_block_awaiting_its_copy_is_active_but_no_longer_allocated() -> None:
    """PyTorch's ``allocated`` and ``active``: a freed object's block whose copy to host is
    still in flight (here a write-through) is no longer allocated but held (active) until the
    copy completes, as PyTorch's block freed while another stream still uses it."""
    p = Pool(2 * B, LRU(), cost="a100_pcie4", write_policy="write-through")
    p.access(1, B, write=True)  # first writes: no copy in, their write-through copies
    p.access(2, B, write=True)  # out are in flight (the clock has not moved)
    p.free(1)
    m = p.memory_stats()
    assert (m["active_bytes.all.current"], m["active.all.current"]) == (2 * B, 2)
    assert (m["allocated_bytes.all.current"], m["allocation.all.current"]) == (B, 1)
    assert m["active_bytes.all.current"] == p.snapshot().device_bytes
    p.access(3, B)  # waits for the copy: the block is free again
    m = p.memory_stats()
    assert m["active_bytes.all.current"] == m["allocated_bytes.all.current"] == 2 * B


@pytest.mark.parametrize("placement", ["arena", "bytes"])
def test_memory_stats_agree_with_the_pool_on_every_path(placement: str) -> None:
    """With copies in flight (a cost model: write-backs hold their blocks), on the fast paths,
    the generator path (a hook) and a pickled copy: the stats agree with the snapshot and the
    blocks held, and every path counts the same retries."""
    import pickle

    t = random_trace(5, n=2500)
    stats = []
    for kw in ({}, {"hook": _Log()}):
        p = Pool(8 * B, LRU(), cost="a100_pcie4", placement=placement, **kw)  # type: ignore[arg-type]
        p.replay(t, stop=1200)
        p.reset_peak_stats()
        p.replay(t, start=1200)
        m, s = p.memory_stats(), p.snapshot()
        assert m["active_bytes.all.current"] == s.device_bytes <= m["active_bytes.all.peak"]
        assert m["active_bytes.all.peak"] == s.peak_device_bytes <= m["reserved_bytes.all.current"]
        assert m["active.all.current"] == len(p.resident_keys()) + len(p._releases)
        assert m["allocation.all.current"] == len(p.resident_keys())
        assert m["allocated_bytes.all.current"] == s.device_bytes - p._pending_release_bytes
        assert m["allocated_bytes.all.current"] <= m["allocated_bytes.all.peak"] <= (
            m["active_bytes.all.peak"])
        assert 0 < m["num_alloc_retries"] <= s.evictions
        assert pickle.loads(pickle.dumps(p)).memory_stats() == m
        stats.append(m)
    assert stats[0] == stats[1]


def test_replay_equals_access_loop() -> None:
    t = random_trace(1)
    a = Pool(8 * B, cost="h100_pcie5")
    a.replay(t)
    b = Pool(8 * B, cost="h100_pcie5")
    for k, s, o, c in zip(t.key.tolist(), t.size.tolist(), t.op.tolist(), t.compute_ns.tolist()):
        if o == Op.FREE:
            b.free(k)
        else:
            b.access(k, s, o == Op.WRITE, compute_ns=c)
    assert a.snapshot() == b.snapshot()
    a._check()


# ---------------------------------------------------------------------- driven from outside
def _events(pool: Pool) -> list[tuple]:
    return pool.hook.events  # type: ignore[union-attr]


class _Log:
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def __call__(self, e: dict) -> None:
        self.events.append((e["event"], e["key"], e["tick"], e["now_ns"], e["state"]))


@pytest.mark.parametrize("placement", ["arena", "bytes"])
def test_steps_driven_from_outside_equals_the_lru_policy(placement: str) -> None:
    """An outside driver answers every eviction request from its own LRU order and gets
    exactly the decisions (and statistics) of the pool's LRU policy."""
    t = random_trace(2, n=3000)
    cap = 10 * B
    ref = Pool(cap, LRU(), cost="a100_pcie4", placement=placement, hook=_Log())  # type: ignore[arg-type]
    ref.replay(t)

    driven = Pool(cap, LRU(), cost="a100_pcie4", placement=placement, hook=_Log())  # type: ignore[arg-type]
    order: OrderedDict[int, None] = OrderedDict()  # the driver's own recency order
    requests = 0
    for k, s, o, c in zip(t.key.tolist(), t.size.tolist(), t.op.tolist(), t.compute_ns.tolist()):
        gen = driven.steps(k, s, o, compute_ns=c)
        try:
            req = next(gen)
            while True:
                assert isinstance(req, EvictionRequest) and req.key == k
                victim = next(v for v in order if req.view.evictable(v))
                assert victim in req.view.candidates()
                del order[victim]
                requests += 1
                req = gen.send(victim)
        except StopIteration:
            pass
        if o == Op.FREE:
            order.pop(k, None)
        else:
            order[k] = None
            order.move_to_end(k)
        driven._check()
    assert requests == ref.snapshot().evictions > 100
    assert _events(driven) == _events(ref)
    assert driven.snapshot() == ref.snapshot()


def test_closing_steps_mid_eviction_undoes_the_event() -> None:
    p = Pool(2 * B)
    p.access(1, B)
    p.access(2, B)
    before = p.snapshot()
    gen = p.steps(3, B)
    req = next(gen)
    assert req.needed == B and sorted(req.view.candidates()) == [1, 2]
    gen.close()
    assert 3 not in p and p.snapshot() == before
    p._check()
    p.access(3, B)  # the lock was released
    assert p.snapshot().evictions == 1


# ---------------------------------------------------------------------- backends do not decide
@pytest.mark.parametrize("write_policy", ["write-back", "write-through"])
def test_decisions_equal_with_and_without_a_backend(write_policy: str) -> None:
    t = random_trace(3, n=2000)
    cap = 8 * B
    plain = Pool(cap, cost="h200_pcie5", write_policy=write_policy, placement="arena", hook=_Log())  # type: ignore[arg-type]
    plain.replay(t)
    be = NumpyBackend()
    real = Pool(cap, cost="h200_pcie5", write_policy=write_policy, backend=be, hook=_Log())  # type: ignore[arg-type]
    rng = np.random.default_rng(0)
    for k, s, o, c in zip(t.key.tolist(), t.size.tolist(), t.op.tolist(), t.compute_ns.tolist()):
        if o == Op.FREE:
            real.free(k)
        elif o == Op.WRITE and (k not in real or real.state(k) == "device" and real._objs[k].size == s):
            # real bytes move (where a put is the trace's write: a new object or a hit; a put of
            # an object in host memory fetches nothing, a trace's write fetches it first)
            real.put(k, rng.integers(0, 256, s, dtype=np.uint8))
            real.cost.compute(c)
        else:
            real.access(k, s, o == Op.WRITE, compute_ns=c)
    assert _events(real) == _events(plain)
    assert real.snapshot() == plain.snapshot()
    real._check()
    real.close()


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "kwargs",
    [
        {"capacity": 0},
        {"capacity": -5},
        {"capacity": "lots"},
        {"capacity": "1.5B"},  # not a whole number of bytes
        {"capacity": "1XB"},
        {"capacity": 1.5e9},
        {"capacity": True},
        {"capacity": 2**70},  # more than 2**60 bytes (an OverflowError deep in the loop before)
        {"capacity": 4096, "policy": "lru"},  # a name, not a policy (an AttributeError before)
        {"capacity": ALIGN - 1, "placement": "arena"},  # less than one arena block
        {"capacity": 4096, "placement": "slab"},
        {"capacity": 4096, "write_policy": "write-around"},
        {"capacity": 4096, "oversize": "drop"},
        {"capacity": 4096, "cost": "v100"},
        {"capacity": 4096, "cost": 3},  # (an AttributeError in the cost model before)
        {"capacity": 4096, "policy": object()},  # no hooks (an AttributeError before)
        {"capacity": 4096, "prefetcher": object()},
        {"capacity": 4096, "placement": "bytes", "backend": NumpyBackend(threads=False)},
    ],
)
def test_bad_config_values(kwargs) -> None:
    with pytest.raises(ConfigError) as ei:
        Pool(**kwargs)
    assert isinstance(ei.value, CachegymError) and isinstance(ei.value, ValueError)


def test_capacity_takes_sizes_and_placement_defaults_to_the_evaluators() -> None:
    """``Pool("512MiB")`` is 512 * 2**20 bytes (SI units are powers of 1000); without a backend
    the pool accounts bytes as the evaluator does, with one it places blocks in an arena."""
    assert Pool("512MiB").capacity == 512 << 20 and Pool("1.5GB").capacity == 1_500_000_000
    assert Pool(" 4 KiB ").capacity == 4096 and Pool("4096").capacity == 4096
    assert Pool(4096).placement == "bytes"
    assert Pool(4096, backend=NumpyBackend(threads=False)).placement == "arena"


@pytest.mark.parametrize("placement", ["arena", "bytes"])
@pytest.mark.parametrize("key,size,what", [
    (1, 0, "size"), (1, -5, "size"), (1, 10.5, "size"), (1, "x", "size"), (1, True, "size"),
    (1, 2**64, "size"),
    (None, 4096, "keys are integers"), ("a", 4096, "keys are integers"), (1.5, 4096, "keys are integers"),
    (2**64, 4096, "outside int64"), (2**63, 4096, "outside int64"), (-2**63 - 1, 4096, "outside int64"),
])

def test_bad_access_arguments_are_clear_errors(placement, key, size, what) -> None:
    """A bad key or size (on either access path, C or Python) is a ConfigError naming it, and
    the pool is unchanged."""
    p = Pool(64 * B, placement=placement)
    p.access(7, B)
    before = _state(p)
    with pytest.raises(ConfigError, match=what):
        p.access(key, size)
    assert _state(p) == before
    p._check()
    assert p.access(np.int64(9), np.int64(B)) is False  # NumPy integers are integers


def test_object_larger_than_the_pool() -> None:
    p = Pool(4 * B)
    p.access(1, B, write=True)
    before = _state(p)
    with pytest.raises(ObjectTooLarge) as ei:
        p.access(2, 4 * B + 1)
    e = ei.value
    assert (e.key, e.size, e.capacity) == (2, 4 * B + 1, 4 * B)
    assert "raise the capacity" in str(e)
    with pytest.raises(ObjectTooLarge):
        p.prefetch(3, 5 * B)
    assert _state(p) == before and 2 not in p and 3 not in p
    p._check()
    # an arena holds whole aligned blocks: the message names the capacity asked for too
    with pytest.raises(ObjectTooLarge, match=r"capacity of 512 bytes \(the 1000 bytes asked for"):
        Pool(1000, placement="arena").access(1, 900)
    # libCacheSim semantics on request: a bypassed miss, never inserted
    q = Pool(4 * B, oversize="bypass")
    assert not q.access(2, 5 * B)
    s = q.snapshot()
    assert (s.misses, s.streamed, s.device_bytes) == (1, 1, 0)
    q._check()


def test_everything_pinned(numpy_backend: NumpyBackend) -> None:
    p = Pool(2 * B, backend=numpy_backend)
    p.put(1, np.full(B, 1, np.uint8))
    p.put(2, np.full(B, 2, np.uint8))
    p.pin(1)
    p.pin(2)
    before = _state(p)
    with pytest.raises(PoolExhausted) as ei:
        p.access(3, B)
    e = ei.value
    assert (e.size, e.used, e.capacity) == (B, 2 * B, 2 * B)
    assert "unpin" in str(e) and isinstance(e, MemoryError)
    with pytest.raises(PoolExhausted):
        p.prefetch(4, B)
    with pytest.raises(PoolExhausted):
        p.put(5, np.zeros(B, np.uint8))
    assert _state(p) == before and 3 not in p and 4 not in p and 5 not in p
    p._check()
    p.unpin(2)
    p.put(3, np.full(B, 3, np.uint8))  # now 2 is evicted (written back)
    for k in (1, 2, 3):
        np.testing.assert_array_equal(p.get(k), np.full(B, k, np.uint8))
    p.close()


@pytest.mark.parametrize("placement", ["bytes", "arena"])
def test_a_prefetch_that_cannot_fit_beside_the_pinned_evicts_nothing(placement: str) -> None:
    """A prefetch is a hint: where the pinned objects leave too little room for it, it is
    refused (PoolExhausted) with nothing changed, as ``prefetch`` says. It evicted every
    evictable object first, then raised (a helper's audit: the pool emptied of 2 and 3)."""
    p = Pool(5 * B, LRU(), placement=placement)
    for k, size in ((1, 3 * B), (4, 3 * B), (2, B), (3, B)):
        p.access(k, size)
    p.pin(4)
    before = (sorted(k for k in (1, 2, 3, 4) if p.state(k) == "device"), p.snapshot().evictions)
    with pytest.raises(PoolExhausted) as ei:
        p.prefetch(1)
    assert (ei.value.size, ei.value.used) == (3 * B, 3 * B)
    assert (sorted(k for k in (1, 2, 3, 4) if p.state(k) == "device"),
            p.snapshot().evictions) == before == ([2, 3, 4], 1)
    p._check()
    p.unpin(4)
    assert p.prefetch(1)  # room can be made now: 4 goes
    p._check()


def test_partly_pinned_fragmented_arena_is_exhausted() -> None:
    p = Pool(4 * B, placement="arena")
    for k in range(4):
        p.access(k, B)
    p.pin(0)
    p.pin(2)
    with pytest.raises(PoolExhausted):
        p.access(9, 2 * B)  # 2 blocks can be freed, but never 2 adjacent ones
    p._check()
    assert 9 not in p and p.state(1) == "host"  # the evictions it tried stand, nothing lost
    assert p.snapshot().accesses == 4


@pytest.mark.parametrize("placement", ["bytes", "arena"])
def test_an_access_that_cannot_fit_beside_the_pinned_evicts_nothing(placement: str) -> None:
    """Where the pinned blocks leave too little room whatever is evicted, the access is refused
    before anything is (PoolError: the pool unchanged); it evicted every evictable object
    first, then raised (a helper's audit)."""
    p = Pool(4 * B, LRU(), placement=placement)
    for k in range(4):
        p.access(k, B)
    for k in (1, 2, 3):
        p.pin(k)
    before = p.snapshot()
    with pytest.raises(PoolExhausted, match="pinned objects leave too little room"):
        p.access(10, 2 * B)
    after = p.snapshot()
    assert p.state(0) == "device" and (after.evictions, after.accesses, after.misses) == (
        before.evictions, before.accesses, before.misses)
    p._check()


def test_unknown_keys() -> None:
    p = Pool(4 * B)
    for call in (lambda: p.free(7), lambda: p.pin(7), lambda: p.unpin(7), lambda: p.state(7),
                 lambda: p.prefetch(7)):
        with pytest.raises(UnknownKey) as ei:
            call()
        assert ei.value.key == 7 and "7" in str(ei.value) and isinstance(ei.value, KeyError)
    p.access(7, B)
    p.free(7)
    with pytest.raises(UnknownKey, match="freed"):
        p.free(7)
    p._check()


class _OverLRU(EvictionPolicyBase):
    """Forwards every hook to an inner LRU (a wrapper class without ``touch``: the pool calls
    its hooks); subclasses decide ``victim``."""

    def __init__(self) -> None:
        self.lru = LRU()

    def on_hit(self, view, key):  # type: ignore[no-untyped-def]
        self.lru.on_hit(view, key)

    def on_insert(self, view, key):  # type: ignore[no-untyped-def]
        self.lru.on_insert(view, key)

    def on_evict(self, view, key):  # type: ignore[no-untyped-def]
        self.lru.on_evict(view, key)

    def on_free(self, view, key):  # type: ignore[no-untyped-def]
        self.lru.on_free(view, key)


class _BadPolicy(_OverLRU):
    """Answers with a fixed bad victim once, then behaves like LRU."""

    name = "bad"

    def __init__(self, answer: object) -> None:
        super().__init__()
        self.answer = answer
        self.armed = True

    def victim(self, view):  # type: ignore[no-untyped-def]
        if self.armed:
            self.armed = False
            if isinstance(self.answer, Exception):
                raise self.answer
            return self.answer
        return self.lru.victim(view)


@pytest.mark.parametrize("answer", [None, 99, 3, "one", 1.0, "pinned", RuntimeError("policy bug")])
def test_invalid_victim(answer: object) -> None:
    p = Pool(3 * B, cost="a100_pcie4")
    p.access(1, B, write=True)
    p.access(2, B, write=True)
    p.prefetch(3, B)  # in flight: not evictable
    if answer == "pinned":
        p.pin(1)
        answer = 1
    pol = _BadPolicy(answer)
    p.policy = pol
    for k in (1, 2, 3):
        pol.lru.on_insert(p.view, k)
    before = _state(p)
    expected = PolicyError if isinstance(answer, RuntimeError) else InvalidVictim
    with pytest.raises(expected) as ei:
        p.access(4, B)
    if expected is InvalidVictim:
        assert "view.candidates()" in str(ei.value)
    else:  # the policy's own exception, named and chained
        assert ei.value.hook == "victim" and ei.value.key == 4  # type: ignore[attr-defined]
        assert ei.value.__cause__ is answer
    assert _state(p) == before and 4 not in p
    p._check()
    p.access(4, B)  # the next answer is valid: the pool goes on
    p._check()


def test_pin_free_unpin_errors() -> None:
    p = Pool(4 * B)
    p.access(1, B)
    p.pin(1)
    with pytest.raises(ObjectPinned, match="unpin it first"):
        p.free(1)
    assert p.state(1) == "device"
    p.unpin(1)
    with pytest.raises(NotPinned, match="matching pin"):
        p.unpin(1)
    p.access(2, 4 * B)  # evicts 1
    with pytest.raises(NotResident, match="access it first"):
        p.pin(1)
    p.free(1)
    assert 1 not in p
    p._check()
    for cls in (ObjectPinned, NotPinned, NotResident, UnknownKey, InvalidVictim, PoolExhausted,
                ObjectTooLarge):
        assert issubclass(cls, PoolError)


def test_data_plane_needs_a_backend() -> None:
    p = Pool(4 * B)
    with pytest.raises(ConfigError, match="backend"):
        p.put(1, np.zeros(4, np.uint8))
    with pytest.raises(ConfigError, match="backend"):
        p.get(1)


def test_put_of_a_new_size_that_cannot_fit_keeps_the_old_object(numpy_backend: NumpyBackend) -> None:
    p = Pool(3 * B, backend=numpy_backend)
    p.put(1, np.full(B, 1, np.uint8))
    p.put(2, np.full(B, 2, np.uint8))
    p.put(3, np.full(B, 3, np.uint8))
    p.pin(2)  # the middle block: no 2-block hole can ever exist
    with pytest.raises(PoolExhausted):
        p.put(1, np.zeros(2 * B, np.uint8))
    with pytest.raises(ObjectPinned):
        p.put(2, np.zeros(2 * B, np.uint8))
    p._check()
    for k in (1, 2, 3):
        np.testing.assert_array_equal(p.get(k), np.full(B, k, np.uint8))
    p.unpin(2)
    p.put(1, np.full(2 * B, 5, np.uint8))  # now it fits: replaced
    np.testing.assert_array_equal(p.get(1), np.full(2 * B, 5, np.uint8))
    p.close()


def test_data_plane_streams_what_a_bypass_pool_does_not_admit(numpy_backend: NumpyBackend) -> None:
    """With ``oversize="bypass"`` an object larger than the pool is streamed: put stores its
    bytes in host memory, get hands them back in a new array; nothing becomes resident, and
    the copies count as traffic. With ``oversize="error"`` it is refused."""
    p = Pool(2 * B, backend=numpy_backend, oversize="bypass")
    data = np.arange(3 * B, dtype=np.int64).view(np.uint8)[: 3 * B]
    p.put(1, data)
    assert p.state(1) == "host" and p.resident_keys() == []
    np.testing.assert_array_equal(p.get(1), data)
    s = p.snapshot()
    assert (s.misses, s.streamed, s.device_bytes) == (2, 2, 0)
    assert (s.bytes_d2h, s.bytes_h2d, s.traffic_bytes) == (3 * B, 3 * B, 6 * B)
    assert not p.access(2, 3 * B)  # metadata access: streamed (a read of host bytes)
    with pytest.raises(ConfigError):
        p.put(3, np.zeros(0, np.uint8))
    with pytest.raises(ConfigError):
        p.access(4, 0)
    p._check()
    p.close()
    q = Pool(2 * B, backend=NumpyBackend(threads=False))
    with pytest.raises(ObjectTooLarge):
        q.put(1, np.zeros(3 * B, np.uint8))
    assert 1 not in q
    q.close()


class _Refuses(_OverLRU):
    """LRU that admits only objects of at most one block."""

    def victim(self, view: PoolView) -> int | None:
        return self.lru.victim(view)

    def admit(self, view: PoolView, key: int, size: int) -> bool:
        return size <= B


@pytest.mark.parametrize("preset", [None, "h100_pcie5"])
def test_a_streamed_access_pays_its_copies(preset: str | None) -> None:
    """An access the policy does not admit moves its bytes: a read copies them in (and waits
    as for a demand miss), a write copies them out, a first write copies nothing in; hit and
    miss counts are those of a bypass."""
    p = Pool(8 * B, _Refuses(), cost=preset)
    assert not p.access(1, 2 * B)  # a read of a host object: streamed in
    s = p.snapshot()
    assert (s.misses, s.streamed, s.bytes_h2d, s.bytes_d2h) == (1, 1, 2 * B, 0)
    assert (s.stall_ns > 0) == (preset is not None)
    assert not p.access(2, 3 * B, True)  # a first write: out only
    assert not p.access(1, 2 * B, True)  # a read-modify-write: in, then out
    s = p.snapshot()
    assert (s.misses, s.streamed, s.bytes_h2d, s.bytes_d2h) == (3, 3, 4 * B, 5 * B)
    assert s.traffic_bytes == 9 * B and p.resident_keys() == []
    assert p.access(3, B) is False and p.access(3, B) is True  # admitted: resident
    p._check()


class _Asked:
    """A prefetcher that records what it was asked after and prefetches key 9."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def prefetch(self, view: PoolView, key: int) -> list[int]:
        self.asked.append(key)
        return [9, key]  # (the key itself, streamed: not prefetched, the policy refused it)


def test_the_prefetcher_is_asked_after_a_streamed_access_too() -> None:
    # it was not: a history prefetcher lost every streamed access of the order it learns, and
    # under a policy that streams most (S3-FIFO on large DL tensors) stopped predicting
    pf = _Asked()
    p = Pool(8 * B, _Refuses(), prefetcher=pf, backend=NumpyBackend(threads=False))
    p.put(9, np.full(3 * B, 9, np.uint8))  # not admitted: in host memory (asked after it)
    assert p.state(9) == "host" and pf.asked == [9]
    assert not p.access(1, 2 * B)  # streamed: asked, and its prefetch made
    assert pf.asked[-1] == 1 and p.state(9) == "device" and p.state(1) == "host"
    p.put(2, np.full(3 * B, 2, np.uint8))  # a streamed put: asked too
    assert pf.asked[-1] == 2 and p.state(2) == "host"
    p._check()
    p.close()


def test_streaming_decisions_and_counts_equal_with_and_without_a_backend() -> None:
    """Admission is consulted with a backend too: the same accesses give the same statistics,
    and a refused object's bytes survive in host memory."""
    rng = np.random.default_rng(3)
    ops = [(int(rng.integers(0, 12)), int(rng.integers(1, 3)) * B, bool(rng.random() < 0.4))
           for _ in range(300)]
    bare = Pool(6 * B, _Refuses())
    real = Pool(6 * B, _Refuses(), backend=NumpyBackend(threads=False))
    sizes: dict[int, int] = {}
    written: set[int] = set()
    for k, size, write in ops:
        size = sizes.setdefault(k, size)
        bare.access(k, size, write)
        if write and (k not in real or real.state(k) == "device"):
            # (a put of an object in host memory fetches nothing, a trace's write fetches it)
            real.put(k, np.full(size, k, np.uint8))
            written.add(k)
        elif write:
            real.access(k, size, True)
        elif k in real:
            got = real.get(k)
            if k in written:
                np.testing.assert_array_equal(got, np.full(size, k, np.uint8))
        else:
            real.access(k, size)
    assert bare.snapshot().streamed > 0
    assert bare.snapshot() == real.snapshot()
    real._check()
    real.close()


class _Recorder(_OverLRU):
    """LRU that logs every victim."""

    name = "recorded-lru"

    def __init__(self) -> None:
        super().__init__()
        self.victims: list[int] = []

    def victim(self, view):  # type: ignore[no-untyped-def]
        v = self.lru.victim(view)
        self.victims.append(v)  # type: ignore[arg-type]
        return v


class _NoPrefetch:
    name = "none"

    def prefetch(self, view, key):  # type: ignore[no-untyped-def]
        return ()


@pytest.mark.parametrize("placement", ["arena", "bytes"])
@pytest.mark.parametrize("write_policy", ["write-back", "write-through"])
def test_fast_paths_equal_the_generator_path(placement: str, write_policy: str) -> None:
    """access() takes shortcuts (the hit fast path with LRU's touch; misses without a generator);
    a hook or a prefetcher sends every access through the generator instead. Same decisions."""
    t = random_trace(4, n=3000)
    runs = []
    for kw in ({}, {"hook": _Log()}, {"prefetcher": _NoPrefetch()}, {"lru": True}):
        pol = LRU() if kw.pop("lru", False) else _Recorder()
        p = Pool(8 * B, pol, cost="a100_pcie4", placement=placement,  # type: ignore[arg-type]
                 write_policy=write_policy, **kw)  # type: ignore[arg-type]
        p.replay(t)
        p._check()
        runs.append((p.snapshot(), getattr(pol, "victims", None), p.resident_keys()))
    assert runs[0][1] is not None and len(runs[0][1]) == runs[0][0].evictions > 100
    for snap, victims, resident in runs[1:]:
        assert snap == runs[0][0]
        assert victims is None or victims == runs[0][1]
        assert resident == runs[0][2]


def test_hit_fast_path_never_bypasses_an_overridden_on_hit() -> None:
    class CountingLRU(LRU):
        def __init__(self) -> None:
            super().__init__()
            self.hits = 0

        def on_hit(self, view, key):  # type: ignore[no-untyped-def]
            self.hits += 1
            super().on_hit(view, key)

    pol = CountingLRU()
    assert pol.touch is None and LRU().touch is not None
    p = Pool(4 * B, pol)
    p.access(1, B)
    p.access(1, B)
    p.access(1, B, write=True)
    assert pol.hits == 2
    plain = LRU()
    seen: list[int] = []
    plain.on_hit = lambda view, key: seen.append(key)  # type: ignore[method-assign]
    q = Pool(4 * B, plain)
    q.access(1, B)
    q.access(1, B)
    assert seen == [1]
    # swapping the policy refreshes the cached fast path
    q.policy = pol2 = CountingLRU()
    q.access(1, B)
    assert pol2.hits == 1
    # FIFO's on_hit is the base's no-op, which the pool skips; one given to a FIFO instance or
    # subclass is called, on the fast path and on the generator's (a prefetcher in the pool)
    for pf in (None, _NoPrefetch()):
        fifo = FIFO()
        fifo.on_hit = lambda view, key: seen.append(-key)  # type: ignore[method-assign]
        r = Pool(4 * B, fifo, prefetcher=pf)
        r.access(2, B)
        r.access(2, B)
        assert seen[-1] == -2
        seen.clear()


def test_every_error_message_says_what_to_do(numpy_backend: NumpyBackend) -> None:
    p = Pool(2 * B, backend=numpy_backend)
    p.access(1, B)
    p.pin(1)
    p.access(2, B)
    p.pin(2)
    cases = [
        (lambda: p.access(9, 3 * B), ObjectTooLarge, "raise the capacity"),
        (lambda: p.access(9, B), PoolExhausted, "unpin objects or raise the capacity"),
        (lambda: p.free(77), UnknownKey, "create it first"),
        (lambda: p.free(1), ObjectPinned, "unpin it first"),
        (lambda: Pool(2 * B, placement="slab"), ConfigError, "'arena' or 'bytes'"),  # type: ignore[arg-type]
        (lambda: Pool(B, cost="nope"), ConfigError, "choose one of"),
    ]
    for call, cls, advice in cases:
        with pytest.raises(cls) as ei:
            call()
        assert advice in str(ei.value), str(ei.value)
    p.unpin(1)
    p.unpin(2)
    with pytest.raises(NotPinned, match="every unpin needs a matching pin"):
        p.unpin(1)
    p.access(5, 2 * B)
    with pytest.raises(NotResident, match="access it first"):
        p.pin(1)
    p._check()
    p.close()


class _Untracked(LRU):
    """LRU that records the optional hook for frees of objects in host memory only."""

    def __init__(self) -> None:
        super().__init__()
        self.untracked: list[int] = []
        self.freed: list[int] = []

    def on_free(self, view, key):  # type: ignore[no-untyped-def]
        self.freed.append(key)
        super().on_free(view, key)

    def on_free_untracked(self, view, key):  # type: ignore[no-untyped-def]
        self.untracked.append(key)


def test_free_of_an_evicted_object_calls_on_free_untracked() -> None:
    """A policy that models a cache of its own (a shadow cache) may still hold an object the
    pool evicted: the optional ``on_free_untracked`` hook tells it of that object's free;
    ``on_free`` stays for tracked objects only, and a policy without the hook (or with it set
    to None) is not asked. The C free of the environments' loop leaves such a free to
    ``Pool.free``, and serves it where there is nothing to tell."""
    pol = _Untracked()
    p = Pool(2 * B, pol, placement="bytes")
    for k in (1, 2, 3, 4, 5):  # 1, 2, 3 are evicted
        p.access(k, B)
    p.free(1)
    p.free(4)
    assert pol.untracked == [1] and pol.freed == [4]
    p.free(2)
    assert pol.untracked == [1, 2] and 2 not in p
    pol.on_free_untracked = None  # type: ignore[method-assign, assignment]
    p.free(3)
    assert 3 not in p and pol.untracked == [1, 2]


def test_steps_evicts_pending_drops_after_a_bypass_as_access_does() -> None:
    """S3-FIFO's model evicts for an object of exactly its small queue's size and then refuses
    it: the pool bypasses the object and evicts the model's drops right away, on both paths
    (the generator ``steps`` used to leave them pending until the next event)."""
    import dataclasses

    from cachegym.policies.adaptive import S3FIFO

    keys, sizes = list(range(20)) + [99], [60] * 20 + [100]
    out = []
    for path in ("access", "steps"):
        pol = S3FIFO()
        pool = Pool(1000, pol, placement="bytes", oversize="bypass")
        for k, s in zip(keys, sizes):
            if path == "access":
                pool.access(k, s)
                continue
            g = pool.steps(k, s)
            try:
                next(g)
                while True:
                    g.send(pol.victim(pool.view))
            except StopIteration:
                pass
        assert list(pol.pending_evictions()) == [] and pool.stats.streamed == 1
        out.append(dataclasses.asdict(pool.snapshot()))
    assert out[0] == out[1] and out[0]["evictions"] == 5


@pytest.mark.parametrize("placement", ["arena", "bytes"])
def test_a_pool_pickles_and_copies_mid_trace(placement: str) -> None:
    """A pool pickled (or deep-copied) half-way through a trace continues exactly as the
    original: the same hits, evictions and residents; the copy has its own lock and C paths."""
    import copy
    import pickle

    from cachegym.envs.workloads.registry import generate

    trace = generate("zipf", seed=1, n_requests=6000, n_objects=600, size=4096, write_fraction=0.3)
    a = Pool(60 * 4096, LRU(), placement=placement)
    a.replay(trace.window(0, 3000))
    twins = [pickle.loads(pickle.dumps(a)), copy.deepcopy(a)]
    for t in twins:
        assert t._lock is not a._lock and t.view._pool is t
    want = a.replay(trace.window(3000, 6000))
    for t in twins:
        got = t.replay(trace.window(3000, 6000))
        assert (got.hits, got.evictions, got.writebacks) == (want.hits, want.evictions, want.writebacks)
        assert t.resident_keys() == a.resident_keys()


def test_policy_hooks_see_whether_the_access_writes() -> None:
    """``view.writing`` tells a policy's on_hit / on_miss whether the access being served is a
    write (a miss's object is not dirty yet when on_miss runs)."""
    seen: list[tuple[str, int, bool]] = []

    class Spy(LRU):
        def on_hit(self, view, key):  # type: ignore[no-untyped-def]
            seen.append(("hit", key, view.writing))
            super().on_hit(view, key)

        def on_miss(self, view, key):  # type: ignore[no-untyped-def]
            seen.append(("miss", key, view.writing))
            super().on_miss(view, key)

    p = Pool(4 * B, Spy(), placement="bytes")
    p.access(1, B, write=True)
    p.access(1, B)
    p.access(2, B)
    p.access(2, B, write=True)
    assert seen == [("miss", 1, True), ("hit", 1, False), ("miss", 2, False), ("hit", 2, True)]


def test_a_policy_name_is_refused_with_the_call_that_builds_it() -> None:
    """Pool(capacity, "lru") is a name, not a policy: the error gives the call that builds one
    (make_policy, which lists the registered names where it is not one of them)."""
    import cachegym

    with pytest.raises(ConfigError, match=r"not the name 'lur': cachegym.make_policy\('lur'\)"):
        Pool(4096, "lur")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="lru"):
        cachegym.make_policy("lur")


def test_a_policy_without_its_hooks_is_refused_by_name() -> None:
    class NoHit:
        name = "nohit"

        def victim(self, view):
            return None

        def on_miss(self, view, key): ...
        def on_insert(self, view, key): ...
        def on_evict(self, view, key): ...
        def on_free(self, view, key): ...

    with pytest.raises(ConfigError, match="policy NoHit has no on_hit method: an eviction policy "
                                          "implements victim, on_hit"):
        Pool(4096, NoHit())
    p = Pool(4096)
    with pytest.raises(ConfigError, match="has no on_hit method"):
        p.policy = NoHit()  # type: ignore[assignment]
    assert p.policy.name == "lru"


def test_an_invalid_victim_from_a_policy_names_it_and_its_hook() -> None:
    class Wrong(LRU):
        name = "wrong"

        def victim(self, view):
            return 10**6

    p = Pool(2 * B, Wrong(), placement="bytes")
    p.access(1, B)
    p.access(2, B)
    with pytest.raises(InvalidVictim, match="policy 'wrong' \\(Wrong\\), in victim: eviction "
                                            "victim 1000000 is not evictable") as e:
        p.access(3, B)
    assert e.value.policy is p.policy and e.value.hook == "victim"
    p._check()


def test_put_of_an_object_array_is_refused() -> None:
    p = Pool(64 * B, backend=NumpyBackend(threads=False))
    with pytest.raises(ConfigError, match="an array of Python objects"):
        p.put(1, np.array([object()]))
    assert 1 not in p


def test_put_of_text_is_refused() -> None:
    """A ``str`` was stored as NumPy's UTF-32 array of it; ``bytes`` are raw bytes."""
    p = Pool(64 * B, backend=NumpyBackend(threads=False))
    for text in ("hello", np.array(["a", "b"])):
        with pytest.raises(ConfigError, match="text .* has no one byte encoding"):
            p.put(1, text)
    assert 1 not in p
    p.put(2, b"hi")
    assert bytes(p.get(2)) == b"hi"
