/* The oneDNN backend's residual add as a binary primitive (a ReLU after
 * it fused), forward and backward planning side by side; backward hands
 * the one gradient to both inputs, sharing its buffer where it can. */
#include "backend/onednn/internal.h"

cl_status cl_dnnl_add_fwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    dn_node *x = &d->nd[i];
    dnnl_primitive_attr_t attr = NULL;
    dnnl_binary_desc_t bd;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    int a0 = n->in[x->u.add.swap ? 1 : 0], a1 = n->in[x->u.add.swap ? 0 : 1];
    TRY_GOTO(cl_dnnl_ensure_input_md(d, a0));
    TRY_GOTO(cl_dnnl_ensure_input_md(d, a1));
    dnnl_memory_desc_t m0 = *in_md(d, a0), m1 = *in_md(d, a1);
    if (m0.data_type != m1.data_type)
        return cl_error(CL_ERR_UNSUPPORTED,
                        "%s: add of an f32 and a bf16 tensor (amp_level O%d "
                        "gives both inputs of an add the same type in a "
                        "ResNet; this graph mixes them)",
                        n->name, d->amp);
    DN(dnnl_binary_desc_init(&bd, dnnl_binary_add, &m0, &m1, &m0), i,
       "binary add descriptor");
    TRY_GOTO(cl_dnnl_attr_post(
        d, 0, x->relu ? dnnl_eltwise_relu : dnnl_alg_kind_undef, &attr));
    TRY_GOTO(
        cl_dnnl_prim_make(d, i, "binary add", &bd, attr, NULL, &pd, &prim));
    dnnl_primitive_attr_destroy(attr);
    attr = NULL;
    x->fwd_pd = pd;
    TRY_GOTO(cl_dnnl_set_md(d, n->out, &m0,
                            x->u.add.inplace ? d->t[rep(d, a0)].store : -1));
    if (x->u.add.inplace)
        d->t[a0].clobbered = 1;
    for (int k = 0; k < n_fwd_lists(d); k++) {
        TRY_GOTO(cl_dnnl_step_prim(d, fwd_list(d, k), i, "binary add", i, pd,
                                   prim, &s));
        cl_dnnl_arg_store(d, s, DNNL_ARG_SRC_0, d->t[rep(d, a0)].store, &m0);
        cl_dnnl_arg_store(d, s, DNNL_ARG_SRC_1, d->t[rep(d, a1)].store, &m1);
        cl_dnnl_arg_store(d, s, DNNL_ARG_DST, d->t[rep(d, n->out)].store, &m0);
    }
fail:
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return st;
}

/* Whether a tensor other than `except` shares gradient store ds and has
 * its producer's backward still to come after node i's. */
static int dstore_pending(const dn_ctx *d, int ds, int except, int i)
{
    for (int t = 0; t < d->g->n_tensors; t++)
        if (d->t[t].rep == t && t != except && d->t[t].dstore == ds &&
            gt(d, t)->producer < i)
            return 1;
    return 0;
}

cl_status cl_dnnl_add_bwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    dn_node *x = &d->nd[i];
    int out = rep(d, n->out), dy;
    const dnnl_memory_desc_t *md = &d->t[out].md;
    TRY_GOTO(cl_dnnl_out_grad(d, i, &dy));
    if (x->relu) {
        dnnl_eltwise_desc_t ed;
        dnnl_primitive_desc_t pd;
        dnnl_primitive_t prim;
        dn_step *s;
        int to = dy;
        /* In place unless another tensor still reads this gradient. */
        if (dstore_pending(d, dy, out, i))
            TRY_GOTO(cl_dnnl_md_store(d, md, &to));
        DN(dnnl_eltwise_backward_desc_init(
               &ed, dnnl_eltwise_relu_use_dst_for_bwd, md, md, 0.0f, 0.0f),
           i, "relu backward descriptor");
        /* The forward hint: the ReLU fused into the binary add. */
        dnnl_eltwise_desc_t fd;
        dnnl_primitive_desc_t fpd;
        dnnl_primitive_t fprim;
        DN(dnnl_eltwise_forward_desc_init(&fd, dnnl_forward_training,
                                          dnnl_eltwise_relu_use_dst_for_bwd, md,
                                          0.0f, 0.0f),
           i, "relu forward descriptor");
        TRY_GOTO(cl_dnnl_prim_make(d, i, "relu forward", &fd, NULL, NULL, &fpd,
                                   &fprim));
        TRY_GOTO(cl_dnnl_prim_make(d, i, "relu backward", &ed, NULL, fpd, &pd,
                                   &prim));
        TRY_GOTO(cl_dnnl_step_prim(d, &d->bwd, i, "relu backward", tb(d, i), pd,
                                   prim, &s));
        cl_dnnl_arg_store(d, s, DNNL_ARG_DST, d->t[out].store, md);
        cl_dnnl_arg_store(d, s, DNNL_ARG_DIFF_DST, dy, md);
        cl_dnnl_arg_store(d, s, DNNL_ARG_DIFF_SRC, to, md);
        dy = to;
    }
    for (int k = 0; k < n->n_in; k++) {
        int in = n->in[k], r = rep(d, in);
        if (in == d->g->input || r == d->g->input)
            continue;
        if (k == 1 && n->in[0] == in) {
            /* add(a, a): the second contribution of the same tensor. */
            TRY_GOTO(cl_dnnl_accumulate(d, i, in, dy));
            continue;
        }
        if (d->t[r].dstore >= 0) {
            TRY_GOTO(cl_dnnl_accumulate(d, i, in, dy));
        } else if (d->ncons[in] == 1 && md_eq(&d->t[r].md, md)) {
            /* Read by this add alone: nothing else will write its gradient,
             * so it can be the very same buffer. */
            d->t[r].dstore = dy;
            cl_dnnl_touch(d, dy, tb(d, i));
        } else {
            TRY_GOTO(cl_dnnl_md_store(d, &d->t[r].md, &d->t[r].dstore));
            if (md_eq(&d->t[r].md, md))
                TRY_GOTO(cl_dnnl_reorder_step(d, &d->bwd, i, tb(d, i),
                                              "gradient copy", dy, md,
                                              d->t[r].dstore, md));
            else {
                st = cl_error(CL_ERR_UNSUPPORTED,
                              "%s: add inputs in different layouts", n->name);
                goto fail;
            }
        }
    }
fail:
    return st;
}
