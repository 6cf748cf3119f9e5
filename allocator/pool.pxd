# Native layout of allocator/pool.py (Cython pure-Python mode: this file types the .py when it
# is compiled; interpreted, the .py runs as it is). Attributes are public where other modules or
# tests read them; the loop's methods stay Python-visible (a subclass or a test may call them).
from cachegym.allocator.arena cimport Arena, ByteAccounting
from cachegym.allocator.cost cimport CostModel


cdef class Counters:
    cdef public long long accesses, hits, misses, byte_misses, allocations, prefetches
    cdef public long long prefetch_hits, late_prefetches, useless_prefetches, evictions
    cdef public long long writebacks, streamed, frees, bytes_h2d, bytes_d2h, stall_ns
    cdef public long long compute_ns, total_ns, device_bytes, peak_device_bytes, fallbacks
    cdef public long long late_stall_ns
    cdef public double fragmentation


cdef class ObjectInfo:
    cdef public object key, h2d_event, d2h_event
    cdef public long long size, nbytes, offset, ready_ns, busy_until, created_tick, last_tick
    cdef public long long n_access, late_ns
    cdef public int state, pins, kind
    cdef public bint dirty, prefetched


cdef class Pool:
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
