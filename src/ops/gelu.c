/* gelu: the exact (erf) GELU, reference forward and backward. */
#include <math.h>

#include "ops/ops.h"
#include "ops/ops_internal.h"

/* 1 / sqrt(2) and 1 / sqrt(2 pi) (C11 has no M_SQRT1_2). */
#define GELU_RSQRT2 0.70710678118654752440
#define GELU_RSQRT2PI 0.39894228040143267794

void cl_gelu_forward(float *y, const float *x, int64_t n)
{
#pragma omp parallel for schedule(static) if (n >= CL_OPS_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        const double v = x[i];
        y[i] = (float)(0.5 * v * (1.0 + erf(v * GELU_RSQRT2)));
    }
}

/* d/dx x Phi(x) = Phi(x) + x phi(x). */
void cl_gelu_backward(float *dx, const float *dy, const float *x, int64_t n)
{
#pragma omp parallel for schedule(static) if (n >= CL_OPS_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        const double v = x[i];
        const double cdf = 0.5 * (1.0 + erf(v * GELU_RSQRT2));
        const double pdf = GELU_RSQRT2PI * exp(-0.5 * v * v);
        dx[i] = (float)(dy[i] * (cdf + v * pdf));
    }
}
