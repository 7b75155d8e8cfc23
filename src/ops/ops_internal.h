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
