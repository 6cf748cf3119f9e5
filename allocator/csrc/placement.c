/* allocator._fastpath, part 2 of 5 (see allocator/_fastpath.c): the placements -- Arena.alloc /
 * release and ByteAccounting's counters as the same steps on the same structures
 * (allocator/arena.py), and PlaceRelease, Pool._place_release as a C callable. */

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
