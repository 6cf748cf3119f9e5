"""The prefetch candidates' proposer (policies/successors.py): its aligned history follows a
periodic trace whose objects are new every period (a DL step's activations), proposes what the
previous period used next, in order, and only what is due under a timing model; its parameters
round-trip through a policy file's header and bad ones are refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.pool import Pool
from cachegym.allocator.trace import Op, Trace
from cachegym.policies.lru import LRU
from cachegym.policies.successors import SuccessorPredictor, make_predictor

N_PARAMS, N_ACTS = 6, 10


def step_trace(n_steps: int, *, compute_ns: int = 0) -> Trace:
    """Steps of a toy training loop: forward (read a parameter, write a new activation), then
    backward (read the activations in reverse, each with its parameter), the activations freed
    at the end of the step; new activation keys every step."""
    keys, ops = [], []
    nxt = 1000
    for _ in range(n_steps):
        acts = list(range(nxt, nxt + N_ACTS))
        nxt += N_ACTS
        for i, a in enumerate(acts):
            keys += [i % N_PARAMS, a]
            ops += [Op.READ, Op.WRITE]
        for i, a in reversed(list(enumerate(acts))):
            keys += [a, i % N_PARAMS]
            ops += [Op.READ, Op.READ]
        keys += acts
        ops += [Op.FREE] * N_ACTS
    n = len(keys)
    return Trace.from_arrays(np.array(keys), np.full(n, 1024), np.array(ops, np.uint8),
                             compute_ns=np.full(n, compute_ns))


def replay(trace: Trace, p: SuccessorPredictor, capacity: int, cost=None, ask=None):
    """The trace through an LRU pool, the predictor shown each access; ``ask(i, key, view)``
    after each (the row, the key, the pool's view)."""
    pool = Pool(capacity, LRU(), placement="bytes", cost=cost)
    for i, (k, op, c) in enumerate(zip(trace.key.tolist(), trace.op.tolist(),
                                       trace.compute_ns.tolist())):
        if op == Op.FREE:
            pool.free(k)
            continue
        pool.access(k, 1024, op == Op.WRITE)  # (its compute after the proposal, as the envs do)
        p.observe(k, pool.view)
        if ask is not None:
            ask(i, k, pool.view)
        pool.cost.compute(c)
    return pool


def test_the_aligned_history_names_this_steps_new_activations_in_backward_order():
    """In the third step's backward pass, with all but three objects on the host, the proposals
    are the activations (and parameters) still to be read, in the order backward reads them:
    activation keys that did not exist when the previous step ran (no successor table could
    name them)."""
    t = step_trace(3)
    p = SuccessorPredictor(horizon=64)
    seen = []

    def ask(i, k, view):
        if k == 1000 + 2 * N_ACTS + 7 and t.op[i] == Op.READ:  # step 3, backward, activation 7
            seen.append(p.propose(k, 4, view))

    replay(t, p, capacity=3 * 1024, ask=ask)
    # 1027 is read now, then its parameter, and so on backwards (all on the host but 1027);
    # 1025 would not fit beside the three before it in a pool of three (do no harm)
    assert seen == [[1, 1026, 0]]
    assert p.aligned > p.realigned
    table = SuccessorPredictor()  # the successor table alone: never these keys in this order
    seen.clear()
    replay(t, table, capacity=3 * 1024, ask=lambda i, k, v: seen.append(table.propose(k, 4, v))
           if k == 1027 and t.op[i] == Op.READ else None)
    assert seen and seen[0] != [1, 1026, 0] and not {1026, 1025} <= set(seen[0])


def test_under_a_timing_model_only_the_due_copies_are_proposed():
    """With copies that take time and compute between accesses, the proposals are those whose
    copies the compute still ahead of their use no longer covers: fewer than without timing,
    and a prefix of the history's order."""
    t = step_trace(3, compute_ns=20_000)
    timed, untimed = SuccessorPredictor(horizon=64), SuccessorPredictor(horizon=64)
    got = {}

    def ask(i, k, view):
        if k == 1027 and t.op[i] == Op.READ:
            got["timed"] = timed.propose(k, 8, view)

    replay(t, timed, capacity=3 * 1024, cost="h100_pcie5", ask=ask)
    replay(t, untimed, capacity=3 * 1024,
           ask=lambda i, k, v: got.setdefault("untimed", untimed.propose(k, 8, v))
           if k == 1027 and t.op[i] == Op.READ else None)
    assert got["untimed"] == [1, 1026, 0]  # (1025 would not fit beside them: do no harm)
    assert 1 <= len(got["timed"]) < len(got["untimed"])
    assert got["timed"] == got["untimed"][: len(got["timed"])]


def test_memory_is_bounded_and_the_params_round_trip():
    p = SuccessorPredictor(horizon=8, memory=32)
    replay(step_trace(6), p, capacity=4 * 1024)
    assert len(p._hist) < 2 * 32 and len(p._alias) <= 32
    assert make_predictor(p.params()).params() == p.params() == {
        "depth": 2, "width": 4, "hops": 3, "horizon": 8, "memory": 32}
    assert SuccessorPredictor().params() == {"depth": 2, "width": 4, "hops": 3}  # (older files)


@pytest.mark.parametrize("params, match", [
    ({"depth": 2, "width": 4, "hops": 3, "horizon": -1}, "horizon"),
    ({"depth": 2, "width": 4, "hops": 3, "horizon": 64, "memory": 10}, "memory"),
    ({"depth": 2, "width": 4, "hops": 3, "lookahead": 5}, "unknown parameter"),
    ({"depth": 2.5, "width": 4, "hops": 3}, "predictor.depth must be an int"),
    ({"depth": 0, "width": 4, "hops": 3}, "depth, width, hops >= 1"),
])
def test_bad_parameters_are_refused_by_name(params, match):
    with pytest.raises(ConfigError, match=match):
        make_predictor(params)


def test_a_trace_that_does_not_repeat_gets_no_proposals_from_the_history():
    """On Zipf accesses the history is never in sync: it proposes nothing (where the successor
    table guesses), and the history prefetcher prefetches nothing; on the periodic trace it is in sync
    once its moving average has caught up (the third period on)."""
    from cachegym.envs.workloads import generate
    from cachegym.policies.prefetch import HistoryPrefetcher

    t = generate("zipf", 3, n_requests=3000, n_objects=400, alpha=0.8, size=1024)
    hist, table = SuccessorPredictor(horizon=64), SuccessorPredictor()
    pool = Pool(40 * 1024, LRU(), placement="bytes")
    synced = n_table = 0
    for k in t.key.tolist():
        pool.access(k, 1024)
        hist.observe(k, pool.view)
        table.observe(k, pool.view)
        synced += hist.in_sync
        assert hist.propose(k, 4, pool.view) == []
        n_table += len(table.propose(k, 4, pool.view))
    assert synced == 0 and n_table > 100  # (the table alone guesses)
    st = Pool(40 * 1024, LRU(), prefetcher=HistoryPrefetcher(), placement="bytes").replay(t)
    assert st.prefetches == 0
    periodic = SuccessorPredictor(horizon=64)
    ins = []
    replay(step_trace(6), periodic, capacity=4 * 1024, ask=lambda i, k, v: ins.append(periodic.in_sync))
    per = len(ins) // 6  # (40 accesses: the average needs about 45 in sync to reach SYNC)
    assert not any(ins[:per]) and all(ins[3 * per:])


def test_the_second_step_aligns_with_the_first_where_weights_are_read_many_times():
    """An AdamW step reads each weight seven times in its first step (forward, backward,
    optimizer, whose state it creates) and five in the next: re-aligning on a weight needs its
    position one step back, the forward's, which a short list of past positions had dropped
    (the second step of gpt_wide then followed the history for 56% of its accesses)."""
    import os

    from cachegym.envs.workloads import read_trace

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    t = read_trace(os.path.join(root, "data", "traces", "gpt_wide.npz"))
    p = SuccessorPredictor(horizon=64)
    synced = []
    for k, op, step in zip(t.key.tolist(), t.op.tolist(), t.step.tolist()):
        if op == Op.FREE:
            continue  # (a prefetcher sees accesses)
        p.observe(k)
        if step == 1:
            synced.append(p.in_sync)
    assert np.mean(synced) > 0.9


def test_the_historys_walk_after_an_access_is_shared_by_pools_that_ask_after_it() -> None:
    """The walk over the aligned history is made once per access and shared by every pool that
    asks after it (a stall guard's shadow pools): each pool's proposals are what a predictor
    asked by that pool alone would give, whichever pool asked first."""
    import copy

    keys = np.tile(np.arange(50), 4)
    small, large = Pool(10 * 4096, LRU()), Pool(30 * 4096, LRU())
    p = SuccessorPredictor(horizon=16, memory=1024)
    proposed = 0
    for k in keys.tolist():
        small.access(k, 4096)
        large.access(k, 4096)
        p.observe(k, small.view)
        alone = copy.deepcopy(p)
        a = p.propose(k, 8, small.view)
        b = p.propose(k, 8, large.view)
        assert b == alone.propose(k, 8, large.view)
        assert a == copy.deepcopy(alone).propose(k, 8, small.view)
        proposed += len(a) + len(b)
    assert proposed > 0


def offload_trace(n_steps: int, n_acts: int = 24, group: int = 3) -> list[int]:
    """The accesses of activation offload alone (parameters pass through): each step packs
    ``n_acts`` new activations, then unpacks them in reverse order of groups of ``group``,
    each group in pack order (a layer's saved tensors, as autograd reads them)."""
    keys: list[int] = []
    for s in range(n_steps):
        acts = list(range(s * n_acts, (s + 1) * n_acts))
        keys += acts
        for g in range(n_acts - group, -1, -group):
            keys += acts[g: g + group]
    return keys


def test_activations_alone_align_the_second_step_with_the_first():
    """Where a step accesses nothing but its new activations, each new object succeeds the one
    at its place in the past step: the second step's first pack the first step's first,
    though the first step's last unpacks (a group in pack order: 2, 1, 0 ... then 0, 1, 2)
    aligned the history on their own packs, which put the next step's first pack on the pack
    of object 3 and every later one three places off (the history then fell out of step at
    every step's backward pass, its in-sync average stayed below SYNC, and a learned prefetch
    head proposed at 63 of 554 chances in the activation-offload journey). Where the new
    objects outrun the past run they were aligned with, the run is aligned again by its
    place, its earlier objects with it. From the third step on every access follows."""
    n = 24
    p = SuccessorPredictor(horizon=64)
    ins = []
    for k in offload_trace(4, n):
        p.observe(k)
        ins.append(p.in_sync)
    assert [p._alias.get(k) for k in range(3 * n)] == list(range(n, 4 * n))
    assert not any(ins[: 2 * n]) and all(ins[4 * n:])


@pytest.mark.parametrize("seed", range(4))
def test_successors_stay_one_to_one_on_noisy_periodic_traces(seed):
    """Steps of new objects and reused ones with random omissions, repeats and swaps, a short
    memory (trimmed often): every observe keeps ``_alias`` and ``_origin`` inverse (a new
    object succeeds one past object, and a past object has one successor), the cursor inside
    the kept history, and the runs inside it too."""
    rng = np.random.default_rng(seed)
    p = SuccessorPredictor(horizon=16, memory=96)
    nxt = 1000
    for _ in range(30):
        acts = list(range(nxt, nxt + 12))
        nxt += 12
        keys = [k for a in acts for k in (a % 5, a)] + acts[::-1]
        for i in range(len(keys)):
            r = rng.random()
            if r < 0.1:
                keys[i] = int(rng.integers(0, 5))
            elif r < 0.15 and i + 1 < len(keys):
                keys[i], keys[i + 1] = keys[i + 1], keys[i]
        for k in keys:
            p.observe(k)
            assert {v: k for k, v in p._alias.items()} == p._origin
            assert p._cursor == -1 or p._base <= p._cursor < p._base + len(p._hist)
            assert all(s >= p._base for s, _ in p._runs)
