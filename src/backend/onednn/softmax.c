/* The oneDNN backend's softmax over the last axis of x + bias + mask
 * (Swin's window attention), forward and backward planning side by side.
 *
 * Forward: without bias and mask, oneDNN's softmax from x into y; with
 * them, one loop of ours per row: z = x + b + m (added in f32, in that
 * order, as the reference does) into the thread's part of a scratch
 * store, its max, e = exp(z - max) (vec.h's vexp) and the sum of e in 16
 * f32 lanes, then e / sum rounded once into y's type.  The adds, the
 * softmax and the bf16 rounding are one pass over memory, where oneDNN
 * 2.6 took two (a loop adding, then its softmax reading z back).  Rows of
 * up to 4 vectors (Swin's 49 and 16) stay in registers, the lanes past C
 * masked; each thread walks its own run of rows, stepping the bias and
 * mask rows along instead of dividing them out per row.  Inference plans
 * run the softmax of attention inside its matmul instead (attention.c).
 * Backward: oneDNN's softmax backward (it reads y) writes dz straight
 * into x's gradient; the bias's gradient is dz summed over the bias's
 * broadcast dimensions by the reference reduction (cl_softmax_bias_grad:
 * one thread per bias row, rows in order, in double, so the result does
 * not depend on the thread count), through f32 copies under amp O2.
 * Everything is plain row-major (norm.c makes plain copies of what is
 * not). */

#include <math.h>
#include <omp.h>
#include <string.h>

#include "backend/onednn/internal.h"
#include "backend/onednn/vec.h"
#include "tensor/tensor.h"

/* Positions of the arguments of the loops (dn_arg.arg). */
enum { SM_X = 0, SM_B = 1, SM_Y = 2, SM_W = 3, SM_DZ = 0, SM_DB = 1 };

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

/* Rows of at most SHORT_VECS vectors (Swin's 49 and 16) stay in
 * registers: no scratch, no scalar tail. */
#define SHORT_VECS 4

/* One row of C <= NV * LANES values whose last vector may be loaded
 * whole (the row is not at the end of x, b or m): the lanes past C are
 * set to -inf before the max and to 0 before the sum, and only C values
 * are stored.  NV is a constant where this is inlined. */
static inline __attribute__((always_inline)) void
short_row(void *y, const void *x, const void *b, const float *m, int C, int xbf,
          int bbf, int ybf, const int NV)
{
    const v16 zero = {0}, ninf = zero - INFINITY;
    const v16i tail = lane_ids() < C - (NV - 1) * LANES;
    v16 v[SHORT_VECS], mx = ninf, acc = zero;
    for (int k = 0; k < NV; k++) {
        v[k] = load16(x, k * LANES, xbf);
        if (b)
            v[k] += load16(b, k * LANES, bbf);
        if (m)
            v[k] += load16(m, k * LANES, 0);
        if (k == NV - 1)
            v[k] = VSEL(tail, v[k], ninf);
        mx = VSEL(v[k] > mx, v[k], mx);
    }
    mx = lanes_max_all(&mx);
    for (int k = 0; k < NV; k++) {
        v[k] -= mx;
        v[k] = vexp(&v[k]);
        if (k == NV - 1)
            v[k] = VSEL(tail, v[k], zero);
        acc += v[k];
    }
    const v16 inv = 1.0f / lanes_sum_all(&acc);
    for (int k = 0; k < NV - 1; k++) {
        v[k] *= inv;
        store16(y, k * LANES, &v[k], ybf);
    }
    uint32_t last[LANES];
    v[NV - 1] *= inv;
    store16(last, 0, &v[NV - 1], ybf);
    const int rest = C - (NV - 1) * LANES;
    memcpy((char *)y + (size_t)(NV - 1) * LANES * (ybf ? 2 : 4), last,
           (size_t)rest * (ybf ? 2 : 4));
}

/* One row of any length: y = softmax(x + b + m) of C values (b, m NULL
 * when absent), z the thread's scratch of C rounded up to whole vectors. */
static void long_row(void *y, const void *x, const void *b, const float *m,
                     int C, int xbf, int bbf, int ybf, float *z)
{
    const int C16 = C - C % LANES;
    const v16 zero = {0};
    v16 vmx = zero - INFINITY;
    for (int c = 0; c < C16; c += LANES) {
        v16 v = load16(x, c, xbf);
        if (b)
            v += load16(b, c, bbf);
        if (m)
            v += load16(m, c, 0);
        memcpy(z + c, &v, sizeof v);
        vmx = VSEL(v > vmx, v, vmx);
    }
    float mx = lanes_max_all(&vmx)[0];
    for (int c = C16; c < C; c++) {
        float v = dn_get(x, c, xbf);
        if (b)
            v += dn_get(b, c, bbf);
        if (m)
            v += m[c];
        z[c] = v;
        mx = v > mx ? v : mx;
    }
    /* The lanes past C (the last vector's tail) are left out of the sum. */
    const v16i lane = lane_ids();
    v16 acc = zero;
    for (int c = 0; c < C; c += LANES) {
        v16 v;
        memcpy(&v, z + c, sizeof v);
        v -= mx;
        v = vexp(&v);
        v = VSEL(lane < C - c, v, zero);
        memcpy(z + c, &v, sizeof v);
        acc += v;
    }
    const float inv = 1.0f / lanes_sum(&acc);
    for (int c = 0; c < C16; c += LANES) {
        v16 v;
        memcpy(&v, z + c, sizeof v);
        v *= inv;
        store16(y, c, &v, ybf);
    }
    for (int c = C16; c < C; c++)
        dn_put(y, c, z[c] * inv, ybf);
}

/* Where one thread's rows read: the multi-index of its current row and
 * the element offsets of that row in b and m, stepped row by row (an
 * odometer) instead of divided out for each row. */
typedef struct {
    int64_t idx[CL_MAX_DIMS], ob, om;
} row_pos;

static row_pos row_pos_at(const cl_softmax_dims *dm, int64_t r)
{
    row_pos p;
    memset(&p, 0, sizeof p);
    for (int k = dm->nd - 1; k >= 0; k--) {
        p.idx[k] = r % dm->d[k];
        r /= dm->d[k];
        p.ob += p.idx[k] * dm->sb[k] * dm->C;
        p.om += p.idx[k] * dm->sm[k] * dm->C;
    }
    return p;
}

static void row_pos_next(const cl_softmax_dims *dm, row_pos *p)
{
    for (int k = dm->nd - 1; k >= 0; k--) {
        p->ob += dm->sb[k] * dm->C;
        p->om += dm->sm[k] * dm->C;
        if (++p->idx[k] < dm->d[k])
            return;
        p->ob -= dm->sb[k] * dm->C * dm->d[k];
        p->om -= dm->sm[k] * dm->C * dm->d[k];
        p->idx[k] = 0;
    }
}

/* y = softmax(x + b + m) row by row, on the threads the plan counted
 * (s->aux), each over its own run of rows with its part of the scratch
 * store. */
static cl_status run_fwd(dn_ctx *d, const dn_step *s)
{
    const cl_node *n = &d->g->nodes[s->node];
    const cl_softmax_dims dm = dims_of_node(d, s->node);
    const void *x = NULL, *b = NULL;
    void *y = NULL;
    float *w = NULL;
    int xbf = 0, bbf = 0, ybf = 0;
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
            ybf = bf;
        } else if (s->args[j].arg == SM_W) {
            w = p;
        }
    }
    const float *m = n->n_buf > 0 ? cl_graph_buffer(d->g, n->buf[0]) : NULL;
    const int C = dm.C;
    const int64_t per = (int64_t)(C + LANES - 1) / LANES * LANES;
    const size_t xe = xbf ? 2 : 4, be = bbf ? 2 : 4, ye = ybf ? 2 : 4;
    /* A short row loads its last vector whole when that stays inside x,
     * b and m: every row but the last few of each. */
    const int nv = (int)(per / LANES);
    const int64_t xn = dm.rows * C, bn = dm.b_rows * C,
                  mn = m ? cl_shape_numel(&d->g->tensors[n->buf[0]].shape) : 0;
    const int nt = dm.rows * C >= SM_PAR_MIN ? s->aux : 1;
#pragma omp parallel num_threads(nt)
    {
        const int t = omp_get_thread_num(), tn = omp_get_num_threads();
        const int64_t r0 = dm.rows * t / tn, r1 = dm.rows * (t + 1) / tn;
        float *z = w + per * t;
        row_pos p = row_pos_at(&dm, r0);
        for (int64_t r = r0; r < r1; r++, row_pos_next(&dm, &p)) {
            const void *xr = (const char *)x + (size_t)(r * C) * xe;
            const void *br = b ? (const char *)b + (size_t)p.ob * be : NULL;
            const float *mr = m ? m + p.om : NULL;
            void *yr = (char *)y + (size_t)(r * C) * ye;
            const int whole = nv <= SHORT_VECS && r * C + per <= xn &&
                              (!b || p.ob + per <= bn) &&
                              (!m || p.om + per <= mn);
            if (!whole)
                long_row(yr, xr, br, mr, C, xbf, bbf, ybf, z);
            else if (nv == 4)
                short_row(yr, xr, br, mr, C, xbf, bbf, ybf, 4);
            else if (nv == 3)
                short_row(yr, xr, br, mr, C, xbf, bbf, ybf, 3);
            else if (nv == 2)
                short_row(yr, xr, br, mr, C, xbf, bbf, ybf, 2);
            else
                short_row(yr, xr, br, mr, C, xbf, bbf, ybf, 1);
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
    TRY_GOTO(
        cl_dnnl_plain_value(d, i, n->in[0], dnnl_data_type_undef, &xmd, &xs));
    if (has_b)
        TRY_GOTO(cl_dnnl_plain_value(d, i, n->in[1], dnnl_data_type_undef, &bmd,
                                     &bs));
    DN(dnnl_softmax_forward_desc_init(&sd,
                                      d->mode == CL_PLAN_TRAIN
                                          ? dnnl_forward_training
                                          : dnnl_forward_inference,
                                      &xmd, xmd.ndims - 1),
       i, "softmax forward descriptor");
    TRY_GOTO(cl_dnnl_prim_make(d, i, "softmax forward", &sd, NULL, NULL, &pd,
                               &prim));
    d->nd[i].fwd_pd = pd;
    TRY_GOTO(cl_dnnl_set_md(d, n->out, &xmd, -1));
    const int ys = d->t[rep(d, n->out)].store;
    if (has_b || has_m) {
        /* The primitive above stays the hint backward's is made from. */
        const int threads = omp_get_max_threads();
        const int64_t per = (xmd.dims[xmd.ndims - 1] + LANES - 1) / LANES;
        dnnl_memory_desc_t wmd;
        int ws;
        md_1d(&wmd, per * LANES * threads);
        TRY_GOTO(cl_dnnl_md_store(d, &wmd, &ws));
        for (int k = 0; k < n_fwd_lists(d); k++) {
            TRY_GOTO(cl_dnnl_step_run(d, fwd_list(d, k), run_fwd, i,
                                      "softmax forward, bias and mask", i, &s));
            s->aux = threads;
            cl_dnnl_arg_store(d, s, SM_X, xs, &xmd);
            if (has_b)
                cl_dnnl_arg_store(d, s, SM_B, bs, &bmd);
            cl_dnnl_arg_store(d, s, SM_Y, ys, &xmd);
            cl_dnnl_arg_store(d, s, SM_W, ws, &wmd);
        }
        return CL_OK;
    }
    for (int k = 0; k < n_fwd_lists(d); k++) {
        TRY_GOTO(cl_dnnl_step_prim(d, fwd_list(d, k), i, "softmax forward", i,
                                   pd, prim, &s));
        cl_dnnl_arg_store(d, s, DNNL_ARG_SRC, xs, &xmd);
        cl_dnnl_arg_store(d, s, DNNL_ARG_DST, ys, &xmd);
    }
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
    TRY_GOTO(cl_dnnl_out_grad(d, i, &dy));
    TRY_GOTO(cl_dnnl_plain_grad(d, i, n->in[0], &pmd, &plain, &tgt, &acc));
    if (plain < 0 && !bias_grad)
        return CL_OK;
    if (plain < 0) {
        /* x takes no gradient but the bias does: dz in a store of its own. */
        pmd = *ymd;
        TRY_GOTO(cl_dnnl_md_store(d, &pmd, &plain));
    }
    DN(dnnl_softmax_backward_desc_init(&sd, &pmd, ymd, ymd->ndims - 1), i,
       "softmax backward descriptor");
    TRY_GOTO(cl_dnnl_prim_make(d, i, "softmax backward", &sd, NULL,
                               d->nd[i].fwd_pd, &pd, &prim));
    TRY_GOTO(cl_dnnl_step_prim(d, &d->bwd, i, "softmax backward", tb(d, i), pd,
                               prim, &s));
    cl_dnnl_arg_store(d, s, DNNL_ARG_DST, d->t[out].store, ymd);
    cl_dnnl_arg_store(d, s, DNNL_ARG_DIFF_DST, dy, ymd);
    cl_dnnl_arg_store(d, s, DNNL_ARG_DIFF_SRC, plain, &pmd);
    if (bias_grad) {
        /* The reduction reads and writes f32: copies when dz or the bias's
         * gradient is bf16. */
        dnnl_memory_desc_t zf = md_as(&pmd, dnnl_f32), bf;
        int dz = plain, db;
        TRY_GOTO(
            cl_dnnl_plain_grad(d, i, n->in[1], &bpmd, &bplain, &btgt, &bacc));
        bf = md_as(&bpmd, dnnl_f32);
        if (md_bf16(&pmd)) {
            TRY_GOTO(cl_dnnl_md_store(d, &zf, &dz));
            TRY_GOTO(cl_dnnl_reorder_step(d, &d->bwd, i, tb(d, i),
                                          "softmax: dz to f32", plain, &pmd, dz,
                                          &zf));
        }
        db = bplain;
        if (md_bf16(&bpmd))
            TRY_GOTO(cl_dnnl_md_store(d, &bf, &db));
        TRY_GOTO(cl_dnnl_step_run(d, &d->bwd, run_bias_grad, i,
                                  "softmax: bias gradient", tb(d, i), &s));
        cl_dnnl_arg_store(d, s, SM_DZ, dz, &zf);
        cl_dnnl_arg_store(d, s, SM_DB, db, &bf);
        if (db != bplain)
            TRY_GOTO(cl_dnnl_reorder_step(d, &d->bwd, i, tb(d, i),
                                          "softmax: bias gradient cast", db,
                                          &bf, bplain, &bpmd));
    }
    TRY_GOTO(cl_dnnl_plain_grad_end(d, i, n->in[0], &pmd, plain, tgt, acc));
    if (bias_grad)
        TRY_GOTO(
            cl_dnnl_plain_grad_end(d, i, n->in[1], &bpmd, bplain, btgt, bacc));
fail:
    return st;
}
