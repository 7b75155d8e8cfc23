/* Batch norm kernels on oneDNN's activation layouts.  Channels go in
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
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backend/onednn_bn.h"

/* Forced inline, so that each kernel is compiled once per element type
 * with the type test folded away and the lane loops vectorised. */
#define BN_INLINE static inline __attribute__((always_inline))

/* Element i of an f32 (bf == 0) or bf16 (bf != 0) array.  The conversions
 * are those of src/tensor/tensor.h (cl_f32_from_bf16, cl_bf16_from_f32:
 * round to nearest even, NaN kept quiet), written inline here because a
 * call per element would stop the lane loops from vectorising;
 * tests/test_onednn.c holds the two bit for bit. */
BN_INLINE float ld(const void *p, size_t i, int bf)
{
    if (!bf)
        return ((const float *)p)[i];
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

BN_INLINE void st(void *p, size_t i, float v, int bf)
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

int cl_bn_layout_make(cl_bn_layout *l, const char *tag, int N, int C,
                      int64_t HW)
{
    int B;
    if (strcmp(tag, "nChw16c") == 0)
        B = 16;
    else if (strcmp(tag, "nChw8c") == 0)
        B = 8;
    else if (strcmp(tag, "nChw4c") == 0)
        B = 4;
    else if (strcmp(tag, "nhwc") == 0 || strcmp(tag, "nchw") == 0)
        B = 0;
    else
        return 0;
    l->N = N;
    l->C = C;
    l->HW = HW;
    if (B) { /* blocked: channels padded to whole blocks */
        int64_t cpad = ((int64_t)C + B - 1) / B * B;
        l->B = B;
        l->sb = (int64_t)B * HW;
        l->sp = B;
        l->sn = cpad * HW;
    } else if (tag[1] == 'h') { /* nhwc */
        l->B = C;
        l->sb = 0;
        l->sp = C;
        l->sn = (int64_t)C * HW;
    } else { /* nchw */
        l->B = 1;
        l->sb = HW;
        l->sp = 1;
        l->sn = (int64_t)C * HW;
    }
    return 1;
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
                a[k] += ld(x, o + (size_t)i * sp + k, bf);
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
                float e = ld(x, o + (size_t)i * sp + k, bf) - m[k];
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
            float v = bn_pre(ld(x, j, bf), m[k], s[k], b[k]);
            st(y, j, relu && v < 0.0f ? 0.0f : v, bf);
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
                float xv = ld(x, j, bf);
                float gv = ld(dy, j, bf);
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
                float xv = ld(x, j, bf);
                float gv = ld(dy, j, bf);
                if (relu && !(bn_pre(xv, m[k], s[k], b[k]) > 0.0f))
                    gv = 0.0f;
                float xh = (xv - m[k]) * is[k];
                st(dx, j, gamma[g * G + k] * is[k] * (gv - cbt[k] - xh * cg[k]),
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
