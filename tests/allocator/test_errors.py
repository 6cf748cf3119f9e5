"""Every cachegym error crosses a process boundary as it was raised (pickle)."""

from __future__ import annotations

import pickle
import threading

import pytest

from cachegym.allocator import errors as E
from cachegym.allocator.pool import Pool
from cachegym.policies.lru import LRU


@pytest.mark.parametrize("err", [
    E.ObjectTooLarge(1, 2, 3, 4), E.InvalidVictim(3, "it is pinned"), E.ConfigError("bad"),
    E.TraceError("bad size", path="t.bin", column="size", row=3, hint="skip-bad=true"),
    E.PoolExhausted(1, 2, 3, "nothing resident"), E.UnknownKey(5, "free"),
    E.BackendError("copy failed", key=3, direction="h2d"), E.NotPinned(3), E.ObjectPinned(1, 2),
    E.NotResident(1, "pin"), E.PolicyFileError("corrupt"), E.InvalidActionError("no"),
], ids=lambda e: type(e).__name__)
def test_an_error_pickles_with_its_type_message_and_data(err: E.CachegymError) -> None:
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and str(back) == str(err) and vars(back) == vars(err)


def test_a_policy_error_keeps_its_data_and_names_a_policy_that_does_not_pickle() -> None:
    """A policy error raised by a replay in another process: its policy may hold a lock (which
    does not pickle): the error arrives with the policy's repr instead, the rest as it was."""

    class Broken(LRU):
        lock = threading.Lock()

        def victim(self, view):  # type: ignore[no-untyped-def]
            raise ValueError("boom")

    pool = Pool(2, Broken(), placement="bytes")
    pool.access(1, 1)
    pool.access(2, 1)
    with pytest.raises(E.PolicyError) as got:
        pool.access(3, 1)
    err = got.value
    err.row = 7
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is E.PolicyError and str(back) == str(err)
    assert (back.hook, back.key, back.row) == ("victim", 3, 7)
    assert isinstance(back.policy, str) and "Broken" in back.policy
