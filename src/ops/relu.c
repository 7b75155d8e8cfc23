/* relu: reference forward and backward, both safe in place. */
#include "ops/ops.h"
#include "ops/ops_internal.h"

void cl_relu_forward(float *y, const float *x, int64_t n)
{
#pragma omp parallel for schedule(static) if (n >= CL_OPS_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

/* The mask comes from y, not x, so the graph may free x (or overwrite it in
 * place) after the forward. */
void cl_relu_backward(float *dx, const float *dy, const float *y, int64_t n)
{
#pragma omp parallel for schedule(static) if (n >= CL_OPS_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}
