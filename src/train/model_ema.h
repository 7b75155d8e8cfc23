/* The exponential moving average of a model's weights (torchvision's
 * ExponentialMovingAverage, timm's ModelEmaV3): a second copy of the
 * graph's parameter and buffer arenas, pulled toward the trained weights
 * after optimizer steps, evaluated beside them and shipped as the model.
 *
 * One update with decay d, over every f32 parameter and BN running
 * statistic, element by element:
 *
 *     ema = d * ema + (1 - d) * w        (f32, d and 1 - d rounded once)
 *
 * Integer state (num_batches_tracked, index buffers) is copied, as timm
 * copies what is not floating point.  The first update after create or
 * cl_model_ema_reset copies every value (d = 0: AveragedModel with
 * n_averaged 0, timm's get_decay at its first step).  docs/training.md
 * writes out the decay rules and how torchvision's and timm's options map
 * onto the recipe keys. */
#ifndef CL_TRAIN_MODEL_EMA_H
#define CL_TRAIN_MODEL_EMA_H

#include <stdint.h>

#include "classic/status.h"
#include "graph/graph.h"

typedef struct cl_model_ema_config {
    double decay; /* per update, in (0, 1) */
    int steps;    /* update at every steps-th optimizer step of an epoch */
    int warmup;   /* timm's decay warm-up: min(decay, 1 - (1 + n)^-2/3) */
} cl_model_ema_config;

/* A run of floats of the buffer arena that is copied, not averaged. */
typedef struct cl_model_ema_range {
    size_t offset, n;
} cl_model_ema_range;

/* Caller-owned; fields read-only outside model_ema.c. */
typedef struct cl_model_ema {
    cl_model_ema_config cfg;
    float *params;  /* n_param_floats, the graph's layout */
    float *buffers; /* n_buffer_floats, the graph's layout */
    size_t n_params, n_buffers;
    cl_model_ema_range *copied; /* counters and i64 buffers */
    int n_copied;
    int64_t n_averaged; /* updates since create or the last reset */
    int64_t n_updates;  /* updates since create (a resumed run's included) */
} cl_model_ema;

/* Checks cfg (CL_ERR_CONFIG naming ema_decay or ema_steps), allocates the
 * copy and fills it with g's current weights (n_averaged 0).  On failure
 * *e is left destroyable. */
cl_status cl_model_ema_create(cl_model_ema *e, const cl_model_ema_config *cfg,
                              const cl_graph *g);
/* Frees what create allocated; safe on a zeroed or destroyed struct. */
void cl_model_ema_destroy(cl_model_ema *e);

/* The copy set to g's weights and the counters to 0 (a new run's start,
 * --pretrained weights). */
void cl_model_ema_set(cl_model_ema *e, const cl_graph *g);

/* Whether the step_in_epoch-th (0-based) optimizer step of an epoch
 * updates the average: step_in_epoch % steps == 0, as torchvision's
 * `i % model_ema_steps == 0`. */
int cl_model_ema_due(const cl_model_ema *e, int64_t step_in_epoch);

/* The decay the next update uses: 0 when n_averaged is 0, else decay, or
 * with warmup min(decay, 1 - (1 + n_averaged)^(-2/3)). */
double cl_model_ema_next_decay(const cl_model_ema *e);

/* One update from g's weights; n_averaged and n_updates count it.
 * Allocation-free, the same bits for any thread count. */
void cl_model_ema_update(cl_model_ema *e, const cl_graph *g);

/* The next update copies again (torchvision, during the lr warm-up:
 * `model_ema.n_averaged.fill_(0)`). */
void cl_model_ema_reset(cl_model_ema *e);

/* Exchanges the copy with g's arenas: afterwards g holds the average
 * (evaluate it after cl_backend_sync_params) and the copy the trained
 * weights; a second call swaps them back. */
void cl_model_ema_swap(cl_model_ema *e, cl_graph *g);

#endif
