"""Builds the compiled core (metadata lives in pyproject.toml).

The core's modules (allocator/_purepy.py lists them) are ordinary Python files, typed for Cython's
pure-Python mode (``TYPED``: each ``.py`` has a ``.pxd`` beside it with the native layout) or
compiled as they are (``PLAIN``): where Cython and a C compiler are present they are compiled from
that one source; elsewhere the package installs and runs them interpreted, with the same results.
"""

import importlib.util
import json
import os
import sys
from types import ModuleType

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def _vector_flags() -> list[str]:
    """``-mavx2`` where the build machine's CPU has AVX2 (x86-64 Linux; ``CACHEGYM_PORTABLE=1``
    builds for any x86-64): the forward pass's sums run eight floats a vector instead of four
    (``python scripts/bench.py decision``: about 1.6x faster). Results do not change: AVX2 adds no
    fused multiply-add (that is FMA, not enabled), so every product and sum is rounded as in the
    baseline build and as in the interpreted source (``-ffp-contract=off`` on the kernels). The
    core is built where it runs (``make install``); a build copied to a CPU without AVX2 would stop
    with an illegal instruction: build it there, or with ``CACHEGYM_PORTABLE=1``."""
    if os.environ.get("CACHEGYM_PORTABLE", "") not in ("", "0"):
        return []
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:  # not Linux: the compiler's default target
        return []
    return ["-mavx2"] if "avx2" in flags else []


def _purepy() -> ModuleType:
    """allocator/_purepy.py (standard library only), loaded by path: its ``source_hash`` is the
    one the record is checked with."""
    spec = importlib.util.spec_from_file_location("_cachegym_purepy", os.path.join("cachegym", "allocator", "_purepy.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PUREPY = _purepy()
# the modules compiled from their .py: allocator/_purepy.py's list (TYPED, with a .pxd, and PLAIN),
# named through the ``cachegym/`` folder, so that each is compiled as ``cachegym.allocator.pool``
# and the .pxd cimports resolve by those names
CORE = [os.path.join(*name.split(".")) + ".py" for name in PUREPY.CORE]


class BuildExt(build_ext):
    """build_ext, then a record of the sources each built module was compiled from
    (``allocator/_built.json`` beside the extension modules: module -> SHA-256 of its .py and
    .pxd), by which ``import cachegym`` finds a module whose source changed after the build and
    runs the sources interpreted rather than the stale build (allocator/_purepy.py)."""

    def run(self) -> None:
        super().run()
        record = {}
        for ext in self.extensions:
            if os.path.exists(self.get_ext_fullpath(ext.name)):
                record[ext.name] = PUREPY.source_hash(os.path.join(*ext.name.split(".")))
        out = os.path.join(os.path.dirname(self.get_ext_fullpath("cachegym.allocator.loop")), "_built.json")
        with open(out, "w") as f:
            json.dump(record, f, indent=1, sort_keys=True)


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
    # no debug information (Python's CFLAGS ask for -g): the same machine code, compiled in 22%
    # less time (allocator/loop.c: 43 -> 33 s) into a .so an eighth the size
    # (-Wno-array-bounds: GCC's false alarms on CPython's object casts in the generated C, some
    # 190 lines of a fresh install's log)
    flags = [*_vector_flags(), *([] if sys.platform == "win32" else ["-g0", "-Wno-array-bounds"])]
    for e in exts:
        e.extra_compile_args = [*e.extra_compile_args, *flags]
        e.optional = True  # no compiler or headers: a warning, and the .py runs
    return exts


setup(ext_modules=core_extensions(), cmdclass={"build_ext": BuildExt})
