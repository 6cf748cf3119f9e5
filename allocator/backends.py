"""Backends own real memory: a device arena and host buffers, and copy between them.

The pool decides everything (placement offsets, when copies start, when blocks are reused);
a backend only moves bytes. Copies are asynchronous: ``copy_h2d``/``copy_d2h`` return an event
and the pool ``wait``s on it before it reads the destination or reuses the source block.
Results with a backend equal results without one, decision by decision.

``CupyBackend`` lives in :mod:`allocator.cupy_backend` (the only module that imports ``cupy``).
"""

from __future__ import annotations

import queue
import threading
import weakref
from typing import Any, Protocol

import numpy as np

from cachegym.allocator.errors import BackendError


class Backend(Protocol):
    def attach(self, capacity: int) -> None:
        """Allocate the device arena of ``capacity`` bytes (called once by the pool)."""

    def device_buffer(self, offset: int, nbytes: int) -> Any:
        """The device bytes ``[offset, offset + nbytes)`` as an array (no copy)."""

    def write(self, offset: int, data: np.ndarray) -> None:
        """Synchronously copy host ``data`` (uint8) into the device at ``offset``. A write that
        fails may have stored part of ``data``: the pool then restores the object from its host
        copy where it has one (:meth:`Pool.put <allocator.pool.Pool.put>`)."""

    def copy_h2d(self, key: int, offset: int, nbytes: int) -> Any:
        """Start copying host buffer ``key`` into the device at ``offset``; returns an event."""

    def copy_d2h(self, key: int, offset: int, nbytes: int) -> Any:
        """Start copying device ``[offset, offset+nbytes)`` into host buffer ``key``."""

    def stream_in(self, key: int, nbytes: int) -> Any:
        """A new device array (outside the arena) holding host buffer ``key``'s ``nbytes``
        bytes: the read of an object the pool did not admit (synchronous)."""

    def stream_out(self, key: int, data: Any) -> None:
        """Store ``data`` (uint8) as host buffer ``key``: the write of an object the pool did
        not admit (synchronous)."""

    def wait(self, event: Any) -> None: ...

    def free_host(self, key: int) -> None: ...

    def host_buffer(self, key: int) -> np.ndarray | None: ...

    def synchronize(self) -> None: ...

    def close(self) -> None: ...


class _Event:
    """A queued copy and its completion. The copy runs exactly once: on its worker thread, or
    on the thread that waits for it before a worker has started it (a thread wakeup costs far
    more than a small copy). Running it early is safe because the pool waits for every copy
    that touches the same bytes before it issues a conflicting one."""

    __slots__ = ("_done", "error", "_fn", "_claim")

    def __init__(self, fn: Any) -> None:
        self._done = threading.Event()
        self.error: BaseException | None = None
        self._fn = fn
        self._claim = threading.Lock()

    def run(self) -> None:
        """Run the copy unless another thread has claimed it already."""
        if not self._claim.acquire(blocking=False):
            return
        fn, self._fn = self._fn, None
        try:
            fn()
        except BaseException as e:  # reported to whoever waits on the event
            self.error = e
        self._done.set()

    def wait(self, run: bool = True) -> None:
        if not self._done.is_set():
            if run:
                self.run()
            self._done.wait()
        if self.error is not None:
            raise BackendError(f"asynchronous copy failed: {self.error!r}") from self.error

    def is_set(self) -> bool:
        return self._done.is_set()

    def join(self) -> None:
        self._done.wait()


def _stop_workers(queues: list[queue.SimpleQueue[Any]]) -> None:
    for q in queues:
        q.put(None)


class NumpyBackend:
    """Device and host memory are NumPy buffers; copies run on worker threads (one per
    direction, like two copy engines) and complete through events. The CPU stand-in for a GPU
    used by tests and CI.

    Invariant: ``_host`` is touched only under ``_host_lock``; a host buffer is resized only
    when no copy into or out of it is queued (the pool waits on events first).
    """

    def __init__(self, *, threads: bool = True) -> None:
        self.device: np.ndarray = np.zeros(0, np.uint8)
        self._host: dict[int, np.ndarray] = {}
        self._host_lock = threading.Lock()
        self._threads = threads
        self._queues: list[queue.SimpleQueue[Any]] = []
        self._workers: list[threading.Thread] = []

    def attach(self, capacity: int) -> None:
        with self._host_lock:  # (a backend attached anew serves a new pool: not its keys' bytes)
            self._host.clear()
        try:
            self.device = np.zeros(capacity, np.uint8)
        except MemoryError as e:
            raise BackendError(f"NumpyBackend: cannot allocate the pool's arena of {capacity} "
                               "bytes in host memory (the CPU stand-in's device memory is host "
                               "memory): lower the pool's capacity") from e
        if self._threads:
            for name in ("h2d", "d2h"):
                q: queue.SimpleQueue[Any] = queue.SimpleQueue()
                t = threading.Thread(target=self._work, args=(q,), name=f"cachegym-{name}", daemon=True)
                t.start()
                self._queues.append(q)
                self._workers.append(t)
            # a backend (a pool) dropped without close() stops its workers (they hold only
            # their queues): each dropped pool kept two threads alive for good
            weakref.finalize(self, _stop_workers, list(self._queues))

    @staticmethod
    def _work(q: queue.SimpleQueue[Any]) -> None:
        # copies complete in queue order: one claimed by a waiter is waited for, not skipped
        while True:
            ev = q.get()
            if ev is None:
                return
            ev.run()
            ev.join()

    def _submit(self, direction: int, fn: Any) -> _Event:
        ev = _Event(fn)
        if self._threads and self._queues:
            self._queues[direction].put(ev)
        else:
            ev.run()
        return ev

    def _host_buf(self, key: int, nbytes: int) -> np.ndarray:
        with self._host_lock:
            buf = self._host.get(key)
            if buf is None or buf.nbytes != nbytes:
                new = np.zeros(nbytes, np.uint8)
                if buf is not None:
                    n = min(nbytes, buf.nbytes)
                    new[:n] = buf[:n]
                self._host[key] = buf = new
            return buf

    def device_buffer(self, offset: int, nbytes: int) -> np.ndarray:
        return self.device[offset:offset + nbytes]

    def write(self, offset: int, data: np.ndarray) -> None:
        self.device[offset:offset + data.nbytes] = data

    def copy_h2d(self, key: int, offset: int, nbytes: int) -> _Event:
        src = self._host_buf(key, nbytes)
        dst = self.device[offset:offset + nbytes]
        return self._submit(0, lambda: np.copyto(dst, src))

    def copy_d2h(self, key: int, offset: int, nbytes: int) -> _Event:
        dst = self._host_buf(key, nbytes)
        src = self.device[offset:offset + nbytes]
        return self._submit(1, lambda: np.copyto(dst, src))

    def stream_in(self, key: int, nbytes: int) -> np.ndarray:
        return self._host_buf(key, nbytes).copy()

    def stream_out(self, key: int, data: np.ndarray) -> None:
        np.copyto(self._host_buf(key, data.nbytes), data)

    def wait(self, event: _Event) -> None:
        event.wait()

    def free_host(self, key: int) -> None:
        with self._host_lock:
            self._host.pop(key, None)

    def host_buffer(self, key: int) -> np.ndarray | None:
        with self._host_lock:
            return self._host.get(key)

    def synchronize(self) -> None:
        """Wait until every queued copy has completed (a marker at the end of each queue)."""
        for d in range(len(self._queues)):
            self._submit(d, lambda: None).wait(run=False)

    def close(self) -> None:
        self.synchronize()
        for q in self._queues:
            q.put(None)
        for t in self._workers:
            t.join(timeout=5)
        self._queues, self._workers = [], []
