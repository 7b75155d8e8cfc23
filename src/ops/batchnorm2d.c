/* batchnorm2d: shape rules and the reference kernels (training with batch
 * statistics and running-stat update, inference with running statistics,
 * and the backward of training). */
#include <math.h>
#include <string.h>

#include "ops/ops.h"
#include "ops/ops_internal.h"

cl_batchnorm2d_attr cl_batchnorm2d_attr_make(int channels)
{
    cl_batchnorm2d_attr a;
    memset(&a, 0, sizeof a);
    a.channels = channels;
    a.momentum = 0.1f;
    a.eps = 1e-5f;
    return a;
}

cl_status cl_batchnorm2d_infer(const cl_batchnorm2d_attr *a, const cl_shape *x,
                               cl_shape *y)
{
    if (a->channels < 1)
        return cl_error(CL_ERR_SHAPE,
                        "batchnorm2d: attr.channels is %d, expected >= 1",
                        a->channels);
    /* Written to reject NaN as well. */
    if (!(a->eps > 0.0f))
        return cl_error(CL_ERR_ARG, "batchnorm2d: attr.eps is %g, expected > 0",
                        (double)a->eps);
    if (!(a->momentum >= 0.0f && a->momentum <= 1.0f))
        return cl_error(CL_ERR_ARG,
                        "batchnorm2d: attr.momentum is %g, expected 0..1",
                        (double)a->momentum);
    CL_TRY(cl__ops_check_4d("batchnorm2d", x));
    if (x->d[1] != a->channels)
        return cl_error(CL_ERR_SHAPE,
                        "batchnorm2d: input has %lld channels, attr.channels "
                        "is %d",
                        (long long)x->d[1], a->channels);
    *y = *x;
    return CL_OK;
}

void cl_batchnorm2d_forward_train(float *y, float *mean, float *invstd,
                                  float *running_mean, float *running_var,
                                  const float *x, const float *gamma,
                                  const float *beta, int N, int C, int HW,
                                  const cl_batchnorm2d_attr *a)
{
    const int64_t cnt = (int64_t)N * HW;
    /* Channels are independent: one per iteration.  The statistics are
     * summed in double (two passes) since they are the oracle's weak spot. */
#pragma omp parallel for schedule(static) if (cnt * C >= CL_OPS_PAR_MIN)
    for (int c = 0; c < C; c++) {
        double s = 0.0;
        for (int n = 0; n < N; n++) {
            const float *xp = x + ((int64_t)n * C + c) * HW;
            for (int i = 0; i < HW; i++)
                s += xp[i];
        }
        const double mu = s / (double)cnt;
        double ss = 0.0;
        for (int n = 0; n < N; n++) {
            const float *xp = x + ((int64_t)n * C + c) * HW;
            for (int i = 0; i < HW; i++) {
                double d = xp[i] - mu;
                ss += d * d;
            }
        }
        const double var = ss / (double)cnt; /* biased: normalisation */
        const float is = (float)(1.0 / sqrt(var + (double)a->eps));
        const float m = (float)mu;
        const float sc = gamma[c] * is, bt = beta[c];
        for (int n = 0; n < N; n++) {
            const float *xp = x + ((int64_t)n * C + c) * HW;
            float *yp = y + ((int64_t)n * C + c) * HW;
            for (int i = 0; i < HW; i++)
                yp[i] = (xp[i] - m) * sc + bt;
        }
        if (mean)
            mean[c] = m;
        if (invstd)
            invstd[c] = is;
        /* Running variance is the unbiased one; with a single value per
         * channel it is undefined (PyTorch refuses), the biased 0 is kept. */
        const double uvar = cnt > 1 ? ss / (double)(cnt - 1) : var;
        const float mo = a->momentum;
        if (running_mean)
            running_mean[c] = (1.0f - mo) * running_mean[c] + mo * m;
        if (running_var)
            running_var[c] = (1.0f - mo) * running_var[c] + mo * (float)uvar;
    }
}

void cl_batchnorm2d_forward_infer(float *y, const float *x, const float *gamma,
                                  const float *beta, const float *running_mean,
                                  const float *running_var, int N, int C,
                                  int HW, const cl_batchnorm2d_attr *a)
{
    const int64_t work = (int64_t)N * C * HW;
#pragma omp parallel for schedule(static) if (work >= CL_OPS_PAR_MIN)
    for (int c = 0; c < C; c++) {
        const float is = 1.0f / sqrtf(running_var[c] + a->eps);
        const float sc = gamma[c] * is, m = running_mean[c], bt = beta[c];
        for (int n = 0; n < N; n++) {
            const float *xp = x + ((int64_t)n * C + c) * HW;
            float *yp = y + ((int64_t)n * C + c) * HW;
            for (int i = 0; i < HW; i++)
                yp[i] = (xp[i] - m) * sc + bt;
        }
    }
}

void cl_batchnorm2d_backward(float *dx, float *dgamma, float *dbeta,
                             const float *dy, const float *x, const float *mean,
                             const float *invstd, const float *gamma, int N,
                             int C, int HW)
{
    const int64_t cnt = (int64_t)N * HW;
    /* With xhat = (x - mean) * invstd and y = gamma * xhat + beta:
     *   dbeta  = sum dy,  dgamma = sum dy * xhat,
     *   dx     = gamma * invstd / cnt * (cnt * dy - dbeta - xhat * dgamma). */
#pragma omp parallel for schedule(static) if (cnt * C >= CL_OPS_PAR_MIN)
    for (int c = 0; c < C; c++) {
        const float m = mean[c], is = invstd[c];
        double sdy = 0.0, sdyx = 0.0;
        for (int n = 0; n < N; n++) {
            const float *xp = x + ((int64_t)n * C + c) * HW;
            const float *dyp = dy + ((int64_t)n * C + c) * HW;
            for (int i = 0; i < HW; i++) {
                sdy += dyp[i];
                sdyx += (double)dyp[i] * ((xp[i] - m) * is);
            }
        }
        if (dbeta)
            dbeta[c] = (float)sdy;
        if (dgamma)
            dgamma[c] = (float)sdyx;
        if (dx) {
            const float k = gamma[c] * is / (float)cnt;
            const float fdb = (float)sdy, fdg = (float)sdyx, fn = (float)cnt;
            for (int n = 0; n < N; n++) {
                const float *xp = x + ((int64_t)n * C + c) * HW;
                const float *dyp = dy + ((int64_t)n * C + c) * HW;
                float *dxp = dx + ((int64_t)n * C + c) * HW;
                for (int i = 0; i < HW; i++) {
                    const float xh = (xp[i] - m) * is;
                    dxp[i] = k * (fn * dyp[i] - fdb - xh * fdg);
                }
            }
        }
    }
}
