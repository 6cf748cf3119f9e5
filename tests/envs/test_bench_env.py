"""Smoke run of scripts/bench_env.py's parts on tiny budgets: the figures have the documented
shape, the segment breakdown adds up, and the project's PPO run is built from its configs."""

from __future__ import annotations

import pytest

from tests.scripts_loader import load_script


def _bench():  # type: ignore[no-untyped-def]
    return load_script("bench_env")


def test_random_agent_rate_and_segments() -> None:
    b = _bench()
    r = b.random_agent_rate("cachegym/Evict-v0", 8, 0.2, 0)
    assert r["decisions"] > 0 and r["decisions_per_s"] > 0 and r["step_p99_us"] >= r["step_median_us"] > 0
    g = b.evict_segments(8, 0.3, 0, "sample")
    assert g["decisions"] >= 128
    parts = ("agent", "pool_loop", "select", "observe", "decision_rest", "info", "step_rest", "outside")
    assert all(g[p] > 0 for p in ("agent", "pool_loop", "select", "observe", "info"))
    # medians of blocks do not add exactly; they stay close to the (median) total
    assert sum(g[p] for p in parts) == pytest.approx(g["total"], rel=0.5)
    c = b.pool_loop_cost(8, 0, "lru", repeats=1)
    assert c["decisions"] > 0 and c["rows"] >= c["decisions"]
    assert c["loop_us"] > 0


@pytest.mark.slow
def test_project_ppo_share_is_measured_on_the_configured_run() -> None:
    import torch

    from cachegym.policies.training.config import TrainConfig

    b = _bench()
    threads = torch.get_num_threads()
    p = b.ppo_env_share(32, 512, 0, "project")  # one rollout of conf/agent/ppo.yaml (2 envs x 256)
    assert p["timesteps"] >= 512 and "training traces" in p["what"]
    assert p["torch_threads"] == TrainConfig.torch_threads
    assert 0 < p["env_s"] < p["learn_s"] and 0 < p["env_share"] < 1
    assert torch.get_num_threads() == threads  # the bench restores what the project run set
