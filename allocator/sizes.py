"""Human-readable sizes: ``"512MiB"``, ``"1GiB"``, ``"1.5GB"``, ``"4096"``, and ``"10%"`` where a
capacity may be a fraction (of a trace's working set, in the evaluator).

IEC suffixes (KiB, MiB, GiB, TiB) are powers of 1024, SI ones (KB, MB, GB, TB) powers of 1000,
as ``torch``'s and libCacheSim's users write them; case is ignored, ``B`` is optional.
"""

from __future__ import annotations

import math
import re
from typing import Any

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.trace import MAX_TOTAL

__all__ = ["UNITS", "format_size", "parse_capacity", "parse_size", "unit_of"]

UNITS = {"": 1, "b": 1,
         "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
         "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:e([+-]?[0-9]+))?\s*([a-zA-Z]*)\s*$")
_EXAMPLES = "e.g. 1073741824, 512MiB, 1GiB or 1.5GB"


def _too_large(key: str, value: Any) -> ConfigError:
    shown = repr(value)
    if len(shown) > 40:
        shown = f"{shown[:20]}...{shown[-8:]} ({len(shown)} characters)"
    return ConfigError(f"{key}: {shown} is too large: it is more than 2**60 bytes, and no pool is that "
                       f"large (give at most {MAX_TOTAL} bytes)")


def unit_of(text: str) -> str | None:
    """How a size or capacity string is written: ``"%"`` for a percentage, its unit for a size
    (``"MiB"`` of ``"512MiB"``), ``""`` for a plain number; ``None`` for one that is neither."""
    t = text.strip()
    if t.endswith("%"):
        return "%"
    m = _SIZE.match(t)
    return None if m is None else m.group(3)


def parse_size(value: Any, key: str = "capacity") -> int:
    """``value`` in bytes: a positive integer as it is, or a string with an optional unit
    (:data:`UNITS`); a :class:`ConfigError` naming ``key`` otherwise (zero, negative, a
    fraction of a byte, an unknown unit, more than 2**60 bytes: :data:`MAX_TOTAL`)."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}: {value!r} is not a size; give bytes ({_EXAMPLES})")
    given = value
    if isinstance(value, str):
        m = _SIZE.match(value)
        unit = UNITS.get(m.group(3).lower()) if m else None
        if m is None and _SIZE.match(value.strip().lstrip("-")):
            raise ConfigError(f"{key}: {value!r} is negative; a size is bytes > 0 ({_EXAMPLES})")
        if m is None or unit is None:
            raise ConfigError(f"{key}: {value!r} is not a size; give bytes with an optional unit "
                              f"({_EXAMPLES}; units: KiB MiB GiB TiB, KB MB GB TB)")
        try:  # (1e309 is no float: 10.0 ** 309 overflows)
            number = float(m.group(1)) * (10.0 ** int(m.group(2) or 0)) * unit
        except OverflowError:
            number = math.inf
        if not math.isfinite(number) or number > MAX_TOTAL:
            raise _too_large(key, value)
        if number != math.floor(number):
            raise ConfigError(f"{key}: {value!r} is {number} bytes, not a whole number of bytes")
        value = int(number)
    elif isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, float) and value == math.inf:  # (a config file's 1e309)
        raise _too_large(key, value)
    try:
        n = int(value) if value == int(value) else None
    except (TypeError, ValueError, OverflowError):
        n = None
    if n is None:
        raise ConfigError(f"{key}: {value!r} is not a whole number of bytes ({_EXAMPLES})")
    if n <= 0:
        raise ConfigError(f"{key}: capacity must be > 0, got {given!r}")
    if n > MAX_TOTAL:
        raise _too_large(key, given)
    return n


def parse_capacity(value: Any, key: str = "capacity") -> int | float:
    """A capacity as the evaluator takes it: bytes (an integer or a size string, see
    :func:`parse_size`) or a fraction in (0, 1] (a float, a decimal string such as ``"0.1"``, read
    as the float it spells, or a string such as ``"10%"``)."""
    if isinstance(value, str) and re.fullmatch(r"\s*(\d+\.\d*|\.\d+)\s*", value):
        value = float(value)  # (as a config file's 0.1: a share; "1.0" all of it)
    elif isinstance(value, str) and re.fullmatch(r"\s*(\d+\.?\d*|\.\d+)[eE]-\d+\s*", value):
        value = float(value)  # ("5e-7" is the share it spells, as "0.0000005"; "1e3" bytes)
    if isinstance(value, float) and value == math.inf:  # (a config file's 1e309)
        raise _too_large(key, value)
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            pct = float(value.strip()[:-1])
        except ValueError:
            pct = math.nan
        if not 0 < pct <= 100:
            raise ConfigError(f"{key}: {value!r} is not a percentage in (0%, 100%]")
        return pct / 100.0
    if isinstance(value, float) and not value.is_integer():
        if not 0 < value <= 1:
            raise ConfigError(f"{key}: {value!r} is neither a whole number of bytes nor a "
                              "fraction in (0, 1]")
        return value
    if isinstance(value, float) and 0 < value <= 1:
        return value  # 1.0: the whole working set
    return parse_size(value, key)


def format_size(nbytes: int) -> str:
    """``nbytes`` as :func:`parse_size` reads it back exactly, in the largest IEC unit that
    divides it (``"512MiB"``, ``"1GiB"``), else with one decimal and ``~`` (``"~1.5GiB"``:
    for display only) or in bytes below one KiB (``"768B"``)."""
    n = int(nbytes)
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        scale = UNITS[unit.lower()]
        if abs(n) >= scale:
            return f"{n // scale}{unit}" if n % scale == 0 else f"~{n / scale:.1f}{unit}"
    return f"{n}B"
