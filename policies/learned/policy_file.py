"""The policy file: one self-describing file, loaded with NumPy alone.

File format (``.npz``, no pickle)::

    header      uint8 array: UTF-8 JSON object (see below)
    w/<name>    float32 weight arrays of the network

The header holds ``format`` (``"cachegym-policy"``), ``format_version``, ``task``
(``"evict"``), ``arch`` (``{"type": "candidate_mlp", "n_features", "n_globals", "hidden",
"activation"}``), ``feature_spec`` (exactly :func:`policies.features.feature_spec` of the code
that trained it: names, order, normalisation), ``K`` and ``candidate_rule`` (how the candidate
set is drawn), ``library_version``, ``config_sha256`` (hash of the training config),
``weights_sha256`` (checksum of every weight array: name, dtype, shape and bytes) and free-form
``meta``. Input normalisation is folded into the first layer at export, so the file's network
reads raw feature values.

A file that is truncated or corrupt, whose checksum does not match, or whose feature
specification differs from the running code's is refused with
:class:`~allocator.errors.PolicyFileError` naming what differs.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np

from allocator.errors import PolicyFileError
from allocator.trace import not_a_zip_archive, too_short_for_zip

__all__ = ["FORMAT", "FORMAT_VERSION", "save_policy_file", "read_policy_file", "weights_checksum",
           "diff_feature_spec"]

FORMAT = "cachegym-policy"
FORMAT_VERSION = 1


def weights_checksum(arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 over every array's name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def save_policy_file(path: str | os.PathLike[str], arrays: Mapping[str, np.ndarray],
                     header: Mapping[str, Any]) -> str:
    """Write ``arrays`` (network weights) and ``header`` as one policy file; returns the path.
    ``format``, ``format_version`` and ``weights_sha256`` are filled in here."""
    p = os.fspath(path)
    if not p.endswith(".npz"):
        p += ".npz"
    arrs = {k: np.ascontiguousarray(v, np.float32) for k, v in arrays.items()}
    hdr = dict(header)
    hdr.update(format=FORMAT, format_version=FORMAT_VERSION, weights_sha256=weights_checksum(arrs))
    blob = np.frombuffer(json.dumps(hdr, sort_keys=True).encode(), np.uint8)
    d = os.path.dirname(p)
    if d:
        os.makedirs(d, exist_ok=True)
    tmp = p + ".tmp.npz"
    np.savez(tmp, header=blob, **{f"w/{k}": v for k, v in arrs.items()})  # type: ignore[arg-type]
    os.replace(tmp, p)
    return p


def read_policy_file(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read and verify a policy file: ``(header, weight arrays)``. Checks that it is complete,
    uncorrupted (zip CRCs and the weights' checksum) and of a known format version; the feature
    specification is checked by :meth:`LearnedPolicy.load`."""
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise PolicyFileError(f"policy file {p}: no such file (export one with scripts/export.py)")
    if not_a_zip_archive(p):
        onnx = " (an ONNX model is for serving outside cachegym)" if p.lower().endswith(".onnx") else ""
        raise PolicyFileError(f"policy file {p} is not a cachegym policy file (the .npz zip archive "
                              f"that scripts/export.py or training writes){onnx}; give that file")
    short = too_short_for_zip(p)
    if short is not None:
        raise PolicyFileError(f"policy file {p} has only {short} bytes: empty or truncated; export it again")
    try:
        with np.load(p, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError) as e:
        raise PolicyFileError(
            f"policy file {p} is truncated or corrupt ({type(e).__name__}: {e}); export it again"
        ) from None
    if "header" not in data:
        raise PolicyFileError(f"policy file {p} has no header: not a cachegym policy file")
    try:
        header = json.loads(data.pop("header").tobytes().decode())
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
    except (ValueError, UnicodeDecodeError) as e:
        raise PolicyFileError(f"policy file {p}: corrupt header ({e})") from None
    if header.get("format") != FORMAT:
        raise PolicyFileError(f"policy file {p}: format is {header.get('format')!r}, not {FORMAT!r}")
    if header.get("format_version") != FORMAT_VERSION:
        raise PolicyFileError(
            f"policy file {p}: format version {header.get('format_version')!r}, this code reads "
            f"version {FORMAT_VERSION}; export the policy again with this version")
    arrays = {k[2:]: v for k, v in data.items() if k.startswith("w/")}
    got = weights_checksum(arrays)
    if got != header.get("weights_sha256"):
        raise PolicyFileError(
            f"policy file {p}: weights checksum mismatch (header {header.get('weights_sha256')}, "
            f"arrays {got}): the file is corrupt; export it again")
    return header, arrays


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
