"""Multi-queue policies with ghosts or segments: ARC, S3-FIFO, SLRU (LIRS lives in
:mod:`policies.lirs`).

Each follows libCacheSim's C implementation step for step, byte-sized (queue and ghost sizes
are counted in bytes, as libCacheSim counts them), so that in byte-accounting placement with
``oversize="bypass"`` miss counts equal libCacheSim's (``tests/policies/test_parity.py``).
ARC takes its decisions when the pool asks (:meth:`ARC.victim`; the ghost trimming happens
in :meth:`ARC.on_evict`, which also accepts a victim chosen by someone else, such as an agent
driving ``Pool.steps``). S3-FIFO and SLRU evict or refuse at moments the pool does not ask
for a victim, so they run libCacheSim's algorithm as a model
(:class:`~policies.shadow.ShadowPolicy`).

Queues are ``OrderedDict``s whose first entry is the tail (the next to leave) and whose last
entry is the head (the most recently inserted or promoted).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from cachegym.allocator.errors import ConfigError
from cachegym.policies.base import EvictionPolicyBase, first_evictable
from cachegym.policies.shadow import ShadowPolicy

if TYPE_CHECKING:
    from cachegym.allocator.pool import PoolView

__all__ = ["ARC", "S3FIFO", "SLRU"]

_Q = OrderedDict  # alias for readability


class ARC(EvictionPolicyBase):
    """Adaptive Replacement Cache (Megiddo & Modha, FAST'03), as libCacheSim's ``ARC``.

    T1 (seen once) and T2 (seen at least twice) hold resident objects, B1 and B2 their ghosts;
    all four are counted in bytes and ``p`` (the target size of T1, a float) adapts on ghost
    hits by ``max(|B2| / |B1|, 1)`` (or the reverse). A ghost hit's object enters T2.
    Replacement (libCacheSim's ``_ARC_replace``) takes T1's LRU end if T1 is non-empty and
    larger than ``p`` (or equal to ``p`` on a B2 hit) or T2 is empty, else T2's LRU end; a miss
    on all queues first trims B1 (when ``|T1| + |B1| + size > capacity``; with B1 empty it
    drops T1's LRU end without a ghost) or B2 (when all four reach ``2 * capacity``).

    The size of the object being admitted is the one of the last demand miss
    (a prefetch's own size is not visible to the policy).
    """

    name = "arc"

    def __init__(self) -> None:
        self.t1: _Q[int, int] = _Q()
        self.t2: _Q[int, int] = _Q()
        self.b1: _Q[int, int] = _Q()
        self.b2: _Q[int, int] = _Q()
        self.t1_bytes = self.t2_bytes = self.b1_bytes = self.b2_bytes = 0
        self.p = 0.0
        self._in_b1 = self._in_b2 = False
        self._n_req = 0
        self._ghost_req = -1  # request number of the last ghost hit
        self._incoming = 1  # size of the object being admitted
        self._capacity = -1  # the pool's, once an object is inserted (eviction_order reads it)

    # ---------------------------------------------------------------- hooks
    def on_hit(self, view: PoolView, key: int) -> None:
        self._n_req += 1
        self._in_b1 = self._in_b2 = False
        s = self.t1.pop(key, None)
        if s is not None:
            self.t1_bytes -= s
            self.t2[key] = s
            self.t2_bytes += s
        elif key in self.t2:
            self.t2.move_to_end(key)

    def on_miss(self, view: PoolView, key: int) -> None:
        self._n_req += 1
        self._incoming = view.size(key)
        if key in self.b1:
            self._ghost_hit(1, self.b1.pop(key), view.capacity)
        elif key in self.b2:
            self._ghost_hit(2, self.b2.pop(key), view.capacity)
        # a miss on all queues leaves the ghost flags as they were (as libCacheSim does)

    def _ghost_hit(self, ghost: int, size: int, capacity: int) -> None:
        """A hit on ghost list 1 (B1) or 2 (B2) of an object of ``size`` bytes, taken off it
        already: ``p`` moves by ``max(|B2| / |B1|, 1)`` (or the reverse) and the list's bytes
        drop."""
        self._ghost_req = self._n_req
        if ghost == 1:
            self._in_b1, self._in_b2 = True, False
            self.p = min(self.p + self._ratio(self.b2_bytes, self.b1_bytes), float(capacity))
            self.b1_bytes -= size
        else:
            self._in_b1, self._in_b2 = False, True
            self.p = max(self.p - self._ratio(self.b1_bytes, self.b2_bytes), 0.0)
            self.b2_bytes -= size

    @staticmethod
    def _ratio(a: int, b: int) -> float:
        return max(a / b, 1.0)

    def on_insert(self, view: PoolView, key: int) -> None:
        size = view.size(key)
        self._capacity = view.capacity
        for ghost in (self.b1, self.b2):  # a prefetch of a ghost: forget the ghost
            g = ghost.pop(key, None)
            if g is not None:
                if ghost is self.b1:
                    self.b1_bytes -= g
                else:
                    self.b2_bytes -= g
        if self._ghost_req == self._n_req and (self._in_b1 or self._in_b2):
            self.t2[key] = size
            self.t2_bytes += size
            self._in_b1 = self._in_b2 = False
            self._ghost_req = -1
        else:
            self.t1[key] = size
            self.t1_bytes += size

    def victim(self, view: PoolView) -> int | None:
        """The LRU end of the list ``_plan`` chooses; where that object may not be evicted
        (pinned, in flight, the one being accessed), the first evictable one of
        :meth:`eviction_order` (which alternates between the lists as their bytes go down:
        the next of the same list before, which a prefetcher's or the clean-ahead's reading of
        the order did not foresee)."""
        src = self.t1 if self._plan(view.capacity)[1] == 1 else self.t2
        k = next(iter(src), None)
        if k is not None and view.evictable(k):
            return k
        return first_evictable(view, self.eviction_order())

    def eviction_order(self) -> Iterator[int]:  # type: ignore[override]
        """The resident objects in the order :meth:`victim` would give them up if asked again
        and again with nothing in between, without changing the policy's state: T1's or T2's
        LRU end as ``_replace_from`` chooses, with each list's bytes lowered by what it gave
        (``p`` and the ghost flags as they are now; the first choice is :meth:`victim`'s,
        :meth:`_plan`'s)."""
        t1, t2 = iter(self.t1.items()), iter(self.t2.items())
        t1_bytes, t2_bytes, p, in_b2 = self.t1_bytes, self.t2_bytes, self.p, self._in_b2
        first = self._plan(self._capacity)[1] if self._capacity >= 0 else 1
        while True:
            if first:
                take_t1, first = first == 1, 0
            else:
                take_t1 = self._replace(t1_bytes, t2_bytes, p, in_b2) == 1
            entry = next(t1 if take_t1 else t2, None)
            if entry is None:  # (the list's bytes said it had more: a listing of the other)
                yield from (k for k, _ in (t2 if take_t1 else t1))
                return
            yield entry[0]
            if take_t1:
                t1_bytes -= entry[1]
            else:
                t2_bytes -= entry[1]

    def on_evict(self, view: PoolView, key: int) -> None:
        trim, _ = self._plan(view.capacity)
        if trim == "b1":
            self.b1_bytes -= self.b1.popitem(last=False)[1]
        elif trim == "b2":
            self.b2_bytes -= self.b2.popitem(last=False)[1]
        if key in self.t1:
            s = self.t1.pop(key)
            self.t1_bytes -= s
            if trim != "drop":
                self.b1[key] = s
                self.b1_bytes += s
        else:
            s = self.t2.pop(key)
            self.t2_bytes -= s
            if trim != "drop":
                self.b2[key] = s
                self.b2_bytes += s

    def on_free(self, view: PoolView, key: int) -> None:
        s = self.t1.pop(key, None)
        if s is not None:
            self.t1_bytes -= s
            return
        s = self.t2.pop(key, None)
        if s is not None:
            self.t2_bytes -= s

    def on_free_untracked(self, view: PoolView, key: int) -> None:
        """A freed object the pool had evicted: its ghost goes too (libCacheSim's
        ``ARC_remove``), so that a new object under the same key is no ghost hit."""
        s = self.b1.pop(key, None)
        if s is not None:
            self.b1_bytes -= s
            return
        s = self.b2.pop(key, None)
        if s is not None:
            self.b2_bytes -= s

    # ---------------------------------------------------------------- internals
    def _plan(self, capacity: int) -> tuple[str, int]:
        """``(ghost to trim first: "b1" | "b2" | "drop" | "", list to evict from: 1 | 2)``;
        ``"drop"`` evicts T1's LRU end without keeping a ghost."""
        if self._ghost_req == self._n_req and (self._in_b1 or self._in_b2):
            return "", self._replace_from()
        if self.t1_bytes + self.b1_bytes + self._incoming > capacity:
            if self.b1_bytes > 0:
                return "b1", self._replace_from()
            return "drop", 1
        total = self.t1_bytes + self.b1_bytes + self.t2_bytes + self.b2_bytes
        if total >= 2 * capacity and self.b2_bytes > 0:
            return "b2", self._replace_from()
        return "", self._replace_from()

    def _replace_from(self) -> int:
        return self._replace(self.t1_bytes, self.t2_bytes, self.p, self._in_b2)

    @staticmethod
    def _replace(t1: int, t2: int, p: float, in_b2: bool) -> int:
        """libCacheSim's ``_ARC_replace``: the list to evict from (1: T1, 2: T2) with T1 and T2
        holding ``t1`` and ``t2`` bytes, T1's target ``p``, ``in_b2`` after a hit on B2."""
        if (t1 > 0 and (t1 > p or (t1 == p and in_b2))) or t2 == 0:
            return 1
        return 2


class S3FIFO(ShadowPolicy):
    """S3-FIFO (Yang et al., SOSP'23), as libCacheSim's ``S3FIFO`` (its current version).

    A small FIFO (``small_size_ratio`` of the capacity, ``int(capacity * ratio)`` bytes), a main
    FIFO with a 2-bit CLOCK (the rest), and a ghost FIFO of ``int(capacity *
    ghost_size_ratio)`` bytes. New objects enter the small queue, or the main queue on a ghost
    hit (and, until the first eviction, when the small queue is full). Evicting from the small
    queue promotes objects hit at least ``move_to_main_threshold`` times to the main queue (with
    counter 0) and evicts the first other one into the ghost; evicting from the main queue
    reinserts objects with a non-zero counter (counter ``min(c, 3) - 1``) and evicts the first
    with counter 0. The main queue is evicted from when it exceeds its share or the small
    queue is empty.

    libCacheSim never admits an object of at least the small queue's size (unless it hits the
    ghost), which the pool does; so this class runs the algorithm as a model
    (:class:`~policies.shadow.ShadowPolicy`), exact whenever objects are smaller than the small
    queue, and otherwise differing only on accesses to the objects the model refused.
    """

    name = "s3fifo"

    def __init__(self, small_size_ratio: float = 0.1, ghost_size_ratio: float = 0.9,
                 move_to_main_threshold: int = 2) -> None:
        super().__init__()
        if not 0 < small_size_ratio < 1 or ghost_size_ratio < 0 or move_to_main_threshold < 1:
            raise ConfigError(
                "S3FIFO needs 0 < small_size_ratio < 1, ghost_size_ratio >= 0 and "
                f"move_to_main_threshold >= 1, got {small_size_ratio}, {ghost_size_ratio}, "
                f"{move_to_main_threshold}")
        self.small_size_ratio = small_size_ratio
        self.ghost_size_ratio = ghost_size_ratio
        self.threshold = move_to_main_threshold
        self.small: _Q[int, int] = _Q()  # key -> access counter
        self.main: _Q[int, int] = _Q()
        self.ghost: _Q[int, int] = _Q()  # key -> size
        self._size: dict[int, int] = {}
        self.small_bytes = self.main_bytes = self.ghost_bytes = 0
        self.cap = self.small_cap = self.main_cap = self.ghost_cap = -1
        self._hit_on_ghost = False
        self._has_evicted = False

    # ---------------------------------------------------------------- ShadowPolicy
    def _setup(self, capacity: int) -> None:
        self.cap = capacity
        self.small_cap = int(capacity * self.small_size_ratio)
        self.main_cap = capacity - self.small_cap
        self.ghost_cap = int(capacity * self.ghost_size_ratio)

    def _resident(self, key: int) -> bool:
        return key in self._size

    def _fallback(self) -> Iterable[int]:
        yield from self.small
        yield from self.main

    def _remove(self, key: int) -> None:
        size = self._size.pop(key, None)
        if size is None:
            return
        if self.small.pop(key, None) is not None:
            self.small_bytes -= size
        else:
            del self.main[key]
            self.main_bytes -= size

    def on_free(self, view: PoolView, key: int) -> None:
        super().on_free(view, key)
        self._forget_ghost(key)  # a freed object's ghost goes too (libCacheSim's S3FIFO_remove)

    def _request(self, key: int, size: int) -> bool:
        # find
        self._hit_on_ghost = False
        if key in self.small:
            self.small[key] += 1
            return True
        if self._forget_ghost(key):
            self._hit_on_ghost = True
        if key in self.main:
            self.main[key] += 1
            return True
        # miss: admit (objects above the small queue never are), evict, insert
        if size > self.small_cap or size > self.cap:
            return False
        while self.small_bytes + self.main_bytes + size > self.cap:
            self._evict()
        if self._hit_on_ghost:
            self._hit_on_ghost = False
            self._to_main(key, size)
        elif size >= self.small_cap:
            pass  # libCacheSim's insert refuses it after the evictions
        elif not self._has_evicted and self.small_bytes >= self.small_cap:
            self._to_main(key, size)
        else:
            self.small[key] = 0
            self.small_bytes += size
            self._size[key] = size
        return False

    # ---------------------------------------------------------------- the model (libCacheSim)
    def _evict(self) -> None:
        self._has_evicted = True
        if self.main_bytes > self.main_cap or self.small_bytes == 0:
            while self.main:
                k, c = next(iter(self.main.items()))
                if c >= 1:
                    self.main[k] = min(c, 3) - 1
                    self.main.move_to_end(k)
                else:
                    del self.main[k]
                    self.main_bytes -= self._size.pop(k)
                    self._drop(k)
                    return
        else:
            while self.small:
                k, c = self.small.popitem(last=False)
                size = self._size[k]
                self.small_bytes -= size
                if c >= self.threshold:
                    self.main[k] = 0
                    self.main_bytes += size
                else:
                    del self._size[k]
                    self._ghost_insert(k, size)
                    self._drop(k)
                    return

    def _to_main(self, key: int, size: int) -> None:
        self.main[key] = 0
        self.main_bytes += size
        self._size[key] = size

    def _forget_ghost(self, key: int) -> bool:
        size = self.ghost.pop(key, None)
        if size is None:
            return False
        self.ghost_bytes -= size
        return True

    def _ghost_insert(self, key: int, size: int) -> None:
        if key in self.ghost or size > self.ghost_cap:
            return
        while self.ghost_bytes + size > self.ghost_cap:
            self.ghost_bytes -= self.ghost.popitem(last=False)[1]
        self.ghost[key] = size
        self.ghost_bytes += size

    def __repr__(self) -> str:
        return (f"S3FIFO(small_size_ratio={self.small_size_ratio}, ghost_size_ratio="
                f"{self.ghost_size_ratio}, move_to_main_threshold={self.threshold})")


class SLRU(ShadowPolicy):
    """Segmented LRU with ``n_seg`` equal segments, as libCacheSim's ``SLRU``.

    Each segment holds ``capacity // n_seg`` bytes. A new object enters the lowest segment
    with room for it (segment 0 if none has); a hit in segment ``i`` promotes the object to
    the head of segment ``i + 1`` (or to the head of the top segment), and an overfull segment
    demotes its LRU end to the head of the segment below, cascading down; an overfull segment
    0 evicts the LRU end of the lowest non-empty segment, which is also the victim on a miss.
    Objects larger than a segment are not admitted.

    Parameters for parity: libCacheSim's C default is ``n-seg=4``, which its Python ``SLRU``
    class uses (it passes no parameters); the parity test passes ``n-seg=4`` explicitly.
    libCacheSim evicts during a hit when a demotion cascade overfills segment 0 (variable sizes,
    or a capacity not divisible by ``n_seg``), so this class runs the algorithm as a model
    (:class:`~policies.shadow.ShadowPolicy`): the pool evicts what the model dropped first, and
    differs from libCacheSim only on accesses to objects the model dropped but the pool still
    holds (and on objects larger than a segment, which the pool admits).
    """

    name = "slru"

    def __init__(self, n_seg: int = 4) -> None:
        super().__init__()
        if n_seg < 1:
            raise ConfigError(f"SLRU n_seg must be >= 1, got {n_seg}")
        self.n_seg = n_seg
        self.segs: list[_Q[int, int]] = [_Q() for _ in range(n_seg)]  # key -> size
        self.seg_bytes = [0] * n_seg
        self._where: dict[int, int] = {}
        self.cap = self.seg_cap = -1
        self.occupied = 0

    # ---------------------------------------------------------------- ShadowPolicy
    def _setup(self, capacity: int) -> None:
        self.cap = capacity
        self.seg_cap = capacity // self.n_seg

    def _resident(self, key: int) -> bool:
        return key in self._where

    def _fallback(self) -> Iterable[int]:
        for seg in self.segs:
            yield from seg

    def _remove(self, key: int) -> None:
        i = self._where.pop(key, None)
        if i is not None:
            size = self.segs[i].pop(key)
            self.seg_bytes[i] -= size
            self.occupied -= size

    def _request(self, key: int, size: int) -> bool:
        i = self._where.get(key)
        if i is not None:
            self._promote(key, i)
            return True
        if size > self.cap or size > self.seg_cap:
            return False
        while self.occupied + size > self.cap:
            self._evict_lowest()
        for j in range(self.n_seg):
            if self.seg_bytes[j] + size <= self.seg_cap:
                break
        else:
            j = 0
        self._put(key, size, j)
        self.occupied += size
        return False

    # ---------------------------------------------------------------- the model (libCacheSim)
    def _promote(self, key: int, i: int) -> None:
        top = self.n_seg - 1
        if i == top:
            self.segs[i].move_to_end(key)
            return
        size = self.segs[i].pop(key)
        self.seg_bytes[i] -= size
        self._put(key, size, i + 1)
        while key in self._where:
            j = self._where[key]
            if self.seg_bytes[j] <= self.seg_cap:
                break
            self._cool(j)

    def _cool(self, j: int) -> None:
        if j == 0:
            self._evict_lowest()
            return
        k, size = self.segs[j].popitem(last=False)
        self.seg_bytes[j] -= size
        self._put(k, size, j - 1)
        while self.seg_bytes[j - 1] > self.seg_cap:
            self._cool(j - 1)

    def _evict_lowest(self) -> None:
        for i, seg in enumerate(self.segs):
            if seg:
                k, size = seg.popitem(last=False)
                self.seg_bytes[i] -= size
                self.occupied -= size
                del self._where[k]
                self._drop(k)
                return

    def _put(self, key: int, size: int, i: int) -> None:
        self.segs[i][key] = size
        self.seg_bytes[i] += size
        self._where[key] = i

    def __repr__(self) -> str:
        return f"SLRU(n_seg={self.n_seg})"
