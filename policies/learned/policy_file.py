"""The policy file: one self-describing file, loaded with NumPy alone.

File format (``.npz``, no pickle)::

    header      uint8 array: UTF-8 JSON object (see below)
    w/<name>    float32 weight arrays of the network

The header holds ``format`` (``"cachegym-policy"``), ``format_version``, ``task``
(``"evict"``), ``arch`` (``{"type": "candidate_mlp", "n_features", "n_globals", "hidden",
"activation"}``), ``feature_spec`` (exactly :func:`policies.features.feature_spec` of the code
that trained it: names, order, normalisation), ``K`` and ``candidate_rule`` (how the candidate
set is drawn), ``library_version``, ``config_sha256`` (hash of the training config),
``weights_sha256`` (checksum of every weight array: name, dtype, shape and bytes), ``sha256``
(version 2: checksum of the header without this field and of the weights) and free-form
``meta``. Input normalisation is folded into the first layer at export, so the file's network
reads raw feature values.

Optional ``prefetch`` (a joint policy's second head, :data:`PREFETCH_PREFIX` weights)::

    prefetch    {"arch": {as above}, "K": candidates per decision, "opportunity": "miss" |
                 "access" | N (when it is asked: after a demand miss, after every access, every
                 N accesses), "predictor": {"depth", "width", "hops"} and optionally
                 "horizon", "memory" (the policies.successors.SuccessorPredictor that proposes
                 its candidates; with a horizon, its aligned history)}
    w/p/<name>  its weights (the layout of the eviction scorer's), and w/p/noop (1,): the score
                of prefetching nothing

A file without it (every file written before it existed) loads and prefetches nothing; a
``prefetch`` section whose weights are not exactly those its ``arch`` declares, or weights of a
prefetch head without the section, are refused naming the head.

The whole file is validated on load, since it comes from outside: every header field's type and
range (``K`` in 1..:data:`~policies.features.MAX_K`, ``candidate_rule`` one of
:data:`~policies.features.RULES`, widths and depth bounded), the weight arrays exactly those the
``arch`` names, of the shapes it and the feature specification declare, and finite. A file that
is truncated or corrupt, whose checksum does not match, that fails any of these checks, or whose
feature specification differs from the running code's is refused with
:class:`~allocator.errors.PolicyFileError` naming the field. Version 1 files (no header
checksum) still load when valid, with a logged warning that their header is unchecked.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import zipfile
from collections.abc import Mapping
from typing import Any, NoReturn

import numpy as np

from cachegym.allocator.errors import ConfigError, PolicyFileError
from cachegym.allocator.files import file_to_write, replace_atomically
from cachegym.allocator.trace import not_a_zip_archive, too_short_for_zip
from cachegym.policies.features import MAX_K, RULES
from cachegym.policies.successors import MAX_HORIZON

# the keys of a prefetch head's predictor: the successor table, and with the aligned history
_PREDICTOR_KEYS = ({"depth", "width", "hops"}, {"depth", "width", "hops", "horizon", "memory"})

__all__ = ["FORMAT", "FORMAT_VERSION", "PREFETCH_PREFIX", "PREFETCH_OPPORTUNITIES", "split_heads", "save_policy_file", "read_policy_file", "weights_checksum",
           "file_checksum", "check_policy", "diff_feature_spec"]

log = logging.getLogger(__name__)
_unchecked_warned: set[str] = set()  # version-1 files already warned about (once per path)

FORMAT = "cachegym-policy"
FORMAT_VERSION = 2
"""Version 2 adds ``sha256`` over header and weights; version 1 files are still read."""
_READS = (1, 2)
MAX_WIDTH = 4096
"""Widest hidden layer, and most features or globals, a policy file may declare."""
MAX_LAYERS = 8
"""Most hidden layers a policy file may declare."""
PREFETCH_PREFIX = "p/"
"""Name prefix of the prefetch head's weight arrays (``w/p/wc`` in the file)."""
PREFETCH_OPPORTUNITIES = ("miss", "access")
"""When a deployed prefetch head is asked (or an int N: every N accesses); ``"step"`` needs the
trace's step marks, which a pool serving real work does not have."""


def split_heads(arrays: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``(eviction weights, prefetch weights)`` of a file's arrays, the prefix stripped from the
    second (empty without a prefetch head)."""
    n = len(PREFETCH_PREFIX)
    return ({k: v for k, v in arrays.items() if not k.startswith(PREFETCH_PREFIX)},
            {k[n:]: v for k, v in arrays.items() if k.startswith(PREFETCH_PREFIX)})


def weights_checksum(arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 over every array's name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def file_checksum(header: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 over the header (canonical JSON, without its ``sha256`` field) and the weights."""
    rest = {k: v for k, v in header.items() if k != "sha256"}
    h = hashlib.sha256(json.dumps(rest, sort_keys=True).encode())
    h.update(b"|" + weights_checksum(arrays).encode())
    return h.hexdigest()


def save_policy_file(path: str | os.PathLike[str], arrays: Mapping[str, np.ndarray],
                     header: Mapping[str, Any]) -> str:
    """Write ``arrays`` (network weights) and ``header`` as one policy file; returns the path.
    ``format``, ``format_version``, ``weights_sha256`` and ``sha256`` are filled in here; the
    file is validated as :func:`read_policy_file` does before it is written."""
    p = file_to_write(path, ".npz")
    arrs = {k: np.ascontiguousarray(v, np.float32) for k, v in arrays.items()}
    hdr = dict(header)
    try:
        json.dumps(hdr, sort_keys=True)
    except (TypeError, ValueError) as e:  # (a NumPy scalar, an array, a set, NaN is allowed)
        raise ConfigError(f"save_policy_file: the header holds a value JSON cannot store ({e}); "
                          "give plain Python values (int(x), float(x), arr.tolist())") from None
    hdr.update(format=FORMAT, format_version=FORMAT_VERSION, weights_sha256=weights_checksum(arrs))
    hdr.pop("sha256", None)
    hdr["sha256"] = file_checksum(hdr, arrs)
    check_policy(p, hdr, arrs)
    blob = np.frombuffer(json.dumps(hdr, sort_keys=True).encode(), np.uint8)
    d = os.path.dirname(p)
    if d:
        os.makedirs(d, exist_ok=True)
    # written whole (a temporary file beside it, then renamed): a failed write leaves an older
    # file at p as it was, and nothing else behind
    return replace_atomically(p, lambda f: np.savez(f, header=blob, **{  # type: ignore[arg-type]
        f"w/{k}": v for k, v in arrs.items()}), binary=True)


def read_policy_file(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read and verify a policy file: ``(header, weight arrays)``. Checks that it is complete,
    uncorrupted (zip CRCs and the weights' checksum) and of a known format version; the feature
    specification is checked by :meth:`LearnedPolicy.load`. ``~`` is the user's home, as on
    the command line."""
    p = os.path.expanduser(os.fspath(path))
    if os.path.isdir(p):
        raise PolicyFileError(f"policy file {p} is a directory; give the policy file in it (a "
                              "training run writes policy.npz)")
    if os.path.exists(p) and not os.path.isfile(p):
        raise PolicyFileError(f"policy file {p} is not a regular file (a pipe or a device?); give "
                              "the policy file itself")
    if not os.path.isfile(p):
        raise PolicyFileError(f"policy file {p}: no such file (export one with scripts/export.py)")
    if not_a_zip_archive(p):
        onnx = " (an ONNX model is for serving outside cachegym)" if p.lower().endswith(".onnx") else ""
        raise PolicyFileError(f"policy file {p} is not a cachegym policy file (the .npz zip archive "
                              f"that scripts/export.py or training writes){onnx}; give that file")
    short = too_short_for_zip(p)
    if short is not None:
        raise PolicyFileError(f"policy file {p} is truncated or corrupt (only {short} bytes, "
                              "less than any zip archive); export it again")
    _check_members(p)
    try:
        with np.load(p, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except MemoryError:
        raise PolicyFileError(f"policy file {p} declares an array larger than memory: it is "
                              "corrupt or not a cachegym policy file; export it again") from None
    except Exception as e:  # the zip's or a member's damage, whatever reader meets it (zlib,
        # lzma, NumPy's header parser, an unsupported or encrypted entry): never a traceback
        if isinstance(e, ValueError) and "allow_pickle" in str(e):
            raise PolicyFileError(
                f"policy file {p} holds pickled Python objects, which cachegym never loads (a "
                "file would run code): not a cachegym policy file (its arrays are plain numbers); "
                "export the policy with cachegym export or scripts/export.py") from None
        raise PolicyFileError(
            f"policy file {p} is truncated or corrupt ({type(e).__name__}: {e}); export it again"
        ) from None
    odd = sorted(k for k, v in data.items() if not isinstance(v, np.ndarray))
    if odd:  # (np.load gives the raw bytes of a member that is not in .npy format)
        raise PolicyFileError(f"policy file {p}: entries {odd} are not NumPy arrays (.npy): the "
                              "file is corrupt or not a cachegym policy file; export it again")
    try:
        header = json.loads(data.pop("header").tobytes().decode())
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
    except (ValueError, UnicodeDecodeError, RecursionError, MemoryError) as e:
        raise PolicyFileError(f"policy file {p}: corrupt header ({type(e).__name__}: {e})") from None
    if header.get("format") != FORMAT:
        raise PolicyFileError(f"policy file {p}: format is {header.get('format')!r}, not {FORMAT!r}")
    version = header.get("format_version")
    if type(version) is not int or version not in _READS:
        raise PolicyFileError(
            f"policy file {p}: format version {version!r}, this code reads versions "
            f"{list(_READS)}; export the policy again with this version")
    arrays = {k[2:]: v for k, v in data.items()}  # (the members' names: _check_members)
    got = weights_checksum(arrays)
    if got != header.get("weights_sha256"):
        raise PolicyFileError(
            f"policy file {p}: weights checksum mismatch (header {header.get('weights_sha256')}, "
            f"arrays {got}): the file is corrupt; export it again")
    if version >= 2:
        whole = file_checksum(header, arrays)
        if whole != header.get("sha256"):
            raise PolicyFileError(
                f"policy file {p}: header checksum mismatch (field 'sha256' is "
                f"{header.get('sha256')!r}, header and weights give {whole}): the header was "
                "edited or is corrupt; export it again")
    elif p not in _unchecked_warned:
        _unchecked_warned.add(p)
        log.warning("policy file %s: format version 1 has no header checksum, so its header is "
                    "unchecked (its fields are validated, its weights checksummed); export it "
                    "again to add one", p)
    check_policy(p, header, arrays)
    return header, arrays


MAX_UNCOMPRESSED = 2**30
"""The most bytes a policy file's members may hold once decompressed (a policy is a few MB): a
file declaring more is refused before anything is decompressed (a zip bomb)."""

MAX_HEADER = 2**24
"""The most bytes a policy file's header (JSON) may hold once decompressed (a header is a few
KB; a 486 KB file whose header held 500 MB of JSON took 2.5 GB to decode before its refusal)."""


def _check_members(p: str) -> None:
    """Refuse, before decompressing anything, a policy file whose members are not ``header.npy``
    and ``w/*.npy`` or declare more than :data:`MAX_UNCOMPRESSED` bytes in all (a damaged
    directory is left to the read, which names it)."""
    try:
        with zipfile.ZipFile(p) as zf:
            infos = zf.infolist()
    except Exception:  # (reported by the read that follows, with what it meets)
        return
    names = [i.filename for i in infos]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:  # (np.load reads the last of a name, these checks would measure the first)
        raise PolicyFileError(f"policy file {p}: entries {twice} appear more than once: not a "
                              "file save_policy_file or cachegym export writes")
    if "header.npy" not in names:
        raise PolicyFileError(f"policy file {p} has no header: not a cachegym policy file"
                              f"{_sb3_hint(p)}")
    other = sorted(n.removesuffix(".npy") for n in names  # (as np.load names them)
                   if not (n == "header.npy" or (n.startswith("w/") and n.endswith(".npy"))))
    if other:
        raise PolicyFileError(f"policy file {p}: unknown entries {other} (a policy file holds "
                              "header and w/<name> weight arrays only)")
    head = next(i.file_size for i in infos if i.filename == "header.npy")
    if head > MAX_HEADER:  # (json would decode all of it first)
        raise PolicyFileError(f"policy file {p}: its header declares {head:,} bytes once "
                              f"decompressed, more than {MAX_HEADER:,}: not a policy file (a "
                              "header is a few KB)")
    total = sum(i.file_size for i in infos)
    if total > MAX_UNCOMPRESSED:
        raise PolicyFileError(f"policy file {p}: its entries declare {total:,} bytes once "
                              f"decompressed, more than {MAX_UNCOMPRESSED:,}: not a policy file "
                              "(a policy is a few MB)")


def _sb3_hint(p: str) -> str:
    """Advice for a stable-baselines3 model zip or a ``torch.save`` file given as a policy file
    ('' for another file)."""
    try:
        with zipfile.ZipFile(p) as z:
            names = set(z.namelist())
    except (zipfile.BadZipFile, OSError):
        return ""
    if any(n == "data.pkl" or n.endswith("/data.pkl") for n in names):
        return (" (it is a torch.save file, a pickle, which cachegym never loads: export a "
                "scorer network with cachegym.policies.training.export.export_policy(net, "
                "'policy.npz', K=...), an SB3 model with cachegym.policies.training.export_model"
                "(model, 'policy.npz'), or its saved zip with cachegym export)")
    if "policy.pth" not in names or "data" not in names:
        return ""
    return (" (it is a stable-baselines3 model zip: export it first, cachegym export "
            f"{p} --algo maskable_ppo --out policy.npz (--algo: the SB3 algorithm it was "
            "trained with), and give that file)")


def check_policy(p: str, header: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
    """Refuse (:class:`PolicyFileError` naming the field) a header field of the wrong type or
    range, or weight arrays that are not exactly those ``arch`` declares (names, shapes from
    ``arch`` and the feature specification's lengths, finite float values)."""

    def fail(field: str, problem: str) -> NoReturn:
        raise PolicyFileError(f"policy file {p}: header field {field!r} {problem}; export the "
                              "policy again (scripts/export.py)")

    def count(v: Any, lo: int, hi: int) -> bool:
        return type(v) is int and lo <= v <= hi

    if not isinstance(header.get("task", "evict"), str):
        fail("task", f"must be a string, got {header.get('task')!r}")
    if not count(header.get("K"), 1, MAX_K):
        fail("K", f"must be an int in 1..{MAX_K} (candidates per decision), got {header.get('K')!r}")
    if header.get("candidate_rule", "lru") not in RULES:
        fail("candidate_rule", f"must be one of {list(RULES)}, got {header.get('candidate_rule')!r}")
    for f in ("library_version", "config_sha256"):
        if f in header and not isinstance(header[f], str):
            fail(f, f"must be a string, got {header[f]!r}")
    if not isinstance(header.get("meta", {}), dict):
        fail("meta", f"must be a JSON object, got {type(header.get('meta')).__name__}")
    spec = header.get("feature_spec")
    if not isinstance(spec, dict):
        fail("feature_spec", f"must be a JSON object, got {type(spec).__name__}")
    for f in ("features", "globals"):
        if not isinstance(spec.get(f), list):
            fail(f"feature_spec.{f}", "must be a list of names")
    shapes = _head_shapes(fail, "arch", header.get("arch"), spec)
    pf = header.get("prefetch")
    if pf is not None:
        if not isinstance(pf, dict):
            fail("prefetch", f"must be a JSON object (the prefetch head), got {type(pf).__name__}")
        if not count(pf.get("K"), 1, MAX_K):
            fail("prefetch.K", f"must be an int in 1..{MAX_K}, got {pf.get('K')!r}")
        opp = pf.get("opportunity")
        if not (opp in PREFETCH_OPPORTUNITIES or count(opp, 1, 2**31)):
            fail("prefetch.opportunity", f"must be one of {list(PREFETCH_OPPORTUNITIES)} or an int "
                 f">= 1, got {opp!r}")
        pred = pf.get("predictor")
        if not (isinstance(pred, dict) and set(pred) in _PREDICTOR_KEYS
                and all(count(pred[k], 1, MAX_K) for k in ("depth", "width", "hops"))
                and ("horizon" not in pred or (count(pred["horizon"], 1, MAX_HORIZON)
                                              and count(pred["memory"], 2 * pred["horizon"], 2**40)))):
            fail("prefetch.predictor", f"must be {{depth, width, hops}} ints in 1..{MAX_K}, and "
                 f"optionally horizon in 1..{MAX_HORIZON} with memory >= 2 * horizon, got {pred!r}")
        head = _head_shapes(fail, "prefetch.arch", pf.get("arch"), spec)
        head["noop"] = (1,)
        shapes.update({PREFETCH_PREFIX + k: v for k, v in head.items()})
    missing, extra = sorted(set(shapes) - set(arrays)), sorted(set(arrays) - set(shapes))
    if missing or extra:
        pre = [k for k in missing + extra if k.startswith(PREFETCH_PREFIX)]
        if pre:
            what = ("the prefetch head's weights do not match prefetch.arch "
                    f"{(pf or {}).get('arch', {}).get('hidden')}" if pf is not None else
                    "it holds weights of a prefetch head but no 'prefetch' header section")
        else:
            what = f"the weights do not match arch.hidden {header['arch']['hidden']}"
        raise PolicyFileError(f"policy file {p}: {what}: missing {missing}, unexpected {extra}; "
                              "export the policy again")
    for name, shape in shapes.items():
        a = arrays[name]
        if a.shape != shape or a.dtype.kind != "f":
            raise PolicyFileError(f"policy file {p}: weight array {name!r} has shape {a.shape} and "
                                  f"dtype {a.dtype}, arch and feature specification declare float "
                                  f"{shape}; export the policy again")
        if not np.isfinite(a).all():
            raise PolicyFileError(f"policy file {p}: weight array {name!r} holds "
                                  f"{int((~np.isfinite(a)).sum())} NaN or infinite value(s); "
                                  "the network that wrote it diverged: retrain it")
        with np.errstate(over="ignore"):  # (the forward pass runs in float32)
            a32 = a.astype(np.float32)
        if not np.isfinite(a32).all():
            raise PolicyFileError(f"policy file {p}: weight array {name!r} holds "
                                  f"{int((~np.isfinite(a32)).sum())} value(s) beyond float32's "
                                  "range, in which the network runs; export the policy again")
    for prefix in ("", PREFETCH_PREFIX) if pf is not None else ("",):
        bound = _forward_bound(arrays, prefix)
        if not bound < _FLOAT32_SAFE:
            raise PolicyFileError(f"policy file {p}: the {'prefetch head' if prefix else 'network'}"
                                  f"'s weights can take its sums to {bound:.3g} on features in "
                                  "[0, 1], beyond float32's range, in which it runs (its scores "
                                  "would be NaN or infinite): the network that wrote it diverged; "
                                  "retrain it")


_FLOAT32_SAFE = float(np.finfo(np.float32).max) / 16  # (room for the float32 sums' rounding)


def _forward_bound(arrays: Mapping[str, np.ndarray], prefix: str) -> float:
    """The largest magnitude any sum of the forward pass (:class:`CandidateScorer`'s ReLU
    MLP) can reach on inputs in [0, 1] (every feature and global is), by interval arithmetic in
    float64: each layer's outputs lie in [0, hi] after the ReLU, so a unit's partial sums are at
    most ``|W|.T @ hi + |b|``."""
    w = np.abs(np.concatenate([arrays[prefix + "wc"], arrays[prefix + "wg"]]).astype(np.float64))
    hi = w.sum(axis=0) + np.abs(arrays[prefix + "b0"].astype(np.float64))
    worst = float(hi.max(initial=0.0))
    i = 1
    while prefix + f"w{i}" in arrays:
        w = np.abs(arrays[prefix + f"w{i}"].astype(np.float64))
        hi = hi @ w + np.abs(arrays[prefix + f"b{i}"].astype(np.float64))
        worst = max(worst, float(hi.max(initial=0.0)))
        i += 1
    out = float(hi @ np.abs(arrays[prefix + "wo"].astype(np.float64)))
    return max(worst, out + float(np.abs(arrays[prefix + "bo"].astype(np.float64)).max()))


def _head_shapes(fail: Any, field: str, arch: Any, spec: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """The weight arrays' shapes a candidate scorer's ``arch`` (header field ``field``) declares,
    after checking it against the feature specification ``spec``."""

    def count(v: Any, lo: int, hi: int) -> bool:
        return type(v) is int and lo <= v <= hi

    if not isinstance(arch, dict):
        fail(field, f"must be a JSON object, got {type(arch).__name__}")
    if arch.get("type") != "candidate_mlp":
        fail(f"{field}.type", f"must be 'candidate_mlp', got {arch.get('type')!r}")
    if arch.get("activation", "relu") != "relu":
        fail(f"{field}.activation", f"must be 'relu', got {arch.get('activation')!r}")
    nf, ng, hidden = arch.get("n_features"), arch.get("n_globals"), arch.get("hidden")
    if nf != len(spec["features"]) or not count(nf, 1, MAX_WIDTH):
        fail(f"{field}.n_features", f"is {nf!r}, but the feature specification names "
             f"{len(spec['features'])} features")
    if ng != len(spec["globals"]) or not count(ng, 1, MAX_WIDTH):
        fail(f"{field}.n_globals", f"is {ng!r}, but the feature specification names "
             f"{len(spec['globals'])} globals")
    if not (isinstance(hidden, list) and 1 <= len(hidden) <= MAX_LAYERS
            and all(count(h, 1, MAX_WIDTH) for h in hidden)):
        fail(f"{field}.hidden", f"must be a list of 1..{MAX_LAYERS} widths in 1..{MAX_WIDTH}, got {hidden!r}")
    shapes: dict[str, tuple[int, ...]] = {"wc": (nf, hidden[0]), "wg": (ng, hidden[0]),
                                          "b0": (hidden[0],), "wo": (hidden[-1],), "bo": (1,)}
    for i in range(1, len(hidden)):
        shapes[f"w{i}"], shapes[f"b{i}"] = (hidden[i - 1], hidden[i]), (hidden[i],)
    return shapes


def diff_feature_spec(file_spec: Mapping[str, Any], code_spec: Mapping[str, Any]) -> list[str]:
    """Human-readable differences between two feature specifications (empty when equal)."""
    out: list[str] = []
    for key in sorted(set(file_spec) | set(code_spec)):
        a, b = file_spec.get(key), code_spec.get(key)
        if a == b:
            continue
        if isinstance(a, list) and isinstance(b, list):
            missing = [x for x in b if x not in a]
            extra = [x for x in a if x not in b]
            if missing or extra:
                out.append(f"{key}: the file lacks {missing} and has extra {extra}")
            elif len(a) == len(b):
                i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
                out.append(f"{key}: differ at position {i}: file {a[i]!r}, code {b[i]!r}")
            else:
                out.append(f"{key}: file has {len(a)} entries, code {len(b)}")
        elif isinstance(a, dict) and isinstance(b, dict):
            out += [f"{key}.{d}" for d in diff_feature_spec(a, b)]
        else:
            out.append(f"{key}: file {a!r}, code {b!r}")
    return out
