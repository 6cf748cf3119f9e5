"""Pool statistics and event hooks (observe through stats and hooks, not prints)."""

from __future__ import annotations

import json
from typing import IO, Any, Protocol

import cython

# The counters every pool keeps, in this order (``PoolStats.fields()``).
_FIELDS = (
    "accesses", "hits", "misses", "byte_misses", "allocations", "prefetches", "prefetch_hits",
    "late_prefetches", "useless_prefetches", "evictions", "writebacks", "bypasses", "frees",
    "bytes_h2d", "bytes_d2h", "stall_ns", "compute_ns", "total_ns", "device_bytes",
    "peak_device_bytes", "fragmentation", "fallbacks",
)


@cython.cclass
class PoolStats:
    """Counters of one pool. ``hits + misses == accesses``.

    * ``hits`` include prefetch hits (the prefetch had landed) and late prefetches (it was still
      in flight: the access waited only for the remainder).
    * ``misses`` include ``allocations``: first writes that create an object on the device
      without a copy. ``byte_misses`` counts the bytes of every miss.
    * ``useless_prefetches``: prefetched objects evicted or freed before any use.

    ``pool.stats`` is the live record the access loop writes (native integers where compiled,
    declared in ``stats.pxd``); ``pool.snapshot()`` returns a copy with the derived fields
    (``stall_ns``, ``compute_ns``, ``total_ns``, ``device_bytes``, ``fragmentation``) filled in.
    """

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
    bypasses: int
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

    def __init__(self, **counts: Any) -> None:
        for f in _FIELDS:
            setattr(self, f, 0.0 if f == "fragmentation" else 0)
        for f, v in counts.items():
            if f not in _FIELDS:
                raise TypeError(f"PoolStats has no field {f!r}; fields: {', '.join(_FIELDS)}")
            setattr(self, f, v)

    @staticmethod
    def fields() -> tuple[str, ...]:
        """The counters' names, in order."""
        return _FIELDS

    def copy(self) -> PoolStats:
        return PoolStats(**self.counts())

    def counts(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in _FIELDS}

    @property
    def miss_ratio(self) -> float:
        return self.misses / self.accesses if self.accesses else 0.0

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.accesses if self.accesses else 0.0

    def as_dict(self) -> dict[str, Any]:
        d = self.counts()
        d["miss_ratio"] = self.miss_ratio
        return d

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PoolStats):
            return NotImplemented
        return self.counts() == other.counts()


    def __repr__(self) -> str:
        return "PoolStats(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in _FIELDS) + ")"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.counts(),))


def _rebuild(counts: dict[str, Any]) -> PoolStats:
    return PoolStats(**counts)


class PoolHook(Protocol):
    """Receives one dict per pool event: ``{"event": "hit"|"miss"|"evict"|"writeback"|
    "prefetch"|"free"|..., "key": ..., "tick": ..., "now_ns": ...}``."""

    def __call__(self, event: dict[str, Any]) -> None: ...


class JsonlHook:
    """Writes every pool event as one JSON line (like CuPy's ``DebugPrintHook``)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def __call__(self, event: dict[str, Any]) -> None:
        self._stream.write(json.dumps(event) + "\n")
