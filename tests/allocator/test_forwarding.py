"""seams.Forwarding: a wrapper that adds to a policy without rebinding its methods per instance
or discovering attributes; the pool calls the wrapped policy's own on_hit/on_miss through it."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from cachegym.allocator.errors import PolicyError
from cachegym.allocator.pool import Pool
from cachegym.allocator.seams import EvictionPolicyBase, Forwarding, active_hook_of, hook_of
from cachegym.allocator.trace import Trace
from cachegym.policies.adaptive import S3FIFO, SLRU
from cachegym.policies.classic import FIFO
from cachegym.policies.lru import LRU


def _trace(n: int = 3000, seed: int = 0) -> Trace:
    rng = np.random.default_rng(seed)
    keys = rng.zipf(1.2, n) % 300
    sizes = 512 * (1 + keys % 7)
    return Trace.from_arrays(keys, sizes, (rng.random(n) < 0.2).astype(np.int8))


class Count(Forwarding):
    """Counts evictions; everything else is the wrapped policy's."""

    def __init__(self, wrapped: object) -> None:
        super().__init__(wrapped)  # type: ignore[arg-type]
        self.evicted: list[int] = []

    def on_evict(self, view: object, key: int) -> None:
        self.wrapped.on_evict(view, key)  # type: ignore[arg-type]
        self.evicted.append(key)


@pytest.mark.parametrize("make", [LRU, FIFO, S3FIFO, SLRU])
def test_a_forwarded_policy_decides_as_the_policy_alone(make: type) -> None:
    t = _trace()
    alone = Pool(40_000, make(), placement="bytes", oversize="bypass").replay(t)
    fwd = Count(make())
    st = Pool(40_000, fwd, placement="bytes", oversize="bypass").replay(t)
    assert (st.hits, st.misses, st.evictions, st.traffic_bytes) == (
        alone.hits, alone.misses, alone.evictions, alone.traffic_bytes)
    assert len(fwd.evicted) == st.evictions > 0


def test_optional_members_are_the_wrapped_policys() -> None:
    s3 = S3FIFO()
    f = Count(s3)
    assert f.admit == s3.admit and f.pending_evictions == s3.pending_evictions
    assert f.on_free_untracked == s3.on_free_untracked and f.name == "s3fifo"
    lru = LRU()
    assert Count(lru).touch == lru.touch  # kept on_hit: LRU's own touch
    assert Count(lru).admit is None and Count(lru).pending_evictions is None

    class Seen(Forwarding):
        def on_hit(self, view: object, key: int) -> None:
            self.wrapped.on_hit(view, key)  # type: ignore[arg-type]

    assert Seen(lru).touch is None  # its own on_hit: a hit must not bypass it


def test_the_pool_calls_the_wrapped_hooks_without_the_forwarding_method() -> None:
    lru = LRU()
    assert hook_of(Count(lru), "on_hit") == lru.on_hit
    assert hook_of(Count(Count(lru)), "on_hit") == lru.on_hit
    assert active_hook_of(Count(FIFO()), "on_hit") is None  # FIFO's on_hit is the base's no-op
    assert active_hook_of(Count(lru), "on_hit") == lru.on_hit
    f = Count(lru)
    assert hook_of(f, "on_evict") == f.on_evict and hook_of(f, "victim") == lru.victim

    class Plain(EvictionPolicyBase):
        def victim(self, view: object) -> None:
            return None

    assert active_hook_of(Plain(), "on_miss") is None


def test_errors_name_the_wrapped_class_and_a_forwarder_pickles() -> None:
    class Bad(LRU):
        def on_insert(self, view: object, key: int) -> None:
            raise ValueError("boom")

    with pytest.raises(PolicyError, match="Bad"):
        Pool(1 << 20, Count(Bad())).access(1, 10)
    f = Count(LRU())
    pool = Pool(10_000, f)
    for k in range(30):
        pool.access(k, 1000)
    twin = pickle.loads(pickle.dumps(pool))
    assert twin.policy.evicted == f.evicted and len(f.evicted) == 20
