"""LIRS (Jiang & Zhang, SIGMETRICS'02), ported from libCacheSim's ``LIRS``.

libCacheSim's LIRS takes eviction decisions at moments the pool never asks for one: during a
hit (a hit on a resident HIR object demotes the bottom LIR object to Q, which can push Q's
oldest object out of the cache), before a miss is admitted, and by refusing to admit objects
larger than Q. This class therefore runs libCacheSim's algorithm as a model
(:class:`~policies.shadow.ShadowPolicy`): the objects the model drops are evicted first when
the pool needs room.

Differences from libCacheSim: a pending (dropped) object is still on the device until the pool
needs its space, so an access to it is a hit here and a miss there; and libCacheSim's LIRS
can hold more than its capacity: a hit on an HIR object that is only in Q demotes the bottom
LIR object into Q, which can push the hit object itself out of Q, after which it is put back
on S as resident without being counted. The model reproduces that (its hits equal
libCacheSim's), but the pool cannot hold the extra object.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from cachegym.policies.shadow import ShadowPolicy

__all__ = ["LIRS"]


class _Entry:
    __slots__ = ("lir", "resident", "size")

    def __init__(self, lir: bool, resident: bool, size: int) -> None:
        self.lir, self.resident, self.size = lir, resident, size


class LIRS(ShadowPolicy):
    """LIRS with libCacheSim's parameters: Q (resident HIR objects) holds
    ``max(1, int(hir_ratio * capacity))`` bytes, the LIR set the rest; stack S is pruned to
    end in an LIR object and limited to ``2 * capacity`` bytes by dropping non-resident
    entries (oldest first).

    Model state: ``S`` (key -> entry, bottom first), ``Q`` (key -> size, oldest first), ``NH``
    (non-resident HIR entries of S, oldest first); byte counters as libCacheSim keeps them.
    """

    name = "lirs"

    def __init__(self, hir_ratio: float = 0.01) -> None:
        super().__init__()
        self.hir_ratio = hir_ratio
        self.S: OrderedDict[int, _Entry] = OrderedDict()
        self.Q: OrderedDict[int, int] = OrderedDict()
        self.NH: OrderedDict[int, int] = OrderedDict()
        self.s_bytes = 0
        self.lirs_count = self.hirs_count = self.nonresident = 0
        self.occupied = 0  # bytes the model holds
        self.cap = self.lirs_limit = self.hirs_limit = -1
        # the resident HIR entries of S that are not on Q (libCacheSim's uncounted objects: see
        # the module's docstring), in S's order: only a hit on an HIR object in Q alone makes
        # one (:meth:`_hit_resident_hir_in_q`), and it stays where it is in S until it leaves S
        # or a hit makes it LIR. Kept so that :meth:`_fallback` does not read all of S to find
        # none (it did for each prefetch decision and each victim asked beyond the model's
        # drops: a time per decision that grew with S, i.e. with the trace)
        self._uncounted: dict[int, None] = {}

    # ---------------------------------------------------------------- ShadowPolicy
    def _setup(self, capacity: int) -> None:
        self.cap = capacity
        self.hirs_limit = max(1, int(self.hir_ratio * capacity))
        self.lirs_limit = capacity - self.hirs_limit

    def _request(self, key: int, size: int) -> bool:
        return self._get(key, size)

    def _resident(self, key: int) -> bool:
        return self._model_resident(key)

    def _fallback(self) -> Iterable[int]:
        # first the resident HIR objects libCacheSim holds without counting them (on S, not on
        # Q), then Q from its oldest, then S from its bottom
        yield from self._uncounted
        yield from self.Q
        yield from (k for k, e in self.S.items() if e.lir)

    # ---------------------------------------------------------------- the model (libCacheSim)
    def _model_resident(self, key: int) -> bool:
        e = self.S.get(key)
        if e is not None and (e.lir or e.resident):
            return True
        return key in self.Q

    def _get(self, key: int, size: int) -> bool:
        hit = self._find(key)
        if not hit and self._can_insert(key, size):
            while self.occupied + size > self.cap:
                if not self._evict(key, size):
                    break
            self._insert(key, size)
        self._limit_stack()
        return hit

    def _find(self, key: int) -> bool:
        e = self.S.get(key)
        if e is not None:
            self.S.move_to_end(key)
        in_q = key in self.Q
        if in_q:
            self.Q.move_to_end(key)
        if e is not None:
            if e.lir:
                self._prune()
                return True
            if e.resident:
                self._hit_resident_hir_in_s(key, e, in_q)
                return True
            return False
        if in_q:
            self._hit_resident_hir_in_q(key)
            return True
        return False

    def _can_insert(self, key: int, size: int) -> bool:
        if size > self.cap:
            return False
        e = self.S.get(key)
        if e is not None and not e.lir and not e.resident:
            while self.lirs_count + e.size > self.lirs_limit:
                self._evict_lir()
            s = self.NH.pop(key, None)
            if s is not None:
                self.nonresident -= s
            return True
        if size > self.lirs_limit or size > self.hirs_limit:
            return False
        if self.lirs_count + size > self.lirs_limit and self.hirs_count + size > self.hirs_limit:
            while self.hirs_count + size > self.hirs_limit:
                self._evict_hir()
        return True

    def _evict(self, key: int, size: int) -> bool:
        """libCacheSim's ``LIRS_evict``; returns False when it could not free anything."""
        before = self.occupied
        e = self.S.get(key)
        if e is not None and not e.lir and not e.resident:
            while self.hirs_count >= self.hirs_limit and self.Q:
                self._evict_hir()
            self._evict_lir()
        elif (e is None and key not in self.Q and self.Q
              and self.lirs_count + size > self.lirs_limit
              and self.hirs_count + size > self.hirs_limit):
            self._evict_hir()
        return self.occupied < before

    def _insert(self, key: int, size: int) -> None:
        e = self.S.get(key)
        if e is not None and not e.lir and not e.resident:
            e.lir = e.resident = True
            self.lirs_count += e.size
            self.occupied += e.size
            return
        if e is None and key not in self.Q:
            if self.lirs_count + size <= self.lirs_limit:
                self._s_push(key, _Entry(True, True, size))
                self.lirs_count += size
            else:
                self._s_push(key, _Entry(False, True, size))
                self.Q[key] = size
                self.hirs_count += size
            self.occupied += size

    def _s_push(self, key: int, e: _Entry) -> None:
        self.S[key] = e
        self.S.move_to_end(key)
        self.s_bytes += e.size

    def _s_pop(self, key: int) -> _Entry:
        e = self.S.pop(key)
        self.s_bytes -= e.size
        if self._uncounted:
            self._uncounted.pop(key, None)
        return e

    def _prune(self) -> None:
        S = self.S
        while len(S) > 1:
            k, e = next(iter(S.items()))
            if e.lir:
                break
            if not e.resident:
                s = self.NH.pop(k, None)
                if s is not None:
                    self.nonresident -= s
            self._s_pop(k)
            if e.resident and k not in self.Q:
                # a resident HIR object libCacheSim held on S alone (uncounted: see the module's
                # docstring) leaves the model with its entry: the pool gives it up too
                self._drop(k)

    def _hit_resident_hir_in_s(self, key: int, e: _Entry, in_q: bool) -> None:
        if in_q:
            s = self.Q.pop(key)
            self.hirs_count -= s
            self.occupied -= s
        while self.lirs_count + e.size > self.lirs_limit and self.S:
            self._evict_lir()
        e.lir = True
        if not in_q and self._uncounted:
            self._uncounted.pop(key, None)
        self.lirs_count += e.size
        self.occupied += e.size

    def _hit_resident_hir_in_q(self, key: int) -> None:
        size = self.Q[key]
        while self.lirs_count + size > self.lirs_limit and self.S:
            self._evict_lir()
        self._s_push(key, _Entry(False, True, size))
        if key not in self.Q:  # (the demotions pushed it out of Q: held uncounted)
            self._uncounted[key] = None

    def _evict_lir(self) -> None:
        k, e = next(iter(self.S.items()))
        self.lirs_count -= e.size
        self._s_pop(k)
        self.occupied -= e.size
        if e.size <= self.hirs_limit:
            while self.hirs_count + e.size > self.hirs_limit and self.Q:
                self._evict_hir()
            self.Q[k] = e.size
            self.Q.move_to_end(k)
            self.hirs_count += e.size
            self.occupied += e.size
        else:
            self._drop(k)
        self._prune()

    def _evict_hir(self) -> None:
        k, size = self.Q.popitem(last=False)
        self.hirs_count -= size
        e = self.S.get(k)
        if e is not None:
            e.resident = False
            self.NH[k] = size
            self.NH.move_to_end(k)
            self.nonresident += e.size
        self.occupied -= size
        self._drop(k)

    def _limit_stack(self) -> None:
        while self.s_bytes > 2 * self.cap and self.NH:
            k, s = self.NH.popitem(last=False)
            self.nonresident -= s
            if k in self.S:
                e = self._s_pop(k)
                if (e.lir or e.resident) and k not in self.Q:
                    # NH can name an entry that has since become resident (libCacheSim's
                    # evictLIR pops S's bottom as LIR where a free's prune left an HIR entry
                    # there): libCacheSim drops it from S all the same and no longer finds the
                    # object; the pool gives it up too (it held it with no model entry left,
                    # and asked for a victim, got none)
                    self._drop(k)

    def _remove(self, key: int) -> None:
        """libCacheSim's ``LIRS_remove`` (a victim chosen outside the model, or a free)."""
        e = self.S.get(key)
        in_q = key in self.Q
        if e is not None:
            self._s_pop(key)
            if e.lir:
                self.lirs_count -= e.size
                self.occupied -= e.size
                self._prune()
            else:
                if e.resident:
                    self.hirs_count -= e.size
                    self.occupied -= e.size
                else:
                    s = self.NH.pop(key, None)
                    if s is not None:
                        self.nonresident -= s
                if in_q:
                    self.Q.pop(key)
        elif in_q:
            s = self.Q.pop(key)
            self.hirs_count -= s
            self.occupied -= s

    def __repr__(self) -> str:
        return f"LIRS(hir_ratio={self.hir_ratio})"
