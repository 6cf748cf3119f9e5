"""Workloads: trace readers and writers, seeded generators, the PyTorch recorder, statistics.

``import envs.workloads`` never imports torch: :func:`record` imports it when called.
"""

from __future__ import annotations

from typing import Any

from cachegym.envs.workloads.formats import (
    FORMATS,
    ORACLE_GENERAL_DTYPE,
    add_trace_params_option,
    lcs_dtype,
    parse_trace_params,
    read_csv,
    read_lcs,
    read_npz,
    read_oracle_general,
    read_trace,
    read_txt,
    read_vscsi,
    write_csv,
    write_oracle_general,
    write_trace,
    write_txt,
)
from cachegym.envs.workloads.ml import dl_training, embedding, llm_kv_cache
from cachegym.envs.workloads.registry import GENERATORS, generate
from cachegym.envs.workloads.synthetic import (
    loop,
    mixture,
    phase_change,
    scan,
    storage,
    uniform,
    web_cdn,
    web_session,
    zipf,
)

__all__ = [
    "FORMATS",
    "GENERATORS",
    "ORACLE_GENERAL_DTYPE",
    "dl_training",
    "embedding",
    "generate",
    "llm_kv_cache",
    "loop",
    "mixture",
    "add_trace_params_option",
    "lcs_dtype",
    "parse_trace_params",
    "phase_change",
    "read_csv",
    "read_lcs",
    "read_npz",
    "read_oracle_general",
    "read_trace",
    "read_txt",
    "read_vscsi",
    "record",
    "scan",
    "storage",
    "uniform",
    "web_cdn",
    "web_session",
    "write_csv",
    "write_oracle_general",
    "write_trace",
    "write_txt",
    "zipf",
]


def record(*args: Any, **kwargs: Any) -> Any:
    """Record a PyTorch training loop; see :func:`envs.workloads.recorder.record` (imports torch)."""
    from cachegym.envs.workloads.recorder import record as _record

    return _record(*args, **kwargs)
