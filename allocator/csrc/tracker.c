/* allocator._fastpath, part 3 of 5 (see allocator/_fastpath.c): policies.features.FeatureTracker's
 * per-access hooks, run by the C hit and miss paths when the tracker is the pool's policy. */

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
    *s_append, *s_free_slots, *s_next, *s_on_free, *s_on_free_untracked;

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

/* tr_open, or, when the tracker's attributes are not the usual ones, its Python method ``name``
 * (view, key) in its place: 1 (opened), 0 (the method ran: nothing left to do) or -1. */
static int
tr_open_or_call(PyObject *tracker, Tracked *t, PyObject *name, PyObject *view, PyObject *key)
{
    int ok = tr_open(tracker, t);
    if (ok != 0)
        return ok;
    PyObject *r = call_method(name, tracker, view, key, NULL);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
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

/* The row of key for record o: its current one, else a new slot (FeatureTracker.on_miss and
 * on_insert's test; _new_slot may run the Python method, which rebinds only _S and _V, read
 * afresh by tr_row). The slot, or -1 with an exception. */
static long long
tr_slot_for(HitPath *self, PyObject *tracker, Tracked *tk, PyObject *view, PyObject *key,
            PyObject *o, long long t)
{
    long long s = tr_current_slot(self, tk, key, o);
    if (s == -1)
        s = tr_new_slot(self, tracker, tk, view, key, o, t);
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

/* The tracker's miss_rate (its EWMA of demand misses) set to v: 0, or -1 with an exception */
static int
tr_set_miss_rate(Tracked *tk, double v)
{
    PyObject *mr = PyFloat_FromDouble(v);
    int r = mr == NULL ? -1 : PyDict_SetItem(tk->d, s_miss_rate, mr);
    Py_XDECREF(mr);
    return r;
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
    if (tr_set_miss_rate(&tk, PyFloat_AS_DOUBLE(tk.miss_rate) * (1.0 - tr_alpha)) == 0
        && tr_move_to_end(tk.order, key) == 0)
        ret = tr_access(self, tracker, tk.d, s, t);
    Py_DECREF(tk.d);
    return ret;
}

/* FeatureTracker.on_miss(view, key) at tick t, o the key's record */
static int
tr_miss(HitPath *self, PyObject *tracker, PyObject *view, PyObject *key, PyObject *o, long long t)
{
    Tracked tk;
    int ok = tr_open_or_call(tracker, &tk, s_on_miss, view, key);
    if (ok <= 0)
        return ok;
    int ret = -1;
    double m0 = PyFloat_AS_DOUBLE(tk.miss_rate);
    if (tr_set_miss_rate(&tk, m0 + tr_alpha * (1.0 - m0)) == 0) {
        long long s = tr_slot_for(self, tracker, &tk, view, key, o, t);
        if (s >= 0)
            ret = tr_access(self, tracker, tk.d, s, t);
    }
    Py_DECREF(tk.d);
    return ret;
}

/* FeatureTracker.on_insert(view, key) at tick t, o the key's record (with _add_resident) */
static int
tr_insert(HitPath *self, PyObject *tracker, PyObject *view, PyObject *key, PyObject *o, long long t)
{
    Tracked tk;
    int ok = tr_open_or_call(tracker, &tk, s_on_insert, view, key);
    if (ok <= 0)
        return ok;
    int ret = -1;
    PyObject *so = NULL, *n = NULL;
    long long s = tr_slot_for(self, tracker, &tk, view, key, o, t);
    if (s < 0)
        goto done;
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
    int ok = tr_open_or_call(tracker, &tk, free ? s_on_free : s_on_evict, view, key);
    if (ok <= 0)
        return ok;
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
