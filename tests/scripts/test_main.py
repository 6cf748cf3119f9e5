"""The main job end to end on a tiny budget: train (eviction, then the prefetch stage), export
one file with both heads, evaluate with and without its prefetch head, print, `policy: PATH`."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch")  # the train extra

from cachegym.envs.workloads.registry import generate  # noqa: E402
from cachegym.policies.learned import read_policy_file  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TINY = [
    "experiment=quick", "progress=false", "tensorboard=false", "validation.every=100",
    "validation.capacities=[0.3]", "agent.dagger.rounds=1", "agent.dagger.steps_per_round=150",
    "agent.dagger.epochs=1", "agent.finetune.total_timesteps=64", "agent.finetune.n_envs=1",
    "agent.finetune.kwargs.n_steps=64", "agent.finetune.kwargs.batch_size=64",
    "agent.finetune.kwargs.n_epochs=1", "main.capacities=[0.3]", "main.plots=true",
    "main.joint.capacities=[0.3]", "main.joint.env.window=2000", "main.joint.agent.dagger.rounds=1",
    "main.joint.agent.dagger.steps_per_round=300", "main.joint.agent.dagger.epochs=1",
]


def test_main_job_end_to_end(tmp_path):
    held = []
    for i, (name, params) in enumerate((("dl_training", {"n_layers": 4, "hidden": 64, "batch_tokens": 128, "steps": 2}),
                                         ("zipf", {"n_requests": 2000, "n_objects": 300, "size": 4096}))):
        p = tmp_path / f"held{i}.npz"
        generate(name, seed=50 + i, **params).save(p)
        held.append(str(p))
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "main.py"), *TINY,
                        f"main.held_out=[{','.join(held)}]", f"out_dir={out}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    assert lines[-1].startswith("policy: ")
    policy = lines[-1][len("policy: "):]
    assert os.path.isfile(policy)
    assert any(line.startswith("outputs: ") and str(out) in line for line in lines)
    # each run's config snapshot beside its results: the main job's, training's, evaluation's
    for d in (out, out / "train", out / "eval"):
        assert (d / "config.yaml").is_file(), d
    assert "main:" in (out / "config.yaml").read_text()
    with open(out / "eval" / "results.csv") as f:
        rows = list(csv.DictReader(f))
    names = {row["policy"] for row in rows}
    assert {"lru", "lfu", "arc", "s3fifo", "gdsf", "belady", "learned[shadow]", "learned[none]"} <= names
    assert {row["policy_file"] for row in rows if row["policy"].startswith("learned[")} == {policy}
    # one file: the eviction run's scorer and the prefetch stage's head
    header, arrays = read_policy_file(policy)
    _, evict_arrays = read_policy_file(out / "train" / "policy.npz")
    _, joint_arrays = read_policy_file(out / "joint" / "policy.npz")
    assert header["prefetch"]["opportunity"] == "access"
    assert all(np.array_equal(arrays[k], v) for k, v in evict_arrays.items())
    assert all(np.array_equal(arrays[k], v) for k, v in joint_arrays.items() if k.startswith("p/"))
    # each policy without prefetch, with lookahead, with history, with the file's head: stall
    # beside traffic
    pol_rows = [row for row in rows if row["row_kind"] == "policy"]
    assert {row["prefetch"] for row in pol_rows} == {"none", "lookahead", "history",
                                                     f"learned:{policy}"}
    both = [row for row in pol_rows if row["policy"] == "learned[shadow]"
            and row["prefetch"] == f"learned:{policy}"]
    assert len(both) == 2 and all(float(row["stall_ns"]) >= 0 and int(row["traffic_bytes"]) > 0
                                  for row in both)
    assert "learned:policy.npz" in r.stdout  # the table's short name of the file's head
    assert {row["trace"] for row in rows} == {"held0", "held1"}
    # the bounds and the stall rows under the main job's preset; gap closed in the table
    assert {"foo_l", "foo_u", "stall_lb"} <= names  # (auto: FOO)
    assert any(n.startswith("stall_ref[") for n in names)
    assert {row["preset"] for row in rows if row["row_kind"] == "policy"} == {"h100_pcie5"}
    assert "gap_traffic" in r.stdout and "stall_ms" in r.stdout
    # the summary after the table: one line per held-out cell, the totals and the verdicts
    summary = r.stdout[r.stdout.index("summary: learned[shadow]"):]
    assert sum(line.startswith(("held0 ", "held1 ")) for line in summary.splitlines()) == 2
    assert "stall at most half of LRU's" in summary and "traffic at most" in summary
    assert any(p.endswith(".png") for p in os.listdir(out / "eval"))
    # the printed path is what scripts/evaluate.py takes
    r2 = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "evaluate.py"),
                         f"trace.path={held[1]}", "eval.capacities=[0.3]", "eval.plots=false",
                         "eval.progress=false", "eval.policies=[]", f"eval.learned=[{policy}]",
                         f"out_dir={tmp_path / 'ev'}"],
                        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r2.returncode == 0, r2.stderr[-3000:]
    assert "learned[shadow]" in r2.stdout


@pytest.mark.parametrize("override,match", [
    ("main.held_out=[no_such_trace.npz]", r"main.held_out\[0\]: no such trace file 'no_such_trace.npz'"),
    # a file that does not read was refused only after both stages had trained (a helper's audit)
    (f"main.held_out=[{os.path.join(ROOT, 'README.md')}]", r"main.held_out\[0\]: cannot infer the trace format"),
    (f"main.held_out=[gpt_wide.npz,{os.path.join(ROOT, 'tests', 'golden', 'policy.npz')}]",
     r"main.held_out\[1\]: .*missing required column"),
    ("main.held_out=[]", "main.held_out: the list is empty"),
    ("main.capacities=[0]", "main.capacities: capacity must be > 0"),
    ("main.capacities=[]", "main.capacities: the list is empty"),
    ("main.baselines=[lru,lfuu]", "main.baselines: unknown value 'lfuu'"),
    ("main.learned_guards=[shadow,bare]", "main.learned_guards: unknown guard 'bare'; choices: lru, none, shadow, trial"),
    ("main.learned_guards=[]", "main.learned_guards: the list is empty"),
    ("main.bounds=[fooo]", r"main.bounds: \['fooo'\] unknown; allowed: \['auto', 'foo', 'lfoo_l', 'pfoo_l'\]"),
    ("main.presets=[h100]", "main.presets: unknown preset 'h100'"),
    ("main.joint.capacities=[]", "main.joint.capacities: the list is empty"),
    ("main.joint.env.cost=h100", "main.joint.env.cost: unknown preset 'h100'"),
    ("main.joint.env._target_=cachegym.envs.evict.EvictEnv", "main.joint.env: the prefetch stage trains in env=joint"),
    # the joint env's own arguments, refused by the env only after the eviction stage had trained
    ("main.joint.env.K=0", "main.joint.env: K must be an int in 1..1024"),
    ("main.joint.env.opportunity=bogus", "main.joint.env: opportunity must be one of"),
    ("main.joint.env.predictor.depth=-1", "main.joint.env: SuccessorPredictor needs depth"),
    ("main.joint.capacities=[150%]", "main.joint.capacities: "),  # (a percentage is taken, as in main.capacities)
    # the joint stage's agent named as main.joint.agent (it said agent.dagger: a helper's audit)
    ("main.joint.agent.dagger.teacher=oracle", r"main.joint.agent.dagger: teacher='oracle'"),
])
def test_bad_main_section_fails_before_training(override, match, tmp_path, monkeypatch):
    """A typo in ``main`` (what the evaluation after training reads) is refused before training
    starts; nothing is written."""
    from hydra import compose, initialize_config_dir

    from cachegym.allocator.errors import ConfigError
    from cachegym.policies.training import main_job
    from cachegym.policies.training.config import register_train_configs

    def no_training(cfg):  # type: ignore[no-untyped-def]
        raise AssertionError("training started before the main section was checked")

    monkeypatch.setattr(main_job, "train", no_training)
    register_train_configs()
    with initialize_config_dir(config_dir=os.path.join(ROOT, "conf"), version_base="1.3"):
        cfg = compose("main", overrides=[*TINY, override, f"out_dir={tmp_path / 'out'}"])
    with pytest.raises(ConfigError, match=match):
        main_job.run_main(cfg)
    assert not (tmp_path / "out").exists()


def test_main_prefetch_false_trains_and_evaluates_eviction_only(tmp_path, monkeypatch):
    """``main.prefetch=false``: one training run (the eviction scorer), its file is the policy,
    and the evaluation runs no prefetcher."""
    from hydra import compose, initialize_config_dir

    from cachegym.policies.training import main_job
    from cachegym.policies.training.config import register_train_configs

    golden = os.path.join(ROOT, "tests", "golden", "policy.npz")
    runs, evals = [], []
    monkeypatch.setattr(main_job, "train", lambda cfg, out_dir: runs.append(str(cfg.env._target_))
                        or {"policy": golden, "out_dir": out_dir})
    monkeypatch.setattr(main_job, "evaluate", lambda cfg, out_dir: evals.append(cfg)
                        or {"table": "", "rows": [], "csv": "", "plots": []})
    register_train_configs()
    with initialize_config_dir(config_dir=os.path.join(ROOT, "conf"), version_base="1.3"):
        cfg = compose("main", overrides=[*TINY, "main.prefetch=false", "main.held_out=[" +
                                         os.path.join(ROOT, "data", "traces", "gpt.npz") + "]",
                                         f"out_dir={tmp_path / 'out'}"])
    res = main_job.run_main(cfg)
    # the policy is at the documented OUT/policy.npz (it was only train/'s: a helper's audit)
    out_policy = str(tmp_path / "out" / "policy.npz")
    assert runs == ["cachegym.envs.evict.EvictEnv"] and res["policy"] == out_policy
    assert res["joint"] is None and read_policy_file(out_policy)[1].keys() == read_policy_file(golden)[1].keys()
    assert list(evals[0].eval.prefetchers) == ["none"] and list(evals[0].eval.learned) == [out_policy]


def test_a_main_job_in_the_folder_of_an_earlier_one_sets_its_policy_aside(tmp_path, monkeypatch):
    """The main job overwrote OUT/policy.npz, OUT/config.yaml and OUT/held_out/ of an earlier
    main job in the same out_dir (its train/ and eval/ set theirs aside): now they go to
    OUT/previous/<time>/ first, kept also when the new run fails."""
    from hydra import compose, initialize_config_dir

    from cachegym.allocator.errors import ConfigError
    from cachegym.policies.training import main_job
    from cachegym.policies.training.config import register_train_configs

    out = tmp_path / "out"
    (out / "held_out").mkdir(parents=True)
    (out / "policy.npz").write_bytes(b"earlier policy")
    (out / "config.yaml").write_text("earlier: 1\n")
    (out / "held_out" / "t.npz").write_bytes(b"earlier trace")

    def fails(cfg, out_dir):  # type: ignore[no-untyped-def]
        raise ConfigError("training failed")

    monkeypatch.setattr(main_job, "train", fails)
    register_train_configs()
    with initialize_config_dir(config_dir=os.path.join(ROOT, "conf"), version_base="1.3"):
        cfg = compose("main", overrides=[*TINY, "main.held_out=[" + os.path.join(
            ROOT, "data", "traces", "gpt.npz") + "]", f"out_dir={out}"])
    with pytest.raises(ConfigError, match="training failed"):
        main_job.run_main(cfg)
    (prev,) = (out / "previous").iterdir()
    assert sorted(p.name for p in prev.iterdir()) == ["config.yaml", "held_out", "policy.npz"]
    assert (prev / "policy.npz").read_bytes() == b"earlier policy"
    assert (prev / "held_out" / "t.npz").read_bytes() == b"earlier trace"
    assert not (out / "policy.npz").exists() and "earlier" not in (out / "config.yaml").read_text()
