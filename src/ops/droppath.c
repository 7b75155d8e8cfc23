/* droppath: stochastic depth per sample (torchvision's stochastic_depth,
 * mode "row"); shape rule and reference kernels. */
#include <math.h>

#include "ops/ops.h"
#include "ops/ops_internal.h"

cl_status cl_droppath_infer(const cl_droppath_attr *a, const cl_shape *x,
                            cl_shape *y)
{
    if (!(a->p >= 0.0f && a->p <= 1.0f))
        return cl_error(CL_ERR_SHAPE,
                        "droppath: attr.p is %g, expected a probability in "
                        "[0, 1]",
                        (double)a->p);
    if (x->ndim < 1 || x->ndim > CL_MAX_DIMS)
        return cl_error(CL_ERR_SHAPE,
                        "droppath: input has %d dimensions, expected 1..%d "
                        "(samples first)",
                        x->ndim, CL_MAX_DIMS);
    for (int k = 0; k < x->ndim; k++)
        if (x->d[k] < 1 || x->d[k] > CL_OPS_MAX_DIM)
            return cl_error(CL_ERR_SHAPE,
                            "droppath: input dimension %d is %lld, expected "
                            "1..%d",
                            k, (long long)x->d[k], INT_MAX);
    CL_TRY(cl__ops_check_numel("droppath", "the input", x));
    *y = *x;
    return CL_OK;
}

float cl_droppath_scale(const cl_rng *r, int64_t n, float p)
{
    cl_rng s = *r;
    cl_rng_seek(&s, (uint64_t)n);
    const float keep = 1.0f - p;
    /* u in [0, 1): p = 1 keeps nothing, p = 0 keeps all; as torchvision,
     * no division when nothing survives. */
    if (!(cl_rng_uniform(&s) < keep))
        return 0.0f;
    return 1.0f / keep;
}

void cl_droppath_forward(float *y, const float *x, int N, int64_t per, float p,
                         const cl_rng *r)
{
#pragma omp parallel for schedule(static) if ((int64_t)N * per >=              \
                                              CL_OPS_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float s = cl_droppath_scale(r, n, p);
        const float *xn = x + (int64_t)n * per;
        float *yn = y + (int64_t)n * per;
        for (int64_t k = 0; k < per; k++)
            yn[k] = xn[k] * s;
    }
}

void cl_droppath_backward(float *dx, const float *dy, int N, int64_t per,
                          float p, const cl_rng *r)
{
    cl_droppath_forward(dx, dy, N, per, p, r);
}
