/* Tensors: shape (up to 5-d), dtype, layout tag, owned or viewed storage. */
#ifndef CL_TENSOR_TENSOR_H
#define CL_TENSOR_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "classic/status.h"

#define CL_MAX_DIMS 5

typedef enum cl_dtype {
    CL_F32 = 0,
    CL_BF16 = 1,
    CL_I32 = 2,
    CL_I64 = 3 /* integer buffers (indices a model computes once) */
} cl_dtype;

/* How the elements are laid out in memory.  Canonical tensors are PLAIN
 * (row-major over the shape: NCHW activations, OIHW weights); a backend may
 * tag its own blocked layouts, which only it can read. */
typedef enum cl_layout {
    CL_LAYOUT_PLAIN = 0,
    CL_LAYOUT_BACKEND = 1 /* opaque to everything but the owning backend */
} cl_layout;

typedef struct cl_shape {
    int ndim;
    int64_t d[CL_MAX_DIMS];
} cl_shape;

typedef struct cl_tensor {
    cl_shape shape;
    cl_dtype dtype;
    cl_layout layout;
    void *data;
    int owns; /* non-zero: data came from cl_alloc and is freed with us */
} cl_tensor;

cl_shape cl_shape_make(int ndim, const int64_t *d);
cl_shape cl_shape_4d(int64_t n, int64_t c, int64_t h, int64_t w);
int64_t cl_shape_numel(const cl_shape *s);
int cl_shape_equal(const cl_shape *a, const cl_shape *b);
/* "(2, 3, 32, 32)" into buf; returns buf. */
char *cl_shape_str(const cl_shape *s, char *buf, size_t n);

size_t cl_dtype_size(cl_dtype t);
const char *cl_dtype_name(cl_dtype t);

/* Allocates zeroed storage for shape/dtype; CL_ERR_LIMIT if the byte size
 * overflows, CL_ERR_NOMEM if it cannot be had. */
cl_status cl_tensor_init(cl_tensor *t, cl_shape shape, cl_dtype dtype);
/* A non-owning view of data with the given shape. */
cl_tensor cl_tensor_view(void *data, cl_shape shape, cl_dtype dtype);
/* The same storage seen with another shape of equal element count. */
cl_status cl_tensor_reshape(const cl_tensor *t, cl_shape shape,
                            cl_tensor *view);
/* A view of rows [begin, end) along the first dimension. */
cl_status cl_tensor_slice0(const cl_tensor *t, int64_t begin, int64_t end,
                           cl_tensor *view);
int64_t cl_tensor_numel(const cl_tensor *t);
size_t cl_tensor_bytes(const cl_tensor *t);
void cl_tensor_free(cl_tensor *t);

/* IEEE half (f16) to f32, exactly: subnormals, infinities and NaNs too. */
float cl_f32_from_f16(uint16_t h);
/* bf16: the upper half of an f32, rounded to nearest even; NaN stays NaN. */
uint16_t cl_bf16_from_f32(float f);
/* Inline: the backend's per-element loops widen through it (dn_get). */
static inline float cl_f32_from_bf16(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
void cl_bf16_from_f32_n(uint16_t *dst, const float *src, size_t n);
void cl_f32_from_bf16_n(float *dst, const uint16_t *src, size_t n);
/* dst = src converted between f32 and bf16; same shape, plain layout. */
cl_status cl_tensor_convert(cl_tensor *dst, const cl_tensor *src);

#endif
