/* The oneDNN backend's execution: the steps of a plan run in order (oneDNN
 * primitives, the backend's own loops, the gradient-ready hook), their
 * memory objects, and the calls of a planned backend (set_input, forward,
 * backward, read, sync_params) that the vtable (onednn.c) points to. */
#include <dnnl.h>
#include <string.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "backend/onednn/internal.h"
#include "backend/onednn_info.h"
#include "core/error.h"
#include "core/mem.h"
#include "core/timer.h"

/* Adds t seconds to the row of step s's kind (its name and op), and the
 * bytes of its arguments: each read or written once, the least any way
 * of computing the step moves. */
static void profile_add(dn_ctx *d, const dn_step *s, double t)
{
    const int op = s->node >= 0 ? (int)d->g->nodes[s->node].op : -1;
    double bytes = 0.0;
    for (int a = 0; a < s->nargs; a++)
        if (s->args[a].md.ndims > 0)
            bytes += (double)md_size(&s->args[a].md);
    for (int k = 0; k < d->n_sprof; k++) {
        cl_dnnl_prof_row *r = &d->sprof[k];
        if (r->op == op && strcmp(r->what, s->what) == 0) {
            r->seconds += t;
            r->bytes += bytes;
            r->runs++;
            return;
        }
    }
    if (d->n_sprof < DN_PROF_KINDS)
        d->sprof[d->n_sprof++] = (cl_dnnl_prof_row){s->what, op, t, 1, bytes};
}

cl_status cl_dnnl_run_list(dn_ctx *d, dn_list *l)
{
    cl_status st = CL_OK;
    cl_backend *be = d->be;
    for (int k = 0; k < l->n; k++) {
        dn_step *s = &l->s[k];
        double t0 = d->prof && s->node >= 0 ? cl_time_now() : 0.0;
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
            TRY_GOTO(s->run(d, s));
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

cl_status cl_dnnl_set_input(cl_backend *be, const float *x,
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
            TRY_GOTO(cl_dnnl_run_list(d, &d->in));
        }
    }
    d->has_labels = d->has_targets = 0;
    if (labels && g->loss >= 0) {
        TRY_GOTO(cl_softmax_ce_check_labels(labels, g->batch, g->num_classes));
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

cl_status cl_dnnl_forward(cl_backend *be, int training, float *loss)
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

cl_status cl_dnnl_backward(cl_backend *be)
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

cl_status cl_dnnl_read(cl_backend *be, int tensor, float *out)
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

cl_status cl_dnnl_sync_params(cl_backend *be)
{
    dn_ctx *d = be->priv;
    d->dirty = 1;
    return CL_OK;
}
