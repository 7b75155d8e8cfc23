/* Small graphs that use the graph beyond ResNet (shared by the ref tests
 * of test_graph_general.c and the backend parity of
 * test_onednn_general.c), and how their params and batches are filled;
 * the op-parity table of test_backend_ops.c takes its gather indices
 * (BIAS_INDEX, nhwc_index, window_index) and mixed_step from here for its
 * rows.  Header-only (static functions). */
#ifndef CL_TESTS_GRAPH_CASES_H
#define CL_TESTS_GRAPH_CASES_H

#include <stdint.h>

#include "core/rng.h"
#include "graph/graph.h"

enum { GN = 2, GC = 3, GH = 4, GW = 5, GK = 4 };

static inline void fill_uniform(float *p, int64_t n, uint64_t seed, float lo,
                                float hi)
{
    cl_rng r;
    cl_rng_init(&r, seed, 3);
    for (int64_t i = 0; i < n; i++)
        p[i] = lo + (hi - lo) * cl_rng_uniform(&r);
}

/* Random params in [-0.5, 0.5): no gradient is trivially zero. */
static inline void fill_params(cl_graph *g, uint64_t seed)
{
    for (int t = 0; t < g->n_tensors; t++)
        if (g->tensors[t].kind == CL_GT_PARAM)
            fill_uniform(cl_graph_param(g, t), cl_graph_numel(g, t),
                         seed + (uint64_t)t, -0.5f, 0.5f);
}

typedef cl_status (*gbuild_fn)(cl_graph *g);

/* x (N,C,H,W) -> proj: linear over W (5 -> 6), (N,C,H,6) -> gap (N,C) ->
 * fc (C -> K) -> loss.  The projection's rows are N*C*H, not N. */
static inline cl_status build_linear4d(cl_graph *g)
{
    int x, p, q, y;
    cl_linear_attr pa = {GW, 6, 1}, fa = {GC, GK, 1};
    cl_softmax_ce_attr sa = {GK, 0.0f};
    CL_TRY(cl_graph_input(g, GC, GH, GW, &x));
    CL_TRY(cl_graph_linear(g, "proj", x, &pa, &p));
    CL_TRY(cl_graph_global_avgpool(g, "gap", p, &q));
    CL_TRY(cl_graph_linear(g, "fc", q, &fa, &y));
    CL_TRY(cl_graph_softmax_ce(g, y, &sa, 0));
    return cl_graph_finalize(g);
}

/* Attention's two products: x (N,C,H,W) -> q, k, v: linear over W
 * (5 -> 6) -> s = q k^T (N,C,H,H) -> o = s v (N,C,H,6) -> gap (N,C) ->
 * fc -> loss.  Each matmul input takes its own gradient, so every weight's
 * gradient needs both of a matmul's. */
static inline cl_status build_attention(cl_graph *g)
{
    int x, q, k, v, s, o, p, y;
    cl_linear_attr pa = {GW, 6, 1}, fa = {GC, GK, 1};
    cl_matmul_attr qk = {1, 1.0f}, sv = {0, 1.0f};
    cl_softmax_ce_attr sa = {GK, 0.0f};
    CL_TRY(cl_graph_input(g, GC, GH, GW, &x));
    CL_TRY(cl_graph_linear(g, "q", x, &pa, &q));
    CL_TRY(cl_graph_linear(g, "k", x, &pa, &k));
    CL_TRY(cl_graph_linear(g, "v", x, &pa, &v));
    CL_TRY(cl_graph_matmul(g, "qk", q, k, &qk, &s));
    CL_TRY(cl_graph_matmul(g, "sv", s, v, &sv, &o));
    CL_TRY(cl_graph_global_avgpool(g, "gap", o, &p));
    CL_TRY(cl_graph_linear(g, "fc", p, &fa, &y));
    CL_TRY(cl_graph_softmax_ce(g, y, &sa, 0));
    return cl_graph_finalize(g);
}

/* x (N,C,H,W) -> bn -> gap -> fc -> loss, with an I64 buffer "rel.index"
 * (3,2) that no node reads: the state a checkpoint carries beside BN's. */
static inline cl_status build_bn_index(cl_graph *g)
{
    int x, b, p, y, ix;
    cl_batchnorm2d_attr ba = cl_batchnorm2d_attr_make(GC);
    cl_linear_attr fa = {GC, GK, 1};
    cl_softmax_ce_attr sa = {GK, 0.0f};
    CL_TRY(cl_graph_input(g, GC, GH, GW, &x));
    CL_TRY(cl_graph_batchnorm2d(g, "bn", x, &ba, &b));
    CL_TRY(cl_graph_buffer_add(
        g, "rel.index", cl_shape_make(2, (int64_t[]){3, 2}), CL_I64, &ix));
    CL_TRY(cl_graph_global_avgpool(g, "gap", b, &p));
    CL_TRY(cl_graph_linear(g, "fc", p, &fa, &y));
    CL_TRY(cl_graph_softmax_ce(g, y, &sa, 0));
    return cl_graph_finalize(g);
}

/* The relative position index of build_bias: repeats (row 3 three
 * times, its gradient a sum) and rows no position reads (2, 4, 5). */
static const int64_t BIAS_INDEX[6] = {0, 3, 3, 6, 1, 3};

/* A node with no activation input: x (N,C,H,W) -> q: linear over W
 * (5 -> 6); bias = table_gather(table (7,6), index (6)) -> (6,6);
 * s = q bias (one matrix for every (n,c)) -> gap -> fc -> loss.  The
 * index is filled after finalize, as a model fills it. */
static inline cl_status build_bias(cl_graph *g)
{
    int x, q, ix, b, s, p, y;
    cl_linear_attr pa = {GW, 6, 1}, fa = {GC, GK, 1};
    cl_table_gather_attr ta = {7, 6};
    cl_matmul_attr ma = {0, 1.0f};
    cl_softmax_ce_attr sa = {GK, 0.0f};
    CL_TRY(cl_graph_input(g, GC, GH, GW, &x));
    CL_TRY(cl_graph_linear(g, "q", x, &pa, &q));
    CL_TRY(cl_graph_buffer_add(g, "attn.relative_position_index",
                               cl_shape_make(1, (int64_t[]){6}), CL_I64, &ix));
    CL_TRY(cl_graph_table_gather(
        g, "attn.bias", "attn.relative_position_bias_table", ix, &ta, &b));
    CL_TRY(cl_graph_matmul(g, "qb", q, b, &ma, &s));
    CL_TRY(cl_graph_global_avgpool(g, "gap", s, &p));
    CL_TRY(cl_graph_linear(g, "fc", p, &fa, &y));
    CL_TRY(cl_graph_softmax_ce(g, y, &sa, 0));
    CL_TRY(cl_graph_finalize(g));
    for (int k = 0; k < 6; k++)
        cl_graph_buffer_i64(g, ix)[k] = BIAS_INDEX[k];
    return CL_OK;
}

/* Swin's window attention in miniature: x (N,C,H,W) -> ln: layernorm
 * over W -> gelu -> q, k: linear over W (5 -> 4) -> s = q k^T (N,C,H,H)
 * -> p = softmax(s + bias + mask) -> o = p v (v a third linear) -> gap
 * (N,C) -> fc -> loss (the mean of p itself would be a constant).  The bias is
 * table_gather(table (7,4), index (C,H)) -> (C,H,H), broadcast over N, as
 * the relative position bias over windows; the mask an f32 buffer
 * (N,1,H,H) of 0 and -100, broadcast over C (over heads in Swin).  plain:
 * softmax(s) alone (n_in 1, no buffer). */
static inline cl_status build_attn_softmax_how(cl_graph *g, int plain)
{
    int x, l, a, q, k, v, s, ix, b = -1, m = -1, p, o, pl, y;
    cl_layernorm_attr la = cl_layernorm_attr_make(GW);
    /* k without a bias: q . b_k shifts a whole row of scores, which the
     * softmax cancels, so its gradient would be exactly zero. */
    cl_linear_attr pa = {GW, GH, 1}, ka = {GW, GH, 0}, fa = {GC, GK, 1};
    cl_matmul_attr qk = {1, 0.5f}, pv = {0, 1.0f};
    cl_table_gather_attr ta = {7, GH};
    cl_softmax_ce_attr sa = {GK, 0.0f};
    CL_TRY(cl_graph_input(g, GC, GH, GW, &x));
    CL_TRY(cl_graph_layernorm(g, "ln", x, &la, &l));
    CL_TRY(cl_graph_gelu(g, "act", l, &a));
    CL_TRY(cl_graph_linear(g, "q", a, &pa, &q));
    CL_TRY(cl_graph_linear(g, "k", a, &ka, &k));
    CL_TRY(cl_graph_linear(g, "v", a, &pa, &v));
    CL_TRY(cl_graph_matmul(g, "qk", q, k, &qk, &s));
    if (!plain) {
        CL_TRY(cl_graph_buffer_add(g, "attn.index",
                                   cl_shape_make(2, (int64_t[]){GC, GH}),
                                   CL_I64, &ix));
        CL_TRY(
            cl_graph_table_gather(g, "attn.bias", "attn.table", ix, &ta, &b));
        CL_TRY(cl_graph_buffer_add(
            g, "attn.mask", cl_shape_make(4, (int64_t[]){g->batch, 1, GH, GH}),
            CL_F32, &m));
    }
    CL_TRY(cl_graph_softmax(g, "attn.softmax", s, b, m, &p));
    CL_TRY(cl_graph_matmul(g, "pv", p, v, &pv, &o));
    CL_TRY(cl_graph_global_avgpool(g, "gap", o, &pl));
    CL_TRY(cl_graph_linear(g, "fc", pl, &fa, &y));
    CL_TRY(cl_graph_softmax_ce(g, y, &sa, 0));
    CL_TRY(cl_graph_finalize(g));
    if (plain)
        return CL_OK;
    int64_t *index = cl_graph_buffer_i64(g, ix);
    for (int k2 = 0; k2 < GC * GH; k2++)
        index[k2] = (5 * k2 + 2) % 7;
    float *mask = cl_graph_buffer(g, m);
    for (int k2 = 0; k2 < g->batch * GH * GH; k2++)
        mask[k2] = k2 % 3 == 1 ? -100.0f : 0.0f;
    return CL_OK;
}

static inline cl_status build_attn_softmax(cl_graph *g)
{
    return build_attn_softmax_how(g, 0);
}

static inline cl_status build_plain_softmax(cl_graph *g)
{
    return build_attn_softmax_how(g, 1);
}

/* Swin's data movements on a 4x4 token grid (build_window): window side
 * WS, cyclic shift WSHIFT. */
enum { WG = 4, WS = 2, WSHIFT = 1, WE = 6 };

/* NCHW (N,C,WG,WG) -> NHWC (N,WG*WG,C), one float per row. */
static inline void nhwc_index(int64_t *ix, int N, int C)
{
    for (int n = 0; n < N; n++)
        for (int h = 0; h < WG; h++)
            for (int w = 0; w < WG; w++)
                for (int c = 0; c < C; c++)
                    ix[((n * WG + h) * WG + w) * C + c] =
                        ((int64_t)n * C + c) * WG * WG + h * WG + w;
}

/* The window row of token (n, h, w) of the grid rolled by -WSHIFT
 * (torch.roll(x, (-s, -s))) and partitioned into WSxWS windows. */
static int64_t window_row(int n, int h, int w)
{
    const int nw = WG / WS;
    return (((int64_t)n * nw + h / WS) * nw + w / WS) * WS * WS +
           (h % WS) * WS + w % WS;
}

/* fwd: cyclic shift + window partition, (N,WG*WG,E) -> (N*nW,WS*WS,E);
 * inv: window reverse + shift back, its inverse. */
static inline void window_index(int64_t *fwd, int64_t *inv, int N)
{
    for (int n = 0; n < N; n++)
        for (int h = 0; h < WG; h++)
            for (int w = 0; w < WG; w++) {
                /* rolled[h][w] = x[(h + s) % G][(w + s) % G] */
                const int64_t src = ((int64_t)n * WG + (h + WSHIFT) % WG) * WG +
                                    (w + WSHIFT) % WG;
                fwd[window_row(n, h, w)] = src;
                inv[src] = window_row(n, h, w);
            }
}

/* A step at which the droppath node of a finalized graph (its first) keeps
 * some of the batch's samples and drops others under seed, so that a
 * check sees both; 0 when the graph has none. */
static inline uint64_t mixed_step(const cl_graph *g, uint64_t seed)
{
    int dn = -1;
    for (int i = 0; i < g->n_nodes && dn < 0; i++)
        if (g->nodes[i].op == CL_OP_DROPPATH)
            dn = i;
    if (dn < 0)
        return 0;
    const float p = g->nodes[dn].attr.droppath.p;
    for (uint64_t step = 0;; step++) {
        cl_rng r;
        int kept = 0;
        cl_rng_init_node(&r, seed, step, (uint64_t)dn);
        for (int n = 0; n < g->batch; n++)
            kept += cl_droppath_scale(&r, n, p) != 0.0f;
        if (kept > 0 && kept < g->batch)
            return step;
    }
}

/* Swin's block in miniature, every gather index filled after finalize:
 * x (N,C,H,W) -> proj: linear over W (5 -> 4), (N,C,4,4) -> to_nhwc:
 * row_gather (cols 1) (N,16,C) -> embed: linear (C -> 6) -> shift +
 * window partition: row_gather (cols 6) (N*4,4,6) -> s = 0.5 w w^T ->
 * o = s w -> window reverse + shift back (N,16,6) -> droppath (p 0.25) ->
 * token mean (N,6) -> fc -> loss. */
static inline cl_status build_window(cl_graph *g)
{
    int x, p, t, e, w, s, o, r, dp, m, y, inh, iw, iv;
    const int N = g->batch, nw = (WG / WS) * (WG / WS);
    cl_linear_attr pa = {GW, WG, 1}, ea = {GC, WE, 1}, fa = {WE, GK, 1};
    cl_matmul_attr qk = {1, 0.5f}, sv = {0, 1.0f};
    cl_droppath_attr da = {0.25f};
    cl_softmax_ce_attr sa = {GK, 0.0f};
    const int64_t rows = (int64_t)N * WG * WG;
    CL_TRY(cl_graph_input(g, GC, GH, GW, &x));
    CL_TRY(cl_graph_buffer_add(g, "to_nhwc.index",
                               cl_shape_make(1, (int64_t[]){rows * GC}), CL_I64,
                               &inh));
    CL_TRY(cl_graph_buffer_add(
        g, "window.index", cl_shape_make(1, (int64_t[]){rows}), CL_I64, &iw));
    CL_TRY(cl_graph_buffer_add(
        g, "reverse.index", cl_shape_make(1, (int64_t[]){rows}), CL_I64, &iv));
    CL_TRY(cl_graph_linear(g, "proj", x, &pa, &p));
    cl_shape ts = cl_shape_make(3, (int64_t[]){N, WG * WG, GC});
    CL_TRY(cl_graph_row_gather(g, "to_nhwc", p, inh, 1, &ts, &t));
    CL_TRY(cl_graph_linear(g, "embed", t, &ea, &e));
    cl_shape ws = cl_shape_make(3, (int64_t[]){(int64_t)N * nw, WS * WS, WE});
    CL_TRY(cl_graph_row_gather(g, "window", e, iw, WE, &ws, &w));
    CL_TRY(cl_graph_matmul(g, "qk", w, w, &qk, &s));
    CL_TRY(cl_graph_matmul(g, "sv", s, w, &sv, &o));
    cl_shape rs = cl_shape_make(3, (int64_t[]){N, WG * WG, WE});
    CL_TRY(cl_graph_row_gather(g, "reverse", o, iv, WE, &rs, &r));
    CL_TRY(cl_graph_droppath(g, "drop", r, &da, &dp));
    CL_TRY(cl_graph_token_meanpool(g, "mean", dp, &m));
    CL_TRY(cl_graph_linear(g, "fc", m, &fa, &y));
    CL_TRY(cl_graph_softmax_ce(g, y, &sa, 0));
    CL_TRY(cl_graph_finalize(g));
    nhwc_index(cl_graph_buffer_i64(g, inh), N, GC);
    window_index(cl_graph_buffer_i64(g, iw), cl_graph_buffer_i64(g, iv), N);
    return CL_OK;
}

#endif
