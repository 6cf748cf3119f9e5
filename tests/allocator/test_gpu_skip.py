"""The ``gpu`` marker: skipped with a reason unless cupy imports and finds a CUDA device."""

from __future__ import annotations

import os

import pytest

CONFTEST = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conftest.py")


def _have_gpu() -> bool:
    try:
        import cupy

        return bool(cupy.cuda.runtime.getDeviceCount() > 0)
    except Exception:
        return False


def test_gpu_tests_skip_without_a_device(pytester: pytest.Pytester) -> None:
    with open(CONFTEST) as f:
        pytester.makeconftest(f.read())
    pytester.makeini("[pytest]\nmarkers =\n    gpu: needs a CUDA GPU and cupy\n")
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpu
        def test_on_the_device():
            import cupy
            assert cupy.cuda.runtime.getDeviceCount() > 0

        def test_anywhere():
            pass
        """
    )
    result = pytester.runpytest_inprocess("-rs", "-p", "no:cacheprovider")
    if _have_gpu():
        result.assert_outcomes(passed=2)
    else:
        result.assert_outcomes(passed=1, skipped=1)
        result.stdout.fnmatch_lines(["*needs a CUDA GPU and cupy*"])
