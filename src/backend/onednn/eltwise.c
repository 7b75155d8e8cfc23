/* The oneDNN backend's elementwise activations, forward and backward
 * planning side by side: the ReLU that did not fuse into the node before
 * it (backward reads the output) and the exact GELU (gelu_erf; backward
 * reads the input).  Both work on any layout and keep their input's. */
#include "backend/onednn/internal.h"

/* Node i's forward as oneDNN's eltwise alg. */
static cl_status eltwise_fwd(dn_ctx *d, int i, dnnl_alg_kind_t alg,
                             const char *what)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    dnnl_eltwise_desc_t ed;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    TRY_GOTO(cl_dnnl_ensure_input_md(d, n->in[0]));
    dnnl_memory_desc_t md = *in_md(d, n->in[0]);
    DN(dnnl_eltwise_forward_desc_init(&ed,
                                      d->mode == CL_PLAN_TRAIN
                                          ? dnnl_forward_training
                                          : dnnl_forward_inference,
                                      alg, &md, 0.0f, 0.0f),
       i, what);
    TRY_GOTO(cl_dnnl_prim_make(d, i, what, &ed, NULL, NULL, &pd, &prim));
    d->nd[i].fwd_pd = pd;
    TRY_GOTO(cl_dnnl_set_md(d, n->out, &md, -1));
    for (int k = 0; k < n_fwd_lists(d); k++) {
        TRY_GOTO(
            cl_dnnl_step_prim(d, fwd_list(d, k), i, what, i, pd, prim, &s));
        cl_dnnl_arg_store(d, s, DNNL_ARG_SRC, d->t[rep(d, n->in[0])].store,
                          &md);
        cl_dnnl_arg_store(d, s, DNNL_ARG_DST, d->t[rep(d, n->out)].store, &md);
    }
fail:
    return st;
}

/* Node i's backward as oneDNN's eltwise alg, which reads the output
 * (reads_dst) or the input. */
static cl_status eltwise_bwd(dn_ctx *d, int i, dnnl_alg_kind_t alg,
                             int reads_dst, const char *what)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    dnnl_eltwise_desc_t ed;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    int dy, tgt, acc;
    const dnnl_memory_desc_t *md = in_md(d, n->out);
    TRY_GOTO(cl_dnnl_out_grad(d, i, &dy));
    TRY_GOTO(cl_dnnl_grad_target(d, i, n->in[0], &tgt, &acc));
    if (tgt < 0)
        return CL_OK;
    DN(dnnl_eltwise_backward_desc_init(&ed, alg, md, md, 0.0f, 0.0f), i, what);
    TRY_GOTO(
        cl_dnnl_prim_make(d, i, what, &ed, NULL, d->nd[i].fwd_pd, &pd, &prim));
    TRY_GOTO(cl_dnnl_step_prim(d, &d->bwd, i, what, tb(d, i), pd, prim, &s));
    if (reads_dst)
        cl_dnnl_arg_store(d, s, DNNL_ARG_DST, d->t[rep(d, n->out)].store, md);
    else
        cl_dnnl_arg_store(d, s, DNNL_ARG_SRC, d->t[rep(d, n->in[0])].store, md);
    cl_dnnl_arg_store(d, s, DNNL_ARG_DIFF_DST, dy, md);
    cl_dnnl_arg_store(d, s, DNNL_ARG_DIFF_SRC, tgt, md);
    if (acc)
        TRY_GOTO(cl_dnnl_accumulate(d, i, n->in[0], tgt));
fail:
    return st;
}

cl_status cl_dnnl_relu_fwd(dn_ctx *d, int i)
{
    return eltwise_fwd(d, i, dnnl_eltwise_relu_use_dst_for_bwd, "relu forward");
}

cl_status cl_dnnl_relu_bwd(dn_ctx *d, int i)
{
    return eltwise_bwd(d, i, dnnl_eltwise_relu_use_dst_for_bwd, 1,
                       "relu backward");
}

cl_status cl_dnnl_gelu_fwd(dn_ctx *d, int i)
{
    return eltwise_fwd(d, i, dnnl_eltwise_gelu_erf, "gelu forward");
}

cl_status cl_dnnl_gelu_bwd(dn_ctx *d, int i)
{
    return eltwise_bwd(d, i, dnnl_eltwise_gelu_erf, 0, "gelu backward");
}
