"""Check an eviction policy against the pool's contract: ``cachegym check my_policies.py:MRU``.

A policy of your own (or a registered one) is replayed through the pool on small generated
traces that exercise what a trace in the field will: reads, writes, frees (a freed key comes
back as a new object), pins, objects larger than the pool, prefetches still in flight under a
timing preset, victims chosen by someone else (an agent driving :meth:`Pool.steps
<allocator.pool.Pool.steps>`), and the same trace replayed twice. Wrapped in :class:`Checked`,
every victim and hook is checked as it happens:

* ``victim`` returns a key that is evictable now and that the policy was given by
  ``on_insert`` (not one it has since been told was evicted or freed), and ``None`` only when
  nothing is evictable;
* where the policy has ``eviction_order``, its first evictable key is what ``victim`` chooses;
* the objects the policy tracks (``on_insert`` until ``on_evict`` / ``on_free``) are exactly
  the pool's resident objects after every event, and the pool never holds more than its capacity;
* a fresh policy replaying the same trace chooses the same victims (seed your randomness).

The first broken rule raises :class:`PolicyCheckError`, naming the check, the trace row and
what to fix; a hook that raises is reported the same way (its exception chained). A class that
records objects in ``on_insert`` but keeps the base's no-op ``on_evict`` or ``on_free`` gets a
warning in the report (:func:`forgetting_warnings`): what it recorded of an evicted or freed
object stays, which ``first_evictable`` then skips past without breaking a rule. Not detected:
other decisions that are wrong but keep the contract (e.g. a freed key's old position kept for
its next object), randomness that repeats within one process (Python's string hashing),
slowness (the report gives each check's time).
``tests/policies/test_invariants.py`` runs these checks on every registered policy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, Any

import numpy as np

from cachegym.allocator.errors import (
    CachegymError,
    ConfigError,
    PolicyError,
    PoolError,
    policy_label,
)
from cachegym.allocator.loop import as_key
from cachegym.allocator.seams import Forwarding, check_policies, eviction_order_of
from cachegym.allocator.trace import Op, Trace
from cachegym.policies.base import EvictionPolicy, EvictionPolicyBase, first_evictable

if TYPE_CHECKING:
    from cachegym.allocator.pool import Pool, PoolView

__all__ = ["PolicyCheckError", "Checked", "CheckReport", "check_policy", "mixed_trace", "drive",
           "agent_driven", "forgetting_warnings", "CHECKS"]


class PolicyCheckError(CachegymError, AssertionError):
    """A policy broke the pool's contract (:mod:`envs.check`). ``check``: which check;
    ``row``: the trace row (``None`` where the rule is about the whole replay)."""

    def __init__(self, message: str, check: str | None = None, row: int | None = None) -> None:
        self.check, self.row, self.message = check, row, message
        where = "" if check is None else f"[{check}{'' if row is None else f', row {row}'}] "
        super().__init__(where + message)


def _rule(e: Exception) -> Exception:
    """The broken rule inside ``e`` (a :class:`PolicyCheckError` :class:`Checked` raised in a
    hook, which the pool wrapped as the policy's error), or ``e`` itself."""
    if isinstance(e, PolicyError) and isinstance(e.__cause__, PolicyCheckError):
        return e.__cause__
    return e


def _at(e: Exception, check: str, row: int) -> PolicyCheckError:
    """``e`` (:func:`_rule`) as a :class:`PolicyCheckError` of ``check`` at ``row``."""
    e = _rule(e)
    return PolicyCheckError(e.message if isinstance(e, PolicyCheckError) else str(e), check, row)


def _cause(e: Exception) -> BaseException | None:
    """What :func:`_at`'s error is chained to: the policy's own exception (where one was
    raised), not a rule's."""
    e = _rule(e)
    return e.__cause__ if isinstance(e, PolicyCheckError) else e


_NO_ORDER = object()


class Checked(Forwarding):
    """``wrapped`` as the pool sees it (every optional member forwarded), each victim and hook
    checked as it happens; ``tracked`` mirrors the objects the policy was given (``on_insert``
    until ``on_evict`` / ``on_free``), ``evicted`` lists every eviction in order."""

    labels_as_wrapped = True  # (errors name the policy checked)

    def __init__(self, wrapped: EvictionPolicy) -> None:
        super().__init__(wrapped)
        self.tracked: set[int] = set()
        self.victims = 0  # victims the policy chose (not None)
        self.untracked_frees = 0
        self.order_checks = 0  # victims compared with eviction_order's first evictable key
        self.evicted: list[int] = []
        self.gone: set[int] = set()  # keys evicted or freed since their last insertion

    def _fail(self, message: str) -> None:
        raise PolicyCheckError(f"policy {policy_label(self.wrapped)}: {message}")

    def victim(self, view: PoolView) -> int | None:
        order = eviction_order_of(self.wrapped)
        expect: Any = _NO_ORDER
        if order is not None:
            try:
                listed = [list(islice(order(), 32)) for _ in range(2)]
                expect = first_evictable(view, order())
            except Exception as e:
                raise PolicyCheckError(f"policy {policy_label(self.wrapped)}: eviction_order() "
                                       f"raised {e!r}: it lists what victim would choose, in "
                                       "order, without raising or changing the policy's state "
                                       "(or omit it)") from e
            if listed[0] != listed[1]:
                self._fail(f"eviction_order() changed the policy's state: two calls in a row "
                           f"listed {listed[0][:8]} ... then {listed[1][:8]} ...: it lists what "
                           "victim would choose, in order, without changing anything (the pool "
                           "reads it to clean ahead and to keep prefetches from evicting what is "
                           "used sooner)")
        k = self.wrapped.victim(view)
        if k is None:
            if view.candidates():
                self._fail(f"victim returned None while {len(view.candidates())} objects are "
                           "evictable (e.g. the first evictable of view.candidates()): return "
                           "None only when none is")
            return None
        try:
            as_key(k, "victim")  # (the pool's rule for a key)
        except ConfigError:
            self._fail(f"victim returned {k!r}, a {type(k).__name__}: keys are integers (the "
                       "keys on_insert gave it)")
        if k not in self.tracked:
            self._fail(f"victim returned {k!r}, which it does not hold: a policy holds exactly the "
                       "objects on_insert gave it, until on_evict or on_free takes them away "
                       f"({'evicted or freed' if k in self.gone else 'never inserted'})")
        if k not in view:  # (the policy holds it; the pool's record is gone)
            self._fail(f"victim returned {k!r}, which names no live object of the pool: its "
                       "record is gone from view.objects, the pool's own records (read them, "
                       "never change them: copy what you keep)")
        if not view.evictable(k):
            self._fail(f"victim returned {k!r}, which is not evictable now (pinned, or in "
                       "flight): skip what view.evictable(key) refuses, e.g. with "
                       "policies.base.first_evictable(view, keys)")
        if expect is not _NO_ORDER:
            if expect != k:
                self._fail(f"eviction_order() puts {expect!r} first among the evictable objects "
                           f"but victim chose {k!r}: eviction_order must list what victim would "
                           "choose, in order, without changing the policy's state (or omit it)")
            self.order_checks += 1
        self.victims += 1
        return k

    def on_hit(self, view: PoolView, key: int) -> None:
        if key not in self.tracked:
            self._fail(f"the pool reported a hit of {key!r}, which the policy does not hold "
                       "(a bug of the pool: please report it)")
        self.wrapped.on_hit(view, key)

    def on_miss(self, view: PoolView, key: int) -> None:
        if key in self.tracked:
            self._fail(f"the pool reported a miss of {key!r}, which the policy holds (a bug of the "
                       "pool: please report it)")
        self.wrapped.on_miss(view, key)

    def on_insert(self, view: PoolView, key: int) -> None:
        if key in self.tracked:
            self._fail(f"the pool inserted {key!r} twice (a bug of the pool: please report it)")
        self.tracked.add(key)
        self.gone.discard(key)
        self.wrapped.on_insert(view, key)

    def on_evict(self, view: PoolView, key: int) -> None:
        self.tracked.discard(key)
        self.gone.add(key)
        self.evicted.append(key)
        self.wrapped.on_evict(view, key)

    def on_free(self, view: PoolView, key: int) -> None:
        self.tracked.discard(key)
        self.gone.add(key)
        self.wrapped.on_free(view, key)

    @property
    def on_free_untracked(self) -> Callable[[PoolView, int], None] | None:  # type: ignore[override]
        inner = super().on_free_untracked

        def hook(view: PoolView, key: int) -> None:
            if key in self.tracked:
                self._fail(f"the pool freed {key!r} as untracked while the policy holds it (a "
                           "bug of the pool: please report it)")
            self.untracked_frees += 1
            if inner is not None:
                inner(view, key)
        return hook


def mixed_trace(seed: int = 0, n: int = 1500, n_objects: int = 120) -> Trace:
    """Zipf(0.9) reads and ~10% writes over ``n_objects`` objects of 512 B - 16 KiB, with ~3%
    frees of live objects (a freed key comes back as a new object) and 20 us of compute per
    request."""
    from cachegym.envs.workloads import synthetic  # (envs: the layer above policies)

    rng = np.random.default_rng(seed)
    sizes = rng.integers(512, 16 * 1024, n_objects)
    ranks = synthetic.zipf_ranks(rng, n, n_objects, 0.9)
    keys, szs, ops = [], [], []
    live: set[int] = set()
    for r in ranks.tolist():
        if live and rng.random() < 0.03:
            k = sorted(live)[int(rng.integers(len(live)))]
            live.discard(k)
            keys.append(k)
            szs.append(int(sizes[k]))
            ops.append(Op.FREE)
            continue
        live.add(r)
        keys.append(r)
        szs.append(int(sizes[r]))
        ops.append(Op.WRITE if rng.random() < 0.1 else Op.READ)
    return Trace.from_arrays(np.array(keys), np.array(szs), np.array(ops, np.uint8),
                             compute_ns=np.full(len(keys), 20_000), name=f"mixed{seed}")


def drive(pool: Pool, checked: Checked, trace: Trace, check: str = "replay",
          each_row: Callable[[int], None] | None = None) -> None:
    """Replay ``trace`` on ``pool`` (whose policy is ``checked``) row by row, pinning an object
    now and then and unpinning it later; after each row the policy must hold exactly the pool's
    resident objects and the pool at most its capacity (then ``each_row(row)``, if given). A
    broken rule, or a policy's error, raises :class:`PolicyCheckError` naming ``check`` and the
    row."""
    pins: list[int] = []
    cap = pool.capacity
    i = -1
    try:
        for i, (k, s, op, c) in enumerate(zip(trace.key.tolist(), trace.size.tolist(),
                                              trace.op.tolist(), trace.compute_ns.tolist())):
            if op == Op.FREE:
                while k in pins:
                    pins.remove(k)
                    pool.unpin(k)
                pool.free(k)
            else:
                pool.access(k, s, op == Op.WRITE, compute_ns=c)
                if i % 37 == 0 and len(pins) < 3 and pool.state(k) == "device":
                    pool.pin(k)
                    pins.append(k)
                if i % 37 == 18 and pins:
                    pool.unpin(pins.pop(0))
            if pool.view.used > cap:
                raise PolicyCheckError(f"the pool holds {pool.view.used} bytes, more than its "
                                       f"capacity {cap} (a bug of the pool: please report it)")
            resident = set(pool.resident_keys())
            if checked.tracked != resident:
                extra, lost = sorted(checked.tracked - resident), sorted(resident - checked.tracked)
                raise PolicyCheckError(f"policy {policy_label(checked.wrapped)} holds {extra[:5]} that the pool "
                                       f"does not, and not {lost[:5]} that it does")
            if each_row is not None:
                each_row(i)
    except (PolicyCheckError, PolicyError, PoolError) as e:
        raise _at(e, check, i) from _cause(e)
    st = pool.snapshot()
    if st.hits + st.misses != st.accesses:
        raise PolicyCheckError(f"hits {st.hits} + misses {st.misses} != accesses {st.accesses}",
                               check)


def agent_driven(pool: Pool, checked: Checked, trace: Trace, check: str = "agent") -> None:
    """Replay ``trace`` through :meth:`Pool.steps`, the victims chosen alternately by the
    policy and at random among the candidates (as an agent would): the policy must take any
    evictable key in ``on_evict`` and keep working."""
    rng = np.random.default_rng(0)
    i = -1
    try:
        for i, (k, s, op) in enumerate(zip(trace.key.tolist(), trace.size.tolist(),
                                           trace.op.tolist())):
            gen = pool.steps(k, s, op)
            try:
                req = next(gen)
                while True:
                    if i % 2:
                        try:
                            v = checked.victim(req.view)
                        except PolicyCheckError:
                            raise
                        except Exception as e:  # (asked here, not by the pool: named as it would)
                            raise PolicyError(checked.wrapped, "victim", k, e,
                                              "the check stopped") from e
                    else:
                        cands = sorted(req.view.candidates())
                        v = cands[int(rng.integers(len(cands)))]
                    req = gen.send(v)  # type: ignore[arg-type]
            except StopIteration:
                pass
            if checked.tracked != set(pool.resident_keys()):
                raise PolicyCheckError(f"policy {policy_label(checked.wrapped)} holds other objects than the "
                                       "pool after a victim chosen by someone else: on_evict "
                                       "must accept any evictable key")
    except (PolicyCheckError, PolicyError, PoolError) as e:
        raise _at(e, check, i) from _cause(e)


CHECKS = ("bytes, pins and frees", "arena, prefetches in flight", "victims chosen by an agent",
          "same trace, same victims")
"""The checks :func:`check_policy` runs, in order."""


def forgetting_warnings(policy: EvictionPolicy) -> list[str]:
    """Warnings for a policy whose class defines ``on_insert`` (it records the objects it is
    given) but keeps :class:`EvictionPolicyBase`'s no-op ``on_evict`` or ``on_free``: what it
    recorded of an object evicted (or freed: a DL trace frees every activation each step) stays
    in its state, which grows with the run, and ``victim`` must skip past it. No rule of the
    contract breaks (``view.evictable`` refuses such a key), so the checks pass; a warning."""
    cls = type(policy)

    def defines(hook: str) -> bool:
        return getattr(cls, hook, None) is not getattr(EvictionPolicyBase, hook)

    if not defines("on_insert"):
        return []
    kept = [h for h in ("on_evict", "on_free") if not defines(h)]
    if not kept:
        return []
    gone = " or ".join({"on_evict": "evicted", "on_free": "freed"}[h] for h in kept)
    hooks = " and ".join(kept)
    return [f"{cls.__name__} defines on_insert but keeps EvictionPolicyBase's no-op {hooks}: what "
            f"on_insert recorded of an object {gone} stays in the policy (its state grows with "
            f"the run, victim must skip past it); define {hooks} to forget the object (as "
            "policies.lru.OrderedPolicy does), unless on_insert records nothing per object"]


@dataclass
class CheckReport:
    """What :func:`check_policy` ran: per check, the requests replayed and the victims the
    policy chose (and those compared with its ``eviction_order``); ``warnings``: what keeps the
    contract but looks wrong (:func:`forgetting_warnings`)."""

    policy: str
    rows: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"{self.policy}: every check passed"]
        for name, (n, victims, ordered) in self.rows.items():
            lines.append(f"  {name:<30} {n:>6} requests  {victims:>5} victims "
                         f"{self.seconds.get(name, 0.0):6.2f} s"
                         + (f" ({ordered} checked against eviction_order)" if ordered else "")
                         + (" (none chosen: this check tested the hooks alone; does the policy "
                            "admit objects of 512 B - 16 KiB in a pool of 60-200 kB?)"
                            if not victims else ""))
        lines.extend(f"  warning: {w}" for w in self.warnings)
        return "\n".join(lines)


def check_policy(policy: str | Callable[[], EvictionPolicy], *, seeds: Sequence[int] = (1, 2),
                 requests: int = 1500) -> CheckReport:
    """Run :data:`CHECKS` on fresh instances of ``policy`` (a registry name or spec such as
    ``"my_policies.py:MRU"`` / ``"lru"``, or a callable of no arguments that returns a new
    policy, e.g. the class) over :func:`mixed_trace` of each seed; returns the report, or raises
    :class:`PolicyCheckError` at the first broken rule."""
    from cachegym.allocator.pool import Pool
    from cachegym.policies.prefetch import LookaheadPrefetcher, MarkovPrefetcher
    from cachegym.policies.registry import make_eviction

    if not seeds or requests < 100 or any(
            not isinstance(s, int) or isinstance(s, bool) or s < 0 for s in seeds):
        raise ConfigError(f"check_policy: give at least one seed (integers >= 0) and >= 100 "
                          f"requests, got seeds={list(seeds)!r}, requests={requests!r}")

    def fresh(trace: Trace) -> Checked:
        p = make_eviction(policy, trace=trace, seed=0) if isinstance(policy, str) else policy()
        if isinstance(p, type):
            raise ConfigError(f"check_policy: {policy!r} returned the class {p.__name__}, not a "
                              "policy: pass the class itself, or a function that returns an instance")
        check_policies(p, None)  # (a hook the pool cannot call, before it is wrapped)
        return Checked(p)

    report: CheckReport | None = None
    totals = {name: [0, 0, 0] for name in CHECKS}

    seconds = dict.fromkeys(CHECKS, 0.0)
    t0 = time.perf_counter()

    def count(name: str, checked: Checked, trace: Trace) -> None:
        nonlocal t0
        t = totals[name]
        t[0] += len(trace)
        t[1] += checked.victims
        t[2] += checked.order_checks
        now = time.perf_counter()
        seconds[name] += now - t0
        t0 = now

    for seed in seeds:
        trace = mixed_trace(seed, n=requests)
        t0 = time.perf_counter()
        c = fresh(trace)
        if report is None:
            report = CheckReport(c.name, warnings=forgetting_warnings(c.wrapped))
        drive(Pool(150_000, c, placement="bytes", oversize="bypass"), c, trace, CHECKS[0])
        count(CHECKS[0], c, trace)
        c = fresh(trace)
        pre = MarkovPrefetcher(depth=2, width=2) if c.name != "belady" else \
            LookaheadPrefetcher(trace, depth=3)
        drive(Pool(200_000, c, prefetcher=pre, cost="a100_pcie4"), c, trace, CHECKS[1])
        count(CHECKS[1], c, trace)
        if c.name != "belady":  # (an oracle: it cannot follow victims it did not choose)
            c = fresh(trace)
            agent_driven(Pool(60_000, c, placement="bytes"), c, trace, CHECKS[2])
            count(CHECKS[2], c, trace)
        runs = []
        for _ in range(2):
            c = fresh(trace)
            drive(Pool(60_000, c, placement="bytes"), c, trace, CHECKS[3])
            runs.append(c.evicted)
        if runs[0] != runs[1]:
            at = next((j for j, (a, b) in enumerate(zip(*runs)) if a != b), min(map(len, runs)))
            raise PolicyCheckError(f"policy {policy_label(c.wrapped)}: two fresh instances replaying the same "
                                   f"trace evicted differently (eviction {at}): seed any "
                                   "randomness (e.g. numpy.random.default_rng(seed) in __init__)",
                                   CHECKS[3])
        count(CHECKS[3], c, trace)
    assert report is not None
    report.rows = {name: (t[0], t[1], t[2]) for name, t in totals.items() if t[0]}
    report.seconds = {name: seconds[name] for name in report.rows}
    return report

