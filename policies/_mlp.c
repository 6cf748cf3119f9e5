/* policies._mlp: the learned eviction policy's forward pass in C (optional; see
 * policies/learned.py), part 2 of 2 -- part 1, the candidates' features, is csrc/features.c.
 *
 * Scorer(wc, wg, b0, w1, b1, wo, bo) holds the weights of a candidate MLP with one or two
 * hidden ReLU layers (policies.learned.CandidateScorer's arrays; w1/b1 empty for one layer),
 * copied once into zero-padded blocks of TW hidden units. Scorer.best(x, n) scores the first n
 * rows of x (float32, (K + 1, F): candidates in rows 0..K-1, the global features in the first
 * G values of row K) and returns the index of the best (the first of equal scores), exactly
 * the choice of CandidateScorer.choose_first up to float32 summation order. Scorer.decide(S, v, x)
 * computes the features of a decision's packed candidates (policies.features) into x first.
 *
 * Speed: the hidden units of TW-wide blocks are accumulated in registers, two candidates at
 * a time (independent FMA chains), instead of through memory, skipping the rows of zero inputs
 * (see KERNEL); compiled for AVX2+FMA where the CPU has it (chosen at run time) and for the
 * baseline x86-64 / other targets otherwise.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "csrc/features.c"  /* the feature kernel: ft_compute, set_layout */

#define TW 32      /* hidden units per register block (4 vectors of 8) */
#define MAXF 4096  /* sanity bounds on the shapes */
#define MAXH 4096

typedef struct {
    PyObject_HEAD
    int F, G, H0, H1;  /* H1 == 0: one hidden layer */
    int P0, P1;        /* H0, H1 rounded up to TW */
    float *wc;         /* (F, P0) */
    float *wg;         /* (G, P0) */
    float *b0;         /* (P0) */
    float *w1;         /* (P0, P1) */
    float *b1;         /* (P1) */
    float *wo;         /* (P1 or P0) */
    float bo;
    float *scratch;    /* g (P0) + two candidates' hidden units (2 * P0) */
    PyObject *args;    /* the constructor's arguments (for pickling and copying) */
} Scorer;

static void
scorer_free_arrays(Scorer *s)
{
    free(s->wc);  /* from zeros (aligned_alloc) */
    free(s->wg);
    free(s->b0);
    free(s->w1);
    free(s->b1);
    free(s->wo);
    free(s->scratch);
    s->wc = s->wg = s->b0 = s->w1 = s->b1 = s->wo = s->scratch = NULL;
}

static void
scorer_dealloc(Scorer *s)
{
    scorer_free_arrays(s);
    Py_CLEAR(s->args);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

/* A float32 C-contiguous buffer of ndim dimensions; shape into dims. */
static int
get_f32(PyObject *o, const char *name, int ndim, Py_ssize_t *dims, Py_buffer *b)
{
    if (PyObject_GetBuffer(o, b, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | PyBUF_ND) < 0)
        return -1;
    if (b->itemsize != 4 || b->format == NULL || strcmp(b->format, "f") != 0 || b->ndim != ndim) {
        PyErr_Format(PyExc_ValueError, "Scorer: %s must be a %d-d float32 array", name, ndim);
        PyBuffer_Release(b);
        return -1;
    }
    for (int d = 0; d < ndim; d++)
        dims[d] = b->shape[d];
    return 0;
}

/* n zero floats on a 64-byte boundary (free with free()): with rows of a multiple of TW floats,
 * no 32-byte load of the kernel straddles two cache lines (3% of a decision, side by side) */
static float *
zeros(Py_ssize_t n)
{
    const size_t bytes = ((n > 0 ? (size_t)n : 1) * sizeof(float) + 63) / 64 * 64;
    float *p = aligned_alloc(64, bytes);
    if (p == NULL)
        PyErr_NoMemory();
    else
        memset(p, 0, bytes);
    return p;
}

static int
round_up(int h)
{
    return (h + TW - 1) / TW * TW;
}

static int
scorer_init(Scorer *s, PyObject *args, PyObject *kw)
{
    PyObject *o[6];
    float bo;
    static char *names[] = {"wc", "wg", "b0", "w1", "b1", "wo", "bo", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOOf:Scorer", names, &o[0], &o[1], &o[2],
                                     &o[3], &o[4], &o[5], &bo))
        return -1;
    Py_buffer b[6];
    Py_ssize_t d[6][2];  /* each array's shape */
    static const int ndim[6] = {2, 2, 1, 2, 1, 1};
    int got, rc = -1;
    for (got = 0; got < 6; got++)
        if (get_f32(o[got], names[got], ndim[got], d[got], &b[got]) < 0)
            goto done;
    Py_ssize_t *dwc = d[0], *dwg = d[1], *db0 = d[2], *dw1 = d[3], *db1 = d[4], *dwo = d[5];
    Py_ssize_t F = dwc[0], H0 = dwc[1], G = dwg[0], H1 = db1[0];
    int two = H1 > 0;
    if (F < 1 || F > MAXF || G < 0 || G > F || H0 < 1 || H0 > MAXH || H1 > MAXH
        || dwg[1] != H0 || db0[0] != H0
        || (two && (dw1[0] != H0 || dw1[1] != H1))
        || (!two && dw1[0] * dw1[1] != 0)
        || dwo[0] != (two ? H1 : H0)) {
        PyErr_SetString(PyExc_ValueError,
                        "Scorer: shapes must be wc (F, H0), wg (G, H0) with G <= F, b0 (H0), "
                        "w1 (H0, H1), b1 (H1), wo (H1) -- or w1 (0, 0), b1 (0), wo (H0) for "
                        "one hidden layer");
        goto done;
    }
    scorer_free_arrays(s);
    s->F = (int)F;
    s->G = (int)G;
    s->H0 = (int)H0;
    s->H1 = (int)H1;
    s->P0 = round_up((int)H0);
    s->P1 = two ? round_up((int)H1) : 0;
    int P0 = s->P0, P1 = s->P1;
    if (!(s->wc = zeros(F * P0)) || !(s->wg = zeros(G * P0 + 1)) || !(s->b0 = zeros(P0))
        || !(s->w1 = zeros((Py_ssize_t)P0 * P1 + 1)) || !(s->b1 = zeros(P1 + 1))
        || !(s->wo = zeros(two ? P1 : P0)) || !(s->scratch = zeros(3 * (Py_ssize_t)P0))) {
        scorer_free_arrays(s);  /* best() then refuses to run */
        goto done;
    }
    const float *wc = b[0].buf, *wg = b[1].buf, *b0 = b[2].buf, *w1 = b[3].buf, *b1 = b[4].buf,
                *wo = b[5].buf;
    for (Py_ssize_t f = 0; f < F; f++)
        memcpy(s->wc + f * P0, wc + f * H0, (size_t)H0 * sizeof(float));
    for (Py_ssize_t f = 0; f < G; f++)
        memcpy(s->wg + f * P0, wg + f * H0, (size_t)H0 * sizeof(float));
    memcpy(s->b0, b0, (size_t)H0 * sizeof(float));
    for (Py_ssize_t j = 0; two && j < H0; j++)
        memcpy(s->w1 + j * P1, w1 + j * H1, (size_t)H1 * sizeof(float));
    if (two)
        memcpy(s->b1, b1, (size_t)H1 * sizeof(float));
    memcpy(s->wo, wo, (size_t)dwo[0] * sizeof(float));
    s->bo = bo;
    Py_XSETREF(s->args, Py_BuildValue("(OOOOOOf)", o[0], o[1], o[2], o[3], o[4], o[5], bo));
    rc = s->args == NULL ? -1 : 0;
done:
    for (int i = 0; i < got; i++)
        PyBuffer_Release(&b[i]);
    return rc;
}

/* The kernel: written once, compiled twice (AVX2+FMA and baseline) through KERNEL(). A block
 * of TW hidden units of two candidates lives in 2 * TW / 8 vector registers (GCC's vector
 * extension: the baseline build splits each into two SSE registers).
 *
 * Zero inputs are skipped: a layer's input row r (a feature, or a unit of hidden layer 1) is
 * accumulated only where one of the two candidates has a nonzero value there. A skipped term is
 * 0 * w, and adding it changes no sum, so the scores are those of the dense loop bit for bit --
 * but a third or more of the work goes: a state's one-hot flags, copy times without a cost
 * model, and about half of hidden layer 1 after its ReLU are zeros. */
#if defined(__GNUC__)
typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4)));  /* unaligned loads */
#define LD(p) (*(const v8u *)(p))
#define ST(p, v) (*(v8u *)(p) = (v))
typedef int v8i __attribute__((vector_size(32)));
#define BCAST(p) ((v8){*(p), *(p), *(p), *(p), *(p), *(p), *(p), *(p)})  /* one value in every lane */
#define RELU(v) ((v8)((v8i)(v) & ((v) > 0.0f)))  /* the comparison gives -1 (all bits) or 0 */

/* a0..a3 / b0..b3 (a block of TW units of candidates a and b) += row r of W (STRIDE floats
 * apart, the block's columns from W) times the inputs XA[r] / XB[r], for every r whose bit is
 * set in the masks M[0..] (bit q of M[c]: row 64 c + q) */
#define ACC_ROW(XA, XB, W, STRIDE, R)                                                         \
    do {                                                                                      \
        const float *w = (W) + (Py_ssize_t)(R) * (STRIDE);                                    \
        const v8 w0 = LD(w), w1 = LD(w + 8), w2 = LD(w + 16), w3 = LD(w + 24);                \
        const v8 va = BCAST((XA) + (R)), vb = BCAST((XB) + (R));                              \
        a0 += va * w0; a1 += va * w1; a2 += va * w2; a3 += va * w3;                           \
        b0 += vb * w0; b1 += vb * w1; b2 += vb * w2; b3 += vb * w3;                           \
    } while (0)
#define ACCUMULATE(XA, XB, W, STRIDE, M, NM)                                                  \
    for (int c_ = 0; c_ < (NM); c_++) {                                                       \
        uint64_t m_ = (M)[c_];                                                                \
        for (; m_ & (m_ - 1); m_ &= m_ - 1) {  /* two rows a pass, in ascending order */      \
            const int r1 = 64 * c_ + __builtin_ctzll(m_);                                     \
            m_ &= m_ - 1;                                                                     \
            const int r2 = 64 * c_ + __builtin_ctzll(m_);                                     \
            ACC_ROW(XA, XB, W, STRIDE, r1);                                                   \
            ACC_ROW(XA, XB, W, STRIDE, r2);                                                   \
        }                                                                                     \
        if (m_)                                                                               \
            ACC_ROW(XA, XB, W, STRIDE, 64 * c_ + __builtin_ctzll(m_));                        \
    }

/* The masks of rows 0..N-1 where XA or XB is nonzero (NaN counts as nonzero), into M[0..] */
#define NONZERO(XA, XB, N, M)                                                                 \
    for (int c_ = 0; c_ * 64 < (N); c_++) {                                                   \
        uint64_t m_ = 0;                                                                      \
        const int e_ = (N) - 64 * c_ < 64 ? (N) - 64 * c_ : 64;                               \
        int q_ = 0;                                                                           \
        for (; q_ + 8 <= e_; q_ += 8) {                                                       \
            const v8i nz_ = (LD((XA) + 64 * c_ + q_) != 0.0f) | (LD((XB) + 64 * c_ + q_) != 0.0f); \
            m_ |= (uint64_t)MASK8(nz_) << q_;                                                 \
        }                                                                                     \
        for (; q_ < e_; q_++)                                                                 \
            m_ |= (uint64_t)(((XA)[64 * c_ + q_] != 0.0f) | ((XB)[64 * c_ + q_] != 0.0f)) << q_; \
        (M)[c_] = m_;                                                                         \
    }

#define KERNEL(NAME, ATTR)                                                                    \
ATTR static Py_ssize_t                                                                        \
NAME(const Scorer *s, const float *x, Py_ssize_t n, Py_ssize_t K, float *scores)            \
{                                                                                             \
    const int F = s->F, G = s->G, P0 = s->P0, P1 = s->P1;                                     \
    const int NF = (F + 63) / 64, NH = (P0 + 63) / 64;                                        \
    float *g = s->scratch, *ha = g + P0, *hb = ha + P0;                                        \
    uint64_t mf[(MAXF + 63) / 64], mh[(MAXH + 63) / 64];                                       \
    const float *xg = x + K * F;                                                              \
    for (int j = 0; j < P0; j++)                                                              \
        g[j] = s->b0[j];                                                                      \
    for (int f = 0; f < G; f++) {                                                             \
        const float a = xg[f], *w = s->wg + (Py_ssize_t)f * P0;                               \
        if (a != 0.0f)                                                                        \
            for (int j = 0; j < P0; j++)                                                      \
                g[j] += a * w[j];                                                             \
    }                                                                                         \
    Py_ssize_t best_i = 0;                                                                    \
    float best = 0.0f;                                                                        \
    for (Py_ssize_t i = 0; i < n; i += 2) {                                                   \
        const int pair = i + 1 < n;                                                           \
        const float *xa = x + i * F, *xb = pair ? xa + F : xa;                                \
        NONZERO(xa, xb, F, mf)                                                                \
        /* layer 1: TW hidden units of both candidates per pass over the features */         \
        for (int j0 = 0; j0 < P0; j0 += TW) {                                                 \
            v8 a0 = LD(g + j0), a1 = LD(g + j0 + 8), a2 = LD(g + j0 + 16), a3 = LD(g + j0 + 24); \
            v8 b0 = a0, b1 = a1, b2 = a2, b3 = a3;                                            \
            ACCUMULATE(xa, xb, s->wc + j0, P0, mf, NF)                                        \
            ST(ha + j0, RELU(a0)); ST(ha + j0 + 8, RELU(a1));                                 \
            ST(ha + j0 + 16, RELU(a2)); ST(ha + j0 + 24, RELU(a3));                           \
            ST(hb + j0, RELU(b0)); ST(hb + j0 + 8, RELU(b1));                                 \
            ST(hb + j0 + 16, RELU(b2)); ST(hb + j0 + 24, RELU(b3));                           \
        }                                                                                     \
        if (P1)                                                                               \
            NONZERO(ha, hb, P0, mh)                                                           \
        float sa = s->bo, sb = s->bo;                                                         \
        const int last = P1 ? P1 : P0;                                                        \
        for (int m0 = 0; m0 < last; m0 += TW) {                                               \
            v8 a0, a1, a2, a3, b0, b1, b2, b3;                                                \
            if (P1 == 0) {  /* one hidden layer: its units are the output layer's inputs */   \
                a0 = LD(ha + m0); a1 = LD(ha + m0 + 8); a2 = LD(ha + m0 + 16); a3 = LD(ha + m0 + 24); \
                b0 = LD(hb + m0); b1 = LD(hb + m0 + 8); b2 = LD(hb + m0 + 16); b3 = LD(hb + m0 + 24); \
            } else {  /* layer 2: TW units of both candidates per pass over layer 1 */         \
                const float *c = s->b1 + m0;                                                  \
                a0 = LD(c); a1 = LD(c + 8); a2 = LD(c + 16); a3 = LD(c + 24);                 \
                b0 = a0; b1 = a1; b2 = a2; b3 = a3;                                           \
                ACCUMULATE(ha, hb, s->w1 + m0, P1, mh, NH)                                    \
                a0 = RELU(a0); a1 = RELU(a1); a2 = RELU(a2); a3 = RELU(a3);                   \
                b0 = RELU(b0); b1 = RELU(b1); b2 = RELU(b2); b3 = RELU(b3);                   \
            }                                                                                 \
            const float *o = s->wo + m0;                                                      \
            const v8 o0 = LD(o), o1 = LD(o + 8), o2 = LD(o + 16), o3 = LD(o + 24);            \
            const v8 ta = a0 * o0 + a1 * o1 + a2 * o2 + a3 * o3;                              \
            const v8 tb = b0 * o0 + b1 * o1 + b2 * o2 + b3 * o3;                              \
            for (int t = 0; t < 8; t++) {                                                     \
                sa += ta[t];                                                                  \
                sb += tb[t];                                                                  \
            }                                                                                 \
        }                                                                                     \
        if (scores != NULL) {                                                                 \
            scores[i] = sa;                                                                   \
            if (pair)                                                                         \
                scores[i + 1] = sb;                                                           \
        }                                                                                     \
        if (sa > best || i == 0) {                                                            \
            best = sa;                                                                        \
            best_i = i;                                                                       \
        }                                                                                     \
        if (pair && sb > best) {                                                              \
            best = sb;                                                                        \
            best_i = i + 1;                                                                   \
        }                                                                                     \
    }                                                                                         \
    return best_i;                                                                            \
}

/* the 8 lanes' signs as bits (baseline: one by one) */
#define MASK8(v) ((unsigned)((v)[0] != 0) | (unsigned)((v)[1] != 0) << 1 | (unsigned)((v)[2] != 0) << 2 \
                  | (unsigned)((v)[3] != 0) << 3 | (unsigned)((v)[4] != 0) << 4                   \
                  | (unsigned)((v)[5] != 0) << 5 | (unsigned)((v)[6] != 0) << 6                   \
                  | (unsigned)((v)[7] != 0) << 7)
KERNEL(best_generic, )
#undef MASK8
#if defined(__x86_64__) || defined(__i386__)
#define HAVE_AVX2_KERNEL 1
#define MASK8(v) ((unsigned)__builtin_ia32_movmskps256((v8)(v)))
KERNEL(best_avx2, __attribute__((target("avx2,fma"))))
#undef MASK8
#endif
#else
#error "policies/_mlp.c needs GCC or Clang (vector extensions); the package falls back to NumPy"
#endif

static Py_ssize_t (*best_kernel)(const Scorer *, const float *, Py_ssize_t, Py_ssize_t, float *) = best_generic;

/* Scorer.best(x, n), and with want_scores Scorer.scores(x, n) */
static PyObject *
scorer_run(Scorer *s, PyObject *const *args, Py_ssize_t nargs, int want_scores)
{
    const char *name = want_scores ? "scores" : "best";
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "%s(x, n) takes two arguments", name);
        return NULL;
    }
    if (s->wc == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Scorer was not initialised");
        return NULL;
    }
    Py_ssize_t n = PyLong_AsSsize_t(args[1]);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer b;
    if (PyObject_GetBuffer(args[0], &b, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | PyBUF_ND) < 0)
        return NULL;
    Py_ssize_t K = b.ndim == 2 ? b.shape[0] - 1 : -1;
    if (b.itemsize != 4 || b.format == NULL || strcmp(b.format, "f") != 0 || b.ndim != 2
        || b.shape[1] != s->F || K < 0 || n < 1 || n > K) {
        PyErr_Format(PyExc_ValueError,
                     "%s: x must be a float32 (K + 1, %d) array and n in 1..K", name, s->F);
        PyBuffer_Release(&b);
        return NULL;
    }
    float *sc = want_scores ? PyMem_Malloc((size_t)n * sizeof(float)) : NULL;
    if (want_scores && sc == NULL) {
        PyBuffer_Release(&b);
        return PyErr_NoMemory();
    }
    Py_ssize_t i = best_kernel(s, (const float *)b.buf, n, K, sc);
    PyBuffer_Release(&b);
    if (!want_scores)
        return PyLong_FromSsize_t(i);
    PyObject *res = PyList_New(n);
    for (Py_ssize_t q = 0; res != NULL && q < n; q++) {
        PyObject *f = PyFloat_FromDouble((double)sc[q]);
        if (f == NULL)
            Py_CLEAR(res);
        else
            PyList_SET_ITEM(res, q, f);
    }
    PyMem_Free(sc);
    return res;
}

static PyObject *
scorer_best(Scorer *s, PyObject *const *args, Py_ssize_t nargs)
{
    return scorer_run(s, args, nargs, 0);
}

static PyObject *
scorer_scores(Scorer *s, PyObject *const *args, Py_ssize_t nargs)
{
    return scorer_run(s, args, nargs, 1);
}

/* Scorer.__reduce__: rebuilt from its constructor's arguments (pickle, copy) */
static PyObject *
scorer_reduce(Scorer *s, PyObject *unused)
{
    if (s->args == NULL) {
        PyErr_SetString(PyExc_TypeError, "cannot pickle an uninitialised Scorer");
        return NULL;
    }
    return Py_BuildValue("(OO)", (PyObject *)Py_TYPE(s), s->args);
}

/* What decide and features share: their three buffers (S, v, x) checked, and the feature kernel
 * run on them. Returns K, with n = v[0] (>= min_n) in *n and x kept in *bx (the caller releases
 * it); -1 with an exception, every buffer released. nf: the features per candidate x must hold. */
static Py_ssize_t
features_call(const char *name, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t nf,
              Py_ssize_t min_n, Py_buffer *bx, Py_ssize_t *n_out)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "%s(S, v, x) takes three arguments", name);
        return -1;
    }
    if (ft_table == NULL) {
        PyErr_Format(PyExc_RuntimeError, "%s: set_layout() not called", name);
        return -1;
    }
    Py_buffer bs, bv;
    if (PyObject_GetBuffer(args[0], &bs, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | PyBUF_ND) < 0)
        return -1;
    if (PyObject_GetBuffer(args[1], &bv, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | PyBUF_ND) < 0) {
        PyBuffer_Release(&bs);
        return -1;
    }
    if (PyObject_GetBuffer(args[2], bx, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | PyBUF_ND) < 0) {
        PyBuffer_Release(&bs);
        PyBuffer_Release(&bv);
        return -1;
    }
    Py_ssize_t K = bx->ndim == 2 ? bx->shape[0] - 1 : -1;
    double n = bv.ndim == 1 && bv.len >= 8 ? ((const double *)bv.buf)[0] : -1.0;
    if (bs.ndim != 2 || bs.itemsize != 8 || strcmp(bs.format, "d") != 0 || bs.shape[1] != FT_NCOL
        || bv.ndim != 1 || bv.itemsize != 8 || strcmp(bv.format, "d") != 0
        || bx->ndim != 2 || bx->itemsize != 4 || strcmp(bx->format, "f") != 0 || bx->shape[1] != nf
        || nf != FT_F || K < 1 || bv.shape[0] != FT_HEAD + 2 * K
        || !(n >= (double)min_n && n <= (double)K) || n != (double)(Py_ssize_t)n) {
        PyErr_Format(PyExc_ValueError,
                     "%s: S must be float64 (rows, %zd), v float64 (%zd + 2K) with %zd <= v[0] <= K, "
                     "x float32 (K + 1, %d)", name, FT_NCOL, FT_HEAD, min_n, FT_F);
        K = -1;
    } else {
        if (ft_compute((const double *)bs.buf, bs.shape[0], (const double *)bv.buf, K,
                       (float *)bx->buf) < 0)
            K = -1;
        else
            *n_out = (Py_ssize_t)n;
    }
    PyBuffer_Release(&bs);
    PyBuffer_Release(&bv);
    if (K < 0)
        PyBuffer_Release(bx);
    return K;
}

/* Scorer.decide(S, v, x): one decision -- the features of the packed candidates (the kernel
 * of set_features) into x, then best(x, n) with n = v[0] */
static PyObject *
scorer_decide(Scorer *s, PyObject *const *args, Py_ssize_t nargs)
{
    if (s->wc == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "decide: Scorer not initialised");
        return NULL;
    }
    Py_buffer bx;
    Py_ssize_t n = 0, K = features_call("decide", args, nargs, s->F, 1, &bx, &n);
    if (K < 0)
        return NULL;
    PyObject *res = PyLong_FromSsize_t(best_kernel(s, (const float *)bx.buf, n, K, NULL));
    PyBuffer_Release(&bx);
    return res;
}

/* features(S, v, x): the features of the packed candidates into x (the kernel of
 * set_features), as decide computes them, without the forward pass (the environments' step) */
static PyObject *
mlp_features(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer bx;
    Py_ssize_t n = 0;
    if (features_call("features", args, nargs, FT_F, 0, &bx, &n) < 0)
        return NULL;
    PyBuffer_Release(&bx);
    Py_RETURN_NONE;
}

static PyObject *
scorer_get_simd(Scorer *s, void *closure)
{
    return PyUnicode_FromString(best_kernel == best_generic ? "baseline" : "avx2+fma");
}

static PyMethodDef scorer_methods[] = {
    {"best", (PyCFunction)(void (*)(void))scorer_best, METH_FASTCALL,
     "best(x, n): index of the best of the first n candidates of x (float32 (K + 1, F), "
     "globals in row K)"},
    {"scores", (PyCFunction)(void (*)(void))scorer_scores, METH_FASTCALL,
     "scores(x, n): the first n candidates' scores (float32 values as floats), as best computes them"},
    {"decide", (PyCFunction)(void (*)(void))scorer_decide, METH_FASTCALL,
     "decide(S, v, x): the features of the packed candidates v (policies.features) into x, "
     "then best(x, v[0])"},
    {"__reduce__", (PyCFunction)scorer_reduce, METH_NOARGS, "pickle support"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef scorer_getset[] = {
    {"simd", (getter)scorer_get_simd, NULL, "which compiled kernel runs", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ScorerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "policies._mlp.Scorer",
    .tp_basicsize = sizeof(Scorer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)scorer_init,
    .tp_dealloc = (destructor)scorer_dealloc,
    .tp_methods = scorer_methods,
    .tp_getset = scorer_getset,
    .tp_doc = "Scorer(wc, wg, b0, w1, b1, wo, bo): a candidate MLP's forward pass in C",
};

static PyMethodDef mlp_methods[] = {
    {"set_layout", mlp_set_layout, METH_VARARGS,
     "set_layout(layout, inv_scale, table, inv_log_ns): policies.features' layout constants "
     "(checked), the log block's float32 scale factors, the state table, 1 / log1p(1e9)"},
    {"log_f32", mlp_log_f32, METH_O,
     "log_f32(x): float32(log(x)) of a float64 array as bytes, as the feature kernel computes it"},
    {"features", (PyCFunction)(void (*)(void))mlp_features, METH_FASTCALL,
     "features(S, v, x): the features of the packed candidates v (policies.features) into x"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef mlp_module = {
    PyModuleDef_HEAD_INIT, "policies._mlp",
    "The learned eviction policy's forward pass in C (optional accelerator of policies.learned).",
    -1, mlp_methods,
};

PyMODINIT_FUNC
PyInit__mlp(void)
{
    ft_init();
#ifdef HAVE_AVX2_KERNEL
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        best_kernel = best_avx2;
#endif
    if (PyType_Ready(&ScorerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&mlp_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ScorerType);
    if (PyModule_AddObject(m, "Scorer", (PyObject *)&ScorerType) < 0) {
        Py_DECREF(&ScorerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
