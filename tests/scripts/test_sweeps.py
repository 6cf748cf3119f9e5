"""Hydra multiruns as their users expect: a config snapshot beside every job's results, one
merged table (merged.csv) per sweep, a failed job named without stopping the others, the Optuna
sweep config composing, and an evaluation sweep on a local Ray cluster the test starts."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from cachegym.envs.sweep import OPTUNA_RESULTS, name_best_trial, read_results

ROOT = Path(__file__).resolve().parents[2]
CONF = str(ROOT / "conf")
# a tiny Zipf workload, two policies, no bounds, no plots: a job takes about a second
TINY_EVAL = ["trace.generator=zipf", "trace.params.n_requests=2000", "trace.params.n_objects=200",
             "eval.bounds=[]", "eval.plots=false", "eval.progress=false", "eval.capacities=[0.1]",
             "eval.policies=[lru,fifo]", "eval.decision_timing=false"]
TINY_TRAIN = ["experiment=quick", "progress=false", "tensorboard=false", "validation.every=100",
              "validation.capacities=[0.3]", "agent.dagger.rounds=1",
              "agent.dagger.steps_per_round=300", "agent.dagger.epochs=1"]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))


def _run(script: str, args: list[str], cwd: Path, timeout: int = 300,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / f"{script}.py"), *args], cwd=cwd,
                          env=env or _env(), capture_output=True, text=True, timeout=timeout)


def _merged(path: Path) -> dict[str, dict[str, str]]:
    with open(path, newline="") as f:
        return {r["policy"]: r for r in csv.DictReader(f)}


def test_evaluation_multirun_writes_snapshots_and_one_merged_table(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = _run("evaluate", ["-m", "seed=0,1", *TINY_EVAL, "hydra/launcher=basic",
                             f"hydra.sweep.dir={sweep}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for job in ("0", "1"):
        assert (sweep / f"job_{job}" / "results.csv").is_file()
        snap = OmegaConf.load(sweep / f"job_{job}" / "config.yaml")
        assert snap.seed == int(job) and snap.trace.seed == int(job)  # resolved, per job
    rows = _merged(sweep / "merged.csv")
    assert set(rows) == {"lru", "fifo"}
    for r in rows.values():
        assert r["n_jobs"] == "2" and r["capacity"] == "0.1" and r["trace"] == "zipf"
        lo, mean, hi = (float(r[f"traffic_bytes_{k}"]) for k in ("ci95_lo", "mean", "ci95_hi"))
        assert lo < mean < hi  # two seeds, two traces: a spread
    per_job = [float(read_results(str(sweep / f"job_{j}" / "results.csv"))[0]["traffic_bytes"])
               for j in ("0", "1")]  # (lru's row first)
    assert float(rows["lru"]["traffic_bytes_mean"]) == pytest.approx(sum(per_job) / 2)
    assert "merged 2 of 2 jobs" in proc.stdout and "n_jobs" in proc.stdout


def test_a_smaller_sweep_into_a_larger_ones_folder_sets_its_other_jobs_aside(tmp_path: Path) -> None:
    """Seeds 7 and 8 into the folder of an earlier sweep of four seeds left its job_2 and
    job_3 beside the new job_0 and job_1 (a helper's audit: a script reading job_*/ mixed
    the sweeps); they move to previous/ with the earlier jobs' files."""
    out = tmp_path / "out"
    first = _run("evaluate", ["-m", "seed=0,1,2", *TINY_EVAL, "hydra/launcher=basic",
                              f"out_dir={out}", f"hydra.sweep.dir={tmp_path / 'h1'}"], tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    again = _run("evaluate", ["-m", "seed=7", *TINY_EVAL, "hydra/launcher=basic",
                              f"out_dir={out}", f"hydra.sweep.dir={tmp_path / 'h2'}"], tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert sorted(p.name for p in out.glob("job_*")) == ["job_0"]
    assert sorted(p.name for p in out.glob("previous/*/job_*")) == ["job_1", "job_2"]


def test_a_sweep_of_no_jobs_is_an_error(tmp_path: Path) -> None:
    """seed='range(0,0)' launched nothing and exited 0 (a helper's audit)."""
    proc = _run("evaluate", ["-m", "seed=range(0,0)", *TINY_EVAL, "hydra/launcher=basic",
                             f"hydra.sweep.dir={tmp_path / 's'}"], tmp_path)
    assert proc.returncode == 2 and "the sweep ran no job" in proc.stderr


def test_a_repeated_sweep_value_is_one_sample(tmp_path: Path) -> None:
    """seed=0,0,1 counted job 1 (job 0 again) as a third sample and narrowed the interval (a
    helper's audit): it is merged once, and the log says so."""
    sweep = tmp_path / "sweep"
    proc = _run("evaluate", ["-m", "seed=0,0,1", *TINY_EVAL, "hydra/launcher=basic",
                             f"hydra.sweep.dir={sweep}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _merged(sweep / "merged.csv")
    assert {r["n_jobs"] for r in rows.values()} == {"2"}
    assert "job 1 repeats job 0" in proc.stdout + proc.stderr


def test_a_failed_job_is_named_and_the_others_merged(tmp_path: Path) -> None:
    sweep, out = tmp_path / "sweep", tmp_path / "out"
    out.mkdir()
    (out / "merged.csv").write_text("an earlier sweep's table\n")  # set aside, not overwritten
    proc = _run("evaluate", ["-m", *TINY_EVAL, "eval.policies=[lru],[nosuch]", "hydra/launcher=basic",
                             f"out_dir={out}"], tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]  # the others merged, and a status that says so
    assert "error: 1 of 2 jobs failed or left no results" in proc.stderr
    log = proc.stdout + proc.stderr
    assert "unknown value 'nosuch'" in log
    named = [ln for ln in log.splitlines() if "1 of 2 jobs left no results" in ln]
    assert len(named) == 1 and "job 1: " in named[0] and "eval.policies=[nosuch]" in named[0]
    # with out_dir, the jobs write out_dir/job_<num> (config.yaml beside) and the table is there
    assert (out / "job_0" / "config.yaml").is_file() and not (out / "job_1" / "results.csv").exists()
    # and each job's log beside its results (it was under ./multirun/: a helper's audit)
    assert "nosuch" in (out / "job_1" / "evaluate.log").read_text()
    assert not (tmp_path / "multirun").exists() and not sweep.exists()
    (earlier,) = (out / "previous").glob("*/merged.csv")
    assert earlier.read_text() == "an earlier sweep's table\n"
    rows = _merged(out / "merged.csv")
    assert set(rows) == {"lru"} and rows["lru"]["n_jobs"] == "1"
    assert rows["lru"]["traffic_bytes_ci95_lo"] == ""  # one job: no interval


@pytest.mark.slow
def test_training_multirun_merges_validation_figures(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="training needs the train extra (torch)")
    sweep = tmp_path / "sweep"
    proc = _run("train", ["-m", "seed=0,1", *TINY_TRAIN, "hydra/launcher=basic",
                          f"hydra.sweep.dir={sweep}"], tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for job in ("0", "1"):
        assert OmegaConf.load(sweep / f"job_{job}" / "config.yaml").seed == int(job)
        assert (sweep / f"job_{job}" / "policy.npz").is_file()
    rows = _merged(sweep / "merged.csv")
    assert set(rows) == {"learned", "lru"} and rows["learned"]["n_jobs"] == "2"
    assert rows["learned"]["gap_closed_traffic_mean"] != ""


def test_each_command_sweeps_into_its_own_folder() -> None:
    """A multirun of the main job went to train.yaml's multirun/train/<time>."""
    from cachegym.policies.training.config import register_train_configs

    register_train_configs()
    for name, kind in (("main", "main"), ("train", "train"), ("evaluate", "evaluate")):
        with initialize_config_dir(config_dir=CONF, version_base="1.3"):
            cfg = compose(name, return_hydra_config=True)
        assert f"/multirun/{kind}/" in OmegaConf.to_yaml(cfg.hydra.sweep, resolve=False), name


def test_optuna_sweep_config_composes() -> None:
    if importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is None:
        pytest.skip("hydra-optuna-sweeper is not installed (pip install 'cachegym[cluster]')")
    from cachegym.policies.training.config import register_train_configs

    register_train_configs()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("train", overrides=["hydra/sweeper=tune"], return_hydra_config=True)
    sw = cfg.hydra.sweeper
    assert sw._target_.endswith("OptunaSweeper") and sw.direction == "maximize"
    assert set(sw.params) == {"agent.dagger.lr", "agent.dagger.epochs", "policy.hidden.0",
                              "policy.hidden.1"}
    # every tuned key exists in the training config and takes an override of its type
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        tuned = compose("train", overrides=["agent.dagger.lr=0.001", "agent.dagger.epochs=2",
                                            "policy.hidden.0=128", "policy.hidden.1=16"])
    assert tuned.agent.dagger.lr == 0.001 and list(tuned.policy.hidden) == [128, 16]
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for key, value in sw.params.items():  # each a sweep (choice, range, interval) Optuna samples
        assert parser.parse_override(f"{key}={value}").is_sweep_override(), key


def test_the_best_optuna_trial_is_named_by_its_folder_and_policy(tmp_path: Path) -> None:
    """hydra-optuna-sweeper's results name the best parameters and value alone: the merge finds
    the job whose overrides give them (numbers as numbers) and whose score is that value (a
    resumed study replays parameters), and adds its results folder and policy file."""
    out = tmp_path / "out"  # (out_dir apart from the sweep directory: the results are there)
    trials = [("0.001", "32", 0.1), ("0.0030000", "64", 0.2), ("0.003", "64", 0.5), ("${x}", "8", 0.0)]
    jobs = {}  # each job's results folder and overrides, as the merge reads them
    for job, (lr, width, score) in enumerate(trials):
        r = out / f"job_{job}"
        r.mkdir(parents=True)
        jobs[str(r)] = [f"agent.dagger.lr={lr}", f"policy.hidden.0={width}", "seed=0"]
        (r / "policy.npz").write_bytes(b"")
        (r / "train.json").write_text(json.dumps({"policy": str(r / "policy.npz"), "score": score}))
    assert name_best_trial(str(tmp_path), jobs) is None  # (no study's results)

    def study(lr: Any, width: Any, value: float) -> Any:
        OmegaConf.save(OmegaConf.create({"name": "optuna", "best_value": value, "best_params": {
            "agent.dagger.lr": lr, "policy.hidden.0": width}}), tmp_path / OPTUNA_RESULTS)
        return name_best_trial(str(tmp_path), jobs)

    job, policy = study(0.003, 64, 0.5)
    assert job == str(out / "job_2") and policy == str(out / "job_2" / "policy.npz")
    saved = OmegaConf.load(tmp_path / OPTUNA_RESULTS)
    assert saved.best_job == job and saved.best_policy == policy and saved.best_value == 0.5
    assert study(0.003, 64, 0.9) is None  # (its best trial ran in an earlier sweep)
    assert study("${x}", 8, 0.0)[0] == str(out / "job_3")  # (a value that reads as interpolation)


@pytest.mark.slow
def test_optuna_maximises_what_train_returns(tmp_path: Path) -> None:
    """Two Optuna trials of a tiny training run: the study's best value is the largest
    validation score (train.json's, select_best's) that the trials' main() returned."""
    if importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is None:
        pytest.skip("hydra-optuna-sweeper is not installed (pip install 'cachegym[cluster]')")
    pytest.importorskip("torch", reason="training needs the train extra (torch)")
    sweep = tmp_path / "sweep"
    proc = _run("train", ["-m", "hydra/sweeper=tune", "hydra.sweeper.n_trials=2",
                          "hydra.sweeper.n_jobs=1", "hydra/launcher=basic",
                          *(o for o in TINY_TRAIN if not o.startswith("agent.dagger.epochs")),
                          f"hydra.sweep.dir={sweep}"], tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    best = OmegaConf.load(sweep / "optimization_results.yaml")
    scores = [json.loads((sweep / f"job_{j}" / "train.json").read_text())["score"]
              for j in ("0", "1")]
    assert best.best_value == pytest.approx(max(scores))
    job = f"job_{scores.index(max(scores))}"  # (named, with its policy, by the merge)
    assert best.best_job == str(sweep / job) and best.best_policy == str(sweep / job / "policy.npz")
    assert set(best.best_params) == {"agent.dagger.lr", "agent.dagger.epochs", "policy.hidden.0",
                                     "policy.hidden.1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_evaluation_sweep_on_a_local_ray_cluster(tmp_path: Path) -> None:
    if importlib.util.find_spec("ray") is None or importlib.util.find_spec(
            "hydra_plugins.hydra_ray_launcher") is None:
        pytest.skip("ray or hydra-ray-launcher is not importable (pip install 'cachegym[cluster]')")
    ray = shutil.which("ray", path=os.path.dirname(sys.executable)) or shutil.which("ray")
    assert ray is not None, "ray is importable but its command is not on PATH"
    port = _free_port()
    # the cluster's workers import cachegym as this process does (PYTHONPATH with the checkout)
    tmp = Path(os.path.realpath(tmp_path))
    # a home of its own: a Ray run elsewhere may have left ~/.ray/auth_token, which the client
    # then sends to this cluster, started without token authentication (refused)
    (tmp / "home").mkdir()
    env = dict(_env(), RAY_USAGE_STATS_ENABLED="0", HOME=str(tmp / "home"))
    temp_dir = Path("/tmp") / f"ray_{os.getpid()}_{port}"  # (Ray's socket paths: keep them short)
    try:
        subprocess.run([ray, "start", "--head", "--num-cpus=2", f"--port={port}",
                        "--include-dashboard=false", "--node-ip-address=127.0.0.1",
                        f"--temp-dir={temp_dir}", "--disable-usage-stats"],
                       cwd=tmp, env=env, check=True, capture_output=True, text=True, timeout=60)
        sweep = tmp / "sweep"
        proc = _run("evaluate", ["-m", "seed=0,1", *TINY_EVAL, "hydra/launcher=ray_cluster",
                                 f"hydra.launcher.ray.init.address=127.0.0.1:{port}",
                                 f"hydra.sweep.dir={sweep}"], tmp, timeout=90, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "Ray Launcher is launching 2 jobs" in proc.stdout + proc.stderr
        rows = _merged(sweep / "merged.csv")
        assert set(rows) == {"lru", "fifo"} and {r["n_jobs"] for r in rows.values()} == {"2"}
        for job in ("0", "1"):
            assert (sweep / f"job_{job}" / "config.yaml").is_file()
    finally:
        subprocess.run([ray, "stop", "--force"], cwd=tmp, env=env, capture_output=True, timeout=60)
        shutil.rmtree(temp_dir, ignore_errors=True)
