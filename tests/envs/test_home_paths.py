"""A path a user gives may start with ``~`` (the shell leaves it alone after ``learned:``, after
a comma or inside quotes): policy files, ``FILE.py:Class`` policies and preset files are read
from the home directory as trace paths are."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cachegym.allocator.cost import PRESETS, get_preset
from cachegym.allocator.errors import ConfigError
from cachegym.envs.evaluation import check_presets, plan_learned
from cachegym.policies.registry import resolve_import_spec

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "policy.npz"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_a_policy_file_under_home(home: Path) -> None:
    shutil.copy(GOLDEN, home / "p.npz")
    [(_, f, _)] = plan_learned(["~/p.npz"], ["shadow"])
    assert f == str(home / "p.npz")


def test_a_policy_class_under_home(home: Path) -> None:
    (home / "mine.py").write_text("class Mine:\n    name = 'mine'\n")
    assert resolve_import_spec("~/mine.py:Mine").__name__ == "Mine"


def test_a_preset_file_under_home(home: Path) -> None:
    p = PRESETS["h100_pcie5"]
    (home / "x.json").write_text(json.dumps({f: getattr(p, f) for f in p.__dataclass_fields__}))
    assert get_preset("~/x.json").h2d_gbps == p.h2d_gbps
    check_presets(["~/x.json"])  # the sweep's check reads it there too
    with pytest.raises(ConfigError, match="preset file 'nope.json': no such file"):
        check_presets(["nope.json"])
    (home / "bad.json").write_text('{"h2d_bw": "fast"}')
    # its contents too, before a sweep sets an earlier run's results aside (they were moved,
    # then the run failed on the file)
    with pytest.raises(ConfigError, match=r"eval.presets: preset file .*bad.json: expected an "
                                          r"object with the fields"):
        check_presets(["~/bad.json"])
