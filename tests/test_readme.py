"""The README's Python quickstarts run as a reader would paste them (each in a fresh interpreter,
from the repository root), so that the front door cannot drift from the code."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def quickstart_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = re.search(r"^## Quickstarts\n(.*?)^## ", text, re.S | re.M)
    assert section is not None, "README: the 'Quickstarts' section is gone"
    return re.findall(r"```python\n(.*?)```", section.group(1), re.S)


def test_the_readme_has_the_three_python_quickstarts() -> None:
    blocks = quickstart_blocks()
    joined = "\n".join(blocks)
    assert len(blocks) == 3
    for needle in ("LearnedPolicy.load", "ActivationOffload", "gym.make(\"cachegym/Evict-v0\""):
        assert needle in joined


@pytest.mark.parametrize("i", range(3))
def test_a_readme_quickstart_runs(i: int, tmp_path: Path) -> None:
    # "policy.npz" is the file the reader exported; the tests' golden policy stands in for it
    code = quickstart_blocks()[i].replace('"policy.npz"', repr(str(ROOT / "tests/golden/policy.npz")))
    script = tmp_path / "quickstart.py"
    script.write_text(code)
    r = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
