/* ResNet-18/34/50/101/152 as torchvision builds them (v1.5: the stride of a
 * bottleneck on its 3x3 conv), with an ImageNet or a CIFAR stem, and
 * torchvision's initialisation. */
#ifndef CL_MODELS_RESNET_H
#define CL_MODELS_RESNET_H

#include <stdint.h>

#include "graph/graph.h"

typedef enum cl_resnet_stem {
    CL_STEM_IMAGENET = 0, /* 7x7/2 conv pad 3, BN, ReLU, 3x3/2 maxpool pad 1 */
    CL_STEM_CIFAR = 1,    /* 3x3/1 conv pad 1, BN, ReLU, no maxpool */
    /* 3x3/1 conv pad 1, BN, ReLU, 3x3/2 maxpool pad 1: torchvision's model
     * with only conv1 swapped for a 3x3/1 one, a common small-image variant
     * costing a quarter of the CIFAR stem's work after the stem. */
    CL_STEM_CIFAR_POOL = 2
} cl_resnet_stem;

typedef struct cl_resnet_config {
    int depth; /* 18, 34, 50, 101 or 152 */
    cl_resnet_stem stem;
    int in_channels; /* 1 or 3 */
    int num_classes;
    int zero_init_residual; /* last BN gamma of each block starts at 0 */
} cl_resnet_config;

/* resnet50, imagenet stem, 3 channels, 1000 classes. */
cl_resnet_config cl_resnet_config_default(void);

/* "resnet50" -> 50, for the ResNets of models/archs.def.  CL_ERR_ARG
 * listing their names otherwise. */
cl_status cl_resnet_arch_parse(const char *name, int *depth);
/* 50 -> "resnet50"; NULL for a depth models/archs.def does not name. */
const char *cl_resnet_arch_name(int depth);
/* "imagenet", "cifar" or "cifar_pool". */
cl_status cl_resnet_stem_parse(const char *name, cl_resnet_stem *stem);
const char *cl_resnet_stem_name(cl_resnet_stem stem);

/* CL_ERR_ARG / CL_ERR_CONFIG naming the bad field. */
cl_status cl_resnet_check_config(const cl_resnet_config *cfg);

/* Builds the network into g (cl_graph_init'ed with the batch size, empty)
 * for in_h x in_w inputs, with a softmax cross-entropy loss over integer
 * labels (soft_targets 0) or (N, K) soft targets, and finalizes g.  Sets
 * g->features to the pooled (N, 512 * expansion) tensor.  Params are zero
 * until cl_resnet_init. */
cl_status cl_resnet_build(cl_graph *g, const cl_resnet_config *cfg, int in_h,
                          int in_w, int soft_targets, float label_smoothing);

/* torchvision's init on a finalized graph built from cfg: conv weights
 * N(0, sqrt(2 / (out_ch * kh * kw))), BN gamma 1 / beta 0, running stats
 * 0 / 1, fc as PyTorch's Linear default (uniform +-1/sqrt(in)), and with
 * zero_init_residual the last BN gamma of every block 0.  Tensor i draws
 * from its own RNG stream, so the result depends only on the seed. */
cl_status cl_resnet_init(cl_graph *g, const cl_resnet_config *cfg,
                         uint64_t seed);

/* 1 for BasicBlock (18, 34), 4 for Bottleneck (50, 101, 152). */
int cl_resnet_expansion(int depth);

#endif
