"""Pieces shared by the cachegym environments: trace sources, episode windows, pool capacity, the
observation space, rewards and the next-use oracle. No environment logic lives here: the
environments (:mod:`envs.evict`, :mod:`envs.prefetch`) drive :class:`allocator.pool.Pool`."""

from __future__ import annotations

import math
import os
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from cachegym.allocator.errors import ConfigError, InvalidActionError
from cachegym.allocator.sizes import parse_capacity
from cachegym.allocator.trace import INF, MAX_TOTAL, Op, Trace
from cachegym.policies import features
from cachegym.policies import kernels as _k

if TYPE_CHECKING:
    from cachegym.allocator.pool import Pool

__all__ = [
    "PoolEnv", "TraceSource", "as_traces", "default_trace", "Window", "Episodes", "check_capacity",
    "resolve_capacity",
    "observation_space", "pack_obs", "empty_obs", "next_use_rows", "next_use_distance", "decision_info",
    "CAPACITY_OF", "check_cost", "generated_trace",
]

TraceSource = Union[Trace, str, "os.PathLike[str]", Mapping[str, Any]]
"""A :class:`Trace`, a trace file (any format :func:`envs.workloads.read_trace` reads), or a
generator spec ``{"generator": "zipf", "seed": 0, **params}`` for :func:`envs.workloads.generate`."""

CAPACITY_OF = ("working_set", "peak_live")


class PoolEnv(gym.Env[dict[str, Any], np.int64]):
    """What the environments share: a :class:`Pool` and the generator that runs its episode
    (``_loop``; while it is suspended at a decision, the pool refuses this thread's other
    calls and other threads' calls wait)."""

    pool: Pool | None
    _loop: Generator[Any, Any, None] | None
    metadata: dict[str, Any] = {"render_modes": []}  # (nothing to draw: render_mode is None)

    def render(self) -> None:
        """Nothing to draw (``render_mode`` is ``None``: :func:`render_mode_of`)."""
        return None

    def __getstate__(self) -> dict[str, Any]:
        """The env's attributes, between episodes; during one (the pool in the middle of an
        access, waiting for the agent) a :class:`ConfigError` (a copy could not resume it:
        ``copy.deepcopy`` for a lookahead, pickling for a subprocess)."""
        if getattr(self, "_loop", None) is not None:
            raise ConfigError(f"{type(self).__name__} cannot be copied or pickled during an episode "
                              "(its pool waits in the middle of an access for the agent's answer): "
                              "copy it before reset() or after the episode ends, or make a new env "
                              "with the same arguments and seed")
        return dict(self.__dict__)

    def _not_running(self) -> InvalidActionError:
        """The error of a ``step()`` while no episode runs (before the first ``reset()``, after
        ``close()``, or after the episode ended)."""
        when = "before reset() (or after close())" if self.pool is None else "on a finished episode"
        return InvalidActionError(f"step() called {when}; call reset() first")

    def close(self) -> None:
        """Abandon the running episode (closing its generator ends the pool's pending event)
        and close the pool: no candidate is left (``action_masks()`` masks every slot). A new
        episode starts from here too."""
        if self._loop is not None:
            self._loop.close()
            self._loop = None
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        mask = getattr(self, "_mask", None)  # (an env whose construction failed has none)
        if mask is not None:
            self._keys: list[int] = []
            self._mask = np.zeros_like(mask)
            self._done = True


def default_trace() -> Trace:
    """The workload used when an env is made without traces: a loop of 300 objects (LRU
    thrashes on it at the default capacity) mixed with a Zipf hot set of 2,000 objects."""
    from cachegym.envs.workloads import generate

    return generate("mixture", seed=0, n_requests=60_000, components=[
        {"name": "loop", "n_objects": 300, "weight": 1.0},
        {"name": "zipf", "n_objects": 2_000, "alpha": 1.0, "weight": 1.0},
    ])


def as_traces(traces: TraceSource | Sequence[TraceSource] | None) -> list[Trace]:
    """Normalise the ``traces`` argument of an env to a non-empty list of traces. A relative
    path is read from the working directory, else among the bundled files, as the configs'
    paths are (:func:`envs.paths.resolve_data_path`)."""
    if traces is None:
        return [default_trace()]
    if isinstance(traces, (bytes, bytearray)) or not isinstance(
            traces, (Trace, str, os.PathLike, Mapping, Iterable)):
        raise ConfigError(f"traces={traces!r} ({type(traces).__name__}): give a Trace, a trace file's "
                          "path (str), a generator spec {'generator': 'zipf', ...}, a list of them, or "
                          "None (the default workload)")
    items: Sequence[Any] = (
        [traces] if isinstance(traces, (Trace, str, os.PathLike, Mapping)) else list(traces))
    out: list[Trace] = []
    for i, t in enumerate(items):
        if isinstance(t, Trace):
            out.append(t)
        elif isinstance(t, (str, os.PathLike)):
            from cachegym.envs.paths import resolve_data_path
            from cachegym.envs.workloads import read_trace

            out.append(read_trace(resolve_data_path(os.fspath(t))))
        elif isinstance(t, Mapping):
            out.append(generated_trace(t, f"traces[{i}]"))
        else:
            raise ConfigError(f"traces[{i}]: expected a Trace, a path or a generator spec, got "
                              f"{t!r} ({type(t).__name__})")
    if not out:
        raise ConfigError("traces: the list is empty; give at least one trace")
    for t in out:
        if not (t.op != Op.FREE).any():
            raise ConfigError(f"trace {t.name!r} has no accesses")
    return out


_KINDS: dict[Any, tuple[str, tuple[type, ...]]] = {
    "int": ("an int", (int, np.integer)), int: ("an int", (int, np.integer)),
    "float": ("a number", (int, float, np.integer, np.floating)),
    float: ("a number", (int, float, np.integer, np.floating)),
    "bool": ("a bool", (bool, np.bool_)), bool: ("a bool", (bool, np.bool_)),
}


def generated_trace(spec: Mapping[str, Any], where: str = "traces") -> Trace:
    """The trace of a generator spec ``{"generator": name, "seed": s, **params}``
    (:func:`envs.workloads.generate`), each parameter checked against the generator's
    signature first: a :class:`ConfigError` naming ``where``, the parameter and its type for
    a value of another type (``n_requests="x"``, ``n_requests=2.5``) or a value the generator
    refuses, not a ``TypeError`` from inside it."""
    import inspect

    from cachegym.envs.workloads.registry import GENERATORS, generate

    params = dict(spec)
    if "generator" not in params:
        raise ConfigError(f"{where}: a generator spec needs a 'generator' key, got {sorted(map(str, params))}")
    name = params.pop("generator")
    if not isinstance(name, str) or name not in GENERATORS:
        raise ConfigError(f"{where}: unknown generator {name!r}; choose one of {sorted(GENERATORS)}")
    sig = inspect.signature(GENERATORS[name]).parameters
    for key, value in params.items():
        p = sig.get(key)
        kind = _KINDS.get(p.annotation) if p is not None else None
        if kind is None:
            continue  # (a parameter it does not take: generate names it)
        what, types = kind
        if not isinstance(value, types) or (what != "a bool" and isinstance(value, (bool, np.bool_))):
            raise ConfigError(f"{where}: {key} of generator {name!r} must be {what}, got {value!r} "
                              f"({type(value).__name__}); e.g. {key}={p.default!r}")  # type: ignore[union-attr]
    try:
        return generate(name, **params)
    except (TypeError, ValueError) as e:  # a value of the right type it refuses
        raise ConfigError(f"{where}: generator {name!r} refused {params} ({type(e).__name__}: {e})") from None


@dataclass(frozen=True)
class Window:
    """One episode's rows, as Python lists (the env's inner loop reads them per row)."""

    trace: Trace
    source: int  # index of the trace it was cut from
    start: int
    key: list[int]
    size: list[int]
    op: list[int]
    kind: list[int]
    compute_ns: list[int]
    step: list[int]
    next_use: np.ndarray  # row of each row's object's next access, INF if none

    @classmethod
    def of(cls, trace: Trace, source: int, start: int) -> Window:
        return cls(trace, source, start, trace.key.tolist(), trace.size.tolist(), trace.op.tolist(),
                   trace.kind.tolist(), trace.compute_ns.tolist(), trace.step.tolist(),
                   trace.next_use())

    def __len__(self) -> int:
        return len(self.key)


class Episodes:
    """Draws episode windows: a trace uniformly among ``traces``, then a start row uniformly
    among those leaving ``length`` rows (the whole trace when ``length`` is None or longer)."""

    def __init__(self, traces: list[Trace], length: int | None) -> None:
        if length is not None and (isinstance(length, (bool, np.bool_))
                                   or not isinstance(length, (int, np.integer)) or length < 1):
            raise ConfigError(f"window must be an int >= 1 (rows per episode) or None (whole traces), "
                              f"got {length!r} ({type(length).__name__})")
        self.traces = traces
        self.length = length

    def draw(self, rng: np.random.Generator, options: Mapping[str, Any] | None = None) -> Window:
        """A window; ``options`` may fix ``trace`` (index) and ``start`` (row), ints; any other
        option is refused (a typo would draw a random window, silently)."""
        if options is not None and not isinstance(options, Mapping):
            raise ConfigError(f"reset options must be a dict ({{'trace': i, 'start': row}}), got "
                              f"{options!r}")
        opts = dict(options or {})
        bad = sorted(set(opts) - {"trace", "start"})
        if bad:
            raise ConfigError(f"reset options {bad} unknown; the options are 'trace' (the index of "
                              "a trace) and 'start' (the window's first row)")
        for k, v in opts.items():
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ConfigError(f"reset option {k}={v!r} must be an int")
        i = int(opts["trace"]) if "trace" in opts else int(rng.integers(len(self.traces)))
        if not 0 <= i < len(self.traces):
            raise ConfigError(f"reset option trace={i} is out of range: {len(self.traces)} traces")
        tr = self.traces[i]
        n = len(tr)
        length = n if self.length is None else min(self.length, n)
        if "start" in opts:
            start = int(opts["start"])
            if not 0 <= start <= n - length:
                raise ConfigError(f"reset option start={start} is out of range 0..{n - length}")
        else:
            start = int(rng.integers(0, n - length + 1))
        w = tr if (start == 0 and length == n) else tr.window(start, start + length)
        return Window.of(w, i, start)


def check_args(K: Any, *, candidates: str | None = None, reward: str | None = None,
               rewards: Sequence[str] = (), cost: Any = None, opportunity: Any = None,
               opportunities: Sequence[str] = ()) -> None:
    """The argument checks every environment shares (each names the value and the choices)."""
    if not isinstance(K, (int, np.integer)) or isinstance(K, bool) or not 1 <= K <= features.MAX_K:
        raise ConfigError(f"K must be an int in 1..{features.MAX_K} (candidates per decision), got {K!r}")
    if candidates is not None and candidates not in features.RULES:
        raise ConfigError(f"candidates must be one of {features.RULES}, got {candidates!r}")
    if opportunities and (isinstance(opportunity, bool) or not (
            opportunity in opportunities or (isinstance(opportunity, (int, np.integer)) and opportunity >= 1))):
        raise ConfigError(f"opportunity must be one of {tuple(opportunities)} or an int >= 1, got {opportunity!r}")
    if reward is not None:
        if reward not in rewards:
            raise ConfigError(f"reward must be one of {tuple(rewards)}, got {reward!r}")
        if reward == "stall" and cost is None:
            raise ConfigError("reward='stall' needs a cost model: pass cost='h100_pcie5' (or another preset)")


def check_clean_ahead(name: str, value: Any) -> float:
    """A share of the pool's capacity kept clean ahead of eviction (``Pool(clean_ahead=)``), as
    the evaluator's ``allocator.clean_ahead`` and the environments' ``clean_ahead`` take it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ConfigError(f"{name} must be a share of the capacity in [0, 1) (0: off), "
                          f"got {value!r}")
    return float(value)


def check_cost(cost: Any) -> Any:
    """An environment's ``cost``, checked: ``None`` (instant copies), a timing preset's name
    (``"h100_pcie5"``), a preset ``.json`` file (a path) or a :class:`~allocator.cost.Preset`;
    anything else, an unknown name or a missing file is a :class:`ConfigError` naming the
    value and the presets."""
    from cachegym.allocator.cost import resolve_preset

    if isinstance(cost, os.PathLike):
        cost = os.fspath(cost)
    resolve_preset(cost)  # the pool's own check (a wrong type, an unknown name, a missing file), now
    return cost


def pool_options(cost: Any, placement: str, write_policy: str,
                 clean_ahead: float) -> dict[str, Any]:
    """The pool keywords every environment passes (objects larger than the pool stream), each
    checked as the pool checks it (at the env's construction, not at its first ``reset()``)."""
    if placement not in ("arena", "bytes"):
        raise ConfigError(f"placement must be 'arena' or 'bytes', got {placement!r}")
    if write_policy not in ("write-back", "write-through"):
        raise ConfigError(f"write_policy must be 'write-back' or 'write-through', got {write_policy!r}")
    return {"cost": check_cost(cost), "placement": placement, "write_policy": write_policy,
            "oversize": "bypass", "clean_ahead": check_clean_ahead("clean_ahead", clean_ahead)}


def reward_scales(window: Trace, pool: Any) -> tuple[float, float]:
    """``(mean object size, copy time of such an object in ns)`` of a window: what the
    ``bytes`` and ``stall`` rewards are divided by, so that rewards are O(1) on any trace. A
    window of frees alone (no decision arises in it) takes a size of 1."""
    sizes = window.size[window.op != Op.FREE]
    mean_size = float(sizes.mean()) if len(sizes) else 1.0
    return mean_size, float(max(1, pool.cost.copy_time(0, int(mean_size))))


def demand_marks(pool: Any) -> tuple[int, int, int, int, int]:
    """The pool's counters ``(misses, byte misses, traffic bytes, stall ns, accesses)`` before a
    decision."""
    st = pool.stats
    return st.misses, st.byte_misses, st.traffic_bytes, pool.cost.stall_ns, st.accesses


def check_reward_baseline(value: Any, reward: str, demand: Sequence[str]) -> float:
    """An environment's ``reward_baseline``: a finite number >= 0 (0: none), and only with one of
    the ``demand`` rewards (costs per access; the prefetch env's ``pythia`` scores prefetches)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise ConfigError(f"reward_baseline must be a number >= 0 (cost units credited per access; "
                          f"0: none), got {value!r}")
    if value and reward not in demand:
        raise ConfigError(f"reward_baseline applies to the rewards {tuple(demand)}, not to "
                          f"reward={reward!r}; leave it at 0")
    return float(value)


def demand_reward(kind: str, pool: Any, marks: tuple[int, int, int, int, int], mean_size: float,
                  fetch_ns: float, baseline: float = 0.0) -> float:
    """The ``misses``, ``bytes`` (bytes of the misses), ``traffic`` (bytes copied both ways,
    write-backs and streamed accesses included: what the pool pays) or ``stall`` reward of
    what happened since ``marks``, in units of a miss (bytes over the mean request's), plus
    ``baseline`` per access served since (the environments' ``reward_baseline``)."""
    r = _demand_cost(kind, pool, marks, mean_size, fetch_ns)
    return r + baseline * (pool.stats.accesses - marks[4]) if baseline else r


def _demand_cost(kind: str, pool: Any, marks: tuple[int, int, int, int, int], mean_size: float,
                 fetch_ns: float) -> float:
    """Minus what happened since ``marks`` cost on ``kind``, in its unit (the reward alone)."""
    m0, b0, t0, s0, _ = marks
    st = pool.stats
    if kind == "misses":  # (before - after: a step without cost is 0.0, not -0.0)
        return float(m0 - st.misses)
    if kind == "bytes":
        return (b0 - st.byte_misses) / mean_size
    if kind == "traffic":
        return (t0 - st.traffic_bytes) / mean_size
    return (s0 - pool.cost.stall_ns) / fetch_ns


def check_capacity(capacity: float, capacity_of: str) -> None:
    """Raise :class:`ConfigError` unless ``capacity`` is bytes (an ``int`` > 0, or a size such as
    ``"512MiB"``) or a fraction (a ``float`` in (0, 1], or ``"25%"``) of one of :data:`CAPACITY_OF`."""
    if isinstance(capacity, str):
        capacity = parse_capacity(capacity, "capacity")
    if isinstance(capacity, bool) or not isinstance(capacity, (int, float, np.integer, np.floating)):
        raise ConfigError(f"capacity must be bytes (int) or a fraction (float), got {capacity!r}")
    if isinstance(capacity, (int, np.integer)):
        if not 0 < capacity <= MAX_TOTAL:  # (as Pool checks it: now, not at reset)
            raise ConfigError(f"capacity must be > 0 bytes and at most 2**60, got {capacity}")
    elif not 0.0 < capacity <= 1.0:
        raise ConfigError(f"a fractional capacity must be in (0, 1], got {capacity}; give bytes as an int")
    if capacity_of not in CAPACITY_OF:
        raise ConfigError(f"capacity_of must be one of {CAPACITY_OF}, got {capacity_of!r}")


class RenderModeError(ConfigError, TypeError):
    """A ``render_mode`` the envs do not have. Also a :class:`TypeError`, as an unexpected
    keyword argument would be: stable-baselines3's ``make_vec_env`` and
    ``PPO(policy, "cachegym/Evict-v0")`` ask for ``render_mode="rgb_array"`` first and make the
    env without one on a ``TypeError``."""


def render_mode_of(mode: Any) -> None:
    """An env's ``render_mode``: ``None`` (the envs draw nothing: their ``metadata``'s
    ``render_modes`` is empty); any other value is refused (:class:`RenderModeError`;
    Gymnasium's checker refuses it later, and ``render()`` would have nothing to show)."""
    if mode is not None:
        raise RenderModeError(f"render_mode {mode!r}: the cachegym envs draw nothing (render_modes is "
                              "empty); leave render_mode at None and read the pool's statistics from "
                              "info['stats'] at an episode's end")


def step_ends(window: Trace) -> np.ndarray:
    """Per row of ``window``: whether it is the last access (a read or write, not a free) of
    its trace step (``opportunity="step"``: a DL step often ends with frees of its temporaries,
    after its last access)."""
    access = np.flatnonzero(window.op != int(Op.FREE))
    ends = np.zeros(len(window), bool)
    if len(access):
        st = window.step[access]
        ends[access[np.r_[st[1:] != st[:-1], True]]] = True
    return ends


def no_decision_message(what: str, pool: Any, capacity: Any, capacity_of: str = "working_set") -> str:
    """Why no ``what`` arose in an env's 16 episode windows (``pool``: the last one's): the pool
    held the whole window, or the capacity is below every object's size (every access streamed,
    none asks for room: ``capacity=1`` is one byte, ``1.0`` all of the window)."""
    st = pool.stats if pool is not None else None
    if st is not None and st.misses and st.streamed == st.misses:
        return (f"no {what} arose in 16 episode windows: the pool's {pool.capacity} bytes (capacity="
                f"{capacity!r}) are fewer than any object's size, so every access was streamed and "
                "none asked for room; raise the capacity (an int is bytes, a float a fraction of "
                "the window: 0.25)")
    return (f"no {what} arose in 16 episode windows: the pool ({pool.capacity if pool is not None else '?'} "
            f"bytes, capacity={capacity!r} of {capacity_of}) held all it was asked for; lower the "
            "capacity" + ("" if capacity_of == "peak_live" else
                          ", or, on a DL trace (whose working set is many times what is live at "
                          "once), take it as a share of peak live bytes: capacity_of='peak_live'"))


def resolve_capacity(capacity: float, capacity_of: str, window: Trace) -> int:
    """Pool bytes: an ``int`` is bytes; a ``float`` in (0, 1] is that fraction of the window's
    working set (``capacity_of="working_set"``) or of its peak live bytes (``"peak_live"``);
    a string is a size (``"512MiB"``) or a percentage (``"25%"``)."""
    check_capacity(capacity, capacity_of)
    if isinstance(capacity, str):
        capacity = parse_capacity(capacity, "capacity")
    if isinstance(capacity, (int, np.integer)):
        return int(capacity)
    if capacity_of == "working_set":
        base = window.working_set_bytes()
    else:
        base = window.peak_live_bytes()
    return max(1, int(capacity * base))


def observation_space(K: int) -> spaces.Dict:
    """``{"candidates": Box(0, 1, (K * F,)), "globals": Box(0, 1, (G,)), "mask": MultiBinary(K)}``.

    ``candidates`` is the ``(K, F)`` feature matrix of :func:`policies.features.observe`,
    flattened row-major (``obs["candidates"].reshape(K, F)``; a 2-D Box draws a warning from
    SB3's checker and is flattened by its ``MultiInputPolicy`` anyway)."""
    F, G = len(features.FEATURE_NAMES), len(features.GLOBAL_NAMES)
    return spaces.Dict({
        "candidates": spaces.Box(0.0, 1.0, (K * F,), np.float32),
        "globals": spaces.Box(0.0, 1.0, (G,), np.float32),
        "mask": spaces.MultiBinary(K),
    })


def action_int(action: Any, n: int, note: str = "") -> int:
    """``action`` as a Python int: an int, a NumPy integer, a float of integral value (3.0) or a
    0-d array of one. Anything else (1.5, NaN, a bool, a string, an array of several) raises
    :class:`InvalidActionError` naming the space, ``Discrete(n)`` (``note`` is appended to its
    range). Range and mask are the caller's to check."""
    if type(action) is int or isinstance(action, np.integer):
        return int(action)
    try:
        if np.ndim(action) != 0:
            raise TypeError
        a = action.item() if isinstance(action, (np.ndarray, np.generic)) else action
        if isinstance(a, (bool, str, bytes)):
            raise TypeError
        i = int(a)
        if i != a:  # 1.5 is no slot (int() would truncate it to 1)
            raise ValueError
        return i
    except (TypeError, ValueError, OverflowError):
        raise InvalidActionError(f"action {action!r} is not an integer; Discrete({n}) takes "
                                 f"0..{n - 1}{note}") from None


def pack_obs(cand: np.ndarray, mask: np.ndarray, glob: np.ndarray) -> dict[str, np.ndarray]:
    return {"candidates": cand.reshape(-1), "globals": glob, "mask": mask.astype(np.int8)}


def empty_obs(K: int) -> dict[str, np.ndarray]:
    F, G = len(features.FEATURE_NAMES), len(features.GLOBAL_NAMES)
    return {"candidates": np.zeros(K * F, np.float32), "globals": np.zeros(G, np.float32),
            "mask": np.zeros(K, np.int8)}


def next_use_rows(next_use: np.ndarray, last_access: np.ndarray,
                  out: np.ndarray | None = None) -> np.ndarray:
    """The row of each object's next access (``INF``: never), given the row of its last access
    (``-1``: never accessed) and the window's ``next_use`` (int64). ``out``: an int64 buffer of
    at least as many values to write into (returned), else a new array of ``last_access``'s
    shape."""
    last = np.ascontiguousarray(last_access, np.int64)
    if out is None:
        out = np.empty(last.shape, np.int64)
    _k.next_rows(np.ascontiguousarray(next_use, np.int64), last.reshape(-1), last.size,
                 out.reshape(-1))
    return out


def next_use_distance(next_use: np.ndarray, last_access: np.ndarray, tick: int) -> np.ndarray:
    """Ticks from ``tick`` to each object's next access (``inf`` if never), given the row of
    its last access (``-1``: never accessed, distance ``inf``). With a trace's ``free_row()``
    in place of ``next_use``: the ticks to each object's free (the traffic teacher's input)."""
    nxt = next_use_rows(next_use, last_access)
    return np.where(nxt == INF, np.inf, (nxt - tick).astype(np.float64))


def decision_info(keys: list[int], nxt: list[int] | np.ndarray, tick: int, K: int,
                  farthest: bool) -> tuple[int, np.ndarray, np.ndarray]:
    """The teacher's part of a decision's ``info``: ``(oracle, keys, next_use)``.

    ``keys`` are the ``n <= K`` candidates and ``nxt`` the row of each one's next access
    (``INF``: never): a list in the order of ``keys``, or an int64 array whose first ``n``
    values are in that order. ``oracle`` is, with ``farthest``, Belady's choice: the candidate used
    farthest in the future, among those never used again the largest key (as
    :class:`policies.priority.Belady`); without it, the candidate used soonest (the first of
    equals), ``-1`` when none is used again; ``-1`` when there are no candidates. The arrays
    are ``(K,)`` and new at every call (callers keep infos): the keys (int64) and the ticks
    from ``tick`` to each next use (float64, ``inf`` if never), ``-1`` in the padding."""
    keys_out, dist = np.empty(K, np.int64), np.empty(K, np.float64)
    rows = np.ascontiguousarray(nxt, np.int64)
    j = _k.oracle(keys if type(keys) is list else list(keys), rows, tick, farthest, keys_out, dist)
    return j, keys_out, dist
