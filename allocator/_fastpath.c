/* Fast paths of allocator.pool.Pool.access in C (optional; see allocator/pool.py).
 *
 * A HitPath belongs to one pool; ``pool.access`` is that HitPath (through AccessDescriptor, the
 * class attribute Pool.access) while the pool's configuration allows a plain hit (no
 * prefetcher, no hook, no pending evictions, a policy with ``touch`` or a FeatureTracker). It
 * serves two branches of the one access loop and hands every other call to the Python method
 * unchanged:
 *
 * - the plain hit (hp_access), an object resident on the device:
 *       _tick += 1; stats.accesses += 1; stats.hits += 1; o.last_tick = _tick; o.n_access += 1
 *       if o.prefetched: o.prefetched = False; stats.prefetch_hits += 1
 *       if write: o.dirty = True
 *       touch(key) (a FeatureTracker: its on_hit); if compute_ns: cost.compute(compute_ns)
 * - the plain miss (hp_miss), an object in host memory or not yet known, on a pool without a
 *   backend, with instant copies and a policy without on_miss / admit (or a FeatureTracker),
 *   nothing in flight: access()'s miss phases (_begin's counters and object, room made through
 *   policy.victim, Pool._evict and Pool._room_step with the placement's alloc, _insert's fetch or
 *   first-write allocation, _end) with the same effects in the same order. Arena.alloc / release
 *   and ByteAccounting's run here as the same steps on the same structures (arena_alloc,
 *   arena_release; PlaceRelease is Pool._place_release), and so does Pool._evict for a victim
 *   whose block can go back at once, its write-back instant (evict_plain; any other victim, and
 *   every bad answer, goes to Pool._evict).
 *
 * For the environments (envs/evict.py), where a FeatureTracker is the pool's policy and an agent
 * answers the evictions: the tracker's hooks run here (tracker.c); HitPath.step / resume /
 * abandon serve Pool.steps' miss with the decision left to the caller (the miss waits, the lock
 * held, until resume(victim)); HitPath.free serves Pool.free's plain case; HitPath.run takes a
 * window's rows up to the next decision in one call.
 *
 * Also, for policies/features.py: gather(), the usual case of an eviction decision's candidate
 * selection (the K least recently used, or K drawn from the residents with the Generator's own
 * bit generator, every one evictable): their slots and state codes read from the records in one
 * pass; any other case goes back to the Python selection, which tests/policies/test_features.py
 * holds equal (candidates, features and random draws); head(), the decision's global features;
 * decision_info() and last_uses(), the environments' teacher info.
 *
 * Everything else (copies in flight, a timing model on a miss, a backend, an oversize object,
 * a write under write-through, unusual argument types or keywords, the pool's lock held by
 * another thread) goes to the Python method. tests/allocator/test_fastpath.py holds both paths to identical
 * results.
 *
 * Locking: nothing is written unless the pool's RLock is free or held by this thread, and the
 * GIL stays held from the first read to the last write of a hit. Two ways to know it:
 *  - peek (hits): setup() finds where _thread.RLock keeps its owner and count, checking the
 *    layout on a live lock (acquire, acquire again, release twice); a count of 0 or this thread
 *    as owner means no other thread is inside the pool. This applies only when nothing in the
 *    section can run Python code (touch is OrderedDict.move_to_end, no compute), so no other
 *    thread can run before the path returns. (A thread that has taken the OS lock but not yet set
 *    the owner is still waiting for the GIL: it has not begun its section.)
 *  - otherwise (misses, another layout, a Python touch, compute_ns): the lock's own
 *    acquire(False) and release(), which really take it; acquire(False) never releases the GIL.
 * When another thread holds the lock, the call goes to the Python method, which blocks as usual.
 *
 * Invariant: every check that can send a call to the Python method comes before the first
 * write, so a call that falls back has changed nothing.
 */

/* One translation unit built from five parts (a unity build: the parts' static functions see
 * each other, as in one file), in the order they depend on each other: */
#include "csrc/core.h"       /* shared: __slots__ offsets, HitPath, the lock, setup() */
#include "csrc/placement.c"  /* Arena / ByteAccounting alloc and release, PlaceRelease */
#include "csrc/tracker.c"    /* FeatureTracker's per-access hooks */
#include "csrc/access.c"     /* eviction, the plain miss and hit, free, run(); HitPath */
#include "csrc/decision.c"   /* gather, head, decision_info, last_uses */

static PyMethodDef fp_methods[] = {
    {"setup", fp_setup, METH_VARARGS,
     "setup(ObjectInfo, PoolStats, Pool, CostModel, Arena, ByteAccounting, ALIGN, RLock()): find the "
     "__slots__ the fast paths read and "
     "writes and the lock's layout; returns whether the layout is known"},
    {"last_uses", fp_last_uses, METH_VARARGS,
     "last_uses(S, v, head, n, next_use, out): next_use at each packed candidate's last access "
     "(the largest tick in its tracker row's ring) into out; False when one has none"},
    {"decision_info", fp_decision_info, METH_VARARGS,
     "decision_info(keys, nxt, tick, K, farthest, out_keys, out_dist): the oracle's choice and "
     "the next-use distances of envs.common.decision_info; returns the oracle"},
    {"head", (PyCFunction)(void (*)(void))fp_head, METH_FASTCALL,
     "head(pool, tracker, n, K, out, consts): a decision's globals (policies/features.py's "
     "_pack head) into out[0:17]; False when the Python code must compute them"},
    {"set_tracker", fp_set_tracker, METH_VARARGS,
     "set_tracker(FeatureTracker, ncol, count, ring0, ring, e0, insert, create, (ih0, ih1, ih2), "
     "alpha, renorm): the tracker class whose hooks the C paths run, and its row layout"},
    {"propose", (PyCFunction)(void (*)(void))fp_propose, METH_FASTCALL,
     "propose(succ, key, K, hops, objs): envs.candidates.SuccessorPredictor.propose with the "
     "pool's records; None when the Python method must serve"},
    {"pack", (PyCFunction)(void (*)(void))fp_pack, METH_FASTCALL,
     "pack(keys, objs, slots, K, out, base): candidates' slots and state codes (any state) into "
     "out, as policies/features.py's _pack; False when the Python code must pack"},
    {"gather", (PyCFunction)(void (*)(void))fp_gather, METH_FASTCALL,
     "gather(src, objs, slots, K, out, base, rng=None, m=0, recs=None, rslots=None): the usual cases of a decision's "
     "candidate selection and record reads (policies/features.py); see the source"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fp_module = {
    PyModuleDef_HEAD_INIT, "allocator._fastpath",
    "Pool.access's plain-hit branch in C (optional accelerator of allocator.pool).", -1,
    fp_methods,
};

PyMODINIT_FUNC
PyInit__fastpath(void)
{
    if (PyType_Ready(&HitPathType) < 0 || PyType_Ready(&AccessDescrType) < 0
        || PyType_Ready(&PlaceReleaseType) < 0)
        return NULL;
#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(s_tick, "_tick");
    INTERN(s_h2d_latency_ns, "h2d_latency_ns");
    INTERN(s_h2d_gbps, "h2d_gbps");
    INTERN(s_d2h_latency_ns, "d2h_latency_ns");
    INTERN(s_d2h_gbps, "d2h_gbps");
    INTERN(s_stats, "stats");
    INTERN(s_cost, "cost");
    INTERN(s_compute, "compute");
    INTERN(s_write, "write");
    INTERN(s_kind, "kind");
    INTERN(s_compute_ns, "compute_ns");
    INTERN(s_alloc, "alloc");
    INTERN(s_victim, "victim");
    INTERN(s_evict, "_evict");
    INTERN(s_room_step, "_room_step");
    INTERN(s_undo_miss, "_undo_miss");
    INTERN(s_on_insert, "on_insert");
    INTERN(s_capacity, "capacity");
    INTERN(s_used, "used");
    INTERN(s_wait_until, "wait_until");
    INTERN(s_release, "release");
    INTERN(s_on_evict, "on_evict");
    INTERN(s_slot_map, "_slot");
    INTERN(s_order, "_order");
    INTERN(s_V, "_V");
    INTERN(s_epoch, "_epoch");
    INTERN(s_miss_rate, "miss_rate");
    INTERN(s_res, "_res");
    INTERN(s_res_pos, "_res_pos");
    INTERN(s_res_rec, "_res_rec");
    INTERN(s_res_slot, "_res_slot");
    INTERN(s_move_to_end, "move_to_end");
    INTERN(s_new_slot, "_new_slot");
    INTERN(s_renormalise, "_renormalise");
    INTERN(s_on_hit, "on_hit");
    INTERN(s_on_miss, "on_miss");
    INTERN(s_append, "append");
    INTERN(s_free_slots, "_free_slots");
    INTERN(s_next, "_next");
    INTERN(s_on_free, "on_free");
    INTERN(s_on_free_untracked, "on_free_untracked");
#undef INTERN
    if ((one = PyLong_FromLong(1)) == NULL || (zero = PyLong_FromLong(0)) == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&fp_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&HitPathType);
    if (PyModule_AddObject(m, "HitPath", (PyObject *)&HitPathType) < 0) {
        Py_DECREF(&HitPathType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&PlaceReleaseType);
    if (PyModule_AddObject(m, "PlaceRelease", (PyObject *)&PlaceReleaseType) < 0) {
        Py_DECREF(&PlaceReleaseType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&AccessDescrType);
    if (PyModule_AddObject(m, "AccessDescriptor", (PyObject *)&AccessDescrType) < 0) {
        Py_DECREF(&AccessDescrType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "RUN_END", RUN_END) < 0
        || PyModule_AddIntConstant(m, "RUN_DECISION", RUN_DECISION) < 0
        || PyModule_AddIntConstant(m, "RUN_PYTHON", RUN_PYTHON) < 0
        || PyModule_AddIntConstant(m, "GATHER_MAX_K", GATHER_MAX_K) < 0) {  /* gather's bound on K */
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
