/* The oneDNN backend's choice of each conv's backward path: given by the
 * caller, measured at plan time (autotune), or by the shape thresholds.
 * The vtable's plan (onednn.c) calls it between the two halves of plan.c;
 * to measure, it makes and runs plans of its own with plan.c and exec.c,
 * and asks conv.c which convs have a second way. */
#include <string.h>

#include "backend/onednn/internal.h"
#include "core/error.h"
#include "core/mem.h"
#include "core/rng.h"

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

/* A training plan of g on sub with the given options, as the vtable's
 * plan makes one (onednn.c), but not through cl_backend_create: the
 * measuring plans are the backend's own, made and run by plan.c and
 * exec.c directly. */
static cl_status sub_plan(cl_backend *sub, cl_graph *g,
                          const cl_backend_opts *o)
{
    *sub = (cl_backend){.g = g, .mode = CL_PLAN_TRAIN, .opts = *o};
    cl_status st = cl_dnnl_plan_begin(sub, g, CL_PLAN_TRAIN);
    if (st == CL_OK)
        st = cl_dnnl_choose_paths(sub->priv);
    if (st == CL_OK)
        st = cl_dnnl_plan_build(sub->priv);
    if (st != CL_OK) {
        cl_dnnl_destroy(sub);
        return cl_error_wrap(st, "backend onednn: ");
    }
    return CL_OK;
}

/* Seconds per (node, part) of the last DN_TUNE_STEPS - 1 training steps of
 * g planned with paths (every conv's wanted way) into t (3 per node). */
static cl_status tune_time(cl_graph *g, const cl_backend_opts *base,
                           const char *paths, const float *x,
                           const int32_t *labels, double *t)
{
    cl_backend be;
    cl_backend_opts o = *base;
    o.autotune = 0;
    o.conv_paths = paths;
    CL_TRY(sub_plan(&be, g, &o));
    dn_ctx *d = be.priv;
    cl_status st = CL_OK;
    d->prof = t;
    for (int k = 0; k < DN_TUNE_STEPS && st == CL_OK; k++) {
        if (k == 1) /* the first step warms caches and pages */
            memset(t, 0, sizeof *t * 3 * (size_t)g->n_nodes);
        st = cl_dnnl_set_input(&be, x, labels, NULL);
        if (st == CL_OK)
            st = cl_dnnl_forward(&be, 1, NULL);
        if (st == CL_OK)
            st = cl_dnnl_backward(&be);
    }
    d->prof = NULL;
    cl_dnnl_destroy(&be);
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
        int want = (cl_dnnl_wgrad_matmul_ok(g, i) ? 1 : 0) |
                   (cl_dnnl_dgrad_grid_ok(g, i) ? 2 : 0);
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
cl_status cl_dnnl_choose_paths(dn_ctx *d)
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
        int want = cl_dnnl_wgrad_matmul_ok(g, i) &&
                   y->d[2] * y->d[3] <= DN_WGRAD_MATMUL_MAX_HW;
        want |= cl_dnnl_dgrad_grid_ok(g, i) ? 2 : 0;
        d->paths[i] = (char)('0' + want);
    }
    return CL_OK;
}
