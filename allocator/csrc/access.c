/* allocator._fastpath, part 4 of 5 (see allocator/_fastpath.c): Pool.access in C -- a victim's
 * eviction, the plain miss (suspendable at its eviction decision), the plain hit, free, the
 * environments' row loop; the HitPath type and AccessDescriptor (Pool.access's descriptor). */

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
    SavedError e;
    error_save(&e);
    PyObject *r = call_method(s_undo_miss, self->pool, m->o, m->size, m->old_size);
    Py_XDECREF(r);
    error_restore(&e, r != NULL);
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
    if (state == 1) {  /* in host memory: a policy's on_free_untracked runs in Pool._free */
        PyObject *hook = NULL;  /* looked up without raising AttributeError when it is absent */
#if PY_VERSION_HEX >= 0x030D0000
        int has = PyObject_GetOptionalAttr(policy, s_on_free_untracked, &hook);
#else
        int has = _PyObject_LookupAttr(policy, s_on_free_untracked, &hook);
#endif
        if (has < 0)
            return NULL;
        has = has && hook != Py_None;  /* None: the policy has nothing to be told */
        Py_XDECREF(hook);
        if (has)
            Py_RETURN_NOTIMPLEMENTED;
    }
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

/* The Python function a C path stands for (None when cleared), and its docstring: what
 * __wrapped__ and __doc__ answer for HitPath and AccessDescriptor */
static PyObject *
wrapped_or_none(PyObject *f)
{
    return Py_NewRef(f != NULL ? f : Py_None);
}

static PyObject *
doc_of(PyObject *f)
{
    return f != NULL ? PyObject_GetAttrString(f, "__doc__") : Py_NewRef(Py_None);
}

static PyObject *
hp_get_wrapped(HitPath *self, void *closure)
{
    return wrapped_or_none(self->fallback);
}

static PyObject *
hp_get_doc(HitPath *self, void *closure)
{
    return doc_of(self->fallback);
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
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef hp_members[] = {  /* read-only ints (1 / 0 for the flags) */
    {"enabled", FP_T_INT, offsetof(HitPath, enabled), FP_READONLY, "whether plain hits are served in C"},
    {"peek", FP_T_INT, offsetof(HitPath, peek), FP_READONLY, "whether the lock is checked without a call"},
    {"pending", FP_T_INT, offsetof(HitPath, pending), FP_READONLY, "whether a miss waits for resume(victim)"},
    {"misses", FP_T_LONG, offsetof(HitPath, misses), FP_READONLY, "misses served in C so far"},
    {"calls", FP_T_LONG, offsetof(HitPath, calls), FP_READONLY, "hits served in C so far"},
    {NULL, 0, 0, 0, NULL},
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
    .tp_members = hp_members,
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
    return wrapped_or_none(self->func);
}

static PyObject *
ad_get_doc(AccessDescr *self, void *closure)
{
    return doc_of(self->func);
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
