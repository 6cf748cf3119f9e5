"""``Pool(clean_ahead=...)``: the dirty objects among the next victims are written back early,
while the copy-out engine is idle and the free bytes run short, so that evicting them waits for
no copy. The same decisions; less stall where saves wait for room (activation offload);
nothing is cleaned without timing or without an eviction order; with real bytes the losses of
activation offload stay bitwise equal."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from cachegym.allocator.backends import NumpyBackend
from cachegym.allocator.errors import ConfigError
from cachegym.allocator.pool import Pool
from cachegym.allocator.trace import Op, Trace
from cachegym.policies.registry import make_eviction

KiB = 1024


def offload_steps(n_steps: int = 4, n_acts: int = 32, size: int = 64 * KiB,
                  compute_ns: int = 4_000) -> Trace:
    """Activation offload's accesses: each step saves ``n_acts`` new activations (writes),
    reads them back in reverse, frees them; ``compute_ns`` after each access."""
    keys: list[int] = []
    ops: list[int] = []
    for s in range(n_steps):
        acts = list(range(s * n_acts, (s + 1) * n_acts))
        keys += acts + acts[::-1] + acts
        ops += [Op.WRITE] * n_acts + [Op.READ] * n_acts + [Op.FREE] * n_acts
    n = len(keys)
    return Trace.from_arrays(np.array(keys), np.full(n, size), np.array(ops, np.uint8),
                             compute_ns=np.full(n, compute_ns))


def replay_rows(pool: Pool, t: Trace) -> list[tuple[bool | None, frozenset[int]]]:
    """Per row: the access's hit (None for a free) and the resident set after it."""
    out = []
    for k, s, o, c in zip(t.key.tolist(), t.size.tolist(), t.op.tolist(), t.compute_ns.tolist()):
        if o == Op.FREE:
            pool.free(k)
            hit = None
        else:
            hit = pool.access(k, s, o == Op.WRITE, compute_ns=c)
        out.append((hit, frozenset(pool.view.candidates())))  # (nothing is pinned)
    return out


@pytest.mark.parametrize("policy", ["lru", "fifo", "lfu", "gdsf", "slru", "clock", "sieve", "arc",
                                    "belady"])
def test_the_same_decisions_with_less_stall_where_saves_wait_for_room(policy: str) -> None:
    t = offload_steps()
    cap = 8 * 64 * KiB  # a quarter of a step's activations
    plain = Pool(cap, make_eviction(policy, trace=t), cost="h100_pcie5")
    clean = Pool(cap, make_eviction(policy, trace=t), cost="h100_pcie5", clean_ahead=cap // 2)
    assert replay_rows(plain, t) == replay_rows(clean, t)
    a, b = plain.snapshot(), clean.snapshot()
    assert (a.hits, a.misses, a.evictions) == (b.hits, b.misses, b.evictions)
    assert b.bytes_h2d == a.bytes_h2d and b.bytes_d2h >= a.bytes_d2h
    # (the reads of evicted activations stall alike: no prefetcher here)
    assert b.stall_ns <= 0.85 * a.stall_ns, (a.stall_ns, b.stall_ns)  # (SLRU 0.80x, LRU 0.69x)


def test_the_replay_loop_cleans_as_access_does() -> None:
    t = offload_steps()
    cap = 8 * 64 * KiB
    one = Pool(cap, make_eviction("lru"), cost="h100_pcie5", clean_ahead="256KiB")
    by_access = Pool(cap, make_eviction("lru"), cost="h100_pcie5", clean_ahead=256 * KiB)
    replay_rows(by_access, t)
    assert one.replay(t).as_dict() == by_access.snapshot().as_dict()
    assert copy.deepcopy(one)._clean_ahead == 256 * KiB  # (a copy keeps it)
    assert copy.deepcopy(one)._wrote and not copy.deepcopy(Pool(cap))._wrote


def test_one_access_looks_at_no_more_than_clean_walk_next_victims(monkeypatch) -> None:
    """The walk after an access stops after ``CLEAN_WALK`` next victims (a quarter of a pool
    of small objects is thousands of them); the next accesses look again."""
    from cachegym.allocator import loop

    pool = Pool(64 * KiB, make_eviction("lru"), cost="h100_pcie5")
    for k in range(64):  # 64 dirty objects of 1 KiB fill the pool
        pool.access(k, KiB, True)
    pool._clean_ahead = 32 * KiB  # (from now on: half the pool)
    monkeypatch.setattr(loop, "CLEAN_WALK", 3)
    pool.access(63, KiB)
    assert pool.stats.writebacks == 3
    monkeypatch.setattr(loop, "CLEAN_WALK", 1000)
    pool.cost.compute(10**9)  # (the copy-out engine idle again)
    pool.access(63, KiB)
    assert pool.stats.writebacks == 32  # the 32 next victims


@pytest.mark.parametrize("kw", [{"cost": None}, {"policy": "random"}, {"clean_ahead": 0}])
def test_nothing_is_cleaned_without_timing_or_an_eviction_order(kw: dict) -> None:
    t = offload_steps()
    cap = 8 * 64 * KiB
    policy = kw.pop("policy", "lru")
    args = {"cost": "h100_pcie5", "clean_ahead": cap // 2, **kw}
    got = Pool(cap, make_eviction(policy), **args).replay(t).as_dict()
    args["clean_ahead"] = 0
    assert got == Pool(cap, make_eviction(policy), **args).replay(t).as_dict()


@pytest.mark.parametrize("policy", ["slru", "s3fifo", "lru"])
def test_activation_offload_keeps_the_losses_while_cleaning_ahead(policy: str) -> None:
    """Real bytes: ActivationOffload fills a saved tensor's block after ``access(write=True)``
    returns; the object just accessed is never cleaned, else (S3-FIFO and SLRU list a new
    object among their next victims) its early copy took the block before the tensor's bytes
    and the host kept garbage: the losses differed (S3-FIFO by 5e-3)."""
    pytest.importorskip("torch")
    from cachegym.allocator.offload import ActivationOffload, train
    from tests.allocator.test_offload import small_setup

    model, batches, fp = small_setup()
    base = train(copy.deepcopy(model), batches, 3)["losses"]
    for zero_copy in (True, False):
        off = ActivationOffload(fp["total"] // 2, backend=NumpyBackend(), zero_copy=zero_copy,
                                policy=make_eviction(policy), prefetcher=None, clean_ahead=0.25)
        try:
            got = train(copy.deepcopy(model), batches, 3, offload=off)["losses"]
            cleaned = off.stats()["writebacks"]
        finally:
            off.close()
        assert got == base and cleaned > 0


@pytest.mark.parametrize("bad", [-1, 1.5, True, "lots", None])
def test_a_bad_clean_ahead_is_refused_by_name(bad: object) -> None:
    with pytest.raises(ConfigError, match="clean_ahead"):
        Pool(1 << 20, clean_ahead=bad)  # type: ignore[arg-type]


def test_clean_ahead_above_the_capacity_is_refused() -> None:
    """It wrote back every object as it arrived (an offload of 1 MiB with 2 MiB kept clean)."""
    with pytest.raises(ConfigError, match=r"clean_ahead 2097152 bytes is more than the pool's "
                                          r"capacity \(1048576 bytes\)"):
        Pool(1 << 20, clean_ahead="2MiB")
    assert Pool(1 << 20, clean_ahead=1 << 20)._clean_ahead == 1 << 20


def _rows(rows: list[tuple[int, int, int, int]]) -> Trace:
    k, s, o, c = zip(*rows)
    return Trace.from_arrays(np.array(k), np.array(s), np.array(o, np.uint8), compute_ns=np.array(c))


def test_a_block_copied_out_by_now_counts_as_free_to_the_cleaner() -> None:
    """The cleaner writes back while fewer than ``clean_ahead`` bytes are free; a block whose
    copy-out has finished is free, though the pool releases it only at its next allocation (a
    helper's differential test: a freed object's block, copied out at 8,015 ns, still counted as
    used at 16,010 ns, so object 0 was written back for nothing)."""
    W, R, F = int(Op.WRITE), int(Op.READ), int(Op.FREE)
    t = _rows([(2, 431, W, 0), (2, 431, F, 0), (2, 756, W, 0), (0, 96, W, 0), (1, 295, R, 0),
               (2, 331, F, 0), (2, 272, R, 0)])
    st = Pool(1554, make_eviction("lru"), placement="bytes", cost="h100_pcie5",
              clean_ahead=0.5).replay(t)
    assert (st.writebacks, st.bytes_d2h) == (1, 756)


def test_the_device_bytes_reported_leave_out_blocks_copied_out_by_now() -> None:
    """``snapshot().device_bytes`` and ``memory_stats()``'s active bytes: object 1's write-back
    finished long before the last access, so its 50 bytes are free (it reported 150)."""
    t = _rows([(1, 50, int(Op.WRITE), 0), (2, 100, int(Op.READ), 0), (3, 100, int(Op.READ), 10**6)])
    pool = Pool(150, make_eviction("lru"), placement="bytes", cost="h100_pcie5")
    pool.replay(t)
    ms = pool.memory_stats()
    assert pool.snapshot().device_bytes == 100 == ms["active_bytes.all.current"]
    assert ms["allocated_bytes.all.current"] == 100 and ms["active.all.current"] == 1
    assert ms["inactive_split_bytes.all.current"] == 50
