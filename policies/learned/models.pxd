# Native layout of policies/learned/models.py (Cython pure-Python mode: this file types the .py
# when it is compiled; interpreted, the .py runs as it is). An expert is told every request of
# the guarded pool: its fields are C fields (no lookup by name), public for the guards and tests.
from cachegym.allocator.records cimport Counters


cdef class Expert:
    cdef public object name, policy, pool, objective, _host_objs, _host_stats, _access, _resident, _clock, _order
    cdef public object prefetch_fn
    cdef public bint followed, prefetching
    cdef public long long hits, gain, _prefetches, _fallbacks
    cdef public dict _pending, _gave
    cdef public Counters _stats

    cpdef bint _charged(self, object key, object size, bint write, int kind) except -1


cdef class _NetworkExpert(Expert):
    cdef public object owner
