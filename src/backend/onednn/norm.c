/* The oneDNN backend's layer normalisation (over the last dimension) as
 * loops of its own, forward (training: saving each row's mean and 1/std)
 * and backward (with the gamma and beta gradients) side by side.
 *
 * Why not oneDNN's layer_normalization primitive: oneDNN 2.6 runs it
 * through its generic `simple:any` kernel, whose backward took three times
 * its forward, and the pair took about a fifth of a Swin training step
 * (docs/transformer.md).  A row here is at most a few kilobytes, so each
 * row is read from L1 in every pass after the first, and sums are kept in
 * 16 lanes that vectorise without reassociation (the same sums on any
 * vector width).
 *
 * Activations other than a convolution's output are plain here already
 * (the reference fallback, the inner product and these ops write
 * row-major); a convolution's output may be blocked (nChw16c) or
 * channels-last, and is reordered to a plain copy first (plain.c's
 * cl_dnnl_plain_value), since these ops index rows of the last
 * dimension.  Data and its gradient are in the input's type (bf16 under
 * amp O2), arithmetic, statistics, gamma and beta in f32. */
#include <math.h>
#include <string.h>

#include "backend/onednn/internal.h"
#include "backend/onednn/vec.h"

void cl_dnnl_norm_init(dn_node *x)
{
    x->u.ln.src = x->u.ln.mean = x->u.ln.rstd = -1;
}

/* Rows per block of the gamma and beta gradients: each block sums its
 * rows in order, then the blocks are summed in order, so the result does
 * not depend on the thread count. */
enum { BLOCK_ROWS = 256 };

/* Positions of the forward step's arguments (mean and rstd in a training
 * forward only). */
enum { LF_X, LF_Y, LF_GAMMA, LF_BETA, LF_MEAN, LF_RSTD };

/* Positions of the backward step's arguments (dx last, when x takes a
 * gradient). */
enum {
    LB_X,
    LB_DY,
    LB_GAMMA,
    LB_MEAN,
    LB_RSTD,
    LB_DGAMMA,
    LB_DBETA,
    LB_PART,
    LB_DX
};

/* The mean and 1/std of one row of C (two passes: the mean, then the
 * squares around it); a tail of C % 16 goes to the first lanes. */
static inline void row_stats(const void *x, int C, float eps, int bf,
                             float *mean, float *rstd)
{
    const int C16 = C - C % LANES;
    v16 a = {0}, q = {0};
    for (int c = 0; c < C16; c += LANES)
        a += load16(x, c, bf);
    for (int c = C16; c < C; c++)
        a[c - C16] += dn_get(x, c, bf);
    const float mu = lanes_sum(&a) / (float)C;
    for (int c = 0; c < C16; c += LANES) {
        const v16 v = load16(x, c, bf) - mu;
        q += v * v;
    }
    for (int c = C16; c < C; c++) {
        const float v = dn_get(x, c, bf) - mu;
        q[c - C16] += v * v;
    }
    *mean = mu;
    *rstd = 1.0f / sqrtf(lanes_sum(&q) / (float)C + eps);
}

static inline void fwd_rows(const void *x, void *y, const float *gamma,
                            const float *beta, float *mean, float *rstd,
                            int64_t rows, int C, float eps, int bf)
{
    const int C16 = C - C % LANES;
#pragma omp parallel for schedule(static) if (rows * C >= (1 << 15))
    for (int64_t r = 0; r < rows; r++) {
        const size_t o = (size_t)(r * C) * (bf ? 2u : 4u);
        const char *xr = (const char *)x + o;
        char *yr = (char *)y + o;
        float mu, rs;
        row_stats(xr, C, eps, bf, &mu, &rs);
        for (int c = 0; c < C16; c += LANES) {
            const v16 v = (load16(xr, c, bf) - mu) * rs * load16(gamma, c, 0) +
                          load16(beta, c, 0);
            store16(yr, c, &v, bf);
        }
        for (int c = C16; c < C; c++)
            dn_put(yr, c, (dn_get(xr, c, bf) - mu) * rs * gamma[c] + beta[c],
                   bf);
        if (mean) {
            mean[r] = mu;
            rstd[r] = rs;
        }
    }
}

static cl_status fwd_run(dn_ctx *d, const dn_step *s)
{
    const cl_node *n = &d->g->nodes[s->node];
    const int C = n->attr.layernorm.features;
    const int64_t rows = cl_graph_numel(d->g, n->in[0]) / C;
    const int bf = md_bf16(&s->args[LF_X].md);
    float *mean = s->aux ? dn_step_arg(d, s, LF_MEAN) : NULL;
    float *rstd = s->aux ? dn_step_arg(d, s, LF_RSTD) : NULL;
    const void *x = dn_step_arg(d, s, LF_X);
    void *y = dn_step_arg(d, s, LF_Y);
    const float *gamma = dn_step_arg(d, s, LF_GAMMA),
                *beta = dn_step_arg(d, s, LF_BETA);
    const float eps = n->attr.layernorm.eps;
    /* One call per type, so that the compiler may specialise the loops
     * (whether it does inside the OpenMP region is not measured). */
    if (bf)
        fwd_rows(x, y, gamma, beta, mean, rstd, rows, C, eps, 1);
    else
        fwd_rows(x, y, gamma, beta, mean, rstd, rows, C, eps, 0);
    return CL_OK;
}

/* One block of rows [r0, r1): dx (when wanted) and the block's gamma and
 * beta sums (pg, pb, C each). */
static inline void bwd_block(const void *x, const void *dy, void *dx,
                             const float *gamma, const float *mean,
                             const float *rstd, float *pg, float *pb,
                             int64_t r0, int64_t r1, int C, int bf)
{
    const int C16 = C - C % LANES;
    for (int c = 0; c < C; c++)
        pg[c] = pb[c] = 0.0f;
    for (int64_t r = r0; r < r1; r++) {
        const size_t o = (size_t)(r * C) * (bf ? 2u : 4u);
        const char *xr = (const char *)x + o, *dyr = (const char *)dy + o;
        const float mu = mean[r], rs = rstd[r];
        v16 sg = {0}, sx = {0};
        for (int c = 0; c < C16; c += LANES) {
            const v16 g = load16(dyr, c, bf);
            const v16 xh = (load16(xr, c, bf) - mu) * rs;
            const v16 gg = g * load16(gamma, c, 0);
            sg += gg;
            sx += gg * xh;
            const v16 ng = load16(pg, c, 0) + g * xh;
            const v16 nb = load16(pb, c, 0) + g;
            store16(pg, c, &ng, 0);
            store16(pb, c, &nb, 0);
        }
        for (int c = C16; c < C; c++) {
            const float g = dn_get(dyr, c, bf);
            const float xh = (dn_get(xr, c, bf) - mu) * rs;
            sg[c - C16] += g * gamma[c];
            sx[c - C16] += g * gamma[c] * xh;
            pg[c] += g * xh;
            pb[c] += g;
        }
        if (!dx)
            continue;
        const float mg = lanes_sum(&sg) / (float)C;
        const float mx = lanes_sum(&sx) / (float)C;
        char *dxr = (char *)dx + o;
        for (int c = 0; c < C16; c += LANES) {
            const v16 xh = (load16(xr, c, bf) - mu) * rs;
            const v16 v =
                rs * (load16(dyr, c, bf) * load16(gamma, c, 0) - mg - xh * mx);
            store16(dxr, c, &v, bf);
        }
        for (int c = C16; c < C; c++) {
            const float xh = (dn_get(xr, c, bf) - mu) * rs;
            dn_put(dxr, c, rs * (dn_get(dyr, c, bf) * gamma[c] - mg - xh * mx),
                   bf);
        }
    }
}

static inline void bwd_rows(const void *x, const void *dy, void *dx,
                            const float *gamma, const float *mean,
                            const float *rstd, float *part, int64_t rows, int C,
                            int bf)
{
    const int64_t blocks = (rows + BLOCK_ROWS - 1) / BLOCK_ROWS;
#pragma omp parallel for schedule(static) if (rows * C >= (1 << 15))
    for (int64_t b = 0; b < blocks; b++) {
        const int64_t r0 = b * BLOCK_ROWS;
        const int64_t r1 = r0 + BLOCK_ROWS < rows ? r0 + BLOCK_ROWS : rows;
        float *pg = part + (size_t)b * 2 * (size_t)C;
        bwd_block(x, dy, dx, gamma, mean, rstd, pg, pg + C, r0, r1, C, bf);
    }
}

static cl_status bwd_run(dn_ctx *d, const dn_step *s)
{
    const cl_node *n = &d->g->nodes[s->node];
    const int C = n->attr.layernorm.features;
    const int64_t rows = cl_graph_numel(d->g, n->in[0]) / C;
    const int64_t blocks = (rows + BLOCK_ROWS - 1) / BLOCK_ROWS;
    const int bf = md_bf16(&s->args[LB_X].md);
    const void *x = dn_step_arg(d, s, LB_X), *dy = dn_step_arg(d, s, LB_DY);
    void *dx = s->nargs > LB_DX ? dn_step_arg(d, s, LB_DX) : NULL;
    const float *gamma = dn_step_arg(d, s, LB_GAMMA);
    const float *mean = dn_step_arg(d, s, LB_MEAN),
                *rstd = dn_step_arg(d, s, LB_RSTD);
    float *part = dn_step_arg(d, s, LB_PART);
    if (bf)
        bwd_rows(x, dy, dx, gamma, mean, rstd, part, rows, C, 1);
    else
        bwd_rows(x, dy, dx, gamma, mean, rstd, part, rows, C, 0);
    float *dg = dn_step_arg(d, s, LB_DGAMMA), *db = dn_step_arg(d, s, LB_DBETA);
#pragma omp parallel for schedule(static) if (blocks * C >= (1 << 15))
    for (int c = 0; c < C; c++) {
        float g = 0.0f, b = 0.0f;
        for (int64_t k = 0; k < blocks; k++) {
            g += part[(size_t)k * 2 * (size_t)C + (size_t)c];
            b += part[(size_t)k * 2 * (size_t)C + (size_t)C + (size_t)c];
        }
        dg[c] = g;
        db[c] = b;
    }
    return CL_OK;
}

/* The statistics' md: one f32 per row (x's dims but the last). */
static void stat_md(const dnnl_memory_desc_t *src, dnnl_memory_desc_t *md)
{
    cl_dnnl_md_plain(md, src->ndims - 1, src->dims);
}

cl_status cl_dnnl_layernorm_fwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[i];
    const cl_layernorm_attr *a = &n->attr.layernorm;
    dn_norm *x = &d->nd[i].u.ln;
    dn_step *s;
    dnnl_memory_desc_t smd, tmd, cmd;
    const int train = d->mode == CL_PLAN_TRAIN;
    TRY_GOTO(cl_dnnl_plain_value(d, i, n->in[0], dnnl_data_type_undef, &smd,
                                 &x->src));
    x->src_md = smd;
    stat_md(&smd, &tmd);
    md_1d(&cmd, a->features);
    if (train) {
        TRY_GOTO(cl_dnnl_md_store(d, &tmd, &x->mean));
        TRY_GOTO(cl_dnnl_md_store(d, &tmd, &x->rstd));
    }
    TRY_GOTO(cl_dnnl_set_md(d, n->out, &smd, -1));
    /* The evaluation forward of a training plan computes the same y (layer
     * norm has no running statistics) without keeping them. */
    for (int k = 0; k < n_fwd_lists(d); k++) {
        TRY_GOTO(cl_dnnl_step_run(d, fwd_list(d, k), fwd_run, i,
                                  "layer normalization forward", i, &s));
        s->aux = train && k == 0;
        cl_dnnl_arg_store(d, s, LF_X, x->src, &smd);
        cl_dnnl_arg_store(d, s, LF_Y, d->t[rep(d, n->out)].store, &smd);
        cl_dnnl_arg_ext(s, LF_GAMMA, cl_graph_param(g, n->param[0]), &cmd);
        cl_dnnl_arg_ext(s, LF_BETA, cl_graph_param(g, n->param[1]), &cmd);
        if (s->aux) {
            cl_dnnl_arg_store(d, s, LF_MEAN, x->mean, &tmd);
            cl_dnnl_arg_store(d, s, LF_RSTD, x->rstd, &tmd);
        }
    }
fail:
    return st;
}

cl_status cl_dnnl_layernorm_bwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[i];
    const cl_layernorm_attr *a = &n->attr.layernorm;
    const dn_norm *x = &d->nd[i].u.ln;
    dn_step *s;
    dnnl_memory_desc_t tmd, cmd, pmd, partmd;
    int dy, dx, tgt, acc, part;
    const dnnl_memory_desc_t *smd = &x->src_md;
    const int64_t rows = cl_graph_numel(g, n->in[0]) / a->features;
    const int64_t blocks = (rows + BLOCK_ROWS - 1) / BLOCK_ROWS;
    TRY_GOTO(cl_dnnl_out_grad(d, i, &dy));
    TRY_GOTO(cl_dnnl_plain_grad(d, i, n->in[0], &pmd, &dx, &tgt, &acc));
    stat_md(smd, &tmd);
    md_1d(&cmd, a->features);
    md_1d(&partmd, blocks * 2 * a->features);
    TRY_GOTO(cl_dnnl_md_store(d, &partmd, &part));
    TRY_GOTO(cl_dnnl_step_run(d, &d->bwd, bwd_run, i,
                              "layer normalization backward", tb(d, i), &s));
    cl_dnnl_arg_store(d, s, LB_X, x->src, smd);
    cl_dnnl_arg_store(d, s, LB_DY, dy, smd);
    cl_dnnl_arg_ext(s, LB_GAMMA, cl_graph_param(g, n->param[0]), &cmd);
    cl_dnnl_arg_store(d, s, LB_MEAN, x->mean, &tmd);
    cl_dnnl_arg_store(d, s, LB_RSTD, x->rstd, &tmd);
    cl_dnnl_arg_ext(s, LB_DGAMMA, cl_graph_grad(g, n->param[0]), &cmd);
    cl_dnnl_arg_ext(s, LB_DBETA, cl_graph_grad(g, n->param[1]), &cmd);
    cl_dnnl_arg_store(d, s, LB_PART, part, &partmd);
    if (tgt >= 0)
        cl_dnnl_arg_store(d, s, LB_DX, dx, &pmd);
    TRY_GOTO(cl_dnnl_plain_grad_end(d, i, n->in[0], &pmd, dx, tgt, acc));
    TRY_GOTO(cl_dnnl_hook_step(d, i, n->param[0]));
    TRY_GOTO(cl_dnnl_hook_step(d, i, n->param[1]));
fail:
    return st;
}
