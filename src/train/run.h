/* What one training run owns, shared by the files that make up the
 * trainer: trainer.c (set-up and the loop), checkpointing.c (checkpoints,
 * resume and the broadcasts that start every rank alike) and run_dir.c
 * (the run folder: claiming it, config.yaml, metrics.jsonl).  Internal to
 * src/train/. */
#ifndef CL_TRAIN_RUN_H
#define CL_TRAIN_RUN_H

#include <stdint.h>
#include <stdio.h>

#include "backend/backend.h"
#include "data/data.h"
#include "dist/dist.h"
#include "graph/graph.h"
#include "io/config.h"
#include "io/strbuf.h"
#include "models/arch.h"
#include "train/lr.h"
#include "train/metrics.h"
#include "train/model_ema.h"
#include "train/optim.h"
#include "train/trainer.h"
#include "train/val_record.h"

/* Everything one run owns; cl_run_free in trainer.c releases it in reverse
 * order. */
typedef struct cl_run {
    const cl_config *cfg;
    cl_dist *d; /* NULL: one process */
    const cl_logger *lg;
    int root; /* rank 0: the rank that writes files */
    cl_dataset *train_ds, *val_ds;
    cl_transforms *train_tf, *val_tf;
    cl_loader *train_ld, *val_ld;
    cl_graph g;
    int graph_ready;
    cl_arch model;
    char arch_name[32]; /* "resnet50": checkpoint file names */
    cl_backend *be;
    cl_dist_grad_sync *sync;
    cl_optim opt;
    cl_optim_segment *segs;
    int n_segs;
    cl_lr_config lr;
    cl_metrics val;
    cl_model_ema ema; /* the weights' moving average (cfg->ema) */
    int has_ema;
    cl_metrics val_ema;   /* its evaluation */
    cl_val_misses misses; /* the last validation pass's, for the report */
    float *acc;           /* gradient accumulation arena, or NULL */
    FILE *jsonl;          /* metrics.jsonl (rank 0), or NULL */
    cl_strbuf line;
    char *config_yaml;
    char **ckpts; /* rotation ring of written step checkpoints */
    int n_ckpts;
    int in_c, side;
    int64_t steps_per_epoch;
    char *conv_paths; /* the resumed run's choice (autotune), or NULL */
    const cl_train_hooks *hooks;     /* the caller's, or NULL */
    int hook_stop;                   /* a hook asked to stop after this step */
    int watch_signals;               /* the run's SIGINT/SIGTERM handlers */
    char val_split[CL_CFG_NAME_MAX]; /* the split folder read (imagefolder) */
} cl_run;

/* The processes the run trains on (1 alone). */
static inline int cl_run_ranks(const cl_run *r)
{
    return r->d ? r->d->size : 1;
}

/* Micro-batches per optimizer step. */
static inline int cl_run_accum(const cl_run *r)
{
    return r->cfg->accumulation_steps > 0 ? r->cfg->accumulation_steps : 1;
}

/* Samples per optimizer step over all ranks: what steps, the schedule and
 * the position in an epoch count. */
static inline int cl_run_global_batch(const cl_run *r)
{
    return r->cfg->batch_size * cl_run_ranks(r) * cl_run_accum(r);
}

#endif
