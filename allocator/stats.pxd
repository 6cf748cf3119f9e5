# Native layout of allocator/stats.py's PoolStats (Cython pure-Python mode: this file types the
# .py when it is compiled; interpreted, the .py runs as it is).
cdef class PoolStats:
    cdef public long long accesses, hits, misses, byte_misses, allocations, prefetches
    cdef public long long prefetch_hits, late_prefetches, useless_prefetches, evictions
    cdef public long long writebacks, bypasses, frees, bytes_h2d, bytes_d2h, stall_ns
    cdef public long long compute_ns, total_ns, device_bytes, peak_device_bytes, fallbacks
    cdef public double fragmentation
