# Native layout of allocator/loop.py (Cython pure-Python mode: this file types the .py when it
# is compiled; interpreted, the .py runs as it is). Attributes are public where other modules or
# tests read them; the loop's methods stay Python-visible (a subclass or a test may call them).
cimport cython
from cachegym.allocator.arena cimport Arena, ByteAccounting, Placement
from cachegym.allocator.cost cimport CostModel
from cachegym.allocator.records cimport Counters, ObjectInfo


cdef void _check_request(str op, bint new, object key, object size) except *
cdef object _keys_of(object got, str hook)
cdef bint _yes(object got) except -1


cdef class Loop:
    cdef public long long capacity
    cdef public CostModel cost
    cdef public object backend, placement
    cdef public bint bypass_oversize
    cdef public Counters stats
    cdef public object view
    cdef public object _policy, _prefetcher, _hook
    cdef public bint _write_through, _fast_read, _fast_write, _writing
    cdef public object _touch, _on_hit, _on_miss, _admit, _due, _on_insert, _on_evict, _on_free, _victim
    cdef public Placement _place
    cdef public long long _fp_mask, _tick, _pending_release_bytes, _inflight_bytes, _pinned_bytes, _seq, _defer_ns
    cdef public long long _n_evictable, _alloc_retries, _peak_allocated, _num_ooms
    cdef public dict _objs
    cdef public object _lock, _acquire, _release
    cdef public list _landing, _releases, _owed
    cdef public bint _forget
    cdef public Py_ssize_t _forget_above
    cdef public set _seen
    cdef public long long _clean_ahead
    cdef public bint _wrote
    cdef public bint _deciding, _whole, _closed
    cdef public object _event_thread, _event_over
    cdef public long long _n_waiting
    cdef object __weakref__

    # the loop's inner steps, called as C methods by the loop itself (still Python-visible)
    @cython.locals(o=ObjectInfo, st=Counters, tick=cython.longlong, need=cython.longlong,
                   old_size=cython.longlong, place=Placement)
    cpdef object _access(self, object key, object size, bint write, int kind, long long compute_ns)
    @cython.locals(o=ObjectInfo, st=Counters, need=cython.longlong, old_size=cython.longlong, landing=bint,
                   refused=bint, place=Placement)
    cpdef tuple _begin(self, object key, object size, int kind, bint write)
    @cython.locals(need=cython.longlong)
    cpdef long long _check_miss(self, ObjectInfo o, object key, object size) except -1
    @cython.locals(o=ObjectInfo)
    cpdef _settle_for(self, object key, object size)
    @cython.locals(st=Counters, cost=CostModel, done=cython.longlong)
    cpdef _stream(self, ObjectInfo o, bint write, bint created)
    @cython.locals(st=Counters)
    cpdef _undo_miss(self, ObjectInfo o, object size, long long old_size)
    @cython.locals(st=Counters, cost=CostModel, done=cython.longlong, used=cython.longlong, prev=int)
    cpdef _insert(self, ObjectInfo o, long long offset, long long need, bint write, long long old_size)
    cpdef _end(self, ObjectInfo o, bint write, bint defer_wt)
    @cython.locals(off=cython.longlong, place=Placement)
    cpdef long long _make_room_policy(self, object key, object size, long long need) except -1
    @cython.locals(place=Placement)
    cpdef long long _room_step(self, object size, long long need, bint try_alloc=*) except -2
    @cython.locals(o=ObjectInfo)
    cpdef _evict_due(self, object accessed)
    @cython.locals(o=ObjectInfo, st=Counters, prefetched=bint)
    cpdef _evict(self, object victim)
    @cython.locals(o=ObjectInfo, st=Counters, cost=CostModel, place=Placement, short=cython.longlong,
                   walk=cython.longlong)
    cpdef _clean(self, object accessed)
    @cython.locals(done=cython.longlong)
    cpdef _copy_out(self, ObjectInfo o)
    @cython.locals(off=cython.longlong, nb=cython.longlong, done=cython.longlong)
    cpdef _release_block(self, ObjectInfo o)
    @cython.locals(used=cython.longlong)
    cpdef _place_obj(self, ObjectInfo o, long long offset, long long need)
    cpdef _note_allocated(self)
    cpdef _h2d(self, ObjectInfo o, long long done)
    cpdef _landed(self, ObjectInfo o)
    cpdef _land(self, ObjectInfo o, bint wait)
    cpdef _to_device(self, ObjectInfo o)
    @cython.locals(o=ObjectInfo, now=cython.longlong)
    cpdef _retire(self)
    @cython.locals(now=cython.longlong, due=cython.longlong)
    cpdef long long _due_release_bytes(self) except -1
    cpdef _pop_release(self)
    cpdef _free(self, object key)
    cpdef _forget_record(self, ObjectInfo o)
    cpdef ObjectInfo _recall(self, object key, long long size, int kind)
