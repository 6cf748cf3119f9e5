"""Smoke run of scripts/bench_pool.py on a tiny budget (figures have the documented shape)."""

from __future__ import annotations

import argparse
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_bench_pool_smoke(capsys) -> None:
    spec = importlib.util.spec_from_file_location("bench_pool", os.path.join(ROOT, "scripts", "bench_pool.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
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
    from allocator import pool as pool_mod

    assert figures["compiled"] == pool_mod.COMPILED
    out = capsys.readouterr().out
    assert "ratio" in out and "floor" in out
