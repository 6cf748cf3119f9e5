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


@pytest.mark.parametrize(("cost", "clean"), [(None, 0.0), ("a100_pcie4", 0.0), ("a100_pcie4", 0.3)])
def test_lru_and_first_successor_agent_equals_the_pool(cost, clean) -> None:
    """Evicting candidate 0 (LRU) and prefetching the predictor's first candidate is exactly
    Pool(LRU, prefetcher=...): the env adds decisions, not behaviour (its pool cleans ahead as
    one made with the same ``clean_ahead``)."""
    trace = pattern_trace()
    cap = 30 * 1024
    env = JointEnv(trace, K=4, window=None, capacity=cap, opportunity="access", cost=cost,
                   clean_ahead=clean)
    phases: set[int] = set()

    def choose(obs, info):
        phases.add(info["phase"])
        return 0

    _, steps, infos = rollout(env, choose)
    want = Pool(cap, LRU(), prefetcher=FirstSuccessor(), placement="bytes", cost=cost,
                oversize="bypass", clean_ahead=clean).replay(trace).as_dict()
    if clean:  # (the early copies happened: more bytes out than without)
        plain = Pool(cap, LRU(), prefetcher=FirstSuccessor(), placement="bytes", cost=cost,
                     oversize="bypass").replay(trace).as_dict()
        assert want["bytes_d2h"] > plain["bytes_d2h"]
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
        # (of the declared space's type, as every other key: a Python int before)
        assert type(obs["phase"]) is np.int64 and env.observation_space.contains(obs)
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


def test_displaced_next_use_is_the_soonest_use_a_prefetch_would_evict() -> None:
    """A prefetch decision's info says how soon the objects the oracle candidate's room would
    evict (LRU order, as the pool's policy makes it) are used again: ``inf`` when it fits in
    the free bytes; otherwise the soonest of the victims' next uses, recomputed here from the
    trace. The no-harm teacher (agent.dagger.prefetch_no_harm) waits where it is no later than
    the candidate's own use."""
    from cachegym.allocator.trace import Op
    from cachegym.envs.workloads.registry import generate

    seen = {"fits": 0, "evicts": 0, "harm": 0}
    dl = generate("dl_training", seed=5, n_layers=4, hidden=64, batch_tokens=128, steps=3)
    for trace, cap in ((pattern_trace(seed=3), 12 * 1024),  # (full after warm-up)
                       (dl, 0.5)):  # (frees leave room)
        keys = np.where(trace.op == Op.FREE, -1, trace.key).tolist()  # (a free is no use)
        _displaced_run(trace, keys, cap, seen)
    assert seen["fits"] and seen["evicts"] and seen["harm"]


def test_displaced_next_use_does_not_count_the_held_object_as_room() -> None:
    """The accessed object is held while its prefetch is served: a candidate that fits only
    where it stood is dropped (``dropped_prefetches``), so it displaces nothing useful and is no
    prefetch to imitate (0: harm). Counted as room, the object's own next use was reported
    (or ``inf``), and the teacher imitated prefetches the pool could never make (a helper's
    audit: 35 of 1,073 oracle prefetches on mlp_embedding)."""
    from cachegym.allocator.trace import Trace

    keys = np.array([0, 1] * 6, np.int64)  # 70 and 50 bytes in a 100-byte pool: never both
    trace = Trace.from_arrays(keys, np.where(keys == 0, 70, 50).astype(np.int64),
                              np.zeros(len(keys), np.uint8))
    env = JointEnv(trace, K=8, window=None, capacity=100, opportunity="access")
    obs, info = env.reset(seed=0)
    done, seen = False, 0
    while not done:
        if info["phase"] == PREFETCH and info["oracle_action"] < 8:
            assert info["displaced_next_use"] == 0.0
            seen += 1
        obs, _, done, _, info = env.step(info["oracle_action"])
    assert seen == 9 and info["dropped_prefetches"] == 9
    assert info["stats"]["evictions"] == 11  # one a miss; a dropped prefetch evicts nothing


def _displaced_run(trace, keys, cap, seen) -> None:
    env = JointEnv(trace, K=8, window=None, capacity=cap, capacity_of="peak_live",
                   opportunity="access")
    obs, info = env.reset(seed=0)
    done = False
    while not done:
        if info["phase"] == PREFETCH and info["oracle_action"] < 8:
            d = info["displaced_next_use"]
            pool, t = env.pool, info["tick"]
            cand = int(info["keys"][info["oracle_action"]])
            short = pool.view.size(cand) - (pool.view.capacity - pool.view.used)
            if short <= 0:
                assert d == np.inf
                seen["fits"] += 1
            else:
                want = np.inf
                for k in env.tracker._order:  # the LRU victims, least recent first
                    if not pool.view.evictable(k) or k == env._accessed:  # (held)
                        continue
                    nxt = [j for j in range(env._last_row[k] + 1, len(keys)) if keys[j] == k]
                    if nxt:
                        want = min(want, float(nxt[0] - t))
                    short -= pool.view.size(k)
                    if short <= 0:
                        break
                assert d == want
                seen["evicts"] += 1
                seen["harm"] += info["next_use"][info["oracle_action"]] >= d
        obs, _, done, _, info = env.step(info["oracle_action"])
