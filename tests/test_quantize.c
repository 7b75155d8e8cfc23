/* Post-training int8 quantization: the scheme's numbers on hand-made
 * graphs (BN folded exactly, q values, each method's threshold on a known
 * distribution), the onednn training plan's tensors against the
 * reference's, the int8 file's round trip and its refusals when damaged,
 * and `classic quantize`, `info`, `eval` and `predict` on a tiny trained
 * model, with every bad calibration input refused leaving no file.
 * ctest-labels: onednn cli */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "classic/classic.h"
#include "backend/backend.h"
#include "core/error.h"
#include "graph/graph.h"
#include "harness.h"
#include "interop/quantized.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "models/arch.h"
#include "test_data_fixtures.h"
#include "tiny_run.h"
#include "train/model.h"
#include "train/quantize.h"

/* Deterministic values in [-1, 1). */
static float wave(size_t i, int k)
{
    return (float)sin(0.37 * (double)i + 1.3 * k);
}

/* Every parameter of g from wave(), BN's gamma and running stats sane. */
static void fill_params(cl_graph *g)
{
    for (int t = 0; t < g->n_tensors; t++) {
        const cl_gtensor *gt = &g->tensors[t];
        if (!cl_gtensor_saved(gt) || gt->dtype != CL_F32)
            continue;
        float *p = gt->kind == CL_GT_PARAM ? cl_graph_param(g, t)
                                           : cl_graph_buffer(g, t);
        size_t n = (size_t)cl_graph_numel(g, t);
        const char *dot = strrchr(gt->name, '.');
        for (size_t i = 0; i < n; i++) {
            float v = wave(i, t);
            if (strcmp(dot, ".running_var") == 0)
                v = 0.5f + 0.4f * v;
            else if (strcmp(dot, ".running_mean") == 0)
                v = 0.1f * v;
            else if (strstr(gt->name, "bn") && strcmp(dot, ".weight") == 0)
                v = 1.0f + 0.5f * v;
            else if (strcmp(dot, ".num_batches_tracked") == 0)
                v = 3.0f;
            p[i] = v;
        }
    }
}

/* input (2, 3, 6, 6) -> conv1 (the stem) -> bn1 -> relu -> conv2 -> bn2 ->
 * relu -> pool -> fc1 -> relu -> fc (the head) -> loss. */
static cl_status build_small(cl_graph *g)
{
    int x, a, b, c, d, e, f, p, h, r, y;
    cl_conv2d_attr c1 = cl_conv2d_attr_make(3, 4, 3, 1, 1);
    cl_conv2d_attr c2 = cl_conv2d_attr_make(4, 5, 3, 1, 1);
    cl_batchnorm2d_attr b1 = cl_batchnorm2d_attr_make(4);
    cl_batchnorm2d_attr b2 = cl_batchnorm2d_attr_make(5);
    cl_linear_attr l1 = {5, 6, 1}, l2 = {6, 3, 1};
    cl_softmax_ce_attr ca = {3, 0.0f};
    CL_TRY(cl_graph_init(g, 2));
    CL_TRY(cl_graph_input(g, 3, 6, 6, &x));
    CL_TRY(cl_graph_conv2d(g, "conv1", x, &c1, &a));
    CL_TRY(cl_graph_batchnorm2d(g, "bn1", a, &b1, &b));
    CL_TRY(cl_graph_relu(g, "relu1", b, &c));
    CL_TRY(cl_graph_conv2d(g, "conv2", c, &c2, &d));
    CL_TRY(cl_graph_batchnorm2d(g, "bn2", d, &b2, &e));
    CL_TRY(cl_graph_relu(g, "relu2", e, &f));
    CL_TRY(cl_graph_global_avgpool(g, "pool", f, &p));
    CL_TRY(cl_graph_linear(g, "fc1", p, &l1, &h));
    CL_TRY(cl_graph_relu(g, "relu3", h, &r));
    CL_TRY(cl_graph_linear(g, "fc", r, &l2, &y));
    CL_TRY(cl_graph_softmax_ce(g, y, &ca, 0));
    CL_TRY(cl_graph_finalize(g));
    fill_params(g);
    return CL_OK;
}

static int node_named(const cl_graph *g, const char *name)
{
    for (int i = 0; i < g->n_nodes; i++)
        if (strcmp(g->nodes[i].name, name) == 0)
            return i;
    return -1;
}

/* The f32 plain copy of tensor t after a forward of x on ref. */
static cl_status ref_tensor(cl_graph *g, const float *x, int t, float *out,
                            float *logits)
{
    cl_backend *be = NULL;
    int32_t labels[2] = {0, 0};
    CL_TRY(cl_backend_create(&be, "ref", g, CL_PLAN_INFER, NULL));
    cl_status s = cl_backend_set_input(be, x, labels, NULL);
    if (s == CL_OK)
        s = cl_backend_forward(be, 0, NULL);
    if (s == CL_OK && out)
        s = cl_backend_read(be, t, out);
    if (s == CL_OK && logits)
        s = cl_backend_read(be, g->logits, logits);
    cl_backend_destroy(be);
    return s;
}

CL_TEST(scheme_bn_folded_weights_and_scales)
{
    cl_graph g0, g;
    REQUIRE_OK(build_small(&g0));
    REQUIRE_OK(build_small(&g));
    float x[2 * 3 * 6 * 6];
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
        x[i] = 2.0f * wave(i, 99);
    const float *batches[1] = {x};
    int conv1 = node_named(&g, "conv1"), conv2 = node_named(&g, "conv2"),
        fc1 = node_named(&g, "fc1"), fc = node_named(&g, "fc"),
        bn2 = node_named(&g, "bn2");
    REQUIRE(conv1 >= 0 && conv2 >= 0 && fc1 >= 0 && fc >= 0 && bn2 >= 0);
    /* The rule: the stem and the head stay f32. */
    CHECK(!cl_quant_node_rule(&g, conv1) && cl_quant_node_rule(&g, conv2) &&
          cl_quant_node_rule(&g, fc1) && !cl_quant_node_rule(&g, fc));
    float relu1[2 * 4 * 6 * 6], pool[2 * 5], before[6], after[6];
    int t_relu1 = g.nodes[conv2].in[0], t_pool = g.nodes[fc1].in[0];
    REQUIRE_OK(ref_tensor(&g0, x, t_relu1, relu1, before));
    REQUIRE_OK(ref_tensor(&g0, x, t_pool, pool, NULL));
    REQUIRE_OK(cl__quant_calibrate_on(&g, "ref", batches, 1, NULL, 0));
    REQUIRE(g.quant != NULL);
    CHECK(!cl_graph_quant_node(&g, conv1) && cl_graph_quant_node(&g, conv2) &&
          cl_graph_quant_node(&g, fc1) && !cl_graph_quant_node(&g, fc));
    /* Min-max: ReLU outputs are u8, scale max / 255. */
    float m1 = 0, m2 = 0;
    for (size_t i = 0; i < sizeof relu1 / sizeof relu1[0]; i++)
        m1 = fmaxf(m1, relu1[i]);
    for (size_t i = 0; i < sizeof pool / sizeof pool[0]; i++)
        m2 = fmaxf(m2, pool[i]);
    CHECK(g.quant->act_signed[t_relu1] == 0 &&
          g.quant->act_signed[t_pool] == 0);
    CHECK(g.quant->act_scale[t_relu1] == (float)((double)m1 / 255.0));
    CHECK(g.quant->act_scale[t_pool] == (float)((double)m2 / 255.0));
    /* conv2: w' = w * gamma / sqrtf(var + eps) as the backend folds, then
     * q * s per output channel, s = max |w'| / 127. */
    const cl_node *n2 = &g.nodes[conv2], *b2 = &g.nodes[bn2];
    const float *w0 = cl_graph_param(&g0, n2->param[0]);
    const float *w = cl_graph_param(&g, n2->param[0]);
    const float *ga0 = cl_graph_param(&g0, b2->param[0]);
    const float *be0 = cl_graph_param(&g0, b2->param[1]);
    const float *rm0 = cl_graph_buffer(&g0, b2->buf[0]);
    const float *rv0 = cl_graph_buffer(&g0, b2->buf[1]);
    const float eps = b2->attr.batchnorm2d.eps;
    const float *ws = cl_graph_quant_wscale(&g, conv2);
    int exact = 1, qint = 1;
    for (int o = 0; o < 5; o++) {
        float k = ga0[o] / sqrtf(rv0[o] + eps), m = 0.0f, f[36];
        for (int j = 0; j < 36; j++) {
            f[j] = w0[o * 36 + j] * k;
            m = fmaxf(m, fabsf(f[j]));
        }
        float s = m / 127.0f;
        exact &= ws[o] == s;
        for (int j = 0; j < 36; j++) {
            float q = rintf(f[j] / s);
            exact &= w[o * 36 + j] == q * s;
            qint &= fabsf(q) <= 127.0f && rintf(w[o * 36 + j] / s) == q;
        }
        /* The BN is the identity plus the folded bias. */
        const float *ga = cl_graph_param(&g, b2->param[0]);
        const float *bb = cl_graph_param(&g, b2->param[1]);
        const float *rm = cl_graph_buffer(&g, b2->buf[0]);
        const float *rv = cl_graph_buffer(&g, b2->buf[1]);
        exact &= ga[o] == 1.0f && rm[o] == 0.0f && rv[o] + eps == 1.0f &&
                 1.0f / sqrtf(rv[o] + eps) == 1.0f &&
                 bb[o] == be0[o] + (0.0f - rm0[o]) * k;
    }
    CHECK(exact);
    CHECK(qint);
    /* The stem and its BN, and the head, are untouched. */
    const cl_node *n1 = &g.nodes[conv1];
    CHECK(memcmp(cl_graph_param(&g, n1->param[0]),
                 cl_graph_param(&g0, n1->param[0]), 4 * 3 * 9 * 4) == 0);
    CHECK(memcmp(cl_graph_param(&g, g.nodes[fc].param[0]),
                 cl_graph_param(&g0, g.nodes[fc].param[0]), 18 * 4) == 0);
    /* The dequantized model computes nearly the f32 one. */
    REQUIRE_OK(ref_tensor(&g, x, g.logits, NULL, after));
    double e = cl_test_rel_err(after, before, 6);
    printf("logits after quantizing the weights: %.2e relative\n", e);
    CHECK(e < 0.05);
    cl_graph_free(&g0);
    cl_graph_free(&g);
}

/* input (4, 1, 1, 2501) -> fc1 (int8, reads the input itself) -> relu ->
 * pool -> fc (head) -> loss. */
static cl_status build_line(cl_graph *g)
{
    int x, h, r, p, y;
    cl_linear_attr l1 = {2501, 4, 1}, l2 = {1, 3, 1};
    cl_softmax_ce_attr ca = {3, 0.0f};
    CL_TRY(cl_graph_init(g, 4));
    CL_TRY(cl_graph_input(g, 1, 1, 2501, &x));
    CL_TRY(cl_graph_linear(g, "fc1", x, &l1, &h));
    CL_TRY(cl_graph_relu(g, "relu", h, &r));
    CL_TRY(cl_graph_global_avgpool(g, "pool", r, &p));
    CL_TRY(cl_graph_linear(g, "fc", p, &l2, &y));
    CL_TRY(cl_graph_softmax_ce(g, y, &ca, 0));
    CL_TRY(cl_graph_finalize(g));
    fill_params(g);
    return CL_OK;
}

CL_TEST(scheme_thresholds_by_method)
{
    /* |x| uniform over [0, 10] in 10003 values of both signs, and one
     * outlier at 100: min-max takes 100, percentile 99.99 and entropy
     * leave the outlier out and take about 10. */
    static float x[4 * 2501];
    int n = 4 * 2501;
    for (int i = 0; i < n - 1; i++)
        x[i] = (i % 2 ? -1.0f : 1.0f) * 10.0f * (float)i / (float)(n - 2);
    x[n - 1] = 100.0f;
    const float *batches[1] = {x};
    double t[3];
    for (int m = 0; m < 3; m++) {
        cl_graph g;
        REQUIRE_OK(build_line(&g));
        cl_quant_opts o = {.method = (cl_quant_method)m, .percentile = 99.99};
        REQUIRE_OK(cl__quant_calibrate_on(&g, "ref", batches, 1, &o, 0));
        CHECK(g.quant->act_signed[g.input] == 1);
        t[m] = g.quant->act_scale[g.input] * 127.0;
        printf("%s: threshold %.4f\n", cl_quant_method_name(o.method), t[m]);
        cl_graph_free(&g);
    }
    CHECK_NEAR(t[CL_QUANT_MINMAX], 100.0, 1e-3);
    /* A bin is 100 / 2048 wide: the threshold is a bin's upper edge. */
    CHECK(t[CL_QUANT_PERCENTILE] >= 10.0 && t[CL_QUANT_PERCENTILE] < 10.1);
    CHECK(t[CL_QUANT_ENTROPY] > 9.0 && t[CL_QUANT_ENTROPY] < 12.0);
    cl_quant_method mm;
    CHECK_ERR(cl_quant_method_parse("kl", &mm), CL_ERR_ARG,
              "minmax, percentile, entropy");
}

/* A fresh arch graph for batch 2 at its own side, initial weights. */
static cl_status arch_graph(cl_graph *g, const char *name, const char *stem,
                            int *side)
{
    cl_arch a;
    CL_TRY(cl_arch_parse(name, stem, &a));
    cl_arch_set_io(&a, 3, 10);
    *side = cl_arch_default_side(&a);
    CL_TRY(cl_graph_init(g, 2));
    CL_TRY(cl_arch_build(g, &a, *side, *side, 0, 0.0f));
    return cl_arch_init(g, &a, 7);
}

/* The onednn training plan keeps every int8 layer's input intact after a
 * forward: its statistics are the reference backend's. */
static void calib_parity(const char *arch, const char *stem)
{
    cl_graph gr, go;
    int side = 0;
    REQUIRE_OK(arch_graph(&gr, arch, stem, &side));
    REQUIRE_OK(arch_graph(&go, arch, stem, &side));
    size_t n = (size_t)2 * 3 * side * side;
    float *x = malloc(n * sizeof *x);
    REQUIRE(x != NULL);
    for (size_t i = 0; i < n; i++)
        x[i] = wave(i, 5) + 0.3f * wave(i * 7, 11);
    const float *b[1] = {x};
    cl_quant_opts o = {.method = CL_QUANT_PERCENTILE, .percentile = 99.9};
    REQUIRE_OK(cl__quant_calibrate_on(&gr, "ref", b, 1, &o, 0));
    REQUIRE_OK(cl__quant_calibrate_on(&go, "onednn", b, 1, &o, 0));
    int tensors = 0, differ = 0, int8 = 0;
    for (int t = 0; t < gr.n_tensors; t++) {
        float a = gr.quant->act_scale[t], c = go.quant->act_scale[t];
        if (a == 0.0f && c == 0.0f)
            continue;
        tensors++;
        if (!(fabsf(a - c) <= 1e-3f * a) ||
            gr.quant->act_signed[t] != go.quant->act_signed[t]) {
            if (differ++ < 5)
                printf("tensor %d: scale %g on ref, %g on onednn\n", t,
                       (double)a, (double)c);
        }
    }
    for (int i = 0; i < gr.n_nodes; i++)
        int8 += cl_graph_quant_node(&gr, i);
    printf("%s: %d int8 layers, %d calibrated tensors, %d differ\n", arch, int8,
           tensors, differ);
    CHECK(tensors > 5 && differ == 0);
    free(x);
    cl_graph_free(&gr);
    cl_graph_free(&go);
}

CL_TEST(onednn_train_plan_against_ref_resnet)
{
    calib_parity("resnet18", "cifar");
}

CL_TEST(onednn_train_plan_against_ref_swin)
{
    calib_parity("swin_micro", NULL);
}

/* arch (resnet18 with the CIFAR stem, or swin_micro) at 32 px quantized
 * in memory and saved as the int8 file at path with the metadata to
 * reopen it. */
static cl_status quantized_file_of(cl_graph *g, const char *arch,
                                   const char *path)
{
    int side = 0, swin = strncmp(arch, "swin", 4) == 0;
    CL_TRY(arch_graph(g, arch, swin ? NULL : "cifar", &side));
    size_t n = (size_t)2 * 3 * side * side;
    float *x = malloc(n * sizeof *x);
    if (!x)
        return CL_ERR_NOMEM;
    for (size_t i = 0; i < n; i++)
        x[i] = wave(i, 3);
    const float *b[1] = {x};
    cl_status s = cl_quant_calibrate(g, b, 1, NULL, 0);
    free(x);
    CL_TRY(s);
    const char *keys[] = {"arch",       "in_channels", "num_classes",
                          "image_size", "precision",   "stem"};
    const char *vals[] = {arch, "3", "10", "32", "int8", "cifar"};
    return cl_quant_save(path, g, keys, vals, swin ? 5 : 6);
}

static cl_status quantized_file(cl_graph *g, const char *path)
{
    return quantized_file_of(g, "resnet18", path);
}

/* The logits of m's plan for input x. */
static cl_status logits_of(cl_model *m, const float *x, float *out)
{
    int32_t labels[2] = {0, 0};
    CL_TRY(cl_backend_set_input(m->be, x, labels, NULL));
    CL_TRY(cl_backend_forward(m->be, 0, NULL));
    return cl_backend_read(m->be, m->g.logits, out);
}

/* Written, reopened: the same scales and weights bit for bit, and the
 * int8 plan of the reopened file near its f32 plan. */
static void round_trip(const char *arch, int want_int8)
{
    cl_graph g;
    cl_model m;
    const char *q = cl_test_path("q.safetensors");
    REQUIRE_OK(quantized_file_of(&g, arch, q));
    REQUIRE_OK(cl_model_open_weights(&m, q, NULL, 2, NULL, CL_PLAN_INFER, 0, 0,
                                     CL_PRECISION_AUTO));
    REQUIRE(m.g.quant != NULL);
    CHECK(m.precision == CL_PRECISION_INT8);
    CHECK(m.g.quant->n_w_scale == g.quant->n_w_scale);
    CHECK(memcmp(m.g.quant->act_scale, g.quant->act_scale,
                 sizeof(float) * (size_t)g.n_tensors) == 0);
    CHECK(memcmp(m.g.quant->act_signed, g.quant->act_signed,
                 (size_t)g.n_tensors) == 0);
    CHECK(memcmp(m.g.quant->w_scale, g.quant->w_scale,
                 sizeof(float) * g.quant->n_w_scale) == 0);
    /* The weights are q * s exactly, the BN buffers as folded. */
    CHECK(memcmp(m.g.params, g.params, sizeof(float) * g.n_param_floats) == 0);
    CHECK(memcmp(m.g.buffers, g.buffers, sizeof(float) * g.n_buffer_floats) ==
          0);
    int i8 = 0, fl = 0;
    cl_qfile_count(&m.g, &i8, &fl);
    printf("%s: %d layers int8, %d f32\n", arch, i8, fl);
    CHECK(i8 == want_int8 && fl == 2); /* the stem and the head */
    cl_model_close(&m);
    /* The onednn plans of the file: int8 (its own) and f32. */
    cl_model m8, m32;
    float x[2 * 3 * 32 * 32], l8[20], l32[20];
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
        x[i] = wave(i, 4);
    REQUIRE_OK(cl_model_open_weights(&m8, q, NULL, 2, "onednn", CL_PLAN_INFER,
                                     0, 0, CL_PRECISION_AUTO));
    REQUIRE_OK(cl_model_open_weights(&m32, q, NULL, 2, "onednn", CL_PLAN_INFER,
                                     0, 0, CL_PRECISION_F32));
    CHECK(m8.precision == CL_PRECISION_INT8);
    REQUIRE_OK(logits_of(&m8, x, l8));
    REQUIRE_OK(logits_of(&m32, x, l32));
    double e = cl_test_rel_err(l8, l32, 20);
    printf("%s: int8 plan against f32 plan of the file: %.2e\n", arch, e);
    CHECK(e < 0.25);
    cl_model_close(&m8);
    cl_model_close(&m32);
    cl_graph_free(&g);
}

CL_TEST(file_round_trip)
{
    round_trip("resnet18", 19); /* 20 convs and fc */
    /* The file's tensors: I8 weights with their scales, the stem and the
     * head F32. */
    cl_st_file *f = NULL;
    REQUIRE_OK(cl_st_open(&f, cl_test_path("q.safetensors")));
    cl_st_dtype dt;
    cl_shape sh;
    long i = cl_st_find(f, "layer1.0.conv1.weight");
    REQUIRE(i >= 0);
    cl_st_info(f, (size_t)i, &dt, &sh);
    CHECK(dt == CL_ST_I8 && sh.ndim == 4 && sh.d[0] == 64);
    i = cl_st_find(f, "layer1.0.conv1.weight_scale");
    REQUIRE(i >= 0);
    cl_st_info(f, (size_t)i, &dt, &sh);
    CHECK(dt == CL_ST_F32 && sh.ndim == 1 && sh.d[0] == 64);
    CHECK(cl_st_find(f, "layer1.0.conv1.input_scale") >= 0 &&
          cl_st_find(f, "layer1.0.conv1.input_signed") >= 0);
    cl_st_info(f, (size_t)cl_st_find(f, "conv1.weight"), &dt, NULL);
    CHECK(dt == CL_ST_F32 && cl_st_find(f, "conv1.weight_scale") < 0);
    cl_st_info(f, (size_t)cl_st_find(f, "fc.weight"), &dt, NULL);
    CHECK(dt == CL_ST_F32 && cl_st_find(f, "fc.weight_scale") < 0);
    cl_st_close(f);
}

CL_TEST(file_round_trip_swin)
{
    /* swin_micro: qkv, proj, fc1 and fc2 of its blocks and the patch
     * merging reductions; the patch embedding and the head stay f32. */
    round_trip("swin_micro", 42);
}

/* A copy of src at dst with tensor `name` changed by edit (its bytes and
 * shape; edit may replace the shape). */
typedef void (*edit_fn)(const char *name, void *bytes, cl_shape *shape);

static cl_status rewrite(const char *src, const char *dst, edit_fn edit)
{
    cl_st_file *f = NULL;
    cl_st_writer *w = NULL;
    CL_TRY(cl_st_open(&f, src));
    size_t n = cl_st_count(f);
    void **copies = calloc(n + 1, sizeof *copies);
    cl_status s = cl_st_writer_new(&w);
    for (size_t i = 0; s == CL_OK && i < n; i++) {
        cl_st_dtype dt;
        cl_shape sh;
        size_t nb = 0;
        const void *d = cl_st_data(f, i, &nb);
        cl_st_info(f, i, &dt, &sh);
        copies[i] = malloc(nb + 1);
        memcpy(copies[i], d, nb);
        edit(cl_st_name(f, i), copies[i], &sh);
        s = cl_st_writer_add(w, cl_st_name(f, i), dt, sh, copies[i]);
    }
    for (size_t k = 0; s == CL_OK && k < cl_st_metadata_count(f); k++)
        s = cl_st_writer_meta(w, cl_st_metadata_key(f, k),
                              cl_st_metadata_value(f, k));
    if (s == CL_OK)
        s = cl_st_writer_save(w, dst);
    cl_st_writer_free(w);
    for (size_t i = 0; i < n; i++)
        free(copies[i]);
    free(copies);
    cl_st_close(f);
    return s;
}

static void fewer_scales(const char *name, void *bytes, cl_shape *shape)
{
    (void)bytes;
    if (strcmp(name, "layer2.0.conv2.weight_scale") == 0)
        shape->d[0]--;
}

static void negative_scale(const char *name, void *bytes, cl_shape *shape)
{
    (void)shape;
    float v = -0.5f;
    if (strcmp(name, "layer3.1.conv1.weight_scale") == 0)
        memcpy((char *)bytes + 8, &v, 4);
}

static void flat_weight(const char *name, void *bytes, cl_shape *shape)
{
    (void)bytes;
    if (strcmp(name, "layer1.1.conv2.weight") == 0) {
        shape->ndim = 2;
        shape->d[1] = 64 * 9;
    }
}

static void other_scale(const char *name, void *bytes, cl_shape *shape)
{
    (void)shape;
    float v = 0.125f;
    /* layer2.0.conv1 and layer2.0.downsample.0 read one tensor. */
    if (strcmp(name, "layer2.0.downsample.0.input_scale") == 0)
        memcpy(bytes, &v, 4);
}

CL_TEST(damaged_file_refused)
{
    cl_graph g;
    const char *q = cl_test_path("q.safetensors");
    REQUIRE_OK(quantized_file(&g, q));
    cl_graph_free(&g);
    static const struct {
        edit_fn edit;
        cl_status st;
        const char *words;
    } cases[] = {
        {fewer_scales, CL_ERR_FORMAT,
         "'layer2.0.conv2.weight_scale' holds 127 scale(s) for the 128"},
        {negative_scale, CL_ERR_FORMAT,
         "'layer3.1.conv1.weight_scale' holds -0.5 at 2"},
        {flat_weight, CL_ERR_SHAPE, "'layer1.1.conv2.weight' has shape"},
        {other_scale, CL_ERR_FORMAT, "same activation"}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const char *bad = cl_test_path("bad.safetensors");
        REQUIRE_OK(rewrite(q, bad, cases[k].edit));
        cl_classifier *c = NULL;
        CHECK_ERR(cl_classifier_open(&c, bad, NULL), cases[k].st,
                  cases[k].words);
        printf("refused: %s\n", cl_last_error());
        CHECK(c == NULL);
        cl_classifier_free(c);
        /* One sentence naming the file. */
        CHECK(strstr(cl_last_error(), bad) != NULL);
    }
}

/* The tiny model's file, absolute (tiny_run.h), or NULL. */
static const char *tiny_checkpoint(void)
{
    const char *rel = tiny_run();
    return rel ? cl_test_path(rel) : NULL;
}

/* The top-1 line of `classic eval`'s output ("top-1 ..."), for
 * comparing two runs. */
static void top1_line(char *buf, size_t n)
{
    const char *p = strstr(cl_test_out, "top-1");
    snprintf(buf, n, "%.*s", p ? (int)strcspn(p, "\n") : 0, p ? p : "");
}

CL_TEST(cli_quantize_info_eval_predict)
{
    const char *ck = tiny_checkpoint();
    REQUIRE(ck != NULL);
    char args[4096], f32line[256], qline[256], qdef[256];
    const char *q = cl_test_path("q.safetensors");
    snprintf(args, sizeof args,
             "quantize --checkpoint %s --calib %s --samples 10 --batch_size "
             "4 --out %s",
             ck, cl_test_path("folder"), q);
    REQUIRE(cl_test_classic(args) == 0);
    printf("%s", cl_test_out);
    CHECK(strstr(cl_test_out, "calibrated on 10 images") != NULL);
    CHECK(strstr(cl_test_out, "19 conv/linear layers int8, 2 stay f32 "
                              "(conv1, fc)") != NULL);
    /* The root of splits gives its train split, never val. */
    CHECK(strstr(cl_test_out, "folder/train (train split)") != NULL);
    snprintf(args, sizeof args, "info --checkpoint %s", q);
    REQUIRE(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "precision        int8") != NULL);
    CHECK(strstr(cl_test_out, "quant.method     percentile:99.99") != NULL);
    CHECK(strstr(cl_test_out, "quant.samples    10") != NULL);
    CHECK(strstr(cl_test_out, ck) != NULL); /* quant.source */
    CHECK(strstr(cl_test_out, "int8: 19 conv/linear layers; f32: conv1, "
                              "fc") != NULL);
    /* Evaluation of the source and of the int8 file at f32 (its
     * dequantized weights): the same tiny validation split. */
    snprintf(args, sizeof args, "eval --checkpoint %s", ck);
    REQUIRE(cl_test_classic(args) == 0);
    top1_line(f32line, sizeof f32line);
    snprintf(args, sizeof args, "eval --checkpoint %s --precision f32", q);
    REQUIRE(cl_test_classic(args) == 0);
    top1_line(qline, sizeof qline);
    printf("f32: %s\nint8 file at f32: %s\n", f32line, qline);
    CHECK(qline[0] != '\0');
    /* At its own precision (int8) the file opens and runs; the oneDNN
     * backend's int8 primitives decide the numbers once they land. */
    snprintf(args, sizeof args, "eval --checkpoint %s", q);
    REQUIRE(cl_test_classic(args) == 0);
    top1_line(qdef, sizeof qdef);
    CHECK(strstr(cl_test_out, "int8") != NULL);
    printf("int8 file at int8: %s\n", qdef);
    snprintf(args, sizeof args, "predict --checkpoint %s --precision f32 %s", q,
             cl_test_path("folder/val/a/0.jpg"));
    REQUIRE(cl_test_classic(args) == 0);
    snprintf(args, sizeof args, "predict --checkpoint %s %s", q,
             cl_test_path("folder/val/a/0.jpg"));
    REQUIRE(cl_test_classic(args) == 0);
    /* embed records the precision it ran at; retrieve embeds its query
     * the same way from the same file. */
    snprintf(args, sizeof args, "embed --checkpoint %s --out %s", q,
             cl_test_path("gallery.safetensors"));
    REQUIRE(cl_test_classic(args) == 0);
    snprintf(args, sizeof args,
             "retrieve --gallery %s --checkpoint %s --top 2 %s",
             cl_test_path("gallery.safetensors"), q,
             cl_test_path("folder/val/a/0.jpg"));
    REQUIRE(cl_test_classic(args) == 0);
    /* The C API: int8 by default, f32 when asked. */
    cl_classifier *c = NULL;
    REQUIRE_OK(cl_classifier_open(&c, q, NULL));
    CHECK(strcmp(cl_classifier_precision(c), "int8") == 0);
    cl_classifier_free(c);
    cl_classifier_opts o = {.size = sizeof o, .precision = "f32"};
    REQUIRE_OK(cl_classifier_open(&c, q, &o));
    CHECK(strcmp(cl_classifier_precision(c), "f32") == 0);
    cl_classifier_free(c);
}

/* Whether folder dir holds any entry whose name starts with prefix (the
 * output or its temp file). */
static int left_behind(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int found = 0;
    while (d && (e = readdir(d)) != NULL)
        found |= strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (d)
        closedir(d);
    return found;
}

/* `classic quantize` with args fails, says words and leaves no out.* */
static void refused(const char *args, const char *words)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s --out %s", args, cl_test_path("out.st"));
    CHECK(cl_test_classic(cmd) != 0);
    if (!strstr(cl_test_out, words))
        CHECK(!"the message lacks the words");
    printf("%s -> %s", words, cl_test_out);
    CHECK(!left_behind(cl_test_tmpdir(), "out.st"));
}

/* --weight_bits 7: every I8 weight within [-63, 63] (what CPUs without
 * VNNI sum without saturating), said in the metadata; other widths
 * refused. */
CL_TEST(cli_seven_bit_weights)
{
    const char *ck = tiny_checkpoint();
    REQUIRE(ck != NULL);
    char args[4096];
    const char *q = cl_test_path("q7.safetensors");
    snprintf(args, sizeof args,
             "quantize --checkpoint %s --calib %s --samples 8 --batch_size 4 "
             "--weight_bits 7 --out %s",
             ck, cl_test_path("folder"), q);
    REQUIRE(cl_test_classic(args) == 0);
    cl_st_file *f = NULL;
    REQUIRE_OK(cl_st_open(&f, q));
    const char *wm = cl_st_metadata(f, CL_QUANT_META_WEIGHTS);
    CHECK(wm && strstr(wm, "at 7 bits") != NULL);
    int i8 = 0, widest = 0;
    for (size_t i = 0; i < cl_st_count(f); i++) {
        cl_st_dtype dt;
        cl_st_info(f, i, &dt, NULL);
        if (dt != CL_ST_I8)
            continue;
        size_t nb = 0;
        const signed char *v = (const signed char *)cl_st_data(f, i, &nb);
        for (size_t k = 0; k < nb; k++)
            widest = abs(v[k]) > widest ? abs(v[k]) : widest;
        i8++;
    }
    cl_st_close(f);
    printf("%d I8 weights, widest |q| %d\n", i8, widest);
    CHECK(i8 == 19 && widest == 63);
    snprintf(args, sizeof args, "eval --checkpoint %s", q);
    CHECK(cl_test_classic(args) == 0);
    /* An int8 file is no start for training: its BNs are folded away. */
    snprintf(args, sizeof args,
             "train --dataset imagefolder --data_dir %s --model resnet18 "
             "--image_size 32 --batch_size 4 --epoch_size 1 --val_split val "
             "--num_parallel_workers 0 --pretrained %s --ckpt_save_dir %s "
             "--log_level error",
             cl_test_path("folder"), q, cl_test_path("from-int8"));
    CHECK(cl_test_classic(args) != 0);
    CHECK(strstr(cl_test_out, "is an int8 model for inference") != NULL &&
          strstr(cl_test_out, ck) != NULL);
    snprintf(args, sizeof args,
             "quantize --checkpoint %s --calib %s --weight_bits 6 --out %s", ck,
             cl_test_path("folder"), cl_test_path("q6.safetensors"));
    CHECK(cl_test_classic(args) == 2);
    CHECK(strstr(cl_test_out, "--weight_bits") != NULL);
    CHECK(access(cl_test_path("q6.safetensors"), F_OK) != 0);
}

CL_TEST(cli_bad_calibration_input)
{
    const char *ck = tiny_checkpoint();
    REQUIRE(ck != NULL);
    char args[4096], p[2048];
    /* An empty folder. */
    mkdir(cl_test_path("empty"), 0755);
    snprintf(args, sizeof args, "quantize --checkpoint %s --calib %s", ck,
             cl_test_path("empty"));
    refused(args, "the folder is empty");
    /* Gray images for an RGB model: refused, not converted. */
    mkdir(cl_test_path("gray"), 0755);
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%d.jpg", cl_test_path("gray"), i);
        REQUIRE(fx_jpeg(p, 20, 24, 1, 90) == 0);
    }
    snprintf(args, sizeof args, "quantize --checkpoint %s --calib %s", ck,
             cl_test_path("gray"));
    refused(args, "has 1 channel(s) and the model takes 3");
    /* A file that is no image among images. */
    mkdir(cl_test_path("mixed"), 0755);
    snprintf(p, sizeof p, "%s/0.jpg", cl_test_path("mixed"));
    REQUIRE(fx_jpeg(p, 20, 24, 3, 90) == 0);
    snprintf(p, sizeof p, "%s/1.txt", cl_test_path("mixed"));
    REQUIRE(fx_write(p, "not an image\n", 13, 0) == 0);
    snprintf(args, sizeof args, "quantize --checkpoint %s --calib %s", ck,
             cl_test_path("mixed"));
    refused(args, "1.txt");
    /* Weights without classic's metadata: no eval pipeline. */
    cl_graph g;
    int side = 0;
    REQUIRE_OK(arch_graph(&g, "resnet18", "cifar", &side));
    REQUIRE_OK(
        cl_ckpt_save_model(cl_test_path("plain.safetensors"), &g, NULL, 0));
    cl_graph_free(&g);
    snprintf(args, sizeof args, "quantize --checkpoint %s --calib %s",
             cl_test_path("plain.safetensors"), cl_test_path("folder"));
    refused(args, "no eval pipeline");
    /* Options. */
    snprintf(args, sizeof args,
             "quantize --checkpoint %s --calib %s --samples 0", ck,
             cl_test_path("folder"));
    refused(args, "--samples '0'");
    snprintf(args, sizeof args,
             "quantize --checkpoint %s --calib %s --method kl", ck,
             cl_test_path("folder"));
    refused(args, "--method 'kl' is not one of minmax, percentile, entropy");
    /* --out the checkpoint: refused, and the checkpoint is as it was. */
    size_t before = 0, after = 0;
    char *orig = cl_test_read_file(ck, &before);
    snprintf(args, sizeof args, "quantize --checkpoint %s --calib %s --out %s",
             ck, cl_test_path("folder"), ck);
    CHECK(cl_test_classic(args) != 0);
    CHECK(strstr(cl_test_out, "is the checkpoint itself") != NULL);
    char *now = cl_test_read_file(ck, &after);
    CHECK(orig && now && before == after && memcmp(orig, now, before) == 0);
    free(orig);
    free(now);
    /* A quantized file is not quantized twice. */
    snprintf(args, sizeof args,
             "quantize --checkpoint %s --calib %s --samples 4 --out %s", ck,
             cl_test_path("folder"), cl_test_path("q.safetensors"));
    REQUIRE(cl_test_classic(args) == 0);
    snprintf(args, sizeof args, "quantize --checkpoint %s --calib %s",
             cl_test_path("q.safetensors"), cl_test_path("folder"));
    refused(args, "quantized already");
}
