/* linear: y = x w^T + b with w (out, in) as PyTorch; reference kernels. */
#include "ops/ops.h"
#include "ops/ops_internal.h"

cl_status cl_linear_infer(const cl_linear_attr *a, const cl_shape *x,
                          cl_shape *y)
{
    if (a->in_features < 1 || a->out_features < 1)
        return cl_error(CL_ERR_SHAPE,
                        "linear: attr.in_features %d and attr.out_features %d "
                        "must be positive",
                        a->in_features, a->out_features);
    if (x->ndim < 2 || x->ndim > CL_MAX_DIMS)
        return cl_error(CL_ERR_SHAPE,
                        "linear: input has %d dimensions, expected 2..%d "
                        "(..., in)",
                        x->ndim, CL_MAX_DIMS);
    /* The leading dimensions are rows of one matrix product, counted in
     * an int by the kernels. */
    int64_t rows = 1;
    for (int k = 0; k < x->ndim - 1; k++) {
        if (x->d[k] < 1 || x->d[k] > CL_OPS_MAX_DIM / rows)
            return cl_error(CL_ERR_SHAPE,
                            "linear: input dimension %d is %lld, expected "
                            "1.. with at most %d rows in all",
                            k, (long long)x->d[k], INT_MAX);
        rows *= x->d[k];
    }
    const int64_t in = x->d[x->ndim - 1];
    if (in != a->in_features)
        return cl_error(CL_ERR_SHAPE,
                        "linear: input has %lld features, attr.in_features "
                        "is %d",
                        (long long)in, a->in_features);
    *y = *x;
    y->d[x->ndim - 1] = a->out_features;
    return CL_OK;
}

void cl_linear_forward(float *y, const float *x, const float *w, const float *b,
                       int N, const cl_linear_attr *a)
{
    const int I = a->in_features, O = a->out_features;
    const int64_t no = (int64_t)N * O;
#pragma omp parallel for schedule(static) if (no * I >= CL_OPS_PAR_MIN)
    for (int64_t k = 0; k < no; k++) {
        const int n = (int)(k / O), o = (int)(k % O);
        const float *xr = x + (int64_t)n * I, *wr = w + (int64_t)o * I;
        float s = b ? b[o] : 0.0f;
        for (int i = 0; i < I; i++)
            s += xr[i] * wr[i];
        y[k] = s;
    }
}

void cl_linear_backward(float *dx, float *dw, float *db, const float *dy,
                        const float *x, const float *w, int N,
                        const cl_linear_attr *a)
{
    const int I = a->in_features, O = a->out_features;
    const int64_t no = (int64_t)N * O;
    /* dx[n,i] = sum_o dy[n,o] w[o,i]: one sample row per iteration. */
    if (dx) {
#pragma omp parallel for schedule(static) if (no * I >= CL_OPS_PAR_MIN)
        for (int n = 0; n < N; n++) {
            float *dxr = dx + (int64_t)n * I;
            for (int i = 0; i < I; i++)
                dxr[i] = 0.0f;
            for (int o = 0; o < O; o++) {
                const float g = dy[(int64_t)n * O + o];
                const float *wr = w + (int64_t)o * I;
                for (int i = 0; i < I; i++)
                    dxr[i] += g * wr[i];
            }
        }
    }
    /* dw[o,i] = sum_n dy[n,o] x[n,i], db[o] = sum_n dy[n,o]: one output
     * row per iteration. */
    if (dw || db) {
#pragma omp parallel for schedule(static) if (no * I >= CL_OPS_PAR_MIN)
        for (int o = 0; o < O; o++) {
            float *dwr = dw ? dw + (int64_t)o * I : NULL;
            float sb = 0.0f;
            if (dwr)
                for (int i = 0; i < I; i++)
                    dwr[i] = 0.0f;
            for (int n = 0; n < N; n++) {
                const float g = dy[(int64_t)n * O + o];
                sb += g;
                if (dwr) {
                    const float *xr = x + (int64_t)n * I;
                    for (int i = 0; i < I; i++)
                        dwr[i] += g * xr[i];
                }
            }
            if (db)
                db[o] = sb;
        }
    }
}
