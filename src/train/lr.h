/* Learning-rate schedules evaluated per global step, with the semantics of
 * mindcv's create_scheduler (linear warm-up, then cosine decay, multi-step or
 * constant); docs/training.md gives the formulas and their sources. */
#ifndef CL_TRAIN_LR_H
#define CL_TRAIN_LR_H

#include <stdint.h>

#include "classic/status.h"

typedef enum cl_lr_kind {
    CL_LR_CONSTANT = 0,
    CL_LR_COSINE = 1,    /* mindcv "cosine_decay" */
    CL_LR_MULTI_STEP = 2 /* mindcv "multi_step_decay" */
} cl_lr_kind;

enum { CL_LR_MAX_MILESTONES = 32 };

typedef struct cl_lr_config {
    cl_lr_kind kind;
    double lr;     /* peak lr, for the global batch */
    double min_lr; /* cosine: the floor it decays to */
    /* Warm-up: linear from lr * warmup_factor to lr over warmup_epochs
     * (counted in steps; 0 disables).  Applies before every kind. */
    int warmup_epochs;
    double warmup_factor;
    /* Cosine: decay from lr to min_lr over decay_epochs after warm-up
     * (0: epochs - warmup_epochs), num_cycles times (0 or 1: once), the peak
     * of cycle c being lr * cycle_decay^c; then min_lr. */
    int decay_epochs;
    int num_cycles;
    double cycle_decay;
    /* Multi-step: lr * decay_rate^(number of milestones <= e), e the epoch
     * counted from the end of warm-up (mindcv); milestones in any order. */
    int milestones[CL_LR_MAX_MILESTONES];
    int n_milestones;
    double decay_rate;
    int epochs;              /* total, warm-up included */
    int64_t steps_per_epoch; /* optimizer steps per epoch */
    /* Non-zero: lr changes only at epoch boundaries (mindcv's
     * lr_epoch_stair, MindSpore's nn.cosine_decay_lr).  Zero: every step. */
    int lr_epoch_stair;
} cl_lr_config;

/* Cosine, lr 0.1, min_lr 1e-6, no warm-up (factor 0), decay over the rest,
 * decay_rate 0.1, 90 epochs, steps_per_epoch 0 (the caller must set it). */
cl_lr_config cl_lr_config_default(void);

/* CL_ERR_CONFIG naming the field ("lr.warmup_epochs: ...") when the config
 * cannot be evaluated. */
cl_status cl_lr_validate(const cl_lr_config *c);

/* The lr for 0-based global optimizer step `step` (negative reads as 0).
 * Computed in double as mindcv's Python lists are.  Past the end of training
 * it keeps the schedule's last rule (cosine: min_lr).  On a config that fails
 * cl_lr_validate it returns c->lr. */
float cl_lr_at(const cl_lr_config *c, int64_t step);

#endif
