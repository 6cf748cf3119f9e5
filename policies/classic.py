"""Classic eviction heuristics: FIFO, LFU, Random, CLOCK and SIEVE.

Each class tracks exactly the objects on the device or in flight to it (see
:mod:`policies.base`). Semantics follow libCacheSim's C implementations so that, in
byte-accounting placement with ``oversize="bypass"``, miss counts equal libCacheSim's
(``tests/policies/test_parity.py``). Objects that are pinned or still in flight are passed over
by :meth:`victim` (libCacheSim has no such objects).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from cachegym.allocator.errors import ConfigError
from cachegym.policies.base import EvictionPolicyBase, first_evictable
from cachegym.policies.lru import OrderedPolicy

if TYPE_CHECKING:
    from cachegym.allocator.pool import PoolView

__all__ = ["FIFO", "LFU", "RandomEviction", "CLOCK", "SIEVE"]


class FIFO(OrderedPolicy):
    """Evicts the evictable object inserted first; hits change nothing (libCacheSim ``FIFO``):
    :class:`~policies.lru.OrderedPolicy` in insertion order."""

    name = "fifo"


class LFU(EvictionPolicyBase):
    """Evicts the evictable object with the fewest accesses since it was inserted.

    As libCacheSim's ``LFU``: an object is inserted with frequency 1 (nothing is remembered
    after eviction), every hit adds 1, and among objects of the lowest frequency the one that
    reached that frequency first is evicted (FIFO within a frequency).

    Invariants: ``_buckets[f]`` holds the tracked objects of frequency ``f`` in the order they
    reached it; ``_freq`` maps every tracked key to its frequency; ``_min`` is the lowest
    frequency with a non-empty bucket (or 1 when nothing is tracked).
    """

    name = "lfu"

    def __init__(self) -> None:
        self._freq: dict[int, int] = {}
        self._buckets: dict[int, OrderedDict[int, None]] = {}
        self._min = 1

    def _add(self, key: int, f: int) -> None:
        self._freq[key] = f
        b = self._buckets.get(f)
        if b is None:
            b = self._buckets[f] = OrderedDict()
        b[key] = None

    def _remove(self, key: int) -> None:
        f = self._freq.pop(key)
        b = self._buckets[f]
        del b[key]
        if not b:
            del self._buckets[f]
            if f == self._min:
                self._min = self._next_min(f)

    def _next_min(self, f: int) -> int:
        """The lowest frequency above ``f`` with a bucket (1 when there is none)."""
        buckets = self._buckets
        if not buckets:
            return 1
        for g in range(f + 1, f + 65):  # usually the next level or two
            if g in buckets:
                return g
        return min(buckets)

    def victim(self, view: PoolView) -> int | None:
        b = self._buckets.get(self._min)
        if b is not None:
            k = first_evictable(view, b)
            if k is not None:
                return k
        # pinned or in-flight objects at the lowest frequency: the whole order
        return first_evictable(view, self.eviction_order())

    def eviction_order(self) -> Iterator[int]:  # type: ignore[override]
        """The tracked objects in :meth:`victim`'s order (lowest frequency first, FIFO within
        one), without changing the policy's state."""
        for f in sorted(self._buckets):
            yield from self._buckets[f]

    def on_hit(self, view: PoolView, key: int) -> None:
        f = self._freq.get(key)
        if f is None:  # not tracked (cannot happen through the pool)
            return
        b = self._buckets[f]
        del b[key]
        if not b:
            del self._buckets[f]
        self._add(key, f + 1)
        if f == self._min and f not in self._buckets:
            self._min = f + 1

    def on_insert(self, view: PoolView, key: int) -> None:
        self._add(key, 1)
        self._min = 1

    def on_evict(self, view: PoolView, key: int) -> None:
        self._remove(key)

    def on_free(self, view: PoolView, key: int) -> None:
        if key in self._freq:
            self._remove(key)


class RandomEviction(EvictionPolicyBase):
    """Evicts an evictable object drawn uniformly at random from ``np.random.default_rng(seed)``.

    Deterministic for a given seed and request sequence. (libCacheSim's ``Random`` uses its
    own generator, so only statistical agreement with it is expected.)

    Invariant: ``_keys`` lists the tracked objects and ``_pos[k]`` is ``k``'s index in it.
    """

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        self._keys: list[int] = []
        self._pos: dict[int, int] = {}

    def victim(self, view: PoolView) -> int | None:
        n = len(self._keys)
        if n == 0:
            return None
        ev = view.evictable
        for _ in range(32):
            k = self._keys[int(self._rng.integers(n))]
            if ev(k):
                return k
        # mostly pinned or in flight: draw among the evictable ones only
        cands = [k for k in self._keys if ev(k)]
        return cands[int(self._rng.integers(len(cands)))] if cands else None

    def on_insert(self, view: PoolView, key: int) -> None:
        self._pos[key] = len(self._keys)
        self._keys.append(key)

    def on_evict(self, view: PoolView, key: int) -> None:
        i = self._pos.pop(key)
        last = self._keys.pop()
        if last != key:
            self._keys[i] = last
            self._pos[last] = i

    def on_free(self, view: PoolView, key: int) -> None:
        if key in self._pos:
            self.on_evict(view, key)

    def __repr__(self) -> str:
        return f"RandomEviction(seed={self.seed})"


class CLOCK(EvictionPolicyBase):
    """CLOCK (FIFO with reinsertion) with an ``n_bits`` saturating reference counter.

    As libCacheSim's ``Clock`` (``n-bit-counter=1, init-freq=0`` by default): a new object
    enters at the head with counter ``init_freq``; a hit raises the counter by one up to
    ``2**n_bits - 1``; eviction looks at the tail: a non-zero counter is decremented and the
    object moves to the head, a zero counter is evicted. Pinned or in-flight objects at the
    tail move to the head unchanged.

    Invariant: ``_q`` holds exactly the tracked objects, tail (oldest) first, mapped to their
    counters.
    """

    name = "clock"

    def __init__(self, n_bits: int = 1, init_freq: int = 0) -> None:
        if n_bits < 1:
            raise ConfigError(f"CLOCK n_bits must be >= 1, got {n_bits}")
        self.n_bits = n_bits
        self.max_freq = (1 << n_bits) - 1
        if not 0 <= init_freq <= self.max_freq:
            raise ConfigError(f"CLOCK init_freq must be in [0, {self.max_freq}], got {init_freq}")
        self.init_freq = init_freq
        self._q: OrderedDict[int, int] = OrderedDict()

    def victim(self, view: PoolView) -> int | None:
        q, ev = self._q, view.evictable
        for _ in range(len(q) * (self.max_freq + 1) + 1):
            k, f = next(iter(q.items()))
            if f >= 1 and ev(k):
                q[k] = f - 1
                q.move_to_end(k)
            elif not ev(k):
                q.move_to_end(k)
            else:
                return k
        return first_evictable(view, q)

    def eviction_order(self) -> Iterator[int]:  # type: ignore[override]
        """The tracked objects in the order :meth:`victim` would give them up if asked again and
        again with nothing in between, without changing the policy's state: the hand's r-th
        round evicts, in queue order, the objects whose counter was r (each round decrements
        the others and moves them to the head in the same order)."""
        q = self._q
        for r in range(self.max_freq + 1):
            for k, f in q.items():
                if f == r:
                    yield k

    def on_hit(self, view: PoolView, key: int) -> None:
        f = self._q.get(key)
        if f is not None and f < self.max_freq:
            self._q[key] = f + 1

    def on_insert(self, view: PoolView, key: int) -> None:
        self._q[key] = self.init_freq

    def on_evict(self, view: PoolView, key: int) -> None:
        del self._q[key]

    def on_free(self, view: PoolView, key: int) -> None:
        self._q.pop(key, None)

    def __repr__(self) -> str:
        return f"CLOCK(n_bits={self.n_bits}, init_freq={self.init_freq})"


class SIEVE(EvictionPolicyBase):
    """SIEVE (Zhang et al., NSDI'24), as libCacheSim's ``Sieve``.

    New objects enter at the head with the visited bit clear; a hit sets it. The hand starts
    at the tail and moves towards the head, clearing set bits, and evicts the first object
    whose bit is clear; it then rests on the next newer object (wrapping to the tail past the
    head). Objects never move. Pinned or in-flight objects are passed over like visited ones,
    without clearing anything.

    Invariants: ``_newer``/``_older`` link exactly the tracked objects from ``_tail`` (oldest) to
    ``_head`` (newest); ``_hand`` is a tracked key or ``None`` (meaning: start at the tail).
    """

    name = "sieve"

    def __init__(self) -> None:
        self._visited: dict[int, bool] = {}
        self._newer: dict[int, int | None] = {}
        self._older: dict[int, int | None] = {}
        self._head: int | None = None
        self._tail: int | None = None
        self._hand: int | None = None

    def victim(self, view: PoolView) -> int | None:
        if self._tail is None:
            return None
        ev, vis, newer = view.evictable, self._visited, self._newer
        obj = self._tail if self._hand is None else self._hand
        skipped = 0
        n = len(vis)
        while vis[obj] or not ev(obj):
            if vis[obj] and ev(obj):
                vis[obj] = False
                skipped = 0
            else:
                skipped += 1
                if skipped > n:  # nothing evictable
                    return None
            nxt = newer[obj]
            obj = self._tail if nxt is None else nxt
        self._hand = obj
        return obj

    def eviction_order(self) -> Iterator[int]:  # type: ignore[override]
        """The tracked objects in the order :meth:`victim` would give them up if asked again and
        again with nothing in between, without changing the policy's state: from the hand
        around the queue (towards the head, then from the tail) the unvisited objects, then,
        their bits cleared by that lap, the visited ones in the same circular order."""
        if self._tail is None:
            return
        vis, newer = self._visited, self._newer
        start = self._tail if self._hand is None else self._hand
        for want in (False, True):
            obj: int | None = start
            while True:
                assert obj is not None
                if vis[obj] is want:
                    yield obj
                nxt = newer[obj]
                obj = self._tail if nxt is None else nxt
                if obj == start:
                    break

    def on_hit(self, view: PoolView, key: int) -> None:
        if key in self._visited:
            self._visited[key] = True

    def on_insert(self, view: PoolView, key: int) -> None:
        self._visited[key] = False
        self._older[key] = self._head
        self._newer[key] = None
        if self._head is not None:
            self._newer[self._head] = key
        self._head = key
        if self._tail is None:
            self._tail = key

    def _unlink(self, key: int) -> None:
        newer, older = self._newer.pop(key), self._older.pop(key)
        del self._visited[key]
        if self._hand == key:
            self._hand = newer
        if newer is None:
            self._head = older
        else:
            self._older[newer] = older
        if older is None:
            self._tail = newer
        else:
            self._newer[older] = newer

    def on_evict(self, view: PoolView, key: int) -> None:
        self._unlink(key)

    def on_free(self, view: PoolView, key: int) -> None:
        if key in self._visited:
            self._unlink(key)
