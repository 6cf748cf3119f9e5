"""The pool: a fixed device budget with host memory behind it, served by one access loop.

:class:`Pool` is the public façade: it checks its configuration, and adds what is not the loop
itself (the policy, prefetcher and hook as settable properties, ``flush``, PyTorch-style memory
statistics and snapshots, the data plane ``put``/``get``, pickling). The loop (hit, miss,
make-room, eviction, write-back, prefetch, free, the suspendable decision point and replay) is
:class:`allocator.loop.Loop`, its base, in ``allocator/loop.py``: read that file to see what an
access does.

Locking: every public method takes ``_lock`` (re-entrant); all access to ``_objs``, the
placement, the clock and the stats requires it.

Compiled by Cython in pure-Python mode where a C compiler is present (``pool.pxd``); interpreted
otherwise (``CACHEGYM_PURE_PYTHON=1``), with the same effects.
"""

from __future__ import annotations

import copy
import gc
import importlib
import os
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import cython
import numpy as np

from cachegym.allocator.arena import ALIGN, Arena
from cachegym.allocator.cost import CostModel, Preset
from cachegym.allocator.errors import (
    BackendError,
    ConfigError,
    ObjectPinned,
    ObjectTooLarge,
    PolicyError,
    PoolExhausted,
    backend_cause,
)
from cachegym.allocator.loop import COMPILED, REPLAY_CHUNK, Loop, _extras, as_key
from cachegym.allocator.records import Counters, EvictionRequest, ObjectInfo
from cachegym.allocator.seams import (
    D2H,
    DEVICE,
    H2D,
    HOST,
    STATE_NAMES,
    EvictionPolicy,
    PoolView,
    PrefetchPolicy,
    check_policies,
    default_eviction_policy,
    wrapped_chain,
)
from cachegym.allocator.sizes import format_size, parse_size
from cachegym.allocator.stats import PoolHook
from cachegym.allocator.trace import MAX_TOTAL

if TYPE_CHECKING:
    from cachegym.allocator.backends import Backend

__all__ = ["Pool", "PoolView", "ObjectInfo", "Counters", "EvictionRequest", "DEVICE", "HOST", "H2D",
           "D2H", "COMPILED", "REPLAY_CHUNK"]


def load_accelerator(name: str) -> Any:
    """The optional C extension ``"policies._mlp"`` (the learned policy's forward pass), or
    ``None`` (not built, or ``CACHEGYM_PURE_PYTHON`` set: everything runs as Python/NumPy)."""
    if os.environ.get("CACHEGYM_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


Placement = Literal["arena", "bytes"]


def _as_array(key: int, data: Any) -> np.ndarray:
    """``data`` (what :meth:`Pool.put` stores) as a contiguous NumPy array: a CPU torch
    tensor as its bytes (any dtype, bfloat16 included; detached), anything else through
    ``np.ascontiguousarray``; a :class:`ConfigError` naming what cannot be stored."""
    if type(data).__module__.startswith("torch") and hasattr(data, "detach"):
        if data.device.type != "cpu":
            raise ConfigError(f"put: object {key}: a tensor on {data.device}, and this pool's "
                              "backend stores host arrays: pass t.cpu(), or build the pool with "
                              "backend=CupyBackend() (cachegym.allocator.cupy_backend)")
        import torch

        t = data.detach().contiguous().reshape(-1)
        return np.asarray(t.view(torch.uint8).numpy() if t.numel() else np.zeros(0, np.uint8))
    if isinstance(data, str) or (isinstance(data, np.ndarray) and data.dtype.kind == "U"):
        raise ConfigError(f"put: object {key}: text ({type(data).__name__}) has no one byte "
                          "encoding; pass its bytes as an array, e.g. "
                          "np.frombuffer(s.encode(), np.uint8)")
    try:
        return np.ascontiguousarray(data)
    except Exception as e:  # (an object NumPy cannot take)
        raise ConfigError(f"put: object {key}: {type(data).__name__} cannot be stored as an array "
                          f"({e}); pass a NumPy array (np.frombuffer(b, np.uint8) for raw "
                          "bytes)") from None


@cython.cclass
class Pool(Loop):
    """A device memory pool of ``capacity`` bytes with host memory behind it.

    Args:
        capacity: device budget: bytes, or a size string (``"512MiB"``).
        policy: eviction policy (default :class:`policies.lru.LRU`, see
            :func:`allocator.seams.default_eviction_policy`).
        prefetcher: optional prefetch policy, asked after every access.
        cost: timing model: ``None`` (instant copies), a preset name or :class:`Preset`, or a
            :class:`CostModel`.
        backend: ``None`` (metadata only), or a backend that owns real bytes
            (:class:`allocator.backends.NumpyBackend`, ``CupyBackend``). Needs ``placement="arena"``.
        placement: ``"arena"`` (best-fit blocks, fragmentation can force evictions) or
            ``"bytes"`` (byte accounting, as libCacheSim). Default (``None``): ``"arena"`` with
            a backend (real bytes need addresses), ``"bytes"`` without one, as the evaluator's
            default (``conf/allocator/bytes.yaml``), so that ``Pool(capacity, policy,
            oversize="bypass")`` gives the evaluator's figures (which streams an object larger
            than the pool).
        write_policy: ``"write-back"`` (dirty victims are copied to host) or ``"write-through"``
            (every write is also copied to host at once).
        oversize: ``"error"`` raises :class:`ObjectTooLarge` for an object larger than the pool;
            ``"bypass"`` counts a miss and never inserts it (libCacheSim's semantics): the
            access is streamed (its bytes copied, nothing kept; ``stats.streamed``).
        hook: optional callable receiving one dict per event (see :class:`JsonlHook`).
        forget_evicted: once the pool holds records of more than ``loop.FORGET_ABOVE``
            (65,536) objects, an object that leaves the device (evicted, or streamed) keeps
            only its key, in a set (so that its next write is not a first write and a free
            reaches the policy): about 40 bytes instead of about 230 per object the pool has
            seen. The same decisions and statistics; for traces of many objects (a guard's
            shadow pools). A miss of a forgotten object makes its record anew, which costs a
            replay of many misses up to 20% of its speed. Needs no backend, no prefetcher, no
            hook and instant copies (``cost=None``): each keeps something of an object in host
            memory. ``view.info`` of a forgotten object raises ``KeyError``; ``pool.state``
            says ``host``.
        clean_ahead: bytes (a size string, or a fraction of the capacity below 1) of the next
            victims to keep clean under write-back: after each access, while fewer bytes than that are free and the
            copy-out engine is idle, the dirty objects among the objects the policy would give
            up next (its ``eviction_order``) are written back early, so that evicting them then
            waits for no copy (activation offload: a saved tensor would be copied out while
            compute runs, not when a later save needs its room). More bytes may be copied (an object
            written again, or freed, after its early copy); the same decisions. 0 (default):
            off. A policy without an ``eviction_order`` (random eviction, the bare learned
            network) cleans nothing, nor does a pool whose copies take no time
            (``cost=None``). The object just accessed is not cleaned (its writer may fill it
            after the access).
    """

    def __init__(
        self,
        capacity: int | str,
        policy: EvictionPolicy | None = None,
        *,
        prefetcher: PrefetchPolicy | None = None,
        cost: CostModel | Preset | str | None = None,
        backend: Backend | None = None,
        placement: Placement | None = None,
        write_policy: Literal["write-back", "write-through"] = "write-back",
        oversize: Literal["error", "bypass"] = "error",
        hook: PoolHook | None = None,
        forget_evicted: bool = False,
        clean_ahead: int | float | str = 0,
    ) -> None:
        if isinstance(capacity, str):  # "512MiB", "1GiB"
            capacity = parse_size(capacity, "capacity")
        if (not isinstance(capacity, (int, np.integer)) or isinstance(capacity, bool)
                or not 0 < capacity <= MAX_TOTAL):
            raise ConfigError(f"capacity must be a positive number of bytes, at most 2**60, got "
                              f"{capacity!r}")
        if isinstance(policy, str):
            raise ConfigError(f"policy: pass a policy object, not the name {policy!r}: "
                              f"cachegym.make_policy({policy!r}) builds one where that is a "
                              "registered name (it lists them where not)")
        if placement is None:
            placement = "bytes" if backend is None else "arena"
        if placement == "arena" and capacity < ALIGN:
            raise ConfigError(f"capacity {capacity} is less than one {ALIGN}-byte arena block; "
                              "raise it or use placement='bytes'")
        if placement not in ("arena", "bytes"):
            raise ConfigError(f"placement must be 'arena' or 'bytes', got {placement!r}")
        if write_policy not in ("write-back", "write-through"):
            raise ConfigError(f"write_policy must be 'write-back' or 'write-through', got {write_policy!r}")
        if oversize not in ("error", "bypass"):
            raise ConfigError(f"oversize must be 'error' or 'bypass', got {oversize!r}")
        _check_backend(backend)
        _check_hook(hook)
        if backend is not None and placement != "arena":
            raise ConfigError("a backend holds real bytes at arena offsets: use placement='arena'")
        if policy is None:
            policy = default_eviction_policy()
        check_policies(policy, prefetcher)
        cost = cost if isinstance(cost, CostModel) else CostModel(cost)
        if not isinstance(forget_evicted, bool):
            raise ConfigError(f"forget_evicted must be a bool, got {forget_evicted!r}")
        if forget_evicted:
            _check_forgetful(backend, prefetcher, hook, cost)
        if isinstance(clean_ahead, str):
            clean_ahead = parse_size(clean_ahead, "clean_ahead")
        elif isinstance(clean_ahead, (float, np.floating)) and 0 <= clean_ahead < 1:
            clean_ahead = int(clean_ahead * int(capacity))  # a fraction of the capacity
        if (not isinstance(clean_ahead, (int, np.integer)) or isinstance(clean_ahead, bool)
                or clean_ahead < 0):
            raise ConfigError(f"clean_ahead must be bytes >= 0, a size string or a fraction of "
                              f"the capacity in [0, 1) (0: off), got {clean_ahead!r}")
        if clean_ahead > int(capacity):  # (it would write back every object as it arrives)
            raise ConfigError(f"clean_ahead {clean_ahead} bytes is more than the pool's capacity "
                              f"({int(capacity)} bytes): give at most the capacity, or a "
                              "fraction of it in [0, 1) (0.25: a quarter)")
        _claim(policy, self, True, prefetcher)  # (before anything is built)
        if backend is not None:
            _claim_backend(backend, self, True)
        Loop.__init__(self, int(capacity), policy, prefetcher, cost, backend, placement,
                      write_policy == "write-through", oversize == "bypass", hook, forget_evicted,
                      int(clean_ahead))
        _claim(policy, self, False, prefetcher)
        if backend is not None:
            _claim_backend(backend, self, False)

    def __reduce__(self) -> tuple[Any, ...]:
        # a Python subclass's own attributes (interpreted, the instance dict holds every
        # attribute: the state is taken from _STATE, the runtime ones are made anew); under the
        # lock (another thread's access waits), never in the middle of a steps() decision
        with self._lock:
            self._refuse_while_deciding("pickle", reopen=False)  # (a closed pool stays closed)
            if self.backend is not None:  # (its copy threads' lock was pickle's raw TypeError)
                raise _NotPicklable(f"pickle: a pool with a backend ({type(self.backend).__name__}) "
                                    "holds real bytes and copy threads, which do not pickle; "
                                    "pickle a pool without a backend, or save the objects' "
                                    "bytes (pool.get(key)) yourself")
            d = getattr(self, "__dict__", None)
            extra = None if d is None else {k: v for k, v in d.items()
                                            if k not in Pool._STATE and k not in Pool._RUNTIME}
            return (_new_pool, (type(self),), ({k: getattr(self, k) for k in Pool._STATE}, extra))

    def __deepcopy__(self, memo: dict[int, Any]) -> Pool:
        """A copy through pickle: every object of the pool's state is copied once, as
        unpickling rebuilds it (copy.deepcopy treats bound methods of built-in containers as
        atomic, and a policy holding one, e.g. LRU's ``touch``, would stay bound to the
        original's container)."""
        import pickle

        return pickle.loads(pickle.dumps(self))  # type: ignore[no-any-return]

    def __copy__(self) -> Pool:
        raise ConfigError("copy.copy(pool): a shallow copy would share the pool's records and "
                          "placement with the original; use copy.deepcopy(pool) (or pickle)")

    def __setstate__(self, state: tuple[dict[str, Any], dict[str, Any] | None]) -> None:
        fields, extra = state
        for k, v in fields.items():
            setattr(self, k, v)
        if extra:
            self.__dict__.update(extra)
        self._attach_runtime()
        _claim(self._policy, self, False, self._prefetcher)  # (copies: pickle copied them with the pool)

    # ------------------------------------------------------------------ configuration
    # Who answers and who listens can change between calls; the hit fast path caches them.
    @property
    def policy(self) -> EvictionPolicy:
        return self._policy

    @policy.setter
    def policy(self, policy: EvictionPolicy) -> None:
        """A new eviction policy is told of the objects the pool holds (on the device or in
        flight to it), by ``on_insert``, least recently accessed first; if it raises, the old
        policy stays."""
        check_policies(policy, None)
        with self._lock:
            self._refuse_while_deciding("policy")
            _claim(policy, self, True)
            held = sorted((o for o in self._objs.values() if o.state in (DEVICE, H2D)),
                          key=lambda o: o.last_tick)
            view = self.view
            for o in held:
                try:
                    policy.on_insert(view, o.key)
                except Exception as e:
                    raise PolicyError(policy, "on_insert", o.key, e, "the pool keeps its policy "
                                      "(the new one was told of the objects it holds)") from e
            old, self._policy = self._policy, policy
            _claim(policy, self)
            if old is not policy:
                _given_up(old, _claimed(policy, self._prefetcher))
            self._refresh_fast_path()

    @property
    def prefetcher(self) -> PrefetchPolicy | None:
        return self._prefetcher

    @prefetcher.setter
    def prefetcher(self, prefetcher: PrefetchPolicy | None) -> None:
        check_policies(self._policy, prefetcher)
        if self._forget:
            _check_forgetful(self.backend, prefetcher, self._hook, self.cost)
        with self._lock:
            if self._closed:  # (before the claim below, which would reset a policy given away)
                self._reopen("prefetcher")
            self._await_event()
            old = self._prefetcher
            _claim(self._policy, self, True, prefetcher)
            self._prefetcher = prefetcher
            _claim(self._policy, self, False, prefetcher)
            if old is not None and old is not prefetcher:
                _given_up(old, _claimed(self._policy, prefetcher))
            self._refresh_fast_path()

    @property
    def hook(self) -> PoolHook | None:
        return self._hook

    @hook.setter
    def hook(self, hook: PoolHook | None) -> None:
        _check_hook(hook)
        if self._forget:
            _check_forgetful(self.backend, self._prefetcher, hook, self.cost)
        with self._lock:
            self._await_event()
            self._hook = hook
            self._refresh_fast_path()

    @property
    def write_through(self) -> bool:
        return self._write_through

    def flush(self) -> None:
        """Write every dirty resident object back to host and wait for all copies. A copy that
        failed raises :class:`BackendError` (once) after all the others completed; its object
        stays on the device, dirty, and the next flush writes it again."""
        with self._lock:
            self._refuse_while_deciding("flush")
            for o in self._objs.values():
                if o.state == DEVICE and o.dirty:
                    self._copy_out(o)
                    o.dirty = False
            errors: list[BackendError] = []
            while True:  # each failure is raised once: this ends
                try:
                    self._wait_all()
                    break
                except BackendError as e:
                    errors.append(e)
            for o in self._objs.values():  # the copies of the objects still on the device
                ev = o.d2h_event
                if ev is not None and o.state == DEVICE:
                    o.d2h_event = None
                    err = self._wait_copy(ev)
                    if err is not None:  # (the copy did not happen: its bytes are not counted)
                        o.dirty = True
                        self.stats.bytes_d2h -= o.size
                        errors.append(self._copy_error(o.key, "d2h", err))
            if errors:
                failed = sorted({e.key for e in errors if e.key is not None})
                first = errors[0]
                if len(errors) == 1:
                    raise first
                raise BackendError(f"flush: {len(errors)} copies failed (objects {failed}); the "
                                   f"first: {first}", key=first.key,
                                   direction=first.direction) from first

    def memory_stats(self) -> dict[str, int]:
        """The keys of ``torch.cuda.memory_stats()`` that apply to the pool, as PyTorch names
        them. The device arena is PyTorch's one segment; an object's block is an allocation;
        a dirty victim's block, held until its write-back completes, is PyTorch's block freed
        but awaiting its stream (``active`` but no longer ``allocated``); a caching
        allocator's cache is the pool's evictable objects.

        * ``allocated_bytes.all.current``: bytes of the blocks objects hold (resident, or on
          their way there); ``.peak``: their maximum since the pool was made or
          :meth:`reset_peak_stats`; ``requested_bytes.all.current``: those objects' own sizes
          (the rest is 512-byte rounding); ``allocation.all.current``: those blocks;
        * ``active_bytes.all.current``, ``.peak``, ``active.all.current``: the same with the
          blocks awaiting a write-back not finished by now (``snapshot().device_bytes``,
          ``.peak_device_bytes``; a block copied out is free, though the pool releases it at
          its next allocation);
        * ``reserved_bytes.all.current``, ``.peak``, ``segment.all.current``, ``.peak``: the
          device budget, reserved up front as one segment (``num_device_alloc`` 1,
          ``num_device_free`` 0: it is never given back);
        * ``inactive_split_bytes.all.current``, ``inactive_split.all.current``: the free bytes
          and free blocks of the arena while anything holds a block (its fragmentation:
          ``snapshot().fragmentation`` is ``1 - largest free block / these bytes``);
        * ``num_alloc_retries``: allocations that did not fit at first and were retried after
          evicting (PyTorch: after flushing its cache); ``num_ooms``: :class:`PoolExhausted`
          raised (a prefetch's included, which the pool then drops: it is a hint).
        """
        with self._lock:
            self._await_event()
            place = self._place
            held = [o for o in self._objs.values() if o.offset >= 0]
            allocated = place.used - self._pending_release_bytes
            due = self._due_release_bytes()  # (blocks copied out by now: free, released later)
            now = self.cost.now
            if place.used == 0:
                free_blocks = 0
            elif isinstance(place, Arena):
                free_blocks = len(place.free_blocks())
            else:
                free_blocks = 1 if place.free_bytes else 0
            return {"allocated_bytes.all.current": allocated,
                    "allocated_bytes.all.peak": max(self._peak_allocated, allocated),
                    "requested_bytes.all.current": sum(o.size for o in held),
                    "allocation.all.current": len(held),
                    "active_bytes.all.current": place.used - due,
                    "active_bytes.all.peak": max(self.stats.peak_device_bytes, place.used - due),
                    "active.all.current": len(held) + sum(r[0] > now for r in self._releases),
                    "reserved_bytes.all.current": place.capacity,
                    "reserved_bytes.all.peak": place.capacity,
                    "segment.all.current": 1,
                    "segment.all.peak": 1,
                    "inactive_split_bytes.all.current": place.free_bytes + due if place.used else 0,
                    "inactive_split.all.current": free_blocks,
                    "num_alloc_retries": self._alloc_retries,
                    "num_ooms": self._num_ooms,
                    "num_device_alloc": 1,
                    "num_device_free": 0}

    def reset_peak_stats(self) -> None:
        """Start the peaks (``peak_device_bytes``, ``allocated_bytes.all.peak``,
        ``active_bytes.all.peak``) anew from the current values, as
        ``torch.cuda.reset_peak_memory_stats()``; the counters stay."""
        with self._lock:  # (blocks whose copy-out has finished are free, as memory_stats says)
            self._await_event()
            self.stats.peak_device_bytes = self._place.used - self._due_release_bytes()
            self._peak_allocated = self._place.used - self._pending_release_bytes

    # memory history (torch.cuda.memory's _record_memory_history, _snapshot, _dump_snapshot)
    def record_memory_history(self, enabled: bool = True, *, max_entries: int = 100_000) -> None:
        """Record the pool's block events (allocations, evictions, frees, prefetches, releases,
        out-of-memory errors) for :meth:`memory_snapshot`, keeping the last ``max_entries``,
        as ``torch.cuda.memory._record_memory_history``. The recorder is the pool's ``hook``
        (a :class:`allocator.snapshot.MemoryRecorder`; a hook set before keeps receiving every
        event through it); ``enabled=False`` stops recording and puts that hook back. Needs
        ``placement="arena"`` (byte accounting has no addresses)."""
        from cachegym.allocator.snapshot import MemoryRecorder

        with self._lock:
            self._await_event()
            current = self._hook
            if isinstance(current, MemoryRecorder):
                current = current.forward
            if not enabled:
                self.hook = current
                return
            self._need_arena("record_memory_history")
            self.hook = MemoryRecorder(max_entries, forward=current)

    def memory_snapshot(self) -> dict[str, Any]:
        """The pool's memory as ``torch.cuda.memory._snapshot()`` gives it (``segments``: the
        arena and its blocks; ``device_traces``: the events recorded since
        :meth:`record_memory_history`, empty without it), which ``torch.cuda._memory_viz``
        renders. See :mod:`allocator.snapshot`."""
        from cachegym.allocator.snapshot import MemoryRecorder, build_snapshot

        with self._lock:
            self._await_event()
            self._need_arena("memory_snapshot")
            held = [(o.offset, o.nbytes, o.size, o.key, o.kind) for o in self._objs.values()
                    if o.offset >= 0]
            objs = self._objs
            now = self.cost.now
            # a block whose copy-out has finished by now is free (memory_stats counts it so),
            # though the pool applies its release at its next allocation: released here in a
            # copy of the arena, which merges it with its free neighbours as that release will
            awaiting = [(r[2], r[3], r[5], objs[r[5]].kind if r[5] in objs else -1)
                        for r in self._releases if r[0] > now]
            arena = self._place
            assert isinstance(arena, Arena)
            due = [(r[2], r[3]) for r in self._releases if r[0] <= now]
            if due:
                arena = copy.deepcopy(arena)
                for off, nb in due:
                    arena.release(off, nb)
            free = arena.free_blocks()
            rec = self._hook if isinstance(self._hook, MemoryRecorder) else None
            return build_snapshot(self._place.capacity, held, awaiting, free, rec)

    def _need_arena(self, what: str) -> None:
        """A snapshot gives every block its address in the arena: refuse ``what`` otherwise."""
        if self.placement != "arena":
            raise ConfigError(f"{what}: a snapshot gives every block its address in the arena; "
                              "placement='bytes' has none: construct the pool with "
                              "placement='arena'")

    def dump_snapshot(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`memory_snapshot` to ``path``: JSON for a ``.json`` name (what
        cachegym's own tools read), a pickle for a ``.pickle`` or ``.pkl`` name, as
        ``torch.cuda.memory._dump_snapshot`` writes it, for PyTorch's viewer
        (https://pytorch.org/memory_viz, ``python -m torch.cuda._memory_viz``) alone: cachegym
        never reads a pickle back. See :func:`allocator.snapshot.write_snapshot`."""
        from cachegym.allocator.snapshot import write_snapshot

        write_snapshot(self.memory_snapshot(), path)

    # data plane (needs a backend)
    def put(self, key: int, data: np.ndarray, *, kind: int = 0) -> None:
        """Write ``data`` (any array, stored as raw bytes) as object ``key``. An existing
        object of another size is replaced (freed, then created anew); when the new size cannot
        be placed beside the pinned objects the old object is kept and PoolExhausted raised.
        A put replaces every byte: an object that is not on the device is not fetched first
        (its earlier bytes are not needed), so the put copies nothing host-to-device. A CPU
        torch tensor is stored as its bytes (any dtype; detached); with a device backend
        (``CupyBackend``), a CuPy array or a CUDA tensor too, copied device to device.
        An error raised by what follows the write (the policy's pending evictions, prefetches)
        leaves ``data`` stored; any other error stores nothing (an object being replaced by one
        of another size is freed first: it is then gone; one overwritten whose earlier bytes
        are in host memory keeps those)."""
        key = as_key(key, "put")
        kind, _ = _extras("put", kind, 0)
        be = self._need_backend("put")
        # a device backend (CupyBackend) takes device data as its own bytes (None: host data)
        device_bytes = getattr(be, "device_bytes", None)
        raw: Any = None if device_bytes is None else device_bytes(data)
        if raw is None:
            arr = _as_array(key, data)
            if arr.dtype.hasobject:
                raise ConfigError(f"put: object {key}: an array of Python objects ({arr.dtype}) "
                                  "has no bytes to store; pass a numeric array "
                                  "(np.frombuffer(b, np.uint8) for raw bytes)")
            raw = arr.reshape(-1).view(np.uint8)
        if raw.nbytes == 0:
            raise ConfigError(f"put: object {key} has no bytes; store at least one byte")
        if self._place.footprint(raw.nbytes) > self._place.capacity and not self.bypass_oversize:
            raise ObjectTooLarge(key, raw.nbytes, self._place.capacity, self.capacity)
        with self._lock:
            self._refuse_while_deciding("put")
            old = self._objs.get(key)
            if old is not None and old.size != raw.nbytes:
                if old.pins:
                    raise ObjectPinned(key, old.pins, "put (of a new size)")
                need = self._place.footprint(raw.nbytes)
                if need <= self._place.capacity and not self._fits_beside_pinned(need):
                    # (larger than the pool, in a bypass pool: streamed, as a new key's bytes)
                    self._oom(raw.nbytes)
                    raise PoolExhausted(raw.nbytes, self._place.used, self._place.capacity,
                                        "the pinned objects leave no block that large")
                self._free(key)
                old = None
            # the previous bytes of an object this put overwrites are in host memory (it is
            # there, or on the device and clean): what it keeps should the write fail
            kept = old is not None and (old.state != DEVICE or not old.dirty)
            # the access, up to its end: the phases after it run once the bytes are written;
            # it replaces every byte, so a miss fetches nothing first (_whole)
            self._whole = True
            try:
                self._drive(self._access_steps(key, raw.nbytes, True, kind, 0, defer_wt=True,
                                               tail=False))
            finally:
                self._whole = False
            o = self._objs[key]
            if o.state != DEVICE:  # not admitted: streamed to host memory (_stream counted it)
                try:
                    be.stream_out(key, raw)
                except Exception as e:  # the backend's error or any other (e.g. MemoryError)
                    self._unput(key, old, kept, e, f"streaming object {key} to host memory "
                                "(the pool did not admit it)", "d2h")
                if self._due is not None:
                    self._evict_due(key)
                if self._prefetcher is not None:  # (as after a streamed access)
                    self._drive(self._prefetches(o, False))
                return
            ev = o.d2h_event
            if ev is not None:  # a copy out of the block still reads it (and the write
                o.d2h_event = None  # supersedes it: its failure does not matter)
                self._wait_copy(ev)
            try:
                be.write(o.offset, raw)
            except Exception as e:
                self._unput(key, old, kept, e, f"writing object {key} into its device block",
                            "h2d")
            try:
                if self._due is not None:
                    self._evict_due(key)
                if self._prefetcher is not None:
                    self._drive(self._prefetches(o))
            finally:
                if self.write_through:
                    self._copy_out(o)
                    o.dirty = False
                if self._clean_ahead:
                    self._clean(key)

    def _unput(self, key: int, old: ObjectInfo | None, kept: bool, err: Exception, what: str,
               direction: str) -> NoReturn:
        """A put whose bytes the backend could not store (``what`` failed with ``err``; a write
        may have stored part of them): an object the put created is freed again; one it
        overwrote whose previous bytes are in host memory (``kept``) keeps them there (its
        device block, which may hold part of the new bytes, is dropped without a write-back, or
        fetched again where the object is pinned); one whose previous bytes were in its device
        block only (dirty) keeps that block, as the write left it. Raises
        :class:`BackendError`."""
        o = self._objs.get(key)
        if old is not None and kept:
            left = "the object keeps its previous bytes, in host memory"
            try:
                if o is not None and o.state == DEVICE:
                    o.dirty = False  # (the host copy is the good one)
                    if o.pins:
                        self._refetch(o)
                    else:
                        self._evict(key)
            except Exception as fe:
                left = (f"object {key} could not be restored from its host copy ({fe}): free it "
                        "and put it again")
        elif old is not None:  # dirty: its previous bytes were in its device block only
            left = (f"object {key} keeps its block, whose bytes are the previous ones unless the "
                    "failed write stored part of the new ones (they were on the device only, not "
                    "yet written back)")
        else:
            left = "an object this put created is gone"
            try:
                if o is not None:
                    self._free(key)
            except (PolicyError, ObjectPinned) as fe:  # the policy refused the free: it stays
                left = (f"object {key} stays, unwritten (it reads as zeros), since freeing it "
                        f"failed too: {fe}")
        raise BackendError(f"{what} failed ({backend_cause(err)}); these bytes are not stored ({left}): put "
                           "it again", key=key, direction=direction) from err

    def _refetch(self, o: ObjectInfo) -> None:
        """Copy ``o``'s host bytes into its device block again (a pinned object whose block a
        failed write may have changed), waiting for the copy."""
        self._h2d(o, self.cost.now)
        ev, o.h2d_event = o.h2d_event, None
        if ev is not None:
            err = self._wait_copy(ev)
            if err is not None:
                raise err

    def get(self, key: int, *, copy: bool = True) -> np.ndarray:
        """Read object ``key`` (raw bytes). ``copy=False`` returns the device buffer itself,
        valid only while the object is pinned. An object the pool does not admit (refused by the
        policy, or larger than an ``oversize="bypass"`` pool) is streamed: its bytes are copied
        into a new device array outside the pool's budget, whatever ``copy`` says."""
        key = as_key(key, "get")
        be = self._need_backend("get")
        with self._lock:
            self._refuse_while_deciding("get")
            o = self._get(key, "get")
            if (o.nbytes == 0 and not self.bypass_oversize
                    and self._place.footprint(o.size) > self._place.capacity):
                raise ObjectTooLarge(key, o.size, self._place.capacity, self.capacity)
            self._drive(self._access_steps(key, o.size, False, o.kind, 0))
            o = self._objs[key]
            if o.state != DEVICE:  # streamed (_stream counted it)
                try:
                    return be.stream_in(key, o.size)
                except Exception as e:  # the backend's error or any other
                    raise BackendError(f"streaming object {key} to the device failed "
                                       f"({backend_cause(e)}); it "
                                       "stays in host memory, where its bytes are: get it again "
                                       "to retry", key=key, direction="h2d") from e
            try:
                buf = be.device_buffer(o.offset, o.size)
                return buf.copy() if copy else buf
            except Exception as e:  # the object stays where it is, with its bytes
                raise BackendError(f"reading object {key} from its device block failed "
                                   f"({backend_cause(e)}); "
                                   "it stays on the device with its bytes: get it again to retry",
                                   key=key, direction="d2h") from e

    def __len__(self) -> int:
        """The objects the pool knows (on the device, in flight or in host memory)."""
        return len(self._objs) + len(self._seen)

    def __contains__(self, key: int) -> bool:
        return key in self._objs or key in self._seen

    def state(self, key: int) -> str:
        """Residency of ``key``: ``device``, ``host``, ``h2d`` or ``d2h``."""
        key = as_key(key, "state")
        with self._lock:
            self._await_event()
            self._retire()
            return STATE_NAMES[self._get(key, "state").state]  # (forgotten: host)

    def resident_keys(self) -> list[int]:
        with self._lock:
            self._await_event()
            return [k for k, o in self._objs.items() if o.state in (DEVICE, H2D)]

    def close(self) -> None:
        """Wait for every copy in flight, close the backend, and give up the policy and the
        prefetcher: another pool may be given them if they have a ``reset()``, which that pool
        calls (they still hold this pool's state; one without is refused there). A closed pool
        used again takes them back, unless another pool has been given one of them since
        (:class:`ConfigError`). Closing a closed pool does nothing."""
        with self._lock:
            if self._closed:
                return  # (closed already: nothing more to give up)
            self._refuse_while_deciding("close")
            try:
                self._wait_all()
            finally:
                _unclaim(_claimed(self._policy, self._prefetcher), self)
                self._closed = True
                if self.backend is not None:
                    self.backend.close()

    def _reopen(self, op: str) -> None:
        """A closed pool used again (``op``) takes its policy and prefetcher back, unless another
        pool has been given one of them since (:class:`ConfigError`: their state now follows
        that pool's objects, or was reset for it)."""
        with _SERVING_LOCK:
            if self.backend is not None and _backend_owner(self.backend) not in (None, self):
                raise ConfigError(
                    f"{op}: this pool was closed, and its backend {self.backend!r} has been "
                    "given to another pool since (it holds that pool's bytes now): make a new "
                    "pool, with a new backend, to go on")
            for p in _claimed(self._policy, self._prefetcher):
                ref = _SERVING.get(id(p))
                other = None if ref is None else ref()
                served = _SERVED.get(id(p))
                since = served is not None and served[0]() is p and (
                    served[1] is None or served[1]() is not self)
                if (other is not None and other is not self) or since:
                    raise ConfigError(
                        f"{op}: this pool was closed, and its policy or prefetcher {p!r} has been "
                        "given to another pool since (its state follows that pool's objects or "
                        "was reset for it): make a new pool, with a new policy, to go on")
        _claim(self._policy, self, False, self._prefetcher)
        self._closed = False

    def __repr__(self) -> str:
        """What the pool is (budget, who decides, placement) and what it holds now."""
        return (f"Pool(capacity={format_size(self.capacity)!r}, policy={self._policy!r}, "
                f"prefetcher={self._prefetcher!r}, placement={self.placement!r}, "
                f"objects={len(self)}, used={format_size(self._place.used)!r})")

    def _fits_beside_pinned(self, need: int) -> bool:
        """Whether ``need`` bytes can be placed once everything unpinned is gone (in-flight
        copies land and become evictable; only pinned objects hold space for good)."""
        if not isinstance(self._place, Arena):
            return self._place.capacity - self._pinned_bytes >= need
        pinned = sorted((o.offset, o.nbytes) for o in self._objs.values() if o.pins)
        pos = 0
        for off, n in pinned + [(self._place.capacity, 0)]:
            if off - pos >= need:
                return True
            pos = off + n
        return False

    def _need_backend(self, op: str) -> Backend:
        if self.backend is None:
            raise ConfigError(f"{op} moves real bytes: construct the pool with a backend "
                              "(e.g. backend=NumpyBackend())")
        return self.backend


_SERVING: dict[int, weakref.ref[Pool]] = {}
"""``id(policy)`` -> the pool it was last given to (:func:`_claim`)."""
_SERVED: dict[int, tuple[weakref.ref[Any], weakref.ref[Pool] | None]] = {}
"""``id(policy)`` -> (the policy, the pool it last served: ``None`` once that pool gave it up
for another policy), for every policy object a pool was given, while it lives (a policy that
cannot be weakly referenced is not recorded)."""
_SERVING_LOCK = threading.RLock()  # (a pool's weakref callback may run in gc.collect below)


def _claim(policy: EvictionPolicy, pool: Pool, check_only: bool = False,
           prefetcher: PrefetchPolicy | None = None) -> None:
    """:func:`_claim_one` of ``policy``, of each policy it wraps (``wrapped``, a chain of
    :class:`~allocator.seams.Forwarding`: ``Observed(p, tracker)`` or ``Forwarding(p)`` given to
    a second pool is ``p`` given to it) and of the pool's ``prefetcher``, which keeps the state
    of one pool's accesses too (a history, a trace position, timing margins): given to a second
    pool it would prefetch from the first's."""
    chain = _claimed(policy, None)
    for p in chain:
        _claim_one(p, pool, check_only)
    if prefetcher is not None and all(prefetcher is not q for q in chain):
        _claim_one(prefetcher, pool, check_only, "prefetcher")


def _claimed(policy: EvictionPolicy, prefetcher: PrefetchPolicy | None) -> list[Any]:
    """The objects a pool with ``policy`` and ``prefetcher`` claims: the policy's wrapped chain
    and the trackers its members report to (``tracker``: ``Observed(policy, tracker)``, whose
    tracker a learned prefetcher reads), then the prefetcher (each once: a learned policy may be
    both)."""
    chain = wrapped_chain(policy)
    out = list(chain)
    for p in chain:
        t = getattr(p, "tracker", None)
        if t is not None and all(t is not q for q in out):
            out.append(t)
    if prefetcher is not None and all(prefetcher is not q for q in out):
        out.append(prefetcher)
    return out


_STATE_OF = {"policy": "objects", "prefetcher": "accesses"}
_DECIDES = {"policy": "evictions", "prefetcher": "prefetches"}
_MAKE = {"policy": "cachegym.make_policy(name)", "prefetcher": "cachegym.make_prefetch(name)"}


class _NotPicklable(ConfigError, TypeError):
    """What cannot be pickled (also the :class:`TypeError` pickle raises for such objects)."""


def _backend_methods() -> tuple[str, ...]:
    """The methods of the :class:`~allocator.backends.Backend` protocol (its one statement)."""
    from cachegym.allocator.backends import Backend

    return tuple(n for n, v in vars(Backend).items() if not n.startswith("_") and callable(v))


def _check_backend(backend: Any) -> None:
    """Refuse (:class:`ConfigError`) a backend that is a class, or an object without the
    :class:`~allocator.backends.Backend` methods (an AttributeError at its first copy)."""
    if backend is None:
        return
    if isinstance(backend, type):
        raise ConfigError(f"backend: pass an instance, e.g. backend={backend.__name__}(), not the "
                          "class")
    missing = [m for m in _backend_methods() if not callable(getattr(backend, m, None))]
    if missing:
        raise ConfigError(f"backend {backend!r} has no {', '.join(missing)}: give a "
                          "cachegym.allocator.backends.Backend (NumpyBackend(), or CupyBackend() "
                          "on a GPU)")


def _check_hook(hook: Any) -> None:
    """Refuse (:class:`ConfigError`) a hook that cannot be called with an event (it was taken,
    then detached at the first event with a log line)."""
    if hook is not None and not callable(hook):
        raise ConfigError(f"hook must be a callable taking one event dict (e.g. JsonlHook(file)) "
                          f"or None, got {hook!r}")


def _claim_one(policy: Any, pool: Pool, check_only: bool = False, what: str = "policy") -> None:
    """Record that ``pool`` uses ``policy``; refuse (:class:`ConfigError`) a policy another
    live pool still uses: a policy keeps the state of one pool's objects (its order, counts,
    model), and shared by two its victims would be the other pool's keys and its decisions
    those of neither. A policy that served another pool before (closed, dropped, or given
    another policy since) still holds that pool's objects: the pool calls its ``reset()`` where
    it has one (a :class:`~policies.features.FeatureTracker`), in the ``check_only`` call each
    caller makes before the policy hears of anything, and refuses it otherwise. Keyed by
    the object (a copy, ``copy.deepcopy(p)``, is another: made before ``p``'s first use, it holds
    nothing). A closed pool used again claims its policy anew (:meth:`Pool._reopen`)."""
    with _SERVING_LOCK:
        for attempt in (0, 1):
            ref = _SERVING.get(id(policy))
            other = None if ref is None else ref()
            if other is None or other is pool or all(
                    q is not policy for q in _claimed(other._policy, other._prefetcher)):
                break
            if attempt == 0:
                other = None  # (not held here while the collector runs)
                gc.collect()  # a pool dropped by the caller may wait for the collector (cycles)
                continue
            raise ConfigError(
                f"{what} {policy!r} already serves another live pool ({other!r}): a {what} "
                f"keeps the state of one pool's {_STATE_OF[what]}, so each pool needs its own "
                f"{what} object (build another, e.g. {_MAKE[what]} or LearnedPolicy.load(path), "
                f"or copy.deepcopy({what}) before its first use), or give the other pool another "
                f"{what}")
        served = _SERVED.get(id(policy))
        stale = served is not None and served[0]() is policy and (
            served[1] is None or served[1]() is not pool)
        reset = getattr(policy, "reset", None) if stale else None
        if stale and not callable(reset):
            raise ConfigError(
                f"{what} {policy!r} served another pool before (closed, dropped or given another "
                f"{what} since) and still holds that pool's {_STATE_OF[what]} in its state, which "
                f"would decide this pool's {_DECIDES[what]}: give this pool a new {what} object "
                f"(e.g. {_MAKE[what]} or LearnedPolicy.load(path), or copy.deepcopy({what}) "
                f"before its first use), or give the {what}'s class a reset() that forgets "
                f"everything, which a pool then calls before it uses the {what} again")
        if check_only:  # (the callers check before the policy hears of anything: reset now)
            if reset is not None:
                try:
                    reset()
                except Exception as e:
                    raise ConfigError(f"{what} {policy!r} served another pool before; its reset(), "
                                      f"which a pool calls before it uses the {what} again, raised "
                                      f"{e!r}: reset() must take no argument and forget "
                                      f"everything, or give this pool a new {what} object") from e
            return
        key = id(policy)
        _SERVING[key] = weakref.ref(pool, _forgetting(key))
        try:
            mine = weakref.ref(policy, _forgetting_served(key))
        except TypeError:  # (no weak references to it: not recorded)
            return
        _SERVED[key] = (mine, weakref.ref(pool))


_BACKEND_OF: dict[int, tuple[weakref.ref[Any], weakref.ref[Pool]]] = {}
"""``id(backend)`` -> (the backend, the pool it was last attached to), while the backend lives
(:func:`_claim_backend`; one that cannot be weakly referenced is not recorded)."""


def _backend_owner(backend: Any) -> Pool | None:
    """The live pool ``backend`` was last attached to, or ``None``."""
    entry = _BACKEND_OF.get(id(backend))
    return entry[1]() if entry is not None and entry[0]() is backend else None


def _claim_backend(backend: Any, pool: Pool, check_only: bool) -> None:
    """Refuse (:class:`ConfigError`) a backend that another open pool holds bytes in: two
    pools in one backend place their objects in one device arena and number their host
    buffers by their own keys, so each would read the other's bytes. One closed (its copies
    waited for, its backend closed) or gone gives its backend up; a pool given one records it
    (``check_only``: only the refusal, before anything is built)."""
    with _SERVING_LOCK:
        other = _backend_owner(backend)
        if other is not None and other is not pool and not other._closed:
            raise ConfigError(
                f"backend {backend!r} already holds the bytes of another open pool ({other!r}): "
                "each pool needs its own backend (e.g. NumpyBackend()), or close the other pool "
                "(pool.close(); an ActivationOffload's offload.close()) before this one takes it")
        if check_only:
            return
        key = id(backend)
        try:
            ref = weakref.ref(backend, _forgetting_served(key, _BACKEND_OF))
        except TypeError:  # (not weakly referenceable: not recorded)
            return
        _BACKEND_OF[key] = (ref, weakref.ref(pool))


def _unclaim(claimed: list[Any], pool: Pool) -> None:
    """``pool`` gives up what it ``claimed`` (:func:`_claimed`; :meth:`Pool.close`)."""
    with _SERVING_LOCK:
        for p in claimed:
            ref = _SERVING.get(id(p))
            if ref is not None and ref() is pool:
                del _SERVING[id(p)]


def _given_up(policy: Any, kept: list[Any]) -> None:
    """A pool was given another policy or prefetcher instead of ``policy`` (an eviction
    policy or a prefetcher): ``policy`` (and what it wraps, but what the pool still ``kept``:
    :func:`_claimed` of its policy and prefetcher now) no longer follows that pool's events, so
    its state is stale for that pool too (:func:`_claim`)."""
    with _SERVING_LOCK:
        for p in _claimed(policy, None):
            served = _SERVED.get(id(p))
            if served is not None and served[0]() is p and all(p is not q for q in kept):
                _SERVED[id(p)] = (served[0], None)


def _forgetting_served(key: int, table: dict[int, Any] | None = None
                       ) -> Callable[[weakref.ref[Any]], None]:
    """The callback of an object's weak reference, the first of its entry in ``table``
    (:data:`_SERVED`, a policy's; :data:`_BACKEND_OF`, a backend's): the object is gone."""
    def forget(ref: weakref.ref[Any]) -> None:
        entries = _SERVED if table is None else table
        with _SERVING_LOCK:
            entry = entries.get(key)
            if entry is not None and entry[0] is ref:
                del entries[key]
    return forget


def _forgetting(key: int) -> Callable[[weakref.ref[Pool]], None]:
    """The callback of a pool's weak reference in :data:`_SERVING`: the pool is gone, and its
    claim on its policy with it (unless another pool claimed the policy since)."""
    def forget(ref: weakref.ref[Pool]) -> None:
        with _SERVING_LOCK:
            if _SERVING.get(key) is ref:
                del _SERVING[key]
    return forget


def _new_pool(cls: type[Pool]) -> Pool:
    """A blank pool of class ``cls`` for :meth:`Pool.__setstate__` (unpickling)."""
    return cls.__new__(cls)


def _check_forgetful(backend: Any, prefetcher: Any, hook: Any, cost: CostModel) -> None:
    """Refuse (:class:`ConfigError`) a ``forget_evicted`` pool with what needs the records
    of objects in host memory."""
    needs = [name for name, v in (("a backend", backend), ("a prefetcher", prefetcher),
                                  ("a hook", hook)) if v is not None]
    if not cost.instant:
        needs.append(f"a timing preset ({cost.preset!r})")
    if needs:
        raise ConfigError(f"forget_evicted=True: the pool must keep the records of objects in "
                          f"host memory with {' and '.join(needs)} (their bytes, prefetches, "
                          f"events or copies in flight); drop forget_evicted or those")
