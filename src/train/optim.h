/* Optimizers (momentum SGD, AdamW) and gradient helpers over flat f32 arenas
 * described by a list of segments, so that nothing here needs the graph.
 *
 * The parameter arena, the gradient arena and every optimizer state arena
 * share one layout: a segment {offset, n} names the same floats in each.  The
 * update rules follow PyTorch's torch.optim.SGD (dampening 0) and
 * torch.optim.AdamW; docs/training.md writes them out. */
#ifndef CL_TRAIN_OPTIM_H
#define CL_TRAIN_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "classic/status.h"
#include "graph/graph.h" /* CL_PARAM_* flags */

/* One parameter tensor (or any run of floats treated alike). */
typedef struct cl_optim_segment {
    size_t offset; /* in floats, into every arena */
    size_t n;      /* number of floats */
    int flags;     /* CL_PARAM_WEIGHT / BIAS / BN / HEAD / EMBED */
} cl_optim_segment;

typedef enum cl_optim_kind {
    CL_OPT_SGD = 0, /* momentum SGD, optional Nesterov */
    CL_OPT_ADAMW = 1
} cl_optim_kind;

typedef struct cl_optim_config {
    cl_optim_kind kind;
    double momentum;     /* SGD: 0 gives plain SGD */
    int nesterov;        /* SGD: needs momentum > 0 */
    double weight_decay; /* SGD: L2 added to the gradient; AdamW: decoupled */
    /* Non-zero: no weight decay on BN gamma/beta and on biases (mindcv's
     * filter_bias_and_bn, timm's no-decay group). */
    int filter_bias_and_bn;
    /* Segments flagged CL_PARAM_EMBED (transformer embedding tables):
     * negative, they follow filter_bias_and_bn (exempt when it is on, as
     * timm's no_weight_decay list); >= 0, their decay (torchvision's
     * transformer_embedding_decay). */
    double embed_weight_decay;
    double beta1, beta2, eps; /* AdamW */
    /* Fine-tuning: segments without CL_PARAM_HEAD get lr * backbone_lr_mult;
     * with freeze_backbone they are not touched at all (no step, no state
     * update, no weight decay), as if they had requires_grad = False. */
    double backbone_lr_mult;
    int freeze_backbone;
} cl_optim_config;

/* SGD, momentum 0.9, weight decay 1e-4 filtered off BN and bias (the
 * ResNet recipe); AdamW betas (0.9, 0.999), eps 1e-8; backbone mult 1. */
cl_optim_config cl_optim_config_default(void);

/* The state arenas, in the order cl_optim_state returns them. */
enum { CL_OPTIM_MAX_STATES = 2 };

/* Caller-owned; fields are read-only outside optim.c. */
typedef struct cl_optim {
    cl_optim_config cfg;
    int n_segments;
    cl_optim_segment *segments; /* copy of the caller's list */
    float *seg_lr_mult;         /* per segment: 1, backbone_lr_mult or 0 */
    float *seg_decay;           /* per segment: weight decay applied */
    unsigned char *seg_frozen;  /* per segment: 1 when frozen */
    int64_t *seg_steps;         /* per segment: updates made (Adam's t) */
    size_t n_floats;            /* arena length */
    int n_states;               /* SGD: 1 (0 when momentum is 0); AdamW: 2 */
    float *state[CL_OPTIM_MAX_STATES];
    int64_t n_steps; /* cl_optim_step calls since create (or restore) */
} cl_optim;

/* Copies segments (sorted by offset, non-overlapping, inside n_floats) and
 * allocates the zeroed state arenas.  CL_ERR_CONFIG names a bad config
 * field, CL_ERR_ARG a bad segment.  On failure *opt is left destroyable. */
cl_status cl_optim_create(cl_optim *opt, const cl_optim_config *cfg,
                          const cl_optim_segment *segments, int n_segments,
                          size_t n_floats);
/* Frees what create allocated; safe on a zeroed or destroyed struct. */
void cl_optim_destroy(cl_optim *opt);

/* One update of every non-frozen segment with base learning rate lr:
 * params and grads are arenas of n_floats.  Allocation-free, OpenMP-parallel,
 * the same bits for the same thread count.  CL_ERR_ARG if lr is negative or
 * not finite (then nothing is changed). */
cl_status cl_optim_step(cl_optim *opt, float *params, const float *grads,
                        float lr);

/* State arena k (0 <= k < n_states) for checkpointing: *ptr and its length
 * *n (= n_floats).  Write into it to restore.  CL_ERR_ARG if k is out of
 * range. */
cl_status cl_optim_state(cl_optim *opt, int k, float **ptr, size_t *n);
/* PyTorch's name of state k: "momentum_buffer", "exp_avg", "exp_avg_sq";
 * "" if k is out of range. */
const char *cl_optim_state_name(const cl_optim *opt, int k);
/* The per-segment step counters (n = n_segments) and the call counter, to
 * save with the state; set checks n and rejects negative counts.  A resumed
 * run that restores state, segment steps and n_steps continues bit-exactly. */
cl_status cl_optim_get_steps(const cl_optim *opt, int64_t *seg_steps, int n,
                             int64_t *n_steps);
cl_status cl_optim_set_steps(cl_optim *opt, const int64_t *seg_steps, int n,
                             int64_t n_steps);

/* Zeroes segment seg's state and step counter, as for a freshly created
 * parameter (a new classifier head must not inherit the old head's
 * momentum).  CL_ERR_ARG if seg is out of range. */
cl_status cl_optim_reset_segment(cl_optim *opt, int seg);

/* Global L2 norm of the gradients of the optimizer's non-frozen segments
 * (frozen ones have no gradient in PyTorch's sense), and clipping of those
 * by cl_grad_clip's rule. */
double cl_optim_grad_norm(const cl_optim *opt, const float *grads);
double cl_optim_clip_grad(const cl_optim *opt, float *grads, double max_norm);

/* ---- gradient helpers -------------------------------------------------- */

/* sqrt(sum of g^2) over the segments, accumulated in double.  Bits depend on
 * the OpenMP thread count only through the order of the partial sums. */
double cl_grad_global_norm(const float *grads, const cl_optim_segment *segs,
                           int n_segs);
/* torch.nn.utils.clip_grad_norm_: with norm the global norm, scales the
 * segments by c = max_norm / (norm + 1e-6) when c < 1.  Returns the norm
 * before clipping.  A non-finite norm scales nothing (the caller skips the
 * step); max_norm <= 0 only measures. */
double cl_grad_clip(float *grads, const cl_optim_segment *segs, int n_segs,
                    double max_norm);
/* grads[i] *= s for i < n: averaging over accumulation steps or ranks. */
void cl_grad_scale(float *grads, size_t n, float s);
/* 1 if no element is NaN or infinite, else 0. */
int cl_grad_all_finite(const float *grads, size_t n);

#endif
