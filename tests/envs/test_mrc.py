"""LRU's miss-ratio curve (cachegym.envs.workloads.stats.lru_mrc): exact against the pool, frees as a
lower bound, the weighted stack-distance kernel against a stack, SHARDS against exact."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Literal

import numpy as np
import pytest

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.pool import Pool
from cachegym.allocator.trace import Op, Trace
from cachegym.envs.workloads import generate
from cachegym.envs.workloads.stats import SHARDS_MIN_OBJECTS, _stack_distances, lru_mrc, shards_rate
from cachegym.policies import LRU
from tests.scripts_loader import load_script


def _pool_miss_ratio(trace: Trace, capacity: int) -> float:
    return Pool(capacity, LRU(), placement="bytes", oversize="bypass").replay(trace).miss_ratio


def _with_frees(seed: int, n: int = 3000, n_keys: int = 200) -> Trace:
    """Zipf-ish reads and writes of variable-size objects, a free now and then of a live key
    (a key used again after its free is a new object, of a new size)."""
    rng = np.random.default_rng(seed)
    key, size, op = [], [], []
    live: dict[int, int] = {}
    for _ in range(n):
        k = int(min(rng.zipf(1.3), n_keys))
        if k in live and rng.random() < 0.05:
            row = (k, live.pop(k), int(Op.FREE))
        else:
            row = (k, live.setdefault(k, int(rng.integers(1, 5000))),
                   int(Op.WRITE if rng.random() < 0.3 else Op.READ))
        key.append(row[0])
        size.append(row[1])
        op.append(row[2])
    return Trace.from_arrays(key, size, op)


@pytest.mark.parametrize("mode", ["bytes", "objects"])
def test_exact_curve_is_the_pools_lru_miss_ratio(mode: Literal["bytes", "objects"]) -> None:
    t = generate("zipf", seed=1, n_requests=4000, n_objects=300, size_sigma=1.5, write_fraction=0.3)
    replayed = t if mode == "bytes" else t.with_sizes(1)
    caps, mr = lru_mrc(t, mode, sample=1)
    assert len(caps) > 50 and np.all(np.diff(caps) > 0)
    # capacities below the largest object included: those objects are streamed, never cached
    pick = caps[:: len(caps) // 12]
    assert mode == "objects" or pick[0] < t.size.max()
    got = dict(zip(caps.tolist(), mr.tolist()))
    for c in pick.tolist():
        assert got[c] == _pool_miss_ratio(replayed, c), c


def test_with_frees_the_curve_is_a_lower_bound() -> None:
    for seed in range(3):
        t = _with_frees(seed)
        assert (t.op == Op.FREE).sum() > 20
        everything = t.working_set_bytes()
        caps, mr = lru_mrc(t, "bytes", capacities=[2000, 8000, 30_000, 100_000, everything], sample=1)
        pool = np.array([_pool_miss_ratio(t, c) for c in caps.tolist()])
        assert np.all(mr <= pool) and np.any(mr < pool), (mr, pool)  # a bound, not exact
        assert mr[-1] == pool[-1]  # everything fits: only first accesses miss, as in the pool


def test_weighted_stack_distances_match_a_stack() -> None:
    t = _with_frees(7, n=1500)
    obj, size, free = t.object_ids(), t.size.astype(np.int64), t.op == Op.FREE
    got = _stack_distances(obj, size, free, int(obj.max()) + 1)
    stack: list[int] = []  # most recent first
    for i, o in enumerate(obj.tolist()):
        above = stack.index(o) if o in stack else -1
        if free[i]:
            assert got[i] == -1
            stack.remove(o)
            continue
        want = -1 if above < 0 else sum(int(size[obj == x][0]) for x in stack[:above])
        assert got[i] == want, i
        if above >= 0:
            stack.pop(above)
        stack.insert(0, o)


@pytest.mark.parametrize("mode", ["bytes", "objects"])
def test_sampled_curve_is_close_to_exact(mode: Literal["bytes", "objects"]) -> None:
    t = generate("zipf", seed=0, n_requests=200_000, n_objects=100_000, alpha=0.8, size_sigma=1.0)
    hi = t.working_set_bytes() if mode == "bytes" else 100_000
    caps = np.unique(np.geomspace(1 if mode == "objects" else 4096, hi, 40).astype(np.int64))
    _, exact = lru_mrc(t, mode, capacities=caps, sample=1)
    _, sampled = lru_mrc(t, mode, capacities=caps, sample=0.1)
    assert np.abs(sampled - exact).max() < 0.02


def test_bad_arguments_say_what_is_allowed() -> None:
    t = generate("zipf", seed=0, n_requests=100)
    with pytest.raises(ConfigError, match="mode must be"):
        lru_mrc(t, "pages")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"sample must be a rate in \(0, 1\]"):
        lru_mrc(t, sample=0)


def _script():  # type: ignore[no-untyped-def]
    return load_script("trace_stats")


def test_script_writes_into_the_output_folder_never_beside_the_trace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in"
    src.mkdir()
    generate("zipf", seed=0, n_requests=3000).save(src / "z.npz")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert _script().main([str(src / "z.npz")]) == 0
    out = work / "outputs" / "trace_stats" / "z_npz"
    assert sorted(p.name for p in out.iterdir()) == ["mrc.csv", "mrc.png", "reuse.png"]
    assert sorted(p.name for p in src.iterdir()) == ["z.npz"]
    assert str(Path("outputs/trace_stats/z_npz/mrc.png")) in capsys.readouterr().out
    rows = list(csv.reader((out / "mrc.csv").read_text().splitlines()))
    assert rows[0] == ["capacity_bytes", "lru_miss_ratio"] and len(rows) > 10
    assert (out / "mrc.png").read_bytes()[:4] == b"\x89PNG"
    from cachegym.envs.workloads.formats import write_trace

    write_trace(generate("zipf", seed=1, n_requests=3000), src / "z.oracleGeneral")  # the same stem
    assert _script().main([str(src / "z.oracleGeneral")]) == 0
    assert sorted(p.name for p in (work / "outputs" / "trace_stats").iterdir()) == [
        "z_npz", "z_oracleGeneral"]  # a folder each: the second did not overwrite the first's
    capsys.readouterr()
    assert _script().main([str(src / "z.npz"), "--sample", "0"]) == 2  # (named lru_mrc's argument)
    assert "--sample must be a rate in (0, 1]" in capsys.readouterr().err
    for png, why in (("h.npz", "'.npz' is not an image format"), ("nowhere/h.png", "is not a writable folder")):
        # refused before the curve's work (a matplotlib traceback after it, and no mrc.csv)
        assert _script().main([str(src / "z.npz"), "--png", str(tmp_path / png), "--out",
                               str(tmp_path / "bad")]) == 2
        assert why in capsys.readouterr().err
    there = tmp_path / "there"
    assert _script().main([str(src / "z.npz"), "--out", str(there), "--mode", "objects",
                           "--sample", "0.5"]) == 0
    out_text = capsys.readouterr().out  # (1,208 objects: a sample of half is too few, raised)
    assert (there / "mrc.csv").exists() and "--sample 0.5 keeps too few" in out_text
    assert "(objects, exact)" in out_text


def test_script_reports_a_bad_sample_rate_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    generate("zipf", seed=0, n_requests=300).save(tmp_path / "z.npz")
    assert _script().main([str(tmp_path / "z.npz"), "--sample", "2", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


def test_the_curve_of_a_trace_whose_objects_change_size_is_not_called_exact(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Stack distances take each object's last size: there the curve (1.0 at 10 and 20 bytes
    on this trace, where LRU misses 0.75 and 0.5) was labelled exact."""
    from cachegym.allocator.trace import Trace

    Trace.from_arrays([1, 1, 2, 1], [10, 50, 10, 50]).save(tmp_path / "sc.npz")
    assert _script().main([str(tmp_path / "sc.npz"), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "objects change size" in out and "(bytes, exact)" not in out


def test_a_sample_of_too_few_objects_is_raised_to_a_useful_one() -> None:
    """SHARDS at 1 in 1,000 of 150 objects kept none: the curve read 1.0 at every capacity,
    the exact one 0.07 at the working set. The rate is raised to keep about
    SHARDS_MIN_OBJECTS objects (here: all of them, exact)."""
    t = generate("zipf", n_requests=3000, n_objects=150, seed=0)
    assert shards_rate(t, 0.001) == 1.0
    caps = [1000, 10_000, int(t.size.sum())]
    _, exact = lru_mrc(t, "bytes", capacities=caps, sample=1)
    _, sampled = lru_mrc(t, "bytes", capacities=caps, sample=0.001)
    assert np.array_equal(exact, sampled) and exact[-1] < 0.5
    many = generate("zipf", n_requests=60_000, n_objects=20_000, seed=0)
    objects = len(np.unique(many.key))
    assert shards_rate(many, 0.01) == pytest.approx(SHARDS_MIN_OBJECTS / objects)
    assert shards_rate(many, 0.5) == 0.5
