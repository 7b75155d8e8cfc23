/* softmax: over the last axis of x plus an optional broadcast bias and
 * mask (Swin's window attention), shape rule and reference kernels. */
#include <math.h>
#include <string.h>

#include "ops/ops.h"
#include "ops/ops_internal.h"

/* Checks that a (b or m, named `what`) broadcasts to x numpy-style with
 * x's last dimension. */
static cl_status check_bcast(const cl_shape *x, const cl_shape *a,
                             const char *what)
{
    if (a->ndim < 1 || a->ndim > x->ndim)
        return cl_error(CL_ERR_SHAPE,
                        "softmax: %s has %d dimensions, expected 1..%d (the "
                        "input's)",
                        what, a->ndim, x->ndim);
    const int off = x->ndim - a->ndim;
    for (int k = 0; k < a->ndim; k++) {
        const int64_t want = x->d[off + k];
        if (a->d[k] != want && (a->d[k] != 1 || k == a->ndim - 1))
            return cl_error(CL_ERR_SHAPE,
                            "softmax: %s dimension %d is %lld, expected %s%lld "
                            "(the input's dimension %d)",
                            what, k, (long long)a->d[k],
                            k == a->ndim - 1 ? "" : "1 or ", (long long)want,
                            off + k);
    }
    return CL_OK;
}

cl_status cl_softmax_infer(const cl_shape *x, const cl_shape *b,
                           const cl_shape *m, cl_shape *y)
{
    if (x->ndim < 2 || x->ndim > CL_MAX_DIMS)
        return cl_error(CL_ERR_SHAPE,
                        "softmax: input has %d dimensions, expected 2..%d",
                        x->ndim, CL_MAX_DIMS);
    for (int k = 0; k < x->ndim; k++)
        if (x->d[k] < 1 || x->d[k] > CL_OPS_MAX_DIM)
            return cl_error(CL_ERR_SHAPE,
                            "softmax: input dimension %d is %lld, expected "
                            "1..%d",
                            k, (long long)x->d[k], INT_MAX);
    CL_TRY(cl__ops_check_numel("softmax", "the input", x));
    if (b)
        CL_TRY(check_bcast(x, b, "bias"));
    if (m)
        CL_TRY(check_bcast(x, m, "mask"));
    *y = *x;
    return CL_OK;
}

/* Row strides of a (right-aligned to x) along x's row dimensions; 0 where
 * a has size 1 or no dimension. */
static void bcast_strides(const cl_shape *x, const cl_shape *a, int64_t *s)
{
    const int nd = x->ndim - 1, off = x->ndim - a->ndim;
    int64_t st = 1;
    for (int k = nd - 1; k >= 0; k--) {
        const int64_t size = k >= off ? a->d[k - off] : 1;
        s[k] = size == 1 ? 0 : st;
        st *= size;
    }
}

cl_softmax_dims cl_softmax_dims_of(const cl_shape *x, const cl_shape *b,
                                   const cl_shape *m)
{
    cl_softmax_dims d;
    memset(&d, 0, sizeof d);
    d.nd = x->ndim - 1;
    d.C = (int)x->d[x->ndim - 1];
    d.rows = 1;
    for (int k = 0; k < d.nd; k++) {
        d.d[k] = x->d[k];
        d.rows *= x->d[k];
    }
    if (b) {
        bcast_strides(x, b, d.sb);
        d.b_rows = cl_shape_numel(b) / d.C;
    }
    if (m)
        bcast_strides(x, m, d.sm);
    return d;
}

void cl_softmax_forward(float *y, const float *x, const float *b,
                        const float *m, const cl_softmax_dims *d)
{
    const int C = d->C;
    const int64_t work = d->rows * C;
#pragma omp parallel for schedule(static) if (work >= CL_OPS_PAR_MIN)
    for (int64_t r = 0; r < d->rows; r++) {
        const float *xr = x + r * C;
        const float *br = b ? b + cl_softmax_row_of(d, d->sb, r) * C : NULL;
        const float *mr = m ? m + cl_softmax_row_of(d, d->sm, r) * C : NULL;
        float *yr = y + r * C;
        float mx = -INFINITY;
        for (int c = 0; c < C; c++) {
            /* x + b + m in that order, as the backends add them. */
            float z = xr[c];
            if (br)
                z += br[c];
            if (mr)
                z += mr[c];
            yr[c] = z;
            if (z > mx)
                mx = z;
        }
        double s = 0.0;
        for (int c = 0; c < C; c++) {
            yr[c] = expf(yr[c] - mx);
            s += yr[c];
        }
        const float inv = (float)(1.0 / s);
        for (int c = 0; c < C; c++)
            yr[c] *= inv;
    }
}

/* dz of row r: y (dy - sum(dy y)). */
static void dz_row(float *dz, const float *dy, const float *y, int C)
{
    double s = 0.0;
    for (int c = 0; c < C; c++)
        s += (double)dy[c] * y[c];
    for (int c = 0; c < C; c++)
        dz[c] = (float)(y[c] * ((double)dy[c] - s));
}

/* db from dz, or (dz NULL) from dy and y row by row.  For each row of b,
 * the rows of x that read it: b's own coordinates fixed, the broadcast
 * ones counted up in row-major order. */
static void bias_grad(float *db, const float *dz, const float *dy,
                      const float *y, const cl_softmax_dims *d)
{
    const int C = d->C, nd = d->nd;
    int64_t xs[CL_MAX_DIMS], per = 1;
    int64_t st = 1;
    for (int k = nd - 1; k >= 0; k--) {
        xs[k] = st;
        st *= d->d[k];
    }
    for (int k = 0; k < nd; k++)
        if (!d->sb[k])
            per *= d->d[k];
    const int64_t work = d->rows * C;
#pragma omp parallel if (work >= CL_OPS_PAR_MIN)
    {
        enum { CHUNK = 64 };
        double acc[CHUNK];
        float row[CHUNK];
#pragma omp for schedule(static)
        for (int64_t rb = 0; rb < d->b_rows; rb++) {
            int64_t base = 0;
            for (int k = 0; k < nd; k++)
                if (d->sb[k])
                    base += (rb / d->sb[k]) % d->d[k] * xs[k];
            for (int c0 = 0; c0 < C; c0 += CHUNK) {
                const int cn = C - c0 < CHUNK ? C - c0 : CHUNK;
                for (int c = 0; c < cn; c++)
                    acc[c] = 0.0;
                for (int64_t j = 0; j < per; j++) {
                    int64_t r = base, q = j;
                    for (int k = nd - 1; k >= 0; k--)
                        if (!d->sb[k]) {
                            r += q % d->d[k] * xs[k];
                            q /= d->d[k];
                        }
                    const float *src;
                    if (dz) {
                        src = dz + r * C + c0;
                    } else {
                        /* The whole row's sum is needed for any chunk. */
                        double s = 0.0;
                        for (int c = 0; c < C; c++)
                            s += (double)dy[r * C + c] * y[r * C + c];
                        for (int c = 0; c < cn; c++)
                            row[c] = (float)(y[r * C + c0 + c] *
                                             ((double)dy[r * C + c0 + c] - s));
                        src = row;
                    }
                    for (int c = 0; c < cn; c++)
                        acc[c] += src[c];
                }
                for (int c = 0; c < cn; c++)
                    db[rb * C + c0 + c] = (float)acc[c];
            }
        }
    }
}

void cl_softmax_bias_grad(float *db, const float *dz, const cl_softmax_dims *d)
{
    bias_grad(db, dz, NULL, NULL, d);
}

void cl_softmax_backward(float *dx, float *db, const float *dy, const float *y,
                         const cl_softmax_dims *d)
{
    const int C = d->C;
    const int64_t work = d->rows * C;
    if (dx) {
#pragma omp parallel for schedule(static) if (work >= CL_OPS_PAR_MIN)
        for (int64_t r = 0; r < d->rows; r++)
            dz_row(dx + r * C, dy + r * C, y + r * C, C);
    }
    if (db)
        bias_grad(db, dx, dy, y, d);
}
