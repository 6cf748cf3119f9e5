"""Cheap predictors that propose prefetch candidates: to :class:`envs.prefetch.PrefetchEnv` and
:class:`envs.joint.JointEnv` during training, and to an exported policy's prefetch head
(:meth:`policies.learned.LearnedPolicy.prefetch`) in deployment: one implementation."""

from __future__ import annotations

import numbers
from collections import deque
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import cython
import numpy as np

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.prefetch_timing import PoolTimings, PrefetchTiming
from cachegym.allocator.seams import AWAY

if TYPE_CHECKING:
    from cachegym.allocator.pool import PoolView

__all__ = ["SuccessorPredictor", "make_predictor", "own_predictor", "MAX_HORIZON", "SYNC"]

MAX_HORIZON = 1 << 16
"""Most past accesses :meth:`SuccessorPredictor.propose` reads ahead of the aligned position."""

_POSITIONS = 16  # past positions kept per key: a weight is read ~7 times per AdamW step (forward,
# backward, optimizer), and re-aligning on it at a step boundary needs its position one step back
_CONTEXT = 4  # accesses compared when re-aligning
_SYNC_ALPHA = 1.0 / 64  # weight of an access in the in-sync average
SYNC = 0.5
"""The share of recent accesses (a moving average over about 64) that must have followed the
aligned history for it to propose: below, the trace does not repeat (e.g. Zipf), and it
proposes nothing."""


class SuccessorPredictor:
    """Proposes the objects that followed the accessed one in the past, learned online from the
    accesses it is shown, never from the future, from one of two sources:

    * **Aligned history** (``horizon > 0``): the accesses are matched against their own past,
      one period back, as a DL training step repeats the previous step's order. A cursor points
      at the past access that corresponds to the current one; it advances while each access is
      the one that followed the cursor (or, for a key never seen before, while the past access
      there was also a first access: that old object's successor in this period is the new
      key, e.g. the same layer's activation of the next step, and is remembered as its alias).
      On a mismatch it re-aligns on the past occurrence (of the key, or of the object it
      succeeds) whose four preceding accesses match this one's best, the one nearest the last
      re-alignment's distance among equals; a new object, on its place in a past run of first
      accesses (:meth:`_anchors`). :meth:`propose` reads the ``horizon`` past accesses after the cursor,
      each through its alias, in order of use: what the previous period touched next, including
      the backward pass's reads of this step's activations, which no successor of a past key
      can name. Of those it proposes the ones whose copies are due now
      (:meth:`~allocator.prefetch_timing.PrefetchTiming.due_keys`, the lookahead prefetcher's
      rule), the compute ahead of each use measured in the past period (the pool's
      ``cost.compute_ns`` at each access :meth:`observe` is shown with the pool's view), each
      object's lead corrected by its late arrivals (per lineage: an object and the ones that
      succeed it in later periods share a margin). The last ``memory`` accesses are kept
      (forgotten in bulk once ``2 * memory`` are held: in host memory about 260 bytes per
      access held, up to ~130 MiB at the main job's 262,144; ``memory`` bounds it).
    * **Successor table** (``horizon == 0``): after each access of ``x``, ``x`` becomes the most recent
      successor of each of the ``depth`` objects accessed before it (each keeps its ``width``
      most recent successors); the table is walked breadth-first from the accessed object,
      most recent successors first, up to ``hops`` levels.

    Proposals are up to ``K`` objects known to the pool and not resident (what a prefetch can
    bring in): with ``horizon > 0``, the due ones the aligned history names while it is in sync
    (at least :data:`SYNC` of the recent accesses followed it, and each fitting in the pool
    beside the objects it names before it: ``PrefetchTiming.due_keys``' do-no-harm rule), and
    none otherwise (the first
    period; a trace that does not repeat, e.g. Zipf, where guesses from the successor table
    made a learned head trained on aligned proposals prefetch in vain: docs/EXPERIMENTS.md);
    with ``horizon == 0``, the successor table's.

    Invariants: ``_succ[y]`` is insertion-ordered, least recent successor first; ``_hist[i]`` is
    the ``_base + i``-th access; ``_pos[k]`` holds ``k``'s last positions (absolute), oldest
    first; ``_cursor`` is an absolute position before the current access's, or -1 (unaligned);
    ``_alias`` and ``_origin`` are inverse; ``_runs`` holds the last runs of consecutive first
    accesses, ``[start, length]``, oldest first.
    """

    def __init__(self, depth: int = 2, width: int = 4, hops: int = 3, horizon: int = 0,
                 memory: int = 1 << 20) -> None:
        if depth < 1 or width < 1 or hops < 1:
            raise ConfigError(f"SuccessorPredictor needs depth, width, hops >= 1, got {depth}, {width}, {hops}")
        if not 0 <= horizon <= MAX_HORIZON or memory < 2 * max(horizon, 1):
            raise ConfigError(f"SuccessorPredictor needs 0 <= horizon <= {MAX_HORIZON} (0: no aligned "
                              f"history) and memory >= 2 * horizon accesses, got horizon={horizon}, "
                              f"memory={memory}")
        self.depth, self.width, self.hops = depth, width, hops
        self.horizon, self.memory = horizon, memory
        self.reset()

    def params(self) -> dict[str, int]:
        """The constructor's arguments (written into an exported policy's prefetch head; without
        aligned history, the three of the table alone, as files before it)."""
        p = {"depth": self.depth, "width": self.width, "hops": self.hops}
        if self.horizon:
            p.update(horizon=self.horizon, memory=self.memory)
        return p

    def reset(self) -> None:
        self._succ: dict[int, dict[int, None]] = {}
        self._recent: deque[int] = deque(maxlen=self.depth)
        self._hist: list[int] = []
        self._first: list[bool] = []  # _hist[i] was its key's first access
        self._clock: list[int] = []  # the pool's compute (ns) when _hist[i] was observed
        self._sizes: list[int] = []  # the object's size (bytes) when _hist[i] was observed
        self._root: dict[int, int] = {}  # an object -> the first of its lineage (PrefetchTiming's ident)
        self._max_size = 0
        self.timing = PrefetchTiming()
        self._base = 0
        self._pos: dict[int, list[int]] = {}
        self._alias: dict[int, int] = {}  # an object of the past period -> its successor now
        self._origin: dict[int, int] = {}  # the reverse
        self._runs: list[list[int]] = []  # the last runs of first accesses: [start, length]
        self._cursor = -1
        self._period = 0  # distance of the last re-alignment (0: none yet)
        # the walk of the history after the latest access (_uses), shared by every pool that
        # asks before the next observe(): [key, next index, end, seen, (key, lineage, ahead, size)s,
        # the compute at the walk's start]
        self._walk: list[Any] | None = None
        self._other = PoolTimings()  # the aligned history's timing in other pools (timing_in)
        self._sync = 0.0  # moving average of the accesses that followed the cursor
        self.aligned = 0  # accesses that followed the cursor (counters, for reports and tests)
        self.realigned = 0

    @property
    def in_sync(self) -> bool:
        """Whether the aligned history proposes now (:data:`SYNC`)."""
        return self._cursor >= 0 and self._sync >= SYNC

    def observe(self, key: int, view: PoolView | None = None) -> None:
        """Record an access of ``key`` (with the pool's ``view``: its compute clock and whether
        the access waited for a late prefetch, which the aligned history's timing uses; without
        it every proposal of the history is due at once)."""
        self._walk = None
        if self.horizon:  # (the aligned history alone proposes: no successor table to keep)
            now = size = 0
            if view is not None:
                now = view.cost.compute_ns
                size = view.size(key)
                self._max_size = max(self._max_size, size)
                self.timing.feedback(view, key, self._root.get(key, key))
            self._align(key, now, size)
            return
        succ, width = self._succ, self.width
        for y in self._recent:
            if y == key:
                continue
            s = succ.get(y)
            if s is None:
                s = succ[y] = {}
            elif key in s:
                del s[key]
            s[key] = None
            if len(s) > width:
                del s[next(iter(s))]
        self._recent.appendleft(key)

    def _align(self, key: int, now: int, size: int) -> None:
        hist, base, pos, alias = self._hist, self._base, self._pos, self._alias
        p = base + len(hist)  # this access's position
        past = pos.get(key)
        if past is not None and key in alias:  # an object used again has no successor (yet)
            del self._origin[alias.pop(key)]
        c = seq = self._cursor + 1 if self._cursor >= 0 else -1  # the past access to follow
        if 0 <= c - base < len(hist):
            old = hist[c - base]
            if old == key or alias.get(old) == key:
                self._cursor = c
            elif past is None and self._first[c - base]:
                self._succeed(old, key)  # a new object where the past one was new too
                self._cursor = c
            else:
                c = -1
        else:
            c = -1
        self._sync += ((c >= 0) - self._sync) * _SYNC_ALPHA
        if c >= 0:
            self.aligned += 1
        else:  # re-align on the past occurrence (of the key or of the object it succeeds) whose
            # preceding accesses match this one's best, the nearest one period back first
            cands, off = self._anchors(key, p, past, seq)
            if cands:
                q = self._best(p, cands)
                if past is None:  # this run's new objects succeed those of the past run
                    for j in range(off, -1, -1):
                        self._succeed(hist[q - j - base], hist[p - j - base] if j else key)
                self._cursor = q
                self._period = p - q
                self.realigned += 1
            elif self._cursor >= 0:
                self._cursor += 1  # out of step: drift on
        runs = self._runs
        if past is None:  # this access starts a run of first accesses or extends the last one
            if runs and runs[-1][0] + runs[-1][1] == p:
                runs[-1][1] += 1
            else:
                runs.append([p, 1])
                if len(runs) > _POSITIONS:
                    del runs[0]
        hist.append(key)
        self._first.append(past is None)
        self._clock.append(now)
        self._sizes.append(size)
        if past is None:
            pos[key] = [p]
        else:
            past.append(p)
            if len(past) > _POSITIONS:
                del past[0]
        if len(hist) >= 2 * self.memory:  # keep the last `memory` accesses
            self._trim()

    def _anchors(self, key: int, p: int, past: list[int] | None, seq: int
                 ) -> tuple[list[int], int]:
        """The past positions the access of ``key`` at ``p`` may re-align on, where the
        history's next access ``seq`` (-1: unaligned) did not follow (``past``: the key's
        positions, ``None`` for a first access), and for a first access its place ``off`` in
        its run of first accesses (0 for a used object):

        * an object used before: its past positions and those of the object it succeeds;
        * a new object while unaligned: the place ``off`` in a past run of first accesses
          long enough (the first new object of a period aligns with the first of the past
          one);
        * a new object in a run the history followed until its next access is a reuse of
          an object of a past run (the run's objects used again right after it, as a
          backward pass reads the activations its forward pass saved): the place ``off`` in
          that run. The history had aligned this run with a later place in it (e.g. after a
          first step whose last reads, of the first objects saved, re-aligned on their own
          saves one moment before in the same step; the next step's first save then followed
          the past save of object 3, every later save 3 places off); the caller aligns the
          run's earlier objects again with it. Anything else drifts on (a scan's new objects,
          followed by reuses of other objects: no past run to align with)."""
        if past is not None:
            o = self._origin.get(key)
            return (past + self._pos.get(o, []) if o is not None else list(past)), 0
        runs = self._runs
        off = 0
        if runs and runs[-1][0] + runs[-1][1] == p:  # this access extends the last run
            off = p - runs[-1][0]
            runs = runs[:-1]
        base = self._base
        if self._cursor < 0:
            return [s + off for s, n in runs if off < n and s >= base], off
        i = seq - base
        if not off or not 0 <= i < len(self._hist) or self._first[i]:
            return [], 0
        f = self._pos[self._hist[i]][0]  # the reused object's first position, if still kept
        if not self._first[f - base]:
            return [], 0
        return [s + off for s, n in runs if s <= f < s + n and off < n], off

    def _succeed(self, old: int, key: int) -> None:
        """The new object ``key`` succeeds the past period's ``old`` (each in one pair)."""
        alias, origin = self._alias, self._origin
        was = alias.get(old)
        if was is not None and was != key:
            del origin[was]
        was = origin.get(key)
        if was is not None and was != old:
            del alias[was]
        alias[old] = key
        origin[key] = old
        self._root[key] = self._root.get(old, old)

    @cython.locals(p=cython.Py_ssize_t, q=cython.Py_ssize_t, d=cython.Py_ssize_t, b=cython.Py_ssize_t,
                   a=cython.Py_ssize_t, j=cython.Py_ssize_t, base=cython.Py_ssize_t,
                   period=cython.Py_ssize_t, n=cython.int, best_n=cython.int,
                   best_d=cython.Py_ssize_t, best=cython.Py_ssize_t, hist=list, first=list)
    def _best(self, p: int, cands: list[int]) -> int:
        """The candidate ``q`` whose ``_CONTEXT`` preceding accesses match those before position
        ``p`` most (the same key, its successor by alias, or both first accesses), the nearest
        one period back among equals, the first listed among those (as ``max`` would). The
        context before ``p`` is read once; a candidate that cannot beat the best is not
        compared."""
        hist, first, origin, base = self._hist, self._first, self._origin, self._base
        period = self._period
        # the accesses before p, nearest first: (key, the past object it succeeds -- y with
        # alias[y] == key, _origin being _alias's inverse --, whether it was a first access)
        ctx = []
        for j in range(1, _CONTEXT + 1):
            a = p - j - base
            if a < 0:
                break
            x = hist[a]
            ctx.append((x, origin.get(x), first[a]))
        best, best_n, best_d = cands[0], -1, 0
        for q in cands:
            d = abs(p - q - period)
            if best_n == _CONTEXT and d >= best_d:
                continue  # (no candidate matches more)
            n = 0
            b = q - base
            for x, ox, fa in ctx:
                b -= 1
                if b < 0:
                    break
                y = hist[b]
                if x == y or y == ox or (fa and first[b]):
                    n += 1
            if n > best_n or (n == best_n and d < best_d):
                best, best_n, best_d = q, n, d
        return best

    def _trim(self) -> None:
        """Forget all but the last ``memory`` accesses."""
        hist = self._hist
        drop = len(hist) - self.memory
        self._base += drop
        del hist[:drop], self._first[:drop], self._clock[:drop], self._sizes[:drop]
        lo = self._base
        self._pos = {k: q for k, v in self._pos.items() if (q := [x for x in v if x >= lo])}
        alias, origin, root = self._alias, self._origin, self._root
        if len(alias) > self.memory:  # the oldest pairs (the two stay inverse)
            for k in list(alias)[: len(alias) - self.memory]:
                del origin[alias.pop(k)]
        if len(root) > self.memory:
            for k in list(root)[: len(root) - self.memory]:
                del root[k]
        if self._cursor < lo:
            self._cursor = -1
        self._runs = [r for r in self._runs if r[0] >= lo]

    def timing_in(self, view: PoolView, key: int) -> PrefetchTiming:
        """The aligned history's timing in another pool, ``view`` (a guard's shadow pool under
        the same trace), after learning from that pool's access of ``key`` (called after each
        access there): its late-arrival margins are that pool's own, kept per pool."""
        if not self.horizon:
            return self.timing  # (no timing without a horizon)
        return self._other.after(view, key, self._root.get(key, key))

    def propose_for(self, key: int, K: int, view: PoolView) -> list[int]:
        """:meth:`propose` after the same access in another pool, ``view``, with that pool's
        timing (:meth:`timing_in`); called after each access there."""
        return self.propose(key, K, view, self.timing_in(view, key))

    def propose(self, key: int, K: int, view: PoolView, timing: PrefetchTiming | None = None
                ) -> list[int]:
        """Up to ``K`` objects known to the pool and not resident, most likely next first
        (``timing``: the aligned history's margins in ``view``'s pool; by default its own, learnt
        in the pool it observes)."""
        if self.horizon:  # the aligned history alone: what it names while in sync
            if not self.in_sync:
                return []
            return (timing or self.timing).due_keys(view, key, self._uses(key), K,
                                                    self._max_size)
        objs: dict[int, Any] | None = getattr(view, "objects", None)
        # known and not resident = on the host or being written back; the pool's own view
        # reads each object's record once, another view answers through its public API
        get = objs.get if objs is not None else None
        away, resident = AWAY, view.is_resident

        def away_(z: int) -> bool:
            if get is not None:
                o = get(z)
                return o is not None and o.state in away
            return z in view and not resident(z)

        out: list[int] = []
        seen = {key}
        frontier = [key]
        succ = self._succ
        last = self.hops - 1
        for hop in range(self.hops):
            nxt: list[int] = []
            for y in frontier:
                s = succ.get(y)
                if not s:
                    continue
                for z in reversed(s):
                    if z in seen:
                        continue
                    seen.add(z)
                    if hop != last:
                        nxt.append(z)
                    if not away_(z):
                        continue
                    out.append(z)
                    if len(out) == K:
                        return out
            if not nxt:
                break
            frontier = nxt
        return out

    def _uses(self, key: int) -> Iterator[tuple[int, int, int, int]]:
        """``(key, lineage, ahead_ns, size)`` of the objects the aligned history says come
        next after the access of ``key``, distinct, in order of use (``due_keys``' walk):
        ``ahead_ns`` the compute the past period spent from the access after the aligned one to
        that use, ``size`` the past period's. The walk over the history is made once per access,
        as far as any caller reads it (a guard's shadow pools ask after the same access as the
        pool); residency and the pool's sizes are each caller's (``due_keys``)."""
        w = self._walk
        if w is None or w[0] != key:
            lo = self._cursor + 1 - self._base
            hi = min(lo + self.horizon, len(self._hist) - 1)  # (never the current access)
            w = self._walk = [key, lo, hi, set(), [], self._clock[lo] if lo < hi else 0]
        found: list[tuple[int, int, int, int]] = w[4]
        j = 0
        while True:
            if j == len(found) and not self._walk_on(w):
                return
            yield found[j]
            j += 1

    @cython.locals(i=cython.Py_ssize_t, hi=cython.Py_ssize_t, hist=list, clock=list,
                   sizes=list, alias=dict, seen=set)
    def _walk_on(self, w: list[Any]) -> bool:
        """The walk ``w`` (:meth:`_uses`) finds its next distinct object, if any."""
        i, hi, seen, base = w[1], w[2], w[3], w[5]
        hist, clock, alias, sizes = self._hist, self._clock, self._alias, self._sizes
        while i < hi:
            z = hist[i]
            if alias:
                z = alias.get(z, z)
            i += 1
            if z not in seen:
                seen.add(z)
                w[1] = i
                w[4].append((z, self._root.get(z, z), clock[i - 1] - base, sizes[i - 1]))
                return True
        w[1] = i
        return False


def own_predictor(params: Mapping[str, Any] | SuccessorPredictor | None) -> SuccessorPredictor:
    """:func:`make_predictor`, but a new predictor of the given one's parameters: what an
    environment takes, so that envs made from the same arguments (``make_vec_env``'s
    ``env_kwargs``) never feed one table."""
    return make_predictor(params.params() if isinstance(params, SuccessorPredictor) else params)


def make_predictor(params: Mapping[str, Any] | SuccessorPredictor | None) -> SuccessorPredictor:
    """A :class:`SuccessorPredictor` from its :meth:`~SuccessorPredictor.params` (an env's
    ``predictor`` config, a policy file's ``prefetch.predictor``), or the one given; ``None``:
    the defaults. Raises :class:`~allocator.errors.ConfigError` naming an unknown parameter."""
    if isinstance(params, SuccessorPredictor):
        return params
    if params is None:
        return SuccessorPredictor()
    if not isinstance(params, Mapping):
        raise ConfigError(f"predictor must be a SuccessorPredictor, a dict of its parameters "
                          f"(depth, width, hops, horizon, memory) or None, got {params!r} "
                          f"({type(params).__name__})")
    known = {"depth", "width", "hops", "horizon", "memory"}
    bad = sorted(set(params) - known)
    if bad:
        raise ConfigError(f"predictor: unknown parameter(s) {bad}; known: {sorted(known)}")
    vals = {}
    for k, v in params.items():
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
            raise ConfigError(f"predictor.{k} must be an int, got {v!r}")
        vals[k] = int(v)
    return SuccessorPredictor(**vals)
