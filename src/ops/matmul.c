/* matmul: batched matrix products over the last two dimensions (alpha a b
 * or alpha a b^T), shape rule and reference kernels. */
#include <math.h>

#include "ops/ops.h"
#include "ops/ops_internal.h"

cl_status cl_matmul_infer(const cl_matmul_attr *at, const cl_shape *a,
                          const cl_shape *b, cl_shape *y)
{
    if (!(at->alpha != 0.0f && isfinite(at->alpha)))
        return cl_error(CL_ERR_SHAPE,
                        "matmul: attr.alpha is %g, expected a finite nonzero "
                        "scale (1 for a plain product)",
                        (double)at->alpha);
    if (a->ndim < 2 || a->ndim > CL_MAX_DIMS)
        return cl_error(CL_ERR_SHAPE,
                        "matmul: first input has %d dimensions, expected "
                        "2..%d",
                        a->ndim, CL_MAX_DIMS);
    if (b->ndim != 2 && b->ndim != a->ndim)
        return cl_error(CL_ERR_SHAPE,
                        "matmul: second input has %d dimensions, expected 2 "
                        "or %d (the first's)",
                        b->ndim, a->ndim);
    int64_t lead = 1;
    for (int k = 0; k < a->ndim; k++) {
        if (a->d[k] < 1 || a->d[k] > CL_OPS_MAX_DIM / lead)
            return cl_error(CL_ERR_SHAPE,
                            "matmul: first input dimension %d is %lld, "
                            "expected 1.. with at most %d elements per "
                            "product",
                            k, (long long)a->d[k], INT_MAX);
        if (k < a->ndim - 2)
            lead *= a->d[k];
    }
    for (int k = 0; k < b->ndim; k++) {
        if (b->d[k] < 1 || b->d[k] > CL_OPS_MAX_DIM)
            return cl_error(CL_ERR_SHAPE,
                            "matmul: second input dimension %d is %lld, "
                            "expected 1..%d",
                            k, (long long)b->d[k], INT_MAX);
        if (b->ndim > 2 && k < b->ndim - 2 && b->d[k] != a->d[k])
            return cl_error(CL_ERR_SHAPE,
                            "matmul: leading dimension %d is %lld in the "
                            "first input and %lld in the second",
                            k, (long long)a->d[k], (long long)b->d[k]);
    }
    const int64_t K = a->d[a->ndim - 1];
    const int64_t bk = b->d[b->ndim - (at->trans_b ? 1 : 2)];
    const int64_t N = b->d[b->ndim - (at->trans_b ? 2 : 1)];
    if (bk != K)
        return cl_error(CL_ERR_SHAPE,
                        "matmul: inner dimensions differ: %lld in the first "
                        "input, %lld in the second%s",
                        (long long)K, (long long)bk,
                        at->trans_b ? " (transposed)" : "");
    CL_TRY(cl__ops_check_numel("matmul", "the output", a));
    *y = *a;
    y->d[a->ndim - 1] = N;
    return cl__ops_check_numel("matmul", "the output", y);
}

cl_matmul_dims cl_matmul_dims_of(const cl_matmul_attr *at, const cl_shape *a,
                                 const cl_shape *b)
{
    cl_matmul_dims d;
    int64_t lead = 1;
    for (int k = 0; k < a->ndim - 2; k++)
        lead *= a->d[k];
    d.B = (int)lead;
    d.M = (int)a->d[a->ndim - 2];
    d.K = (int)a->d[a->ndim - 1];
    d.N = (int)b->d[b->ndim - (at->trans_b ? 2 : 1)];
    d.b_batched = b->ndim > 2;
    return d;
}

/* b's element (k, n) of matrix bm, either layout. */
static inline float b_at(const float *bm, int64_t k, int64_t n, int K, int N,
                         int trans_b)
{
    return trans_b ? bm[n * K + k] : bm[k * N + n];
}

void cl_matmul_forward(float *y, const float *a, const float *b,
                       const cl_matmul_dims *d, const cl_matmul_attr *at)
{
    const int B = d->B, M = d->M, K = d->K, N = d->N;
    const double alpha = at->alpha;
    const int64_t rows = (int64_t)B * M;
    const int64_t work = rows * K * N;
#pragma omp parallel for schedule(static) if (work >= CL_OPS_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t bi = r / M;
        const float *ar = a + r * K;
        const float *bm = b + (d->b_batched ? bi * K * N : 0);
        float *yr = y + r * N;
        for (int64_t n = 0; n < N; n++) {
            double s = 0.0;
            for (int64_t k = 0; k < K; k++)
                s += (double)ar[k] * b_at(bm, k, n, K, N, at->trans_b);
            yr[n] = (float)(alpha * s);
        }
    }
}

void cl_matmul_backward(float *da, float *db, const float *dy, const float *a,
                        const float *b, const cl_matmul_dims *d,
                        const cl_matmul_attr *at)
{
    const int B = d->B, M = d->M, K = d->K, N = d->N;
    const double alpha = at->alpha;
    const int64_t rows = (int64_t)B * M;
    const int64_t work = rows * K * N;
    if (da) {
        /* da[r, k] = sum_n dy[r, n] b[k, n] */
#pragma omp parallel for schedule(static) if (work >= CL_OPS_PAR_MIN)
        for (int64_t r = 0; r < rows; r++) {
            const int64_t bi = r / M;
            const float *bm = b + (d->b_batched ? bi * K * N : 0);
            const float *dyr = dy + r * N;
            for (int64_t k = 0; k < K; k++) {
                double s = 0.0;
                for (int64_t n = 0; n < N; n++)
                    s += (double)dyr[n] * b_at(bm, k, n, K, N, at->trans_b);
                da[r * K + k] = (float)(alpha * s);
            }
        }
    }
    if (db) {
        /* db[k, n] = sum over the matrices it serves and m of
         * a[m, k] dy[m, n]; each (matrix, k) row written by one thread,
         * summed in a fixed order. */
        const int nb = d->b_batched ? B : 1;
        const int per = d->b_batched ? 1 : B;
        const int64_t kr = (int64_t)nb * K;
#pragma omp parallel for schedule(static) if (work >= CL_OPS_PAR_MIN)
        for (int64_t q = 0; q < kr; q++) {
            const int64_t bb = q / K, k = q % K;
            float *dbm = db + bb * K * N;
            for (int64_t n = 0; n < N; n++) {
                double s = 0.0;
                for (int64_t j = 0; j < per; j++) {
                    const int64_t bi = bb * per + j;
                    for (int64_t m = 0; m < M; m++) {
                        const int64_t r = bi * M + m;
                        s += (double)a[r * K + k] * dy[r * N + n];
                    }
                }
                if (at->trans_b)
                    dbm[n * K + k] = (float)(alpha * s);
                else
                    dbm[k * N + n] = (float)(alpha * s);
            }
        }
    }
}
