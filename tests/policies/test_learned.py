"""The exported-policy file format and LearnedPolicy (NumPy only: no torch in this module)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from cachegym.allocator.errors import ConfigError, PolicyError, PolicyFileError
from cachegym.allocator.pool import Pool
from cachegym.allocator.seams import Forwarding
from cachegym.allocator.trace import Op, Trace
from cachegym.envs.workloads import read_trace
from cachegym.envs.workloads.registry import generate
from cachegym.policies import features
from cachegym.policies.adaptive import ARC, S3FIFO, SLRU
from cachegym.policies.classic import LFU
from cachegym.policies.learned import (
    CandidateScorer,
    Guard,
    LearnedPolicy,
    LRUGuard,
    ShadowGuard,
    diff_feature_spec,
    read_policy_file,
    save_policy_file,
)
from cachegym.policies.lru import LRU
from cachegym.policies.priority import GDSF

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def random_arrays(seed: int = 0, hidden: tuple[int, ...] = (16, 8)) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = {"wc": rng.normal(size=(features.F, hidden[0])), "wg": rng.normal(size=(features.G, hidden[0])),
         "b0": rng.normal(size=hidden[0])}
    for i, (h0, h1) in enumerate(zip(hidden[:-1], hidden[1:]), 1):
        a[f"w{i}"], a[f"b{i}"] = rng.normal(size=(h0, h1)), rng.normal(size=h1)
    a["wo"], a["bo"] = rng.normal(size=hidden[-1]), rng.normal(size=1)
    return {k: v.astype(np.float32) for k, v in a.items()}


def header(K: int = 8, **over: object) -> dict[str, object]:
    h: dict[str, object] = {
        "task": "evict", "K": K, "candidate_rule": "lru", "feature_spec": features.feature_spec(),
        "arch": {"type": "candidate_mlp", "n_features": features.F, "n_globals": features.G,
                 "hidden": [16, 8], "activation": "relu"},
        "library_version": "test", "config_sha256": "", "meta": {},
    }
    h.update(over)
    return h


@pytest.fixture
def policy_file(tmp_path):
    return save_policy_file(tmp_path / "p.npz", random_arrays(), header())


def reference_scores(a: dict[str, np.ndarray], cand: np.ndarray, glob: np.ndarray) -> np.ndarray:
    h = np.maximum(cand.astype(np.float64) @ a["wc"] + glob @ a["wg"] + a["b0"], 0)
    i = 1
    while f"w{i}" in a:
        h = np.maximum(h @ a[f"w{i}"] + a[f"b{i}"], 0)
        i += 1
    return h @ a["wo"] + a["bo"][0]


def test_scorer_matches_reference_and_masks():
    a = random_arrays(1, (16, 12, 8))
    sc = CandidateScorer(a)
    rng = np.random.default_rng(2)
    for K in (1, 5, 32):
        cand = rng.random((K, features.F), dtype=np.float32)
        glob = rng.random(features.G, dtype=np.float32)
        mask = rng.random(K) < 0.7
        mask[0] = True
        s = sc.scores(cand, glob, mask).copy()
        ref = reference_scores(a, cand, glob)
        np.testing.assert_allclose(s[mask], ref[mask], rtol=1e-4, atol=1e-4)
        assert (s[~mask] < -1e37).all()
        assert sc.choose(cand, glob, mask) == int(np.flatnonzero(mask)[np.argmax(ref[mask])])


def test_scorer_is_permutation_equivariant():
    sc = CandidateScorer(random_arrays(3))
    rng = np.random.default_rng(4)
    cand = rng.random((32, features.F), dtype=np.float32)
    glob = rng.random(features.G, dtype=np.float32)
    perm = rng.permutation(32)
    s = sc.scores(cand, glob).copy()
    np.testing.assert_allclose(sc.scores(cand[perm], glob), s[perm], rtol=1e-5, atol=1e-5)


def test_round_trip_and_decisions_follow_the_network(policy_file):
    hdr, arrays = read_policy_file(policy_file)
    assert hdr["K"] == 8 and hdr["format"] == "cachegym-policy" and len(hdr["weights_sha256"]) == 64
    np.testing.assert_array_equal(arrays["wc"], random_arrays()["wc"])
    pol = LearnedPolicy.load(policy_file, budget_us=None, guard=False)
    trace = generate("zipf", seed=0, n_requests=3000, n_objects=300, alpha=0.8, size=4096)
    decided = []

    class Checked(Forwarding):
        def victim(self, view):  # the policy's answer is the argmax of its network over its observation
            keys, cand, mask, glob = pol.observe(view)
            want = int(keys[int(np.argmax(reference_scores(arrays, cand, glob)[: len(keys)]))])
            got = pol.victim(view)
            decided.append(got == want)
            return got

    st = Pool(64 * 4096, Checked(pol), placement="bytes").replay(trace)
    assert st.evictions > 100 and all(decided) and len(decided) == st.evictions
    assert st.fallbacks == 0 and pol.fallbacks == 0
    assert st.hits + st.misses == st.accesses


def test_zero_budget_falls_back_to_lru_and_counts(policy_file):
    trace = generate("zipf", seed=1, n_requests=2000, n_objects=200, alpha=0.9, size=4096)
    pol = LearnedPolicy.load(policy_file, budget_us=0, guard=False)
    st = Pool(40 * 4096, pol, placement="bytes").replay(trace)
    lru = Pool(40 * 4096, LRU(), placement="bytes").replay(trace)
    assert st.evictions > 0 and st.fallbacks == st.evictions == pol.fallbacks
    assert (st.hits, st.misses, st.evictions) == (lru.hits, lru.misses, lru.evictions)
    # under the default guard the network decides in its shadow pool: the pool counts those
    # fallbacks all the same
    guarded = LearnedPolicy.load(policy_file, budget_us=0)
    st = Pool(40 * 4096, guarded, placement="bytes").replay(trace)
    assert isinstance(guarded.guard, ShadowGuard) and guarded.guard.net is not None
    shadow = guarded.guard.net.pool.stats
    assert shadow.evictions > 0 and st.fallbacks == shadow.fallbacks == shadow.evictions


def test_latency_recorded_only_when_asked(policy_file):
    """Without a budget a decision reads no clock unless ``record_latency`` asks for its time;
    with it, one positive time per network decision, and the same decisions either way."""
    trace = generate("zipf", seed=2, n_requests=2000, n_objects=200, alpha=0.9, size=4096)
    runs = []
    for record in (False, True):
        pol = LearnedPolicy.load(policy_file, budget_us=None, guard=False)
        pol.record_latency = record
        st = Pool(40 * 4096, pol, placement="bytes").replay(trace)
        runs.append((st.hits, st.misses, st.evictions))
        assert st.evictions > 0 and pol.fallbacks == 0
        assert len(pol.decision_ns) == (pol.decisions if record else 0)
        assert all(t > 0 for t in pol.decision_ns)
    assert runs[0] == runs[1]


def test_failing_decision_falls_back(policy_file):
    pol = LearnedPolicy.load(policy_file, guard=False)

    def boom(*_a):
        raise FloatingPointError("broken network")

    class Broken:
        best = staticmethod(boom)

    pol.scorer.kernel = Broken()  # type: ignore[assignment]
    trace = generate("zipf", seed=2, n_requests=1000, n_objects=100, size=4096)
    st = Pool(20 * 4096, pol, placement="bytes").replay(trace)
    assert st.evictions > 0 and st.fallbacks == st.evictions


def hottest_arrays() -> dict[str, np.ndarray]:
    """A network whose score is the frequency feature: it evicts the most used candidate."""
    a = {k: np.zeros_like(v) for k, v in random_arrays(hidden=(4,)).items()}
    a["wc"][features.FEATURE_NAMES.index("frequency"), 0] = 1.0
    a["wo"][0] = 1.0
    return a


def hottest_policy(tmp_path) -> LearnedPolicy:
    """:func:`hottest_arrays` as a policy file (K = 16, sampled candidates), without a guard."""
    p = save_policy_file(tmp_path / "hot.npz", hottest_arrays(), header(
        K=16, candidate_rule="sample", arch=dict(header()["arch"], hidden=[4])))  # type: ignore[arg-type]
    return LearnedPolicy.load(p, guard=False)


def test_lru_guard_hands_decisions_to_lru_after_losing_windows(tmp_path):
    trace = generate("zipf", seed=3, n_requests=20_000, n_objects=2000, alpha=1.0, size=4096)
    cap = 200 * 4096

    def hits(policy) -> int:
        return Pool(cap, policy, placement="bytes").replay(trace).hits

    bare = hottest_policy(tmp_path)
    guarded = LearnedPolicy(bare.scorer, bare.header, guard=LRUGuard(window=512, margin=0.0))
    h_bare, h_guard, h_lru = hits(bare), hits(guarded), hits(LRU())
    assert h_bare < 0.9 * h_lru  # evicting the hottest object loses on Zipf
    assert h_guard > h_bare + (h_lru - h_bare) // 2
    assert guarded.guard is not None and guarded.guard.lru_windows > 0 and guarded.guard_decisions > 0
    assert bare.guard_decisions == 0


def test_lru_guard_cuts_a_losing_trial_short(tmp_path):
    """A trial window of a policy that loses to LRU ends as soon as it trails the shadow by
    ``abort`` hits: with the default abort the bad policy costs a small fraction of what
    whole-window trials cost, and the count of cut trials says so."""
    trace = generate("zipf", seed=3, n_requests=40_000, n_objects=2000, alpha=1.0, size=4096)
    cap = 200 * 4096
    bare = hottest_policy(tmp_path)
    misses = {}
    guards = {"whole windows": LRUGuard(abort=float("inf")), "cut short": LRUGuard()}
    for name, guard in guards.items():
        pol = LearnedPolicy(bare.scorer, bare.header, guard=guard)
        misses[name] = Pool(cap, pol, placement="bytes").replay(trace).misses
    lru = Pool(cap, LRU(), placement="bytes").replay(trace).misses
    assert guards["whole windows"].aborts == 0 and guards["cut short"].aborts > 0
    assert misses["cut short"] - lru < 0.5 * (misses["whole windows"] - lru)
    assert misses["cut short"] - lru < 0.01 * len(trace)


@pytest.mark.parametrize("kw", [{"window": 0}, {"margin": -0.1}, {"max_backoff": 0},
                                {"abort": -1.0}, {"abort": float("nan")}])
def test_bad_guard_settings_are_config_errors(kw):
    with pytest.raises(ConfigError, match="LRUGuard"):
        LRUGuard(**kw)
    with pytest.raises(ConfigError, match="Guard: window must be"):
        Guard(**kw)
    with pytest.raises(ConfigError, match="s3fifo_margin=-0.5"):
        Guard(s3fifo_margin=-0.5)
    if "margin" in kw:  # (the ShadowGuard has no windows, back-off or abort)
        with pytest.raises(ConfigError, match="ShadowGuard: margin .* must be >= 0"):
            ShadowGuard(**kw)


@pytest.mark.parametrize("kw, match", [
    ({"margin": -0.1}, "ShadowGuard: margin .* handover .* must be >= 0; got"),
    ({"handover": -1.0}, "ShadowGuard: margin .* handover .* must be >= 0; got"),
    ({"handover_weight": float("nan")}, "ShadowGuard: handover_weight must be a finite number, got nan"),
])
def test_bad_shadow_guard_settings_are_config_errors(kw, match):
    with pytest.raises(ConfigError, match=match):
        ShadowGuard(**kw)
    with pytest.raises(ConfigError, match="without_prefetch must be a bool, got 'yes'"):
        ShadowGuard(without_prefetch="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="with_history must be a bool, got 1"):
        ShadowGuard(with_history=1)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="prefetched_first must be a bool, got 'no'"):
        ShadowGuard(prefetched_first="no")  # type: ignore[arg-type]


def test_under_stall_the_shadow_guard_evicts_what_was_prefetched_first():
    """Under stall with a prefetcher, the guarded pool evicts first what its prefetcher brought
    in (``prefetched_first``, PACMan's demotion of prefetched lines): the prefetcher brings it
    back in time, a demand-fetched object stalls again. With the history prefetcher on gpt at
    25% of peak live bytes (the goldens' policy): 13.3 ms of stall without it, 8.6 with it. The
    guard's record of the prefetched objects holds only what the pool holds, and its eviction
    order (the prefetchers' do-no-harm walk reads it) starts with them, as its victims do."""
    from cachegym.policies.prefetch import HistoryPrefetcher

    path = os.path.join(ROOT, "tests", "golden", "policy.npz")
    trace = read_trace(os.path.join(ROOT, "data", "traces", "gpt.npz"))
    cap = int(0.25 * trace.peak_live_bytes())
    stall = {}
    for first in (False, True):
        guard = ShadowGuard(prefetched_first=first)
        pool = Pool(cap, LearnedPolicy.load(path, guard=guard), prefetcher=HistoryPrefetcher(),
                    cost="h100_pcie5", oversize="bypass")
        half = len(trace) // 2
        pool.replay(trace, 0, half)
        held = guard._prefetched
        assert bool(held) == first and all(pool.view.is_resident(k) for k in held)
        order = list(pool.policy.eviction_order())
        assert order[:len(held)] == list(held)
        stall[first] = pool.replay(trace, half).stall_ns
    assert stall[True] < 0.8 * stall[False], stall
    # what a pool holds when it is given the guarded policy was not prefetched (its on_insert
    # calls are no prefetches), nor is what it misses
    pool = Pool(cap, LRU(), cost="h100_pcie5", oversize="bypass")
    pool.replay(trace, 0, 2000)
    guard = ShadowGuard()
    pool.policy = LearnedPolicy.load(path, guard=guard)
    pool.replay(trace, 2000, 4000)
    assert pool.resident_keys() and not guard._prefetched


@pytest.mark.parametrize("guard, match", [
    ("yes", "unknown guard 'yes'; choices: shadow, trial, lru, none"),
    (1, "guard must be True .* got"),
    (None, "guard must be True .* got"),
])
def test_a_guard_that_is_not_one_is_a_config_error(policy_file, guard, match):
    with pytest.raises(ConfigError, match=match):
        LearnedPolicy.load(policy_file, guard=guard)


@pytest.mark.parametrize("cls", [ShadowGuard, Guard, LRUGuard])
def test_one_guard_given_to_two_policies_is_refused(policy_file, cls):
    """A guard keeps the state of one policy's experts: given to two, both pools' figures were
    wrong (a helper's audit: 49.4 and 55.5 MB copied where one policy with its own guard copied
    47.7 on resnet_deep), with nothing said."""
    guard = cls()
    LearnedPolicy.load(policy_file, guard=guard)
    with pytest.raises(ConfigError, match="already serves another LearnedPolicy .* its own"):
        LearnedPolicy.load(policy_file, guard=guard)
    copied = copy.deepcopy(LearnedPolicy.load(policy_file, guard=cls()))  # (a copy's guard is
    assert copied.guard is not None and copied.guard.served  # its own, served by the copy)


def test_a_runs_seed_reaches_the_learned_policys_candidate_sampler():
    """The ``sample`` candidate rule draws from the policy's seed: under the default guard the
    network's shadow was built with seed 0 whatever the policy's, and the evaluator gave a
    learned policy no seed at all, so that a sweep over seeds reported no spread for it (a
    helper's audit: 29,827,184 bytes for seeds 0, 1 and 2)."""
    from cachegym.envs.evaluation import RunSpec, run_one

    path = os.path.join(ROOT, "tests", "golden", "policy.npz")  # (candidates: sample)
    trace = read_trace(os.path.join(ROOT, "data", "traces", "resnet_deep.npz")).window(0, 6000)
    cap = int(0.25 * trace.peak_live_bytes())
    for guard in ("shadow", "none"):
        got = {s: Pool(cap, LearnedPolicy.load(path, guard=guard, seed=s), oversize="bypass")
               .replay(trace).traffic_bytes for s in (0, 0, 1)}
        assert len(set(got.values())) == 2, (guard, got)  # (seed 0 twice: the same)
        spec = RunSpec("resnet_deep", cap, "25%", "bytes", f"learned[{guard}]", "none", "none",
                       learned=path, guard=guard)
        rows = [run_one(trace, spec, seed=s)["traffic_bytes"] for s in (0, 1)]
        assert rows == [got[0], got[1]], (guard, rows, got)


@pytest.mark.parametrize("cost", [None, "h100_pcie5"])
def test_a_guarded_policy_set_on_a_pool_in_use_counts_its_cost_from_then(cost):
    """The ShadowGuard compared the pool's counters since its creation with its experts',
    which start with the guard: set on a pool that had run LRU for a while, the pool seemed
    far behind every expert, each switch was charged the earlier traffic, and it followed the
    worst expert (a helper's audit: 117 MB against 71-120 for the experts alone on resnet_deep,
    S3-FIFO 87% of the time; 4.5x GDSF's stall under h100_pcie5). Its cost now counts from its
    first access, and it ends as it does on a pool of its own."""
    path = os.path.join(ROOT, "tests", "golden", "policy.npz")
    trace = read_trace(os.path.join(ROOT, "data", "traces", "resnet_deep.npz"))
    cap = int(0.25 * trace.peak_live_bytes())
    head, rest = trace.window(0, 6000), trace.window(6000, len(trace))
    pool = Pool(cap, LRU(), oversize="bypass", cost=cost)
    pool.replay(head)
    before = pool.snapshot()
    guard = ShadowGuard()
    pool.policy = LearnedPolicy.load(path, guard=guard)
    after = pool.replay(rest)
    assert guard.own_cost() == (after.stall_ns - before.stall_ns if cost else
                                after.traffic_bytes - before.traffic_bytes)
    best = min(guard._cost(e.gain) for e in guard.experts.values())
    assert guard.own_cost() <= 1.1 * best, (guard.own_cost(), best, guard.decisions)


@pytest.mark.parametrize("guard", ["shadow", "trial", "lru"])
def test_a_guarded_policy_does_not_keep_its_dropped_pool_alive(guard):
    """A guard held its pool's view: a policy its user kept kept every pool it had served, with
    their host buffers and copy threads (a helper's audit: 2 threads and 160 MiB per pool
    dropped, under the shadow and trial guards; the network alone let them go)."""
    import gc
    import weakref

    from cachegym.allocator.backends import NumpyBackend

    path = os.path.join(ROOT, "tests", "golden", "policy.npz")
    trace = read_trace(os.path.join(ROOT, "data", "traces", "resnet_deep.npz")).window(0, 3000)
    policy = LearnedPolicy.load(path, guard=guard)
    pool = Pool(int(0.25 * trace.peak_live_bytes()) // 512 * 512, policy, backend=NumpyBackend(),
                oversize="bypass")
    for k, s, op in zip(trace.key.tolist(), trace.size.tolist(), trace.op.tolist()):
        if op == Op.FREE:
            pool.free(k)
        elif k in pool:
            pool.access(k, pool.view.size(k), op == Op.WRITE)
        else:
            pool.put(k, np.zeros(s, np.uint8))
    ref = weakref.ref(pool)
    del pool
    gc.collect()
    assert ref() is None, gc.get_referrers(ref())
    assert policy.guard is not None and sum(policy.guard.decisions.values()) > 0  # (readable)


@pytest.mark.parametrize("guard", ["none", "trial"])
def test_the_network_alone_cleans_ahead_in_the_order_its_environment_did(guard):
    """Evict-v0's pool cleans ahead in LRU order (the candidates' order: an agent's next victims
    are not known ahead); the exported network alone had no eviction order and cleaned nothing,
    so that its stall deployed was not the one it was trained on (a helper's audit: 9.40 ms
    against 5.74 in the environment, on gpt_wide with clean_ahead=0.25)."""
    path = os.path.join(ROOT, "tests", "golden", "policy.npz")
    trace = read_trace(os.path.join(ROOT, "data", "traces", "gpt_wide.npz")).window(0, 3000)
    cap = int(0.25 * trace.peak_live_bytes())
    got = {}
    for share in (0.0, 0.25):
        pol = LearnedPolicy.load(path, guard=guard)
        pool = Pool(cap, pol, oversize="bypass", cost="h100_pcie5", clean_ahead=share)
        got[share] = pool.replay(trace)
        assert list(pol.eviction_order()) == list(pol.tracker.eviction_order())
    assert got[0.25].stall_ns < got[0.0].stall_ns and got[0.25].writebacks > got[0.0].writebacks


def test_guard_hands_decisions_to_s3fifo_where_it_leads(tmp_path):
    """On a Zipf workload of many objects, where S3-FIFO is well ahead of LRU, a network that
    evicts the hottest object is handed over to S3-FIFO (not LRU), and the pool then follows the
    S3-FIFO model; the LRU-only guard stays behind it."""
    trace = generate("zipf", seed=4, n_requests=60_000, n_objects=20_000, alpha=0.8, size=4096)
    cap = 1000 * 4096

    def misses(policy) -> int:
        return Pool(cap, policy, placement="bytes").replay(trace).misses

    bare = hottest_policy(tmp_path)
    guard = Guard()
    m_guard = misses(LearnedPolicy(bare.scorer, bare.header, guard=guard))
    m_lru_guard = misses(LearnedPolicy(bare.scorer, bare.header, guard=LRUGuard()))
    m_s3, m_lru = misses(S3FIFO()), misses(LRU())
    assert m_s3 < m_lru - 0.03 * len(trace)  # the workload: S3-FIFO well ahead
    assert guard.s3fifo_windows > 0.6 * guard.windows and guard.s3fifo_windows == guard.lru_windows
    # the trial windows of the bad network cost something, but most of the way to S3-FIFO
    # from where the LRU guard stays is covered (measured: 35,350 against 34,176 and 39,947)
    assert m_guard - m_s3 < 0.35 * (m_lru_guard - m_s3)


def guarded_replay(policy_file, guard, trace, cap) -> None:  # type: ignore[no-untyped-def]
    """Replay ``trace`` through a pool of ``cap`` bytes deciding with the file's network under
    ``guard``."""
    base = LearnedPolicy.load(policy_file)
    pol = LearnedPolicy(base.scorer, base.header, guard=guard)
    Pool(cap, pol, placement="bytes", oversize="bypass").replay(trace)


@pytest.mark.parametrize("frees", [False, "generated", "recorded"])
def test_guard_model_is_s3fifo_whoever_decides(policy_file, frees):
    """The guard's S3-FIFO model is not told whom the pool evicts: its misses are exactly those
    of S3-FIFO alone on the trace; a freed object leaves the model too, also one the pool had
    evicted already (``on_free_untracked``; the recorded trace at 20% frees many such objects:
    without the hook the model kept them and missed 8,508 times instead of S3-FIFO's 7,144)."""
    if frees == "recorded":
        trace = read_trace(os.path.join(ROOT, "data", "traces", "resnet_deep.npz"))
    else:
        trace = generate("dl_training", seed=5) if frees else generate(
            "zipf", seed=6, n_requests=20_000, n_objects=3000, alpha=0.9, size=4096, size_sigma=0.5)
    share = 0.2 if frees == "recorded" else 0.25
    cap = max(1, int(share * (trace.peak_live_bytes() if frees else trace.working_set_bytes())))
    guard = Guard()
    guarded_replay(policy_file, guard, trace, cap)
    alone = Pool(cap, S3FIFO(), placement="bytes", oversize="bypass").replay(trace)
    assert guard.model is not None and alone.accesses == guard.model.requests > 0
    assert guard.model.hits == alone.hits and guard.lru.hits == lru_hits(trace, cap)
    assert guard.model.pool is not None and guard.model.pool.policy.policy is guard.model.policy
    assert isinstance(guard.model.policy, S3FIFO)  # the registered policy itself, in the shadow
    if frees:
        from cachegym.allocator.trace import Op

        last_op = {int(k): int(o) for k, o in zip(trace.key, trace.op)}
        assert all(last_op[k] != Op.FREE for k in guard.model.pool.resident_keys())
        freed = [k for k, o in last_op.items() if o == Op.FREE]
        assert freed and not any(guard.model.policy._resident(k) for k in freed)


def lru_hits(trace, cap) -> int:  # type: ignore[no-untyped-def]
    return Pool(cap, LRU(), placement="bytes", oversize="bypass").replay(trace).hits


@pytest.mark.parametrize("frees", [False, True])
def test_shadow_guard_extra_models_are_their_policies_whoever_decides(policy_file, frees):
    """The ShadowGuard's GDSF, LFU, ARC and SLRU models are not told whom the pool evicts: their
    hits are exactly those of each policy alone on the trace, frees included."""
    trace = generate("dl_training", seed=5) if frees else generate(
        "zipf", seed=6, n_requests=20_000, n_objects=3000, alpha=0.9, size=4096, size_sigma=1.0)
    cap = int(0.25 * (trace.peak_live_bytes() if frees else trace.working_set_bytes()))
    guard = ShadowGuard()
    guarded_replay(policy_file, guard, trace, cap)
    assert list(guard.extra) == ["gdsf", "lfu", "arc", "slru"]
    for name, cls in (("gdsf", GDSF), ("lfu", LFU), ("arc", ARC), ("slru", SLRU)):
        alone = Pool(cap, cls(), placement="bytes", oversize="bypass").replay(trace)
        e = guard.extra[name]
        assert isinstance(e.policy, cls)
        assert e.requests == alone.accesses > 0 and e.hits == alone.hits, name
    assert guard.switches > 0  # (others decided for a while: the models were not told)


@pytest.mark.parametrize("placement", ["bytes", "arena"])
@pytest.mark.parametrize("write_policy", ["write-back", "write-through"])
def test_shadow_guard_experts_cost_what_their_policies_cost_in_such_a_pool(
        policy_file, placement, write_policy):
    """Each expert's shadow pool is a pool like the guarded one (placement, write policy): the
    bytes each heuristic expert's shadow copied are exactly those of its policy alone in such a
    pool, on a trace with writes and frees, whoever decided. (Shadows that counted bytes in an
    arena pool, or wrote back dirty victims of a write-through pool, judged the experts on
    another pool's costs.)"""
    from cachegym.policies.learned.models import heuristic_expert

    trace = generate("dl_training", seed=5)
    cap = int(0.25 * trace.peak_live_bytes())
    kw: dict[str, Any] = dict(placement=placement, write_policy=write_policy, oversize="bypass")
    guard = ShadowGuard(objective="traffic")
    base = LearnedPolicy.load(policy_file)
    Pool(cap, LearnedPolicy(base.scorer, base.header, guard=guard), **kw).replay(trace)
    assert guard.switches > 0  # (others decided for a while)
    for name, e in guard.experts.items():
        if name is None:
            continue
        assert e.pool.placement == placement, name
        alone = Pool(cap, heuristic_expert(name).policy, **kw).replay(trace)
        assert -e.gain == alone.traffic_bytes > 0, (name, -e.gain, alone.traffic_bytes)


def test_under_stall_the_shadow_guard_goes_over_to_its_fallback_once_far_behind_it():
    """The switching rule compares whole-trace costs and charges the hand-overs the pool paid
    against a later switch: on gpt_infer at 50% (the goldens' policy, the history prefetcher)
    the pool followed GDSF, which led while the history had not yet seen a pass, and ended 24%
    behind LRU + history, its fallback, which led by less than the switch needed. The floor
    (``floor``: 10% of the fallback's stall and half a pool copy behind it) moves the pool to the
    fallback, once: 10.9% behind it. With ``floor_trend`` it moves as soon as the pool is behind
    the fallback and GDSF loses to it over the last window, and stays there while GDSF keeps
    losing: 1.9% behind. (Figures on the trace of 2026-12-07, without ``_unsafe_view``'s events:
    31%, 10.5% and 0.1% on the one before.)"""
    from cachegym.policies.prefetch import HistoryPrefetcher

    path = os.path.join(ROOT, "tests", "golden", "policy.npz")
    trace = read_trace(os.path.join(ROOT, "data", "traces", "gpt_infer.npz"))
    cap = int(0.5 * trace.peak_live_bytes())
    got = {}
    for floor, trend in ((None, 0.25), (0.1, None), (0.1, 0.25)):
        guard = ShadowGuard(floor=floor, floor_trend=trend)
        pool = Pool(cap, LearnedPolicy.load(path, guard=guard), prefetcher=HistoryPrefetcher(),
                    cost="h100_pcie5", oversize="bypass")
        stall = pool.replay(trace).stall_ns
        fallback = min(-e.gain for n, e in guard.experts.items() if n and n.startswith("lru"))
        got[floor, trend] = (stall / fallback, guard._floored, guard.expert)
    assert got[None, 0.25][0] > 1.2 and not got[None, 0.25][1], got  # (no floor: no trend)
    level, trend = got[0.1, None], got[0.1, 0.25]
    assert 1.05 < level[0] < 1.12 and level[1] and str(level[2]).startswith("lru"), got
    assert trend[0] < 1.03 and trend[0] < level[0] - 0.05, got
    assert trend[1] and str(trend[2]).startswith("lru"), got
    with pytest.raises(ConfigError, match="floor .* must be >= 0"):
        ShadowGuard(floor=-0.1)
    with pytest.raises(ConfigError, match="floor_after must be a finite number"):
        ShadowGuard(floor_after=None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="floor_window .* > 0; got .*floor_window=0"):
        ShadowGuard(floor_window=0)
    with pytest.raises(ConfigError, match="floor_trend .* must be >= 0 .*floor_trend=-0.5"):
        ShadowGuard(floor_trend=-0.5)


def test_the_shadow_guard_stops_demoting_prefetches_where_that_costs_the_pool_stall():
    """``prefetched_first`` evicts first what the prefetcher brought in; on gpt_infer at 10% of
    peak live bytes (the goldens' policy, the history prefetcher) the pool is too small for the
    prefetcher to bring them back in time, and the pool following LRU stalled 47% more than
    the best expert (60% on the trace before 2026-12-07's, with ``_unsafe_view``'s events).
    ``demote_limit`` stops the demotion once the pool has stalled more than its
    expert by a quarter throughout a window; on gpt at 25%, where demoting lets the pool stall a
    third less than every expert, it keeps it."""
    from cachegym.policies.prefetch import HistoryPrefetcher

    path = os.path.join(ROOT, "tests", "golden", "policy.npz")
    got = {}
    for name, frac in (("gpt_infer", 0.1), ("gpt", 0.25)):
        trace = read_trace(os.path.join(ROOT, "data", "traces", f"{name}.npz"))
        cap = int(frac * trace.peak_live_bytes())
        for limit in (None, 0.25):
            guard = ShadowGuard(demote_limit=limit)
            pool = Pool(cap, LearnedPolicy.load(path, guard=guard), prefetcher=HistoryPrefetcher(),
                        cost="h100_pcie5", oversize="bypass")
            stall = pool.replay(trace).stall_ns
            best = min(-e.gain for e in guard.experts.values())
            got[name, limit] = (stall / best, guard._demote_off)
    assert got["gpt_infer", None][0] > 1.4 and not got["gpt_infer", None][1], got
    assert got["gpt_infer", 0.25][0] < 1.1 and got["gpt_infer", 0.25][1], got
    assert got["gpt", 0.25] == got["gpt", None] and got["gpt", 0.25][0] < 0.8, got
    assert not got["gpt", 0.25][1], got
    with pytest.raises(ConfigError, match="demote_limit must be a finite number or None"):
        ShadowGuard(demote_limit="0.25")  # type: ignore[arg-type]


def test_shadow_guard_runs_arc_and_slru_but_not_under_stall(tmp_path):
    """ARC and SLRU are experts under traffic and misses; under stall (``auto`` in a pool with
    a timing preset, or named) they leave by default, and stay where asked for."""
    assert list(ShadowGuard(objective="traffic").extra) == ["gdsf", "lfu", "arc", "slru"]
    assert list(ShadowGuard(objective="misses", slru=False).extra) == ["gdsf", "lfu", "arc"]
    assert list(ShadowGuard(objective="stall").extra) == ["gdsf", "lfu"]
    assert list(ShadowGuard(objective="stall", arc=True).extra) == ["gdsf", "lfu", "arc"]
    bare = hottest_policy(tmp_path)
    for cost, want in ((None, {"arc", "slru"}), ("h100_pcie5", set())):
        guard = ShadowGuard()
        pool = Pool(1 << 20, LearnedPolicy(bare.scorer, bare.header, guard=guard),
                    placement="bytes", cost=cost)
        pool.access(1, 4096)
        assert {"arc", "slru"} & set(guard.experts) == want
        assert {"arc", "slru"} & set(guard.extra) == want
    for bad in ({"arc": "yes"}, {"slru": 1}, {"gdsf": None}):
        with pytest.raises(ConfigError, match=f"ShadowGuard: {next(iter(bad))} must be a bool"):
            ShadowGuard(**bad)  # type: ignore[arg-type]


def test_shadow_guard_retires_experts_far_behind(tmp_path):
    """On a Zipf trace the hottest-first network and LRU fall far behind: with ``retire`` LRU
    stops running once the best expert has cost ``retire_after`` capacities (its shadow pool
    released, its cost kept in ``retired``), and the pool's traffic is what it is when every
    expert runs to the end; the followed expert never retires, nor the network (a learned
    policy behind early may lead later: it runs to the end)."""
    trace = generate("zipf", seed=3, n_requests=60_000, n_objects=2000, alpha=1.0, size=4096)
    cap = 200 * 4096
    out = {}
    for retire in (None, 0.2):
        bare = hottest_policy(tmp_path)
        guard = ShadowGuard(objective="traffic", retire=retire, retire_after=4.0)
        pool = Pool(cap, LearnedPolicy(bare.scorer, bare.header, guard=guard), placement="bytes")
        out[retire] = (pool.replay(trace).traffic_bytes, guard)
    assert out[None][0] == out[0.2][0]
    guard = out[0.2][1]
    assert out[None][1].retired == {} and "lru" in guard.retired and guard.expert not in guard.retired
    assert "lru" not in guard.experts and guard.lru.pool is None
    assert "network" not in guard.retired and None in guard.experts and guard.net.pool is not None
    assert -guard.net.gain > 1.2 * min(-e.gain for e in guard.experts.values())  # (far behind)
    best = min(-e.gain for e in guard.experts.values())
    assert all(cost > 1.2 * 4 * cap for cost in guard.retired.values()) and best > 0
    for bad in ({"retire": -0.1}, {"retire_after": -1.0}):
        with pytest.raises(ConfigError, match="ShadowGuard: retire .* must be >= 0"):
            ShadowGuard(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("cls, kw, match", [
    (ShadowGuard, {"retire": "0.5"}, "ShadowGuard: retire must be a finite number or None, got '0.5'"),
    (ShadowGuard, {"retire_after": None}, "ShadowGuard: retire_after must be a finite number, got None"),
    (ShadowGuard, {"retire_stall": "1"}, "ShadowGuard: retire_stall must be a finite number or None, got '1'"),
    (ShadowGuard, {"retire_stall": -1.0}, "ShadowGuard: retire_stall .* must be >= 0"),
    (ShadowGuard, {"retire_stall_after": -1.0}, "ShadowGuard: retire_stall .* must be >= 0"),
    (ShadowGuard, {"margin": "x"}, "ShadowGuard: margin must be a finite number, got 'x'"),
    (ShadowGuard, {"handover": True}, "ShadowGuard: handover must be a finite number, got True"),
    (Guard, {"window": "5"}, "Guard: window must be a finite number, got '5'"),
    (Guard, {"abort": []}, "Guard: abort must be a number or None, got \\[\\]"),
    (Guard, {"window": float("inf")}, "Guard: window must be a finite number, got inf"),
    (Guard, {"window": 2.5}, "Guard: window .* must be whole numbers"),
    (Guard, {"max_backoff": 1.5}, "Guard: window .* must be whole numbers"),
    (Guard, {"s3fifo": "no"}, "Guard: s3fifo .* must be a bool, got 'no'"),
    (Guard, {"s3fifo": None}, "Guard: s3fifo .* must be a bool, got None"),
    (ShadowGuard, {"margin": float("inf")}, "ShadowGuard: margin must be a finite number"),
    (ShadowGuard, {"floor_window": float("nan")}, "ShadowGuard: floor_window must be a finite"),
])
def test_guard_settings_that_are_not_numbers_are_config_errors(cls, kw, match):
    """A config value of the wrong type is a ConfigError naming it (it was a TypeError from a
    comparison); numpy numbers pass."""
    with pytest.raises(ConfigError, match=match):
        cls(**kw)
    assert ShadowGuard(margin=np.float64(0.01), retire_after=np.int64(4)).retire_after == 4.0


def test_shadow_guard_follows_arc_where_arc_copies_least():
    """On the recorded GPT inference trace at 10% of its peak live bytes ARC copies 12% less
    than LRU, LFU, GDSF and SLRU (each alone): the goldens' network under the ShadowGuard ends
    within 1% of ARC's traffic, which it could not without ARC among its experts."""
    from cachegym.envs.paths import data_path

    trace = read_trace(data_path("traces", "gpt_infer.npz"))
    cap = int(0.1 * trace.peak_live_bytes())
    golden = os.path.join(os.path.dirname(os.path.dirname(__file__)), "golden", "policy.npz")

    def traffic(pol) -> int:  # type: ignore[no-untyped-def]
        return Pool(cap, pol, placement="bytes", oversize="bypass").replay(trace).traffic_bytes

    arc = traffic(ARC())
    others = min(traffic(p) for p in (LRU(), LFU(), GDSF(), SLRU(), S3FIFO()))
    assert arc < 0.9 * others
    base = LearnedPolicy.load(golden, guard=False)
    assert traffic(LearnedPolicy(base.scorer, base.header, guard=ShadowGuard())) <= 1.01 * arc
    without = ShadowGuard(arc=False)
    assert traffic(LearnedPolicy(base.scorer, base.header, guard=without)) > 1.05 * arc


def test_shadow_guard_ends_within_one_percent_of_the_best_expert_on_a_loop(tmp_path):
    """Half the requests walk a loop larger than the pool (LRU, GDSF and LFU miss on all of
    them, S3-FIFO keeps part of the loop), half are Zipf (where a network that evicts the hottest
    object loses): S3-FIFO is the best expert by far, and the ShadowGuard ends within 1% of its
    traffic (and of its misses under ``objective=misses``) after at most three switches. Its
    regret is the first accesses, before S3-FIFO leads by the margin, and the hand-overs: a
    constant, so that on 40,000 requests it is 2.4% and on 100,000 1.0% (measured: 1.0099)."""
    from cachegym.policies.learned.models import heuristic_expert

    trace = generate("mixture", seed=2, n_requests=100_000, components=[
        {"name": "zipf", "weight": 0.5, "n_objects": 3000, "alpha": 1.0},
        {"name": "loop", "weight": 0.5, "n_objects": 1100}])
    cap = 700 * 4096

    def stats(policy):  # type: ignore[no-untyped-def]
        return Pool(cap, policy, placement="bytes", oversize="bypass").replay(trace)

    experts = {n: stats(heuristic_expert(n).policy) for n in ("lru", "s3fifo", "gdsf", "lfu")}
    bare = hottest_policy(tmp_path)
    experts["network"] = stats(LearnedPolicy(bare.scorer, bare.header, guard=False))
    for objective, cost in (("traffic", "traffic_bytes"), ("misses", "misses")):
        guard = ShadowGuard(objective=objective)
        got = getattr(stats(LearnedPolicy(bare.scorer, bare.header, guard=guard)), cost)
        best = {n: getattr(st, cost) for n, st in experts.items()}
        assert min(best, key=best.__getitem__) == "s3fifo"
        assert min(v for n, v in best.items() if n != "s3fifo") > 1.3 * best["s3fifo"]  # by far
        assert got <= 1.01 * best["s3fifo"], (objective, got / best["s3fifo"], guard.decision_shares())
        assert 1 <= guard.switches <= 3 and guard.expert == "s3fifo"


def test_negative_budget_is_a_config_error(policy_file):
    with pytest.raises(ConfigError, match="budget_us"):
        LearnedPolicy.load(policy_file, budget_us=-1)


def test_truncated_file_is_refused(policy_file, tmp_path):
    with open(policy_file, "rb") as f:
        blob = f.read()
    for cut in (10, len(blob) // 2, len(blob) - 5):
        p = tmp_path / f"cut{cut}.npz"
        p.write_bytes(blob[:cut])
        with pytest.raises(PolicyFileError, match="truncated or corrupt"):
            LearnedPolicy.load(p)


def test_a_file_of_another_kind_is_named_as_such(policy_file, tmp_path):
    """Not a zip archive at all (a text file, an ONNX export given instead of the .npz): said so,
    not reported as a corrupt policy."""
    for name, blob in (("notes.npz", b"hello, not a policy\n"), ("policy.onnx", b"\x08\x08\x12\x08cachegym")):
        p = tmp_path / name
        p.write_bytes(blob)
        with pytest.raises(PolicyFileError, match=r"is not a cachegym policy file \(the .npz zip archive"
                                                  + (r".*ONNX model is for serving outside" if name.endswith("onnx") else "")):
            LearnedPolicy.load(p)


def test_corrupt_file_is_refused(policy_file, tmp_path):
    with open(policy_file, "rb") as f:
        blob = bytearray(f.read())
    # flip bytes inside the stored weight data: zip CRC or the weights checksum catches it
    with np.load(policy_file) as z:
        assert "w/wc" in z.files
    idx = blob.find(np.float32(random_arrays()["wc"][0, 0]).tobytes())
    assert idx > 0
    blob[idx] ^= 0xFF
    p = tmp_path / "corrupt.npz"
    p.write_bytes(bytes(blob))
    with pytest.raises(PolicyFileError, match="corrupt"):
        LearnedPolicy.load(p)
    # a consistent zip whose weights were edited without updating the checksum
    hdr, arrays = read_policy_file(policy_file)
    arrays["wo"] = arrays["wo"] + 1
    np.savez(tmp_path / "edited.npz", header=np.frombuffer(json.dumps(hdr).encode(), np.uint8),
             **{f"w/{k}": v for k, v in arrays.items()})
    with pytest.raises(PolicyFileError, match="checksum mismatch"):
        LearnedPolicy.load(tmp_path / "edited.npz")


def test_mismatched_feature_spec_is_refused_naming_the_difference(tmp_path):
    spec = features.feature_spec()
    renamed = dict(spec, features=["bogus"] + spec["features"][1:])
    p = save_policy_file(tmp_path / "renamed.npz", random_arrays(), header(feature_spec=renamed))
    with pytest.raises(PolicyFileError, match="features: the file lacks \\['recency'\\] and has extra \\['bogus'\\]"):
        LearnedPolicy.load(p)
    swapped = list(spec["features"])
    swapped[0], swapped[1] = swapped[1], swapped[0]
    p = save_policy_file(tmp_path / "order.npz", random_arrays(), header(feature_spec=dict(spec, features=swapped)))
    with pytest.raises(PolicyFileError, match="differ at position 0"):
        LearnedPolicy.load(p)
    norm = dict(spec, normalisation=dict(spec["normalisation"], counts="n"))
    p = save_policy_file(tmp_path / "norm.npz", random_arrays(), header(feature_spec=norm))
    with pytest.raises(PolicyFileError, match="normalisation.counts"):
        LearnedPolicy.load(p)
    assert diff_feature_spec(spec, spec) == []


def test_wrong_shapes_and_missing_file_are_refused(tmp_path):
    a = random_arrays()
    a["wo"] = a["wo"][:-1]
    with pytest.raises(PolicyFileError, match="wo"):  # refused when written, as when read
        save_policy_file(tmp_path / "shape.npz", a, header())
    with pytest.raises(PolicyFileError, match="no such file"):
        LearnedPolicy.load(tmp_path / "absent.npz")
    p = save_policy_file(tmp_path / "v.npz", random_arrays(), header())
    hdr, arrays = read_policy_file(p)
    hdr["format_version"] = 99
    np.savez(tmp_path / "v2.npz", header=np.frombuffer(json.dumps(hdr).encode(), np.uint8),
             **{f"w/{k}": v for k, v in arrays.items()})
    with pytest.raises(PolicyFileError, match="format version 99"):
        LearnedPolicy.load(tmp_path / "v2.npz")


def test_load_needs_numpy_alone(policy_file):
    code = (
        "import sys\n"
        "for m in ('torch', 'stable_baselines3', 'sb3_contrib', 'gymnasium'):\n"
        "    sys.modules[m] = None  # importing any of them now fails\n"
        "from cachegym.policies.learned import LearnedPolicy\n"
        f"p = LearnedPolicy.load({str(policy_file)!r})\n"
        "print(p.K)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "8"


@pytest.mark.parametrize("hidden", [(8,), (16, 8), (64, 32), (40,), (33, 70), (8, 8, 4)])
def test_forward_pass_chooses_as_the_float64_reference(hidden):
    """The forward pass (float32, one summation order) picks the candidate of the float64
    reference, up to float32 rounding, at any depth."""
    a = random_arrays(seed=4, hidden=hidden)
    sc = CandidateScorer(a)
    rng = np.random.default_rng(1)
    for n in (1, 5, 32):
        for _ in range(50):
            cand = rng.random((32, features.F)).astype(np.float32)
            cand[:, 17:] = rng.random((32, features.F - 17)) > 0.8  # one-hot-like columns
            glob = rng.random(features.G).astype(np.float32)
            ref = reference_scores(a, cand[:n], glob)
            got = sc.choose_first(cand, glob, n)
            assert ref[got] >= ref.max() - 1e-4 * max(1.0, abs(ref.max()))


def test_deeper_networks_decide_too(tmp_path):
    a = random_arrays(hidden=(8, 8, 4))
    p = save_policy_file(tmp_path / "deep.npz", a, header(arch=dict(header()["arch"], hidden=[8, 8, 4])))  # type: ignore[arg-type]
    pol = LearnedPolicy.load(p, guard=False)
    assert pol.scorer.hidden == [8, 8, 4]
    trace = generate("zipf", seed=2, n_requests=2000, n_objects=100, size=4096)
    st = Pool(20 * 4096, pol, placement="bytes").replay(trace)
    assert st.evictions > 0 and st.fallbacks == 0


def log_victims(pol: LearnedPolicy) -> list[int]:
    """The list that ``pol``'s victims are appended to from now on, decision by decision."""
    log: list[int] = []
    inner = pol.victim

    def victim(view):
        k = inner(view)
        log.append(k)
        return k

    pol.victim = victim  # type: ignore[method-assign]
    return log


def _reference_victim(pol: LearnedPolicy, arrays, view) -> tuple[int, float]:
    """The victim of features.observe + the float64 reference forward pass (with the same
    draws as the policy's next decision), and its score's margin over the runner-up."""
    rng_state = pol._rng.bit_generator.state
    keys, cand, mask, glob = pol.observe(view)
    pol._rng.bit_generator.state = rng_state  # the policy draws the same candidates next
    ref = reference_scores(arrays, cand[:len(keys)], glob)
    order = np.argsort(-ref)
    margin = float(ref[order[0]] - ref[order[1]]) if len(keys) > 1 else np.inf
    return int(keys[order[0]]), margin


def _check_victims_against_the_reference(pol: LearnedPolicy, arrays) -> list[bool]:
    """Wraps ``pol.victim`` so that each decision is compared with :func:`_reference_victim`
    (equal, or the reference's margin under 1e-3); returns the list the comparisons go to."""
    inner = pol.victim
    checked: list[bool] = []

    def victim(view):
        want, margin = _reference_victim(pol, arrays, view)
        got = inner(view)
        checked.append(got == want or margin < 1e-3)
        return got

    pol.victim = victim  # type: ignore[method-assign]
    return checked


@pytest.mark.parametrize("rule", ["lru", "sample"])
def test_decisions_equal_the_reference(tmp_path, rule):
    """The policy's decision (its own candidate selection, packed features, the kernel's
    forward pass) evicts what features.observe + the float64 reference forward pass evict,
    request by request (but for a near tie, within float32 rounding)."""
    arrays = random_arrays(seed=7, hidden=(64, 32))
    p = save_policy_file(tmp_path / "p.npz", arrays,
                         header(K=32, candidate_rule=rule, arch=dict(header()["arch"], hidden=[64, 32])))  # type: ignore[arg-type]
    trace = generate("zipf", seed=5, n_requests=6000, n_objects=600, alpha=0.8, size=4096)
    pol = LearnedPolicy.load(p, guard=False)
    checked = _check_victims_against_the_reference(pol, arrays)
    st = Pool(60 * 4096, pol, placement="bytes").replay(trace)
    assert st.fallbacks == 0
    assert len(checked) > 1000 and all(checked)


def test_forward_pass_refuses_bad_shapes_and_arguments():
    """The forward pass names what is wrong instead of reading out of bounds."""
    a = random_arrays(seed=4, hidden=(16, 8))
    k = CandidateScorer(a).kernel
    x = np.zeros((33, features.F), np.float32)
    assert 0 <= k.best(x, 32) < 32
    for bad_x, n, what in ((x, 0, "n in 1..K"), (x, 33, "n in 1..K"), (x.astype(np.float64), 4, "float32"),
                           (x[:, :5].copy(), 4, "float32"), (x.reshape(-1), 4, "float32")):
        with pytest.raises(ConfigError, match=what):
            k.best(bad_x, n)
    w = {k_: np.asarray(v, np.float32) for k_, v in a.items()}
    for bad in (dict(w, b0=w["b0"][:3]), dict(w, b1=w["b1"][:3]), dict(w, wo=w["wo"][:3])):
        with pytest.raises(PolicyFileError, match="shape"):
            CandidateScorer(bad)
    with pytest.raises(PolicyFileError, match="missing"):
        CandidateScorer({k_: v for k_, v in w.items() if k_ != "wg"})


@pytest.mark.parametrize("guard", [True, False])
def test_pickled_and_copied_policies_decide_as_the_original(policy_file, guard):
    """A LearnedPolicy survives pickle and deepcopy (the C forward pass is rebuilt from its
    weights; the tracker's flat view stays a view of its rows, the decision's memoryviews and
    bit-generator capsule those of the copy's own arrays and generator): a copy evicts exactly
    what the original evicts, and a copy taken half-way through a trace holds the same history."""
    import copy
    import pickle

    trace = generate("zipf", seed=1, n_requests=4000, n_objects=400, size=4096)

    def misses(pol: LearnedPolicy) -> int:
        return Pool(40 * 4096, pol, placement="bytes").replay(trace).misses

    ref = misses(LearnedPolicy.load(policy_file, guard=guard))
    assert misses(pickle.loads(pickle.dumps(LearnedPolicy.load(policy_file, guard=guard)))) == ref
    assert misses(copy.deepcopy(LearnedPolicy.load(policy_file, guard=guard))) == ref
    pol = LearnedPolicy.load(policy_file, guard=guard)
    Pool(40 * 4096, pol, placement="bytes").replay(trace.window(0, 2000))
    twin = pickle.loads(pickle.dumps(pol))

    def features_of(p: LearnedPolicy) -> features.FeatureTracker:
        """The tracker of the pool where the network decides (under a ShadowGuard: its shadow's)."""
        if isinstance(p.guard, ShadowGuard):
            assert p.guard.net is not None
            p = p.guard.net.policy  # type: ignore[assignment]
        assert isinstance(p.tracker, features.FeatureTracker)
        return p.tracker

    t, t0 = features_of(twin), features_of(pol)
    assert np.shares_memory(t._V, t._S) and t is not t0
    np.testing.assert_array_equal(t._S, t0._S)


@pytest.mark.parametrize("hidden", [(64, 32), (40,), (33, 70)])
def test_scores_do_not_depend_on_the_other_candidates(hidden):
    """The forward pass skips the inputs that are zero (one-hot state flags, ReLU zeros): a
    candidate's score is the same float32 value bit for bit whatever the other candidates and
    its position, so skipping changes no sum; and it is the float64 reference's score up to
    float32 rounding."""
    a = random_arrays(seed=6, hidden=hidden)
    k = CandidateScorer(a).kernel

    class nat:  # noqa: N801  (scores as a list, as the test reads them)
        @staticmethod
        def scores(x, n):
            out = np.empty(n, np.float32)
            k.scores(x, n, out)
            return out

        best = staticmethod(k.best)

    rng = np.random.default_rng(2)
    for _ in range(30):
        cand = rng.random((33, features.F)).astype(np.float32)
        cand *= rng.random((33, features.F)) > 0.5  # many exact zeros, different per candidate
        cand[:, 17:] = rng.random((33, features.F - 17)) > 0.8
        cand[rng.integers(0, 32, 3)] = 0.0  # whole rows of zeros
        x = np.zeros((33, features.F), np.float32)
        x[:32], x[32, :features.G] = cand[:32], rng.random(features.G)
        s = np.array(nat.scores(x, 32), np.float32)
        perm = rng.permutation(32)
        xp = x.copy()
        xp[:32] = x[perm]
        np.testing.assert_array_equal(np.array(nat.scores(xp, 32), np.float32), s[perm])
        for n in (1, 7):  # odd counts: the last candidate is paired with itself
            np.testing.assert_array_equal(np.array(nat.scores(x, n), np.float32), s[:n])
        ref = reference_scores(a, x[:32], x[32, :features.G])
        np.testing.assert_allclose(s, ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max())))
        assert nat.best(x, 32) == int(np.argmax(s))


@pytest.mark.parametrize("rule", ["lru", "sample"])
def test_decisions_equal_the_reference_with_pins_and_copies_in_flight(tmp_path, rule):
    """With pinned objects and prefetches in flight (a timing model): the victims stay those
    of features.observe + the float64 reference forward pass, request by request (but for a
    near tie), and the same random draws follow."""
    arrays = random_arrays(seed=3, hidden=(64, 32))
    p = save_policy_file(tmp_path / "p.npz", arrays,
                         header(K=8, candidate_rule=rule, arch=dict(header()["arch"], hidden=[64, 32])))  # type: ignore[arg-type]
    trace = generate("zipf", seed=8, n_requests=5000, n_objects=300, alpha=0.8, size=4096)
    keys, sizes = trace.key.tolist(), trace.size.tolist()
    pol = LearnedPolicy.load(p, guard=False, budget_us=None)
    checked = _check_victims_against_the_reference(pol, arrays)
    pool = Pool(40 * 4096, pol, placement="bytes", cost="a100_pcie4")
    rng = np.random.default_rng(1)
    pinned: list[int] = []
    for i, (k, s) in enumerate(zip(keys, sizes)):
        pool.access(k, s)
        old = keys[max(i - 25, 0)]  # pinned a while after its access: among the least recent
        if rng.random() < 0.3 and len(pinned) < 6 and pool.view.is_resident(old):
            pool.pin(old)
            pinned.append(old)
        elif pinned and rng.random() < 0.3:
            pool.unpin(pinned.pop(0))
        nxt = keys[(i + 3) % len(keys)]
        if nxt in pool and not pool.view.is_resident(nxt):
            pool.prefetch(nxt)
    assert pool.stats.fallbacks == 0
    assert len(checked) > 1000 and all(checked)


def test_guard_admits_what_s3fifo_admits_while_it_decides(policy_file):
    """While S3-FIFO decides, the pool admits a missed object only if S3-FIFO's model took it
    in (it refuses objects of at least its small queue's size); while the network or LRU
    decides, every miss is admitted; a policy without a guard admits every miss."""
    bare = LearnedPolicy.load(policy_file, guard=False)
    assert bare.admit(Pool(1 << 20, bare).view, 1, 1 << 30) and bare.pending_evictions() == ()
    guard = Guard()
    pol = LearnedPolicy(LearnedPolicy.load(policy_file).scorer, LearnedPolicy.load(policy_file).header,
                        guard=guard)
    pool = Pool(100 * 4096, pol, placement="bytes", oversize="bypass")
    for k in range(200):
        pool.access(k, 4096)
    big = 20 * 4096  # above S3-FIFO's small queue (10% of the capacity)
    for expert, admitted in ((None, True), ("lru", True), ("s3fifo", False)):
        guard.expert = expert
        key = 1000 + len(str(expert))
        pool.access(key, big)
        assert (pool.state(key) == "device") is admitted, expert
    guard.expert = "s3fifo"
    pool.access(2000, 4096)  # a small new object enters S3-FIFO's small queue: admitted
    assert pool.state(2000) == "device" and guard.model is not None and guard.model.pool is not None
    assert guard.model.pool.state(2000) == "device"


def mru_policy(tmp_path, guard: bool | Guard = False) -> LearnedPolicy:
    """A network whose score is ``1 - recency``: it evicts the most recently used candidate,
    which wins on a loop larger than the cache (where LRU never hits)."""
    a = {k: np.zeros_like(v) for k, v in random_arrays(hidden=(4,)).items()}
    a["wc"][features.FEATURE_NAMES.index("recency"), 0] = -1.0
    a["b0"][0] = 1.0
    a["wo"][0] = 1.0
    p = save_policy_file(tmp_path / "mru.npz", a, header(K=16, candidate_rule="sample",
                                                         arch=dict(header()["arch"], hidden=[4])))  # type: ignore[arg-type]
    return LearnedPolicy.load(p, guard=guard)


@pytest.mark.parametrize("trace_name", ["zipf", "dl_training"])
def test_shadow_guard_network_shadow_is_the_network_alone(tmp_path, trace_name):
    """The ShadowGuard's shadow pool runs the network alone on every request (with its kind and
    whether it writes, and the frees): its hits and evictions are exactly those of the network
    without a guard, whoever decides in the guarded pool."""
    trace = (generate("dl_training", seed=5) if trace_name == "dl_training" else
             generate("zipf", seed=3, n_requests=20_000, n_objects=2000, alpha=1.0, size=4096))
    cap = int(0.25 * (trace.peak_live_bytes() if trace_name == "dl_training" else trace.working_set_bytes()))
    bare = hottest_policy(tmp_path)
    guard = ShadowGuard(retire=None)  # (the network, far behind on Zipf, runs to the end)
    guarded = LearnedPolicy(bare.scorer, bare.header, guard=guard)
    Pool(cap, guarded, placement="bytes", oversize="bypass").replay(trace)
    alone = Pool(cap, bare, placement="bytes", oversize="bypass").replay(trace)
    assert guard.net is not None
    shadow = guard.net.pool.stats
    assert (shadow.hits, shadow.misses, shadow.evictions) == (alone.hits, alone.misses, alone.evictions)
    if trace_name == "zipf":
        assert guard.switches > 0 and guard.decisions.get("network", 0) < 0.5 * len(trace)  # the
        # hottest-first network lost: heuristics decided meanwhile


def test_shadow_guard_follows_lru_without_trials(tmp_path):
    """A network that loses to LRU throughout costs the ShadowGuard only its first accesses and
    the switch: it never hands decisions back to the network for a trial, so it ends far
    closer to LRU than the Guard, which tries the network again after each back-off."""
    trace = generate("zipf", seed=3, n_requests=60_000, n_objects=2000, alpha=1.0, size=4096)
    cap = 200 * 4096

    def misses(guard: Guard) -> int:
        bare = hottest_policy(tmp_path)
        return Pool(cap, LearnedPolicy(bare.scorer, bare.header, guard=guard), placement="bytes").replay(trace).misses

    sg, g = ShadowGuard(), LRUGuard()
    m_sg, m_g = misses(sg), misses(g)
    m_lru = Pool(cap, LRU(), placement="bytes").replay(trace).misses
    # switches: the network's first loss to LRU, then at most three more, among the heuristics
    # ahead of LRU on this Zipf workload (S3-FIFO, LFU, ARC, SLRU, GDSF)
    assert 1 <= sg.switches <= 4 and sg.expert in ("lru", "s3fifo", "gdsf", "lfu", "arc", "slru")
    assert sg.decisions["network"] < 0.02 * len(trace)  # the network decided only until then
    assert m_sg - m_lru < 0.002 * len(trace) and m_sg - m_lru < 0.5 * (m_g - m_lru)


def test_shadow_guard_follows_gdsf_where_sizes_vary(tmp_path):
    """On a Zipf workload whose sizes vary widely GDSF (evicting large objects first) hits far
    more often than LRU, S3-FIFO, LFU and ARC: the ShadowGuard of a bad network switches to it
    early and ends within 1% of GDSF's misses; without its GDSF expert
    (``gdsf=False``) it can only reach S3-FIFO."""
    trace = generate("zipf", seed=5, n_requests=40_000, n_objects=3000, alpha=0.9, size=4096,
                     size_sigma=1.5)
    cap = int(0.1 * trace.working_set_bytes())

    def misses(policy) -> int:
        return Pool(cap, policy, placement="bytes").replay(trace).misses

    bare = hottest_policy(tmp_path)
    with_gdsf, without = ShadowGuard(objective="misses"), ShadowGuard(gdsf=False, objective="misses")
    m = misses(LearnedPolicy(bare.scorer, bare.header, guard=with_gdsf))
    m_without = misses(LearnedPolicy(bare.scorer, bare.header, guard=without))
    m_gdsf = misses(GDSF())
    others = [misses(p) for p in (LRU(), S3FIFO(), LFU(), ARC())]
    assert m_gdsf < min(others) - 0.1 * len(trace)  # (measured: 10,565 against 15,994 or more)
    assert with_gdsf.expert == "gdsf" and 1 <= with_gdsf.switches <= 2
    assert m < m_gdsf + 0.01 * len(trace)  # (measured: 10,638)
    assert without.gdsf is None and without.expert != "gdsf" and m_without > min(others) - 0.01 * len(trace)


def test_shadow_guard_judges_on_traffic_by_default(tmp_path):
    """By default the ShadowGuard compares its experts on the bytes their shadows copy (streamed
    accesses included), not on hits: on a Zipf workload with writes and widely varying sizes it
    ends within 2% of its best expert's traffic and well below a bad network's, and reports who
    decided how many accesses."""
    from cachegym.policies.learned.models import heuristic_expert

    rng = np.random.default_rng(3)
    base = generate("zipf", seed=7, n_requests=30_000, n_objects=2000, alpha=0.9, size=4096,
                    size_sigma=1.5)
    trace = Trace.from_arrays(base.key, base.size, (rng.random(len(base)) < 0.3).astype(np.uint8))
    cap = int(0.1 * trace.working_set_bytes())

    def traffic(policy) -> int:
        return Pool(cap, policy, placement="bytes", oversize="bypass").replay(trace).traffic_bytes

    bare = hottest_policy(tmp_path)
    guard = ShadowGuard()
    assert guard.objective == "auto"  # traffic in a pool without a timing preset
    got = traffic(LearnedPolicy(bare.scorer, bare.header, guard=guard))
    assert guard.objective == "traffic" and all(e.objective == "traffic" for e in guard.experts.values())
    experts = {n: traffic(heuristic_expert(n).policy) for n in ("lru", "s3fifo", "gdsf", "lfu")}
    net = traffic(LearnedPolicy(bare.scorer, bare.header, guard=False))
    best = min(experts.values())
    assert got <= 1.02 * best < net
    assert sum(guard.decisions.values()) == len(trace) and guard.decisions.get(guard.expert or "network")
    with pytest.raises(ConfigError, match="objective must be one of"):
        ShadowGuard(objective="hits")


def _gpt_wide_pool(policy, prefetch: bool = False):
    """A pool of a quarter of gpt_wide's peak live bytes under ``h100_pcie5`` (copies cost 8 us
    + bytes / 50 GB/s), with the lookahead prefetcher if ``prefetch``; the trace."""
    from cachegym.policies.registry import make_prefetch

    trace = read_trace(os.path.join(ROOT, "data", "traces", "gpt_wide.npz"))
    pool = Pool(int(0.25 * trace.peak_live_bytes()), policy, placement="bytes", oversize="bypass",
                cost="h100_pcie5")
    if prefetch:
        pool.prefetcher = make_prefetch("lookahead", trace=trace)
    return pool, trace


def test_shadow_guard_judges_on_stall_under_a_timing_preset(tmp_path):
    """In a pool with a timing preset the default objective (``auto``) is stall: on gpt_wide,
    where each copy's latency makes GDSF (which keeps small objects) stall least though it
    copies more bytes than LRU, the guard follows GDSF and ends within 5% of its stall, where
    judging on traffic leaves more than twice as much. ``stall`` without a preset is refused."""
    bare = hottest_policy(tmp_path)
    gdsf, trace = _gpt_wide_pool(GDSF())
    best = gdsf.replay(trace).stall_ns
    stall, guards = {}, {}
    for objective, kw in (("auto", {}), ("traffic", {}), ("kept", {"retire_stall": None})):
        guard = guards[objective] = ShadowGuard(objective=objective.replace("kept", "auto"), **kw)
        pool, trace = _gpt_wide_pool(LearnedPolicy(bare.scorer, bare.header, guard=guard))
        stall[objective] = pool.replay(trace).stall_ns
        assert guard.objective == ("traffic" if objective == "traffic" else "stall")
    assert stall["auto"] <= 1.05 * best
    assert stall["traffic"] > 2 * stall["auto"]
    # under stall the experts far behind (over twice the best's stall and 32 pool copies more)
    # stop running, the followed one never; the pool's stall is as with every expert running
    kept, auto = guards["kept"], guards["auto"]
    assert kept.retired == {} and len(kept.experts) == 5  # (no ARC, SLRU under stall)
    assert set(auto.retired) == {"lru", "lfu", "s3fifo"} and auto.expert == "gdsf"
    assert stall["auto"] == stall["kept"]
    guarded = LearnedPolicy(bare.scorer, bare.header, guard=ShadowGuard(objective="stall"))
    with pytest.raises(PolicyError, match="timing preset"):  # (the ConfigError, chained)
        Pool(1 << 20, guarded).access(1, 4096)


def test_a_shadow_sees_the_guarded_pools_prefetch_as_a_prefetch_under_stall():
    """Judged on stall, an expert's shadow takes the guarded pool's prefetch as a prefetch (an
    asynchronous copy under its clock: a request soon after waits for it there too); judged on
    traffic, as a request whose copy counts in its gain, as the guarded pool's prefetch counts in
    the pool's traffic."""
    from cachegym.policies.learned.models import heuristic_expert

    guarded = Pool(1 << 20, LRU(), cost="h100_pcie5")
    for objective in ("stall", "traffic"):
        e = heuristic_expert("gdsf", objective=objective)
        e.setup(guarded.view)
        e.prefetched(7, 65536, 0)
        st = e.pool.stats
        assert (st.prefetches, st.accesses) == ((1, 0) if objective == "stall" else (0, 1))
        e.request(7, 65536, False, 0, True, 0)  # at once: the copy is still in flight
        assert st.late_prefetches == (1 if objective == "stall" else 0)
        assert e.gain < 0 if objective == "stall" else e.gain == -65536  # (the request hit)


@pytest.mark.parametrize("prefetcher", ["history", "lookahead"])
def test_a_stall_guards_shadows_run_the_prefetcher_in_their_own_pools(tmp_path, prefetcher):
    """A prefetcher that can say what it would prefetch in another pool (``prefetch_for``: the
    history and lookahead prefetchers, a learned head) runs in each shadow as it would there,
    not through the prefetches it made for the followed expert's content: following GDSF on
    gpt_infer (a loop over the weights), the LRU shadow stalls within 30% of LRU with the
    prefetcher alone (7.1x with history, 10.2x with lookahead when the shadows took the pool's
    prefetches; measured at 3fdb756: 1.25x with history, whose shadow's prefetches arrive late
    45 times against 5 alone, and 1.00x with lookahead; 1.10x with history before the
    predictor re-aligned new objects on past runs, which made LRU alone stall 5% less)."""
    from cachegym.policies.registry import make_prefetch

    trace = read_trace(os.path.join(ROOT, "data", "traces", "gpt_infer.npz"))
    cap = int(0.25 * trace.peak_live_bytes())

    def pool(policy):
        return Pool(cap, policy, prefetcher=make_prefetch(prefetcher, trace=trace),
                    placement="bytes", oversize="bypass", cost="h100_pcie5")

    alone = pool(LRU()).replay(trace).stall_ns
    bare = hottest_policy(tmp_path)
    guard = ShadowGuard(margin=1e9, handover=1e9, floor=None, retire=None)  # never switches (follows whom
    # it is told) and every shadow runs to the end
    guard.expert = "gdsf"
    pool(LearnedPolicy(bare.scorer, bare.header, guard=guard)).replay(trace)
    shadow = guard.experts["lru"]
    assert shadow.pool.stats.prefetches > 0 and set(guard.decisions) == {"gdsf"}
    assert 0.8 * alone <= -shadow.gain <= 1.3 * alone, (-shadow.gain, alone)


@pytest.mark.parametrize("prefetcher", [None, "history"])
def test_a_pool_following_an_expert_under_stall_waits_no_longer_than_the_expert(tmp_path, prefetcher):
    """Under stall the guarded pool evicts what the followed expert's shadow evicted right after
    the access, as the shadow pool does, so that a dirty object's write-back runs beside the
    compute instead of holding up the allocation that needs its room. Following SLRU on gpt_wide
    at 10% of peak live bytes, the pool then waits what SLRU's shadow waits (without a
    prefetcher: exactly) and no more than SLRU alone; it waited 68.2 ms against the shadow's 47.9
    without a prefetcher and 40.0 against SLRU's 15.8 alone with history, when it evicted them
    only as it needed room. What the shadow never held (the pool's own prefetches) is not
    evicted early."""
    from cachegym.policies.registry import make_eviction, make_prefetch

    trace = read_trace(os.path.join(ROOT, "data", "traces", "gpt_wide.npz"))
    cap = int(0.1 * trace.peak_live_bytes())

    def pool(policy):
        pf = None if prefetcher is None else make_prefetch(prefetcher, trace=trace)
        return Pool(cap, policy, prefetcher=pf, placement="bytes", oversize="bypass",
                    cost="h100_pcie5")

    bare = hottest_policy(tmp_path)
    guard = ShadowGuard(margin=1e9, handover=1e9, floor=None, retire=None, slru=True, without_prefetch=False)
    guard.expert = "slru"
    got = pool(LearnedPolicy(bare.scorer, bare.header, guard=guard)).replay(trace).stall_ns
    alone = pool(make_eviction("slru")).replay(trace).stall_ns
    shadow = -guard.experts["slru"].gain
    if prefetcher is None:
        assert got == shadow
    assert got <= 1.01 * alone, (got, shadow, alone)


def test_a_stall_experts_cost_is_all_its_shadow_pool_waited(tmp_path):
    """Under stall each expert is judged on everything its shadow pool waited for: its
    accesses' stall and its prefetches' (a prefetch into a full pool waits for the write-backs
    of the dirty victims that make its room). Counted around the accesses alone, the experts
    with the prefetcher looked cheaper than they are (here the network's shadow 6.8 ms of its
    10.0; the demo's dl_training_s101 at 25% with the learned head: LRU's shadow 32.4 ms against
    39.2 for LRU with the head alone), so the guard preferred them to their twins without it."""
    from cachegym.envs.workloads.registry import generate
    from cachegym.policies.registry import make_prefetch

    trace = generate("dl_training", seed=5, n_layers=4, hidden=64, batch_tokens=128, steps=6)
    cap = int(0.25 * trace.peak_live_bytes())
    bare = hottest_policy(tmp_path)
    guard = ShadowGuard(margin=1e9, handover=1e9, floor=None, retire=None)  # the network decides throughout
    Pool(cap, LearnedPolicy(bare.scorer, bare.header, guard=guard),
         prefetcher=make_prefetch("lookahead", trace=trace), cost="h100_pcie5",
         oversize="bypass", placement="bytes").replay(trace)
    in_prefetches = 0
    for name, e in guard.experts.items():
        assert -e.gain == e.pool.cost.stall_ns, name
        in_prefetches += e.pool.stats.prefetches > 0
    assert in_prefetches >= 4
    lru = Pool(cap, LRU(), prefetcher=make_prefetch("lookahead", trace=trace), cost="h100_pcie5",
               oversize="bypass", placement="bytes").replay(trace)
    # (its prefetches are started in the shadow before the next request or free, after the
    # compute in between, not after the access: the prefetches read LRU's next victims then)
    assert abs(-guard.experts["lru"].gain - lru.stall_ns) <= 0.08 * lru.stall_ns


@pytest.mark.parametrize("prefetcher", ["history", "lookahead"])
def test_a_stall_shadow_starts_its_prefetches_before_a_free_as_its_pool_did(tmp_path, prefetcher):
    """Before a free between two requests, the shadows start the previous request's
    prefetches and run the compute since, as the guarded pool did: the LRU shadow's stall is
    LRU's own (it started them at the next request, after the free: 0.9965 / 0.9930 of it
    here, 14% above on a larger training trace)."""
    from cachegym.envs.workloads.registry import generate
    from cachegym.policies.registry import make_prefetch

    trace = generate("dl_training", seed=1, steps=6)
    assert (trace.op == Op.FREE).sum() > 0
    cap = int(0.5 * trace.peak_live_bytes())
    bare = hottest_policy(tmp_path)
    guard = ShadowGuard(margin=1e9, handover=1e9, floor=None, retire=None)

    def pool(policy):
        return Pool(cap, policy, prefetcher=make_prefetch(prefetcher, trace=trace),
                    cost="h100_pcie5", oversize="bypass", placement="bytes")

    pool(LearnedPolicy(bare.scorer, bare.header, guard=guard)).replay(trace)
    assert -guard.experts["lru"].gain == pool(LRU()).replay(trace).stall_ns


@pytest.mark.parametrize("prefetcher", ["history", "lookahead"])
def test_a_stall_guard_mutes_a_prefetcher_that_costs_stall(tmp_path, prefetcher):
    """The twins without the prefetcher (``<expert>-no-prefetch``) are judged for any prefetcher
    that answers ``prefetch_for`` and can be muted: on a generated training trace in a pool where
    they cost stall, the guard follows a twin, mutes the prefetcher, and ends below the guard
    without twins and within 15% of the best expert without prefetches (measured at 50% of the
    peak live bytes: history 2.41 ms against 2.81 without twins, lookahead 2.38 against 2.79, the
    best heuristic without prefetch 2.21, where GDSF, S3-FIFO and LFU stall more with either
    prefetcher; at 30% the prefetchers stopped costing stall once the room a prefetch makes from
    a dirty victim no longer stalled compute, and at 20% once the prefetch rule learnt to do no
    harm; with history 2.48 since the guard's floor under its fallback, which trips here early
    and moves the pool to LRU's twin for a while: ``ShadowGuard.floor``)."""
    from cachegym.envs.workloads.registry import generate
    from cachegym.policies.registry import make_eviction, make_prefetch

    trace = generate("dl_training", seed=5, n_layers=4, hidden=64, batch_tokens=128, steps=12)
    cap = int(0.5 * trace.peak_live_bytes())

    def run(policy, pf):
        return Pool(cap, policy, prefetcher=pf, cost="h100_pcie5", oversize="bypass",
                    placement="bytes").replay(trace).stall_ns

    best = min(run(make_eviction(n), None) for n in ("lru", "s3fifo", "gdsf", "lfu"))
    bare = hottest_policy(tmp_path)
    got = {}
    for twins in (True, False):
        guard = ShadowGuard(without_prefetch=twins)
        got[twins] = run(LearnedPolicy(bare.scorer, bare.header, guard=guard),
                         make_prefetch(prefetcher, trace=trace))
        assert any(k.endswith("-no-prefetch") for k in guard.decisions) == twins
    assert got[True] < got[False] and got[True] <= 1.15 * best, (got, best)


def test_a_followed_expert_makes_the_room_a_prefetch_needs_in_its_own_order(tmp_path):
    """A guard following GDSF with a prefetcher makes the room its prefetches need (before the
    shadow has seen them) from GDSF's eviction order, not LRU's: its stall is within 2% of GDSF
    alone with the same prefetcher (it was 1.8x when LRU made that room)."""
    from cachegym.policies.registry import make_prefetch

    bare = hottest_policy(tmp_path)
    gdsf, trace = _gpt_wide_pool(GDSF(), prefetch=True)
    alone = gdsf.replay(trace).stall_ns
    guard = ShadowGuard(margin=1e9, handover=1e9, floor=None)  # never switches: follows whom it is told
    guard.expert = "gdsf"
    pool = _gpt_wide_pool(LearnedPolicy(bare.scorer, bare.header, guard=guard))[0]
    pool.prefetcher = make_prefetch("lookahead", trace=trace)
    got = pool.replay(trace).stall_ns
    assert set(guard.decisions) == {"gdsf"}
    assert got <= 1.02 * alone, (got, alone)


def test_shadow_guard_keeps_the_network_where_it_leads(tmp_path):
    """On a loop larger than the cache the most-recent-first network beats LRU and S3-FIFO:
    the ShadowGuard follows it for all but a few accesses (S3-FIFO's hits come in bursts on
    a loop, and may lead for a while), and the guarded pool hits more than either heuristic and
    misses within 2% of the network alone (the pool follows its shadow; each switch to S3-FIFO
    and back costs a hand-over, and each makes the next need a larger lead)."""
    trace = generate("loop", seed=1, n_requests=30_000, n_objects=600, size=4096)
    cap = 200 * 4096
    bare = Pool(cap, mru_policy(tmp_path), placement="bytes").replay(trace)
    guard = ShadowGuard()
    st = Pool(cap, mru_policy(tmp_path, guard), placement="bytes").replay(trace)
    others = [Pool(cap, p, placement="bytes").replay(trace).hits for p in (LRU(), S3FIFO())]
    assert bare.hits > max(others) and others[0] == 0  # (measured: 9,172 against 0 and 8,820)
    assert guard.decisions["network"] > 0.9 * len(trace) and guard.expert is None  # (measured: 0.947)
    assert max(others) < st.hits and st.misses < 1.02 * bare.misses  # (measured: 8,870 hits,
    # 21,130 misses against 20,828)


def test_learned_modules_import_only_those_before_them() -> None:
    """cachegym.policies.learned's modules form no import cycle: each imports (at run time) only the
    modules listed before it in the package's docstring."""
    import ast

    order = ["policy_file", "network", "prefetch_head", "models", "guards", "policy"]
    pkg = os.path.join(ROOT, "policies", "learned")
    for i, name in enumerate(order):
        with open(os.path.join(pkg, f"{name}.py")) as f:
            tree = ast.parse(f.read())
        for node in tree.body:  # module level, outside ``if TYPE_CHECKING:``
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cachegym.policies.learned"):
                dep = node.module.rpartition(".")[2]  # type: ignore[union-attr]
                assert dep in order[:i], f"{name} imports {node.module}"
    for name in order:  # and each one imports alone, in a fresh interpreter
        r = subprocess.run([sys.executable, "-c", f"import cachegym.policies.learned.{name}"], cwd=ROOT,
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT))
        assert r.returncode == 0, r.stderr


def test_guarded_and_bare_policies_print_distinct_reprs(tmp_path):
    """A policy's repr says its guard (kind, objective, experts, who decides) or that it has
    none, so two rows of results can never be told apart only by their file."""
    bare = hottest_policy(tmp_path)
    from cachegym.policies.learned.guards import make_guard

    reprs = {g: repr(LearnedPolicy(bare.scorer, bare.header, guard=make_guard(g))) for g in
             ("shadow", "trial", "lru")}
    reprs["none"] = repr(LearnedPolicy(bare.scorer, bare.header, guard=False))
    assert len(set(reprs.values())) == 4 and reprs["none"].endswith("guard=None)")
    assert "ShadowGuard(objective='auto'" in reprs["shadow"] and "deciding='network'" in reprs["shadow"]


def test_an_expert_only_measured_keeps_nothing_pending():
    """LRU's expert is only measured (the pool's tracker makes LRU's decisions), so it is never
    told the guarded pool's evictions, which clear what is pending: it kept every object its
    shadow gave up while the pool held it (6,437 stale of 7,572 after 50,000 web_cdn requests;
    an audit's case). Now nothing pending is kept there, and every followed expert's pending
    objects are held by the guarded pool (``Expert``'s invariant)."""
    path = os.path.join(ROOT, "tests", "golden", "policy.npz")
    t = generate("web_cdn", 5, n_requests=6000, n_objects=1500)
    guard = ShadowGuard(retire=None)
    pool = Pool(int(0.1 * t.peak_live_bytes()), LearnedPolicy.load(path, guard=guard),
                placement="bytes", oversize="bypass")
    pool.replay(t)
    lru = guard.experts["lru"]
    assert not lru.followed and lru.pending_evictions() == [] and lru.given_up() == []
    for e in guard.experts.values():
        assert all(pool.view.is_resident(k) for k in e.pending_evictions())


def test_a_shadow_counts_the_bytes_of_the_pools_prefetches_under_traffic():
    """Under ``traffic`` a shadow replays the guarded pool's prefetches as requests; their
    copies are its traffic, as they are the guarded pool's (uncounted, the shadows' costs fell
    short of the pool's by every prefetched byte, which the guard took for hand-over costs:
    LRU's shadow 65.0 MB against 145.8 MB for LRU with ``history`` alone on gpt at 25%; an
    audit's case). Misses and hits still count requests only."""
    from cachegym.policies.learned.models import heuristic_expert

    pool = Pool(4096, LRU(), placement="bytes")
    e = heuristic_expert("lru", followed=False, objective="traffic")
    e.setup(pool.view)
    e.prefetched(7, 1000, 0)
    assert e.gain == -1000 and e.hits == 0 and e.requests == 0
    e.request(7, 1000, False, 0, True)  # the prefetched object, hit in the shadow: no bytes
    assert e.gain == -1000 and e.hits == 1
    m = heuristic_expert("lru", followed=False, objective="misses")
    m.setup(pool.view)
    m.prefetched(7, 1000, 0)
    assert m.gain == 0
