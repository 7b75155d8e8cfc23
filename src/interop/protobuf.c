/* Protocol Buffers wire format: writer and bounds-checked reader. */
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "interop/protobuf.h"

void cl_pb_writer_init(cl_pb_writer *w)
{
    memset(w, 0, sizeof *w);
}

void cl_pb_writer_free(cl_pb_writer *w)
{
    cl_free(w->p);
    memset(w, 0, sizeof *w);
}

static int reserve(cl_pb_writer *w, size_t extra)
{
    if (w->err != CL_OK)
        return 0;
    if (extra > SIZE_MAX / 4 - w->n) {
        w->err = cl_error(CL_ERR_LIMIT, "protobuf message too large");
        return 0;
    }
    if (w->n + extra <= w->cap)
        return 1;
    size_t cap = w->cap ? w->cap : 256;
    while (cap < w->n + extra)
        cap *= 2;
    uint8_t *p = cl_alloc(cap, "protobuf message");
    if (!p) {
        w->err = CL_ERR_NOMEM;
        return 0;
    }
    if (w->n)
        memcpy(p, w->p, w->n);
    cl_free(w->p);
    w->p = p;
    w->cap = cap;
    return 1;
}

static void raw_varint(cl_pb_writer *w, uint64_t v)
{
    if (!reserve(w, 10))
        return;
    do {
        uint8_t b = (uint8_t)(v & 0x7f);
        v >>= 7;
        w->p[w->n++] = (uint8_t)(b | (v ? 0x80 : 0));
    } while (v);
}

static void key(cl_pb_writer *w, int field, int wire)
{
    raw_varint(w, ((uint64_t)field << 3) | (uint64_t)wire);
}

void cl_pb_put_varint(cl_pb_writer *w, int field, uint64_t v)
{
    key(w, field, CL_PB_VARINT);
    raw_varint(w, v);
}

void cl_pb_put_int64(cl_pb_writer *w, int field, int64_t v)
{
    cl_pb_put_varint(w, field, (uint64_t)v);
}

void cl_pb_put_len_prefix(cl_pb_writer *w, int field, size_t n)
{
    key(w, field, CL_PB_LEN);
    raw_varint(w, (uint64_t)n);
}

void cl_pb_put_bytes(cl_pb_writer *w, int field, const void *p, size_t n)
{
    cl_pb_put_len_prefix(w, field, n);
    if (n && reserve(w, n)) {
        memcpy(w->p + w->n, p, n);
        w->n += n;
    }
}

void cl_pb_put_string(cl_pb_writer *w, int field, const char *s)
{
    cl_pb_put_bytes(w, field, s, strlen(s));
}

void cl_pb_put_float(cl_pb_writer *w, int field, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    key(w, field, CL_PB_FIXED32);
    if (!reserve(w, 4))
        return;
    for (int i = 0; i < 4; i++)
        w->p[w->n++] = (uint8_t)(u >> (8 * i));
}

void cl_pb_put_message(cl_pb_writer *w, int field, const cl_pb_writer *sub)
{
    if (sub->err != CL_OK && w->err == CL_OK) {
        w->err = sub->err;
        return;
    }
    cl_pb_put_bytes(w, field, sub->p, sub->n);
}

/* ---- reading ---------------------------------------------------------- */

void cl_pb_reader_init(cl_pb_reader *r, const void *p, size_t n, size_t base,
                       const char *file)
{
    r->p = p;
    r->n = n;
    r->pos = 0;
    r->base = base;
    r->file = file;
}

void cl_pb_reader_sub(const cl_pb_reader *r, const cl_pb_field *f,
                      cl_pb_reader *sub)
{
    cl_pb_reader_init(sub, f->ptr, f->len, r->base + (size_t)(f->ptr - r->p),
                      r->file);
}

cl_status cl_pb_read_varint(cl_pb_reader *r, uint64_t *out)
{
    uint64_t v = 0;
    size_t start = r->pos;
    for (int i = 0; i < 10; i++) {
        if (r->pos >= r->n)
            return cl_error(CL_ERR_FORMAT,
                            "%s: offset %zu: varint runs past the end of "
                            "its message (truncated file?)",
                            r->file, r->base + start);
        uint8_t b = r->p[r->pos++];
        /* The tenth byte may only carry bit 63. */
        if (i == 9 && (b & 0xfe))
            break;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *out = v;
            return CL_OK;
        }
    }
    return cl_error(CL_ERR_FORMAT, "%s: offset %zu: varint longer than 64 bits",
                    r->file, r->base + start);
}

cl_status cl_pb_next(cl_pb_reader *r, cl_pb_field *f, int *more)
{
    *more = 0;
    if (r->pos >= r->n)
        return CL_OK;
    memset(f, 0, sizeof *f);
    f->offset = r->base + r->pos;
    uint64_t k;
    cl_status s = cl_pb_read_varint(r, &k);
    if (s != CL_OK)
        return s;
    uint64_t number = k >> 3;
    if (number == 0 || number > 536870911u)
        return cl_error(CL_ERR_FORMAT, "%s: offset %zu: field number %llu",
                        r->file, f->offset, (unsigned long long)number);
    f->number = (int)number;
    f->wire = (int)(k & 7);
    switch (f->wire) {
    case CL_PB_VARINT:
        if ((s = cl_pb_read_varint(r, &f->v)) != CL_OK)
            return s;
        *more = 1;
        return CL_OK;
    case CL_PB_FIXED64:
    case CL_PB_FIXED32: {
        size_t w = f->wire == CL_PB_FIXED64 ? 8 : 4;
        if (r->n - r->pos < w)
            return cl_error(CL_ERR_FORMAT,
                            "%s: offset %zu: fixed-width field %d runs past "
                            "the end of its message (truncated file?)",
                            r->file, f->offset, f->number);
        for (size_t i = 0; i < w; i++)
            f->v |= (uint64_t)r->p[r->pos + i] << (8 * i);
        r->pos += w;
        *more = 1;
        return CL_OK;
    }
    case CL_PB_LEN: {
        uint64_t len;
        if ((s = cl_pb_read_varint(r, &len)) != CL_OK)
            return s;
        if (len > r->n - r->pos)
            return cl_error(CL_ERR_FORMAT,
                            "%s: offset %zu: field %d claims %llu bytes, "
                            "only %zu remain in its message (truncated or "
                            "corrupt file)",
                            r->file, f->offset, f->number,
                            (unsigned long long)len, r->n - r->pos);
        f->ptr = r->p + r->pos;
        f->len = (size_t)len;
        r->pos += (size_t)len;
        *more = 1;
        return CL_OK;
    }
    default:
        return cl_error(CL_ERR_FORMAT,
                        "%s: offset %zu: field %d has wire type %d (groups "
                        "and unknown types are not read)",
                        r->file, f->offset, f->number, f->wire);
    }
}
