/* What a validation pass leaves for the report, so that the report shows
 * the training's own evaluation instead of running a second one: the
 * metrics (confusion matrix included) and the most confidently
 * misclassified samples, saved beside the checkpoint they belong to as
 * <checkpoint>.val.safetensors. */
#ifndef CL_TRAIN_VAL_RECORD_H
#define CL_TRAIN_VAL_RECORD_H

#include <stdint.h>

#include "data/data.h"
#include "dist/dist.h"
#include "train/metrics.h"

/* The report shows at most this many misclassified images. */
#define CL_VAL_MISS_MAX 64

typedef struct cl_val_miss {
    int64_t index; /* dataset index */
    int truth, pred;
    double conf;   /* softmax probability of pred */
    double p_true; /* softmax probability of the true class */
} cl_val_miss;

/* The cap most confident wrong predictions of a pass, most confident
 * first; the prediction is the arg-max with ties to the lower index, as
 * in cl_metrics_add. */
typedef struct cl_val_misses {
    const cl_dataset *ds; /* the labels' source */
    cl_val_miss *top;     /* top: (cap) */
    int n, cap;
} cl_val_misses;

/* cap is clamped to 0..CL_VAL_MISS_MAX.  On failure *m is freeable. */
cl_status cl_val_misses_init(cl_val_misses *m, const cl_dataset *ds, int cap);
void cl_val_misses_free(cl_val_misses *m);
void cl_val_misses_reset(cl_val_misses *m);
/* A cl_eval_features_fn: keeps sample index if it is among the most
 * confident wrong ones so far (ctx is the cl_val_misses). */
void cl_val_misses_add(void *ctx, int64_t index, const float *row, int dim,
                       const float *logits, int k);
/* With several ranks (each saw its shard), leaves every rank with the cap
 * most confident of all of them. */
cl_status cl_val_misses_gather(cl_val_misses *m, cl_dist *d);

/* What a record says besides the metrics and the misses. */
typedef struct cl_val_record_info {
    int64_t step, epoch; /* of the checkpoint evaluated (epoch 1-based) */
    int hflip;           /* logits averaged with the mirror's */
    char split[96], dataset[64];
    char precision[16]; /* the pass's ("f32", "bf16"); "" if not recorded */
} cl_val_record_info;

/* Writes the record to path: met's counts (confusion matrix included), its
 * loss, the misses, and info and the class names (k of them, may be NULL)
 * as metadata. */
cl_status cl_val_record_save(const char *path, const cl_metrics *met,
                             const cl_val_misses *m,
                             const cl_val_record_info *info,
                             const char *const *class_names);
/* Reads a record: met is initialised here (free with cl_metrics_free),
 * *miss allocated (cl_free; n_miss of them), *names the met->num_classes
 * class names ("" where the record has none; cl_val_record_names_free).
 * Every count and index is checked against the file's sizes; messages name
 * path and the field. */
cl_status cl_val_record_load(const char *path, cl_metrics *met,
                             cl_val_miss **miss, int *n_miss, char ***names,
                             cl_val_record_info *info);
void cl_val_record_names_free(char **names, int k);

/* <ckpt without .safetensors>.val.safetensors into out. */
void cl_val_record_path(const char *ckpt, char *out, size_t n);

#endif
