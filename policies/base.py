"""The two policy seams of the pool, as policies import them.

:class:`EvictionPolicy`, :class:`PrefetchPolicy`, their no-op bases and :class:`PoolView` live in
:mod:`allocator.seams` (whose docstring is the manual: every member the pool calls, in order,
and the optional ones with their defaults), so that ``allocator`` needs nothing from
``policies``; this module re-exports them and adds helpers for writing policies.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.seams import (
    EvictionPolicy,
    EvictionPolicyBase,
    Forwarding,
    PoolView,
    PrefetchPolicy,
    PrefetchPolicyBase,
)

__all__ = ["EvictionPolicy", "EvictionPolicyBase", "Forwarding", "PrefetchPolicy", "PrefetchPolicyBase",
           "PoolView", "first_evictable", "construct"]


def first_evictable(view: PoolView, keys: Iterable[int]) -> int | None:
    """The first key of ``keys`` that ``view`` says is evictable, or ``None``."""
    ev = view.evictable
    for k in keys:
        if ev(k):
            return k
    return None


def construct(what: str, cls: Callable[..., Any], params: dict[str, Any]) -> Any:
    """``cls(**params)``, or a :class:`ConfigError` naming ``what``, the parameters' fault and
    the signature ``cls`` accepts (a missing or surplus parameter, before anything is built)."""
    try:
        inspect.signature(cls).bind(**params)
    except TypeError as e:
        raise ConfigError(f"{what}: bad parameters: {e}; accepted: {inspect.signature(cls)}") from None
    return cls(**params)
