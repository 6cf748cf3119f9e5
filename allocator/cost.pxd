# Native layout of allocator/cost.py's CostModel (Cython pure-Python mode: this file types the
# .py when it is compiled; interpreted, the .py runs as it is).
cdef class CostModel:
    cdef public object preset
    cdef public bint instant, saturated
    cdef public long long now, stall_ns, compute_ns
    cdef long long _free0, _free1, _h2d_lat, _d2h_lat
    cdef double _h2d_gbps, _d2h_gbps
    cdef bint _two
    cpdef long long copy_time(self, int direction, long long nbytes) except? -1
    cpdef long long copy(self, int direction, long long nbytes, long long not_before=*) except? -1
    cpdef void compute(self, long long ns) except *
    cpdef long long wait_until(self, long long t) except? -1
    cpdef long long busy_until(self, int direction) except? -1
