"""``load_script(name)``: ``scripts/<name>.py`` as a module, for the tests of the scripts (the
scripts are not a package: each is a file run by path)."""

from __future__ import annotations

import importlib.util
import os
from types import ModuleType

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")


def load_script(name: str) -> ModuleType:
    """A fresh module made from ``scripts/<name>.py``."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(SCRIPTS, f"{name}.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
