"""Per-candidate features of a pool: one module, used by the environments during training and by
the exported learned policy in deployment, unchanged. NumPy and :mod:`policies.kernels`; no
gymnasium, no torch.

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
call of :func:`policies.kernels.access`). A decision's candidates are selected here, their
slots, state codes and the global features packed into one float64 buffer (:func:`_pack`), and
the matrix computed in one call of :func:`policies.kernels.features`: the one implementation of
the arithmetic, compiled by Cython where it is built (:data:`COMPILED`) and interpreted
elsewhere, with the same float32 results bit for bit. (A NumPy oracle of the same arithmetic
lives in ``tests/policies/feature_oracle.py``.)
"""

from __future__ import annotations

import math
import struct
from collections import OrderedDict
from itertools import islice
from typing import TYPE_CHECKING, Any

import numpy as np

from cachegym.allocator.errors import ConfigError, PolicyFileError
from cachegym.allocator.pool import DEVICE, H2D
from cachegym.allocator.seams import Forwarding
from cachegym.policies import kernels as _k
from cachegym.policies.base import EvictionPolicy
from cachegym.policies.lru import OrderedPolicy

if TYPE_CHECKING:
    from cachegym.allocator.pool import PoolView

__all__ = [
    "FEATURE_VERSION", "FEATURE_NAMES", "GLOBAL_NAMES", "HALF_LIVES", "HORIZON", "N_GAPS", "RULES", "MAX_K",
    "feature_spec", "check_spec", "FeatureTracker", "Observed", "select_candidates", "observe",
    "select_keys", "observe_keys", "fill_observation", "packed_buffer",
    "COMPILED", "F", "G",
]

_L = _k.LAYOUT  # the numbers of the arithmetic live with it, in policies/kernels.py

FEATURE_VERSION = 2
HALF_LIVES: tuple[int, ...] = tuple(_L["HALF_LIVES"])
"""Half-lives (in ticks) of the decayed access counters."""
HORIZON: int = _L["HORIZON"]
"""Ticks beyond which the features stop growing, so that they are stationary: every tick
distance (recency, age, lifetime, reuse gaps) is capped at ``HORIZON``, and the access count of
an object older than that is scaled to its last ``HORIZON`` ticks (``frequency`` is then
``count * (HORIZON + 1) / (lifetime + 1)``, the same rate of access). Within the first
``HORIZON`` ticks of a pool (the whole of a training window: ``conf/env/evict.yaml``'s
``window``) nothing changes; a pool that has served millions of accesses still shows the
network the ranges it was trained on. Without the cap a network trained on 16,384-access
windows ranked a long-running Zipf workload's objects by their ever-growing ages and counts,
and lost to LRU (version 1 of the features)."""
N_GAPS: int = _L["N_GAPS"]
"""Number of most recent reuse gaps kept per object."""
N_KINDS: int = _L["N_KINDS"]  # cachegym.allocator.trace.Kind
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
    *(f"kind_{i}" for i in range(N_KINDS)),  # one-hot cachegym.allocator.trace.Kind
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
assert (_L["F"], _L["G"]) == (F, G), "policies/kernels.py computes another number of features"
COMPILED: bool = _k.COMPILED
"""True where the kernels run compiled (Cython), False where they run interpreted."""

_LOG_T, _LOG_N, _LOG_SIZE, _LOG_NS = _k.LOG_T, _k.LOG_N, _k.LOG_SIZE, _k.LOG_NS
_LOG_SCALE = _k.LOG_SCALE  # the denominators of the log-scaled block
_MISS_ALPHA = 1.0 / 128
_RENORM = 256.0  # renormalise decayed counters when (t - epoch) / h_min exceeds this
assert len(HALF_LIVES) == 3, "FeatureTracker._access unrolls three decayed counters"
assert len(GLOBAL_NAMES) <= len(FEATURE_NAMES), "observe keeps the globals in one more candidate row"
_IH = tuple(1.0 / h for h in HALF_LIVES)
_IH0, _IH1, _IH2 = _IH
_H_INV = np.array(_IH)

# columns of the per-slot state array (policies/kernels.py's docstring: a tracker row)
_INSERT, _CREATE, _COUNT, _E0 = _L["INSERT"], _L["CREATE"], _L["COUNT"], _L["E0"]
_RING0, _RING = _L["RING0"], _L["RING"]  # ticks of the last N_GAPS + 1 accesses, circular
_SIZE, _KIND, _NCOL = _L["SIZE"], _L["KIND"], _L["NCOL"]
_MISSING = _L["MISSING"]  # an empty ring entry j holds -(j + 1) * _MISSING: every gap to it is huge
_EMPTY_ROW = np.zeros(_NCOL)
_EMPTY_ROW[_RING0:_SIZE] = -_MISSING * np.arange(1, _RING + 1)
_N_LOG, _I_GAP, _I_RANK = _L["N_LOG"], _L["I_GAP"], _L["I_RANK"]
_I_STATE, _I_SEEN = _L["I_STATE"], _L["I_SEEN"]
assert (DEVICE, H2D) == (0, 2)  # the residency numbers policies/kernels.py reads


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


class FeatureTracker(OrderedPolicy):
    """Observes the pool's hooks and keeps the per-object history features are made of.

    On its own it is an LRU policy (``victim`` and ``eviction_order`` are
    :class:`policies.lru.OrderedPolicy`'s over ``_order``, least recently used first, as
    :class:`policies.lru.LRU`), so it can sit in the pool's policy slot while an agent answers
    through :meth:`Pool.steps`.

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
        self._views()
        self._slot: dict[int, int] = {}
        self._free_slots: list[int] = []
        self._next = 0
        self._order: OrderedDict[int, None] = OrderedDict()
        self._res: list[int] = []
        self._res_pos: dict[int, int] = {}
        # beside _res: each resident's pool record and slot
        self._res_rec: list[Any] = []
        self._res_slot: list[int] = []
        # the last uniform sample of residents (select_candidates' "sample" rule) and their
        # positions in _res, which its features are packed by (_pack)
        self._sampled: list[int] | None = None
        self._sample_idx = np.empty(0, np.int64)
        self._draws = np.empty(0, np.float64)  # the sample's uniform draws (a buffer)
        self._epoch = 0
        self.miss_rate = 0.0

    def _views(self) -> None:
        """``_V``: ``_S`` flat (what :func:`policies.kernels.access` writes); ``_Sk``, ``_Vk``:
        ``_S`` and ``_V`` as the kernels take them (:func:`policies.kernels.matrix`)."""
        self._V = self._S.reshape(-1)
        self._Sk = _k.matrix(self._S)
        self._Vk = _k.vector(self._V)

    def __getstate__(self) -> dict[str, Any]:  # pickle/copy: the views must stay views of _S
        state = self.__dict__.copy()
        del state["_V"], state["_Sk"], state["_Vk"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._views()

    # ------------------------------------------------------------------ hooks
    # victim and eviction_order: OrderedPolicy's, over _order (least recently used first)
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

    def resident_records(self) -> list[Any]:
        """The pool's record of each key of :meth:`resident`, at the same index (do not
        modify)."""
        return self._res_rec

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, key: int) -> bool:
        return key in self._slot

    def last_access(self, keys: Any) -> np.ndarray:
        """Tick of each key's last access (``-1`` without one: never seen, or only prefetched;
        an empty ring's entries are negative)."""
        keys = keys.tolist() if isinstance(keys, np.ndarray) else keys if type(keys) is list else list(keys)
        out = np.empty(len(keys), np.int64)
        _k.last_ticks(self._Sk, self._slot, keys, out)
        return out

    def teacher(self, keys: list[int], next_use: np.ndarray, tick: int, farthest: bool,
                rows: np.ndarray, nxt: np.ndarray, keys_out: np.ndarray,
                dist_out: np.ndarray) -> int:
        """An eviction decision's teacher in one kernel call (:func:`policies.kernels.teacher`):
        :meth:`last_access` of ``keys`` into ``rows``, the row of each one's next access after
        it (``next_use``: a trace's, int64) into ``nxt``, then the oracle's choice among them
        (with ``farthest``, Belady's), writing ``keys_out`` and the ticks from ``tick`` to each
        next use into ``dist_out`` (all int64 but ``dist_out``, float64; ``keys_out`` and
        ``dist_out`` of the decision's ``K``)."""
        return int(_k.teacher(self._Sk, self._slot, keys, next_use, tick, farthest, rows, nxt,
                              keys_out, dist_out))

    # ------------------------------------------------------------------ internals
    def _access(self, s: int, t: int) -> None:
        # per-access cost matters (it is paid on every hit): one kernel call
        x = t - self._epoch
        if x > _RENORM * HALF_LIVES[0]:
            self._renormalise(t)
            x = 0
        _k.access(self._Vk, s * _NCOL, t, x, 2.0)

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
            self._views()

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


class Observed(Forwarding):
    """``policy`` answers ``victim`` (and its optional members are the pool's,
    :class:`~allocator.seams.Forwarding`); ``tracker`` sees every hook after ``policy`` (a guard
    in ``policy`` first lets its shadows start the prefetches made after the previous request,
    which read ``tracker`` as it was then)."""

    labels_as_wrapped = True  # (errors name the policy observed)

    def __init__(self, policy: EvictionPolicy, tracker: FeatureTracker | None = None) -> None:
        super().__init__(policy)
        self.policy = policy
        self.tracker = tracker if tracker is not None else FeatureTracker()
        self.name = f"observed-{self.name}"

    def on_hit(self, view: PoolView, key: int) -> None:
        self.policy.on_hit(view, key)
        self.tracker.on_hit(view, key)

    def on_miss(self, view: PoolView, key: int) -> None:
        self.policy.on_miss(view, key)
        self.tracker.on_miss(view, key)

    def on_insert(self, view: PoolView, key: int) -> None:
        self.policy.on_insert(view, key)
        self.tracker.on_insert(view, key)

    def on_evict(self, view: PoolView, key: int) -> None:
        self.policy.on_evict(view, key)
        self.tracker.on_evict(view, key)

    def on_free(self, view: PoolView, key: int) -> None:
        self.policy.on_free(view, key)
        self.tracker.on_free(view, key)


# ---------------------------------------------------------------------- candidates
def select_candidates(tracker: FeatureTracker, view: PoolView, K: int, rule: str = "lru",
                      rng: np.random.Generator | None = None) -> np.ndarray:
    """Up to ``K`` evictable keys (int64), chosen by ``rule``: ``"lru"`` gives the K least
    recently used, least recent first; ``"sample"`` draws K evictable objects uniformly without
    replacement (``rng`` required; as LRB), in draw order."""
    return np.array(select_keys(tracker, view, K, rule, rng), np.int64)


def _select_lru(tracker: FeatureTracker, view: PoolView, K: int) -> list[int]:
    """``select_candidates(rule="lru")`` as a list (the view's records read in one kernel call
    where it exposes them)."""
    order = tracker._order
    objs: dict[int, Any] | None = getattr(view, "objects", None)
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
        return out
    first = list(islice(order, K))
    out = _k.evictable_keys(objs, first, K)
    if len(out) < K and len(order) > K:  # some of the first K are pinned or in flight
        out = _k.evictable_keys(objs, order, K)
    return out


def select_keys(tracker: FeatureTracker, view: PoolView, K: int, rule: str,
                rng: np.random.Generator | None) -> list[int]:
    """:func:`select_candidates` as a list of keys: what the environments and the deployed
    policy call at each decision, without the conversions of the array forms."""
    if rule == "lru":
        return _select_lru(tracker, view, K)
    ev = view.evictable
    if rule == "sample":
        if rng is None:
            raise ConfigError("select_candidates(rule='sample') needs rng (a np.random.Generator)")
        res = tracker._res
        n = len(res)
        if n <= 4 * K:
            objs_: dict[int, Any] | None = getattr(view, "objects", None)
            if objs_ is None:
                pool_ = [k for k in res if ev(k)]
                if len(pool_) > K:
                    pool_ = [pool_[i] for i in rng.permutation(len(pool_))[:K].tolist()]
                return pool_
            ok = _k.evictable_keys(objs_, res, n)  # the same draw, without a call per key
            if len(ok) > K:
                ok = [ok[i] for i in rng.permutation(len(ok))[:K].tolist()]
            return ok
        # fast path: the first K distinct of iid uniform draws are a uniform K-subset of the
        # residents; when all are evictable (no pins, nothing in flight) that is the answer
        # (rng.random scaled, not rng.integers: the same uniform draws at half the call cost)
        objs: dict[int, Any] | None = getattr(view, "objects", None)
        if objs is not None:  # (the draws, their keys and their records in one kernel call;
            # the pool's records, kept beside the residents: ObjectInfo)
            idx, u = tracker._sample_idx, tracker._draws
            if idx.shape[0] != K:
                idx, u = tracker._sample_idx, tracker._draws = np.empty(K, np.int64), np.empty(K + K // 2 + 4)
            if type(rng) is np.random.Generator:  # the draws of rng.random(K + K // 2 + 4),
                rng.random(out=u)  # into the buffer
            else:
                u[:] = rng.random(u.shape[0])
            out = _k.sample_keys(_kernel_view(u, _k.vector), n, res, tracker.resident_records(), K,
                                 _kernel_view(idx, _k.indices))
            if out:
                tracker._sampled = out
                return out  # type: ignore[no-any-return]
        else:
            first = list(map(res.__getitem__, _first_distinct(rng, n, K + K // 2 + 4, K)))
            if len(first) == K:
                out = [k for k in first if ev(k)]
                if len(out) == K:
                    return out
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
        return picked
    raise ConfigError(f"unknown candidate rule {rule!r}; choose one of {RULES}")


def _uniform_ints(rng: np.random.Generator, n: int, m: int) -> list[int]:
    """``m`` iid uniform integers in ``[0, n)``."""
    return (rng.random(m) * n).astype(np.intp).tolist()  # type: ignore[no-any-return]


def _first_distinct(rng: np.random.Generator, n: int, m: int, K: int) -> list[int]:
    """The first (at most) ``K`` distinct values of :func:`_uniform_ints` ``(rng, n, m)``, in
    draw order."""
    out = np.empty(K, np.int64)
    return out[:_k.first_distinct(rng.random(m), n, out)].tolist()  # type: ignore[no-any-return]


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
    cand, mask, glob = observe_keys(tracker, view, keys, K)
    return cand, mask.copy(), glob


def observe_keys(tracker: FeatureTracker, view: PoolView, keys: Any, K: int,
                 v: np.ndarray | None = None,
                 out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`observe` of a list of Python ints. ``v``: a
    :func:`packed_buffer` to reuse; ``out``: a ``(K + 1, F)`` float32 buffer to reuse (rows
    ``len(keys)..K-1`` are then left as they were), else new ones."""
    # one buffer: rows 0..K-1 the candidates' features, row K the global features (G <= F)
    reused = out is not None  # a caller's buffer, used again: its kernel view is kept
    if out is None:
        out = np.zeros((K + 1, F), np.float32)
    if v is None:
        v = packed_buffer(K)
    _fill(tracker, view, keys, K, v, out, reused)
    return out[:K], _mask_table(K)[len(keys)], out[K, :G]  # (the mask read-only: observe() copies it)


def fill_observation(tracker: FeatureTracker, view: PoolView, keys: list[int], K: int,
                     v: np.ndarray, out: np.ndarray) -> None:
    """:func:`observe_keys` into the caller's buffers, ``v`` (:func:`packed_buffer`) and
    ``out`` (``(K + 1, F)`` float32, used again and again), without the views of it that
    function returns: what a deployed policy's decision fills before its forward pass."""
    _fill(tracker, view, keys, K, v, out, True)


def _fill(tracker: FeatureTracker, view: PoolView, keys: Any, K: int, v: np.ndarray,
          out: np.ndarray, reused: bool) -> None:
    """The features of ``keys`` into ``out`` (``reused``: a caller's buffer whose kernel view
    is kept), their packed slots, codes and globals into ``v``."""
    n = len(keys)
    if n > K:
        raise ConfigError(f"observe: {n} candidate keys for K={K}; pass at most K keys")
    sls = _pack(tracker, view, keys, K, v)
    if sls is None:  # the usual case, every candidate has history: one kernel call
        _k.features(tracker._Sk, _kernel_view(v, _k.vector),
                    _kernel_view(out, _k.observation) if reused else out)
        return
    # keys without history (a prefetch candidate may be one): their rows are made here, an
    # empty history and what the pool knows of them, and the kernel runs on these rows
    rows = tracker._S[[max(s, 0) for s in sls]]  # a copy
    t = view.tick
    for i, s in enumerate(sls):
        if s < 0:
            oi = view.info(keys[i]) if keys[i] in view else None
            rows[i] = _EMPTY_ROW
            rows[i, _INSERT] = rows[i, _CREATE] = oi.created_tick if oi is not None else t
            rows[i, _SIZE] = oi.size if oi is not None else 0.0
            rows[i, _KIND] = oi.kind if oi is not None else 0.0
    v[_HEAD:_HEAD + n] = range(n)
    _k.features(rows, v, out)
    for i, s in enumerate(sls):
        if s < 0:
            out[i, _I_SEEN] = 0.0


_NPRM = _L["NPRM"]
_HEAD = _L["HEAD"]  # packed buffer: n, prm[_NPRM], globals[G], then slots[K], codes[K], scratch[K]


_put_head: Any = struct.Struct(f"{_HEAD}d").pack_into  # v[:_HEAD] = head, without NumPy's conversion


_VIEWS: OrderedDict[int, tuple[np.ndarray, Any]] = OrderedDict()


def _kernel_view(a: np.ndarray, make: Any) -> Any:
    """``make(a)`` (a kernel's view of a buffer that is used again and again: an env's or a
    policy's), kept for the last 64 buffers (each entry holds ``a``, so its id is not reused)."""
    hit = _VIEWS.get(id(a))
    if hit is not None:
        return hit[1]
    kv = make(a)
    _VIEWS[id(a)] = (a, kv)
    if len(_VIEWS) > 64:
        _VIEWS.popitem(last=False)
    return kv


def packed_buffer(K: int) -> np.ndarray:
    """A buffer for :func:`_pack` at ``K`` candidates (``policies/kernels.py``'s layout)."""
    return np.zeros(_HEAD + 3 * K, np.float64)


def _pack(tracker: FeatureTracker, view: PoolView, keys: list[int], K: int,
          v: np.ndarray) -> list[int] | None:
    """Writes into ``v`` everything :func:`policies.kernels.features` computes from besides
    the tracker's rows: ``(n, prm[_NPRM], globals[G], slots[K], codes[K])`` (all values exact
    in float64). Returns ``None`` when every key has history, else each key's slot (``-1``: no
    history)."""
    n = len(keys)
    _put_head(v, 0, *_head_py(tracker, view, n, K))
    # tracker rows and state flags and kind (one code per candidate, expanded by a table lookup)
    vk = _kernel_view(v, _k.vector)
    if keys is tracker._sampled and _k.pack_sampled(  # the residents of a sample, by position
            tracker._res, tracker._res_rec, tracker._res_slot,
            _kernel_view(tracker._sample_idx, _k.indices), keys, vk, K):
        return None
    objs: dict[int, Any] | None = getattr(view, "objects", None)
    if objs is None:  # (a view without its records: the ones of these keys it knows)
        objs = {k: view.info(k) for k in keys if k in view}
    if _k.pack_keys(tracker._slot, objs, keys, vk, K):
        return v[_HEAD:_HEAD + n].astype(np.int64).tolist()  # type: ignore[no-any-return]
    return None


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


_NO_TIMES = (0.0, 1.0, 0.0, 1.0, 0.0)  # no cost preset: copy times are not features


_MASKS: dict[int, np.ndarray] = {}


def _mask_table(K: int) -> np.ndarray:
    """Row ``n`` is the mask of ``n`` valid candidates out of ``K``."""
    m = _MASKS.get(K)
    if m is None:
        m = _MASKS[K] = np.tri(K + 1, K, -1, dtype=bool)
        m.flags.writeable = False  # rows are handed out as they are
    return m
