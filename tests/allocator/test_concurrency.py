"""One lock makes the pool safe from several threads: 8 threads x 10,000 mixed operations."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest

from cachegym.allocator.arena import ALIGN
from cachegym.allocator.backends import NumpyBackend
from cachegym.allocator.errors import InvalidVictim, NotResident
from cachegym.allocator.pool import Pool

THREADS = 8
OPS = 10_000
SHARED = 48  # keys every thread reads and writes (metadata only)
OWN = 6  # keys per thread holding real bytes that only that thread writes
B = ALIGN


def _payload(tid: int, key: int, version: int) -> np.ndarray:
    return np.full(B, (tid * 31 + key * 7 + version) % 251, np.uint8)


def test_threads_share_one_pool() -> None:
    backend = NumpyBackend()
    pool = Pool(24 * B, cost="h100_pcie5", backend=backend)
    counts = [dict.fromkeys(("accesses", "frees", "prefetches"), 0) for _ in range(THREADS)]
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def work(tid: int) -> None:
        rng = random.Random(tid)
        c = counts[tid]
        own = {1000 * (tid + 1) + i: -1 for i in range(OWN)}  # key -> version last put (-1: none)
        try:
            start.wait()
            for _ in range(OPS):
                r = rng.random()
                if r < 0.45:
                    pool.access(rng.randrange(SHARED), B, rng.random() < 0.3, compute_ns=rng.randrange(2000))
                    c["accesses"] += 1
                elif r < 0.55:
                    c["prefetches"] += pool.prefetch(rng.randrange(SHARED), B)
                elif r < 0.75:
                    k = rng.choice(list(own))
                    own[k] += 1
                    pool.put(k, _payload(tid, k, own[k]))
                    c["accesses"] += 1
                elif r < 0.93:
                    k = rng.choice([k for k, v in own.items() if v >= 0] or [None])
                    if k is not None:
                        got = pool.get(k)
                        c["accesses"] += 1
                        assert np.array_equal(got, _payload(tid, k, own[k])), f"thread {tid} key {k}"
                elif r < 0.97:
                    k = rng.choice(list(own))
                    if own[k] >= 0:
                        try:
                            pool.pin(k)
                        except NotResident:  # another thread's access evicted it
                            continue
                        view = pool.get(k, copy=False)  # valid while pinned
                        assert np.array_equal(view, _payload(tid, k, own[k]))
                        c["accesses"] += 1
                        pool.unpin(k)
                else:
                    k = rng.choice(list(own))
                    if own[k] >= 0:
                        pool.free(k)
                        own[k] = -1
                        c["frees"] += 1
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert not any(t.is_alive() for t in threads), "deadlock: a worker did not finish"
    assert not errors, errors[:3]

    pool._check()
    s = pool.snapshot()
    assert s.accesses == sum(c["accesses"] for c in counts)
    assert s.hits + s.misses == s.accesses
    assert s.frees == sum(c["frees"] for c in counts)
    assert s.prefetches == sum(c["prefetches"] for c in counts)
    assert s.evictions > 1000 and s.writebacks > 100  # the threads really contended for space
    assert s.device_bytes <= pool.capacity
    pool.close()


def test_an_event_generator_dropped_mid_event_is_collected_in_another_thread_quietly() -> None:
    """A generator of ``Pool.steps`` left at an eviction request (an env dropped mid-episode)
    and collected by the garbage collector in another thread than the one that ran it closes
    without an error and undoes its event, and the pool serves every thread after it (it held
    the lock across its yields: that lock stayed held by the dead thread, and every later call
    hung)."""
    import gc
    import sys

    from cachegym.policies.lru import LRU

    pool = Pool(2 * ALIGN, LRU(), placement="bytes")
    pool.access(1, ALIGN)
    pool.access(2, ALIGN)
    holder: list[object] = []

    def start() -> None:  # runs the event to its eviction request, then leaves it there
        g = pool.steps(3, ALIGN)
        next(g)
        holder.append(g)

    t = threading.Thread(target=start)
    t.start()
    t.join()
    seen: list[BaseException | None] = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = lambda u: seen.append(u.exc_value)
    try:
        holder.clear()  # the last reference: collected here, in this thread
        gc.collect()
    finally:
        sys.unraisablehook = old_hook
    assert seen == []
    done: list[bool] = []
    later = threading.Thread(target=lambda: done.append(pool.access(1, ALIGN)), daemon=True)
    later.start()
    later.join(10)
    assert done == [True], "the pool's lock stayed held"
    assert pool.access(2, ALIGN) and 3 not in pool
    pool._check()


def test_an_event_waits_other_threads_and_refuses_its_own() -> None:
    """While a steps() event waits for a victim, another thread's call waits for it to end,
    the driving thread's own call is refused, and the event may be finished from another
    thread (the send raised 'cannot release un-acquired lock' and left the lock held)."""
    from cachegym.allocator.errors import ConfigError
    from cachegym.policies.lru import LRU

    pool = Pool(2 * ALIGN, LRU(), placement="bytes")
    pool.access(1, ALIGN)
    pool.access(2, ALIGN)
    g = pool.steps(3, ALIGN)
    req = next(g)
    with pytest.raises(ConfigError, match="pending"):
        pool.access(1, ALIGN)
    order: list[str] = []
    waiter = threading.Thread(target=lambda: order.append(f"access {pool.access(1, ALIGN)}"))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and order == []  # waits for the event

    def finish() -> None:
        with pytest.raises(StopIteration):
            g.send(1)
        order.append("event")

    t = threading.Thread(target=finish)
    t.start()
    t.join(10)
    waiter.join(10)
    assert order == ["event", "access False"]  # 1 was the victim: a miss after the event
    assert req.key == 3 and 3 in pool
    pool._check()


def test_a_pool_dropped_without_close_stops_its_copy_threads() -> None:
    # each NumpyBackend pool dropped unclosed (as the README's quickstart does) kept two threads
    import gc
    import time


    def workers() -> int:
        return sum(t.name.startswith("cachegym-") for t in threading.enumerate())

    before = workers()
    for _ in range(20):
        p = Pool(1 << 16, backend=NumpyBackend())
        p.put(1, np.ones(100, np.uint8))
        del p
    gc.collect()
    deadline = time.monotonic() + 10
    while workers() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert workers() == before


@pytest.mark.parametrize("victim_ok", [True, False])
def test_an_event_that_begins_as_another_ends_keeps_its_owner(victim_ok: bool) -> None:
    """An event of thread C that begins as soon as thread A's event ends (A's lock released:
    after its cleanup where the event finished, before it where A's victim was refused) keeps C
    as its owner: a third thread waits for it, and is served once C closes it (A's cleanup
    cleared the owner: the third thread was refused, 'a steps() decision is pending', though it
    drove none). The gap is widened by a lock that starts C's event at that moment."""
    from cachegym.policies.lru import LRU

    pool = Pool(2 * ALIGN, LRU(), placement="bytes")
    pool.access(1, ALIGN)
    pool.access(2, ALIGN)
    real = threading.RLock()
    depth: dict[int, int] = {}
    state: dict[str, object] = {"armed": False, "A": None}

    class Spy:
        def acquire(self, *a: object, **k: object) -> bool:
            got = real.acquire(*a, **k)  # type: ignore[arg-type]
            if got:
                me = threading.get_ident()
                depth[me] = depth.get(me, 0) + 1
            return got

        def release(self) -> None:
            me = threading.get_ident()
            depth[me] -= 1
            real.release()
            if (state["armed"] and me == state["A"] and depth[me] == 0 and not pool._deciding
                    and pool._event_thread in (None, threading.current_thread())):  # A's
                # event has ended (its cleanup may not have run)
                state["armed"] = False
                started = threading.Event()

                def c() -> None:
                    g = pool.steps(3, ALIGN)
                    next(g)  # C's event waits for a victim
                    state["C"] = g
                    started.set()

                threading.Thread(target=c).start()
                started.wait(5)

        __enter__ = acquire

        def __exit__(self, *exc: object) -> None:
            self.release()

        def _is_owned(self) -> bool:
            return real._is_owned()  # type: ignore[attr-defined, no-any-return]

        def _release_save(self) -> tuple[object, int]:
            me = threading.get_ident()
            saved = (real._release_save(), depth[me])  # type: ignore[attr-defined]
            depth[me] = 0
            return saved

        def _acquire_restore(self, saved: tuple[object, int]) -> None:
            real._acquire_restore(saved[0])  # type: ignore[attr-defined]
            depth[threading.get_ident()] = saved[1]

    spy = Spy()
    pool._lock = spy
    pool._acquire, pool._release = spy.acquire, spy.release
    pool._event_over = threading.Condition(spy)  # type: ignore[arg-type]
    g = pool.steps(4, ALIGN)
    req = next(g)
    state["A"], state["armed"] = threading.get_ident(), True
    with pytest.raises(StopIteration if victim_ok else InvalidVictim):
        g.send(req.view.candidates()[0] if victim_ok else 99)
    assert "C" in state and pool._deciding
    assert pool._event_thread not in (None, threading.current_thread())
    out: list[object] = []
    b = threading.Thread(target=lambda: out.append(pool.access(1, ALIGN)))
    b.start()
    b.join(0.5)
    assert b.is_alive() and out == []  # waits for C's event (was refused)
    state["C"].close()  # type: ignore[attr-defined]
    b.join(10)
    assert len(out) == 1 and isinstance(out[0], bool)
    pool._check()


def test_an_event_left_by_a_thread_that_ended_is_refused_not_waited_for_forever() -> None:
    """A steps() event whose thread ended without answering it (its generator kept) blocked
    every other thread's call forever, with no word (a helper's audit); after a second in which
    no thread takes it up, a waiting call is refused, saying how to end the event."""
    from cachegym.allocator.errors import ConfigError
    from cachegym.policies.lru import LRU

    pool = Pool(2 * ALIGN, LRU(), placement="bytes")
    pool.access(1, ALIGN)
    pool.access(2, ALIGN)
    held = []

    def begin() -> None:
        g = pool.steps(3, ALIGN)
        next(g)
        held.append(g)

    t = threading.Thread(target=begin, name="worker-a")
    t.start()
    t.join(10)
    got: list[object] = []

    def call() -> None:
        try:
            got.append(pool.access(1, ALIGN))
        except ConfigError as e:
            got.append(e)

    b = threading.Thread(target=call, daemon=True)
    b.start()
    b.join(30)
    assert not b.is_alive() and len(got) == 1 and isinstance(got[0], ConfigError), got
    assert "thread 'worker-a', which has ended" in str(got[0]) and "g.close()" in str(got[0])
    held[0].close()  # the event abandoned: the pool is free again
    assert pool.access(1, ALIGN) and 3 not in pool
    pool._check()
