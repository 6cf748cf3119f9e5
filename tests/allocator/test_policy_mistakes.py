"""A user's policy or prefetcher written with a common mistake (from a newcomer's audit): each
gets a typed error that says what was wrong, before the pool runs where Python can tell, else at
the call, never a raw TypeError from inside the loop and never a silent wrong result."""

from __future__ import annotations

import numpy as np
import pytest

from cachegym.allocator.errors import ConfigError, InvalidVictim, PolicyError
from cachegym.allocator.pool import Pool
from cachegym.allocator.seams import PrefetchPolicyBase
from cachegym.allocator.trace import Trace
from cachegym.policies.lru import LRU


class _Returns(PrefetchPolicyBase):
    name = "returns"

    def __init__(self, value: object) -> None:
        self.value = value

    def prefetch(self, view, key):  # type: ignore[no-untyped-def]
        return self.value


def _replay(policy: object, prefetcher: object = None) -> Pool:
    pool = Pool(400, policy, prefetcher=prefetcher)  # type: ignore[arg-type]
    pool.replay(Trace.from_arrays([1, 2, 3, 4, 5, 1, 2, 6, 7, 1], [100] * 10))
    return pool


@pytest.mark.parametrize("value, match", [
    (None, r"prefetch returned None: it must return an iterable of integer keys"),
    (7, r"prefetch returned 7: it must return an iterable"),
    (["8"], r"prefetch returned the key '8' of type str: keys are integers"),
    ([2.0], r"the key 2.0 of type float"),
    ([True], r"the key True of type bool"),
])
def test_a_prefetcher_that_returns_no_keys_is_named(value: object, match: str) -> None:
    with pytest.raises(PolicyError, match=match) as e:
        _replay(LRU(), _Returns(value))
    assert e.value.hook == "prefetch"


def test_a_prefetcher_may_return_any_iterable_of_integer_keys() -> None:
    for value in ([], (), [np.int64(3)], iter([3]), {3: None}):
        assert _replay(LRU(), _Returns(value)).stats.accesses == 10


class _Pending(LRU):
    def __init__(self, value: object) -> None:
        super().__init__()
        self.value = value

    def pending_evictions(self):  # type: ignore[no-untyped-def]
        return self.value


@pytest.mark.parametrize("value", [None, 3])
def test_pending_evictions_that_returns_no_keys_is_named(value: object) -> None:
    with pytest.raises(PolicyError, match="pending_evictions returned"):
        _replay(_Pending(value))


class _AdmitForgot(LRU):
    def admit(self, view, key, size):  # type: ignore[no-untyped-def]
        pass  # the `return True` forgotten: every object was streamed, silently


def test_an_admit_that_returns_no_bool_is_named() -> None:
    with pytest.raises(PolicyError, match=r"admit returned None: it must return True"):
        _replay(_AdmitForgot())


class _AdmitNumpy(LRU):
    def admit(self, view, key, size):  # type: ignore[no-untyped-def]
        return np.bool_(key != 3)


def test_numpy_bools_admit() -> None:
    assert _replay(_AdmitNumpy()).stats.streamed == 1


class _NoView(LRU):
    def on_free(self, key):  # type: ignore[no-untyped-def,override]
        pass


def test_a_hook_that_cannot_take_the_pools_arguments_is_refused_before_the_pool_runs() -> None:
    """It failed only at the first free: never, on a trace without one."""
    with pytest.raises(ConfigError, match=r"the pool calls on_free\(view, key\).*def on_free\(self, view, key\)"):
        Pool(400, _NoView())


def test_a_class_where_an_instance_belongs_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"policy LRU is a class: pass an instance, LRU\(...\)"):
        Pool(400, LRU)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"prefetcher _Returns is a class"):
        Pool(400, LRU(), prefetcher=_Returns)  # type: ignore[arg-type]


@pytest.mark.parametrize("victim, match", [
    ("1", r"it is a str: keys are integers"), (1.0, r"it is a float"), ([1], r"it is a list"),
    (99, r"it names no live object")])
def test_a_victim_of_another_type_is_named_so(victim: object, match: str) -> None:
    pool = Pool(400, LRU())
    for k in range(4):
        pool.access(k, 100)
    g = pool.steps(9, 100)
    next(g)
    with pytest.raises(InvalidVictim, match=match):
        g.send(victim)  # type: ignore[arg-type]


class _Plain:
    """Every hook, no name, no base class (a structural policy)."""

    def __init__(self) -> None:
        self.order: dict[int, None] = {}

    def victim(self, view):  # type: ignore[no-untyped-def]
        return next(k for k in self.order if view.evictable(k))

    def on_hit(self, view, key):  # type: ignore[no-untyped-def]
        self.order.pop(key)
        self.order[key] = None

    def on_miss(self, view, key):  # type: ignore[no-untyped-def]
        pass

    def on_insert(self, view, key):  # type: ignore[no-untyped-def]
        self.order[key] = None

    def on_evict(self, view, key):  # type: ignore[no-untyped-def]
        self.order.pop(key)

    def on_free(self, view, key):  # type: ignore[no-untyped-def]
        self.order.pop(key, None)


def test_a_structural_policy_without_a_name_runs_wrapped() -> None:
    from cachegym.allocator.seams import Forwarding

    assert Forwarding(_Plain()).name == "_plain"  # type: ignore[arg-type]
    assert _replay(Forwarding(_Plain())).stats.misses == _replay(LRU()).stats.misses  # type: ignore[arg-type]


def test_one_policy_object_for_two_live_pools_is_refused() -> None:
    """A policy keeps the state of one pool's objects: given to a second live pool (by the
    constructor or the setter) it is refused, naming the fix, and the first pool runs on; a
    copy (pickle, deepcopy) is another object."""
    import copy

    trace = Trace.from_arrays([1, 2, 3, 4, 5, 1, 2, 6, 7, 1], [100] * 10)
    p = LRU()
    a = Pool(400, p)
    with pytest.raises(ConfigError, match=r"already serves another live pool .*each pool needs its "
                                          r"own policy object"):
        Pool(400, p)
    b = Pool(400, LRU())
    with pytest.raises(ConfigError, match=r"already serves another live pool"):
        b.policy = p
    assert a.replay(trace).misses == _replay(LRU()).stats.misses  # a's policy is a's alone
    d = copy.deepcopy(a)
    assert d.policy is not p and a.policy is p


@pytest.mark.parametrize("give_up", ["close", "setter", "drop"])
def test_a_policy_that_served_a_pool_is_refused_by_the_next_unless_it_resets(give_up: str) -> None:
    """A policy given up by its pool (closed, given another policy, or dropped) still holds that
    pool's objects: the next pool refuses it (the README's "close the other pool first" gave
    wrong misses: 7366 instead of 7588 on gpt); a policy with reset() is reset and decides as a
    fresh one."""
    import gc

    from cachegym.policies.features import FeatureTracker

    trace = Trace.from_arrays([1, 2, 3, 4, 5, 1, 2, 6, 7, 1, 8, 9, 2, 3], [100] * 14)
    fresh = Pool(400, LRU()).replay(trace).misses
    for p in (LRU(), FeatureTracker()):
        a = Pool(400, p)
        a.replay(trace)
        if give_up == "close":
            a.close()
        elif give_up == "setter":
            a.policy = LRU()
        else:
            del a
            gc.collect()
        if isinstance(p, LRU):
            with pytest.raises(ConfigError, match=r"served another pool before .*still holds that "
                                                  r"pool's objects .*new policy object.*reset\(\)"):
                Pool(400, p)
            if give_up == "setter":  # nor is it taken back by the pool it served
                with pytest.raises(ConfigError, match=r"served another pool before"):
                    a.policy = p
        else:  # (the tracker's victims are LRU's)
            b = Pool(400, p)
            assert len(p) == 0 and b.replay(trace).misses == fresh


def test_a_closed_pool_used_again_takes_its_policy_back_unless_another_pool_has_it() -> None:
    """A closed pool went on deciding with a policy that another pool had been given since
    (reset for that pool, or following its objects): two pools' decisions from one state."""
    import copy

    from cachegym.policies.features import FeatureTracker

    trace = Trace.from_arrays([1, 2, 3, 4, 5, 1, 2, 6, 7, 1, 8, 9, 2, 3], [100] * 14)
    want = Pool(400, LRU()).replay(trace).misses
    a = Pool(400, LRU())
    a.replay(trace.window(0, 7))
    a.close()
    a.close()  # (nothing more to give up)
    c = copy.deepcopy(a)  # (a copy is a new pool with copies of its policy: open; a stays closed)
    assert a._closed and not c._closed and c.policy is not a.policy
    assert a.replay(trace.window(7, 14)).misses == want  # taken back: as if never closed
    assert c.replay(trace.window(7, 14)).misses == want
    t = FeatureTracker()
    a = Pool(400, t)
    a.replay(trace.window(0, 7))
    a.close()
    b = Pool(400, t)  # (reset for b)
    calls = {"access": lambda: a.access(1, 100), "replay": lambda: a.replay(trace),
             "free": lambda: a.free(1), "pin": lambda: a.pin(1), "prefetch": lambda: a.prefetch(1)}
    for op, call in calls.items():
        with pytest.raises(ConfigError, match=f"{op}: this pool was closed, and its policy or "
                                              "prefetcher .* has been given to another pool since"):
            call()
    b.close()  # (and after b gave it up too: t's state is b's, not a's)
    with pytest.raises(ConfigError, match="has been given to another pool since"):
        a.access(1, 100)
    with pytest.raises(ConfigError, match="prefetcher: this pool was closed"):
        a.prefetcher = None  # (its claim would have reset t for a: a's objects unknown to it)
    assert b.replay(trace).misses == want and a.stats.accesses == 7


@pytest.mark.parametrize("bad", [True, 1.0, np.float64(1.0), np.bool_(True), "1"])
def test_a_key_that_only_hashes_like_an_int_reaches_no_object(bad: object) -> None:
    """``True`` and ``1.0`` hash and compare equal to ``1``: every entry point refuses them,
    the object 1 untouched (they were read, overwritten and freed through object 1)."""
    from cachegym.allocator.backends import NumpyBackend

    pool = Pool(16384, LRU(), backend=NumpyBackend())
    pool.put(1, np.full(4096, 1, np.uint8))
    calls = [lambda: pool.put(bad, np.full(4096, 77, np.uint8)), lambda: pool.get(bad),
             lambda: pool.access(bad, 4096), lambda: next(pool.steps(bad, 4096)),
             lambda: pool.free(bad), lambda: pool.pin(bad), lambda: pool.unpin(bad),
             lambda: pool.prefetch(bad), lambda: pool.state(bad)]
    for call in calls:
        with pytest.raises(ConfigError, match=r"keys are integers .*got .* of type"):
            call()
    assert pool.stats.accesses == 1 and pool.resident_keys() == [1]  # (the put alone)
    assert pool.get(1)[0] == 1
    assert pool.access(np.int64(1), 4096) and pool.state(np.int32(1)) == "device"  # NumPy ints are keys


class _OrderRaises(LRU):
    def eviction_order(self):  # type: ignore[override]
        raise KeyError("oops")


class _Rotates(LRU):
    def eviction_order(self):  # type: ignore[override]
        if self._order:  # moves its first key to the end: a state change
            self._order.move_to_end(next(iter(self._order)))
        return iter(self._order)


def test_an_eviction_order_that_raises_is_the_policys_error_wherever_it_is_read() -> None:
    """Read to clean ahead (the loop) it raised a bare TypeError/KeyError naming no policy; read
    by a prefetcher (through the view) it was blamed on the prefetcher."""
    from cachegym.allocator.errors import PolicyError
    from cachegym.policies.prefetch import HistoryPrefetcher

    writes = Trace.from_arrays(list(range(1, 30)) * 3, [100] * 87, [1] * 87,
                               compute_ns=[10_000] * 87)
    with pytest.raises(PolicyError, match=r"policy '.*' \(_OrderRaises\) raised KeyError\('oops'\) "
                                          r"in eviction_order") as e:
        Pool(800, _OrderRaises(), cost="h100_pcie5", clean_ahead=400).replay(writes)
    assert e.value.hook == "eviction_order" and e.value.row is not None
    reads = Trace.from_arrays(list(range(1, 30)) * 3, [100] * 87, step=[0] * 29 + [1] * 29 + [2] * 29,
                              compute_ns=[10_000] * 87)
    with pytest.raises(PolicyError, match=r"\(_OrderRaises\) raised KeyError\('oops'\) in "
                                          r"eviction_order;") as e:
        Pool(800, _OrderRaises(), prefetcher=HistoryPrefetcher(), cost="h100_pcie5").replay(reads)
    assert e.value.hook == "eviction_order"


def test_a_forwarding_subclass_is_named_in_its_own_errors_the_librarys_wrappers_are_not() -> None:
    from cachegym.allocator.errors import PolicyError
    from cachegym.allocator.seams import Forwarding
    from cachegym.envs.evaluation import TimedPolicy

    class MyWrapper(Forwarding):
        def on_hit(self, view, key):  # type: ignore[no-untyped-def]
            raise KeyError(key)

    trace = Trace.from_arrays([1, 2, 1], [100] * 3)
    with pytest.raises(PolicyError, match=r"policy 'lru' \(MyWrapper\) raised KeyError\(1\) in on_hit"):
        Pool(400, MyWrapper(LRU())).replay(trace)

    class Bad(LRU):
        def on_hit(self, view, key):  # type: ignore[no-untyped-def]
            raise KeyError(key)

    class Passes(Forwarding):  # (forwards on_hit)
        pass

    for wrapped in (Passes(Bad()), TimedPolicy(Bad())):  # forwarded hooks: the wrapped's error
        with pytest.raises(PolicyError, match=r"policy 'lru' \(Bad\) raised KeyError\(1\) in on_hit"):
            Pool(400, wrapped).replay(trace)


def test_cachegym_check_names_what_the_pool_would() -> None:
    """An eviction_order that changes the policy's state passed; a str victim was 'never
    inserted'; a hook without view failed inside check.py."""
    from cachegym.envs.check import PolicyCheckError, check_policy
    from cachegym.policies.base import EvictionPolicyBase

    with pytest.raises(PolicyCheckError, match=r"eviction_order\(\) changed the policy's state"):
        check_policy(_Rotates, seeds=(1,), requests=500)

    class StrVictim(LRU):
        def victim(self, view):  # type: ignore[no-untyped-def]
            k = super().victim(view)
            return None if k is None else str(k)

    with pytest.raises(PolicyCheckError, match=r"victim returned '\d+', a str: keys are integers"):
        check_policy(StrVictim, seeds=(1,), requests=500)

    class NoView(EvictionPolicyBase):
        def victim(self, view):  # type: ignore[no-untyped-def]
            return None

        def on_insert(self, key):  # type: ignore[no-untyped-def, override]
            pass

    with pytest.raises(ConfigError, match=r"write it as def on_insert\(self, view, key\)"):
        check_policy(NoView, seeds=(1,), requests=500)


def test_a_used_policy_wrapped_anew_is_refused_and_a_bad_reset_named() -> None:
    """``Observed(lru, tracker)`` or ``Forwarding(lru)`` of a policy that served a closed pool
    was accepted (the wrapper is another object), and ActivationOffload wraps a policy itself;
    a reset() that needs an argument escaped as a bare TypeError."""
    from cachegym.allocator.seams import Forwarding
    from cachegym.policies.features import FeatureTracker, Observed

    trace = Trace.from_arrays([1, 2, 3, 4, 5, 1, 2], [100] * 7)
    lru = LRU()
    a = Pool(400, lru)
    a.replay(trace)
    with pytest.raises(ConfigError, match=r"already serves another live pool"):
        Pool(400, Forwarding(lru))
    a.close()
    for wrapper in (Observed(lru, FeatureTracker()), Forwarding(lru)):
        with pytest.raises(ConfigError, match=r"served another pool before"):
            Pool(400, wrapper)

    class NeedsKey(LRU):
        def reset(self, key):  # type: ignore[no-untyped-def]
            pass

    p = NeedsKey()
    Pool(400, p).close()
    with pytest.raises(ConfigError, match=r"its reset\(\), which a pool calls .* raised TypeError"):
        Pool(400, p)


def test_a_pool_error_in_a_replay_names_its_row_and_a_sweep_refuses_it_up_front() -> None:
    """An object larger than an ``oversize="error"`` pool stopped a replay with ``row=None``
    (the rows before it replayed), and the evaluator warned that such objects are streamed,
    then stopped at the first one; it is refused before any run, naming the first."""
    from cachegym.allocator.errors import ObjectTooLarge, PoolExhausted
    from cachegym.envs.evaluation import check_oversized

    t = Trace.from_arrays([1, 2, 3, 2, 4], [10, 10, 500, 10, 10])
    pool = Pool(100, LRU())
    with pytest.raises(ObjectTooLarge) as e:
        pool.replay(t)
    assert e.value.row == 2 and pool.snapshot().misses == 2
    pinned = Pool(20, LRU())
    pinned.access(9, 20)
    pinned.pin(9)
    with pytest.raises(PoolExhausted) as ex:
        pinned.replay(t)
    assert ex.value.row == 0
    check_oversized(t, 100, "100", "t")  # (streamed under bypass: a warning)
    with pytest.raises(ConfigError, match=r"1 of its 5 requests \(1 objects, the first at row 2, "
                                          r"key 3, 500 bytes\) are larger; under "
                                          r"allocator.oversize=error"):
        check_oversized(t, 100, "100", "t", "error")


def test_a_wrapped_policys_hooks_are_checked_before_the_pool_runs() -> None:
    """A user's hook written without ``view`` under the evaluator's timing wrapper (``cachegym
    sim``) failed at its first call with a raw TypeError; unwrapped it was refused up front."""
    from cachegym.envs.evaluation import TimedPolicy

    class NoView(LRU):
        def on_hit(self, key):  # type: ignore[no-untyped-def,override]
            pass

    for pol in (NoView(), TimedPolicy(NoView())):
        with pytest.raises(ConfigError, match=r"policy NoView: the pool calls on_hit\(view, key\).*"
                                              r"write it as def on_hit\(self, view, key\)"):
            Pool(100, pol)


def test_wrong_argument_types_are_config_errors() -> None:
    """``Pool.replay([1, 2, 3])`` raised AttributeError ('list' has no 'key');
    ``LearnedPolicy.load(p, budget_us='x')`` a TypeError from a comparison."""
    from pathlib import Path

    from cachegym.policies.learned import LearnedPolicy

    with pytest.raises(ConfigError, match=r"replay takes a Trace .*got a list"):
        Pool(100, LRU()).replay([1, 2, 3])  # type: ignore[arg-type]
    golden = Path(__file__).resolve().parents[1] / "golden" / "policy.npz"
    for bad in ("x", -1, float("nan"), True):
        with pytest.raises(ConfigError, match=r"budget_us must be a number >= 0"):
            LearnedPolicy.load(golden, budget_us=bad)  # type: ignore[arg-type]
    assert LearnedPolicy.load(golden, budget_us=None).budget_us is None


def test_a_key_error_for_the_key_itself_points_at_on_insert() -> None:
    """A policy without on_insert (its order never holds the key) failed in on_hit with a
    message that said to fix on_hit; it names on_insert now."""
    from cachegym.allocator.errors import PolicyError
    from cachegym.policies.base import EvictionPolicyBase

    class NoInsert(EvictionPolicyBase):
        def __init__(self) -> None:
            self.order: dict[int, None] = {}

        def victim(self, view):  # type: ignore[no-untyped-def]
            return next(iter(self.order), None)

        def on_hit(self, view, key):  # type: ignore[no-untyped-def]
            del self.order[key]
            self.order[key] = None

    with pytest.raises(PolicyError, match=r"raised KeyError\(1\) in on_hit for key 1;.*check that "
                                          r"its on_insert records every object"):
        Pool(400, NoInsert()).replay(Trace.from_arrays([1, 2, 1], [100] * 3))


def test_a_prefetcher_given_by_name_or_in_the_wrong_place_says_what_to_do(tmp_path) -> None:
    """A newcomer's mistakes (a helper's audit): a name where an object goes, an eviction
    policy's name as a prefetcher, a prefetcher given to `cachegym check`."""
    from cachegym.policies.registry import make_eviction, make_prefetch

    with pytest.raises(ConfigError, match=r"pass a prefetcher object, not the name 'markov': "
                                          r"cachegym.make_prefetch\('markov'\)"):
        Pool(1 << 20, LRU(), prefetcher="markov")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"'lru' is an eviction policy: give it as the policy"):
        make_prefetch("lru")
    (tmp_path / "mine.py").write_text(
        "from cachegym.policies.base import PrefetchPolicyBase\n"
        "class NextK(PrefetchPolicyBase):\n"
        "    def prefetch(self, view, key):\n"
        "        return [key + 1]\n")
    with pytest.raises(ConfigError, match=r"it has prefetch\(\): give it as a prefetcher"):
        make_eviction(str(tmp_path / "mine.py") + ":NextK")
