/* One description over the network families: parse, name, build, init. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "models/arch.h"

cl_status cl_arch_parse(const char *name, const char *stem, cl_arch *a)
{
    memset(a, 0, sizeof *a);
    if (name && cl_swin_is_arch(name)) {
        a->family = CL_ARCH_SWIN;
        return cl_swin_arch_parse(name, &a->swin);
    }
    int depth = 0;
    a->family = CL_ARCH_RESNET;
    a->resnet = cl_resnet_config_default();
    if (cl_resnet_arch_parse(name, &depth) != CL_OK)
        return cl_error(CL_ERR_ARG,
                        "arch '%s' is not one of resnet18, resnet34, "
                        "resnet50, resnet101, resnet152, swin_t, swin_micro",
                        name ? name : "(null)");
    a->resnet.depth = depth;
    if (stem)
        CL_TRY(cl_resnet_stem_parse(stem, &a->resnet.stem));
    return CL_OK;
}

const char *cl_arch_name(const cl_arch *a, char *buf, size_t cap)
{
    if (a->family == CL_ARCH_SWIN)
        snprintf(buf, cap, "%s", a->swin.name);
    else
        snprintf(buf, cap, "resnet%d", a->resnet.depth);
    return buf;
}

const char *cl_arch_stem(const cl_arch *a)
{
    return a->family == CL_ARCH_RESNET ? cl_resnet_stem_name(a->resnet.stem)
                                       : NULL;
}

int cl_arch_in_channels(const cl_arch *a)
{
    return a->family == CL_ARCH_SWIN ? a->swin.in_channels
                                     : a->resnet.in_channels;
}

int cl_arch_num_classes(const cl_arch *a)
{
    return a->family == CL_ARCH_SWIN ? a->swin.num_classes
                                     : a->resnet.num_classes;
}

void cl_arch_set_io(cl_arch *a, int in_channels, int num_classes)
{
    a->swin.in_channels = a->resnet.in_channels = in_channels;
    a->swin.num_classes = a->resnet.num_classes = num_classes;
}

int cl_arch_default_side(const cl_arch *a)
{
    if (a->family == CL_ARCH_SWIN)
        return a->swin.patch <= 2 ? 32 : 224;
    return a->resnet.stem == CL_STEM_IMAGENET ? 224 : 32;
}

cl_status cl_arch_check(const cl_arch *a)
{
    return a->family == CL_ARCH_SWIN ? cl_swin_check_config(&a->swin)
                                     : cl_resnet_check_config(&a->resnet);
}

cl_status cl_arch_build(cl_graph *g, const cl_arch *a, int in_h, int in_w,
                        int soft_targets, float label_smoothing)
{
    if (a->family == CL_ARCH_SWIN)
        return cl_swin_build(g, &a->swin, in_h, in_w, soft_targets,
                             label_smoothing);
    return cl_resnet_build(g, &a->resnet, in_h, in_w, soft_targets,
                           label_smoothing);
}

cl_status cl_arch_init(cl_graph *g, const cl_arch *a, uint64_t seed)
{
    if (a->family == CL_ARCH_SWIN)
        return cl_swin_init(g, &a->swin, seed);
    return cl_resnet_init(g, &a->resnet, seed);
}
