"""Stateful property test: random operation sequences against a plain reference model.

The pool is small (six aligned blocks), holds real bytes (NumpyBackend, copies on worker
threads) and runs on a cost preset, so prefetches are in flight and write-backs delayed while
later operations arrive; a next-key prefetcher makes accesses trigger prefetches too. After
every step: blocks never overlap and accounting adds up (``Pool._check``), and every object
holds exactly what was last written to it; at the end everything is read back through ``get``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from allocator.arena import ALIGN
from allocator.backends import NumpyBackend
from allocator.errors import NotPinned, NotResident, ObjectPinned, PoolExhausted, UnknownKey
from allocator.pool import D2H, DEVICE, H2D, HOST, Pool, PoolView

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


class PoolMachine(RuleBasedStateMachine):
    write_policy = "write-back"

    def __init__(self) -> None:
        super().__init__()
        self.backend = NumpyBackend()
        self.pool = Pool(CAPACITY, cost="a100_pcie4", backend=self.backend,
                         write_policy=self.write_policy, prefetcher=NextKey())
        self.model: dict[int, bytes] = {}
        self.pins: dict[int, int] = {}

    def teardown(self) -> None:
        try:
            for k, data in self.model.items():  # everything reads back through the public API
                try:
                    assert self.pool.get(k).tobytes() == data, f"object {k} lost its bytes"
                except PoolExhausted:  # pinned objects fill the pool: unpin and read again
                    for pk, n in self.pins.items():
                        for _ in range(n):
                            self.pool.unpin(pk)
                    self.pins = {}
                    assert self.pool.get(k).tobytes() == data, f"object {k} lost its bytes"
            self.pool._check()
        finally:
            self.pool.close()

    # ------------------------------------------------------------------ helpers
    def _size(self, key: int) -> int:
        return len(self.model[key])

    def _can_pin(self, key: int) -> bool:
        return key in self.pins or len(self.pins) < MAX_PINNED_KEYS

    # ------------------------------------------------------------------ rules
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
        self.model[key] = data.tobytes()
        self.pool.cost.compute(compute)

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
        if new:
            self.model[key] = bytes(size)

    @rule(key=KEYS, size=SIZES)
    def prefetch(self, key: int, size: int) -> None:
        new = key not in self.model
        try:
            started = self.pool.prefetch(key, size if new else None)
        except PoolExhausted:
            assert self.pins
            assert new == (key not in self.pool)
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
            self.pool.free(key)
            del self.model[key]

    @rule(key=KEYS)
    def pin(self, key: int) -> None:
        if key not in self.model or not self._can_pin(key):
            return
        state = self.pool._objs[key].state
        if state in (DEVICE, H2D):
            self.pool.pin(key)
            self.pins[key] = self.pins.get(key, 0) + 1
            assert self.pool.state(key) == "device"
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
        self.pool.flush()
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

    @invariant()
    def bytes_are_what_was_last_written(self) -> None:
        """Peek without disturbing the pool: the device copy of a resident object, the host copy
        otherwise; a clean resident object's host copy is current too."""
        p, be = self.pool, self.backend
        be.synchronize()
        for k, data in self.model.items():
            o = p._objs[k]
            assert o.size == len(data)
            host = be.host_buffer(k)
            if o.state in (DEVICE, H2D):
                assert be.device_buffer(o.offset, o.size).tobytes() == data, f"device copy of {k}"
                if not o.dirty and o.state == DEVICE:
                    assert host is not None and host.tobytes() == data, f"clean {k}: stale host copy"
                if self.write_policy == "write-through":
                    assert not o.dirty
            else:
                assert o.state in (HOST, D2H)
                assert host is not None and host.tobytes() == data, f"host copy of {k}"


class WriteThroughMachine(PoolMachine):
    write_policy = "write-through"


_SETTINGS = settings(max_examples=60, stateful_step_count=40, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])
TestPoolWriteBack = PoolMachine.TestCase
TestPoolWriteBack.settings = _SETTINGS
TestPoolWriteThrough = WriteThroughMachine.TestCase
TestPoolWriteThrough.settings = _SETTINGS
