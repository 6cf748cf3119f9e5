# Native layout of allocator/arena.py (Cython pure-Python mode: this file types the .py when it
# is compiled; interpreted, the .py runs as it is).
cdef class ByteAccounting:
    cdef public long long capacity, used

cdef class Arena:
    cdef public long long capacity, used
    cdef dict _free, _ends
    cdef list _by_size
