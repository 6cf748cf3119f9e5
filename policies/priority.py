"""Priority-queue policies: GDSF (size-aware) and the Belady oracle.

Both keep a binary heap with lazy deletion: an entry is live only while it equals the key's
current priority record, so every hook is O(log n) amortised.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.trace import INF, Op, Trace
from cachegym.policies.base import EvictionPolicyBase
from cachegym.policies.shadow import ShadowPolicy

if TYPE_CHECKING:
    from cachegym.allocator.pool import PoolView

__all__ = ["GDSF", "Belady"]


def heap_in_order(heap: list[Any]) -> Iterator[Any]:
    """The entries of the binary heap ``heap`` (a :mod:`heapq` list) in ascending order,
    walked lazily without changing it: O(log m) per entry yielded (a best-first walk of the
    heap's tree), so a reader of the first few pays for those alone. The entries are tuples (GDSF's
    and Belady's); the walk's own heap holds each with its index appended, flat, so that comparing
    two costs one tuple comparison, not a comparison of nested tuples (Belady's order with a
    prefetcher spent a third of its time in those)."""
    frontier = [heap[0] + (0,)] if heap else []
    n = len(heap)
    while frontier:
        i = heapq.heappop(frontier)[-1]
        yield heap[i]
        c = 2 * i + 1
        if c < n:
            heapq.heappush(frontier, heap[c] + (c,))
            if c + 1 < n:
                heapq.heappush(frontier, heap[c + 1] + (c + 1,))


class GDSF(ShadowPolicy):
    """Greedy-Dual-Size-Frequency, as libCacheSim's ``GDSF``.

    Priority of an object = ``L + freq * 1e6 / size``, computed when it is inserted (freq 1) or
    hit (freq + 1); ``L`` (the clock) becomes the priority of each evicted object. The lowest
    priority is evicted; ties go to the object whose last request is oldest.

    libCacheSim inserts the object first and then evicts down to capacity, so a new object
    whose priority is the lowest is evicted at once (never admitted), which the pool cannot
    do (it evicts before it inserts, and always admits). This class therefore runs the
    algorithm as a model (:class:`~policies.shadow.ShadowPolicy`) whose decisions are
    libCacheSim's; the pool evicts what the model dropped first, and its misses differ from
    libCacheSim's only on accesses to objects the model dropped but the pool still held, or
    that the pool had to give up for an object the model refused.

    Invariant: ``_rec[k] = (priority, vtime)`` for every object of the model; ``_heap`` holds
    ``(priority, vtime, k)`` entries, of which those equal to ``_rec[k]`` are live.
    """

    name = "gdsf"

    def __init__(self) -> None:
        super().__init__()
        self.clock = 0.0
        self.cap = -1
        self.occupied = 0
        self._vtime = 0
        self._freq: dict[int, int] = {}
        self._size: dict[int, int] = {}
        self._rec: dict[int, tuple[float, int]] = {}
        self._heap: list[tuple[float, int, int]] = []

    # ---------------------------------------------------------------- ShadowPolicy
    def _setup(self, capacity: int) -> None:
        self.cap = capacity

    def _resident(self, key: int) -> bool:
        return key in self._rec

    def _request(self, key: int, size: int) -> bool:
        self._vtime += 1
        if key in self._rec:
            self._freq[key] += 1
            self._push(key)
            return True
        if size > self.cap:
            return False
        self._freq[key] = 1
        self._size[key] = size
        self.occupied += size
        self._push(key)
        while self.occupied > self.cap:
            k = self._pop_min()
            self._drop(k)
        return False

    def _fallback(self) -> Iterable[int]:
        """Live heap entries in priority order, walked lazily (O(log m) per key yielded)."""
        rec = self._rec
        for p, t, k in heap_in_order(self._heap):
            if rec.get(k) == (p, t):
                yield k

    def _remove(self, key: int) -> None:
        """An eviction chosen outside the model: it moves the clock as an eviction does."""
        if key in self._rec:
            self.clock = self._rec[key][0]
            self._forget(key)

    def on_free(self, view: PoolView, key: int) -> None:
        self._in_pool.discard(key)
        if key in self._pending:
            del self._pending[key]
        elif key in self._rec:
            self._forget(key)  # a free is no eviction: the clock stays

    # ---------------------------------------------------------------- the model (libCacheSim)
    def _push(self, key: int) -> None:
        pri = self.clock + self._freq[key] * 1.0e6 / self._size[key]
        self._rec[key] = (pri, self._vtime)
        heapq.heappush(self._heap, (pri, self._vtime, key))
        if len(self._heap) > 2 * len(self._rec) + 64:
            self._heap = [(p, t, k) for k, (p, t) in self._rec.items()]
            heapq.heapify(self._heap)

    def _pop_min(self) -> int:
        heap, rec = self._heap, self._rec
        while True:
            p, t, k = heapq.heappop(heap)
            if rec.get(k) == (p, t):
                self.clock = p
                self._forget(k)
                return k

    def _forget(self, key: int) -> None:
        del self._rec[key]
        del self._freq[key]
        self.occupied -= self._size.pop(key)


class Belady(EvictionPolicyBase):
    """Belady's MIN oracle: evicts the object whose next use is farthest in the future.

    Reads the future from ``trace``: on every access at ``view.tick`` (the trace row when the
    pool replays ``trace`` from its start) the object's next use is ``trace.next_use()[tick]``.
    An object brought in by a prefetch gets the row of its next access after ``view.tick``.
    Objects never used again (next use INF) go first; among them the larger key goes first.

    Invariant: ``_next[k]`` is the next-use row of every tracked ``k``; ``_heap`` holds
    ``(-next, -k)`` entries (a max-heap on next use), live while equal to ``_next[k]``.
    """

    name = "belady"

    def __init__(self, trace: Trace) -> None:
        if not isinstance(trace, Trace):
            raise ConfigError("Belady needs the trace it will replay: Belady(trace)")
        self.trace = trace
        self._nxt = trace.next_use()
        self._n = len(trace)
        order = np.argsort(trace.key, kind="stable")
        self._sorted_keys = trace.key[order]
        self._rows = order  # rows of each key ascending (stable sort)
        self._next: dict[int, int] = {}
        self._heap: list[tuple[int, int]] = []

    def _row(self, view: PoolView) -> int:
        t = view.tick
        if not 0 <= t < self._n:
            raise ConfigError(
                f"Belady: pool tick {t} is outside the trace ({self._n} rows); replay the same "
                "trace from its start with a fresh pool")
        return t

    def next_after(self, key: int, tick: int) -> int:
        """Row of the next read/write of ``key`` after row ``tick`` (INF if none or freed)."""
        lo = int(np.searchsorted(self._sorted_keys, key, "left"))
        hi = int(np.searchsorted(self._sorted_keys, key, "right"))
        rows = self._rows[lo:hi]
        i = int(np.searchsorted(rows, tick, "right"))
        if i >= len(rows):
            return int(INF)
        r = int(rows[i])
        return int(INF) if self.trace.op[r] == Op.FREE else r

    def _set(self, key: int, nxt: int) -> None:
        self._next[key] = nxt
        heapq.heappush(self._heap, (-nxt, -key))
        if len(self._heap) > 2 * len(self._next) + 64:
            self._heap = [(-n, -k) for k, n in self._next.items()]
            heapq.heapify(self._heap)

    def victim(self, view: PoolView) -> int | None:
        heap, nxt, ev = self._heap, self._next, view.evictable
        skipped: list[tuple[int, int]] = []
        found = None
        while heap:
            n, k = heap[0]
            if nxt.get(-k) != -n:
                heapq.heappop(heap)
                continue
            if ev(-k):
                found = -k
                break
            skipped.append(heapq.heappop(heap))
        for e in skipped:
            heapq.heappush(heap, e)
        return found

    def eviction_order(self) -> Iterable[int]:
        """The tracked objects in :meth:`victim`'s order (farthest next use first, the larger
        key first among equals), without changing the policy's state: the live heap entries
        walked lazily (O(log m) per key yielded)."""
        nxt = self._next
        seen: set[int] = set()
        for n, k in heap_in_order(self._heap):
            if nxt.get(-k) == -n and -k not in seen:  # (a live entry may be there twice)
                seen.add(-k)
                yield -k

    def on_hit(self, view: PoolView, key: int) -> None:
        self._set(key, int(self._nxt[self._row(view)]))

    def on_insert(self, view: PoolView, key: int) -> None:
        t = self._row(view)
        if int(self.trace.key[t]) == key:
            self._set(key, int(self._nxt[t]))
        else:  # a prefetch of another object
            self._set(key, self.next_after(key, t))

    def on_evict(self, view: PoolView, key: int) -> None:
        del self._next[key]

    def on_free(self, view: PoolView, key: int) -> None:
        self._next.pop(key, None)

    def __repr__(self) -> str:
        return f"Belady(trace={self.trace.name!r})"
