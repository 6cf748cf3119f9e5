"""Per-candidate features of a pool: one module, used by the environments during training and by
the exported learned policy in deployment, unchanged. NumPy (numba optional); no gymnasium, no torch.

API (stable; bump :data:`FEATURE_VERSION` on any change of names, order or normalisation):

* :data:`FEATURE_NAMES` (per candidate, ``F`` of them), :data:`GLOBAL_NAMES` (``G``),
  :data:`FEATURE_VERSION`, :func:`feature_spec` (the dict written into exported policy files and
  compared on load with :func:`check_spec`).
* :class:`FeatureTracker`: an eviction policy (it answers LRU on its own) that observes the
  pool's hooks and keeps per-object history in preallocated NumPy arrays indexed by a dense slot
  per object, so gathering K candidates is one fancy index. Put it in the pool's policy slot,
  or wrap another policy with :class:`Observed` so it tracks while someone else decides.
* :func:`select_candidates` ``(tracker, view, K, rule, rng) -> keys``: ``"lru"`` (the K least
  recently used evictable objects, least recent first) or ``"sample"`` (K drawn uniformly
  without replacement among the evictable objects, as LRB does).
* :func:`observe` ``(tracker, view, keys, K) -> (cand (K, F) float32, mask (K,) bool,
  glob (G,) float32)``: rows beyond ``len(keys)`` are zero and masked out. Keys need not be
  resident (prefetch candidates are host objects, or keys never seen: their history is empty).

Normalisation: every feature lies in ``[0, 1]`` whatever the trace's scale. Tick distances
``d`` (recency, age, reuse gaps) are ``log1p(d) / log1p(2**32)``; counts ``log1p(n) /
log1p(2**24)``; a decayed counter with half-life ``h`` (in ticks) is ``log1p(c) /
log1p(c_max(h))`` where ``c_max`` is its value under an access every tick; sizes are relative
to the pool's capacity (and log-scaled by ``log1p(2**40)``); copy times (from the view's cost
model; zero with an instant model) ``log1p(ns) / log1p(1e9)``; everything clipped to [0, 1].
A missing reuse gap (fewer accesses than gaps) reads 1.0 (as long as can be).

Tick = the pool's event index (``view.tick``): distances count accesses and frees, not time.

Speed: the per-access hooks are a few scalar writes into one float64 row per object (one
numba call). A decision's candidates are selected here, their slots, state codes and the global
features packed into one float64 buffer (:func:`_pack`), and the matrix computed in one call: of the C kernel
(``policies/csrc/features.c``, :func:`c_features`), else of a numba kernel (:data:`ACCELERATED`),
else of the NumPy reference (:func:`_numeric_numpy`); tests hold the C, numba and NumPy features equal, so a policy trained with one can be deployed
with another.
"""

from __future__ import annotations

import logging
import math
import struct
from array import array
from collections import OrderedDict
from itertools import islice
from typing import TYPE_CHECKING, Any

import numpy as np

from allocator import pool as _pool
from allocator.errors import ConfigError, PolicyFileError
from allocator.pool import DEVICE, H2D
from policies.base import EvictionPolicy, EvictionPolicyBase

if TYPE_CHECKING:
    from allocator.pool import PoolView

_log = logging.getLogger(__name__)

__all__ = [
    "FEATURE_VERSION", "FEATURE_NAMES", "GLOBAL_NAMES", "HALF_LIVES", "HORIZON", "N_GAPS", "RULES", "MAX_K",
    "feature_spec", "check_spec", "FeatureTracker", "Observed", "select_candidates", "observe",
    "ACCELERATED", "F", "G",
]

FEATURE_VERSION = 2
HALF_LIVES: tuple[int, ...] = (16, 256, 4096)
"""Half-lives (in ticks) of the decayed access counters."""
HORIZON = 16384
"""Ticks beyond which the features stop growing, so that they are stationary: every tick
distance (recency, age, lifetime, reuse gaps) is capped at ``HORIZON``, and the access count of
an object older than that is scaled to its last ``HORIZON`` ticks (``frequency`` is then
``count * (HORIZON + 1) / (lifetime + 1)``, the same rate of access). Within the first
``HORIZON`` ticks of a pool (the whole of a training window: ``conf/env/evict.yaml``'s
``window``) nothing changes; a pool that has served millions of accesses still shows the
network the ranges it was trained on. Without the cap a network trained on 16,384-access
windows ranked a long-running Zipf workload's objects by their ever-growing ages and counts,
and lost to LRU (version 1 of the features)."""
N_GAPS = 4
"""Number of most recent reuse gaps kept per object."""
N_KINDS = 7  # allocator.trace.Kind
RULES = ("lru", "sample")
MAX_K = 1024
"""Most candidates per decision (an env's ``K``, a policy file's): what a decision allocates grows
with K, and a file's K is not to set it without limit (K = 100,000 took 9.7 GB, issue #27)."""

FEATURE_NAMES: tuple[str, ...] = (
    # log-scaled tick distances, counts and size
    "recency",            # ticks since the last access (1.0 if never accessed)
    "age",                # ticks since inserted on the device (since first seen if not resident)
    "lifetime",           # ticks since the object was created (at most HORIZON, as every distance)
    "frequency",          # accesses so far (scaled to the last HORIZON ticks: see HORIZON)
    *(f"decay_h{h}" for h in HALF_LIVES),  # exponentially decayed access counts
    *(f"gap_{i + 1}" for i in range(N_GAPS)),  # the last reuse gaps, most recent first
    "size_log",           # log1p(size) / log1p(2**40)
    # candidate-relative
    "recency_rank",       # 0 the most recent .. 1 the least recent valid candidate (ties: lower)
    "size_rel",           # size / pool capacity
    # state
    "dirty",              # a device copy written since fetched (eviction needs a write-back)
    "prefetched",         # on the device through a prefetch and not used since
    "in_flight",          # being copied to the device
    "resident",           # on the device or being copied there
    *(f"kind_{i}" for i in range(N_KINDS)),  # one-hot allocator.trace.Kind
    "seen",               # 1 when the object has history, 0 for a key never seen
    "h2d_time",           # expected fetch time under the cost model
    "writeback_time",     # expected write-back time if evicted now (0 when clean)
)
GLOBAL_NAMES: tuple[str, ...] = (
    "occupancy",          # device bytes used / capacity
    "in_flight",          # bytes being copied to the device / capacity
    "miss_rate",          # EWMA of demand misses per access (alpha = 1/128)
    "n_valid",            # valid candidates / K
    "stall_frac",         # stall ns / total ns so far
    "n_resident",         # log1p(resident objects) / log1p(2**24)
)
F = len(FEATURE_NAMES)
G = len(GLOBAL_NAMES)

_LOG_T = math.log1p(2.0**32)
_LOG_N = math.log1p(2.0**24)
_LOG_SIZE = math.log1p(2.0**40)
_LOG_NS = math.log1p(1e9)
_MISS_ALPHA = 1.0 / 128
_RENORM = 256.0  # renormalise decayed counters when (t - epoch) / h_min exceeds this
assert len(HALF_LIVES) == 3, "FeatureTracker._access unrolls three decayed counters"
assert len(GLOBAL_NAMES) <= len(FEATURE_NAMES), "observe keeps the globals in one more candidate row"
_IH = tuple(1.0 / h for h in HALF_LIVES)
_H_INV = np.array(_IH)

# columns of the per-slot state array
_INSERT, _CREATE, _COUNT = 0, 1, 2
_E0 = 3  # decayed counters, scaled by 2**((t - epoch) / h): value = E * 2**(-(now - epoch) / h)
_RING0 = _E0 + len(HALF_LIVES)
_RING = N_GAPS + 1  # ticks of the last N_GAPS + 1 accesses, circular
_SIZE = _RING0 + _RING
_KIND = _SIZE + 1
_NCOL = _KIND + 1
_MISSING = 2.0**50  # an empty ring entry j holds -(j + 1) * _MISSING: every gap to it is huge
_H1 = HORIZON + 1.0  # the cap of the log block's tick distances (which hold distance + 1)
_EMPTY_ROW = np.zeros(_NCOL)
_EMPTY_ROW[_RING0:_SIZE] = -_MISSING * np.arange(1, _RING + 1)

# the log-scaled block: (t - [ring max, insert, create]), count, decayed counters, gaps, size
_N_LOG = 3 + 1 + len(HALF_LIVES) + N_GAPS + 1
_LOG_SCALE = np.array([_LOG_T] * 3 + [_LOG_N]
                      + [math.log1p(1.0 / (1.0 - 2.0 ** (-1.0 / h))) for h in HALF_LIVES]
                      + [_LOG_T] * N_GAPS + [_LOG_SIZE])
_INV_LOG_SCALE = (1.0 / _LOG_SCALE).astype(np.float32)
_I_GAP = 3 + 1 + len(HALF_LIVES)
_I_RANK = _N_LOG
_I_STATE = _N_LOG + 2
_I_SEEN = _I_STATE + 4 + N_KINDS
_STATE_CODE = (8, 0, 12, 0)  # by residency DEVICE, HOST, H2D, D2H: 4 in flight + 8 resident
assert (DEVICE, H2D) == (0, 2)
_STATE_TABLE = np.zeros((16 * N_KINDS, 4 + N_KINDS))
for _c in range(16 * N_KINDS):
    _STATE_TABLE[_c, :4] = [(_c >> b) & 1 for b in range(4)]
    _STATE_TABLE[_c, 4 + (_c >> 4)] = 1.0


def feature_spec() -> dict[str, Any]:
    """What an exported policy must have been trained on (JSON-serialisable)."""
    return {
        "version": FEATURE_VERSION,
        "features": list(FEATURE_NAMES),
        "globals": list(GLOBAL_NAMES),
        "half_lives": list(HALF_LIVES),
        "n_gaps": N_GAPS,
        "horizon": HORIZON,
        "normalisation": {
            "ticks": "log1p(min(d, horizon))/log1p(2**32)",
            "counts": "log1p(n * min(1, (horizon + 1)/(lifetime + 1)))/log1p(2**24)",
            "decay": "log1p(c)/log1p(c_max(h))",
            "size_rel": "size/capacity",
            "size_log": "log1p(size)/log1p(2**40)",
            "copy_time": "log1p(ns)/log1p(1e9)",
            "clip": [0.0, 1.0],
        },
    }


def check_spec(spec: dict[str, Any], source: str = "policy file") -> None:
    """Raise :class:`PolicyFileError` when ``spec`` differs from this module's features."""
    mine = feature_spec()
    diff = [k for k in mine if spec.get(k) != mine[k]]
    if diff:
        raise PolicyFileError(
            f"{source}: feature spec differs from this code's in {diff} (file version "
            f"{spec.get('version')!r}, code version {FEATURE_VERSION}); retrain and re-export "
            "the policy with this version of policies/features.py"
        )


class FeatureTracker(EvictionPolicyBase):
    """Observes the pool's hooks and keeps the per-object history features are made of.

    On its own it is an LRU policy (``victim`` returns the least recently used evictable
    object, exactly as :class:`policies.lru.LRU`), so it can sit in the pool's policy slot
    while an agent answers through :meth:`Pool.steps`.

    Invariants: ``_slot`` maps every key with history to a row of ``_S``; ``_order`` holds
    exactly the resident (device or incoming) tracked objects, least recently used first, and
    ``_res``/``_res_pos`` hold the same keys in an indexable list, and ``_res_rec``/``_res_slot``
    each one's pool record and slot at the same index. A key freed while on the
    host is not reported by the pool: its stale row is detected by its creation tick when the
    key reappears, and reclaimed when the arrays grow.
    """

    name = "feature-tracker"

    def __init__(self, initial_slots: int = 1024) -> None:
        self._initial = max(16, int(initial_slots))
        self.reset()

    def reset(self) -> None:
        """Forget everything (a new pool)."""
        self._S = np.zeros((self._initial, _NCOL), np.float64)
        self._V = self._S.reshape(-1)  # flat view: scalar writes are cheaper
        self._S_mv = self._S.data  # for the C calls: a memoryview's buffer costs them less than NumPy's
        self._slot: dict[int, int] = {}
        self._free_slots: list[int] = []
        self._next = 0
        self._order: OrderedDict[int, None] = OrderedDict()
        self._res: list[int] = []
        self._res_pos: dict[int, int] = {}
        # beside _res: each resident's pool record and slot (what the C gather reads)
        self._res_rec: list[Any] = []
        self._res_slot = array("q")
        self._epoch = 0
        self.miss_rate = 0.0

    def __getstate__(self) -> dict[str, Any]:  # pickle/copy: _V and _S_mv must stay views of _S
        state = self.__dict__.copy()
        del state["_V"], state["_S_mv"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._V = self._S.reshape(-1)
        self._S_mv = self._S.data

    # ------------------------------------------------------------------ hooks
    def victim(self, view: PoolView) -> int | None:
        ev = view.evictable
        for k in self._order:
            if ev(k):
                return k
        return None

    def on_hit(self, view: PoolView, key: int) -> None:
        self.miss_rate *= 1.0 - _MISS_ALPHA
        s = self._slot.get(key)
        if s is None:  # the tracker joined a pool that was already running
            s = self._new_slot(view, key)
            self._add_resident(key, view.info(key), s)
        else:
            self._order.move_to_end(key)
        self._access(s, view.tick)

    def on_miss(self, view: PoolView, key: int) -> None:
        self.miss_rate += _MISS_ALPHA * (1.0 - self.miss_rate)
        s = self._slot.get(key)
        if s is None or self._S[s, _CREATE] != view.info(key).created_tick:
            s = self._new_slot(view, key)
        self._access(s, view.tick)

    def on_insert(self, view: PoolView, key: int) -> None:
        s = self._slot.get(key)
        info = view.info(key)
        if s is None or self._S[s, _CREATE] != info.created_tick:
            s = self._new_slot(view, key)  # a prefetch of an object never accessed
        self._S[s, _INSERT] = view.tick
        self._add_resident(key, info, s)

    def on_evict(self, view: PoolView, key: int) -> None:
        self._drop_resident(key)

    def on_free(self, view: PoolView, key: int) -> None:
        self._drop_resident(key)
        s = self._slot.pop(key, None)
        if s is not None:
            self._free_slots.append(s)

    # ------------------------------------------------------------------ queries
    def lru_order(self) -> list[int]:
        """Resident tracked keys, least recently used first."""
        return list(self._order)

    def resident(self) -> list[int]:
        """Resident tracked keys in no particular order (do not modify)."""
        return self._res

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, key: int) -> bool:
        return key in self._slot

    def slots(self, keys: Any) -> np.ndarray:
        """Row of each key (``-1`` for a key without history)."""
        if isinstance(keys, np.ndarray):
            keys = keys.tolist()  # Python ints: dict lookups with NumPy scalars are slow
        get = self._slot.get
        return np.fromiter((get(k, -1) for k in keys), np.int64)

    def last_access(self, keys: Any) -> np.ndarray:
        """Tick of each key's last access (``-1`` without one: never seen, or only prefetched)."""
        sl = self.slots(keys)
        out = np.full(len(sl), -1, np.int64)
        ok = sl >= 0
        last = self._S[sl[ok], _RING0:_SIZE].max(axis=1)
        out[ok] = np.where(last >= 0, last, -1).astype(np.int64)
        return out

    # ------------------------------------------------------------------ internals
    def _access(self, s: int, t: int) -> None:
        # per-access cost matters (it is paid on every hit): one compiled call (the same
        # function runs as Python where numba is absent)
        x = t - self._epoch
        if x > _RENORM * HALF_LIVES[0]:
            self._renormalise(t)
            x = 0
        _access_kernel(self._V, s * _NCOL, t, x, 2.0)

    def _renormalise(self, t: int) -> None:
        self._S[: self._next, _E0:_RING0] *= np.exp2(-(t - self._epoch) * _H_INV)
        self._epoch = t

    def _new_slot(self, view: PoolView, key: int) -> int:
        s = self._slot.get(key)
        if s is None:
            if self._free_slots:
                s = self._free_slots.pop()
            else:
                if self._next == len(self._S):
                    self._grow(view)
                if self._free_slots:
                    s = self._free_slots.pop()
                else:
                    s = self._next
                    self._next += 1
            self._slot[key] = s
        info = view.info(key)
        row = self._S[s]
        row[:] = _EMPTY_ROW
        row[_INSERT] = view.tick
        row[_CREATE] = info.created_tick
        row[_SIZE] = info.size
        row[_KIND] = info.kind
        return s

    def _grow(self, view: PoolView) -> None:
        """Reclaim rows of keys the pool no longer knows; double the arrays if that is not enough."""
        dead = [k for k in self._slot if k not in view]
        for k in dead:
            self._free_slots.append(self._slot.pop(k))
        if len(self._free_slots) < len(self._S) // 4:
            S = np.zeros((2 * len(self._S), _NCOL), np.float64)
            S[: len(self._S)] = self._S
            self._S = S
            self._V = S.reshape(-1)
            self._S_mv = S.data

    def _add_resident(self, key: int, rec: Any, slot: int) -> None:
        i = self._res_pos.get(key)
        if i is not None:
            self._order.move_to_end(key)
            self._res_rec[i], self._res_slot[i] = rec, slot
            return
        self._order[key] = None
        self._res_pos[key] = len(self._res)
        self._res.append(key)
        self._res_rec.append(rec)
        self._res_slot.append(slot)

    def _drop_resident(self, key: int) -> None:
        if self._order.pop(key, 0) is None:  # was present (value None)
            i = self._res_pos.pop(key)
            last, rec, slot = self._res.pop(), self._res_rec.pop(), self._res_slot.pop()
            if last != key:
                self._res[i], self._res_rec[i], self._res_slot[i] = last, rec, slot
                self._res_pos[last] = i


class Observed(EvictionPolicyBase):
    """``policy`` answers ``victim``; ``tracker`` (then ``policy``) sees every hook."""

    def __init__(self, policy: EvictionPolicy, tracker: FeatureTracker | None = None) -> None:
        self.policy = policy
        self.tracker = tracker if tracker is not None else FeatureTracker()
        self.name = f"observed-{policy.name}"
        # the policy's optional methods (policies.base), or None: admission, evictions of its
        # own (a model's, such as S3-FIFO's or SLRU's), frees of objects it had evicted
        self.admit = getattr(policy, "admit", None)
        self.pending_evictions = getattr(policy, "pending_evictions", None)
        self.on_free_untracked = getattr(policy, "on_free_untracked", None)

    def victim(self, view: PoolView) -> int | None:
        return self.policy.victim(view)

    def on_hit(self, view: PoolView, key: int) -> None:
        self.tracker.on_hit(view, key)
        self.policy.on_hit(view, key)

    def on_miss(self, view: PoolView, key: int) -> None:
        self.tracker.on_miss(view, key)
        self.policy.on_miss(view, key)

    def on_insert(self, view: PoolView, key: int) -> None:
        self.tracker.on_insert(view, key)
        self.policy.on_insert(view, key)

    def on_evict(self, view: PoolView, key: int) -> None:
        self.tracker.on_evict(view, key)
        self.policy.on_evict(view, key)

    def on_free(self, view: PoolView, key: int) -> None:
        self.tracker.on_free(view, key)
        self.policy.on_free(view, key)

    def __repr__(self) -> str:
        return f"Observed({self.policy!r})"


# ---------------------------------------------------------------------- candidates
def select_candidates(tracker: FeatureTracker, view: PoolView, K: int, rule: str = "lru",
                      rng: np.random.Generator | None = None) -> np.ndarray:
    """Up to ``K`` evictable keys (int64), chosen by ``rule``: ``"lru"`` gives the K least
    recently used, least recent first; ``"sample"`` draws K evictable objects uniformly without
    replacement (``rng`` required; as LRB), in draw order."""
    return np.array(_select(tracker, view, K, rule, rng)[0], np.int64)


def _evictable(o: Any) -> bool:
    """``view.evictable`` of the key whose pool record (or ``None``) is ``o``."""
    return o is not None and o.state == DEVICE and o.pins == 0


def _state_code(o: Any) -> int:
    """A record's state flags and kind as one code: row of :data:`_STATE_TABLE` (the C gather
    writes the same for an evictable record)."""
    return o.dirty + 2 * o.prefetched + _STATE_CODE[o.state] + 16 * o.kind


def _select_lru(tracker: FeatureTracker, view: PoolView, K: int) -> tuple[list[int], list[int] | None]:
    """``select_candidates(rule="lru")`` as a list, with each candidate's state code (as
    :func:`observe` computes it) when the view exposes its objects (else ``None``): one pass
    over the candidates' records instead of one per use."""
    order = tracker._order
    objs: dict[int, Any] | None = getattr(view, "_objs", None)
    if objs is None:
        ev = view.evictable
        out = [k for k in islice(order, K) if ev(k)]
        if len(out) < K and len(order) > K:  # some of the first K are pinned or in flight
            out = []
            for k in order:
                if ev(k):
                    out.append(k)
                    if len(out) == K:
                        break
        return out, None
    get = objs.get
    first = list(islice(order, K))
    recs: list[Any] = list(map(get, first))
    if None not in recs:
        # the usual case: the K least recent are all evictable (view.evictable), so they are the
        # candidates; their codes as observe computes them
        codes = [_state_code(o) for o in recs if _evictable(o)]
        if len(codes) == len(first):
            return first, codes
    out, codes = [], []
    for k, o in zip(first, recs):
        if _evictable(o):
            out.append(k)
            codes.append(_state_code(o))
    if len(out) < K and len(order) > K:  # some of the first K are pinned or in flight
        out, codes = [], []
        for k in order:
            o = get(k)
            if _evictable(o):
                out.append(k)
                codes.append(_state_code(o))
                if len(out) == K:
                    break
    return out, codes


def _select(tracker: FeatureTracker, view: PoolView, K: int, rule: str,
            rng: np.random.Generator | None) -> tuple[list[int], list[int] | None]:
    """:func:`select_candidates` as a list of keys, with their state codes where they came
    for free (else ``None``; :func:`_observe` computes them)."""
    if rule == "lru":
        return _select_lru(tracker, view, K)
    ev = view.evictable
    if rule == "sample":
        if rng is None:
            raise ConfigError("select_candidates(rule='sample') needs rng (a np.random.Generator)")
        res = tracker._res
        n = len(res)
        if n <= 4 * K:
            objs_: dict[int, Any] | None = getattr(view, "_objs", None)
            if objs_ is None:
                pool_ = [k for k in res if ev(k)]
                if len(pool_) > K:
                    pool_ = [pool_[i] for i in rng.permutation(len(pool_))[:K].tolist()]
                return pool_, None
            # the same draw, reading each record once for the codes too
            ok = [(k, o) for k, o in zip(res, map(objs_.get, res)) if _evictable(o)]
            if len(ok) > K:
                ok = [ok[i] for i in rng.permutation(len(ok))[:K].tolist()]
            return [k for k, _ in ok], [_state_code(o) for _, o in ok]
        # fast path: the first K distinct of iid uniform draws are a uniform K-subset of the
        # residents; when all are evictable (no pins, nothing in flight) that is the answer
        # (rng.random scaled, not rng.integers: the same uniform draws at half the call cost)
        first = list(map(res.__getitem__, _first_distinct(rng, n, K + K // 2 + 4, K)))
        if len(first) == K:
            objs: dict[int, Any] | None = getattr(view, "_objs", None)
            if objs is not None:  # as in _select_lru: evictable, and the codes in one pass
                recs: list[Any] = list(map(objs.get, first))
                if None not in recs:
                    codes = [_state_code(o) for o in recs if _evictable(o)]
                    if len(codes) == K:
                        return first, codes
            out = [k for k in first if ev(k)]
            if len(out) == K:
                return out, None
        # else the first K distinct evictable objects of iid uniform draws (uniform as well)
        drawn: set[int] = set()
        picked: list[int] = []
        while len(picked) < K and len(drawn) < 4 * K:
            for i in _uniform_ints(rng, n, 2 * K):
                if i in drawn:
                    continue
                drawn.add(i)
                if ev(res[i]):
                    picked.append(res[i])
                    if len(picked) == K:
                        break
        if len(picked) < K:  # most residents are pinned or in flight: draw among the rest
            got = set(picked)
            rest = [k for k in res if k not in got and ev(k)]
            if len(rest) > K - len(picked):
                rest = [rest[i] for i in rng.permutation(len(rest))[:K - len(picked)].tolist()]
            picked += rest
        return picked, None
    raise ConfigError(f"unknown candidate rule {rule!r}; choose one of {RULES}")


def _uniform_ints(rng: np.random.Generator, n: int, m: int) -> list[int]:
    """``m`` iid uniform integers in ``[0, n)``."""
    return (rng.random(m) * n).astype(np.intp).tolist()  # type: ignore[no-any-return]


def _first_distinct(rng: np.random.Generator, n: int, m: int, K: int) -> list[int]:
    """The first (at most) ``K`` distinct values of :func:`_uniform_ints` ``(rng, n, m)``, in
    draw order (the same draws and the same result with and without numba)."""
    if _distinct_kernel is None:
        return list(dict.fromkeys(_uniform_ints(rng, n, m)))[:K]
    out = np.empty(K, np.int64)
    return out[:_distinct_kernel(rng.random(m), n, out)].tolist()  # type: ignore[no-any-return]


def _distinct_kernel_py(x: np.ndarray, n: int, out: np.ndarray) -> int:
    """Writes the first distinct values of ``int(x * n)`` into ``out`` (as many as fit);
    returns how many."""
    c = 0
    for j in range(x.shape[0]):
        v = int(x[j] * n)  # truncation, as astype(np.intp) (x * n >= 0)
        new = True
        for q in range(c):
            if out[q] == v:
                new = False
                break
        if new:
            out[c] = v
            c += 1
            if c == out.shape[0]:
                break
    return c


# ---------------------------------------------------------------------- features
def observe(tracker: FeatureTracker, view: PoolView, keys: Any, K: int
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features of ``keys`` (at most ``K``), padded to ``K`` rows, and the global features.

    Returns ``(cand, mask, glob)``: ``cand`` float32 ``(K, F)`` in [0, 1], ``mask`` bool ``(K,)``
    (True for the ``len(keys)`` real rows), ``glob`` float32 ``(G,)`` in [0, 1]. Row ``i`` of
    ``cand`` depends only on ``keys[i]`` and the pool, except ``recency_rank`` which depends on
    the set of keys (not on their order).
    """
    if isinstance(keys, np.ndarray):
        keys = keys.tolist()  # Python ints: dict lookups with NumPy scalars are slow
    cand, mask, glob = _observe(tracker, view, keys, K, None)
    return cand, mask.copy(), glob


def _observe(tracker: FeatureTracker, view: PoolView, keys: Any, K: int,
             codes: list[int] | bool | None, v: np.ndarray | None = None,
             out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`observe` of a sequence of Python ints; ``codes`` (each key's state code, as
    :func:`_select` gives them; ``True``: already in ``v``) spares reading the pool's records
    again. ``out``: a ``(K + 1, F)`` float32 buffer to reuse (rows ``len(keys)..K-1`` are then
    left as they were), else a new one."""
    n = len(keys)
    if n > K:
        raise ConfigError(f"observe: {n} candidate keys for K={K}; pass at most K keys")
    # one buffer: rows 0..K-1 the candidates' features, row K the global features (G <= F)
    if out is None:
        out = np.zeros((K + 1, F), np.float32)
    mask = _mask_table(K)[n]  # read-only (observe() hands out a copy)
    fc = _features_c if _features_c is not None else c_features()
    cand, glob = out[:K], out[K, :G]
    packed = _pack(tracker, view, keys, K, codes, v)
    if isinstance(packed, np.ndarray):
        # the usual case, every candidate has history (and numba is on: tests turn it off by
        # setting _numeric_kernel to None): one kernel call gathers the rows and computes
        (fc or _observe_kernel)(tracker._S, packed, out)
        return cand, mask, glob
    sls, codes, t, decay, inv_cap, times, g = packed
    glob[:] = g
    if n == 0:
        return cand, mask, glob
    rows = tracker._S[sls]  # a copy; rows of keys without history are filled below
    seen: Any = 1.0
    if -1 in sls:
        for i, s in enumerate(sls):
            if s < 0:
                oi = view.info(keys[i]) if keys[i] in view else None
                rows[i] = _EMPTY_ROW
                rows[i, _INSERT] = rows[i, _CREATE] = oi.created_tick if oi is not None else t
                rows[i, _SIZE] = oi.size if oi is not None else 0.0
                rows[i, _KIND] = oi.kind if oi is not None else 0.0
        seen = [float(s >= 0) for s in sls]
    if _numeric_kernel is None:
        _numeric_numpy(rows, np.array(codes, np.int64), seen, t, decay, inv_cap, times, cand)
    else:
        seen_a = np.ones(n) if isinstance(seen, float) else np.array(seen)
        _numeric_kernel(rows, np.arange(n), np.array(codes, np.int64), seen_a,
                        np.array((t, *decay, inv_cap) + times), cand)
    return cand, mask, glob


_NPRM = 10  # length of _numeric_kernel_py's prm
_HEAD = 1 + _NPRM + G  # packed buffer: n, prm[_NPRM], globals[G], then slots[K], codes[K]


_put_head: Any = struct.Struct(f"{_HEAD}d").pack_into  # v[:_HEAD] = head, without NumPy's conversion


def _packed_buffer(K: int) -> np.ndarray:
    """A buffer for :func:`_pack` / :func:`_select` at ``K`` candidates."""
    return np.zeros(_HEAD + 2 * K, np.float64)


def _pack(tracker: FeatureTracker, view: PoolView, keys: list[int], K: int,
          codes: list[int] | bool | None, v: np.ndarray | None = None) -> Any:
    """Everything :func:`_observe` computes from besides the tracker's rows. When numba is on
    and every key has history: the float64 array ``(n, prm[_NPRM], globals[G], slots[K],
    codes[K])`` for :func:`_observe_kernel` (all values exact in float64; ``v`` when given, else
    a new one; ``codes`` ``True``: the slots and codes are in ``v`` already, from
    :func:`_select`); otherwise the tuple ``(slots, codes, t, decay, 1 / capacity, times,
    globals)`` (slot ``-1``: no history)."""
    n = len(keys)
    if codes is True:  # _select wrote the slots and codes into v
        assert v is not None
        _head_into(tracker, view, n, K, v)
        return v
    head = _head_py(tracker, view, n, K)
    try:  # candidates are tracked objects: every key has a row
        sls = list(map(tracker._slot.__getitem__, keys))
    except KeyError:  # a key without history (-1; a prefetch candidate may be one)
        get = tracker._slot.get
        sls = [get(k, -1) for k in keys]
    if codes is None:
        try:  # state flags and kind: one code per candidate, expanded by a table lookup
            codes = [_state_code(o) for o in map(view.info, keys)]
        except KeyError:  # a key the pool does not know (a prefetch candidate may be one)
            codes = [0] * n
            for i, k in enumerate(keys):
                if k in view:
                    codes[i] = _state_code(view.info(k))
    if _numeric_kernel is not None and _observe_kernel is not None and n and -1 not in sls:
        if v is None:
            v = _packed_buffer(K)
        _put_head(v, 0, *head)
        v[_HEAD:_HEAD + n] = sls
        v[_HEAD + K:_HEAD + K + n] = codes
        return v
    return sls, codes, head[1], head[2:5], head[5], head[6:11], head[_HEAD - G:]


def _head_into(tracker: FeatureTracker, view: PoolView, n: int, K: int, v: np.ndarray) -> None:
    """The head of a decision over ``n`` candidates into ``v[:_HEAD]`` (:func:`_head_py`)."""
    _put_head(v, 0, *_head_py(tracker, view, n, K))


def _head_py(tracker: FeatureTracker, view: PoolView, n: int, K: int) -> tuple[float, ...]:
    """``(n, prm[_NPRM], globals[G])`` of a decision over ``n`` candidates (float64 here,
    float32 in the observation)."""
    cap = view.capacity
    cost = view.cost
    now = cost.now
    t = view.tick
    p = cost.preset
    times = _NO_TIMES if p is None else (
        float(p.h2d_latency_ns), 1.0 / p.h2d_gbps, float(p.d2h_latency_ns), 1.0 / p.d2h_gbps, 1.0)
    x = tracker._epoch - t
    return (
        n, t, 2.0 ** (x * _IH0), 2.0 ** (x * _IH1), 2.0 ** (x * _IH2), 1.0 / cap, *times,
        min(view.used / cap, 1.0),
        min(view.bytes_in_flight / cap, 1.0),
        min(max(tracker.miss_rate, 0.0), 1.0),
        n / K,
        cost.stall_ns / now if now > 0 else 0.0,
        min(math.log1p(len(tracker._order)) / _LOG_N, 1.0),
    )


def _numeric_numpy(rows: np.ndarray, codes: np.ndarray, seen: Any, t: int,
                   decay: tuple[float, ...], inv_cap: float, times: tuple[float, ...],
                   cand: np.ndarray) -> None:
    """The arithmetic of :func:`observe` (the reference; :func:`_numeric_kernel` is the same
    with numba): writes the features of ``rows`` into ``cand[:len(rows)]``."""
    n = len(rows)
    ring = np.sort(rows[:, _RING0:_SIZE], axis=1)  # oldest (or empty) first
    # raw = 1 + [tick distances, count, decayed counts, gaps, size]; its log is the block
    raw = np.empty((n, _N_LOG))
    raw[:, 0] = ring[:, -1]
    raw[:, 1:3] = rows[:, _INSERT:_COUNT]
    np.subtract(t + 1.0, raw[:, :3], out=raw[:, :3])
    raw[:, 3:_I_GAP] = rows[:, _COUNT:_RING0]
    raw[:, 4:_I_GAP] *= decay
    np.subtract(ring[:, :0:-1], ring[:, -2::-1], out=raw[:, _I_GAP:_I_GAP + N_GAPS])
    raw[:, -1] = rows[:, _SIZE]
    raw[:, 3:] += 1.0
    rec = raw[:, 0].copy()  # the rank compares the distances as they are
    # HORIZON: the count of an older object scaled to its last HORIZON ticks, every distance
    # capped (the gaps and recency only where they are real: an empty ring entry stays huge)
    old = raw[:, 2] > _H1
    if old.any():
        raw[old, 3] = rows[old, _COUNT] * (_H1 / raw[old, 2]) + 1.0
    np.minimum(raw[:, 1:3], _H1, out=raw[:, 1:3])
    np.minimum(raw[:, 0], _H1, out=raw[:, 0], where=ring[:, -1] >= 0.0)
    gaps = raw[:, _I_GAP:_I_GAP + N_GAPS]
    np.minimum(gaps, _H1, out=gaps, where=ring[:, -2::-1] >= 0.0)
    out = cand[:n]
    np.log(raw, out=out[:, :_N_LOG])
    out[:, :_N_LOG] *= _INV_LOG_SCALE
    out[:, _I_RANK] = (rec[:, None] > rec).sum(1)
    out[:, _I_RANK] *= 1.0 / max(n - 1, 1)
    out[:, _I_RANK + 1] = rows[:, _SIZE]
    out[:, _I_RANK + 1] *= inv_cap
    out[:, _I_STATE:_I_SEEN] = _STATE_TABLE[codes]
    out[:, _I_SEEN] = seen
    if times[4]:
        size = rows[:, _SIZE]
        out[:, _I_SEEN + 1] = np.log1p(times[0] + size * times[1])
        out[:, _I_SEEN + 2] = out[:, _I_STATE] * np.log1p(times[2] + size * times[3])
        out[:, _I_SEEN + 1:] *= 1.0 / _LOG_NS
    else:
        out[:, _I_SEEN + 1:] = 0.0
    np.minimum(out, 1.0, out=out)


_NO_TIMES = (0.0, 1.0, 0.0, 1.0, 0.0)  # no cost preset: copy times are not features
_INV_LOG_SCALE64 = _INV_LOG_SCALE.astype(np.float64)
_STATE_TABLE32 = _STATE_TABLE.astype(np.float32)


def _numeric_kernel_py(S: np.ndarray, sl: np.ndarray, codes: np.ndarray, seen: np.ndarray,
                       prm: np.ndarray, out: np.ndarray) -> None:
    """:func:`_numeric_numpy` as one loop, compiled by numba when it is installed; candidate
    ``i``'s row is ``S[sl[i]]``. ``prm`` is ``(t, decay_0, decay_1, decay_2, 1 / capacity, h2d
    latency, 1 / h2d bandwidth, d2h latency, 1 / d2h bandwidth, timed)``; few arguments,
    because numba's call overhead grows with them. Allocates nothing but two small scratch
    arrays."""
    t, d0, d1, d2, inv_cap = prm[0], prm[1], prm[2], prm[3], prm[4]
    h2d_lat, h2d_inv_bw, d2h_lat, d2h_inv_bw, timed = prm[5], prm[6], prm[7], prm[8], prm[9]
    inv_scale, table = _INV_LOG_SCALE64, _STATE_TABLE32
    n = sl.shape[0]
    ring = np.empty(_RING)
    rec = np.empty(n)  # raw recency (t + 1 - last access) of each candidate, for the rank
    for i in range(n):
        s = sl[i]
        for j in range(_RING):  # insertion sort, ascending
            v = S[s, _RING0 + j]
            m = j
            while m > 0 and ring[m - 1] > v:
                ring[m] = ring[m - 1]
                m -= 1
            ring[m] = v
        r0 = t + 1.0 - ring[_RING - 1]
        rec[i] = r0
        if r0 > _H1 and ring[_RING - 1] >= 0.0:  # HORIZON caps the real distances
            r0 = _H1
        age = min(t + 1.0 - S[s, _INSERT], _H1)
        life = t + 1.0 - S[s, _CREATE]
        cnt = S[s, _COUNT] + 1.0
        if life > _H1:
            cnt = S[s, _COUNT] * (_H1 / life) + 1.0
            life = _H1
        o = out[i]
        # log-scaled block, in _N_LOG order (the same float64 values as _numeric_numpy's raw)
        o[0] = np.float32(np.log(r0)) * np.float32(inv_scale[0])
        o[1] = np.float32(np.log(age)) * np.float32(inv_scale[1])
        o[2] = np.float32(np.log(life)) * np.float32(inv_scale[2])
        o[3] = np.float32(np.log(cnt)) * np.float32(inv_scale[3])
        o[4] = np.float32(np.log(S[s, _E0] * d0 + 1.0)) * np.float32(inv_scale[4])
        o[5] = np.float32(np.log(S[s, _E0 + 1] * d1 + 1.0)) * np.float32(inv_scale[5])
        o[6] = np.float32(np.log(S[s, _E0 + 2] * d2 + 1.0)) * np.float32(inv_scale[6])
        for j in range(N_GAPS):
            g = (ring[_RING - 1 - j] - ring[_RING - 2 - j]) + 1.0
            if g > _H1 and ring[_RING - 2 - j] >= 0.0:
                g = _H1
            o[_I_GAP + j] = np.float32(np.log(g)) * np.float32(inv_scale[_I_GAP + j])
        o[_N_LOG - 1] = np.float32(np.log(S[s, _SIZE] + 1.0)) * np.float32(inv_scale[_N_LOG - 1])
        o[_I_RANK + 1] = np.float32(S[s, _SIZE]) * np.float32(inv_cap)
        c = codes[i]
        for j in range(4 + N_KINDS):
            o[_I_STATE + j] = table[c, j]
        o[_I_SEEN] = seen[i]
        if timed:
            size = S[s, _SIZE]
            o[_I_SEEN + 1] = np.float32(np.log1p(h2d_lat + size * h2d_inv_bw)) * np.float32(1.0 / _LOG_NS)
            o[_I_SEEN + 2] = (o[_I_STATE] * np.float32(np.log1p(d2h_lat + size * d2h_inv_bw))
                              * np.float32(1.0 / _LOG_NS))
        else:
            o[_I_SEEN + 1] = 0.0
            o[_I_SEEN + 2] = 0.0
    inv_n1 = np.float32(1.0 / max(n - 1, 1))
    for i in range(n):
        o = out[i]
        r = 0
        for m in range(n):
            if rec[i] > rec[m]:
                r += 1
        o[_I_RANK] = np.float32(r) * inv_n1
        for j in range(F):
            if o[j] > 1.0:
                o[j] = 1.0


_numeric_kernel: Any = None
try:  # numba is optional: NumPy alone computes the same features (tests hold them equal)
    from numba import njit

    _numeric_kernel = njit(cache=True, nogil=True)(_numeric_kernel_py)
except ImportError:  # pragma: no cover - numba is a dependency; this keeps deployment NumPy-only
    pass



def _observe_kernel_py(S: np.ndarray, v: np.ndarray, out: np.ndarray) -> None:
    """:func:`_numeric_kernel_py` plus the globals, from one array: ``v`` is ``(n, prm[_NPRM],
    globals[G], slots[K], codes[K])`` as float64 (all exact; :func:`_pack`), ``out`` the
    ``(K + 1, F)`` float32 buffer (candidates in rows ``0..K-1``, globals in row ``K``; rows
    ``n..K-1`` are left as they are)."""
    n = int(v[0])
    K = out.shape[0] - 1
    sl = np.empty(n, np.int64)
    codes = np.empty(n, np.int64)
    seen = np.empty(n)
    for i in range(n):
        sl[i] = int(v[_HEAD + i])
        codes[i] = int(v[_HEAD + K + i])
        seen[i] = 1.0
    _numeric_kernel(S, sl, codes, seen, v[1:1 + _NPRM], out[:K])
    for j in range(G):
        out[K, j] = np.float32(v[1 + _NPRM + j])


def _access_kernel_py(V: np.ndarray, b: int, t: int, x: int, two: float) -> None:
    """:meth:`FeatureTracker._access`'s writes into row ``V[b:b + _NCOL]`` (``x`` = ticks since
    the counters' epoch). ``two`` is 2.0, passed at run time: with a constant base the compiler
    would turn ``pow`` into ``exp2``, which rounds differently from Python's ``**``."""
    c = V[b + _COUNT]
    V[b + _RING0 + int(c) % _RING] = t
    V[b + _COUNT] = c + 1.0
    V[b + _E0] += two ** (x * _IH0)
    V[b + _E0 + 1] += two ** (x * _IH1)
    V[b + _E0 + 2] += two ** (x * _IH2)


_IH0, _IH1, _IH2 = _IH
_observe_kernel: Any = None
_distinct_kernel: Any = None
_access_kernel: Any = _access_kernel_py
if _numeric_kernel is not None:
    _access_kernel = njit(cache=True, nogil=True)(_access_kernel_py)
    _observe_kernel = njit(cache=True, nogil=True)(_observe_kernel_py)
    _distinct_kernel = njit(cache=True, nogil=True)(_distinct_kernel_py)

_features_c: Any = None  # policies._mlp.features once set up; False: not available


def _layout() -> dict[str, int]:
    """This module's constants the C feature kernel (policies/csrc/features.c) is written for."""
    return {"INSERT": _INSERT, "CREATE": _CREATE, "COUNT": _COUNT, "E0": _E0, "RING0": _RING0,
            "RING": _RING, "SIZE": _SIZE, "NCOL": _NCOL, "NPRM": _NPRM, "G": G, "HEAD": _HEAD,
            "N_LOG": _N_LOG, "I_GAP": _I_GAP, "I_RANK": _I_RANK, "I_STATE": _I_STATE,
            "N_STATE": 4 + N_KINDS, "I_SEEN": _I_SEEN, "F": F, "HORIZON": HORIZON}


def c_features() -> Any:
    """``policies._mlp.features(S, v, x)``: :func:`_observe_kernel_py` in C (a decision's
    features in one call; set up on first use; ``None`` without the extension, or with a build
    written for another layout of this module: the numba kernel or NumPy then serve)."""
    global _features_c
    if _features_c is None:
        _features_c = False
        mlp = _pool.load_accelerator("policies._mlp")
        if mlp is not None:
            try:
                mlp.set_layout(_layout(), _INV_LOG_SCALE, _STATE_TABLE32, float(np.float32(1.0 / _LOG_NS)))
            except (AttributeError, ValueError) as e:  # a stale build
                _log.warning(
                    "policies._mlp does not match policies.features (%s): features computed "
                    "without it; rebuild with `pip install -e .`", e)
            else:
                _features_c = mlp.features
    return _features_c or None


ACCELERATED = _numeric_kernel is not None
"""True when the numba kernel computes the features (else the NumPy reference does)."""


_MASKS: dict[int, np.ndarray] = {}


def _mask_table(K: int) -> np.ndarray:
    """Row ``n`` is the mask of ``n`` valid candidates out of ``K``."""
    m = _MASKS.get(K)
    if m is None:
        m = _MASKS[K] = np.tri(K + 1, K, -1, dtype=bool)
        m.flags.writeable = False  # rows are handed out as they are
    return m
