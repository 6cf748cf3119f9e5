"""``Pool(..., forget_evicted=True)``: the pool drops the record of an object that leaves the
device and remembers only its key; every decision and count is the same as with the records
kept, for every registered policy, and the pool holds records only of resident objects."""

from __future__ import annotations

import numpy as np
import pytest

import cachegym.allocator.loop as loop_mod
from cachegym.allocator.arena import ALIGN
from cachegym.allocator.errors import ConfigError, NotPinned, NotResident, UnknownKey
from cachegym.allocator.pool import HOST, Pool
from cachegym.allocator.trace import Op, Trace
from cachegym.policies.registry import EVICTION_NAMES, make_eviction
from tests.trace_makers import free_some

B = ALIGN


@pytest.fixture(autouse=True)
def _forget_from_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """These pools forget from their first eviction (FORGET_ABOVE: 65,536 records by default)."""
    monkeypatch.setattr(loop_mod, "FORGET_ABOVE", 0)


def _trace(seed: int, n: int = 1500, n_keys: int = 60) -> Trace:
    """Reads, writes (first writes of new objects among them), frees of live objects (a key
    is used again after its free) and objects larger than the pools below."""
    rng = np.random.default_rng(seed)
    key = rng.zipf(1.2, n) % n_keys
    sizes = rng.integers(1, 3 * B, n_keys)
    sizes[rng.random(n_keys) < 0.05] = 40 * B
    op = np.where(rng.random(n) < 0.3, int(Op.WRITE), int(Op.READ))
    free_some(key, op, rng, 0.05)
    return Trace.from_arrays(key, sizes[key], op, np.zeros(n, np.int64))


def _pool(name: str, t: Trace, forget: bool, placement: str, write_policy: str) -> Pool:
    return Pool(12 * B, make_eviction(name, trace=t, seed=3), placement=placement,  # type: ignore[arg-type]
                write_policy=write_policy, oversize="bypass", forget_evicted=forget)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", EVICTION_NAMES)
@pytest.mark.parametrize("placement,write_policy", [("bytes", "write-back"),
                                                    ("arena", "write-through")])
def test_forgetting_changes_no_decision(name: str, placement: str, write_policy: str) -> None:
    t = _trace(7)
    keep = _pool(name, t, False, placement, write_policy)
    forget = _pool(name, t, True, placement, write_policy)
    for i in range(len(t)):
        k = int(t.key[i])
        if t.op[i] == Op.FREE:
            keep.free(k)
            forget.free(k)
        else:
            args = (k, int(t.size[i]), bool(t.op[i] == Op.WRITE))
            assert keep.access(*args) == forget.access(*args), i
        assert sorted(keep.resident_keys()) == sorted(forget.resident_keys()), i
        assert (k in keep) == (k in forget) and len(keep) == len(forget), i
        if k in keep:
            assert keep.state(k) == forget.state(k), i
        forget._check()
        assert all(o.state != HOST for o in forget._objs.values()), i  # (none kept)
    assert keep.snapshot() == forget.snapshot()
    assert len(forget._objs) == len(forget.resident_keys()) < len(keep._objs)


@pytest.mark.parametrize("name", ["lru", "s3fifo", "arc", "gdsf"])
def test_replay_forgetting_equals_replay_keeping(name: str) -> None:
    t = _trace(11, n=4000, n_keys=300)
    a = _pool(name, t, False, "bytes", "write-back").replay(t)
    b = _pool(name, t, True, "bytes", "write-back").replay(t)
    assert a == b and a.writebacks > 0 and a.frees > 0 and a.streamed > 0


def test_a_forgotten_object() -> None:
    p = Pool(2 * B, forget_evicted=True)
    p.access(1, B, write=True)  # a first write: allocated, nothing copied in
    p.access(2, B)
    p.access(3, B)  # evicts 1 (dirty: written back), forgotten
    assert 1 not in p._objs and 1 in p and p.state(1) == "host" and len(p) == 3
    h2d = p.stats.bytes_h2d
    p.access(1, B, write=True)  # not a first write: its bytes are copied in first
    assert p.stats.bytes_h2d == h2d + B
    p.access(2, B)  # evicts 3
    with pytest.raises(NotResident):
        p.pin(3)
    with pytest.raises(NotPinned):  # (as for an object in host memory whose record is kept)
        p.unpin(3)
    with pytest.raises(ConfigError, match="forget_evicted.*pass its size"):
        p.prefetch(3)
    p.access(4, B)  # evicts 1 (dirty: written back)
    assert p.prefetch(1, B) and p.state(1) == "device" and 1 in p._objs  # fetched: recalled
    assert p.stats.prefetches == 1 and p.stats.bytes_h2d == h2d + 4 * B  # (1, 2, 4 and 1)
    p.access(2, B)  # evicts 4
    p.free(3)  # a forgotten object is freed like one in host memory
    assert 3 not in p and len(p) == 3  # (1, 2, 4)
    with pytest.raises(UnknownKey):
        p.free(3)
    p._check()


def test_what_needs_the_records_is_refused() -> None:
    from cachegym.allocator.backends import NumpyBackend
    from cachegym.policies.prefetch import MarkovPrefetcher

    for kwargs, what in [({"backend": NumpyBackend()}, "a backend"),
                         ({"cost": "h100_pcie5"}, "a timing preset"),
                         ({"hook": print}, "a hook")]:
        with pytest.raises(ConfigError, match=f"forget_evicted=True.*{what}"):
            Pool(8 * B, forget_evicted=True, **kwargs)  # type: ignore[arg-type]
    p = Pool(8 * B, forget_evicted=True)
    with pytest.raises(ConfigError, match="a prefetcher"):
        p.prefetcher = MarkovPrefetcher()
    with pytest.raises(ConfigError, match="a hook"):
        p.hook = print  # type: ignore[assignment]
    with pytest.raises(ConfigError, match="must be a bool"):
        Pool(8 * B, forget_evicted="yes")  # type: ignore[arg-type]


def test_a_pool_forgets_only_above_its_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop_mod, "FORGET_ABOVE", 5)
    p = Pool(2 * B, forget_evicted=True)
    for k in range(20):
        p.access(k, B)
        assert len(p._objs) == min(k + 1, 5) and len(p) == k + 1  # (at most 5 once above)
    p._check()
