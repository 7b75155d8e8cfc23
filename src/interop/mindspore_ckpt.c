/* Reads a MindSpore checkpoint: the Checkpoint protobuf message, each
 * value's tag and TensorProto, every length and content size checked
 * against the file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "interop/interop.h"
#include "interop/protobuf.h"

/* checkpoint.proto (mindspore/ccsrc/utils): Checkpoint.value = 1;
 * Value.tag = 1, Value.tensor = 2; TensorProto.dims = 1, tensor_type = 2,
 * tensor_content = 3. */
enum {
    CKPT_VALUE = 1,
    VALUE_TAG = 1,
    VALUE_TENSOR = 2,
    TP_DIMS = 1,
    TP_TYPE = 2,
    TP_CONTENT = 3
};

/* The largest checkpoint read (a ResNet-152 is 240 MB in f32). */
#define CL_MS_MAX_FILE ((size_t)4 << 30)
#define CL_MS_MAX_TENSORS 100000

static size_t dtype_size(const char *t)
{
    static const struct {
        const char *name;
        size_t size;
    } tab[] = {{"Float32", 4}, {"Float16", 2}, {"BFloat16", 2}, {"Float64", 8},
               {"Int8", 1},    {"UInt8", 1},   {"Uint8", 1},    {"Int16", 2},
               {"Int32", 4},   {"Int64", 8},   {"UInt32", 4},   {"Uint32", 4},
               {"UInt64", 8},  {"Uint64", 8},  {"Bool", 1}};
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (strcmp(t, tab[i].name) == 0)
            return tab[i].size;
    return 0;
}

static cl_status read_file(const char *path, uint8_t **buf, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return cl_error(CL_ERR_IO, "%s: cannot open (%s)", path,
                        strerror(errno));
    cl_status s = CL_OK;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) {
        s = cl_error(CL_ERR_IO, "%s: cannot size the file", path);
        goto done;
    }
    if ((size_t)n > CL_MS_MAX_FILE) {
        s = cl_error(CL_ERR_LIMIT, "%s: %ld bytes, above the %zu byte limit",
                     path, n, CL_MS_MAX_FILE);
        goto done;
    }
    *buf = cl_alloc((size_t)n + 1, "mindspore checkpoint");
    if (!*buf) {
        s = CL_ERR_NOMEM;
        goto done;
    }
    if (n > 0 && fread(*buf, 1, (size_t)n, f) != (size_t)n) {
        s = cl_error(CL_ERR_IO, "%s: short read", path);
        cl_free(*buf);
        *buf = NULL;
        goto done;
    }
    *size = (size_t)n;
done:
    fclose(f);
    return s;
}

/* One TensorProto into t. */
static cl_status parse_tensor(cl_pb_reader *r, cl_ms_tensor *t,
                              size_t value_off)
{
    cl_pb_field f;
    int more, have_type = 0, have_content = 0;
    cl_status s;
    t->shape.ndim = 0;
    while ((s = cl_pb_next(r, &f, &more)) == CL_OK && more) {
        if (f.number == TP_DIMS && f.wire == CL_PB_VARINT) {
            if (t->shape.ndim == CL_MAX_DIMS)
                return cl_error(CL_ERR_FORMAT,
                                "%s: offset %zu: tensor '%s' has more than "
                                "%d dims",
                                r->file, f.offset, t->name, CL_MAX_DIMS);
            int64_t d = (int64_t)f.v;
            if (d < 0 || d > ((int64_t)1 << 40))
                return cl_error(CL_ERR_FORMAT,
                                "%s: offset %zu: tensor '%s' has dim %lld",
                                r->file, f.offset, t->name, (long long)d);
            t->shape.d[t->shape.ndim++] = d;
        } else if (f.number == TP_DIMS && f.wire == CL_PB_LEN) {
            /* Packed dims (proto3 writers). */
            cl_pb_reader pr;
            cl_pb_reader_sub(r, &f, &pr);
            while (pr.pos < pr.n) {
                uint64_t v = 0;
                if (cl_pb_read_varint(&pr, &v) != CL_OK ||
                    t->shape.ndim == CL_MAX_DIMS || v > ((uint64_t)1 << 40))
                    return cl_error(CL_ERR_FORMAT,
                                    "%s: offset %zu: tensor '%s': bad "
                                    "packed dims",
                                    r->file, f.offset, t->name);
                t->shape.d[t->shape.ndim++] = (int64_t)v;
            }
        } else if (f.number == TP_TYPE && f.wire == CL_PB_LEN) {
            if (f.len == 0 || f.len >= sizeof t->dtype)
                return cl_error(CL_ERR_FORMAT,
                                "%s: offset %zu: tensor '%s' has a "
                                "tensor_type of %zu bytes",
                                r->file, f.offset, t->name, f.len);
            memcpy(t->dtype, f.ptr, f.len);
            t->dtype[f.len] = '\0';
            have_type = 1;
        } else if (f.number == TP_CONTENT && f.wire == CL_PB_LEN) {
            t->data = f.ptr;
            t->nbytes = f.len;
            have_content = 1;
        }
        /* Other fields: skipped, as protobuf readers do. */
    }
    if (s != CL_OK)
        return s;
    if (!have_type || !have_content)
        return cl_error(CL_ERR_FORMAT, "%s: offset %zu: tensor '%s' lacks %s",
                        r->file, value_off, t->name,
                        have_type ? "tensor_content" : "tensor_type");
    size_t es = dtype_size(t->dtype);
    if (es == 0) {
        /* Strings and unknown types: kept with no size check; the loader
         * refuses them if they map onto a weight. */
        return CL_OK;
    }
    uint64_t numel = 1;
    for (int i = 0; i < t->shape.ndim; i++) {
        if (t->shape.d[i] && numel > UINT64_MAX / (uint64_t)t->shape.d[i])
            return cl_error(CL_ERR_FORMAT,
                            "%s: offset %zu: tensor '%s': dims overflow",
                            r->file, value_off, t->name);
        numel *= (uint64_t)t->shape.d[i];
    }
    if (numel > UINT64_MAX / es || numel * es != t->nbytes)
        return cl_error(CL_ERR_FORMAT,
                        "%s: offset %zu: tensor '%s' (%s) has %zu bytes of "
                        "content, its dims need %llu (sliced or corrupt "
                        "tensor)",
                        r->file, value_off, t->name, t->dtype, t->nbytes,
                        (unsigned long long)(numel * es));
    return CL_OK;
}

static cl_status parse_value(cl_pb_reader *r, cl_ms_tensor *t, size_t value_off)
{
    cl_pb_field f;
    int more, have_tag = 0, have_tensor = 0;
    cl_status s;
    memset(t, 0, sizeof *t);
    cl_pb_field tensor_f;
    while ((s = cl_pb_next(r, &f, &more)) == CL_OK && more) {
        if (f.number == VALUE_TAG && f.wire == CL_PB_LEN) {
            if (f.len == 0 || f.len >= sizeof t->name)
                return cl_error(CL_ERR_FORMAT,
                                "%s: offset %zu: tag of %zu bytes (1 to %zu "
                                "expected)",
                                r->file, f.offset, f.len, sizeof t->name - 1);
            if (memchr(f.ptr, '\0', f.len))
                return cl_error(CL_ERR_FORMAT,
                                "%s: offset %zu: tag contains a NUL byte",
                                r->file, f.offset);
            memcpy(t->name, f.ptr, f.len);
            t->name[f.len] = '\0';
            have_tag = 1;
        } else if (f.number == VALUE_TENSOR && f.wire == CL_PB_LEN) {
            tensor_f = f;
            have_tensor = 1;
        } else if (f.number == 3 && f.wire == CL_PB_LEN) {
            return cl_error(CL_ERR_UNSUPPORTED,
                            "%s: offset %zu: a MapTensor value (not a "
                            "dense weight)",
                            r->file, f.offset);
        }
    }
    if (s != CL_OK)
        return s;
    if (!have_tag || !have_tensor)
        return cl_error(CL_ERR_FORMAT, "%s: offset %zu: value lacks its %s",
                        r->file, value_off, have_tag ? "tensor" : "tag");
    cl_pb_reader tr;
    cl_pb_reader_sub(r, &tensor_f, &tr);
    return parse_tensor(&tr, t, value_off);
}

static int by_name(const void *a, const void *b)
{
    const cl_ms_tensor *x = *(const cl_ms_tensor *const *)a;
    const cl_ms_tensor *y = *(const cl_ms_tensor *const *)b;
    int d = strcmp(x->name, y->name);
    return d ? d : (x->offset > y->offset) - (x->offset < y->offset);
}

/* A name twice is a tensor saved in slices (or a corrupt file); found by
 * sorting, so a hostile file of many values costs n log n. */
static cl_status check_unique(const cl_ms_ckpt *c, const char *path)
{
    if (c->n < 2)
        return CL_OK;
    const cl_ms_tensor **v =
        cl_alloc((size_t)c->n * sizeof *v, "checkpoint names");
    if (!v)
        return CL_ERR_NOMEM;
    for (int i = 0; i < c->n; i++)
        v[i] = &c->t[i];
    qsort(v, (size_t)c->n, sizeof *v, by_name);
    cl_status s = CL_OK;
    for (int i = 1; i < c->n && s == CL_OK; i++)
        if (strcmp(v[i - 1]->name, v[i]->name) == 0)
            s = cl_error(CL_ERR_UNSUPPORTED,
                         "%s: offset %zu: '%s' appears twice (a tensor "
                         "saved in slices is not read)",
                         path, v[i]->offset, v[i]->name);
    cl_free(v);
    return s;
}

cl_status cl_ms_ckpt_open(cl_ms_ckpt *c, const char *path)
{
    memset(c, 0, sizeof *c);
    cl_status s = read_file(path, &c->buf, &c->size);
    if (s != CL_OK)
        return s;
    int cap = 0;
    cl_pb_reader r;
    cl_pb_field f;
    int more;
    cl_pb_reader_init(&r, c->buf, c->size, 0, path);
    if (c->size == 0) {
        s = cl_error(CL_ERR_FORMAT, "%s: empty file", path);
        goto fail;
    }
    while ((s = cl_pb_next(&r, &f, &more)) == CL_OK && more) {
        if (f.number != CKPT_VALUE || f.wire != CL_PB_LEN) {
            s = cl_error(CL_ERR_FORMAT,
                         "%s: offset %zu: field %d (wire %d) where a "
                         "Checkpoint holds only values (field 1): not a "
                         "MindSpore checkpoint, or an encrypted one",
                         path, f.offset, f.number, f.wire);
            goto fail;
        }
        if (c->n >= CL_MS_MAX_TENSORS) {
            s = cl_error(CL_ERR_LIMIT, "%s: offset %zu: more than %d tensors",
                         path, f.offset, CL_MS_MAX_TENSORS);
            goto fail;
        }
        if (c->n == cap) {
            int ncap = cap ? cap * 2 : 64;
            cl_ms_tensor *nt =
                cl_alloc((size_t)ncap * sizeof *nt, "checkpoint index");
            if (!nt) {
                s = CL_ERR_NOMEM;
                goto fail;
            }
            if (c->n)
                memcpy(nt, c->t, (size_t)c->n * sizeof *nt);
            cl_free(c->t);
            c->t = nt;
            cap = ncap;
        }
        cl_pb_reader vr;
        cl_pb_reader_sub(&r, &f, &vr);
        if ((s = parse_value(&vr, &c->t[c->n], f.offset)) != CL_OK)
            goto fail;
        c->t[c->n].offset = f.offset;
        c->n++;
    }
    if (s != CL_OK)
        goto fail;
    if ((s = check_unique(c, path)) != CL_OK)
        goto fail;
    return CL_OK;
fail:
    cl_ms_ckpt_close(c);
    return s;
}

void cl_ms_ckpt_close(cl_ms_ckpt *c)
{
    cl_free(c->buf);
    cl_free(c->t);
    memset(c, 0, sizeof *c);
}
