/* The reference backend: plain f32 buffers for every activation and its
 * gradient, the ops' reference kernels node by node, and SyncBatchNorm
 * through the allreduce hook.  It is the oracle, so it favours plainness
 * over memory: the only buffer sharing is an in-place ReLU. */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
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
    /* Per node (g->n_nodes): BN batch mean / invstd (C) and, with SyncBN,
     * the global sample count; maxpool argmax (N,C,OH,OW). */
    float **mean;
    float **invstd;
    double *bn_count;
    int32_t **idx;
    float *probs;    /* (N,K) saved by the loss */
    int32_t *labels; /* (N) */
    float *targets;  /* (N,K) */
    float *scratch;  /* largest activation: a second consumer's gradient */
    double *stats;   /* SyncBN sums: 2 * max channels + 1 */
    int max_channels;
    int have_labels, have_targets;
    int fwd_done, fwd_training, loss_valid;
} ref_state;

static int ref_supports(const cl_node *n)
{
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
    for (int i = 0; i < g->n_nodes; i++) {
        if (st->mean)
            cl_free(st->mean[i]);
        if (st->invstd)
            cl_free(st->invstd[i]);
        if (st->idx)
            cl_free(st->idx[i]);
    }
    cl_free(st->act);
    cl_free(st->grad);
    cl_free(st->act_owned);
    cl_free(st->grad_owned);
    cl_free(st->overwritten_by);
    cl_free(st->written);
    cl_free(st->mean);
    cl_free(st->invstd);
    cl_free(st->bn_count);
    cl_free(st->idx);
    cl_free(st->probs);
    cl_free(st->labels);
    cl_free(st->targets);
    cl_free(st->scratch);
    cl_free(st->stats);
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
    st->mean = alloc_n(nn, sizeof *st->mean, "ref BN statistics", 1);
    st->invstd = alloc_n(nn, sizeof *st->invstd, "ref BN statistics", 1);
    st->bn_count = alloc_n(nn, sizeof(double), "ref BN statistics", 1);
    st->idx = alloc_n(nn, sizeof *st->idx, "ref maxpool indices", 1);
    if (!st->act || !st->grad || !st->act_owned || !st->grad_owned ||
        !st->overwritten_by || !st->written || !st->mean || !st->invstd ||
        !st->bn_count || !st->idx)
        return CL_ERR_NOMEM;
    for (size_t t = 0; t < nt; t++)
        st->overwritten_by[t] = -1;

    /* Activations, in node order so an in-place ReLU finds its input. */
    size_t max_act = 0;
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
        if (n->op == CL_OP_BATCHNORM2D) {
            int c = n->attr.batchnorm2d.channels;
            st->mean[i] = alloc_n((size_t)c, sizeof(float), n->name, 1);
            st->invstd[i] = alloc_n((size_t)c, sizeof(float), n->name, 1);
            if (!st->mean[i] || !st->invstd[i])
                return CL_ERR_NOMEM;
            if (c > st->max_channels)
                st->max_channels = c;
        }
        if (n->op == CL_OP_MAXPOOL2D && train) {
            st->idx[i] = alloc_n(ne, sizeof(int32_t), n->name, 1);
            if (!st->idx[i])
                return CL_ERR_NOMEM;
        }
    }
    if (g->loss >= 0) {
        size_t nk = (size_t)g->batch * (size_t)g->num_classes;
        st->probs = alloc_n(nk, sizeof(float), "ref loss", 1);
        st->targets = alloc_n(nk, sizeof(float), "ref targets", 1);
        st->labels =
            alloc_n((size_t)g->batch, sizeof(int32_t), "ref labels", 1);
        if (!st->probs || !st->targets || !st->labels)
            return CL_ERR_NOMEM;
    }
    if (train) {
        st->scratch = alloc_n(max_act, sizeof(float), "ref scratch", 1);
        if (!st->scratch)
            return CL_ERR_NOMEM;
    }
    st->stats = alloc_n(2 * (size_t)st->max_channels + 1, sizeof(double),
                        "ref SyncBN sums", 1);
    if (!st->stats)
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

/* SyncBatchNorm forward (training): per-channel sum and sum of squares
 * (double) and the sample count are summed over all ranks by the hook,
 * then every rank normalises with the global statistics.  With a single
 * rank (identity hook) this equals cl_batchnorm2d_forward_train up to
 * rounding.  stats: 2C+1 doubles; *count receives the global count.
 * y, x: (N,C,HW)  gamma, beta, mean, invstd, running_*: (C) */
static cl_status ref_syncbn_forward(const cl_backend_hooks *h, double *stats,
                                    double *count, float *y, float *mean,
                                    float *invstd, float *running_mean,
                                    float *running_var, const float *x,
                                    const float *gamma, const float *beta,
                                    int N, int C, int HW,
                                    const cl_batchnorm2d_attr *a)
{
    for (int c = 0; c < C; c++) {
        double s = 0.0, q = 0.0;
        for (int n = 0; n < N; n++) {
            const float *xp = x + ((int64_t)n * C + c) * HW;
            for (int i = 0; i < HW; i++) {
                s += xp[i];
                q += (double)xp[i] * xp[i];
            }
        }
        stats[c] = s;
        stats[C + c] = q;
    }
    stats[2 * C] = (double)N * HW;
    cl_status s = h->allreduce_sum(h->ctx, stats, 2 * C + 1);
    if (s != CL_OK)
        return s;
    const double M = stats[2 * C];
    *count = M;
    for (int c = 0; c < C; c++) {
        const double mu = stats[c] / M;
        double var = stats[C + c] / M - mu * mu; /* biased */
        if (var < 0.0)
            var = 0.0;
        const float is = (float)(1.0 / sqrt(var + (double)a->eps));
        const float m = (float)mu, sc = gamma[c] * is, bt = beta[c];
        for (int n = 0; n < N; n++) {
            const float *xp = x + ((int64_t)n * C + c) * HW;
            float *yp = y + ((int64_t)n * C + c) * HW;
            for (int i = 0; i < HW; i++)
                yp[i] = (xp[i] - m) * sc + bt;
        }
        mean[c] = m;
        invstd[c] = is;
        const double uvar = M > 1.0 ? var * M / (M - 1.0) : var;
        const float mo = a->momentum;
        running_mean[c] = (1.0f - mo) * running_mean[c] + mo * m;
        running_var[c] = (1.0f - mo) * running_var[c] + mo * (float)uvar;
    }
    return CL_OK;
}

/* SyncBatchNorm backward: dgamma and dbeta are this rank's sums (the
 * trainer averages param grads over ranks as for any param); dx needs the
 * global sums of dy and dy * xhat, which the hook adds up.  count is the
 * global sample count of the forward.  stats: 2C doubles. */
static cl_status ref_syncbn_backward(const cl_backend_hooks *h, double *stats,
                                     double count, float *dx, float *dgamma,
                                     float *dbeta, const float *dy,
                                     const float *x, const float *mean,
                                     const float *invstd, const float *gamma,
                                     int N, int C, int HW)
{
    for (int c = 0; c < C; c++) {
        const float m = mean[c], is = invstd[c];
        double sdy = 0.0, sdyx = 0.0;
        for (int n = 0; n < N; n++) {
            const float *xp = x + ((int64_t)n * C + c) * HW;
            const float *dyp = dy + ((int64_t)n * C + c) * HW;
            for (int i = 0; i < HW; i++) {
                sdy += dyp[i];
                sdyx += (double)dyp[i] * ((xp[i] - m) * is);
            }
        }
        stats[c] = sdy;
        stats[C + c] = sdyx;
        if (dbeta)
            dbeta[c] = (float)sdy;
        if (dgamma)
            dgamma[c] = (float)sdyx;
    }
    cl_status s = h->allreduce_sum(h->ctx, stats, 2 * C);
    if (s != CL_OK || !dx)
        return s;
    for (int c = 0; c < C; c++) {
        const float m = mean[c], is = invstd[c];
        const float k = gamma[c] * is;
        const float mdy = (float)(stats[c] / count);
        const float mdyx = (float)(stats[C + c] / count);
        for (int n = 0; n < N; n++) {
            const float *xp = x + ((int64_t)n * C + c) * HW;
            const float *dyp = dy + ((int64_t)n * C + c) * HW;
            float *dxp = dx + ((int64_t)n * C + c) * HW;
            for (int i = 0; i < HW; i++) {
                const float xh = (xp[i] - m) * is;
                dxp[i] = k * (dyp[i] - mdy - xh * mdyx);
            }
        }
    }
    return CL_OK;
}

static float *param_or_null(const cl_graph *g, const cl_node *n, int j)
{
    return j < n->n_param ? cl_graph_param(g, n->param[j]) : NULL;
}

static cl_status ref_forward(cl_backend *be, int training, float *loss)
{
    ref_state *st = be->priv;
    cl_graph *g = be->g;
    const int sync = training && be->hooks.allreduce_sum != NULL;
    const int N = g->batch;
    st->fwd_done = 0;
    st->loss_valid = 0;
    if (loss)
        *loss = NAN;
    for (int i = 0; i < g->n_nodes; i++) {
        const cl_node *n = &g->nodes[i];
        const cl_shape *xs = &g->tensors[n->in[0]].shape;
        const float *x = st->act[n->in[0]];
        float *y = st->act[n->out];
        switch (n->op) {
        case CL_OP_CONV2D:
            cl_conv2d_forward(y, x, param_or_null(g, n, 0),
                              param_or_null(g, n, 1), N, (int)xs->d[2],
                              (int)xs->d[3], &n->attr.conv2d);
            break;
        case CL_OP_BATCHNORM2D: {
            const int C = (int)xs->d[1], HW = (int)(xs->d[2] * xs->d[3]);
            const float *gm = cl_graph_param(g, n->param[0]);
            const float *bt = cl_graph_param(g, n->param[1]);
            float *rm = cl_graph_buffer(g, n->buf[0]);
            float *rv = cl_graph_buffer(g, n->buf[1]);
            if (sync) {
                cl_status s =
                    ref_syncbn_forward(&be->hooks, st->stats, &st->bn_count[i],
                                       y, st->mean[i], st->invstd[i], rm, rv, x,
                                       gm, bt, N, C, HW, &n->attr.batchnorm2d);
                if (s != CL_OK)
                    return cl_error_wrap(s, "%s: SyncBatchNorm: ", n->name);
            } else if (training) {
                cl_batchnorm2d_forward_train(y, st->mean[i], st->invstd[i], rm,
                                             rv, x, gm, bt, N, C, HW,
                                             &n->attr.batchnorm2d);
                st->bn_count[i] = (double)N * HW;
            } else {
                cl_batchnorm2d_forward_infer(y, x, gm, bt, rm, rv, N, C, HW,
                                             &n->attr.batchnorm2d);
            }
            break;
        }
        case CL_OP_RELU:
            cl_relu_forward(y, x, cl_graph_numel(g, n->out));
            break;
        case CL_OP_MAXPOOL2D:
            cl_maxpool2d_forward(y, st->idx[i], x, N, (int)xs->d[1],
                                 (int)xs->d[2], (int)xs->d[3],
                                 &n->attr.maxpool2d);
            break;
        case CL_OP_GLOBAL_AVGPOOL:
            cl_global_avgpool_forward(y, x, N, (int)xs->d[1],
                                      (int)(xs->d[2] * xs->d[3]));
            break;
        case CL_OP_LINEAR:
            cl_linear_forward(y, x, param_or_null(g, n, 0),
                              param_or_null(g, n, 1), N, &n->attr.linear);
            break;
        case CL_OP_ADD:
            cl_add_forward(y, x, st->act[n->in[1]], cl_graph_numel(g, n->out));
            break;
        case CL_OP_SOFTMAX_CE:
            if (st->have_labels || st->have_targets) {
                y[0] = cl_softmax_ce_forward(
                    st->probs, x, st->have_labels ? st->labels : NULL,
                    st->have_targets ? st->targets : NULL, N,
                    &n->attr.softmax_ce);
                st->loss_valid = 1;
                if (loss)
                    *loss = y[0];
            } else {
                y[0] = NAN;
            }
            break;
        default:
            return cl_error(CL_ERR_UNSUPPORTED, "%s: op %s has no kernel",
                            n->name, cl_op_name(n->op));
        }
    }
    if (training)
        cl_graph_count_batch(g);
    st->fwd_done = 1;
    st->fwd_training = training;
    return CL_OK;
}

/* Where the gradient of input tensor t goes: its own buffer the first time
 * (kernels overwrite), the scratch buffer when another consumer already
 * wrote it (then grad_end adds it in).  NULL when t needs no gradient (the
 * image batch). */
static float *grad_begin(ref_state *st, const cl_graph *g, int t, int *acc)
{
    *acc = 0;
    if (g->tensors[t].kind != CL_GT_ACT || !st->grad[t])
        return NULL;
    if (!st->written[t])
        return st->grad[t];
    *acc = 1;
    return st->scratch;
}

static void grad_end(ref_state *st, const cl_graph *g, int t, int acc)
{
    if (g->tensors[t].kind != CL_GT_ACT || !st->grad[t])
        return;
    if (acc) {
        float *d = st->grad[t];
        const float *s = st->scratch;
        const int64_t n = cl_graph_numel(g, t);
        for (int64_t i = 0; i < n; i++)
            d[i] += s[i];
    }
    st->written[t] = 1;
}

/* Backward of one node given dy (its output's gradient). */
static cl_status node_backward(cl_backend *be, int i, const float *dy)
{
    ref_state *st = be->priv;
    const cl_graph *g = be->g;
    const cl_node *n = &g->nodes[i];
    const int N = g->batch, xt = n->in[0];
    const cl_shape *xs = &g->tensors[xt].shape;
    const float *x = st->act[xt];
    int acc;
    float *dx = grad_begin(st, g, xt, &acc);
    float *dw = n->n_param > 0 ? cl_graph_grad(g, n->param[0]) : NULL;
    float *db = n->n_param > 1 ? cl_graph_grad(g, n->param[1]) : NULL;
    switch (n->op) {
    case CL_OP_CONV2D:
        cl_conv2d_backward(dx, dw, db, dy, x, param_or_null(g, n, 0), N,
                           (int)xs->d[2], (int)xs->d[3], &n->attr.conv2d);
        break;
    case CL_OP_BATCHNORM2D: {
        const int C = (int)xs->d[1], HW = (int)(xs->d[2] * xs->d[3]);
        const float *gm = cl_graph_param(g, n->param[0]);
        if (be->hooks.allreduce_sum) {
            cl_status s = ref_syncbn_backward(
                &be->hooks, st->stats, st->bn_count[i], dx, dw, db, dy, x,
                st->mean[i], st->invstd[i], gm, N, C, HW);
            if (s != CL_OK)
                return cl_error_wrap(s,
                                     "%s: SyncBatchNorm backward: ", n->name);
        } else {
            cl_batchnorm2d_backward(dx, dw, db, dy, x, st->mean[i],
                                    st->invstd[i], gm, N, C, HW);
        }
        break;
    }
    case CL_OP_RELU:
        if (dx)
            cl_relu_backward(dx, dy, st->act[n->out],
                             cl_graph_numel(g, n->out));
        break;
    case CL_OP_MAXPOOL2D:
        if (dx)
            cl_maxpool2d_backward(dx, dy, st->idx[i], x, N, (int)xs->d[1],
                                  (int)xs->d[2], (int)xs->d[3],
                                  &n->attr.maxpool2d);
        break;
    case CL_OP_GLOBAL_AVGPOOL:
        cl_global_avgpool_backward(dx, dy, N, (int)xs->d[1],
                                   (int)(xs->d[2] * xs->d[3]));
        break;
    case CL_OP_LINEAR:
        cl_linear_backward(dx, dw, db, dy, x, param_or_null(g, n, 0), N,
                           &n->attr.linear);
        break;
    case CL_OP_ADD: {
        /* Both inputs get dy: the first write copies, a later one adds. */
        cl_add_backward(dx, NULL, dy, cl_graph_numel(g, n->out));
        grad_end(st, g, xt, acc);
        const int bt = n->in[1];
        float *d2 = grad_begin(st, g, bt, &acc);
        cl_add_backward(d2, NULL, dy, cl_graph_numel(g, n->out));
        grad_end(st, g, bt, acc);
        return CL_OK;
    }
    default:
        return cl_error(CL_ERR_UNSUPPORTED, "%s: op %s has no backward",
                        n->name, cl_op_name(n->op));
    }
    if (dx)
        grad_end(st, g, xt, acc);
    return CL_OK;
}

static cl_status ref_backward(cl_backend *be)
{
    ref_state *st = be->priv;
    const cl_graph *g = be->g;
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
        if (n->op == CL_OP_SOFTMAX_CE) {
            int acc;
            float *dl = grad_begin(st, g, n->in[0], &acc);
            cl_softmax_ce_backward(dl, st->probs,
                                   st->have_labels ? st->labels : NULL,
                                   st->have_targets ? st->targets : NULL,
                                   g->batch, 1.0f, &n->attr.softmax_ce);
            if (dl)
                grad_end(st, g, n->in[0], acc);
            continue;
        }
        if (st->written[n->out]) {
            CL_TRY(node_backward(be, i, st->grad[n->out]));
        } else {
            /* The output does not reach the loss: zero param gradients. */
            for (int j = 0; j < n->n_param; j++)
                memset(cl_graph_grad(g, n->param[j]), 0,
                       (size_t)cl_graph_numel(g, n->param[j]) * sizeof(float));
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
