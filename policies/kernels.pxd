# Native layout of policies/kernels.py (Cython pure-Python mode: this file types the .py when it
# is compiled; interpreted, the .py runs as it is). The layout constants are C constants here
# (policies/features.py reads them through kernels.LAYOUT).
cimport cython
from cachegym.allocator.records cimport ObjectInfo

cdef Py_ssize_t HORIZON, N_GAPS, N_KINDS, INSERT, CREATE, COUNT, E0, RING0, RING, SIZE, KIND, NCOL
cdef Py_ssize_t NPRM, G, HEAD, N_LOG, I_GAP, I_RANK, I_STATE, N_STATE, I_SEEN, F
cdef double H1, IH0, IH1, IH2, MISSING
cdef long long INF
cdef float[::1] _inv_scale
cdef float[:, ::1] _table
cdef float _inv_log_ns
cdef Py_ssize_t _n_codes

cdef inline float f32(double x) noexcept

cpdef object vector(double[::1] a)
cpdef object matrix(double[:, ::1] a)
cpdef object observation(float[:, ::1] a)
cpdef object indices(long long[::1] a)

cpdef void access(double[::1] V, Py_ssize_t b, double t, double x, double two) except *

@cython.locals(c=Py_ssize_t, m=Py_ssize_t, j=Py_ssize_t, q=Py_ssize_t, w=cython.longlong, new=bint)
cpdef Py_ssize_t first_distinct(double[::1] u, double n, long long[::1] out) except -1

@cython.locals(o=ObjectInfo)
cpdef list evictable_keys(dict objs, object keys, Py_ssize_t limit)

@cython.locals(c=Py_ssize_t, q=Py_ssize_t, o=ObjectInfo)
cpdef list sample_keys(double[::1] u, double n, list res, list recs, Py_ssize_t K,
                       long long[::1] idx)

@cython.locals(c=cython.longlong)
cdef inline double state_code(ObjectInfo o) noexcept

cdef void _check_packed(Py_ssize_t n, double[::1] v, Py_ssize_t K, str what) except *

@cython.locals(n=Py_ssize_t, i=Py_ssize_t, o=ObjectInfo, s=Py_ssize_t, missing=Py_ssize_t)
cpdef Py_ssize_t pack_keys(dict slot, dict objs, list keys, double[::1] v, Py_ssize_t K) except -1

@cython.locals(n=Py_ssize_t, m=Py_ssize_t, q=Py_ssize_t, i=Py_ssize_t)
cpdef bint pack_sampled(list res, list recs, list slots, long long[::1] idx, list keys,
                        double[::1] v, Py_ssize_t K) except -1

@cython.locals(n=Py_ssize_t, rows_=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, s=Py_ssize_t, m=double)
cpdef Py_ssize_t last_ticks(double[:, ::1] S, dict slot, list keys, long long[::1] out) except -1

@cython.locals(rows_=Py_ssize_t, i=Py_ssize_t, r=cython.longlong)
cpdef Py_ssize_t next_rows(const long long[::1] next_use, const long long[::1] last, Py_ssize_t n,
                           long long[::1] out) except -1

@cython.locals(n=Py_ssize_t, K=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, best=cython.longlong,
               bk=cython.longlong, k=cython.longlong, r=cython.longlong)
cpdef Py_ssize_t oracle(list keys, const long long[::1] nxt, long long tick, bint farthest,
                        long long[::1] keys_out, double[::1] dist_out) except -2

@cython.locals(n=Py_ssize_t)
cpdef Py_ssize_t teacher(double[:, ::1] S, dict slot, list keys, const long long[::1] next_use,
                         long long tick, bint farthest, long long[::1] rows, long long[::1] nxt,
                         long long[::1] keys_out, double[::1] dist_out) except -2

@cython.locals(K=Py_ssize_t, n=Py_ssize_t, nd=double, rows=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t,
               m=Py_ssize_t, s=Py_ssize_t, c=Py_ssize_t, sd=double, cd=double, t=double,
               d0=double, d1=double, d2=double, inv_cap=float, h2d_lat=double, h2d_inv_bw=double,
               d2h_lat=double, d2h_inv_bw=double, timed=bint, q0=double, q1=double, q2=double,
               q3=double, q4=double, r=double, age=double, life=double, cnt=double, g=double,
               size=double, inv_n1=float, ri=double, rank=Py_ssize_t)
cpdef Py_ssize_t features(double[:, ::1] S, double[::1] v, float[:, ::1] x) except -1


@cython.locals(q=Py_ssize_t, j=Py_ssize_t, a0=float, a1=float, a2=float, a3=float,
               r0=Py_ssize_t, r1=Py_ssize_t, r2=Py_ssize_t, r3=Py_ssize_t)
cdef inline void _accumulate(float[::1] w, Py_ssize_t base, Py_ssize_t width, Py_ssize_t m,
                             float[::1] val, Py_ssize_t[::1] idx, float[::1] acc) noexcept


cdef class Scorer:
    cdef readonly object _wc_arr, _wg_arr, _b0_arr, _wo_arr, _layers
    cdef float[::1] _wc, _wg, _b0, _wo, _wh, _bh, _g, _h, _val
    cdef Py_ssize_t[::1] _widths, _woff, _boff, _idx
    cdef float _bo
    cdef Py_ssize_t _nf, _ng, _depth

    @cython.locals(xv=float[:, ::1])
    cpdef Py_ssize_t best(self, object x, Py_ssize_t n) except -1

    @cython.locals(K=Py_ssize_t, nf=Py_ssize_t, h0=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t,
                   f=Py_ssize_t, u=Py_ssize_t, m=Py_ssize_t, a=float, width=Py_ssize_t,
                   layer=Py_ssize_t, b=Py_ssize_t, best=Py_ssize_t, top=float, score=float,
                   g=float[::1], h=float[::1], val=float[::1], idx=Py_ssize_t[::1],
                   wc=float[::1], wh=float[::1], bh=float[::1], wo=float[::1])
    cdef Py_ssize_t _run(self, float[:, ::1] x, Py_ssize_t n, float[::1] out) except -1
