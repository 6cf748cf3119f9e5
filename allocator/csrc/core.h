/* allocator._fastpath, part 1 of 5 (see allocator/_fastpath.c): what every part shares --
 * the __slots__ offsets found by setup(), the HitPath and Miss structs, the pool lock's layout
 * and the small helpers (FALLBACK, call_method, exact_ints). */

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
#ifdef Py_T_INT
#define FP_T_INT Py_T_INT
#define FP_T_LONG Py_T_LONG
#else
#define FP_T_INT T_INT
#define FP_T_LONG T_LONG
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
static PyObject *s_h2d_latency_ns, *s_h2d_gbps, *s_d2h_latency_ns, *s_d2h_gbps;  /* a cost preset */
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

/* An exception put aside while cleanup code runs (the version-dependent C API in one place):
 * error_restore puts it back when the cleanup succeeded (ok), and drops it when the cleanup
 * raised (its error wins, as in a Python ``finally``). */
typedef struct {
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc;
#else
    PyObject *et, *ev, *tb;
#endif
} SavedError;

static inline void
error_save(SavedError *e)
{
#if PY_VERSION_HEX >= 0x030C0000
    e->exc = PyErr_GetRaisedException();
#else
    PyErr_Fetch(&e->et, &e->ev, &e->tb);
#endif
}

static inline void
error_restore(SavedError *e, int ok)
{
#if PY_VERSION_HEX >= 0x030C0000
    if (ok && e->exc != NULL)
        PyErr_SetRaisedException(e->exc);
    else
        Py_XDECREF(e->exc);
#else
    if (ok && e->et != NULL) {
        PyErr_Restore(e->et, e->ev, e->tb);
    } else {
        Py_XDECREF(e->et);
        Py_XDECREF(e->ev);
        Py_XDECREF(e->tb);
    }
#endif
}

/* Release the pool's lock, keeping an exception already set (if any). */
static int
release_lock(HitPath *self)
{
    SavedError e;
    error_save(&e);
    PyObject *r = PyObject_Vectorcall(self->release, NULL, 0, NULL);
    int ok = r != NULL;
    Py_XDECREF(r);
    error_restore(&e, ok);
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
