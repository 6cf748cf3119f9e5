# Native layout of policies/kernels.py (Cython pure-Python mode: this file types the .py when it
# is compiled; interpreted, the .py runs as it is). The layout constants are C constants here
# (policies/features.py reads them through kernels.LAYOUT).
cimport cython

cdef Py_ssize_t HORIZON, N_GAPS, N_KINDS, INSERT, CREATE, COUNT, E0, RING0, RING, SIZE, KIND, NCOL
cdef Py_ssize_t NPRM, G, HEAD, N_LOG, I_GAP, I_RANK, I_STATE, N_STATE, I_SEEN, F
cdef double H1, IH0, IH1, IH2, MISSING
cdef float[::1] _inv_scale
cdef float[:, ::1] _table
cdef float _inv_log_ns
cdef Py_ssize_t _n_codes

cdef inline float f32(double x)

cpdef object vector(double[::1] a)
cpdef object matrix(double[:, ::1] a)
cpdef object observation(float[:, ::1] a)

cpdef void access(double[::1] V, Py_ssize_t b, double t, double x, double two) except *

@cython.locals(c=Py_ssize_t, m=Py_ssize_t, j=Py_ssize_t, q=Py_ssize_t, w=cython.longlong, new=bint)
cpdef Py_ssize_t first_distinct(double[::1] u, double n, long long[::1] out) except -1

@cython.locals(K=Py_ssize_t, n=Py_ssize_t, nd=double, rows=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t,
               m=Py_ssize_t, s=Py_ssize_t, c=Py_ssize_t, sd=double, cd=double, t=double,
               d0=double, d1=double, d2=double, inv_cap=float, h2d_lat=double, h2d_inv_bw=double,
               d2h_lat=double, d2h_inv_bw=double, timed=bint, q0=double, q1=double, q2=double,
               q3=double, q4=double, r=double, age=double, life=double, cnt=double, g=double,
               size=double, inv_n1=float, ri=double, rank=Py_ssize_t)
cpdef Py_ssize_t features(double[:, ::1] S, double[::1] v, float[:, ::1] x) except -1


cdef class Scorer:
    cdef readonly object _wc_arr, _wg_arr, _b0_arr, _wo_arr, _layers
    cdef float[:, ::1] _wc, _wg
    cdef float[::1] _b0, _wo, _wh, _bh, _g, _ha, _hb
    cdef Py_ssize_t[::1] _widths, _woff, _boff
    cdef float _bo
    cdef Py_ssize_t _nf, _ng, _depth

    @cython.locals(xv=float[:, ::1])
    cpdef Py_ssize_t best(self, object x, Py_ssize_t n) except -1

    @cython.locals(K=Py_ssize_t, nf=Py_ssize_t, h0=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t,
                   f=Py_ssize_t, a=float, best=Py_ssize_t, top=float, score=float,
                   wc=float[:, ::1], wg=float[:, ::1], g=float[::1], ha=float[::1], hb=float[::1])
    cdef Py_ssize_t _run(self, float[:, ::1] x, Py_ssize_t n, float[::1] out) except -1

    @cython.locals(wh=float[::1], bh=float[::1], width=Py_ssize_t, layer=Py_ssize_t,
                   nxt=Py_ssize_t, wo_=Py_ssize_t, bo_=Py_ssize_t, j=Py_ssize_t, u=Py_ssize_t,
                   a=float, base=Py_ssize_t, score=float)
    cdef float _layers_and_output(self, float[::1] ha, float[::1] hb)
