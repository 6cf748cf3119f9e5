"""cachegym.envs.common.decision_info (the oracle and next-use part of every env's info): known answers,
the C kernel against the Python reference, and whole rollouts with and without the kernel."""

from __future__ import annotations

import re

import numpy as np
import pytest

from cachegym.allocator.trace import INF
from cachegym.envs.common import decision_info
from cachegym.envs.evict import EvictEnv
from cachegym.envs.joint import JointEnv
from cachegym.envs.prefetch import PrefetchEnv


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


@pytest.mark.parametrize("make", [lambda: EvictEnv(K=8, candidates="lru", window=800, capacity_of="working_set"),
                                  lambda: PrefetchEnv(K=8, window=800),
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




@pytest.mark.parametrize("env", [EvictEnv, PrefetchEnv, JointEnv])
@pytest.mark.parametrize("bad", [1.0, -0.1, "25%", True])
def test_a_clean_ahead_that_is_no_share_of_the_capacity_is_refused(env, bad) -> None:
    from cachegym.allocator.errors import ConfigError

    with pytest.raises(ConfigError, match=r"clean_ahead must be a share of the capacity in \[0, 1\)"):
        env(K=8, window=800, clean_ahead=bad)


@pytest.mark.parametrize("env", [EvictEnv, PrefetchEnv, JointEnv])
def test_a_step_before_reset_or_after_close_says_so(env) -> None:
    from cachegym.allocator.errors import InvalidActionError

    e = env(K=8, window=800)
    with pytest.raises(InvalidActionError, match=r"step\(\) called before reset\(\)"):
        e.step(0)
    e.reset(seed=0)
    e.close()
    with pytest.raises(InvalidActionError, match=r"before reset\(\) \(or after close\(\)\); call reset"):
        e.step(0)


def test_reward_scales_of_a_window_of_frees_alone() -> None:
    """env.window=1 cut windows of one free: the mean size of no request was NaN, and the
    env's reset raised a raw ValueError instead of saying no decision arose."""
    from cachegym.allocator.pool import Pool
    from cachegym.allocator.trace import Op, Trace
    from cachegym.envs.common import reward_scales

    w = Trace.from_arrays([1, 1], [64, 64], [Op.WRITE, Op.FREE]).window(1, 2)
    assert not (w.op != Op.FREE).any() and reward_scales(w, Pool(128))[0] == 1.0


@pytest.mark.parametrize("options, says", [
    ({"strat": 5}, "reset options ['strat'] unknown"), ({"start": 5.7}, "start=5.7 must be an int"),
    ({"start": "5"}, "start='5' must be an int"), ("x", "reset options must be a dict")])
def test_reset_options_are_checked(options, says) -> None:  # type: ignore[no-untyped-def]
    """A typo drew a random window, 5.7 was cut to 5, '5' taken, a string a raw ValueError."""
    from cachegym.allocator.errors import ConfigError

    env = EvictEnv()
    with pytest.raises(ConfigError, match=re.escape(says)):
        env.reset(seed=0, options=options)


def test_a_capacity_below_every_object_says_so() -> None:
    """'the pool holds the whole window; lower capacity' was the opposite of the fix."""
    from cachegym.allocator.errors import ConfigError

    with pytest.raises(ConfigError, match="fewer than any object's size.*raise the capacity"):
        EvictEnv(capacity=1).reset(seed=0)


def test_an_eviction_policy_object_starts_every_prefetch_episode_afresh() -> None:
    """The object's state carried over from one episode to the next: reset(seed=s) did not fix
    the rollout."""
    from cachegym.policies.lru import LRU

    def misses(env, seed):  # type: ignore[no-untyped-def]
        env.reset(seed=seed)
        done = False
        while not done:
            _, _, done, _, _ = env.step(env.K)  # never prefetch
        return env.pool.stats.misses

    shared = PrefetchEnv(eviction=LRU())
    got = [misses(shared, s) for s in (0, 1, 2)]
    assert got == [misses(PrefetchEnv(eviction=LRU()), s) for s in (0, 1, 2)]


def test_envs_made_from_one_predictor_object_do_not_share_it() -> None:
    from cachegym.policies.successors import SuccessorPredictor

    p = SuccessorPredictor()
    a, b = PrefetchEnv(predictor=p), JointEnv(predictor=p)
    assert a.predictor is not p and b.predictor is not p and a.predictor.params() == p.params()


@pytest.mark.parametrize("make", [EvictEnv, PrefetchEnv, JointEnv])
def test_an_env_copied_during_an_episode_says_why_not(make) -> None:  # type: ignore[no-untyped-def]
    """A pool-internal message (Evict, Joint) or a raw 'cannot pickle generator' (Prefetch)."""
    import copy
    import pickle

    from cachegym.allocator.errors import ConfigError

    env = make()
    twin = copy.deepcopy(env)  # between episodes: a copy
    env.reset(seed=0)
    for copier in (copy.deepcopy, pickle.dumps):
        with pytest.raises(ConfigError, match="cannot be copied or pickled during an episode"):
            copier(env)
    assert twin.reset(seed=0)[0]["mask"].shape == env.reset(seed=0)[0]["mask"].shape
