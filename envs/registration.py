"""Registration of the cachegym environments with Gymnasium (idempotent)."""

from __future__ import annotations

from gymnasium.envs.registration import register, registry

__all__ = ["ENV_IDS", "register_envs"]

ENV_IDS = ("cachegym/Evict-v0", "cachegym/Prefetch-v0", "cachegym/Joint-v0")
_ENTRY_POINTS = {"cachegym/Evict-v0": "envs.evict:EvictEnv",
                 "cachegym/Prefetch-v0": "envs.prefetch:PrefetchEnv",
                 "cachegym/Joint-v0": "envs.joint:JointEnv"}


def register_envs() -> None:
    """Register every id of :data:`ENV_IDS` not registered yet (the env modules load lazily,
    on ``gymnasium.make``). ``import envs`` calls it."""
    for env_id, entry in _ENTRY_POINTS.items():
        if env_id not in registry:
            register(id=env_id, entry_point=entry)
