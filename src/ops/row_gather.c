/* row_gather: rows of an activation picked by a fixed integer index (every
 * data movement of Swin); shape rule and reference kernels. */
#include <string.h>

#include "ops/ops.h"
#include "ops/ops_internal.h"

cl_status cl_row_gather_infer(const cl_row_gather_attr *a, const cl_shape *x,
                              const cl_shape *index, cl_shape *y)
{
    if (a->cols < 1)
        return cl_error(CL_ERR_SHAPE,
                        "row_gather: attr.cols is %d, expected 1 or more",
                        a->cols);
    if (x->ndim < 1 || x->ndim > CL_MAX_DIMS)
        return cl_error(CL_ERR_SHAPE,
                        "row_gather: input has %d dimensions, expected 1..%d",
                        x->ndim, CL_MAX_DIMS);
    CL_TRY(cl__ops_check_numel("row_gather", "the input", x));
    const int64_t nx = cl_shape_numel(x);
    if (nx < 1 || nx % a->cols)
        return cl_error(CL_ERR_SHAPE,
                        "row_gather: input has %lld elements, expected a "
                        "positive multiple of attr.cols %d",
                        (long long)nx, a->cols);
    const cl_shape *o = &a->out;
    if (o->ndim < 1 || o->ndim > CL_MAX_DIMS)
        return cl_error(CL_ERR_SHAPE,
                        "row_gather: attr.out has %d dimensions, expected "
                        "1..%d",
                        o->ndim, CL_MAX_DIMS);
    for (int k = 0; k < o->ndim; k++)
        if (o->d[k] < 1 || o->d[k] > CL_OPS_MAX_DIM)
            return cl_error(CL_ERR_SHAPE,
                            "row_gather: attr.out dimension %d is %lld, "
                            "expected 1..%d",
                            k, (long long)o->d[k], INT_MAX);
    CL_TRY(cl__ops_check_numel("row_gather", "the output", o));
    const int64_t ny = cl_shape_numel(o);
    if (ny % a->cols)
        return cl_error(CL_ERR_SHAPE,
                        "row_gather: attr.out has %lld elements, expected a "
                        "multiple of attr.cols %d",
                        (long long)ny, a->cols);
    if (index->ndim != 1 || index->d[0] != ny / a->cols)
        return cl_error(CL_ERR_SHAPE,
                        "row_gather: the index has %d dimensions (first "
                        "%lld), expected 1 of %lld (the output's rows)",
                        index->ndim, (long long)index->d[0],
                        (long long)(ny / a->cols));
    *y = *o;
    return CL_OK;
}

cl_status cl_row_gather_check(const int64_t *index, int64_t M, int64_t R)
{
    for (int64_t i = 0; i < M; i++)
        if (index[i] < 0 || index[i] >= R)
            return cl_error(CL_ERR_ARG,
                            "row_gather: index[%lld] is %lld, expected "
                            "0..%lld (the input's rows)",
                            (long long)i, (long long)index[i],
                            (long long)(R - 1));
    return CL_OK;
}

void cl_row_gather_forward(float *y, const float *x, const int64_t *index,
                           int64_t M, int cols)
{
#pragma omp parallel for schedule(static) if (M * cols >= CL_OPS_PAR_MIN)
    for (int64_t i = 0; i < M; i++)
        memcpy(y + i * cols, x + index[i] * cols, (size_t)cols * sizeof *y);
}

void cl_row_gather_backward(float *dx, const float *dy, const int64_t *index,
                            int64_t M, int64_t R, int cols)
{
    memset(dx, 0, (size_t)R * (size_t)cols * sizeof *dx);
    for (int64_t i = 0; i < M; i++) {
        float *dr = dx + index[i] * cols;
        const float *g = dy + i * cols;
        for (int c = 0; c < cols; c++)
            dr[c] += g[c];
    }
}
