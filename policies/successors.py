"""Cheap predictors that propose prefetch candidates: to :class:`envs.prefetch.PrefetchEnv` and
:class:`envs.joint.JointEnv` during training, and to an exported policy's prefetch head
(:meth:`policies.learned.LearnedPolicy.prefetch`) in deployment: one implementation."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.pool import D2H, DEVICE, H2D, HOST

if TYPE_CHECKING:
    from cachegym.allocator.pool import PoolView

__all__ = ["SuccessorPredictor"]

_AWAY = (HOST, D2H)  # the residency states of an object that is known and not resident
assert {DEVICE, H2D}.isdisjoint(_AWAY) and len({DEVICE, H2D, *_AWAY}) == 4
assert (HOST, D2H) == (1, 3), "allocator/csrc/decision.c's propose reads these states"


class SuccessorPredictor:
    """Proposes the objects that followed the accessed one in the past (a Markov successor
    table, learned online from the accesses it is shown, never from the future).

    After each access of ``x``, ``x`` becomes the most recent successor of each of the
    ``depth`` objects accessed before it (each object keeps its ``width`` most recent
    successors). :meth:`propose` walks the table breadth-first from the accessed object, most
    recent successors first, up to ``hops`` levels, and returns up to ``K`` known, non-resident
    objects: the ones a prefetch can bring in.

    Invariant: ``_succ[y]`` is insertion-ordered, least recent successor first.
    """

    def __init__(self, depth: int = 2, width: int = 4, hops: int = 3) -> None:
        if depth < 1 or width < 1 or hops < 1:
            raise ConfigError(f"SuccessorPredictor needs depth, width, hops >= 1, got {depth}, {width}, {hops}")
        self.depth, self.width, self.hops = depth, width, hops
        self.reset()

    def params(self) -> dict[str, int]:
        """The constructor's arguments (written into an exported policy's prefetch head)."""
        return {"depth": self.depth, "width": self.width, "hops": self.hops}

    def reset(self) -> None:
        self._succ: dict[int, dict[int, None]] = {}
        self._recent: deque[int] = deque(maxlen=self.depth)

    def observe(self, key: int) -> None:
        """Record an access of ``key``."""
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

    def propose(self, key: int, K: int, view: PoolView) -> list[int]:
        """Up to ``K`` objects known to the pool and not resident, most likely next first."""
        objs: dict[int, Any] | None = getattr(view, "objects", None)
        out: list[int] = []
        seen = {key}
        frontier = [key]
        succ = self._succ
        # known and not resident = on the host or being written back; the pool's own view
        # reads each object's record once, another view answers through its public API
        get = objs.get if objs is not None else None
        away, resident = _AWAY, view.is_resident
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
                    if get is not None:
                        o = get(z)
                        if o is None or o.state not in away:
                            continue
                    elif z not in view or resident(z):
                        continue
                    out.append(z)
                    if len(out) == K:
                        return out
            if not nxt:
                break
            frontier = nxt
        return out
