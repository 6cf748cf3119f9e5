"""Pool statistics and event hooks (observe through stats and hooks, not prints)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import IO, Any, Protocol


@dataclass(slots=True)
class PoolStats:
    """Counters of one pool. ``hits + misses == accesses``.

    * ``hits`` include prefetch hits (the prefetch had landed) and late prefetches (it was still
      in flight: the access waited only for the remainder).
    * ``misses`` include ``allocations``: first writes that create an object on the device
      without a copy. ``byte_misses`` counts the bytes of every miss.
    * ``useless_prefetches``: prefetched objects evicted or freed before any use.
    """

    accesses: int = 0
    hits: int = 0
    misses: int = 0
    byte_misses: int = 0
    allocations: int = 0
    prefetches: int = 0
    prefetch_hits: int = 0
    late_prefetches: int = 0
    useless_prefetches: int = 0
    evictions: int = 0
    writebacks: int = 0
    bypasses: int = 0
    frees: int = 0
    bytes_h2d: int = 0
    bytes_d2h: int = 0
    stall_ns: int = 0
    compute_ns: int = 0
    total_ns: int = 0
    device_bytes: int = 0
    peak_device_bytes: int = 0
    fragmentation: float = 0.0
    fallbacks: int = 0

    @property
    def miss_ratio(self) -> float:
        return self.misses / self.accesses if self.accesses else 0.0

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.accesses if self.accesses else 0.0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["miss_ratio"] = self.miss_ratio
        return d


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
