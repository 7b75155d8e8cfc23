/* The oneDNN backend's layer normalisation (over the last dimension) as
 * oneDNN's layer_normalization primitive, forward (training: saving the
 * mean and variance) and backward (with the gamma and beta gradients)
 * side by side.
 *
 * Activations other than a convolution's output are plain here already
 * (the reference fallback, the inner product and these ops write
 * row-major); a convolution's output may be blocked (nChw16c) or
 * channels-last, and is reordered to a plain copy first (tokens.c's
 * cl_dnnl_plain_value), since these ops index rows of the last
 * dimension. */
#include "backend/onednn/internal.h"

void cl_dnnl_norm_init(dn_node *x)
{
    x->u.ln.src = x->u.ln.mean = x->u.ln.var = -1;
}

/* The statistics' md: one f32 per row (x's dims but the last). */
static void stat_md(const dnnl_memory_desc_t *src, dnnl_memory_desc_t *md)
{
    cl_dnnl_md_plain(md, src->ndims - 1, src->dims);
}

static const unsigned LN_FLAGS = dnnl_use_scale | dnnl_use_shift;

cl_status cl_dnnl_layernorm_fwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[i];
    const cl_layernorm_attr *a = &n->attr.layernorm;
    dn_norm *x = &d->nd[i].u.ln;
    dnnl_layer_normalization_desc_t ld;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    dnnl_memory_desc_t smd, tmd, cmd;
    const int train = d->mode == CL_PLAN_TRAIN;
    /* Data and its gradient in the input's type (bf16 under amp O2),
     * statistics, gamma and beta in f32. */
    TRY(cl_dnnl_plain_value(d, i, n->in[0], dnnl_data_type_undef, &smd,
                            &x->src));
    x->src_md = smd;
    stat_md(&smd, &tmd);
    md_1d(&cmd, a->features);
    DN(dnnl_layer_normalization_forward_desc_init(
           &ld, train ? dnnl_forward_training : dnnl_forward_inference, &smd,
           &tmd, a->eps, LN_FLAGS),
       i, "layer normalization forward descriptor");
    TRY(cl_dnnl_prim_make(d, i, "layer normalization forward", &ld, NULL, NULL,
                          &pd, &prim));
    d->nd[i].fwd_pd = pd;
    if (train) {
        TRY(cl_dnnl_md_store(d, &tmd, &x->mean));
        TRY(cl_dnnl_md_store(d, &tmd, &x->var));
    }
    TRY(cl_dnnl_set_md(d, n->out, &smd, -1));
    /* The evaluation forward of a training plan runs the training
     * primitive too: layer norm has no running statistics, so the two
     * compute the same y. */
    for (int k = 0; k < n_fwd_lists(d); k++) {
        TRY(cl_dnnl_step_prim(d, fwd_list(d, k), i,
                              "layer normalization forward", i, pd, prim, &s));
        cl_dnnl_arg_store(d, s, DNNL_ARG_SRC, x->src, &smd);
        cl_dnnl_arg_ext(s, DNNL_ARG_SCALE, cl_graph_param(g, n->param[0]),
                        &cmd);
        cl_dnnl_arg_ext(s, DNNL_ARG_SHIFT, cl_graph_param(g, n->param[1]),
                        &cmd);
        cl_dnnl_arg_store(d, s, DNNL_ARG_DST, d->t[rep(d, n->out)].store, &smd);
        if (train) {
            cl_dnnl_arg_store(d, s, DNNL_ARG_MEAN, x->mean, &tmd);
            cl_dnnl_arg_store(d, s, DNNL_ARG_VARIANCE, x->var, &tmd);
        }
    }
fail:
    return st;
}

cl_status cl_dnnl_layernorm_bwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[i];
    const cl_layernorm_attr *a = &n->attr.layernorm;
    const dn_norm *x = &d->nd[i].u.ln;
    dnnl_layer_normalization_desc_t ld;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    dnnl_memory_desc_t tmd, cmd, pmd;
    int dy, plain, tgt, acc;
    const dnnl_memory_desc_t *smd = &x->src_md;
    TRY(cl_dnnl_out_grad(d, i, &dy));
    TRY(cl_dnnl_plain_grad(d, i, n->in[0], &pmd, &plain, &tgt, &acc));
    if (plain < 0) {
        /* The primitive writes dx whatever: a scratch store for it when the
         * input (the image batch) takes no gradient. */
        pmd = *smd;
        TRY(cl_dnnl_md_store(d, &pmd, &plain));
    }
    stat_md(smd, &tmd);
    md_1d(&cmd, a->features);
    DN(dnnl_layer_normalization_backward_desc_init(&ld, dnnl_backward, smd, smd,
                                                   &tmd, a->eps, LN_FLAGS),
       i, "layer normalization backward descriptor");
    TRY(cl_dnnl_prim_make(d, i, "layer normalization backward", &ld, NULL,
                          d->nd[i].fwd_pd, &pd, &prim));
    TRY(cl_dnnl_step_prim(d, &d->bwd, i, "layer normalization backward",
                          tb(d, i), pd, prim, &s));
    cl_dnnl_arg_store(d, s, DNNL_ARG_SRC, x->src, smd);
    cl_dnnl_arg_store(d, s, DNNL_ARG_DIFF_DST, dy, smd);
    cl_dnnl_arg_store(d, s, DNNL_ARG_MEAN, x->mean, &tmd);
    cl_dnnl_arg_store(d, s, DNNL_ARG_VARIANCE, x->var, &tmd);
    cl_dnnl_arg_ext(s, DNNL_ARG_SCALE, cl_graph_param(g, n->param[0]), &cmd);
    cl_dnnl_arg_ext(s, DNNL_ARG_SHIFT, cl_graph_param(g, n->param[1]), &cmd);
    cl_dnnl_arg_store(d, s, DNNL_ARG_DIFF_SRC, plain, &pmd);
    cl_dnnl_arg_ext(s, DNNL_ARG_DIFF_SCALE, cl_graph_grad(g, n->param[0]),
                    &cmd);
    cl_dnnl_arg_ext(s, DNNL_ARG_DIFF_SHIFT, cl_graph_grad(g, n->param[1]),
                    &cmd);
    TRY(cl_dnnl_plain_grad_end(d, i, n->in[0], &pmd, plain, tgt, acc));
    TRY(cl_dnnl_hook_step(d, i, n->param[0]));
    TRY(cl_dnnl_hook_step(d, i, n->param[1]));
fail:
    return st;
}
