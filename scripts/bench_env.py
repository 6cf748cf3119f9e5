"""Environment speed, side by side in one run.

    python scripts/bench.py env [--K 32] [--seconds 5] [--ppo-steps 4096]

* decisions per second of ``cachegym/Evict-v0``, ``cachegym/Prefetch-v0`` and ``cachegym/Joint-v0`` (default
  configurations, ``K`` candidates) under a random agent that picks a valid action from
  ``action_masks()`` (resets included), and the median and p99 time of one ``env.step`` (on a
  shared machine the median is the figure other processes disturb least);
* where an Evict-v0 decision's time goes (``--segments``, on by default; for each candidate
  rule over the default trace, and for ``project``: ``conf/env/evict.yaml`` over
  ``conf/train.yaml``'s training traces at its first capacity): the agent, the pool's loop
  between decisions, candidate selection, observation, info and the rest of ``step``; and the
  env's pool loop alone, one episode's exact victims replayed on the pool's C paths and on the
  pure-Python path;
* the share of a short stable-baselines3 PPO training run spent inside the environment (time
  in ``env.step`` and ``env.reset`` over the wall time of ``learn()``), for SB3's defaults
  (``MultiInputPolicy``, one env) and for the project's default PPO run (``scripts/train.py
  agent=ppo``: ``conf/train.yaml``'s traces and capacities, ``conf/env/evict.yaml``,
  ``conf/agent/ppo.yaml``, the scorer of ``conf/policy/scorer.yaml``, one torch thread). The
  envs are warmed up first (first-decision costs, such as caches filling, are a one-off, not
  a per-step cost); ``learn()`` reseeds them, so the run is the same. The
  share without the envs' first reset in ``learn()`` (a fresh pool fast-forwarded to its
  first decision: a run's setup, paid once however long the run) is printed beside it.

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
    p.add_argument("--torch-threads", type=int, default=1,
                   help="torch threads of the SB3-defaults PPO run (0: torch's default; the project "
                        "run takes its config's torch_threads). One by default: on a shared machine "
                        "torch's threads spin against other processes and learn() time swings 5x")
    p.add_argument("--segments", action=argparse.BooleanOptionalAction, default=True,
                   help="also break an Evict-v0 decision's time down (a few seconds more)")


class TimedEnv(gym.Wrapper):  # type: ignore[type-arg]
    """Accumulates the wall time spent in ``step`` and ``reset`` (``seconds``), and apart the
    time of the first reset after :meth:`clear` (``first_reset``: a learning run's setup)."""

    def __init__(self, env: gym.Env) -> None:  # type: ignore[type-arg]
        super().__init__(env)
        self.clear()

    def clear(self) -> None:
        self.seconds = 0.0
        self.steps = 0
        self.resets = 0
        self.first_reset = 0.0

    def step(self, action: Any) -> Any:
        t = time.perf_counter()
        out = self.env.step(action)
        self.seconds += time.perf_counter() - t
        self.steps += 1
        return out

    def reset(self, **kwargs: Any) -> Any:
        t = time.perf_counter()
        out = self.env.reset(**kwargs)
        dt = time.perf_counter() - t
        self.seconds += dt
        if self.resets == 0:
            self.first_reset = dt
        self.resets += 1
        return out


def random_action(env: Any, rng: np.random.Generator) -> int:
    """The benchmark's agent: a uniform choice among the valid actions of ``action_masks()``
    (``rng.random`` scaled: ``rng.integers`` costs ~2 us more per call)."""
    valid = env.action_masks().nonzero()[0]
    return int(valid[int(rng.random() * len(valid))])


def random_agent_rate(env_id: str, K: int, seconds: float, seed: int) -> dict[str, float]:
    """Decisions per second of a random valid-action agent (env construction excluded)."""
    from cachegym.envs.registration import register_envs

    register_envs()

    env = gym.make(env_id, K=K).unwrapped
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    for _ in range(200):  # warm-up: first-decision costs are a one-off
        valid = np.flatnonzero(env.action_masks())  # type: ignore[attr-defined]
        if env.step(int(valid[0]))[2]:
            env.reset()
    n = episodes = 0
    step_ns: list[int] = []
    clock = time.perf_counter_ns
    t0 = time.perf_counter()
    while True:
        a = random_action(env, rng)
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


def ppo_env_share(K: int, steps: int, seed: int, agent: str = "sb3", torch_threads: int = 0
                  ) -> dict[str, Any]:
    """Fraction of PPO ``learn()`` wall time spent in the envs' step/reset.

    ``agent="sb3"``: SB3's defaults (``MultiInputPolicy``, one env, ``K`` candidates, the env's
    default trace), with ``torch_threads`` torch threads (0: torch's default). ``"project"``: the PPO run of ``scripts/train.py agent=ppo`` as
    :func:`policies.training.train.train` sets it up (``conf/train.yaml`` composed: its
    training traces, ``capacities``, ``conf/env/evict.yaml``, ``conf/agent/ppo.yaml``'s n_envs
    and hyper-parameters through :class:`SB3Agent`, ``conf/policy/scorer.yaml``'s scorer,
    ``torch_threads`` and ``deterministic``), less what runs beside ``learn()`` in a real run:
    validation callbacks, TensorBoard, the recorded inference traces (``record_inference``)
    and the input normalisation sample."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    from cachegym.envs.registration import register_envs
    from cachegym.policies.training.agents import quiet_logger

    register_envs()
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.manual_seed(seed)
    timed: list[TimedEnv] = []
    if agent == "sb3":
        if torch_threads > 0:
            torch.set_num_threads(torch_threads)
        timed = [TimedEnv(gym.make("cachegym/Evict-v0", K=K, invalid_action="lru"))]
        model = PPO("MultiInputPolicy", DummyVecEnv([lambda: timed[0]]), seed=seed, device="cpu")
        quiet_logger(model)
        what = f"SB3 defaults, MultiInputPolicy, 1 env, torch_threads={torch.get_num_threads()}"
    else:
        model, what = _project_ppo(seed, timed)
    try:
        for e in timed:  # warm-up: first-decision costs are a one-off
            _warm_up(e, seed)
            e.clear()
        t0 = time.perf_counter()
        model.learn(steps)
        total = time.perf_counter() - t0
        used_threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
    env_s = sum(e.seconds for e in timed)
    first = sum(e.first_reset for e in timed)
    n = sum(e.steps for e in timed)
    return {"agent": agent, "what": what, "timesteps": n, "learn_s": total, "env_s": env_s,
            "env_share": env_s / total, "first_reset_s": first,
            "env_share_after_first_reset": (env_s - first) / (total - first),
            "env_us_per_step": env_s / max(n, 1) * 1e6,
            "learn_us_per_step": total / max(n, 1) * 1e6, "torch_threads": used_threads}


def _project_setup(seed: int) -> tuple[Any, list[Any], Any]:
    """``conf/train.yaml`` composed with ``agent=ppo``, its training traces (less the
    recorded inference ones) and the :class:`EnvFactory` that builds its envs."""
    from hydra import compose, initialize_config_dir

    from cachegym.policies.training.config import register_train_configs
    from cachegym.policies.training.train import EnvFactory, load_trace_list

    register_train_configs()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with initialize_config_dir(os.path.join(root, "conf"), version_base=None):
        cfg = compose("train", overrides=["agent=ppo", f"seed={seed}"])
    traces = load_trace_list(cfg.traces, "traces")
    return cfg, traces, EnvFactory(cfg.env, traces, list(cfg.capacities), seed)


def _project_ppo(seed: int, timed: list[TimedEnv]) -> tuple[Any, str]:
    """The project's PPO model over timed envs, built as :func:`policies.training.train.train`
    builds it for ``agent=ppo`` (see :func:`ppo_env_share`)."""
    from cachegym.envs.config import instantiate
    from cachegym.policies.training.agents import TrainContext
    from cachegym.policies.training.nets import feature_indices
    from cachegym.policies.training.train import seed_everything

    cfg, traces, factory = _project_setup(seed)
    seed_everything(seed, int(cfg.torch_threads), bool(cfg.deterministic))

    def make_env(i: int) -> TimedEnv:
        e = TimedEnv(factory(i))
        timed.append(e)
        return e

    from cachegym.policies.features import FEATURE_NAMES

    ctx = TrainContext(make_env=make_env, hidden=list(cfg.policy.hidden), seed=seed,
                       ignore=feature_indices(list(cfg.policy.ignore_features), FEATURE_NAMES))
    model = instantiate(cfg.agent).build(ctx)
    what = (f"project default: train.yaml agent=ppo, {len(traces)} training traces, "
            f"{cfg.agent.n_envs} envs, scorer {list(cfg.policy.hidden)}, torch_threads={cfg.torch_threads}")
    return model, what


def _warm_up(env: gym.Env, seed: int, steps: int = 8) -> None:  # type: ignore[type-arg]
    env.reset(seed=seed)
    for _ in range(steps):
        valid = np.flatnonzero(env.unwrapped.action_masks())  # type: ignore[attr-defined]
        if any(env.step(int(valid[0]))[2:4]):
            env.reset()


def evict_segments(K: int, seconds: float, seed: int, candidates: str = "lru", env: Any = None
                   ) -> dict[str, float]:
    """Microseconds per Evict-v0 decision in each part of a step, under a random agent.

    The env's methods and the features module's two decision functions are wrapped with
    timers. Each part is the median over blocks of 128 decisions (robust to other processes
    on a shared machine), less the measured cost of the timers nested inside it, so the parts
    add up to about an untimed step. ``pool_loop`` is the pool's access loop from the agent's
    answer to the next eviction request (the env's row loop, the pool and the FeatureTracker's
    hooks); ``outside`` is the rest of the agent loop (resets). ``env``: an EvictEnv to time
    instead of ``EvictEnv(K=K, candidates=candidates)``."""
    from cachegym.envs.evict import EvictEnv
    from cachegym.policies import features

    if env is None:
        env = EvictEnv(K=K, candidates=candidates)
    parts = ("step", "advance", "decision", "select", "observe", "info", "agent", "wall")
    acc = dict.fromkeys(parts, 0)
    clock = time.perf_counter_ns

    def timed(fn: Any, name: str) -> Any:
        def wrapper(*a: Any, **k: Any) -> Any:
            t = clock()
            try:
                return fn(*a, **k)
            finally:
                acc[name] += clock() - t
        return wrapper

    # what one timed call adds to the time of the part around it
    noop, timed_noop = (lambda: None), timed(lambda: None, "wall")
    t = clock()
    for _ in range(20000):
        noop()
    t1 = clock()
    for _ in range(20000):
        timed_noop()
    overhead = max(0.0, ((clock() - t1) - (t1 - t)) / 20000 / 1e3)

    saved = features.select_keys, features.observe_keys
    blocks: list[dict[str, float]] = []
    try:
        features.select_keys = timed(features.select_keys, "select")  # type: ignore[assignment]
        features.observe_keys = timed(features.observe_keys, "observe")  # type: ignore[assignment]
        for name in ("step", "advance", "decision", "info"):
            attr = name if name == "step" else f"_{name}"
            setattr(env, attr, timed(getattr(env, attr), name))
        rng = np.random.default_rng(seed)
        env.reset(seed=seed)

        def play(n: int) -> None:
            w0 = clock()
            for _ in range(n):
                t = clock()
                a = random_action(env, rng)
                acc["agent"] += clock() - t
                if any(env.step(a)[2:4]):
                    env.reset()
            acc["wall"] += clock() - w0

        play(300)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            acc.update(dict.fromkeys(parts, 0))
            play(128)
            blocks.append({k: v / 128 / 1e3 for k, v in acc.items()})
    finally:
        features.select_keys, features.observe_keys = saved
        for name in ("step", "_advance", "_decision", "_info"):
            vars(env).pop(name, None)  # the class's methods again
        env.close()
    us = {k: float(np.median([b[k] for b in blocks])) for k in parts}
    o = overhead
    return {"decisions": 128 * len(blocks), "timer_overhead": o, "total": us["wall"] - 7 * o,
            "agent": us["agent"], "step": us["step"] - 5 * o,
            "pool_loop": us["advance"] - us["decision"] - o, "select": us["select"],
            "observe": us["observe"], "decision_rest": us["decision"] - us["select"] - us["observe"] - 2 * o,
            "info": us["info"], "step_rest": us["step"] - us["advance"] - us["info"] - 2 * o,
            "outside": us["wall"] - us["step"] - us["agent"] - 2 * o}


def pool_loop_cost(K: int, seed: int, candidates: str = "lru", repeats: int = 5, env: Any = None
                   ) -> dict[str, float]:
    """The env's pool loop alone, per Evict-v0 decision: one episode's victims (a random
    agent's) sent into the env's own loop (``EvictEnv._episode``: the window's rows through the
    pool, the FeatureTracker's hooks, the oracle's bookkeeping) with no observation between
    decisions (``Pool.steps``, the pool's one access loop, compiled where it is built). CPU time,
    best of ``repeats``. ``env``: an EvictEnv to replay instead of ``EvictEnv(K=K,
    candidates=candidates)``."""
    from cachegym.envs.evict import EvictEnv

    if env is None:
        env = EvictEnv(K=K, candidates=candidates)
    env.reset(seed=seed)
    w = env._w
    rng = np.random.default_rng(seed)
    victims: list[int] = []
    while True:
        a = int(rng.integers(len(env._keys)))
        victims.append(env._keys[a])
        if env.step(a)[2]:
            break
    env.close()

    def replay() -> float:
        env._start(w)  # a fresh pool and tracker on the same window
        loop = env._loop
        assert loop is not None
        sent, ended = 0, False
        t0 = time.process_time()
        next(loop)
        try:
            for v in victims:
                sent += 1
                loop.send(v)
        except StopIteration:
            ended = True
        dt = time.process_time() - t0
        env._loop = None
        assert ended and sent == len(victims), "the replay diverged from the episode"
        env.close()
        return dt / len(victims) * 1e6

    out = {"decisions": float(len(victims)), "rows": float(len(w)),
           "loop_us": min(replay() for _ in range(repeats))}
    return out


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
    from cachegym.policies import features

    kernel = "compiled" if features.COMPILED else "interpreted"  # policies/kernels.py
    out: dict[str, Any] = {"K": args.K, "feature_kernel": kernel}
    out["machine"] = m = machine_speed()
    if hasattr(os, "getloadavg"):
        m["load_avg_1min"], m["cpus"] = os.getloadavg()[0], float(os.cpu_count() or 0)
    print(f"machine: a NumPy op on 100 floats {m['numpy_op_us']:.2f} us, a dict lookup "
          f"{m['dict_get_ns']:.0f} ns (a recent desktop: about 0.4 us and 30 ns); "
          f"feature kernel: {kernel}; load average "
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
    out["targets"] = {"evict_decisions_per_s": EVICT_TARGET, "ppo_env_share": PPO_SHARE_TARGET}
    out["evict_target_met"] = ev >= EVICT_TARGET
    if args.segments:
        project_env = _project_setup(args.seed)[2](0)  # train.yaml's traces, its first capacity
        for rule in ("lru", "sample", "project"):
            env = project_env if rule == "project" else None
            g = evict_segments(args.K, min(args.seconds, 3.0), args.seed, rule, env)
            out[f"evict_segments_{rule}"] = g
            print(f"  Evict-v0 {rule:7s} us/decision (medians of 128-decision blocks, timers' "
                  f"{g['timer_overhead']:.2f} us each taken out): {g['total']:.1f} = agent {g['agent']:.1f} + "
                  f"step {g['step']:.1f} [pool loop {g['pool_loop']:.1f}, select {g['select']:.1f}, "
                  f"observe {g['observe']:.1f}, rest of decision {g['decision_rest']:.1f}, info {g['info']:.1f}, "
                  f"rest of step {g['step_rest']:.1f}] + resets {g['outside']:.1f}")
            c = pool_loop_cost(args.K, args.seed, rule, env=env)
            out[f"evict_pool_loop_{rule}"] = c
            print(f"  Evict-v0 {rule:7s} pool loop alone, one episode's victims replayed ({c['decisions']:.0f} "
                  f"decisions, {c['rows']:.0f} rows; CPU): {c['loop_us']:.1f} us/decision")
    for agent in ("sb3", "project"):
        p = ppo_env_share(args.K, args.ppo_steps, args.seed, agent, args.torch_threads)
        p["target_met"] = p["env_share"] <= PPO_SHARE_TARGET
        out[f"ppo_{agent}"] = p
        print(f"PPO ({p['what']}; {p['timesteps']} steps): learn {p['learn_s']:.1f} s, env step/reset "
              f"{p['env_s']:.1f} s -> env share {100 * p['env_share']:.1f}% (target <= "
              f"{100 * PPO_SHARE_TARGET:.0f}%: {'met' if p['env_share'] <= PPO_SHARE_TARGET else 'NOT met'}); "
              f"per step: env {p['env_us_per_step']:.0f} us of {p['learn_us_per_step']:.0f} us; learn()'s first "
              f"reset {p['first_reset_s']:.2f} s, without it {100 * p['env_share_after_first_reset']:.1f}%")
    return out


if __name__ == "__main__":  # (the same as `python scripts/bench.py env ...`)
    import sys

    from cachegym.scripts.bench import main

    sys.exit(main(["env", *sys.argv[1:]]))
