/* One description over the network families: parse, name, build, init. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "models/arch.h"

/* Every line of models/archs.def: its name and family; and the names
 * ", "-separated (each line adds ", name"; the list starts past the first
 * separator). */
static const struct {
    const char *name;
    cl_arch_family family;
} ARCHS[] = {
#define CL_ARCH(E, name, family, variant) {name, CL_ARCH_##family},
#include "models/archs.def"
#undef CL_ARCH
};
static const char NAME_LIST[] = ""
#define CL_ARCH(E, name, family, variant) ", " name
#include "models/archs.def"
#undef CL_ARCH
    ;
#define N_ARCHS ((int)(sizeof ARCHS / sizeof ARCHS[0]))

const char *cl_arch_names(void)
{
    return NAME_LIST + 2;
}

int cl_arch_count(void)
{
    return N_ARCHS;
}

const char *cl_arch_name_at(int i, cl_arch_family *family)
{
    if (i < 0 || i >= N_ARCHS)
        return NULL;
    if (family)
        *family = ARCHS[i].family;
    return ARCHS[i].name;
}

cl_status cl_arch_parse(const char *name, const char *stem, cl_arch *a)
{
    memset(a, 0, sizeof *a);
    int i = 0;
    while (i < N_ARCHS && !(name && strcmp(name, ARCHS[i].name) == 0))
        i++;
    if (i == N_ARCHS)
        return cl_error(CL_ERR_ARG, "arch '%s' is not one of %s",
                        name ? name : "(null)", cl_arch_names());
    a->family = ARCHS[i].family;
    switch (a->family) {
    case CL_ARCH_SWIN:
        return cl_swin_arch_parse(name, &a->swin);
    case CL_ARCH_RESNET:
        a->resnet = cl_resnet_config_default();
        CL_TRY(cl_resnet_arch_parse(name, &a->resnet.depth));
        if (stem)
            CL_TRY(cl_resnet_stem_parse(stem, &a->resnet.stem));
        return CL_OK;
    }
    return cl_error(CL_ERR_ARG, "arch '%s': family %d is not built", name,
                    (int)a->family);
}

const char *cl_arch_name(const cl_arch *a, char *buf, size_t cap)
{
    const char *name = a->family == CL_ARCH_SWIN
                           ? a->swin.name
                           : cl_resnet_arch_name(a->resnet.depth);
    if (name)
        snprintf(buf, cap, "%s", name);
    else if (a->family == CL_ARCH_SWIN)
        snprintf(buf, cap, "swin");
    else /* a depth no line names, as cl_arch_check will say */
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
