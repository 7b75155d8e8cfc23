/* The oneDNN backend's token ops, row_gather, droppath and token_meanpool,
 * as loops of its own (no primitive does a gather by index), forward and
 * backward planning side by side.
 *
 * Each op reads its input plain in the input's own type (f32, or bf16
 * under amp O2: a row move is a byte copy either way, arithmetic is done
 * in f32) and writes a plain output of that type, so the nodes after it
 * see the type and layout the reference would. */
#include <string.h>

#include "backend/onednn/internal.h"
#include "backend/onednn/vec.h"
#include "core/mem.h"
#include "ops/ops.h"

/* ---- steps ----------------------------------------------------------------
 */

/* Positions of a token step's arguments. */
enum { TK_IN = 0, TK_OUT = 1 };

static int arg_bf16(const dn_step *s, int k)
{
    return md_bf16(&s->args[k].md);
}

/* Forward of node i: its input plain in its own type (TK_IN) into a plain
 * output of that type (TK_OUT), by fn; aux is 1 in a training forward. */
static cl_status plan_fwd(dn_ctx *d, int i, dn_run_fn fn, const char *what)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    dnnl_memory_desc_t xm, ym;
    dnnl_dims_t dims;
    dn_step *s;
    int xs;
    TRY_GOTO(cl_dnnl_ensure_input_md(d, n->in[0]));
    const dnnl_data_type_t dt = d->t[rep(d, n->in[0])].md.data_type;
    TRY_GOTO(cl_dnnl_plain_value(d, i, n->in[0], dt, &xm, &xs));
    const cl_shape *ys = &gt(d, n->out)->shape;
    dims_of(ys, dims);
    cl_dnnl_md_plain_dt(&ym, ys->ndim, dims, dt);
    TRY_GOTO(cl_dnnl_set_md(d, n->out, &ym, -1));
    for (int l = 0; l < n_fwd_lists(d); l++) {
        TRY_GOTO(cl_dnnl_step_run(d, fwd_list(d, l), fn, i, what, i, &s));
        s->aux = d->mode == CL_PLAN_TRAIN && l == 0;
        cl_dnnl_arg_store(d, s, TK_IN, xs, &xm);
        cl_dnnl_arg_store(d, s, TK_OUT, d->t[rep(d, n->out)].store, &ym);
    }
fail:
    return st;
}

/* Backward of node i: dy (TK_OUT, plain in the output's type) into x's
 * gradient (TK_IN, plain in x's type), by fn. */
static cl_status plan_bwd(dn_ctx *d, int i, dn_run_fn fn, const char *what)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    dnnl_memory_desc_t pm;
    dn_step *s;
    int dy, dx, tgt, acc;
    TRY_GOTO(cl_dnnl_out_grad(d, i, &dy));
    TRY_GOTO(cl_dnnl_plain_grad(d, i, n->in[0], &pm, &dx, &tgt, &acc));
    if (tgt < 0)
        return CL_OK;
    TRY_GOTO(cl_dnnl_step_run(d, &d->bwd, fn, i, what, tb(d, i), &s));
    cl_dnnl_arg_store(d, s, TK_IN, dx, &pm);
    cl_dnnl_arg_store(d, s, TK_OUT, dy, &d->t[rep(d, n->out)].md);
    TRY_GOTO(cl_dnnl_plain_grad_end(d, i, n->in[0], &pm, dx, tgt, acc));
fail:
    return st;
}

/* ---- row_gather -----------------------------------------------------------
 */

void cl_dnnl_tokens_free(dn_node *x)
{
    cl_free(x->u.tok.start);
    cl_free(x->u.tok.list);
    x->u.tok.start = x->u.tok.list = NULL;
}

/* The rows of a row_gather node: M of the output, R of the input. */
static void gather_rows(const dn_ctx *d, const cl_node *n, int64_t *M,
                        int64_t *R)
{
    *M = cl_graph_numel(d->g, n->buf[0]);
    *R = cl_graph_numel(d->g, n->in[0]) / n->attr.row_gather.cols;
}

static cl_status row_gather_run(dn_ctx *d, const dn_step *s)
{
    const cl_node *n = &d->g->nodes[s->node];
    const int64_t *ix = cl_graph_buffer_i64(d->g, n->buf[0]);
    int64_t M, R;
    gather_rows(d, n, &M, &R);
    cl_status r = cl_row_gather_check(ix, M, R);
    if (r != CL_OK)
        return cl_error_wrap(r, "%s: ", n->name);
    const size_t row = (size_t)n->attr.row_gather.cols *
                       (arg_bf16(s, TK_IN) ? sizeof(uint16_t) : sizeof(float));
    const char *x = dn_step_arg(d, s, TK_IN);
    char *y = dn_step_arg(d, s, TK_OUT);
#pragma omp parallel for schedule(static) if (M * (int64_t)row >= (1 << 17))
    for (int64_t i = 0; i < M; i++)
        memcpy(y + (size_t)i * row, x + (size_t)ix[i] * row, row);
    return CL_OK;
}

/* dx row r = the sum of dy's rows at the positions reading r, in order of
 * position (the reference's order), from the inverse the plan made: the
 * rows are independent. */
static cl_status row_gather_bwd_run(dn_ctx *d, const dn_step *s)
{
    const cl_node *n = &d->g->nodes[s->node];
    const dn_tokens *t = &d->nd[s->node].u.tok;
    const int cols = n->attr.row_gather.cols;
    const int bf = arg_bf16(s, TK_IN);
    int64_t M, R;
    gather_rows(d, n, &M, &R);
    const char *dy = dn_step_arg(d, s, TK_OUT);
    char *dx = dn_step_arg(d, s, TK_IN);
    const size_t row = (size_t)cols * (bf ? sizeof(uint16_t) : sizeof(float));
    /* Most rows are read once (window partition and reverse, the head
     * split): their gradient is one row copied.  Rows read more than once
     * start from the first reader's row and add the others in position
     * order, the reference's sums (0 + a = a). */
#pragma omp parallel for schedule(static) if (R * cols >= (1 << 15))
    for (int64_t r = 0; r < R; r++) {
        const int64_t b = t->start[r], e = t->start[r + 1];
        char *to = dx + (size_t)r * row;
        if (b == e) {
            memset(to, 0, row);
            continue;
        }
        memcpy(to, dy + (size_t)t->list[b] * row, row);
        if (!bf) {
            float *acc = (float *)to;
            for (int64_t k = b + 1; k < e; k++) {
                const float *from = (const float *)dy + t->list[k] * cols;
                for (int c = 0; c < cols; c++)
                    acc[c] += from[c];
            }
            continue;
        }
        for (int c = 0; c < cols && e - b > 1; c++) {
            float acc = dn_get(dy, t->list[b] * cols + c, 1);
            for (int64_t k = b + 1; k < e; k++)
                acc += dn_get(dy, t->list[k] * cols + c, 1);
            dn_put(dx, r * cols + c, acc, 1);
        }
    }
    return CL_OK;
}

cl_status cl_dnnl_row_gather_fwd(dn_ctx *d, int i)
{
    return plan_fwd(d, i, row_gather_run, "row gather");
}

/* The positions reading each of the R input rows, by a counting sort of
 * the M positions of ix (in range): list[start[r] .. start[r + 1]) are
 * those reading row r, in increasing order. */
static void gather_inverse(int64_t *start, int64_t *list, const int64_t *ix,
                           int64_t M, int64_t R)
{
    memset(start, 0, sizeof *start * (size_t)(R + 1));
    for (int64_t i = 0; i < M; i++)
        start[ix[i] + 1]++;
    for (int64_t r = 0; r < R; r++)
        start[r + 1] += start[r];
    /* start[] is moved past each filled slot and moved back after. */
    for (int64_t i = 0; i < M; i++)
        list[start[ix[i]]++] = i;
    for (int64_t r = R; r > 0; r--)
        start[r] = start[r - 1];
    start[0] = 0;
}

/* The index is a constant of the plan (the builder fills it before
 * planning), so its inverse is sorted here, once, and every backward
 * reads it; the forward still checks the index at each step. */
cl_status cl_dnnl_row_gather_bwd(dn_ctx *d, int i)
{
    const cl_node *n = &d->g->nodes[i];
    dn_tokens *t = &d->nd[i].u.tok;
    const int64_t *ix = cl_graph_buffer_i64(d->g, n->buf[0]);
    int64_t M, R;
    gather_rows(d, n, &M, &R);
    cl_status r = cl_row_gather_check(ix, M, R);
    if (r != CL_OK)
        return cl_error_wrap(r, "%s: ", n->name);
    if (!t->start) {
        t->start =
            cl_alloc(sizeof *t->start * (size_t)(R + 1), "onednn: row gather");
        t->list = cl_alloc(sizeof *t->list * (size_t)M, "onednn: row gather");
        if (!t->start || !t->list)
            return CL_ERR_NOMEM;
    }
    gather_inverse(t->start, t->list, ix, M, R);
    return plan_bwd(d, i, row_gather_bwd_run, "row gather backward");
}

/* ---- droppath -------------------------------------------------------------
 */

/* y = x times each sample's factor from the node's stream, the one the
 * reference draws (cl_ref_rng: seed, step, node); a copy in evaluation or
 * at p 0. */
static void droppath_apply(dn_ctx *d, const dn_step *s, void *y, const void *x,
                           int draw)
{
    const cl_node *n = &d->g->nodes[s->node];
    const float p = n->attr.droppath.p;
    const int bf = arg_bf16(s, TK_IN);
    const int N = (int)gt(d, n->in[0])->shape.d[0];
    const int64_t per = cl_graph_numel(d->g, n->in[0]) / N;
    if (!draw || p == 0.0f) {
        memcpy(y, x, (size_t)(N * per) * (bf ? 2u : 4u));
        return;
    }
    cl_rng r;
    cl_rng_init_node(&r, d->be->rng_seed, d->be->rng_step, (uint64_t)s->node);
#pragma omp parallel for schedule(static) if ((int64_t)N * per >= (1 << 15))
    for (int k = 0; k < N; k++) {
        const float f = cl_droppath_scale(&r, k, p);
        const int64_t o = (int64_t)k * per, v16end = o + per - per % LANES;
        /* x f in f32, rounded once (store16 rounds as dn_put does). */
        for (int64_t e = o; e < v16end; e += LANES) {
            const v16 v = load16(x, e, bf) * f;
            store16(y, e, &v, bf);
        }
        for (int64_t e = v16end; e < o + per; e++)
            dn_put(y, e, dn_get(x, e, bf) * f, bf);
    }
}

static cl_status droppath_run(dn_ctx *d, const dn_step *s)
{
    droppath_apply(d, s, dn_step_arg(d, s, TK_OUT), dn_step_arg(d, s, TK_IN),
                   s->aux);
    return CL_OK;
}

/* Backward follows a training forward of the same step: the same mask. */
static cl_status droppath_bwd_run(dn_ctx *d, const dn_step *s)
{
    droppath_apply(d, s, dn_step_arg(d, s, TK_IN), dn_step_arg(d, s, TK_OUT),
                   1);
    return CL_OK;
}

cl_status cl_dnnl_droppath_fwd(dn_ctx *d, int i)
{
    return plan_fwd(d, i, droppath_run, "droppath");
}

cl_status cl_dnnl_droppath_bwd(dn_ctx *d, int i)
{
    return plan_bwd(d, i, droppath_bwd_run, "droppath backward");
}

/* ---- token_meanpool -------------------------------------------------------
 */

static void meanpool_sizes(const dn_ctx *d, const dn_step *s, int64_t *B,
                           int64_t *L, int64_t *C)
{
    const cl_shape *xs = &gt(d, d->g->nodes[s->node].in[0])->shape;
    *B = xs->d[0];
    *L = xs->d[1];
    *C = xs->d[2];
}

/* Sums in double in order of l, as the reference. */
static cl_status meanpool_run(dn_ctx *d, const dn_step *s)
{
    int64_t B, L, C;
    meanpool_sizes(d, s, &B, &L, &C);
    const int bf = arg_bf16(s, TK_IN);
    const void *x = dn_step_arg(d, s, TK_IN);
    void *y = dn_step_arg(d, s, TK_OUT);
#pragma omp parallel for schedule(static) if (B * L * C >= (1 << 15))
    for (int64_t q = 0; q < B * C; q++) {
        const int64_t b = q / C, c = q % C;
        double sum = 0.0;
        for (int64_t l = 0; l < L; l++)
            sum += dn_get(x, (b * L + l) * C + c, bf);
        dn_put(y, q, (float)(sum / (double)L), bf);
    }
    return CL_OK;
}

static cl_status meanpool_bwd_run(dn_ctx *d, const dn_step *s)
{
    int64_t B, L, C;
    meanpool_sizes(d, s, &B, &L, &C);
    const int bf = arg_bf16(s, TK_IN);
    const void *dy = dn_step_arg(d, s, TK_OUT);
    void *dx = dn_step_arg(d, s, TK_IN);
    const float inv = 1.0f / (float)L;
#pragma omp parallel for schedule(static) if (B * L * C >= (1 << 15))
    for (int64_t q = 0; q < B * L; q++) {
        const int64_t b = q / L;
        for (int64_t c = 0; c < C; c++)
            dn_put(dx, q * C + c, dn_get(dy, b * C + c, bf) * inv, bf);
    }
    return CL_OK;
}

cl_status cl_dnnl_token_meanpool_fwd(dn_ctx *d, int i)
{
    return plan_fwd(d, i, meanpool_run, "token mean");
}

cl_status cl_dnnl_token_meanpool_bwd(dn_ctx *d, int i)
{
    return plan_bwd(d, i, meanpool_bwd_run, "token mean backward");
}
