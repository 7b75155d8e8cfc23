/* The network families classic builds, behind one description: what a
 * recipe, a checkpoint's metadata or a weights file names, and what every
 * caller builds, initialises and names through. */
#ifndef CL_MODELS_ARCH_H
#define CL_MODELS_ARCH_H

#include <stddef.h>
#include <stdint.h>

#include "graph/graph.h"
#include "models/resnet.h"
#include "models/swin.h"

typedef enum cl_arch_family {
    CL_ARCH_RESNET = 0,
    CL_ARCH_SWIN = 1
} cl_arch_family;

typedef struct cl_arch {
    cl_arch_family family;
    cl_resnet_config resnet; /* CL_ARCH_RESNET */
    cl_swin_config swin;     /* CL_ARCH_SWIN */
} cl_arch;

/* The arch called name, a line of models/archs.def ("resnet50", "swin_t",
 * ...), with stem (a ResNet's; NULL for the default, ignored by other
 * families), 3 channels and 1000 classes.  CL_ERR_ARG listing every name
 * otherwise. */
cl_status cl_arch_parse(const char *name, const char *stem, cl_arch *a);
/* Every name of models/archs.def, ", "-separated ("resnet18, resnet34,
 * ..., swin_micro"), as errors and help text list them. */
const char *cl_arch_names(void);
/* How many archs models/archs.def lists, and arch i's name and family
 * (NULL for i out of range). */
int cl_arch_count(void);
const char *cl_arch_name_at(int i, cl_arch_family *family);
/* "resnet50", "swin_t". */
const char *cl_arch_name(const cl_arch *a, char *buf, size_t cap);
/* A ResNet's stem name; NULL for families without stems. */
const char *cl_arch_stem(const cl_arch *a);

int cl_arch_in_channels(const cl_arch *a);
int cl_arch_num_classes(const cl_arch *a);
void cl_arch_set_io(cl_arch *a, int in_channels, int num_classes);
/* The input side the family's ImageNet weights were trained at (224), or
 * 32 for the small-input variants (ResNet's cifar stems, swin_micro). */
int cl_arch_default_side(const cl_arch *a);

cl_status cl_arch_check(const cl_arch *a);
/* Builds and finalizes the network (cl_resnet_build, cl_swin_build). */
cl_status cl_arch_build(cl_graph *g, const cl_arch *a, int in_h, int in_w,
                        int soft_targets, float label_smoothing);
/* The initial weights training starts from, as torchvision draws them. */
cl_status cl_arch_init(cl_graph *g, const cl_arch *a, uint64_t seed);

#endif
