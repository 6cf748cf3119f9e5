"""The evaluator's plots (envs/evaluation.py plot_results), read back from the figures: units
of the traffic axis, which rows each panel draws, markers that tell bounds apart."""

from __future__ import annotations

import math
from typing import Any

import pytest

import cachegym.envs.evaluation as evaluation
from cachegym.envs.evaluation import _distinct_tails, plot_results

MiB = 1 << 20


def _row(policy: str, cap: int, traffic: float, miss: float, stall: float, kind: str = "policy",
         mode: str = "bytes") -> dict[str, Any]:
    return {"trace": "t", "prefetch": "none", "preset": "h100_pcie5", "mode": mode,
            "capacity": cap, "policy": policy, "row_kind": kind, "traffic_bytes": traffic,
            "miss_ratio": miss, "byte_miss_ratio": miss, "stall_ns": stall}


def _figures(rows: list[dict[str, Any]], tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    figs: list[Any] = []

    def keep(fig: Any, path: str) -> str:
        figs.append(fig)
        return path

    monkeypatch.setattr(evaluation, "_save", keep)
    plot_results(rows, str(tmp_path))
    return figs


def test_traffic_in_a_binary_unit_and_stall_rows_on_the_stall_panel_only(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [_row("lru", c, t * MiB, m, s) for c, t, m, s in ((MiB, 300, .5, 9e6), (4 * MiB, 120, .3, 4e6))]
    rows += [_row("foo_l", c, t * MiB, m, math.nan, "lower_bound")
             for c, t, m in ((MiB, 200, .4), (4 * MiB, 80, .2))]
    rows += [_row("stall_ref[belady+lookahead]", c, t * MiB, .1, s, "stall_reference")
             for c, t, s in ((MiB, 400, 2e6), (4 * MiB, 150, 1e6))]
    (fig,) = _figures(rows, tmp_path, monkeypatch)
    panels = {ax.get_ylabel(): ax for ax in fig.axes}
    assert "traffic (MiB copied, both ways)" in panels  # (ticks at round byte counts before)
    traffic = panels["traffic (MiB copied, both ways)"]
    assert sorted(max(line.get_ydata()) for line in traffic.get_lines()) == [200, 300]
    for label, ax in panels.items():  # the stall reference's miss ratio is under the bound
        names = {line.get_label() for line in ax.get_lines()}
        assert ("stall_ref[belady+lookahead]" in names) == (label == "stall (ms)"), label
    markers = {line.get_label(): line.get_marker() for line in panels["miss ratio"].get_lines()}
    assert markers == {"lru": "o", "foo_l": "v"}


def test_with_a_prefetcher_the_miss_panels_draw_no_bounds(tmp_path: Any,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The bounds limit fetches, prefetches included; a prefetched access is a hit, so a
    policy's miss ratio fell under the bound's line (a helper's audit: foo_l at 0.775 over the
    policies at 0.10). The traffic panel keeps them."""
    rows = [_row("lru", c, t * MiB, m, s) for c, t, m, s in ((MiB, 300, .1, 9e6), (4 * MiB, 120, .05, 4e6))]
    rows += [_row("foo_l", c, t * MiB, m, math.nan, "lower_bound")
             for c, t, m in ((MiB, 200, .7), (4 * MiB, 80, .4))]
    for r in rows[:2]:
        r["prefetch"] = "lookahead"
    (fig,) = _figures(rows, tmp_path, monkeypatch)
    panels = {ax.get_ylabel(): ax for ax in fig.axes}
    miss = panels["miss ratio (prefetched: hits)"]
    assert {line.get_label() for line in miss.get_lines()} == {"lru"}
    traffic = panels["traffic (MiB copied, both ways)"]
    assert {line.get_label() for line in traffic.get_lines()} == {"lru", "foo_l"}


def test_traffic_in_objects_mode_is_a_count(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [_row("lru", c, t, .5, 0.0, mode="objects") for c, t in ((5, 250), (12, 100))]
    for r in rows:
        r["preset"] = "none"
    (fig,) = _figures(rows, tmp_path, monkeypatch)
    assert "traffic (objects copied, both ways)" in {ax.get_ylabel() for ax in fig.axes}


def test_policy_files_of_one_name_are_told_apart_by_their_folders() -> None:
    # every make demo run exports policy.npz: they were policy#1, policy#2
    assert _distinct_tails(["/r/a/policy.npz", "/r/b/policy.npz"]) == ["a/policy", "b/policy"]
    assert _distinct_tails(["/x/p.npz", "/x/q/p.npz"]) == ["x/p", "q/p"]
    assert _distinct_tails(["/x/p.npz", "/x/q.npz"]) == ["p", "q"]
    assert _distinct_tails(["/x/p.npz", "/x/p"]) == ["p#1", "p#2"]


def test_two_classes_of_files_of_one_name_are_labelled_apart() -> None:
    """``a/p.py:MRU`` and ``b/p.py:MRU`` both read ``p.py:MRU`` in the table and the plots."""
    from cachegym.envs.evaluation import policy_label

    both = ["/x/a/p.py:MRU", "/x/b/p.py:MRU", "/y/q.py:MRU", "lru"]
    assert [policy_label(p, both) for p in both] == ["a/p.py:MRU", "b/p.py:MRU", "q.py:MRU", "lru"]
    assert policy_label("/x/a/p.py:MRU") == "p.py:MRU"
    assert policy_label("/x/a/p.py:LRUX", both) == "p.py:LRUX"  # (another class: no clash)
