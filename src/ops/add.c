/* add: the residual sum and its backward, both safe under aliasing. */
#include <string.h>

#include "ops/ops.h"
#include "ops/ops_internal.h"

void cl_add_forward(float *y, const float *a, const float *b, int64_t n)
{
#pragma omp parallel for schedule(static) if (n >= CL_OPS_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i] + b[i];
}

void cl_add_backward(float *da, float *db, const float *dy, int64_t n)
{
    /* memmove: a gradient buffer may be dy itself or overlap it. */
    if (da && da != dy)
        memmove(da, dy, (size_t)n * sizeof *da);
    if (db && db != dy)
        memmove(db, dy, (size_t)n * sizeof *db);
}
