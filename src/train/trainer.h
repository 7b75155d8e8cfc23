/* The training loop: data -> forward -> loss -> backward -> (allreduce) ->
 * optimizer, with monitors, JSONL metrics, checkpoints, evaluation and
 * resume.  One function a person can read top to bottom. */
#ifndef CL_TRAIN_TRAINER_H
#define CL_TRAIN_TRAINER_H

#include "core/log.h"
#include "dist/dist.h"
#include "io/config.h"

typedef struct cl_train_result {
    int64_t steps;    /* optimizer steps taken in total (incl. resumed) */
    int epochs;       /* epochs completed */
    double last_loss; /* smoothed training loss at the end */
    double val_top1;  /* last evaluation, NaN if none */
    double val_top5;
    double val_loss;
    double best_top1;       /* best evaluation, NaN if none */
    double seconds;         /* wall time of the loop */
    double img_per_s;       /* training throughput of this process's loop */
    double data_wait_share; /* fraction of the loop spent waiting on data */
    char last_ckpt[640];    /* model file written last ("" if none) */
    char best_ckpt[640];
    int stop_signal; /* SIGINT/SIGTERM that stopped the run, else 0 */
} cl_train_result;

/* Trains as cfg says.  d may be NULL (single process).  Only rank 0
 * writes files and logs (lg is used as given; pass a quiet logger on other
 * ranks).  CL_ERR_NUMERIC when the loss becomes NaN/Inf (the message names
 * the step and the last good checkpoint).  While it runs, SIGINT and
 * SIGTERM are caught: the first stops the run after the current step with
 * a step checkpoint and CL_ERR_INTERRUPTED (the message names the file to
 * --resume; res->stop_signal says which signal), a second ends the process
 * at once; the previous handlers are restored on return. */
cl_status cl_train_run(const cl_config *cfg, cl_dist *d, const cl_logger *lg,
                       cl_train_result *res);

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

#endif
