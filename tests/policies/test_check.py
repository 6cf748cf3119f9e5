"""``cachegym check`` (:mod:`envs.check`): a user's policy that breaks the pool's contract is
named with the check, the row and what to fix; one that keeps it passes."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap

import pytest

from cachegym.envs.check import CHECKS, PolicyCheckError, check_policy
from cachegym.policies.base import EvictionPolicyBase, first_evictable


class MRU(EvictionPolicyBase):
    name = "mru"

    def __init__(self) -> None:
        self._order: dict[int, None] = {}

    def victim(self, view):  # type: ignore[no-untyped-def]
        return first_evictable(view, reversed(self._order))

    def on_hit(self, view, key):  # type: ignore[no-untyped-def]
        self._order[key] = self._order.pop(key)

    def on_insert(self, view, key):  # type: ignore[no-untyped-def]
        self._order[key] = None

    def on_evict(self, view, key):  # type: ignore[no-untyped-def]
        del self._order[key]

    def on_free(self, view, key):  # type: ignore[no-untyped-def]
        self._order.pop(key, None)


class IgnoresPins(MRU):
    def victim(self, view):  # type: ignore[no-untyped-def]
        return next(reversed(self._order), None)


class GivesUp(MRU):
    def victim(self, view):  # type: ignore[no-untyped-def]
        return None


class Unseeded(MRU):
    def victim(self, view):  # type: ignore[no-untyped-def]
        c = view.candidates()
        return random.choice(c) if c else None


class OrderOfAnother(MRU):
    def eviction_order(self):  # type: ignore[no-untyped-def]
        return iter(self._order)  # LRU's order, while victim is MRU's


class KeepsEvicted(MRU):
    def on_evict(self, view, key):  # type: ignore[no-untyped-def]
        pass

    def victim(self, view):  # type: ignore[no-untyped-def]
        return next(reversed(self._order), None) if self._order else None


class Raises(MRU):
    def on_hit(self, view, key):  # type: ignore[no-untyped-def]
        raise KeyError(key)


class DeletesPoolRecords(MRU):
    def victim(self, view):  # type: ignore[no-untyped-def]
        k = super().victim(view)
        view.objects.pop(k, None)  # (the pool's own record, which the view lends to read)
        return k


def test_a_policy_that_keeps_the_contract_passes() -> None:
    report = check_policy(MRU, seeds=(1,), requests=400)
    assert list(report.rows) == list(CHECKS)
    assert all(victims > 0 for _, victims, _ in report.rows.values())
    assert "mru: every check passed" in str(report)


@pytest.mark.parametrize("cls, check, match", [
    (IgnoresPins, CHECKS[0], r"victim returned \d+, which is not evictable now"),
    (GivesUp, CHECKS[0], r"victim returned None while \d+ objects are evictable"),
    (Unseeded, CHECKS[3], r"two fresh instances replaying the same trace evicted differently"),
    (OrderOfAnother, CHECKS[0], r"eviction_order\(\) puts \d+ first .* but victim chose \d+"),
    (KeepsEvicted, CHECKS[0], r"victim returned \d+, which it does not hold: .*\(evicted or freed\)"),
    (Raises, CHECKS[0], r"raised KeyError\(\d+\) in on_hit"),
    (DeletesPoolRecords, CHECKS[0], r"victim returned \d+, which names no live object of the pool"),
])
def test_each_broken_rule_is_named(cls: type, check: str, match: str) -> None:
    with pytest.raises(PolicyCheckError, match=match) as e:
        check_policy(cls, seeds=(1,), requests=400)
    assert e.value.check == check
    assert e.value.row is not None or check == CHECKS[3]
    assert f"({cls.__name__})" in str(e.value)  # the user's class, beside its name


class NeverForgets(EvictionPolicyBase):
    """Keeps the contract (first_evictable skips what left), but records every object forever."""

    name = "never-forgets"

    def __init__(self) -> None:
        self.keys: list[int] = []

    def victim(self, view):  # type: ignore[no-untyped-def]
        return first_evictable(view, self.keys)

    def on_insert(self, view, key):  # type: ignore[no-untyped-def]
        self.keys.append(key)


class ForgetsEvictedOnly(NeverForgets):
    def on_evict(self, view, key):  # type: ignore[no-untyped-def]
        self.keys.remove(key)


@pytest.mark.parametrize("cls, hooks", [(NeverForgets, "on_evict and on_free"),
                                        (ForgetsEvictedOnly, "on_free")])
def test_a_policy_that_records_objects_and_never_forgets_them_passes_with_a_warning(
        cls: type, hooks: str) -> None:
    report = check_policy(cls, seeds=(1,), requests=400)
    assert report.warnings == [report.warnings[0]] and f"no-op {hooks}: " in report.warnings[0]
    assert f"{cls.__name__} defines on_insert" in str(report)
    assert f"  warning: {cls.__name__} defines on_insert" in str(report).splitlines()[-1]


@pytest.mark.parametrize("name", ["lru", "fifo", "lfu", "clock", "arc", "sieve", "s3fifo", "lirs",
                                  "slru", "gdsf", "belady", "random"])
def test_no_registered_policy_and_no_forgetting_one_is_warned(name: str) -> None:
    from cachegym.envs.check import forgetting_warnings, mixed_trace
    from cachegym.policies.registry import make_eviction

    assert forgetting_warnings(make_eviction(name, trace=mixed_trace(1, n=200), seed=0)) == []
    assert forgetting_warnings(MRU()) == []


def test_cli_checks_a_policy_file_by_where_it_lives(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "mine.py").write_text(textwrap.dedent("""
        from cachegym.policies.base import EvictionPolicyBase, first_evictable

        class MRU(EvictionPolicyBase):
            name = "mru"
            def __init__(self):
                self._order = {}
            def victim(self, view):
                return first_evictable(view, reversed(self._order))
            def on_insert(self, view, key):
                self._order[key] = None
            def on_evict(self, view, key):
                del self._order[key]
            def on_free(self, view, key):
                self._order.pop(key, None)

        class Boom(MRU):
            def on_hit(self, view, key):
                raise KeyError(key)
        """))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cachegym", "check", *args, "--requests", "300",
                               "--seeds", "1"], cwd=tmp_path, capture_output=True, text=True)

    ok = run("mine.py:MRU,lru")
    assert ok.returncode == 0, ok.stderr
    assert "mine.py:MRU: every check passed" in ok.stdout and "lru: every check passed" in ok.stdout
    bad = run("mine.py:Boom")
    assert bad.returncode == 1
    assert "mine.py:Boom: FAILED [bytes, pins and frees, row" in bad.stdout
    assert "KeyError raised at" in bad.stdout and "mine.py:19 in on_hit" in bad.stdout
    unknown = run("nope")
    assert unknown.returncode == 2 and "unknown eviction policy 'nope'" in unknown.stderr


class RaisesWhenAsked(MRU):
    """Raises only when asked for a victim outside the pool (the agent check asks itself)."""

    def victim(self, view):  # type: ignore[no-untyped-def]
        if view.capacity == 60_000:
            raise ValueError("boom")
        return super().victim(view)


class OrderRaises(MRU):
    def eviction_order(self):  # type: ignore[no-untyped-def]
        raise RuntimeError("no order")


class ForgetsFrees(MRU):
    def on_free(self, view, key):  # type: ignore[no-untyped-def]
        pass

    def victim(self, view):  # type: ignore[no-untyped-def]
        for k in reversed(self._order):  # (skips pinned objects, not those it was told are gone)
            if view.evictable(k) or not view.is_resident(k):
                return k
        return None


@pytest.mark.parametrize("cls, match", [
    (RaisesWhenAsked, r"raised ValueError\('boom'\) in victim"),
    (OrderRaises, r"eviction_order\(\) raised RuntimeError\('no order'\)"),
    (ForgetsFrees, r"victim returned \d+, which it does not hold: .*\(evicted or freed\)"),
])
def test_errors_outside_the_pool_and_in_eviction_order_are_named(cls: type, match: str) -> None:
    with pytest.raises(PolicyCheckError, match=match) as e:
        check_policy(cls, seeds=(1,), requests=600)
    assert e.value.row is not None
    if cls is not ForgetsFrees:  # the policy's own exception is chained (its file and line)
        cause = e.value.__cause__
        while cause is not None and cause.__cause__ is not None:
            cause = cause.__cause__
        assert type(cause).__name__ in ("ValueError", "RuntimeError")


def test_bad_arguments_are_refused() -> None:
    from cachegym.allocator.errors import ConfigError

    with pytest.raises(ConfigError, match=r"seed \(integers >= 0\)"):
        check_policy(MRU, seeds=(-1,))
    with pytest.raises(SystemExit) as e:
        from cachegym.scripts.check_policy import main

        main([" , "])
    assert e.value.code == 2
