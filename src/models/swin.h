/* Swin-Transformer (v1) as torchvision builds it: a patch-embedding conv,
 * stages of shifted-window attention blocks joined by patch merging, a
 * final LayerNorm, a mean over the tokens and a linear head; module names
 * as torchvision's state_dict, so the param and buffer names are its own.
 *
 * Tokens are (B, L, C) row-major (L = H * W in row-major order), the
 * layout torchvision's (B, H, W, C) has in memory.  Every data movement
 * (cyclic shift and window partition, window reverse, the head split of
 * qkv, patch merging, NCHW -> tokens) is a row_gather whose index the
 * builder fills: derived buffers, not saved. */
#ifndef CL_MODELS_SWIN_H
#define CL_MODELS_SWIN_H

#include <stdint.h>

#include "graph/graph.h"

enum { CL_SWIN_MAX_STAGES = 4 };

typedef struct cl_swin_config {
    const char *name; /* "swin_t", "swin_micro" */
    int patch;        /* patch-embedding conv kernel and stride */
    int window;       /* attention window side */
    int embed;        /* channels of the first stage */
    int n_stages;
    int depths[CL_SWIN_MAX_STAGES];
    int heads[CL_SWIN_MAX_STAGES];
    int mlp_ratio;
    float drop_path; /* stochastic depth of the last block; linear from 0 */
    int in_channels;
    int num_classes;
} cl_swin_config;

/* A Swin of models/archs.def ("swin_t", "swin_micro") into *cfg (3
 * channels, 1000 classes); CL_ERR_ARG listing their names otherwise. */
cl_status cl_swin_arch_parse(const char *name, cl_swin_config *cfg);
/* Non-zero when name is a Swin arch name. */
int cl_swin_is_arch(const char *name);

/* CL_ERR_ARG naming the bad field. */
cl_status cl_swin_check_config(const cl_swin_config *cfg);

/* Builds the network for in_h x in_w inputs into g (cl_graph_init'ed,
 * empty), with a softmax cross-entropy loss over labels or (N, K) soft
 * targets, finalizes it and fills its index buffers (the relative position
 * index too).  Every stage's token grid must divide into windows (or be
 * no larger than one window): torchvision pads instead, which classic does
 * not build; the message names the stage.  g->features is the pooled
 * (N, C) tensor. */
cl_status cl_swin_build(cl_graph *g, const cl_swin_config *cfg, int in_h,
                        int in_w, int soft_targets, float label_smoothing);

/* The relative_position_index of a ws x ws window, torchvision's: token n
 * against token q, (dh, dw) shifted to start at 0, row-major in a
 * (2 ws - 1)^2 table; ws^4 values into ix. */
void cl_swin_relative_index(int ws, int64_t *ix);

/* torchvision's init: linear weights and the bias tables trunc_normal(std
 * 0.02), linear biases 0, LayerNorm 1 / 0, the patch conv PyTorch's
 * default; one RNG stream per tensor. */
cl_status cl_swin_init(cl_graph *g, const cl_swin_config *cfg, uint64_t seed);

#endif
