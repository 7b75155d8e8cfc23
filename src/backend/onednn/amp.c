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

#include <math.h>
#include <string.h>

#include "backend/onednn/internal.h"
#include "backend/onednn_info.h"
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
    /* A value its producer wrote quantized changes only its layout. */
    const int q = t->md.data_type == dnnl_u8 || t->md.data_type == dnnl_s8;
    const float inv = q ? 1.0f : 1.0f / d->g->quant->act_scale[x];
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

/* ---- int8 ------------------------------------------------------------------
 *
 * A conv or linear with int8 scales (cl_graph_quant_node) in an int8 plan
 * reads its input as u8/s8 (cl_dnnl_value_q8) and s8 weights, sums in s32
 * and writes its usual f32 output through oneDNN's output scales s_x s_w
 * per output channel; oneDNN 2.x scales the sum with the bias in it, so
 * the bias is divided by them first, and the post-ops (sum, ReLU, GELU)
 * follow as in f32.  The weights (BN folded for a conv) are quantized by
 * a reorder with scales 1 / s_w.
 *
 * Below VNNI oneDNN 2.6 sums u8 x s8 products in pairs into 16 bits
 * (vpmaddubsw), which can saturate.  Some of its kernels avoid it
 * themselves, with weights it halves on the way in (a weights md whose
 * extra flags say "scale adjust": its convolutions of s8 inputs); the
 * others saturate (measured: tests/test_int8.c fails on its convolutions
 * of u8 inputs and its inner products of s8 ones).  For those the weights
 * are quantized at 7 bits here, 2 s_w per step, and the output scales
 * take the 2 back, unless they are within 7 bits already (a file written
 * with --weight_bits 7), which then run exactly as written. */
int cl_dnnl_q8_node(const dn_ctx *d, int i)
{
    return d->mode == CL_PLAN_INFER && d->be->opts.int8 &&
           cl_graph_quant_node(d->g, i);
}

int cl_dnnl_q8_readers_only(const dn_ctx *d, int t)
{
    const cl_graph *g = d->g;
    int readers = 0;
    for (int k = 0; k < g->n_nodes; k++)
        for (int a = 0; a < g->nodes[k].n_in; a++)
            if (g->nodes[k].in[a] == t) {
                if (a != 0 || !cl_dnnl_q8_node(d, k))
                    return 0;
                readers++;
            }
    return readers > 0;
}

/* The weight step of node i, in units of its s_w (2: 7-bit weights). */
static float q8_wmul(const dn_ctx *d, int i)
{
    return d->nd[i].u.w.wmul > 0.0f ? d->nd[i].u.w.wmul : 1.0f;
}

static int q8_channels(const cl_node *n)
{
    return n->op == CL_OP_CONV2D ? n->attr.conv2d.out_ch
                                 : n->attr.linear.out_features;
}

/* Sets attr's output scales s_x s_w m per output channel, m the weight
 * step of node i. */
static cl_status set_scales(dn_ctx *d, int i, dnnl_primitive_attr_t attr)
{
    cl_status st = CL_OK;
    const cl_graph *g = d->g;
    const cl_node *n = &g->nodes[i];
    const int O = q8_channels(n);
    const float *ws = cl_graph_quant_wscale(g, i);
    float sx = g->quant->act_scale[n->in[0]] * q8_wmul(d, i);
    const dn_weighted *x = &d->nd[i].u.w;
    if (n->op == CL_OP_CONV2D && x->qout)
        sx /= g->quant->act_scale[x->last]; /* written at its readers' scale */
    float *sc = cl_alloc(sizeof *sc * (size_t)O, "onednn: int8 scales");
    if (!sc)
        return CL_ERR_NOMEM;
    for (int o = 0; o < O; o++)
        sc[o] = sx * ws[o];
    DN(dnnl_primitive_attr_set_output_scales(attr, O, 1 << 1, sc), i,
       "int8 output scales");
fail:
    cl_free(sc);
    return st;
}

float cl_dnnl_bn_fold_factor(const cl_graph *g, int bn, int o)
{
    const cl_node *b = &g->nodes[bn];
    return cl_graph_param((cl_graph *)g, b->param[0])[o] /
           sqrtf(cl_graph_buffer((cl_graph *)g, b->buf[1])[o] +
                 b->attr.batchnorm2d.eps);
}

/* The largest |q| of node i's weights at 8 bits, BN folded as the plan
 * folds it: 63 or less (a file quantized with 7-bit weights, `classic
 * quantize --weight_bits 7`) cannot saturate, 2 x 255 x 63 < 2^15. */
static float q8_wmax(const dn_ctx *d, int i)
{
    const cl_graph *g = d->g;
    const cl_node *n = &g->nodes[i];
    const dn_weighted *x = &d->nd[i].u.w;
    const int O = q8_channels(n);
    const float *ws = cl_graph_quant_wscale(g, i);
    const float *w = cl_graph_param((cl_graph *)g, n->param[0]);
    const int64_t per = cl_graph_numel(g, n->param[0]) / O;
    float m = 0.0f;
    for (int o = 0; o < O; o++) {
        const float k = n->op == CL_OP_CONV2D && x->bn >= 0
                            ? cl_dnnl_bn_fold_factor(g, x->bn, o)
                            : 1.0f;
        for (int64_t j = 0; j < per; j++)
            m = fmaxf(m, fabsf(w[o * per + j] * k) / ws[o]);
    }
    return m;
}

cl_status cl_dnnl_q8_output_scales(dn_ctx *d, int i, const_dnnl_op_desc_t desc,
                                   dnnl_primitive_attr_t attr)
{
    cl_status st = CL_OK;
    dnnl_primitive_desc_t pd = NULL;
    d->nd[i].u.w.wmul = 1.0f;
    TRY_GOTO(set_scales(d, i, attr));
    if (!d->q8_half)
        return CL_OK;
    /* Which kernel oneDNN picks, and whether its weights are halved. */
    DN(dnnl_primitive_desc_create(&pd, desc, attr, d->eng, NULL), i,
       "int8 primitive");
    dnnl_memory_desc_t w = cl_dnnl_qmd(pd, dnnl_query_weights_md, 0);
    if (!(w.extra.flags & dnnl_memory_extra_flag_scale_adjust) &&
        q8_wmax(d, i) > 63.5f) {
        d->nd[i].u.w.wmul = 2.0f;
        TRY_GOTO(set_scales(d, i, attr));
    }
fail:
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    return st;
}

cl_status cl_dnnl_q8_check_impl(const dn_ctx *d, int i,
                                const_dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) !=
            dnnl_success ||
        !impl || strncmp(impl, "ref", 3) != 0)
        return CL_OK;
    return cl_error(CL_ERR_UNSUPPORTED,
                    "%s: oneDNN has no int8 kernel for this layer at %s "
                    "(only its reference loops, %s, far slower than f32); "
                    "run this model at precision f32",
                    d->g->nodes[i].name, cl_dnnl_isa_name(), impl);
}

/* The bias of int8 step s's node over its output scales: a conv's folded
 * bias when BN folded into it, else the node's own. */
static cl_status q8_bias(dn_ctx *d, const dn_step *s)
{
    const cl_graph *g = d->g;
    const cl_node *n = &g->nodes[s->node];
    const dn_weighted *x = &d->nd[s->node].u.w;
    const float *b =
        x->bn >= 0 ? x->bias : cl_graph_param((cl_graph *)g, n->param[1]);
    const float *ws = cl_graph_quant_wscale(g, s->node);
    const float sx = g->quant->act_scale[n->in[0]] * q8_wmul(d, s->node);
    for (int o = 0; o < q8_channels(n); o++)
        x->qbias[o] = b[o] / (sx * ws[o]);
    return CL_OK;
}

cl_status cl_dnnl_q8_weights(dn_ctx *d, int i, const dnnl_memory_desc_t *plain,
                             float *w, int has_bias)
{
    cl_status st = CL_OK;
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[i];
    const int O = q8_channels(n);
    dn_weighted *x = &d->nd[i].u.w;
    const float *ws = cl_graph_quant_wscale(g, i);
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    float *inv = cl_alloc(sizeof *inv * (size_t)O, "onednn: int8 weights");
    x->w = cl_alloc(md_size(&x->w_md), "onednn: int8 weights");
    if (has_bias) {
        x->qbias = cl_alloc(sizeof *x->qbias * (size_t)O, "onednn: int8 bias");
        if (x->bn >= 0 && !x->bias)
            x->bias =
                cl_alloc(sizeof *x->bias * (size_t)O, "onednn: folded bias");
    }
    if (!inv || !x->w || (has_bias && !x->qbias) || (x->bn >= 0 && !x->bias)) {
        st = CL_ERR_NOMEM;
        goto fail;
    }
    for (int o = 0; o < O; o++)
        inv[o] = 1.0f / (ws[o] * q8_wmul(d, i));
    TRY_GOTO(cl_dnnl_reorder_make_scaled(d, i, "int8 weights", plain, &x->w_md,
                                         O, 1 << 0, inv, &pd, &prim));
    TRY_GOTO(
        cl_dnnl_step_prim(d, &d->sync, i, "int8 weights", 0, pd, prim, &s));
    cl_dnnl_arg_ext(s, DNNL_ARG_FROM, w, plain);
    cl_dnnl_arg_ext(s, DNNL_ARG_TO, x->w, &x->w_md);
    if (has_bias)
        TRY_GOTO(cl_dnnl_step_run(d, &d->sync, q8_bias, i, "int8 bias", 0, &s));
fail:
    cl_free(inv);
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
