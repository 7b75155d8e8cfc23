/* Plain views for the ops that see an activation as rows (tokens.c,
 * matmul.c, linear.c over rank 3 and up, norm.c, softmax.c): the value of
 * a tensor in plain row-major memory (its own store, or a copy reordered
 * from the layout a convolution chose), and its gradient written plain
 * and reordered back into the tensor's layout.  docs/onednn.md ("Ops that
 * see rows") says why. */
#include <dnnl.h>

#include "backend/onednn/internal.h"

void cl_dnnl_md_plain_dt(dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims,
                         dnnl_data_type_t dt)
{
    cl_dnnl_md_plain(md, nd, dims);
    *md = md_as(md, dt);
}

cl_status cl_dnnl_plain_value(dn_ctx *d, int i, int x, dnnl_data_type_t dt,
                              dnnl_memory_desc_t *md, int *store)
{
    CL_TRY(cl_dnnl_ensure_input_md(d, x));
    const dn_tensor *t = &d->t[rep(d, x)];
    if (dt == dnnl_data_type_undef)
        dt = t->md.data_type;
    dnnl_memory_desc_t own;
    cl_dnnl_md_plain_dt(&own, t->md.ndims, t->md.dims, t->md.data_type);
    if (md_eq(&t->md, &own))
        return cl_dnnl_value_as(d, i, x, dt, md, store);
    /* Blocked or channels-last: layout and type in one reorder. */
    cl_dnnl_md_plain_dt(md, t->md.ndims, t->md.dims, dt);
    CL_TRY(cl_dnnl_md_store(d, md, store));
    for (int k = 0; k < n_fwd_lists(d); k++)
        CL_TRY(cl_dnnl_reorder_step(d, fwd_list(d, k), i, i, "plain copy",
                                    t->store, &t->md, *store, md));
    return CL_OK;
}

cl_status cl_dnnl_plain_grad(dn_ctx *d, int i, int x, dnnl_memory_desc_t *pm,
                             int *dx, int *tgt, int *acc)
{
    CL_TRY(cl_dnnl_grad_target(d, i, x, tgt, acc));
    *dx = *tgt;
    if (*tgt < 0)
        return CL_OK;
    const dnnl_memory_desc_t *md = &d->t[rep(d, x)].md;
    cl_dnnl_md_plain_dt(pm, md->ndims, md->dims, md->data_type);
    if (!md_eq(md, pm))
        CL_TRY(cl_dnnl_md_store(d, pm, dx));
    return CL_OK;
}

cl_status cl_dnnl_plain_grad_end(dn_ctx *d, int i, int x,
                                 const dnnl_memory_desc_t *pm, int dx, int tgt,
                                 int acc)
{
    if (tgt < 0)
        return CL_OK;
    if (dx != tgt)
        CL_TRY(cl_dnnl_reorder_step(d, &d->bwd, i, tb(d, i),
                                    "plain gradient back", dx, pm, tgt,
                                    &d->t[rep(d, x)].md));
    if (acc)
        CL_TRY(cl_dnnl_accumulate(d, i, x, tgt));
    return CL_OK;
}
