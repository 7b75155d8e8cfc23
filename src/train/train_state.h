/* The training-state file written beside each model checkpoint for
 * --resume: the optimizer's state and step counters, and the trainer's
 * position as metadata. */
#ifndef CL_TRAIN_TRAIN_STATE_H
#define CL_TRAIN_TRAIN_STATE_H

#include <stdint.h>

#include "graph/graph.h"
#include "io/checkpoint.h"
#include "train/optim.h"

/* The metadata keys of a training-state file; every value is text, as
 * safetensors metadata is.  The model file beside it carries the CL_META_*
 * keys of io/checkpoint.h.  cl_train_state_save writes the first two
 * itself; the trainer (train/checkpointing.c) gives the others. */
#define CL_STATE_OPTIMIZER "optimizer"             /* "sgd" or "adamw" */
#define CL_STATE_OPTIMIZER_STEPS "optimizer_steps" /* steps it has taken */
/* The position to go on from: the 0-based epoch and the loader batches of
 * it already trained (a micro-batch counts one with accumulation; the
 * epoch's count when it is complete), and the optimizer steps of the run
 * so far. */
#define CL_STATE_EPOCH "epoch"
#define CL_STATE_NEXT_BATCH "next_batch"
#define CL_STATE_STEP "step"
#define CL_STATE_SEED "seed" /* the run's seed */
#define CL_STATE_MODEL_FILE                                                    \
    "model_file" /* the model file it was written with */
/* The conv backward path the run took at each graph node, one char per
 * node (backend/backend.h), "" when the backend chose by itself: a
 * resumed run computes as the first part did. */
#define CL_STATE_CONV_PATHS "conv_paths"
/* The global batch: samples per optimizer step over all processes,
 * "256", and how it was made up: batch_size per process, processes and
 * accumulation_steps (global_batch = their product).  Files written
 * before these three keys existed hold all four in global_batch,
 * "total batch_size processes accumulation_steps" ("256 32 4 2");
 * cl_train_state_read_info reads both forms. */
#define CL_STATE_GLOBAL_BATCH "global_batch"
#define CL_STATE_BATCH_SIZE "batch_size"
#define CL_STATE_PROCESSES "processes"
#define CL_STATE_ACCUMULATION "accumulation_steps"
#define CL_STATE_STEPS_PER_EPOCH "steps_per_epoch" /* optimizer steps */
/* The weights' average (train/model_ema.h): updates since its last reset
 * (the decay's warm-up counts them) and updates in all; "" without one. */
#define CL_STATE_EMA_AVERAGED "ema_averaged"
#define CL_STATE_EMA_UPDATES "ema_updates"

/* The state file beside model checkpoint model_path: "x.safetensors" ->
 * "x.state.safetensors" (another name gets ".state" appended). */
void cl_train_state_path(const char *model_path, char *buf, size_t n);

/* The training state: every optimizer state arena per parameter as
 * "<param>.<state>" (PyTorch's names: momentum_buffer, exp_avg,
 * exp_avg_sq), the per-segment step counters (segments in graph order) and
 * metadata: CL_STATE_OPTIMIZER, CL_STATE_OPTIMIZER_STEPS and the caller's
 * (the CL_STATE_* keys above). */
cl_status cl_train_state_save(const char *path, const cl_graph *g,
                              const cl_optim *opt, const cl_ckpt_kv *meta,
                              int n_meta);
/* Restores what cl_train_state_save wrote into opt (built for the same
 * graph); refuses a file for another model or optimizer, naming why. */
cl_status cl_train_state_load(const char *path, const cl_graph *g,
                              cl_optim *opt);

/* The trainer's metadata of a state file as numbers; a key the file
 * lacks or leaves "" (written by an older version, or no average) reads
 * as 0. */
typedef struct cl_train_state_info {
    int64_t epoch, next_batch, step;
    int64_t steps_per_epoch;
    int global_batch;                              /* 0: not recorded */
    int batch_size, processes, accumulation_steps; /* 0: not recorded */
    int64_t ema_averaged, ema_updates;
} cl_train_state_info;

/* Reads the metadata of the state file at path into *info: CL_ERR_IO when
 * it cannot be read, CL_ERR_FORMAT naming the key whose value is not a
 * number, or a global batch that is not the product of its parts. */
cl_status cl_train_state_read_info(const char *path, cl_train_state_info *info);

#endif
