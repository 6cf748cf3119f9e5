"""scripts/evaluate.py: the exact documented command, CSV columns, libCacheSim parity, errors."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.trace import Trace
from cachegym.envs.config import register_configs
from cachegym.envs.evaluation import COLUMNS, evaluate
from cachegym.envs.workloads import write_oracle_general

ROOT = Path(__file__).resolve().parents[2]
CONF = str(ROOT / "conf")
MiB = 1 << 20
POLICIES = "[lru,fifo,lfu,arc,clock,sieve,s3fifo,belady]"


def exact_overrides(path: Path, out: Path) -> list[str]:
    """The command of the issue, override for override."""
    return [f"trace.path={path}", "trace.format=oracleGeneral", "eval.mode=bytes",
            "eval.capacities=[134217728,268435456]", f"eval.policies={POLICIES}", f"out_dir={out}"]


@pytest.fixture(scope="module")
def og_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny oracleGeneral trace: 2500 Zipf requests over 300 objects of ~1 MiB (the working
    set is several times 256 MiB, so both capacities evict)."""
    rng = np.random.default_rng(7)
    n_obj = 300
    ranks = np.minimum(rng.zipf(1.2, 2500) - 1, n_obj - 1)
    sizes = np.clip(rng.lognormal(np.log(MiB), 0.8, n_obj), 4096, 16 * MiB).astype(np.int64)
    keys = rng.permutation(n_obj)[ranks] + 10_000
    t = Trace.from_arrays(keys, sizes[keys - 10_000], step=np.arange(len(keys)))
    p = tmp_path_factory.mktemp("og") / "tiny.oracleGeneral"
    write_oracle_general(t, p)
    return p


def _compose(overrides: list[str]):  # type: ignore[no-untyped-def]
    register_configs()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("evaluate", overrides=overrides)


def _quiet(overrides: list[str]) -> list[str]:
    return [*overrides, "eval.progress=false"]


def test_exact_command_composed(og_file: Path, tmp_path: Path) -> None:
    res = evaluate(_compose(_quiet(exact_overrides(og_file, tmp_path))))
    with open(tmp_path / "results.csv") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        rows = list(reader)
    assert list(header[: len(COLUMNS)]) == list(COLUMNS)
    assert len(rows) == 2 * 8 + 4  # and the default bounds (auto: FOO's foo_l, foo_u) per capacity
    assert {r["policy"] for r in rows} == {*POLICIES.strip("[]").split(","), "foo_l", "foo_u"}
    assert {int(r["capacity"]) for r in rows} == {134217728, 268435456}
    for r in rows:
        assert r["trace"] == "tiny" and r["mode"] == "bytes" and r["preset"] == "none"
        if r["row_kind"] == "policy":
            assert int(r["hits"]) + int(r["misses"]) == int(r["requests"]) == 2500
            assert int(r["traffic_bytes"]) == int(r["bytes_h2d"]) + int(r["bytes_d2h"])
    by = {(r["policy"], int(r["capacity"])): r for r in res["rows"]}
    for cap in (134217728, 268435456):
        lru, bound = by[("lru", cap)], by[("foo_l", cap)]
        assert lru["gap_closed_misses"] == 0.0 and lru["gap_closed_traffic"] == 0.0
        assert lru["gap_bound"] == "foo_l" and math.isnan(lru["gap_closed_stall"])
        assert bound["row_kind"] == "lower_bound" and math.isnan(bound["gap_closed_traffic"])
        for p in POLICIES.strip("[]").split(","):
            r = by[(p, cap)]
            # the bound is below every policy: no gap above 1
            assert r["misses"] >= bound["misses"] and r["traffic_bytes"] >= bound["traffic_bytes"]
            assert r["gap_closed_misses"] <= 1 and r["gap_closed_traffic"] <= 1
            assert r["gap_closed_traffic"] == pytest.approx(
                (lru["traffic_bytes"] - r["traffic_bytes"])
                / (lru["traffic_bytes"] - bound["traffic_bytes"]))
            # every policy's row carries its decision latency (time in victim per eviction)
            assert r["decision_p50_us"] > 0
    with open(tmp_path / "results.json") as f:
        js = json.load(f)
    assert len(js) == 20 and js[0]["decision_p50_us"] > 0
    assert {os.path.basename(p) for p in res["plots"]} == {"metrics__tiny__none__none.png"}
    for p in res["plots"]:
        assert Path(p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "belady" in res["table"] and "gap_traffic" in res["table"]
    # the composed config beside the results (not only in Hydra's run directory)
    snap = (tmp_path / "config.yaml").read_text()
    assert "capacities:" in snap and "134217728" in snap and "bounds:" in snap


def test_bounds_stall_rows_and_a_violation(og_file: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``eval.bounds=[foo,pfoo_l]`` adds foo_l, foo_u and pfoo_l; with a preset, stall_lb and
    the stall reference, and gap_closed_stall; a bound above a policy is refused by name."""
    import cachegym.envs.evaluation
    import cachegym.envs.gaps
    from cachegym.envs.workloads import read_trace
    from cachegym.policies.bounds import BoundViolation

    src, n, rng = read_trace(str(og_file), format="oracleGeneral"), 600, np.random.default_rng(0)
    trace = Trace.from_arrays(src.key[:n], src.size[:n], (rng.random(n) < 0.3).astype(np.uint8),
                              compute_ns=rng.integers(0, 200_000, n), name="t")
    p = tmp_path / "t.npz"
    trace.save(p)
    over = [f"trace.path={p}", "eval.capacities=[0.1]", "eval.policies=[lru,s3fifo,belady]",
            "eval.presets=[none,h100_pcie5]", "eval.bounds=[foo,pfoo_l]", "eval.plots=true",
            f"out_dir={tmp_path / 'o'}"]
    res = evaluate(_compose(_quiet(over)))
    names = [r["policy"] for r in res["rows"]]
    assert {"foo_l", "foo_u", "pfoo_l", "stall_lb"} <= set(names)
    refs = [r for r in res["rows"] if r["row_kind"] == "stall_reference"]
    assert len(refs) == 1 and refs[0]["policy"] in [f"stall_ref[{e}+{p}]" for e, p in
                                                    cachegym.envs.gaps.STALL_REF]
    # the reference keeps its candidate that stalls least: no timed policy with the same
    # oracle prefetcher among its candidates stalls less (here LRU's, Belady's)
    cand = {(r["policy"], r["prefetch"]): r["stall_ns"] for r in res["rows"]
            if r["row_kind"] == "policy" and r["preset"] == "h100_pcie5"}
    assert all(refs[0]["stall_ns"] <= v for k, v in cand.items() if k in cachegym.envs.gaps.STALL_REF)
    by = {(r["policy"], r["preset"]): r for r in res["rows"]}
    assert by[("pfoo_l", "none")]["traffic_bytes"] <= by[("foo_l", "none")]["traffic_bytes"]
    assert by[("foo_l", "none")]["traffic_bytes"] <= by[("foo_u", "none")]["traffic_bytes"]
    timed = by[("s3fifo", "h100_pcie5")]
    assert timed["gap_bound"] == "foo_l+stall_lb" and timed["gap_closed_stall"] <= 1
    ref = refs[0]
    # the reference is the better of its candidates: never above Belady's own stall
    assert by[("stall_lb", "h100_pcie5")]["stall_ns"] <= ref["stall_ns"]
    assert ref["stall_ns"] <= by[("belady", "h100_pcie5")]["stall_ns"]
    assert {os.path.basename(x) for x in res["plots"]} == {
        "metrics__t__none__none.png", "metrics__t__none__h100_pcie5.png"}
    real = cachegym.envs.gaps.bound_rows

    def too_high(*a: object, **k: object) -> list[dict[str, object]]:
        rows = real(*a, **k)  # type: ignore[arg-type]
        for r in rows:
            r["traffic_bytes"] = 10 * float(r["traffic_bytes"])  # type: ignore[arg-type]
        return rows

    monkeypatch.setattr(cachegym.envs.evaluation, "bound_rows", too_high)
    with pytest.raises(BoundViolation, match="below the lower bound"):
        evaluate(_compose(_quiet([*over[:-1], "eval.presets=[none]", f"out_dir={tmp_path / 'v'}"])))


def test_counts_match_libcachesim(og_file: Path, tmp_path: Path) -> None:
    """End-to-end parity: the evaluator's lru/fifo misses equal libCacheSim's process_trace."""
    lcs = pytest.importorskip("libcachesim")
    res = evaluate(_compose(_quiet([*exact_overrides(og_file, tmp_path)[:4],
                                    "eval.policies=[lru,fifo]", f"out_dir={tmp_path}"])))
    for r in res["rows"]:
        if r["policy"] not in ("lru", "fifo"):
            continue
        reader = lcs.TraceReader(str(og_file), lcs.TraceType.ORACLE_GENERAL_TRACE)
        cache = getattr(lcs, r["policy"].upper())(r["capacity"])
        mr, bmr = cache.process_trace(reader)
        assert r["misses"] == round(mr * r["requests"]), r
        assert r["byte_miss_ratio"] == pytest.approx(bmr, rel=1e-9)


def test_any_generator_from_the_command_line(tmp_path: Path) -> None:
    """trace=generated names any generator, with its own defaults (a helper's audit: only zipf,
    storage and dl_training had a config, and trace.params of another generator was refused as
    not in zipf's struct)."""
    from cachegym.envs.workloads import generate

    res = evaluate(_compose(_quiet([
        "trace=generated", "trace.generator=scan", "++trace.params={n_hot: 50, n_requests: 3000}",
        "eval.capacities=[0.1]", "eval.policies=[lru]", "eval.bounds=[]", f"out_dir={tmp_path}"])))
    (row,) = [r for r in res["rows"] if r["policy"] == "lru"]
    want = generate("scan", seed=0, n_hot=50, n_requests=3000)
    assert row["trace"] == "scan" and row["requests"] == len(want)


def test_a_capacity_named_twice_runs_once(tmp_path: Path) -> None:
    """Each cell ran twice, two equal rows (a sweep then averaged them; ``sim`` took each
    capacity once already)."""
    res = evaluate(_compose(_quiet([
        "trace.params.n_requests=2000", "eval.capacities=[0.1,0.1]", "eval.policies=[lru]",
        "eval.bounds=[]", f"out_dir={tmp_path}"])))
    assert [r["policy"] for r in res["rows"]] == ["lru"]


def test_csv_trace_with_reader_options_as_the_readme_says(og_file: Path, tmp_path: Path) -> None:
    """The README's CSV command: reader options set whole with ``++trace.options={...}`` (a plain
    ``trace.options={...}`` cannot add keys to the schema's empty dict; Hydra refuses it) give the
    same rows as the same requests read from oracleGeneral."""
    from cachegym.envs.workloads import read_trace, write_csv

    csv_path = tmp_path / "tiny.csv"
    write_csv(read_trace(og_file), csv_path)
    common = ["eval.capacities=[0.05,0.3]", "eval.policies=[lru,fifo]", "eval.plots=false"]
    via_csv = evaluate(_compose(_quiet([
        f"trace.path={csv_path}", "trace.format=csv",
        "++trace.options={obj_id_col: 2, obj_size_col: 3, has_header: true}",
        *common, f"out_dir={tmp_path / 'c'}"])))["rows"]
    via_og = evaluate(_compose(_quiet([f"trace.path={og_file}", *common,
                                       f"out_dir={tmp_path / 'o'}"])))["rows"]
    keys = ("policy", "capacity", "requests", "hits", "misses", "byte_misses")
    assert [{k: r[k] for k in keys} for r in via_csv] == [{k: r[k] for k in keys} for r in via_og]
    assert all(r["requests"] == 2500 for r in via_csv)


@pytest.mark.parametrize("body", [
    "class MyLRU(LRU):\n    name = 'mylru'\n",
    # a constructor that takes the trace: checked on its signature, built with the replayed trace
    "class MyLRU(LRU):\n    def __init__(self, trace):\n        super().__init__()\n"
    "        self.n = len(trace)\n",
])
def test_policy_of_the_users_by_file_in_the_policy_list(body: str, og_file: Path, tmp_path: Path) -> None:
    """``eval.policies=[lru,FILE.py:Class]``: a class of the user's runs through the pool beside
    the built-in ones (its row labelled by file and class); a misspelt class fails before any
    replay with the classes the file has."""
    (tmp_path / "mine.py").write_text("from cachegym.policies.lru import LRU\n\n" + body)
    spec = f"{tmp_path / 'mine.py'}:MyLRU"
    res = evaluate(_compose(_quiet([f"trace.path={og_file}", "eval.capacities=[0.05]",
                                    f"eval.policies=[lru,{spec}]", "eval.plots=false",
                                    f"out_dir={tmp_path / 'o'}"])))
    by = {r["policy"]: r for r in res["rows"]}
    assert by[spec]["misses"] == by["lru"]["misses"]
    with pytest.raises(ConfigError, match="has no class 'MyLRUX'; it has .*MyLRU"):
        evaluate(_compose(_quiet([f"trace.path={og_file}", f"eval.policies=[{spec}X]",
                                  f"out_dir={tmp_path / 'x'}"])))


@pytest.mark.parametrize("key,body,match", [
    ("policies", "class Needs:\n    def __init__(self, x): pass\n    def victim(self, view): return None\n",
     "constructing it failed: .*missing 1 required positional argument: 'x'; its signature: \\(x\\)"),
    ("policies", "class Thing:\n    pass\n", "Thing has no victim\\(\\) method"),
    ("policies", "class NeedsMore:\n    def __init__(self, trace, depth): pass\n",
     "constructing it will fail: missing a required argument: 'depth'"),
    ("prefetchers", "class Evicts:\n    def victim(self, view): return None\n",
     "Evicts has no prefetch\\(\\) method, so it is not a prefetch policy"),
])
def test_users_class_that_cannot_run_fails_before_any_replay(
        key: str, body: str, match: str, og_file: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A class of the user's that cannot be built without arguments (the evaluator builds it as
    ``Class()``, or ``Class(trace=...)`` when it takes the trace) or lacks the method of its
    list fails at validation: no replay runs, nothing is written."""
    import cachegym.envs.evaluation as ev

    (tmp_path / "mine.py").write_text(body)
    spec = f"{tmp_path / 'mine.py'}:{body.split()[1].rstrip(':')}"

    def no_replay(*a: object, **k: object) -> None:
        raise AssertionError("a replay ran before the bad class was refused")

    monkeypatch.setattr(ev, "run_one", no_replay)
    with pytest.raises(ConfigError, match=match):
        evaluate(_compose(_quiet([f"trace.path={og_file}", "eval.capacities=[0.05]",
                                  f"eval.{key}=[{'lru' if key == 'policies' else 'none'},{spec}]",
                                  f"out_dir={tmp_path / 'o'}"])))
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_objects_mode_fractions_and_prefetch(tmp_path: Path) -> None:
    res = evaluate(_compose(_quiet([
        "trace.params.n_requests=3000", "trace.params.n_objects=400", "eval.mode=objects",
        "eval.capacities=[0.1,50]", "eval.policies=[sieve]", "eval.prefetchers=[none,markov]",
        "eval.plots=false", f"out_dir={tmp_path}"])))
    rows = res["rows"]
    assert {r["policy"] for r in rows} == {"sieve", "lru", "foo_l", "foo_u"}  # lru, the bounds added
    caps = sorted({r["capacity"] for r in rows})
    assert caps[1] == 50 and 0 < caps[0] < 400  # 10% of the distinct objects
    assert all(r["mode"] == "objects" and r["byte_misses"] == r["misses"] for r in rows
               if r["row_kind"] == "policy")
    # with a prefetcher the misses gap counts fetches: still never above 1
    assert all(r["gap_closed_misses"] <= 1 for r in rows if r["prefetch"] == "markov")
    assert any(r["prefetch"] == "markov" for r in rows)


@pytest.mark.parametrize("override, match", [
    ("eval.policies=[lru,nope]", r"eval.policies: unknown value 'nope'; allowed: .*belady"),
    ("eval.capacities=[0]", r"eval.capacities: capacity must be > 0"),
    ("eval.capacities=[-5]", r"eval.capacities: capacity must be > 0"),
    ("eval.capacities=[2.5]", r"eval.capacities: 2.5 is neither"),
    ("eval.prefetchers=[oracle9]", r"eval.prefetchers: unknown value 'oracle9'; allowed: none"),
    ("eval.presets=[tpu]", r"eval.presets: unknown preset 'tpu'; allowed: none, a100_pcie4"),
    ("trace.path=/no/such/file.bin", r"trace.path: no such file"),
    ("eval.learned=[/no/such.npz]", r"eval.learned: learned policy file '/no/such.npz' does not exist"),
    ("eval.learned=[/no/such.npz] eval.learned_guards=[shadw]",
     r"eval.learned_guards: unknown guard 'shadw'; choices: lru, none, shadow, trial"),
    ("eval.learned=[/no/such.npz] eval.learned_guards=[]", r"eval.learned_guards: the list is empty"),
    # without a policy file too (it was accepted silently: a helper's audit)
    ("eval.learned_guards=[shadw]", r"eval.learned_guards: unknown guard 'shadw'"),
    ("eval.policies=[lru,learned]", r"eval.policies: 'learned' needs its file: give eval.learned=\[PATH\]"),
    ("eval.policies=[learned:/x/p.npz]", r"eval.policies: 'learned:/x/p.npz': in a config an exported "
     r"policy is a file of eval.learned.*write eval.learned=\[/x/p.npz\] eval.learned_guards=\[shadow\]"),
    ("eval.policies=[learned_bare:/x/p.npz]", r"eval.learned_guards=\[none\].*make_eviction\('learned', "
     r"path='/x/p.npz', guard='none'\)"),
])
def test_bad_values_give_one_line_errors(override: str, match: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=match) as err:
        evaluate(_compose(_quiet([*override.split(" "), f"out_dir={tmp_path}"])))
    assert "\n" not in str(err.value)


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "evaluate.py"), *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_an_interpolation_that_does_not_resolve_is_one_line(tmp_path: Path) -> None:
    """'eval.capacities=[${nope}]' ended in a traceback from where the value was read (a
    helper's audit): one line, exit 2."""
    proc = _run(["eval.capacities=[${nope}]", "eval.plots=false", f"out_dir={tmp_path / 'o'}"],
                tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "an interpolation does not resolve (Interpolation key 'nope' not found)" in proc.stderr


def test_script_runs_the_exact_command(og_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "DIR"
    proc = _run(exact_overrides(og_file, out), tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 20
    assert "gap_traffic" in proc.stdout
    assert "s3fifo" in proc.stdout  # the printed table
    assert list(out.glob("metrics__*.png"))


def test_script_bad_value_is_one_line_without_traceback(tmp_path: Path) -> None:
    proc = _run(["eval.policies=[lru,nope]", f"out_dir={tmp_path}"], tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    err = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and "eval.policies" in err[0] and "sieve" in err[0]


@pytest.mark.slow
def test_multirun_sweep_with_joblib(og_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    proc = _run(["-m", f"trace.path={og_file}", "eval.capacities=[0.1]", "eval.policies=[lru],[fifo]",
                 "eval.plots=false", f"out_dir={out}", f"hydra.sweep.dir={tmp_path / 'multirun'}",
                 "hydra.launcher.n_jobs=2"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Joblib" in proc.stdout + proc.stderr
    for job, policies in (("job_0", {"lru", "foo_l", "foo_u"}), ("job_1", {"fifo", "lru", "foo_l", "foo_u"})):
        with open(out / job / "results.csv") as f:
            assert {r["policy"] for r in csv.DictReader(f)} == policies  # lru, the bound added


def test_arena_placement_goes_through_the_pool(og_file: Path, tmp_path: Path) -> None:
    res = evaluate(_compose(_quiet([f"trace.path={og_file}", "allocator.placement=arena",
                                    "eval.capacities=[0.1]", "eval.policies=[lru]",
                                    "eval.plots=false", f"out_dir={tmp_path}"])))
    assert all(r["placement"] == "arena" for r in res["rows"] if r["row_kind"] == "policy")


def _policy_file(path: Path) -> str:
    from cachegym.policies import features
    from cachegym.policies.learned import save_policy_file

    rng = np.random.default_rng(0)
    arrays = {"wc": rng.normal(size=(features.F, 8)), "wg": rng.normal(size=(features.G, 8)),
              "b0": rng.normal(size=8), "wo": rng.normal(size=8), "bo": rng.normal(size=1)}
    header = {"task": "evict", "K": 8, "candidate_rule": "lru",
              "feature_spec": features.feature_spec(),
              "arch": {"type": "candidate_mlp", "n_features": features.F,
                       "n_globals": features.G, "hidden": [8], "activation": "relu"},
              "library_version": "test", "config_sha256": "", "meta": {}}
    return save_policy_file(path, arrays, header)


def test_learned_policy_files_under_several_guards(og_file: Path, tmp_path: Path) -> None:
    """``eval.learned=[PATH]`` under every guard of ``eval.learned_guards`` (the options of
    conf/policy/guard/): each a row named ``learned[GUARD]``, which replays exactly what the
    policy under that guard replays alone."""
    path = _policy_file(tmp_path / "p.npz")
    res = evaluate(_compose(_quiet([f"trace.path={og_file}", "eval.capacities=[0.1]", "eval.policies=[lru]",
                                    f"eval.learned=[{path}]", "eval.learned_guards=[shadow,trial,lru,none]",
                                    "eval.plots=false", f"out_dir={tmp_path}"])))
    names = [r["policy"] for r in res["rows"]]
    assert names == ["learned[shadow]", "learned[trial]", "learned[lru]", "learned[none]", "lru", "foo_l",
                     "foo_u"]
    row = res["rows"][0]
    assert row["requests"] == 2500 and row["decision_p50_us"] > 0
    assert not math.isnan(row["gap_closed_traffic"]) and row["gap_closed_traffic"] <= 1
    # who decided, per guard (the bare network has none)
    assert row["guard_decisions"].split()[0].split(":")[0] in ("network", "lru", "s3fifo", "gdsf", "lfu",
                                                                "arc", "slru")
    assert set(row["guard_retired"].split()) <= {"network", "lru", "s3fifo", "gdsf", "lfu", "arc", "slru"}
    assert row["guard_switches"] >= 0 and "guard_switches" not in res["rows"][3]
    from cachegym.envs.evaluation import network_share

    assert row["evictions"] > 0 and abs(row["guard_net_share"] - network_share(row["guard_decisions"])) <= 0.02
    # nothing evicted: no one decided (the shares said network:1.00 beside a blank net share)
    whole = evaluate(_compose(_quiet([f"trace.path={og_file}", "eval.capacities=[1.0]", "eval.policies=[]",
                                      f"eval.learned=[{path}]", "eval.learned_guards=[shadow]",
                                      "eval.bounds=[]", "eval.plots=false",
                                      f"out_dir={tmp_path / 'whole'}"])))["rows"][0]
    assert whole["evictions"] == 0 and math.isnan(whole["guard_net_share"])
    assert whole["guard_decisions"] == ""
    for r in res["rows"]:
        assert r["policy_file"] == (path if r["policy"].startswith("learned[") else None)
        assert r["policy"] in res["table"]
    from cachegym.allocator.pool import Pool
    from cachegym.envs.workloads import read_trace
    from cachegym.policies.learned import Guard, LearnedPolicy, LRUGuard, ShadowGuard
    from cachegym.policies.registry import make_eviction

    trace = read_trace(str(og_file), format="oracleGeneral")
    cap = res["rows"][0]["capacity"]
    for r, guard in zip(res["rows"], ("shadow", "trial", "lru", "none")):
        st = Pool(cap, LearnedPolicy.load(path, guard=guard), placement="bytes",
                  write_policy="write-back", oversize="bypass").replay(trace)
        assert (r["hits"], r["misses"]) == (st.hits, st.misses), guard
    assert type(make_eviction("learned", path=path).guard) is ShadowGuard
    assert type(make_eviction("learned", path=path, guard="trial").guard) is Guard
    assert type(make_eviction("learned", path=path, guard="lru").guard) is LRUGuard
    assert make_eviction("learned", path=path, guard="none").guard is None
    # two files: told apart by their names; the path is in policy_file
    other = _policy_file(tmp_path / "q" / "p.npz")
    res = evaluate(_compose(_quiet([f"trace.path={og_file}", "eval.capacities=[0.1]", "eval.policies=[]",
                                    f"eval.learned=[{path},{other}]", "eval.learned_guards=[none]",
                                    "eval.plots=false", f"out_dir={tmp_path / 'two'}"])))
    assert [(r["policy"], r["policy_file"]) for r in res["rows"]] == [
        (f"learned[none]:{Path(path).parent.name}/p", path), ("learned[none]:q/p", other),
        ("lru", None), ("foo_l", None), ("foo_u", None)]
    # a corrupt file is refused before any replay: nothing is written
    from cachegym.allocator.errors import PolicyFileError

    bad = tmp_path / "bad.npz"
    bad.write_bytes(Path(path).read_bytes()[:100])  # truncated
    with pytest.raises(PolicyFileError, match="truncated or corrupt"):
        evaluate(_compose(_quiet([f"trace.path={og_file}", "eval.capacities=[0.1]",
                                  f"eval.learned=[{bad}]", f"out_dir={tmp_path / 'b'}"])))
    assert not (tmp_path / "b" / "results.csv").exists()


def test_guard_group_options_build_the_named_guards() -> None:
    """Every yaml of conf/policy/guard/ is a guard of :class:`GuardName`, and the config builds
    (through the one instantiate helper) what ``make_guard`` of that name builds."""
    from cachegym.envs.config import build_guard, guard_options
    from cachegym.policies.learned import GUARD_NAMES, make_guard

    assert sorted(guard_options()) == sorted(GUARD_NAMES)
    for name in GUARD_NAMES:
        g, ref = build_guard(name), make_guard(name)
        assert type(g) is type(ref) and (g is None or g.window == ref.window)
    assert build_guard("shadow") is not build_guard("shadow")  # a new guard per policy


@pytest.mark.parametrize("call, match", [
    (lambda: __import__("cachegym.policies.learned", fromlist=["make_guard"]).make_guard("bare"),
     r"unknown guard 'bare'; choices: shadow, trial, lru, none"),
    (lambda: __import__("cachegym.policies.learned", fromlist=["make_guard"]).make_guard("none", window=5),
     r"guard 'none' \(the network alone\) takes no parameters"),
    (lambda: __import__("cachegym.policies.learned", fromlist=["make_guard"]).make_guard("lru", s3fifo=True),
     r"guard 'lru': bad parameters"),
    (lambda: __import__("cachegym.policies.registry", fromlist=["make_eviction"]).make_eviction("learned"),
     r"learned policy needs a file: make_eviction\('learned', path=PATH"),
    (lambda: __import__("cachegym.policies.registry", fromlist=["make_eviction"]).make_eviction("learned_lru:x.npz"),
     r"no longer named PREFIX:PATH.*guard='lru'"),
    (lambda: __import__("cachegym.policies.registry", fromlist=["make_eviction"]).make_eviction("learned:x.npz"),
     r"an exported policy is a file of eval.learned.*learned:PATH is `cachegym sim`'s shorthand"),
])
def test_guard_names_are_checked(call, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=match):
        call()


def test_learned_policy_load_takes_a_guard_name(tmp_path: Path) -> None:
    from cachegym.policies.learned import Guard, GuardName, LearnedPolicy, ShadowGuard

    path = _policy_file(tmp_path / "p.npz")
    assert type(LearnedPolicy.load(path, guard="shadow").guard) is ShadowGuard
    assert type(LearnedPolicy.load(path, guard=GuardName.trial).guard) is Guard
    assert LearnedPolicy.load(path, guard=GuardName.none).guard is None
    with pytest.raises(ConfigError, match="unknown guard 'shadowy'; choices: shadow, trial, lru, none"):
        LearnedPolicy.load(path, guard="shadowy")




def test_a_trace_the_bounds_do_not_cover_keeps_its_runs(tmp_path: Path,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """A key that changes size without a free (libCacheSim traces have them) is outside the
    bounds' model: the sweep's runs stand, without bound rows, and a warning says why."""
    t = Trace.from_arrays([1, 2, 1, 3, 1, 2] * 50, [100, 200, 150, 100, 150, 200] * 50, name="sz")
    p = tmp_path / "sz.npz"
    t.save(p)
    res = evaluate(_compose(_quiet([f"trace.path={p}", "eval.capacities=[300]",
                                    "eval.policies=[lru,fifo]", "eval.plots=false",
                                    f"out_dir={tmp_path / 'o'}"])))
    assert [r["policy"] for r in res["rows"]] == ["lru", "fifo"]
    assert all(math.isnan(r["gap_closed_traffic"]) for r in res["rows"])
    assert "no bound rows" in caplog.text and "changes size" in caplog.text


def test_the_table_says_when_runs_streamed_much() -> None:
    """A pool smaller than most objects streams them (copied for that access only): the table
    says so under its rows, with the worst run, rather than leaving a near-1 miss ratio
    unexplained; runs that streamed little add no note."""
    from cachegym.envs.evaluation import format_table

    nan = float("nan")
    row = {"trace": "t", "capacity": 1024, "mode": "bytes", "policy": "lru", "prefetch": "none",
           "preset": "none", "traffic_bytes": 10, "gap_closed_traffic": nan, "stall_ns": 0,
           "gap_closed_stall": nan, "miss_ratio": 0.9, "gap_closed_misses": nan,
           "byte_miss_ratio": 0.9, "decision_p50_us": nan, "requests": 100, "streamed": 91}
    note = format_table([row, {**row, "policy": "gdsf", "streamed": 5}]).splitlines()[-1]
    assert note.startswith("note: 1 run(s) streamed more than 10%") and "91%: lru at 1KiB on t" in note
    assert "note:" not in format_table([{**row, "streamed": 5}])
    # without a timing preset copies take no time: the stall column is blank (not 0.000), as
    # for the bounds; under a preset it shows
    lines = format_table([row, {**row, "preset": "h100_pcie5", "stall_ns": 1_234_000}]).splitlines()
    at = lines[0].index("stall_ms")
    assert lines[2][at:at + 8].strip() == "" and lines[3][at:at + 8].strip() == "1.234"
    # with a prefetcher gap_misses counts copies in (misses and prefetches): said once, where a
    # gap is shown (two policies of equal misses read gaps 0 and -0.11 without it)
    said = "note: with a prefetcher, gap_misses counts each run's copies in"
    assert said not in format_table([row, {**row, "prefetch": "history"}])
    table = format_table([row, {**row, "prefetch": "history", "gap_closed_misses": -0.11}])
    assert table.splitlines()[-1].startswith(said)


def test_byte_figures_keep_their_digits() -> None:
    """The table's traffic has four significant digits with their trailing zeros (2.700 against
    2.704 GiB: a 0.15% difference shows), other byte figures three; 1,000-1,023 of a unit is
    written plainly, never as 1.02e+03."""
    from cachegym.envs.evaluation import format_table, human_bytes

    gib, mib = 2**30, 2**20
    assert human_bytes(2.7 * gib) == "2.7GiB" and human_bytes(2.7 * gib, 4) == "2.700GiB"
    assert human_bytes(2.704 * gib, 4) == "2.704GiB" and human_bytes(149 * mib, 4) == "149.0MiB"
    assert human_bytes(1023.67 * mib) == "1024MiB" == human_bytes(1023.67 * mib, 4)
    assert human_bytes(1536) == "1.5KiB" and human_bytes(512, 4) == "512B"
    assert human_bytes(float("nan")) == "" and human_bytes(None) == ""
    nan = float("nan")
    row = {"trace": "t", "capacity": 16 * mib, "mode": "bytes", "policy": "lru", "prefetch": "none",
           "preset": "none", "traffic_bytes": int(2.7 * gib), "gap_closed_traffic": nan, "stall_ns": 0,
           "gap_closed_stall": nan, "miss_ratio": 0.5, "gap_closed_misses": nan,
           "byte_miss_ratio": 0.5, "decision_p50_us": nan}
    line = format_table([row]).splitlines()[-1]
    assert "16MiB" in line and "2.700GiB" in line


def test_the_table_counts_objects_in_objects_mode_and_names_who_decided() -> None:
    """In objects mode (every object of size 1) traffic is a count of objects, not bytes; a
    guarded learned row shows the share of accesses its network decided (its twins included),
    so that a network the guard left for a heuristic is seen as such; other rows leave it blank."""
    from cachegym.envs.evaluation import format_table, network_share

    nan = float("nan")
    row = {"trace": "t", "capacity": 68, "mode": "objects", "policy": "lru", "prefetch": "none",
           "preset": "none", "traffic_bytes": 6488, "gap_closed_traffic": nan, "stall_ns": 0,
           "gap_closed_stall": nan, "miss_ratio": 0.5, "gap_closed_misses": nan,
           "byte_miss_ratio": 0.5, "decision_p50_us": nan}
    table = format_table([row, {**row, "policy": "learned[shadow]",
                                "guard_decisions": "arc:0.88 network:0.02 network-history:0.05"}])
    head, _, lru, learned = table.splitlines()
    assert "6488 obj" in lru and "KiB" not in table and head.rstrip().endswith("by_net")
    assert learned.rstrip().endswith("0.07") and not lru.rstrip().endswith("0.07")
    assert network_share("") is None and network_share(None) is None
    assert network_share("lru:0.90 network:0.10") == 0.10
    exact = format_table([{**row, "policy": "learned[shadow]", "guard_net_share": 0.333,
                           "guard_decisions": "lru:0.67 network:0.33 network-history:0.00"}])
    assert exact.splitlines()[2].rstrip().endswith("0.33")
    none = format_table([{**row, "policy": "learned[shadow]", "guard_net_share": nan,
                          "guard_decisions": "network:1.00"}])  # nothing evicted: no one decided
    assert not none.splitlines()[2].rstrip().endswith("1.00")


def test_two_prefetch_files_of_one_name_are_told_apart_in_the_table() -> None:
    """``learned:run_a/policy.npz`` and ``learned:run_b/policy.npz`` were both printed as
    ``learned:policy.npz``."""
    from cachegym.envs.evaluation import prefetch_label

    among = ["learned:/x/run_a/policy.npz", "learned:/x/run_b/policy.npz", "history",
             "learned:/y/other.npz"]
    assert [prefetch_label(p, among) for p in among] == [
        "learned:run_a/policy.npz", "learned:run_b/policy.npz", "history", "learned:other.npz"]
    assert prefetch_label("learned:/x/run_a/policy.npz") == "learned:policy.npz"


def test_a_prefetch_file_is_named_in_any_case_as_a_policy_file_is() -> None:
    """``LEARNED:PATH`` named a policy file among eviction policies but an unknown prefetcher
    (a helper's audit)."""
    from cachegym.envs.evaluation import learned_path, learned_prefetcher

    golden = os.path.join(ROOT, "tests", "golden", "policy.npz")
    assert learned_path("LEARNED:~/p.npz") == os.path.expanduser("~/p.npz")
    assert learned_path("learnedx") is None and learned_path("history") is None
    with pytest.raises(ConfigError, match="prefetch head"):  # (the golden file has none)
        learned_prefetcher("Learned:" + golden)
