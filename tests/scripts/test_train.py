"""Training configs compose and instantiate; train(cfg) smoke-runs for every algorithm."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")  # the train extra

from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.errors import ConfigCompositionException  # noqa: E402
from omegaconf.errors import ValidationError  # noqa: E402

from cachegym.allocator.errors import ConfigError  # noqa: E402
from cachegym.envs.config import instantiate  # noqa: E402
from cachegym.policies.learned import LearnedPolicy, read_policy_file  # noqa: E402
from cachegym.policies.training.config import register_train_configs  # noqa: E402
from cachegym.policies.training.train import EnvFactory, load_trace_list, train  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONF = os.path.join(ROOT, "conf")
GOLDEN_POLICY = os.path.join(ROOT, "tests", "golden", "policy.npz")
AGENTS = sorted(f[:-5] for f in os.listdir(os.path.join(CONF, "agent")) if f.endswith(".yaml"))

TINY = [
    "experiment=quick", "progress=false", "tensorboard=false",
    "validation.every=100", "validation.capacities=[0.3]",
]


def cfg_of(overrides: list[str]):
    register_train_configs()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("train", overrides=overrides)


@pytest.mark.parametrize("agent", AGENTS)
def test_every_agent_config_composes_and_instantiates(agent):
    cfg = cfg_of([f"agent={agent}"])
    a = instantiate(cfg.agent)
    assert type(a).__name__ in ("SB3Agent", "ImitationAgent")
    assert cfg.env.K >= 1 and list(cfg.policy.hidden)
    traces = load_trace_list(cfg_of(["experiment=quick"]).traces, "traces")
    env = EnvFactory(cfg.env, traces, [0.3], seed=0)(0)  # (env.vec is not the env's argument)
    obs, info = env.reset(seed=0)
    assert obs["mask"].shape == (cfg.env.K,) and "oracle_action" in info
    # capacities as sizes and percentages, as everywhere (capacities=[30%,1MiB] composes)
    sized = cfg_of(["experiment=quick", "capacities=[30%,1MiB]"])

    def caps(capacities: list[object]) -> list[int]:
        factory = EnvFactory(sized.env, traces, capacities, seed=0)
        out = []
        for i in range(2):
            e = factory(i)
            e.reset(seed=0)
            out.append(e.pool.capacity)
        return out

    assert caps(list(sized.capacities)) == caps([0.3, 1 << 20])
    assert caps(list(sized.capacities))[1] == 1 << 20


def test_an_env_parameters_error_names_the_env_config():
    """``train env.K=0`` printed "error: K must be an int in 1..1024", naming no config key."""
    traces = load_trace_list(cfg_of(["experiment=quick"]).traces, "traces")
    for override, says in (("env.K=0", "K must be an int"), ("env.reward=hits", "reward")):
        with pytest.raises(ConfigError, match=rf"^env \(the env config: env.<key>=.*{says}"):
            EnvFactory(cfg_of([override]).env, traces, [0.3], seed=0)(0)


def test_bad_values_fail_at_compose_time():
    with pytest.raises((ValidationError, ConfigCompositionException), match="total_timesteps"):
        cfg_of(["agent=ppo", "agent.total_timesteps=lots"])
    with pytest.raises((ValidationError, ConfigCompositionException), match="hidden"):
        cfg_of(["policy.hidden=wide"])
    with pytest.raises((ValidationError, ConfigCompositionException), match="no_such_key"):
        cfg_of(["env.no_such_key=1"])
    with pytest.raises(ConfigError, match="unknown algorithm"):
        instantiate(cfg_of(["agent=ppo", "agent.algo=a3c"]).agent)


@pytest.mark.parametrize("override,match", [
    # these compose (the types are right) but would train nothing, or a network of empty layers
    ("policy.hidden=[0]", r"policy.hidden: .* ints >= 1, one layer at least"),
    ("policy.hidden=[]", r"policy.hidden: .* ints >= 1, one layer at least"),
    ("policy.hidden=[64,-1]", r"policy.hidden: .* ints >= 1, one layer at least"),
    ("agent.dagger.rounds=0", r"agent.dagger: rounds=0 \(must be an int >= 1\)"),
    ("agent.dagger.steps_per_round=0", r"agent.dagger: steps_per_round=0"),
    ("agent.dagger.lr=-1", r"agent.dagger: lr=-1.0 \(must be >= 0\)"),
    ("agent.dagger.beta0=2", r"agent.dagger: beta0=2.0"),
    # or fail only at the end of training
    ("validation.capacities=[0]", r"validation.capacities: capacity must be > 0"),
    ("capacities=[2.0]", r"capacities: 2.0 is no fraction in \(0, 1\]"),  # (blamed on env)
    ("validation.capacity_of=peak", r"validation.capacity_of: 'peak' is not allowed"),
    ("export_name=''", r"export_name: '' names no file"),
    ("export_name=../escaped.npz", r"export_name: '../escaped.npz' is a path; give a file name"),
    ("export_name=foo.txt", r"export_name: 'foo.txt'; a policy file is a .npz"),  # (foo.txt.npz)
    ("seed=-1", r"seed: -1 is not allowed; give an integer from 0 to 4294967295"),
    ("seed=99999999999999999999999", r"seed: 99999999999999999999999 is not allowed"),
    # or end in an error deep inside SB3
    ("agent=dqn agent.kwargs.batch_size=0", r"agent.kwargs \(dqn\): batch_size=0 \(must be an int >= 1\)"),
    ("agent=ppo +agent.kwargs.nonsense=3", r"agent.kwargs \(ppo\): \['nonsense'\] are not settings of PPO; "
                                           r"it takes \[.*'batch_size'"),
    ("agent=ppo +agent.kwargs.seed=3", r"\['seed'\] are set by cachegym \(from seed=\)"),
    ("agent=imitation_ppo agent.finetune.kwargs.learning_rate=-0.1", r"\(maskable_ppo\): learning_rate=-0.1 "),
])
def test_values_that_would_train_nothing_or_fail_late_are_refused_before_any_work(override, match, tmp_path):
    """``train`` refuses them first, naming the key: nothing recorded, trained or written."""
    with pytest.raises(ConfigError, match=match):
        train(cfg_of([*TINY, *override.split(), f"out_dir={tmp_path}"]))
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("agent,extra", [
    ("imitation", ["agent.dagger.rounds=2", "agent.dagger.steps_per_round=150", "agent.dagger.epochs=1"]),
    ("ppo", ["agent.total_timesteps=128", "agent.n_envs=2", "agent.kwargs.n_steps=64", "agent.kwargs.batch_size=64", "agent.kwargs.n_epochs=1"]),
    ("maskable_ppo", ["agent.total_timesteps=128", "agent.n_envs=2", "agent.kwargs.n_steps=64", "agent.kwargs.batch_size=64", "agent.kwargs.n_epochs=1"]),
    ("dqn", ["agent.total_timesteps=150", "agent.kwargs.learning_starts=50", "agent.kwargs.batch_size=32"]),
])
def test_train_smoke(tmp_path, agent, extra):
    res = train(cfg_of(TINY + [f"agent={agent}", f"out_dir={tmp_path}"] + extra))
    assert os.path.isfile(res["policy"]) and res["policy"].startswith(str(tmp_path))
    hdr, _ = read_policy_file(res["policy"])
    assert hdr["K"] == 32 and len(hdr["config_sha256"]) == 64
    LearnedPolicy.load(res["policy"])
    assert {"miss_ratio_learned", "miss_ratio_lru", "traffic_learned", "gap_closed_traffic",
            "gap_closed_misses", "traffic_network", "gap_closed_traffic_network"} <= set(res["validation"])
    # the score a sweeper maximises: select_best's, in the run's objective (traffic here)
    v = res["validation"]
    assert res["objective"] == "traffic" and res["score"] == pytest.approx(
        v["gap_closed_traffic"] + min(0.0, v["gap_closed_traffic_min"]))
    assert res["history"], "the validation callback never ran"
    assert os.listdir(tmp_path / "checkpoints")
    assert res["exported"] == "last"  # (select_best is off by default: best_step is a report)


def test_an_eviction_run_for_stall_plans_and_validates_stall(tmp_path):
    """``env.reward=stall env.cost=PRESET`` on the eviction env composes and trains (its FOO
    teacher plans for copy time: tests/policies/test_training.py), and validation reports the
    network's stall against LRU's under the preset."""
    res = train(cfg_of(TINY + [
        "agent=imitation", "agent.dagger.rounds=1", "agent.dagger.steps_per_round=150",
        "agent.dagger.epochs=1", "env.reward=stall", "env.cost=h100_pcie5",
        f"out_dir={tmp_path}"]))
    val = res["validation"]
    assert val["stall_learned"] > 0 and val["stall_lru"] > 0 and val["stall_ratio"] > 0
    LearnedPolicy.load(res["policy"])
    import csv  # results.csv (what a training multirun merges) has the stall it was selected on

    with open(tmp_path / "results.csv") as f:
        rows = {r["policy"]: r for r in csv.DictReader(f)}
    assert float(rows["learned"]["stall_ns"]) == val["stall_learned"]
    assert float(rows["lru"]["stall_ns"]) == val["stall_lru"] and rows["lru"]["prefetch"] == "none"
    assert float(rows["learned"]["stall_ratio"]) == val["stall_ratio"]


def test_validation_reports_the_deployed_policy_and_the_network_alone(tmp_path):
    """The validated file under its shadow guard (what a pool deploys) and the network alone
    (guard none: what training changes, hidden wherever the guard follows a heuristic), each the
    evaluator's replay of that configuration."""
    from cachegym.envs.evaluation import RunSpec, learned_name, run_one
    from cachegym.envs.workloads import read_trace
    from cachegym.policies.training.validation import Validator

    t = read_trace(os.path.join(ROOT, "data", "traces", "resnet.npz"))
    v = Validator([t], [0.25], "peak_live", str(tmp_path), K=32, candidate_rule="sample")
    figs = v.evaluate_file(GOLDEN_POLICY)
    _, c, cap = v.runs[0]
    rows = {g: run_one(t, RunSpec(t.name, cap, str(c), "bytes", learned_name(g), "none", "none",
                                  learned=GOLDEN_POLICY, guard=g), **v.opts)  # type: ignore[arg-type]
            for g in ("shadow", "none")}
    assert figs["traffic_learned"] == rows["shadow"]["traffic_bytes"]
    assert figs["traffic_network"] == rows["none"]["traffic_bytes"]
    assert figs["traffic_network"] != figs["traffic_learned"]  # the guard decides too
    assert figs["gap_closed_traffic_network"] < 1.0


def test_checkpoints_are_selected_by_the_objective_trained_for(tmp_path):
    """``validation.select_best`` compares checkpoints on what the network is trained for: stall
    (its ratio to the reference) for a ``reward: stall`` env, else the gap closed in traffic."""
    from cachegym.policies.training.validation import Validator

    figs = [{"stall_ratio": 0.5, "gap_closed_traffic": 0.1, "gap_closed_traffic_min": 0.0},
            {"stall_ratio": 0.8, "gap_closed_traffic": 0.4, "gap_closed_traffic_min": 0.0}]
    for objective, best in (("stall", 0), ("traffic", 1)):
        v = Validator([], [], "peak_live", str(tmp_path), K=4, candidate_rule="lru",
                      preset="h100_pcie5", objective=objective)
        assert max(range(2), key=lambda i: v.score(figs[i])) == best


def test_same_seed_same_weights(tmp_path):
    extra = TINY + ["agent=imitation", "agent.dagger.rounds=1", "agent.dagger.steps_per_round=120",
                    "agent.dagger.epochs=1", "validation.traces=[]"]
    a = train(cfg_of(extra + [f"out_dir={tmp_path / 'a'}"]))
    b = train(cfg_of(extra + [f"out_dir={tmp_path / 'b'}"]))
    c = train(cfg_of(extra + [f"out_dir={tmp_path / 'c'}", "seed=1"]))
    wa, wb, wc = (read_policy_file(r["policy"])[0]["weights_sha256"] for r in (a, b, c))
    assert wa == wb and wa != wc
    # the same training written to another folder is the same file, byte for byte (its header's
    # config hash leaves out where the run writes)
    assert Path(a["policy"]).read_bytes() == Path(b["policy"]).read_bytes()


def test_finetune_starts_from_the_imitation_weights(tmp_path):
    res = train(cfg_of(TINY + [
        "agent=imitation_ppo", "agent.dagger.rounds=1", "agent.dagger.steps_per_round=150",
        "agent.dagger.epochs=1", "agent.finetune.total_timesteps=64", "agent.finetune.n_envs=1",
        "agent.finetune.kwargs.n_steps=64", "agent.finetune.kwargs.batch_size=64",
        "agent.finetune.kwargs.n_epochs=1", "agent.finetune.kwargs.learning_rate=0.0",
        "validation.traces=[]", f"out_dir={tmp_path}"]))
    _, w = read_policy_file(res["policy"])
    # learning rate 0: PPO changes nothing, so the export equals the imitation weights
    ckpts = sorted((tmp_path / "checkpoints").iterdir())
    _, w0 = read_policy_file(ckpts[0])
    for k in w:
        np.testing.assert_allclose(w[k], w0[k], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("policy", sorted(f[:-5] for f in os.listdir(os.path.join(CONF, "policy"))
                                          if f.endswith(".yaml")))
def test_every_policy_config_composes(policy):
    from cachegym.policies import features
    from cachegym.policies.training.nets import CandidateScorerNet

    cfg = cfg_of([f"policy={policy}", "agent=imitation"])
    net = CandidateScorerNet(features.F, features.G, list(cfg.policy.hidden))
    assert net.hidden == list(cfg.policy.hidden)


def test_main_config_composes():
    register_train_configs()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("main")
    assert cfg.agent.finetune.algo == "maskable_ppo" and list(cfg.main.capacities) == [0.25, 0.5]
    assert len(cfg.traces) >= 5 and cfg.record_inference and cfg.record_training
    # the prefetch stage: env=joint (conf/env/joint.yaml), stall under a preset, imitation only
    j = cfg.main.joint
    assert cfg.main.prefetch and j.env._target_ == "cachegym.envs.joint.JointEnv"
    assert (j.env.reward, j.env.cost, j.env.capacity_of) == ("stall", "h100_pcie5", "peak_live")
    assert j.agent.finetune is None and j.agent.dagger.rounds >= 1
    assert cfg.env._target_ == "cachegym.envs.evict.EvictEnv"  # the eviction run's env unchanged


def test_main_returns_the_objective_a_sweeper_maximises(monkeypatch) -> None:
    """scripts/train.py's task function returns the run's validation score (what
    hydra-optuna-sweeper optimises, direction maximize), and None, never NaN (which stops the
    plugin: it tells Optuna a failed trial with a value), where there is none or the run failed."""
    import cachegym.policies.training.train as tr
    from tests.scripts_loader import load_script

    mod = load_script("train")
    monkeypatch.setattr(tr, "train", lambda cfg: {"validation": {"gap_closed_traffic": 0.42},
                                                  "score": 0.25, "out_dir": "o", "policy": "p.npz"})
    assert mod.main.__wrapped__(None) == 0.25
    monkeypatch.setattr(tr, "train", lambda cfg: {"validation": {}, "score": None, "out_dir": "o",
                                                  "policy": "p"})
    assert mod.main.__wrapped__(None) is None

    def fails(cfg):
        raise ConfigError("bad")

    monkeypatch.setattr(tr, "train", fails)
    monkeypatch.setattr(mod, "job_failed", lambda e, what: None)  # (a multirun job's handling)
    assert mod.main.__wrapped__(None) is None


def test_the_recorded_training_architectures_are_not_the_held_out_zoos() -> None:
    """The zoo of the quality benchmark is what no training config trains on: the architectures
    the default mix records (training and inference) are others, and the quick run records none."""
    from cachegym.envs.workloads.models import WORKLOADS
    from cachegym.policies.training.quality import ZOO

    for name in ("train", "main"):
        register_train_configs()
        with initialize_config_dir(config_dir=CONF, version_base="1.3"):
            cfg = compose(name)
        recorded = {r.workload for r in cfg.record_training} | set(cfg.record_inference)
        assert recorded <= set(WORKLOADS) and not recorded & set(ZOO), (name, recorded & set(ZOO))
    quick = cfg_of(["experiment=quick"])
    assert not quick.record_training and not quick.record_inference


def test_training_traces_record_each_workload_once_and_refuse_bad_entries(tmp_path) -> None:
    """``record_training`` (workload and steps) and ``record_inference`` are recorded into
    OUT/recorded on first use, read back after; an unknown name, a bad step count or a workload
    listed twice is refused by its key before anything is recorded."""
    from cachegym.policies.training.train import training_traces

    cfg = cfg_of(["experiment=quick", "record_training=[{workload: gcn, steps: 1}]", "record_inference=[gcn]"])
    traces = training_traces(cfg, str(tmp_path))
    files = sorted(os.listdir(tmp_path / "recorded"))
    assert files == ["gcn_infer_s0_steps12.npz", "gcn_s0_steps1.npz"], files
    trained, infer = traces[-2:]
    assert trained.meta["workload"] == "gcn" and not trained.meta["inference"] and infer.meta["inference"]
    assert (trained.op == 1).any() and not (infer.kind == 2).any()  # writes; no gradients in inference
    stamps = [os.stat(tmp_path / "recorded" / f).st_mtime_ns for f in files]
    assert len(training_traces(cfg, str(tmp_path))) == len(traces)
    assert [os.stat(tmp_path / "recorded" / f).st_mtime_ns for f in files] == stamps  # not recorded again
    # recorded_dir: one folder for several runs (the main job's two stages share OUT/recorded)
    shared = str(tmp_path / "recorded")
    again = training_traces(cfg_of(["experiment=quick", "record_training=[{workload: gcn, steps: 1}]",
                                    "record_inference=[gcn]", f"recorded_dir={shared}"]),
                            str(tmp_path / "other_run"))
    assert not (tmp_path / "other_run").exists()  # nothing recorded there
    assert [os.stat(tmp_path / "recorded" / f).st_mtime_ns for f in files] == stamps
    assert all(np.array_equal(a.compute_ns, b.compute_ns) for a, b in zip(again[-2:], traces[-2:]))
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ConfigError, match="recorded_dir: .* is a file, not a folder"):
        training_traces(cfg_of(["experiment=quick", "record_inference=[gcn]",
                                f"recorded_dir={tmp_path / 'a_file'}"]), str(tmp_path / "bad"))
    for bad, match in ((["record_training=[{workload: resnet_big, steps: 2}]"], r"record_training: unknown workload 'resnet_big'"),
                       (["record_training=[{workload: gcn, steps: 0}]"], r"record_training: gcn's steps must be an integer >= 1"),
                       (["record_inference=[nope]"], r"record_inference: unknown workload 'nope'"),
                       (["record_training=[{workload: gcn, steps: 1}, {workload: gcn, steps: 2}]"],
                        r"record_training: \['gcn'\] listed more than once; list each workload once"),
                       (["record_inference=[gcn, moe, gcn]"], r"record_inference: \['gcn'\] listed more than once"),
                       # the inference list is checked before the training workloads are recorded
                       (["record_training=[{workload: gcn, steps: 1}]", "record_inference=[nope]"],
                        r"record_inference: unknown workload 'nope'")):
        with pytest.raises(ConfigError, match=match):
            training_traces(cfg_of(["experiment=quick", *bad]), str(tmp_path / "bad"))
    assert not (tmp_path / "bad").exists()


def test_a_run_in_the_folder_of_an_earlier_one_sets_its_files_aside(tmp_path, monkeypatch) -> None:
    """A second run in the same out_dir wrote its config beside the first's policy (and, if it
    failed, left them so: a mixed run); the first run's files move to out_dir/previous/. A run
    refused before any work (here: envs in which no eviction decision arises) leaves them."""
    from cachegym.policies.training import train as train_mod
    from tests.scripts.test_sb3 import PPO_TINY

    first = train(cfg_of([*TINY, *PPO_TINY, f"out_dir={tmp_path}"]))
    was = (tmp_path / "policy.npz").read_bytes()
    with pytest.raises(ConfigError, match="no eviction decision arose"):
        train(cfg_of([*TINY, "capacities=[1GiB]", f"out_dir={tmp_path}"]))
    assert not (tmp_path / "previous").exists() and (tmp_path / "policy.npz").read_bytes() == was

    def fail(*a, **k):
        raise RuntimeError("failed while training")

    monkeypatch.setattr(train_mod, "Validator", fail)  # (made after the outputs are set aside)
    with pytest.raises(RuntimeError, match="failed while training"):
        train(cfg_of([*TINY, "seed=7", f"out_dir={tmp_path}"]))
    (earlier,) = (tmp_path / "previous").iterdir()
    assert {"config.yaml", "train.json", "policy.npz", "ppo.zip"} <= {p.name for p in earlier.iterdir()}
    assert (earlier / "policy.npz").read_bytes() == was and first["sb3_model"].endswith("ppo.zip")
    assert not (tmp_path / "policy.npz").exists() and not (tmp_path / "ppo.zip").exists()
    assert "seed: 7" in (tmp_path / "config.yaml").read_text()  # the failed run's own config


def test_imitation_with_validation_every_0_validates_its_last_round_only(tmp_path):
    """``validation.every=0`` is "at the end only": imitation validated (and checkpointed)
    every round all the same."""
    res = train(cfg_of(TINY + ["agent=imitation", "agent.dagger.rounds=3", "agent.dagger.steps_per_round=100",
                               "agent.dagger.epochs=1", "validation.every=0", f"out_dir={tmp_path}"]))
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["step_2.npz", "validation.json"]
    assert [h["step"] for h in res["history"]] == [2]


def test_dqn_on_the_joint_env_is_refused_before_an_earlier_runs_outputs_move(tmp_path):
    """As a fine-tune after imitation it was refused after the whole imitation stage, and the
    refused run had set the earlier run's policy and checkpoints aside (previous/)."""
    (tmp_path / "policy.npz").write_bytes(b"earlier")
    for agent in (["agent=dqn"], ["agent=imitation_ppo", "agent.finetune.algo=dqn",
                                                   "~agent.finetune.kwargs.ent_coef", "~agent.finetune.kwargs.n_epochs"]):
        with pytest.raises(ConfigError, match="agent=dqn: its Q-network is one eviction scorer"):
            train(cfg_of([*TINY, "env=joint", *agent, f"out_dir={tmp_path}"]))
    assert sorted(os.listdir(tmp_path)) == ["policy.npz"]


def test_a_refused_trace_leaves_an_earlier_runs_outputs_where_they_were(tmp_path):
    """The traces were read after the earlier run's outputs had been set aside (previous/): a
    trace path mistyped moved that run away and left a config for a run that never started,
    which the next run then set aside as one."""
    (tmp_path / "policy.npz").write_bytes(b"earlier")
    for bad, match in ((["trace.path=nowhere.npz"], "trace.path: no such file 'nowhere.npz'"),
                       (["validation.traces=[{path: nowhere.npz}]"],
                        r"validation.traces\[0\]: trace.path: no such file 'nowhere.npz'"),
                       # the env's own checks (were run after the earlier outputs had moved)
                       (["env.K=0"], r"env \(the env config.*K must be"),
                       (["env.window=0"], r"env \(the env config"),
                       # (-1 cut each validation trace's last request; 0 meant "whole")
                       (["validation.max_requests=-1"], r"validation.max_requests: -1 is not a number"),
                       (["validation.max_requests=0"], r"validation.max_requests: 0 is not a number")):
        with pytest.raises(ConfigError, match=match):
            train(cfg_of([*TINY, *bad, f"out_dir={tmp_path}"]))
    assert sorted(os.listdir(tmp_path)) == ["policy.npz"]


def test_an_interrupted_imitation_names_its_checkpoints_folder(tmp_path, monkeypatch):
    """It printed the placeholder OUT/checkpoints."""
    from cachegym.policies.training import agents

    def stop(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(agents, "dagger", stop)
    with pytest.raises(KeyboardInterrupt) as ei:
        train(cfg_of([*TINY, "agent=imitation", f"out_dir={tmp_path}"]))
    assert str(tmp_path / "checkpoints") in ei.value.resume_with  # type: ignore[attr-defined]


def test_validation_on_a_training_trace_is_said(tmp_path, caplog):
    """Validating on the training trace itself was silent: its figures are no held-out figures."""
    from tests.scripts.test_sb3 import PPO_TINY

    same = "{generator: zipf, seed: 2, params: {n_requests: 3000, n_objects: 300, size: 4096}}"
    with caplog.at_level(logging.WARNING, logger="cachegym"):
        train(cfg_of([*TINY, *PPO_TINY, f"validation.traces=[{same}]", "validation.max_requests=1000",
                      f"out_dir={tmp_path}"]))
    said = [r.getMessage() for r in caplog.records if "validation trace" in r.getMessage()]
    assert len(said) == 1 and "is the start of training trace" in said[0], said
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cachegym"):
        train(cfg_of([*TINY, *PPO_TINY, f"out_dir={tmp_path / 'other'}"]))
    assert not [r for r in caplog.records if "validation trace" in r.getMessage()]


def test_a_generated_trace_is_chosen_as_evaluate_chooses_it(tmp_path):
    """``cachegym train trace=storage`` got Hydra's "Could not override 'trace'. No match in the
    defaults list" (the trace group was evaluate's alone); it trains on that trace alone now."""
    from cachegym.policies.training.train import training_traces

    cfg = cfg_of(["experiment=quick", "trace=zipf", "trace.params.n_requests=500"])
    assert cfg.trace.generator == "zipf"
    (t,) = training_traces(cfg, str(tmp_path))
    assert t.name.startswith("zipf") and len(t) == 500
    assert cfg_of(["experiment=quick"]).trace.generator is None  # (the default: the mix)
