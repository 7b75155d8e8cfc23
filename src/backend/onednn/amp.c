/* The oneDNN backend's mixed precision: the copies of values, gradients
 * and weights in the type a step reads.
 *
 * amp_level O1: convolutions and inner products read bf16 src and weights
 * (their inputs are cast, their outputs stay f32); O2: convolutions also
 * write bf16, and BN, ReLU, add and pooling then run on bf16 (each op
 * keeps its input's type), so activations and their gradients are bf16
 * from the first convolution to the logits, which the inner product writes
 * in f32 for the loss.  oneDNN accumulates in f32 inside every primitive
 * and writes weight gradients in f32 straight to the grad arena; BN keeps
 * its statistics and parameters in f32 (bn.c). */

#include "backend/onednn/internal.h"
#include "core/mem.h"

/* The value of tensor x in type dt for node i: x's own store when it has
 * that type, else a copy made by a reorder just before node i in each
 * forward list, shared by every later reader (and by backward). */
cl_status cl_dnnl_value_as(dn_ctx *d, int i, int x, dnnl_data_type_t dt,
                           dnnl_memory_desc_t *md, int *store)
{
    cl_status st = CL_OK;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    dn_tensor *t = &d->t[rep(d, x)];
    if (t->md.data_type == dt) {
        *md = t->md;
        *store = t->store;
        return CL_OK;
    }
    if (t->cast < 0) {
        t->cast_md = md_as(&t->md, dt);
        TRY_GOTO(cl_dnnl_md_store(d, &t->cast_md, &t->cast));
        TRY_GOTO(cl_dnnl_reorder_make(d, i, "precision cast", &t->md,
                                      &t->cast_md, &pd, &prim));
        for (int k = 0; k < n_fwd_lists(d); k++) {
            TRY_GOTO(cl_dnnl_step_prim(d, fwd_list(d, k), i, "precision cast",
                                       i, pd, prim, &s));
            cl_dnnl_arg_store(d, s, DNNL_ARG_FROM, t->store, &t->md);
            cl_dnnl_arg_store(d, s, DNNL_ARG_TO, t->cast, &t->cast_md);
        }
    }
    *md = t->cast_md;
    *store = t->cast;
fail:
    return st;
}

cl_status cl_dnnl_value_q8(dn_ctx *d, int i, int x,
                           const dnnl_memory_desc_t *want, int *store)
{
    cl_status st = CL_OK;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    dn_tensor *t = &d->t[rep(d, x)];
    if (t->q8 >= 0 && md_eq(&t->q8_md, want)) {
        *store = t->q8;
        return CL_OK;
    }
    const float inv = 1.0f / d->g->quant->act_scale[x];
    TRY_GOTO(cl_dnnl_md_store(d, want, store));
    TRY_GOTO(cl_dnnl_reorder_make_scaled(d, i, "int8 quantize", &t->md, want, 1,
                                         0, &inv, &pd, &prim));
    TRY_GOTO(cl_dnnl_step_prim(d, fwd_list(d, 0), i, "int8 quantize", i, pd,
                               prim, &s));
    cl_dnnl_arg_store(d, s, DNNL_ARG_FROM, t->store, &t->md);
    cl_dnnl_arg_store(d, s, DNNL_ARG_TO, *store, want);
    if (t->q8 < 0) {
        t->q8 = *store;
        t->q8_md = *want;
    }
fail:
    return st;
}

/* Store s (layout md) in layout want for node i's backward: s itself when
 * the two match, else a copy made by a reorder at that time. */
cl_status cl_dnnl_bwd_copy(dn_ctx *d, int i, const char *what, int s,
                           const dnnl_memory_desc_t *md,
                           const dnnl_memory_desc_t *want, int *store)
{
    *store = s;
    if (md_eq(md, want))
        return CL_OK;
    CL_TRY(cl_dnnl_md_store(d, want, store));
    return cl_dnnl_reorder_step(d, &d->bwd, i, tb(d, i), what, s, md, *store,
                                want);
}

/* Gradient store ds (md) in type dt for node i's backward. */
cl_status cl_dnnl_grad_as(dn_ctx *d, int i, int ds,
                          const dnnl_memory_desc_t *md, dnnl_data_type_t dt,
                          dnnl_memory_desc_t *out, int *store)
{
    *out = md_as(md, dt);
    return cl_dnnl_bwd_copy(d, i, "gradient precision cast", ds, md, out,
                            store);
}

/* A weight copy in layout md refreshed from src (plain) by a sync step. */
cl_status cl_dnnl_weight_copy(dn_ctx *d, int node, const char *what,
                              const dnnl_memory_desc_t *plain, void *src,
                              const dnnl_memory_desc_t *md, float **copy)
{
    cl_status st = CL_OK;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    *copy = cl_alloc(md_size(md), "onednn: weight copy");
    if (!*copy)
        return CL_ERR_NOMEM;
    TRY_GOTO(cl_dnnl_reorder_make(d, node, what, plain, md, &pd, &prim));
    TRY_GOTO(cl_dnnl_step_prim(d, &d->sync, node, what, 0, pd, prim, &s));
    cl_dnnl_arg_ext(s, DNNL_ARG_FROM, src, plain);
    cl_dnnl_arg_ext(s, DNNL_ARG_TO, *copy, md);
fail:
    return st;
}
