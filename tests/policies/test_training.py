"""The torch scorer, its export, imitation and the SB3 policies that carry it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

th = pytest.importorskip("torch")  # the train extra

from cachegym.allocator.errors import ConfigError  # noqa: E402
from cachegym.allocator.pool import Pool  # noqa: E402
from cachegym.envs.evict import EvictEnv  # noqa: E402
from cachegym.envs.workloads.registry import generate  # noqa: E402
from cachegym.policies import features  # noqa: E402
from cachegym.policies.features import FEATURE_NAMES  # noqa: E402
from cachegym.policies.learned import CandidateScorer, LearnedPolicy  # noqa: E402
from cachegym.policies.training.export import export_policy  # noqa: E402
from cachegym.policies.training.imitation import (  # noqa: E402
    Dataset,
    DecisionSample,
    ImitationConfig,
    agreement,
    bc_loss,
    fit,
    targets,
    teacher_distances,
    teacher_targets,
)
from cachegym.policies.training.nets import (  # noqa: E402
    NEG,
    CandidateScorerNet,
    MaskableScorerActorCriticPolicy,
    ScorerActorCriticPolicy,
    ScorerDQNPolicy,
    export_arrays,
)

F, G = features.F, features.G


def make_net(seed: int = 0, hidden=(16, 8)) -> CandidateScorerNet:
    th.manual_seed(seed)
    net = CandidateScorerNet(F, G, hidden)
    rng = np.random.default_rng(seed)
    net.set_normalization(rng.random((50, 8, F)), np.ones((50, 8), bool), rng.random((50, G)))
    return net


def test_scores_are_permutation_equivariant_and_independent_of_K():
    net = make_net()
    g = th.Generator().manual_seed(1)
    cand, glob = th.rand(3, 32, F, generator=g), th.rand(3, G, generator=g)
    mask = th.ones(3, 32)
    s = net(cand, glob, mask)
    perm = th.randperm(32, generator=g)
    assert th.allclose(net(cand[:, perm], glob, mask), s[:, perm], atol=1e-5)
    assert th.allclose(net(cand[:, :7], glob, mask[:, :7]), s[:, :7], atol=1e-5)
    mask[0, 3] = 0
    assert net(cand, glob, mask)[0, 3] == NEG


def test_export_matches_the_torch_network():
    net = make_net(2, (32, 16, 8))
    sc = CandidateScorer(export_arrays(net))
    rng = np.random.default_rng(3)
    for K in (1, 8, 32):
        cand = rng.random((K, F), dtype=np.float32)
        glob = rng.random(G, dtype=np.float32)
        mask = rng.random(K) < 0.8
        mask[0] = True
        with th.no_grad():
            ref = net(th.as_tensor(cand)[None], th.as_tensor(glob)[None], th.as_tensor(mask)[None].float())[0].numpy()
        got = sc.scores(cand, glob, mask)
        np.testing.assert_allclose(got[mask], ref[mask], rtol=1e-4, atol=1e-4)
        assert sc.choose(cand, glob, mask) == int(ref.argmax())


def test_exported_policy_takes_the_networks_decisions_in_the_pool(tmp_path):
    """Drive the env with the torch net's argmax and replay the same trace with the exported
    file in a plain Pool: every decision, hence every statistic, is the same."""
    trace = generate("dl_training", seed=4, n_layers=4, hidden=64, batch_tokens=128, steps=3)
    net = make_net(5)
    path = export_policy(net, tmp_path / "p.npz", K=16, candidate_rule="lru")
    env = EvictEnv([trace], K=16, candidates="lru", window=None, capacity=0.3, capacity_of="peak_live")
    obs, info = env.reset(seed=0)
    pol = LearnedPolicy.load(path, guard="none")  # the network's own decisions (an untrained
    done, n = False, 0                               # network: a guard would follow a heuristic)
    while not done:
        cand = th.as_tensor(obs["candidates"].reshape(16, F))[None]
        with th.no_grad():
            a = int(net(cand, th.as_tensor(obs["globals"])[None],
                        th.as_tensor(obs["mask"]).float()[None]).argmax())
        obs, _, done, _, info = env.step(a)
        n += 1
    cap = int(0.3 * trace.peak_live_bytes())
    st = Pool(cap, pol, placement="bytes", oversize="bypass").replay(trace)
    assert n > 20 and st.evictions == n
    assert st.misses == info["stats"]["misses"] and st.hits == info["stats"]["hits"]
    assert st.fallbacks == 0


def test_targets_treat_never_used_again_as_ties():
    mask = np.array([[True, True, True, False]])
    dist = np.array([[5.0, np.inf, np.inf, -1.0]])
    best, key = targets(mask, dist)
    assert best.tolist() == [[False, True, True, False]]
    assert key[0, 1] > key[0, 0]
    scores = th.tensor([[0.0, 5.0, 5.0, NEG]])
    low = bc_loss(scores, th.as_tensor(best), th.as_tensor(mask), th.as_tensor(key))
    high = bc_loss(th.tensor([[5.0, 0.0, 0.0, NEG]]), th.as_tensor(best), th.as_tensor(mask), th.as_tensor(key))
    assert float(low) < float(high)


def test_behaviour_cloning_learns_an_obvious_rule():
    """Oracle: evict the candidate with the largest first feature (a stand-in for 'farthest
    next use'); a few epochs of BC must reproduce it on fresh observations."""
    rng = np.random.default_rng(6)

    def batch(n):
        d = Dataset()
        for _ in range(n):
            cand = rng.random((8, F), dtype=np.float32)
            mask = np.ones(8, bool)
            mask[rng.integers(4, 8):] = False
            d.add(DecisionSample(cand, mask, rng.random(G, dtype=np.float32), cand[:, 0].astype(np.float64) * 100))
        return d

    net = CandidateScorerNet(F, G, (16, 8))
    th.manual_seed(0)
    hist = fit(net, batch(1500), epochs=8, batch_size=64, lr=1e-2, teacher="belady")
    assert hist[-1] < hist[0]
    assert agreement(net, batch(300), "belady") > 0.9
    # the agreement's forward pass runs a batch of decisions at a time (all at once it held
    # every hidden layer's activations: 3.4 GB for a quick training run's 100,000 decisions)
    from cachegym.policies.training import imitation

    cand, mask, glob, _ = batch(50).arrays()
    whole = imitation._batched(net, cand, glob, mask, batch=10**6)
    assert whole.shape == (50, 8)
    np.testing.assert_allclose(imitation._batched(net, cand, glob, mask, batch=7), whole, rtol=1e-6)


def test_belady_size_teacher_ranks_by_next_use_times_size():
    """Belady-Size: the candidate whose next use times size is farthest (never used again:
    the largest of those); distances keep the scale of ticks (sizes over the decision's mean);
    Belady's own distances are the next-use ones, unchanged."""
    size_col = FEATURE_NAMES.index("size_rel")
    cand = np.zeros((1, 4, F), np.float32)
    cand[0, :, size_col] = [0.1, 0.4, 0.2, 0.3]
    mask = np.array([[True, True, True, False]])
    dist = np.array([[100.0, 40.0, 150.0, 1e6]])  # times size: 10, 16, 30 (the fourth: padding)
    d = teacher_distances(dist, cand, mask)
    assert d[0, 3] == -1 and int(np.argmax(d)) == 2
    assert np.allclose(d[0, :3], dist[0, :3] * np.array([0.1, 0.4, 0.2]) / (0.7 / 3))
    assert teacher_distances(dist, cand, mask, "belady") is dist
    never = np.array([[np.inf, np.inf, 5.0, 1.0]])  # two never used again: the larger goes
    assert int(np.argmax(teacher_distances(never, cand, mask))) == 1
    best, _ = targets(mask, teacher_distances(dist, cand, mask))
    assert best.tolist() == [[False, False, True, False]]


def test_traffic_teacher_evicts_the_farthest_next_use_over_one_plus_dirty():
    """The traffic teacher: an eviction costs a refetch and, for a dirty object, a write-back;
    sizes cancel, so the farthest next use over ``1 + dirty`` goes (a clean object used at 100
    before a dirty one used at 150), whatever the sizes."""
    size_col, dirty_col = FEATURE_NAMES.index("size_rel"), FEATURE_NAMES.index("dirty")
    cand = np.zeros((1, 3, F), np.float32)
    cand[0, :, size_col] = [0.1, 0.9, 0.5]
    cand[0, :, dirty_col] = [0, 1, 0]
    mask = np.array([[True, True, True]])
    dist = np.array([[100.0, 150.0, 60.0]])
    d = teacher_distances(dist, cand, mask, "traffic")
    assert np.allclose(d, [[100.0, 75.0, 60.0]]) and int(np.argmax(d)) == 0
    never = np.array([[np.inf, np.inf, 1.0]])  # never used again: the clean one first
    assert int(np.argmax(teacher_distances(never, cand, mask, "traffic"))) == 0


def test_traffic_teacher_counts_the_write_back_of_an_object_used_no_more_before_its_free():
    """A dirty object used no more (next use ``inf``) but freed later costs a write-back for
    nothing if evicted and frees its size until its free: its distance is the free's, ranked
    with the others' next use over ``1 + dirty``; a clean one costs nothing (never: first). Without
    the free distances (``None``) every object used no more ranks as never, as before. Under
    ``foo`` such a dirty object is not among the plan's drops."""
    dirty_col = FEATURE_NAMES.index("dirty")
    cand = np.zeros((1, 4, F), np.float32)
    cand[0, :, dirty_col] = [1, 1, 0, 1]
    mask = np.ones((1, 4), bool)
    dist = np.array([[np.inf, 100.0, 40.0, np.inf]])
    free = np.array([[30.0, np.inf, np.inf, 5.0]])
    d = teacher_distances(dist, cand, mask, "traffic", free)
    assert np.allclose(d, [[30.0, 50.0, 40.0, 5.0]]) and int(np.argmax(d)) == 1
    cand[0, 2, dirty_col] = 0
    dist2 = np.array([[np.inf, 100.0, np.inf, np.inf]])  # a clean object used no more: first
    assert int(np.argmax(teacher_distances(dist2, cand, mask, "traffic", free))) == 2
    old = teacher_distances(dist, cand, mask, "traffic")  # no free distances: never, as before
    assert old[0, 0] == old[0, 3] > 1e9
    drop = np.array([[True, False, False, True]])  # the plan drops the two used no more...
    best, _ = teacher_targets(dist, cand, mask, "foo", drop, free)
    assert best[0].tolist() == [False, True, False, False]  # ...but their write-backs count
    best, _ = teacher_targets(dist, cand, mask, "foo", drop)
    assert best[0].tolist() == [True, False, False, True]


def test_collector_gives_the_traffic_teacher_each_candidates_free():
    """Collected with the traffic teacher on a trace with frees, each eviction carries the
    ticks to each candidate's free, as a scan of the window finds them from its last access."""
    from cachegym.allocator.trace import INF, Trace
    from cachegym.policies.training.train import Collector

    base = generate("dl_training", seed=1, n_layers=3, hidden=64, batch_tokens=64, steps=2)
    assert (base.op == 2).any()

    class Factory:
        capacities = [0.3]

        def __call__(self, i):
            env = EvictEnv([base], K=8, window=None, capacity=0.3, capacity_of="peak_live")
            env.reset(seed=i)
            return env

    col = Collector(Factory(), teacher="traffic")
    env = col.envs[0]
    samples = col(None, 1.0, 200, np.random.default_rng(0))
    assert all(s.free is not None for s in samples)
    finite = sum(int(np.isfinite(s.free[s.mask]).sum()) for s in samples)  # type: ignore[index]
    assert finite > 0
    # the last decision's against a scan of the window
    w: Trace = env.window.trace
    rows, tick = env.candidate_rows(), env.pool.view.tick
    from cachegym.envs.common import next_use_distance

    got = next_use_distance(w.free_row(), rows, tick)
    for r, g in zip(rows, got):
        if r < 0:  # padding (candidate_rows' -1): no object, never freed
            assert g == np.inf
            continue
        obj = w.object_ids()
        want = next((j for j in range(r + 1, len(w)) if obj[j] == obj[r] and w.op[j] == 2), INF)
        assert g == (np.inf if want == INF else want - tick)


def test_foo_plan_for_stall_keeps_what_saves_copy_time():
    """A pool of 64 KiB; a loop over X (64 KiB, read twice per loop) and fifteen objects of 4
    KiB (60 KiB in all): it can keep X or the fifteen, not both. Keeping X saves 128 KiB of
    copies per loop against 60 KiB: the traffic plan keeps X. Under h100_pcie5 each copy also
    takes 8 us of latency, so the fifteen cost 15 latencies per loop against X's two: the stall
    plan keeps them (the teacher of a ``reward: stall`` env). Without a preset, ``stall`` is
    refused by name."""
    from cachegym.allocator.errors import ConfigError
    from cachegym.allocator.trace import Trace
    from cachegym.policies.bounds import foo_kept_rows
    from cachegym.policies.training.train import FooPlans

    KiB = 1024
    keys = [0, *range(1, 8), 0, *range(8, 16)]
    sizes = {0: 64 * KiB, **{k: 4 * KiB for k in range(1, 16)}}
    rows = keys * 4
    trace = Trace.from_arrays(rows, [sizes[k] for k in rows])
    cap = 64 * KiB
    traffic = foo_kept_rows(trace, cap, "traffic")
    stall = foo_kept_rows(trace, cap, "stall", "h100_pcie5")
    again = [k in rows[i + 1:] for i, k in enumerate(rows)]  # rows whose object comes back
    x_rows = np.array([i for i, k in enumerate(rows) if k == 0 and again[i]])
    small_rows = np.array([i for i, k in enumerate(rows) if k != 0 and again[i]])
    assert traffic[x_rows].all() and not traffic[small_rows].any()
    assert stall[small_rows].all() and not stall[x_rows].any()
    with pytest.raises(ConfigError, match="stall.*preset"):
        foo_kept_rows(trace, cap, "stall")
    # the collector's plans follow the env's reward: a stall env under a preset plans for stall
    env = EvictEnv([trace], K=4, candidates="lru", window=None, capacity=cap,
                   capacity_of="working_set", reward="stall", cost="h100_pcie5")
    env.reset(seed=0)
    plans = FooPlans()
    plans.drop(env)
    assert [k[-1] for k in plans._plans] == ["stall"]


@pytest.mark.parametrize("seed,frac", [(1, 0.25), (2, 0.5)])
def test_foo_plan_for_stall_is_between_its_lp_and_the_traffic_plan(seed, frac):
    """On generated training traces (writes, write-backs, frees) the stall plan's copy time is at
    least its LP's (a lower bound) and below what the traffic plan's schedule waits (measured:
    0.753 against 0.838 ms, LP 0.709, for seed 1 at 25%)."""
    from cachegym.allocator.cost import get_preset
    from cachegym.policies import bounds as B

    t = generate("dl_training", seed=seed, n_layers=4, hidden=64, batch_tokens=128, steps=3)
    cap = int(frac * t.peak_live_bytes())
    preset = get_preset("h100_pcie5")
    iv = B._intervals(t, cap)
    wait = B._schedule_cost_fn(iv, "stall", preset)  # a schedule's copy time
    lp, x = B._foo_lp(iv, cap, "stall", preset)
    stall = B._foo_schedule(iv, x, cap, "stall", preset)
    _, xt = B._foo_lp(iv, cap, "traffic")
    traffic = B._foo_schedule(iv, xt, cap, "traffic")
    assert lp <= wait(stall) + 1e-6 < wait(traffic)
    assert (B.foo_kept_rows(t, cap, "stall", "h100_pcie5") == np.isin(np.arange(len(t)), iv.a[stall])).all()


def test_foo_plan_takes_one_solve_and_the_plan_the_bound_would_take(monkeypatch):
    """The teacher's plan needs HiGHS's solve at its default tolerances alone: the dual bound
    and the solve at tight tolerances that makes it sound (needed on this all-reads window of
    the GPT trace) are skipped, and the plan is the one the bound's solve rounds."""
    import scipy.optimize

    from cachegym.allocator.trace import Trace
    from cachegym.envs.workloads import read_trace
    from cachegym.policies import bounds as B

    gpt = read_trace(str(Path(__file__).resolve().parents[2] / "data" / "traces" / "gpt.npz"))
    t = Trace.from_arrays(gpt.key[:512], gpt.size[:512])  # reads only
    cap = int(0.1 * t.peak_live_bytes())
    solves: list[int] = []
    linprog = scipy.optimize.linprog

    def counted(*a, **k):
        solves.append(1)
        return linprog(*a, **k)

    monkeypatch.setattr(scipy.optimize, "linprog", counted)
    iv = B._intervals(t, cap)
    _, x = B._foo_lp(iv, cap, "traffic")
    assert len(solves) == 2  # the bound's duals fell short of the first solve's optimum here
    solves.clear()
    plan = B.foo_kept_rows(t, cap, "traffic")
    assert len(solves) == 1
    assert (plan == np.isin(np.arange(len(t)), iv.a[B._foo_schedule(iv, x, cap, "traffic")])).all()


def test_foo_teacher_evicts_what_the_plan_drops_on_a_hand_checked_trace():
    """Pool of 3 bytes; rows 0 A(2) write, 1 B(1) read, 2 C(1) write, 3 B read, 4 C read, 5 A
    read. At row 2 (C's miss) the pool holds A and B and needs a byte: not keeping B until row
    3 costs its refetch (1 byte), half of A's interval (rows 0-5) half its write-back and refetch
    (2), C's (rows 2-4) its write-back and refetch (2). So FOO keeps A's and C's intervals and
    drops B's: the foo teacher evicts B, where the traffic teacher evicts A (next use 3 rows
    away over 1 + dirty: 1.5, against B's 1). At row 3 (B's miss, which the plan would not
    admit) the plan keeps both candidates' intervals: the traffic teacher's choice."""
    from cachegym.allocator.trace import Op, Trace
    from cachegym.policies.bounds import foo_kept_rows
    from cachegym.policies.training.train import FooPlans

    R, W = int(Op.READ), int(Op.WRITE)
    trace = Trace.from_arrays([1, 2, 3, 2, 3, 1], [2, 1, 1, 1, 1, 2], [W, R, W, R, R, R])
    # kept: A 0-5, C 2-4, and the dirty ones to the end (dropping them would write them back);
    # not B's (1-3, and 3-end, which costs nothing)
    assert foo_kept_rows(trace, 3).tolist() == [True, False, True, False, True, True]
    env = EvictEnv([trace], K=4, candidates="lru", window=None, capacity=3)
    obs, info = env.reset(seed=0)
    plans = FooPlans()
    cand = obs["candidates"].reshape(4, F)
    mask = obs["mask"].astype(bool)
    assert info["tick"] == 2 and info["keys"][:2].tolist() == [1, 2]
    assert mask.tolist() == [True, True, False, False]
    drop = plans.drop(env)
    assert drop is not None and drop.tolist() == [False, True, False, False]
    dist = np.asarray(info["next_use"], np.float64)
    best, key = teacher_targets(dist[None], cand[None], mask[None], "foo", drop[None])
    assert best[0].tolist() == [False, True, False, False] and key[0, 1] > key[0, 0]
    traffic, _ = teacher_targets(dist[None], cand[None], mask[None], "traffic")
    assert traffic[0].tolist() == [True, False, False, False]
    obs, _, _, _, info = env.step(1)  # evict B: it misses at row 3, between A and C
    assert info["tick"] == 3 and info["keys"][:2].tolist() == [1, 3]
    drop = plans.drop(env)
    assert drop is not None and not drop.any()
    cand, mask = obs["candidates"].reshape(4, F)[None], obs["mask"].astype(bool)[None]
    dist = np.asarray(info["next_use"], np.float64)[None]
    assert np.array_equal(teacher_targets(dist, cand, mask, "foo", drop[None])[0],
                          teacher_targets(dist, cand, mask, "traffic")[0])
    assert plans.solved == 1 and plans.skipped == 0  # one window, solved once
    # the teacher ranks the plan's drops above its keeps, the farthest (by traffic) first
    m3 = np.ones((1, 3), bool)
    best, key = teacher_targets(np.array([[5.0, 9.0, 7.0]]), np.zeros((1, 3, F), np.float32), m3,
                                "foo", np.array([[True, False, True]]))
    assert best[0].tolist() == [False, False, True] and key[0, 0] > key[0, 1]
    # a window longer than the limit has no plan
    env.reset(seed=0)
    assert FooPlans(max_rows=5).drop(env) is None


def test_a_window_the_bound_cannot_model_takes_the_traffic_teachers_labels(caplog) -> None:
    """An object that changes size without a free (libCacheSim's CDN traces) is outside the
    bounds' model: the foo teacher (imitation's default) ended the training in that
    ConfigError; the window has no plan, as one too long, warned once."""
    from cachegym.allocator.trace import Trace
    from cachegym.policies.training.train import FooPlans

    trace = Trace.from_arrays([1, 2, 3, 1, 4, 2, 3, 1], [2, 1, 1, 3, 1, 1, 1, 3])
    env = EvictEnv([trace], K=4, candidates="lru", window=None, capacity=4)
    env.reset(seed=0)
    plans = FooPlans()
    with caplog.at_level("WARNING"):
        assert plans.drop(env) is None and plans.drop(env) is None
    assert plans.unplannable == 1 and plans.skipped == 1 and plans.solved == 0
    assert caplog.text.count("the FOO teacher has no plan") == 1 and "changes size" in caplog.text


def test_collector_with_the_foo_teacher_marks_the_plans_drops_and_labels_among_them():
    """Collected with teacher foo, each eviction carries the candidates FOO's plan of its window
    drops (valid candidates only), most decisions have some, and where one does its label is one
    of them; each window is solved once at most."""
    from cachegym.policies.training.train import Collector

    trace = generate("zipf", seed=3, n_requests=3000, n_objects=300, size=4096, size_sigma=1.0)

    class Factory:
        capacities = [0.3]

        def __call__(self, i):
            env = EvictEnv([trace], K=8, window=1000, capacity=0.3, capacity_of="peak_live")
            env.reset(seed=i)
            return env

    col = Collector(Factory(), teacher="foo")
    samples = col(None, 1.0, 600, np.random.default_rng(0))
    assert col.plans is not None and 1 <= col.plans.solved <= col._n_resets
    assert all(s.drop is not None and not (s.drop & ~s.mask).any() for s in samples)
    assert sum(bool(s.drop.any()) for s in samples) > len(samples) // 2  # type: ignore[union-attr]
    d = Dataset()
    for s in samples:
        d.add(s)
    cand, mask, _, dist = d.arrays()
    best, _ = teacher_targets(dist, cand, mask, "foo", d.drops())
    planned = d.drops().any(axis=1)
    assert (best & d.drops()).any(axis=1)[planned].all()


def test_behaviour_cloning_of_belady_size_learns_to_evict_the_largest():
    """With every candidate's next use equally far, Belady-Size evicts the largest: BC of that
    teacher must learn it from the size feature (BC of Belady has no reason to)."""
    rng = np.random.default_rng(7)
    size_col = FEATURE_NAMES.index("size_rel")

    def batch(n):
        d = Dataset()
        for _ in range(n):
            cand = rng.random((8, F), dtype=np.float32)
            d.add(DecisionSample(cand, np.ones(8, bool), rng.random(G, dtype=np.float32),
                                 np.full(8, 500.0)))
        return d

    net = CandidateScorerNet(F, G, (16, 8))
    th.manual_seed(0)
    fit(net, batch(1500), epochs=8, batch_size=64, lr=1e-2)
    test = batch(300)
    assert agreement(net, test) > 0.9
    cand, _, glob, _ = test.arrays()
    with th.no_grad():
        s = net(th.as_tensor(cand), th.as_tensor(glob), th.ones(300, 8)).numpy()
    assert (s.argmax(axis=1) == cand[:, :, size_col].argmax(axis=1)).mean() > 0.9


def test_a_wrong_teacher_is_a_config_error():
    with pytest.raises(ConfigError, match="teacher='oracle' .one of belady_size, belady"):
        ImitationConfig(teacher="oracle")


def test_dagger_weight_averaging_is_the_mean_of_the_rounds_ends():
    """``average_from``: the network that comes out is the mean of the weights at the end of
    the averaged rounds (recorded here by on_round), not the last round's; a round outside
    the schedule is a config error."""
    from cachegym.allocator.errors import ConfigError
    from cachegym.policies.training.imitation import ImitationConfig, dagger

    rng = np.random.default_rng(3)

    def collect(learner, beta, n, r):
        out = []
        for _ in range(n):
            cand = rng.random((8, F), dtype=np.float32)
            out.append(DecisionSample(cand, np.ones(8, bool), rng.random(G, dtype=np.float32),
                                      cand[:, 0].astype(np.float64) * 100))
        return out

    cfg = ImitationConfig(rounds=3, steps_per_round=200, epochs=2, batch_size=64, average_from=1)
    net = CandidateScorerNet(F, G, (16, 8))
    ends = []
    dagger(net, collect, cfg, on_round=lambda r, s: ends.append([p.detach().clone() for p in net.parameters()]))
    for p, *at in zip(net.parameters(), *ends):
        assert not th.equal(p, at[-1])  # not the last round's weights
        th.testing.assert_close(p.detach(), th.stack(at[1:]).mean(0))
    with pytest.raises(ConfigError, match="average_from"):
        dagger(net, collect, ImitationConfig(rounds=3, average_from=3))


@pytest.mark.parametrize("policy_cls", [ScorerActorCriticPolicy, MaskableScorerActorCriticPolicy])
def test_actor_critic_logits_are_the_scorers_scores(policy_cls):
    env = EvictEnv(None, K=8, candidates="lru", window=2000, capacity=0.2, capacity_of="working_set")
    pol = policy_cls(env.observation_space, env.action_space, lambda _: 1e-3, hidden=[16, 8])
    obs, _ = env.reset(seed=0)
    t = {k: th.as_tensor(v)[None] for k, v in obs.items()}
    dist = pol.get_distribution(t)
    logits = dist.distribution.logits
    cand = t["candidates"].reshape(1, 8, F).float()
    scores = pol.scorer(cand, t["globals"].float(), t["mask"].float())
    valid = t["mask"][0].bool()
    # Categorical normalises logits: equal up to a constant on the valid candidates
    diff = (logits[0] - scores[0])[valid]
    assert th.allclose(diff, diff[0].expand_as(diff), atol=1e-4)
    _, value, _ = pol(t)
    assert value.shape == (1, 1)


def test_dqn_q_network_is_the_scorer():
    env = EvictEnv(None, K=8, candidates="lru", window=2000, capacity=0.2, capacity_of="working_set")
    pol = ScorerDQNPolicy(env.observation_space, env.action_space, lambda _: 1e-3, hidden=[16, 8])
    obs, _ = env.reset(seed=0)
    t = {k: th.as_tensor(v)[None] for k, v in obs.items()}
    q = pol.q_net(t)
    cand = t["candidates"].reshape(1, 8, F).float()
    assert th.allclose(q, pol.scorer(cand, t["globals"].float(), t["mask"].float()))
    assert pol.q_net_target.scorer is not pol.scorer
    assert int(pol._predict(t)) == int(q.argmax())


@pytest.mark.parametrize("policy_cls", [ScorerActorCriticPolicy, MaskableScorerActorCriticPolicy])
def test_the_value_loss_trains_the_critic_and_not_the_scorer(policy_cls):
    """In a fine-tune (``critic_detached``, what SB3Agent builds from a trained network) the
    critic reads the scorer's hidden layer and its loss must not move the scorer (an untrained
    critic's regression on returns would rewrite the imitation weights it reads); from scratch
    (the default) the value loss shapes the shared layer, as SB3's actor-critic does."""
    env = EvictEnv(None, K=8, candidates="lru", window=2000, capacity=0.2, capacity_of="working_set")
    shared = policy_cls(env.observation_space, env.action_space, lambda _: 1e-3, hidden=[16, 8])
    obs, _ = env.reset(seed=0)
    t = {k: th.as_tensor(v)[None] for k, v in obs.items()}
    shared.predict_values(t).sum().backward()
    assert any(p.grad is not None and p.grad.any() for p in shared.scorer.parameters())
    pol = policy_cls(env.observation_space, env.action_space, lambda _: 1e-3, hidden=[16, 8],
                     critic_detached=True)
    assert pol._get_constructor_parameters()["critic_detached"] is True  # (saved with the model)
    obs, _ = env.reset(seed=0)
    t = {k: th.as_tensor(v)[None] for k, v in obs.items()}
    pol.predict_values(t).sum().backward()
    assert all(p.grad is None or not p.grad.any() for p in pol.scorer.parameters())
    assert pol.mlp_extractor.value_in.weight.grad.abs().sum() > 0
    assert pol.value_net.weight.grad.abs().sum() > 0
    pol.zero_grad()
    pol.get_distribution(t).distribution.logits[0, 0].backward()  # the policy loss does reach it
    assert any(p.grad is not None and p.grad.any() for p in pol.scorer.parameters())


@pytest.mark.parametrize("algo", ["maskable_ppo", "ppo", "dqn"])
def test_the_sb3_model_started_from_a_network_scores_as_its_exported_file(algo, tmp_path):
    """The fine-tune's hand-over: the SB3 model built from the imitation network (input
    normalisation included) takes the exported file's decisions, with its scores as logits."""
    from cachegym.policies.learned import read_policy_file
    from cachegym.policies.training.agents import SB3Agent, TrainContext

    def make_env(i: int) -> EvictEnv:
        return EvictEnv(None, K=8, candidates="sample", window=2000, capacity=0.2,
                        capacity_of="working_set")

    net = make_net(3)
    kw = {"learning_starts": 10} if algo == "dqn" else {"n_steps": 64, "batch_size": 64}
    agent = SB3Agent(algo, total_timesteps=64, kwargs=kw)
    model = agent.build(TrainContext(make_env=make_env, hidden=net.hidden, seed=0), from_network=True)
    if algo != "dqn":  # a fine-tune's critic does not train the scorer
        assert model.policy.mlp_extractor.critic_detached
    agent.start(model, TrainContext(make_env=make_env, hidden=net.hidden), init=net)
    model.policy.set_training_mode(False)
    path = export_policy(net, str(tmp_path / "policy.npz"), K=8, candidate_rule="sample")
    twin = CandidateScorer(read_policy_file(path)[1])
    env = make_env(0)
    obs, _ = env.reset(seed=1)
    for _ in range(200):
        mask = obs["mask"].astype(bool)
        s = twin.scores(obs["candidates"].reshape(8, F), obs["globals"], mask)[mask]
        o, _ = model.policy.obs_to_tensor({k: v[None] for k, v in obs.items()})
        with th.no_grad():
            if algo == "dqn":
                logits = model.policy.q_net(o)[0].numpy()
            else:
                extra = {"action_masks": mask[None]} if algo == "maskable_ppo" else {}
                logits = model.policy.get_distribution(o, **extra).distribution.logits[0].numpy()
        shift = logits[mask] - s  # PPO's Categorical normalises its logits: equal up to a constant
        np.testing.assert_allclose(shift, shift[0] if algo != "dqn" else 0.0, atol=1e-4)
        a = int(np.flatnonzero(mask)[np.argmax(s)])
        extra_np = {"action_masks": mask} if algo == "maskable_ppo" else {}
        assert int(model.predict(obs, deterministic=True, **extra_np)[0]) == a
        obs, _, term, _, _ = env.step(a)
        if term:
            obs, _ = env.reset(seed=2)
    model.get_env().close()


def test_the_foo_teacher_ranks_by_the_objective_its_plan_was_made_for() -> None:
    """Where FOO's plan drops nothing, the ``foo`` teacher falls back to a ranking: for traffic
    a dirty candidate's next use counts half (its eviction costs a write-back too); for misses a
    write-back costs no miss, and the farthest next use is the choice (as Belady's)."""
    from cachegym.policies.training.imitation import teacher_targets

    F = len(FEATURE_NAMES)
    cand = np.zeros((1, 2, F), np.float32)
    cand[0, 1, FEATURE_NAMES.index("dirty")] = 1.0  # candidate 1 dirty, used later than 0
    mask = np.ones((1, 2), bool)
    dist = np.array([[10.0, 15.0]])
    none = np.zeros((1, 2), bool)  # the plan drops neither
    traffic, _ = teacher_targets(dist, cand, mask, "foo", none)
    misses, _ = teacher_targets(dist, cand, mask, "foo", none, objective="misses")
    assert traffic[0].tolist() == [True, False] and misses[0].tolist() == [False, True]


def test_validation_selects_on_the_objective_trained_for() -> None:
    from cachegym.policies.training.validation import Validator

    v = Validator.__new__(Validator)
    figs = {"gap_closed_traffic": 0.6, "gap_closed_traffic_min": 0.1,
            "gap_closed_misses": 0.2, "gap_closed_misses_min": -0.1}
    v.objective = "traffic"
    assert v.score(figs) == pytest.approx(0.6)
    v.objective = "misses"
    assert v.score(figs) == pytest.approx(0.1)
