/* The oneDNN backend's lowering: which nodes fuse into which before any
 * primitive is made (BN + ReLU, add + ReLU; for inference conv + BN + add
 * + ReLU as one convolution with post-ops), and where an add may write
 * over its input.  A fused node is skipped at planning; its output shares
 * the storage of the node it fused into. */
#include "backend/onednn/internal.h"

/* Fuses a ReLU that is the only reader of node i's output. */
void fuse_relu(dn_ctx *d, int i)
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
    if (j >= 0 && !is_edge(d, cur) && g->nodes[j].op == CL_OP_BATCHNORM2D &&
        !d->nd[j].skip && !d->nd[j].fallback) {
        x->bn = j;
        d->nd[j].skip = 1;
        d->t[g->nodes[j].out].rep = rep(d, cur);
        d->t[cur].clobbered = 1;
        cur = g->nodes[j].out;
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
        !d->nd[j].skip && !d->nd[j].fallback) {
        d->nd[i].relu = 1;
        d->nd[j].skip = 1;
        d->t[g->nodes[j].out].rep = rep(d, cur);
        d->t[cur].clobbered = 1;
    }
}

void cl_dnnl_conv_lower(dn_ctx *d, int i)
{
    if (d->mode != CL_PLAN_INFER)
        return;
    lower_infer_conv(d, i);
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
int cl_dnnl_bwd_reads_dst(const dn_ctx *d, int r)
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
        if (d->mode == CL_PLAN_TRAIN && cl_dnnl_bwd_reads_dst(d, rep(d, x)))
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

/* Every node's fusion decisions, in graph order; a node that fused into
 * an earlier one, or runs the reference fallback, decides nothing. */
void cl_dnnl_lower(dn_ctx *d)
{
    cl_graph *g = d->g;
    for (int i = 0; i < g->n_nodes; i++) {
        const dn_op *op = &cl_dnnl_ops[g->nodes[i].op];
        if (!d->nd[i].skip && !d->nd[i].fallback && op->lower)
            op->lower(d, i);
    }
}
