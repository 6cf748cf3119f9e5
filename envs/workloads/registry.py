"""Generators by name, so configs can name them: ``generate("zipf", seed=1, alpha=0.9)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.trace import Trace
from cachegym.envs.workloads.ml import dl_training, embedding, llm_kv_cache
from cachegym.envs.workloads.synthetic import (
    loop,
    mixture,
    phase_change,
    scan,
    storage,
    uniform,
    web_cdn,
    web_session,
    zipf,
)

__all__ = ["GENERATORS", "generate"]

GENERATORS: dict[str, Callable[..., Trace]] = {
    "zipf": zipf,
    "uniform": uniform,
    "scan": scan,
    "loop": loop,
    "phase_change": phase_change,
    "mixture": mixture,
    "web_cdn": web_cdn,
    "web_session": web_session,
    "storage": storage,
    "dl_training": dl_training,
    "llm_kv_cache": llm_kv_cache,
    "embedding": embedding,
}
"""Every seeded generator, by the name recorded in its traces' ``meta["generator"]``."""


def generate(name: str, seed: int = 0, **params: Any) -> Trace:
    """Run the generator called ``name`` with ``seed`` and keyword ``params``."""
    if name not in GENERATORS:
        raise ConfigError(f"unknown generator {name!r}; choose one of {sorted(GENERATORS)}")
    try:
        return GENERATORS[name](seed=seed, **params)
    except TypeError as e:  # a parameter it does not take, or one it needs and lacks
        if "unexpected keyword" not in str(e) and "required" not in str(e):
            raise
        raise ConfigError(f"generator {name!r}: {e}") from None
