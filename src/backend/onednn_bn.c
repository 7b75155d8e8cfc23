/* Batch norm kernels on the nChw16c layout: each channel block is one
 * 16-lane vector per pixel, and each OpenMP thread takes whole blocks. */
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

void cl_dnnl_bn_forward_train(float *y, float *mean, float *var, const float *x,
                              const float *gamma, const float *beta, int N,
                              int C, int64_t HW, float eps, int relu)
{
    const int CB = C / L;
    const double cnt = (double)N * (double)HW;
#pragma omp parallel for schedule(static)
    for (int cb = 0; cb < CB; cb++) {
        double s[L] = {0}, q[L] = {0};
        float m[L], k[L], b[L];
        for (int n = 0; n < N; n++) {
            const float *p = x + ((size_t)n * CB + cb) * (size_t)HW * L;
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
            const float *p = x + ((size_t)n * CB + cb) * (size_t)HW * L;
            float a[L] = {0};
            for (int64_t i = 0; i < HW; i++)
                for (int l = 0; l < L; l++) {
                    float e = p[i * L + l] - m[l];
                    a[l] += e * e;
                }
            for (int l = 0; l < L; l++)
                q[l] += a[l];
        }
        for (int l = 0; l < L; l++) {
            int c = cb * L + l;
            float v = (float)(q[l] / cnt);
            mean[c] = m[l];
            var[c] = v;
            k[l] = gamma[c] / sqrtf(v + eps);
            b[l] = beta[c];
        }
        for (int n = 0; n < N; n++) {
            size_t o = ((size_t)n * CB + cb) * (size_t)HW * L;
            const float *p = x + o;
            float *r = y + o;
            for (int64_t i = 0; i < HW; i++)
                for (int l = 0; l < L; l++) {
                    float v = bn_pre(p[i * L + l], m[l], k[l], b[l]);
                    r[i * L + l] = relu && v < 0.0f ? 0.0f : v;
                }
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
            float m[L], k[L], b[L];
            for (int l = 0; l < L; l++) {
                int c = cb * L + l;
                m[l] = mean[c];
                k[l] = gamma[c] / sqrtf(var[c] + eps);
                b[l] = beta[c];
            }
            size_t o = ((size_t)n * CB + cb) * (size_t)HW * L;
            const float *p = x + o;
            float *r = y + o;
            for (int64_t i = 0; i < HW; i++)
                for (int l = 0; l < L; l++) {
                    float v = bn_pre(p[i * L + l], m[l], k[l], b[l]);
                    r[i * L + l] = relu && v < 0.0f ? 0.0f : v;
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
        float m[L], is[L], k[L], b[L];
        double sg[L] = {0}, sb[L] = {0};
        for (int l = 0; l < L; l++) {
            int c = cb * L + l;
            m[l] = mean[c];
            is[l] = 1.0f / sqrtf(var[c] + eps);
            k[l] = gamma[c] / sqrtf(var[c] + eps); /* as forward, bitwise */
            b[l] = beta[c];
        }
        /* dbeta = sum dy', dgamma = sum dy' * xhat (dy' masked by ReLU). */
        for (int n = 0; n < N; n++) {
            size_t o = ((size_t)n * CB + cb) * (size_t)HW * L;
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
        float cg[L], cbt[L];
        for (int l = 0; l < L; l++) {
            int c = cb * L + l;
            dgamma[c] = (float)sg[l];
            dbeta[c] = (float)sb[l];
            cg[l] = (float)(sg[l] / cnt);
            cbt[l] = (float)(sb[l] / cnt);
        }
        /* dx = gamma * invstd * (dy' - mean(dy') - xhat * mean(dy' xhat)) */
        for (int n = 0; n < N; n++) {
            size_t o = ((size_t)n * CB + cb) * (size_t)HW * L;
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
}
