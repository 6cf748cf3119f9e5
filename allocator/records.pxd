# Native layout of allocator/records.py (Cython pure-Python mode: this file types the .py when
# it is compiled; interpreted, the .py runs as it is). Attributes are public: the pool, the
# policies' view and tests read them.

cdef int _DEVICE

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
    cpdef bint evictable(self)
