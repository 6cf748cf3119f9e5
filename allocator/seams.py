"""The seams between the pool and its policies: the read-only view, the two policy protocols and
their no-op bases. :mod:`policies.base` re-exports them; ``allocator`` imports nothing from
``policies`` at import (the exceptions, imported when called: :func:`default_eviction_policy`,
see there, and :class:`~allocator.offload.ActivationOffload` given a policy file's path).

An :class:`EvictionPolicy` answers ``victim(view) -> key`` from a read-only view of the pool and
may observe hooks. The pool calls, for every access of object ``k``:

* hit:  ``on_hit(view, k)`` (or ``touch(k)``, see below)
* miss: ``on_miss(view, k)``, then ``admit(view, k, size)``, then ``victim(view)`` /
  ``on_evict(view, v)`` until the object fits, then ``on_insert(view, k)`` (an object larger
  than a ``oversize="bypass"`` pool, or one the policy does not admit, is never inserted: the
  access is streamed, its bytes copied for this access only)
* prefetch of ``k`` (issued by a prefetch policy or ``Pool.prefetch``): evictions as above, then
  ``on_insert(view, k)`` (where nothing evictable is left and only other prefetches in flight
  hold the room, the prefetch does not wait for them to land:
  :class:`~allocator.errors.PoolExhausted`, which drops a prefetch policy's hint)
* free of a tracked (resident or incoming) object: ``on_free(view, k)``; of an object in host
  memory only, ``on_free_untracked(view, k)``
* after every access: ``pending_evictions()``

A policy therefore tracks exactly the objects that are on the device or being copied there.

The optional members, declared by :class:`EvictionPolicyBase` as ``None`` ("the policy has
none"; a policy may also set one to ``None`` on an instance, and one written against the six
required methods alone may omit them):

* ``touch``: a callable of the key alone with exactly ``on_hit``'s effect, which the pool's hit
  fast path then calls instead of ``on_hit`` (:class:`policies.lru.LRU` hands out its
  ``OrderedDict.move_to_end``). Read from the policy's class only: a wrapper forwarding
  attributes must not bypass its own ``on_hit``.
* ``admit(view, key, size) -> bool``, asked after ``on_miss``: ``False`` leaves the object in
  host memory (as an oversize bypass: no ``on_insert``); the access is streamed (its bytes are
  copied to the device for this access, and back for a write, and count as traffic and stall).
  Consulted with and without a backend. (libCacheSim's S3-FIFO and GDSF may refuse to admit an
  object.)
* ``pending_evictions() -> Iterable[int]``, asked after every access: the pool evicts each
  listed evictable object at once (``on_evict`` is called as for any eviction), except the
  object just accessed, which stays on the device until the next event. (libCacheSim's SLRU
  demotes and evicts during a hit.)
* ``on_free_untracked(view, key)``: the free of an object the pool holds in host memory only,
  for a policy that models a cache of its own, which may still hold an object the pool evicted
  (:class:`~policies.shadow.ShadowPolicy`, the learned policy's guard).
* ``eviction_order() -> Iterable[int]``: the objects the policy would give up next, in order,
  without changing its state. The loop reads it to clean ahead (``Pool(clean_ahead=)``: the
  dirty objects among the next victims are written back early), the prefetch timing rule
  (:meth:`PoolView.eviction_order`) to see what a prefetch would evict, and a guard following
  the policy in another pool to make room there as the policy would.
* ``reset()``: forget every object (a fresh policy's state). One policy object serves one pool;
  a policy that served another pool before (closed, dropped, or given another policy since) is
  taken by a new pool only if it has ``reset()``, which that pool calls first (else
  :class:`~allocator.errors.ConfigError`: give each pool its own policy object).

A prefetch inserts its object (``on_insert``) with no ``on_miss`` before it (``view.info(k).
prefetched`` is then true until its first access, a hit), and ``on_miss`` is called for an
object that ``admit`` then refuses: a policy that counts accesses counts a miss at ``on_miss``,
not at ``on_insert``. ``on_evict`` may name an object the policy did not choose (an agent's
victim in the environments, a guard's, a ``pending_evictions`` entry).

The pool reads a policy's ``victim``, hooks and optional members once, when the policy is set
(``Pool(capacity, policy)`` or ``pool.policy = policy``; :func:`hook_of`, :func:`optional_hooks`;
``on_free_untracked`` at each such free):
to change what a policy does, set another policy (or wrap it: :class:`Forwarding`), not another
method on the instance. Hooks left as the no-ops of :class:`EvictionPolicyBase` may be skipped by
the pool (an identity check: :func:`is_noop`).

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

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol, cast, runtime_checkable

from cachegym.allocator.errors import ConfigError, PolicyError

if TYPE_CHECKING:
    from cachegym.allocator.cost import CostModel
    from cachegym.allocator.loop import Loop
    from cachegym.allocator.records import Counters, ObjectInfo

__all__ = ["PoolView", "EvictionPolicy", "PrefetchPolicy", "EvictionPolicyBase", "Forwarding",
           "PrefetchPolicyBase", "OptionalHooks", "optional_hooks", "untracked_free_hook",
           "eviction_order_of", "is_noop", "hook_of", "active_hook_of", "answering_policy", "wrapped_chain",
           "check_policies", "REQUIRED_HOOKS",
           "default_eviction_policy", "DEVICE", "HOST", "H2D", "D2H", "AWAY", "STATE_NAMES"]

# residency of an object (ObjectInfo.state): on the device, in host memory only, in flight to the
# device, in flight to the host (a dirty victim being written back)
DEVICE, HOST, H2D, D2H = 0, 1, 2, 3
STATE_NAMES = ("device", "host", "h2d", "d2h")
AWAY = (HOST, D2H)  # the states of an object that is known and not resident: what a prefetch can fetch


class PoolView:
    """Read-only view of a pool handed to policies. Valid only inside the pool's calls."""

    __slots__ = ("_pool", "objects")

    def __init__(self, pool: Loop) -> None:
        self._pool = pool
        self.objects: dict[int, ObjectInfo] = pool._objs
        """The pool's records by key (:class:`~allocator.records.ObjectInfo`): the live mapping,
        to read (``view.objects.get(key)``, ``None`` for a key the pool does not know, or, in a
        ``forget_evicted`` pool, one in host memory whose record it dropped), never to modify; a
        policy that reads many records in a decision reads them here in one lookup each."""

    @property
    def tick(self) -> int:
        """Index of the current event in the pool's event sequence (0-based)."""
        return self._pool._tick

    @property
    def now_ns(self) -> int:
        return self._pool.cost.now

    @property
    def capacity(self) -> int:
        return self._pool.capacity

    @property
    def used(self) -> int:
        return self._pool._place.used

    @property
    def placement(self) -> Literal["arena", "bytes"]:
        """``"arena"`` (blocks at offsets: fragmentation can force evictions) or ``"bytes"``."""
        return cast('Literal["arena", "bytes"]', self._pool.placement)

    def arena_model(self) -> Any:
        """Under ``placement="arena"``, a copy of the pool's arena (its blocks, free and taken)
        in which to place objects without touching the pool (``alloc(nbytes)``,
        ``release(offset, nbytes)``); ``None`` under byte placement."""
        place: Any = self._pool._place
        return place.copy() if self._pool.placement == "arena" else None

    @property
    def write_policy(self) -> Literal["write-back", "write-through"]:
        """``"write-back"`` (a dirty victim is copied to host) or ``"write-through"``."""
        return "write-through" if self._pool._write_through else "write-back"

    @property
    def clean_ahead(self) -> int:
        """Bytes of the next victims the pool keeps clean ahead of eviction (0: none;
        ``Pool(clean_ahead=)``)."""
        return int(self._pool._clean_ahead)

    @property
    def bytes_in_flight(self) -> int:
        return self._pool._inflight_bytes

    def eviction_order(self) -> Iterable[int] | None:
        """What the pool's eviction policy would give up next, in order (its ``eviction_order``),
        without changing its state; ``None`` where the policy does not say. An error of the
        policy's ``eviction_order`` (called, or iterated) is the policy's
        :class:`~allocator.errors.PolicyError` (hook ``eviction_order``), not the caller's (a
        prefetcher that reads it)."""
        policy = self._pool._policy
        order = eviction_order_of(policy)
        if order is None:
            return None
        try:
            keys = iter(order())
        except Exception as e:
            raise _order_error(policy, e) from e
        return _checked_order(policy, keys)

    @property
    def releasing_bytes(self) -> int:
        """Device bytes that dirty victims still hold while their write-backs are in flight
        (their blocks are free once the copies complete): not available to another object
        before then."""
        return self._pool._pending_release_bytes

    @property
    def cost(self) -> CostModel:
        return self._pool.cost

    @property
    def stats(self) -> Counters:
        return self._pool.stats

    def evictable(self, key: int) -> bool:
        o = self.objects.get(key)
        return o is not None and o.evictable()

    def candidates(self) -> list[int]:
        """Evictable keys (resident, unpinned, not in flight), in no particular order. It walks
        every record the pool keeps, those in host memory too: O(objects) per call, for checks
        and rare decisions; a policy keeps its own order of what it holds to choose victims."""
        return [k for k, o in self.objects.items() if o.evictable()]

    def info(self, key: int) -> ObjectInfo:
        return self.objects[key]

    def size(self, key: int) -> int:
        return self.objects[key].size

    def __contains__(self, key: int) -> bool:
        return key in self.objects

    def is_resident(self, key: int) -> bool:
        o = self.objects.get(key)
        return o is not None and o.state in (DEVICE, H2D)

    @property
    def prefetcher(self) -> PrefetchPolicy | None:
        """The pool's prefetch policy (``None``: none)."""
        return cast("PrefetchPolicy | None", self._pool._prefetcher)

    @property
    def writing(self) -> bool:
        """Whether the access being served is a write (in the policy's hooks of an access)."""
        return self._pool._writing


def _order_error(policy: Any, e: Exception) -> Exception:
    """The policy's error (``policy``'s own ``eviction_order``, or through a Forwarding that
    forwards it, the wrapped one's: as the loop names it)."""
    return PolicyError(answering_policy(policy, "eviction_order"), "eviction_order", None, e,
                       "the event stands")


def _checked_order(policy: Any, keys: Iterator[Any]) -> Iterator[int]:
    """``keys`` (a policy's ``eviction_order()``), its errors the policy's (:func:`_order_error`)."""
    while True:
        try:
            k = next(keys)
        except StopIteration:
            return
        except Exception as e:
            raise _order_error(policy, e) from e
        yield k


@runtime_checkable
class EvictionPolicy(Protocol):
    """Every member the pool reads of an eviction policy (the module docstring gives the order).
    The last five are optional: ``None`` where the policy has none (see
    :class:`EvictionPolicyBase`)."""

    name: str

    def victim(self, view: PoolView) -> int | None: ...
    def on_hit(self, view: PoolView, key: int) -> None: ...
    def on_miss(self, view: PoolView, key: int) -> None: ...
    def on_insert(self, view: PoolView, key: int) -> None: ...
    def on_evict(self, view: PoolView, key: int) -> None: ...
    def on_free(self, view: PoolView, key: int) -> None: ...

    @property
    def touch(self) -> Callable[[int], object] | None: ...
    @property
    def admit(self) -> Callable[[PoolView, int, int], bool] | None: ...
    @property
    def pending_evictions(self) -> Callable[[], Iterable[int]] | None: ...
    @property
    def on_free_untracked(self) -> Callable[[PoolView, int], None] | None: ...
    @property
    def eviction_order(self) -> Callable[[], Iterable[int]] | None: ...


@runtime_checkable
class PrefetchPolicy(Protocol):
    name: str

    def prefetch(self, view: PoolView, key: int) -> Sequence[int]: ...


class EvictionPolicyBase:
    """Convenience base: no-op hooks, and ``None`` for every optional member (the policy has
    none). Subclasses implement :meth:`victim` and what they need: a subclass defines an
    optional member as a method (or property) of that name."""

    name = "base"

    # the optional members (module docstring): None, the policy has none
    admit: Callable[[PoolView, int, int], bool] | None = None
    pending_evictions: Callable[[], Iterable[int]] | None = None
    on_free_untracked: Callable[[PoolView, int], None] | None = None
    # the objects the policy would give up next, in order, without changing its state (the
    # loop reads it to clean ahead; module docstring); None: no such order
    eviction_order: Callable[[], Iterable[int]] | None = None

    def victim(self, view: PoolView) -> int | None:  # pragma: no cover - abstract
        """The key of an object to evict, one ``view.evictable(key)`` says may go (on the device,
        not pinned): the pool asks while it needs room. ``None`` only where nothing it tracks
        is evictable (the pool then raises :class:`~allocator.errors.PoolExhausted`);
        :func:`~policies.base.first_evictable` picks the first evictable of an order."""
        raise NotImplementedError

    def on_hit(self, view: PoolView, key: int) -> None:
        """``key`` was accessed and is on the device (a hit)."""

    def on_miss(self, view: PoolView, key: int) -> None:
        """``key`` was accessed and is not on the device: the pool makes room (``victim``),
        then ``on_insert``, unless ``admit`` refuses it."""

    def on_insert(self, view: PoolView, key: int) -> None:
        """``key`` now takes room on the device (after its miss, or a prefetch): track it."""

    def on_evict(self, view: PoolView, key: int) -> None:
        """``key`` left the device (the victim chosen, or one evicted by another decider):
        stop tracking it."""

    def on_free(self, view: PoolView, key: int) -> None:
        """``key`` was freed by its owner (it is gone everywhere): stop tracking it."""

    @property
    def touch(self) -> Callable[[int], object] | None:
        """``on_hit`` as a callable of the key alone, or ``None`` (the pool calls ``on_hit``)."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Forwarding(EvictionPolicyBase):
    """``wrapped`` with something added: the pool calls this object, which forwards every hook
    and optional member to ``wrapped`` (its optional members as ``wrapped`` has them, ``None``
    where it has none), except those a subclass defines itself. The evaluator's ``TimedPolicy``
    times ``victim``; :class:`~policies.features.Observed` shows every hook to a feature tracker
    too; a guard's shadow pools report each eviction. ``touch`` is ``wrapped``'s only where the
    subclass keeps this class's ``on_hit`` (a hit must not bypass an ``on_hit`` of its own).
    Errors name the policy whose own hook raised: ``wrapped`` for a hook this class forwards,
    the subclass for one it defines (the library's wrappers, ``labels_as_wrapped``: ``wrapped``)."""

    labels_as_wrapped = False
    """Whether errors name ``wrapped`` instead of this wrapper
    (:func:`~allocator.errors.policy_label`): set by the library's own wrappers, which add
    nothing a user wrote; a user's subclass is named itself."""

    def __init__(self, wrapped: EvictionPolicy) -> None:
        self.wrapped = wrapped
        # (a structural policy may have no name: its class's then)
        self.name = getattr(wrapped, "name", None) or type(wrapped).__name__.lower()

    def victim(self, view: PoolView) -> int | None:
        return self.wrapped.victim(view)

    def on_hit(self, view: PoolView, key: int) -> None:
        self.wrapped.on_hit(view, key)

    def on_miss(self, view: PoolView, key: int) -> None:
        self.wrapped.on_miss(view, key)

    def on_insert(self, view: PoolView, key: int) -> None:
        self.wrapped.on_insert(view, key)

    def on_evict(self, view: PoolView, key: int) -> None:
        self.wrapped.on_evict(view, key)

    def on_free(self, view: PoolView, key: int) -> None:
        self.wrapped.on_free(view, key)

    @property
    def touch(self) -> Callable[[int], object] | None:
        if type(self).on_hit is not Forwarding.on_hit:
            return None
        return optional_hooks(self.wrapped).touch

    @property
    def admit(self) -> Callable[[PoolView, int, int], bool] | None:  # type: ignore[override]
        return optional_hooks(self.wrapped).admit

    @property
    def pending_evictions(self) -> Callable[[], Iterable[int]] | None:  # type: ignore[override]
        return optional_hooks(self.wrapped).pending_evictions

    @property
    def on_free_untracked(self) -> Callable[[PoolView, int], None] | None:  # type: ignore[override]
        return untracked_free_hook(self.wrapped)

    @property
    def eviction_order(self) -> Callable[[], Iterable[int]] | None:  # type: ignore[override]
        return eviction_order_of(self.wrapped)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.wrapped!r})"


class PrefetchPolicyBase:
    """Convenience base of a prefetch policy: after each access the pool asks
    :meth:`prefetch` which objects to bring to the device ahead of their use."""

    name = "none"

    # not read by the pool: what ``prefetch`` would have returned after the same access in
    # another pool (``prefetch_for(view, key)``, without changing the policy's state), for a
    # guard whose shadow pools model the pool's prefetcher in each of them; None: no such answer
    # (the shadows then take the pool's own prefetches). A prefetcher that has it may also have
    # a settable ``prefetch_muted`` (bool): a guard sets it while it follows an expert judged
    # without prefetches, and the prefetcher then returns none (its own state still advancing)
    prefetch_for: Callable[[PoolView, int], Sequence[int]] | None = None

    def prefetch(self, view: PoolView, key: int) -> Sequence[int]:
        """The keys of objects to fetch now, after the access of ``key`` (an iterable of ints,
        in order; an empty tuple for none). Keys the pool does not know, or holds already, are
        passed over; a prefetch that finds no room is dropped (a hint)."""
        return ()


class OptionalHooks(NamedTuple):
    """A policy's optional members as the pool uses them, each ``None`` where it has none."""

    touch: Callable[[int], object] | None
    admit: Callable[[PoolView, int, int], bool] | None
    pending_evictions: Callable[[], Iterable[int]] | None


REQUIRED_HOOKS = ("victim", "on_hit", "on_miss", "on_insert", "on_evict", "on_free")
"""The members every eviction policy has (:class:`EvictionPolicy`'s methods)."""


_CALLS = {"victim": ("view",), "on_hit": ("view", "key"), "on_miss": ("view", "key"),
          "on_insert": ("view", "key"), "on_evict": ("view", "key"), "on_free": ("view", "key"),
          "admit": ("view", "key", "size"), "pending_evictions": (), "touch": ("key",),
          "on_free_untracked": ("view", "key"), "eviction_order": (), "prefetch": ("view", "key")}
"""The arguments the pool passes each member of a policy (positionally)."""

_SIGNED: set[tuple[type, str]] = set()
"""The classes whose members' signatures :func:`_check_calls` has checked, with their role."""


def _check_calls(what: str, obj: object, members: Iterable[str]) -> None:
    """Refuse (:class:`ConfigError`) a member of ``obj`` the pool could not call with its
    arguments (:data:`_CALLS`; a hook written without ``view``, say), before the pool runs
    rather than at the first such event (a free, in a trace that has one, hours in). Members
    whose signature Python cannot tell are left to the call; a class is checked once."""
    import inspect

    cls = type(obj)
    if (cls, what) in _SIGNED:
        return
    for m in members:
        fn = getattr(obj, m, None)
        if not callable(fn):
            continue
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):  # (a builtin without one)
            continue
        args = _CALLS[m]
        try:
            sig.bind(*args)
        except TypeError as e:
            raise ConfigError(f"{what} {cls.__name__}: the pool calls {m}({', '.join(args)}), "
                              f"which {m}{sig} cannot take ({e}); write it as "
                              f"def {m}(self{''.join(', ' + a for a in args)})") from None
    _SIGNED.add((cls, what))


def wrapped_chain(policy: Any) -> list[Any]:
    """``policy`` and each policy it wraps (``wrapped``, a chain of :class:`Forwarding`), at
    most 8, never a cycle."""
    chain: list[Any] = []
    while policy is not None and len(chain) < 8 and all(policy is not q for q in chain):
        chain.append(policy)
        policy = getattr(policy, "wrapped", None)
    return chain


def _observes(policy: object, tracker: object) -> bool:
    """Whether ``policy`` or a policy it wraps shows its hooks to ``tracker``."""
    return any(getattr(p, "tracker", None) is tracker for p in wrapped_chain(policy))


def check_policies(policy: object, prefetcher: object) -> None:
    """Refuse (:class:`ConfigError`, naming what is wrong) a class where an instance belongs,
    an eviction policy without one of :data:`REQUIRED_HOOKS`, a prefetcher without
    ``prefetch``, or a member either has that cannot take the pool's arguments, before the
    pool runs."""
    for what, obj in (("policy", policy), ("prefetcher", prefetcher)):
        if isinstance(obj, type):
            raise ConfigError(f"{what} {obj.__name__} is a class: pass an instance, "
                              f"{obj.__name__}(...)")
    missing = [h for h in REQUIRED_HOOKS if not callable(getattr(policy, h, None))]
    if missing:
        raise ConfigError(f"policy {type(policy).__name__} has no {', '.join(missing)} method"
                          f"{'s' if len(missing) > 1 else ''}: an eviction policy implements "
                          f"{', '.join(REQUIRED_HOOKS)} (derive it from "
                          "cachegym.policies.base.EvictionPolicyBase, whose hooks do nothing, "
                          "and write victim; or pass cachegym.make_policy('lru'))")
    if prefetcher is not None and not callable(getattr(prefetcher, "prefetch", None)):
        if isinstance(prefetcher, str):
            raise ConfigError(f"prefetcher: pass a prefetcher object, not the name "
                              f"{prefetcher!r}: cachegym.make_prefetch({prefetcher!r}) builds one "
                              "where that is a registered name (it lists them where not)")
        raise ConfigError(f"prefetcher {type(prefetcher).__name__} has no prefetch method: a "
                          "prefetch policy implements prefetch(view, key) -> keys to fetch")
    for p in wrapped_chain(policy):  # (a wrapper forwards to the wrapped one's hooks: a user's
        # class under the evaluator's timing is checked too, not at its first call)
        _check_calls("policy", p, [m for m in _CALLS if m != "prefetch"])
    if prefetcher is not None:
        for p in wrapped_chain(prefetcher):
            _check_calls("prefetcher", p, ["prefetch"])
        if getattr(prefetcher, "prefetch_head", True) is None:  # (a learned policy's file without one)
            import logging

            logging.getLogger(__name__).warning(
                "prefetcher %s: its policy file has no prefetch head, so it prefetches nothing (a "
                "file trained with env=joint has one)", type(prefetcher).__name__)
        tracker = getattr(prefetcher, "tracker", None)
        if tracker is not None and prefetcher is not policy and not _observes(policy, tracker):
            raise ConfigError(
                f"prefetcher {type(prefetcher).__name__} decides on features its tracker keeps from "
                "the pool's hooks, which go to the eviction policy: pass "
                "cachegym.policies.features.Observed(policy, prefetcher.tracker) as the policy (or "
                "the same learned policy object as both)")


def optional_hooks(policy: EvictionPolicy) -> OptionalHooks:
    """``policy``'s optional members (module docstring), read once when the pool's policy is set.

    A policy deriving from :class:`EvictionPolicyBase` has every member; one that satisfies only
    the six required methods (written before the optional ones were declared, or a proxy) has
    none of those it omits. ``touch`` is read only where the policy's class declares it.
    """
    cls_touch = getattr(type(policy), "touch", None)
    if isinstance(policy, EvictionPolicyBase):
        return OptionalHooks(policy.touch if cls_touch is not None else None, policy.admit,
                             policy.pending_evictions)
    return OptionalHooks(  # a structural policy: its omitted members count as None
        cast(Any, policy).touch if cls_touch is not None else None,
        getattr(policy, "admit", None), getattr(policy, "pending_evictions", None))


def untracked_free_hook(policy: EvictionPolicy) -> Callable[[PoolView, int], None] | None:
    """``policy.on_free_untracked``, or ``None`` where it has none (read at each such free:
    a policy may drop it at any time by setting it to ``None``)."""
    if isinstance(policy, EvictionPolicyBase):
        return policy.on_free_untracked
    return getattr(policy, "on_free_untracked", None)  # a structural policy may omit it


def eviction_order_of(policy: EvictionPolicy) -> Callable[[], Iterable[int]] | None:
    """``policy.eviction_order``, or ``None`` where it has none (a structural policy may omit it)."""
    if isinstance(policy, EvictionPolicyBase):
        return policy.eviction_order
    return getattr(policy, "eviction_order", None)


def is_noop(policy: EvictionPolicy, hook: str) -> bool:
    """Whether ``policy``'s ``hook`` is :class:`EvictionPolicyBase`'s no-op (an identity check:
    the pool may skip calling it)."""
    fn = getattr(type(policy), hook, None)
    return fn is getattr(EvictionPolicyBase, hook) and hook not in vars(policy)


def answering_policy(policy: Any, hook: str) -> Any:
    """The policy whose own ``hook`` runs when the pool calls ``policy``'s: through a
    :class:`Forwarding` that keeps the forwarding method, the wrapped one."""
    while (isinstance(policy, Forwarding)
           and getattr(type(policy), hook, None) is getattr(Forwarding, hook, None)):
        policy = policy.wrapped
    return policy


def hook_of(policy: EvictionPolicy, hook: str) -> Callable[..., Any]:
    """What the pool calls for ``policy``'s ``hook`` (``victim`` or an ``on_*`` hook), read once
    when the policy is set: through a :class:`Forwarding` that keeps the forwarding method, the
    wrapped policy's own (no call in between)."""
    return cast(Callable[..., Any], getattr(answering_policy(policy, hook), hook))


def active_hook_of(policy: EvictionPolicy, hook: str) -> Callable[..., Any] | None:
    """:func:`hook_of`, or ``None`` where that is :class:`EvictionPolicyBase`'s no-op (the pool
    skips it)."""
    p = answering_policy(policy, hook)
    return None if is_noop(p, hook) else cast(Callable[..., Any], getattr(p, hook))


def default_eviction_policy() -> EvictionPolicy:
    """A new :class:`policies.lru.LRU`: the policy of ``Pool(capacity)`` without one.

    The one reference from ``allocator`` to ``policies``, deliberately made at call time (so
    that the import graph of the modules has no edge from ``allocator`` to ``policies``): the
    pool's default is the one LRU, not a second copy of it here, and ``Pool(capacity)`` must work
    with nothing but ``allocator`` imported. Pass a policy to avoid it.
    """
    from cachegym.policies.lru import LRU

    return LRU()
