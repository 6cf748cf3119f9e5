"""``cachegym train``'s checks before any work: env=prefetch is refused naming env=evict and
env=joint; a misspelt key of the chosen (or default) agent= / env= option is refused before
Hydra, with the closest key, as a misspelt key of a typed section is."""

from __future__ import annotations

import importlib
import os

import pytest

pytest.importorskip("torch")  # the train extra

from hydra import compose, initialize_config_dir  # noqa: E402

from cachegym.allocator.errors import ConfigError  # noqa: E402
from cachegym.envs.config import check_list_overrides  # noqa: E402
from cachegym.envs.paths import CONF_DIR  # noqa: E402
from cachegym.policies.training.config import register_train_configs  # noqa: E402
from cachegym.policies.training.train import train  # noqa: E402


def _cfg(overrides: list[str]):
    register_train_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose("train", overrides=overrides)


@pytest.mark.parametrize("agent", ["imitation", "ppo", "maskable_ppo", "dqn"])
def test_env_prefetch_is_refused_before_any_work(agent, tmp_path):
    out = tmp_path / "out"
    cfg = _cfg(["experiment=quick", "env=prefetch", f"agent={agent}", "validation.traces=[]",
                "progress=false", "tensorboard=false"])
    with pytest.raises(ConfigError, match=r"env=prefetch .*use env=evict .* or env=joint"):
        train(cfg, out_dir=str(out))
    assert not os.path.exists(out)  # nothing written, no trace read


def test_negative_torch_threads_are_refused_before_any_work(tmp_path):
    """torch_threads=-7 was taken as torch's default, silently (a helper's audit); 0 is."""
    cfg = _cfg(["experiment=quick", "torch_threads=-7", "validation.traces=[]", "progress=false",
                "tensorboard=false"])
    with pytest.raises(ConfigError, match=r"torch_threads must be >= 0 \(0: torch's default"):
        train(cfg, out_dir=str(tmp_path / "out"))


def _pre_hydra(argv: list[str], capsys) -> str | None:
    """What the train entry's pre-Hydra check (``cachegym train`` runs it with the script's
    SCHEMA) says of ``argv``: its message, or None when it lets the overrides through."""
    schema = importlib.import_module("cachegym.scripts.train").SCHEMA
    try:
        check_list_overrides(argv, schema, "cachegym train")
    except SystemExit as e:
        assert e.code == 2
        return capsys.readouterr().err
    return None


@pytest.mark.parametrize("argv, match", [
    (["agent=ppo", "agent.totl_timesteps=5"],
     "agent.totl_timesteps: unknown key of agent=ppo; did you mean agent.total_timesteps?"),
    (["agent=maskable_ppo", "+agent.totl_timesteps=5"], "did you mean agent.total_timesteps?"),
    (["agent.dagger.rouns=2"],
     "agent.dagger.rouns: unknown key of agent=imitation (the default); did you mean agent.dagger.rounds?"),
    (["agent.total_timesteps=5"],
     "agent.total_timesteps: unknown key of agent=imitation (the default); the keys of agent: dagger"),
    (["env.capacty=0.5"], "env.capacty: unknown key of env=evict (the default); did you mean env.capacity_of?"),
    (["env=joint", "env.opportunty=access"], "did you mean env.opportunity?"),
    (["env.opportunity=access"], "env.opportunity: unknown key of env=evict (the default)"),
])
def test_a_misspelt_key_of_the_chosen_group_is_refused_before_hydra(argv, match, capsys):
    err = _pre_hydra(argv, capsys)
    assert err is not None and match in err, err


@pytest.mark.parametrize("argv, composes", [
    (["agent=ppo", "agent.total_timesteps=5", "agent.kwargs.n_steps=64"], True),
    (["agent.dagger.rounds=2", "env.K=8", "env.window=100"], True),
    (["env=joint", "env.opportunity=access", "env.predictor={depth: 2}"], True),
    (["agent=imitation_ppo", "agent.finetune.total_timesteps=3"], True),
    (["agent=nope", "agent.x=1"], False),  # (no such option: Hydra names it)
    (["-m", "agent=ppo,dqn", "agent.totl_timesteps=5"], False),  # (sweeps are Hydra's)
])
def test_the_keys_of_the_chosen_group_pass(argv, composes, capsys):
    assert _pre_hydra(argv, capsys) is None
    if composes:
        _cfg(["experiment=quick", *argv])  # and Hydra composes them


def test_cachegym_train_refuses_a_misspelt_agent_key_before_hydra(capsys):
    """Through the CLI: the real "did you mean" at once, not Hydra's advice to add the key
    with ``+`` (which nothing reads)."""
    from cachegym import cli

    with pytest.raises(SystemExit) as e:
        cli.main(["train", "agent=ppo", "agent.totl_timesteps=5"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "cachegym train: agent.totl_timesteps: unknown key of agent=ppo; did you mean " \
           "agent.total_timesteps?" in err and "+agent" not in err
