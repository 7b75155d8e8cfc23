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
                          const cl_backend_opts *o, int count_impls)
{
    *sub = (cl_backend){.g = g, .mode = CL_PLAN_TRAIN, .opts = *o};
    cl_status st = cl_dnnl_plan_begin(sub, g, CL_PLAN_TRAIN);
    if (st == CL_OK)
        st = cl_dnnl_choose_paths(sub->priv);
    dn_ctx *d = sub->priv;
    if (st == CL_OK && count_impls &&
        !(d->impl_count = cl_alloc_zero(sizeof(int) * 3 * (size_t)g->n_nodes,
                                        "onednn: tune")))
        st = CL_ERR_NOMEM;
    if (st == CL_OK)
        st = cl_dnnl_plan_build(sub->priv);
    if (st != CL_OK) {
        cl_dnnl_destroy(sub);
        return cl_error_wrap(st, "backend onednn: ");
    }
    return CL_OK;
}

/* Seconds per (node, part) of the last DN_TUNE_STEPS - 1 training steps of
 * g planned with paths (every conv's wanted way, and with four chars per
 * node its implementations) into t (3 per node); count, if given, gets
 * the number of implementations of each (node, part) (3 per node). */
static cl_status tune_time(cl_graph *g, const cl_backend_opts *base,
                           const char *paths, const float *x,
                           const int32_t *labels, double *t, int *count)
{
    cl_backend be;
    cl_backend_opts o = *base;
    o.autotune = 0;
    o.conv_paths = paths;
    CL_TRY(sub_plan(&be, g, &o, count != NULL));
    dn_ctx *d = be.priv;
    if (count)
        memcpy(count, d->impl_count, sizeof(int) * 3 * (size_t)g->n_nodes);
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

/* The most implementations of one conv primitive measured. */
enum { DN_TUNE_IMPLS = 8 };
/* Another implementation is taken for a shape only when it is this much
 * faster than oneDNN's first, and the whole choice only when the steps
 * planned with it are: on a 2-core machine two timed steps move by a few
 * per cent, and a choice made on noise cost 12% of the step (ResNet-50,
 * 32x32, f32, AVX2). */
#define DN_TUNE_MARGIN 0.95

static double total(const double *t, size_t n)
{
    double sum = 0;
    for (size_t a = 0; a < n; a++)
        sum += t[a];
    return sum;
}

/* d->impls by measurement, d->paths chosen: plans every conv with the k-th
 * of oneDNN's implementations of each of its primitives (k = 0, 1, ...
 * while some primitive has a k-th), times each (node, part) within whole
 * training steps, so that the reorders an implementation's layouts bring
 * count against it, adds the times of convs of one shape, and keeps the
 * fastest per shape and part where it beats the first by the margin.
 * The choice is then timed as a whole against oneDNN's first everywhere
 * (before and after it), and dropped unless its steps are faster by the
 * margin too. */
static cl_status tune_impls(dn_ctx *d, const float *x, const int32_t *labels)
{
    cl_graph *g = d->g;
    const size_t n = (size_t)g->n_nodes;
    cl_status st = CL_OK;
    char *choice = cl_alloc_zero(4 * n + 1, "onednn: tune");
    double *t = cl_alloc_zero(sizeof(double) * 3 * n, "onednn: tune");
    double *best = cl_alloc_zero(sizeof(double) * 3 * n, "onednn: tune");
    double *first = cl_alloc_zero(sizeof(double) * 3 * n, "onednn: tune");
    int *count = cl_alloc_zero(sizeof(int) * 3 * n, "onednn: tune");
    double base = 0;
    if (!choice || !t || !best || !first || !count) {
        st = CL_ERR_NOMEM;
        goto done;
    }
    int most = 1;
    for (int k = 0; k < most && k < DN_TUNE_IMPLS && st == CL_OK; k++) {
        for (size_t i = 0; i < n; i++) {
            int conv = g->nodes[i].op == CL_OP_CONV2D;
            choice[4 * i] = d->paths[i];
            memset(choice + 4 * i + 1, conv ? '0' + k : '0', 3);
        }
        st = tune_time(g, &d->be->opts, choice, x, labels, t,
                       k == 0 ? count : NULL);
        for (size_t a = 0; k == 0 && a < 3 * n; a++)
            most = count[a] > most ? count[a] : most;
        if (k == 0)
            base = total(t, 3 * n);
        for (size_t a = 0; st == CL_OK && a < 3 * n; a++) {
            int i = (int)(a / 3), part = (int)(a % 3);
            if (g->nodes[i].op != CL_OP_CONV2D || k >= count[a])
                continue;
            double sum = 0;
            for (int j = 0; j < (int)n; j++)
                if (g->nodes[j].op == CL_OP_CONV2D && same_conv_shape(g, i, j))
                    sum += t[3 * j + part];
            if (k == 0)
                first[a] = best[a] = sum;
            else if (sum < best[a] && sum < DN_TUNE_MARGIN * first[a]) {
                best[a] = sum;
                d->impls[a] = (char)('0' + k);
            }
        }
    }
    int any = 0;
    for (size_t a = 0; a < 3 * n; a++)
        any |= d->impls[a] != '0';
    if (st == CL_OK && any) {
        /* The choice against the first everywhere, timed after it too. */
        for (size_t i = 0; i < n; i++) {
            choice[4 * i] = d->paths[i];
            memcpy(choice + 4 * i + 1, d->impls + 3 * i, 3);
        }
        st = tune_time(g, &d->be->opts, choice, x, labels, t, NULL);
        double chosen = total(t, 3 * n);
        for (size_t i = 0; st == CL_OK && i < n; i++)
            memset(choice + 4 * i + 1, '0', 3);
        if (st == CL_OK)
            st = tune_time(g, &d->be->opts, choice, x, labels, t, NULL);
        double again = total(t, 3 * n);
        base = again < base ? again : base;
        if (st == CL_OK && !(chosen < DN_TUNE_MARGIN * base))
            memset(d->impls, '0', 3 * n);
    }
    for (size_t a = 0; st == CL_OK && a < 3 * n; a++)
        if (d->impls[a] != '0') {
            int i = (int)(a / 3), lead = 1; /* the shape's first conv */
            for (int j = 0; j < i; j++)
                if (g->nodes[j].op == CL_OP_CONV2D && same_conv_shape(g, i, j))
                    lead = 0;
            d->tune_impls += lead;
        }
done:
    cl_free(choice);
    cl_free(t);
    cl_free(best);
    cl_free(first);
    cl_free(count);
    return st;
}

/* Four characters per node: a path digit 0-3, then three implementation
 * digits. */
static int choice_ok(const char *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strchr("0123", c[4 * i]) || c[4 * i] == '\0' ||
            strspn(c + 4 * i + 1, "0123456789") < 3)
            return 0;
    return 1;
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
    memcpy(d->paths, none, (size_t)n);
    cl_rng r;
    cl_rng_init(&r, 1, 0);
    for (size_t k = 0; k < nx; k++)
        x[k] = cl_rng_uniform(&r) - 0.5f;
    for (int k = 0; k < g->batch; k++)
        labels[k] = g->num_classes > 0 ? k % g->num_classes : 0;
    memcpy(buf, g->buffers, sizeof(float) * g->n_buffer_floats);
    if (!any) /* no second way: the implementations only */
        goto impls;
    st = tune_time(g, &d->be->opts, all, x, labels, t, NULL);
    if (st == CL_OK)
        st = tune_time(g, &d->be->opts, none, x, labels, t + 3 * (size_t)n,
                       NULL);
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
    {
        /* The mix as a whole against every way one way and every way the
         * other: the per-shape sums ignore how one conv's choice changes
         * its neighbours' layouts, and two steps' noise. */
        const double t_all = total(t, 3 * (size_t)n);
        const double t_none = total(t + 3 * (size_t)n, 3 * (size_t)n);
        const double t_best = t_all < t_none ? t_all : t_none;
        if (d->tune_rewritten > 0 && d->tune_rewritten < d->tune_measured)
            st = tune_time(g, &d->be->opts, d->paths, x, labels, t, NULL);
        else
            goto impls; /* all one way: measured as such already */
        if (st != CL_OK) {
            st = cl_error_wrap(st, "measuring the conv backward paths: ");
            goto done;
        }
        if (!(total(t, 3 * (size_t)n) < DN_TUNE_MARGIN * t_best)) {
            const char *way = t_all < t_none ? all : none;
            memcpy(d->paths, way, (size_t)n);
            d->tune_rewritten = 0;
            for (int i = 0; i < n; i++)
                d->tune_rewritten +=
                    ((way[i] - '0') & 1) + ((way[i] - '0') >> 1);
        }
    }
impls:
    st = tune_impls(d, x, labels);
    memcpy(g->buffers, buf, sizeof(float) * g->n_buffer_floats);
    if (st != CL_OK)
        st = cl_error_wrap(st, "measuring oneDNN's conv implementations: ");
done:
    cl_free(all);
    cl_free(none);
    cl_free(t);
    cl_free(x);
    cl_free(labels);
    cl_free(buf);
    return st;
}

/* d->paths and d->impls before planning: the caller's, measured, or the
 * thresholds with oneDNN's first implementations.  The caller's string
 * is cl_dnnl_conv_paths' (four chars per node), or one path digit per
 * node as state files written before the implementations were chosen
 * hold. */
cl_status cl_dnnl_choose_paths(dn_ctx *d)
{
    cl_graph *g = d->g;
    const cl_backend_opts *o = &d->be->opts;
    const size_t n = (size_t)g->n_nodes;
    d->paths = cl_alloc_zero(n + 1, "onednn: paths");
    d->impls = cl_alloc_zero(3 * n + 1, "onednn: conv implementations");
    d->impl_name = cl_alloc_zero(3 * n * sizeof *d->impl_name,
                                 "onednn: conv implementations");
    if (!d->paths || !d->impls || !d->impl_name)
        return CL_ERR_NOMEM;
    memset(d->impls, '0', 3 * n);
    if (o->conv_paths) {
        size_t len = strlen(o->conv_paths);
        int old = len == n && strspn(o->conv_paths, "0123") == len;
        if (!old && (len != 4 * n || !choice_ok(o->conv_paths, n)))
            return cl_error(CL_ERR_ARG,
                            "onednn: conv paths '%.40s' do not fit this "
                            "graph (%d nodes: one of 0-3 each, or four "
                            "characters each as a plan gives them)",
                            o->conv_paths, g->n_nodes);
        for (size_t i = 0; i < n; i++) {
            d->paths[i] = o->conv_paths[old ? i : 4 * i];
            if (!old)
                memcpy(d->impls + 3 * i, o->conv_paths + 4 * i + 1, 3);
        }
        return CL_OK;
    }
    memset(d->paths, '0', n);
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

cl_status cl_dnnl_choice_done(dn_ctx *d)
{
    const size_t n = (size_t)d->g->n_nodes;
    if (!d->paths)
        return CL_OK;
    if (!(d->choice = cl_alloc_zero(4 * n + 1, "onednn: conv choice")))
        return CL_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        d->choice[4 * i] = d->paths[i];
        memcpy(d->choice + 4 * i + 1, d->impls + 3 * i, 3);
    }
    return CL_OK;
}
