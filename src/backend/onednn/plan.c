/* The oneDNN backend's plan: the table of op planners indexed by op, the
 * backward-planning helpers the op families share, and the plan driver
 * (node data, lowering, forward then backward planning, the arena and the
 * memory objects). */
#include <dnnl.h>
#include <omp.h>
#include <string.h>

#include "backend/onednn/internal.h"
#include "backend/onednn_info.h"
#include "core/error.h"
#include "core/mem.h"

/* ---- the op table ----------------------------------------------------------
 */

const dn_op cl_dnnl_ops[CL_OP_COUNT] = {
    [CL_OP_CONV2D] = {cl_dnnl_weighted_init, cl_dnnl_conv_lower,
                      cl_dnnl_conv_fwd, cl_dnnl_conv_bwd,
                      cl_dnnl_weighted_free},
    [CL_OP_BATCHNORM2D] = {cl_dnnl_bn_init, cl_dnnl_bn_lower, cl_dnnl_bn_fwd,
                           cl_dnnl_bn_bwd, NULL},
    [CL_OP_RELU] = {NULL, NULL, cl_dnnl_relu_fwd, cl_dnnl_relu_bwd, NULL},
    [CL_OP_MAXPOOL2D] = {cl_dnnl_pool_init, NULL, cl_dnnl_maxpool_fwd,
                         cl_dnnl_maxpool_bwd, NULL},
    [CL_OP_GLOBAL_AVGPOOL] = {cl_dnnl_pool_init, NULL, cl_dnnl_gap_fwd,
                              cl_dnnl_gap_bwd, NULL},
    [CL_OP_LINEAR] = {cl_dnnl_weighted_init, cl_dnnl_linear_lower,
                      cl_dnnl_linear_fwd, cl_dnnl_linear_bwd,
                      cl_dnnl_weighted_free},
    [CL_OP_ADD] = {NULL, cl_dnnl_add_lower, cl_dnnl_add_fwd, cl_dnnl_add_bwd,
                   NULL},
    /* The loss computes its gradient in forward. */
    [CL_OP_SOFTMAX_CE] = {NULL, NULL, cl_dnnl_loss_fwd, NULL, NULL},
    [CL_OP_LAYERNORM] = {cl_dnnl_norm_init, NULL, cl_dnnl_layernorm_fwd,
                         cl_dnnl_layernorm_bwd, NULL},
    [CL_OP_GELU] = {NULL, NULL, cl_dnnl_gelu_fwd, cl_dnnl_gelu_bwd, NULL},
    [CL_OP_SOFTMAX] = {NULL, cl_dnnl_softmax_lower, cl_dnnl_softmax_fwd,
                       cl_dnnl_softmax_bwd, NULL},
    [CL_OP_MATMUL] = {cl_dnnl_matmul_init, cl_dnnl_matmul_lower,
                      cl_dnnl_matmul_fwd, cl_dnnl_matmul_bwd, NULL},
    [CL_OP_ROW_GATHER] = {NULL, NULL, cl_dnnl_row_gather_fwd,
                          cl_dnnl_row_gather_bwd, cl_dnnl_tokens_free},
    [CL_OP_DROPPATH] = {NULL, cl_dnnl_droppath_lower, cl_dnnl_droppath_fwd,
                        cl_dnnl_droppath_bwd, NULL},
    [CL_OP_TOKEN_MEANPOOL] = {NULL, NULL, cl_dnnl_token_meanpool_fwd,
                              cl_dnnl_token_meanpool_bwd, NULL},
};
CL_OP_TABLE_CHECK(cl_dnnl_ops, 16);

/* An op is supported when its table entry plans a forward; the others
 * run the reference kernels (fallback.c). */
int cl_dnnl_supports(const cl_graph *g, const cl_node *n)
{
    (void)g;
    return n->op >= 0 && n->op < CL_OP_COUNT && cl_dnnl_ops[n->op].fwd;
}

/* ---- backward planning ------------------------------------------------------
 */

/* Where node i's gradient for its input x goes: the tensor's own gradient
 * store when i is the first contributor in backward order, else a scratch
 * store followed by an accumulation step (*acc set).  -1 when x needs no
 * gradient (the graph input). */
cl_status cl_dnnl_grad_target(dn_ctx *d, int i, int x, int *store, int *acc)
{
    int r = rep(d, x);
    *acc = 0;
    *store = -1;
    if (x == d->g->input || r == d->g->input)
        return CL_OK;
    if (d->t[r].dstore < 0) {
        CL_TRY(cl_dnnl_md_store(d, &d->t[r].md, &d->t[r].dstore));
        *store = d->t[r].dstore;
        return CL_OK;
    }
    *acc = 1;
    return cl_dnnl_md_store(d, &d->t[r].md, store);
}

/* dstore(x) += src, both in x's layout. */
cl_status cl_dnnl_accumulate(dn_ctx *d, int i, int x, int src)
{
    cl_status st = CL_OK;
    int r = rep(d, x);
    dnnl_binary_desc_t bd;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    const dnnl_memory_desc_t *md = &d->t[r].md;
    DN(dnnl_binary_desc_init(&bd, dnnl_binary_add, md, md, md), i,
       "gradient sum descriptor");
    TRY(cl_dnnl_prim_make(d, i, "gradient sum", &bd, NULL, NULL, &pd, &prim));
    TRY(cl_dnnl_step_prim(d, &d->bwd, i, "gradient sum", tb(d, i), pd, prim,
                          &s));
    cl_dnnl_arg_store(d, s, DNNL_ARG_SRC_0, d->t[r].dstore, md);
    cl_dnnl_arg_store(d, s, DNNL_ARG_SRC_1, src, md);
    cl_dnnl_arg_store(d, s, DNNL_ARG_DST, d->t[r].dstore, md);
fail:
    return st;
}

cl_status cl_dnnl_hook_step(dn_ctx *d, int i, int param)
{
    dn_step *s;
    CL_TRY(
        cl_dnnl_step_new(d, &d->bwd, STEP_HOOK, i, "grad ready", tb(d, i), &s));
    s->aux = param;
    return CL_OK;
}

/* The gradient of the node's output, which every consumer has written. */
cl_status cl_dnnl_out_grad(dn_ctx *d, int i, int *store)
{
    int r = rep(d, d->g->nodes[i].out);
    *store = d->t[r].dstore;
    if (*store < 0)
        return cl_error(CL_ERR_UNSUPPORTED,
                        "%s: its output does not reach the loss, so backward "
                        "cannot give its parameters a gradient",
                        d->g->nodes[i].name);
    return CL_OK;
}

/* Weight gradient: straight into the grad arena when oneDNN's choice is
 * plain, else through a scratch store and a reorder. */
cl_status cl_dnnl_diff_weights(dn_ctx *d, int i, dn_step *s,
                               const dnnl_memory_desc_t *dwmd,
                               const dnnl_memory_desc_t *plain, float *grad,
                               int *tmp)
{
    *tmp = -1;
    if (md_eq(dwmd, plain)) {
        cl_dnnl_arg_ext(s, DNNL_ARG_DIFF_WEIGHTS, grad, plain);
        return CL_OK;
    }
    CL_TRY(cl_dnnl_md_store(d, dwmd, tmp));
    cl_dnnl_arg_store(d, s, DNNL_ARG_DIFF_WEIGHTS, *tmp, dwmd);
    return CL_OK;
}

cl_status cl_dnnl_diff_weights_back(dn_ctx *d, int i, int tmp,
                                    const dnnl_memory_desc_t *dwmd,
                                    const dnnl_memory_desc_t *plain,
                                    float *grad)
{
    cl_status st = CL_OK;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    if (tmp < 0)
        return CL_OK;
    TRY(cl_dnnl_reorder_make(d, i, "weight gradient reorder", dwmd, plain, &pd,
                             &prim));
    TRY(cl_dnnl_step_prim(d, &d->bwd, i, "weight gradient reorder", tb(d, i),
                          pd, prim, &s));
    cl_dnnl_arg_store(d, s, DNNL_ARG_FROM, tmp, dwmd);
    cl_dnnl_arg_ext(s, DNNL_ARG_TO, grad, plain);
fail:
    return st;
}

/* The weight-gradient step of conv or linear node i made from pd / prim:
 * src (smd) and dy (dmd) into the parameter's gradient (plain md wplain),
 * by way of a reorder when pd writes another layout, and the bias's when
 * bmd is not NULL; then the gradient-ready hooks of both. */
cl_status cl_dnnl_wgrad_step(dn_ctx *d, int i, const char *what,
                             dnnl_primitive_desc_t pd, dnnl_primitive_t prim,
                             int src, const dnnl_memory_desc_t *smd, int dy,
                             const dnnl_memory_desc_t *dmd,
                             const dnnl_memory_desc_t *wplain,
                             const dnnl_memory_desc_t *bmd)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    float *gw = cl_graph_grad(d->g, n->param[0]);
    dnnl_memory_desc_t dwmd = cl_dnnl_qmd(pd, dnnl_query_diff_weights_md, 0);
    dn_step *s;
    int tmp;
    TRY(cl_dnnl_step_prim(d, &d->bwd, i, what, tb(d, i), pd, prim, &s));
    cl_dnnl_arg_store(d, s, DNNL_ARG_SRC, src, smd);
    cl_dnnl_arg_store(d, s, DNNL_ARG_DIFF_DST, dy, dmd);
    TRY(cl_dnnl_diff_weights(d, i, s, &dwmd, wplain, gw, &tmp));
    if (bmd)
        cl_dnnl_arg_ext(s, DNNL_ARG_DIFF_BIAS, cl_graph_grad(d->g, n->param[1]),
                        bmd);
    TRY(cl_dnnl_diff_weights_back(d, i, tmp, &dwmd, wplain, gw));
    TRY(cl_dnnl_hook_step(d, i, n->param[0]));
    if (bmd)
        TRY(cl_dnnl_hook_step(d, i, n->param[1]));
fail:
    return st;
}

/* The weights copy backward-data reads: the forward copy when the layouts
 * agree, else a copy reordered from the forward copy (blocked to blocked
 * moves whole 16x16 tiles, faster than from the plain arena). */
static cl_status bwd_weights_copy(dn_ctx *d, int i,
                                  const dnnl_memory_desc_t *plain, float *w,
                                  float **use)
{
    dn_weighted *x = &d->nd[i].u.w;
    if (md_eq(&x->wb_md, &x->w_md)) {
        *use = x->w ? x->w : w;
        return CL_OK;
    }
    if (md_eq(&x->wb_md, plain)) {
        *use = w;
        return CL_OK;
    }
    if (x->w)
        CL_TRY(cl_dnnl_weight_copy(d, i, "backward weights reorder", &x->w_md,
                                   x->w, &x->wb_md, &x->wb));
    else
        CL_TRY(cl_dnnl_weight_copy(d, i, "backward weights reorder", plain, w,
                                   &x->wb_md, &x->wb));
    *use = x->wb;
    return CL_OK;
}

/* The backward-data step of conv or linear node i made from pd / prim: dy
 * (dmd) and the weights (w, plain md wplain, in the layout pd asks for)
 * into store dx (dxmd). */
cl_status cl_dnnl_bwd_data_step(dn_ctx *d, int i, const char *what,
                                dnnl_primitive_desc_t pd, dnnl_primitive_t prim,
                                int dy, const dnnl_memory_desc_t *dmd,
                                const dnnl_memory_desc_t *wplain, float *w,
                                int dx, const dnnl_memory_desc_t *dxmd)
{
    dn_weighted *x = &d->nd[i].u.w;
    dn_step *s;
    float *wb;
    x->wb_md = cl_dnnl_qmd(pd, dnnl_query_weights_md, 0);
    CL_TRY(bwd_weights_copy(d, i, wplain, w, &wb));
    CL_TRY(cl_dnnl_step_prim(d, &d->bwd, i, what, tb(d, i), pd, prim, &s));
    cl_dnnl_arg_store(d, s, DNNL_ARG_DIFF_DST, dy, dmd);
    cl_dnnl_arg_ext(s, DNNL_ARG_WEIGHTS, wb, &x->wb_md);
    cl_dnnl_arg_store(d, s, DNNL_ARG_DIFF_SRC, dx, dxmd);
    return CL_OK;
}

/* ---- the plan
 * ---------------------------------------------------------------- */

static cl_status plan_input_step(dn_ctx *d)
{
    cl_status st = CL_OK;
    int x = d->g->input;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    TRY(cl_dnnl_ensure_input_md(d, x));
    int r = rep(d, x);
    dnnl_memory_desc_t plain;
    md_plain_like(&plain, &d->t[r].md);
    /* The input is kept for the whole step so forward can run again. */
    cl_dnnl_touch(d, d->t[r].store, 0);
    cl_dnnl_touch(d, d->t[r].store, d->n_time);
    d->in_plain = md_eq(&plain, &d->t[r].md);
    if (d->in_plain)
        return CL_OK;
    TRY(cl_dnnl_reorder_make(d, -1, "input reorder", &plain, &d->t[r].md, &pd,
                             &prim));
    TRY(cl_dnnl_step_prim(d, &d->in, -1, "input reorder", 0, pd, prim, &s));
    s->args[s->nargs].arg = DNNL_ARG_FROM;
    s->args[s->nargs].kind = REF_USER;
    s->args[s->nargs].store = -1;
    s->args[s->nargs].md = plain;
    s->nargs++;
    cl_dnnl_arg_store(d, s, DNNL_ARG_TO, d->t[r].store, &d->t[r].md);
fail:
    return st;
}

cl_status cl_dnnl_plan(cl_backend *be, cl_graph *g, cl_plan_mode mode)
{
    cl_status st = CL_OK;
    dn_ctx *d = cl_alloc_zero(sizeof *d, "onednn: plan");
    if (!d)
        return CL_ERR_NOMEM;
    be->priv = d;
    d->be = be;
    d->g = g;
    d->mode = mode;
    d->amp = be->opts.amp_level;
    if (d->amp && !cl_dnnl_bf16_supported())
        return cl_error(CL_ERR_UNSUPPORTED,
                        "amp_level O%d needs bf16 convolutions, which oneDNN "
                        "runs on AVX-512 CPUs only, and it runs at %s here; "
                        "use amp_level O0 (f32)",
                        d->amp, cl_dnnl_isa_name());
    if (be->opts.threads > 0)
        omp_set_num_threads(be->opts.threads);
    cl_dnnl_ftz();
    DN(dnnl_engine_create(&d->eng, dnnl_cpu, 0), -1, "engine");
    DN(dnnl_stream_create(&d->strm, d->eng, dnnl_stream_default_flags), -1,
       "stream");
    size_t nt = (size_t)g->n_tensors, nn = (size_t)g->n_nodes;
    d->t = cl_alloc_zero(sizeof *d->t * (nt ? nt : 1), "onednn: tensors");
    d->nd = cl_alloc_zero(sizeof *d->nd * (nn ? nn : 1), "onednn: nodes");
    d->ncons = cl_alloc_zero(sizeof(int) * (nt ? nt : 1), "onednn: uses");
    d->lastc = cl_alloc_zero(sizeof(int) * (nt ? nt : 1), "onednn: uses");
    d->labels =
        cl_alloc_zero(sizeof(int32_t) * (size_t)g->batch + 1, "onednn: labels");
    d->targets =
        cl_alloc_zero(sizeof(float) * (size_t)g->batch *
                          (size_t)(g->num_classes > 0 ? g->num_classes : 1),
                      "onednn: targets");
    if (!d->t || !d->nd || !d->ncons || !d->lastc || !d->labels ||
        !d->targets) {
        st = CL_ERR_NOMEM;
        goto fail;
    }
    for (int t = 0; t < g->n_tensors; t++) {
        d->t[t].rep = t;
        d->t[t].store = d->t[t].dstore = d->t[t].cast = -1;
        d->lastc[t] = -1;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const cl_node *n = &g->nodes[i];
        if (!cl_dnnl_supports(g, n) || (be->opts.fallback_ops >> n->op & 1u)) {
            if (n->out == g->loss)
                return cl_error(CL_ERR_UNSUPPORTED,
                                "%s: the loss (%s) has no reference "
                                "fallback in the onednn backend",
                                n->name, cl_op_name(n->op));
            d->nd[i].fallback = 1;
            d->fallback_ops |= 1u << n->op;
            cl_dnnl_fallback_init(&d->nd[i]);
        } else if (cl_dnnl_ops[n->op].init) {
            cl_dnnl_ops[n->op].init(&d->nd[i]);
        }
        for (int a = 0; a < g->nodes[i].n_in; a++) {
            int x = g->nodes[i].in[a];
            d->ncons[x]++;
            d->lastc[x] = i;
        }
    }
    TRY(cl_dnnl_choose_paths(d));
    cl_dnnl_lower(d);
    if (d->fold_floats) {
        d->fold = cl_alloc(sizeof(float) * d->fold_floats, "onednn: fold");
        if (!d->fold) {
            st = CL_ERR_NOMEM;
            goto fail;
        }
    }

    /* Forward in graph order, then backward in reverse, each node planned
     * by its op's entry (or the fallback). */
    for (int i = 0; i < g->n_nodes; i++) {
        if (d->nd[i].skip)
            continue;
        TRY(d->nd[i].fallback ? cl_dnnl_fallback_fwd(d, i)
                              : cl_dnnl_ops[g->nodes[i].op].fwd(d, i));
    }
    if (mode == CL_PLAN_TRAIN && g->loss >= 0) {
        for (int i = g->n_nodes - 1; i >= 0; i--) {
            const dn_op *op = &cl_dnnl_ops[g->nodes[i].op];
            if (d->nd[i].skip)
                continue;
            if (d->nd[i].fallback)
                TRY(cl_dnnl_fallback_bwd(d, i));
            else if (op->bwd)
                TRY(op->bwd(d, i));
        }
    }
    d->n_time = 2 * g->n_nodes + 1;
    TRY(plan_input_step(d));
    /* The edges stay readable after forward and backward. */
    int edges[2] = {g->logits, g->features};
    for (int k = 0; k < 2; k++)
        if (edges[k] >= 0 && d->t[rep(d, edges[k])].store >= 0)
            cl_dnnl_touch(d, d->t[rep(d, edges[k])].store, d->n_time);

    TRY(cl_dnnl_arena_plan(d->st, d->n_st, 4096, &d->arena_bytes));
    d->arena = cl_alloc(d->arena_bytes, "onednn: activation arena");
    d->scratch = cl_alloc(d->scratch_bytes, "onednn: scratchpad");
    d->sync_sums = cl_alloc_zero(sizeof(double) * (d->sync_len + 1),
                                 "onednn: reduction sums");
    if (!d->arena || !d->scratch || !d->sync_sums) {
        st = CL_ERR_NOMEM;
        goto fail;
    }
    TRY(cl_dnnl_bind_list(d, &d->fwd_train));
    TRY(cl_dnnl_bind_list(d, &d->fwd_eval));
    TRY(cl_dnnl_bind_list(d, &d->bwd));
    TRY(cl_dnnl_bind_list(d, &d->sync));
    TRY(cl_dnnl_bind_list(d, &d->in));
    d->dirty = 1;
    return CL_OK;
fail:
    return st;
}
