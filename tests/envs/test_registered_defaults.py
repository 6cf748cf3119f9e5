"""Environment defaults. Every registered environment, made with default arguments
(``gymnasium.make(env_id)``): Gymnasium's and SB3's env checkers pass, and a seeded random-action
rollout (masked actions included) never raises. The constructors' defaults are the Hydra
defaults (``conf/env/*.yaml`` and the ``env`` schema)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import yaml

import cachegym
from cachegym.envs.registration import ENV_IDS


def test_every_registered_id_is_covered() -> None:
    assert set(ENV_IDS) == {i for i in gym.registry if i.startswith("cachegym/")}
    assert cachegym.ENV_IDS == ENV_IDS


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


# ---------------------------------------------------------------------- constructor = Hydra
CONF_ENV = Path(__file__).resolve().parents[2] / "conf" / "env"


def _target(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _defaults(cls: Any) -> dict[str, Any]:
    return {k: p.default for k, p in inspect.signature(cls).parameters.items()
            if p.default is not inspect.Parameter.empty}


@pytest.mark.parametrize("yaml_file", sorted(CONF_ENV.glob("*.yaml")), ids=lambda p: p.name)
def test_constructor_defaults_equal_the_hydra_defaults(yaml_file: Path) -> None:
    """Every value of ``conf/env/*.yaml`` is its target's constructor default, so an env made in
    a plain script (``gymnasium.make``) is the one ``scripts/train.py`` trains on."""
    from cachegym.policies.training.config import RUNNER_KEYS

    cfg = yaml.safe_load(yaml_file.read_text())
    cfg.pop("defaults", None)
    for k in RUNNER_KEYS:  # how training runs the envs (env.vec), not constructor arguments
        cfg.pop(k, None)
    defaults = _defaults(_target(cfg.pop("_target_")))
    assert cfg, yaml_file
    unknown = set(cfg) - set(defaults)
    assert not unknown, f"{yaml_file.name}: not constructor arguments: {sorted(unknown)}"
    differ = {k: (v, defaults[k]) for k, v in cfg.items() if defaults[k] != v}
    assert not differ, f"{yaml_file.name}: (yaml, constructor) differ: {differ}"


@pytest.mark.parametrize("schema_name", ["EnvConfig", "PrefetchEnvConfig", "JointEnvConfig"])
def test_env_schema_defaults_equal_the_constructor_defaults(schema_name: str) -> None:
    """The ``env/base_env``, ``env/base_prefetch`` and ``env/base_joint`` schemas (what a yaml
    that leaves a key out gets) agree too (the runner's keys, ``vec``, are no env argument)."""
    from cachegym.policies.training import config

    cls = getattr(config, schema_name)
    schema = {f.name: f.default for f in dataclasses.fields(cls)
              if f.name != "_target_" and f.name not in config.RUNNER_KEYS}
    defaults = _defaults(_target(cls._target_))
    assert {k: defaults.get(k, "<missing>") for k in schema} == schema


def test_every_env_yaml_is_one_registered_env_and_uses_its_schema() -> None:
    """``conf/env/`` holds a config for each of Evict-v0, Prefetch-v0 and Joint-v0, each
    composed over the schema of its own env."""
    from cachegym.policies.training import config

    schemas = {"base_env": config.EnvConfig, "base_prefetch": config.PrefetchEnvConfig,
               "base_joint": config.JointEnvConfig}
    targets = set()
    for f in sorted(CONF_ENV.glob("*.yaml")):
        cfg = yaml.safe_load(f.read_text())
        (base,) = [d for d in cfg["defaults"] if d != "_self_"]
        assert schemas[base]._target_ == cfg["_target_"], f.name
        targets.add(cfg["_target_"])
    assert targets == {"cachegym.envs.evict.EvictEnv", "cachegym.envs.prefetch.PrefetchEnv",
                       "cachegym.envs.joint.JointEnv"}


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_sb3_helpers_make_the_envs_by_id(env_id: str) -> None:
    """stable-baselines3 makes an env by id with ``render_mode="rgb_array"`` first and without it
    on a ``TypeError`` (``make_vec_env``, ``PPO(policy, env_id)``): the refusal is one
    (:class:`RenderModeError`, a ConfigError too), so both helpers work unchanged."""
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.env_util import make_vec_env

    from cachegym.allocator.errors import ConfigError
    from cachegym.envs.common import RenderModeError

    with pytest.raises(RenderModeError, match="render_mode 'rgb_array': the cachegym envs draw nothing") as e:
        gym.make(env_id, render_mode="rgb_array")
    assert isinstance(e.value, TypeError) and isinstance(e.value, ConfigError)
    venv = make_vec_env(env_id, n_envs=2, seed=0)
    obs = venv.reset()
    assert obs["mask"].shape[0] == 2
    venv.close()
    model = MaskablePPO("MultiInputPolicy", env_id, n_steps=16, batch_size=16, seed=0)
    assert model.env.num_envs == 1
    model.env.close()


@pytest.mark.parametrize("env_id", ["cachegym/Prefetch-v0", "cachegym/Joint-v0"])
@pytest.mark.parametrize("trace", ["gpt", "resnet", "mlp_embedding"])
def test_prefetching_envs_start_on_bundled_dl_traces_with_defaults(env_id: str, trace: str) -> None:
    """With capacity_of="working_set" (the default until 2026-12-05) 0.25 of a DL trace's working
    set held whole windows of these traces, and no decision arose: peak live bytes, as
    Evict-v0."""
    data = Path(__file__).resolve().parents[2] / "data" / "traces" / f"{trace}.npz"
    env = gym.make(env_id, traces=str(data))
    env.reset(seed=0)
    env.close()
