"""What the goldens cover: every case, by group, and the traces they replay.

Shared by ``record.py`` (which writes the golden files) and ``test_golden.py`` (which recomputes
them); ``golden_run.py`` holds how one case is run. A case is a frozen dataclass with an ``id``
(the key of its record in the group's file). The trace makers here are frozen copies of those of
the tests at commit 80edfc6 (``tests/allocator/test_fastreplay.py``'s ``gen_trace`` and ``CASES``,
``tests/envs``' ``small_trace`` and ``pattern_trace``), so that the goldens do not move when those
tests change.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cachegym.allocator.trace import Op, Trace

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TRACES_DIR = os.path.join(ROOT, "data", "traces")
POLICY_FILE = os.path.join(HERE, "policy.npz")
"""The learned policy the goldens replay: the demo job's export (``scripts/main.py`` at 80edfc6)."""

GROUPS = ("classic", "pool", "envs", "learned", "quality")
"""One golden file per group: ``tests/golden/<group>.json.gz``."""


def golden_path(group: str) -> str:
    return os.path.join(HERE, f"{group}.json.gz")


# ---------------------------------------------------------------------- traces
@functools.cache
def gen_trace(seed: int, n: int = 2000, n_keys: int = 120, frees: float = 0.03,
              writes: float = 0.2, big_keys: bool = False) -> Trace:
    """Zipf-ish keys, per-object sizes (a few change on re-creation), reads, writes, frees
    (``tests/allocator/test_fastreplay.py``'s maker at 80edfc6)."""
    rng = np.random.default_rng(seed)
    ranks = np.minimum(rng.zipf(1.3, n) - 1, n_keys - 1)
    perm = rng.permutation(n_keys)
    keys = perm[ranks].astype(np.int64)
    if big_keys:  # not dense
        keys = keys * 1_000_003 - 7_777_777_777
    base = rng.integers(1, 2000, n_keys)
    sizes = base[ranks].copy()
    jitter = rng.random(n) < 0.02  # a miss may carry a new size (libCacheSim semantics)
    sizes[jitter] = rng.integers(1, 2000, int(jitter.sum()))
    ops = np.where(rng.random(n) < writes, Op.WRITE, Op.READ).astype(np.uint8)
    live: set[int] = set()
    for i in range(n):
        k = int(keys[i])
        if k in live and rng.random() < frees:
            ops[i] = Op.FREE
            live.discard(k)
        else:
            live.add(k)
    compute = rng.integers(0, 20_000, n)
    return Trace.from_arrays(keys, sizes, ops, compute_ns=compute)


@functools.cache
def small_trace(seed: int = 0, n: int = 1500, n_keys: int = 60) -> Trace:
    """Zipf keys of 512-byte multiples, kinds, 25% writes, 3% frees (``tests/envs``' maker, with
    compute times added)."""
    rng = np.random.default_rng(seed)
    key = rng.zipf(1.2, n) % n_keys
    size_of = rng.integers(1, 6, n_keys) * 512
    op = np.where(rng.random(n) < 0.25, Op.WRITE, Op.READ).astype(np.uint8)
    live: set[int] = set()
    for i in range(n):
        k = int(key[i])
        if k in live and rng.random() < 0.03:
            op[i] = Op.FREE
            live.discard(k)
        else:
            live.add(k)
    return Trace.from_arrays(key, size_of[key], op, kind=rng.integers(0, 7, n_keys)[key],
                             compute_ns=rng.integers(0, 30_000, n))


@functools.cache
def pattern_trace(n_rounds: int = 40, seed: int = 0, compute_ns: int = 20_000) -> Trace:
    """Rounds over a fixed sequence of 40 objects with noise: successors predict well
    (``tests/envs/test_prefetch_env.py``'s maker)."""
    rng = np.random.default_rng(seed)
    seq = rng.permutation(40)
    keys: list[int] = []
    for _ in range(n_rounds):
        for k in seq:
            keys.append(int(k))
            if rng.random() < 0.2:
                keys.append(int(rng.integers(40, 80)))
    op = np.where(rng.random(len(keys)) < 0.2, Op.WRITE, Op.READ)
    step = np.arange(len(keys)) // 3
    return Trace.from_arrays(keys, 1024, op, compute_ns=np.full(len(keys), compute_ns), step=step)


@functools.cache
def stride_trace(seed: int = 0, n: int = 3000) -> Trace:
    """Sequential runs (stride 1, 2 or -1 over keys) interleaved with a Zipf hot set, varied
    sizes, writes and compute: every prefetcher finds something to do."""
    rng = np.random.default_rng(seed)
    keys: list[int] = []
    while len(keys) < n:
        if rng.random() < 0.5:
            start, stride = int(rng.integers(100, 400)), int(rng.choice([1, 2, -1]))
            keys += [start + j * stride for j in range(int(rng.integers(4, 16)))]
        else:
            keys += [int(x) for x in np.minimum(rng.zipf(1.4, 6) - 1, 60)]
    key = np.asarray(keys[:n], np.int64)
    size = (key % 7 + 1) * 700
    op = np.where(rng.random(n) < 0.15, Op.WRITE, Op.READ).astype(np.uint8)
    return Trace.from_arrays(key, size, op, compute_ns=rng.integers(0, 40_000, n))


@functools.cache
def bundled_trace(name: str) -> Trace:
    from cachegym.envs.workloads import read_trace

    return read_trace(os.path.join(TRACES_DIR, f"{name}.npz"))


def make_trace(spec: tuple[Any, ...]) -> Trace:
    """A trace from its spec: ``("gen", seed)``, ``("small", seed)``, ``("pattern", n_rounds,
    seed)``, ``("stride", seed)``, ``("bundled", name)``."""
    kind, *args = spec
    if kind == "gen":
        return gen_trace(args[0], big_keys=args[0] == 1)
    maker = {"small": small_trace, "pattern": pattern_trace, "stride": stride_trace,
             "bundled": bundled_trace}[kind]
    return maker(*args)  # type: ignore[no-any-return, operator]


# ---------------------------------------------------------------------- a. classic policies
CLASSIC_POLICIES = ("lru", "fifo", "lfu", "random", "clock", "arc", "sieve", "s3fifo", "lirs",
                    "slru", "gdsf", "belady")
"""Every non-learned name of ``policies.registry.EVICTION_NAMES`` at 80edfc6 (random: seed 0)."""

FASTREPLAY_CASES = (
    # (mode, capacity, cost, write_policy): tests/allocator/test_fastreplay.py's CASES at 80edfc6
    ("bytes", 8_000, None, "write-back"),
    ("bytes", 30_000, None, "write-back"),
    ("bytes", 1_500, None, "write-back"),  # many objects larger than the pool: bypass
    ("objects", 10, None, "write-back"),
    ("objects", 40, None, "write-through"),
    ("bytes", 20_000, "a100_pcie4", "write-back"),  # timing model: write-backs delay space
    ("bytes", 6_000, "h100_pcie5", "write-through"),
    ("objects", 25, "gh200_c2c", "write-back"),
)
SEEDS = (0, 1, 2)


@dataclass(frozen=True)
class ReplayCase:
    """A trace replayed by a pool (``placement``, ``cost``, ``write_policy``, ``oversize=bypass``)
    under ``policy`` (a registry name) and ``prefetch`` (a registry name and its parameters);
    ``mode="objects"`` gives every object size 1."""

    id: str
    trace: tuple[Any, ...]
    policy: str
    capacity: int | float  # a float: that fraction of the trace's peak live bytes
    mode: str = "bytes"
    placement: str = "bytes"
    cost: str | None = None
    write_policy: str = "write-back"
    prefetch: str | None = None
    prefetch_params: tuple[tuple[str, Any], ...] = ()
    victims: bool = True  # also replay with a recorder of the policy's victim decisions
    bare_loop: bool = True  # with victims: also the row-by-row loop without the recorder
    evaluator: bool = False  # also the evaluator's run_one (its compiled replay where it applies)


def classic_cases() -> list[ReplayCase]:
    out = []
    for policy in CLASSIC_POLICIES:
        for mode, cap, cost, wp in FASTREPLAY_CASES:
            for seed in SEEDS:
                out.append(ReplayCase(f"{policy}/{mode}-{cap}-{cost}-{wp}/s{seed}", ("gen", seed),
                                      policy, cap, mode=mode, cost=cost, write_policy=wp,
                                      evaluator=True))
    return out


# ---------------------------------------------------------------------- b. pool configurations
PRESET_NAMES = (None, "a100_pcie4", "h100_pcie5", "h200_pcie5", "gh200_c2c")
"""No timing model, then every preset of ``allocator.cost.PRESETS`` at 80edfc6."""
MATRIX_POLICIES = ("lru", "s3fifo", "slru", "gdsf", "belady")
PREFETCHERS: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = (
    ("none", ()),
    ("markov", ()),
    ("markov", (("depth", 3), ("width", 2))),
    ("stride", ()),
    ("stride", (("degree", 4), ("confirm", 0))),
    ("lookahead", ()),
    ("lookahead", (("depth", 2), ("window", 6))),
)
BUNDLED_REPLAYED = ("gpt", "resnet", "mlp_embedding")
BUNDLED_ALL = ("gpt", "gpt_infer", "gpt_wide", "mlp_embedding", "resnet", "resnet_deep")


def _pf_id(name: str, params: tuple[tuple[str, Any], ...]) -> str:
    return name + "".join(f",{k}={v}" for k, v in params)


def pool_cases() -> list[ReplayCase]:
    out = []
    # placement x timing preset x write policy, several policies (arena: 512-byte blocks)
    for placement in ("bytes", "arena"):
        for cost in PRESET_NAMES:
            for wp in ("write-back", "write-through"):
                for policy in MATRIX_POLICIES:
                    out.append(ReplayCase(f"matrix/{placement}-{cost}-{wp}/{policy}", ("gen", 5),
                                          policy, 24_000, placement=placement, cost=cost,
                                          write_policy=wp, victims=policy in ("lru", "s3fifo")))
    # prefetchers, with and without timing, both placements
    for name, params in PREFETCHERS:
        for cost in (None, "a100_pcie4", "gh200_c2c"):
            for placement in ("bytes", "arena"):
                pf = _pf_id(name, params)
                out.append(ReplayCase(f"prefetch/{pf}/{placement}-{cost}", ("stride", 0), "lru",
                                      40_000, placement=placement, cost=cost,
                                      write_policy="write-back", prefetch=name,
                                      prefetch_params=params, victims=placement == "arena"
                                      and cost == "a100_pcie4"))
    for name, params in PREFETCHERS[1:]:  # another eviction policy under the prefetches
        out.append(ReplayCase(f"prefetch/{_pf_id(name, params)}/s3fifo-h100", ("pattern", 20, 1),
                              "s3fifo", 20 * 1024, cost="h100_pcie5", write_policy="write-through",
                              prefetch=name, prefetch_params=params, victims=False))
    # bundled traces at three capacities (fractions of peak live bytes), and timed
    for tname in BUNDLED_REPLAYED:
        for frac in (0.1, 0.25, 0.5):
            for policy in ("lru", "s3fifo", "belady"):
                out.append(ReplayCase(f"bundled/{tname}/{frac}/{policy}", ("bundled", tname),
                                      policy, frac, victims=False, evaluator=True))
        out.append(ReplayCase(f"bundled/{tname}/0.25/lru-a100", ("bundled", tname), "lru", 0.25,
                              cost="a100_pcie4", victims=False, evaluator=True))
        out.append(ReplayCase(f"bundled/{tname}/0.5/arc-gh200-arena-wt", ("bundled", tname), "arc",
                              0.5, cost="gh200_c2c", placement="arena",
                              write_policy="write-through", victims=False))
    return out


@dataclass(frozen=True)
class ScriptCase:
    """A seeded sequence of public pool calls: access (read/write), free, prefetch, pin, unpin,
    flush; an error is recorded by its class name."""

    id: str
    seed: int
    policy: str
    capacity: int
    placement: str = "arena"
    cost: str | None = None
    write_policy: str = "write-back"
    prefetch: str | None = None
    n_ops: int = 800
    n_keys: int = 40


SCRIPT_CASES = (
    ScriptCase("script/lru-arena-a100", 0, "lru", 12_288, cost="a100_pcie4"),
    ScriptCase("script/arc-bytes-wt", 1, "arc", 10_000, placement="bytes",
               write_policy="write-through"),
    ScriptCase("script/sieve-arena-gh200-wt", 2, "sieve", 16_384, cost="gh200_c2c",
               write_policy="write-through"),
    ScriptCase("script/gdsf-bytes-h100", 3, "gdsf", 9_000, placement="bytes", cost="h100_pcie5"),
    ScriptCase("script/s3fifo-bytes", 4, "s3fifo", 12_000, placement="bytes"),
    ScriptCase("script/lru-arena-h200-markov", 5, "lru", 12_288, cost="h200_pcie5",
               prefetch="markov"),
    ScriptCase("script/clock-arena-stride", 6, "clock", 10_240, prefetch="stride"),
)


# ---------------------------------------------------------------------- c. environments
@dataclass(frozen=True)
class EnvCase:
    """``gymnasium.make(env_id, traces=<trace>, **kwargs)``, reset with ``seed``, stepped with
    ``chooser`` (``first``: the first valid action of ``action_masks()``; ``oracle``:
    ``info["oracle_action"]``) to the episode's end."""

    id: str
    env_id: str
    trace: tuple[Any, ...] | None  # None: the env's default workload
    kwargs: tuple[tuple[str, Any], ...] = field(default=())
    seed: int = 0
    max_steps: int = 3000


CHOOSERS = ("first", "oracle")
_E, _P, _J = "cachegym/Evict-v0", "cachegym/Prefetch-v0", "cachegym/Joint-v0"

# (the eviction cases name the reward they were recorded with, misses: the env's default became
# traffic on 2026-12-02; and the candidate rule and capacity_of, lru and working_set: the
# defaults became conf/env/evict.yaml's, sample and peak_live, later that day; the prefetch and
# joint cases name working_set, their default until 2026-12-05. The choosers take valid actions
# only, so invalid_action plays no part)
ENV_CONFIGS = (
    EnvCase("evict/default-trace-sample", _E, None,
            (("K", 16), ("candidates", "sample"), ("window", 1500), ("capacity_of", "working_set"),
             ("reward", "misses"))),
    EnvCase("evict/lru-K8", _E, ("small", 2),
            (("K", 8), ("candidates", "lru"), ("window", 500), ("capacity", 0.3),
             ("capacity_of", "working_set"), ("reward", "misses"))),
    EnvCase("evict/sample-seed7", _E, ("small", 3),
            (("K", 8), ("window", 500), ("candidates", "sample"), ("capacity", 0.3),
             ("capacity_of", "working_set"), ("reward", "misses")), seed=7),
    EnvCase("evict/stall-a100", _E, ("small", 5),
            (("K", 8), ("candidates", "lru"), ("window", None), ("capacity", 0.3),
             ("capacity_of", "working_set"), ("reward", "stall"), ("cost", "a100_pcie4"))),
    EnvCase("evict/bytes-h100-wt", _E, ("small", 6),
            (("K", 12), ("candidates", "lru"), ("window", 700), ("capacity", 0.25),
             ("capacity_of", "working_set"), ("reward", "bytes"),
             ("cost", "h100_pcie5"), ("write_policy", "write-through"))),
    EnvCase("evict/arena", _E, ("small", 8),
            (("K", 12), ("candidates", "lru"), ("window", 800), ("capacity", 0.25),
             ("capacity_of", "working_set"), ("placement", "arena"), ("reward", "misses"))),
    EnvCase("evict/peak-live-K64-lenient", _E, ("small", 9),
            (("K", 64), ("candidates", "lru"), ("window", 600), ("capacity", 0.5), ("capacity_of", "peak_live"),
             ("invalid_action", "lru"), ("reward", "misses"))),
    EnvCase("evict/int-capacity", _E, ("small", 10),
            (("K", 8), ("candidates", "lru"), ("window", 500), ("capacity", 6144), ("reward", "misses"))),
    EnvCase("prefetch/miss-pythia", _P, ("pattern", 8, 0),
            (("K", 4), ("window", None), ("capacity", 30 * 1024))),
    EnvCase("prefetch/access-a100", _P, ("pattern", 6, 1),
            (("K", 4), ("window", None), ("capacity", 30 * 1024), ("opportunity", "access"),
             ("cost", "a100_pcie4"))),
    EnvCase("prefetch/step-misses", _P, ("pattern", 10, 2),
            (("K", 6), ("window", 300), ("capacity", 0.5), ("capacity_of", "working_set"), ("opportunity", "step"),
             ("reward", "misses"))),
    EnvCase("prefetch/every3-stall-arena", _P, ("pattern", 8, 3),
            (("K", 8), ("window", None), ("capacity", 0.5), ("capacity_of", "working_set"), ("opportunity", 3),
             ("reward", "stall"), ("cost", "h100_pcie5"), ("placement", "arena"))),
    EnvCase("prefetch/frees-noop", _P, ("small", 7),
            (("K", 8), ("window", 800), ("capacity", 0.3), ("capacity_of", "working_set"), ("opportunity", "access"),
             ("invalid_action", "noop"))),
    EnvCase("joint/default", _J, ("pattern", 8, 0), (("K", 8), ("window", None), ("capacity", 0.5),
                                                     ("capacity_of", "working_set"))),
    EnvCase("joint/access-a100", _J, ("pattern", 6, 4),
            (("K", 4), ("window", None), ("capacity", 0.4), ("capacity_of", "working_set"), ("opportunity", "access"),
             ("cost", "a100_pcie4"))),
    EnvCase("joint/sample-arena-bytes", _J, ("small", 11),
            (("K", 8), ("window", 500), ("capacity", 0.3), ("capacity_of", "working_set"), ("candidates", "sample"),
             ("placement", "arena"), ("reward", "bytes"))),
    EnvCase("joint/step-stall-gh200-wt", _J, ("pattern", 8, 5),
            (("K", 6), ("window", None), ("capacity", 0.5), ("capacity_of", "working_set"), ("opportunity", "step"),
             ("reward", "stall"), ("cost", "gh200_c2c"), ("write_policy", "write-through"))),
)


def env_cases() -> list[tuple[EnvCase, str]]:
    return [(c, ch) for c in ENV_CONFIGS for ch in CHOOSERS]


# ---------------------------------------------------------------------- d./e. the learned policy
LEARNED_GUARDS = {"learned": "shadow", "learned_trial": "trial", "learned_lru": "lru",
                  "learned_bare": "none"}
"""The ``PREFIX:PATH`` names of ``policies.registry.LEARNED_PREFIXES`` at 80edfc6 (the case ids
keep them), and the guard (``conf/policy/guard/``) each one names since."""
LEARNED_VARIANTS = tuple(LEARNED_GUARDS)


def learned_cases() -> list[ReplayCase]:
    out = []
    for tname in BUNDLED_ALL:
        for frac in (0.25, 0.5):
            for variant in LEARNED_VARIANTS:
                out.append(ReplayCase(f"{tname}/{frac}/{variant}", ("bundled", tname),
                                      f"{variant}:{POLICY_FILE}", frac, bare_loop=False))
    return out


QUALITY_CAPACITIES = (0.25, 0.5)
QUALITY_MAX_REQUESTS: int | None = 6000
"""``policies.training.quality.quality_rows`` on ``default_held_out(QUALITY_MAX_REQUESTS)``:
the benchmark of ``scripts/bench.py quality`` (its default set and capacities), every trace cut
to its first 6,000 rows since the traffic metrics (2026-12-02) solve FOO's LP per cell (a
minute on the full traces, a few seconds so)."""
