"""Fault injection for the pool's tests: a backend whose copies fail on request, and eviction
and prefetch policies whose hooks raise on request (reused by ``test_faults.py`` and the
stateful property test).

An armed fault fires once, at the next matching call; a hook fault raises before the wrapped
policy sees the call, so the wrapped policy is exactly as it was (the pool must be too, or have
completed the event consistently).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from cachegym.allocator.backends import NumpyBackend
from cachegym.allocator.errors import BackendError
from cachegym.allocator.pool import DEVICE, H2D, Pool
from cachegym.allocator.seams import EvictionPolicyBase, PoolView, PrefetchPolicy, optional_hooks

COPY_DIRECTIONS = ("h2d", "d2h")
# every member of allocator/seams.py's protocols the pool calls
EVICTION_HOOKS = ("victim", "on_hit", "touch", "on_miss", "admit", "on_insert", "on_evict",
                  "on_free", "on_free_untracked", "pending_evictions")
HOOKS = EVICTION_HOOKS + ("prefetch",)


def policy_tracks(pool: Pool) -> set[int]:
    """The objects a pool's policy must track: those on the device or on their way there, but
    for what the recovery from a failed copy told it and it raised on (an insertion or an
    eviction it missed, told again before the pool's next operation: ``Pool._owed``)."""
    tracked = {k for k, o in pool._objs.items() if o.state in (DEVICE, H2D)}
    for _, key in pool._owed:
        tracked ^= {key}
    return tracked


class FailedCopy:
    """The event of a copy that failed: nothing was copied; waiting on it raises ``error``
    (one instance, so a test can tell a failure reported twice from two failures)."""

    def __init__(self, direction: str, key: int) -> None:
        self.direction, self.key = direction, key
        self.error = BackendError(f"injected: the {direction} copy of object {key} failed",
                                  key=key, direction=direction)
        self.waits = 0


class FaultyBackend:
    """A :class:`NumpyBackend` whose next copy in a direction (of one key, or any) fails:
    asynchronously (the event's wait raises) or at launch (``copy_*`` raises)."""

    def __init__(self, inner: NumpyBackend | None = None) -> None:
        self.inner = inner if inner is not None else NumpyBackend()
        self.armed: list[tuple[str, int | None, bool]] = []
        self.failures: list[BackendError] = []  # every injected failure, in order

    def arm(self, direction: str, key: int | None = None, *, at_launch: bool = False) -> None:
        assert direction in COPY_DIRECTIONS
        self.armed.append((direction, key, at_launch))

    def disarm(self) -> None:
        self.armed.clear()

    def _take(self, direction: str, key: int) -> bool | None:
        for i, (d, k, at_launch) in enumerate(self.armed):
            if d == direction and (k is None or k == key):
                del self.armed[i]
                return at_launch
        return None

    def _copy(self, direction: str, key: int, start: Callable[[], Any]) -> Any:
        at_launch = self._take(direction, key)
        if at_launch is None:
            return start()
        if at_launch:
            err = BackendError(f"injected: the {direction} copy of object {key} could not start",
                               key=key, direction=direction)
            self.failures.append(err)
            raise err
        ev = FailedCopy(direction, key)
        self.failures.append(ev.error)
        return ev

    def copy_h2d(self, key: int, offset: int, nbytes: int) -> Any:
        return self._copy("h2d", key, lambda: self.inner.copy_h2d(key, offset, nbytes))

    def copy_d2h(self, key: int, offset: int, nbytes: int) -> Any:
        return self._copy("d2h", key, lambda: self.inner.copy_d2h(key, offset, nbytes))

    def _stream(self, direction: str, key: int, run: Callable[[], Any]) -> Any:
        """A streamed copy (synchronous): an armed fault of its direction raises at once."""
        if self._take(direction, key) is not None:
            err = BackendError(f"injected: streaming object {key} ({direction}) failed",
                               key=key, direction=direction)
            self.failures.append(err)
            raise err
        return run()

    def stream_in(self, key: int, nbytes: int) -> np.ndarray:
        return self._stream("h2d", key, lambda: self.inner.stream_in(key, nbytes))  # type: ignore[no-any-return]

    def stream_out(self, key: int, data: np.ndarray) -> None:
        self._stream("d2h", key, lambda: self.inner.stream_out(key, data))

    def wait(self, event: Any) -> None:
        if isinstance(event, FailedCopy):
            event.waits += 1
            raise event.error
        self.inner.wait(event)

    def attach(self, capacity: int) -> None:
        self.inner.attach(capacity)

    def device_buffer(self, offset: int, nbytes: int) -> np.ndarray:
        return self.inner.device_buffer(offset, nbytes)

    def write(self, offset: int, data: np.ndarray) -> None:
        self.inner.write(offset, data)

    def free_host(self, key: int) -> None:
        self.inner.free_host(key)

    def host_buffer(self, key: int) -> np.ndarray | None:
        return self.inner.host_buffer(key)

    def synchronize(self) -> None:
        self.inner.synchronize()

    def close(self) -> None:
        self.inner.close()


class HookFault(Exception):
    """The injected failure of a policy hook."""


class HookFaults:
    """Which hook fails next (one at a time), and the faults that fired."""

    def __init__(self) -> None:
        self.armed: str | None = None
        self.fired: list[tuple[str, object]] = []

    def arm(self, hook: str) -> None:
        assert hook in HOOKS
        self.armed = hook

    def check(self, hook: str, key: object) -> None:
        if self.armed == hook:
            self.armed = None
            self.fired.append((hook, key))
            raise HookFault(f"injected failure of {hook}({key!r})")


class RaisingPolicy(EvictionPolicyBase):
    """Forwards every hook to ``inner``, except an armed one, which raises :class:`HookFault`
    before ``inner`` sees the call. It has every optional member (``touch``, ``admit``,
    ``pending_evictions``, ``on_free_untracked``), each forwarding to ``inner``'s or doing what
    its absence means."""

    name = "raising"

    def __init__(self, inner: EvictionPolicyBase, faults: HookFaults | None = None) -> None:
        self.inner = inner
        self.faults = faults if faults is not None else HookFaults()
        self._inner_hooks = optional_hooks(inner)

    def arm(self, hook: str) -> None:
        self.faults.arm(hook)

    def victim(self, view: PoolView) -> int | None:
        self.faults.check("victim", None)
        return self.inner.victim(view)

    def on_hit(self, view: PoolView, key: int) -> None:
        self.faults.check("on_hit", key)
        self.inner.on_hit(view, key)

    def on_miss(self, view: PoolView, key: int) -> None:
        self.faults.check("on_miss", key)
        self.inner.on_miss(view, key)

    def on_insert(self, view: PoolView, key: int) -> None:
        self.faults.check("on_insert", key)
        self.inner.on_insert(view, key)

    def on_evict(self, view: PoolView, key: int) -> None:
        self.faults.check("on_evict", key)
        self.inner.on_evict(view, key)

    def on_free(self, view: PoolView, key: int) -> None:
        self.faults.check("on_free", key)
        self.inner.on_free(view, key)

    def on_free_untracked(self, view: PoolView, key: int) -> None:  # type: ignore[override]
        self.faults.check("on_free_untracked", key)
        if self.inner.on_free_untracked is not None:
            self.inner.on_free_untracked(view, key)

    @property
    def touch(self) -> Callable[[int], object] | None:
        return self._touch

    def _touch(self, key: int) -> None:
        self.faults.check("touch", key)
        t = self._inner_hooks.touch
        if t is not None:
            t(key)

    @property  # type: ignore[override]
    def admit(self) -> Callable[[PoolView, int, int], bool]:
        return self._admit

    def _admit(self, view: PoolView, key: int, size: int) -> bool:
        self.faults.check("admit", key)
        a = self._inner_hooks.admit
        return True if a is None else a(view, key, size)

    @property  # type: ignore[override]
    def pending_evictions(self) -> Callable[[], Iterable[int]]:
        return self._pending

    def _pending(self) -> Iterable[int]:
        self.faults.check("pending_evictions", None)
        p = self._inner_hooks.pending_evictions
        return () if p is None else p()


class RaisingPrefetcher:
    """Forwards ``prefetch`` to ``inner`` unless the ``prefetch`` hook is armed."""

    def __init__(self, inner: PrefetchPolicy, faults: HookFaults) -> None:
        self.inner, self.faults = inner, faults
        self.name = f"raising-{inner.name}"

    def prefetch(self, view: PoolView, key: int) -> Sequence[int]:
        self.faults.check("prefetch", key)
        return self.inner.prefetch(view, key)
