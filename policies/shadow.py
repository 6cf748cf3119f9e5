"""Policies that run a model of another simulator's algorithm and let the pool follow it.

Some libCacheSim algorithms evict at moments the pool never asks for a victim: during a hit
(SLRU's demotion cascade, LIRS's stack moves), or they refuse to admit an object the pool
admits. A :class:`ShadowPolicy` feeds every access to its model; whatever the model drops
(and whatever it refused) goes to a pending list that :meth:`victim` hands out first, in the
order the model dropped it. The pool thus holds exactly the model's residents plus the
pending objects, and its misses differ from the model's only on accesses to pending objects
(a hit here, a miss in the model). :meth:`pending_evictions` lists them.

The model sees object sizes through the pool, which keeps the cached size on a hit; when a
trace changes an object's size between requests, a pool hit on a pending object feeds the
model the cached size instead of the request's (libCacheSim would see the new one).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import TYPE_CHECKING

from cachegym.policies.base import EvictionPolicyBase, first_evictable

if TYPE_CHECKING:
    from cachegym.allocator.pool import PoolView

__all__ = ["ShadowPolicy"]


class ShadowPolicy(EvictionPolicyBase):
    """Base for model-driven policies. Subclasses implement :meth:`_setup`, :meth:`_request`,
    :meth:`_resident`, :meth:`_remove` and :meth:`_fallback`, and call :meth:`_drop` when the
    model evicts an object.

    Invariants: ``_in_pool`` is the set of objects the pool tracks; ``_pending`` holds those
    of them the model does not hold, oldest drop first.
    """

    def __init__(self) -> None:
        self._pending: OrderedDict[int, None] = OrderedDict()
        self._last_miss: int | None = None
        self._outside: int | None = None  # fallback victim the model keeps holding
        self._in_pool: set[int] = set()  # the objects the pool tracks
        self._ready = False
        # counters over the pool's accesses: the model's own misses (the original algorithm's
        # count), and the accesses where the pool and the model disagree (pool misses =
        # model_misses - divergent_hits + divergent_misses)
        self.model_requests = 0
        self.model_misses = 0
        self.divergent_hits = 0  # the pool hit an object the model had dropped or refused
        self.divergent_misses = 0  # the pool missed an object it gave up but the model kept

    # ---------------------------------------------------------------- for subclasses
    def _setup(self, capacity: int) -> None:
        """Size the model for a pool of ``capacity`` bytes (called once, on first use)."""

    def _request(self, key: int, size: int) -> bool:
        """The model processes one request (find, then admit and evict on a miss); returns
        whether the model hit."""
        raise NotImplementedError

    def _resident(self, key: int) -> bool:
        raise NotImplementedError

    def _remove(self, key: int) -> None:
        """Drop a model-resident ``key`` that the pool evicted on someone else's choice."""
        raise NotImplementedError

    def _fallback(self) -> Iterable[int]:
        """Model residents in the order to give them up when nothing is pending (the model
        is not told: it keeps them, so its decisions stay those of the original)."""
        raise NotImplementedError

    def _drop(self, key: int) -> None:
        if key in self._in_pool:  # (an object the pool gave up already needs nothing)
            self._pending[key] = None

    def eviction_order(self) -> Iterable[int]:  # type: ignore[override]
        """What this policy gives up next, in order, without changing its state: what the model
        dropped, then the model's residents in its eviction order (:meth:`victim`'s order)."""
        yield from self._pending
        if self._ready:
            yield from self._fallback()

    # ---------------------------------------------------------------- pool hooks
    def pending_evictions(self) -> list[int] | tuple[()]:
        """Objects the model no longer holds that the pool still does (evicted first); asked
        after every access, mostly with nothing pending (then no list is made)."""
        return list(self._pending) if self._pending else ()

    def admit(self, view: PoolView, key: int, size: int) -> bool:
        """The pool admits a missed object only if the model took it in (after ``on_miss``)."""
        return not self._ready or self._resident(key)

    def _model(self, key: int, size: int) -> bool:
        self.model_requests += 1
        hit = self._request(key, size)
        if not hit:
            self.model_misses += 1
        return hit

    def _ensure(self, view: PoolView) -> None:
        if not self._ready:
            self._setup(view.capacity)
            self._ready = True

    def _settle(self, key: int) -> None:
        if self._resident(key):
            self._pending.pop(key, None)
        else:
            self._pending[key] = None

    def on_hit(self, view: PoolView, key: int) -> None:
        self._ensure(view)
        if not self._model(key, view.size(key)):
            self.divergent_hits += 1
        self._settle(key)

    def on_miss(self, view: PoolView, key: int) -> None:
        self._ensure(view)
        self._last_miss = key
        if self._model(key, view.size(key)):
            self.divergent_misses += 1

    def on_insert(self, view: PoolView, key: int) -> None:
        self._ensure(view)
        if self._last_miss != key:  # a prefetch: the model sees it as a request (uncounted)
            self._request(key, view.size(key))
        self._last_miss = None
        self._in_pool.add(key)
        self._settle(key)

    def victim(self, view: PoolView) -> int | None:
        self._outside = None
        k = first_evictable(view, self._pending)
        if k is None:
            # the model holds more than the pool can (or an agent evicted for it): give up an
            # object the model keeps, without telling the model, so that it stays in step
            k = first_evictable(view, self._fallback())
            self._outside = k
        return k

    def on_evict(self, view: PoolView, key: int) -> None:
        self._in_pool.discard(key)
        if key in self._pending:
            del self._pending[key]
        elif key == self._outside:
            self._outside = None  # the model still holds it: a later access is a pool miss
        else:
            self._remove(key)  # someone else chose it: the model follows

    def on_free(self, view: PoolView, key: int) -> None:
        self.on_evict(view, key)

    def on_free_untracked(self, view: PoolView, key: int) -> None:
        """A freed object the pool had already given up: the model may still hold it (a
        fallback victim it kept, or, under another decider, anything), and forgets it as on a
        free."""
        if self._ready:
            self.on_free(view, key)
