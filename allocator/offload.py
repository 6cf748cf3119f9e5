"""Activation offload for PyTorch: the tensors autograd saves for backward live in a pool.

:class:`ActivationOffload` is a context manager built on
``torch.autograd.graph.saved_tensors_hooks``::

    offload = ActivationOffload("512MiB", backend=NumpyBackend())  # or CupyBackend() on a GPU
    for batch in data:
        with offload:
            loss = model(batch).sum()
        loss.backward()
        opt.step()
    offload.stats()                                                # pool and offload counters

It is a drop-in for torchtune's ``OffloadActivations`` (a context manager around the forward of
a training step), and takes an exported policy: ``ActivationOffload("512MiB",
policy="policy.npz")`` evicts with the learned policy.

* **pack** copies a saved activation into the pool (a first write: the pool makes room by
  evicting others to host, as its eviction policy decides) and hands autograd a small handle;
* **unpack** reads it back: a hit, a (late) prefetch hit, or a demand miss that copies it in.
  No tensor handed to autograd aliases memory the pool may reuse: on a NumPy arena the tensor
  is a zero-copy view of the object, which stays *pinned* (never evicted, moved or freed) until
  the last tensor using that memory is released (``zero_copy=True``, the default); otherwise
  (device arenas, or ``zero_copy=False``) the bytes are copied out into a fresh tensor;
* the pool object is freed when autograd drops the handle (after the unpack, or when the graph
  is freed without backward) and no unpacked view of it is alive;
* parameters (leaf tensors that require grad, and views of them) and tensors that are not plain
  strided tensors pass through untouched; so do tensors under ``min_bytes``.

The prefetch policy runs inside the pool's access loop. :class:`ReversePackOrder` (the default)
predicts that backward unpacks in reverse pack order: on each unpack it prefetches the next
saved tensors in that order, asynchronously, each when the compute measured ahead of its unpack
no longer covers its copy, so the copy overlaps compute. Any
eviction policy and any prefetch policy plug in (``policy=``, ``prefetcher=``).

Backends: ``NumpyBackend`` serves CPU tensors (``torch.from_numpy`` views of its arena);
``CupyBackend`` serves CUDA tensors (zero-copy through DLPack; copies are ordered against
PyTorch's current stream). A tensor on the other kind of device raises
:class:`~allocator.errors.BackendError`.

The simulated clock of the pool's cost model advances by the wall time between pool
operations (``timer``), so that prefetches land in simulated time about when the real copies
do; ``timer=None`` keeps the clock still (each prefetch is then consumed at its access).

torch is imported here only: ``import allocator`` never imports this module.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from cachegym.allocator.arena import ALIGN
from cachegym.allocator.cost import CostModel, Preset
from cachegym.allocator.errors import (
    BackendError,
    CachegymError,
    ConfigError,
    ObjectTooLarge,
    PoolError,
    PoolExhausted,
)
from cachegym.allocator.pool import DEVICE, Pool
from cachegym.allocator.prefetch_timing import PrefetchTiming, VictimWalk
from cachegym.allocator.seams import PrefetchPolicyBase
from cachegym.allocator.sizes import parse_size
from cachegym.allocator.trace import Kind, Op, Trace

if TYPE_CHECKING:
    from cachegym.allocator.backends import Backend
    from cachegym.allocator.seams import EvictionPolicy, PoolView, PrefetchPolicy

__all__ = ["ActivationOffload", "ReversePackOrder", "BudgetTooSmall", "OffloadStats",
           "on_demand_reload",
           "is_parameter", "TinyTransformer", "make_batches", "lm_loss", "activation_footprint",
           "train"]

log = logging.getLogger(__name__)

_DEFAULT: Any = object()


class BudgetTooSmall(ObjectTooLarge):
    """A saved tensor is larger than the offload budget."""

    def __init__(self, key: int, size: int, capacity: int, what: str) -> None:
        super().__init__(key, size, capacity)
        block = (size + ALIGN - 1) // ALIGN * ALIGN
        self.args = (
            f"activation offload: a saved tensor ({what}) of {size} bytes takes {block} bytes "
            f"of the pool (whole {ALIGN}-byte blocks), more than its budget of {capacity} bytes "
            f"({capacity // ALIGN * ALIGN} in whole blocks); raise the budget to at least "
            f"{block} bytes, or shrink the batch",
        )


class ReversePackOrder(PrefetchPolicyBase):
    """Prefetches, on each unpack, the next saved tensors in reverse pack order, each when its
    copy is due.

    An access is an unpack when its object was accessed before (its first access is the pack,
    a write that creates it): forward packs prefetch nothing. Keys are pack order (the offload
    numbers them consecutively), so the next saved tensors are the live keys just below the
    accessed one; at most ``window`` keys are scanned (freed keys are skipped).

    Timing (:class:`~allocator.prefetch_timing.PrefetchTiming`): a step starts with the first
    pack after an unpack, and a saved tensor's *position* is its key less that first key. At
    each unpack the policy measures the compute since the previous unpack (the pool's
    ``cost.compute_ns``, which the offload advances by the wall time between pool operations),
    per position. Every step it prefetches the next ``depth`` saved tensors (the count rule);
    from the second step on, also each further one whose copy (latency + bytes / bandwidth of
    the pool's cost model, after the copies queued before it) the compute measured ahead of
    its unpack in the previous step no longer covers, and it moves a position's trigger
    earlier by how long its prefetch arrived late. Those timed prefetches go into free space
    only (a guess that far ahead never evicts; under an arena, a free block) and keep at most
    ``inflight`` of the pool's capacity in flight.
    """

    name = "reverse-pack"

    def __init__(self, depth: int = 2, window: int = 256, *, gain: float = 1.0,
                 inflight: float = 0.25) -> None:
        if depth < 1 or window < depth:
            raise ConfigError(f"ReversePackOrder: need depth >= 1 and window >= depth, got "
                              f"depth={depth}, window={window}")
        if not 0.0 < inflight <= 1.0:
            raise ConfigError(f"ReversePackOrder: inflight is a fraction of the pool's capacity "
                              f"in (0, 1], got {inflight!r}")
        self.depth = depth
        self.window = window
        self.inflight = inflight
        self._gain = gain
        self.reset()

    def reset(self) -> None:
        """Forget the steps measured (a new pool)."""
        self.timing = PrefetchTiming(self._gain)
        self._gap: dict[int, int] = {}  # position -> compute from the previous unpack to its own
        self._base = 0  # key of the step's first pack
        self._packing = False  # the latest access was a pack
        self._profiled = False  # a whole step has been measured
        self._last_c = -1  # cost.compute_ns at the latest unpack of this step (-1: none yet)

    def prefetch(self, view: PoolView, key: int) -> Sequence[int]:
        if view.info(key).n_access < 2:  # a pack
            if not self._packing:  # a new step
                self._profiled = self._profiled or self._last_c >= 0
                self._base, self._packing, self._last_c = key, True, -1
            return ()
        self._packing = False
        pos = key - self._base
        c = view.cost.compute_ns
        if self._last_c >= 0:
            self._gap[pos] = c - self._last_c
        self._last_c = c
        self.timing.feedback(view, key, pos)
        if self._profiled:
            return self._timed(view, key)
        return self._counted(view, key)

    def _counted(self, view: PoolView, key: int) -> list[int]:
        """The count rule: the next ``depth`` saved tensors not on the device, while making
        their room would evict none used before them (do no harm, as
        :meth:`PrefetchTiming.due_keys`: the pool's eviction policy's next victims, where it
        says, must be none of the tensors needed sooner, ``key`` included); the walk stops at
        the first that would."""
        out: list[int] = []
        harm = _Harm(view, key)
        seen = 0
        k = key - 1
        stop = max(key - self.window, -1)
        while k > stop and seen < self.depth:
            if k in view:
                seen += 1
                if not view.is_resident(k):
                    if not harm.room_for(k):
                        break  # it would evict a tensor used before it
                    out.append(k)
                harm.used.add(k)
            k -= 1
        return out

    def _timed(self, view: PoolView, key: int) -> list[int]:
        """The next saved tensors whose copies are due (class docstring)."""
        timing, gap, cost = self.timing, self._gap, view.cost
        # into free space only (no eviction for a guess), and no more than inflight in flight
        room = min(int(self.inflight * view.capacity) - view.bytes_in_flight,
                   view.capacity - view.used)
        queued = timing.queued_ns(view)
        longest = cost.copy_time(0, view.capacity) + timing.max_margin()
        out: list[int] = []
        harm = _Harm(view, key)  # (the count rule's prefetches)
        ahead = 0  # compute from now to the unpack of k, as measured in the previous step
        nxt = -1  # compute before the next decision point (the next live key's unpack)
        seen = 0
        k = key - 1
        stop = max(key - self.window, -1)
        while k > stop:
            ahead += gap.get(k - self._base, 0)
            if k in view:
                seen += 1
                if nxt < 0:
                    nxt = ahead
                if seen > self.depth and ahead - nxt > queued + longest:
                    break  # nothing further can be due yet
                if not view.is_resident(k):
                    size = view.size(k)
                    if seen <= self.depth:
                        if not harm.room_for(k):
                            break  # (do no harm, as _counted)
                        out.append(k)  # the count rule's
                    elif timing.due(ahead, nxt, queued + timing.lead_ns(view, k - self._base, size)):
                        if size > room or (harm.victims.arena and not harm.victims.fits_free(size)):
                            break  # (free bytes, under an arena a free block: no eviction)
                        out.append(k)
                        room -= size
                    queued += cost.copy_time(0, size)
                harm.used.add(k)
            k -= 1
        return out

    def __repr__(self) -> str:
        return f"ReversePackOrder(depth={self.depth}, window={self.window})"


class _Harm:
    """Do no harm for :class:`ReversePackOrder`'s count rule (as
    :meth:`PrefetchTiming.due_keys`): a prefetch takes free room, else room the pool's eviction
    policy would make by evicting its next victims, which must be none of the tensors needed
    sooner (``used``: the accessed one, then each met on the walk)."""

    def __init__(self, view: PoolView, key: int) -> None:
        self.view = view
        self.used = {key}
        self.victims = VictimWalk(view)  # the victims the room counted so far takes
        self.free = view.capacity - view.used - view.releasing_bytes

    def room_for(self, k: int) -> bool:
        """Whether ``k`` can be prefetched without evicting a tensor used before it (its room
        then counted as taken)."""
        if self.victims.arena:  # (one block of the arena: VictimWalk.fits)
            return self.victims.fits(self.view.size(k), self.used)
        need = (self.view.size(k) + ALIGN - 1) // ALIGN * ALIGN  # its blocks
        if self.free < need:
            got = self.victims.room(need - self.free, self.used)
            if got < 0:
                return False
            self.free += got
        self.free -= need
        return True


def _load_policy(path: str | os.PathLike[str], what: str = "policy") -> EvictionPolicy:
    """The exported policy file at ``path`` (imported at call time: ``allocator`` has no
    import-time edge to ``policies``, as :func:`allocator.seams.default_eviction_policy`);
    ``what``: the argument it was given as (``policy`` or ``prefetcher``); ``~`` is the
    user's home."""
    path = os.path.expanduser(os.fspath(path))
    if not os.path.isfile(path):
        made = "cachegym.make_prefetch(NAME)" if what == "prefetcher" else "cachegym.make_policy(NAME)"
        raise ConfigError(f"ActivationOffload {what}: {os.fspath(path)!r} is not a file; give the "
                          "path of an exported policy (.npz, written by cachegym train or "
                          "cachegym export) or a "
                          f"{'prefetcher' if what == 'prefetcher' else 'policy'} object "
                          f"(a built-in one by name: {made})")
    from cachegym.policies.registry import make_learned

    return make_learned(path)


def _learned_figures(policy: Any, prefetcher: Any) -> dict[str, Any]:
    """Who decided, for a learned policy's pool: its guard's decision shares and switches
    (``guard_decisions``: ``"lru-history:0.85 network:0.06 ..."``, the experts' twins named
    ``-history``/``-no-prefetch`` where they prefetched the history proposals or nothing) and
    the prefetches its file's head issued itself (``prefetch_head_issued``; those of a
    ``-history`` twin come from the head's proposer, not its network)."""
    out: dict[str, Any] = {}
    inner = getattr(policy, "policy", policy)  # (an Observed wrapper's)
    guard = getattr(inner, "guard", None)
    if guard is not None and hasattr(guard, "decision_shares"):
        out.update(guard_decisions=guard.decision_shares() if guard.decisions else "",
                   guard_switches=guard.switches)
    head = getattr(prefetcher, "prefetch_head", None)
    if head is not None:
        out["prefetch_head_issued"] = head.issued
    return out


def is_parameter(t: torch.Tensor) -> bool:
    """A leaf that requires grad (a weight), a module's parameter even when frozen
    (``requires_grad_(False)``, as the base model under LoRA), or a view of one
    (``weight.t()``): the model's memory, not an activation."""
    if (t.is_leaf and t.requires_grad) or isinstance(t, torch.nn.Parameter):
        return True
    base = t._base
    return base is not None and ((base.is_leaf and base.requires_grad)
                                 or isinstance(base, torch.nn.Parameter))


def on_demand_reload(pin_memory: bool = False) -> torch.autograd.graph.saved_tensors_hooks:
    """torchtune's ``OffloadActivations`` behaviour without its streams, as the baseline to
    compare with: every saved tensor :class:`ActivationOffload` would take (not parameters,
    plain strided tensors only) is copied to host memory on pack and back to its device on
    unpack, on demand (no prefetch). ``pin_memory``: pinned host buffers (CUDA only); the
    copies are then asynchronous on the current stream. On a CPU both copies are memcpys."""

    def pack(t: torch.Tensor) -> Any:
        if type(t) is not torch.Tensor or t.layout != torch.strided or is_parameter(t):
            return t
        host = torch.empty_like(t, device="cpu", pin_memory=pin_memory)
        host.copy_(t, non_blocking=pin_memory)
        return (t.device, host)

    def unpack(p: Any) -> torch.Tensor:
        if isinstance(p, torch.Tensor):
            return p
        dev, host = p
        return host.clone() if dev.type == "cpu" else host.to(dev, non_blocking=pin_memory)

    return torch.autograd.graph.saved_tensors_hooks(pack, unpack)


@dataclass
class OffloadStats:
    """Counters of an :class:`ActivationOffload` (the pool's own are in ``Pool.snapshot()``).

    ``pack_ns``/``unpack_ns``: wall time spent in the pool during pack/unpack (on CPU, the
    unpack time includes the real stalls on copies); ``pack_pool_ns``/``unpack_pool_ns``: the
    part of it inside ``Pool.access`` (the policies' decisions and the copies they issue), the
    rest being the hook's own tensor copy in or out of the arena."""

    packed: int = 0
    passed_through: int = 0
    bytes_packed: int = 0
    unpacked: int = 0
    bytes_unpacked: int = 0
    freed: int = 0
    pack_ns: int = 0
    unpack_ns: int = 0
    pack_pool_ns: int = 0
    unpack_pool_ns: int = 0


class _Saved:
    """What autograd holds for a saved tensor in the pool; when autograd drops it, its key is
    queued for freeing."""

    __slots__ = ("key", "nbytes", "dtype", "shape", "stride", "_dead")

    def __init__(self, key: int, nbytes: int, dtype: torch.dtype, shape: torch.Size,
                 stride: tuple[int, ...], dead: collections.deque[int]) -> None:
        self.key, self.nbytes, self.dtype = key, nbytes, dtype
        self.shape, self.stride, self._dead = shape, stride, dead

    def __del__(self) -> None:
        self._dead.append(self.key)


class _PinnedView:
    """Exposes a pinned pool object's bytes to NumPy (``np.asarray`` keeps it as the array's
    base); when the last array or tensor on that memory is released, its key is queued for
    unpinning."""

    __slots__ = ("__array_interface__", "_buf", "_queue", "_key")

    def __init__(self, buf: np.ndarray, queue: collections.deque[int], key: int) -> None:
        self.__array_interface__ = buf.__array_interface__
        self._buf, self._queue, self._key = buf, queue, key

    def __del__(self) -> None:
        self._queue.append(self._key)


def _layout(t: torch.Tensor) -> tuple[int, ...]:
    """The strides ``t`` is stored with in the pool: its own when it is contiguous or dense
    (``empty_like`` keeps the layout of non-overlapping dense tensors, e.g. a transpose), so
    the kernels of backward see the same layout as without offload; else contiguous."""
    if t.is_contiguous():
        return t.stride()
    return torch.empty_like(t).stride()  # allocates without touching the memory


def _check_args(backend: Any, timer: Any, min_bytes: Any, record: Any, zero_copy: Any) -> None:
    """Refuse (:class:`ConfigError`) an argument of :class:`ActivationOffload` of the wrong kind
    before anything is built (a timer that is no clock failed at the first pack, inside the
    model's forward; ``zero_copy="no"`` meant yes)."""
    if backend is not None and (isinstance(backend, type) or not all(
            callable(getattr(backend, m, None)) for m in ("attach", "device_buffer", "copy_h2d", "copy_d2h"))):
        raise ConfigError(f"ActivationOffload backend {backend!r}: give a backend object, "
                          "NumpyBackend() (CPU tensors, the default) or CupyBackend() (CUDA), "
                          "from cachegym.allocator")
    if timer is not None and not callable(timer):
        raise ConfigError(f"ActivationOffload timer {timer!r}: give a clock returning ns "
                          "(time.perf_counter_ns, the default) or None (the clock stays still)")
    if timer is not None:
        now = timer()  # (a clock in seconds, time.monotonic, made every copy look instant)
        if isinstance(now, (bool, np.bool_)) or not isinstance(now, (int, np.integer)):
            raise ConfigError(f"ActivationOffload timer {timer!r} returned {now!r}: give a clock "
                              "returning integer nanoseconds (time.perf_counter_ns, the "
                              "default; time.monotonic_ns, not time.monotonic's float seconds) "
                              "or None (the clock stays still)")
    if isinstance(min_bytes, bool) or not isinstance(min_bytes, (int, np.integer)) or min_bytes < 0:
        raise ConfigError(f"ActivationOffload min_bytes {min_bytes!r}: give bytes, an int >= 0 "
                          "(saved tensors smaller than that pass through)")
    for name, v in (("record", record), ("zero_copy", zero_copy)):
        if not isinstance(v, (bool, np.bool_)):
            raise ConfigError(f"ActivationOffload {name}={v!r}: give True or False")


class ActivationOffload:
    """Keeps the tensors autograd saves in a pool of ``budget`` device bytes.

    Args:
        budget: the pool's capacity: bytes or a size string (``"512MiB"``); it must hold the
            largest saved tensor (and, in backward, the tensors one node saved, which it
            unpacks together). Each saved tensor takes whole 512-byte blocks of it (a tiny
            model needs more than its bytes suggest), and a tensor autograd saves twice (a ReLU's
            output saved by the ReLU and by the next layer) is stored twice.
        backend: ``NumpyBackend()`` for CPU tensors (default), ``CupyBackend()`` for CUDA.
        policy: eviction policy (default LRU): a policy object, or the path of an exported
            policy file (loaded as :func:`policies.registry.make_learned` does, under its
            default guard). To use the file's prefetch decisions too, load it once and pass
            the object as both ``policy`` and ``prefetcher``.
        prefetcher: prefetch policy (default :class:`ReversePackOrder`; ``None`` for none), or
            the path of a policy file with a prefetch head (the same path as ``policy``: one
            policy object answers both). A learned head beside another eviction policy sees the
            pool's hooks through :class:`~policies.features.Observed`.
        cost: the pool's timing model (preset name, :class:`Preset` or :class:`CostModel`;
            default ``"h100_pcie5"``).
        timer: clock in ns that advances the simulated clock between pool operations
            (default ``time.perf_counter_ns``; ``None`` keeps it still).
        clean_ahead: the share of the budget (or bytes, or a size string) kept clean ahead
            of eviction: while the pool is that short of free room, the saved tensors it would
            give up next are copied out early, while compute runs, so that a later save does
            not wait for their copies (``Pool(clean_ahead=)``; 0: copy out on eviction only;
            default 0.25).
        min_bytes: saved tensors smaller than this pass through.
        record: keep the pool access trace (:meth:`trace`).
        zero_copy: on a NumPy arena, unpack to a view of the pinned object instead of a copy
            (while the pinned views leave room for the largest saved tensor; else a copy).

    The context manager can be entered once per step, by one thread at a time (another
    thread's ``with`` raises; give each thread its own offload); the pool and its policies
    persist.

    A saved tensor is copied into the pool when autograd saves it (as with
    ``torch.autograd.graph.save_on_cpu``): an in-place change to it after the forward pass
    (``x.copy_(next_batch)`` before ``backward``) is not detected as it is without offload
    (autograd's version check raises there), and backward uses the values saved.
    """

    def __init__(self, budget: int | str, *, backend: Backend | None = None,
                 policy: EvictionPolicy | str | os.PathLike[str] | None = None,
                 prefetcher: PrefetchPolicy | None = _DEFAULT,
                 cost: CostModel | Preset | str | None = "h100_pcie5",
                 timer: Callable[[], int] | None = time.perf_counter_ns,
                 clean_ahead: float | int | str = 0.25,
                 min_bytes: int = 0, record: bool = False, zero_copy: bool = True) -> None:
        _check_args(backend, timer, min_bytes, record, zero_copy)
        if backend is None:
            from cachegym.allocator.backends import NumpyBackend

            backend = NumpyBackend()
        if prefetcher is _DEFAULT:
            prefetcher = ReversePackOrder()
        if isinstance(prefetcher, (str, os.PathLike)):  # a policy file's prefetch head: the
            # policy of the same file, loaded once, answers both (its head reads its features)
            same = isinstance(policy, (str, os.PathLike)) and os.path.realpath(policy) == os.path.realpath(prefetcher)
            prefetcher = _load_policy(prefetcher, "prefetcher")
            if same:
                policy = prefetcher
        if isinstance(policy, (str, os.PathLike)):
            policy = _load_policy(policy)
        if prefetcher is not None and getattr(prefetcher, "prefetch_head", False) is None:
            raise ConfigError(  # (a learned policy, or its file, without a head)
                f"ActivationOffload prefetcher: {prefetcher!r} has no prefetch head (its file was "
                "trained with env=evict: it would prefetch nothing); train with env=joint (make "
                "demo exports such a file), leave prefetcher out for ReversePackOrder, or give "
                "prefetcher=None for none")
        head = getattr(prefetcher, "prefetch_head", None)
        if head is not None and not getattr(head.predictor, "horizon", 0):
            log.warning(
                "ActivationOffload prefetcher %r: its prefetch head proposes from a successor "
                "table, which learns which key follows which; an offload's keys are new every "
                "step, so it will prefetch nothing here. Train the head with the aligned history "
                "(env.predictor='{depth: 2, width: 4, hops: 3, horizon: 64, memory: 262144}', as "
                "the main job does) or use the default prefetcher (ReversePackOrder)", prefetcher)
        tracker = getattr(prefetcher, "tracker", None)
        if tracker is not None and prefetcher is not policy:
            # a learned head beside another eviction policy: its tracker sees the pool's hooks
            from cachegym.allocator.seams import default_eviction_policy
            from cachegym.policies.features import Observed

            policy = Observed(policy if policy is not None else default_eviction_policy(), tracker)
        budget = parse_size(budget, "ActivationOffload budget")
        if isinstance(budget, int) and 0 < budget < ALIGN:
            raise ConfigError(f"ActivationOffload budget {budget} bytes: the pool places each saved "
                              f"tensor in whole {ALIGN}-byte blocks; give at least the largest "
                              f"saved tensor's size rounded up to {ALIGN} bytes")
        self.backend = backend
        self.device_type: str = getattr(backend, "device_type", "cpu")
        self.device_id: int = getattr(backend, "device_id", 0)
        self.pool = Pool(budget, policy, prefetcher=prefetcher, cost=cost, backend=backend,
                         clean_ahead=clean_ahead)
        self.min_bytes = int(min_bytes)
        self.zero_copy = zero_copy
        self.timer = timer
        self.counters = OffloadStats()
        self._lock = threading.Lock()  # all pool calls of this offload
        self._enter_lock = threading.Lock()  # entering and leaving the context
        self._next_key = 0
        # keys whose handle died / whose unpacked view died: processed by collect()
        self._dead: collections.deque[int] = collections.deque()
        self._unpins: collections.deque[int] = collections.deque()
        # the blocks pinned by zero-copy views (unpacked tensors autograd still holds): key ->
        # [offset, bytes of its block, views], and the largest block saved so far: a view pins
        # only while the largest saved tensor still fits between the pinned blocks
        self._view_blocks: dict[int, list[int]] = {}
        self._largest = 0
        self._last = 0
        self._hooks: Any = None
        self._entered_by: threading.Thread | None = None  # the thread that entered it
        self._record: list[tuple[int, int, int, int]] | None = [] if record else None
        self._last_row = -1  # the record's last pack or unpack (frees carry no compute)

    # ------------------------------------------------------------------ context
    def __enter__(self) -> ActivationOffload:
        self.collect()
        with self._enter_lock:  # (checked and taken at once: two threads both got in)
            if self._hooks is not None:
                raise ConfigError("ActivationOffload is already active (in this thread or "
                                  "another); enter it once at a time, or give each thread its "
                                  "own ActivationOffload")
            if self.device_type == "cuda" and hasattr(self.backend, "use_compute_stream"):
                self.backend.use_compute_stream(
                    torch.cuda.current_stream(self.device_id).cuda_stream)
            hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
            hooks.__enter__()
            self._hooks = hooks
            self._entered_by = threading.current_thread()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._enter_lock:
            if self._hooks is not None and self._entered_by is not threading.current_thread():
                # (autograd's hooks are per thread: popped here they would fail, and stay
                # installed in the thread that entered)
                raise ConfigError(
                    f"ActivationOffload.__exit__ in thread {threading.current_thread().name!r}, "
                    f"but it was entered in {getattr(self._entered_by, 'name', None)!r}: leave "
                    "it in the thread that entered it (a with-block does)")
            hooks, self._hooks = self._hooks, None
        if hooks is not None:
            hooks.__exit__(*exc)

    def collect(self) -> int:
        """Unpin objects whose unpacked views are gone and free the pool objects of saved
        tensors autograd has dropped (those still viewed wait); returns how many were freed.

        Releases only queue keys (they may run on any thread, inside any code); the offload
        collects when it is entered, before each pack and unpack, and in :meth:`stats`: the
        tensors the last unpack of a backward pass read are freed at the next of those (or call
        this after ``backward()``)."""
        if not self._dead and not self._unpins:
            return 0
        n = 0
        pool = self.pool
        with self._lock:
            while self._unpins:
                key = self._unpins.popleft()
                held = self._view_blocks[key]
                held[2] -= 1
                if not held[2]:
                    del self._view_blocks[key]
                pool.unpin(key)
            waiting = []
            while self._dead:
                key = self._dead.popleft()
                if pool.view.info(key).pins:
                    waiting.append(key)  # an unpacked view still uses it
                    continue
                pool.free(key)
                self._log(key, 0, Op.FREE)
                n += 1
            self._dead.extend(waiting)
        self.counters.freed += n
        return n

    def close(self) -> None:
        self.collect()
        self.pool.close()

    # ------------------------------------------------------------------ the hooks
    def _pack(self, t: torch.Tensor) -> Any:
        if (type(t) is not torch.Tensor or t.layout != torch.strided or t.is_nested
                or is_parameter(t) or t.numel() * t.element_size() < max(self.min_bytes, 1)):
            self.counters.passed_through += 1
            return t
        self._check_device(t)
        if t.is_conj() or t.is_neg():  # a lazy conjugate / negative view (z.conj()): its values
            t = t.resolve_conj().resolve_neg()  # (its bytes cannot be viewed as bytes)
        if self._dead or self._unpins:
            self.collect()
        stride = _layout(t)
        nbytes = t.numel() * t.element_size()
        pool = self.pool
        with self._lock:
            self._largest = max(self._largest, (nbytes + ALIGN - 1) // ALIGN * ALIGN)
            key = self._next_key
            self._next_key += 1
            t0 = self._advance()
            streamed = pool.stats.streamed
            ta = time.perf_counter_ns()
            try:
                pool.access(key, nbytes, True, kind=Kind.ACTIVATION)
            except ObjectTooLarge as e:
                raise BudgetTooSmall(key, nbytes, pool.capacity,
                                     f"shape {tuple(t.shape)}, {t.dtype}") from e
            except PoolExhausted as e:
                raise self._exhausted(e) from e
            try:
                self.counters.pack_pool_ns += time.perf_counter_ns() - ta
                # no pin needed: no pool operation runs before the copy is issued (a device copy
                # is queued on the compute stream, and every later pool copy is ordered after it)
                with torch.no_grad():
                    try:
                        if pool.stats.streamed != streamed:  # not admitted: bytes to host memory
                            self._stream_out(key, t.detach(), stride)
                        else:
                            self._copy_in(self._offset(key, "pack"), t.detach(), stride)
                    except Exception as e:
                        if not isinstance(e, CachegymError):
                            raise BackendError(
                                f"activation offload: copying a saved tensor (shape "
                                f"{tuple(t.shape)}, {t.dtype}) into the pool's "
                                f"{'host' if pool.stats.streamed != streamed else 'device'} "
                                f"memory failed ({type(e).__name__}: {e}); nothing of it was "
                                "kept (the forward stops here; the pool is as before it)") from e
                        raise
                self._log(key, nbytes, Op.WRITE)
                self._last = t1 = self._now()
                saved = _Saved(key, nbytes, t.dtype, t.shape, stride, self._dead)
            except BaseException:  # nothing was saved (a failed copy, an interrupt, the timer's
                try:  # error): the object goes, or its block stayed taken for good
                    pool.free(key)
                except Exception as gone:  # (the first error is the one raised)
                    log.error("activation offload: freeing pool object %d after its failed "
                              "pack failed too: %r", key, gone)
                raise
        self.counters.packed += 1
        self.counters.bytes_packed += nbytes
        self.counters.pack_ns += t1 - t0
        return saved

    def _unpack(self, h: Any) -> torch.Tensor:
        if isinstance(h, torch.Tensor):
            return h
        if self._dead or self._unpins:
            self.collect()
        pool = self.pool
        with self._lock:
            t0 = self._advance()
            streamed = pool.stats.streamed
            ta = time.perf_counter_ns()
            try:
                pool.access(h.key, h.nbytes, kind=Kind.ACTIVATION)
            except PoolExhausted as e:
                raise self._exhausted(e) from e
            self.counters.unpack_pool_ns += time.perf_counter_ns() - ta
            from_host = pool.stats.streamed != streamed  # not admitted: from host memory
            try:
                if from_host:
                    raw = self.backend.stream_in(h.key, h.nbytes)
                    out = torch.from_numpy(raw) if isinstance(raw, np.ndarray) else torch.from_dlpack(raw)
                else:
                    out = self._from_device(h.key, h.nbytes)
            except Exception as e:
                if isinstance(e, CachegymError):
                    raise
                raise BackendError(
                    f"activation offload: reading saved tensor {h.key} ({h.nbytes} bytes) back "
                    f"from the pool's {'host' if from_host else 'device'} memory failed "
                    f"({type(e).__name__}: {e}); it stays there (a backward with "
                    "retain_graph=True can be run again)", key=h.key, direction="h2d") from e
            self._log(h.key, h.nbytes, Op.READ)
            self._last = t1 = self._now()
        self.counters.unpacked += 1
        self.counters.bytes_unpacked += h.nbytes
        self.counters.unpack_ns += t1 - t0
        return out.view(h.dtype).as_strided(h.shape, h.stride)

    # ------------------------------------------------------------------ helpers
    def _from_device(self, key: int, nbytes: int) -> torch.Tensor:
        """Object ``key``'s bytes on the device as a tensor: a zero-copy view holding the pin
        (NumPy arena, ``zero_copy``; its release queues the unpin) while the largest saved
        tensor still fits between the blocks such views pin (a backward node holds every tensor
        it unpacks until it has run: pinned, they could leave no room for the next), else a
        copy."""
        pool = self.pool
        pool.pin(key)
        offset = self._offset(key, "unpack")
        buf = self.backend.device_buffer(offset, nbytes)
        handed = False  # True once a _PinnedView owns the pin
        try:
            if (isinstance(buf, np.ndarray) and self.zero_copy
                    and self._room_beside_views(key, offset, pool.view.info(key).nbytes)):
                held = self._view_blocks.setdefault(key, [offset, pool.view.info(key).nbytes, 0])
                held[2] += 1
                # the view holds the pin; its release (the last tensor on this memory is
                # gone) queues the unpin
                pinned = _PinnedView(buf, self._unpins, key)
                handed = True
                out = torch.from_numpy(np.asarray(pinned))
                del pinned
            else:
                out = self._copy_out(buf)
        finally:
            if not handed:
                pool.unpin(key)
        return out

    def _room_beside_views(self, key: int, offset: int, block: int) -> bool:
        """Whether the largest saved tensor's block still fits in the arena between the blocks
        zero-copy views pin, once ``key``'s block (at ``offset``) is pinned too (everything else
        can be evicted to make room; a view's pin cannot)."""
        blocks = sorted([(o, n) for k, (o, n, _) in self._view_blocks.items() if k != key]
                        + [(offset, block)])
        need, pos = self._largest, 0
        for off, n in [*blocks, (self.pool.capacity // ALIGN * ALIGN, 0)]:
            if off - pos >= need:
                return True
            pos = max(pos, off + n)
        return False

    def _offset(self, key: int, op: str) -> int:
        """Where ``key`` lies in the arena; it must be on the device (the pool's access
        contract): anything else would read or write bytes of another object."""
        info = self.pool.view.info(key)
        if info.offset < 0 or info.state != DEVICE:
            raise PoolError(
                f"activation offload {op}: object {key} is not on the device right after its "
                f"access ({info!r}); the eviction policy {self.pool.policy!r} evicted it "
                "within the access, which breaks the pool's contract; use another policy")
        return int(info.offset)

    def _exhausted(self, e: PoolExhausted) -> PoolExhausted:
        pinned = sum(1 for k in self.pool.resident_keys() if self.pool.view.info(k).pins)
        return PoolExhausted(e.size, e.used, e.capacity, (
            f"activation offload: {pinned} saved tensors are pinned: tensors unpacked from "
            "them are still referenced, by your code or by autograd (a backward node holds "
            "the tensors it unpacks until it has run; zero_copy=True views pin while "
            "referenced); release them, use zero_copy=False, or raise the budget"))

    # NumPy arenas copy with NumPy (one memcpy, no intra-op thread pool to wake); device
    # arenas with torch on the current stream, zero-copy through DLPack.
    def _copy_in(self, offset: int, t: torch.Tensor, stride: tuple[int, ...]) -> None:
        """Copy ``t`` into the pool object at ``offset``, laid out with ``stride``."""
        nbytes = t.numel() * t.element_size()
        buf = self.backend.device_buffer(offset, nbytes)
        if isinstance(buf, np.ndarray) and t.is_contiguous():
            np.copyto(buf, t.reshape(-1).view(torch.uint8).numpy())
            return
        dst = torch.from_numpy(buf) if isinstance(buf, np.ndarray) else torch.from_dlpack(buf)
        dst.view(t.dtype).as_strided(t.shape, stride).copy_(t)

    def _stream_out(self, key: int, t: torch.Tensor, stride: tuple[int, ...]) -> None:
        """Store ``t`` (laid out with ``stride``) in host buffer ``key``: the pack of a tensor
        the pool did not admit."""
        buf = torch.empty(t.numel() * t.element_size(), dtype=torch.uint8, device=t.device)
        buf.view(t.dtype).as_strided(t.shape, stride).copy_(t)
        payload: Any = buf.numpy() if buf.device.type == "cpu" else buf
        self.backend.stream_out(key, payload)

    @staticmethod
    def _copy_out(buf: Any) -> torch.Tensor:
        if isinstance(buf, np.ndarray):
            return torch.from_numpy(buf.copy())
        return torch.from_dlpack(buf).clone()

    def _check_device(self, t: torch.Tensor) -> None:
        dev = t.device
        if dev.type != self.device_type or (dev.type == "cuda" and dev.index != self.device_id):
            want = "cpu" if self.device_type == "cpu" else f"cuda:{self.device_id}"
            raise BackendError(
                f"activation offload: a saved tensor is on {dev} but the pool's backend "
                f"{type(self.backend).__name__} holds {want} memory; move the model and data to "
                + (f"{want}, or use {'CupyBackend' if dev.type == 'cuda' else 'NumpyBackend'} "
                   f"for {dev.type} tensors" if dev.type in ("cpu", "cuda") else
                   f"{want} ({dev.type} tensors have no backend: NumpyBackend holds cpu "
                   "tensors, CupyBackend cuda ones)"))

    def _now(self) -> int:
        return self.timer() if self.timer is not None else 0

    def _advance(self) -> int:
        """Advance the simulated clock by the wall time since the last pool operation."""
        now = self._now()
        if self.timer is not None and self._last:
            gap = now - self._last
            if gap > 0:
                self.pool.cost.compute(gap)
                if self._record is not None and self._last_row >= 0:
                    # on the last access, not on the frees collected since: they happened after
                    # the compute (at this operation), and a replay runs no free row's compute
                    k, s, o, c = self._record[self._last_row]
                    self._record[self._last_row] = (k, s, o, c + gap)
        return now

    def _log(self, key: int, nbytes: int, op: int) -> None:
        if self._record is not None:
            if op != Op.FREE:
                self._last_row = len(self._record)
            self._record.append((key, nbytes, int(op), 0))

    # ------------------------------------------------------------------ results
    def stats(self) -> dict[str, Any]:
        """The pool's statistics and the offload's counters, as one dict. In the pool's terms a
        pack is a write and an unpack a read, so every saved tensor's pack is a miss (a first
        write: allocated, nothing copied) and ``miss_ratio`` is about a half even where nothing
        is offloaded; what offload costs is ``traffic_bytes`` (bytes copied out and back) and,
        under a timing preset, ``stall_ns``. ``byte_misses`` counts those packs' bytes too, so it
        may exceed ``traffic_bytes``. Collects first (:meth:`collect`): the figures do not
        count saved tensors autograd has already dropped."""
        self.collect()
        d = self.pool.snapshot().as_dict()
        d.update(asdict(self.counters))
        d.update(_learned_figures(self.pool.policy, self.pool.prefetcher))
        return d

    def trace(self, name: str = "activation-offload") -> Trace:
        """The recorded pool accesses (needs ``record=True``): pack = write, unpack = read,
        free = free; an access's ``compute_ns`` is the wall time until the next pack or unpack
        (the frees between, collected then, carry none: a replay runs the compute, then the
        frees, then the access, as here)."""
        if self._record is None:
            raise ConfigError("trace(): construct ActivationOffload(..., record=True)")
        rows = self._record
        keys = np.array([r[0] for r in rows], np.int64)
        sizes = np.array([r[1] for r in rows], np.int64)
        if len(rows):  # a free carries the size the object had
            size_of: dict[int, int] = {}
            for i, (k, s, o, _) in enumerate(rows):
                if o == Op.FREE:
                    sizes[i] = size_of.get(k, 1)
                else:
                    size_of[k] = s
        return Trace.from_arrays(
            keys, sizes, np.array([r[2] for r in rows], np.uint8),
            np.array([r[3] for r in rows], np.int64),
            np.full(len(rows), int(Kind.ACTIVATION), np.uint8), name=name)

    def __repr__(self) -> str:
        return f"ActivationOffload(budget={self.pool.capacity}, backend={self.backend!r})"


# ---------------------------------------------------------------------- a small model to check with
class _Block(torch.nn.Module):
    def __init__(self, d: int, heads: int, mlp: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc1 = torch.nn.Linear(d, mlp * d)
        self.fc2 = torch.nn.Linear(mlp * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


class TinyTransformer(torch.nn.Module):
    """A small causal transformer language model (pre-norm blocks, explicit attention), the
    model the offload checks and benchmarks train. ``forward(idx (B, T)) -> logits (B, T, V)``."""

    def __init__(self, vocab: int = 128, d: int = 64, heads: int = 4, layers: int = 2,
                 seq: int = 32, mlp: int = 4) -> None:
        super().__init__()
        if d % heads:
            raise ConfigError(f"TinyTransformer: d={d} must be a multiple of heads={heads}")
        self.vocab, self.seq = vocab, seq
        self.emb = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Parameter(torch.randn(seq, d) * 0.02)
        self.blocks = torch.nn.ModuleList(_Block(d, heads, mlp) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.emb(idx) + self.pos[: idx.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


def make_batches(vocab: int, seq: int, batch: int, n: int, *, seed: int = 0,
                 device: str | torch.device = "cpu") -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``n`` seeded batches of (tokens, next tokens) for :class:`TinyTransformer`."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        tok = torch.randint(0, vocab, (batch, seq + 1), generator=g)
        out.append((tok[:, :-1].to(device), tok[:, 1:].to(device)))
    return out


def lm_loss(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    logits = model(x)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def activation_footprint(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor],
                         loss_fn: Callable[..., torch.Tensor] = lm_loss) -> dict[str, int]:
    """Bytes of the tensors one forward saves that the offload would put in the pool
    (``total``), the largest of them and their number."""
    sizes: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        if type(t) is torch.Tensor and t.layout == torch.strided and not is_parameter(t):
            sizes.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn(model, batch)
    del loss
    return {"total": sum(sizes), "largest": max(sizes, default=0), "count": len(sizes)}


def train(model: torch.nn.Module, batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
          steps: int, *, offload: ActivationOffload | AbstractContextManager[Any] | None = None,
          lr: float = 0.05, loss_fn: Callable[..., torch.Tensor] = lm_loss,
          sync: Callable[[], None] | None = None) -> dict[str, Any]:
    """Train ``model`` for ``steps`` SGD steps (momentum 0.9) over ``batches`` (cycled), with
    the forward under ``offload`` when given: an :class:`ActivationOffload` or any reusable
    context manager of saved-tensor hooks (``torch.autograd.graph.save_on_cpu()``, a
    ``saved_tensors_hooks`` pair). Returns the losses and each step's wall time
    (``sync`` is called before reading the clock, e.g. ``torch.cuda.synchronize``).

    The update is written out (not ``torch.optim``, whose first use imports the compiler
    stack: seconds in every fresh process)."""
    params = [p for p in model.parameters() if p.requires_grad]
    momentum = [torch.zeros_like(p) for p in params]

    def step() -> None:
        with torch.no_grad():
            for p, buf in zip(params, momentum):
                if p.grad is not None:
                    buf.mul_(0.9).add_(p.grad)
                    p.add_(buf, alpha=-lr)
                    p.grad = None

    losses: list[float] = []
    step_ns: list[int] = []
    for i in range(steps):
        batch = batches[i % len(batches)]
        if sync is not None:
            sync()
        t0 = time.perf_counter_ns()
        if offload is not None:
            with offload:
                loss = loss_fn(model, batch)
        else:
            loss = loss_fn(model, batch)
        loss.backward()
        step()
        losses.append(float(loss.detach()))
        del loss
        if isinstance(offload, ActivationOffload):
            offload.collect()
        if sync is not None:
            sync()
        step_ns.append(time.perf_counter_ns() - t0)
    return {"losses": losses, "step_ns": step_ns}
