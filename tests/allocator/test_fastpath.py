"""The C hit path (allocator/_fastpath.c) against the pure-Python path of the same loop.

Every test that compares builds one pool with the C path (when it is built) and one with
``allocator.pool._fastpath`` set to ``None`` (the pure-Python path, as ``CACHEGYM_PURE_PYTHON=1``
gives), runs the same random workload through both and requires identical return values,
errors, statistics, ticks, per-object records, policy order and hook events.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import types
import zlib
from collections.abc import Sequence
from typing import Any

import pytest

import allocator.pool as pool_mod
from allocator.arena import ALIGN, Arena, ByteAccounting
from allocator.errors import CachegymError
from allocator.pool import Pool, PoolView
from allocator.trace import Op
from policies.lru import LRU

B = ALIGN
FIELDS = ("key", "size", "nbytes", "state", "dirty", "pins", "offset", "ready_ns", "prefetched",
          "busy_until", "kind", "created_tick", "last_tick", "n_access")
NOT_BUILT = "allocator._fastpath not built (no C compiler, or CACHEGYM_PURE_PYTHON set)"


def _c_module() -> Any:
    return pool_mod._fastpath


def _make(pure: bool, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> Pool:
    with monkeypatch.context() as m:
        if pure:
            m.setattr(pool_mod, "_fastpath", None)
        return Pool(kw.pop("capacity", 12 * B), LRU(), **kw)


class _NextKey:
    """Prefetches the next two keys (the pool skips unknown and resident ones)."""

    name = "next"

    def prefetch(self, view: PoolView, key: int) -> Sequence[int]:
        return (key + 1, key + 2)


def _fingerprint(p: Pool) -> tuple:
    objs = tuple((k, tuple(getattr(o, f) for f in FIELDS)) for k, o in sorted(p._objs.items()))
    assert isinstance(p.policy, LRU)
    place = p._place  # the arena's free lists too: the C path places blocks itself
    blocks = tuple((list(place._by_size), dict(place._free), dict(place._ends))
                   if isinstance(place, Arena) else ())
    return (p.snapshot(), p._tick, objs, p.policy.order(), place.used, blocks, p.cost.now)


def _seed(*parts: object) -> int:
    """A workload seed per test case, the same in every run (``hash`` of a string is salted per
    process: a case's workload, and whether it reaches what the test needs, would change)."""
    return zlib.crc32(repr(parts).encode()) % 1000


def _workload(seed: int, n: int) -> list[tuple]:
    """Mixed events over 24 keys: hits and misses in every argument style, writes, prefetches,
    frees, pins, and hook / prefetcher changes between calls."""
    rng = random.Random(seed)
    ops: list[tuple] = []
    for _ in range(n):
        r = rng.random()
        k = rng.randrange(24)
        size = rng.choice((B // 2, B, 2 * B)) if rng.random() < 0.97 else 0
        if r < 0.70:
            style = rng.randrange(6)
            comp = rng.choice((0, 0, 0, 700))
            write = rng.random() < 0.3
            ops.append(("access", k, size, write, style, comp, rng.randrange(7)))
        elif r < 0.78:
            ops.append(("prefetch", k, size or B))
        elif r < 0.83:
            ops.append(("free", k))
        elif r < 0.90:
            ops.append(("pin", k))
        elif r < 0.96:
            ops.append(("unpin", k))
        elif r < 0.98:
            ops.append(("hook", rng.random() < 0.5))
        else:
            ops.append(("prefetcher", rng.random() < 0.5))
    return ops


def _apply(p: Pool, op: tuple, events: list[dict]) -> Any:
    name = op[0]
    try:
        if name == "access":
            _, k, size, write, style, comp, kind = op
            if style == 0:
                return p.access(k, size)
            if style == 1:
                return p.access(k, size, write)
            if style == 2:
                return p.access(k, size, write=write, kind=kind)
            if style == 3:
                return p.access(k, size, int(write), compute_ns=comp)
            if style == 4:
                return p.access(k, size, write, kind=kind, compute_ns=comp)
            return p.access(key=k, size=size, write=write)  # keywords only: the Python method
        if name == "prefetch":
            return p.prefetch(op[1], op[2])
        if name == "free":
            return p.free(op[1])
        if name == "pin":
            return p.pin(op[1])
        if name == "unpin":
            return p.unpin(op[1])
        if name == "hook":
            p.hook = events.append if op[1] else None
            return None
        p.prefetcher = _NextKey() if op[1] else None
        return None
    except CachegymError as e:
        return type(e).__name__


@pytest.mark.parametrize("placement", ["bytes", "arena"])
@pytest.mark.parametrize("write_policy", ["write-back", "write-through"])
@pytest.mark.parametrize("cost", [None, "h100_pcie5"])
def test_c_path_equals_python_path(placement: str, write_policy: str, cost: str | None,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    kw: dict[str, Any] = dict(placement=placement, write_policy=write_policy, cost=cost)
    fast, pure = _make(False, monkeypatch, **kw), _make(True, monkeypatch, **kw)
    assert pure._hit_path is None and isinstance(pure.access, types.MethodType)
    ev_fast: list[dict] = []
    ev_pure: list[dict] = []
    for i, op in enumerate(_workload(_seed(placement, write_policy, cost), 2500)):
        got_fast, got_pure = _apply(fast, op, ev_fast), _apply(pure, op, ev_pure)
        assert got_fast == got_pure, (i, op)
        if i % 25 == 0:
            assert _fingerprint(fast) == _fingerprint(pure), (i, op)
    assert _fingerprint(fast) == _fingerprint(pure)
    assert ev_fast == ev_pure and ev_fast  # the hook was on for part of the run
    fast._check()
    if _c_module() is not None:
        hp = fast._hit_path
        assert 0 < hp.calls < fast.stats.hits  # C served hits; the rest went to Python
        if cost is None:  # plain misses (instant copies) too
            assert 0 < hp.misses <= fast.stats.misses


class _PinnedOut(LRU):
    """LRU whose victim can be told to answer a key that is not evictable."""

    bad: int | None = None

    def victim(self, view: PoolView) -> int | None:
        return self.bad if self.bad is not None else super().victim(view)


@pytest.mark.parametrize("placement", ["bytes", "arena"])
def test_failed_miss_changes_nothing_on_both_paths(placement: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A miss that cannot make room (everything pinned; a policy naming a pinned victim) raises
    and leaves the same state on the C path as on the Python path."""
    pools = []
    for pure in (False, True):
        with monkeypatch.context() as m:
            if pure:
                m.setattr(pool_mod, "_fastpath", None)
            pools.append(Pool(4 * B, _PinnedOut(), placement=placement))  # type: ignore[arg-type]
    for p in pools:
        for k in range(6):  # 0 and 1 are evicted (in host memory), 2..5 resident
            p.access(k, B)
        for k in (2, 3, 4):
            p.pin(k)
    outcomes = []
    for p in pools:
        before = _fingerprint(p)
        with pytest.raises(CachegymError) as bad_victim:
            p.policy.bad = 2  # type: ignore[attr-defined]
            p.access(0, B)
        p.policy.bad = None  # type: ignore[attr-defined]
        after_bad = _fingerprint(p)
        assert p.access(1, B, True) is False  # evicts 5, the only unpinned object
        p.pin(1)
        with pytest.raises(CachegymError) as exhausted:
            p.access(0, B)
        with pytest.raises(CachegymError) as exhausted_new:  # a first access: not created
            p.access(77, B, True, kind=3)
        assert 77 not in p
        outcomes.append((type(bad_victim.value), before == after_bad, type(exhausted.value),
                         type(exhausted_new.value), _fingerprint(p)))
        p._check()
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][1]  # the refused miss left the pool as it was
    if _c_module() is not None:
        assert pools[0]._hit_path.misses >= 1


def test_c_path_is_active_when_built() -> None:
    if _c_module() is None:
        pytest.skip(NOT_BUILT)
    p = Pool(8 * B, placement="bytes")
    assert type(p.access).__name__ == "HitPath" and p.access.enabled
    if (3, 10) <= sys.version_info[:2] < (3, 13):
        assert p.access.peek  # _thread.RLock's layout was recognised: no lock call per hit
    assert p.access.__wrapped__.__func__ is Pool.access  # signature and docstring stay
    assert p.access.__doc__ == Pool.access.__doc__
    p.access(1, B)
    before = p.access.calls
    assert p.access(1, B) and p.access(1, B, True, kind=2, compute_ns=5)
    assert p.access.calls == before + 2
    # a configuration the C path does not serve gives the Python method, and back
    p.hook = lambda e: None
    assert isinstance(p.access, types.MethodType) and not p._hit_path.enabled
    p.hook = None
    assert p.access is p._hit_path and p.access.enabled
    assert Pool.access is pool_mod._py_access  # the class attribute is the Python function


def test_stale_reference_follows_the_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller holding ``pool.access`` from before a hook was set still gets the hook's events."""
    if _c_module() is None:
        pytest.skip(NOT_BUILT)
    p = Pool(8 * B, placement="bytes")
    access = p.access
    access(3, B)
    seen: list[dict] = []
    p.hook = seen.append
    assert access(3, B) and [e["event"] for e in seen] == ["hit"]


def test_pure_python_env_var() -> None:
    code = "from allocator.pool import Pool; import types; " \
           "print(isinstance(Pool(4096).access, types.MethodType))"
    env = dict(os.environ, CACHEGYM_PURE_PYTHON="1")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "True"


def test_lock_held_elsewhere_blocks_the_hit() -> None:
    """While another thread holds the pool's lock a hit waits for it (through the Python
    method); the owning thread itself re-enters (the C path serves it)."""
    p = Pool(8 * B, placement="bytes")
    p.access(1, B)
    hp = p._hit_path
    calls = hp.calls if hp is not None else 0
    with p._lock:  # re-entrant, same thread
        assert p.access(1, B)
    if hp is not None:
        assert hp.calls == calls + 1
    held, release, done = threading.Event(), threading.Event(), threading.Event()

    def holder() -> None:
        with p._lock:
            held.set()
            release.wait(10)

    def hitter() -> None:
        p.access(1, B)
        done.set()

    t1 = threading.Thread(target=holder)
    t1.start()
    assert held.wait(10)
    t2 = threading.Thread(target=hitter)
    t2.start()
    assert not done.wait(0.3)  # blocked on the lock
    tick = p._tick
    release.set()
    t1.join(10)
    t2.join(10)
    assert done.is_set() and p._tick == tick + 1 and p.stats.hits == 2
    if hp is not None:
        assert hp.calls == calls + 1  # the blocked call was the Python method's


def test_threads_on_the_c_path() -> None:
    """8 threads of hits and misses on one metadata-only pool: the counters add up and the
    invariants hold (the C path's lock check against the Python path's lock)."""
    p = Pool(32 * B, placement="arena")
    counts = [0] * 8
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def work(tid: int) -> None:
        rng = random.Random(tid)
        try:
            start.wait()
            for _ in range(3000):
                p.access(rng.randrange(48), B, rng.random() < 0.3,
                         compute_ns=0 if rng.random() < 0.9 else 10)
                counts[tid] += 1
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]
    p._check()
    s = p.snapshot()
    assert s.accesses == sum(counts) == p._tick + 1
    assert s.hits + s.misses == s.accesses and s.evictions > 100
    assert sum(o.n_access for o in p._objs.values()) <= s.accesses
    if p._hit_path is not None:
        assert p._hit_path.calls > 1000


@pytest.mark.parametrize("seed", [0, 1])
def test_arena_churn_equals_python_path(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain hits and misses of many sizes on an arena (splits, best fits among several free
    blocks, coalescing): the C path places every block where the Python path does."""
    fast = _make(False, monkeypatch, capacity=40 * B, placement="arena")
    pure = _make(True, monkeypatch, capacity=40 * B, placement="arena")
    rng = random.Random(seed)
    for i in range(3000):
        k, size, write = rng.randrange(60), rng.randrange(1, 5 * B), rng.random() < 0.2
        assert fast.access(k, size, write) == pure.access(k, size, write), i
        if i % 10 == 0:
            assert _fingerprint(fast) == _fingerprint(pure), i
    assert _fingerprint(fast) == _fingerprint(pure)
    fast._check()
    if _c_module() is not None:
        assert fast._hit_path.misses > 1000


def test_place_release_equals_arena_release() -> None:
    """``PlaceRelease`` (the pool's release of a block) against ``Arena.release`` on random
    allocations and releases: the same free lists after every step (coalescing both ways)."""
    if _c_module() is None:
        pytest.skip(NOT_BUILT)
    a, b = Arena(64 * B), Arena(64 * B)
    release = _c_module().PlaceRelease(a)
    rng = random.Random(3)
    held: list[tuple[int, int]] = []
    for _ in range(4000):
        if held and (rng.random() < 0.5 or a.free_bytes < 4 * B):
            off, n = held.pop(rng.randrange(len(held)))
            release(off, n)
            b.release(off, n)
        else:
            n = rng.randrange(1, 4 * B)
            off_a, off_b = a.alloc(n), b.alloc(n)
            assert off_a == off_b
            if off_a is not None:
                held.append((off_a, n))
        assert (a._by_size, a._free, a._ends, a.used) == (b._by_size, b._free, b._ends, b.used)
    acc = ByteAccounting(10 * B)
    acc.alloc(3 * B)
    _c_module().PlaceRelease(acc)(0, B)
    assert acc.used == 2 * B


# ---------------------------------------------------------------- a FeatureTracker policy
# The environments put a FeatureTracker in the pool's policy slot: the C paths then run its
# hooks (on_hit, on_miss, on_insert, on_evict) themselves, and HitPath.step / resume / abandon
# serve Pool.steps' miss with the decision left to the caller.

def _tracker_pool(pure: bool, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> Pool:
    from policies.features import FeatureTracker

    with monkeypatch.context() as m:
        if pure:
            m.setattr(pool_mod, "_fastpath", None)
        return Pool(kw.pop("capacity", 12 * B), FeatureTracker(initial_slots=16), **kw)


def _tracker_fingerprint(p: Pool) -> tuple:
    """The pool's records, counters and blocks, and the tracker's whole state (rows bit for bit)."""
    t: Any = p.policy
    objs = tuple((k, tuple(getattr(o, f) for f in FIELDS)) for k, o in sorted(p._objs.items()))
    live = sorted(t._slot.items())
    rows = tuple(t._S[s].tobytes() for _, s in live)
    assert all(rec is p._objs[k] for k, rec in zip(t._res, t._res_rec))  # the pool's records
    tracker = (live, rows, list(t._order), list(t._res), dict(t._res_pos), list(t._res_slot),
               t.miss_rate, t._epoch, t._next, sorted(t._free_slots))
    return (p.snapshot(), p._tick, objs, p._place.used, p.cost.now, tracker)


@pytest.mark.parametrize("placement", ["bytes", "arena"])
@pytest.mark.parametrize("write_policy", ["write-back", "write-through"])
@pytest.mark.parametrize("cost", [None, "h100_pcie5"])
def test_tracker_hooks_in_c_equal_python(placement: str, write_policy: str, cost: str | None,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The same mixed workload (long enough for the tracker to renormalise its counters and
    grow its rows) through a FeatureTracker pool on both paths: identical answers, pool and
    tracker, every 25 events."""
    if _c_module() is None:
        pytest.skip(NOT_BUILT)
    kw: dict[str, Any] = dict(placement=placement, write_policy=write_policy, cost=cost)
    fast, pure = _tracker_pool(False, monkeypatch, **kw), _tracker_pool(True, monkeypatch, **kw)
    assert fast._hit_path.tracks(fast.policy) and not fast._hit_path.tracks(LRU())
    ev_fast: list[dict] = []
    ev_pure: list[dict] = []
    for i, op in enumerate(_workload(_seed(placement, write_policy, cost, "tracker"), 12000)):
        got_fast, got_pure = _apply(fast, op, ev_fast), _apply(pure, op, ev_pure)
        assert got_fast == got_pure, (i, op)
        if i % 25 == 0:
            assert _tracker_fingerprint(fast) == _tracker_fingerprint(pure), (i, op)
    assert _tracker_fingerprint(fast) == _tracker_fingerprint(pure)
    assert fast.policy._epoch > 0  # type: ignore[attr-defined]  # renormalised on the way
    fast._check()
    hp = fast._hit_path
    assert 0 < hp.calls < fast.stats.hits
    if cost is None:
        assert 0 < hp.misses <= fast.stats.misses


def _events(seed: int, n: int, n_keys: int = 30) -> list[tuple[int, int, bool]]:
    """(key, size, write) accesses, sizes of one to three blocks (a miss may need several
    victims), and frees (size 0)."""
    rng = random.Random(seed)
    return [(rng.randrange(n_keys), 0 if rng.random() < 0.04 else rng.choice((B // 2, B, 2 * B, 3 * B)),
             rng.random() < 0.3) for _ in range(n)]


def _pick(p: Pool, rng: random.Random) -> int:
    """A victim drawn among the evictable residents in the tracker's LRU order."""
    cands = [k for k in p.policy._order if p.view.evictable(k)]  # type: ignore[attr-defined]
    return cands[min(len(cands) - 1, int(rng.random() * 4))]


@pytest.mark.parametrize("placement", ["bytes", "arena"])
def test_step_and_resume_equal_pool_steps(placement: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """HitPath.step / resume / free (the environments' loop) against Pool.steps and Pool.free on
    the Python path, the same victims chosen from the same state: identical pools and trackers
    after every event, the same number of decisions."""
    if _c_module() is None:
        pytest.skip(NOT_BUILT)
    fast = _tracker_pool(False, monkeypatch, placement=placement)
    pure = _tracker_pool(True, monkeypatch, placement=placement)
    hp = fast._hit_path
    r_fast, r_pure = random.Random(1), random.Random(1)
    decisions = [0, 0]
    several = 0  # misses that needed more than one victim
    freed = 0  # frees served in C
    for i, (k, size, write) in enumerate(_events(5, 3000)):
        if size == 0:
            if k in fast:
                if hp.free(k) is NotImplemented:
                    fast.free(k)
                else:
                    freed += 1
                pure.free(k)
                assert _tracker_fingerprint(fast) == _tracker_fingerprint(pure), i
            else:
                assert hp.free(k) is NotImplemented  # Pool.free raises UnknownKey for it
            continue
        r = hp.step(k, size, write, 3, 0)
        assert r is not NotImplemented
        asked = 0
        while r is None:
            assert hp.pending
            asked += 1
            r = hp.resume(_pick(fast, r_fast))
        decisions[0] += asked
        several += asked > 1
        gen = pure.steps(k, size, Op.WRITE if write else Op.READ, kind=3)
        try:
            req = next(gen)
            while True:
                assert req.key == k
                decisions[1] += 1
                req = gen.send(_pick(pure, r_pure))
        except StopIteration as stop:
            assert stop.value == r, i
        assert not hp.pending
        assert _tracker_fingerprint(fast) == _tracker_fingerprint(pure), i
    assert decisions[0] == decisions[1] > 500
    assert several > 100 and fast.stats.evictions == decisions[0]
    assert freed > 20 and fast.stats.writebacks > 100  # dirty victims written back in C too
    fast._check()


def test_abandon_and_a_bad_victim_undo_the_miss_as_closing_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """At a suspended decision: abandon() leaves what closing Pool.steps' generator leaves;
    resume() with a pinned victim raises InvalidVictim and undoes the miss; either way the
    pool's lock is free again; a call while a miss waits is not served; resume() with nothing
    waiting raises."""
    if _c_module() is None:
        pytest.skip(NOT_BUILT)
    from allocator.errors import InvalidVictim

    fast = _tracker_pool(False, monkeypatch, capacity=4 * B, placement="bytes")
    pure = _tracker_pool(True, monkeypatch, capacity=4 * B, placement="bytes")
    hp = fast._hit_path
    for p in (fast, pure):
        for k in range(4):
            p.access(k, B)
        p.pin(1)
    assert hp.step(9, B, True, 2, 0) is None and hp.pending  # a new object, room needed
    assert hp.step(0, B, False, 0, 0) is NotImplemented  # one miss at a time
    gen = pure.steps(9, B, Op.WRITE, kind=2)
    next(gen)
    assert _tracker_fingerprint(fast) == _tracker_fingerprint(pure)  # both wait at the decision
    assert hp.abandon() is True and not hp.pending
    gen.close()
    assert _tracker_fingerprint(fast) == _tracker_fingerprint(pure) and 9 not in fast
    assert hp.abandon() is False
    with pytest.raises(RuntimeError, match="no miss is waiting"):
        hp.resume(0)

    assert hp.step(9, B, False, 0, 0) is None  # again, answered with the pinned object
    gen = pure.steps(9, B, Op.READ)
    next(gen)
    with pytest.raises(InvalidVictim):
        hp.resume(1)
    with pytest.raises(InvalidVictim):
        gen.send(1)
    assert not hp.pending
    assert _tracker_fingerprint(fast) == _tracker_fingerprint(pure) and 9 not in fast
    got: list[bool] = []

    def take() -> None:
        got.append(fast._lock.acquire(timeout=5))
        if got[-1]:
            fast._lock.release()

    t = threading.Thread(target=take)
    t.start()
    t.join()
    assert got == [True]  # released by the failed resume (and by abandon before it)


def test_a_suspended_miss_holds_the_pool_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    """While a miss waits for its victim (HitPath.step -> None), the pool's lock stays held, as
    Pool.steps' generator holds it: another thread's access waits until resume() completes the
    miss, then runs on the state after it."""
    if _c_module() is None:
        pytest.skip(NOT_BUILT)
    p = _tracker_pool(False, monkeypatch, capacity=4 * B, placement="bytes")
    hp = p._hit_path
    for k in range(4):
        p.access(k, B)
    assert hp.step(9, B, False, 0, 0) is None and hp.pending
    done = threading.Event()
    got: list[bool] = []

    def other() -> None:
        got.append(p.access(9, B))  # blocks on the lock until the miss of 9 completes
        done.set()

    t = threading.Thread(target=other)
    t.start()
    assert not done.wait(0.3)  # still waiting while the miss is suspended
    assert hp.resume(0) is False and not hp.pending
    t.join(5)
    assert done.is_set() and got == [True]  # then a hit on the object the miss brought in
    assert 0 not in p.view.candidates() and p.stats.hits == 1
    p._check()


def test_decision_outputs_must_be_float64_buffers_long_enough() -> None:
    """gather, pack and head write a decision's inputs into a float64 buffer: one of another
    type or too short is refused with a ValueError naming the call, and nothing is written."""
    if _c_module() is None:
        pytest.skip(NOT_BUILT)
    import numpy as np

    from policies import features as F

    fp, tr = _c_module(), F.FeatureTracker()
    p = Pool(64 * 4096, tr, placement="bytes")
    for k in range(80):
        p.access(k, 4096)
    keys = list(tr._order)[:8]
    calls = {  # name: (call on a buffer, the values it needs)
        "gather": (lambda b: fp.gather(tr._order, p._objs, tr._res_pos, 8, b, F._HEAD), F._HEAD + 16),
        "pack": (lambda b: fp.pack(keys, p._objs, tr._slot, 8, b, F._HEAD), F._HEAD + 16),
        "head": (lambda b: fp.head(p, tr, 8, 8, b, F._HEAD_CONSTS), 17),
    }
    for name, (call, need) in calls.items():
        for bad in (np.full(need, 7.0, np.float32), np.full(need - 1, 7.0)):
            with pytest.raises(ValueError, match=f"{name}: out must be a float64 buffer"):
                call(bad)
            assert (bad == 7.0).all()
        good = np.zeros(need)
        assert call(good) and good.any()
