/* table_gather: rows of a learnable table picked by a fixed integer index
 * (Swin's relative position bias); shape rule and reference kernels. */
#include <string.h>

#include "ops/ops.h"
#include "ops/ops_internal.h"

cl_status cl_table_gather_infer(const cl_table_gather_attr *a,
                                const cl_shape *index, cl_shape *y)
{
    if (a->rows < 1 || a->cols < 1)
        return cl_error(CL_ERR_SHAPE,
                        "table_gather: attr.rows %d and attr.cols %d must be "
                        "positive",
                        a->rows, a->cols);
    if (index->ndim < 1 || index->ndim > CL_MAX_DIMS - 1)
        return cl_error(CL_ERR_SHAPE,
                        "table_gather: index has %d dimensions, expected "
                        "1..%d",
                        index->ndim, CL_MAX_DIMS - 1);
    for (int k = 0; k < index->ndim; k++)
        if (index->d[k] < 1 || index->d[k] > CL_OPS_MAX_DIM)
            return cl_error(CL_ERR_SHAPE,
                            "table_gather: index dimension %d is %lld, "
                            "expected 1..%d",
                            k, (long long)index->d[k], INT_MAX);
    *y = *index;
    y->d[y->ndim++] = a->cols;
    return cl__ops_check_numel("table_gather", "the output", y);
}

cl_status cl_table_gather_check(const int64_t *index, int64_t M, int rows)
{
    for (int64_t i = 0; i < M; i++)
        if (index[i] < 0 || index[i] >= rows)
            return cl_error(CL_ERR_ARG,
                            "table_gather: index[%lld] is %lld, expected "
                            "0..%d (the table's rows)",
                            (long long)i, (long long)index[i], rows - 1);
    return CL_OK;
}

void cl_table_gather_forward(float *y, const float *table, const int64_t *index,
                             int64_t M, int cols)
{
    for (int64_t i = 0; i < M; i++)
        memcpy(y + i * cols, table + index[i] * cols, (size_t)cols * sizeof *y);
}

void cl_table_gather_backward(float *dtable, const float *dy,
                              const int64_t *index, int64_t M, int rows,
                              int cols)
{
    memset(dtable, 0, (size_t)rows * (size_t)cols * sizeof *dtable);
    for (int64_t i = 0; i < M; i++) {
        float *dr = dtable + index[i] * cols;
        const float *g = dy + i * cols;
        for (int c = 0; c < cols; c++)
            dr[c] += g[c];
    }
}
