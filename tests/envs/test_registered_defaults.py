"""Every registered environment, made with default arguments (``gymnasium.make(env_id)``):
Gymnasium's and SB3's env checkers pass, and a seeded random-action rollout (masked actions
included) never raises."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

import envs
from envs.registration import ENV_IDS


def test_every_registered_id_is_covered() -> None:
    assert set(ENV_IDS) == {i for i in gym.registry if i.startswith("cachegym/")}
    assert envs.ENV_IDS == ENV_IDS


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize("seed", range(10))
def test_gymnasium_checker_passes_on_defaults(env_id: str, seed: int) -> None:
    """The checker steps with ``action_space.sample()``: seeded here, so each case is one fixed
    draw (with ``invalid_action="raise"``, Prefetch-v0 failed 10 of these 10 and Joint-v0 1)."""
    from gymnasium.utils.env_checker import check_env

    env = gym.make(env_id).unwrapped
    env.action_space.seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env, skip_render_check=True)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_sb3_checker_passes_on_defaults(env_id: str) -> None:
    from stable_baselines3.common.env_checker import check_env

    env = gym.make(env_id).unwrapped
    env.action_space.seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env, warn=True)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_random_action_rollout_never_raises_on_defaults(env_id: str) -> None:
    """Uniform actions over the whole action space, masked ones included, for up to 3000
    decisions (across episodes): the defaults replace a masked action and count it."""
    env = gym.make(env_id)
    env.action_space.seed(0)
    obs, info = env.reset(seed=0)
    invalid = 0  # masked actions taken in this episode
    for _ in range(3000):
        mask = env.unwrapped.action_masks()  # type: ignore[attr-defined]
        a = int(env.action_space.sample())
        invalid += not mask[a]
        obs, r, term, trunc, info = env.step(a)
        assert env.observation_space.contains(obs) and np.isfinite(r)
        assert info["invalid_actions"] == invalid  # counted, never silent
        if term or trunc:
            obs, info = env.reset()
            invalid = 0
    env.close()
