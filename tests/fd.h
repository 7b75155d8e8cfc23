/* Finite-difference gradient checks for the op tests: central differences
 * of a scalar loss, accumulated in double, against an analytic gradient.
 * Header-only (static functions) so any test program may include it. */
#ifndef CL_TESTS_FD_H
#define CL_TESTS_FD_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "harness.h"

/* Evaluates the scalar loss at the current contents of the buffers that
 * ctx points to. */
typedef double (*cl_fd_loss_fn)(void *ctx);

/* Fills p (n) with uniform values in [lo, hi). */
static inline void cl_fd_uniform(float *p, int64_t n, float lo, float hi,
                                 cl_rng *rng)
{
    for (int64_t i = 0; i < n; i++)
        p[i] = lo + (hi - lo) * cl_rng_uniform(rng);
}

/* sum y * r in double: the probe loss L = <y, r> whose gradient wrt y is r. */
static inline double cl_fd_dot(const float *y, const float *r, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)y[i] * r[i];
    return s;
}

static inline int64_t cl_fd_gcd(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Checks grad (n) against (L(p + h e_i) - L(p - h e_i)) / 2h for every
 * element i of param when n <= max_check, else for max_check distinct
 * random elements, requiring |grad - fd| <= atol + rtol * |fd|.  param is
 * restored exactly.  A check whose finite differences are all below
 * 10 * atol fails too: it could not tell a right gradient from zero.
 * Reports the first few mismatches through the harness; returns the
 * number of mismatches. */
static int cl_fd_check_at(const char *file, int line, const char *what,
                          float *param, int64_t n, const float *grad,
                          cl_fd_loss_fn loss, void *ctx, float h, double rtol,
                          double atol, cl_rng *rng, int max_check)
{
    int bad = 0, checked = 0;
    double max_fd = 0.0, worst = 0.0;
    int64_t stride = 1, start = 0;
    /* A random subset without repeats: a random start and a stride
     * co-prime with n walk max_check distinct elements. */
    if (n > max_check) {
        start = (int64_t)cl_rng_below(rng, (uint32_t)n);
        do {
            stride = 1 + (int64_t)cl_rng_below(rng, (uint32_t)(n - 1));
        } while (cl_fd_gcd(n, stride) != 1);
    }
    int64_t cnt = n > max_check ? max_check : n;
    for (int64_t c = 0; c < cnt; c++) {
        int64_t i = (start + c * stride) % n;
        float keep = param[i];
        param[i] = keep + h;
        double lp = loss(ctx);
        param[i] = keep - h;
        double lm = loss(ctx);
        param[i] = keep;
        /* The step actually taken in float, not h itself. */
        double step = (double)(keep + h) - (double)(keep - h);
        double fd = (lp - lm) / step;
        double err = fabs((double)grad[i] - fd);
        double lim = atol + rtol * fabs(fd);
        checked++;
        if (fabs(fd) > max_fd)
            max_fd = fabs(fd);
        if (err / lim > worst)
            worst = err / lim;
        if (!(err <= lim)) {
            if (bad < 5)
                cl_test_fail(file, line,
                             "%s[%lld]: analytic %.7g vs finite difference "
                             "%.7g (|diff| %.3g > %.3g)",
                             what, (long long)i, (double)grad[i], fd, err, lim);
            bad++;
        }
    }
    if (checked > 0 && max_fd <= 10.0 * atol) {
        cl_test_fail(file, line,
                     "%s: finite differences all below %.3g, the check "
                     "cannot tell a wrong gradient",
                     what, 10.0 * atol);
        bad++;
    }
    if (getenv("CL_FD_VERBOSE"))
        fprintf(stderr, "fd %-28s n %6lld checked %4d worst err/tol %.3f\n",
                what, (long long)n, checked, worst);
    return bad;
}

#define CL_FD_CHECK(what, param, n, grad, loss, ctx, h, rtol, atol, rng, max)  \
    cl_fd_check_at(__FILE__, __LINE__, (what), (param), (n), (grad), (loss),   \
                   (ctx), (h), (rtol), (atol), (rng), (max))

#endif
