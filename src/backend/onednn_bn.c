/* Batch norm kernels on the nChw16c layout: each channel block is one
 * 16-lane vector per pixel, and each OpenMP thread takes whole blocks.
 * The passes over one block are inline functions shared by the fused
 * single-process kernels and the split SyncBatchNorm ones, so the two paths
 * do the same arithmetic.  Activations and their gradients are f32 or bf16
 * (mixed precision); statistics, parameters and all arithmetic are f32 (and
 * double for the sums), so a bf16 call computes exactly what the f32 call
 * computes on the same values widened, its outputs rounded to nearest
 * even. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backend/onednn_bn.h"

enum { L = 16 };

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

/* Pixel 0 of sample n in channel block cb, in elements. */
BN_INLINE size_t blk_off(int n, int CB, int cb, int64_t HW)
{
    return ((size_t)n * CB + cb) * (size_t)HW * L;
}

/* Local statistics of block cb: s = sum x, q = sum (x - m)^2 around the
 * local mean m = s / cnt rounded to f32 (two passes, as a centred sum of
 * squares keeps the variance accurate when |mean| >> std). */
BN_INLINE void blk_moments(double *s, double *q, float *m, const void *x, int N,
                           int CB, int cb, int64_t HW, int bf)
{
    const double cnt = (double)N * (double)HW;
    for (int l = 0; l < L; l++)
        s[l] = q[l] = 0.0;
    for (int n = 0; n < N; n++) {
        size_t o = blk_off(n, CB, cb, HW);
        float a[L] = {0};
        for (int64_t i = 0; i < HW; i++)
            for (int l = 0; l < L; l++)
                a[l] += ld(x, o + (size_t)i * L + l, bf);
        for (int l = 0; l < L; l++)
            s[l] += a[l];
    }
    for (int l = 0; l < L; l++)
        m[l] = (float)(s[l] / cnt);
    for (int n = 0; n < N; n++) {
        size_t o = blk_off(n, CB, cb, HW);
        float a[L] = {0};
        for (int64_t i = 0; i < HW; i++)
            for (int l = 0; l < L; l++) {
                float e = ld(x, o + (size_t)i * L + l, bf) - m[l];
                a[l] += e * e;
            }
        for (int l = 0; l < L; l++)
            q[l] += a[l];
    }
}

/* y = (x - m) * k + b [ReLU] over one (sample, block) plane at o. */
BN_INLINE void plane_norm(void *y, const void *x, size_t o, const float *m,
                          const float *k, const float *b, int64_t HW, int relu,
                          int bf)
{
    for (int64_t i = 0; i < HW; i++)
        for (int l = 0; l < L; l++) {
            size_t j = o + (size_t)i * L + l;
            float v = bn_pre(ld(x, j, bf), m[l], k[l], b[l]);
            st(y, j, relu && v < 0.0f ? 0.0f : v, bf);
        }
}

/* Per-lane constants of block cb from mean and biased variance. */
BN_INLINE void blk_consts(float *m, float *is, float *k, float *b,
                          const float *mean, const float *var,
                          const float *gamma, const float *beta, int cb,
                          float eps)
{
    for (int l = 0; l < L; l++) {
        int c = cb * L + l;
        m[l] = mean[c];
        is[l] = 1.0f / sqrtf(var[c] + eps);
        k[l] = gamma[c] / sqrtf(var[c] + eps); /* as forward, bitwise */
        b[l] = beta[c];
    }
}

/* Runs body(bf) over every channel block in one OpenMP loop, compiled once
 * for f32 and once for bf16. */
/* clang-format off */
#define BN_FOR_BLOCKS(CB, bf16, body)                                          \
    do {                                                                       \
        if (bf16) {                                                            \
            _Pragma("omp parallel for schedule(static)")                       \
            for (int cb = 0; cb < (CB); cb++)                                  \
                body(1);                                                       \
        } else {                                                               \
            _Pragma("omp parallel for schedule(static)")                       \
            for (int cb = 0; cb < (CB); cb++)                                  \
                body(0);                                                       \
        }                                                                      \
    } while (0)
/* clang-format on */

BN_INLINE void blk_fwd_train(void *y, float *mean, float *var, const void *x,
                             const float *gamma, const float *beta, int N,
                             int CB, int cb, int64_t HW, float eps, int relu,
                             int bf)
{
    const double cnt = (double)N * (double)HW;
    double s[L], q[L];
    float m[L], k[L], b[L];
    blk_moments(s, q, m, x, N, CB, cb, HW, bf);
    for (int l = 0; l < L; l++) {
        int c = cb * L + l;
        float v = (float)(q[l] / cnt);
        mean[c] = m[l];
        var[c] = v;
        k[l] = gamma[c] / sqrtf(v + eps);
        b[l] = beta[c];
    }
    for (int n = 0; n < N; n++)
        plane_norm(y, x, blk_off(n, CB, cb, HW), m, k, b, HW, relu, bf);
}

void cl_dnnl_bn_forward_train(void *y, float *mean, float *var, const void *x,
                              const float *gamma, const float *beta, int N,
                              int C, int64_t HW, float eps, int relu, int bf16)
{
    const int CB = C / L;
#define BODY(bf)                                                               \
    blk_fwd_train(y, mean, var, x, gamma, beta, N, CB, cb, HW, eps, relu, bf)
    BN_FOR_BLOCKS(CB, bf16, BODY);
#undef BODY
}

BN_INLINE void blk_sums(double *sum, double *sumsq, const void *x, int N,
                        int CB, int cb, int64_t HW, int bf)
{
    const double cnt = (double)N * (double)HW;
    double s[L], q[L];
    float m[L];
    blk_moments(s, q, m, x, N, CB, cb, HW, bf);
    for (int l = 0; l < L; l++) {
        /* sum x^2 = sum (x - m)^2 + 2 m sum x - cnt m^2, exactly. */
        double mm = m[l];
        sum[cb * L + l] = s[l];
        sumsq[cb * L + l] = q[l] + 2.0 * mm * s[l] - cnt * mm * mm;
    }
}

void cl_dnnl_bn_sums(double *sum, double *sumsq, const void *x, int N, int C,
                     int64_t HW, int bf16)
{
    const int CB = C / L;
#define BODY(bf) blk_sums(sum, sumsq, x, N, CB, cb, HW, bf)
    BN_FOR_BLOCKS(CB, bf16, BODY);
#undef BODY
}

/* One (sample, block) plane normalised with given statistics. */
BN_INLINE void plane_infer(void *y, const void *x, const float *gamma,
                           const float *beta, const float *mean,
                           const float *var, int n, int CB, int cb, int64_t HW,
                           float eps, int relu, int bf)
{
    float m[L], is[L], k[L], b[L];
    blk_consts(m, is, k, b, mean, var, gamma, beta, cb, eps);
    plane_norm(y, x, blk_off(n, CB, cb, HW), m, k, b, HW, relu, bf);
}

void cl_dnnl_bn_forward_infer(void *y, const void *x, const float *gamma,
                              const float *beta, const float *mean,
                              const float *var, int N, int C, int64_t HW,
                              float eps, int relu, int bf16)
{
    const int CB = C / L;
    /* No reduction: planes are independent, so threads share them out. */
    if (bf16) {
#pragma omp parallel for schedule(static) collapse(2)
        for (int n = 0; n < N; n++)
            for (int cb = 0; cb < CB; cb++)
                plane_infer(y, x, gamma, beta, mean, var, n, CB, cb, HW, eps,
                            relu, 1);
    } else {
#pragma omp parallel for schedule(static) collapse(2)
        for (int n = 0; n < N; n++)
            for (int cb = 0; cb < CB; cb++)
                plane_infer(y, x, gamma, beta, mean, var, n, CB, cb, HW, eps,
                            relu, 0);
    }
}

/* Backward sums of block cb: sb = sum dy', sg = sum dy' * xhat, where dy'
 * is dy masked by the fused ReLU (recomputed from x). */
BN_INLINE void blk_bwd_sums(double *sg, double *sb, const void *dy,
                            const void *x, const float *m, const float *is,
                            const float *k, const float *b, int N, int CB,
                            int cb, int64_t HW, int relu, int bf)
{
    for (int l = 0; l < L; l++)
        sg[l] = sb[l] = 0.0;
    for (int n = 0; n < N; n++) {
        size_t o = blk_off(n, CB, cb, HW);
        float ag[L] = {0}, ab[L] = {0};
        for (int64_t i = 0; i < HW; i++)
            for (int l = 0; l < L; l++) {
                size_t j = o + (size_t)i * L + l;
                float xv = ld(x, j, bf);
                float gv = ld(dy, j, bf);
                if (relu && !(bn_pre(xv, m[l], k[l], b[l]) > 0.0f))
                    gv = 0.0f;
                ab[l] += gv;
                ag[l] += gv * (xv - m[l]) * is[l];
            }
        for (int l = 0; l < L; l++) {
            sg[l] += ag[l];
            sb[l] += ab[l];
        }
    }
}

/* dx = gamma * invstd * (dy' - mean(dy') - xhat * mean(dy' xhat)) over
 * block cb, the means given per lane (cbt, cg). */
BN_INLINE void blk_bwd_dx(void *dx, const void *dy, const void *x,
                          const float *gamma, const float *m, const float *is,
                          const float *k, const float *b, const float *cg,
                          const float *cbt, int N, int CB, int cb, int64_t HW,
                          int relu, int bf)
{
    for (int n = 0; n < N; n++) {
        size_t o = blk_off(n, CB, cb, HW);
        for (int64_t i = 0; i < HW; i++)
            for (int l = 0; l < L; l++) {
                size_t j = o + (size_t)i * L + l;
                float xv = ld(x, j, bf);
                float gv = ld(dy, j, bf);
                if (relu && !(bn_pre(xv, m[l], k[l], b[l]) > 0.0f))
                    gv = 0.0f;
                float xh = (xv - m[l]) * is[l];
                st(dx, j,
                   gamma[cb * L + l] * is[l] * (gv - cbt[l] - xh * cg[l]), bf);
            }
    }
}

BN_INLINE void blk_bwd(void *dx, float *dgamma, float *dbeta, const void *dy,
                       const void *x, const float *mean, const float *var,
                       const float *gamma, const float *beta, int N, int CB,
                       int cb, int64_t HW, float eps, int relu, int bf)
{
    const double cnt = (double)N * (double)HW;
    float m[L], is[L], k[L], b[L], cg[L], cbt[L];
    double sg[L], sb[L];
    blk_consts(m, is, k, b, mean, var, gamma, beta, cb, eps);
    blk_bwd_sums(sg, sb, dy, x, m, is, k, b, N, CB, cb, HW, relu, bf);
    for (int l = 0; l < L; l++) {
        int c = cb * L + l;
        dgamma[c] = (float)sg[l];
        dbeta[c] = (float)sb[l];
        cg[l] = (float)(sg[l] / cnt);
        cbt[l] = (float)(sb[l] / cnt);
    }
    blk_bwd_dx(dx, dy, x, gamma, m, is, k, b, cg, cbt, N, CB, cb, HW, relu, bf);
}

void cl_dnnl_bn_backward(void *dx, float *dgamma, float *dbeta, const void *dy,
                         const void *x, const float *mean, const float *var,
                         const float *gamma, const float *beta, int N, int C,
                         int64_t HW, float eps, int relu, int bf16)
{
    const int CB = C / L;
#define BODY(bf)                                                               \
    blk_bwd(dx, dgamma, dbeta, dy, x, mean, var, gamma, beta, N, CB, cb, HW,   \
            eps, relu, bf)
    BN_FOR_BLOCKS(CB, bf16, BODY);
#undef BODY
}

BN_INLINE void blk_bwd_part(double *sum_dy, double *sum_dy_xhat, const void *dy,
                            const void *x, const float *mean, const float *var,
                            const float *gamma, const float *beta, int N,
                            int CB, int cb, int64_t HW, float eps, int relu,
                            int bf)
{
    float m[L], is[L], k[L], b[L];
    double sg[L], sb[L];
    blk_consts(m, is, k, b, mean, var, gamma, beta, cb, eps);
    blk_bwd_sums(sg, sb, dy, x, m, is, k, b, N, CB, cb, HW, relu, bf);
    for (int l = 0; l < L; l++) {
        sum_dy[cb * L + l] = sb[l];
        sum_dy_xhat[cb * L + l] = sg[l];
    }
}

void cl_dnnl_bn_backward_sums(double *sum_dy, double *sum_dy_xhat,
                              const void *dy, const void *x, const float *mean,
                              const float *var, const float *gamma,
                              const float *beta, int N, int C, int64_t HW,
                              float eps, int relu, int bf16)
{
    const int CB = C / L;
#define BODY(bf)                                                               \
    blk_bwd_part(sum_dy, sum_dy_xhat, dy, x, mean, var, gamma, beta, N, CB,    \
                 cb, HW, eps, relu, bf)
    BN_FOR_BLOCKS(CB, bf16, BODY);
#undef BODY
}

BN_INLINE void blk_bwd_apply(void *dx, const void *dy, const void *x,
                             const float *mean, const float *var,
                             const float *gamma, const float *beta,
                             const double *sum_dy, const double *sum_dy_xhat,
                             double count, int N, int CB, int cb, int64_t HW,
                             float eps, int relu, int bf)
{
    float m[L], is[L], k[L], b[L], cg[L], cbt[L];
    blk_consts(m, is, k, b, mean, var, gamma, beta, cb, eps);
    for (int l = 0; l < L; l++) {
        cg[l] = (float)(sum_dy_xhat[cb * L + l] / count);
        cbt[l] = (float)(sum_dy[cb * L + l] / count);
    }
    blk_bwd_dx(dx, dy, x, gamma, m, is, k, b, cg, cbt, N, CB, cb, HW, relu, bf);
}

void cl_dnnl_bn_backward_dx(void *dx, const void *dy, const void *x,
                            const float *mean, const float *var,
                            const float *gamma, const float *beta,
                            const double *sum_dy, const double *sum_dy_xhat,
                            double count, int N, int C, int64_t HW, float eps,
                            int relu, int bf16)
{
    const int CB = C / L;
#define BODY(bf)                                                               \
    blk_bwd_apply(dx, dy, x, mean, var, gamma, beta, sum_dy, sum_dy_xhat,      \
                  count, N, CB, cb, HW, eps, relu, bf)
    BN_FOR_BLOCKS(CB, bf16, BODY);
#undef BODY
}
