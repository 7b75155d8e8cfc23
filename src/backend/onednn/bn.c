/* The oneDNN backend's batch norm: plain C loops on whatever activation
 * layout oneDNN picked (bn.h says why not oneDNN's primitive), forward
 * and backward planning side by side, and SyncBatchNorm through the
 * allreduce hook. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backend/onednn/bn.h"
#include "backend/onednn/internal.h"

/* ---- the loops on oneDNN's layouts -----------------------------------------
 *
 * Batch norm kernels on oneDNN's activation layouts.  Channels go in
 * groups of G lanes that lie side by side in every pixel (G = 16 or 8 on
 * the blocked and channels-last layouts, 1 on planar ones); each OpenMP
 * thread takes whole groups, and a lane loop of constant G vectorises.
 * The passes over one group are inline functions shared by the fused
 * single-process kernels and the split SyncBatchNorm ones, so the two paths
 * do the same arithmetic.  Activations and their gradients are f32 or bf16
 * (mixed precision); statistics, parameters and all arithmetic are f32 (and
 * double for the sums), so a bf16 call computes exactly what the f32 call
 * computes on the same values widened, its outputs rounded to nearest
 * even.  The arithmetic of a channel does not depend on the layout. */

/* Forced inline, so that each kernel is compiled once per element type
 * with the type test folded away and the lane loops vectorised. */
#define BN_INLINE static inline __attribute__((always_inline))

/* Element i of an f32 (bf == 0) or bf16 (bf != 0) array.  The conversions
 * are those of src/tensor/tensor.h (cl_f32_from_bf16, cl_bf16_from_f32:
 * round to nearest even, NaN kept quiet), written inline here because a
 * call per element would stop the lane loops from vectorising;
 * tests/test_onednn.c holds the two bit for bit. */
BN_INLINE float ld_act(const void *p, size_t i, int bf)
{
    if (!bf)
        return ((const float *)p)[i];
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

BN_INLINE void st_act(void *p, size_t i, float v, int bf)
{
    if (!bf) {
        ((float *)p)[i] = v;
        return;
    }
    uint32_t u;
    memcpy(&u, &v, 4);
    uint32_t r = u + 0x7fffu + ((u >> 16) & 1u);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu))
        r = u | 0x00400000u; /* quiet NaN, keep sign */
    ((uint16_t *)p)[i] = (uint16_t)(r >> 16);
}

/* The pre-activation value of forward and of the backward mask, written
 * once so both compute bit-identical results. */
BN_INLINE float bn_pre(float x, float m, float s, float b)
{
    return (x - m) * s + b;
}

/* Lanes per group: the widest of 16 and 8 that divides both the block and
 * the channel count, so no group crosses a block or the padding. */
static int lanes(const cl_bn_layout *l)
{
    if (l->B % 16 == 0 && l->C % 16 == 0)
        return 16;
    if (l->B % 8 == 0 && l->C % 8 == 0)
        return 8;
    return 1;
}

/* Writes zeros to the padded channels of a blocked layout (C up to the
 * next whole block), as oneDNN expects of every activation it reads: a
 * convolution multiplies them by zero weights, and garbage there could be
 * NaN. */
static void zero_pad(void *y, const cl_bn_layout *l, int bf)
{
    if (l->sb == 0)
        return; /* channels-last: one block, no padding */
    const int cpad = (l->C + l->B - 1) / l->B * l->B;
    if (cpad == l->C)
        return;
    const size_t es = bf ? 2 : 4;
    const int c0 = l->C / l->B * l->B; /* the last, partial block */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < l->N; n++)
        for (int64_t i = 0; i < l->HW; i++) {
            size_t o =
                (size_t)((int64_t)n * l->sn + (int64_t)(c0 / l->B) * l->sb +
                         i * l->sp + (l->C - c0));
            memset((char *)y + o * es, 0, (size_t)(cpad - l->C) * es);
        }
}

/* Pixel 0 of sample n in group g of G lanes, in elements. */
BN_INLINE size_t grp_off(const cl_bn_layout *l, int n, int g, int G)
{
    int c = g * G;
    return (size_t)((int64_t)n * l->sn + (int64_t)(c / l->B) * l->sb +
                    c % l->B);
}

/* Local statistics of group g: s = sum x, q = sum (x - m)^2 around the
 * local mean m = s / cnt rounded to f32 (two passes, as a centred sum of
 * squares keeps the variance accurate when |mean| >> std). */
BN_INLINE void grp_moments(double *s, double *q, float *m, const void *x,
                           const cl_bn_layout *l, int g, int G, int bf)
{
    const double cnt = (double)l->N * (double)l->HW;
    const size_t sp = (size_t)l->sp;
    for (int k = 0; k < G; k++)
        s[k] = q[k] = 0.0;
    for (int n = 0; n < l->N; n++) {
        size_t o = grp_off(l, n, g, G);
        float a[16] = {0};
        for (int64_t i = 0; i < l->HW; i++)
            for (int k = 0; k < G; k++)
                a[k] += ld_act(x, o + (size_t)i * sp + k, bf);
        for (int k = 0; k < G; k++)
            s[k] += a[k];
    }
    for (int k = 0; k < G; k++)
        m[k] = (float)(s[k] / cnt);
    for (int n = 0; n < l->N; n++) {
        size_t o = grp_off(l, n, g, G);
        float a[16] = {0};
        for (int64_t i = 0; i < l->HW; i++)
            for (int k = 0; k < G; k++) {
                float e = ld_act(x, o + (size_t)i * sp + k, bf) - m[k];
                a[k] += e * e;
            }
        for (int k = 0; k < G; k++)
            q[k] += a[k];
    }
}

/* y = (x - m) * s + b [ReLU] over one (sample, group) plane at o. */
BN_INLINE void plane_norm(void *y, const void *x, size_t o, const float *m,
                          const float *s, const float *b, const cl_bn_layout *l,
                          int G, int relu, int bf)
{
    const size_t sp = (size_t)l->sp;
    for (int64_t i = 0; i < l->HW; i++)
        for (int k = 0; k < G; k++) {
            size_t j = o + (size_t)i * sp + k;
            float v = bn_pre(ld_act(x, j, bf), m[k], s[k], b[k]);
            st_act(y, j, relu && v < 0.0f ? 0.0f : v, bf);
        }
}

/* Per-lane constants of group g from mean and biased variance. */
BN_INLINE void grp_consts(float *m, float *is, float *s, float *b,
                          const float *mean, const float *var,
                          const float *gamma, const float *beta, int g, int G,
                          float eps)
{
    for (int k = 0; k < G; k++) {
        int c = g * G + k;
        m[k] = mean[c];
        is[k] = 1.0f / sqrtf(var[c] + eps);
        s[k] = gamma[c] / sqrtf(var[c] + eps); /* as forward, bitwise */
        b[k] = beta[c];
    }
}

/* Runs body(bf, G) for every channel group g in one OpenMP loop, compiled
 * once per element type and lane count. */
/* clang-format off */
#define BN_FOR_GROUPS_G(l, bf, G, body)                                        \
    do {                                                                       \
        const int NG_ = (l)->C / (G);                                          \
        _Pragma("omp parallel for schedule(static)")                           \
        for (int g = 0; g < NG_; g++)                                          \
            body(bf, G);                                                       \
    } while (0)
/* LOOP(l, bf, G, body) instantiated for the element type and lane count of
 * this call: LOOP is BN_FOR_GROUPS_G or BN_FOR_PLANES_G. */
#define BN_DISPATCH_BF(l, bf, LOOP, body)                                      \
    do {                                                                       \
        switch (lanes(l)) {                                                    \
        case 16: LOOP(l, bf, 16, body); break;                                 \
        case 8: LOOP(l, bf, 8, body); break;                                   \
        default: LOOP(l, bf, 1, body); break;                                  \
        }                                                                      \
    } while (0)
#define BN_DISPATCH(l, bf16, LOOP, body)                                       \
    do {                                                                       \
        if (bf16)                                                              \
            BN_DISPATCH_BF(l, 1, LOOP, body);                                  \
        else                                                                   \
            BN_DISPATCH_BF(l, 0, LOOP, body);                                  \
    } while (0)
#define BN_FOR_GROUPS(l, bf16, body) BN_DISPATCH(l, bf16, BN_FOR_GROUPS_G, body)
/* clang-format on */

BN_INLINE void grp_fwd_train(void *y, float *mean, float *var, const void *x,
                             const float *gamma, const float *beta,
                             const cl_bn_layout *l, int g, int G, float eps,
                             int relu, int bf)
{
    const double cnt = (double)l->N * (double)l->HW;
    double s[16], q[16];
    float m[16], sc[16], b[16];
    grp_moments(s, q, m, x, l, g, G, bf);
    for (int k = 0; k < G; k++) {
        int c = g * G + k;
        float v = (float)(q[k] / cnt);
        mean[c] = m[k];
        var[c] = v;
        sc[k] = gamma[c] / sqrtf(v + eps);
        b[k] = beta[c];
    }
    for (int n = 0; n < l->N; n++)
        plane_norm(y, x, grp_off(l, n, g, G), m, sc, b, l, G, relu, bf);
}

void cl_dnnl_bn_forward_train(void *y, float *mean, float *var, const void *x,
                              const float *gamma, const float *beta,
                              const cl_bn_layout *l, float eps, int relu,
                              int bf16)
{
#define BODY(bf, G)                                                            \
    grp_fwd_train(y, mean, var, x, gamma, beta, l, g, G, eps, relu, bf)
    BN_FOR_GROUPS(l, bf16, BODY);
#undef BODY
    zero_pad(y, l, bf16);
}

BN_INLINE void grp_sums(double *sum, double *sumsq, const void *x,
                        const cl_bn_layout *l, int g, int G, int bf)
{
    const double cnt = (double)l->N * (double)l->HW;
    double s[16], q[16];
    float m[16];
    grp_moments(s, q, m, x, l, g, G, bf);
    for (int k = 0; k < G; k++) {
        /* sum x^2 = sum (x - m)^2 + 2 m sum x - cnt m^2, exactly. */
        double mm = m[k];
        sum[g * G + k] = s[k];
        sumsq[g * G + k] = q[k] + 2.0 * mm * s[k] - cnt * mm * mm;
    }
}

void cl_dnnl_bn_sums(double *sum, double *sumsq, const void *x,
                     const cl_bn_layout *l, int bf16)
{
#define BODY(bf, G) grp_sums(sum, sumsq, x, l, g, G, bf)
    BN_FOR_GROUPS(l, bf16, BODY);
#undef BODY
}

/* Sample n of group g normalised with given statistics. */
BN_INLINE void plane_infer(void *y, const void *x, const float *gamma,
                           const float *beta, const float *mean,
                           const float *var, const cl_bn_layout *l, int n,
                           int g, int G, float eps, int relu, int bf)
{
    float m[16], is[16], s[16], b[16];
    grp_consts(m, is, s, b, mean, var, gamma, beta, g, G, eps);
    plane_norm(y, x, grp_off(l, n, g, G), m, s, b, l, G, relu, bf);
}

/* No reduction: planes are independent, so threads share them out. */
/* clang-format off */
#define BN_FOR_PLANES_G(l, bf, G, body)                                        \
    do {                                                                       \
        const int NG_ = (l)->C / (G), N_ = (l)->N;                             \
        _Pragma("omp parallel for schedule(static) collapse(2)")               \
        for (int n = 0; n < N_; n++)                                           \
            for (int g = 0; g < NG_; g++)                                      \
                body(bf, G);                                                   \
    } while (0)
/* clang-format on */

void cl_dnnl_bn_forward_infer(void *y, const void *x, const float *gamma,
                              const float *beta, const float *mean,
                              const float *var, const cl_bn_layout *l,
                              float eps, int relu, int bf16)
{
#define BODY(bf, G)                                                            \
    plane_infer(y, x, gamma, beta, mean, var, l, n, g, G, eps, relu, bf)
    BN_DISPATCH(l, bf16, BN_FOR_PLANES_G, BODY);
#undef BODY
    zero_pad(y, l, bf16);
}

/* Backward sums of group g: sb = sum dy', sg = sum dy' * xhat, where dy'
 * is dy masked by the fused ReLU (recomputed from x). */
BN_INLINE void grp_bwd_sums(double *sg, double *sb, const void *dy,
                            const void *x, const float *m, const float *is,
                            const float *s, const float *b,
                            const cl_bn_layout *l, int g, int G, int relu,
                            int bf)
{
    const size_t sp = (size_t)l->sp;
    for (int k = 0; k < G; k++)
        sg[k] = sb[k] = 0.0;
    for (int n = 0; n < l->N; n++) {
        size_t o = grp_off(l, n, g, G);
        float ag[16] = {0}, ab[16] = {0};
        for (int64_t i = 0; i < l->HW; i++)
            for (int k = 0; k < G; k++) {
                size_t j = o + (size_t)i * sp + k;
                float xv = ld_act(x, j, bf);
                float gv = ld_act(dy, j, bf);
                if (relu && !(bn_pre(xv, m[k], s[k], b[k]) > 0.0f))
                    gv = 0.0f;
                ab[k] += gv;
                ag[k] += gv * (xv - m[k]) * is[k];
            }
        for (int k = 0; k < G; k++) {
            sg[k] += ag[k];
            sb[k] += ab[k];
        }
    }
}

/* dx = gamma * invstd * (dy' - mean(dy') - xhat * mean(dy' xhat)) over
 * group g, the means given per lane (cbt, cg). */
BN_INLINE void grp_bwd_dx(void *dx, const void *dy, const void *x,
                          const float *gamma, const float *m, const float *is,
                          const float *s, const float *b, const float *cg,
                          const float *cbt, const cl_bn_layout *l, int g, int G,
                          int relu, int bf)
{
    const size_t sp = (size_t)l->sp;
    for (int n = 0; n < l->N; n++) {
        size_t o = grp_off(l, n, g, G);
        for (int64_t i = 0; i < l->HW; i++)
            for (int k = 0; k < G; k++) {
                size_t j = o + (size_t)i * sp + k;
                float xv = ld_act(x, j, bf);
                float gv = ld_act(dy, j, bf);
                if (relu && !(bn_pre(xv, m[k], s[k], b[k]) > 0.0f))
                    gv = 0.0f;
                float xh = (xv - m[k]) * is[k];
                st_act(dx, j,
                       gamma[g * G + k] * is[k] * (gv - cbt[k] - xh * cg[k]),
                       bf);
            }
    }
}

BN_INLINE void grp_bwd(void *dx, float *dgamma, float *dbeta, const void *dy,
                       const void *x, const float *mean, const float *var,
                       const float *gamma, const float *beta,
                       const cl_bn_layout *l, int g, int G, float eps, int relu,
                       int bf)
{
    const double cnt = (double)l->N * (double)l->HW;
    float m[16], is[16], s[16], b[16], cg[16], cbt[16];
    double sg[16], sb[16];
    grp_consts(m, is, s, b, mean, var, gamma, beta, g, G, eps);
    grp_bwd_sums(sg, sb, dy, x, m, is, s, b, l, g, G, relu, bf);
    for (int k = 0; k < G; k++) {
        int c = g * G + k;
        dgamma[c] = (float)sg[k];
        dbeta[c] = (float)sb[k];
        cg[k] = (float)(sg[k] / cnt);
        cbt[k] = (float)(sb[k] / cnt);
    }
    grp_bwd_dx(dx, dy, x, gamma, m, is, s, b, cg, cbt, l, g, G, relu, bf);
}

void cl_dnnl_bn_backward(void *dx, float *dgamma, float *dbeta, const void *dy,
                         const void *x, const float *mean, const float *var,
                         const float *gamma, const float *beta,
                         const cl_bn_layout *l, float eps, int relu, int bf16)
{
#define BODY(bf, G)                                                            \
    grp_bwd(dx, dgamma, dbeta, dy, x, mean, var, gamma, beta, l, g, G, eps,    \
            relu, bf)
    BN_FOR_GROUPS(l, bf16, BODY);
#undef BODY
    zero_pad(dx, l, bf16);
}

BN_INLINE void grp_bwd_part(double *sum_dy, double *sum_dy_xhat, const void *dy,
                            const void *x, const float *mean, const float *var,
                            const float *gamma, const float *beta,
                            const cl_bn_layout *l, int g, int G, float eps,
                            int relu, int bf)
{
    float m[16], is[16], s[16], b[16];
    double sg[16], sb[16];
    grp_consts(m, is, s, b, mean, var, gamma, beta, g, G, eps);
    grp_bwd_sums(sg, sb, dy, x, m, is, s, b, l, g, G, relu, bf);
    for (int k = 0; k < G; k++) {
        sum_dy[g * G + k] = sb[k];
        sum_dy_xhat[g * G + k] = sg[k];
    }
}

void cl_dnnl_bn_backward_sums(double *sum_dy, double *sum_dy_xhat,
                              const void *dy, const void *x, const float *mean,
                              const float *var, const float *gamma,
                              const float *beta, const cl_bn_layout *l,
                              float eps, int relu, int bf16)
{
#define BODY(bf, G)                                                            \
    grp_bwd_part(sum_dy, sum_dy_xhat, dy, x, mean, var, gamma, beta, l, g, G,  \
                 eps, relu, bf)
    BN_FOR_GROUPS(l, bf16, BODY);
#undef BODY
}

BN_INLINE void grp_bwd_apply(void *dx, const void *dy, const void *x,
                             const float *mean, const float *var,
                             const float *gamma, const float *beta,
                             const double *sum_dy, const double *sum_dy_xhat,
                             double count, const cl_bn_layout *l, int g, int G,
                             float eps, int relu, int bf)
{
    float m[16], is[16], s[16], b[16], cg[16], cbt[16];
    grp_consts(m, is, s, b, mean, var, gamma, beta, g, G, eps);
    for (int k = 0; k < G; k++) {
        cg[k] = (float)(sum_dy_xhat[g * G + k] / count);
        cbt[k] = (float)(sum_dy[g * G + k] / count);
    }
    grp_bwd_dx(dx, dy, x, gamma, m, is, s, b, cg, cbt, l, g, G, relu, bf);
}

void cl_dnnl_bn_backward_dx(void *dx, const void *dy, const void *x,
                            const float *mean, const float *var,
                            const float *gamma, const float *beta,
                            const double *sum_dy, const double *sum_dy_xhat,
                            double count, const cl_bn_layout *l, float eps,
                            int relu, int bf16)
{
#define BODY(bf, G)                                                            \
    grp_bwd_apply(dx, dy, x, mean, var, gamma, beta, sum_dy, sum_dy_xhat,      \
                  count, l, g, G, eps, relu, bf)
    BN_FOR_GROUPS(l, bf16, BODY);
#undef BODY
    zero_pad(dx, l, bf16);
}

/* ---- planning and running the BN steps -------------------------------------
 */

static cl_status bn_stats(dn_ctx *d, const dn_step *s)
{
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[s->node];
    const cl_batchnorm2d_attr *a = &n->attr.batchnorm2d;
    const float *mean = cl_dnnl_arg_ptr(d, &s->args[0]);
    const float *var = cl_dnnl_arg_ptr(d, &s->args[1]);
    float *rm = cl_graph_buffer(g, n->buf[0]);
    float *rv = cl_graph_buffer(g, n->buf[1]);
    double cnt = d->nd[s->node].u.bn.count;
    double unb = cnt > 1 ? cnt / (cnt - 1) : 1.0;
    const float mo = a->momentum;
    for (int c = 0; c < a->channels; c++) {
        rm[c] = (1.0f - mo) * rm[c] + mo * mean[c];
        rv[c] = (1.0f - mo) * rv[c] + mo * (float)(var[c] * unb);
    }
    return CL_OK;
}

/* SyncBatchNorm forward of an own-BN node: local sums, the hook adds them
 * (and the sample count) over all ranks, then every rank normalises with
 * the global mean and biased variance, which the mean / var stores keep
 * for backward and the running-statistics step.  p: src, dst, mean, var. */
static cl_status own_bn_sync_fwd(dn_ctx *d, const dn_step *s, void **p,
                                 const cl_bn_layout *l, int bf)
{
    const int C = l->C;
    const cl_backend_hooks *h = &d->be->hooks;
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[s->node];
    const cl_batchnorm2d_attr *a = &n->attr.batchnorm2d;
    double *v = d->sync_sums;
    float *mean = p[2], *var = p[3];
    cl_dnnl_bn_sums(v, v + C, p[0], l, bf);
    v[2 * C] = (double)l->N * (double)l->HW;
    cl_status st = h->allreduce_sum(h->ctx, v, 2 * C + 1);
    if (st != CL_OK)
        return cl_error_wrap(st, "%s: SyncBatchNorm: ", n->name);
    const double M = v[2 * C];
    for (int c = 0; c < C; c++) {
        double mu = v[c] / M, var_c = v[C + c] / M - mu * mu;
        mean[c] = (float)mu;
        var[c] = var_c > 0.0 ? (float)var_c : 0.0f;
    }
    d->nd[s->node].u.bn.count = M;
    cl_dnnl_bn_forward_infer(p[1], p[0], cl_graph_param(g, n->param[0]),
                             cl_graph_param(g, n->param[1]), mean, var, l,
                             a->eps, d->nd[s->node].relu, bf);
    return CL_OK;
}

/* SyncBatchNorm backward: dgamma and dbeta are this rank's sums (param
 * gradients are averaged over ranks like any other); dx needs the global
 * sums of dy and dy * xhat over the forward's global count.  p: dx, dy,
 * x, mean, var. */
static cl_status own_bn_sync_bwd(dn_ctx *d, const dn_step *s, void **p,
                                 const cl_bn_layout *l, int bf)
{
    const int C = l->C;
    const cl_backend_hooks *h = &d->be->hooks;
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[s->node];
    const cl_batchnorm2d_attr *a = &n->attr.batchnorm2d;
    const float *gamma = cl_graph_param(g, n->param[0]);
    const float *beta = cl_graph_param(g, n->param[1]);
    float *dgamma = cl_graph_grad(g, n->param[0]);
    float *dbeta = cl_graph_grad(g, n->param[1]);
    int relu = d->nd[s->node].relu;
    double *v = d->sync_sums;
    cl_dnnl_bn_backward_sums(v, v + C, p[1], p[2], p[3], p[4], gamma, beta, l,
                             a->eps, relu, bf);
    for (int c = 0; c < C; c++) {
        dbeta[c] = (float)v[c];
        dgamma[c] = (float)v[C + c];
    }
    cl_status st = h->allreduce_sum(h->ctx, v, 2 * C);
    if (st != CL_OK)
        return cl_error_wrap(st, "%s: SyncBatchNorm backward: ", n->name);
    cl_dnnl_bn_backward_dx(p[0], p[1], p[2], p[3], p[4], gamma, beta, v, v + C,
                           d->nd[s->node].u.bn.count, l, a->eps, relu, bf);
    return CL_OK;
}

enum { BN_TRAIN, BN_INFER, BN_BACKWARD };

/* The loops above as a BN step of that kind, on f32 or bf16 activations
 * (the type of the step's first argument); with the allreduce_sum hook
 * the training forward and the backward are split at their per-channel
 * sums (SyncBatchNorm), else they run fused in one pass per block. */

static cl_status own_bn(dn_ctx *d, const dn_step *s, int kind)
{
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[s->node];
    const cl_batchnorm2d_attr *a = &n->attr.batchnorm2d;
    const cl_bn_layout *l = &d->nd[s->node].u.bn.lay;
    const float *gamma = cl_graph_param(g, n->param[0]);
    const float *beta = cl_graph_param(g, n->param[1]);
    const int sync = d->be->hooks.allreduce_sum != NULL;
    const int bf = md_bf16(&s->args[0].md);
    int relu = d->nd[s->node].relu;
    void *p[5] = {NULL, NULL, NULL, NULL, NULL};
    for (int k = 0; k < s->nargs && k < 5; k++)
        p[k] = cl_dnnl_arg_ptr(d, &s->args[k]);
    if (kind == BN_TRAIN) {
        if (sync)
            return own_bn_sync_fwd(d, s, p, l, bf);
        cl_dnnl_bn_forward_train(p[1], p[2], p[3], p[0], gamma, beta, l, a->eps,
                                 relu, bf);
        d->nd[s->node].u.bn.count = (double)l->N * (double)l->HW;
    } else if (kind == BN_INFER) {
        cl_dnnl_bn_forward_infer(
            p[1], p[0], gamma, beta, cl_graph_buffer(g, n->buf[0]),
            cl_graph_buffer(g, n->buf[1]), l, a->eps, relu, bf);
    } else if (sync) {
        return own_bn_sync_bwd(d, s, p, l, bf);
    } else {
        cl_dnnl_bn_backward(p[0], cl_graph_grad(g, n->param[0]),
                            cl_graph_grad(g, n->param[1]), p[1], p[2], p[3],
                            p[4], gamma, beta, l, a->eps, relu, bf);
    }
    return CL_OK;
}

static cl_status bn_run_train(dn_ctx *d, const dn_step *s)
{
    return own_bn(d, s, BN_TRAIN);
}

static cl_status bn_run_infer(dn_ctx *d, const dn_step *s)
{
    return own_bn(d, s, BN_INFER);
}

static cl_status bn_run_backward(dn_ctx *d, const dn_step *s)
{
    return own_bn(d, s, BN_BACKWARD);
}

/* BN runs as the loops above (see bn.h for why not as
 * oneDNN's primitive) on whatever layout its input has. */
cl_status cl_dnnl_bn_fwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    cl_graph *g = d->g;
    const cl_node *n = &g->nodes[i];
    const cl_batchnorm2d_attr *a = &n->attr.batchnorm2d;
    dn_bn *x = &d->nd[i].u.bn;
    dn_step *s;
    TRY_GOTO(cl_dnnl_ensure_input_md(d, n->in[0]));
    dnnl_memory_desc_t md = *in_md(d, n->in[0]), cmd;
    md_1d(&cmd, a->channels);
    if (!cl_dnnl_md_act_layout(&md, &x->lay))
        return cl_error(CL_ERR_BACKEND,
                        "%s: batch norm input in a layout the onednn backend "
                        "does not read (it reads nChw16c, nChw8c, nChw4c, "
                        "nhwc and nchw)",
                        n->name);
    int src = d->t[rep(d, n->in[0])].store;
    TRY_GOTO(cl_dnnl_set_md(d, n->out, &md, -1));
    int dst = d->t[rep(d, n->out)].store;
    if (2 * (size_t)a->channels + 1 > d->sync_len)
        d->sync_len = 2 * (size_t)a->channels + 1;
    if (d->mode == CL_PLAN_TRAIN) {
        TRY_GOTO(cl_dnnl_md_store(d, &cmd, &x->mean));
        TRY_GOTO(cl_dnnl_md_store(d, &cmd, &x->var));
        TRY_GOTO(cl_dnnl_step_run(d, &d->fwd_train, bn_run_train, i,
                                  "batch normalization forward", i, &s));
        cl_dnnl_arg_store(d, s, 0, src, &md);
        cl_dnnl_arg_store(d, s, 1, dst, &md);
        cl_dnnl_arg_store(d, s, 2, x->mean, &cmd);
        cl_dnnl_arg_store(d, s, 3, x->var, &cmd);
        TRY_GOTO(cl_dnnl_step_run(d, &d->fwd_train, bn_stats, i,
                                  "running statistics", i, &s));
        cl_dnnl_arg_store(d, s, 0, x->mean, &cmd);
        cl_dnnl_arg_store(d, s, 1, x->var, &cmd);
    }
    TRY_GOTO(cl_dnnl_step_run(d, &d->fwd_eval, bn_run_infer, i,
                              "batch normalization inference", i, &s));
    cl_dnnl_arg_store(d, s, 0, src, &md);
    cl_dnnl_arg_store(d, s, 1, dst, &md);
fail:
    return st;
}

cl_status cl_dnnl_bn_bwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    const cl_batchnorm2d_attr *a = &n->attr.batchnorm2d;
    dn_bn *x = &d->nd[i].u.bn;
    dn_step *s;
    dnnl_memory_desc_t cmd;
    int dy, tgt, acc;
    const dnnl_memory_desc_t *md = in_md(d, n->in[0]);
    md_1d(&cmd, a->channels);
    TRY_GOTO(cl_dnnl_out_grad(d, i, &dy));
    TRY_GOTO(cl_dnnl_grad_target(d, i, n->in[0], &tgt, &acc));
    if (tgt < 0) {
        /* The parameters still need gradients: dx goes to a scratch. */
        TRY_GOTO(cl_dnnl_md_store(d, md, &tgt));
    }
    TRY_GOTO(cl_dnnl_step_run(d, &d->bwd, bn_run_backward, i,
                              "batch normalization backward", tb(d, i), &s));
    cl_dnnl_arg_store(d, s, 0, tgt, md);
    cl_dnnl_arg_store(d, s, 1, dy, md);
    cl_dnnl_arg_store(d, s, 2, d->t[rep(d, n->in[0])].store, md);
    cl_dnnl_arg_store(d, s, 3, x->mean, &cmd);
    cl_dnnl_arg_store(d, s, 4, x->var, &cmd);
    if (acc)
        TRY_GOTO(cl_dnnl_accumulate(d, i, n->in[0], tgt));
    TRY_GOTO(cl_dnnl_hook_step(d, i, n->param[0]));
    TRY_GOTO(cl_dnnl_hook_step(d, i, n->param[1]));
fail:
    return st;
}

void cl_dnnl_bn_init(dn_node *x)
{
    x->u.bn.mean = x->u.bn.var = -1;
}
