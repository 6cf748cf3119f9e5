"""When a prefetch must start: in time, not in count.

A prefetch of an object hides its copy when the compute still ahead of the object's next use
covers the copy: the pool's cost model's ``latency + bytes / bandwidth`` (``CostModel.copy_time``),
after the copies already queued on the host-to-device engine and those of the objects needed
before it. :class:`PrefetchTiming` is that rule, shared by the prefetch policies that know (or
estimate) the compute ahead of a use (:class:`~policies.prefetch.LookaheadPrefetcher` reads it in
the trace, :class:`~allocator.offload.ReversePackOrder` measures it in the previous step).

A prefetch policy asks at each access whether an object can wait until the next decision
point: it must start now when the compute ahead of its use, less the compute before that next
point, no longer covers its lead time (:meth:`PrefetchTiming.due`). Issued at the latest
timely point, a prefetch holds device memory no longer than needed.

Feedback (Capuchin, Peng et al., ASPLOS 2020, moves a tensor's prefetch trigger earlier when the
prefetch arrived late): after an access, :meth:`PrefetchTiming.feedback` reads how long that access
waited for its prefetch still in flight (``ObjectInfo.late_ns``, set by the pool) and adds that
wait to the object's lead, so its next prefetch starts that much earlier. Capuchin moves the
trigger by one operation at a time; adding the measured shortfall moves it by as many as needed
at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.seams import AWAY

if TYPE_CHECKING:
    from cachegym.allocator.seams import PoolView

__all__ = ["PrefetchTiming", "PoolTimings", "VictimWalk"]


class PrefetchTiming:
    """Lead times of prefetches, with late-arrival feedback per object identity.

    ``ident`` names an object across its uses: the key (a trace replay) or its position in a
    training step (activation offload, whose keys are new every step). ``gain`` scales the
    feedback (1: the lead grows by the whole wait); a margin stays under ``max_copies`` times
    the object's copy time (a prefetch late because the link is saturated would otherwise
    start ever earlier, holding memory for nothing); at most ``max_entries`` identities keep a
    margin (the oldest forgotten first).
    """

    def __init__(self, gain: float = 1.0, max_copies: float = 2.0,
                 max_entries: int = 1 << 20) -> None:
        if not 0.0 <= gain <= 16.0:
            raise ConfigError(f"PrefetchTiming: gain must be in 0..16, got {gain!r}")
        if not 0.0 <= max_copies <= 1024.0:
            raise ConfigError(f"PrefetchTiming: max_copies must be in 0..1024, got {max_copies!r}")
        if max_entries < 1:
            raise ConfigError(f"PrefetchTiming: max_entries must be >= 1, got {max_entries!r}")
        self.gain = gain
        self.max_copies = max_copies
        self.max_entries = max_entries
        self.margin: dict[int, int] = {}  # ident -> extra lead (ns) learnt from late arrivals
        self.late = 0  # late arrivals seen by feedback()
        self._max: int | None = 0  # the largest margin (None: to be found again)

    @staticmethod
    def queued_ns(view: PoolView) -> int:
        """How long copies already queued on the host-to-device engine keep it busy."""
        return max(view.cost.busy_until(0) - view.now_ns, 0)

    def lead_ns(self, view: PoolView, ident: int, size: int) -> int:
        """The object's own lead: its copy time plus its learnt margin."""
        return view.cost.copy_time(0, size) + self.margin.get(ident, 0)

    @staticmethod
    def due(ahead_ns: int, next_ns: int, lead_ns: int) -> bool:
        """Whether a prefetch must start now: ``ahead_ns`` of compute lie before the use,
        ``next_ns`` of them before the next decision point, and the copy needs ``lead_ns``
        (its queue included): due once the compute left after the next decision point no
        longer covers it (where it covers it exactly, the copy started there still lands in
        time). Without compute ahead (``ahead_ns == next_ns == 0``) every copy is due: nothing
        can hide it, the earliest start is best."""
        return ahead_ns - next_ns < lead_ns or ahead_ns <= 0

    def due_keys(self, view: PoolView, accessed: int, uses: Iterable[tuple[int, int, int, int]],
                 depth: int, max_size: int) -> list[int]:
        """Up to ``depth`` objects to prefetch now, after the access of ``accessed``, from
        ``uses``: ``(key, ident, ahead_ns, size)`` of the distinct objects in order of their next
        use (known to the pool or not, resident or not), ``ahead_ns`` the compute from the next
        decision point to that use and ``size`` the walker's own figure for an object the pool
        does not know (the pool's record's size counts for one it knows). An object is *away*
        when a prefetch can bring it in: the pool knows it and does not hold it (state in
        :data:`~allocator.seams.AWAY`; ``accessed`` never is: it counts only for the room it
        takes). An away object is due when that compute no longer covers its lead
        (:meth:`lead_ns`, of ``ident``) after the copies queued before it (those in flight, then
        each earlier object's); with an instant cost model every one is.

        Do no harm (Cao et al., "A study of integrated prefetching and caching strategies",
        SIGMETRICS 1995): an object is prefetched only while it fits in the pool beside every
        object used before it (their ``size``, resident or not, the object of the access just
        made included) and the bytes still held by write-backs in flight
        (``view.releasing_bytes``), and, where the pool's eviction policy says what it would
        evict next (``view.eviction_order()``: every built-in policy but random eviction), only
        if the victims that make its room are none of those objects; past that, holding it from
        now on would push out an object needed sooner, and the walk stops. Without that rule a small pool (a quarter of a DL
        training step's live bytes) prefetched four times the bytes it used, most of them
        evicted before their use. The walk also stops past the compute that the queue, the
        largest copy (``max_size`` bytes) and the largest margin could need: nothing further
        can be due yet. The one rule of :class:`~policies.prefetch.LookaheadPrefetcher` (uses
        read in the trace) and :class:`~policies.successors.SuccessorPredictor` (uses predicted
        from the past)."""
        cost = view.cost
        instant = cost.instant
        queued = self.queued_ns(view)
        horizon = queued + cost.copy_time(0, max_size) + self.max_margin()
        room = view.capacity - view.releasing_bytes
        before = 0  # the bytes of the objects used before the one at hand
        used: set[int] = set()  # those objects
        free = view.capacity - view.used  # the room the prefetches chosen so far leave
        victims = VictimWalk(view)  # the policy's next victims that room counts
        arena = victims.arena  # (then the victims make blocks: VictimWalk.fits)
        out: list[int] = []
        objs = view.objects
        for k, ident, ahead, size in uses:
            o = objs.get(k)
            if o is not None:
                size = o.size
            before += size
            if before > room:
                break  # it, and every later object, would take the room of one used before it
            if o is None or k == accessed or o.state not in AWAY:
                used.add(k)
                continue
            if arena:
                if not victims.fits(size, used):
                    break  # the policy would evict an object used before it
            else:
                if free < size:
                    got = victims.room(size - free, used)
                    if got < 0:
                        break  # the policy would evict an object used before it
                    free += got
                free -= size
            used.add(k)
            if instant or self.due(ahead, 0, queued + self.lead_ns(view, ident, size)):
                out.append(k)
                if len(out) >= depth:
                    break
            copy = cost.copy_time(0, size)  # copied before anything used after it
            queued += copy
            horizon += copy
            if ahead > horizon and not instant:
                break
        return out

    def feedback(self, view: PoolView, key: int, ident: int) -> None:
        """After an access of ``key``: if it waited for its late prefetch, start that
        object's prefetches earlier by the wait (times ``gain``)."""
        o = view.info(key)
        late = o.late_ns
        if late <= 0:
            return
        self.late += 1
        bound = int(self.max_copies * view.cost.copy_time(0, o.size))
        old = self.margin.pop(ident, 0)
        m = min(old + int(self.gain * late), bound)
        self.margin[ident] = m
        top = self._max
        if top is not None and m < top and old == top:
            self._max = None  # the largest may have shrunk (a smaller object's bound)
        elif top is not None and m > top:
            self._max = m
        if len(self.margin) > self.max_entries:
            dropped = self.margin.pop(next(iter(self.margin)))
            if dropped == self._max:
                self._max = None

    def max_margin(self) -> int:
        """The largest margin (0 without any), kept as margins change."""
        top = self._max
        if top is None:
            top = self._max = max(self.margin.values(), default=0)
        return top

    def __repr__(self) -> str:
        return f"PrefetchTiming(gain={self.gain}, margins={len(self.margin)})"


class VictimWalk:
    """The room a run of prefetches would take from the pool's eviction policy: its next victims
    in its ``eviction_order``, walked once per decision (do no harm: :meth:`PrefetchTiming.due_keys`,
    the offload's count rule). Each :meth:`room` call goes on from where the last stopped, so a
    decision of ``m`` prefetches walks the order once, not once per prefetch (restarting it and
    skipping the victims already counted made a decision quadratic in them: Belady's order on a
    30,000-request scan trace with the learned prefetch head, 65 s against 4.9 s). The pool does
    not change during a walk. Without an order (the policy does not say) every call gives
    ``need``: the working-set rule alone then.

    Under an arena a prefetch needs one free block, not free bytes: :meth:`fits` places each
    prefetch in a copy of the pool's arena and frees the victims there, one at a time, as the
    pool does (bytes alone counted a prefetch's room as made where the blocks freed were not
    adjacent, and the pool then evicted further victims, used before the prefetch, to make
    it)."""

    __slots__ = ("view", "_order", "_started", "_dead", "_taken", "_arena")

    def __init__(self, view: PoolView) -> None:
        self.view = view
        self._order: Iterator[int] | None = None
        self._started = False
        self._dead = False  # a call found a victim used sooner, or the order ran out
        self._taken: set[int] = set()  # the victims counted (an order may name one twice)
        self._arena: Any = None  # under an arena: its copy, with the prefetches placed so far

    @property
    def arena(self) -> bool:
        """Whether the pool places objects in an arena (then :meth:`fits`, not :meth:`room`; a
        view that does not say places bytes)."""
        return getattr(self.view, "placement", "bytes") == "arena"

    def fits(self, size: int, used: set[int]) -> bool:
        """Under an arena: whether an object of ``size`` bytes can be placed from now on,
        beside the objects earlier calls placed, in a copy of the pool's arena, freeing there
        the policy's next evictable victims one at a time (as the pool evicts) until a block
        fits; ``False`` if one of them is in ``used`` (the prefetch would evict an object used
        before it) or if they run out -- and from then on (the callers stop there). Without an
        order: ``True``."""
        model = self._model()
        if self._dead:
            return False
        if model.alloc(size) is not None:
            return True
        if self._walk() is None:
            return True
        for o in self._victims(used):
            model.release(o.offset, o.nbytes)
            if model.alloc(size) is not None:
                return True
        return False

    def fits_free(self, size: int) -> bool:
        """Under an arena: whether an object of ``size`` bytes fits in a free block of the copy
        of :meth:`fits` (beside what earlier calls placed), evicting nothing; placed there if
        so."""
        return self._model().alloc(size) is not None

    def _model(self) -> Any:
        """The copy of the pool's arena, made at the first call of the walk."""
        if self._arena is None:
            self._arena = self.view.arena_model()
        return self._arena

    def _walk(self) -> Iterator[int] | None:
        """The policy's eviction order, started at the first call (``None``: it does not say)."""
        if not self._started:
            self._started = True
            order = self.view.eviction_order()
            self._order = None if order is None else iter(order)
        return self._order

    def room(self, need: int, used: set[int]) -> int:
        """The bytes the policy's next evictable victims free for a prefetch that lacks ``need``
        bytes (past those earlier calls counted, which it takes too), once they are ``need`` or
        more; -1 if one of them is in ``used`` (the prefetch would evict an object used before it)
        or if they free too little -- and from then on (the victim that stopped the walk stays
        next)."""
        if self._walk() is None:
            return need
        if self._dead:
            return -1
        got = 0
        for o in self._victims(used):
            got += o.nbytes
            if got >= need:
                return got
        return -1

    def _victims(self, used: set[int]) -> Iterator[Any]:
        """The records of the policy's next evictable victims not taken yet, each taken as it is
        given; at one in ``used``, or at the order's end, the walk is over (from then on). The
        caller stops reading once it has its room: the next call goes on from there."""
        objs, taken = self.view.objects, self._taken
        for v in self._order:  # type: ignore[union-attr]
            if v in taken:
                continue
            o = objs.get(v)
            if o is None or not o.evictable():
                continue
            if v in used:
                break
            taken.add(v)
            yield o
        self._dead = True


class PoolTimings:
    """A prefetcher's timing in each of several other pools (a guard's shadow pools, which ask
    what it would prefetch there): one :class:`PrefetchTiming` per pool, learning from that
    pool's late prefetches."""

    def __init__(self, gain: float = 1.0) -> None:
        self.gain = gain  # each pool's PrefetchTiming's
        self._by: dict[int, tuple[object, PrefetchTiming]] = {}  # id(view) -> (view, timing)

    def after(self, view: PoolView, key: int, ident: int | None = None) -> PrefetchTiming:
        """The timing in ``view``'s pool after its access of ``key`` (called after each access
        there): it learns whether that access waited for its late prefetch (by ``ident``,
        default the key), unless the object was freed there since."""
        got = self._by.get(id(view))
        if got is None or got[0] is not view:
            got = self._by[id(view)] = (view, PrefetchTiming(self.gain))
        timing = got[1]
        if key in view:
            timing.feedback(view, key, key if ident is None else ident)
        return timing
