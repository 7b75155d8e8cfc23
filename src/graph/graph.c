/* The static graph: node and tensor tables grown while building, shape
 * checks through the ops' rules, and the param / grad / buffer arenas. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "graph/graph.h"

/* Arena tensors start on 64-byte lines: 16 floats. */
#define ARENA_ALIGN_FLOATS (CL_ALIGN / sizeof(float))

static size_t align_floats(size_t n)
{
    return (n + ARENA_ALIGN_FLOATS - 1) / ARENA_ALIGN_FLOATS *
           ARENA_ALIGN_FLOATS;
}

cl_status cl_graph_init(cl_graph *g, int batch)
{
    memset(g, 0, sizeof *g);
    g->input = g->labels = g->targets = -1;
    g->logits = g->loss = g->features = -1;
    if (batch < 1)
        return cl_error(CL_ERR_ARG, "graph: batch size is %d, expected >= 1",
                        batch);
    g->batch = batch;
    return CL_OK;
}

void cl_graph_free(cl_graph *g)
{
    if (!g)
        return;
    cl_free(g->nodes);
    cl_free(g->tensors);
    cl_free(g->params);
    cl_free(g->grads);
    cl_free(g->buffers);
    if (g->quant) {
        cl_free(g->quant->act_scale);
        cl_free(g->quant->act_signed);
        cl_free(g->quant->w_off);
        cl_free(g->quant->w_scale);
        cl_free(g->quant);
    }
    memset(g, 0, sizeof *g);
    g->input = g->labels = g->targets = -1;
    g->logits = g->loss = g->features = -1;
}

/* Doubles *arr (n elements of `elem` bytes in use, *cap allocated) when
 * full.  mem.h has no realloc, so this copies. */
static cl_status grow(void **arr, int *cap, int n, size_t elem,
                      const char *what)
{
    if (n < *cap)
        return CL_OK;
    if (*cap > (1 << 24))
        return cl_error(CL_ERR_LIMIT, "graph: more than %d %s", *cap, what);
    int ncap = *cap ? *cap * 2 : 64;
    size_t bytes;
    CL_TRY(cl_mul_size((size_t)ncap, elem, &bytes, what));
    void *p = cl_alloc(bytes, what);
    if (!p)
        return CL_ERR_NOMEM;
    if (n)
        memcpy(p, *arr, (size_t)n * elem);
    cl_free(*arr);
    *arr = p;
    *cap = ncap;
    return CL_OK;
}

static cl_status check_open(const cl_graph *g, const char *name)
{
    if (g->finalized)
        return cl_error(CL_ERR_ARG,
                        "%s: the graph is finalized, no node may be added",
                        name);
    if (g->batch < 1)
        return cl_error(CL_ERR_ARG, "%s: the graph was not initialised", name);
    return CL_OK;
}

static cl_status check_tensor(const cl_graph *g, const char *name, int t,
                              const char *role)
{
    if (t < 0 || t >= g->n_tensors)
        return cl_error(CL_ERR_ARG, "%s: %s tensor %d does not exist", name,
                        role, t);
    cl_gtensor_kind k = g->tensors[t].kind;
    if (k != CL_GT_INPUT && k != CL_GT_ACT)
        return cl_error(CL_ERR_ARG, "%s: %s tensor '%s' is not an activation",
                        name, role, g->tensors[t].name);
    return CL_OK;
}

/* Appends a tensor named by printf(fmt, ...) and returns its index. */
static cl_status add_tensor(cl_graph *g, int *out, cl_gtensor_kind kind,
                            cl_shape shape, cl_dtype dtype, int producer,
                            const char *fmt, ...) CL_PRINTF(7, 8);

static cl_status add_tensor(cl_graph *g, int *out, cl_gtensor_kind kind,
                            cl_shape shape, cl_dtype dtype, int producer,
                            const char *fmt, ...)
{
    CL_TRY(grow((void **)&g->tensors, &g->cap_tensors, g->n_tensors,
                sizeof *g->tensors, "graph tensors"));
    cl_gtensor *t = &g->tensors[g->n_tensors];
    memset(t, 0, sizeof *t);
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    if (len < 0 || (size_t)len >= sizeof t->name)
        return cl_error(CL_ERR_ARG,
                        "graph: tensor name '%s...' is longer than %zu "
                        "characters",
                        t->name, sizeof t->name - 1);
    t->kind = kind;
    t->shape = shape;
    t->dtype = dtype;
    t->producer = producer;
    t->last_use = -1;
    *out = g->n_tensors++;
    return CL_OK;
}

/* A param (learnable) or buffer tensor "<node>.<leaf>". */
static cl_status add_state(cl_graph *g, int *out, cl_gtensor_kind kind,
                           cl_shape shape, const char *node, const char *leaf,
                           int flags)
{
    CL_TRY(add_tensor(g, out, kind, shape, CL_F32, -1, "%s.%s", node, leaf));
    g->tensors[*out].param_flags = flags;
    return CL_OK;
}

/* Appends a node (fields other than op/name/out zeroed) and its output. */
static cl_status add_node(cl_graph *g, cl_op_kind op, const char *name,
                          cl_shape out_shape, cl_node **node)
{
    if (!name || !name[0])
        return cl_error(CL_ERR_ARG, "graph: a %s node has no name",
                        cl_op_name(op));
    if (strlen(name) >= sizeof g->nodes[0].name)
        return cl_error(CL_ERR_ARG,
                        "graph: node name '%s' is longer than %zu characters",
                        name, sizeof g->nodes[0].name - 1);
    CL_TRY(grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes, sizeof *g->nodes,
                "graph nodes"));
    int idx = g->n_nodes;
    int out;
    CL_TRY(add_tensor(g, &out, CL_GT_ACT, out_shape, CL_F32, idx, "%s", name));
    cl_node *n = &g->nodes[idx];
    memset(n, 0, sizeof *n);
    n->op = op;
    snprintf(n->name, sizeof n->name, "%s", name);
    n->out = out;
    n->num_batches = -1;
    g->n_nodes++;
    *node = n;
    return CL_OK;
}

cl_status cl_graph_input(cl_graph *g, int c, int h, int w, int *out)
{
    CL_TRY(check_open(g, "input"));
    if (g->input >= 0)
        return cl_error(CL_ERR_ARG, "input: the graph already has an input");
    if (c < 1 || h < 1 || w < 1)
        return cl_error(CL_ERR_SHAPE,
                        "input: shape %dx%dx%d, expected positive channels, "
                        "height and width",
                        c, h, w);
    CL_TRY(add_tensor(g, out, CL_GT_INPUT, cl_shape_4d(g->batch, c, h, w),
                      CL_F32, -1, "input"));
    g->input = *out;
    return CL_OK;
}

cl_status cl_graph_conv2d(cl_graph *g, const char *name, int x,
                          const cl_conv2d_attr *a, int *out)
{
    CL_TRY(check_open(g, name));
    CL_TRY(check_tensor(g, name, x, "input"));
    cl_shape ys;
    cl_status s = cl_conv2d_infer(a, &g->tensors[x].shape, &ys);
    if (s != CL_OK)
        return cl_error_wrap(s, "%s: ", name);
    cl_node *n;
    CL_TRY(add_node(g, CL_OP_CONV2D, name, ys, &n));
    int ni = (int)(n - g->nodes), w, b;
    n->attr.conv2d = *a;
    n->in[0] = x;
    n->n_in = 1;
    cl_shape ws = cl_shape_4d(a->out_ch, a->in_ch / a->groups, a->kh, a->kw);
    CL_TRY(add_state(g, &w, CL_GT_PARAM, ws, name, "weight", CL_PARAM_WEIGHT));
    g->nodes[ni].param[g->nodes[ni].n_param++] = w;
    if (a->has_bias) {
        int64_t d = a->out_ch;
        CL_TRY(add_state(g, &b, CL_GT_PARAM, cl_shape_make(1, &d), name, "bias",
                         CL_PARAM_BIAS));
        g->nodes[ni].param[g->nodes[ni].n_param++] = b;
    }
    *out = g->nodes[ni].out;
    return CL_OK;
}

cl_status cl_graph_batchnorm2d(cl_graph *g, const char *name, int x,
                               const cl_batchnorm2d_attr *a, int *out)
{
    CL_TRY(check_open(g, name));
    CL_TRY(check_tensor(g, name, x, "input"));
    cl_shape ys;
    cl_status s = cl_batchnorm2d_infer(a, &g->tensors[x].shape, &ys);
    if (s != CL_OK)
        return cl_error_wrap(s, "%s: ", name);
    cl_node *n;
    CL_TRY(add_node(g, CL_OP_BATCHNORM2D, name, ys, &n));
    int ni = (int)(n - g->nodes), t;
    n->attr.batchnorm2d = *a;
    n->in[0] = x;
    n->n_in = 1;
    int64_t c = a->channels, one = 1;
    cl_shape cs = cl_shape_make(1, &c);
    /* The order of torchvision's state_dict. */
    CL_TRY(add_state(g, &t, CL_GT_PARAM, cs, name, "weight", CL_PARAM_BN));
    g->nodes[ni].param[g->nodes[ni].n_param++] = t;
    CL_TRY(add_state(g, &t, CL_GT_PARAM, cs, name, "bias", CL_PARAM_BN));
    g->nodes[ni].param[g->nodes[ni].n_param++] = t;
    CL_TRY(add_state(g, &t, CL_GT_BUFFER, cs, name, "running_mean", 0));
    g->nodes[ni].buf[g->nodes[ni].n_buf++] = t;
    CL_TRY(add_state(g, &t, CL_GT_BUFFER, cs, name, "running_var", 0));
    g->nodes[ni].buf[g->nodes[ni].n_buf++] = t;
    CL_TRY(add_state(g, &t, CL_GT_BUFFER, cl_shape_make(1, &one), name,
                     "num_batches_tracked", 0));
    g->nodes[ni].num_batches = t;
    *out = g->nodes[ni].out;
    return CL_OK;
}

cl_status cl_graph_relu(cl_graph *g, const char *name, int x, int *out)
{
    CL_TRY(check_open(g, name));
    CL_TRY(check_tensor(g, name, x, "input"));
    cl_node *n;
    CL_TRY(add_node(g, CL_OP_RELU, name, g->tensors[x].shape, &n));
    n->in[0] = x;
    n->n_in = 1;
    *out = n->out;
    return CL_OK;
}

cl_status cl_graph_maxpool2d(cl_graph *g, const char *name, int x,
                             const cl_maxpool2d_attr *a, int *out)
{
    CL_TRY(check_open(g, name));
    CL_TRY(check_tensor(g, name, x, "input"));
    cl_shape ys;
    cl_status s = cl_maxpool2d_infer(a, &g->tensors[x].shape, &ys);
    if (s != CL_OK)
        return cl_error_wrap(s, "%s: ", name);
    cl_node *n;
    CL_TRY(add_node(g, CL_OP_MAXPOOL2D, name, ys, &n));
    n->attr.maxpool2d = *a;
    n->in[0] = x;
    n->n_in = 1;
    *out = n->out;
    return CL_OK;
}

cl_status cl_graph_global_avgpool(cl_graph *g, const char *name, int x,
                                  int *out)
{
    CL_TRY(check_open(g, name));
    CL_TRY(check_tensor(g, name, x, "input"));
    cl_shape ys;
    cl_status s = cl_global_avgpool_infer(&g->tensors[x].shape, &ys);
    if (s != CL_OK)
        return cl_error_wrap(s, "%s: ", name);
    cl_node *n;
    CL_TRY(add_node(g, CL_OP_GLOBAL_AVGPOOL, name, ys, &n));
    n->in[0] = x;
    n->n_in = 1;
    *out = n->out;
    return CL_OK;
}

cl_status cl_graph_linear(cl_graph *g, const char *name, int x,
                          const cl_linear_attr *a, int *out)
{
    CL_TRY(check_open(g, name));
    CL_TRY(check_tensor(g, name, x, "input"));
    cl_shape ys;
    cl_status s = cl_linear_infer(a, &g->tensors[x].shape, &ys);
    if (s != CL_OK)
        return cl_error_wrap(s, "%s: ", name);
    cl_node *n;
    CL_TRY(add_node(g, CL_OP_LINEAR, name, ys, &n));
    int ni = (int)(n - g->nodes), t;
    n->attr.linear = *a;
    n->in[0] = x;
    n->n_in = 1;
    int64_t wd[2] = {a->out_features, a->in_features};
    int64_t bd = a->out_features;
    /* A linear layer right before the loss is the classifier head; the
     * builder marks it so (cl_graph_softmax_ce) since it cannot know yet. */
    CL_TRY(add_state(g, &t, CL_GT_PARAM, cl_shape_make(2, wd), name, "weight",
                     CL_PARAM_WEIGHT));
    g->nodes[ni].param[g->nodes[ni].n_param++] = t;
    if (a->has_bias) {
        CL_TRY(add_state(g, &t, CL_GT_PARAM, cl_shape_make(1, &bd), name,
                         "bias", CL_PARAM_BIAS));
        g->nodes[ni].param[g->nodes[ni].n_param++] = t;
    }
    *out = g->nodes[ni].out;
    return CL_OK;
}

cl_status cl_graph_add(cl_graph *g, const char *name, int a, int b, int *out)
{
    CL_TRY(check_open(g, name));
    CL_TRY(check_tensor(g, name, a, "first input"));
    CL_TRY(check_tensor(g, name, b, "second input"));
    const cl_shape *sa = &g->tensors[a].shape, *sb = &g->tensors[b].shape;
    if (!cl_shape_equal(sa, sb)) {
        char ba[96], bb[96];
        return cl_error(CL_ERR_SHAPE,
                        "%s: add of %s ('%s') and %s ('%s'), expected equal "
                        "shapes",
                        name, cl_shape_str(sa, ba, sizeof ba),
                        g->tensors[a].name, cl_shape_str(sb, bb, sizeof bb),
                        g->tensors[b].name);
    }
    cl_node *n;
    CL_TRY(add_node(g, CL_OP_ADD, name, *sa, &n));
    n->in[0] = a;
    n->in[1] = b;
    n->n_in = 2;
    *out = n->out;
    return CL_OK;
}

cl_status cl_graph_matmul(cl_graph *g, const char *name, int a, int b,
                          const cl_matmul_attr *attr, int *out)
{
    CL_TRY(check_open(g, name));
    CL_TRY(check_tensor(g, name, a, "first input"));
    CL_TRY(check_tensor(g, name, b, "second input"));
    cl_shape ys;
    cl_status s =
        cl_matmul_infer(attr, &g->tensors[a].shape, &g->tensors[b].shape, &ys);
    if (s != CL_OK)
        return cl_error_wrap(s, "%s: ", name);
    cl_node *n;
    CL_TRY(add_node(g, CL_OP_MATMUL, name, ys, &n));
    n->attr.matmul = *attr;
    n->in[0] = a;
    n->in[1] = b;
    n->n_in = 2;
    *out = n->out;
    return CL_OK;
}

cl_status cl_graph_table_gather(cl_graph *g, const char *name,
                                const char *table, int index,
                                const cl_table_gather_attr *attr, int *out)
{
    CL_TRY(check_open(g, name));
    if (index < 0 || index >= g->n_tensors ||
        g->tensors[index].kind != CL_GT_BUFFER ||
        g->tensors[index].dtype != CL_I64)
        return cl_error(CL_ERR_ARG,
                        "%s: the index (tensor %d) is not an i64 buffer", name,
                        index);
    if (!table || !table[0] || cl_graph_find(g, table) >= 0)
        return cl_error(CL_ERR_ARG,
                        "%s: the table's name '%s' is empty or taken", name,
                        table ? table : "");
    cl_shape ys;
    cl_status s = cl_table_gather_infer(attr, &g->tensors[index].shape, &ys);
    if (s != CL_OK)
        return cl_error_wrap(s, "%s: ", name);
    cl_node *n;
    CL_TRY(add_node(g, CL_OP_TABLE_GATHER, name, ys, &n));
    int ni = (int)(n - g->nodes), t;
    n->attr.table_gather = *attr;
    n->n_in = 0;
    n->buf[n->n_buf++] = index;
    int64_t td[2] = {attr->rows, attr->cols};
    CL_TRY(add_tensor(g, &t, CL_GT_PARAM, cl_shape_make(2, td), CL_F32, -1,
                      "%s", table));
    /* Swin's relative_position_bias_table: its own weight-decay group
     * (torchvision's transformer_embedding_decay, timm's no_weight_decay). */
    g->tensors[t].param_flags = CL_PARAM_EMBED;
    g->nodes[ni].param[g->nodes[ni].n_param++] = t;
    *out = g->nodes[ni].out;
    return CL_OK;
}

cl_status cl_graph_layernorm(cl_graph *g, const char *name, int x,
                             const cl_layernorm_attr *a, int *out)
{
    CL_TRY(check_open(g, name));
    CL_TRY(check_tensor(g, name, x, "input"));
    cl_shape ys;
    cl_status s = cl_layernorm_infer(a, &g->tensors[x].shape, &ys);
    if (s != CL_OK)
        return cl_error_wrap(s, "%s: ", name);
    cl_node *n;
    CL_TRY(add_node(g, CL_OP_LAYERNORM, name, ys, &n));
    int ni = (int)(n - g->nodes), t;
    n->attr.layernorm = *a;
    n->in[0] = x;
    n->n_in = 1;
    int64_t c = a->features;
    cl_shape cs = cl_shape_make(1, &c);
    /* In the norm group: exempt from weight decay as BN's are. */
    CL_TRY(add_state(g, &t, CL_GT_PARAM, cs, name, "weight", CL_PARAM_BN));
    g->nodes[ni].param[g->nodes[ni].n_param++] = t;
    CL_TRY(add_state(g, &t, CL_GT_PARAM, cs, name, "bias", CL_PARAM_BN));
    g->nodes[ni].param[g->nodes[ni].n_param++] = t;
    *out = g->nodes[ni].out;
    return CL_OK;
}

cl_status cl_graph_gelu(cl_graph *g, const char *name, int x, int *out)
{
    CL_TRY(check_open(g, name));
    CL_TRY(check_tensor(g, name, x, "input"));
    cl_node *n;
    CL_TRY(add_node(g, CL_OP_GELU, name, g->tensors[x].shape, &n));
    n->in[0] = x;
    n->n_in = 1;
    *out = n->out;
    return CL_OK;
}

cl_status cl_graph_softmax(cl_graph *g, const char *name, int x, int bias,
                           int mask_buf, int *out)
{
    CL_TRY(check_open(g, name));
    CL_TRY(check_tensor(g, name, x, "input"));
    if (bias >= 0)
        CL_TRY(check_tensor(g, name, bias, "bias"));
    if (mask_buf >= 0 && (mask_buf >= g->n_tensors ||
                          g->tensors[mask_buf].kind != CL_GT_BUFFER ||
                          g->tensors[mask_buf].dtype != CL_F32))
        return cl_error(CL_ERR_ARG,
                        "%s: the mask (tensor %d) is not an f32 buffer", name,
                        mask_buf);
    cl_shape ys;
    cl_status s = cl_softmax_infer(
        &g->tensors[x].shape, bias >= 0 ? &g->tensors[bias].shape : NULL,
        mask_buf >= 0 ? &g->tensors[mask_buf].shape : NULL, &ys);
    if (s != CL_OK)
        return cl_error_wrap(s, "%s: ", name);
    cl_node *n;
    CL_TRY(add_node(g, CL_OP_SOFTMAX, name, ys, &n));
    n->in[0] = x;
    n->n_in = 1;
    if (bias >= 0)
        n->in[n->n_in++] = bias;
    if (mask_buf >= 0)
        n->buf[n->n_buf++] = mask_buf;
    *out = n->out;
    return CL_OK;
}

cl_status cl_graph_row_gather(cl_graph *g, const char *name, int x,
                              int index_buf, int cols,
                              const cl_shape *out_shape, int *out)
{
    CL_TRY(check_open(g, name));
    CL_TRY(check_tensor(g, name, x, "input"));
    if (index_buf < 0 || index_buf >= g->n_tensors ||
        g->tensors[index_buf].kind != CL_GT_BUFFER ||
        g->tensors[index_buf].dtype != CL_I64)
        return cl_error(CL_ERR_ARG,
                        "%s: the index (tensor %d) is not an i64 buffer", name,
                        index_buf);
    cl_row_gather_attr a = {cols, *out_shape};
    cl_shape ys;
    cl_status s = cl_row_gather_infer(&a, &g->tensors[x].shape,
                                      &g->tensors[index_buf].shape, &ys);
    if (s != CL_OK)
        return cl_error_wrap(s, "%s: ", name);
    cl_node *n;
    CL_TRY(add_node(g, CL_OP_ROW_GATHER, name, ys, &n));
    n->attr.row_gather = a;
    n->in[0] = x;
    n->n_in = 1;
    n->buf[n->n_buf++] = index_buf;
    *out = n->out;
    return CL_OK;
}

cl_status cl_graph_droppath(cl_graph *g, const char *name, int x,
                            const cl_droppath_attr *attr, int *out)
{
    CL_TRY(check_open(g, name));
    CL_TRY(check_tensor(g, name, x, "input"));
    cl_shape ys;
    cl_status s = cl_droppath_infer(attr, &g->tensors[x].shape, &ys);
    if (s != CL_OK)
        return cl_error_wrap(s, "%s: ", name);
    cl_node *n;
    CL_TRY(add_node(g, CL_OP_DROPPATH, name, ys, &n));
    n->attr.droppath = *attr;
    n->in[0] = x;
    n->n_in = 1;
    *out = n->out;
    return CL_OK;
}

cl_status cl_graph_token_meanpool(cl_graph *g, const char *name, int x,
                                  int *out)
{
    CL_TRY(check_open(g, name));
    CL_TRY(check_tensor(g, name, x, "input"));
    cl_shape ys;
    cl_status s = cl_token_meanpool_infer(&g->tensors[x].shape, &ys);
    if (s != CL_OK)
        return cl_error_wrap(s, "%s: ", name);
    cl_node *n;
    CL_TRY(add_node(g, CL_OP_TOKEN_MEANPOOL, name, ys, &n));
    n->in[0] = x;
    n->n_in = 1;
    *out = n->out;
    return CL_OK;
}

cl_status cl_graph_softmax_ce(cl_graph *g, int logits,
                              const cl_softmax_ce_attr *a, int soft)
{
    const char *name = "loss";
    CL_TRY(check_open(g, name));
    CL_TRY(check_tensor(g, name, logits, "logits"));
    if (g->loss >= 0)
        return cl_error(CL_ERR_ARG, "loss: the graph already has a loss");
    cl_status s = cl_softmax_ce_infer(a, &g->tensors[logits].shape);
    if (s != CL_OK)
        return cl_error_wrap(s, "%s: ", name);
    int64_t n1 = 1, nb = g->batch, td[2] = {g->batch, a->num_classes};
    int tt;
    if (soft)
        CL_TRY(add_tensor(g, &tt, CL_GT_TARGETS, cl_shape_make(2, td), CL_F32,
                          -1, "targets"));
    else
        CL_TRY(add_tensor(g, &tt, CL_GT_LABELS, cl_shape_make(1, &nb), CL_I32,
                          -1, "labels"));
    cl_node *n;
    CL_TRY(add_node(g, CL_OP_SOFTMAX_CE, name, cl_shape_make(1, &n1), &n));
    n->attr.softmax_ce = *a;
    n->in[0] = logits;
    n->in[1] = tt;
    n->n_in = 2;
    g->tensors[n->out].kind = CL_GT_LOSS;
    if (soft)
        g->targets = tt;
    else
        g->labels = tt;
    g->logits = logits;
    g->loss = n->out;
    g->num_classes = a->num_classes;
    /* The linear layer making the logits is the classifier head. */
    int p = g->tensors[logits].producer;
    if (p >= 0 && g->nodes[p].op == CL_OP_LINEAR)
        for (int i = 0; i < g->nodes[p].n_param; i++)
            g->tensors[g->nodes[p].param[i]].param_flags |= CL_PARAM_HEAD;
    return CL_OK;
}

cl_status cl_graph_buffer_add(cl_graph *g, const char *name, cl_shape shape,
                              cl_dtype dtype, int *out)
{
    CL_TRY(check_open(g, name ? name : "buffer"));
    if (!name || !name[0])
        return cl_error(CL_ERR_ARG, "graph: a buffer has no name");
    if (dtype != CL_F32 && dtype != CL_I64)
        return cl_error(CL_ERR_ARG,
                        "%s: buffer of dtype %s, expected f32 or "
                        "i64",
                        name, cl_dtype_name(dtype));
    if (cl_graph_find(g, name) >= 0)
        return cl_error(CL_ERR_ARG,
                        "%s: the graph already has a tensor of "
                        "this name",
                        name);
    for (int k = 0; k < shape.ndim; k++)
        if (shape.d[k] < 1 || shape.d[k] > INT32_MAX)
            return cl_error(CL_ERR_SHAPE,
                            "%s: buffer dimension %d is %lld, expected "
                            "1..%d",
                            name, k, (long long)shape.d[k], INT32_MAX);
    return add_tensor(g, out, CL_GT_BUFFER, shape, dtype, -1, "%s", name);
}

cl_status cl_graph_derived_add(cl_graph *g, const char *name, cl_shape shape,
                               cl_dtype dtype, int *out)
{
    CL_TRY(cl_graph_buffer_add(g, name, shape, dtype, out));
    g->tensors[*out].derived = 1;
    return CL_OK;
}

cl_status cl_graph_copy_state(cl_graph *dst, const cl_graph *src)
{
    if (!dst->finalized || !src->finalized || dst->n_tensors != src->n_tensors)
        return cl_error(CL_ERR_ARG, "graph: copying state between graphs of "
                                    "different networks");
    for (int i = 0; i < src->n_tensors; i++) {
        const cl_gtensor *a = &src->tensors[i];
        const cl_gtensor *b = &dst->tensors[i];
        if (!cl_gtensor_saved(a))
            continue;
        if (a->kind != b->kind || a->derived != b->derived ||
            strcmp(a->name, b->name) != 0 ||
            !cl_shape_equal(&a->shape, &b->shape))
            return cl_error(CL_ERR_ARG,
                            "graph: copying state: tensor %d is %s here and "
                            "%s there",
                            i, b->name, a->name);
        size_t bytes = (size_t)cl_graph_numel(src, i) *
                       (a->dtype == CL_I64 ? sizeof(int64_t) : sizeof(float));
        if (a->kind == CL_GT_PARAM)
            memcpy(cl_graph_param(dst, i), cl_graph_param(src, i), bytes);
        else
            memcpy(dst->buffers + b->offset, src->buffers + a->offset, bytes);
    }
    if (!src->quant)
        return CL_OK;
    if (!dst->quant)
        CL_TRY(cl_graph_quant_init(dst));
    if (dst->n_nodes != src->n_nodes ||
        dst->quant->n_w_scale != src->quant->n_w_scale)
        return cl_error(CL_ERR_ARG, "graph: copying int8 scales between "
                                    "graphs of different networks");
    const cl_graph_quant *a = src->quant;
    cl_graph_quant *b = dst->quant;
    memcpy(b->act_scale, a->act_scale,
           sizeof *a->act_scale * (size_t)src->n_tensors);
    memcpy(b->act_signed, a->act_signed, (size_t)src->n_tensors);
    memcpy(b->w_scale, a->w_scale, sizeof *a->w_scale * a->n_w_scale);
    return CL_OK;
}

/* Output channels of a node with int8 weights, 0 for other ops. */
static int quant_channels(const cl_node *n)
{
    if (n->op == CL_OP_CONV2D)
        return n->attr.conv2d.out_ch;
    if (n->op == CL_OP_LINEAR)
        return n->attr.linear.out_features;
    return 0;
}

cl_status cl_graph_quant_init(cl_graph *g)
{
    if (!g->finalized)
        return cl_error(CL_ERR_ARG, "graph: int8 scales before finalize");
    if (g->quant)
        return CL_OK;
    cl_graph_quant *q = cl_alloc_zero(sizeof *q, "graph: int8 scales");
    if (!q)
        return CL_ERR_NOMEM;
    g->quant = q;
    size_t nt = (size_t)g->n_tensors, nn = (size_t)g->n_nodes;
    q->act_scale =
        cl_alloc_zero(sizeof *q->act_scale * nt, "graph: int8 scales");
    q->act_signed = cl_alloc_zero(nt ? nt : 1, "graph: int8 scales");
    q->w_off = cl_alloc(sizeof *q->w_off * (nn ? nn : 1), "graph: int8 scales");
    if (!q->act_scale || !q->act_signed || !q->w_off)
        return CL_ERR_NOMEM; /* cl_graph_free frees the rest */
    for (size_t i = 0; i < nn; i++) {
        int c = quant_channels(&g->nodes[i]);
        q->w_off[i] = c ? (int)q->n_w_scale : -1;
        q->n_w_scale += (size_t)c;
    }
    q->w_scale =
        cl_alloc_zero(sizeof *q->w_scale * (q->n_w_scale ? q->n_w_scale : 1),
                      "graph: int8 scales");
    return q->w_scale ? CL_OK : CL_ERR_NOMEM;
}

float *cl_graph_quant_wscale(const cl_graph *g, int i)
{
    if (!g->quant || i < 0 || i >= g->n_nodes || g->quant->w_off[i] < 0)
        return NULL;
    return g->quant->w_scale + g->quant->w_off[i];
}

int cl_graph_quant_node(const cl_graph *g, int i)
{
    const float *w = cl_graph_quant_wscale(g, i);
    if (!w || g->nodes[i].n_in < 1)
        return 0;
    return w[0] > 0.0f && g->quant->act_scale[g->nodes[i].in[0]] > 0.0f;
}

cl_status cl_graph_finalize(cl_graph *g)
{
    if (g->finalized)
        return cl_error(CL_ERR_ARG, "graph: already finalized");
    if (g->input < 0 || g->n_nodes == 0)
        return cl_error(CL_ERR_ARG, "graph: has no input or no node");
    size_t np = 0, nb = 0;
    int64_t elems = 0;
    /* Offsets: each arena tensor on its own 64-byte line. */
    for (int i = 0; i < g->n_tensors; i++) {
        cl_gtensor *t = &g->tensors[i];
        t->n_consumers = 0;
        t->last_use = -1;
        if (t->kind != CL_GT_PARAM && t->kind != CL_GT_BUFFER)
            continue;
        int64_t ne = cl_shape_numel(&t->shape);
        size_t *acc = t->kind == CL_GT_PARAM ? &np : &nb;
        size_t per = cl_dtype_size(t->dtype) / sizeof(float);
        size_t step = align_floats((size_t)ne * per);
        if (step > SIZE_MAX / sizeof(float) - *acc)
            return cl_error(CL_ERR_LIMIT, "graph: arena size overflows at %s",
                            t->name);
        t->offset = *acc;
        *acc += step;
        if (t->kind == CL_GT_PARAM)
            elems += ne;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const cl_node *n = &g->nodes[i];
        for (int j = 0; j < n->n_in; j++) {
            g->tensors[n->in[j]].n_consumers++;
            g->tensors[n->in[j]].last_use = i;
        }
        for (int j = 0; j < n->n_param; j++) {
            g->tensors[n->param[j]].n_consumers++;
            g->tensors[n->param[j]].last_use = i;
        }
        for (int j = 0; j < n->n_buf; j++) {
            g->tensors[n->buf[j]].n_consumers++;
            g->tensors[n->buf[j]].last_use = i;
        }
    }
    size_t pbytes, bbytes;
    CL_TRY(cl_mul_size(np, sizeof(float), &pbytes, "graph param arena"));
    CL_TRY(cl_mul_size(nb, sizeof(float), &bbytes, "graph buffer arena"));
    g->params = cl_alloc_zero(pbytes, "graph param arena");
    g->grads = cl_alloc_zero(pbytes, "graph grad arena");
    g->buffers = cl_alloc_zero(bbytes, "graph buffer arena");
    if (!g->params || !g->grads || !g->buffers) {
        cl_free(g->params);
        cl_free(g->grads);
        cl_free(g->buffers);
        g->params = g->grads = g->buffers = NULL;
        return CL_ERR_NOMEM;
    }
    g->n_param_floats = np;
    g->n_param_elems = elems;
    g->n_buffer_floats = nb;
    /* Running variance starts at 1, as PyTorch's. */
    for (int i = 0; i < g->n_nodes; i++) {
        const cl_node *n = &g->nodes[i];
        if (n->op != CL_OP_BATCHNORM2D)
            continue;
        const cl_gtensor *rv = &g->tensors[n->buf[1]];
        float *p = g->buffers + rv->offset;
        for (int64_t k = 0; k < cl_shape_numel(&rv->shape); k++)
            p[k] = 1.0f;
    }
    g->finalized = 1;
    return CL_OK;
}

float *cl_graph_param(const cl_graph *g, int tensor)
{
    CL_ASSERT(g->finalized && tensor >= 0 && tensor < g->n_tensors &&
              g->tensors[tensor].kind == CL_GT_PARAM);
    return g->params + g->tensors[tensor].offset;
}

float *cl_graph_grad(const cl_graph *g, int tensor)
{
    CL_ASSERT(g->finalized && tensor >= 0 && tensor < g->n_tensors &&
              g->tensors[tensor].kind == CL_GT_PARAM);
    return g->grads + g->tensors[tensor].offset;
}

float *cl_graph_buffer(const cl_graph *g, int tensor)
{
    CL_ASSERT(g->finalized && tensor >= 0 && tensor < g->n_tensors &&
              g->tensors[tensor].kind == CL_GT_BUFFER &&
              g->tensors[tensor].dtype == CL_F32);
    return g->buffers + g->tensors[tensor].offset;
}

int64_t *cl_graph_buffer_i64(const cl_graph *g, int tensor)
{
    CL_ASSERT(g->finalized && tensor >= 0 && tensor < g->n_tensors &&
              g->tensors[tensor].kind == CL_GT_BUFFER &&
              g->tensors[tensor].dtype == CL_I64);
    /* The tensor starts on a 64-byte line: aligned for int64. */
    return (int64_t *)(void *)(g->buffers + g->tensors[tensor].offset);
}

int cl_graph_find(const cl_graph *g, const char *name)
{
    for (int i = 0; i < g->n_tensors; i++) {
        const cl_gtensor *t = &g->tensors[i];
        if ((t->kind == CL_GT_PARAM || t->kind == CL_GT_BUFFER) &&
            strcmp(t->name, name) == 0)
            return i;
    }
    return -1;
}

int64_t cl_graph_numel(const cl_graph *g, int t)
{
    CL_ASSERT(t >= 0 && t < g->n_tensors);
    return cl_shape_numel(&g->tensors[t].shape);
}

void cl_graph_count_batch(cl_graph *g)
{
    if (!g->finalized)
        return;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].num_batches >= 0)
            cl_graph_buffer(g, g->nodes[i].num_batches)[0] += 1.0f;
}

/* Forward multiply-adds of one node for one image, per op; NULL for the
 * ops that count as none (elementwise, pooling, the loss). */
typedef int64_t (*node_macs_fn)(const cl_graph *g, const cl_node *n);

static int64_t conv2d_macs(const cl_graph *g, const cl_node *n)
{
    const cl_gtensor *y = &g->tensors[n->out];
    const cl_conv2d_attr *a = &n->attr.conv2d;
    return y->shape.d[1] * y->shape.d[2] * y->shape.d[3] *
           (int64_t)(a->in_ch / a->groups) * a->kh * a->kw;
}

/* Per image: every row of the input (one per image for the head, a
 * token's for Swin's projections) over the graph's batch size. */
static int64_t linear_macs(const cl_graph *g, const cl_node *n)
{
    const int64_t rows =
        cl_graph_numel(g, n->in[0]) / n->attr.linear.in_features;
    return rows * n->attr.linear.in_features * n->attr.linear.out_features /
           g->batch;
}

/* Per image: the batch's products (B*M*K*N) over the graph's batch
 * size. */
static int64_t matmul_macs(const cl_graph *g, const cl_node *n)
{
    const cl_shape *a = &g->tensors[n->in[0]].shape;
    return cl_graph_numel(g, n->out) * a->d[a->ndim - 1] / g->batch;
}

static const node_macs_fn node_macs[CL_OP_COUNT] = {
    [CL_OP_CONV2D] = conv2d_macs,
    [CL_OP_LINEAR] = linear_macs,
    [CL_OP_MATMUL] = matmul_macs,
};
CL_OP_TABLE_CHECK(node_macs, 16);

int64_t cl_graph_macs(const cl_graph *g)
{
    int64_t m = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (node_macs[g->nodes[i].op])
            m += node_macs[g->nodes[i].op](g, &g->nodes[i]);
    return m;
}

void cl_graph_print_layers(const cl_graph *g, FILE *f)
{
    fprintf(f, "%-28s %-15s %-22s %12s\n", "layer", "op", "output", "params");
    int64_t total = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const cl_node *n = &g->nodes[i];
        int64_t p = 0;
        for (int j = 0; j < n->n_param; j++)
            p += cl_shape_numel(&g->tensors[n->param[j]].shape);
        total += p;
        char s[96];
        fprintf(f, "%-28s %-15s %-22s %12" PRId64 "\n", n->name,
                cl_op_name(n->op),
                cl_shape_str(&g->tensors[n->out].shape, s, sizeof s), p);
    }
    fprintf(f, "%d layers, %" PRId64 " parameters, %.3f GMACs per image\n",
            g->n_nodes, total, (double)cl_graph_macs(g) / 1e9);
}
