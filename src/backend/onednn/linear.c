/* The oneDNN backend's linear layers as inner products, forward and
 * backward planning side by side.  A 2-d input (the classifier head)
 * writes f32 at every amp level (the logits); an input of rank 3 and up
 * (Swin's token projections, linear over the last dimension) is read
 * plain as (rows, in) and writes (rows, out) in the activation type, as
 * convolutions do. */
#include "backend/onednn/internal.h"

/* The rows of linear node i: every dimension of its input but the last. */
static int64_t linear_rows(const dn_ctx *d, int i)
{
    const cl_node *n = &d->g->nodes[i];
    return cl_graph_numel(d->g, n->in[0]) / n->attr.linear.in_features;
}

/* Whether linear node i reads an input of rank 3 and up (as rows). */
static int linear_tokens(const dn_ctx *d, int i)
{
    return gt(d, d->g->nodes[i].in[0])->shape.ndim > 2;
}

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
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    dnnl_dims_t wdims, ddims = {0, a->out_features};
    TRY_GOTO(cl_dnnl_ensure_input_md(d, n->in[0]));
    dnnl_memory_desc_t smd, wmd, wplain, bmd, dmd, full;
    int src;
    const int tok = linear_tokens(d, i);
    const int q8 = cl_dnnl_q8_node(d, i);
    if (q8) {
        /* u8/s8 plain (rows, in), quantized from the input once. */
        const cl_shape *xs = &gt(d, n->in[0])->shape;
        dnnl_dims_t xd, sd = {linear_rows(d, i), a->in_features};
        const dnnl_data_type_t qt =
            g->quant->act_signed[n->in[0]] ? dnnl_s8 : dnnl_u8;
        dims_of(xs, xd);
        cl_dnnl_md_plain_dt(&full, xs->ndim, xd, qt);
        TRY_GOTO(cl_dnnl_value_q8(d, i, n->in[0], &full, &src));
        cl_dnnl_md_plain_dt(&smd, 2, sd, qt);
    } else if (tok) {
        dnnl_dims_t sd = {linear_rows(d, i), a->in_features};
        TRY_GOTO(cl_dnnl_plain_value(d, i, n->in[0], conv_dt(d), &full, &src));
        cl_dnnl_md_plain_dt(&smd, 2, sd, conv_dt(d));
    } else {
        TRY_GOTO(cl_dnnl_value_as(d, i, n->in[0], conv_dt(d), &smd, &src));
    }
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
    ddims[0] = smd.dims[0];
    linear_wdims(d, i, &smd, wdims);
    cl_dnnl_md_any(&wmd, smd.ndims, wdims, q8 ? dnnl_s8 : conv_dt(d));
    cl_dnnl_md_plain(&wplain, smd.ndims, wdims);
    md_1d(&bmd, a->out_features);
    /* f32 logits at every amp level; tokens in the activation type */
    cl_dnnl_md_plain_dt(&dmd, 2, ddims, tok ? act_dt(d) : dnnl_f32);
    DN(dnnl_inner_product_forward_desc_init(
           &ipd,
           d->mode == CL_PLAN_TRAIN ? dnnl_forward_training
                                    : dnnl_forward_inference,
           &smd, &wmd, a->has_bias ? &bmd : NULL, &dmd),
       i, "inner product forward descriptor");
    TRY_GOTO(cl_dnnl_attr_post(
        d, 0, d->nd[i].gelu ? dnnl_eltwise_gelu_erf : dnnl_alg_kind_undef,
        &attr));
    if (q8)
        TRY_GOTO(cl_dnnl_q8_output_scales(d, i, &ipd, attr));
    TRY_GOTO(cl_dnnl_prim_make(
        d, i, q8 ? "int8 inner product forward" : "inner product forward", &ipd,
        attr, NULL, &pd, &prim));
    d->nd[i].fwd_pd = pd;
    if (q8)
        TRY_GOTO(cl_dnnl_q8_check_impl(d, i, pd));
    x->w_md = cl_dnnl_qmd(pd, dnnl_query_weights_md, 0);
    float *w = cl_graph_param(g, n->param[0]);
    if (q8)
        TRY_GOTO(cl_dnnl_q8_weights(d, i, &wplain, w, a->has_bias));
    else if (!md_eq(&x->w_md, &wplain))
        TRY_GOTO(cl_dnnl_weight_copy(d, i, "weights reorder", &wplain, w,
                                     &x->w_md, &x->w));
    if (tok) {
        const cl_shape *ys = &gt(d, n->out)->shape;
        dnnl_dims_t yd;
        dims_of(ys, yd);
        cl_dnnl_md_plain_dt(&full, ys->ndim, yd, act_dt(d));
        TRY_GOTO(cl_dnnl_set_md(d, n->out, &full, -1));
    } else {
        TRY_GOTO(cl_dnnl_set_md(d, n->out, &dmd, -1));
    }
    for (int k = 0; k < n_fwd_lists(d); k++) {
        TRY_GOTO(cl_dnnl_step_prim(d, fwd_list(d, k), i,
                                   "inner product forward", i, pd, prim, &s));
        cl_dnnl_arg_store(d, s, DNNL_ARG_SRC, src, &smd);
        cl_dnnl_arg_ext(s, DNNL_ARG_WEIGHTS, x->w ? x->w : w, &x->w_md);
        if (a->has_bias)
            cl_dnnl_arg_ext(s, DNNL_ARG_BIAS,
                            q8 ? x->qbias : cl_graph_param(g, n->param[1]),
                            &bmd);
        cl_dnnl_arg_store(d, s, DNNL_ARG_DST, d->t[rep(d, n->out)].store, &dmd);
    }
fail:
    if (attr)
        dnnl_primitive_attr_destroy(attr);
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
    dnnl_memory_desc_t wany, wf32, wplain, bmd, dyc_md, pm, dx2;
    int dy, dyc, tgt, acc, dx;
    const int tok = linear_tokens(d, i);
    /* As for convolutions: src as read by forward, dx in the input's type,
     * dy (f32 from the loss) cast to the compute type. */
    const dnnl_memory_desc_t *smd = &x->src_md;
    const dnnl_memory_desc_t *dxmd = in_md(d, n->in[0]);
    const dnnl_memory_desc_t *dmd = in_md(d, n->out);
    float *w = cl_graph_param(g, n->param[0]);
    TRY_GOTO(cl_dnnl_out_grad(d, i, &dy));
    TRY_GOTO(cl_dnnl_grad_as(d, i, dy, dmd, conv_dt(d), &dyc_md, &dyc));
    dy = dyc;
    if (tok) { /* the same plain memory as (rows, out) */
        dnnl_dims_t dd = {linear_rows(d, i), a->out_features};
        cl_dnnl_md_plain_dt(&dyc_md, 2, dd, conv_dt(d));
    }
    dmd = &dyc_md;
    linear_wdims(d, i, smd, wdims);
    cl_dnnl_md_any(&wany, smd->ndims, wdims, conv_dt(d));
    cl_dnnl_md_any(&wf32, smd->ndims, wdims, dnnl_f32);
    cl_dnnl_md_plain(&wplain, smd->ndims, wdims);
    md_1d(&bmd, a->out_features);

    DN(dnnl_inner_product_backward_weights_desc_init(
           &ipd, smd, &wf32, a->has_bias ? &bmd : NULL, dmd),
       i, "inner product backward weights descriptor");
    TRY_GOTO(cl_dnnl_prim_make(d, i, "inner product backward weights", &ipd,
                               NULL, d->nd[i].fwd_pd, &pd, &prim));
    TRY_GOTO(cl_dnnl_wgrad_step(d, i, "inner product backward weights", pd,
                                prim, x->src, smd, dy, dmd, &wplain,
                                a->has_bias ? &bmd : NULL));

    if (tok) {
        TRY_GOTO(cl_dnnl_plain_grad(d, i, n->in[0], &pm, &dx, &tgt, &acc));
        if (tgt < 0)
            return CL_OK;
        dnnl_dims_t xd = {linear_rows(d, i), a->in_features};
        cl_dnnl_md_plain_dt(&dx2, 2, xd, pm.data_type);
        dxmd = &dx2;
    } else {
        TRY_GOTO(cl_dnnl_grad_target(d, i, n->in[0], &tgt, &acc));
        if (tgt < 0)
            return CL_OK;
        dx = tgt;
    }
    DN(dnnl_inner_product_backward_data_desc_init(&ipd, dxmd, &wany, dmd), i,
       "inner product backward data descriptor");
    TRY_GOTO(cl_dnnl_prim_make(d, i, "inner product backward data", &ipd, NULL,
                               d->nd[i].fwd_pd, &pd, &prim));
    TRY_GOTO(cl_dnnl_bwd_data_step(d, i, "inner product backward data", pd,
                                   prim, dy, dmd, &wplain, w, dx, dxmd));
    if (tok)
        TRY_GOTO(cl_dnnl_plain_grad_end(d, i, n->in[0], &pm, dx, tgt, acc));
    else if (acc)
        TRY_GOTO(cl_dnnl_accumulate(d, i, n->in[0], tgt));
fail:
    return st;
}
