/* The training loop: data -> forward -> loss -> backward -> (allreduce) ->
 * optimizer, with monitors, JSONL metrics, checkpoints, evaluation and
 * resume.  trainer.c holds the set-up and the loop, to be read top to
 * bottom; checkpointing.c the checkpoints, resume and the broadcasts that
 * start every rank alike; run_dir.c the run folder (run.h: what they
 * share). */
#ifndef CL_TRAIN_TRAINER_H
#define CL_TRAIN_TRAINER_H

#include "core/log.h"
#include "dist/dist.h"
#include "io/checkpoint.h"
#include "io/config.h"

typedef struct cl_train_result {
    int64_t steps;     /* optimizer steps taken in total (incl. resumed) */
    int64_t steps_run; /* of those, the steps this call trained */
    int complete;      /* resumed at the run's end: nothing was left to train */
    int epochs;        /* epochs completed */
    double last_loss;  /* smoothed training loss at the end */
    double val_top1;   /* last evaluation, NaN if none */
    double val_top5;
    double val_loss;
    /* The same of the weights' average (ema), NaN without one. */
    double val_ema_top1, val_ema_top5, val_ema_loss;
    double best_top1;       /* best evaluation (of the average with ema), NaN if
                               none */
    double seconds;         /* wall time of the loop */
    double img_per_s;       /* training throughput of this process's loop */
    double data_wait_share; /* fraction of the loop spent waiting on data */
    char last_ckpt[640];    /* model file written last ("" if none) */
    char best_ckpt[640];
    int stop_signal; /* SIGINT/SIGTERM that stopped the run, else 0 */
} cl_train_result;

/* The precision the training's own validation runs at, as `classic eval
 * --precision` names it: the training plan evaluates, so amp_level O0 is
 * "f32", O2 "bf16" and O1 (bf16 convolutions and matmuls) "bf16 (O1)". */
const char *cl_train_eval_precision(int amp_level);

/* What the loop tells a caller's hook. */
typedef enum cl_train_event_kind {
    CL_TRAIN_EVENT_STEP, /* a printed step (every per_print_times) */
    CL_TRAIN_EVENT_EPOCH /* an epoch's end, after its evaluation if any */
} cl_train_event_kind;

typedef struct cl_train_event {
    cl_train_event_kind kind;
    int64_t step, total_steps; /* optimizer steps so far / in the run */
    int64_t first_step;        /* where this call started (resumed), or 0 */
    int64_t epoch;             /* 1-based */
    double loss, loss_avg;     /* the global batch's; smoothed */
    double lr, img_s;          /* STEP: the step's lr, all ranks' img/s */
    int last_epoch;            /* EPOCH: the run's last */
    int evaluated;             /* EPOCH: the val_* below are this epoch's */
    double val_top1, val_top5, val_loss;
    double val_ema_top1, val_ema_top5, val_ema_loss; /* NaN without ema */
} cl_train_event;

/* How a caller takes part in a run.  on_event (may be NULL) runs on every
 * rank, in the training thread, between steps; a non-zero return asks the
 * run to stop after the current step with a checkpoint, as SIGINT does
 * (CL_ERR_INTERRUPTED, stop_signal 0).  host_signals non-zero leaves
 * SIGINT and SIGTERM to the caller: the run installs no handlers and
 * stops only when asked through on_event. */
typedef struct cl_train_hooks {
    void *ctx;
    int (*on_event)(void *ctx, const cl_train_event *e);
    int host_signals;
} cl_train_hooks;

/* Trains as cfg says.  d may be NULL (single process).  Only rank 0
 * writes files and logs (lg is used as given; pass a quiet logger on other
 * ranks).  A run that resumes nothing refuses a ckpt_save_dir holding
 * another run's config.yaml or metrics.jsonl (CL_ERR_CONFIG naming the
 * ways out), or with cfg->overwrite removes that run's files first.  A
 * resume at the run's end trains nothing and sets res->complete.
 * CL_ERR_NUMERIC when the loss becomes NaN/Inf (the message names
 * the step and the last good checkpoint).  While it runs (unless
 * hooks->host_signals), SIGINT and SIGTERM are caught: the first stops the
 * run after the current step with a step checkpoint and CL_ERR_INTERRUPTED
 * (the message names the file to --resume; res->stop_signal says which
 * signal; res holds the steps, time and throughput so far and last_ckpt
 * that checkpoint, as after a finished run), a second ends the process at
 * once; the previous handlers are restored on return.  hooks may be
 * NULL. */
cl_status cl_train_run(const cl_config *cfg, cl_dist *d, const cl_logger *lg,
                       const cl_train_hooks *hooks, cl_train_result *res);

#endif
