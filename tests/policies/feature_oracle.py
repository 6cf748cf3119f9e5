"""A NumPy oracle of the candidate features (the test side of ``policies/kernels.py``).

The arithmetic of :func:`policies.kernels.features` written another way (vectorised NumPy over
the candidates, float64 logs rounded to float32 after the scaling), so that the tests check the
kernel against an independent computation; the two agree within float32 rounding (2e-7).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cachegym.policies import kernels as _k
from cachegym.policies.features import (
    _COUNT,
    _I_GAP,
    _I_RANK,
    _I_SEEN,
    _I_STATE,
    _INSERT,
    _LOG_NS,
    _N_LOG,
    _RING0,
    _SIZE,
    HORIZON,
    N_GAPS,
)

_H1 = HORIZON + 1.0
_INV_LOG_SCALE = _k.INV_SCALE32
STATE_TABLE = _k.STATE_TABLE32.astype(np.float64)


def numeric_numpy(rows: np.ndarray, codes: np.ndarray, seen: Any, t: int,
                   decay: tuple[float, ...], inv_cap: float, times: tuple[float, ...],
                   cand: np.ndarray) -> None:
    """The arithmetic of :func:`policies.features.observe` in NumPy, vectorised over the
    candidates: writes the features of the tracker rows ``rows`` (state ``codes``, ``seen``
    flags) into ``cand[:len(rows)]``."""
    n = len(rows)
    ring = np.sort(rows[:, _RING0:_SIZE], axis=1)  # oldest (or empty) first
    # raw = 1 + [tick distances, count, decayed counts, gaps, size]; its log is the block
    raw = np.empty((n, _N_LOG))
    raw[:, 0] = ring[:, -1]
    raw[:, 1:3] = rows[:, _INSERT:_COUNT]
    np.subtract(t + 1.0, raw[:, :3], out=raw[:, :3])
    raw[:, 3:_I_GAP] = rows[:, _COUNT:_RING0]
    raw[:, 4:_I_GAP] *= decay
    np.subtract(ring[:, :0:-1], ring[:, -2::-1], out=raw[:, _I_GAP:_I_GAP + N_GAPS])
    raw[:, -1] = rows[:, _SIZE]
    raw[:, 3:] += 1.0
    rec = raw[:, 0].copy()  # the rank compares the distances as they are
    # HORIZON: the count of an older object scaled to its last HORIZON ticks, every distance
    # capped (the gaps and recency only where they are real: an empty ring entry stays huge)
    old = raw[:, 2] > _H1
    if old.any():
        raw[old, 3] = rows[old, _COUNT] * (_H1 / raw[old, 2]) + 1.0
    np.minimum(raw[:, 1:3], _H1, out=raw[:, 1:3])
    np.minimum(raw[:, 0], _H1, out=raw[:, 0], where=ring[:, -1] >= 0.0)
    gaps = raw[:, _I_GAP:_I_GAP + N_GAPS]
    np.minimum(gaps, _H1, out=gaps, where=ring[:, -2::-1] >= 0.0)
    out = cand[:n]
    np.log(raw, out=out[:, :_N_LOG])
    out[:, :_N_LOG] *= _INV_LOG_SCALE
    out[:, _I_RANK] = (rec[:, None] > rec).sum(1)
    out[:, _I_RANK] *= 1.0 / max(n - 1, 1)
    out[:, _I_RANK + 1] = rows[:, _SIZE]
    out[:, _I_RANK + 1] *= inv_cap
    out[:, _I_STATE:_I_SEEN] = STATE_TABLE[codes]
    out[:, _I_SEEN] = seen
    if times[4]:
        size = rows[:, _SIZE]
        out[:, _I_SEEN + 1] = np.log1p(times[0] + size * times[1])
        out[:, _I_SEEN + 2] = out[:, _I_STATE] * np.log1p(times[2] + size * times[3])
        out[:, _I_SEEN + 1:] *= 1.0 / _LOG_NS
    else:
        out[:, _I_SEEN + 1:] = 0.0
    np.minimum(out, 1.0, out=out)
