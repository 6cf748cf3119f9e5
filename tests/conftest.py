"""Shared fixtures and the ``gpu`` skip hook.

Tests marked ``gpu`` run only where ``cupy`` imports and finds a CUDA device; everywhere else
they are skipped with the reason "needs a CUDA GPU and cupy".
"""

from __future__ import annotations

import functools
import os
import sys

import pytest

# the repository root on sys.path, so tests import the packages without installing them
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

GPU_SKIP_REASON = "needs a CUDA GPU and cupy"

pytest_plugins = ["pytester"]  # tests/allocator/test_gpu_skip.py runs the hook in a sandbox


@pytest.fixture(autouse=True, scope="session")
def _sb3_logs_in_a_temporary_folder(tmp_path_factory: pytest.TempPathFactory) -> None:
    """stable-baselines3 makes an ``SB3-<time>`` folder in the system's temporary directory at
    every ``learn()`` of a model without a log folder: the tests' go to one pytest folder."""
    os.environ.setdefault("SB3_LOGDIR", str(tmp_path_factory.mktemp("sb3")))


@functools.lru_cache(maxsize=1)
def have_gpu() -> bool:
    """True when cupy imports and sees at least one CUDA device."""
    try:
        import cupy

        return bool(cupy.cuda.runtime.getDeviceCount() > 0)
    except Exception:  # ImportError, CUDARuntimeError (no driver / no device), ...
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu_items and not have_gpu():
        skip = pytest.mark.skip(reason=GPU_SKIP_REASON)
        for item in gpu_items:
            item.add_marker(skip)


@pytest.fixture
def numpy_backend():
    """A NumpyBackend (worker threads on); closed after the test."""
    from cachegym.allocator.backends import NumpyBackend

    be = NumpyBackend()
    yield be
    be.close()
