"""The main job's summary: what the deployed policy pays per held-out cell, beside the
baselines it must beat and the offline figures it is measured against.

The evaluator's table has a row per (trace, capacity, policy, prefetcher); a researcher reading
the main job's output wants a few lines: per (trace, capacity), the bytes the deployed policy
copies against LRU, the best heuristic and the bound, and the stall it leaves with its own
prefetch head against LRU with the best prefetcher that does not read the trace's future (the
issues' baseline), LRU with the lookahead oracle, the stall reference and the stall lower bound.
:func:`summarize` reads the rows :func:`envs.evaluation.evaluate` returns (or ``results.csv``'s,
as strings) and computes it; nothing here replays anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from cachegym.envs.gaps import gap_closed
from cachegym.envs.sweep import number
from cachegym.policies.registry import ORACLES

__all__ = ["Cell", "summarize", "format_summary"]


@dataclass
class Cell:
    """One (trace, capacity) of a sweep, in MiB and ms (NaN where the sweep has no such row).

    ``traffic``: the deployed policy's bytes copied without prefetch; ``traffic_best`` the least
    of the heuristics' (``best_name``: which); ``traffic_bound`` the tightest lower bound.
    ``stall``: the deployed policy with its prefetch head; ``stall_lru`` LRU with the best
    prefetcher of the sweep that does not read the trace's future (``lru_prefetch``: which, ``none``
    included); ``stall_oracle`` LRU with the lookahead prefetcher; ``stall_ref`` and ``stall_lb``
    the reference and the lower bound (:mod:`envs.gaps`)."""

    trace: str
    capacity: str
    traffic: float = math.nan
    traffic_lru: float = math.nan
    traffic_best: float = math.nan
    best_name: str = ""
    traffic_bound: float = math.nan
    stall: float = math.nan
    stall_lru: float = math.nan
    lru_prefetch: str = ""
    stall_oracle: float = math.nan
    stall_ref: float = math.nan
    stall_lb: float = math.nan

    @property
    def half_reachable(self) -> bool:
        """Whether half of ``stall_lru`` is at least the stall lower bound (else no schedule
        reaches it)."""
        return not (self.stall_lru / 2 < self.stall_lb)

    @property
    def ref_gap_closed(self) -> float:
        """The share of the gap between ``stall_lru`` and the stall reference that ``stall``
        closes (1: at the reference; above 1: below it); NaN where the reference is not below
        ``stall_lru``."""
        return gap_closed(self.stall_lru, self.stall, self.stall_ref)


def summarize(rows: list[dict[str, Any]], deployed: str, head: str | None = None,
              heuristics: tuple[str, ...] = ("lru", "lfu", "arc", "s3fifo", "slru", "gdsf"),
              preset: str | None = None) -> list[Cell]:
    """One :class:`Cell` per (trace, capacity) of ``rows``, in their order. ``deployed``: the
    policy column of the deployed policy (e.g. ``learned[shadow]``); ``head``: the prefetch
    column of its prefetch head (``learned:PATH``; ``None``: its stall without prefetch);
    ``heuristics``: the policies the best heuristic is taken from (an oracle among them, e.g.
    Belady, is left out: :data:`policies.registry.ORACLES`); ``preset``: the timing preset
    whose rows are read (default: the first preset of the rows other than ``none``)."""
    if preset is None:
        preset = next((str(r["preset"]) for r in rows if r.get("preset") not in (None, "none")),
                      "none")
    cells: dict[tuple[str, str], Cell] = {}
    for r in rows:
        key = (str(r["trace"]), str(r.get("capacity_spec") or r["capacity"]))
        c = cells.setdefault(key, Cell(*key))
        kind, pol, pf = r.get("row_kind") or "policy", str(r["policy"]), str(r["prefetch"])
        mib, ms = number(r.get("traffic_bytes")) / 2**20, number(r.get("stall_ns")) / 1e6
        if kind == "lower_bound":
            if pol == "stall_lb":
                if r["preset"] == preset:
                    c.stall_lb = ms
            elif not math.isnan(mib) and not mib <= c.traffic_bound:  # (the tightest: the
                # largest lower bound)
                c.traffic_bound = mib
            continue
        if r["preset"] != preset:
            continue
        if kind == "stall_reference":
            c.stall_ref = ms
            continue
        if kind != "policy":
            continue
        if pf == "none":
            if pol == deployed:
                c.traffic = mib
            if pol == "lru":
                c.traffic_lru = mib
            if (pol in heuristics and pol not in ORACLES and not math.isnan(mib)
                    and not mib >= c.traffic_best):
                c.traffic_best, c.best_name = mib, pol
        if pol == deployed and pf == (head or "none"):
            c.stall = ms
        if pol == "lru":
            if pf == "lookahead":
                c.stall_oracle = ms
            elif (pf not in ORACLES and not pf.startswith("learned:") and not math.isnan(ms)
                  and not ms >= c.stall_lru):
                c.stall_lru, c.lru_prefetch = ms, pf
    return list(cells.values())


def _n(x: float, nd: int = 1) -> str:
    return "-" if math.isnan(x) else f"{x:.{nd}f}"


def _excess(c: Cell) -> tuple[float, float]:
    """How far a cell's traffic lies above its best heuristic's, for ranking: relative where
    the heuristic copied bytes, any bytes above a heuristic that copied none first (infinitely
    worse), then by those bytes."""
    if c.traffic_best > 0:
        return (c.traffic / c.traffic_best - 1.0, 0.0)
    return (math.inf, c.traffic) if c.traffic > 0 else (0.0, 0.0)


def _excess_text(c: Cell) -> str:
    if c.traffic_best > 0:
        return f"{100 * (c.traffic / c.traffic_best - 1):+.1f}%"
    return f"{c.traffic:.1f} MiB where it copied none"


def format_summary(cells: list[Cell], deployed: str, preset: str, with_head: bool = True) -> str:
    """The summary as text: a line per cell, totals, and the counts the issues' targets ask for
    (traffic at most the best heuristic's; stall at most half of LRU's with the best prefetcher
    that does not read the future, where that half lies below the stall lower bound, and at
    least half of the gap from it to the stall reference closed). ``with_head``: whether the
    cells' ``stall`` is with the deployed policy's prefetch head (else without prefetch)."""
    head = (f"summary: {deployed} (traffic without prefetch, MiB; stall "
            f"{'with its prefetch head' if with_head else 'without prefetch'}, ms under {preset}) "
            f"on the held-out traces\n"
            f"{'trace':<18} {'cap':>5} | {'traffic':>8} {'LRU':>8} {'best heur.':>15} "
            f"{'bound':>8} | {'stall':>7} {'LRU+best pf':>17} {'LRU+lookahead':>13} "
            f"{'reference':>9} {'lower bd':>8}")
    lines = [head]
    tot = dict.fromkeys(("t", "tl", "tb", "s", "sl", "so"), 0.0)
    for c in cells:
        lines.append(
            f"{c.trace[:18]:<18} {c.capacity[:5]:>5} | {_n(c.traffic):>8} {_n(c.traffic_lru):>8} "
            f"{_n(c.traffic_best):>8} {c.best_name[:6]:<6} {_n(c.traffic_bound):>8} | "
            f"{_n(c.stall, 2):>7} {_n(c.stall_lru, 2):>8} {c.lru_prefetch[:8]:<8} "
            f"{_n(c.stall_oracle, 2):>13} {_n(c.stall_ref, 2):>9} {_n(c.stall_lb, 2):>8}")
        for k, v in (("t", c.traffic), ("tl", c.traffic_lru), ("tb", c.traffic_best),
                     ("s", c.stall), ("sl", c.stall_lru), ("so", c.stall_oracle)):
            tot[k] += v  # (a column with a blank cell has no total: NaN, printed "-")
    lines.append(f"{'total':<18} {'':>5} | {_n(tot['t']):>8} {_n(tot['tl']):>8} {_n(tot['tb']):>8} "
                 f"{'':<6} {'':>8} | {_n(tot['s'], 2):>7} {_n(tot['sl'], 2):>8} {'':<8} "
                 f"{_n(tot['so'], 2):>13}")
    timed = [c for c in cells if not math.isnan(c.stall) and not math.isnan(c.stall_lru)]
    moved = [c for c in cells if not math.isnan(c.traffic) and not math.isnan(c.traffic_best)]
    if moved:
        le = sum(c.traffic <= c.traffic_best for c in moved)
        worst = max(moved, key=_excess)
        lines.append(f"traffic at most the best heuristic's in {le} of {len(moved)} cells "
                     f"(worst: {worst.trace} {worst.capacity}, {_excess_text(worst)})"
                     + ("" if preset == "none" else
                        f"; under {preset} the guard judges its experts on stall, not bytes "
                        "(`cachegym bench quality` compares traffic without a preset)"))
    if timed:
        half = sum(c.stall <= c.stall_lru / 2 for c in timed)
        out = [c for c in timed if not c.half_reachable]
        lines.append(f"stall at most half of LRU's with the best prefetcher that does not read the "
                     f"future in {half} of {len(timed)} cells"
                     + (f" (half lies below the stall lower bound, out of any schedule's "
                        f"reach, in {len(out)} cell{'' if len(out) == 1 else 's'})" if out else "")
                     + f"; at least half of the gap from it to the stall reference closed in "
                     f"{sum(c.ref_gap_closed >= 0.5 for c in timed)} (of "
                     f"{sum(not math.isnan(c.ref_gap_closed) for c in timed)} with the reference "
                     f"below it); below LRU + lookahead (an oracle) in "
                     f"{sum(c.stall < c.stall_oracle for c in timed)}")
    return "\n".join(lines)
