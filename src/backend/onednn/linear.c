/* The oneDNN backend's linear layers as inner products, forward and
 * backward planning side by side; the logits stay f32 at every amp
 * level. */
#include "backend/onednn/internal.h"

/* Plain (out, in...) weights md of linear node i for an input md. */
static void linear_wdims(const dn_ctx *d, int i, const dnnl_memory_desc_t *src,
                         dnnl_dims_t w)
{
    w[0] = d->g->nodes[i].attr.linear.out_features;
    for (int k = 1; k < src->ndims; k++)
        w[k] = src->dims[k];
}

cl_status cl_dnnl_linear_fwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[i];
    const cl_linear_attr *a = &n->attr.linear;
    dn_weighted *x = &d->nd[i].u.w;
    dnnl_inner_product_desc_t ipd;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    dnnl_dims_t wdims, ddims = {0, a->out_features};
    TRY(cl_dnnl_ensure_input_md(d, n->in[0]));
    dnnl_memory_desc_t smd, wmd, wplain, bmd, dmd;
    int src;
    TRY(cl_dnnl_value_as(d, i, n->in[0], conv_dt(d), &smd, &src));
    x->src = src;
    x->src_md = smd;
    int64_t in = 1;
    for (int k = 1; k < smd.ndims; k++)
        in *= smd.dims[k];
    if (in != a->in_features) {
        st = cl_error(CL_ERR_SHAPE,
                      "%s: linear input has %lld features, expected %d",
                      n->name, (long long)in, a->in_features);
        goto fail;
    }
    ddims[0] = smd.dims[0]; /* the rows: supports() takes 2-d inputs only */
    linear_wdims(d, i, &smd, wdims);
    cl_dnnl_md_any(&wmd, smd.ndims, wdims, conv_dt(d));
    cl_dnnl_md_plain(&wplain, smd.ndims, wdims);
    md_1d(&bmd, a->out_features);
    cl_dnnl_md_plain(&dmd, 2, ddims); /* f32 logits at every amp level */
    DN(dnnl_inner_product_forward_desc_init(
           &ipd,
           d->mode == CL_PLAN_TRAIN ? dnnl_forward_training
                                    : dnnl_forward_inference,
           &smd, &wmd, a->has_bias ? &bmd : NULL, &dmd),
       i, "inner product forward descriptor");
    TRY(cl_dnnl_prim_make(d, i, "inner product forward", &ipd, NULL, NULL, &pd,
                          &prim));
    d->nd[i].fwd_pd = pd;
    x->w_md = cl_dnnl_qmd(pd, dnnl_query_weights_md, 0);
    float *w = cl_graph_param(g, n->param[0]);
    if (!md_eq(&x->w_md, &wplain))
        TRY(cl_dnnl_weight_copy(d, i, "weights reorder", &wplain, w, &x->w_md,
                                &x->w));
    TRY(cl_dnnl_set_md(d, n->out, &dmd, -1));
    for (int k = 0; k < n_fwd_lists(d); k++) {
        TRY(cl_dnnl_step_prim(d, fwd_list(d, k), i, "inner product forward", i,
                              pd, prim, &s));
        cl_dnnl_arg_store(d, s, DNNL_ARG_SRC, src, &smd);
        cl_dnnl_arg_ext(s, DNNL_ARG_WEIGHTS, x->w ? x->w : w, &x->w_md);
        if (a->has_bias)
            cl_dnnl_arg_ext(s, DNNL_ARG_BIAS, cl_graph_param(g, n->param[1]),
                            &bmd);
        cl_dnnl_arg_store(d, s, DNNL_ARG_DST, d->t[rep(d, n->out)].store, &dmd);
    }
fail:
    return st;
}

cl_status cl_dnnl_linear_bwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[i];
    const cl_linear_attr *a = &n->attr.linear;
    dn_weighted *x = &d->nd[i].u.w;
    dnnl_inner_product_desc_t ipd;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dnnl_dims_t wdims;
    dnnl_memory_desc_t wany, wf32, wplain, bmd, dyc_md;
    int dy, dyc, tgt, acc;
    /* As for convolutions: src as read by forward, dx in the input's type,
     * dy (f32 from the loss) cast to the compute type. */
    const dnnl_memory_desc_t *smd = &x->src_md;
    const dnnl_memory_desc_t *dxmd = in_md(d, n->in[0]);
    const dnnl_memory_desc_t *dmd = in_md(d, n->out);
    float *w = cl_graph_param(g, n->param[0]);
    TRY(cl_dnnl_out_grad(d, i, &dy));
    TRY(cl_dnnl_grad_as(d, i, dy, dmd, conv_dt(d), &dyc_md, &dyc));
    dmd = &dyc_md;
    dy = dyc;
    linear_wdims(d, i, smd, wdims);
    cl_dnnl_md_any(&wany, smd->ndims, wdims, conv_dt(d));
    cl_dnnl_md_any(&wf32, smd->ndims, wdims, dnnl_f32);
    cl_dnnl_md_plain(&wplain, smd->ndims, wdims);
    md_1d(&bmd, a->out_features);

    DN(dnnl_inner_product_backward_weights_desc_init(
           &ipd, smd, &wf32, a->has_bias ? &bmd : NULL, dmd),
       i, "inner product backward weights descriptor");
    TRY(cl_dnnl_prim_make(d, i, "inner product backward weights", &ipd, NULL,
                          d->nd[i].fwd_pd, &pd, &prim));
    TRY(cl_dnnl_wgrad_step(d, i, "inner product backward weights", pd, prim,
                           x->src, smd, dy, dmd, &wplain,
                           a->has_bias ? &bmd : NULL));

    TRY(cl_dnnl_grad_target(d, i, n->in[0], &tgt, &acc));
    if (tgt < 0)
        return CL_OK;
    DN(dnnl_inner_product_backward_data_desc_init(&ipd, dxmd, &wany, dmd), i,
       "inner product backward data descriptor");
    TRY(cl_dnnl_prim_make(d, i, "inner product backward data", &ipd, NULL,
                          d->nd[i].fwd_pd, &pd, &prim));
    TRY(cl_dnnl_bwd_data_step(d, i, "inner product backward data", pd, prim, dy,
                              dmd, &wplain, w, tgt, dxmd));
    if (acc)
        TRY(cl_dnnl_accumulate(d, i, n->in[0], tgt));
fail:
    return st;
}
