"""The exception tree of cachegym. Every error says what went wrong and how to fix it.

    CachegymError
    ├── TraceError            a trace file or array is malformed (names file, column, row)
    ├── ConfigError           a configuration value is invalid (names the key and the allowed values)
    ├── PolicyFileError       an exported policy file is corrupt, truncated or mismatched
    ├── InvalidActionError    an agent's action is out of range or masked
    ├── BackendError          a backend failed (CUDA error, device mismatch, a failed copy); the pool
    │                         stays consistent and keeps the last good copy of every object
    ├── PolicyError           an eviction or prefetch policy raised in one of its hooks (names the
    │                         policy, the hook and the key; the policy's exception is the cause)
    └── PoolError             a pool operation cannot be carried out; the pool is unchanged
        ├── ObjectTooLarge    an object is larger than the pool's capacity
        ├── PoolExhausted     no space can be made: everything resident is pinned or in flight
        ├── UnknownKey        the key names no live object
        ├── NotResident       the operation needs the object on the device
        ├── ObjectPinned      the operation (free) needs an unpinned object
        ├── NotPinned         unpin of an object that is not pinned
        └── InvalidVictim     a policy (or agent) chose a victim that cannot be evicted

Errors carry their data as attributes (e.g. ``PoolExhausted.size``) so callers can react.
After any ``PoolError`` the pool is consistent and has lost no data.
"""

from __future__ import annotations


class CachegymError(Exception):
    """Base class of every error raised by cachegym.

    Errors pickle with their type, message and attributes (:meth:`__reduce__`), so that one
    raised in another process (the evaluator's ``eval.jobs``, a Hydra launcher's job) reaches
    the caller as it was raised there (an attribute that does not pickle, such as a
    :class:`PolicyError`'s policy object holding a pool, as its ``repr``); the subclasses'
    constructors, which take the error's data rather than its message, are not called again."""

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.args, {k: _portable(v) for k, v in vars(self).items()}))


def _portable(value: object) -> object:
    """``value`` if it is plain data (of a type of Python's or NumPy's, and it pickles), else its
    ``repr``: e.g. a :class:`PolicyError`'s policy object, which may hold a pool and its lock,
    or be of a class from a user's file that the receiving process cannot import."""
    import pickle

    if type(value).__module__.partition(".")[0] not in ("builtins", "numpy"):
        return repr(value)
    try:
        pickle.dumps(value)
    except Exception:
        return repr(value)
    return value


def _rebuild(cls: type[CachegymError], args: tuple[object, ...],
             state: dict[str, object]) -> CachegymError:
    """A :class:`CachegymError` of ``cls`` with ``args`` and the attributes ``state`` (its
    pickled form: :meth:`CachegymError.__reduce__`)."""
    e = Exception.__new__(cls, *args)  # (its base's: a MemoryError subclass refuses its own)
    e.args = args
    e.__dict__.update(state)
    return e


class TraceError(CachegymError, ValueError):
    """A trace is malformed.

    Attributes: ``path`` (file or ``None``), ``column``, ``row`` (0-based record index or ``None``)
    and ``problem`` (what is wrong).
    """

    def __init__(
        self,
        problem: str,
        *,
        path: str | None = None,
        column: str | None = None,
        row: int | None = None,
        hint: str | None = None,
    ) -> None:
        self.path, self.column, self.row, self.problem = path, column, row, problem
        where = []
        if path is not None:
            where.append(f"file {path!s}")
        if column is not None:
            where.append(f"column {column!r}")
        if row is not None:
            where.append(f"record {row}")
        msg = (", ".join(where) + ": " if where else "") + problem
        if hint:
            msg += f" ({hint})"
        super().__init__(msg)


class ConfigError(CachegymError, ValueError):
    """A configuration value is invalid."""


class PolicyFileError(CachegymError, ValueError):
    """An exported policy file cannot be used: corrupt, truncated or built for other code."""


class OutputError(CachegymError, OSError):
    """A result could not be written (a full disk, a folder that is not writable): what was
    written before stays (files are replaced whole); the message says where and how to go on.
    Made as ``OutputError(message)``, or as an ``OSError`` is, ``OutputError(errno, why,
    path)`` (``filename`` the file that was to be written)."""

    def __str__(self) -> str:
        if self.filename is not None and self.strerror:
            return f"cannot write {self.filename!r}: {self.strerror}"
        return super().__str__()


class InvalidActionError(CachegymError, ValueError):
    """An agent's action is out of range or refers to a masked (invalid) candidate."""


class BackendError(CachegymError, RuntimeError):
    """A backend operation failed (e.g. a CUDA error or a mismatched device).

    A failed copy of a pool's object is raised once, by the pool operation that waits for it,
    with ``key`` (the object) and ``direction`` (``"h2d"``: a fetch, the object stays in host
    memory; ``"d2h"``: a write-back, the object stays on the device, dirty); both are ``None``
    for errors that concern no one object.
    """

    def __init__(self, message: str, *, key: int | None = None,
                 direction: str | None = None) -> None:
        self.key, self.direction = key, direction
        super().__init__(message)


class PolicyError(CachegymError, RuntimeError):
    """A policy raised in a hook the pool called. ``policy``: the policy object; ``hook``: the
    member called (``"victim"``, ``"on_insert"``, ..., ``"prefetch"``); ``key``: the object the
    call was about (for ``victim``, the object being made room for). The policy's exception is
    chained as ``__cause__``. The pool is consistent: an event the hook announced in advance
    (a miss, an insertion, an eviction, a free) is undone, one it reported after the fact (a
    hit, pending evictions, prefetches after an access) stands. ``row``: the trace row being
    replayed when :meth:`Pool.replay <allocator.pool.Pool.replay>` raised it, else ``None``.
    """

    row: int | None = None

    def __init__(self, policy: object, hook: str, key: object, cause: BaseException,
                 outcome: str) -> None:
        self.policy, self.hook, self.key = policy, hook, key
        unknown = (isinstance(cause, KeyError) and key is not None and cause.args[:1] == (key,)
                   and hook in ("on_hit", "on_miss", "on_evict", "on_free"))
        super().__init__(
            f"policy {policy_label(policy)} raised {cause!r} in {hook}"
            f"{'' if key is None else f' for key {key!r}'}; "
            f"{outcome}. Fix the policy's {hook} (its exception is chained as the cause)"
            + ("; a KeyError for the key itself: the policy does not hold the object, so "
               "check that its on_insert records every object the pool inserts (the pool "
               "calls on_insert, then on_hit, on_evict or on_free for it)" if unknown else "")
        )


def policy_label(policy: object) -> str:
    """``'name' (Class)`` of a policy for an error message: the user's class, not that of a
    wrapper the library puts around it (the evaluator's timing, a guard's shadow, ``cachegym
    check``'s: a :class:`~allocator.seams.Forwarding` whose class sets ``labels_as_wrapped``);
    a user's own wrapper is named itself."""
    inner = policy
    for _ in range(8):  # (a chain of wrappers, never a cycle's worth)
        w = getattr(inner, "wrapped", None)
        if w is None or w is inner or not getattr(type(inner), "labels_as_wrapped", False):
            break
        inner = w
    name = getattr(inner, "name", None)
    # (a user's class that sets no name of its own shows its base's, "base" or "none": its class's)
    own = [c for c in type(inner).__mro__ if c.__name__ not in ("EvictionPolicyBase", "PrefetchPolicyBase")]
    inherited = "name" not in getattr(inner, "__dict__", {}) and not any("name" in vars(c) for c in own)
    if not name or inherited:
        name = type(inner).__name__
    return f"{name!r} ({type(inner).__name__})"


def backend_cause(err: BaseException) -> str:
    """A backend's failure as a :class:`BackendError`'s message quotes it: its own message
    for a ``BackendError``, ``Type: message`` for any other exception (a ``MemoryError``)."""
    return str(err) if isinstance(err, BackendError) else f"{type(err).__name__}: {err}"


class PoolError(CachegymError):
    """A pool operation could not be carried out. The pool is unchanged and consistent.
    ``row``: the trace row being replayed when :meth:`Pool.replay
    <allocator.pool.Pool.replay>` raised it (the rows before it were replayed), else ``None``."""

    row: int | None = None


class ObjectTooLarge(PoolError, ValueError):
    """``capacity``: what the placement can hold; ``requested``: the pool's capacity as given,
    when the placement holds less of it (an arena counts whole aligned blocks)."""

    def __init__(self, key: int, size: int, capacity: int, requested: int | None = None) -> None:
        self.key, self.size, self.capacity = key, size, capacity
        of = ("" if requested is None or requested == capacity
              else f" (the {requested} bytes asked for, in whole aligned blocks)")
        super().__init__(
            f"object {key} of {size} bytes is larger than the pool's capacity of {capacity} bytes{of}; "
            "raise the capacity, split the object, or make the pool with oversize='bypass' "
            "(allocator.oversize=bypass in a config) to stream such objects, copied for each access"
        )


class PoolExhausted(PoolError, MemoryError):
    def __init__(self, size: int, used: int, capacity: int, detail: str = "") -> None:
        self.size, self.used, self.capacity = size, used, capacity
        super().__init__(
            f"cannot make room for {size} bytes: {used} of {capacity} bytes are held by pinned "
            f"or in-flight objects{': ' + detail if detail else ''}; unpin objects or raise the capacity"
        )


class UnknownKey(PoolError, KeyError):
    def __init__(self, key: int, op: str = "access") -> None:
        self.key = key
        super().__init__(f"{op}: key {key} names no live object in the pool (freed, or never "
                         "created); create it first with access(key, size) or put(key, data)")

    def __str__(self) -> str:  # KeyError quotes its message otherwise
        return str(self.args[0])


class NotResident(PoolError):
    def __init__(self, key: int, op: str) -> None:
        self.key = key
        super().__init__(f"{op}: object {key} is not on the device; access it first")


class ObjectPinned(PoolError):
    def __init__(self, key: int, pins: int, op: str = "free") -> None:
        self.key, self.pins = key, pins
        super().__init__(f"{op}: object {key} is pinned ({pins} pins); unpin it first")


class NotPinned(PoolError):
    def __init__(self, key: int) -> None:
        self.key = key
        super().__init__(f"unpin: object {key} is not pinned; every unpin needs a matching pin")


class InvalidVictim(PoolError):
    """``key``: the victim chosen; ``row``: the trace row being replayed when
    :meth:`Pool.replay <allocator.pool.Pool.replay>` raised it, else ``None``."""

    row: int | None = None
    policy: object = None  # the policy whose victim it was (None: an agent's or a caller's)
    hook: str | None = None  # "victim" where a policy chose it

    def __init__(self, key: object, reason: str) -> None:
        self.key, self.reason = key, reason
        super().__init__(self._message())

    def _message(self) -> str:
        who = "" if self.policy is None else f"policy {policy_label(self.policy)}, in victim: "
        return (f"{who}eviction victim {self.key!r} is not evictable: {self.reason}; a policy "
                "must return a key from view.candidates()")

    def chosen_by(self, policy: object) -> InvalidVictim:
        """This error, naming ``policy`` (and its hook, ``victim``) as the one that chose."""
        self.policy, self.hook = policy, "victim"
        self.args = (self._message(),)
        return self
