# distutils: extra_compile_args = -ffp-contract=off
# cython: boundscheck=False, wraparound=False, initializedcheck=False
"""The learned policy's numeric kernels, written once: the feature tracker's per-access update,
a decision's candidate features, the sample rule's distinct draws, and the network's forward pass.

Where Cython and a C compiler are present this file is compiled in pure-Python mode (the native
types live in ``kernels.pxd`` beside it, as for ``allocator/loop.py``); elsewhere, or with
``CACHEGYM_PURE_PYTHON=1``, the same source runs interpreted with the same results, bit for bit
(:data:`COMPILED` says which). :mod:`policies.features` and :mod:`policies.learned.network` are
the only callers; their docstrings are the manual.

Arithmetic (the contract the exported policies and the goldens rely on): the features are
computed in float64 in the order written here (no fused multiply-adds: ``-ffp-contract=off``)
and rounded to float32 where :func:`f32` says so, with libm's ``log``/``log1p``/``pow`` (what
Python's ``math`` calls); the forward pass is float32, each product rounded before its sum,
inputs accumulated in ascending order, four input rows a pass (an input that is zero is skipped
and zeros pad the inputs to fours: adding ``0 * w`` changes no sum but perhaps a zero's sign,
which the ReLU after every sum erases).

Layouts (:data:`LAYOUT` names them for :mod:`policies.features`):

* a tracker row (``NCOL`` float64): insert tick, creation tick, access count, three decayed
  counters (scaled by ``2**((t - epoch) / h)``), a ring of the last ``RING`` access ticks
  (circular; an empty entry ``j`` holds ``-(j + 1) * 2**50``), size, kind;
* a decision's packed buffer ``v`` (float64, ``HEAD + 3 K``): ``n``, ``prm[NPRM]`` (tick, three
  decay factors, 1 / capacity, h2d latency, 1 / h2d bandwidth, d2h latency, 1 / d2h
  bandwidth, timed), ``globals[G]``, then ``slots[K]``, state ``codes[K]`` and ``K`` scratch
  values the kernel writes (each candidate's raw recency);
* the observation buffer ``x`` (float32 ``(K + 1, F)``): candidates in rows ``0..K-1``, the
  global features in the first ``G`` values of row ``K``.
"""

from __future__ import annotations

import math
from typing import Any

import cython
import numpy as np
from cython.cimports.libc.math import log, log1p, pow

from cachegym.allocator import trace as _trace
from cachegym.allocator.errors import ConfigError, PolicyFileError

__all__ = ["COMPILED", "LAYOUT", "access", "features", "first_distinct", "last_ticks", "next_rows",
           "oracle", "teacher", "evictable_keys", "sample_keys", "pack_keys", "Scorer", "vector", "matrix", "observation"]

COMPILED: bool = cython.compiled  # this module runs compiled (Cython), not interpreted

# ---------------------------------------------------------------------- layout
HORIZON = 16384  # the cap of tick distances (policies.features.HORIZON)
N_GAPS = 4
N_KINDS = 7
INSERT, CREATE, COUNT, E0 = 0, 1, 2, 3  # columns of a tracker row
RING0, RING = 6, N_GAPS + 1
SIZE = RING0 + RING
KIND = SIZE + 1
NCOL = KIND + 1
NPRM, G = 10, 6
HEAD = 1 + NPRM + G
N_LOG = 3 + 1 + 3 + N_GAPS + 1  # the log-scaled block: distances, count, decayed counts, gaps, size
I_GAP = 7
I_RANK = N_LOG
I_STATE = N_LOG + 2
N_STATE = 4 + N_KINDS  # dirty, prefetched, in flight, resident, one-hot kind
I_SEEN = I_STATE + N_STATE
F = I_SEEN + 3
H1 = HORIZON + 1.0  # the cap of the log block's tick distances (which hold distance + 1)
HALF_LIVES = (16, 256, 4096)
INF = _trace.INF  # a row never reached (no next access)
IH0, IH1, IH2 = (1.0 / h for h in HALF_LIVES)
MISSING = 2.0**50

LOG_T = math.log1p(2.0**32)
LOG_N = math.log1p(2.0**24)
LOG_SIZE = math.log1p(2.0**40)
LOG_NS = math.log1p(1e9)
LOG_SCALE = np.array([LOG_T] * 3 + [LOG_N]
                     + [math.log1p(1.0 / (1.0 - 2.0 ** (-1.0 / h))) for h in HALF_LIVES]
                     + [LOG_T] * N_GAPS + [LOG_SIZE])
"""The denominators of the log-scaled block (``N_LOG`` features)."""
INV_SCALE32 = (1.0 / LOG_SCALE).astype(np.float32)
STATE_TABLE32 = np.zeros((16 * N_KINDS, N_STATE), np.float32)
"""State code (dirty + 2 prefetched + 4 in flight + 8 resident + 16 kind) -> its flags."""
for _c in range(16 * N_KINDS):
    STATE_TABLE32[_c, :4] = [(_c >> _b) & 1 for _b in range(4)]
    STATE_TABLE32[_c, 4 + (_c >> 4)] = 1.0
_inv_scale = INV_SCALE32
_table = STATE_TABLE32
_inv_log_ns = float(np.float32(1.0 / LOG_NS))
_n_codes = len(STATE_TABLE32)

LAYOUT: dict[str, Any] = {
    "INSERT": INSERT, "CREATE": CREATE, "COUNT": COUNT, "E0": E0, "RING0": RING0, "RING": RING,
    "SIZE": SIZE, "KIND": KIND, "NCOL": NCOL, "NPRM": NPRM, "G": G, "HEAD": HEAD, "N_LOG": N_LOG,
    "I_GAP": I_GAP, "I_RANK": I_RANK, "I_STATE": I_STATE, "N_STATE": N_STATE, "I_SEEN": I_SEEN,
    "F": F, "HORIZON": HORIZON, "N_GAPS": N_GAPS, "N_KINDS": N_KINDS, "MISSING": MISSING,
    "HALF_LIVES": HALF_LIVES,
}
"""The layouts above, for :mod:`policies.features` (compiled, the names are C constants)."""


def f32(x: float) -> float:
    """``x`` rounded to float32 (compiled: the conversion of the C return type does it)."""
    return x if cython.compiled else float(np.float32(x))


# ---------------------------------------------------------------------- buffers
# Compiled, each kernel call turns its array arguments into typed memoryviews; from a NumPy
# array that is a new buffer request (about a microsecond), from the memoryview these return
# (of the same array, sharing its memory) it is a check. Interpreted, they return the array.
def vector(a: Any) -> Any:
    """A float64 1-d contiguous array as the kernels take it fastest."""
    return a


def matrix(a: Any) -> Any:
    """A float64 2-d C-contiguous array as the kernels take it fastest."""
    return a


def observation(a: Any) -> Any:
    """A float32 2-d C-contiguous array (an observation buffer) as the kernels take it fastest."""
    return a


def indices(a: Any) -> Any:
    """An int64 1-d contiguous array as the kernels take it fastest."""
    return a


# ---------------------------------------------------------------------- the tracker
def access(V: Any, b: int, t: int, x: int, two: float) -> None:
    """An access at tick ``t`` to the tracker row ``V[b:b + NCOL]`` of the flat float64 rows
    ``V`` (``x`` = ticks since the decayed counters' epoch). ``two`` is 2.0, passed at run time
    so that no compiler turns ``pow(2, y)`` into ``exp2``, which rounds differently."""
    if b < 0 or b + NCOL > V.shape[0]:
        raise ConfigError(f"access: row offset {b} outside the tracker's {V.shape[0]} values; "
                          f"pass slot * {NCOL} of an existing slot")
    c = V[b + COUNT]
    V[b + RING0 + cython.cast(cython.longlong, c) % RING] = t
    V[b + COUNT] = c + 1.0
    V[b + E0] += pow(two, x * IH0)
    V[b + E0 + 1] += pow(two, x * IH1)
    V[b + E0 + 2] += pow(two, x * IH2)


def first_distinct(u: Any, n: int, out: Any) -> int:
    """Writes the first distinct values of ``int(u[j] * n)`` (``u`` uniform in [0, 1), float64)
    into ``out`` (int64; as many as fit) and returns how many."""
    c = 0
    m = out.shape[0]
    if m == 0:
        return 0
    for j in range(u.shape[0]):
        w = cython.cast(cython.longlong, u[j] * n)  # truncation, as astype(np.intp) (u * n >= 0)
        new = True
        for q in range(c):
            if out[q] == w:
                new = False
                break
        if new:
            out[c] = w
            c += 1
            if c == m:
                break
    return c


def sample_keys(u: Any, n: int, res: list, recs: list, K: int, idx: Any) -> list:
    """``res[i]`` for the first ``K`` distinct ``i = int(u[j] * n)`` (:func:`first_distinct`,
    ``idx``: an int64 buffer of ``K``), in draw order, if there are ``K`` of them and their pool
    records ``recs[i]`` (beside ``res``: a feature tracker's) say each is evictable
    (``ObjectInfo.evictable``); else an empty list. The uniform sample of ``K`` residents of a
    decision, in one call, without a lookup by key."""
    c = first_distinct(u, n, idx)
    out: list = []
    if c < K:
        return out
    for q in range(K):
        o = recs[idx[q]]
        if not o.evictable():
            return []
        out.append(res[idx[q]])
    return out


# ---------------------------------------------------------------------- a decision's records
# Read from the pool's records (``PoolView.objects``: key -> allocator.records.ObjectInfo);
# residency as allocator.seams numbers it (DEVICE 0, HOST 1, H2D 2, D2H 3).
def evictable_keys(objs: dict, keys: Any, limit: int) -> list:
    """The keys, of the iterable ``keys`` in its order, that a pool whose records are ``objs``
    could evict now (``PoolView.evictable``: resident and unpinned), up to ``limit`` of them
    (the iteration stops there)."""
    out: list = []
    if limit <= 0:
        return out
    for k in keys:
        o = objs.get(k)
        if o is not None and o.evictable():
            out.append(k)
            if len(out) == limit:
                break
    return out


def state_code(o: Any) -> float:
    """The state code of a pool record ``o`` (``allocator.records.ObjectInfo``): ``dirty + 2
    prefetched + 4 in flight + 8 resident + 16 kind``, the row of :data:`STATE_TABLE32` its
    state features are read from."""
    c = o.dirty + 2 * o.prefetched + 16 * o.kind
    if o.state == 0:  # resident
        c += 8
    elif o.state == 2:  # host-to-device copy in flight: resident and in flight
        c += 12
    return c


def _check_packed(n: int, v: Any, K: int, what: str) -> None:
    if n > K or v.shape[0] != HEAD + 3 * K:
        raise ConfigError(f"{what}: {n} keys need K >= {n} and v of {HEAD} + 3K values; got "
                          f"K={K}, v ({v.shape[0]},)")


def pack_keys(slot: dict, objs: dict, keys: list, v: Any, K: int) -> int:
    """The per-candidate part of a decision's packed buffer ``v`` (:func:`features`' layout, ``K``
    candidates): each key's tracker row (``slot`` maps a key to its row, ``-1`` without one)
    into ``v[HEAD + i]`` and its :func:`state_code` into ``v[HEAD + K + i]`` (of its record in
    ``objs``; ``0`` for a key the pool does not know). Returns the number of keys without a
    tracker row."""
    n = len(keys)
    _check_packed(n, v, K, "pack_keys")
    missing = 0
    for i in range(n):
        k = keys[i]
        s = slot.get(k, -1)
        if s < 0:
            missing += 1
        v[HEAD + i] = s
        o = objs.get(k)
        v[HEAD + K + i] = 0.0 if o is None else state_code(o)
    return missing


def pack_sampled(res: list, recs: list, slots: list, idx: Any, keys: list, v: Any, K: int) -> bool:
    """:func:`pack_keys` of the residents ``keys`` that :func:`sample_keys` drew at positions
    ``idx`` of ``res`` (a feature tracker's residents; ``recs`` and ``slots`` beside it: each
    one's pool record and tracker row), read by position instead of looked up by key. False,
    with nothing written, when a key is no longer at its position (the caller packs by key)."""
    n = len(keys)
    _check_packed(n, v, K, "pack_sampled")
    m = len(res)
    if n > idx.shape[0]:
        return False
    for q in range(n):
        i = idx[q]
        if i < 0 or i >= m or res[i] is not keys[q]:
            return False
    for q in range(n):
        i = idx[q]
        v[HEAD + q] = slots[i]
        v[HEAD + K + q] = state_code(recs[i])
    return True


def last_ticks(S: Any, slot: dict, keys: list, out: Any) -> int:
    """The tick of the last access of each of ``keys`` (Python ints) into ``out[:len(keys)]``
    (int64): the largest tick in the ring of its tracker row (``slot`` maps a key to its row of
    ``S``), ``-1`` for a key without a row or whose ring holds no access. Returns the number of
    keys."""
    n = len(keys)
    rows_ = S.shape[0]
    if out.shape[0] < n or S.shape[1] != NCOL:
        raise ConfigError(f"last_ticks: {n} keys need an int64 out of at least {n} values and S "
                          f"float64 (rows, {NCOL}); got out ({out.shape[0]},), S (.., {S.shape[1]})")
    for i in range(n):
        s = slot.get(keys[i], -1)
        if s < 0:
            out[i] = -1
            continue
        if s >= rows_:
            raise ConfigError(f"last_ticks: key {keys[i]!r} maps to row {s} of a tracker of {rows_} "
                              "rows")
        m = S[s, RING0]
        for j in range(RING0 + 1, SIZE):
            if S[s, j] > m:
                m = S[s, j]
        out[i] = cython.cast(cython.longlong, m) if m >= 0 else -1
    return n


def next_rows(next_use: Any, last: Any, n: int, out: Any) -> int:
    """``out[i] = next_use[last[i]]`` for ``i < n`` (the row of the next access after the row
    ``last[i]``), ``INF`` where ``last[i]`` is negative (never accessed). Returns ``n``."""
    rows_ = next_use.shape[0]
    if n > last.shape[0] or n > out.shape[0]:
        raise ConfigError(f"next_rows: n={n} exceeds last ({last.shape[0]},) or out ({out.shape[0]},)")
    for i in range(n):
        r = last[i]
        if r < 0:
            out[i] = INF
        elif r < rows_:
            out[i] = next_use[r]
        else:
            raise ConfigError(f"next_rows: row {r} is outside next_use's {rows_} rows")
    return n


def oracle(keys: list, nxt: Any, tick: int, farthest: bool, keys_out: Any, dist_out: Any) -> int:
    """A decision's teacher: of the ``n = len(keys)`` candidates whose next accesses are at rows
    ``nxt[:n]`` (int64, ``INF``: never), with ``farthest`` Belady's choice (the one used farthest
    in the future; among equals the largest key), else the one used soonest (the first of
    equals; ``-1`` when none is used again); ``-1`` without candidates. Writes the keys into
    ``keys_out`` and the ticks from ``tick`` to each next use into ``dist_out`` (``inf`` if
    never), ``-1`` in the padding up to their common length ``K >= n``."""
    n = len(keys)
    K = keys_out.shape[0]
    if n > K or dist_out.shape[0] != K or nxt.shape[0] < n:
        raise ConfigError(f"oracle: {n} candidates need keys_out and dist_out of one length "
                          f">= {n} and nxt of >= {n}; got ({K},), ({dist_out.shape[0]},), "
                          f"({nxt.shape[0]},)")
    j = -1
    best = 0
    bk = 0
    for i in range(n):
        k = keys[i]
        r = nxt[i]
        keys_out[i] = k
        dist_out[i] = cython.cast(cython.double, r - tick) if r < INF else math.inf
        if j < 0 or (r > best or (r == best and k > bk) if farthest else r < best):
            j, best, bk = i, r, k
    for i in range(n, K):
        keys_out[i] = -1
        dist_out[i] = -1.0
    if not farthest and j >= 0 and best >= INF:
        j = -1
    return j


def teacher(S: Any, slot: dict, keys: list, next_use: Any, tick: int, farthest: bool, rows: Any,
            nxt: Any, keys_out: Any, dist_out: Any) -> int:
    """A decision's teacher from the tracker's rows in one call: :func:`last_ticks` of ``keys``
    into ``rows``, the row of each one's next access after it (:func:`next_rows` of the
    trace's ``next_use``) into ``nxt``, then :func:`oracle` (its choice; ``keys_out`` and
    ``dist_out`` as it writes them)."""
    n = last_ticks(S, slot, keys, rows)
    next_rows(next_use, rows, n, nxt)
    return oracle(keys, nxt, tick, farthest, keys_out, dist_out)


# ---------------------------------------------------------------------- the features
def features(S: Any, v: Any, x: Any) -> int:
    """The features of the ``n = v[0]`` candidates packed in ``v`` (rows ``v[HEAD + i]`` of the
    tracker rows ``S``, float64 ``(rows, NCOL)``) into ``x[:n]``, and the globals into
    ``x[K, :G]`` (``x`` float32 ``(K + 1, F)``; rows ``n..K-1`` are left as they are).
    Returns ``n``. Raises :class:`ConfigError` on buffers of another shape, or a slot or state
    code out of range."""
    K = x.shape[0] - 1
    if S.shape[1] != NCOL or x.shape[1] != F or K < 1 or v.shape[0] != HEAD + 3 * K:
        raise ConfigError(
            f"features: S must be float64 (rows, {NCOL}), x float32 (K + 1, {F}) with K >= 1 and v "
            f"float64 ({HEAD} + 3K,); got S ({S.shape[0]}, {S.shape[1]}), v ({v.shape[0]},), x "
            f"({x.shape[0]}, {x.shape[1]}): build v with cachegym.policies.features.packed_buffer(K)")
    nd = v[0]
    if not (0.0 <= nd <= K) or nd != cython.cast(cython.Py_ssize_t, nd):
        raise ConfigError(f"features: v[0] = {nd!r} candidates; it must be a count in 0..K={K}")
    n = cython.cast(cython.Py_ssize_t, nd)
    rows = S.shape[0]
    for i in range(n):
        sd = v[HEAD + i]
        cd = v[HEAD + K + i]
        if not (0.0 <= sd < rows) or not (0.0 <= cd < _n_codes):
            raise ConfigError(f"features: candidate {i} has slot {sd!r} and state code {cd!r} "
                              f"(slots 0..{rows - 1}, codes 0..{_n_codes - 1})")
    t = v[1]
    d0 = v[2]
    d1 = v[3]
    d2 = v[4]
    inv_cap = f32(v[5])
    h2d_lat = v[6]
    h2d_inv_bw = v[7]
    d2h_lat = v[8]
    d2h_inv_bw = v[9]
    timed = v[10] != 0.0
    for i in range(n):
        s = cython.cast(cython.Py_ssize_t, v[HEAD + i])
        c = cython.cast(cython.Py_ssize_t, v[HEAD + K + i])
        # the last accesses' ticks, ascending (a sorting network)
        q0 = S[s, RING0]
        q1 = S[s, RING0 + 1]
        q2 = S[s, RING0 + 2]
        q3 = S[s, RING0 + 3]
        q4 = S[s, RING0 + 4]
        q0, q1 = min(q0, q1), max(q0, q1)
        q3, q4 = min(q3, q4), max(q3, q4)
        q2, q4 = min(q2, q4), max(q2, q4)
        q2, q3 = min(q2, q3), max(q2, q3)
        q0, q3 = min(q0, q3), max(q0, q3)
        q0, q2 = min(q0, q2), max(q0, q2)
        q1, q4 = min(q1, q4), max(q1, q4)
        q1, q3 = min(q1, q3), max(q1, q3)
        q1, q2 = min(q1, q2), max(q1, q2)
        r = t + 1.0 - q4
        v[HEAD + 2 * K + i] = r  # the rank compares the distances as they are
        if r > H1 and q4 >= 0.0:  # the horizon caps the real distances
            r = H1
        # (a distance is at least 1: another pool's view, whose clock lags this tracker's -- a
        # guard's shadow asking prefetch_for --, made it 0 or less, and log() NaN or an error)
        if r < 1.0:
            r = 1.0
        age = t + 1.0 - S[s, INSERT]
        if age > H1:
            age = H1
        if age < 1.0:
            age = 1.0
        life = t + 1.0 - S[s, CREATE]
        if life < 1.0:
            life = 1.0
        cnt = S[s, COUNT] + 1.0
        if life > H1:  # an older object's count, scaled to its last HORIZON ticks
            cnt = S[s, COUNT] * (H1 / life) + 1.0
            life = H1
        x[i, 0] = f32(f32(log(r)) * _inv_scale[0])
        x[i, 1] = f32(f32(log(age)) * _inv_scale[1])
        x[i, 2] = f32(f32(log(life)) * _inv_scale[2])
        x[i, 3] = f32(f32(log(cnt)) * _inv_scale[3])
        x[i, 4] = f32(f32(log(S[s, E0] * d0 + 1.0)) * _inv_scale[4])
        x[i, 5] = f32(f32(log(S[s, E0 + 1] * d1 + 1.0)) * _inv_scale[5])
        x[i, 6] = f32(f32(log(S[s, E0 + 2] * d2 + 1.0)) * _inv_scale[6])
        g = (q4 - q3) + 1.0  # the reuse gaps, most recent first
        if g > H1 and q3 >= 0.0:
            g = H1
        x[i, I_GAP] = f32(f32(log(g)) * _inv_scale[I_GAP])
        g = (q3 - q2) + 1.0
        if g > H1 and q2 >= 0.0:
            g = H1
        x[i, I_GAP + 1] = f32(f32(log(g)) * _inv_scale[I_GAP + 1])
        g = (q2 - q1) + 1.0
        if g > H1 and q1 >= 0.0:
            g = H1
        x[i, I_GAP + 2] = f32(f32(log(g)) * _inv_scale[I_GAP + 2])
        g = (q1 - q0) + 1.0
        if g > H1 and q0 >= 0.0:
            g = H1
        x[i, I_GAP + 3] = f32(f32(log(g)) * _inv_scale[I_GAP + 3])
        size = S[s, SIZE]
        x[i, N_LOG - 1] = f32(f32(log(size + 1.0)) * _inv_scale[N_LOG - 1])
        x[i, I_RANK + 1] = f32(f32(size) * inv_cap)
        for j in range(N_STATE):
            x[i, I_STATE + j] = _table[c, j]
        x[i, I_SEEN] = 1.0
        if timed:
            x[i, I_SEEN + 1] = f32(f32(log1p(h2d_lat + size * h2d_inv_bw)) * _inv_log_ns)
            x[i, I_SEEN + 2] = f32(f32(x[i, I_STATE] * f32(log1p(d2h_lat + size * d2h_inv_bw)))
                                   * _inv_log_ns)
        else:
            x[i, I_SEEN + 1] = 0.0
            x[i, I_SEEN + 2] = 0.0
    inv_n1 = f32(1.0 / (n - 1 if n - 1 > 1 else 1))
    for i in range(n):
        ri = v[HEAD + 2 * K + i]
        rank = 0
        for m in range(n):
            if ri > v[HEAD + 2 * K + m]:
                rank += 1
        x[i, I_RANK] = f32(rank * inv_n1)
        for j in range(F):
            if x[i, j] > 1.0:
                x[i, j] = 1.0
    for j in range(G):
        x[K, j] = v[1 + NPRM + j]
    return n


# ---------------------------------------------------------------------- the forward pass
def _is_f32(a: Any, ndim: int) -> bool:
    """``a`` is a float32 array of ``ndim`` dimensions."""
    return getattr(getattr(a, "dtype", None), "type", None) is np.float32 and a.ndim == ndim


def _f32_matrix(a: Any, name: str, ndim: int) -> Any:
    arr = np.ascontiguousarray(a, np.float32)
    if arr.ndim != ndim:
        raise PolicyFileError(f"weight array {name!r} has shape {arr.shape}; it must have "
                              f"{ndim} dimension(s)")
    return arr


@cython.cclass
class Scorer:
    """A candidate MLP's forward pass: ``h0 = relu(x_c @ wc + x_g @ wg + b0)``, then
    ``h_i = relu(h_{i-1} @ w_i + b_i)`` for each further layer, score ``h_last @ wo + bo``.

    ``Scorer(wc, wg, b0, layers, wo, bo)`` with ``layers`` a sequence of ``(w_i, b_i)``
    (float32 copies are kept). Raises :class:`PolicyFileError` when the shapes do not fit.
    Pickles by its weights.
    """

    def __init__(self, wc: Any, wg: Any, b0: Any, layers: Any, wo: Any, bo: Any) -> None:
        wc_ = _f32_matrix(wc, "wc", 2)
        wg_ = _f32_matrix(wg, "wg", 2)
        b0_ = _f32_matrix(b0, "b0", 1)
        wo_ = _f32_matrix(wo, "wo", 1)
        ws = [_f32_matrix(w, f"w{i}", 2) for i, (w, _) in enumerate(layers, 1)]
        bs = [_f32_matrix(b, f"b{i}", 1) for i, (_, b) in enumerate(layers, 1)]
        h = b0_.shape[0]
        if wc_.shape[1] != h or wg_.shape[1] != h or wg_.shape[0] > wc_.shape[0] or h < 1:
            raise PolicyFileError(f"first layer shapes do not fit: wc {wc_.shape}, wg {wg_.shape}, "
                                  f"b0 {b0_.shape} (wc (F, H), wg (G, H) with G <= F, b0 (H,))")
        widths = [h]
        for i, (w, b) in enumerate(zip(ws, bs), 1):
            if w.shape[0] != h or b.shape != (w.shape[1],) or w.shape[1] < 1:
                raise PolicyFileError(f"layer {i} shapes do not fit: w{i} {w.shape}, b{i} {b.shape}, "
                                      f"previous width {h}")
            h = w.shape[1]
            widths.append(h)
        if wo_.shape != (h,):
            raise PolicyFileError(f"output layer wo has shape {wo_.shape}, expected ({h},)")
        self._wc_arr, self._wg_arr, self._b0_arr, self._wo_arr = wc_, wg_, b0_, wo_
        self._layers = [(w, b) for w, b in zip(ws, bs)]
        self._wc, self._wg = wc_.reshape(-1), wg_.reshape(-1)  # rows of H, flat
        self._b0, self._wo = b0_, wo_
        self._bo = f32(float(np.asarray(bo, np.float32).reshape(-1)[0]))
        self._nf = wc_.shape[0]
        self._ng = wg_.shape[0]
        self._depth = len(ws)
        self._widths = np.array(widths, np.intp)
        # the further layers flat: layer i's weights from _woff[i], its biases from _boff[i]
        self._wh = np.concatenate([w.reshape(-1) for w in ws] + [np.zeros(1, np.float32)])
        self._bh = np.concatenate(bs + [np.zeros(1, np.float32)])
        self._woff = np.cumsum([0] + [w.size for w in ws]).astype(np.intp)
        self._boff = np.cumsum([0] + [b.size for b in bs]).astype(np.intp)
        hmax = max(widths)
        self._g = np.zeros(hmax, np.float32)
        self._h = np.zeros(hmax, np.float32)  # a candidate's sums, one layer at a time
        # one layer's recorded inputs (values, indices; _accumulate pads them to fours)
        self._val = np.zeros(max(hmax, wc_.shape[0]) + 4, np.float32)
        self._idx = np.zeros(max(hmax, wc_.shape[0]) + 4, np.intp)

    def __reduce__(self) -> Any:
        return (Scorer, (self._wc_arr, self._wg_arr, self._b0_arr, self._layers, self._wo_arr,
                         self._bo))

    @property
    def n_features(self) -> int:
        return self._nf

    @property
    def n_globals(self) -> int:
        return self._ng

    def best(self, x: Any, n: int) -> int:
        """Index of the best of the first ``n`` candidates of ``x`` (float32 ``(K + 1, F)``,
        the globals in row ``K``): the first of equal scores."""
        if not cython.compiled and not _is_f32(x, 2):  # compiled, the conversion below checks
            raise ConfigError(f"forward pass: x must be a 2-d float32 array (K + 1, {self._nf}), "
                              f"got {type(x).__name__} of {getattr(x, 'dtype', None)}")
        try:
            xv = x
        except (ValueError, TypeError) as e:
            raise ConfigError(f"forward pass: x must be a 2-d float32 array (K + 1, {self._nf}): "
                              f"{e}") from None
        return self._run(xv, n, None)

    def scores(self, x: Any, n: int, out: Any) -> int:
        """The first ``n`` candidates' scores into ``out[:n]`` (float32); returns :meth:`best`."""
        if not _is_f32(x, 2) or not _is_f32(out, 1):
            raise ConfigError(f"scores: x must be a 2-d float32 array (K + 1, {self._nf}) and out "
                              "a 1-d float32 array")
        if out.shape[0] < n:
            raise ConfigError(f"scores: out holds {out.shape[0]} scores, fewer than n={n}")
        return self._run(x, n, out)

    def _run(self, x: Any, n: int, out: Any) -> int:
        K = x.shape[0] - 1
        if x.shape[1] != self._nf or K < 1 or n < 1 or n > K:
            raise ConfigError(f"forward pass: x must be float32 (K + 1, {self._nf}) with K >= 1 and "
                              f"n in 1..K; got x ({x.shape[0]}, {x.shape[1]}) and n={n}")
        nf = self._nf
        h0 = self._b0.shape[0]
        g = self._g
        h = self._h
        val = self._val
        idx = self._idx
        wc = self._wc
        wh = self._wh
        bh = self._bh
        wo = self._wo
        # each layer's inputs are recorded in val/idx, written always and kept (m advanced) if
        # nonzero, so no branch is mispredicted; the layer's sums then overwrite h
        for j in range(h0):  # the globals' part of layer 1, shared by every candidate
            g[j] = self._b0[j]
        m = 0
        for f in range(self._ng):
            a = x[K, f]
            val[m] = a
            idx[m] = f
            m += 1 if a != 0.0 else 0
        _accumulate(self._wg, 0, h0, m, val, idx, g)
        best = 0
        top = f32(0.0)
        for i in range(n):
            m = 0
            for f in range(nf):
                a = x[i, f]
                val[m] = a
                idx[m] = f
                m += 1 if a != 0.0 else 0
            for j in range(h0):
                h[j] = g[j]
            _accumulate(wc, 0, h0, m, val, idx, h)
            width = h0
            for layer in range(self._depth):
                m = 0
                for u in range(width):  # the ReLU: the positive units are the inputs
                    a = h[u]
                    val[m] = a
                    idx[m] = u
                    m += 1 if a > 0.0 else 0
                width = self._widths[layer + 1]
                b = self._boff[layer]
                for j in range(width):
                    h[j] = bh[b + j]
                _accumulate(wh, self._woff[layer], width, m, val, idx, h)
            score = self._bo
            for j in range(width):
                a = h[j] if h[j] > 0.0 else 0.0
                score = f32(score + f32(a * wo[j]))
            if out is not None:
                out[i] = score
            if score > top or i == 0:
                top = score
                best = i
        return best


def _accumulate(w: Any, base: int, width: int, m: int, val: Any, idx: Any, acc: Any) -> None:
    """``acc[:width] += val[q] * w[base + idx[q] * width:][:width]`` for the ``m`` recorded
    inputs in order, four rows a pass (the same sums: each product rounded, added left to
    right). The inputs are padded to a multiple of four with zeros: a zero input adds ``+-0``,
    which changes no sum but perhaps a zero's sign, and every sum here goes through a ReLU,
    which maps both zeros to ``+0`` (the weights are finite: the policy file loader checks)."""
    while m % 4 != 0:
        val[m] = 0.0
        idx[m] = 0
        m += 1
    for q in range(0, m, 4):
        a0 = val[q]
        a1 = val[q + 1]
        a2 = val[q + 2]
        a3 = val[q + 3]
        r0 = base + idx[q] * width
        r1 = base + idx[q + 1] * width
        r2 = base + idx[q + 2] * width
        r3 = base + idx[q + 3] * width
        for j in range(width):
            acc[j] = acc[j] + a0 * w[r0 + j] + a1 * w[r1 + j] + a2 * w[r2 + j] + a3 * w[r3 + j]
