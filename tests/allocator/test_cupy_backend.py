"""CupyBackend, the CuPy allocator adaptor, calibration and scripts/gpu_check.py.

Tests marked ``gpu`` need a CUDA GPU and cupy (tests/conftest.py skips them elsewhere); the
rest exercise, on the CPU, everything up to the GPU: the parity harness, the calibration
routine (on NumpyBackend), gpu_check's dry run and its refusal without a GPU.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from cachegym.allocator.backends import NumpyBackend
from cachegym.allocator.cost import Preset, load_preset
from cachegym.allocator.cupy_backend import CupyBackend, calibrate, cuda_available, parity_run
from cachegym.allocator.errors import BackendError, ConfigError
from cachegym.allocator.pool import Pool
from tests.scripts_loader import load_script

# the conftest hook skips ``gpu`` tests without a device; this skipif holds without it too
needs_gpu = pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU and cupy")


def _load_gpu_check() -> Any:
    return load_script("gpu_check")


def _same_run(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["mismatches"] == 0 and b["mismatches"] == 0
    assert a["events"] == b["events"]  # every decision, in order
    assert a["stats"] == b["stats"]
    assert a["digest"] == b["digest"]


# ---------------------------------------------------------------------- on the CPU
@pytest.mark.parametrize("seed", [0, 1])
def test_parity_run_agrees_between_numpy_backends(seed: int) -> None:
    a = parity_run(NumpyBackend(), seed=seed)
    b = parity_run(NumpyBackend(threads=False), seed=seed)
    _same_run(a, b)
    st = a["stats"]
    assert st["evictions"] > 0 and st["writebacks"] > 0 and st["prefetches"] > 0
    assert st["frees"] > 0 and st["late_prefetches"] > 0


@pytest.mark.parametrize("seed", range(6))
def test_parity_run_in_a_small_pool_skips_a_prefetch_it_has_no_room_for(seed: int) -> None:
    """At 32 KiB the pool's room is often all held by prefetches in flight: a prefetch there
    raises PoolExhausted (it waits for no other), which the run skips as a hint."""
    a = parity_run(NumpyBackend(), seed=seed, capacity=32 << 10)
    assert a["mismatches"] == 0
    _same_run(a, parity_run(NumpyBackend(threads=False), seed=seed, capacity=32 << 10))


def test_calibrate_numpy_backend_writes_a_calibrated_preset(tmp_path: Any) -> None:
    from cachegym.allocator.cost import save_preset

    preset, raw = calibrate(NumpyBackend, name="cpu", small=4096, medium=64 << 10,
                            large=1 << 20, repeats=3)
    assert preset.calibrated and preset.name == "cpu"
    assert preset.h2d_gbps > 0 and preset.d2h_gbps > 0
    assert preset.copy_engines in (1, 2)
    assert raw["copy_engines"] == preset.copy_engines
    assert raw["overlap_ratio"] > 0
    path = str(tmp_path / "p.json")
    save_preset(preset, path)
    assert load_preset(path) == preset
    with pytest.raises(ConfigError):
        calibrate(NumpyBackend, small=4096, medium=4096, large=1 << 20)


@pytest.mark.skipif(cuda_available(), reason="checks the refusal on a machine without a GPU")
def test_cupy_backend_without_a_gpu_is_a_clear_error() -> None:
    with pytest.raises(BackendError, match=r"no CUDA device|needs CuPy"):
        Pool(1 << 20, backend=CupyBackend())
    with pytest.raises(ConfigError):
        CupyBackend(device=-1)


@pytest.mark.skipif(cuda_available(), reason="checks the refusal on a machine without a GPU")
def test_gpu_check_without_a_gpu_says_so_and_exits_nonzero(tmp_path: Any, capsys: Any) -> None:
    rc = _load_gpu_check().main(["--out", str(tmp_path)])
    assert rc == 2
    err = capsys.readouterr().err
    assert "no CUDA GPU" in err and "--cpu-dry-run" in err


def test_gpu_check_cpu_dry_run(tmp_path: Any) -> None:
    pytest.importorskip("torch")
    rc = _load_gpu_check().main(["--out", str(tmp_path), "--cpu-dry-run", "--steps", "2",
                                 "--warmup", "1", "--calib-bytes", str(1 << 20),
                                 "--offload-steps", "2", "--offload-pairs", "2"])
    with open(tmp_path / "gpu_check.json") as f:
        rep = json.load(f)
    assert rc == 0, rep["failures"]
    assert rep["ok"] and rep["environment"]["mode"] == "cpu-dry-run"
    par = rep["backend"]["parity_with_numpy"]
    assert par["decisions_equal"] and par["data_equal"] and par["stats_equal"]
    preset = load_preset(str(tmp_path / "preset.json"))
    assert isinstance(preset, Preset) and preset.calibrated
    tr = rep["training"]
    assert tr["budget_bytes"] == tr["activation_bytes"] // 2
    for run in ("lru", "best"):
        assert tr[run]["evictions"] > 0 and tr[run]["prefetches"] > 0
        assert tr[run]["losses_equal_to_no_offload"]
        assert tr[run]["bytes_d2h_per_step"] > 0
    assert tr["best_policy"]["best"]
    modes = rep["offload_modes"]
    assert [r["mode"] for r in modes["modes"]][:3] == ["none", "save_on_cpu", "reload"]
    assert modes["device"] == "cpu" and modes["preset"].endswith("preset.json")
    assert "lru+reverse-pack@50%" in modes["issue25_target_at_50"]


# ---------------------------------------------------------------------- imitated CuPy
def _fake_cupy() -> Any:
    """A synchronous CPU imitation of the few CuPy calls CupyBackend makes (copies run at
    once with ``ctypes.memmove``; streams and events are inert). It checks the backend's
    bookkeeping (host buffers, keys, offsets, allocator leases), not CUDA's ordering: that is
    what the ``gpu`` tests are for."""
    import contextlib
    import ctypes
    import itertools
    import types

    ids = itertools.count(1000)
    current = [0]  # the calling thread's current device, as cudaSetDevice leaves it
    copied_on: list[int] = []  # the current device at each copy

    class Err(RuntimeError):
        pass

    class OutOfMemoryError(MemoryError):
        def __init__(self, size: int, total: int, limit: int = 0) -> None:
            super().__init__(f"out of memory allocating {size} bytes")

    class ndarray:  # noqa: N801 - CuPy's name
        def __init__(self, shape: Any = None, dtype: Any = np.uint8, memptr: Any = None,
                     _a: Any = None) -> None:
            if _a is None:
                n = int(np.prod(shape))
                _a = np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(memptr.ptr))
                self._keep = memptr
            self._a = _a

        def __getitem__(self, idx: Any) -> Any:
            r = ndarray(_a=self._a[idx])
            r._keep = self
            return r

        def get(self) -> np.ndarray:
            return self._a.copy()

        @property
        def data(self) -> Any:  # a MemoryPointer's ptr
            return types.SimpleNamespace(ptr=self._a.ctypes.data)

        @property
        def nbytes(self) -> int:
            return int(self._a.nbytes)

        @property
        def __cuda_array_interface__(self) -> dict[str, Any]:
            return {"shape": self._a.shape, "typestr": self._a.dtype.str,
                    "data": (self._a.ctypes.data, False), "version": 3}

        def copy(self) -> Any:
            return ndarray(_a=self._a.copy())

        def reshape(self, *shape: Any) -> Any:
            r = ndarray(_a=self._a.reshape(*shape))
            r._keep = self
            return r

        def view(self, dtype: Any) -> Any:
            r = ndarray(_a=self._a.view(dtype))
            r._keep = self
            return r

    class Runtime:
        CUDARuntimeError = Err
        getDeviceCount = staticmethod(lambda: 1)
        memGetInfo = staticmethod(lambda: (1 << 34, 1 << 35))
        eventRecord = staticmethod(lambda ev, stream: None)
        streamWaitEvent = staticmethod(lambda stream, ev, flags=0: None)
        streamSynchronize = staticmethod(lambda stream: None)

        @staticmethod
        def memcpyAsync(dst: int, src: int, n: int, kind: int, stream: int) -> None:
            assert kind in (1, 2, 3) and isinstance(stream, int)
            copied_on.append(current[0])
            ctypes.memmove(dst, src, n)

    class Memory:
        def __init__(self, size: int) -> None:
            if size > 1 << 40:
                raise Err("cudaErrorMemoryAllocation: out of memory")
            self._a = np.zeros(size, np.uint8)
            self.ptr = self._a.ctypes.data

    class UnownedMemory:
        def __init__(self, ptr: int, size: int, owner: Any, device_id: int = -1) -> None:
            self.ptr, self.size, self.owner = ptr, size, owner

    class MemoryPointer:
        def __init__(self, mem: Any, off: int) -> None:
            self.mem, self.ptr = mem, mem.ptr + off

    class Handle:  # Stream and Event
        def __init__(self, *a: Any, **k: Any) -> None:
            self.ptr, self.done = next(ids), True

        def synchronize(self) -> None:
            pass

    class Device:  # as CuPy's: entering makes it current, leaving restores the previous one
        def __init__(self, i: int = 0) -> None:
            self.id, self._prev = i, []

        def use(self) -> None:
            current[0] = self.id

        def __enter__(self) -> Any:
            self._prev.append(current[0])
            current[0] = self.id
            return self

        def __exit__(self, *a: Any) -> None:
            current[0] = self._prev.pop()

    cuda = types.SimpleNamespace(
        runtime=Runtime, driver=types.SimpleNamespace(CUDADriverError=Err),
        memory=types.SimpleNamespace(OutOfMemoryError=OutOfMemoryError), Device=Device,
        Memory=Memory, UnownedMemory=UnownedMemory, MemoryPointer=MemoryPointer, Stream=Handle,
        Event=Handle, get_current_stream=lambda: types.SimpleNamespace(ptr=0),
        get_elapsed_time=lambda a, b: 0.25, alloc_pinned_memory=bytearray,
        using_allocator=lambda fn: contextlib.nullcontext())
    def asarray(a: Any) -> Any:  # CuPy's: its arrays as they are, others through the interface
        if isinstance(a, ndarray):
            return a
        cai = a.__cuda_array_interface__
        n = int(np.prod(cai["shape"])) * np.dtype(cai["typestr"]).itemsize
        return ndarray((n,), memptr=types.SimpleNamespace(ptr=cai["data"][0]))

    def ascontiguousarray(a: Any) -> Any:  # CuPy's takes cupy.ndarray alone
        if not isinstance(a, ndarray):
            raise TypeError(f"Argument 'a' has incorrect type (expected cupy.ndarray, got "
                            f"{type(a).__name__})")
        return a

    return types.SimpleNamespace(cuda=cuda, ndarray=ndarray, uint8=np.uint8, asarray=asarray,
                                 current_device=current, copied_on=copied_on,
                                 ascontiguousarray=ascontiguousarray,
                                 empty=lambda n, dtype: ndarray(_a=np.empty(n, dtype)))


@pytest.fixture
def fake_cupy(monkeypatch: Any) -> Any:
    import cachegym.allocator.cupy_backend as cb

    fake = _fake_cupy()
    monkeypatch.setattr(cb, "_cupy_mod", fake)
    return fake


@pytest.mark.parametrize("seed", [0, 1])
def test_cupy_backend_bookkeeping_matches_numpy_on_imitated_cupy(fake_cupy: Any,
                                                                   seed: int) -> None:
    _same_run(parity_run(NumpyBackend(), seed=seed),
              parity_run(CupyBackend(stall_timing=True), seed=seed))


def test_cupy_backend_keeps_the_callers_current_device(fake_cupy: Any) -> None:
    """A backend on device 1 copies there, and leaves the caller's current device (0) as it
    was: it used to make its device current for good at attach."""
    be = CupyBackend(device=1)
    be.attach(1 << 12)
    assert fake_cupy.current_device == [0]
    data = np.arange(100, dtype=np.uint8)
    be.write(0, data)
    be.wait(be.copy_d2h(7, 0, 100))
    be.wait(be.copy_h2d(7, 200, 100))
    be.synchronize()
    assert fake_cupy.current_device == [0]
    assert fake_cupy.copied_on and set(fake_cupy.copied_on) == {1}
    be.close()
    assert fake_cupy.current_device == [0]


def test_cupy_backend_lifecycle_on_imitated_cupy(fake_cupy: Any) -> None:
    be = CupyBackend(stall_timing=True)
    with pytest.raises(BackendError, match="no arena"):
        be.device_buffer(0, 1)
    with pytest.raises(BackendError, match="cannot allocate the device arena"):
        be.attach(1 << 41)
    be.attach(1 << 16)
    data = np.arange(1000, dtype=np.uint8)
    be.write(512, data)
    be.wait(be.copy_d2h(3, 512, 1000))
    host = be.host_buffer(3)
    assert host is not None and np.array_equal(host, data)
    be.wait(be.copy_h2d(3, 4096, 1000))
    assert np.array_equal(be.device_buffer(4096, 1000).get(), data)
    be.copy_h2d(9, 0, 100)  # an object never written: zeros, as NumpyBackend
    assert not be.device_buffer(0, 100).get().any()
    assert be.stall_ns() == 2 * 250_000  # two waits, 0.25 ms each by the imitation's clock
    be.free_host(3)
    assert be.host_buffer(3) is None and be.copies == [2, 1]
    with pytest.raises(BackendError, match="outside the arena"):
        be.write((1 << 16) - 10, data)
    be.close()
    be.close()  # idempotent


class _ForeignDeviceArray:
    """Device bytes from another library (a torch CUDA tensor, say): only
    ``__cuda_array_interface__`` and ``nbytes``, here over host memory for the imitation."""

    def __init__(self, a: np.ndarray) -> None:
        self._a = a
        self.nbytes = a.nbytes
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str,
                                         "data": (a.ctypes.data, False), "version": 3}


def test_cupy_backend_takes_device_bytes_of_other_libraries_on_imitated_cupy(
        fake_cupy: Any) -> None:
    """The offload hands CupyBackend torch CUDA tensors (the pack of a tensor the pool did not
    admit, ``stream_out``; ``write``): CuPy's ``ascontiguousarray`` refuses them (TypeError, seen
    on an H200 as ``unsupported operand type(s) for @`` inside autograd), so the backend converts
    them with ``asarray`` first."""
    be = CupyBackend()
    be.attach(1 << 16)
    try:
        data = np.arange(3000, dtype=np.float32)
        be.stream_out(5, _ForeignDeviceArray(data))
        host = be.host_buffer(5)
        assert host is not None and np.array_equal(host.view(np.float32), data)
        back = be.stream_in(5, data.nbytes)
        assert np.array_equal(back.get().view(np.float32), data)
        be.write(1024, _ForeignDeviceArray(data))
        assert np.array_equal(be.device_buffer(1024, data.nbytes).get().view(np.float32), data)
    finally:
        be.close()


def test_pool_allocator_bookkeeping_on_imitated_cupy(fake_cupy: Any) -> None:
    from cachegym.allocator.cupy_backend import PoolAllocator

    pool = Pool(1 << 16, backend=CupyBackend())
    with pytest.raises(BackendError, match="CupyBackend"):
        PoolAllocator(Pool(1 << 16, backend=NumpyBackend()))
    alloc = PoolAllocator(pool)
    pool.put(7, np.ones(40_000, np.uint8))  # evictable
    a = alloc.malloc(30_000)
    base = pool.backend.arena_ptr
    assert base <= a.ptr < base + (1 << 16) and alloc.live == 1
    assert pool.stats.evictions == 1  # object 7 made room
    with pytest.raises(fake_cupy.cuda.memory.OutOfMemoryError):
        alloc.malloc(40_000)  # the allocation pins its block: no room
    del a
    assert alloc.collect() == 1 and alloc.live == 0
    assert [k for k in pool.resident_keys() if k < 0] == []
    assert np.array_equal(pool.get(7).get(), np.ones(40_000, np.uint8))
    pool.close()


def test_pool_allocator_keeps_the_arena_and_refuses_what_the_pool_streams_on_imitated_cupy(
        fake_cupy: Any) -> None:
    """A live allocation kept pointing into the arena that the pool's close() freed; in a
    bypass pool a request larger than the pool was streamed (not placed), then pin raised
    NotResident and its key stayed in the pool for good."""
    import gc
    import weakref

    from cachegym.allocator.cupy_backend import PoolAllocator

    pool = Pool(1 << 16, backend=CupyBackend())
    alloc = PoolAllocator(pool)
    a = alloc.malloc(1000)
    arena = weakref.ref(pool.backend._mem)
    pool.close()
    gc.collect()
    assert arena() is not None  # (held by the allocation's owner)
    del a
    gc.collect()
    assert arena() is None
    pool = Pool(1 << 16, backend=CupyBackend(), oversize="bypass")
    alloc = PoolAllocator(pool)
    with pytest.raises(fake_cupy.cuda.memory.OutOfMemoryError):
        alloc.malloc(1 << 17)
    assert len(pool) == 0 and alloc.live == 0
    pool.close()


def test_a_pool_on_cupy_stores_device_arrays_on_imitated_cupy(fake_cupy: Any) -> None:
    """Pool.put refused every device array, whatever the backend (its message advised the CuPy
    backend, on which it failed too): a CuPy backend's pool stores them, admitted or streamed."""
    data = np.arange(3000, dtype=np.float32)
    for oversize, cap in (("error", 1 << 16), ("bypass", 1 << 10)):
        pool = Pool(cap, backend=CupyBackend(), oversize=oversize)
        try:
            pool.put(1, _ForeignDeviceArray(data))
            pool.put(2, fake_cupy.ndarray(_a=data[::-1].copy()))
            assert np.array_equal(np.asarray(pool.get(1).get()).view(np.float32), data)
            assert np.array_equal(np.asarray(pool.get(2).get()).view(np.float32), data[::-1])
        finally:
            pool.close()
    be = CupyBackend()
    with pytest.raises(BackendError, match="no arena"):
        be.stream_in(1, 10)  # (before attach: an AttributeError)
    torch = pytest.importorskip("torch")

    class Cuda:  # (a tensor's module and device, without a GPU)
        __module__ = "torch"
        device = torch.device("cuda")

        def detach(self) -> Any:
            return self

    with pytest.raises(ConfigError, match="backend=CupyBackend"):
        Pool(1 << 16, backend=NumpyBackend()).put(1, Cuda())


# ---------------------------------------------------------------------- on a GPU
@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cupy_matches_numpy_decision_by_decision_and_byte_by_byte(seed: int) -> None:
    _same_run(parity_run(NumpyBackend(), seed=seed), parity_run(CupyBackend(), seed=seed))


@pytest.mark.gpu
@needs_gpu
def test_cupy_copies_round_trip() -> None:
    be = CupyBackend()
    be.attach(1 << 20)
    try:
        data = np.random.default_rng(0).integers(0, 256, 100_000, dtype=np.uint8)
        be.write(4096, data)
        be.wait(be.copy_d2h(7, 4096, data.nbytes))
        host = be.host_buffer(7)
        assert host is not None and np.array_equal(host, data)
        be.wait(be.copy_h2d(7, 512 * 500, data.nbytes))
        assert np.array_equal(be.device_buffer(512 * 500, data.nbytes).get(), data)
        be.free_host(7)
        assert be.host_buffer(7) is None
        be.synchronize()
    finally:
        be.close()


@pytest.mark.gpu
@needs_gpu
def test_device_block_is_not_reused_while_a_copy_from_it_is_in_flight() -> None:
    n = 64 << 20  # large enough that a missing dependency would show
    pool = Pool(n, backend=CupyBackend())  # instant cost model: blocks are reused at once
    try:
        a = np.full(n, 0xA5, np.uint8)
        b = np.full(n, 0x5A, np.uint8)
        for i in range(3):
            pool.put(2 * i, a)  # evicts the previous object: write-back in flight
            pool.put(2 * i + 1, b)  # reuses the block the write-back reads
        pool.flush()
        assert np.array_equal(pool.get(4).get(), a)  # written back intact, fetched again
        assert np.array_equal(pool.get(5).get(), b)
    finally:
        pool.close()


@pytest.mark.gpu
@needs_gpu
def test_cupy_backend_errors_are_backend_errors() -> None:
    with pytest.raises(BackendError, match="cannot allocate the device arena"):
        Pool(1 << 52, backend=CupyBackend())
    with pytest.raises(BackendError, match="no arena"):
        CupyBackend().device_buffer(0, 1)
    be = CupyBackend()
    be.attach(1 << 20)
    try:
        with pytest.raises(BackendError, match="outside the arena"):
            be.write((1 << 20) - 10, np.zeros(100, np.uint8))
        with pytest.raises(BackendError, match="already serves a pool"):
            be.attach(1 << 20)
    finally:
        be.close()


@pytest.mark.gpu
@needs_gpu
def test_pool_allocator_serves_cupy_arrays_under_the_budget() -> None:
    import cupy

    from cachegym.allocator.cupy_backend import PoolAllocator

    cap = 16 << 20
    pool = Pool(cap, backend=CupyBackend())
    alloc = PoolAllocator(pool)
    try:
        rng = np.random.default_rng(0)
        held = {k: rng.integers(0, 256, 3 << 20, dtype=np.uint8) for k in range(4)}
        for k, v in held.items():
            pool.put(k, v)  # 12 MiB of evictable objects
        with alloc.use():
            x = cupy.arange(2 << 20, dtype=cupy.float32)  # 8 MiB: evicts to make room
            assert alloc.live == 1 and pool.stats.evictions > 0
            assert int(x[-1].get()) == (2 << 20) - 1
            ptr = x.data.ptr
            assert pool.backend.arena_ptr <= ptr < pool.backend.arena_ptr + cap
            with pytest.raises(cupy.cuda.memory.OutOfMemoryError):
                cupy.empty(cap, dtype=cupy.uint8)  # larger than the budget
            del x
        assert alloc.live == 0 and len([k for k in pool.resident_keys() if k < 0]) == 0
        for k, v in held.items():
            assert np.array_equal(pool.get(k).get(), v)  # evicted objects came back intact
    finally:
        pool.close()


@pytest.mark.gpu
@needs_gpu
def test_offload_on_gpu_reads_back_what_was_packed() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    from cachegym.allocator.offload import ActivationOffload, ReversePackOrder

    class Save(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any, *saved: Any) -> Any:
            ctx.save_for_backward(*saved)
            return x * 2

        @staticmethod
        def backward(ctx: Any, g: Any) -> Any:
            ctx.results = [t.clone() for t in ctx.saved_tensors]
            return (g * 2,) + (None,) * len(ctx.results)

    g = torch.Generator(device="cuda").manual_seed(0)
    tensors = [torch.randn(256, 1024, device="cuda", generator=g) for _ in range(12)]
    tensors += [tensors[0].t(), tensors[1].to(torch.bfloat16), tensors[2] > 0]
    refs = [t.clone() for t in tensors]
    off = ActivationOffload(3 << 20, backend=CupyBackend(stall_timing=True),
                            prefetcher=ReversePackOrder(depth=2), cost="h100_pcie5")
    x = torch.randn(8, device="cuda", requires_grad=True)
    try:
        with off:
            ys = [Save.apply(x, t) for t in tensors]
            y = sum(yy.sum() for yy in ys)
        nodes = [yy.grad_fn for yy in ys]
        y.backward()
        torch.cuda.synchronize()
        for node, want in zip(nodes, refs):
            assert torch.equal(node.results[0], want)
        st = off.stats()
        assert st["evictions"] > 0 and st["writebacks"] > 0 and st["prefetches"] > 0
        assert off.backend.stall_ns() >= 0
        with pytest.raises(BackendError, match="on cpu"), off:
            torch.randn(4, requires_grad=True).exp().sum()
    finally:
        off.close()


@pytest.mark.gpu
@needs_gpu
def test_calibrate_cupy_backend_is_plausible() -> None:
    preset, raw = calibrate(CupyBackend, small=4096, medium=1 << 20, large=32 << 20,
                            repeats=3)
    assert preset.calibrated
    assert 1.0 < preset.h2d_gbps < 2000 and 1.0 < preset.d2h_gbps < 2000
    assert preset.h2d_latency_ns < 1_000_000


@pytest.mark.gpu
@needs_gpu
def test_cupy_backend_takes_torch_cuda_tensors() -> None:
    """The offload's streamed pack hands ``stream_out`` a torch CUDA tensor (the imitated-CuPy
    test above checks the conversion on the CPU; this one with CuPy and torch)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    be = CupyBackend()
    be.attach(1 << 20)
    try:
        t = torch.arange(3000, dtype=torch.float32, device="cuda")
        be.stream_out(5, t.view(torch.uint8))
        back = be.stream_in(5, t.numel() * 4)
        assert torch.equal(torch.from_dlpack(back).view(torch.float32), t)
        be.write(1024, t)
        got = be.device_buffer(1024, t.numel() * 4).get().view(np.float32)
        assert np.array_equal(got, t.cpu().numpy())
    finally:
        be.close()
