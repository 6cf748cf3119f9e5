"""envs.sweep: the merged table of a multirun (means and 95% Student-t intervals over jobs, on
hand-made results.csv files with known figures) and the results-directory rule."""

from __future__ import annotations

import csv
import logging
import math
import os
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from cachegym.allocator.errors import ConfigError
from cachegym.envs.sweep import (
    format_merged,
    job_results_dir,
    merge_sweep,
    merge_tables,
    read_results,
    results_dir,
    setting_of,
    write_config,
)

# t(0.975) quantiles: 2 degrees of freedom (3 jobs), 1 degree (2 jobs)
T2, T1 = 4.302652729911275, 12.706204736174698


def _write(path: Path, rows: list[dict[str, object]]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return str(path)


def _row(policy: str, traffic: object, miss: object, gap: object = "", *, cap: int = 1000,
         spec: str = "0.1") -> dict[str, object]:
    return {"trace": "zipf", "capacity": cap, "mode": "bytes", "policy": policy, "prefetch": "none",
            "preset": "none", "hits": 7, "traffic_bytes": traffic, "stall_ns": 0, "miss_ratio": miss,
            "byte_miss_ratio": miss, "gap_closed_traffic": gap, "row_kind": "policy",
            "capacity_spec": spec}


def _by_policy(rows: list[dict[str, object]]) -> dict[object, dict[str, object]]:
    return {r["policy"]: r for r in rows}


def test_means_and_student_t_intervals_over_three_jobs(tmp_path: Path) -> None:
    # lru's traffic over the jobs: 10, 20, 30 (mean 20, sd 10); the capacity in bytes differs by
    # job (each seed's trace has its own working set), the capacity as given does not
    jobs = {f"job {i}": _write(tmp_path / str(i) / "results.csv",
                               [_row("lru", 10 * (i + 1), 0.5, cap=1000 + i),
                                _row("fifo", 100, [0.2, 0.4, ""][i], gap=[0.5, "", ""][i])])
            for i in range(3)}
    done = merge_sweep(jobs, str(tmp_path / "merged.csv"))
    assert done.missing == {} and len(done.merged) == 3
    rows = _by_policy(done.rows)
    assert set(rows) == {"lru", "fifo"}
    lru, fifo = rows["lru"], rows["fifo"]
    assert lru["n_jobs"] == 3 and lru["capacity"] == "0.1"
    half = T2 * 10 / math.sqrt(3)
    assert lru["traffic_bytes_mean"] == pytest.approx(20)
    assert lru["traffic_bytes_ci95_lo"] == pytest.approx(20 - half)
    assert lru["traffic_bytes_ci95_hi"] == pytest.approx(20 + half)
    # a constant: a zero-width interval
    assert lru["miss_ratio_ci95_lo"] == lru["miss_ratio_ci95_hi"] == pytest.approx(0.5)
    # NaN-safe: fifo's miss ratio is blank in one job: two values, 1 degree of freedom
    sd = math.sqrt(0.02)
    assert fifo["miss_ratio_mean"] == pytest.approx(0.3)
    assert fifo["miss_ratio_ci95_hi"] == pytest.approx(0.3 + T1 * sd / math.sqrt(2))
    # one value: a mean, an empty interval
    assert fifo["gap_closed_traffic_mean"] == pytest.approx(0.5)
    assert math.isnan(fifo["gap_closed_traffic_ci95_lo"]) and math.isnan(fifo["gap_closed_traffic_ci95_hi"])
    assert "hits_mean" not in lru  # counts are not among the merged metrics
    # the file: the same figures, NaN as blank
    back = {r["policy"]: r for r in read_results(str(tmp_path / "merged.csv"))}
    assert float(back["lru"]["traffic_bytes_ci95_hi"]) == pytest.approx(20 + half)
    assert back["fifo"]["gap_closed_traffic_ci95_lo"] == "" and back["lru"]["n_jobs"] == "3"
    table = format_merged(done.rows)
    assert "lru" in table and "20 ± " in table and "n_jobs" in table


def test_a_single_job_gives_means_and_empty_intervals() -> None:
    rows = merge_tables({"job 0": [_row("lru", 10, 0.5)]})
    assert rows[0]["n_jobs"] == 1 and rows[0]["traffic_bytes_mean"] == 10
    assert math.isnan(rows[0]["traffic_bytes_ci95_lo"])


def test_rows_of_one_key_in_one_job_are_one_sample() -> None:
    rows = merge_tables({"a": [_row("lru", 10, 0.5), _row("lru", 30, 0.5)], "b": [_row("lru", 40, 0.5)]})
    assert rows[0]["n_jobs"] == 2 and rows[0]["traffic_bytes_mean"] == pytest.approx(30)


def test_jobs_of_different_settings_are_not_samples_of_one_row() -> None:
    # a sweep over eval.mode (or trace.path) averaged bytes with objects into one row
    jobs = {"job 0": [_row("lru", 10, 0.5)], "job 1": [_row("lru", 20, 0.5)],
            "job 2": [_row("lru", 3_000_000, 0.5)]}
    settings = {"job 0": setting_of(["t=a", "eval.mode=objects", "seed=0"]),
                "job 1": setting_of(["t=a", "eval.mode=objects", "seed=1"]),
                "job 2": setting_of(["t=a", "eval.mode=bytes", "trace.seed=0"])}
    assert settings["job 0"] == settings["job 1"] == ("t=a", "eval.mode=objects")
    rows = {r["setting"]: r for r in merge_tables(jobs, settings)}
    assert rows["eval.mode=objects"]["n_jobs"] == 2
    assert rows["eval.mode=objects"]["traffic_bytes_mean"] == pytest.approx(15)
    assert rows["eval.mode=bytes"]["n_jobs"] == 1
    assert "setting" in format_merged(list(rows.values()))
    # one setting (a seed sweep): no setting column
    assert "setting" not in merge_tables(jobs, {"job 0": ("a",), "job 1": ("a",), "job 2": ("a",)})[0]
    # the bytes job failed (no table): the rows left still say their setting
    only = merge_tables({k: v for k, v in jobs.items() if k != "job 2"}, settings)
    assert [r["setting"] for r in only] == ["eval.mode=objects"] and only[0]["n_jobs"] == 2


def test_jobs_without_results_are_named_and_the_rest_merged(tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    ok = _write(tmp_path / "0" / "results.csv", [_row("lru", 10, 0.5)])
    old = _write(tmp_path / "2" / "results.csv", [_row("lru", 99, 0.9)])
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    jobs = {"job 0: seed=0": ok, "job 1: seed=1": str(tmp_path / "1" / "results.csv"),
            "job 2: seed=2": old}
    with caplog.at_level(logging.WARNING):
        done = merge_sweep(jobs, str(tmp_path / "merged.csv"), since=time.time() - 60)
    assert done.merged == ["job 0: seed=0"] and set(done.missing) == {"job 1: seed=1", "job 2: seed=2"}
    assert "earlier run" in done.missing["job 2: seed=2"]
    assert "job 1: seed=1" in caplog.text and "job 2: seed=2" in caplog.text
    assert done.rows[0]["traffic_bytes_mean"] == 10
    none = merge_sweep({"job 1": str(tmp_path / "nothing.csv")}, str(tmp_path / "m2.csv"))
    assert none.path is None and not (tmp_path / "m2.csv").exists()


def test_results_dir_rule_and_config_snapshot(tmp_path: Path) -> None:
    assert job_results_dir(None, 3, "/h/3") == "/h/3"
    assert job_results_dir(str(tmp_path), 3, "/h/3") == str(tmp_path / "job_3")
    assert job_results_dir(str(tmp_path), None, "/h") == str(tmp_path)
    cfg = OmegaConf.create({"out_dir": str(tmp_path / "o"), "seed": 4, "x": "${seed}"})
    out = results_dir(cfg, "evaluate")  # (outside Hydra: out_dir as given)
    assert out == str(tmp_path / "o") and os.path.isdir(out)
    snap = OmegaConf.load(write_config(cfg, out))
    assert snap.x == 4  # resolved
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigError, match="is a file"):
        results_dir(OmegaConf.create({"out_dir": str(tmp_path / "f")}), "evaluate")


def test_runs_started_in_the_same_second_get_their_own_folders(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Two ``cachegym sim`` runs without ``--out`` 0.3 s apart shared one folder: the second set
    the first's files aside, and the first's printed results.csv held the second's rows."""
    import time

    from cachegym.envs.sweep import new_run_dir

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(time, "strftime", lambda fmt, *a: "2026-12-05_22-00-00")
    made = [new_run_dir("sim") for _ in range(3)]
    assert made == [f"outputs/sim/2026-12-05_22-00-00{s}" for s in ("", "_2", "_3")]
    assert all((tmp_path / m).is_dir() for m in made)


def test_set_aside_moves_all_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An earlier run's files that cannot all be moved to previous/ stay where they were (a
    read-only runs.jsonl split the earlier run between out_dir and previous/, with a traceback);
    the error is an OutputError naming the folder."""
    from cachegym.allocator.errors import OutputError
    from cachegym.envs.sweep import set_aside

    names = ["results.csv", "runs.jsonl", "config.yaml"]
    for n in names:
        (tmp_path / n).write_text(n)
    real = os.replace

    def refuse(src: str, dst: str) -> None:
        if os.path.basename(src) == "runs.jsonl" and "previous" in dst:
            raise PermissionError(1, "Operation not permitted", src)
        real(src, dst)

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OutputError, match=r"earlier run's results.csv, runs.jsonl, config.yaml.*"
                                          r"Operation not permitted.*nothing was moved"):
        set_aside(str(tmp_path), names)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names + ["previous"])
    assert [p.name for p in (tmp_path / "previous").iterdir()] == []
    assert all((tmp_path / n).read_text() == n for n in names)
    monkeypatch.setattr(os, "replace", real)
    (tmp_path / "previous").rmdir()
    (tmp_path / "previous").write_text("not a folder")
    with pytest.raises(OutputError, match="nothing was moved"):
        set_aside(str(tmp_path), names)
    assert all((tmp_path / n).read_text() == n for n in names)
    (tmp_path / "previous").unlink()
    dest = set_aside(str(tmp_path), names)
    assert dest is not None and sorted(os.listdir(dest)) == sorted(names)


@pytest.mark.parametrize("subdir", [".hydra", None, "meta/h"])
def test_set_aside_keeps_the_earlier_runs_hydra_config(tmp_path: Path, subdir: str | None) -> None:
    """Hydra writes a run's .hydra/ over the earlier run's before the run starts: what
    KeepEarlierHydra kept of it goes to previous/ with the earlier run's results; a run that
    writes none (hydra.output_subdir=null) moves the earlier one there too (it described the
    results set aside, not this run's); a run refused before that puts it back."""
    from omegaconf import OmegaConf

    from cachegym.envs import sweep

    name = subdir or ".hydra"
    (tmp_path / name).mkdir(parents=True)
    (tmp_path / name / "config.yaml").write_text("earlier: 1\n")
    (tmp_path / "results.csv").write_text("a\n1\n")
    cfg = OmegaConf.create({"hydra": {"run": {"dir": str(tmp_path)}, "output_subdir": subdir}})
    sweep.KeepEarlierHydra().on_run_start(cfg)
    if subdir is not None:  # (as Hydra does)
        (tmp_path / name / "config.yaml").write_text("this run: 2\n")
        (tmp_path / name / "hydra.yaml").write_text("this run\n")
    if name != ".hydra":  # outside a Hydra job set_aside looks for .hydra: tell it this one
        import unittest.mock as mock

        with mock.patch.object(sweep, "_hydra_sub", lambda config=None: (name, True)):
            dest = sweep.set_aside(str(tmp_path), ["results.csv"])
    else:
        dest = sweep.set_aside(str(tmp_path), ["results.csv"])
    assert dest is not None and sorted(os.listdir(dest)) == sorted(["results.csv", name.split("/")[0]])
    assert os.listdir(os.path.join(dest, name)) == ["config.yaml"]
    assert Path(dest, name, "config.yaml").read_text() == "earlier: 1\n"
    assert not (tmp_path / (name + ".earlier")).exists()
    if subdir is None:
        assert not (tmp_path / name).exists()
    else:
        assert (tmp_path / name / "config.yaml").read_text() == "this run: 2\n"
    sweep.KeepEarlierHydra().on_run_end(cfg)
    assert not (tmp_path / (name + ".earlier")).exists()


def test_a_refused_run_puts_the_earlier_hydra_config_back_and_a_finished_one_keeps_its_own(
        tmp_path: Path) -> None:
    """A single run refused before it set the earlier results aside: the earlier Hydra config
    back in place; one that finished without setting anything aside (a resumed sweep): its own
    stays."""
    from omegaconf import OmegaConf

    from cachegym.envs import sweep

    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text("earlier: 1\n")
    cfg = OmegaConf.create({"hydra": {"run": {"dir": str(tmp_path)}, "output_subdir": ".hydra"}})
    sweep.KeepEarlierHydra().on_run_start(cfg)
    (tmp_path / ".hydra" / "config.yaml").write_text("this run: 2\n")
    (tmp_path / ".hydra" / "overrides.yaml").write_text("[]\n")
    sweep._settle_earlier_hydra(str(tmp_path), ".hydra", True, "restore")  # (job_failed's)
    assert sorted(os.listdir(tmp_path)) == [".hydra"]
    assert os.listdir(tmp_path / ".hydra") == ["config.yaml"]
    assert (tmp_path / ".hydra" / "config.yaml").read_text() == "earlier: 1\n"
    sweep.KeepEarlierHydra().on_run_start(cfg)
    (tmp_path / ".hydra" / "config.yaml").write_text("this run: 2\n")
    sweep.KeepEarlierHydra().on_run_end(cfg)  # (finished, nothing set aside: a resumed sweep)
    assert sorted(os.listdir(tmp_path)) == [".hydra"]
    assert (tmp_path / ".hydra" / "config.yaml").read_text() == "this run: 2\n"
