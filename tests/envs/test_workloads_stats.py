"""Trace statistics and the trace_stats script."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cachegym.allocator.trace import Kind, Op, Trace
from cachegym.envs.workloads import generate
from cachegym.envs.workloads.stats import reuse_distances, trace_stats
from tests.scripts_loader import load_script


def test_reuse_distance_is_stack_distance() -> None:
    t = Trace.from_arrays([1, 2, 3, 1, 1, 3, 2], 1)
    np.testing.assert_array_equal(reuse_distances(t), [-1, -1, -1, 2, 0, 1, 2])


def test_reuse_distance_matches_naive() -> None:
    t = generate("zipf", seed=1, n_requests=2000, n_objects=100)
    got = reuse_distances(t)
    last: dict[int, int] = {}
    for i, k in enumerate(t.key.tolist()):
        want = len(set(t.key[last[k] + 1:i].tolist())) if k in last else -1
        assert got[i] == want
        last[k] = i


def test_stats_of_small_trace() -> None:
    t = Trace.from_arrays([1, 2, 1, 1], [10, 20, 10, 10], op=[Op.WRITE, Op.READ, Op.READ, Op.FREE],
                          kind=[Kind.ACTIVATION, Kind.PARAMETER, Kind.ACTIVATION, Kind.ACTIVATION])
    s = trace_stats(t)
    assert (s.requests, s.reads, s.writes, s.frees) == (3, 2, 1, 1)
    assert s.unique_objects == 2 and s.working_set_bytes == 30 and s.peak_live_bytes == 30
    assert s.bytes_by_kind == {"parameter": 20, "activation": 10}
    assert s.reuses == 1 and s.cold == 2 and s.reuse_p50 == 1


def test_script_prints_and_saves_png(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # the curve goes to outputs/trace_stats/z_npz/ here
    t = generate("zipf", seed=0, n_requests=3000)
    t.save(tmp_path / "z.npz")
    script = load_script("trace_stats")
    png = tmp_path / "h.png"
    assert script.main([str(tmp_path / "z.npz"), "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert "requests           3000" in out and "reuse distance" in out
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_script_reports_a_bad_trace_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.oracleGeneral"
    bad.write_bytes(b"\x00" * 30)  # one whole 24-byte record and a truncated one
    script = load_script("trace_stats")
    assert script.main([str(bad), "--format", "oracleGeneral"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(bad) in err and "Traceback" not in err
    assert script.main([str(tmp_path / "missing.npz")]) == 2
    assert "no such file" in capsys.readouterr().err
