/* Helpers shared by the ops' shape rules and reference kernels. */
#ifndef CL_OPS_OPS_INTERNAL_H
#define CL_OPS_OPS_INTERNAL_H

#include <limits.h>
#include <stdint.h>

#include "core/error.h"
#include "tensor/tensor.h"

/* Kernels take int sizes and store per-plane argmax as int32, so every
 * dimension and every plane must fit in an int. */
#define CL_OPS_MAX_DIM ((int64_t)INT_MAX)

/* Work (multiply-adds or elements) below which a kernel runs on one
 * thread: waking the team costs more than such small loops (1x1 maps in a
 * ResNet's last stage, the finite-difference tests). */
#define CL_OPS_PAR_MIN ((int64_t)1 << 15)

/* Checks that the element count of s fits in an int64 (CL_ERR_LIMIT
 * naming `what` otherwise), so numel and byte sizes can be computed. */
static inline cl_status cl__ops_check_numel(const char *op, const char *what,
                                            const cl_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) {
        if (s->d[i] > 0 && n > INT64_MAX / 8 / s->d[i])
            return cl_error(CL_ERR_LIMIT,
                            "%s: %s has more elements than can be addressed",
                            op, what);
        n *= s->d[i];
    }
    return CL_OK;
}

/* Checks x is 4-d (N,C,H,W) with each dimension in [1, INT_MAX] and a plane
 * H*W that fits in an int.  `op` prefixes the message. */
static inline cl_status cl__ops_check_4d(const char *op, const cl_shape *x)
{
    static const char *names[4] = {"batch", "channels", "height", "width"};
    if (x->ndim != 4)
        return cl_error(CL_ERR_SHAPE,
                        "%s: input has %d dimensions, expected 4 (N,C,H,W)", op,
                        x->ndim);
    for (int i = 0; i < 4; i++)
        if (x->d[i] < 1 || x->d[i] > CL_OPS_MAX_DIM)
            return cl_error(CL_ERR_SHAPE,
                            "%s: input %s is %lld, expected 1..%d", op,
                            names[i], (long long)x->d[i], INT_MAX);
    if (x->d[2] * x->d[3] > CL_OPS_MAX_DIM)
        return cl_error(CL_ERR_SHAPE,
                        "%s: input plane %lldx%lld has more than %d elements",
                        op, (long long)x->d[2], (long long)x->d[3], INT_MAX);
    return cl__ops_check_numel(op, "input", x);
}

/* Checks that a sliding window along one axis stays within int arithmetic:
 * the padded input and the dilated kernel span each fit in an int, so the
 * kernels' index expressions oh*s - p + k*d cannot overflow. */
static inline cl_status cl__ops_check_window(const char *op, const char *axis,
                                             int64_t in, int k, int p, int d)
{
    if (in + 2 * (int64_t)p > CL_OPS_MAX_DIM ||
        (int64_t)d * (k - 1) + 1 > CL_OPS_MAX_DIM)
        return cl_error(CL_ERR_SHAPE,
                        "%s: %s %lld with padding %d, kernel %d and dilation "
                        "%d exceeds %d",
                        op, axis, (long long)in, p, k, d, INT_MAX);
    return CL_OK;
}

/* Checks an output plane OH x OW fits in an int (per-plane indices are
 * int32). */
static inline cl_status cl__ops_check_out_plane(const char *op, int64_t oh,
                                                int64_t ow)
{
    if (oh > CL_OPS_MAX_DIM || ow > CL_OPS_MAX_DIM || oh * ow > CL_OPS_MAX_DIM)
        return cl_error(CL_ERR_SHAPE,
                        "%s: output plane %lldx%lld has more than %d "
                        "elements",
                        op, (long long)oh, (long long)ow, INT_MAX);
    return CL_OK;
}

/* Output length of a sliding window along one axis (floor mode, as PyTorch
 * with ceil_mode false); 0 or less when the window does not fit. */
static inline int64_t cl__ops_out_len(int64_t in, int k, int s, int p, int d)
{
    int64_t span = (int64_t)d * (k - 1) + 1; /* effective kernel */
    int64_t room = in + 2 * (int64_t)p - span;
    if (room < 0)
        return 0;
    return room / s + 1;
}

/* The range [*lo, *hi) of output positions o for which the input position
 * o*s - p + off lies in [0, in), so inner loops need no bounds test. */
static inline void cl__ops_valid_range(int out, int in, int s, int p, int off,
                                       int *lo, int *hi)
{
    /* o*s >= p - off  and  o*s <= in - 1 + p - off */
    int64_t a = (int64_t)p - off, b = (int64_t)in - 1 + p - off;
    int64_t l = a <= 0 ? 0 : (a + s - 1) / s;
    int64_t h = b < 0 ? 0 : b / s + 1;
    if (h > out)
        h = out;
    if (l > h)
        l = h;
    *lo = (int)l;
    *hi = (int)h;
}

#endif
