/* policies._mlp, part 1 of 2 (included by policies/_mlp.c): a decision's candidate features.
 *
 * ft_compute is policies/features.py's _observe_kernel_py (numba) in C, value for value: the
 * same float64 arithmetic in the same order (no contraction into fused multiply-adds), the same
 * float32 roundings. The features module hands its layout, its scale factors and its state
 * table over once (set_layout, which refuses a layout this file was not written for), so the
 * numbers live in one place and a change of the Python side cannot pass unnoticed.
 *
 * Speed: twelve of a candidate's features are float32(log(x)) of a float64 x >= 1, and with
 * glibc's log (about 8 ns each here) those logs were nine tenths of the kernel. ft_logs_avx2
 * computes them four at a time with fdlibm's e_log.c algorithm (within a few ulp of the exact
 * logarithm in float64), rounds to float32, and flags any value whose float64 logarithm lies
 * near the middle between two float32 values (closer than 2^-20 of half their spacing), where
 * two results a few ulp apart could round differently (about one value in 500,000): ft_post_avx2
 * then takes libm's log for the whole decision. The float32 results are libm's, bit for bit
 * (tests/policies/test_features.py: log_f32 == float32(log) on 600,000 values -- 100,000,000
 * checked once -- and C == numba on every feature of rows far outside what replays make).
 * The rank (a comparison of every pair) and the clipping run eight or four lanes at a time.
 */
#include <math.h>

#if defined(__clang__)  /* see FT_CLANG_NO_CONTRACT, the first line of ft_compute's body */
#define FT_NO_CONTRACT
#define FT_CLANG_NO_CONTRACT _Pragma("clang fp contract(off)")
#elif defined(__GNUC__)
#define FT_NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define FT_NO_CONTRACT
#endif
#ifndef FT_CLANG_NO_CONTRACT
#define FT_CLANG_NO_CONTRACT
#endif

/* policies/features.py's layout (set_layout checks that the module agrees) */
enum {
    FT_INSERT = 0, FT_CREATE = 1, FT_COUNT = 2, FT_E0 = 3, FT_RING0 = 6, FT_RING = 5, FT_SIZE = 11,
    FT_NCOL = 13,                /* columns of the tracker's rows */
    FT_NPRM = 10, FT_G = 6,      /* the packed buffer: n, prm[NPRM], globals[G], slots[K], codes[K] */
    FT_HEAD = 1 + FT_NPRM + FT_G,
    FT_NLOG = 12, FT_IGAP = 7,   /* the log-scaled block: features 0..NLOG-1, the gaps from IGAP */
    FT_NGAPS = FT_RING - 1,
    FT_IRANK = 12, FT_ISTATE = 14, FT_NSTATE = 11, FT_ISEEN = 25, FT_F = 28,
    FT_HORIZON = 16384,          /* the cap of tick distances (features.HORIZON) */
};

static float ft_inv_scale[FT_NLOG];  /* float32(1 / log scale) of the log block */
static float *ft_table = NULL;       /* state code -> FT_NSTATE flags (float32) */
static Py_ssize_t ft_table_rows = 0;
static float ft_inv_log_ns = 0.0f;   /* float32(1 / log1p(1e9)) */

/* a < b ? a : b and a > b ? a : b (the second operand when they are equal or one is NaN), as
 * the instructions minsd / maxsd compute them where SSE2 is there: the compiler turns the
 * ternaries of the sorting network below into branches, which the data mispredict */
#if defined(__SSE2__)
#include <emmintrin.h>
#define FT_MIN(a, b) _mm_cvtsd_f64(_mm_min_sd(_mm_set_sd(a), _mm_set_sd(b)))
#define FT_MAX(a, b) _mm_cvtsd_f64(_mm_max_sd(_mm_set_sd(a), _mm_set_sd(b)))
#else
#define FT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define FT_MAX(a, b) ((a) > (b) ? (a) : (b))
#endif

/* ------------------------------------------------------------------ float32(log(x)), x >= 1 */
static void
ft_logs_libm(const double *x, float *out, Py_ssize_t m)
{
    for (Py_ssize_t i = 0; i < m; i++)
        out[i] = (float)log(x[i]);
}

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define HAVE_AVX2_LOGS 1
typedef double ft_v4d __attribute__((vector_size(32)));
typedef long long ft_v4q __attribute__((vector_size(32)));
typedef unsigned long long ft_v4u __attribute__((vector_size(32)));  /* logical shifts (vpsrlq) */
typedef float ft_v4f __attribute__((vector_size(16)));
typedef double ft_v4du __attribute__((vector_size(32), aligned(8)));  /* unaligned loads */
typedef float ft_v4fu __attribute__((vector_size(16), aligned(4)));

/* float32(log(x)) of x[0..m-1] into out, four at a time; 1 when some value needs libm's log
 * (outside [1, 2^1000), or too near a float32 rounding boundary), 0 when every one is done */
__attribute__((target("avx2,fma"))) static int
ft_logs_avx2(const double *x, float *out, Py_ssize_t m)
{
    /* fdlibm e_log.c: x = 2^k (1 + f) with 1 + f in [sqrt(2)/2, sqrt(2)), s = f / (2 + f),
     * log(1 + f) = f - hfsq + s (hfsq + R(s^2)) with hfsq = f^2 / 2 */
    const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10,
                 Lg1 = 6.666666666666735130e-01, Lg2 = 3.999999999940941908e-01,
                 Lg3 = 2.857142874366239149e-01, Lg4 = 2.222219843214978396e-01,
                 Lg5 = 1.818357216161805012e-01, Lg6 = 1.531383769920937332e-01,
                 Lg7 = 1.479819860511658591e-01;
    ft_v4q bad = {0, 0, 0, 0};
    Py_ssize_t i = 0;
    for (; i + 4 <= m; i += 4) {
        const ft_v4d v = *(const ft_v4du *)(x + i);
        bad |= ~((v >= 1.0) & (v < 0x1p1000));  /* finite, and no subnormal */
        const ft_v4q bits = (ft_v4q)v;
        ft_v4q k = (ft_v4q)((ft_v4u)bits >> 52) - 1023;  /* the exponent (v >= 1: no sign bit) */
        ft_v4d mant = (ft_v4d)((bits & 0x000fffffffffffffLL) | 0x3ff0000000000000LL);  /* [1, 2) */
        const ft_v4q up = mant >= 0x1.6a09e667f3bcdp+0;  /* >= sqrt(2): halve, k + 1 */
        mant = (ft_v4d)(((ft_v4q)(mant * 0.5) & up) | ((ft_v4q)mant & ~up));
        k -= up;
        /* k as a double: 2^52 + (k + 1024) has exactly those low bits */
        const ft_v4d dk = (ft_v4d)(k + (0x4330000000000000LL + 1024)) - (0x1p52 + 1024.0);
        const ft_v4d f = mant - 1.0, s = f / (2.0 + f), z = s * s, w = z * z;
        const ft_v4d t1 = w * (Lg2 + w * (Lg4 + w * Lg6));
        const ft_v4d t2 = z * (Lg1 + w * (Lg3 + w * (Lg5 + w * Lg7)));
        const ft_v4d R = t2 + t1, hfsq = 0.5 * f * f;
        const ft_v4d l = dk * ln2_hi - ((hfsq - (s * (hfsq + R) + dk * ln2_lo)) - f);
        const ft_v4f fl = __builtin_convertvector(l, ft_v4f);
        *(ft_v4fu *)(out + i) = fl;
        /* near a midpoint between two float32 values (l >= 0 here): |l - float32(l)| within
         * 2^-20 of half a float32 ulp, 2^(e - 24) for l in [2^e, 2^(e + 1)) */
        const ft_v4q lb = (ft_v4q)l;
        const ft_v4q e = (ft_v4q)((ft_v4u)lb >> 52);  /* l >= 0 wherever the result is kept */
        const ft_v4d half = (ft_v4d)((e - 24) << 52), tol = (ft_v4d)((e - 44) << 52);
        const ft_v4d d = l - __builtin_convertvector(fl, ft_v4d);
        const ft_v4d gap = (ft_v4d)((ft_v4q)((ft_v4d)((ft_v4q)d & 0x7fffffffffffffffLL) - half)
                                    & 0x7fffffffffffffffLL);
        bad |= (gap <= tol) & (l != 0.0);
    }
    ft_logs_libm(x + i, out + i, m - i);
    return (bad[0] | bad[1] | bad[2] | bad[3]) != 0;
}

typedef float ft_v8f __attribute__((vector_size(32)));
typedef int ft_v8i __attribute__((vector_size(32)));
typedef float ft_v8fu __attribute__((vector_size(32), aligned(4)));

/* ft_post with AVX2 (the same results) */
__attribute__((target("avx2,fma"))) static void
ft_post_avx2(const double *a, const double *rec, float *lg, float *out, Py_ssize_t n)
{
    if (ft_logs_avx2(a, lg, n * FT_NLOG))  /* about once in a thousand decisions */
        ft_logs_libm(a, lg, n * FT_NLOG);
    const ft_v8f s0 = *(const ft_v8fu *)ft_inv_scale;
    const ft_v4f s1 = *(const ft_v4fu *)(ft_inv_scale + 8);
    const float inv_n1 = (float)(1.0 / (double)(n - 1 > 1 ? n - 1 : 1));
    for (Py_ssize_t i = 0; i < n; i++) {
        float *o = out + i * FT_F;
        const float *li = lg + i * FT_NLOG;
        *(ft_v8fu *)o = *(const ft_v8fu *)li * s0;
        *(ft_v4fu *)(o + 8) = *(const ft_v4fu *)(li + 8) * s1;
        const double ri = rec[i];
        ft_v4q c = {0, 0, 0, 0};
        Py_ssize_t q = 0;
        for (; q + 4 <= n; q += 4)
            c -= ri > *(const ft_v4du *)(rec + q);
        long r = (long)(c[0] + c[1] + c[2] + c[3]);
        for (; q < n; q++)
            r += ri > rec[q];
        o[FT_IRANK] = (float)r * inv_n1;
    }
    /* every feature clipped to 1 (rows 0..n-1 are contiguous) */
    const Py_ssize_t m = n * FT_F;
    Py_ssize_t j = 0;
    for (; j + 8 <= m; j += 8) {
        const ft_v8f x = *(const ft_v8fu *)(out + j);
        const ft_v8i over = x > 1.0f;
        *(ft_v8fu *)(out + j) = (ft_v8f)((over & (ft_v8i)(ft_v8f){1, 1, 1, 1, 1, 1, 1, 1})
                                         | (~over & (ft_v8i)x));
    }
    for (; j < m; j++)
        if (out[j] > 1.0f)
            out[j] = 1.0f;
}
#endif

/* The log block's float32 values (scaled), the recency rank and the clipping of ft_compute's
 * candidates: a holds their log arguments (n x FT_NLOG), rec their raw recency; lg scratch */
static void
ft_post_generic(const double *a, const double *rec, float *lg, float *out, Py_ssize_t n)
{
    ft_logs_libm(a, lg, n * FT_NLOG);
    const float inv_n1 = (float)(1.0 / (double)(n - 1 > 1 ? n - 1 : 1));
    for (Py_ssize_t i = 0; i < n; i++) {
        float *o = out + i * FT_F;
        const float *li = lg + i * FT_NLOG;
        for (int j = 0; j < FT_NLOG; j++)
            o[j] = li[j] * ft_inv_scale[j];
        long r = 0;
        for (Py_ssize_t q = 0; q < n; q++)
            r += rec[i] > rec[q];
        o[FT_IRANK] = (float)r * inv_n1;
        for (int j = 0; j < FT_F; j++)
            if (o[j] > 1.0f)
                o[j] = 1.0f;
    }
}

static void (*ft_post)(const double *, const double *, float *, float *, Py_ssize_t) = ft_post_generic;
/* ------------------------------------------------------------------ the kernel */
#define FT_STACK 64  /* candidates whose scratch lives on the stack */

/* The features of the v[0] packed candidates of v into out ((K + 1) x FT_F float32: rows
 * 0..n-1, the globals in the first FT_G values of row K; rows n..K-1 are left as they are).
 * 0, or -1 with an exception (a slot or state code out of range). */
FT_NO_CONTRACT static int
ft_compute(const double *S, Py_ssize_t rows, const double *v, Py_ssize_t K, float *out)
{
    FT_CLANG_NO_CONTRACT  /* products and sums stay apart, as in numba's code */
    const Py_ssize_t n = (Py_ssize_t)v[0];
    const double *prm = v + 1, *slots = v + FT_HEAD, *codes = v + FT_HEAD + K;
    const double t = prm[0], d0 = prm[1], d1 = prm[2], d2 = prm[3], inv_cap = prm[4];
    const double h2d_lat = prm[5], h2d_inv_bw = prm[6], d2h_lat = prm[7], d2h_inv_bw = prm[8];
    const int timed = prm[9] != 0.0;
    double stack_a[FT_STACK * FT_NLOG], stack_rec[FT_STACK];
    float stack_l[FT_STACK * FT_NLOG];
    double *a = stack_a, *rec = stack_rec;
    float *lg = stack_l;
    void *heap = NULL;
    if (n > FT_STACK) {
        heap = PyMem_Malloc((size_t)n * (FT_NLOG * (sizeof(double) + sizeof(float)) + sizeof(double)));
        if (heap == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        a = heap;
        rec = a + n * FT_NLOG;
        lg = (float *)(rec + n);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const double sd = slots[i], cd = codes[i];
        if (!(sd >= 0.0 && sd < (double)rows) || !(cd >= 0.0 && cd < (double)ft_table_rows)) {
            PyErr_Format(PyExc_ValueError, "features: candidate %zd has slot %lld and state code "
                         "%lld (slots 0..%zd, codes 0..%zd)", i, sd == sd ? (long long)sd : -1LL,
                         cd == cd ? (long long)cd : -1LL, rows - 1, ft_table_rows - 1);
            PyMem_Free(heap);
            return -1;
        }
        const double *r = S + (Py_ssize_t)sd * FT_NCOL;
        /* the last accesses' ticks, ascending: a sorting network of FT_MIN / FT_MAX (no branch) */
        double ring[FT_RING];
        memcpy(ring, r + FT_RING0, sizeof ring);
#define FT_CSWAP(p, q) do { const double lo = FT_MIN(ring[q], ring[p]);                \
                            const double hi = FT_MAX(ring[p], ring[q]);                \
                            ring[p] = lo; ring[q] = hi; } while (0)
        FT_CSWAP(0, 1); FT_CSWAP(3, 4); FT_CSWAP(2, 4); FT_CSWAP(2, 3); FT_CSWAP(0, 3);
        FT_CSWAP(0, 2); FT_CSWAP(1, 4); FT_CSWAP(1, 3); FT_CSWAP(1, 2);
#undef FT_CSWAP
        double *ai = a + i * FT_NLOG;
        const double h1 = FT_HORIZON + 1.0;
        ai[0] = t + 1.0 - ring[FT_RING - 1];
        rec[i] = ai[0];  /* the rank compares the distances as they are */
        if (ai[0] > h1 && ring[FT_RING - 1] >= 0.0)  /* the horizon caps the real distances */
            ai[0] = h1;
        ai[1] = t + 1.0 - r[FT_INSERT];
        if (ai[1] > h1)
            ai[1] = h1;
        ai[2] = t + 1.0 - r[FT_CREATE];
        ai[3] = r[FT_COUNT] + 1.0;
        if (ai[2] > h1) {  /* an older object's count, scaled to its last FT_HORIZON ticks */
            ai[3] = r[FT_COUNT] * (h1 / ai[2]) + 1.0;
            ai[2] = h1;
        }
        ai[4] = r[FT_E0] * d0 + 1.0;
        ai[5] = r[FT_E0 + 1] * d1 + 1.0;
        ai[6] = r[FT_E0 + 2] * d2 + 1.0;
        for (int j = 0; j < FT_NGAPS; j++) {
            const double g = (ring[FT_RING - 1 - j] - ring[FT_RING - 2 - j]) + 1.0;
            ai[FT_IGAP + j] = g > h1 && ring[FT_RING - 2 - j] >= 0.0 ? h1 : g;
        }
        ai[FT_NLOG - 1] = r[FT_SIZE] + 1.0;
        float *o = out + i * FT_F;
        const double size = r[FT_SIZE];
        o[FT_IRANK + 1] = (float)size * (float)inv_cap;
        memcpy(o + FT_ISTATE, ft_table + (Py_ssize_t)cd * FT_NSTATE, FT_NSTATE * sizeof(float));
        o[FT_ISEEN] = 1.0f;
        if (timed) {
            o[FT_ISEEN + 1] = (float)log1p(h2d_lat + size * h2d_inv_bw) * ft_inv_log_ns;
            o[FT_ISEEN + 2] = o[FT_ISTATE] * (float)log1p(d2h_lat + size * d2h_inv_bw) * ft_inv_log_ns;
        } else {
            o[FT_ISEEN + 1] = 0.0f;
            o[FT_ISEEN + 2] = 0.0f;
        }
    }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  /* a's first n * FT_NLOG are written */
#endif
    ft_post(a, rec, lg, out, n);
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
    for (int j = 0; j < FT_G; j++)
        out[K * FT_F + j] = (float)v[1 + FT_NPRM + j];
    PyMem_Free(heap);
    return 0;
}

/* set_layout(layout, inv_scale, table, inv_log_ns): policies/features.py's layout (a dict of
 * its constants, checked against this file's), the float32 scale factors of the log block,
 * the float32 state table (codes x FT_NSTATE) and float32(1 / log1p(1e9)) */
static PyObject *
mlp_set_layout(PyObject *mod, PyObject *args)
{
    PyObject *layout, *scale_o, *table_o;
    float inv_log_ns;
    if (!PyArg_ParseTuple(args, "O!OOf:set_layout", &PyDict_Type, &layout, &scale_o, &table_o,
                          &inv_log_ns))
        return NULL;
    static const struct { const char *name; long value; } expect[] = {
        {"INSERT", FT_INSERT}, {"CREATE", FT_CREATE}, {"COUNT", FT_COUNT}, {"E0", FT_E0},
        {"RING0", FT_RING0}, {"RING", FT_RING}, {"SIZE", FT_SIZE}, {"NCOL", FT_NCOL},
        {"NPRM", FT_NPRM}, {"G", FT_G}, {"HEAD", FT_HEAD}, {"N_LOG", FT_NLOG}, {"I_GAP", FT_IGAP},
        {"I_RANK", FT_IRANK}, {"I_STATE", FT_ISTATE}, {"N_STATE", FT_NSTATE},
        {"I_SEEN", FT_ISEEN}, {"F", FT_F}, {"HORIZON", FT_HORIZON},
    };
    if (PyDict_GET_SIZE(layout) != (Py_ssize_t)(sizeof expect / sizeof expect[0])) {
        PyErr_Format(PyExc_ValueError, "set_layout: %zd layout constants, this build knows %zd",
                     PyDict_GET_SIZE(layout), (Py_ssize_t)(sizeof expect / sizeof expect[0]));
        return NULL;
    }
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
        PyObject *got = PyDict_GetItemString(layout, expect[i].name);
        long g = got != NULL && PyLong_Check(got) ? PyLong_AsLong(got) : -1;
        if (g != expect[i].value) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "set_layout: %s is %R in policies/features.py, %ld in "
                         "policies/csrc/features.c", expect[i].name, got ? got : Py_None,
                         expect[i].value);
            return NULL;
        }
    }
    Py_buffer bs, bt;
    if (PyObject_GetBuffer(scale_o, &bs, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | PyBUF_ND) < 0)
        return NULL;
    if (PyObject_GetBuffer(table_o, &bt, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | PyBUF_ND) < 0) {
        PyBuffer_Release(&bs);
        return NULL;
    }
    PyObject *res = NULL;
    if (bs.ndim != 1 || bs.shape[0] != FT_NLOG || bs.itemsize != 4 || strcmp(bs.format, "f") != 0
        || bt.ndim != 2 || bt.shape[1] != FT_NSTATE || bt.shape[0] < 1 || bt.itemsize != 4
        || strcmp(bt.format, "f") != 0) {
        PyErr_Format(PyExc_ValueError, "set_layout: inv_scale must be float32 (%d,), table "
                     "float32 (codes, %d)", FT_NLOG, FT_NSTATE);
        goto done;
    }
    float *table = PyMem_Malloc((size_t)bt.len);
    if (table == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(table, bt.buf, (size_t)bt.len);
    memcpy(ft_inv_scale, bs.buf, sizeof ft_inv_scale);
    PyMem_Free(ft_table);
    ft_table = table;
    ft_table_rows = bt.shape[0];
    ft_inv_log_ns = inv_log_ns;
    res = Py_None;
    Py_INCREF(res);
done:
    PyBuffer_Release(&bs);
    PyBuffer_Release(&bt);
    return res;
}

/* log_f32(x): float32(log(x)) of a float64 array, as the kernel computes its logs (x >= 1
 * there; any other value goes to libm's log) -- for the tests */
static PyObject *
mlp_log_f32(PyObject *mod, PyObject *arg)
{
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | PyBUF_ND) < 0)
        return NULL;
    if (b.ndim != 1 || b.itemsize != 8 || strcmp(b.format, "d") != 0) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "log_f32: x must be a 1-d float64 array");
        return NULL;
    }
    PyObject *res = PyBytes_FromStringAndSize(NULL, b.shape[0] * (Py_ssize_t)sizeof(float));
    if (res != NULL) {
        const double *x = b.buf;
        float *out = (float *)PyBytes_AS_STRING(res);
#ifdef HAVE_AVX2_LOGS
        if (ft_post == ft_post_avx2) {
            if (ft_logs_avx2(x, out, b.shape[0]))
                ft_logs_libm(x, out, b.shape[0]);
        } else
#endif
            ft_logs_libm(x, out, b.shape[0]);
    }
    PyBuffer_Release(&b);
    return res;
}

static void
ft_init(void)
{
#ifdef HAVE_AVX2_LOGS
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        ft_post = ft_post_avx2;
#endif
}
