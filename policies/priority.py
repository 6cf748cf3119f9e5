"""Priority-queue policies: GDSF (size-aware) and the Belady oracle.

Both keep a binary heap with lazy deletion: an entry is live only while it equals the key's
current priority record, so every hook is O(log n) amortised.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

import numpy as np

from allocator.errors import ConfigError
from allocator.trace import INF, Op, Trace
from policies.base import EvictionPolicyBase

if TYPE_CHECKING:
    from allocator.pool import PoolView

__all__ = ["GDSF", "Belady"]


class GDSF(EvictionPolicyBase):
    """Greedy-Dual-Size-Frequency, as libCacheSim's ``GDSF``.

    Priority of an object = ``L + freq * 1e6 / size``, computed when it is inserted (freq 1) or
    hit (freq + 1); ``L`` (the clock) becomes the priority of each evicted object. The lowest
    priority is evicted; ties go to the object whose last request is oldest.

    Known difference from libCacheSim: libCacheSim inserts the object first and then evicts
    down to capacity, so a new object whose priority is the lowest is evicted at once (it is
    never admitted); the pool evicts before it inserts, so here the new object always stays.

    Invariant: ``_rec[k] = (priority, vtime)`` for every tracked ``k``; ``_heap`` holds
    ``(priority, vtime, k)`` entries, of which those equal to ``_rec[k]`` are live.
    """

    name = "gdsf"

    def __init__(self) -> None:
        self.clock = 0.0
        self._vtime = 0
        self._freq: dict[int, int] = {}
        self._rec: dict[int, tuple[float, int]] = {}
        self._heap: list[tuple[float, int, int]] = []

    def _push(self, view: PoolView, key: int) -> None:
        pri = self.clock + self._freq[key] * 1.0e6 / view.size(key)
        rec = (pri, self._vtime)
        self._rec[key] = rec
        heapq.heappush(self._heap, (pri, self._vtime, key))
        if len(self._heap) > 2 * len(self._rec) + 64:
            self._heap = [(p, t, k) for k, (p, t) in self._rec.items()]
            heapq.heapify(self._heap)

    def victim(self, view: PoolView) -> int | None:
        heap, rec, ev = self._heap, self._rec, view.evictable
        skipped: list[tuple[float, int, int]] = []
        found = None
        while heap:
            p, t, k = heap[0]
            if rec.get(k) != (p, t):
                heapq.heappop(heap)
                continue
            if ev(k):
                found = k
                break
            skipped.append(heapq.heappop(heap))
        for e in skipped:
            heapq.heappush(heap, e)
        return found

    def on_hit(self, view: PoolView, key: int) -> None:
        self._vtime += 1
        if key in self._freq:
            self._freq[key] += 1
            self._push(view, key)

    def on_miss(self, view: PoolView, key: int) -> None:
        self._vtime += 1

    def on_insert(self, view: PoolView, key: int) -> None:
        self._freq[key] = 1
        self._push(view, key)

    def on_evict(self, view: PoolView, key: int) -> None:
        self.clock = self._rec.pop(key)[0]
        del self._freq[key]

    def on_free(self, view: PoolView, key: int) -> None:
        if self._rec.pop(key, None) is not None:
            del self._freq[key]


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
