"""The invariant catalogue, checked for every registered eviction policy through the pool.

* a victim is resident and unpinned (evictable), and ``None`` only when nothing is;
* a policy tracks exactly the objects on the device or in flight to it (hook order);
* device bytes never exceed capacity, and the pool's own invariants hold after every event;
* hits + misses = accesses;
* Belady's misses are <= every other policy's on the same trace in object mode;
* same seed, same decisions (determinism).

Workloads mix reads, writes, frees (a freed key comes back as a new object), pins and, in one
variant, prefetches in flight under a cost preset.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import pytest

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.pool import Pool
from cachegym.allocator.trace import Op, Trace
from cachegym.envs.check import CHECKS, Checked, agent_driven, check_policy, mixed_trace
from cachegym.envs.check import drive as check_drive
from cachegym.envs.workloads import synthetic
from cachegym.policies.base import EvictionPolicy
from cachegym.policies.prefetch import LookaheadPrefetcher, MarkovPrefetcher
from cachegym.policies.registry import EVICTION_NAMES, make_eviction, make_prefetch
from cachegym.policies.shadow import ShadowPolicy

if TYPE_CHECKING:
    from cachegym.allocator.pool import PoolView


def drive(pool: Pool, checked: Checked, trace: Trace) -> None:
    """:func:`envs.check.drive`, the pool's own invariants checked after every row too."""
    def each_row(i: int) -> None:
        pool._check()
        if isinstance(checked.wrapped, ShadowPolicy):  # pending objects are the pool's own
            assert set(checked.wrapped.pending_evictions()) <= checked.tracked
    check_drive(pool, checked, trace, each_row=each_row)
    assert pool.snapshot().accesses == int((trace.op != Op.FREE).sum())


def _trace_for(name: str, seed: int) -> Trace:
    """:func:`mixed_trace` of ``seed``; for LIRS over 400 objects of 1,400 bytes (as
    libCacheSim's, it admits only objects up to 1% of the cache)."""
    if name == "lirs":
        return mixed_trace(seed=seed, n_objects=400).with_sizes(1400)
    return mixed_trace(seed=seed)


@pytest.mark.parametrize("name", EVICTION_NAMES)
def test_invariants_bytes_with_pins_and_frees(name: str) -> None:
    trace = _trace_for(name, 1)
    checked = Checked(make_eviction(name, trace=trace, seed=3))
    pool = Pool(150_000, checked, placement="bytes", oversize="bypass")
    drive(pool, checked, trace)
    assert len(checked.evicted) > 100  # the workload really evicts (victims, or due evictions)
    assert checked.untracked_frees > 5  # and frees objects it evicted (on_free_untracked)
    p = checked.wrapped
    queues = {"arc": ("t1", "t2", "b1", "b2"), "s3fifo": ("small", "main", "ghost")}.get(name, ())
    for q in queues:  # their byte counts stay exact through frees of evicted objects
        sizes = p._size if q in ("small", "main") else getattr(p, q)
        assert getattr(p, f"{q}_bytes") == sum(sizes[k] for k in getattr(p, q)), f"{name}: {q}"


@pytest.mark.parametrize("name", EVICTION_NAMES)
def test_invariants_arena_with_prefetches_in_flight(name: str) -> None:
    trace = _trace_for(name, 2)
    checked = Checked(make_eviction(name, trace=trace, seed=3))
    prefetcher = MarkovPrefetcher(depth=2, width=2) if name != "belady" else \
        LookaheadPrefetcher(trace, depth=3)
    pool = Pool(200_000, checked, prefetcher=prefetcher, cost="a100_pcie4")
    drive(pool, checked, trace)
    st = pool.snapshot()
    assert len(checked.evicted) > 50
    assert st.prefetches > 0


def _shadow_invariant(pool: Pool, checked: Checked, case: object) -> Callable[[int], None]:
    """After each row: the pool's own invariants, and a model-driven policy's pool holds only
    the model's residents and the objects it gave up (pending)."""
    def each_row(_: int) -> None:
        pool._check()
        p = checked.wrapped
        if isinstance(p, ShadowPolicy):
            pending = set(p.pending_evictions())
            assert all(p._resident(k) or k in pending for k in checked.tracked), case
    return each_row


@pytest.mark.parametrize("name", EVICTION_NAMES)
def test_small_pools_under_every_prefetcher_always_have_a_victim(name: str) -> None:
    """Pools of two to four objects, each prefetcher: a victim whenever an object is evictable,
    and a model-driven policy's pool holds only the model's residents and its pending objects
    (LIRS returned no victim with a prefetcher: an object the pool held on S alone left the
    model when S was pruned, without being given up; a helper's fuzzing, 20 of 300 traces)."""
    import numpy as np

    rng = np.random.default_rng(11)
    for i in range(40):
        trace = Trace.from_arrays(key=rng.integers(0, 6, 30), size=1)
        for pf in ("markov", "stride", "lookahead", "history"):
            checked = Checked(make_eviction(name, trace=trace, seed=3))
            pool = Pool(2 + i % 3, checked, prefetcher=make_prefetch(pf, trace=trace))

            check_drive(pool, checked, trace, each_row=_shadow_invariant(pool, checked, (i, pf)))


@pytest.mark.parametrize("name", EVICTION_NAMES)
def test_small_pools_with_writes_frees_and_a_timing_preset_always_have_a_victim(name: str) -> None:
    """As above with writes, frees and a timing preset (LIRS returned no victim: after a free
    pruned S down to an HIR entry, evictLIR popped it as LIR and left it on NH, and when the
    stack was limited that stale NH key took the object's S entry, resident by then, out of the
    model without it being given up; a helper's audit, 1 of 180 runs with frees)."""
    import numpy as np

    seq = ["7W", "5R", "2W", "7F", "5F", "7R", "3R", "1W", "4W", "3W", "1R", "2W", "4F", "5W",
           "2R", "4W", "3W"]  # (the audit's trace: key and op)
    traces = [Trace.from_arrays(np.array([int(t[:-1]) for t in seq]), 1,
                                np.array(["RWF".index(t[-1]) for t in seq], np.uint8))]
    rng = np.random.default_rng(12)
    for _ in range(30):
        keys = rng.integers(0, 8, 60)
        ops = rng.choice(3, 60, p=[0.6, 0.3, 0.1]).astype(np.uint8)
        live: set[int] = set()
        for j, k in enumerate(keys.tolist()):  # a free names a live object
            if ops[j] == 2 and k not in live:
                ops[j] = 0
            (live.discard if ops[j] == 2 else live.add)(k)
        traces.append(Trace.from_arrays(keys, 1, ops, compute_ns=rng.integers(0, 3000, 60)))
    for i, trace in enumerate(traces):
        for pf in ("lookahead", "markov"):
            checked = Checked(make_eviction(name, trace=trace, seed=3))
            pool = Pool(2 + i % 3, checked, prefetcher=make_prefetch(pf, trace=trace),
                        cost="h100_pcie5")
            check_drive(pool, checked, trace, each_row=_shadow_invariant(pool, checked, (i, pf)))


def _object_mode_misses(trace: Trace, name: str, capacity: int) -> int:
    pool = Pool(capacity, make_eviction(name, trace=trace, seed=0), placement="bytes",
                oversize="bypass")
    return pool.replay(trace).misses


@pytest.mark.parametrize("trace", [
    synthetic.zipf(3000, 400, 0.8, size=1, seed=5),
    synthetic.scan(3000, n_hot=200, scan_length=150, scan_every=500, size=1, seed=6),
    synthetic.loop(3000, n_objects=150, size=1, seed=7),
], ids=["zipf", "scan", "loop"])
def test_belady_misses_at_most_every_policy(trace: Trace) -> None:
    for cap in (16, 64, 128):
        best = _object_mode_misses(trace, "belady", cap)
        for name in EVICTION_NAMES:
            assert best <= _object_mode_misses(trace, name, cap), (name, cap)


@pytest.mark.parametrize("name", EVICTION_NAMES)
def test_same_seed_same_decisions(name: str) -> None:
    trace = mixed_trace(seed=4, n=800)

    def victims() -> Sequence[int]:
        out: list[int] = []
        policy = make_eviction(name, trace=trace, seed=11)
        inner_evict = policy.on_evict

        def record(view: PoolView, key: int) -> None:
            out.append(key)  # every eviction: asked for by the pool or due by the policy
            inner_evict(view, key)

        policy.on_evict = record  # type: ignore[method-assign]
        if name == "lirs":  # as libCacheSim's, LIRS admits only objects up to 1% of the cache
            Pool(100 * 64, policy, placement="bytes").replay(trace.with_sizes(64))
        else:
            Pool(60_000, policy, placement="bytes").replay(trace)
        return out

    first = victims()
    assert len(first) > 20
    assert victims() == first


def test_random_seed_changes_decisions() -> None:
    trace = mixed_trace(seed=4, n=800)
    a = Pool(60_000, make_eviction("random", seed=1), placement="bytes").replay(trace)
    b = Pool(60_000, make_eviction("random", seed=2), placement="bytes").replay(trace)
    c = Pool(60_000, make_eviction("random", seed=1), placement="bytes").replay(trace)
    assert a.misses == c.misses
    assert (a.misses, a.evictions) != (b.misses, b.evictions) or a.byte_misses != b.byte_misses


@pytest.mark.parametrize("name", [n for n in EVICTION_NAMES if n != "belady"])
def test_agent_chosen_victims(name: str) -> None:
    """``Pool.steps`` lets someone else pick victims: the policy must accept any evictable key
    in ``on_evict`` and keep working (the env drives the pool this way)."""
    trace = mixed_trace(seed=5, n=600)
    checked = Checked(make_eviction(name, trace=trace, seed=0))
    pool = Pool(60_000, checked, placement="bytes")
    agent_driven(pool, checked, trace)
    pool._check()
    assert len(checked.evicted) > 50 or name == "lirs"


@pytest.mark.parametrize("name", EVICTION_NAMES)
def test_check_policy_passes_every_registered_policy(name: str) -> None:
    """What ``cachegym check`` runs on a user's policy, on the built-in ones."""
    report = check_policy(name, seeds=(3,), requests=600)
    assert set(report.rows) == set(CHECKS) - ({"victims chosen by an agent"} if name == "belady" else set())


# ---------------------------------------------------------------------------------- registry
def test_registry_builds_every_eviction_policy() -> None:
    trace = mixed_trace(seed=6, n=50)
    for name in EVICTION_NAMES:
        p = make_eviction(name, trace=trace)
        assert isinstance(p, EvictionPolicy)
        assert p.name == name
    assert make_eviction(" LRU ").name == "lru"


def test_registry_passes_parameters_and_seed() -> None:
    assert make_eviction("clock", n_bits=2).max_freq == 3  # type: ignore[attr-defined]
    assert make_eviction("slru", n_seg=3).n_seg == 3  # type: ignore[attr-defined]
    assert make_eviction("random", seed=7).seed == 7  # type: ignore[attr-defined]


@pytest.mark.parametrize("call,match", [
    (lambda: make_eviction("nope"), "valid names: lru, fifo, lfu, random, clock, arc"),
    (lambda: make_eviction("belady"), "trace="),
    (lambda: make_eviction("clock", bits=2), "policy 'clock': unknown argument 'bits'; accepted: n_bits"),
    (lambda: make_eviction("random", sede=1, x=2), "policy 'random': unknown arguments 'sede', 'x'; accepted: seed"),
    (lambda: make_eviction("lru", gaurd=False), "policy 'lru': unknown argument 'gaurd'; accepted: none"),
    (lambda: make_prefetch("markov", dept=2),
     "policy 'markov': unknown argument 'dept'; accepted: depth, width, max_entries"),
    (lambda: make_prefetch(None, depth=2), "policy 'none': unknown argument 'depth'; accepted: none"),
    (lambda: make_eviction("learned", path="tests/golden/policy.npz", gaurd=False),
     "policy 'learned': unknown argument 'gaurd'; accepted: path, budget_us, seed, K, guard"),
    (lambda: make_eviction("clock", n_bits=0), "n_bits"),
    (lambda: make_eviction("learned:"), "write eval.learned=\\[PATH\\] eval.learned_guards=\\[shadow\\]"),
])
def test_registry_errors_say_what_to_do(call, match: str) -> None:  # type: ignore[no-untyped-def]
    from cachegym.allocator.errors import ConfigError

    with pytest.raises(ConfigError, match=match):
        call()


def test_registry_resolves_learned_path_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    import cachegym.policies.learned as learned

    seen: list[str] = []
    sentinel = object()

    def fake_load(path: str, guard: object = True) -> object:
        seen.append((path, guard))
        return sentinel

    monkeypatch.setattr(learned.LearnedPolicy, "load", staticmethod(fake_load))
    assert make_eviction("learned", path="runs/x/policy.npz") is sentinel
    assert make_eviction("learned", path="runs/y.npz", guard=learned.GuardName.none) is sentinel
    assert seen == [("runs/x/policy.npz", "shadow"), ("runs/y.npz", learned.GuardName.none)]


# ------------------------------------------------- a policy of the user's, named by where it lives
def _readme_policy(tmp_path) -> str:  # type: ignore[no-untyped-def]
    """The README's "Add a policy" example, written to a file as a reader would copy it."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = re.search(r"## Add a policy.*?```python\n(.*?)```", readme, re.S)
    assert block is not None, "README: the 'Add a policy' section lost its Python example"
    path = tmp_path / "my_policies.py"
    path.write_text(block.group(1))
    return str(path)


def test_readme_policy_by_file_and_module_keeps_the_invariants(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``FILE.py:Class`` and ``module:Class`` build the README's MRU without touching the
    registry; it keeps the pool's invariants (pins, frees, oversize) and evicts the most
    recently used object."""
    import sys

    path = _readme_policy(tmp_path)
    trace = mixed_trace(seed=1)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the working directory is appended below
    monkeypatch.setitem(sys.modules, "my_policies", None)  # blocks an import until deleted
    del sys.modules["my_policies"]  # (monkeypatch restores the absence when the test ends)
    for spec in (f"{path}:MRU", "my_policies:MRU"):
        if ":" in spec and not spec.startswith(path):
            monkeypatch.chdir(tmp_path)  # a module beside the user is found too
        checked = Checked(make_eviction(spec))
        pool = Pool(150_000, checked, placement="bytes", oversize="bypass")
        drive(pool, checked, trace)
        assert checked.victims > 100
    mru = make_eviction(f"{path}:MRU")
    pool = Pool(3, mru, placement="bytes")
    for k in (1, 2, 3, 2, 4):  # full at 1 2 3; 2 is the most recent when 4 arrives
        pool.access(k, 1)
    assert sorted(pool.resident_keys()) == [1, 3, 4]


@pytest.mark.parametrize("spec,body,match", [
    ("missing.py:MRU", None, "no file 'missing.py'"),
    ("mod_nope_xyz.sub:MRU", None, "no module 'mod_nope_xyz.sub'"),
    ("p.py:LRUX", "class MRU:\n    def victim(self, view): return None\n", "has no class 'LRUX'; it has MRU"),
    ("p.py:NotAPolicy", "class NotAPolicy:\n    pass\n", "has no victim\\(\\) method"),
    ("p.py:Bare", "class Bare:\n    def victim(self, v): return None\n",
     "Bare has no on_hit, on_miss, on_insert, on_evict, on_free: .*EvictionPolicyBase"),
    ("p.py:Needs", "class Needs:\n    def __init__(self, x): pass\n    def victim(self, v): return None\n",
     "constructing it failed"),
    ("p.py:X", "raise RuntimeError('broken at import')\n", "RuntimeError: broken at import"),
    ("p.py:make", "def make():\n    return 3\n", "names a function, not a class"),
])
def test_user_policy_errors_say_what_is_wrong(spec, body, match, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import sys

    from cachegym.allocator.errors import ConfigError

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    if body is not None:
        (tmp_path / spec.split(":")[0]).write_text(body)
    with pytest.raises(ConfigError, match=match):
        make_eviction(spec)


def test_user_policy_refuses_unknown_keywords_by_name(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from cachegym.allocator.errors import ConfigError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.py").write_text("from cachegym.policies.lru import LRU\n"
                                   "class Mine(LRU):\n    def __init__(self, depth=1):\n"
                                   "        super().__init__()\n")
    assert make_eviction("p.py:Mine", depth=2) is not None
    with pytest.raises(ConfigError, match="policy 'p.py:Mine': unknown argument 'dept'; accepted: depth"):
        make_eviction("p.py:Mine", dept=2)


def test_user_prefetcher_by_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``make_prefetch("FILE.py:Class")`` builds a prefetcher of the user's, handing it the trace
    when its constructor takes one; an eviction policy there is refused as a prefetcher."""
    from cachegym.allocator.errors import ConfigError
    from cachegym.policies.registry import make_prefetch

    (tmp_path / "pf.py").write_text(
        "class Next:\n"
        "    name = 'next'\n"
        "    def __init__(self, trace=None):\n"
        "        self.trace = trace\n"
        "    def prefetch(self, view, key):\n"
        "        return (key + 1,)\n"
        "class Evicts:\n"
        "    def victim(self, view):\n"
        "        return None\n")
    trace = mixed_trace(seed=2, n=50)
    pf = make_prefetch(f"{tmp_path / 'pf.py'}:Next", trace=trace)
    assert pf.trace is trace and pf.prefetch(None, 41) == (42,)  # type: ignore[attr-defined,arg-type]
    with pytest.raises(ConfigError, match="has no prefetch\\(\\) method, so it is not a prefetch policy"):
        make_prefetch(f"{tmp_path / 'pf.py'}:Evicts")


def test_user_policy_file_with_dataclasses_loads(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A policy file that defines a dataclass (with postponed annotations) loads: the module is
    in ``sys.modules`` while it runs, as an import would have it."""
    (tmp_path / "dcpol.py").write_text(
        "from __future__ import annotations\n"
        "from dataclasses import dataclass\n"
        "from cachegym.policies.lru import LRU\n\n"
        "@dataclass\n"
        "class Opts:\n"
        "    depth: int = 2\n\n"
        "class DCLRU(LRU):\n"
        "    def __init__(self) -> None:\n"
        "        super().__init__()\n"
        "        self.opts = Opts()\n")
    p = make_eviction(f"{tmp_path / 'dcpol.py'}:DCLRU")
    assert p.opts.depth == 2  # type: ignore[attr-defined]


def test_a_policy_file_imports_the_modules_beside_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """As `python FILE.py` would (ModuleNotFoundError before); the folder is not left on the path."""
    import sys

    pkg = tmp_path / "pkgdir"
    pkg.mkdir()
    (pkg / "helpers_beside_x.py").write_text("BASE = 'lru'\n")
    (pkg / "withhelper.py").write_text(
        "from helpers_beside_x import BASE\nfrom cachegym.policies.lru import LRU\n\n"
        "class Mine(LRU):\n    name = BASE + '2'\n")
    assert make_eviction(f"{pkg / 'withhelper.py'}:Mine").name == "lru2"
    assert str(pkg) not in sys.path


def test_a_policy_class_by_file_takes_the_runs_seed_where_it_has_one(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """As the built-in ``random``: a seed sweep over a user's seeded class varied nothing; without
    a run's seed the class keeps its own default (it was replaced by 0)."""
    path = tmp_path / "own.py"
    path.write_text("from cachegym.policies.lru import LRU\n"
                    "class Own(LRU):\n"
                    "    def __init__(self, seed=42):\n"
                    "        super().__init__()\n"
                    "        self.seed = seed\n")
    assert make_eviction(f"{path}:Own", seed=7).seed == 7  # type: ignore[attr-defined]
    assert make_eviction(f"{path}:Own").seed == 42  # type: ignore[attr-defined]
    assert make_eviction("random").seed == 0 and make_eviction("random", seed=5).seed == 5  # type: ignore[attr-defined]


def test_a_bad_registry_line_is_named_and_breaks_no_other_name(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A line naming a module that is not importable under its name (the README says to add
    one) made every lookup, ``lru`` too, raise a bare ModuleNotFoundError."""
    from cachegym.policies import registry

    monkeypatch.setitem(registry._EVICTION, "mru", "my_policies_nowhere:MRU")
    with pytest.raises(ConfigError, match=r"the registry's line 'mru': 'my_policies_nowhere:MRU' "
                                          r"names no class .*my_pkg.policies:MRU"):
        make_eviction("mru")
    assert make_eviction("lru").name == "lru"



def test_a_registered_class_beside_the_run_is_found_and_gets_the_runs_seed(
        monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The README's line ``"mru": "my_policies:MRU"`` looked for cachegym.policies.my_policies
    alone (it works as my_policies.py:MRU); a registered class taking ``seed`` was built with
    its own default, not the run's."""
    from cachegym.policies import registry

    (tmp_path / "my_registered_policies.py").write_text(
        "from cachegym.policies.lru import LRU\n\n\n"
        "class Seeded(LRU):\n"
        "    def __init__(self, seed: int = 123) -> None:\n"
        "        super().__init__()\n"
        "        self.seed = seed\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry._EVICTION, "myseeded", "my_registered_policies:Seeded")
    assert make_eviction("myseeded", seed=7).seed == 7  # type: ignore[attr-defined]
    assert make_eviction("myseeded").seed == 123  # type: ignore[attr-defined]
    # and from the working directory, not on the path (the `cachegym` command's path does not
    # hold it; `python -m` does): "names no class (No module named 'my_policies')"
    import sys

    (tmp_path / "beside").mkdir()
    (tmp_path / "beside" / "my_beside_policies.py").write_text(
        "from cachegym.policies.lru import LRU\n\n\nclass Beside(LRU):\n    name = 'beside'\n")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", os.getcwd())])
    monkeypatch.chdir(tmp_path / "beside")
    monkeypatch.setitem(registry._EVICTION, "beside", "my_beside_policies:Beside")
    assert make_eviction("beside").name == "beside"


def test_the_sweeps_up_front_check_gives_a_required_seed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A FILE.py:Class whose constructor requires ``seed`` (the run passes its seed) was refused
    by the evaluator's check before any run ("missing ... 'seed'"), though ``cachegym check``
    and the run itself build it."""
    from cachegym.policies.registry import check_import_spec

    path = tmp_path / "seeded.py"
    path.write_text("from cachegym.policies.lru import LRU\n\n\n"
                    "class Seeded(LRU):\n"
                    "    def __init__(self, seed):\n"
                    "        super().__init__()\n"
                    "        self.seed = seed\n\n\n"
                    "class Oracle(LRU):\n"
                    "    def __init__(self, trace, seed):\n"
                    "        super().__init__()\n\n\n"
                    "class TooMany(LRU):\n"
                    "    def __init__(self, trace, seed, depth):\n"
                    "        super().__init__()\n")
    check_import_spec(f"{path}:Seeded", "victim")
    check_import_spec(f"{path}:Oracle", "victim")
    assert make_eviction(f"{path}:Seeded", seed=7).seed == 7  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"the evaluator passes trace= and seed= alone"):
        check_import_spec(f"{path}:TooMany", "victim")
