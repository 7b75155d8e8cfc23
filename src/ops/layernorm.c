/* layernorm: normalisation of each row over the last dimension (as
 * torch.nn.LayerNorm(C)), shape rule and reference kernels. */
#include <math.h>

#include "ops/ops.h"
#include "ops/ops_internal.h"

cl_layernorm_attr cl_layernorm_attr_make(int features)
{
    cl_layernorm_attr a = {features, 1e-5f};
    return a;
}

cl_status cl_layernorm_infer(const cl_layernorm_attr *a, const cl_shape *x,
                             cl_shape *y)
{
    if (a->features < 1)
        return cl_error(CL_ERR_SHAPE,
                        "layernorm: attr.features is %d, expected >= 1",
                        a->features);
    if (!(a->eps > 0.0f) || !isfinite(a->eps))
        return cl_error(CL_ERR_SHAPE,
                        "layernorm: attr.eps is %g, expected a positive "
                        "finite value",
                        (double)a->eps);
    if (x->ndim < 2 || x->ndim > CL_MAX_DIMS)
        return cl_error(CL_ERR_SHAPE,
                        "layernorm: input has %d dimensions, expected 2..%d",
                        x->ndim, CL_MAX_DIMS);
    for (int k = 0; k < x->ndim; k++)
        if (x->d[k] < 1 || x->d[k] > CL_OPS_MAX_DIM)
            return cl_error(CL_ERR_SHAPE,
                            "layernorm: input dimension %d is %lld, expected "
                            "1..%d",
                            k, (long long)x->d[k], INT_MAX);
    if (x->d[x->ndim - 1] != a->features)
        return cl_error(CL_ERR_SHAPE,
                        "layernorm: input's last dimension is %lld, "
                        "attr.features is %d",
                        (long long)x->d[x->ndim - 1], a->features);
    CL_TRY(cl__ops_check_numel("layernorm", "the input", x));
    *y = *x;
    return CL_OK;
}

void cl_layernorm_forward(float *y, float *mean, float *rstd, const float *x,
                          const float *gamma, const float *beta, int64_t rows,
                          int C, float eps)
{
    const int64_t work = rows * C;
#pragma omp parallel for schedule(static) if (work >= CL_OPS_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * C;
        float *yr = y + r * C;
        /* Two passes in double: the mean, then the squares around it. */
        double s = 0.0;
        for (int c = 0; c < C; c++)
            s += xr[c];
        const double mu = s / C;
        double q = 0.0;
        for (int c = 0; c < C; c++)
            q += ((double)xr[c] - mu) * ((double)xr[c] - mu);
        const double rs = 1.0 / sqrt(q / C + (double)eps);
        for (int c = 0; c < C; c++)
            yr[c] = (float)(((double)xr[c] - mu) * rs * gamma[c] + beta[c]);
        if (mean)
            mean[r] = (float)mu;
        if (rstd)
            rstd[r] = (float)rs;
    }
}

void cl_layernorm_backward(float *dx, float *dgamma, float *dbeta,
                           const float *dy, const float *x, const float *mean,
                           const float *rstd, const float *gamma, int64_t rows,
                           int C)
{
    const int64_t work = rows * C;
    if (dx) {
#pragma omp parallel for schedule(static) if (work >= CL_OPS_PAR_MIN)
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * C, *dyr = dy + r * C;
            const double mu = mean[r], rs = rstd[r];
            double sg = 0.0, sgx = 0.0;
            for (int c = 0; c < C; c++) {
                const double g = (double)dyr[c] * gamma[c];
                sg += g;
                sgx += g * ((xr[c] - mu) * rs);
            }
            sg /= C;
            sgx /= C;
            for (int c = 0; c < C; c++) {
                const double xh = (xr[c] - mu) * rs;
                dx[r * C + c] =
                    (float)(rs * ((double)dyr[c] * gamma[c] - sg - xh * sgx));
            }
        }
    }
    if (dgamma || dbeta) {
        /* One column per thread, rows in order: the same sums on any
         * thread count. */
#pragma omp parallel for schedule(static) if (work >= CL_OPS_PAR_MIN)
        for (int c = 0; c < C; c++) {
            double sg = 0.0, sb = 0.0;
            for (int64_t r = 0; r < rows; r++) {
                const double g = dy[r * C + c];
                sg += g * (((double)x[r * C + c] - mean[r]) * rstd[r]);
                sb += g;
            }
            if (dgamma)
                dgamma[c] = (float)sg;
            if (dbeta)
                dbeta[c] = (float)sb;
        }
    }
}
