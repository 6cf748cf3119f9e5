"""scripts/export.py: checkpoints and SB3 models become policy files LearnedPolicy loads."""

from __future__ import annotations

import base64
import io
import json
import os
import pickle
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cachegym.allocator.errors import ConfigError, PolicyFileError
from cachegym.envs.evict import EvictEnv
from cachegym.policies.learned import LearnedPolicy, read_policy_file
from cachegym.policies.training.export import export_file, scorer_of
from cachegym.policies.training.nets import export_arrays
from tests.scripts_loader import load_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def sb3_zip(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, object]:
    from sb3_contrib import MaskablePPO

    from cachegym.policies.training.nets import MaskableScorerActorCriticPolicy

    env = EvictEnv(None, K=8, candidates="lru", window=2000, capacity=0.2, capacity_of="working_set")
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


def test_a_zip_without_its_runs_config_says_which_candidate_rule_it_assumes(sb3_zip, tmp_path, caplog):
    """A model trained with env.candidates=lru, copied away from its config.yaml, was exported
    with the default rule 'sample' without a word."""
    path, _ = sb3_zip
    with caplog.at_level("WARNING"):
        export_file(path, tmp_path / "p.npz", algo="maskable_ppo")
    assert "no training config.yaml beside" in caplog.text and "--candidate-rule" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        export_file(path, tmp_path / "q.npz", algo="maskable_ppo", candidate_rule="lru")
    assert "no training config.yaml" not in caplog.text


def test_checkpoint_reexport_changes_only_what_is_asked(sb3_zip, tmp_path):
    first = export_file(sb3_zip[0], tmp_path / "a.npz", algo="maskable_ppo")
    second = export_file(first, tmp_path / "b.npz", K=32, candidate_rule="sample")
    h1, a1 = read_policy_file(first)
    h2, a2 = read_policy_file(second)
    assert (h2["K"], h2["candidate_rule"]) == (32, "sample")
    assert h2["feature_spec"] == h1["feature_spec"]
    assert all(np.array_equal(a1[k], a2[k]) for k in a1)


def test_bad_sources_are_refused(sb3_zip, tmp_path):
    # the zip's policy class names its algorithm (read as pickle opcodes, not unpickled)
    with pytest.raises(ConfigError, match=r"--algo 'dqn', but .* holds a maskable_ppo model"):
        export_file(sb3_zip[0], tmp_path / "x.npz", algo="dqn")
    h, _ = read_policy_file(export_file(sb3_zip[0], tmp_path / "y.npz"))
    assert h["meta"]["algo"] == "maskable_ppo"
    with pytest.raises(ConfigError, match="--algo applies to an SB3 model .zip"):
        export_file(tmp_path / "y.npz", tmp_path / "z.npz", algo="ppo")
    with pytest.raises(ConfigError, match=r"K \(--K\) must be an int in 1..1024"):  # (blamed the file)
        export_file(tmp_path / "y.npz", tmp_path / "z.npz", K=0)
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
                        "--algo", "dqn", "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 2 and "error:" in r.stderr and "holds a maskable_ppo model" in r.stderr


# ---------------------------------------------------------------------- untrusted zips (issue #27, item 6)
class _Touch:
    """Unpickling this creates the file ``path``: what a crafted model file would do."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (open, (self.path, "w"))


class _System:
    """Unpickling this runs a shell command (``os.system``, of a module torch blocks by name)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (self.command,))


def _crafted(src: str, dst: Path, marker: Path, entry: str) -> Path:
    """``src`` with ``entry`` (``data``: every serialized JSON field; ``policy.pth``: the whole
    entry) replaced by a pickle that creates ``marker`` when unpickled."""
    payload = pickle.dumps(_Touch(str(marker)))
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w") as out:
        for name in z.namelist():
            blob = z.read(name)
            if name == entry == "data":
                data = json.loads(blob)
                for v in data.values():
                    if isinstance(v, dict) and ":serialized:" in v:
                        v[":serialized:"] = base64.b64encode(payload).decode()
                blob = json.dumps(data).encode()
            elif name == entry:
                blob = payload
            out.writestr(name, blob)
    return dst


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")  # (torch's, on the crafted pickle)
def test_a_crafted_sb3_zip_runs_no_code(sb3_zip, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = _crafted(sb3_zip[0], tmp_path / "evil.zip", marker, "data")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "export.py"), str(evil),
                        "--algo", "maskable_ppo", "--out", str(tmp_path / "p.npz")],
                       capture_output=True, text=True, cwd=tmp_path)
    assert not marker.exists(), "reading the zip ran its pickled code"
    assert r.returncode == 0, r.stderr  # the tensors alone make the policy file
    want = export_arrays(scorer_of(sb3_zip[1]))
    _, got = read_policy_file(tmp_path / "p.npz")
    assert all(np.array_equal(got[k], want[k]) for k in want)

    evil = _crafted(sb3_zip[0], tmp_path / "evil_pth.zip", marker, "policy.pth")
    with pytest.raises(PolicyFileError, match="more than tensors.*--trust-pickle") as e:
        export_file(evil, tmp_path / "q.npz", algo="maskable_ppo")
    assert not marker.exists()
    # (torch's advice, to load it anyway by unpickling it, is not passed on)
    assert "can still be loaded" not in str(e.value) and "weights_only" not in str(e.value)
    # saved by torch.save (a zip holding the pickle), a call of a module torch blocks (its
    # message then has no "Unsupported global") was called damaged
    import io

    import torch

    buf = io.BytesIO()
    torch.save({"x": _System(f"touch {marker}")}, buf)
    zipped = tmp_path / "evil_torch_save.zip"
    with zipfile.ZipFile(sb3_zip[0]) as z, zipfile.ZipFile(zipped, "w") as out:
        for name in z.namelist():
            out.writestr(name, buf.getvalue() if name == "policy.pth" else z.read(name))
    with pytest.raises(PolicyFileError, match="more than tensors.*--trust-pickle"):
        export_file(zipped, tmp_path / "r.npz", algo="maskable_ppo")
    assert not marker.exists()


def test_trust_pickle_is_what_runs_the_code(sb3_zip, tmp_path: Path) -> None:
    """The crafted file is effective: SB3's load, asked for explicitly, does run it."""
    marker = tmp_path / "pwned"
    evil = _crafted(sb3_zip[0], tmp_path / "evil.zip", marker, "data")
    with pytest.raises(Exception):  # noqa: B017, PT011 - whatever the payload leaves behind
        export_file(evil, tmp_path / "p.npz", algo="maskable_ppo", trust_pickle=True)
    assert marker.exists()
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "export.py"), "--help"],
                       capture_output=True, text=True)
    assert "--trust-pickle" in r.stdout and "runs code" in r.stdout.replace("\n", " ")


# ---------------------------------------------------------------------- ONNX
def _random_policy(tmp_path, hidden: list[int]) -> str:
    from cachegym.policies import features
    from cachegym.policies.learned import save_policy_file

    rng = np.random.default_rng(len(hidden))
    a = {"wc": rng.normal(size=(features.F, hidden[0])), "wg": rng.normal(size=(features.G, hidden[0])),
         "b0": rng.normal(size=hidden[0])}
    for i, (h0, h1) in enumerate(zip(hidden[:-1], hidden[1:]), 1):
        a[f"w{i}"], a[f"b{i}"] = rng.normal(size=(h0, h1)), rng.normal(size=h1)
    a["wo"], a["bo"] = rng.normal(size=hidden[-1]), rng.normal(size=1)
    hdr = {"task": "evict", "K": 16, "candidate_rule": "sample", "feature_spec": features.feature_spec(),
           "arch": {"type": "candidate_mlp", "n_features": features.F, "n_globals": features.G,
                    "hidden": hidden, "activation": "relu"}}
    return save_policy_file(tmp_path / f"p{len(hidden)}.npz", a, hdr)


@pytest.mark.parametrize("hidden", [[24], [32, 16], [16, 12, 8]])
def test_onnx_model_scores_as_the_policy_does(hidden, tmp_path):
    """The ONNX model of a policy file gives CandidateScorer's scores (float32 summation order
    aside) for any batch and any K, and carries the file's header in its metadata."""
    import json

    onnx = pytest.importorskip("onnx", reason="the onnx package (pip install -e '.[onnx]')")
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime (pip install -e '.[onnx]')")
    from cachegym.policies.learned import CandidateScorer
    from cachegym.policies.training.export import export_onnx

    src = _random_policy(tmp_path, hidden)
    path = export_onnx(src, tmp_path / "sub" / "p.onnx")
    header, arrays = read_policy_file(src)
    sc = CandidateScorer(arrays)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    for n, k in ((1, 16), (4, 32), (2, 3)):
        cand = rng.random((n, k, sc.n_features)).astype(np.float32)
        cand[rng.random(cand.shape) < 0.3] = 0.0
        glob = rng.random((n, sc.n_globals)).astype(np.float32)
        got = sess.run(["scores"], {"candidates": cand, "globals": glob})[0]
        want = np.stack([sc.scores(cand[i], glob[i]).copy() for i in range(n)])
        assert got.shape == (n, k)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
        assert (got.argmax(1) == want.argmax(1)).all()
    meta = {p.key: p.value for p in onnx.load(path).metadata_props}
    assert json.loads(meta["cachegym_header"]) == header


def test_onnx_export_refuses_bad_sources_and_says_what_to_install(tmp_path, monkeypatch):
    from cachegym.policies.training.export import export_onnx

    pytest.importorskip("onnx", reason="the onnx package (pip install -e '.[onnx]')")
    broken = tmp_path / "broken.npz"
    broken.write_bytes(b"PK\x03\x04 not a policy")
    with pytest.raises(PolicyFileError):
        export_onnx(broken, tmp_path / "x.onnx")
    assert not (tmp_path / "x.onnx").exists()
    monkeypatch.setitem(sys.modules, "onnx", None)  # as if it were not installed
    with pytest.raises(ConfigError, match=r"ONNX export needs the onnx package: pip install onnx \(the onnx extra: pip install 'cachegym\[onnx\]'\)"):
        export_onnx(_random_policy(tmp_path, [8]), tmp_path / "x.onnx")


def test_script_writes_onnx_with_or_without_a_policy_file(tmp_path, capsys):
    pytest.importorskip("onnx", reason="the onnx package (pip install -e '.[onnx]')")
    src = _random_policy(tmp_path, [8, 4])
    script = os.path.join(ROOT, "scripts", "export.py")
    r = subprocess.run([sys.executable, script, src, "--onnx", str(tmp_path / "a.onnx")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines() == [f"onnx: {tmp_path / 'a.onnx'}"]
    r = subprocess.run([sys.executable, script, src, "--onnx", str(tmp_path / "b.onnx"), "--out",
                        str(tmp_path / "b.npz"), "--K", "8"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines() == [f"onnx: {tmp_path / 'b.onnx'}", f"policy: {tmp_path / 'b.npz'}"]
    assert read_policy_file(tmp_path / "b.npz")[0]["K"] == 8
    # the refusals, from the same main() in this process (each subprocess imports torch: 3-4 s)
    export = load_script("export")

    def run(*argv: str) -> tuple[int, str]:
        try:
            rc = export.main(list(argv))
        except SystemExit as e:  # argparse's error()
            rc = int(e.code or 0)
        return rc, capsys.readouterr().err

    rc, err = run(src)
    assert rc == 2 and "--out is required" in err
    blocker = tmp_path / "a_file"  # a file where the output's directory would be
    blocker.write_text("")
    for flag in ("--onnx", "--out"):
        rc, err = run(src, flag, str(blocker / "x.bin"))
        assert rc == 2 and "Traceback" not in err, err
        assert err.startswith("error: cannot write ") and "writable directory" in err
    # a directory given as the ONNX file: refused before the policy file is written (it was
    # written, then the ONNX export failed naming a temporary file)
    rc, err = run(src, "--out", str(tmp_path / "c.npz"), "--onnx", str(tmp_path))
    assert rc == 2 and not (tmp_path / "c.npz").exists(), err
    assert err.strip() == f"error: cannot write {str(tmp_path)!r}: it is a directory: give the name of a file (in it, say)"


def test_a_training_runs_zip_takes_its_algorithm_and_candidate_rule_from_the_run(sb3_zip, tmp_path):
    """A zip beside the config.yaml that cachegym train writes is exported with that run's SB3
    algorithm and candidate rule (its weights are the same whatever the rule, but a policy that
    chooses its candidates otherwise than in training decides on what it never saw); a --algo
    that contradicts the run is refused by name; without a run's config the rule is Evict-v0's
    default."""
    import shutil

    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(sb3_zip[0], run / "maskable_ppo.zip")
    (run / "config.yaml").write_text("env:\n  candidates: lru\nagent:\n  algo: maskable_ppo\n")
    h, _ = read_policy_file(export_file(run / "maskable_ppo.zip", tmp_path / "a.npz"))
    assert (h["candidate_rule"], h["meta"]["algo"]) == ("lru", "maskable_ppo")
    with pytest.raises(ConfigError, match="holds a maskable_ppo model"):
        export_file(run / "maskable_ppo.zip", tmp_path / "b.npz", algo="ppo")
    h, _ = read_policy_file(export_file(run / "maskable_ppo.zip", tmp_path / "c.npz",
                                        candidate_rule="sample"))
    assert h["candidate_rule"] == "sample"  # what is asked wins
    # imitation then a fine-tune: the algorithm is the fine-tune's
    (run / "config.yaml").write_text("env:\n  candidates: sample\nagent:\n  finetune:\n"
                                     "    algo: maskable_ppo\n")
    h, _ = read_policy_file(export_file(run / "maskable_ppo.zip", tmp_path / "d.npz"))
    assert (h["candidate_rule"], h["meta"]["algo"]) == ("sample", "maskable_ppo")
    (run / "config.yaml").write_text("!!python/object/apply:os.system ['echo pwned']\n")
    h, _ = read_policy_file(export_file(run / "maskable_ppo.zip", tmp_path / "e.npz"))
    assert h["meta"]["algo"] == "maskable_ppo"  # not YAML data: ignored (nothing runs); its class
    alone = tmp_path / "alone.zip"
    shutil.copy(sb3_zip[0], alone)
    h, _ = read_policy_file(export_file(alone, tmp_path / "f.npz", algo="maskable_ppo"))
    import inspect

    assert h["candidate_rule"] == inspect.signature(EvictEnv).parameters["candidates"].default


def _rewritten(src: str, dst: Path, entry: str, blob: bytes | None = None,
               compress: int = zipfile.ZIP_DEFLATED) -> Path:
    """``src`` with ``entry`` replaced by ``blob`` (``None``: kept), every entry ``compress``ed."""
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w", compress) as out:
        for name in z.namelist():
            out.writestr(name, blob if name == entry and blob is not None else z.read(name))
    return dst


def _patched(path: Path, entry: str, patch: Any) -> Path:
    """``path`` with the bytes of ``entry``'s local header and data changed by ``patch(raw,
    at)`` (``at``: the header's offset): damage zipfile meets while reading."""
    with zipfile.ZipFile(path) as z:
        at = z.getinfo(entry).header_offset
    raw = bytearray(path.read_bytes())
    patch(raw, at)
    path.write_bytes(bytes(raw))
    return path


def test_a_damaged_sb3_zip_is_a_typed_error_that_names_the_damage(sb3_zip, tmp_path: Path,
                                                                 monkeypatch) -> None:
    """A helper's audit: a corrupt deflate stream (zlib.error), an unsupported compression
    method (NotImplementedError), an encrypted entry (RuntimeError) escaped as tracebacks; a
    truncated policy.pth was said to hold "more than tensors", with the advice to unpickle it;
    a zip of 2 GiB of zeros was read whole; tensors of stride 0 declaring a 20,000-wide network
    took 6.5 GB before the refusal, which named the output file."""
    import torch

    from cachegym.policies.training import export

    src = sb3_zip[0]
    cases: dict[str, tuple[Path, str]] = {}

    def corrupt(raw: bytearray, at: int) -> None:  # the deflate stream's first bytes
        start = at + 30 + int.from_bytes(raw[at + 26:at + 28], "little") + int.from_bytes(
            raw[at + 28:at + 30], "little")
        raw[start:start + 8] = b"\xff" * 8

    def central(raw: bytearray) -> int:  # the central directory's entry of policy.pth
        c = raw.find(b"PK\x01\x02")
        while raw[c + 46:c + 46 + int.from_bytes(raw[c + 28:c + 30], "little")] != b"policy.pth":
            c = raw.find(b"PK\x01\x02", c + 4)
        return c

    def method(raw: bytearray, at: int) -> None:  # compression method 99, in both headers
        c = central(raw)
        raw[at + 8:at + 10] = raw[c + 10:c + 12] = (99).to_bytes(2, "little")

    def encrypted(raw: bytearray, at: int) -> None:  # the encryption flag, in both headers
        c = central(raw)
        raw[at + 6] |= 1
        raw[c + 8] |= 1

    for name, patch in (("corrupt", corrupt), ("method", method), ("encrypted", encrypted)):
        z = _rewritten(src, tmp_path / f"{name}.zip", "policy.pth")
        cases[name] = (_patched(z, "policy.pth", patch), "not a readable SB3 model zip")
    cases["truncated"] = (_rewritten(src, tmp_path / "trunc.zip", "policy.pth", b"PK\x03\x04abc"),
                          "policy.pth is damaged or not a torch file")
    cases["garbage"] = (_rewritten(src, tmp_path / "garbage.zip", "policy.pth", b"garbage" * 9),
                        "policy.pth is damaged")
    buf = io.BytesIO()
    state = torch.load(io.BytesIO(zipfile.ZipFile(src).read("policy.pth")), weights_only=True)
    key = next(k for k in state if str(k).endswith("scorer.cand_in.weight"))
    state[key] = torch.zeros(1).expand(20_000, state[key].shape[1])  # (stride 0: a few bytes)
    torch.save(state, buf)
    cases["wide"] = (_rewritten(src, tmp_path / "wide.zip", "policy.pth", buf.getvalue()),
                     "hidden layers of widths [20000")
    for name, (path, match) in cases.items():
        with pytest.raises(PolicyFileError, match=re.escape(match)) as e:
            export_file(str(path), tmp_path / "out.npz", algo="maskable_ppo")
            pytest.fail(f"{name}: no error")
        assert str(path) in str(e.value) and "--trust-pickle" not in str(e.value), name
    monkeypatch.setattr(export, "MAX_SB3_BYTES", 1000)  # (a zip bomb, refused undecompressed)
    with pytest.raises(PolicyFileError, match="bytes once decompressed, more than 1,000"):
        export_file(src, tmp_path / "out.npz", algo="maskable_ppo")
    assert not (tmp_path / "out.npz").exists()
