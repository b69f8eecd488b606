/* The comparison's element-wise work, one fused loop per block (pytest_cannbench/judge/scan_kernel.py loads it).

   The torch fast path of error_scan.py makes about twenty passes over every 64 Ki-point slice (conversions,
   differences, reciprocals, products, maxima, masks), each a separate call streaming through the cache; this file
   does the same IEEE double operations, in the same order for every element, per 2048-point block that stays in
   the first-level cache, in one loop the compiler vectorizes. Every value written (relative errors, errors, the normal
   region's relative errors) and every count and maximum is therefore the same bits as the torch path's; the sums
   stay torch's own (Tensor.sum over the chunk buffers this fills), so MERE is unchanged too. It must be built
   without floating-point contraction or fast-math (scan_kernel.py passes -ffp-contract=off), and a session
   checks it against the torch path before using it.

   Inputs: float32 (code 0), float16 (1) or bfloat16 (2), contiguous. A slice that holds a NaN or an Inf in the
   candidate's or the golden's error that the two do not share, or in the native's error at a point they both
   hold finite, is left to the torch path (status 1), which decides it with the general rules. */

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

enum { F32 = 0, F16 = 1, BF16 = 2 };

/* counts, in this order (scan_kernel.py names them) */
enum { C_VALID, C_VALID_ERR, C_SMALL, C_CANCEL, C_NORMAL, C_SMALL_ERR, C_SMALL_NATIVE_ERR, C_CANCEL_ERR,
       C_CANCEL_NATIVE_ERR, C_NORMAL_ERR, C_NORMAL_NATIVE_ERR, C_FAR, C_NAN, C_INF, N_COUNTS };
/* maxima, in this order; a maximum is only meaningful where its region's count is not zero */
enum { M_REL, M_DIFF, M_NORMAL_REL, M_SMALL_DIFF, M_SMALL_NDIFF, M_CANCEL_DIFF, M_CANCEL_NDIFF, N_MAXIMA };

static double half_to_double(uint16_t h) {
    uint64_t sign = (uint64_t)(h >> 15) << 63;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v;
    if (exp == 0) {
        v = (double)mant * 0x1p-24; /* zero or subnormal: exact */
        uint64_t bits;
        memcpy(&bits, &v, 8);
        bits |= sign;
        memcpy(&v, &bits, 8);
        return v;
    }
    uint64_t bits;
    if (exp == 31)
        bits = sign | (0x7ffULL << 52) | ((uint64_t)mant << 42);
    else
        bits = sign | ((uint64_t)(exp - 15 + 1023) << 52) | ((uint64_t)mant << 42);
    memcpy(&v, &bits, 8);
    return v;
}

static double half_table[1 << 16]; /* every float16 as a double: filled by cb_init */

void cb_init(void) {
    for (uint32_t h = 0; h < (1u << 16); h++)
        half_table[h] = half_to_double((uint16_t)h);
}

/* ``w`` elements from ``start`` of a float32, float16 or bfloat16 array, as doubles (exact conversions). */
static void convert(const void *p, int code, int64_t start, int64_t w, double *restrict out) {
    if (code == F32) {
        const float *restrict f = (const float *)p + start;
        for (int64_t i = 0; i < w; i++)
            out[i] = (double)f[i];
    } else if (code == F16) {
        const uint16_t *restrict h = (const uint16_t *)p + start;
        for (int64_t i = 0; i < w; i++)
            out[i] = half_table[h[i]];
    } else {
        const uint16_t *restrict h = (const uint16_t *)p + start;
        for (int64_t i = 0; i < w; i++) {
            uint32_t bits = (uint32_t)h[i] << 16;
            float f;
            memcpy(&f, &bits, 4);
            out[i] = (double)f;
        }
    }
}

/* A non-negative double's bits as an integer: ordered as the doubles are, so maxima and minima of the (finite,
   non-negative) errors and magnitudes below are integer ones, which vectorize where double ones may not. */
static inline int64_t order(double x) {
    int64_t b;
    memcpy(&b, &x, 8);
    return b;
}

static inline double unorder(int64_t b) {
    double x;
    memcpy(&x, &b, 8);
    return x;
}

/* What one block's fused loop found (maxima and the minimum as order() integers). */
struct block {
    int64_t over, nover, far, m_rel, m_diff, ga_min;
};

/* One block of ``w`` points whose candidate, golden and native are in A, G and N (doubles): the errors into D
   and N (the native's; zeros without one), the relative errors into R and NR, |g| into GA, with the same
   operations, in the same order, as error_analysis.analyse; returns how many errors are a NaN or an Inf. One
   loop over restrict pointers, so that it vectorizes. */
static int64_t block_errors(const double *restrict A, const double *restrict G, double *restrict N, int has_native,
                            double eps, int64_t w, double *restrict D, double *restrict R, double *restrict NR,
                            double *restrict GA) {
    int64_t bad = 0;
    for (int64_t i = 0; i < w; i++) {
        double d = fabs(A[i] - G[i]);
        double nd = has_native ? fabs(N[i] - G[i]) : 0.0;
        double ga = fabs(G[i]);
        double inv = 1.0 / (ga + eps);
        D[i] = d, N[i] = nd, R[i] = d * inv, NR[i] = nd * inv, GA[i] = ga;
        bad += !(d <= DBL_MAX) + !(nd <= DBL_MAX);
    }
    return bad;
}

/* A block's counts over MARE (and the allclose rule's ``far``), the maxima of its errors and relative errors and
   the minimum of |g|. Every value here is finite and >= +0.0 (block_errors found no NaN or Inf, or
   shared_specials zeroed them), so integer maxima over order() are exact, and they vectorize. */
static void block_stats(const double *restrict R, const double *restrict D, const double *restrict NR,
                        const double *restrict GA, double lim, int has_tol, double rtol, double atol, int64_t w,
                        struct block *out) {
    int64_t over = 0, nover = 0, far = 0, mr = -1, md = -1, gm = INT64_MAX;
    for (int64_t i = 0; i < w; i++) {
        double t = GA[i] * rtol;
        t = t + atol;
        over += R[i] > lim;
        nover += NR[i] > lim;
        far += has_tol && D[i] > t;
        int64_t ro = order(R[i]), dor = order(D[i]), go = order(GA[i]);
        mr = ro > mr ? ro : mr;
        md = dor > md ? dor : md;
        gm = go < gm ? go : gm;
    }
    out->over = over, out->nover = nover, out->far = far;
    out->m_rel = mr, out->m_diff = md, out->ga_min = gm;
}

/* A block with NaN or Inf errors whose specials the candidate and the golden share point for point (exp
   overflowing in both, NaN passed through): those points are left out of every figure, as
   error_scan._matching_specials leaves them out, with the candidate's NaN and Inf counted. Zeroes the points'
   values (errors, relative errors, |g|) and marks them in ``left``. Returns how many were left out, or -1 where
   a special is not shared, or the native's error is a NaN or an Inf at a point that is kept (the torch path
   then decides the slice). */
static int64_t shared_specials(const double *A, const double *G, double *D, double *N, double *R, double *NR,
                               double *GA, int64_t w, unsigned char *left, int64_t *nan, int64_t *inf) {
    int64_t k = 0;
    for (int64_t i = 0; i < w; i++) {
        left[i] = 0;
        if (D[i] <= DBL_MAX)
            continue;
        if (!(A[i] == G[i] || (A[i] != A[i] && G[i] != G[i])))
            return -1;
        left[i] = 1, k++;
        *nan += A[i] != A[i];
        *inf += A[i] == A[i]; /* a special that is not a NaN */
        D[i] = N[i] = R[i] = NR[i] = GA[i] = 0.0;
    }
    for (int64_t i = 0; i < w; i++)
        if (!(N[i] <= DBL_MAX))
            return -1;
    return k;
}

static double as_max(int64_t o) { return o < 0 ? -INFINITY : unorder(o); }

#define BLOCK 2048 /* points per fused loop: its seven arrays stay in the first-level cache */

/* One chunk of ``size`` elements, slice by slice (``sub`` elements each, as the torch path's slices).

   For every slice the kernel takes (status 0: all points normal, 2: some near zero) it writes rel, diff and nrel
   (the native's relative errors; zeros without a native) for the chunk's sums, and, for status 2, normal_rel and
   normal_nrel with the points outside the normal region as +0.0. It adds the slice's counts to ``counts`` and its
   maxima to ``maxima`` (each starting at -inf). NaN and Inf the candidate and the golden share are left out
   where ``specials_ok`` (the thresholds put such points in no error: error_scan._matching_specials), and the
   candidate's among them counted. Status 1: not taken (another special), nothing of that slice is counted.
   ``scratch`` holds 4 * BLOCK doubles. ``thr``: mare, small_threshold, small_error, cancel_boundary, rtol, atol. */
int cb_scan_chunk(const void *a, int a_code, const void *g, int g_code, const void *n, int n_code, int64_t size,
                  int64_t sub, const double *thr, int has_tol, int specials_ok, double eps, double *rel,
                  double *diff, double *nrel, double *normal_rel, double *normal_nrel, int64_t *counts,
                  double *maxima, int32_t *status, double *scratch) {
    const double lim = thr[0], small_threshold = thr[1], small_error = thr[2], cancel_boundary = thr[3];
    const double rtol = thr[4], atol = thr[5];
    const double near_bound = small_threshold > cancel_boundary ? small_threshold : cancel_boundary;
    double *A = scratch, *G = scratch + BLOCK, *N = scratch + 2 * BLOCK, *GA = scratch + 3 * BLOCK;
    unsigned char left[BLOCK];
    int taken = 0;
    for (int64_t s = 0, k = 0; s < size; s += sub, k++) {
        const int64_t w = size - s < sub ? size - s : sub;
        int64_t c[N_COUNTS] = {0}, nan = 0, inf = 0;
        int64_t mr = -1, md = -1, m_normal = -1, m_sd = -1, m_snd = -1, m_cd = -1, m_cnd = -1;
        int bad = 0, near = 0;
        for (int64_t b = 0; b < w && !bad; b += BLOCK) {
            const int64_t bw = w - b < BLOCK ? w - b : BLOCK, at = s + b;
            double *D = diff + at, *R = rel + at, *NR = nrel + at;
            convert(a, a_code, at, bw, A);
            convert(g, g_code, at, bw, G);
            if (n != 0)
                convert(n, n_code, at, bw, N);
            int64_t lo = 0;
            if (block_errors(A, G, N, n != 0, eps, bw, D, R, NR, GA)) {
                lo = specials_ok ? shared_specials(A, G, D, N, R, NR, GA, bw, left, &nan, &inf) : -1;
                if (lo < 0) {
                    bad = 1;
                    break;
                }
            }
            struct block st;
            block_stats(R, D, NR, GA, lim, has_tol, rtol, atol, bw, &st);
            c[C_VALID] += bw - lo, c[C_VALID_ERR] += st.over, c[C_FAR] += st.far;
            mr = st.m_rel > mr ? st.m_rel : mr;
            md = st.m_diff > md ? st.m_diff : md;
            if (unorder(st.ga_min) >= near_bound) { /* all normal */
                c[C_NORMAL] += bw, c[C_NORMAL_ERR] += st.over, c[C_NORMAL_NATIVE_ERR] += st.nover;
                m_normal = st.m_rel > m_normal ? st.m_rel : m_normal;
                if (near) { /* the slice's normal buffers are being written: this block's too */
                    memcpy(normal_rel + at, R, (size_t)bw * sizeof(double));
                    if (normal_nrel != 0)
                        memcpy(normal_nrel + at, NR, (size_t)bw * sizeof(double));
                }
                continue;
            }
            if (!near && b > 0) { /* the first block near zero: the slice's earlier blocks were all normal */
                memcpy(normal_rel + s, rel + s, (size_t)b * sizeof(double));
                if (normal_nrel != 0)
                    memcpy(normal_nrel + s, nrel + s, (size_t)b * sizeof(double));
            }
            near = 1;
            double *NRL = normal_rel + at, *NNRL = normal_nrel != 0 ? normal_nrel + at : 0;
            for (int64_t i = 0; i < bw; i++) {
                if (lo && left[i]) { /* left out: in no region, +0.0 in the normal sums */
                    NRL[i] = 0.0;
                    if (NNRL != 0) NNRL[i] = 0.0;
                    continue;
                }
                double ga = GA[i], r = R[i], nr = NR[i];
                int small = ga < small_threshold;
                int cancel = !small && ga < cancel_boundary && fabs(A[i]) < cancel_boundary;
                int64_t dor = order(D[i]), ndor = order(N[i]);
                if (small) {
                    c[C_SMALL]++;
                    c[C_SMALL_ERR] += D[i] > small_error;
                    c[C_SMALL_NATIVE_ERR] += N[i] > small_error;
                    m_sd = dor > m_sd ? dor : m_sd;
                    m_snd = ndor > m_snd ? ndor : m_snd;
                } else if (cancel) {
                    c[C_CANCEL]++;
                    c[C_CANCEL_ERR] += r > lim;
                    c[C_CANCEL_NATIVE_ERR] += nr > lim;
                    m_cd = dor > m_cd ? dor : m_cd;
                    m_cnd = ndor > m_cnd ? ndor : m_cnd;
                } else {
                    c[C_NORMAL]++;
                    c[C_NORMAL_ERR] += r > lim;
                    c[C_NORMAL_NATIVE_ERR] += nr > lim;
                    int64_t ro = order(r);
                    m_normal = ro > m_normal ? ro : m_normal;
                }
                int inside = !small && !cancel;
                NRL[i] = inside ? r : 0.0;
                if (NNRL != 0) NNRL[i] = inside ? nr : 0.0;
            }
        }
        if (bad) {
            status[k] = 1;
            continue;
        }
        status[k] = near ? 2 : 0;
        c[C_NAN] = nan, c[C_INF] = inf;
        for (int j = 0; j < N_COUNTS; j++)
            counts[j] += c[j];
        int64_t m[N_MAXIMA] = {mr, md, m_normal, m_sd, m_snd, m_cd, m_cnd};
        for (int j = 0; j < N_MAXIMA; j++)
            if (as_max(m[j]) > maxima[j]) maxima[j] = as_max(m[j]);
        taken++;
    }
    return taken;
}

/* relative_errors' block: R = |a - g| * (1 / (|g| + eps)), rounded as the torch path rounds each step; its
   maximum (order(), folded into *m) and how many are a NaN or an Inf (into *bad). */
static void rel_block(const double *restrict A, const double *restrict G, double eps, int64_t w,
                      double *restrict R, int64_t *m, int64_t *bad) {
    int64_t mo = *m, nb = 0;
    for (int64_t i = 0; i < w; i++) {
        double r = fabs(A[i] - G[i]) * (1.0 / (fabs(G[i]) + eps));
        R[i] = r;
        nb += !(r <= DBL_MAX);
        int64_t ro = order(r);
        mo = ro > mo ? ro : mo;
    }
    *m = mo, *bad += nb;
}

/* MERE's chunk buffer and MARE for one chunk: rel = |a - g| * (1 / (|g| + eps)) into ``rel``, the maximum into
   ``*top``. Returns 0, or 1 at the first slice whose maximum is not under ``limit`` (a NaN or Inf included):
   the caller's verdict then needs the full rules. ``scratch`` holds 2 * BLOCK doubles. */
int cb_rel_chunk(const void *a, int a_code, const void *g, int g_code, int64_t size, int64_t sub, double limit,
                 double eps, double *rel, double *top, double *scratch) {
    double *A = scratch, *G = scratch + BLOCK;
    double m_all = *top;
    for (int64_t s = 0; s < size; s += sub) {
        const int64_t w = size - s < sub ? size - s : sub;
        int64_t m = -1, bad = 0;
        for (int64_t b = 0; b < w; b += BLOCK) {
            const int64_t bw = w - b < BLOCK ? w - b : BLOCK, at = s + b;
            convert(a, a_code, at, bw, A);
            convert(g, g_code, at, bw, G);
            rel_block(A, G, eps, bw, rel + at, &m, &bad);
        }
        double top_slice = as_max(m);
        if (bad || !(top_slice < limit))
            return 1;
        if (top_slice > m_all) m_all = top_slice;
    }
    *top = m_all;
    return 0;
}
