"""CostModel and the pool's simulated timeline, against hand-computed figures.

The test preset moves 1 byte/ns with 100 ns latency per copy, so a copy of 1024 bytes takes
exactly 1124 ns.
"""

from __future__ import annotations

import pytest

from cachegym.allocator.cost import PRESETS, CostModel, Preset, get_preset, load_preset, save_preset
from cachegym.allocator.errors import ConfigError
from cachegym.allocator.pool import Pool
from cachegym.allocator.trace import Op, Trace

LAT = 100
N = 1024
COPY = LAT + N  # 1124 ns


def _preset(engines: int = 2) -> Preset:
    return Preset("unit", 1.0, 1.0, LAT, LAT, engines, 1 << 20, "unit test: 1 byte/ns, 100 ns")


def test_copy_time_and_queueing() -> None:
    c = CostModel(_preset())
    assert c.copy_time(0, N) == COPY and c.copy_time(1, 0) == LAT
    assert c.copy(0, N) == COPY
    assert c.copy(0, N) == 2 * COPY  # same direction: queued behind the first
    assert c.copy(1, N) == COPY  # the other engine is free: overlaps
    assert c.busy_until(0) == 2 * COPY and c.busy_until(1) == COPY
    assert c.copy(1, N, not_before=5000) == 5000 + COPY  # a data dependency delays the start
    assert c.now == 0 and c.stall_ns == 0


def test_one_engine_serialises_both_directions() -> None:
    c = CostModel(_preset(engines=1))
    assert c.copy(0, N) == COPY
    assert c.copy(1, N) == 2 * COPY
    assert c.copy(0, N) == 3 * COPY


def test_compute_wait_and_stall() -> None:
    c = CostModel(_preset())
    c.compute(500)
    assert c.now == 500 and c.compute_ns == 500
    done = c.copy(0, N)  # starts at now, not at 0
    assert done == 500 + COPY
    assert c.wait_until(done) == COPY
    assert c.wait_until(10) == 0  # the past costs nothing
    assert (c.now, c.stall_ns, c.compute_ns, c.total_ns) == (500 + COPY, COPY, 500, 500 + COPY)


def test_instant_model() -> None:
    c = CostModel(None)
    assert c.instant and c.copy_time(0, 10**9) == 0
    c.compute(7)
    assert c.copy(0, 10**9) == 7 and c.copy(1, 10**9, not_before=3) == 7
    assert c.stall_ns == 0


def test_presets_are_cited_and_loadable(tmp_path) -> None:
    for name in ("a100_pcie4", "h100_pcie5", "h200_pcie5", "gh200_c2c"):
        p = get_preset(name)
        assert p.name == name and "datasheet" in p.source.lower()
        assert p.h2d_gbps > 0 and p.d2h_gbps > 0 and p.copy_engines == 2
        assert not p.calibrated
        assert isinstance(CostModel(name).preset, Preset)
    # faster links copy faster
    t = {n: CostModel(n).copy_time(0, 1 << 30) for n in PRESETS}
    assert t["gh200_c2c"] < t["h200_pcie5"] <= t["h100_pcie5"] < t["a100_pcie4"]
    f = tmp_path / "cal.json"
    save_preset(_preset(), str(f))
    assert get_preset(str(f)) == _preset() == load_preset(str(f))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"h2d_gbps": 0.0},
        {"d2h_gbps": -1.0},
        {"h2d_latency_ns": -1},
        {"copy_engines": 3},
        # each field of its type (a helper's audit: these loaded from a preset file)
        {"device_bytes": "abc"}, {"device_bytes": -1}, {"calibrated": "no"}, {"name": 5},
        {"copy_engines": 2.0}, {"h2d_latency_ns": 8000.5}, {"h2d_gbps": "50"},
        {"d2h_gbps": True}, {"source": None},
    ],
)
def test_bad_preset_values(kwargs) -> None:
    base = {"name": "x", "h2d_gbps": 1.0, "d2h_gbps": 1.0, "h2d_latency_ns": 0, "d2h_latency_ns": 0,
            "copy_engines": 2, "device_bytes": 1, "source": "-"}
    with pytest.raises(ConfigError):
        Preset(**{**base, **kwargs})


def test_numpy_numbers_make_a_preset_of_python_numbers(tmp_path) -> None:
    """A calibration's NumPy figures (np.float32 bandwidths, np.int64 latencies) were refused
    as "not a number" by the type checks; they are taken, as Python numbers (JSON writes them)."""
    from dataclasses import replace

    import numpy as np

    p = replace(get_preset("h100_pcie5"), h2d_gbps=np.float32(50), h2d_latency_ns=np.int64(9000))
    assert type(p.h2d_gbps) is float and type(p.h2d_latency_ns) is int
    save_preset(p, str(tmp_path / "p.json"))
    assert load_preset(str(tmp_path / "p.json")) == p


def test_unknown_preset_and_bad_file(tmp_path) -> None:
    with pytest.raises(ConfigError, match="a100_pcie4"):  # the message lists the choices
        CostModel("v100")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="bad.json"):
        load_preset(str(bad))
    bad.write_text("[" * 100_000 + "]" * 100_000)  # (a RecursionError escaped)
    with pytest.raises(ConfigError, match="bad.json: cannot be read as JSON"):
        load_preset(str(bad))
    with pytest.raises(ConfigError, match="nofile.json': no such file"):  # (not "unknown preset")
        get_preset(str(tmp_path / "nofile.json"))
    fields = tmp_path / "fields.json"  # a field too many, some missing: named, not a TypeError's
    fields.write_text('{"name": "x", "h2d_gbps": 10, "bad": 1}')
    with pytest.raises(ConfigError, match=r"expected an object with the fields .* got \['bad'"):
        get_preset(str(fields))


# ---------------------------------------------------------------------- timelines through the pool
def _pool(engines: int = 2, capacity: int = 16 * N, **kw) -> Pool:
    return Pool(capacity, cost=CostModel(_preset(engines)), **kw)


def test_prefetch_hides_the_copy_completely() -> None:
    p = _pool()
    assert p.prefetch(2, N)  # h2d 0 -> 1124
    assert p.state(2) == "h2d"
    p.access(1, N, write=True, compute_ns=2000)  # first write: allocation, no copy
    assert p.state(2) == "device"
    assert p.access(2, N)  # the prefetch landed during compute
    s = p.snapshot()
    assert (s.stall_ns, s.total_ns, s.compute_ns) == (0, 2000, 2000)
    assert (s.prefetch_hits, s.late_prefetches, s.hits, s.misses, s.allocations) == (1, 0, 1, 1, 1)
    assert s.bytes_h2d == N and s.bytes_d2h == 0


def test_late_prefetch_waits_only_the_remainder() -> None:
    p = _pool()
    p.prefetch(2, N)  # lands at 1124
    p.access(1, N, write=True, compute_ns=400)
    assert p.access(2, N)
    s = p.snapshot()
    assert (s.stall_ns, s.total_ns) == (COPY - 400, COPY)
    assert (s.late_prefetches, s.prefetch_hits, s.hits) == (1, 0, 1)
    # the same access without the prefetch: a demand miss stalls for the whole copy
    q = _pool()
    q.access(1, N, write=True, compute_ns=400)
    assert not q.access(2, N)
    assert q.snapshot().stall_ns == COPY and q.snapshot().total_ns == 400 + COPY


def test_same_direction_prefetches_queue() -> None:
    p = _pool()
    p.prefetch(2, N)
    p.prefetch(3, N)  # queued: 1124 -> 2248
    p.access(3, N)
    assert p.snapshot().stall_ns == 2 * COPY


def test_a_prefetch_waits_for_no_other_prefetch_to_land() -> None:
    """A pool whose room is all held by prefetches in flight: a prefetch waited for the first
    to land (on the compute clock: stall), then evicted it. Now it is refused (PoolExhausted,
    for the pool's prefetcher a hint dropped): nothing waits, nothing is evicted. A demand
    access still waits for the landing."""
    from cachegym.allocator.errors import PoolExhausted
    from cachegym.policies.base import PrefetchPolicyBase

    p = Pool(2 * N, cost=CostModel(_preset()), placement="bytes")
    for k in (1, 2, 3, 4, 5):  # clean reads: 4, 5 on the device, 1, 2, 3 in host memory
        p.access(k, N, compute_ns=10_000)
    p.free(4)
    p.free(5)
    assert p.prefetch(1) and p.prefetch(2)  # in flight, all the pool's room theirs
    before = p.snapshot()
    with pytest.raises(PoolExhausted, match="a prefetch does not wait for the prefetches in flight"):
        p.prefetch(3)
    s = p.snapshot()
    assert (p.state(1), p.state(2), p.state(3)) == ("h2d", "h2d", "host")
    assert (s.stall_ns, s.evictions, s.prefetches) == (before.stall_ns, before.evictions, 2)
    assert not p.access(3, N)  # a demand miss waits for the first to land and evicts it; its
    assert p.snapshot().stall_ns == before.stall_ns + 3 * COPY  # copy queues behind the second

    class ThreeAfterNine(PrefetchPolicyBase):
        def prefetch(self, view, key):  # type: ignore[no-untyped-def]
            return [1, 2, 3] if key == 9 else []

    q = Pool(3 * N, prefetcher=ThreeAfterNine(), cost=CostModel(_preset()), placement="bytes")
    for k in (1, 2, 3, 4, 5, 6):
        q.access(k, N, compute_ns=10_000)
    for k in (4, 5, 6):
        q.free(k)
    q.access(9, N, write=True)  # a first write (no copy): 1 and 2 start, 3 finds no room
    s = q.snapshot()
    assert (q.state(1), q.state(2), q.state(3)) == ("h2d", "h2d", "host")
    assert (s.stall_ns, s.prefetches) == (6 * COPY, 2)  # the six reads' copies only


@pytest.mark.parametrize(("engines", "stall"), [(2, COPY), (1, 2 * COPY)])
def test_two_engines_against_one(engines: int, stall: int) -> None:
    p = _pool(engines, write_policy="write-through")
    p.access(1, N, write=True)  # allocation; write-through: d2h 0 -> 1124
    p.prefetch(2, N)  # h2d: its own engine (0 -> 1124) or queued behind the d2h (-> 2248)
    p.access(2, N)
    s = p.snapshot()
    assert s.stall_ns == stall and s.total_ns == stall
    assert s.bytes_d2h == N and s.bytes_h2d == N


def test_dirty_victim_space_reused_only_after_its_write_back() -> None:
    events: list[dict] = []
    p = _pool(capacity=N, hook=events.append)  # room for exactly one object
    p.access(1, N, write=True)  # dirty, at offset 0
    p.access(2, N)  # evicts 1: d2h 0 -> 1124; the block is reused only then; h2d 1124 -> 2248
    s = p.snapshot()
    assert (s.evictions, s.writebacks, s.bytes_d2h, s.bytes_h2d) == (1, 1, N, N)
    assert s.stall_ns == 2 * COPY and s.total_ns == 2 * COPY
    evs = [(e["event"], e["key"], e["now_ns"]) for e in events]
    assert ("evict", 1, 0) in evs and evs[-1] == ("miss", 2, 2 * COPY)
    assert p.state(1) == "host"
    # a clean victim is dropped at once: the fetch starts immediately
    q = _pool(capacity=N)
    q.access(1, N)  # compulsory miss: 0 -> 1124
    q.access(2, N)  # evicts clean 1, fetch 1124 -> 2248
    assert q.snapshot().stall_ns == 2 * COPY and q.snapshot().writebacks == 0
    r = _pool(capacity=N)
    r.access(1, N, write=True)  # allocation at 0, no copy
    r.access(2, N)
    # dirty victim: the write-back (1124) precedes the fetch (1124), nothing overlaps
    assert r.snapshot().stall_ns == 2 * COPY


def test_refetch_of_a_victim_waits_for_its_own_write_back() -> None:
    p = _pool(capacity=2 * N)
    p.access(1, N, write=True)
    p.access(2, N, write=True)
    p.access(3, N, write=True)  # evicts 1 (dirty): d2h 0 -> 1124; 3 allocates in the block after it lands
    assert p.snapshot().stall_ns == COPY
    assert p.state(1) == "host"
    p.access(1, N)  # evicts 2 (d2h 1124 -> 2248); fetch of 1 1124 -> ... after the release of 2's block
    p._check()
    s = p.snapshot()
    assert s.writebacks == 2 and s.bytes_h2d == N
    assert s.total_ns == s.stall_ns == 3 * COPY  # 2's write-back lands at 2248, then 1's fetch


def test_write_back_and_fragmentation_together_force_a_wait() -> None:
    # three blocks of N; after evicting the dirty 1 there is a free block elsewhere
    p = _pool(capacity=3 * N)
    p.access(1, N, write=True)
    p.access(2, N, write=True)
    p.access(3, N)  # compulsory miss 0 -> 1124
    p.free(2)  # frees the middle block at once (no write-back)
    p.access(4, 2 * N, write=True)  # no single 2N block: evict 1 (LRU), wait for its write-back
    s = p.snapshot()
    assert s.evictions == 1 and s.writebacks == 1
    # 1's write-back starts at now (1124) and lands at 2248
    assert s.total_ns == 2 * COPY


def test_flush_waits_for_write_backs() -> None:
    p = _pool()
    p.access(1, N, write=True)
    p.access(2, N, write=True)
    p.flush()  # two d2h copies queue on one engine: 2248
    s = p.snapshot()
    assert s.bytes_d2h == 2 * N and s.total_ns == 2 * COPY
    p.flush()  # nothing dirty any more
    assert p.snapshot().bytes_d2h == 2 * N


def test_write_back_in_flight_is_d2h_until_it_lands() -> None:
    p = _pool(capacity=3 * N)
    for k in (1, 2, 3):
        p.access(k, N, write=True)
    gen = p.steps(4, 2 * N, Op.WRITE)  # a first write: allocated, no fetch
    req = next(gen)
    assert req.needed == 2 * N
    req = gen.send(1)  # 1's write-back (0 -> 1124) frees one block only later: another victim
    assert p.state(1) == "d2h" and p.snapshot().total_ns == 0
    assert sorted(req.view.candidates()) == [2, 3]
    with pytest.raises(StopIteration):
        gen.send(2)  # both write-backs queue on the d2h engine: the pool waits till 2248
    assert p.state(1) == p.state(2) == "host" and p.state(4) == "device"
    s = p.snapshot()
    assert s.total_ns == s.stall_ns == 2 * COPY and s.writebacks == 2 and s.allocations == 4
    p._check()


@pytest.mark.parametrize("field, value", [("h2d_gbps", 1e-4), ("d2h_gbps", float("nan")),
                                          ("h2d_gbps", float("inf")), ("d2h_latency_ns", 10**13),
                                          ("h2d_latency_ns", -1)])
def test_a_preset_out_of_range_is_refused_naming_the_field(field: str, value: float) -> None:
    from dataclasses import replace

    from cachegym.allocator.cost import get_preset
    with pytest.raises(ConfigError, match=field):
        replace(get_preset("h100_pcie5"), **{field: value})


def test_the_clock_saturates_at_clock_max_instead_of_wrapping(caplog: pytest.LogCaptureFixture) -> None:
    """Compiled (long long) and interpreted (Python int) alike: no run wraps to negative time."""
    from dataclasses import replace

    from cachegym.allocator.cost import CLOCK_MAX, get_preset
    slow = replace(get_preset("h100_pcie5"), h2d_gbps=1e-3, d2h_gbps=1e-3, h2d_latency_ns=10**12)
    c = CostModel(slow)
    for _ in range(3):  # each copy alone near 2**58 ns, the engine's queue past 2**62 after a few
        done = c.copy(0, 2**62)
        assert 0 < done <= CLOCK_MAX
    assert done == CLOCK_MAX and c.busy_until(0) == CLOCK_MAX
    c.compute(2**60)
    c.compute(2**62)
    c.compute(2**62)
    assert c.now == CLOCK_MAX and 0 < c.compute_ns <= CLOCK_MAX
    assert c.wait_until(done) == 0 and c.stall_ns >= 0
    assert c.saturated
    assert sum("stays there" in r.getMessage() for r in caplog.records) == 1  # warned once


def test_the_lookahead_counts_the_compute_the_pool_runs() -> None:
    """The pool runs a trace's compute after its accesses (Pool.replay; a free row's compute_ns
    is not run), and the lookahead prefetcher measures a use's slack in that compute alone: with
    the 1 ms of compute on the free row (row 3) object 1's prefetch starts at once after row 2
    (no slack to wait for: it lands late, 28 us of stall, as a miss would), where it waited for
    a phantom millisecond before and was never asked again (a fourth miss). With the compute on
    row 2 it lands within it. Each 1 MB copy takes 8 us + 1e6 B / 50 GB/s = 28 us."""
    from cachegym.policies.registry import make_eviction, make_prefetch

    M = 1_000_000
    got = []
    for comp in ([0, 0, 0, M, 0], [0, 0, M, 0, 0]):
        t = Trace.from_arrays([1, 2, 3, 2, 1], [M] * 5, [0, 0, 0, 2, 0], compute_ns=comp)
        s = Pool(2 * M, make_eviction("lru"), prefetcher=make_prefetch("lookahead", trace=t),
                 cost="h100_pcie5").replay(t)
        got.append((s.compute_ns, s.stall_ns, s.prefetches, s.late_prefetches, s.misses))
    assert got == [(0, 112_000, 1, 1, 3), (M, 84_000, 1, 0, 3)]


def test_early_write_backs_may_outnumber_evictions() -> None:
    """clean_ahead copies dirty objects out before any eviction: the pool's invariants allow it."""
    p = Pool(1000, placement="bytes", cost="h100_pcie5", clean_ahead=1000)
    p.access(1, 600, True)
    p.access(3, 100, compute_ns=200_000)
    st = p.snapshot()
    assert (st.writebacks, st.evictions, st.bytes_d2h) == (1, 0, 600)
    p._check()
