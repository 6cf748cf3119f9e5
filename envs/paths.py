"""Where cachegym's own files are, from any working directory.

``PACKAGE_DIR`` is the ``cachegym`` package: its ``conf/`` (Hydra's configs) and ``data/`` (the
bundled traces) are package data, in a checkout and in an installed wheel alike.
``PROJECT_ROOT`` is the repository around it in a checkout (its ``tests/``, for the benchmarks
that replay the test suite's files); ``None`` in an installed wheel. Relative paths a user gives
(trace files in a config) are read from the working directory, then among the bundled files
(:func:`resolve_data_path`: ``data/traces/gpt.npz``, ``traces/gpt.npz`` and ``gpt.npz`` all name
the bundled trace where the working directory has no such file).
"""

from __future__ import annotations

import os

__all__ = ["CONF_DIR", "PACKAGE_DIR", "PROJECT_ROOT", "data_path", "golden_policy", "project_path",
           "resolve_data_path"]

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONF_DIR = os.path.join(PACKAGE_DIR, "conf")
_root = os.path.dirname(PACKAGE_DIR)
PROJECT_ROOT: str | None = _root if os.path.isdir(os.path.join(_root, "tests")) else None


def data_path(*parts: str) -> str:
    """The absolute path of ``parts`` among the bundled files (``data_path("traces", "gpt.npz")``)."""
    return os.path.join(PACKAGE_DIR, "data", *parts)


def project_path(*parts: str) -> str:
    """The absolute path of ``parts`` under the repository root of a checkout (``tests/...``);
    a :class:`FileNotFoundError` in an installed wheel, which has no tests."""
    if PROJECT_ROOT is None:
        what = os.path.join(*parts) if parts else "the repository root"
        raise FileNotFoundError(f"{what}: only in a checkout of cachegym's repository (this is an "
                                "installed package)")
    return os.path.join(PROJECT_ROOT, *parts)


def golden_policy(flag: str = "--policy") -> str:
    """The goldens' policy file (``tests/golden/policy.npz``), a benchmark's default policy; in
    an installed package, which has no tests, a :class:`ConfigError` asking for ``flag``."""
    from cachegym.allocator.errors import ConfigError

    try:
        return project_path("tests", "golden", "policy.npz")
    except FileNotFoundError:
        raise ConfigError(f"give {flag} PATH (an exported policy file): the default, "
                          "tests/golden/policy.npz, is in a checkout of the repository only") from None


def resolve_data_path(path: str) -> str:
    """``path`` if it exists (relative to the working directory: a file there always wins);
    else, for a relative path, the bundled file of that name (``data/traces/gpt.npz`` or
    ``traces/gpt.npz``, as the configs name the bundled traces, or a bare file name such as
    ``gpt.npz``, looked up among the bundled traces) if there is one; else ``path`` unchanged
    (the reader says it is missing)."""
    if os.path.exists(path) or os.path.isabs(path):
        return path
    parts = os.path.normpath(path).split(os.sep)
    if parts and parts[0] == "data":
        parts = parts[1:]
    candidates = [data_path(*parts)] if parts else []
    if len(parts) == 1 and parts[0] not in ("", os.curdir, os.pardir):
        candidates.append(data_path("traces", parts[0]))  # `cachegym sim gpt.npz ...`
    for bundled in candidates:
        if os.path.exists(bundled):
            return bundled
    return path
