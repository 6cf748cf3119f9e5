"""Gymnasium environments over the pool, and workloads (traces, generators, recorder).

Importing ``envs`` registers (lazily: the env modules load on ``gymnasium.make``):

* ``cachegym/Evict-v0``: :class:`envs.evict.EvictEnv`, choose eviction victims;
* ``cachegym/Prefetch-v0``: :class:`envs.prefetch.PrefetchEnv`, choose what to prefetch.

In a fresh process (e.g. a ``SubprocVecEnv`` worker), ``gymnasium.make("envs:cachegym/Evict-v0")``
imports this package first.
"""

from gymnasium.envs.registration import register, registry

for _id, _entry in (("cachegym/Evict-v0", "envs.evict:EvictEnv"),
                    ("cachegym/Prefetch-v0", "envs.prefetch:PrefetchEnv")):
    if _id not in registry:
        register(id=_id, entry_point=_entry)

ENV_IDS = ("cachegym/Evict-v0", "cachegym/Prefetch-v0")
