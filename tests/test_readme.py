"""The README's quickstarts run as a reader would paste them: each block in a fresh process, in
an empty directory (not the repository), with ``policy.npz`` (the file the reader exported: the
tests' golden policy stands in for it) and ``my.oracleGeneral`` and ``my.csv`` (a trace of theirs:
a bundled one written in libCacheSim's formats) beside it. The front door cannot drift from the code."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = os.path.dirname(sys.executable)
MINE_REQUESTS = 6_000


def quickstart_blocks(lang: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = re.search(r"^## Quickstarts\n(.*?)^## ", text, re.S | re.M)
    assert section is not None, "README: the 'Quickstarts' section is gone"
    return re.findall(rf"```{lang}\n(.*?)```", section.group(1), re.S)


def test_the_readme_has_the_quickstarts_the_issue_lists() -> None:
    py, sh = quickstart_blocks("python"), quickstart_blocks("sh")
    assert len(py) == 3 and len(sh) == 2
    joined = "\n".join(py + sh)
    for needle in ("LearnedPolicy.load", "ActivationOffload", 'gym.make("cachegym/Evict-v0"',
                   "export_model", "cachegym sim", "cachegym evaluate", "cachegym train",
                   "init_from=", "resume="):
        assert needle in joined
    for block in py + sh:
        assert len(block.strip().splitlines()) <= 15, block


@pytest.fixture
def reader_dir(tmp_path: Path) -> Path:
    from cachegym.envs.workloads import read_trace, write_trace

    shutil.copy(ROOT / "tests" / "golden" / "policy.npz", tmp_path / "policy.npz")
    # gpt's first 6,000 requests (of 25,786; its first training step has 6,784): what the
    # commands do is the same on any trace, and FOO's LP (the bounds, the imitation teacher), a
    # minute on the whole trace, takes seconds on it
    mine = read_trace(str(ROOT / "data" / "traces" / "gpt.npz")).window(0, MINE_REQUESTS)
    write_trace(mine, tmp_path / "my.oracleGeneral", format="oracleGeneral")
    write_trace(mine, tmp_path / "my.csv", header=False)
    return tmp_path


def _run(cmd: list[str], cwd: Path) -> None:
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])


@pytest.mark.parametrize("i", range(3))
def test_a_python_quickstart_runs(i: int, reader_dir: Path) -> None:
    script = reader_dir / "quickstart.py"
    script.write_text(quickstart_blocks("python")[i])
    _run([sys.executable, str(script)], reader_dir)


@pytest.mark.slow
@pytest.mark.parametrize("i", range(2))
def test_a_shell_quickstart_runs(i: int, reader_dir: Path) -> None:
    if shutil.which("cachegym", path=BIN) is None:
        pytest.skip("the cachegym console script is not installed beside this interpreter "
                    "(pip install -e . installs it)")
    script = reader_dir / "quickstart.sh"
    script.write_text("set -euo pipefail\n" + quickstart_blocks("sh")[i])
    _run(["bash", str(script)], reader_dir)
