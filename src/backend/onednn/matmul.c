/* The oneDNN backend's batched matmul (attention's alpha q k^T and s v) as
 * matmul primitives, forward and backward planning side by side.
 *
 * Each of a, b and the output is a "side": a batch of matrices at given
 * strides in a store.  A plain side is (B,M,K) row-major, b broadcast over
 * the batch when it is 2-d; a side lowering made a view (lower.c) is read
 * or written in place in the tensor a row_gather would have copied it
 * from or into, as a (n0, n1) batch (the heads a dimension of their own).
 * A transposed operand is the same memory described with swapped
 * strides.  alpha is the primitive's output scale.  Backward is two more
 * matmuls on the same sides: da = alpha dy b^T and db = alpha a^T dy, the
 * latter over the B*M rows at once when b was broadcast (so its sum over
 * the batch is the product's own).  Under amp the inputs are read in the
 * compute type (bf16) and the output written in the activation type, as
 * convolutions. */
#include <omp.h>

#include "backend/onednn/internal.h"

/* Matrices of r x c elements: matrix (i0, i1) at off bytes + i0 st[0] +
 * i1 st[1] elements, its rows st[2] apart, its columns dense. */
typedef struct mm_side {
    int store;
    size_t off;
    int64_t r, c, st[3];
} mm_side;

/* (nb, r, c) row-major in store as a batch (n1 of them per n0). */
static mm_side side_plain(int store, int64_t n1, int64_t r, int64_t c)
{
    mm_side s = {store, 0, r, c, {n1 * r * c, r * c, c}};
    return s;
}

/* View v of r x c matrices in store, elements of dt. */
static mm_side side_view(const dn_view *v, int store, int64_t r, int64_t c,
                         dnnl_data_type_t dt)
{
    mm_side s = {store,
                 (size_t)(v->base * c) * dnnl_data_type_size(dt),
                 r,
                 c,
                 {v->s[0] * c, v->s[1] * c, v->s[2] * c}};
    return s;
}

/* The md of side s as an (n0, n1) batch, read transposed as c x r
 * matrices when trans; n0 = n1 = 1 is a b broadcast over the batch. */
static void side_md(dnnl_memory_desc_t *md, const mm_side *s, int64_t n0,
                    int64_t n1, int trans, dnnl_data_type_t dt)
{
    dnnl_dims_t dims = {n0, n1, trans ? s->c : s->r, trans ? s->r : s->c};
    dnnl_dims_t st = {s->st[0], s->st[1], trans ? 1 : s->st[2],
                      trans ? s->st[2] : 1};
    /* A batch dimension of 1 is given the stride it would have dense:
     * its stride addresses nothing, and with another one oneDNN 2.6
     * turns down its gemm kernels for its reference loops (Swin-T at
     * batch 1, stage 4's one window of 24 heads: 52 ms a matmul). */
    if (n0 == 1)
        st[0] = n1 * st[1];
    dnnl_status_t r = dnnl_memory_desc_init_by_strides(md, 4, dims, dt, st);
    CL_ASSERT(r == dnnl_success);
}

static cl_matmul_dims dims_of_node(const dn_ctx *d, const cl_node *n)
{
    return cl_matmul_dims_of(&n->attr.matmul, &gt(d, n->in[0])->shape,
                             &gt(d, n->in[1])->shape);
}

/* The node's batch as (n0, n1): its views' split, else (B, 1). */
static void batch_split(const dn_matmul *x, const cl_matmul_dims *m,
                        int64_t *n0, int64_t *n1)
{
    *n0 = m->B;
    *n1 = 1;
    for (int k = 0; k < 3; k++)
        if (x->v[k].x >= 0) {
            *n0 = x->v[k].n0;
            *n1 = x->v[k].n1;
        }
}

/* A matmul primitive src x w -> dst scaled by alpha, as a step of list l
 * at time (every forward list when fwd). */
static cl_status mm_step(dn_ctx *d, int i, dn_list *l, int time,
                         const char *what, float alpha, const mm_side *src,
                         const dnnl_memory_desc_t *smd, const mm_side *w,
                         const dnnl_memory_desc_t *wmd, const mm_side *dst,
                         const dnnl_memory_desc_t *dmd, int fwd)
{
    cl_status st = CL_OK;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    DN(dnnl_matmul_desc_init(&md, smd, wmd, NULL, dmd), i, "matmul descriptor");
    TRY_GOTO(cl_dnnl_attr_new(d, &attr));
    if (alpha != 1.0f)
        DN(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha), i,
           "matmul output scale");
    TRY_GOTO(cl_dnnl_prim_make(d, i, what, &md, attr, NULL, &pd, &prim));
    for (int k = 0; k < (fwd ? n_fwd_lists(d) : 1); k++) {
        TRY_GOTO(cl_dnnl_step_prim(d, fwd ? fwd_list(d, k) : l, i, what, time,
                                   pd, prim, &s));
        cl_dnnl_arg_store_at(d, s, DNNL_ARG_SRC, src->store, src->off, smd);
        cl_dnnl_arg_store_at(d, s, DNNL_ARG_WEIGHTS, w->store, w->off, wmd);
        cl_dnnl_arg_store_at(d, s, DNNL_ARG_DST, dst->store, dst->off, dmd);
    }
fail:
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return st;
}

/* Operand k (0: a, 1: b) as the forward reads it, r x c as stored. */
static mm_side operand(const dn_ctx *d, const dn_matmul *x, int k, int64_t n1,
                       int64_t r, int64_t c)
{
    const int store = k ? x->b : x->a;
    if (x->v[k].x >= 0)
        return side_view(&x->v[k], store, r, c, conv_dt(d));
    return side_plain(store, n1, r, c);
}

void cl_dnnl_matmul_init(dn_node *x)
{
    for (int k = 0; k < 3; k++)
        x->u.mm.v[k].x = -1;
    x->u.mm.attn = -1;
}

/* Node i's output as a side of its (n0, n1) batch: its own plain store,
 * or (a view) the store of the gather's output it is written into. */
static cl_status output_side(dn_ctx *d, int i, const cl_matmul_dims *m,
                             int64_t n0, int64_t n1, mm_side *y,
                             dnnl_memory_desc_t *ymd)
{
    const cl_node *n = &d->g->nodes[i];
    const dn_matmul *x = &d->nd[i].u.mm;
    dnnl_memory_desc_t full;
    dnnl_dims_t dims;
    const int yt = x->v[2].x >= 0 ? x->v[2].x : n->out;
    const cl_shape *ys = &gt(d, yt)->shape;
    dims_of(ys, dims);
    cl_dnnl_md_plain_dt(&full, ys->ndim, dims, act_dt(d));
    CL_TRY(cl_dnnl_set_md(d, n->out, &full, -1));
    const int ystore = d->t[rep(d, n->out)].store;
    *y = x->v[2].x >= 0 ? side_view(&x->v[2], ystore, m->M, m->N, act_dt(d))
                        : side_plain(ystore, n1, m->M, m->N);
    side_md(ymd, y, n0, n1, 0, act_dt(d));
    return CL_OK;
}

/* Matmul i with the scores matmul and the softmax before it as one
 * attention step (lowering chose it): q and k as the scores' matmul would
 * have read them, v as i reads it, the softmax's bias (plain), and i's
 * output, each a side described as its (n0, n1) batch. */
static cl_status attention_fwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    dn_matmul *x = &d->nd[i].u.mm;
    const cl_node *sm = &d->g->nodes[x->attn];
    const int j = gt(d, sm->in[0])->producer;
    const cl_node *sn = &d->g->nodes[j];
    dn_matmul *xs = &d->nd[j].u.mm;
    const cl_matmul_dims ms = dims_of_node(d, sn), m = dims_of_node(d, n);
    dnnl_memory_desc_t full, qmd, kmd, vmd, bmd, ymd;
    mm_side y;
    int64_t n0, n1;
    int bs = -1;
    dn_step *s;
    for (int k = 0; k < 2; k++) {
        const int t = xs->v[k].x >= 0 ? xs->v[k].x : sn->in[k];
        TRY_GOTO(cl_dnnl_plain_value(d, i, t, conv_dt(d), &full,
                                     k ? &xs->b : &xs->a));
    }
    batch_split(xs, &ms, &n0, &n1);
    const mm_side q = operand(d, xs, 0, n1, ms.M, ms.K);
    const mm_side k = operand(d, xs, 1, n1, ms.N, ms.K);
    side_md(&qmd, &q, n0, n1, 0, conv_dt(d));
    side_md(&kmd, &k, n0, n1, 0, conv_dt(d));
    const int vt = x->v[1].x >= 0 ? x->v[1].x : n->in[1];
    TRY_GOTO(cl_dnnl_plain_value(d, i, vt, conv_dt(d), &full, &x->b));
    batch_split(x, &m, &n0, &n1);
    const mm_side v = operand(d, x, 1, n1, m.K, m.N);
    side_md(&vmd, &v, n0, n1, 0, conv_dt(d));
    if (sm->n_in > 1)
        TRY_GOTO(cl_dnnl_plain_value(d, i, sm->in[1], dnnl_data_type_undef,
                                     &bmd, &bs));
    TRY_GOTO(output_side(d, i, &m, n0, n1, &y, &ymd));
    for (int l = 0; l < n_fwd_lists(d); l++) {
        TRY_GOTO(cl_dnnl_step_run(d, fwd_list(d, l), cl_dnnl_attention_run, i,
                                  "window attention forward", i, &s));
        s->aux = omp_get_max_threads();
        cl_dnnl_arg_store_at(d, s, AT_Q, q.store, q.off, &qmd);
        cl_dnnl_arg_store_at(d, s, AT_K, k.store, k.off, &kmd);
        cl_dnnl_arg_store_at(d, s, AT_V, v.store, v.off, &vmd);
        if (bs >= 0)
            cl_dnnl_arg_store(d, s, AT_BIAS, bs, &bmd);
        cl_dnnl_arg_store_at(d, s, AT_Y, y.store, y.off, &ymd);
    }
fail:
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
    mm_side y;
    int64_t n0, n1;
    if (x->attn >= 0)
        return attention_fwd(d, i);
    batch_split(x, &m, &n0, &n1);
    for (int k = 0; k < 2; k++) {
        const int t = x->v[k].x >= 0 ? x->v[k].x : n->in[k];
        TRY_GOTO(
            cl_dnnl_plain_value(d, i, t, conv_dt(d), &full, k ? &x->b : &x->a));
    }
    const mm_side a = operand(d, x, 0, n1, m.M, m.K);
    /* b as stored: (K, N), or (N, K) read transposed. */
    const mm_side b =
        operand(d, x, 1, n1, at->trans_b ? m.N : m.K, at->trans_b ? m.K : m.N);
    side_md(&amd, &a, n0, n1, 0, conv_dt(d));
    if (m.b_batched)
        side_md(&bmd, &b, n0, n1, at->trans_b, conv_dt(d));
    else
        side_md(&bmd, &b, 1, 1, at->trans_b, conv_dt(d));
    TRY_GOTO(output_side(d, i, &m, n0, n1, &y, &ymd));
    TRY_GOTO(mm_step(d, i, NULL, i, "matmul forward", at->alpha, &a, &amd, &b,
                     &bmd, &y, &ymd, 1));
fail:
    return st;
}

/* Where the gradient of operand k goes: a plain store (then *tgt, *acc as
 * cl_dnnl_plain_grad gives them), or, for a view, the gradient of the
 * tensor it views, written in place (*tgt -1).  *g is -1 when the operand
 * takes no gradient. */
static cl_status grad_side(dn_ctx *d, int i, int k, int64_t n1, int64_t r,
                           int64_t c, mm_side *g, dnnl_data_type_t *dt,
                           dnnl_memory_desc_t *pm, int *tgt, int *acc)
{
    const cl_node *n = &d->g->nodes[i];
    const dn_view *v = &d->nd[i].u.mm.v[k];
    int dx;
    *tgt = -1;
    g->store = -1;
    if (v->x < 0) {
        CL_TRY(cl_dnnl_plain_grad(d, i, n->in[k], pm, &dx, tgt, acc));
        if (*tgt >= 0) {
            *g = side_plain(dx, n1, r, c);
            *dt = pm->data_type;
        }
        return CL_OK;
    }
    /* Lowering checked that the views of this tensor (a token linear's
     * output, plain) read each of its rows once: each writes its part. */
    dn_tensor *t = &d->t[rep(d, v->x)];
    if (t->dstore < 0)
        CL_TRY(cl_dnnl_md_store(d, &t->md, &t->dstore));
    *dt = t->md.data_type;
    *g = side_view(v, t->dstore, r, c, *dt);
    return CL_OK;
}

cl_status cl_dnnl_matmul_bwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    const cl_matmul_attr *at = &n->attr.matmul;
    const cl_matmul_dims m = dims_of_node(d, n);
    const dn_matmul *x = &d->nd[i].u.mm;
    const dnnl_data_type_t cdt = conv_dt(d);
    dnnl_memory_desc_t dyc, dymd, wmd, smd, gmd, pm;
    dnnl_data_type_t gdt;
    int64_t n0, n1;
    int dy, tgt, acc;
    mm_side g;
    batch_split(x, &m, &n0, &n1);
    TRY_GOTO(cl_dnnl_out_grad(d, i, &dy));
    TRY_GOTO(
        cl_dnnl_grad_as(d, i, dy, &d->t[rep(d, n->out)].md, cdt, &dyc, &dy));
    const mm_side dys = x->v[2].x >= 0 ? side_view(&x->v[2], dy, m.M, m.N, cdt)
                                       : side_plain(dy, n1, m.M, m.N);
    side_md(&dymd, &dys, n0, n1, 0, cdt);
    const mm_side a = operand(d, x, 0, n1, m.M, m.K);
    const mm_side b =
        operand(d, x, 1, n1, at->trans_b ? m.N : m.K, at->trans_b ? m.K : m.N);

    /* da (M,K) = alpha dy (M,N) b^T: b's memory read transposed, or as it
     * is when it holds b^T already. */
    TRY_GOTO(grad_side(d, i, 0, n1, m.M, m.K, &g, &gdt, &pm, &tgt, &acc));
    if (g.store >= 0) {
        if (m.b_batched)
            side_md(&wmd, &b, n0, n1, !at->trans_b, cdt);
        else
            side_md(&wmd, &b, 1, 1, !at->trans_b, cdt);
        side_md(&gmd, &g, n0, n1, 0, gdt);
        TRY_GOTO(mm_step(d, i, &d->bwd, tb(d, i), "matmul backward a",
                         at->alpha, &dys, &dymd, &b, &wmd, &g, &gmd, 0));
        TRY_GOTO(
            cl_dnnl_plain_grad_end(d, i, n->in[0], &pm, g.store, tgt, acc));
    }

    /* db = alpha a^T dy (K,N), or alpha dy^T a (N,K) with trans_b; per
     * matrix when b is batched, else over all B*M rows at once. */
    const int64_t rn = at->trans_b ? m.N : m.K, cn = at->trans_b ? m.K : m.N;
    TRY_GOTO(grad_side(d, i, 1, n1, rn, cn, &g, &gdt, &pm, &tgt, &acc));
    if (g.store >= 0) {
        mm_side src = at->trans_b ? dys : a, w = at->trans_b ? a : dys;
        if (m.b_batched) {
            side_md(&smd, &src, n0, n1, 1, cdt);
            side_md(&wmd, &w, n0, n1, 0, cdt);
            side_md(&gmd, &g, n0, n1, 0, gdt);
        } else {
            /* The B*M rows of src and w as one matrix each (both plain). */
            src.r = w.r = (int64_t)m.B * m.M;
            side_md(&smd, &src, 1, 1, 1, cdt);
            side_md(&wmd, &w, 1, 1, 0, cdt);
            side_md(&gmd, &g, 1, 1, 0, gdt);
        }
        TRY_GOTO(mm_step(d, i, &d->bwd, tb(d, i), "matmul backward b",
                         at->alpha, &src, &smd, &w, &wmd, &g, &gmd, 0));
        TRY_GOTO(
            cl_dnnl_plain_grad_end(d, i, n->in[1], &pm, g.store, tgt, acc));
    }
fail:
    return st;
}
