/* The oneDNN backend's softmax over the last axis of x + bias + mask
 * (Swin's window attention), forward and backward planning side by side.
 *
 * Forward: without bias and mask, oneDNN's softmax from x into y; with
 * them, a loop of ours writes z = x + b + m (added in f32, in that order,
 * as the reference does, and stored in x's type) into y's own buffer and
 * the softmax then runs in place there, so z takes no memory of its own.
 * Backward: oneDNN's softmax backward (it reads y) writes dz straight into
 * x's gradient; the bias's gradient is dz summed over the bias's broadcast
 * dimensions by the reference reduction (cl_softmax_bias_grad: one thread
 * per bias row, rows in order, in double, so the result does not depend
 * on the thread count), through f32 copies under amp O2.  Everything is
 * plain row-major (norm.c makes plain copies of what is not). */

#include <string.h>

#include "backend/onednn/internal.h"
#include "tensor/tensor.h"

/* Positions of the arguments of the loops (dn_arg.arg). */
enum { SM_X = 0, SM_B = 1, SM_Y = 2, SM_DZ = 0, SM_DB = 1 };

/* Elements below which a loop runs on one thread. */
#define SM_PAR_MIN ((int64_t)1 << 15)

/* The sizes of node i's call (its bias in[1] and mask buf[0], if any). */
static cl_softmax_dims dims_of_node(const dn_ctx *d, int i)
{
    const cl_graph *g = d->g;
    const cl_node *n = &g->nodes[i];
    return cl_softmax_dims_of(&g->tensors[n->in[0]].shape,
                              n->n_in > 1 ? &g->tensors[n->in[1]].shape : NULL,
                              n->n_buf > 0 ? &g->tensors[n->buf[0]].shape
                                           : NULL);
}

static inline float ld(const void *p, int bf16, int64_t k)
{
    if (!bf16)
        return ((const float *)p)[k];
    uint32_t u = (uint32_t)((const uint16_t *)p)[k] << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* One row of z = x + b + m (b, m NULL when absent), f32 throughout: the
 * common case, kept free of type tests. */
static inline void add_row_f32(float *y, const float *x, const float *b,
                               const float *m, int C)
{
    if (b && m)
        for (int c = 0; c < C; c++)
            y[c] = x[c] + b[c] + m[c];
    else if (b)
        for (int c = 0; c < C; c++)
            y[c] = x[c] + b[c];
    else
        for (int c = 0; c < C; c++)
            y[c] = x[c] + m[c];
}

/* y = x + b + m, row by row; the mask is read from the buffer arena. */
static cl_status run_add(dn_ctx *d, const dn_step *s)
{
    const cl_node *n = &d->g->nodes[s->node];
    const cl_softmax_dims dm = dims_of_node(d, s->node);
    const void *x = NULL, *b = NULL;
    void *y = NULL;
    int xbf = 0, bbf = 0;
    for (int j = 0; j < s->nargs; j++) {
        void *p = cl_dnnl_arg_ptr(d, &s->args[j]);
        const int bf = md_bf16(&s->args[j].md);
        if (s->args[j].arg == SM_X) {
            x = p;
            xbf = bf;
        } else if (s->args[j].arg == SM_B) {
            b = p;
            bbf = bf;
        } else if (s->args[j].arg == SM_Y) {
            y = p;
        }
    }
    const float *m = n->n_buf > 0 ? cl_graph_buffer(d->g, n->buf[0]) : NULL;
    const int C = dm.C;
#pragma omp parallel for schedule(static) if (dm.rows * C >= SM_PAR_MIN)
    for (int64_t r = 0; r < dm.rows; r++) {
        const int64_t bo = b ? cl_softmax_row_of(&dm, dm.sb, r) * C : 0;
        const float *mr = m ? m + cl_softmax_row_of(&dm, dm.sm, r) * C : NULL;
        if (!xbf && !bbf) {
            add_row_f32((float *)y + r * C, (const float *)x + r * C,
                        b ? (const float *)b + bo : NULL, mr, C);
            continue;
        }
        /* amp O2: widened to f32, added as above, rounded once. */
        for (int c = 0; c < C; c++) {
            float z = ld(x, xbf, r * C + c);
            if (b)
                z += ld(b, bbf, bo + c);
            if (mr)
                z += mr[c];
            if (xbf)
                ((uint16_t *)y)[r * C + c] = cl_bf16_from_f32(z);
            else
                ((float *)y)[r * C + c] = z;
        }
    }
    return CL_OK;
}

/* db (f32) = dz (f32) summed over the bias's broadcast dimensions. */
static cl_status run_bias_grad(dn_ctx *d, const dn_step *s)
{
    const cl_softmax_dims dm = dims_of_node(d, s->node);
    const float *dz = NULL;
    float *db = NULL;
    for (int j = 0; j < s->nargs; j++) {
        if (s->args[j].arg == SM_DZ)
            dz = cl_dnnl_arg_ptr(d, &s->args[j]);
        else if (s->args[j].arg == SM_DB)
            db = cl_dnnl_arg_ptr(d, &s->args[j]);
    }
    cl_softmax_bias_grad(db, dz, &dm);
    return CL_OK;
}

cl_status cl_dnnl_softmax_fwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    const int has_b = n->n_in > 1, has_m = n->n_buf > 0;
    dnnl_softmax_desc_t sd;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    dnnl_memory_desc_t xmd, bmd;
    int xs, bs = -1;
    TRY(cl_dnnl_plain_value(d, i, n->in[0], dnnl_data_type_undef, &xmd, &xs));
    if (has_b)
        TRY(cl_dnnl_plain_value(d, i, n->in[1], dnnl_data_type_undef, &bmd,
                                &bs));
    DN(dnnl_softmax_forward_desc_init(&sd,
                                      d->mode == CL_PLAN_TRAIN
                                          ? dnnl_forward_training
                                          : dnnl_forward_inference,
                                      &xmd, xmd.ndims - 1),
       i, "softmax forward descriptor");
    TRY(cl_dnnl_prim_make(d, i, "softmax forward", &sd, NULL, NULL, &pd,
                          &prim));
    d->nd[i].fwd_pd = pd;
    TRY(cl_dnnl_set_md(d, n->out, &xmd, -1));
    const int ys = d->t[rep(d, n->out)].store;
    for (int k = 0; k < n_fwd_lists(d); k++) {
        if (has_b || has_m) {
            TRY(cl_dnnl_step_run(d, fwd_list(d, k), run_add, i,
                                 "softmax: add bias and mask", i, &s));
            cl_dnnl_arg_store(d, s, SM_X, xs, &xmd);
            if (has_b)
                cl_dnnl_arg_store(d, s, SM_B, bs, &bmd);
            cl_dnnl_arg_store(d, s, SM_Y, ys, &xmd);
        }
        TRY(cl_dnnl_step_prim(d, fwd_list(d, k), i, "softmax forward", i, pd,
                              prim, &s));
        cl_dnnl_arg_store(d, s, DNNL_ARG_SRC, has_b || has_m ? ys : xs, &xmd);
        cl_dnnl_arg_store(d, s, DNNL_ARG_DST, ys, &xmd);
    }
fail:
    return st;
}

/* A reorder of store `from` (md) into store `to` (want) in backward. */
static cl_status bwd_reorder(dn_ctx *d, int i, const char *what, int from,
                             const dnnl_memory_desc_t *md, int to,
                             const dnnl_memory_desc_t *want)
{
    cl_status st = CL_OK;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    TRY(cl_dnnl_reorder_make(d, i, what, md, want, &pd, &prim));
    TRY(cl_dnnl_step_prim(d, &d->bwd, i, what, tb(d, i), pd, prim, &s));
    cl_dnnl_arg_store(d, s, DNNL_ARG_FROM, from, md);
    cl_dnnl_arg_store(d, s, DNNL_ARG_TO, to, want);
fail:
    return st;
}

cl_status cl_dnnl_softmax_bwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    const int bias_grad = n->n_in > 1 && gt(d, n->in[1])->kind == CL_GT_ACT &&
                          n->in[1] != d->g->input &&
                          rep(d, n->in[1]) != d->g->input;
    dnnl_softmax_desc_t sd;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    dnnl_memory_desc_t pmd, bpmd;
    int dy, plain, tgt, acc, bplain = -1, btgt = -1, bacc = 0;
    const int out = rep(d, n->out);
    const dnnl_memory_desc_t *ymd = &d->t[out].md;
    TRY(cl_dnnl_out_grad(d, i, &dy));
    TRY(cl_dnnl_plain_grad(d, i, n->in[0], &pmd, &plain, &tgt, &acc));
    if (plain < 0 && !bias_grad)
        return CL_OK;
    if (plain < 0) {
        /* x takes no gradient but the bias does: dz in a store of its own. */
        pmd = *ymd;
        TRY(cl_dnnl_md_store(d, &pmd, &plain));
    }
    DN(dnnl_softmax_backward_desc_init(&sd, &pmd, ymd, ymd->ndims - 1), i,
       "softmax backward descriptor");
    TRY(cl_dnnl_prim_make(d, i, "softmax backward", &sd, NULL, d->nd[i].fwd_pd,
                          &pd, &prim));
    TRY(cl_dnnl_step_prim(d, &d->bwd, i, "softmax backward", tb(d, i), pd, prim,
                          &s));
    cl_dnnl_arg_store(d, s, DNNL_ARG_DST, d->t[out].store, ymd);
    cl_dnnl_arg_store(d, s, DNNL_ARG_DIFF_DST, dy, ymd);
    cl_dnnl_arg_store(d, s, DNNL_ARG_DIFF_SRC, plain, &pmd);
    if (bias_grad) {
        /* The reduction reads and writes f32: copies when dz or the bias's
         * gradient is bf16. */
        dnnl_memory_desc_t zf = md_as(&pmd, dnnl_f32), bf;
        int dz = plain, db;
        TRY(cl_dnnl_plain_grad(d, i, n->in[1], &bpmd, &bplain, &btgt, &bacc));
        bf = md_as(&bpmd, dnnl_f32);
        if (md_bf16(&pmd)) {
            TRY(cl_dnnl_md_store(d, &zf, &dz));
            TRY(bwd_reorder(d, i, "softmax: dz to f32", plain, &pmd, dz, &zf));
        }
        db = bplain;
        if (md_bf16(&bpmd))
            TRY(cl_dnnl_md_store(d, &bf, &db));
        TRY(cl_dnnl_step_run(d, &d->bwd, run_bias_grad, i,
                             "softmax: bias gradient", tb(d, i), &s));
        cl_dnnl_arg_store(d, s, SM_DZ, dz, &zf);
        cl_dnnl_arg_store(d, s, SM_DB, db, &bf);
        if (db != bplain)
            TRY(bwd_reorder(d, i, "softmax: bias gradient cast", db, &bf,
                            bplain, &bpmd));
    }
    TRY(cl_dnnl_plain_grad_end(d, i, n->in[0], &pmd, plain, tgt, acc));
    if (bias_grad)
        TRY(cl_dnnl_plain_grad_end(d, i, n->in[1], &bpmd, bplain, btgt, bacc));
fail:
    return st;
}
