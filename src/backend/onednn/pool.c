/* The oneDNN backend's pooling, max and global average, forward and
 * backward planning side by side. */
#include "backend/onednn/internal.h"

/* Output dims (N, C, OH, OW) and the pooling geometry of node i: max
 * pooling, or global average pooling when gap != 0. */
static void pool_geometry(dn_ctx *d, int i, int gap, dnnl_dims_t ddims,
                          dnnl_dims_t strides, dnnl_dims_t kernel,
                          dnnl_dims_t pl, dnnl_dims_t pr)
{
    const cl_node *n = &d->g->nodes[i];
    const cl_shape *xs = &gt(d, n->in[0])->shape;
    ddims[0] = xs->d[0];
    ddims[1] = xs->d[1];
    if (gap) {
        ddims[2] = ddims[3] = 1;
        strides[0] = strides[1] = 1;
        kernel[0] = xs->d[2];
        kernel[1] = xs->d[3];
        pl[0] = pl[1] = pr[0] = pr[1] = 0;
        return;
    }
    const cl_maxpool2d_attr *a = &n->attr.maxpool2d;
    const cl_shape *ys = &gt(d, n->out)->shape;
    ddims[2] = ys->d[2];
    ddims[3] = ys->d[3];
    strides[0] = a->sh;
    strides[1] = a->sw;
    kernel[0] = a->kh;
    kernel[1] = a->kw;
    pl[0] = a->ph;
    pl[1] = a->pw;
    pr[0] = (ddims[2] - 1) * a->sh + a->kh - xs->d[2] - a->ph;
    pr[1] = (ddims[3] - 1) * a->sw + a->kw - xs->d[3] - a->pw;
}

/* Max pooling, or global average pooling when gap != 0. */
static cl_status plan_pool_fwd(dn_ctx *d, int i, int gap)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    dn_node *x = &d->nd[i];
    dnnl_pooling_desc_t pdsc;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    dnnl_dims_t ddims, strides, kernel, pl, pr;
    TRY_GOTO(cl_dnnl_ensure_input_md(d, n->in[0]));
    dnnl_memory_desc_t smd = *in_md(d, n->in[0]), dmd, wsmd;
    pool_geometry(d, i, gap, ddims, strides, kernel, pl, pr);
    cl_dnnl_md_any(&dmd, 4, ddims, smd.data_type);
    DN(dnnl_pooling_forward_desc_init(
           &pdsc,
           d->mode == CL_PLAN_TRAIN ? dnnl_forward_training
                                    : dnnl_forward_inference,
           gap ? dnnl_pooling_avg_exclude_padding : dnnl_pooling_max, &smd,
           &dmd, strides, kernel, pl, pr),
       i, "pooling forward descriptor");
    TRY_GOTO(cl_dnnl_prim_make(d, i, "pooling forward", &pdsc, NULL, NULL, &pd,
                               &prim));
    x->fwd_pd = pd;
    dmd = cl_dnnl_qmd(pd, dnnl_query_dst_md, 0);
    wsmd = cl_dnnl_qmd(pd, dnnl_query_workspace_md, 0);
    TRY_GOTO(cl_dnnl_set_md(d, n->out, &dmd, -1));
    if (wsmd.ndims && md_size(&wsmd) > 0)
        TRY_GOTO(cl_dnnl_md_store(d, &wsmd, &x->u.pool.ws));
    for (int k = 0; k < n_fwd_lists(d); k++) {
        TRY_GOTO(cl_dnnl_step_prim(d, fwd_list(d, k), i, "pooling forward", i,
                                   pd, prim, &s));
        cl_dnnl_arg_store(d, s, DNNL_ARG_SRC, d->t[rep(d, n->in[0])].store,
                          &smd);
        cl_dnnl_arg_store(d, s, DNNL_ARG_DST, d->t[rep(d, n->out)].store, &dmd);
        if (x->u.pool.ws >= 0)
            cl_dnnl_arg_store(d, s, DNNL_ARG_WORKSPACE, x->u.pool.ws, &wsmd);
    }
fail:
    return st;
}

static cl_status plan_pool_bwd(dn_ctx *d, int i, int gap)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    dn_node *x = &d->nd[i];
    dnnl_pooling_desc_t pdsc;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    dnnl_dims_t ddims, strides, kernel, pl, pr;
    int dy, tgt, acc;
    const dnnl_memory_desc_t *smd = in_md(d, n->in[0]);
    const dnnl_memory_desc_t *dmd = in_md(d, n->out);
    TRY_GOTO(cl_dnnl_out_grad(d, i, &dy));
    TRY_GOTO(cl_dnnl_grad_target(d, i, n->in[0], &tgt, &acc));
    if (tgt < 0)
        return CL_OK;
    pool_geometry(d, i, gap, ddims, strides, kernel, pl, pr);
    DN(dnnl_pooling_backward_desc_init(
           &pdsc, gap ? dnnl_pooling_avg_exclude_padding : dnnl_pooling_max,
           smd, dmd, strides, kernel, pl, pr),
       i, "pooling backward descriptor");
    TRY_GOTO(cl_dnnl_prim_make(d, i, "pooling backward", &pdsc, NULL, x->fwd_pd,
                               &pd, &prim));
    TRY_GOTO(cl_dnnl_step_prim(d, &d->bwd, i, "pooling backward", tb(d, i), pd,
                               prim, &s));
    cl_dnnl_arg_store(d, s, DNNL_ARG_DIFF_DST, dy, dmd);
    if (x->u.pool.ws >= 0) {
        dnnl_memory_desc_t wsmd = cl_dnnl_qmd(pd, dnnl_query_workspace_md, 0);
        cl_dnnl_arg_store(d, s, DNNL_ARG_WORKSPACE, x->u.pool.ws, &wsmd);
    }
    cl_dnnl_arg_store(d, s, DNNL_ARG_DIFF_SRC, tgt, smd);
    if (acc)
        TRY_GOTO(cl_dnnl_accumulate(d, i, n->in[0], tgt));
fail:
    return st;
}

void cl_dnnl_pool_init(dn_node *x)
{
    x->u.pool.ws = -1;
}

cl_status cl_dnnl_maxpool_fwd(dn_ctx *d, int i)
{
    return plan_pool_fwd(d, i, 0);
}

cl_status cl_dnnl_maxpool_bwd(dn_ctx *d, int i)
{
    return plan_pool_bwd(d, i, 0);
}

cl_status cl_dnnl_gap_fwd(dn_ctx *d, int i)
{
    return plan_pool_fwd(d, i, 1);
}

cl_status cl_dnnl_gap_bwd(dn_ctx *d, int i)
{
    return plan_pool_bwd(d, i, 1);
}
