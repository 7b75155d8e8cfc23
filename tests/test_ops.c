/* Ops: hand-computed forward values, finite-difference checks of every
 * reference backward, aliasing and the shape rules' error messages.
 * ctest-labels: unit */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "core/rng.h"
#include "fd.h"
#include "harness.h"
#include "ops/ops.h"

/* Finite-difference settings.  The kernels are f32; the probe loss
 * L = <y, r> is summed in double, and a perturbation changes only the
 * outputs that depend on the element, so the rounding noise of a difference
 * quotient is 1e-5..2e-4 for the linear ops.  A wrong gradient (a dropped term,
 * a wrong index) is off by O(0.1..1) on gradients of size O(1).
 *   linear ops (conv, linear, pools, relu, add): h 1e-2, exact up to
 *   rounding since they are piecewise linear (worst observed: 0.55 of
 *   rtol 1e-3 + atol 1e-4 on the 7x7 stem, so atol 2e-4 for margin):
 *   rtol 1e-3, atol 2e-4.
 *   batchnorm: h 1e-2 (truncation ~h^2 |L'''|, noise grows with the channel
 *   count; observed errors ~2e-5 on 10-element channels, ~1.5e-4 on
 *   64-element ones): rtol 2e-3, atol 5e-4.
 *   softmax CE (the f32 returned loss itself, gradients ~1/N; observed
 *   errors ~5e-6): h 1e-2, rtol 2e-3, atol 5e-5. */
#define LIN_H 1e-2f
#define LIN_RTOL 1e-3
#define LIN_ATOL 2e-4
#define BN_H 1e-2f
#define BN_RTOL 2e-3
#define BN_ATOL 5e-4
#define CE_H 1e-2f
#define CE_RTOL 2e-3
#define CE_ATOL 5e-5
/* Elements checked per tensor at most (all of them when fewer). */
#define FD_MAX 256

/* ---- test-local buffers, all freed by free_all() ------------------------ */
static void *g_bufs[1024];
static int g_nbufs;

static float *newf(int64_t n)
{
    CL_ASSERT(g_nbufs < 1024);
    float *p = cl_alloc_zero((size_t)(n > 0 ? n : 1) * sizeof(float), "test");
    CL_ASSERT(p != NULL);
    g_bufs[g_nbufs++] = p;
    return p;
}

static int32_t *newi(int64_t n)
{
    CL_ASSERT(g_nbufs < 1024);
    int32_t *p = cl_alloc_zero((size_t)(n > 0 ? n : 1) * sizeof(int32_t), "t");
    CL_ASSERT(p != NULL);
    g_bufs[g_nbufs++] = p;
    return p;
}

static void free_all(void)
{
    for (int i = 0; i < g_nbufs; i++)
        cl_free(g_bufs[i]);
    g_nbufs = 0;
}

static void fill(float *p, int64_t n, float v)
{
    for (int64_t i = 0; i < n; i++)
        p[i] = v;
}

static float *copyf(const float *src, int64_t n)
{
    float *p = newf(n);
    memcpy(p, src, (size_t)n * sizeof *p);
    return p;
}

/* Largest |a - b| over n elements. */
static double max_diff(const float *a, const float *b, int64_t n)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m))
            m = d; /* NaN wins */
    }
    return m;
}

#define CHECK_VALUES(got, want, n, tol)                                        \
    do {                                                                       \
        for (int cl__i = 0; cl__i < (n); cl__i++)                              \
            CHECK_NEAR((got)[cl__i], (want)[cl__i], (tol));                    \
    } while (0)

/* ====================================================================== */
/* conv2d                                                                  */
/* ====================================================================== */

CL_TEST(conv2d_forward_hand)
{
    /* x (1,1,3,3) = [1 2 3; 4 5 6; 7 8 9], w (1,1,2,2) = [1 2; 3 4]. */
    const float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    const float w[4] = {1, 2, 3, 4};
    const float b[1] = {0.5f};
    float y[9];
    cl_shape xs = cl_shape_4d(1, 1, 3, 3), ys;

    /* Dense, stride 1, no padding, bias 0.5: output 2x2,
     *   y00 = 1*1 + 2*2 + 3*4 + 4*5 = 37   y01 = 1*2 + 2*3 + 3*5 + 4*6 = 47
     *   y10 = 1*4 + 2*5 + 3*7 + 4*8 = 67   y11 = 1*5 + 2*6 + 3*8 + 4*9 = 77
     * plus 0.5 each. */
    cl_conv2d_attr a = cl_conv2d_attr_make(1, 1, 2, 1, 0);
    a.has_bias = 1;
    REQUIRE_OK(cl_conv2d_infer(&a, &xs, &ys));
    CHECK(ys.d[2] == 2 && ys.d[3] == 2);
    cl_conv2d_forward(y, x, w, b, 1, 3, 3, &a);
    const float e1[4] = {37.5f, 47.5f, 67.5f, 77.5f};
    CHECK_VALUES(y, e1, 4, 1e-5);

    /* Stride 2, padding 1, no bias: output (3 + 2 - 2) / 2 + 1 = 2.  Window
     * (oh,ow) starts at input (2oh-1, 2ow-1); zero padding drops taps:
     *   y00: only tap w11 on x00          = 4*1               = 4
     *   y01: taps w10 x01, w11 x02         = 3*2 + 4*3         = 18
     *   y10: taps w01 x10, w11 x20         = 2*4 + 4*7         = 36
     *   y11: all taps on x11 x12 x21 x22   = 5 + 12 + 24 + 36  = 77 */
    a = cl_conv2d_attr_make(1, 1, 2, 2, 1);
    REQUIRE_OK(cl_conv2d_infer(&a, &xs, &ys));
    CHECK(ys.d[2] == 2 && ys.d[3] == 2);
    cl_conv2d_forward(y, x, w, NULL, 1, 3, 3, &a);
    const float e2[4] = {4, 18, 36, 77};
    CHECK_VALUES(y, e2, 4, 1e-5);

    /* Dilation 2, 2x2 kernel: taps x00, x02, x20, x22 -> output 1x1,
     *   y = 1*1 + 2*3 + 3*7 + 4*9 = 64. */
    a = cl_conv2d_attr_make(1, 1, 2, 1, 0);
    a.dh = a.dw = 2;
    REQUIRE_OK(cl_conv2d_infer(&a, &xs, &ys));
    CHECK(ys.d[2] == 1 && ys.d[3] == 1);
    cl_conv2d_forward(y, x, w, NULL, 1, 3, 3, &a);
    CHECK_NEAR(y[0], 64.0, 1e-5);

    /* Grouped: x (1,2,2,2), channel 0 = [1 2; 3 4], channel 1 = [5 6; 7 8];
     * groups 2, 4 outputs, 2x2 kernel -> 1x1.  Outputs 0,1 see channel 0
     * only, outputs 2,3 channel 1 only (w is (4,1,2,2)):
     *   oc0 w=[1 1 1 1]:  1+2+3+4 = 10     oc1 w=[1 0 0 -1]: 1-4 = -3
     *   oc2 w=[1 1 1 1]:  5+6+7+8 = 26     oc3 w=[0 1 0 0]:  6
     * with bias (0, 1, 0, -1). */
    const float xg[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const float wg[16] = {1, 1, 1, 1, 1, 0, 0, -1, 1, 1, 1, 1, 0, 1, 0, 0};
    const float bg[4] = {0, 1, 0, -1};
    a = cl_conv2d_attr_make(2, 4, 2, 1, 0);
    a.groups = 2;
    a.has_bias = 1;
    cl_shape xgs = cl_shape_4d(1, 2, 2, 2);
    REQUIRE_OK(cl_conv2d_infer(&a, &xgs, &ys));
    CHECK(ys.d[1] == 4 && ys.d[2] == 1 && ys.d[3] == 1);
    cl_conv2d_forward(y, xg, wg, bg, 1, 2, 2, &a);
    const float e3[4] = {10, -2, 26, 5};
    CHECK_VALUES(y, e3, 4, 1e-5);
}

typedef struct conv_ctx {
    const cl_conv2d_attr *a;
    int N, H, W;
    float *x, *w, *b, *y, *r;
    int64_t ny;
} conv_ctx;

static double conv_loss(void *p)
{
    conv_ctx *c = p;
    cl_conv2d_forward(c->y, c->x, c->w, c->b, c->N, c->H, c->W, c->a);
    return cl_fd_dot(c->y, c->r, c->ny);
}

/* FD-checks dx, dw and db of one conv configuration, that backward
 * overwrites stale gradients, and that NULL outputs leave the rest alone. */
static void check_conv(const cl_conv2d_attr *a, int N, int H, int W,
                       cl_rng *rng)
{
    cl_shape xs = cl_shape_4d(N, a->in_ch, H, W), ys;
    REQUIRE_OK(cl_conv2d_infer(a, &xs, &ys));
    const int64_t nx = cl_shape_numel(&xs), ny = cl_shape_numel(&ys);
    const int64_t nw =
        (int64_t)a->out_ch * (a->in_ch / a->groups) * a->kh * a->kw;
    conv_ctx c = {a,
                  N,
                  H,
                  W,
                  newf(nx),
                  newf(nw),
                  a->has_bias ? newf(a->out_ch) : NULL,
                  newf(ny),
                  newf(ny),
                  ny};
    cl_fd_uniform(c.x, nx, -1, 1, rng);
    cl_fd_uniform(c.w, nw, -1, 1, rng);
    if (c.b)
        cl_fd_uniform(c.b, a->out_ch, -1, 1, rng);
    cl_fd_uniform(c.r, ny, -1, 1, rng);
    float *dx = newf(nx), *dw = newf(nw), *db = newf(a->out_ch);
    /* Stale values: backward must overwrite, not accumulate. */
    fill(dx, nx, 777.0f);
    fill(dw, nw, 777.0f);
    fill(db, a->out_ch, 777.0f);
    cl_conv2d_backward(dx, dw, c.b ? db : NULL, c.r, c.x, c.w, N, H, W, a);
    char what[160];
    snprintf(what, sizeof what,
             "conv2d N%d %dx%d %d->%d k%dx%d s%dx%d p%dx%d d%dx%d g%d b%d", N,
             H, W, a->in_ch, a->out_ch, a->kh, a->kw, a->sh, a->sw, a->ph,
             a->pw, a->dh, a->dw, a->groups, a->has_bias);
    char wx[200], ww[200], wb[200];
    snprintf(wx, sizeof wx, "%s dx", what);
    snprintf(ww, sizeof ww, "%s dw", what);
    snprintf(wb, sizeof wb, "%s db", what);
    CL_FD_CHECK(wx, c.x, nx, dx, conv_loss, &c, LIN_H, LIN_RTOL, LIN_ATOL, rng,
                FD_MAX);
    CL_FD_CHECK(ww, c.w, nw, dw, conv_loss, &c, LIN_H, LIN_RTOL, LIN_ATOL, rng,
                FD_MAX);
    if (c.b)
        CL_FD_CHECK(wb, c.b, a->out_ch, db, conv_loss, &c, LIN_H, LIN_RTOL,
                    LIN_ATOL, rng, FD_MAX);

    /* Each gradient alone (others NULL) equals the full call's. */
    float *dx2 = newf(nx), *dw2 = newf(nw), *db2 = newf(a->out_ch);
    cl_conv2d_backward(dx2, NULL, NULL, c.r, c.x, c.w, N, H, W, a);
    cl_conv2d_backward(NULL, dw2, NULL, c.r, c.x, c.w, N, H, W, a);
    CHECK(max_diff(dx, dx2, nx) == 0.0);
    CHECK(max_diff(dw, dw2, nw) == 0.0);
    if (c.b) {
        cl_conv2d_backward(NULL, NULL, db2, c.r, c.x, c.w, N, H, W, a);
        CHECK(max_diff(db, db2, a->out_ch) == 0.0);
    }
}

static cl_conv2d_attr conv_attr(int in, int out, int kh, int kw, int sh, int sw,
                                int ph, int pw, int dh, int dw, int g, int bias)
{
    cl_conv2d_attr a = cl_conv2d_attr_make(in, out, kh, sh, ph);
    a.kw = kw;
    a.sw = sw;
    a.pw = pw;
    a.dh = dh;
    a.dw = dw;
    a.groups = g;
    a.has_bias = bias;
    return a;
}

/* Whether any output of a conv reads an input element (with a large
 * padding and stride every tap may land in the padding: the gradients are
 * then identically zero and there is nothing to check). */
static int conv_reads_input(const cl_conv2d_attr *a, int H, int W)
{
    cl_conv2d_attr one = *a;
    one.has_bias = 0;
    cl_shape xs = cl_shape_4d(1, a->in_ch, H, W), ys;
    if (cl_conv2d_infer(&one, &xs, &ys) != CL_OK)
        return 0;
    const int64_t nx = cl_shape_numel(&xs), ny = cl_shape_numel(&ys);
    const int64_t nw =
        (int64_t)a->out_ch * (a->in_ch / a->groups) * a->kh * a->kw;
    float *x = newf(nx), *w = newf(nw), *y = newf(ny);
    fill(x, nx, 1.0f);
    fill(w, nw, 1.0f);
    cl_conv2d_forward(y, x, w, NULL, 1, H, W, &one);
    int any = 0;
    for (int64_t i = 0; i < ny; i++)
        any |= y[i] != 0.0f;
    return any;
}

CL_TEST(conv2d_grad_fd)
{
    cl_rng rng;
    cl_rng_init(&rng, 1234, 1);
    /* Hand-picked: plain 3x3, stride 2 on odd sizes, batch 1, dilation 2,
     * groups 2, depthwise, 1x1 downsample, 7x7 stem, rectangular kernel
     * with mixed stride/padding/dilation. */
    cl_conv2d_attr a;
    a = conv_attr(3, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1);
    check_conv(&a, 2, 5, 7, &rng);
    a = conv_attr(4, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 0);
    check_conv(&a, 1, 9, 7, &rng);
    a = conv_attr(2, 3, 3, 3, 1, 1, 2, 2, 2, 2, 1, 1);
    check_conv(&a, 2, 7, 6, &rng);
    a = conv_attr(4, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2, 1);
    check_conv(&a, 2, 6, 5, &rng);
    a = conv_attr(3, 3, 3, 3, 2, 2, 1, 1, 1, 1, 3, 0);
    check_conv(&a, 2, 5, 5, &rng);
    a = conv_attr(3, 5, 1, 1, 2, 2, 0, 0, 1, 1, 1, 0);
    check_conv(&a, 3, 7, 7, &rng);
    a = conv_attr(3, 4, 7, 7, 2, 2, 3, 3, 1, 1, 1, 0);
    check_conv(&a, 1, 11, 9, &rng);
    a = conv_attr(4, 4, 2, 3, 2, 1, 1, 0, 1, 2, 2, 1);
    check_conv(&a, 2, 6, 8, &rng);
    /* Large enough (> CL_OPS_PAR_MIN multiply-adds) for the threaded path. */
    a = conv_attr(8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 2, 1);
    check_conv(&a, 2, 12, 12, &rng);
    /* Random configurations (the infer rule discards impossible ones). */
    int done = 0;
    while (done < 16) {
        int g = 1 + (int)cl_rng_below(&rng, 2);
        int in = g * (1 + (int)cl_rng_below(&rng, 3));
        int out = g * (1 + (int)cl_rng_below(&rng, 3));
        int kh = 1 + (int)cl_rng_below(&rng, 3);
        int kw = cl_rng_below(&rng, 2) ? kh : 1 + (int)cl_rng_below(&rng, 3);
        a = conv_attr(
            in, out, kh, kw, 1 + (int)cl_rng_below(&rng, 2),
            1 + (int)cl_rng_below(&rng, 2), (int)cl_rng_below(&rng, 3),
            (int)cl_rng_below(&rng, 3), 1 + (int)cl_rng_below(&rng, 2),
            1 + (int)cl_rng_below(&rng, 2), g, (int)cl_rng_below(&rng, 2));
        int N = 1 + (int)cl_rng_below(&rng, 2);
        int H = 1 + (int)cl_rng_below(&rng, 9);
        int W = 1 + (int)cl_rng_below(&rng, 9);
        cl_shape xs = cl_shape_4d(N, in, H, W), ys;
        if (cl_conv2d_infer(&a, &xs, &ys) != CL_OK ||
            !conv_reads_input(&a, H, W))
            continue;
        check_conv(&a, N, H, W, &rng);
        done++;
    }
    free_all();
}

CL_TEST(conv2d_infer_errors)
{
    cl_shape y;
    cl_shape x = cl_shape_4d(2, 3, 2, 2);
    cl_conv2d_attr a = cl_conv2d_attr_make(4, 8, 3, 1, 0);
    CHECK_ERR(cl_conv2d_infer(&a, &x, &y), CL_ERR_SHAPE,
              "conv2d: input has 3 channels, attr.in_ch is 4");
    a = cl_conv2d_attr_make(3, 8, 3, 1, 0);
    CHECK_ERR(cl_conv2d_infer(&a, &x, &y), CL_ERR_SHAPE,
              "conv2d: output size 0 for input 2x2 with kernel 3, stride 1, "
              "padding 0");
    a.dh = a.dw = 0;
    CHECK_ERR(cl_conv2d_infer(&a, &x, &y), CL_ERR_SHAPE, "dilation");
    a = cl_conv2d_attr_make(3, 8, 3, 0, 1);
    CHECK_ERR(cl_conv2d_infer(&a, &x, &y), CL_ERR_SHAPE, "stride");
    a = cl_conv2d_attr_make(3, 8, 0, 1, 1);
    CHECK_ERR(cl_conv2d_infer(&a, &x, &y), CL_ERR_SHAPE, "kernel");
    a = cl_conv2d_attr_make(3, 8, 3, 1, -1);
    CHECK_ERR(cl_conv2d_infer(&a, &x, &y), CL_ERR_SHAPE, "padding");
    a = cl_conv2d_attr_make(3, 8, 1, 1, 0);
    a.groups = 2;
    CHECK_ERR(cl_conv2d_infer(&a, &x, &y), CL_ERR_SHAPE, "attr.groups 2");
    a.groups = 0;
    CHECK_ERR(cl_conv2d_infer(&a, &x, &y), CL_ERR_SHAPE, "attr.groups is 0");
    a = cl_conv2d_attr_make(0, 8, 1, 1, 0);
    CHECK_ERR(cl_conv2d_infer(&a, &x, &y), CL_ERR_SHAPE, "attr.in_ch 0");
    a = cl_conv2d_attr_make(3, 8, 1, 1, 0);
    cl_shape x3 = cl_shape_4d(2, 3, 2, 2);
    x3.ndim = 3;
    CHECK_ERR(cl_conv2d_infer(&a, &x3, &y), CL_ERR_SHAPE,
              "input has 3 dimensions");
    cl_shape x0 = cl_shape_4d(0, 3, 2, 2);
    CHECK_ERR(cl_conv2d_infer(&a, &x0, &y), CL_ERR_SHAPE, "batch is 0");
    cl_shape xneg = cl_shape_4d(1, 3, -5, 2);
    CHECK_ERR(cl_conv2d_infer(&a, &xneg, &y), CL_ERR_SHAPE, "height is -5");
    cl_shape xbig = cl_shape_4d(1, 3, 1 << 20, 1 << 20);
    CHECK_ERR(cl_conv2d_infer(&a, &xbig, &y), CL_ERR_SHAPE, "plane");
    /* Hostile sizes: nothing may overflow the kernels' int arithmetic. */
    cl_shape x1 = cl_shape_4d(1, 3, 1, 1);
    a = cl_conv2d_attr_make(3, 8, 1, 1, 2000000000);
    CHECK_ERR(cl_conv2d_infer(&a, &x1, &y), CL_ERR_SHAPE,
              "conv2d: height 1 with padding 2000000000");
    a = cl_conv2d_attr_make(3, 8, 1, 1, 1000000000);
    CHECK_ERR(cl_conv2d_infer(&a, &x1, &y), CL_ERR_SHAPE,
              "conv2d: output plane 2000000001x2000000001");
    a = cl_conv2d_attr_make(3, 8, 3, 1, 1);
    a.dh = 2000000000;
    CHECK_ERR(cl_conv2d_infer(&a, &x1, &y), CL_ERR_SHAPE,
              "dilation 2000000000");
    cl_shape xhuge = cl_shape_4d(2000000000, 3, 40000, 40000);
    a = cl_conv2d_attr_make(3, 8, 1, 1, 0);
    CHECK_ERR(cl_conv2d_infer(&a, &xhuge, &y), CL_ERR_LIMIT,
              "conv2d: input has more elements");
    cl_shape xwide = cl_shape_4d(2000000000, 3, 4, 4);
    a = cl_conv2d_attr_make(3, 2000000000, 1, 1, 0);
    CHECK_ERR(cl_conv2d_infer(&a, &xwide, &y), CL_ERR_LIMIT,
              "conv2d: output has more elements");

    /* Dilated: effective kernel 5 on width 4 with no padding. */
    a = cl_conv2d_attr_make(3, 8, 3, 1, 0);
    a.dh = a.dw = 2;
    cl_shape x44 = cl_shape_4d(1, 3, 6, 4);
    CHECK_ERR(cl_conv2d_infer(&a, &x44, &y), CL_ERR_SHAPE,
              "output size 0 for input 6x4 with kernel 3, stride 1, padding "
              "0, dilation 2");

    /* Valid shapes as PyTorch computes them. */
    cl_shape img = cl_shape_4d(2, 3, 224, 224);
    a = cl_conv2d_attr_make(3, 64, 7, 2, 3);
    REQUIRE_OK(cl_conv2d_infer(&a, &img, &y));
    CHECK(y.ndim == 4 && y.d[0] == 2 && y.d[1] == 64 && y.d[2] == 112 &&
          y.d[3] == 112);
    cl_shape odd = cl_shape_4d(1, 4, 7, 5);
    a = cl_conv2d_attr_make(4, 4, 3, 2, 1);
    REQUIRE_OK(cl_conv2d_infer(&a, &odd, &y));
    CHECK(y.d[2] == 4 && y.d[3] == 3);
    a.dh = a.dw = 2;
    a.sh = a.sw = 1;
    a.ph = a.pw = 2;
    REQUIRE_OK(cl_conv2d_infer(&a, &odd, &y));
    CHECK(y.d[2] == 7 && y.d[3] == 5);
}

/* ====================================================================== */
/* batchnorm2d                                                             */
/* ====================================================================== */

CL_TEST(batchnorm2d_forward_hand)
{
    /* x (N=2, C=2, HW=2): channel 0 holds 1,2 (n=0) and 3,4 (n=1); channel 1
     * is constant -1.  Channel 0: mean 2.5, biased var
     * (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25, unbiased 5/3;
     * invstd = 1/sqrt(1.25 + 1e-5) = 0.8944236133.  With gamma 2, beta 0.5:
     * y = (x - 2.5) * 2 * 0.8944236 + 0.5
     *   = -2.18327084, -0.39442361, 1.39442361, 3.18327084.
     * Channel 1: var 0, invstd 1/sqrt(1e-5) = 316.227766, y = beta = -3.
     * Running stats from mean 0 / var 1, momentum 0.1:
     *   mean 0.9*0 + 0.1*2.5 = 0.25,  0.9*0 + 0.1*(-1) = -0.1
     *   var  0.9*1 + 0.1*5/3 = 1.0666667,  0.9*1 + 0.1*0 = 0.9 */
    const float x[8] = {1, 2, -1, -1, 3, 4, -1, -1};
    const float gamma[2] = {2, 1}, beta[2] = {0.5f, -3};
    float rm[2] = {0, 0}, rv[2] = {1, 1}, mean[2], invstd[2], y[8];
    cl_batchnorm2d_attr a = cl_batchnorm2d_attr_make(2);
    CHECK_NEAR(a.momentum, 0.1, 1e-8);
    CHECK_NEAR(a.eps, 1e-5, 1e-12);
    cl_batchnorm2d_forward_train(y, mean, invstd, rm, rv, x, gamma, beta, 2, 2,
                                 2, &a);
    const float ey[8] = {-2.18327084f, -0.39442361f, -3, -3,
                         1.39442361f,  3.18327084f,  -3, -3};
    CHECK_VALUES(y, ey, 8, 2e-6);
    CHECK_NEAR(mean[0], 2.5, 1e-6);
    CHECK_NEAR(mean[1], -1.0, 1e-6);
    CHECK_NEAR(invstd[0], 0.8944236133, 1e-6);
    CHECK_NEAR(invstd[1], 316.227766, 1e-3);
    CHECK_NEAR(rm[0], 0.25, 1e-7);
    CHECK_NEAR(rm[1], -0.1, 1e-7);
    CHECK_NEAR(rv[0], 1.0666667, 1e-6);
    CHECK_NEAR(rv[1], 0.9, 1e-7);

    /* A second step with another momentum: 0.5 * 0.25 + 0.5 * 2.5. */
    a.momentum = 0.5f;
    cl_batchnorm2d_forward_train(y, mean, invstd, rm, rv, x, gamma, beta, 2, 2,
                                 2, &a);
    CHECK_NEAR(rm[0], 1.375, 1e-6);
    CHECK_NEAR(rv[0], 0.5 * 1.0666667 + 0.5 * 5.0 / 3.0, 1e-6);
}

CL_TEST(batchnorm2d_infer_uses_running_stats)
{
    /* Running mean 1, var 4 - 1e-5 so that var + eps = 4, invstd 0.5;
     * gamma 3, beta 1: y = (x - 1) * 1.5 + 1, so 3 -> 4 and -1 -> -2.
     * Batch statistics (mean 1, var 4 biased) would give (x-1)/2*3+1 too,
     * so a second channel has stats the batch does not: mean -2, var 0.25
     * - 1e-5 (invstd 2), gamma 1, beta 0: 0 -> 4, 1 -> 6. */
    const float x[4] = {3, -1, 0, 1};
    const float gamma[2] = {3, 1}, beta[2] = {1, 0};
    const float rm[2] = {1, -2}, rv[2] = {4 - 1e-5f, 0.25f - 1e-5f};
    float y[4];
    cl_batchnorm2d_attr a = cl_batchnorm2d_attr_make(2);
    cl_batchnorm2d_forward_infer(y, x, gamma, beta, rm, rv, 1, 2, 2, &a);
    const float ey[4] = {4, -2, 4, 6};
    CHECK_VALUES(y, ey, 4, 1e-5);
}

typedef struct bn_ctx {
    const cl_batchnorm2d_attr *a;
    int N, C, HW;
    float *x, *gamma, *beta, *y, *r, *mean, *invstd, *rm, *rv;
} bn_ctx;

static double bn_loss(void *p)
{
    bn_ctx *c = p;
    cl_batchnorm2d_forward_train(c->y, c->mean, c->invstd, c->rm, c->rv, c->x,
                                 c->gamma, c->beta, c->N, c->C, c->HW, c->a);
    return cl_fd_dot(c->y, c->r, (int64_t)c->N * c->C * c->HW);
}

static void check_bn(int N, int C, int HW, cl_rng *rng)
{
    cl_batchnorm2d_attr a = cl_batchnorm2d_attr_make(C);
    const int64_t n = (int64_t)N * C * HW;
    bn_ctx c = {&a,      N,       C,       HW,      newf(n), newf(C), newf(C),
                newf(n), newf(n), newf(C), newf(C), newf(C), newf(C)};
    /* Per-channel offset and scale so that the statistics matter. */
    for (int ni = 0; ni < N; ni++)
        for (int ci = 0; ci < C; ci++)
            for (int i = 0; i < HW; i++)
                c.x[((int64_t)ni * C + ci) * HW + i] =
                    (float)ci - 1.0f +
                    (0.5f + 0.5f * (float)ci) *
                        (2.0f * cl_rng_uniform(rng) - 1.0f);
    cl_fd_uniform(c.gamma, C, 0.5f, 1.5f, rng);
    cl_fd_uniform(c.beta, C, -1, 1, rng);
    cl_fd_uniform(c.r, n, -1, 1, rng);
    fill(c.rv, C, 1.0f);
    bn_loss(&c); /* saves mean, invstd */
    float *dx = newf(n), *dg = newf(C), *dbt = newf(C);
    fill(dx, n, 777.0f);
    fill(dg, C, 777.0f);
    fill(dbt, C, 777.0f);
    cl_batchnorm2d_backward(dx, dg, dbt, c.r, c.x, c.mean, c.invstd, c.gamma, N,
                            C, HW);
    char wx[64], wg[64], wb[64];
    snprintf(wx, sizeof wx, "bn N%d C%d HW%d dx", N, C, HW);
    snprintf(wg, sizeof wg, "bn N%d C%d HW%d dgamma", N, C, HW);
    snprintf(wb, sizeof wb, "bn N%d C%d HW%d dbeta", N, C, HW);
    CL_FD_CHECK(wx, c.x, n, dx, bn_loss, &c, BN_H, BN_RTOL, BN_ATOL, rng,
                FD_MAX);
    CL_FD_CHECK(wg, c.gamma, C, dg, bn_loss, &c, BN_H, BN_RTOL, BN_ATOL, rng,
                FD_MAX);
    CL_FD_CHECK(wb, c.beta, C, dbt, bn_loss, &c, BN_H, BN_RTOL, BN_ATOL, rng,
                FD_MAX);
    /* NULL outputs: dx alone is the same. */
    bn_loss(&c);
    float *dx2 = newf(n);
    cl_batchnorm2d_backward(dx2, NULL, NULL, c.r, c.x, c.mean, c.invstd,
                            c.gamma, N, C, HW);
    CHECK(max_diff(dx, dx2, n) == 0.0);
}

CL_TEST(batchnorm2d_grad_fd)
{
    cl_rng rng;
    cl_rng_init(&rng, 1234, 2);
    check_bn(2, 3, 5, &rng);
    check_bn(1, 2, 7, &rng); /* batch 1: statistics over the plane */
    check_bn(5, 2, 1, &rng); /* 1x1 planes: statistics over the batch */
    check_bn(3, 4, 9, &rng);
    check_bn(4, 512, 16, &rng); /* the threaded path */
    free_all();
}

CL_TEST(batchnorm2d_infer_errors)
{
    cl_shape x = cl_shape_4d(2, 3, 4, 4), y;
    cl_batchnorm2d_attr a = cl_batchnorm2d_attr_make(4);
    CHECK_ERR(cl_batchnorm2d_infer(&a, &x, &y), CL_ERR_SHAPE,
              "batchnorm2d: input has 3 channels, attr.channels is 4");
    a = cl_batchnorm2d_attr_make(3);
    REQUIRE_OK(cl_batchnorm2d_infer(&a, &x, &y));
    CHECK(cl_shape_equal(&x, &y));
    a.eps = 0;
    CHECK_ERR(cl_batchnorm2d_infer(&a, &x, &y), CL_ERR_ARG, "attr.eps");
    a = cl_batchnorm2d_attr_make(3);
    a.momentum = 1.5f;
    CHECK_ERR(cl_batchnorm2d_infer(&a, &x, &y), CL_ERR_ARG, "attr.momentum");
    a = cl_batchnorm2d_attr_make(0);
    CHECK_ERR(cl_batchnorm2d_infer(&a, &x, &y), CL_ERR_SHAPE,
              "attr.channels is 0");
    a = cl_batchnorm2d_attr_make(3);
    x.ndim = 2;
    CHECK_ERR(cl_batchnorm2d_infer(&a, &x, &y), CL_ERR_SHAPE,
              "input has 2 dimensions");
}

/* ====================================================================== */
/* relu                                                                    */
/* ====================================================================== */

typedef struct relu_ctx {
    float *x, *y, *r;
    int64_t n;
} relu_ctx;

static double relu_loss(void *p)
{
    relu_ctx *c = p;
    cl_relu_forward(c->y, c->x, c->n);
    return cl_fd_dot(c->y, c->r, c->n);
}

CL_TEST(relu_values_in_place_and_grad)
{
    cl_rng rng;
    cl_rng_init(&rng, 1234, 3);
    const int64_t n = 257;
    relu_ctx c = {newf(n), newf(n), newf(n), n};
    /* Keep |x| >= 0.05 so no difference quotient straddles the kink. */
    for (int64_t i = 0; i < n; i++) {
        float v = 2.0f * cl_rng_uniform(&rng) - 1.0f;
        c.x[i] = v < 0 ? v - 0.05f : v + 0.05f;
    }
    cl_fd_uniform(c.r, n, -1, 1, &rng);
    cl_relu_forward(c.y, c.x, n);
    int ok = 1;
    for (int64_t i = 0; i < n; i++)
        ok &= c.y[i] == (c.x[i] > 0 ? c.x[i] : 0.0f);
    CHECK(ok);
    float *dx = newf(n);
    fill(dx, n, 777.0f);
    cl_relu_backward(dx, c.r, c.y, n);
    CL_FD_CHECK("relu dx", c.x, n, dx, relu_loss, &c, LIN_H, LIN_RTOL, LIN_ATOL,
                &rng, 300);

    /* In place: y == x and dx == dy give the same numbers. */
    cl_relu_forward(c.y, c.x, n);
    float *inplace = copyf(c.x, n);
    cl_relu_forward(inplace, inplace, n);
    CHECK(max_diff(inplace, c.y, n) == 0.0);
    float *g = copyf(c.r, n);
    cl_relu_backward(g, g, inplace, n);
    CHECK(max_diff(g, dx, n) == 0.0);
    /* Zero maps to zero with zero gradient (y > 0 is the mask). */
    float z[2] = {0.0f, -0.0f}, zy[2], zd[2] = {5, 5};
    cl_relu_forward(zy, z, 2);
    CHECK(zy[0] == 0.0f && zy[1] == 0.0f);
    cl_relu_backward(zd, zd, zy, 2);
    CHECK(zd[0] == 0.0f && zd[1] == 0.0f);
    free_all();
}

/* ====================================================================== */
/* maxpool2d                                                               */
/* ====================================================================== */

CL_TEST(maxpool2d_forward_hand)
{
    /* x (1,1,3,3) = -[1 2 3; 4 5 6; 7 8 9], kernel 2, stride 2, padding 1:
     * output 2x2.  Were padding 0 rather than -inf every window would
     * return 0.  Windows (rows, cols) and their maxima:
     *   (-1..0, -1..0): x00 = -1           idx 0
     *   (-1..0,  1..2): max(-2, -3) = -2    idx 1
     *   ( 1..2, -1..0): max(-4, -7) = -4    idx 3
     *   ( 1..2,  1..2): max(-5,-6,-8,-9)=-5 idx 4 */
    const float x[9] = {-1, -2, -3, -4, -5, -6, -7, -8, -9};
    cl_maxpool2d_attr a = {2, 2, 2, 2, 1, 1};
    cl_shape xs = cl_shape_4d(1, 1, 3, 3), ys;
    REQUIRE_OK(cl_maxpool2d_infer(&a, &xs, &ys));
    CHECK(ys.d[2] == 2 && ys.d[3] == 2);
    float y[9];
    int32_t idx[9];
    cl_maxpool2d_forward(y, idx, x, 1, 1, 3, 3, &a);
    const float ey[4] = {-1, -2, -4, -5};
    CHECK_VALUES(y, ey, 4, 0);
    CHECK(idx[0] == 0 && idx[1] == 1 && idx[2] == 3 && idx[3] == 4);
    /* Backward routes dy to those positions. */
    const float dy[4] = {1, 2, 3, 4};
    float dx[9];
    cl_maxpool2d_backward(dx, dy, idx, x, 1, 1, 3, 3, &a);
    const float edx[9] = {1, 2, 0, 3, 4, 0, 0, 0, 0};
    CHECK_VALUES(dx, edx, 9, 0);

    /* Ties go to the first maximum in row-major order: a constant 2x2 plane
     * with kernel 2, stride 1, padding 1 gives 3x3 windows whose first valid
     * element is (max(oh-1,0), max(ow-1,0)). */
    const float c[4] = {1, 1, 1, 1};
    cl_maxpool2d_attr t = {2, 2, 1, 1, 1, 1};
    cl_maxpool2d_forward(y, idx, c, 1, 1, 2, 2, &t);
    const int32_t eidx[9] = {0, 0, 1, 0, 0, 1, 2, 2, 3};
    int ok = 1;
    for (int i = 0; i < 9; i++)
        ok &= idx[i] == eidx[i] && y[i] == 1.0f;
    CHECK(ok);
    /* Recomputed argmax (idx NULL) breaks ties the same way: dy of all nine
     * windows lands on 0 (4 windows), 1 (2), 2 (2), 3 (1). */
    float dy9[9], dx4[4];
    fill(dy9, 9, 1.0f);
    cl_maxpool2d_backward(dx4, dy9, NULL, c, 1, 1, 2, 2, &t);
    CHECK(dx4[0] == 4 && dx4[1] == 2 && dx4[2] == 2 && dx4[3] == 1);
}

typedef struct pool_ctx {
    const cl_maxpool2d_attr *a;
    int N, C, H, W;
    float *x, *y, *r;
    int64_t ny;
} pool_ctx;

static double pool_loss(void *p)
{
    pool_ctx *c = p;
    cl_maxpool2d_forward(c->y, NULL, c->x, c->N, c->C, c->H, c->W, c->a);
    return cl_fd_dot(c->y, c->r, c->ny);
}

static void check_pool(cl_maxpool2d_attr a, int N, int C, int H, int W,
                       cl_rng *rng)
{
    cl_shape xs = cl_shape_4d(N, C, H, W), ys;
    REQUIRE_OK(cl_maxpool2d_infer(&a, &xs, &ys));
    const int64_t nx = cl_shape_numel(&xs), ny = cl_shape_numel(&ys);
    pool_ctx c = {&a, N, C, H, W, newf(nx), newf(ny), newf(ny), ny};
    /* Distinct values 0.05 apart in random order: no ties, and a step of
     * h = 0.01 never changes a window's argmax. */
    for (int64_t i = 0; i < nx; i++)
        c.x[i] = 0.05f * (float)(i - nx / 2);
    for (int64_t i = nx - 1; i > 0; i--) {
        int64_t j = (int64_t)cl_rng_below(rng, (uint32_t)(i + 1));
        float t = c.x[i];
        c.x[i] = c.x[j];
        c.x[j] = t;
    }
    cl_fd_uniform(c.r, ny, -1, 1, rng);
    int32_t *idx = newi(ny);
    cl_maxpool2d_forward(c.y, idx, c.x, N, C, H, W, &a);
    float *dx = newf(nx), *dx2 = newf(nx);
    fill(dx, nx, 777.0f);
    fill(dx2, nx, 777.0f);
    cl_maxpool2d_backward(dx, c.r, idx, c.x, N, C, H, W, &a);
    cl_maxpool2d_backward(dx2, c.r, NULL, c.x, N, C, H, W, &a);
    char w1[96], w2[96];
    snprintf(w1, sizeof w1, "maxpool k%dx%d s%dx%d p%dx%d %dx%d idx", a.kh,
             a.kw, a.sh, a.sw, a.ph, a.pw, H, W);
    snprintf(w2, sizeof w2, "maxpool k%dx%d s%dx%d p%dx%d %dx%d no-idx", a.kh,
             a.kw, a.sh, a.sw, a.ph, a.pw, H, W);
    CL_FD_CHECK(w1, c.x, nx, dx, pool_loss, &c, LIN_H, LIN_RTOL, LIN_ATOL, rng,
                FD_MAX);
    CL_FD_CHECK(w2, c.x, nx, dx2, pool_loss, &c, LIN_H, LIN_RTOL, LIN_ATOL, rng,
                FD_MAX);
    CHECK(max_diff(dx, dx2, nx) == 0.0);
}

CL_TEST(maxpool2d_grad_fd)
{
    cl_rng rng;
    cl_rng_init(&rng, 1234, 4);
    check_pool((cl_maxpool2d_attr){3, 3, 2, 2, 1, 1}, 2, 3, 7, 6, &rng);
    check_pool((cl_maxpool2d_attr){2, 2, 2, 2, 0, 0}, 1, 2, 6, 6, &rng);
    check_pool((cl_maxpool2d_attr){3, 3, 1, 1, 1, 1}, 2, 2, 5, 5, &rng);
    check_pool((cl_maxpool2d_attr){2, 3, 1, 2, 1, 1}, 1, 3, 5, 8, &rng);
    check_pool((cl_maxpool2d_attr){3, 3, 2, 2, 1, 1}, 1, 1, 1, 1, &rng);
    /* the threaded path */
    check_pool((cl_maxpool2d_attr){3, 3, 2, 2, 1, 1}, 2, 8, 32, 32, &rng);
    free_all();
}

CL_TEST(maxpool2d_infer_errors)
{
    cl_shape x = cl_shape_4d(2, 64, 112, 112), y;
    cl_maxpool2d_attr a = {3, 3, 2, 2, 1, 1};
    REQUIRE_OK(cl_maxpool2d_infer(&a, &x, &y));
    CHECK(y.d[0] == 2 && y.d[1] == 64 && y.d[2] == 56 && y.d[3] == 56);
    a.ph = 2;
    CHECK_ERR(cl_maxpool2d_infer(&a, &x, &y), CL_ERR_SHAPE,
              "maxpool2d: padding 2x1, expected 0 to half the kernel 3x3");
    cl_shape small = cl_shape_4d(1, 1, 2, 2);
    cl_maxpool2d_attr b = {3, 3, 1, 1, 0, 0};
    CHECK_ERR(cl_maxpool2d_infer(&b, &small, &y), CL_ERR_SHAPE,
              "maxpool2d: output size 0 for input 2x2");
    b.sh = 0;
    CHECK_ERR(cl_maxpool2d_infer(&b, &small, &y), CL_ERR_SHAPE, "stride");
    b = (cl_maxpool2d_attr){0, 3, 1, 1, 0, 0};
    CHECK_ERR(cl_maxpool2d_infer(&b, &small, &y), CL_ERR_SHAPE, "kernel");
    cl_shape x1 = cl_shape_4d(1, 1, 1, 1);
    b = (cl_maxpool2d_attr){3, 3, 1, 1, 1, 1};
    REQUIRE_OK(cl_maxpool2d_infer(&b, &x1, &y));
    CHECK(y.d[2] == 1 && y.d[3] == 1);
    cl_shape tall = cl_shape_4d(1, 1, 100000000, 1);
    b = (cl_maxpool2d_attr){2100000000, 3, 1, 1, 1050000000, 1};
    CHECK_ERR(cl_maxpool2d_infer(&b, &tall, &y), CL_ERR_SHAPE,
              "maxpool2d: height 100000000 with padding 1050000000");
    cl_shape bad = cl_shape_4d(1, 0, 4, 4);
    b = (cl_maxpool2d_attr){2, 2, 2, 2, 0, 0};
    CHECK_ERR(cl_maxpool2d_infer(&b, &bad, &y), CL_ERR_SHAPE, "channels is 0");
}

/* ====================================================================== */
/* global average pool                                                     */
/* ====================================================================== */

typedef struct gap_ctx {
    int N, C, HW;
    float *x, *y, *r;
} gap_ctx;

static double gap_loss(void *p)
{
    gap_ctx *c = p;
    cl_global_avgpool_forward(c->y, c->x, c->N, c->C, c->HW);
    return cl_fd_dot(c->y, c->r, (int64_t)c->N * c->C);
}

CL_TEST(global_avgpool_hand_and_grad)
{
    /* x (1,2,4): (1+2+3+4)/4 = 2.5, (-1+0+0+5)/4 = 1; dx = dy / 4. */
    const float x[8] = {1, 2, 3, 4, -1, 0, 0, 5};
    float y[2], dx[8];
    cl_global_avgpool_forward(y, x, 1, 2, 4);
    CHECK_NEAR(y[0], 2.5, 1e-6);
    CHECK_NEAR(y[1], 1.0, 1e-6);
    const float dy[2] = {4, -2};
    cl_global_avgpool_backward(dx, dy, 1, 2, 4);
    const float edx[8] = {1, 1, 1, 1, -0.5f, -0.5f, -0.5f, -0.5f};
    CHECK_VALUES(dx, edx, 8, 1e-7);
    cl_shape xs = cl_shape_4d(3, 512, 7, 7), ys;
    REQUIRE_OK(cl_global_avgpool_infer(&xs, &ys));
    CHECK(ys.ndim == 2 && ys.d[0] == 3 && ys.d[1] == 512);
    xs.ndim = 2;
    CHECK_ERR(cl_global_avgpool_infer(&xs, &ys), CL_ERR_SHAPE,
              "global_avgpool: input has 2 dimensions");

    cl_rng rng;
    cl_rng_init(&rng, 1234, 5);
    gap_ctx c = {2, 3, 9, newf(54), newf(6), newf(6)};
    cl_fd_uniform(c.x, 54, -1, 1, &rng);
    cl_fd_uniform(c.r, 6, -1, 1, &rng);
    float *g = newf(54);
    fill(g, 54, 777.0f);
    cl_global_avgpool_backward(g, c.r, 2, 3, 9);
    /* Gradients are r / 9, so atol is scaled down to keep the check tight. */
    CL_FD_CHECK("global_avgpool dx", c.x, 54, g, gap_loss, &c, LIN_H, LIN_RTOL,
                LIN_ATOL / 10, &rng, FD_MAX);
    free_all();
}

/* ====================================================================== */
/* linear                                                                  */
/* ====================================================================== */

CL_TEST(linear_forward_hand)
{
    /* x (2,3) = [1 2 3; 0 -1 2], w (2,3) = [1 0 -1; 2 1 0], b = (0.5, -1):
     *   y00 = 1 - 3 + 0.5 = -1.5    y01 = 2 + 2 - 1 = 3
     *   y10 = 0 - 2 + 0.5 = -1.5    y11 = 0 - 1 - 1 = -2 */
    const float x[6] = {1, 2, 3, 0, -1, 2}, w[6] = {1, 0, -1, 2, 1, 0};
    const float b[2] = {0.5f, -1};
    float y[4];
    cl_linear_attr a = {3, 2, 1};
    cl_linear_forward(y, x, w, b, 2, &a);
    const float ey[4] = {-1.5f, 3, -1.5f, -2};
    CHECK_VALUES(y, ey, 4, 1e-6);
    cl_linear_forward(y, x, w, NULL, 2, &a);
    const float ey2[4] = {-2, 4, -2, -1};
    CHECK_VALUES(y, ey2, 4, 1e-6);

    cl_shape xs = cl_shape_make(2, (int64_t[]){4, 3}), ys;
    REQUIRE_OK(cl_linear_infer(&a, &xs, &ys));
    CHECK(ys.ndim == 2 && ys.d[0] == 4 && ys.d[1] == 2);
    cl_shape x5 = cl_shape_make(2, (int64_t[]){4, 5});
    CHECK_ERR(cl_linear_infer(&a, &x5, &ys), CL_ERR_SHAPE,
              "linear: input has 5 features, attr.in_features is 3");
    /* Over the last dimension of any rank (test_graph_general.c). */
    cl_shape x4 = cl_shape_4d(4, 3, 1, 1);
    CHECK_ERR(cl_linear_infer(&a, &x4, &ys), CL_ERR_SHAPE,
              "input has 1 features, attr.in_features is 3");
    cl_linear_attr z = {3, 0, 1};
    CHECK_ERR(cl_linear_infer(&z, &xs, &ys), CL_ERR_SHAPE,
              "attr.out_features 0");
}

typedef struct lin_ctx {
    const cl_linear_attr *a;
    int N;
    float *x, *w, *b, *y, *r;
} lin_ctx;

static double lin_loss(void *p)
{
    lin_ctx *c = p;
    cl_linear_forward(c->y, c->x, c->w, c->b, c->N, c->a);
    return cl_fd_dot(c->y, c->r, (int64_t)c->N * c->a->out_features);
}

static void check_linear(int N, int I, int O, int bias, cl_rng *rng)
{
    cl_linear_attr a = {I, O, bias};
    const int64_t nx = (int64_t)N * I, nw = (int64_t)O * I, ny = (int64_t)N * O;
    lin_ctx c = {&a,       N,       newf(nx), newf(nw), bias ? newf(O) : NULL,
                 newf(ny), newf(ny)};
    cl_fd_uniform(c.x, nx, -1, 1, rng);
    cl_fd_uniform(c.w, nw, -1, 1, rng);
    if (c.b)
        cl_fd_uniform(c.b, O, -1, 1, rng);
    cl_fd_uniform(c.r, ny, -1, 1, rng);
    float *dx = newf(nx), *dw = newf(nw), *db = newf(O);
    fill(dx, nx, 777.0f);
    fill(dw, nw, 777.0f);
    fill(db, O, 777.0f);
    cl_linear_backward(dx, dw, bias ? db : NULL, c.r, c.x, c.w, N, &a);
    CL_FD_CHECK("linear dx", c.x, nx, dx, lin_loss, &c, LIN_H, LIN_RTOL,
                LIN_ATOL, rng, FD_MAX);
    CL_FD_CHECK("linear dw", c.w, nw, dw, lin_loss, &c, LIN_H, LIN_RTOL,
                LIN_ATOL, rng, FD_MAX);
    if (bias)
        CL_FD_CHECK("linear db", c.b, O, db, lin_loss, &c, LIN_H, LIN_RTOL,
                    LIN_ATOL, rng, FD_MAX);
    float *dw2 = newf(nw);
    cl_linear_backward(NULL, dw2, NULL, c.r, c.x, c.w, N, &a);
    CHECK(max_diff(dw, dw2, nw) == 0.0);
}

CL_TEST(linear_grad_fd)
{
    cl_rng rng;
    cl_rng_init(&rng, 1234, 6);
    check_linear(3, 7, 5, 1, &rng);
    check_linear(1, 4, 3, 0, &rng);
    check_linear(2, 33, 10, 1, &rng);
    free_all();
}

/* ====================================================================== */
/* add                                                                     */
/* ====================================================================== */

typedef struct add_ctx {
    float *a, *b, *y, *r;
    int64_t n;
} add_ctx;

static double add_loss(void *p)
{
    add_ctx *c = p;
    cl_add_forward(c->y, c->a, c->b, c->n);
    return cl_fd_dot(c->y, c->r, c->n);
}

CL_TEST(add_values_aliasing_and_grad)
{
    cl_rng rng;
    cl_rng_init(&rng, 1234, 7);
    const int64_t n = 101;
    add_ctx c = {newf(n), newf(n), newf(n), newf(n), n};
    cl_fd_uniform(c.a, n, -1, 1, &rng);
    cl_fd_uniform(c.b, n, -1, 1, &rng);
    cl_fd_uniform(c.r, n, -1, 1, &rng);
    cl_add_forward(c.y, c.a, c.b, n);
    int ok = 1;
    for (int64_t i = 0; i < n; i++)
        ok &= c.y[i] == c.a[i] + c.b[i];
    CHECK(ok);
    /* y aliasing a, and y aliasing b. */
    float *ya = copyf(c.a, n), *yb = copyf(c.b, n);
    cl_add_forward(ya, ya, c.b, n);
    cl_add_forward(yb, c.a, yb, n);
    CHECK(max_diff(ya, c.y, n) == 0.0);
    CHECK(max_diff(yb, c.y, n) == 0.0);

    float *da = newf(n), *db = newf(n);
    fill(da, n, 777.0f);
    fill(db, n, 777.0f);
    cl_add_backward(da, db, c.r, n);
    CL_FD_CHECK("add da", c.a, n, da, add_loss, &c, LIN_H, LIN_RTOL, LIN_ATOL,
                &rng, FD_MAX);
    CL_FD_CHECK("add db", c.b, n, db, add_loss, &c, LIN_H, LIN_RTOL, LIN_ATOL,
                &rng, FD_MAX);
    /* da aliasing dy (the graph passes dy through), db separate or NULL. */
    float *g = copyf(c.r, n), *g2 = newf(n);
    cl_add_backward(g, g2, g, n);
    CHECK(max_diff(g, c.r, n) == 0.0);
    CHECK(max_diff(g2, c.r, n) == 0.0);
    fill(g2, n, 0.0f);
    cl_add_backward(NULL, g2, g, n);
    CHECK(max_diff(g2, c.r, n) == 0.0);
    cl_add_backward(g, g, g, n);
    CHECK(max_diff(g, c.r, n) == 0.0);
    free_all();
}

/* ====================================================================== */
/* softmax cross-entropy                                                   */
/* ====================================================================== */

CL_TEST(softmax_ce_hand)
{
    /* logits (0, ln 3): softmax = (1/4, 3/4).
     *   label 1: loss = -ln(3/4) = ln(4/3) = 0.2876820725
     *   label 0: loss = -ln(1/4) = ln 4    = 1.3862943611
     *   smoothing 0.1, K 2, label 1: t' = (0.05, 0.95),
     *     loss = 0.05 ln 4 + 0.95 ln(4/3) = 0.3426126869
     *   batch (label 1, label 0): mean = 0.8369882168; the soft target
     *     (1/2, 1/2) on one row gives the same 0.5 ln 4 + 0.5 ln(4/3). */
    const float ln3 = (float)log(3.0);
    const float z1[2] = {0, ln3};
    const float z2[4] = {0, ln3, 0, ln3};
    float p[4], d[4];
    cl_softmax_ce_attr a = {2, 0.0f};
    int32_t l1[1] = {1}, l10[2] = {1, 0};
    CHECK_NEAR(cl_softmax_ce_forward(p, z1, l1, NULL, 1, &a), 0.2876820725,
               1e-6);
    CHECK_NEAR(p[0], 0.25, 1e-7);
    CHECK_NEAR(p[1], 0.75, 1e-7);
    /* d = (p - onehot) / N = (0.25, -0.25); with scale 2: (0.5, -0.5). */
    cl_softmax_ce_backward(d, p, l1, NULL, 1, 2.0f, &a);
    CHECK_NEAR(d[0], 0.5, 1e-6);
    CHECK_NEAR(d[1], -0.5, 1e-6);
    CHECK_NEAR(cl_softmax_ce_forward(p, z2, l10, NULL, 2, &a), 0.8369882168,
               1e-6);
    /* Row 0: (0.25, -0.25) / 2; row 1: (0.25 - 1, 0.75) / 2. */
    cl_softmax_ce_backward(d, p, l10, NULL, 2, 1.0f, &a);
    const float ed[4] = {0.125f, -0.125f, -0.375f, 0.375f};
    CHECK_VALUES(d, ed, 4, 1e-6);
    const float half[2] = {0.5f, 0.5f};
    CHECK_NEAR(cl_softmax_ce_forward(p, z1, NULL, half, 1, &a), 0.8369882168,
               1e-6);
    a.label_smoothing = 0.1f;
    CHECK_NEAR(cl_softmax_ce_forward(p, z1, l1, NULL, 1, &a), 0.3426126869,
               1e-6);
    /* d = p - t' = (0.25 - 0.05, 0.75 - 0.95) = (0.2, -0.2). */
    cl_softmax_ce_backward(d, p, l1, NULL, 1, 1.0f, &a);
    CHECK_NEAR(d[0], 0.2, 1e-6);
    CHECK_NEAR(d[1], -0.2, 1e-6);
    /* Soft one-hot target with smoothing equals the label path. */
    const float onehot[2] = {0, 1};
    CHECK_NEAR(cl_softmax_ce_forward(p, z1, NULL, onehot, 1, &a), 0.3426126869,
               1e-6);

    /* Numerically stable: shifting logits by +-1000 (exp would overflow or
     * underflow in float) changes nothing. */
    a.label_smoothing = 0.0f;
    const float big[2] = {1000.0f, 1000.0f + ln3};
    const float neg[2] = {-1000.0f, -1000.0f + ln3};
    CHECK_NEAR(cl_softmax_ce_forward(p, big, l1, NULL, 1, &a), 0.2876820725,
               1e-4);
    CHECK_NEAR(p[1], 0.75, 1e-4);
    CHECK_NEAR(cl_softmax_ce_forward(p, neg, l1, NULL, 1, &a), 0.2876820725,
               1e-4);
    CHECK_NEAR(p[0], 0.25, 1e-4);
    /* A confident wrong answer: loss 200, finite. */
    const float far[2] = {200.0f, 0.0f};
    CHECK_NEAR(cl_softmax_ce_forward(p, far, l1, NULL, 1, &a), 200.0, 1e-3);

    cl_shape ls = cl_shape_make(2, (int64_t[]){8, 2});
    CHECK_OK(cl_softmax_ce_infer(&a, &ls));
    cl_softmax_ce_attr a3 = {3, 0.0f};
    CHECK_ERR(cl_softmax_ce_infer(&a3, &ls), CL_ERR_SHAPE,
              "softmax_ce: logits have 2 classes, attr.num_classes is 3");
    a3 = (cl_softmax_ce_attr){2, 1.5f};
    CHECK_ERR(cl_softmax_ce_infer(&a3, &ls), CL_ERR_ARG,
              "attr.label_smoothing");
}

typedef struct ce_ctx {
    const cl_softmax_ce_attr *a;
    int N;
    float scale;
    float *z, *p, *t;
    int32_t *l;
} ce_ctx;

static double ce_loss(void *p)
{
    ce_ctx *c = p;
    return (double)c->scale *
           cl_softmax_ce_forward(c->p, c->z, c->l, c->t, c->N, c->a);
}

/* soft: 0 labels, 1 targets summing to one, 2 targets summing to 0.7. */
static void check_ce(int N, int K, float smoothing, int soft, float scale,
                     cl_rng *rng)
{
    cl_softmax_ce_attr a = {K, smoothing};
    const int64_t n = (int64_t)N * K;
    ce_ctx c = {&a, N, scale, newf(n), newf(n), NULL, NULL};
    cl_fd_uniform(c.z, n, -2, 2, rng);
    if (soft) {
        c.t = newf(n);
        for (int i = 0; i < N; i++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += c.t[(int64_t)i * K + k] = 0.1f + cl_rng_uniform(rng);
            for (int k = 0; k < K; k++)
                c.t[(int64_t)i * K + k] *= (float)((soft == 2 ? 0.7 : 1) / s);
        }
    } else {
        c.l = newi(N);
        for (int i = 0; i < N; i++)
            c.l[i] = (int32_t)cl_rng_below(rng, (uint32_t)K);
        REQUIRE_OK(cl_softmax_ce_check_labels(c.l, N, K));
    }
    ce_loss(&c);
    float *d = newf(n);
    fill(d, n, 777.0f);
    cl_softmax_ce_backward(d, c.p, c.l, c.t, N, scale, &a);
    char what[80];
    snprintf(what, sizeof what, "softmax_ce N%d K%d s%.2f %s scale %.1f", N, K,
             (double)smoothing,
             soft == 0   ? "labels"
             : soft == 1 ? "soft"
                         : "soft-0.7",
             (double)scale);
    CL_FD_CHECK(what, c.z, n, d, ce_loss, &c, CE_H, CE_RTOL, CE_ATOL, rng,
                FD_MAX);
}

CL_TEST(softmax_ce_grad_fd)
{
    cl_rng rng;
    cl_rng_init(&rng, 1234, 8);
    for (int soft = 0; soft <= 1; soft++)
        for (int s = 0; s <= 1; s++) {
            check_ce(3, 5, s ? 0.1f : 0.0f, soft, 1.0f, &rng);
            check_ce(1, 7, s ? 0.1f : 0.0f, soft, 1.0f, &rng);
        }
    check_ce(4, 10, 0.1f, 0, 0.5f, &rng);
    check_ce(2, 3, 0.0f, 2, 1.0f, &rng);
    check_ce(2, 3, 0.1f, 2, 2.0f, &rng);
    free_all();
}

CL_TEST(softmax_ce_labels_check)
{
    const int32_t ok[3] = {0, 2, 1};
    CHECK_OK(cl_softmax_ce_check_labels(ok, 3, 3));
    const int32_t neg[3] = {0, 1, -1};
    CHECK_ERR(cl_softmax_ce_check_labels(neg, 3, 3), CL_ERR_ARG,
              "label of sample 2 is -1");
    const int32_t big[2] = {0, 3};
    CHECK_ERR(cl_softmax_ce_check_labels(big, 2, 3), CL_ERR_ARG,
              "label of sample 1 is 3, expected 0..2");
    /* An unchecked bad label gives a NaN loss and NaN gradient row, never a
     * read outside the row. */
    cl_softmax_ce_attr a = {3, 0.0f};
    const float z[6] = {0, 1, 2, 0, 1, 2};
    float p[6], d[6];
    float loss = cl_softmax_ce_forward(p, z, big, NULL, 2, &a);
    CHECK(isnan(loss));
    cl_softmax_ce_backward(d, p, big, NULL, 2, 1.0f, &a);
    CHECK(!isnan(d[0]) && isnan(d[3]));
}
