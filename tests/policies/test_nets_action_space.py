"""The scorer policies refuse an env whose action space is not what the scorer emits (K scores,
or K + 1 with a phase: Joint-v0), naming the env and policy class to use, and the maskable
policy refuses plain PPO's use_sde; an SB3 model of Joint-v0 exports both heads."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")  # the train extra

import gymnasium as gym  # noqa: E402

import cachegym.envs  # noqa: E402,F401  (registers the ids)
from cachegym.allocator.errors import ConfigError  # noqa: E402
from cachegym.policies.learned import LearnedPolicy, read_policy_file  # noqa: E402
from cachegym.policies.training.nets import (  # noqa: E402
    MaskableScorerActorCriticPolicy,
    ScorerActorCriticPolicy,
    ScorerDQNPolicy,
)

SMALL = {"generator": "zipf", "n_requests": 600, "n_objects": 80}


def _env(env_id: str) -> gym.Env:
    return gym.make(env_id, traces=SMALL, window=400, capacity=0.2)


def _model(algo: str, policy: type, env: gym.Env):
    from sb3_contrib import MaskablePPO
    from stable_baselines3 import DQN, PPO

    cls = {"ppo": PPO, "maskable_ppo": MaskablePPO, "dqn": DQN}[algo]
    kw = {"learning_starts": 8, "batch_size": 8} if algo == "dqn" else {
        "n_steps": 16, "batch_size": 16, "n_epochs": 1}
    return cls(policy, env, policy_kwargs={"hidden": [8]}, seed=0, device="cpu", **kw)


@pytest.mark.parametrize("algo, policy", [("ppo", ScorerActorCriticPolicy),
                                          ("maskable_ppo", MaskableScorerActorCriticPolicy),
                                          ("dqn", ScorerDQNPolicy)])
def test_prefetch_v0_is_refused_naming_the_envs_to_use(algo, policy):
    with pytest.raises(ConfigError, match=rf"{policy.__name__}: the action space is Discrete\(9\), K=8 "
                       r"candidates and a no-op \(cachegym/Prefetch-v0\).*cachegym/Evict-v0.*cachegym/Joint-v0"):
        _model(algo, policy, _env("cachegym/Prefetch-v0"))


def test_dqn_in_joint_v0_is_refused_naming_the_policies_that_train_it():
    with pytest.raises(ConfigError, match=r"ScorerDQNPolicy: its Q-network is one eviction scorer.*"
                       r"cachegym/Evict-v0.*MaskablePPO\(MaskableScorerActorCriticPolicy, env\)"):
        _model("dqn", ScorerDQNPolicy, _env("cachegym/Joint-v0"))


def test_an_action_space_of_another_size_is_refused():
    env = _env("cachegym/Evict-v0")
    with pytest.raises(ConfigError, match=r"the action space is Discrete\(5\), but the scorer emits 32"):
        ScorerActorCriticPolicy(env.observation_space, gym.spaces.Discrete(5), lambda _: 1e-3)


def test_the_maskable_policy_with_plain_ppo_says_which_to_use():
    with pytest.raises(ConfigError, match="use MaskablePPO, or ScorerActorCriticPolicy with PPO"):
        _model("ppo", MaskableScorerActorCriticPolicy, _env("cachegym/Evict-v0"))


@pytest.mark.parametrize("algo, policy", [("maskable_ppo", MaskableScorerActorCriticPolicy),
                                          ("ppo", ScorerActorCriticPolicy)])
def test_a_joint_v0_model_exports_both_heads(algo, policy, tmp_path):
    """export_model of a Joint-v0 model: the eviction scorer and the prefetch head, with the
    env's prefetch section (as scripts/train.py env=joint writes it)."""
    from cachegym.policies.training import export_model
    from cachegym.policies.training.export import prefetch_section

    env = _env("cachegym/Joint-v0")
    model = _model(algo, policy, env)
    model.learn(16)
    path = export_model(model, tmp_path / "joint.npz")
    header, _ = read_policy_file(path)
    assert header["K"] == 16 and header["candidate_rule"] == "lru"  # Joint-v0's defaults
    want = prefetch_section(env.unwrapped)
    assert {k: header["prefetch"][k] for k in want} == want
    assert header["prefetch"]["arch"]["hidden"] == [8]
    assert LearnedPolicy.load(path).prefetch_head is not None


def test_onnx_of_a_joint_file_says_the_prefetch_head_is_left_out(tmp_path, caplog):
    """The ONNX model holds the eviction scorer alone: a joint file's head was dropped silently."""
    pytest.importorskip("onnx", reason="the onnx package (pip install -e '.[onnx]')")
    from cachegym.policies.training import export_model
    from cachegym.policies.training.export import export_onnx

    env = _env("cachegym/Joint-v0")
    model = _model("maskable_ppo", MaskableScorerActorCriticPolicy, env)
    path = export_model(model, tmp_path / "joint.npz")
    with caplog.at_level("WARNING"):
        export_onnx(path, tmp_path / "joint.onnx")
    assert "has a prefetch head too" in caplog.text and (tmp_path / "joint.onnx").is_file()


@pytest.mark.parametrize("algo, policy, cls", [
    ("maskable_ppo", MaskableScorerActorCriticPolicy, "MaskablePPO"),
    ("ppo", ScorerActorCriticPolicy, "PPO")])
def test_a_joint_v0_model_zip_says_how_to_export_it(algo, policy, cls, tmp_path):
    """cachegym export of a Joint-v0 model's zip (read without unpickling) cannot know its
    prefetch settings: it says how to export it, not that it has no scorer, with the zip's own
    algorithm (a PPO zip was told MaskablePPO.load)."""
    from cachegym.policies.training.export import export_file

    model = _model(algo, policy, _env("cachegym/Joint-v0"))
    model.save(tmp_path / "joint.zip")
    with pytest.raises(ConfigError, match=rf"a Joint-v0 model .*export_model\({cls}\.load"):
        export_file(tmp_path / "joint.zip", tmp_path / "p.npz", algo=algo)


@pytest.mark.parametrize("wrap", ["flatten", "framestack"])
def test_the_scorer_policies_behind_an_observation_wrapper_say_what_to_do(wrap: str) -> None:
    """A raw ValueError ('too many values to unpack') or TypeError came from inside the policy."""
    from sb3_contrib import MaskablePPO

    env = gym.make("cachegym/Evict-v0", window=500)
    env = (gym.wrappers.FlattenObservation(env) if wrap == "flatten"
           else gym.wrappers.FrameStackObservation(env, 2))
    with pytest.raises(ConfigError, match="leave observation wrappers .* out"):
        MaskablePPO(MaskableScorerActorCriticPolicy, env, device="cpu")
