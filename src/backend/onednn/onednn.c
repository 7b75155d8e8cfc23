/* The oneDNN backend's entry point and vtable.  cl_backend_create (the
 * generic layer) calls the vtable's plan, which makes the plan in three
 * steps: the context (plan.c), the way of each conv's backward (tune.c,
 * which may measure both ways on plans of its own), and the steps
 * (plan.c).  The other entries run the plan (exec.c) and free it
 * (plan.c); stats and the cl_dnnl_* functions of onednn_info.h say what
 * the plan chose and what its steps cost.  Nothing in the backend calls
 * this file. */
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/onednn/internal.h"
#include "backend/onednn_info.h"
#include "core/error.h"
#include "core/mem.h"

static cl_status dn_plan(cl_backend *be, cl_graph *g, cl_plan_mode mode)
{
    CL_TRY(cl_dnnl_plan_begin(be, g, mode));
    CL_TRY(cl_dnnl_choose_paths(be->priv));
    CL_TRY(cl_dnnl_plan_build(be->priv));
    return cl_dnnl_choice_done(be->priv);
}

static void dn_stats(const cl_backend *be, cl_backend_stats *out)
{
    const dn_ctx *d = be->priv;
    if (!d)
        return;
    out->conv_paths = d->choice;
    out->tune_measured = d->tune_measured;
    out->tune_rewritten = d->tune_rewritten;
    out->tune_impls = d->tune_impls;
    out->fallback_ops = d->fallback_ops;
}

const cl_backend_vtbl cl_backend_onednn_vtbl = {
    .name = "onednn",
    .supports = cl_dnnl_supports,
    .plan = dn_plan,
    .set_input = cl_dnnl_set_input,
    .forward = cl_dnnl_forward,
    .backward = cl_dnnl_backward,
    .read = cl_dnnl_read,
    .sync_params = cl_dnnl_sync_params,
    .stats = dn_stats,
    .destroy = cl_dnnl_destroy,
};

/* ---- what a plan reports (onednn_info.h) -----------------------------------
 */

int cl_dnnl_profile_start(cl_backend *be)
{
    dn_ctx *d = be->priv;
    if (be->vt != &cl_backend_onednn_vtbl || !d)
        return -1;
    if (!d->sprof)
        d->sprof =
            cl_alloc(sizeof *d->sprof * DN_PROF_KINDS, "onednn: profile");
    d->n_sprof = 0;
    return d->sprof ? 0 : -1;
}

static int by_seconds_desc(const void *a, const void *b)
{
    const double x = ((const cl_dnnl_prof_row *)a)->seconds;
    const double y = ((const cl_dnnl_prof_row *)b)->seconds;
    return (x < y) - (x > y);
}

int cl_dnnl_profile_rows(const cl_backend *be, cl_dnnl_prof_row *rows, int cap)
{
    const dn_ctx *d = be->priv;
    if (be->vt != &cl_backend_onednn_vtbl || !d || !d->sprof)
        return 0;
    cl_dnnl_prof_row all[DN_PROF_KINDS];
    memcpy(all, d->sprof, sizeof *all * (size_t)d->n_sprof);
    qsort(all, (size_t)d->n_sprof, sizeof *all, by_seconds_desc);
    const int n = d->n_sprof < cap ? d->n_sprof : cap;
    memcpy(rows, all, sizeof *rows * (size_t)n);
    return n;
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
    return d->choice;
}

void cl_dnnl_conv_impls(const cl_backend *be, char *buf, size_t cap)
{
    const dn_ctx *d = be->priv;
    static const char *const part[3] = {"forward", "weight gradient",
                                        "data gradient"};
    size_t len = 0;
    if (cap == 0)
        return;
    buf[0] = '\0';
    if (be->vt != &cl_backend_onednn_vtbl || !d || !d->impl_name)
        return;
    const int n = d->g->n_nodes;
    for (int p = 0; p < 3; p++) {
        int any = 0;
        for (int i = 0; i < n; i++) {
            const char *name = d->impl_name[3 * i + p];
            int seen = 0, count = 0;
            if (!name[0])
                continue;
            for (int j = 0; j < i; j++)
                seen |= strcmp(d->impl_name[3 * j + p], name) == 0;
            if (seen)
                continue;
            for (int j = i; j < n; j++)
                count += strcmp(d->impl_name[3 * j + p], name) == 0;
            int k =
                any ? snprintf(buf + len, cap - len, ", %s x%d", name, count)
                    : snprintf(buf + len, cap - len, "%s%s %s x%d",
                               len ? "; " : "", part[p], name, count);
            if (k < 0 || (size_t)k >= cap - len)
                return;
            len += (size_t)k;
            any = 1;
        }
    }
}

void cl_dnnl_tune_counts(const cl_backend *be, int *measured, int *rewritten)
{
    const dn_ctx *d = be->priv;
    int ok = be->vt == &cl_backend_onednn_vtbl && d;
    *measured = ok ? d->tune_measured : 0;
    *rewritten = ok ? d->tune_rewritten : 0;
}
