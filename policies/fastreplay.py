"""Compiled whole-trace replay: an accelerator of :meth:`Pool.replay`, never a second model.

:func:`replay_fast` replays a trace with LRU, FIFO, CLOCK, SIEVE, LFU, ARC, Belady, or S3-FIFO,
SLRU and GDSF (these three without a timing model: :data:`UNTIMED_ONLY`), with their registry
parameters, through a numba kernel (one, and a second for S3-FIFO, SLRU and GDSF, whose
models the pool follows) that takes the same
decisions as the pool's access loop driven by the policy classes in :mod:`policies`, request
by request (tests/policies/test_fastreplay.py proves it: hit/miss sequence, eviction
victims, every counter of :class:`~allocator.stats.PoolStats`). It applies only where the pool
path is plain: byte-accounting placement, no prefetcher, no backend, no hook, nothing pinned.
The timing model (a :class:`~allocator.cost.Preset`) is reproduced exactly: demand fetches
queue on the h2d engine and stall compute, dirty victims are written back on the d2h engine and
their space returns only when that copy completes, write-through copies every write. Where it
does not apply it returns ``None`` and the caller uses :meth:`Pool.replay`.

Objects are dense ids over the trace's keys (the pool's table is keyed by key; a free drops the
record, and a later access to the same key creates a new object, as in the pool). Belady reads
the next use of each row (a compiled pass equal to ``Trace.next_use()``, tested), indexed by
row, which is the pool's ``view.tick`` on a replay from row 0.

Compilation uses ``cache=True``; the first call in a fresh environment compiles (seconds):
callers that measure throughput call :func:`warm_up` first. Each kernel is one function with
its list and heap operations written out, and its counters in locals: numba passes arrays to
calls with reference counting and cannot keep array elements in registers, which cost 3-10x.
S3-FIFO, SLRU and GDSF have a kernel of their own (:func:`_shadow_kernel`): SLRU's and GDSF's
state in the main loop cost every other policy 10-20% of its speed. (Its list operations are written out too:
as ``inline="always"`` helpers they made SLRU 2.7x slower, measured side by side.)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numba import njit

from allocator.cost import CostModel, Preset, get_preset
from allocator.stats import PoolStats
from allocator.trace import Trace
from policies.adaptive import S3FIFO, SLRU
from policies.classic import CLOCK

__all__ = ["FAST_POLICIES", "UNTIMED_ONLY", "FastReplay", "replay_fast", "fast_applicable",
           "warm_up"]

log = logging.getLogger(__name__)

FAST_POLICIES = ("lru", "fifo", "clock", "sieve", "lfu", "belady", "arc", "s3fifo", "slru", "gdsf")
"""Eviction policies the kernels reproduce (registry names, with their registry parameters)."""
UNTIMED_ONLY = ("s3fifo", "slru", "gdsf")
"""Those of them reproduced only without a timing model (the pool follows their models' drops):
with one, :func:`replay_fast` returns ``None`` and the pool replays."""

_LRU, _FIFO, _CLOCK, _SIEVE, _LFU, _BELADY, _ARC, _S3FIFO, _SLRU, _GDSF = range(10)  # .index
_CLOCK_MAX, _CLOCK_INIT = CLOCK().max_freq, CLOCK().init_freq  # the registry's CLOCK
_S3 = S3FIFO()  # the registry's S3-FIFO: queue ratios and promotion threshold
_S3_SMALL, _S3_GHOST, _S3_THRESHOLD = _S3.small_size_ratio, _S3.ghost_size_ratio, _S3.threshold
_NSEG = SLRU().n_seg  # the registry's SLRU: its number of segments

# object states (as allocator.pool, plus ABSENT: no record for the key)
_ABSENT, _HOST, _DEVICE, _D2H = 0, 1, 2, 3

# request outcome codes in FastReplay.outcome
MISS, HIT, FREE, BYPASS = 0, 1, 2, 3

# order of the kernel's counter vector
_STAT_FIELDS = (
    "accesses", "hits", "misses", "byte_misses", "allocations", "evictions", "writebacks",
    "bypasses", "frees", "bytes_h2d", "bytes_d2h", "stall_ns", "compute_ns", "total_ns",
    "device_bytes", "peak_device_bytes",
)


@dataclass(frozen=True)
class FastReplay:
    """Result of a compiled replay.

    ``outcome[i]`` is :data:`HIT`, :data:`MISS`, :data:`BYPASS` (a miss never inserted: larger
    than the pool) or :data:`FREE` for row ``i``; ``victim_rows[j]`` is the row whose access
    caused eviction ``j`` and ``victim_keys[j]`` the evicted key (both only with
    ``record=True``, else ``outcome`` is empty too). ``kernel_s`` is the compiled replay's wall
    time, Belady's next-use pass included (compilation and the id remap excluded).
    """

    stats: PoolStats
    outcome: np.ndarray
    victim_rows: np.ndarray
    victim_keys: np.ndarray
    kernel_s: float


# ---------------------------------------------------------------------- heap (min on (k1, k2))
@njit(cache=True, inline="always")
def _less(k1: np.ndarray, k2: np.ndarray, a: int, b: int) -> bool:
    return k1[a] < k1[b] or (k1[a] == k1[b] and k2[a] < k2[b])


@njit(cache=True)
def _swap(k1, k2, p1, p2, a, b):  # type: ignore[no-untyped-def]
    k1[a], k1[b] = k1[b], k1[a]
    k2[a], k2[b] = k2[b], k2[a]
    p1[a], p1[b] = p1[b], p1[a]
    p2[a], p2[b] = p2[b], p2[a]


@njit(cache=True)
def _heap_push(k1, k2, p1, p2, n, a, b, x, y):  # type: ignore[no-untyped-def]
    """Push ``(a, b) -> (x, y)`` onto a heap of ``n`` entries; returns the new size."""
    i = n
    k1[i], k2[i], p1[i], p2[i] = a, b, x, y
    while i > 0:
        parent = (i - 1) >> 1
        if _less(k1, k2, i, parent):
            _swap(k1, k2, p1, p2, i, parent)
            i = parent
        else:
            break
    return n + 1


@njit(cache=True)
def _heap_pop(k1, k2, p1, p2, n):  # type: ignore[no-untyped-def]
    """Remove the top of a heap of ``n`` entries; returns the new size."""
    n -= 1
    if n > 0:
        _swap(k1, k2, p1, p2, 0, n)
        i = 0
        while True:
            left = 2 * i + 1
            if left >= n:
                break
            m = left
            if left + 1 < n and _less(k1, k2, left + 1, left):
                m = left + 1
            if _less(k1, k2, m, i):
                _swap(k1, k2, p1, p2, m, i)
                i = m
            else:
                break
    return n


_ID_BITS = 31
_ID_MASK = (1 << _ID_BITS) - 1


@njit(cache=True)
def _pk_sift_down(h, n, i):  # type: ignore[no-untyped-def]
    while True:
        left = 2 * i + 1
        if left >= n:
            break
        m = left
        if left + 1 < n and h[left + 1] < h[left]:
            m = left + 1
        if h[m] < h[i]:
            h[m], h[i] = h[i], h[m]
            i = m
        else:
            break


@njit(cache=True)
def _pk_pop(h, n):  # type: ignore[no-untyped-def]
    n -= 1
    if n > 0:
        h[0] = h[n]
        _pk_sift_down(h, n, 0)
    return n


@njit(cache=True)
def _belady_valid(x, state, cur):  # type: ignore[no-untyped-def]
    """Entry ``x = -(next << 31 | id)`` is live: the object is resident with that next use."""
    v = -x
    k = v & _ID_MASK
    return state[k] == _DEVICE and cur[k] == (v >> _ID_BITS)


@njit(cache=True)
def _belady_compact(h, n, state, cur, seen, stamp):  # type: ignore[no-untyped-def]
    """Keep one live entry per object and restore the heap order; returns the size."""
    m = 0
    for j in range(n):
        x = h[j]
        k = (-x) & _ID_MASK
        if _belady_valid(x, state, cur) and seen[k] != stamp:
            seen[k] = stamp
            h[m] = x
            m += 1
    for start in range(m // 2 - 1, -1, -1):
        _pk_sift_down(h, m, start)
    return m


@njit(cache=True)
def _next_use(ids, op, n_ids):  # type: ignore[no-untyped-def]
    """``Trace.next_use()`` over dense ids, with "never" as ``len(ids)`` instead of INF."""
    n = len(ids)
    out = np.empty(n, np.int64)
    last = np.full(n_ids, n, np.int64)
    for i in range(n - 1, -1, -1):
        k = ids[i]
        if op[i] == 2:  # a free ends the object: earlier accesses never see later ones
            out[i] = n
            last[k] = n
        else:
            out[i] = last[k]
            last[k] = i
    return out


# ---------------------------------------------------------------------- the kernel
@njit(cache=True)
def _kernel(ids, size, op, compute, nxt, n_ids, n_freq, capacity, policy, write_through, bypass,
            timed, h2d_lat, h2d_gbps, d2h_lat, d2h_gbps, two_engines, record):  # type: ignore[no-untyped-def]
    """Mirror of ``Pool.access``/``Pool.free`` over a whole trace (see the module docstring).

    Each block below names the pool method it mirrors; keep them in step with allocator/pool.py.
    """
    n = len(ids)
    # counters are locals (array stores would defeat register allocation); order _STAT_FIELDS
    n_acc = n_hit = n_miss = b_miss = n_alloc = n_evict = n_wb = n_bypass = n_free = 0
    b_h2d = b_d2h = peak = 0
    outcome = np.zeros(n if record else 0, np.uint8)
    vrow = np.empty(n if record else 0, np.int64)
    vid = np.empty(n if record else 0, np.int64)
    nv = 0
    # per-object records (ObjectInfo)
    state = np.zeros(n_ids, np.int8)
    dirty = np.zeros(n_ids, np.bool_)
    busy = np.zeros(n_ids, np.int64)
    nbytes = np.zeros(n_ids, np.int64)
    # LRU / FIFO: one doubly-linked list through prv/nxl, head = next victim.
    # LFU (as policies.classic.LFU): one such list per frequency f (bucket f, in the order its
    # objects reached f), the non-empty buckets linked in ascending order (bnext/bprev from
    # bmin); the victim is the head of bucket bmin.
    # CLOCK (policies.classic.CLOCK): that list, oldest first, with a counter per object (cnt);
    # a victim search moves counted objects to the tail. SIEVE (policies.classic.SIEVE): that
    # list, oldest first; hand = -1 (start at the head) or an object; vis: the visited bits.
    prv = np.full(n_ids, -1, np.int64)
    nxl = np.full(n_ids, -1, np.int64)
    head = -1
    tail = -1
    cnt = np.zeros(n_ids if policy == _CLOCK else 1, np.int64)
    vis = np.zeros(n_ids if policy == _SIEVE else 1, np.bool_)
    hand = -1
    # ARC: numbered lists through prv/nxl (heads lh, the next to leave; tails lt),
    # lid[id] the list an object is on (0: none), lsz[id] its size there, lb[L] list L's bytes.
    # ARC (policies.adaptive.ARC): lists 1 = T1, 2 = T2, 3 = B1, 4 = B2; the target p of T1
    # and the ghost-hit flags in locals
    lists = policy == _ARC
    lid = np.zeros(n_ids if lists else 1, np.int8)
    lsz = np.zeros(n_ids if lists else 1, np.int64)
    lh = np.full(5, -1, np.int64)
    lt = np.full(5, -1, np.int64)
    lb = np.zeros(5, np.int64)
    arc_p = 0.0
    in_b1 = in_b2 = False
    n_req = 0
    ghost_req = -1
    incoming = 1
    trim = 0  # the victim's plan: 0 none, 1 trim B1, 2 trim B2, 3 drop (no ghost)
    nb = n_freq if policy == _LFU else 1
    freq = np.zeros(n_ids if policy == _LFU else 1, np.int64)
    bhead = np.full(nb, -1, np.int64)
    btail = np.full(nb, -1, np.int64)
    bnext = np.full(nb, -1, np.int64)
    bprev = np.full(nb, -1, np.int64)
    bmin = -1
    # Belady (as policies.priority.Belady): lazy min-heap of -(next << 31 | id) (farthest next
    # use first, then larger id), an entry live while cur[id] == next and id resident;
    # compacted when full, so it never exceeds 2 * n_ids + 66 entries. (Arrays are sized once:
    # rebinding an array inside the loop costs reference counting on every iteration.)
    hcap = 2 * n_ids + 66 if policy == _BELADY else 1
    heap = np.empty(hcap, np.int64)
    hn = 0
    cur = np.zeros(n_ids if policy == _BELADY else 1, np.int64)
    seen = np.zeros(n_ids if policy == _BELADY else 1, np.int64)
    stamp = 0
    # pending releases of blocks (copies out in flight): heap of (done, seq) -> (nbytes, id);
    # one entry per eviction or free at most, and none without a timing model
    rcap = n + 1 if timed else 1
    rk1 = np.empty(rcap, np.int64)
    rk2 = np.empty(rcap, np.int64)
    rnb = np.empty(rcap, np.int64)
    rid = np.empty(rcap, np.int64)
    rn = 0
    seq = 0
    pending = 0
    used = 0
    n_evictable = 0
    # clock (CostModel)
    now = 0
    stall = 0
    comp_total = 0
    free_h2d = 0
    free_d2h = 0

    for i in range(n):
        k = ids[i]
        if op[i] == 2:
            # ---------------------------------------------------------- Pool._free
            n_free += 1
            if record:
                outcome[i] = FREE
            if lists and lid[k] > 0:  # ARC's on_free or on_free_untracked (its ghost goes)
                L = lid[k]
                p, q = prv[k], nxl[k]  # k out of list L
                if p >= 0:
                    nxl[p] = q
                else:
                    lh[L] = q
                if q >= 0:
                    prv[q] = p
                else:
                    lt[L] = p
                lb[L] -= lsz[k]
                lid[k] = 0
            if state[k] == _DEVICE:
                n_evictable -= 1
                # policy.on_free
                if policy <= _SIEVE:
                    if policy == _SIEVE and hand == k:
                        hand = nxl[k]
                    p, q = prv[k], nxl[k]
                    if p >= 0:
                        nxl[p] = q
                    else:
                        head = q
                    if q >= 0:
                        prv[q] = p
                    else:
                        tail = p
                elif policy == _LFU:
                    f = freq[k]
                    p, q = prv[k], nxl[k]
                    if p >= 0:
                        nxl[p] = q
                    else:
                        bhead[f] = q
                    if q >= 0:
                        prv[q] = p
                    else:
                        btail[f] = p
                    if bhead[f] < 0:  # bucket f emptied: unlink it
                        p, q = bprev[f], bnext[f]
                        if p >= 0:
                            bnext[p] = q
                        else:
                            bmin = q
                        if q >= 0:
                            bprev[q] = p
                # (Belady: the entry dies with the object's state)
                # _release_block
                done = busy[k]
                if done > now:
                    seq += 1
                    rn = _heap_push(rk1, rk2, rnb, rid, rn, done, seq, nbytes[k], k)
                    pending += nbytes[k]
                else:
                    used -= nbytes[k]
                nbytes[k] = 0
            state[k] = _ABSENT
            continue
        w = op[i] == 1
        s = size[i]
        n_acc += 1
        sk = state[k]
        if sk == _DEVICE:
            # ---------------------------------------------------------- hit
            if w and write_through:  # the general path retires finished copies first
                while rn > 0 and rk1[0] <= now:
                    done, kk, nb = rk1[0], rid[0], rnb[0]
                    rn = _heap_pop(rk1, rk2, rnb, rid, rn)
                    pending -= nb
                    used -= nb
                    if state[kk] == _D2H and busy[kk] <= done:
                        state[kk] = _HOST
            n_hit += 1
            if record:
                outcome[i] = HIT
            # policy.on_hit
            if policy == _LRU:
                if k != tail:
                    p, q = prv[k], nxl[k]
                    if p >= 0:
                        nxl[p] = q
                    else:
                        head = q
                    prv[q] = p
                    prv[k] = tail
                    nxl[k] = -1
                    nxl[tail] = k
                    tail = k
            elif policy == _LFU:
                # (list operations written out: calls with array arguments cost refcounting)
                f = freq[k]
                g = f + 1
                p, q = prv[k], nxl[k]  # out of bucket f
                if p >= 0:
                    nxl[p] = q
                else:
                    bhead[f] = q
                if q >= 0:
                    prv[q] = p
                else:
                    btail[f] = p
                if bhead[g] < 0:  # bucket g enters the chain right after bucket f
                    q = bnext[f]
                    bprev[g] = f
                    bnext[g] = q
                    bnext[f] = g
                    if q >= 0:
                        bprev[q] = g
                p = btail[g]  # onto the tail of bucket g
                prv[k] = p
                nxl[k] = -1
                if p >= 0:
                    nxl[p] = k
                else:
                    bhead[g] = k
                btail[g] = k
                freq[k] = g
                if bhead[f] < 0:  # bucket f emptied: unlink it
                    p, q = bprev[f], bnext[f]
                    if p >= 0:
                        bnext[p] = q
                    else:
                        bmin = q
                    if q >= 0:
                        bprev[q] = p
            elif policy == _CLOCK:
                if cnt[k] < _CLOCK_MAX:
                    cnt[k] += 1
            elif policy == _SIEVE:
                vis[k] = True
            elif policy == _ARC:
                n_req += 1
                in_b1 = in_b2 = False
                L = lid[k]
                p, q = prv[k], nxl[k]
                if p >= 0:
                    nxl[p] = q
                else:
                    lh[L] = q
                if q >= 0:
                    prv[q] = p
                else:
                    lt[L] = p
                if L == 1:
                    lb[1] -= lsz[k]
                    lb[2] += lsz[k]
                    lid[k] = 2
                t = lt[2]
                prv[k] = t
                nxl[k] = -1
                if t >= 0:
                    nxl[t] = k
                else:
                    lh[2] = k
                lt[2] = k
            elif policy == _BELADY:
                if hn == hcap:
                    stamp += 1
                    hn = _belady_compact(heap, hn, state, cur, seen, stamp)
                x = nxt[i]
                cur[k] = x
                j = hn  # push -(next << 31 | id) (written out, as above)
                x = -((x << _ID_BITS) | k)
                heap[j] = x
                while j > 0:
                    q = (j - 1) >> 1
                    if x < heap[q]:
                        heap[j] = heap[q]
                        heap[q] = x
                        j = q
                    else:
                        break
                hn += 1
            if w:
                dirty[k] = True
                if write_through:
                    # _copy_out
                    if timed:
                        start = max(now, free_d2h if two_engines else free_h2d, busy[k])
                        done = start + d2h_lat + np.int64(nbytes[k] / d2h_gbps)
                        if two_engines:
                            free_d2h = done
                        else:
                            free_h2d = done
                    else:
                        done = max(now, busy[k])
                    busy[k] = done
                    b_d2h += nbytes[k]
                    dirty[k] = False
            c = compute[i]
            now += c
            comp_total += c
            continue
        # -------------------------------------------------------------- miss (Pool._access_steps)
        while rn > 0 and rk1[0] <= now:  # _retire
            done, kk, nb = rk1[0], rid[0], rnb[0]
            rn = _heap_pop(rk1, rk2, rnb, rid, rn)
            pending -= nb
            used -= nb
            if state[kk] == _D2H and busy[kk] <= done:
                state[kk] = _HOST
        n_miss += 1
        b_miss += s
        created = sk == _ABSENT
        if created:
            state[k] = _HOST
            dirty[k] = False
            busy[k] = 0
        # policy.on_miss: ARC's ghost hit adapts p
        L = lid[k] if lists else 0
        ghost_hit = L >= 3  # (ARC's lists 3 and 4 hold ghosts)
        if policy == _ARC:
            n_req += 1
            incoming = s
            if ghost_hit:
                ghost_req = n_req
                if L == 3:
                    in_b1, in_b2 = True, False
                    arc_p = min(arc_p + max(lb[4] / lb[3], 1.0), float(capacity))
                else:
                    in_b1, in_b2 = False, True
                    arc_p = max(arc_p - max(lb[3] / lb[4], 1.0), 0.0)
        if ghost_hit:  # the ghost goes
            p, q = prv[k], nxl[k]  # k out of list L
            if p >= 0:
                nxl[p] = q
            else:
                lh[L] = q
            if q >= 0:
                prv[q] = p
            else:
                lt[L] = p
            lb[L] -= lsz[k]
            lid[k] = 0
        if s > capacity:
            n_bypass += 1
            if record:
                outcome[i] = BYPASS
            c = compute[i]
            now += c
            comp_total += c
            continue
        # _make_room
        while used + s > capacity:
            if rn > 0 and (capacity - used + pending >= s or n_evictable == 0):
                t = rk1[0]  # _wait_release
                if t > now:
                    stall += t - now
                    now = t
                while rn > 0 and rk1[0] <= now:
                    done, kk, nb = rk1[0], rid[0], rnb[0]
                    rn = _heap_pop(rk1, rk2, rnb, rid, rn)
                    pending -= nb
                    used -= nb
                    if state[kk] == _D2H and busy[kk] <= done:
                        state[kk] = _HOST
                continue
            # policy.victim
            if policy <= _FIFO:
                v = head
            elif policy == _CLOCK:
                while cnt[head] >= 1:  # a counted object: one less, to the tail
                    v = head
                    cnt[v] -= 1
                    if v != tail:
                        head = nxl[v]
                        prv[head] = -1
                        prv[v] = tail
                        nxl[v] = -1
                        nxl[tail] = v
                        tail = v
                v = head
            elif policy == _SIEVE:
                v = head if hand < 0 else hand
                while vis[v]:  # the hand clears visited bits, towards the newest, wrapping
                    vis[v] = False
                    v = nxl[v]
                    if v < 0:
                        v = head
                hand = v
            elif policy == _LFU:
                v = bhead[bmin]
            elif policy == _ARC:  # ARC._plan: the ghost to trim first, the list to evict from
                src = 1 if ((lb[1] > 0 and (lb[1] > arc_p or (lb[1] == arc_p and in_b2))) or lb[2] == 0) else 2
                trim = 0
                if not (ghost_req == n_req and (in_b1 or in_b2)):
                    if lb[1] + lb[3] + incoming > capacity:
                        if lb[3] > 0:
                            trim = 1
                        else:
                            trim, src = 3, 1
                    elif lb[1] + lb[3] + lb[2] + lb[4] >= 2 * capacity and lb[4] > 0:
                        trim = 2
                v = lh[src]
                if v < 0:
                    v = lh[3 - src]
            else:
                while True:
                    x = -heap[0]
                    v = x & _ID_MASK
                    if state[v] == _DEVICE and cur[v] == (x >> _ID_BITS):
                        break
                    hn = _pk_pop(heap, hn)
            if record:
                vrow[nv] = i
                vid[nv] = v
                nv += 1
            # _evict
            n_evict += 1
            n_evictable -= 1
            if policy <= _CLOCK:  # policy.on_evict (v heads the list)
                q = nxl[v]
                head = q
                if q >= 0:
                    prv[q] = -1
                else:
                    tail = -1
                nxl[v] = -1
            elif policy == _LFU:
                f = freq[v]
                q = nxl[v]  # v heads bucket f = bmin
                bhead[f] = q
                if q >= 0:
                    prv[q] = -1
                else:
                    btail[f] = -1
                    q = bnext[f]  # bucket f emptied: the chain now starts at the next one
                    bmin = q
                    if q >= 0:
                        bprev[q] = -1
                nxl[v] = -1
            elif policy == _SIEVE:  # the hand rests on the next newer object
                p, q = prv[v], nxl[v]
                hand = q
                if p >= 0:
                    nxl[p] = q
                else:
                    head = q
                if q >= 0:
                    prv[q] = p
                else:
                    tail = p
            elif policy == _ARC:  # the planned ghost trimmed, v to its ghost list (or dropped)
                if trim == 1 or trim == 2:
                    G = trim + 2  # B1 or B2
                    g = lh[G]
                    p, q = prv[g], nxl[g]  # g out of list G
                    if p >= 0:
                        nxl[p] = q
                    else:
                        lh[G] = q
                    if q >= 0:
                        prv[q] = p
                    else:
                        lt[G] = p
                    lb[G] -= lsz[g]
                    lid[g] = 0
                L = lid[v]
                p, q = prv[v], nxl[v]  # v out of list L
                if p >= 0:
                    nxl[p] = q
                else:
                    lh[L] = q
                if q >= 0:
                    prv[q] = p
                else:
                    lt[L] = p
                lb[L] -= lsz[v]
                if trim == 3:
                    lid[v] = 0
                else:
                    G = L + 2  # T1's ghosts go to B1, T2's to B2
                    p = lt[G]  # v onto list G's tail
                    prv[v] = p
                    nxl[v] = -1
                    if p >= 0:
                        nxl[p] = v
                    else:
                        lh[G] = v
                    lt[G] = v
                    lid[v] = G
                    lb[G] += lsz[v]
            elif policy == _BELADY:
                hn = _pk_pop(heap, hn)
            if dirty[v]:
                n_wb += 1
                if timed:
                    start = max(now, free_d2h if two_engines else free_h2d, busy[v])
                    done = start + d2h_lat + np.int64(nbytes[v] / d2h_gbps)
                    if two_engines:
                        free_d2h = done
                    else:
                        free_h2d = done
                else:
                    done = max(now, busy[v])
                busy[v] = done
                b_d2h += nbytes[v]
                dirty[v] = False
                state[v] = _D2H
            else:
                state[v] = _HOST
            done = busy[v]  # _release_block
            if done > now:
                seq += 1
                rn = _heap_push(rk1, rk2, rnb, rid, rn, done, seq, nbytes[v], v)
                pending += nbytes[v]
            else:
                used -= nbytes[v]
            nbytes[v] = 0
        used += s
        nbytes[k] = s
        if used > peak:
            peak = used
        if created and w:
            n_alloc += 1
        else:
            # demand fetch, after any write-back of the same object
            if timed:
                start = max(now, free_h2d, busy[k])
                done = start + h2d_lat + np.int64(s / h2d_gbps)
                free_h2d = done
            else:
                done = max(now, busy[k])
            b_h2d += s
            if done > now:
                stall += done - now
                now = done
        state[k] = _DEVICE
        n_evictable += 1
        # policy.on_insert
        if policy <= _SIEVE:
            prv[k] = tail
            nxl[k] = -1
            if tail >= 0:
                nxl[tail] = k
            else:
                head = k
            tail = k
            if policy == _CLOCK:
                cnt[k] = _CLOCK_INIT
            elif policy == _SIEVE:
                vis[k] = False
        elif policy == _ARC:  # (a ghost of k left at its miss already)
            L = 1  # T1, or T2 right after a ghost hit
            if ghost_req == n_req and (in_b1 or in_b2):
                L = 2
                in_b1 = in_b2 = False
                ghost_req = -1
            lsz[k] = s
            lb[L] += s
            p = lt[L]  # k onto list L's tail
            prv[k] = p
            nxl[k] = -1
            if p >= 0:
                nxl[p] = k
            else:
                lh[L] = k
            lt[L] = k
            lid[k] = L
        elif policy == _LFU:
            if bhead[1] < 0:  # bucket 1 enters the chain at its front
                q = bmin
                bprev[1] = -1
                bnext[1] = q
                bmin = 1
                if q >= 0:
                    bprev[q] = 1
            p = btail[1]
            prv[k] = p
            nxl[k] = -1
            if p >= 0:
                nxl[p] = k
            else:
                bhead[1] = k
            btail[1] = k
            freq[k] = 1
        elif policy == _BELADY:
            if hn == hcap:
                stamp += 1
                hn = _belady_compact(heap, hn, state, cur, seen, stamp)
            x = nxt[i]
            cur[k] = x
            j = hn
            x = -((x << _ID_BITS) | k)
            heap[j] = x
            while j > 0:
                q = (j - 1) >> 1
                if x < heap[q]:
                    heap[j] = heap[q]
                    heap[q] = x
                    j = q
                else:
                    break
            hn += 1
        if w:
            dirty[k] = True
            if write_through:
                if timed:
                    start = max(now, free_d2h if two_engines else free_h2d, busy[k])
                    done = start + d2h_lat + np.int64(s / d2h_gbps)
                    if two_engines:
                        free_d2h = done
                    else:
                        free_h2d = done
                else:
                    done = max(now, busy[k])
                busy[k] = done
                b_d2h += s
                dirty[k] = False
        c = compute[i]
        now += c
        comp_total += c
    st = np.array([n_acc, n_hit, n_miss, b_miss, n_alloc, n_evict, n_wb, n_bypass, n_free,
                   b_h2d, b_d2h, stall, comp_total, now, used, peak], np.int64)
    return st, outcome, vrow[:nv], vid[:nv], False


# ---------------------------------------------------------------------- model-following policies
@njit(cache=True)
def _gdsf_compact(k1, k2, p1, n, gin, gt):  # type: ignore[no-untyped-def]
    """Keep GDSF's live heap entries (one per object of its model) and restore the heap order;
    returns the size. (Live entries are distinct, so the order of pops does not change.)"""
    m = 0
    for j in range(n):
        x = p1[j]
        if gin[x] and gt[x] == k2[j]:
            k1[m], k2[m], p1[m] = k1[j], k2[j], x
            m += 1
    for start in range(m // 2 - 1, -1, -1):
        i = start
        while True:
            left = 2 * i + 1
            if left >= m:
                break
            c = left
            if left + 1 < m and _less(k1, k2, left + 1, left):
                c = left + 1
            if _less(k1, k2, c, i):
                k1[c], k1[i] = k1[i], k1[c]
                k2[c], k2[i] = k2[i], k2[c]
                p1[c], p1[i] = p1[i], p1[c]
                i = c
            else:
                break
    return m


@njit(cache=True)
def _shadow_kernel(ids, size, op, compute, n_ids, capacity, policy, write_through, record):  # type: ignore[no-untyped-def]
    """:func:`_kernel` for S3-FIFO, SLRU and GDSF, without a timing model (their own function:
    their models' state in :func:`_kernel`'s loop cost the other policies 10-20% of their speed).

    All three are :class:`~policies.shadow.ShadowPolicy` models of libCacheSim's algorithms. The
    model's request comes first on every access, a hit or a miss of the pool (``on_hit`` /
    ``on_miss``), with the size the pool knows (the cached one on a hit). Its drops of objects
    the pool holds go onto the pending list (``pd``: on it; ``pdp``/``pdn``, ``pdh``/``pdt``:
    links, oldest drop first), which the pool empties during the same access: the first ones
    as make-room's victims (``ShadowPolicy.victim``), the rest after it (``Pool._evict_due``).
    The pool thus holds the model's residents plus at most the object just accessed; where
    it would not (the pool missing what the model holds, or needing a victim with nothing
    pending) the kernel stops (``unserved``). Without a timing model no copy outlasts an access
    (the pool's busy times never exceed its clock), so the kernel keeps no copy times.
    Keep in step with :func:`_kernel` (the pool's side) and policies/adaptive.py (S3-FIFO,
    SLRU), policies/priority.py (GDSF).
    """
    n = len(ids)
    n_acc = n_hit = n_miss = b_miss = n_alloc = n_evict = n_wb = n_bypass = n_free = 0
    b_h2d = b_d2h = peak = used = now = 0
    outcome = np.zeros(n if record else 0, np.uint8)
    vrow = np.empty(n if record else 0, np.int64)
    vid = np.empty(n if record else 0, np.int64)
    nv = 0
    state = np.zeros(n_ids, np.int8)
    dirty = np.zeros(n_ids, np.bool_)
    nbytes = np.zeros(n_ids, np.int64)
    pd = np.zeros(n_ids, np.bool_)
    pdp = np.full(n_ids, -1, np.int64)
    pdn = np.full(n_ids, -1, np.int64)
    pdh = pdt = -1
    occ = 0  # the model's bytes (SLRU.occupied, GDSF.occupied)
    unserved = False
    # SLRU (policies.adaptive.SLRU): segment i is list i + 1 through prv/nxl (lh: its LRU end,
    # lt: its MRU end, lb: its bytes), seg_cap bytes each; lid[id] the list (0: none), lsz[id]
    # the size; stk/act: the stack of its recursive _cool, emulated.
    # S3-FIFO (policies.adaptive.S3FIFO): lists 1 = small, 2 = main, 3 = ghost through the same
    # arrays, mc[id] the access counters; the queues' capacities and has_evicted as the model's.
    m = n_ids if policy in (_SLRU, _S3FIFO) else 1
    lid = np.zeros(m, np.int8)
    lsz = np.zeros(m, np.int64)
    prv = np.full(m, -1, np.int64)
    nxl = np.full(m, -1, np.int64)
    lh = np.full(max(_NSEG + 1, 4), -1, np.int64)
    lt = np.full(max(_NSEG + 1, 4), -1, np.int64)
    lb = np.zeros(max(_NSEG + 1, 4), np.int64)
    seg_cap = capacity // _NSEG
    mc = np.zeros(n_ids if policy == _S3FIFO else 1, np.int64)
    small_cap = int(capacity * _S3_SMALL)
    main_cap = capacity - small_cap
    ghost_cap = int(capacity * _S3_GHOST)
    has_evicted = False
    stk = np.zeros(_NSEG + 1, np.int64)
    act = np.zeros(_NSEG + 1, np.bool_)
    # GDSF (policies.priority.GDSF): a min-heap of (priority, vtime) -> id (gk1, gk2, gp1; its
    # pushes and pops written out), an entry live while gin[id] and gt[id] == vtime, compacted
    # when full; gcl the clock, vt the vtime
    m = n_ids if policy == _GDSF else 1
    gcap = 2 * n_ids + 66 if policy == _GDSF else 1
    gk1 = np.empty(gcap, np.float64)
    gk2 = np.empty(gcap, np.int64)
    gp1 = np.empty(gcap, np.int64)
    gn = 0
    gin = np.zeros(m, np.bool_)
    gt = np.zeros(m, np.int64)
    gfreq = np.zeros(m, np.int64)
    gsz = np.zeros(m, np.int64)
    gcl = 0.0
    vt = 0

    for i in range(n):
        k = ids[i]
        sk = state[k]
        if op[i] == 2:
            # ---------------------------------------------------------- Pool._free
            n_free += 1
            if record:
                outcome[i] = FREE
            # ShadowPolicy.on_free (GDSF's): a pending object leaves the list, else the model
            # forgets the object (a free is no eviction: GDSF's clock stays)
            if pd[k]:
                p, q = pdp[k], pdn[k]
                if p >= 0:
                    pdn[p] = q
                else:
                    pdh = q
                if q >= 0:
                    pdp[q] = p
                else:
                    pdt = p
                pd[k] = False
            elif policy == _SLRU and lid[k] > 0:
                L = lid[k]
                p, q = prv[k], nxl[k]  # k out of segment list L
                if p >= 0:
                    nxl[p] = q
                else:
                    lh[L] = q
                if q >= 0:
                    prv[q] = p
                else:
                    lt[L] = p
                lb[L] -= lsz[k]
                occ -= lsz[k]
                lid[k] = 0
            elif policy == _GDSF and gin[k]:
                gin[k] = False
                occ -= gsz[k]
            if policy == _S3FIFO and lid[k] > 0:  # out of the model, or its ghost (S3FIFO.on_free)
                L = lid[k]
                p, q = prv[k], nxl[k]
                if p >= 0:
                    nxl[p] = q
                else:
                    lh[L] = q
                if q >= 0:
                    prv[q] = p
                else:
                    lt[L] = p
                lb[L] -= lsz[k]
                lid[k] = 0
            if sk == _DEVICE:  # _release_block
                used -= nbytes[k]
                nbytes[k] = 0
            state[k] = _ABSENT
            continue
        w = op[i] == 1
        s = size[i]
        n_acc += 1
        # -------------------------------------------------------------- the model's request
        ms = nbytes[k] if sk == _DEVICE else s  # the size the pool knows (view.size)
        mhit = False
        if policy == _SLRU:  # SLRU._request
            L = lid[k]
            cool_k = False  # after a promotion: k's list is cooled while it overflows
            admit = L == 0 and ms <= capacity and ms <= seg_cap  # a miss the model admits
            if L == _NSEG:  # a hit in the top segment: to its MRU end
                mhit = True
                if k != lt[L]:
                    p, q = prv[k], nxl[k]
                    if p >= 0:
                        nxl[p] = q
                    else:
                        lh[L] = q
                    prv[q] = p
                    p = lt[L]
                    prv[k] = p
                    nxl[k] = -1
                    nxl[p] = k
                    lt[L] = k
            elif L > 0:  # _promote: up one segment, then cool what overflows (below)
                mhit = True
                p, q = prv[k], nxl[k]  # k out of list L
                if p >= 0:
                    nxl[p] = q
                else:
                    lh[L] = q
                if q >= 0:
                    prv[q] = p
                else:
                    lt[L] = p
                lb[L] -= lsz[k]
                L += 1
                p = lt[L]  # onto list L's MRU end
                prv[k] = p
                nxl[k] = -1
                if p >= 0:
                    nxl[p] = k
                else:
                    lh[L] = k
                lt[L] = k
                lb[L] += lsz[k]
                lid[k] = L
                cool_k = True
            # _cool(j), its recursion on a stack: _cool(j) demotes list j's LRU end to list j - 1
            # (list 1: _evict_lowest, and no more), then cools list j - 1 while it overflows.
            # After a promotion k's list is cooled while it overflows (_promote); before an
            # admission list 1 while k does not fit (_request's _evict_lowest is _cool(1)).
            while True:
                if cool_k and lid[k] > 0 and lb[lid[k]] > seg_cap:
                    j = lid[k]
                elif admit and occ + ms > capacity:
                    j = 1
                else:
                    break
                stk[0] = j
                act[0] = True
                top = 1
                while top > 0:
                    j = stk[top - 1]
                    if act[top - 1]:
                        act[top - 1] = False
                        if j == 1:
                            for jj in range(1, _NSEG + 1):  # _evict_lowest
                                x = lh[jj]
                                if x >= 0:
                                    q = nxl[x]  # x out of list jj (its head)
                                    lh[jj] = q
                                    if q >= 0:
                                        prv[q] = -1
                                    else:
                                        lt[jj] = -1
                                    lb[jj] -= lsz[x]
                                    occ -= lsz[x]
                                    lid[x] = 0
                                    if state[x] == _DEVICE and not pd[x]:  # _drop
                                        pdp[x] = pdt
                                        pdn[x] = -1
                                        if pdt >= 0:
                                            pdn[pdt] = x
                                        else:
                                            pdh = x
                                        pdt = x
                                        pd[x] = True
                                    break
                            top -= 1
                            continue
                        x = lh[j]  # the LRU end of list j down to list j - 1
                        q = nxl[x]
                        lh[j] = q
                        if q >= 0:
                            prv[q] = -1
                        else:
                            lt[j] = -1
                        lb[j] -= lsz[x]
                        p = lt[j - 1]
                        prv[x] = p
                        nxl[x] = -1
                        if p >= 0:
                            nxl[p] = x
                        else:
                            lh[j - 1] = x
                        lt[j - 1] = x
                        lb[j - 1] += lsz[x]
                        lid[x] = j - 1
                    if lb[j - 1] > seg_cap:
                        stk[top] = j - 1
                        act[top] = True
                        top += 1
                    else:
                        top -= 1
            if admit:
                L = 1  # the lowest segment with room, else segment 0
                while L <= _NSEG and lb[L] + ms > seg_cap:
                    L += 1
                if L > _NSEG:
                    L = 1
                p = lt[L]  # onto list L's MRU end
                prv[k] = p
                nxl[k] = -1
                if p >= 0:
                    nxl[p] = k
                else:
                    lh[L] = k
                lt[L] = k
                lsz[k] = ms
                lb[L] += ms
                lid[k] = L
                occ += ms
            resident = lid[k] > 0
        elif policy == _S3FIFO:  # S3FIFO._request
            L = lid[k]
            hog = False
            if L == 1:  # a hit in the small queue
                mhit = True
                mc[k] += 1
            else:
                if L == 3:  # a ghost hit: the ghost goes
                    p, q = prv[k], nxl[k]
                    if p >= 0:
                        nxl[p] = q
                    else:
                        lh[3] = q
                    if q >= 0:
                        prv[q] = p
                    else:
                        lt[3] = p
                    lb[3] -= lsz[k]
                    lid[k] = 0
                    hog = True
                if L == 2:  # a hit in the main queue
                    mhit = True
                    mc[k] += 1
                elif ms <= small_cap and ms <= capacity:  # larger objects are never admitted
                    while lb[1] + lb[2] + ms > capacity:  # S3FIFO._evict
                        has_evicted = True
                        if lb[2] > main_cap or lb[1] == 0:
                            while lh[2] >= 0:  # main: a counted object goes round once more
                                x = lh[2]
                                p = nxl[x]  # x out of list 2 (its head)
                                lh[2] = p
                                if p >= 0:
                                    prv[p] = -1
                                else:
                                    lt[2] = -1
                                if mc[x] >= 1:
                                    mc[x] = min(mc[x], 3) - 1
                                    p = lt[2]  # x onto list 2's tail
                                    prv[x] = p
                                    nxl[x] = -1
                                    if p >= 0:
                                        nxl[p] = x
                                    else:
                                        lh[2] = x
                                    lt[2] = x
                                else:
                                    lb[2] -= lsz[x]
                                    lid[x] = 0
                                    if state[x] == _DEVICE and not pd[x]:  # _drop
                                        pdp[x] = pdt
                                        pdn[x] = -1
                                        if pdt >= 0:
                                            pdn[pdt] = x
                                        else:
                                            pdh = x
                                        pdt = x
                                        pd[x] = True
                                    break
                        else:
                            while lh[1] >= 0:  # small: promote the counted, evict the first other
                                x = lh[1]
                                p = nxl[x]  # x out of list 1 (its head)
                                lh[1] = p
                                if p >= 0:
                                    prv[p] = -1
                                else:
                                    lt[1] = -1
                                sz = lsz[x]
                                lb[1] -= sz
                                if mc[x] >= _S3_THRESHOLD:
                                    mc[x] = 0
                                    lb[2] += sz
                                    lid[x] = 2
                                    L = 2
                                else:
                                    lid[x] = 0
                                    L = 0
                                    if sz <= ghost_cap:  # _ghost_insert
                                        while lb[3] + sz > ghost_cap:
                                            y = lh[3]
                                            p = nxl[y]  # y out of list 3 (its head)
                                            lh[3] = p
                                            if p >= 0:
                                                prv[p] = -1
                                            else:
                                                lt[3] = -1
                                            lb[3] -= lsz[y]
                                            lid[y] = 0
                                        lb[3] += sz
                                        lid[x] = 3
                                        L = 3
                                if L > 0:
                                    p = lt[L]  # x onto list L's tail
                                    prv[x] = p
                                    nxl[x] = -1
                                    if p >= 0:
                                        nxl[p] = x
                                    else:
                                        lh[L] = x
                                    lt[L] = x
                                if L != 2:
                                    if state[x] == _DEVICE and not pd[x]:  # _drop
                                        pdp[x] = pdt
                                        pdn[x] = -1
                                        if pdt >= 0:
                                            pdn[pdt] = x
                                        else:
                                            pdh = x
                                        pdt = x
                                        pd[x] = True
                                    break
                    L = 0  # where k goes: main after a ghost hit or before the first eviction
                    if hog or (ms < small_cap and not has_evicted and lb[1] >= small_cap):
                        L = 2
                    elif ms < small_cap:  # (an object of the small queue's size is refused)
                        L = 1
                    if L > 0:
                        p = lt[L]  # k onto list L's tail
                        prv[k] = p
                        nxl[k] = -1
                        if p >= 0:
                            nxl[p] = k
                        else:
                            lh[L] = k
                        lt[L] = k
                        lb[L] += ms
                        lid[k] = L
                        mc[k] = 0
                        lsz[k] = ms
            resident = lid[k] == 1 or lid[k] == 2
        else:  # GDSF._request
            vt += 1
            if gin[k]:
                mhit = True
                gfreq[k] += 1
            elif ms <= capacity:
                gfreq[k] = 1
                gsz[k] = ms
                occ += ms
                gin[k] = True
            if gin[k]:  # _push: priority = clock + freq * 1e6 / size
                if gn == gcap:
                    gn = _gdsf_compact(gk1, gk2, gp1, gn, gin, gt)
                gt[k] = vt
                a1 = gcl + gfreq[k] * 1.0e6 / gsz[k]
                j = gn  # push (a1, vt) -> k: the hole moves up to its place
                gn += 1
                while j > 0:
                    q = (j - 1) >> 1
                    if a1 < gk1[q] or (a1 == gk1[q] and vt < gk2[q]):
                        gk1[j], gk2[j], gp1[j] = gk1[q], gk2[q], gp1[q]
                        j = q
                    else:
                        break
                gk1[j], gk2[j], gp1[j] = a1, vt, k
                while occ > capacity:  # _pop_min, then _drop
                    x = gp1[0]
                    if gin[x] and gt[x] == gk2[0]:
                        gcl = gk1[0]
                        gin[x] = False
                        occ -= gsz[x]
                        if state[x] == _DEVICE and not pd[x]:
                            pdp[x] = pdt
                            pdn[x] = -1
                            if pdt >= 0:
                                pdn[pdt] = x
                            else:
                                pdh = x
                            pdt = x
                            pd[x] = True
                    gn -= 1  # pop: the last entry moves down from the top to its place
                    if gn > 0:
                        a1, a2, ap = gk1[gn], gk2[gn], gp1[gn]
                        j = 0
                        while True:
                            c = 2 * j + 1
                            if c >= gn:
                                break
                            if c + 1 < gn and (gk1[c + 1] < gk1[c] or (gk1[c + 1] == gk1[c] and gk2[c + 1] < gk2[c])):
                                c += 1
                            if gk1[c] < a1 or (gk1[c] == a1 and gk2[c] < a2):
                                gk1[j], gk2[j], gp1[j] = gk1[c], gk2[c], gp1[c]
                                j = c
                            else:
                                break
                        gk1[j], gk2[j], gp1[j] = a1, a2, ap
            resident = gin[k]
        if sk == _DEVICE:
            # ShadowPolicy._settle: k is pending exactly when the model lacks it
            if resident and pd[k]:
                p, q = pdp[k], pdn[k]
                if p >= 0:
                    pdn[p] = q
                else:
                    pdh = q
                if q >= 0:
                    pdp[q] = p
                else:
                    pdt = p
                pd[k] = False
            elif not resident and not pd[k]:
                pdp[k] = pdt
                pdn[k] = -1
                if pdt >= 0:
                    pdn[pdt] = k
                else:
                    pdh = k
                pdt = k
                pd[k] = True
        elif mhit:
            unserved = True  # the model holds what the pool does not
            break
        else:
            # ---------------------------------------------------------- miss (counters)
            n_miss += 1
            b_miss += s
            if sk == _ABSENT:
                state[k] = _HOST
                dirty[k] = False
        # -------------------------------------------------------------- the pool evicts
        # every pending object but k, oldest drop first: on a miss it places, the first ones
        # as make-room's victims while k does not fit, the others after the access
        # (Pool._evict_due); without a timing model nothing in between depends on when
        fit = sk != _DEVICE and resident and s <= capacity
        x = pdh
        while x >= 0:
            y = pdn[x]
            if x != k:
                if record and fit and used + s > capacity:
                    vrow[nv] = i
                    vid[nv] = x
                    nv += 1
                p = pdp[x]  # x off the pending list (on_evict)
                if p >= 0:
                    pdn[p] = y
                else:
                    pdh = y
                if y >= 0:
                    pdp[y] = p
                else:
                    pdt = p
                pd[x] = False
                n_evict += 1  # _evict
                if dirty[x]:
                    n_wb += 1
                    b_d2h += nbytes[x]
                    dirty[x] = False
                    state[x] = _D2H
                else:
                    state[x] = _HOST
                used -= nbytes[x]
                nbytes[x] = 0
            x = y
        if sk == _DEVICE:
            # ---------------------------------------------------------- hit
            n_hit += 1
            if record:
                outcome[i] = HIT
            if w:
                if write_through:
                    b_d2h += nbytes[k]
                else:
                    dirty[k] = True
        elif not fit:
            # ---------------------------------------------------------- bypass (admit())
            n_bypass += 1
            if record:
                outcome[i] = BYPASS
        else:
            # ---------------------------------------------------------- insert
            if used + s > capacity:
                unserved = True  # the pool would give up an object the model keeps
                break
            used += s
            nbytes[k] = s
            if used > peak:
                peak = used
            if sk == _ABSENT and w:
                n_alloc += 1
            else:
                b_h2d += s  # demand fetch
            state[k] = _DEVICE
            if w:
                if write_through:
                    b_d2h += s
                else:
                    dirty[k] = True
        now += compute[i]
    st = np.array([n_acc, n_hit, n_miss, b_miss, n_alloc, n_evict, n_wb, n_bypass, n_free,
                   b_h2d, b_d2h, 0, now, now, used, peak], np.int64)
    return st, outcome, vrow[:nv], vid[:nv], unserved


# ---------------------------------------------------------------------- front door
def fast_applicable(
    policy: str,
    *,
    placement: str = "bytes",
    prefetch: str | None = None,
    backend: object | None = None,
    hook: object | None = None,
) -> str | None:
    """``None`` when :func:`replay_fast` can stand in for :meth:`Pool.replay`, else the reason."""
    if policy not in FAST_POLICIES:
        return f"policy {policy!r} has no compiled kernel (only {FAST_POLICIES})"
    if placement != "bytes":
        return f"placement {placement!r}: the kernel does byte accounting only"
    if prefetch not in (None, "none"):
        return f"prefetcher {prefetch!r}: the kernel runs without prefetching"
    if backend is not None:
        return "a backend moves real bytes: replay it through the pool"
    if hook is not None:
        return "a hook observes every pool event: replay it through the pool"
    return None


def _timing(cost: Preset | str | None) -> tuple[bool, int, float, int, float, bool]:
    if cost is None:
        return False, 0, 1.0, 0, 1.0, True
    p = get_preset(cost) if isinstance(cost, str) else cost
    return (True, int(p.h2d_latency_ns), float(p.h2d_gbps), int(p.d2h_latency_ns),
            float(p.d2h_gbps), p.copy_engines == 2)


def dense_ids(key: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, int]:
    """``(ids, keys_of_ids, n_ids)``: keys already in ``[0, 4 * len)`` are used as they are
    (``keys_of_ids`` is then ``None``); others are remapped through ``np.unique``."""
    n = len(key)
    if n == 0:
        return np.zeros(0, np.int64), None, 0
    lo, hi = int(key.min()), int(key.max())
    if lo >= 0 and hi < 4 * n + 1024:
        return np.ascontiguousarray(key, np.int64), None, hi + 1
    uniq, ids = np.unique(key, return_inverse=True)
    return ids.astype(np.int64, copy=False), uniq, len(uniq)


def replay_fast(
    trace: Trace,
    capacity: int,
    policy: str,
    mode: Literal["bytes", "objects"] = "bytes",
    *,
    cost: Preset | str | None = None,
    write_policy: Literal["write-back", "write-through"] = "write-back",
    oversize: Literal["error", "bypass"] = "bypass",
    placement: str = "bytes",
    prefetch: str | None = None,
    record: bool = False,
) -> FastReplay | None:
    """Replay ``trace`` from row 0 as ``Pool(capacity, make_eviction(policy), placement=
    "bytes", cost=cost, write_policy=..., oversize=...).replay(trace)`` would, or return
    ``None`` when the configuration needs the pool (see :func:`fast_applicable`; also when
    ``oversize="error"`` and an object is larger than the pool, so that the pool raises; and for
    :data:`UNTIMED_ONLY` with a timing model).

    ``mode="objects"`` counts every object as size 1 (libCacheSim's ``--ignore-obj-size``).
    """
    import time

    reason = fast_applicable(policy, placement=placement, prefetch=prefetch)
    if reason is not None:
        log.debug("replay_fast not applicable: %s", reason)
        return None
    if isinstance(cost, CostModel):
        if cost.now or cost.stall_ns:
            return None
        cost = cost.preset
    capacity = int(capacity)
    size = trace.size if mode == "bytes" else np.ones(len(trace), np.int64)
    if oversize == "error" and len(trace) and int(size.max()) > capacity:
        return None
    timed, h2d_lat, h2d_gbps, d2h_lat, d2h_gbps, two = _timing(cost)
    if timed and policy in UNTIMED_ONLY:
        return None  # copies in flight outlast the evictions of the models' drops (their kernel
        # has no clock): the pool replays
    ids, uniq, n_ids = dense_ids(trace.key)
    code = FAST_POLICIES.index(policy)
    if len(trace) >= 1 << 31 or n_ids >= 1 << 31:
        return None  # Belady packs (row, id) into one int64
    t0 = time.perf_counter()
    nxt = _next_use(ids, trace.op, n_ids) if code == _BELADY else np.zeros(1, np.int64)
    n_freq = int(np.bincount(ids).max()) + 2 if code == _LFU and len(ids) else 2
    if code in (_S3FIFO, _SLRU, _GDSF):
        st, outcome, vrow, vid, unserved = _shadow_kernel(
            ids, np.ascontiguousarray(size, np.int64), trace.op, trace.compute_ns, n_ids,
            capacity, code, write_policy == "write-through", record)
    else:
        st, outcome, vrow, vid, unserved = _kernel(
            ids, np.ascontiguousarray(size, np.int64), trace.op, trace.compute_ns, nxt, n_ids,
            n_freq, capacity, code, write_policy == "write-through", oversize == "bypass", timed,
            h2d_lat, h2d_gbps, d2h_lat, d2h_gbps, two, record,
        )
    kernel_s = time.perf_counter() - t0
    if unserved:
        log.debug("replay_fast: the pool and %s's model part; the pool replays it", policy)
        return None
    stats = PoolStats(**{f: int(v) for f, v in zip(_STAT_FIELDS, st)})
    vkeys = vid if uniq is None else uniq[vid]
    return FastReplay(stats, outcome, vrow, vkeys, kernel_s)


def warm_up() -> None:
    """Compile (or load from numba's cache) every kernel specialisation on a tiny trace."""
    t = Trace.from_arrays([0, 1, 0, 2, 1, 2], 1, [0, 1, 0, 0, 2, 0], compute_ns=[1] * 6)
    for p in FAST_POLICIES:
        for cost in (None, "h100_pcie5"):
            replay_fast(t, 2, p, cost=cost, record=True)
            replay_fast(t, 2, p, cost=cost)

