"""Gymnasium environments over the pool, and workloads (traces, generators, recorder).

Importing ``envs`` registers (lazily: the env modules load on ``gymnasium.make``):

* ``cachegym/Evict-v0``: :class:`envs.evict.EvictEnv`, choose eviction victims;
* ``cachegym/Prefetch-v0``: :class:`envs.prefetch.PrefetchEnv`, choose what to prefetch;
* ``cachegym/Joint-v0``: :class:`envs.joint.JointEnv`, both, in one episode.

In a fresh process (e.g. a ``SubprocVecEnv`` worker), ``gymnasium.make("cachegym:cachegym/Evict-v0")``
imports this package first.
"""

from cachegym.envs.registration import ENV_IDS, register_envs

register_envs()

__all__ = ["ENV_IDS", "register_envs"]
