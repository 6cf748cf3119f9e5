"""cachegym/Evict-v0: checkers, determinism, vectorisation, the oracle and LRU agents against
the pool's own policies, actions, rewards, capacities, and a tiny workload PPO must learn."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rollout_helpers import rollout

import cachegym.envs  # noqa: F401  (registers the ids)
from cachegym.allocator.errors import ConfigError, InvalidActionError
from cachegym.allocator.pool import Pool
from cachegym.allocator.trace import Op, Trace
from cachegym.envs.evict import EvictEnv
from cachegym.policies import features
from cachegym.policies.lru import LRU
from cachegym.policies.priority import Belady
from tests.trace_makers import free_some


def small_trace(seed: int = 0, n: int = 1500, n_keys: int = 60, sizes: bool = True,
                frees: bool = True) -> Trace:
    rng = np.random.default_rng(seed)
    key = rng.zipf(1.2, n) % n_keys
    size_of = rng.integers(1, 6, n_keys) * 512 if sizes else np.full(n_keys, 512)
    op = np.where(rng.random(n) < 0.25, Op.WRITE, Op.READ).astype(np.uint8)
    if frees:
        free_some(key, op, rng, 0.03)
    return Trace.from_arrays(key, size_of[key], op, kind=rng.integers(0, 7, n_keys)[key])


def hot_scan_trace(n: int = 900) -> Trace:
    """A hot set of 6 objects interleaved with a scan (two new, never reused objects after each
    hot access). With a pool of 8 objects LRU lets the scan flush the hot set and misses on
    every access; keeping the hot set and evicting scan objects is optimal."""
    keys: list[int] = []
    for i in range(n):
        keys += [i % 6, 1000 + 2 * i, 1001 + 2 * i]
    return Trace.from_arrays(keys, 1)


def replay_misses(trace: Trace, capacity: int, policy) -> int:
    pool = Pool(capacity, policy, placement="bytes", oversize="bypass")
    return pool.replay(trace).misses


# ---------------------------------------------------------------------- checkers
@pytest.mark.parametrize("env_id", ["cachegym/Evict-v0", "cachegym/Prefetch-v0"])  # Joint: test_joint_env
def test_gymnasium_and_sb3_checkers_pass_without_warnings(env_id: str) -> None:
    from gymnasium.utils.env_checker import check_env as gym_check
    from stable_baselines3.common.env_checker import check_env as sb3_check

    trace = small_trace(1, n=800)
    # the checkers step with random actions, masked ones included: the lenient option takes them
    kw = {"traces": trace, "window": 400, "K": 8, "capacity_of": "working_set",
          "invalid_action": "lru" if "Evict" in env_id else "noop"}
    if "Evict" in env_id:
        kw["candidates"] = "lru"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gym_check(gym.make(env_id, **kw).unwrapped, skip_render_check=True)
        sb3_check(gym.make(env_id, **kw).unwrapped, warn=True)


def test_same_seed_same_rollout() -> None:
    trace = small_trace(2)

    def run(seed: int):
        env = EvictEnv([trace, small_trace(3)], K=8, window=500, candidates="sample", capacity=0.3,
                       capacity_of="working_set")
        rng = np.random.default_rng(seed)
        obs_log = []

        def choose(obs, info):
            obs_log.append(obs["candidates"].copy())
            return int(rng.choice(np.flatnonzero(obs["mask"])))

        total, steps, infos = rollout(env, choose, seed=seed)
        return total, steps, np.stack(obs_log), [i["keys"].tolist() for i in infos]

    a, b, c = run(7), run(7), run(8)
    assert a[0] == b[0] and a[1] == b[1] and a[3] == b[3]
    np.testing.assert_array_equal(a[2], b[2])
    assert a[3] != c[3]


# ---------------------------------------------------------------------- agents vs the pool
@pytest.mark.parametrize("seed", [0, 1])
def test_oracle_agent_gets_belady_and_lru_agent_gets_lru(seed: int) -> None:
    trace = small_trace(seed, n=1200, sizes=bool(seed), frees=True)
    cap = 12 * 512 * (3 if seed else 1)
    env = EvictEnv(trace, K=512, candidates="lru", window=None, capacity=cap, reward="misses")

    total, steps, infos = rollout(env, lambda obs, info: info["oracle_action"])
    want = replay_misses(trace, cap, Belady(trace))
    assert infos[-1]["stats"]["misses"] == want
    # the reward is -1 per miss after the first decision
    assert -total == want - infos[0]["misses"]

    _, _, infos = rollout(env, lambda obs, info: 0)
    assert infos[-1]["stats"]["misses"] == replay_misses(trace, cap, LRU())
    assert infos[-1]["stats"]["misses"] > want
    assert steps > 100


def test_lru_agent_matches_lru_with_few_candidates() -> None:
    """Index 0 of the "lru" rule is LRU's victim whatever K."""
    trace = small_trace(4, n=1500)
    env = EvictEnv(trace, K=4, candidates="lru", window=None, capacity=0.2, capacity_of="working_set")
    _, _, infos = rollout(env, lambda obs, info: 0)
    cap = env.pool.capacity  # type: ignore[union-attr]
    assert infos[-1]["stats"]["misses"] == replay_misses(trace, cap, LRU())


def test_info_next_use_and_observation_match_the_trace() -> None:
    trace = small_trace(5, frees=False)
    env = EvictEnv(trace, K=16, window=700, candidates="sample", capacity=0.25,
                   capacity_of="working_set")
    obs, info = env.reset(seed=3)
    w = env._w.trace
    for _ in range(30):
        mask = env.action_masks()
        assert mask.dtype == bool and mask.shape == (16,)
        np.testing.assert_array_equal(mask, obs["mask"].astype(bool))
        n = int(mask.sum())
        t = info["tick"]
        keys = info["keys"]
        assert (keys[n:] == -1).all() and (info["next_use"][n:] == -1).all()
        for j in range(n):  # next use: the next row of the same key after the current tick
            rows = np.flatnonzero(w.key[t + 1:] == keys[j])
            want = rows[0] + 1 if len(rows) else np.inf
            assert info["next_use"][j] == want
        assert info["next_use"][info["oracle_action"]] == info["next_use"][:n].max()
        # the observation is what policies.features computes for these candidates
        cand, m, glob = features.observe(env.tracker, env.pool.view, keys[:n], 16)
        np.testing.assert_array_equal(obs["candidates"], cand.reshape(-1))
        np.testing.assert_array_equal(obs["globals"], glob)
        obs, _, term, _, info = env.step(int(np.flatnonzero(mask)[-1]))
        if term:
            break


# ---------------------------------------------------------------------- actions
def test_invalid_actions() -> None:
    trace = small_trace(6, n=600)
    env = EvictEnv(trace, K=64, candidates="lru", window=None, capacity=0.2, capacity_of="working_set",
                   invalid_action="raise")
    obs, _ = env.reset(seed=0)
    n = int(obs["mask"].sum())
    assert 0 < n < 64
    with pytest.raises(InvalidActionError, match=r"out of range.*0\.\.63"):
        env.step(64)
    with pytest.raises(InvalidActionError, match="padded slot"):
        env.step(n)
    for bad in ("x", "3", 1.5, np.float32(2.5), float("nan"), float("inf"), True, np.array([1, 2])):
        with pytest.raises(InvalidActionError, match="not an integer"):  # nothing truncated or parsed
            env.step(bad)
    from cachegym.envs.common import action_int

    for fine in (np.int64(7), np.array(7), 7.0, np.float32(7.0), np.array(7.0)):  # integral values
        assert action_int(fine, 64) == 7 and type(action_int(fine, 64)) is int
    lenient = EvictEnv(trace, K=64, candidates="lru", window=None, capacity=0.2,
                       capacity_of="working_set", invalid_action="lru")
    lenient.reset(seed=0)
    _, _, _, _, info = lenient.step(63)
    assert info["invalid_actions"] == 1
    _, _, infos_lru = rollout(EvictEnv(trace, K=64, candidates="lru", window=None, capacity=0.2,
                                        capacity_of="working_set"), lambda o, i: 0)
    _, _, infos_bad = rollout(lenient, lambda o, i: 63)
    assert infos_bad[-1]["stats"]["misses"] == infos_lru[-1]["stats"]["misses"]
    with pytest.raises(InvalidActionError, match="reset"):
        lenient.step(0)


@pytest.mark.parametrize("kwargs, match", [
    ({"K": 0}, "K must be"), ({"K": 100_000}, r"K must be an int in 1\.\.1024"), ({"candidates": "mru"}, "candidates must be"),
    ({"reward": "hits"}, "reward must be"), ({"reward": "stall"}, "cost model"),
    ({"capacity": 1.5}, "fraction"), ({"capacity": -3}, "> 0"), ({"capacity_of": "x"}, "capacity_of"),
    ({"invalid_action": "skip"}, "invalid_action"), ({"window": 0}, "window"),
])
def test_bad_arguments_say_what_to_do(kwargs, match) -> None:
    with pytest.raises(ConfigError, match=match):
        EvictEnv(small_trace(0, n=100), **kwargs)


# ---------------------------------------------------------------------- rewards and capacity
def test_bytes_and_stall_rewards() -> None:
    trace = small_trace(7, n=800, frees=False)
    for reward, field in (("bytes", "byte_misses"), ("traffic", "traffic_bytes"), ("stall", "stall_ns")):
        env = EvictEnv(trace, K=8, candidates="lru", window=None, capacity=0.3,
                       capacity_of="working_set", reward=reward, cost="a100_pcie4")
        obs, info = env.reset(seed=0)
        pool = env.pool
        base = pool.snapshot().as_dict()[field]
        total, _, infos = rollout(env, lambda o, i: 0, seed=0)
        scale = env._fetch_ns if reward == "stall" else env._mean_size
        assert total < 0
        assert -total * scale == pytest.approx(infos[-1]["stats"][field] - base, rel=1e-9)


def test_a_reward_baseline_credits_the_accesses_served() -> None:
    """``reward_baseline=b`` adds ``b`` cost units per access served between two decisions, so
    an episode's rewards sum to ``b * accesses - cost`` (each reward kind, misses' fast path
    included); on the default workload (equal sizes, a full pool) every step of the plain
    reward costs exactly one miss whatever the agent does, and every discounted return is
    alike; with a baseline of 1 Belady's actions earn more than always-the-first's."""
    trace = small_trace(7, n=800, frees=False)
    for reward, field in (("misses", "misses"), ("traffic", "traffic_bytes"), ("stall", "stall_ns")):
        env = EvictEnv(trace, K=8, candidates="lru", window=None, capacity=0.3,
                       capacity_of="working_set", reward=reward, cost="a100_pcie4",
                       reward_baseline=0.5)
        env.reset(seed=0)
        pool = env.pool
        base, acc0 = pool.snapshot().as_dict()[field], pool.stats.accesses
        total, _, infos = rollout(env, lambda o, i: 0, seed=0)
        scale = {"misses": 1.0, "stall": env._fetch_ns}.get(reward, env._mean_size)
        cost = (infos[-1]["stats"][field] - base) / scale
        assert total == pytest.approx(0.5 * (infos[-1]["stats"]["accesses"] - acc0) - cost, rel=1e-9)

    def returns(baseline: float) -> dict[str, tuple[float, set[float]]]:
        env = EvictEnv(reward_baseline=baseline)
        out = {}
        for name in ("oracle", "first"):
            _, info = env.reset(seed=0)
            rs = []
            while True:
                _, r, term, trunc, info = env.step(info["oracle_action"] if name == "oracle" else 0)
                rs.append(r)
                if term or trunc:
                    break
            out[name] = (sum(r * 0.99**i for i, r in enumerate(rs)), set(rs))
        return out

    plain = returns(0.0)
    assert plain["oracle"][1] == plain["first"][1] == {-1.0}  # no signal per decision
    shaped = returns(1.0)
    assert shaped["oracle"][0] > shaped["first"][0] + 50 and len(shaped["oracle"][1]) > 10


@pytest.mark.parametrize(("kw", "match"), [
    ({"reward_baseline": -1.0}, "reward_baseline must be a number >= 0"),
    ({"reward_baseline": float("nan")}, "reward_baseline must be a number >= 0"),
    ({"reward_baseline": True}, "reward_baseline must be a number >= 0"),
])
def test_a_bad_reward_baseline_is_refused(kw, match) -> None:
    with pytest.raises(ConfigError, match=match):
        EvictEnv(**kw)


def test_capacity_fractions_of_the_window() -> None:
    trace = small_trace(8, n=2000)
    for of, fn in (("working_set", Trace.working_set_bytes), ("peak_live", Trace.peak_live_bytes)):
        env = EvictEnv(trace, K=8, candidates="lru", window=500, capacity=0.5, capacity_of=of)
        env.reset(seed=1)
        assert env.pool.capacity == int(0.5 * fn(env._w.trace))  # type: ignore[union-attr]
    env = EvictEnv(trace, K=8, candidates="lru", window=500, capacity=4096)
    env.reset(seed=1, options={"start": 100})
    assert env.pool.capacity == 4096 and env._w.start == 100  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="no eviction"):
        EvictEnv(trace, candidates="lru", window=50, capacity=1.0, capacity_of="working_set").reset(seed=0)


# ---------------------------------------------------------------------- vectorisation
@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_vector_envs_and_action_masks() -> None:
    from sb3_contrib.common.maskable.utils import get_action_masks
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    kw = {"traces": {"generator": "zipf", "n_requests": 2000, "n_objects": 200, "seed": 1},
          "window": 300, "K": 8, "candidates": "lru", "capacity_of": "working_set", "render_mode": None}
    venv = gym.make_vec("cachegym/Evict-v0", num_envs=2, vectorization_mode="sync", **kw)
    obs, _ = venv.reset(seed=0)
    assert obs["candidates"].shape == (2, 8 * len(features.FEATURE_NAMES))
    for _ in range(5):
        obs, r, term, trunc, info = venv.step(np.zeros(2, np.int64))
    venv.close()
    for cls in (DummyVecEnv, SubprocVecEnv):
        v = make_vec_env("envs:cachegym/Evict-v0", n_envs=2, seed=0, vec_env_cls=cls, env_kwargs=kw)
        obs = v.reset()
        masks = get_action_masks(v)
        assert masks.shape == (2, 8) and masks.dtype == bool
        np.testing.assert_array_equal(masks, obs["mask"].astype(bool))
        for _ in range(5):
            obs, r, done, info = v.step(np.zeros(2, np.int64))
        v.close()


# ---------------------------------------------------------------------- learning
@pytest.mark.slow
def test_ppo_learns_to_beat_lru_on_a_scan_over_a_hot_set() -> None:
    """SB3's PPO with the project's candidate-scoring policy (cachegym.policies.training.nets) learns
    to keep the hot set within 2,048 decisions (a robust budget: 20 seeds tried, all within
    10% of Belady)."""
    import torch
    from stable_baselines3 import PPO

    from cachegym.policies.training.nets import ScorerActorCriticPolicy

    torch.set_num_threads(1)
    kw = {"traces": hot_scan_trace(), "K": 8, "candidates": "lru", "window": 300, "capacity": 8}
    model = PPO(ScorerActorCriticPolicy, EvictEnv(**kw), n_steps=128, batch_size=64, n_epochs=6,
                learning_rate=3e-3, gamma=0.7, ent_coef=0.0, seed=0, device="cpu",
                policy_kwargs={"hidden": [32]})
    model.learn(2_048)

    def misses(choose) -> int:
        _, _, infos = rollout(EvictEnv(**kw), choose, seed=0, options={"start": 0})
        return int(infos[-1]["stats"]["misses"])

    lru = misses(lambda o, i: 0)
    belady = misses(lambda o, i: i["oracle_action"])
    learned = misses(lambda o, i: int(model.predict(o, deterministic=True)[0]))
    assert belady < 0.75 * lru
    assert learned < 0.8 * lru, (learned, lru, belady)


def test_bundled_ml_trace_with_frees_and_mixed_sources() -> None:
    """A recorded training trace (frees, variable sizes, kinds) mixed with a generator spec:
    the oracle agent still gets exactly Belady's misses on the drawn window."""
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "..", "data", "traces", "resnet.npz")
    env = EvictEnv([path, {"generator": "zipf", "n_requests": 3000, "n_objects": 300, "seed": 2}],
                   K=1024, candidates="lru", window=1500, capacity=0.5, capacity_of="peak_live")
    _, _, infos = rollout(env, lambda o, i: i["oracle_action"], seed=0, options={"trace": 0})
    w, cap = env._w.trace, env.pool.capacity  # type: ignore[union-attr]
    assert cap == int(0.5 * w.peak_live_bytes()) and (w.op == Op.FREE).any()
    assert infos[-1]["stats"]["misses"] == replay_misses(w, cap, Belady(w))
    env.reset(seed=0, options={"trace": 1})
    assert env._w.source == 1 and env._w.trace.meta["generator"] == "zipf"


def test_deployment_sees_the_training_observations() -> None:
    """A policy in a plain pool (as LearnedPolicy runs in deployment: tracker hooks, then
    select_candidates + observe at each victim call) sees exactly the env's observations."""
    from cachegym.policies.features import FeatureTracker, observe, select_candidates

    class Recorder(FeatureTracker):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[tuple[np.ndarray, np.ndarray]] = []

        def victim(self, view):
            keys = select_candidates(self, view, 8, "lru")
            cand, _, glob = observe(self, view, keys, 8)
            self.seen.append((cand.reshape(-1), glob))
            return int(keys[0])

    trace = small_trace(11, n=1200)
    cap = 10 * 512 * 3
    rec = Recorder()
    Pool(cap, rec, placement="bytes", oversize="bypass", cost="h100_pcie5").replay(trace)
    env = EvictEnv(trace, K=8, candidates="lru", window=None, capacity=cap, cost="h100_pcie5")
    obs, _ = env.reset(seed=0)
    got = []
    while True:
        got.append((obs["candidates"], obs["globals"]))
        obs, _, term, _, _ = env.step(0)
        if term:
            break
    assert len(got) == len(rec.seen) > 100
    for (a, b), (c, d) in zip(got, rec.seen):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)


def test_maskable_ppo_only_takes_valid_actions() -> None:
    """With padded candidates and invalid_action="raise", MaskablePPO's rollouts and training
    go through: the env's action_masks() reaches the policy through the vec env."""
    from sb3_contrib import MaskablePPO

    trace = small_trace(12, n=1500)
    env = EvictEnv(trace, K=64, candidates="lru", window=600, capacity=0.2,  # < 64 evictable objects
                   capacity_of="working_set", invalid_action="raise")
    obs, _ = env.reset(seed=0)
    assert not obs["mask"].all()
    model = MaskablePPO("MultiInputPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0,
                        policy_kwargs={"net_arch": [16]}, device="cpu")
    model.learn(128)


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**16), K=st.integers(1, 40), rule=st.sampled_from(["lru", "sample"]),
       capacity=st.floats(0.05, 0.6), cost=st.sampled_from([None, "a100_pcie4"]),
       placement=st.sampled_from(["bytes", "arena"]),
       env_cls=st.sampled_from(["evict", "prefetch", "joint"]))
def test_random_agents_keep_every_invariant(seed, K, rule, capacity, cost, placement, env_cls) -> None:
    """Whatever the trace, parameters and (valid) actions: observations are in the space, the
    mask matches the candidates, the pool's invariants hold after every step, and the final
    statistics add up."""
    from cachegym.envs.joint import JointEnv
    from cachegym.envs.prefetch import PrefetchEnv

    trace = small_trace(seed, n=500, n_keys=int(seed % 50) + 10)
    if env_cls == "evict":
        env: gym.Env = EvictEnv(trace, K=K, candidates=rule, window=300, capacity=capacity,
                                capacity_of="working_set",
                                cost=cost, placement=placement)
    elif env_cls == "joint":
        env = JointEnv(trace, K=K, candidates=rule, window=300, capacity=capacity, cost=cost,
                       placement=placement, opportunity="access")
    else:
        env = PrefetchEnv(trace, K=K, window=300, capacity=capacity, cost=cost,
                          placement=placement, opportunity="access")
    rng = np.random.default_rng(seed)
    try:
        obs, info = env.reset(seed=seed)
    except ConfigError:  # the drawn windows fit in the pool: no decision to make
        return
    n_actions = env.action_space.n  # type: ignore[attr-defined]
    for _ in range(400):
        assert env.observation_space.contains(obs)
        mask = env.action_masks()  # type: ignore[attr-defined]
        assert mask.shape == (n_actions,) and mask.any()
        np.testing.assert_array_equal(mask[:K], obs["mask"].astype(bool))
        valid = info["next_use"][:K][mask[:K]]
        assert ((valid >= 1) | np.isinf(valid)).all()
        obs, r, term, trunc, info = env.step(int(rng.choice(np.flatnonzero(mask))))
        env.pool._check()  # type: ignore[attr-defined]
        assert np.isfinite(r) and not trunc
        if term:
            st_ = info["stats"]
            assert st_["hits"] + st_["misses"] == st_["accesses"]
            assert st_["accesses"] == int((env._w.trace.op != Op.FREE).sum())  # type: ignore[attr-defined]
            break


def test_capacity_takes_sizes_and_percentages() -> None:
    """``capacity="1MiB"`` is bytes, ``"25%"`` the fraction 0.25, as everywhere a capacity is."""
    import gymnasium as gym

    from cachegym.allocator.errors import ConfigError

    def pool_bytes(cap: object) -> int:
        env = gym.make("cachegym/Evict-v0", capacity=cap)
        env.reset(seed=0)
        return int(env.unwrapped.pool.capacity)  # type: ignore[attr-defined]

    assert pool_bytes("1MiB") == 1 << 20 == pool_bytes(1 << 20)
    assert pool_bytes("25%") == pool_bytes(0.25)
    with pytest.raises(ConfigError, match="'lots' is not a size"):
        pool_bytes("lots")
