"""What a sweep measures against: offline bounds, the stall reference and the gap each policy
closes.

For every (trace, mode, capacity) of a sweep, ``eval.bounds`` (``foo``, ``lfoo_l``, ``pfoo_l``,
or ``auto``: FOO up to 30,000 requests, LFOO-L up to 5M, PFOO-L beyond, the default; see
:mod:`policies.bounds` and ``docs/BOUNDS.md``) adds bound rows: ``foo_l``, ``lfoo_l`` and ``pfoo_l``, lower
bounds on the misses and on the traffic of any policy, and ``foo_u``, one feasible schedule (an
upper bound on the optimum). With a timing preset two more rows per preset: ``stall_lb``, a
lower bound on stall (:func:`policies.bounds.stall_lower_bound`), and ``stall_ref``, the best
offline schedule computed here: of Belady's eviction alone and Belady's, LRU's and GDSF's with
the lookahead prefetcher (:data:`STALL_REF`: each reads the trace's future), the one that stalls
least (:func:`keep_best_stall_ref`). Their gap shows how loose the stall bound is.

Each policy row then gets ``gap_closed_<objective> = (LRU - policy) / (LRU - bound)`` for
``misses``, ``traffic`` (bytes copied both ways) and ``stall`` (with a preset): 0 is LRU, 1 the
bound, negative behind LRU; blank where LRU is at the bound or within 0.1% of it
(:data:`GAP_MIN_SHARE`). The misses and traffic bound is the
tightest lower-bound row of the group (``gap_bound`` names it), the stall bound ``stall_lb``. A
policy below a lower bound raises :class:`~policies.bounds.BoundViolation`: a gap above 1 is
never reported.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.trace import Op, Trace

__all__ = ["OBJECTIVES", "gap_closed", "bound_rows", "stall_rows", "add_gap_closed", "check_rows_against_bounds",
           "STALL_REF", "keep_best_stall_ref"]

log = logging.getLogger(__name__)

OBJECTIVES = {"misses": "misses", "traffic": "traffic_bytes", "stall": "stall_ns"}
STALL_REF = (("belady", "lookahead"), ("belady", "none"), ("lru", "lookahead"), ("gdsf", "lookahead"))
"""The stall reference's candidates: (eviction, prefetch) schedules that read the trace's
future; the row keeps the one that stalls least. Belady alone is not enough: it keeps what is
reused soonest, not what is slowest to copy back, and on an inference trace of weights read in
the same order every step (the bundled ``gpt_infer`` at 25% of its peak live bytes, under
``h100_pcie5``) Belady with the lookahead prefetcher stalls 21.8 ms where LRU with it stalls
1.4 (the first step's compulsory copies, 1.3 ms, are most of that); GDSF with it stalls least
on the recorded training traces (gpt_wide 25%: 10.7 ms, LRU 24.4, Belady 29.1)."""
PFOO_MAX_REQUESTS = 20_000_000  # the evaluator's bound rows stop here (memory)
_TOL = 1e-7


def _blank(tname: str, capacity: int, spec: str, mode: str, name: str, kind: str, preset: str,
           requests: int) -> dict[str, Any]:
    """A bound's row: the evaluator's columns, each blank (NaN) but those naming the row."""
    from cachegym.envs.evaluation import COLUMNS  # (that module imports this one)

    row: dict[str, Any] = dict.fromkeys(COLUMNS, math.nan)
    row.update(trace=tname, capacity=capacity, mode=mode, policy=name, prefetch="none",
               preset=preset, requests=requests, gap_bound="", capacity_spec=spec, row_kind=kind,
               policy_file=None, placement="")
    return row


def _requests(trace: Trace) -> int:
    """The trace's accesses (its rows but the frees), as a replay counts them."""
    return int((trace.op != Op.FREE).sum())


def _whole(x: float) -> float | int:
    """``x`` as an ``int`` where it is a whole number, else as it is."""
    return int(x) if math.isfinite(x) and float(x).is_integer() else x


def bound_rows(trace: Trace, tname: str, capacity: int, spec: str, mode: str,
               kinds: list[str]) -> list[dict[str, Any]]:
    """The rows of ``eval.bounds`` for one (trace, capacity): their ``misses`` and
    ``traffic_bytes`` (fractional for an LP's optimum), preset ``none`` (they hold for every
    preset and prefetcher)."""
    if not kinds:
        return []
    from cachegym.policies.bounds import FOO_MAX_REQUESTS, auto_kind, offline_bounds

    kinds = list(dict.fromkeys(auto_kind(trace) if k == "auto" else k for k in kinds))

    if len(trace) > PFOO_MAX_REQUESTS:  # (PFOO-L holds ~160 bytes per request while it sorts)
        log.warning("trace %s: %d requests: no bound rows past %d (about %d GiB to compute); "
                    "eval.bounds=[] turns them off", tname, len(trace), PFOO_MAX_REQUESTS,
                    PFOO_MAX_REQUESTS * 160 >> 30)
        return []
    if "foo" in kinds and len(trace) > FOO_MAX_REQUESTS:
        log.warning("trace %s: %d requests, more than FOO's %d: no foo_l/foo_u rows (lfoo_l and "
                    "pfoo_l hold at any length)", tname, len(trace), FOO_MAX_REQUESTS)
        kinds = [k for k in kinds if k != "foo"]
        if not kinds:
            return []

    requests = _requests(trace)
    try:
        bounds = offline_bounds(trace, capacity, mode, kinds=tuple(kinds))
    except ConfigError as e:  # (a trace the bounds' model does not cover: the runs stand)
        log.warning("trace %s, capacity %d: no bound rows: %s", tname, capacity, e)
        return []
    rows = []
    for name, b in bounds.items():
        r = _blank(tname, capacity, spec, mode, name, "lower_bound" if b.lower else "upper_bound",
                   "none", requests)
        # (counts as integers, as the policies' rows write them, where they are whole: every
        # lower bound is rounded up to one, foo_u is a schedule's)
        r.update(misses=_whole(b.misses), traffic_bytes=_whole(b.traffic_bytes),
                 miss_ratio=b.misses / requests if requests else math.nan, wall_s=b.seconds)
        rows.append(r)
    return rows


def stall_rows(trace: Trace, tname: str, capacity: int, spec: str, mode: str,
               preset: str) -> list[dict[str, Any]]:
    """The stall lower bound's row for one (trace, capacity, preset): in ``bytes`` mode the
    bound for a pool of ``capacity`` bytes (every fetch that pool must make), in ``objects``
    mode the bound at any capacity (the compulsory fetches)."""
    from cachegym.policies.bounds import stall_lower_bound

    requests = _requests(trace)
    r = _blank(tname, capacity, spec, mode, "stall_lb", "lower_bound", preset, requests)
    r["stall_ns"] = stall_lower_bound(trace, preset, capacity if mode == "bytes" else None)
    return [r]


def keep_best_stall_ref(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with, per (trace, mode, capacity, preset), only the stall reference candidate
    that stalled least (ties: the first)."""
    best: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        if r.get("row_kind") == "stall_reference":
            g = (r["trace"], r["mode"], r["capacity"], r["preset"])
            if g not in best or r["stall_ns"] < best[g]["stall_ns"]:
                best[g] = r
    keep = {id(r) for r in best.values()}
    return [r for r in rows if r.get("row_kind") != "stall_reference" or id(r) in keep]


def _value(r: dict[str, Any], field: str) -> float:
    """A row's cost in ``field``; for misses, its fetches (misses and prefetches: a prefetch is
    a fetch moved earlier, and any schedule with prefetches has a demand-only twin with no more
    misses than it has fetches, so the misses bound holds for them)."""
    if field == "misses":
        return float(r["misses"]) + float(r.get("prefetches") or 0)
    return float(r[field])


GAP_MIN_SHARE = 1e-3
"""The gap is blank (NaN) where LRU is within this share of its cost of the bound: there it is
noise (LRU 8 misses above the bound in 1.5M requests: another policy 1.1M misses behind read
-140,434)."""


def gap_closed(lru: float, value: float, bound: float) -> float:
    """``(lru - value) / (lru - bound)``: 0 is LRU, 1 the bound; NaN where LRU is at the bound
    or within :data:`GAP_MIN_SHARE` of its cost of it."""
    if not (math.isfinite(lru) and math.isfinite(value) and math.isfinite(bound)):
        return math.nan
    if lru - bound <= max(_TOL * max(1.0, abs(lru)), GAP_MIN_SHARE * abs(lru)):
        return math.nan
    return (lru - value) / (lru - bound)


def check_rows_against_bounds(rows: list[dict[str, Any]]) -> None:
    """Raise :class:`~policies.bounds.BoundViolation` where a policy's misses or traffic is below
    a lower bound of its group, or its stall below its preset's ``stall_lb``."""
    from cachegym.policies.bounds import BoundViolation

    lows: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("row_kind") == "lower_bound":
            lows.setdefault((r["trace"], r["mode"], r["capacity"]), []).append(r)
    for r in rows:
        if r.get("row_kind", "policy") not in ("policy", "stall_reference"):
            continue
        for b in lows.get((r["trace"], r["mode"], r["capacity"]), []):
            fields = (("stall_ns",) if b["policy"] == "stall_lb" and b["preset"] == r["preset"]
                      else () if b["policy"] == "stall_lb" else ("misses", "traffic_bytes"))
            for f in fields:
                v, lim = _value(r, f), float(b[f])
                if v < lim - _TOL * max(1.0, abs(lim)):
                    raise BoundViolation(str(r["policy"]), str(b["policy"]), f, v, lim)


def add_gap_closed(rows: list[dict[str, Any]]) -> None:
    """Fill ``gap_closed_misses``, ``gap_closed_traffic``, ``gap_closed_stall`` and
    ``gap_bound`` of every policy row in place (bound rows keep them blank)."""
    best: dict[tuple[Any, ...], dict[str, tuple[float, str]]] = {}
    stall_lb: dict[tuple[Any, ...], float] = {}
    lru: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        g = (r["trace"], r["mode"], r["capacity"])
        if r.get("row_kind") == "lower_bound":
            if r["policy"] == "stall_lb":
                stall_lb[(*g, r["preset"])] = float(r["stall_ns"])
                continue
            cur = best.setdefault(g, {})
            for obj in ("misses", "traffic"):
                v = float(r[OBJECTIVES[obj]])
                if obj not in cur or v > cur[obj][0]:
                    cur[obj] = (v, str(r["policy"]))
        elif r.get("row_kind", "policy") == "policy" and r["policy"] == "lru":
            lru[(*g, r["prefetch"], r["preset"])] = r
    for r in rows:
        for obj in OBJECTIVES:
            r[f"gap_closed_{obj}"] = math.nan
        r.setdefault("gap_bound", "")
        if r.get("row_kind", "policy") not in ("policy", "stall_reference"):
            continue
        g = (r["trace"], r["mode"], r["capacity"])
        # (the stall reference, with its own prefetcher, against LRU without one)
        pf = "none" if r.get("row_kind") == "stall_reference" else r["prefetch"]
        ref = lru.get((*g, pf, r["preset"]))
        if ref is None:
            continue
        b = best.get(g, {})
        names = set()
        for obj in ("misses", "traffic"):
            if obj in b:
                f = OBJECTIVES[obj]
                r[f"gap_closed_{obj}"] = gap_closed(_value(ref, f), _value(r, f), b[obj][0])
                names.add(b[obj][1])
        if r["preset"] != "none" and (*g, r["preset"]) in stall_lb:
            r["gap_closed_stall"] = gap_closed(float(ref["stall_ns"]), float(r["stall_ns"]),
                                         stall_lb[(*g, r["preset"])])
            names.add("stall_lb")
        r["gap_bound"] = "+".join(sorted(names))
