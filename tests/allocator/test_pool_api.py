"""The pool's public API where a caller holds it in unusual ways (from an audit): a call made
while a steps() decision waits, copies, a policy changed mid-run, hooks given NumPy keys, and the
keys and sizes of a prefetch or a victim."""

from __future__ import annotations

import copy
import io
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from cachegym.allocator.errors import ConfigError, InvalidVictim, PolicyError
from cachegym.allocator.pool import Pool
from cachegym.allocator.stats import JsonlHook
from cachegym.policies.classic import FIFO
from cachegym.policies.learned import LearnedPolicy
from cachegym.policies.lru import LRU

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "policy.npz"


def _full() -> Pool:
    p = Pool(1000, LRU())
    for k in range(10):
        p.access(k, 100)
    return p


@pytest.mark.parametrize("call", [
    lambda p: p.free(50), lambda p: p.access(1, 100), lambda p: p.access(77, 100),
    lambda p: p.pin(1), lambda p: p.prefetch(3), lambda p: pickle.dumps(p),
    lambda p: next(p.steps(88, 100)),
])
def test_a_call_while_a_steps_decision_waits_is_refused_and_changes_nothing(call) -> None:
    """The lock is re-entrant: such a call in the thread that holds the generator was accepted
    and left the pool's byte and evictable counts wrong (free(50) leaked 300 bytes)."""
    p = _full()
    g = p.steps(50, 300)
    req = next(g)
    with pytest.raises(ConfigError, match="an eviction decision of this pool is pending: a "
                                          "steps\\(\\) EvictionRequest not answered yet"):
        call(p)
    try:
        while True:
            req = g.send(req.view.candidates()[0])
    except StopIteration:
        pass
    p._check()
    p.free(50)  # (allowed again)
    p._check()


@pytest.mark.parametrize("call", [lambda p: p.access(9, 1024), lambda p: p.free(0),
                                  lambda p: p.put(9, np.zeros(1024, np.uint8))])
def test_a_victim_calling_its_pool_back_is_refused_and_changes_nothing(call) -> None:
    """A victim() that accessed the pool while the pool made room for an access left 1 KiB of
    the arena held by nothing (a helper's audit: _check failed, (3072, 4096)); the steps()
    generator refused such calls, the policy-driven path did not."""
    from cachegym.allocator.backends import NumpyBackend

    class CallsBack(LRU):
        calls = 0

        def victim(self, view):  # type: ignore[no-untyped-def]
            CallsBack.calls += 1
            if CallsBack.calls == 1:  # (once: accepted, the call recursed into victim again)
                call(pool)
            return super().victim(view)

    pool = Pool(4096, CallsBack(), backend=NumpyBackend())
    for k in range(4):
        pool.put(k, np.full(1024, k + 1, np.uint8))
    before = pool.snapshot()
    with pytest.raises(PolicyError, match="eviction decision of this pool is pending.* in victim"):
        pool.access(4, 1024)
    pool._check()
    assert pool.snapshot().accesses == before.accesses and 4 not in pool
    for k in range(4):
        np.testing.assert_array_equal(pool.get(k), np.full(1024, k + 1, np.uint8))
    pool.close()


@pytest.mark.parametrize("size", ["abc", None, -1, 0, float("nan"), 2**63, True, 1024.0])
def test_a_bad_size_is_refused_on_a_hit_as_on_a_miss(size) -> None:
    """A hit ignored its size argument: access(1, 'abc') counted a hit (a helper's audit)."""
    p = Pool(4096, LRU())
    p.access(1, 1024)
    with pytest.raises(ConfigError, match="needs a size that is an integer number of bytes"):
        p.access(1, size)
    with pytest.raises(ConfigError, match="needs a size that is an integer number of bytes"):
        next(p.steps(1, size))
    assert p.snapshot().accesses == 1 and p.access(1, np.int64(1024))


@pytest.mark.parametrize("op", [7, "r", None, True, -1])
def test_a_steps_op_that_is_none_of_read_write_free_is_refused(op) -> None:
    """(7, 'r' and None were served as reads.)"""
    p = Pool(4096, LRU())
    with pytest.raises(ConfigError, match="op must be Op.READ \\(0\\), Op.WRITE"):
        next(p.steps(1, 1024, op))
    assert p.snapshot().accesses == 0


def test_a_backend_or_hook_that_is_none_and_a_pool_with_a_backend_in_pickle_are_clear() -> None:
    """(A helper's audit: backend=object() was an AttributeError, the class NumpyBackend a
    TypeError; hook=3 was taken and detached at the first event with a log line; pickling a
    pool with a NumpyBackend was pickle's "cannot pickle '_thread.lock' object".)"""
    from cachegym.allocator.backends import NumpyBackend

    with pytest.raises(ConfigError, match="backend .* has no attach, device_buffer"):
        Pool(4096, LRU(), backend=object())
    with pytest.raises(ConfigError, match="pass an instance, e.g. backend=NumpyBackend\\(\\)"):
        Pool(4096, LRU(), backend=NumpyBackend)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="hook must be a callable"):
        Pool(4096, LRU(), hook=3)  # type: ignore[arg-type]
    p = Pool(4096, LRU(), backend=NumpyBackend())
    with pytest.raises(ConfigError, match="hook must be a callable"):
        p.hook = "str"  # type: ignore[assignment]
    assert p.hook is None
    p.put(1, np.ones(1024, np.uint8))
    with pytest.raises(TypeError, match="a pool with a backend .* do not pickle"):
        pickle.dumps(p)
    with pytest.raises(ConfigError, match="do not pickle"):
        copy.deepcopy(p)
    np.testing.assert_array_equal(p.get(1), np.ones(1024, np.uint8))
    p.close()


def test_a_refused_call_on_a_closed_pool_leaves_it_closed() -> None:
    """free(999), unpin of an unpinned object, pin of one in host memory on a closed pool were
    refused after the pool had taken its policy and backend back: a new pool was then refused
    them (a helper's audit)."""
    from cachegym.allocator.backends import NumpyBackend
    from cachegym.allocator.errors import NotPinned, NotResident, UnknownKey

    be, pol = NumpyBackend(), LRU()
    p = Pool(4096, pol, backend=be)
    for k in range(5):  # (0 is in host memory after 4's put)
        p.put(k, np.full(1024, k, np.uint8))
    p.close()
    for call, err in ((lambda: p.free(999), UnknownKey), (lambda: p.unpin(1), NotPinned),
                      (lambda: p.pin(0), NotResident)):
        with pytest.raises(err):
            call()
    q = Pool(4096, LRU(), backend=be)  # (the backend is free to go to another pool)
    q.close()


def test_a_hook_gets_numpy_keys_as_json() -> None:
    out = io.StringIO()
    p = Pool(4096, LRU(), hook=JsonlHook(out))
    p.access(np.int64(7), 1000)
    p._check()
    assert [json.loads(line)["key"] for line in out.getvalue().splitlines()] == [7]


def test_deepcopy_of_a_pool_with_a_learned_policy_is_independent() -> None:
    """copy.deepcopy kept the copy's shadow LRU bound to the original's container (a hit in the
    copy reordered the original, and the copy raised KeyError in touch)."""
    def run(p: Pool, seed: int) -> tuple[int, int]:
        rng = np.random.default_rng(seed)
        for k in rng.integers(0, 40, 600).tolist():
            p.access(k, 1000)
        return p.snapshot().misses, p.snapshot().traffic_bytes

    p = Pool(8000, LearnedPolicy.load(GOLDEN))
    run(p, 1)
    q, r, s = copy.deepcopy(p), pickle.loads(pickle.dumps(p)), pickle.loads(pickle.dumps(p))
    assert run(q, 2) == run(r, 2)  # the deep copy runs on as a pickled one
    assert run(p, 3) == run(s, 3)  # and the original as if the copy had not run
    p._check()
    q._check()


def test_a_shallow_copy_is_refused() -> None:
    with pytest.raises(ConfigError, match="use copy.deepcopy"):
        copy.copy(_full())


def test_a_new_policy_is_told_of_the_objects_the_pool_holds() -> None:
    """Setting pool.policy on a pool that holds objects: the new policy tracked none of them, and
    every later miss raised InvalidVictim."""
    p = _full()
    p.access(0, 100)  # 0 is the most recent
    p.policy = FIFO()
    assert list(p.policy._order) == [*range(1, 10), 0]  # least recently accessed first
    p.access(50, 100)
    p._check()
    assert p.state(1) == "host" and p.state(0) == "device"  # FIFO's first: 1

    class Refuses(LRU):
        def on_insert(self, view, key):
            raise RuntimeError("no")

    with pytest.raises(PolicyError, match="the pool keeps its policy"):
        p.policy = Refuses()
    assert isinstance(p.policy, FIFO)


@pytest.mark.parametrize("key,size", [("abc", 100), (None, 100), (True, 100), (11, 100.7),
                                      (11, True), (11, 0)])
def test_a_prefetch_of_a_new_object_checks_its_key_and_size(key, size) -> None:
    p = Pool(1000, LRU())
    with pytest.raises(ConfigError):
        p.prefetch(key, size)
    assert len(p) == 0


@pytest.mark.parametrize("size", [-5, 0, 2.5, True, 2**60])
def test_a_prefetch_of_a_known_object_checks_the_size_it_is_given(size) -> None:
    """A known key keeps its record's size, but a size given is still checked: -5 bytes was
    accepted silently (an audit's case)."""
    p = Pool(1000, LRU())
    p.access(1, 100)
    p.access(2, 1000)  # 1 evicted
    with pytest.raises(ConfigError, match="needs a size"):
        p.prefetch(1, size)
    assert p.state(1) == "host"
    assert p.prefetch(1, 300) and p.view.info(1).size == 100  # (a valid size: the record's counts)


def test_a_bool_is_no_victim() -> None:
    p = _full()
    g = p.steps(50, 100)
    next(g)
    with pytest.raises(InvalidVictim, match="a bool is not a key"):
        g.send(True)
    p._check()
    assert 1 in p and p.state(1) == "device"


@pytest.mark.filterwarnings("error")  # (a warning raised as an error stopped the event too)
def test_a_hook_that_raises_is_detached_and_the_event_completes(
        caplog: pytest.LogCaptureFixture) -> None:
    # a JsonlHook whose file was closed stopped an eviction midway: the victim's block stayed
    # taken for good and its policy had forgotten it
    from cachegym.allocator.backends import NumpyBackend

    log = io.StringIO()
    p = Pool(4096, LRU(), backend=NumpyBackend(threads=False), hook=JsonlHook(log))
    for k in range(4):
        p.put(k, np.full(1024, k, np.uint8))
    log.close()
    p.put(9, np.full(1024, 9, np.uint8))
    assert "JsonlHook" in caplog.text and "detached" in caplog.text
    assert p.hook is None and 9 in p
    p._check()
    assert [int(p.get(k)[0]) for k in (0, 1, 2, 3, 9)] == [0, 1, 2, 3, 9]
    p.put(10, np.full(4096, 10, np.uint8))  # every block free again
    p.close()


@pytest.mark.parametrize("kw, match", [
    ({"compute_ns": -10**9}, "compute_ns=-1000000000"), ({"compute_ns": 1.5}, "compute_ns=1.5"),
    ({"compute_ns": 2**70}, "compute_ns="), ({"kind": None}, "kind=None"),
    ({"kind": "3"}, "kind='3'"), ({"kind": 2**40}, "kind=")])
def test_kind_and_compute_time_are_checked_as_a_trace_checks_them(kw: dict, match: str) -> None:
    # a negative compute time ran the clock backwards (a phantom stall of a second next); the
    # compiled and interpreted cores took other values differently
    p = Pool(1 << 20, LRU(), cost="h100_pcie5")
    with pytest.raises(ConfigError, match=match):
        p.access(1, 4096, **kw)
    with pytest.raises(ConfigError, match=match):
        next(p.steps(1, 4096, **kw))
    assert p.snapshot().accesses == 0 and p.snapshot().total_ns == 0
    from cachegym.allocator.trace import Kind

    p.access(1, 4096, kind=Kind.ACTIVATION, compute_ns=np.int64(5))  # an enum, a NumPy int
    assert p.snapshot().compute_ns == 5


def test_a_bypass_pool_streams_a_put_of_an_existing_key_larger_than_the_pool() -> None:
    from cachegym.allocator.backends import NumpyBackend

    p = Pool(4096, LRU(), backend=NumpyBackend(threads=False), oversize="bypass")
    p.put(1, np.full(100, 1, np.uint8))
    p.put(1, np.full(9000, 5, np.uint8))  # PoolExhausted "pinned objects" with nothing pinned
    assert p.state(1) == "host" and p.get(1).size == 9000 and int(p.get(1)[0]) == 5
    p._check()
    p.close()


def test_a_backend_serves_one_open_pool_at_a_time() -> None:
    """A helper's audit: two pools given one NumpyBackend shared its device arena and host
    buffers (keyed by each pool's own keys), and each read the other's bytes. The second is
    refused while the first is open; closed, the first gives it up, and the backend's host
    buffers start empty for the next pool; the closed pool cannot take it back."""
    from cachegym.allocator.backends import NumpyBackend

    be = NumpyBackend()
    a = Pool(1 << 16, backend=be)
    a.put(0, np.full(1024, 7, np.uint8))
    with pytest.raises(ConfigError, match="already holds the bytes of another open pool"):
        Pool(1 << 16, backend=be)
    a.close()
    b = Pool(1 << 16, backend=be)
    assert be.host_buffer(0) is None  # (a's bytes are not b's object 0)
    b.put(0, np.full(1024, 9, np.uint8))
    assert int(b.get(0)[0]) == 9
    with pytest.raises(ConfigError, match="its backend .* has been given to another pool since"):
        a.get(0)
    b.close()
