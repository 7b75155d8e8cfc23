/* token_meanpool: the mean over the tokens of (B,L,C) (Swin's last
 * pooling); shape rule and reference kernels. */
#include "ops/ops.h"
#include "ops/ops_internal.h"

cl_status cl_token_meanpool_infer(const cl_shape *x, cl_shape *y)
{
    static const char *names[3] = {"batch", "tokens", "channels"};
    if (x->ndim != 3)
        return cl_error(CL_ERR_SHAPE,
                        "token_meanpool: input has %d dimensions, expected 3 "
                        "(B,L,C)",
                        x->ndim);
    for (int k = 0; k < 3; k++)
        if (x->d[k] < 1 || x->d[k] > CL_OPS_MAX_DIM)
            return cl_error(CL_ERR_SHAPE,
                            "token_meanpool: input %s is %lld, expected 1..%d",
                            names[k], (long long)x->d[k], INT_MAX);
    CL_TRY(cl__ops_check_numel("token_meanpool", "the input", x));
    int64_t d[2] = {x->d[0], x->d[2]};
    *y = cl_shape_make(2, d);
    return CL_OK;
}

void cl_token_meanpool_forward(float *y, const float *x, int B, int L, int C)
{
    const int64_t rows = (int64_t)B * C;
#pragma omp parallel for schedule(static) if (rows * L >= CL_OPS_PAR_MIN)
    for (int64_t q = 0; q < rows; q++) {
        const int64_t b = q / C, c = q % C;
        const float *xb = x + b * L * C + c;
        double s = 0.0;
        for (int64_t l = 0; l < L; l++)
            s += xb[l * C];
        y[q] = (float)(s / L);
    }
}

void cl_token_meanpool_backward(float *dx, const float *dy, int B, int L, int C)
{
    const float inv = 1.0f / (float)L;
#pragma omp parallel for schedule(static) if ((int64_t)B * L * C >=            \
                                              CL_OPS_PAR_MIN)
    for (int b = 0; b < B; b++)
        for (int64_t l = 0; l < L; l++) {
            const float *g = dy + (int64_t)b * C;
            float *d = dx + ((int64_t)b * L + l) * C;
            for (int c = 0; c < C; c++)
                d[c] = g[c] * inv;
        }
}
