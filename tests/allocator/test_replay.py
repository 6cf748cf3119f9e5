"""``Pool.replay``: row by row the access loop (reads, writes, frees, kinds, compute), whatever
the chunking of the columns, over any window of the trace; a bad window is a ConfigError."""

from __future__ import annotations

import numpy as np
import pytest

import cachegym.allocator.loop as loop_mod
from cachegym.allocator.arena import ALIGN
from cachegym.allocator.errors import ConfigError
from cachegym.allocator.pool import Pool
from cachegym.allocator.trace import Op, Trace
from cachegym.policies.classic import LFU
from tests.trace_makers import free_some

B = ALIGN


def _trace(seed: int, n: int = 800, n_keys: int = 30) -> Trace:
    rng = np.random.default_rng(seed)
    key = rng.zipf(1.3, n) % n_keys
    sizes = rng.integers(1, 3 * B, n_keys)
    op = np.where(rng.random(n) < 0.3, int(Op.WRITE), int(Op.READ))
    free_some(key, op, rng, 0.04)
    kind = rng.integers(0, 7, n_keys)[key]
    return Trace.from_arrays(key, sizes[key], op, rng.integers(0, 2000, n), kind=kind)


class _Log:
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def __call__(self, e: dict) -> None:
        self.events.append((e["event"], e["key"], e["tick"], e["now_ns"], e["state"]))


def _by_rows(t: Trace, pool: Pool) -> None:
    """The loop replay stands for: one access (or free) per row, fields as NumPy gives them."""
    for i in range(len(t)):
        if t.op[i] == Op.FREE:
            pool.free(int(t.key[i]))
        else:
            pool.access(int(t.key[i]), int(t.size[i]), bool(t.op[i] == Op.WRITE),
                        kind=int(t.kind[i]), compute_ns=int(t.compute_ns[i]))


@pytest.mark.parametrize("chunk", [1, 7, 1 << 16])
def test_replay_is_the_access_loop_row_by_row(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    t = _trace(chunk)
    monkeypatch.setattr(loop_mod, "REPLAY_CHUNK", chunk)
    a = Pool(9 * B, LFU(), cost="h100_pcie5", hook=_Log())  # type: ignore[arg-type]
    got = a.replay(t)
    b = Pool(9 * B, LFU(), cost="h100_pcie5", hook=_Log())  # type: ignore[arg-type]
    _by_rows(t, b)
    assert got == b.snapshot()
    assert a.hook.events == b.hook.events  # type: ignore[union-attr]
    assert {k: o.kind for k, o in a._objs.items()} == {k: o.kind for k, o in b._objs.items()}
    a._check()


def test_replay_of_consecutive_windows_equals_one_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    t = _trace(3)
    monkeypatch.setattr(loop_mod, "REPLAY_CHUNK", 64)
    whole = Pool(9 * B, cost="a100_pcie4").replay(t)
    parts = Pool(9 * B, cost="a100_pcie4")
    for lo, hi in [(0, 0), (0, 100), (100, 101), (101, 700), (700, len(t))]:
        parts.replay(t, lo, hi)
    assert parts.snapshot() == whole
    assert Pool(9 * B).replay(t, 5, 5).accesses == 0


@pytest.mark.parametrize("start, stop", [(-1, None), (0, 801), (10, 9), (0.5, None), ("0", 3)])
def test_a_window_outside_the_trace_is_a_config_error(start: object, stop: object) -> None:
    t = _trace(4)
    p = Pool(9 * B)
    with pytest.raises(ConfigError, match=r"0 <= start <= stop <= 800"):
        p.replay(t, start, stop)  # type: ignore[arg-type]
    assert p.snapshot().accesses == 0
