/* The oneDNN backend's lowering: the op table's `lower` entries, which
 * plan.c calls in graph order before any primitive is made.  They decide
 * which nodes fuse into which (BN + ReLU, add + ReLU; for inference conv +
 * BN + add + ReLU as one convolution with post-ops; row_gathers that only
 * re-view a matmul's operand or output), and where an add may write over
 * its input.  A fused node is skipped at planning; its output shares the
 * storage of the node it fused into. */
#include "backend/onednn/internal.h"
#include "backend/onednn_info.h"
#include "core/mem.h"

/* Fuses a ReLU that is the only reader of node i's output. */
static void fuse_relu(dn_ctx *d, int i)
{
    const cl_node *n = &d->g->nodes[i];
    int j = only_consumer(d, n->out);
    if (j < 0 || is_edge(d, n->out))
        return;
    const cl_node *r = &d->g->nodes[j];
    if (r->op != CL_OP_RELU || d->nd[j].skip || d->nd[j].fallback)
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
    dn_weighted *x = &d->nd[i].u.w;
    int cur = g->nodes[i].out;
    int j = only_consumer(d, cur);
    x->last = cur;
    if (j >= 0 && !is_edge(d, cur) && g->nodes[j].op == CL_OP_BATCHNORM2D &&
        !d->nd[j].skip && !d->nd[j].fallback) {
        x->bn = j;
        d->nd[j].skip = 1;
        d->t[g->nodes[j].out].rep = rep(d, cur);
        d->t[cur].clobbered = 1;
        cur = g->nodes[j].out;
        x->last = cur;
    }
    j = only_consumer(d, cur);
    if (j < 0 || is_edge(d, cur) || d->nd[j].skip || d->nd[j].fallback)
        return;
    const cl_node *c = &g->nodes[j];
    if (c->op == CL_OP_RELU) {
        d->nd[i].relu = 1;
        d->nd[j].skip = 1;
        d->t[c->out].rep = rep(d, cur);
        d->t[cur].clobbered = 1;
        x->last = c->out;
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
    x->last = cur;
    j = only_consumer(d, cur);
    if (j >= 0 && !is_edge(d, cur) && g->nodes[j].op == CL_OP_RELU &&
        !d->nd[j].skip && !d->nd[j].fallback) {
        d->nd[i].relu = 1;
        d->nd[j].skip = 1;
        d->t[g->nodes[j].out].rep = rep(d, cur);
        d->t[cur].clobbered = 1;
        x->last = g->nodes[j].out;
    }
}

void cl_dnnl_conv_lower(dn_ctx *d, int i)
{
    if (d->mode != CL_PLAN_INFER)
        return;
    lower_infer_conv(d, i);
    /* int8: a conv whose result only int8 nodes read writes it quantized
     * at their scale, instead of f32 that each would quantize again;
     * never one that sums into an earlier tensor's storage. */
    dn_weighted *x = &d->nd[i].u.w;
    x->qout = cl_dnnl_q8_node(d, i) && x->sum < 0 && !is_edge(d, x->last) &&
              cl_dnnl_q8_readers_only(d, x->last);
    /* A folded BN's weights are made in d->fold before their reorder. */
    if (d->nd[i].u.w.bn >= 0) {
        size_t wn = (size_t)cl_graph_numel(d->g, d->g->nodes[i].param[0]);
        if (wn > d->fold_floats)
            d->fold_floats = wn;
    }
}

void cl_dnnl_bn_lower(dn_ctx *d, int i)
{
    fuse_relu(d, i);
}

/* Whether backward of the node producing rep tensor r reads r's value. */
static int bwd_reads_dst(const dn_ctx *d, int r)
{
    int p = gt(d, r)->producer;
    if (p < 0)
        return 1;
    const cl_node *n = &d->g->nodes[p];
    if (d->nd[p].fallback)
        return 1; /* it reads its own plain copy, kept whole */
    if (n->op == CL_OP_RELU || n->op == CL_OP_SOFTMAX)
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
        d->nd[i].u.add.inplace = 1;
        d->nd[i].u.add.swap = k == 1;
        return;
    }
}

void cl_dnnl_add_lower(dn_ctx *d, int i)
{
    fuse_relu(d, i);
    lower_add_inplace(d, i);
}

/* ---- matmul views ----------------------------------------------------------
 *
 * Attention splits q, k and v into heads and merges the heads back with
 * row_gathers whose index is an affine function of the (batch, head, row)
 * position.  Such a gather feeding a matmul (or fed by one) is a strided
 * view of memory oneDNN's matmul can read (or write) in place, so it is
 * not run: the matmul reads the gather's input through strides, writes
 * the gather's output through strides, and in backward writes its
 * gradients straight into the gradient of the tensor the gathers split.
 * The index is a constant of the plan, as for row_gather's backward. */

/* A tensor of shape (..., n1, rows, cols) as a (n0, n1) batch of matrices
 * of n2 rows; rank 4 and up, so that the heads are a dimension. */
static int view_split(const cl_shape *s, int64_t *n0, int64_t *n1, int64_t *n2)
{
    if (s->ndim < 4)
        return 0;
    *n0 = 1;
    for (int k = 0; k < s->ndim - 3; k++)
        *n0 *= s->d[k];
    *n1 = s->d[s->ndim - 3];
    *n2 = s->d[s->ndim - 2];
    return 1;
}

/* Whether map[(i0 n1 + i1) n2 + i2] = base + i0 s0 + i1 s1 + i2 s2 at
 * every position; v (x left alone) is filled when it is. */
static int affine_fit(const int64_t *map, int64_t n0, int64_t n1, int64_t n2,
                      dn_view *v)
{
    const int64_t b = map[0];
    const int64_t s2 = n2 > 1 ? map[1] - b : 0;
    const int64_t s1 = n1 > 1 ? map[n2] - b : 0;
    const int64_t s0 = n0 > 1 ? map[n1 * n2] - b : 0;
    if (s0 < 0 || s1 < 0 || s2 < 0)
        return 0; /* memory descriptors take no negative strides */
    for (int64_t i0 = 0; i0 < n0; i0++)
        for (int64_t i1 = 0; i1 < n1; i1++) {
            const int64_t *m = map + (i0 * n1 + i1) * n2;
            const int64_t e = b + i0 * s0 + i1 * s1;
            for (int64_t i2 = 0; i2 < n2; i2++)
                if (m[i2] != e + i2 * s2)
                    return 0;
        }
    v->n0 = n0;
    v->n1 = n1;
    v->base = b;
    v->s[0] = s0;
    v->s[1] = s1;
    v->s[2] = s2;
    return 1;
}

/* Whether a row_gather node may run as a view at all: on oneDNN, planned,
 * its output not an edge. */
static int gather_viewable(const dn_ctx *d, int j)
{
    return j >= 0 && d->g->nodes[j].op == CL_OP_ROW_GATHER && !d->nd[j].skip &&
           !d->nd[j].fallback && !is_edge(d, d->g->nodes[j].out);
}

/* The matmul reading gather j's output alone, with a batched b (views are
 * batches of matrices), or -1. */
static int view_reader(const dn_ctx *d, int j)
{
    const int q = d->g->nodes[j].out;
    const int m = only_consumer(d, q);
    if (m < 0 || d->g->nodes[m].op != CL_OP_MATMUL || d->nd[m].fallback)
        return -1;
    const cl_node *n = &d->g->nodes[m];
    cl_matmul_dims md = cl_matmul_dims_of(
        &n->attr.matmul, &gt(d, n->in[0])->shape, &gt(d, n->in[1])->shape);
    return md.b_batched ? m : -1;
}

/* Gather j (of x's rows) as a view: each output matrix a strided block of
 * x, a row of the gather a row of the matrix. */
static int gather_as_view(const dn_ctx *d, int j, dn_view *v)
{
    const cl_node *n = &d->g->nodes[j];
    const cl_shape *s = &gt(d, n->out)->shape;
    int64_t n0, n1, n2;
    if (!view_split(s, &n0, &n1, &n2) ||
        s->d[s->ndim - 1] != n->attr.row_gather.cols)
        return 0;
    v->x = n->in[0];
    return affine_fit(cl_graph_buffer_i64(d->g, n->buf[0]), n0, n1, n2, v);
}

/* Whether the matmuls reading tensor x through gathers may all read it in
 * place: x is a token linear's output, every reader of x is a viewable
 * gather read by one matmul, and the gathers together read each row of x
 * exactly once, so the matmuls' gradients fill x's gradient with nothing
 * to sum. */
static int views_cover(dn_ctx *d, int x)
{
    const cl_graph *g = d->g;
    const int p = gt(d, x)->producer;
    if (p < 0 || g->nodes[p].op != CL_OP_LINEAR || d->nd[p].fallback ||
        gt(d, g->nodes[p].in[0])->shape.ndim < 3 || is_edge(d, x))
        return 0;
    int cols = 0, ok = 1;
    for (int j = 0; j < g->n_nodes && ok; j++)
        for (int a = 0; a < g->nodes[j].n_in; a++) {
            if (g->nodes[j].in[a] != x)
                continue;
            dn_view v;
            ok = ok && gather_viewable(d, j) && view_reader(d, j) >= 0 &&
                 gather_as_view(d, j, &v) &&
                 (!cols || cols == g->nodes[j].attr.row_gather.cols);
            cols = g->nodes[j].attr.row_gather.cols;
        }
    if (!ok || !cols)
        return 0;
    const int64_t rows = cl_graph_numel(g, x) / cols;
    unsigned char *seen = cl_alloc_zero((size_t)rows, "onednn: views");
    if (!seen)
        return 0; /* the gathers then run as they are */
    for (int j = 0; j < g->n_nodes && ok; j++) {
        const cl_node *n = &g->nodes[j];
        if (n->op != CL_OP_ROW_GATHER || n->in[0] != x)
            continue;
        const int64_t *ix = cl_graph_buffer_i64(g, n->buf[0]);
        const int64_t m = cl_graph_numel(g, n->out) / cols;
        for (int64_t r = 0; r < m && ok; r++)
            ok = ix[r] >= 0 && ix[r] < rows && !seen[ix[r]]++;
    }
    for (int64_t r = 0; r < rows && ok; r++)
        ok = seen[r] == 1;
    cl_free(seen);
    return ok;
}

/* Makes every gather of x a view read by its matmul. */
static void view_inputs(dn_ctx *d, int x)
{
    const cl_graph *g = d->g;
    for (int j = 0; j < g->n_nodes; j++) {
        const cl_node *n = &g->nodes[j];
        if (n->op != CL_OP_ROW_GATHER || n->in[0] != x)
            continue;
        const int m = view_reader(d, j);
        dn_view *v = &d->nd[m].u.mm.v[g->nodes[m].in[0] == n->out ? 0 : 1];
        gather_as_view(d, j, v);
        d->nd[j].skip = 1;
        d->t[n->out].clobbered = 1;
    }
}

/* Matmul i writing straight into the output of the gather that alone
 * reads its output, when that gather only moves whole matrix rows
 * (each once) to places affine in the (batch, head, row) position. */
static void view_output(dn_ctx *d, int i)
{
    const cl_graph *g = d->g;
    const int y = g->nodes[i].out, j = only_consumer(d, y);
    const cl_shape *s = &gt(d, y)->shape;
    int64_t n0, n1, n2;
    if (is_edge(d, y) || !gather_viewable(d, j) ||
        !view_split(s, &n0, &n1, &n2) ||
        g->nodes[j].attr.row_gather.cols != s->d[s->ndim - 1] ||
        cl_graph_numel(g, g->nodes[j].out) != cl_graph_numel(g, y))
        return;
    const int64_t rows = n0 * n1 * n2;
    const int64_t *ix = cl_graph_buffer_i64(g, g->nodes[j].buf[0]);
    int64_t *inv = cl_alloc(sizeof *inv * (size_t)rows, "onednn: views");
    if (!inv)
        return;
    int ok = 1;
    for (int64_t r = 0; r < rows; r++)
        inv[r] = -1;
    for (int64_t o = 0; o < rows && ok; o++) {
        ok = ix[o] >= 0 && ix[o] < rows && inv[ix[o]] < 0;
        if (ok)
            inv[ix[o]] = o;
    }
    dn_view v;
    if (ok && affine_fit(inv, n0, n1, n2, &v)) {
        v.x = g->nodes[j].out;
        d->nd[i].u.mm.v[2] = v;
        d->nd[j].skip = 1;
        d->t[y].rep = rep(d, v.x);
        d->t[y].clobbered = 1;
    }
    cl_free(inv);
}

void cl_dnnl_matmul_lower(dn_ctx *d, int i)
{
    const cl_node *n = &d->g->nodes[i];
    dn_matmul *x = &d->nd[i].u.mm;
    for (int k = 0; k < 2; k++) {
        const int p = gt(d, n->in[k])->producer;
        if (x->v[k].x < 0 && gather_viewable(d, p) && view_reader(d, p) == i) {
            const int src = d->g->nodes[p].in[0];
            if (views_cover(d, src))
                view_inputs(d, src);
        }
    }
    view_output(d, i);
}

int cl_dnnl_attention_fused(void)
{
    /* attention.c's loops keep 16-lane vectors in registers: one each on
     * AVX-512, two of AVX2's sixteen, where GCC 12 spills them to the
     * stack at every step.  Measured on a 2-core AVX2 EPYC, Swin-T at
     * 224, batch 16: the fused step took 1159 ms, the three steps 310
     * (matmuls 76, softmax 234), the network 7.25 against 11.56 img/s. */
#if defined(__AVX512F__)
    return 1;
#else
    return 0;
#endif
}

/* Inference: softmax i between two matmuls, scores = alpha q k^T before it
 * and its probabilities times v after it, each the other's only reader,
 * runs inside the second matmul as one loop per matrix (attention.c), so
 * the scores and the probabilities are never stored, where the build has
 * the registers for it (cl_dnnl_attention_fused).  Training keeps the
 * three apart: backward reads the probabilities. */
void cl_dnnl_softmax_lower(dn_ctx *d, int i)
{
    const cl_graph *g = d->g;
    const cl_node *n = &g->nodes[i];
    const int j = gt(d, n->in[0])->producer, k = only_consumer(d, n->out);
    if (!cl_dnnl_attention_fused() || d->mode != CL_PLAN_INFER || j < 0 ||
        k < 0 || is_edge(d, n->in[0]) || is_edge(d, n->out) ||
        only_consumer(d, n->in[0]) != i)
        return;
    const cl_node *s = &g->nodes[j], *c = &g->nodes[k];
    if (s->op != CL_OP_MATMUL || c->op != CL_OP_MATMUL || d->nd[j].skip ||
        d->nd[j].fallback || d->nd[k].skip || d->nd[k].fallback ||
        c->in[0] != n->out || c->in[1] == n->out)
        return;
    const cl_matmul_dims ms = cl_matmul_dims_of(
        &s->attr.matmul, &gt(d, s->in[0])->shape, &gt(d, s->in[1])->shape);
    const cl_matmul_dims mc = cl_matmul_dims_of(
        &c->attr.matmul, &gt(d, c->in[0])->shape, &gt(d, c->in[1])->shape);
    if (!ms.b_batched || !s->attr.matmul.trans_b || !mc.b_batched ||
        c->attr.matmul.trans_b || ms.B != mc.B || ms.M != mc.M ||
        ms.N != mc.K || ms.M > AT_MAX || ms.N > AT_MAX || ms.K > AT_MAX ||
        mc.N > AT_MAX || ms.K % AT_WIDTH_STEP != 0 || mc.N % AT_WIDTH_STEP != 0)
        return;
    d->nd[j].skip = 1;
    d->nd[i].skip = 1;
    d->nd[k].u.mm.attn = i;
    d->t[n->in[0]].clobbered = 1;
    d->t[n->out].clobbered = 1;
}

/* Inference: a GELU that alone reads a linear's output runs as the inner
 * product's post-op (training keeps it apart: its backward reads the
 * linear's output). */
void cl_dnnl_linear_lower(dn_ctx *d, int i)
{
    const cl_node *n = &d->g->nodes[i];
    const int j = only_consumer(d, n->out);
    if (d->mode != CL_PLAN_INFER || j < 0 || is_edge(d, n->out) ||
        d->g->nodes[j].op != CL_OP_GELU || d->nd[j].skip || d->nd[j].fallback)
        return;
    d->nd[i].gelu = 1;
    d->nd[j].skip = 1;
    d->t[d->g->nodes[j].out].rep = rep(d, n->out);
    d->t[n->out].clobbered = 1;
}

/* Inference: droppath is the identity, so its output is its input's
 * storage; only where droppath alone reads that input, since a node after
 * it may write over its output (an add in place). */
void cl_dnnl_droppath_lower(dn_ctx *d, int i)
{
    const cl_node *n = &d->g->nodes[i];
    if (d->mode != CL_PLAN_INFER || d->ncons[n->in[0]] != 1 ||
        is_edge(d, n->in[0]))
        return;
    d->nd[i].skip = 1;
    d->t[n->out].rep = rep(d, n->in[0]);
}
