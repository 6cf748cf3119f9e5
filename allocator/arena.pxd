# Native layout of allocator/arena.py (Cython pure-Python mode: this file types the .py when it
# is compiled; interpreted, the .py runs as it is).
cdef class Placement:
    cdef public long long capacity, used
    cpdef long long footprint(self, long long nbytes) except -1
    cpdef object alloc(self, long long nbytes)
    cpdef release(self, long long offset, long long nbytes)

cdef class ByteAccounting(Placement):
    cpdef long long footprint(self, long long nbytes) except -1
    cpdef object alloc(self, long long nbytes)
    cpdef release(self, long long offset, long long nbytes)

cdef class Arena(Placement):
    cdef dict _free, _ends
    cdef list _by_size
    cpdef long long footprint(self, long long nbytes) except -1
    cpdef object alloc(self, long long nbytes)
    cpdef release(self, long long offset, long long nbytes)
