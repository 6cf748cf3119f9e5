"""The pool's real memory on a CUDA GPU, through CuPy; the only module that imports ``cupy``.

:class:`CupyBackend` implements :class:`allocator.backends.Backend`: the device arena is one
``cudaMalloc`` (``cupy.cuda.Memory``, outside every CuPy allocator), host buffers are pinned
(``cupy.cuda.alloc_pinned_memory``, CuPy's pinned pool), copies run on two dedicated
non-blocking streams (one per direction, as the two copy engines) and complete through CUDA
events.

Stream order is the synchronisation, as in CuPy's and PyTorch's pools. The *compute stream* is
CuPy's current stream (or the stream given to :meth:`CupyBackend.use_compute_stream`, e.g.
PyTorch's):

* every copy first waits for the work already queued on the compute stream (a block written or
  read by kernels is copied, or overwritten, only after them);
* :meth:`CupyBackend.wait` makes the compute stream wait for a copy, without blocking the host:
  everything queued after it (kernels reading a landed block, writes into a block a copy was
  reading) runs after the copy. That is the pool's contract ("wait before reading the
  destination or reusing the source block") for everything that runs on the device;
* host memory is read or released only after a host-side wait on the events of the copies
  that use it (:meth:`host_buffer`, :meth:`free_host`, :meth:`synchronize`).

:class:`PoolAllocator` serves CuPy arrays from a pool's arena (``cupy.cuda.set_allocator``),
so that the pool's budget covers them too. :func:`calibrate` measures a backend's copy latency,
bandwidth and engine overlap and returns a calibrated :class:`~allocator.cost.Preset`;
:func:`parity_run` drives a pool with real bytes (to compare a backend with ``NumpyBackend``).

CUDA errors surface as :class:`~allocator.errors.BackendError`.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import numpy as np

from cachegym.allocator.cost import Preset
from cachegym.allocator.errors import BackendError, ConfigError, ObjectTooLarge, PoolExhausted
from cachegym.allocator.seams import DEVICE

if TYPE_CHECKING:
    from cachegym.allocator.backends import Backend
    from cachegym.allocator.pool import Pool

__all__ = ["CupyBackend", "PoolAllocator", "cuda_available", "calibrate", "parity_run"]

log = logging.getLogger(__name__)

_H2D, _D2H = 1, 2  # cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost
_cupy_mod: Any = None


def _cupy() -> Any:
    """``cupy``, imported at first use."""
    global _cupy_mod
    if _cupy_mod is None:
        try:
            import cupy
        except ImportError as e:
            raise BackendError(
                "CupyBackend needs CuPy: install the wheel matching your CUDA driver "
                "(pip install cupy-cuda12x, or cupy-cuda13x; or the extra cachegym[gpu])"
            ) from e
        _cupy_mod = cupy
    return _cupy_mod


def cuda_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    try:
        return bool(_cupy().cuda.runtime.getDeviceCount() > 0)
    except Exception:  # no cupy, no driver, no device
        return False


def _device_array(data: Any) -> Any:
    """``data`` (a CuPy array, or any object with ``__cuda_array_interface__``: a torch CUDA
    tensor) as a C-contiguous CuPy array; zero-copy where it already is one.
    ``cupy.ascontiguousarray`` takes CuPy arrays only (a tensor: ``TypeError``, which autograd's
    operators report as ``unsupported operand type(s) for @``), hence ``asarray`` first."""
    cp = _cupy()
    if type(data).__module__.split(".", 1)[0] == "torch":  # (bytes: a tensor that requires grad
        import torch  # refuses __cuda_array_interface__, a bfloat16 one exports no dtype CuPy takes)

        data = data.detach().reshape(-1).view(torch.uint8)
    try:
        return cp.ascontiguousarray(cp.asarray(data))
    except (TypeError, ValueError, RuntimeError) as e:
        raise BackendError(f"CupyBackend: cannot read {type(data).__name__} as device bytes "
                           f"({type(e).__name__}: {e}); give a CuPy array or a CUDA tensor") from e


def _on_device(data: Any) -> bool:
    """Whether ``data`` is device memory (``__cuda_array_interface__``: a CuPy array, a torch
    CUDA tensor; a tensor that requires grad raises on reading it: device too)."""
    try:
        return hasattr(data, "__cuda_array_interface__")
    except RuntimeError:
        return True


def _cuda_error_types() -> tuple[type[BaseException], ...]:
    cp = _cupy()
    return (cp.cuda.runtime.CUDARuntimeError, cp.cuda.driver.CUDADriverError,
            cp.cuda.memory.OutOfMemoryError)


@contextmanager
def _cuda(what: str, hint: str = "") -> Iterator[None]:
    """Turns CUDA errors raised inside into :class:`BackendError` naming the operation."""
    try:
        yield
    except BackendError:
        raise
    except _cuda_error_types() as e:
        raise BackendError(f"CupyBackend: {what} failed with a CUDA error: {e}"
                           + (f"; {hint}" if hint else "")) from e


class CupyBackend:
    """Device arena, pinned host buffers and copy streams on CUDA device ``device``.

    Args:
        device: CUDA device ordinal.
        stall_timing: time, with CUDA events, how long the compute stream waits for each copy
            (:meth:`stall_ns`); costs two timed events per copy.

    A copy that fails on the device is not reported by :meth:`wait` (which only orders the
    compute stream after it; NumpyBackend's wait reports its copy's failure): CUDA reports such errors
    later and for the whole context, at the next synchronisation (:meth:`synchronize`,
    :meth:`close`, a host read), as a :class:`BackendError` naming that operation, not the
    object; the pool's recovery of a failed fetch or write-back (which NumpyBackend's failures
    exercise) does not apply there.

    Invariants: ``_last_h2d[k]``/``_last_d2h[k]`` are the events of the latest copy out of /
    into host buffer ``k`` (copies on one stream complete in order); a host buffer is
    released or resized only after a host-side wait on both. ``_graveyard`` holds released
    host buffers until the copies that use them are done.
    """

    device_type = "cuda"

    def __init__(self, device: int = 0, *, stall_timing: bool = False) -> None:
        if not isinstance(device, int) or device < 0:
            raise ConfigError(f"device must be a CUDA device ordinal >= 0, got {device!r}")
        self.device_id = device
        self.stall_timing = stall_timing
        self.capacity = 0
        self._mem: Any = None
        self._arena: Any = None
        self._ptr = 0
        self._streams: list[Any] = []
        self._fences: list[Any] = []
        self._compute_ptr: int | None = None
        self._host: dict[int, np.ndarray] = {}
        self._last_h2d: dict[int, Any] = {}
        self._last_d2h: dict[int, Any] = {}
        self._graveyard: collections.deque[tuple[np.ndarray, list[Any]]] = collections.deque()
        self._stalls: list[tuple[Any, Any]] = []
        self.stall_ns_total = 0
        self.stall_unmeasured = 0
        self.host_wait_ns = 0
        self.copies = [0, 0]

    # ------------------------------------------------------------------ setup
    def attach(self, capacity: int) -> None:
        cp = _cupy()
        if self._mem is not None:
            raise BackendError("CupyBackend.attach: this backend already serves a pool; "
                               "give each pool its own backend")
        if not cuda_available():
            raise BackendError("CupyBackend: no CUDA device is visible (cupy finds none); "
                               "run on a machine with a GPU or use NumpyBackend")
        with _cuda(f"selecting device {self.device_id}",
                   "check the device ordinal against cupy.cuda.runtime.getDeviceCount()"):
            self._device = cp.cuda.Device(self.device_id)
            with self._device:  # (checks the ordinal; ``use()`` would change the caller's
                pass  # current device: every call below enters this device and leaves it)
        with self._device:
            try:
                self._mem = cp.cuda.Memory(int(capacity))
            except (cp.cuda.memory.OutOfMemoryError, cp.cuda.runtime.CUDARuntimeError) as e:
                free, total = cp.cuda.runtime.memGetInfo()
                raise BackendError(
                    f"CupyBackend: cannot allocate the device arena of {capacity} bytes on "
                    f"cuda:{self.device_id} ({free} of {total} bytes free); lower the pool's "
                    "capacity or free device memory") from e
            with _cuda("creating the copy streams"):
                self._arena = cp.ndarray((int(capacity),), cp.uint8,
                                         cp.cuda.MemoryPointer(self._mem, 0))
                self._ptr = int(self._mem.ptr)
                self._streams = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]
                self._fences = [cp.cuda.Event(disable_timing=True) for _ in range(2)]
        self.capacity = int(capacity)

    @property
    def arena_ptr(self) -> int:
        """Device address of offset 0 of the arena."""
        self._need_arena("arena_ptr")
        return self._ptr

    def use_compute_stream(self, stream_ptr: int | None) -> None:
        """Order copies against the stream at ``stream_ptr`` (a ``cudaStream_t`` address, e.g.
        ``torch.cuda.current_stream().cuda_stream``); ``None``: CuPy's current stream."""
        self._compute_ptr = None if stream_ptr is None else int(stream_ptr)

    def _compute(self) -> int:
        if self._compute_ptr is not None:
            return self._compute_ptr
        return int(_cupy().cuda.get_current_stream().ptr)

    def _need_arena(self, op: str) -> None:
        if self._mem is None:
            raise BackendError(f"CupyBackend.{op}: the backend has no arena; it is attached "
                               "by Pool(..., backend=CupyBackend()) (or was closed)")

    # ------------------------------------------------------------------ the protocol
    def device_buffer(self, offset: int, nbytes: int) -> Any:
        self._need_arena("device_buffer")
        return self._arena[offset:offset + nbytes]

    def device_bytes(self, data: Any) -> Any:
        """``data`` (a CuPy array or a CUDA tensor, any dtype) as its bytes: a contiguous 1-D
        ``uint8`` CuPy array on this backend's device (what :meth:`Pool.put` stores; zero-copy
        where it already is contiguous); ``None`` for host data (the pool stores it as NumPy
        bytes)."""
        if not _on_device(data):
            return None
        self._need_arena("put")
        with self._device, _cuda("reading device bytes"):
            arr = _device_array(data)
            return arr.reshape(-1).view(_cupy().uint8)

    def write(self, offset: int, data: Any) -> None:
        """Copy ``data`` into the device at ``offset``, synchronously: a host array, or a device
        array (``__cuda_array_interface__``), on the compute stream."""
        self._need_arena("write")
        rt = _cupy().cuda.runtime
        nbytes = int(data.nbytes)
        if offset < 0 or offset + nbytes > self.capacity:
            raise BackendError(f"CupyBackend.write: bytes [{offset}, {offset + nbytes}) are "
                               f"outside the arena of {self.capacity} bytes")
        with self._device, _cuda("write"):
            stream = self._compute()
            if _on_device(data):  # a CuPy array or a torch tensor
                src = _device_array(data)
                rt.memcpyAsync(self._ptr + offset, src.data.ptr, nbytes, 3, stream)
                rt.streamSynchronize(stream)  # (the protocol's write is synchronous; src, a
                # temporary where data was not contiguous, lives until the copy is done)
            else:
                host = np.ascontiguousarray(data)
                rt.memcpyAsync(self._ptr + offset, host.ctypes.data, nbytes, _H2D, stream)
                rt.streamSynchronize(stream)

    def copy_h2d(self, key: int, offset: int, nbytes: int) -> Any:
        self._need_arena("copy_h2d")
        host = self._host_buf(key, nbytes, zero=True)
        pending = self._last_d2h.get(key)
        ev = self._copy(0, self._ptr + offset, host.ctypes.data, nbytes, _H2D, pending)
        self._last_h2d[key] = ev
        return ev

    def copy_d2h(self, key: int, offset: int, nbytes: int) -> Any:
        self._need_arena("copy_d2h")
        host = self._host_buf(key, nbytes, zero=False)
        pending = self._last_h2d.get(key)  # an h2d still reading the host buffer
        ev = self._copy(1, host.ctypes.data, self._ptr + offset, nbytes, _D2H, pending)
        self._last_d2h[key] = ev
        return ev

    def _copy(self, direction: int, dst: int, src: int, nbytes: int, kind: int,
              after: Any) -> Any:
        cp = _cupy()
        rt = cp.cuda.runtime
        stream, fence = self._streams[direction], self._fences[direction]
        with self._device, _cuda("h2d copy" if direction == 0 else "d2h copy"):
            rt.eventRecord(fence.ptr, self._compute())
            rt.streamWaitEvent(stream.ptr, fence.ptr, 0)
            if after is not None:
                rt.streamWaitEvent(stream.ptr, after.ptr, 0)
            rt.memcpyAsync(dst, src, nbytes, kind, stream.ptr)
            ev = cp.cuda.Event(disable_timing=not self.stall_timing)
            rt.eventRecord(ev.ptr, stream.ptr)
        self.copies[direction] += 1
        self._bury()
        return ev

    def stream_in(self, key: int, nbytes: int) -> Any:
        """Host buffer ``key`` copied into a new device array (outside the arena), in order
        on the compute stream after any copy still writing that buffer."""
        self._need_arena("stream_in")
        host = self._host_buf(key, nbytes, zero=True)
        self._host_wait([self._last_d2h.get(key)])
        cp = _cupy()
        with self._device, _cuda("streaming an object to the device"):
            out = cp.empty(nbytes, cp.uint8)
            cp.cuda.runtime.memcpyAsync(out.data.ptr, host.ctypes.data, nbytes, _H2D,
                                        self._compute())
            cp.cuda.runtime.streamSynchronize(self._compute())
        return out

    def stream_out(self, key: int, data: Any) -> None:
        """``data`` (host or device bytes) stored as host buffer ``key``, after any copy still
        reading or writing that buffer."""
        self._need_arena("stream_out")
        nbytes = int(data.nbytes)
        host = self._host_buf(key, nbytes, zero=False)
        self._host_wait([self._last_h2d.get(key), self._last_d2h.get(key)])
        with self._device, _cuda("streaming an object to host memory"):
            if _on_device(data):  # a CuPy array or a torch tensor
                src = _device_array(data)
                rt = _cupy().cuda.runtime
                rt.memcpyAsync(host.ctypes.data, src.data.ptr, nbytes, _D2H, self._compute())
                rt.streamSynchronize(self._compute())
            else:
                np.copyto(host, np.ascontiguousarray(data).reshape(-1).view(np.uint8))

    def wait(self, event: Any) -> None:
        """The compute stream waits for ``event`` (stream-ordered; the host does not block)."""
        cp = _cupy()
        rt = cp.cuda.runtime
        with self._device, _cuda("waiting for a copy"):
            compute = self._compute()
            if self.stall_timing:
                reached = cp.cuda.Event()
                rt.eventRecord(reached.ptr, compute)
                self._stalls.append((reached, event))
                if len(self._stalls) > 4096:
                    self._settle_stalls(block=False)
            rt.streamWaitEvent(compute, event.ptr, 0)

    def host_buffer(self, key: int) -> np.ndarray | None:
        buf = self._host.get(key)
        if buf is not None:
            self._host_wait([self._last_d2h.get(key)])
        return buf

    def free_host(self, key: int) -> None:
        buf = self._host.pop(key, None)
        evs = [self._last_h2d.pop(key, None), self._last_d2h.pop(key, None)]
        if buf is not None:
            self._graveyard.append((buf, [e for e in evs if e is not None]))
            self._bury()

    def synchronize(self) -> None:
        """Block the host until every copy and the compute stream's queued work are done."""
        if self._mem is None:
            return
        rt = _cupy().cuda.runtime
        t0 = time.perf_counter_ns()
        with self._device, _cuda("synchronize"):
            for s in self._streams:
                s.synchronize()
            rt.streamSynchronize(self._compute())
        self.host_wait_ns += time.perf_counter_ns() - t0
        self._bury()

    def close(self) -> None:
        if self._mem is None:
            return
        try:
            self.synchronize()
            if self._stalls:  # (stall_ns() after close counts them)
                self._settle_stalls(block=True)
        finally:
            self._graveyard.clear()
            self._host.clear()
            self._last_h2d.clear()
            self._last_d2h.clear()
            self._stalls.clear()
            self._arena = None
            self._mem = None
            self._streams, self._fences = [], []

    # ------------------------------------------------------------------ measurements
    def stall_ns(self) -> int:
        """Device time the compute stream spent waiting for copies so far (needs
        ``stall_timing=True``; synchronises the copies it reads)."""
        self._settle_stalls(block=True)
        return self.stall_ns_total

    def _settle_stalls(self, block: bool) -> None:
        cp = _cupy()
        keep = []
        with self._device, _cuda("reading stall timers"):
            for reached, ev in self._stalls:
                if not block and not (reached.done and ev.done):
                    keep.append((reached, ev))
                    continue
                ev.synchronize()
                reached.synchronize()
                try:
                    ms = cp.cuda.get_elapsed_time(reached, ev)
                except _cuda_error_types():  # e.g. an event without timing: not measured
                    self.stall_unmeasured += 1
                    continue
                if ms > 0:
                    self.stall_ns_total += int(ms * 1e6)
        self._stalls = keep

    # ------------------------------------------------------------------ host buffers
    def _host_buf(self, key: int, nbytes: int, *, zero: bool) -> np.ndarray:
        buf = self._host.get(key)
        if buf is not None and buf.nbytes == nbytes:
            return buf
        cp = _cupy()
        with self._device, _cuda(f"allocating {nbytes} bytes of pinned host memory",
                                 "pinned memory is limited by the host's RAM; lower the "
                                 "working set"):
            mem = cp.cuda.alloc_pinned_memory(max(nbytes, 1))
            new = np.ndarray((nbytes,), np.uint8, buffer=mem)  # as cupyx.empty_pinned
        if buf is not None:  # resized object: keep the bytes both sizes share
            self._host_wait([self._last_h2d.get(key), self._last_d2h.get(key)])
            n = min(nbytes, buf.nbytes)
            new[:n] = buf[:n]
            if zero:
                new[n:] = 0
        elif zero:
            new[:] = 0
        self._host[key] = new
        return new

    def _host_wait(self, events: list[Any]) -> None:
        t0 = time.perf_counter_ns()
        with _cuda("waiting for a copy on the host"):
            for ev in events:
                if ev is not None:
                    ev.synchronize()
        self.host_wait_ns += time.perf_counter_ns() - t0

    def _bury(self) -> None:
        """Release host buffers whose copies have completed (never blocks)."""
        g = self._graveyard
        while g and all(ev.done for ev in g[0][1]):
            g.popleft()

    def __repr__(self) -> str:
        return f"CupyBackend(device={self.device_id}, capacity={self.capacity})"


class _Lease:
    """Owner of one CuPy allocation served by :class:`PoolAllocator`; its release (CuPy drops
    the last pointer to the memory) queues the pool object for freeing."""

    __slots__ = ("key", "released", "arena")

    def __init__(self, key: int, released: collections.deque[int], arena: Any) -> None:
        # arena: the backend's device memory, kept alive while CuPy holds this allocation (the
        # pool's close() drops the backend's reference; freeing it under a live array would
        # leave that array pointing into freed device memory)
        self.key, self.released, self.arena = key, released, arena

    def __del__(self) -> None:
        self.released.append(self.key)


class PoolAllocator:
    """A CuPy allocator (``cupy.cuda.set_allocator(PoolAllocator(pool).malloc)``) serving
    arrays from ``pool``'s arena, so that the pool's budget covers them.

    Each allocation is a pool object (keys ``-1, -2, ...``), pinned while CuPy holds it: the
    pool evicts other objects to make room, never these. Released allocations are freed at the
    next :meth:`malloc` or :meth:`collect` (the release may run on any thread, inside any code,
    so it only queues the key). A request that cannot be served raises CuPy's
    ``OutOfMemoryError``, as CuPy's own pool does.
    """

    def __init__(self, pool: Pool) -> None:
        if not isinstance(pool.backend, CupyBackend):
            raise BackendError("PoolAllocator serves CuPy arrays from a pool's device arena: "
                               "build the pool with backend=CupyBackend()")
        self.pool = pool
        self.backend: CupyBackend = pool.backend
        self._next = -1
        self._released: collections.deque[int] = collections.deque()
        self.live = 0

    def malloc(self, size: int) -> Any:
        cp = _cupy()
        self.collect()
        key = self._next
        self._next -= 1
        nbytes = max(int(size), 1)
        pool = self.pool
        with pool._lock:  # access, pin and the offset read form one step
            try:
                pool.access(key, nbytes, write=True)
            except (ObjectTooLarge, PoolExhausted) as e:
                raise cp.cuda.memory.OutOfMemoryError(int(size), pool.view.used,
                                                      pool.capacity) from e
            if pool.view.info(key).state != DEVICE:  # (not admitted: streamed, in host memory)
                pool.free(key)
                raise cp.cuda.memory.OutOfMemoryError(int(size), pool.view.used, pool.capacity)
            pool.pin(key)
            offset = pool.view.info(key).offset
        self.live += 1
        mem = cp.cuda.UnownedMemory(self.backend.arena_ptr + offset, nbytes,
                                    _Lease(key, self._released, self.backend._mem),
                                    self.backend.device_id)
        return cp.cuda.MemoryPointer(mem, 0)

    def collect(self) -> int:
        """Free the pool objects of released allocations; returns how many."""
        n = 0
        while self._released:
            key = self._released.popleft()
            self.pool.unpin(key)
            self.pool.free(key)
            self.live -= 1
            n += 1
        return n

    @contextmanager
    def use(self) -> Iterator[PoolAllocator]:
        """Serve this thread's CuPy allocations from the pool inside the block."""
        with _cupy().cuda.using_allocator(self.malloc):
            yield self
        self.collect()


# ---------------------------------------------------------------------- calibration
def _timed(backend: Backend, fn: Callable[[], Any], repeats: int) -> float:
    """Median host time in ns of ``fn()`` followed by ``backend.synchronize()``."""
    times = []
    for _ in range(repeats):
        backend.synchronize()
        t0 = time.perf_counter_ns()
        fn()
        backend.synchronize()
        times.append(time.perf_counter_ns() - t0)
    return float(np.median(times))


def calibrate(make_backend: Callable[[], Backend], *, name: str = "calibrated",
              small: int = 4096, medium: int = 4 << 20, large: int = 256 << 20,
              repeats: int = 7, device_bytes: int | None = None,
              label: str = "") -> tuple[Preset, dict[str, Any]]:
    """Measure a backend's copies and return a calibrated preset and the raw figures.

    Per direction: the median time of ``medium`` and ``large`` pinned copies gives the
    bandwidth (their difference in bytes over their difference in time, so fixed costs cancel)
    and the ``small`` copy gives the latency (launch to completion, as the pool sees it). Two
    copy engines are reported when an h2d and a d2h of ``large`` bytes issued together take
    under 75% of the sum of their separate times (they overlap).
    """
    if not small < medium < large:
        raise ConfigError("calibrate: need small < medium < large copy sizes")
    be = make_backend()
    be.attach(2 * large)
    sizes = (small, medium, large)
    try:
        # one host buffer per (direction, size), created before timing: key 10*d + i
        for d in (0, 1):
            for i, n in enumerate(sizes):
                be.copy_d2h(10 * d + i, 0, n)
        be.synchronize()
        res: dict[str, Any] = {"sizes": list(sizes), "repeats": repeats}
        t: dict[tuple[int, int], float] = {}
        for d, copy in ((0, be.copy_h2d), (1, be.copy_d2h)):
            for i, n in enumerate(sizes):
                def one(c: Callable[..., Any] = copy, k: int = 10 * d + i, n: int = n) -> Any:
                    return c(k, 0, n)
                _timed(be, one, 1)  # warm up
                t[d, n] = _timed(be, one, repeats)
        gbps, lat = [], []
        for d in (0, 1):
            dt = max(t[d, large] - t[d, medium], 1.0)
            bw = (large - medium) / dt  # bytes/ns = GB/s
            gbps.append(bw)
            lat.append(max(int(t[d, small] - small / bw), 0))
        both = _timed(be, lambda: (be.copy_h2d(2, 0, large), be.copy_d2h(12, large, large)),
                      repeats)
        sep = t[0, large] + t[1, large]
        engines = 2 if both < 0.75 * sep else 1
        res.update({
            "h2d_ns": {str(n): t[0, n] for n in (small, medium, large)},
            "d2h_ns": {str(n): t[1, n] for n in (small, medium, large)},
            "h2d_gbps": gbps[0], "d2h_gbps": gbps[1],
            "h2d_latency_ns": lat[0], "d2h_latency_ns": lat[1],
            "both_directions_ns": both, "separate_sum_ns": sep, "overlap_ratio": both / sep,
            "copy_engines": engines,
        })
    finally:
        be.close()
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    preset = Preset(
        name=name, h2d_gbps=round(gbps[0], 3), d2h_gbps=round(gbps[1], 3),
        h2d_latency_ns=lat[0], d2h_latency_ns=lat[1], copy_engines=engines,
        device_bytes=int(device_bytes if device_bytes is not None else 0) or 2 * large,
        source=(f"measured by cachegym.allocator.cupy_backend.calibrate on {label or type(be).__name__}, "
                f"{stamp}: median of {repeats} pinned copies per size ({small}, {medium}, "
                f"{large} bytes); overlap ratio {both / sep:.2f}"),
        calibrated=True,
    )
    return preset, res


def device_info(device: int = 0) -> dict[str, Any]:
    """Name and memory of CUDA device ``device`` (for presets and reports)."""
    cp = _cupy()
    with _cuda("reading device properties"):
        props = cp.cuda.runtime.getDeviceProperties(device)
        with cp.cuda.Device(device):
            free, total = cp.cuda.runtime.memGetInfo()
    name = props["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    return {"name": name, "total_bytes": int(total), "free_bytes": int(free),
            "cc": f"{props['major']}.{props['minor']}"}


# ---------------------------------------------------------------------- parity
def _to_numpy(a: Any) -> np.ndarray:
    return a if isinstance(a, np.ndarray) else np.asarray(a.get())


def parity_run(backend: Backend, *, seed: int = 0, n_events: int = 600, n_keys: int = 24,
               capacity: int = 96 << 10, max_size: int = 16 << 10,
               cost: str | Preset | None = "h100_pcie5") -> dict[str, Any]:
    """Drive a pool with real bytes over a seeded random sequence of writes (``put``), reads
    (``get``, checked against what was written), prefetches, compute and frees.

    Returns the pool's event log (every decision), the number of reads that returned other
    bytes than were written (``mismatches``, must be 0), a digest of every live object's bytes
    after a flush, and the final statistics. Two backends agree when the logs, digests and
    statistics are equal.
    """
    import hashlib

    from cachegym.allocator.pool import Pool

    rng = np.random.default_rng(seed)
    events: list[dict[str, Any]] = []

    def hook(event: dict[str, Any]) -> None:
        events.append(event)

    pool = Pool(capacity, cost=cost, backend=backend, hook=hook)  # the default policy: LRU
    truth: dict[int, np.ndarray] = {}
    mismatches = 0
    try:
        for _ in range(n_events):
            k = int(rng.integers(n_keys))
            r = rng.random()
            if k not in truth or r < 0.3:
                size = int(rng.integers(1, max_size)) if k not in truth else truth[k].nbytes
                data = rng.integers(0, 256, size, dtype=np.uint8)
                pool.put(k, data)
                truth[k] = data
            elif r < 0.75:
                if not np.array_equal(_to_numpy(pool.get(k)), truth[k]):
                    mismatches += 1
            elif r < 0.9:
                with contextlib.suppress(PoolExhausted):  # (no room beside copies in flight)
                    pool.prefetch(k)
            elif r < 0.95:
                pool.free(k)
                del truth[k]
            else:
                pool.cost.compute(int(rng.integers(0, 4000)))
        pool.flush()
        h = hashlib.sha256()
        for k in sorted(truth):
            got = _to_numpy(pool.get(k))
            if not np.array_equal(got, truth[k]):
                mismatches += 1
            h.update(got.tobytes())
        stats = pool.snapshot().as_dict()
    finally:
        pool.close()
    return {"events": events, "mismatches": mismatches, "digest": h.hexdigest(),
            "stats": stats}
