"""Files a user keeps are written whole: a write that fails (here: the disk full when the
temporary file is synced) leaves an older file at the path as it was, and no temporary file
behind. (A helper's audit filled a tmpfs: ONNX exports, snapshots and csv, txt and
oracleGeneral traces were cut short in place, the old file lost.)"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cachegym.allocator.pool import Pool
from cachegym.allocator.snapshot import write_snapshot
from cachegym.allocator.trace import Trace
from cachegym.envs.workloads import write_trace

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "tests" / "golden" / "policy.npz"


def _disk_full(monkeypatch: pytest.MonkeyPatch) -> None:
    def fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", fsync)


def _policy_file(path: Path) -> None:
    from cachegym.policies.learned.policy_file import read_policy_file, save_policy_file

    header, arrays = read_policy_file(POLICY)
    save_policy_file(path, arrays, header)


def _onnx(path: Path) -> None:
    pytest.importorskip("onnx", reason="the onnx extra is not installed")
    from cachegym.policies.training.export import export_onnx

    export_onnx(POLICY, path)


def _snapshot(path: Path) -> None:
    pool = Pool(4096, placement="arena")
    for k in range(8):
        pool.access(k, 1024)
    write_snapshot(pool.memory_snapshot(), path)


_TRACE = Trace.from_arrays(np.arange(50) % 7, 100, step=np.arange(50))
WRITERS: dict[str, tuple[str, Callable[[Path], Any]]] = {
    "csv trace": ("t.csv", lambda p: write_trace(_TRACE, p)),
    "txt trace": ("t.txt", lambda p: write_trace(_TRACE, p)),
    "oracleGeneral trace": ("t.oracleGeneral", lambda p: write_trace(_TRACE, p)),
    "npz trace": ("t.npz", lambda p: write_trace(_TRACE, p)),
    "json snapshot": ("s.json", _snapshot),
    "pickle snapshot": ("s.pickle", _snapshot),
    "policy file": ("p.npz", _policy_file),
    "onnx export": ("p.onnx", _onnx),
}


@pytest.mark.parametrize("what", list(WRITERS))
def test_a_failed_write_keeps_the_older_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             what: str) -> None:
    name, write = WRITERS[what]
    path = tmp_path / name
    path.write_bytes(b"the older file")
    _disk_full(monkeypatch)
    with pytest.raises(OSError, match="No space left"):
        write(path)
    assert path.read_bytes() == b"the older file"
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no temporary file left
    monkeypatch.undo()
    write(path)  # and with room, the new file
    assert path.read_bytes() != b"the older file" and path.stat().st_size > 0


def test_a_symlink_is_written_through_and_a_files_mode_kept(tmp_path: Path) -> None:
    """The review of the helper above: a symlink at the path was replaced by a regular file
    (its target left stale), a 0600 file became 0644, a 250-character name failed on the
    temporary file's longer name."""
    target = tmp_path / "real.csv"
    target.write_text("old\n")
    os.chmod(target, 0o600)
    (tmp_path / "link.csv").symlink_to(target)
    write_trace(_TRACE, tmp_path / "link.csv")
    assert (tmp_path / "link.csv").is_symlink() and "obj_id" in target.read_text()
    assert (target.stat().st_mode & 0o777) == 0o600
    long = tmp_path / ("t" * 246 + ".csv")
    write_trace(_TRACE, long)
    assert long.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["real.csv", "link.csv", long.name])
