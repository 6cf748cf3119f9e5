"""The two policy seams of the pool, as policies import them.

:class:`EvictionPolicy`, :class:`PrefetchPolicy`, their no-op bases and :class:`PoolView` live in
:mod:`allocator.seams` (whose docstring is the manual: every member the pool calls, in order,
and the optional ones with their defaults), so that ``allocator`` needs nothing from
``policies``; this module re-exports them and adds helpers for writing policies.
"""

from __future__ import annotations

from collections.abc import Iterable

from cachegym.allocator.seams import (
    EvictionPolicy,
    EvictionPolicyBase,
    PoolView,
    PrefetchPolicy,
    PrefetchPolicyBase,
)

__all__ = ["EvictionPolicy", "EvictionPolicyBase", "PrefetchPolicy", "PrefetchPolicyBase",
           "PoolView", "first_evictable"]


def first_evictable(view: PoolView, keys: Iterable[int]) -> int | None:
    """The first key of ``keys`` that ``view`` says is evictable, or ``None``."""
    ev = view.evictable
    for k in keys:
        if ev(k):
            return k
    return None
