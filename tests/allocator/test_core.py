"""The compiled core is the .py source compiled, nothing else: setup.py compiles exactly the
modules that ``CACHEGYM_PURE_PYTHON=1`` runs interpreted, that switch really loads the .py, and a
built extension is never older than the source it was compiled from."""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cachegym.allocator import _purepy

ROOT = Path(__file__).resolve().parents[2]


def setup_core() -> list[str]:
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "CORE" for t in node.targets):
            return [str(v) for v in ast.literal_eval(node.value)]
    raise AssertionError("setup.py has no CORE list")


def test_setup_compiles_exactly_the_modules_pure_mode_interprets() -> None:
    as_modules = [p.removesuffix(".py").replace("/", ".") for p in setup_core()]
    assert sorted(as_modules) == sorted(_purepy.CORE)
    for name in _purepy.CORE:
        pkg, _, mod = name.rpartition(".")
        assert (ROOT / pkg.replace(".", "/") / f"{mod}.py").is_file()
        assert (ROOT / pkg.replace(".", "/") / f"{mod}.pxd").is_file(), f"{name} has no .pxd (its native layout)"


def test_pure_mode_loads_every_core_module_from_its_source() -> None:
    code = ("import json, importlib, cachegym.allocator; mods = [importlib.import_module(m) for m in "
            f"{list(_purepy.CORE)!r}]; print(json.dumps([m.__file__ for m in mods]))")
    env = dict(os.environ, CACHEGYM_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    paths = json.loads(out.splitlines()[-1])
    assert len(paths) == len(_purepy.CORE) and all(p.endswith(".py") for p in paths), paths


@pytest.mark.skipif(os.environ.get("CACHEGYM_PURE_PYTHON", "") not in ("", "0"),
                    reason="runs the core interpreted: no extension module is loaded")
def test_a_compiled_module_is_not_older_than_its_source() -> None:
    """A checkout whose .py changed after the build would run old code: ``make install``
    rebuilds (the Makefile's .built target), as does ``pip install -e .``."""
    for name in _purepy.CORE:
        m = importlib.import_module(name)
        if m.__file__ is None or m.__file__.endswith(".py"):
            continue  # no compiler where it was installed: the .py runs, nothing can be stale
        built = os.path.getmtime(m.__file__)
        pkg, _, mod = name.rpartition(".")
        for ext in (".py", ".pxd"):
            src = ROOT / pkg.replace(".", "/") / f"{mod}{ext}"
            assert os.path.getmtime(src) <= built, (
                f"{m.__file__} was built before {src} last changed: rebuild with `make install` "
                "or `python setup.py build_ext --inplace`")
