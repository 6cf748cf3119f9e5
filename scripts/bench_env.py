"""Environment speed, side by side in one run.

    python scripts/bench.py env [--K 32] [--seconds 5] [--ppo-steps 4096]

* decisions per second of ``cachegym/Evict-v0``, ``cachegym/Prefetch-v0`` and ``cachegym/Joint-v0`` (default
  configurations, ``K`` candidates) under a random agent that picks a valid action from
  ``action_masks()`` (resets included), and the median and p99 time of one ``env.step`` (on a
  shared machine the median is the figure other processes disturb least);
* the share of a short stable-baselines3 PPO training run spent inside the environment (time
  in ``env.step`` and ``env.reset`` over the wall time of ``learn()``), for SB3's defaults
  (``MultiInputPolicy``, one env) and for the project's default PPO configuration
  (``conf/agent/ppo.yaml`` with ``conf/env/evict.yaml``: the candidate-scoring policy).

Targets: at least 20,000 eviction decisions per second; the env at most 10% of PPO's time.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import gymnasium as gym
import numpy as np

EVICT_TARGET = 20_000.0
PPO_SHARE_TARGET = 0.10


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--K", type=int, default=32, help="candidates per decision")
    p.add_argument("--seconds", type=float, default=5.0, help="random-agent run per env")
    p.add_argument("--ppo-steps", type=int, default=4096, help="PPO timesteps (SB3 n_steps=2048)")
    p.add_argument("--seed", type=int, default=0)


class TimedEnv(gym.Wrapper):  # type: ignore[type-arg]
    """Accumulates the wall time spent in ``step`` and ``reset``."""

    def __init__(self, env: gym.Env) -> None:  # type: ignore[type-arg]
        super().__init__(env)
        self.seconds = 0.0
        self.steps = 0

    def step(self, action: Any) -> Any:
        t = time.perf_counter()
        out = self.env.step(action)
        self.seconds += time.perf_counter() - t
        self.steps += 1
        return out

    def reset(self, **kwargs: Any) -> Any:
        t = time.perf_counter()
        out = self.env.reset(**kwargs)
        self.seconds += time.perf_counter() - t
        return out


def random_agent_rate(env_id: str, K: int, seconds: float, seed: int) -> dict[str, float]:
    """Decisions per second of a random valid-action agent (env construction excluded)."""
    from envs.registration import register_envs

    register_envs()

    env = gym.make(env_id, K=K).unwrapped
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    for _ in range(200):  # warm-up: numba's kernel loads (or compiles) on the first decision
        valid = np.flatnonzero(env.action_masks())  # type: ignore[attr-defined]
        if env.step(int(valid[0]))[2]:
            env.reset()
    n = episodes = 0
    step_ns: list[int] = []
    clock = time.perf_counter_ns
    t0 = time.perf_counter()
    while True:
        valid = np.flatnonzero(env.action_masks())  # type: ignore[attr-defined]
        a = int(valid[rng.integers(len(valid))])
        s0 = clock()
        _, _, term, trunc, _ = env.step(a)
        step_ns.append(clock() - s0)
        n += 1
        if term or trunc:
            episodes += 1
            env.reset()
        if n % 256 == 0 and time.perf_counter() - t0 >= seconds:
            break
    dt = time.perf_counter() - t0
    env.close()
    med = float(np.median(step_ns)) / 1e3
    return {"decisions": n, "episodes": episodes, "seconds": dt, "decisions_per_s": n / dt,
            "step_median_us": med, "step_p99_us": float(np.percentile(step_ns, 99)) / 1e3,
            "decisions_per_s_at_median": 1e6 / med}


def ppo_env_share(K: int, steps: int, seed: int, agent: str = "sb3") -> dict[str, Any]:
    """Fraction of PPO ``learn()`` wall time spent in the envs' step/reset.

    ``agent="sb3"``: SB3's defaults (``MultiInputPolicy``, one env, ``K`` candidates);
    ``"project"``: the project's default PPO run (``conf/agent/ppo.yaml``: the candidate-scoring
    policy, its n_envs and hyper-parameters, over ``conf/env/evict.yaml``'s env)."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    from envs.registration import register_envs

    register_envs()
    torch.manual_seed(seed)
    if agent == "sb3":
        timed = [TimedEnv(gym.make("cachegym/Evict-v0", K=K, invalid_action="lru"))]
        model = PPO("MultiInputPolicy", DummyVecEnv([lambda: timed[0]]), seed=seed, device="cpu")
    else:
        from omegaconf import OmegaConf

        from policies.training.nets import ScorerActorCriticPolicy

        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        acfg = OmegaConf.to_container(OmegaConf.load(os.path.join(root, "conf", "agent", "ppo.yaml")))
        ecfg = OmegaConf.to_container(OmegaConf.load(os.path.join(root, "conf", "env", "evict.yaml")))
        assert isinstance(acfg, dict) and isinstance(ecfg, dict)
        env_kw = {str(k): v for k, v in ecfg.items() if k not in ("defaults", "_target_")}
        timed = [TimedEnv(gym.make("cachegym/Evict-v0", **env_kw))
                 for _ in range(int(acfg.get("n_envs", 1)))]
        venv = DummyVecEnv([(lambda e=e: e) for e in timed])  # type: ignore[misc]
        ppo_kw = {str(k): v for k, v in dict(acfg.get("kwargs") or {}).items()}
        model = PPO(ScorerActorCriticPolicy, venv, seed=seed, device="cpu", **ppo_kw)
    for e in timed:
        e.seconds, e.steps = 0.0, 0
    t0 = time.perf_counter()
    model.learn(steps)
    total = time.perf_counter() - t0
    env_s = sum(e.seconds for e in timed)
    return {"agent": agent, "timesteps": sum(e.steps for e in timed), "learn_s": total,
            "env_s": env_s, "env_share": env_s / total, "torch_threads": torch.get_num_threads()}


def machine_speed() -> dict[str, float]:
    """How fast this machine runs the small operations an env step is made of (for reading
    the figures across machines): a NumPy op on 100 floats and a Python dict lookup."""
    import timeit

    a = np.zeros(100)
    d = {i: i for i in range(1000)}
    np_us = min(timeit.repeat(lambda: a + 1, number=2000, repeat=5)) / 2000 * 1e6
    py_ns = min(timeit.repeat(lambda: d.get(500), number=20000, repeat=5)) / 20000 * 1e9
    return {"numpy_op_us": np_us, "dict_get_ns": py_ns}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from policies import features

    out: dict[str, Any] = {"K": args.K, "numba_features": features.ACCELERATED}
    out["machine"] = m = machine_speed()
    if hasattr(os, "getloadavg"):
        m["load_avg_1min"], m["cpus"] = os.getloadavg()[0], float(os.cpu_count() or 0)
    print(f"machine: a NumPy op on 100 floats {m['numpy_op_us']:.2f} us, a dict lookup "
          f"{m['dict_get_ns']:.0f} ns (a recent desktop: about 0.4 us and 30 ns); "
          f"features through numba: {features.ACCELERATED}; load average "
          f"{m.get('load_avg_1min', float('nan')):.1f} on {m.get('cpus', 0):.0f} CPUs")
    for name, env_id in (("evict", "cachegym/Evict-v0"), ("prefetch", "cachegym/Prefetch-v0"),
                         ("joint", "cachegym/Joint-v0")):
        r = random_agent_rate(env_id, args.K, args.seconds, args.seed)
        out[name] = r
        print(f"{env_id:22s} random agent, K={args.K}: {r['decisions_per_s']:10,.0f} decisions/s "
              f"({r['decisions']} decisions, {r['episodes']} episodes in {r['seconds']:.1f} s); "
              f"step median {r['step_median_us']:.1f} us (= {r['decisions_per_s_at_median']:,.0f}/s), "
              f"p99 {r['step_p99_us']:.1f} us")
    ev = out["evict"]["decisions_per_s"]
    print(f"eviction decisions/s vs target {EVICT_TARGET:,.0f}: {ev / EVICT_TARGET:.2f}x "
          f"({'met' if ev >= EVICT_TARGET else 'NOT met'})")
    for agent in ("sb3", "project"):
        p = ppo_env_share(args.K, args.ppo_steps, args.seed, agent)
        out[f"ppo_{agent}"] = p
        what = ("SB3 defaults, MultiInputPolicy, 1 env" if agent == "sb3" else
                "project default: conf/agent/ppo.yaml + conf/env/evict.yaml, scorer policy")
        print(f"PPO ({what}; {p['timesteps']} steps): learn {p['learn_s']:.1f} s, env step/reset "
              f"{p['env_s']:.1f} s -> env share {100 * p['env_share']:.1f}% (target <= "
              f"{100 * PPO_SHARE_TARGET:.0f}%: {'met' if p['env_share'] <= PPO_SHARE_TARGET else 'NOT met'})")
    return out
