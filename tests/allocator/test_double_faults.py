"""Double faults: a second fault injected while, or just after, the pool recovers from a first
(a failed write-back, then a failed fetch; a raising hook, then a failed copy; a hook that
raises inside the recovery itself). Each failure is raised once, typed; the invariants hold
after every operation; no byte is lost (a dict model of every object's last write)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from pool_faults import FaultyBackend, HookFault, RaisingPolicy, policy_tracks

from cachegym.allocator.arena import ALIGN
from cachegym.allocator.errors import BackendError, PolicyError
from cachegym.allocator.pool import Pool
from cachegym.policies.lru import LRU

B = ALIGN


class _Run:
    """A pool over a :class:`FaultyBackend` and a :class:`RaisingPolicy` (LRU) with a dict model
    of every object's bytes. ``op`` runs an operation, retrying it (up to three times) while it
    raises an injected fault, and checks the invariants after every try."""

    def __init__(self, capacity: int, cost: str | None = "a100_pcie4", **kw: object) -> None:
        self.be = FaultyBackend()
        self.pol = RaisingPolicy(LRU())
        self.p = Pool(capacity, self.pol, cost=cost, backend=self.be, **kw)  # type: ignore[arg-type]
        self.model: dict[int, bytes] = {}
        self.raised: list[tuple[str, object, object]] = []  # (kind, key, what) in order
        self.messages: list[str] = []  # of the BackendErrors

    def check(self) -> None:
        p = self.p
        p._check()
        assert set(p._objs) == set(self.model)
        assert set(self.pol.inner.order()) == policy_tracks(p)  # type: ignore[attr-defined]

    def op(self, fn: Callable[[], object], then: Callable[[], object] | None = None) -> object:
        """``then`` updates the model once ``fn`` succeeds."""
        for _ in range(3):
            try:
                out = fn()
                if then is not None:
                    then()
            except BackendError as e:
                assert any(e.__cause__ is f for f in self.be.failures), e
                assert all(e.__cause__ is not r for _, _, r in self.raised), f"raised twice: {e}"
                self.raised.append((e.direction, e.key, e.__cause__))
                self.messages.append(str(e))
            except PolicyError as e:
                assert isinstance(e.__cause__, HookFault), e
                self.raised.append((e.hook, e.key, e.__cause__))
            else:
                self.check()
                return out
            self.check()
        raise AssertionError("an operation failed three times")

    def put(self, key: int, seed: int, n: int = B) -> None:
        data = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)
        self.op(lambda: self.p.put(key, data), lambda: self.model.__setitem__(key, data.tobytes()))

    def read_back(self) -> None:
        self.be.disarm()
        self.pol.faults.armed = None
        for k, data in self.model.items():
            assert self.op(lambda k=k: self.p.get(k).tobytes()) == data, f"object {k} lost"  # type: ignore[misc]
        self.op(self.p.flush)
        for k, data in self.model.items():
            h = self.be.host_buffer(k)
            assert h is not None and h.tobytes() == data, f"host copy of {k}"
        self.p.close()

    def kinds(self) -> list[tuple[str, object]]:
        return [(kind, key) for kind, key, _ in self.raised]


@pytest.mark.parametrize("at_launch", [False, True])
@pytest.mark.parametrize("cost", [None, "a100_pcie4"])
def test_a_failed_write_back_then_a_failed_fetch_of_the_victim(cost: str | None,
                                                                 at_launch: bool) -> None:
    """1's write-back fails (it stays on the device, dirty); evicted again, written back, then
    its fetch fails (it stays in host memory): both raised once, its bytes kept."""
    r = _Run(2 * B, cost)
    r.put(1, 1)
    r.put(2, 2)
    r.be.arm("d2h", key=1, at_launch=at_launch)
    r.be.arm("h2d", key=1, at_launch=at_launch)
    for k in (3, 4, 5):  # evict 1 (its write-back fails), then again (it succeeds)
        r.put(k, k)
    r.op(lambda: r.p.get(1))  # the fetch fails, the retry succeeds
    assert r.kinds() == [("d2h", 1), ("h2d", 1)]
    r.read_back()


@pytest.mark.parametrize("at_launch", [False, True])
def test_a_failed_write_back_in_flight_then_a_failed_fetch_of_another(at_launch: bool) -> None:
    """1's write-back is in flight and fails; the next access (of 2, whose fetch fails too)
    finds one failure or both: each is raised once, and the retries complete."""
    r = _Run(3 * B)
    r.op(lambda: r.p.access(2, 2 * B), lambda: r.model.__setitem__(2, bytes(2 * B)))
    r.put(1, 1)
    r.op(lambda: r.p.access(3, B), lambda: r.model.__setitem__(3, bytes(B)))  # evicts 2
    assert r.pol.inner.order() == [1, 3] and r.p._objs[1].dirty  # type: ignore[attr-defined]
    assert r.p.state(2) == "host"
    r.be.arm("d2h", key=1, at_launch=at_launch)
    r.be.arm("h2d", key=2, at_launch=at_launch)
    r.op(lambda: r.p.get(2))  # evicts 1 (its write-back fails) and 3; 2's fetch fails
    assert ("h2d", 2) in r.kinds()
    r.read_back()  # 1's failure is raised by this access at the latest
    assert sorted(r.kinds()) == [("d2h", 1), ("h2d", 2)]


def test_a_raising_on_evict_then_a_failed_write_back_of_the_same_victim() -> None:
    r = _Run(2 * B)
    r.put(1, 1)
    r.put(2, 2)
    r.pol.arm("on_evict")
    r.be.arm("d2h", key=1)
    for k in (3, 4, 5):
        r.put(k, k)
    assert r.kinds()[0] == ("on_evict", 1) and ("d2h", 1) in r.kinds()
    r.read_back()


@pytest.mark.parametrize("hook", ["on_miss", "on_insert"])
def test_a_raising_hook_and_a_failed_fetch_of_one_miss(hook: str) -> None:
    """The miss of 1 raises in a hook (undone) and its fetch fails (undone): either comes first
    (``on_miss`` before the fetch, ``on_insert`` after it); the third try lands."""
    r = _Run(2 * B)
    r.put(1, 1)
    r.put(2, 2)
    r.put(3, 3)  # 1 is written back
    r.op(r.p.flush)
    r.pol.arm(hook)
    r.be.arm("h2d", key=1)
    r.op(lambda: r.p.get(1))
    assert r.kinds() == ([(hook, 1), ("h2d", 1)] if hook == "on_miss" else [("h2d", 1), (hook, 1)])
    assert r.p.state(1) == "device"
    r.read_back()


@pytest.mark.parametrize("at_launch", [False, True])
def test_a_hook_raising_while_a_failed_write_back_is_recovered(at_launch: bool) -> None:
    """The recovery of a failed write-back gives the victim back to the policy (``on_insert``);
    when that raises too, both failures are reported and the policy still tracks every
    resident object."""
    r = _Run(3 * B)
    r.put(1, 1)
    r.op(lambda: r.p.access(2, 2 * B), lambda: r.model.__setitem__(2, bytes(2 * B)))
    r.be.arm("d2h", key=1, at_launch=at_launch)
    r.op(lambda: r.p.access(3, 2 * B, write=True),  # evicts 1 and 2; nothing waits for 1's copy
         lambda: r.model.__setitem__(3, bytes(2 * B)))
    assert r.p.state(1) != "device"
    r.pol.arm("on_insert")
    r.op(lambda: r.p.get(1))  # raises 1's failure (the policy's too), then hits
    assert r.kinds() == [("d2h", 1)] and r.pol.faults.fired == [("on_insert", 1)]
    assert "raised HookFault" in r.messages[0] and "in on_insert for key 1" in r.messages[0]
    assert r.p.state(1) == "device" and r.p._objs[1].dirty and not r.p._owed
    r.read_back()


@pytest.mark.parametrize("at_launch", [False, True])
def test_a_hook_raising_while_a_failed_prefetch_is_recovered(at_launch: bool) -> None:
    """A failed prefetch takes the object off the device (``on_evict``); when that raises too,
    the policy still tracks exactly the resident objects."""
    r = _Run(3 * B)
    for k in (1, 2, 3, 4):  # 1 is evicted and written back
        r.put(k, k)
    r.op(r.p.flush)
    r.be.arm("h2d", key=1, at_launch=at_launch)
    assert r.op(lambda: r.p.prefetch(1))
    r.pol.arm("on_evict")
    r.op(lambda: r.p.access(1, B))  # raises 1's failure (the policy's too), then fetches it
    assert r.kinds() == [("h2d", 1)] and r.pol.faults.fired == [("on_evict", 1)]
    assert "raised HookFault" in r.messages[0] and "in on_evict for key 1" in r.messages[0]
    assert r.p.state(1) == "device" and not r.p._owed
    r.read_back()


def _owing() -> _Run:
    """A pool whose recovery from a failed write-back (object 1's) owes the policy an
    ``on_insert`` that raised: told again before the next operation."""
    r = _Run(3 * B)
    r.put(1, 1)
    r.op(lambda: r.p.access(2, 2 * B), lambda: r.model.__setitem__(2, bytes(2 * B)))
    r.be.arm("d2h", key=1)
    r.op(lambda: r.p.access(3, 2 * B, write=True), lambda: r.model.__setitem__(3, bytes(2 * B)))
    r.pol.arm("on_insert")
    with pytest.raises(BackendError):
        r.p.get(1)
    return r


def test_a_policy_still_raising_when_told_again() -> None:
    """What the recovery owes the policy is told again before each operation, which raises
    (undone, nothing counted) until the policy takes it."""
    r = _owing()
    r.check()
    for _ in range(2):
        r.pol.arm("on_insert")
        accesses = r.p.snapshot().accesses
        with pytest.raises(PolicyError) as ei:
            r.p.access(3, 2 * B)
        assert (ei.value.hook, ei.value.key) == ("on_insert", 1) and r.p._owed
        assert r.p.snapshot().accesses == accesses
        r.check()
    r.op(lambda: r.p.access(3, 2 * B))
    assert not r.p._owed
    r.read_back()


def test_a_request_the_caller_may_not_make_is_refused_before_what_is_owed() -> None:
    """A free of an unknown or pinned key, a prefetch of an unknown key without a size or with
    a size <= 0, an access with a bad size or of an object larger than the pool: each raises its
    own error (UnknownKey, ObjectPinned, ConfigError, ObjectTooLarge), not the policy's
    still-owed hook (found by the stateful machine for a free: it raised PolicyError there),
    and changes nothing: the owed hook is told at the next operation."""
    from cachegym.allocator.errors import ConfigError, ObjectPinned, ObjectTooLarge, UnknownKey

    r = _owing()
    assert r.p._owed
    r.pol.arm("on_insert")  # the owed hook would raise again if it were told now
    with pytest.raises(UnknownKey):
        r.p.free(7)
    r.p.pin(3)
    with pytest.raises(ObjectPinned):
        r.p.free(3)
    with pytest.raises(UnknownKey):
        r.p.prefetch(99)
    with pytest.raises(ConfigError):
        r.p.prefetch(98, 0)
    for size in (-1, 0, 1.5, True):
        with pytest.raises(ConfigError):
            r.p.access(97, size)  # type: ignore[arg-type]
    with pytest.raises(ObjectTooLarge):
        r.p.access(96, 4 * B)
    assert r.p._owed and r.pol.faults.armed == "on_insert"  # nothing told, nothing changed
    assert not {96, 97, 98, 99} & set(r.p._objs)
    r.p.unpin(3)
    r.check()
    with pytest.raises(PolicyError):  # the next operation tells it, and it raises
        r.p.free(3)
    assert 3 in r.p
    r.op(lambda: r.p.access(3, 2 * B))
    assert not r.p._owed
    r.read_back()
