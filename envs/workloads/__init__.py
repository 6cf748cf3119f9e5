"""Workloads: trace readers and writers, seeded generators, the PyTorch recorder, statistics.

``import envs.workloads`` never imports torch: the recorder imports it lazily.
"""

from envs.workloads.formats import (
    FORMATS,
    ORACLE_GENERAL_DTYPE,
    read_csv,
    read_npz,
    read_oracle_general,
    read_trace,
    read_txt,
    write_csv,
    write_oracle_general,
    write_trace,
    write_txt,
)

__all__ = [
    "FORMATS",
    "ORACLE_GENERAL_DTYPE",
    "read_csv",
    "read_npz",
    "read_oracle_general",
    "read_trace",
    "read_txt",
    "write_csv",
    "write_oracle_general",
    "write_trace",
    "write_txt",
]
