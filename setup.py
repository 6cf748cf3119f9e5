"""Builds the optional C accelerator ``allocator._fastpath`` (metadata lives in pyproject.toml).

``optional=True``: without a C compiler or Python headers the build warns and the package
installs as pure Python (``allocator.pool`` then runs its Python hit path, with the same effects).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "allocator._fastpath",
            sources=["allocator/_fastpath.c"],
            optional=True,
        )
    ]
)
