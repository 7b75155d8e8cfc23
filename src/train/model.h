/* A trained model opened from its checkpoint for inference: the graph
 * rebuilt from the metadata, the weights loaded, the backend planned, and
 * the preprocessing the run used. */
#ifndef CL_TRAIN_MODEL_H
#define CL_TRAIN_MODEL_H

#include "backend/backend.h"
#include "data/data.h"
#include "io/config.h"
#include "models/arch.h"

typedef struct cl_model {
    cl_config cfg; /* the training config stored in the checkpoint */
    cl_arch arch;
    int in_c, side, num_classes;
    char **class_names; /* num_classes names ("" when unknown) */
    cl_graph g;
    int graph_ready;
    cl_backend *be;
    int foreign; /* weights without classic's metadata (.pth, plain
                    safetensors): arch inferred, ImageNet eval defaults */
    int ema;     /* the weights are the checkpoint's EMA (model_ema.h) */
    cl_precision precision; /* what m->be runs at (backend.h) */
} cl_model;

/* Opens ckpt for batches of `batch`: a classic checkpoint, a plain
 * safetensors file with torchvision's names, or a PyTorch .pth.  m->cfg is the
 * stored training config; a caller may change it afterwards (e.g. data_dir on
 * another machine).  Messages name the checkpoint and the metadata field at
 * fault. */
cl_status cl_model_open(cl_model *m, const char *ckpt, int batch,
                        const char *backend, cl_plan_mode mode, int threads);
/* As cl_model_open; arch (may be NULL) names the ResNet the weights must
 * be: checked against a classic checkpoint's metadata, or against the
 * block counts of weights without it (a .pth or plain safetensors file,
 * whose arch is otherwise inferred; see cl_weights_infer).  backend NULL:
 * the graph and its weights only, no backend (m->be NULL). */
cl_status cl_model_open_as(cl_model *m, const char *ckpt, const char *arch,
                           int batch, const char *backend, cl_plan_mode mode,
                           int threads);
/* As cl_model_open_as, which reads the EMA of a checkpoint that holds one
 * (the model it ships); raw non-zero reads its raw weights instead (the
 * load_ema key, false).  An inference plan runs at precision prec, refused
 * with cl_precision_check's sentence where the backend or CPU cannot run
 * it fast. */
cl_status cl_model_open_weights(cl_model *m, const char *ckpt, const char *arch,
                                int batch, const char *backend,
                                cl_plan_mode mode, int threads, int raw,
                                cl_precision prec);
/* The network cfg describes (model, stem, in_channels, num_classes -- 1000
 * when 0 --, image_size) with the weights training starts from (cfg->seed)
 * and cfg's eval pipeline; class names are ImageNet's for 1000 classes,
 * "class k" otherwise.  A model by arch name, for inspection and for
 * pipelines to run before any training; backend as cl_model_open_as. */
cl_status cl_model_create(cl_model *m, const cl_config *cfg, int batch,
                          const char *backend, cl_plan_mode mode, int threads,
                          cl_precision prec);
/* A backend for graph g (m's network at another batch) planned as m's own:
 * same backend name, inference at m->precision. */
cl_status cl_model_plan_like(const cl_model *m, const char *backend,
                             cl_graph *g, cl_backend **out);
void cl_model_close(cl_model *m);

/* The eval transforms for src_h x src_w images (0 x 0: variable sizes). */
cl_status cl_model_transforms(const cl_model *m, int src_h, int src_w,
                              cl_transform_opts *out);

/* One JPEG or PNG file through m, opened for batches of 1, with the eval
 * transforms for its size: its logits (num_classes floats) and its pooled
 * features (the width of m->g.features), either may be NULL.  x is scratch
 * of in_c * side * side floats.  What predict and retrieve run. */
cl_status cl_model_infer_image(cl_model *m, const char *path, float *x,
                               float *logits, float *features);
/* The width of the pooled features (2048 for resnet50). */
int cl_model_feature_dim(const cl_model *m);

/* The validation split of m's recipe (m->cfg.val_split), its eval
 * transforms and a loader over it: no shuffling, no dropped remainder,
 * shard shard_id of num_shards, at most m->cfg.limit_val samples.  What
 * eval, embed and the report evaluate on. */
typedef struct cl_model_data {
    cl_dataset *ds;
    cl_transforms *tf;
    cl_loader *ld;
} cl_model_data;

cl_status cl_model_data_open(const cl_model *m, int batch, int num_shards,
                             int shard_id, cl_model_data *out);
void cl_model_data_close(cl_model_data *md);

#endif
