"""Builds the optional C accelerators (metadata lives in pyproject.toml): ``allocator._fastpath``
(the pool's plain hit and miss, and a decision's candidate gathering) and ``policies._mlp`` (the
learned policy's forward pass).

``optional=True``: without a C compiler or Python headers the build warns and the package
installs as pure Python (``allocator.pool`` then runs its Python hit path, with the same effects;
``policies.learned`` its NumPy forward pass).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "allocator._fastpath",
            sources=["allocator/_fastpath.c"],  # one translation unit: it includes allocator/csrc/
            depends=[f"allocator/csrc/{f}" for f in
                     ("core.h", "placement.c", "tracker.c", "access.c", "decision.c")],
            optional=True,
        ),
        Extension(
            "policies._mlp",
            sources=["policies/_mlp.c"],  # includes policies/csrc/features.c
            depends=["policies/csrc/features.c"],
            optional=True,
        ),
    ]
)
