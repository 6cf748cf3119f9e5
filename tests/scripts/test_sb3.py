"""SB3 first-class: the scorer policies in a plain SB3 script export; scripts/train.py saves the
SB3 zip, resumes it (without unpickling), warm-starts from a policy file, runs its envs in
Monitor and SubprocVecEnv, and trains on your own trace with evaluation's keys."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")  # the train extra

import gymnasium as gym  # noqa: E402
from hydra.errors import ConfigCompositionException  # noqa: E402
from omegaconf.errors import ValidationError  # noqa: E402

import cachegym  # noqa: E402,F401  (registers cachegym/Evict-v0)
from cachegym.allocator.errors import ConfigError, PolicyFileError  # noqa: E402
from cachegym.policies.learned import LearnedPolicy, read_policy_file  # noqa: E402
from cachegym.policies.training.export import read_sb3_zip, scorer_of  # noqa: E402
from cachegym.policies.training.nets import export_arrays, import_arrays  # noqa: E402
from cachegym.policies.training.train import train  # noqa: E402
from tests.scripts.test_train import TINY, cfg_of  # noqa: E402

PPO_TINY = ["agent=ppo", "agent.total_timesteps=64", "agent.n_envs=1", "agent.kwargs.n_steps=64",
            "agent.kwargs.batch_size=64", "agent.kwargs.n_epochs=1", "validation.traces=[]"]


def _algos() -> dict[str, tuple[type, str, dict]]:
    from sb3_contrib import MaskablePPO
    from stable_baselines3 import DQN, PPO

    return {"maskable_ppo": (MaskablePPO, "MaskableScorerActorCriticPolicy", {"n_steps": 64, "batch_size": 32}),
            "ppo": (PPO, "ScorerActorCriticPolicy", {"n_steps": 64, "batch_size": 32}),
            "dqn": (DQN, "ScorerDQNPolicy", {"learning_starts": 16, "batch_size": 16})}


def test_the_policy_classes_are_public() -> None:
    import cachegym.policies.training as pt
    from cachegym.policies.training import nets
    from cachegym.policies.training.export import export_model

    for name in ("ScorerActorCriticPolicy", "MaskableScorerActorCriticPolicy", "ScorerDQNPolicy"):
        assert name in pt.__all__ and name in nets.__all__
        assert getattr(pt, name) is getattr(nets, name) and getattr(pt, name).__doc__
    assert pt.export_model is export_model and "export_model" in pt.__all__
    assert "MaskablePPO(MaskableScorerActorCriticPolicy" in (nets.__doc__ or "")


@pytest.mark.parametrize("algo", ["maskable_ppo", "ppo", "dqn"])
def test_a_plain_sb3_script_exports_a_policy_file(algo: str, tmp_path) -> None:
    """gym.make + the algorithm + our policy class + export_model: LearnedPolicy.load reads
    the file, whose weights are the model's scorer's and whose K and candidate rule are the
    env's (Evict-v0's defaults: 32, sample)."""
    from cachegym.policies.training import export_model

    cls, policy, kw = _algos()[algo]
    env = gym.make("cachegym/Evict-v0", window=500)
    import cachegym.policies.training as pt

    model = cls(getattr(pt, policy), env, policy_kwargs={"hidden": [16, 8]}, seed=0, device="cpu", **kw)
    model.learn(64)
    path = export_model(model, tmp_path / "p.npz")
    header, arrays = read_policy_file(path)
    assert (header["K"], header["candidate_rule"]) == (32, "sample")
    assert header["arch"]["hidden"] == [16, 8] and header["meta"]["algo"] == cls.__name__
    want = export_arrays(scorer_of(model))
    assert sorted(arrays) == sorted(want)
    for k in want:
        np.testing.assert_array_equal(arrays[k], want[k])
    LearnedPolicy.load(path)
    with pytest.raises(ConfigError, match="candidate_rule must be one of"):
        export_model(model, tmp_path / "q.npz", candidate_rule="random")


@pytest.mark.parametrize("algo", ["maskable_ppo", "ppo", "dqn"])
def test_a_generic_multiinputpolicy_is_refused_naming_the_class_to_use(algo: str, tmp_path) -> None:
    from cachegym.policies.training import export_model

    cls, policy, kw = _algos()[algo]
    model = cls("MultiInputPolicy", gym.make("cachegym/Evict-v0", window=500), device="cpu", **kw)
    with pytest.raises(ConfigError, match=rf"'MultiInputPolicy'.*{cls.__name__}\({policy}, env\)"):
        export_model(model, tmp_path / "p.npz")
    assert not (tmp_path / "p.npz").exists()


def test_import_arrays_inverts_export_arrays() -> None:
    """A net with input normalisation: the re-imported net scores every input as it does."""
    import torch as th

    from cachegym.policies.training.nets import CandidateScorerNet

    rng = np.random.default_rng(0)
    th.manual_seed(0)
    net = CandidateScorerNet(7, 3, [16, 8, 4], ignore=[2])
    net.set_normalization(rng.normal(2, 3, (50, 5, 7)).astype(np.float32), np.ones((50, 5)),
                          rng.normal(-1, 2, (50, 3)).astype(np.float32))
    back = import_arrays(export_arrays(net))
    cand = th.as_tensor(rng.normal(2, 3, (4, 5, 7)), dtype=th.float32)
    glob = th.as_tensor(rng.normal(-1, 2, (4, 3)), dtype=th.float32)
    mask = th.ones(4, 5)
    with th.no_grad():
        np.testing.assert_allclose(back(cand, glob, mask), net(cand, glob, mask), rtol=1e-4, atol=1e-4)
    for k, v in export_arrays(net).items():
        np.testing.assert_array_equal(export_arrays(back)[k], v)


# ---------------------------------------------------------------------- scripts/train.py
def _weights(path: str) -> dict[str, np.ndarray]:
    return read_policy_file(path)[1]


def _assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-6, atol=1e-7)


def test_train_saves_the_zip_and_resume_continues_it(tmp_path, caplog) -> None:
    first = train(cfg_of([*TINY, *PPO_TINY, f"out_dir={tmp_path / 'a'}"]))
    zip_a = first["sb3_model"]
    assert zip_a == str(tmp_path / "a" / "ppo.zip") and os.path.isfile(zip_a)
    assert read_sb3_zip(zip_a)[2]["num_timesteps"] == 64
    # learning rate 0: the resumed run changes nothing, so it exports the first run's weights;
    # a fresh start (no resume) would not
    with caplog.at_level("INFO", logger="cachegym.policies.training.agents"):
        res = train(cfg_of([*TINY, *PPO_TINY, "agent.kwargs.learning_rate=0.0", f"resume={zip_a}",
                            f"out_dir={tmp_path / 'b'}"]))
    assert f"resuming PPO from {zip_a} at step 64" in caplog.text  # the log says it resumed
    _assert_same(_weights(res["policy"]), _weights(first["policy"]))
    assert read_sb3_zip(res["sb3_model"])[2]["num_timesteps"] == 128  # the step count goes on
    # and the update count (train/n_updates in TensorBoard): one rollout of one epoch each
    updates = read_sb3_zip(zip_a)[2]["_n_updates"]
    assert updates > 0 and read_sb3_zip(res["sb3_model"])[2]["_n_updates"] == 2 * updates
    fresh = train(cfg_of([*TINY, *PPO_TINY, "agent.kwargs.learning_rate=0.0", "seed=1",
                          f"out_dir={tmp_path / 'c'}"]))
    assert not np.allclose(_weights(fresh["policy"])["wc"], _weights(first["policy"])["wc"])


def test_init_from_starts_from_an_exported_policy(tmp_path) -> None:
    """Imitation writes a policy file; PPO (learning rate 0) from it exports the same weights;
    the imitation agent's fine-tune saves its zip too."""
    imi = train(cfg_of([*TINY, "agent=imitation", "agent.dagger.rounds=1", "agent.dagger.steps_per_round=120",
                        "agent.dagger.epochs=1", "validation.traces=[]", f"out_dir={tmp_path / 'a'}"]))
    assert imi["sb3_model"] is None and not list((tmp_path / "a").glob("*.zip"))
    res = train(cfg_of([*TINY, *PPO_TINY, "agent.kwargs.learning_rate=0.0", f"init_from={imi['policy']}",
                        f"out_dir={tmp_path / 'b'}"]))
    _assert_same(_weights(res["policy"]), _weights(imi["policy"]))
    ft = train(cfg_of([*TINY, "agent=imitation_ppo", "agent.dagger.rounds=1", "agent.dagger.steps_per_round=100",
                       "agent.dagger.epochs=1", "agent.finetune.total_timesteps=64", "agent.finetune.n_envs=1",
                       "agent.finetune.kwargs.n_steps=64", "agent.finetune.kwargs.batch_size=64",
                       "agent.finetune.kwargs.n_epochs=1", "validation.traces=[]",
                       f"init_from={imi['policy']}", f"out_dir={tmp_path / 'c'}"]))
    assert ft["sb3_model"] == str(tmp_path / "c" / "maskable_ppo.zip") and os.path.isfile(ft["sb3_model"])


@pytest.mark.parametrize("overrides,error,match", [
    (["resume=nowhere/ppo.zip"], PolicyFileError, r"resume=nowhere/ppo.zip: no such file"),
    (["resume=policy.npz"], ConfigError, r"resume=policy.npz: not an SB3 model .zip.*init_from=POLICY.npz"),
    (["init_from=nowhere/policy.npz"], PolicyFileError, r"init_from: policy file nowhere/policy.npz: no such file"),
    (["init_from=run/ppo.zip"], ConfigError, r"init_from=run/ppo.zip: an SB3 model .zip; continue it with resume="),
    (["init_from=my.csv"], ConfigError, r"init_from=my.csv: not a policy file; give the .npz"),
    (["init_from=a.npz", "resume=b.zip"], ConfigError, r"give one"),
])
def test_bad_warm_starts_are_refused_before_any_work(overrides, error, match, tmp_path) -> None:
    with pytest.raises(error, match=match):
        train(cfg_of([*TINY, *PPO_TINY, *overrides, f"out_dir={tmp_path / 'out'}"]))
    assert not (tmp_path / "out").exists()


def test_warm_starts_that_do_not_fit_are_refused(tmp_path) -> None:
    first = train(cfg_of([*TINY, *PPO_TINY, f"out_dir={tmp_path / 'a'}"]))
    with pytest.raises(ConfigError, match=r"its network's hidden layers are \[64, 32\].*set policy.hidden=\[64,32\]"):
        train(cfg_of([*TINY, *PPO_TINY, "policy=small", f"init_from={first['policy']}", f"out_dir={tmp_path / 'b'}"]))
    with pytest.raises(ConfigError, match=r"resume=.*ppo.zip: its network's hidden layers are \[64, 32\], "
                                          r"policy.hidden is \[32, 16\]; set policy.hidden=\[64,32\]"):
        train(cfg_of([*TINY, *PPO_TINY, "policy=small", f"resume={first['sb3_model']}", f"out_dir={tmp_path / 'c'}"]))
    with pytest.raises(ConfigError, match=r"resume: the imitation agent has no SB3 stage.*init_from"):
        train(cfg_of([*TINY, "agent=imitation", f"resume={first['sb3_model']}", f"out_dir={tmp_path / 'd'}"]))
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"not a zip at all")
    with pytest.raises(PolicyFileError, match=r"resume: .*bad.zip: not a readable SB3 model zip"):
        train(cfg_of([*TINY, *PPO_TINY, f"resume={bad}", f"out_dir={tmp_path / 'e'}"]))


def test_subproc_envs_in_monitor_log_episode_returns(tmp_path) -> None:
    """env.vec=subproc with two envs trains; the envs are in Monitor, so TensorBoard has
    rollout/ep_rew_mean (short windows: episodes end within the run)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    res = train(cfg_of([*TINY, "tensorboard=true", "agent=maskable_ppo", "agent.total_timesteps=256",
                        "agent.n_envs=2", "agent.kwargs.n_steps=64", "agent.kwargs.batch_size=64",
                        "agent.kwargs.n_epochs=1", "env.vec=subproc", "env.window=300",
                        "validation.traces=[]", f"out_dir={tmp_path}"]))
    LearnedPolicy.load(res["policy"])
    tags: set[str] = set()
    for d, _, files in os.walk(tmp_path / "tb"):
        if any(f.startswith("events.") for f in files):
            acc = EventAccumulator(d)
            acc.Reload()
            tags |= set(acc.Tags()["scalars"])
    assert "rollout/ep_rew_mean" in tags


def test_vec_is_checked_at_compose_time() -> None:
    with pytest.raises((ValidationError, ConfigCompositionException), match="vec"):
        cfg_of(["env.vec=threads"])


def test_train_on_your_trace_with_evaluations_keys(tmp_path, monkeypatch) -> None:
    """trace.path=T trace.format=F replaces the training mix; a relative path is read from the
    working directory, then among the bundled traces."""
    from cachegym.envs.workloads import generate
    from cachegym.envs.workloads.formats import write_oracle_general

    write_oracle_general(generate("zipf", seed=5, n_requests=3000, n_objects=300, size=4096),
                         tmp_path / "mine.bin")
    monkeypatch.chdir(tmp_path)
    common = [*TINY, *PPO_TINY, "trace.format=oracleGeneral"]
    res = train(cfg_of([*common, "trace.path=mine.bin", "out_dir=out_a"]))
    meta = read_policy_file(res["policy"])[0]["meta"]
    assert meta["traces"] == ["mine"]  # the quick experiment's two traces are gone
    res = train(cfg_of([*TINY, *PPO_TINY, "trace.path=data/traces/resnet.npz", "out_dir=out_b"]))
    assert read_policy_file(res["policy"])[0]["meta"]["traces"] == ["resnet"]  # bundled
    with pytest.raises(ConfigError, match=r"trace.path: no such file 'nope.bin'.*bundled traces"):
        train(cfg_of([*common, "trace.path=nope.bin", "out_dir=out_c"]))
    # without trace.path, `traces` (the quick experiment's mix) is what trains
    res = train(cfg_of([*TINY, *PPO_TINY, "out_dir=out_d"]))
    assert len(read_policy_file(res["policy"])[0]["meta"]["traces"]) == 2


def test_a_verbose_run_without_tensorboard_leaves_no_folder_in_the_temporary_directory(
        tmp_path, monkeypatch, capsys) -> None:
    """SB3 logs a verbose run without a log folder to a new ``SB3-<time>`` folder of the system's
    temporary directory (``configure``); the training's logger prints the progress and writes
    no folder."""
    import tempfile

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.delenv("SB3_LOGDIR", raising=False)  # (the suite's conftest sets one)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    train(cfg_of([*TINY, *PPO_TINY, "tensorboard=false", "+agent.kwargs.verbose=1",
                  f"out_dir={tmp_path / 'out'}"]))
    assert "total_timesteps" in capsys.readouterr().out  # the progress table, to stdout
    assert [p.name for p in tmp.iterdir() if p.name.startswith("SB3-")] == []


def test_checkpoints_hold_the_weights_trained_on_their_steps(tmp_path) -> None:
    """A validation falls due during a rollout and runs after the update on it: ``step_64``
    holds the weights after the first update (not the initial ones), and the last checkpoint
    the final weights, which the run exports (select_best off)."""
    common = [*TINY, *PPO_TINY[:-1], "agent.total_timesteps=128", "validation.every=64"]
    res = train(cfg_of([*common, f"out_dir={tmp_path / 'a'}"]))
    ck = tmp_path / "a" / "checkpoints"
    assert sorted(p.name for p in ck.glob("step_*.npz")) == ["step_128.npz", "step_64.npz"]
    _assert_same(_weights(str(ck / "step_128.npz")), _weights(res["policy"]))
    frozen = train(cfg_of([*common, "agent.kwargs.learning_rate=0.0", f"out_dir={tmp_path / 'b'}"]))
    initial = _weights(frozen["policy"])  # (learning rate 0: the initial weights throughout)
    assert not np.allclose(_weights(str(ck / "step_64.npz"))["wc"], initial["wc"])
    assert not np.allclose(_weights(str(ck / "step_64.npz"))["wc"], _weights(res["policy"])["wc"])


def test_imitation_from_a_policy_file_starts_from_its_scores(tmp_path) -> None:
    """init_from with the imitation agent at learning rate 0 exports the loaded weights (its
    normalisation, folded into them, is not applied a second time)."""
    imi = train(cfg_of([*TINY, "agent=imitation", "agent.dagger.rounds=1", "agent.dagger.steps_per_round=120",
                        "agent.dagger.epochs=1", "validation.traces=[]", f"out_dir={tmp_path / 'a'}"]))
    again = train(cfg_of([*TINY, "agent=imitation", "agent.dagger.rounds=1",
                          "agent.dagger.steps_per_round=120", "agent.dagger.epochs=1",
                          "agent.dagger.lr=0.0", "validation.traces=[]", f"init_from={imi['policy']}",
                          f"out_dir={tmp_path / 'b'}"]))
    _assert_same(_weights(again["policy"]), _weights(imi["policy"]))


def test_resume_refuses_another_algorithm_and_keeps_the_zip_it_continues(tmp_path, caplog) -> None:
    first = train(cfg_of([*TINY, *PPO_TINY, f"out_dir={tmp_path / 'a'}"]))
    with pytest.raises(ConfigError, match=r"it holds a ppo model, and this run's agent trains "
                                          r"maskable_ppo; resume with the agent that saved it"):
        train(cfg_of([*TINY, *PPO_TINY, "agent=maskable_ppo", f"resume={first['sb3_model']}",
                      f"out_dir={tmp_path / 'b'}"]))
    before = Path(first["sb3_model"]).read_bytes()
    with caplog.at_level("WARNING"):
        train(cfg_of([*TINY, *PPO_TINY, "env.K=16", f"resume={first['sb3_model']}",
                      f"out_dir={tmp_path / 'a'}"]))  # in place
    assert "settings differ from those it was trained with" in caplog.text and "env.K: 32 -> 16" in caplog.text
    kept = list((tmp_path / "a" / "previous").glob("*/ppo.zip"))
    assert len(kept) == 1 and kept[0].read_bytes() == before  # the earlier model, set aside


def test_a_resume_of_another_network_shape_is_refused_before_the_run_is_set_aside(tmp_path) -> None:
    """A helper's audit: the zip was checked against policy.hidden only when the SB3 model was
    built, after the earlier run's files in the folder had been moved to previous/ (the README:
    a run refused for a bad input leaves them in place)."""
    first = train(cfg_of([*TINY, *PPO_TINY, f"out_dir={tmp_path / 'a'}"]))
    with pytest.raises(ConfigError, match=r"its network's hidden layers are \[\d+(, \d+)*\], "
                                          r"policy.hidden is \[8\]"):
        train(cfg_of([*TINY, *PPO_TINY, "policy.hidden=[8]", f"resume={first['sb3_model']}",
                      f"out_dir={tmp_path / 'a'}"]))
    assert not (tmp_path / "a" / "previous").exists() and os.path.isfile(first["sb3_model"])


@pytest.mark.parametrize("sig, vec", [("SIGTERM", "dummy"), ("SIGINT", "dummy"), ("SIGTERM", "subproc")])
def test_an_interrupted_sb3_run_saves_its_model_and_resumes(tmp_path, sig, vec) -> None:
    """A helper's audit: a PPO run stopped by SIGINT printed a traceback from inside torch, by
    SIGTERM nothing, and neither left the <algo>.zip that resume= continues. Both save the
    model so far, say how to continue, and exit 130; the zip resumes."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root))
    # (env.vec=subproc, the signal to the process group as a terminal or a scheduler sends it:
    # the workers, ended first, made the envs' close raise EOFError over the interrupt)
    args = [*TINY, "agent=ppo", "agent.total_timesteps=10000000",
            f"agent.n_envs={2 if vec == 'subproc' else 1}", f"env.vec={vec}",
            "agent.kwargs.n_steps=64", "agent.kwargs.batch_size=64", "agent.kwargs.n_epochs=1",
            "validation.traces=[]", f"out_dir={out}"]
    proc = subprocess.Popen([sys.executable, str(root / "scripts" / "train.py"), *args],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 240
    while not list((out / "checkpoints").glob("*.npz")) and proc.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.1)  # (learning: a checkpoint was written)
    os.killpg(proc.pid, getattr(signal, sig))  # (the process and its env workers)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "interrupted after" in err and "resume=" in err
    zip_path = out / "ppo.zip"
    state, _, fields = read_sb3_zip(str(zip_path))
    assert fields["num_timesteps"] >= 64
    done = train(cfg_of([*TINY, *PPO_TINY, f"resume={zip_path}", f"out_dir={tmp_path / 'again'}"]))
    _, _, again = read_sb3_zip(done["sb3_model"])
    assert again["num_timesteps"] > fields["num_timesteps"]  # (continued, not restarted)


def test_a_terminated_imitation_run_says_where_its_checkpoints_are(tmp_path) -> None:
    """A helper's audit: SIGTERM (a scheduler's stop) during imitation ended the run with
    status 143 and no word (only the SB3 stage turned it into an interrupt); it says where the
    checkpoints so far are, as SIGINT does, and exits 130."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root))
    args = [*TINY, "agent=imitation", "agent.dagger.rounds=1000", "validation.every=1",
            f"out_dir={out}"]
    proc = subprocess.Popen([sys.executable, str(root / "scripts" / "train.py"), *args],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    deadline = time.monotonic() + 240
    while not list((out / "checkpoints").glob("*.npz")) and proc.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.1)  # (a round done and validated: a checkpoint was written)
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "the checkpoints so far are in" in err


def test_a_saved_config_that_does_not_resolve_is_named_not_a_traceback(tmp_path, caplog) -> None:
    """A config.yaml beside the resumed zip with an interpolation it cannot resolve ended the
    run in omegaconf's InterpolationKeyError (a helper's audit): it is compared as unreadable."""
    from omegaconf import OmegaConf

    from cachegym.policies.training.train import _warn_config_changes

    (tmp_path / "config.yaml").write_text("env:\n  K: ${nonexistent.key}\n")
    with caplog.at_level("WARNING"):
        _warn_config_changes(str(tmp_path / "ppo.zip"), OmegaConf.create({"env": {"K": 32}}))
    assert "env.K: '<not resolvable in config.yaml>' -> 32" in caplog.text


def test_init_from_in_the_joint_env_and_a_negative_validation_interval_are_refused(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"with env=joint: a warm start loads an eviction network"):
        train(cfg_of([*TINY, "env=joint", "init_from=whatever.npz", f"out_dir={tmp_path / 'a'}"]))
    with pytest.raises(ConfigError, match=r"validation.every: -1; .*integer >= 0"):
        train(cfg_of([*TINY, *PPO_TINY, "validation.every=-1", f"out_dir={tmp_path / 'b'}"]))


def test_a_resume_with_other_hyperparameters_or_capacities_is_named(tmp_path, caplog) -> None:
    """The agent's kwargs (learning rate, n_steps, ...) and the training capacities changed on
    resume were not compared: a run continued with another learning rate said nothing."""
    from omegaconf import OmegaConf

    from cachegym.policies.training.train import _warn_config_changes

    (tmp_path / "config.yaml").write_text("agent:\n  kwargs: {learning_rate: 0.0003}\n"
                                          "capacities: [0.25, 0.5]\n")
    same = OmegaConf.create({"agent": {"kwargs": {"learning_rate": 0.0003}}, "capacities": [0.25, 0.5]})
    with caplog.at_level("WARNING"):
        _warn_config_changes(str(tmp_path / "ppo.zip"), same)
    assert "differ" not in caplog.text
    other = OmegaConf.create({"agent": {"kwargs": {"learning_rate": 0.001}}, "capacities": [0.1]})
    with caplog.at_level("WARNING"):
        _warn_config_changes(str(tmp_path / "ppo.zip"), other)
    assert "agent.kwargs: {'learning_rate': 0.0003} -> {'learning_rate': 0.001}" in caplog.text
    assert "capacities: [0.25, 0.5] -> [0.1]" in caplog.text


def test_a_resumed_run_selects_among_the_checkpoints_of_the_run_it_continues(tmp_path) -> None:
    """``validation.select_best`` after ``resume=`` into the same folder compared only the
    resumed part's checkpoints (the earlier ones were set aside in previous/): an interrupted
    run's best (here made the best by its record) was lost and a worse one exported."""
    import json

    val = ["agent=ppo", "agent.total_timesteps=128", "agent.n_envs=1", "agent.kwargs.n_steps=64",
           "agent.kwargs.batch_size=64", "agent.kwargs.n_epochs=1", "validation.every=64",
           "validation.capacities=[0.5]", "validation.select_best=true"]
    out = tmp_path / "run"
    first = train(cfg_of([*TINY, *val, f"out_dir={out}"]))
    ckpts = out / "checkpoints"
    state = json.loads((ckpts / "validation.json").read_text())
    assert [h["step"] for h in state["history"]] == [h["step"] for h in first["history"]]
    early = int(state["history"][0]["step"])
    state["best_step"], state["best_score"] = early, 1e9  # (an unbeatable earlier checkpoint)
    (ckpts / "validation.json").write_text(json.dumps(state))
    done = train(cfg_of([*TINY, *val, f"resume={out / 'ppo.zip'}", f"out_dir={out}"]))
    assert done["best_step"] == early and done["exported"] == "best_step"
    assert (out / "policy.npz").read_bytes() == (ckpts / f"step_{early}.npz").read_bytes()
    assert len(done["history"]) > len(first["history"])  # the earlier validations, then these
    # validated on other capacities: not compared (the resumed part's best is exported)
    (ckpts / "validation.json").write_text(json.dumps(state))
    other = train(cfg_of([*TINY, *val, "validation.capacities=[0.3]", f"resume={out / 'ppo.zip'}",
                          f"out_dir={out}"]))
    assert other["best_step"] != early


def test_a_joint_runs_zip_exports_both_heads_with_its_runs_prefetch_settings(tmp_path) -> None:
    """`cachegym export OUT/ppo.zip` of an env=joint run was refused (its prefetch settings are
    its env's): they are in the run's config.yaml beside the zip, read as data. The export
    equals the run's own policy file; without that config the zip is refused, saying so."""
    import shutil

    from cachegym.policies.training.export import export_file

    out = tmp_path / "run"
    res = train(cfg_of([*TINY, *PPO_TINY, "env=joint", f"out_dir={out}"]))
    again = export_file(str(out / "ppo.zip"), str(tmp_path / "again.npz"))
    h1, a1 = read_policy_file(res["policy"])
    h2, a2 = read_policy_file(again)
    assert h2["prefetch"] == h1["prefetch"] and (h2["K"], h2["candidate_rule"]) == (h1["K"], h1["candidate_rule"])
    assert sorted(a1) == sorted(a2) and all(np.array_equal(a1[k], a2[k]) for k in a1)
    assert LearnedPolicy.load(again).prefetch_head is not None
    # read without unpickling whatever --trust-pickle says (it failed in an internal error)
    trusted = export_file(str(out / "ppo.zip"), str(tmp_path / "trusted.npz"), trust_pickle=True)
    assert read_policy_file(trusted)[0]["prefetch"] == h1["prefetch"]
    (tmp_path / "other").mkdir()  # the config of another run (another K) beside it: refused
    shutil.copy(out / "ppo.zip", tmp_path / "other" / "ppo.zip")
    (tmp_path / "other" / "config.yaml").write_text(
        (out / "config.yaml").read_text().replace(f"K: {h1['K']}", "K: 3"))
    with pytest.raises(ConfigError, match="says env.K=3: not the config of the run that saved it"):
        export_file(str(tmp_path / "other" / "ppo.zip"), str(tmp_path / "y.npz"))
    (tmp_path / "alone").mkdir()
    shutil.copy(out / "ppo.zip", tmp_path / "alone" / "ppo.zip")
    with pytest.raises(ConfigError, match="a Joint-v0 model .* without the config.yaml of the training run"):
        export_file(str(tmp_path / "alone" / "ppo.zip"), str(tmp_path / "x.npz"))


def test_a_resume_of_a_resume_in_other_folders_keeps_the_first_runs_best(tmp_path) -> None:
    """Each run in a folder of its own (the default): C resumed B, which had resumed A, took the
    history but looked for A's best checkpoint in B's folder, and exported another (a review)."""
    import json

    val = ["agent=ppo", "agent.total_timesteps=128", "agent.n_envs=1", "agent.kwargs.n_steps=64",
           "agent.kwargs.batch_size=64", "agent.kwargs.n_epochs=1", "validation.every=64",
           "validation.capacities=[0.5]", "validation.select_best=true"]
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    train(cfg_of([*TINY, *val, f"out_dir={a}"]))
    state = json.loads((a / "checkpoints" / "validation.json").read_text())
    early = int(state["history"][0]["step"])
    state["best_step"], state["best_score"], state["best_file"] = early, 1e9, None
    (a / "checkpoints" / "validation.json").write_text(json.dumps(state))
    train(cfg_of([*TINY, *val, f"resume={a / 'ppo.zip'}", f"out_dir={b}"]))
    done = train(cfg_of([*TINY, *val, f"resume={b / 'ppo.zip'}", f"out_dir={c}"]))
    assert done["best_step"] == early
    assert (c / "policy.npz").read_bytes() == (a / "checkpoints" / f"step_{early}.npz").read_bytes()


def test_a_validation_record_that_cannot_be_read_is_said_not_a_crash(tmp_path, caplog) -> None:
    """A record cut short (a run interrupted while writing it) was skipped silently; wrong
    types (best_score null, history 5) ended the resumed run in a TypeError."""
    from cachegym.envs.workloads import generate
    from cachegym.policies.training.validation import Validator

    t = generate("zipf", seed=0, n_requests=500, n_objects=50)
    ck = tmp_path / "ck"
    ck.mkdir()
    for text in ('{"history": [', '{"history": 5, "best_step": 3}',
                 '{"history": [], "best_step": 3, "best_score": null}'):
        (ck / "validation.json").write_text(text)
        v = Validator([t], [0.5], "working_set", str(tmp_path / "new"), K=8, candidate_rule="lru")
        caplog.clear()
        with caplog.at_level("WARNING"):
            assert v.continue_from(str(ck)) is False
        assert "cannot be read" in caplog.text and v.best_step is None and v.history == []
    # the steps of a run that went on past the model resumed are not taken
    v = Validator([t], [0.5], "working_set", str(tmp_path / "new"), K=8, candidate_rule="lru")
    (ck / "step_64.npz").write_bytes(b"x")
    rec = {"fingerprint": v.fingerprint, "history": [{"step": 64.0}, {"step": 192.0}],
           "best_step": 192, "best_score": 1.0}
    import json

    (ck / "validation.json").write_text(json.dumps(rec))
    assert v.continue_from(str(ck), until=128) and [h["step"] for h in v.history] == [64.0]
    assert v.best_step is None
