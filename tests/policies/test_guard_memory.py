"""A deployed policy's memory is bounded by the objects it tracks, not by the requests it served:
after many requests over a few objects every structure of the guarded learned policy (the pool,
the guard, its experts, their shadow pools and policies) and of the registered LFU holds O(objects)
entries. (The guard's hand-written LFU model kept an empty frequency bucket for every count its
objects ever reached: 183,000 after 1.5M requests over 2,000 objects, growing without bound.)"""

from __future__ import annotations

import os

import pytest

from cachegym.allocator.pool import Pool
from cachegym.envs.workloads.registry import generate
from cachegym.policies.classic import LFU
from cachegym.policies.footprint import rss_bytes, structure_sizes
from cachegym.policies.learned import LearnedPolicy, ShadowGuard

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POLICY = os.path.join(ROOT, "tests", "golden", "policy.npz")
M = 300  # objects
N = 20_000  # requests: the hottest object is requested about 3,000 times


def bound(m: int) -> int:
    """What a structure over ``m`` objects may hold: twice as many entries (a lazily pruned
    heap), or the initial 1,024 rows of the feature tracker's arrays, and a constant."""
    return max(2 * m, 1024) + 64


def over_bound(sizes: dict[str, int], m: int) -> dict[str, int]:
    return {path: n for path, n in sizes.items() if n > bound(m)}


@pytest.fixture(scope="module")
def trace():  # type: ignore[no-untyped-def]
    return generate("zipf", seed=1, n_requests=N, n_objects=M, alpha=1.0, size=4096, size_sigma=0.5)


def test_guarded_policy_structures_are_bounded_by_the_objects(trace):  # type: ignore[no-untyped-def]
    base = LearnedPolicy.load(POLICY)
    assert isinstance(base.guard, ShadowGuard) and set(base.guard.experts) == {
        None, "lru", "s3fifo", "gdsf", "lfu", "arc", "slru"}
    # every expert runs to the end (none retired), so that the walk sees all their structures
    pol = LearnedPolicy(base.scorer, base.header, guard=ShadowGuard(retire=None))
    pool = Pool(int(0.25 * trace.working_set_bytes()), pol, placement="bytes", oversize="bypass")
    pool.replay(trace)
    sizes = structure_sizes(pool, "pool")
    # the walk reaches every expert's shadow pool and its policy's structures (the pool's policy
    # is ``pool.policy`` compiled, ``pool._policy`` interpreted)
    for path in ("guard.lru.pool._objs", "guard.model.pool._objs", "guard.net.pool._objs",
                 "guard.lru.policy._order", "guard.model.policy.main", "guard.extra[*].policy._heap",
                 "guard.extra[*].policy._buckets", "guard.net.policy.tracker._slot"):
        assert [n for p, n in sizes.items() if p.endswith(path)], path
    assert [n for p, n in sizes.items() if p.endswith("guard.net.pool._objs")] == [M]
    assert over_bound(sizes, M) == {}


def test_registered_lfu_keeps_no_empty_buckets(trace):  # type: ignore[no-untyped-def]
    lfu = LFU()
    Pool(int(0.25 * trace.working_set_bytes()), lfu, placement="bytes", oversize="bypass").replay(trace)
    assert 0 < len(lfu._buckets) <= len(lfu._freq) < M
    assert all(lfu._buckets.values())
    assert over_bound(structure_sizes(lfu), M) == {}


def test_structure_sizes_sees_an_unbounded_structure():
    """The walk reports what a policy reaches by path, the largest container of a path counting
    (so a structure that grows with the requests is seen)."""

    class Leaky(LFU):
        def __init__(self) -> None:
            super().__init__()
            self.log: list[int] = []

        def on_hit(self, view, key):  # type: ignore[no-untyped-def]
            super().on_hit(view, key)
            self.log.append(key)

    Leaky.__module__ = "cachegym.policies.test_leaky"  # (a policy of the package's, for the walk)
    pol = Leaky()
    pool = Pool(64 * 4096, pol, placement="bytes")
    for i in range(3000):
        pool.access(i % 50, 4096)
    sizes = structure_sizes(pool, "pool")
    log = [p for p in sizes if p.endswith("olicy.log")]
    assert len(log) == 1 and sizes[log[0]] == 2950 and sizes["pool._objs"] == 50
    assert over_bound(sizes, 50) == {log[0]: 2950}
    assert rss_bytes() > 1 << 20
