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
    _check_param_types(name, params)
    try:
        return GENERATORS[name](seed=seed, **params)
    except TypeError as e:  # a parameter it does not take, or one it needs and lacks
        if "unexpected keyword" not in str(e) and "required" not in str(e):
            raise
        raise ConfigError(f"generator {name!r}: {e}") from None


def _check_param_types(name: str, params: dict[str, Any]) -> None:
    """A parameter whose default is a number must be given a number (an int where the default
    is an int): ``alpha=abc`` failed deep in the generator ("'>=' not supported between
    instances of 'str' and 'int'"), naming neither the parameter nor the generator."""
    import inspect
    import numbers

    try:
        sig = inspect.signature(GENERATORS[name])
    except (TypeError, ValueError):
        return
    for key, value in params.items():
        p = sig.parameters.get(key)
        if p is None or isinstance(p.default, bool) or not isinstance(p.default, numbers.Real):
            continue
        whole = isinstance(p.default, numbers.Integral)
        ok = (not isinstance(value, bool) and isinstance(value, numbers.Real)
              and (not whole or isinstance(value, numbers.Integral)))
        if not ok:
            raise ConfigError(f"generator {name!r}: parameter {key} must be "
                              f"{'a whole number' if whole else 'a number'} (its default is "
                              f"{p.default!r}), got {value!r}")
