/* maxpool2d: shape rules and the reference forward/backward (padding counts
 * as -infinity, ties go to the first maximum in row-major window order). */
#include <math.h>
#include <string.h>

#include "ops/ops.h"
#include "ops/ops_internal.h"

cl_status cl_maxpool2d_infer(const cl_maxpool2d_attr *a, const cl_shape *x,
                             cl_shape *y)
{
    if (a->kh < 1 || a->kw < 1)
        return cl_error(CL_ERR_SHAPE,
                        "maxpool2d: kernel %dx%d, expected positive sizes",
                        a->kh, a->kw);
    if (a->sh < 1 || a->sw < 1)
        return cl_error(CL_ERR_SHAPE,
                        "maxpool2d: stride %dx%d, expected positive strides",
                        a->sh, a->sw);
    /* As PyTorch: a larger padding could make a window all padding. */
    if (a->ph < 0 || a->pw < 0 || a->ph > a->kh / 2 || a->pw > a->kw / 2)
        return cl_error(CL_ERR_SHAPE,
                        "maxpool2d: padding %dx%d, expected 0 to half the "
                        "kernel %dx%d",
                        a->ph, a->pw, a->kh, a->kw);
    CL_TRY(cl__ops_check_4d("maxpool2d", x));
    CL_TRY(
        cl__ops_check_window("maxpool2d", "height", x->d[2], a->kh, a->ph, 1));
    CL_TRY(
        cl__ops_check_window("maxpool2d", "width", x->d[3], a->kw, a->pw, 1));
    int64_t oh = cl__ops_out_len(x->d[2], a->kh, a->sh, a->ph, 1);
    int64_t ow = cl__ops_out_len(x->d[3], a->kw, a->sw, a->pw, 1);
    if (oh < 1 || ow < 1)
        return cl_error(CL_ERR_SHAPE,
                        "maxpool2d: output size %lld for input %lldx%lld "
                        "with kernel %dx%d, stride %dx%d, padding %dx%d",
                        (long long)(oh < 1 ? oh : ow), (long long)x->d[2],
                        (long long)x->d[3], a->kh, a->kw, a->sh, a->sw, a->ph,
                        a->pw);
    CL_TRY(cl__ops_check_out_plane("maxpool2d", oh, ow));
    *y = cl_shape_4d(x->d[0], x->d[1], oh, ow);
    return cl__ops_check_numel("maxpool2d", "output", y);
}

static void out_size(const cl_maxpool2d_attr *a, int H, int W, int *OH, int *OW)
{
    *OH = (int)cl__ops_out_len(H, a->kh, a->sh, a->ph, 1);
    *OW = (int)cl__ops_out_len(W, a->kw, a->sw, a->pw, 1);
}

/* The flat h*W+w index of the first maximum of window (oh,ow) of plane xp,
 * or -1 when the window holds no input element (infer rules that out). */
static int32_t window_argmax(const float *xp, int H, int W, int oh, int ow,
                             const cl_maxpool2d_attr *a, float *best)
{
    int32_t bi = -1;
    float bv = -INFINITY;
    const int h0 = oh * a->sh - a->ph, w0 = ow * a->sw - a->pw;
    for (int i = 0; i < a->kh; i++) {
        const int ih = h0 + i;
        if (ih < 0 || ih >= H)
            continue;
        for (int j = 0; j < a->kw; j++) {
            const int iw = w0 + j;
            if (iw < 0 || iw >= W)
                continue;
            const float v = xp[(int64_t)ih * W + iw];
            /* Strictly greater keeps the first maximum; a NaN is taken so
             * that it propagates as in PyTorch. */
            if (bi < 0 || v > bv || (isnan(v) && !isnan(bv))) {
                bv = v;
                bi = (int32_t)(ih * W + iw);
            }
        }
    }
    *best = bv;
    return bi;
}

void cl_maxpool2d_forward(float *y, int32_t *idx, const float *x, int N, int C,
                          int H, int W, const cl_maxpool2d_attr *a)
{
    int OH, OW;
    out_size(a, H, W, &OH, &OW);
    const int64_t planes = (int64_t)N * C, plane = (int64_t)H * W;
    const int64_t oplane = (int64_t)OH * OW;
    const int64_t work = planes * oplane * a->kh * a->kw;
#pragma omp parallel for schedule(static) if (work >= CL_OPS_PAR_MIN)
    for (int64_t p = 0; p < planes; p++) {
        const float *xp = x + p * plane;
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                float v;
                int32_t i = window_argmax(xp, H, W, oh, ow, a, &v);
                y[p * oplane + (int64_t)oh * OW + ow] = v;
                if (idx)
                    idx[p * oplane + (int64_t)oh * OW + ow] = i;
            }
    }
}

void cl_maxpool2d_backward(float *dx, const float *dy, const int32_t *idx,
                           const float *x, int N, int C, int H, int W,
                           const cl_maxpool2d_attr *a)
{
    if (!dx)
        return;
    int OH, OW;
    out_size(a, H, W, &OH, &OW);
    const int64_t planes = (int64_t)N * C, plane = (int64_t)H * W;
    const int64_t oplane = (int64_t)OH * OW;
    const int64_t work = planes * oplane * a->kh * a->kw;
    /* Windows overlap when stride < kernel, so each plane accumulates; one
     * plane per iteration keeps the writes disjoint. */
#pragma omp parallel for schedule(static) if (work >= CL_OPS_PAR_MIN)
    for (int64_t p = 0; p < planes; p++) {
        float *dxp = dx + p * plane;
        for (int64_t i = 0; i < plane; i++)
            dxp[i] = 0.0f;
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                const int64_t o = p * oplane + (int64_t)oh * OW + ow;
                int32_t i;
                if (idx) {
                    i = idx[o];
                } else {
                    float v;
                    i = window_argmax(x + p * plane, H, W, oh, ow, a, &v);
                }
                if (i >= 0)
                    dxp[i] += dy[o];
            }
    }
}
