/* A training run's folder (ckpt_save_dir): claiming it for a new run,
 * and the record every run keeps there, config.yaml and metrics.jsonl
 * (docs/training.md describes its records).
 * The checkpoints in it are train/checkpointing.h's. */
#ifndef CL_TRAIN_RUN_DIR_H
#define CL_TRAIN_RUN_DIR_H

#include "train/run.h"

/* A new run (no resume) into a folder that holds a run's config.yaml or
 * metrics.jsonl would replace that run's record and mix its checkpoints
 * with the old ones: refused (CL_ERR_CONFIG naming the ways out), unless
 * overwrite says to remove the old run's files first.  Checked on rank 0
 * before anything loads; every rank agrees on the outcome. */
cl_status cl_run_claim_dir(cl_run *r);

/* The resolved config as YAML into r->config_yaml (every rank: the
 * checkpoints carry it); on rank 0 the folder, config.yaml (the YAML after
 * the line "# resolved by classic VERSION; seed SEED; N process(es)") and
 * metrics.jsonl opened into r->jsonl, appended to on resume. */
cl_status cl_run_write_files(cl_run *r);

/* One line of metrics.jsonl (rank 0; nothing without r->jsonl), written
 * through at once: a "train" record of a printed step (the global batch's
 * loss and smoothed loss, the step's lr, all ranks' img/s, ms per step,
 * and the shares of time spent waiting on data, and with several ranks
 * on the gradient exchange and in its hook). */
void cl_run_jsonl_step(cl_run *r, int64_t step, int64_t epoch, double loss,
                       double avg, double lr, double ips, double ms,
                       double wait, double comm, double hook);
/* An "eval" record of the validation pass in r->val (and r->val_ema with
 * an average): top-1, top-k, loss, samples, the epoch's seconds, what
 * top-k counts and the precision the pass ran at. */
void cl_run_jsonl_eval(cl_run *r, int64_t step, int64_t epoch, double epoch_s);

#endif
