"""A policy file comes from outside: every field is validated on load (issue #27, item 5).

Each crafted file below carries valid checksums, so that what refuses it is the check of the
field named, not the checksum; each was accepted (or failed with an untyped error) before.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cachegym.allocator.errors import ConfigError, PolicyFileError
from cachegym.policies import features
from cachegym.policies.learned import LearnedPolicy, read_policy_file, save_policy_file
from cachegym.policies.learned.policy_file import FORMAT, file_checksum, weights_checksum

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "policy.npz"


def arrays(hidden: tuple[int, ...] = (16, 8), n_features: int = features.F,
           n_globals: int = features.G) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    a = {"wc": rng.normal(size=(n_features, hidden[0])), "wg": rng.normal(size=(n_globals, hidden[0])),
         "b0": rng.normal(size=hidden[0])}
    for i, (h0, h1) in enumerate(zip(hidden[:-1], hidden[1:]), 1):
        a[f"w{i}"], a[f"b{i}"] = rng.normal(size=(h0, h1)), rng.normal(size=h1)
    a["wo"], a["bo"] = rng.normal(size=hidden[-1]), rng.normal(size=1)
    return {k: v.astype(np.float32) for k, v in a.items()}


def header(**over: Any) -> dict[str, Any]:
    h: dict[str, Any] = {
        "format": FORMAT, "format_version": 2, "task": "evict", "K": 8, "candidate_rule": "lru",
        "feature_spec": features.feature_spec(),
        "arch": {"type": "candidate_mlp", "n_features": features.F, "n_globals": features.G,
                 "hidden": [16, 8], "activation": "relu"},
        "library_version": "test", "config_sha256": "", "meta": {},
    }
    h.update(over)
    return h


def craft(path: Path, hdr: dict[str, Any] | bytes, arrs: dict[str, np.ndarray], *,
          sign: bool = True) -> Path:
    """Write a policy file as an attacker would: any header, any arrays, valid checksums."""
    if isinstance(hdr, dict):
        hdr = dict(hdr, weights_sha256=weights_checksum(arrs))
        if sign:
            hdr["sha256"] = file_checksum(hdr, arrs)
        blob = json.dumps(hdr).encode()
    else:
        blob = hdr
    np.savez(path, header=np.frombuffer(blob, np.uint8), **{f"w/{k}": v for k, v in arrs.items()})
    return path


def test_a_crafted_valid_file_loads(tmp_path: Path) -> None:
    pol = LearnedPolicy.load(craft(tmp_path / "ok.npz", header(), arrays()))
    assert pol.K == 8 and pol.candidate_rule == "lru"


@pytest.mark.parametrize(("over", "field"), [
    ({"K": 100_000}, "K"),                 # built a K x K table: 9.7 GB
    ({"K": 0}, "K"),
    ({"K": "8"}, "K"),                     # TypeError before
    ({"K": True}, "K"),
    ({"K": 8.5}, "K"),
    ({"candidate_rule": "mru"}, "candidate_rule"),  # loaded, then every decision fell back to LRU
    ({"task": ["evict"]}, "task"),
    ({"meta": []}, "meta"),
    ({"feature_spec": 5}, "feature_spec"),
    ({"arch": "mlp"}, "arch"),
    ({"arch": {"type": "transformer"}}, "arch.type"),
    ({"arch": dict(header()["arch"], hidden=[16, [8]])}, "arch.hidden"),
    ({"arch": dict(header()["arch"], hidden=[10**9])}, "arch.hidden"),
    ({"arch": dict(header()["arch"], activation="tanh")}, "arch.activation"),
])
def test_bad_header_fields_are_refused_naming_the_field(tmp_path: Path, over: dict[str, Any],
                                                        field: str) -> None:
    p = craft(tmp_path / "bad.npz", header(**over), arrays())
    with pytest.raises(PolicyFileError, match=re.escape(f"header field {field!r}")):
        LearnedPolicy.load(p)


@pytest.mark.parametrize(("n_features", "n_globals", "field"), [
    (features.F, 8, "arch.n_globals"),      # the C path ran it, the NumPy path fell back: they disagreed
    (features.F - 1, features.G, "arch.n_features"),
])
def test_a_network_for_other_features_is_refused(tmp_path: Path, n_features: int, n_globals: int,
                                                 field: str) -> None:
    arch = dict(header()["arch"], n_features=n_features, n_globals=n_globals)
    p = craft(tmp_path / "other.npz", header(arch=arch), arrays(n_features=n_features, n_globals=n_globals))
    with pytest.raises(PolicyFileError, match=re.escape(f"header field {field!r}")):
        LearnedPolicy.load(p)


def test_weights_not_those_the_arch_declares_are_refused(tmp_path: Path) -> None:
    a = arrays()
    a["w9"] = np.zeros((8, 8), np.float32)
    with pytest.raises(PolicyFileError, match=r"unexpected \['w9'\]"):
        LearnedPolicy.load(craft(tmp_path / "extra.npz", header(), a))
    a = arrays(hidden=(16, 8))
    with pytest.raises(PolicyFileError, match=r"missing \['b2', 'w2'\]"):
        LearnedPolicy.load(craft(tmp_path / "few.npz", header(arch=dict(header()["arch"], hidden=[16, 8, 4])), a))
    a = arrays()
    a["b0"] = a["b0"][:, None]
    with pytest.raises(PolicyFileError, match="weight array 'b0' has shape"):
        LearnedPolicy.load(craft(tmp_path / "shape.npz", header(), a))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_weights_are_refused(tmp_path: Path, bad: float) -> None:
    a = arrays()
    a["w1"][3, 2] = bad
    with pytest.raises(PolicyFileError, match="'w1' holds 1 NaN or infinite"):
        LearnedPolicy.load(craft(tmp_path / "nan.npz", header(), a))
    with pytest.raises(PolicyFileError, match="'w1' holds 1 NaN or infinite"):
        save_policy_file(tmp_path / "nan_saved.npz", a, header())  # nor written


def test_finite_weights_whose_sums_overflow_float32_are_refused(tmp_path: Path) -> None:
    """Weights each within float32's range whose forward pass is not: every score was NaN and
    the policy evicted candidate 0 on every decision, with no fallback counted (a helper's
    audit: ``wc`` and ``wo`` scaled by 1e37)."""
    a = arrays()
    a["wc"] = a["wc"] * np.float32(1e37) + np.float32(1e37)
    a["wo"] = a["wo"] * np.float32(1e37) + np.float32(1e37)
    assert all(np.isfinite(v.astype(np.float32)).all() for v in a.values())
    with pytest.raises(PolicyFileError, match="network's weights can take its sums to .* retrain"):
        LearnedPolicy.load(craft(tmp_path / "big.npz", header(), a))
    with pytest.raises(PolicyFileError, match="beyond float32's range, in which it runs"):
        save_policy_file(tmp_path / "big_saved.npz", a, header())  # nor written


def test_a_header_json_cannot_store_is_a_config_error(tmp_path: Path) -> None:
    """(A NumPy scalar in ``meta`` was json's raw TypeError from inside the checksum.)"""
    from cachegym.allocator.errors import ConfigError

    with pytest.raises(ConfigError, match=r"JSON cannot store .*int\(x\)"):
        save_policy_file(tmp_path / "p.npz", arrays(), {**header(), "meta": {"n": np.int64(3)}})
    assert not (tmp_path / "p.npz").exists()


def test_the_checksum_covers_the_header(tmp_path: Path) -> None:
    p = save_policy_file(tmp_path / "p.npz", arrays(), header())
    hdr, arrs = read_policy_file(p)
    hdr["K"] = 16  # a valid value: only the checksum can tell
    np.savez(tmp_path / "edited.npz", header=np.frombuffer(json.dumps(hdr).encode(), np.uint8),
             **{f"w/{k}": v for k, v in arrs.items()})
    with pytest.raises(PolicyFileError, match="header checksum mismatch"):
        LearnedPolicy.load(tmp_path / "edited.npz")


@pytest.mark.parametrize("blob", [b"[" * 100_000 + b"]" * 100_000,   # RecursionError before
                                  b'{"format": "cachegym-policy", "format_version": "2"}',
                                  b'{"format": "cachegym-policy", "format_version": 2.0}',
                                  b'\xff\xfe'])
def test_malformed_headers_give_a_typed_error(tmp_path: Path, blob: bytes) -> None:
    with pytest.raises(PolicyFileError, match="corrupt header|format version"):
        LearnedPolicy.load(craft(tmp_path / "h.npz", blob, arrays()))


def test_unknown_entries_are_refused(tmp_path: Path) -> None:
    p = save_policy_file(tmp_path / "p.npz", arrays(), header())
    with np.load(p) as z:
        data = {k: z[k] for k in z.files}
    np.savez(tmp_path / "more.npz", **data, payload=np.zeros(3))
    with pytest.raises(PolicyFileError, match=r"unknown entries \['payload'\]"):
        read_policy_file(tmp_path / "more.npz")


def test_version_1_files_load_with_a_warning_that_the_header_is_unchecked(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    v1 = header(format_version=1)
    with caplog.at_level(logging.WARNING, "cachegym.policies.learned.policy_file"):
        LearnedPolicy.load(craft(tmp_path / "v1.npz", v1, arrays(), sign=False))
        # a fresh path: the warning is once per path, and other tests may have loaded GOLDEN
        LearnedPolicy.load(shutil.copy(GOLDEN, tmp_path / "golden_v1.npz"))
    assert caplog.text.count("its header is unchecked") == 2
    with pytest.raises(PolicyFileError, match="header field 'K'"):  # still validated
        LearnedPolicy.load(craft(tmp_path / "v1bad.npz", dict(v1, K=10**6), arrays(), sign=False))


def test_load_refuses_unknown_keywords_by_name(tmp_path: Path) -> None:
    """A misspelt option is refused, not ignored (``gaurd=False`` left the guard on), before
    the file is read; the accepted keywords are the signature's."""
    with pytest.raises(ConfigError, match="LearnedPolicy.load: unknown argument 'gaurd'; "
                                          "accepted: budget_us, seed, K, guard"):
        LearnedPolicy.load(GOLDEN, gaurd=False)
    with pytest.raises(ConfigError, match="unknown arguments 'budget', 'k'"):
        LearnedPolicy.load(tmp_path / "absent.npz", budget=5, k=8)
    assert LearnedPolicy.load(GOLDEN, guard=False, K=8, seed=1, budget_us=None).guard is None


def test_K_override_is_bounded(tmp_path: Path) -> None:
    p = save_policy_file(tmp_path / "p.npz", arrays(), header())
    with pytest.raises(ConfigError, match=f"K must be in 1..{features.MAX_K}"):
        LearnedPolicy.load(p, K=100_000)


def test_a_version_1_file_loads_with_one_warning_per_path(tmp_path, caplog) -> None:
    """The goldens' policy is a version-1 file: it loads (fields validated, weights checksummed)
    and says once that its header is unchecked, not at every load."""
    import shutil
    from pathlib import Path

    from cachegym.policies.learned.policy_file import read_policy_file

    p = tmp_path / "v1.npz"
    shutil.copy(Path(__file__).resolve().parents[1] / "golden" / "policy.npz", p)
    with caplog.at_level("WARNING"):
        for _ in range(3):
            header, _arrays = read_policy_file(str(p))
    assert header["format_version"] == 1
    assert sum("no header checksum" in r.getMessage() for r in caplog.records) == 1


def test_a_member_that_is_not_npy_is_refused_typed(tmp_path: Path) -> None:
    """np.load gives the raw bytes of a zip member without the .npy magic: refused by name."""
    p = tmp_path / "x.npz"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("header.npy", "{}")
    with pytest.raises(PolicyFileError, match=r"entries \['header'\] are not NumPy arrays"):
        read_policy_file(p)


def test_a_path_from_home_is_read_as_on_the_command_line(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """``~/p.npz`` is the user's home's file, as the CLI reads it ("no such file" before)."""
    import shutil

    monkeypatch.setenv("HOME", str(tmp_path))
    shutil.copy(GOLDEN, tmp_path / "p.npz")
    assert LearnedPolicy.load("~/p.npz", guard="none").path == str(tmp_path / "p.npz")


def test_a_directory_and_an_sb3_zip_get_their_own_advice(tmp_path: Path) -> None:
    with pytest.raises(PolicyFileError, match="is a directory"):
        read_policy_file(tmp_path)
    if hasattr(os, "mkfifo"):  # (was "no such file": a helper's audit)
        os.mkfifo(tmp_path / "pipe.npz")
        with pytest.raises(PolicyFileError, match=r"is not a regular file \(a pipe or a device\?\)"):
            read_policy_file(tmp_path / "pipe.npz")
    p = tmp_path / "model.zip"
    with zipfile.ZipFile(p, "w") as z:  # the members of an SB3 model.save()
        z.writestr("data", "{}")
        z.writestr("policy.pth", b"")
        z.writestr("pytorch_variables.pth", b"")
    with pytest.raises(PolicyFileError, match="stable-baselines3 model zip: export it first, "
                                              "cachegym export"):
        read_policy_file(p)


def test_pickles_are_named_as_such_never_loaded(tmp_path: Path) -> None:
    """An .npz holding object arrays was "truncated or corrupt", a torch.save file had no hint:
    each is named for what it is (neither is unpickled)."""
    p = tmp_path / "objects.npz"
    np.savez(p, header=np.array([{"format": FORMAT}], dtype=object))
    with pytest.raises(PolicyFileError, match="holds pickled Python objects, which cachegym "
                                              "never loads"):
        read_policy_file(p)
    torch = pytest.importorskip("torch")
    t = tmp_path / "model.npz"
    torch.save({"w": torch.zeros(2)}, t)
    with pytest.raises(PolicyFileError, match="it is a torch.save file, a pickle, which cachegym "
                                              "never loads"):
        read_policy_file(t)


def _deflated(src: Path, dst: Path, edit: Any = None) -> Path:
    """``src`` rewritten with its members deflated; ``edit(name, bytes) -> bytes`` changes a
    member's stored (compressed) bytes where given."""
    with zipfile.ZipFile(src) as z:
        members = {n: z.read(n) for n in z.namelist()}
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as z:
        for n, b in members.items():
            z.writestr(n, b)
    if edit is not None:
        raw = bytearray(dst.read_bytes())
        with zipfile.ZipFile(dst) as z:
            info = max(z.infolist(), key=lambda i: i.compress_size)
        start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
        raw[start:start + info.compress_size] = edit(info.filename, bytes(raw[start:start + info.compress_size]))
        dst.write_bytes(bytes(raw))
    return dst


def test_damage_any_reader_meets_is_a_policy_file_error(tmp_path: Path) -> None:
    """A helper's fuzzing found damage that escaped the typed error as zlib's, NumPy's header
    parser's (tokenize), or zipfile's own (an encrypted or unsupported entry): every failure of
    the read is now a PolicyFileError naming the file."""
    good = _deflated(GOLDEN, tmp_path / "good.npz")
    LearnedPolicy.load(good)  # (deflated members read as stored ones)

    def flip(_name: str, b: bytes) -> bytes:
        mid = len(b) // 2
        return b[:mid] + bytes([b[mid] ^ 0xFF]) + b[mid + 1:]

    with pytest.raises(PolicyFileError, match="truncated or corrupt"):
        LearnedPolicy.load(_deflated(GOLDEN, tmp_path / "flipped.npz", flip))
    raw = bytearray(good.read_bytes())  # the first central-directory entry: encrypted
    cd = raw.index(b"PK\x01\x02")
    raw[cd + 8] |= 0x01
    (tmp_path / "enc.npz").write_bytes(bytes(raw))
    with pytest.raises(PolicyFileError, match="truncated or corrupt"):
        LearnedPolicy.load(tmp_path / "enc.npz")


def test_weights_beyond_float32_and_unknown_or_huge_members_are_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Weights stored as float64 beyond float32's range loaded, and every score of the float32
    network was NaN (the decision always the first candidate); members that are not the header
    or weights, or that declare more bytes than a policy has, are refused before anything is
    decompressed (a 3 GiB zip bomb was inflated in full before)."""
    from cachegym.policies.learned import policy_file

    header, arrays = read_policy_file(save_policy_file(tmp_path / "v2.npz", *reversed(
        read_policy_file(GOLDEN))))
    big = dict(arrays, wo=np.full(arrays["wo"].shape, 1e300))  # (float64, as a writer may store)
    header.update(weights_sha256=weights_checksum(big))
    header.pop("sha256")
    header["sha256"] = file_checksum(header, big)
    blob = np.frombuffer(json.dumps(header, sort_keys=True).encode(), np.uint8)
    np.savez(tmp_path / "f64.npz", header=blob, **{f"w/{k}": v for k, v in big.items()})
    with pytest.raises(PolicyFileError, match="beyond float32's range"):
        read_policy_file(tmp_path / "f64.npz")
    with zipfile.ZipFile(tmp_path / "extra.npz", "w") as z:
        with zipfile.ZipFile(GOLDEN) as g:
            for n in g.namelist():
                z.writestr(n, g.read(n))
        z.writestr("zz.npy", b"\0" * 1000)
    with pytest.raises(PolicyFileError, match=r"unknown entries \['zz'\]"):
        read_policy_file(tmp_path / "extra.npz")
    monkeypatch.setattr(policy_file, "MAX_UNCOMPRESSED", 1000)
    with pytest.raises(PolicyFileError, match="decompressed, more than 1,000"):
        read_policy_file(GOLDEN)
    # a header of hundreds of MB of JSON (a 486 KB file; 2.5 GB to decode) is refused first
    monkeypatch.setattr(policy_file, "MAX_HEADER", 100)
    with pytest.raises(PolicyFileError, match="its header declares .* more than 100"):
        read_policy_file(GOLDEN)
    # ... and not let through by a small header first: np.load reads a name's last entry (a
    # helper's audit: a 40 MiB second header loaded, 259 MiB peak)
    monkeypatch.setattr(policy_file, "MAX_HEADER", 1 << 24)
    with zipfile.ZipFile(tmp_path / "twice.npz", "w") as z, zipfile.ZipFile(GOLDEN) as g:
        for n in g.namelist():
            z.writestr(n, g.read(n))
        with pytest.warns(UserWarning, match="Duplicate name"):
            z.writestr("header.npy", g.read("header.npy"))
    with pytest.raises(PolicyFileError, match=r"entries \['header.npy'\] appear more than once"):
        read_policy_file(tmp_path / "twice.npz")
