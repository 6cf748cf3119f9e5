"""Builds the compiled core (metadata lives in pyproject.toml).

The core's modules are ordinary Python files typed for Cython's pure-Python mode (each ``.py``
has a ``.pxd`` beside it with the native layout): where Cython and a C compiler are present they
are compiled from that one source; elsewhere the package installs and runs them interpreted,
with the same results.
"""

import os

from setuptools import Extension, setup

# the modules compiled from their .py (allocator/__init__.py names the same list for
# CACHEGYM_PURE_PYTHON=1, which runs them interpreted even where they are built)
# (named through the ``cachegym/`` folder, so that each is compiled as ``cachegym.allocator.pool``
# and the .pxd cimports resolve by those names)
CORE = ["cachegym/allocator/arena.py", "cachegym/allocator/cost.py", "cachegym/allocator/records.py",
        "cachegym/allocator/loop.py", "cachegym/allocator/pool.py", "cachegym/policies/kernels.py"]


def core_extensions() -> list[Extension]:
    if os.environ.get("CACHEGYM_NO_COMPILE", "") not in ("", "0"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:  # no Cython: the core runs interpreted
        return []
    exts = cythonize(
        CORE,
        # the .py's annotations are for mypy; the native types come from the .pxd files
        compiler_directives={"language_level": 3, "annotation_typing": False},
        quiet=True,
    )
    for e in exts:
        e.optional = True  # no compiler or headers: a warning, and the .py runs
    return exts


setup(ext_modules=core_extensions())
