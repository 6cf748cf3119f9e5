"""Where the repository's own files are (``data/traces``, ``conf``, ``tests``, ``outputs``), from
any working directory: the packages sit at the top of the repository, and an editable install
(``pip install -e .``) runs them in place. Relative paths a user gives (trace files in a config)
are read from the working directory, as usual; the project's own files go through here.
"""

from __future__ import annotations

import os

__all__ = ["PROJECT_ROOT", "project_path"]

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def project_path(*parts: str) -> str:
    """The absolute path of ``parts`` under the repository root (``project_path("data",
    "traces", "gpt.npz")``)."""
    return os.path.join(PROJECT_ROOT, *parts)
