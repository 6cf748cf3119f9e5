"""scripts/export.py: checkpoints and SB3 models become policy files LearnedPolicy loads."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from allocator.errors import ConfigError, PolicyFileError
from envs.evict import EvictEnv
from policies.learned import LearnedPolicy, read_policy_file
from policies.training.export import export_file, scorer_of
from policies.training.nets import export_arrays

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def sb3_zip(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, object]:
    from sb3_contrib import MaskablePPO

    from policies.training.nets import MaskableScorerActorCriticPolicy

    env = EvictEnv(None, K=8, window=2000, capacity=0.2)
    model = MaskablePPO(MaskableScorerActorCriticPolicy, env, n_steps=64, batch_size=32,
                        policy_kwargs={"hidden": [16, 8]}, seed=0, device="cpu")
    path = str(tmp_path_factory.mktemp("export") / "model.zip")
    model.save(path)
    return path, model


def test_sb3_model_exports_the_same_weights(sb3_zip, tmp_path):
    path, model = sb3_zip
    out = export_file(path, tmp_path / "p.npz", algo="maskable_ppo")
    header, arrays = read_policy_file(out)
    assert header["K"] == 8 and header["meta"]["algo"] == "maskable_ppo"
    want = export_arrays(scorer_of(model))
    assert sorted(arrays) == sorted(want)
    for k in want:
        np.testing.assert_array_equal(arrays[k], want[k].astype(np.float32))
    LearnedPolicy.load(out)  # loadable with NumPy alone


def test_checkpoint_reexport_changes_only_what_is_asked(sb3_zip, tmp_path):
    first = export_file(sb3_zip[0], tmp_path / "a.npz", algo="maskable_ppo")
    second = export_file(first, tmp_path / "b.npz", K=32, candidate_rule="sample")
    h1, a1 = read_policy_file(first)
    h2, a2 = read_policy_file(second)
    assert (h2["K"], h2["candidate_rule"]) == (32, "sample")
    assert h2["feature_spec"] == h1["feature_spec"]
    assert all(np.array_equal(a1[k], a2[k]) for k in a1)


def test_bad_sources_are_refused(sb3_zip, tmp_path):
    with pytest.raises(ConfigError, match="--algo"):
        export_file(sb3_zip[0], tmp_path / "x.npz")
    with pytest.raises(ConfigError, match="checkpoint"):
        export_file(tmp_path / "model.pt", tmp_path / "x.npz")
    with pytest.raises(PolicyFileError, match="missing.npz: no such file .a checkpoint"):
        export_file(tmp_path / "missing.npz", tmp_path / "x.npz")
    broken = tmp_path / "broken.npz"
    broken.write_bytes(b"PK\x03\x04 not a policy")
    with pytest.raises(PolicyFileError):
        export_file(broken, tmp_path / "x.npz")


def test_script_prints_the_policy_path(sb3_zip, tmp_path):
    out = tmp_path / "s.npz"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "export.py"), sb3_zip[0],
                        "--algo", "maskable_ppo", "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == f"policy: {out}"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "export.py"), sb3_zip[0],
                        "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 2 and "error:" in r.stderr
