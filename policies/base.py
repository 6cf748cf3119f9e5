"""The two policy seams of the pool.

An :class:`EvictionPolicy` answers ``victim(view) -> key`` from a read-only view of the pool and
may observe hooks. The pool calls, for every access of object ``k``:

* hit:  ``on_hit(view, k)``
* miss: ``on_miss(view, k)``, then ``victim(view)`` / ``on_evict(view, v)`` until the object fits,
  then ``on_insert(view, k)`` (an object larger than a ``oversize="bypass"`` pool is never
  inserted: only ``on_miss`` is called)
* prefetch of ``k`` (issued by a prefetch policy or ``Pool.prefetch``): evictions as above, then
  ``on_insert(view, k)``
* free of a tracked (resident or incoming) object: ``on_free(view, k)``; of an object in host
  memory only, ``on_free_untracked(view, k)`` where the policy defines it (optional, ``None``
  counts as absent: for a policy that models a cache of its own, which may still hold an object
  the pool evicted, such as :class:`~policies.shadow.ShadowPolicy` or the learned policy's guard)

A policy therefore tracks exactly the objects that are on the device or being copied there.
Optionally, a policy class may define ``touch``: ``None`` or a callable of the key alone with
exactly ``on_hit``'s effect, which the pool's hit fast path then calls instead of ``on_hit``
(:class:`policies.lru.LRU` hands out its ``OrderedDict.move_to_end``). Hooks left as the
no-ops of :class:`EvictionPolicyBase` may be skipped by the pool.

Two more optional methods let a policy reproduce algorithms that decide outside a victim
request (libCacheSim's SLRU demotes and evicts during a hit; S3-FIFO and GDSF may refuse to
admit an object):

* ``admit(view, key, size) -> bool``, asked after ``on_miss``: ``False`` leaves the object in
  host memory (as an oversize bypass: no ``on_insert``). Consulted only by pools without a
  backend: with real bytes every access must land on the device.
* ``pending_evictions() -> Iterable[int]``, asked after every access: the pool evicts each
  listed evictable object at once (``on_evict`` is called as for any eviction), except the
  object just accessed, which stays on the device until the next event.
``victim`` must return a key for which ``view.evictable(key)`` is true (resident, unpinned, not
in flight), or ``None`` when it has none; the pool raises :class:`~allocator.errors.InvalidVictim`
otherwise. ``view.tick`` is the index of the current event in the pool's event sequence (the
trace row when the pool replays a trace from its start), which oracles use to read the future.

A :class:`PrefetchPolicy` answers ``prefetch(view, key) -> keys`` after every access of ``key``;
the pool prefetches the returned keys that are known and not resident, in order.

Heuristic, oracle and learned policies are the same kind of object: the evaluator, the
environments and the allocator cannot tell them apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from allocator.pool import PoolView


@runtime_checkable
class EvictionPolicy(Protocol):
    name: str

    def victim(self, view: PoolView) -> int | None: ...
    def on_hit(self, view: PoolView, key: int) -> None: ...
    def on_miss(self, view: PoolView, key: int) -> None: ...
    def on_insert(self, view: PoolView, key: int) -> None: ...
    def on_evict(self, view: PoolView, key: int) -> None: ...
    def on_free(self, view: PoolView, key: int) -> None: ...


@runtime_checkable
class PrefetchPolicy(Protocol):
    name: str

    def prefetch(self, view: PoolView, key: int) -> Sequence[int]: ...


class EvictionPolicyBase:
    """Convenience base: no-op hooks. Subclasses implement :meth:`victim` and what they need."""

    name = "base"

    def victim(self, view: PoolView) -> int | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def on_hit(self, view: PoolView, key: int) -> None:
        pass

    def on_miss(self, view: PoolView, key: int) -> None:
        pass

    def on_insert(self, view: PoolView, key: int) -> None:
        pass

    def on_evict(self, view: PoolView, key: int) -> None:
        pass

    def on_free(self, view: PoolView, key: int) -> None:
        pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class PrefetchPolicyBase:
    name = "none"

    def prefetch(self, view: PoolView, key: int) -> Sequence[int]:
        return ()


def first_evictable(view: PoolView, keys: Iterable[int]) -> int | None:
    """The first key of ``keys`` that ``view`` says is evictable, or ``None``."""
    ev = view.evictable
    for k in keys:
        if ev(k):
            return k
    return None
