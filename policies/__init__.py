"""Eviction and prefetch policies: heuristics, oracles and learned (exported) policies."""

from policies.adaptive import ARC, S3FIFO, SLRU
from policies.base import (
    EvictionPolicy,
    EvictionPolicyBase,
    PrefetchPolicy,
    PrefetchPolicyBase,
    first_evictable,
)
from policies.classic import CLOCK, FIFO, LFU, SIEVE, RandomEviction
from policies.lirs import LIRS
from policies.lru import LRU
from policies.prefetch import LookaheadPrefetcher, MarkovPrefetcher, NoPrefetch, StridePrefetcher
from policies.priority import GDSF, Belady
from policies.registry import EVICTION_NAMES, PREFETCH_NAMES, make_eviction, make_prefetch
from policies.shadow import ShadowPolicy

__all__ = [
    "EvictionPolicy", "EvictionPolicyBase", "PrefetchPolicy", "PrefetchPolicyBase",
    "first_evictable", "LRU", "FIFO", "LFU", "RandomEviction", "CLOCK", "ARC", "SIEVE", "S3FIFO",
    "LIRS", "SLRU", "GDSF", "Belady", "NoPrefetch", "MarkovPrefetcher", "StridePrefetcher",
    "LookaheadPrefetcher", "make_eviction", "make_prefetch", "EVICTION_NAMES", "PREFETCH_NAMES", "ShadowPolicy",
]
