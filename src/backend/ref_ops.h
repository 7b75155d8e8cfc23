/* The reference kernels at node level: one table indexed by op, generated
 * from ops.def, that the ref backend runs for every node and any other
 * backend runs for the ops its supports() turns down (the fallback).  The
 * kernels take plain f32 NCHW buffers and read the node's parameters and
 * buffers from the graph's arenas. */
#ifndef CL_BACKEND_REF_OPS_H
#define CL_BACKEND_REF_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/rng.h"

/* What a node's forward saves for its backward. */
typedef struct cl_ref_saved {
    float *mean, *invstd; /* batchnorm2d: batch statistics (C); layernorm:
                             mean and rstd per row */
    double count;         /* batchnorm2d: samples behind them, all ranks */
    int32_t *idx;         /* maxpool2d, training: argmax (N,C,OH,OW) */
    float *probs;         /* softmax_ce: (N,K) */
} cl_ref_saved;

/* One call of a node's kernel.  Pointers to activations are plain f32 in
 * the logical shape of their tensor. */
typedef struct cl_ref_args {
    cl_graph *g;
    const cl_node *n;
    const float *x[CL_NODE_MAX_IN]; /* inputs; NULL for labels / targets */
    float *y;                       /* output (backward: forward's output) */
    const float *dy;                /* backward: gradient of y */
    /* backward: input gradients, overwritten; NULL where not wanted */
    float *dx[CL_NODE_MAX_IN];
    cl_ref_saved *sv;
    int training;                  /* forward: batch statistics for BN */
    const cl_backend_hooks *hooks; /* allreduce_sum set: SyncBatchNorm */
    double *sums;                  /* reduction sums (cl_ref_saved_alloc) */
    /* softmax_ce: labels (N) or soft targets (N,K); neither gives a NaN
     * loss in y[0] */
    const int32_t *labels;
    const float *targets;
    /* The key of the node's random numbers (cl_ref_rng): the backend's
     * seed and step and the node's index in the graph. */
    uint64_t rng_seed, rng_step;
    int node;
} cl_ref_args;

/* Sets a's random key from the backend's (cl_backend_set_step) for node
 * `node`; the ref backend and the onednn fallback call it for every
 * kernel they run. */
void cl_ref_args_key(cl_ref_args *a, const cl_backend *be, int node);
/* The node's stream for this step: the same numbers on any backend and
 * thread count (a parallel kernel seeks, cl_rng_seek). */
void cl_ref_rng(const cl_ref_args *a, cl_rng *r);

typedef struct cl_ref_kernel {
    cl_status (*forward)(const cl_ref_args *a);
    /* The loss node's backward reads no dy (the loss's gradient is 1). */
    cl_status (*backward)(const cl_ref_args *a);
} cl_ref_kernel;

extern const cl_ref_kernel cl_ref_kernels[CL_OP_COUNT];

/* Allocates what node n's forward saves (train: for a training plan);
 * *sums receives the doubles of reduction sums its kernels need (0 when
 * none).  cl_ref_saved_free frees it, also after a failed allocation. */
cl_status cl_ref_saved_alloc(cl_ref_saved *sv, const cl_graph *g,
                             const cl_node *n, int train, size_t *sums);
void cl_ref_saved_free(cl_ref_saved *sv);

#endif
