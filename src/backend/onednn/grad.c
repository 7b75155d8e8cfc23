/* Backward planning shared by the op families: where a node writes an
 * input's gradient (the tensor's own gradient store, or a scratch store
 * summed into it), the output gradient a node reads, the gradient-ready
 * hook, and the weight-gradient and backward-data steps of conv and
 * linear.  The op files call these; these call only the context
 * (context.c) and the weight copies of amp.c. */
#include <dnnl.h>

#include "backend/onednn/internal.h"
#include "core/error.h"

/* Where node i's gradient for its input x goes: the tensor's own gradient
 * store when i is the first contributor in backward order, else a scratch
 * store followed by an accumulation step (*acc set).  -1 when x needs no
 * gradient (the graph input). */
cl_status cl_dnnl_grad_target(dn_ctx *d, int i, int x, int *store, int *acc)
{
    int r = rep(d, x);
    *acc = 0;
    *store = -1;
    if (x == d->g->input || r == d->g->input)
        return CL_OK;
    if (d->t[r].dstore < 0) {
        CL_TRY(cl_dnnl_md_store(d, &d->t[r].md, &d->t[r].dstore));
        *store = d->t[r].dstore;
        return CL_OK;
    }
    *acc = 1;
    return cl_dnnl_md_store(d, &d->t[r].md, store);
}

/* dstore(x) += src, both in x's layout. */
cl_status cl_dnnl_accumulate(dn_ctx *d, int i, int x, int src)
{
    cl_status st = CL_OK;
    int r = rep(d, x);
    dnnl_binary_desc_t bd;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    const dnnl_memory_desc_t *md = &d->t[r].md;
    DN(dnnl_binary_desc_init(&bd, dnnl_binary_add, md, md, md), i,
       "gradient sum descriptor");
    TRY_GOTO(
        cl_dnnl_prim_make(d, i, "gradient sum", &bd, NULL, NULL, &pd, &prim));
    TRY_GOTO(cl_dnnl_step_prim(d, &d->bwd, i, "gradient sum", tb(d, i), pd,
                               prim, &s));
    cl_dnnl_arg_store(d, s, DNNL_ARG_SRC_0, d->t[r].dstore, md);
    cl_dnnl_arg_store(d, s, DNNL_ARG_SRC_1, src, md);
    cl_dnnl_arg_store(d, s, DNNL_ARG_DST, d->t[r].dstore, md);
fail:
    return st;
}

cl_status cl_dnnl_hook_step(dn_ctx *d, int i, int param)
{
    dn_step *s;
    CL_TRY(
        cl_dnnl_step_new(d, &d->bwd, STEP_HOOK, i, "grad ready", tb(d, i), &s));
    s->aux = param;
    return CL_OK;
}

/* The gradient of the node's output, which every consumer has written. */
cl_status cl_dnnl_out_grad(dn_ctx *d, int i, int *store)
{
    int r = rep(d, d->g->nodes[i].out);
    *store = d->t[r].dstore;
    if (*store < 0)
        return cl_error(CL_ERR_UNSUPPORTED,
                        "%s: its output does not reach the loss, so backward "
                        "cannot give its parameters a gradient",
                        d->g->nodes[i].name);
    return CL_OK;
}

/* Weight gradient: straight into the grad arena when oneDNN's choice is
 * plain, else through a scratch store and a reorder. */
cl_status cl_dnnl_diff_weights(dn_ctx *d, int i, dn_step *s,
                               const dnnl_memory_desc_t *dwmd,
                               const dnnl_memory_desc_t *plain, float *grad,
                               int *tmp)
{
    *tmp = -1;
    if (md_eq(dwmd, plain)) {
        cl_dnnl_arg_ext(s, DNNL_ARG_DIFF_WEIGHTS, grad, plain);
        return CL_OK;
    }
    CL_TRY(cl_dnnl_md_store(d, dwmd, tmp));
    cl_dnnl_arg_store(d, s, DNNL_ARG_DIFF_WEIGHTS, *tmp, dwmd);
    return CL_OK;
}

cl_status cl_dnnl_diff_weights_back(dn_ctx *d, int i, int tmp,
                                    const dnnl_memory_desc_t *dwmd,
                                    const dnnl_memory_desc_t *plain,
                                    float *grad)
{
    cl_status st = CL_OK;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    if (tmp < 0)
        return CL_OK;
    TRY_GOTO(cl_dnnl_reorder_make(d, i, "weight gradient reorder", dwmd, plain,
                                  &pd, &prim));
    TRY_GOTO(cl_dnnl_step_prim(d, &d->bwd, i, "weight gradient reorder",
                               tb(d, i), pd, prim, &s));
    cl_dnnl_arg_store(d, s, DNNL_ARG_FROM, tmp, dwmd);
    cl_dnnl_arg_ext(s, DNNL_ARG_TO, grad, plain);
fail:
    return st;
}

/* The weight-gradient step of conv or linear node i made from pd / prim:
 * src (smd) and dy (dmd) into the parameter's gradient (plain md wplain),
 * by way of a reorder when pd writes another layout, and the bias's when
 * bmd is not NULL; then the gradient-ready hooks of both. */
cl_status cl_dnnl_wgrad_step(dn_ctx *d, int i, const char *what,
                             dnnl_primitive_desc_t pd, dnnl_primitive_t prim,
                             int src, const dnnl_memory_desc_t *smd, int dy,
                             const dnnl_memory_desc_t *dmd,
                             const dnnl_memory_desc_t *wplain,
                             const dnnl_memory_desc_t *bmd)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    float *gw = cl_graph_grad(d->g, n->param[0]);
    dnnl_memory_desc_t dwmd = cl_dnnl_qmd(pd, dnnl_query_diff_weights_md, 0);
    dn_step *s;
    int tmp;
    TRY_GOTO(cl_dnnl_step_prim(d, &d->bwd, i, what, tb(d, i), pd, prim, &s));
    cl_dnnl_arg_store(d, s, DNNL_ARG_SRC, src, smd);
    cl_dnnl_arg_store(d, s, DNNL_ARG_DIFF_DST, dy, dmd);
    TRY_GOTO(cl_dnnl_diff_weights(d, i, s, &dwmd, wplain, gw, &tmp));
    if (bmd)
        cl_dnnl_arg_ext(s, DNNL_ARG_DIFF_BIAS, cl_graph_grad(d->g, n->param[1]),
                        bmd);
    TRY_GOTO(cl_dnnl_diff_weights_back(d, i, tmp, &dwmd, wplain, gw));
    TRY_GOTO(cl_dnnl_hook_step(d, i, n->param[0]));
    if (bmd)
        TRY_GOTO(cl_dnnl_hook_step(d, i, n->param[1]));
fail:
    return st;
}

/* The weights copy backward-data reads: the forward copy when the layouts
 * agree, else a copy reordered from the forward copy (blocked to blocked
 * moves whole 16x16 tiles, faster than from the plain arena). */
static cl_status bwd_weights_copy(dn_ctx *d, int i,
                                  const dnnl_memory_desc_t *plain, float *w,
                                  float **use)
{
    dn_weighted *x = &d->nd[i].u.w;
    if (md_eq(&x->wb_md, &x->w_md)) {
        *use = x->w ? x->w : w;
        return CL_OK;
    }
    if (md_eq(&x->wb_md, plain)) {
        *use = w;
        return CL_OK;
    }
    if (x->w)
        CL_TRY(cl_dnnl_weight_copy(d, i, "backward weights reorder", &x->w_md,
                                   x->w, &x->wb_md, &x->wb));
    else
        CL_TRY(cl_dnnl_weight_copy(d, i, "backward weights reorder", plain, w,
                                   &x->wb_md, &x->wb));
    *use = x->wb;
    return CL_OK;
}

/* The backward-data step of conv or linear node i made from pd / prim: dy
 * (dmd) and the weights (w, plain md wplain, in the layout pd asks for)
 * into store dx (dxmd). */
cl_status cl_dnnl_bwd_data_step(dn_ctx *d, int i, const char *what,
                                dnnl_primitive_desc_t pd, dnnl_primitive_t prim,
                                int dy, const dnnl_memory_desc_t *dmd,
                                const dnnl_memory_desc_t *wplain, float *w,
                                int dx, const dnnl_memory_desc_t *dxmd)
{
    dn_weighted *x = &d->nd[i].u.w;
    dn_step *s;
    float *wb;
    x->wb_md = cl_dnnl_qmd(pd, dnnl_query_weights_md, 0);
    CL_TRY(bwd_weights_copy(d, i, wplain, w, &wb));
    CL_TRY(cl_dnnl_step_prim(d, &d->bwd, i, what, tb(d, i), pd, prim, &s));
    cl_dnnl_arg_store(d, s, DNNL_ARG_DIFF_DST, dy, dmd);
    cl_dnnl_arg_ext(s, DNNL_ARG_WEIGHTS, wb, &x->wb_md);
    cl_dnnl_arg_store(d, s, DNNL_ARG_DIFF_SRC, dx, dxmd);
    return CL_OK;
}
