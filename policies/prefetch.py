"""Prefetch policies: none, Markov successor, stride / next-N, and the lookahead oracle.

A prefetcher answers ``prefetch(view, key) -> keys`` after every access of ``key``; the pool
copies, in order, those returned keys that it knows and that are not resident or in flight.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.prefetch_timing import PoolTimings, PrefetchTiming
from cachegym.allocator.trace import Op, Trace
from cachegym.policies.base import PrefetchPolicyBase
from cachegym.policies.successors import SuccessorPredictor

if TYPE_CHECKING:
    from cachegym.allocator.pool import PoolView

__all__ = ["NoPrefetch", "MarkovPrefetcher", "StridePrefetcher", "HistoryPrefetcher", "LookaheadPrefetcher",
           "HISTORY_DEPTH"]


class NoPrefetch(PrefetchPolicyBase):
    """Never prefetches."""

    name = "none"

    def reset(self) -> None:
        """Nothing to forget (a pool calls it before it uses the prefetcher again)."""

    def __repr__(self) -> str:
        return "NoPrefetch()"


class MarkovPrefetcher(PrefetchPolicyBase):
    """First-order Markov (successor) prefetcher.

    Remembers, for each object, the ``width`` distinct objects that followed it most recently
    (most recent first). After an access of ``k`` it returns those successors, and follows the
    most recent successor chain ``depth`` steps (``k -> s1 -> s2 ...``). At most ``max_entries``
    objects are remembered (least recently updated forgotten first).
    """

    name = "markov"

    def __init__(self, depth: int = 1, width: int = 1, max_entries: int = 1 << 20) -> None:
        if depth < 1 or width < 1 or max_entries < 1:
            raise ConfigError(f"MarkovPrefetcher needs depth, width, max_entries >= 1, got "
                              f"{depth}, {width}, {max_entries}")
        self.depth, self.width, self.max_entries = depth, width, max_entries
        self.reset()

    def reset(self) -> None:
        """Forget the successors seen (a new pool)."""
        self._succ: OrderedDict[int, list[int]] = OrderedDict()
        self._prev: int | None = None

    def prefetch(self, view: PoolView, key: int) -> Sequence[int]:
        prev, self._prev = self._prev, key
        if prev is not None and prev != key:
            s = self._succ.pop(prev, None) or []
            if key in s:
                s.remove(key)
            s.insert(0, key)
            del s[self.width:]
            self._succ[prev] = s
            if len(self._succ) > self.max_entries:
                self._succ.popitem(last=False)
        out: list[int] = []
        first = self._succ.get(key)
        if first:
            out.extend(k for k in first if k != key)
        cur = first[0] if first else None
        for _ in range(self.depth - 1):
            if cur is None:
                break
            nxt = self._succ.get(cur)
            cur = nxt[0] if nxt else None
            if cur is not None and cur != key and cur not in out:
                out.append(cur)
        return out

    def __repr__(self) -> str:
        return f"MarkovPrefetcher(depth={self.depth}, width={self.width})"


class StridePrefetcher(PrefetchPolicyBase):
    """Stride / next-N prefetcher over object keys.

    Tracks the difference between consecutive accessed keys. Once the same non-zero stride
    ``s`` has been seen ``confirm`` times in a row, an access of ``k`` prefetches
    ``k + s, ..., k + degree * s``. With ``confirm=0`` it is a plain next-N prefetcher
    (stride 1 until another stride is confirmed).
    """

    name = "stride"

    def __init__(self, degree: int = 2, confirm: int = 1) -> None:
        if degree < 1 or confirm < 0:
            raise ConfigError(f"StridePrefetcher needs degree >= 1 and confirm >= 0, got "
                              f"{degree}, {confirm}")
        self.degree, self.confirm = degree, confirm
        self.reset()

    def reset(self) -> None:
        """Forget the strides seen (a new pool)."""
        self._prev: int | None = None
        self._stride = 0
        self._seen = 0

    def prefetch(self, view: PoolView, key: int) -> Sequence[int]:
        if self._prev is not None:
            s = key - self._prev
            if s != 0 and s == self._stride:
                self._seen += 1
            elif s != 0:
                self._stride, self._seen = s, 0
        self._prev = key
        stride = self._stride
        if self.confirm == 0 and self._seen == 0 and stride == 0:
            stride = 1
        if stride == 0 or self._seen < self.confirm:
            return ()
        return [key + i * stride for i in range(1, self.degree + 1)]

    def __repr__(self) -> str:
        return f"StridePrefetcher(degree={self.degree}, confirm={self.confirm})"


HISTORY_DEPTH = 4
"""Most prefetches per access of :class:`HistoryPrefetcher` by default (and of a learned
head's ``history`` mode, :meth:`~policies.learned.LearnedPolicy.history_for`)."""


class HistoryPrefetcher(PrefetchPolicyBase):
    """The aligned history's proposals, prefetched as they come: after each access, the objects
    the previous period used next that are due now (:class:`~policies.successors.
    SuccessorPredictor` with ``horizon``: the accesses matched against one period back, new
    objects by their position, the compute ahead of each use as measured then, the lookahead
    prefetcher's timing rule), at most ``depth``; nothing while the history is not in sync
    (the first period, a trace that does not repeat). It reads no future: the
    heuristic counterpart of a learned prefetch head using the same proposer (which decides
    which of them to prefetch, if any)."""

    name = "history"

    def __init__(self, depth: int = HISTORY_DEPTH, horizon: int = 64, memory: int = 1 << 18) -> None:
        if depth < 1:
            raise ConfigError(f"HistoryPrefetcher depth must be >= 1, got {depth}")
        if horizon < 1:
            raise ConfigError(f"HistoryPrefetcher horizon must be >= 1 (accesses read ahead), got {horizon}")
        self.depth = depth
        self.predictor = SuccessorPredictor(horizon=horizon, memory=memory)
        self.prefetch_muted = False  # set by a guard following an expert judged without it

    def reset(self) -> None:
        """Forget the history (a new pool)."""
        self.predictor.reset()
        self.prefetch_muted = False

    def prefetch(self, view: PoolView, key: int) -> Sequence[int]:
        self.predictor.observe(key, view)
        if self.prefetch_muted:
            return ()
        return self.predictor.propose(key, self.depth, view)

    def prefetch_for(self, view: PoolView, key: int) -> Sequence[int]:  # type: ignore[override]
        """What :meth:`prefetch` would have returned after the same access of ``key`` in another
        pool, ``view`` (a guard's shadow pool: that pool's residency, copies in flight and
        late-arrival margins), without changing the history."""
        return self.predictor.propose_for(key, self.depth, view)

    def __repr__(self) -> str:
        return f"HistoryPrefetcher(depth={self.depth}, horizon={self.predictor.horizon})"


class LookaheadPrefetcher(PrefetchPolicyBase):
    """Oracle: prefetches the objects the future trace will touch, each when its copy is due.

    After the access at ``view.tick`` (the trace row when the pool replays ``trace`` from its
    start) it scans rows ``tick+1 .. tick+window`` for the distinct keys the pool knows, that
    are not resident and not freed before that use, in order of first use. Each is prefetched
    now when the trace's compute still ahead of its use (``compute_ns``), less the compute
    before the next access, no longer covers its copy (the pool's cost model's latency +
    bytes / bandwidth) after the copies queued before it and its learnt margin
    (:class:`~allocator.prefetch_timing.PrefetchTiming`: an object whose prefetch arrived late
    starts earlier next time), and while it fits in the pool beside every object the rows use
    before it (do no harm: past that, holding it would push out an object needed sooner).
    At most ``depth`` prefetches per access. Without compute times
    or a cost model every copy is due at once: the next ``depth`` objects, in order of use.
    ``window`` defaults to ``8 * depth``.
    """

    name = "lookahead"

    def __init__(self, trace: Trace, depth: int = 4, window: int | None = None,
                 gain: float = 1.0) -> None:
        if not isinstance(trace, Trace):
            raise ConfigError("LookaheadPrefetcher needs the trace it will replay")
        if depth < 1:
            raise ConfigError(f"LookaheadPrefetcher depth must be >= 1, got {depth}")
        self.trace, self.depth = trace, depth
        self.window = 8 * depth if window is None else int(window)
        if self.window < 1:
            raise ConfigError(f"LookaheadPrefetcher window must be >= 1, got {window}")
        self._gain = gain
        self.reset()
        self._key = trace.key
        self._free = trace.op == Op.FREE
        # compute before row j: _cum[j] (the compute after rows 0 .. j-1; a free row's is none:
        # the pool runs the compute after accesses, Pool.replay)
        run = np.where(self._free, 0, trace.compute_ns)
        self._cum = np.concatenate(([0], np.cumsum(run, dtype=np.int64)))
        self._max_size = int(trace.size.max()) if len(trace) else 0
        self._size = trace.size

    def reset(self) -> None:
        """Forget the timing learnt (a new pool, which replays the trace from its start)."""
        self.timing = PrefetchTiming(self._gain)
        self._other = PoolTimings(self._gain)  # the timing in other pools (prefetch_for)
        self._tick = -1  # the row of the latest access it was asked after
        self.prefetch_muted = False  # set by a guard following an expert judged without it

    def prefetch(self, view: PoolView, key: int) -> Sequence[int]:
        self.timing.feedback(view, key, key)
        self._tick = view.tick
        if self.prefetch_muted:
            return ()
        return self._due(view, key, self.timing)

    def prefetch_for(self, view: PoolView, key: int) -> Sequence[int]:  # type: ignore[override]
        """What :meth:`prefetch` would have returned after the same access of ``key`` (the
        trace row it was last asked at) in another pool, ``view`` (a guard's shadow pool: that
        pool's residency, copies in flight and late-arrival margins)."""
        return self._due(view, key, self._other.after(view, key))

    def _due(self, view: PoolView, key: int, timing: PrefetchTiming) -> Sequence[int]:
        """The objects due now after the access of ``key`` at row ``_tick``, in ``view``."""
        lo = self._tick + 1
        hi = min(lo + self.window, len(self._key))
        if lo >= hi:
            return ()
        return timing.due_keys(view, key, self._uses(lo, hi), self.depth, self._max_size)

    def _uses(self, lo: int, hi: int) -> Iterator[tuple[int, int, int, int]]:
        """``(key, key, ahead_ns, size)`` of the distinct objects rows ``lo .. hi-1`` use that
        are not freed before that use, in order of first use (``due_keys``' walk); ``ahead_ns``
        the compute from row ``lo`` to the use, ``size`` the trace's."""
        cum = self._cum
        base = int(cum[lo])  # compute done when the next decision point comes
        seen: set[int] = set()
        freed: set[int] = set()
        rows = zip(self._key[lo:hi].tolist(), self._free[lo:hi].tolist(),
                   self._size[lo:hi].tolist(), cum[lo:hi].tolist())
        for k, is_free, size, done in rows:
            if is_free:
                freed.add(k)
                continue
            if k in freed or k in seen:
                continue
            seen.add(k)
            yield k, k, done - base, size

    def __repr__(self) -> str:
        return f"LookaheadPrefetcher(trace={self.trace.name!r}, depth={self.depth})"
