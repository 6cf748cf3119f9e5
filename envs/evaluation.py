"""The evaluation harness: traces x capacities x eviction policies x prefetchers x cost presets.

:func:`evaluate` takes a composed config (``conf/evaluate.yaml``, schema
:class:`envs.config.EvaluateConfig`) and returns ``{"rows": [...], "table": str, "csv": path,
"json": path, "plots": [paths], "out_dir": path}``; ``scripts/evaluate.py`` is its
``@hydra.main`` wrapper. One row per run, columns :data:`COLUMNS` (first) plus a few extra.

Every run drives the pool's one access loop (:meth:`Pool.replay`, compiled) with a policy from
:mod:`policies.registry`. Decision latency is time in ``policy.victim`` per eviction,
through :class:`TimedPolicy`; for an exported policy, the time of its network's decisions
(``LearnedPolicy.network_decision_ns``: under its default guard they happen in the guard's
shadow pool, not in the pool's victim calls).

Exported policies are given apart from the registry names: ``eval.learned=[FILE, ...]``, each
file run under every guard of ``eval.learned_guards`` (options of the config group
``conf/policy/guard/``, built through :func:`envs.config.build_guard`), before the other
policies, and named ``learned[GUARD]`` in the results and plots (``learned[GUARD]:NAME`` with
several files, NAME the file's name without ``.npz``; the ``policy_file`` column holds its path).
A file's prefetch head is a prefetcher: ``eval.prefetchers=[learned:PATH]`` (:data:`LEARNED_PREFETCH`),
beside every eviction policy (its features track the pool through
:class:`~policies.features.Observed`).

Each policy row carries ``traffic_bytes`` (bytes copied both ways, streamed accesses included),
``overhead`` (stall per unit of compute, with a preset and a trace with compute time) and
``gap_closed_misses`` / ``_traffic`` / ``_stall``: the share of the gap between LRU and an
offline bound that the policy closes (:mod:`envs.gaps`; ``eval.bounds`` adds the bound rows,
``row_kind`` tells them from policy rows; with a prefetcher ``gap_closed_misses`` counts
fetches, misses plus prefetches, which the misses bound bounds). lru always runs.

Interruptions (SIGINT, SIGTERM, a crash) lose at most the runs and bounds in progress: each
completed run (and each trace and capacity's bounds) is appended to ``out_dir/runs.jsonl`` as it
finishes (:mod:`envs.journal`), the final files are
replaced whole (temporary file + ``os.replace``), and the files of an earlier sweep in
``out_dir`` are moved to ``out_dir/previous/<time>/`` before the first run (unless it resumes),
so they never sit beside another sweep's runs and a failed sweep loses none of them.
``eval.resume=true`` reuses the completed runs whose trace, settings and spec match.
"""

from __future__ import annotations

import collections
import contextlib
import csv
import gc
import json
import logging
import math
import os
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from cachegym.allocator.errors import (
    CachegymError,
    ConfigError,
    OutputError,
    PolicyError,
    PoolError,
)
from cachegym.allocator.files import replace_atomically
from cachegym.allocator.pool import Pool
from cachegym.allocator.seams import Forwarding, eviction_order_of
from cachegym.allocator.sizes import parse_capacity, unit_of
from cachegym.allocator.stats import PoolStats
from cachegym.allocator.trace import MAX_TOTAL, Op, Trace
from cachegym.envs.common import CAPACITY_OF, check_clean_ahead
from cachegym.envs.config import (
    build_guard,
    enum_value,
    guard_node,
    instantiate,
    refuse_unknown_keys,
)
from cachegym.envs.gaps import (
    STALL_REF,
    add_gap_closed,
    bound_rows,
    check_rows_against_bounds,
    keep_best_stall_ref,
    stall_rows,
)
from cachegym.envs.journal import JOURNAL, RunJournal, digest
from cachegym.envs.sweep import in_multirun, results_dir, set_aside, write_config

if TYPE_CHECKING:
    from cachegym.allocator.pool import PoolView
    from cachegym.policies.base import EvictionPolicy

__all__ = ["COLUMNS", "evaluate", "run_one", "RunSpec", "TimedPolicy", "resolve_capacity",
           "write_results", "format_table", "plot_results",
           "check_capacities", "check_capacity_of", "check_presets", "check_bounds_kinds", "check_eviction_names", "plan_learned",
           "learned_name", "learned_prefetcher", "learned_path", "LEARNED_PREFETCH", "prefetch_label"]

log = logging.getLogger(__name__)

COLUMNS = (
    "trace", "capacity", "mode", "policy", "prefetch", "preset", "requests", "hits", "misses",
    "byte_misses", "miss_ratio", "byte_miss_ratio", "prefetches", "prefetch_hits", "late_prefetches",
    "late_stall_ns", "useless_prefetches", "bytes_h2d", "bytes_d2h", "traffic_bytes", "stall_ns", "total_ns",
    "overhead", "gap_closed_misses", "gap_closed_traffic", "gap_closed_stall", "gap_bound",
    "decision_p50_us", "decision_p99_us",
)
EXTRA_COLUMNS = ("row_kind", "capacity_spec", "policy_file", "placement", "evictions", "writebacks", "streamed",
                 "fallbacks", "guard_net_share", "guard_switches", "guard_decisions", "guard_retired",
                 "wall_s")
_ALWAYS = ("lru",)


# ---------------------------------------------------------------------- decision timing
class TimedPolicy(Forwarding):
    """``inner`` with each ``victim`` call timed (ns, in ``times_ns``); everything else is
    ``inner``'s (:class:`~allocator.seams.Forwarding`)."""

    labels_as_wrapped = True  # (errors name the policy timed)

    def __init__(self, inner: EvictionPolicy) -> None:
        super().__init__(inner)
        self.inner = inner
        self.times_ns: list[int] = []

    def victim(self, view: PoolView) -> int | None:
        t0 = time.perf_counter_ns()
        v = self.inner.victim(view)
        self.times_ns.append(time.perf_counter_ns() - t0)
        return v

    def percentiles_us(self) -> tuple[float, float]:
        return _percentiles_us(self.times_ns)


def _percentiles_us(times_ns: list[int]) -> tuple[float, float]:
    """(p50, p99) in microseconds of times in ns; NaN for none."""
    if not times_ns:
        return math.nan, math.nan
    p50, p99 = np.percentile(np.asarray(times_ns, np.float64), [50, 99])
    return float(p50) / 1e3, float(p99) / 1e3


# ---------------------------------------------------------------------- one run
@dataclass(frozen=True)
class RunSpec:
    """One run. ``policy`` is a registry name (or ``FILE.py:Class``), unless ``learned`` is set:
    then the exported policy file ``learned`` runs under guard ``guard`` (an option of
    ``conf/policy/guard/``) and ``policy`` is its name in the results (:func:`learned_name`)."""

    trace_name: str
    capacity: int
    capacity_spec: str
    mode: str
    policy: str
    prefetch: str
    preset: str
    learned: str | None = None
    guard: str = "shadow"
    label: str | None = None  # "stall_ref": the stall reference (envs/gaps.py), named so


def resolve_capacity(value: Any, trace: Trace, mode: str, capacity_of: str = "working_set") -> int:
    """Capacity in bytes (objects in ``objects`` mode): an integer or a size (``"512MiB"``) as it
    is, a number in (0, 1] with a fractional part or written as a float, or a percentage
    (``"10%"``), as a fraction of the working set (or of the peak live bytes). In ``objects``
    mode a size with a unit (``"1GiB"``) is refused: capacities count objects there."""
    if mode == "objects" and isinstance(value, str) and unit_of(value) not in ("", "%", None):
        raise ConfigError(f"eval.capacities: {value!r} is a size in bytes, but in objects mode "
                          "capacities count objects (every object size 1): give a number (1000) "
                          "or a share of the objects (10%, 0.1)")
    value = parse_capacity(value, "eval.capacities")
    if isinstance(value, float):
        check_capacity_of(capacity_of)
        t = trace if mode == "bytes" else trace.with_sizes(1)
        basis = t.working_set_bytes() if capacity_of == "working_set" else t.peak_live_bytes()
        return max(1, int(basis * float(value)))
    return int(value)


def warn_no_pressure(trace: Trace, capacity: int, spec: Any, name: str,
                     capacity_of: str = "working_set") -> bool:
    """Log a warning (and return ``True``) where ``capacity`` holds at least ``trace``'s peak
    live bytes: the pool need evict nothing, and every policy copies the same bytes (a recorded
    DL trace's working set counts every object it ever allocated, several times its peak: a
    share of it is often such a capacity)."""
    peak = trace.peak_live_bytes()
    if capacity < peak:
        return False
    hint = (" (a share of the working set: for a trace that frees what it allocates, as a "
            "recorded DL trace does, give shares of the peak: --capacity-of peak_live, "
            "eval.capacity_of=peak_live)" if capacity_of == "working_set"
            and trace.working_set_bytes() > peak else "")
    log.warning("trace %s at capacity %s (%d) holds its peak live bytes (%d): the pool need "
                "evict nothing there, and every policy copies the same bytes%s; give a smaller "
                "capacity", name, spec, capacity, peak, hint)
    return True


def check_capacity(value: Any, key: str = "eval.capacities") -> None:
    """ConfigError (naming config list ``key``) unless ``value`` is a positive number of bytes
    (an integer, or a size such as ``"512MiB"``) or a fraction in (0, 1] (``0.1``, ``"10%"``)."""
    if parse_capacity(value, key) > MAX_TOTAL:  # (parse_capacity refuses inf and nan)
        raise ConfigError(f"{key}: {value!r} is more than 2**60 bytes; no pool is that large")


def check_bounds_kinds(kinds: list[str], key: str = "eval.bounds") -> list[str]:
    """``kinds`` if every one is a bound of :mod:`policies.bounds` (``foo``, ``lfoo_l``,
    ``pfoo_l``) or ``auto`` (FOO on short traces, LFOO-L on long ones, PFOO-L beyond 5M
    requests: :func:`policies.bounds.auto_kind`)."""
    from cachegym.policies.bounds import KINDS

    allowed = ["auto", *KINDS]
    bad = [k for k in kinds if k not in allowed]
    if bad:
        raise ConfigError(f"{key}: {bad} unknown; allowed: {allowed} (auto: foo up to 30,000 "
                          "requests, lfoo_l up to 5,000,000, pfoo_l beyond; foo: the exact LP, "
                          "foo_l and foo_u, up to 200,000 requests; lfoo_l: its Lagrangian, "
                          "within a few % of it, any length; pfoo_l: its one-resource "
                          "relaxation, looser, the fastest), or [] for none")
    return list(dict.fromkeys(kinds))


def check_capacities(key: str, values: Sequence[Any]) -> None:
    """Every capacity of config list ``key`` valid (:func:`check_capacity`), and one at least."""
    if not values:
        raise ConfigError(f"{key}: the list is empty; give bytes or fractions like 0.1")
    for c in values:  # reject bad values before loading anything
        check_capacity(c, key)


def check_capacity_of(value: str, key: str = "eval.capacity_of") -> None:
    """ConfigError (naming config key ``key``) unless ``value`` is one of :data:`CAPACITY_OF`."""
    if value not in CAPACITY_OF:
        raise ConfigError(f"{key}: {value!r} is not allowed; allowed: {list(CAPACITY_OF)}")


def check_eviction_names(key: str, names: Sequence[str]) -> None:
    """Every name of config list ``key`` an eviction policy the evaluator can run (a registered
    name or a class of the user's; exported policy files are given apart, see
    :func:`plan_learned`), checked before any replay."""
    from cachegym.policies.registry import EVICTION_NAMES

    _check_names(key, names, EVICTION_NAMES, learned=True)


def _stats_row(spec: RunSpec, st: PoolStats, requested_bytes: int) -> dict[str, Any]:
    acc = st.accesses
    return {
        "trace": spec.trace_name, "capacity": spec.capacity, "mode": spec.mode,
        "policy": spec.policy, "prefetch": spec.prefetch, "preset": spec.preset,
        "requests": acc, "hits": st.hits, "misses": st.misses, "byte_misses": st.byte_misses,
        "miss_ratio": st.misses / acc if acc else math.nan,
        "byte_miss_ratio": st.byte_misses / requested_bytes if requested_bytes else math.nan,
        "prefetches": st.prefetches, "prefetch_hits": st.prefetch_hits,
        "late_prefetches": st.late_prefetches, "late_stall_ns": st.late_stall_ns,
        "useless_prefetches": st.useless_prefetches, "bytes_h2d": st.bytes_h2d,
        "bytes_d2h": st.bytes_d2h, "traffic_bytes": st.traffic_bytes, "stall_ns": st.stall_ns,
        "total_ns": st.total_ns, "overhead": st.overhead, "gap_closed_misses": math.nan,
        "gap_closed_traffic": math.nan, "gap_closed_stall": math.nan, "gap_bound": "",
        "row_kind": "policy", "decision_p50_us": math.nan,
        "decision_p99_us": math.nan, "capacity_spec": spec.capacity_spec,
        "evictions": st.evictions, "writebacks": st.writebacks, "streamed": st.streamed,
        "fallbacks": st.fallbacks, "policy_file": spec.learned,
    }


def run_one(
    trace: Trace,
    spec: RunSpec,
    *,
    placement: str = "bytes",
    write_policy: str = "write-back",
    oversize: str = "bypass",
    decision_timing: bool = True,
    seed: int = 0,
    allocator_cfg: Any = None,
) -> dict[str, Any]:
    """Replay ``trace`` (sizes already 1 in ``objects`` mode) for one run; returns its row.

    ``allocator_cfg`` (a config node with ``_target_``) builds the pool through
    :func:`envs.config.instantiate`; ``None`` builds :class:`Pool` directly.
    """
    from cachegym.policies.features import Observed
    from cachegym.policies.registry import make_eviction, make_prefetch

    preset = None if spec.preset == "none" else spec.preset
    prefetch = None if spec.prefetch == "none" else spec.prefetch
    reads = trace.op != Op.FREE
    requested = int(trace.size[reads].sum())
    t0 = time.perf_counter()
    if spec.learned is not None:
        guard = build_guard(spec.guard)  # None: the guard "none", the network alone
        policy = make_eviction("learned", path=spec.learned, guard=False if guard is None else guard,
                               seed=seed)
    else:
        policy = make_eviction(spec.policy, trace=trace, seed=seed)
    # an exported policy times its network's decisions itself (under its default guard they
    # happen in the guard's shadow pool, not in the pool's victim calls)
    own_timing = decision_timing and hasattr(policy, "network_decision_ns")
    if own_timing:
        policy.record_latency = True  # type: ignore[attr-defined]
    timed = TimedPolicy(policy) if decision_timing and not own_timing else None
    pol: Any = timed if timed is not None else policy
    learned_pf = learned_prefetcher(prefetch) if prefetch is not None else None
    if learned_pf is not None:  # its features track the pool's hooks, whoever evicts
        pf: Any = learned_pf
        pol = Observed(pol, learned_pf.tracker)  # type: ignore[arg-type]
    else:
        pf = make_prefetch(prefetch, trace=trace) if prefetch is not None else None
    if allocator_cfg is not None:
        pool = instantiate(allocator_cfg, capacity=spec.capacity, policy=pol, prefetcher=pf,
                           cost=preset)
    else:
        pool = Pool(spec.capacity, pol, prefetcher=pf, cost=preset, placement=placement,  # type: ignore[arg-type]
                    write_policy=write_policy, oversize=oversize)  # type: ignore[arg-type]
    if pool.view.clean_ahead and not pool.cost.instant and eviction_order_of(pol) is None:
        log.warning("allocator.clean_ahead: policy %r has no eviction_order() (its next victims), so "
                    "its pool cleans nothing ahead: its row runs without clean-ahead", spec.policy)
    try:
        st = _replay(pool, trace)
    except (PolicyError, PoolError) as e:  # name the run and the request
        at = "" if e.row is None else f", request {e.row} (key {int(trace.key[e.row])})"
        e.args = (f"policy {spec.policy!r}{_with_prefetcher(spec)} on trace {spec.trace_name!r} "
                  f"at capacity {spec.capacity_spec} ({spec.capacity} bytes){at}: {e}",)
        raise
    row = _stats_row(spec, st, requested)
    if timed is not None:
        row["decision_p50_us"], row["decision_p99_us"] = timed.percentiles_us()
    elif own_timing:
        row["decision_p50_us"], row["decision_p99_us"] = _percentiles_us(policy.network_decision_ns)  # type: ignore[attr-defined]
    guard = getattr(policy, "guard", None)
    if guard is not None:  # who decided: the network or which expert, and how often it changed
        # (the network's share, exact; none where nothing was evicted: no one decided anything)
        row.update(guard_net_share=guard.network_share() if st.evictions else math.nan,
                   guard_switches=guard.switches,
                   guard_decisions=guard.decision_shares() if st.evictions else "",
                   guard_retired=" ".join(sorted(getattr(guard, "retired", ()))))  # experts that
        # stopped running, far behind the best (ShadowGuard's retire)
    row.update(placement=placement, wall_s=time.perf_counter() - t0)
    if spec.label == "stall_ref":
        row.update(policy=f"stall_ref[{spec.policy}+{spec.prefetch}]", row_kind="stall_reference")
    return row



# ---------------------------------------------------------------------- the sweep
def _check_names(key: str, names: Sequence[str], allowed: Sequence[str], learned: bool) -> None:
    """Every name of config list ``key`` is usable, checked before any replay: the eviction list
    (``learned``: a class of the user's needs ``victim``; exported policy files are given apart,
    see :func:`plan_learned`) or the prefetch list (a class of the user's needs ``prefetch``)."""
    from cachegym.policies.registry import check_import_spec, is_import_spec, old_learned_name_error

    if not names:
        raise ConfigError(f"{key}: the list is empty; allowed values: {', '.join(allowed)}")
    for n in names:
        if not isinstance(n, str):
            raise ConfigError(f"{key}: {n!r} is not a name; allowed: {', '.join(allowed)}")
        old = old_learned_name_error(n, key) if learned else None
        if old is not None:
            raise old
        if learned and n.strip().lower() == "learned":
            raise ConfigError(f"{key}: 'learned' needs its file: give eval.learned=[PATH] (and "
                              "eval.learned_guards=[shadow,...] for its guards) instead")
        if is_import_spec(n):  # a class of the user's: found and built now, before any replay
            check_import_spec(n, "victim" if learned else "prefetch")
            continue
        if n not in allowed:
            import difflib

            extra = (" (exported policy files: eval.learned=[PATH])" if learned
                     else ", learned:PATH (a policy file with a prefetch head)")
            near = difflib.get_close_matches(n.strip().lower(), list(allowed), n=1)
            hint = (f" (did you mean {near[0]!r}?"
                    f"{' names are lower case' if near[0] == n.strip().lower() else ''})" if near else "")
            raise ConfigError(f"{key}: unknown value {n!r}{hint}; allowed: {', '.join(allowed)}"
                              f"{extra} or FILE.py:Class / module:Class (a class of your own)")


def check_presets(presets: Sequence[str], key: str = "eval.presets") -> None:
    """Every preset of config list ``key`` known (or a calibrated .json file), and one at least."""
    from cachegym.allocator.cost import PRESETS

    allowed = ["none", *sorted(PRESETS)]
    if not presets:
        raise ConfigError(f"{key}: the list is empty; allowed: {', '.join(allowed)}")
    for p in presets:
        if p in allowed:
            continue
        if str(p).endswith(".json"):
            path = os.path.expanduser(str(p))
            if not os.path.isfile(path):
                raise ConfigError(f"{key}: preset file {p!r}: no such file (from {os.getcwd()}); "
                                  f"a preset is one of {', '.join(allowed)} or a .json file "
                                  "scripts/gpu_check.py wrote")
            from cachegym.allocator.cost import load_preset

            try:  # read now: a bad file is refused before an earlier run's results are moved
                load_preset(path)
            except ConfigError as e:
                raise ConfigError(f"{key}: {e}") from None
            continue
        raise ConfigError(f"{key}: unknown preset {p!r}; allowed: "
                          f"{', '.join(allowed)} or a calibrated preset .json file")


LEARNED_PREFETCH = "learned:"
"""``eval.prefetchers`` entry ``learned:PATH``: the prefetch head of the exported policy file
``PATH`` (a file without one is refused: it would prefetch nothing), beside each eviction
policy of the sweep."""


def learned_path(name: str) -> str | None:
    """The policy file ``learned:PATH`` names (``~`` expanded; ``LEARNED:`` too, as for
    policies); ``None`` for any other name."""
    if name[:len(LEARNED_PREFETCH)].lower() != LEARNED_PREFETCH:
        return None
    return os.path.expanduser(name[len(LEARNED_PREFETCH):])


def learned_prefetcher(name: str, key: str = "prefetch") -> Any:
    """The :class:`~policies.learned.LearnedPolicy` (network alone) that ``learned:PATH`` names,
    whose :meth:`~policies.learned.LearnedPolicy.prefetch` is the file's prefetch head; ``None``
    for any other name. A missing or invalid file is refused naming ``key``."""
    path = learned_path(name)
    if path is None:
        return None
    from cachegym.allocator.errors import PolicyFileError
    from cachegym.policies.learned import LearnedPolicy

    if not path or not os.path.isfile(path):
        raise ConfigError(f"{key}: {name!r}: learned policy file {path!r} "
                          f"{'is a directory' if path and os.path.isdir(path) else 'does not exist'}; give "
                          "learned:PATH with PATH a policy file (scripts/train.py writes one)")
    try:
        pol = LearnedPolicy.load(path, guard="none")
    except PolicyFileError as e:
        raise PolicyFileError(f"{key}: {name!r}: {e}") from None
    if pol.prefetch_head is None:  # it would prefetch nothing: a row equal to "none"
        from cachegym.policies.registry import PREFETCH_NAMES

        raise ConfigError(f"{key}: {name!r}: policy file {path!r} has no prefetch head (it was "
                          "trained with env=evict); train with env=joint (the main job, make "
                          "demo, exports such a file) or name a heuristic prefetcher "
                          f"({', '.join(PREFETCH_NAMES)})")
    return pol


def learned_name(guard: str, file_label: str | None = None) -> str:
    """The results' name of an exported policy under ``guard``: ``learned[shadow]``, or
    ``learned[shadow]:policy`` where several files are evaluated (``file_label``)."""
    return f"learned[{guard}]" + (f":{file_label}" if file_label else "")


def plan_learned(files: Sequence[str], guards: Sequence[str], key: str = "eval"
                 ) -> list[tuple[str, str, str]]:
    """``(name, file, guard)`` of every run of exported policy ``files`` under every guard of
    ``guards`` (options of ``conf/policy/guard/``), files first, checked before any replay: the
    files load, the guards are options (``key``: the config section that holds ``learned`` and
    ``learned_guards``, in the errors). Several files are told apart by their names."""
    for g in guards:  # (checked with no file too: a typo is a typo)
        guard_node(g, f"{key}.learned_guards")
    if not files:
        return []
    guards = list(dict.fromkeys(guards))
    if not guards:
        raise ConfigError(f"{key}.learned_guards: the list is empty; give guards of the exported "
                          f"policies (options of conf/policy/guard/, e.g. [shadow,none])")
    for g in guards:
        guard_node(g, f"{key}.learned_guards")
    from cachegym.policies.learned import LearnedPolicy

    files = list(dict.fromkeys(os.path.expanduser(f) for f in files))
    for f in files:
        if not os.path.isfile(f):
            raise ConfigError(f"{key}.learned: learned policy file {f!r} "
                              f"{'is a directory' if os.path.isdir(f) else 'does not exist'}")
        LearnedPolicy.load(f)  # a corrupt or mismatched file fails now, before any replay
    labels = _distinct_tails(files) if len(files) > 1 else [None]
    return [(learned_name(g, lab), f, g) for f, lab in zip(files, labels) for g in guards]


def plan_policies(policies: Iterable[str]) -> list[str]:
    """The configured policies, in order, with lru (the reference of every gap) added when
    missing."""
    out = list(dict.fromkeys(str(p) for p in policies))
    for p in _ALWAYS:
        if p not in out:
            out.append(p)
    return out


def check_oversized(trace: Trace, capacity: int, spec: Any, tname: str,
                    oversize: str = "bypass") -> None:
    """Warn (with the counts) when some of ``trace``'s requests are larger than ``capacity``:
    the pool streams them, nothing of them stays resident. Refuse when all of them are: such a
    run measures nothing but the link; and under ``oversize="error"`` when any is (each run
    would stop at the first of them)."""
    reads = trace.op != Op.FREE
    big = reads & (trace.size > capacity)
    n_big = int(big.sum())
    if not n_big:
        return
    n = int(reads.sum())
    largest = int(trace.size[reads].max())
    if n_big == n:
        raise ConfigError(f"eval.capacities: {spec!r} is {capacity} bytes for trace {tname!r}, below "
                          f"every object it requests (the smallest is {int(trace.size[reads].min())} "
                          "bytes): nothing could ever be resident; raise the capacity")
    n_obj = len(np.unique(trace.object_ids()[big]))
    if oversize == "error":
        first = int(np.flatnonzero(big)[0])
        raise ConfigError(f"eval.capacities: {spec!r} is {capacity} bytes for trace {tname!r}, and "
                          f"{n_big} of its {n} requests ({n_obj} objects, the first at row {first}, "
                          f"key {int(trace.key[first])}, {int(trace.size[first])} bytes) are larger; "
                          "under allocator.oversize=error each run would stop there: raise the "
                          "capacity, or set allocator.oversize=bypass to stream them")
    log.warning("trace %s, capacity %s = %d bytes: %d of %d requests (%d objects) are larger than "
                "the capacity (the largest object has %d bytes) and are streamed, never resident",
                tname, spec, capacity, n_big, n, n_obj, largest)


def evaluate(cfg: Any, *, out_dir: str | None = None) -> dict[str, Any]:
    """Run the sweep that ``cfg`` describes and write results.csv / results.json (and plots),
    with the config snapshot ``config.yaml``, in ``out_dir`` if given, else in
    :func:`envs.sweep.results_dir` of ``cfg``."""
    from cachegym.policies.registry import PREFETCH_NAMES

    refuse_unknown_keys(cfg)
    ev = cfg.eval
    mode = str(enum_value(ev.mode))
    if mode not in ("bytes", "objects"):
        raise ConfigError(f"eval.mode: {mode!r} is not allowed; allowed: bytes, objects")
    learned = plan_learned([str(p) for p in ev.learned], [str(g) for g in ev.learned_guards])
    names = [str(p) for p in ev.policies]
    if names or not learned:  # with exported policies, the registry's list may be empty
        check_eviction_names("eval.policies", names)
    policies: list[tuple[str, str | None, str]] = [
        *learned, *((p, None, "shadow") for p in plan_policies(names))]
    prefetchers = [str(p) for p in ev.prefetchers]
    for p in prefetchers:  # exported files' prefetch heads: each loads, before any replay
        learned_prefetcher(p, "eval.prefetchers")
    heuristic = [p for p in prefetchers if learned_path(p) is None]
    if heuristic or not prefetchers:
        _check_names("eval.prefetchers", heuristic, PREFETCH_NAMES, learned=False)
    presets = [str(p) for p in ev.presets]
    check_presets(presets)
    capacities = list(ev.capacities)
    check_capacities("eval.capacities", capacities)
    named = collections.Counter(map(str, capacities))  # (each cell ran twice, two rows)
    if len(named) < len(capacities):
        log.warning("eval.capacities names %s more than once: each runs once",
                    ", ".join(c for c, n in named.items() if n > 1))
        once: dict[str, Any] = {}
        for c in capacities:
            once.setdefault(str(c), c)
        capacities = list(once.values())
    check_capacity_of(str(ev.capacity_of))
    alloc = cfg.allocator
    placement = str(enum_value(alloc.placement))
    write_policy = str(enum_value(alloc.write_policy))
    oversize = str(enum_value(alloc.oversize))
    if check_clean_ahead("allocator.clean_ahead", alloc.get("clean_ahead", 0.0)) and all(
            p == "none" for p in presets):
        raise ConfigError("allocator.clean_ahead cleans ahead under a timing preset, and "
                          "eval.presets has none: add one (e.g. h100_pcie5) or leave "
                          "allocator.clean_ahead at 0")
    traces: list[Trace] = instantiate(cfg.trace)

    bounds = check_bounds_kinds([str(b) for b in ev.get("bounds", [])])
    jobs = check_jobs(ev.get("jobs", 1))
    names = _unique_names([t.name for t in traces])
    runs: list[tuple[Trace, RunSpec]] = []
    groups: list[tuple[Trace, str, int, str]] = []  # (trace, name, capacity, spec): bound rows
    for trace, tname in zip(traces, names):
        t = trace if mode == "bytes" else trace.with_sizes(1)
        for c in capacities:
            cap = resolve_capacity(c, trace, mode, str(ev.capacity_of))
            check_oversized(t, cap, c, tname, oversize)
            warn_no_pressure(t, cap, c, tname, str(ev.capacity_of))
            groups.append((t, tname, cap, str(c)))
            for preset in presets:
                for pf in prefetchers:
                    for pol, path, guard in policies:
                        runs.append((t, RunSpec(tname, cap, str(c), mode, pol, pf, preset,
                                                learned=path, guard=guard)))
                if preset != "none" and bounds:  # the stall reference's candidates (envs/gaps.py)
                    for ev_, pf_ in STALL_REF:
                        runs.append((t, RunSpec(tname, cap, str(c), mode, ev_, pf_, preset,
                                                label="stall_ref")))

    from tqdm.auto import tqdm

    # (made once the sweep is known good: a refused config leaves no empty folder behind)
    out_dir = results_dir(cfg, "evaluate", exact=out_dir)
    # the files of an earlier sweep here describe another sweep: set aside (out_dir/previous/)
    # before the first run, unless this one resumes it
    if not ev.get("resume", False):
        set_aside(out_dir, ["results.csv", "results.json", JOURNAL, "config.yaml",
                            *sorted(n for n in os.listdir(out_dir)
                                    if n.startswith("metrics__") and n.endswith(".png"))])
    digests: dict[int, str] = {}  # each trace's content, hashed once for both kinds of key
    keys = _run_keys(cfg, runs, digests)
    options = dict(placement=placement, write_policy=write_policy, oversize=oversize,
                   decision_timing=bool(ev.decision_timing), seed=int(cfg.seed),
                   allocator_cfg=alloc)
    # the bounds' rows (each an offline solve, recomputed on a resume), after the runs' tasks
    tasks = run_tasks([(t, spec, options) for t, spec in runs])
    for t, tname, cap, c in groups if bounds else ():
        tasks.append((bound_rows, (t, tname, cap, c, mode, bounds), {},
                      f"the bounds of trace {tname!r} at capacity {c}"))
        for preset in presets:
            if preset != "none":
                tasks.append((stall_rows, (t, tname, cap, c, mode, preset), {},
                              f"the stall bound of trace {tname!r} at capacity {c} under {preset}"))
    n_runs = len(runs)
    bkeys = _bound_keys(tasks[n_runs:], digests)  # (the bounds are journaled too: a long trace's take
    # minutes, and a resume takes them as it takes the runs)
    done: dict[int, dict[str, Any]] = {}
    got: dict[int, list[dict[str, Any]]] = {}
    order = {(tname, cap): i for i, (_, tname, cap, _) in enumerate(groups)}
    with RunJournal(out_dir, resume=bool(ev.get("resume", False))) as journal:
        for i, key in enumerate(keys + bkeys):
            rec = journal.get(key)
            if rec is None:
                continue
            run = i < n_runs
            why = _not_a_row(rec, order) if run else _not_bound_rows(rec, order)
            if why is not None:  # (an edited or damaged journal: the task runs again)
                log.warning("%s: the record of %s (%s) is no %s (%s); it runs again",
                            journal.path, f"run {i + 1}" if run else "bounds", tasks[i][3],
                            "result row" if run else "set of bound rows", why)
            elif run:
                done[i] = rec
            else:
                got[i - n_runs] = rec["bound_rows"]
        if done or got:
            log.info("resuming: %d of %d runs are already in %s%s", len(done), len(runs),
                     journal.path, f" (and {len(got)} of {len(bkeys)} bound tasks)" if bkeys else "")
        # one set of worker processes for the runs and the bounds, the bounds (offline solves,
        # often the longest tasks) started first
        todo = ([i for i in range(n_runs, len(tasks)) if i - n_runs not in got]
                + [i for i in range(n_runs) if i not in done])
        bar = tqdm(total=len(tasks), initial=len(done) + len(got), desc="evaluate", unit="task",
                   disable=not ev.progress)
        try:
            t_start = time.perf_counter()
            for finished, (i, res) in enumerate(in_workers(tasks, todo, jobs, bar), 1):
                if i < n_runs:
                    with _writing(out_dir, len(done)):
                        journal.add(keys[i], res)
                    done[i] = res
                else:
                    with _writing(out_dir, len(done)):
                        journal.add(bkeys[i - n_runs], {"bound_rows": res})
                    got[i - n_runs] = res
                bar.update(1)
                if not ev.progress:  # (no bar: a log line per task, for a log file or CI)
                    log.info("%d of %d tasks done (%s) after %.0f s", finished, len(todo),
                             tasks[i][3], time.perf_counter() - t_start)
        except KeyboardInterrupt:
            if in_multirun():  # (the job's out_dir given to the -m command nests job_N again)
                log.warning("interrupted after %d of %d runs; the completed ones are in %s: run "
                            "the same -m command with eval.resume=true to finish the sweep",
                            len(done), len(runs), journal.path)
            else:
                log.warning("interrupted after %d of %d runs; the completed ones are in %s: run "
                            "the same command with eval.resume=true out_dir=%s (cachegym sim: "
                            "--resume --out %s) to finish the sweep", len(done), len(runs),
                            journal.path, out_dir, out_dir)
            raise
        finally:
            bar.close()
    rows = [done[i] for i in range(n_runs)]
    for j in range(len(tasks) - n_runs):
        rows.extend(got[j])
    rows = keep_best_stall_ref(rows)
    rows.sort(key=lambda r: order[(r["trace"], r["capacity"])])  # (stable: bounds after runs)
    add_gap_closed(rows)
    with _writing(out_dir, n_runs):
        csv_path, json_path = write_results(rows, out_dir)
        write_config(cfg, out_dir)
    check_rows_against_bounds(rows)  # (after writing: a violation keeps the rows to look at)
    with _writing(out_dir, n_runs):
        plots = plot_results(rows, out_dir) if ev.plots else []
    table = format_table(rows)
    log.info("wrote %s, %s and %d plot(s)", csv_path, json_path, len(plots))
    return {"rows": rows, "table": table, "csv": csv_path, "json": json_path, "plots": plots,
            "out_dir": out_dir}


@contextlib.contextmanager
def _writing(out_dir: str, runs_kept: int) -> Iterator[None]:
    """Writing the sweep's files in ``out_dir``: an :class:`OSError` (a full disk, a folder made
    read-only) is an :class:`~allocator.errors.OutputError` that says where, what is kept (the
    completed runs, in the journal) and how to go on (a traceback before)."""
    try:
        yield
    except OutputError:
        raise
    except OSError as e:
        where = e.filename or out_dir
        raise OutputError(f"cannot write {where} ({e.strerror or e}): the {runs_kept} runs "
                          f"completed are kept in {os.path.join(out_dir, JOURNAL)}; make room and "
                          f"run the same command with eval.resume=true out_dir={out_dir} "
                          f"(cachegym sim: --resume --out {out_dir})") from e


_TEXT_COLUMNS = ("trace", "mode", "policy", "prefetch", "preset")


def _not_a_row(row: Any, groups: Collection[tuple[str, Any]]) -> str | None:
    """Why a row read back from the journal is not one this sweep's runs make (``None``: it
    is): every column of :data:`COLUMNS` but the gaps (added later), the text columns strings,
    the others numbers (or null), and its trace and capacity one of ``groups``."""
    if not isinstance(row, dict):
        return "not an object"
    missing = [c for c in COLUMNS if c not in row and not c.startswith("gap_")]
    if missing:
        return f"no {', '.join(missing)}"
    for c in COLUMNS:
        if c.startswith("gap_"):  # (filled in after the runs; a run's own are blank)
            continue
        v = row.get(c)
        text = c in _TEXT_COLUMNS
        if not (isinstance(v, str) if text else v is None or v == ""
                or (isinstance(v, (int, float)) and not isinstance(v, bool))):
            return f"{c} is {v!r}, not {'a string' if text else 'a number'}"
    if (row["trace"], row["capacity"]) not in groups:
        return f"trace {row['trace']!r} at capacity {row['capacity']!r} is none of this sweep's"
    return None


def _not_bound_rows(rec: Any, groups: Collection[tuple[str, Any]]) -> str | None:
    """Why a bound task's record read back from the journal is not its rows (``None``: it is):
    ``{"bound_rows": [row, ...]}``, each row as :func:`_not_a_row` wants it."""
    rows = rec.get("bound_rows") if isinstance(rec, dict) else None
    if not isinstance(rows, list):
        return "no bound_rows list"
    for r in rows:
        why = _not_a_row(r, groups)
        if why is not None:
            return why
    return None


def check_jobs(jobs: Any, key: str = "eval.jobs") -> int:
    """``jobs`` (the config value ``key``) as a number of worker processes (0: one per CPU
    core this process may run on), or a :class:`ConfigError` naming ``key``."""
    if isinstance(jobs, bool) or not isinstance(jobs, (int, np.integer)) or jobs < 0:
        raise ConfigError(f"{key}: {jobs!r} is not allowed; give the number of runs to replay "
                          "at once (1: one after the other; 0: one per CPU core)")
    return int(jobs) or usable_cores()


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity where the platform says, e.g. a
    container's or a batch job's share of a larger machine; else every core)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)


_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
"""The thread counts of the numerical libraries that the worker processes of :func:`in_workers`
set to 1 where the user has not."""

# A worker process's tasks, set once per worker (_start_worker): (function, args, kwargs, label).
_WORK: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], str]] | None = None


def _start_worker(tasks: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], str]],
                  env: dict[str, str], counter: Any = None, stop: Any = None,
                  parent: int | None = None) -> None:
    global _WORK, _PROGRESS
    _WORK = tasks
    os.environ.update(env)  # (a forkserver's children inherit its environment, not the caller's)
    if stop is not None and parent is not None:
        import threading

        threading.Thread(target=_watch, args=(stop, parent), daemon=True,
                         name="cachegym-worker-watch").start()
    if counter is not None:  # the runs' rows replayed, added to the count all workers share

        def report(n: int) -> None:
            with counter.get_lock():
                counter.value += n

        _PROGRESS = report


def _watch(stop: Any, parent: int) -> None:
    """A worker's watch: it ends the worker process, whatever its task is doing, once the sweep
    stops (``stop`` set: an interruption or another task's error) or the process that started
    the sweep is gone (killed: its workers would otherwise run on, orphaned)."""
    while not stop.value:  # (a lock-free byte: a worker killed mid-read leaves no lock held)
        time.sleep(0.25)
        try:
            os.kill(parent, 0)
        except OSError:  # gone (or the id now another user's process: not ours any more)
            break
    os._exit(1)


def _rows_done(done: int, rows: int) -> str:
    """``"1,310,720 of 3,400,000 trace rows"``: the progress of a sweep's runs (rows replayed,
    frees included: the results' ``requests`` count the reads and writes alone)."""
    return f"{done:,} of {rows:,} trace rows"


GC_SHARE = 0.05
"""At most this share of a process's time in tasks goes to :func:`_collected`'s collections."""
GC_GROWTH = 256 << 20
"""Bytes by which the process's resident memory may grow after one of :func:`_collected`'s
collections before the next."""
_GC = [0.0, -math.inf, 0.0]  # the last full collection's cost (s), when it ended, resident bytes then


def _collected(result: Any) -> Any:
    """``result``, after a full garbage collection where the tasks since the last one took at
    least ``1 / GC_SHARE`` times what that one cost, or the process's resident memory
    (:func:`~policies.footprint.rss_bytes`) grew by :data:`GC_GROWTH` since: a run's pool and
    its view refer to each other, so a finished run's records (hundreds of MB on a trace of
    millions of objects) would otherwise wait for the collector, and a sweep's memory would
    grow with its runs (3M requests of 2.5M objects: 0.9 GB per run, 4.5 GB after 16 runs).
    Such a run is collected after it; short runs every few of them (with torch imported a full
    collection takes ~0.2 s: after each of the quality benchmark's 126 short runs it was over
    half the benchmark's time)."""
    from cachegym.policies.footprint import rss_bytes

    began = time.perf_counter()
    if began - _GC[1] >= _GC[0] / GC_SHARE or rss_bytes() - _GC[2] >= GC_GROWTH:
        gc.collect()
        _GC[1] = time.perf_counter()
        _GC[0] = _GC[1] - began
        _GC[2] = float(rss_bytes())
    return result


def _task_in_worker(i: int) -> tuple[int, Any]:
    """``(i, result)`` of the worker's task ``i``. Its error goes back as it is where the caller
    can rebuild it (a cachegym error, or one of Python's own types), else as a
    :class:`~allocator.errors.CachegymError` that names it: a class from a user's file (loaded
    under a name of this process's making) could not be unpickled there."""
    assert _WORK is not None
    fn, args, kwargs, label = _WORK[i]
    try:
        return i, _collected(fn(*args, **kwargs))
    except (CachegymError, KeyboardInterrupt):
        raise
    except Exception as e:
        if type(e).__module__ == "builtins":
            raise
        raise CachegymError(f"{label} raised {type(e).__module__}.{type(e).__name__}: {e}") from None


def in_workers(tasks: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], str]],
               todo: Sequence[int], jobs: int, bar: Any = None) -> Iterable[tuple[int, Any]]:
    """``(i, fn(*args, **kwargs))`` of each task ``i`` in ``todo`` (``tasks[i]``: ``(fn, args,
    kwargs, label)``, ``fn`` a module's function, ``label`` what the task is, for errors and
    ``bar``), as each completes: one after the other here when ``jobs`` is 1 (or one task is
    left), else in ``jobs`` worker processes (``forkserver`` where the platform has it, else
    ``spawn``: never a fork of this process, whose threads a fork would not carry), each given
    the tasks once. A task's error is raised here as it was raised there (its type, message and
    data); the tasks not started are dropped (the completed ones are the caller's). ``bar`` (a
    tqdm bar, optional) names the task in progress when they run here, and counts the trace
    rows the :func:`run_one` tasks among them have replayed so far (reported every
    :data:`PROGRESS_ROWS` rows: a long run moves the bar's count)."""
    global _PROGRESS
    rows = 0 if bar is None else sum(len(tasks[i][1][0]) for i in todo if tasks[i][0] is run_one)
    beat = _heartbeat(bar)
    if jobs <= 1 or len(todo) <= 1:
        done = 0
        label = ""

        def show(refresh: bool = True) -> None:
            bar.set_postfix_str(f"{_rows_done(done, rows)}, {label}" if rows else label,
                                refresh=refresh)
            if rows:
                beat(f"{_rows_done(done, rows)}, {label}")

        def report(n: int) -> None:
            nonlocal done
            done += n
            show()

        before = _PROGRESS
        _PROGRESS = report if rows else None
        try:
            for i in todo:
                fn, args, kwargs, label = tasks[i]
                if bar is not None:
                    show(refresh=False)
                yield i, _collected(fn(*args, **kwargs))
        finally:
            _PROGRESS = before
        return
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
    # one thread of BLAS / OpenMP per worker (the processes are the parallelism; a pool of each
    # library's threads per core in each worker would oversubscribe a many-core machine),
    # unless the user says otherwise: set while the workers start (on submit), and by each
    saved = {v: os.environ.get(v) for v in _THREAD_VARS}
    env = {v: "1" if old is None else old for v, old in saved.items()}
    ctx = mp.get_context(method)
    counter = ctx.Value("q", 0) if rows else None  # rows replayed, all workers
    stop = ctx.RawValue("b", 0)  # 1 when the sweep stops early: the workers end (_watch)
    workers = ProcessPoolExecutor(min(jobs, len(todo)), ctx, _start_worker,
                                  (tasks, env, counter, stop, os.getpid()))
    os.environ.update(env)
    try:
        pending = {workers.submit(_task_in_worker, i): i for i in todo}
    finally:
        for v, old in saved.items():
            if old is None:
                os.environ.pop(v, None)
    try:
        while pending:
            finished, _ = wait(pending, timeout=None if counter is None else 1.0,
                               return_when=FIRST_COMPLETED)
            if counter is not None:
                bar.set_postfix_str(_rows_done(counter.value, rows))
                beat(_rows_done(counter.value, rows))
            for f in finished:
                i = pending.pop(f)
                try:
                    yield f.result()
                except BrokenProcessPool:
                    left = [tasks[j][3] for j in sorted({i, *pending.values()})]
                    raise CachegymError(
                        f"a worker process ended abruptly (out of memory: each of the {jobs} workers "
                        "holds the traces; a signal; or a policy that ends its process) while "
                        f"one of these {len(left)} tasks ran: {'; '.join(left[:jobs + 2])}"
                        f"{'; ...' if len(left) > jobs + 2 else ''}. The completed runs are kept "
                        "(eval.resume=true); run again with fewer jobs, or the suspect policy "
                        "alone (eval.jobs=1 names a policy's error)") from None
    finally:  # (an error or an interruption: the queued tasks are dropped, the running ones
        # end at once, their workers with them, rather than when their task is done)
        if pending:
            stop.value = 1
        workers.shutdown(wait=not pending, cancel_futures=True)


PROGRESS_ROWS = 1 << 17
"""Rows of a trace :func:`run_one` replays between two reports of its progress."""

HEARTBEAT_S = 60.0
"""Without a progress bar (``eval.progress=false``, a log file, CI), the seconds between two log
lines of the rows replayed so far while tasks run (a long run printed nothing for minutes)."""


def _heartbeat(bar: Any) -> Callable[[str], None]:
    """What logs ``text`` (the progress) at most every :data:`HEARTBEAT_S` seconds where ``bar``
    is disabled (or absent); nothing where the bar shows it."""
    if bar is not None and not getattr(bar, "disable", False):
        return lambda text: None
    last = time.monotonic()

    def beat(text: str) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= HEARTBEAT_S:
            last = now
            log.info("still running: %s", text)

    return beat

# Where run_one reports the rows it has replayed (a callable of their number), or None:
# in_workers sets it while its tasks run (in this process, or in each worker process).
_PROGRESS: Callable[[int], None] | None = None


def _replay(pool: Pool, trace: Trace) -> Any:
    """``pool.replay(trace)``, in slices of :data:`PROGRESS_ROWS` rows reported to
    ``_PROGRESS`` (the same loop and the same counts: the pool's clock runs on across
    slices)."""
    report = _PROGRESS
    n = len(trace)
    if report is None or n <= PROGRESS_ROWS:
        st = pool.replay(trace)
        if report is not None:
            report(n)
        return st
    st = None
    for lo in range(0, n, PROGRESS_ROWS):
        hi = min(lo + PROGRESS_ROWS, n)
        st = pool.replay(trace, lo, hi)
        report(hi - lo)
    return st


def run_tasks(runs: list[tuple[Trace, RunSpec, dict[str, Any]]]
              ) -> list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], str]]:
    """The tasks of :func:`in_workers` that replay ``runs`` (each a trace, a run's spec and the
    keyword arguments of :func:`run_one`): each task's result is the run's row."""
    return [(run_one, (t, spec), options,
             f"run {spec.policy!r}{_with_prefetcher(spec)} on trace {spec.trace_name!r} at "
             f"capacity {spec.capacity_spec}") for t, spec, options in runs]


def _with_prefetcher(spec: RunSpec) -> str:
    """`` with prefetcher 'P'`` where the run has one (several may share a policy's name)."""
    return "" if spec.prefetch in ("", "none") else f" with prefetcher {spec.prefetch!r}"


def _run_keys(cfg: Any, runs: list[tuple[Trace, RunSpec]], traces: dict[int, str]) -> list[str]:
    """One key per run: what decides its row (the trace's content, the run's spec, the pool's
    and replay's settings, the seed, an exported policy file's bytes), so that a resumed sweep
    reuses a run only where running it again would give the same counts."""
    from dataclasses import asdict

    from omegaconf import OmegaConf

    alloc = cfg.allocator
    common = {"allocator": OmegaConf.to_container(alloc, resolve=True) if OmegaConf.is_config(alloc) else alloc,
              "seed": int(cfg.seed),
              "decision_timing": bool(cfg.eval.decision_timing), "columns": list(COLUMNS)}
    files: dict[str, str] = {}
    keys = []
    for t, spec in runs:
        used = _input_files(spec)
        for path in used:
            if path not in files:
                with open(path, "rb") as f:
                    files[path] = _sha(f.read())
        keys.append(digest({"common": common, "trace": _trace_digest(t, traces), "spec": asdict(spec),
                            "policy_file": files.get(spec.learned or ""),
                            "files": [files[p] for p in used if p != spec.learned]}))
    return keys


def _trace_digest(t: Trace, cache: dict[int, str]) -> str:
    """The digest of a trace's content (computed once per trace object, kept in ``cache``)."""
    if id(t) not in cache:
        cache[id(t)] = digest([_sha(a.tobytes()) for a in (t.key, t.size, t.op, t.compute_ns, t.kind)])
    return cache[id(t)]


def _bound_keys(tasks: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], str]],
                traces: dict[int, str]) -> list[str]:
    """One key per bound task (``bound_rows`` or ``stall_rows`` of a trace, capacity, mode
    and bounds or preset): what decides its rows, as :func:`_run_keys` for the runs
    (``traces``: the traces' digests, shared with it)."""
    keys = []
    for _, (t, tname, cap, c, mode, what), _, described in tasks:
        files = []
        if isinstance(what, str) and os.path.isfile(what):  # (a preset file's bytes)
            with open(what, "rb") as f:
                files.append(_sha(f.read()))
        keys.append(digest({"task": described, "trace": _trace_digest(t, traces),
                            "args": [tname, int(cap), str(c), mode, what], "files": files,
                            "columns": list(COLUMNS)}))
    return keys


def _input_files(spec: RunSpec) -> list[str]:
    """The files besides the trace whose bytes decide a run's row: its exported policy, its
    preset file, the ``FILE.py`` of a policy or prefetcher of the user's, a ``learned:PATH``
    prefetcher's file (a module named ``module:Class`` is not hashed: it is not one file)."""
    from cachegym.policies.registry import import_spec_file

    out = [spec.learned] if spec.learned is not None else []
    if spec.preset.endswith(".json"):
        out.append(os.path.expanduser(spec.preset))
    for name in (spec.policy, spec.prefetch):
        path = learned_path(name) or import_spec_file(name)
        if path is not None:
            out.append(path)
    return [p for p in out if os.path.isfile(p)]


def _sha(b: bytes) -> str:
    import hashlib

    return hashlib.sha256(b).hexdigest()


def _distinct_tails(paths: list[str]) -> list[str]:
    """Each path's last parts, as few as tell it from the others (``run_a/policy`` beside
    ``run_b/policy``: every ``make demo`` run exports ``policy.npz``), its extension dropped."""
    split = [os.path.realpath(p).split(os.sep) for p in paths]
    out = []
    for i, mine in enumerate(split):
        parts = _tail(mine, (o for j, o in enumerate(split) if j != i))
        out.append("/".join([*parts[:-1], os.path.splitext(parts[-1])[0]]))
    return _unique_names(out)  # (x/p.npz and x/p: one tail, told apart by a number)


def _tail(mine: Sequence[str], others: Iterable[Sequence[str]]) -> list[str]:
    """The fewest last parts of the path ``mine`` (split at the separator) that are not the
    last parts of any of ``others`` (the whole path where every tail is shared)."""
    others = [tuple(o) for o in others]
    n = 1
    while n < len(mine) and any(o[-n:] == tuple(mine[-n:]) for o in others):
        n += 1
    return list(mine[-n:])


def _unique_names(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        if names.count(n) > 1:
            seen[n] = seen.get(n, 0) + 1
            out.append(f"{n}#{seen[n]}")
        else:
            out.append(n)
    return out


# ---------------------------------------------------------------------- output
def _cell(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return ""
    return v


def write_results(rows: list[dict[str, Any]], out_dir: str) -> tuple[str, str]:
    """``results.csv`` (NaN as blank) and ``results.json`` (NaN as null) in ``out_dir``."""
    cols = list(COLUMNS) + [c for c in EXTRA_COLUMNS if any(c in r for r in rows)]
    def write_csv(f: Any) -> None:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({c: _cell(r.get(c)) for c in cols})

    # each file replaced whole (temporary file + os.replace): an interrupt leaves the old or the new
    csv_path = replace_atomically(os.path.join(out_dir, "results.csv"), write_csv)
    json_path = replace_atomically(os.path.join(out_dir, "results.json"), lambda f: json.dump(
        [{c: (None if _cell(r.get(c)) == "" and isinstance(r.get(c), float) else r.get(c))
          for c in cols} for r in rows], f, indent=1))
    return csv_path, json_path


def network_share(decisions: Any) -> float | None:
    """The share of a guarded learned run's accesses its network decided (its shadow and twins:
    ``network``, ``network-no-prefetch``, ``network-history``), from the ``guard_decisions``
    column (``"arc:0.88 network:0.02 ..."``); ``None`` for other rows."""
    if not isinstance(decisions, str) or not decisions:
        return None
    share = 0.0
    for part in decisions.split():
        name, _, v = part.rpartition(":")
        if name == "network" or name.startswith("network-"):
            share += float(v)
    return share


def format_table(rows: list[dict[str, Any]]) -> str:
    """A fixed-width table of the main figures, one line per run and bound row: traffic and
    stall first, then the gap each policy closes to the bound (``gap_*``), then hit figures, and
    for a guarded learned policy the share of accesses its network decided (``by_net``: the
    guard follows a heuristic expert where the network does worse; the CSV's
    ``guard_decisions`` has each expert's share). In ``objects`` mode (every object of size 1)
    capacity and traffic are counts of objects."""
    head = ("trace", "capacity", "policy", "prefetch", "preset", "traffic", "gap_traffic",
            "stall_ms", "gap_stall", "miss_ratio", "gap_misses", "byte_miss_ratio", "p50_us",
            "by_net")
    lines = []
    prefetchers = {str(r["prefetch"]) for r in rows}
    policies = {str(r["policy"]) for r in rows}
    for r in rows:
        bytes_mode = r["mode"] == "bytes"
        lines.append((
            str(r["trace"])[:24], human_bytes(r["capacity"]) if bytes_mode
            else str(r["capacity"]), policy_label(r["policy"], policies),
            prefetch_label(r["prefetch"], prefetchers), r["preset"],
            human_bytes(r["traffic_bytes"], 4) if bytes_mode else _fmt(r["traffic_bytes"], "{:.0f} obj"),
            _fmt(r["gap_closed_traffic"], "{:.3f}"),
            # (without a timing preset copies take no time: no stall to show, as for bounds)
            _fmt(r["stall_ns"] / 1e6, "{:.3f}") if str(r["preset"]) != "none" else "",
            _fmt(r["gap_closed_stall"], "{:.3f}"),
            _fmt(r["miss_ratio"], "{:.4f}"), _fmt(r["gap_closed_misses"], "{:.3f}"),
            _fmt(r["byte_miss_ratio"], "{:.4f}"), _fmt(r["decision_p50_us"], "{:.2f}"),
            _fmt(r["guard_net_share"] if "guard_net_share" in r
                 else network_share(r.get("guard_decisions")), "{:.2f}"),
        ))
    widths = [max(len(h), *(len(x[i]) for x in lines)) if lines else len(h)
              for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*x) for x in lines]
    # a run that streamed much (objects larger than the pool, or not admitted) is said, with
    # its worst case: such accesses move bytes but never stay (the CSV's streamed column)
    streamed = [(r["streamed"] / r["requests"], r) for r in rows
                if r.get("streamed") and r.get("requests")]
    many = [x for x in streamed if x[0] > 0.1]
    if many:
        share, r = max(many, key=lambda x: x[0])
        out.append(f"note: {len(many)} run(s) streamed more than 10% of their requests (objects "
                   "larger than the pool, or not admitted: copied for that access only; the "
                   f"CSV's streamed column), most {share:.0%}: {policy_label(r['policy'])} at "
                   f"{human_bytes(r['capacity']) if r['mode'] == 'bytes' else r['capacity']} "
                   f"on {r['trace']}")
    if any(str(r["prefetch"]) != "none" and _finite(r.get("gap_closed_misses"))
           for r in rows):  # (a newcomer read two policies of equal misses, gaps 0 and -0.11)
        out.append("note: with a prefetcher, gap_misses counts each run's copies in (its misses "
                   "and its prefetches) against the bound's misses, as prefetches copy too "
                   "(docs/MAIN_JOB.md)")
    return "\n".join(out)


def _finite(v: Any) -> bool:
    """Whether a table cell holds a finite number."""
    return isinstance(v, (int, float)) and math.isfinite(v)


def human_bytes(v: Any, digits: int = 3) -> str:
    """``1536`` -> ``1.5KiB`` (``digits`` significant digits; with more than 3 the trailing
    zeros stay, so that a column of them compares at a glance: ``2.700GiB``, ``2.704GiB``); blank
    for NaN."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    x = float(v)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(x) < 1024 or unit == "TiB":
            if unit == "B" or abs(x) >= 10**digits:  # (1000-1023 of a unit: no 1.02e+03)
                return f"{x:.0f}{unit}"
            if digits <= 3:
                return f"{x:.{digits}g}{unit}"
            return f"{x:#.{digits}g}".rstrip(".") + unit
        x /= 1024
    return str(v)


def policy_label(policy: str, among: Iterable[str] = ()) -> str:
    """A short display name: ``/long/path/my_policies.py:MRU`` -> ``my_policies.py:MRU``, with
    as many of the path's last folders as tell it from the other classes of files of ``among``
    (``a/p.py:MRU`` beside ``b/p.py:MRU``: both read ``p.py:MRU``); an exported policy's name,
    ``learned[shadow]``, is short already; the ``policy`` column of the CSV keeps the path."""
    if policy.startswith("learned["):
        return policy
    where, sep, cls = policy.rpartition(":")
    if sep and where.endswith(".py"):
        others = set()
        for p in among:
            w, s2, c = p.rpartition(":")
            if s2 and w.endswith(".py") and c == cls and p != policy:
                others.add(tuple(os.path.normpath(w).split(os.sep)))
        return "/".join(_tail(os.path.normpath(where).split(os.sep), others)) + f":{cls}"
    return policy


def prefetch_label(prefetch: str, among: Iterable[str] = ()) -> str:
    """A short display name: ``learned:/long/path/policy.npz`` -> ``learned:policy.npz``, with
    as many of the path's last folders as tell it from the other learned prefetchers of
    ``among`` (``learned:run_a/policy.npz`` beside ``learned:run_b/policy.npz``); the
    ``prefetch`` column of the CSV keeps the path."""
    if learned_path(prefetch) is None:
        return prefetch
    mine = os.path.normpath(prefetch[len(LEARNED_PREFETCH):]).split(os.sep)
    others = {tuple(os.path.normpath(p[len(LEARNED_PREFETCH):]).split(os.sep))
              for p in among if learned_path(p) is not None and p != prefetch}
    return LEARNED_PREFETCH + "/".join(_tail(mine, others))


def _fmt(v: float | None, f: str) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else f.format(v)


# policies' colours: tab10 and tab20's darker half, without the greys and black that bounds use
_PALETTE = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
            "tab:pink", "tab:olive", "tab:cyan", "#393b79", "#637939", "#8c6d31", "#843c39",
            "#7b4173", "#3182bd", "#e6550d")
_PLOTS = (("miss_ratio", "miss ratio", 1.0), ("byte_miss_ratio", "byte miss ratio", 1.0),
          ("traffic_bytes", "traffic ({} copied, both ways)", 1.0), ("stall_ns", "stall (ms)", 1e-6))
_STALL_ONLY = ("stall_lb",)  # bound rows of the stall panel alone (with the stall reference)
_MARKER = {"lower_bound": "v", "upper_bound": "^", "stall_reference": "x"}


def _traffic_unit(top: float, mode: str) -> tuple[str, float]:
    """The traffic axis' unit and scale: objects as counted (``mode`` objects), else the binary
    unit (B, KiB, ..., TiB) in which the largest value ``top`` is below 10,000 (round ticks in
    that unit; ticks at round byte counts printed in binary units were not)."""
    if mode != "bytes":
        return "objects", 1.0
    unit, scale = "B", 1.0
    for u in ("KiB", "MiB", "GiB", "TiB"):
        if top * scale < 10_000:
            break
        unit, scale = u, scale / 1024
    return unit, scale


def plot_results(rows: list[dict[str, Any]], out_dir: str) -> list[str]:
    """PNG plots (matplotlib's Agg backend), one figure per (trace, prefetcher, preset):
    ``metrics__T__P__C.png``, miss ratio, byte miss ratio, traffic and (with a preset only) stall
    against capacity, one line per policy, bounds dashed (``foo_l``, ``lfoo_l``, ``pfoo_l``, ``stall_lb``;
    ``foo_u`` and the stall reference dotted), the legend beside the axes. With a prefetcher the
    miss panels draw no bounds (they limit fetches, prefetches included; an access whose object
    was prefetched, in time or late, is a hit)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    pol_rows = [r for r in rows if r.get("row_kind", "policy") == "policy"]
    groups = dict.fromkeys((r["trace"], r["prefetch"], r["preset"]) for r in pol_rows)
    for tname, pf, preset in groups:
        sel = [r for r in pol_rows if (r["trace"], r["prefetch"], r["preset"]) == (tname, pf, preset)]
        sel += [r for r in rows if _reference_of(r, tname, preset)]
        caps = sorted(dict.fromkeys(r["capacity"] for r in sel))
        mode = sel[0]["mode"]
        metrics = [m for m in _PLOTS if m[0] != "stall_ns" or preset != "none"]
        fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics) + 2.2, 3.8),
                                 squeeze=False)
        handles: dict[str, Any] = {}
        pols = list(dict.fromkeys(r["policy"] for r in sel if r.get("row_kind", "policy") == "policy"))
        colour = {p: _PALETTE[i % len(_PALETTE)] for i, p in enumerate(pols)}
        for ax, (field, ylabel, scale) in zip(axes[0], metrics):
            if field == "traffic_bytes":
                top = max((float(r[field]) for r in sel if isinstance(r.get(field), (int, float))
                           and math.isfinite(float(r[field]))), default=0.0)
                unit, scale = _traffic_unit(top, mode)
                ylabel = ylabel.format(unit)
            shown = {str(r["policy"]) for r in sel}
            for pol in dict.fromkeys(r["policy"] for r in sel):
                kind = next(r.get("row_kind", "policy") for r in sel if r["policy"] == pol)
                if (kind == "stall_reference" or pol in _STALL_ONLY) and field != "stall_ns":
                    continue  # (a stall reference's miss ratio is no bound of the others')
                if (kind in ("lower_bound", "upper_bound") and pf != "none"
                        and field in ("miss_ratio", "byte_miss_ratio")):
                    continue  # (the bounds limit fetches; a prefetch hides a demand miss)
                pts = sorted((r["capacity"], float(r[field]) * scale) for r in sel
                             if r["policy"] == pol and isinstance(r.get(field), (int, float))
                             and math.isfinite(float(r[field])))
                if not pts:
                    continue
                style = {"lower_bound": dict(ls="--", color={"pfoo_l": "gray", "lfoo_l": "dimgray", "stall_lb": "darkred"}
                                             .get(pol, "black")),
                         "upper_bound": dict(ls=":", color="black"),
                         "stall_reference": dict(ls=":", color="tab:gray")}.get(
                             kind, dict(color=colour.get(pol, "tab:blue")))
                (line,) = ax.plot([p[0] for p in pts], [p[1] for p in pts],
                                  marker=_MARKER.get(kind, "o"), ms=3 if kind == "policy" else 5,
                                  label=policy_label(pol, shown), **style)  # type: ignore[arg-type]
                handles.setdefault(policy_label(pol, shown), line)
            ax.set_xscale("log")
            ax.set_xticks(caps)
            ax.set_xticklabels([human_bytes(c) if mode == "bytes" else str(c) for c in caps],
                               rotation=30, fontsize="small")
            ax.minorticks_off()
            ax.set_xlabel("capacity" if mode == "bytes" else "capacity (objects)")
            ax.set_ylabel(ylabel if pf == "none" or field not in ("miss_ratio", "byte_miss_ratio")
                          else f"{ylabel} (prefetched: hits)")
            ax.grid(True, alpha=0.3)
        fig.suptitle(f"{tname}   prefetch={prefetch_label(pf, (g[1] for g in groups))}   preset={preset}")
        fig.legend(list(handles.values()), list(handles), loc="center left",
                   bbox_to_anchor=(1.0, 0.5), fontsize="small", frameon=False)
        tag = f"{_safe(tname)}__{_safe(pf)}__{_safe(preset)}"
        paths.append(_save(fig, os.path.join(out_dir, f"metrics__{tag}.png")))
    return paths


def _reference_of(r: dict[str, Any], tname: str, preset: str) -> bool:
    """Whether bound or reference row ``r`` belongs in the plots of (``tname``, ``preset``): the
    miss and traffic bounds in every preset's, the stall rows in their own preset's."""
    kind = r.get("row_kind", "policy")
    if kind == "policy" or r["trace"] != tname:
        return False
    if r["policy"] == "stall_lb" or kind == "stall_reference":
        return bool(r["preset"] == preset)
    return True


def _save(fig: Any, path: str) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    replace_atomically(path, lambda f: fig.savefig(f, format="png", dpi=100, bbox_inches="tight"),
                       binary=True)
    plt.close(fig)
    return path


def _safe(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(s))
