"""The shadow models of the guards (:mod:`policies.learned.guards`): heuristics and the network
itself, each in a shadow cache of the pool's capacity that sees every request but not the
evictions others choose, so that its hits are its own whoever decides.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from policies.adaptive import S3FIFO
from policies.priority import GDSF
from policies.shadow import ShadowPolicy

if TYPE_CHECKING:
    from allocator.pool import PoolView
    from policies.learned.policy import LearnedPolicy


class _NotTold(ShadowPolicy):
    """A shadow model that is not told whom the pool evicts, so that its hits stay its own: an
    eviction only takes the object off the pool's side (a victim of the model's own choosing
    is the pool catching up with it)."""

    def on_evict(self, view: PoolView, key: int) -> None:
        self._in_pool.discard(key)
        self._pending.pop(key, None)
        if key == self._outside:
            self._outside = None


class _ModelS3FIFO(_NotTold, S3FIFO):
    """S3-FIFO as the guard's model: it sees every request but not the evictions other
    policies choose, so its hits are S3-FIFO's own whoever decides; its :meth:`victim` is
    :class:`~policies.shadow.ShadowPolicy`'s (a resident object the model no longer holds
    first), so a pool it decides for converges to the model's content and then evicts as
    S3-FIFO does."""

    def on_free(self, view: PoolView, key: int) -> None:
        super().on_free(view, key)  # on_evict above, and the object's ghost (S3FIFO.on_free)
        self._remove(key)  # the object is gone: the model forgets it too


class _ModelGDSF(_NotTold, GDSF):
    """GDSF as the :class:`ShadowGuard`'s model, as :class:`_ModelS3FIFO` is S3-FIFO: its hits
    are GDSF's own whoever decides, and a pool it decides for converges to its content."""

    def on_free(self, view: PoolView, key: int) -> None:
        _NotTold.on_evict(self, view, key)
        if key in self._rec:  # the object is gone: the model forgets it (no eviction: the
            self._forget(key)  # clock stays, as in GDSF.on_free)


class _ModelLFU(_NotTold):
    """LFU as the :class:`ShadowGuard`'s model: a byte-capacity LFU cache (the least frequently
    used object goes first, the one that reached that count first among equals, as
    :class:`~policies.classic.LFU`), its hits its own whoever decides, and a pool it decides for
    converges to its content. Invariant: ``_freq`` holds the model's objects, each in
    ``_buckets[_freq[k]]`` (insertion-ordered); ``_min`` is at most the smallest count."""

    def __init__(self) -> None:
        super().__init__()
        self.cap = -1
        self.occupied = 0
        self._freq: dict[int, int] = {}
        self._size: dict[int, int] = {}
        self._buckets: dict[int, dict[int, None]] = {}
        self._min = 1

    def _setup(self, capacity: int) -> None:
        self.cap = capacity

    def _resident(self, key: int) -> bool:
        return key in self._freq

    def _request(self, key: int, size: int) -> bool:
        f = self._freq.get(key)
        b = self._buckets
        if f is not None:
            del b[f][key]
            b.setdefault(f + 1, {})[key] = None
            self._freq[key] = f + 1
            return True
        if size > self.cap:
            return False
        while self.occupied + size > self.cap:
            while not b.get(self._min):
                self._min += 1
            k = next(iter(b[self._min]))
            self._forget(k)
            self._drop(k)
        self._freq[key] = 1
        self._size[key] = size
        self.occupied += size
        b.setdefault(1, {})[key] = None
        self._min = 1
        return False

    def _forget(self, key: int) -> None:
        del self._buckets[self._freq.pop(key)][key]
        self.occupied -= self._size.pop(key)

    def _remove(self, key: int) -> None:  # pragma: no cover - _NotTold.on_evict never asks
        if key in self._freq:
            self._forget(key)

    def _fallback(self) -> Iterable[int]:
        for f in sorted(self._buckets):
            yield from list(self._buckets[f])

    def on_free(self, view: PoolView, key: int) -> None:
        _NotTold.on_evict(self, view, key)
        if key in self._freq:  # the object is gone: the model forgets it
            self._forget(key)


class _Dropping:
    """``victim(view)``, and ``drop(key)`` of the key it names: a picklable wrapper."""

    __slots__ = ("victim", "drop")

    def __init__(self, victim: Any, drop: Any) -> None:
        self.victim, self.drop = victim, drop

    def __call__(self, view: PoolView) -> int | None:
        key = self.victim(view)
        if key is not None:
            self.drop(key)
        return key


class _ModelNetwork(_NotTold):
    """The network alone, in a shadow pool of the guarded pool's capacity (bytes placement,
    oversized objects bypassed): it sees every request (with its kind and whether it writes)
    but not the evictions others choose, so its hits are the network's own whoever decides.
    Its :meth:`victim` is :class:`~policies.shadow.ShadowPolicy`'s (a resident object the
    shadow no longer holds first), so a pool it decides for converges to the shadow's content;
    ``None`` when the pool holds nothing the shadow lacks (the caller then uses LRU)."""

    def __init__(self, policy: LearnedPolicy) -> None:
        super().__init__()
        self._owner = policy  # the guarded policy (its network, budget, K, record_latency)
        self.pool: Any = None
        self.policy: LearnedPolicy | None = None
        self._kind, self._write = 0, False  # of the request being served
        self._fallbacks = 0  # the shadow pool's, already added to the guarded pool's stats

    def _setup(self, capacity: int) -> None:
        from allocator.pool import Pool

        o = self._owner
        # the owner's class (a LearnedPolicy): this module does not import the policy's, which
        # imports the guards
        pol = type(o)(o.scorer, o.header, budget_us=o.budget_us, K=o.K, guard=False)
        pol.record_latency = o.record_latency
        # the shadow's victims are its drops: its hooks stay exactly the tracker's, so that
        # the shadow pool's C path serves them (a pool of this kind only evicts on request)
        pol.victim = _Dropping(pol.victim, self._drop)  # type: ignore[method-assign]
        self.policy = pol
        self.pool = Pool(capacity, pol, placement="bytes", oversize="bypass")

    # on_hit / on_miss: ShadowPolicy's, written out (they run on every access of the pool)
    def on_hit(self, view: PoolView, key: int) -> None:
        o = view.info(key)
        if not self._ready:
            self._ensure(view)
        self._kind, self._write = o.kind, view.writing
        self.model_requests += 1
        pool = self.pool
        if not pool.access(key, o.size, self._write, kind=o.kind):
            self.model_misses += 1
            self.divergent_hits += 1
        if pool.view.is_resident(key):  # _settle
            self._pending.pop(key, None)
        else:
            self._pending[key] = None
        if pool.stats.fallbacks != self._fallbacks:
            self._count_fallbacks(view)

    def on_miss(self, view: PoolView, key: int) -> None:
        o = view.info(key)
        if not self._ready:
            self._ensure(view)
        self._last_miss = key
        self._kind, self._write = o.kind, view.writing
        self.model_requests += 1
        pool = self.pool
        if pool.access(key, o.size, self._write, kind=o.kind):
            self.divergent_misses += 1
        else:
            self.model_misses += 1
        if pool.stats.fallbacks != self._fallbacks:
            self._count_fallbacks(view)

    def _count_fallbacks(self, view: PoolView) -> None:
        """The network's decisions happen in the shadow pool: the guarded pool's stats count
        their fallbacks to LRU (over the latency budget, failed, no candidate) too (called when
        the shadow pool's count moved)."""
        n = self.pool.stats.fallbacks
        view.stats.fallbacks += n - self._fallbacks
        self._fallbacks = n

    def _request(self, key: int, size: int) -> bool:
        return bool(self.pool.access(key, size, self._write, kind=self._kind))

    def _resident(self, key: int) -> bool:
        return bool(self.pool.view.is_resident(key))

    def _remove(self, key: int) -> None:  # pragma: no cover - _NotTold.on_evict never asks
        pass

    def _fallback(self) -> list[int]:
        return []

    def on_free(self, view: PoolView, key: int) -> None:
        self.on_evict(view, key)
        if self.pool is not None and key in self.pool:
            self.pool.free(key)
