"""Faults: a copy that fails (host-to-device, device-to-host; at launch or when waited for) and a
policy hook that raises must leave the pool consistent, lose no data and be raised once, typed."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from pool_faults import (
    EVICTION_HOOKS,
    FaultyBackend,
    HookFault,
    HookFaults,
    RaisingPolicy,
    RaisingPrefetcher,
)

from cachegym.allocator.arena import ALIGN
from cachegym.allocator.backends import NumpyBackend
from cachegym.allocator.errors import BackendError, ConfigError, PolicyError
from cachegym.allocator.pool import DEVICE, H2D, Pool, PoolView
from cachegym.policies.lru import LRU

B = ALIGN
COSTS = [None, "a100_pcie4"]  # instant copies (retired at once) and copies in flight


def _data(seed: int, n: int = B) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def _tracked(p: Pool) -> set[int]:
    return {k for k, o in p._objs.items() if o.state in (DEVICE, H2D)}


def _ops(p: Pool, fn: Callable[[], object]) -> list[BackendError]:
    """Run ``fn``; a BackendError is collected (and the invariants checked either way)."""
    errors = []
    try:
        fn()
    except BackendError as e:
        errors.append(e)
    p._check()
    return errors


# ---------------------------------------------------------------------- device-to-host
@pytest.mark.parametrize("at_launch", [False, True])
@pytest.mark.parametrize("cost", COSTS)
def test_a_failed_write_back_keeps_the_victim_on_the_device(cost: str | None, at_launch: bool) -> None:
    be = FaultyBackend()
    p = Pool(2 * B, cost=cost, backend=be)
    d = {k: _data(k) for k in range(1, 9)}
    p.put(1, d[1])
    p.put(2, d[2])
    be.arm("d2h", key=1, at_launch=at_launch)
    errors: list[BackendError] = []
    for k in range(3, 9):  # 1 is evicted first (LRU), dirty: its write-back fails
        err = _ops(p, lambda k=k: p.put(k, d[k]))  # type: ignore[misc]
        if err:  # the put did not happen: again
            p.put(k, d[k])
        errors += err
    assert len(errors) == 1, errors
    e = errors[0]
    assert (e.key, e.direction) == (1, "d2h") and e.__cause__ is be.failures[0]
    assert "object 1" in str(e) and "stays on the device" in str(e)
    for k in range(1, 9):  # nothing lost, and no block leaked: every object fits in turn
        assert p.get(k).tobytes() == d[k].tobytes(), k
        p._check()
    assert set(p.policy.order()) == _tracked(p)  # type: ignore[attr-defined]
    p.close()


@pytest.mark.parametrize("at_launch", [False, True])
def test_a_failed_write_back_counts_no_eviction_and_no_copy(at_launch: bool) -> None:
    """The victim stays on the device: evictions, writebacks and bytes_d2h counted the eviction
    and its copy all the same (1, 1 and a block's bytes)."""
    be = FaultyBackend()
    p = Pool(2 * B, backend=be)
    p.put(1, _data(1))
    p.put(2, _data(2))
    be.arm("d2h", key=1, at_launch=at_launch)
    with pytest.raises(BackendError):
        p.put(3, _data(3))
    st = p.snapshot()
    assert (st.evictions, st.writebacks, st.bytes_d2h) == (0, 0, 0)
    p.put(3, _data(3))  # (the backend fails once)
    st = p.snapshot()
    assert (st.evictions, st.writebacks, st.bytes_d2h) == (1, 1, B)
    p.close()


def _evict_1_with_its_write_back_in_flight(be: FaultyBackend, at_launch: bool) -> tuple[Pool, np.ndarray]:
    """Object 1 (dirty, one block) evicted by a write-allocate that needs object 2's two blocks
    (clean) as well: nothing waits for 1's write-back, which fails."""
    p = Pool(3 * B, cost="a100_pcie4", backend=be)
    d1 = _data(1)
    p.put(1, d1)
    p.access(2, 2 * B)
    be.arm("d2h", key=1, at_launch=at_launch)
    p.access(3, 2 * B, write=True)
    assert p._objs[1].state != DEVICE and p._releases
    return p, d1


@pytest.mark.parametrize("at_launch", [False, True])
def test_a_failed_write_back_found_by_the_next_access_of_the_victim(at_launch: bool) -> None:
    be = FaultyBackend()
    p, d1 = _evict_1_with_its_write_back_in_flight(be, at_launch)
    used = p._place.used
    with pytest.raises(BackendError) as ei:
        p.get(1)
    assert (ei.value.key, ei.value.direction) == (1, "d2h")
    p._check()
    o = p._objs[1]
    assert o.state == DEVICE and o.dirty and p._place.used == used and not p._releases
    assert p.get(1).tobytes() == d1.tobytes()  # raised once: now a hit
    p.flush()
    assert be.host_buffer(1).tobytes() == d1.tobytes()  # type: ignore[union-attr]
    p.close()


def test_a_failed_write_back_of_a_freed_object_is_not_raised() -> None:
    be = FaultyBackend()
    p, _ = _evict_1_with_its_write_back_in_flight(be, False)
    p.free(1)  # its bytes are dropped anyway
    for k, size in ((4, B), (5, B), (6, B), (2, 2 * B), (3, 2 * B)):
        p.access(k, size)
        p._check()
    p.flush()
    p._check()
    p.close()


@pytest.mark.parametrize("write_policy", ["write-back", "write-through"])
def test_flush_raises_a_failed_copy_and_keeps_the_object_dirty(write_policy: str) -> None:
    be = FaultyBackend()
    p = Pool(4 * B, cost="a100_pcie4", backend=be, write_policy=write_policy)  # type: ignore[arg-type]
    d1, d2 = _data(1), _data(2)
    if write_policy == "write-back":
        p.put(1, d1)
        p.put(2, d2)
        be.arm("d2h", key=1)
    else:
        be.arm("d2h", key=1)
        p.put(1, d1)  # its write-through copy fails
        p.put(2, d2)
    with pytest.raises(BackendError) as ei:
        p.flush()
    assert (ei.value.key, ei.value.direction) == (1, "d2h")
    p._check()
    assert p._objs[1].dirty and p._objs[1].state == DEVICE and not p._objs[2].dirty
    assert be.host_buffer(2).tobytes() == d2.tobytes()  # type: ignore[union-attr]
    assert p.stats.bytes_d2h == d2.nbytes  # the failed copy's bytes are not counted
    p.flush()  # raised once; the second flush writes it
    assert not p._objs[1].dirty
    assert p.stats.bytes_d2h == d1.nbytes + d2.nbytes
    assert be.host_buffer(1).tobytes() == d1.tobytes()  # type: ignore[union-attr]
    p.close()


def test_a_failed_write_through_copy_is_written_back_at_eviction() -> None:
    be = FaultyBackend()
    p = Pool(2 * B, cost="a100_pcie4", backend=be, write_policy="write-through")
    d = {k: _data(k) for k in range(1, 6)}
    be.arm("d2h", key=1)
    p.put(1, d[1])  # clean as far as the pool knows until the failed copy is waited for
    errors: list[BackendError] = []
    for k in range(2, 6):
        err = _ops(p, lambda k=k: p.put(k, d[k]))  # type: ignore[misc]
        if err:  # the put did not happen: again
            p.put(k, d[k])
        errors += err
    assert [(e.key, e.direction) for e in errors] == [(1, "d2h")]
    for k in range(1, 6):
        assert p.get(k).tobytes() == d[k].tobytes(), k
    p.close()


# ---------------------------------------------------------------------- host-to-device
@pytest.mark.parametrize("at_launch", [False, True])
@pytest.mark.parametrize("cost", COSTS)
def test_a_failed_fetch_leaves_the_object_in_host_memory(cost: str | None, at_launch: bool) -> None:
    be = FaultyBackend()
    p = Pool(2 * B, cost=cost, backend=be)
    d1 = _data(1)
    p.put(1, d1)
    p.put(2, _data(2))
    p.put(3, _data(3))  # evicts 1 (written back)
    p.flush()
    before = (p.snapshot().accesses, p.snapshot().misses, p._place.used, sorted(_tracked(p)),
              p.snapshot().bytes_h2d)
    be.arm("h2d", key=1, at_launch=at_launch)
    with pytest.raises(BackendError) as ei:
        p.get(1)
    assert (ei.value.key, ei.value.direction) == (1, "h2d") and "host memory" in str(ei.value)
    p._check()
    assert p.state(1) == "host"
    # the access did not happen; the block allocated for it is free again (the victim it
    # evicted to make room stays evicted)
    st = p.snapshot()
    assert (st.accesses, st.misses) == before[:2]
    assert st.bytes_h2d == before[4]  # (the copy that failed is not counted)
    assert p._place.used <= before[2]
    assert set(p.policy.order()) == _tracked(p)  # type: ignore[attr-defined]
    assert p.get(1).tobytes() == d1.tobytes()
    p._check()
    p.close()


@pytest.mark.parametrize("at_launch", [False, True])
def test_a_failed_prefetch_leaves_the_object_in_host_memory(at_launch: bool) -> None:
    be = FaultyBackend()
    p = Pool(3 * B, cost="a100_pcie4", backend=be)
    d1 = _data(1)
    for k in (1, 2, 3, 4):  # 1 is evicted and written back
        p.put(k, d1 if k == 1 else _data(k))
    p.flush()
    h2d = p.snapshot().bytes_h2d
    be.arm("h2d", key=1, at_launch=at_launch)
    assert p.prefetch(1)
    assert p._objs[1].state in (H2D, DEVICE)
    errors = _ops(p, lambda: p.access(1, B))
    assert [(e.key, e.direction) for e in errors] == [(1, "h2d")]
    assert p.state(1) == "host" and p.snapshot().bytes_h2d == h2d  # (the failed copy uncounted)
    assert set(p.policy.order()) == _tracked(p)  # type: ignore[attr-defined]
    assert p.get(1).tobytes() == d1.tobytes()
    p._check()
    p.close()


def test_a_new_object_whose_first_fetch_fails_is_not_created() -> None:
    be = FaultyBackend()
    p = Pool(2 * B, backend=be)
    be.arm("h2d", key=7)
    with pytest.raises(BackendError):
        p.access(7, B)
    assert 7 not in p and be.host_buffer(7) is None
    p._check()
    p.access(7, B)
    assert p.get(7).tobytes() == bytes(B)
    p.close()


class _Throws(NumpyBackend):
    """A NumpyBackend whose named method raises an error that is not a BackendError (once), as a
    backend of the user's or NumPy itself may (a host buffer's allocation: MemoryError)."""

    armed = ""

    def _fire(self, name: str) -> None:
        if self.armed == name:
            self.armed = ""
            raise MemoryError(f"injected: {name}")

    def copy_d2h(self, key: int, offset: int, nbytes: int) -> object:
        self._fire("copy_d2h")
        return super().copy_d2h(key, offset, nbytes)

    def copy_h2d(self, key: int, offset: int, nbytes: int) -> object:
        self._fire("copy_h2d")
        return super().copy_h2d(key, offset, nbytes)

    def wait(self, event: object) -> None:
        super().wait(event)  # type: ignore[arg-type]
        self._fire("wait")

    def write(self, offset: int, data: np.ndarray) -> None:
        self._fire("write")
        super().write(offset, data)

    def stream_in(self, key: int, nbytes: int) -> np.ndarray:
        self._fire("stream_in")
        return super().stream_in(key, nbytes)

    def stream_out(self, key: int, data: np.ndarray) -> None:
        self._fire("stream_out")
        super().stream_out(key, data)

    def device_buffer(self, offset: int, nbytes: int) -> np.ndarray:
        self._fire("device_buffer")
        return super().device_buffer(offset, nbytes)


@pytest.mark.parametrize("method", ["copy_d2h", "copy_h2d", "wait", "write", "stream_out",
                                    "stream_in", "device_buffer"])
def test_any_error_of_the_backend_is_a_backend_error_and_loses_nothing(method: str) -> None:
    """Not only a BackendError: whatever a backend's method raises is raised as a BackendError
    naming the object (the backend's error as its cause), the pool stays consistent, and every
    stored object reads back its bytes once the fault is gone."""
    be = _Throws()
    p = Pool(4 * B, LRU(), backend=be, oversize="bypass")
    data = {k: _data(k) for k in range(4)}
    for k, d in data.items():
        p.put(k, d)
    big = _data(99, 5 * B)  # larger than the pool: streamed
    if method == "stream_in":
        p.put(99, big)
    be.armed = method
    op = {"copy_d2h": lambda: p.put(4, _data(4)),  # evicts 0: its write-back
          "wait": lambda: p.put(4, _data(4)),
          "copy_h2d": lambda: (p.put(4, _data(4)), p.get(0)),  # 0 fetched again
          "write": lambda: p.put(5, _data(5)),
          "stream_out": lambda: p.put(99, big),
          "stream_in": lambda: p.get(99),
          "device_buffer": lambda: p.get(1)}[method]
    with pytest.raises(BackendError) as got:
        op()
    assert isinstance(got.value.__cause__, MemoryError) and "MemoryError" in str(got.value)
    p._check()
    assert _tracked(p) == set(p.policy._order)  # type: ignore[attr-defined]
    assert be.armed == ""
    if method in ("copy_d2h", "wait"):  # the put that needed the failed write-back: again
        p.put(4, _data(4))
    if method in ("copy_d2h", "wait", "copy_h2d"):
        data[4] = _data(4)
    if method == "stream_in":
        data[99] = big
    for k, d in data.items():  # nothing lost (a put that failed stored nothing)
        assert p.get(k).tobytes() == d.tobytes(), k
    assert (5 in p) is False and (99 in p) is (method == "stream_in")
    p.close()


# ---------------------------------------------------------------------- policy hooks
class _Nothing:
    name = "nothing"

    def prefetch(self, view: PoolView, key: int) -> list[int]:
        return []


def _hook_pool(hook: str) -> tuple[Pool, RaisingPolicy]:
    faults = HookFaults()
    pol = RaisingPolicy(LRU(), faults)
    p = Pool(2 * B, pol, cost="a100_pcie4", placement="bytes",
             prefetcher=RaisingPrefetcher(_Nothing(), faults) if hook == "prefetch" else None,
             hook=(lambda ev: None) if hook == "on_hit" else None)  # on_hit: the slow hit path
    return p, pol


# hook -> (setup, the failing operation, its key, whether the event stands)
SCENARIOS: dict[str, tuple[Callable[[Pool], object], Callable[[Pool], object], int, bool]] = {
    "victim": (lambda p: (p.access(1, B), p.access(2, B)), lambda p: p.access(3, B), 3, False),
    "on_hit": (lambda p: p.access(1, B), lambda p: p.access(1, B), 1, True),
    "touch": (lambda p: p.access(1, B), lambda p: p.access(1, B, True), 1, True),
    "on_miss": (lambda p: None, lambda p: p.access(1, B), 1, False),
    "admit": (lambda p: None, lambda p: p.access(1, B), 1, False),
    "on_insert": (lambda p: p.access(1, B), lambda p: p.access(2, B, True), 2, False),
    "on_evict": (lambda p: (p.access(1, B, True), p.access(2, B)), lambda p: p.access(3, B), 1, False),
    "on_free": (lambda p: p.access(1, B), lambda p: p.free(1), 1, False),
    "on_free_untracked": (lambda p: [p.access(k, B) for k in (1, 2, 3)], lambda p: p.free(1), 1, False),
    "pending_evictions": (lambda p: p.access(1, B), lambda p: p.access(2, B), 2, True),
    "prefetch": (lambda p: p.access(1, B), lambda p: p.access(2, B), 2, True),
}


@pytest.mark.parametrize("hook", [*EVICTION_HOOKS, "prefetch", "on_insert/prefetch"])
def test_a_raising_policy_hook_is_raised_typed_and_leaves_the_pool_consistent(hook: str) -> None:
    if hook == "on_insert/prefetch":
        hook, setup, op, key, stands = ("on_insert", lambda p: None,
                                        lambda p: p.prefetch(5, B), 5, False)
    else:
        setup, op, key, stands = SCENARIOS[hook]
    p, pol = _hook_pool(hook)
    setup(p)
    before = (sorted(p._objs), sorted(_tracked(p)), p.snapshot())
    pol.arm(hook)
    with pytest.raises(PolicyError) as ei:
        op(p)
    e = ei.value
    assert pol.faults.fired and pol.faults.armed is None
    assert e.hook == hook and e.key == key and isinstance(e.__cause__, HookFault)
    assert e.policy is (p.prefetcher if hook == "prefetch" else pol)
    assert hook in str(e) and repr(key) in str(e) and "Fix the policy" in str(e)
    p._check()
    assert set(pol.inner.order()) == _tracked(p)  # type: ignore[attr-defined]
    if not stands:  # undone: the pool is as it was
        assert (sorted(p._objs), sorted(_tracked(p))) == before[:2]
        st, st0 = p.snapshot(), before[2]
        assert (st.accesses, st.hits, st.misses, st.evictions, st.frees) == (
            st0.accesses, st0.hits, st0.misses, st0.evictions, st0.frees)
    for i, k in enumerate([1, 2, 3, 4, 1, 5, 2, 2, 6, 1]):  # the pool goes on; no KeyError later
        if i % 4 == 3 and k in p:
            p.free(k)
        else:
            p.access(k, B, write=i % 2 == 0)
        p._check()
        assert set(pol.inner.order()) == _tracked(p)  # type: ignore[attr-defined]


def test_a_raising_hook_in_the_externally_driven_loop() -> None:
    """``Pool.steps`` (the environments' driver) undoes a miss whose ``on_insert`` raised."""
    pol = RaisingPolicy(LRU())
    p = Pool(2 * B, pol, placement="bytes")
    p.access(1, B)
    p.access(2, B)
    pol.arm("on_insert")
    gen = p.steps(3, B)
    req = next(gen)
    with pytest.raises(PolicyError, match="on_insert"):
        gen.send(pol.inner.victim(req.view))
    p._check()
    assert 3 not in p and set(pol.inner.order()) == _tracked(p)


@pytest.mark.parametrize("at_launch", [False, True])
def test_a_pool_holding_a_failed_copy_is_collected_once_dropped(at_launch: bool) -> None:
    """Compiled, the pool's records (``ObjectInfo``) are not tracked by the cyclic garbage
    collector (``cython.no_gc``: fewer collections, none walking every record). A record may hold
    a failed copy's error (a write-back in flight whose launch or copy failed) with its
    traceback; no cycle runs through it, so a pool dropped in that state is still freed."""
    import gc
    import weakref

    from cachegym.allocator import loop
    from cachegym.allocator.records import ObjectInfo

    assert gc.is_tracked(ObjectInfo(1, 1, 0, 0)) is not loop.COMPILED
    be = FaultyBackend()
    p, _ = _evict_1_with_its_write_back_in_flight(be, at_launch)
    assert p.view.info(1).d2h_event is not None  # the failure, not yet reported
    ref = weakref.ref(p)
    del p
    gc.collect()
    assert ref() is None


def test_an_access_of_another_size_does_not_resize_a_backend_pools_bytes() -> None:
    """With real bytes, an access names the object's size wherever the object is (on the device
    or in host memory): another size is refused, typed, before anything is counted, and the
    bytes are intact (put stores new bytes of any size)."""
    p = Pool(4 * B, LRU(), backend=NumpyBackend())
    d0 = _data(0, 2 * B)
    p.put(0, d0)
    for where in ("device", "host"):
        if where == "host":
            for k in (1, 2, 3):
                p.put(k, _data(k, B))
        assert p.state(0) == where
        before = p.snapshot()
        for size in (B, 3 * B):
            with pytest.raises(ConfigError, match=f"holds {2 * B} bytes"):
                p.access(0, size)
        assert p.snapshot() == before
        p._check()
        assert p.get(0).tobytes() == d0.tobytes()
    p.put(0, _data(7, B))  # a new size through put
    assert p.get(0).tobytes() == _data(7, B).tobytes()
    p.close()


def test_a_failed_write_through_copy_takes_back_no_write_back() -> None:
    """A write-through copy counts no write-back: taking one back for its failure left
    writebacks at -1 (the review's case)."""
    be = FaultyBackend()
    p = Pool(2 * B, backend=be, write_policy="write-through")
    be.arm("d2h", key=1)
    p.access(1, B, write=True)
    p.access(2, B)
    with pytest.raises(BackendError):
        p.access(3, B)  # evicts 1, whose write-through copy failed
    st = p.snapshot()
    assert st.writebacks == 0 and st.evictions == 0 and st.bytes_d2h == 0
    p._check()
    p.close()


def test_a_failed_prefetch_found_while_another_miss_waited_loses_nothing() -> None:
    """A prefetch that failed is found when it lands, at the end of a miss of another object
    that waited for its own copy: raised (typed, naming the prefetched object) after that
    access happened. The access stands and is counted once; both objects keep their bytes."""
    be = FaultyBackend()
    p = Pool(3 * B, cost="a100_pcie4", backend=be)
    data = {k: _data(k) for k in (1, 2, 3, 4)}
    for k in (1, 2, 3, 4):  # 1 is evicted and written back
        p.put(k, data[k])
    p.flush()
    be.arm("h2d", key=1)
    assert p.prefetch(1)  # evicts 2 for it; its copy is in flight
    assert p._objs[1].state == H2D and p.state(2) == "host"
    accesses = p.snapshot().accesses
    errors = _ops(p, lambda: p.get(2))  # a miss: its copy queues behind 1's, which lands first
    assert [(e.key, e.direction) for e in errors] == [(1, "h2d")]
    assert "object 1" in str(errors[0]) and "host memory" in str(errors[0])
    assert p.snapshot().accesses == accesses + 1  # the access of 2 happened
    assert p.state(2) == "device" and p.state(1) == "host"
    assert p.get(2).tobytes() == data[2].tobytes()  # a hit now
    assert p.snapshot().accesses == accesses + 2
    assert p.get(1).tobytes() == data[1].tobytes()
    assert set(p.policy.order()) == _tracked(p)  # type: ignore[attr-defined]
    p._check()
    p.close()
