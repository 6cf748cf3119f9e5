"""Offline bounds on what a trace costs a pool of ``capacity``: FOO, LFOO-L and PFOO-L.

FOO (Berger, Beckmann and Harchol-Balter, "Practical bounds on optimal caching with variable
object sizes", SIGMETRICS 2018) writes optimal caching as a min-cost flow over the chain of
requests (arcs of capacity C): one arc per reuse interval of an object, carrying its size,
whose cost is what not keeping the interval costs. Its linear relaxation (``foo_l``) is a lower
bound on any policy's cost; rounding its fractional intervals down to "not kept" gives a
feasible schedule (``foo_u``), an upper bound on the optimum. PFOO-L relaxes the capacity of
every gap into one total resource (size x interval length <= C x T); its optimum (``pfoo_l``)
is below ``foo_l`` and takes a sort. LFOO-L (``lfoo_l``) prices each gap's capacity with its
own Lagrange multiplier (PFOO-L is the case of one price for all) and raises the prices by a
subgradient ascent: every set of prices gives a lower bound, between ``pfoo_l`` and ``foo_l``
(0.94-0.99 of ``foo_l``'s traffic above the compulsory on the bundled traces at 25% of their
peak live bytes, 0.73 on gpt_infer at 10%), at O(n) per step on traces of any length.

The costs are the pool's (:class:`allocator.pool.Pool` with ``placement="bytes"``, no preset,
write-back), admission control included: a miss is any access to a non-resident object;
traffic is bytes copied host-to-device plus device-to-host, where a first write allocates, a
dirty victim is written back, a free drops the object, and an access the policy does not admit
streams its bytes (issue 23). ``docs/BOUNDS.md`` derives the model: what each interval costs,
why a dirty object's write-back couples the intervals of a segment, and why
``pfoo_l <= foo_l <= OPT <= foo_u`` and ``pfoo_l <= lfoo_l <= OPT`` (``lfoo_l`` is at most
FOO-L's exact optimum; ``foo_l``, read from the solver's duals less their error, can fall a few
bytes below it where sizes lie orders of magnitude apart).

Every lower-bound row carries two bounds, each the optimum of its own program: ``misses`` (the
object-count objective) and ``traffic_bytes`` (the byte objective). ``foo_u`` is one schedule,
the rounding of the LP for the objective that ``mode`` names (``objects``: misses; ``bytes``:
traffic), and carries that schedule's misses and traffic.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from cachegym.allocator.errors import CachegymError, ConfigError
from cachegym.allocator.trace import Op, Trace

__all__ = ["Bound", "BoundViolation", "offline_bounds", "check_bounds", "stall_lower_bound", "KINDS",
           "FOO_MAX_REQUESTS", "FOO_AUTO_MAX", "LFOO_AUTO_MAX", "auto_kind", "auto_lower_bound", "foo_kept_rows"]

log = logging.getLogger(__name__)

KINDS = ("foo", "lfoo_l", "pfoo_l")
FOO_MAX_REQUESTS = 200_000  # FOO's LP beyond this takes too long: PFOO-L has no such limit
FOO_AUTO_MAX = 30_000  # "auto": FOO up to this many requests (seconds), LFOO-L beyond
LFOO_AUTO_MAX = 5_000_000  # "auto": LFOO-L up to this many requests (tens of seconds), PFOO-L beyond
LFOO_ITERATIONS = 300
"""Ascent steps of LFOO-L's multipliers (it stops earlier where 60 steps in a row gain less than
0.01%): 94-99.7% of FOO-L's optimum on the 30,000-request traces measured (docs/BOUNDS.md)."""
LFOO_WORK = 300_000_000
"""LFOO-L takes at most ``LFOO_WORK / (requests + intervals)`` steps (at least 30), so that a
long trace's bound costs tens of seconds, not minutes."""


def auto_kind(n_requests: int | Trace) -> str:
    """The bound ``auto`` stands for on a trace of ``n_requests`` requests (or on the trace
    itself: its rows but the frees): ``foo`` (exact LP, the tight one) up to
    :data:`FOO_AUTO_MAX`, ``lfoo_l`` (its Lagrangian, within a few % of it) up to
    :data:`LFOO_AUTO_MAX`, ``pfoo_l`` (its one-resource relaxation, looser) beyond."""
    if isinstance(n_requests, Trace):
        n_requests = int((n_requests.op != Op.FREE).sum())
    if n_requests <= FOO_AUTO_MAX:
        return "foo"
    return "lfoo_l" if n_requests <= LFOO_AUTO_MAX else "pfoo_l"


FILL_CANDIDATES = 2_000  # fractional intervals foo_u tries to add back (each an O(n) check)
_TOL = 1e-7  # relative tolerance of a bound against a measured cost (the LP solver's accuracy)

Objective = Literal["misses", "traffic"]
PlanObjective = Literal["misses", "traffic", "stall"]
"""What FOO's plan (:func:`foo_kept_rows`, the imitation teacher's) minimises: besides the
bounds' objectives, ``stall``: the time the copies take under a timing preset, each miss its
copy in and each write-back its copy out (``latency + bytes / bandwidth``), which is what a pool
without prefetch waits for."""


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
    object then time. Interval ``j`` runs from row ``a[j]`` (an access) to row ``b[j]`` (the
    object's next access or its free, ``n`` for the trace's end) and holds ``size[j]`` bytes
    while kept. ``miss[j]``/``copy[j]``: what not keeping it costs by itself, in misses and in
    bytes (a miss and a fetch or a stream where it ends in an access; the stream of the object's
    first write when it is that write's interval). ``seg[j]``: its dirty segment (-1: clean);
    segment ``g`` opens at the write of interval ``seg_write[g]``, whose incoming interval is
    ``seg_in[g]`` (-1 for an object's first access), and holds ``seg_size[g]`` bytes."""

    n: int
    a: np.ndarray
    b: np.ndarray
    size: np.ndarray
    miss: np.ndarray
    copy: np.ndarray
    seg: np.ndarray
    seg_write: np.ndarray
    seg_in: np.ndarray
    seg_size: np.ndarray
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
    changed = (so[pa[1:]] == so[pa[:-1]]) & (sz[pa[1:]] != sz[pa[:-1]])
    if changed.any():
        r = int(order[pa[1:][changed]].min())  # (the first in the trace's order)
        k = int(key[r])
        shown = f"{k} ({k + 2**64} as an unsigned 64-bit id)" if k < 0 else str(k)
        raise ConfigError(f"offline bounds: key {shown} changes size at row {r} without a "
                          "free before; the bounds model one size per object (free it first, or "
                          "give the trace one size per key)")
    big = sz > capacity  # never resident: streamed at every access
    acc = ~is_free
    # compulsory: an object's first access misses, and a first read copies its bytes (a first
    # write allocates if admitted: its cost is its interval's); an object larger than the pool
    # misses and streams at every access
    comp_misses = int((first & acc & ~big).sum() + (acc & big).sum())
    # (a streamed read copies in; a streamed write copies out, after copying in unless it is the
    # object's first access: the pool's Pool._stream)
    big_acc = acc & big
    comp_traffic = int(sz[first & acc & ~big & (sop == Op.READ)].sum() + sz[big_acc].sum()
                       + sz[big_acc & (sop == Op.WRITE) & ~first].sum())
    # interval j starts at sorted position pos[j] (an access of an object that fits)
    pos = np.flatnonzero(acc & ~big)
    has_next = ~last[pos]
    nxt = np.where(has_next, pos + 1, 0)
    a = order[pos]
    b = np.where(has_next, order[nxt], n)
    ends_access = has_next & ~is_free[nxt]
    s = sz[pos]
    write = sop[pos] == Op.WRITE
    first_iv = first[pos]
    miss = ends_access.astype(np.int64)
    copy = s * ends_access.astype(np.int64)  # (a write's own copy out: its segment's)
    # dirty segments: a write opens one; it lasts until the object's next write or its end
    w = write.astype(np.int64)
    cw = np.cumsum(w)
    base = np.maximum.accumulate(np.where(first_iv, cw - w, 0)) if len(pos) else cw
    dirty = (cw - base) > 0
    seg = np.where(dirty, cw - 1, -1)  # segments numbered by their write: dense already
    seg_write = np.flatnonzero(write)
    seg_in = np.where(first_iv[seg_write], -1, seg_write - 1)
    return _Intervals(n, a.astype(np.int64), b.astype(np.int64), s, miss, copy, seg.astype(np.int64),
                      seg_write, seg_in, s[seg_write], comp_misses, comp_traffic)


def _costs(iv: _Intervals, objective: str, preset: Any = None
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(keep, f, seg)``: the intervals that matter to ``objective``, what not keeping each
    costs by itself, and what each dirty segment's write-back costs (``None``: the objective
    does not count write-backs). ``stall`` needs ``preset`` (a
    :class:`~allocator.cost.Preset`): a copy costs its time, :func:`_copy_times`. ``h2d``
    (the stall bound's, :func:`stall_lower_bound`): the time of the host-to-device copies
    alone, each interval that ends in an access its fetch (write-backs cost nothing)."""
    if objective == "misses":
        keep = iv.miss > 0
        return keep, iv.miss[keep].astype(np.float64), None
    if objective == "h2d":
        keep = iv.copy > 0
        return keep, _copy_times(preset, 0, iv.size[keep]), None
    keep = (iv.copy > 0) | (iv.seg >= 0)
    if objective == "stall":
        f = np.where(iv.copy > 0, _copy_times(preset, 0, iv.size), 0.0)
        return keep, f[keep], _copy_times(preset, 1, iv.seg_size)
    return keep, iv.copy[keep].astype(np.float64), iv.seg_size.astype(np.float64)


def _copy_times(preset: Any, direction: int, nbytes: np.ndarray) -> np.ndarray:
    """The duration (ns) of one copy of each of ``nbytes`` under ``preset``, host to device
    (``direction`` 0) or back (1): :meth:`~allocator.cost.CostModel.copy_time`'s."""
    from cachegym.allocator.cost import CostModel

    cost = CostModel(preset)
    return np.fromiter((cost.copy_time(direction, int(b)) for b in nbytes), np.float64, len(nbytes))


def _writebacks(iv: _Intervals, kept: np.ndarray) -> np.ndarray:
    """Per segment, whether the schedule ``kept`` copies its bytes out once: some interval of
    the segment is not kept (a dirty object evicted is written back; a write whose own interval
    is not kept is either evicted dirty or, not admitted, streamed out). Once out, the object
    is clean until the next write."""
    return np.bincount(iv.seg[(iv.seg >= 0) & ~kept],  # type: ignore[no-any-return]
                       minlength=len(iv.seg_write)) > 0


def _schedule_cost(iv: _Intervals, kept: np.ndarray) -> tuple[int, int]:
    """Misses and traffic of the schedule that keeps exactly the intervals ``kept``."""
    misses = iv.compulsory_misses + int(iv.miss[~kept].sum())
    traffic = iv.compulsory_traffic + int(iv.copy[~kept].sum())
    traffic += int(iv.seg_size[_writebacks(iv, kept)].sum())
    return misses, traffic


# ---------------------------------------------------------------------- FOO
def _foo_lp(iv: _Intervals, capacity: int, objective: str, preset: Any = None,
            plan_only: bool = False) -> tuple[float, np.ndarray]:
    """The LP optimum (cost beyond the compulsory) and each interval's kept fraction (0 where
    not in the LP). ``plan_only`` (:func:`foo_kept_rows`): the kept fractions alone, the first
    value ``nan``; the same fractions as without it (those of HiGHS's solve at its default
    tolerances), without the dual bound and the solves at tight tolerances that make it sound
    (18 of the 28 solves of the README's imitation quickstart; the main job's teacher, 35
    windows of the DL traces, took as long as before: 55.4 s against 53.6).

    Variables: x_j (interval j's kept fraction), w_g (segment g's write-back) and e_i (bytes
    kept across the gap after row i, as a share of the capacity, at most 1). Rows: the chain
    e_i = e_{i-1} + s x_(starting at i) - s x_(ending at i), and for every interval j of a
    segment g: w_g >= 1 - x_j.
    """
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    keep, f, segc = _costs(iv, objective, preset)
    idx = np.flatnonzero(keep)
    nj, n = len(idx), iv.n
    const = float(f.sum())
    x_of = np.zeros(len(iv.a))
    if nj == 0:
        return const, x_of
    a, b = iv.a[idx], iv.b[idx]
    s = iv.size[idx].astype(np.float64) / capacity  # every size as a share of the capacity
    local = np.full(len(iv.a), -1, np.int64)
    local[idx] = np.arange(nj)
    ng = len(iv.seg_write) if segc is not None else 0
    segsz = segc[:ng] if segc is not None else np.zeros(0)  # each write-back's cost
    unit = max(float(f.max(initial=0.0)), float(segsz.max(initial=0.0)), 1.0)  # cost scale
    c = np.concatenate([-f / unit, segsz / unit, np.zeros(n)])
    wi, ei = nj, nj + ng
    jj = np.arange(nj)
    end = b < n
    r_eq = np.concatenate([np.arange(n), np.arange(1, n), a, b[end]])
    c_eq = np.concatenate([ei + np.arange(n), ei + np.arange(n - 1), jj, jj[end]])
    v_eq = np.concatenate([np.ones(n), -np.ones(n - 1), -s, s[end]])
    nv = nj + ng + n
    a_eq = coo_matrix((v_eq, (r_eq, c_eq)), shape=(n, nv)).tocsr()
    a_ub = b_ub = None
    if ng:
        # w_g >= 1 - x_j for every interval j of g: -x_j - w_g <= -1
        mem = np.flatnonzero(iv.seg >= 0)
        g1, j1 = iv.seg[mem], local[mem]
        m = len(mem)
        r1 = np.arange(m)
        a_ub = coo_matrix((np.concatenate([-np.ones(m), -np.ones(m)]),
                           (np.concatenate([r1, r1]), np.concatenate([j1, wi + g1]))),
                          shape=(m, nv)).tocsr()
        b_ub = -np.ones(m)
    bounds = np.zeros((nv, 2))
    bounds[:, 1] = 1.0
    def solve(options: dict[str, Any] | None) -> Any:
        return linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=np.zeros(n), bounds=bounds,
                       method="highs", options=options)

    def bound(res: Any) -> float:
        # the duals' bound in the objective's unit, less the rounding errors (of the dual sum,
        # and of this sum, whose terms reach const: a cost of 0 is computed as const - const)
        lower, err = _dual_bound(c, a_eq, a_ub, b_ub, res)
        return math.fsum((const, lower * unit)) - err * unit - 4 * _EPS * (const + abs(lower) * unit)

    # the plan (x: foo_u's schedule, the imitation teacher's labels) from HiGHS's defaults, as
    # always; the bound from the duals of that solve, or where they fall short of its primal
    # optimum (tolerances coarser than some costs) from a solve at tight tolerances
    res = solve(None)
    value = -math.inf
    if res.status == 0:
        x_of[idx] = np.clip(res.x[:nj], 0.0, 1.0)
        if plan_only:
            return math.nan, x_of
        value = bound(res)
        primal = const + float(res.fun) * unit
        if value >= primal - 1e-9 * max(1.0, abs(primal)):
            return max(0.0, value), x_of
    for options in _LP_OPTIONS:
        tight = solve(options)
        if tight.status == 0:
            if res.status != 0:
                x_of[idx] = np.clip(tight.x[:nj], 0.0, 1.0)
            if plan_only:
                return math.nan, x_of
            return max(0.0, value, bound(tight)), x_of
    if res.status == 0:
        return max(0.0, value), x_of
    # x = 0 is always feasible: only a numerical failure lands here; 0 beyond the compulsory is a
    # bound still (no schedule costs less), and keeping nothing a schedule (foo_u's)
    log.warning("FOO's LP did not solve (%s): %s", res.message,
                "its plan keeps nothing" if plan_only else
                "its lower bound is the compulsory cost alone")
    return (math.nan if plan_only else 0.0), x_of


_EPS = float(np.finfo(np.float64).eps)
_LP_OPTIONS = ({"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10},
               {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10,
                "presolve": False})
"""HiGHS's options for FOO's LP where its defaults fall short, tried in turn until one solves.
The default tolerances (1e-7) are coarser than a small object's cost beside a large one's (17
bytes beside 9.5 GB: 2e-9 of the scale): HiGHS then dropped such costs and let the capacity be
overrun by as much, and the "optimum" it returned was above the LP's (a lower bound above a
schedule's cost). The plan stays the default solve's where that solves (training's labels)."""


def _dual_bound(c: np.ndarray, a_eq: Any, a_ub: Any, b_ub: Any, res: Any) -> tuple[float, float]:
    """A lower bound on ``min c.x`` over ``a_eq x = 0``, ``a_ub x <= b_ub``, ``0 <= x <= 1``
    from the solver's dual values, valid whatever their accuracy (weak duality with the box
    taken exactly): for any ``y`` and any ``z >= 0``, every feasible ``x`` has ``c.x >=
    sum_j min(0, d_j) - b_ub.z`` with ``d = c + a_eq' y + a_ub' z``. The solver's duals make it
    the LP's optimum up to their error; a primal objective that tolerances moved above the
    optimum never enters. Both sign conventions of the duals are tried (each is valid).
    Returns ``(bound, error)``: the bound summed exactly (``math.fsum``) from the ``d_j``, and a
    bound on the rounding error of computing the ``d_j`` (each a sum of a few products)."""
    m_eq = np.asarray(res.eqlin.marginals, np.float64)
    m_ub = np.asarray(res.ineqlin.marginals, np.float64) if a_ub is not None else None
    abs_eq = abs(a_eq).T
    best, best_err = -math.inf, 0.0
    for sign in (-1.0, 1.0):
        y = sign * m_eq
        d = c + a_eq.T @ y
        mag = np.abs(c) + abs_eq @ np.abs(y)  # what each d_j is a sum of
        terms: list[float] = []
        if a_ub is not None and m_ub is not None:
            z = np.maximum(sign * m_ub, 0.0)
            d = d + a_ub.T @ z
            mag = mag + abs(a_ub).T @ z
            terms = list(-(np.asarray(b_ub, np.float64) * z))
        neg = d < 0
        val = math.fsum(terms + list(d[neg]))
        # (each d_j and its sign within 8 eps of its magnitude: those near 0 may be either)
        err = 8 * _EPS * float(mag[neg | (np.abs(d) <= 8 * _EPS * mag)].sum())
        if val - err > best - best_err:
            best, best_err = val, err
    return best, best_err


def _overflow(iv: _Intervals, kept: np.ndarray, capacity: int) -> np.ndarray:
    """Gaps (after each row) where the schedule ``kept`` holds more than the pool."""
    delta = np.zeros(iv.n + 1, np.int64)
    np.add.at(delta, iv.a[kept], iv.size[kept])
    np.add.at(delta, iv.b[kept], -iv.size[kept])
    return np.flatnonzero(np.cumsum(delta)[:-1] > capacity)


def _round_down(iv: _Intervals, x: np.ndarray, capacity: int) -> np.ndarray:
    """A feasible integer schedule from fractional ``x``: whole intervals stay, others go."""
    kept = x >= 1.0 - 1e-7
    for _ in range(len(iv.a) + 1):  # (solver tolerance) drop the largest interval across
        bad = _overflow(iv, kept, capacity)  # an overflowing gap until none overflows
        if len(bad) == 0:
            return kept
        r = bad[0]
        across = np.flatnonzero(kept & (iv.a <= r) & (iv.b > r))
        kept[across[np.argmax(iv.size[across])]] = False
    raise AssertionError("unreachable: keeping nothing is always feasible")


def _schedule_cost_fn(iv: _Intervals, objective: PlanObjective,
                      preset: Any = None) -> Callable[[np.ndarray], float]:
    """``cost(kept)``: a schedule's cost on ``objective`` beyond the compulsory (:func:`_costs`:
    each interval not kept, and each dirty segment written back), the interval costs computed
    once."""
    keep, f, segc = _costs(iv, objective, preset)
    f_all = np.zeros(len(iv.a))  # each interval's cost if not kept (0: it costs nothing)
    f_all[keep] = f

    def cost_of(k: np.ndarray) -> float:
        c = float(f_all[~k].sum())
        return c if segc is None else c + float(segc[_writebacks(iv, k)].sum())

    return cost_of


def _fill(iv: _Intervals, x: np.ndarray, kept: np.ndarray, capacity: int,
          objective: PlanObjective, preset: Any = None) -> np.ndarray:
    """Add back fractional intervals, most kept first (at most :data:`FILL_CANDIDATES`), each
    where it fits in every gap it spans and lowers the schedule's cost."""
    cand = np.flatnonzero(~kept & (x > 1e-7))
    cand = cand[np.argsort(-x[cand], kind="stable")][:FILL_CANDIDATES]
    if len(cand) == 0:
        return kept
    delta = np.zeros(iv.n + 1, np.int64)
    np.add.at(delta, iv.a[kept], iv.size[kept])
    np.add.at(delta, iv.b[kept], -iv.size[kept])
    load = np.cumsum(delta)[:-1]
    cost_of = _schedule_cost_fn(iv, objective, preset)
    cost = cost_of(kept)
    for j in cand:
        a, b, s = int(iv.a[j]), int(iv.b[j]), int(iv.size[j])
        if int(load[a:b].max()) + s > capacity:
            continue
        kept[j] = True
        c = cost_of(kept)
        if c < cost:
            cost = c
            load[a:b] += s
        else:
            kept[j] = False
    return kept


def _foo_schedule(iv: _Intervals, x: np.ndarray, capacity: int, objective: PlanObjective,
                  preset: Any = None) -> np.ndarray:
    """``foo_u``'s schedule: the LP's fractional ``x`` rounded down, then filled back."""
    return _fill(iv, x, _round_down(iv, x, capacity), capacity, objective, preset)


def foo_kept_rows(trace: Trace, capacity: int, objective: PlanObjective = "traffic",
                  preset: Any = None) -> np.ndarray:
    """FOO's plan for ``trace`` in a pool of ``capacity`` bytes: per row, whether the schedule
    of ``foo_u`` (the LP for ``objective``, rounded) keeps the reuse interval that starts at
    that row (an access, up to the object's next access or free). False where none starts (a
    free; an object larger than the pool) and for intervals that cost nothing whether kept or
    not (e.g. a clean object's last). The imitation teacher ``"foo"`` evicts a candidate whose
    interval, from its last access on, the plan does not keep. Up to :data:`FOO_MAX_REQUESTS`
    rows (a 16,384-row window: 2-6 s). ``stall`` (:data:`PlanObjective`) needs ``preset``, a
    timing preset (a name or :class:`~allocator.cost.Preset`) whose copy times it weighs."""
    if objective not in ("misses", "traffic", "stall"):
        raise ConfigError(f"FOO's plan: objective must be 'misses', 'traffic' or 'stall', got "
                          f"{objective!r}")
    if objective == "stall":
        from cachegym.allocator.cost import get_preset

        if preset is None:
            raise ConfigError("FOO's plan: objective 'stall' needs a timing preset (e.g. "
                              "preset='h100_pcie5') whose copy times it weighs")
        preset = get_preset(preset) if isinstance(preset, str) else preset
    if len(trace) > FOO_MAX_REQUESTS:
        raise ConfigError(f"FOO's plan: limited to {FOO_MAX_REQUESTS} requests; this trace has "
                          f"{len(trace)}")
    capacity = int(capacity)
    iv = _intervals(trace, capacity)
    _, x = _foo_lp(iv, capacity, objective, preset, plan_only=True)
    kept = _foo_schedule(iv, x, capacity, objective, preset)
    out = np.zeros(len(trace), bool)
    out[iv.a[kept]] = True
    return out


# ---------------------------------------------------------------------- PFOO-L
def _pfoo_l(iv: _Intervals, capacity: int, objective: str, preset: Any = None) -> float:
    """The optimum (beyond the compulsory) of the one-resource relaxation: interval j uses
    ``size x gaps it spans`` of ``C x gaps``, saves its own cost when kept, and write-backs are
    relaxed away (they couple intervals). A fractional knapsack: sort by cost saved per unit of
    resource and fill greedily. For traffic each segment's copy out is charged to the write's
    own interval (``w_g >= 1 - x_k`` is one of its constraints: still a relaxation); for ``h2d``
    (:func:`_costs`) each fetch costs its copy time under ``preset``."""
    own: np.ndarray = iv.miss
    if objective == "traffic":
        own = iv.copy.copy()
        own[iv.seg_write] += iv.seg_size
    elif objective == "h2d":
        fetch, f_fetch, _ = _costs(iv, "h2d", preset)
        own = np.zeros(len(iv.a))
        own[fetch] = f_fetch
    keep = own > 0
    f = own[keep].astype(np.float64)
    r = iv.size[keep].astype(np.float64) * (iv.b[keep] - iv.a[keep])
    budget = float(capacity) * iv.n
    order = np.argsort(-(f / r), kind="stable")
    fo, ro = f[order], r[order]
    cum = np.cumsum(ro)
    full = cum <= budget
    saved = float(fo[full].sum())
    k = int(full.sum())
    if k < len(fo):
        left = budget - (float(cum[k - 1]) if k else 0.0)
        saved += float(fo[k]) * max(left, 0.0) / float(ro[k])
    return float(f.sum()) - saved


def _lfoo_l(iv: _Intervals, capacity: int, objective: str, preset: Any = None,
            iterations: int | None = None, floor: float | None = None) -> float:
    """FOO-L's Lagrangian bound (beyond the compulsory): FOO-L with its capacity constraints
    (one per gap: the bytes kept across it at most C) moved into the objective, each with a
    multiplier ``lam_i >= 0``. For every ``lam >= 0`` the minimum of the Lagrangian,

        L(lam) = sum_j f_j - C sum_i lam_i + sum_j min(0, r_j)            (clean intervals)
                 + sum_g min(c_g + sum_(j in g) min(0, r_j), sum_(j in g) r_j)   (segments)

    with ``r_j = s_j * (lam over the gaps j spans) - f_j``, is at most FOO-L's optimum (weak
    duality; a dirty segment either keeps every interval and is never written back, or is
    written back once and keeps the intervals that pay), hence at most any schedule's cost; at
    the best ``lam`` it equals FOO-L (strong duality). The multipliers start uniform, at the best
    of 17 prices (quantiles of the intervals' cost per byte-gap; PFOO-L's single resource is
    the case of one price), and rise by a projected subgradient ascent with Adam-style steps
    (:data:`LFOO_ITERATIONS`, fewer on long traces: :data:`LFOO_WORK`); the bound is the best
    ``L`` met, less its rounding error, and never below PFOO-L's. Each step is O(n): the
    multipliers' prefix sums price every interval, a difference array counts each gap's use."""
    keep, f, segc_ = _costs(iv, objective, preset)
    idx = np.flatnonzero(keep)
    if floor is None:  # (PFOO-L's bound, where the caller has not computed it already)
        floor = _pfoo_l(iv, capacity, objective, preset)
    if len(idx) == 0:
        return floor
    n, cap = iv.n, float(capacity)
    a, b = iv.a[idx], iv.b[idx]
    s = iv.size[idx].astype(np.float64)
    const = float(f.sum())
    segc = np.zeros(0)
    if segc_ is not None and len(iv.seg_write):
        seg = iv.seg[idx]
        inseg = seg >= 0
        gs = seg[inseg]
        ng = len(iv.seg_write)
        segc = np.asarray(segc_, np.float64)
    else:
        inseg = np.zeros(len(idx), bool)
        gs = np.zeros(0, np.int64)
        ng = 0
    free = ~inseg
    if iterations is None:
        iterations = int(min(LFOO_ITERATIONS, max(30, LFOO_WORK // (n + len(idx)))))
    lam_sum_span = np.empty(len(idx))

    def value(lam: np.ndarray) -> tuple[float, np.ndarray]:
        """L(lam) less its rounding error, and the subgradient: each gap's use less C."""
        cum = np.empty(n + 1)
        cum[0] = 0.0
        np.cumsum(lam, out=cum[1:])
        np.subtract(cum[b], cum[a], out=lam_sum_span)
        red = s * lam_sum_span - f
        neg = np.minimum(red, 0.0)
        x = (red < 0).astype(np.float64)
        total = const - cap * float(cum[n]) + float(neg[free].sum())
        if ng:
            all_in = np.bincount(gs, red[inseg], minlength=ng)
            neg_in = np.bincount(gs, neg[inseg], minlength=ng)
            back = segc + neg_in  # written back once: keep what pays
            whole = all_in < back  # kept whole: no write-back
            total += float(np.minimum(back, all_in).sum())
            x[inseg] = np.where(whole[gs], 1.0, x[inseg])
        sx = s * x
        use = np.cumsum(np.bincount(a, sx, minlength=n + 1) - np.bincount(b, sx, minlength=n + 1))[:n]
        # rounding: the prefix sums (n terms) and the sums over intervals and segments
        err = (n + 8) * _EPS * float(cum[n]) * float(s.sum()) + 64 * _EPS * (
            const + cap * float(cum[n]) + float(np.abs(red).sum()))
        return total - err, use - cap

    r = s * (b - a).astype(np.float64)
    ratios = f[r > 0] / r[r > 0]
    if not len(ratios):
        return floor
    best, lam0 = -math.inf, 0.0
    for q in np.quantile(ratios, np.linspace(0.0, 1.0, 17)):
        v, _ = value(np.full(n, float(q)))
        if v > best:
            best, lam0 = v, float(q)
    scale = lam0 if lam0 > 0 else float(np.median(ratios))
    lam = np.full(n, lam0)
    m = np.zeros(n)
    v2 = np.zeros(n)
    last_gain = 0
    for k in range(iterations):
        v, g = value(lam)
        if v > best * (1 + 1e-4) + 1e-12 or (best <= 0 and v > best):
            last_gain = k
        if v > best:
            best = v
        if k - last_gain >= 60:
            break
        gn = g / cap
        m = 0.9 * m + 0.1 * gn
        v2 = 0.999 * v2 + 0.001 * gn * gn
        mh = m / (1 - 0.9 ** (k + 1))
        vh = v2 / (1 - 0.999 ** (k + 1))
        lam = np.maximum(0.0, lam + scale * mh / (np.sqrt(vh) + 1e-12))
    return max(floor, best, 0.0)


# ---------------------------------------------------------------------- API
def _check_capacity(what: str, capacity: Any) -> None:
    """Refuse a capacity that is not a positive integer (bytes, or objects in objects mode)."""
    if (not isinstance(capacity, (int, np.integer)) or isinstance(capacity, bool)
            or capacity <= 0):
        raise ConfigError(f"{what}: capacity must be a positive integer, got {capacity!r}")


def offline_bounds(trace: Trace, capacity: int, mode: str,
                   kinds: Iterable[str] = KINDS) -> dict[str, Bound]:
    """Bounds on ``trace``'s cost in a pool of ``capacity`` (bytes; objects in ``objects``
    mode, where every size counts 1, as the evaluator replays it).

    ``kinds``: ``"foo"`` (rows ``foo_l`` and ``foo_u``; exact LP, up to
    :data:`FOO_MAX_REQUESTS` requests), ``"lfoo_l"`` (row ``lfoo_l``: FOO-L's Lagrangian, any
    size, seconds per million requests) and/or ``"pfoo_l"`` (row ``pfoo_l``; any size).
    """
    kinds = tuple(kinds)
    for k in kinds:
        if k not in KINDS:
            raise ConfigError(f"offline bounds: unknown kind {k!r}; allowed: {', '.join(KINDS)}")
    if mode not in ("objects", "bytes"):
        raise ConfigError(f"offline bounds: mode must be 'objects' or 'bytes', got {mode!r}")
    _check_capacity("offline bounds", capacity)
    if "foo" in kinds and len(trace) > FOO_MAX_REQUESTS:
        raise ConfigError(f"offline bounds: FOO solves a linear program of the whole trace and is "
                          f"limited to {FOO_MAX_REQUESTS} requests; this trace has {len(trace)}. "
                          "Use kind 'lfoo_l' (any size, within a few % of FOO-L) or 'pfoo_l' (the fastest), or a "
                          "window of the trace")
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
        out["foo_l"] = Bound("foo_l", True, _integral(lm + iv.compulsory_misses),
                             _integral(lt + iv.compulsory_traffic), prep + t1 - t0)
        cached = _foo_schedule(iv, xm if primary == "misses" else xt, capacity, primary)
        um, ut = _schedule_cost(iv, cached)
        out["foo_u"] = Bound("foo_u", False, float(um), float(ut),
                             prep + time.perf_counter() - t0)
    pfoo: dict[str, float] = {}  # PFOO-L's bound per objective: LFOO-L's floor as well
    if "pfoo_l" in kinds:
        t0 = time.perf_counter()
        pfoo = {o: _pfoo_l(iv, capacity, o) for o in ("misses", "traffic")}
        out["pfoo_l"] = Bound("pfoo_l", True, _integral(pfoo["misses"] + iv.compulsory_misses),
                              _integral(pfoo["traffic"] + iv.compulsory_traffic),
                              prep + time.perf_counter() - t0)
    if "lfoo_l" in kinds:
        t0 = time.perf_counter()
        lo_m, lo_t = (_lfoo_l(iv, capacity, o, floor=pfoo.get(o)) for o in ("misses", "traffic"))
        out["lfoo_l"] = Bound("lfoo_l", True, _integral(lo_m + iv.compulsory_misses),
                              _integral(lo_t + iv.compulsory_traffic), prep + time.perf_counter() - t0)
    return {k: out[k] for k in ("foo_l", "foo_u", "lfoo_l", "pfoo_l") if k in out}


def auto_lower_bound(trace: Trace, capacity: int, mode: str = "bytes") -> Bound | None:
    """The lower row of the bound ``auto`` picks for ``trace`` (:func:`auto_kind`: ``foo_l``,
    ``lfoo_l`` or ``pfoo_l``), or ``None`` for a trace outside the bounds' model (a key that changes size
    without a free), logged as a warning: bounds decorate figures, they never fail a run."""
    kind = auto_kind(trace)
    try:
        return offline_bounds(trace, capacity, mode, kinds=(kind,))[
            "foo_l" if kind == "foo" else kind]
    except ConfigError as e:
        log.warning("trace %s: no offline bound: %s", trace.name, e)
        return None


def _integral(lower: float) -> float:
    """A relaxation's optimum as a bound on an integer cost (misses, bytes): every schedule's
    cost is an integer at least the optimum, so it is at least the optimum rounded up. The
    solver's own error (relative ~1e-9) is taken off first, so that an optimum a hair above an
    integer does not round up past a schedule that costs exactly that integer."""
    return float(math.ceil(lower - 1e-8 * max(1.0, abs(lower))))


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


def stall_lower_bound(trace: Trace, preset: Any, capacity: int | None = None) -> int:
    """A lower bound (ns) on the stall of any schedule of ``trace`` (any eviction, any
    prefetching, any admission) under ``preset``'s copy engines (a name, a file or a
    :class:`~allocator.cost.Preset`), as :class:`~allocator.cost.CostModel` times them; with
    ``capacity``, in a pool of that many bytes (byte placement), else at any capacity.

    A compulsory read (an object's first access, since its last free, that reads it) must be
    copied host-to-device before it is served; such copies queue on the one host-to-device
    engine, each taking ``copy_time`` (latency + bytes / bandwidth), and none starts before the
    trace does. Request ``i`` is served at ``C_i + S_i`` (``C_i`` the compute of the requests
    before it, ``S_i`` the stall so far), which is at least ``E_i``, the engine time of the
    compulsory reads up to ``i``. So the stall is at least ``max_i (E_i - C_i)``, and 0.

    With ``capacity`` the same argument runs over every fetch a pool of that size must make,
    not only the compulsory ones: each reuse interval of an object (from an access to its next
    one) that the schedule does not keep resident throughout ends in a fetch (a demand miss, a
    prefetch or a stream), so the host-to-device engine works at least ``E`` = the compulsory
    fetches' times (an object larger than the pool: every access but a first write) plus the
    least total fetch time of any set of intervals that fits the pool -- FOO's linear
    relaxation with each interval's fetch time as its cost (PFOO-L's beyond
    :data:`FOO_AUTO_MAX` requests), a lower bound on it. Every such fetch is used by an
    access no later than the last one, served at ``C_last + S``: the stall is at least
    ``E - C_last``. A prefetch that is never used, a write-back and a fragmented arena only
    add to it; ``docs/BOUNDS.md``. The sweep's ``stall_ref`` row shows how loose it stays.
    """
    from cachegym.allocator.cost import CostModel

    cost = CostModel(preset)
    if cost.instant or len(trace) == 0:
        return 0
    obj = trace.object_ids()
    op = trace.op
    live = op != Op.FREE
    first = np.zeros(len(trace), bool)
    rows = np.flatnonzero(live)
    _, idx = np.unique(obj[rows], return_index=True)
    first[rows[idx]] = True
    # (an object's first access since its free: object_ids numbers a key anew after a free)
    compulsory = first & (op == Op.READ)
    times = _copy_times(cost.preset, 0, trace.size[compulsory]).astype(np.int64)
    engine = np.zeros(len(trace), np.int64)
    engine[compulsory] = times
    engine = np.cumsum(engine)
    # the compute the pool runs: a row's after its access (a free row's is not run,
    # allocator/trace.py; counting it would compare the pool with another clock)
    compute = np.where(live, trace.compute_ns, 0)
    compute_before = np.concatenate(([0], np.cumsum(compute[:-1], dtype=np.int64)))
    gap = engine - compute_before
    bound = max(0, int(gap[compulsory].max()) if compulsory.any() else 0)
    if capacity is None or not rows.size:
        return bound
    _check_capacity("stall lower bound", capacity)
    capacity = int(capacity)
    try:
        iv = _intervals(trace, capacity)
    except ConfigError as e:  # (a key that changes size: outside the intervals' model)
        log.warning("trace %s: stall bound without the pool's capacity: %s", trace.name, e)
        return bound
    # an object larger than the pool is streamed: copied in at every access but a first write
    # (its first read is among the compulsory ones)
    big = live & (trace.size > capacity)
    comp = float(times.sum()) + float(_copy_times(cost.preset, 0, trace.size[big & ~first]).sum())
    if len(trace) <= FOO_AUTO_MAX:
        more, _ = _foo_lp(iv, capacity, "h2d", cost.preset)
    else:
        more = _pfoo_l(iv, capacity, "h2d", cost.preset)
    e_min = (comp + max(more, 0.0)) * (1.0 - _TOL)  # (the solver's accuracy)
    last = int(rows[-1])
    return max(bound, int(math.floor(e_min - float(compute_before[last]))))
