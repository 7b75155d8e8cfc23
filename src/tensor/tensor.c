/* Tensor shapes, storage and f32/bf16 conversion. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "tensor/tensor.h"

cl_shape cl_shape_make(int ndim, const int64_t *d)
{
    cl_shape s;
    memset(&s, 0, sizeof s);
    CL_ASSERT(ndim >= 0 && ndim <= CL_MAX_DIMS);
    s.ndim = ndim;
    for (int i = 0; i < ndim; i++)
        s.d[i] = d[i];
    return s;
}

cl_shape cl_shape_4d(int64_t n, int64_t c, int64_t h, int64_t w)
{
    int64_t d[4] = {n, c, h, w};
    return cl_shape_make(4, d);
}

int64_t cl_shape_numel(const cl_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++)
        n *= s->d[i];
    return n;
}

int cl_shape_equal(const cl_shape *a, const cl_shape *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->d[i] != b->d[i])
            return 0;
    return 1;
}

char *cl_shape_str(const cl_shape *s, char *buf, size_t n)
{
    size_t k = 0;
    k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "(");
    for (int i = 0; i < s->ndim; i++)
        k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "%s%lld",
                              i ? ", " : "", (long long)s->d[i]);
    snprintf(buf + k, k < n ? n - k : 0, ")");
    return buf;
}

size_t cl_dtype_size(cl_dtype t)
{
    switch (t) {
    case CL_F32:
        return 4;
    case CL_BF16:
        return 2;
    case CL_I32:
        return 4;
    case CL_I64:
        return 8;
    }
    return 0;
}

const char *cl_dtype_name(cl_dtype t)
{
    switch (t) {
    case CL_F32:
        return "f32";
    case CL_BF16:
        return "bf16";
    case CL_I32:
        return "i32";
    case CL_I64:
        return "i64";
    }
    return "?";
}

static cl_status shape_bytes(const cl_shape *s, cl_dtype t, size_t *out)
{
    size_t n = cl_dtype_size(t);
    for (int i = 0; i < s->ndim; i++) {
        if (s->d[i] < 0)
            return cl_error(CL_ERR_SHAPE, "tensor dimension %d is negative", i);
        CL_TRY(cl_mul_size(n, (size_t)s->d[i], &n, "tensor"));
    }
    *out = n;
    return CL_OK;
}

cl_status cl_tensor_init(cl_tensor *t, cl_shape shape, cl_dtype dtype)
{
    size_t bytes = 0;
    memset(t, 0, sizeof *t);
    CL_TRY(shape_bytes(&shape, dtype, &bytes));
    t->data = cl_alloc_zero(bytes, "tensor");
    if (!t->data)
        return CL_ERR_NOMEM;
    t->shape = shape;
    t->dtype = dtype;
    t->layout = CL_LAYOUT_PLAIN;
    t->owns = 1;
    return CL_OK;
}

cl_tensor cl_tensor_view(void *data, cl_shape shape, cl_dtype dtype)
{
    cl_tensor t;
    memset(&t, 0, sizeof t);
    t.shape = shape;
    t.dtype = dtype;
    t.layout = CL_LAYOUT_PLAIN;
    t.data = data;
    return t;
}

cl_status cl_tensor_reshape(const cl_tensor *t, cl_shape shape, cl_tensor *view)
{
    char a[96], b[96];
    if (cl_shape_numel(&shape) != cl_shape_numel(&t->shape))
        return cl_error(CL_ERR_SHAPE, "cannot reshape %s to %s",
                        cl_shape_str(&t->shape, a, sizeof a),
                        cl_shape_str(&shape, b, sizeof b));
    *view = cl_tensor_view(t->data, shape, t->dtype);
    view->layout = t->layout;
    return CL_OK;
}

cl_status cl_tensor_slice0(const cl_tensor *t, int64_t begin, int64_t end,
                           cl_tensor *view)
{
    if (t->shape.ndim < 1 || begin < 0 || end < begin || end > t->shape.d[0])
        return cl_error(CL_ERR_ARG, "slice [%lld, %lld) outside dimension 0",
                        (long long)begin, (long long)end);
    if (t->layout != CL_LAYOUT_PLAIN)
        return cl_error(CL_ERR_UNSUPPORTED, "slice of a backend-laid tensor");
    cl_shape s = t->shape;
    s.d[0] = end - begin;
    int64_t row =
        cl_shape_numel(&t->shape) / (t->shape.d[0] ? t->shape.d[0] : 1);
    *view = cl_tensor_view((char *)t->data +
                               (size_t)(begin * row) * cl_dtype_size(t->dtype),
                           s, t->dtype);
    return CL_OK;
}

int64_t cl_tensor_numel(const cl_tensor *t)
{
    return cl_shape_numel(&t->shape);
}

size_t cl_tensor_bytes(const cl_tensor *t)
{
    return (size_t)cl_tensor_numel(t) * cl_dtype_size(t->dtype);
}

void cl_tensor_free(cl_tensor *t)
{
    if (t->owns)
        cl_free(t->data);
    memset(t, 0, sizeof *t);
}

uint16_t cl_bf16_from_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu))
        return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN, keep sign */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float cl_f32_from_f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31u,
             m = h & 1023u, u;
    if (e == 0) {
        /* Zero or subnormal: m * 2^-24, exact in f32. */
        float v = (float)m * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (e == 31)
        u = sign | 0x7f800000u | (m << 13);
    else
        u = sign | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void cl_bf16_from_f32_n(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = cl_bf16_from_f32(src[i]);
}

void cl_f32_from_bf16_n(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = cl_f32_from_bf16(src[i]);
}

cl_status cl_tensor_convert(cl_tensor *dst, const cl_tensor *src)
{
    char a[96], b[96];
    if (!cl_shape_equal(&dst->shape, &src->shape))
        return cl_error(CL_ERR_SHAPE, "convert %s into %s",
                        cl_shape_str(&src->shape, a, sizeof a),
                        cl_shape_str(&dst->shape, b, sizeof b));
    if (src->layout != CL_LAYOUT_PLAIN || dst->layout != CL_LAYOUT_PLAIN)
        return cl_error(CL_ERR_UNSUPPORTED, "convert of a backend-laid tensor");
    size_t n = (size_t)cl_tensor_numel(src);
    if (src->dtype == dst->dtype) {
        memcpy(dst->data, src->data, n * cl_dtype_size(src->dtype));
    } else if (src->dtype == CL_F32 && dst->dtype == CL_BF16) {
        cl_bf16_from_f32_n(dst->data, src->data, n);
    } else if (src->dtype == CL_BF16 && dst->dtype == CL_F32) {
        cl_f32_from_bf16_n(dst->data, src->data, n);
    } else {
        return cl_error(CL_ERR_UNSUPPORTED, "convert %s to %s",
                        cl_dtype_name(src->dtype), cl_dtype_name(dst->dtype));
    }
    return CL_OK;
}
