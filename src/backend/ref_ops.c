/* The reference kernels at node level (ref_ops.h): each op's forward and
 * backward on plain buffers, SyncBatchNorm through the allreduce hook, and
 * the table indexed by op that ops.def generates. */
#include <math.h>
#include <string.h>

#include "backend/ref_ops.h"
#include "core/error.h"
#include "core/mem.h"

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

/* The input's shape (the first input's when there are several). */
static const cl_shape *in_shape(const cl_ref_args *a)
{
    return &a->g->tensors[a->n->in[0]].shape;
}

static float *grad_or_null(const cl_graph *g, const cl_node *n, int j)
{
    return j < n->n_param ? cl_graph_grad(g, n->param[j]) : NULL;
}

static cl_status ref_conv2d_forward(const cl_ref_args *a)
{
    const cl_shape *xs = in_shape(a);
    cl_conv2d_forward(a->y, a->x[0], param_or_null(a->g, a->n, 0),
                      param_or_null(a->g, a->n, 1), (int)xs->d[0],
                      (int)xs->d[2], (int)xs->d[3], &a->n->attr.conv2d);
    return CL_OK;
}

static cl_status ref_conv2d_backward(const cl_ref_args *a)
{
    const cl_shape *xs = in_shape(a);
    cl_conv2d_backward(a->dx[0], grad_or_null(a->g, a->n, 0),
                       grad_or_null(a->g, a->n, 1), a->dy, a->x[0],
                       param_or_null(a->g, a->n, 0), (int)xs->d[0],
                       (int)xs->d[2], (int)xs->d[3], &a->n->attr.conv2d);
    return CL_OK;
}

static int syncs(const cl_ref_args *a)
{
    return a->hooks && a->hooks->allreduce_sum;
}

static cl_status ref_batchnorm2d_forward(const cl_ref_args *a)
{
    cl_graph *g = a->g;
    const cl_node *n = a->n;
    const cl_shape *xs = in_shape(a);
    const int N = (int)xs->d[0], C = (int)xs->d[1];
    const int HW = (int)(xs->d[2] * xs->d[3]);
    const float *gm = cl_graph_param(g, n->param[0]);
    const float *bt = cl_graph_param(g, n->param[1]);
    float *rm = cl_graph_buffer(g, n->buf[0]);
    float *rv = cl_graph_buffer(g, n->buf[1]);
    cl_ref_saved *sv = a->sv;
    if (a->training && syncs(a)) {
        cl_status s = ref_syncbn_forward(
            a->hooks, a->sums, &sv->count, a->y, sv->mean, sv->invstd, rm, rv,
            a->x[0], gm, bt, N, C, HW, &n->attr.batchnorm2d);
        if (s != CL_OK)
            return cl_error_wrap(s, "%s: SyncBatchNorm: ", n->name);
    } else if (a->training) {
        cl_batchnorm2d_forward_train(a->y, sv->mean, sv->invstd, rm, rv,
                                     a->x[0], gm, bt, N, C, HW,
                                     &n->attr.batchnorm2d);
        sv->count = (double)N * HW;
    } else {
        cl_batchnorm2d_forward_infer(a->y, a->x[0], gm, bt, rm, rv, N, C, HW,
                                     &n->attr.batchnorm2d);
    }
    return CL_OK;
}

static cl_status ref_batchnorm2d_backward(const cl_ref_args *a)
{
    const cl_graph *g = a->g;
    const cl_node *n = a->n;
    const cl_shape *xs = in_shape(a);
    const int N = (int)xs->d[0], C = (int)xs->d[1];
    const int HW = (int)(xs->d[2] * xs->d[3]);
    const float *gm = cl_graph_param(g, n->param[0]);
    float *dw = grad_or_null(g, n, 0), *db = grad_or_null(g, n, 1);
    const cl_ref_saved *sv = a->sv;
    if (syncs(a)) {
        cl_status s = ref_syncbn_backward(a->hooks, a->sums, sv->count,
                                          a->dx[0], dw, db, a->dy, a->x[0],
                                          sv->mean, sv->invstd, gm, N, C, HW);
        if (s != CL_OK)
            return cl_error_wrap(s, "%s: SyncBatchNorm backward: ", n->name);
    } else {
        cl_batchnorm2d_backward(a->dx[0], dw, db, a->dy, a->x[0], sv->mean,
                                sv->invstd, gm, N, C, HW);
    }
    return CL_OK;
}

static cl_status ref_relu_forward(const cl_ref_args *a)
{
    cl_relu_forward(a->y, a->x[0], cl_graph_numel(a->g, a->n->out));
    return CL_OK;
}

static cl_status ref_relu_backward(const cl_ref_args *a)
{
    if (a->dx[0])
        cl_relu_backward(a->dx[0], a->dy, a->y,
                         cl_graph_numel(a->g, a->n->out));
    return CL_OK;
}

static cl_status ref_maxpool2d_forward(const cl_ref_args *a)
{
    const cl_shape *xs = in_shape(a);
    cl_maxpool2d_forward(a->y, a->sv->idx, a->x[0], (int)xs->d[0],
                         (int)xs->d[1], (int)xs->d[2], (int)xs->d[3],
                         &a->n->attr.maxpool2d);
    return CL_OK;
}

static cl_status ref_maxpool2d_backward(const cl_ref_args *a)
{
    const cl_shape *xs = in_shape(a);
    if (a->dx[0])
        cl_maxpool2d_backward(a->dx[0], a->dy, a->sv->idx, a->x[0],
                              (int)xs->d[0], (int)xs->d[1], (int)xs->d[2],
                              (int)xs->d[3], &a->n->attr.maxpool2d);
    return CL_OK;
}

static cl_status ref_global_avgpool_forward(const cl_ref_args *a)
{
    const cl_shape *xs = in_shape(a);
    cl_global_avgpool_forward(a->y, a->x[0], (int)xs->d[0], (int)xs->d[1],
                              (int)(xs->d[2] * xs->d[3]));
    return CL_OK;
}

static cl_status ref_global_avgpool_backward(const cl_ref_args *a)
{
    const cl_shape *xs = in_shape(a);
    if (a->dx[0])
        cl_global_avgpool_backward(a->dx[0], a->dy, (int)xs->d[0],
                                   (int)xs->d[1], (int)(xs->d[2] * xs->d[3]));
    return CL_OK;
}

/* The rows of a linear node's input: the product of all but its last
 * dimension (linear applies over the last one). */
static int rows_of(const cl_shape *s)
{
    int64_t r = 1;
    for (int k = 0; k < s->ndim - 1; k++)
        r *= s->d[k];
    return (int)r;
}

static cl_status ref_linear_forward(const cl_ref_args *a)
{
    cl_linear_forward(a->y, a->x[0], param_or_null(a->g, a->n, 0),
                      param_or_null(a->g, a->n, 1), rows_of(in_shape(a)),
                      &a->n->attr.linear);
    return CL_OK;
}

static cl_status ref_linear_backward(const cl_ref_args *a)
{
    cl_linear_backward(a->dx[0], grad_or_null(a->g, a->n, 0),
                       grad_or_null(a->g, a->n, 1), a->dy, a->x[0],
                       param_or_null(a->g, a->n, 0), rows_of(in_shape(a)),
                       &a->n->attr.linear);
    return CL_OK;
}

static cl_status ref_add_forward(const cl_ref_args *a)
{
    cl_add_forward(a->y, a->x[0], a->x[1], cl_graph_numel(a->g, a->n->out));
    return CL_OK;
}

/* Both inputs get dy (add(t, t) gets it twice: the caller sums). */
static cl_status ref_add_backward(const cl_ref_args *a)
{
    cl_add_backward(a->dx[0], a->dx[1], a->dy, cl_graph_numel(a->g, a->n->out));
    return CL_OK;
}

static cl_matmul_dims matmul_dims(const cl_ref_args *a)
{
    const cl_shape *b = &a->g->tensors[a->n->in[1]].shape;
    return cl_matmul_dims_of(&a->n->attr.matmul, in_shape(a), b);
}

static cl_status ref_matmul_forward(const cl_ref_args *a)
{
    cl_matmul_dims d = matmul_dims(a);
    cl_matmul_forward(a->y, a->x[0], a->x[1], &d, &a->n->attr.matmul);
    return CL_OK;
}

static cl_status ref_matmul_backward(const cl_ref_args *a)
{
    cl_matmul_dims d = matmul_dims(a);
    cl_matmul_backward(a->dx[0], a->dx[1], a->dy, a->x[0], a->x[1], &d,
                       &a->n->attr.matmul);
    return CL_OK;
}

/* The index comes from a checkpoint or a model's builder: checked at
 * every forward, an error naming the node rather than a wild read. */
static cl_status ref_table_gather_forward(const cl_ref_args *a)
{
    const cl_node *n = a->n;
    const cl_table_gather_attr *at = &n->attr.table_gather;
    const int64_t *ix = cl_graph_buffer_i64(a->g, n->buf[0]);
    const int64_t M = cl_graph_numel(a->g, n->buf[0]);
    cl_status s = cl_table_gather_check(ix, M, at->rows);
    if (s != CL_OK)
        return cl_error_wrap(s, "%s: ", n->name);
    cl_table_gather_forward(a->y, cl_graph_param(a->g, n->param[0]), ix, M,
                            at->cols);
    return CL_OK;
}

static cl_status ref_table_gather_backward(const cl_ref_args *a)
{
    const cl_node *n = a->n;
    const cl_table_gather_attr *at = &n->attr.table_gather;
    cl_table_gather_backward(cl_graph_grad(a->g, n->param[0]), a->dy,
                             cl_graph_buffer_i64(a->g, n->buf[0]),
                             cl_graph_numel(a->g, n->buf[0]), at->rows,
                             at->cols);
    return CL_OK;
}

/* The index comes from the model after finalize: checked at every
 * forward, an error naming the node rather than a wild read. */
static cl_status ref_row_gather_forward(const cl_ref_args *a)
{
    const cl_node *n = a->n;
    const int cols = n->attr.row_gather.cols;
    const int64_t *ix = cl_graph_buffer_i64(a->g, n->buf[0]);
    const int64_t M = cl_graph_numel(a->g, n->buf[0]);
    const int64_t R = cl_graph_numel(a->g, n->in[0]) / cols;
    cl_status s = cl_row_gather_check(ix, M, R);
    if (s != CL_OK)
        return cl_error_wrap(s, "%s: ", n->name);
    cl_row_gather_forward(a->y, a->x[0], ix, M, cols);
    return CL_OK;
}

static cl_status ref_row_gather_backward(const cl_ref_args *a)
{
    const cl_node *n = a->n;
    const int cols = n->attr.row_gather.cols;
    if (a->dx[0])
        cl_row_gather_backward(a->dx[0], a->dy,
                               cl_graph_buffer_i64(a->g, n->buf[0]),
                               cl_graph_numel(a->g, n->buf[0]),
                               cl_graph_numel(a->g, n->in[0]) / cols, cols);
    return CL_OK;
}

/* Samples and elements per sample of a droppath node's input. */
static void droppath_sizes(const cl_ref_args *a, int *N, int64_t *per)
{
    *N = (int)in_shape(a)->d[0];
    *per = cl_graph_numel(a->g, a->n->in[0]) / *N;
}

/* The mask is drawn again in backward from the same key (the step does
 * not change between a training forward and its backward), so nothing is
 * saved. */
static cl_status ref_droppath_forward(const cl_ref_args *a)
{
    const float p = a->n->attr.droppath.p;
    int N;
    int64_t per;
    droppath_sizes(a, &N, &per);
    if (!a->training || p == 0.0f) {
        memcpy(a->y, a->x[0], (size_t)(N * per) * sizeof *a->y);
        return CL_OK;
    }
    cl_rng r;
    cl_ref_rng(a, &r);
    cl_droppath_forward(a->y, a->x[0], N, per, p, &r);
    return CL_OK;
}

static cl_status ref_droppath_backward(const cl_ref_args *a)
{
    const float p = a->n->attr.droppath.p;
    int N;
    int64_t per;
    if (!a->dx[0])
        return CL_OK;
    droppath_sizes(a, &N, &per);
    if (p == 0.0f) {
        memcpy(a->dx[0], a->dy, (size_t)(N * per) * sizeof *a->dy);
        return CL_OK;
    }
    cl_rng r;
    cl_ref_rng(a, &r);
    cl_droppath_backward(a->dx[0], a->dy, N, per, p, &r);
    return CL_OK;
}

static cl_status ref_token_meanpool_forward(const cl_ref_args *a)
{
    const cl_shape *xs = in_shape(a);
    cl_token_meanpool_forward(a->y, a->x[0], (int)xs->d[0], (int)xs->d[1],
                              (int)xs->d[2]);
    return CL_OK;
}

static cl_status ref_token_meanpool_backward(const cl_ref_args *a)
{
    const cl_shape *xs = in_shape(a);
    if (a->dx[0])
        cl_token_meanpool_backward(a->dx[0], a->dy, (int)xs->d[0],
                                   (int)xs->d[1], (int)xs->d[2]);
    return CL_OK;
}

static cl_status ref_softmax_ce_forward(const cl_ref_args *a)
{
    if (!a->labels && !a->targets) {
        a->y[0] = NAN;
        return CL_OK;
    }
    a->y[0] =
        cl_softmax_ce_forward(a->sv->probs, a->x[0], a->labels, a->targets,
                              (int)in_shape(a)->d[0], &a->n->attr.softmax_ce);
    return CL_OK;
}

static cl_status ref_softmax_ce_backward(const cl_ref_args *a)
{
    if (a->dx[0])
        cl_softmax_ce_backward(a->dx[0], a->sv->probs, a->labels, a->targets,
                               (int)in_shape(a)->d[0], 1.0f,
                               &a->n->attr.softmax_ce);
    return CL_OK;
}

static cl_status ref_layernorm_forward(const cl_ref_args *a)
{
    const cl_node *n = a->n;
    const cl_layernorm_attr *at = &n->attr.layernorm;
    const int64_t rows = cl_graph_numel(a->g, n->in[0]) / at->features;
    cl_layernorm_forward(a->y, a->sv->mean, a->sv->invstd, a->x[0],
                         cl_graph_param(a->g, n->param[0]),
                         cl_graph_param(a->g, n->param[1]), rows, at->features,
                         at->eps);
    return CL_OK;
}

static cl_status ref_layernorm_backward(const cl_ref_args *a)
{
    const cl_node *n = a->n;
    const cl_layernorm_attr *at = &n->attr.layernorm;
    const int64_t rows = cl_graph_numel(a->g, n->in[0]) / at->features;
    cl_layernorm_backward(a->dx[0], grad_or_null(a->g, n, 0),
                          grad_or_null(a->g, n, 1), a->dy, a->x[0], a->sv->mean,
                          a->sv->invstd, cl_graph_param(a->g, n->param[0]),
                          rows, at->features);
    return CL_OK;
}

static cl_status ref_gelu_forward(const cl_ref_args *a)
{
    cl_gelu_forward(a->y, a->x[0], cl_graph_numel(a->g, a->n->out));
    return CL_OK;
}

static cl_status ref_gelu_backward(const cl_ref_args *a)
{
    if (a->dx[0])
        cl_gelu_backward(a->dx[0], a->dy, a->x[0],
                         cl_graph_numel(a->g, a->n->out));
    return CL_OK;
}

/* The bias is in[1] when the node has one, the mask buf[0]. */
static cl_softmax_dims softmax_dims(const cl_ref_args *a)
{
    const cl_node *n = a->n;
    const cl_graph *g = a->g;
    return cl_softmax_dims_of(
        in_shape(a), n->n_in > 1 ? &g->tensors[n->in[1]].shape : NULL,
        n->n_buf > 0 ? &g->tensors[n->buf[0]].shape : NULL);
}

static cl_status ref_softmax_forward(const cl_ref_args *a)
{
    const cl_node *n = a->n;
    cl_softmax_dims d = softmax_dims(a);
    cl_softmax_forward(a->y, a->x[0], n->n_in > 1 ? a->x[1] : NULL,
                       n->n_buf > 0 ? cl_graph_buffer(a->g, n->buf[0]) : NULL,
                       &d);
    return CL_OK;
}

static cl_status ref_softmax_backward(const cl_ref_args *a)
{
    cl_softmax_dims d = softmax_dims(a);
    cl_softmax_backward(a->dx[0], a->n->n_in > 1 ? a->dx[1] : NULL, a->dy, a->y,
                        &d);
    return CL_OK;
}

void cl_ref_args_key(cl_ref_args *a, const cl_backend *be, int node)
{
    a->rng_seed = be->rng_seed;
    a->rng_step = be->rng_step;
    a->node = node;
}

void cl_ref_rng(const cl_ref_args *a, cl_rng *r)
{
    cl_rng_init_node(r, a->rng_seed, a->rng_step, (uint64_t)a->node);
}

const cl_ref_kernel cl_ref_kernels[CL_OP_COUNT] = {
#define CL_OP(NAME, stem, grads)                                               \
    [CL_OP_##NAME] = {ref_##stem##_forward, ref_##stem##_backward},
#include "ops/ops.def"
#undef CL_OP
};

/* ---- saved state ----------------------------------------------------------
 */

static void *alloc_n(size_t n, size_t elem, const char *what)
{
    size_t bytes;
    if (cl_mul_size(n, elem, &bytes, what) != CL_OK)
        return NULL;
    return cl_alloc_zero(bytes ? bytes : 1, what);
}

typedef cl_status (*saved_fn)(cl_ref_saved *sv, const cl_graph *g,
                              const cl_node *n, int train, size_t *sums);

static cl_status batchnorm2d_saved(cl_ref_saved *sv, const cl_graph *g,
                                   const cl_node *n, int train, size_t *sums)
{
    (void)g;
    (void)train; /* an evaluation plan may still run a training forward */
    size_t c = (size_t)n->attr.batchnorm2d.channels;
    sv->mean = alloc_n(c, sizeof(float), n->name);
    sv->invstd = alloc_n(c, sizeof(float), n->name);
    *sums = 2 * c + 1;
    return sv->mean && sv->invstd ? CL_OK : CL_ERR_NOMEM;
}

static cl_status maxpool2d_saved(cl_ref_saved *sv, const cl_graph *g,
                                 const cl_node *n, int train, size_t *sums)
{
    (void)sums;
    if (!train)
        return CL_OK; /* backward would recompute the argmax */
    sv->idx =
        alloc_n((size_t)cl_graph_numel(g, n->out), sizeof(int32_t), n->name);
    return sv->idx ? CL_OK : CL_ERR_NOMEM;
}

static cl_status softmax_ce_saved(cl_ref_saved *sv, const cl_graph *g,
                                  const cl_node *n, int train, size_t *sums)
{
    (void)train;
    (void)sums;
    sv->probs =
        alloc_n((size_t)cl_graph_numel(g, n->in[0]), sizeof(float), n->name);
    return sv->probs ? CL_OK : CL_ERR_NOMEM;
}

/* mean and rstd per row (in the mean / invstd fields). */
static cl_status layernorm_saved(cl_ref_saved *sv, const cl_graph *g,
                                 const cl_node *n, int train, size_t *sums)
{
    (void)train;
    (void)sums;
    size_t rows =
        (size_t)(cl_graph_numel(g, n->in[0]) / n->attr.layernorm.features);
    sv->mean = alloc_n(rows, sizeof(float), n->name);
    sv->invstd = alloc_n(rows, sizeof(float), n->name);
    return sv->mean && sv->invstd ? CL_OK : CL_ERR_NOMEM;
}

/* Per op; NULL for the ops that save nothing. */
static const saved_fn op_saved[CL_OP_COUNT] = {
    [CL_OP_BATCHNORM2D] = batchnorm2d_saved,
    [CL_OP_MAXPOOL2D] = maxpool2d_saved,
    [CL_OP_SOFTMAX_CE] = softmax_ce_saved,
    [CL_OP_LAYERNORM] = layernorm_saved,
};
CL_OP_TABLE_CHECK(op_saved, 16);

cl_status cl_ref_saved_alloc(cl_ref_saved *sv, const cl_graph *g,
                             const cl_node *n, int train, size_t *sums)
{
    memset(sv, 0, sizeof *sv);
    *sums = 0;
    return op_saved[n->op] ? op_saved[n->op](sv, g, n, train, sums) : CL_OK;
}

void cl_ref_saved_free(cl_ref_saved *sv)
{
    cl_free(sv->mean);
    cl_free(sv->invstd);
    cl_free(sv->idx);
    cl_free(sv->probs);
    memset(sv, 0, sizeof *sv);
}
