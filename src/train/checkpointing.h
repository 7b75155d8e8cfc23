/* A training run's checkpoints, its resume, and the broadcasts that start
 * every rank from the same state: the trainer's part that writes and reads
 * files and keeps the ranks alike, apart from the loop (trainer.c).
 *
 * Files of a run, in its ckpt_save_dir (rank 0 writes them all):
 *   <arch>-e<E>-s<S>.safetensors  every ckpt_save_interval steps
 *   <arch>-e<E>.safetensors       every ckpt_save_epochs epochs
 *   <arch>-last.safetensors       at the end
 *   <arch>-best.safetensors       the best validation so far (model only)
 * each model file (io/checkpoint.h's CL_META_* keys) with its training
 * state beside it, <name>.state.safetensors (train/train_state.h's
 * CL_STATE_* keys), except -best; -best and -last keep their validation
 * pass in <name>.val.safetensors (train/val_record.h). */
#ifndef CL_TRAIN_CHECKPOINTING_H
#define CL_TRAIN_CHECKPOINTING_H

#include <stdint.h>

#include "train/run.h"

/* The model file alone (weights, the EMA if any, CL_META_* metadata with
 * the resolved config) at path: the best checkpoint. */
cl_status cl_run_save_model(cl_run *r, const char *path, int64_t epoch,
                            int64_t step);
/* Model and training state for --resume at (epoch, the next loader batch
 * of it), after step optimizer steps. */
cl_status cl_run_save_checkpoint(cl_run *r, const char *path, int64_t epoch,
                                 int64_t next_batch, int64_t step);
/* Adds the checkpoint at path to the run's ring of step and epoch
 * checkpoints and removes the oldest (model and state) beyond
 * keep_checkpoint_max (0: keeps all). */
cl_status cl_run_rotate(cl_run *r, const char *path);
/* The last validation pass beside the checkpoint of its weights, so that
 * the report shows it without evaluating again; rank 0 only, others
 * return CL_OK. */
cl_status cl_run_save_val_record(cl_run *r, const char *ckpt, int64_t epoch,
                                 int64_t step);

/* Reads cfg->resume and the state beside it into the run (weights, the
 * average, the optimizer, the conv paths the first part took) and gives
 * the position to go on from: the 0-based epoch, its next loader batch
 * and the optimizer steps taken.  Refuses, naming the way out, a
 * checkpoint without state, a state of another step, and a global batch
 * other than the state's. */
cl_status cl_run_resume(cl_run *r, int64_t *epoch, int64_t *batch,
                        int64_t *step);

/* Every rank from rank 0's weights, and after a resume its optimizer state
 * and average, so that the replicas stay bitwise identical; a fresh run's
 * average starts from those weights.  Collective (alone: the average's
 * start only). */
cl_status cl_run_share_start(cl_run *r);
/* Rank 0's choice of conv backward paths (autotune) into *paths on every
 * rank (NULL when it has none), so that all ranks compute alike and a
 * resume reproduces every rank's part.  Collective. */
cl_status cl_run_share_conv_paths(cl_run *r, char **paths);

#endif
