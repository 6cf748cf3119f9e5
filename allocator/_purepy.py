"""``CACHEGYM_PURE_PYTHON=1``: run the core's modules from their ``.py`` source even where they
are compiled (Cython pure-Python mode builds ``allocator/X.py`` into an extension module of the
same name, which Python would otherwise import first). The same happens, with a warning, where a
compiled module's source changed after the build (:func:`stale`: an edited policy runs as
edited, interpreted, until it is rebuilt).

Installed by ``allocator/__init__`` before anything imports the core. It uses importlib's public
machinery only: for each name in :data:`CORE`, a spec that loads the ``.py`` in its package.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from types import ModuleType
from typing import Any

# the modules compiled from their .py (setup.py builds this list; CACHEGYM_PURE_PYTHON=1 runs them
# interpreted even where they are built). TYPED: the core and the guard's experts, each with a
# .pxd beside it (its native layout). PLAIN: the code every access runs beside the core (the
# policies' hooks, the view they read the pool through, the feature tracker, the guard, the
# prefetchers' successor predictor and copy timing, the network's wrapper), compiled
# as ordinary Python classes and functions: the same semantics, no interpreter loop (a Python
# subclass of a policy, e.g. the README's MRU, works as with the .py).
TYPED = ("cachegym.allocator.arena", "cachegym.allocator.cost", "cachegym.allocator.records",
         "cachegym.allocator.loop", "cachegym.allocator.pool", "cachegym.policies.kernels",
         "cachegym.policies.learned.models")
PLAIN = ("cachegym.allocator.seams", "cachegym.policies.base", "cachegym.policies.lru",
         "cachegym.policies.classic", "cachegym.policies.adaptive", "cachegym.policies.priority",
         "cachegym.policies.lirs", "cachegym.policies.shadow", "cachegym.policies.features",
         "cachegym.policies.prefetch", "cachegym.policies.learned.guards",
         "cachegym.policies.learned.policy",
         "cachegym.policies.learned.prefetch_head", "cachegym.policies.learned.network",
         "cachegym.policies.successors", "cachegym.allocator.prefetch_timing")
CORE = TYPED + PLAIN


_HERE = os.path.dirname(os.path.abspath(__file__))  # allocator/
_PACKAGE = os.path.dirname(_HERE)  # cachegym/


def requested() -> bool:
    return os.environ.get("CACHEGYM_PURE_PYTHON", "") not in ("", "0")


def source_hash(stem: str) -> str:
    """SHA-256 of a module's ``.py`` and, where there is one, its ``.pxd`` (``stem``: the path
    without the suffix), as setup.py's build records it."""
    h = hashlib.sha256()
    for suffix in (".py", ".pxd"):
        if os.path.exists(stem + suffix):
            with open(stem + suffix, "rb") as f:
                h.update(suffix.encode() + b"\0" + f.read())
    return h.hexdigest()


def stale(record: str | None = None) -> list[str]:
    """The compiled modules whose source differs from the one they were built from, by the
    build's record (``allocator/_built.json``, written by setup.py's build_ext; none where
    nothing was built, or where the record cannot be read)."""
    record = os.path.join(_HERE, "_built.json") if record is None else record
    try:
        with open(record) as f:
            built = json.load(f)
    except (OSError, ValueError):
        return []
    if not isinstance(built, dict):
        return []
    return [name for name in CORE if name in built
            and source_hash(os.path.join(_PACKAGE, *name.split(".")[1:])) != built[name]]


def check_build() -> None:
    """Where a compiled module is stale (:func:`stale`), warn and run the core from its source."""
    changed = stale()
    if changed:
        warnings.warn(f"cachegym: {', '.join(changed)} changed after it was compiled; running the "
                      "core interpreted (the same results, slower) until it is rebuilt: `make "
                      "install`, or `python setup.py build_ext --inplace` in the checkout",
                      RuntimeWarning, stacklevel=3)
        install()
    elif not compiled_here():
        warnings.warn(f"cachegym: the core is not compiled in {_PACKAGE} (no build there, or no "
                      "compiler where it was installed): it runs interpreted, the same results "
                      "10-40x slower; build it with `make install` in a checkout (`pip install -e "
                      ".`), or set CACHEGYM_PURE_PYTHON=1 to run it interpreted without this "
                      "warning", RuntimeWarning, stacklevel=3)


def compiled_here() -> bool:
    """Whether the access loop's compiled module is beside its source (a build ran here)."""
    return any(os.path.exists(os.path.join(_HERE, "loop" + suffix))
               for suffix in importlib.machinery.EXTENSION_SUFFIXES)


class _SourceFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in CORE:
            return None
        src = os.path.join(_PACKAGE, *fullname.split(".")[1:]) + ".py"
        loader = importlib.machinery.SourceFileLoader(fullname, src)
        return importlib.util.spec_from_file_location(fullname, src, loader=loader)


def install() -> None:
    """Put the source finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder())
