"""Shared by the environment tests (pytest puts this folder on sys.path)."""

from __future__ import annotations

import gymnasium as gym


def rollout(env: gym.Env, choose, seed: int = 0, options=None):  # type: ignore[no-untyped-def]
    """Run one episode choosing ``choose(obs, info)``: ``(total reward, steps, infos)``."""
    obs, info = env.reset(seed=seed, options=options)
    total, steps, infos = 0.0, 0, [info]
    while True:
        obs, r, term, trunc, info = env.step(choose(obs, info))
        total += r
        steps += 1
        infos.append(info)
        if term or trunc:
            return total, steps, infos
