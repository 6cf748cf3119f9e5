"""The experts of the guards (:mod:`policies.learned.guards`): each one a registered policy (LRU,
S3-FIFO, GDSF, LFU: :func:`policies.registry.make_eviction`) or the network alone, deciding by
itself in a shadow pool of the guarded pool's capacity, placement and write policy (the same
core: :class:`allocator.pool.Pool`, oversized objects bypassed). The pools must be alike: in an
arena GDSF, which keeps small objects, copied 44% more bytes than in byte accounting on an
activation-offload trace at half its footprint, and a guard whose shadows counted bytes followed
it there at 1.43x LRU's traffic. A shadow pool sees every request of the guarded pool
but not the evictions others choose there, so that its hits and its traffic are the expert's own
whoever decides; ``Expert.gain`` is what the guard compares (:data:`OBJECTIVES`).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from cachegym.allocator.errors import ConfigError, PoolExhausted
from cachegym.allocator.seams import DEVICE, H2D, Forwarding, eviction_order_of
from cachegym.policies.base import first_evictable

if TYPE_CHECKING:
    from cachegym.allocator.pool import Pool, PoolView
    from cachegym.policies.base import EvictionPolicy
    from cachegym.policies.learned.policy import LearnedPolicy

__all__ = ["Expert", "heuristic_expert", "network_expert", "OBJECTIVES"]

OBJECTIVES = ("traffic", "misses", "stall")
"""What a guard judges its experts on: bytes copied between host and device (streamed accesses
included; the default), misses, or stall: all the time the shadow pool waited for copies
under the guarded pool's timing preset (its compute between requests replayed in the shadow,
and its prefetcher's prefetches started there as prefetches -- those it would make in that
pool, ``prefetch_for``, where it can say, else the guarded pool's own: a miss
waits for its copy, an allocation -- a request's or a prefetch's -- for the write-backs that
make its room, a request for its prefetch still in flight)."""


class _Reporting(Forwarding):
    """``policy`` itself in a shadow pool (:class:`~allocator.seams.Forwarding`: the pool calls
    the policy's hooks and optional members through this object), every eviction also reported
    to ``evicted(key)``, after the policy's ``on_evict`` (so that the expert knows what its
    shadow gave up, in the order it gave it up)."""

    labels_as_wrapped = True  # (errors name the expert's policy)

    def __init__(self, policy: EvictionPolicy, evicted: Callable[[int], None]) -> None:
        super().__init__(policy)
        self.policy = policy
        self._evicted = evicted

    def on_evict(self, view: PoolView, key: int) -> None:
        self.wrapped.on_evict(view, key)
        self._evicted(key)


class Expert:
    """One expert of a guard: ``policy`` deciding alone in a shadow pool of the guarded pool's
    capacity (made on the first event, when the capacity is known). The guard tells it every
    request, insertion, eviction and free of the guarded pool (:meth:`request`, :meth:`insert`,
    :meth:`evict`, :meth:`free`); the shadow pool is told the requests and frees only, so that
    its hits (``hits``, over the guarded pool's requests) are the policy's own whoever decides.
    An expert that is only measured (``followed=False``: LRU, whose decisions are the guarded
    policy's tracker's) is told the requests and frees alone.

    Followed by the guarded pool, an expert evicts first (:meth:`victim`) what the guarded pool
    holds and its shadow does not -- ``_pending``, oldest first: objects the shadow evicted while
    the guarded pool held them, and objects the guarded pool holds that the shadow refused -- and
    admits (:meth:`admit`) what the shadow holds, so that the guarded pool converges to the
    shadow's content; ``None`` when nothing pending is evictable (the guard then uses LRU).

    Invariant: ``_pending`` holds only objects the guarded pool tracks (on the device or in
    flight to it) and the shadow pool does not; ``_gave`` those of them the shadow evicted (not
    those the guarded pool took in and the shadow never held: :meth:`given_up`).
    """

    __slots__ = ("name", "policy", "followed", "pool", "hits", "gain", "objective", "_prefetches",
                 "_pending", "_gave", "_host_objs", "_host_stats", "_access", "_resident", "_fallbacks", "_stats", "_clock",
                 "_order", "prefetching", "prefetch_fn")

    FORGETS = True
    """Whether the shadow pool forgets what leaves its device (``Pool(forget_evicted=True)``:
    records of its resident objects only, the same decisions) where it can, i.e. without a
    timing preset: a guard's shadows are told every object of a trace, and kept a record of each
    (about 230 bytes per object and shadow). Not the network's (:class:`_NetworkExpert`): its
    features tell an object that returns from one created anew by the pool's record of it."""

    def __init__(self, name: str, policy: EvictionPolicy, *, followed: bool = True,
                 objective: str = "traffic") -> None:
        if objective not in OBJECTIVES:
            raise ConfigError(f"expert {name!r}: objective must be one of {OBJECTIVES}, got "
                              f"{objective!r}")
        self.name = name
        self.policy = policy
        self.followed = followed  # False: only measured (never asked for victims or admission)
        self.objective = objective
        self.pool: Pool | None = None
        self.hits = 0  # the shadow's hits over the guarded pool's requests
        # what the guard compares experts on, higher is better: ``misses``: the hits; ``traffic``:
        # minus the bytes the shadow copied for those requests (streamed accesses included);
        # ``stall``: minus all the ns the shadow pool waited (its requests, and its prefetches)
        self.gain = 0
        self._stats: Any = None
        self._prefetches = 0  # requests the shadow saw for the guarded pool's prefetches
        self._pending: dict[int, None] = {}
        self._gave: dict[int, None] = {}  # of _pending, those the shadow evicted (in that order)
        # the guarded pool's records and counters, once it has called (not its view: a policy
        # kept by its user would keep the pool, its copy threads and host buffers alive)
        self._host_objs: dict[int, Any] | None = None
        self._host_stats: Any = None
        self._access: Any = None
        self._resident: Any = None
        self._fallbacks = 0  # the shadow pool's, already added to the guarded pool's stats
        self._clock: Any = None  # the shadow pool's cost model (objective stall)
        # the policy's eviction_order (victim's fallback), None where it has none
        self._order = eviction_order_of(policy)
        # whether the shadow starts the prefetches the guard gives it (:meth:`prefetch`); False:
        # the expert is judged without the pool's prefetcher
        self.prefetching = True
        # another prefetcher's ``prefetch_for`` the shadow runs instead of the pool's (a twin
        # judged with the history's proposals: ``LearnedPolicy.history_for``); None: the pool's
        self.prefetch_fn: Callable[[PoolView, int], Any] | None = None

    def setup(self, view: PoolView) -> None:
        """Make the shadow pool, of ``view``'s capacity (the guard calls it on the first event);
        for the objective ``stall``, under the guarded pool's timing preset (a
        :class:`~allocator.errors.ConfigError` if it has none)."""
        from cachegym.allocator.pool import Pool

        preset = None
        if self.objective == "stall":
            preset = view.cost.preset
            if preset is None:
                raise ConfigError(f"expert {self.name!r}: objective 'stall' needs a pool with a "
                                  "timing preset (Pool(..., cost='h100_pcie5')); use objective "
                                  "'traffic' or 'auto' for a pool without one")
        self._host_objs, self._host_stats = view.objects, view.stats
        self.pool = pool = Pool(view.capacity, _Reporting(self.policy, self._evicted),  # type: ignore[arg-type]
                                placement=view.placement, write_policy=view.write_policy,
                                oversize="bypass", cost=preset,
                                clean_ahead=view.clean_ahead if preset is not None else 0,
                                forget_evicted=self.FORGETS and preset is None)
        self._clock = pool.cost
        self._access = pool.access
        self._resident = pool.view.is_resident
        self._stats = pool.stats

    def _evicted(self, key: int) -> None:
        """The shadow gave ``key`` up: pending if the guarded pool tracks it and follows this
        expert at times (one only measured is never told the guarded pool's evictions, which
        clear ``_pending``: it grew by every object it gave up while the pool held it)."""
        objs = self._host_objs
        o = None if objs is None else objs.get(key)
        if self.followed and o is not None and o.state in (DEVICE, H2D):
            self._pending[key] = None
            self._gave[key] = None

    def request(self, key: int, size: int, write: bool, kind: int, hit: bool,
                compute_ns: int = 0) -> None:
        """A request of the guarded pool (``hit``: whether the guarded pool hit; ``compute_ns``:
        the guarded pool's compute since its previous request, which the shadow's clock
        advances by first under the objective ``stall``)."""
        if self.objective == "traffic":
            mine = self._charged(key, size, write, kind)
        elif self.objective == "stall":
            clock = self._clock
            if compute_ns > 0:
                clock.compute(compute_ns)
            mine = self._access(key, size, write, kind=kind)
            # all the shadow pool's stall so far: its accesses', and its prefetches' and frees'
            # (a prefetch that makes room waits for the write-backs of its victims)
            self.gain = -clock.stall_ns
        else:
            mine = self._access(key, size, write, kind=kind)
            self.gain += mine
        if mine:
            self.hits += 1
            return
        if hit and self.followed:  # the guarded pool holds what its shadow may not (now)
            # (where both hit there is nothing to do: the shadow took the object back only on a
            # request, and on that request the guarded pool either hit, which settled it here,
            # or missed, when the object was not in the guarded pool, so not pending; or by a
            # prefetch of its own, which settled it in :meth:`prefetch`)
            if self._resident(key):
                self._pending.pop(key, None)
                self._gave.pop(key, None)
            else:
                self._pending[key] = None
        if self.pool.stats.fallbacks != self._fallbacks:  # type: ignore[union-attr]
            self._count_fallbacks()  # (a shadow decides on its misses only)

    def advance(self, compute_ns: int) -> None:
        """The guarded pool's compute between its requests (before a free): under the
        objective ``stall`` the shadow's clock advances by it."""
        if self.objective == "stall" and compute_ns > 0:
            self._clock.compute(compute_ns)

    def _count_fallbacks(self) -> None:
        """A network's decisions happen in its shadow pool: the guarded pool's stats count
        their fallbacks to LRU (over the latency budget, failed, no candidate) too."""
        n = self.pool.stats.fallbacks  # type: ignore[union-attr]
        self._host_stats.fallbacks += n - self._fallbacks
        self._fallbacks = n

    @property
    def requests(self) -> int:
        """The guarded pool's requests the shadow has seen (not its prefetches)."""
        return 0 if self.pool is None else self.pool.stats.accesses - self._prefetches

    def prefetched(self, key: int, size: int, kind: int) -> None:
        """The guarded pool brought ``key`` in without a request (a prefetch): the shadow pool
        sees it as a request (not counted in ``hits``); for the objective ``stall``, as a
        prefetch (an asynchronous copy under the shadow's clock, whose lateness, or eviction
        before use, the later request pays in the shadow as in the guarded pool); for
        ``traffic`` the bytes it copies count in ``gain``, as the guarded pool's prefetches count
        in its own cost (else the guard charged them to its hand-overs)."""
        if self.objective == "stall":
            with contextlib.suppress(PoolExhausted):  # (a hint: nothing evictable there now)
                self.pool.prefetch(key, size)  # type: ignore[union-attr]
            return
        self._prefetches += 1
        if self.objective == "traffic":  # (its copy is the shadow's traffic, as the pool's is)
            self._charged(key, size, False, kind)
        else:
            self._access(key, size, False, kind=kind)

    def _charged(self, key: int, size: int, write: bool, kind: int) -> bool:
        """The shadow pool's access of ``key``, its bytes copied charged to ``gain`` (the
        objective ``traffic``); whether it hit."""
        st = self._stats
        before = st.traffic_bytes
        mine: bool = self._access(key, size, write, kind=kind)
        self.gain -= st.traffic_bytes - before
        return mine

    def prefetch(self, prefetch_for: Callable[[PoolView, int], Any], key: int) -> None:
        """The shadow starts the prefetches ``prefetch_for(view, key)`` names for its own pool
        after the access of ``key`` (the guarded pool's prefetcher modelled there: objective
        ``stall``), holding ``key`` meanwhile as the access loop holds the object whose access
        asked for them (pinned where it is on the device), so that they cannot evict it."""
        pool = self.pool
        assert pool is not None
        if not self.prefetching:
            return
        if self.prefetch_fn is not None:
            prefetch_for = self.prefetch_fn
        o = pool.view.objects.get(key)
        held = o is not None and o.state == DEVICE
        if held:
            pool.pin(key)
        pending = self._pending
        try:
            for k in prefetch_for(pool.view, key):
                try:
                    pool.prefetch(k)
                except PoolExhausted:  # a hint: no room now; the loop stops there too
                    break
                if k in pending and self._resident(k):
                    # the guarded pool prefetched it first (after the previous request, when
                    # :meth:`insert` made it pending): the shadow holds it now, so it is not to
                    # be evicted first
                    del pending[k]
                    self._gave.pop(k, None)
        finally:
            if held:
                pool.unpin(key)

    def insert(self, key: int) -> None:
        """The guarded pool inserted ``key``: pending unless the shadow holds it."""
        if self._resident(key):
            self._pending.pop(key, None)
            self._gave.pop(key, None)
        else:
            self._pending[key] = None

    def evict(self, key: int) -> None:
        """The guarded pool evicted ``key`` (the shadow is not told)."""
        self._pending.pop(key, None)
        self._gave.pop(key, None)

    def free(self, key: int) -> None:
        """``key`` was freed: gone from the guarded pool, and from the shadow pool too."""
        self._pending.pop(key, None)
        self._gave.pop(key, None)
        pool = self.pool
        if pool is not None and key in pool:
            pool.free(key)

    def admit(self, key: int) -> bool:
        """Whether the guarded pool admits a missed ``key`` while it follows this expert: the
        shadow took it in."""
        return self._resident is None or bool(self._resident(key))

    def victim(self, view: PoolView) -> int | None:
        """The first evictable pending object (the oldest the shadow gave up); where none is,
        the first evictable one in the policy's own eviction order (its ``eviction_order``:
        what it would give up next in its shadow, so that the room the guarded pool needs
        beyond the shadow's -- for a prefetch, or copies in flight -- is made as the policy
        would make it); ``None`` when neither has one: the first evictable of
        :meth:`eviction_order`."""
        return first_evictable(view, self.eviction_order())

    def eviction_order(self) -> Iterable[int]:
        """What :meth:`victim` would choose from, in order, without changing any state: the
        pending objects, then the policy's own eviction order (where it has one)."""
        order = self._order
        if order is None or self.pool is None:
            return iter(self._pending)
        return itertools.chain(self._pending, order())

    def release(self) -> None:
        """Stop running (a guard retired this expert): the shadow pool and what the expert
        tracked are released; it must not be told anything after."""
        self.pool = None
        self._access = self._resident = self._stats = self._clock = None
        self._pending = {}
        self._gave = {}

    def pending_evictions(self) -> list[int]:
        """What the guarded pool holds and the shadow does not, oldest first."""
        return list(self._pending)

    def given_up(self) -> list[int]:
        """Of :meth:`pending_evictions`, what the shadow evicted while the guarded pool held it,
        in the order it did (not what the guarded pool took in that the shadow never held: its
        own prefetches, what the shadow refused)."""
        return list(self._gave)

    def __repr__(self) -> str:
        return f"Expert({self.name!r}, {self.policy!r})"


def heuristic_expert(name: str, *, followed: bool = True, objective: str = "traffic") -> Expert:
    """The registered policy ``name`` (:func:`policies.registry.make_eviction`) as an expert."""
    from cachegym.policies.registry import make_eviction

    return Expert(name, make_eviction(name), followed=followed, objective=objective)


def network_expert(policy: LearnedPolicy, objective: str = "traffic") -> Expert:
    """The network of ``policy`` alone (a policy of the same class and file, without a guard;
    its latency budget, ``K`` and ``record_latency`` as ``policy``'s when the shadow starts) as
    an expert: its decisions happen in the shadow pool."""
    return _NetworkExpert(policy, objective)


class _NetworkExpert(Expert):
    """The network's expert: it takes the guarded policy's ``record_latency`` when the shadow
    pool starts (it may be set after the guard was built, before the first access)."""

    __slots__ = ("owner",)

    FORGETS = False  # (the feature tracker reads the pool's record of a returning object)

    def __init__(self, owner: LearnedPolicy, objective: str = "traffic") -> None:
        # the owner's class (a LearnedPolicy): this module does not import the policy's, which
        # imports the guards
        net = type(owner)(owner.scorer, owner.header, budget_us=owner.budget_us, K=owner.K,
                          guard=False, seed=owner.seed)
        super().__init__("network", net, objective=objective)
        self.owner = owner

    def setup(self, view: PoolView) -> None:
        self.policy.record_latency = self.owner.record_latency  # type: ignore[attr-defined]
        super().setup(view)
