/* conv2d: shape rules and the reference forward/backward (direct loops with
 * stride, zero padding, dilation, groups and optional bias). */
#include <stdio.h>
#include <string.h>

#include "ops/ops.h"
#include "ops/ops_internal.h"

cl_conv2d_attr cl_conv2d_attr_make(int in_ch, int out_ch, int k, int stride,
                                   int pad)
{
    cl_conv2d_attr a;
    memset(&a, 0, sizeof a);
    a.in_ch = in_ch;
    a.out_ch = out_ch;
    a.kh = a.kw = k;
    a.sh = a.sw = stride;
    a.ph = a.pw = pad;
    a.dh = a.dw = 1;
    a.groups = 1;
    a.has_bias = 0;
    return a;
}

/* "3" for a square pair, "3x5" otherwise. */
static const char *pair_str(char *buf, size_t n, int h, int w)
{
    if (h == w)
        snprintf(buf, n, "%d", h);
    else
        snprintf(buf, n, "%dx%d", h, w);
    return buf;
}

cl_status cl_conv2d_infer(const cl_conv2d_attr *a, const cl_shape *x,
                          cl_shape *y)
{
    if (a->in_ch < 1 || a->out_ch < 1)
        return cl_error(CL_ERR_SHAPE,
                        "conv2d: attr.in_ch %d and attr.out_ch %d must be "
                        "positive",
                        a->in_ch, a->out_ch);
    if (a->kh < 1 || a->kw < 1)
        return cl_error(CL_ERR_SHAPE,
                        "conv2d: kernel %dx%d, expected positive sizes", a->kh,
                        a->kw);
    if (a->sh < 1 || a->sw < 1)
        return cl_error(CL_ERR_SHAPE,
                        "conv2d: stride %dx%d, expected positive strides",
                        a->sh, a->sw);
    if (a->dh < 1 || a->dw < 1)
        return cl_error(CL_ERR_SHAPE,
                        "conv2d: dilation %dx%d, expected positive dilation",
                        a->dh, a->dw);
    if (a->ph < 0 || a->pw < 0)
        return cl_error(CL_ERR_SHAPE,
                        "conv2d: padding %dx%d, expected non-negative", a->ph,
                        a->pw);
    if (a->groups < 1)
        return cl_error(CL_ERR_SHAPE,
                        "conv2d: attr.groups is %d, expected >= 1", a->groups);
    if (a->in_ch % a->groups || a->out_ch % a->groups)
        return cl_error(CL_ERR_SHAPE,
                        "conv2d: attr.groups %d does not divide in_ch %d and "
                        "out_ch %d",
                        a->groups, a->in_ch, a->out_ch);
    CL_TRY(cl__ops_check_4d("conv2d", x));
    if (x->d[1] != a->in_ch)
        return cl_error(CL_ERR_SHAPE,
                        "conv2d: input has %lld channels, attr.in_ch is %d",
                        (long long)x->d[1], a->in_ch);
    CL_TRY(
        cl__ops_check_window("conv2d", "height", x->d[2], a->kh, a->ph, a->dh));
    CL_TRY(
        cl__ops_check_window("conv2d", "width", x->d[3], a->kw, a->pw, a->dw));
    int64_t oh = cl__ops_out_len(x->d[2], a->kh, a->sh, a->ph, a->dh);
    int64_t ow = cl__ops_out_len(x->d[3], a->kw, a->sw, a->pw, a->dw);
    if (oh < 1 || ow < 1) {
        char k[32], s[32], p[32], d[48] = "";
        if (a->dh != 1 || a->dw != 1) {
            char dd[32];
            snprintf(d, sizeof d, ", dilation %s",
                     pair_str(dd, sizeof dd, a->dh, a->dw));
        }
        return cl_error(CL_ERR_SHAPE,
                        "conv2d: output size %lld for input %lldx%lld with "
                        "kernel %s, stride %s, padding %s%s",
                        (long long)(oh < 1 ? oh : ow), (long long)x->d[2],
                        (long long)x->d[3], pair_str(k, sizeof k, a->kh, a->kw),
                        pair_str(s, sizeof s, a->sh, a->sw),
                        pair_str(p, sizeof p, a->ph, a->pw), d);
    }
    CL_TRY(cl__ops_check_out_plane("conv2d", oh, ow));
    *y = cl_shape_4d(x->d[0], a->out_ch, oh, ow);
    return cl__ops_check_numel("conv2d", "output", y);
}

/* Output sizes for the kernels (infer has validated them). */
static void out_size(const cl_conv2d_attr *a, int H, int W, int *OH, int *OW)
{
    *OH = (int)cl__ops_out_len(H, a->kh, a->sh, a->ph, a->dh);
    *OW = (int)cl__ops_out_len(W, a->kw, a->sw, a->pw, a->dw);
}

/* Every kernel walks the taps (ki, kj) outermost: the range of output
 * positions a tap reaches inside the input is computed once per tap, then
 * the channel loops run with no bounds tests (a tap entirely in the
 * padding, common on 1x1 and 2x2 maps, costs nothing). */

void cl_conv2d_forward(float *y, const float *x, const float *w, const float *b,
                       int N, int H, int W, const cl_conv2d_attr *a)
{
    int OH, OW;
    out_size(a, H, W, &OH, &OW);
    const int icg = a->in_ch / a->groups, ocg = a->out_ch / a->groups;
    const int64_t plane = (int64_t)H * W, oplane = (int64_t)OH * OW;
    const int64_t nout = (int64_t)N * a->out_ch, kk = (int64_t)a->kh * a->kw;
    /* One (sample, output channel) plane per iteration: disjoint writes. */
    const int64_t macs = nout * oplane * icg * kk;
#pragma omp parallel for schedule(static) if (macs >= CL_OPS_PAR_MIN)
    for (int64_t no = 0; no < nout; no++) {
        const int n = (int)(no / a->out_ch), oc = (int)(no % a->out_ch);
        const int g = oc / ocg;
        float *yp = y + no * oplane; /* (OH,OW) */
        const float bv = b ? b[oc] : 0.0f;
        for (int64_t i = 0; i < oplane; i++)
            yp[i] = bv;
        /* x planes of this group, w (icg,kh,kw) of this output channel */
        const float *xg =
            x + ((int64_t)n * a->in_ch + (int64_t)g * icg) * plane;
        const float *wo = w + (int64_t)oc * icg * kk;
        for (int ki = 0; ki < a->kh; ki++) {
            int oh0, oh1;
            cl__ops_valid_range(OH, H, a->sh, a->ph, ki * a->dh, &oh0, &oh1);
            for (int kj = 0; kj < a->kw; kj++) {
                int ow0, ow1;
                cl__ops_valid_range(OW, W, a->sw, a->pw, kj * a->dw, &ow0,
                                    &ow1);
                if (oh0 >= oh1 || ow0 >= ow1)
                    continue;
                const int ioff = kj * a->dw - a->pw;
                for (int icl = 0; icl < icg; icl++) {
                    const float wv = wo[icl * kk + ki * a->kw + kj];
                    const float *xp = xg + icl * plane;
                    for (int oh = oh0; oh < oh1; oh++) {
                        const int ih = oh * a->sh - a->ph + ki * a->dh;
                        const float *xr = xp + (int64_t)ih * W + ioff;
                        float *yr = yp + (int64_t)oh * OW;
                        for (int ow = ow0; ow < ow1; ow++)
                            yr[ow] += wv * xr[ow * a->sw];
                    }
                }
            }
        }
    }
}

void cl_conv2d_backward(float *dx, float *dw, float *db, const float *dy,
                        const float *x, const float *w, int N, int H, int W,
                        const cl_conv2d_attr *a)
{
    int OH, OW;
    out_size(a, H, W, &OH, &OW);
    const int icg = a->in_ch / a->groups, ocg = a->out_ch / a->groups;
    const int64_t plane = (int64_t)H * W, oplane = (int64_t)OH * OW;
    const int64_t kk = (int64_t)a->kh * a->kw;
    const int64_t ny = (int64_t)N * a->out_ch * oplane, macs = ny * icg * kk;

    /* db[oc] = sum over n, oh, ow of dy. */
    if (db) {
#pragma omp parallel for schedule(static) if (ny >= CL_OPS_PAR_MIN)
        for (int oc = 0; oc < a->out_ch; oc++) {
            float s = 0.0f;
            for (int n = 0; n < N; n++) {
                const float *dyp = dy + ((int64_t)n * a->out_ch + oc) * oplane;
                for (int64_t i = 0; i < oplane; i++)
                    s += dyp[i];
            }
            db[oc] = s;
        }
    }

    /* dw[oc,icl,ki,kj] = sum over n, oh, ow of dy[n,oc,oh,ow] * x[n,ic,ih,iw]
     * with ih = oh*sh - ph + ki*dh, iw likewise; one out channel per
     * iteration owns its slice of dw. */
    if (dw) {
#pragma omp parallel for schedule(static) if (macs >= CL_OPS_PAR_MIN)
        for (int oc = 0; oc < a->out_ch; oc++) {
            const int g = oc / ocg;
            float *dwo = dw + (int64_t)oc * icg * kk; /* (icg,kh,kw) */
            for (int64_t i = 0; i < icg * kk; i++)
                dwo[i] = 0.0f;
            for (int n = 0; n < N; n++) {
                const float *dyp = dy + ((int64_t)n * a->out_ch + oc) * oplane;
                const float *xg =
                    x + ((int64_t)n * a->in_ch + (int64_t)g * icg) * plane;
                for (int ki = 0; ki < a->kh; ki++) {
                    int oh0, oh1;
                    cl__ops_valid_range(OH, H, a->sh, a->ph, ki * a->dh, &oh0,
                                        &oh1);
                    for (int kj = 0; kj < a->kw; kj++) {
                        int ow0, ow1;
                        cl__ops_valid_range(OW, W, a->sw, a->pw, kj * a->dw,
                                            &ow0, &ow1);
                        if (oh0 >= oh1 || ow0 >= ow1)
                            continue;
                        const int ioff = kj * a->dw - a->pw;
                        for (int icl = 0; icl < icg; icl++) {
                            const float *xp = xg + icl * plane;
                            float s = 0.0f;
                            for (int oh = oh0; oh < oh1; oh++) {
                                const int ih = oh * a->sh - a->ph + ki * a->dh;
                                const float *xr = xp + (int64_t)ih * W + ioff;
                                const float *dyr = dyp + (int64_t)oh * OW;
                                for (int ow = ow0; ow < ow1; ow++)
                                    s += dyr[ow] * xr[ow * a->sw];
                            }
                            dwo[icl * kk + ki * a->kw + kj] += s;
                        }
                    }
                }
            }
        }
    }

    /* dx[n,ic,ih,iw] = sum over the out channels of ic's group and the taps
     * that read (ih,iw) of w * dy; one (sample, in channel) plane per
     * iteration owns its slice of dx. */
    if (dx) {
        const int64_t nin = (int64_t)N * a->in_ch;
#pragma omp parallel for schedule(static) if (macs >= CL_OPS_PAR_MIN)
        for (int64_t ni = 0; ni < nin; ni++) {
            const int n = (int)(ni / a->in_ch), ic = (int)(ni % a->in_ch);
            const int g = ic / icg, icl = ic % icg;
            float *dxp = dx + ni * plane; /* (H,W) */
            for (int64_t i = 0; i < plane; i++)
                dxp[i] = 0.0f;
            /* dy planes and w rows of this group's output channels */
            const float *dyg =
                dy + ((int64_t)n * a->out_ch + (int64_t)g * ocg) * oplane;
            const float *wg = w + ((int64_t)g * ocg * icg + icl) * kk;
            for (int ki = 0; ki < a->kh; ki++) {
                int oh0, oh1;
                cl__ops_valid_range(OH, H, a->sh, a->ph, ki * a->dh, &oh0,
                                    &oh1);
                for (int kj = 0; kj < a->kw; kj++) {
                    int ow0, ow1;
                    cl__ops_valid_range(OW, W, a->sw, a->pw, kj * a->dw, &ow0,
                                        &ow1);
                    if (oh0 >= oh1 || ow0 >= ow1)
                        continue;
                    const int ioff = kj * a->dw - a->pw;
                    for (int ocl = 0; ocl < ocg; ocl++) {
                        const float wv =
                            wg[(int64_t)ocl * icg * kk + ki * a->kw + kj];
                        const float *dyp = dyg + ocl * oplane;
                        for (int oh = oh0; oh < oh1; oh++) {
                            const int ih = oh * a->sh - a->ph + ki * a->dh;
                            float *dxr = dxp + (int64_t)ih * W + ioff;
                            const float *dyr = dyp + (int64_t)oh * OW;
                            for (int ow = ow0; ow < ow1; ow++)
                                dxr[ow * a->sw] += wv * dyr[ow];
                        }
                    }
                }
            }
        }
    }
}
