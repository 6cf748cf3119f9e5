# Native layout of allocator/pool.py (Cython pure-Python mode): the façade adds no fields to
# the loop's (allocator/loop.pxd).
from cachegym.allocator.loop cimport Loop


cdef class Pool(Loop):
    pass
