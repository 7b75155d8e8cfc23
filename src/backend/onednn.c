/* oneDNN backend: every node of a planned graph runs as oneDNN primitives
 * made once at plan time; activations stay in the blocked layouts oneDNN
 * picks between layers, and every activation, gradient and workspace lives
 * in one arena whose regions are shared by buffers with disjoint lifetimes.
 *
 * Plan, in order: (1) lowering decides which nodes fuse into which (BN +
 * ReLU, add + ReLU; for inference conv + BN + add + ReLU); (2) forward and
 * backward primitives are made node by node and each execution is recorded
 * as a step whose arguments name arena buffers ("stores") or external
 * memory (the graph's arenas, reordered weight copies); each use stamps the
 * store with the step's time; (3) the arena is laid out by those lifetimes;
 * (4) oneDNN memory objects are made once for every argument.  The steps
 * then only execute.
 *
 * supports(): every op of the graph runs here.  An op oneDNN cannot run
 * would be planned as a reference-kernel step on plain copies (reorder in,
 * ops/ kernel, reorder out) recorded like any other step; no such op
 * exists today, so that path is not written. */
#include <dnnl.h>
#include <dnnl_debug.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <string.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "backend/backend.h"
#include "backend/onednn_arena.h"
#include "backend/onednn_bn.h"
#include "backend/onednn_info.h"
#include "core/error.h"
#include "core/mem.h"
#include "core/rng.h"
#include "core/timer.h"

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
    void *ptr;
    dnnl_memory_desc_t md;
} dn_arg;

typedef enum dn_step_kind {
    STEP_PRIM,     /* a oneDNN primitive */
    STEP_BN_STATS, /* running statistics update of BN node `node` */
    STEP_LOSS,     /* softmax cross-entropy: loss and dlogits */
    STEP_HOOK,     /* grad_ready(aux) */
    STEP_FOLD,     /* inference: BN folded into conv `node`'s weights */
    STEP_BN_FWD,   /* BN training forward (onednn_bn.c) */
    STEP_BN_INFER, /* BN with given statistics */
    STEP_BN_BWD,   /* BN backward */
    STEP_IM2COL,   /* conv `node`'s input as patch rows (wgrad_as_matmul) */
    STEP_UNSTRIDE  /* conv `node`'s dx from the stride grid (dgrad_unstrided) */
} dn_step_kind;

typedef struct dn_step {
    dn_step_kind kind;
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
} dn_step;

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
} dn_tensor;

typedef struct dn_node {
    int skip;    /* fused into another node's primitive */
    int relu;    /* BN / add / inference conv: ReLU fused */
    int bn;      /* inference conv: BN node folded in, or -1 */
    int sum;     /* inference conv: tensor added by a sum post-op, or -1 */
    int inplace; /* add: output written over input 0 (after swap) */
    int swap;    /* add: inputs exchanged */
    dnnl_primitive_desc_t fwd_pd;   /* hint for backward (not owned) */
    dnnl_memory_desc_t w_md, wb_md; /* forward / backward-data weights */
    float *w, *wb;     /* reordered weight copies, NULL for the plain arena */
    float *bias;       /* inference: folded bias (out_ch) */
    int mean, var, ws; /* stores */
    cl_bn_layout lay;  /* BN, and a conv whose dx runs on the stride grid:
                          its input's layout */
    double count;      /* BN: samples of the last training forward's
                          statistics (all ranks' with SyncBatchNorm) */
    int src;           /* conv / linear: the store the forward reads as
                          src (a bf16 copy under amp), for backward */
    dnnl_memory_desc_t src_md;
} dn_node;

typedef struct dn_ctx {
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
    /* SyncBatchNorm: 2 C + 1 doubles of per-channel sums for the hook. */
    double *sync_sums;
    int max_bn_channels;
    int amp; /* 0: f32; 1: bf16 conv / matmul; 2: bf16 activations too */
    /* Conv backward paths, one char per node (cl_dnnl_conv_paths): wanted
     * at plan start, what was planned once the node is planned. */
    char *paths;
    int part;     /* the part of a conv backward being planned */
    double *prof; /* measuring: seconds per (node, part), or NULL */
    int tune_measured, tune_rewritten;
} dn_ctx;

/* ---- errors and small helpers ------------------------------------------- */

static cl_status dn_fail(const dn_ctx *d, dnnl_status_t s, int node,
                         const char *what)
{
    if (d->amp && s == dnnl_unimplemented)
        return cl_error(CL_ERR_UNSUPPORTED,
                        "%s: dnnl %s: %s for bf16 (amp_level O%d) on this "
                        "CPU (oneDNN isa %s); amp_level O0 runs in f32",
                        node >= 0 ? d->g->nodes[node].name : "graph", what,
                        dnnl_status2str(s), d->amp, cl_dnnl_isa_name());
    return cl_error(CL_ERR_BACKEND, "%s: dnnl %s: %s",
                    node >= 0 ? d->g->nodes[node].name : "graph", what,
                    dnnl_status2str(s));
}

/* Checks a dnnl call inside a function with `cl_status st` and `fail:`. */
#define DN(call, node, what)                                                   \
    do {                                                                       \
        dnnl_status_t dn__s = (call);                                          \
        if (dn__s != dnnl_success) {                                           \
            st = dn_fail(d, dn__s, (node), (what));                            \
            goto fail;                                                         \
        }                                                                      \
    } while (0)

#define TRY(expr)                                                              \
    do {                                                                       \
        st = (expr);                                                           \
        if (st != CL_OK)                                                       \
            goto fail;                                                         \
    } while (0)

static cl_status dn_grow(void **p, int *cap, int need, size_t elem,
                         const char *what)
{
    if (need <= *cap)
        return CL_OK;
    int nc = *cap ? *cap * 2 : 64;
    while (nc < need)
        nc *= 2;
    size_t bytes;
    CL_TRY(cl_mul_size((size_t)nc, elem, &bytes, what));
    void *q = cl_alloc(bytes, what);
    if (!q)
        return CL_ERR_NOMEM;
    if (*p)
        memcpy(q, *p, (size_t)*cap * elem);
    cl_free(*p);
    *p = q;
    *cap = nc;
    return CL_OK;
}

static int rep(const dn_ctx *d, int t)
{
    while (d->t[t].rep != t)
        t = d->t[t].rep;
    return t;
}

static const cl_gtensor *gt(const dn_ctx *d, int t)
{
    return &d->g->tensors[t];
}

/* Backward time of node i: the steps of backward run in reverse order. */
static int tb(const dn_ctx *d, int i)
{
    return 2 * d->g->n_nodes - 1 - i;
}

static cl_status store_new(dn_ctx *d, size_t bytes, int *out)
{
    CL_TRY(dn_grow((void **)&d->st, &d->cap_st, d->n_st + 1, sizeof *d->st,
                   "onednn: stores"));
    cl_dnnl_block *b = &d->st[d->n_st];
    b->bytes = bytes;
    b->t0 = INT_MAX;
    b->t1 = -1;
    b->off = 0;
    *out = d->n_st++;
    return CL_OK;
}

static void touch(dn_ctx *d, int s, int time)
{
    if (time < d->st[s].t0)
        d->st[s].t0 = time;
    if (time > d->st[s].t1)
        d->st[s].t1 = time;
}

static cl_status md_store(dn_ctx *d, const dnnl_memory_desc_t *md, int *out)
{
    return store_new(d, dnnl_memory_desc_get_size(md), out);
}

/* Plain row-major md of the given dims. */
static void md_plain(dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims)
{
    static const dnnl_format_tag_t tags[] = {dnnl_format_tag_undef,
                                             dnnl_a,
                                             dnnl_ab,
                                             dnnl_abc,
                                             dnnl_abcd,
                                             dnnl_abcde};
    CL_ASSERT(nd >= 1 && nd <= 5);
    dnnl_status_t s =
        dnnl_memory_desc_init_by_tag(md, nd, dims, DN_DT, tags[nd]);
    CL_ASSERT(s == dnnl_success);
}

static void md_any(dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims,
                   dnnl_data_type_t dt)
{
    dnnl_status_t s =
        dnnl_memory_desc_init_by_tag(md, nd, dims, dt, dnnl_format_tag_any);
    CL_ASSERT(s == dnnl_success);
}

/* md with another element type, the layout (strides in elements) kept. */
static dnnl_memory_desc_t md_as(const dnnl_memory_desc_t *md,
                                dnnl_data_type_t dt)
{
    dnnl_memory_desc_t r = *md;
    r.data_type = dt;
    return r;
}

static int md_bf16(const dnnl_memory_desc_t *md)
{
    return md->data_type == dnnl_bf16;
}

/* The plain md with the same dims as md. */
static void md_plain_like(dnnl_memory_desc_t *out, const dnnl_memory_desc_t *md)
{
    md_plain(out, md->ndims, md->dims);
}

static void md_1d(dnnl_memory_desc_t *md, int64_t n)
{
    dnnl_dims_t dims = {n};
    md_plain(md, 1, dims);
}

static dnnl_memory_desc_t qmd(const_dnnl_primitive_desc_t pd, dnnl_query_t q,
                              int idx)
{
    dnnl_memory_desc_t md;
    const dnnl_memory_desc_t *p = dnnl_primitive_desc_query_md(pd, q, idx);
    if (p)
        md = *p;
    else
        memset(&md, 0, sizeof md);
    return md;
}

static int md_eq(const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b)
{
    return dnnl_memory_desc_equal(a, b);
}

static size_t md_size(const dnnl_memory_desc_t *md)
{
    return dnnl_memory_desc_get_size(md);
}

static void dims_of(const cl_shape *s, dnnl_dims_t dims)
{
    for (int i = 0; i < s->ndim; i++)
        dims[i] = s->d[i];
}

/* ---- primitives and steps ------------------------------------------------ */

static cl_status attr_new(dn_ctx *d, dnnl_primitive_attr_t *attr)
{
    cl_status st = CL_OK;
    *attr = NULL;
    DN(dnnl_primitive_attr_create(attr), -1, "attribute");
    DN(dnnl_primitive_attr_set_scratchpad_mode(*attr,
                                               dnnl_scratchpad_mode_user),
       -1, "attribute scratchpad");
    return CL_OK;
fail:
    if (*attr)
        dnnl_primitive_attr_destroy(*attr);
    *attr = NULL;
    return st;
}

/* Post-ops for a fused epilogue: a sum (accumulate into dst) and/or ReLU. */
static cl_status attr_post(dn_ctx *d, int sum, int relu,
                           dnnl_primitive_attr_t *attr)
{
    cl_status st = CL_OK;
    dnnl_post_ops_t po = NULL;
    CL_TRY(attr_new(d, attr));
    if (!sum && !relu)
        return CL_OK;
    DN(dnnl_post_ops_create(&po), -1, "post-ops");
    if (sum)
        DN(dnnl_post_ops_append_sum(po, 1.0f), -1, "post-op sum");
    if (relu)
        DN(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f,
                                        0.0f),
           -1, "post-op relu");
    DN(dnnl_primitive_attr_set_post_ops(*attr, po), -1, "post-ops");
    dnnl_post_ops_destroy(po);
    return CL_OK;
fail:
    if (po)
        dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(*attr);
    *attr = NULL;
    return st;
}

/* Registers pd and creates its primitive; both are freed with the plan. */
static cl_status prim_from_pd(dn_ctx *d, int node, const char *what,
                              dnnl_primitive_desc_t pd, dnnl_primitive_t *prim)
{
    cl_status st = CL_OK;
    st = dn_grow((void **)&d->pds, &d->cap_pds, d->n_pds + 1, sizeof *d->pds,
                 "onednn: primitive descriptors");
    if (st != CL_OK) {
        dnnl_primitive_desc_destroy(pd);
        return st;
    }
    d->pds[d->n_pds++] = pd;
    CL_TRY(dn_grow((void **)&d->prims, &d->cap_prims, d->n_prims + 1,
                   sizeof *d->prims, "onednn: primitives"));
    DN(dnnl_primitive_create(prim, pd), node, what);
    d->prims[d->n_prims++] = *prim;
    dnnl_memory_desc_t smd = qmd(pd, dnnl_query_scratchpad_md, 0);
    size_t sp = smd.ndims ? md_size(&smd) : 0;
    if (sp > d->scratch_bytes)
        d->scratch_bytes = sp;
    return CL_OK;
fail:
    return st;
}

/* Makes the primitive of an op descriptor; attr NULL means the default
 * (user scratchpad). */
static cl_status prim_make(dn_ctx *d, int node, const char *what,
                           const_dnnl_op_desc_t desc,
                           const_dnnl_primitive_attr_t attr,
                           const_dnnl_primitive_desc_t hint,
                           dnnl_primitive_desc_t *pd, dnnl_primitive_t *prim)
{
    cl_status st = CL_OK;
    dnnl_primitive_attr_t own = NULL;
    if (!attr) {
        CL_TRY(attr_new(d, &own));
        attr = own;
    }
    *pd = NULL;
    DN(dnnl_primitive_desc_create(pd, desc, attr, d->eng, hint), node, what);
    if (own)
        dnnl_primitive_attr_destroy(own);
    own = NULL;
    return prim_from_pd(d, node, what, *pd, prim);
fail:
    if (own)
        dnnl_primitive_attr_destroy(own);
    return st;
}

static cl_status reorder_make(dn_ctx *d, int node, const char *what,
                              const dnnl_memory_desc_t *src,
                              const dnnl_memory_desc_t *dst,
                              dnnl_primitive_desc_t *pd, dnnl_primitive_t *prim)
{
    cl_status st = CL_OK;
    dnnl_primitive_attr_t attr = NULL;
    CL_TRY(attr_new(d, &attr));
    *pd = NULL;
    DN(dnnl_reorder_primitive_desc_create(pd, src, d->eng, dst, d->eng, attr),
       node, what);
    dnnl_primitive_attr_destroy(attr);
    attr = NULL;
    return prim_from_pd(d, node, what, *pd, prim);
fail:
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return st;
}

static cl_status step_new(dn_ctx *d, dn_list *l, dn_step_kind k, int node,
                          const char *what, int time, dn_step **out)
{
    CL_TRY(dn_grow((void **)&l->s, &l->cap, l->n + 1, sizeof *l->s,
                   "onednn: steps"));
    dn_step *s = &l->s[l->n++];
    memset(s, 0, sizeof *s);
    s->kind = k;
    s->node = node;
    s->what = what;
    s->time = time;
    s->part = d->part;
    if (time >= d->n_time)
        d->n_time = time + 1;
    *out = s;
    return CL_OK;
}

static void arg_store(dn_ctx *d, dn_step *s, int arg, int store,
                      const dnnl_memory_desc_t *md)
{
    CL_ASSERT(s->nargs < DN_MAX_ARGS && store >= 0);
    dn_arg *a = &s->args[s->nargs++];
    a->arg = arg;
    a->kind = REF_STORE;
    a->store = store;
    a->ptr = NULL;
    a->md = *md;
    touch(d, store, s->time);
}

static void arg_ext(dn_step *s, int arg, void *ptr,
                    const dnnl_memory_desc_t *md)
{
    CL_ASSERT(s->nargs < DN_MAX_ARGS && ptr);
    dn_arg *a = &s->args[s->nargs++];
    a->arg = arg;
    a->kind = REF_EXT;
    a->store = -1;
    a->ptr = ptr;
    a->md = *md;
}

/* A primitive step; adds the scratchpad argument when pd wants one. */
static cl_status step_prim(dn_ctx *d, dn_list *l, int node, const char *what,
                           int time, const_dnnl_primitive_desc_t pd,
                           dnnl_primitive_t prim, dn_step **out)
{
    CL_TRY(step_new(d, l, STEP_PRIM, node, what, time, out));
    (*out)->prim = prim;
    dnnl_memory_desc_t smd = qmd(pd, dnnl_query_scratchpad_md, 0);
    if (smd.ndims && md_size(&smd) > 0) {
        dn_arg *a = &(*out)->args[(*out)->nargs++];
        a->arg = DNNL_ARG_SCRATCHPAD;
        a->kind = REF_SCRATCH;
        a->store = -1;
        a->md = smd;
    }
    return CL_OK;
}

static void *arg_ptr(const dn_ctx *d, const dn_arg *a)
{
    switch (a->kind) {
    case REF_STORE:
        return d->arena + d->st[a->store].off;
    case REF_EXT:
        return a->ptr;
    case REF_SCRATCH:
        return d->scratch;
    default:
        return NULL;
    }
}

/* ---- lowering ---------------------------------------------------------------
 */

/* The node reading tensor t when it has exactly one consumer, else -1. */
static int only_consumer(const dn_ctx *d, int t)
{
    if (d->ncons[t] != 1)
        return -1;
    return d->lastc[t];
}

static int is_edge(const dn_ctx *d, int t)
{
    const cl_graph *g = d->g;
    return t == g->input || t == g->logits || t == g->features;
}

/* Fuses a ReLU that is the only reader of node i's output. */
static void fuse_relu(dn_ctx *d, int i)
{
    const cl_node *n = &d->g->nodes[i];
    int j = only_consumer(d, n->out);
    if (j < 0 || is_edge(d, n->out))
        return;
    const cl_node *r = &d->g->nodes[j];
    if (r->op != CL_OP_RELU || d->nd[j].skip)
        return;
    d->nd[i].relu = 1;
    d->nd[j].skip = 1;
    d->t[r->out].rep = rep(d, n->out);
    /* The pre-ReLU value is never stored. */
    d->t[n->out].clobbered = 1;
}

/* Inference: conv [+ BN] [+ add of an earlier tensor] [+ ReLU] as one
 * primitive with post-ops. */
static void lower_infer_conv(dn_ctx *d, int i)
{
    const cl_graph *g = d->g;
    dn_node *x = &d->nd[i];
    int cur = g->nodes[i].out;
    int j = only_consumer(d, cur);
    if (j >= 0 && !is_edge(d, cur) && g->nodes[j].op == CL_OP_BATCHNORM2D &&
        !d->nd[j].skip) {
        x->bn = j;
        d->nd[j].skip = 1;
        d->t[g->nodes[j].out].rep = rep(d, cur);
        d->t[cur].clobbered = 1;
        cur = g->nodes[j].out;
    }
    j = only_consumer(d, cur);
    if (j < 0 || is_edge(d, cur) || d->nd[j].skip)
        return;
    const cl_node *c = &g->nodes[j];
    if (c->op == CL_OP_RELU) {
        x->relu = 1;
        d->nd[j].skip = 1;
        d->t[c->out].rep = rep(d, cur);
        d->t[cur].clobbered = 1;
        return;
    }
    if (c->op != CL_OP_ADD || c->n_in != 2 || c->in[0] == c->in[1])
        return;
    int q = c->in[0] == cur ? c->in[1] : c->in[0];
    /* q must be ready before conv i runs, and nobody may read it after. */
    if ((is_edge(d, q) && q != g->input) || d->t[q].clobbered)
        return;
    if (gt(d, q)->producer >= i)
        return;
    for (int k = 0; k < g->n_nodes; k++) {
        const cl_node *o = &g->nodes[k];
        if (k == j || d->nd[k].skip)
            continue;
        for (int a = 0; a < o->n_in; a++)
            if (o->in[a] == q && k >= i)
                return;
    }
    if (is_edge(d, c->out))
        return;
    x->sum = q;
    d->nd[j].skip = 1;
    d->t[c->out].rep = rep(d, cur);
    d->t[cur].clobbered = 1;
    d->t[q].clobbered = 1;
    cur = c->out;
    j = only_consumer(d, cur);
    if (j >= 0 && !is_edge(d, cur) && g->nodes[j].op == CL_OP_RELU &&
        !d->nd[j].skip) {
        x->relu = 1;
        d->nd[j].skip = 1;
        d->t[g->nodes[j].out].rep = rep(d, cur);
        d->t[cur].clobbered = 1;
    }
}

/* Whether backward of the node producing rep tensor r reads r's value. */
static int bwd_reads_dst(const dn_ctx *d, int r)
{
    int p = gt(d, r)->producer;
    if (p < 0)
        return 1;
    const cl_node *n = &d->g->nodes[p];
    if (n->op == CL_OP_RELU)
        return 1;
    if (n->op == CL_OP_ADD && d->nd[p].relu)
        return 1;
    return 0;
}

/* An add may write its output over an input read by nobody else. */
static void lower_add_inplace(dn_ctx *d, int i)
{
    const cl_node *n = &d->g->nodes[i];
    if (n->n_in != 2 || n->in[0] == n->in[1])
        return;
    for (int k = 0; k < 2; k++) {
        int x = n->in[k];
        if (d->ncons[x] != 1 || is_edge(d, x) || is_edge(d, rep(d, x)))
            continue;
        if (d->mode == CL_PLAN_TRAIN && bwd_reads_dst(d, rep(d, x)))
            continue;
        d->nd[i].inplace = 1;
        d->nd[i].swap = k == 1;
        return;
    }
}

static void lower(dn_ctx *d)
{
    cl_graph *g = d->g;
    for (int i = 0; i < g->n_nodes; i++) {
        if (d->nd[i].skip)
            continue;
        switch (g->nodes[i].op) {
        case CL_OP_CONV2D:
            if (d->mode == CL_PLAN_INFER)
                lower_infer_conv(d, i);
            break;
        case CL_OP_BATCHNORM2D:
            fuse_relu(d, i);
            break;
        case CL_OP_ADD:
            fuse_relu(d, i);
            lower_add_inplace(d, i);
            break;
        default:
            break;
        }
    }
}

/* ---- forward planning -------------------------------------------------------
 */

/* The md of node input x, or NULL when it is the graph input not yet laid
 * out (the node may then choose). */
static const dnnl_memory_desc_t *in_md(dn_ctx *d, int x)
{
    int r = rep(d, x);
    return d->t[r].has_md ? &d->t[r].md : NULL;
}

static cl_status set_md(dn_ctx *d, int t, const dnnl_memory_desc_t *md,
                        int store)
{
    int r = rep(d, t);
    d->t[r].md = *md;
    d->t[r].has_md = 1;
    if (store >= 0) {
        d->t[r].store = store;
        return CL_OK;
    }
    return md_store(d, md, &d->t[r].store);
}

/* Lays the graph input out plainly unless a conv chose a layout. */
static cl_status ensure_input_md(dn_ctx *d, int x)
{
    if (in_md(d, x))
        return CL_OK;
    dnnl_memory_desc_t md;
    dnnl_dims_t dims;
    dims_of(&gt(d, x)->shape, dims);
    md_plain(&md, gt(d, x)->shape.ndim, dims);
    return set_md(d, x, &md, -1);
}

/* The list(s) forward steps go to: training and evaluation forwards of a
 * TRAIN plan share every primitive but BN's. */
static int n_fwd_lists(const dn_ctx *d)
{
    return d->mode == CL_PLAN_TRAIN ? 2 : 1;
}

static dn_list *fwd_list(dn_ctx *d, int k)
{
    if (d->mode == CL_PLAN_INFER)
        return &d->fwd_eval;
    return k == 0 ? &d->fwd_train : &d->fwd_eval;
}

/* ---- mixed precision ------------------------------------------------------
 *
 * amp_level O1: convolutions and inner products read bf16 src and weights
 * (their inputs are cast, their outputs stay f32); O2: convolutions also
 * write bf16, and BN, ReLU, add and pooling then run on bf16 (each op
 * keeps its input's type), so activations and their gradients are bf16
 * from the first convolution to the logits, which the inner product writes
 * in f32 for the loss.  oneDNN accumulates in f32 inside every primitive
 * and writes weight gradients in f32 straight to the grad arena; BN keeps
 * its statistics and parameters in f32 (onednn_bn.c). */

/* Type of the src and weights of convolutions and inner products. */
static dnnl_data_type_t conv_dt(const dn_ctx *d)
{
    return d->amp >= 1 ? dnnl_bf16 : dnnl_f32;
}

/* Type of a convolution's output. */
static dnnl_data_type_t act_dt(const dn_ctx *d)
{
    return d->amp >= 2 ? dnnl_bf16 : dnnl_f32;
}

/* The value of tensor x in type dt for node i: x's own store when it has
 * that type, else a copy made by a reorder just before node i in each
 * forward list, shared by every later reader (and by backward). */
static cl_status value_as(dn_ctx *d, int i, int x, dnnl_data_type_t dt,
                          dnnl_memory_desc_t *md, int *store)
{
    cl_status st = CL_OK;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    dn_tensor *t = &d->t[rep(d, x)];
    if (t->md.data_type == dt) {
        *md = t->md;
        *store = t->store;
        return CL_OK;
    }
    if (t->cast < 0) {
        t->cast_md = md_as(&t->md, dt);
        TRY(md_store(d, &t->cast_md, &t->cast));
        TRY(reorder_make(d, i, "precision cast", &t->md, &t->cast_md, &pd,
                         &prim));
        for (int k = 0; k < n_fwd_lists(d); k++) {
            TRY(step_prim(d, fwd_list(d, k), i, "precision cast", i, pd, prim,
                          &s));
            arg_store(d, s, DNNL_ARG_FROM, t->store, &t->md);
            arg_store(d, s, DNNL_ARG_TO, t->cast, &t->cast_md);
        }
    }
    *md = t->cast_md;
    *store = t->cast;
fail:
    return st;
}

/* Store s (layout md) in layout want for node i's backward: s itself when
 * the two match, else a copy made by a reorder at that time. */
static cl_status bwd_copy(dn_ctx *d, int i, const char *what, int s,
                          const dnnl_memory_desc_t *md,
                          const dnnl_memory_desc_t *want, int *store)
{
    cl_status st = CL_OK;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *r;
    *store = s;
    if (md_eq(md, want))
        return CL_OK;
    TRY(md_store(d, want, store));
    TRY(reorder_make(d, i, what, md, want, &pd, &prim));
    TRY(step_prim(d, &d->bwd, i, what, tb(d, i), pd, prim, &r));
    arg_store(d, r, DNNL_ARG_FROM, s, md);
    arg_store(d, r, DNNL_ARG_TO, *store, want);
fail:
    return st;
}

/* Gradient store ds (md) in type dt for node i's backward. */
static cl_status grad_as(dn_ctx *d, int i, int ds, const dnnl_memory_desc_t *md,
                         dnnl_data_type_t dt, dnnl_memory_desc_t *out,
                         int *store)
{
    *out = md_as(md, dt);
    return bwd_copy(d, i, "gradient precision cast", ds, md, out, store);
}

/* A weight copy in layout md refreshed from src (plain) by a sync step. */
static cl_status weight_copy(dn_ctx *d, int node, const char *what,
                             const dnnl_memory_desc_t *plain, void *src,
                             const dnnl_memory_desc_t *md, float **copy)
{
    cl_status st = CL_OK;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    *copy = cl_alloc(md_size(md), "onednn: weight copy");
    if (!*copy)
        return CL_ERR_NOMEM;
    TRY(reorder_make(d, node, what, plain, md, &pd, &prim));
    TRY(step_prim(d, &d->sync, node, what, 0, pd, prim, &s));
    arg_ext(s, DNNL_ARG_FROM, src, plain);
    arg_ext(s, DNNL_ARG_TO, *copy, md);
fail:
    return st;
}

static void conv_geometry(const dn_ctx *d, int i, dnnl_dims_t strides,
                          dnnl_dims_t dil, dnnl_dims_t pl, dnnl_dims_t pr)
{
    const cl_node *n = &d->g->nodes[i];
    const cl_conv2d_attr *a = &n->attr.conv2d;
    const cl_shape *x = &gt(d, n->in[0])->shape, *y = &gt(d, n->out)->shape;
    strides[0] = a->sh;
    strides[1] = a->sw;
    dil[0] = a->dh - 1;
    dil[1] = a->dw - 1;
    pl[0] = a->ph;
    pl[1] = a->pw;
    pr[0] = (y->d[2] - 1) * a->sh + (int64_t)(a->kh - 1) * a->dh + 1 - x->d[2] -
            a->ph;
    pr[1] = (y->d[3] - 1) * a->sw + (int64_t)(a->kw - 1) * a->dw + 1 - x->d[3] -
            a->pw;
}

/* Plain OIHW (or GOIHW) weights md of conv node i. */
static int conv_wdims(const dn_ctx *d, int i, dnnl_dims_t w)
{
    const cl_conv2d_attr *a = &d->g->nodes[i].attr.conv2d;
    if (a->groups == 1) {
        w[0] = a->out_ch;
        w[1] = a->in_ch;
        w[2] = a->kh;
        w[3] = a->kw;
        return 4;
    }
    w[0] = a->groups;
    w[1] = a->out_ch / a->groups;
    w[2] = a->in_ch / a->groups;
    w[3] = a->kh;
    w[4] = a->kw;
    return 5;
}

static cl_status plan_conv_fwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[i];
    const cl_conv2d_attr *a = &n->attr.conv2d;
    dn_node *x = &d->nd[i];
    dnnl_primitive_attr_t attr = NULL;
    dnnl_dims_t sdims, ddims, wdims, strides, dil, pl, pr;
    dnnl_memory_desc_t smd, wmd, wplain, bmd, dmd;
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    int infer = d->mode == CL_PLAN_INFER;
    int fold = infer && x->bn >= 0;
    int has_bias = a->has_bias || fold;
    const dnnl_memory_desc_t *xin = in_md(d, n->in[0]);

    int src = -1;
    dims_of(&gt(d, n->in[0])->shape, sdims);
    dims_of(&gt(d, n->out)->shape, ddims);
    int wnd = conv_wdims(d, i, wdims);
    conv_geometry(d, i, strides, dil, pl, pr);
    if (xin)
        TRY(value_as(d, i, n->in[0], conv_dt(d), &smd, &src));
    else
        md_any(&smd, 4, sdims, conv_dt(d));
    md_any(&wmd, wnd, wdims, conv_dt(d));
    md_plain(&wplain, wnd, wdims);
    md_1d(&bmd, a->out_ch);
    if (x->sum >= 0) {
        TRY(ensure_input_md(d, x->sum));
        dmd = *in_md(d, x->sum);
    } else if (d->be->opts.channels_last) {
        DN(dnnl_memory_desc_init_by_tag(&dmd, 4, ddims, act_dt(d), dnnl_nhwc),
           i, "convolution output");
    } else
        md_any(&dmd, 4, ddims, act_dt(d));
    DN(dnnl_dilated_convolution_forward_desc_init(
           &cd, infer ? dnnl_forward_inference : dnnl_forward_training,
           dnnl_convolution_direct, &smd, &wmd, has_bias ? &bmd : NULL, &dmd,
           strides, dil, pl, pr),
       i, "convolution forward descriptor");
    TRY(attr_post(d, x->sum >= 0, x->relu, &attr));
    TRY(prim_make(d, i, "convolution forward", &cd, attr, NULL, &pd, &prim));
    dnnl_primitive_attr_destroy(attr);
    attr = NULL;
    x->fwd_pd = pd;
    if (!xin) {
        smd = qmd(pd, dnnl_query_src_md, 0);
        TRY(set_md(d, n->in[0], &smd, -1));
        src = d->t[rep(d, n->in[0])].store;
    }
    x->src = src;
    x->src_md = smd;
    dmd = qmd(pd, dnnl_query_dst_md, 0);
    TRY(set_md(d, n->out, &dmd, x->sum >= 0 ? d->t[rep(d, x->sum)].store : -1));
    x->w_md = qmd(pd, dnnl_query_weights_md, 0);
    float *w = cl_graph_param(g, n->param[0]);
    if (fold) {
        dn_step *f;
        x->bias =
            cl_alloc(sizeof(float) * (size_t)a->out_ch, "onednn: folded bias");
        if (!x->bias) {
            st = CL_ERR_NOMEM;
            goto fail;
        }
        TRY(step_new(d, &d->sync, STEP_FOLD, i, "fold batch norm", 0, &f));
        /* Folded weights are made in d->fold, then reordered. */
        TRY(weight_copy(d, i, "weights reorder", &wplain, d->fold, &x->w_md,
                        &x->w));
    } else if (!md_eq(&x->w_md, &wplain)) {
        TRY(weight_copy(d, i, "weights reorder", &wplain, w, &x->w_md, &x->w));
    }
    for (int k = 0; k < n_fwd_lists(d); k++) {
        TRY(step_prim(d, fwd_list(d, k), i, "convolution forward", i, pd, prim,
                      &s));
        arg_store(d, s, DNNL_ARG_SRC, src, &smd);
        arg_ext(s, DNNL_ARG_WEIGHTS, x->w ? x->w : w, &x->w_md);
        if (fold)
            arg_ext(s, DNNL_ARG_BIAS, x->bias, &bmd);
        else if (a->has_bias)
            arg_ext(s, DNNL_ARG_BIAS, cl_graph_param(g, n->param[1]), &bmd);
        arg_store(d, s, DNNL_ARG_DST, d->t[rep(d, n->out)].store, &dmd);
    }
    return CL_OK;
fail:
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return st;
}

/* The activation layouts onednn_bn.c and the unstride step work on: those
 * oneDNN picks for 4-D f32 and bf16 activations on any x86 ISA (blocked
 * by 16 on AVX-512, by 8 on AVX2, channels-last for bf16 on AMX, plain
 * for a graph's input). */
static const struct {
    dnnl_format_tag_t tag;
    const char *name;
} act_layouts[] = {{dnnl_nChw16c, "nChw16c"},
                   {dnnl_nChw8c, "nChw8c"},
                   {dnnl_nChw4c, "nChw4c"},
                   {dnnl_nhwc, "nhwc"},
                   {dnnl_nchw, "nchw"}};

/* The index in act_layouts of md's layout, or -1. */
static int md_act_tag(const dnnl_memory_desc_t *md)
{
    if (md->ndims != 4 ||
        (md->data_type != dnnl_f32 && md->data_type != dnnl_bf16))
        return -1;
    for (int k = 0; k < (int)(sizeof act_layouts / sizeof act_layouts[0]);
         k++) {
        dnnl_memory_desc_t t;
        if (dnnl_memory_desc_init_by_tag(&t, 4, md->dims, md->data_type,
                                         act_layouts[k].tag) == dnnl_success &&
            md_eq(&t, md))
            return k;
    }
    return -1;
}

/* Fills *l and returns 1 if md is one of act_layouts, else returns 0. */
static int md_act_layout(const dnnl_memory_desc_t *md, cl_bn_layout *l)
{
    int k = md_act_tag(md);
    return k >= 0 &&
           cl_bn_layout_make(l, act_layouts[k].name, (int)md->dims[0],
                             (int)md->dims[1], md->dims[2] * md->dims[3]);
}

/* BN runs as the onednn_bn.c loops (see onednn_bn.h for why not as
 * oneDNN's primitive) on whatever layout its input has. */
static cl_status plan_bn_fwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[i];
    const cl_batchnorm2d_attr *a = &n->attr.batchnorm2d;
    dn_node *x = &d->nd[i];
    dn_step *s;
    TRY(ensure_input_md(d, n->in[0]));
    dnnl_memory_desc_t md = *in_md(d, n->in[0]), cmd;
    md_1d(&cmd, a->channels);
    if (!md_act_layout(&md, &x->lay))
        return cl_error(CL_ERR_BACKEND,
                        "%s: batch norm input in a layout the onednn backend "
                        "does not read (it reads nChw16c, nChw8c, nChw4c, "
                        "nhwc and nchw)",
                        n->name);
    int src = d->t[rep(d, n->in[0])].store;
    TRY(set_md(d, n->out, &md, -1));
    int dst = d->t[rep(d, n->out)].store;
    if (a->channels > d->max_bn_channels)
        d->max_bn_channels = a->channels;
    if (d->mode == CL_PLAN_TRAIN) {
        TRY(md_store(d, &cmd, &x->mean));
        TRY(md_store(d, &cmd, &x->var));
        TRY(step_new(d, &d->fwd_train, STEP_BN_FWD, i,
                     "batch normalization forward", i, &s));
        arg_store(d, s, 0, src, &md);
        arg_store(d, s, 1, dst, &md);
        arg_store(d, s, 2, x->mean, &cmd);
        arg_store(d, s, 3, x->var, &cmd);
        TRY(step_new(d, &d->fwd_train, STEP_BN_STATS, i, "running statistics",
                     i, &s));
        arg_store(d, s, 0, x->mean, &cmd);
        arg_store(d, s, 1, x->var, &cmd);
    }
    TRY(step_new(d, &d->fwd_eval, STEP_BN_INFER, i,
                 "batch normalization inference", i, &s));
    arg_store(d, s, 0, src, &md);
    arg_store(d, s, 1, dst, &md);
fail:
    return st;
}

static cl_status plan_relu_fwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    dnnl_eltwise_desc_t ed;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    TRY(ensure_input_md(d, n->in[0]));
    dnnl_memory_desc_t md = *in_md(d, n->in[0]);
    DN(dnnl_eltwise_forward_desc_init(
           &ed,
           d->mode == CL_PLAN_TRAIN ? dnnl_forward_training
                                    : dnnl_forward_inference,
           dnnl_eltwise_relu_use_dst_for_bwd, &md, 0.0f, 0.0f),
       i, "relu forward descriptor");
    TRY(prim_make(d, i, "relu forward", &ed, NULL, NULL, &pd, &prim));
    d->nd[i].fwd_pd = pd;
    TRY(set_md(d, n->out, &md, -1));
    for (int k = 0; k < n_fwd_lists(d); k++) {
        TRY(step_prim(d, fwd_list(d, k), i, "relu forward", i, pd, prim, &s));
        arg_store(d, s, DNNL_ARG_SRC, d->t[rep(d, n->in[0])].store, &md);
        arg_store(d, s, DNNL_ARG_DST, d->t[rep(d, n->out)].store, &md);
    }
fail:
    return st;
}

/* Max pooling, or global average pooling when gap != 0. */
static cl_status plan_pool_fwd(dn_ctx *d, int i, int gap)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    dn_node *x = &d->nd[i];
    const cl_shape *xs = &gt(d, n->in[0])->shape;
    dnnl_pooling_desc_t pdsc;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    dnnl_dims_t ddims, strides, kernel, pl, pr;
    TRY(ensure_input_md(d, n->in[0]));
    dnnl_memory_desc_t smd = *in_md(d, n->in[0]), dmd, wsmd;
    ddims[0] = xs->d[0];
    ddims[1] = xs->d[1];
    if (gap) {
        ddims[2] = ddims[3] = 1;
        strides[0] = strides[1] = 1;
        kernel[0] = xs->d[2];
        kernel[1] = xs->d[3];
        pl[0] = pl[1] = pr[0] = pr[1] = 0;
    } else {
        const cl_maxpool2d_attr *a = &n->attr.maxpool2d;
        const cl_shape *ys = &gt(d, n->out)->shape;
        ddims[2] = ys->d[2];
        ddims[3] = ys->d[3];
        strides[0] = a->sh;
        strides[1] = a->sw;
        kernel[0] = a->kh;
        kernel[1] = a->kw;
        pl[0] = a->ph;
        pl[1] = a->pw;
        pr[0] = (ddims[2] - 1) * a->sh + a->kh - xs->d[2] - a->ph;
        pr[1] = (ddims[3] - 1) * a->sw + a->kw - xs->d[3] - a->pw;
    }
    md_any(&dmd, 4, ddims, smd.data_type);
    DN(dnnl_pooling_forward_desc_init(
           &pdsc,
           d->mode == CL_PLAN_TRAIN ? dnnl_forward_training
                                    : dnnl_forward_inference,
           gap ? dnnl_pooling_avg_exclude_padding : dnnl_pooling_max, &smd,
           &dmd, strides, kernel, pl, pr),
       i, "pooling forward descriptor");
    TRY(prim_make(d, i, "pooling forward", &pdsc, NULL, NULL, &pd, &prim));
    x->fwd_pd = pd;
    dmd = qmd(pd, dnnl_query_dst_md, 0);
    wsmd = qmd(pd, dnnl_query_workspace_md, 0);
    TRY(set_md(d, n->out, &dmd, -1));
    if (wsmd.ndims && md_size(&wsmd) > 0)
        TRY(md_store(d, &wsmd, &x->ws));
    for (int k = 0; k < n_fwd_lists(d); k++) {
        TRY(step_prim(d, fwd_list(d, k), i, "pooling forward", i, pd, prim,
                      &s));
        arg_store(d, s, DNNL_ARG_SRC, d->t[rep(d, n->in[0])].store, &smd);
        arg_store(d, s, DNNL_ARG_DST, d->t[rep(d, n->out)].store, &dmd);
        if (x->ws >= 0)
            arg_store(d, s, DNNL_ARG_WORKSPACE, x->ws, &wsmd);
    }
fail:
    return st;
}

/* Plain (out, in...) weights md of linear node i for an input md. */
static void linear_wdims(const dn_ctx *d, int i, const dnnl_memory_desc_t *src,
                         dnnl_dims_t w)
{
    w[0] = d->g->nodes[i].attr.linear.out_features;
    for (int k = 1; k < src->ndims; k++)
        w[k] = src->dims[k];
}

static cl_status plan_linear_fwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[i];
    const cl_linear_attr *a = &n->attr.linear;
    dn_node *x = &d->nd[i];
    dnnl_inner_product_desc_t ipd;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    dnnl_dims_t wdims, ddims = {g->batch, a->out_features};
    TRY(ensure_input_md(d, n->in[0]));
    dnnl_memory_desc_t smd, wmd, wplain, bmd, dmd;
    int src;
    TRY(value_as(d, i, n->in[0], conv_dt(d), &smd, &src));
    x->src = src;
    x->src_md = smd;
    int64_t in = 1;
    for (int k = 1; k < smd.ndims; k++)
        in *= smd.dims[k];
    if (in != a->in_features) {
        st = cl_error(CL_ERR_SHAPE,
                      "%s: linear input has %lld features, expected %d",
                      n->name, (long long)in, a->in_features);
        goto fail;
    }
    linear_wdims(d, i, &smd, wdims);
    md_any(&wmd, smd.ndims, wdims, conv_dt(d));
    md_plain(&wplain, smd.ndims, wdims);
    md_1d(&bmd, a->out_features);
    md_plain(&dmd, 2, ddims); /* f32 logits at every amp level */
    DN(dnnl_inner_product_forward_desc_init(
           &ipd,
           d->mode == CL_PLAN_TRAIN ? dnnl_forward_training
                                    : dnnl_forward_inference,
           &smd, &wmd, a->has_bias ? &bmd : NULL, &dmd),
       i, "inner product forward descriptor");
    TRY(prim_make(d, i, "inner product forward", &ipd, NULL, NULL, &pd, &prim));
    x->fwd_pd = pd;
    x->w_md = qmd(pd, dnnl_query_weights_md, 0);
    float *w = cl_graph_param(g, n->param[0]);
    if (!md_eq(&x->w_md, &wplain))
        TRY(weight_copy(d, i, "weights reorder", &wplain, w, &x->w_md, &x->w));
    TRY(set_md(d, n->out, &dmd, -1));
    for (int k = 0; k < n_fwd_lists(d); k++) {
        TRY(step_prim(d, fwd_list(d, k), i, "inner product forward", i, pd,
                      prim, &s));
        arg_store(d, s, DNNL_ARG_SRC, src, &smd);
        arg_ext(s, DNNL_ARG_WEIGHTS, x->w ? x->w : w, &x->w_md);
        if (a->has_bias)
            arg_ext(s, DNNL_ARG_BIAS, cl_graph_param(g, n->param[1]), &bmd);
        arg_store(d, s, DNNL_ARG_DST, d->t[rep(d, n->out)].store, &dmd);
    }
fail:
    return st;
}

static cl_status plan_add_fwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    dn_node *x = &d->nd[i];
    dnnl_primitive_attr_t attr = NULL;
    dnnl_binary_desc_t bd;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    int a0 = n->in[x->swap ? 1 : 0], a1 = n->in[x->swap ? 0 : 1];
    TRY(ensure_input_md(d, a0));
    TRY(ensure_input_md(d, a1));
    dnnl_memory_desc_t m0 = *in_md(d, a0), m1 = *in_md(d, a1);
    if (m0.data_type != m1.data_type)
        return cl_error(CL_ERR_UNSUPPORTED,
                        "%s: add of an f32 and a bf16 tensor (amp_level O%d "
                        "gives both inputs of an add the same type in a "
                        "ResNet; this graph mixes them)",
                        n->name, d->amp);
    DN(dnnl_binary_desc_init(&bd, dnnl_binary_add, &m0, &m1, &m0), i,
       "binary add descriptor");
    TRY(attr_post(d, 0, x->relu, &attr));
    TRY(prim_make(d, i, "binary add", &bd, attr, NULL, &pd, &prim));
    dnnl_primitive_attr_destroy(attr);
    attr = NULL;
    x->fwd_pd = pd;
    TRY(set_md(d, n->out, &m0, x->inplace ? d->t[rep(d, a0)].store : -1));
    if (x->inplace)
        d->t[a0].clobbered = 1;
    for (int k = 0; k < n_fwd_lists(d); k++) {
        TRY(step_prim(d, fwd_list(d, k), i, "binary add", i, pd, prim, &s));
        arg_store(d, s, DNNL_ARG_SRC_0, d->t[rep(d, a0)].store, &m0);
        arg_store(d, s, DNNL_ARG_SRC_1, d->t[rep(d, a1)].store, &m1);
        arg_store(d, s, DNNL_ARG_DST, d->t[rep(d, n->out)].store, &m0);
    }
fail:
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return st;
}

static cl_status plan_loss_fwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    int lg = rep(d, n->in[0]);
    dn_step *s;
    if (!d->t[lg].has_md) {
        return cl_error(CL_ERR_UNSUPPORTED,
                        "%s: softmax cross-entropy needs logits made by a "
                        "node of this graph",
                        n->name);
    }
    dnnl_memory_desc_t plain;
    md_plain_like(&plain, &d->t[lg].md);
    if (!md_eq(&plain, &d->t[lg].md) || plain.ndims != 2)
        return cl_error(CL_ERR_UNSUPPORTED,
                        "%s: softmax cross-entropy needs plain (N, K) logits",
                        n->name);
    if (d->mode == CL_PLAN_TRAIN)
        TRY(md_store(d, &plain, &d->t[lg].dstore));
    for (int k = 0; k < n_fwd_lists(d); k++) {
        TRY(step_new(d, fwd_list(d, k), STEP_LOSS, i, "softmax cross-entropy",
                     i, &s));
        arg_store(d, s, 0, d->t[lg].store, &plain);
        if (d->t[lg].dstore >= 0)
            arg_store(d, s, 1, d->t[lg].dstore, &plain);
    }
fail:
    return st;
}

/* ---- backward planning ------------------------------------------------------
 */

/* Where node i's gradient for its input x goes: the tensor's own gradient
 * store when i is the first contributor in backward order, else a scratch
 * store followed by an accumulation step (*acc set).  -1 when x needs no
 * gradient (the graph input). */
static cl_status grad_target(dn_ctx *d, int i, int x, int *store, int *acc)
{
    int r = rep(d, x);
    *acc = 0;
    *store = -1;
    if (x == d->g->input || r == d->g->input)
        return CL_OK;
    if (d->t[r].dstore < 0) {
        CL_TRY(md_store(d, &d->t[r].md, &d->t[r].dstore));
        *store = d->t[r].dstore;
        return CL_OK;
    }
    *acc = 1;
    return md_store(d, &d->t[r].md, store);
}

/* dstore(x) += src, both in x's layout. */
static cl_status accumulate(dn_ctx *d, int i, int x, int src)
{
    cl_status st = CL_OK;
    int r = rep(d, x);
    dnnl_binary_desc_t bd;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    const dnnl_memory_desc_t *md = &d->t[r].md;
    DN(dnnl_binary_desc_init(&bd, dnnl_binary_add, md, md, md), i,
       "gradient sum descriptor");
    TRY(prim_make(d, i, "gradient sum", &bd, NULL, NULL, &pd, &prim));
    TRY(step_prim(d, &d->bwd, i, "gradient sum", tb(d, i), pd, prim, &s));
    arg_store(d, s, DNNL_ARG_SRC_0, d->t[r].dstore, md);
    arg_store(d, s, DNNL_ARG_SRC_1, src, md);
    arg_store(d, s, DNNL_ARG_DST, d->t[r].dstore, md);
fail:
    return st;
}

static cl_status hook_step(dn_ctx *d, int i, int param)
{
    dn_step *s;
    CL_TRY(step_new(d, &d->bwd, STEP_HOOK, i, "grad ready", tb(d, i), &s));
    s->aux = param;
    return CL_OK;
}

/* The gradient of the node's output, which every consumer has written. */
static cl_status out_grad(dn_ctx *d, int i, int *store)
{
    int r = rep(d, d->g->nodes[i].out);
    *store = d->t[r].dstore;
    if (*store < 0)
        return cl_error(CL_ERR_UNSUPPORTED,
                        "%s: its output does not reach the loss, so backward "
                        "cannot give its parameters a gradient",
                        d->g->nodes[i].name);
    return CL_OK;
}

/* Weight gradient: straight into the grad arena when oneDNN's choice is
 * plain, else through a scratch store and a reorder. */
static cl_status diff_weights(dn_ctx *d, int i, dn_step *s,
                              const dnnl_memory_desc_t *dwmd,
                              const dnnl_memory_desc_t *plain, float *grad,
                              int *tmp)
{
    *tmp = -1;
    if (md_eq(dwmd, plain)) {
        arg_ext(s, DNNL_ARG_DIFF_WEIGHTS, grad, plain);
        return CL_OK;
    }
    CL_TRY(md_store(d, dwmd, tmp));
    arg_store(d, s, DNNL_ARG_DIFF_WEIGHTS, *tmp, dwmd);
    return CL_OK;
}

static cl_status diff_weights_back(dn_ctx *d, int i, int tmp,
                                   const dnnl_memory_desc_t *dwmd,
                                   const dnnl_memory_desc_t *plain, float *grad)
{
    cl_status st = CL_OK;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    if (tmp < 0)
        return CL_OK;
    TRY(reorder_make(d, i, "weight gradient reorder", dwmd, plain, &pd, &prim));
    TRY(step_prim(d, &d->bwd, i, "weight gradient reorder", tb(d, i), pd, prim,
                  &s));
    arg_store(d, s, DNNL_ARG_FROM, tmp, dwmd);
    arg_ext(s, DNNL_ARG_TO, grad, plain);
fail:
    return st;
}

/* The weights copy backward-data reads: the forward copy when the layouts
 * agree, else a copy reordered from the forward copy (blocked to blocked
 * moves whole 16x16 tiles, faster than from the plain arena). */
static cl_status bwd_weights_copy(dn_ctx *d, int i,
                                  const dnnl_memory_desc_t *plain, float *w,
                                  float **use)
{
    dn_node *x = &d->nd[i];
    if (md_eq(&x->wb_md, &x->w_md)) {
        *use = x->w ? x->w : w;
        return CL_OK;
    }
    if (md_eq(&x->wb_md, plain)) {
        *use = w;
        return CL_OK;
    }
    if (x->w)
        CL_TRY(weight_copy(d, i, "backward weights reorder", &x->w_md, x->w,
                           &x->wb_md, &x->wb));
    else
        CL_TRY(weight_copy(d, i, "backward weights reorder", plain, w,
                           &x->wb_md, &x->wb));
    *use = x->wb;
    return CL_OK;
}

/* The backward-data step of conv or linear node i made from pd / prim: dy
 * (dmd) and the weights (w, plain md wplain, in the layout pd asks for)
 * into store dx (dxmd). */
static cl_status bwd_data_step(dn_ctx *d, int i, const char *what,
                               dnnl_primitive_desc_t pd, dnnl_primitive_t prim,
                               int dy, const dnnl_memory_desc_t *dmd,
                               const dnnl_memory_desc_t *wplain, float *w,
                               int dx, const dnnl_memory_desc_t *dxmd)
{
    dn_node *x = &d->nd[i];
    dn_step *s;
    float *wb;
    x->wb_md = qmd(pd, dnnl_query_weights_md, 0);
    CL_TRY(bwd_weights_copy(d, i, wplain, w, &wb));
    CL_TRY(step_prim(d, &d->bwd, i, what, tb(d, i), pd, prim, &s));
    arg_store(d, s, DNNL_ARG_DIFF_DST, dy, dmd);
    arg_ext(s, DNNL_ARG_WEIGHTS, wb, &x->wb_md);
    arg_store(d, s, DNNL_ARG_DIFF_SRC, dx, dxmd);
    return CL_OK;
}

/* ---- weight gradient as a matmul ---------------------------------------
 *
 * dW (O, KH*KW*C) = dy^T (O, P) x cols (P, KH*KW*C), P = N*OH*OW, where
 * row p of cols holds the input patch output pixel p reads, (kh, kw, c)
 * with c fastest: dy and x reordered to NHWC make both operands plain
 * matrices, and the patch rows are whole C-runs of NHWC x (a 1x1 stride-1
 * conv needs no patches: NHWC x is cols).  dW comes out OHWI, reordered
 * into the OIHW grad arena (1x1: the same thing, written there directly).
 *
 * Why: when OH*OW is small (ResNet-50's layer3 and layer4 at 28x28 input
 * run at 4x4 and 2x2) oneDNN 2.6's jit backward-weights kernels run at a
 * third of what its matmul reaches on the same product (bf16, one thread,
 * mb128 512->512 3x3 at 2x2: 133 against 410 GFLOPS; 1x1 512->2048: 116
 * against 420), and the Fashion-MNIST recipe spent more time there than
 * in the forward (docs/amp.md).  At 7x7 and up the two are even. */
enum { DN_WGRAD_MATMUL_MAX_HW = 16 };
/* The largest output a measured plan (autotune) tries the matmul on: its
 * patch matrix grows with the output, and at 8x8 and up oneDNN's own
 * kernels were never slower. */
enum { DN_WGRAD_TUNE_MAX_HW = 64 };

/* Whether the weight gradient of conv i can run as a matmul. */
static int wgrad_matmul_ok(const cl_graph *g, int i)
{
    const cl_node *n = &g->nodes[i];
    const cl_conv2d_attr *a = &n->attr.conv2d;
    const cl_shape *y = &g->tensors[n->out].shape;
    return n->op == CL_OP_CONV2D && a->groups == 1 && !a->has_bias &&
           a->dh == 1 && a->dw == 1 &&
           y->d[2] * y->d[3] <= DN_WGRAD_TUNE_MAX_HW;
}

static int wgrad_as_matmul(const dn_ctx *d, int i)
{
    return ((d->paths[i] - '0') & 1) && wgrad_matmul_ok(d->g, i);
}

/* Store s (layout md) in NHWC, same type, for node i's backward. */
static cl_status nhwc_copy(dn_ctx *d, int i, const char *what, int s,
                           const dnnl_memory_desc_t *md,
                           dnnl_memory_desc_t *out, int *store)
{
    cl_status st = CL_OK;
    DN(dnnl_memory_desc_init_by_tag(out, 4, md->dims, md->data_type, dnnl_nhwc),
       i, what);
    return bwd_copy(d, i, what, s, md, out, store);
fail:
    return st;
}

/* The weight gradient of conv i from dy (dmd) and the forward's src into
 * gw (OIHW, plain md wplain). */
static cl_status plan_wgrad_matmul(dn_ctx *d, int i, int dy,
                                   const dnnl_memory_desc_t *dmd,
                                   const dnnl_memory_desc_t *wplain, float *gw)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    const cl_conv2d_attr *a = &n->attr.conv2d;
    const dn_node *x = &d->nd[i];
    dnnl_matmul_desc_t mm;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    dnnl_memory_desc_t dyh, xh, amd, bmd, cmd, wohwi;
    int dys, xhs, cols, tmp;
    const int64_t C = a->in_ch, O = a->out_ch;
    const int64_t P = dmd->dims[0] * dmd->dims[2] * dmd->dims[3];
    const int64_t KC = (int64_t)a->kh * a->kw * C;
    TRY(nhwc_copy(d, i, "weight gradient: dy to NHWC", dy, dmd, &dyh, &dys));
    TRY(nhwc_copy(d, i, "weight gradient: src to NHWC", x->src, &x->src_md, &xh,
                  &xhs));
    dnnl_dims_t bdims = {P, KC}, cdims = {O, KC}, adims = {O, P};
    dnnl_dims_t astr = {1, O};
    DN(dnnl_memory_desc_init_by_strides(&amd, 2, adims, dyh.data_type, astr), i,
       "weight gradient matmul");
    DN(dnnl_memory_desc_init_by_tag(&bmd, 2, bdims, xh.data_type, dnnl_ab), i,
       "weight gradient matmul");
    DN(dnnl_memory_desc_init_by_tag(&cmd, 2, cdims, dnnl_f32, dnnl_ab), i,
       "weight gradient matmul");
    int patches = a->kh != 1 || a->kw != 1 || a->sh != 1 || a->sw != 1 ||
                  a->ph != 0 || a->pw != 0;
    cols = xhs;
    if (patches) {
        TRY(md_store(d, &bmd, &cols));
        TRY(step_new(d, &d->bwd, STEP_IM2COL, i, "weight gradient: im2col",
                     tb(d, i), &s));
        arg_store(d, s, 0, xhs, &xh);
        arg_store(d, s, 1, cols, &bmd);
    }
    DN(dnnl_matmul_desc_init(&mm, &amd, &bmd, NULL, &cmd), i,
       "weight gradient matmul descriptor");
    TRY(prim_make(d, i, "weight gradient matmul", &mm, NULL, NULL, &pd, &prim));
    TRY(step_prim(d, &d->bwd, i, "weight gradient matmul", tb(d, i), pd, prim,
                  &s));
    arg_store(d, s, DNNL_ARG_SRC, dys, &amd);
    arg_store(d, s, DNNL_ARG_WEIGHTS, cols, &bmd);
    if (a->kh == 1 && a->kw == 1) {
        arg_ext(s, DNNL_ARG_DST, gw, &cmd);
        return CL_OK;
    }
    TRY(md_store(d, &cmd, &tmp));
    arg_store(d, s, DNNL_ARG_DST, tmp, &cmd);
    DN(dnnl_memory_desc_init_by_tag(&wohwi, 4, wplain->dims, dnnl_f32,
                                    dnnl_ohwi),
       i, "weight gradient matmul");
    TRY(diff_weights_back(d, i, tmp, &wohwi, wplain, gw));
fail:
    return st;
}

/* Patch rows of an STEP_IM2COL step: args[0] NHWC x, args[1] cols. */
static void im2col(dn_ctx *d, const dn_step *s)
{
    const cl_node *n = &d->g->nodes[s->node];
    const cl_conv2d_attr *a = &n->attr.conv2d;
    const cl_shape *xs = &gt(d, n->in[0])->shape, *ys = &gt(d, n->out)->shape;
    const int64_t H = xs->d[2], W = xs->d[3];
    const int64_t OH = ys->d[2], OW = ys->d[3], P = xs->d[0] * OH * OW;
    const size_t run = (size_t)a->in_ch * (md_bf16(&s->args[0].md) ? 2 : 4);
    const char *x = arg_ptr(d, &s->args[0]);
    char *cols = arg_ptr(d, &s->args[1]);
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < P; p++) {
        int64_t ow = p % OW, oh = p / OW % OH, b = p / (OW * OH);
        char *row = cols + (size_t)p * (size_t)(a->kh * a->kw) * run;
        for (int kh = 0; kh < a->kh; kh++) {
            int64_t ih = oh * a->sh - a->ph + kh;
            for (int kw = 0; kw < a->kw; kw++, row += run) {
                int64_t iw = ow * a->sw - a->pw + kw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                    memset(row, 0, run);
                else
                    memcpy(row, x + (size_t)((b * H + ih) * W + iw) * run, run);
            }
        }
    }
}

/* ---- backward data of strided 1x1 convs ---------------------------------
 *
 * A 1x1 conv at stride s reads only the input pixels (s oh, s ow), so its
 * dx is the stride-1 backward data on that grid (dims N, C, OH, OW), placed
 * on the grid with zeros between (STEP_UNSTRIDE).
 *
 * Why: oneDNN 2.6 runs the strided problem (ResNet's downsample convs) at
 * a third to a half of its stride-1 rate on the same product (bf16, one
 * thread, batch 128, 1024->2048 at 4x4 -> 2x2: 18.6 ms, where the same
 * conv's forward takes 8.5 ms and the stride-1 backward data of 512->2048
 * at 2x2, half the product, 4.3 ms). */
static int dgrad_grid_ok(const cl_graph *g, int i)
{
    const cl_node *n = &g->nodes[i];
    const cl_conv2d_attr *a = &n->attr.conv2d;
    return n->op == CL_OP_CONV2D && a->kh == 1 && a->kw == 1 &&
           (a->sh > 1 || a->sw > 1) && a->ph == 0 && a->pw == 0 &&
           a->groups == 1;
}

static int dgrad_unstrided(dn_ctx *d, int i)
{
    const dnnl_memory_desc_t *dx = in_md(d, d->g->nodes[i].in[0]);
    return ((d->paths[i] - '0') & 2) && dgrad_grid_ok(d->g, i) && dx &&
           md_act_tag(dx) >= 0;
}

/* dx of conv i into store tgt from dy (dmd) and the weights w (plain md
 * wplain), by way of the stride grid. */
static cl_status plan_dgrad_unstrided(dn_ctx *d, int i, int dy,
                                      const dnnl_memory_desc_t *dmd,
                                      const dnnl_memory_desc_t *wplain,
                                      float *w, int tgt)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    const dnnl_memory_desc_t *dxmd = in_md(d, n->in[0]);
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t hint = NULL, pd;
    dnnl_primitive_t prim;
    dn_step *s;
    dnnl_memory_desc_t gmd, sany, wany;
    dnnl_dims_t gdims = {dxmd->dims[0], dxmd->dims[1], dmd->dims[2],
                         dmd->dims[3]};
    dnnl_dims_t one = {1, 1}, zero = {0, 0};
    int gs;
    const char *what = "convolution backward data on the stride grid";
    const int tag = md_act_tag(dxmd);
    md_act_layout(dxmd, &d->nd[i].lay); /* for unstride() */
    DN(dnnl_memory_desc_init_by_tag(&gmd, 4, gdims, dxmd->data_type,
                                    act_layouts[tag].tag),
       i, what);
    md_any(&sany, 4, gdims, conv_dt(d));
    md_any(&wany, 4, wplain->dims, conv_dt(d));
    /* The stride-1 forward on the grid, as the hint backward needs. */
    DN(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training,
                                          dnnl_convolution_direct, &sany, &wany,
                                          NULL, dmd, one, zero, zero),
       i, what);
    DN(dnnl_primitive_desc_create(&hint, &cd, NULL, d->eng, NULL), i, what);
    DN(dnnl_convolution_backward_data_desc_init(
           &cd, dnnl_convolution_direct, &gmd, &wany, dmd, one, zero, zero),
       i, what);
    TRY(prim_make(d, i, what, &cd, NULL, hint, &pd, &prim));
    TRY(md_store(d, &gmd, &gs));
    TRY(bwd_data_step(d, i, what, pd, prim, dy, dmd, wplain, w, gs, &gmd));
    TRY(step_new(d, &d->bwd, STEP_UNSTRIDE, i, "backward data: unstride",
                 tb(d, i), &s));
    arg_store(d, s, 0, gs, &gmd);
    arg_store(d, s, 1, tgt, dxmd);
fail:
    if (hint)
        dnnl_primitive_desc_destroy(hint);
    return st;
}

/* An STEP_UNSTRIDE step: args[0] dx on the stride grid, args[1] dx, both
 * of one type and in the node's layout (one of act_layouts, found at plan
 * time); each plane of channel blocks is copied a whole block-pixel at a
 * time, the pixels off the grid zeroed. */
static void unstride(dn_ctx *d, const dn_step *s)
{
    const cl_conv2d_attr *a = &d->g->nodes[s->node].attr.conv2d;
    const dnnl_memory_desc_t *gm = &s->args[0].md, *fm = &s->args[1].md;
    const cl_bn_layout l = d->nd[s->node].lay;
    const int64_t NB = l.N * (l.sn / (l.HW * l.B));
    const int64_t H = fm->dims[2], W = fm->dims[3];
    const int64_t OH = gm->dims[2], OW = gm->dims[3];
    const size_t px = (size_t)l.B * (md_bf16(fm) ? 2 : 4);
    const char *grid = arg_ptr(d, &s->args[0]);
    char *dx = arg_ptr(d, &s->args[1]);
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < NB; b++) {
        const char *g = grid + (size_t)(b * OH * OW) * px;
        char *f = dx + (size_t)(b * H * W) * px;
        memset(f, 0, (size_t)(H * W) * px);
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++)
                memcpy(f + (size_t)(oh * a->sh * W + ow * a->sw) * px,
                       g + (size_t)(oh * OW + ow) * px, px);
    }
}

static cl_status plan_conv_bwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[i];
    const cl_conv2d_attr *a = &n->attr.conv2d;
    dn_node *x = &d->nd[i];
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    dnnl_dims_t wdims, strides, dil, pl, pr;
    dnnl_memory_desc_t wany, wf32, wplain, bmd, dwmd, dyc_md;
    int dy, dyc, tmp, tgt, acc;
    int path = 0; /* cl_dnnl_conv_paths of this node */
    /* src as the forward read it (bf16 under amp); dx in the input's own
     * type and layout; dy and the weights in the compute type. */
    int xs = x->src;
    const dnnl_memory_desc_t *smd = &x->src_md;
    const dnnl_memory_desc_t *dxmd = in_md(d, n->in[0]);
    const dnnl_memory_desc_t *dmd = &d->t[rep(d, n->out)].md;
    float *w = cl_graph_param(g, n->param[0]);
    TRY(out_grad(d, i, &dy));
    TRY(grad_as(d, i, dy, dmd, conv_dt(d), &dyc_md, &dyc));
    dmd = &dyc_md;
    dy = dyc;
    int wnd = conv_wdims(d, i, wdims);
    conv_geometry(d, i, strides, dil, pl, pr);
    md_any(&wany, wnd, wdims, conv_dt(d));
    md_plain(&wplain, wnd, wdims);
    float *gw = cl_graph_grad(g, n->param[0]);
    d->part = 1;
    if (wgrad_as_matmul(d, i)) {
        path |= 1;
        TRY(plan_wgrad_matmul(d, i, dy, dmd, &wplain, gw));
        TRY(hook_step(d, i, n->param[0]));
        goto data;
    }
    md_any(&wf32, wnd, wdims, dnnl_f32); /* weight gradients stay f32 */
    md_1d(&bmd, a->out_ch);
    DN(dnnl_dilated_convolution_backward_weights_desc_init(
           &cd, dnnl_convolution_direct, smd, &wf32, a->has_bias ? &bmd : NULL,
           dmd, strides, dil, pl, pr),
       i, "convolution backward weights descriptor");
    TRY(prim_make(d, i, "convolution backward weights", &cd, NULL, x->fwd_pd,
                  &pd, &prim));
    dwmd = qmd(pd, dnnl_query_diff_weights_md, 0);
    TRY(step_prim(d, &d->bwd, i, "convolution backward weights", tb(d, i), pd,
                  prim, &s));
    arg_store(d, s, DNNL_ARG_SRC, xs, smd);
    arg_store(d, s, DNNL_ARG_DIFF_DST, dy, dmd);
    TRY(diff_weights(d, i, s, &dwmd, &wplain, gw, &tmp));
    if (a->has_bias)
        arg_ext(s, DNNL_ARG_DIFF_BIAS, cl_graph_grad(g, n->param[1]), &bmd);
    TRY(diff_weights_back(d, i, tmp, &dwmd, &wplain, gw));
    TRY(hook_step(d, i, n->param[0]));
    if (a->has_bias)
        TRY(hook_step(d, i, n->param[1]));

data:
    d->part = 2;
    TRY(grad_target(d, i, n->in[0], &tgt, &acc));
    if (tgt < 0)
        goto fail;
    if (dgrad_unstrided(d, i)) {
        path |= 2;
        TRY(plan_dgrad_unstrided(d, i, dy, dmd, &wplain, w, tgt));
    } else {
        DN(dnnl_dilated_convolution_backward_data_desc_init(
               &cd, dnnl_convolution_direct, dxmd, &wany, dmd, strides, dil, pl,
               pr),
           i, "convolution backward data descriptor");
        TRY(prim_make(d, i, "convolution backward data", &cd, NULL, x->fwd_pd,
                      &pd, &prim));
        TRY(bwd_data_step(d, i, "convolution backward data", pd, prim, dy, dmd,
                          &wplain, w, tgt, dxmd));
    }
    if (acc)
        TRY(accumulate(d, i, n->in[0], tgt));
fail:
    d->part = 0;
    d->paths[i] = (char)('0' + path);
    return st;
}

static cl_status plan_bn_bwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    const cl_batchnorm2d_attr *a = &n->attr.batchnorm2d;
    dn_node *x = &d->nd[i];
    dn_step *s;
    dnnl_memory_desc_t cmd;
    int dy, tgt, acc;
    const dnnl_memory_desc_t *md = in_md(d, n->in[0]);
    md_1d(&cmd, a->channels);
    TRY(out_grad(d, i, &dy));
    TRY(grad_target(d, i, n->in[0], &tgt, &acc));
    if (tgt < 0) {
        /* The parameters still need gradients: dx goes to a scratch. */
        TRY(md_store(d, md, &tgt));
    }
    TRY(step_new(d, &d->bwd, STEP_BN_BWD, i, "batch normalization backward",
                 tb(d, i), &s));
    arg_store(d, s, 0, tgt, md);
    arg_store(d, s, 1, dy, md);
    arg_store(d, s, 2, d->t[rep(d, n->in[0])].store, md);
    arg_store(d, s, 3, x->mean, &cmd);
    arg_store(d, s, 4, x->var, &cmd);
    if (acc)
        TRY(accumulate(d, i, n->in[0], tgt));
    TRY(hook_step(d, i, n->param[0]));
    TRY(hook_step(d, i, n->param[1]));
fail:
    return st;
}

static cl_status plan_relu_bwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    dnnl_eltwise_desc_t ed;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    int dy, tgt, acc;
    const dnnl_memory_desc_t *md = in_md(d, n->out);
    TRY(out_grad(d, i, &dy));
    TRY(grad_target(d, i, n->in[0], &tgt, &acc));
    if (tgt < 0)
        return CL_OK;
    DN(dnnl_eltwise_backward_desc_init(&ed, dnnl_eltwise_relu_use_dst_for_bwd,
                                       md, md, 0.0f, 0.0f),
       i, "relu backward descriptor");
    TRY(prim_make(d, i, "relu backward", &ed, NULL, d->nd[i].fwd_pd, &pd,
                  &prim));
    TRY(step_prim(d, &d->bwd, i, "relu backward", tb(d, i), pd, prim, &s));
    arg_store(d, s, DNNL_ARG_DST, d->t[rep(d, n->out)].store, md);
    arg_store(d, s, DNNL_ARG_DIFF_DST, dy, md);
    arg_store(d, s, DNNL_ARG_DIFF_SRC, tgt, md);
    if (acc)
        TRY(accumulate(d, i, n->in[0], tgt));
fail:
    return st;
}

static cl_status plan_pool_bwd(dn_ctx *d, int i, int gap)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    dn_node *x = &d->nd[i];
    const cl_shape *xs = &gt(d, n->in[0])->shape;
    dnnl_pooling_desc_t pdsc;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    dnnl_dims_t strides, kernel, pl, pr;
    int dy, tgt, acc;
    const dnnl_memory_desc_t *smd = in_md(d, n->in[0]);
    const dnnl_memory_desc_t *dmd = in_md(d, n->out);
    TRY(out_grad(d, i, &dy));
    TRY(grad_target(d, i, n->in[0], &tgt, &acc));
    if (tgt < 0)
        return CL_OK;
    if (gap) {
        strides[0] = strides[1] = 1;
        kernel[0] = xs->d[2];
        kernel[1] = xs->d[3];
        pl[0] = pl[1] = pr[0] = pr[1] = 0;
    } else {
        const cl_maxpool2d_attr *a = &n->attr.maxpool2d;
        strides[0] = a->sh;
        strides[1] = a->sw;
        kernel[0] = a->kh;
        kernel[1] = a->kw;
        pl[0] = a->ph;
        pl[1] = a->pw;
        pr[0] = (dmd->dims[2] - 1) * a->sh + a->kh - xs->d[2] - a->ph;
        pr[1] = (dmd->dims[3] - 1) * a->sw + a->kw - xs->d[3] - a->pw;
    }
    DN(dnnl_pooling_backward_desc_init(
           &pdsc, gap ? dnnl_pooling_avg_exclude_padding : dnnl_pooling_max,
           smd, dmd, strides, kernel, pl, pr),
       i, "pooling backward descriptor");
    TRY(prim_make(d, i, "pooling backward", &pdsc, NULL, x->fwd_pd, &pd,
                  &prim));
    TRY(step_prim(d, &d->bwd, i, "pooling backward", tb(d, i), pd, prim, &s));
    arg_store(d, s, DNNL_ARG_DIFF_DST, dy, dmd);
    if (x->ws >= 0) {
        dnnl_memory_desc_t wsmd = qmd(pd, dnnl_query_workspace_md, 0);
        arg_store(d, s, DNNL_ARG_WORKSPACE, x->ws, &wsmd);
    }
    arg_store(d, s, DNNL_ARG_DIFF_SRC, tgt, smd);
    if (acc)
        TRY(accumulate(d, i, n->in[0], tgt));
fail:
    return st;
}

static cl_status plan_linear_bwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[i];
    const cl_linear_attr *a = &n->attr.linear;
    dn_node *x = &d->nd[i];
    dnnl_inner_product_desc_t ipd;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    dnnl_dims_t wdims;
    dnnl_memory_desc_t wany, wf32, wplain, bmd, dwmd, dyc_md;
    int dy, dyc, tmp, tgt, acc;
    /* As for convolutions: src as read by forward, dx in the input's type,
     * dy (f32 from the loss) cast to the compute type. */
    const dnnl_memory_desc_t *smd = &x->src_md;
    const dnnl_memory_desc_t *dxmd = in_md(d, n->in[0]);
    const dnnl_memory_desc_t *dmd = in_md(d, n->out);
    float *w = cl_graph_param(g, n->param[0]);
    TRY(out_grad(d, i, &dy));
    TRY(grad_as(d, i, dy, dmd, conv_dt(d), &dyc_md, &dyc));
    dmd = &dyc_md;
    dy = dyc;
    linear_wdims(d, i, smd, wdims);
    md_any(&wany, smd->ndims, wdims, conv_dt(d));
    md_any(&wf32, smd->ndims, wdims, dnnl_f32);
    md_plain(&wplain, smd->ndims, wdims);
    md_1d(&bmd, a->out_features);

    DN(dnnl_inner_product_backward_weights_desc_init(
           &ipd, smd, &wf32, a->has_bias ? &bmd : NULL, dmd),
       i, "inner product backward weights descriptor");
    TRY(prim_make(d, i, "inner product backward weights", &ipd, NULL, x->fwd_pd,
                  &pd, &prim));
    dwmd = qmd(pd, dnnl_query_diff_weights_md, 0);
    TRY(step_prim(d, &d->bwd, i, "inner product backward weights", tb(d, i), pd,
                  prim, &s));
    arg_store(d, s, DNNL_ARG_SRC, x->src, smd);
    arg_store(d, s, DNNL_ARG_DIFF_DST, dy, dmd);
    float *gw = cl_graph_grad(g, n->param[0]);
    TRY(diff_weights(d, i, s, &dwmd, &wplain, gw, &tmp));
    if (a->has_bias)
        arg_ext(s, DNNL_ARG_DIFF_BIAS, cl_graph_grad(g, n->param[1]), &bmd);
    TRY(diff_weights_back(d, i, tmp, &dwmd, &wplain, gw));
    TRY(hook_step(d, i, n->param[0]));
    if (a->has_bias)
        TRY(hook_step(d, i, n->param[1]));

    TRY(grad_target(d, i, n->in[0], &tgt, &acc));
    if (tgt < 0)
        return CL_OK;
    DN(dnnl_inner_product_backward_data_desc_init(&ipd, dxmd, &wany, dmd), i,
       "inner product backward data descriptor");
    TRY(prim_make(d, i, "inner product backward data", &ipd, NULL, x->fwd_pd,
                  &pd, &prim));
    TRY(bwd_data_step(d, i, "inner product backward data", pd, prim, dy, dmd,
                      &wplain, w, tgt, dxmd));
    if (acc)
        TRY(accumulate(d, i, n->in[0], tgt));
fail:
    return st;
}

/* Whether a tensor other than `except` shares gradient store ds and has
 * its producer's backward still to come after node i's. */
static int dstore_pending(const dn_ctx *d, int ds, int except, int i)
{
    for (int t = 0; t < d->g->n_tensors; t++)
        if (d->t[t].rep == t && t != except && d->t[t].dstore == ds &&
            gt(d, t)->producer < i)
            return 1;
    return 0;
}

static cl_status copy_step(dn_ctx *d, int i, const dnnl_memory_desc_t *md,
                           int from, int to)
{
    cl_status st = CL_OK;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    TRY(reorder_make(d, i, "gradient copy", md, md, &pd, &prim));
    TRY(step_prim(d, &d->bwd, i, "gradient copy", tb(d, i), pd, prim, &s));
    arg_store(d, s, DNNL_ARG_FROM, from, md);
    arg_store(d, s, DNNL_ARG_TO, to, md);
fail:
    return st;
}

static cl_status plan_add_bwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    dn_node *x = &d->nd[i];
    int out = rep(d, n->out), dy;
    const dnnl_memory_desc_t *md = &d->t[out].md;
    TRY(out_grad(d, i, &dy));
    if (x->relu) {
        dnnl_eltwise_desc_t ed;
        dnnl_primitive_desc_t pd;
        dnnl_primitive_t prim;
        dn_step *s;
        int to = dy;
        /* In place unless another tensor still reads this gradient. */
        if (dstore_pending(d, dy, out, i))
            TRY(md_store(d, md, &to));
        DN(dnnl_eltwise_backward_desc_init(
               &ed, dnnl_eltwise_relu_use_dst_for_bwd, md, md, 0.0f, 0.0f),
           i, "relu backward descriptor");
        /* The forward hint: the ReLU fused into the binary add. */
        dnnl_eltwise_desc_t fd;
        dnnl_primitive_desc_t fpd;
        dnnl_primitive_t fprim;
        DN(dnnl_eltwise_forward_desc_init(&fd, dnnl_forward_training,
                                          dnnl_eltwise_relu_use_dst_for_bwd, md,
                                          0.0f, 0.0f),
           i, "relu forward descriptor");
        TRY(prim_make(d, i, "relu forward", &fd, NULL, NULL, &fpd, &fprim));
        TRY(prim_make(d, i, "relu backward", &ed, NULL, fpd, &pd, &prim));
        TRY(step_prim(d, &d->bwd, i, "relu backward", tb(d, i), pd, prim, &s));
        arg_store(d, s, DNNL_ARG_DST, d->t[out].store, md);
        arg_store(d, s, DNNL_ARG_DIFF_DST, dy, md);
        arg_store(d, s, DNNL_ARG_DIFF_SRC, to, md);
        dy = to;
    }
    for (int k = 0; k < n->n_in; k++) {
        int in = n->in[k], r = rep(d, in);
        if (in == d->g->input || r == d->g->input)
            continue;
        if (k == 1 && n->in[0] == in) {
            /* add(a, a): the second contribution of the same tensor. */
            TRY(accumulate(d, i, in, dy));
            continue;
        }
        if (d->t[r].dstore >= 0) {
            TRY(accumulate(d, i, in, dy));
        } else if (d->ncons[in] == 1 && md_eq(&d->t[r].md, md)) {
            /* Read by this add alone: nothing else will write its gradient,
             * so it can be the very same buffer. */
            d->t[r].dstore = dy;
            touch(d, dy, tb(d, i));
        } else {
            TRY(md_store(d, &d->t[r].md, &d->t[r].dstore));
            if (md_eq(&d->t[r].md, md))
                TRY(copy_step(d, i, md, dy, d->t[r].dstore));
            else {
                st = cl_error(CL_ERR_UNSUPPORTED,
                              "%s: add inputs in different layouts", n->name);
                goto fail;
            }
        }
    }
fail:
    return st;
}

/* ---- execution --------------------------------------------------------------
 */

static void bn_stats(dn_ctx *d, const dn_step *s)
{
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[s->node];
    const cl_batchnorm2d_attr *a = &n->attr.batchnorm2d;
    const float *mean = arg_ptr(d, &s->args[0]);
    const float *var = arg_ptr(d, &s->args[1]);
    float *rm = cl_graph_buffer(g, n->buf[0]);
    float *rv = cl_graph_buffer(g, n->buf[1]);
    double cnt = d->nd[s->node].count;
    double unb = cnt > 1 ? cnt / (cnt - 1) : 1.0;
    const float mo = a->momentum;
    for (int c = 0; c < a->channels; c++) {
        rm[c] = (1.0f - mo) * rm[c] + mo * mean[c];
        rv[c] = (1.0f - mo) * rv[c] + mo * (float)(var[c] * unb);
    }
}

/* Mean softmax cross-entropy over the batch; writes dlogits when a
 * gradient store was planned. */
static void softmax_ce(dn_ctx *d, const dn_step *s)
{
    const cl_graph *g = d->g;
    const cl_softmax_ce_attr *a = &g->nodes[s->node].attr.softmax_ce;
    const int N = g->batch, K = a->num_classes;
    const float *z = arg_ptr(d, &s->args[0]);
    float *dz = s->nargs > 1 ? arg_ptr(d, &s->args[1]) : NULL;
    const float ls = a->label_smoothing;
    double total = 0.0;
    if (!d->has_labels && !d->has_targets) {
        d->loss = NAN;
        return;
    }
    for (int i = 0; i < N; i++) {
        const float *zi = z + (size_t)i * K;
        float m = zi[0];
        for (int k = 1; k < K; k++)
            m = zi[k] > m ? zi[k] : m;
        double se = 0.0;
        for (int k = 0; k < K; k++)
            se += exp((double)(zi[k] - m));
        double lse = (double)m + log(se);
        double li = 0.0;
        for (int k = 0; k < K; k++) {
            double t;
            if (d->has_labels)
                t = d->labels[i] == k ? 1.0 : 0.0;
            else
                t = d->targets[(size_t)i * K + k];
            t = (1.0 - ls) * t + ls / K;
            li -= t * ((double)zi[k] - lse);
            if (dz)
                dz[(size_t)i * K + k] =
                    (float)((exp((double)zi[k] - lse) - t) / N);
        }
        total += li;
    }
    d->loss = (float)(total / N);
}

static void fold_bn(dn_ctx *d, const dn_step *s)
{
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[s->node];
    const cl_node *b = &g->nodes[d->nd[s->node].bn];
    const cl_conv2d_attr *a = &n->attr.conv2d;
    const float *w = cl_graph_param(g, n->param[0]);
    const float *bias = a->has_bias ? cl_graph_param(g, n->param[1]) : NULL;
    const float *gamma = cl_graph_param(g, b->param[0]);
    const float *beta = cl_graph_param(g, b->param[1]);
    const float *rm = cl_graph_buffer(g, b->buf[0]);
    const float *rv = cl_graph_buffer(g, b->buf[1]);
    const float eps = b->attr.batchnorm2d.eps;
    size_t per = (size_t)cl_graph_numel(g, n->param[0]) / (size_t)a->out_ch;
    float *fw = d->fold, *fb = d->nd[s->node].bias;
    for (int o = 0; o < a->out_ch; o++) {
        float k = gamma[o] / sqrtf(rv[o] + eps);
        for (size_t j = 0; j < per; j++)
            fw[(size_t)o * per + j] = w[(size_t)o * per + j] * k;
        fb[o] = beta[o] + ((bias ? bias[o] : 0.0f) - rm[o]) * k;
    }
}

/* SyncBatchNorm forward of an own-BN node: local sums, the hook adds them
 * (and the sample count) over all ranks, then every rank normalises with
 * the global mean and biased variance, which the mean / var stores keep
 * for backward and the running-statistics step.  p: src, dst, mean, var. */
static cl_status own_bn_sync_fwd(dn_ctx *d, const dn_step *s, void **p,
                                 const cl_bn_layout *l, int bf)
{
    const int C = l->C;
    const cl_backend_hooks *h = &d->be->hooks;
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[s->node];
    const cl_batchnorm2d_attr *a = &n->attr.batchnorm2d;
    double *v = d->sync_sums;
    float *mean = p[2], *var = p[3];
    cl_dnnl_bn_sums(v, v + C, p[0], l, bf);
    v[2 * C] = (double)l->N * (double)l->HW;
    cl_status st = h->allreduce_sum(h->ctx, v, 2 * C + 1);
    if (st != CL_OK)
        return cl_error_wrap(st, "%s: SyncBatchNorm: ", n->name);
    const double M = v[2 * C];
    for (int c = 0; c < C; c++) {
        double mu = v[c] / M, var_c = v[C + c] / M - mu * mu;
        mean[c] = (float)mu;
        var[c] = var_c > 0.0 ? (float)var_c : 0.0f;
    }
    d->nd[s->node].count = M;
    cl_dnnl_bn_forward_infer(p[1], p[0], cl_graph_param(g, n->param[0]),
                             cl_graph_param(g, n->param[1]), mean, var, l,
                             a->eps, d->nd[s->node].relu, bf);
    return CL_OK;
}

/* SyncBatchNorm backward: dgamma and dbeta are this rank's sums (param
 * gradients are averaged over ranks like any other); dx needs the global
 * sums of dy and dy * xhat over the forward's global count.  p: dx, dy,
 * x, mean, var. */
static cl_status own_bn_sync_bwd(dn_ctx *d, const dn_step *s, void **p,
                                 const cl_bn_layout *l, int bf)
{
    const int C = l->C;
    const cl_backend_hooks *h = &d->be->hooks;
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[s->node];
    const cl_batchnorm2d_attr *a = &n->attr.batchnorm2d;
    const float *gamma = cl_graph_param(g, n->param[0]);
    const float *beta = cl_graph_param(g, n->param[1]);
    float *dgamma = cl_graph_grad(g, n->param[0]);
    float *dbeta = cl_graph_grad(g, n->param[1]);
    int relu = d->nd[s->node].relu;
    double *v = d->sync_sums;
    cl_dnnl_bn_backward_sums(v, v + C, p[1], p[2], p[3], p[4], gamma, beta, l,
                             a->eps, relu, bf);
    for (int c = 0; c < C; c++) {
        dbeta[c] = (float)v[c];
        dgamma[c] = (float)v[C + c];
    }
    cl_status st = h->allreduce_sum(h->ctx, v, 2 * C);
    if (st != CL_OK)
        return cl_error_wrap(st, "%s: SyncBatchNorm backward: ", n->name);
    cl_dnnl_bn_backward_dx(p[0], p[1], p[2], p[3], p[4], gamma, beta, v, v + C,
                           d->nd[s->node].count, l, a->eps, relu, bf);
    return CL_OK;
}

/* The onednn_bn.c loops of a BN step, on f32 or bf16 activations (the
 * type of the step's first argument); with the allreduce_sum hook the
 * training forward and the backward are split at their per-channel sums
 * (SyncBatchNorm), else they run fused in one pass per block. */
static cl_status own_bn(dn_ctx *d, const dn_step *s)
{
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[s->node];
    const cl_batchnorm2d_attr *a = &n->attr.batchnorm2d;
    const cl_bn_layout *l = &d->nd[s->node].lay;
    const float *gamma = cl_graph_param(g, n->param[0]);
    const float *beta = cl_graph_param(g, n->param[1]);
    const int sync = d->be->hooks.allreduce_sum != NULL;
    const int bf = md_bf16(&s->args[0].md);
    int relu = d->nd[s->node].relu;
    void *p[5] = {NULL, NULL, NULL, NULL, NULL};
    for (int k = 0; k < s->nargs && k < 5; k++)
        p[k] = arg_ptr(d, &s->args[k]);
    if (s->kind == STEP_BN_FWD) {
        if (sync)
            return own_bn_sync_fwd(d, s, p, l, bf);
        cl_dnnl_bn_forward_train(p[1], p[2], p[3], p[0], gamma, beta, l, a->eps,
                                 relu, bf);
        d->nd[s->node].count = (double)l->N * (double)l->HW;
    } else if (s->kind == STEP_BN_INFER) {
        cl_dnnl_bn_forward_infer(
            p[1], p[0], gamma, beta, cl_graph_buffer(g, n->buf[0]),
            cl_graph_buffer(g, n->buf[1]), l, a->eps, relu, bf);
    } else if (sync) {
        return own_bn_sync_bwd(d, s, p, l, bf);
    } else {
        cl_dnnl_bn_backward(p[0], cl_graph_grad(g, n->param[0]),
                            cl_graph_grad(g, n->param[1]), p[1], p[2], p[3],
                            p[4], gamma, beta, l, a->eps, relu, bf);
    }
    return CL_OK;
}

static cl_status run_list(dn_ctx *d, dn_list *l)
{
    cl_status st = CL_OK;
    cl_backend *be = d->be;
    for (int k = 0; k < l->n; k++) {
        dn_step *s = &l->s[k];
        double t0 = d->prof && s->part ? cl_time_now() : 0.0;
        switch (s->kind) {
        case STEP_PRIM:
            DN(dnnl_primitive_execute(s->prim, d->strm, s->nargs, s->exec),
               s->node, s->what);
            break;
        case STEP_BN_STATS:
            bn_stats(d, s);
            break;
        case STEP_LOSS:
            softmax_ce(d, s);
            break;
        case STEP_HOOK:
            if (be->hooks.grad_ready) {
                DN(dnnl_stream_wait(d->strm), s->node, "stream wait");
                be->hooks.grad_ready(be->hooks.ctx, s->aux);
            }
            break;
        case STEP_FOLD:
            fold_bn(d, s);
            break;
        case STEP_BN_FWD:
        case STEP_BN_INFER:
        case STEP_BN_BWD:
            TRY(own_bn(d, s));
            break;
        case STEP_IM2COL:
            im2col(d, s);
            break;
        case STEP_UNSTRIDE:
            unstride(d, s);
            break;
        }
        if (t0 > 0.0)
            d->prof[3 * s->node + s->part] += cl_time_now() - t0;
    }
    DN(dnnl_stream_wait(d->strm), -1, "stream wait");
fail:
    return st;
}

/* Memory objects for every argument, now that the arena exists. */
static cl_status bind_list(dn_ctx *d, dn_list *l)
{
    cl_status st = CL_OK;
    for (int k = 0; k < l->n; k++) {
        dn_step *s = &l->s[k];
        if (s->kind != STEP_PRIM)
            continue;
        for (int a = 0; a < s->nargs; a++) {
            dn_arg *x = &s->args[a];
            void *p = arg_ptr(d, x);
            DN(dnnl_memory_create(&s->mem[a], &x->md, d->eng,
                                  x->kind == REF_USER ? DNNL_MEMORY_NONE : p),
               s->node, "memory");
            s->exec[a].arg = x->arg;
            s->exec[a].memory = s->mem[a];
        }
    }
fail:
    return st;
}

static void free_list(dn_list *l)
{
    for (int k = 0; k < l->n; k++)
        for (int a = 0; a < l->s[k].nargs; a++)
            if (l->s[k].mem[a])
                dnnl_memory_destroy(l->s[k].mem[a]);
    cl_free(l->s);
    l->s = NULL;
    l->n = l->cap = 0;
}

int cl_dnnl_plan_steps(const cl_backend *be, const char *what)
{
    const dn_ctx *d = be->priv;
    if (be->vt != &cl_backend_onednn_vtbl || !d)
        return -1;
    const dn_list *l[] = {&d->fwd_train, &d->fwd_eval, &d->bwd, &d->sync,
                          &d->in};
    int count = 0;
    for (size_t k = 0; k < sizeof l / sizeof l[0]; k++)
        for (int j = 0; j < l[k]->n; j++)
            count += strcmp(l[k]->s[j].what, what) == 0;
    return count;
}

const char *cl_dnnl_conv_paths(const cl_backend *be)
{
    const dn_ctx *d = be->priv;
    if (be->vt != &cl_backend_onednn_vtbl || !d)
        return NULL;
    return d->paths;
}

void cl_dnnl_tune_counts(const cl_backend *be, int *measured, int *rewritten)
{
    const dn_ctx *d = be->priv;
    int ok = be->vt == &cl_backend_onednn_vtbl && d;
    *measured = ok ? d->tune_measured : 0;
    *rewritten = ok ? d->tune_rewritten : 0;
}

/* ---- measured choice of the conv backward paths (autotune) -------------
 *
 * Which way of a conv's backward is faster depends on the CPU (AVX2,
 * AVX-512, AMX), the precision, the layout oneDNN picks and the shape:
 * the thresholds above were measured on one CPU.  A measured plan makes
 * two plans of the graph first, every second way on and every one off,
 * runs a few training steps of each on random data, times each conv's
 * weight-gradient and data-gradient steps, adds the times of convs of
 * the same shape, and keeps the faster way per shape and part. */
enum { DN_TUNE_STEPS = 3 };

static int same_conv_shape(const cl_graph *g, int i, int j)
{
    const cl_conv2d_attr *a = &g->nodes[i].attr.conv2d;
    const cl_conv2d_attr *b = &g->nodes[j].attr.conv2d;
    const cl_shape *x = &g->tensors[g->nodes[i].in[0]].shape;
    const cl_shape *y = &g->tensors[g->nodes[j].in[0]].shape;
    if (x->ndim != y->ndim)
        return 0;
    for (int k = 0; k < x->ndim; k++)
        if (x->d[k] != y->d[k])
            return 0;
    return a->in_ch == b->in_ch && a->out_ch == b->out_ch && a->kh == b->kh &&
           a->kw == b->kw && a->sh == b->sh && a->sw == b->sw &&
           a->ph == b->ph && a->pw == b->pw && a->dh == b->dh &&
           a->dw == b->dw && a->groups == b->groups &&
           a->has_bias == b->has_bias;
}

/* Seconds per (node, part) of the last DN_TUNE_STEPS - 1 training steps of
 * g planned with paths (every conv's wanted way) into t (3 per node). */
static cl_status tune_time(cl_graph *g, const cl_backend_opts *base,
                           const char *paths, const float *x,
                           const int32_t *labels, double *t)
{
    cl_backend *be = NULL;
    cl_backend_opts o = *base;
    o.autotune = 0;
    o.conv_paths = paths;
    CL_TRY(cl_backend_create(&be, "onednn", g, CL_PLAN_TRAIN, &o));
    dn_ctx *d = be->priv;
    cl_status st = CL_OK;
    d->prof = t;
    for (int k = 0; k < DN_TUNE_STEPS && st == CL_OK; k++) {
        if (k == 1) /* the first step warms caches and pages */
            memset(t, 0, sizeof *t * 3 * (size_t)g->n_nodes);
        st = cl_backend_set_input(be, x, labels, NULL);
        if (st == CL_OK)
            st = cl_backend_forward(be, 1, NULL);
        if (st == CL_OK)
            st = cl_backend_backward(be);
    }
    d->prof = NULL;
    cl_backend_destroy(be);
    return st;
}

/* Fills d->paths by measurement (see above).  The graph's buffers (BN
 * running statistics) are restored; its gradients are left overwritten,
 * as any backward leaves them. */
static cl_status tune(dn_ctx *d)
{
    cl_graph *g = d->g;
    const int n = g->n_nodes;
    cl_status st = CL_OK;
    char *all = cl_alloc_zero((size_t)n + 1, "onednn: tune");
    char *none = cl_alloc_zero((size_t)n + 1, "onednn: tune");
    double *t = cl_alloc_zero(sizeof(double) * 6 * (size_t)n, "onednn: tune");
    size_t nx = (size_t)cl_graph_numel(g, g->input);
    float *x = cl_alloc(sizeof(float) * (nx ? nx : 1), "onednn: tune");
    int32_t *labels =
        cl_alloc(sizeof(int32_t) * (size_t)g->batch + 1, "onednn: tune");
    float *buf =
        cl_alloc(sizeof(float) * (g->n_buffer_floats + 1), "onednn: tune");
    if (!all || !none || !t || !x || !labels || !buf) {
        st = CL_ERR_NOMEM;
        goto done;
    }
    int any = 0;
    for (int i = 0; i < n; i++) {
        int want =
            (wgrad_matmul_ok(g, i) ? 1 : 0) | (dgrad_grid_ok(g, i) ? 2 : 0);
        all[i] = (char)('0' + want);
        none[i] = '0';
        any |= want;
    }
    if (!any) { /* nothing to choose */
        memcpy(d->paths, none, (size_t)n);
        goto done;
    }
    cl_rng r;
    cl_rng_init(&r, 1, 0);
    for (size_t k = 0; k < nx; k++)
        x[k] = cl_rng_uniform(&r) - 0.5f;
    for (int k = 0; k < g->batch; k++)
        labels[k] = g->num_classes > 0 ? k % g->num_classes : 0;
    memcpy(buf, g->buffers, sizeof(float) * g->n_buffer_floats);
    st = tune_time(g, &d->be->opts, all, x, labels, t);
    if (st == CL_OK)
        st = tune_time(g, &d->be->opts, none, x, labels, t + 3 * (size_t)n);
    memcpy(g->buffers, buf, sizeof(float) * g->n_buffer_floats);
    if (st != CL_OK) {
        st = cl_error_wrap(st, "measuring the conv backward paths: ");
        goto done;
    }
    /* Per shape and part: the rewrite's total against the primitive's. */
    for (int i = 0; i < n; i++) {
        int want = all[i] - '0', got = 0;
        for (int part = 1; part <= 2; part++) {
            if (!(want & part))
                continue;
            double rw = 0, pr = 0;
            for (int j = 0; j < n; j++)
                if ((all[j] - '0') & part && same_conv_shape(g, i, j)) {
                    rw += t[3 * j + part];
                    pr += t[3 * (size_t)n + 3 * j + part];
                }
            d->tune_measured++;
            if (rw < pr) {
                got |= part;
                d->tune_rewritten++;
            }
        }
        d->paths[i] = (char)('0' + got);
    }
done:
    cl_free(all);
    cl_free(none);
    cl_free(t);
    cl_free(x);
    cl_free(labels);
    cl_free(buf);
    return st;
}

/* d->paths before planning: the caller's, measured, or the thresholds. */
static cl_status choose_paths(dn_ctx *d)
{
    cl_graph *g = d->g;
    const cl_backend_opts *o = &d->be->opts;
    d->paths = cl_alloc_zero((size_t)g->n_nodes + 1, "onednn: paths");
    if (!d->paths)
        return CL_ERR_NOMEM;
    if (o->conv_paths) {
        size_t len = strlen(o->conv_paths);
        if (len != (size_t)g->n_nodes || strspn(o->conv_paths, "0123") != len)
            return cl_error(CL_ERR_ARG,
                            "onednn: conv paths '%.40s' do not fit this "
                            "graph (%d nodes, one of 0-3 each)",
                            o->conv_paths, g->n_nodes);
        memcpy(d->paths, o->conv_paths, len);
        return CL_OK;
    }
    memset(d->paths, '0', (size_t)g->n_nodes);
    if (o->direct_convs)
        return CL_OK;
    if (o->autotune && d->mode == CL_PLAN_TRAIN)
        return tune(d);
    for (int i = 0; i < g->n_nodes; i++) {
        const cl_shape *y = &g->tensors[g->nodes[i].out].shape;
        int want = wgrad_matmul_ok(g, i) &&
                   y->d[2] * y->d[3] <= DN_WGRAD_MATMUL_MAX_HW;
        want |= dgrad_grid_ok(g, i) ? 2 : 0;
        d->paths[i] = (char)('0' + want);
    }
    return CL_OK;
}

/* Flush-to-zero and denormals-are-zero on the calling thread and every
 * OpenMP worker, set at plan and again at every step and left set.
 * Gradients and momentum of deep nets reach the denormal range (below
 * 1e-38) and x86 cores take a microcode assist on every such operand:
 * without this a ResNet-50 step at 224x224 ran about 5x slower, the time in
 * BN and conv backward and in the optimizer's loop over the param arena
 * (which runs on the same threads after backward, hence not restored).
 * Values that small are zero for training purposes; TensorFlow flushes
 * them by default too. */
static void dn_ftz(void)
{
#if defined(__SSE__)
#pragma omp parallel
    _mm_setcsr(_mm_getcsr() | 0x8040);
    _mm_setcsr(_mm_getcsr() | 0x8040);
#endif
}

/* ---- vtable -----------------------------------------------------------------
 */

static int dn_supports(const cl_node *n)
{
    switch (n->op) {
    case CL_OP_CONV2D:
    case CL_OP_BATCHNORM2D:
    case CL_OP_RELU:
    case CL_OP_MAXPOOL2D:
    case CL_OP_GLOBAL_AVGPOOL:
    case CL_OP_LINEAR:
    case CL_OP_ADD:
    case CL_OP_SOFTMAX_CE:
        return 1;
    default:
        return 0;
    }
}

static void dn_destroy(cl_backend *be)
{
    dn_ctx *d = be->priv;
    if (!d)
        return;
    free_list(&d->fwd_train);
    free_list(&d->fwd_eval);
    free_list(&d->bwd);
    free_list(&d->sync);
    free_list(&d->in);
    for (int k = 0; k < d->n_prims; k++)
        dnnl_primitive_destroy(d->prims[k]);
    for (int k = 0; k < d->n_pds; k++)
        dnnl_primitive_desc_destroy(d->pds[k]);
    cl_free(d->prims);
    cl_free(d->pds);
    if (d->nd) {
        for (int i = 0; i < d->g->n_nodes; i++) {
            cl_free(d->nd[i].w);
            cl_free(d->nd[i].wb);
            cl_free(d->nd[i].bias);
        }
    }
    cl_free(d->nd);
    cl_free(d->t);
    cl_free(d->ncons);
    cl_free(d->lastc);
    cl_free(d->st);
    cl_free(d->arena);
    cl_free(d->scratch);
    cl_free(d->sync_sums);
    cl_free(d->paths);
    cl_free(d->fold);
    cl_free(d->labels);
    cl_free(d->targets);
    if (d->strm)
        dnnl_stream_destroy(d->strm);
    if (d->eng)
        dnnl_engine_destroy(d->eng);
    cl_free(d);
    be->priv = NULL;
}

static cl_status plan_input_step(dn_ctx *d)
{
    cl_status st = CL_OK;
    int x = d->g->input;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    TRY(ensure_input_md(d, x));
    int r = rep(d, x);
    dnnl_memory_desc_t plain;
    md_plain_like(&plain, &d->t[r].md);
    /* The input is kept for the whole step so forward can run again. */
    touch(d, d->t[r].store, 0);
    touch(d, d->t[r].store, d->n_time);
    d->in_plain = md_eq(&plain, &d->t[r].md);
    if (d->in_plain)
        return CL_OK;
    TRY(reorder_make(d, -1, "input reorder", &plain, &d->t[r].md, &pd, &prim));
    TRY(step_prim(d, &d->in, -1, "input reorder", 0, pd, prim, &s));
    s->args[s->nargs].arg = DNNL_ARG_FROM;
    s->args[s->nargs].kind = REF_USER;
    s->args[s->nargs].store = -1;
    s->args[s->nargs].md = plain;
    s->nargs++;
    arg_store(d, s, DNNL_ARG_TO, d->t[r].store, &d->t[r].md);
fail:
    return st;
}

static cl_status dn_plan(cl_backend *be, cl_graph *g, cl_plan_mode mode)
{
    cl_status st = CL_OK;
    dn_ctx *d = cl_alloc_zero(sizeof *d, "onednn: plan");
    if (!d)
        return CL_ERR_NOMEM;
    be->priv = d;
    d->be = be;
    d->g = g;
    d->mode = mode;
    d->amp = be->opts.amp_level;
    if (d->amp && !cl_dnnl_bf16_supported())
        return cl_error(CL_ERR_UNSUPPORTED,
                        "amp_level O%d needs bf16 convolutions, which oneDNN "
                        "runs on AVX-512 CPUs only, and it runs at %s here; "
                        "use amp_level O0 (f32)",
                        d->amp, cl_dnnl_isa_name());
    if (be->opts.threads > 0)
        omp_set_num_threads(be->opts.threads);
    dn_ftz();
    for (int i = 0; i < g->n_nodes; i++)
        if (!dn_supports(&g->nodes[i]))
            return cl_error(CL_ERR_UNSUPPORTED,
                            "%s: op %s has no oneDNN "
                            "kernel",
                            g->nodes[i].name, cl_op_name(g->nodes[i].op));
    DN(dnnl_engine_create(&d->eng, dnnl_cpu, 0), -1, "engine");
    DN(dnnl_stream_create(&d->strm, d->eng, dnnl_stream_default_flags), -1,
       "stream");
    size_t nt = (size_t)g->n_tensors, nn = (size_t)g->n_nodes;
    d->t = cl_alloc_zero(sizeof *d->t * (nt ? nt : 1), "onednn: tensors");
    d->nd = cl_alloc_zero(sizeof *d->nd * (nn ? nn : 1), "onednn: nodes");
    d->ncons = cl_alloc_zero(sizeof(int) * (nt ? nt : 1), "onednn: uses");
    d->lastc = cl_alloc_zero(sizeof(int) * (nt ? nt : 1), "onednn: uses");
    d->labels =
        cl_alloc_zero(sizeof(int32_t) * (size_t)g->batch + 1, "onednn: labels");
    d->targets =
        cl_alloc_zero(sizeof(float) * (size_t)g->batch *
                          (size_t)(g->num_classes > 0 ? g->num_classes : 1),
                      "onednn: targets");
    if (!d->t || !d->nd || !d->ncons || !d->lastc || !d->labels ||
        !d->targets) {
        st = CL_ERR_NOMEM;
        goto fail;
    }
    for (int t = 0; t < g->n_tensors; t++) {
        d->t[t].rep = t;
        d->t[t].store = d->t[t].dstore = d->t[t].cast = -1;
        d->lastc[t] = -1;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        d->nd[i].bn = d->nd[i].sum = -1;
        d->nd[i].mean = d->nd[i].var = d->nd[i].ws = d->nd[i].src = -1;
        for (int a = 0; a < g->nodes[i].n_in; a++) {
            int x = g->nodes[i].in[a];
            d->ncons[x]++;
            d->lastc[x] = i;
        }
    }
    TRY(choose_paths(d));
    lower(d);
    for (int i = 0; i < g->n_nodes; i++) {
        if (d->nd[i].bn < 0)
            continue;
        size_t wn = (size_t)cl_graph_numel(g, g->nodes[i].param[0]);
        if (wn > d->fold_floats)
            d->fold_floats = wn;
    }
    if (d->fold_floats) {
        d->fold = cl_alloc(sizeof(float) * d->fold_floats, "onednn: fold");
        if (!d->fold) {
            st = CL_ERR_NOMEM;
            goto fail;
        }
    }

    for (int i = 0; i < g->n_nodes; i++) {
        if (d->nd[i].skip)
            continue;
        switch (g->nodes[i].op) {
        case CL_OP_CONV2D:
            TRY(plan_conv_fwd(d, i));
            break;
        case CL_OP_BATCHNORM2D:
            TRY(plan_bn_fwd(d, i));
            break;
        case CL_OP_RELU:
            TRY(plan_relu_fwd(d, i));
            break;
        case CL_OP_MAXPOOL2D:
            TRY(plan_pool_fwd(d, i, 0));
            break;
        case CL_OP_GLOBAL_AVGPOOL:
            TRY(plan_pool_fwd(d, i, 1));
            break;
        case CL_OP_LINEAR:
            TRY(plan_linear_fwd(d, i));
            break;
        case CL_OP_ADD:
            TRY(plan_add_fwd(d, i));
            break;
        case CL_OP_SOFTMAX_CE:
            TRY(plan_loss_fwd(d, i));
            break;
        default:
            break;
        }
    }
    if (mode == CL_PLAN_TRAIN && g->loss >= 0) {
        for (int i = g->n_nodes - 1; i >= 0; i--) {
            if (d->nd[i].skip)
                continue;
            switch (g->nodes[i].op) {
            case CL_OP_CONV2D:
                TRY(plan_conv_bwd(d, i));
                break;
            case CL_OP_BATCHNORM2D:
                TRY(plan_bn_bwd(d, i));
                break;
            case CL_OP_RELU:
                TRY(plan_relu_bwd(d, i));
                break;
            case CL_OP_MAXPOOL2D:
                TRY(plan_pool_bwd(d, i, 0));
                break;
            case CL_OP_GLOBAL_AVGPOOL:
                TRY(plan_pool_bwd(d, i, 1));
                break;
            case CL_OP_LINEAR:
                TRY(plan_linear_bwd(d, i));
                break;
            case CL_OP_ADD:
                TRY(plan_add_bwd(d, i));
                break;
            default:
                break;
            }
        }
    }
    d->n_time = 2 * g->n_nodes + 1;
    TRY(plan_input_step(d));
    /* The edges stay readable after forward and backward. */
    int edges[2] = {g->logits, g->features};
    for (int k = 0; k < 2; k++)
        if (edges[k] >= 0 && d->t[rep(d, edges[k])].store >= 0)
            touch(d, d->t[rep(d, edges[k])].store, d->n_time);

    TRY(cl_dnnl_arena_plan(d->st, d->n_st, 4096, &d->arena_bytes));
    d->arena = cl_alloc(d->arena_bytes, "onednn: activation arena");
    d->scratch = cl_alloc(d->scratch_bytes, "onednn: scratchpad");
    d->sync_sums =
        cl_alloc_zero(sizeof(double) * (2 * (size_t)d->max_bn_channels + 1),
                      "onednn: SyncBatchNorm sums");
    if (!d->arena || !d->scratch || !d->sync_sums) {
        st = CL_ERR_NOMEM;
        goto fail;
    }
    TRY(bind_list(d, &d->fwd_train));
    TRY(bind_list(d, &d->fwd_eval));
    TRY(bind_list(d, &d->bwd));
    TRY(bind_list(d, &d->sync));
    TRY(bind_list(d, &d->in));
    d->dirty = 1;
    return CL_OK;
fail:
    return st;
}

static cl_status dn_set_input(cl_backend *be, const float *x,
                              const int32_t *labels, const float *targets)
{
    cl_status st = CL_OK;
    dn_ctx *d = be->priv;
    cl_graph *g = d->g;
    if (labels && targets)
        return cl_error(CL_ERR_ARG,
                        "onednn set_input: give labels or targets, not both");
    if (x) {
        int r = rep(d, g->input);
        if (d->in_plain) {
            memcpy(d->arena + d->st[d->t[r].store].off, x,
                   md_size(&d->t[r].md));
        } else {
            dn_step *s = &d->in.s[0];
            for (int a = 0; a < s->nargs; a++)
                if (s->args[a].kind == REF_USER)
                    DN(dnnl_memory_set_data_handle(s->mem[a], (void *)x), -1,
                       "input handle");
            TRY(run_list(d, &d->in));
        }
    }
    d->has_labels = d->has_targets = 0;
    if (labels && g->loss >= 0) {
        TRY(cl_softmax_ce_check_labels(labels, g->batch, g->num_classes));
        memcpy(d->labels, labels, sizeof(int32_t) * (size_t)g->batch);
        d->has_labels = 1;
    }
    if (targets && g->loss >= 0) {
        memcpy(d->targets, targets,
               sizeof(float) * (size_t)g->batch * (size_t)g->num_classes);
        d->has_targets = 1;
    }
fail:
    return st;
}

static cl_status dn_forward(cl_backend *be, int training, float *loss)
{
    dn_ctx *d = be->priv;
    if (training && d->mode != CL_PLAN_TRAIN)
        return cl_error(CL_ERR_ARG, "onednn forward: training needs a plan "
                                    "made for training, this one infers");
    dn_ftz();
    if (d->dirty) {
        CL_TRY(run_list(d, &d->sync));
        d->dirty = 0;
    }
    d->trained = 0;
    CL_TRY(run_list(d, training ? &d->fwd_train : &d->fwd_eval));
    if (training) {
        cl_graph_count_batch(d->g);
        d->trained = 1;
    }
    if (loss)
        *loss = d->loss;
    return CL_OK;
}

static cl_status dn_backward(cl_backend *be)
{
    dn_ctx *d = be->priv;
    if (d->mode != CL_PLAN_TRAIN || d->g->loss < 0)
        return cl_error(CL_ERR_ARG, "onednn backward: the plan has no "
                                    "backward (inference plan or no loss)");
    if (!d->trained)
        return cl_error(CL_ERR_ARG, "onednn backward: needs a training "
                                    "forward first");
    if (!d->has_labels && !d->has_targets)
        return cl_error(CL_ERR_ARG,
                        "onednn backward: no labels or targets were set");
    dn_ftz();
    return run_list(d, &d->bwd);
}

static cl_status dn_read(cl_backend *be, int tensor, float *out)
{
    cl_status st = CL_OK;
    dn_ctx *d = be->priv;
    cl_graph *g = d->g;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    dnnl_memory_t src = NULL, dst = NULL;
    dnnl_primitive_attr_t attr = NULL;
    if (tensor < 0 || tensor >= g->n_tensors)
        return cl_error(CL_ERR_ARG,
                        "onednn read: tensor %d is not in the "
                        "graph (0..%d)",
                        tensor, g->n_tensors - 1);
    if (tensor == g->loss) {
        *out = d->loss;
        return CL_OK;
    }
    int r = rep(d, tensor);
    if (!d->t[r].has_md || d->t[r].store < 0 || d->t[tensor].clobbered ||
        d->st[d->t[r].store].t1 < g->n_nodes - 1)
        return cl_error(CL_ERR_UNSUPPORTED,
                        "onednn read: %s (tensor %d) is not kept after "
                        "forward by this plan; read the logits, the "
                        "features or a tensor backward needs",
                        gt(d, tensor)->name, tensor);
    dnnl_memory_desc_t plain;
    md_plain_like(&plain, &d->t[r].md);
    void *p = d->arena + d->st[d->t[r].store].off;
    if (md_eq(&plain, &d->t[r].md)) {
        memcpy(out, p, md_size(&plain));
        return CL_OK;
    }
    DN(dnnl_primitive_attr_create(&attr), -1, "attribute");
    DN(dnnl_reorder_primitive_desc_create(&pd, &d->t[r].md, d->eng, &plain,
                                          d->eng, attr),
       -1, "read reorder");
    DN(dnnl_primitive_create(&prim, pd), -1, "read reorder");
    DN(dnnl_memory_create(&src, &d->t[r].md, d->eng, p), -1, "memory");
    DN(dnnl_memory_create(&dst, &plain, d->eng, out), -1, "memory");
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
    DN(dnnl_primitive_execute(prim, d->strm, 2, args), -1, "read reorder");
    DN(dnnl_stream_wait(d->strm), -1, "stream wait");
fail:
    if (src)
        dnnl_memory_destroy(src);
    if (dst)
        dnnl_memory_destroy(dst);
    if (prim)
        dnnl_primitive_destroy(prim);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return st;
}

static cl_status dn_sync_params(cl_backend *be)
{
    dn_ctx *d = be->priv;
    d->dirty = 1;
    return CL_OK;
}

const cl_backend_vtbl cl_backend_onednn_vtbl = {
    .name = "onednn",
    .supports = dn_supports,
    .plan = dn_plan,
    .set_input = dn_set_input,
    .forward = dn_forward,
    .backward = dn_backward,
    .read = dn_read,
    .sync_params = dn_sync_params,
    .destroy = dn_destroy,
};
