/* allocator._fastpath, part 5 of 5 (see allocator/_fastpath.c): an eviction decision's inputs for
 * policies/features.py and the environments -- candidate gathering, the global features (head),
 * the teacher's info (decision_info) and candidates' next uses (last_uses). */

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

/* 1 when b (a buffer asked for with PyBUF_FORMAT) holds float64 values, at least n of them:
 * the output buffers of gather, pack and head */
static inline int
f64_buffer(const Py_buffer *b, Py_ssize_t n)
{
    return b->itemsize == 8 && b->format != NULL && strcmp(b->format, "d") == 0 && b->len / 8 >= n;
}

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
    /* a record's fields are small non-negative ints: read one digit instead of calling out */
#if PY_VERSION_HEX >= 0x030C0000
    if (PyUnstable_Long_IsCompact((PyLongObject *)v))
        return (long)PyUnstable_Long_CompactValue((PyLongObject *)v);
#elif !defined(Py_LIMITED_API)
    if (Py_SIZE(v) == 0 || Py_SIZE(v) == 1)
        return Py_SIZE(v) == 0 ? 0 : (long)((PyLongObject *)v)->ob_digit[0];
#endif
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

/* The state code of any record (policies/features.py's _state_code: dirty + 2 * prefetched +
 * (8, 0, 12, 0)[state] + 16 * kind, pins aside); -2 when the record holds something unusual. */
static long
rec_code_any(PyObject *o)
{
    static const long by_state[4] = {8, 0, 12, 0};  /* DEVICE, HOST, H2D, D2H */
    if (Py_TYPE(o) != info_type)
        return -2;
    long state = small_int(SLOT(o, off_state)), dirty = small_int(SLOT(o, off_dirty));
    long pre = small_int(SLOT(o, off_prefetched)), kind = small_int(SLOT(o, off_kind));
    if (state < 0 || state > 3 || dirty < 0 || dirty > 1 || pre < 0 || pre > 1 || kind < 0 || kind > 1000)
        return -2;
    return dirty + 2 * pre + by_state[state] + 16 * kind;
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

/* numpy's random_interval (numpy/random/src/distributions/distributions.c): a uniform integer in
 * [0, max] by masked rejection, 32-bit draws while max fits in 32 bits */
static uint64_t
np_random_interval(fp_bitgen_t *bg, uint64_t max)
{
    if (max == 0)
        return 0;
    uint64_t mask = max, value;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    if (max <= 0xffffffffUL) {
        while ((value = (bg->next_uint32(bg->state) & mask)) > max)
            ;
    } else {
        while ((value = (bg->next_uint64(bg->state) & mask)) > max)
            ;
    }
    return value;
}

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

/* gather(src, objs, slots, K, out, base, rng=None, m=0, recs=None, rslots=None, rows=None)
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
 *      them, the first K of rng.permutation(count) pick among them (numpy's shuffle steps,
 *      in C, from the same bit generator).
 * With recs and rslots (the tracker's records and slots by resident index: for rule "sample"
 * at the same indices as src; for rule "lru" found through slots, then the tracker's key ->
 * index map) the records are read from there instead of looked up by key, the answers the same.
 * With rows (the tracker's float64 rows) the candidates' rows are asked for in the cache (the
 * feature kernel reads them next). Then writes the slots into out[base:base+n] and the state
 * codes into out[base+K:base+K+n]
 * (out: a float64 buffer) and returns the keys (a list of n <= K). Otherwise changes nothing in
 * out and returns None (nothing drawn: run the Python path from the start) or False (rule
 * "sample" after the draw: continue the Python path past its first draw).
 */
static PyObject *
fp_gather(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 6 || nargs > 11 || !PyDict_Check(args[1]) || !PyDict_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "gather(src, objs: dict, slots: dict, K, out, base, rng=None, "
                        "m=0, recs=None, rslots=None, rows=None)");
        return NULL;
    }
    PyObject *src = args[0], *objs = args[1], *slots = args[2], *outobj = args[4];
    PyObject *rng = nargs > 6 ? args[6] : Py_None, *recs = nargs > 8 ? args[8] : Py_None;
    PyObject *rslots_obj = nargs > 9 ? args[9] : Py_None, *rows = nargs > 10 ? args[10] : Py_None;
    Py_ssize_t K = PyLong_AsSsize_t(args[3]), base = PyLong_AsSsize_t(args[5]);
    Py_ssize_t m = nargs > 7 ? PyLong_AsSsize_t(args[7]) : 0;
    if ((K == -1 || base == -1 || m == -1) && PyErr_Occurred())
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
    if (recs != Py_None && rslots_obj != Py_None) {
        if (!PyList_CheckExact(recs)
            || PyObject_GetBuffer(rslots_obj, &rb, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
            PyErr_Clear();
            rb.obj = NULL;
        } else if (rb.itemsize == 8 && rb.format != NULL
                   && (strcmp(rb.format, "q") == 0 || strcmp(rb.format, "l") == 0)
                   && rb.len / 8 == PyList_GET_SIZE(recs)
                   && (rng == Py_None || PyList_GET_SIZE(recs) == PyList_GET_SIZE(src))) {
            rslots = (const long long *)rb.buf;
        }
    }
    /* rule "lru" with recs and rslots: the tracker's key -> index map of its residents (slots is
     * then that map, _res_pos): one lookup per candidate instead of the record's and the slot's */
    int by_pos = rng == Py_None && rslots != NULL;
    double *out = (double *)buf.buf, *tmp = NULL;
    /* tmp: slots in [0, stride), codes in [stride, 2 * stride); the answer's codes end up at
     * tmp + K */
    Py_ssize_t stride = K;
    PyObject *result = Py_None;  /* the answer when a case does not serve */
    if (!f64_buffer(&buf, base + 2 * K)) {
        PyErr_SetString(PyExc_ValueError, "gather: out must be a float64 buffer of base + 2K values");
        goto error;
    }
    if (rng != Py_None && PyList_GET_SIZE(src) <= 4 * K)
        stride = PyList_GET_SIZE(src);  /* the scan: every resident may be a candidate */
    tmp = PyMem_Malloc(2 * (size_t)(stride > K ? stride : K) * sizeof(double));
    /* the draws (rule "sample", n > 4K) fill all K keys in place; the other cases append */
    keys = PyList_New(rng != Py_None && PyList_GET_SIZE(src) > 4 * K ? K : 0);
    if (tmp == NULL || keys == NULL) {
        if (tmp == NULL)
            PyErr_NoMemory();
        goto error;
    }
    if (rng == Py_None) {
        if (recs != Py_None && !by_pos)  /* slots is the index map, but the lists do not serve */
            goto pass;
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
            int r;
            if (by_pos) {
                PyObject *po = PyDict_GetItemWithError(slots, k);
                Py_ssize_t j = po != NULL && PyLong_CheckExact(po) ? PyLong_AsSsize_t(po) : -1;
                if (j < 0 || j >= PyList_GET_SIZE(recs)) {
                    PyErr_Clear();
                    r = 2;  /* not where the lists say: the Python path decides */
                } else {
                    r = gather_at(k, recs, rslots, j, tmp, i, stride);
                }
            } else {
                r = gather_one(k, objs, slots, tmp, i, stride);
            }
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
        } else {  /* rng.permutation(c)[:K] picks K of them: numpy's own steps (Generator.shuffle of
                   * arange(c): i from c - 1 down to 1 swaps with random_interval(i)), the same
                   * draws from the same bit generator (tests hold it equal to the Python call) */
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
            for (Py_ssize_t i = c - 1; i >= 1; i--) {
                Py_ssize_t j = (Py_ssize_t)np_random_interval(bg, (uint64_t)i);
                Py_ssize_t t = idx[i];
                idx[i] = idx[j];
                idx[j] = t;
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
        /* the indices drawn so far, in an open-addressing set (-1: empty) of at least 2 m slots
         * on the stack for the usual m (K = 32: m = 52): a draw is checked in a step or two
         * instead of against every index before it */
        Py_ssize_t hstack[256], *hset = hstack, hmask = 255;
        while (hmask + 1 < 2 * m)
            hmask = 2 * hmask + 1;
        if (hmask > 255 && (hset = PyMem_Malloc((size_t)(hmask + 1) * sizeof(Py_ssize_t))) == NULL) {
            PyErr_NoMemory();
            goto error;
        }
        memset(hset, 0xff, (size_t)(hmask + 1) * sizeof(Py_ssize_t));
        for (Py_ssize_t j = 0; j < m; j++) {  /* all m drawn, as Generator.random(m) */
            double x = bg->next_double(bg->state);
            if (c == K)
                continue;
            Py_ssize_t v = (Py_ssize_t)(x * (double)n);  /* truncation, as astype(np.intp) */
            Py_ssize_t h = (Py_ssize_t)(((uint64_t)v * 0x9E3779B97F4A7C15ULL) >> 40) & hmask;
            while (hset[h] != -1 && hset[h] != v)
                h = (h + 1) & hmask;
            if (hset[h] == -1) {  /* fresh */
                hset[h] = v;
                idx[c++] = v;
            }
        }
        if (hset != hstack)
            PyMem_Free(hset);
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
        for (Py_ssize_t i = 0; i < K; i++) {  /* all K keys or none (keys has K empty items) */
            if (idx[i] >= PyList_GET_SIZE(src))  /* cannot happen: x < 1 */
                goto pass;
            PyObject *k = PyList_GET_ITEM(src, idx[i]);
            Py_INCREF(k);
            PyList_SET_ITEM(keys, i, k);  /* keys holds it alive through a comparison's code */
            int r = rslots != NULL ? gather_at(k, recs, rslots, idx[i], tmp, i, stride)
                                   : gather_one(k, objs, slots, tmp, i, stride);
            if (r < 0)
                goto error;
            if (r != 1)
                goto pass;
        }
    }
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (rows != Py_None && tracker_type != NULL) {  /* the candidates' tracker rows, asked for
                                                    * now: the feature kernel reads them next */
        Py_buffer sb;
        if (PyObject_GetBuffer(rows, &sb, PyBUF_C_CONTIGUOUS) == 0) {
            const char *S = sb.buf;
            Py_ssize_t rowb = tr_ncol * (Py_ssize_t)sizeof(double);
            for (Py_ssize_t i = 0; i < n; i++) {
                Py_ssize_t at = (Py_ssize_t)tmp[i] * rowb;
                if (at >= 0 && at + rowb <= sb.len) {
                    __builtin_prefetch(S + at);
                    __builtin_prefetch(S + at + rowb - 1);
                }
            }
            PyBuffer_Release(&sb);
        } else {
            PyErr_Clear();
        }
    }
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

/* pack(keys, objs, slots, K, out, base) -> bool
 *
 * policies/features.py's _pack for candidates of any state (a prefetch decision's are on the
 * host or being written back): each key's slot (slots: the tracker's key -> slot map) into
 * out[base + i] and its state code into out[base + K + i], for a list of n <= K keys. False,
 * writing nothing, when a key has no slot or no record, or a record is unusual (the Python
 * code then packs). */
static PyObject *
fp_pack(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyList_CheckExact(args[0]) || !PyDict_Check(args[1]) || !PyDict_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "pack(keys: list, objs: dict, slots: dict, K, out, base)");
        return NULL;
    }
    PyObject *keys = args[0], *objs = args[1], *slots = args[2];
    Py_ssize_t K = PyLong_AsSsize_t(args[3]), base = PyLong_AsSsize_t(args[5]);
    if ((K == -1 || base == -1) && PyErr_Occurred())
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (info_type == NULL || n > K || base < 0)
        Py_RETURN_FALSE;
    Py_buffer b;
    if (PyObject_GetBuffer(args[4], &b, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    PyObject *res = NULL;
    double *tmp = PyMem_Malloc(2 * (size_t)(n > 0 ? n : 1) * sizeof(double));
    if (tmp == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (!f64_buffer(&b, base + 2 * K)) {
        PyErr_SetString(PyExc_ValueError, "pack: out must be a float64 buffer of base + 2K values");
        goto done;
    }
    res = Py_False;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = Py_NewRef(PyList_GET_ITEM(keys, i));  /* held through the lookups */
        PyObject *o = PyDict_GetItemWithError(objs, k);
        PyObject *sl = o != NULL ? PyDict_GetItemWithError(slots, k) : NULL;
        Py_DECREF(k);
        if (sl == NULL) {
            if (PyErr_Occurred())
                res = NULL;
            goto done;
        }
        long code = rec_code_any(o), slot = PyBool_Check(sl) ? -1 : small_int(sl);
        if (code < 0 || slot < 0)
            goto done;
        tmp[i] = (double)slot;
        tmp[n + i] = (double)code;
    }
    double *out = (double *)b.buf + base;
    memcpy(out, tmp, (size_t)n * sizeof(double));
    memcpy(out + K, tmp + n, (size_t)n * sizeof(double));
    res = Py_True;
done:
    Py_XINCREF(res);
    PyMem_Free(tmp);
    PyBuffer_Release(&b);
    return res;
}

/* propose(succ, key, K, hops, objs) -> list | None
 *
 * envs.candidates.SuccessorPredictor.propose, reading the pool's records (objs): breadth-first
 * from key over succ (key -> dict of its successors, least recent first), the most recent
 * successors first, up to hops levels; the first K objects the pool knows that are on the host
 * or being written back (HOST, D2H: what a prefetch can bring in). None when an object is not
 * of the usual types (the Python method then serves). */
static PyObject *
fp_propose(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyDict_Check(args[0]) || !PyDict_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "propose(succ: dict, key, K, hops, objs: dict)");
        return NULL;
    }
    PyObject *succ = args[0], *key = args[1], *objs = args[4];
    Py_ssize_t K = PyLong_AsSsize_t(args[2]), hops = PyLong_AsSsize_t(args[3]);
    if ((K == -1 || hops == -1) && PyErr_Occurred())
        return NULL;
    if (info_type == NULL || hops < 1)
        Py_RETURN_NONE;
    PyObject *out = PyList_New(0), *seen = PySet_New(NULL), *frontier = PyList_New(0), *nxt = NULL;
    PyObject *res = NULL, **tmp = NULL;
    Py_ssize_t ntmp = 0, nheld = 0;  /* tmp's size, and how many of its first keys are held */
    if (out == NULL || seen == NULL || frontier == NULL || PySet_Add(seen, key) < 0
        || PyList_Append(frontier, key) < 0)
        goto done;
    for (Py_ssize_t hop = 0; hop < hops; hop++) {
        int last = hop == hops - 1;
        Py_XSETREF(nxt, last ? NULL : PyList_New(0));
        if (!last && nxt == NULL)
            goto done;
        for (Py_ssize_t f = 0; f < PyList_GET_SIZE(frontier); f++) {
            PyObject *s = PyDict_GetItemWithError(succ, PyList_GET_ITEM(frontier, f));
            if (s == NULL) {
                if (PyErr_Occurred())
                    goto done;
                continue;
            }
            if (!PyDict_CheckExact(s))
                goto unusual;
            Py_ssize_t n = PyDict_GET_SIZE(s), pos = 0, j = 0;
            if (n == 0)
                continue;
            if (n > ntmp) {  /* its keys, to walk them most recent first */
                PyObject **t = PyMem_Realloc(tmp, (size_t)n * sizeof(PyObject *));
                if (t == NULL) {
                    PyErr_NoMemory();
                    goto done;
                }
                tmp = t;
                ntmp = n;
            }
            PyObject *z, *val;
            while (j < n && PyDict_Next(s, &pos, &z, &val))
                tmp[j++] = Py_NewRef(z);  /* held: a key's __hash__ or __eq__ could change s */
            nheld = j;
            while (j-- > 0) {
                z = tmp[j];
                int r = PySet_Contains(seen, z);
                if (r < 0 || (r == 0 && PySet_Add(seen, z) < 0))
                    goto done;
                if (r)
                    continue;
                if (!last && PyList_Append(nxt, z) < 0)
                    goto done;
                PyObject *o = PyDict_GetItemWithError(objs, z);
                if (o == NULL) {
                    if (PyErr_Occurred())
                        goto done;
                    continue;
                }
                long st = Py_TYPE(o) == info_type ? small_int(SLOT(o, off_state)) : -1;
                if (st < 0 || st > 3)
                    goto unusual;
                if (st != 1 && st != 3)  /* not HOST, not D2H */
                    continue;
                if (PyList_Append(out, z) < 0)
                    goto done;
                if (PyList_GET_SIZE(out) == K) {
                    res = Py_NewRef(out);
                    goto done;
                }
            }
            for (; nheld > 0; nheld--)
                Py_DECREF(tmp[nheld - 1]);
        }
        if (last || PyList_GET_SIZE(nxt) == 0)
            break;
        Py_SETREF(frontier, Py_NewRef(nxt));
    }
    res = Py_NewRef(out);
    goto done;
unusual:
    res = Py_NewRef(Py_None);
done:
    for (; nheld > 0; nheld--)
        Py_DECREF(tmp[nheld - 1]);
    PyMem_Free(tmp);
    Py_XDECREF(nxt);
    Py_XDECREF(frontier);
    Py_XDECREF(seen);
    Py_XDECREF(out);
    return res;
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

/* A float or int attribute of obj (an interned name) as a double; sets *ok = 0 when it is
 * neither. */
static double
number_attr(PyObject *obj, PyObject *name, int *ok)
{
    PyObject *v = PyObject_GetAttr(obj, name);
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
fp_head(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyTuple_Check(args[5]) || PyTuple_GET_SIZE(args[5]) != 4) {
        PyErr_SetString(PyExc_TypeError, "head(pool, tracker, n, K, out, (ih0, ih1, ih2, log_n))");
        return NULL;
    }
    PyObject *pool = args[0], *tracker = args[1], *outobj = args[4];
    Py_ssize_t n = PyLong_AsSsize_t(args[2]), K = PyLong_AsSsize_t(args[3]);
    if ((n == -1 || K == -1) && PyErr_Occurred())
        return NULL;
    double ih[3], log_n;
    for (int i = 0; i < 4; i++) {
        double c = PyFloat_AsDouble(PyTuple_GET_ITEM(args[5], i));
        if (c == -1.0 && PyErr_Occurred())
            return NULL;
        if (i < 3)
            ih[i] = c;
        else
            log_n = c;
    }
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
        times[0] = number_attr(preset, s_h2d_latency_ns, &ok);
        times[1] = 1.0 / number_attr(preset, s_h2d_gbps, &ok);
        times[2] = number_attr(preset, s_d2h_latency_ns, &ok);
        times[3] = 1.0 / number_attr(preset, s_d2h_gbps, &ok);
        times[4] = 1.0;
    }
    double epoch = number_attr(tracker, s_epoch, &ok);
    double miss = number_attr(tracker, s_miss_rate, &ok);
    PyObject *order = PyObject_GetAttr(tracker, s_order);
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
    if (!f64_buffer(&buf, 17)) {
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
 * keys and their next uses (a list of ints or an int64 buffer at the same indices): writes the keys into out_keys (int64, K) and the ticks from tick to each next use
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
    int by_list = PyList_CheckExact(nxt);
    Py_buffer bn = {0};
    const long long *nxt_arr = NULL;
    if (!by_list) {
        if (PyObject_GetBuffer(nxt, &bn, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
            return NULL;
        if (bn.itemsize != 8 || bn.format == NULL || (strcmp(bn.format, "q") != 0 && strcmp(bn.format, "l") != 0)
            || bn.len / 8 < n) {
            PyBuffer_Release(&bn);
            PyErr_SetString(PyExc_TypeError, "decision_info: nxt must be a list or an int64 array of "
                            "at least n values");
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
        long long x = nxt_arr != NULL ? nxt_arr[i] : PyLong_AsLongLong(PyList_GET_ITEM(nxt, i));
        if (x == -1 && PyErr_Occurred())
            goto done;
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
