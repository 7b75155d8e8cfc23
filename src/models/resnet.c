/* The ResNet family built as a static graph with torchvision's module
 * names, so the param and buffer names are those of its state_dict. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "models/resnet.h"

/* Blocks per stage for each depth models/archs.def gives a ResNet. */
typedef struct arch_def {
    int depth;
    int bottleneck;
    int blocks[4];
} arch_def;

static const arch_def ARCHS[] = {
    {18, 0, {2, 2, 2, 2}},   {34, 0, {3, 4, 6, 3}},   {50, 1, {3, 4, 6, 3}},
    {101, 1, {3, 4, 23, 3}}, {152, 1, {3, 8, 36, 3}},
};
#define N_ARCHS ((int)(sizeof ARCHS / sizeof ARCHS[0]))

/* The ResNet lines of models/archs.def (FAMILY picks the case): names and
 * depths, and the names ", "-separated for errors (each line adds
 * ", name"; the list starts past the first separator). */
#define RESNET_OF_RESNET(name, depth) {name, depth},
#define RESNET_OF_SWIN(name, variant)
#define LIST_OF_RESNET(name) ", " name
#define LIST_OF_SWIN(name)
static const struct {
    const char *name;
    int depth;
} NAMES[] = {
#define CL_ARCH(E, name, family, variant) RESNET_OF_##family(name, variant)
#include "models/archs.def"
#undef CL_ARCH
};
static const char NAME_LIST[] = ""
#define CL_ARCH(E, name, family, variant) LIST_OF_##family(name)
#include "models/archs.def"
#undef CL_ARCH
    ;
#define N_NAMES ((int)(sizeof NAMES / sizeof NAMES[0]))
#define MAX_CLASSES 1000000

static const arch_def *arch_find(int depth)
{
    for (int i = 0; i < N_ARCHS; i++)
        if (ARCHS[i].depth == depth)
            return &ARCHS[i];
    return NULL;
}

cl_resnet_config cl_resnet_config_default(void)
{
    cl_resnet_config c;
    memset(&c, 0, sizeof c);
    c.depth = 50;
    c.stem = CL_STEM_IMAGENET;
    c.in_channels = 3;
    c.num_classes = 1000;
    c.zero_init_residual = 0;
    return c;
}

cl_status cl_resnet_arch_parse(const char *name, int *depth)
{
    for (int i = 0; name && i < N_NAMES; i++)
        if (strcmp(name, NAMES[i].name) == 0) {
            *depth = NAMES[i].depth;
            return CL_OK;
        }
    return cl_error(CL_ERR_ARG, "arch '%s' is not one of %s",
                    name ? name : "(null)", NAME_LIST + 2);
}

const char *cl_resnet_arch_name(int depth)
{
    for (int i = 0; i < N_NAMES; i++)
        if (NAMES[i].depth == depth)
            return NAMES[i].name;
    return NULL;
}

cl_status cl_resnet_stem_parse(const char *name, cl_resnet_stem *stem)
{
    if (name && strcmp(name, "imagenet") == 0)
        *stem = CL_STEM_IMAGENET;
    else if (name && strcmp(name, "cifar") == 0)
        *stem = CL_STEM_CIFAR;
    else if (name && strcmp(name, "cifar_pool") == 0)
        *stem = CL_STEM_CIFAR_POOL;
    else
        return cl_error(CL_ERR_ARG,
                        "stem '%s' is not one of imagenet, cifar, cifar_pool",
                        name ? name : "(null)");
    return CL_OK;
}

const char *cl_resnet_stem_name(cl_resnet_stem stem)
{
    switch (stem) {
    case CL_STEM_CIFAR:
        return "cifar";
    case CL_STEM_CIFAR_POOL:
        return "cifar_pool";
    default:
        return "imagenet";
    }
}

int cl_resnet_expansion(int depth)
{
    const arch_def *a = arch_find(depth);
    return a && a->bottleneck ? 4 : 1;
}

cl_status cl_resnet_check_config(const cl_resnet_config *cfg)
{
    if (!arch_find(cfg->depth) || !cl_resnet_arch_name(cfg->depth))
        return cl_error(CL_ERR_ARG, "resnet: depth %d is none of %s",
                        cfg->depth, NAME_LIST + 2);
    if (cfg->stem != CL_STEM_IMAGENET && cfg->stem != CL_STEM_CIFAR &&
        cfg->stem != CL_STEM_CIFAR_POOL)
        return cl_error(CL_ERR_ARG,
                        "resnet: stem %d is not imagenet, cifar or cifar_pool",
                        (int)cfg->stem);
    if (cfg->in_channels != 1 && cfg->in_channels != 3)
        return cl_error(CL_ERR_ARG,
                        "resnet: in_channels is %d, expected 1 or 3",
                        cfg->in_channels);
    if (cfg->num_classes < 1 || cfg->num_classes > MAX_CLASSES)
        return cl_error(CL_ERR_ARG, "resnet: num_classes is %d, expected 1..%d",
                        cfg->num_classes, MAX_CLASSES);
    return CL_OK;
}

/* conv (no bias) then BN, named "<prefix>conv<i>" / "<prefix>bn<i>" or,
 * for the shortcut, "<prefix>downsample.0" / ".1" (conv_name/bn_name). */
static cl_status conv_bn(cl_graph *g, const char *conv_name,
                         const char *bn_name, int x, int in_ch, int out_ch,
                         int k, int stride, int pad, int *out)
{
    cl_conv2d_attr ca = cl_conv2d_attr_make(in_ch, out_ch, k, stride, pad);
    cl_batchnorm2d_attr ba = cl_batchnorm2d_attr_make(out_ch);
    int y;
    CL_TRY(cl_graph_conv2d(g, conv_name, x, &ca, &y));
    return cl_graph_batchnorm2d(g, bn_name, y, &ba, out);
}

/* "<pre><leaf>" into buf (NAME_CAP bytes; cut short if longer, which the
 * graph then rejects as a name longer than its limit). */
#define NAME_CAP 96
static const char *nm(char *buf, const char *pre, const char *leaf)
{
    size_t a = strlen(pre), b = strlen(leaf);
    if (a > NAME_CAP - 1)
        a = NAME_CAP - 1;
    if (b > NAME_CAP - 1 - a)
        b = NAME_CAP - 1 - a;
    memcpy(buf, pre, a);
    memcpy(buf + a, leaf, b);
    buf[a + b] = '\0';
    return buf;
}

/* One residual block "layer<s>.<b>." on x with inplanes channels. */
static cl_status block(cl_graph *g, const arch_def *ad, const char *pre, int x,
                       int inplanes, int planes, int stride, int *out)
{
    char a[NAME_CAP], b[NAME_CAP];
    int exp = ad->bottleneck ? 4 : 1, y;
    if (ad->bottleneck) {
        CL_TRY(conv_bn(g, nm(a, pre, "conv1"), nm(b, pre, "bn1"), x, inplanes,
                       planes, 1, 1, 0, &y));
        CL_TRY(cl_graph_relu(g, nm(a, pre, "relu1"), y, &y));
        CL_TRY(conv_bn(g, nm(a, pre, "conv2"), nm(b, pre, "bn2"), y, planes,
                       planes, 3, stride, 1, &y));
        CL_TRY(cl_graph_relu(g, nm(a, pre, "relu2"), y, &y));
        CL_TRY(conv_bn(g, nm(a, pre, "conv3"), nm(b, pre, "bn3"), y, planes,
                       planes * exp, 1, 1, 0, &y));
    } else {
        CL_TRY(conv_bn(g, nm(a, pre, "conv1"), nm(b, pre, "bn1"), x, inplanes,
                       planes, 3, stride, 1, &y));
        CL_TRY(cl_graph_relu(g, nm(a, pre, "relu1"), y, &y));
        CL_TRY(conv_bn(g, nm(a, pre, "conv2"), nm(b, pre, "bn2"), y, planes,
                       planes, 3, 1, 1, &y));
    }
    /* The shortcut after the main path: torchvision's module (and so
     * state_dict) order. */
    int sc = x;
    if (stride != 1 || inplanes != planes * exp)
        CL_TRY(conv_bn(g, nm(a, pre, "downsample.0"),
                       nm(b, pre, "downsample.1"), x, inplanes, planes * exp, 1,
                       stride, 0, &sc));
    CL_TRY(cl_graph_add(g, nm(a, pre, "add"), y, sc, &y));
    return cl_graph_relu(g, nm(a, pre, "relu"), y, out);
}

static cl_status build_body(cl_graph *g, const cl_resnet_config *cfg,
                            const arch_def *ad, int in_h, int in_w, int soft,
                            float label_smoothing)
{
    int x;
    CL_TRY(cl_graph_input(g, cfg->in_channels, in_h, in_w, &x));
    if (cfg->stem == CL_STEM_IMAGENET) {
        CL_TRY(
            conv_bn(g, "conv1", "bn1", x, cfg->in_channels, 64, 7, 2, 3, &x));
        CL_TRY(cl_graph_relu(g, "relu", x, &x));
        cl_maxpool2d_attr mp = {3, 3, 2, 2, 1, 1};
        CL_TRY(cl_graph_maxpool2d(g, "maxpool", x, &mp, &x));
    } else {
        CL_TRY(
            conv_bn(g, "conv1", "bn1", x, cfg->in_channels, 64, 3, 1, 1, &x));
        CL_TRY(cl_graph_relu(g, "relu", x, &x));
        if (cfg->stem == CL_STEM_CIFAR_POOL) {
            cl_maxpool2d_attr mp = {3, 3, 2, 2, 1, 1};
            CL_TRY(cl_graph_maxpool2d(g, "maxpool", x, &mp, &x));
        }
    }
    int exp = ad->bottleneck ? 4 : 1, inplanes = 64;
    for (int s = 0; s < 4; s++) {
        int planes = 64 << s;
        for (int b = 0; b < ad->blocks[s]; b++) {
            char pre[64];
            snprintf(pre, sizeof pre, "layer%d.%d.", s + 1, b);
            int stride = (b == 0 && s > 0) ? 2 : 1;
            CL_TRY(block(g, ad, pre, x, inplanes, planes, stride, &x));
            inplanes = planes * exp;
        }
    }
    CL_TRY(cl_graph_global_avgpool(g, "avgpool", x, &x));
    g->features = x;
    cl_linear_attr la = {inplanes, cfg->num_classes, 1};
    CL_TRY(cl_graph_linear(g, "fc", x, &la, &x));
    cl_softmax_ce_attr sa = {cfg->num_classes, label_smoothing};
    CL_TRY(cl_graph_softmax_ce(g, x, &sa, soft));
    return cl_graph_finalize(g);
}

cl_status cl_resnet_build(cl_graph *g, const cl_resnet_config *cfg, int in_h,
                          int in_w, int soft_targets, float label_smoothing)
{
    CL_TRY(cl_resnet_check_config(cfg));
    if (g->n_nodes != 0 || g->finalized)
        return cl_error(CL_ERR_ARG, "resnet: the graph is not empty");
    const arch_def *ad = arch_find(cfg->depth);
    const char *name = cl_resnet_arch_name(cfg->depth);
    /* Smaller inputs would shrink to nothing (or to a lone value whose
     * batch variance is undefined) before the last stage. */
    int min = cfg->stem == CL_STEM_IMAGENET     ? 32
              : cfg->stem == CL_STEM_CIFAR_POOL ? 16
                                                : 8;
    if (in_h < min || in_w < min)
        return cl_error(CL_ERR_SHAPE,
                        "%s: input %dx%d is too small for the %s stem "
                        "(at least %dx%d: the network downsamples by %d)",
                        name, in_h, in_w, cl_resnet_stem_name(cfg->stem), min,
                        min, min);
    if (!(label_smoothing >= 0.0f && label_smoothing < 1.0f))
        return cl_error(CL_ERR_ARG,
                        "%s: label_smoothing is %g, expected 0 <= s < 1", name,
                        (double)label_smoothing);
    cl_status s =
        build_body(g, cfg, ad, in_h, in_w, soft_targets, label_smoothing);
    if (s != CL_OK)
        return cl_error_wrap(s, "%s: ", name);
    return CL_OK;
}
