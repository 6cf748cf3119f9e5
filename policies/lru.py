"""Least recently used."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from cachegym.policies.base import EvictionPolicyBase

if TYPE_CHECKING:
    from cachegym.allocator.pool import PoolView


class OrderedPolicy(EvictionPolicyBase):
    """The bookkeeping of a policy that evicts in the order of one list: ``_order`` holds
    exactly the tracked objects, an object is appended when it is inserted, and
    :meth:`victim` is the first evictable one. :class:`policies.classic.FIFO` is this as it is
    (insertion order); :class:`LRU` moves an object to the end on every hit;
    :class:`policies.features.FeatureTracker` keeps its residents in it. ``LRU`` never rebinds
    ``_order`` (its ``touch`` hands out a bound method of it)."""

    def __init__(self) -> None:
        self._order: OrderedDict[int, None] = OrderedDict()

    def victim(self, view: PoolView) -> int | None:
        evictable = view.evictable
        for k in self._order:  # first_evictable, inlined: this runs on every eviction
            if evictable(k):
                return k
        return None

    def eviction_order(self) -> Iterator[int]:  # type: ignore[override]
        """The tracked objects in :meth:`victim`'s order, without changing the policy's state."""
        return iter(self._order)

    def on_insert(self, view: PoolView, key: int) -> None:
        self._order[key] = None

    def on_evict(self, view: PoolView, key: int) -> None:
        del self._order[key]

    def on_free(self, view: PoolView, key: int) -> None:
        self._order.pop(key, None)


class LRU(OrderedPolicy):
    """Evicts the evictable object whose last access is oldest (``_order``: least recently
    used first)."""

    name = "lru"

    @property
    def touch(self) -> Callable[[int], object] | None:
        """``on_hit`` as a callable of the key alone, for the pool's hit fast path; ``None``
        when a subclass overrides ``on_hit`` (then the pool calls that)."""
        plain = type(self).on_hit is LRU.on_hit and "on_hit" not in vars(self)
        return self._order.move_to_end if plain else None

    def on_hit(self, view: PoolView, key: int) -> None:
        self._order.move_to_end(key)

    def order(self) -> list[int]:
        """Tracked keys, least recently used first (for tests and the env's candidate rule)."""
        return list(self._order)
