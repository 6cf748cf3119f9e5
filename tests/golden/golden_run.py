"""How one golden case is run, through public entry points only (``Pool`` and its public
methods, policies built by registry name, ``gymnasium.make``, ``LearnedPolicy`` loaded from a
file by name, the quality benchmark's ``quality_rows``), and how records are stored and compared.

A record is plain JSON: ints, floats (written with ``repr``, so they round-trip bit for bit),
strings, lists and dicts. Per-request outcomes are one character per trace row: ``h`` hit,
``p`` prefetch hit (the prefetch had landed), ``l`` late prefetch (still in flight), ``m`` miss,
``b`` bypass (not admitted: streamed), ``f`` free. Evictions per row are one character per row
too (:func:`count_char`: ``0``-``9``, ``a``-``z``, ``A``-``Z`` for 0-61, ``~`` for more). Victim
decisions are two lists: the ticks, each as its distance from the previous one (the first from
0), and the keys.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import math
from collections.abc import Callable
from functools import partial
from typing import Any

import golden_cases as gc
import gymnasium as gym
import numpy as np
from golden_cases import EnvCase, ReplayCase, ScriptCase, make_trace

import cachegym.envs  # noqa: F401  (registers the environment ids)
from cachegym.allocator.errors import CachegymError
from cachegym.allocator.pool import Pool
from cachegym.allocator.trace import Op, Trace
from cachegym.policies.registry import make_eviction, make_prefetch

Record = dict[str, Any]


# ---------------------------------------------------------------------- files
def save(path: str, data: dict[str, Record]) -> None:
    """Gzipped JSON, sorted keys, no timestamp in the gzip header (regeneration is
    byte-identical when nothing changed)."""
    raw = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    with open(path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as z:
        z.write(raw)


def load(path: str) -> dict[str, Record]:
    with gzip.open(path, "rb") as f:
        return json.loads(f.read())  # type: ignore[no-any-return]


# ---------------------------------------------------------------------- comparison
def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    if isinstance(a, float) or isinstance(b, float):  # exact, and 1 != 1.0 in type
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


_INDEX_NAMES = {"victim_ticks": "victim", "victim_keys": "victim", "calls": "call",
                "checkpoints": "checkpoint", "rows": "table row", "table": "line", "steps": "step"}


def diff(expected: Any, got: Any, where: str, index_name: str = "row") -> list[str]:
    """Every difference between ``expected`` and ``got`` as readable lines: for sequences the
    first differing position (``index_name``) with both values, for dicts each differing key."""
    if _same(expected, got):
        return []
    if isinstance(expected, dict) and isinstance(got, dict):
        out = []
        for k in expected:
            if k not in got:
                out.append(f"{where}.{k}: missing (expected {expected[k]!r})")
            else:
                out += diff(expected[k], got[k], f"{where}.{k}", _INDEX_NAMES.get(k, index_name))
        out += [f"{where}.{k}: unexpected (got {got[k]!r})" for k in got if k not in expected]
        return out
    if isinstance(expected, (str, list)) and isinstance(got, type(expected)):
        n = min(len(expected), len(got))
        first = next((i for i in range(n) if not _same(expected[i], got[i])), n)
        at = f"{where}: first difference at {index_name} {first} (lengths expected {len(expected)}, got {len(got)})"
        if first == n:
            return [f"{at}: one ends there"]
        e, g = expected[first], got[first]
        if isinstance(e, (dict, list)) and isinstance(g, type(e)):
            return [f"{at}:", *diff(e, g, f"{where}[{first}]", index_name)]
        lines = [f"{at}: expected {_clip(e)}, got {_clip(g)}"]
        if isinstance(expected, str):
            lo = max(0, first - 5)
            lines.append(f"    context from {index_name} {lo}: expected {expected[lo:first + 20]!r}, "
                         f"got {got[lo:first + 20]!r}")
        return lines
    return [f"{where}: expected {_clip(expected)}, got {_clip(got)}"]


def _clip(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 300 else s[:300] + "..."


# ---------------------------------------------------------------------- replays
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def count_char(n: int) -> str:
    """One character for a count: base-62 digit, ``~`` for 62 and more."""
    return _DIGITS[n] if n < len(_DIGITS) else "~"


class Recorder:
    """Wraps an eviction policy; logs the tick and key of every victim decision (the pool's
    own later drops, e.g. S3-FIFO's ``pending_evictions``, are not decisions: the per-row
    eviction counts show them)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.ticks: list[int] = []
        self.keys: list[int] = []

    def victim(self, view: Any) -> Any:
        v = self.inner.victim(view)
        self.ticks.append(int(view.tick))
        self.keys.append(int(v))
        return v

    def record(self) -> Record:
        deltas = [t - p for t, p in zip(self.ticks, [0, *self.ticks])]
        return {"victim_ticks": deltas, "victim_keys": self.keys}

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)


def stats_dict(stats: Any) -> Record:
    """Every PoolStats field (a float stays a float, an int an int)."""
    return {f.name: getattr(stats, f.name) for f in dataclasses.fields(stats)}


def _capacity(case: ReplayCase, trace: Trace) -> int:
    if isinstance(case.capacity, float):
        return max(1, int(case.capacity * trace.peak_live_bytes()))
    return int(case.capacity)


def _learned(name: str) -> tuple[str, str] | None:
    """``(path, guard)`` of a case's ``VARIANT:PATH`` learned-policy name, else ``None``."""
    variant, sep, path = name.partition(":")
    if sep and variant in gc.LEARNED_GUARDS:
        return path, gc.LEARNED_GUARDS[variant]
    return None


def _policy(name: str, trace: Trace | None) -> Any:
    learned = _learned(name)
    if learned is not None:
        return make_eviction("learned", path=learned[0], guard=learned[1])
    return make_eviction(name, trace=trace, seed=0)


def _pool(case: ReplayCase, trace: Trace, recorder: bool) -> tuple[Pool, Recorder | None]:
    policy = _policy(case.policy, trace)
    rec = Recorder(policy) if recorder else None
    pf = None
    if case.prefetch is not None:
        pf = make_prefetch(case.prefetch, trace=trace, **dict(case.prefetch_params))
    pool = Pool(_capacity(case, trace), rec if rec is not None else policy, prefetcher=pf,
                cost=case.cost, placement=case.placement,  # type: ignore[arg-type]
                write_policy=case.write_policy, oversize="bypass")  # type: ignore[arg-type]
    return pool, rec


def _trace_of(case: ReplayCase) -> Trace:
    trace = make_trace(case.trace)
    return trace.with_sizes(1) if case.mode == "objects" else trace


def drive(pool: Pool, trace: Trace) -> tuple[str, str]:
    """``pool.access`` / ``pool.free`` row by row: the outcome string and the evictions of
    each row (:func:`count_char`)."""
    key, size, op = trace.key.tolist(), trace.size.tolist(), trace.op.tolist()
    kind, comp = trace.kind.tolist(), trace.compute_ns.tolist()
    free_op, write_op = int(Op.FREE), int(Op.WRITE)
    st = pool.stats
    access, free = pool.access, pool.free
    out: list[str] = []
    evicted: list[str] = []
    ev = st.evictions
    for i in range(len(key)):
        if op[i] == free_op:
            free(key[i])
            out.append("f")
        else:
            b0, p0, l0 = st.streamed, st.prefetch_hits, st.late_prefetches
            if access(key[i], size[i], op[i] == write_op, kind=kind[i], compute_ns=comp[i]):
                out.append("p" if st.prefetch_hits > p0 else "l" if st.late_prefetches > l0 else "h")
            else:
                out.append("b" if st.streamed > b0 else "m")
        evicted.append(count_char(st.evictions - ev))
        ev = st.evictions
    return "".join(out), "".join(evicted)


def replay_record(case: ReplayCase) -> Record:
    """The golden record of a replay case: ``outcome``, ``evictions``, ``stats`` (and
    ``victim_ticks``, ``victim_keys`` when the case records them), from a row-by-row loop."""
    trace = _trace_of(case)
    pool, rec = _pool(case, trace, case.victims)
    outcome, evicted = drive(pool, trace)
    out: Record = {"outcome": outcome, "evictions": evicted, "stats": stats_dict(pool.snapshot())}
    if rec is not None:
        out.update(rec.record())
    return out


def replay_variants(case: ReplayCase) -> dict[str, Record]:
    """Every way the case is run, each giving the part of the record it can: the row-by-row
    loop with the victim recorder (``recorded``, when the case has victims), the loop with the
    bare policy (``loop``, unless the case says ``bare_loop=False``: the recorder's forwarding
    may keep the pool off its compiled hit path, the bare policy does not),
    ``Pool.replay`` (``replay``: final statistics only) and, where the case says ``evaluator``,
    the evaluator's ``run_one`` (``evaluator``: the statistics of its row)."""
    trace = _trace_of(case)
    out: dict[str, Record] = {}
    if case.victims:
        out["recorded"] = replay_record(case)
    if case.bare_loop or not case.victims:
        pool, _ = _pool(case, trace, False)
        outcome, evicted = drive(pool, trace)
        out["loop"] = {"outcome": outcome, "evictions": evicted, "stats": stats_dict(pool.snapshot())}
    pool, _ = _pool(case, trace, False)
    out["replay"] = {"stats": stats_dict(pool.replay(trace))}
    if case.evaluator:
        out["evaluator"] = {"stats": evaluator_stats(case, trace)}
    return out


def evaluator_stats(case: ReplayCase, trace: Trace) -> Record:
    """The statistics in the evaluator's row of the case (``envs.evaluation.run_one``, which
    replays with the compiled replay kernel where it applies, else with the pool)."""
    from cachegym.envs.evaluation import RunSpec, run_one

    assert case.prefetch is None
    learned = _learned(case.policy)
    spec = RunSpec(trace.name, _capacity(case, trace), str(case.capacity), case.mode, case.policy,
                   "none", case.cost or "none", *(learned or ()))
    row = run_one(trace, spec, placement=case.placement, write_policy=case.write_policy,
                  oversize="bypass", decision_timing=False, seed=0)
    stats = {f: row[f] for f in _ROW_STATS}
    stats["accesses"] = row["requests"]
    return stats


_ROW_STATS = ("hits", "misses", "byte_misses", "prefetch_hits", "late_prefetches",
              "useless_prefetches", "bytes_h2d", "bytes_d2h", "stall_ns", "total_ns", "evictions",
              "writebacks", "streamed", "fallbacks")
"""The evaluator's row columns that are PoolStats fields (``requests`` is ``accesses``)."""


# ---------------------------------------------------------------------- scripted pool calls
def script_record(case: ScriptCase) -> Record:
    """A seeded sequence of public pool calls; each logged as ``<op><key>=<result>`` (result
    ``T``/``F`` for a bool, ``-`` for None, else the error's class name). Every 100 calls a
    checkpoint: the statistics and the sorted resident keys."""
    rng = np.random.default_rng(case.seed)
    sizes = rng.integers(1, 3_000, case.n_keys).tolist()
    policy = _policy(case.policy, None)
    pf = make_prefetch(case.prefetch) if case.prefetch is not None else None
    pool = Pool(case.capacity, policy, prefetcher=pf, cost=case.cost,
                placement=case.placement,  # type: ignore[arg-type]
                write_policy=case.write_policy, oversize="bypass")  # type: ignore[arg-type]
    pinned: list[int] = []
    log: list[str] = []
    checkpoints: list[Record] = []
    for i in range(case.n_ops):
        r, k = float(rng.random()), int(rng.integers(case.n_keys))
        comp = int(rng.integers(0, 30_000))
        call: Callable[[], Any]
        if r < 0.5 or (0.8 <= r < 0.9 and len(pinned) >= 3):
            write = bool(rng.random() < 0.3)
            name = "w" if write else "r"
            call = partial(pool.access, k, sizes[k], write, compute_ns=comp)
        elif r < 0.62:
            name, call = "f", partial(pool.free, k)
        elif r < 0.8:
            # a known key's size is its own (None), an unknown one is created with its size
            name = "P"
            call = partial(pool.prefetch, k, sizes[k] if rng.random() < 0.5 else None)
        elif r < 0.9:
            name, call = "+", partial(pool.pin, k)
        elif r < 0.99:
            if pinned and rng.random() < 0.8:
                k = pinned.pop(int(rng.integers(len(pinned))))
            name, call = "-", partial(pool.unpin, k)
        else:
            name, call = "F", pool.flush
        try:
            res = call()
            txt = "-" if res is None else "T" if res is True else "F" if res is False else repr(res)
            if name == "+":
                pinned.append(k)
        except CachegymError as e:
            txt = type(e).__name__
        log.append(f"{name}{k}={txt}")
        if i % 100 == 99:
            checkpoints.append({"op": i, "stats": stats_dict(pool.snapshot()),
                                "resident": sorted(pool.resident_keys())})
    return {"calls": log, "checkpoints": checkpoints}


# ---------------------------------------------------------------------- environments
def _hash(*arrays: np.ndarray) -> str:
    """A short digest (32 bits: a golden check, not a security one) of arrays, with their dtypes
    and shapes."""
    h = hashlib.blake2b(digest_size=4)
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.ndarray):
        return _jsonable(v.tolist())
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, (np.floating, float)):
        return float(v)
    return v


def _mask_hex(mask: np.ndarray) -> str:
    bits = "".join("1" if x else "0" for x in np.asarray(mask, bool).tolist())
    return f"{len(bits)}:{int(bits, 2):x}" if bits else "0:"


def env_record(case: EnvCase, chooser: str) -> Record:
    """A seeded rollout. Per step (after reset, then after each action): ``state``, a hash of
    the observation (every array, dtypes and shapes included) and of info's teacher arrays
    (``keys``, ``next_use``); the action mask; info's ``oracle_action`` and ``tick``. Per
    action: the action, the reward, terminated and truncated. At the end: info's ``stats``,
    the episode's ``invalid_actions`` and the last observation's ``globals`` vector."""
    kwargs = dict(case.kwargs)
    traces = make_trace(case.trace) if case.trace is not None else None
    env = gym.make(case.env_id, traces=traces, **kwargs)
    base: Any = env.unwrapped
    obs, info = env.reset(seed=case.seed)
    cols: dict[str, list[Any]] = {k: [] for k in ("state", "mask", "oracle", "tick", "action",
                                                  "reward", "term", "trunc")}

    def observe(obs: dict[str, Any], info: dict[str, Any], mask: np.ndarray) -> None:
        arrays = [np.asarray(obs[k]) for k in sorted(obs)]
        cols["state"].append(_hash(*arrays, np.asarray(info["keys"]), np.asarray(info["next_use"])))
        cols["mask"].append(_mask_hex(mask))
        cols["oracle"].append(int(info["oracle_action"]))
        cols["tick"].append(int(info["tick"]))

    mask = base.action_masks()
    observe(obs, info, mask)
    for _ in range(case.max_steps):
        a = int(np.flatnonzero(mask)[0]) if chooser == "first" else int(info["oracle_action"])
        obs, r, term, trunc, info = env.step(a)
        mask = base.action_masks()
        cols["action"].append(a)
        cols["reward"].append(float(r))
        cols["term"].append(int(term))
        cols["trunc"].append(int(trunc))
        observe(obs, info, mask)
        if term or trunc:
            break
    env.close()
    return {"steps": cols, "stats": _jsonable(info.get("stats")),
            "invalid_actions": int(info["invalid_actions"]), "n_steps": len(cols["action"]),
            "last_globals": _jsonable(np.asarray(obs["globals"], np.float64))}


# ---------------------------------------------------------------------- the quality benchmark
QUALITY_TIMED = ("decision_p50_us",)
"""Columns of ``quality_rows`` that are wall-clock measurements: not recorded."""


def quality_record(policy_file: str, capacities: tuple[float, ...],
                   max_requests: int | None) -> Record:
    """``quality_rows`` of ``policy_file`` on the default held-out set, without its timing
    column; the formatted table; the verdict."""
    from cachegym.policies.training.quality import (
        default_held_out,
        format_quality,
        quality_rows,
        verdict,
    )

    rows = quality_rows(policy_file, default_held_out(max_requests), capacities, seed=0)
    plain = [{k: _jsonable(v) for k, v in r.items() if k not in QUALITY_TIMED} for r in rows]
    return {"rows": plain, "table": format_quality(rows).splitlines(),
            "verdict": _jsonable(verdict(rows))}


def variant_diffs(golden: Record, variants: dict[str, Record], case_id: str) -> list[str]:
    """How each variant differs from the golden record (on the fields the variant has)."""
    out = []
    for name, rec in variants.items():
        want = {k: golden[k] for k in rec if k in golden}
        if name == "evaluator":  # its row has some of the statistics
            want["stats"] = {k: golden["stats"][k] for k in rec["stats"]}
        out += diff(want, rec, f"{case_id} [{name}]")
    return out
