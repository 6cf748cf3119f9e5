"""scripts/evaluate.py under interruption and bad settings (issue #27, items 7 and 8): completed
runs survive SIGINT/SIGTERM and a resumed sweep runs only the rest; out_dir, capacities and
users' classes that cannot work give errors (or warnings) that name them."""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import cachegym.envs.evaluation as evaluation
from cachegym.allocator.errors import ConfigError, InvalidVictim, PolicyError
from cachegym.allocator.trace import Trace
from cachegym.envs.config import register_configs
from cachegym.envs.evaluation import evaluate
from cachegym.envs.workloads import generate

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ["eval.capacities=[0.02,0.05,0.1,0.2]", "eval.policies=[lru,fifo,lfu,arc,clock,sieve,s3fifo,belady]",
         "eval.plots=false", "eval.progress=false", "eval.decision_timing=false"]
N_RUNS = 4 * 8
N_BOUNDS = 4  # (one bound task per capacity)
REQUESTS = 12_000
VOLATILE = ("wall_s",)


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    t = generate("zipf", seed=5, n_requests=REQUESTS, n_objects=1500, size=4096, size_sigma=1.0)
    p = tmp_path_factory.mktemp("tr") / "z.npz"
    t.save(p)
    return p


def _compose(overrides: list[str]):  # type: ignore[no-untyped-def]
    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("evaluate", overrides=overrides)


def _stable(rows: list[dict[str, Any]]) -> str:
    """The rows without their wall times, as JSON (so that NaN equals NaN)."""
    return json.dumps([{k: v for k, v in r.items() if k not in VOLATILE} for r in rows], sort_keys=True)


@pytest.fixture(scope="module")
def fresh_rows(trace_file: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("fresh")
    return evaluate(_compose([f"trace.path={trace_file}", *SWEEP, f"out_dir={out}"]))["rows"]  # type: ignore[no-any-return]


def _journal(out: Path, bounds: bool = False) -> list[str]:
    """The journal's lines of runs (``bounds``: of bound tasks)."""
    p = out / "runs.jsonl"
    lines = p.read_text().splitlines() if p.exists() else []
    return [x for x in lines if x.endswith("}") and ('{"bound_rows": ' in x) == bounds]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_sweep_keeps_its_runs_and_resumes(
        sig: int, trace_file: Path, fresh_rows: list[dict[str, Any]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.csv").write_text("an earlier sweep's results\n")  # must not outlive the new sweep
    (out / "results.json").write_text("[]")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # (SIGINT as a terminal delivers it: a job started in the background by a non-interactive
    # shell, e.g. `nohup make test &`, inherits SIGINT ignored, and so would the sweep)
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "evaluate.py"), f"trace.path={trace_file}",
                             *SWEEP, f"out_dir={out}"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 300
    while len(_journal(out)) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    done = _journal(out)
    assert proc.returncode == 130, err  # stopped by the signal, not finished
    assert "eval.resume=true" in err and "Traceback" not in err
    assert 2 <= len(done) < N_RUNS, "the sweep was not interrupted mid-way"
    assert all(json.loads(line)["row"]["requests"] == REQUESTS for line in done)
    assert not (out / "results.csv").exists() and not (out / "results.json").exists()
    # the earlier sweep's files were set aside, not lost (a failed new sweep would leave neither)
    (earlier,) = (out / "previous").iterdir()
    assert (earlier / "results.csv").read_text() == "an earlier sweep's results\n"
    assert sorted(p.name for p in earlier.iterdir()) == ["results.csv", "results.json"]
    with open(out / "runs.jsonl", "a") as f:
        f.write('{"key": "cut short by a kill", "ro')  # a line a SIGKILL could leave

    ran: list[str] = []
    real = evaluation.run_one

    def counting(t: Trace, spec: Any, **kw: Any) -> dict[str, Any]:
        ran.append(spec.policy)
        return real(t, spec, **kw)

    monkeypatch.setattr(evaluation, "run_one", counting)
    bounds_done = _journal(out, bounds=True)
    bounded: list[Any] = []
    real_bounds = evaluation.bound_rows

    def counting_bounds(*args: Any) -> Any:
        bounded.append(args[2])
        return real_bounds(*args)

    monkeypatch.setattr(evaluation, "bound_rows", counting_bounds)
    with caplog.at_level(logging.INFO):
        res = evaluate(_compose([f"trace.path={trace_file}", *SWEEP, f"out_dir={out}", "eval.resume=true"]))
    assert len(ran) == N_RUNS - len(done)  # only the missing runs ran
    assert f"resuming: {len(done)} of {N_RUNS} runs" in caplog.text and "not a complete record" in caplog.text
    # the bounds finished before the interruption are taken too (they were computed again)
    assert len(bounded) == N_BOUNDS - len(bounds_done) and len(bounds_done) >= 1
    assert _stable(res["rows"]) == _stable(fresh_rows)  # the same results as one uninterrupted sweep
    rows = json.loads((out / "results.json").read_text())
    assert len([r for r in rows if r["row_kind"] == "policy"]) == N_RUNS  # and the bound rows
    assert len(_journal(out)) == N_RUNS and len(_journal(out, bounds=True)) == N_BOUNDS

    ran.clear()  # without resume, a sweep starts afresh
    evaluate(_compose([f"trace.path={trace_file}", *SWEEP[:1], "eval.policies=[lru]", *SWEEP[2:],
                       f"out_dir={out}"]))
    assert len(ran) == 4 and len(_journal(out)) == 4  # lru: always run
    resumed = sorted((out / "previous").iterdir())[-1]  # the resumed sweep's files, set aside
    assert sorted(p.name for p in resumed.iterdir()) == sorted(
        ["config.yaml", "results.csv", "results.json", "runs.jsonl",
         *(p.name for p in resumed.glob("metrics__*.png"))])
    assert len((resumed / "runs.jsonl").read_text().splitlines()) == N_RUNS + N_BOUNDS


def test_a_failed_sweep_in_a_used_out_dir_loses_none_of_the_earlier_results(
        trace_file: Path, tmp_path: Path) -> None:
    """A sweep into the folder of an earlier one that then fails (a policy raises) left neither
    sweep's results: the earlier ones were deleted before the first run. They are set aside."""
    out = tmp_path / "out"
    quick = ["eval.capacities=[0.1]", "eval.plots=false", "eval.progress=false", "eval.bounds=[]",
             "eval.decision_timing=false", f"out_dir={out}"]
    first = evaluate(_compose([f"trace.path={trace_file}", "eval.policies=[lru]", *quick]))
    before = (out / "results.csv").read_text()
    boom = tmp_path / "boom.py"
    boom.write_text("from cachegym.policies.lru import LRU\n\n\nclass Boom(LRU):\n"
                    "    def victim(self, view):\n        raise RuntimeError('boom')\n")
    with pytest.raises(PolicyError, match="boom"):
        evaluate(_compose([f"trace.path={trace_file}", f"eval.policies=[lru,'{boom}:Boom']", *quick]))
    (earlier,) = (out / "previous").iterdir()
    assert (earlier / "results.csv").read_text() == before and first["csv"] == str(out / "results.csv")
    assert sorted(p.name for p in earlier.iterdir()) == ["config.yaml", "results.csv", "results.json",
                                                        "runs.jsonl"]


def test_results_are_replaced_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure while writing leaves the earlier results.csv whole, and no temporary file."""
    rows = [{"trace": "t", "capacity": 1, "miss_ratio": 0.5}]
    evaluation.write_results(rows, str(tmp_path))
    before = (tmp_path / "results.csv").read_text()

    class Boom(Exception):
        pass

    def bad_cell(v: Any) -> Any:
        raise Boom

    monkeypatch.setattr(evaluation, "_cell", bad_cell)
    with pytest.raises(Boom):
        evaluation.write_results(rows * 2, str(tmp_path))
    assert (tmp_path / "results.csv").read_text() == before
    assert sorted(os.listdir(tmp_path)) == ["results.csv", "results.json"]


# ---------------------------------------------------------------------- item 8
def test_out_dir_that_is_a_file_is_a_config_error(trace_file: Path, tmp_path: Path) -> None:
    f = tmp_path / "taken"
    f.write_text("x")
    with pytest.raises(ConfigError, match="out_dir: .*taken' is a file, not a directory"):
        evaluate(_compose([f"trace.path={trace_file}", *SWEEP, f"out_dir={f}"]))
    with pytest.raises(ConfigError, match="out_dir: cannot create"):
        evaluate(_compose([f"trace.path={trace_file}", *SWEEP, f"out_dir={f / 'below'}"]))


def test_capacity_below_objects(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    t = Trace.from_arrays([1, 2, 3, 1, 2, 3], [100, 5000, 300, 100, 5000, 300])
    p = tmp_path / "t.npz"
    t.save(p)
    base = [f"trace.path={p}", "eval.policies=[lru]", "eval.plots=false", "eval.progress=false",
            f"out_dir={tmp_path / 'o'}"]
    for cap in (1, 2, 99):  # nothing could ever be resident: was a run of every request streamed
        with pytest.raises(ConfigError, match=f"eval.capacities: {cap} is {cap} bytes .* nothing could ever be resident"):
            evaluate(_compose([*base, f"eval.capacities=[{cap}]"]))
    with caplog.at_level(logging.WARNING):
        res = evaluate(_compose([*base, "eval.capacities=[1000]"]))
    assert "2 of 6 requests (1 objects) are larger than the capacity" in caplog.text
    assert res["rows"][0]["streamed"] == 2


def test_a_users_policy_whose_constructor_raises_is_named(trace_file: Path, tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text("class Broken:\n    def __init__(self):\n"
                                      "        raise RuntimeError('no GPU here')\n"
                                      "    def victim(self, view):\n        return None\n")
    spec = f"{tmp_path / 'mine.py'}:Broken"
    with pytest.raises(ConfigError, match=f"policy '{spec}': its constructor raised RuntimeError: no GPU here") as e:
        evaluate(_compose([f"trace.path={trace_file}", "eval.capacities=[0.1]", f"eval.policies=[{spec}]",
                           "eval.plots=false", "eval.progress=false", f"out_dir={tmp_path / 'o'}"]))
    assert isinstance(e.value.__cause__, RuntimeError)
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "evaluate.py"), f"trace.path={trace_file}",
                        "eval.capacities=[0.1]", f"eval.policies=[{spec}]", "eval.plots=false",
                        "eval.progress=false", f"out_dir={tmp_path / 'o'}"], cwd=tmp_path,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "its constructor raised RuntimeError" in r.stderr and "Traceback" not in r.stderr




@pytest.mark.parametrize("victim,error,says", [
    ("raise ValueError('bad state')", PolicyError,
     "policy 'Flaky' \\(Flaky\\) raised ValueError\\('bad state'\\) in victim"),
    ("return 10**6", InvalidVictim,
     "policy 'Flaky' \\(Flaky\\), in victim: eviction victim 1000000 is not evictable"),
])
def test_a_users_policy_failing_mid_run_names_the_policy_and_the_request(
        victim: str, error: type[Exception], says: str, tmp_path: Path) -> None:
    """A user's policy that raises in a hook, or names an impossible victim, at its third
    decision: the error names the policy, the trace, the capacity and the request (row, key)."""
    (tmp_path / "mine.py").write_text(
        "from cachegym.policies.base import EvictionPolicyBase\n\n"
        "class Flaky(EvictionPolicyBase):\n"
        "    def __init__(self):\n        self.n = 0\n"
        "    def victim(self, view):\n        self.n += 1\n"
        f"        if self.n == 3:\n            {victim}\n"
        "        return view.candidates()[0]\n")
    t = Trace.from_arrays([1, 2, 3, 4, 1, 2, 3, 4, 5, 6], 100)  # one object fits: rows 1.. evict
    t.save(tmp_path / "t.npz")
    spec = f"{tmp_path / 'mine.py'}:Flaky"
    with pytest.raises(error, match=f"policy '{spec}' on trace 't' at capacity 0.3 \\(180 bytes\\), "
                                    f"request 3 \\(key 4\\): .*{says}") as e:
        evaluate(_compose([f"trace.path={tmp_path / 't.npz'}", "eval.capacities=[0.3]",
                           f"eval.policies=[{spec}]", "eval.plots=false", "eval.progress=false",
                           f"out_dir={tmp_path / 'o'}"]))
    assert e.value.row == 3  # type: ignore[attr-defined]
    if error is PolicyError:
        assert isinstance(e.value.__cause__, ValueError)


def test_runs_replayed_in_worker_processes_give_the_same_rows(
        trace_file: Path, fresh_rows: list[dict[str, Any]], tmp_path: Path) -> None:
    """``eval.jobs=2``: the sweep's runs in two worker processes, each row as one after the
    other (but for the wall times), in the same order, each in the journal."""
    out = tmp_path / "o"
    rows = evaluate(_compose([f"trace.path={trace_file}", *SWEEP, f"out_dir={out}",
                              "eval.jobs=2"]))["rows"]
    assert _stable(rows) == _stable(fresh_rows)
    assert len(_journal(out)) == N_RUNS


def test_a_run_failing_in_a_worker_process_raises_its_error_here(tmp_path: Path) -> None:
    """A user's policy that raises at its third decision, in a worker process: the same typed
    error as in this process, naming the policy, the trace, the capacity and the request."""
    (tmp_path / "mine.py").write_text(
        "from cachegym.policies.base import EvictionPolicyBase\n\n"
        "class Flaky(EvictionPolicyBase):\n"
        "    def __init__(self):\n        self.n = 0\n"
        "    def victim(self, view):\n        self.n += 1\n"
        "        if self.n == 3:\n            raise ValueError('bad state')\n"
        "        return view.candidates()[0]\n")
    t = Trace.from_arrays([1, 2, 3, 4, 1, 2, 3, 4, 5, 6], 100)
    t.save(tmp_path / "t.npz")
    spec = f"{tmp_path / 'mine.py'}:Flaky"
    # (both capacities' runs fail, in two workers: the one that fails first is raised)
    with pytest.raises(PolicyError, match=f"policy '{spec}' on trace 't' at capacity (0.3 "
                                          f"\\(180 bytes\\), request 3 \\(key 4\\)|0.5 "
                                          f"\\(300 bytes\\), request 5 \\(key 2\\)): .*raised "
                                          f"ValueError\\('bad state'\\) in victim") as e:
        evaluate(_compose([f"trace.path={tmp_path / 't.npz'}", "eval.capacities=[0.3,0.5]",
                           f"eval.policies=[{spec}]", "eval.plots=false", "eval.progress=false",
                           "eval.jobs=2", f"out_dir={tmp_path / 'o'}"]))
    assert e.value.row in (3, 5) and e.value.hook == "victim"


def test_a_bad_number_of_jobs_is_a_config_error(trace_file: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="eval.jobs: -1 is not allowed"):
        evaluate(_compose([f"trace.path={trace_file}", "eval.capacities=[0.1]", "eval.plots=false",
                           "eval.progress=false", "eval.jobs=-1", f"out_dir={tmp_path / 'o'}"]))
    for bad in ("two", True, 1.5):  # (from Python: Hydra's schema refuses these in a config)
        with pytest.raises(ConfigError, match="eval.jobs"):
            evaluation.check_jobs(bad)
    assert evaluation.check_jobs(3) == 3 and evaluation.check_jobs(0) == evaluation.usable_cores()
    if hasattr(os, "sched_getaffinity"):  # (0: the cores this process may run on, not the machine's)
        assert evaluation.usable_cores() == len(os.sched_getaffinity(0))


def test_workers_run_one_thread_of_blas_each_unless_the_user_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker processes are the parallelism: each runs its numerical libraries on one thread
    (a pool of threads per core in each worker would oversubscribe a many-core machine), unless
    the variable is set; this process's environment is left as it was."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "3")
    tasks = [(os.getenv, (v,), {}, v) for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")]
    got = dict(evaluation.in_workers(tasks, [0, 1], 2))
    assert got == {0: "1", 1: "3"}
    assert "OMP_NUM_THREADS" not in os.environ and os.environ["MKL_NUM_THREADS"] == "3"


class _Bar:
    """What a tqdm bar is told of the progress (``set_postfix_str``)."""

    def __init__(self) -> None:
        self.said: list[str] = []

    def set_postfix_str(self, s: str, refresh: bool = True) -> None:
        self.said.append(s)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_sweep_counts_the_requests_its_runs_replayed(jobs: int) -> None:
    """A long run moves the bar: ``run_one`` reports every PROGRESS_ROWS rows, in this process
    or from the workers (a shared count); the rows are those of a replay in one piece."""
    t = generate("zipf", seed=1, n_requests=2 * evaluation.PROGRESS_ROWS + 5000, n_objects=3000)
    specs = [evaluation.RunSpec("t", 1 << 20, "1MiB", "bytes", p, "none", "none")
             for p in ("lru", "gdsf")]
    tasks = evaluation.run_tasks([(t, s, {"decision_timing": False}) for s in specs])
    bar = _Bar()
    got = dict(evaluation.in_workers(tasks, [0, 1], jobs, bar))
    total = 2 * len(t)
    assert bar.said[-1].startswith(f"{total:,} of {total:,} trace rows")
    if jobs == 1:  # each slice reported as it ends: 3 per run
        assert f"{evaluation.PROGRESS_ROWS:,} of {total:,} trace rows, run 'lru'" in bar.said[1]
    for i, s in enumerate(specs):
        whole = evaluation.run_one(t, s, decision_timing=False)
        assert repr({k: v for k, v in got[i].items() if k != "wall_s"}) == \
            repr({k: v for k, v in whole.items() if k != "wall_s"})  # (nan == nan)
    assert evaluation._PROGRESS is None


def test_a_resume_reruns_the_runs_a_damaged_journal_holds(tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """A helper's audit: a journal row without its trace, with a traffic of "lots", a line
    nested past the recursion limit or a line that is not UTF-8 ended a resumed sweep in a
    traceback (KeyError, ValueError, RecursionError, UnicodeDecodeError). Such records are not
    results: their runs run again, and the rows are those of a fresh sweep."""
    t = generate("zipf", seed=3, n_requests=3000, n_objects=300)
    t.save(tmp_path / "t.npz")
    over = [f"trace.path={tmp_path / 't.npz'}", "eval.capacities=[0.1,0.2]", "eval.plots=false",
            "eval.policies=[lru,fifo]", "eval.bounds=[]", "eval.progress=false",
            "eval.decision_timing=false",
            f"out_dir={tmp_path / 'o'}"]
    first = evaluate(_compose(over))["rows"]
    lines = (tmp_path / "o" / "runs.jsonl").read_bytes().splitlines()
    assert len(lines) == 4
    recs = [json.loads(x) for x in lines]
    del recs[0]["row"]["trace"]
    recs[1]["row"]["traffic_bytes"] = "lots"
    damaged = [json.dumps(recs[0]).encode(), json.dumps(recs[1]).encode(), lines[2],
               b'{"key": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", b"\xff\xfe" + lines[3]]
    (tmp_path / "o" / "runs.jsonl").write_bytes(b"\n".join(damaged) + b"\n")
    ran: list[str] = []
    real = evaluation.run_one

    def counting(t: Trace, spec: Any, **kw: Any) -> dict[str, Any]:
        ran.append(spec.policy)
        return real(t, spec, **kw)

    with caplog.at_level(logging.WARNING), pytest.MonkeyPatch.context() as mp:
        mp.setattr(evaluation, "run_one", counting)
        again = evaluate(_compose([*over, "eval.resume=true"]))["rows"]
    assert len(ran) == 3  # every damaged record's run ran again, the whole one's did not
    assert "no trace" in caplog.text and "traffic_bytes is 'lots'" in caplog.text
    assert caplog.text.count("is not a complete record") == 2
    assert _stable(again) == _stable(first)


def test_runs_in_the_same_second_keep_their_own_results(tmp_path: Path) -> None:
    """A helper's audit: two evaluations started in the same second without out_dir shared
    Hydra's time-stamped folder, and the second set the first's results aside (its printed
    results.csv held the other run's rows). A run claims the folder (a file with its pid):
    while the claimant runs, another goes to <folder>_2; a finished run's folder is the next
    run's (a resume with hydra.run.dir= reuses its runs: the review of this fix)."""
    t = generate("zipf", seed=3, n_requests=1000, n_objects=100)
    t.save(tmp_path / "t.npz")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    folder = tmp_path / "outputs" / "evaluate" / "same_second"

    def run(policy: str, *more: str) -> str:
        r = subprocess.run([sys.executable, str(ROOT / "scripts" / "evaluate.py"),
                            f"trace.path={tmp_path / 't.npz'}", "eval.capacities=[0.1]",
                            f"eval.policies=[{policy}]", "eval.bounds=[]", "eval.plots=false",
                            "eval.progress=false", "hydra.run.dir=outputs/evaluate/same_second",
                            *more], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout + r.stderr

    run("fifo")
    assert "fifo" in (folder / "results.csv").read_text()
    resumed = run("fifo", "eval.resume=true")  # (finished: its folder, its runs)
    assert "resuming: 2 of 2 runs" in resumed and not (tmp_path / "outputs" / "evaluate" /
                                                         "same_second_2").exists()
    (folder / ".cachegym_run").write_text(f"{os.getpid()}\n")  # (a live run of that second)
    printed = run("clock")
    second = folder.parent / "same_second_2"
    assert "fifo" in (folder / "results.csv").read_text() and not (folder / "previous").exists()
    assert "clock" in (second / "results.csv").read_text() and "same_second_2" in printed
    from cachegym.envs import sweep

    sweep._CLAIMS.clear()
    assert sweep._claimed(str(tmp_path / "x")) == str(tmp_path / "x")
    assert sweep._claimed(str(tmp_path / "x")) == str(tmp_path / "x")  # (the same process)


def test_a_full_disk_is_an_output_error_that_says_how_to_go_on(tmp_path: Path) -> None:
    """A helper's audit: a sweep whose disk filled ended in a chained OSError traceback from
    the journal. It is an OutputError naming the file, the runs kept and the resume."""
    import errno

    from cachegym.allocator.errors import OutputError

    t = generate("zipf", seed=3, n_requests=2000, n_objects=200)
    t.save(tmp_path / "t.npz")
    over = [f"trace.path={tmp_path / 't.npz'}", "eval.capacities=[0.1]", "eval.plots=false",
            "eval.policies=[lru]", "eval.bounds=[]", "eval.progress=false", "eval.jobs=1",
            f"out_dir={tmp_path / 'o'}"]

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "fsync", full)
        with pytest.raises(OutputError, match=r"No space left on device\): the 0 runs completed "
                                              r"are kept in .*runs.jsonl.*eval.resume=true"):
            evaluate(_compose(over))


def test_a_resume_reruns_a_run_whose_preset_or_policy_file_changed(tmp_path: Path) -> None:
    """A resumed sweep reused a run whose preset file or FILE.py policy had changed since (its
    key hashed the exported policy files only): the rows were the old files'."""
    from cachegym.allocator.cost import PRESETS, save_preset

    t = generate("zipf", seed=3, n_requests=3000, n_objects=300)
    t.save(tmp_path / "t.npz")
    preset, mine = tmp_path / "p.json", tmp_path / "mine.py"
    save_preset(PRESETS["h100_pcie5"], str(preset))
    mine.write_text("from cachegym.policies.lru import LRU as Mine\n")
    over = [f"trace.path={tmp_path / 't.npz'}", "eval.capacities=[0.1]", "eval.plots=false",
            f"eval.policies=[lru,{mine}:Mine]", f"eval.presets=[{preset}]", "eval.bounds=[]",
            "eval.progress=false", f"out_dir={tmp_path / 'o'}"]
    first = evaluate(_compose(over))["rows"]
    data = json.loads(preset.read_text())
    data["h2d_gbps"] = data["d2h_gbps"] = 5.0
    preset.write_text(json.dumps(data))
    mine.write_text("from cachegym.policies.classic import FIFO as Mine\n")
    again = evaluate(_compose([*over, "eval.resume=true"]))["rows"]
    fresh = evaluate(_compose([*over[:-1], f"out_dir={tmp_path / 'fresh'}"]))["rows"]
    def counts(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [(r["policy"], r["misses"], r["traffic_bytes"], r["stall_ns"]) for r in rows]

    assert counts(again) == counts(fresh)
    assert [c[1:] for c in counts(again)] != [c[1:] for c in counts(first)]


def test_a_new_sweep_removes_the_plots_an_earlier_one_left(tmp_path: Path) -> None:
    out = tmp_path / "o"
    out.mkdir()
    (out / "metrics__old__none.png").write_bytes(b"x")
    t = generate("zipf", seed=3, n_requests=2000, n_objects=200)
    t.save(tmp_path / "t.npz")
    evaluate(_compose([f"trace.path={tmp_path / 't.npz'}", "eval.capacities=[0.1]",
                       "eval.policies=[lru]", "eval.plots=false", "eval.progress=false",
                       "eval.bounds=[]", f"out_dir={out}"]))
    assert not (out / "metrics__old__none.png").exists()
    assert (os.stat(out / "results.csv").st_mode & 0o777) == 0o666 & ~_umask()  # (not 0600)


def _umask() -> int:
    m = os.umask(0o022)
    os.umask(m)
    return m


def test_out_dir_with_an_interpolation_that_does_not_resolve_is_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    # Hydra resolves out_dir inside its run-folder setup, where an error printed a traceback
    from cachegym.envs.config import _out_or

    with pytest.raises(SystemExit) as e:
        _out_or("d", _root_=OmegaConf.create({"out_dir": "${oops}"}))
    assert e.value.code == 2
    assert "out_dir: Interpolation key 'oops' not found" in capsys.readouterr().err


def test_out_dir_takes_a_home_path_and_refuses_an_unwritable_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cachegym.envs.config import _out_or
    from cachegym.envs.sweep import results_dir

    monkeypatch.setenv("HOME", str(tmp_path))
    assert _out_or("d", _root_=OmegaConf.create({"out_dir": "~/x"})) == str(tmp_path / "x")
    assert _out_or("d", _root_=OmegaConf.create({"out_dir": None})) == "d"
    assert _out_or("d", _root_=OmegaConf.create({"out_dir": "${a}/b", "a": "x"})) == "x/b"
    ro = tmp_path / "ro"
    ro.mkdir()
    monkeypatch.setattr("cachegym.envs.sweep.tempfile.TemporaryFile", _refuse)
    with pytest.raises(ConfigError, match="cannot write in the directory"):
        results_dir({"out_dir": str(ro)}, "evaluate", exact=str(ro))


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise PermissionError(13, "Permission denied")


def test_a_stuck_run_in_a_worker_does_not_outlive_the_sweep(tmp_path: Path) -> None:
    """One run fails while another is stuck in its policy, in two workers: the sweep ends with
    the error at once; the stuck worker ended with it (it ran on, and the process's exit waited
    for it, for ever)."""
    (tmp_path / "mine.py").write_text(
        "from cachegym.policies.lru import LRU\n\n"
        "class Stuck(LRU):\n    def victim(self, view):\n        while True:\n            pass\n\n"
        "class Fails(LRU):\n    def victim(self, view):\n        raise ValueError('no')\n")
    t = Trace.from_arrays(list(range(50)) * 4, 100)
    t.save(tmp_path / "t.npz")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "evaluate.py"),
                        f"trace.path={tmp_path / 't.npz'}", "eval.capacities=[0.2]",
                        f"eval.policies=[{tmp_path / 'mine.py'}:Stuck,{tmp_path / 'mine.py'}:Fails]",
                        "eval.plots=false", "eval.progress=false", "eval.bounds=[]", "eval.jobs=2",
                        f"out_dir={tmp_path / 'o'}"], cwd=tmp_path, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    assert r.returncode == 2 and "raised ValueError('no') in victim" in r.stderr
    assert time.monotonic() - t0 < 60


def test_a_worker_that_dies_names_the_runs_it_may_have_run(tmp_path: Path) -> None:
    """A policy that ends its worker process (os._exit; a segfault alike): the error lists the
    tasks in flight or queued, the dying policy's among them, rather than one of them."""
    from cachegym.allocator.errors import CachegymError

    (tmp_path / "mine.py").write_text(
        "import os\nfrom cachegym.policies.lru import LRU\n\n"
        "class Dies(LRU):\n    def victim(self, view):\n        os._exit(3)\n")
    t = Trace.from_arrays(list(range(50)) * 4, 100)
    t.save(tmp_path / "t.npz")
    spec = f"{tmp_path / 'mine.py'}:Dies"
    with pytest.raises(CachegymError, match=f"a worker process ended abruptly .*run '{spec}'"):
        evaluate(_compose([f"trace.path={tmp_path / 't.npz'}", "eval.capacities=[0.2]",
                           f"eval.policies=[{spec},fifo]", "eval.plots=false",
                           "eval.progress=false", "eval.bounds=[]", "eval.jobs=2",
                           f"out_dir={tmp_path / 'o'}"]))


def test_a_resume_with_nothing_to_resume_says_so(trace_file: Path, tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """Without the interrupted sweep's out_dir a resume ran every run in a new folder, silently."""
    with caplog.at_level(logging.WARNING):
        evaluate(_compose([f"trace.path={trace_file}", "eval.policies=[lru]", "eval.capacities=[0.1]",
                           "eval.plots=false", "eval.progress=false", "eval.bounds=[]",
                           f"out_dir={tmp_path / 'new'}", "eval.resume=true"]))
    assert "holds no runs.jsonl to resume" in caplog.text


def test_clean_ahead_for_a_policy_without_an_eviction_order_is_said(
        trace_file: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Its row ran without clean-ahead, silently (4x LRU's stall for an exact copy of LRU)."""
    with caplog.at_level(logging.WARNING):
        evaluate(_compose([f"trace.path={trace_file}", "eval.policies=[lru,random]",
                           "eval.capacities=[0.1]", "eval.presets=[h100_pcie5]",
                           "allocator.clean_ahead=0.25", "eval.plots=false", "eval.progress=false",
                           "eval.bounds=[]", f"out_dir={tmp_path}"]))
    said = [r.getMessage() for r in caplog.records if "cleans nothing ahead" in r.getMessage()]
    assert len(said) == 1 and "'random'" in said[0]


_CYCLES: list = []


class _Node:
    pass


def _make_cycle(n: int) -> int:
    """A task that leaves a reference cycle behind (as a run's pool and its view do)."""
    import weakref

    a, b = _Node(), _Node()
    a.other, b.other = b, a
    a.payload = bytearray(n)
    _CYCLES.append(weakref.ref(a))
    return n


_RESIDENT = [0]  # the resident bytes the test's stand-in for rss_bytes() reports


def _make_cycle_at(n: int, resident: int) -> int:
    """:func:`_make_cycle`, the process's resident memory then ``resident`` bytes (as the test
    reports it)."""
    _RESIDENT[0] = resident
    return _make_cycle(n)


def test_a_finished_runs_cycles_are_collected_before_the_next_one_starts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep run in this process collects its tasks' garbage as they end: a pool refers to
    its view and back, so without a collection every finished run's records stayed in memory
    until the collector ran (a sweep over a trace of millions of objects grew by ~0.9 GB a run).
    A full collection costs ~0.2 s where torch is imported, so it runs once the tasks since the
    last one took 1 / GC_SHARE times that, or the process's resident memory grew by GC_GROWTH:
    after each long or large run, every few short ones."""
    import gc

    tasks = [(_make_cycle, (1 << 20,), {}, "a"), (_make_cycle, (1 << 20,), {}, "b")]
    gc.disable()  # (only the sweep's own collection may free them)
    try:
        # tasks long beside a collection (here: a share that lets collections take any time)
        monkeypatch.setattr(evaluation, "GC_SHARE", 1e12)
        _CYCLES.clear()
        for i, _ in evaluation.in_workers(tasks, [0, 1], 1):
            assert _CYCLES[i]() is None, i  # collected before the caller sees the result
        # short tasks: the first collected (none before it), the second's cycle waits
        monkeypatch.setattr(evaluation, "GC_SHARE", 0.05)
        monkeypatch.setattr(evaluation, "_GC", [0.0, -math.inf, 0.0])
        _CYCLES.clear()
        alive = [_CYCLES[i]() is not None for i, _ in evaluation.in_workers(tasks, [0, 1], 1)]
        assert alive == [False, True] and evaluation._GC[0] > 0
        # ... unless the process's resident memory grew by GC_GROWTH since the last collection
        from cachegym.policies import footprint

        grow = evaluation.GC_GROWTH
        monkeypatch.setattr(footprint, "rss_bytes", lambda: _RESIDENT[0])
        monkeypatch.setattr(evaluation, "_GC", [0.0, -math.inf, 0.0])
        _CYCLES.clear()
        grown = [(_make_cycle_at, (1 << 20, rss), {}, str(rss)) for rss in (0, grow, grow + 1, 2 * grow)]
        alive = [_CYCLES[i]() is not None for i, _ in evaluation.in_workers(grown, [0, 1, 2, 3], 1)]
        assert alive == [False, False, True, False]
    finally:
        gc.enable()


def test_without_a_bar_a_long_sweep_says_it_is_running(
        trace_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Without a progress bar (a log file, CI) a sweep logged a line per finished task only: a
    5M-request learned run printed nothing for 327 s. The rows replayed are logged every
    HEARTBEAT_S seconds (0 here: at each report), never where a bar shows them."""
    sweep = [f"trace.path={trace_file}", "eval.capacities=[0.05]", "eval.policies=[lru,fifo]",
             "eval.plots=false", "eval.bounds=[]", "eval.decision_timing=false"]
    for progress, jobs in ((False, 1), (False, 2), (True, 1)):
        caplog.clear()
        monkeypatch.setattr(evaluation, "HEARTBEAT_S", 0.0)
        with caplog.at_level(logging.INFO, logger="cachegym.envs.evaluation"):
            evaluate(_compose([*sweep, f"eval.progress={str(progress).lower()}",
                               f"eval.jobs={jobs}", f"out_dir={tmp_path / str(jobs)}"]))
        said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("still running")]
        assert bool(said) != progress, (progress, jobs, said)
        assert progress or any(f"of {2 * REQUESTS:,} trace rows" in m for m in said)


@pytest.mark.parametrize("multirun", [False, True])
def test_an_interrupt_says_how_to_resume_in_a_run_and_in_a_sweep(
        multirun: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """In a multirun job the advice named the job's folder as out_dir, which the -m command
    nests job_N under again, so nothing resumed (a helper's audit)."""
    calls = [0]
    real = evaluation.run_one

    def stop_at_the_second(*a: Any, **k: Any) -> Any:
        calls[0] += 1
        if calls[0] == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(evaluation, "run_one", stop_at_the_second)
    monkeypatch.setattr(evaluation, "in_multirun", lambda: multirun)
    cfg = _compose(["trace.params.n_requests=2000", "eval.policies=[lru,fifo]",
                    "eval.capacities=[0.1]", "eval.bounds=[]", "eval.progress=false",
                    "eval.jobs=1", f"out_dir={tmp_path / 'o'}"])
    with caplog.at_level(logging.WARNING), pytest.raises(KeyboardInterrupt):
        evaluate(cfg)
    text = caplog.text
    if multirun:
        assert "run the same -m command with eval.resume=true" in text and "out_dir=" not in text
    else:
        assert f"eval.resume=true out_dir={tmp_path / 'o'}" in text
