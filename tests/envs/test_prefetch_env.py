"""cachegym/Prefetch-v0: the env drives the pool's own prefetch path (an agent that takes the
predictor's first candidate equals the pool with that prefetcher), the oracle beats doing
nothing, doing nothing equals plain LRU, opportunities, rewards and actions."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from rollout_helpers import rollout

import cachegym.envs  # noqa: F401
from cachegym.allocator.errors import ConfigError, InvalidActionError
from cachegym.allocator.pool import Pool
from cachegym.allocator.trace import Op, Trace
from cachegym.envs.prefetch import PrefetchEnv
from cachegym.policies import features
from cachegym.policies.lru import LRU
from cachegym.policies.successors import SuccessorPredictor


def pattern_trace(n_rounds: int = 40, seed: int = 0, writes: bool = True,
                  compute_ns: int = 20_000) -> Trace:
    """Rounds over a fixed sequence of 40 objects with noise: successors predict well."""
    rng = np.random.default_rng(seed)
    seq = rng.permutation(40)
    keys: list[int] = []
    for _ in range(n_rounds):
        for k in seq:
            keys.append(int(k))
            if rng.random() < 0.2:
                keys.append(int(rng.integers(40, 80)))
    op = np.where(rng.random(len(keys)) < 0.2, Op.WRITE, Op.READ) if writes else None
    step = np.arange(len(keys)) // 3
    return Trace.from_arrays(keys, 1024, op, compute_ns=np.full(len(keys), compute_ns), step=step)


class FirstSuccessor:
    """The pool-side prefetch policy the env's agent imitates by always taking candidate 0."""

    name = "first-successor"

    def __init__(self) -> None:
        self.p = SuccessorPredictor()

    def prefetch(self, view, key):
        self.p.observe(key)
        return self.p.propose(key, 1, view)


@pytest.mark.parametrize("cost", [None, "a100_pcie4"])
def test_first_candidate_agent_equals_the_pool_with_that_prefetcher(cost) -> None:
    trace = pattern_trace()
    cap = 30 * 1024
    env = PrefetchEnv(trace, K=4, window=None, capacity=cap, opportunity="access", cost=cost)
    _, steps, infos = rollout(env, lambda o, i: 0)
    pool = Pool(cap, LRU(), prefetcher=FirstSuccessor(), placement="bytes", cost=cost,
                oversize="bypass")
    want = pool.replay(trace).as_dict()
    got = infos[-1]["stats"]
    for f in ("misses", "hits", "prefetches", "prefetch_hits", "late_prefetches",
              "useless_prefetches", "evictions", "bytes_h2d", "bytes_d2h", "stall_ns"):
        assert got[f] == want[f], f
    assert steps > 500 and got["prefetch_hits"] > 100


def test_noop_agent_equals_lru_and_oracle_beats_it() -> None:
    trace = pattern_trace(seed=1)
    cap = 30 * 1024
    env = PrefetchEnv(trace, K=8, window=None, capacity=cap, reward="misses")
    total_noop, _, infos = rollout(env, lambda o, i: 8)
    noop = infos[-1]["stats"]
    assert noop["misses"] == Pool(cap, LRU(), placement="bytes").replay(trace).misses
    assert total_noop == -(noop["misses"] - infos[0]["misses"])
    _, _, infos = rollout(env, lambda o, i: i["oracle_action"])
    oracle = infos[-1]["stats"]
    assert oracle["misses"] < 0.8 * noop["misses"]
    assert oracle["prefetch_hits"] > 0


def test_pythia_reward_counts_outcomes() -> None:
    trace = pattern_trace(seed=2, compute_ns=3_000)  # a fetch (8 us) outlasts a step
    w = {"timely": 3.0, "late": 2.0, "useless": -5.0, "none": -0.25}
    env = PrefetchEnv(trace, K=4, window=None, capacity=25 * 1024, pythia_weights=w, cost="h100_pcie5")
    rng = np.random.default_rng(0)
    noops = 0

    def choose(obs, info):
        nonlocal noops
        a = int(rng.choice(np.flatnonzero(env.action_masks())))
        noops += a == 4
        return a

    total, steps, infos = rollout(env, choose)
    st, first = infos[-1]["stats"], infos[0]
    assert first["misses"] >= 1 and steps > 100
    # nothing was prefetched before the first decision, so the outcomes all count
    want = (w["timely"] * st["prefetch_hits"] + w["late"] * st["late_prefetches"]
            + w["useless"] * st["useless_prefetches"] + w["none"] * noops)
    assert total == pytest.approx(want)
    assert st["late_prefetches"] > 0 and st["useless_prefetches"] > 0


@pytest.mark.parametrize("opportunity", ["miss", "access", "step", 5])
def test_opportunities_and_info(opportunity) -> None:
    trace = pattern_trace(n_rounds=10, seed=3)
    env = PrefetchEnv(trace, K=6, window=300, capacity=0.5, opportunity=opportunity)
    obs, info = env.reset(seed=0)
    w = env._w.trace
    prev_tick = -1
    for _ in range(40):
        t = info["tick"]
        assert t > prev_tick
        prev_tick = t
        if opportunity == "miss":
            assert info["misses"] > 0
        elif opportunity == "step":
            assert t == len(w) - 1 or w.step[t + 1] != w.step[t]
        mask = env.action_masks()
        assert mask.shape == (7,) and mask[-1]
        n = int(mask[:-1].sum())
        keys = info["keys"]
        pool = env.pool
        for j in range(n):
            k = int(keys[j])
            assert k in pool and not pool.view.is_resident(k)
            rows = np.flatnonzero(w.key[t + 1:] == k)
            assert info["next_use"][j] == (rows[0] + 1 if len(rows) else np.inf)
        if np.isfinite(info["next_use"][:n]).any():
            assert info["next_use"][info["oracle_action"]] == info["next_use"][:n].min()
        else:
            assert info["oracle_action"] == 6
        cand, m, glob = features.observe(env.tracker, pool.view, keys[:n], 6)
        np.testing.assert_array_equal(obs["candidates"], cand.reshape(-1))
        obs, r, term, trunc, info = env.step(info["oracle_action"])
        if term:
            break


def test_invalid_actions_and_arguments() -> None:
    env = PrefetchEnv(pattern_trace(n_rounds=5), K=16, window=None, capacity=0.5,
                      invalid_action="raise")
    obs, _ = env.reset(seed=0)
    n = int(obs["mask"].sum())
    assert n < 16
    with pytest.raises(InvalidActionError, match=r"0\.\.16"):
        env.step(17)
    with pytest.raises(InvalidActionError, match="padded slot"):
        env.step(15)
    lenient = PrefetchEnv(pattern_trace(n_rounds=5), K=16, window=None, capacity=0.5,
                          invalid_action="noop")
    lenient.reset(seed=0)
    _, _, _, _, info = lenient.step(15)
    assert info["invalid_actions"] == 1
    for kw, match in (({"opportunity": "sometimes"}, "opportunity"), ({"opportunity": 0}, "opportunity"),
                      ({"reward": "hits"}, "reward"), ({"reward": "stall"}, "cost model"),
                      ({"pythia_weights": {"early": 1.0}}, "unknown outcome"),
                      ({"eviction": "fifo"}, "eviction"), ({"invalid_action": "lru"}, "invalid_action"),
                      # (an object of the wrong kind failed at reset, untyped; the class was
                      # blamed on its eviction_order's signature)
                      ({"eviction": 5}, r"eviction \('lru' or an EvictionPolicy object\): policy "
                                        r"int has no victim, on_hit, .* methods"),
                      ({"eviction": object()}, r"eviction \('lru' or an EvictionPolicy object\): "
                                               r"policy object has no victim"),
                      ({"eviction": LRU}, r"eviction \('lru' or an EvictionPolicy object\): policy "
                                          r"LRU is a class: pass an instance, LRU\(\.\.\.\)"),
                      ({"predictor": 5}, r"predictor must be a SuccessorPredictor, a dict.*got 5"),
                      ({"predictor": "depth"}, "predictor must be a SuccessorPredictor")):
        with pytest.raises(ConfigError, match=match):
            PrefetchEnv(pattern_trace(n_rounds=2), **kw)
    assert PrefetchEnv(pattern_trace(n_rounds=2), predictor={"depth": np.int64(2)}) is not None
    from cachegym.envs.common import demand_marks, demand_reward

    pool = Pool(100, LRU())  # a step without a cost is +0.0 in every reward (-0.0 printed "-0.0")
    pool.access(1, 10)
    for kind in ("misses", "bytes", "traffic", "stall"):
        r = demand_reward(kind, pool, demand_marks(pool), 10.0, 1.0)
        assert r == 0 and np.copysign(1.0, r) == 1.0, kind


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_same_seed_same_rollout_and_vector_env() -> None:
    traces = [pattern_trace(n_rounds=8, seed=s) for s in (4, 5)]

    def run(seed):
        env = PrefetchEnv(traces, K=4, window=200)
        rng = np.random.default_rng(seed)
        return rollout(env, lambda o, i: int(rng.choice(np.flatnonzero(env.action_masks()))), seed=seed)

    a, b = run(1), run(1)
    assert a[0] == b[0] and a[1] == b[1]
    assert [i["keys"].tolist() for i in a[2]] == [i["keys"].tolist() for i in b[2]]
    venv = gym.make_vec("cachegym/Prefetch-v0", num_envs=2, vectorization_mode="sync",
                        traces=traces, window=200, K=4)
    venv.reset(seed=0)
    for _ in range(5):
        venv.step(np.full(2, 4))
    venv.close()
    from sb3_contrib.common.maskable.utils import get_action_masks
    from stable_baselines3.common.env_util import make_vec_env

    v = make_vec_env("cachegym/Prefetch-v0", n_envs=2, seed=0,
                     env_kwargs={"traces": traces, "window": 200, "K": 4, "render_mode": None})
    obs = v.reset()
    masks = get_action_masks(v)
    assert masks.shape == (2, 5) and masks[:, -1].all()
    np.testing.assert_array_equal(masks[:, :4], obs["mask"].astype(bool))
    v.step(np.full(2, 4))
    v.close()


class PublicView:
    """A view with only PoolView's public API (no ``_objs``): the predictor's slow path."""

    def __init__(self, view) -> None:
        self.v = view

    def __contains__(self, key) -> bool:
        return key in self.v

    def is_resident(self, key) -> bool:
        return self.v.is_resident(key)


def test_predictor_proposes_the_same_through_the_pool_records_and_the_public_view() -> None:
    """Proposals are known, non-resident objects, whichever way residency is read: from the
    pool's records or through the public view."""
    trace = pattern_trace(n_rounds=6, seed=2)
    pool = Pool(20 * 1024, LRU(), placement="bytes", cost="a100_pcie4")
    p = SuccessorPredictor(depth=2, width=3, hops=3)
    n_proposed = 0
    for k, op in zip(trace.key.tolist(), trace.op.tolist()):
        pool.access(k, 1024, op == Op.WRITE)
        p.observe(k)
        for K in (1, 4, 32):
            fast = p.propose(k, K, pool.view)
            assert fast == p.propose(k, K, PublicView(pool.view))  # type: ignore[arg-type]
            assert len(fast) <= K and all(z in pool and not pool.view.is_resident(z) for z in fast)
            n_proposed += len(fast)
        if k % 7 == 0 and fast:
            pool.prefetch(fast[0])  # some objects in flight (h2d)
    assert n_proposed > 100


def test_a_reward_baseline_goes_with_the_demand_rewards_only() -> None:
    """``reward_baseline`` credits accesses served against their cost; ``pythia`` scores
    prefetches, so a baseline there is refused by name; with a demand reward it applies."""
    from cachegym.envs.joint import JointEnv

    with pytest.raises(ConfigError, match="not to reward='pythia'"):
        PrefetchEnv(reward_baseline=1.0)
    for env in (PrefetchEnv(reward="misses", reward_baseline=1.0), JointEnv(reward_baseline=1.0)):
        _, info = env.reset(seed=0)
        acc0 = env.pool.stats.accesses
        m0 = env.pool.stats.misses
        total = 0.0
        for _ in range(50):
            _, r, term, _, info = env.step(env.K)  # the no-op / the default
            total += r
            if term:
                break
        st = env.pool.stats
        assert total == pytest.approx((st.accesses - acc0) - (st.misses - m0))


def _steps_ending_with_frees(n_steps: int = 6):
    """Each training step writes a temporary, reads keys 1-4, then frees the temporary: its last
    access is the read of 4, and a free follows it (as in every bundled DL trace)."""
    from cachegym.allocator.trace import Trace

    key, op, step = [], [], []
    for s in range(n_steps):
        rows = [(100 + s, 1), (1, 0), (2, 0), (3, 0), (4, 0), (100 + s, 2)]
        key += [k for k, _ in rows]
        op += [o for _, o in rows]
        step += [s] * len(rows)
    return Trace.from_arrays(np.array(key), np.full(len(key), 100), np.array(op, np.int8),
                             step=np.array(step))


@pytest.mark.parametrize("env_id", ["cachegym/Prefetch-v0", "cachegym/Joint-v0"])
def test_opportunity_step_asks_at_a_steps_last_access_though_frees_follow(env_id: str) -> None:
    """Before 2026-12-05 the rule looked at the row after each access, a free here: no decision
    arose (Prefetch-v0 refused to start; Joint-v0 asked for evictions only)."""
    from cachegym.envs.joint import PREFETCH

    t = _steps_ending_with_frees()
    env = gym.make(env_id, traces=t, K=2, window=None, capacity=200, opportunity="step").unwrapped
    obs, info = env.reset(seed=0)
    accessed, term = [], False
    while not term:
        if env_id.endswith("Joint-v0") and info["phase"] != PREFETCH:
            obs, r, term, trunc, info = env.step(int(np.flatnonzero(env.action_masks())[0]))
            continue
        accessed.append(info["tick"])
        obs, r, term, trunc, info = env.step(env.K)  # no prefetch
    # one per step but the first (the successors of key 4 are known from its second step on),
    # each after the read of key 4: row 6 s + 4 of step s (the pool's tick counts every row)
    assert accessed == [6 * s + 4 for s in range(1, 6)]
