/* The oneDNN backend's reference fallback: a node whose op has no entry in
 * the op table (or that a test asks to run this way) runs the reference
 * kernels of ref_ops.c on plain f32 copies, forward and backward.  Forward
 * reorders each input to plain f32 (no copy when it is plain already),
 * runs the kernel into a plain f32 output and, under amp, casts that to
 * the type of its first input for the nodes after it; backward reorders
 * dy likewise, runs the kernel into plain f32 input gradients and reorders
 * them into the inputs' own layouts.  The kernels write parameter
 * gradients straight into the graph's grad arena.  The steps are recorded
 * like any other, so the arena shares their buffers by lifetime. */
#include <string.h>

#include "backend/onednn/internal.h"
#include "core/error.h"

/* Positions of the arguments of a fallback step (dn_arg.arg). */
enum {
    FB_X = 0,                   /* inputs, FB_X + k */
    FB_Y = CL_NODE_MAX_IN,      /* output */
    FB_DY = CL_NODE_MAX_IN + 1, /* output gradient */
    FB_DX = CL_NODE_MAX_IN + 2  /* input gradients, FB_DX + k */
};

void cl_dnnl_fallback_init(dn_node *x)
{
    for (int k = 0; k < CL_NODE_MAX_IN; k++)
        x->u.fb.x[k] = -1;
    x->u.fb.y = -1;
}

void cl_dnnl_fallback_free(dn_node *x)
{
    cl_ref_saved_free(&x->u.fb.sv);
}

/* Whether input tensor t is an activation the kernels read (labels and
 * targets reach the loss by other means). */
static int reads(const dn_ctx *d, int t)
{
    cl_gtensor_kind k = gt(d, t)->kind;
    return k == CL_GT_ACT || k == CL_GT_INPUT;
}

/* The plain f32 md with md's dims. */
static dnnl_memory_desc_t plain_f32(const dnnl_memory_desc_t *md)
{
    dnnl_memory_desc_t p;
    cl_dnnl_md_plain(&p, md->ndims, md->dims);
    return p;
}

/* The kernel's arguments from a step's. */
static cl_ref_args step_args(dn_ctx *d, const dn_step *s)
{
    const cl_node *n = &d->g->nodes[s->node];
    cl_ref_args a = {.g = d->g,
                     .n = n,
                     .sv = &d->nd[s->node].u.fb.sv,
                     .training = s->aux,
                     .hooks = &d->be->hooks,
                     .sums = d->sync_sums,
                     .labels = d->has_labels ? d->labels : NULL,
                     .targets = d->has_targets ? d->targets : NULL};
    cl_ref_args_key(&a, d->be, s->node);
    for (int j = 0; j < s->nargs; j++) {
        void *p = cl_dnnl_arg_ptr(d, &s->args[j]);
        int k = s->args[j].arg;
        if (k < FB_Y)
            a.x[k] = p;
        else if (k == FB_Y)
            a.y = p;
        else if (k == FB_DY)
            a.dy = p;
        else
            a.dx[k - FB_DX] = p;
    }
    return a;
}

static cl_status run_forward(dn_ctx *d, const dn_step *s)
{
    cl_ref_args a = step_args(d, s);
    return cl_ref_kernels[a.n->op].forward(&a);
}

static cl_status run_backward(dn_ctx *d, const dn_step *s)
{
    cl_ref_args a = step_args(d, s);
    return cl_ref_kernels[a.n->op].backward(&a);
}

cl_status cl_dnnl_fallback_fwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    dn_fallback *f = &d->nd[i].u.fb;
    dnnl_memory_desc_t xm[CL_NODE_MAX_IN], ym, om;
    dnnl_dims_t dims;
    dnnl_data_type_t out_dt = dnnl_f32;
    dn_step *s;
    size_t sums;
    TRY_GOTO(
        cl_ref_saved_alloc(&f->sv, d->g, n, d->mode == CL_PLAN_TRAIN, &sums));
    if (sums > d->sync_len)
        d->sync_len = sums;
    for (int k = 0; k < n->n_in; k++) {
        int x = n->in[k];
        if (!reads(d, x))
            continue;
        TRY_GOTO(cl_dnnl_ensure_input_md(d, x));
        const dn_tensor *t = &d->t[rep(d, x)];
        if (k == 0)
            out_dt = t->md.data_type;
        xm[k] = plain_f32(&t->md);
        if (md_eq(&t->md, &xm[k])) {
            f->x[k] = t->store;
            continue;
        }
        TRY_GOTO(cl_dnnl_md_store(d, &xm[k], &f->x[k]));
        for (int l = 0; l < n_fwd_lists(d); l++)
            TRY_GOTO(cl_dnnl_reorder_step(d, fwd_list(d, l), i, i,
                                          "fallback: input to plain", t->store,
                                          &t->md, f->x[k], &xm[k]));
    }
    const cl_shape *ys = &gt(d, n->out)->shape;
    dims_of(ys, dims);
    cl_dnnl_md_plain(&ym, ys->ndim, dims);
    TRY_GOTO(cl_dnnl_md_store(d, &ym, &f->y));
    om = md_as(&ym, out_dt);
    TRY_GOTO(cl_dnnl_set_md(d, n->out, &om, out_dt == dnnl_f32 ? f->y : -1));
    for (int l = 0; l < n_fwd_lists(d); l++) {
        TRY_GOTO(cl_dnnl_step_run(d, fwd_list(d, l), run_forward, i,
                                  "reference fallback forward", i, &s));
        s->aux = d->mode == CL_PLAN_TRAIN && l == 0; /* training forward */
        for (int k = 0; k < n->n_in; k++)
            if (f->x[k] >= 0)
                cl_dnnl_arg_store(d, s, FB_X + k, f->x[k], &xm[k]);
        cl_dnnl_arg_store(d, s, FB_Y, f->y, &ym);
        if (out_dt != dnnl_f32)
            TRY_GOTO(cl_dnnl_reorder_step(d, fwd_list(d, l), i, i,
                                          "fallback: output cast", f->y, &ym,
                                          d->t[rep(d, n->out)].store, &om));
    }
fail:
    return st;
}

cl_status cl_dnnl_fallback_bwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    const dn_fallback *f = &d->nd[i].u.fb;
    const dnnl_memory_desc_t *omd = &d->t[rep(d, n->out)].md;
    dnnl_memory_desc_t xm[CL_NODE_MAX_IN], ym = plain_f32(omd);
    int tgt[CL_NODE_MAX_IN], acc[CL_NODE_MAX_IN], dx[CL_NODE_MAX_IN];
    int dy;
    dn_step *s;
    TRY_GOTO(cl_dnnl_out_grad(d, i, &dy));
    TRY_GOTO(
        cl_dnnl_bwd_copy(d, i, "fallback: dy to plain", dy, omd, &ym, &dy));
    /* Where each input's gradient goes, and its plain f32 buffer; only the
     * inputs the op differentiates (cl_op_grad_inputs) have one. */
    const unsigned wants = cl_op_grad_inputs(n->op);
    for (int k = 0; k < n->n_in; k++) {
        int x = n->in[k];
        tgt[k] = dx[k] = -1;
        acc[k] = 0;
        if (!reads(d, x))
            continue;
        const dnnl_memory_desc_t *md = &d->t[rep(d, x)].md;
        xm[k] = plain_f32(md);
        if (gt(d, x)->kind != CL_GT_ACT || !(wants >> k & 1u))
            continue;
        TRY_GOTO(cl_dnnl_grad_target(d, i, x, &tgt[k], &acc[k]));
        if (tgt[k] < 0)
            continue;
        dx[k] = tgt[k];
        if (!md_eq(md, &xm[k]))
            TRY_GOTO(cl_dnnl_md_store(d, &xm[k], &dx[k]));
    }
    TRY_GOTO(cl_dnnl_step_run(d, &d->bwd, run_backward, i,
                              "reference fallback backward", tb(d, i), &s));
    for (int k = 0; k < n->n_in; k++)
        if (f->x[k] >= 0)
            cl_dnnl_arg_store(d, s, FB_X + k, f->x[k], &xm[k]);
    cl_dnnl_arg_store(d, s, FB_Y, f->y, &ym);
    cl_dnnl_arg_store(d, s, FB_DY, dy, &ym);
    for (int k = 0; k < n->n_in; k++)
        if (dx[k] >= 0)
            cl_dnnl_arg_store(d, s, FB_DX + k, dx[k], &xm[k]);
    for (int k = 0; k < n->n_in; k++) {
        if (dx[k] < 0)
            continue;
        const dnnl_memory_desc_t *md = &d->t[rep(d, n->in[k])].md;
        if (dx[k] != tgt[k])
            TRY_GOTO(cl_dnnl_reorder_step(d, &d->bwd, i, tb(d, i),
                                          "fallback: gradient back", dx[k],
                                          &xm[k], tgt[k], md));
        if (acc[k])
            TRY_GOTO(cl_dnnl_accumulate(d, i, n->in[k], tgt[k]));
    }
    for (int j = 0; j < n->n_param; j++)
        TRY_GOTO(cl_dnnl_hook_step(d, i, n->param[j]));
fail:
    return st;
}
