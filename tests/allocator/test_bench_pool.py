"""Smoke run of scripts/bench_pool.py on a tiny budget (figures have the documented shape)."""

from __future__ import annotations

import argparse

from tests.scripts_loader import load_script


def test_bench_pool_smoke(capsys) -> None:
    mod = load_script("bench_pool")
    parser = argparse.ArgumentParser()
    mod.add_args(parser)
    args = parser.parse_args(["--accesses", "2000", "--objects", "50", "--repeat", "2"])
    figures = mod.run(args)
    for placement in ("bytes", "arena"):
        hit, miss = figures[f"{placement}_hit"], figures[f"{placement}_miss"]
        assert hit["misses"] == 0 and miss["misses"] == miss["accesses"] == 2000
        for r in (hit, miss):
            assert r["pool_ns"] > 0 and r["bare_ns"] > 0 and r["ratio"] > 0
            assert r["met"] == (r["ratio"] <= r["target"])
        assert hit["floor_ns"] > 0
    from cachegym.allocator import pool as pool_mod

    assert figures["compiled"] == pool_mod.COMPILED
    out = capsys.readouterr().out
    assert "ratio" in out and "floor" in out
