"""The access loop: hit, miss, make-room, eviction, write-back, prefetch, free, the suspendable
decision point and whole-trace replay, written once. :class:`Loop` is the pool's core;
:class:`allocator.pool.Pool` is its public façade (configuration, memory statistics and
snapshots, the data plane ``put``/``get``).

Every client drives this loop: the evaluator and the real allocator through :meth:`Pool.access`
(a policy object answers the eviction question), the Gymnasium environments through
:meth:`Pool.steps` (the loop stops at each eviction decision and resumes with the agent's answer).
There is no second implementation of hits, misses, eviction or accounting anywhere.

Residency of an object: ``DEVICE``, ``HOST``, in flight to the device (``H2D``) or to the host
(``D2H``, a dirty victim being written back). A dirty victim's space is reusable only once its
copy to host completes; pinned objects are never evicted; a freed object is dropped everywhere
without write-back.

Faults: a copy the backend reports failed (any exception its launch or its wait raises: its own
:class:`BackendError`, or another such as a ``MemoryError`` for a host buffer) is raised once, as
a :class:`BackendError` naming the object and the direction (the backend's error as its cause), by the first pool operation that waits for it, and the object keeps its
last good copy: a failed fetch leaves it in host memory (its new block is freed), a failed
write-back leaves it on the device, dirty, in the block it had (nothing is released). A failure
whose copy no longer matters (the object was freed, or a newer copy supersedes it) is not raised.
A hook the recovery calls (``on_insert`` after a failed write-back, ``on_evict`` after a failed
fetch) that raises is named in that error and called again before the next operation.
A policy hook that raises is raised as a :class:`PolicyError`; an event it announced beforehand
(``on_miss``, ``admit``, ``victim``, ``on_insert``, ``on_evict``, ``on_free``) is undone first
(evictions already made for it stay), one it reported afterwards (a hit, pending evictions,
prefetches) stands. Either way ``_check``'s invariants hold.

Locking: every public method takes ``_lock`` (re-entrant); all access to ``_objs``, the
placement, the clock and the stats requires it. A ``steps`` generator holds the lock from its
first ``next`` until it finishes or is closed.

This file is the only implementation of the loop. Where a C compiler is present it is compiled
by Cython in pure-Python mode (the types live in ``loop.pxd`` beside it: native integer fields,
extension-type records); elsewhere, or with ``CACHEGYM_PURE_PYTHON=1``, the same source runs
interpreted, with the same effects.
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import cython
import numpy as np

from cachegym.allocator.arena import ALIGN, Arena, ByteAccounting
from cachegym.allocator.cost import CostModel
from cachegym.allocator.errors import (
    BackendError,
    ConfigError,
    InvalidVictim,
    NotPinned,
    NotResident,
    ObjectPinned,
    ObjectTooLarge,
    PolicyError,
    PoolError,
    PoolExhausted,
    UnknownKey,
    backend_cause,
)
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
    active_hook_of,
    answering_policy,
    eviction_order_of,
    hook_of,
    optional_hooks,
    untracked_free_hook,
)
from cachegym.allocator.stats import PoolHook, PoolStats
from cachegym.allocator.trace import MAX_SIZE, MAX_TOTAL, Kind, Op, Trace

log = logging.getLogger(__name__)
_current_thread = threading.current_thread  # the thread that advances a steps() event

if TYPE_CHECKING:
    from cachegym.allocator.backends import Backend

__all__ = ["Loop", "REPLAY_CHUNK", "COMPILED", "as_key"]

COMPILED: bool = cython.compiled  # this module runs compiled (Cython), not interpreted

REPLAY_CHUNK = 1 << 16  # rows of a trace that Loop.replay converts at once
FORGET_ABOVE = 1 << 16  # forget_evicted: records a pool keeps before it forgets (see Pool)
# clean_ahead: next victims looked at after one access at most (a walk of the whole window, a
# quarter of a pool of small objects, cost more than the access itself; the next accesses look
# again as the window moves)
CLEAN_WALK = 256


_END = object()
"""The end of an iteration (:meth:`Loop._clean`)."""


def _untraced(err: BaseException) -> BaseException:
    """``err``, and the errors chained to it, without their tracebacks: a copy that failed at
    launch is held in its object's record until the copy is waited for, and compiled, records
    are not tracked by the cyclic garbage collector (``allocator/records.py``), so a
    traceback's frames (and their callers, which may hold the pool) must not hang from one.
    The message, type, key and chain are kept."""
    stack: list[BaseException | None] = [err]
    seen: set[int] = set()
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        e.__traceback__ = None
        stack += (e.__cause__, e.__context__)
    return err


def _keys_of(got: Any, hook: str) -> Any:
    """What a policy's ``hook`` (``prefetch``, ``pending_evictions``) returned, as keys: a list
    or tuple of ints as it is, any other iterable of ints as a tuple; a :class:`TypeError` that
    says what was wrong otherwise (the caller raises it as the policy's error)."""
    t = type(got)
    if t is not tuple and t is not list:
        if got is None or isinstance(got, (int, str, bytes)) or not hasattr(got, "__iter__"):
            raise TypeError(f"{hook} returned {got!r}: it must return an iterable of integer keys "
                            "(an empty tuple for none)")
        got = tuple(got)
    for k in got:
        if type(k) is not int and (isinstance(k, bool) or not isinstance(k, (int, np.integer))):
            raise TypeError(f"{hook} returned the key {k!r} of type {type(k).__name__}: keys are "
                            "integers (the pool's object keys)")
    return got


_WHERE = ("on the device", "in host memory", "in flight to the device", "being written back to host memory")
"""Where an object of each state is, for messages."""


_MAX_KIND = int(max(Kind))


def _extras(op: str, kind: Any, compute_ns: Any) -> tuple[int, int]:
    """``(kind, compute_ns)`` of a public call as ints, or :class:`ConfigError` for values a
    trace may not hold either (a negative compute time ran the clock backwards; a kind of
    another type was stored by the interpreted core and refused by the compiled one)."""
    if (type(kind) is int and type(compute_ns) is int and 0 <= kind <= _MAX_KIND
            and 0 <= compute_ns <= MAX_TOTAL):
        return kind, compute_ns
    for name, v, hi in (("kind", kind, _MAX_KIND), ("compute_ns", compute_ns, MAX_TOTAL)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v <= hi:
            raise ConfigError(f"{op}: {name}={v!r} is not allowed; give an integer from 0 to "
                              + (f"{hi} (allocator.trace.Kind)" if name == "kind" else "2**60 ns"))
    return int(kind), int(compute_ns)


def _yes(got: Any) -> bool:
    """``admit``'s answer: a bool (NumPy's too); a :class:`TypeError` otherwise (a forgotten
    ``return`` made ``None`` a refusal of every object)."""
    if got is True or got is False:
        return got  # type: ignore[no-any-return]
    if isinstance(got, np.bool_):
        return bool(got)
    raise TypeError(f"admit returned {got!r}: it must return True (admit the object) or False "
                    "(stream it: copied for this access, not kept)")


def as_key(key: Any, op: str) -> int:
    """``key`` as a key of the pool: an integer (a NumPy integer as its ``int``). A bool, a
    float or anything else is refused (:class:`ConfigError`), existing object or not: ``True``
    and ``1.0`` hash and compare equal to ``1`` and would reach object 1."""
    if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
        k = int(key)
        if -(1 << 63) <= k < (1 << 63):
            return k
        raise ConfigError(f"{op}: key {k} is outside int64 (-2**63 .. 2**63-1), the range of a "
                          "trace's key column; map larger ids first (a trace reader stores an "
                          "unsigned id above 2**63-1 as id - 2**64)")
    raise ConfigError(f"{op}: keys are integers (a trace's int64 key column), got {key!r} of type "
                      f"{type(key).__name__}")


def _check_request(op: str, new: bool, key: Any, size: Any) -> None:
    """Refuse (:class:`ConfigError`, naming ``op``) a request's size that is not an integer
    number of bytes in 1 .. :data:`MAX_SIZE`, or a key that is not an integer where the request
    would create the object (``new``: :func:`as_key`)."""
    if (not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size <= 0
            or size > MAX_SIZE):
        raise ConfigError(f"{op}: object {key!r} needs a size that is an integer number of "
                          f"bytes in 1 .. 2**48, got {size!r}")
    if new:
        as_key(key, op)


@cython.cclass
class Loop:
    """The pool's core: its state and the one access loop. Construct a
    :class:`~allocator.pool.Pool` (which checks its arguments); this class holds no public
    API of its own beyond the loop's entry points (``access``, ``steps``, ``prefetch``,
    ``free``, ``pin``, ``unpin``, ``replay``, ``snapshot``)."""

    def __init__(self, capacity: int, policy: EvictionPolicy, prefetcher: PrefetchPolicy | None,
                 cost: CostModel, backend: Backend | None, placement: str, write_through: bool,
                 bypass_oversize: bool, hook: PoolHook | None, forget_evicted: bool = False,
                 clean_ahead: int = 0) -> None:
        """The loop's state, from values :class:`~allocator.pool.Pool` has checked."""
        self.capacity = capacity
        # after each access, while fewer than _clean_ahead bytes are free and the copy-out
        # engine is idle, the dirty objects among the next victims (the policy's
        # eviction_order) up to that many bytes are written back early (_clean); 0: never
        self._clean_ahead = clean_ahead
        self._wrote = False  # whether any object was written (made dirty) yet
        self._policy = policy
        self._prefetcher = prefetcher
        self._hook = hook
        self._write_through = write_through
        self.cost = cost
        self.backend = backend
        self.placement = placement
        self.bypass_oversize = bypass_oversize
        self.stats = Counters()
        self._place: Arena | ByteAccounting = (
            Arena(self.capacity) if placement == "arena" else ByteAccounting(self.capacity)
        )
        # footprint(n) == (n + _fp_mask) & ~_fp_mask (ALIGN - 1 for the arena, 0 for bytes)
        self._fp_mask = ALIGN - 1 if placement == "arena" else 0
        self._objs: dict[int, ObjectInfo] = {}
        # forget_evicted: while the pool holds more than _forget_above records, the record of
        # an object that leaves the device (evicted, or streamed) is dropped and its key kept in
        # _seen, so that a later access is not its first (a first write copies nothing in) and
        # a free of it reaches the policy; a key is in at most one of _objs and _seen (Pool
        # checks the pool has no backend, prefetcher or hook and instant copies: nothing else of
        # such a record outlives its eviction)
        self._forget = forget_evicted
        self._forget_above = FORGET_ABOVE if forget_evicted else 0
        self._seen: set[int] = set()
        self._tick = -1
        # (done_ns, seq, key) of h2d copies in flight; (done_ns, seq, offset, nbytes, event) of
        # device blocks whose release waits for a copy out of them.
        self._landing: list[tuple[int, int, int]] = []
        self._releases: list[tuple[int, int, int, int, Any, int]] = []
        self._pending_release_bytes = 0
        # while a prefetch makes room (>= 0): the latest write-back it waits for, which its
        # copy in waits for on the copy engine instead of compute on the clock (-1: not now)
        self._defer_ns = -1
        self._inflight_bytes = 0
        self._pinned_bytes = 0  # block bytes of pinned objects: nothing can evict them
        self._seq = 0
        self._writing = False  # the access being served is a write (PoolView.writing)
        self._n_evictable = 0  # objects with state DEVICE and no pins
        self._alloc_retries = 0  # allocations that had to evict first (memory_stats)
        self._peak_allocated = 0  # peak of the bytes held by objects' blocks (memory_stats)
        self._num_ooms = 0  # PoolExhausted raised (memory_stats)
        # (hook, key) of what a recovery from a failed copy told the policy and it raised on:
        # told again before the next operation (_settle), so the policy tracks exactly the
        # objects on the device or on their way there
        self._owed: list[tuple[str, int]] = []
        self._attach_runtime()
        if backend is not None:
            backend.attach(self._place.capacity)

    # ------------------------------------------------------------------ pickle / copy (Pool.__reduce__)
    # A pool pickles (and deep-copies) with its objects, policy, clock and counters; the lock and
    # the view, which hold references into this instance, are made anew for the copy. (A backend
    # holding device memory does not pickle.)
    _STATE = ("capacity", "cost", "backend", "placement", "bypass_oversize", "stats", "_policy",
              "_prefetcher", "_hook", "_write_through", "_place", "_fp_mask", "_objs", "_tick",
              "_landing", "_releases", "_pending_release_bytes", "_inflight_bytes",
              "_pinned_bytes", "_seq", "_n_evictable", "_writing", "_owed", "_alloc_retries",
              "_peak_allocated", "_num_ooms", "_forget", "_forget_above", "_seen", "_clean_ahead",
              "_wrote")

    # made anew by _attach_runtime (the lock and what holds references into this instance)
    _RUNTIME = ("view", "_lock", "_acquire", "_release", "_fast_read",
                "_fast_write", "_touch", "_on_hit", "_on_miss", "_admit", "_due", "_deciding", "_whole",
                "_on_insert", "_on_evict", "_on_free", "_victim", "_event_thread", "_event_over",
                "_n_waiting", "_closed")

    def _refuse_while_deciding(self, op: str, reopen: bool = True) -> None:
        """Under the lock: while this pool's :meth:`steps` generator waits for a victim, refuse
        (:class:`ConfigError`) a public operation of the thread that drives it (the half-done
        event's counts would not survive it); another thread's waits until the event ends. A
        closed pool used again takes its policy back first (:meth:`_reopen`; not for an
        operation that only reads it, ``reopen=False``: a pickle)."""
        if self._closed and reopen:
            self._reopen(op)
        while self._deciding:
            if self._event_thread in (None, _current_thread()):
                raise ConfigError(f"{op}: an eviction decision of this pool is pending: a "
                                  "steps() EvictionRequest not answered yet (send it a victim or "
                                  "close the generator first), or a policy's victim() calling "
                                  "its pool (a policy reads the pool through its view; it must "
                                  "not change it)")
            self._wait_event(op)

    def _reopen(self, op: str) -> None:
        """Under the lock: the pool was closed and ``op`` uses it again (a subclass takes back
        what it gave up on closing: :meth:`Pool._reopen`)."""
        self._closed = False

    def _wait_event(self, op: str = "read") -> None:
        """Under the lock: wait (a while) for another thread's pending event to end. Re-checked
        by the callers: a notify can come before the wait, from an event the garbage collector
        closes in this very thread. An event whose thread has ended and that no other thread
        takes up within a second never ends: :class:`ConfigError` (``op`` waited forever)."""
        t = self._event_thread
        dead = t is not None and not t.is_alive()
        self._n_waiting += 1
        try:
            self._event_over.wait(1.0 if dead else 0.05)
        finally:
            self._n_waiting -= 1
        if dead and t is not None and self._deciding and self._event_thread is t:
            raise ConfigError(f"{op}: a steps() decision of this pool, begun by thread {t.name!r}, "
                              "which has ended, is pending: close that generator (g.close()) "
                              "to abandon its event, or answer it with g.send(victim)")

    def _await_event(self) -> None:
        """Under the lock: another thread's pending :meth:`steps` event ends first (a reading
        operation; the driving thread's own reads go on)."""
        while self._deciding and self._event_thread not in (None, _current_thread()):
            self._wait_event()

    def _attach_runtime(self) -> None:
        """What holds references into this instance, made by ``__init__`` and anew for a copy:
        the lock and the view."""
        self._lock = threading.RLock()
        self._acquire, self._release = self._lock.acquire, self._lock.release
        self._deciding = False  # a steps() generator waits for a victim (_make_room)
        self._closed = False  # closed (Pool.close): its next use takes its policy back
        # the thread that last advanced it (its calls are refused; a thread, not its number: a
        # new thread may take the number of one that ended)
        self._event_thread: threading.Thread | None = None
        self._event_over = threading.Condition(self._lock)  # other threads' calls wait on it
        self._n_waiting = 0  # (how many: an event's end notifies only when some wait)
        # the write being served replaces every byte of its object (Pool.put): a miss fetches
        # nothing first, as for a first write (set and cleared by put, under the lock)
        self._whole = False
        self.view = PoolView(self)
        self._refresh_fast_path()

    def _refresh_fast_path(self) -> None:
        # a plain hit (no prefetcher, no hook; a write only under write-back) takes the
        # fast path in access(): the same effects as _access_steps' hit branch
        plain = self._prefetcher is None and self._hook is None
        self._fast_read = plain
        self._fast_write = plain and not self._write_through
        policy = self._policy
        # the optional members (allocator/seams.py): ``touch`` (of the class only: a wrapper
        # forwarding attributes must not bypass its on_hit), admission control and evictions the
        # policy's own algorithm makes outside a victim request (e.g. SLRU's cascade on a hit)
        hooks = optional_hooks(policy)
        self._touch = hooks.touch
        self._on_hit = active_hook_of(policy, "on_hit")
        self._on_miss = active_hook_of(policy, "on_miss")
        # the hooks every miss calls, read once too (never skipped: called where they are no-ops)
        self._on_insert = hook_of(policy, "on_insert")
        self._on_evict = hook_of(policy, "on_evict")
        self._on_free = hook_of(policy, "on_free")
        self._victim = hook_of(policy, "victim")
        self._admit = hooks.admit
        self._due = hooks.pending_evictions

    # ------------------------------------------------------------------ public API
    def access(self, key: int, size: int, write: bool = False, *, kind: int = 0,
               compute_ns: int = 0) -> bool:
        """Read (or write) object ``key`` of ``size`` bytes; returns True on a hit.

        The object is on the device when this returns, unless it was not admitted (refused by
        the policy, or larger than an ``oversize="bypass"`` pool): then it was streamed (its
        bytes copied in for this access, and out for a write; ``stats.streamed``).
        ``compute_ns`` advances the clock after the access (the consumer's compute). Without a
        backend a miss takes the request's size (as libCacheSim); with one, ``size`` must be the
        bytes the object holds (:class:`ConfigError` otherwise: :meth:`put` stores new bytes).
        A :class:`BackendError` naming another object (its prefetch or write-back, found failed
        when its time came while this access waited) can come after this access happened: the
        access stands, and the named object is where the message says, with its bytes.
        """
        if type(key) is not int:
            key = as_key(key, "access")
        if (type(kind) is not int or type(compute_ns) is not int or kind < 0 or kind > _MAX_KIND
                or compute_ns < 0 or compute_ns > MAX_TOTAL):
            kind, compute_ns = _extras("access", kind, compute_ns)
        if type(size) is not int or size <= 0 or size > MAX_SIZE:  # (a hit checked none)
            _check_request("access", False, key, size)
        self._acquire()
        try:
            if self._deciding or self._closed:
                self._refuse_while_deciding("access")
            return self._access(key, size, write, kind, compute_ns)
        finally:
            self._release()

    def _access(self, key: int, size: int, write: bool, kind: int, compute_ns: int) -> bool:
        """:meth:`access` under the lock (held by the caller: ``access``, ``replay``)."""
        if self._owed:
            self._settle_for(key, size)
        o = self._objs.get(key)
        if (o is not None and o.state == DEVICE and (self._fast_write if write else self._fast_read)
                and (self.backend is None or o.size == size)):
            # a plain hit: _access_steps' hit branch without its generator (copies whose time
            # has come complete first, as in _begin: a view read after the hit, e.g. by a guard's
            # prefetch_for in its shadow pool, sees them landed and their blocks released)
            if self._landing or self._releases:
                self._retire()
            self._tick = tick = self._tick + 1
            st = self.stats
            st.accesses += 1
            st.hits += 1
            o.last_tick = tick
            o.n_access += 1
            o.late_ns = 0
            if o.prefetched:
                o.prefetched = False
                st.prefetch_hits += 1
            if write:
                o.dirty = True
                self._wrote = True
            self._writing = write
            touch = self._touch
            try:
                if touch is not None:
                    touch(key)
                elif self._on_hit is not None:
                    self._on_hit(self.view, key)
            except Exception as e:  # the hit stands
                raise self._policy_error(self._policy, "on_hit" if touch is None else "touch",
                                         key, e, True) from e
            if self._due is not None:
                self._evict_due(key)
            if self._clean_ahead:
                self._clean(key)
            if compute_ns:
                self.cost.compute(compute_ns)
            return True
        if self._hook is not None:
            return self._drive(self._access_steps(key, size, write, kind, compute_ns))
        # _access_steps' phases without its generator (the policy answers the evictions: those
        # of a prefetch too, _drive running the prefetch phase alone)
        o, need, old_size = self._begin(key, size, kind, write)
        if need > 0:
            place = self._place
            try:
                # no block can fit while fewer bytes than that are free: skip the attempt
                offset = place.alloc(need) if place.capacity - place.used >= need else None
                if offset is None:
                    offset = self._make_room_policy(key, size, need)
                self._insert(o, offset, need, write, old_size)
            except BaseException:
                self._undo_miss(o, size, old_size)
                raise
        if need >= 0:
            self._end(o, write, False)
        if self._landing or self._releases:
            # copies that landed while the miss waited for its own are on the device now, so
            # that what reads the view next (a guard's prefetch_for in its shadow pool, the
            # evictions due, cleaning ahead) sees them evictable, as the next access would (with
            # a backend too: decisions do not depend on one)
            self._retire()
        if self._due is not None:
            self._evict_due(key)
        if self._prefetcher is not None:  # after a streamed access too (see _access_steps)
            self._drive(self._prefetches(o, need >= 0))
        if self._clean_ahead:
            self._clean(key)
        if compute_ns:
            self.cost.compute(compute_ns)
        return need == 0

    def steps(self, key: int, size: int, op: int = Op.READ, *, kind: int = 0,
              compute_ns: int = 0) -> Generator[EvictionRequest, int, bool | None]:
        """The access loop as a generator: yields an :class:`EvictionRequest` at each eviction
        decision and expects the victim's key back through ``send``. Returns what
        :meth:`access` returns (``None`` for a free). Close it to abandon the event (the
        garbage collector closes one dropped unfinished, in any thread). While it waits for a
        victim the pool's lock is free: the thread that last advanced it may make no other call
        on the pool (refused: :class:`ConfigError`), another thread's call waits until the event
        ends (it held the lock across the wait: a generator dropped in another thread than the
        one that started it left the lock held for good)."""
        if type(key) is not int:
            key = as_key(key, "steps")
        kind, compute_ns = _extras("steps", kind, compute_ns)
        if isinstance(op, bool) or op not in (Op.READ, Op.WRITE, Op.FREE):  # (7 was a read)
            raise ConfigError(f"steps: op must be Op.READ (0), Op.WRITE (1) or Op.FREE (2), got "
                              f"{op!r}")
        if op != Op.FREE:
            _check_request("steps", False, key, size)
        with self._lock:
            self._refuse_while_deciding("steps")
            if op == Op.FREE:
                self._free(key)
                return None
            inner = self._access_steps(key, size, op == Op.WRITE, kind, compute_ns)
            try:
                req = next(inner)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            self._event_thread = _current_thread()
        ended = False
        try:
            while True:
                victim = yield req
                with self._lock:
                    try:
                        req = inner.send(victim)
                    except StopIteration as stop:
                        ended = True  # (the event's end under this hold of the lock)
                        self._event_ended()
                        return stop.value  # type: ignore[no-any-return]
                    self._event_thread = _current_thread()
        finally:
            if not ended:
                with self._lock:
                    try:
                        inner.close()  # a half-done event is undone (closed at its yield)
                    finally:
                        self._event_ended()

    def _event_ended(self) -> None:
        """Under the lock: a :meth:`steps` event ended (finished, failed or closed); the threads
        waiting for it go on."""
        if not self._deciding:  # (else another thread's event began meanwhile: it is that
            self._event_thread = None  # thread's)
        if self._n_waiting:
            self._event_over.notify_all()

    def prefetch(self, key: int, size: int | None = None) -> bool:
        """Start copying ``key`` to the device asynchronously. Returns False when it is
        already resident or in flight. An unknown key needs ``size`` (it is then created in host
        memory first, as a trace's not-yet-seen object); a known one keeps its record's size (a
        ``size`` given is checked, then not used). :class:`PoolExhausted` where nothing
        can be evicted for it: every other object pinned or still in flight (a prefetch does not
        wait for other prefetches to land; nothing is changed)."""
        key = as_key(key, "prefetch")
        with self._lock:
            self._refuse_while_deciding("prefetch")
            return self._drive(self._prefetch_steps(key, size))

    def free(self, key: int) -> None:
        """Drop ``key`` everywhere, without write-back. Raises :class:`UnknownKey`."""
        key = as_key(key, "free")
        with self._lock:
            if self._closed:  # (refused before a closed pool is taken up again: it stays closed)
                self._get(key, "free")
            self._refuse_while_deciding("free")
            self._free(key)

    def pin(self, key: int) -> None:
        """Keep ``key`` on the device until :meth:`unpin` (counted: pins nest)."""
        key = as_key(key, "pin")
        with self._lock:
            if self._closed and self._get(key, "pin").state not in (DEVICE, H2D):
                raise NotResident(key, "pin")  # (before a closed pool is taken up again)
            self._refuse_while_deciding("pin")
            o = self._get(key, "pin")
            if o.state == H2D:
                self._land(o, wait=True)
            if o.state != DEVICE:
                raise NotResident(key, "pin")
            if o.pins == 0:
                self._n_evictable -= 1
                self._pinned_bytes += o.nbytes
            o.pins += 1

    def unpin(self, key: int) -> None:
        key = as_key(key, "unpin")
        with self._lock:
            if self._closed and self._get(key, "unpin").pins == 0:
                raise NotPinned(key)  # (before a closed pool is taken up again: it stays closed)
            self._refuse_while_deciding("unpin")
            o = self._get(key, "unpin")
            if o.pins == 0:
                raise NotPinned(key)
            o.pins -= 1
            if o.pins == 0:
                self._n_evictable += 1  # (a pinned object is on the device: pin lands it)
                self._pinned_bytes -= o.nbytes

    @cython.locals(i=cython.Py_ssize_t, j=cython.Py_ssize_t, lo=cython.Py_ssize_t,
                   hi=cython.Py_ssize_t, o=cython.int, ks=list, ss=list, ops=list, cs=list, kds=list)
    def replay(self, trace: Trace, start: int = 0, stop: int | None = None) -> PoolStats:
        """Drive the access loop over rows ``start`` to ``stop`` of ``trace`` (all of it by
        default) with the pool's policies: :meth:`access` for a read or write, :meth:`free` for
        a free, row by row, then :meth:`snapshot`.

        The columns are read in chunks of :data:`REPLAY_CHUNK` rows as Python integers (one
        conversion per chunk, not one NumPy scalar per field and row), and the lock is held for
        the whole replay. A policy's error (:class:`PolicyError`,
        :class:`InvalidVictim`) or the pool's (:class:`PoolError`: an object larger than the
        pool, no room left beside pinned objects) carries the row it was raised at as ``row``
        (the rows before it were replayed).
        """
        if not isinstance(trace, Trace):
            raise ConfigError(f"replay takes a Trace (cachegym.read_trace(path), "
                              f"Trace.from_arrays(keys, sizes)), got a {type(trace).__name__}")
        n = len(trace)
        stop = n if stop is None else stop
        if not (isinstance(start, (int, np.integer)) and isinstance(stop, (int, np.integer))
                and 0 <= start <= stop <= n):
            raise ConfigError(f"replay: rows {start!r}..{stop!r} are not a range of the trace's "
                              f"{n} rows; pass 0 <= start <= stop <= {n}")
        key, size, op, comp, kind = trace.key, trace.size, trace.op, trace.compute_ns, trace.kind
        with self._lock:
            self._refuse_while_deciding("replay")
            i = int(start)
            try:
                for lo in range(int(start), int(stop), REPLAY_CHUNK):
                    hi = min(lo + REPLAY_CHUNK, int(stop))
                    ks, ss, ops = key[lo:hi].tolist(), size[lo:hi].tolist(), op[lo:hi].tolist()
                    cs, kds = comp[lo:hi].tolist(), kind[lo:hi].tolist()
                    for j in range(hi - lo):
                        i = lo + j
                        o = ops[j]
                        if o == 2:  # Op.FREE (the inner entries: the lock is held)
                            self._free(ks[j])
                        else:
                            self._access(ks[j], ss[j], o == 1, kds[j], cs[j])  # o == Op.WRITE
            except (PolicyError, PoolError) as e:  # name the row (i): the rows before it stand
                e.row = i
                raise
            return self.snapshot()

    def snapshot(self) -> PoolStats:
        """A copy of the statistics with the derived fields filled in."""
        with self._lock:
            self._await_event()
            st = self.stats
            st.stall_ns = self.cost.stall_ns
            st.compute_ns = self.cost.compute_ns
            st.total_ns = self.cost.now
            st.device_bytes = self._place.used - self._due_release_bytes()  # (copied out: free)
            st.fragmentation = self._place.fragmentation
            return st.snapshot()

    # ------------------------------------------------------------------ the loop
    def _drive(self, gen: Generator[EvictionRequest, int, Any]) -> Any:
        """Run a step generator, answering every eviction request with the policy."""
        policy, view = self._policy, self.view
        try:
            req = next(gen)
            while True:
                try:
                    victim = policy.victim(view)
                except Exception as e:  # the loop undoes its half-done event (gen.close)
                    raise self._policy_error(policy, "victim", req.key, e, False) from e
                try:
                    req = gen.send(victim)  # type: ignore[arg-type]
                except InvalidVictim as e:
                    raise e.chosen_by(policy) from None
        except StopIteration as stop:
            return stop.value
        finally:
            gen.close()  # a policy that raised: the loop undoes its half-done event now

    # An access runs in phases: _begin (hit, or the miss's counters and object), room (place it,
    # evicting through _make_room while it does not fit), _insert (fetch or allocate), _end
    # (recency, dirty, write-through), then prefetches and compute. _access_steps is the
    # generator form (an outside driver answers the evictions); access() runs the same phases
    # without a generator (the policy answers the evictions), the prefetch phase through _drive.
    def _access_steps(self, key: int, size: int, write: bool, kind: int, compute_ns: int,
                      defer_wt: bool = False, tail: bool = True
                      ) -> Generator[EvictionRequest, int, bool]:
        if self._owed:
            self._settle_for(key, size)
        o, need, old_size = self._begin(key, size, kind, write)
        if need > 0:
            try:
                offset = self._place.alloc(need)
                if offset is None:
                    offset = yield from self._make_room(key, size, need)
                self._insert(o, offset, need, write, old_size)
            except BaseException:
                self._undo_miss(o, size, old_size)
                raise
        if need >= 0:
            self._end(o, write, defer_wt)
        if not tail:  # put: the caller writes the bytes first, then runs the phases below
            return need == 0
        if self._landing or self._releases:
            self._retire()  # (what landed while the access waited: see access())
        if self._due is not None:  # (after a bypass too, as access() does)
            self._evict_due(key)
        if self._prefetcher is not None:  # after a streamed access too: a prefetcher that
            yield from self._prefetches(o, need >= 0)  # learns the order sees all of it
        if self._clean_ahead:
            self._clean(key)
        if compute_ns:
            self.cost.compute(compute_ns)
        return need == 0

    def _begin(self, key: int, size: int, kind: int, write: bool) -> tuple[ObjectInfo, int, int]:
        """Count the access (a write if ``write``); a hit is complete here. Returns ``(object,
        need, old_size)``: ``need`` 0 for a hit, -1 for a bypassed miss, else the footprint to
        place; ``old_size`` -1 when the miss created the object."""
        if self.backend is not None:  # real bytes: an access does not resize them
            o = self._objs.get(key)
            if o is not None and o.size != size:
                raise ConfigError(f"access: object {key} holds {o.size} bytes in this pool's "
                                  f"backend; an access of {size!r} bytes would cut or pad them: "
                                  f"access it with size {o.size}, or store new bytes with "
                                  "put(key, data)")
        self._writing = write
        if self._landing or self._releases:
            self._retire()
        st = self.stats
        o = self._objs.get(key)
        if o is not None and o.state in (DEVICE, H2D):
            landing = o.state == H2D
            o.late_ns = 0
            if landing:  # (a failed copy raises here: the object is in host memory, no hit)
                self._land(o, wait=True)
            self._tick += 1
            st.accesses += 1
            st.hits += 1
            if not landing and o.prefetched:
                st.prefetch_hits += 1
            o.prefetched = False
            try:
                if self._on_hit is not None:
                    self._on_hit(self.view, key)
            except Exception as e:  # the hit stands
                raise self._policy_error(self._policy, "on_hit", key, e, True) from e
            if self._hook is not None:
                self._emit("hit", o)
            return o, 0, 0
        need = self._check_miss(o, key, size)
        size = int(size)  # a NumPy integer is counted as a Python int from here on
        if o is None and self._forget and key in self._seen:
            o = self._recall(key, size, kind)  # known, in host memory: not a first access
        place = self._place
        if o is not None and o.d2h_event is not None:
            self._wait_written_back(o)  # before it is fetched (may raise: nothing counted yet)
        self._tick += 1
        st.accesses += 1
        st.misses += 1
        st.byte_misses += size
        if o is None:
            old_size = -1
            o = ObjectInfo(key, size, kind, self._tick)
            self._objs[key] = o
        else:
            old_size = o.size
            o.late_ns = 0
            o.size = size  # libCacheSim: a miss inserts with the request's size
        hook = "on_miss"
        try:
            if self._on_miss is not None:
                self._on_miss(self.view, key)
            hook = "admit"
            refused = need > place.capacity or (
                self._admit is not None and not _yes(self._admit(self.view, key, size)))
        except BaseException as e:
            self._undo_miss(o, size, old_size)
            if isinstance(e, Exception):
                raise self._policy_error(self._policy, hook, key, e, False) from e
            raise
        if refused:
            st.streamed += 1
            self._stream(o, write, old_size < 0)
            if self._hook is not None:
                self._emit("streamed", o)
            o.n_access += 1
            o.last_tick = self._tick
            if self._forget and len(self._objs) > self._forget_above:
                self._forget_record(o)
            return o, -1, old_size
        return o, need, old_size

    def _check_miss(self, o: ObjectInfo | None, key: int, size: int) -> int:
        """The footprint a miss of ``key`` (record ``o``, ``None`` for a new object) of ``size``
        bytes needs; raises, changing nothing, when the caller may not make the request: a size
        that is not an integer number of bytes > 0, a new key that is not an integer, an object
        larger than the pool (unless it bypasses them)."""
        _check_request("access", o is None, key, size)
        need = (int(size) + self._fp_mask) & ~self._fp_mask  # place.footprint(size), without the call
        if need > self._place.capacity and not self.bypass_oversize:
            raise ObjectTooLarge(key, int(size), self._place.capacity, self.capacity)
        return need

    def _settle_for(self, key: int, size: int) -> None:
        """:meth:`_settle` before an access of ``key``, after refusing (changing nothing, the
        owed hooks still owed) a miss the caller may not make, so that its error names the
        caller's fault rather than the policy's."""
        o = self._objs.get(key)
        if o is None or o.state not in (DEVICE, H2D):
            self._check_miss(o, key, size)
        self._settle()

    def _stream(self, o: ObjectInfo, write: bool, created: bool) -> None:
        """Serve a miss whose object is not admitted (refused by the policy, or larger than
        the pool) by streaming, the accounting of :meth:`_insert`'s fetch and of a
        write-through without a block: a read or read-modify-write copies the object's bytes
        host-to-device (the consumer waits for them as for a demand miss), a write then sends
        them device-to-host; nothing stays resident. A first write, or one that replaces every
        byte (:meth:`Pool.put <allocator.pool.Pool.put>`), copies nothing in. With a
        backend, :meth:`get` and :meth:`put` move the real bytes (``Backend.stream_in`` /
        ``stream_out``); the counts are the same with and without one."""
        st = self.stats
        cost = self.cost
        if not (write and (created or self._whole)):
            done = cost.copy(0, o.size, o.busy_until)
            st.bytes_h2d += o.size
            if done > cost.now:
                cost.wait_until(done)
        if write:
            o.busy_until = cost.copy(1, o.size, o.busy_until)
            st.bytes_d2h += o.size
            o.dirty = False

    def _undo_miss(self, o: ObjectInfo, size: int, old_size: int) -> None:
        """No room could be made (or the fetch or a hook failed): the event did not happen
        (evictions it made did, and stay)."""
        if old_size < 0:
            del self._objs[o.key]
            if self.backend is not None:  # a failed fetch may have made its host buffer
                self.backend.free_host(o.key)
        else:
            o.size = old_size
        self._tick -= 1
        st = self.stats
        st.accesses -= 1
        st.misses -= 1
        st.byte_misses -= int(size)

    def _insert(self, o: ObjectInfo, offset: int, need: int, write: bool, old_size: int) -> None:
        """The missed object lands in its block: allocated (a first write) or fetched. A failed
        fetch or a raising ``on_insert`` gives the block back and leaves ``o`` as it was (the
        caller undoes the miss)."""
        prev = o.state
        self._place_obj(o, offset, need)
        st = self.stats
        if write and (old_size < 0 or self._whole):
            st.allocations += 1  # a first write (or a whole one: put) allocates without a copy
        else:
            # demand fetch; it waits for a write-back of the same object still in flight
            cost = self.cost
            if cost.instant:
                done = o.busy_until if o.busy_until > cost.now else cost.now
            else:
                done = cost.copy(0, o.size, o.busy_until)
            if self.backend is None:
                st.bytes_h2d += o.size
                o.ready_ns = done
            else:
                self._h2d(o, done)
            if done > cost.now:
                cost.wait_until(done)
            ev = o.h2d_event
            if ev is not None:
                o.h2d_event = None
                err = self._wait_copy(ev)
                if err is not None:
                    self._place.release(offset, need)
                    o.offset, o.nbytes = -1, 0
                    st.bytes_h2d -= o.size  # (the copy did not happen)
                    raise self._copy_error(o.key, "h2d", err) from err
        o.state = DEVICE
        self._n_evictable += 1
        try:
            self._on_insert(self.view, o.key)
        except BaseException as e:
            o.state = prev
            self._n_evictable -= 1
            self._place.release(offset, need)
            o.offset, o.nbytes = -1, 0
            if isinstance(e, Exception):
                raise self._policy_error(self._policy, "on_insert", o.key, e, False) from e
            raise
        if self._hook is not None:
            self._emit("miss", o)

    def _end(self, o: ObjectInfo, write: bool, defer_wt: bool) -> None:
        o.n_access += 1
        o.last_tick = self._tick
        if write:
            o.dirty = True
            self._wrote = True
            if self._write_through and not defer_wt:
                self._copy_out(o)
                o.dirty = False

    def _prefetches(self, o: ObjectInfo, hold: bool = True) -> Generator[EvictionRequest, int, None]:
        """Ask the prefetch policy after the access of ``o`` and start its prefetches. The
        accessed object is held (as if pinned) so that its prefetches cannot evict it;
        ``hold`` False: it was streamed (in host memory, nothing to hold)."""
        assert self._prefetcher is not None
        if not hold:  # (the key itself is not prefetched: the policy has just refused it)
            yield from self._prefetched(o.key, o.key)
            return
        if o.pins == 0:
            self._n_evictable -= 1
            self._pinned_bytes += o.nbytes
        o.pins += 1
        try:
            yield from self._prefetched(o.key)
        finally:
            o.pins -= 1
            if o.pins == 0:
                self._n_evictable += 1
                self._pinned_bytes -= o.nbytes

    def _prefetched(self, key: int, skip: Any = None) -> Generator[EvictionRequest, int, None]:
        """The prefetch policy's keys after the access of ``key``, each prefetched (but
        ``skip``)."""
        assert self._prefetcher is not None
        if self._landing or self._releases:
            # the prefetcher and its do-no-harm walk see what landed while the access waited
            # as on the device and evictable (as _prefetch_steps will): else an object used
            # sooner, still counted in flight, was passed over by the walk and then evicted
            self._retire()
        try:
            keys = _keys_of(self._prefetcher.prefetch(self.view, key), "prefetch")
        except PolicyError:  # the eviction policy's, met through the view (its eviction_order)
            raise
        except Exception as e:  # the access stands
            raise self._policy_error(self._prefetcher, "prefetch", key, e, True) from e
        for k in keys:
            po = self._objs.get(k)
            if po is not None and po.state in (HOST, D2H) and k != skip:
                try:
                    yield from self._prefetch_steps(k, None)
                except PoolExhausted:
                    break  # a prefetch is a hint: no room now, the access stands

    def _prefetch_steps(self, key: int, size: int | None) -> Generator[EvictionRequest, int, bool]:
        if size is not None:  # the caller's fault is refused before anything is told or done
            _check_request("prefetch", True, key, size)  # (a known key's record keeps its size)
        elif key not in self._objs:
            if self._forget and key in self._seen:
                raise ConfigError(f"prefetch: the pool forgot object {key!r} when it left the "
                                  "device (forget_evicted=True); pass its size")
            raise UnknownKey(key, "prefetch")
        if self._owed:
            self._settle()
        self._retire()
        o = self._objs.get(key)
        if o is None and self._forget and key in self._seen:
            o = self._recall(key, int(size), 0)  # type: ignore[arg-type]
        created = o is None
        if o is None:
            assert size is not None  # (checked above: settling and retiring remove no record)
            o = ObjectInfo(key, int(size), 0, self._tick)
        if o.state in (DEVICE, H2D):
            return False
        need = self._place.footprint(o.size)
        if need > self._place.capacity:
            if self.bypass_oversize:
                return False
            raise ObjectTooLarge(key, o.size, self._place.capacity, self.capacity)
        # beside the pinned blocks, the prefetches in flight: a prefetch waits for none to land
        # (a write-back waited for lets time, and them, land)
        self._beside_pinned(o.size, need, 0 if self._releases else self._inflight_bytes)
        if o.d2h_event is not None:
            self._wait_written_back(o)  # before it is fetched (may raise: nothing done yet)
        if created:
            self._objs[key] = o
        try:
            # the room a prefetch makes is not waited for by compute: where it comes from a
            # dirty victim's write-back, the copy in queues behind it on the copy engines (a
            # stream dependency), as a device runs them
            self._defer_ns = 0
            try:
                offset = yield from self._make_room(key, o.size, need)
            finally:
                after, self._defer_ns = self._defer_ns, -1
            self._place_obj(o, offset, need)
            prev = o.state
            done = self.cost.copy(0, o.size, not_before=max(o.busy_until, after))
            self._h2d(o, done)
            o.prefetched = True
            self.stats.prefetches += 1
            if done <= self.cost.now:
                ev = o.h2d_event
                if ev is not None:
                    o.h2d_event = None
                    err = self._wait_copy(ev)
                    if err is not None:
                        self._unprefetch(o)
                        self.stats.bytes_h2d -= o.size  # (the copy did not happen)
                        raise self._copy_error(key, "h2d", err) from err
                o.state = DEVICE
                self._n_evictable += 1
            else:
                o.state = H2D
                self._inflight_bytes += o.size
                self._seq += 1
                heapq.heappush(self._landing, (done, self._seq, key))
            try:
                self._policy.on_insert(self.view, key)
            except BaseException as e:
                if o.state == H2D:
                    self._inflight_bytes -= o.size
                    ev = o.h2d_event  # the copy into the block ends before the block is reused
                    if ev is not None:
                        o.h2d_event = None
                        self._wait_copy(ev)
                else:
                    self._n_evictable -= 1
                o.state = prev
                self._unprefetch(o)
                if isinstance(e, Exception):
                    raise self._policy_error(self._policy, "on_insert", key, e, False) from e
                raise
        except BaseException:
            if created:
                del self._objs[key]
                if self.backend is not None:
                    self.backend.free_host(key)
            raise
        self._emit("prefetch", o)
        return True

    def _unprefetch(self, o: ObjectInfo) -> None:
        """Undo a prefetch of ``o`` that did not happen (its copy is over): its block is free."""
        self._place.release(o.offset, o.nbytes)
        o.offset, o.nbytes = -1, 0
        o.prefetched = False
        self.stats.prefetches -= 1

    # Making room: _room_step is the loop's body (place, or wait for copies in flight, or say
    # that a victim is needed); _make_room drives it as a generator (the victim comes from
    # whoever drives Pool.steps); _make_room_policy drives it with the policy's answers.
    def _make_room_policy(self, key: int, size: int, need: int) -> int:
        """:meth:`_make_room` for object ``key``, answered by the eviction policy, without a
        generator (called after an allocation failed)."""
        victim, view, place = self._victim, self.view, self._place
        self._beside_pinned(size, need)
        # shortcut of _room_step(size, need, False) when nothing is in flight to wait for
        off = -1 if self._n_evictable and not self._releases else self._room_step(size, need, False)
        if off < 0:
            self._alloc_retries += 1
        while off < 0:
            self._deciding = True  # (a victim() calling the pool back is refused meanwhile)
            try:
                v = victim(view)
            except Exception as e:  # the caller undoes the miss
                raise self._policy_error(self._policy, "victim", key, e, False) from e
            finally:
                self._deciding = False
            try:
                self._evict(v)
            except InvalidVictim as e:
                raise e.chosen_by(self._policy) from None
            got = place.alloc(need)  # _room_step's first move, without the call
            off = self._room_step(size, need, False) if got is None else got
        return off

    def _make_room(self, key: int, size: int, need: int) -> Generator[EvictionRequest, int, int]:
        """Evict (asking whoever drives the generator) until ``need`` bytes fit."""
        self._beside_pinned(size, need)
        first = True
        while True:
            off = self._room_step(size, need)
            if off >= 0:
                return off
            if first:
                self._alloc_retries += 1
                first = False
            self._deciding = True  # (the pool's public operations are refused meanwhile)
            try:
                victim = yield EvictionRequest(key, size, need, self.view)
            finally:
                self._deciding = False
            self._evict(victim)

    def _beside_pinned(self, size: int, need: int, in_flight: int = 0) -> None:
        """Refuse (:class:`PoolExhausted`), before anything is evicted, ``need`` bytes that
        cannot fit beside the pinned blocks (and ``in_flight`` bytes a prefetch does not wait
        for) whatever is evicted (it evicted every evictable object first, then raised: a
        refused call changed the pool)."""
        stuck = self._pinned_bytes + in_flight
        if self._place.capacity - stuck < need:
            self._oom(size)
            raise PoolExhausted(size, stuck, self._place.capacity,
                                "the pinned objects leave too little room, whatever is evicted"
                                if not in_flight else "a prefetch does not wait for the "
                                "prefetches in flight to land")

    def _room_step(self, size: int, need: int, try_alloc: bool = True) -> int:
        """The offset of a block of ``need`` bytes once one is free, waiting for copies in
        flight where only they can free space (a write-back's release; a landing prefetch only
        for a demand access: a prefetch waits for no other, :class:`PoolExhausted`); -1 when a
        victim must be evicted first."""
        place = self._place
        while True:
            if try_alloc:
                off = place.alloc(need)
                if off is not None:
                    return off
            try_alloc = True
            if self._releases and (place.free_bytes + self._pending_release_bytes >= need
                                   or self._n_evictable == 0):
                self._wait_release()  # a write-back in flight frees enough: wait for it
                continue
            if self._n_evictable:
                return -1
            self._retire()
            if self._n_evictable:
                continue
            if self._landing and self._defer_ns < 0:  # (a prefetch waits for no other)
                self._wait_landing()
                continue
            self._oom(size)
            raise PoolExhausted(size, place.used, place.capacity,
                                "nothing resident can be evicted" if not self._landing else
                                "nothing resident can be evicted, and a prefetch does not wait "
                                "for the prefetches in flight to land")

    def _evict_due(self, accessed: int) -> None:
        """Evict what the policy's algorithm has already given up (``pending_evictions``),
        except the object just accessed: it stays on the device until the next event."""
        assert self._due is not None
        objs = self._objs
        try:
            due = _keys_of(self._due(), "pending_evictions")
        except Exception as e:  # the access stands
            raise self._policy_error(self._policy, "pending_evictions", accessed, e, True) from e
        for k in due:
            o = objs.get(k)
            if o is not None and k != accessed and o.evictable():
                self._evict(k)

    def _evict(self, victim: Any) -> None:
        if type(victim) is int:
            o = self._objs.get(victim)
        elif victim is None:
            raise InvalidVictim(victim, "the policy returned None although evictable objects exist")
        elif isinstance(victim, bool):  # (an int to the test below)
            raise InvalidVictim(victim, "a bool is not a key")
        elif isinstance(victim, (int, np.integer)):
            o = self._objs.get(int(victim))
        else:
            raise InvalidVictim(victim, f"it is a {type(victim).__name__}: keys are integers (the "
                                "pool's object keys)")
        if o is None:
            raise InvalidVictim(victim, "it names no live object")
        if not o.evictable():
            if o.state != DEVICE:
                raise InvalidVictim(victim, f"it is not resident ({_WHERE[o.state]})")
            raise InvalidVictim(victim, "it is pinned")
        st = self.stats
        st.evictions += 1
        self._n_evictable -= 1
        prefetched = o.prefetched
        if prefetched:
            st.useless_prefetches += 1
            o.prefetched = False
        try:
            self._on_evict(self.view, o.key)
        except BaseException as e:  # the eviction did not happen
            st.evictions -= 1
            self._n_evictable += 1
            if prefetched:
                st.useless_prefetches -= 1
                o.prefetched = True
            if isinstance(e, Exception):
                raise self._policy_error(self._policy, "on_evict", o.key, e, False) from e
            raise
        if o.dirty:
            st.writebacks += 1
            self._copy_out(o)
            o.dirty = False
            o.state = D2H
        else:
            o.state = HOST
        if self._hook is not None:  # (before its block goes: the event names the block)
            self._emit("evict", o)
        self._release_block(o)
        if self._forget and o.state == HOST and len(self._objs) > self._forget_above:
            self._forget_record(o)

    def _clean(self, accessed: int) -> None:
        """Write back early the dirty objects among the next victims: while fewer than
        ``_clean_ahead`` bytes are free and the copy-out engine is idle, the objects the policy
        would give up next (its ``eviction_order``), up to the bytes missing, are made clean,
        so that evicting them later waits for no copy (an activation saved in the forward pass
        is copied out while compute runs, not when the next save needs its room). Each such
        copy counts as a write-back; an object written again is dirty again. A policy without
        an ``eviction_order`` cleans nothing, nor does a pool whose copies take no time. The
        object ``accessed`` is not cleaned: a writer may fill its block after the access
        returns (``ActivationOffload`` copies a saved tensor in after ``access(write=True)``;
        S3-FIFO and SLRU list a new object among their next victims). Nothing is looked at
        before the pool's first write (nothing can be dirty), and at most :data:`CLEAN_WALK`
        next victims after one access."""
        if not self._wrote:
            return
        cost = self.cost
        if cost.instant or cost.busy_until(1) > cost.now:
            return  # (no time to save; a copy queued now would delay the demand ones behind it)
        place = self._place
        # free: the blocks whose copy-out has finished count, though their release is applied
        # at the next allocation (with the engine idle, every copy out has)
        short = self._clean_ahead - (place.capacity - place.used + self._due_release_bytes())
        if short <= 0:
            return
        order = eviction_order_of(self._policy)
        if order is None:
            return
        objs, st = self._objs, self.stats
        walk = CLEAN_WALK
        try:
            keys = iter(order())
        except Exception as e:  # the access stands
            raise self._policy_error(self._policy, "eviction_order", accessed, e, True) from e
        while True:
            walk -= 1
            if walk < 0:
                return
            try:
                k = next(keys, _END)
                if k is _END:
                    return
                o = objs.get(k)  # type: ignore[call-overload]
            except Exception as e:  # (an unhashable key too) the access stands
                raise self._policy_error(self._policy, "eviction_order", accessed, e, True) from e
            if o is None or o.state != DEVICE or o.pins or k == accessed:
                continue
            if o.dirty:
                st.writebacks += 1
                self._copy_out(o)
                o.dirty = False
            short -= o.nbytes
            if short <= 0:
                return

    def _copy_out(self, o: ObjectInfo) -> None:
        """Start a device-to-host copy of ``o``'s block (write-back or write-through)."""
        done = self.cost.copy(1, o.size, not_before=o.busy_until)
        o.busy_until = done
        self.stats.bytes_d2h += o.size
        if self._hook is not None:
            self._emit("writeback", o)
        be = self.backend
        if be is not None:
            ev = o.d2h_event
            if ev is not None:  # (this copy supersedes it: its failure does not matter)
                self._wait_copy(ev)
            try:
                o.d2h_event = be.copy_d2h(o.key, o.offset, o.size)
            except Exception as e:  # reported where the copy is waited for, as any failure (a
                o.d2h_event = _untraced(e)  # backend's own error or any other, e.g. MemoryError)

    def _release_block(self, o: ObjectInfo) -> None:
        """Give ``o``'s block back, now or when copies out of (or into) it complete."""
        off, nb = o.offset, o.nbytes
        o.offset, o.nbytes = -1, 0
        done = o.busy_until
        if o.state == H2D and o.ready_ns > done:
            done = o.ready_ns
        ev = o.d2h_event
        if done > self.cost.now:
            self._seq += 1
            heapq.heappush(self._releases, (done, self._seq, off, nb, ev, o.key))
            self._pending_release_bytes += nb
        else:
            if ev is not None:
                if self._objs.get(o.key) is o:
                    self._copied_out(o, ev, off, nb)  # a failure keeps the block: it raises
                else:  # freed: a failure does not matter
                    self._wait_copy(ev)
            self._place.release(off, nb)
            if self._hook is not None:
                self._emit_release(o.key, off, nb)
            if o.state == D2H:  # its write-back is already complete (e.g. instant copies)
                o.state = HOST

    def _place_obj(self, o: ObjectInfo, offset: int, need: int) -> None:
        """``o`` takes the block at ``offset`` of ``need`` bytes: the device's and the
        allocations' peaks follow."""
        o.offset, o.nbytes = offset, need
        used = self._place.used
        if used > self.stats.peak_device_bytes:
            self.stats.peak_device_bytes = used
        self._note_allocated()

    def _note_allocated(self) -> None:
        """Raise the peak of the bytes held by objects (``allocated_bytes.all.peak``): called
        where an object takes a block (:meth:`_place_obj`)."""
        held = self._place.used - self._pending_release_bytes
        if held > self._peak_allocated:
            self._peak_allocated = held

    def _h2d(self, o: ObjectInfo, done: int) -> None:
        self.stats.bytes_h2d += o.size
        o.ready_ns = done
        be = self.backend
        if be is not None:
            # (the host copy is complete: _begin and _prefetch_steps waited for o.d2h_event)
            try:
                o.h2d_event = be.copy_h2d(o.key, o.offset, o.size)
            except Exception as e:  # reported where the copy is waited for, as any failure
                o.h2d_event = _untraced(e)

    def _landed(self, o: ObjectInfo) -> None:
        """``o``'s prefetch lands (its time has come): H2D -> DEVICE once the backend's copy
        is done; a failed copy leaves ``o`` in host memory and raises."""
        ev = o.h2d_event
        if ev is not None:
            o.h2d_event = None
            err = self._wait_copy(ev)
            if err is not None:
                self._fetch_failed(o, err)
        self._to_device(o)

    def _fetch_failed(self, o: ObjectInfo, err: BaseException) -> None:
        """The prefetch of ``o`` (in flight, tracked by the policy) failed: it is in host
        memory again (its host copy is the good one), its block is free, its copy not counted;
        raises."""
        self._inflight_bytes -= o.size
        self.stats.bytes_h2d -= o.size
        self._place.release(o.offset, o.nbytes)  # the copy into it is over
        if self._hook is not None:
            self._emit_release(o.key, o.offset, o.nbytes)
        o.offset, o.nbytes = -1, 0
        o.state = HOST
        o.prefetched = False
        try:
            self._policy.on_evict(self.view, o.key)  # it leaves the device: the policy forgets it
        except Exception as e:
            self._owed.append(("on_evict", o.key))
            raise self._owed_error("on_evict", o.key, e, err, "h2d") from err  # (context: e)
        raise self._copy_error(o.key, "h2d", err) from err

    def _land(self, o: ObjectInfo, wait: bool) -> None:
        """An in-flight prefetch of ``o`` is consumed: late if it has not landed yet."""
        if o.state != H2D:
            return
        if wait and o.ready_ns > self.cost.now:
            self.stats.late_prefetches += 1
            o.late_ns = self.cost.wait_until(o.ready_ns)
            self.stats.late_stall_ns += o.late_ns
        self._landed(o)
        o.prefetched = False

    def _to_device(self, o: ObjectInfo) -> None:
        """H2D -> DEVICE (a prefetch landed)."""
        o.state = DEVICE
        self._inflight_bytes -= o.size
        if o.pins == 0:
            self._n_evictable += 1

    def _retire(self) -> None:
        """Complete every copy whose simulated time has come."""
        now = self.cost.now
        landing = self._landing
        while landing and landing[0][0] <= now:
            _, _, k = heapq.heappop(landing)
            o = self._objs.get(k)
            if o is not None and o.state == H2D and o.ready_ns <= now:
                self._landed(o)
        rel = self._releases
        while rel and rel[0][0] <= now:
            self._pop_release()

    def _due_release_bytes(self) -> int:
        """Bytes of the blocks whose copy-out has finished by now (free, though :meth:`_retire`
        applies their release only at the next allocation or wait)."""
        now = self.cost.now
        due = 0
        for r in self._releases:
            if r[0] <= now:
                due += r[3]
        return due

    def _pop_release(self) -> None:
        done, _, off, nb, ev, key = heapq.heappop(self._releases)
        self._pending_release_bytes -= nb
        o = self._objs.get(key)
        if ev is not None:
            if o is not None:
                self._copied_out(o, ev, off, nb)  # a failure keeps the block: it raises
            else:  # freed: a failure does not matter
                self._wait_copy(ev)
        self._place.release(off, nb)
        if self._hook is not None:
            self._emit_release(key, off, nb)
        if o is not None and o.state == D2H and o.busy_until <= done:
            o.state = HOST

    def _wait_release(self) -> None:
        """Wait for the earliest write-back in flight, whose block is then free; while a
        prefetch makes room (``_defer_ns >= 0``) compute does not wait: the block is given now
        and the prefetch's copy starts after the write-back (``_defer_ns``)."""
        t = self._releases[0][0]
        if self._defer_ns >= 0:
            if t > self._defer_ns:
                self._defer_ns = t
            self._pop_release()
        else:
            self.cost.wait_until(t)
        self._retire()

    def _wait_landing(self) -> None:
        """Wait for the earliest prefetch in flight (nothing else can make room)."""
        while self._landing:
            _, _, k = heapq.heappop(self._landing)
            o = self._objs.get(k)
            if o is not None and o.state == H2D:
                self.cost.wait_until(o.ready_ns)
                self._landed(o)
                return

    def _wait_all(self) -> None:
        """Wait (on the clock and in the backend) until every copy has completed."""
        cost = self.cost
        cost.wait_until(max(cost.busy_until(0), cost.busy_until(1)))
        if self._landing:
            cost.wait_until(max(t for t, _, _ in self._landing))
        if self._releases:
            cost.wait_until(max(r[0] for r in self._releases))
        self._retire()
        if self.backend is not None:
            self.backend.synchronize()

    def _free(self, key: int) -> None:
        # a free the caller may not make is refused first (it changes nothing: what is owed to
        # the policy is told at the next operation), so that its error names the caller's fault
        o = self._objs.get(key)
        if o is None:
            if not (self._forget and key in self._seen):
                raise UnknownKey(key, "free")
            o = self._recall(key, 0, 0)  # in host memory: freed as such below (record and all)
        if o.pins:
            raise ObjectPinned(key, o.pins, "free")
        if self._owed:
            self._settle()
        self._tick += 1
        st = self.stats
        st.frees += 1
        del self._objs[key]
        tracked = o.state in (DEVICE, H2D)
        hook = "on_free"
        try:
            if tracked:
                if o.prefetched:
                    st.useless_prefetches += 1
                if o.state == H2D:
                    self._inflight_bytes -= o.size
                else:
                    self._n_evictable -= 1
                self._on_free(self.view, key)
            else:  # in host memory only: a policy with a cache model of its own may still hold it
                hook = "on_free_untracked"
                untracked = untracked_free_hook(self._policy)
                if untracked is not None:
                    untracked(self.view, key)
        except BaseException as e:  # the free did not happen
            self._objs[key] = o
            self._tick -= 1
            st.frees -= 1
            if tracked:
                if o.prefetched:
                    st.useless_prefetches -= 1
                if o.state == H2D:
                    self._inflight_bytes += o.size
                else:
                    self._n_evictable += 1
            if isinstance(e, Exception):
                raise self._policy_error(self._policy, hook, key, e, False) from e
            raise
        if self._hook is not None:  # (before its block goes: the event names the block)
            self._emit("free", o)
        if tracked:
            self._release_block(o)
        if self.backend is not None:
            for ev in (o.h2d_event, o.d2h_event):
                if ev is not None:  # its bytes are dropped: a failed copy does not matter
                    self._wait_copy(ev)
            self.backend.free_host(key)

    # ------------------------------------------------------------------ faults
    def _wait_copy(self, ev: Any) -> BaseException | None:
        """Wait for the backend's copy ``ev``; its error, or ``None`` when it succeeded. (A
        copy that could not start is held as its error.)"""
        if isinstance(ev, BaseException):
            return ev
        be = self.backend
        assert be is not None  # only a backend's copies have events
        try:
            be.wait(ev)
        except Exception as e:  # (any error of the backend's: the caller raises it as a BackendError)
            return e
        return None

    def _copied_out(self, o: ObjectInfo, ev: Any, off: int, nb: int) -> None:
        """The copy ``ev`` out of ``o``'s former block ``(off, nb)`` (released once it
        completes) is done. When it is ``o``'s latest copy to host and failed, ``o`` goes back
        to that block, dirty, and the failure is raised; otherwise a failure does not matter."""
        err = self._wait_copy(ev)
        if o.d2h_event is not ev:
            return  # superseded (the object was fetched again since, or copied anew)
        o.d2h_event = None
        if err is not None:
            self._writeback_failed(o, off, nb, err)

    def _wait_written_back(self, o: ObjectInfo) -> None:
        """Wait for the copy to host of ``o`` (in host memory, or on its way there) before it
        is fetched again. A failure puts ``o`` back in its block (still held, waiting for
        that copy) and raises."""
        ev = o.d2h_event
        o.d2h_event = None
        err = self._wait_copy(ev)
        if err is None:
            return
        rel = self._releases
        for i in range(len(rel)):
            if rel[i][4] is ev:
                _, _, off, nb, _, _ = rel[i]
                rel[i] = rel[-1]
                rel.pop()
                heapq.heapify(rel)
                self._pending_release_bytes -= nb
                self._writeback_failed(o, off, nb, err)
        # its block was released already: no copy reads it any more, nor could a failed one
        # have been waited for without handling it; the host copy is stale (unreachable here)
        raise self._copy_error(o.key, "d2h", err) from err

    def _writeback_failed(self, o: ObjectInfo, off: int, nb: int, err: BaseException) -> None:
        """``o``'s copy to host failed: its bytes are only in the block ``(off, nb)``, which
        it takes back (resident, dirty, tracked by the policy again): its eviction did not
        happen, nor did the copy (the counts of both are taken back); raises."""
        st = self.stats
        st.evictions -= 1
        # a write-through copy counts no write-back; the eviction of a dirty object does (a
        # write-through pool's object is dirty after its write's copy failed): it left D2H
        if not self._write_through or o.state == D2H:
            st.writebacks -= 1
        st.bytes_d2h -= o.size
        o.offset, o.nbytes = off, nb
        o.state = DEVICE
        o.dirty = True
        self._n_evictable += 1
        self._note_allocated()
        if self._hook is not None:
            self._emit("restore", o)
        try:
            self._policy.on_insert(self.view, o.key)
        except Exception as e:
            self._owed.append(("on_insert", o.key))
            raise self._owed_error("on_insert", o.key, e, err, "d2h") from err  # (context: e)
        raise self._copy_error(o.key, "d2h", err) from err

    def _owed_error(self, hook: str, key: int, e: Exception, err: BaseException,
                    direction: str) -> BackendError:
        """The failed copy's error (raise it ``from err``), when the policy raised ``e`` in
        ``hook`` during the recovery too (the pool tells it again before its next operation)."""
        ce = self._copy_error(key, direction, err)
        name = getattr(self._policy, "name", None) or type(self._policy).__name__
        return BackendError(f"{ce} (policy {name!r} raised {e!r} in {hook} for key {key!r} during "
                            f"this recovery: the pool tells it again before its next operation)",
                            key=key, direction=direction)

    def _settle(self) -> None:
        """Tell the policy what a recovery from a failed copy told it and it raised on (still
        true of the object); raises (undone: told again next time) while it still raises."""
        owed, policy = self._owed, self._policy
        while owed:
            hook, key = owed[0]
            o = self._objs.get(key)
            if o is not None and (o.state == DEVICE) == (hook == "on_insert"):
                try:
                    if hook == "on_insert":
                        policy.on_insert(self.view, key)
                    else:
                        policy.on_evict(self.view, key)
                except Exception as e:
                    raise self._policy_error(policy, hook, key, e, False) from e
            del owed[0]

    def _copy_error(self, key: int, direction: str, err: BaseException) -> BackendError:
        if direction == "h2d":
            what = ("the copy of object {k} to the device failed ({e}); it stays in host "
                    "memory, where its bytes are: access it again to retry")
        else:
            what = ("the copy of object {k} to host memory failed ({e}); it stays on the "
                    "device, dirty, with its bytes: it is written back again when evicted or "
                    "flushed")
        e = BackendError(what.format(k=key, e=backend_cause(err)), key=key, direction=direction)
        e.__cause__ = err  # (as ``raise e from err`` does, for errors collected before raising)
        return e

    def _policy_error(self, policy: Any, hook: str, key: Any, err: BaseException,
                      stands: bool) -> PolicyError:
        # (a Forwarding's hook that forwards is the wrapped policy's own: that policy raised)
        return PolicyError(answering_policy(policy, hook), hook, key, err,
                           "the event stands and the pool is consistent" if stands else
                           "the pool undid the event (evictions made for it stay)")

    # ------------------------------------------------------------------ helpers
    def _get(self, key: int, op: str) -> ObjectInfo:
        o = self._objs.get(key)
        if o is None:
            if self._forget and key in self._seen:  # a forgotten object: as in host memory (a
                return ObjectInfo(key, 0, 0, self._tick)  # record of no one's: pin and unpin refuse it)
            raise UnknownKey(key, op)
        return o

    def _forget_record(self, o: ObjectInfo) -> None:
        """``forget_evicted``: drop the record of ``o``, now in host memory; its key is
        remembered in ``_seen``."""
        key = o.key
        del self._objs[key]
        self._seen.add(key)

    def _recall(self, key: int, size: int, kind: int) -> ObjectInfo:
        """``forget_evicted``: a record again for the forgotten ``key``, in host memory, of
        ``size`` bytes and ``kind`` (those of the request that needs it; its other fields
        start anew: it has no copy in flight, no pin and no dirty bytes)."""
        self._seen.discard(key)
        o = ObjectInfo(key, size, kind, self._tick)
        self._objs[key] = o
        return o

    def _emit(self, event: str, o: ObjectInfo) -> None:
        if self._hook is not None:
            self._tell({"event": event, "key": o.key, "size": o.size, "tick": self._tick,
                        "now_ns": self.cost.now, "state": STATE_NAMES[o.state],
                        "offset": o.offset, "nbytes": o.nbytes, "kind": o.kind})

    def _tell(self, event: dict[str, Any]) -> None:
        """Give the hook ``event``. A hook that raises is detached, with an error logged, and
        the event goes on (it stopped in the middle: an evicted object's block stayed taken and its
        policy had forgotten it -- as a JsonlHook whose file was closed left it)."""
        hook = self._hook
        try:
            hook(event)  # type: ignore[misc]
        except Exception as e:
            self._hook = None
            self._refresh_fast_path()
            # logged, not warned: a warning filter that raises (-W error) would stop the event
            log.error("pool hook %r raised %s: %s on a %r event; it is detached (the pool "
                      "finished the event; later events are not reported: set Pool.hook again to "
                      "resume). A hook must not raise.", hook, type(e).__name__, e, event["event"])

    def _emit_release(self, key: int, offset: int, nbytes: int) -> None:
        """The block ``(offset, nbytes)`` that object ``key`` held is free again (at once for a
        clean victim or a free; once its write-back completed for a dirty one)."""
        if self._hook is not None:
            o = self._objs.get(key)
            self._tell({"event": "release", "key": key, "size": nbytes, "tick": self._tick,
                        "now_ns": self.cost.now,
                        "state": "freed" if o is None else STATE_NAMES[o.state],
                        "offset": offset, "nbytes": nbytes, "kind": -1 if o is None else o.kind})

    def _oom(self, size: int) -> None:
        """Count a :class:`PoolExhausted` about to be raised for ``size`` bytes (``num_ooms``)
        and tell the hook (event ``oom``, ``free_bytes``: device bytes free then)."""
        self._num_ooms += 1
        if self._hook is not None:
            self._tell({"event": "oom", "key": None, "size": size, "tick": self._tick,
                        "now_ns": self.cost.now, "state": "host", "offset": -1, "nbytes": 0,
                        "kind": -1, "free_bytes": self._place.free_bytes})

    def _check(self) -> None:
        """Assert the pool's invariants (tests call this after every step)."""
        with self._lock:
            self._await_event()
            objs = self._objs.values()
            resident = [o for o in objs if o.state in (DEVICE, H2D)]
            for o in objs:
                assert (o.offset >= 0) == (o.state in (DEVICE, H2D)), o
                assert o.pins == 0 or o.state == DEVICE, o
                assert not o.dirty or o.state == DEVICE, o
            held = sum(o.nbytes for o in resident) + self._pending_release_bytes
            assert held == self._place.used, (held, self._place.used)
            assert self._place.used <= self._place.capacity
            assert self._pending_release_bytes == sum(r[3] for r in self._releases)
            assert self._inflight_bytes == sum(o.size for o in resident if o.state == H2D)
            assert self._pinned_bytes == sum(o.nbytes for o in resident if o.pins)
            assert self._n_evictable == sum(1 for o in resident if o.evictable())
            if isinstance(self._place, Arena):
                # held blocks and free blocks tile the region exactly: nothing overlaps
                spans = sorted([(o.offset, o.nbytes) for o in resident]
                               + [(r[2], r[3]) for r in self._releases]
                               + self._place.free_blocks())
                pos = 0
                for off, n in spans:
                    assert off == pos, f"blocks overlap or leak at offset {off} (expected {pos})"
                    pos += n
                assert pos == self._place.capacity
            # forget_evicted: a key has a record or is remembered, not both
            assert self._forget or not self._seen
            assert not any(k in self._seen for k in self._objs)
            st = self.stats
            for name in ("accesses", "hits", "misses", "evictions", "writebacks", "bytes_h2d",
                         "bytes_d2h", "prefetches", "frees", "streamed"):
                assert getattr(st, name) >= 0, (name, getattr(st, name))
            assert st.hits + st.misses == st.accesses
            assert st.prefetch_hits + st.late_prefetches <= st.prefetches
            assert self._clean_ahead or st.writebacks <= st.evictions  # (cleaning writes back early)
