"""Eviction and prefetch policies: heuristics, oracles and learned (exported) policies."""

from policies.base import (
    EvictionPolicy,
    EvictionPolicyBase,
    PrefetchPolicy,
    PrefetchPolicyBase,
    first_evictable,
)
from policies.lru import LRU

__all__ = [
    "EvictionPolicy", "EvictionPolicyBase", "PrefetchPolicy", "PrefetchPolicyBase",
    "first_evictable", "LRU",
]
