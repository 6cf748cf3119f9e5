"""Offline bounds on what a trace costs a pool of ``capacity``: FOO and PFOO-L.

FOO (Berger, Beckmann and Harchol-Balter, "Practical bounds on optimal caching with variable
object sizes", SIGMETRICS 2018) writes optimal caching as a min-cost flow over the chain of
requests: one arc per reuse interval of an object, carrying its size, whose cost is what not
caching the interval costs. Its linear relaxation (``foo_l``) is a lower bound on any policy's
cost; rounding its fractional intervals down to "not cached" gives a feasible schedule
(``foo_u``), an upper bound on the optimum. PFOO-L relaxes every per-request capacity
constraint into one total resource (size x interval length <= C x T); its optimum
(``pfoo_l``) is below ``foo_l`` and takes a sort or a one-dimensional search.

The costs are the pool's (:class:`allocator.pool.Pool` with ``placement="bytes"``, no preset,
write-back): a miss is any access to a non-resident object; traffic is bytes copied
host-to-device plus device-to-host. ``docs/BOUNDS.md`` derives the model: what each interval
costs, why a dirty object's write-back makes the byte cost a per-segment maximum, and why
``pfoo_l <= foo_l <= OPT <= foo_u``.

Every lower-bound row carries two bounds, each the optimum of its own program: ``misses`` (the
object-count objective) and ``traffic_bytes`` (the byte objective). ``foo_u`` is one schedule,
the rounding of the LP for the objective that ``mode`` names (``objects``: misses; ``bytes``:
traffic), and carries that schedule's misses and traffic.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from allocator.errors import CachegymError, ConfigError
from allocator.trace import Op, Trace

__all__ = ["Bound", "BoundViolation", "offline_bounds", "check_bounds", "KINDS", "FOO_MAX_REQUESTS"]

KINDS = ("foo", "pfoo_l")
FOO_MAX_REQUESTS = 200_000  # FOO's LP beyond this takes too long: PFOO-L has no such limit
_TOL = 1e-7  # relative tolerance of a bound against a measured cost (the LP solver's accuracy)

Objective = Literal["misses", "traffic"]


@dataclass(frozen=True)
class Bound:
    """One bound row. ``lower``: ``misses`` and ``traffic_bytes`` are each a lower bound on that
    cost for any policy (possibly fractional); else both are one feasible schedule's costs.
    ``seconds``: the wall time it took (``foo_u``'s includes the LPs it is rounded from)."""

    name: str
    lower: bool
    misses: float
    traffic_bytes: float
    seconds: float


class BoundViolation(CachegymError, AssertionError):
    """A policy's measured cost is below a lower bound: the bound, or the replay, is wrong.

    Attributes: ``policy``, ``bound`` (the row's name), ``field`` and the two values."""

    def __init__(self, policy: str, bound: str, field: str, value: float, limit: float) -> None:
        self.policy, self.bound, self.field, self.value, self.limit = policy, bound, field, value, limit
        super().__init__(f"policy {policy!r}: {field} {value} is below the lower bound {bound} = "
                         f"{limit}; one of the two is wrong (check the replay's settings: "
                         "placement='bytes', no preset, write-back, and the bound's mode)")


# ---------------------------------------------------------------------- intervals
@dataclass(frozen=True)
class _Intervals:
    """Every reuse interval of every object (a key between two frees is one object), in order of
    object then time. Interval ``j`` runs from row ``a[j]`` to row ``b[j]`` (``n`` for the trace's
    end) and holds ``size[j]`` bytes while cached. ``fetch`` is 1 where it ends in a read or write
    (not caching it costs that access a miss and a copy); ``seg`` is the dirty segment it belongs
    to (-1: clean), a segment running from a write to the object's next write or end."""

    n: int
    a: np.ndarray
    b: np.ndarray
    size: np.ndarray
    fetch: np.ndarray
    seg: np.ndarray
    seg_size: np.ndarray
    access_rows: np.ndarray  # rows that are reads or writes of objects that fit (a constraint each)
    compulsory_misses: int
    compulsory_traffic: int


def _intervals(trace: Trace, capacity: int) -> _Intervals:
    n = len(trace)
    key, size, op = trace.key, trace.size.astype(np.int64), trace.op
    obj = trace.object_ids()
    order = np.lexsort((np.arange(n), obj))
    so, sz, sop = obj[order], size[order], op[order]
    is_free = sop == Op.FREE
    first = np.ones(n, bool)
    first[1:] = so[1:] != so[:-1]
    last = np.ones(n, bool)
    last[:-1] = so[1:] != so[:-1]
    # an object keeps one size (the pool's residency uses the size of its last miss)
    pa = np.flatnonzero(~is_free)
    same = so[pa[1:]] == so[pa[:-1]]
    changed = same & (sz[pa[1:]] != sz[pa[:-1]])
    if changed.any():
        r = int(order[pa[1:][changed][0]])
        raise ConfigError(f"offline bounds: key {int(key[r])} changes size at row {r} without a "
                          "free before; the bounds model one size per object (free it first, or "
                          "give the trace one size per key)")
    big = sz > capacity  # never resident: streamed at every access
    acc = ~is_free
    # compulsory: an object's first access misses; it copies its bytes if it is a read (a first
    # write allocates); an object larger than the pool misses and streams at every access
    comp_misses = int((first & acc & ~big).sum() + (acc & big).sum())
    comp_traffic = int(sz[first & acc & ~big & (sop == Op.READ)].sum() + sz[acc & big].sum())
    # interval j starts at sorted position p (an access, not an object's last row)
    start = acc & ~big
    has_next = start & ~last
    pos = np.flatnonzero(start)
    nxt_pos = np.where(has_next[pos], pos + 1, -1)
    a = order[pos]
    b = np.where(nxt_pos >= 0, order[np.maximum(nxt_pos, 0)], n)
    ends_access = (nxt_pos >= 0) & ~is_free[np.maximum(nxt_pos, 0)]
    # dirty segments: a write opens one; it lasts until the object's next write or its end
    w = (sop[pos] == Op.WRITE).astype(np.int64)
    cw = np.cumsum(w)
    obj_pos = so[pos]
    newobj = np.ones(len(pos), bool)
    newobj[1:] = obj_pos[1:] != obj_pos[:-1]
    base = np.maximum.accumulate(np.where(newobj, cw - w, 0)) if len(pos) else cw
    dirty = (cw - base) > 0
    seg = np.where(dirty, cw - 1, -1)
    # renumber segments densely
    used, seg_dense = np.unique(seg[dirty], return_inverse=True)
    seg_out = np.full(len(pos), -1, np.int64)
    seg_out[dirty] = seg_dense
    seg_size = np.zeros(len(used), np.int64)
    seg_size[seg_dense] = sz[pos][dirty]
    rows = np.flatnonzero((op != Op.FREE) & (size <= capacity))
    return _Intervals(n, a.astype(np.int64), b.astype(np.int64), sz[pos], ends_access.astype(np.int64),
                      seg_out, seg_size, rows, comp_misses, comp_traffic)


def _costs(iv: _Intervals, objective: Objective) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(keep, f, seg)``: the intervals that matter to ``objective``, what not caching each
    costs on its own, and its dirty segment (-1 when the objective has no write-backs)."""
    if objective == "misses":
        keep = iv.fetch > 0
        return keep, iv.fetch[keep].astype(np.float64), np.full(int(keep.sum()), -1, np.int64)
    keep = (iv.fetch > 0) | (iv.seg >= 0)
    return keep, (iv.fetch * iv.size)[keep].astype(np.float64), iv.seg[keep]


def _schedule_cost(iv: _Intervals, cached: np.ndarray) -> tuple[int, int]:
    """Misses and traffic of the schedule that keeps exactly the intervals ``cached``."""
    miss = iv.fetch.astype(bool) & ~cached
    misses = iv.compulsory_misses + int(miss.sum())
    traffic = iv.compulsory_traffic + int(iv.size[miss].sum())
    s = iv.seg >= 0
    if s.any():  # a segment writes back once if any of its intervals is not cached
        broken = np.zeros(len(iv.seg_size), bool)
        broken[iv.seg[s & ~cached]] = True
        traffic += int(iv.seg_size[broken].sum())
    return misses, traffic


# ---------------------------------------------------------------------- FOO
def _foo_lp(iv: _Intervals, capacity: int, objective: Objective) -> tuple[float, np.ndarray]:
    """The LP optimum (cost) and each interval's cached fraction (0 where not in the LP).

    Variables: x_j (interval j's cached fraction), t_g (segment g kept dirty throughout,
    t_g <= x_j for j in g) and e_i (bytes cached across the gap after row i, as a share of the
    capacity). Rows: e_i = e_{i-1} + s x_(starting at i) - s x_(ending at i) (the chain), and
    at every access row i that fits, e_i + s_i (1 - x_(starting at i)) <= C (the accessed object
    is resident beside everything cached across it).
    """
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    keep, f, seg = _costs(iv, objective)
    a, b = iv.a[keep], iv.b[keep]
    s = iv.size[keep].astype(np.float64) / capacity  # every size as a share of the capacity
    nj, n = len(a), iv.n
    g_ids = np.unique(seg[seg >= 0])
    ng = len(g_ids)
    segsz = iv.seg_size[g_ids].astype(np.float64)
    const = float(f.sum() + segsz.sum())
    x_of = np.full(len(iv.a), 0.0)
    if nj == 0:
        return const, x_of
    unit = max(float(f.max(initial=0.0)), float(segsz.max(initial=0.0)), 1.0)  # cost scale
    c = np.concatenate([-f / unit, -segsz / unit, np.zeros(n)])
    xi, ti, ei = 0, nj, nj + ng
    # chain equalities
    jj = np.arange(nj)
    r_eq = np.concatenate([np.arange(n), np.arange(1, n), a, b[b < n]])
    c_eq = np.concatenate([ei + np.arange(n), ei + np.arange(n - 1), xi + jj, xi + jj[b < n]])
    v_eq = np.concatenate([np.ones(n), -np.ones(n - 1), -s, s[b < n]])
    a_eq = coo_matrix((v_eq, (r_eq, c_eq)), shape=(n, nj + ng + n)).tocsr()
    # capacity at access rows: e_i - s_i x_out(i) <= 1 - s_i
    rows = iv.access_rows
    out_of = np.full(n, -1, np.int64)
    out_of[a] = jj
    row_id = np.arange(len(rows))
    has_out = out_of[rows] >= 0
    r_ub = [row_id, row_id[has_out]]
    c_ub = [ei + rows, xi + out_of[rows][has_out]]
    v_ub = [np.ones(len(rows)), -s[out_of[rows][has_out]]]
    # segments: t_g - x_j <= 0
    in_seg = np.flatnonzero(seg >= 0)
    g_local = np.searchsorted(g_ids, seg[in_seg])
    k0 = len(rows)
    sr = k0 + np.arange(len(in_seg))
    r_ub += [sr, sr]
    c_ub += [ti + g_local, xi + in_seg]
    v_ub += [np.ones(len(in_seg)), -np.ones(len(in_seg))]
    n_ub = k0 + len(in_seg)
    a_ub = coo_matrix((np.concatenate(v_ub), (np.concatenate(r_ub), np.concatenate(c_ub))),
                      shape=(n_ub, nj + ng + n)).tocsr()
    row_sizes = np.asarray(_row_sizes(iv, rows), np.float64) / capacity
    b_ub = np.concatenate([1.0 - row_sizes, np.zeros(len(in_seg))])
    bounds = np.zeros((nj + ng + n, 2))
    bounds[:, 1] = 1.0
    res = linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=np.zeros(n), bounds=bounds,
                  method="highs")
    if res.status != 0:  # x = 0 is always feasible: only a numerical failure lands here
        raise RuntimeError(f"FOO's LP did not solve: {res.message}")
    x = np.clip(res.x[:nj], 0.0, 1.0)
    x_of[np.flatnonzero(keep)] = x
    return const + float(res.fun) * unit, x_of


def _row_sizes(iv: _Intervals, rows: np.ndarray) -> np.ndarray:
    out = np.zeros(iv.n, np.int64)
    out[iv.a] = iv.size  # every fitting access starts an interval of its own size
    return out[rows]


def _feasible(iv: _Intervals, cached: np.ndarray, capacity: int) -> np.ndarray:
    """Rows (access rows) where the schedule ``cached`` overflows the pool."""
    delta = np.zeros(iv.n + 1, np.int64)
    np.add.at(delta, iv.a[cached], iv.size[cached])
    np.add.at(delta, iv.b[cached], -iv.size[cached])
    load = np.cumsum(delta)[:-1]  # bytes cached across the gap after each row
    out = np.zeros(iv.n, np.int64)
    out[iv.a] = np.where(cached, 0, iv.size)  # the accessed object when not kept
    rows = iv.access_rows
    return rows[load[rows] + out[rows] > capacity]


def _round_down(iv: _Intervals, x: np.ndarray, capacity: int) -> np.ndarray:
    """A feasible integer schedule from fractional ``x``: whole intervals stay, others go."""
    cached = x >= 1.0 - 1e-7
    for _ in range(len(iv.a) + 1):  # (solver tolerance) drop the largest interval across
        bad = _feasible(iv, cached, capacity)  # an overflowing row until none overflows
        if len(bad) == 0:
            return cached
        r = bad[0]
        across = np.flatnonzero(cached & (iv.a < r) & (iv.b > r))
        cached[across[np.argmax(iv.size[across])]] = False
    raise AssertionError("unreachable: no interval cached is always feasible")


# ---------------------------------------------------------------------- PFOO-L
def _pfoo_l(iv: _Intervals, capacity: int, objective: Objective) -> float:
    """The optimum of the one-resource relaxation: each interval uses ``size x (access rows
    strictly inside it)`` of ``sum over access rows of (C - size)``.

    Without write-backs (``misses``, or a trace without writes) it is a fractional knapsack:
    sort by cost per unit resource and fill greedily. With them the cost is not separable (a
    segment saves its write-back only when all its intervals are cached), and the optimum is
    the Lagrangian dual's maximum (strong duality: one constraint, a linear program), found by
    bisection on the multiplier; any multiplier gives a valid lower bound.
    """
    keep, f, seg = _costs(iv, objective)
    const_f = float(f.sum())
    rows = iv.access_rows
    cnt = np.zeros(iv.n + 1, np.int64)
    cnt[rows + 1] = 1
    cnt = np.cumsum(cnt)  # cnt[i] = access rows before row i
    a, b = iv.a[keep], iv.b[keep]
    inside = cnt[b] - cnt[a + 1]
    r = iv.size[keep].astype(np.float64) * inside
    budget = float(capacity * len(rows) - _row_sizes(iv, rows).sum())
    if not (seg >= 0).any():
        order = np.argsort(-(f / np.maximum(r, 1e-300)), kind="stable")
        free = r[order] == 0  # fits in no row's constraint: cached for nothing
        saved = float(f[order][free].sum())
        fo, ro = f[order][~free], r[order][~free]
        cum = np.cumsum(ro)
        full = cum <= budget
        saved += float(fo[full].sum())
        k = int(full.sum())
        if k < len(fo):
            left = budget - (float(cum[k - 1]) if k else 0.0)
            saved += float(fo[k]) * max(left, 0.0) / float(ro[k])
        return const_f - saved
    g_ids, g = np.unique(seg[seg >= 0], return_inverse=True)
    sg = iv.seg_size[g_ids].astype(np.float64)
    in_seg = seg >= 0

    def dual(lam: float) -> tuple[float, float]:
        cj = lam * r - f
        val = -lam * budget + const_f + np.minimum(cj, 0.0).sum()
        pos = np.bincount(g, weights=np.maximum(cj[in_seg], 0.0), minlength=len(sg))
        val += np.minimum(sg, pos).sum()
        whole = sg > pos  # segment kept dirty throughout: all its intervals cached
        x = (cj < 0).astype(np.float64)
        xs = x[in_seg]
        xs[whole[g]] = 1.0
        x[in_seg] = xs
        return float(val), float((r * x).sum())

    v0, used0 = dual(0.0)
    if used0 <= budget:  # everything fits in the one resource
        return v0
    rr = np.where(r > 0, r, np.inf)
    fs = f.copy()
    fs[in_seg] += sg[g]
    hi = float(np.max(fs / rr)) * 2.0 + 1e-300
    lo = 0.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        _, used = dual(mid)
        if used > budget:
            lo = mid
        else:
            hi = mid
    return max(dual(lo)[0], dual(hi)[0])


# ---------------------------------------------------------------------- API
def offline_bounds(trace: Trace, capacity: int, mode: str,
                   kinds: Iterable[str] = KINDS) -> dict[str, Bound]:
    """Bounds on ``trace``'s cost in a pool of ``capacity`` (bytes; objects in ``objects``
    mode, where every size counts 1, as the evaluator replays it).

    ``kinds``: ``"foo"`` (rows ``foo_l`` and ``foo_u``; exact LP, up to
    :data:`FOO_MAX_REQUESTS` requests) and/or ``"pfoo_l"`` (row ``pfoo_l``; any size).
    """
    kinds = tuple(kinds)
    for k in kinds:
        if k not in KINDS:
            raise ConfigError(f"offline bounds: unknown kind {k!r}; allowed: {', '.join(KINDS)}")
    if mode not in ("objects", "bytes"):
        raise ConfigError(f"offline bounds: mode must be 'objects' or 'bytes', got {mode!r}")
    if (not isinstance(capacity, (int, np.integer)) or isinstance(capacity, bool)
            or capacity <= 0):
        raise ConfigError(f"offline bounds: capacity must be a positive integer, got {capacity!r}")
    if "foo" in kinds and len(trace) > FOO_MAX_REQUESTS:
        raise ConfigError(f"offline bounds: FOO solves a linear program of the whole trace and is "
                          f"limited to {FOO_MAX_REQUESTS} requests; this trace has {len(trace)}. "
                          "Use kind 'pfoo_l' (any size), or a window of the trace")
    capacity = int(capacity)
    t = trace.with_sizes(1) if mode == "objects" else trace
    primary: Objective = "misses" if mode == "objects" else "traffic"
    out: dict[str, Bound] = {}
    t0 = time.perf_counter()
    iv = _intervals(t, capacity)
    prep = time.perf_counter() - t0
    if "foo" in kinds:
        t0 = time.perf_counter()
        lm, xm = _foo_lp(iv, capacity, "misses")
        lt, xt = _foo_lp(iv, capacity, "traffic")
        t1 = time.perf_counter()
        out["foo_l"] = Bound("foo_l", True, lm + iv.compulsory_misses, lt + iv.compulsory_traffic,
                             prep + t1 - t0)
        cached = _round_down(iv, xm if primary == "misses" else xt, capacity)
        um, ut = _schedule_cost(iv, cached)
        out["foo_u"] = Bound("foo_u", False, float(um), float(ut),
                             prep + time.perf_counter() - t0)
    if "pfoo_l" in kinds:
        t0 = time.perf_counter()
        pm = _pfoo_l(iv, capacity, "misses")
        pt = _pfoo_l(iv, capacity, "traffic")
        out["pfoo_l"] = Bound("pfoo_l", True, pm + iv.compulsory_misses, pt + iv.compulsory_traffic,
                              prep + time.perf_counter() - t0)
    return out


def _field(row: Any, name: str) -> float:
    if isinstance(row, Mapping):
        if name == "traffic_bytes" and name not in row:
            return float(row["bytes_h2d"]) + float(row["bytes_d2h"])
        return float(row[name])
    if name == "traffic_bytes" and not hasattr(row, name):
        return float(row.bytes_h2d) + float(row.bytes_d2h)
    return float(getattr(row, name))


def check_bounds(rows: Iterable[Any], bounds: Mapping[str, Bound], tol: float = _TOL) -> None:
    """Raise :class:`BoundViolation` when a row's ``misses`` or traffic (``traffic_bytes``, or
    ``bytes_h2d + bytes_d2h``) is below a lower bound of ``bounds`` beyond ``tol`` (relative).
    A row is a mapping (an evaluator row) or has those attributes (:class:`PoolStats`)."""
    lower = [b for b in bounds.values() if b.lower]
    for i, row in enumerate(rows):
        name = str(row.get("policy", i)) if isinstance(row, Mapping) else str(getattr(row, "policy", i))
        for b in lower:
            for fld, lim in (("misses", b.misses), ("traffic_bytes", b.traffic_bytes)):
                v = _field(row, fld)
                if v < lim - tol * max(1.0, abs(lim)) and not math.isnan(lim):
                    raise BoundViolation(name, b.name, fld, v, lim)
