/* Batch norm kernels on the nChw16c layout: each channel block is one
 * 16-lane vector per pixel, and each OpenMP thread takes whole blocks.
 * The passes over one block are static functions shared by the fused
 * single-process kernels and the split SyncBatchNorm ones, so the two paths
 * do the same arithmetic. */
#include <math.h>
#include <stddef.h>

#include "backend/onednn_bn.h"

enum { L = 16 };

/* The pre-activation value of forward and of the backward mask, written
 * once so both compute bit-identical results. */
static inline float bn_pre(float x, float m, float s, float b)
{
    return (x - m) * s + b;
}

/* Pixel i of sample n in channel block cb. */
static inline size_t blk_off(int n, int CB, int cb, int64_t HW)
{
    return ((size_t)n * CB + cb) * (size_t)HW * L;
}

/* Local statistics of block cb: s = sum x, q = sum (x - m)^2 around the
 * local mean m = s / cnt rounded to f32 (two passes, as a centred sum of
 * squares keeps the variance accurate when |mean| >> std). */
static void blk_moments(double *s, double *q, float *m, const float *x, int N,
                        int CB, int cb, int64_t HW)
{
    const double cnt = (double)N * (double)HW;
    for (int l = 0; l < L; l++)
        s[l] = q[l] = 0.0;
    for (int n = 0; n < N; n++) {
        const float *p = x + blk_off(n, CB, cb, HW);
        float a[L] = {0};
        for (int64_t i = 0; i < HW; i++)
            for (int l = 0; l < L; l++)
                a[l] += p[i * L + l];
        for (int l = 0; l < L; l++)
            s[l] += a[l];
    }
    for (int l = 0; l < L; l++)
        m[l] = (float)(s[l] / cnt);
    for (int n = 0; n < N; n++) {
        const float *p = x + blk_off(n, CB, cb, HW);
        float a[L] = {0};
        for (int64_t i = 0; i < HW; i++)
            for (int l = 0; l < L; l++) {
                float e = p[i * L + l] - m[l];
                a[l] += e * e;
            }
        for (int l = 0; l < L; l++)
            q[l] += a[l];
    }
}

/* y = (x - m) * k + b [ReLU] over one (sample, block) plane. */
static void plane_norm(float *r, const float *p, const float *m, const float *k,
                       const float *b, int64_t HW, int relu)
{
    for (int64_t i = 0; i < HW; i++)
        for (int l = 0; l < L; l++) {
            float v = bn_pre(p[i * L + l], m[l], k[l], b[l]);
            r[i * L + l] = relu && v < 0.0f ? 0.0f : v;
        }
}

/* Per-lane constants of block cb from mean and biased variance. */
static void blk_consts(float *m, float *is, float *k, float *b,
                       const float *mean, const float *var, const float *gamma,
                       const float *beta, int cb, float eps)
{
    for (int l = 0; l < L; l++) {
        int c = cb * L + l;
        m[l] = mean[c];
        is[l] = 1.0f / sqrtf(var[c] + eps);
        k[l] = gamma[c] / sqrtf(var[c] + eps); /* as forward, bitwise */
        b[l] = beta[c];
    }
}

void cl_dnnl_bn_forward_train(float *y, float *mean, float *var, const float *x,
                              const float *gamma, const float *beta, int N,
                              int C, int64_t HW, float eps, int relu)
{
    const int CB = C / L;
    const double cnt = (double)N * (double)HW;
#pragma omp parallel for schedule(static)
    for (int cb = 0; cb < CB; cb++) {
        double s[L], q[L];
        float m[L], k[L], b[L];
        blk_moments(s, q, m, x, N, CB, cb, HW);
        for (int l = 0; l < L; l++) {
            int c = cb * L + l;
            float v = (float)(q[l] / cnt);
            mean[c] = m[l];
            var[c] = v;
            k[l] = gamma[c] / sqrtf(v + eps);
            b[l] = beta[c];
        }
        for (int n = 0; n < N; n++) {
            size_t o = blk_off(n, CB, cb, HW);
            plane_norm(y + o, x + o, m, k, b, HW, relu);
        }
    }
}

void cl_dnnl_bn_sums(double *sum, double *sumsq, const float *x, int N, int C,
                     int64_t HW)
{
    const int CB = C / L;
    const double cnt = (double)N * (double)HW;
#pragma omp parallel for schedule(static)
    for (int cb = 0; cb < CB; cb++) {
        double s[L], q[L];
        float m[L];
        blk_moments(s, q, m, x, N, CB, cb, HW);
        for (int l = 0; l < L; l++) {
            /* sum x^2 = sum (x - m)^2 + 2 m sum x - cnt m^2, exactly. */
            double mm = m[l];
            sum[cb * L + l] = s[l];
            sumsq[cb * L + l] = q[l] + 2.0 * mm * s[l] - cnt * mm * mm;
        }
    }
}

void cl_dnnl_bn_forward_infer(float *y, const float *x, const float *gamma,
                              const float *beta, const float *mean,
                              const float *var, int N, int C, int64_t HW,
                              float eps, int relu)
{
    const int CB = C / L;
#pragma omp parallel for schedule(static) collapse(2)
    for (int n = 0; n < N; n++)
        for (int cb = 0; cb < CB; cb++) {
            float m[L], is[L], k[L], b[L];
            blk_consts(m, is, k, b, mean, var, gamma, beta, cb, eps);
            size_t o = blk_off(n, CB, cb, HW);
            plane_norm(y + o, x + o, m, k, b, HW, relu);
        }
}

/* Backward sums of block cb: sb = sum dy', sg = sum dy' * xhat, where dy'
 * is dy masked by the fused ReLU (recomputed from x). */
static void blk_bwd_sums(double *sg, double *sb, const float *dy,
                         const float *x, const float *m, const float *is,
                         const float *k, const float *b, int N, int CB, int cb,
                         int64_t HW, int relu)
{
    for (int l = 0; l < L; l++)
        sg[l] = sb[l] = 0.0;
    for (int n = 0; n < N; n++) {
        size_t o = blk_off(n, CB, cb, HW);
        const float *p = x + o, *g = dy + o;
        float ag[L] = {0}, ab[L] = {0};
        for (int64_t i = 0; i < HW; i++)
            for (int l = 0; l < L; l++) {
                float xv = p[i * L + l];
                float gv = g[i * L + l];
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
static void blk_bwd_dx(float *dx, const float *dy, const float *x,
                       const float *gamma, const float *m, const float *is,
                       const float *k, const float *b, const float *cg,
                       const float *cbt, int N, int CB, int cb, int64_t HW,
                       int relu)
{
    for (int n = 0; n < N; n++) {
        size_t o = blk_off(n, CB, cb, HW);
        const float *p = x + o, *g = dy + o;
        float *r = dx + o;
        for (int64_t i = 0; i < HW; i++)
            for (int l = 0; l < L; l++) {
                float xv = p[i * L + l];
                float gv = g[i * L + l];
                if (relu && !(bn_pre(xv, m[l], k[l], b[l]) > 0.0f))
                    gv = 0.0f;
                float xh = (xv - m[l]) * is[l];
                r[i * L + l] =
                    gamma[cb * L + l] * is[l] * (gv - cbt[l] - xh * cg[l]);
            }
    }
}

void cl_dnnl_bn_backward(float *dx, float *dgamma, float *dbeta,
                         const float *dy, const float *x, const float *mean,
                         const float *var, const float *gamma,
                         const float *beta, int N, int C, int64_t HW, float eps,
                         int relu)
{
    const int CB = C / L;
    const double cnt = (double)N * (double)HW;
#pragma omp parallel for schedule(static)
    for (int cb = 0; cb < CB; cb++) {
        float m[L], is[L], k[L], b[L], cg[L], cbt[L];
        double sg[L], sb[L];
        blk_consts(m, is, k, b, mean, var, gamma, beta, cb, eps);
        blk_bwd_sums(sg, sb, dy, x, m, is, k, b, N, CB, cb, HW, relu);
        for (int l = 0; l < L; l++) {
            int c = cb * L + l;
            dgamma[c] = (float)sg[l];
            dbeta[c] = (float)sb[l];
            cg[l] = (float)(sg[l] / cnt);
            cbt[l] = (float)(sb[l] / cnt);
        }
        blk_bwd_dx(dx, dy, x, gamma, m, is, k, b, cg, cbt, N, CB, cb, HW, relu);
    }
}

void cl_dnnl_bn_backward_sums(double *sum_dy, double *sum_dy_xhat,
                              const float *dy, const float *x,
                              const float *mean, const float *var,
                              const float *gamma, const float *beta, int N,
                              int C, int64_t HW, float eps, int relu)
{
    const int CB = C / L;
#pragma omp parallel for schedule(static)
    for (int cb = 0; cb < CB; cb++) {
        float m[L], is[L], k[L], b[L];
        double sg[L], sb[L];
        blk_consts(m, is, k, b, mean, var, gamma, beta, cb, eps);
        blk_bwd_sums(sg, sb, dy, x, m, is, k, b, N, CB, cb, HW, relu);
        for (int l = 0; l < L; l++) {
            sum_dy[cb * L + l] = sb[l];
            sum_dy_xhat[cb * L + l] = sg[l];
        }
    }
}

void cl_dnnl_bn_backward_dx(float *dx, const float *dy, const float *x,
                            const float *mean, const float *var,
                            const float *gamma, const float *beta,
                            const double *sum_dy, const double *sum_dy_xhat,
                            double count, int N, int C, int64_t HW, float eps,
                            int relu)
{
    const int CB = C / L;
#pragma omp parallel for schedule(static)
    for (int cb = 0; cb < CB; cb++) {
        float m[L], is[L], k[L], b[L], cg[L], cbt[L];
        blk_consts(m, is, k, b, mean, var, gamma, beta, cb, eps);
        for (int l = 0; l < L; l++) {
            cg[l] = (float)(sum_dy_xhat[cb * L + l] / count);
            cbt[l] = (float)(sum_dy[cb * L + l] / count);
        }
        blk_bwd_dx(dx, dy, x, gamma, m, is, k, b, cg, cbt, N, CB, cb, HW, relu);
    }
}
