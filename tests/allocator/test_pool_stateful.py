"""Stateful property test: random operation sequences against a plain reference model.

The pool is small (six aligned blocks), holds real bytes (NumpyBackend, copies on worker
threads) and runs on a cost preset, so prefetches are in flight and write-backs delayed while
later operations arrive; a next-key prefetcher makes accesses trigger prefetches too. After
every step: blocks never overlap and accounting adds up (``Pool._check``), the LRU policy tracks
exactly the objects on the device or on their way there, and every object holds exactly what
was last written to it; at the end everything is read back through ``get``.

Faults are injected between steps (``pool_faults.py``), one at a time: a copy in either
direction that fails (when waited for, or at launch), or any hook of the eviction or prefetch
policy that raises (every hook the pool calls, ``admit`` included; the machine without a
backend holds each object's size in its model). The streaming machine's policy never admits
key 7, so its accesses are streamed and, with real bytes, go through ``Backend.stream_in`` /
``stream_out``, whose copies fail on request too (a failed streamed put stores nothing). An operation may then raise
a ``PolicyError`` (only right after its hook was armed) or a ``BackendError`` (each injected
failure at most once); the model follows what the operation did, and the invariants above must
hold all along. The double-fault machine arms a second fault while the first is armed or its
failure not yet raised (a hook with a copy, two copies: a failed write-back and the fetch of
the next access), so faults also strike while the pool recovers from one (a hook raising
inside the recovery is told again before the next operation: ``policy_tracks``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from pool_faults import (
    COPY_DIRECTIONS,
    HOOKS,
    FailedCopy,
    FaultyBackend,
    HookFault,
    HookFaults,
    RaisingPolicy,
    RaisingPrefetcher,
    policy_tracks,
)

from cachegym.allocator.arena import ALIGN
from cachegym.allocator.backends import NumpyBackend
from cachegym.allocator.errors import (
    BackendError,
    NotPinned,
    NotResident,
    ObjectPinned,
    PolicyError,
    PoolExhausted,
    UnknownKey,
)
from cachegym.allocator.pool import D2H, DEVICE, H2D, HOST, Pool, PoolView
from cachegym.policies.lru import LRU

KEYS = st.integers(0, 7)
SIZES = st.sampled_from([1, 100, ALIGN, ALIGN + 1, 2 * ALIGN - 3, 2 * ALIGN])
COMPUTE = st.sampled_from([0, 0, 1_000, 50_000])
CAPACITY = 6 * ALIGN
MAX_PINNED_KEYS = 2


class NextKey:
    """Prefetches the next key of the small key space after every access."""

    name = "next-key"

    def prefetch(self, view: PoolView, key: int) -> Sequence[int]:
        return [(key + 1) % 8]


class RefusesKey7(LRU):
    """LRU that never admits key 7: its accesses are streamed (with a backend, its bytes go
    through ``Backend.stream_in`` / ``stream_out``, which can fail too)."""

    def admit(self, view: PoolView, key: int, size: int) -> bool:
        return key != 7


class PoolMachine(RuleBasedStateMachine):
    write_policy = "write-back"
    prefetching = True  # without a prefetcher, hits take the pool's fast path (``touch``)
    with_backend = True  # without one, the pool holds no bytes (sizes only)
    max_faults = 1  # armed, or failed and not yet raised, at a time
    refusing = False  # True: the policy never admits key 7 (every access of it is streamed)

    def __init__(self) -> None:
        super().__init__()
        self.backend = FaultyBackend(NumpyBackend()) if self.with_backend else None
        self.faults = HookFaults()
        self.policy = RaisingPolicy(RefusesKey7() if self.refusing else LRU(), self.faults)
        self.pool = Pool(CAPACITY, self.policy, cost="a100_pcie4", backend=self.backend,
                         write_policy=self.write_policy,
                         prefetcher=RaisingPrefetcher(NextKey(), self.faults)
                         if self.prefetching else None)
        self.model: dict[int, bytes] = {}
        self.pins: dict[int, int] = {}
        self.reported: list[BaseException] = []  # injected failures the pool raised
        self.written_back_failed: set[int] = set()  # keys whose write-back failed (dirty since)

    def teardown(self) -> None:
        self.faults.armed = None
        if self.backend is None:
            for pk, n in self.pins.items():
                for _ in range(n):
                    self.pool.unpin(pk)
            for k, data in self.model.items():  # every object is there, of its size
                self.pool.access(k, len(data))
                assert self.pool._objs[k].size == len(data)
            self.pool._check()
            self.pool.close()
            return
        self.backend.disarm()
        try:
            for k, data in self.model.items():  # everything reads back through the public API
                for _ in range(3):  # a failure still pending is raised once
                    try:
                        assert self.pool.get(k).tobytes() == data, f"object {k} lost its bytes"
                        break
                    except BackendError as e:
                        self._faulted(e)
                    except PoolExhausted:  # pinned objects fill the pool: unpin and read again
                        for pk, n in self.pins.items():
                            for _ in range(n):
                                self.pool.unpin(pk)
                        self.pins = {}
                else:
                    raise AssertionError(f"object {k} cannot be read back")
            self.pool._check()
        finally:
            self.pool.close()

    # ------------------------------------------------------------------ faults
    def _failed_events(self) -> list[object]:
        """The failed copies the pool still holds (not yet waited for)."""
        p = self.pool
        evs = [ev for o in p._objs.values() for ev in (o.h2d_event, o.d2h_event)]
        evs += [r[4] for r in p._releases]
        return [ev for ev in evs if isinstance(ev, (FailedCopy, BackendError))]

    def _copy_faults(self) -> int:
        """Copy faults armed, and failed copies the pool still holds."""
        if self.backend is None:
            return 0
        return len(self.backend.armed) + len(self._failed_events())

    def _faults(self) -> int:
        return self._copy_faults() + (self.faults.armed is not None)

    def _faulted(self, e: PolicyError | BackendError) -> None:
        """``e`` came from an injected fault, reported once."""
        if isinstance(e, PolicyError):
            assert isinstance(e.__cause__, HookFault), "a PolicyError without an injected fault"
            assert self.faults.armed is None and self.faults.fired
            assert e.hook == self.faults.fired[-1][0]
            return
        cause = e.__cause__
        assert self.backend is not None and any(cause is f for f in self.backend.failures), (
            f"not an injected failure: {e!r}")
        assert all(cause is not r for r in self.reported), f"a failure raised twice: {e!r}"
        self.reported.append(cause)
        assert e.direction in COPY_DIRECTIONS and e.key in range(8), e
        if e.direction == "d2h":
            self.written_back_failed.add(e.key)

    @precondition(lambda self: self.backend is not None and self._copy_faults() < self.max_faults)
    @rule(direction=st.sampled_from(COPY_DIRECTIONS), key=st.one_of(st.none(), KEYS),
          at_launch=st.booleans())
    def fail_a_copy(self, direction: str, key: int | None, at_launch: bool) -> None:
        if self.max_faults == 1:
            self.faults.armed = None  # one fault at a time
        assert self.backend is not None
        self.backend.arm(direction, key, at_launch=at_launch)

    @precondition(lambda self: self.faults.armed is None and self._faults() < self.max_faults)
    @rule(hook=st.sampled_from(HOOKS))
    def fail_a_hook(self, hook: str) -> None:
        """Arm one of the hooks the pool calls here (armed until it fires)."""
        skip = {"prefetch" if not self.prefetching else "touch"}
        if hook not in skip:
            self.faults.arm(hook)

    @precondition(lambda self: self.max_faults > 1 and self.faults.armed is None
                  and self._failed_events())
    @rule()
    def fail_the_recovery(self) -> None:
        """A failed copy is held, not yet raised: arm the hook its recovery calls (``on_insert``
        for a write-back, ``on_evict`` for a prefetch)."""
        ev = self._failed_events()[0]
        d2h = any(o.d2h_event is ev for o in self.pool._objs.values()) or any(
            r[4] is ev for r in self.pool._releases)
        self.faults.arm("on_insert" if d2h else "on_evict")

    # ------------------------------------------------------------------ helpers
    def _size(self, key: int) -> int:
        return len(self.model[key])

    def _host_bytes(self, key: int) -> bytes | None:
        assert self.backend is not None
        buf = self.backend.host_buffer(key)
        return None if buf is None else buf.tobytes()

    def _can_pin(self, key: int) -> bool:
        return key in self.pins or len(self.pins) < MAX_PINNED_KEYS

    # ------------------------------------------------------------------ rules
    @precondition(lambda self: self.backend is not None)
    @rule(key=KEYS, size=SIZES, seed=st.integers(0, 2**16), compute=COMPUTE)
    def put(self, key: int, size: int, seed: int, compute: int) -> None:
        data = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)
        try:
            self.pool.put(key, data)
        except ObjectPinned:
            assert key in self.pins and self._size(key) != size
            return
        except PoolExhausted:
            assert self.pins, "only pinned objects can exhaust the pool"
            return
        except (PolicyError, BackendError) as e:
            self._faulted(e)
            o = self.pool._objs.get(key)
            if o is None:  # a new object, or one put with a new size (freed first)
                self.model.pop(key, None)
            elif (o.state == DEVICE and o.size == size and self.pool.backend.device_buffer(
                    o.offset, size).tobytes() == data.tobytes()):
                self.model[key] = data.tobytes()  # raised after the write (prefetches)
            elif (o.state == HOST and o.size == size and self.refusing and key == 7
                  and self._host_bytes(key) == data.tobytes()):
                self.model[key] = data.tobytes()  # streamed out, raised after (pending evictions)
            elif (o.state == HOST and o.size == size and self.refusing and key == 7
                  and self._host_bytes(key) is None and "unwritten" in str(e)):
                self.model[key] = bytes(size)  # the stream failed and so did its free: zeros
            else:
                assert key in self.model
            return
        self.model[key] = data.tobytes()
        self.pool.cost.compute(compute)

    @precondition(lambda self: self.backend is not None)
    @rule(key=KEYS)
    def get(self, key: int) -> None:
        if key not in self.model:
            with pytest.raises(UnknownKey):
                self.pool.get(key)
            return
        try:
            got = self.pool.get(key)
        except PoolExhausted:
            assert self.pins
            return
        except (PolicyError, BackendError) as e:
            self._faulted(e)
            return
        assert got.tobytes() == self.model[key]

    @rule(key=KEYS, size=SIZES, write=st.booleans(), compute=COMPUTE)
    def access(self, key: int, size: int, write: bool, compute: int) -> None:
        """Metadata access: a read of a new key creates a zero object in host memory; a write
        of an existing one marks it dirty without changing its bytes."""
        new = key not in self.model
        write = write and not new
        try:
            self.pool.access(key, size if new else self._size(key), write, compute_ns=compute)
        except PoolExhausted:
            assert self.pins
            assert new == (key not in self.pool)
            return
        except (PolicyError, BackendError) as e:
            self._faulted(e)
            if new and key in self.pool:  # the access happened (the error came after it)
                self.model[key] = bytes(size)
            return
        if new:
            self.model[key] = bytes(size)

    @rule(key=KEYS, size=SIZES)
    def prefetch(self, key: int, size: int) -> None:
        new = key not in self.model
        objs = self.pool.view.objects
        before = {k: o.state for k, o in objs.items()}  # (state() would land copies)
        try:
            started = self.pool.prefetch(key, size if new else None)
        except PoolExhausted:
            # no room beside pinned objects, or beside prefetches in flight, which a prefetch
            # does not wait for (a demand access does)
            live = [k for k in self.model if k in self.pool]
            info = self.pool.view.info
            assert self.pins or any(self.pool.state(k) == "h2d" for k in live)
            if any(o.state == DEVICE and not o.pins for o in objs.values()):
                # refused before evicting anything: it cannot fit beside what no eviction frees
                assert {k: o.state for k, o in objs.items()} == before
                stuck = sum(o.nbytes for o in objs.values() if o.pins or o.state == H2D)
                need = -(-(size if new else info(key).size) // ALIGN) * ALIGN  # (the arena's block)
                assert stuck + need > CAPACITY
            assert new == (key not in self.pool)
            return
        except (PolicyError, BackendError) as e:
            self._faulted(e)
            if new and key in self.pool:  # created, its fetch failed when waited for
                self.model[key] = bytes(size)
            return
        if new:
            assert started
            self.model[key] = bytes(size)

    @rule(key=KEYS)
    def free(self, key: int) -> None:
        if key not in self.model:
            with pytest.raises(UnknownKey):
                self.pool.free(key)
        elif key in self.pins:
            with pytest.raises(ObjectPinned):
                self.pool.free(key)
        else:
            try:
                self.pool.free(key)
            except PolicyError as e:  # undone
                self._faulted(e)
                assert key in self.pool
                return
            del self.model[key]

    @rule(key=KEYS)
    def pin(self, key: int) -> None:
        if key not in self.model or not self._can_pin(key):
            return
        state = self.pool._objs[key].state
        if state in (DEVICE, H2D):
            try:
                self.pool.pin(key)
            except BackendError as e:  # its prefetch failed: in host memory
                self._faulted(e)
                assert self.pool._objs[key].state == HOST
                return
            self.pins[key] = self.pins.get(key, 0) + 1
            assert self.pool._objs[key].state == DEVICE
        else:
            with pytest.raises(NotResident):
                self.pool.pin(key)

    @rule(key=KEYS)
    def unpin(self, key: int) -> None:
        if key not in self.model:
            return
        if key in self.pins:
            self.pool.unpin(key)
            self.pins[key] -= 1
            if not self.pins[key]:
                del self.pins[key]
        else:
            with pytest.raises(NotPinned):
                self.pool.unpin(key)

    @precondition(lambda self: self.model)
    @rule()
    def flush(self) -> None:
        try:
            self.pool.flush()
        except BackendError as e:
            if isinstance(e.__cause__, BackendError) and e.__cause__.__cause__ is not None:
                # several copies failed, raised together (the first chained): every injected
                # failure the pool no longer holds was raised here or never needed raising
                assert self.backend is not None
                held = [ev.error if isinstance(ev, FailedCopy) else ev for ev in self._failed_events()]
                first = e.__cause__.__cause__
                assert all(first is not r for r in self.reported), f"a failure raised twice: {e!r}"
                for f in self.backend.failures:
                    if all(f is not r for r in self.reported) and all(f is not h for h in held):
                        self.reported.append(f)
                        if f.direction == "d2h":
                            self.written_back_failed.add(f.key)  # type: ignore[arg-type]
                assert any(first is r for r in self.reported)
                return
            self._faulted(e)
            return
        assert not any(o.dirty for o in self.pool._objs.values())

    # ------------------------------------------------------------------ invariants
    @invariant()
    def consistent(self) -> None:
        p = self.pool
        p._check()  # blocks tile the arena (no overlap), used <= capacity, counters add up
        assert p.snapshot().device_bytes <= CAPACITY
        assert set(p._objs) == set(self.model)
        for k, n in self.pins.items():
            assert p._objs[k].pins == n and p._objs[k].state == DEVICE
        assert set(self.policy.inner.order()) == policy_tracks(p)  # type: ignore[attr-defined]

    @invariant()
    def bytes_are_what_was_last_written(self) -> None:
        """Peek without disturbing the pool: the device copy of a resident object, the host copy
        otherwise; a clean resident object's host copy is current too."""
        p, be = self.pool, self.backend
        if be is None:
            assert all(p._objs[k].size == len(data) for k, data in self.model.items())
            return
        be.synchronize()
        failed = self._failed_events()
        for k, data in self.model.items():
            o = p._objs[k]
            assert o.size == len(data)
            h = be.host_buffer(k)
            host = bytes(o.size) if h is None else h.tobytes()  # none yet: zeros when fetched
            # a copy to host that failed (the pool has not waited for it yet): the host copy is
            # stale, the bytes are in the device block
            lost = any(o.d2h_event is ev for ev in failed)
            if o.state == H2D and any(o.h2d_event is ev for ev in failed):
                assert host == data, f"host copy of {k} (its fetch failed)"
            elif o.state in (DEVICE, H2D):
                assert be.device_buffer(o.offset, o.size).tobytes() == data, f"device copy of {k}"
                if not o.dirty and o.state == DEVICE and not lost:
                    assert host == data, f"clean {k}: stale host copy"
                if self.write_policy == "write-through":
                    assert not o.dirty or k in self.written_back_failed
            else:
                assert o.state in (HOST, D2H)
                if lost:  # its block is still held, waiting for that copy
                    off = next(r[2] for r in p._releases if r[4] is o.d2h_event)
                    assert be.device_buffer(off, o.size).tobytes() == data, f"held block of {k}"
                else:
                    assert host == data, f"host copy of {k}"


class WriteThroughMachine(PoolMachine):
    write_policy = "write-through"


class NoPrefetcherMachine(PoolMachine):
    prefetching = False


class NoBackendMachine(PoolMachine):
    """Metadata only (sizes, no bytes)."""

    with_backend = False


class DoubleFaultMachine(PoolMachine):
    max_faults = 2


class DoubleFaultWriteThroughMachine(DoubleFaultMachine):
    write_policy = "write-through"


class StreamingMachine(DoubleFaultMachine):
    """The policy never admits key 7: its puts, gets and accesses are streamed (real bytes
    through ``Backend.stream_in`` / ``stream_out``, whose copies fail on request too)."""

    refusing = True


_SETTINGS = settings(max_examples=60, stateful_step_count=40, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])


def _test_case(machine: type[PoolMachine]) -> type:
    """The unittest case that runs ``machine`` under :data:`_SETTINGS`."""
    case = machine.TestCase
    case.settings = _SETTINGS
    return case


TestPoolWriteBack = _test_case(PoolMachine)
TestPoolWriteThrough = _test_case(WriteThroughMachine)
TestPoolNoPrefetcher = _test_case(NoPrefetcherMachine)
TestPoolNoBackend = _test_case(NoBackendMachine)
TestPoolDoubleFaults = _test_case(DoubleFaultMachine)
TestPoolDoubleFaultsWriteThrough = _test_case(DoubleFaultWriteThroughMachine)
TestPoolStreaming = _test_case(StreamingMachine)


def test_a_failed_write_back_of_a_dirty_victim_in_a_write_through_pool_is_taken_back() -> None:
    """Found by DoubleFaultWriteThroughMachine: an object left dirty by a failed write-through
    copy is written back when evicted (a counted write-back); that copy failing too took the
    eviction back but not the write-back (writebacks > evictions)."""
    s = DoubleFaultWriteThroughMachine()

    def steps() -> None:
        s.bytes_are_what_was_last_written()
        s.consistent()

    s.fail_a_hook(hook="on_miss")
    s.fail_a_copy(at_launch=False, direction="d2h", key=None)
    s.free(key=0)
    s.access(compute=0, key=0, size=1, write=False)
    s.access(compute=0, key=1, size=1, write=False)
    s.put(compute=0, key=0, seed=0, size=1)
    s.flush()
    steps()
    s.fail_a_copy(at_launch=False, direction="d2h", key=None)
    for k in (2, 3, 4):
        s.access(compute=0, key=k, size=1, write=False)
    steps()
    s.put(compute=0, key=1, seed=0, size=513)
    steps()
    s.teardown()
