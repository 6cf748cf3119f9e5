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
    * ``late_prefetches``: accesses that found their prefetch still in flight and waited for
      the remainder; ``late_stall_ns`` is that wait, summed (part of ``stall_ns``: the stall the
      late prefetches leave).
    * ``useless_prefetches``: prefetched objects evicted or freed before any use.
    * ``streamed``: misses whose object was not admitted (refused by the policy, or larger than
      the pool): served by streaming, their bytes are in ``bytes_h2d`` (a read or
      read-modify-write) and ``bytes_d2h`` (a write), their wait in ``stall_ns``; nothing of
      them stays on the device.
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
    streamed: int = 0
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
    late_stall_ns: int = 0

    @property
    def miss_ratio(self) -> float:
        return self.misses / self.accesses if self.accesses else 0.0

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.accesses if self.accesses else 0.0

    @property
    def traffic_bytes(self) -> int:
        """Bytes copied between host and device, both ways (streamed accesses included)."""
        return self.bytes_h2d + self.bytes_d2h

    @property
    def overhead(self) -> float:
        """Stall per unit of compute (``stall_ns / compute_ns``); NaN without compute time."""
        return self.stall_ns / self.compute_ns if self.compute_ns else float("nan")

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["miss_ratio"] = self.miss_ratio
        d["traffic_bytes"] = self.traffic_bytes
        d["overhead"] = self.overhead
        return d


class PoolHook(Protocol):
    """Receives one dict per pool event: ``{"event": ..., "key": ..., "size": ..., "tick": ...,
    "now_ns": ..., "state": ..., "offset": ..., "nbytes": ..., "kind": ...}``, where ``event``
    is ``hit``, ``miss`` (the object got a block), ``streamed``, ``prefetch`` (a block, its
    copy started), ``evict`` and ``free`` (the object gives its block up), ``writeback``,
    ``release`` (a block given up is free again: at once, or once its write-back completed),
    ``restore`` (a failed write-back: the victim takes its block back) or ``oom`` (a
    :class:`PoolExhausted` follows; ``free_bytes``). ``offset``/``nbytes``: the block the event
    concerns (``-1``/``0``: none). :class:`allocator.snapshot.MemoryRecorder` is one. A hook
    observes: it should not raise (one that does is detached, with an error logged, and the
    event completes; a key is the caller's integer, a NumPy one included)."""

    def __call__(self, event: dict[str, Any]) -> None: ...


class JsonlHook:
    """Writes every pool event as one JSON line (like CuPy's ``DebugPrintHook``)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def __call__(self, event: dict[str, Any]) -> None:
        self._stream.write(json.dumps(event, default=int) + "\n")  # (NumPy integer keys too)
