"""Request-by-request agreement with libCacheSim, the field's reference C simulator.

Both sides replay the same oracleGeneral file at the same capacity in bytes: libCacheSim through
``cache.get(req)`` for every request of its own reader (the C ``*_init`` of the policy with the
parameters in :data:`LCS_INIT`), cachegym through ``Pool(capacity, policy, placement="bytes",
oversize="bypass")``, one :meth:`~allocator.pool.Pool.access` per request. A request agrees
when it is a hit on both sides or a miss on both.

Every policy in :data:`LCS_INIT` but LIRS agrees on every request of the parity traces
(``tests/policies/test_parity.py``). LIRS does not, because libCacheSim's LIRS can hold more
bytes than its capacity (see that test's docstring): within 1.5% of the misses on those traces
(fixed object sizes; 6% where 10% of the requests change their object's size), but far more in
a cache of a few objects (three keys at a capacity of two: 214 misses against libCacheSim's 46,
whose LIRS then holds all three). What is checked instead is LIRS's model, libCacheSim's
algorithm run beside the pool (:class:`~policies.shadow.ShadowPolicy`): its miss count equals
libCacheSim's (:attr:`ParityResult.model_misses`). ``scripts/parity.py`` runs
this on any trace (``python scripts/parity.py TRACE``); libCacheSim is the ``libcachesim``
package (``pip install libcachesim``, part of the ``dev`` extra), imported when first needed.

An oracleGeneral file has no frees. ``compare(..., frees=True)`` keeps a trace's frees, as
``Pool.free`` here and libCacheSim's ``cache.remove`` (a delete) there: on the bundled recorded
DL traces, which free most tensors (many after the pool evicted them), every policy but Belady,
SLRU and LIRS (:data:`FREES_UNSERVED`) then agrees on every request too
(``tests/policies/test_parity.py``). ARC can differ where a freed key comes back (a KV-cache
block id reused, a tensor id recycled): libCacheSim's ``ARC_remove`` of a ghost takes it off
its list but leaves it in its hash table, so the key's next request is a ghost hit there (``p``
adapts, the object enters T2, and its bytes come off the ghost size a second time); our ARC
forgets a freed object's ghost, since the key now names new data. :func:`compare` then replays
a model of that remove (:class:`_RemoveKeepsGhostARC`) and, when it agrees on every request,
says so in :attr:`ParityResult.explained` (:data:`FREES_EXPLAINED`).
"""

from __future__ import annotations

import gc
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.pool import Pool
from cachegym.allocator.trace import Op, Trace
from cachegym.policies.adaptive import ARC
from cachegym.policies.shadow import ShadowPolicy

if TYPE_CHECKING:
    from cachegym.allocator.pool import PoolView

__all__ = ["LCS_INIT", "LCS_MIN_CAPACITY", "FREES_UNSERVED", "EXACT", "ParityResult",
           "FREES_EXPLAINED", "libcachesim_hits", "libcachesim_hits_with_frees", "pool_hits",
           "first_difference", "compare"]

LCS_INIT: dict[str, tuple[str, str]] = {  # our name -> (libCacheSim init function, parameters)
    "lru": ("LRU_init", ""),
    "fifo": ("FIFO_init", ""),
    "lfu": ("LFU_init", ""),
    "clock": ("Clock_init", "n-bit-counter=1, init-freq=0"),
    "sieve": ("Sieve_init", ""),
    "arc": ("ARC_init", ""),
    "s3fifo": ("S3FIFO_init", "small-size-ratio=0.1, ghost-size-ratio=0.9, move-to-main-threshold=2"),
    "slru": ("SLRU_init", "n-seg=4"),  # libCacheSim's C default, which its Python SLRU also gets
    "lirs": ("LIRS_init", ""),
    "gdsf": ("GDSF_init", ""),
    "belady": ("Belady_init", ""),
}
LCS_MIN_CAPACITY: dict[str, tuple[int, str]] = {  # policy -> (bytes, why)
    "s3fifo": (10, "its small queue, 10% of the capacity, would hold 0 bytes"),
}
"""Capacities below which libCacheSim's init aborts the whole process; :func:`compare` refuses
them first."""
FREES_UNSERVED: dict[str, str] = {  # policy -> why compare(frees=True) cannot run it
    "belady": "libCacheSim's needs each request's next access time, which only its trace readers set",
    "slru": "libCacheSim's SLRU crashes the process on remove",
    "lirs": "libCacheSim's LIRS can crash the process on remove (a segmentation fault on a "
            "23-request trace of four keys at a capacity of two)",
}
FREES_EXPLAINED: dict[str, str] = {  # policy -> why it can differ with frees, checked by a model
    "arc": "libCacheSim's ARC_remove leaves a removed ghost in its hash table, so the key's next "
           "request is a ghost hit there; a model of that remove agrees on every request",
}
EXACT = tuple(p for p in LCS_INIT if p != "lirs")
"""The policies that agree with libCacheSim on every request (LIRS: see the module docstring)."""


def _libcachesim() -> Any:
    try:
        import libcachesim
    except ImportError:
        raise ConfigError("libCacheSim is not installed: pip install libcachesim (the dev extra: "
                          "pip install 'cachegym[dev]')") from None
    return libcachesim


def _lcs_cache(policy: str, capacity: int) -> Any:
    """A libCacheSim cache of ``policy`` (its C ``*_init`` with :data:`LCS_INIT`'s parameters)
    at ``capacity`` bytes."""
    _libcachesim()
    from libcachesim import libcachesim_python as c_api

    init_name, params = LCS_INIT[policy]
    cc = c_api.CommonCacheParams(cache_size=int(capacity), default_ttl=86400 * 300, hashpower=20,
                                 consider_obj_metadata=False)
    init = getattr(c_api, init_name)
    return init(cc, params) if params else init(cc)


def libcachesim_hits(path: str, policy: str, capacity: int) -> tuple[np.ndarray, int]:
    """libCacheSim's ``policy`` over the oracleGeneral file ``path`` at ``capacity`` bytes:
    (whether each request hit, byte misses)."""
    lcs = _libcachesim()
    get = _lcs_cache(policy, capacity).get
    hits: list[bool] = []
    byte_misses = 0
    for req in lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE):
        hit = bool(get(req))
        hits.append(hit)
        if not hit:
            byte_misses += req.obj_size
    return np.array(hits, bool), byte_misses


def libcachesim_hits_with_frees(trace: Trace, policy: str, capacity: int) -> tuple[np.ndarray, int]:
    """libCacheSim's ``policy`` over ``trace`` in order, each free as libCacheSim's
    ``cache.remove`` (a delete): (whether each request that is not a free hit, byte misses).
    Belady is not served (libCacheSim's needs each request's next access time, which only its
    readers fill)."""
    from libcachesim import libcachesim_python as c_api

    cache = _lcs_cache(policy, capacity)
    get, remove, req = cache.get, cache.remove, c_api.Request()
    req.valid = True
    hits: list[bool] = []
    byte_misses = 0
    for k, s, o in zip(trace.key.tolist(), trace.size.tolist(), trace.op.tolist()):
        if o == Op.FREE:
            remove(k)
            continue
        req.obj_id, req.obj_size = k, s
        hit = bool(get(req))
        hits.append(hit)
        if not hit:
            byte_misses += s
    return np.array(hits, bool), byte_misses


def pool_hits(trace: Trace, policy: str | Any, capacity: int, frees: bool = False) -> tuple[np.ndarray, Pool, Any]:
    """cachegym's ``policy`` (a name, or a policy object) over ``trace``'s requests at
    ``capacity`` bytes: (whether each request hit, the pool, the policy). Ops are ignored, as
    in an oracleGeneral file; with ``frees``, a free is ``Pool.free`` and is no request."""
    from cachegym.policies.registry import make_eviction

    p = make_eviction(policy, trace=trace) if isinstance(policy, str) else policy
    pool = Pool(int(capacity), p, placement="bytes", oversize="bypass")
    access, free = pool.access, pool.free
    if not frees:
        hits = [access(k, s) for k, s in zip(trace.key.tolist(), trace.size.tolist())]
    else:
        hits = []
        for k, s, o in zip(trace.key.tolist(), trace.size.tolist(), trace.op.tolist()):
            if o == Op.FREE:
                free(k)
            else:
                hits.append(access(k, s))
    return np.array(hits, bool), pool, p


def _c_ratio(a: int, b: int) -> float:
    """libCacheSim's ``MAX((double)a / b, 1)`` as C computes it: x / 0 is +inf for x > 0 and NaN
    for 0 (which ``MAX``'s ``>`` turns into 1), -inf for x < 0."""
    if b == 0:
        return float("inf") if a > 0 else 1.0
    return max(a / b, 1.0)


class _RemoveKeepsGhostARC(ARC):
    """ARC with libCacheSim's ``ARC_remove`` of a ghost, for :func:`compare` to check that an
    ARC difference with frees comes from it alone: the removed ghost leaves its list and its
    bytes leave the ghost size, but it stays in libCacheSim's hash table (``removed``: key ->
    (list 1 or 2, size)), so the key's next request is a ghost hit of that list -- ``p`` adapts
    with the ghost sizes as they are, the size comes off them again, and the object enters T2
    -- after which it is gone from the table. Not a policy to run: a freed key names new data."""

    def __init__(self) -> None:
        super().__init__()
        self.removed: dict[int, tuple[int, int]] = {}

    def on_free_untracked(self, view: PoolView, key: int) -> None:
        for lid, q in ((1, self.b1), (2, self.b2)):
            if key in q:
                self.removed[key] = (lid, q[key])
        super().on_free_untracked(view, key)

    def on_hit(self, view: PoolView, key: int) -> None:
        self.removed.pop(key, None)
        super().on_hit(view, key)

    def on_miss(self, view: PoolView, key: int) -> None:
        old = self.removed.pop(key, None)
        if old is None or key in self.b1 or key in self.b2:
            super().on_miss(view, key)
            return
        self._n_req += 1
        self._incoming = view.size(key)
        self._ghost_hit(*old, view.capacity)

    # C's division: the double subtraction can leave a ghost size at 0 or below while its list
    # still holds ghosts
    _ratio = staticmethod(_c_ratio)


_EXPLAINED_MODELS: dict[str, type[ARC]] = {"arc": _RemoveKeepsGhostARC}


def first_difference(ours: np.ndarray, theirs: np.ndarray, trace: Trace) -> str:
    """Where two per-request hit sequences first part, in words ('' when they are equal)."""
    diff = np.flatnonzero(ours != theirs)
    if not len(diff):
        return ""
    i = int(diff[0])
    return (f"{len(diff)} requests differ; the first is request {i} (key {int(trace.key[i])}, "
            f"size {int(trace.size[i])}): ours {'hit' if ours[i] else 'miss'}, libCacheSim "
            f"{'hit' if theirs[i] else 'miss'}")


@dataclass
class ParityResult:
    policy: str
    capacity: int
    requests: int
    misses: int            # ours, counted by the pool
    lcs_misses: int
    byte_misses: int       # ours
    lcs_byte_misses: int
    differing: int         # requests that are a hit on one side and a miss on the other
    first: str             # first_difference's words, '' when none
    explained: str = ""    # with frees: FREES_EXPLAINED's reason, when its model agrees exactly
    model_misses: int = -1  # the misses of the policy's model of libCacheSim's algorithm, where it
    # runs one beside the pool (ShadowPolicy: LIRS, SLRU, GDSF, S3-FIFO); -1 where it does not

    @property
    def agrees(self) -> bool:
        return self.differing == 0 and (self.misses, self.byte_misses) == (
            self.lcs_misses, self.lcs_byte_misses)


def _for_oracle_general(trace: Trace) -> Trace:
    """``trace`` as the oracleGeneral file the comparison writes can hold it: its sizes must fit
    in 32 bits (:class:`ConfigError` naming the first that does not), its time field (the
    ``step`` column) is rebased to the first request, or numbered by row where even that does not
    fit (nanosecond timestamps): no compared policy reads the time."""
    limit = int(np.iinfo(np.uint32).max)
    big = np.flatnonzero(trace.size > limit)
    if len(big):
        i = int(big[0])
        where = trace.meta.get("path") or trace.name
        raise ConfigError(f"{where}: request {i} is of {int(trace.size[i])} bytes; parity compares "
                          "through libCacheSim's oracleGeneral format, whose sizes are 32-bit (under "
                          f"4 GiB; {len(big)} request(s) above): compare a trace without such objects "
                          "(cachegym sim replays them)")
    step = trace.step
    if len(step) and int(step.max()) - int(step.min()) <= limit:
        step = step - step.min()
    elif len(step):
        step = np.arange(len(step), dtype=np.int64)
    return Trace.from_arrays(trace.key, trace.size, trace.op, step=step)


def compare(trace: Trace, policies: Sequence[str], capacities: Sequence[int],
            tmp_dir: str | None = None, frees: bool = False) -> list[ParityResult]:
    """Every policy at every capacity (bytes), on ``trace`` written once as oracleGeneral and
    read back, so that both sides replay exactly the file's requests (frees dropped, reads and
    writes as requests: :func:`envs.workloads.formats.write_oracle_general`).

    ``frees``: the trace's frees stay, as ``Pool.free`` here and libCacheSim's ``remove`` (a
    delete) there, both sides fed the trace's rows directly (:data:`FREES_UNSERVED` cannot). A
    policy of :data:`FREES_EXPLAINED` that differs is replayed once more as the model of
    libCacheSim's remove; the row's ``explained`` says why when that model agrees on every
    request (the row still does not ``agree``)."""
    from cachegym.envs.workloads.formats import read_trace, write_oracle_general

    unknown = [p for p in policies if p not in LCS_INIT]
    if unknown:
        raise ConfigError(f"no libCacheSim counterpart for {unknown}; choose from {sorted(LCS_INIT)}")
    unserved = [p for p in policies if frees and p in FREES_UNSERVED]
    if unserved:
        raise ConfigError(f"no comparison with frees for {unserved}: "
                          + "; ".join(f"{p}: {FREES_UNSERVED[p]}" for p in unserved)
                          + " (leave them out, or compare without frees)")
    bad = [c for c in capacities if isinstance(c, bool) or not isinstance(c, (int, np.integer))
           or c < 1]
    if bad:
        raise ConfigError(f"capacities must be whole numbers of bytes >= 1, got {bad}")
    for p in policies:
        least, why = LCS_MIN_CAPACITY.get(p, (1, ""))
        if min(capacities, default=least) < least:
            raise ConfigError(f"libCacheSim's {p} cannot run at capacity {min(capacities)} ({why}): "
                              f"give capacities of at least {least} bytes, or leave {p} out")
    _libcachesim()
    with tempfile.TemporaryDirectory(dir=tmp_dir) as d:
        if frees:  # both sides replay the trace's rows; a free is no request
            replayed = trace
            reads = trace.op != Op.FREE
            asked = Trace.from_arrays(trace.key[reads], trace.size[reads])  # for the messages

            def theirs_of(pol: str, cap: int) -> tuple[np.ndarray, int]:
                return libcachesim_hits_with_frees(trace, pol, cap)
        else:
            path = os.path.join(d, "trace.oracleGeneral")
            write_oracle_general(_for_oracle_general(trace), path)
            replayed = asked = read_trace(path, "oracleGeneral")

            def theirs_of(pol: str, cap: int) -> tuple[np.ndarray, int]:
                return libcachesim_hits(path, pol, cap)
        out = []
        for cap in capacities:
            for pol in policies:
                theirs, lcs_bytes = theirs_of(pol, int(cap))
                ours, pool, p = pool_hits(replayed, pol, int(cap), frees=frees)
                st = pool.snapshot()
                row = ParityResult(
                    pol, int(cap), len(asked), st.misses, int((~theirs).sum()), st.byte_misses,
                    lcs_bytes, int((ours != theirs).sum()), first_difference(ours, theirs, asked),
                    model_misses=p.model_misses if isinstance(p, ShadowPolicy) else -1)
                if frees and pol in FREES_EXPLAINED and not row.agrees:
                    model, mpool, _ = pool_hits(replayed, _EXPLAINED_MODELS[pol](), int(cap), frees=True)
                    ms = mpool.snapshot()
                    if (model == theirs).all() and (ms.misses, ms.byte_misses) == (row.lcs_misses, lcs_bytes):
                        row.explained = FREES_EXPLAINED[pol]
                    mpool.close()
                out.append(row)
                # a pool and its policy hold reference cycles (the view, the policy's hooks):
                # without a collection here each pair's stayed until the cycle collector ran
                # (~85 bytes a request per pair: 2.8 GB for ten pairs of a 4M-request trace)
                pool.close()
                del pool, p, ours, theirs
                gc.collect()
    return out
