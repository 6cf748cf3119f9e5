# Native layout of allocator/loop.py (Cython pure-Python mode: this file types the .py when it
# is compiled; interpreted, the .py runs as it is). Attributes are public where other modules or
# tests read them; the loop's methods stay Python-visible (a subclass or a test may call them).
from cachegym.allocator.arena cimport Arena, ByteAccounting
from cachegym.allocator.cost cimport CostModel
from cachegym.allocator.records cimport Counters, ObjectInfo


cdef class Loop:
    cdef public long long capacity
    cdef public CostModel cost
    cdef public object backend, placement
    cdef public bint bypass_oversize
    cdef public Counters stats
    cdef public object view
    cdef public object _policy, _prefetcher, _hook
    cdef public bint _write_through, _fast_read, _fast_write, _writing
    cdef public object _touch, _on_hit, _on_miss, _admit, _due
    cdef public object _place, _place_release
    cdef public long long _fp_mask, _tick, _pending_release_bytes, _inflight_bytes, _seq
    cdef public long long _n_evictable, _alloc_retries, _peak_allocated, _num_ooms
    cdef public dict _objs
    cdef public object _lock, _acquire, _release
    cdef public list _landing, _releases, _owed
    cdef object __weakref__
