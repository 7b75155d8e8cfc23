/* Models: ResNet parameter counts and state_dict names against torchvision's
 * figures, output shapes, config errors, initialisation statistics.
 * ctest-labels: unit */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "graph/graph.h"
#include "harness.h"
#include "io/config.h"
#include "models/arch.h"
#include "models/resnet.h"

static cl_resnet_config cfg_make(int depth, int classes, cl_resnet_stem stem)
{
    cl_resnet_config c = cl_resnet_config_default();
    c.depth = depth;
    c.num_classes = classes;
    c.stem = stem;
    return c;
}

static cl_status build(cl_graph *g, int depth, int classes, cl_resnet_stem stem,
                       int batch, int hw)
{
    cl_resnet_config c = cfg_make(depth, classes, stem);
    cl_status s = cl_graph_init(g, batch);
    if (s != CL_OK)
        return s;
    return cl_resnet_build(g, &c, hw, hw, 0, 0.0f);
}

/* Shape of tensor t equals the listed dims. */
static int shape_is(const cl_graph *g, int t, int ndim, int64_t d0, int64_t d1,
                    int64_t d2, int64_t d3)
{
    if (t < 0)
        return 0;
    const cl_shape *s = &g->tensors[t].shape;
    int64_t d[4] = {d0, d1, d2, d3};
    if (s->ndim != ndim)
        return 0;
    for (int i = 0; i < ndim; i++)
        if (s->d[i] != d[i])
            return 0;
    return 1;
}

/* The output tensor of the node called name, or -1. */
static int node_out(const cl_graph *g, const char *name)
{
    for (int i = 0; i < g->n_nodes; i++)
        if (strcmp(g->nodes[i].name, name) == 0)
            return g->nodes[i].out;
    return -1;
}

/* Name of the last block's output: "layer4.<blocks - 1>.relu". */
static const char *last_block(int depth)
{
    return depth == 18 ? "layer4.1.relu" : "layer4.2.relu";
}

/* Counts of torchvision's models, and the shapes at 224 on the way. */
CL_TEST(param_counts_and_shapes_at_224)
{
    static const struct {
        int depth, classes;
        int64_t params;
    } cases[] = {
        {18, 1000, 11689512}, {34, 1000, 21797672},  {50, 1000, 25557032},
        {50, 10, 23528522},   {101, 1000, 44549160}, {152, 1000, 60192808},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int d = cases[i].depth, k = cases[i].classes;
        int e = cl_resnet_expansion(d);
        cl_graph g;
        cl_status s = build(&g, d, k, CL_STEM_IMAGENET, 2, 224);
        CHECK(s == CL_OK);
        if (s == CL_OK && g.n_param_elems != cases[i].params)
            cl_test_fail(__FILE__, __LINE__,
                         "resnet%d/%d: %lld parameters, torchvision has %lld",
                         d, k, (long long)g.n_param_elems,
                         (long long)cases[i].params);
        if (s == CL_OK) {
            CHECK(shape_is(&g, g.input, 4, 2, 3, 224, 224));
            CHECK(shape_is(&g, node_out(&g, "conv1"), 4, 2, 64, 112, 112));
            CHECK(shape_is(&g, node_out(&g, "maxpool"), 4, 2, 64, 56, 56));
            CHECK(shape_is(&g, node_out(&g, "layer1.0.relu"), 4, 2, 64 * e, 56,
                           56));
            CHECK(shape_is(&g, node_out(&g, "layer3.0.relu"), 4, 2, 256 * e, 14,
                           14));
            CHECK(
                shape_is(&g, node_out(&g, last_block(d)), 4, 2, 512 * e, 7, 7));
            CHECK(shape_is(&g, g.features, 2, 2, 512 * e, 0, 0));
            CHECK(shape_is(&g, g.logits, 2, 2, k, 0, 0));
            CHECK(shape_is(&g, g.loss, 1, 1, 0, 0, 0));
            CHECK(shape_is(&g, g.labels, 1, 2, 0, 0, 0));
            CHECK(g.targets < 0 && g.num_classes == k);
        }
        cl_graph_free(&g);
    }
}

CL_TEST(resnet50_state_dict_names)
{
    cl_graph g;
    REQUIRE_OK(build(&g, 50, 1000, CL_STEM_IMAGENET, 2, 224));
    int n_state = 0, n_params = 0, n_buffers = 0;
    for (int i = 0; i < g.n_tensors; i++) {
        cl_gtensor_kind k = g.tensors[i].kind;
        n_state += k == CL_GT_PARAM || k == CL_GT_BUFFER;
        n_params += k == CL_GT_PARAM;
        n_buffers += k == CL_GT_BUFFER;
    }
    /* torchvision resnet50: 161 params; 53 BN x 3 buffers. */
    CHECK(n_state == 320);
    CHECK(n_params == 161);
    CHECK(n_buffers == 159);
    int t = cl_graph_find(&g, "conv1.weight");
    CHECK(shape_is(&g, t, 4, 64, 3, 7, 7));
    CHECK(t >= 0 && g.tensors[t].param_flags == CL_PARAM_WEIGHT);
    t = cl_graph_find(&g, "bn1.weight");
    CHECK(shape_is(&g, t, 1, 64, 0, 0, 0));
    CHECK(t >= 0 && g.tensors[t].param_flags == CL_PARAM_BN);
    CHECK(cl_graph_find(&g, "bn1.bias") >= 0);
    t = cl_graph_find(&g, "bn1.running_mean");
    CHECK(t >= 0 && g.tensors[t].kind == CL_GT_BUFFER);
    CHECK(cl_graph_find(&g, "bn1.running_var") >= 0);
    t = cl_graph_find(&g, "bn1.num_batches_tracked");
    CHECK(t >= 0 && g.tensors[t].kind == CL_GT_BUFFER);
    CHECK(shape_is(&g, cl_graph_find(&g, "layer1.0.conv1.weight"), 4, 64, 64, 1,
                   1));
    CHECK(shape_is(&g, cl_graph_find(&g, "layer1.0.conv2.weight"), 4, 64, 64, 3,
                   3));
    CHECK(shape_is(&g, cl_graph_find(&g, "layer1.0.conv3.weight"), 4, 256, 64,
                   1, 1));
    CHECK(shape_is(&g, cl_graph_find(&g, "layer1.0.downsample.0.weight"), 4,
                   256, 64, 1, 1));
    CHECK(cl_graph_find(&g, "layer1.0.downsample.1.running_var") >= 0);
    CHECK(cl_graph_find(&g, "layer1.1.downsample.0.weight") < 0);
    CHECK(shape_is(&g, cl_graph_find(&g, "layer2.0.downsample.0.weight"), 4,
                   512, 256, 1, 1));
    /* v1.5: the stride sits on the 3x3 conv. */
    int c2 = node_out(&g, "layer2.0.conv2"),
        c1 = node_out(&g, "layer2.0.conv1");
    CHECK(shape_is(&g, c1, 4, 2, 128, 56, 56));
    CHECK(shape_is(&g, c2, 4, 2, 128, 28, 28));
    CHECK(cl_graph_find(&g, "layer3.5.bn3.weight") >= 0);
    CHECK(cl_graph_find(&g, "layer3.6.bn3.weight") < 0);
    CHECK(cl_graph_find(&g, "layer4.2.bn3.num_batches_tracked") >= 0);
    t = cl_graph_find(&g, "fc.weight");
    CHECK(shape_is(&g, t, 2, 1000, 2048, 0, 0));
    CHECK(t >= 0 &&
          g.tensors[t].param_flags == (CL_PARAM_WEIGHT | CL_PARAM_HEAD));
    t = cl_graph_find(&g, "fc.bias");
    CHECK(shape_is(&g, t, 1, 1000, 0, 0, 0));
    CHECK(t >= 0 &&
          g.tensors[t].param_flags == (CL_PARAM_BIAS | CL_PARAM_HEAD));
    CHECK(cl_graph_find(&g, "fc.running_mean") < 0);
    /* State-dict order: a block's shortcut after its main path. */
    CHECK(cl_graph_find(&g, "layer1.0.bn3.num_batches_tracked") <
          cl_graph_find(&g, "layer1.0.downsample.0.weight"));
    /* Every arena view is 64-byte aligned and inside its arena. */
    for (int i = 0; i < g.n_tensors; i++) {
        const cl_gtensor *gt = &g.tensors[i];
        if (gt->kind != CL_GT_PARAM && gt->kind != CL_GT_BUFFER)
            continue;
        const float *p = gt->kind == CL_GT_PARAM ? cl_graph_param(&g, i)
                                                 : cl_graph_buffer(&g, i);
        size_t lim =
            gt->kind == CL_GT_PARAM ? g.n_param_floats : g.n_buffer_floats;
        CHECK((uintptr_t)p % 64 == 0);
        CHECK(gt->offset + (size_t)cl_shape_numel(&gt->shape) <= lim);
    }
    /* Running variance starts at 1, the mean at 0. */
    CHECK(cl_graph_buffer(
              &g, cl_graph_find(&g, "layer2.1.bn2.running_var"))[5] == 1.0f);
    CHECK(cl_graph_buffer(
              &g, cl_graph_find(&g, "layer2.1.bn2.running_mean"))[5] == 0.0f);
    cl_graph_free(&g);
}

CL_TEST(resnet18_names_and_blocks)
{
    cl_graph g;
    REQUIRE_OK(build(&g, 18, 10, CL_STEM_CIFAR, 1, 32));
    CHECK(shape_is(&g, cl_graph_find(&g, "conv1.weight"), 4, 64, 3, 3, 3));
    CHECK(cl_graph_find(&g, "layer1.0.downsample.0.weight") < 0);
    CHECK(shape_is(&g, cl_graph_find(&g, "layer2.0.downsample.0.weight"), 4,
                   128, 64, 1, 1));
    CHECK(cl_graph_find(&g, "layer1.0.conv3.weight") < 0);
    CHECK(cl_graph_find(&g, "layer4.1.bn2.weight") >= 0);
    CHECK(node_out(&g, "maxpool") < 0);
    /* torchvision's resnet18 with 10 classes has 11,181,642; the 3x3 stem
     * has 64 * 3 * (49 - 9) fewer weights: the usual CIFAR ResNet-18
     * figure, 11,173,962. */
    CHECK(g.n_param_elems == 11173962);
    CHECK(11181642 - 64 * 3 * 40 == 11173962);
    cl_graph_free(&g);
}

CL_TEST(output_shapes_cifar_stem_at_32)
{
    static const int depths[] = {18, 34, 50, 101, 152};
    for (int i = 0; i < 5; i++) {
        int d = depths[i], e = cl_resnet_expansion(d);
        cl_graph g;
        cl_status s = build(&g, d, 10, CL_STEM_CIFAR, 3, 32);
        CHECK(s == CL_OK);
        if (s == CL_OK) {
            CHECK(shape_is(&g, node_out(&g, "relu"), 4, 3, 64, 32, 32));
            CHECK(node_out(&g, "maxpool") < 0);
            CHECK(shape_is(&g, node_out(&g, "layer2.0.relu"), 4, 3, 128 * e, 16,
                           16));
            CHECK(
                shape_is(&g, node_out(&g, last_block(d)), 4, 3, 512 * e, 4, 4));
            CHECK(shape_is(&g, g.features, 2, 3, 512 * e, 0, 0));
            CHECK(shape_is(&g, g.logits, 2, 3, 10, 0, 0));
        }
        cl_graph_free(&g);
    }
    /* Soft targets and a single input channel. */
    cl_resnet_config c = cfg_make(18, 7, CL_STEM_CIFAR);
    c.in_channels = 1;
    cl_graph g;
    REQUIRE_OK(cl_graph_init(&g, 4));
    REQUIRE_OK(cl_resnet_build(&g, &c, 28, 20, 1, 0.1f));
    CHECK(shape_is(&g, g.input, 4, 4, 1, 28, 20));
    CHECK(shape_is(&g, g.targets, 2, 4, 7, 0, 0));
    CHECK(g.labels < 0);
    CHECK(shape_is(&g, cl_graph_find(&g, "conv1.weight"), 4, 64, 1, 3, 3));
    CHECK(shape_is(&g, g.features, 2, 4, 512, 0, 0));
    CHECK(g.nodes[g.n_nodes - 1].attr.softmax_ce.label_smoothing == 0.1f);
    cl_graph_free(&g);
}

/* torchvision's resnet50 with conv1 = Conv2d(1, 64, 3, 1, 1) and the
 * maxpool kept: 28 -> 28 (stem conv) -> 14 (maxpool) -> 14/7/4/2. */
CL_TEST(output_shapes_cifar_pool_stem_at_28)
{
    cl_resnet_config c = cfg_make(50, 10, CL_STEM_CIFAR_POOL);
    c.in_channels = 1;
    cl_graph g;
    REQUIRE_OK(cl_graph_init(&g, 2));
    REQUIRE_OK(cl_resnet_build(&g, &c, 28, 28, 0, 0.0f));
    CHECK(shape_is(&g, node_out(&g, "relu"), 4, 2, 64, 28, 28));
    CHECK(shape_is(&g, node_out(&g, "maxpool"), 4, 2, 64, 14, 14));
    CHECK(shape_is(&g, node_out(&g, "layer1.2.relu"), 4, 2, 256, 14, 14));
    CHECK(shape_is(&g, node_out(&g, "layer4.2.relu"), 4, 2, 2048, 2, 2));
    CHECK(shape_is(&g, cl_graph_find(&g, "conv1.weight"), 4, 64, 1, 3, 3));
    cl_graph_free(&g);
    REQUIRE_OK(cl_graph_init(&g, 2));
    CHECK_ERR(cl_resnet_build(&g, &c, 12, 12, 0, 0.0f), CL_ERR_SHAPE,
              "too small for the cifar_pool stem");
    cl_graph_free(&g);
}

/* models/archs.def is the one list of archs: every line parses, names
 * itself back, checks, is the recipe's model value of the same index and
 * is in the list errors print. */
CL_TEST(every_listed_arch_parses_and_names_itself)
{
    REQUIRE(cl_arch_count() == 7);
    for (int i = 0; i < cl_arch_count(); i++) {
        cl_arch_family family;
        const char *name = cl_arch_name_at(i, &family);
        REQUIRE(name != NULL);
        cl_arch a;
        char buf[32];
        CHECK_OK(cl_arch_parse(name, NULL, &a));
        CHECK(a.family == family);
        CHECK(strcmp(cl_arch_name(&a, buf, sizeof buf), name) == 0);
        CHECK_OK(cl_arch_check(&a));
        CHECK(strcmp(cl_config_enum_name("model", i), name) == 0);
        CHECK(strstr(cl_arch_names(), name) != NULL);
    }
    CHECK(cl_arch_name_at(cl_arch_count(), NULL) == NULL);
    CHECK(cl_config_enum_name("model", cl_arch_count()) == NULL);
    CHECK(strcmp(cl_arch_names(), "resnet18, resnet34, resnet50, resnet101, "
                                  "resnet152, swin_t, swin_micro") == 0);
    cl_arch a;
    CHECK_ERR(cl_arch_parse("resnet51", NULL, &a), CL_ERR_ARG,
              "'resnet51' is not one of resnet18, resnet34, resnet50, "
              "resnet101, resnet152, swin_t, swin_micro");
    CHECK_ERR(cl_arch_parse(NULL, NULL, &a), CL_ERR_ARG, "'(null)'");
}

CL_TEST(config_errors)
{
    int depth = 0;
    CHECK_OK(cl_resnet_arch_parse("resnet101", &depth));
    CHECK(depth == 101);
    CHECK_ERR(cl_resnet_arch_parse("resnet51", &depth), CL_ERR_ARG,
              "'resnet51' is not one of resnet18, resnet34, resnet50, "
              "resnet101, resnet152");
    CHECK_ERR(cl_resnet_arch_parse("", &depth), CL_ERR_ARG, "not one of");
    CHECK_ERR(cl_resnet_arch_parse(NULL, &depth), CL_ERR_ARG, "not one of");
    cl_resnet_stem stem;
    CHECK_OK(cl_resnet_stem_parse("cifar", &stem));
    CHECK(stem == CL_STEM_CIFAR);
    CHECK_OK(cl_resnet_stem_parse("cifar_pool", &stem));
    CHECK(stem == CL_STEM_CIFAR_POOL);
    CHECK(strcmp(cl_resnet_stem_name(stem), "cifar_pool") == 0);
    CHECK_ERR(cl_resnet_stem_parse("mnist", &stem), CL_ERR_ARG,
              "imagenet, cifar, cifar_pool");

    cl_graph g;
    cl_resnet_config c = cfg_make(50, 0, CL_STEM_IMAGENET);
    REQUIRE_OK(cl_graph_init(&g, 2));
    CHECK_ERR(cl_resnet_build(&g, &c, 224, 224, 0, 0.0f), CL_ERR_ARG,
              "num_classes is 0");
    c.num_classes = -3;
    CHECK_ERR(cl_resnet_build(&g, &c, 224, 224, 0, 0.0f), CL_ERR_ARG,
              "num_classes is -3");
    c.num_classes = 10;
    c.depth = 42;
    CHECK_ERR(cl_resnet_build(&g, &c, 224, 224, 0, 0.0f), CL_ERR_ARG,
              "depth 42");
    c.depth = 50;
    c.in_channels = 2;
    CHECK_ERR(cl_resnet_build(&g, &c, 224, 224, 0, 0.0f), CL_ERR_ARG,
              "in_channels is 2");
    c.in_channels = 3;
    CHECK_ERR(cl_resnet_build(&g, &c, 31, 224, 0, 0.0f), CL_ERR_SHAPE,
              "input 31x224 is too small for the imagenet stem");
    CHECK_ERR(cl_resnet_build(&g, &c, 224, 0, 0, 0.0f), CL_ERR_SHAPE,
              "too small");
    CHECK_ERR(cl_resnet_build(&g, &c, 224, 224, 0, 1.5f), CL_ERR_ARG,
              "label_smoothing");
    CHECK_ERR(cl_resnet_build(&g, &c, 224, 224, 0, NAN), CL_ERR_ARG,
              "label_smoothing");
    c.stem = CL_STEM_CIFAR;
    CHECK_ERR(cl_resnet_build(&g, &c, 7, 7, 0, 0.0f), CL_ERR_SHAPE,
              "at least 8x8");
    /* An absurd input is refused by the shape rules, not allocated. */
    CHECK(cl_resnet_build(&g, &c, 1 << 20, 1 << 20, 0, 0.0f) == CL_ERR_SHAPE);
    CHECK(strstr(cl_last_error(), "resnet50: ") != NULL);
    CHECK(strstr(cl_last_error(), "conv1: conv2d") != NULL);
    /* Nothing above left the graph usable; a fresh one builds. */
    cl_graph_free(&g);
    REQUIRE_OK(cl_graph_init(&g, 2));
    CHECK_OK(cl_resnet_build(&g, &c, 8, 8, 0, 0.0f));
    CHECK_ERR(cl_resnet_build(&g, &c, 8, 8, 0, 0.0f), CL_ERR_ARG, "not empty");
    cl_graph_free(&g);
    CHECK_ERR(cl_graph_init(&g, 0), CL_ERR_ARG, "batch size is 0");
}

CL_TEST(init_statistics)
{
    cl_graph g;
    cl_resnet_config c = cfg_make(18, 10, CL_STEM_IMAGENET);
    REQUIRE_OK(cl_graph_init(&g, 1));
    REQUIRE_OK(cl_resnet_build(&g, &c, 224, 224, 0, 0.0f));
    REQUIRE_OK(cl_resnet_init(&g, &c, 1234));
    static const struct {
        const char *name;
        int fan_out;
    } convs[] = {{"conv1.weight", 64 * 49},
                 {"layer1.0.conv1.weight", 64 * 9},
                 {"layer3.0.conv2.weight", 256 * 9},
                 {"layer4.1.conv2.weight", 512 * 9},
                 {"layer2.0.downsample.0.weight", 128}};
    for (int i = 0; i < 5; i++) {
        int t = cl_graph_find(&g, convs[i].name);
        REQUIRE(t >= 0);
        const float *p = cl_graph_param(&g, t);
        int64_t n = cl_graph_numel(&g, t);
        double s = 0, ss = 0;
        for (int64_t k = 0; k < n; k++) {
            s += p[k];
            ss += (double)p[k] * p[k];
        }
        double mean = s / n, sd = sqrt(ss / n - mean * mean);
        double want = sqrt(2.0 / convs[i].fan_out);
        if (fabs(sd / want - 1.0) > 0.04 || fabs(mean) > 0.05 * want)
            cl_test_fail(__FILE__, __LINE__,
                         "%s: mean %g std %g, expected 0 and %g", convs[i].name,
                         mean, sd, want);
    }
    /* fc: uniform in +-1/sqrt(512), filling the range. */
    int t = cl_graph_find(&g, "fc.weight");
    const float *w = cl_graph_param(&g, t);
    double bound = 1.0 / sqrt(512.0), lo = 1, hi = -1, s2 = 0;
    for (int64_t k = 0; k < cl_graph_numel(&g, t); k++) {
        lo = w[k] < lo ? w[k] : lo;
        hi = w[k] > hi ? w[k] : hi;
        s2 += (double)w[k] * w[k];
    }
    CHECK(lo >= -bound && hi <= bound);
    CHECK(lo < -0.99 * bound && hi > 0.99 * bound);
    CHECK_NEAR(sqrt(s2 / cl_graph_numel(&g, t)), bound / sqrt(3.0),
               0.03 * bound);
    const float *fb = cl_graph_param(&g, cl_graph_find(&g, "fc.bias"));
    int nonzero = 0;
    for (int k = 0; k < 10; k++) {
        CHECK(fabsf(fb[k]) <= bound);
        nonzero += fb[k] != 0.0f;
    }
    CHECK(nonzero == 10);
    /* BN: gamma 1, beta 0 everywhere without zero_init_residual. */
    int bad = 0;
    for (int i = 0; i < g.n_nodes; i++) {
        const cl_node *n = &g.nodes[i];
        if (n->op != CL_OP_BATCHNORM2D)
            continue;
        const float *gm = cl_graph_param(&g, n->param[0]);
        const float *bt = cl_graph_param(&g, n->param[1]);
        for (int k = 0; k < n->attr.batchnorm2d.channels; k++)
            bad += gm[k] != 1.0f || bt[k] != 0.0f;
    }
    CHECK(bad == 0);
    /* The same seed gives the same params; another seed others. */
    cl_graph h;
    REQUIRE_OK(cl_graph_init(&h, 1));
    REQUIRE_OK(cl_resnet_build(&h, &c, 224, 224, 0, 0.0f));
    REQUIRE_OK(cl_resnet_init(&h, &c, 1234));
    CHECK(memcmp(g.params, h.params, g.n_param_floats * sizeof(float)) == 0);
    REQUIRE_OK(cl_resnet_init(&h, &c, 1235));
    CHECK(memcmp(g.params, h.params, g.n_param_floats * sizeof(float)) != 0);
    /* Tensors draw from distinct streams. */
    const float *a =
        cl_graph_param(&g, cl_graph_find(&g, "layer1.0.conv2.weight"));
    const float *b =
        cl_graph_param(&g, cl_graph_find(&g, "layer1.1.conv2.weight"));
    CHECK(memcmp(a, b, 64 * sizeof(float)) != 0);
    cl_graph_free(&h);
    cl_graph_free(&g);
}

CL_TEST(zero_init_residual)
{
    static const int depths[] = {18, 50};
    for (int i = 0; i < 2; i++) {
        cl_graph g;
        cl_resnet_config c = cfg_make(depths[i], 10, CL_STEM_CIFAR);
        c.zero_init_residual = 1;
        REQUIRE_OK(cl_graph_init(&g, 1));
        REQUIRE_OK(cl_resnet_build(&g, &c, 32, 32, 0, 0.0f));
        REQUIRE_OK(cl_resnet_init(&g, &c, 7));
        const char *last = depths[i] == 50 ? "bn3" : "bn2";
        int zeros = 0, ones = 0, n_last = 0;
        for (int k = 0; k < g.n_nodes; k++) {
            const cl_node *n = &g.nodes[k];
            if (n->op != CL_OP_BATCHNORM2D)
                continue;
            const char *dot = strrchr(n->name, '.');
            int is_last = strncmp(n->name, "layer", 5) == 0 && dot &&
                          strcmp(dot + 1, last) == 0;
            n_last += is_last;
            const float *gm = cl_graph_param(&g, n->param[0]);
            for (int j = 0; j < n->attr.batchnorm2d.channels; j++) {
                zeros += is_last && gm[j] == 0.0f;
                ones += !is_last && gm[j] == 1.0f;
            }
        }
        /* 8 BasicBlocks of resnet18, 16 Bottlenecks of resnet50. */
        CHECK(n_last == (depths[i] == 50 ? 16 : 8));
        int64_t want_zero = 0, want_one = 0;
        for (int k = 0; k < g.n_nodes; k++) {
            const cl_node *n = &g.nodes[k];
            if (n->op != CL_OP_BATCHNORM2D)
                continue;
            const char *dot = strrchr(n->name, '.');
            int is_last = strncmp(n->name, "layer", 5) == 0 && dot &&
                          strcmp(dot + 1, last) == 0;
            *(is_last ? &want_zero : &want_one) += n->attr.batchnorm2d.channels;
        }
        CHECK(zeros == want_zero);
        CHECK(ones == want_one);
        /* The downsample BN is not the last of its block's main path. */
        const float *ds = cl_graph_param(
            &g, cl_graph_find(&g, "layer2.0.downsample.1.weight"));
        CHECK(ds[0] == 1.0f);
        cl_graph_free(&g);
    }
}

CL_TEST(macs_and_layer_table)
{
    cl_graph g;
    REQUIRE_OK(build(&g, 50, 1000, CL_STEM_IMAGENET, 1, 224));
    /* torchvision resnet50 at 224: 4.09 G multiply-adds (conv + fc). */
    int64_t m = cl_graph_macs(&g);
    CHECK(m > 4080000000LL && m < 4100000000LL);
    const char *path = cl_test_path("layers.txt");
    FILE *f = fopen(path, "w+");
    REQUIRE(f != NULL);
    cl_graph_print_layers(&g, f);
    rewind(f);
    char line[256];
    int saw_fc = 0, saw_conv = 0, saw_total = 0;
    while (fgets(line, sizeof line, f)) {
        saw_fc += strncmp(line, "fc ", 3) == 0 && strstr(line, "2049000");
        saw_conv += strstr(line, "layer1.0.conv2 ") && strstr(line, "36864") &&
                    strstr(line, "(1, 64, 56, 56)");
        saw_total += strstr(line, "25557032 parameters") != NULL;
    }
    fclose(f);
    CHECK(saw_fc == 1);
    CHECK(saw_conv == 1);
    CHECK(saw_total == 1);
    cl_graph_free(&g);
    REQUIRE_OK(build(&g, 18, 1000, CL_STEM_IMAGENET, 1, 224));
    m = cl_graph_macs(&g);
    CHECK(m > 1800000000LL && m < 1830000000LL); /* 1.82 G */
    cl_graph_free(&g);
}
