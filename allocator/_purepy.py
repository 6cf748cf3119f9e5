"""``CACHEGYM_PURE_PYTHON=1``: run the core's modules from their ``.py`` source even where they
are compiled (Cython pure-Python mode builds ``allocator/X.py`` into an extension module of the
same name, which Python would otherwise import first).

Installed by ``allocator/__init__`` before anything imports the core. It uses importlib's public
machinery only: for each name in :data:`CORE`, a spec that loads the ``.py`` in its package.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType
from typing import Any

# the modules setup.py compiles, TYPED and PLAIN (keep the lists equal: tests/allocator/test_core.py
# checks)
CORE = ("cachegym.allocator.arena", "cachegym.allocator.cost", "cachegym.allocator.records",
        "cachegym.allocator.loop", "cachegym.allocator.pool", "cachegym.policies.kernels",
        "cachegym.allocator.seams", "cachegym.policies.base", "cachegym.policies.lru",
        "cachegym.policies.classic", "cachegym.policies.adaptive", "cachegym.policies.priority",
        "cachegym.policies.lirs", "cachegym.policies.shadow", "cachegym.policies.features",
        "cachegym.policies.prefetch", "cachegym.policies.learned.models",
        "cachegym.policies.learned.guards", "cachegym.policies.learned.policy",
        "cachegym.policies.learned.prefetch_head")


def requested() -> bool:
    return os.environ.get("CACHEGYM_PURE_PYTHON", "") not in ("", "0")


class _SourceFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in CORE:
            return None
        package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # cachegym/
        src = os.path.join(package, *fullname.split(".")[1:]) + ".py"
        loader = importlib.machinery.SourceFileLoader(fullname, src)
        return importlib.util.spec_from_file_location(fullname, src, loader=loader)


def install() -> None:
    """Put the source finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder())
