/* The oneDNN backend's own interface between its files: the plan's
 * context, its steps and arena stores, the per-op node data, and the table
 * of op planners.
 *
 * A plan, in order (onednn.c calls plan.c, tune.c, plan.c): (1) the
 * context and which nodes fall back to the reference kernels
 * (plan.c); (2) the way of each conv's backward (tune.c); (3) lowering
 * decides which nodes fuse into which (the op table's lower entries,
 * lower.c: BN + ReLU, add + ReLU; for inference conv + BN + add + ReLU);
 * (4) forward and backward steps are planned node by node through the op
 * table (one file per op family: conv.c, bn.c, eltwise.c, pool.c,
 * linear.c, add.c, loss.c, norm.c, softmax.c, matmul.c with attention.c,
 * tokens.c; fallback.c for the ops the table lacks), each step naming
 * arena buffers ("stores") or external memory (the graph's arenas,
 * reordered weight copies); each use stamps the store with the step's
 * time; (5) the arena is laid out by those lifetimes (context.c); (6)
 * oneDNN memory objects are made once for every argument.  The steps then
 * only execute (exec.c).
 *
 * The files call one way only (scripts/check-call-graph.sh holds it):
 *
 *   onednn.c (the vtable and its plan)
 *     -> tune.c -> plan.c (the op table, the plan driver)
 *     -> the op files above
 *     -> the helpers they share: plain.c (plain views) -> grad.c
 *        (backward planning) -> amp.c (copies in another type), and
 *        layout.c (activation layouts)
 *     -> context.c (stores, descriptors, primitives, steps, the arena)
 *
 * and exec.c (running the steps) below plan.c, tune.c and onednn.c.  A
 * helper that two op files need goes into a helper file, never into an op
 * file or plan.c. */
#ifndef CL_BACKEND_ONEDNN_INTERNAL_H
#define CL_BACKEND_ONEDNN_INTERNAL_H

#include <dnnl.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/onednn/context.h"
#include "backend/onednn/layout.h"
#include "backend/ref_ops.h"
#include "core/error.h"
#include "core/mem.h"

/* Parameters, their gradients, BN statistics, the logits and the loss are
 * f32 at every amp level; activations, their gradients and the weight
 * copies the primitives read are f32 or bf16 (see conv_dt, act_dt). */
#define DN_DT dnnl_f32

enum { DN_MAX_ARGS = 12 };

typedef enum dn_ref_kind {
    REF_STORE,   /* arena buffer */
    REF_EXT,     /* memory owned elsewhere, fixed address */
    REF_SCRATCH, /* the shared scratchpad */
    REF_USER     /* the caller's input batch, handle set per call */
} dn_ref_kind;

typedef struct dn_arg {
    int arg; /* DNNL_ARG_*, or a position for custom steps */
    dn_ref_kind kind;
    int store;
    size_t off; /* REF_STORE: bytes from the store's start */
    void *ptr;
    dnnl_memory_desc_t md;
} dn_arg;

typedef enum dn_step_kind {
    STEP_PRIM, /* a oneDNN primitive */
    STEP_HOOK, /* grad_ready(aux) */
    STEP_RUN   /* run(d, step): a loop of this backend's own */
} dn_step_kind;

typedef struct dn_ctx dn_ctx;
typedef struct dn_step dn_step;
typedef cl_status (*dn_run_fn)(dn_ctx *d, const dn_step *s);

struct dn_step {
    dn_step_kind kind;
    dn_run_fn run; /* STEP_RUN */
    int node;
    const char *what;
    dnnl_primitive_t prim; /* not owned */
    int time;
    int aux;
    int part; /* conv backward: 1 weight gradient, 2 data, else 0 */
    int nargs;
    dn_arg args[DN_MAX_ARGS];
    dnnl_memory_t mem[DN_MAX_ARGS];
    dnnl_exec_arg_t exec[DN_MAX_ARGS];
};

typedef struct dn_list {
    dn_step *s;
    int n, cap;
} dn_list;

typedef struct dn_tensor {
    int rep;       /* tensor whose storage holds this one's value */
    int store;     /* forward value, or -1 */
    int dstore;    /* gradient, or -1 */
    int has_md;    /* md is set */
    int clobbered; /* value overwritten or never materialised */
    dnnl_memory_desc_t md;
    int cast;                   /* the value in the other type, or -1 */
    dnnl_memory_desc_t cast_md; /* its md: md with the other data type */
    int q8;                     /* int8 plans: its u8/s8 copy, or -1 */
    dnnl_memory_desc_t q8_md;
} dn_tensor;

/* ---- per-op node data ---------------------------------------------------- */

/* Conv and linear: the weights and what backward reads of the forward. */
typedef struct dn_weighted {
    int bn;  /* inference conv: BN node folded in, or -1 */
    int sum; /* inference conv: tensor added by a sum post-op, or -1 */
    dnnl_memory_desc_t w_md, wb_md; /* forward / backward-data weights */
    float *w, *wb;    /* reordered weight copies, NULL for the plain arena */
    float *bias;      /* inference: folded bias (out_ch) */
    float *qbias;     /* int8: the bias over the output scales (out_ch) */
    float wmul;       /* int8: the weights' step in units of s_w (1 or 2) */
    int last;         /* inference conv: the tensor its fused chain ends in */
    int qout;         /* int8 conv: 1 when it writes that tensor as u8/s8
                         at its readers' scale (every reader int8) */
    cl_bn_layout lay; /* a conv whose dx runs on the stride grid: its
                         input's layout */
    int src;          /* the store the forward reads as src (a bf16 copy
                         under amp), for backward */
    dnnl_memory_desc_t src_md;
} dn_weighted;

typedef struct dn_bn {
    int mean, var;    /* stores of the batch statistics */
    cl_bn_layout lay; /* its input's layout */
    double count;     /* samples of the last training forward's statistics
                         (all ranks' with SyncBatchNorm) */
} dn_bn;

typedef struct dn_pool {
    int ws; /* workspace store (max pooling's argmax), or -1 */
} dn_pool;

typedef struct dn_add {
    int inplace; /* output written over input 0 (after swap) */
    int swap;    /* inputs exchanged */
} dn_add;

/* LayerNorm: the plain value forward reads (a copy when its input is
 * laid out otherwise), for backward, and the stores of the statistics. */
typedef struct dn_norm {
    int src;
    dnnl_memory_desc_t src_md;
    int mean, rstd; /* training plans only, else -1 */
} dn_norm;

/* An op run by the reference kernels (fallback.c). */
typedef struct dn_fallback {
    cl_ref_saved sv;
    int x[CL_NODE_MAX_IN]; /* stores of plain f32 inputs, or -1 */
    int y;                 /* store of the plain f32 output */
} dn_fallback;

/* row_gather, droppath, token_meanpool (tokens.c): the positions that
 * read each input row (R + 1 starts, M positions), sorted from the index
 * once when row_gather's backward is planned, so every backward sums them
 * in position order on any thread count. */
typedef struct dn_tokens {
    int64_t *start, *list;
} dn_tokens;

/* A matmul operand (or output) read (written) in place through strides
 * instead of by a row_gather that would copy it (lower.c): rows of `cols`
 * elements of tensor x, matrix (i0, i1) of the (n0, n1) batch starting
 * at row base + i0 s[0] + i1 s[1], its rows s[2] rows apart. */
typedef struct dn_view {
    int x; /* tensor whose storage is read or written, or -1: no view */
    int64_t n0, n1, base, s[3];
} dn_view;

/* matmul (matmul.c): the stores of a and b as the forward read them, and
 * a, b and the output as views (v[0], v[1], v[2]) where lowering made
 * them so. */
typedef struct dn_matmul {
    int a, b;
    dn_view v[3];
    int attn; /* inference: the softmax node whose scores matmul and
                 softmax this matmul runs with it as one attention loop
                 (attention.c), or -1 */
} dn_matmul;

typedef struct dn_node {
    int skip;     /* fused into another node's primitive */
    int relu;     /* BN / add / inference conv: ReLU fused */
    int gelu;     /* inference linear: GELU fused */
    int fallback; /* run by the reference kernels (fallback.c) */
    dnnl_primitive_desc_t fwd_pd; /* hint for backward (not owned) */
    union {
        dn_weighted w; /* conv2d, linear */
        dn_bn bn;
        dn_pool pool;
        dn_add add;
        dn_norm ln;
        dn_fallback fb;
        dn_tokens tok;
        dn_matmul mm;
    } u;
} dn_node;

struct dn_ctx {
    cl_backend *be;
    cl_graph *g;
    cl_plan_mode mode;
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    dn_tensor *t;
    dn_node *nd;
    int *ncons, *lastc; /* per tensor: consumers, last consumer index */
    cl_dnnl_block *st;
    int n_st, cap_st;
    dn_list fwd_train, fwd_eval, bwd, sync, in;
    dnnl_primitive_t *prims;
    int n_prims, cap_prims;
    dnnl_primitive_desc_t *pds;
    int n_pds, cap_pds;
    char *arena;
    size_t arena_bytes;
    void *scratch;
    size_t scratch_bytes;
    float *fold;
    size_t fold_floats;
    int32_t *labels;
    float *targets;
    int has_labels, has_targets;
    float loss;
    int dirty;    /* params changed: sync before the next forward */
    int trained;  /* the last forward was a training one */
    int n_time;   /* last time stamp + 1 */
    int in_plain; /* input md is plain: set_input copies */
    /* SyncBatchNorm and the fallback's reference kernels: sums for the
     * allreduce hook, sync_len doubles. */
    double *sync_sums;
    size_t sync_len;
    int amp; /* 0: f32; 1: bf16 conv / matmul; 2: bf16 activations too */
    /* int8 plans below VNNI: u8 x s8 products are summed in pairs into 16
     * bits (vpmaddubsw), which can saturate (amp.c). */
    int q8_half;
    /* Conv backward paths, one char per node (cl_dnnl_conv_paths): wanted
     * at plan start, what was planned once the node is planned. */
    char *paths;
    /* oneDNN's implementation of each conv primitive, three chars per node
     * (forward, weight gradient, data gradient: d->part): '0' is oneDNN's
     * first choice, 'k' the k-th of its list without the reference loops.
     * impl_count (measuring plans) and impl_name, per (node, part), are
     * what the plan found. */
    char *impls;
    int *impl_count;
    char (*impl_name)[32];
    /* paths and impls as one string, four chars per node, for the caller
     * (cl_dnnl_conv_paths) and back (cl_backend_opts.conv_paths). */
    char *choice;
    int part;     /* the part of a conv backward being planned */
    double *prof; /* measuring: seconds per (node, part), or NULL */
    int tune_measured, tune_rewritten;
    int tune_impls; /* (shape, part) planned with another implementation */
    unsigned fallback_ops; /* bit op set: a node of that op runs fallback.c */
    /* cl_dnnl_profile_start: seconds per kind of step, or NULL. */
    struct cl_dnnl_prof_row *sprof;
    int n_sprof;
};

/* ---- the op planners -------------------------------------------------------
 *
 * Each op family's planners (one file each), the entries of the op table
 * (plan.c): init sets a node's data to its defaults, lower makes its
 * fusion decisions, fwd and bwd plan its steps, free frees its data. */
void cl_dnnl_weighted_init(dn_node *x);
void cl_dnnl_weighted_free(dn_node *x);
void cl_dnnl_conv_lower(dn_ctx *d, int i);
cl_status cl_dnnl_conv_fwd(dn_ctx *d, int i);
cl_status cl_dnnl_conv_bwd(dn_ctx *d, int i);
void cl_dnnl_bn_init(dn_node *x);
void cl_dnnl_bn_lower(dn_ctx *d, int i);
cl_status cl_dnnl_bn_fwd(dn_ctx *d, int i);
cl_status cl_dnnl_bn_bwd(dn_ctx *d, int i);
cl_status cl_dnnl_relu_fwd(dn_ctx *d, int i);
cl_status cl_dnnl_relu_bwd(dn_ctx *d, int i);
void cl_dnnl_pool_init(dn_node *x);
cl_status cl_dnnl_maxpool_fwd(dn_ctx *d, int i);
cl_status cl_dnnl_maxpool_bwd(dn_ctx *d, int i);
cl_status cl_dnnl_gap_fwd(dn_ctx *d, int i);
cl_status cl_dnnl_gap_bwd(dn_ctx *d, int i);
void cl_dnnl_linear_lower(dn_ctx *d, int i);
cl_status cl_dnnl_linear_fwd(dn_ctx *d, int i);
cl_status cl_dnnl_linear_bwd(dn_ctx *d, int i);
void cl_dnnl_tokens_free(dn_node *x);
cl_status cl_dnnl_row_gather_fwd(dn_ctx *d, int i);
cl_status cl_dnnl_row_gather_bwd(dn_ctx *d, int i);
void cl_dnnl_droppath_lower(dn_ctx *d, int i);
cl_status cl_dnnl_droppath_fwd(dn_ctx *d, int i);
cl_status cl_dnnl_droppath_bwd(dn_ctx *d, int i);
cl_status cl_dnnl_token_meanpool_fwd(dn_ctx *d, int i);
cl_status cl_dnnl_token_meanpool_bwd(dn_ctx *d, int i);
void cl_dnnl_matmul_init(dn_node *x);
void cl_dnnl_matmul_lower(dn_ctx *d, int i);
cl_status cl_dnnl_matmul_fwd(dn_ctx *d, int i);
cl_status cl_dnnl_matmul_bwd(dn_ctx *d, int i);
void cl_dnnl_add_lower(dn_ctx *d, int i);
cl_status cl_dnnl_add_fwd(dn_ctx *d, int i);
cl_status cl_dnnl_add_bwd(dn_ctx *d, int i);
cl_status cl_dnnl_loss_fwd(dn_ctx *d, int i);
void cl_dnnl_norm_init(dn_node *x);
cl_status cl_dnnl_layernorm_fwd(dn_ctx *d, int i);
cl_status cl_dnnl_layernorm_bwd(dn_ctx *d, int i);
cl_status cl_dnnl_gelu_fwd(dn_ctx *d, int i);
cl_status cl_dnnl_gelu_bwd(dn_ctx *d, int i);
void cl_dnnl_softmax_lower(dn_ctx *d, int i);
cl_status cl_dnnl_softmax_fwd(dn_ctx *d, int i);
/* softmax(alpha q k^T + bias + mask) v for every matrix of the batch as
 * one loop (attention.c): a step of an inference plan, its arguments the
 * AT_* positions. */
enum { AT_Q, AT_K, AT_V, AT_BIAS, AT_Y };
/* The most rows, keys and head width it takes (its buffers are on the
 * stack); the widths of q and v multiples of AT_WIDTH_STEP (whole
 * vectors). */
#define AT_MAX 64
#define AT_WIDTH_STEP 16
cl_status cl_dnnl_attention_run(dn_ctx *d, const dn_step *s);
cl_status cl_dnnl_softmax_bwd(dn_ctx *d, int i);
/* The reference fallback, for any op with a reference kernel. */
void cl_dnnl_fallback_init(dn_node *x);
cl_status cl_dnnl_fallback_fwd(dn_ctx *d, int i);
cl_status cl_dnnl_fallback_bwd(dn_ctx *d, int i);
void cl_dnnl_fallback_free(dn_node *x);

/* ---- errors (context.c) -------------------------------------------------- */

cl_status cl_dnnl_fail(const dn_ctx *d, dnnl_status_t s, int node,
                       const char *what);

/* Error checks.  A function either returns at the first error (CL_TRY,
 * core/error.h), or declares `cl_status st = CL_OK` and a `fail:` label
 * that undoes what it made and returns st, and then checks every call
 * with TRY_GOTO and DN, both of which set st and jump to fail:.  Never
 * both kinds in one function.  DN checks a dnnl call, making its status a
 * cl_status that names the node and what failed. */
#define DN(call, node, what)                                                   \
    do {                                                                       \
        dnnl_status_t dn__s = (call);                                          \
        if (dn__s != dnnl_success) {                                           \
            st = cl_dnnl_fail(d, dn__s, (node), (what));                       \
            goto fail;                                                         \
        }                                                                      \
    } while (0)

#define TRY_GOTO(expr)                                                         \
    do {                                                                       \
        st = (expr);                                                           \
        if (st != CL_OK)                                                       \
            goto fail;                                                         \
    } while (0)

cl_status cl_dnnl_grow(void **p, int *cap, int need, size_t elem,
                       const char *what);

/* ---- small helpers --------------------------------------------------------
 */

static inline int rep(const dn_ctx *d, int t)
{
    while (d->t[t].rep != t)
        t = d->t[t].rep;
    return t;
}

static inline const cl_gtensor *gt(const dn_ctx *d, int t)
{
    return &d->g->tensors[t];
}

/* Backward time of node i: the steps of backward run in reverse order. */
static inline int tb(const dn_ctx *d, int i)
{
    return 2 * d->g->n_nodes - 1 - i;
}

/* md with another element type, the layout (strides in elements) kept. */
static inline dnnl_memory_desc_t md_as(const dnnl_memory_desc_t *md,
                                       dnnl_data_type_t dt)
{
    dnnl_memory_desc_t r = *md;
    r.data_type = dt;
    return r;
}

/* Element k of a plain f32 or bf16 (bf) array, as f32; and back, rounded
 * as cl_bf16_from_f32 does.  The backend's own loops read activations of
 * either type through these. */
static inline float dn_get(const void *p, int64_t k, int bf)
{
    return bf ? cl_f32_from_bf16(((const uint16_t *)p)[k])
              : ((const float *)p)[k];
}

static inline void dn_put(void *p, int64_t k, float v, int bf)
{
    if (bf)
        ((uint16_t *)p)[k] = cl_bf16_from_f32(v);
    else
        ((float *)p)[k] = v;
}

static inline int md_bf16(const dnnl_memory_desc_t *md)
{
    return md->data_type == dnnl_bf16;
}

static inline int md_eq(const dnnl_memory_desc_t *a,
                        const dnnl_memory_desc_t *b)
{
    return dnnl_memory_desc_equal(a, b);
}

static inline size_t md_size(const dnnl_memory_desc_t *md)
{
    return dnnl_memory_desc_get_size(md);
}

static inline void dims_of(const cl_shape *s, dnnl_dims_t dims)
{
    for (int i = 0; i < s->ndim; i++)
        dims[i] = s->d[i];
}

/* The md of node input x, or NULL when it is the graph input not yet laid
 * out (the node may then choose). */
static inline const dnnl_memory_desc_t *in_md(dn_ctx *d, int x)
{
    int r = rep(d, x);
    return d->t[r].has_md ? &d->t[r].md : NULL;
}

/* The list(s) forward steps go to: training and evaluation forwards of a
 * TRAIN plan share every primitive but BN's. */
static inline int n_fwd_lists(const dn_ctx *d)
{
    return d->mode == CL_PLAN_TRAIN ? 2 : 1;
}

static inline dn_list *fwd_list(dn_ctx *d, int k)
{
    if (d->mode == CL_PLAN_INFER)
        return &d->fwd_eval;
    return k == 0 ? &d->fwd_train : &d->fwd_eval;
}

/* The node reading tensor t when it has exactly one consumer, else -1. */
static inline int only_consumer(const dn_ctx *d, int t)
{
    if (d->ncons[t] != 1)
        return -1;
    return d->lastc[t];
}

static inline int is_edge(const dn_ctx *d, int t)
{
    const cl_graph *g = d->g;
    return t == g->input || t == g->logits || t == g->features;
}

/* ---- stores, mds, primitives and steps (context.c) ----------------------- */

cl_status cl_dnnl_store_new(dn_ctx *d, size_t bytes, int *out);
void cl_dnnl_touch(dn_ctx *d, int s, int time);
cl_status cl_dnnl_md_store(dn_ctx *d, const dnnl_memory_desc_t *md, int *out);
/* Plain row-major md of the given dims. */
void cl_dnnl_md_plain(dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims);
void cl_dnnl_md_any(dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims,
                    dnnl_data_type_t dt);
dnnl_memory_desc_t cl_dnnl_qmd(const_dnnl_primitive_desc_t pd, dnnl_query_t q,
                               int idx);

/* The plain md with the same dims as md. */
static inline void md_plain_like(dnnl_memory_desc_t *out,
                                 const dnnl_memory_desc_t *md)
{
    cl_dnnl_md_plain(out, md->ndims, md->dims);
}

static inline void md_1d(dnnl_memory_desc_t *md, int64_t n)
{
    dnnl_dims_t dims = {n};
    cl_dnnl_md_plain(md, 1, dims);
}

cl_status cl_dnnl_attr_new(dn_ctx *d, dnnl_primitive_attr_t *attr);
cl_status cl_dnnl_attr_post(dn_ctx *d, int sum, dnnl_alg_kind_t act,
                            dnnl_primitive_attr_t *attr);
cl_status cl_dnnl_prim_make(dn_ctx *d, int node, const char *what,
                            const_dnnl_op_desc_t desc,
                            const_dnnl_primitive_attr_t attr,
                            const_dnnl_primitive_desc_t hint,
                            dnnl_primitive_desc_t *pd, dnnl_primitive_t *prim);
/* A convolution's primitive as cl_dnnl_prim_make makes one, but of the
 * implementation d->impls asks for this node and d->part (the k-th of
 * oneDNN's list that is not its reference loops; the first where the CPU
 * has no k-th), noting its count and name where the plan keeps them. */
cl_status cl_dnnl_conv_prim_make(dn_ctx *d, int node, const char *what,
                                 const_dnnl_op_desc_t desc,
                                 const_dnnl_primitive_attr_t attr,
                                 const_dnnl_primitive_desc_t hint,
                                 dnnl_primitive_desc_t *pd,
                                 dnnl_primitive_t *prim);
cl_status cl_dnnl_reorder_make(dn_ctx *d, int node, const char *what,
                               const dnnl_memory_desc_t *src,
                               const dnnl_memory_desc_t *dst,
                               dnnl_primitive_desc_t *pd,
                               dnnl_primitive_t *prim);
/* As cl_dnnl_reorder_make, each value multiplied by scales[] on the way
 * (oneDNN's output scales: n of them over the dims in mask, n == 1 and
 * mask 0 for one), rounded to nearest even and saturated into dst's type:
 * how int8 copies are made. */
cl_status cl_dnnl_reorder_make_scaled(dn_ctx *d, int node, const char *what,
                                      const dnnl_memory_desc_t *src,
                                      const dnnl_memory_desc_t *dst, int64_t n,
                                      int mask, const float *scales,
                                      dnnl_primitive_desc_t *pd,
                                      dnnl_primitive_t *prim);
cl_status cl_dnnl_step_new(dn_ctx *d, dn_list *l, dn_step_kind k, int node,
                           const char *what, int time, dn_step **out);
/* A step that runs fn (STEP_RUN). */
cl_status cl_dnnl_step_run(dn_ctx *d, dn_list *l, dn_run_fn fn, int node,
                           const char *what, int time, dn_step **out);
/* Store argument off bytes into the store (a view of part of it). */
void cl_dnnl_arg_store_at(dn_ctx *d, dn_step *s, int arg, int store, size_t off,
                          const dnnl_memory_desc_t *md);
void cl_dnnl_arg_store(dn_ctx *d, dn_step *s, int arg, int store,
                       const dnnl_memory_desc_t *md);
void cl_dnnl_arg_ext(dn_step *s, int arg, void *ptr,
                     const dnnl_memory_desc_t *md);
cl_status cl_dnnl_step_prim(dn_ctx *d, dn_list *l, int node, const char *what,
                            int time, const_dnnl_primitive_desc_t pd,
                            dnnl_primitive_t prim, dn_step **out);
/* A reorder of store from (md) into store to (want) as a step of node i in
 * list l at time. */
cl_status cl_dnnl_reorder_step(dn_ctx *d, dn_list *l, int i, int time,
                               const char *what, int from,
                               const dnnl_memory_desc_t *md, int to,
                               const dnnl_memory_desc_t *want);
void *cl_dnnl_arg_ptr(const dn_ctx *d, const dn_arg *a);
/* The memory of argument k of step s (the backend's own loops). */
static inline void *dn_step_arg(const dn_ctx *d, const dn_step *s, int k)
{
    return cl_dnnl_arg_ptr(d, &s->args[k]);
}
cl_status cl_dnnl_set_md(dn_ctx *d, int t, const dnnl_memory_desc_t *md,
                         int store);
cl_status cl_dnnl_ensure_input_md(dn_ctx *d, int x);

/* ---- plain views (plain.c) --------------------------------------------------
 *
 * Ops that see an activation as rows (tokens.c, matmul.c, linear over rank
 * 3 and up, layernorm, softmax) read it plain (row-major): a conv's output may
 * be blocked (nChw16c) or channels-last, and reaches them through a reorder. */

/* The value of x in type dt (dnnl_data_type_undef: x's own type), plain:
 * x's own store (or its shared cast) when x is plain, else a copy
 * reordered before node i in each forward list. */
cl_status cl_dnnl_plain_value(dn_ctx *d, int i, int x, dnnl_data_type_t dt,
                              dnnl_memory_desc_t *md, int *store);
/* Where node i writes x's gradient plain in x's type (*pm): *dx, the
 * gradient store itself when x is plain, else a store that
 * cl_dnnl_plain_grad_end reorders into it.  *tgt < 0: no gradient. */
cl_status cl_dnnl_plain_grad(dn_ctx *d, int i, int x, dnnl_memory_desc_t *pm,
                             int *dx, int *tgt, int *acc);
cl_status cl_dnnl_plain_grad_end(dn_ctx *d, int i, int x,
                                 const dnnl_memory_desc_t *pm, int dx, int tgt,
                                 int acc);
/* A plain md of nd dims in type dt. */
void cl_dnnl_md_plain_dt(dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims,
                         dnnl_data_type_t dt);

/* ---- mixed precision (amp.c) ----------------------------------------------
 */

/* Type of the src and weights of convolutions and inner products. */
static inline dnnl_data_type_t conv_dt(const dn_ctx *d)
{
    return d->amp >= 1 ? dnnl_bf16 : dnnl_f32;
}

/* Type of a convolution's output. */
static inline dnnl_data_type_t act_dt(const dn_ctx *d)
{
    return d->amp >= 2 ? dnnl_bf16 : dnnl_f32;
}

cl_status cl_dnnl_value_as(dn_ctx *d, int i, int x, dnnl_data_type_t dt,
                           dnnl_memory_desc_t *md, int *store);
/* int8 plans: the value of x as q = x / g->quant->act_scale[x], rounded and
 * saturated to u8 or s8 (act_signed), in layout want (the int8 primitive's
 * src md); one copy per tensor, made before node i, shared by every
 * reader that wants the same md. */
cl_status cl_dnnl_value_q8(dn_ctx *d, int i, int x,
                           const dnnl_memory_desc_t *want, int *store);
/* gamma / sqrt(var + eps) of channel o of BN node bn: the factor folding
 * multiplies a conv's weights by, in f32 as every fold computes it. */
float cl_dnnl_bn_fold_factor(const cl_graph *g, int bn, int o);
/* Whether node i (conv or linear) runs int8 in this plan (amp.c says how). */
int cl_dnnl_q8_node(const dn_ctx *d, int i);
/* Sets attr (its post-ops set) to the output scales of int8 node i, the
 * primitive of op descriptor desc: s_x s_w per output channel (dst's
 * dimension 1), and decides the node's weight step (amp.c). */
cl_status cl_dnnl_q8_output_scales(dn_ctx *d, int i, const_dnnl_op_desc_t desc,
                                   dnnl_primitive_attr_t attr);
/* CL_ERR_UNSUPPORTED naming node i when the int8 primitive pd is one of
 * oneDNN's reference implementations: never a silent slow path. */
cl_status cl_dnnl_q8_check_impl(const dn_ctx *d, int i,
                                const_dnnl_primitive_desc_t pd);
/* Whether every reader of tensor t runs int8 in this plan and reads it as
 * its input 0, so that its producer may write it quantized. */
int cl_dnnl_q8_readers_only(const dn_ctx *d, int t);
/* The s8 copy of node i's weights (x->w in x->w_md, already queried) from
 * plain f32 w, and with has_bias its bias over the output scales (x->qbias,
 * from the folded bias when BN folded in, else the node's), as sync steps
 * after any fold. */
cl_status cl_dnnl_q8_weights(dn_ctx *d, int i, const dnnl_memory_desc_t *plain,
                             float *w, int has_bias);
cl_status cl_dnnl_bwd_copy(dn_ctx *d, int i, const char *what, int s,
                           const dnnl_memory_desc_t *md,
                           const dnnl_memory_desc_t *want, int *store);
cl_status cl_dnnl_grad_as(dn_ctx *d, int i, int ds,
                          const dnnl_memory_desc_t *md, dnnl_data_type_t dt,
                          dnnl_memory_desc_t *out, int *store);
cl_status cl_dnnl_weight_copy(dn_ctx *d, int node, const char *what,
                              const dnnl_memory_desc_t *plain, void *src,
                              const dnnl_memory_desc_t *md, float **copy);

/* ---- backward planning shared by the op families (grad.c) ---------------- */

cl_status cl_dnnl_grad_target(dn_ctx *d, int i, int x, int *store, int *acc);
cl_status cl_dnnl_accumulate(dn_ctx *d, int i, int x, int src);
cl_status cl_dnnl_hook_step(dn_ctx *d, int i, int param);
cl_status cl_dnnl_out_grad(dn_ctx *d, int i, int *store);
cl_status cl_dnnl_diff_weights(dn_ctx *d, int i, dn_step *s,
                               const dnnl_memory_desc_t *dwmd,
                               const dnnl_memory_desc_t *plain, float *grad,
                               int *tmp);
cl_status cl_dnnl_diff_weights_back(dn_ctx *d, int i, int tmp,
                                    const dnnl_memory_desc_t *dwmd,
                                    const dnnl_memory_desc_t *plain,
                                    float *grad);
cl_status cl_dnnl_wgrad_step(dn_ctx *d, int i, const char *what,
                             dnnl_primitive_desc_t pd, dnnl_primitive_t prim,
                             int src, const dnnl_memory_desc_t *smd, int dy,
                             const dnnl_memory_desc_t *dmd,
                             const dnnl_memory_desc_t *wplain,
                             const dnnl_memory_desc_t *bmd);
cl_status cl_dnnl_bwd_data_step(dn_ctx *d, int i, const char *what,
                                dnnl_primitive_desc_t pd, dnnl_primitive_t prim,
                                int dy, const dnnl_memory_desc_t *dmd,
                                const dnnl_memory_desc_t *wplain, float *w,
                                int dx, const dnnl_memory_desc_t *dxmd);
/* ---- activation layouts (layout.c, layout.h) ---------------------------- */

/* The index of md's layout among those BN and the stride grid work on, or
 * -1; the format tag of index k. */
int cl_dnnl_md_act_tag(const dnnl_memory_desc_t *md);
dnnl_format_tag_t cl_dnnl_act_layout_tag(int k);
/* Fills *l and returns 1 if md is one of those layouts, else returns 0. */
int cl_dnnl_md_act_layout(const dnnl_memory_desc_t *md, cl_bn_layout *l);

/* ---- conv backward paths (conv.c, tune.c) -------------------------------- */

/* The largest output (OH * OW) whose weight gradient runs as a matmul
 * without measuring (conv.c says why). */
enum { DN_WGRAD_MATMUL_MAX_HW = 16 };
int cl_dnnl_wgrad_matmul_ok(const cl_graph *g, int i);
int cl_dnnl_dgrad_grid_ok(const cl_graph *g, int i);
/* d->paths before planning: the caller's, measured, or the thresholds. */
cl_status cl_dnnl_choose_paths(dn_ctx *d);
/* d->choice from the plan's paths and implementations, once planned. */
cl_status cl_dnnl_choice_done(dn_ctx *d);

/* ---- the plan (plan.c) -----------------------------------------------------
 *
 * The vtable's plan (onednn.c) is begin, cl_dnnl_choose_paths, build;
 * destroy frees what any of them made. */

int cl_dnnl_supports(const cl_graph *g, const cl_node *n);
/* The context (be->priv), node data, the fallback decisions. */
cl_status cl_dnnl_plan_begin(cl_backend *be, cl_graph *g, cl_plan_mode mode);
/* Lowering, the steps, the arena and the memory objects. */
cl_status cl_dnnl_plan_build(dn_ctx *d);
void cl_dnnl_destroy(cl_backend *be);

/* ---- execution (exec.c) ---------------------------------------------------
 */

/* Kinds of step cl_dnnl_profile_start times at most. */
enum { DN_PROF_KINDS = 256 };

cl_status cl_dnnl_run_list(dn_ctx *d, dn_list *l);
cl_status cl_dnnl_bind_list(dn_ctx *d, dn_list *l);
void cl_dnnl_free_list(dn_list *l);
void cl_dnnl_ftz(void);
/* The vtable's entries that run a plan (backend.h says what each does). */
cl_status cl_dnnl_set_input(cl_backend *be, const float *x,
                            const int32_t *labels, const float *targets);
cl_status cl_dnnl_forward(cl_backend *be, int training, float *loss);
cl_status cl_dnnl_backward(cl_backend *be);
cl_status cl_dnnl_read(cl_backend *be, int tensor, float *out);
cl_status cl_dnnl_sync_params(cl_backend *be);

#endif
