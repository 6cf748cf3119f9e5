"""Discrete-event timing model of a device with copy engines.

Copies take ``latency + bytes / bandwidth`` per direction; copies in one direction queue on
their engine; the two directions overlap when the preset has two copy engines (one engine:
both directions share one queue). ``compute(ns)`` advances the clock; ``wait_until(t)`` makes
compute wait for data and accounts the wait as stall. Bandwidths are in GB/s = bytes/ns.

A ``CostModel`` with ``preset=None`` is instant: copies take no time and nothing stalls (the
mode libCacheSim-style miss counting uses).

The clock saturates at :data:`CLOCK_MAX` (2**62 ns, 146 years) instead of wrapping, compiled or
interpreted alike: a trace's sizes and compute times are bounded on load (``Trace``), a preset's
bandwidth and latency here, so only a run of centuries of simulated time can reach it, and then
a warning says so (once; ``CostModel.saturated`` tells) and times stay at the bound.
"""

from __future__ import annotations

import json
import logging
import numbers
import os
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any

import cython

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.files import replace_atomically

__all__ = ["Preset", "PRESETS", "CostModel", "CLOCK_MAX", "get_preset", "load_preset", "resolve_preset"]

CLOCK_MAX = 1 << 62  # ns; the simulated clock and every completion time stay at or below it
MIN_GBPS = 1e-3  # 1 MB/s: a copy of the largest object (2**48 bytes) takes < 2**58 ns
MAX_LATENCY_NS = 10**12  # 1000 s per copy

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Preset:
    """Link and device characteristics of one host + GPU. Every figure is calibratable
    (``scripts/gpu_check.py`` measures a real GPU and writes a preset file)."""

    name: str
    h2d_gbps: float
    d2h_gbps: float
    h2d_latency_ns: int
    d2h_latency_ns: int
    copy_engines: int
    device_bytes: int
    source: str
    calibrated: bool = False

    def __post_init__(self) -> None:
        # each field of its type (a preset file is JSON a user may edit: "abc", -1, 2.0, "no")
        for field, kind in (("name", str), ("source", str), ("calibrated", bool)):
            if not isinstance(getattr(self, field), kind):
                raise ConfigError(f"preset {self.name!r}: {field} must be a {kind.__name__}, got "
                                  f"{getattr(self, field)!r}")
        for field in ("h2d_latency_ns", "d2h_latency_ns", "copy_engines", "device_bytes"):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise ConfigError(f"preset {self.name!r}: {field} must be a whole number, got {v!r}")
            object.__setattr__(self, field, int(v))  # (a NumPy int: Python's)
        if self.device_bytes < 0:
            raise ConfigError(f"preset {self.name!r}: device_bytes must be >= 0, got "
                              f"{self.device_bytes}")
        for field in ("h2d_gbps", "d2h_gbps"):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise ConfigError(f"preset {self.name!r}: {field} must be a number (GB/s), got {v!r}")
            object.__setattr__(self, field, float(v))  # (a NumPy float: Python's, for JSON)
            v = float(v)
            if not MIN_GBPS <= v < float("inf"):  # also refuses NaN
                raise ConfigError(f"preset {self.name}: {field} must be a bandwidth of at least "
                                  f"{MIN_GBPS} GB/s (1 MB/s), got {v!r}")
        for field in ("h2d_latency_ns", "d2h_latency_ns"):
            v = getattr(self, field)
            if not 0 <= v <= MAX_LATENCY_NS:
                raise ConfigError(f"preset {self.name}: {field} must be in 0..{MAX_LATENCY_NS} ns, "
                                  f"got {v!r}")
        if self.copy_engines not in (1, 2):
            raise ConfigError(f"preset {self.name}: copy_engines must be 1 or 2, got {self.copy_engines}")


GiB = 1 << 30
# Effective pinned-memory bandwidths, not link peaks: PCIe 4.0 x16 peaks at 32 GB/s and
# cudaMemcpyAsync from pinned memory reaches ~25 GB/s; PCIe 5.0 x16 peaks at 64 GB/s, ~50-55 GB/s
# measured. NVLink-C2C is 900 GB/s total (450 GB/s per direction).
PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("a100_pcie4", 25.0, 25.0, 8_000, 8_000, 2, 80 * GiB,
               "NVIDIA A100 datasheet (PCIe Gen4 x16, 64 GB/s bidirectional; 80 GB HBM2e); "
               "~25 GB/s per direction is the typical pinned cudaMemcpyAsync figure (bandwidthTest)"),
        Preset("h100_pcie5", 50.0, 50.0, 8_000, 8_000, 2, 80 * GiB,
               "NVIDIA H100 datasheet (PCIe Gen5 x16, 128 GB/s bidirectional; 80 GB HBM3); "
               "~50 GB/s per direction effective with pinned memory"),
        Preset("h200_pcie5", 55.3, 55.3, 15_400, 15_100, 2, 141 * GiB,
               "NVIDIA H200 datasheet (PCIe Gen5 x16 host link, 128 GB/s bidirectional; 141 GB HBM3e); "
               "bandwidths, latencies and two engines as measured by scripts/gpu_check.py on an H200 "
               "host on 2026-11-29 (pinned memory, 4 KiB-256 MiB copies)"),
        Preset("gh200_c2c", 400.0, 400.0, 3_000, 3_000, 2, 96 * GiB,
               "NVIDIA GH200 Grace Hopper datasheet (NVLink-C2C 900 GB/s total, 450 GB/s per "
               "direction; 96 GB HBM3); ~400 GB/s effective assumed"),
    )
}


def get_preset(name: str) -> Preset:
    """Preset by name, or a preset file (``.json``) written by the calibration script."""
    if name in PRESETS:
        return PRESETS[name]
    if name.endswith(".json"):
        path = os.path.expanduser(name)
        if not os.path.exists(path):
            raise ConfigError(f"preset file {name!r}: no such file (a preset is one of "
                              f"{sorted(PRESETS)} or a .json file scripts/gpu_check.py wrote)")
        return load_preset(path)
    raise ConfigError(
        f"unknown cost preset {name!r}; choose one of {sorted(PRESETS)} or give a preset .json file"
    )


def resolve_preset(cost: Any) -> Preset | None:
    """The :class:`Preset` a pool's ``cost`` names: a preset's name or a preset ``.json`` file
    (:func:`get_preset`), a :class:`Preset`, or ``None`` (copies take no time); anything else is a
    :class:`ConfigError` naming the value and the presets."""
    if cost is None or isinstance(cost, Preset):
        return cost
    if isinstance(cost, str):
        return get_preset(cost)
    raise ConfigError(f"cost={cost!r} ({type(cost).__name__}): give a timing preset's name (one of "
                      f"{sorted(PRESETS)}), a preset .json file scripts/gpu_check.py wrote, a "
                      "cachegym.allocator.cost.Preset, or None (instant copies)")


def load_preset(path: str) -> Preset:
    if os.path.exists(path) and not os.path.isfile(path):  # (open would wait on a pipe)
        raise ConfigError(f"preset file {path}: not a regular file (a directory or a pipe?)")
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError, RecursionError) as e:  # (RecursionError: JSON nested too deep)
        raise ConfigError(f"preset file {path}: cannot be read as JSON ({type(e).__name__}: "
                          f"{e})") from None
    names = [f.name for f in fields(Preset)]
    required = [f.name for f in fields(Preset) if f.default is MISSING]
    if (not isinstance(data, dict) or set(data) - set(names)
            or set(required) - set(data)):
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise ConfigError(f"preset file {path}: expected an object with the fields {names} "
                          f"({', '.join(required)} required; as scripts/gpu_check.py writes "
                          f"them), got {got}")
    try:
        return Preset(**data)
    except (TypeError, ValueError) as e:  # (a field's value of the wrong type)
        raise ConfigError(f"preset file {path}: cannot be read as a Preset ({e})") from None


def save_preset(preset: Preset, path: str) -> None:
    """Write ``preset`` as a JSON preset file (written whole: an older file stays as it was if
    the write fails)."""
    data = asdict(preset)
    replace_atomically(path, lambda f: json.dump(data, f, indent=2))


@cython.cclass
class CostModel:
    """The simulated clock. Not thread-safe on its own: the pool's lock guards it.

    Attributes ``now`` (ns), ``stall_ns`` and ``compute_ns`` only grow.
    """

    def __init__(self, preset: Preset | str | None = None) -> None:
        preset = resolve_preset(preset)
        self.preset = preset
        self.instant = preset is None
        self.now = 0
        self.stall_ns = 0
        self.compute_ns = 0
        self.saturated = False  # the clock reached CLOCK_MAX (warned about once)
        self._free0 = 0  # when engine 0's queue drains (h2d; both directions with one engine)
        self._free1 = 0  # when engine 1's queue drains (d2h, with two engines)
        self._two = preset is None or preset.copy_engines == 2
        if preset is not None:
            self._h2d_lat, self._h2d_gbps = preset.h2d_latency_ns, preset.h2d_gbps
            self._d2h_lat, self._d2h_gbps = preset.d2h_latency_ns, preset.d2h_gbps
        else:
            self._h2d_lat, self._h2d_gbps, self._d2h_lat, self._d2h_gbps = 0, 1.0, 0, 1.0

    def copy_time(self, direction: int, nbytes: int) -> int:
        """Duration of one copy (0 = h2d, 1 = d2h) of ``nbytes``, in ns."""
        if self.instant:
            return 0
        x = nbytes / (self._h2d_gbps if direction == 0 else self._d2h_gbps)
        if x >= 4611686018427387904.0:  # CLOCK_MAX: copy() saturates the clock
            x = 4611686018427387904.0
        return (self._h2d_lat if direction == 0 else self._d2h_lat) + int(x)

    def copy(self, direction: int, nbytes: int, not_before: int = 0) -> int:
        """Queue a copy on its engine; returns its completion time. It starts when the engine
        is free, not before ``now`` and not before ``not_before`` (a data dependency)."""
        if self.instant:
            return max(self.now, not_before)
        second = direction == 1 and self._two  # engine 1
        start = self.now
        free = self._free1 if second else self._free0
        if free > start:
            start = free
        if not_before > start:
            start = not_before
        t = self.copy_time(direction, nbytes)
        if start > 0x4000000000000000 - t:  # CLOCK_MAX (a C constant where compiled)
            done = self._saturated()
        else:
            done = start + t
        if second:
            self._free1 = done
        else:
            self._free0 = done
        return done

    def compute(self, ns: int) -> None:
        if ns > 0x4000000000000000 - self.now:  # CLOCK_MAX
            ns = self._saturated() - self.now
        self.now += ns
        self.compute_ns += ns

    def _saturated(self) -> int:
        if self.saturated:
            return CLOCK_MAX
        self.saturated = True
        _log.warning("the simulated clock reached %d ns (2**62, 146 years) and stays there: "
                     "the run's times and stall are lower bounds from here on", CLOCK_MAX)
        return CLOCK_MAX

    def wait_until(self, t: int) -> int:
        """Compute waits for data ready at ``t``; returns the stall added."""
        if t > self.now:
            s = t - self.now
            self.now = t
            self.stall_ns += s
            return s
        return 0

    @property
    def total_ns(self) -> int:
        return self.now

    def busy_until(self, direction: int) -> int:
        return self._free1 if direction == 1 and self._two else self._free0
