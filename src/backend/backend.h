/* A backend runs a planned graph: the reference loops (`ref`) or oneDNN
 * (`onednn`).  Model and training code call only these functions and never
 * name a backend; a backend that does not support a node runs it with the
 * reference kernel on plain copies (the `supports` check; ref_ops.h has the
 * kernels, cl_backend_fallback_ops says which ops fell back). */
#ifndef CL_BACKEND_BACKEND_H
#define CL_BACKEND_BACKEND_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "graph/graph.h"

typedef enum cl_plan_mode {
    CL_PLAN_TRAIN = 0, /* forward(training or not) + backward */
    CL_PLAN_INFER = 1  /* forward only, BN folded into conv where possible */
} cl_plan_mode;

/* The number format a trained model is run at for inference (predict,
 * eval, embed, retrieve, bench --mode infer, the API's precision option):
 * f32, bf16 weights and activations with f32 accumulation (the amp_level 2
 * inference plan: BN folded into bf16 convolutions), or int8 (a model
 * `classic quantize` wrote: the nodes with scales in g->quant as u8/s8 x
 * s8 primitives with s32 accumulation, the rest in f32).  Training keeps
 * its own amp_level.  docs/deploy.md says which to choose. */
typedef enum cl_precision {
    /* None asked for: the model's own, int8 for a quantized model, f32
     * otherwise (what cl_precision_parse gives for NULL). */
    CL_PRECISION_AUTO = -1,
    CL_PRECISION_F32 = 0,
    CL_PRECISION_BF16 = 1,
    CL_PRECISION_INT8 = 2,
    CL_PRECISION_COUNT
} cl_precision;

/* "f32" | "bf16" | "int8" (NULL: CL_PRECISION_AUTO) into *out; CL_ERR_ARG
 * naming the choices otherwise. */
cl_status cl_precision_parse(const char *s, cl_precision *out);
const char *cl_precision_name(cl_precision p);
/* The amp_level of an inference plan at precision p. */
int cl_precision_amp_level(cl_precision p);
/* CL_OK when backend `name` ("ref", "onednn") runs precision p at speed on
 * this CPU; otherwise CL_ERR_UNSUPPORTED with one sentence naming what is
 * missing (the ref backend is f32 only; bf16 inference needs avx512_bf16
 * or AMX, without which oneDNN emulates bf16, slower than f32). */
cl_status cl_precision_check(const char *name, cl_precision p);

typedef struct cl_backend_opts {
    int threads;   /* 0: OpenMP's default */
    int amp_level; /* 0: f32; 1: bf16 conv/matmul; 2: bf16 activations too */
    /* oneDNN: 1 runs every conv as oneDNN's convolution primitives; 0
     * (default) computes some shapes another way (onednn/conv.c): the weight
     * gradient of small outputs as im2col + matmul (wgrad_as_matmul), the
     * backward data of strided 1x1 convs on the stride grid
     * (dgrad_unstrided). */
    int direct_convs;
    /* oneDNN: 1 makes every conv write channels-last (nhwc) activations,
     * the layout oneDNN 2.6 picks for bf16 on AMX; 0 (default) takes
     * oneDNN's choice.  Lets the tests run the channels-last paths (BN,
     * SyncBatchNorm, the stride grid) on a CPU that would not pick it. */
    int channels_last;
    /* oneDNN, training plans: 1 measures, per conv shape, both ways of
     * computing each conv's backward where the other way applies (the
     * rewrites above against oneDNN's primitives) and plans the faster
     * one, then times each of oneDNN's implementations of every conv
     * primitive (per shape, forward, weight and data gradients) and plans
     * the fastest.  Costs a few extra plans and a few steps each at plan
     * time. */
    int autotune;
    /* oneDNN: the choices of an earlier plan of the same graph
     * (cl_dnnl_conv_paths), so that a resumed run computes exactly what
     * the first did; NULL to decide anew.  Takes precedence over
     * autotune. */
    const char *conv_paths;
    /* Tests: ops (bit 1u << op) that the onednn backend runs through the
     * reference fallback although it has kernels for them, so that the
     * fallback can be held against the ref backend; 0 in normal use. */
    unsigned fallback_ops;
    /* oneDNN inference plans: 1 runs every node with int8 scales
     * (cl_graph_quant_node) as an int8 primitive (precision int8). */
    int int8;
} cl_backend_opts;

/* A set of ops is a mask of bits 1u << op (cl_backend_opts.fallback_ops,
 * cl_backend_stats.fallback_ops): every op needs its bit. */
_Static_assert(CL_OP_COUNT <= sizeof(unsigned) * CHAR_BIT,
               "more ops than bits in an unsigned: the op masks of "
               "backend.h need a wider type");

/* What a plan decided and measured, for the caller to log or keep (read
 * through cl_backend_conv_paths, cl_backend_tune_counts and
 * cl_backend_fallback_ops). */
typedef struct cl_backend_stats {
    /* Each conv's backward path and its primitives' implementations, four
     * characters per node, owned by the backend (cl_backend_opts.conv_paths
     * takes it back); NULL where there is no choice to make. */
    const char *conv_paths;
    /* With autotune: conv backward passes measured both ways, and of
     * those the ones planned the other way. */
    int tune_measured, tune_rewritten;
    /* Ops whose nodes run the reference fallback (bits 1u << op). */
    unsigned fallback_ops;
    /* With autotune: conv primitives (per shape and part) planned with
     * another of oneDNN's implementations than its first choice. */
    int tune_impls;
} cl_backend_stats;

typedef struct cl_backend_vtbl {
    const char *name;
    /* Non-zero if the backend runs this node (of graph g, whose tensor
     * shapes it may look at) itself. */
    int (*supports)(const cl_graph *g, const cl_node *n);
    /* Creates every buffer, workspace and primitive the steps need. */
    cl_status (*plan)(cl_backend *be, cl_graph *g, cl_plan_mode mode);
    /* Copies one batch in: x (N,C,H,W) plain f32; labels (N) or soft
     * targets (N,K), either may be NULL when there is no loss to compute. */
    cl_status (*set_input)(cl_backend *be, const float *x,
                           const int32_t *labels, const float *targets);
    /* Runs forward; training != 0 uses batch statistics for BN and updates
     * the running ones.  *loss receives the mean loss when labels/targets
     * were set (may be NULL). */
    cl_status (*forward)(cl_backend *be, int training, float *loss);
    /* Runs backward from the loss, overwriting the graph's grad arena. */
    cl_status (*backward)(cl_backend *be);
    /* Canonical plain f32 copy of any activation (e.g. logits, features). */
    cl_status (*read)(cl_backend *be, int tensor, float *out);
    /* The graph's params or buffers changed (optimizer step, checkpoint
     * load): refresh any copies the backend keeps (reordered or bf16
     * weights, folded BN). */
    cl_status (*sync_params)(cl_backend *be);
    /* Fills *out (zeroed by the caller) with what the plan chose; NULL for
     * a backend that chooses nothing (all zero, conv_paths NULL). */
    void (*stats)(const cl_backend *be, cl_backend_stats *out);
    /* Frees be->priv and all it holds, also after a plan that failed half
     * way (cl_backend_create calls it then); cl_backend_destroy frees be
     * itself afterwards. */
    void (*destroy)(cl_backend *be);
} cl_backend_vtbl;

/* Calls from inside a step, for data-parallel training (dist/).  Both may
 * be NULL (single process). */
typedef struct cl_backend_hooks {
    void *ctx;
    /* Backward has finished writing the gradient of param tensor `tensor`
     * (its grad arena view is final for this step): an allreduce of that
     * bucket may start now, overlapped with the rest of backward. */
    void (*grad_ready)(void *ctx, int tensor);
    /* SyncBatchNorm: sums v[0..n) elementwise over all ranks in place.
     * Called by BN forward (per-channel sum and sum of squares, plus the
     * sample count) and BN backward (sum of dy and of dy * xhat). */
    cl_status (*allreduce_sum)(void *ctx, double *v, int n);
} cl_backend_hooks;

struct cl_backend {
    const cl_backend_vtbl *vt;
    cl_graph *g;
    cl_plan_mode mode;
    cl_backend_opts opts;
    cl_backend_hooks hooks;
    /* The key of the random numbers ops draw (cl_rng_init_node): the
     * run's seed and the training step, set by cl_backend_set_step before
     * a forward (0 and 0 until then). */
    uint64_t rng_seed;
    uint64_t rng_step;
    void *priv; /* the backend's own state */
};

/* Creates the backend called name ("ref" or "onednn") and plans g on it.
 * CL_ERR_ARG naming the choices when the name is unknown. */
cl_status cl_backend_create(cl_backend **out, const char *name, cl_graph *g,
                            cl_plan_mode mode, const cl_backend_opts *opts);
void cl_backend_destroy(cl_backend *be);
/* The plan's choice of each conv's backward (cl_backend_opts.conv_paths
 * gives it back to a later plan), or NULL where there is none to make
 * (the ref backend). */
const char *cl_backend_conv_paths(const cl_backend *be);
/* With autotune: conv backward passes measured both ways, and of those
 * the ones planned the other way; 0 and 0 without. */
/* With autotune: conv primitives (per shape and part) given another of
 * oneDNN's implementations than its first, measured faster. */
int cl_backend_tune_impls(const cl_backend *be);
void cl_backend_tune_counts(const cl_backend *be, int *measured,
                            int *rewritten);

/* The ops whose nodes this plan runs through the reference fallback (the
 * backend's supports() turned them down), as bits 1u << op; 0 when every
 * node runs on the backend's own kernels. */
unsigned cl_backend_fallback_ops(const cl_backend *be);
/* Their names, comma-separated, into buf ("" when none). */
void cl_backend_fallback_names(const cl_backend *be, char *buf, size_t n);

/* The seed and step that key the random numbers of the next forward and
 * backward (node i draws from cl_rng_init_node(seed, step, i)). */
static inline void cl_backend_set_step(cl_backend *be, uint64_t seed,
                                       uint64_t step)
{
    be->rng_seed = seed;
    be->rng_step = step;
}

static inline cl_status cl_backend_set_input(cl_backend *be, const float *x,
                                             const int32_t *labels,
                                             const float *targets)
{
    return be->vt->set_input(be, x, labels, targets);
}
static inline cl_status cl_backend_forward(cl_backend *be, int training,
                                           float *loss)
{
    return be->vt->forward(be, training, loss);
}
static inline cl_status cl_backend_backward(cl_backend *be)
{
    return be->vt->backward(be);
}
static inline cl_status cl_backend_read(cl_backend *be, int tensor, float *out)
{
    return be->vt->read(be, tensor, out);
}
static inline cl_status cl_backend_sync_params(cl_backend *be)
{
    return be->vt->sync_params(be);
}

/* The backends compiled in. */
extern const cl_backend_vtbl cl_backend_ref_vtbl;
extern const cl_backend_vtbl cl_backend_onednn_vtbl;

#endif
