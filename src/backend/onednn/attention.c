/* The oneDNN backend's attention for inference plans: y = softmax(alpha
 * q k^T + bias + mask) v, one matrix of the batch (a window's head) at a
 * time, each row's scores and probabilities kept in registers.  Lowering
 * (cl_dnnl_softmax_lower) chooses it where a softmax sits between two
 * matmuls that nothing else reads; matmul.c plans it in place of the
 * second matmul.  oneDNN 2.6 runs Swin's small strided products (49 x 32
 * by 32 x 49) on its gemm kernels at a fraction of their speed, and the
 * softmax between them read and wrote every score once more.
 *
 * Per matrix: k^T (scaled by alpha, its columns past N zero) and v are
 * widened to f32 on the stack, then each row of q gives its scores in
 * NV vectors of 16, the bias and mask rows are added, the softmax runs as
 * the softmax step's does (vec.h), and the probabilities times v are
 * summed in f32 and rounded once into y's type.  Under amp O2 this rounds
 * less than the three steps it replaces, which round the scores and the
 * probabilities to bf16.  q (M, D), k (N, D), v (N, Dv), y (M, Dv) per
 * matrix, at the strides of their sides (plain or views, matmul.c), with
 * M, N, D, Dv <= AT_MAX and D, Dv whole vectors. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "backend/onednn/internal.h"
#include "backend/onednn/vec.h"

/* A batch of matrices: matrix b = (b / n1, b % n1) at st[0], st[1], its
 * rows st[2] apart, in elements of 2 (bf16) or 4 bytes. */
typedef struct at_side {
    char *p;
    int bf;
    int64_t n1, st[3];
} at_side;

typedef struct at_args {
    at_side q, k, v, y;
    const void *bias; /* NULL without one */
    int bbf;
    const float *mask; /* NULL without one */
    int64_t bn, mn;    /* elements of bias and mask */
    cl_softmax_dims dm;
    int M, N, D, Dv;
    int64_t B;
    float alpha, alpha_v; /* the two matmuls' scales */
} at_args;

static at_side side_of(const dn_ctx *d, const dn_arg *a)
{
    const int64_t *st = a->md.format_desc.blocking.strides;
    at_side s = {cl_dnnl_arg_ptr(d, a),
                 md_bf16(&a->md),
                 a->md.dims[1],
                 {st[0], st[1], st[2]}};
    return s;
}

static inline void *at_row(const at_side *s, int64_t b, int64_t r)
{
    const int64_t e =
        b / s->n1 * s->st[0] + b % s->n1 * s->st[1] + r * s->st[2];
    return s->p + e * (s->bf ? 2 : 4);
}

/* s[0..NV) += src[off..off + N) (a bias or mask row); the lanes past N
 * get what follows the row, which the softmax masks, or 0 at the end of
 * src. */
static inline __attribute__((always_inline)) void
add_row(v16 *s, const void *src, int64_t off, int bf, int64_t total, int N,
        const int NV)
{
    if (off + NV * LANES <= total) {
#pragma GCC unroll 4
        for (int k = 0; k < NV; k++)
            s[k] += load16(src, off + k * LANES, bf);
        return;
    }
    float t[AT_MAX + LANES] = {0};
    for (int c = 0; c < N; c++)
        t[c] = dn_get(src, off + c, bf);
    for (int k = 0; k < NV; k++)
        s[k] += load16(t, k * LANES, 0);
}

/* A row of k^T and of the probabilities: room for AT_MAX keys in whole
 * vectors. */
enum { AT_ROW = 4 * LANES };
_Static_assert(AT_ROW >= AT_MAX && AT_WIDTH_STEP % LANES == 0,
               "attention.c's rows hold AT_MAX keys in whole vectors");

/* One matrix's values widened on the stack and where its bias and mask
 * rows start. */
typedef struct at_mat {
    const float *kt, *vf, *qf; /* k^T (D rows of AT_ROW), v, q */
    float *p;                  /* probabilities, 2 rows of AT_ROW */
    int64_t ob, om, obs, oms;  /* bias and mask: first row, row step */
    int64_t b;
} at_mat;

/* Rows i .. i + R - 1 of matrix t->b, side by side: R = 2 gives the
 * softmax's chains of dependent steps (the maxima, exp, the sums) two
 * rows to interleave.  NV vectors of scores per row, DV of output; all
 * three are constants where this is inlined, so the accumulators stay in
 * registers. */
static inline __attribute__((always_inline)) void
rows(const at_args *a, const at_mat *t, int i, const int R, const int NV,
     const int DV)
{
    const int N = a->N, D = a->D, Dv = DV * LANES;
    const v16 zero = {0}, ninf = zero - INFINITY;
    const v16i tail = lane_ids() < N - (NV - 1) * LANES;
    v16 s[2][4];
#pragma GCC unroll 2
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int k = 0; k < NV; k++)
            s[r][k] = zero;
    for (int e = 0; e < D; e++)
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            const float q = t->qf[(i + r) * D + e];
#pragma GCC unroll 4
            for (int k = 0; k < NV; k++) {
                v16 kv;
                memcpy(&kv, t->kt + e * AT_ROW + k * LANES, sizeof kv);
                s[r][k] += q * kv;
            }
        }
#pragma GCC unroll 2
    for (int r = 0; r < R; r++) {
        if (a->bias)
            add_row(s[r], a->bias, t->ob + (i + r) * t->obs, a->bbf, a->bn, N,
                    NV);
        if (a->mask)
            add_row(s[r], a->mask, t->om + (i + r) * t->oms, 0, a->mn, N, NV);
        s[r][NV - 1] = VSEL(tail, s[r][NV - 1], ninf);
    }
    v16 mx[2], sum[2];
#pragma GCC unroll 2
    for (int r = 0; r < R; r++) {
        mx[r] = s[r][0];
#pragma GCC unroll 4
        for (int k = 1; k < NV; k++)
            mx[r] = VSEL(s[r][k] > mx[r], s[r][k], mx[r]);
        mx[r] = lanes_max_all(&mx[r]);
        sum[r] = zero;
    }
#pragma GCC unroll 4
    for (int k = 0; k < NV; k++)
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            s[r][k] -= mx[r];
            s[r][k] = vexp(&s[r][k]);
            if (k == NV - 1)
                s[r][k] = VSEL(tail, s[r][k], zero);
            sum[r] += s[r][k];
        }
#pragma GCC unroll 2
    for (int r = 0; r < R; r++) {
        const v16 inv = a->alpha_v / lanes_sum_all(&sum[r]);
#pragma GCC unroll 4
        for (int k = 0; k < NV; k++) {
            s[r][k] *= inv;
            memcpy(t->p + r * AT_ROW + k * LANES, &s[r][k], sizeof s[r][k]);
        }
    }

    /* y rows = p v, in two chains per output vector (even and odd j). */
    v16 o[2][2][4];
#pragma GCC unroll 2
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int u = 0; u < 2; u++)
#pragma GCC unroll 4
            for (int c = 0; c < DV; c++)
                o[r][u][c] = zero;
    int j = 0;
    for (; j + 1 < N; j += 2)
#pragma GCC unroll 2
        for (int u = 0; u < 2; u++)
#pragma GCC unroll 2
            for (int r = 0; r < R; r++) {
                const float pj = t->p[r * AT_ROW + j + u];
#pragma GCC unroll 4
                for (int c = 0; c < DV; c++) {
                    v16 w;
                    memcpy(&w, t->vf + (j + u) * Dv + c * LANES, sizeof w);
                    o[r][u][c] += pj * w;
                }
            }
    for (; j < N; j++)
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            const float pj = t->p[r * AT_ROW + j];
#pragma GCC unroll 4
            for (int c = 0; c < DV; c++) {
                v16 w;
                memcpy(&w, t->vf + j * Dv + c * LANES, sizeof w);
                o[r][0][c] += pj * w;
            }
        }
#pragma GCC unroll 2
    for (int r = 0; r < R; r++) {
        void *yr = at_row(&a->y, t->b, i + r);
#pragma GCC unroll 4
        for (int c = 0; c < DV; c++) {
            const v16 y = o[r][0][c] + o[r][1][c];
            store16(yr, c * LANES, &y, a->y.bf);
        }
    }
}

/* Matrix b: NV vectors of scores per row, DV of output.  Both are
 * constants where this is inlined, so the accumulators stay in
 * registers; the sums run in 2 (scores) and 4 (output) interleaved
 * chains so the FMAs do not wait on each other. */
static inline __attribute__((always_inline)) void
attend(const at_args *a, int64_t b, const int NV, const int DV)
{
    float kt[AT_MAX * AT_ROW], vf[AT_MAX * AT_MAX], qf[AT_MAX * AT_MAX],
        p[2 * AT_ROW];
    const int M = a->M, N = a->N, D = a->D, Dv = DV * LANES;
    /* A matrix's rows are scattered (a view's row is a token's q, k or v
     * among its heads'), and the next matrix's are asked for now, so that
     * they arrive while this one is computed. */
    if (b + 1 < a->B)
        for (int i = 0; i < M || i < N; i++) {
            if (i < M)
                __builtin_prefetch(at_row(&a->q, b + 1, i));
            if (i < N) {
                __builtin_prefetch(at_row(&a->k, b + 1, i));
                __builtin_prefetch(at_row(&a->v, b + 1, i));
            }
        }
    for (int j = 0; j < N; j++) {
        const void *kr = at_row(&a->k, b, j);
        for (int e = 0; e < D; e += LANES) {
            const v16 t = load16(kr, e, a->k.bf) * a->alpha;
#pragma GCC unroll 16
            for (int l = 0; l < LANES; l++)
                kt[(e + l) * AT_ROW + j] = t[l];
        }
    }
    for (int e = 0; e < D; e++)
        for (int j = N; j < NV * LANES; j++)
            kt[e * AT_ROW + j] = 0.0f;
    for (int j = 0; j < N; j++) {
        const void *vr = at_row(&a->v, b, j);
#pragma GCC unroll 4
        for (int c = 0; c < DV; c++) {
            const v16 t = load16(vr, c * LANES, a->v.bf);
            memcpy(vf + j * Dv + c * LANES, &t, sizeof t);
        }
    }
    for (int i = 0; i < M; i++) {
        const void *qr = at_row(&a->q, b, i);
        for (int e = 0; e < D; e += LANES) {
            const v16 t = load16(qr, e, a->q.bf);
            memcpy(qf + i * D + e, &t, sizeof t);
        }
    }
    const cl_softmax_dims *dm = &a->dm;
    at_mat t = {kt,
                vf,
                qf,
                p,
                cl_softmax_row_of(dm, dm->sb, b * M) * N,
                cl_softmax_row_of(dm, dm->sm, b * M) * N,
                dm->sb[dm->nd - 1] * N,
                dm->sm[dm->nd - 1] * N,
                b};
    int i = 0;
    for (; i + 1 < M; i += 2)
        rows(a, &t, i, 2, NV, DV);
    if (i < M)
        rows(a, &t, i, 1, NV, DV);
}

/* One function per shape (NV, DV), each with attend inlined at its
 * constants; a table picks it. */
typedef void (*at_fn)(const at_args *a, int64_t b);
#define AT_FN(nv, dv)                                                          \
    static void attend_##nv##_##dv(const at_args *a, int64_t b)                \
    {                                                                          \
        attend(a, b, nv, dv);                                                  \
    }
#define AT_FNS(nv) AT_FN(nv, 1) AT_FN(nv, 2) AT_FN(nv, 3) AT_FN(nv, 4)
AT_FNS(1)
AT_FNS(2)
AT_FNS(3)
AT_FNS(4)
#define AT_ROW(nv)                                                             \
    {                                                                          \
        attend_##nv##_1, attend_##nv##_2, attend_##nv##_3, attend_##nv##_4     \
    }
static const at_fn at_fns[4][4] = {AT_ROW(1), AT_ROW(2), AT_ROW(3), AT_ROW(4)};

cl_status cl_dnnl_attention_run(dn_ctx *d, const dn_step *s)
{
    const cl_graph *g = d->g;
    const cl_node *n = &g->nodes[s->node];
    const cl_node *sm = &g->nodes[d->nd[s->node].u.mm.attn];
    const cl_node *sc = &g->nodes[gt(d, sm->in[0])->producer];
    const cl_matmul_dims ms = cl_matmul_dims_of(
        &sc->attr.matmul, &gt(d, sc->in[0])->shape, &gt(d, sc->in[1])->shape);
    at_args a;
    memset(&a, 0, sizeof a);
    a.dm = cl_softmax_dims_of(&gt(d, sm->in[0])->shape,
                              sm->n_in > 1 ? &gt(d, sm->in[1])->shape : NULL,
                              sm->n_buf > 0 ? &g->tensors[sm->buf[0]].shape
                                            : NULL);
    for (int j = 0; j < s->nargs; j++) {
        const dn_arg *x = &s->args[j];
        if (x->arg == AT_Q)
            a.q = side_of(d, x);
        else if (x->arg == AT_K)
            a.k = side_of(d, x);
        else if (x->arg == AT_V)
            a.v = side_of(d, x);
        else if (x->arg == AT_Y)
            a.y = side_of(d, x);
        else if (x->arg == AT_BIAS) {
            a.bias = cl_dnnl_arg_ptr(d, x);
            a.bbf = md_bf16(&x->md);
        }
    }
    if (sm->n_buf > 0) {
        a.mask = cl_graph_buffer(g, sm->buf[0]);
        a.mn = cl_shape_numel(&g->tensors[sm->buf[0]].shape);
    }
    a.M = (int)ms.M;
    a.N = (int)ms.N;
    a.D = (int)ms.K;
    a.Dv = (int)(cl_matmul_dims_of(&n->attr.matmul, &gt(d, n->in[0])->shape,
                                   &gt(d, n->in[1])->shape)
                     .N);
    a.bn = a.dm.b_rows * a.N;
    a.alpha = sc->attr.matmul.alpha;
    a.alpha_v = n->attr.matmul.alpha;
    const int nv = (a.N + LANES - 1) / LANES, dv = a.Dv / LANES;
    CL_ASSERT(nv >= 1 && nv <= 4 && dv >= 1 && dv <= 4);
    const at_fn fn = at_fns[nv - 1][dv - 1];
    const int64_t B = ms.B;
    a.B = B;
#pragma omp parallel for schedule(static) num_threads(s->aux) if (B > 1)
    for (int64_t b = 0; b < B; b++)
        fn(&a, b);
    return CL_OK;
}
