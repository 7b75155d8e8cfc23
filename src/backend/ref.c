/* The reference backend: plain f32 buffers for every activation and its
 * gradient, the ops' reference kernels node by node, and SyncBatchNorm
 * through the allreduce hook.  It is the oracle, so it favours plainness
 * over memory: the only buffer sharing is an in-place ReLU. */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/ref_ops.h"
#include "core/error.h"
#include "core/mem.h"

typedef struct ref_state {
    /* Per tensor (g->n_tensors): plain storage of INPUT / ACT / LOSS
     * tensors and, when planned for training, of ACT gradients. */
    float **act;
    float **grad;
    unsigned char *act_owned;  /* act[t] allocated for t (not an alias) */
    unsigned char *grad_owned; /* grad[t] allocated for t */
    int *overwritten_by;       /* node that overwrote act[t] in place, or -1 */
    unsigned char *written;    /* backward: grad[t] holds a value this step */
    cl_ref_saved *saved;       /* per node (g->n_nodes) */
    int32_t *labels;           /* (N) */
    float *targets;            /* (N,K) */
    /* Largest activation, one per input position: where a gradient goes
     * when another consumer already wrote the tensor's. */
    float *scratch[CL_NODE_MAX_IN];
    double *sums; /* reduction sums of the kernels (SyncBN) */
    int have_labels, have_targets;
    int fwd_done, fwd_training, loss_valid;
} ref_state;

/* Every op: cl_ref_kernels has an entry for each line of ops.def. */
static int ref_supports(const cl_graph *g, const cl_node *n)
{
    (void)g;
    return n->op >= 0 && n->op < CL_OP_COUNT;
}

static void *alloc_n(size_t n, size_t elem, const char *what, int zero)
{
    size_t bytes;
    if (cl_mul_size(n, elem, &bytes, what) != CL_OK)
        return NULL;
    return zero ? cl_alloc_zero(bytes, what) : cl_alloc(bytes, what);
}

static void ref_destroy(cl_backend *be)
{
    ref_state *st = be->priv;
    if (!st)
        return;
    const cl_graph *g = be->g;
    for (int t = 0; t < g->n_tensors; t++) {
        if (st->act && st->act_owned && st->act_owned[t])
            cl_free(st->act[t]);
        if (st->grad && st->grad_owned && st->grad_owned[t])
            cl_free(st->grad[t]);
    }
    for (int i = 0; i < g->n_nodes && st->saved; i++)
        cl_ref_saved_free(&st->saved[i]);
    cl_free(st->act);
    cl_free(st->grad);
    cl_free(st->act_owned);
    cl_free(st->grad_owned);
    cl_free(st->overwritten_by);
    cl_free(st->written);
    cl_free(st->saved);
    cl_free(st->labels);
    cl_free(st->targets);
    for (int k = 0; k < CL_NODE_MAX_IN; k++)
        cl_free(st->scratch[k]);
    cl_free(st->sums);
    cl_free(st);
    be->priv = NULL;
}

/* A ReLU may overwrite its input when nothing else reads it and the
 * input's producer does not need its own output in backward (only ReLU
 * does).  Logits and features stay readable. */
static int relu_in_place_ok(const cl_graph *g, const cl_node *n)
{
    int x = n->in[0];
    const cl_gtensor *t = &g->tensors[x];
    return t->kind == CL_GT_ACT && t->n_consumers == 1 && t->producer >= 0 &&
           g->nodes[t->producer].op != CL_OP_RELU && x != g->features &&
           x != g->logits;
}

static cl_status ref_plan(cl_backend *be, cl_graph *g, cl_plan_mode mode)
{
    const int train = mode == CL_PLAN_TRAIN;
    const size_t nt = (size_t)g->n_tensors, nn = (size_t)g->n_nodes;
    ref_state *st = cl_alloc_zero(sizeof *st, "ref backend");
    if (!st)
        return CL_ERR_NOMEM;
    be->priv = st;
    st->act = alloc_n(nt, sizeof *st->act, "ref activations", 1);
    st->grad = alloc_n(nt, sizeof *st->grad, "ref gradients", 1);
    st->act_owned = alloc_n(nt, 1, "ref activations", 1);
    st->grad_owned = alloc_n(nt, 1, "ref gradients", 1);
    st->overwritten_by = alloc_n(nt, sizeof(int), "ref activations", 1);
    st->written = alloc_n(nt, 1, "ref gradients", 1);
    st->saved = alloc_n(nn, sizeof *st->saved, "ref saved tensors", 1);
    if (!st->act || !st->grad || !st->act_owned || !st->grad_owned ||
        !st->overwritten_by || !st->written || !st->saved)
        return CL_ERR_NOMEM;
    for (size_t t = 0; t < nt; t++)
        st->overwritten_by[t] = -1;

    /* Activations, in node order so an in-place ReLU finds its input. */
    size_t max_act = 0, max_sums = 0;
    int max_grad_in = 0;
    for (size_t t = 0; t < nt; t++) {
        const cl_gtensor *gt = &g->tensors[t];
        if (gt->kind == CL_GT_ACT &&
            (size_t)cl_shape_numel(&gt->shape) > max_act)
            max_act = (size_t)cl_shape_numel(&gt->shape);
    }
    if (g->input >= 0) {
        size_t n = (size_t)cl_graph_numel(g, g->input);
        st->act[g->input] = alloc_n(n, sizeof(float), "ref input", 1);
        if (!st->act[g->input])
            return CL_ERR_NOMEM;
        st->act_owned[g->input] = 1;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const cl_node *n = &g->nodes[i];
        const int y = n->out;
        const size_t ne = (size_t)cl_graph_numel(g, y);
        if (n->op == CL_OP_RELU && relu_in_place_ok(g, n)) {
            st->act[y] = st->act[n->in[0]];
            st->overwritten_by[n->in[0]] = i;
            if (train)
                st->grad[y] = st->grad[n->in[0]];
        } else {
            st->act[y] = alloc_n(ne, sizeof(float), n->name, 1);
            if (!st->act[y])
                return CL_ERR_NOMEM;
            st->act_owned[y] = 1;
            if (train && g->tensors[y].kind == CL_GT_ACT) {
                st->grad[y] = alloc_n(ne, sizeof(float), n->name, 1);
                if (!st->grad[y])
                    return CL_ERR_NOMEM;
                st->grad_owned[y] = 1;
            }
        }
        size_t sums;
        CL_TRY(cl_ref_saved_alloc(&st->saved[i], g, n, train, &sums));
        if (sums > max_sums)
            max_sums = sums;
        for (int k = 0; k < n->n_in; k++)
            if (g->tensors[n->in[k]].kind == CL_GT_ACT && k + 1 > max_grad_in)
                max_grad_in = k + 1;
    }
    if (g->loss >= 0) {
        size_t nk = (size_t)g->batch * (size_t)g->num_classes;
        st->targets = alloc_n(nk, sizeof(float), "ref targets", 1);
        st->labels =
            alloc_n((size_t)g->batch, sizeof(int32_t), "ref labels", 1);
        if (!st->targets || !st->labels)
            return CL_ERR_NOMEM;
    }
    for (int k = 0; train && k < max_grad_in; k++) {
        st->scratch[k] = alloc_n(max_act, sizeof(float), "ref scratch", 1);
        if (!st->scratch[k])
            return CL_ERR_NOMEM;
    }
    st->sums = alloc_n(max_sums + 1, sizeof(double), "ref reduction sums", 1);
    if (!st->sums)
        return CL_ERR_NOMEM;
    return CL_OK;
}

static cl_status ref_set_input(cl_backend *be, const float *x,
                               const int32_t *labels, const float *targets)
{
    ref_state *st = be->priv;
    const cl_graph *g = be->g;
    st->fwd_done = 0;
    st->have_labels = st->have_targets = 0;
    if (!x)
        return cl_error(CL_ERR_ARG, "ref: set_input without an image batch");
    if (labels && targets)
        return cl_error(CL_ERR_ARG,
                        "ref: set_input with both labels and soft targets");
    memcpy(st->act[g->input], x,
           (size_t)cl_graph_numel(g, g->input) * sizeof(float));
    if ((labels || targets) && g->loss < 0)
        return cl_error(CL_ERR_ARG,
                        "ref: labels or targets given but the graph has no "
                        "loss");
    if (labels) {
        CL_TRY(cl_softmax_ce_check_labels(labels, g->batch, g->num_classes));
        memcpy(st->labels, labels, (size_t)g->batch * sizeof(int32_t));
        st->have_labels = 1;
    }
    if (targets) {
        memcpy(st->targets, targets,
               (size_t)g->batch * (size_t)g->num_classes * sizeof(float));
        st->have_targets = 1;
    }
    return CL_OK;
}

/* The arguments of node i's kernels: its inputs and output in this
 * backend's buffers. */
static cl_ref_args node_args(cl_backend *be, int i)
{
    ref_state *st = be->priv;
    cl_graph *g = be->g;
    const cl_node *n = &g->nodes[i];
    cl_ref_args a = {.g = g,
                     .n = n,
                     .sv = &st->saved[i],
                     .hooks = &be->hooks,
                     .sums = st->sums};
    for (int k = 0; k < n->n_in; k++)
        a.x[k] = st->act[n->in[k]];
    a.y = st->act[n->out];
    a.labels = st->have_labels ? st->labels : NULL;
    a.targets = st->have_targets ? st->targets : NULL;
    cl_ref_args_key(&a, be, i);
    return a;
}

static cl_status ref_forward(cl_backend *be, int training, float *loss)
{
    ref_state *st = be->priv;
    cl_graph *g = be->g;
    st->fwd_done = 0;
    st->loss_valid = 0;
    if (loss)
        *loss = NAN;
    for (int i = 0; i < g->n_nodes; i++) {
        const cl_node *n = &g->nodes[i];
        cl_ref_args a = node_args(be, i);
        a.training = training;
        CL_TRY(cl_ref_kernels[n->op].forward(&a));
        if (n->out == g->loss && (st->have_labels || st->have_targets)) {
            st->loss_valid = 1;
            if (loss)
                *loss = a.y[0];
        }
    }
    if (training)
        cl_graph_count_batch(g);
    st->fwd_done = 1;
    st->fwd_training = training;
    return CL_OK;
}

/* Where the gradient of tensor t, input k of a node, goes: its own buffer
 * the first time (kernels overwrite), input k's scratch buffer when
 * another consumer (or an earlier input of the same node) already wrote
 * it (then grad_end adds it in).  NULL when t needs no gradient (the
 * image batch).  Only the inputs the op differentiates get here
 * (cl_op_grad_inputs). */
static float *grad_begin(ref_state *st, const cl_graph *g, int t, int k,
                         int *acc)
{
    *acc = 0;
    if (g->tensors[t].kind != CL_GT_ACT || !st->grad[t])
        return NULL;
    if (!st->written[t]) {
        st->written[t] = 1;
        return st->grad[t];
    }
    *acc = 1;
    return st->scratch[k];
}

static void grad_end(ref_state *st, const cl_graph *g, int t, int k, int acc)
{
    if (!acc)
        return;
    float *d = st->grad[t];
    const float *s = st->scratch[k];
    const int64_t n = cl_graph_numel(g, t);
    for (int64_t i = 0; i < n; i++)
        d[i] += s[i];
}

static cl_status ref_backward(cl_backend *be)
{
    ref_state *st = be->priv;
    cl_graph *g = be->g;
    if (be->mode != CL_PLAN_TRAIN)
        return cl_error(CL_ERR_ARG,
                        "ref: backward on a graph planned for inference");
    if (!st->fwd_done || !st->fwd_training)
        return cl_error(CL_ERR_ARG,
                        "ref: backward needs a training forward first");
    if (!st->loss_valid)
        return cl_error(CL_ERR_ARG,
                        "ref: backward needs labels or targets (set_input)");
    memset(st->written, 0, (size_t)g->n_tensors);
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        const cl_node *n = &g->nodes[i];
        const int is_loss = n->out == g->loss;
        if (!is_loss && !st->written[n->out]) {
            /* The output does not reach the loss: zero param gradients. */
            for (int j = 0; j < n->n_param; j++)
                memset(cl_graph_grad(g, n->param[j]), 0,
                       (size_t)cl_graph_numel(g, n->param[j]) * sizeof(float));
        } else {
            cl_ref_args a = node_args(be, i);
            int acc[CL_NODE_MAX_IN] = {0};
            const unsigned wants = cl_op_grad_inputs(n->op);
            a.dy = is_loss ? NULL : st->grad[n->out];
            for (int k = 0; k < n->n_in; k++)
                if (wants >> k & 1u)
                    a.dx[k] = grad_begin(st, g, n->in[k], k, &acc[k]);
            CL_TRY(cl_ref_kernels[n->op].backward(&a));
            for (int k = 0; k < n->n_in; k++)
                grad_end(st, g, n->in[k], k, acc[k]);
        }
        if (be->hooks.grad_ready)
            for (int j = 0; j < n->n_param; j++)
                be->hooks.grad_ready(be->hooks.ctx, n->param[j]);
    }
    return CL_OK;
}

static cl_status ref_read(cl_backend *be, int tensor, float *out)
{
    ref_state *st = be->priv;
    const cl_graph *g = be->g;
    if (tensor < 0 || tensor >= g->n_tensors)
        return cl_error(CL_ERR_ARG, "ref: read of tensor %d, expected 0..%d",
                        tensor, g->n_tensors - 1);
    const cl_gtensor *t = &g->tensors[tensor];
    if (t->kind != CL_GT_ACT && t->kind != CL_GT_INPUT && t->kind != CL_GT_LOSS)
        return cl_error(CL_ERR_ARG,
                        "ref: read of '%s', which is not an activation",
                        t->name);
    if (st->overwritten_by[tensor] >= 0)
        return cl_error(CL_ERR_UNSUPPORTED,
                        "ref: '%s' is overwritten in place by '%s'; read "
                        "that node's output instead",
                        t->name, g->nodes[st->overwritten_by[tensor]].name);
    memcpy(out, st->act[tensor],
           (size_t)cl_shape_numel(&t->shape) * sizeof(float));
    return CL_OK;
}

static cl_status ref_sync_params(cl_backend *be)
{
    (void)be; /* the kernels read the graph's arenas directly */
    return CL_OK;
}

const cl_backend_vtbl cl_backend_ref_vtbl = {
    .name = "ref",
    .supports = ref_supports,
    .plan = ref_plan,
    .set_input = ref_set_input,
    .forward = ref_forward,
    .backward = ref_backward,
    .read = ref_read,
    .sync_params = ref_sync_params,
    .destroy = ref_destroy,
};
