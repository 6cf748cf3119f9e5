/* The plain-hit branch of allocator.pool.Pool.access in C (optional; see allocator/pool.py).
 *
 * A HitPath belongs to one pool; ``pool.access`` is that HitPath (through AccessDescriptor, the
 * class attribute Pool.access) while the pool's configuration allows a plain hit (no
 * prefetcher, no hook, no pending evictions, a policy with ``touch``). A call does exactly what Pool.access does for an object
 * resident on the device:
 *
 *     _tick += 1; stats.accesses += 1; stats.hits += 1; o.last_tick = _tick; o.n_access += 1
 *     if o.prefetched: o.prefetched = False; stats.prefetch_hits += 1
 *     if write: o.dirty = True
 *     touch(key); if compute_ns: cost.compute(compute_ns)
 *
 * and hands every other call (miss, not resident, in flight, a write under write-through,
 * unusual argument types or keywords, the pool's lock held by another thread) to the Python
 * method unchanged, which holds the one access loop.
 *
 * Locking: nothing is written unless the pool's RLock is free or held by this thread, and the
 * GIL stays held from the first read to the last write. Two ways to know it:
 *  - peek (the common case): setup() finds where _thread.RLock keeps its owner and count, checking
 *    the layout on a live lock (acquire, acquire again, release twice); a count of 0 or this
 *    thread as owner means no other thread is inside the pool. This applies only when nothing in
 *    the section can run Python code (touch is OrderedDict.move_to_end, no compute), so no other
 *    thread can run before the path returns. (A thread that has taken the OS lock but not yet set
 *    the owner is still waiting for the GIL: it has not begun its section.)
 *  - otherwise (another layout, a Python touch, compute_ns): the lock's own acquire(False) and
 *    release(), which really take it; acquire(False) never releases the GIL.
 * When another thread holds the lock, the call goes to the Python method, which blocks as usual.
 *
 * Invariant: every check that can send a call to the Python method comes before the first
 * write, so a call that falls back has changed nothing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

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
static PyTypeObject *info_type = NULL, *stats_type = NULL, *pool_type = NULL;
static Py_ssize_t off_state, off_dirty, off_prefetched, off_last_tick, off_n_access;
static Py_ssize_t off_accesses, off_hits, off_prefetch_hits;
static Py_ssize_t off_pool_tick, off_pool_stats, off_pool_hit_path;
/* where _thread.RLock keeps its owner and count (rlock_type NULL: unknown layout) */
static PyTypeObject *rlock_type = NULL;
static Py_ssize_t off_rlock_owner, off_rlock_count;
static PyObject *s_tick, *s_stats, *s_cost, *s_compute, *s_write, *s_kind, *s_compute_ns;
static PyObject *one;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

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
    long calls;          /* hits served here (for tests and the benchmark) */
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
    PyTypeObject *it, *st, *pt;
    PyObject *lock;
    if (!PyArg_ParseTuple(args, "O!O!O!O:setup", &PyType_Type, &it, &PyType_Type, &st,
                          &PyType_Type, &pt, &lock))
        return NULL;
    if (slot_offset(it, "state", &off_state) || slot_offset(it, "dirty", &off_dirty)
        || slot_offset(it, "prefetched", &off_prefetched)
        || slot_offset(it, "last_tick", &off_last_tick)
        || slot_offset(it, "n_access", &off_n_access)
        || slot_offset(st, "accesses", &off_accesses) || slot_offset(st, "hits", &off_hits)
        || slot_offset(st, "prefetch_hits", &off_prefetch_hits)
        || slot_offset(pt, "_tick", &off_pool_tick) || slot_offset(pt, "stats", &off_pool_stats)
        || slot_offset(pt, "_hit_path", &off_pool_hit_path))
        return NULL;
    if (calibrate_rlock(lock) < 0)
        return NULL;
    Py_INCREF(it);
    Py_INCREF(st);
    Py_INCREF(pt);
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

static PyObject *
hp_vectorcall(PyObject *self_, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    HitPath *self = (HitPath *)self_;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *key, *write = NULL, *compute = NULL, *pool = self->pool, *r;
    int w = 0, c = 0, locked = 0;

    if (!self->enabled || nargs < 2 || nargs > 3)
        goto fallback;
    key = args[0];
    if (!PyLong_CheckExact(key))
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
                ;  /* a hit does not read kind */
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
    if (w && !self->fast_write)
        goto fallback;

    if (self->peek && !c) {
        /* nobody else inside the pool (see the header); nothing below runs Python code */
        size_t count = *(size_t *)((char *)self->lock + off_rlock_count);
        if (count != 0
            && *(size_t *)((char *)self->lock + off_rlock_owner) != (size_t)PyThread_get_thread_ident())
            goto fallback;
    } else {
        PyObject *argv[2] = {NULL, Py_False};
        r = PyObject_Vectorcall(self->acquire, argv + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (r == NULL)
            return NULL;
        locked = r == Py_True;
        Py_DECREF(r);
        if (!locked)
            goto fallback;  /* another thread is inside the pool */
    }

    PyObject *o = PyDict_GetItemWithError(self->objs, key);  /* borrowed */
    if (o == NULL) {
        PyErr_Clear();
        goto unlock_fallback;
    }
    if (Py_TYPE(o) != info_type)
        goto unlock_fallback;
    PyObject *state = SLOT(o, off_state), *pref = SLOT(o, off_prefetched);
    PyObject *nacc = SLOT(o, off_n_access);
    PyObject *stats = SLOT(pool, off_pool_stats), *tick = SLOT(pool, off_pool_tick);
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
    r = PyObject_Vectorcall(self->touch, &key, 1, NULL);
    if (r == NULL)
        goto error;
    Py_DECREF(r);
    if (c) {
        PyObject *cost = PyObject_GetAttr(pool, s_cost);
        if (cost == NULL)
            goto error;
        PyObject *cargs[2] = {cost, compute};
        r = PyObject_VectorcallMethod(s_compute, cargs, 2, NULL);
        Py_DECREF(cost);
        if (r == NULL)
            goto error;
        Py_DECREF(r);
    }
    if (locked && release_lock(self) < 0)
        return NULL;
    Py_RETURN_TRUE;

error:
    if (locked)
        release_lock(self);
    return NULL;

unlock_fallback:
    if (locked && release_lock(self) < 0)
        return NULL;
fallback:
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
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
    int enabled, fast_write;
    PyObject *touch;
    if (!PyArg_ParseTuple(args, "ppO:configure", &enabled, &fast_write, &touch))
        return NULL;
    if (touch == Py_None) {
        touch = NULL;
    } else if (!PyCallable_Check(touch)) {
        PyErr_SetString(PyExc_TypeError, "HitPath.configure: touch must be callable or None");
        return NULL;
    }
    Py_XINCREF(touch);
    Py_XSETREF(self->touch, touch);
    self->fast_write = fast_write;
    self->enabled = enabled && touch != NULL && self->pool != NULL && info_type != NULL;
    self->peek = self->enabled && rlock_type != NULL && Py_TYPE(self->lock) == rlock_type
                 && touch_is_builtin(touch);
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
hp_get_calls(HitPath *self, void *closure)
{
    return PyLong_FromLong(self->calls);
}

static PyMethodDef hp_methods[] = {
    {"configure", (PyCFunction)hp_configure, METH_VARARGS,
     "configure(enabled, fast_write, touch): the pool's fast-path configuration changed"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef hp_getset[] = {
    {"__wrapped__", (getter)hp_get_wrapped, NULL, "the Python method this path accelerates", NULL},
    {"__doc__", (getter)hp_get_doc, NULL, NULL, NULL},
    {"enabled", (getter)hp_get_enabled, NULL, "whether plain hits are served in C", NULL},
    {"peek", (getter)hp_get_peek, NULL, "whether the lock is checked without a call", NULL},
    {"calls", (getter)hp_get_calls, NULL, "hits served in C so far", NULL},
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

static void
ad_dealloc(AccessDescr *self)
{
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->func);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
ad_traverse(AccessDescr *self, visitproc visit, void *arg)
{
    Py_VISIT(self->func);
    return 0;
}

static int
ad_clear(AccessDescr *self)
{
    Py_CLEAR(self->func);
    return 0;
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
    .tp_dealloc = (destructor)ad_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "AccessDescriptor(func): pool.access is the pool's HitPath while it is enabled",
    .tp_traverse = (traverseproc)ad_traverse,
    .tp_clear = (inquiry)ad_clear,
    .tp_getset = ad_getset,
    .tp_descr_get = (descrgetfunc)ad_get,
    .tp_new = ad_new,
};

static PyMethodDef fp_methods[] = {
    {"setup", fp_setup, METH_VARARGS,
     "setup(ObjectInfo, PoolStats, Pool, RLock()): find the __slots__ the hit path reads and "
     "writes and the lock's layout; returns whether the layout is known"},
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
    if (PyType_Ready(&HitPathType) < 0 || PyType_Ready(&AccessDescrType) < 0)
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
#undef INTERN
    if ((one = PyLong_FromLong(1)) == NULL)
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
    Py_INCREF(&AccessDescrType);
    if (PyModule_AddObject(m, "AccessDescriptor", (PyObject *)&AccessDescrType) < 0) {
        Py_DECREF(&AccessDescrType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
