/* The oneDNN backend's int8 inference (precision int8, onednn/conv.c):
 * nodes with int8 scales (g->quant) planned with cl_backend_opts.int8
 * against the f32 plan of the same graph.
 *
 * Exactness: where an int8 conv reads values that are exact multiples of
 * their scale (the graph's input, filled so) and weights that are exact
 * multiples of theirs with even integers (so that the 7-bit weights oneDNN
 * uses below VNNI are exact too), quantizing loses nothing: the int8 plan
 * must then give the f32 plan's numbers up to f32 rounding of the sums,
 * whatever the fusions (BN folded, bias, sum post-op, ReLU), layouts and
 * signedness.  A wrong scale, bias or layout gives errors of order 1.
 *
 * A whole network (ResNet-50's bottlenecks) calibrated here by min-max is
 * then held to the f32 plan within what 8-bit activations lose, and its
 * top-1 must agree.
 * ctest-labels: onednn */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"
#include "core/mem.h"
#include "graph/graph.h"
#include "graph_cases.h"
#include "harness.h"
#include "models/resnet.h"

enum { K_CLASSES = 10, BATCH = 3 };

static cl_status head(cl_graph *g, int x, int ch)
{
    int p, y;
    cl_linear_attr la = {ch, K_CLASSES, 1};
    cl_softmax_ce_attr ca = {K_CLASSES, 0.0f};
    CL_TRY(cl_graph_global_avgpool(g, "pool", x, &p));
    CL_TRY(cl_graph_linear(g, "fc", p, &la, &y));
    CL_TRY(cl_graph_softmax_ce(g, y, &ca, 0));
    return cl_graph_finalize(g);
}

/* conv 3x3 + BN + ReLU. */
static cl_status build_bn_relu(cl_graph *g)
{
    int x, y, z, r;
    cl_conv2d_attr a = cl_conv2d_attr_make(3, 16, 3, 1, 1);
    cl_batchnorm2d_attr bn = cl_batchnorm2d_attr_make(16);
    CL_TRY(cl_graph_input(g, 3, 8, 8, &x));
    CL_TRY(cl_graph_conv2d(g, "conv1", x, &a, &y));
    CL_TRY(cl_graph_batchnorm2d(g, "bn1", y, &bn, &z));
    CL_TRY(cl_graph_relu(g, "relu", z, &r));
    return head(g, r, 16);
}

/* A strided 1x1 conv + BN without ReLU (ResNet's downsample). */
static cl_status build_strided(cl_graph *g)
{
    int x, y, z;
    cl_conv2d_attr a = cl_conv2d_attr_make(8, 32, 1, 2, 0);
    cl_batchnorm2d_attr bn = cl_batchnorm2d_attr_make(32);
    CL_TRY(cl_graph_input(g, 8, 9, 9, &x));
    CL_TRY(cl_graph_conv2d(g, "down", x, &a, &y));
    CL_TRY(cl_graph_batchnorm2d(g, "bn", y, &bn, &z));
    return head(g, z, 32);
}

/* Two convs read the input; one's BN output is added into the other's
 * (a sum post-op) with ReLU: a residual join. */
static cl_status build_residual(cl_graph *g)
{
    int x, a1, b1, a2, b2, s, r;
    cl_conv2d_attr a = cl_conv2d_attr_make(4, 16, 3, 1, 1);
    cl_conv2d_attr b = cl_conv2d_attr_make(4, 16, 1, 1, 0);
    cl_batchnorm2d_attr bn = cl_batchnorm2d_attr_make(16);
    CL_TRY(cl_graph_input(g, 4, 7, 7, &x));
    CL_TRY(cl_graph_conv2d(g, "short", x, &b, &b1));
    CL_TRY(cl_graph_batchnorm2d(g, "short_bn", b1, &bn, &b2));
    CL_TRY(cl_graph_conv2d(g, "conv", x, &a, &a1));
    CL_TRY(cl_graph_batchnorm2d(g, "bn", a1, &bn, &a2));
    CL_TRY(cl_graph_add(g, "add", a2, b2, &s));
    CL_TRY(cl_graph_relu(g, "relu", s, &r));
    return head(g, r, 16);
}

/* A conv with its own bias and no BN. */
static cl_status build_conv_bias(cl_graph *g)
{
    int x, y;
    cl_conv2d_attr a = cl_conv2d_attr_make(3, 8, 3, 2, 1);
    a.has_bias = 1;
    CL_TRY(cl_graph_input(g, 3, 11, 9, &x));
    CL_TRY(cl_graph_conv2d(g, "conv", x, &a, &y));
    return head(g, y, 8);
}

/* Linear over the last dimension of the image (Swin's token layers are
 * linears over rank 3 and up), with its GELU fused, then a second linear
 * reading the first's output. */
static cl_status build_tokens(cl_graph *g)
{
    int x, y, z;
    cl_linear_attr a = {8, 16, 1};
    CL_TRY(cl_graph_input(g, 3, 4, 8, &x));
    CL_TRY(cl_graph_linear(g, "proj", x, &a, &y));
    CL_TRY(cl_graph_gelu(g, "gelu", y, &z));
    return head(g, z, 3);
}

/* BN node i as the identity plus a bias beta, as a quantized model holds
 * it: gamma 1, mean 0 and a variance v with v + eps == 1 in f32, so that
 * folding multiplies by exactly 1. */
static void bn_identity(cl_graph *g, int i)
{
    const cl_node *b = &g->nodes[i];
    const float eps = b->attr.batchnorm2d.eps;
    float v = 1.0f - eps;
    while (v + eps < 1.0f)
        v = nextafterf(v, 2.0f);
    while (v + eps > 1.0f)
        v = nextafterf(v, 0.0f);
    const int C = b->attr.batchnorm2d.channels;
    float *gam = cl_graph_param(g, b->param[0]);
    float *rm = cl_graph_buffer(g, b->buf[0]),
          *rv = cl_graph_buffer(g, b->buf[1]);
    for (int c = 0; c < C; c++) {
        gam[c] = 1.0f;
        rm[c] = 0.0f;
        rv[c] = v;
    }
}

/* The BN node reading conv i's output alone, or -1. */
static int bn_after(const cl_graph *g, int i)
{
    int found = -1, readers = 0;
    for (int k = 0; k < g->n_nodes; k++)
        for (int a = 0; a < g->nodes[k].n_in; a++)
            if (g->nodes[k].in[a] == g->nodes[i].out) {
                readers++;
                found = k;
            }
    return readers == 1 && g->nodes[found].op == CL_OP_BATCHNORM2D ? found : -1;
}

/* Folds conv i's BN into its weights and bias-free form (w k, BN left as
 * identity plus beta + (-mean) k), as `classic quantize` does. */
static void fold(cl_graph *g, int i)
{
    int j = bn_after(g, i);
    if (j < 0)
        return;
    const cl_node *n = &g->nodes[i], *b = &g->nodes[j];
    const int O = n->attr.conv2d.out_ch;
    const int64_t per = cl_graph_numel(g, n->param[0]) / O;
    float *w = cl_graph_param(g, n->param[0]);
    float *gam = cl_graph_param(g, b->param[0]);
    float *beta = cl_graph_param(g, b->param[1]);
    const float *rm = cl_graph_buffer(g, b->buf[0]);
    const float *rv = cl_graph_buffer(g, b->buf[1]);
    for (int o = 0; o < O; o++) {
        float k = gam[o] / sqrtf(rv[o] + b->attr.batchnorm2d.eps);
        for (int64_t e = 0; e < per; e++)
            w[o * per + e] *= k;
        beta[o] -= rm[o] * k;
    }
    bn_identity(g, j);
}

/* Conv or linear i's weights as s_w q, s_w per output channel from max
 * |w|, recorded in g->quant.  bits 8: q even in [-126, 126], exact at 7
 * bits too, so that the 7-bit weights oneDNN uses below VNNI lose
 * nothing; bits 7: any q in [-63, 63], odd ones too, which no kernel may
 * halve and no u8 x s8 pair can saturate. */
static void quantize_weights(cl_graph *g, int i, int bits)
{
    const cl_node *n = &g->nodes[i];
    const int O = n->op == CL_OP_CONV2D ? n->attr.conv2d.out_ch
                                        : n->attr.linear.out_features;
    const int64_t per = cl_graph_numel(g, n->param[0]) / O;
    const float qmax = bits == 7 ? 63.0f : 126.0f, step = bits == 7 ? 1 : 2;
    float *w = cl_graph_param(g, n->param[0]);
    float *ws = cl_graph_quant_wscale(g, i);
    for (int o = 0; o < O; o++) {
        float m = 0.0f;
        for (int64_t e = 0; e < per; e++)
            m = fmaxf(m, fabsf(w[o * per + e]));
        ws[o] = m > 0.0f ? m / qmax : 1.0f;
        for (int64_t e = 0; e < per; e++) {
            float q = step * rintf(w[o * per + e] / (step * ws[o]));
            w[o * per + e] = q * ws[o];
        }
    }
}

/* Plans g at f32 and at int8, runs x through both and holds the int8
 * logits to the f32 ones within tol (max |a - b| / max |b|); returns the
 * error, and the share of samples whose top-1 agree in *agree. */
static double int8_against_f32(cl_graph *g, const float *x, double tol,
                               double *agree, const char *what)
{
    cl_backend *f = NULL, *q = NULL;
    cl_backend_opts fo = {0}, qo = {0};
    qo.int8 = 1;
    size_t nl = (size_t)cl_graph_numel(g, g->logits);
    float *a = cl_alloc(nl * sizeof *a, "a"),
          *b = cl_alloc(nl * sizeof *b, "b");
    double err = -1.0;
    CHECK_OK(cl_backend_create(&f, "onednn", g, CL_PLAN_INFER, &fo));
    CHECK_OK(cl_backend_create(&q, "onednn", g, CL_PLAN_INFER, &qo));
    if (f && q && a && b) {
        CHECK_OK(cl_backend_set_input(f, x, NULL, NULL));
        CHECK_OK(cl_backend_forward(f, 0, NULL));
        CHECK_OK(cl_backend_read(f, g->logits, b));
        CHECK_OK(cl_backend_set_input(q, x, NULL, NULL));
        CHECK_OK(cl_backend_forward(q, 0, NULL));
        CHECK_OK(cl_backend_read(q, g->logits, a));
        double num = 0.0, den = 0.0;
        int same = 0, N = g->batch;
        for (size_t k = 0; k < nl; k++) {
            num = fmax(num, fabs((double)a[k] - b[k]));
            den = fmax(den, fabs((double)b[k]));
        }
        for (int s = 0; s < N; s++) {
            int ia = 0, ib = 0;
            for (int c = 1; c < K_CLASSES; c++) {
                if (a[s * K_CLASSES + c] > a[s * K_CLASSES + ia])
                    ia = c;
                if (b[s * K_CLASSES + c] > b[s * K_CLASSES + ib])
                    ib = c;
            }
            same += ia == ib;
        }
        err = den > 0.0 ? num / den : num;
        if (agree)
            *agree = (double)same / N;
        printf("%s: int8 against f32, max rel err %.3g (tolerance %.3g), "
               "top-1 agreement %d/%d\n",
               what, err, tol, same, N);
        CHECK(err <= tol);
    }
    cl_backend_destroy(f);
    cl_backend_destroy(q);
    cl_free(a);
    cl_free(b);
    return err;
}

typedef cl_status (*build_fn)(cl_graph *g);

/* The exact case: every conv reading the input int8, the input filled
 * with multiples of its scale (signed or not). */
static void exact_case_bits(build_fn build, int is_signed, int bits,
                            const char *what)
{
    cl_graph g;
    REQUIRE_OK(cl_graph_init(&g, BATCH));
    REQUIRE_OK(build(&g));
    fill_params(&g, 7);
    REQUIRE_OK(cl_graph_quant_init(&g));
    const float sx = 0.013f;
    g.quant->act_scale[g.input] = sx;
    g.quant->act_signed[g.input] = (unsigned char)is_signed;
    for (int i = 0; i < g.n_nodes; i++)
        if ((g.nodes[i].op == CL_OP_CONV2D || g.nodes[i].op == CL_OP_LINEAR) &&
            g.nodes[i].in[0] == g.input) {
            if (g.nodes[i].op == CL_OP_CONV2D)
                fold(&g, i);
            quantize_weights(&g, i, bits);
            CHECK(cl_graph_quant_node(&g, i));
        }
    size_t nx = (size_t)cl_graph_numel(&g, g.input);
    float *x = cl_alloc(nx * sizeof *x, "x");
    REQUIRE(x);
    cl_rng r;
    cl_rng_init(&r, 11, 3);
    for (size_t k = 0; k < nx; k++) {
        float u = cl_rng_uniform(&r);
        float qv = is_signed ? rintf(-127.0f + 254.0f * u) : rintf(255.0f * u);
        x[k] = qv * sx;
    }
    int8_against_f32(&g, x, 2e-5, NULL, what);
    cl_free(x);
    cl_graph_free(&g);
}

static void exact_case(build_fn build, int is_signed, const char *what)
{
    exact_case_bits(build, is_signed, 8, what);
}

/* 7-bit weights (odd ones too) run as written, not halved again. */
CL_TEST(seven_bit_weights_exact)
{
    exact_case_bits(build_bn_relu, 0, 7, "7-bit weights, conv + BN + ReLU, u8");
    exact_case_bits(build_residual, 0, 7, "7-bit weights, residual, u8");
    exact_case_bits(build_tokens, 1, 7, "7-bit weights, linear + GELU, s8");
}

CL_TEST(conv_bn_relu_exact)
{
    exact_case(build_bn_relu, 0, "conv3x3 + BN + ReLU, u8");
}

CL_TEST(conv_bn_relu_exact_signed)
{
    exact_case(build_bn_relu, 1, "conv3x3 + BN + ReLU, s8");
}

CL_TEST(strided_downsample_exact)
{
    exact_case(build_strided, 1, "1x1/2 + BN, s8");
}

CL_TEST(residual_sum_exact)
{
    exact_case(build_residual, 0, "two convs of one input, sum + ReLU, u8");
}

CL_TEST(conv_bias_exact)
{
    exact_case(build_conv_bias, 0, "conv with bias, no BN, u8");
}

CL_TEST(token_linear_gelu_exact)
{
    exact_case(build_tokens, 1, "linear over tokens + GELU, s8");
}

CL_TEST(token_linear_exact_unsigned)
{
    exact_case(build_tokens, 0, "linear over tokens + GELU, u8");
}

/* Without scales for a node, an int8 plan runs it as f32: a record whose
 * every scale is 0 plans exactly the f32 plan's numbers. */
CL_TEST(no_scales_is_f32)
{
    cl_graph g;
    REQUIRE_OK(cl_graph_init(&g, BATCH));
    REQUIRE_OK(build_residual(&g));
    fill_params(&g, 5);
    REQUIRE_OK(cl_graph_quant_init(&g));
    size_t nx = (size_t)cl_graph_numel(&g, g.input);
    float *x = cl_alloc(nx * sizeof *x, "x");
    REQUIRE(x);
    fill_uniform(x, (int64_t)nx, 3, -1.0f, 1.0f);
    int8_against_f32(&g, x, 0.0, NULL, "no scales");
    cl_free(x);
    cl_graph_free(&g);
}

/* ResNet-50 bottlenecks (CIFAR stem, 16x16): BN folded, weights
 * quantized, activation scales by min-max over the batch read from a
 * training plan's evaluation forward; every conv but the stem int8. */
static void calibrated(int depth, int stem, int side, int n_convs,
                       const char *what)
{
    cl_graph g;
    REQUIRE_OK(cl_graph_init(&g, 8));
    cl_resnet_config c = cl_resnet_config_default();
    c.depth = depth;
    c.stem = stem;
    c.num_classes = K_CLASSES;
    REQUIRE_OK(cl_resnet_build(&g, &c, side, side, 0, 0.0f));
    /* torchvision-like weights keep the activations of 50 layers in range:
     * He-scaled convs, BN at its defaults with a spread of statistics. */
    for (int i = 0; i < g.n_nodes; i++) {
        const cl_node *n = &g.nodes[i];
        if (n->op == CL_OP_CONV2D) {
            const cl_conv2d_attr *a = &n->attr.conv2d;
            float bound = sqrtf(6.0f / (float)(a->in_ch * a->kh * a->kw));
            fill_uniform(cl_graph_param(&g, n->param[0]),
                         cl_graph_numel(&g, n->param[0]), 100 + (uint64_t)i,
                         -bound, bound);
        } else if (n->op == CL_OP_BATCHNORM2D) {
            int C = n->attr.batchnorm2d.channels;
            fill_uniform(cl_graph_param(&g, n->param[0]), C, 200 + (uint64_t)i,
                         0.5f, 1.0f);
            fill_uniform(cl_graph_param(&g, n->param[1]), C, 300 + (uint64_t)i,
                         -0.2f, 0.2f);
            fill_uniform(cl_graph_buffer(&g, n->buf[0]), C, 400 + (uint64_t)i,
                         -0.1f, 0.1f);
            fill_uniform(cl_graph_buffer(&g, n->buf[1]), C, 500 + (uint64_t)i,
                         0.8f, 1.5f);
        } else if (n->op == CL_OP_LINEAR) {
            fill_uniform(cl_graph_param(&g, n->param[0]),
                         cl_graph_numel(&g, n->param[0]), 600, -0.05f, 0.05f);
        }
    }
    REQUIRE_OK(cl_graph_quant_init(&g));
    int first = -1;
    for (int i = 0; i < g.n_nodes; i++)
        if (g.nodes[i].op == CL_OP_CONV2D) {
            fold(&g, i);
            if (first < 0)
                first = i;
            else
                quantize_weights(&g, i, 8);
        }
    size_t nx = (size_t)cl_graph_numel(&g, g.input);
    float *x = cl_alloc(nx * sizeof *x, "x");
    REQUIRE(x);
    fill_uniform(x, (int64_t)nx, 9, -2.0f, 2.0f);
    /* Min-max of each int8 conv's input, read where training plans keep
     * every conv input for backward. */
    cl_backend *tr = NULL;
    cl_backend_opts o = {0};
    REQUIRE_OK(cl_backend_create(&tr, "onednn", &g, CL_PLAN_TRAIN, &o));
    CHECK_OK(cl_backend_set_input(tr, x, NULL, NULL));
    CHECK_OK(cl_backend_forward(tr, 0, NULL));
    float *buf = NULL;
    size_t cap = 0;
    int n8 = 0;
    for (int i = 0; i < g.n_nodes; i++) {
        const cl_node *n = &g.nodes[i];
        if (n->op != CL_OP_CONV2D || i == first)
            continue;
        size_t m = (size_t)cl_graph_numel(&g, n->in[0]);
        if (m > cap) {
            cl_free(buf);
            buf = cl_alloc(m * sizeof *buf, "act");
            cap = m;
        }
        REQUIRE(buf);
        CHECK_OK(cl_backend_read(tr, n->in[0], buf));
        float lo = 0.0f, hi = 0.0f;
        for (size_t k = 0; k < m; k++) {
            lo = fminf(lo, buf[k]);
            hi = fmaxf(hi, fabsf(buf[k]));
        }
        g.quant->act_signed[n->in[0]] = lo < 0.0f;
        g.quant->act_scale[n->in[0]] = hi / (lo < 0.0f ? 127.0f : 255.0f);
        n8 += cl_graph_quant_node(&g, i);
    }
    cl_backend_destroy(tr);
    cl_free(buf);
    printf("%s: %d of %d convs int8\n", what, n8, n_convs);
    CHECK(n8 == n_convs - 1);
    double agree = 0.0;
    /* 8-bit activations through the blocks: measured 1-3% here; a wrong
     * scale or layout gives order 1. */
    int8_against_f32(&g, x, 0.1, &agree, what);
    CHECK(agree >= 0.75);
    cl_free(x);
    cl_graph_free(&g);
}

CL_TEST(resnet50_calibrated)
{
    calibrated(50, CL_STEM_CIFAR, 16, 53, "resnet50 calibrated");
}

/* ResNet-18 with the Fashion-MNIST recipe's stem: layer1's residual is
 * the f32 stem's max-pooled output, in a blocked layout the int8 kernels
 * cannot write (copied to nhwc; a plan that fell to oneDNN's reference
 * int8 loops would be refused). */
CL_TEST(resnet18_calibrated_blocked_residual)
{
    calibrated(18, CL_STEM_CIFAR_POOL, 28, 20, "resnet18 calibrated");
}
