/* global average pool: the mean over each (sample, channel) plane. */
#include "ops/ops.h"
#include "ops/ops_internal.h"

cl_status cl_global_avgpool_infer(const cl_shape *x, cl_shape *y)
{
    CL_TRY(cl__ops_check_4d("global_avgpool", x));
    int64_t d[2] = {x->d[0], x->d[1]};
    *y = cl_shape_make(2, d);
    return CL_OK;
}

void cl_global_avgpool_forward(float *y, const float *x, int N, int C, int HW)
{
    const int64_t planes = (int64_t)N * C;
#pragma omp parallel for schedule(static) if (planes * HW >= CL_OPS_PAR_MIN)
    for (int64_t p = 0; p < planes; p++) {
        const float *xp = x + p * HW;
        float s = 0.0f;
        for (int i = 0; i < HW; i++)
            s += xp[i];
        y[p] = s / (float)HW;
    }
}

void cl_global_avgpool_backward(float *dx, const float *dy, int N, int C,
                                int HW)
{
    if (!dx)
        return;
    const int64_t planes = (int64_t)N * C;
#pragma omp parallel for schedule(static) if (planes * HW >= CL_OPS_PAR_MIN)
    for (int64_t p = 0; p < planes; p++) {
        const float g = dy[p] / (float)HW;
        float *dxp = dx + p * HW;
        for (int i = 0; i < HW; i++)
            dxp[i] = g;
    }
}
