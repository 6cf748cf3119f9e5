"""cachegym.policies.features: bounded features at any scale, permutation consistency, padding, and a
tracker that agrees with the pool (LRU order, residency) through evictions, prefetches and frees."""

from __future__ import annotations

import math

import feature_oracle as oracle
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cachegym.allocator.errors import ConfigError, PolicyFileError
from cachegym.allocator.pool import Pool
from cachegym.allocator.trace import Op, Trace
from cachegym.policies import features as fm
from cachegym.policies import kernels
from cachegym.policies.features import (
    FEATURE_NAMES,
    GLOBAL_NAMES,
    FeatureTracker,
    Observed,
    check_spec,
    feature_spec,
    observe,
    select_candidates,
)
from cachegym.policies.lru import LRU
from tests.trace_makers import free_some

IDX = {n: i for i, n in enumerate(FEATURE_NAMES)}


def _trace(n: int, n_keys: int, seed: int, size_scale: int = 4096, frees: bool = False,
           writes: bool = True) -> Trace:
    rng = np.random.default_rng(seed)
    key = rng.zipf(1.3, n) % n_keys
    size_of = rng.integers(1, 8, n_keys) * size_scale
    op = np.where(rng.random(n) < 0.2, Op.WRITE, Op.READ) if writes else np.zeros(n, np.uint8)
    op = op.astype(np.uint8)
    if frees:  # free some objects after their access; a later access makes a new object
        free_some(key, op, rng, 0.05)
    return Trace.from_arrays(key, size_of[key], op, kind=rng.integers(0, 7, n_keys)[key])


def _replay(trace: Trace, capacity: int, policy, cost=None, prefetch_every: int = 0,
            check=None) -> Pool:
    pool = Pool(capacity, policy, placement="bytes", cost=cost)
    for i in range(len(trace)):
        k, o = int(trace.key[i]), int(trace.op[i])
        if o == Op.FREE:
            pool.free(k)
        else:
            pool.access(k, int(trace.size[i]), o == Op.WRITE, kind=int(trace.kind[i]),
                        compute_ns=1000)
            if prefetch_every and i % prefetch_every == 0:
                nxt = int(trace.key[(i + 7) % len(trace)])
                if nxt in pool and not pool.view.is_resident(nxt):
                    pool.prefetch(nxt)
        if check is not None:
            check(pool)
    return pool


def test_names_and_spec() -> None:
    assert len(FEATURE_NAMES) == len(set(FEATURE_NAMES)) == fm.F
    assert len(GLOBAL_NAMES) == len(set(GLOBAL_NAMES)) == fm.G
    spec = feature_spec()
    assert spec["features"] == list(FEATURE_NAMES) and spec["version"] == fm.FEATURE_VERSION
    check_spec(spec)
    bad = dict(spec, features=list(reversed(FEATURE_NAMES)))
    with pytest.raises(PolicyFileError, match="features"):
        check_spec(bad)


@settings(max_examples=15, deadline=None)
@given(size_scale=st.sampled_from([1, 512, 1 << 20, 1 << 30]),
       n_keys=st.integers(3, 400), seed=st.integers(0, 2**16),
       cost=st.sampled_from([None, "a100_pcie4", "gh200_c2c"]),
       cap_objects=st.integers(2, 60))
def test_features_bounded_whatever_the_scale(size_scale, n_keys, seed, cost, cap_objects) -> None:
    trace = _trace(600, n_keys, seed, size_scale)
    tracker = FeatureTracker(initial_slots=16)  # forces growth
    pool = _replay(trace, cap_objects * 8 * size_scale, tracker, cost=cost, prefetch_every=5)
    view = pool.view
    # the flat view the access kernel writes is of the rows after growth
    assert np.shares_memory(tracker._V, tracker._S)
    for rule in ("lru", "sample"):
        keys = select_candidates(tracker, view, 32, rule, np.random.default_rng(seed))
        cand, mask, glob = observe(tracker, view, keys, 32)
        assert cand.dtype == np.float32 and glob.dtype == np.float32 and mask.dtype == bool
        assert cand.shape == (32, fm.F) and glob.shape == (fm.G,)
        assert np.isfinite(cand).all() and np.isfinite(glob).all()
        assert cand.min() >= 0 and cand.max() <= 1 and glob.min() >= 0 and glob.max() <= 1
        assert mask.sum() == len(keys)
    # keys the tracker never saw (prefetch candidates can be such keys) are bounded as well
    cand, mask, _ = observe(tracker, view, [10**12, int(trace.key[0])], 4)
    assert cand[0, IDX["seen"]] == 0 and cand[0, IDX["recency"]] == 1.0
    assert cand.min() >= 0 and cand.max() <= 1 and mask.tolist() == [True, True, False, False]


def test_padding_mask_and_permutation() -> None:
    trace = _trace(3000, 200, 1)
    tracker = FeatureTracker()
    pool = _replay(trace, 40 * 8 * 4096, tracker, cost="h100_pcie5")
    view = pool.view
    keys = select_candidates(tracker, view, 10, "lru")
    assert len(keys) == 10
    cand, mask, glob = observe(tracker, view, keys, 16)
    assert mask.tolist() == [True] * 10 + [False] * 6
    assert not cand[10:].any()
    assert glob[GLOBAL_NAMES.index("n_valid")] == pytest.approx(10 / 16)
    perm = np.random.default_rng(0).permutation(10)
    cand_p, mask_p, glob_p = observe(tracker, view, keys[perm], 16)
    np.testing.assert_array_equal(cand_p[:10], cand[perm])
    np.testing.assert_array_equal(glob_p, glob)
    # observing is read-only: the same call twice gives the same answer
    np.testing.assert_array_equal(observe(tracker, view, keys, 16)[0], cand)
    with pytest.raises(ConfigError, match="at most K"):
        observe(tracker, view, keys, 4)
    empty = observe(tracker, view, [], 8)
    assert not empty[0].any() and not empty[1].any()


@pytest.mark.parametrize("frees", [False, True])
def test_tracker_agrees_with_the_pool(frees: bool) -> None:
    trace = _trace(4000, 300, 2, frees=frees)
    tracker = FeatureTracker(initial_slots=16)
    lru = LRU()
    seen_decisions = []

    def check(pool: Pool) -> None:
        assert set(tracker.lru_order()) == set(pool.resident_keys())
        assert sorted(tracker.resident()) == sorted(tracker.lru_order())
        assert tracker.lru_order() == lru.order()
        if len(seen_decisions) < 50 and pool.stats.evictions:
            view = pool.view
            want = [k for k in lru.order() if view.evictable(k)][:8]
            assert select_candidates(tracker, view, 8, "lru").tolist() == want
            seen_decisions.append(1)

    pool = _replay(trace, 30 * 8 * 4096, Observed(lru, tracker), prefetch_every=3, check=check)
    assert pool.stats.evictions > 100 and (pool.stats.frees > 50 or not frees)
    # the tracker is an LRU policy on its own: same misses as LRU
    alone = _replay(trace, 30 * 8 * 4096, FeatureTracker(), prefetch_every=3)
    assert alone.stats.misses == pool.stats.misses


def test_history_features_match_the_trace() -> None:
    """recency, frequency, gaps and decayed counters against a direct computation (over more
    ticks than the tracker's renormalisation period)."""
    rng = np.random.default_rng(3)
    n = 12_000
    key = rng.integers(0, 50, n)
    trace = Trace.from_arrays(key, 1024)
    tracker = FeatureTracker()
    pool = _replay(trace, 1024 * 1000, tracker)  # everything fits: no evictions
    view = pool.view
    t = view.tick
    keys = [int(k) for k in np.unique(key)[:20]]
    cand, _, _ = observe(tracker, view, keys, 32)

    def inv(x: float, scale: float) -> float:
        return math.expm1(x * scale)

    for i, k in enumerate(keys):
        rows = np.flatnonzero(key == k)
        assert inv(cand[i, IDX["recency"]], fm._LOG_T) == pytest.approx(t - rows[-1], rel=1e-4, abs=1e-3)
        assert inv(cand[i, IDX["frequency"]], fm._LOG_N) == pytest.approx(len(rows), rel=1e-4)
        gaps = np.diff(rows)[::-1][: fm.N_GAPS]
        for j, g in enumerate(gaps):
            assert inv(cand[i, IDX[f"gap_{j + 1}"]], fm._LOG_T) == pytest.approx(g, rel=1e-4, abs=1e-3)
        for j, h in enumerate(fm.HALF_LIVES):
            want = float(np.sum(2.0 ** (-(t - rows) / h)))
            got = inv(cand[i, IDX[f"decay_h{h}"]], fm._LOG_SCALE[4 + j])
            assert got == pytest.approx(want, rel=1e-3, abs=1e-4)
        assert cand[i, IDX["size_rel"]] == pytest.approx(1024 / (1024 * 1000))
        assert cand[i, IDX["kind_0"]] == 1 and cand[i, IDX["resident"]] == 1


def test_key_reused_after_a_free_on_host_starts_a_new_history() -> None:
    # object 1 is evicted (capacity 2 objects), freed while on the host, then accessed anew
    key = [1, 1, 1, 2, 3, 1, 4, 1]
    op = [0, 0, 0, 0, 0, 2, 0, 0]
    trace = Trace.from_arrays(key, 512, op)
    tracker = FeatureTracker()
    pool = _replay(trace, 1024, tracker)
    cand, _, _ = observe(tracker, pool.view, [1], 1)
    assert math.expm1(cand[0, IDX["frequency"]] * fm._LOG_N) == pytest.approx(1.0)
    assert cand[0, IDX["gap_1"]] == 1.0  # no reuse gap yet


def test_dirty_and_cost_features() -> None:
    trace = Trace.from_arrays([1, 2, 3], 1 << 20, [Op.WRITE, Op.READ, Op.READ])
    tracker = FeatureTracker()
    pool = _replay(trace, 8 << 20, tracker, cost="a100_pcie4")
    cand, _, _ = observe(tracker, pool.view, [1, 2], 2)
    assert cand[0, IDX["dirty"]] == 1 and cand[1, IDX["dirty"]] == 0
    assert cand[0, IDX["writeback_time"]] > 0 and cand[1, IDX["writeback_time"]] == 0
    assert cand[0, IDX["h2d_time"]] == cand[1, IDX["h2d_time"]] > 0
    assert cand[0, IDX["recency_rank"]] == 1.0 and cand[1, IDX["recency_rank"]] == 0.0


def test_sample_rule_is_uniform_distinct_and_seeded() -> None:
    trace = Trace.from_arrays(np.arange(400), 512)
    tracker = FeatureTracker()
    pool = _replay(trace, 512 * 400, tracker)
    view = pool.view
    counts = np.zeros(400)
    for s in range(300):
        keys = select_candidates(tracker, view, 32, "sample", np.random.default_rng(s))
        assert len(keys) == len(set(keys.tolist())) == 32
        counts[keys] += 1
    again = select_candidates(tracker, view, 32, "sample", np.random.default_rng(5))
    np.testing.assert_array_equal(
        again, select_candidates(tracker, view, 32, "sample", np.random.default_rng(5)))
    assert counts.min() > 0 and counts.max() < 3 * counts.mean()  # mean is 24
    small = select_candidates(tracker, view, 500, "sample", np.random.default_rng(0))
    assert sorted(small.tolist()) == list(range(400))
    with pytest.raises(ConfigError, match="rng"):
        select_candidates(tracker, view, 32, "sample")
    with pytest.raises(ConfigError, match="unknown candidate rule"):
        select_candidates(tracker, view, 32, "mru")


def _periodic(t_end: int, period: int, offset: int) -> Trace:
    """Key 0 every ``period`` accesses from ``offset`` on, key 1 once at the start and once at
    ``t_end - 1``, key 2 once at the start only; key 3 fills the other accesses."""
    key = np.full(t_end, 3)
    key[offset::period] = 0
    key[1] = key[2] = 1
    key[5] = 2
    key[-1] = 1
    return Trace.from_arrays(key, 1024)


def test_features_stop_growing_at_the_horizon() -> None:
    """HORIZON: tick distances are capped, and an older object's count is scaled to its last
    HORIZON ticks, so a stationary access pattern shows the same features after 10 horizons as
    after 3 (within float32 rounding); the cap holds for a long reuse gap and an old recency."""
    H = fm.HORIZON
    period = 97
    feats = []
    for t_end in (3 + period * (3 * H // period) + 40, 3 + period * (10 * H // period) + 40):
        tracker = FeatureTracker()
        pool = _replay(_periodic(t_end, period, 3), 1024 * 1000, tracker)
        cand, _, _ = observe(tracker, pool.view, [0, 1, 2], 32)
        feats.append(cand[:3].copy())
        t = pool.view.tick
        cap = math.log1p(H) / fm._LOG_T
        # key 0: lifetime capped, frequency the count of its last H ticks
        assert cand[0, IDX["lifetime"]] == pytest.approx(cap, rel=1e-6)
        n0 = len(range(3, t_end, period))
        want = n0 * (H + 1) / (t - 3 + 1)  # first seen at tick 3 (0-based row 3, tick 4)
        got = math.expm1(cand[0, IDX["frequency"]] * fm._LOG_N)
        assert got == pytest.approx(want, rel=2e-3)
        assert math.expm1(cand[0, IDX["gap_1"]] * fm._LOG_T) == pytest.approx(period, rel=1e-4)
        # key 1: its one reuse gap (t_end - 2) is longer than H: capped, like its age
        assert cand[1, IDX["gap_1"]] == pytest.approx(cap, rel=1e-6)
        assert cand[1, IDX["age"]] == pytest.approx(cap, rel=1e-6)
        # key 2: not accessed for more than H ticks: recency capped; its empty gaps stay at 1
        assert cand[2, IDX["recency"]] == pytest.approx(cap, rel=1e-6)
        assert (cand[2, [IDX[f"gap_{j + 1}"] for j in range(fm.N_GAPS)]] == 1.0).all()
    np.testing.assert_allclose(feats[0][0], feats[1][0], rtol=0, atol=2e-4)
    # key 2 (one access, long ago): the same capped distances; its rate of access keeps falling
    np.testing.assert_array_equal(feats[0][2][:3], feats[1][2][:3])
    assert feats[1][2][IDX["frequency"]] < feats[0][2][IDX["frequency"]]


def test_features_within_the_horizon_are_the_distances_themselves() -> None:
    """Before HORIZON ticks nothing is capped or scaled (the features of a training window)."""
    H = fm.HORIZON
    tracker = FeatureTracker()
    pool = _replay(_periodic(H - 10, 97, 3), 1024 * 1000, tracker)
    cand, _, _ = observe(tracker, pool.view, [0, 1, 2], 32)
    t = pool.view.tick
    assert math.expm1(cand[0, IDX["frequency"]] * fm._LOG_N) == pytest.approx(
        len(range(3, H - 10, 97)), rel=1e-5)
    assert math.expm1(cand[2, IDX["recency"]] * fm._LOG_T) == pytest.approx(t - 6, rel=1e-4)
    assert math.expm1(cand[1, IDX["gap_1"]] * fm._LOG_T) == pytest.approx(H - 10 - 3, rel=1e-4)


def _far_rows(rng: np.random.Generator, n: int, t: float, trial: int) -> np.ndarray:
    """Tracker rows of pools far past HORIZON (old and young objects, empty rings, huge counts
    and decayed counters)."""
    S = np.empty((n, fm._NCOL))
    for r in range(n):
        row = fm._EMPTY_ROW.copy()
        m = int(rng.integers(0, fm._RING + 3))  # accesses so far
        lo = max(0, int(t) - int(rng.choice([100, 10 * fm.HORIZON, int(t)])))
        ticks = np.sort(rng.integers(lo, int(t) + 1, m)).astype(np.float64)
        for i, tk in enumerate(ticks):
            row[fm._RING0 + i % fm._RING] = tk
        row[fm._INSERT] = ticks[0] if m else float(rng.integers(lo, int(t) + 1))
        row[fm._CREATE] = min(row[fm._INSERT], float(rng.integers(0, int(t) + 1)))
        row[fm._COUNT] = m if trial % 3 else float(rng.integers(0, 10**9))
        row[fm._E0:fm._RING0] = rng.random(3) * 10.0 ** rng.integers(0, 12, 3)
        row[fm._SIZE] = float(rng.integers(1, 2**40))
        row[fm._KIND] = float(rng.integers(0, fm.N_KINDS))
        S[r] = row
    return S


@pytest.mark.parametrize("timed", [False, True])
def test_kernel_equals_the_numpy_oracle_beyond_the_horizon(timed) -> None:
    """Rows of pools far past HORIZON (ticks up to 2**45): cachegym.policies.kernels.features and the
    NumPy oracle (tests/policies/feature_oracle.py) agree within float32 rounding, every value
    in [0, 1]; the globals are the packed values rounded to float32; rows past the candidates
    are left as they were."""
    rng = np.random.default_rng(11)
    for trial in range(24):
        t = float(rng.integers(fm.HORIZON, 2**45)) if trial % 2 else float(rng.integers(1, 3 * fm.HORIZON))
        S = _far_rows(rng, 60, t, trial)
        K = (1, 5, 32, 100)[trial % 4]
        n = int(rng.integers(1, K + 1))
        sl = rng.integers(0, len(S), n)
        codes = rng.integers(0, len(oracle.STATE_TABLE), n)
        decay = tuple(2.0 ** (-rng.random(3) * 50))
        inv_cap = 1.0 / float(rng.integers(2**20, 2**36))
        times = (float(rng.integers(1000, 10**6)), 1 / 25.0, 2000.0, 1 / 12.0, 1.0) if timed else fm._NO_TIMES
        glob = rng.random(fm.G)
        v = fm.packed_buffer(K)
        v[:fm._HEAD] = (n, t, *decay, inv_cap, *times, *glob)
        v[fm._HEAD:fm._HEAD + n] = sl
        v[fm._HEAD + K:fm._HEAD + K + n] = codes
        x = np.full((K + 1, fm.F), 7.0, np.float32)
        assert kernels.features(S, v, x) == n
        want = np.zeros((n, fm.F), np.float32)
        oracle.numeric_numpy(S[sl], codes, 1.0, t, decay, inv_cap, times, want)
        np.testing.assert_allclose(x[:n], want, rtol=0, atol=2e-7)
        assert (x[:n] <= 1.0).all() and (x[:n] >= 0.0).all()
        assert (x[n:K] == 7.0).all()
        np.testing.assert_array_equal(x[K, :fm.G], glob.astype(np.float32))


def test_kernel_refuses_bad_buffers() -> None:
    """A slot or state code out of range, a count above K, or buffers of another shape: a
    ConfigError that names what is wrong (never a read out of bounds)."""
    S = _far_rows(np.random.default_rng(0), 10, 100.0, 1)
    K = 4
    v = fm.packed_buffer(K)
    v[0] = 2
    v[1] = 100.0
    x = np.zeros((K + 1, fm.F), np.float32)
    assert kernels.features(S, v, x) == 2
    for i, val, what in ((fm._HEAD, 10.0, "slot"), (fm._HEAD + 1, -1.0, "slot"),
                         (fm._HEAD + K, 1e6, "state code"), (0, K + 1.0, "v\\[0\\]"), (0, 1.5, "v\\[0\\]")):
        bad = v.copy()
        bad[i] = val
        with pytest.raises(ConfigError, match=what):
            kernels.features(S, bad, x)
    for args in ((S[:, :5].copy(), v, x), (S, v[:-1].copy(), x), (S, v, x[:, :5].copy())):
        with pytest.raises(ConfigError, match="features: S must be"):
            kernels.features(*args)


@pytest.mark.parametrize("cost", [None, "h100_pcie5"])
def test_observe_equals_the_numpy_oracle(cost) -> None:
    """observe() (tracked candidates through the packed kernel call, keys without history
    through rows made for them) gives the oracle's features of the tracker's rows."""
    trace = _trace(3000, 300, 9, size_scale=1 << 16)
    tracker = FeatureTracker()
    pool = _replay(trace, 25 * 8 * (1 << 16), tracker, cost=cost, prefetch_every=4)
    view = pool.view
    rng = np.random.default_rng(0)
    key_sets = [select_candidates(tracker, view, K, rule, rng)
                for K in (1, 7, 32) for rule in ("lru", "sample")]
    key_sets.append(np.array([10**12, int(trace.key[5]), int(trace.key[9])]))  # unseen keys
    fast = [observe(tracker, view, keys, 32) for keys in key_sets]
    for keys, (c, m, g) in zip(key_sets, fast):
        keys = keys.tolist()
        n = len(keys)
        v = fm.packed_buffer(32)
        sls = fm._pack(tracker, view, keys, 32, v)
        rows = np.array([tracker._S[tracker._slot[k]] if k in tracker else fm._EMPTY_ROW
                         for k in keys]).reshape(n, fm._NCOL)
        for i, k in enumerate(keys):
            if k not in tracker:
                oi = view.info(k) if k in view else None
                rows[i, fm._INSERT] = rows[i, fm._CREATE] = oi.created_tick if oi is not None else view.tick
                rows[i, fm._SIZE] = oi.size if oi is not None else 0.0
                rows[i, fm._KIND] = oi.kind if oi is not None else 0.0
        codes = v[fm._HEAD + 32:fm._HEAD + 32 + n].astype(np.int64)
        head = v[:fm._HEAD]
        want = np.zeros((32, fm.F), np.float32)
        seen = [float(k in tracker) for k in keys]
        oracle.numeric_numpy(rows, codes, seen, head[1], tuple(head[2:5]), head[5],
                             tuple(head[6:11]), want)
        np.testing.assert_allclose(c[:n], want[:n], rtol=0, atol=2e-7)
        assert (sls is None) == all(k in tracker for k in keys)
        np.testing.assert_array_equal(g, head[fm._HEAD - fm.G:].astype(np.float32))
        assert m.sum() == n and m[:n].all()
    # the comparison covered dirty objects, unseen keys and (with a cost model) copy times
    assert any(c[:, IDX["dirty"]].any() for c, _, _ in fast)
    assert fast[-1][0][0, IDX["seen"]] == 0
    assert (fast[2][0][:, IDX["h2d_time"]] > 0).any() == (cost is not None)


@pytest.mark.parametrize("n_resident", [20, 60, 400])
def test_candidates_and_state_codes_read_the_pools_records(n_resident) -> None:
    """``select_keys`` (what the envs and the learned policy call) and the state codes ``_pack``
    writes read the pool's records in compiled kernels; checked against the records read here:
    the LRU rule gives the first K evictable keys of the tracker's LRU order, the sample rule
    K distinct evictable keys (all of them when fewer), and each key's code is its record's
    dirty + 2 prefetched + 4 in flight + 8 resident + 16 kind (0 for a key the pool does not
    know), with pinned objects and copies in flight (a cost model) among the residents."""
    trace = _trace(6000, 2000, 11)
    tracker = FeatureTracker()
    pool = _replay(trace, n_resident * 4 * 4096, tracker, cost="h100_pcie5", prefetch_every=3)
    view = pool.view
    for k in tracker.lru_order()[1:12:3]:
        pool.pin(k)
    evictable = [k for k in tracker.lru_order() if view.evictable(k)]
    assert len(evictable) < len(tracker.lru_order())  # pins (and perhaps copies in flight)
    assert fm.select_keys(tracker, view, 32, "lru", None) == evictable[:32]
    res = tracker.resident()
    assert [view.info(k) for k in res] == tracker.resident_records()  # (the same records)
    py = _interpreted_kernels()
    by_position = 0
    for seed in range(5):
        keys = fm.select_keys(tracker, view, 32, "sample", np.random.default_rng(seed))
        assert len(set(keys)) == len(keys) == min(32, len(evictable))
        assert set(keys) <= set(evictable)
        assert keys == select_candidates(tracker, view, 32, "sample",
                                         np.random.default_rng(seed)).tolist()
        # the fast path (one kernel call): the first 32 distinct draws' residents when all are
        # evictable, else nothing (the caller draws again), compiled as interpreted
        u = np.random.default_rng(seed).random(52)
        first = [res[i] for i in fm._first_distinct(np.random.default_rng(seed), len(res), 52, 32)]
        want = first if len(first) == 32 and all(view.evictable(k) for k in first) else []
        for mod in (kernels, py):
            assert mod.sample_keys(u, len(res), res, tracker.resident_records(), 32,
                                   np.empty(32, np.int64)) == want
        if len(res) > 4 * 32 and want:
            assert keys == want
        # a sample's features are packed by its residents' positions, as by their keys
        keys = fm.select_keys(tracker, view, 32, "sample", np.random.default_rng(seed))
        by_key, by_pos = fm.packed_buffer(32), fm.packed_buffer(32)
        assert kernels.pack_keys(tracker._slot, view.objects, keys, by_key, 32) == 0
        fm._pack(tracker, view, keys, 32, by_pos)
        np.testing.assert_array_equal(by_key[fm._HEAD:], by_pos[fm._HEAD:])
        if keys == want:  # (the sample of the fast path: its positions are the tracker's)
            assert tracker._sampled is keys
            by_position += 1
            for mod in (kernels, py):
                pos = fm.packed_buffer(32)
                assert mod.pack_sampled(res, tracker.resident_records(), tracker._res_slot,
                                        tracker._sample_idx, keys, pos, 32)
                np.testing.assert_array_equal(pos[fm._HEAD:], by_key[fm._HEAD:])
                moved = keys[1:] + keys[:1]  # not at the positions drawn: refused, nothing written
                untouched = fm.packed_buffer(32)
                assert not mod.pack_sampled(res, tracker.resident_records(), tracker._res_slot,
                                            tracker._sample_idx, moved, untouched, 32)
                assert not untouched.any()
    assert by_position > 0 or len(res) <= 4 * 32
    resident_flag = {0: 8, 2: 12}  # DEVICE: resident; H2D: resident and in flight
    probe = tracker.lru_order()[:24] + [10**12]  # pinned, in flight, dirty, and an unknown key
    v = fm.packed_buffer(32)
    fm._pack(tracker, view, probe, 32, v)
    got = v[fm._HEAD + 32:fm._HEAD + 32 + len(probe)].tolist()
    want = []
    for k in probe:
        o = view.objects.get(k)
        want.append(0 if o is None else
                    int(o.dirty) + 2 * int(o.prefetched) + resident_flag.get(o.state, 0) + 16 * o.kind)
    assert got == want
    assert any(c & 1 for c in want) and want[-1] == 0
    c, _, _ = observe(tracker, view, np.array(probe[:-1]), 32)
    for i, k in enumerate(probe[:-1]):
        o = view.objects[k]
        assert c[i, IDX["dirty"]] == float(o.dirty)
        assert c[i, IDX["prefetched"]] == float(o.prefetched)


@pytest.mark.parametrize("cost", [None, "a100_pcie4"])
def test_tracker_keeps_residents_records_and_slots(cost) -> None:
    """Through misses, writes, frees and prefetches, ``_res_rec``/``_res_slot`` hold each
    resident's current pool record and slot at its index in ``_res``."""
    trace = _trace(4000, 500, 5, frees=True)
    tracker = FeatureTracker()

    def check(pool: Pool) -> None:
        assert len(tracker._res_rec) == len(tracker._res_slot) == len(tracker._res)
        for k, rec, sl in zip(tracker._res, tracker._res_rec, tracker._res_slot):
            assert rec is pool.view.info(k) and sl == tracker._slot[k]

    pool = _replay(trace, 40 * 4 * 4096, tracker, cost=cost, prefetch_every=3, check=check)
    check(pool)
    assert pool.stats.evictions > 0


def _interpreted_kernels():
    """policies/kernels.py loaded from its source as a second module, interpreted (what
    CACHEGYM_PURE_PYTHON=1 runs), beside the compiled one."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("kernels_interpreted", kernels.__file__.rsplit(
        "kernels", 1)[0] + "kernels.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert not mod.COMPILED
    return mod


@pytest.mark.skipif(not kernels.COMPILED, reason="cachegym.policies.kernels is not compiled: nothing to compare")
@pytest.mark.parametrize("timed", [False, True])
def test_compiled_kernels_equal_the_interpreted_source(timed) -> None:
    """The compiled kernels and the same source interpreted give the same results bit for bit:
    features of any rows (float32 roundings, logs, rank, clipping), the tracker's per-access
    update, the sample rule's distinct draws and the forward pass's scores."""
    py = _interpreted_kernels()
    rng = np.random.default_rng(5)
    for trial in range(12):
        t = float(rng.integers(1, 2**45)) if trial % 2 else float(rng.integers(1, 5000))
        S = _far_rows(rng, 80, t, trial)
        K = (1, 5, 32, 100)[trial % 4]
        n = int(rng.integers(0, K + 1))
        v = fm.packed_buffer(K)
        times = (float(rng.integers(1000, 10**6)), 1 / 25.0, 2000.0, 1 / 12.0, 1.0) if timed else fm._NO_TIMES
        v[:fm._HEAD] = (n, t, *(2.0 ** (-rng.random(3) * 50)), 1.0 / float(rng.integers(2**20, 2**36)),
                        *times, *rng.random(fm.G))
        v[fm._HEAD:fm._HEAD + n] = rng.integers(0, len(S), n)
        v[fm._HEAD + K:fm._HEAD + K + n] = rng.integers(0, len(oracle.STATE_TABLE), n)
        xs = [np.full((K + 1, fm.F), 7.0, np.float32) for _ in range(2)]
        kernels.features(S, v.copy(), xs[0])
        py.features(S, v.copy(), xs[1])
        np.testing.assert_array_equal(xs[0], xs[1])
    V = [np.zeros(fm._NCOL * 4) for _ in range(2)]
    for mod, W in zip((kernels, py), V):
        for i in range(3000):
            mod.access(W, (i % 4) * fm._NCOL, i, i % 4097, 2.0)
    np.testing.assert_array_equal(V[0], V[1])
    for _ in range(50):
        u = rng.random(52)
        outs = [np.empty(32, np.int64) for _ in range(2)]
        assert kernels.first_distinct(u, 500, outs[0]) == py.first_distinct(u, 500, outs[1])
        np.testing.assert_array_equal(outs[0], outs[1])
    a = {"wc": rng.normal(size=(fm.F, 24)), "wg": rng.normal(size=(fm.G, 24)), "b0": rng.normal(size=24),
         "w1": rng.normal(size=(24, 16)), "b1": rng.normal(size=16), "wo": rng.normal(size=16)}
    sc = [m.Scorer(a["wc"], a["wg"], a["b0"], [(a["w1"], a["b1"])], a["wo"], 0.25) for m in (kernels, py)]
    x = rng.random((33, fm.F)).astype(np.float32) * (rng.random((33, fm.F)) > 0.4)
    sa, sb = np.empty(32, np.float32), np.empty(32, np.float32)
    assert sc[0].scores(x, 32, sa) == sc[1].scores(x, 32, sb)
    np.testing.assert_array_equal(sa, sb)


def test_tracker_update_and_draws_are_the_kernels() -> None:
    """The tracker's rows after a replay are what the access kernel writes (the decayed
    counters renormalised on the way), and the sample rule's draws the first distinct values
    of its uniform draws, in draw order."""
    trace = _trace(8000, 600, 5)  # long enough to renormalise the decayed counters
    tracker = FeatureTracker()
    pool = _replay(trace, 40 * 4 * 4096, tracker)
    assert tracker._epoch > 0 and len(pool.view.candidates()) > 0
    S = tracker._S[: tracker._next]
    assert (S[:, fm._COUNT] >= 1).any() and (S[:, fm._E0:fm._RING0] > 0).any()
    for _ in range(50):
        seed = int(np.random.default_rng(_).integers(2**31))
        got = fm._first_distinct(np.random.default_rng(seed), 500, 52, 32)
        want = list(dict.fromkeys(fm._uniform_ints(np.random.default_rng(seed), 500, 52)))[:32]
        assert got == want


@pytest.mark.parametrize("name", ["s3fifo", "slru", "arc"])
def test_observed_policy_decides_as_alone(name: str) -> None:
    """Observed (the prefetch environment's non-LRU eviction) forwards the policy's optional
    methods -- admission, its own evictions, frees of evicted objects -- so the pool decides
    exactly as with the policy alone (S3-FIFO refuses large objects; SLRU evicts during hits)."""
    from cachegym.envs.workloads import generate
    from cachegym.policies.registry import make_eviction

    z = generate("zipf", seed=4, n_requests=6000, n_objects=600, size=4096, size_sigma=1.0)
    cap = int(0.1 * z.working_set_bytes())
    alone = Pool(cap, make_eviction(name), placement="bytes", oversize="bypass")
    seen = Pool(cap, Observed(make_eviction(name)), placement="bytes", oversize="bypass")
    for i, (k, s) in enumerate(zip(z.key.tolist(), z.size.tolist())):
        assert alone.access(k, s) == seen.access(k, s), f"request {i}"
        if i % 50 == 49:  # free an object now and then (resident or evicted)
            alone.free(k)
            seen.free(k)
    assert alone.snapshot() == seen.snapshot()
    assert alone.snapshot().streamed > 0 or name != "s3fifo"  # the admission was exercised


def test_last_access_is_the_newest_tick_of_each_ring() -> None:
    """``FeatureTracker.last_access`` (a compiled kernel: what the envs' oracle and LRU fallback
    read) gives the newest tick in each key's ring of access ticks, -1 for a key without history
    or only prefetched, for a list, an array or a tuple of keys."""
    trace = _trace(3000, 300, 4, frees=True)
    tracker = FeatureTracker()
    _replay(trace, 25 * 4 * 4096, tracker, prefetch_every=5)
    keys = sorted(tracker._slot)[:50] + [10**12, -3]
    ring = np.array([tracker._S[tracker._slot[k], fm._RING0:fm._SIZE] if k in tracker
                     else np.full(fm._RING, -1.0) for k in keys])
    want = np.where(ring.max(axis=1) >= 0, ring.max(axis=1), -1).astype(np.int64)
    last_seen = {}
    for i, k in enumerate(trace.key.tolist()):
        if trace.op[i] != Op.FREE:
            last_seen[k] = i
    assert want[0] >= 0 and want[-1] == -1 and want[-2] == -1
    for k, w in zip(keys, want.tolist()):
        if w >= 0:  # the pool's tick of row r is r: the newest tick is the key's last row
            assert w == last_seen[k]
    for form in (keys, np.array(keys), tuple(keys)):
        got = tracker.last_access(form)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)


def test_the_teacher_in_one_call_is_the_three_it_composes() -> None:
    """``FeatureTracker.teacher`` (an eviction env's info in one kernel call) equals
    ``last_access``, then ``envs.common.next_use_rows`` and ``decision_info``, for Belady's
    choice and the soonest use, with keys never accessed (no row) and K above the candidates."""
    from cachegym.envs.common import decision_info, next_use_rows

    trace = _trace(3000, 400, 3, frees=True)
    tracker = FeatureTracker()
    pool = _replay(trace.window(0, 2000), 60 * 4 * 4096, tracker)  # (the rest: the future)
    nu = trace.next_use()
    keys = tracker.lru_order()[:20] + [10**12]  # and a key the tracker never saw
    K = 32
    for farthest in (True, False):
        rows, nxt = np.empty(K, np.int64), np.empty(K, np.int64)
        ko, do = np.empty(K, np.int64), np.empty(K, np.float64)
        j = tracker.teacher(keys, nu, pool.view.tick, farthest, rows, nxt, ko, do)
        last = tracker.last_access(keys)
        want = decision_info(keys, next_use_rows(nu, last), pool.view.tick, K, farthest)
        assert j == want[0] and j >= 0
        np.testing.assert_array_equal(rows[:len(keys)], last)
        np.testing.assert_array_equal(ko, want[1])
        np.testing.assert_array_equal(do, want[2])


def test_features_through_the_view_of_a_pool_whose_clock_lags_the_trackers() -> None:
    """A guard's shadow pool asks the head's prefetch_for with its own view, whose tick may lag
    the tracker's: a recency of 0 or less was log()'s NaN compiled and a ValueError interpreted.
    Distances are at least 1."""
    trace = _trace(3000, 200, 1)
    tracker = FeatureTracker()
    pool = _replay(trace, 40 * 8 * 4096, tracker, cost="h100_pcie5")
    keys = select_candidates(tracker, pool.view, 10, "lru")
    lagging = Pool(40 * 8 * 4096, LRU(), cost="h100_pcie5")
    for k in keys[:3].tolist():
        lagging.access(int(k), 4096)  # (a few ticks: far behind the tracker's 3000)
    cand, mask, _ = observe(tracker, lagging.view, keys, 16)
    assert np.isfinite(cand).all() and mask[:10].all()
