"""Config names -> policy instances.

``make_eviction("lru")``, ``make_eviction("belady", trace=trace)``,
``make_eviction("learned:path/to/policy.npz")``; ``make_prefetch("markov")``,
``make_prefetch("lookahead", trace=trace, depth=4)``. Unknown names raise
:class:`~allocator.errors.ConfigError` listing the valid ones. Extra keyword parameters go to
the class constructor.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from allocator.errors import ConfigError

if TYPE_CHECKING:
    from allocator.trace import Trace
    from policies.base import EvictionPolicy, PrefetchPolicy

__all__ = ["make_eviction", "make_prefetch", "EVICTION_NAMES", "PREFETCH_NAMES"]


def _eviction_classes() -> dict[str, Callable[..., Any]]:
    from policies.adaptive import ARC, S3FIFO, SLRU
    from policies.classic import CLOCK, FIFO, LFU, SIEVE, RandomEviction
    from policies.lirs import LIRS
    from policies.lru import LRU
    from policies.priority import GDSF, Belady

    return {
        "lru": LRU, "fifo": FIFO, "lfu": LFU, "random": RandomEviction, "clock": CLOCK,
        "arc": ARC, "sieve": SIEVE, "s3fifo": S3FIFO, "lirs": LIRS, "slru": SLRU, "gdsf": GDSF,
        "belady": Belady,
    }


def _prefetch_classes() -> dict[str, Callable[..., Any]]:
    from policies.prefetch import (
        LookaheadPrefetcher,
        MarkovPrefetcher,
        NoPrefetch,
        StridePrefetcher,
    )

    return {"none": NoPrefetch, "markov": MarkovPrefetcher, "stride": StridePrefetcher,
            "lookahead": LookaheadPrefetcher}


EVICTION_NAMES = ("lru", "fifo", "lfu", "random", "clock", "arc", "sieve", "s3fifo", "lirs",
                  "slru", "gdsf", "belady")
PREFETCH_NAMES = ("none", "markov", "stride", "lookahead")
_NEEDS_TRACE = {"belady", "lookahead"}


def make_eviction(name: str, *, trace: Trace | None = None, seed: int = 0,
                  **params: Any) -> EvictionPolicy:
    """The eviction policy called ``name`` (see :data:`EVICTION_NAMES`, or ``learned:PATH``)."""
    if not isinstance(name, str):
        raise ConfigError(f"eviction policy name must be a string, got {name!r}")
    key = name.strip().lower()
    if key.startswith("learned:"):
        path = name.strip()[len("learned:"):]
        if not path:
            raise ConfigError("learned policy needs a file: 'learned:PATH'")
        from policies.learned import LearnedPolicy  # lazy: written separately, may pull numpy only

        return LearnedPolicy.load(path)  # type: ignore[no-any-return]
    classes = _eviction_classes()
    if key not in classes:
        raise ConfigError(
            f"unknown eviction policy {name!r}; valid names: {', '.join(EVICTION_NAMES)}, "
            "or 'learned:PATH' for an exported policy file")
    if key == "random":
        params.setdefault("seed", seed)
    return _build(key, classes[key], trace, params)  # type: ignore[no-any-return]


def make_prefetch(name: str | None, *, trace: Trace | None = None,
                  **params: Any) -> PrefetchPolicy:
    """The prefetch policy called ``name`` (see :data:`PREFETCH_NAMES`; ``None`` is "none")."""
    key = "none" if name is None else str(name).strip().lower()
    classes = _prefetch_classes()
    if key not in classes:
        raise ConfigError(
            f"unknown prefetch policy {name!r}; valid names: {', '.join(PREFETCH_NAMES)}")
    return _build(key, classes[key], trace, params)  # type: ignore[no-any-return]


def _build(key: str, cls: Callable[..., Any], trace: Trace | None, params: dict[str, Any]) -> Any:
    if key in _NEEDS_TRACE:
        if trace is None:
            raise ConfigError(f"{key!r} is an oracle that reads the future: pass trace=<the Trace "
                              "it will replay>")
        params = {"trace": trace, **params}
    try:
        inspect.signature(cls).bind(**params)
    except TypeError as e:
        raise ConfigError(f"bad parameters for policy {key!r}: {e}; "
                          f"accepted: {inspect.signature(cls)}") from None
    return cls(**params)
