"""``eviction_order()`` says what ``victim`` would give up next, without changing any state.

The pool's clean-ahead (``Pool(clean_ahead=)``), the prefetch timing rule (no prefetch that
evicts an object used before it) and a guard following an expert read it; a policy without one
cleans nothing and lets the timing rule guess. Checked here against the policy itself: on a
copy of the policy, ``victim`` asked again and again (each victim evicted from the copy) gives
the evictable objects of the order, in that order.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from cachegym.allocator.pool import Pool
from cachegym.allocator.trace import Trace
from cachegym.policies.base import first_evictable
from cachegym.policies.registry import make_eviction

# the policies whose victims, asked in a row, follow their order exactly; the others (model
# policies that also evict on their own, and ARC, whose ghosts move its choice) are checked on
# the first victim
EXACT = ["lru", "fifo", "lfu", "clock", "sieve", "belady"]
FIRST = ["arc", "gdsf", "s3fifo", "slru", "lirs"]


def _trace(seed: int, n: int = 1500) -> Trace:
    rng = np.random.default_rng(seed)
    key = (rng.zipf(1.3, n) % 120).astype(np.int64)
    size = (1 + key % 5) * 512
    return Trace.from_arrays(key, size, name=f"order{seed}")


@pytest.mark.parametrize("name", EXACT + FIRST)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_victims_asked_in_a_row_follow_the_eviction_order(name: str, seed: int) -> None:
    t = _trace(seed)
    pol = make_eviction(name, trace=t)
    pool = Pool(int(0.2 * 120 * 1536), pol, placement="bytes", oversize="bypass")
    view = pool.view
    rng = np.random.default_rng(seed + 10)
    checked = 0
    for i in range(len(t)):
        pool.access(int(t.key[i]), int(t.size[i]))
        res = pool.resident_keys()
        if res and rng.random() < 0.05:  # pin a resident object now and then, unpin another
            pool.pin(res[int(rng.integers(len(res)))])
            pinned = [k for k in res if pool.view.objects[k].pins]
            if len(pinned) > 3:
                pool.unpin(pinned[0])
        if i % 37 or not pol.eviction_order:
            continue
        order = [k for k in pol.eviction_order() if view.evictable(k)]
        assert len(order) == len(set(order))
        cp = copy.deepcopy(pol)
        n = 12 if name in EXACT else 1
        got = []
        for _ in range(min(n, len(order))):
            v = cp.victim(view)
            got.append(v)
            cp.on_evict(view, v)
        assert got == order[:len(got)], (i, got, order[:12])
        assert first_evictable(view, pol.eviction_order()) == copy.deepcopy(pol).victim(view)
        checked += 1
    assert checked > 20


@pytest.mark.parametrize("name", ["clock", "sieve", "arc", "belady"])
def test_the_order_changes_no_state(name: str) -> None:
    t = _trace(3)
    pol = make_eviction(name, trace=t)
    pool = Pool(20 * 1536, pol, placement="bytes", oversize="bypass")
    for i in range(400):
        pool.access(int(t.key[i]), int(t.size[i]))
    before = copy.deepcopy(pol.__dict__)
    for _ in range(3):
        assert sorted(pol.eviction_order()) == sorted(pool.resident_keys())
    after = pol.__dict__
    for k, v in before.items():
        if k != "trace":
            assert repr(after[k]) == repr(v), k


def test_the_lazy_heap_walk_is_the_sorted_heap_and_leaves_it_unchanged() -> None:
    """``heap_in_order`` (GDSF's and Belady's orders) yields a heapq list's entries in ascending
    order, lazily, without changing the list."""
    import heapq

    from cachegym.policies.priority import heap_in_order

    rng = np.random.default_rng(0)
    for n in (0, 1, 2, 7, 100):
        heap = [(int(x), i) for i, x in enumerate(rng.integers(0, 20, n))]
        heapq.heapify(heap)
        before = list(heap)
        assert list(heap_in_order(heap)) == sorted(heap) and heap == before
        first = heap_in_order(heap)
        assert [next(first) for _ in range(min(n, 3))] == sorted(heap)[:3]
