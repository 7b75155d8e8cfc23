/* A MindSpore checkpoint as named tensors under their torchvision names
 * (cl_ms_named): the cl_ckpt_source over its load plan that
 * cl_weights_open opens a .ckpt as. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "interop/interop.h"
#include "interop/mindspore_plan.h"
#include "models/swin.h"

struct cl_ms_named {
    cl_ms_ckpt c;
    cl_ms_plan p;
};

cl_status cl_ms_named_open(cl_ms_named **out, const char *path)
{
    *out = NULL;
    cl_ms_named *m = calloc(1, sizeof *m);
    if (!m)
        return cl_error(CL_ERR_NOMEM, "%s: out of memory", path);
    cl_status s = cl_ms_ckpt_open(&m->c, path);
    if (s == CL_OK)
        s = cl_ms_plan_build(&m->p, &m->c, path, NULL, 1);
    if (s != CL_OK) {
        cl_ms_ckpt_close(&m->c);
        free(m);
        return s;
    }
    *out = m;
    return CL_OK;
}

void cl_ms_named_close(cl_ms_named *m)
{
    if (!m)
        return;
    cl_ms_plan_free(&m->p);
    cl_ms_ckpt_close(&m->c);
    free(m);
}

static size_t named_count(const void *ctx)
{
    return (size_t)((const cl_ms_named *)ctx)->p.n;
}

static const char *named_name(const void *ctx, size_t i)
{
    return ((const cl_ms_named *)ctx)->p.e[i].name;
}

static long named_find(const void *ctx, const char *name)
{
    const cl_ms_named *m = ctx;
    for (int i = 0; i < m->p.n; i++)
        if (strcmp(m->p.e[i].name, name) == 0)
            return i;
    return -1;
}

static cl_shape named_shape(const void *ctx, size_t i)
{
    return ((const cl_ms_named *)ctx)->p.e[i].shape;
}

static cl_status named_read_f32(const void *ctx, size_t i, float *dst, size_t n)
{
    const cl_ms_named *m = ctx;
    const cl_ms_entry *e = &m->p.e[i];
    if (e->n_part == 0)
        return cl_error(CL_ERR_FORMAT, "%s is an integer index, not floats",
                        e->name);
    for (int k = 0; k < e->n_part; k++) {
        const cl_ms_tensor *t = &m->c.t[e->part[k]];
        if (!cl_ms_is_float(t->dtype))
            return cl_error(CL_ERR_FORMAT, "%s is %s, not a floating type",
                            t->name, t->dtype);
    }
    if ((size_t)cl_shape_numel(&e->shape) != n)
        return cl_error(CL_ERR_SHAPE, "%s: %lld elements, %zu expected",
                        e->from, (long long)cl_shape_numel(&e->shape), n);
    cl_ms_entry_to_f32(&m->c, e, dst, n);
    return CL_OK;
}

static cl_status named_read_i64(const void *ctx, size_t i, int64_t *dst,
                                size_t n)
{
    const cl_ms_named *m = ctx;
    const cl_ms_entry *e = &m->p.e[i];
    if ((size_t)cl_shape_numel(&e->shape) != n)
        return cl_error(CL_ERR_SHAPE, "%s: %lld elements, %zu expected",
                        e->from, (long long)cl_shape_numel(&e->shape), n);
    if (e->n_part == 0) {
        cl_swin_relative_index(e->index_ws, dst);
        return CL_OK;
    }
    const cl_ms_tensor *t = &m->c.t[e->part[0]];
    if (e->n_part != 1 || strcmp(t->dtype, "Int64") != 0)
        return cl_error(CL_ERR_FORMAT, "%s is %s, not Int64", e->from,
                        t->dtype);
    memcpy(dst, t->data, n * sizeof *dst);
    return CL_OK;
}

cl_ckpt_source cl_ms_named_source(const cl_ms_named *m, const char *path)
{
    /* MindSpore's BN keeps no count of batches: the counters stay. */
    return (cl_ckpt_source){path,
                            m,
                            named_count,
                            named_name,
                            named_find,
                            named_shape,
                            named_read_f32,
                            named_read_i64,
                            1,
                            CL_CKPT_PICK_EMA};
}
