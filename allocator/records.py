"""The records of the access loop (:mod:`allocator.loop`): the live counters of a pool
(:class:`Counters`, ``pool.stats``), each object's record (:class:`ObjectInfo`) and the request
a suspended access yields (:class:`EvictionRequest`). Compiled with the loop where a C compiler is
present (native fields in ``records.pxd``); interpreted otherwise, with the same effects."""

from __future__ import annotations

from typing import Any, NamedTuple

import cython

from cachegym.allocator.seams import DEVICE, HOST, STATE_NAMES, PoolView
from cachegym.allocator.stats import PoolStats

__all__ = ["Counters", "ObjectInfo", "EvictionRequest"]

_DEVICE = DEVICE  # a C int where compiled (records.pxd): evictable() compares no Python objects


@cython.cclass
class Counters:
    """The live counters of a pool (``pool.stats``), written by the access loop: native
    integers where compiled (``records.pxd``). Fields and meaning are :class:`PoolStats`'s;
    :meth:`snapshot` (``pool.snapshot()``) returns them as a :class:`PoolStats`."""

    accesses: int
    hits: int
    misses: int
    byte_misses: int
    allocations: int
    prefetches: int
    prefetch_hits: int
    late_prefetches: int
    useless_prefetches: int
    evictions: int
    writebacks: int
    streamed: int
    frees: int
    bytes_h2d: int
    bytes_d2h: int
    stall_ns: int
    compute_ns: int
    total_ns: int
    device_bytes: int
    peak_device_bytes: int
    fragmentation: float
    fallbacks: int
    late_stall_ns: int

    def __init__(self) -> None:
        for f in _STAT_FIELDS:
            setattr(self, f, 0.0 if f == "fragmentation" else 0)

    def snapshot(self) -> PoolStats:
        return PoolStats(**{f: getattr(self, f) for f in _STAT_FIELDS})

    @property
    def miss_ratio(self) -> float:
        return self.misses / self.accesses if self.accesses else 0.0

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.accesses if self.accesses else 0.0

    @property
    def traffic_bytes(self) -> int:
        """Bytes copied between host and device so far, both ways (as PoolStats')."""
        return self.bytes_h2d + self.bytes_d2h

    def __reduce__(self) -> tuple[Any, ...]:
        return (_counters, (self.snapshot(),))

    def __repr__(self) -> str:
        return "Counters(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in _STAT_FIELDS) + ")"


def _counters(stats: PoolStats) -> Counters:
    """Counters holding ``stats`` (unpickling)."""
    c = Counters()
    for f in _STAT_FIELDS:
        setattr(c, f, getattr(stats, f))
    return c


_STAT_FIELDS = tuple(PoolStats.__dataclass_fields__)


@cython.no_gc
@cython.cclass
class ObjectInfo:
    """Per-object record. Read-only to everything outside this module.

    Compiled, records are not tracked by the cyclic garbage collector (``cython.no_gc``: a pool
    holds one per object it has seen, and the collector walked them all, and ran more often,
    for records that cannot form a cycle: their object fields hold the key, an int, and the
    backend's copy events or the failure of a copy, which reference no record)."""

    def __init__(self, key: int, size: int, kind: int, tick: int) -> None:
        self.key = key
        self.size = size
        self.nbytes = 0  # footprint in the placement while resident
        self.state = HOST
        self.dirty = False
        self.pins = 0
        self.offset = -1
        self.ready_ns = 0  # when an in-flight h2d lands / a d2h completes
        self.prefetched = False  # brought in by a prefetch and not used since
        self.busy_until = 0  # a copy *from* the device block runs until then
        self.kind = kind
        self.created_tick = tick
        self.last_tick = tick
        self.n_access = 0
        self.late_ns = 0  # how long its latest access waited for its prefetch still in flight
        self.h2d_event: Any = None
        self.d2h_event: Any = None

    def evictable(self) -> bool:
        """Whether a pool could evict the object now: resident (on the device, not in flight)
        and unpinned. The one statement of the rule (``PoolView.evictable``, the loop's checks
        of a victim and the feature kernels' candidate filter call it)."""
        return self.state == _DEVICE and self.pins == 0

    def __repr__(self) -> str:
        return (f"ObjectInfo(key={self.key}, size={self.size}, state={STATE_NAMES[self.state]}, "
                f"dirty={self.dirty}, pins={self.pins})")


class EvictionRequest(NamedTuple):
    """Yielded by :meth:`Pool.steps` when space is needed: send back a key from
    ``view.candidates()``. ``key``/``size`` name the object being admitted; ``needed`` is its
    footprint in the placement."""

    key: int
    size: int
    needed: int
    view: PoolView
