"""Least recently used."""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from policies.base import EvictionPolicyBase, first_evictable

if TYPE_CHECKING:
    from allocator.pool import PoolView


class LRU(EvictionPolicyBase):
    """Evicts the evictable object whose last access is oldest.

    Invariant: ``_order`` holds exactly the tracked objects, least recently used first.
    """

    name = "lru"

    def __init__(self) -> None:
        self._order: OrderedDict[int, None] = OrderedDict()

    def victim(self, view: PoolView) -> int | None:
        return first_evictable(view, self._order)

    def on_hit(self, view: PoolView, key: int) -> None:
        self._order.move_to_end(key)

    def on_insert(self, view: PoolView, key: int) -> None:
        self._order[key] = None

    def on_evict(self, view: PoolView, key: int) -> None:
        del self._order[key]

    def on_free(self, view: PoolView, key: int) -> None:
        self._order.pop(key, None)

    def order(self) -> list[int]:
        """Tracked keys, least recently used first (for tests and the env's candidate rule)."""
        return list(self._order)
