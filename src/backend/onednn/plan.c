/* The oneDNN backend's plan, the dispatcher: the table of op planners
 * indexed by op, supports(), and the plan driver that calls them (node
 * data, lowering, forward then backward planning, the input step, the
 * arena and the memory objects), and the plan's release.  It calls the op
 * files through the table; they never call back here (the backward
 * helpers they share are in grad.c, the plain views in plain.c). */
#include <dnnl.h>
#include <omp.h>
#include <string.h>

#include "backend/onednn/internal.h"
#include "backend/onednn_info.h"
#include "core/error.h"
#include "core/mem.h"

/* ---- the op table ----------------------------------------------------------
 *
 * One entry per op, the planners of its family's file (internal.h lists
 * them).  An op whose fwd is NULL is not supported here (supports() says
 * so) and runs through the reference fallback (fallback.c).  Only this
 * file reads the table. */
typedef struct dn_op {
    void (*init)(dn_node *x);           /* node data defaults, or NULL */
    void (*lower)(dn_ctx *d, int i);    /* fusion decisions, or NULL */
    cl_status (*fwd)(dn_ctx *d, int i); /* plans the forward steps */
    cl_status (*bwd)(dn_ctx *d, int i); /* plans the backward, or NULL */
    void (*free)(dn_node *x);           /* frees node data, or NULL */
} dn_op;

static const dn_op cl_dnnl_ops[CL_OP_COUNT] = {
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

/* ---- the plan -------------------------------------------------------------
 */

/* Every node's fusion decisions, in graph order; a node that fused into
 * an earlier one, or runs the reference fallback, decides nothing. */
static void lower_nodes(dn_ctx *d)
{
    cl_graph *g = d->g;
    for (int i = 0; i < g->n_nodes; i++) {
        const dn_op *op = &cl_dnnl_ops[g->nodes[i].op];
        if (!d->nd[i].skip && !d->nd[i].fallback && op->lower)
            op->lower(d, i);
    }
}

static cl_status plan_input_step(dn_ctx *d)
{
    cl_status st = CL_OK;
    int x = d->g->input;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    TRY_GOTO(cl_dnnl_ensure_input_md(d, x));
    int r = rep(d, x);
    dnnl_memory_desc_t plain;
    md_plain_like(&plain, &d->t[r].md);
    /* The input is kept for the whole step so forward can run again. */
    cl_dnnl_touch(d, d->t[r].store, 0);
    cl_dnnl_touch(d, d->t[r].store, d->n_time);
    d->in_plain = md_eq(&plain, &d->t[r].md);
    if (d->in_plain)
        return CL_OK;
    TRY_GOTO(cl_dnnl_reorder_make(d, -1, "input reorder", &plain, &d->t[r].md,
                                  &pd, &prim));
    TRY_GOTO(
        cl_dnnl_step_prim(d, &d->in, -1, "input reorder", 0, pd, prim, &s));
    s->args[s->nargs].arg = DNNL_ARG_FROM;
    s->args[s->nargs].kind = REF_USER;
    s->args[s->nargs].store = -1;
    s->args[s->nargs].md = plain;
    s->nargs++;
    cl_dnnl_arg_store(d, s, DNNL_ARG_TO, d->t[r].store, &d->t[r].md);
fail:
    return st;
}

/* The first half of a plan: the context, the engine, per-tensor and
 * per-node data, which nodes fall back to the reference kernels. */
cl_status cl_dnnl_plan_begin(cl_backend *be, cl_graph *g, cl_plan_mode mode)
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
    d->q8_half = !cl_dnnl_int8_vnni();
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
        d->t[t].store = d->t[t].dstore = d->t[t].cast = d->t[t].q8 = -1;
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
    return CL_OK;
fail:
    return st;
}

/* The second half, once d->paths is chosen: lowering, the forward and
 * backward steps, the arena and the memory objects. */
cl_status cl_dnnl_plan_build(dn_ctx *d)
{
    cl_status st = CL_OK;
    cl_graph *g = d->g;
    lower_nodes(d);
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
        TRY_GOTO(d->nd[i].fallback ? cl_dnnl_fallback_fwd(d, i)
                                   : cl_dnnl_ops[g->nodes[i].op].fwd(d, i));
    }
    if (d->mode == CL_PLAN_TRAIN && g->loss >= 0) {
        for (int i = g->n_nodes - 1; i >= 0; i--) {
            const dn_op *op = &cl_dnnl_ops[g->nodes[i].op];
            if (d->nd[i].skip)
                continue;
            if (d->nd[i].fallback)
                TRY_GOTO(cl_dnnl_fallback_bwd(d, i));
            else if (op->bwd)
                TRY_GOTO(op->bwd(d, i));
        }
    }
    d->n_time = 2 * g->n_nodes + 1;
    TRY_GOTO(plan_input_step(d));
    /* The edges stay readable after forward and backward. */
    int edges[2] = {g->logits, g->features};
    for (int k = 0; k < 2; k++)
        if (edges[k] >= 0 && d->t[rep(d, edges[k])].store >= 0)
            cl_dnnl_touch(d, d->t[rep(d, edges[k])].store, d->n_time);

    TRY_GOTO(cl_dnnl_arena_plan(d->st, d->n_st, 4096, &d->arena_bytes));
    d->arena = cl_alloc(d->arena_bytes, "onednn: activation arena");
    d->scratch = cl_alloc(d->scratch_bytes, "onednn: scratchpad");
    d->sync_sums = cl_alloc_zero(sizeof(double) * (d->sync_len + 1),
                                 "onednn: reduction sums");
    if (!d->arena || !d->scratch || !d->sync_sums) {
        st = CL_ERR_NOMEM;
        goto fail;
    }
    TRY_GOTO(cl_dnnl_bind_list(d, &d->fwd_train));
    TRY_GOTO(cl_dnnl_bind_list(d, &d->fwd_eval));
    TRY_GOTO(cl_dnnl_bind_list(d, &d->bwd));
    TRY_GOTO(cl_dnnl_bind_list(d, &d->sync));
    TRY_GOTO(cl_dnnl_bind_list(d, &d->in));
    d->dirty = 1;
    return CL_OK;
fail:
    return st;
}

/* Frees be->priv and all it holds, also after a plan that stopped half
 * way (the vtable's destroy). */
void cl_dnnl_destroy(cl_backend *be)
{
    dn_ctx *d = be->priv;
    if (!d)
        return;
    cl_dnnl_free_list(&d->fwd_train);
    cl_dnnl_free_list(&d->fwd_eval);
    cl_dnnl_free_list(&d->bwd);
    cl_dnnl_free_list(&d->sync);
    cl_dnnl_free_list(&d->in);
    for (int k = 0; k < d->n_prims; k++)
        dnnl_primitive_destroy(d->prims[k]);
    for (int k = 0; k < d->n_pds; k++)
        dnnl_primitive_desc_destroy(d->pds[k]);
    cl_free(d->prims);
    cl_free(d->pds);
    for (int i = 0; d->nd && i < d->g->n_nodes; i++) {
        const dn_op *op = &cl_dnnl_ops[d->g->nodes[i].op];
        if (d->nd[i].fallback)
            cl_dnnl_fallback_free(&d->nd[i]);
        else if (op->free)
            op->free(&d->nd[i]);
    }
    cl_free(d->sprof);
    cl_free(d->nd);
    cl_free(d->t);
    cl_free(d->ncons);
    cl_free(d->lastc);
    cl_free(d->st);
    cl_free(d->arena);
    cl_free(d->scratch);
    cl_free(d->sync_sums);
    cl_free(d->paths);
    cl_free(d->impls);
    cl_free(d->impl_count);
    cl_free(d->impl_name);
    cl_free(d->choice);
    cl_free(d->fold);
    cl_free(d->labels);
    cl_free(d->targets);
    if (d->strm)
        dnnl_stream_destroy(d->strm);
    if (d->eng)
        dnnl_engine_destroy(d->eng);
    cl_free(d);
    be->priv = NULL;
}
