"""Eviction and prefetch policies: heuristics, oracles and learned (exported) policies."""

from cachegym.policies.adaptive import ARC, S3FIFO, SLRU
from cachegym.policies.base import (
    EvictionPolicy,
    EvictionPolicyBase,
    PrefetchPolicy,
    PrefetchPolicyBase,
    first_evictable,
)
from cachegym.policies.classic import CLOCK, FIFO, LFU, SIEVE, RandomEviction
from cachegym.policies.lirs import LIRS
from cachegym.policies.lru import LRU
from cachegym.policies.prefetch import (
    LookaheadPrefetcher,
    MarkovPrefetcher,
    NoPrefetch,
    StridePrefetcher,
)
from cachegym.policies.priority import GDSF, Belady
from cachegym.policies.registry import EVICTION_NAMES, PREFETCH_NAMES, make_eviction, make_prefetch
from cachegym.policies.shadow import ShadowPolicy

__all__ = [
    "EvictionPolicy", "EvictionPolicyBase", "PrefetchPolicy", "PrefetchPolicyBase",
    "first_evictable", "LRU", "FIFO", "LFU", "RandomEviction", "CLOCK", "ARC", "SIEVE", "S3FIFO",
    "LIRS", "SLRU", "GDSF", "Belady", "NoPrefetch", "MarkovPrefetcher", "StridePrefetcher",
    "LookaheadPrefetcher", "make_eviction", "make_prefetch", "EVICTION_NAMES", "PREFETCH_NAMES", "ShadowPolicy",
]
