/* The oneDNN backend's batched matmul (attention's alpha q k^T and s v) as
 * matmul primitives, forward and backward planning side by side.
 *
 * The leading dimensions collapse to one batch dimension B: a is read as
 * (B,M,K) and b as (B or 1,K,N), a transposed b being the same memory
 * described with swapped strides, a 2-d b broadcast over B.  alpha is the
 * primitive's output scale.  Backward is two more matmuls on views of the
 * same memory: da = alpha dy b^T and db = alpha a^T dy, the latter over
 * the B*M rows at once when b was broadcast (so its sum over the batch is
 * the product's own).  Under amp the inputs are read in the compute type
 * (bf16) and the output written in the activation type, as convolutions. */
#include "backend/onednn/internal.h"

/* A 3-d md of memory holding (nb, r, c) row-major, read as (nb, r, c) or,
 * transposed, as (nb, c, r); nb 0 gives the 2-d (r, c) or (c, r). */
static void view(dnnl_memory_desc_t *md, int64_t nb, int64_t r, int64_t c,
                 int trans, dnnl_data_type_t dt)
{
    dnnl_dims_t dims, strides;
    int k = 0;
    if (nb > 0) {
        dims[0] = nb;
        strides[0] = r * c;
        k = 1;
    }
    dims[k] = trans ? c : r;
    dims[k + 1] = trans ? r : c;
    strides[k] = trans ? 1 : c;
    strides[k + 1] = trans ? c : 1;
    dnnl_status_t s =
        dnnl_memory_desc_init_by_strides(md, k + 2, dims, dt, strides);
    CL_ASSERT(s == dnnl_success);
}

static cl_matmul_dims dims_of_node(const dn_ctx *d, const cl_node *n)
{
    return cl_matmul_dims_of(&n->attr.matmul, &gt(d, n->in[0])->shape,
                             &gt(d, n->in[1])->shape);
}

/* A matmul primitive src x weights -> dst scaled by alpha, as a step of
 * list l at time. */
static cl_status mm_step(dn_ctx *d, int i, dn_list *l, int time,
                         const char *what, float alpha, int src,
                         const dnnl_memory_desc_t *smd, int w,
                         const dnnl_memory_desc_t *wmd, int dst,
                         const dnnl_memory_desc_t *dmd, int fwd)
{
    cl_status st = CL_OK;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    DN(dnnl_matmul_desc_init(&md, smd, wmd, NULL, dmd), i, "matmul descriptor");
    TRY(cl_dnnl_attr_new(d, &attr));
    if (alpha != 1.0f)
        DN(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha), i,
           "matmul output scale");
    TRY(cl_dnnl_prim_make(d, i, what, &md, attr, NULL, &pd, &prim));
    for (int k = 0; k < (fwd ? n_fwd_lists(d) : 1); k++) {
        TRY(cl_dnnl_step_prim(d, fwd ? fwd_list(d, k) : l, i, what, time, pd,
                              prim, &s));
        cl_dnnl_arg_store(d, s, DNNL_ARG_SRC, src, smd);
        cl_dnnl_arg_store(d, s, DNNL_ARG_WEIGHTS, w, wmd);
        cl_dnnl_arg_store(d, s, DNNL_ARG_DST, dst, dmd);
    }
fail:
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return st;
}

cl_status cl_dnnl_matmul_fwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    const cl_matmul_attr *at = &n->attr.matmul;
    const cl_matmul_dims m = dims_of_node(d, n);
    dn_matmul *x = &d->nd[i].u.mm;
    dnnl_memory_desc_t full, amd, bmd, ymd;
    dnnl_dims_t dims;
    TRY(cl_dnnl_plain_value(d, i, n->in[0], conv_dt(d), &full, &x->a));
    TRY(cl_dnnl_plain_value(d, i, n->in[1], conv_dt(d), &full, &x->b));
    view(&amd, m.B, m.M, m.K, 0, conv_dt(d));
    /* b's memory: (Bb, K, N), or (Bb, N, K) read transposed. */
    const int64_t nb = m.b_batched ? m.B : 1;
    if (at->trans_b)
        view(&bmd, nb, m.N, m.K, 1, conv_dt(d));
    else
        view(&bmd, nb, m.K, m.N, 0, conv_dt(d));
    view(&ymd, m.B, m.M, m.N, 0, act_dt(d));
    const cl_shape *ys = &gt(d, n->out)->shape;
    dims_of(ys, dims);
    cl_dnnl_md_plain_dt(&full, ys->ndim, dims, act_dt(d));
    TRY(cl_dnnl_set_md(d, n->out, &full, -1));
    TRY(mm_step(d, i, NULL, i, "matmul forward", at->alpha, x->a, &amd, x->b,
                &bmd, d->t[rep(d, n->out)].store, &ymd, 1));
fail:
    return st;
}

cl_status cl_dnnl_matmul_bwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    const cl_matmul_attr *at = &n->attr.matmul;
    const cl_matmul_dims m = dims_of_node(d, n);
    const dn_matmul *x = &d->nd[i].u.mm;
    const dnnl_data_type_t cdt = conv_dt(d);
    const int64_t nb = m.b_batched ? m.B : 1;
    dnnl_memory_desc_t dyc, dymd, wmd, smd, gmd, pm;
    int dy, dx, tgt, acc;
    TRY(cl_dnnl_out_grad(d, i, &dy));
    TRY(cl_dnnl_grad_as(d, i, dy, &d->t[rep(d, n->out)].md, cdt, &dyc, &dy));
    view(&dymd, m.B, m.M, m.N, 0, cdt);

    /* da (B,M,K) = alpha dy (B,M,N) b^T, b^T (Bb,N,K): b's memory read
     * transposed, or as it is when it holds b^T already. */
    TRY(cl_dnnl_plain_grad(d, i, n->in[0], &pm, &dx, &tgt, &acc));
    if (tgt >= 0) {
        if (at->trans_b)
            view(&wmd, nb, m.N, m.K, 0, cdt);
        else
            view(&wmd, nb, m.K, m.N, 1, cdt);
        view(&gmd, m.B, m.M, m.K, 0, pm.data_type);
        TRY(mm_step(d, i, &d->bwd, tb(d, i), "matmul backward a", at->alpha, dy,
                    &dymd, x->b, &wmd, dx, &gmd, 0));
        TRY(cl_dnnl_plain_grad_end(d, i, n->in[0], &pm, dx, tgt, acc));
    }

    /* db = alpha a^T dy (K,N), or alpha dy^T a (N,K) with trans_b; per
     * matrix when b is batched, else over all B*M rows at once. */
    TRY(cl_dnnl_plain_grad(d, i, n->in[1], &pm, &dx, &tgt, &acc));
    if (tgt >= 0) {
        const int64_t bb = m.b_batched ? m.B : 0;
        const int64_t rows = m.b_batched ? m.M : (int64_t)m.B * m.M;
        const int64_t rn = at->trans_b ? m.N : m.K;
        const int64_t cn = at->trans_b ? m.K : m.N;
        int src = at->trans_b ? dy : x->a, w = at->trans_b ? x->a : dy;
        /* src^T: (bb, rows, rn) memory read transposed; w (bb, rows, cn). */
        view(&smd, bb, rows, rn, 1, cdt);
        view(&wmd, bb, rows, cn, 0, cdt);
        view(&gmd, bb, rn, cn, 0, pm.data_type);
        TRY(mm_step(d, i, &d->bwd, tb(d, i), "matmul backward b", at->alpha,
                    src, &smd, w, &wmd, dx, &gmd, 0));
        TRY(cl_dnnl_plain_grad_end(d, i, n->in[1], &pm, dx, tgt, acc));
    }
fail:
    return st;
}
