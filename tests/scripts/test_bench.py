"""scripts/bench.py: a bad input ends in one line naming it, without a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "bench.py"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_missing_policy_file_is_one_line(tmp_path: Path) -> None:
    r = _bench("decision", "--policy", str(tmp_path / "none.npz"))
    assert r.returncode == 2
    assert r.stderr.strip() == f"error: policy file {tmp_path / 'none.npz'}: no such file (export one with scripts/export.py)"
    assert "Traceback" not in r.stderr


def test_bad_candidate_count_is_an_argument_error() -> None:
    r = _bench("decision", "--K", "0")
    assert r.returncode == 2 and "argument --K: must be >= 1 candidates, got 0" in r.stderr
    assert "Traceback" not in r.stderr
