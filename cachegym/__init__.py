"""cachegym: learned eviction and prefetch policies for accelerator memory pools.

The repository keeps the product's layout (``allocator/``, ``policies/``, ``envs/``, ``conf/``,
``scripts/``, ``data/`` at its top); this package names them ``cachegym.allocator``,
``cachegym.policies``, ``cachegym.envs``, ... (the entries of this folder point at them, and an
installed wheel holds them here). ``import cachegym`` registers the Gymnasium environments
(``gymnasium.make("cachegym/Evict-v0")``) and exposes the public surface below; the names that
need PyTorch (``ActivationOffload``) import it on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cachegym.allocator import CachegymError, Pool, PoolStats, Trace
from cachegym.envs import ENV_IDS  # registers the environments
from cachegym.envs.workloads import read_trace
from cachegym.policies.learned import LearnedPolicy
from cachegym.policies.registry import make_policy, make_prefetch

if TYPE_CHECKING:
    from cachegym.allocator.offload import ActivationOffload

__version__ = "0.1.0"

__all__ = ["ENV_IDS", "ActivationOffload", "CachegymError", "LearnedPolicy", "Pool", "PoolStats",
           "Trace", "make_policy", "make_prefetch", "read_trace", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "ActivationOffload":  # imports torch: only when asked for
        try:
            from cachegym.allocator.offload import ActivationOffload
        except ModuleNotFoundError as e:
            if e.name != "torch":
                raise
            raise ImportError("cachegym.ActivationOffload needs PyTorch, of the train extra: pip "
                              "install -c constraints.txt 'cachegym[train]'") from e
        return ActivationOffload
    raise AttributeError(f"module 'cachegym' has no attribute {name!r}")
