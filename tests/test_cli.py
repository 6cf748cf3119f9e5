"""The ``cachegym`` command (cachegym/cli.py): every subcommand reaches its script, ``sim`` runs
the evaluator from a one-liner, from any working directory, with human-readable sizes."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cachegym import cli

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "tests" / "golden" / "policy.npz"


def _rows(out: Path) -> list[dict[str, str]]:
    with open(out / "results.csv") as f:
        return list(csv.DictReader(f))


def test_help_lists_every_command_and_an_unknown_one_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    text = capsys.readouterr().out
    for name in ("sim", "evaluate", "train", "export", "record", "stats", "parity", "check", "bench"):
        assert f"  {name} " in text
    assert cli.main(["simulate"]) == 2
    assert "unknown command 'simulate'" in capsys.readouterr().err
    assert cli.main([]) == 2


def test_python_dash_m_cachegym_is_the_command(tmp_path: Path) -> None:
    """``python -m cachegym`` runs the same command as the console script (where a virtual
    environment's bin/ is not on PATH), from any directory."""
    r = subprocess.run([sys.executable, "-m", "cachegym", "--help"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "usage: cachegym COMMAND" in r.stdout, r.stderr[-2000:]
    r = subprocess.run([sys.executable, "-m", "cachegym", "simulate"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "unknown command 'simulate'" in r.stderr


@pytest.mark.parametrize("cmd", ["export", "record", "stats", "parity", "check", "bench"])
def test_argparse_commands_reach_their_script(cmd: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main([cmd, "--help"])
    assert e.value.code == 0
    assert f"usage: cachegym {cmd} " in capsys.readouterr().out  # named as the user typed it
    assert sys.argv[0] != f"cachegym {cmd}"  # (restored)


@pytest.mark.parametrize("cmd", ["stats", "parity"])
def test_stats_and_parity_read_a_bundled_trace_from_another_directory(
        cmd: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """As ``sim`` does (their ``--help`` examples name ``data/traces/gpt.npz``)."""
    monkeypatch.chdir(tmp_path)
    extra = ["--out", str(tmp_path / "stats")] if cmd == "stats" else ["--capacities", "10%",
                                                                        "--policies", "lru"]
    assert cli.main([cmd, "data/traces/gpt.npz", *extra]) == 0
    assert "requests" in capsys.readouterr().out


def test_sim_one_liner_from_another_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A bundled trace named as the configs name it, read from an unrelated directory; sizes
    and percentages; registry policies and an exported policy file side by side."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "sim"
    assert cli.main(["sim", "data/traces/gpt.npz", "npz", f"lru,s3fifo,learned:{POLICY}",
                     "1MiB,25%", "--out", str(out), "--bounds", "none"]) == 0
    printed = capsys.readouterr().out
    assert "learned[shadow]" in printed and "s3fifo" in printed and f"results: {out}" in printed
    rows = [r for r in _rows(out) if r["row_kind"] == "policy"]
    assert {r["policy"] for r in rows} == {"lru", "s3fifo", "learned[shadow]"}
    caps = {r["capacity_spec"]: int(r["capacity"]) for r in rows}  # (as written: as evaluate's)
    assert caps["1MiB"] == 1 << 20 and 0 < caps["25%"] < 1 << 30
    assert (out / "config.yaml").is_file()


def test_sim_reads_csv_columns_given_as_libcachesim_trace_params(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``-t`` names the id and size columns of a csv (twemcache-like: time, key, key size, value
    size, ...): the policies then hit; without it every request is to a new object."""
    monkeypatch.chdir(tmp_path)
    keys = np.random.default_rng(1).zipf(1.3, 3000) % 97  # skewed: LRU hits
    (tmp_path / "tw.csv").write_text("".join(f"{i},key{k},20,{(k % 5 + 1) * 64},get\n"
                                             for i, k in enumerate(keys)))
    assert cli.main(["sim", "tw.csv", "csv", "lru", "50%", "--out", "a", "-t",
                     "time-col=1,obj-id-col=2,obj-size-col=4,obj-id-is-num=false"]) == 0
    rows = [r for r in _rows(tmp_path / "a") if r["row_kind"] == "policy"]
    assert float(rows[0]["miss_ratio"]) < 0.9 and int(rows[0]["requests"]) == 3000
    assert cli.main(["sim", "tw.csv", "csv", "lru", "50%", "--out", "b"]) == 0
    assert float(_rows(tmp_path / "b")[0]["miss_ratio"]) == 1.0
    capsys.readouterr()
    assert cli.main(["sim", "tw.csv", "csv", "lru", "50%", "--out", "c", "-t", "obj-col=2"]) == 2
    assert "NAME one of time-col, obj-id-col" in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["data/traces/gpt.npz", "npz", "lru", "1 lots"], "'1 lots' is not a size"),
    (["data/traces/gpt.npz", "npz", "lru", "150%"], "not a percentage in (0%, 100%]"),
    (["data/traces/gpt.npz", "npz", "nosuch", "1MiB"], "unknown value 'nosuch'"),
    (["data/traces/gpt.npz", "npz", "LRU", "1MiB"], "unknown value 'LRU' (did you mean 'lru'? names are lower case)"),
    (["data/traces/gpt.npz", "npz", "s3fif", "1MiB"], "unknown value 's3fif' (did you mean 's3fifo'?)"),
    (["nope.bin", "npz", "lru", "1MiB"], "no such file 'nope.bin'"),
    (["data/traces/gpt.npz", "npz", "lru", "1MiB", "--preset", "v100"], "v100"),
    (["data/traces/gpt.npz", "xml", "lru", "1MiB"], "expected one of [npz, oracleGeneral, lcs, vscsi, csv, txt]"),
    # the evaluator's errors name the argument the user typed, not the config key it filled
    (["nope.bin", "npz", "lru", "1MiB"], "error: TRACE: no such file"),
    (["data/traces/gpt.npz", "npz", "lru,learned:nope.npz", "1MiB"], "error: POLICIES: learned policy file"),
    (["data/traces/gpt.npz", "npz", "lru", "1MiB", "--prefetch", "nosuch"], "error: --prefetch: unknown value"),
    (["data/traces/gpt.npz", "npz", "lru", "1MiB", "--guard", "nosuch"], "error: --guard: unknown guard"),
    (["data/traces/gpt.npz", "npz", "lru", "1MiB", "-j", "-1"], "error: --jobs: -1 is not allowed"),
    (["data/traces/gpt.npz", "npz", "lru", "1MiB", "--clean-ahead", "2", "--preset", "h100_pcie5"],
     "error: --clean-ahead must be a share of the capacity in [0, 1)"),
    (["data/traces/gpt.npz", "npz", "lru", "1MiB", "--clean-ahead", "-0.5"],
     "error: --clean-ahead must be a share of the capacity in [0, 1)"),
    (["data/traces/gpt.npz", "npz", "lru", "1MiB", "--clean-ahead", "0.25"],
     "error: --clean-ahead cleans ahead under a timing preset, and --preset has none"),
    (["data/traces/gpt.npz", "npz", "lru", "1e30"], "is more than 2**60 bytes"),
    (["data/traces/gpt.npz", "npz", "lru", "1GiB", "--mode", "objects"],
     "'1GiB' is a size in bytes, but in objects mode capacities count objects"),
    # and its advice as sim takes it, not in the config's spelling
    (["data/traces/gpt.npz", "npz", "s3fio", "1MiB"], "(exported policy files: learned:PATH)"),
    (["data/traces/gpt.npz", "npz", "learned", "1MiB"], "give learned:PATH (and --guard for its guard)"),
    (["data/traces/gpt.npz", "npz", "lru", "1MiB", "--bounds", "fooo"], "the fastest), or none"),
    (["data/traces/gpt.npz", "npz", "lru", "1MiB", "--prefetch", "lookahed"],
     "history, learned:PATH (a policy file with a prefetch head) or FILE.py:Class"),
])
def test_sim_bad_input_is_one_line(argv: list[str], message: str, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["sim", *argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o").exists()  # a refused sim leaves no empty results folder


def test_sim_takes_a_decimal_capacity_as_a_share_as_its_help_says(tmp_path: Path) -> None:
    """``0.1`` is 10% of the working set, as the evaluator's ``eval.capacities=[0.1]`` (it was
    read as 0.1 bytes); ``1.0`` is all of it."""
    for cap in ("0.1", "10%", ".1", "1.0", "100%"):
        assert cli.main(["sim", "data/traces/gpt.npz", "npz", "lru", cap, "--bounds", "none",
                         "--out", str(tmp_path / cap)]) == 0
    got = {cap: _rows(tmp_path / cap)[0]["capacity"] for cap in ("0.1", "10%", ".1", "1.0", "100%")}
    assert got["0.1"] == got["10%"] == got[".1"] and got["1.0"] == got["100%"] != got["0.1"]


def test_sim_runs_a_repeated_capacity_or_prefetcher_once(tmp_path: Path) -> None:
    """``10%,10%`` and ``--prefetch lookahead,lookahead`` gave each row twice."""
    assert cli.main(["sim", "data/traces/gpt.npz", "npz", "lru,lru", "10%,10%", "--bounds", "none",
                     "--prefetch", "lookahead,lookahead", "--out", str(tmp_path)]) == 0
    rows = _rows(tmp_path)
    assert len(rows) == 1 and rows[0]["prefetch"] == "lookahead"


def test_sim_takes_a_format_in_any_case_as_read_trace_does(tmp_path: Path) -> None:
    for fmt in ("NPZ", "Npz", "npz"):
        assert cli.main(["sim", "data/traces/gpt.npz", fmt, "lru", "10%", "--bounds", "none",
                         "--out", str(tmp_path / fmt)]) == 0
    assert {_rows(tmp_path / f)[0]["misses"] for f in ("NPZ", "Npz", "npz")} == {
        _rows(tmp_path / "npz")[0]["misses"]}


def test_evaluate_passes_hydra_overrides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ev"
    assert cli.main(["evaluate", "trace.params.n_requests=2000", "trace.params.n_objects=300",
                     "eval.capacities=[64KiB,10%]", "eval.policies=[lru,fifo]", "eval.bounds=[]",
                     "eval.plots=false", "eval.progress=false", f"out_dir={out}",
                     f"hydra.run.dir={tmp_path / 'hydra'}"]) == 0
    rows = [r for r in _rows(out) if r["row_kind"] == "policy"]
    assert {(r["policy"], r["capacity_spec"]) for r in rows} == {
        (p, c) for p in ("lru", "fifo") for c in ("64KiB", "10%")}
    assert "results:" in capsys.readouterr().out


def test_the_console_script_runs_from_any_directory(tmp_path: Path) -> None:
    """The installed ``cachegym`` entry point (pip install -e .), run where nothing of the
    project is: the environment registry and the bundled traces are found."""
    exe = shutil.which("cachegym", path=os.path.dirname(sys.executable))
    if exe is None:
        pytest.skip("the cachegym console script is not installed beside this interpreter "
                    "(pip install -e . installs it)")
    r = subprocess.run([exe, "sim", "data/traces/resnet.npz", "auto", "lru,gdsf", "5%"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "gdsf" in r.stdout and (tmp_path / "outputs" / "sim").is_dir()
    for code in ("import cachegym, gymnasium as gym; gym.make('cachegym/Evict-v0'); print('ok')",
                 # without importing cachegym: Gymnasium imports the module before the id
                 "import gymnasium as gym; gym.make('cachegym:cachegym/Evict-v0'); print('ok')"):
        r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


@pytest.mark.parametrize("cap", ["-5%", "-1GiB", "-0.1"])
def test_sim_negative_capacity_is_named(cap: str, capsys: pytest.CaptureFixture[str]) -> None:
    """argparse takes '-5%' for an unknown option and would report a missing argument: the
    error names the capacity instead."""
    with pytest.raises(SystemExit) as e:
        cli.main(["sim", "data/traces/gpt.npz", "npz", "lru", cap])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"capacities: {cap!r} is negative" in err and "required" not in err


@pytest.mark.parametrize("cmd, override, key", [
    ("evaluate", "eval.capacities=0.25", "eval.capacities"),
    ("evaluate", "+eval.policies=lru", "eval.policies"),
    ("train", "capacities=0.1", "capacities"),
    ("demo", "main.held_out=gpt.npz", "main.held_out"),
])
def test_one_value_for_a_list_key_is_refused_with_the_list_to_write(
        cmd: str, override: str, key: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Hydra's own message says a float is not a list; the command says how to write one,
    before anything runs (exit status 2)."""
    with pytest.raises(SystemExit) as e:
        cli.main([cmd, override])
    assert e.value.code == 2
    value = override.split("=", 1)[1]
    assert f"{key} takes a list; write '{key}=[{value}]'" in capsys.readouterr().err


def test_one_value_for_a_list_of_traces_is_refused_with_a_trace_to_write(
        capsys: pytest.CaptureFixture[str]) -> None:
    """traces=abc was told to write traces=[abc], which Hydra then refused (a list of trace
    configs: 'str is not a subclass of TraceConfig'; a helper's audit)."""
    with pytest.raises(SystemExit) as e:
        cli.main(["train", "traces=abc"])
    assert e.value.code == 2
    assert "traces takes a list of traces; write 'traces=[{path: abc}]'" in capsys.readouterr().err


def test_lists_interpolations_and_sweeps_pass_the_list_check() -> None:
    from cachegym.envs.config import EvaluateConfig, check_list_overrides, list_keys
    from cachegym.policies.training.config import TrainConfig

    assert {"eval.capacities", "eval.policies", "eval.prefetchers", "trace.paths"} <= list_keys(EvaluateConfig)
    assert {"capacities", "main.capacities", "policy.hidden", "validation.capacities"} <= list_keys(TrainConfig)
    assert "eval.mode" not in list_keys(EvaluateConfig) and "seed" not in list_keys(TrainConfig)
    for ok in (["eval.capacities=[0.25]"], ["eval.capacities=${x}"],
               ["-m", "eval.capacities=[0.1],[0.2]"], ["eval.mode=objects"],
               # a config group's option names a typed section: Hydra reads it (the type check
               # of values refused them for a while: "str is not a subclass of AllocatorConfig")
               ["allocator=arena"], ["trace=zipf"], ["trace=file", "trace.path=x.npz"],
               ["seed=3", "eval.jobs=2", "out_dir=o", "trace.path=null"]):
        check_list_overrides(ok, EvaluateConfig, "t")  # (returns: nothing refused)
    for ok in (["policy=small"], ["allocator=bytes"], ["env=joint", "env.K=8"],
               ["agent=ppo", "agent.total_timesteps=64"], ["experiment=quick"],
               ["validation.max_requests=null"]):
        check_list_overrides(ok, TrainConfig, "t")


@pytest.mark.parametrize("cmd, override, want", [
    ("evaluate", "eval.capacites=[0.1]", "eval.capacites: unknown key; did you mean eval.capacities?"),
    ("evaluate", "allocator.clean_ahed=0.1", "did you mean allocator.clean_ahead?"),
    ("train", "validation.capacites=[0.1]", "did you mean validation.capacities?"),
    # a top-level key: Hydra's advice was to add it with +, which cachegym then refused
    ("evaluate", "capacity=abc", "capacity: unknown key; did you mean eval.capacity_of or "
                                 "eval.capacities?"),
    ("evaluate", "+capacity=5", "capacity: unknown key"),
    ("train", "progres=false", "progres: unknown key; did you mean progress?"),
    # a timing preset: each command reads it from its own key (train was sent to main.presets,
    # which only the main job reads, and trained without a preset)
    ("train", "preset=h100_pcie5", "preset: unknown key; did you mean env.cost?"),
    ("evaluate", "preset=h100_pcie5", "preset: unknown key; did you mean eval.presets?"),
    ("demo", "preset=h100_pcie5", "preset: unknown key; did you mean main.presets?"),
    # --help lists the guard group as any group of conf/; Hydra then said "No match in the
    # defaults list"
    ("train", "policy/guard=trial", "the guard is chosen where a learned policy is evaluated"),
])
def test_a_misspelt_key_of_a_typed_section_is_named_before_hydra(
        cmd: str, override: str, want: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Hydra refuses it too, but suggests adding it with ``+``, where nothing would read it."""
    with pytest.raises(SystemExit) as e:
        cli.main([cmd, override])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert want in err and "HYDRA_FULL_ERROR" not in err


@pytest.mark.parametrize("override, want", [
    # a sweep's keys too (Hydra's advice to add it with + made every job fail), and a list key
    # swept as scalars (Hydra: "float is not a ListConfig")
    ("eval.nokey=1,2", "eval.nokey: unknown key; the keys of eval:"),
    ("eval.capacities=0.05,0.1", "to sweep lists, give each in brackets: "
                                 "'eval.capacities=[0.05],[0.1]'"),
])
def test_a_sweeps_keys_are_checked_before_hydra(override: str, want: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["evaluate", "-m", override])
    assert e.value.code == 2 and want in capsys.readouterr().err


@pytest.mark.parametrize("cmd, override, want", [
    ("evaluate", "seed=abc", "seed=abc: Value 'abc' of type 'str' could not be converted to "
                             "Integer (the key seed takes an int)"),
    ("evaluate", "eval.mode=bogus", "expected one of [bytes, objects] (the key eval.mode takes "
                                    "one of bytes, objects)"),
    ("evaluate", "eval.capacities=null", "is not Optional (the key eval.capacities takes a list"),
    ("train", "validation.max_requests=abc", "takes an int or null"),
    ("train", "env.K=abc", "env.K=abc: Value 'abc'"),  # (a group's option: conf/env/evict.yaml)
    ("train", "progress=maybe", "takes true or false"),
])
def test_a_value_of_the_wrong_type_is_named_before_hydra(
        cmd: str, override: str, want: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Hydra's message (exit status 1) ended in a pointer to HYDRA_FULL_ERROR; the other bad
    overrides exit 2 with one line."""
    with pytest.raises(SystemExit) as e:
        cli.main([cmd, override])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert want in err and "HYDRA_FULL_ERROR" not in err


def test_keys_below_untyped_sections_are_left_to_hydra() -> None:
    from cachegym.envs.config import EvaluateConfig, unknown_key
    from cachegym.policies.training.config import TrainConfig

    for key in ("trace.params.n_requests", "hydra.run.dir", "seed", "nosuch", "eval.capacities"):
        assert unknown_key(key, EvaluateConfig) is None, key
    for key in ("env.clean_ahead", "agent.total_timesteps", "policy.hidden", "main.joint.env.cost"):
        assert unknown_key(key, TrainConfig) is None, key
    assert "did you mean policy.hidden?" in unknown_key("policy.hiden", TrainConfig)


def test_a_capacity_that_holds_the_peak_live_bytes_is_warned_of(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """25% of a recorded DL trace's working set held its peak live bytes (several times
    smaller): nothing was evicted and every policy showed the same traffic, silently. (And each
    ``sim`` in one process left its log handler behind: every line twice by the second call,
    the first to a stream closed since.)"""
    import logging

    from cachegym.allocator.trace import Op, Trace

    handlers = list(logging.getLogger("cachegym.envs.evaluation").handlers)

    # two steps of four 1 KiB objects, each freed after its step: working set 8 KiB, peak 4 KiB
    keys = [k for s in (0, 4) for k in [s, s + 1, s + 2, s + 3] * 2 + [s, s + 1, s + 2, s + 3]]
    ops = ([Op.WRITE] * 4 + [Op.READ] * 4 + [Op.FREE] * 4) * 2
    path = tmp_path / "steps.npz"
    Trace.from_arrays(keys, [1024] * len(keys), ops).save(path)
    assert cli.main(["sim", str(path), "npz", "lru", "50%,25%", "--bounds", "none"]) == 0
    said = [ln for ln in capsys.readouterr().err.splitlines() if "holds its peak live bytes" in ln]
    assert len(said) == 1 and "capacity 50% (4096)" in said[0] and "--capacity-of peak_live" in said[0]
    assert cli.main(["sim", str(path), "npz", "lru", "50%", "--bounds", "none",
                     "--capacity-of", "peak_live"]) == 0
    assert "peak live" not in capsys.readouterr().err
    assert logging.getLogger("cachegym.envs.evaluation").handlers == handlers


def test_sim_cleans_ahead_of_eviction_under_a_preset(tmp_path: Path) -> None:
    """``--clean-ahead``: on the recorded GPT training trace under ``h100_pcie5``, the same
    misses and evictions with less stall and a few more bytes copied out (the early copies of
    objects written again before their eviction)."""
    rows = {}
    for share in ("0", "0.25"):
        out = tmp_path / share
        assert cli.main(["sim", str(ROOT / "data" / "traces" / "gpt_wide.npz"), "npz", "lru",
                         "25%", "--preset", "h100_pcie5", "--capacity-of", "peak_live",
                         "--bounds", "none", "--clean-ahead", share, "--out", str(out)]) == 0
        rows[share] = next(r for r in _rows(out) if r["row_kind"] == "policy")
    a, b = rows["0"], rows["0.25"]
    assert (a["misses"], a["evictions"], a["bytes_h2d"]) == (b["misses"], b["evictions"], b["bytes_h2d"])
    assert int(b["stall_ns"]) < 0.7 * int(a["stall_ns"])  # (61.6 -> 34.4 ms; the reads stall alike)
    assert int(a["bytes_d2h"]) <= int(b["bytes_d2h"]) <= 1.2 * int(a["bytes_d2h"])


def test_sim_resumes_an_interrupted_sweep_in_its_out_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The evaluator's advice after an interruption (run the same command to resume) is one a
    sim can follow: --resume with the same --out reuses its completed runs."""
    import cachegym.envs.evaluation as evaluation

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:  # (its default --out is a new folder)
        cli.main(["sim", "data/traces/gpt.npz", "npz", "lru", "25%", "--resume"])
    assert e.value.code == 2 and "--resume needs the --out" in capsys.readouterr().err
    argv = ["sim", "data/traces/gpt.npz", "npz", "lru,fifo", "25%", "--out", "o", "--bounds", "none"]
    real = evaluation.run_one
    calls: list[int] = []

    def interrupted(*args, **kwargs):  # the second run is interrupted
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluation, "run_one", interrupted)
    assert cli.main(argv) == 130
    assert "the same command with --resume finishes the sweep" in capsys.readouterr().err
    monkeypatch.setattr(evaluation, "run_one", real)
    assert cli.main([*argv, "--resume"]) == 0
    assert {r["policy"] for r in _rows(tmp_path / "o") if r["row_kind"] == "policy"} == {"lru", "fifo"}


def test_a_refused_hydra_run_leaves_no_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A config refused before any work left outputs/<command>/<time>/ with Hydra's .hydra/ and an
    empty log (the error on stderr only)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep").mkdir()
    for extra in ([], ["out_dir=keep/x"]):
        with pytest.raises(SystemExit) as e:
            cli.main(["evaluate", "trace.path=/nonexistent.npz", *extra])
        assert e.value.code == 2
    assert "no such file" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep"]  # no outputs/evaluate/<time>/
    # a folder the user named is left (it may have been theirs before), with the failure logged
    assert sorted(p.name for p in (tmp_path / "keep" / "x").iterdir()) == [".hydra", "evaluate.log"]


def test_a_refused_run_in_a_folder_of_an_earlier_run_leaves_that_runs_hydra_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hydra writes a run's .hydra/ before the run starts: a run refused in out_dir replaced the
    .hydra/ of the earlier run whose results are there (now put back as it was)."""
    monkeypatch.chdir(tmp_path)
    earlier = tmp_path / "keep" / ".hydra"
    earlier.mkdir(parents=True)
    (earlier / "config.yaml").write_text("earlier: 1\n")
    (earlier / "overrides.yaml").write_text("- seed=3\n")
    for command in ("evaluate", "train"):
        with pytest.raises(SystemExit) as e:
            cli.main([command, "trace.path=/nonexistent.npz", "out_dir=keep"])
        assert e.value.code == 2
        assert sorted(p.name for p in earlier.iterdir()) == ["config.yaml", "overrides.yaml"]
        assert (earlier / "config.yaml").read_text() == "earlier: 1\n"
        assert (earlier / "overrides.yaml").read_text() == "- seed=3\n"


def test_a_sweep_in_the_folder_of_an_earlier_one_keeps_each_jobs_hydra_config(tmp_path: Path) -> None:
    """A multirun's jobs (in the joblib launcher's worker processes) set each earlier job's
    results aside with its Hydra config; a job that fails keeps its own (the merge names it as
    failed) and the earlier one goes to previous/ too."""
    trace = str(ROOT / "data" / "traces" / "gpt_infer.npz")

    def sweep(policies: str) -> int:
        return subprocess.run(
            [sys.executable, "-m", "cachegym", "evaluate", "-m", f"trace.path={trace}", "out_dir=o",
             f"eval.policies={policies}", "eval.capacities=[0.25]", "eval.bounds=[]",
             "eval.presets=[none]", "eval.plots=false"], cwd=tmp_path, capture_output=True,
            text=True, timeout=300).returncode

    def policies_of(hydra: Path) -> str:
        return next(line for line in (hydra / "overrides.yaml").read_text().splitlines()
                    if "eval.policies" in line)

    assert sweep("[lru],[fifo]") == 0
    assert sweep("[sieve],[bogus]") == 1
    job0, job1 = tmp_path / "o" / "job_0", tmp_path / "o" / "job_1"
    assert policies_of(job0 / ".hydra").endswith("[sieve]")
    (prev0,) = (job0 / "previous").iterdir()
    assert policies_of(prev0 / ".hydra").endswith("[lru]") and (prev0 / "results.csv").is_file()
    assert policies_of(job1 / ".hydra").endswith("[bogus]")
    (prev1,) = (job1 / "previous").iterdir()
    assert policies_of(prev1 / ".hydra").endswith("[fifo]")
    assert not [p for p in (tmp_path / "o").rglob("*.earlier")]


def test_a_refused_run_leaves_no_folder_also_after_it_claimed_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run given no out_dir claims Hydra's folder (a file .cachegym_run, envs.sweep); refused
    after that, its folder holds nothing else of its own and goes, as one refused before."""
    from cachegym.envs import sweep

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "outputs" / "evaluate" / "2026-12-06_00-00-00"
    (run / ".hydra").mkdir(parents=True)
    (run / "evaluate.log").write_text("")
    monkeypatch.setattr(sweep, "_CLAIMS", {})
    assert sweep._claimed(str(run)) == str(run) and (run / ".cachegym_run").is_file()
    assert sweep._remove_if_only_hydras(str(run)) and not (tmp_path / "outputs").exists()


def test_a_run_that_fails_after_its_work_began_says_so_in_its_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        cli.main(["train", "experiment=quick", "progress=false", "tensorboard=false",
                  "capacities=[1GiB]", "out_dir=t"])
    assert e.value.code == 2 and "no eviction decision arose" in capsys.readouterr().err
    log = (tmp_path / "t" / "train.log").read_text()
    assert "[ERROR] - failed: no eviction decision arose" in log  # (the console has it once)


@pytest.mark.parametrize("cmd", ["evaluate", "train", "demo"])
def test_an_out_dir_that_cannot_be_made_is_refused_before_hydra_makes_it(
        cmd: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Hydra makes the run directory before the job runs: a file in the way was a raw
    FileExistsError traceback (exit 1)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    for out, why in (("afile", "is a file, not a directory"), ("afile/x", "cannot be made")):
        for sweep in ([], ["-m", "seed=0,1"]):  # (a sweep's: Hydra's 15-line traceback)
            with pytest.raises(SystemExit) as e:
                cli.main([cmd, *sweep, f"out_dir={out}"])
            assert e.value.code == 2 and why in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_an_interrupted_multirun_says_what_it_kept_and_how_to_finish(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # the joblib launcher's Ctrl-C ended in a traceback of joblib's abort, and no advice
    import cachegym.scripts.evaluate as script
    from cachegym import cli
    from cachegym.envs import sweep

    def stopped() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(script, "main", stopped)
    monkeypatch.setattr(sweep, "current_sweep_dir", "/x/sweep")
    assert cli.main(["evaluate", "-m", "eval.policies=[lru],[fifo]"]) == 130
    err = capsys.readouterr().err
    assert "/x/sweep/job_<n>/runs.jsonl" in err
    assert "out_dir=/x/sweep eval.resume=true" in err
    with pytest.raises(KeyboardInterrupt):  # one run: the script's own handling
        cli.main(["evaluate", "eval.policies=[lru]"])


def test_the_slurm_launcher_without_srun_is_refused_in_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli.shutil, "which", lambda name: None)
    assert cli.main(["evaluate", "-m", "hydra/launcher=slurm", "seed=0,1"]) == 2
    assert "no `srun`" in capsys.readouterr().err


def test_the_ray_cluster_launcher_without_a_cluster_is_refused_in_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``address: auto`` where this machine belongs to no Ray cluster: one line saying how to
    start or name one (Ray's ConnectionError came as a traceback through Hydra's); a named
    address is left to the launcher."""
    ray = pytest.importorskip("ray", reason="ray is the cluster extra's (pip install "
                              "'cachegym[cluster]'); the check needs it importable")
    tried: list[object] = []

    def no_cluster(address: str, **kw: object) -> None:
        tried.append(address)
        raise ConnectionError("Could not find any running Ray instance. Please specify one")

    monkeypatch.setattr(ray, "init", no_cluster)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert cli.main(["evaluate", "-m", "hydra/launcher=ray_cluster", "seed=0,1"]) == 2
    err = capsys.readouterr().err
    assert tried == ["auto"] and "ray start --head" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    tried.clear()
    assert cli._no_ray_cluster(["hydra.launcher.ray.init.address=10.0.0.1:6379"]) is None
    assert cli._no_ray_cluster(["++hydra.launcher.ray.init.address=10.0.0.1:6379"]) is None
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert cli._no_ray_cluster([]) is None and tried == []


@pytest.mark.parametrize("argv, says", [
    (["train", "agent=a2c"], "agent=a2c: no such option of the config group 'agent'; the options: dqn, imitation"),
    (["train", "-m", "env=evict,evic"], "env=evic: no such option of the config group 'env'"),
    (["evaluate", "policy/guard=shadw"], "policy/guard=shadw: no such option of the config group 'policy/guard'"),
    (["evaluate", "trace=scan"], "(for the generator 'scan': trace=generated trace.generator=scan"),
])
def test_an_unknown_config_group_option_is_one_line(
        argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Hydra's own message was 15 lines with its search path, listing the schema's base_*
    nodes as options, and exited 1."""
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1 and "base_sb3" not in err


def test_config_group_sweep_functions_are_left_to_hydra() -> None:
    assert cli._unknown_group_option(["agent=choice(ppo,dqn)", "env=${oc.env:X}", "agent=null"]) is None
    assert cli._unknown_group_option(["+experiment=quick", "hydra/launcher=joblib"]) is None
    # a config folder of the user's may add options (agent=imit_dqn in --config-dir DIR)
    for extra in (["--config-dir", "/x"], ["-cd", "/x"], ["--config-dir=/x"],
                  ["hydra.searchpath=[file:///x]"]):
        assert cli._unknown_group_option([*extra, "agent=imit_dqn"]) is None
    assert cli._unknown_group_option(["agent=imit_dqn"]) is not None
    assert cli._unknown_group_option(["agent='ppo'", 'env="evict"']) is None  # (quoted, as Hydra)


@pytest.mark.parametrize("cmd", ["demo", "train", "evaluate"])
def test_a_hydra_commands_help_says_what_it_does(cmd: str) -> None:
    """It began 'main is powered by Hydra.' and described nothing."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "cachegym", cmd, "--help"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith(f"cachegym {cmd}: ")
    assert "powered by Hydra" not in r.stdout


@pytest.mark.parametrize("argv", [["train", "--help"], ["export", "x.zip", "--out", "y.npz"],
                                  ["record", "gpt", "--out", "g.npz"]])
def test_a_command_whose_extra_is_not_installed_says_which_in_one_line(argv: list[str]) -> None:
    """Without the train extra (no torch) these ended in a 20-line ModuleNotFoundError."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None\n"  # (as if it were not installed)
            "from cachegym import cli; sys.exit(cli.main(sys.argv[1:]))")
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == (f"cachegym {argv[0]}: needs torch, of the train extra: pip install -c "
                                "constraints.txt 'cachegym[train]' (in a checkout: make install)")


def test_activation_offload_without_torch_names_the_extra() -> None:
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None\nimport cachegym\n"
            "try:\n    cachegym.ActivationOffload\nexcept ImportError as e:\n    print(e)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "needs PyTorch, of the train extra: pip install -c constraints.txt 'cachegym[train]'" in r.stdout


@pytest.mark.parametrize("args", [["stats", "data/traces/gpt.npz", "--out", "{tmp}"],
                                  ["sim", "data/traces/gpt.npz", "npz", "lru", "10%",
                                   "--bounds", "none", "--out", "{tmp}"]])
def test_output_piped_to_a_reader_that_left_ends_without_a_traceback(args: list[str],
                                                                     tmp_path: Path) -> None:
    """``cachegym stats T | head -1`` printed a BrokenPipeError traceback (a helper's audit;
    ``parity`` too): the reader is gone before the first line here."""
    import subprocess

    cmd = [sys.executable, "-m", "cachegym", *(a.format(tmp=tmp_path) for a in args)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # (no reader: the first write fails with EPIPE)
    err = proc.stderr.read()
    proc.wait(timeout=300)
    assert "Traceback" not in err and proc.returncode in (0, 141), err[-2000:]
