"""The quality benchmark's pieces (policies/training/quality.py): rows and verdict."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cachegym.allocator.errors import ConfigError
from cachegym.policies import features
from cachegym.policies.learned import save_policy_file
from cachegym.policies.training.quality import (
    HEURISTICS,
    broad_held_out,
    default_held_out,
    format_quality,
    quality_rows,
    verdict,
    zoo_held_out,
)


def _policy(tmp_path) -> str:
    rng = np.random.default_rng(0)
    a = {"wc": rng.normal(size=(features.F, 8)), "wg": rng.normal(size=(features.G, 8)),
         "b0": rng.normal(size=8), "wo": rng.normal(size=8), "bo": rng.normal(size=1)}
    hdr = {"task": "evict", "K": 8, "candidate_rule": "lru", "feature_spec": features.feature_spec(),
           "arch": {"type": "candidate_mlp", "n_features": features.F, "n_globals": features.G,
                    "hidden": [8], "activation": "relu"}}
    return save_policy_file(tmp_path / "p.npz", a, hdr)


def test_broad_held_out_rows_and_verdict(tmp_path) -> None:
    held = default_held_out(1500)[-2:] + broad_held_out(1500)
    assert {h.family for h in held} == {"zipf", "scan", "other"}
    assert len({h.trace.name for h in held}) == len(held) and all(len(h.trace) <= 1500 for h in held)
    rows = quality_rows(_policy(tmp_path), held, capacities=[0.25])
    assert len(rows) == len(held)
    for r in rows:
        miss = {n: r[f"miss_{n}"] for n in ("learned", *HEURISTICS, "belady")}
        assert all(0.0 <= m <= 1.0 for m in miss.values())
        traffic = {n: r[f"traffic_{n}"] for n in ("learned", *HEURISTICS, "belady")}
        best = min(HEURISTICS, key=traffic.__getitem__)
        assert r["best_heuristic"] == best and r["bound"] == "foo_l"  # (short traces: FOO)
        assert math.isclose(r["traffic_vs_best"], traffic["learned"] / traffic[best] - 1)
        # the bound is below every policy, so no gap closed above 1
        assert all(t >= r["traffic_bound"] - 1e-6 for t in traffic.values())
        assert math.isnan(r["gap_closed_traffic"]) or r["gap_closed_traffic"] <= 1
        if not math.isnan(r["gap_closed_traffic"]):
            assert math.isclose(r["gap_closed_traffic"], (traffic["lru"] - traffic["learned"])
                                / (traffic["lru"] - r["traffic_bound"]))
    v = verdict(rows)
    other = [r for r in rows if r["family"] == "other"]
    assert v["other_cells"] == len(other) == 12
    assert v["other_worst_traffic_vs_best"] == max(r["traffic_vs_best"] for r in other)
    assert v["other_cells_behind_lru"] == sum(r["traffic_learned"] > r["traffic_lru"] for r in other)
    assert v["dl_cells"] == 0 and math.isnan(v["dl_mean_gap_closed_traffic"]) and not v["dl_target_met"]
    assert format_quality(rows).count("\n") == len(rows)


def test_zoo_held_out_records_once_then_reuses(tmp_path) -> None:
    """An architecture of the zoo is recorded on first use into the cache directory and read
    back from there next time; it is reported apart from the default DL set."""
    pytest.importorskip("torch")
    cache = tmp_path / "rec"
    (h,) = zoo_held_out(str(cache), max_requests=2000, names=["vae"])
    (f,) = list(cache.iterdir())
    assert h.family == "dl_zoo" and h.trace.name == "vae" and len(h.trace) == 2000
    stamp = f.stat().st_mtime_ns
    (h2,) = zoo_held_out(str(cache), max_requests=2000, names=["vae"])
    assert f.stat().st_mtime_ns == stamp  # not recorded again
    np.testing.assert_array_equal(h.trace.key, h2.trace.key)
    rows = quality_rows(_policy(tmp_path), [h], capacities=[0.25])
    v = verdict(rows)
    r = rows[0]
    assert v["dl_cells"] == 0 and v["zoo_cells"] == 1  # reported apart from the default set's target
    assert v["zoo_cells_behind_lru"] == int(r["traffic_learned"] > r["traffic_lru"])
    assert v["zoo_mean_traffic_vs_best"] == r["traffic_vs_best"]
    with pytest.raises(ConfigError, match=r"unknown architecture\(s\) \['resnet_big'\]; choose from"):
        zoo_held_out(str(cache), names=["vae", "resnet_big"])
    assert len(list(cache.iterdir())) == 1  # nothing recorded for the bad request
