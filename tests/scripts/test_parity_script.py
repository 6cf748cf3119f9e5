"""scripts/parity.py and cachegym.policies.parity.compare: request-by-request agreement with libCacheSim
on a user's trace, a reported difference, and bad input in one line."""

from __future__ import annotations

import builtins
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.trace import Op, Trace
from cachegym.envs.workloads import generate
from cachegym.policies import parity

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("libcachesim")


def _script() -> Any:
    from cachegym.scripts import parity as script

    return script


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("parity") / "z.npz"
    generate("zipf", seed=3, n_requests=3000, n_objects=400, size_sigma=0.8).save(p)
    return p


def test_script_agrees_on_every_request(trace_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _script().main([str(trace_file), "--capacities", "0.05,0.2",
                           "--policies", "lru,arc,s3fifo,belady"]) == 0
    out = capsys.readouterr().out
    assert "3000 requests" in out and "agree on every request: 8 of 8 (policy, capacity) pairs" in out
    rows = [ln.split() for ln in out.splitlines() if ln.split()[:1] in (["lru"], ["arc"])]
    assert len(rows) == 4 and all(r[-1] == "0" and r[2] == r[3] for r in rows)


def test_a_difference_is_reported_with_its_request(trace_file: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The comparison can fail: libCacheSim's FIFO standing in for LRU differs, and the script
    names the first request that does and exits 1."""
    monkeypatch.setitem(parity.LCS_INIT, "lru", ("FIFO_init", ""))
    assert _script().main([str(trace_file), "--capacities", "0.1", "--policies", "lru"]) == 1
    out = capsys.readouterr().out
    assert "requests differ; the first is request" in out and "ours hit, libCacheSim miss" in out
    assert "0 of 1 (policy, capacity) pairs; 1 differ" in out


def test_lirs_passes_on_its_model_not_on_a_difference_of_any_size(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The pool's LIRS differs from libCacheSim's (which can exceed its capacity: three keys in
    a cache of two, 214 misses against 46); the script passes it only where the model of
    libCacheSim's algorithm beside the pool misses as libCacheSim, and says so. It passed any
    difference before (libCacheSim's LRU standing in for its LIRS)."""
    p = tmp_path / "three.npz"
    Trace.from_arrays(np.random.default_rng(0).integers(1, 4, 600), 1).save(p)
    assert _script().main([str(p), "--capacities", "2", "--policies", "lirs"]) == 0
    out = capsys.readouterr().out
    assert "its model of libCacheSim's algorithm 46 misses, libCacheSim 46" in out
    monkeypatch.setitem(parity.LCS_INIT, "lirs", ("LRU_init", ""))
    assert _script().main([str(p), "--capacities", "2", "--policies", "lirs"]) == 1
    assert "(they must be equal)" in capsys.readouterr().out


def test_compare_replays_the_oracle_general_requests() -> None:
    """Frees are dropped and writes become requests, on both sides alike."""
    t = Trace.from_arrays([1, 2, 1, 3, 1, 2, 3, 1], [10, 20, 10, 30, 10, 20, 30, 10],
                          op=[Op.READ, Op.WRITE, Op.READ, Op.READ, Op.FREE, Op.READ, Op.READ, Op.READ])
    rows = parity.compare(t, ["lru", "lfu"], [40, 60])
    assert all(r.requests == 7 and r.agrees for r in rows)
    assert [r.misses for r in rows] == [r.lcs_misses for r in rows]


def test_compare_refuses_bad_input() -> None:
    t = generate("zipf", seed=0, n_requests=100)
    with pytest.raises(ConfigError, match=r"no libCacheSim counterpart for \['lruu'\]; choose from"):
        parity.compare(t, ["lruu"], [1000])
    with pytest.raises(ConfigError, match="whole numbers of bytes >= 1, got \\[0\\]"):
        parity.compare(t, ["lru"], [0])
    # libCacheSim's S3-FIFO would abort the process (its small queue would hold 0 bytes)
    with pytest.raises(ConfigError, match=r"s3fifo cannot run at capacity 9 \(its small queue.*"
                                          r"at least 10 bytes, or leave s3fifo out"):
        parity.compare(t, ["lru", "s3fifo"], [1000, 9])


def test_script_bad_input_is_one_line(trace_file: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    script = _script()
    assert script.main([str(trace_file), "--policies", "lru,learned"]) == 2
    assert capsys.readouterr().err.startswith("error: no libCacheSim counterpart for ['learned']")
    assert script.main([str(trace_file), "--capacities", "0"]) == 2
    assert "--capacities: capacity must be > 0, got 0" in capsys.readouterr().err
    assert script.main([str(tmp_path / "none.npz")]) == 2
    assert "no such file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        script.main([str(trace_file), "--capacities", "half"])
    assert e.value.code == 2 and "'half' is not a size" in capsys.readouterr().err
    for flag in ("--policies", "--capacities"):  # (it compared 0 of 0 pairs and passed)
        with pytest.raises(SystemExit) as e:
            script.main([str(trace_file), flag, ","])
        assert e.value.code == 2 and f"{flag} names none" in capsys.readouterr().err


def test_missing_libcachesim_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    real = builtins.__import__

    def no_lcs(name: str, *a: Any, **k: Any) -> Any:
        if name.startswith("libcachesim"):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_lcs)
    with pytest.raises(ConfigError, match=r"pip install libcachesim"):
        parity.compare(generate("zipf", seed=0, n_requests=50), ["lru"], [1000])


def test_script_with_frees(capsys: pytest.CaptureFixture[str]) -> None:
    """``--frees`` keeps a trace's frees (libCacheSim deletes); its default policies leave out
    the three libCacheSim cannot delete from, and naming one is bad input."""
    p = ROOT / "data" / "traces" / "gpt.npz"
    script = _script()
    assert script.main([str(p), "--frees", "--capacity-of", "peak_live", "--capacities", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "frees as libCacheSim deletes" in out and "agree on every request: 8 of 8" in out
    assert "belady" not in out and "slru" not in out and "lirs" not in out
    assert script.main([str(p), "--frees", "--policies", "lru,belady"]) == 2
    assert "no comparison with frees for ['belady']" in capsys.readouterr().err


def test_script_with_frees_explains_arc(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A generated KV cache reuses freed block ids: ARC differs there (libCacheSim's remove
    keeps the ghost), the script says why and still exits 0, as the model agrees."""
    p = tmp_path / "kv.npz"
    generate("llm_kv_cache", seed=0, n_steps=120).save(p)
    assert _script().main([str(p), "--frees", "--capacity-of", "peak_live", "--capacities", "0.2",
                           "--policies", "lru,arc"]) == 0
    out = capsys.readouterr().out
    assert "requests differ" in out and "ARC_remove leaves a removed ghost" in out
    assert "agree on every request: 1 of 2 (policy, capacity) pairs; 1 differ as explained" in out


def test_the_default_policies_leave_out_one_that_cannot_run_at_a_capacity(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With every policy (the default), one that libCacheSim cannot run at the smallest capacity
    (S3-FIFO below 10 bytes) is left out, saying so, and the others run (a helper's 9-byte
    trace lost the whole comparison to it); named, it is refused as before."""
    pytest.importorskip("libcachesim")
    from cachegym.envs.workloads import write_oracle_general

    t = Trace.from_arrays(np.array([1, 2, 1, 3, 2, 1]), np.array([2, 3, 2, 4, 3, 2]))
    p = tmp_path / "tiny.oracleGeneral"
    write_oracle_general(t, p)
    script = _script()
    assert script.main([str(p), "--capacities", "5"]) == 0
    out = capsys.readouterr().out
    assert "s3fifo left out at capacity 5: libCacheSim's cannot run there" in out and "lru " in out
    # only where it cannot run: it ran at none of 5 and 12 before, though 12 is enough
    assert script.main([str(p), "--capacities", "5,12"]) == 0
    out = capsys.readouterr().out
    assert "s3fifo left out at capacity 5:" in out and re.search(r"\ns3fifo +12 ", out)
    assert not re.search(r"\ns3fifo +5 ", out)
    assert script.main([str(p), "--capacities", "5", "--policies", "lru,s3fifo"]) == 2
    assert "s3fifo cannot run at capacity 5" in capsys.readouterr().err


def test_nanosecond_times_compare_and_objects_of_4_gib_are_refused_by_the_users_trace() -> None:
    """Parity writes the trace as oracleGeneral: a CSV's nanosecond timestamps (2^60) failed in
    that temporary file's 32-bit time field; a size of 4 GiB or more was refused naming it."""
    n = 400
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 60, n)
    t = Trace.from_arrays(keys, 100 + keys, step=1_700_000_000_000_000_000 + np.arange(n))
    (row,) = parity.compare(t, ["lru"], [2000])
    assert row.agrees and row.requests == n
    big = Trace.from_arrays([1, 2, 1], [100, 1 << 32, 100], name="mine.csv")
    with pytest.raises(ConfigError, match=r"mine.csv: request 1 is of 4294967296 bytes; parity "
                                          r"compares through libCacheSim's oracleGeneral format"):
        parity.compare(big, ["lru"], [1000])


def test_compare_lets_each_pairs_pool_go_before_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    """A helper's audit: each (policy, capacity) pair's pool waited for the cycle collector,
    ~85 bytes a request per pair (2.8 GB for ten pairs of a 4M-request trace)."""
    import gc
    import weakref

    pytest.importorskip("libcachesim")
    from cachegym.envs.workloads import generate
    from cachegym.policies import parity

    made: list[weakref.ref] = []
    real = parity.pool_hits

    def recording(*a, **k):
        hits, pool, p = real(*a, **k)
        made.append(weakref.ref(pool))
        return hits, pool, p

    monkeypatch.setattr(parity, "pool_hits", recording)
    trace = generate("zipf", seed=0, n_requests=3000, n_objects=300)
    gc.disable()  # (the collector would free them on its own schedule)
    try:
        rows = parity.compare(trace, ["lru", "arc"], [20 * 4096, 60 * 4096])
        assert len(rows) == 4 and all(r.agrees for r in rows)
        assert len(made) == 4 and all(ref() is None for ref in made)
    finally:
        gc.enable()
