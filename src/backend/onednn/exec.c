/* The oneDNN backend's execution: the steps of a plan run in order (oneDNN
 * primitives, the backend's own loops, the gradient-ready hook), the
 * backend's vtable, and what a plan reports about itself. */
#include <dnnl.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "backend/onednn/internal.h"
#include "backend/onednn_info.h"
#include "core/error.h"
#include "core/mem.h"
#include "core/timer.h"

enum { DN_PROF_KINDS = 256 };

/* Adds t seconds to the row of step s's kind (its name and op). */
static void profile_add(dn_ctx *d, const dn_step *s, double t)
{
    const int op = s->node >= 0 ? (int)d->g->nodes[s->node].op : -1;
    for (int k = 0; k < d->n_sprof; k++) {
        cl_dnnl_prof_row *r = &d->sprof[k];
        if (r->op == op && strcmp(r->what, s->what) == 0) {
            r->seconds += t;
            r->runs++;
            return;
        }
    }
    if (d->n_sprof < DN_PROF_KINDS)
        d->sprof[d->n_sprof++] = (cl_dnnl_prof_row){s->what, op, t, 1};
}

cl_status cl_dnnl_run_list(dn_ctx *d, dn_list *l)
{
    cl_status st = CL_OK;
    cl_backend *be = d->be;
    for (int k = 0; k < l->n; k++) {
        dn_step *s = &l->s[k];
        double t0 = d->prof && s->part ? cl_time_now() : 0.0;
        const double ts = d->sprof ? cl_time_now() : 0.0;
        switch (s->kind) {
        case STEP_PRIM:
            DN(dnnl_primitive_execute(s->prim, d->strm, s->nargs, s->exec),
               s->node, s->what);
            break;
        case STEP_HOOK:
            if (be->hooks.grad_ready) {
                DN(dnnl_stream_wait(d->strm), s->node, "stream wait");
                be->hooks.grad_ready(be->hooks.ctx, s->aux);
            }
            break;
        case STEP_RUN:
            TRY(s->run(d, s));
            break;
        }
        if (t0 > 0.0)
            d->prof[3 * s->node + s->part] += cl_time_now() - t0;
        if (d->sprof) {
            DN(dnnl_stream_wait(d->strm), s->node, "stream wait");
            profile_add(d, s, cl_time_now() - ts);
        }
    }
    DN(dnnl_stream_wait(d->strm), -1, "stream wait");
fail:
    return st;
}

/* Memory objects for every argument, now that the arena exists. */
cl_status cl_dnnl_bind_list(dn_ctx *d, dn_list *l)
{
    cl_status st = CL_OK;
    for (int k = 0; k < l->n; k++) {
        dn_step *s = &l->s[k];
        if (s->kind != STEP_PRIM)
            continue;
        for (int a = 0; a < s->nargs; a++) {
            dn_arg *x = &s->args[a];
            void *p = cl_dnnl_arg_ptr(d, x);
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

void cl_dnnl_free_list(dn_list *l)
{
    for (int k = 0; k < l->n; k++)
        for (int a = 0; a < l->s[k].nargs; a++)
            if (l->s[k].mem[a])
                dnnl_memory_destroy(l->s[k].mem[a]);
    cl_free(l->s);
    l->s = NULL;
    l->n = l->cap = 0;
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
void cl_dnnl_ftz(void)
{
#if defined(__SSE__)
#pragma omp parallel
    _mm_setcsr(_mm_getcsr() | 0x8040);
    _mm_setcsr(_mm_getcsr() | 0x8040);
#endif
}

static void dn_destroy(cl_backend *be)
{
    dn_ctx *d = be->priv;
    if (!d)
        return;
    cl_dnnl_free_list(&d->fwd_train);
    cl_dnnl_free_list(&d->fwd_eval);
    cl_dnnl_free_list(&d->bwd);
    cl_dnnl_free_list(&d->sync);
    cl_dnnl_free_list(&d->in);
    for (int k = 0; k < d->n_prims; k++)
        dnnl_primitive_destroy(d->prims[k]);
    for (int k = 0; k < d->n_pds; k++)
        dnnl_primitive_desc_destroy(d->pds[k]);
    cl_free(d->prims);
    cl_free(d->pds);
    for (int i = 0; d->nd && i < d->g->n_nodes; i++) {
        const dn_op *op = &cl_dnnl_ops[d->g->nodes[i].op];
        if (d->nd[i].fallback)
            cl_dnnl_fallback_free(&d->nd[i]);
        else if (op->free)
            op->free(&d->nd[i]);
    }
    cl_free(d->sprof);
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
            TRY(cl_dnnl_run_list(d, &d->in));
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
    cl_dnnl_ftz();
    if (d->dirty) {
        CL_TRY(cl_dnnl_run_list(d, &d->sync));
        d->dirty = 0;
    }
    d->trained = 0;
    CL_TRY(cl_dnnl_run_list(d, training ? &d->fwd_train : &d->fwd_eval));
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
    cl_dnnl_ftz();
    return cl_dnnl_run_list(d, &d->bwd);
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
    .supports = cl_dnnl_supports,
    .plan = cl_dnnl_plan,
    .set_input = dn_set_input,
    .forward = dn_forward,
    .backward = dn_backward,
    .read = dn_read,
    .sync_params = dn_sync_params,
    .destroy = dn_destroy,
};

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
    return d->paths;
}

void cl_dnnl_tune_counts(const cl_backend *be, int *measured, int *rewritten)
{
    const dn_ctx *d = be->priv;
    int ok = be->vt == &cl_backend_onednn_vtbl && d;
    *measured = ok ? d->tune_measured : 0;
    *rewritten = ok ? d->tune_rewritten : 0;
}

unsigned cl_dnnl_fallback_ops(const cl_backend *be)
{
    const dn_ctx *d = be->priv;
    if (be->vt != &cl_backend_onednn_vtbl || !d)
        return 0;
    return d->fallback_ops;
}
