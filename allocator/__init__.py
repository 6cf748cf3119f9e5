"""The pool core: arena, residency, the one access loop, timing model, backends."""

from cachegym.allocator import _purepy

if _purepy.requested():  # run the core interpreted even where it is compiled
    _purepy.install()
else:  # a module edited since the build runs as edited (interpreted, with a warning)
    _purepy.check_build()

from cachegym.allocator.arena import Arena, ByteAccounting
from cachegym.allocator.backends import Backend, NumpyBackend
from cachegym.allocator.cost import PRESETS, CostModel, Preset, get_preset
from cachegym.allocator.errors import (
    BackendError,
    CachegymError,
    ConfigError,
    InvalidActionError,
    InvalidVictim,
    NotPinned,
    NotResident,
    ObjectPinned,
    ObjectTooLarge,
    OutputError,
    PolicyError,
    PolicyFileError,
    PoolError,
    PoolExhausted,
    TraceError,
    UnknownKey,
)
from cachegym.allocator.pool import EvictionRequest, ObjectInfo, Pool
from cachegym.allocator.seams import (
    EvictionPolicy,
    EvictionPolicyBase,
    Forwarding,
    PoolView,
    PrefetchPolicy,
    PrefetchPolicyBase,
)
from cachegym.allocator.snapshot import MemoryRecorder, read_snapshot
from cachegym.allocator.stats import JsonlHook, PoolStats
from cachegym.allocator.trace import Kind, Op, Trace

__version__ = "0.1.0"

__all__ = [
    "Arena", "ByteAccounting", "Backend", "NumpyBackend", "PRESETS", "CostModel", "Preset",
    "get_preset", "BackendError", "CachegymError", "ConfigError", "InvalidActionError", "OutputError",
    "InvalidVictim", "NotPinned", "NotResident", "ObjectPinned", "ObjectTooLarge", "PolicyError", "PolicyFileError",
    "PoolError",
    "PoolExhausted", "TraceError", "UnknownKey", "EvictionRequest", "ObjectInfo", "Pool",
    "PoolView", "JsonlHook", "MemoryRecorder", "read_snapshot", "PoolStats", "Kind", "Op", "Trace", "EvictionPolicy",
    "EvictionPolicyBase", "Forwarding", "PrefetchPolicy", "PrefetchPolicyBase",
]
