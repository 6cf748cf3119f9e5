/* Fast paths of allocator.pool.Pool.access in C (optional; see allocator/pool.py).
 *
 * A HitPath belongs to one pool; ``pool.access`` is that HitPath (through AccessDescriptor, the
 * class attribute Pool.access) while the pool's configuration allows a plain hit (no
 * prefetcher, no hook, no pending evictions, a policy with ``touch``). It serves two branches of
 * the one access loop and hands every other call to the Python method unchanged:
 *
 * - the plain hit (hp_vectorcall), an object resident on the device:
 *       _tick += 1; stats.accesses += 1; stats.hits += 1; o.last_tick = _tick; o.n_access += 1
 *       if o.prefetched: o.prefetched = False; stats.prefetch_hits += 1
 *       if write: o.dirty = True
 *       touch(key); if compute_ns: cost.compute(compute_ns)
 * - the plain miss (hp_miss), an object in host memory or not yet known, on a pool without a
 *   backend, with instant copies and a policy without on_miss / admit, nothing in flight:
 *   access()'s miss phases (_begin's counters and object, room made through policy.victim,
 *   Pool._evict and Pool._room_step with the placement's alloc, _insert's fetch or first-write
 *   allocation, _end) with the same effects in the same order. Arena.alloc / release and
 *   ByteAccounting's run here as the same steps on the same structures (arena_alloc,
 *   arena_release; PlaceRelease is Pool._place_release), and so does Pool._evict for a clean
 *   victim whose block can go back at once (evict_plain; any other victim, and every bad
 *   answer, goes to Pool._evict).
 *
 * Also gather(): the usual case of an eviction decision's candidate selection for
 * policies/features.py (the K least recently used, or K drawn from the residents with the
 * Generator's own bit generator, every one evictable): their slots and state codes read from
 * the records in one pass; any other case goes back to the Python selection, which
 * tests/policies/test_features.py holds equal (candidates, features and random draws).
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
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>

#ifdef Py_GIL_DISABLED
#error "allocator._fastpath relies on the GIL; the free-threaded build uses the pure-Python path"
#endif

#ifdef Py_T_OBJECT_EX
#define FP_T_OBJECT_EX Py_T_OBJECT_EX
#else
#define FP_T_OBJECT_EX T_OBJECT_EX
#endif
#ifdef Py_READONLY
#define FP_READONLY Py_READONLY
#else
#define FP_READONLY READONLY
#endif

/* offsets of the __slots__ this path reads and writes, found once by setup() */
static PyTypeObject *info_type = NULL, *stats_type = NULL, *pool_type = NULL, *cost_type = NULL;
/* the two placements (allocator/arena.py) and their slots */
static PyTypeObject *arena_type = NULL, *bytes_type = NULL;
static Py_ssize_t off_ar_capacity, off_ar_used, off_ar_free, off_ar_ends, off_ar_by_size;
static Py_ssize_t off_ba_capacity, off_ba_used;
static long long align_mask = -1;  /* arena.ALIGN - 1 */
static Py_ssize_t off_state, off_dirty, off_prefetched, off_last_tick, off_n_access;
static Py_ssize_t off_accesses, off_hits, off_prefetch_hits;
static Py_ssize_t off_pool_tick, off_pool_stats, off_pool_hit_path;
/* the plain miss (see hp_miss) */
static Py_ssize_t off_size, off_offset, off_nbytes, off_ready_ns, off_busy_until;
static Py_ssize_t off_misses, off_byte_misses, off_bytes_h2d, off_peak, off_allocations;
static Py_ssize_t off_pool_place, off_pool_policy, off_pool_view, off_pool_n_evictable;
static Py_ssize_t off_pool_releases, off_pool_landing, off_pool_cost, off_pool_fp_mask;
static Py_ssize_t off_pins, off_key, off_evictions, off_useless, off_pool_place_release, off_pool_hook;
static Py_ssize_t off_cost_now, off_kind, off_created;
/* a dirty victim's write-back (instant copies), a free, compute time */
static Py_ssize_t off_writebacks, off_bytes_d2h, off_frees, off_cost_instant, off_cost_compute;
/* what fp_head reads besides (policies/features.py's globals) */
static Py_ssize_t off_pool_capacity, off_pool_inflight, off_cost_stall, off_cost_preset;
static PyObject *s_alloc, *s_victim, *s_evict, *s_room_step, *s_undo_miss, *s_on_insert;
static PyObject *s_capacity, *s_used, *s_wait_until, *s_release, *s_on_evict;
/* where _thread.RLock keeps its owner and count (rlock_type NULL: unknown layout) */
static PyTypeObject *rlock_type = NULL;
static Py_ssize_t off_rlock_owner, off_rlock_count;
static PyObject *s_tick, *s_stats, *s_cost, *s_compute, *s_write, *s_kind, *s_compute_ns;
static PyObject *one, *zero;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

/* An access miss in progress (hp_miss; the references are owned) */
typedef struct {
    PyObject *o, *key, *size, *needo, *old_size, *compute, *kind;
    PyObject *place, *policy, *view, *stats, *cost;
    long long need, cap;
    int w, c, created;
} Miss;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *pool;
    PyObject *fallback;  /* the Python method Pool.access bound to pool */
    PyObject *objs;      /* pool._objs (never rebound) */
    PyObject *lock;      /* pool._lock (never rebound) and its acquire / release */
    PyObject *acquire;
    PyObject *release;
    PyObject *touch;     /* the policy's touch, or NULL */
    int peek;            /* the lock's layout is known and touch runs no Python code */
    int enabled;         /* the pool's configuration allows a plain hit */
    int fast_write;      /* a write hit is plain too (write-back) */
    int miss;            /* plain misses too: no backend, instant copies, no on_miss/admit */
    long calls;          /* hits served here (for tests and the benchmark) */
    long misses;         /* misses served here */
    PyObject *tracker;   /* the pool's policy when it is a FeatureTracker: its hooks run here */
    Py_buffer tr_buf;    /* the tracker's rows (_V), held while _V is that object */
    int pending;         /* a miss suspended at an eviction decision (step / resume) */
    Miss pend;
} HitPath;

static int
slot_offset(PyTypeObject *type, const char *name, Py_ssize_t *off)
{
    PyObject *d = PyObject_GetAttrString((PyObject *)type, name);
    if (d == NULL)
        return -1;
    if (Py_TYPE(d) != &PyMemberDescr_Type) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a __slots__ member", type->tp_name, name);
        Py_DECREF(d);
        return -1;
    }
    PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
    if (m->type != FP_T_OBJECT_EX || (m->flags & FP_READONLY)) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a writable object slot", type->tp_name, name);
        Py_DECREF(d);
        return -1;
    }
    *off = m->offset;
    Py_DECREF(d);
    return 0;
}

#define WORDS 8

/* The machine words of ``lock`` after its header (at most WORDS, within the object). */
static Py_ssize_t
read_words(PyObject *lock, size_t *w)
{
    Py_ssize_t n = (Py_TYPE(lock)->tp_basicsize - (Py_ssize_t)sizeof(PyObject)) / (Py_ssize_t)sizeof(size_t);
    if (n > WORDS)
        n = WORDS;
    memcpy(w, (char *)lock + sizeof(PyObject), (size_t)(n > 0 ? n : 0) * sizeof(size_t));
    return n;
}

static int
call_noarg(PyObject *lock, const char *name)
{
    PyObject *r = PyObject_CallMethod(lock, name, NULL);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* Find the owner and count words of an unheld _thread.RLock by watching them change as this
 * thread takes it twice and gives it back; leaves rlock_type NULL when no pair of words fits. */
static int
calibrate_rlock(PyObject *lock)
{
    size_t w0[WORDS], w1[WORDS], w2[WORDS], w3[WORDS];
    size_t me = (size_t)PyThread_get_thread_ident();
    Py_CLEAR(rlock_type);
    if (strcmp(Py_TYPE(lock)->tp_name, "_thread.RLock") != 0)
        return 0;  /* not the C lock: acquire / release calls */
    Py_ssize_t n = read_words(lock, w0);
    if (call_noarg(lock, "acquire") < 0)
        return -1;
    read_words(lock, w1);
    if (call_noarg(lock, "acquire") < 0)
        return -1;
    read_words(lock, w2);
    if (call_noarg(lock, "release") < 0 || call_noarg(lock, "release") < 0)
        return -1;
    read_words(lock, w3);
    Py_ssize_t owner = -1, count = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (w0[i] == 0 && w1[i] == me && w2[i] == me && w3[i] == 0 && owner < 0)
            owner = i;
        if (w0[i] == 0 && w1[i] == 1 && w2[i] == 2 && w3[i] == 0 && count < 0)
            count = i;
    }
    if (owner >= 0 && count >= 0 && owner != count && me != 0 && me != 1 && me != 2) {
        off_rlock_owner = (Py_ssize_t)sizeof(PyObject) + owner * (Py_ssize_t)sizeof(size_t);
        off_rlock_count = (Py_ssize_t)sizeof(PyObject) + count * (Py_ssize_t)sizeof(size_t);
        rlock_type = Py_TYPE(lock);
        Py_INCREF(rlock_type);
    }
    return 0;
}

static PyObject *
fp_setup(PyObject *mod, PyObject *args)
{
    PyTypeObject *it, *st, *pt, *ct, *at, *bt;
    PyObject *lock;
    long long align;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!LO:setup", &PyType_Type, &it, &PyType_Type, &st,
                          &PyType_Type, &pt, &PyType_Type, &ct, &PyType_Type, &at,
                          &PyType_Type, &bt, &align, &lock))
        return NULL;
    if (align <= 0 || (align & (align - 1)) != 0 || align > (1 << 20)) {
        PyErr_SetString(PyExc_TypeError, "setup: the arena alignment must be a power of two");
        return NULL;
    }
    align_mask = align - 1;
    if (slot_offset(it, "state", &off_state) || slot_offset(it, "dirty", &off_dirty)
        || slot_offset(it, "prefetched", &off_prefetched)
        || slot_offset(it, "last_tick", &off_last_tick)
        || slot_offset(it, "n_access", &off_n_access)
        || slot_offset(st, "accesses", &off_accesses) || slot_offset(st, "hits", &off_hits)
        || slot_offset(st, "prefetch_hits", &off_prefetch_hits)
        || slot_offset(pt, "_tick", &off_pool_tick) || slot_offset(pt, "stats", &off_pool_stats)
        || slot_offset(pt, "_hit_path", &off_pool_hit_path)
        || slot_offset(it, "size", &off_size) || slot_offset(it, "offset", &off_offset)
        || slot_offset(it, "nbytes", &off_nbytes) || slot_offset(it, "ready_ns", &off_ready_ns)
        || slot_offset(it, "busy_until", &off_busy_until)
        || slot_offset(st, "misses", &off_misses) || slot_offset(st, "byte_misses", &off_byte_misses)
        || slot_offset(st, "bytes_h2d", &off_bytes_h2d)
        || slot_offset(st, "peak_device_bytes", &off_peak)
        || slot_offset(st, "allocations", &off_allocations)
        || slot_offset(pt, "_place", &off_pool_place) || slot_offset(pt, "_policy", &off_pool_policy)
        || slot_offset(pt, "view", &off_pool_view)
        || slot_offset(pt, "_n_evictable", &off_pool_n_evictable)
        || slot_offset(pt, "_releases", &off_pool_releases)
        || slot_offset(pt, "_landing", &off_pool_landing) || slot_offset(pt, "cost", &off_pool_cost)
        || slot_offset(pt, "_fp_mask", &off_pool_fp_mask) || slot_offset(ct, "now", &off_cost_now)
        || slot_offset(it, "pins", &off_pins) || slot_offset(it, "key", &off_key)
        || slot_offset(it, "kind", &off_kind) || slot_offset(it, "created_tick", &off_created)
        || slot_offset(st, "writebacks", &off_writebacks) || slot_offset(st, "bytes_d2h", &off_bytes_d2h)
        || slot_offset(st, "frees", &off_frees) || slot_offset(ct, "instant", &off_cost_instant)
        || slot_offset(ct, "compute_ns", &off_cost_compute)
        || slot_offset(pt, "capacity", &off_pool_capacity)
        || slot_offset(pt, "_inflight_bytes", &off_pool_inflight)
        || slot_offset(ct, "stall_ns", &off_cost_stall) || slot_offset(ct, "preset", &off_cost_preset)
        || slot_offset(st, "evictions", &off_evictions)
        || slot_offset(st, "useless_prefetches", &off_useless)
        || slot_offset(pt, "_place_release", &off_pool_place_release)
        || slot_offset(pt, "_hook", &off_pool_hook)
        || slot_offset(at, "capacity", &off_ar_capacity) || slot_offset(at, "used", &off_ar_used)
        || slot_offset(at, "_free", &off_ar_free) || slot_offset(at, "_ends", &off_ar_ends)
        || slot_offset(at, "_by_size", &off_ar_by_size)
        || slot_offset(bt, "capacity", &off_ba_capacity) || slot_offset(bt, "used", &off_ba_used))
        return NULL;
    if (calibrate_rlock(lock) < 0)
        return NULL;
    Py_INCREF(it);
    Py_INCREF(st);
    Py_INCREF(pt);
    Py_INCREF(ct);
    Py_XSETREF(cost_type, ct);
    Py_INCREF(at);
    Py_XSETREF(arena_type, at);
    Py_INCREF(bt);
    Py_XSETREF(bytes_type, bt);
    Py_XSETREF(info_type, it);
    Py_XSETREF(stats_type, st);
    Py_XSETREF(pool_type, pt);
    return PyBool_FromLong(rlock_type != NULL);
}

/* Release the pool's lock, keeping an exception already set (if any). */
static int
release_lock(HitPath *self)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc = PyErr_GetRaisedException();
#else
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
#endif
    PyObject *r = PyObject_Vectorcall(self->release, NULL, 0, NULL);
    int ok = r != NULL;
    Py_XDECREF(r);
#if PY_VERSION_HEX >= 0x030C0000
    if (exc != NULL) {
        if (!ok)
            Py_DECREF(exc);  /* the release error wins, as in a Python ``finally`` */
        else
            PyErr_SetRaisedException(exc);
    }
#else
    if (et != NULL) {
        if (!ok) {
            Py_XDECREF(et);
            Py_XDECREF(ev);
            Py_XDECREF(tb);
        } else {
            PyErr_Restore(et, ev, tb);
        }
    }
#endif
    return ok ? 0 : -1;
}

/* Truth value of an int/bool argument: 1, 0, or -1 when it is of another type. */
static inline int
int_truth(PyObject *v)
{
    if (v == Py_True)
        return 1;
    if (v == Py_False)
        return 0;
    if (PyLong_CheckExact(v))
        return PyObject_IsTrue(v);  /* an exact int: no Python code runs */
    return -1;
}

/* a + b for ints; NULL with an exception on failure */
#define ADD(a, b) PyNumber_Add((a), (b))

static inline int
exact_ints(PyObject **v, int n)
{
    for (int i = 0; i < n; i++)
        if (v[i] == NULL || !PyLong_CheckExact(v[i]))
            return 0;
    return 1;
}

static PyObject *
call_method(PyObject *name, PyObject *obj, PyObject *a, PyObject *b, PyObject *c)
{
    PyObject *argv[4] = {obj, a, b, c};
    size_t n = 1 + (a != NULL) + (b != NULL) + (c != NULL);
    return PyObject_VectorcallMethod(name, argv, n, NULL);
}

static PyObject FALLBACK_OBJ;  /* "ask the Python method": never returned to Python */
#define FALLBACK (&FALLBACK_OBJ)

/* (size, offset) of by_size[i] as C integers; 0 when it is not a pair of exact ints */
static inline int
block_at(PyObject *by_size, Py_ssize_t i, long long *size, long long *off)
{
    PyObject *t = PyList_GET_ITEM(by_size, i);
    if (!PyTuple_CheckExact(t) || PyTuple_GET_SIZE(t) != 2)
        return 0;
    PyObject *a = PyTuple_GET_ITEM(t, 0), *b = PyTuple_GET_ITEM(t, 1);
    if (!PyLong_CheckExact(a) || !PyLong_CheckExact(b))
        return 0;
    int o1 = 0, o2 = 0;
    *size = PyLong_AsLongLongAndOverflow(a, &o1);
    *off = PyLong_AsLongLongAndOverflow(b, &o2);
    return !o1 && !o2;
}

/* bisect.insort(by_size, pair): bisect_right, then insert (Arena keeps _by_size sorted so). */
static int
insort(PyObject *by_size, PyObject *pair)
{
    Py_ssize_t l = 0, h = PyList_GET_SIZE(by_size);
    while (l < h) {
        Py_ssize_t mid = l + (h - l) / 2;
        int lt = PyObject_RichCompareBool(pair, PyList_GET_ITEM(by_size, mid), Py_LT);
        if (lt < 0)
            return -1;
        if (lt)
            h = mid;
        else
            l = mid + 1;
    }
    return PyList_Insert(by_size, l, pair);
}

/* Arena.alloc(need) for an aligned ``need`` (allocator/arena.py, the same steps on the same
 * structures): best fit from _by_size, split, _free/_ends kept. FALLBACK when a structure is not
 * what Arena builds (nothing changed then). */
static PyObject *
arena_alloc(PyObject *arena, long long need)
{
    PyObject *by_size = SLOT(arena, off_ar_by_size), *free = SLOT(arena, off_ar_free);
    PyObject *ends = SLOT(arena, off_ar_ends), *used = SLOT(arena, off_ar_used);
    if (by_size == NULL || !PyList_CheckExact(by_size) || free == NULL || !PyDict_CheckExact(free)
        || ends == NULL || !PyDict_CheckExact(ends) || used == NULL || !PyLong_CheckExact(used))
        return FALLBACK;
    /* bisect_left(by_size, (need, -1)): offsets are >= 0, so the first block of size >= need */
    Py_ssize_t lo = 0, hi = PyList_GET_SIZE(by_size);
    long long size, off;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (!block_at(by_size, mid, &size, &off) || off < 0)
            return FALLBACK;
        if (size < need)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == PyList_GET_SIZE(by_size))
        Py_RETURN_NONE;
    if (!block_at(by_size, lo, &size, &off) || off < 0 || size > (LLONG_MAX >> 2)
        || off > (LLONG_MAX >> 2))
        return FALLBACK;
    PyObject *offo = PyLong_FromLongLong(off), *endo = PyLong_FromLongLong(off + size);
    PyObject *needo = PyLong_FromLongLong(need), *used1 = NULL, *resto = NULL, *remo = NULL;
    PyObject *pair = NULL;
    if (offo == NULL || endo == NULL || needo == NULL || (used1 = PyNumber_Add(used, needo)) == NULL)
        goto fail;
    if (size > need
        && ((resto = PyLong_FromLongLong(off + need)) == NULL
            || (remo = PyLong_FromLongLong(size - need)) == NULL
            || (pair = PyTuple_Pack(2, remo, resto)) == NULL))
        goto fail;
    /* the Python method's steps, in its order */
    if (PyList_SetSlice(by_size, lo, lo + 1, NULL) < 0 || PyDict_DelItem(free, offo) < 0)
        goto fail;
    if (size > need) {  /* split: the remainder stays free, its end is unchanged */
        if (PyDict_SetItem(free, resto, remo) < 0 || PyDict_SetItem(ends, endo, resto) < 0)
            goto fail;
        if (insort(by_size, pair) < 0)
            goto fail;
    } else if (PyDict_DelItem(ends, endo) < 0) {
        goto fail;
    }
    Py_SETREF(SLOT(arena, off_ar_used), used1);
    Py_DECREF(endo);
    Py_DECREF(needo);
    Py_XDECREF(resto);
    Py_XDECREF(remo);
    Py_XDECREF(pair);
    return offo;

fail:
    Py_XDECREF(offo);
    Py_XDECREF(endo);
    Py_XDECREF(needo);
    Py_XDECREF(used1);
    Py_XDECREF(resto);
    Py_XDECREF(remo);
    Py_XDECREF(pair);
    return NULL;
}

/* ByteAccounting.alloc(need): FALLBACK when its counters are not plain ints */
static PyObject *
bytes_alloc(PyObject *place, PyObject *needo)
{
    PyObject *used = SLOT(place, off_ba_used), *cap = SLOT(place, off_ba_capacity);
    if (used == NULL || !PyLong_CheckExact(used) || cap == NULL || !PyLong_CheckExact(cap))
        return FALLBACK;
    PyObject *used1 = PyNumber_Add(used, needo);
    if (used1 == NULL)
        return NULL;
    int over = PyObject_RichCompareBool(used1, cap, Py_GT);
    if (over != 0) {
        Py_DECREF(used1);
        if (over < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    Py_SETREF(SLOT(place, off_ba_used), used1);
    Py_INCREF(zero);
    return zero;
}

/* del by_size[bisect_left(by_size, (size, off))] for a block that is there */
static int
del_block(PyObject *by_size, PyObject *size, PyObject *off)
{
    PyObject *pair = PyTuple_Pack(2, size, off);
    if (pair == NULL)
        return -1;
    Py_ssize_t lo = 0, hi = PyList_GET_SIZE(by_size);
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        int lt = PyObject_RichCompareBool(PyList_GET_ITEM(by_size, mid), pair, Py_LT);
        if (lt < 0) {
            Py_DECREF(pair);
            return -1;
        }
        if (lt)
            lo = mid + 1;
        else
            hi = mid;
    }
    Py_DECREF(pair);
    if (lo == PyList_GET_SIZE(by_size)) {
        PyErr_SetString(PyExc_IndexError, "list assignment index out of range");
        return -1;
    }
    return PyList_SetSlice(by_size, lo, lo + 1, NULL);
}

/* d.pop(key, None) as a new reference (NULL with no error: absent) */
static PyObject *
dict_pop(PyObject *d, PyObject *key)
{
    PyObject *v = PyDict_GetItemWithError(d, key);
    if (v == NULL)
        return NULL;
    Py_INCREF(v);
    if (PyDict_DelItem(d, key) < 0) {
        Py_DECREF(v);
        return NULL;
    }
    return v;
}

/* Arena.release(offset, nbytes) (allocator/arena.py, the same steps on the same structures):
 * the block goes back, coalesced with free neighbours. FALLBACK when a structure is not what
 * Arena builds (nothing changed then). */
static PyObject *
arena_release(PyObject *arena, PyObject *offset, PyObject *nbytes)
{
    PyObject *by_size = SLOT(arena, off_ar_by_size), *free = SLOT(arena, off_ar_free);
    PyObject *ends = SLOT(arena, off_ar_ends), *used = SLOT(arena, off_ar_used);
    if (by_size == NULL || !PyList_CheckExact(by_size) || free == NULL || !PyDict_CheckExact(free)
        || ends == NULL || !PyDict_CheckExact(ends) || used == NULL || !PyLong_CheckExact(used)
        || !PyLong_CheckExact(offset) || !PyLong_CheckExact(nbytes))
        return FALLBACK;
    int o1 = 0, o2 = 0;
    long long off = PyLong_AsLongLongAndOverflow(offset, &o1);
    long long nb = PyLong_AsLongLongAndOverflow(nbytes, &o2);
    if (o1 || o2 || off > (LLONG_MAX >> 2) || nb > (LLONG_MAX >> 2) || nb < -(LLONG_MAX >> 2))
        return FALLBACK;
    long long size = (nb + align_mask) & ~align_mask;  /* Arena's footprint */
    PyObject *sizeo = PyLong_FromLongLong(size), *used1 = NULL, *endo = NULL, *starto = NULL;
    PyObject *nxt = NULL, *prev = NULL, *psize = NULL, *lenv = NULL, *pair = NULL, *t = NULL;
    if (sizeo == NULL || (used1 = PyNumber_Subtract(used, sizeo)) == NULL)
        goto fail;
    Py_SETREF(SLOT(arena, off_ar_used), used1);
    used1 = NULL;
    long long start = off, end = off + size;
    if ((endo = PyLong_FromLongLong(end)) == NULL)
        goto fail;
    nxt = dict_pop(free, endo);
    if (nxt == NULL && PyErr_Occurred())
        goto fail;
    if (nxt != NULL) {  /* coalesce with the next block */
        if ((t = PyNumber_Add(endo, nxt)) == NULL || PyDict_DelItem(ends, t) < 0
            || del_block(by_size, nxt, endo) < 0)
            goto fail;
        Py_CLEAR(t);
        int ov = 0;
        long long n = PyLong_CheckExact(nxt) ? PyLong_AsLongLongAndOverflow(nxt, &ov) : -1;
        if (n < 0 || ov) {
            PyErr_SetString(PyExc_TypeError, "allocator._fastpath: a free block size is not an int");
            goto fail;
        }
        end += n;
        Py_SETREF(endo, PyLong_FromLongLong(end));
        if (endo == NULL)
            goto fail;
    }
    PyObject *offk = offset;
    prev = dict_pop(ends, offk);
    if (prev == NULL && PyErr_Occurred())
        goto fail;
    if (prev != NULL) {  /* coalesce with the previous block */
        psize = PyDict_GetItemWithError(free, prev);
        if (psize == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetObject(PyExc_KeyError, prev);
            goto fail;
        }
        Py_INCREF(psize);
        if (PyDict_DelItem(free, prev) < 0 || del_block(by_size, psize, prev) < 0)
            goto fail;
        int ov = 0;
        start = PyLong_CheckExact(prev) ? PyLong_AsLongLongAndOverflow(prev, &ov) : -1;
        if (start < 0 || ov) {
            PyErr_SetString(PyExc_TypeError, "allocator._fastpath: a free block offset is not an int");
            goto fail;
        }
    }
    if ((starto = PyLong_FromLongLong(start)) == NULL
        || (lenv = PyLong_FromLongLong(end - start)) == NULL
        || PyDict_SetItem(free, starto, lenv) < 0 || PyDict_SetItem(ends, endo, starto) < 0
        || (pair = PyTuple_Pack(2, lenv, starto)) == NULL)
        goto fail;
    if (insort(by_size, pair) < 0)
        goto fail;
    Py_DECREF(sizeo);
    Py_DECREF(endo);
    Py_XDECREF(nxt);
    Py_XDECREF(prev);
    Py_XDECREF(psize);
    Py_DECREF(starto);
    Py_DECREF(lenv);
    Py_DECREF(pair);
    Py_RETURN_NONE;

fail:
    Py_XDECREF(sizeo);
    Py_XDECREF(used1);
    Py_XDECREF(endo);
    Py_XDECREF(starto);
    Py_XDECREF(nxt);
    Py_XDECREF(prev);
    Py_XDECREF(psize);
    Py_XDECREF(lenv);
    Py_XDECREF(pair);
    Py_XDECREF(t);
    return NULL;
}

/* place.release(offset, nbytes) as a callable of the two arguments (Pool._place_release): the
 * Arena's steps in C, ByteAccounting's ``used -= nbytes``, any other placement's method. */
/* PlaceRelease and AccessDescr hold one object reference, first after their header: one set of
 * GC functions (OneRef's) serves both. */
typedef struct {
    PyObject_HEAD
    PyObject *ref;
} OneRef;

static int
oneref_traverse(OneRef *self, visitproc visit, void *arg)
{
    Py_VISIT(self->ref);
    return 0;
}

static int
oneref_clear(OneRef *self)
{
    Py_CLEAR(self->ref);
    return 0;
}

static void
oneref_dealloc(OneRef *self)
{
    PyObject_GC_UnTrack(self);
    oneref_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

typedef struct {
    PyObject_HEAD
    PyObject *place;
    vectorcallfunc vectorcall;
} PlaceRelease;
_Static_assert(offsetof(PlaceRelease, place) == offsetof(OneRef, ref), "PlaceRelease is a OneRef");

static PyObject *
pr_vectorcall(PyObject *self_, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PlaceRelease *self = (PlaceRelease *)self_;
    PyObject *place = self->place;
    if (kwnames == NULL && PyVectorcall_NARGS(nargsf) == 2) {
        PyObject *r = FALLBACK;
        if (Py_TYPE(place) == arena_type) {
            r = arena_release(place, args[0], args[1]);
        } else if (Py_TYPE(place) == bytes_type && PyLong_CheckExact(args[1])) {
            PyObject *used = SLOT(place, off_ba_used);
            if (used != NULL && PyLong_CheckExact(used)) {
                PyObject *u1 = PyNumber_Subtract(used, args[1]);
                if (u1 == NULL)
                    return NULL;
                Py_SETREF(SLOT(place, off_ba_used), u1);
                Py_RETURN_NONE;
            }
        }
        if (r != FALLBACK)
            return r;
    }
    PyObject *meth = PyObject_GetAttr(place, s_release);
    if (meth == NULL)
        return NULL;
    PyObject *r = PyObject_Vectorcall(meth, args, PyVectorcall_NARGS(nargsf), kwnames);
    Py_DECREF(meth);
    return r;
}

static PyObject *
pr_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *place;
    if (!PyArg_ParseTuple(args, "O:PlaceRelease", &place))
        return NULL;
    PlaceRelease *self = (PlaceRelease *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = pr_vectorcall;
    Py_INCREF(place);
    self->place = place;
    return (PyObject *)self;
}

static PyTypeObject PlaceReleaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "allocator._fastpath.PlaceRelease",
    .tp_basicsize = sizeof(PlaceRelease),
    .tp_dealloc = (destructor)oneref_dealloc,
    .tp_vectorcall_offset = offsetof(PlaceRelease, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "PlaceRelease(place): place.release(offset, nbytes), the Arena's steps in C",
    .tp_traverse = (traverseproc)oneref_traverse,
    .tp_clear = (inquiry)oneref_clear,
    .tp_new = pr_new,
};

/* place.alloc(need): the two placements' own steps in C, any other placement's method */
static PyObject *
place_alloc(PyObject *place, PyObject *needo, long long need)
{
    PyObject *r = FALLBACK;
    if (Py_TYPE(place) == arena_type)
        r = arena_alloc(place, need);
    else if (Py_TYPE(place) == bytes_type)
        r = bytes_alloc(place, needo);
    return r != FALLBACK ? r : call_method(s_alloc, place, needo, NULL, NULL);
}

/* ---------------------------------------------------------------- FeatureTracker's hooks
 * A policies.features.FeatureTracker in a pool's policy slot (exactly that class: what the
 * environments put there) has its per-access hooks run here by the C hit and miss paths:
 * on_hit, on_miss, on_insert and on_evict as the same writes in the same order on the same
 * structures as the Python methods (tests/allocator/test_fastpath.py compares whole trackers
 * after the same workload). The rare cases call the Python methods at the same point: a key
 * without history or with a stale row (FeatureTracker._new_slot), counters due for
 * renormalisation (_renormalise), any attribute of an unexpected type (the whole hook). */
static PyTypeObject *tracker_type = NULL;
static Py_ssize_t tr_ncol, tr_count, tr_ring0, tr_ring, tr_e0, tr_col_insert, tr_col_create;
static Py_ssize_t tr_col_size, tr_col_kind;
static double tr_ih[3], tr_alpha, tr_renorm;
static double *tr_empty = NULL;  /* _EMPTY_ROW: a new slot's row before its first fields */
static PyObject *s_slot_map, *s_order, *s_V, *s_epoch, *s_miss_rate, *s_res, *s_res_pos,
    *s_res_rec, *s_res_slot, *s_move_to_end, *s_new_slot, *s_renormalise, *s_on_hit, *s_on_miss,
    *s_append, *s_free_slots, *s_next, *s_on_free;

/* set_tracker(FeatureTracker, ncol, count, ring0, ring, e0, insert, create, size, kind,
 * (ih0, ih1, ih2), alpha, renorm, empty_row): the class and its row layout (policies/features.py
 * registers them) */
static PyObject *
fp_set_tracker(PyObject *mod, PyObject *args)
{
    PyTypeObject *t;
    Py_ssize_t ncol, count, ring0, ring, e0, ins, cre, size, kind;
    double ih[3], alpha, renorm;
    PyObject *empty;
    if (!PyArg_ParseTuple(args, "O!nnnnnnnnn(ddd)ddO:set_tracker", &PyType_Type, &t, &ncol, &count,
                          &ring0, &ring, &e0, &ins, &cre, &size, &kind, &ih[0], &ih[1], &ih[2],
                          &alpha, &renorm, &empty))
        return NULL;
    if (ncol <= 0 || ring <= 0 || count < 0 || count >= ncol || ring0 < 0 || ring0 + ring > ncol
        || e0 < 0 || e0 + 3 > ncol || ins < 0 || ins >= ncol || cre < 0 || cre >= ncol
        || size < 0 || size >= ncol || kind < 0 || kind >= ncol) {
        PyErr_SetString(PyExc_ValueError, "set_tracker: a column lies outside the row");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(empty, "set_tracker: empty_row must be a sequence of floats");
    if (seq == NULL)
        return NULL;
    double *row = PyMem_Malloc((size_t)ncol * sizeof(double));
    if (row == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    if (PySequence_Fast_GET_SIZE(seq) != ncol) {
        PyErr_SetString(PyExc_ValueError, "set_tracker: empty_row must have ncol values");
        goto bad;
    }
    for (Py_ssize_t i = 0; i < ncol; i++) {
        row[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
        if (row[i] == -1.0 && PyErr_Occurred())
            goto bad;
    }
    Py_DECREF(seq);
    PyMem_Free(tr_empty);
    tr_empty = row;
    tr_col_size = size, tr_col_kind = kind;
    tr_ncol = ncol, tr_count = count, tr_ring0 = ring0, tr_ring = ring, tr_e0 = e0;
    tr_col_insert = ins, tr_col_create = cre, tr_alpha = alpha, tr_renorm = renorm;
    for (int i = 0; i < 3; i++)
        tr_ih[i] = ih[i];
    Py_INCREF(t);
    Py_XSETREF(tracker_type, t);
    Py_RETURN_NONE;
bad:
    Py_DECREF(seq);
    PyMem_Free(row);
    return NULL;
}

/* The tracker's attributes a hook reads, borrowed from its __dict__ (d, a new reference).
 * Returns 1, 0 when one is missing or of another type (nothing read: the Python method serves)
 * or -1 (an exception is set). */
typedef struct {
    PyObject *d, *slot, *order, *res, *res_pos, *res_rec, *res_slot, *miss_rate, *free_slots;
} Tracked;

static int
tr_open(PyObject *tracker, Tracked *t)
{
    memset(t, 0, sizeof(*t));
    t->d = PyObject_GenericGetDict(tracker, NULL);
    if (t->d == NULL)
        return -1;
    PyObject *d = t->d;
    t->slot = PyDict_GetItemWithError(d, s_slot_map);
    t->order = PyDict_GetItemWithError(d, s_order);
    t->res = PyDict_GetItemWithError(d, s_res);
    t->res_pos = PyDict_GetItemWithError(d, s_res_pos);
    t->res_rec = PyDict_GetItemWithError(d, s_res_rec);
    t->res_slot = PyDict_GetItemWithError(d, s_res_slot);
    t->miss_rate = PyDict_GetItemWithError(d, s_miss_rate);
    t->free_slots = PyDict_GetItemWithError(d, s_free_slots);
    if (PyErr_Occurred()) {
        Py_CLEAR(t->d);
        return -1;
    }
    if (t->slot == NULL || !PyDict_CheckExact(t->slot) || t->order == NULL
        || !PyODict_CheckExact(t->order) || t->res == NULL || !PyList_CheckExact(t->res)
        || t->res_pos == NULL || !PyDict_CheckExact(t->res_pos) || t->res_rec == NULL
        || !PyList_CheckExact(t->res_rec) || t->res_slot == NULL || t->miss_rate == NULL
        || !PyFloat_CheckExact(t->miss_rate) || t->free_slots == NULL
        || !PyList_CheckExact(t->free_slots)) {
        Py_CLEAR(t->d);
        return 0;
    }
    return 1;
}

/* The tracker's rows (its flat float64 view _V): a pointer kept with a buffer export while
 * _V stays the same object; n_out is the number of doubles. */
static double *
tr_rows(HitPath *self, PyObject *d, Py_ssize_t *n_out)
{
    PyObject *V = PyDict_GetItemWithError(d, s_V);
    if (V == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_AttributeError, "allocator._fastpath: the tracker has no _V");
        return NULL;
    }
    if (self->tr_buf.obj != V) {
        if (self->tr_buf.obj != NULL)
            PyBuffer_Release(&self->tr_buf);
        if (PyObject_GetBuffer(V, &self->tr_buf, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
            self->tr_buf.obj = NULL;
            return NULL;
        }
        if (self->tr_buf.itemsize != 8 || self->tr_buf.format == NULL
            || strcmp(self->tr_buf.format, "d") != 0) {
            PyBuffer_Release(&self->tr_buf);
            self->tr_buf.obj = NULL;
            PyErr_SetString(PyExc_TypeError, "allocator._fastpath: the tracker's _V is not float64");
            return NULL;
        }
    }
    *n_out = self->tr_buf.len / 8;
    return (double *)self->tr_buf.buf;
}

/* row s of the tracker's array, NULL with an exception when out of range */
static double *
tr_row(HitPath *self, PyObject *d, long long s)
{
    Py_ssize_t n;
    double *V = tr_rows(self, d, &n);
    if (V == NULL)
        return NULL;
    if (s < 0 || (s + 1) * (long long)tr_ncol > (long long)n) {
        PyErr_Format(PyExc_IndexError, "allocator._fastpath: tracker slot %lld out of range", s);
        return NULL;
    }
    return V + s * tr_ncol;
}

/* FeatureTracker._access(s, t): the counters renormalised first when due (the Python method),
 * then _access_kernel_py's writes into row s (pow as Python's ``2.0 ** y``). */
static int
tr_access(HitPath *self, PyObject *tracker, PyObject *d, long long s, long long t)
{
    PyObject *ep = PyDict_GetItemWithError(d, s_epoch);
    if (ep == NULL || !PyLong_CheckExact(ep)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "allocator._fastpath: the tracker's _epoch is not an int");
        return -1;
    }
    long long x = t - PyLong_AsLongLong(ep);
    if (PyErr_Occurred())
        return -1;
    if ((double)x > tr_renorm) {
        PyObject *to = PyLong_FromLongLong(t);
        PyObject *r = to != NULL ? call_method(s_renormalise, tracker, to, NULL, NULL) : NULL;
        Py_XDECREF(to);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
        x = 0;
    }
    double *row = tr_row(self, d, s);
    if (row == NULL)
        return -1;
    double c = row[tr_count];
    row[tr_ring0 + ((long long)c) % tr_ring] = (double)t;
    row[tr_count] = c + 1.0;
    for (int i = 0; i < 3; i++)
        row[tr_e0 + i] += pow(2.0, (double)x * tr_ih[i]);
    return 0;
}

/* the slot of key as a C integer: -1 when it has none, -2 when it is not a plain int */
static long long
tr_slot_of(Tracked *t, PyObject *key)
{
    PyObject *s = PyDict_GetItemWithError(t->slot, key);
    if (s == NULL)
        return PyErr_Occurred() ? -3 : -1;
    if (!PyLong_CheckExact(s))
        return -2;
    long long v = PyLong_AsLongLong(s);
    if (v < 0)
        return PyErr_Occurred() ? -3 : -2;
    return v;
}

/* the row of key when it is current for record o (created_tick matches), else -1 (a new slot
 * is due: FeatureTracker._new_slot); -2 with an exception */
static long long
tr_current_slot(HitPath *self, Tracked *t, PyObject *key, PyObject *o)
{
    long long s = tr_slot_of(t, key);
    if (s == -3)
        return -2;
    if (s < 0)
        return -1;
    PyObject *ct = SLOT(o, off_created);
    if (ct == NULL || !PyLong_CheckExact(ct))
        return -1;  /* the Python method compares (and raises) */
    double *row = tr_row(self, t->d, s);
    if (row == NULL)
        return -2;
    return row[tr_col_create] != PyLong_AsDouble(ct) ? -1 : s;
}

/* FeatureTracker._new_slot(view, key) at tick t for record o: the key's slot (its own, a freed
 * one, or the next), its row reset; the Python method where the rows must grow. The slot, or -1
 * with an exception. */
static long long
tr_new_slot(HitPath *self, PyObject *tracker, Tracked *tk, PyObject *view, PyObject *key,
            PyObject *o, long long t)
{
    PyObject *ct = SLOT(o, off_created), *osz = SLOT(o, off_size), *okd = SLOT(o, off_kind);
    PyObject *nx = PyDict_GetItemWithError(tk->d, s_next);
    Py_ssize_t n;
    double *V = tr_rows(self, tk->d, &n);
    if (V == NULL)
        return -1;
    long long s = tr_slot_of(tk, key), next = nx != NULL && PyLong_CheckExact(nx) ? PyLong_AsLongLong(nx) : -1;
    if (s == -3 || PyErr_Occurred())
        return -1;
    if (tr_empty == NULL || ct == NULL || !PyLong_CheckExact(ct) || osz == NULL || !PyLong_CheckExact(osz)
        || okd == NULL || !PyLong_CheckExact(okd) || s == -2 || next < 0
        || (s == -1 && PyList_GET_SIZE(tk->free_slots) == 0 && next >= n / tr_ncol))
        goto python;  /* the rows grow (or something unusual): the Python method */
    if (s == -1) {
        PyObject *so;
        Py_ssize_t nf = PyList_GET_SIZE(tk->free_slots);
        if (nf > 0) {
            so = PyList_GET_ITEM(tk->free_slots, nf - 1);
            if (!PyLong_CheckExact(so))
                goto python;
            s = PyLong_AsLongLong(so);
            if (s < 0 || (s + 1) * (long long)tr_ncol > (long long)n) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_IndexError, "allocator._fastpath: a free slot out of range");
                return -1;
            }
            Py_INCREF(so);
            if (PyList_SetSlice(tk->free_slots, nf - 1, nf, NULL) < 0) {
                Py_DECREF(so);
                return -1;
            }
        } else {
            s = next;
            PyObject *n1 = PyLong_FromLongLong(next + 1);
            so = n1 != NULL ? PyLong_FromLongLong(s) : NULL;
            if (so == NULL || PyDict_SetItem(tk->d, s_next, n1) < 0) {
                Py_XDECREF(n1);
                Py_XDECREF(so);
                return -1;
            }
            Py_DECREF(n1);
        }
        int err = PyDict_SetItem(tk->slot, key, so);
        Py_DECREF(so);
        if (err < 0)
            return -1;
    }
    double *row = V + s * tr_ncol;
    memcpy(row, tr_empty, (size_t)tr_ncol * sizeof(double));
    row[tr_col_insert] = (double)t;
    row[tr_col_create] = PyLong_AsDouble(ct);
    row[tr_col_size] = PyLong_AsDouble(osz);
    row[tr_col_kind] = PyLong_AsDouble(okd);
    return PyErr_Occurred() ? -1 : s;
python:;
    PyObject *r = call_method(s_new_slot, tracker, view, key, NULL);
    if (r == NULL)
        return -1;
    s = PyLong_AsLongLong(r);
    Py_DECREF(r);
    if (s < 0 && !PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "allocator._fastpath: _new_slot returned a negative slot");
    return s < 0 ? -1 : s;
}

static int
tr_move_to_end(PyObject *order, PyObject *key)
{
    PyObject *argv[2] = {order, key};
    PyObject *r = PyObject_VectorcallMethod(s_move_to_end, argv, 2, NULL);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* FeatureTracker.on_hit(view, key) at tick t */
static int
tr_hit(HitPath *self, PyObject *tracker, PyObject *view, PyObject *key, long long t)
{
    Tracked tk;
    int ok = tr_open(tracker, &tk);
    if (ok < 0)
        return -1;
    long long s = ok ? tr_slot_of(&tk, key) : -1;
    if (s == -3) {
        Py_DECREF(tk.d);
        return -1;
    }
    if (s < 0) {  /* not usual: the Python method (nothing written yet) */
        Py_XDECREF(tk.d);
        PyObject *r = call_method(s_on_hit, tracker, view, key, NULL);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    int ret = -1;
    PyObject *mr = PyFloat_FromDouble(PyFloat_AS_DOUBLE(tk.miss_rate) * (1.0 - tr_alpha));
    if (mr == NULL || PyDict_SetItem(tk.d, s_miss_rate, mr) < 0)
        goto done;
    if (tr_move_to_end(tk.order, key) < 0)
        goto done;
    ret = tr_access(self, tracker, tk.d, s, t);
done:
    Py_XDECREF(mr);
    Py_DECREF(tk.d);
    return ret;
}

/* FeatureTracker.on_miss(view, key) at tick t, o the key's record */
static int
tr_miss(HitPath *self, PyObject *tracker, PyObject *view, PyObject *key, PyObject *o, long long t)
{
    Tracked tk;
    int ok = tr_open(tracker, &tk);
    if (ok <= 0) {
        if (ok < 0)
            return -1;
        PyObject *r = call_method(s_on_miss, tracker, view, key, NULL);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    int ret = -1;
    double m0 = PyFloat_AS_DOUBLE(tk.miss_rate);
    PyObject *mr = PyFloat_FromDouble(m0 + tr_alpha * (1.0 - m0));
    if (mr == NULL || PyDict_SetItem(tk.d, s_miss_rate, mr) < 0)
        goto done;
    long long s = tr_current_slot(self, &tk, key, o);
    if (s == -2)
        goto done;
    if (s < 0 && (s = tr_new_slot(self, tracker, &tk, view, key, o, t)) < 0)
        goto done;
    ret = tr_access(self, tracker, tk.d, s, t);
done:
    Py_XDECREF(mr);
    Py_DECREF(tk.d);
    return ret;
}

/* FeatureTracker.on_insert(view, key) at tick t, o the key's record (with _add_resident) */
static int
tr_insert(HitPath *self, PyObject *tracker, PyObject *view, PyObject *key, PyObject *o, long long t)
{
    Tracked tk;
    int ok = tr_open(tracker, &tk);
    if (ok <= 0) {
        if (ok < 0)
            return -1;
        PyObject *r = call_method(s_on_insert, tracker, view, key, NULL);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    int ret = -1;
    PyObject *so = NULL, *n = NULL;
    long long s = tr_current_slot(self, &tk, key, o);
    if (s == -2)
        goto done;
    if (s < 0) {
        if ((s = tr_new_slot(self, tracker, &tk, view, key, o, t)) < 0)
            goto done;
        Py_DECREF(tk.d);  /* Python ran: read the attributes again */
        ok = tr_open(tracker, &tk);
        if (ok <= 0) {
            if (ok == 0)
                PyErr_SetString(PyExc_TypeError, "allocator._fastpath: _new_slot changed the tracker's attributes");
            return -1;
        }
    }
    double *row = tr_row(self, tk.d, s);
    if (row == NULL)
        goto done;
    row[tr_col_insert] = (double)t;
    so = PyLong_FromLongLong(s);
    if (so == NULL)
        goto done;
    /* _add_resident(key, o, s) */
    PyObject *i = PyDict_GetItemWithError(tk.res_pos, key);
    if (i != NULL) {
        Py_ssize_t ii = PyLong_AsSsize_t(i);
        if ((ii == -1 && PyErr_Occurred()) || tr_move_to_end(tk.order, key) < 0)
            goto done;
        if (ii < 0 || ii >= PyList_GET_SIZE(tk.res_rec)) {
            PyErr_SetString(PyExc_IndexError, "allocator._fastpath: tracker _res_pos out of range");
            goto done;
        }
        Py_INCREF(o);
        PyList_SetItem(tk.res_rec, ii, o);
        if (PySequence_SetItem(tk.res_slot, ii, so) < 0)
            goto done;
        ret = 0;
        goto done;
    }
    if (PyErr_Occurred())
        goto done;
    n = PyLong_FromSsize_t(PyList_GET_SIZE(tk.res));
    if (n == NULL || PyODict_SetItem(tk.order, key, Py_None) < 0
        || PyDict_SetItem(tk.res_pos, key, n) < 0 || PyList_Append(tk.res, key) < 0
        || PyList_Append(tk.res_rec, o) < 0)
        goto done;
    PyObject *r = call_method(s_append, tk.res_slot, so, NULL, NULL);
    if (r == NULL)
        goto done;
    Py_DECREF(r);
    ret = 0;
done:
    Py_XDECREF(so);
    Py_XDECREF(n);
    Py_DECREF(tk.d);
    return ret;
}

/* FeatureTracker._drop_resident(key) on an opened tracker: 0 or -1 */
static int
tr_drop(Tracked *tk, PyObject *key)
{
    int ret = -1;
    PyObject *i = NULL, *last = NULL, *rec = NULL, *slot = NULL;
    int present = PyDict_Contains(tk->order, key);
    if (present <= 0)
        return present;
    if (PyODict_DelItem(tk->order, key) < 0)
        return -1;
    i = PyDict_GetItemWithError(tk->res_pos, key);
    if (i == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_KeyError, key);
        return -1;
    }
    Py_INCREF(i);
    Py_ssize_t n = PyList_GET_SIZE(tk->res), ns = PySequence_Size(tk->res_slot);
    if (PyDict_DelItem(tk->res_pos, key) < 0 || ns < 0)
        goto done;
    if (n == 0 || PyList_GET_SIZE(tk->res_rec) != n || ns != n) {
        PyErr_SetString(PyExc_IndexError, "allocator._fastpath: the tracker's resident lists differ in length");
        goto done;
    }
    last = PyList_GET_ITEM(tk->res, n - 1);
    rec = PyList_GET_ITEM(tk->res_rec, n - 1);
    Py_INCREF(last);
    Py_INCREF(rec);
    slot = PySequence_GetItem(tk->res_slot, n - 1);
    if (slot == NULL || PyList_SetSlice(tk->res, n - 1, n, NULL) < 0
        || PyList_SetSlice(tk->res_rec, n - 1, n, NULL) < 0 || PySequence_DelItem(tk->res_slot, n - 1) < 0)
        goto done;
    int differ = PyObject_RichCompareBool(last, key, Py_NE);
    if (differ < 0)
        goto done;
    if (differ) {
        Py_ssize_t ii = PyLong_AsSsize_t(i);
        if (ii == -1 && PyErr_Occurred())
            goto done;
        if (ii < 0 || ii >= n - 1) {
            PyErr_SetString(PyExc_IndexError, "allocator._fastpath: tracker _res_pos out of range");
            goto done;
        }
        Py_INCREF(last);
        PyList_SetItem(tk->res, ii, last);
        Py_INCREF(rec);
        PyList_SetItem(tk->res_rec, ii, rec);
        if (PySequence_SetItem(tk->res_slot, ii, slot) < 0 || PyDict_SetItem(tk->res_pos, last, i) < 0)
            goto done;
    }
    ret = 0;
done:
    Py_XDECREF(i);
    Py_XDECREF(last);
    Py_XDECREF(rec);
    Py_XDECREF(slot);
    return ret;
}

/* FeatureTracker.on_evict(view, key) (free: on_free, which also gives the key's slot back) */
static int
tr_evict(PyObject *tracker, PyObject *view, PyObject *key, int free)
{
    Tracked tk;
    int ok = tr_open(tracker, &tk);
    if (ok <= 0) {
        if (ok < 0)
            return -1;
        PyObject *r = call_method(free ? s_on_free : s_on_evict, tracker, view, key, NULL);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    int ret = tr_drop(&tk, key);
    if (ret == 0 && free) {  /* s = _slot.pop(key, None); if s is not None: _free_slots.append(s) */
        PyObject *s = PyDict_GetItemWithError(tk.slot, key);
        if (s != NULL) {
            Py_INCREF(s);
            ret = PyDict_DelItem(tk.slot, key) < 0 || PyList_Append(tk.free_slots, s) < 0 ? -1 : 0;
            Py_DECREF(s);
        } else if (PyErr_Occurred()) {
            ret = -1;
        }
    }
    Py_DECREF(tk.d);
    return ret;
}

/* Pool._evict(victim) for a victim whose block can go back at once, on a pool without a hook or
 * backend (the miss path's configuration): the same effects in the same order. A dirty victim's
 * write-back is instant (copies take no time): Pool._copy_out's counters, then the block back. 
 * Returns 1 (done), 0 (nothing written: call Pool._evict, which also raises for a bad victim)
 * or -1 (an exception is set). */
static int
evict_plain(HitPath *self, PyObject *victim, PyObject *stats, PyObject *policy, PyObject *view,
            PyObject *cost)
{
    PyObject *pool = self->pool;
    if (!self->miss || !PyLong_CheckExact(victim) || SLOT(pool, off_pool_hook) != Py_None)
        return 0;
    PyObject *o = PyDict_GetItemWithError(self->objs, victim);
    if (o == NULL) {
        PyErr_Clear();
        return 0;
    }
    PyObject *dirty = SLOT(o, off_dirty);
    if (Py_TYPE(o) != info_type || (dirty != Py_False && dirty != Py_True))
        return 0;
    PyObject *wb1 = NULL, *d2h1 = NULL;  /* a dirty victim's counters */
    if (dirty == Py_True) {
        PyObject *wb = SLOT(stats, off_writebacks), *d2h = SLOT(stats, off_bytes_d2h);
        PyObject *osz = SLOT(o, off_size);
        if (SLOT(cost, off_cost_instant) != Py_True || wb == NULL || !PyLong_CheckExact(wb)
            || d2h == NULL || !PyLong_CheckExact(d2h) || osz == NULL || !PyLong_CheckExact(osz))
            return 0;
    }
    PyObject *pref = SLOT(o, off_prefetched), *release = SLOT(pool, off_pool_place_release);
    PyObject *v[] = {SLOT(o, off_state), SLOT(o, off_pins), SLOT(o, off_busy_until),
                     SLOT(o, off_offset), SLOT(o, off_nbytes), SLOT(cost, off_cost_now),
                     SLOT(stats, off_evictions), SLOT(pool, off_pool_n_evictable),
                     SLOT(stats, off_useless), SLOT(o, off_key)};
    if ((pref != Py_True && pref != Py_False) || release == NULL
        || !exact_ints(v, (int)(sizeof(v) / sizeof(v[0])))
        || PyObject_IsTrue(v[0]) || PyObject_IsTrue(v[1])  /* DEVICE (0) and unpinned */
        || PyObject_RichCompareBool(v[2], v[5], Py_LE) != 1)  /* its block is free to go */
        return 0;
    PyObject *e1 = ADD(v[6], one), *n1 = PyNumber_Subtract(v[7], one);
    PyObject *u1 = pref == Py_True ? ADD(v[8], one) : NULL;
    if (dirty == Py_True) {
        wb1 = ADD(SLOT(stats, off_writebacks), one);
        d2h1 = ADD(SLOT(stats, off_bytes_d2h), SLOT(o, off_size));
    }
    if (e1 == NULL || n1 == NULL || (pref == Py_True && u1 == NULL)
        || (dirty == Py_True && (wb1 == NULL || d2h1 == NULL))) {
        Py_XDECREF(e1);
        Py_XDECREF(n1);
        Py_XDECREF(u1);
        Py_XDECREF(wb1);
        Py_XDECREF(d2h1);
        return -1;
    }
    Py_INCREF(o);
    Py_SETREF(SLOT(stats, off_evictions), e1);
    Py_SETREF(SLOT(pool, off_pool_n_evictable), n1);
    if (u1 != NULL) {
        Py_SETREF(SLOT(stats, off_useless), u1);
        Py_INCREF(Py_False);
        Py_SETREF(SLOT(o, off_prefetched), Py_False);
    }
    int ret = -1;
    PyObject *key = SLOT(o, off_key), *off = NULL, *nb = NULL, *r;
    Py_XINCREF(key);
    if (key != NULL && self->tracker != NULL)
        r = tr_evict(self->tracker, view, key, 0) < 0 ? NULL : Py_NewRef(Py_None);
    else
        r = key != NULL ? call_method(s_on_evict, policy, view, key, NULL) : NULL;
    Py_XDECREF(key);
    if (r == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_AttributeError, "allocator._fastpath: the victim's key was deleted");
        goto done;
    }
    Py_DECREF(r);
    if (wb1 != NULL) {  /* writebacks += 1; _copy_out: busy_until = max(now, busy_until) = now */
        Py_SETREF(SLOT(stats, off_writebacks), wb1);
        wb1 = NULL;
        PyObject *now0 = SLOT(cost, off_cost_now);
        Py_XINCREF(now0);
        Py_XSETREF(SLOT(o, off_busy_until), now0);
        Py_SETREF(SLOT(stats, off_bytes_d2h), d2h1);
        d2h1 = NULL;
        Py_INCREF(Py_False);
        Py_XSETREF(SLOT(o, off_dirty), Py_False);
    }
    Py_INCREF(one);
    Py_XSETREF(SLOT(o, off_state), one);  /* HOST */
    off = SLOT(o, off_offset);
    nb = SLOT(o, off_nbytes);
    if (off == NULL || nb == NULL) {
        PyErr_SetString(PyExc_AttributeError, "allocator._fastpath: the victim's block was deleted");
        off = nb = NULL;
        goto done;
    }
    /* the slots' references move to off / nb */
    SLOT(o, off_offset) = PyLong_FromLong(-1);
    Py_INCREF(zero);
    SLOT(o, off_nbytes) = zero;
    if (SLOT(o, off_offset) == NULL)
        goto done;
    PyObject *busy = SLOT(o, off_busy_until), *now = SLOT(cost, off_cost_now);
    if (busy == NULL || now == NULL || PyObject_RichCompareBool(busy, now, Py_LE) != 1) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError,
                            "allocator._fastpath: a copy out of the victim started during on_evict");
        goto done;
    }
    PyObject *argv[2] = {off, nb};
    r = PyObject_Vectorcall(SLOT(pool, off_pool_place_release), argv, 2, NULL);
    if (r == NULL)
        goto done;
    Py_DECREF(r);
    ret = 1;
done:
    Py_XDECREF(off);
    Py_XDECREF(nb);
    Py_XDECREF(wb1);
    Py_XDECREF(d2h1);
    Py_DECREF(o);
    return ret;
}

/* The plain miss of Pool.access for an object in host memory (o), or a new one (o NULL):
 * _begin's counters (and the new ObjectInfo), room made by the policy (the placement's alloc,
 * policy.victim, Pool._evict, Pool._room_step: the Python methods themselves but for the
 * placements' alloc), _insert's fetch with instant copies and no backend (or a first write's
 * allocation), _end. Configured only for pools without a backend, with instant copies and a
 * policy without on_miss / admit (or the FeatureTracker, whose on_miss runs here: tr_miss)
 * (self->miss); each call also needs nothing in flight and the object's last copy out
 * complete. Takes the lock with acquire(False) (Python code runs inside).
 *
 * In three phases over a Miss: miss_begin (checks, lock, _begin), miss_room (victims until
 * the block fits) and miss_finish (_insert, _end). With ``suspend`` (HitPath.step, the
 * environments' loop) the miss stops where a victim is needed instead of asking the policy:
 * the Miss waits in self->pend with the lock held, as Pool.steps' generator waits at its
 * EvictionRequest, until HitPath.resume(victim) continues it or HitPath.abandon() undoes it. */

static PyObject SUSPEND_OBJ;  /* miss_room: "a victim is needed" */
#define SUSPENDED (&SUSPEND_OBJ)

static void
miss_drop(Miss *m)
{
    Py_CLEAR(m->o);
    Py_CLEAR(m->key);
    Py_CLEAR(m->size);
    Py_CLEAR(m->needo);
    Py_CLEAR(m->old_size);
    Py_CLEAR(m->compute);
    Py_CLEAR(m->kind);
    Py_CLEAR(m->place);
    Py_CLEAR(m->policy);
    Py_CLEAR(m->view);
    Py_CLEAR(m->stats);
    Py_CLEAR(m->cost);
}

/* the references dropped and the lock released; returns ret (-1 if the release failed) */
static int
miss_end(HitPath *self, Miss *m, int ret)
{
    miss_drop(m);
    if (release_lock(self) < 0)
        return -1;
    return ret;
}

/* No room could be made: the event did not happen (Pool._undo_miss), the exception kept. */
static void
miss_undo(HitPath *self, Miss *m)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc = PyErr_GetRaisedException();
#else
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
#endif
    PyObject *r = call_method(s_undo_miss, self->pool, m->o, m->size, m->old_size);
    if (r != NULL) {
        Py_DECREF(r);
#if PY_VERSION_HEX >= 0x030C0000
        PyErr_SetRaisedException(exc);
#else
        PyErr_Restore(et, ev, tb);
#endif
    } else {
#if PY_VERSION_HEX >= 0x030C0000
        Py_XDECREF(exc);
#else
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
#endif
    }
}

/* Returns 1 (begun: the lock held, m filled), 0 (nothing written, m empty: the Python method
 * takes the call) or -1 (an exception is set; m empty, the lock released). */
static int
miss_begin(HitPath *self, Miss *m, PyObject *o, PyObject *key, PyObject *size, int w,
           PyObject *compute, int c, PyObject *kind)
{
    PyObject *pool = self->pool, *r;
    int created = o == NULL;  /* the first access of ``key``: the object is created here */
    int overflow = 0;
    memset(m, 0, sizeof(*m));
    if (!PyLong_CheckExact(size))
        return 0;
    long long sz = PyLong_AsLongLongAndOverflow(size, &overflow);
    if (overflow || sz <= 0 || sz > (LLONG_MAX >> 2))
        return 0;  /* the Python method raises (or handles) it */
    PyObject *landing = SLOT(pool, off_pool_landing), *releases = SLOT(pool, off_pool_releases);
    PyObject *cost = SLOT(pool, off_pool_cost), *stats = SLOT(pool, off_pool_stats);
    PyObject *place = SLOT(pool, off_pool_place), *policy = SLOT(pool, off_pool_policy);
    PyObject *view = SLOT(pool, off_pool_view);
    if (landing == NULL || !PyList_CheckExact(landing) || PyList_GET_SIZE(landing) != 0
        || releases == NULL || !PyList_CheckExact(releases) || PyList_GET_SIZE(releases) != 0
        || cost == NULL || Py_TYPE(cost) != cost_type || stats == NULL || Py_TYPE(stats) != stats_type
        || place == NULL || policy == NULL || view == NULL)
        return 0;
    PyObject *v[] = {SLOT(pool, off_pool_tick), SLOT(pool, off_pool_fp_mask),
                     SLOT(pool, off_pool_n_evictable), SLOT(cost, off_cost_now),
                     SLOT(stats, off_accesses), SLOT(stats, off_misses), SLOT(stats, off_byte_misses),
                     SLOT(stats, off_bytes_h2d), SLOT(stats, off_peak), SLOT(stats, off_allocations),
                     created ? zero : SLOT(o, off_busy_until), created ? zero : SLOT(o, off_size),
                     created ? zero : SLOT(o, off_n_access)};
    if (!exact_ints(v, (int)(sizeof(v) / sizeof(v[0]))))
        return 0;
    long long mask = PyLong_AsLongLongAndOverflow(v[1], &overflow);
    if (overflow || mask < 0 || mask > (1 << 20))
        return 0;
    long long need = (sz + mask) & ~mask;
    if (!created && PyObject_RichCompareBool(v[10], v[3], Py_LE) != 1)  /* exact ints */
        return 0;  /* a write-back of this object still in flight: the Python method waits */

    PyObject *argv[2] = {NULL, Py_False};
    r = PyObject_Vectorcall(self->acquire, argv + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (r == NULL)
        return -1;
    int locked = r == Py_True;
    Py_DECREF(r);
    if (!locked)
        return 0;
    /* held across the Python calls to come, as access() holds its locals (Pool never rebinds
     * them; holding them keeps this code safe if a callback did) */
    Py_INCREF(place);
    m->place = place;
    Py_INCREF(policy);
    m->policy = policy;
    Py_INCREF(view);
    m->view = view;
    Py_INCREF(stats);
    m->stats = stats;
    Py_INCREF(cost);
    m->cost = cost;
    Py_INCREF(key);
    m->key = key;
    Py_INCREF(size);
    m->size = size;
    Py_XINCREF(compute);
    m->compute = compute;
    Py_INCREF(kind);
    m->kind = kind;
    m->w = w, m->c = c, m->created = created, m->need = need;

    /* capacity of the placement (a slot of Arena / ByteAccounting) */
    PyObject *capo = PyObject_GetAttr(place, s_capacity);
    long long cap = -1;
    if (capo != NULL && PyLong_CheckExact(capo))
        cap = PyLong_AsLongLongAndOverflow(capo, &overflow);
    Py_XDECREF(capo);
    if (cap < 0 || overflow || need > cap)  /* oversize: the Python method raises or bypasses */
        return miss_end(self, m, PyErr_Occurred() ? -1 : 0);
    m->cap = cap;

    /* _begin: the miss is counted; the object takes the request's size */
    PyObject *t1 = ADD(v[0], one), *a1 = ADD(v[4], one), *m1 = ADD(v[5], one);
    PyObject *b1 = ADD(v[6], size);
    m->needo = PyLong_FromLongLong(need);
    if (t1 == NULL || a1 == NULL || m1 == NULL || b1 == NULL || m->needo == NULL) {
        Py_XDECREF(t1);
        Py_XDECREF(a1);
        Py_XDECREF(m1);
        Py_XDECREF(b1);
        return miss_end(self, m, -1);
    }
    Py_SETREF(SLOT(pool, off_pool_tick), t1);
    Py_SETREF(SLOT(stats, off_accesses), a1);
    Py_SETREF(SLOT(stats, off_misses), m1);
    Py_SETREF(SLOT(stats, off_byte_misses), b1);
    if (created) {  /* ObjectInfo(key, size, kind, _tick); _objs[key] = o */
        PyObject *cargs[4] = {key, size, kind, SLOT(pool, off_pool_tick)};
        o = PyObject_Vectorcall((PyObject *)info_type, cargs, 4, NULL);
        if (o == NULL || PyDict_SetItem(self->objs, key, o) < 0) {
            Py_XDECREF(o);
            return miss_end(self, m, -1);  /* as _begin: the counters stand */
        }
        m->o = o;
        m->old_size = PyLong_FromLong(-1);
        if (m->old_size == NULL)
            return miss_end(self, m, -1);
    } else {
        Py_INCREF(o);
        m->o = o;
        m->old_size = v[11];  /* the slot's reference moves here */
        Py_INCREF(size);
        SLOT(o, off_size) = size;
    }
    if (self->tracker != NULL  /* _begin's on_miss (the FeatureTracker's) */
        && tr_miss(self, self->tracker, view, key, o, PyLong_AsLongLong(SLOT(pool, off_pool_tick))) < 0)
        return miss_end(self, m, -1);
    return 1;
}

/* Pool._evict(victim): evict_plain, else the Python method (which also raises for a bad one) */
static int
miss_evict(HitPath *self, Miss *m, PyObject *victim)
{
    int ev = evict_plain(self, victim, m->stats, m->policy, m->view, m->cost);
    if (ev == 0) {
        PyObject *r = call_method(s_evict, self->pool, victim, NULL, NULL);
        ev = r == NULL ? -1 : 1;
        Py_XDECREF(r);
    }
    return ev < 0 ? -1 : 0;
}

/* Room for the miss: place.alloc, else evict until it fits, the victims from the policy (or,
 * with suspend, SUSPENDED where one is needed). ``victim`` (resume): evict it first. Returns
 * the block's offset (a new reference), SUSPENDED, or NULL (an exception is set: the miss is
 * undone, as Pool._access_steps undoes it). */
/* cost.compute(ns): CostModel's two additions (now, compute_ns) in C, else the method. 0 or -1. */
static int
cost_compute(PyObject *cost, PyObject *ns)
{
    PyObject *now, *cns;
    if (Py_TYPE(cost) == cost_type && PyLong_CheckExact(ns) && (now = SLOT(cost, off_cost_now)) != NULL
        && PyLong_CheckExact(now) && (cns = SLOT(cost, off_cost_compute)) != NULL && PyLong_CheckExact(cns)) {
        PyObject *n1 = ADD(now, ns), *c1 = n1 != NULL ? ADD(cns, ns) : NULL;
        if (c1 == NULL) {
            Py_XDECREF(n1);
            return -1;
        }
        Py_SETREF(SLOT(cost, off_cost_now), n1);
        Py_SETREF(SLOT(cost, off_cost_compute), c1);
        return 0;
    }
    PyObject *r = call_method(s_compute, cost, ns, NULL, NULL);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* Pool._room_step(size, need, False) where it answers -1 at once: nothing waits to be
 * released and something is evictable (a new reference; NULL without an error: ask it) */
static PyObject *
room_plain(PyObject *pool)
{
    PyObject *nev = SLOT(pool, off_pool_n_evictable), *rel = SLOT(pool, off_pool_releases);
    if (nev != NULL && PyLong_CheckExact(nev) && PyObject_IsTrue(nev) == 1 && rel != NULL
        && PyList_CheckExact(rel) && PyList_GET_SIZE(rel) == 0)
        return PyLong_FromLong(-1);
    return NULL;
}

/* place.alloc(need), else Pool._room_step(size, need, False): a new reference or NULL */
static PyObject *
miss_alloc(HitPath *self, Miss *m)
{
    PyObject *r = place_alloc(m->place, m->needo, m->need);
    if (r == NULL || r != Py_None)
        return r;
    Py_DECREF(r);
    r = room_plain(self->pool);
    if (r != NULL || PyErr_Occurred())
        return r;
    return call_method(s_room_step, self->pool, m->size, m->needo, Py_False);
}

static PyObject *
miss_room(HitPath *self, Miss *m, PyObject *victim, int suspend)
{
    PyObject *offset = NULL, *r, *pool = self->pool;
    int overflow = 0;
    if (victim != NULL) {  /* resume */
        if (miss_evict(self, m, victim) < 0)
            goto room_error;
        offset = miss_alloc(self, m);
    } else {
        PyObject *usedo = PyObject_GetAttr(m->place, s_used);
        if (usedo == NULL)
            goto room_error;
        long long used = PyLong_CheckExact(usedo) ? PyLong_AsLongLongAndOverflow(usedo, &overflow) : -1;
        Py_DECREF(usedo);
        if (used < 0 || overflow || m->cap - used >= m->need) {
            r = place_alloc(m->place, m->needo, m->need);
            if (r == NULL)
                goto room_error;
            if (r == Py_None)
                Py_DECREF(r);
            else
                offset = r;
        }
        if (offset == NULL) {
            offset = room_plain(pool);
            if (offset == NULL && !PyErr_Occurred())
                offset = call_method(s_room_step, pool, m->size, m->needo, Py_False);
        }
    }
    for (;;) {
        if (offset == NULL)
            goto room_error;
        overflow = 0;
        long long off = PyLong_CheckExact(offset) ? PyLong_AsLongLongAndOverflow(offset, &overflow) : 0;
        if (off >= 0 || overflow)
            return offset;
        Py_CLEAR(offset);
        if (suspend)
            return SUSPENDED;
        PyObject *v = call_method(s_victim, m->policy, m->view, NULL, NULL);
        if (v == NULL)
            goto room_error;
        int ev = miss_evict(self, m, v);
        Py_DECREF(v);
        if (ev < 0)
            goto room_error;
        offset = miss_alloc(self, m);
    }
room_error:
    miss_undo(self, m);
    return NULL;
}

/* _insert (the object lands in its block: a fetch with instant copies and no backend, or a
 * first write's allocation) and _end. Takes the reference to offset. Returns 1 or -1. */
static int
miss_finish(HitPath *self, Miss *m, PyObject *offset)
{
    PyObject *pool = self->pool, *o = m->o, *stats = m->stats, *cost = m->cost, *r;
    Py_XSETREF(SLOT(o, off_offset), offset);
    Py_INCREF(m->needo);
    Py_XSETREF(SLOT(o, off_nbytes), m->needo);
    PyObject *usedo = PyObject_GetAttr(m->place, s_used);
    if (usedo == NULL)
        return -1;
    PyObject *peak = SLOT(stats, off_peak);
    int gt = peak == NULL ? 1 : PyObject_RichCompareBool(usedo, peak, Py_GT);
    if (gt < 0) {
        Py_DECREF(usedo);
        return -1;
    }
    if (gt)
        Py_XSETREF(SLOT(stats, off_peak), usedo);
    else
        Py_DECREF(usedo);
    if (m->created && m->w) {  /* a first write allocates without a copy */
        PyObject *al = SLOT(stats, off_allocations);
        PyObject *al1 = al != NULL ? ADD(al, one) : NULL;
        if (al1 == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_AttributeError, "allocator._fastpath: allocations was deleted");
            return -1;
        }
        Py_XSETREF(SLOT(stats, off_allocations), al1);
        goto landed;
    }
    PyObject *now = SLOT(cost, off_cost_now), *busy = SLOT(o, off_busy_until);
    int later = (now && busy) ? PyObject_RichCompareBool(busy, now, Py_GT) : -1;
    if (later < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "allocator._fastpath: pool clock unset");
        return -1;
    }
    PyObject *done = later ? busy : now;
    Py_INCREF(done);
    PyObject *h2d = SLOT(stats, off_bytes_h2d), *osz = SLOT(o, off_size);
    PyObject *h1 = (h2d && osz) ? ADD(h2d, osz) : NULL;
    if (h1 == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_AttributeError, "allocator._fastpath: a counter was deleted");
        Py_DECREF(done);
        return -1;
    }
    Py_XSETREF(SLOT(stats, off_bytes_h2d), h1);
    Py_XSETREF(SLOT(o, off_ready_ns), done);
    if (later) {  /* cost.wait_until(done), as _insert */
        r = call_method(s_wait_until, cost, done, NULL, NULL);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }
landed:
    Py_INCREF(zero);
    Py_XSETREF(SLOT(o, off_state), zero);  /* DEVICE */
    PyObject *nev0 = SLOT(pool, off_pool_n_evictable);
    PyObject *nev1 = nev0 != NULL ? ADD(nev0, one) : NULL;
    if (nev1 == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_AttributeError, "allocator._fastpath: _n_evictable was deleted");
        return -1;
    }
    Py_XSETREF(SLOT(pool, off_pool_n_evictable), nev1);
    PyObject *tick = SLOT(pool, off_pool_tick);
    if (self->tracker != NULL) {
        if (tick == NULL || !PyLong_CheckExact(tick)) {
            PyErr_SetString(PyExc_TypeError, "allocator._fastpath: the pool's tick is not an int");
            return -1;
        }
        if (tr_insert(self, self->tracker, m->view, m->key, o, PyLong_AsLongLong(tick)) < 0)
            return -1;
    } else {
        r = call_method(s_on_insert, m->policy, m->view, m->key, NULL);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }

    /* _end */
    PyObject *n0 = SLOT(o, off_n_access);
    PyObject *n1 = n0 != NULL ? ADD(n0, one) : NULL;
    if (n1 == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_AttributeError, "allocator._fastpath: n_access was deleted");
        return -1;
    }
    Py_XSETREF(SLOT(o, off_n_access), n1);
    tick = SLOT(pool, off_pool_tick);
    Py_XINCREF(tick);
    Py_XSETREF(SLOT(o, off_last_tick), tick);
    if (m->w) {
        Py_INCREF(Py_True);
        Py_XSETREF(SLOT(o, off_dirty), Py_True);
    }
    if (m->c && cost_compute(cost, m->compute) < 0)
        return -1;
    return 1;
}

/* Returns 1 (done: the access missed), 2 (suspended: self->pend waits for a victim), 0
 * (nothing written: the Python method takes the call) or -1 (an exception is set). */
static int
hp_miss(HitPath *self, PyObject *o, PyObject *key, PyObject *size, int w, PyObject *compute, int c,
        PyObject *kind, int suspend)
{
    Miss m;
    int r = miss_begin(self, &m, o, key, size, w, compute, c, kind);
    if (r <= 0)
        return r;
    PyObject *offset = miss_room(self, &m, NULL, suspend);
    if (offset == SUSPENDED) {
        self->pend = m;
        self->pending = 1;
        return 2;
    }
    if (offset == NULL)
        return miss_end(self, &m, -1);
    return miss_end(self, &m, miss_finish(self, &m, offset));
}

/* resume(victim): the suspended miss continues with ``victim`` evicted. Returns None (another
 * victim is needed) or False (the miss is complete, the lock released). An error (a bad
 * victim) undoes the miss, releases the lock and raises, as Pool.steps' generator does. */
static PyObject *
hp_resume(HitPath *self, PyObject *victim)
{
    if (!self->pending) {
        PyErr_SetString(PyExc_RuntimeError, "HitPath.resume: no miss is waiting for a victim");
        return NULL;
    }
    Miss m = self->pend;
    self->pending = 0;
    memset(&self->pend, 0, sizeof(self->pend));
    PyObject *offset = miss_room(self, &m, victim, 1);
    if (offset == SUSPENDED) {
        self->pend = m;
        self->pending = 1;
        Py_RETURN_NONE;
    }
    int r = offset == NULL ? miss_end(self, &m, -1) : miss_end(self, &m, miss_finish(self, &m, offset));
    if (r < 0)
        return NULL;
    self->misses++;
    Py_RETURN_FALSE;
}

/* abandon(): undo a suspended miss (Pool._undo_miss) and release the lock; False when none */
static PyObject *
hp_abandon(HitPath *self, PyObject *unused)
{
    if (!self->pending)
        Py_RETURN_FALSE;
    Miss m = self->pend;
    self->pending = 0;
    memset(&self->pend, 0, sizeof(self->pend));
    PyObject *r = call_method(s_undo_miss, self->pool, m.o, m.size, m.old_size);
    int ok = r != NULL;
    Py_XDECREF(r);
    if (miss_end(self, &m, 0) < 0 || !ok)
        return NULL;
    Py_RETURN_TRUE;
}

/* An access through the C paths: Py_True (a hit), Py_False (a miss), Py_None (with suspend:
 * a miss waiting for a victim, see hp_miss), NULL (an exception is set) or FALLBACK (nothing
 * written: the Python method takes the call). compute may be NULL (c = 0). */
static PyObject *
hp_access(HitPath *self, PyObject *key, PyObject *size, int w, PyObject *compute, int c,
          PyObject *kind, int suspend)
{
    PyObject *pool = self->pool, *r;
    int locked = 0;
    if (!self->enabled || self->pending || !PyLong_CheckExact(key) || (w && !self->fast_write))
        return FALLBACK;
    if (self->peek && !c) {
        /* nobody else inside the pool (see the header); nothing below runs Python code */
        size_t count = *(size_t *)((char *)self->lock + off_rlock_count);
        if (count != 0
            && *(size_t *)((char *)self->lock + off_rlock_owner) != (size_t)PyThread_get_thread_ident())
            return FALLBACK;
    } else {
        PyObject *argv[2] = {NULL, Py_False};
        r = PyObject_Vectorcall(self->acquire, argv + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (r == NULL)
            return NULL;
        locked = r == Py_True;
        Py_DECREF(r);
        if (!locked)
            return FALLBACK;  /* another thread is inside the pool */
    }

    PyObject *o = PyDict_GetItemWithError(self->objs, key);  /* borrowed */
    int done = 0;
    if (o == NULL) {
        if (PyErr_Occurred()) {
            PyErr_Clear();
            goto unlock_fallback;
        }
        if (!self->miss)
            goto unlock_fallback;
        if (locked) {
            if (release_lock(self) < 0)
                return NULL;
            locked = 0;
        }
        done = hp_miss(self, NULL, key, size, w, compute, c, kind, suspend);  /* a new object */
        goto missed;
    }
    if (Py_TYPE(o) != info_type)
        goto unlock_fallback;
    PyObject *state = SLOT(o, off_state), *pref = SLOT(o, off_prefetched);
    PyObject *nacc = SLOT(o, off_n_access);
    PyObject *stats = SLOT(pool, off_pool_stats), *tick = SLOT(pool, off_pool_tick);
    int ovf = 0;
    if (self->miss && state != NULL && PyLong_CheckExact(state)
        && PyLong_AsLongAndOverflow(state, &ovf) == 1 /* HOST */) {
        if (locked) {
            if (release_lock(self) < 0)
                return NULL;
            locked = 0;
        }
        Py_INCREF(o);
        done = hp_miss(self, o, key, size, w, compute, c, kind, suspend);
        Py_DECREF(o);
        goto missed;
    }
    PyObject *acc, *hits, *ph;
    /* state == DEVICE (0), counters plain ints: anything else is the Python method's */
    if (state == NULL || !PyLong_CheckExact(state) || PyObject_IsTrue(state)
        || (pref != Py_True && pref != Py_False) || nacc == NULL || !PyLong_CheckExact(nacc)
        || stats == NULL || Py_TYPE(stats) != stats_type || tick == NULL || !PyLong_CheckExact(tick)
        || (acc = SLOT(stats, off_accesses)) == NULL || !PyLong_CheckExact(acc)
        || (hits = SLOT(stats, off_hits)) == NULL || !PyLong_CheckExact(hits)
        || (ph = SLOT(stats, off_prefetch_hits)) == NULL || !PyLong_CheckExact(ph))
        goto unlock_fallback;
    PyObject *t1 = PyNumber_Add(tick, one);
    PyObject *a1 = PyNumber_Add(acc, one);
    PyObject *h1 = PyNumber_Add(hits, one);
    PyObject *n1 = PyNumber_Add(nacc, one);
    PyObject *p1 = pref == Py_True ? PyNumber_Add(ph, one) : NULL;
    if (t1 == NULL || a1 == NULL || h1 == NULL || n1 == NULL || (pref == Py_True && p1 == NULL)) {
        Py_XDECREF(t1);
        Py_XDECREF(a1);
        Py_XDECREF(h1);
        Py_XDECREF(n1);
        Py_XDECREF(p1);
        goto error;
    }
    /* nothing below fails until touch: the Python branch's writes, in its order */
    Py_INCREF(t1);
    Py_SETREF(SLOT(pool, off_pool_tick), t1);
    Py_SETREF(SLOT(stats, off_accesses), a1);
    Py_SETREF(SLOT(stats, off_hits), h1);
    Py_XSETREF(SLOT(o, off_last_tick), t1);
    Py_SETREF(SLOT(o, off_n_access), n1);
    if (p1 != NULL) {
        Py_INCREF(Py_False);
        Py_SETREF(SLOT(o, off_prefetched), Py_False);
        Py_SETREF(SLOT(stats, off_prefetch_hits), p1);
    }
    if (w) {
        Py_INCREF(Py_True);
        Py_XSETREF(SLOT(o, off_dirty), Py_True);
    }
    self->calls++;
    if (self->tracker != NULL) {  /* the FeatureTracker's on_hit (access() calls it when touch is None) */
        if (tr_hit(self, self->tracker, SLOT(pool, off_pool_view), key, PyLong_AsLongLong(t1)) < 0)
            goto error;
    } else {
        r = PyObject_Vectorcall(self->touch, &key, 1, NULL);
        if (r == NULL)
            goto error;
        Py_DECREF(r);
    }
    if (c) {
        PyObject *cost = PyObject_GetAttr(pool, s_cost);
        if (cost == NULL)
            goto error;
        int ok = cost_compute(cost, compute);
        Py_DECREF(cost);
        if (ok < 0)
            goto error;
    }
    if (locked && release_lock(self) < 0)
        return NULL;
    Py_RETURN_TRUE;

missed:
    if (done < 0)
        return NULL;
    if (done == 2)
        Py_RETURN_NONE;
    if (done == 1) {
        self->misses++;
        Py_RETURN_FALSE;
    }
    return FALLBACK;

error:
    if (locked)
        release_lock(self);
    return NULL;

unlock_fallback:
    if (locked && release_lock(self) < 0)
        return NULL;
    return FALLBACK;
}

static PyObject *
hp_vectorcall(PyObject *self_, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    HitPath *self = (HitPath *)self_;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *write = NULL, *compute = NULL, *kind = zero;
    int w = 0, c = 0;

    if (!self->enabled || nargs < 2 || nargs > 3)
        goto fallback;
    if (nargs == 3)
        write = args[2];
    if (kwnames != NULL) {
        Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t i = 0; i < nk; i++) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, i);
            if (name == s_compute_ns)
                compute = args[nargs + i];
            else if (name == s_kind)
                kind = args[nargs + i];  /* read by a first access only */
            else if (name == s_write && write == NULL)
                write = args[nargs + i];
            else
                goto fallback;  /* the Python method parses (or rejects) the rest */
        }
    }
    if (write != NULL && (w = int_truth(write)) < 0)
        goto fallback;
    if (compute != NULL && (c = int_truth(compute)) < 0)
        goto fallback;
    PyObject *r = hp_access(self, args[0], args[1], w, compute, c, kind, 0);
    if (r != FALLBACK)
        return r;
fallback:
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

/* step(key, size, write, kind, compute_ns): Pool.access's C paths for the environments' loop,
 * a miss suspending where a victim is needed: True (a hit), False (a miss), None (a miss waits
 * for resume(victim)), NotImplemented (not served, nothing written: run the event the Python
 * way, Pool.steps). */
static PyObject *
hp_step(HitPath *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "HitPath.step takes (key, size, write, kind, compute_ns)");
        return NULL;
    }
    int w = int_truth(args[2]), c = int_truth(args[4]);
    PyObject *r = (w < 0 || c < 0) ? FALLBACK : hp_access(self, args[0], args[1], w, args[4], c, args[3], 1);
    if (r == FALLBACK)
        Py_RETURN_NOTIMPLEMENTED;
    return r;
}

/* free(key): Pool.free for the environments' loop, the plain case (a pool serving plain misses
 * and no hook; an unpinned object on the device, its block free to go back, or in host memory):
 * Pool._free's effects in its order (the tracker's on_free in C). None, or NotImplemented (not
 * served, nothing written: call Pool.free, which also raises for an unknown key). */
static PyObject *
hp_free(HitPath *self, PyObject *key)
{
    PyObject *pool = self->pool, *r;
    if (!self->enabled || !self->miss || self->pending || !PyLong_CheckExact(key)
        || SLOT(pool, off_pool_hook) != Py_None)
        Py_RETURN_NOTIMPLEMENTED;
    PyObject *o = PyDict_GetItemWithError(self->objs, key);
    if (o == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NOTIMPLEMENTED;
    }
    PyObject *stats = SLOT(pool, off_pool_stats), *cost = SLOT(pool, off_pool_cost);
    PyObject *policy = SLOT(pool, off_pool_policy), *view = SLOT(pool, off_pool_view);
    if (Py_TYPE(o) != info_type || stats == NULL || Py_TYPE(stats) != stats_type || cost == NULL
        || Py_TYPE(cost) != cost_type || policy == NULL || view == NULL
        || SLOT(pool, off_pool_place_release) == NULL)
        Py_RETURN_NOTIMPLEMENTED;
    PyObject *pref = SLOT(o, off_prefetched);
    PyObject *v[] = {SLOT(o, off_state), SLOT(o, off_pins), SLOT(pool, off_pool_tick),
                     SLOT(stats, off_frees), SLOT(o, off_busy_until), SLOT(cost, off_cost_now),
                     SLOT(pool, off_pool_n_evictable), SLOT(stats, off_useless),
                     SLOT(o, off_offset), SLOT(o, off_nbytes)};
    if (!exact_ints(v, 4) || (pref != Py_True && pref != Py_False))
        Py_RETURN_NOTIMPLEMENTED;
    int ovf = 0;
    long state = PyLong_AsLongAndOverflow(v[0], &ovf);
    if (ovf || PyObject_IsTrue(v[1]) || (state != 0 && state != 1))  /* pinned, in flight */
        Py_RETURN_NOTIMPLEMENTED;
    if (state == 0 && (!exact_ints(v + 4, 6) || PyObject_RichCompareBool(v[4], v[5], Py_LE) != 1))
        Py_RETURN_NOTIMPLEMENTED;  /* a copy out of its block still runs: Pool._free queues it */
    PyObject *argv[2] = {NULL, Py_False};
    r = PyObject_Vectorcall(self->acquire, argv + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (r == NULL)
        return NULL;
    int locked = r == Py_True;
    Py_DECREF(r);
    if (!locked)
        Py_RETURN_NOTIMPLEMENTED;
    PyObject *t1 = ADD(v[2], one), *f1 = ADD(v[3], one), *n1 = NULL, *u1 = NULL;
    if (state == 0) {
        n1 = PyNumber_Subtract(v[6], one);
        u1 = pref == Py_True ? ADD(v[7], one) : NULL;
    }
    int ret = -1;
    Py_INCREF(o);
    Py_INCREF(policy);
    Py_INCREF(view);
    if (t1 == NULL || f1 == NULL || (state == 0 && (n1 == NULL || (pref == Py_True && u1 == NULL)))) {
        Py_XDECREF(t1);
        Py_XDECREF(f1);
        Py_XDECREF(n1);
        Py_XDECREF(u1);
        goto done;
    }
    Py_SETREF(SLOT(pool, off_pool_tick), t1);
    Py_SETREF(SLOT(stats, off_frees), f1);
    if (PyDict_DelItem(self->objs, key) < 0) {
        Py_XDECREF(n1);
        Py_XDECREF(u1);
        goto done;
    }
    if (state == 0) {  /* on the device: useless prefetch, n_evictable, on_free, the block */
        if (u1 != NULL)
            Py_SETREF(SLOT(stats, off_useless), u1);
        Py_SETREF(SLOT(pool, off_pool_n_evictable), n1);
        if (self->tracker != NULL) {
            if (tr_evict(self->tracker, view, key, 1) < 0)
                goto done;
        } else {
            r = call_method(s_on_free, policy, view, key, NULL);
            if (r == NULL)
                goto done;
            Py_DECREF(r);
        }
        PyObject *off = SLOT(o, off_offset), *nb = SLOT(o, off_nbytes);  /* _release_block */
        if (off == NULL || nb == NULL) {
            PyErr_SetString(PyExc_AttributeError, "allocator._fastpath: the object's block was deleted");
            goto done;
        }
        SLOT(o, off_offset) = PyLong_FromLong(-1);
        Py_INCREF(zero);
        SLOT(o, off_nbytes) = zero;
        PyObject *rargs[2] = {off, nb};
        r = SLOT(o, off_offset) != NULL
            ? PyObject_Vectorcall(SLOT(pool, off_pool_place_release), rargs, 2, NULL) : NULL;
        Py_DECREF(off);
        Py_DECREF(nb);
        if (r == NULL)
            goto done;
        Py_DECREF(r);
    }
    ret = 0;
done:
    Py_DECREF(o);
    Py_DECREF(policy);
    Py_DECREF(view);
    if (release_lock(self) < 0 || ret < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* run(keys, ops, sizes, kinds, compute_ns, i, free_op, write_op): the environments' row loop
 * from row i of a window (its columns as lists): a free through HitPath.free, an access through
 * HitPath.step, until one of: the end (RUN_END, n), a miss waiting for a victim (RUN_DECISION,
 * the next row), a row not served here (RUN_PYTHON, its index: nothing of it done). */
enum { RUN_END = 0, RUN_DECISION = 1, RUN_PYTHON = 2 };

static PyObject *
hp_run(HitPath *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "HitPath.run takes (keys, ops, sizes, kinds, compute_ns, "
                        "i, free_op, write_op)");
        return NULL;
    }
    for (int j = 0; j < 5; j++) {
        if (!PyList_CheckExact(args[j]) || PyList_GET_SIZE(args[j]) != PyList_GET_SIZE(args[0])) {
            PyErr_SetString(PyExc_TypeError, "HitPath.run: the columns must be lists of one length");
            return NULL;
        }
    }
    Py_ssize_t n = PyList_GET_SIZE(args[0]), i = PyLong_AsSsize_t(args[5]);
    long free_op = PyLong_AsLong(args[6]), write_op = PyLong_AsLong(args[7]);
    if (PyErr_Occurred())
        return NULL;
    if (i < 0 || i > n) {
        PyErr_SetString(PyExc_IndexError, "HitPath.run: row index out of range");
        return NULL;
    }
    int status = RUN_END;
    for (; i < n; i++) {
        PyObject *k = PyList_GET_ITEM(args[0], i), *opo = PyList_GET_ITEM(args[1], i), *r;
        long op = PyLong_CheckExact(opo) ? PyLong_AsLong(opo) : -1;
        if (op == -1 && PyErr_Occurred())
            return NULL;
        if (op == free_op) {
            r = hp_free(self, k);
            if (r == NULL)
                return NULL;
            Py_DECREF(r);
            if (r == Py_NotImplemented) {
                status = RUN_PYTHON;
                break;
            }
            continue;
        }
        PyObject *comp = PyList_GET_ITEM(args[4], i);
        int c = int_truth(comp);
        r = c < 0 ? FALLBACK : hp_access(self, k, PyList_GET_ITEM(args[2], i), op == write_op, comp, c,
                                          PyList_GET_ITEM(args[3], i), 1);
        if (r == NULL)
            return NULL;
        if (r == FALLBACK) {
            status = RUN_PYTHON;
            break;
        }
        Py_DECREF(r);
        if (r == Py_None) {
            status = RUN_DECISION;
            i++;
            break;
        }
    }
    return Py_BuildValue("(in)", status, i);
}

/* tracks(policy): whether the hooks of ``policy`` run here (exactly a FeatureTracker) */
static PyObject *
hp_tracks(HitPath *self, PyObject *policy)
{
    return PyBool_FromLong(tracker_type != NULL && Py_TYPE(policy) == tracker_type);
}

static int
hp_traverse(HitPath *self, visitproc visit, void *arg)
{
    Py_VISIT(self->pool);
    Py_VISIT(self->fallback);
    Py_VISIT(self->objs);
    Py_VISIT(self->lock);
    Py_VISIT(self->acquire);
    Py_VISIT(self->release);
    Py_VISIT(self->touch);
    Py_VISIT(self->tracker);
    Py_VISIT(self->tr_buf.obj);
    if (self->pending) {
        Miss *m = &self->pend;
        Py_VISIT(m->o);
        Py_VISIT(m->key);
        Py_VISIT(m->size);
        Py_VISIT(m->needo);
        Py_VISIT(m->old_size);
        Py_VISIT(m->compute);
        Py_VISIT(m->kind);
        Py_VISIT(m->place);
        Py_VISIT(m->policy);
        Py_VISIT(m->view);
        Py_VISIT(m->stats);
        Py_VISIT(m->cost);
    }
    return 0;
}

static int
hp_clear(HitPath *self)
{
    self->enabled = 0;
    Py_CLEAR(self->pool);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->objs);
    Py_CLEAR(self->lock);
    Py_CLEAR(self->acquire);
    Py_CLEAR(self->release);
    Py_CLEAR(self->touch);
    Py_CLEAR(self->tracker);
    if (self->tr_buf.obj != NULL)
        PyBuffer_Release(&self->tr_buf);
    if (self->pending) {  /* the pool is going away with it: nothing to undo */
        self->pending = 0;
        miss_drop(&self->pend);
    }
    return 0;
}

static void
hp_dealloc(HitPath *self)
{
    PyObject_GC_UnTrack(self);
    hp_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
hp_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *pool, *fallback, *objs, *lock;
    static char *kwlist[] = {"pool", "fallback", "objs", "lock", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO!O:HitPath", kwlist, &pool, &fallback,
                                     &PyDict_Type, &objs, &lock))
        return NULL;
    if (pool_type == NULL || !PyObject_TypeCheck(pool, pool_type)) {
        PyErr_SetString(PyExc_TypeError, "HitPath: pool must be an allocator.pool.Pool (after setup)");
        return NULL;
    }
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "HitPath: fallback must be callable");
        return NULL;
    }
    PyObject *acquire = PyObject_GetAttrString(lock, "acquire");
    PyObject *release = acquire == NULL ? NULL : PyObject_GetAttrString(lock, "release");
    if (release == NULL) {
        Py_XDECREF(acquire);
        return NULL;
    }
    HitPath *self = (HitPath *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_DECREF(acquire);
        Py_DECREF(release);
        return NULL;
    }
    self->vectorcall = hp_vectorcall;
    Py_INCREF(pool);
    self->pool = pool;
    Py_INCREF(fallback);
    self->fallback = fallback;
    Py_INCREF(objs);
    self->objs = objs;
    Py_INCREF(lock);
    self->lock = lock;
    self->acquire = acquire;
    self->release = release;
    return (PyObject *)self;
}

/* Whether calling ``touch`` runs no Python code: OrderedDict.move_to_end, bound. */
static int
touch_is_builtin(PyObject *touch)
{
    if (!PyCFunction_Check(touch))
        return 0;
    PyObject *owner = PyCFunction_GET_SELF(touch);
    const char *name = ((PyCFunctionObject *)touch)->m_ml->ml_name;
    return owner != NULL && PyODict_CheckExact(owner) && strcmp(name, "move_to_end") == 0;
}

static PyObject *
hp_configure(HitPath *self, PyObject *args)
{
    int enabled, fast_write, miss = 0;
    PyObject *touch, *tracker = Py_None;
    if (!PyArg_ParseTuple(args, "ppO|pO:configure", &enabled, &fast_write, &touch, &miss, &tracker))
        return NULL;
    if (touch == Py_None) {
        touch = NULL;
    } else if (!PyCallable_Check(touch)) {
        PyErr_SetString(PyExc_TypeError, "HitPath.configure: touch must be callable or None");
        return NULL;
    }
    if (tracker == Py_None) {
        tracker = NULL;
    } else if (tracker_type == NULL || Py_TYPE(tracker) != tracker_type) {
        PyErr_SetString(PyExc_TypeError, "HitPath.configure: tracker must be a FeatureTracker or None");
        return NULL;
    }
    Py_XINCREF(touch);
    Py_XSETREF(self->touch, touch);
    Py_XINCREF(tracker);
    Py_XSETREF(self->tracker, tracker);
    if (self->tr_buf.obj != NULL)
        PyBuffer_Release(&self->tr_buf);
    self->fast_write = fast_write;
    self->enabled = enabled && (touch != NULL || tracker != NULL) && self->pool != NULL
                    && info_type != NULL;
    self->miss = self->enabled && miss;
    /* the tracker's hooks may call Python (a new slot, renormalising): the lock is taken */
    self->peek = self->enabled && tracker == NULL && rlock_type != NULL
                 && Py_TYPE(self->lock) == rlock_type && touch_is_builtin(touch);
    Py_RETURN_NONE;
}

static PyObject *
hp_get_wrapped(HitPath *self, void *closure)
{
    if (self->fallback == NULL)
        Py_RETURN_NONE;
    Py_INCREF(self->fallback);
    return self->fallback;
}

static PyObject *
hp_get_doc(HitPath *self, void *closure)
{
    if (self->fallback == NULL)
        Py_RETURN_NONE;
    return PyObject_GetAttrString(self->fallback, "__doc__");
}

static PyObject *
hp_get_enabled(HitPath *self, void *closure)
{
    return PyBool_FromLong(self->enabled);
}

static PyObject *
hp_get_peek(HitPath *self, void *closure)
{
    return PyBool_FromLong(self->peek);
}

static PyObject *
hp_get_misses(HitPath *self, void *closure)
{
    return PyLong_FromLong(self->misses);
}

static PyObject *
hp_get_calls(HitPath *self, void *closure)
{
    return PyLong_FromLong(self->calls);
}

static PyObject *
hp_get_pending(HitPath *self, void *closure)
{
    return PyBool_FromLong(self->pending);
}

static PyMethodDef hp_methods[] = {
    {"configure", (PyCFunction)hp_configure, METH_VARARGS,
     "configure(enabled, fast_write, touch, miss=False, tracker=None): the pool's fast-path "
     "configuration changed (miss: plain misses are served too; tracker: the pool's policy, a "
     "FeatureTracker whose hooks run in C)"},
    {"step", (PyCFunction)(void (*)(void))hp_step, METH_FASTCALL,
     "step(key, size, write, kind, compute_ns): an access, a miss suspending where a victim is "
     "needed: True (hit), False (miss), None (waits for resume), NotImplemented (not served)"},
    {"resume", (PyCFunction)hp_resume, METH_O,
     "resume(victim): the suspended miss continues with victim evicted: None (another victim is "
     "needed) or False (complete)"},
    {"abandon", (PyCFunction)hp_abandon, METH_NOARGS,
     "abandon(): undo a suspended miss and release the pool's lock (False when none waits)"},
    {"run", (PyCFunction)(void (*)(void))hp_run, METH_FASTCALL,
     "run(keys, ops, sizes, kinds, compute_ns, i, free_op, write_op) -> (status, i): "
     "the environments' row loop from row i until RUN_END, RUN_DECISION (a miss waits for resume) "
     "or RUN_PYTHON (row i is not served here)"},
    {"free", (PyCFunction)hp_free, METH_O,
     "free(key): Pool.free's plain case in C: None, or NotImplemented (not served: call Pool.free)"},
    {"tracks", (PyCFunction)hp_tracks, METH_O,
     "tracks(policy): whether the policy's hooks run in C (exactly a FeatureTracker)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef hp_getset[] = {
    {"__wrapped__", (getter)hp_get_wrapped, NULL, "the Python method this path accelerates", NULL},
    {"__doc__", (getter)hp_get_doc, NULL, NULL, NULL},
    {"enabled", (getter)hp_get_enabled, NULL, "whether plain hits are served in C", NULL},
    {"peek", (getter)hp_get_peek, NULL, "whether the lock is checked without a call", NULL},
    {"misses", (getter)hp_get_misses, NULL, "misses served in C so far", NULL},
    {"calls", (getter)hp_get_calls, NULL, "hits served in C so far", NULL},
    {"pending", (getter)hp_get_pending, NULL, "whether a miss waits for resume(victim)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject HitPathType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "allocator._fastpath.HitPath",
    .tp_basicsize = sizeof(HitPath),
    .tp_dealloc = (destructor)hp_dealloc,
    .tp_vectorcall_offset = offsetof(HitPath, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "HitPath(pool, fallback, objs, lock): Pool.access's plain hit in C",
    .tp_traverse = (traverseproc)hp_traverse,
    .tp_clear = (inquiry)hp_clear,
    .tp_methods = hp_methods,
    .tp_getset = hp_getset,
    .tp_new = hp_new,
};

/* Pool.access as a class attribute: ``Pool.access`` is the Python function; ``pool.access``
 * is the pool's HitPath while it is enabled, else the bound Python method. */
typedef struct {
    PyObject_HEAD
    PyObject *func;
} AccessDescr;
_Static_assert(offsetof(AccessDescr, func) == offsetof(OneRef, ref), "AccessDescr is a OneRef");

static PyObject *
ad_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *func;
    if (!PyArg_ParseTuple(args, "O:AccessDescriptor", &func))
        return NULL;
    if (!PyFunction_Check(func)) {
        PyErr_SetString(PyExc_TypeError, "AccessDescriptor wraps a Python function");
        return NULL;
    }
    AccessDescr *self = (AccessDescr *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    Py_INCREF(func);
    self->func = func;
    return (PyObject *)self;
}

static PyObject *
ad_get(AccessDescr *self, PyObject *obj, PyObject *type)
{
    if (self->func == NULL) {
        PyErr_SetString(PyExc_AttributeError, "access");
        return NULL;
    }
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self->func);
        return self->func;
    }
    if (pool_type != NULL && PyObject_TypeCheck(obj, pool_type)) {
        PyObject *hp = SLOT(obj, off_pool_hit_path);
        if (hp != NULL && Py_TYPE(hp) == &HitPathType && ((HitPath *)hp)->enabled) {
            Py_INCREF(hp);
            return hp;
        }
    }
    return PyMethod_New(self->func, obj);
}

static PyObject *
ad_get_wrapped(AccessDescr *self, void *closure)
{
    PyObject *f = self->func != NULL ? self->func : Py_None;
    Py_INCREF(f);
    return f;
}

static PyObject *
ad_get_doc(AccessDescr *self, void *closure)
{
    if (self->func == NULL)
        Py_RETURN_NONE;
    return PyObject_GetAttrString(self->func, "__doc__");
}

static PyGetSetDef ad_getset[] = {
    {"__wrapped__", (getter)ad_get_wrapped, NULL, "the Python method", NULL},
    {"__func__", (getter)ad_get_wrapped, NULL, "the Python method", NULL},
    {"__doc__", (getter)ad_get_doc, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject AccessDescrType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "allocator._fastpath.AccessDescriptor",
    .tp_basicsize = sizeof(AccessDescr),
    .tp_dealloc = (destructor)oneref_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "AccessDescriptor(func): pool.access is the pool's HitPath while it is enabled",
    .tp_traverse = (traverseproc)oneref_traverse,
    .tp_clear = (inquiry)oneref_clear,
    .tp_getset = ad_getset,
    .tp_descr_get = (descrgetfunc)ad_get,
    .tp_new = ad_new,
};

/* ---------------------------------------------------------------- candidate gathering
 * policies/features.py's _select + the part of _pack that reads the pool's records, for the
 * usual case of a decision (every candidate evictable), in one call: see fp_gather. */

/* numpy's bitgen_t (numpy/random/bitgen.h): the C interface of a BitGenerator's capsule */
typedef struct {
    void *state;
    uint64_t (*next_uint64)(void *st);
    uint32_t (*next_uint32)(void *st);
    double (*next_double)(void *st);
    uint64_t (*next_raw)(void *st);
} fp_bitgen_t;

/* A small exact int (or bool) as a C long; -1 with no exception set when it is not one. */
static inline long
small_int(PyObject *v)
{
    if (v == Py_True)
        return 1;
    if (v == Py_False)
        return 0;
    if (!PyLong_Check(v))  /* ints and int subclasses (an IntEnum kind) */
        return -1;
    int overflow;
    long r = PyLong_AsLongAndOverflow(v, &overflow);
    if (overflow || (r == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return -1;
    }
    return r;
}

/* The state code of an evictable record (policies/features.py: dirty + 2 * prefetched +
 * _STATE_CODE[DEVICE] (8) + 16 * kind); -1 when it is not evictable (not on the device, or
 * pinned: view.evictable), -2 when the record holds something unusual. */
static long
rec_code(PyObject *o)
{
    if (Py_TYPE(o) != info_type)
        return -2;
    long state = small_int(SLOT(o, off_state)), pins = small_int(SLOT(o, off_pins));
    if (state < 0 || pins < 0)
        return -2;
    if (state != 0 || pins != 0)
        return -1;
    long dirty = small_int(SLOT(o, off_dirty)), pre = small_int(SLOT(o, off_prefetched));
    long kind = small_int(SLOT(o, off_kind));
    if (dirty < 0 || dirty > 1 || pre < 0 || pre > 1 || kind < 0 || kind > 1000)
        return -2;
    return dirty + 2 * pre + 8 + 16 * kind;
}

/* Candidate i = key: writes its slot and state code into out[i], out[stride + i].
 * 1: done; 0: the key is not evictable (no record, not on the device, pinned); 2: its record
 * holds something unusual (the Python path decides); -1: error (no slot for a resident key:
 * the tracker's invariant is broken). */
static int
gather_one(PyObject *key, PyObject *objs, PyObject *slots, double *out, Py_ssize_t i,
           Py_ssize_t stride)
{
    PyObject *o = PyDict_GetItemWithError(objs, key);
    if (o == NULL)
        return PyErr_Occurred() ? -1 : 0;
    long code = rec_code(o);
    if (code < 0)
        return code == -1 ? 0 : 2;
    PyObject *s = PyDict_GetItemWithError(slots, key);
    if (s == NULL) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_RuntimeError, "FeatureTracker: resident key %R has no slot", key);
        return -1;
    }
    long sl = small_int(s);
    if (sl < 0) {
        PyErr_Format(PyExc_RuntimeError, "FeatureTracker: key %R has slot %R", key, s);
        return -1;
    }
    out[i] = (double)sl;
    out[stride + i] = (double)code;
    return 1;
}

/* gather_one for the resident at index j of the tracker's lists, reading its record and slot
 * from recs / rslots (kept beside the list of residents) instead of looking them up: the same
 * answers, or 2 when the record is not the key's (the Python path then decides). */
static int
gather_at(PyObject *key, PyObject *recs, const long long *rslots, Py_ssize_t j, double *out,
          Py_ssize_t i, Py_ssize_t stride)
{
    PyObject *o = PyList_GET_ITEM(recs, j);
    long code = rec_code(o);
    if (code < -1)
        return 2;
    PyObject *rk = SLOT(o, off_key);
    if (rk != key) {
        int eq = rk == NULL ? 0 : PyObject_RichCompareBool(rk, key, Py_EQ);
        if (eq < 0)
            return -1;
        if (!eq)
            return 2;
    }
    if (code < 0)
        return 0;
    if (rslots[j] < 0)
        return 2;
    out[i] = (double)rslots[j];
    out[stride + i] = (double)code;
    return 1;
}

#define GATHER_MAX_K 4096

/* The bit generator behind rng: a np.random.Generator, or its bit generator's capsule itself
 * (rng.bit_generator.capsule: looking it up costs more than the draws on a cold cache, so
 * callers may keep it). *cap receives a new reference to the capsule; NULL with an exception. */
static fp_bitgen_t *
bitgen_of(PyObject *rng, PyObject **cap)
{
    if (PyCapsule_CheckExact(rng)) {
        Py_INCREF(rng);
        *cap = rng;
    } else {
        *cap = PyObject_GetAttrString(rng, "bit_generator");
        if (*cap != NULL)
            Py_SETREF(*cap, PyObject_GetAttrString(*cap, "capsule"));
        if (*cap == NULL)
            return NULL;
    }
    return (fp_bitgen_t *)PyCapsule_GetPointer(*cap, "BitGenerator");
}

/* Ask for the cache lines of record o that rec_code and gather_at read (its state, pins, dirty,
 * prefetched, kind and key slots): a decision reads records scattered in memory, which the
 * training loop between two decisions has evicted from the caches; asking for all candidates'
 * records first overlaps those misses instead of taking them one after another. */
static inline void
prefetch_rec(PyObject *o)
{
    char *b = (char *)o;
    __builtin_prefetch(b + off_state);
    __builtin_prefetch(b + off_pins);
    __builtin_prefetch(b + off_dirty);
    __builtin_prefetch(b + off_prefetched);
    __builtin_prefetch(b + off_kind);
    __builtin_prefetch(b + off_key);
}

/* gather(src, objs, slots, K, out, base, rng=None, m=0, recs=None, rslots=None)
 *     -> list | None | False
 *
 * The usual cases of policies.features._select followed by _pack's record reads:
 *  - rng None (rule "lru"): the first K keys of the iterable src (the tracker's LRU order),
 *    when all are evictable;
 *  - rule "sample" (rng the np.random.Generator, or its bit generator's capsule; src the
 *    tracker's list of n residents):
 *    - n > 4K: m uniform doubles drawn from rng's bit generator exactly as rng.random(m)
 *      draws them (without taking the Generator's lock: a decision runs under the pool's
 *      lock, and the GIL is held throughout), index = int(x * n), and the first K distinct
 *      indices (in draw order) name the candidates, when they are K and all evictable;
 *    - n <= 4K: the evictable residents in list order, and when there are more than K of
 *      them, K picked among them by a partial Fisher-Yates shuffle over K doubles drawn as
 *      rng.random(K) draws them (policies.features._sample_indices).
 * With recs and rslots (rule "sample": the tracker's records and slots at the same indices as
 * src) the records are read from there instead of looked up by key, the answers the same.
 * Then writes the slots into out[base:base+n] and the state codes into out[base+K:base+K+n]
 * (out: a float64 buffer) and returns the keys (a list of n <= K). Otherwise changes nothing in
 * out and returns None (nothing drawn: run the Python path from the start) or False (rule
 * "sample" after the draw: continue the Python path past its first draw).
 */
static PyObject *
fp_gather(PyObject *mod, PyObject *args)
{
    PyObject *src, *objs, *slots, *outobj, *rng = Py_None, *recs = Py_None, *rslots_obj = Py_None;
    Py_ssize_t K, base, m = 0;
    if (!PyArg_ParseTuple(args, "OO!O!nOn|OnOO:gather", &src, &PyDict_Type, &objs, &PyDict_Type,
                          &slots, &K, &outobj, &base, &rng, &m, &recs, &rslots_obj))
        return NULL;
    if (info_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "gather: setup() has not run");
        return NULL;
    }
    if (K <= 0 || K > GATHER_MAX_K || base < 0) {
        PyErr_Format(PyExc_ValueError, "gather: K must be in 1..%d and base >= 0", GATHER_MAX_K);
        return NULL;
    }
    if (rng != Py_None && (!PyList_CheckExact(src) || m < K || m > 2 * GATHER_MAX_K)) {
        PyErr_Format(PyExc_TypeError, "gather: rule 'sample' needs the list of residents and "
                     "K <= m <= %d", 2 * GATHER_MAX_K);
        return NULL;
    }
    Py_buffer buf;
    if (PyObject_GetBuffer(outobj, &buf, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    PyObject *keys = NULL, *it = NULL, *cap = NULL;
    Py_ssize_t *ev = NULL;  /* the scan: indices of the evictable residents */
    Py_buffer rb = {0};
    const long long *rslots = NULL;  /* with recs: the residents' records and slots by index */
    if (rng != Py_None && recs != Py_None && rslots_obj != Py_None) {
        if (!PyList_CheckExact(recs)
            || PyObject_GetBuffer(rslots_obj, &rb, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
            PyErr_Clear();
            rb.obj = NULL;
        } else if (rb.itemsize == 8 && rb.format != NULL
                   && (strcmp(rb.format, "q") == 0 || strcmp(rb.format, "l") == 0)
                   && rb.len / 8 == PyList_GET_SIZE(src) && PyList_GET_SIZE(recs) == PyList_GET_SIZE(src)) {
            rslots = (const long long *)rb.buf;
        }
    }
    double *out = (double *)buf.buf, *tmp = NULL;
    /* tmp: slots in [0, stride), codes in [stride, 2 * stride); the answer's codes end up at
     * tmp + K */
    Py_ssize_t stride = K;
    PyObject *result = Py_None;  /* the answer when a case does not serve */
    if (buf.itemsize != 8 || buf.format == NULL || strcmp(buf.format, "d") != 0
        || buf.len / 8 < base + 2 * K) {
        PyErr_SetString(PyExc_ValueError, "gather: out must be a float64 buffer of base + 2K values");
        goto error;
    }
    if (rng != Py_None && PyList_GET_SIZE(src) <= 4 * K)
        stride = PyList_GET_SIZE(src);  /* the scan: every resident may be a candidate */
    tmp = PyMem_Malloc(2 * (size_t)(stride > K ? stride : K) * sizeof(double));
    keys = PyList_New(0);
    if (tmp == NULL || keys == NULL) {
        if (tmp == NULL)
            PyErr_NoMemory();
        goto error;
    }
    if (rng == Py_None) {
        it = PyObject_GetIter(src);
        if (it == NULL)
            goto error;
        for (Py_ssize_t i = 0; i < K; i++) {
            PyObject *k = PyIter_Next(it);
            if (k == NULL) {
                if (PyErr_Occurred())
                    goto error;
                break;
            }
            int r = gather_one(k, objs, slots, tmp, i, stride);
            if (r == 1)
                r = PyList_Append(keys, k) == 0 ? 1 : -1;
            Py_DECREF(k);
            if (r < 0)
                goto error;
            if (r != 1)  /* one of the K least recent is pinned or in flight, or unusual */
                goto pass;
        }
    } else if (PyList_GET_SIZE(src) <= 4 * K) {  /* the scan (n <= 4K) */
        /* the evictable residents' indices (their slots and codes into tmp as they come); the
         * keys are only read for those chosen. No Python code runs in the loop: src keeps its
         * items alive. */
        Py_ssize_t n = PyList_GET_SIZE(src), c = 0;
        ev = PyMem_Malloc(((size_t)n + 1) * sizeof(Py_ssize_t));
        if (ev == NULL) {
            PyErr_NoMemory();
            goto error;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            if (rslots != NULL && i + 8 < n)  /* a record 8 ahead (see prefetch_rec) */
                prefetch_rec(PyList_GET_ITEM(recs, i + 8));
            PyObject *k = PyList_GET_ITEM(src, i);
            int r = rslots != NULL ? gather_at(k, recs, rslots, i, tmp, c, stride)
                                   : gather_one(k, objs, slots, tmp, c, stride);
            if (r < 0)
                goto error;
            if (r == 2)
                goto pass;
            if (r == 1)
                ev[c++] = i;
        }
        if (c <= K) {  /* every evictable resident, in list order */
            for (Py_ssize_t i = 0; i < c; i++)
                if (PyList_Append(keys, PyList_GET_ITEM(src, ev[i])) < 0)
                    goto error;
            memmove(tmp + K, tmp + stride, (size_t)c * sizeof(double));
        } else {  /* K of them: a partial Fisher-Yates shuffle over K uniform draws, drawn as
                   * Generator.random(K) draws (features._sample_indices, the same steps) */
            fp_bitgen_t *bg = bitgen_of(rng, &cap);
            if (bg == NULL)
                goto error;
            Py_ssize_t *idx = PyMem_Malloc((size_t)c * sizeof(Py_ssize_t));
            double *sel = PyMem_Malloc(2 * (size_t)K * sizeof(double));
            if (idx == NULL || sel == NULL) {
                PyMem_Free(idx);
                PyMem_Free(sel);
                PyErr_NoMemory();
                goto error;
            }
            for (Py_ssize_t i = 0; i < c; i++)
                idx[i] = i;
            for (Py_ssize_t j = 0; j < K; j++) {
                double x = bg->next_double(bg->state);
                Py_ssize_t r = j + (Py_ssize_t)(x * (double)(c - j));  /* truncation, as int() */
                if (r > c - 1)
                    r = c - 1;
                Py_ssize_t t = idx[j];
                idx[j] = idx[r];
                idx[r] = t;
            }
            for (Py_ssize_t i = 0; i < K; i++) {
                Py_ssize_t j = idx[i];
                if (PyList_Append(keys, PyList_GET_ITEM(src, ev[j])) < 0) {
                    PyMem_Free(idx);
                    PyMem_Free(sel);
                    goto error;
                }
                sel[i] = tmp[j];
                sel[K + i] = tmp[stride + j];
            }
            memcpy(tmp, sel, 2 * (size_t)K * sizeof(double));
            PyMem_Free(idx);
            PyMem_Free(sel);
        }
    } else {  /* n > 4K: m draws, the first K distinct */
        Py_ssize_t n = PyList_GET_SIZE(src);
        fp_bitgen_t *bg = bitgen_of(rng, &cap);
        if (bg == NULL)
            goto error;
        Py_ssize_t idx[GATHER_MAX_K], c = 0;
        for (Py_ssize_t j = 0; j < m; j++) {  /* all m drawn, as Generator.random(m) */
            double x = bg->next_double(bg->state);
            if (c == K)
                continue;
            Py_ssize_t v = (Py_ssize_t)(x * (double)n);  /* truncation, as astype(np.intp) */
            int fresh = 1;
            for (Py_ssize_t q = 0; q < c; q++)
                if (idx[q] == v) {
                    fresh = 0;
                    break;
                }
            if (fresh)
                idx[c++] = v;
        }
        result = Py_False;  /* drawn: from here the Python path continues past its first draw */
        if (c < K)
            goto pass;
        if (rslots != NULL) {  /* the K candidates' list entries and records, asked for at once */
            PyObject **ritems = PySequence_Fast_ITEMS(recs), **kitems = PySequence_Fast_ITEMS(src);
            for (Py_ssize_t i = 0; i < K; i++) {
                if (idx[i] < n) {
                    __builtin_prefetch(&ritems[idx[i]]);
                    __builtin_prefetch(&kitems[idx[i]]);
                    __builtin_prefetch(&rslots[idx[i]]);
                }
            }
            for (Py_ssize_t i = 0; i < K; i++) {
                if (idx[i] < n) {
                    prefetch_rec(ritems[idx[i]]);
                    __builtin_prefetch(kitems[idx[i]]);
                }
            }
        }
        for (Py_ssize_t i = 0; i < K; i++) {
            if (idx[i] >= PyList_GET_SIZE(src))  /* cannot happen: x < 1 */
                goto pass;
            PyObject *k = PyList_GET_ITEM(src, idx[i]);
            Py_INCREF(k);
            int r = rslots != NULL ? gather_at(k, recs, rslots, idx[i], tmp, i, stride)
                                   : gather_one(k, objs, slots, tmp, i, stride);
            if (r == 1)
                r = PyList_Append(keys, k) == 0 ? 1 : -1;
            Py_DECREF(k);
            if (r < 0)
                goto error;
            if (r != 1)
                goto pass;
        }
    }
    Py_ssize_t n = PyList_GET_SIZE(keys);
    memcpy(out + base, tmp, (size_t)n * sizeof(double));
    memcpy(out + base + K, tmp + K, (size_t)n * sizeof(double));  /* codes: moved to tmp + K */
    result = keys;
    keys = NULL;
    goto done;
pass:
    Py_INCREF(result);
    goto done;
error:
    result = NULL;
done:
    if (rb.obj != NULL)
        PyBuffer_Release(&rb);
    PyMem_Free(ev);
    Py_XDECREF(cap);
    Py_XDECREF(it);
    Py_XDECREF(keys);
    PyMem_Free(tmp);
    PyBuffer_Release(&buf);
    return result;
}

/* An int (or bool) or float slot value as a double (ints beyond 2**53 round, as float()
 * does); sets *ok = 0 when it is neither. */
static inline double
int_value(PyObject *v, int *ok)
{
    if (v != NULL && PyFloat_CheckExact(v))
        return PyFloat_AS_DOUBLE(v);
    if (v == NULL || !PyLong_Check(v)) {
        *ok = 0;
        return 0.0;
    }
    double d = PyLong_AsDouble(v);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        *ok = 0;
    }
    return d;
}

/* A float or int attribute of obj as a double; sets *ok = 0 when it is neither. */
static double
number_attr(PyObject *obj, const char *name, int *ok)
{
    PyObject *v = PyObject_GetAttrString(obj, name);
    double d = 0.0;
    if (v != NULL)
        d = int_value(v, ok);
    else {
        PyErr_Clear();
        *ok = 0;
    }
    Py_XDECREF(v);
    return d;
}

/* Python's min(a, b) / max(a, b) for floats: the first unless the second is strictly beyond */
static inline double py_min(double a, double b) { return b < a ? b : a; }
static inline double py_max(double a, double b) { return b > a ? b : a; }

/* head(pool, tracker, n, K, out, (ih0, ih1, ih2, log_n)) -> bool
 *
 * policies/features.py's _pack head, the same arithmetic on the same values: writes
 * (n, t, decay x3, 1/capacity, h2d latency, 1/h2d bandwidth, d2h latency, 1/d2h bandwidth,
 * timed, occupancy, in flight, miss rate, n/K, stall fraction, residents) into out[0:17].
 * Returns False, writing nothing, when an object is not of the kind it knows (the Python code
 * then computes the head). */
static PyObject *
fp_head(PyObject *mod, PyObject *args)
{
    PyObject *pool, *tracker, *outobj;
    Py_ssize_t n, K;
    double ih[3], log_n;
    if (!PyArg_ParseTuple(args, "OOnnO(dddd):head", &pool, &tracker, &n, &K, &outobj, &ih[0],
                          &ih[1], &ih[2], &log_n))
        return NULL;
    if (pool_type == NULL || Py_TYPE(pool) != pool_type || K <= 0)
        Py_RETURN_FALSE;
    PyObject *place = SLOT(pool, off_pool_place), *cost = SLOT(pool, off_pool_cost);
    if (place == NULL || cost == NULL || Py_TYPE(cost) != cost_type)
        Py_RETURN_FALSE;
    int ok = 1;
    double used;
    if (Py_TYPE(place) == arena_type)
        used = int_value(SLOT(place, off_ar_used), &ok);
    else if (Py_TYPE(place) == bytes_type)
        used = int_value(SLOT(place, off_ba_used), &ok);
    else
        Py_RETURN_FALSE;
    double t = int_value(SLOT(pool, off_pool_tick), &ok);
    double cap = int_value(SLOT(pool, off_pool_capacity), &ok);
    double inflight = int_value(SLOT(pool, off_pool_inflight), &ok);
    double now = int_value(SLOT(cost, off_cost_now), &ok);
    double stall = int_value(SLOT(cost, off_cost_stall), &ok);
    PyObject *preset = SLOT(cost, off_cost_preset);
    double times[5] = {0.0, 1.0, 0.0, 1.0, 0.0};  /* features._NO_TIMES */
    if (preset == NULL)
        ok = 0;
    else if (preset != Py_None) {
        times[0] = number_attr(preset, "h2d_latency_ns", &ok);
        times[1] = 1.0 / number_attr(preset, "h2d_gbps", &ok);
        times[2] = number_attr(preset, "d2h_latency_ns", &ok);
        times[3] = 1.0 / number_attr(preset, "d2h_gbps", &ok);
        times[4] = 1.0;
    }
    double epoch = number_attr(tracker, "_epoch", &ok);
    double miss = number_attr(tracker, "miss_rate", &ok);
    PyObject *order = PyObject_GetAttrString(tracker, "_order");
    Py_ssize_t n_order = order != NULL ? PyObject_Length(order) : -1;
    Py_XDECREF(order);
    if (n_order < 0) {
        PyErr_Clear();
        ok = 0;
    }
    if (!ok || cap <= 0.0)
        Py_RETURN_FALSE;
    Py_buffer buf;
    if (PyObject_GetBuffer(outobj, &buf, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (buf.itemsize != 8 || buf.format == NULL || strcmp(buf.format, "d") != 0 || buf.len / 8 < 17) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "head: out must be a float64 buffer of >= 17 values");
        return NULL;
    }
    double *o = (double *)buf.buf, x = epoch - t;  /* ticks are exact in a double */
    o[0] = (double)n;
    o[1] = t;
    for (int i = 0; i < 3; i++)
        o[2 + i] = pow(2.0, x * ih[i]);  /* Python's 2.0 ** y */
    o[5] = 1.0 / cap;
    for (int i = 0; i < 5; i++)
        o[6 + i] = times[i];
    o[11] = py_min(used / cap, 1.0);
    o[12] = py_min(inflight / cap, 1.0);
    o[13] = py_min(py_max(miss, 0.0), 1.0);
    o[14] = (double)n / (double)K;
    o[15] = now > 0.0 ? stall / now : 0.0;
    o[16] = py_min(log1p((double)n_order) / log_n, 1.0);
    PyBuffer_Release(&buf);
    Py_RETURN_TRUE;
}

/* decision_info(keys, nxt, tick, K, farthest, out_keys, out_dist) -> int
 *
 * envs.common.decision_info's work (the teacher's oracle and next-use distances) on a list of
 * keys and their next uses (a list of ints or an int64 buffer at the same indices, or a dict by
 * key): writes the keys into out_keys (int64, K) and the ticks from tick to each next use
 * into out_dist (float64, K; inf for INF = 2**63 - 1), -1 in the padding, and returns the
 * oracle: with farthest, the candidate used farthest ahead (the largest key among equals);
 * without, the first used soonest (-1 when none is used again); -1 without candidates. */
static PyObject *
fp_decision_info(PyObject *mod, PyObject *args)
{
    PyObject *keys, *nxt, *ko, *dobj;
    long long tick;
    Py_ssize_t K;
    int farthest;
    if (!PyArg_ParseTuple(args, "O!OLnpOO:decision_info", &PyList_Type, &keys, &nxt, &tick, &K,
                          &farthest, &ko, &dobj))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    int by_key = PyDict_CheckExact(nxt), by_list = PyList_CheckExact(nxt);
    Py_buffer bn = {0};
    const long long *nxt_arr = NULL;
    if (!by_key && !by_list) {
        if (PyObject_GetBuffer(nxt, &bn, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
            return NULL;
        if (bn.itemsize != 8 || bn.format == NULL || (strcmp(bn.format, "q") != 0 && strcmp(bn.format, "l") != 0)
            || bn.len / 8 < n) {
            PyBuffer_Release(&bn);
            PyErr_SetString(PyExc_TypeError, "decision_info: nxt must be a list, a dict or an int64 "
                            "array of at least n values");
            return NULL;
        }
        nxt_arr = bn.buf;
    }
    if ((by_list && PyList_GET_SIZE(nxt) != n) || n > K) {
        if (bn.obj != NULL)
            PyBuffer_Release(&bn);
        PyErr_SetString(PyExc_ValueError, "decision_info: keys and nxt of one length n <= K");
        return NULL;
    }
    Py_buffer bk = {0}, bd = {0};
    PyObject *res = NULL;
    if (PyObject_GetBuffer(ko, &bk, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        bk.obj = NULL;
        goto done;
    }
    if (PyObject_GetBuffer(dobj, &bd, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        bd.obj = NULL;
        goto done;
    }
    if (bk.itemsize != 8 || bk.len / 8 != K || (strcmp(bk.format, "q") != 0 && strcmp(bk.format, "l") != 0)
        || bd.itemsize != 8 || bd.len / 8 != K || strcmp(bd.format, "d") != 0) {
        PyErr_SetString(PyExc_ValueError, "decision_info: out_keys int64 (K,), out_dist float64 (K,)");
        goto done;
    }
    long long *ok_ = bk.buf;
    double *od = bd.buf;
    const long long inf_row = 0x7fffffffffffffffLL;  /* allocator.trace.INF */
    Py_ssize_t j = -1;
    long long jk = 0, jx = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long k = PyLong_AsLongLong(PyList_GET_ITEM(keys, i));
        if (k == -1 && PyErr_Occurred())
            goto done;
        long long x;
        if (nxt_arr != NULL) {
            x = nxt_arr[i];
        } else {
            PyObject *xo;
            if (by_key) {
                xo = PyDict_GetItemWithError(nxt, PyList_GET_ITEM(keys, i));
                if (xo == NULL) {
                    if (!PyErr_Occurred())
                        PyErr_SetObject(PyExc_KeyError, PyList_GET_ITEM(keys, i));
                    goto done;
                }
            } else {
                xo = PyList_GET_ITEM(nxt, i);
            }
            x = PyLong_AsLongLong(xo);
            if (x == -1 && PyErr_Occurred())
                goto done;
        }
        ok_[i] = k;
        od[i] = x == inf_row ? Py_HUGE_VAL : (double)(x - tick);
        if (j < 0 || (farthest ? (x > jx || (x == jx && k > jk)) : x < jx)) {
            j = i;
            jk = k;
            jx = x;
        }
    }
    for (Py_ssize_t i = n; i < K; i++) {
        ok_[i] = -1;
        od[i] = -1.0;
    }
    if (!farthest && j >= 0 && jx == inf_row)
        j = -1;
    res = PyLong_FromSsize_t(j);
done:
    if (bk.obj != NULL)
        PyBuffer_Release(&bk);
    if (bd.obj != NULL)
        PyBuffer_Release(&bd);
    if (bn.obj != NULL)
        PyBuffer_Release(&bn);
    return res;
}

/* last_uses(S, v, head, n, next_use, out) -> bool
 *
 * For each of the n candidates whose tracker slots a decision packed into v[head:head + n] (see
 * policies/features.py): the row of the object's last access is the largest tick in its row's
 * ring (FeatureTracker._access writes each access's tick there; in an environment's pool the
 * tick of row r is r), and out[i] = next_use[that row] (int64). False, writing nothing more,
 * when a candidate has no access in its ring or a row lies outside next_use. */
static PyObject *
fp_last_uses(PyObject *mod, PyObject *args)
{
    PyObject *So, *vo, *nuo, *oo;
    Py_ssize_t head, n;
    if (!PyArg_ParseTuple(args, "OOnnOO:last_uses", &So, &vo, &head, &n, &nuo, &oo))
        return NULL;
    if (tracker_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "last_uses: set_tracker() has not run");
        return NULL;
    }
    Py_buffer b[4] = {{0}};
    PyObject *objs[4] = {So, vo, nuo, oo};
    PyObject *res = NULL;
    for (int q = 0; q < 4; q++) {
        if (PyObject_GetBuffer(objs[q], &b[q], PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | (q == 3 ? PyBUF_WRITABLE : 0)) < 0) {
            b[q].obj = NULL;
            goto done;
        }
    }
    int i64[4] = {0, 0, 1, 1};
    for (int q = 0; q < 4; q++) {
        const char *f = b[q].format;
        int ok = b[q].itemsize == 8 && f != NULL
                 && (i64[q] ? (strcmp(f, "q") == 0 || strcmp(f, "l") == 0) : strcmp(f, "d") == 0);
        if (!ok) {
            PyErr_SetString(PyExc_TypeError, "last_uses: S and v float64, next_use and out int64");
            goto done;
        }
    }
    Py_ssize_t rows = b[0].len / 8 / tr_ncol, nv = b[1].len / 8, nn = b[2].len / 8;
    if (n < 0 || head < 0 || head + n > nv || n > b[3].len / 8) {
        PyErr_SetString(PyExc_ValueError, "last_uses: v holds fewer than head + n values, or out fewer than n");
        goto done;
    }
    const double *S = b[0].buf, *v = b[1].buf;
    const long long *nu = b[2].buf;
    long long *out = b[3].buf;
    res = Py_True;
    for (Py_ssize_t i = 0; i < n; i++) {
        double sd = v[head + i];
        if (!(sd >= 0.0 && sd < (double)rows)) {
            res = Py_False;
            break;
        }
        const double *row = S + (Py_ssize_t)sd * tr_ncol + tr_ring0;
        double last = row[0];
        for (Py_ssize_t r = 1; r < tr_ring; r++)
            if (row[r] > last)
                last = row[r];
        if (!(last >= 0.0 && last < (double)nn)) {
            res = Py_False;
            break;
        }
        out[i] = nu[(Py_ssize_t)last];
    }
    Py_INCREF(res);
done:
    for (int q = 0; q < 4; q++)
        if (b[q].obj != NULL)
            PyBuffer_Release(&b[q]);
    return res;
}

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
    {"head", fp_head, METH_VARARGS,
     "head(pool, tracker, n, K, out, consts): a decision's globals (policies/features.py's "
     "_pack head) into out[0:17]; False when the Python code must compute them"},
    {"set_tracker", fp_set_tracker, METH_VARARGS,
     "set_tracker(FeatureTracker, ncol, count, ring0, ring, e0, insert, create, (ih0, ih1, ih2), "
     "alpha, renorm): the tracker class whose hooks the C paths run, and its row layout"},
    {"gather", fp_gather, METH_VARARGS,
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
