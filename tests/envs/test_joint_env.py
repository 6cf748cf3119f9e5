"""cachegym/Joint-v0: eviction and prefetch decisions in one episode, through the pool."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from test_prefetch_env import (  # same folder (rootdir-relative)
    FirstSuccessor,
    pattern_trace,
    rollout,
)

import cachegym.envs  # noqa: F401
from cachegym.allocator.errors import InvalidActionError
from cachegym.allocator.pool import Pool
from cachegym.envs.joint import EVICT, PREFETCH, JointEnv
from cachegym.policies.lru import LRU
from cachegym.policies.priority import Belady


def test_checkers_pass_without_warnings() -> None:
    from gymnasium.utils.env_checker import check_env as gym_check
    from stable_baselines3.common.env_checker import check_env as sb3_check

    kw = {"traces": pattern_trace(n_rounds=6), "window": 300, "K": 6, "invalid_action": "default",
          "capacity": 0.5}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gym_check(gym.make("cachegym/Joint-v0", **kw).unwrapped, skip_render_check=True)
        sb3_check(gym.make("cachegym/Joint-v0", **kw).unwrapped, warn=True)


@pytest.mark.parametrize("cost", [None, "a100_pcie4"])
def test_lru_and_first_successor_agent_equals_the_pool(cost) -> None:
    """Evicting candidate 0 (LRU) and prefetching the predictor's first candidate is exactly
    Pool(LRU, prefetcher=...): the env adds decisions, not behaviour."""
    trace = pattern_trace()
    cap = 30 * 1024
    env = JointEnv(trace, K=4, window=None, capacity=cap, opportunity="access", cost=cost)
    phases: set[int] = set()

    def choose(obs, info):
        phases.add(info["phase"])
        return 0

    _, steps, infos = rollout(env, choose)
    want = Pool(cap, LRU(), prefetcher=FirstSuccessor(), placement="bytes", cost=cost,
                oversize="bypass").replay(trace).as_dict()
    got = infos[-1]["stats"]
    for f in ("misses", "hits", "prefetches", "prefetch_hits", "late_prefetches",
              "useless_prefetches", "evictions", "stall_ns", "bytes_d2h"):
        assert got[f] == want[f], f
    assert phases == {EVICT, PREFETCH}


def test_oracle_and_noop_agents() -> None:
    trace = pattern_trace(seed=1)
    cap = 30 * 1024
    env = JointEnv(trace, K=64, window=None, capacity=cap)

    def belady_no_prefetch(obs, info):
        return info["oracle_action"] if info["phase"] == EVICT else 64

    _, _, infos = rollout(env, belady_no_prefetch)
    assert infos[-1]["stats"]["misses"] == Pool(cap, Belady(trace), placement="bytes").replay(trace).misses
    total, _, infos = rollout(env, lambda o, i: i["oracle_action"])
    oracle = infos[-1]["stats"]["misses"]
    assert -total == oracle - infos[0]["misses"]
    assert oracle < Pool(cap, LRU(), placement="bytes").replay(trace).misses


def test_masks_phases_and_invalid_actions() -> None:
    env = JointEnv(pattern_trace(n_rounds=8), K=50, window=None, capacity=0.5,
                   invalid_action="raise")
    obs, info = env.reset(seed=0)
    seen = set()
    for _ in range(200):
        mask = env.action_masks()
        assert mask[-1] == (info["phase"] == PREFETCH) == (obs["phase"] == PREFETCH)
        np.testing.assert_array_equal(mask[:50], obs["mask"].astype(bool))
        seen.add(info["phase"])
        if info["phase"] == EVICT:
            with pytest.raises(InvalidActionError, match="masked in the eviction phase"):
                env.step(50)
        obs, _, term, _, info = env.step(int(np.flatnonzero(mask)[0]))
        if term:
            break
    assert seen == {EVICT, PREFETCH}
    a = JointEnv(pattern_trace(n_rounds=4, seed=3), K=8, window=200, candidates="sample")
    b = JointEnv(pattern_trace(n_rounds=4, seed=3), K=8, window=200, candidates="sample")
    ra, rb = rollout(a, lambda o, i: 0, seed=4), rollout(b, lambda o, i: 0, seed=4)
    assert ra[:2] == rb[:2]
