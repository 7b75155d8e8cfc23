/* The oneDNN backend's convolutions, forward and backward planning side by
 * side: oneDNN's convolution primitives, BN folded into the weights for
 * inference, and two rewrites of the backward that oneDNN 2.6 runs slowly
 * on some shapes: the weight gradient as im2col + matmul, and the backward
 * data of strided 1x1 convs on the stride grid. */
#include <math.h>
#include <string.h>

#include "backend/onednn/internal.h"
#include "core/mem.h"

static void conv_geometry(const dn_ctx *d, int i, dnnl_dims_t strides,
                          dnnl_dims_t dil, dnnl_dims_t pl, dnnl_dims_t pr)
{
    const cl_node *n = &d->g->nodes[i];
    const cl_conv2d_attr *a = &n->attr.conv2d;
    const cl_shape *x = &gt(d, n->in[0])->shape, *y = &gt(d, n->out)->shape;
    strides[0] = a->sh;
    strides[1] = a->sw;
    dil[0] = a->dh - 1;
    dil[1] = a->dw - 1;
    pl[0] = a->ph;
    pl[1] = a->pw;
    pr[0] = (y->d[2] - 1) * a->sh + (int64_t)(a->kh - 1) * a->dh + 1 - x->d[2] -
            a->ph;
    pr[1] = (y->d[3] - 1) * a->sw + (int64_t)(a->kw - 1) * a->dw + 1 - x->d[3] -
            a->pw;
}

/* Plain OIHW (or GOIHW) weights md of conv node i. */
static int conv_wdims(const dn_ctx *d, int i, dnnl_dims_t w)
{
    const cl_conv2d_attr *a = &d->g->nodes[i].attr.conv2d;
    if (a->groups == 1) {
        w[0] = a->out_ch;
        w[1] = a->in_ch;
        w[2] = a->kh;
        w[3] = a->kw;
        return 4;
    }
    w[0] = a->groups;
    w[1] = a->out_ch / a->groups;
    w[2] = a->in_ch / a->groups;
    w[3] = a->kh;
    w[4] = a->kw;
    return 5;
}

static cl_status fold_bn(dn_ctx *d, const dn_step *s)
{
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[s->node];
    const int bn = d->nd[s->node].u.w.bn;
    const cl_node *b = &g->nodes[bn];
    const cl_conv2d_attr *a = &n->attr.conv2d;
    const float *w = cl_graph_param(g, n->param[0]);
    const float *bias = a->has_bias ? cl_graph_param(g, n->param[1]) : NULL;
    const float *beta = cl_graph_param(g, b->param[1]);
    const float *rm = cl_graph_buffer(g, b->buf[0]);
    size_t per = (size_t)cl_graph_numel(g, n->param[0]) / (size_t)a->out_ch;
    float *fw = d->fold, *fb = d->nd[s->node].u.w.bias;
    for (int o = 0; o < a->out_ch; o++) {
        float k = cl_dnnl_bn_fold_factor(g, bn, o);
        for (size_t j = 0; j < per; j++)
            fw[(size_t)o * per + j] = w[(size_t)o * per + j] * k;
        fb[o] = beta[o] + ((bias ? bias[o] : 0.0f) - rm[o]) * k;
    }
    return CL_OK;
}

/* int8 plans: a conv with int8 scales (amp.c says how it runs). */
static int conv_q8(const dn_ctx *d, int i)
{
    return cl_dnnl_q8_node(d, i) && d->g->nodes[i].attr.conv2d.groups == 1;
}

cl_status cl_dnnl_conv_fwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[i];
    const cl_conv2d_attr *a = &n->attr.conv2d;
    dn_weighted *x = &d->nd[i].u.w;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_dims_t sdims, ddims, wdims, strides, dil, pl, pr;
    dnnl_memory_desc_t smd, wmd, wplain, bmd, dmd;
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    int infer = d->mode == CL_PLAN_INFER;
    int fold = infer && x->bn >= 0;
    int q8 = conv_q8(d, i);
    int has_bias = a->has_bias || fold;
    const dnnl_memory_desc_t *xin = in_md(d, n->in[0]);

    int src = -1;
    dims_of(&gt(d, n->in[0])->shape, sdims);
    dims_of(&gt(d, n->out)->shape, ddims);
    int wnd = conv_wdims(d, i, wdims);
    conv_geometry(d, i, strides, dil, pl, pr);
    if (q8) {
        /* The src as u8/s8 in the layout the primitive picks, quantized
         * from the input's store once the primitive is made. */
        TRY_GOTO(cl_dnnl_ensure_input_md(d, n->in[0]));
        cl_dnnl_md_any(&smd, 4, sdims,
                       g->quant->act_signed[n->in[0]] ? dnnl_s8 : dnnl_u8);
        cl_dnnl_md_any(&wmd, wnd, wdims, dnnl_s8);
    } else if (xin) {
        TRY_GOTO(cl_dnnl_value_as(d, i, n->in[0], conv_dt(d), &smd, &src));
        cl_dnnl_md_any(&wmd, wnd, wdims, conv_dt(d));
    } else {
        cl_dnnl_md_any(&smd, 4, sdims, conv_dt(d));
        cl_dnnl_md_any(&wmd, wnd, wdims, conv_dt(d));
    }
    cl_dnnl_md_plain(&wplain, wnd, wdims);
    md_1d(&bmd, a->out_ch);
    int sum_copy = 0;
    dnnl_memory_desc_t sum_md;
    if (x->sum >= 0) {
        TRY_GOTO(cl_dnnl_ensure_input_md(d, x->sum));
        dmd = sum_md = *in_md(d, x->sum);
        if (q8) {
            /* oneDNN 2.6's int8 kernels write channels-last; on any other
             * layout (a blocked residual from an f32 stem) it falls back to
             * its reference loops, 200x slower (measured: ResNet-18 at 28
             * px), so such a residual is copied into nhwc first. */
            DN(dnnl_memory_desc_init_by_tag(&dmd, 4, ddims, sum_md.data_type,
                                            dnnl_nhwc),
               i, "int8 convolution output");
            sum_copy = !md_eq(&dmd, &sum_md);
        }
    } else if (q8 && x->qout) {
        cl_dnnl_md_any(&dmd, 4, ddims,
                       g->quant->act_signed[x->last] ? dnnl_s8 : dnnl_u8);
    } else if (d->be->opts.channels_last) {
        DN(dnnl_memory_desc_init_by_tag(&dmd, 4, ddims, act_dt(d), dnnl_nhwc),
           i, "convolution output");
    } else
        cl_dnnl_md_any(&dmd, 4, ddims, act_dt(d));
    DN(dnnl_dilated_convolution_forward_desc_init(
           &cd, infer ? dnnl_forward_inference : dnnl_forward_training,
           dnnl_convolution_direct, &smd, &wmd, has_bias ? &bmd : NULL, &dmd,
           strides, dil, pl, pr),
       i, "convolution forward descriptor");
    TRY_GOTO(cl_dnnl_attr_post(
        d, x->sum >= 0, d->nd[i].relu ? dnnl_eltwise_relu : dnnl_alg_kind_undef,
        &attr));
    if (q8) {
        TRY_GOTO(cl_dnnl_q8_output_scales(d, i, &cd, attr));
    }
    if (q8)
        TRY_GOTO(cl_dnnl_prim_make(d, i, "int8 convolution forward", &cd, attr,
                                   NULL, &pd, &prim));
    else
        TRY_GOTO(cl_dnnl_conv_prim_make(d, i, "convolution forward", &cd, attr,
                                        NULL, &pd, &prim));
    dnnl_primitive_attr_destroy(attr);
    attr = NULL;
    d->nd[i].fwd_pd = pd;
    if (q8) {
        TRY_GOTO(cl_dnnl_q8_check_impl(d, i, pd));
        smd = cl_dnnl_qmd(pd, dnnl_query_src_md, 0);
        TRY_GOTO(cl_dnnl_value_q8(d, i, n->in[0], &smd, &src));
    } else if (!xin) {
        smd = cl_dnnl_qmd(pd, dnnl_query_src_md, 0);
        TRY_GOTO(cl_dnnl_set_md(d, n->in[0], &smd, -1));
        src = d->t[rep(d, n->in[0])].store;
    }
    x->src = src;
    x->src_md = smd;
    dmd = cl_dnnl_qmd(pd, dnnl_query_dst_md, 0);
    int dst = x->sum >= 0 ? d->t[rep(d, x->sum)].store : -1;
    if (sum_copy) {
        int from = dst;
        TRY_GOTO(cl_dnnl_md_store(d, &dmd, &dst));
        TRY_GOTO(cl_dnnl_reorder_step(d, fwd_list(d, 0), i, i,
                                      "int8: residual to nhwc", from, &sum_md,
                                      dst, &dmd));
    }
    TRY_GOTO(cl_dnnl_set_md(d, n->out, &dmd, dst));
    if (q8 && x->qout) {
        /* The value is its readers' int8 copy (cl_dnnl_value_q8). */
        dn_tensor *t = &d->t[rep(d, n->out)];
        t->q8 = t->store;
        t->q8_md = dmd;
    }
    x->w_md = cl_dnnl_qmd(pd, dnnl_query_weights_md, 0);
    float *w = cl_graph_param(g, n->param[0]);
    if (q8) {
        /* BN folds into d->fold first, and the s8 weights come from it. */
        if (fold)
            TRY_GOTO(cl_dnnl_step_run(d, &d->sync, fold_bn, i,
                                      "fold batch norm", 0, &s));
        TRY_GOTO(cl_dnnl_q8_weights(d, i, &wplain, fold ? d->fold : w,
                                    fold || a->has_bias));
    } else if (fold) {
        dn_step *f;
        x->bias =
            cl_alloc(sizeof(float) * (size_t)a->out_ch, "onednn: folded bias");
        if (!x->bias) {
            st = CL_ERR_NOMEM;
            goto fail;
        }
        TRY_GOTO(cl_dnnl_step_run(d, &d->sync, fold_bn, i, "fold batch norm", 0,
                                  &f));
        /* Folded weights are made in d->fold, then reordered. */
        TRY_GOTO(cl_dnnl_weight_copy(d, i, "weights reorder", &wplain, d->fold,
                                     &x->w_md, &x->w));
    } else if (!md_eq(&x->w_md, &wplain)) {
        TRY_GOTO(cl_dnnl_weight_copy(d, i, "weights reorder", &wplain, w,
                                     &x->w_md, &x->w));
    }
    for (int k = 0; k < n_fwd_lists(d); k++) {
        TRY_GOTO(cl_dnnl_step_prim(d, fwd_list(d, k), i, "convolution forward",
                                   i, pd, prim, &s));
        cl_dnnl_arg_store(d, s, DNNL_ARG_SRC, src, &smd);
        cl_dnnl_arg_ext(s, DNNL_ARG_WEIGHTS, x->w ? x->w : w, &x->w_md);
        if (q8 && has_bias)
            cl_dnnl_arg_ext(s, DNNL_ARG_BIAS, x->qbias, &bmd);
        else if (fold)
            cl_dnnl_arg_ext(s, DNNL_ARG_BIAS, x->bias, &bmd);
        else if (a->has_bias)
            cl_dnnl_arg_ext(s, DNNL_ARG_BIAS, cl_graph_param(g, n->param[1]),
                            &bmd);
        cl_dnnl_arg_store(d, s, DNNL_ARG_DST, d->t[rep(d, n->out)].store, &dmd);
    }
    return CL_OK;
fail:
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return st;
}

/* ---- weight gradient as a matmul ---------------------------------------
 *
 * dW (O, KH*KW*C) = dy^T (O, P) x cols (P, KH*KW*C), P = N*OH*OW, where
 * row p of cols holds the input patch output pixel p reads, (kh, kw, c)
 * with c fastest: dy and x reordered to NHWC make both operands plain
 * matrices, and the patch rows are whole C-runs of NHWC x (a 1x1 stride-1
 * conv needs no patches: NHWC x is cols).  dW comes out OHWI, reordered
 * into the OIHW grad arena (1x1: the same thing, written there directly).
 *
 * Why: when OH*OW is small (ResNet-50's layer3 and layer4 at 28x28 input
 * run at 4x4 and 2x2) oneDNN 2.6's jit backward-weights kernels run at a
 * third of what its matmul reaches on the same product (bf16, one thread,
 * mb128 512->512 3x3 at 2x2: 133 against 410 GFLOPS; 1x1 512->2048: 116
 * against 420), and the Fashion-MNIST recipe spent more time there than
 * in the forward (docs/amp.md).  At 7x7 and up the two are even. */
/* The largest output a measured plan (autotune) tries the matmul on: its
 * patch matrix grows with the output, and at 8x8 and up oneDNN's own
 * kernels were never slower. */
enum { DN_WGRAD_TUNE_MAX_HW = 64 };

/* Whether the weight gradient of conv i can run as a matmul. */
int cl_dnnl_wgrad_matmul_ok(const cl_graph *g, int i)
{
    const cl_node *n = &g->nodes[i];
    const cl_conv2d_attr *a = &n->attr.conv2d;
    const cl_shape *y = &g->tensors[n->out].shape;
    return n->op == CL_OP_CONV2D && a->groups == 1 && !a->has_bias &&
           a->dh == 1 && a->dw == 1 &&
           y->d[2] * y->d[3] <= DN_WGRAD_TUNE_MAX_HW;
}

static int wgrad_as_matmul(const dn_ctx *d, int i)
{
    return ((d->paths[i] - '0') & 1) && cl_dnnl_wgrad_matmul_ok(d->g, i);
}

/* Store s (layout md) in NHWC, same type, for node i's backward. */
static cl_status nhwc_copy(dn_ctx *d, int i, const char *what, int s,
                           const dnnl_memory_desc_t *md,
                           dnnl_memory_desc_t *out, int *store)
{
    cl_status st = CL_OK;
    DN(dnnl_memory_desc_init_by_tag(out, 4, md->dims, md->data_type, dnnl_nhwc),
       i, what);
    return cl_dnnl_bwd_copy(d, i, what, s, md, out, store);
fail:
    return st;
}

/* Patch rows of an im2col step: args[0] NHWC x, args[1] cols. */
static cl_status im2col(dn_ctx *d, const dn_step *s)
{
    const cl_node *n = &d->g->nodes[s->node];
    const cl_conv2d_attr *a = &n->attr.conv2d;
    const cl_shape *xs = &gt(d, n->in[0])->shape, *ys = &gt(d, n->out)->shape;
    const int64_t H = xs->d[2], W = xs->d[3];
    const int64_t OH = ys->d[2], OW = ys->d[3], P = xs->d[0] * OH * OW;
    const size_t run = (size_t)a->in_ch * (md_bf16(&s->args[0].md) ? 2 : 4);
    const char *x = cl_dnnl_arg_ptr(d, &s->args[0]);
    char *cols = cl_dnnl_arg_ptr(d, &s->args[1]);
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < P; p++) {
        int64_t ow = p % OW, oh = p / OW % OH, b = p / (OW * OH);
        char *row = cols + (size_t)p * (size_t)(a->kh * a->kw) * run;
        for (int kh = 0; kh < a->kh; kh++) {
            int64_t ih = oh * a->sh - a->ph + kh;
            for (int kw = 0; kw < a->kw; kw++, row += run) {
                int64_t iw = ow * a->sw - a->pw + kw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                    memset(row, 0, run);
                else
                    memcpy(row, x + (size_t)((b * H + ih) * W + iw) * run, run);
            }
        }
    }
    return CL_OK;
}

/* The weight gradient of conv i from dy (dmd) and the forward's src into
 * gw (OIHW, plain md wplain). */
static cl_status plan_wgrad_matmul(dn_ctx *d, int i, int dy,
                                   const dnnl_memory_desc_t *dmd,
                                   const dnnl_memory_desc_t *wplain, float *gw)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    const cl_conv2d_attr *a = &n->attr.conv2d;
    const dn_weighted *x = &d->nd[i].u.w;
    dnnl_matmul_desc_t mm;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    dnnl_memory_desc_t dyh, xh, amd, bmd, cmd, wohwi;
    int dys, xhs, cols, tmp;
    const int64_t C = a->in_ch, O = a->out_ch;
    const int64_t P = dmd->dims[0] * dmd->dims[2] * dmd->dims[3];
    const int64_t KC = (int64_t)a->kh * a->kw * C;
    TRY_GOTO(
        nhwc_copy(d, i, "weight gradient: dy to NHWC", dy, dmd, &dyh, &dys));
    TRY_GOTO(nhwc_copy(d, i, "weight gradient: src to NHWC", x->src, &x->src_md,
                       &xh, &xhs));
    dnnl_dims_t bdims = {P, KC}, cdims = {O, KC}, adims = {O, P};
    dnnl_dims_t astr = {1, O};
    DN(dnnl_memory_desc_init_by_strides(&amd, 2, adims, dyh.data_type, astr), i,
       "weight gradient matmul");
    DN(dnnl_memory_desc_init_by_tag(&bmd, 2, bdims, xh.data_type, dnnl_ab), i,
       "weight gradient matmul");
    DN(dnnl_memory_desc_init_by_tag(&cmd, 2, cdims, dnnl_f32, dnnl_ab), i,
       "weight gradient matmul");
    int patches = a->kh != 1 || a->kw != 1 || a->sh != 1 || a->sw != 1 ||
                  a->ph != 0 || a->pw != 0;
    cols = xhs;
    if (patches) {
        TRY_GOTO(cl_dnnl_md_store(d, &bmd, &cols));
        TRY_GOTO(cl_dnnl_step_run(d, &d->bwd, im2col, i,
                                  "weight gradient: im2col", tb(d, i), &s));
        cl_dnnl_arg_store(d, s, 0, xhs, &xh);
        cl_dnnl_arg_store(d, s, 1, cols, &bmd);
    }
    DN(dnnl_matmul_desc_init(&mm, &amd, &bmd, NULL, &cmd), i,
       "weight gradient matmul descriptor");
    TRY_GOTO(cl_dnnl_prim_make(d, i, "weight gradient matmul", &mm, NULL, NULL,
                               &pd, &prim));
    TRY_GOTO(cl_dnnl_step_prim(d, &d->bwd, i, "weight gradient matmul",
                               tb(d, i), pd, prim, &s));
    cl_dnnl_arg_store(d, s, DNNL_ARG_SRC, dys, &amd);
    cl_dnnl_arg_store(d, s, DNNL_ARG_WEIGHTS, cols, &bmd);
    if (a->kh == 1 && a->kw == 1) {
        cl_dnnl_arg_ext(s, DNNL_ARG_DST, gw, &cmd);
        return CL_OK;
    }
    TRY_GOTO(cl_dnnl_md_store(d, &cmd, &tmp));
    cl_dnnl_arg_store(d, s, DNNL_ARG_DST, tmp, &cmd);
    DN(dnnl_memory_desc_init_by_tag(&wohwi, 4, wplain->dims, dnnl_f32,
                                    dnnl_ohwi),
       i, "weight gradient matmul");
    TRY_GOTO(cl_dnnl_diff_weights_back(d, i, tmp, &wohwi, wplain, gw));
fail:
    return st;
}

/* ---- backward data of strided 1x1 convs ---------------------------------
 *
 * A 1x1 conv at stride s reads only the input pixels (s oh, s ow), so its
 * dx is the stride-1 backward data on that grid (dims N, C, OH, OW), placed
 * on the grid with zeros between (unstride).
 *
 * Why: oneDNN 2.6 runs the strided problem (ResNet's downsample convs) at
 * a third to a half of its stride-1 rate on the same product (bf16, one
 * thread, batch 128, 1024->2048 at 4x4 -> 2x2: 18.6 ms, where the same
 * conv's forward takes 8.5 ms and the stride-1 backward data of 512->2048
 * at 2x2, half the product, 4.3 ms). */
/* ---- backward data of strided 1x1 convs ---------------------------------
 *
 * A 1x1 conv at stride s reads only the input pixels (s oh, s ow), so its
 * dx is the stride-1 backward data on that grid (dims N, C, OH, OW), placed
 * on the grid with zeros between (STEP_UNSTRIDE).
 *
 * Why: oneDNN 2.6 runs the strided problem (ResNet's downsample convs) at
 * a third to a half of its stride-1 rate on the same product (bf16, one
 * thread, batch 128, 1024->2048 at 4x4 -> 2x2: 18.6 ms, where the same
 * conv's forward takes 8.5 ms and the stride-1 backward data of 512->2048
 * at 2x2, half the product, 4.3 ms). */
int cl_dnnl_dgrad_grid_ok(const cl_graph *g, int i)
{
    const cl_node *n = &g->nodes[i];
    const cl_conv2d_attr *a = &n->attr.conv2d;
    return n->op == CL_OP_CONV2D && a->kh == 1 && a->kw == 1 &&
           (a->sh > 1 || a->sw > 1) && a->ph == 0 && a->pw == 0 &&
           a->groups == 1;
}

static int dgrad_unstrided(dn_ctx *d, int i)
{
    const dnnl_memory_desc_t *dx = in_md(d, d->g->nodes[i].in[0]);
    return ((d->paths[i] - '0') & 2) && cl_dnnl_dgrad_grid_ok(d->g, i) && dx &&
           cl_dnnl_md_act_tag(dx) >= 0;
}

/* An unstride step: args[0] dx on the stride grid, args[1] dx, both
 * of one type and in the node's layout (one of layout.c's, found at plan
 * time); each plane of channel blocks is copied a whole block-pixel at a
 * time, the pixels off the grid zeroed. */
static cl_status unstride(dn_ctx *d, const dn_step *s)
{
    const cl_conv2d_attr *a = &d->g->nodes[s->node].attr.conv2d;
    const dnnl_memory_desc_t *gm = &s->args[0].md, *fm = &s->args[1].md;
    const cl_bn_layout l = d->nd[s->node].u.w.lay;
    const int64_t NB = l.N * (l.sn / (l.HW * l.B));
    const int64_t H = fm->dims[2], W = fm->dims[3];
    const int64_t OH = gm->dims[2], OW = gm->dims[3];
    const size_t px = (size_t)l.B * (md_bf16(fm) ? 2 : 4);
    const char *grid = cl_dnnl_arg_ptr(d, &s->args[0]);
    char *dx = cl_dnnl_arg_ptr(d, &s->args[1]);
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < NB; b++) {
        const char *g = grid + (size_t)(b * OH * OW) * px;
        char *f = dx + (size_t)(b * H * W) * px;
        memset(f, 0, (size_t)(H * W) * px);
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++)
                memcpy(f + (size_t)(oh * a->sh * W + ow * a->sw) * px,
                       g + (size_t)(oh * OW + ow) * px, px);
    }
    return CL_OK;
}

/* dx of conv i into store tgt from dy (dmd) and the weights w (plain md
 * wplain), by way of the stride grid. */
static cl_status plan_dgrad_unstrided(dn_ctx *d, int i, int dy,
                                      const dnnl_memory_desc_t *dmd,
                                      const dnnl_memory_desc_t *wplain,
                                      float *w, int tgt)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    const dnnl_memory_desc_t *dxmd = in_md(d, n->in[0]);
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t hint = NULL, pd;
    dnnl_primitive_t prim;
    dn_step *s;
    dnnl_memory_desc_t gmd, sany, wany;
    dnnl_dims_t gdims = {dxmd->dims[0], dxmd->dims[1], dmd->dims[2],
                         dmd->dims[3]};
    dnnl_dims_t one = {1, 1}, zero = {0, 0};
    int gs;
    const char *what = "convolution backward data on the stride grid";
    const int tag = cl_dnnl_md_act_tag(dxmd);
    cl_dnnl_md_act_layout(dxmd, &d->nd[i].u.w.lay); /* for unstride() */
    DN(dnnl_memory_desc_init_by_tag(&gmd, 4, gdims, dxmd->data_type,
                                    cl_dnnl_act_layout_tag(tag)),
       i, what);
    cl_dnnl_md_any(&sany, 4, gdims, conv_dt(d));
    cl_dnnl_md_any(&wany, 4, wplain->dims, conv_dt(d));
    /* The stride-1 forward on the grid, as the hint backward needs. */
    DN(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training,
                                          dnnl_convolution_direct, &sany, &wany,
                                          NULL, dmd, one, zero, zero),
       i, what);
    DN(dnnl_primitive_desc_create(&hint, &cd, NULL, d->eng, NULL), i, what);
    DN(dnnl_convolution_backward_data_desc_init(
           &cd, dnnl_convolution_direct, &gmd, &wany, dmd, one, zero, zero),
       i, what);
    TRY_GOTO(cl_dnnl_conv_prim_make(d, i, what, &cd, NULL, hint, &pd, &prim));
    TRY_GOTO(cl_dnnl_md_store(d, &gmd, &gs));
    TRY_GOTO(cl_dnnl_bwd_data_step(d, i, what, pd, prim, dy, dmd, wplain, w, gs,
                                   &gmd));
    TRY_GOTO(cl_dnnl_step_run(d, &d->bwd, unstride, i,
                              "backward data: unstride", tb(d, i), &s));
    cl_dnnl_arg_store(d, s, 0, gs, &gmd);
    cl_dnnl_arg_store(d, s, 1, tgt, dxmd);
fail:
    if (hint)
        dnnl_primitive_desc_destroy(hint);
    return st;
}

cl_status cl_dnnl_conv_bwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[i];
    const cl_conv2d_attr *a = &n->attr.conv2d;
    dn_weighted *x = &d->nd[i].u.w;
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dnnl_dims_t wdims, strides, dil, pl, pr;
    dnnl_memory_desc_t wany, wf32, wplain, bmd, dyc_md;
    int dy, dyc, tgt, acc;
    int path = 0; /* cl_dnnl_conv_paths of this node */
    /* src as the forward read it (bf16 under amp); dx in the input's own
     * type and layout; dy and the weights in the compute type. */
    int xs = x->src;
    const dnnl_memory_desc_t *smd = &x->src_md;
    const dnnl_memory_desc_t *dxmd = in_md(d, n->in[0]);
    const dnnl_memory_desc_t *dmd = &d->t[rep(d, n->out)].md;
    float *w = cl_graph_param(g, n->param[0]);
    TRY_GOTO(cl_dnnl_out_grad(d, i, &dy));
    TRY_GOTO(cl_dnnl_grad_as(d, i, dy, dmd, conv_dt(d), &dyc_md, &dyc));
    dmd = &dyc_md;
    dy = dyc;
    int wnd = conv_wdims(d, i, wdims);
    conv_geometry(d, i, strides, dil, pl, pr);
    cl_dnnl_md_any(&wany, wnd, wdims, conv_dt(d));
    cl_dnnl_md_plain(&wplain, wnd, wdims);
    float *gw = cl_graph_grad(g, n->param[0]);
    d->part = 1;
    if (wgrad_as_matmul(d, i)) {
        path |= 1;
        TRY_GOTO(plan_wgrad_matmul(d, i, dy, dmd, &wplain, gw));
        TRY_GOTO(cl_dnnl_hook_step(d, i, n->param[0]));
        goto data;
    }
    cl_dnnl_md_any(&wf32, wnd, wdims, dnnl_f32); /* weight gradients stay f32 */
    md_1d(&bmd, a->out_ch);
    DN(dnnl_dilated_convolution_backward_weights_desc_init(
           &cd, dnnl_convolution_direct, smd, &wf32, a->has_bias ? &bmd : NULL,
           dmd, strides, dil, pl, pr),
       i, "convolution backward weights descriptor");
    TRY_GOTO(cl_dnnl_conv_prim_make(d, i, "convolution backward weights", &cd,
                                    NULL, d->nd[i].fwd_pd, &pd, &prim));
    TRY_GOTO(cl_dnnl_wgrad_step(d, i, "convolution backward weights", pd, prim,
                                xs, smd, dy, dmd, &wplain,
                                a->has_bias ? &bmd : NULL));

data:
    d->part = 2;
    TRY_GOTO(cl_dnnl_grad_target(d, i, n->in[0], &tgt, &acc));
    if (tgt < 0)
        goto fail;
    if (dgrad_unstrided(d, i)) {
        path |= 2;
        TRY_GOTO(plan_dgrad_unstrided(d, i, dy, dmd, &wplain, w, tgt));
    } else {
        DN(dnnl_dilated_convolution_backward_data_desc_init(
               &cd, dnnl_convolution_direct, dxmd, &wany, dmd, strides, dil, pl,
               pr),
           i, "convolution backward data descriptor");
        TRY_GOTO(cl_dnnl_conv_prim_make(d, i, "convolution backward data", &cd,
                                        NULL, d->nd[i].fwd_pd, &pd, &prim));
        TRY_GOTO(cl_dnnl_bwd_data_step(d, i, "convolution backward data", pd,
                                       prim, dy, dmd, &wplain, w, tgt, dxmd));
    }
    if (acc)
        TRY_GOTO(cl_dnnl_accumulate(d, i, n->in[0], tgt));
fail:
    d->part = 0;
    d->paths[i] = (char)('0' + path);
    return st;
}

/* Conv and linear nodes: no fused BN or sum, no src store yet. */
void cl_dnnl_weighted_init(dn_node *x)
{
    x->u.w.bn = x->u.w.sum = x->u.w.src = x->u.w.last = -1;
}

void cl_dnnl_weighted_free(dn_node *x)
{
    cl_free(x->u.w.w);
    cl_free(x->u.w.wb);
    cl_free(x->u.w.bias);
    cl_free(x->u.w.qbias);
}
