/* The training-state file written beside each model checkpoint for
 * --resume: the optimizer's state and step counters, and the trainer's
 * position as metadata. */
#ifndef CL_TRAIN_TRAIN_STATE_H
#define CL_TRAIN_TRAIN_STATE_H

#include "graph/graph.h"
#include "io/checkpoint.h"
#include "train/optim.h"

/* The state file beside model checkpoint model_path: "x.safetensors" ->
 * "x.state.safetensors" (another name gets ".state" appended). */
void cl_train_state_path(const char *model_path, char *buf, size_t n);

/* The training state: every optimizer state arena per parameter as
 * "<param>.<state>" (PyTorch's names: momentum_buffer, exp_avg,
 * exp_avg_sq), the per-segment step counters (segments in graph order) and
 * metadata (step, epoch, loader position, seed... as the caller gives). */
cl_status cl_train_state_save(const char *path, const cl_graph *g,
                              const cl_optim *opt, const cl_ckpt_kv *meta,
                              int n_meta);
/* Restores what cl_train_state_save wrote into opt (built for the same
 * graph); refuses a file for another model or optimizer, naming why. */
cl_status cl_train_state_load(const char *path, const cl_graph *g,
                              cl_optim *opt);

#endif
