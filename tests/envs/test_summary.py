"""The main job's summary (envs/summary.py): which rows each figure of a cell comes from."""

from __future__ import annotations

import math

from cachegym.envs.summary import format_summary, summarize

MIB, MS = 2**20, 1e6
HEAD = "learned:/x/policy.npz"


def _row(policy, prefetch="none", traffic=0.0, stall=0.0, kind="policy", preset="h100_pcie5",
         trace="t", cap="0.25"):
    return {"trace": trace, "capacity": 100, "capacity_spec": cap, "policy": policy,
            "prefetch": prefetch, "preset": preset, "row_kind": kind,
            "traffic_bytes": traffic * MIB, "stall_ns": stall * MS}


def _rows():
    return [
        _row("learned[shadow]", traffic=90, stall=30), _row("learned[shadow]", HEAD, 95, 4),
        _row("learned[none]", traffic=80, stall=20), _row("learned[none]", HEAD, 85, 3),
        _row("lru", traffic=100, stall=40), _row("lru", "history", 120, 12),
        _row("lru", "markov", 110, 9), _row("lru", "lookahead", 100, 5), _row("lru", HEAD, 100, 2),
        _row("gdsf", traffic=85, stall=25), _row("s3fifo", traffic=88, stall=35),
        _row("belady", traffic=50, stall=10),  # an oracle: never the best heuristic
        _row("lru", traffic=100, stall=0, preset="none"),
        _row("stall_ref[lru+lookahead]", "lookahead", 100, 5, kind="stall_reference"),
        _row("foo_l", traffic=40, kind="lower_bound", preset="none"),
        _row("pfoo_l", traffic=35, kind="lower_bound", preset="none"),
        _row("foo_u", traffic=45, kind="upper_bound", preset="none"),
        _row("stall_lb", stall=1, kind="lower_bound"),
    ]


def test_summary_takes_each_figure_from_its_row():
    (c,) = summarize(_rows(), "learned[shadow]", HEAD)
    assert (c.trace, c.capacity) == ("t", "0.25")
    assert (c.traffic, c.traffic_lru, c.traffic_best, c.best_name) == (90, 100, 85, "gdsf")
    assert c.traffic_bound == 40  # the tightest lower bound, not an upper bound
    assert c.stall == 4  # the deployed policy with its own head
    # LRU with the best prefetcher that does not read the future (not lookahead, not a head)
    assert (c.stall_lru, c.lru_prefetch) == (9, "markov")
    assert (c.stall_oracle, c.stall_ref, c.stall_lb) == (5, 5, 1)
    assert c.half_reachable
    assert c.ref_gap_closed == (9 - 4) / (9 - 5)
    # without a head: the deployed policy's stall without prefetch
    (c,) = summarize(_rows(), "learned[shadow]", None)
    assert c.stall == 30


def test_summary_counts_the_targets():
    rows = _rows() + [dict(r, trace="u") for r in _rows()]
    for r in rows:
        if r["trace"] == "u" and r["policy"] == "stall_lb":
            r["stall_ns"] = 8 * MS  # half of LRU's 9 ms lies below it: out of reach
        if r["trace"] == "u" and r["row_kind"] == "stall_reference":
            r["stall_ns"] = 10 * MS  # above LRU's 9 ms: no gap to close
        if r["trace"] == "u" and r["policy"] == "learned[shadow]" and r["prefetch"] == "none":
            r["traffic_bytes"] = 80 * MIB  # below GDSF's 85
    cells = summarize(rows, "learned[shadow]", HEAD)
    assert [c.trace for c in cells] == ["t", "u"] and not cells[1].half_reachable
    text = format_summary(cells, "learned[shadow]", "h100_pcie5")
    assert "traffic at most the best heuristic's in 1 of 2 cells (worst: t 0.25, +5.9%)" in text
    assert "stall at most half of LRU's with the best prefetcher that does not read the future " \
           "in 2 of 2 cells (half lies below the stall lower bound, out of any schedule's reach, " \
           "in 1 cell); at least half of the gap from it to the stall reference closed in 1 " \
           "(of 1 with the reference below it); below LRU + lookahead (an oracle) in 2" in text
    total = next(line for line in text.splitlines() if line.startswith("total"))
    assert total.split()[1:4] == ["|", "170.0", "200.0"]


def test_summary_of_a_sweep_without_the_rows_shows_dashes():
    (c,) = summarize([_row("lru", traffic=100, stall=40)], "learned[shadow]", HEAD)
    assert math.isnan(c.traffic) and math.isnan(c.stall) and math.isnan(c.stall_lb)
    text = format_summary([c], "learned[shadow]", "h100_pcie5", with_head=False)
    assert " - " in text and "stall at most" not in text and "stall without prefetch" in text
    total = next(line for line in text.splitlines() if line.startswith("total"))
    # a column without figures has no total (it printed 0.0 and 0.00)
    assert total.split() == ["total", "|", "-", "100.0", "100.0", "|", "-", "40.00", "-"]


def test_a_cell_where_the_best_heuristic_copied_nothing_is_the_worst_and_divides_nothing():
    """Everything fits and the objects are created by writes: the best heuristic copies 0
    bytes. The summary divided by it (ZeroDivisionError) and ranked such a cell as even."""
    rows = _rows() + [dict(r, trace="u") for r in _rows()]
    for r in rows:
        if r["trace"] == "u" and r["row_kind"] == "policy" and r["prefetch"] == "none":
            r["traffic_bytes"] = 0.0 if r["policy"] != "learned[shadow]" else 2 * MIB
    text = format_summary(summarize(rows, "learned[shadow]", HEAD), "learned[shadow]", "h100_pcie5")
    assert "in 0 of 2 cells (worst: u 0.25, 2.0 MiB where it copied none)" in text
    for r in rows:
        if r["trace"] == "u" and r["policy"] == "learned[shadow]" and r["prefetch"] == "none":
            r["traffic_bytes"] = 0.0  # as little as the best: not above it
    text = format_summary(summarize(rows, "learned[shadow]", HEAD), "learned[shadow]", "h100_pcie5")
    assert "in 1 of 2 cells (worst: t 0.25, +5.9%)" in text
