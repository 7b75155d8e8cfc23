/* Checkpoints: a model file (safetensors, torchvision state_dict names,
 * canonical f32, metadata); the training-state file beside it for
 * --resume is train/train_state.h's. */
#ifndef CL_IO_CHECKPOINT_H
#define CL_IO_CHECKPOINT_H

#include <stdint.h>

#include "graph/graph.h"

/* The metadata keys every classic model checkpoint carries. */
#define CL_META_ARCH "arch"
#define CL_META_STEM "stem"
#define CL_META_IN_CHANNELS "in_channels"
#define CL_META_NUM_CLASSES "num_classes"
#define CL_META_IMAGE_SIZE "image_size"
#define CL_META_CLASS_NAMES "class_names" /* a JSON array of strings */
#define CL_META_MEAN "mean"               /* "0.286,0.286,0.286" */
#define CL_META_STD "std"
#define CL_META_EPOCH "epoch"
#define CL_META_STEP "step"
#define CL_META_DATASET "dataset"
#define CL_META_CONFIG "config" /* the resolved YAML */
#define CL_META_VERSION "classic_version"

/* A model file may hold an exponential moving average of the weights
 * (train/model_ema.h) beside them: every parameter and buffer once more,
 * named with this prefix ("ema.conv1.weight"), after the weights. */
#define CL_CKPT_EMA_PREFIX "ema."

/* One __metadata__ entry. */
typedef struct cl_ckpt_kv {
    const char *key;
    const char *value;
} cl_ckpt_kv;

/* Writes every parameter and buffer of g in graph order (torchvision's
 * state_dict order) as F32, num_batches_tracked as an I64 scalar as PyTorch
 * stores it, and the metadata; atomically (the old file survives a
 * failure). */
cl_status cl_ckpt_save_model(const char *path, const cl_graph *g,
                             const cl_ckpt_kv *meta, int n_meta);
/* As cl_ckpt_save_model, and when ema_params is not NULL the average too:
 * arenas of g's layout (n_param_floats, n_buffer_floats), written under
 * CL_CKPT_EMA_PREFIX names. */
cl_status cl_ckpt_save_model_ema(const char *path, const cl_graph *g,
                                 const float *ema_params,
                                 const float *ema_buffers,
                                 const cl_ckpt_kv *meta, int n_meta);

/* Which weights a load reads from a file that holds an EMA beside them. */
typedef enum cl_ckpt_pick {
    CL_CKPT_PICK_EMA = 0,     /* the EMA when the file has one, else the weights
                                 (what eval, predict, export and --pretrained
                                 take: the EMA is the model one ships) */
    CL_CKPT_PICK_RAW = 1,     /* the weights; the EMA is ignored (resume) */
    CL_CKPT_PICK_EMA_ONLY = 2 /* the EMA; a file without one is refused */
} cl_ckpt_pick;

typedef enum cl_ckpt_mode {
    /* Every tensor of g present with its shape, no tensor the graph lacks:
     * for eval, predict and resume. */
    CL_CKPT_STRICT = 0,
    /* Fine-tuning: as strict, except that head tensors (CL_PARAM_HEAD)
     * whose shape differs (another num_classes) keep their fresh
     * initialisation and are reported. */
    CL_CKPT_PRETRAINED = 1
} cl_ckpt_mode;

typedef struct cl_ckpt_load_report {
    int loaded;       /* tensors copied into g */
    int head_skipped; /* head tensors left as initialised */
    /* "fc.weight (1000, 2048) in the file, (10, 2048) in the model; ..." */
    char head_note[512];
    int ema; /* the weights read were the file's EMA */
} cl_ckpt_load_report;

struct cl_st_file;

/* Named tensors that a model's weights are copied from: a safetensors
 * file, or one of interop/'s readers (a PyTorch .pth). */
typedef struct cl_ckpt_source {
    const char *path; /* for messages */
    const void *ctx;
    size_t (*count)(const void *ctx);
    const char *(*name)(const void *ctx, size_t i);
    long (*find)(const void *ctx, const char *name); /* index or -1 */
    cl_shape (*shape)(const void *ctx, size_t i);
    cl_status (*read_f32)(const void *ctx, size_t i, float *dst, size_t n);
    cl_status (*read_i64)(const void *ctx, size_t i, int64_t *dst, size_t n);
    /* Files from other tools may lack BN's num_batches_tracked (torchvision
     * weights from before PyTorch 0.4, timm); set, the counters missing
     * from the file keep their value. */
    int counters_optional;
    /* Which weights to read (0: the EMA when the file has one). */
    cl_ckpt_pick pick;
} cl_ckpt_source;

/* Whether src holds CL_CKPT_EMA_PREFIX tensors. */
int cl_ckpt_source_has_ema(const cl_ckpt_source *src);

/* A source reading the open safetensors file f. */
cl_ckpt_source cl_ckpt_source_st(const struct cl_st_file *f, const char *path);

/* cl_ckpt_load_model on any source. */
cl_status cl_ckpt_load_source(const cl_ckpt_source *src, cl_graph *g,
                              cl_ckpt_mode mode, cl_ckpt_load_report *rep);

/* Copies the file's tensors into g's arenas by name (the EMA when it has
 * one: CL_CKPT_PICK_EMA).  Refuses, naming the
 * tensors (up to 8 listed, then a count): names the model lacks, tensors the
 * file lacks, shape mismatches, non-float data.  On failure g is unchanged. */
cl_status cl_ckpt_load_model(const char *path, cl_graph *g, cl_ckpt_mode mode,
                             cl_ckpt_load_report *rep);
/* As cl_ckpt_load_model, reading the weights pick says. */
cl_status cl_ckpt_load_model_pick(const char *path, cl_graph *g,
                                  cl_ckpt_mode mode, cl_ckpt_pick pick,
                                  cl_ckpt_load_report *rep);

/* Reads metadata `key` of a safetensors file into buf ("" if absent). */
cl_status cl_ckpt_read_meta(const char *path, const char *key, char *buf,
                            size_t n);

#endif
