"""envs.common.decision_info (the oracle and next-use part of every env's info): known answers,
the C kernel against the Python reference, and whole rollouts with and without the kernel."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rollout_helpers import rollout

from allocator.trace import INF
from envs import common
from envs import evict as evict_mod
from envs.common import decision_info
from envs.evict import EvictEnv
from envs.joint import JointEnv
from envs.prefetch import PrefetchEnv


def test_decision_info_known_answers() -> None:
    # Belady: the farthest next use; among the never-used-again the largest key
    j, keys, dist = decision_info([7, 3, 9], [12, 40, 20], 10, 5, True)
    assert j == 1
    assert keys.dtype == np.int64 and keys.tolist() == [7, 3, 9, -1, -1]
    assert dist.dtype == np.float64 and dist.tolist() == [2.0, 30.0, 10.0, -1.0, -1.0]
    j, _, dist = decision_info([7, 3, 9], [INF, 40, INF], 10, 3, True)
    assert j == 2 and dist.tolist() == [np.inf, 30.0, np.inf]
    # soonest (prefetch): the first of equals; -1 when nothing is used again
    assert decision_info([7, 3, 9], [INF, 40, 15], 10, 4, False)[0] == 2
    assert decision_info([7, 3], [INF, INF], 10, 4, False)[0] == -1
    j, keys, dist = decision_info([], [], 10, 2, True)
    assert j == -1 and keys.tolist() == [-1, -1] and dist.tolist() == [-1.0, -1.0]


def test_decision_info_returns_new_arrays() -> None:
    """Callers keep infos (imitation datasets, rollout buffers): no buffer is reused."""
    a = decision_info([1, 2], [5, 6], 0, 4, True)
    b = decision_info([1, 2], [5, 6], 0, 4, True)
    assert not np.shares_memory(a[1], b[1]) and not np.shares_memory(a[2], b[2])


@pytest.mark.skipif(common._info_kernel is None, reason="allocator._fastpath is not available (not built, or CACHEGYM_PURE_PYTHON is set): only the reference exists")
@settings(max_examples=200, deadline=None)
@given(data=st.data(), K=st.integers(1, 40), farthest=st.booleans(), tick=st.integers(0, 10**6))
def test_kernel_equals_the_python_reference(data, K, farthest, tick) -> None:
    n = data.draw(st.integers(0, K))
    keys = data.draw(st.lists(st.integers(0, 2**62), min_size=n, max_size=n, unique=True))
    nxt = data.draw(st.lists(st.one_of(st.integers(tick + 1, tick + 10**9), st.just(INF)),
                             min_size=n, max_size=n))
    rj, rk, rd = common._decision_info_py(keys, nxt, tick, K, farthest)
    # a list in key order, or an int64 array (longer than n: only its first n values count)
    for given_nxt in (nxt, np.array(nxt + [7] * (K - n), np.int64)):
        j, k, d = decision_info(keys, given_nxt, tick, K, farthest)
        assert j == rj
        assert k.dtype == rk.dtype and k.tobytes() == rk.tobytes()
        assert d.dtype == rd.dtype and d.tobytes() == rd.tobytes()
    if keys:
        with pytest.raises(TypeError, match="int64"):
            decision_info(keys, np.array(nxt, np.float64), tick, K, farthest)


@pytest.mark.skipif(common._info_kernel is None, reason="allocator._fastpath is not available (not built, or CACHEGYM_PURE_PYTHON is set): only the reference exists")
@pytest.mark.parametrize("make", [
    lambda: EvictEnv(K=16, candidates="sample", window=1500),
    lambda: PrefetchEnv(K=8, window=1500, opportunity="access"),
    lambda: JointEnv(K=8, window=1500, cost="a100_pcie4"),
], ids=["evict", "prefetch", "joint"])
def test_rollouts_with_and_without_the_kernel_are_identical(make, monkeypatch) -> None:
    def run() -> list:
        rng = np.random.default_rng(0)
        env = make()
        _, _, infos = rollout(env, lambda o, i: int(rng.choice(np.flatnonzero(env.action_masks()))))
        return infos

    fast = run()
    monkeypatch.setattr(common, "_info_kernel", None)
    ref = run()
    assert len(fast) == len(ref)
    for a, b in zip(fast, ref):
        assert a.keys() == b.keys()
        assert a["oracle_action"] == b["oracle_action"]
        np.testing.assert_array_equal(a["keys"], b["keys"])
        np.testing.assert_array_equal(a["next_use"], b["next_use"])


@pytest.mark.parametrize("make", [lambda: EvictEnv(K=8, window=800), lambda: PrefetchEnv(K=8, window=800),
                                  lambda: JointEnv(K=8, window=800)], ids=["evict", "prefetch", "joint"])
def test_action_masks_are_the_callers_own(make) -> None:
    """The envs keep masks in shared tables: what action_masks() hands out is a fresh copy."""
    env = make()
    obs, _ = env.reset(seed=0)
    for _ in range(20):
        m = env.action_masks()
        want = m.copy()
        m[:] = True
        np.testing.assert_array_equal(env.action_masks(), want)
        np.testing.assert_array_equal(want[:8], obs["mask"].astype(bool))
        obs, _, term, _, _ = env.step(int(np.flatnonzero(want)[0]))
        if term:
            break


@pytest.mark.skipif(evict_mod._last_uses is None, reason="allocator._fastpath is not available (not built, or CACHEGYM_PURE_PYTHON is set): only the reference exists")
@pytest.mark.parametrize("candidates", ["lru", "sample"])
def test_evict_next_uses_from_tracker_rows_equal_the_python_reference(candidates, monkeypatch) -> None:
    """Evict-v0 reads each candidate's next use at the row of its last access, the largest tick
    in its tracker row (allocator._fastpath.last_uses); the Python reference asks
    FeatureTracker.last_access. Same infos over whole rollouts with frees and writes."""
    from allocator.trace import Trace

    rng0 = np.random.default_rng(3)
    key = rng0.zipf(1.2, 4000) % 300
    op = np.where(rng0.random(4000) < 0.3, 1, 0)
    tr = Trace.from_arrays(key, rng0.integers(1, 5, 300)[key] * 4096, op)

    def run() -> list:
        rng = np.random.default_rng(0)
        env = EvictEnv(tr, K=16, candidates=candidates, window=2000, capacity=0.2)
        _, _, infos = rollout(env, lambda o, i: int(rng.choice(np.flatnonzero(env.action_masks()))))
        return infos

    fast = run()
    monkeypatch.setattr(evict_mod, "_last_uses", None)
    ref = run()
    assert len(fast) == len(ref) > 100
    for a, b in zip(fast, ref):
        assert a["oracle_action"] == b["oracle_action"]
        np.testing.assert_array_equal(a["next_use"], b["next_use"])
