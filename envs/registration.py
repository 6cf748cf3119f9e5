"""Registration of the cachegym environments with Gymnasium (idempotent)."""

from __future__ import annotations

__all__ = ["ENV_IDS", "register_envs"]

ENV_IDS = ("cachegym/Evict-v0", "cachegym/Prefetch-v0", "cachegym/Joint-v0")
_ENTRY_POINTS = {"cachegym/Evict-v0": "cachegym.envs.evict:EvictEnv",
                 "cachegym/Prefetch-v0": "cachegym.envs.prefetch:PrefetchEnv",
                 "cachegym/Joint-v0": "cachegym.envs.joint:JointEnv"}


def register_envs() -> None:
    """Register every id of :data:`ENV_IDS` not registered yet (the env modules load lazily,
    on ``gymnasium.make``). ``import cachegym`` calls it. Without Gymnasium (a deployment that
    loads exported policies with NumPy alone) there is nothing to register."""
    try:
        from gymnasium.envs.registration import register, registry
    except ImportError:
        return
    for env_id, entry in _ENTRY_POINTS.items():
        if env_id not in registry:
            register(id=env_id, entry_point=entry)
