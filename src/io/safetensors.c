/* safetensors: a validating mmap reader and an atomic, ordered writer. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/mem.h"
#include "io/atomic.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "io/strbuf.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
#define CL__ST_ROW(e, name, size) {name, size},
    CL_ST_DTYPE_TABLE(CL__ST_ROW)
#undef CL__ST_ROW
};

const char *cl_st_dtype_name(cl_st_dtype t)
{
    return (unsigned)t < CL_ST_DTYPE_COUNT ? dtypes[t].name : "?";
}

size_t cl_st_dtype_size(cl_st_dtype t)
{
    return (unsigned)t < CL_ST_DTYPE_COUNT ? dtypes[t].size : 0;
}

cl_status cl_st_dtype_parse(const char *s, cl_st_dtype *out)
{
    for (int i = 0; i < CL_ST_DTYPE_COUNT; i++)
        if (strcmp(s, dtypes[i].name) == 0) {
            *out = (cl_st_dtype)i;
            return CL_OK;
        }
    return cl_error(CL_ERR_FORMAT, "unknown safetensors dtype '%.40s'", s);
}

static int host_is_little_endian(void)
{
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* ---- reading ---- */

typedef struct entry {
    const char *name;
    cl_st_dtype dtype;
    cl_shape shape;
    uint64_t begin, end; /* relative to the data buffer */
    size_t numel;
} entry;

typedef struct meta {
    const char *key, *value;
} meta;

struct cl_st_file {
    char *path;
    void *map;
    size_t map_size;
    const unsigned char *buf; /* the data buffer, after the header */
    uint64_t buf_len;
    cl_json_doc *doc; /* owns the strings entries point to */
    entry *t;
    size_t n;
    size_t *by_name; /* indices of t sorted by name, for cl_st_find */
    meta *m;
    size_t n_meta;
};

/* qsort has no context argument, and names point into the JSON doc, so
 * comparisons work on the entries themselves. */
typedef struct sort_item {
    const entry *e;
    size_t idx;
} sort_item;

static int cmp_name(const void *a, const void *b)
{
    const sort_item *x = a, *y = b;
    int c = strcmp(x->e->name, y->e->name);
    if (c)
        return c;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int cmp_offset(const void *a, const void *b)
{
    const sort_item *x = a, *y = b;
    if (x->e->begin != y->e->begin)
        return x->e->begin < y->e->begin ? -1 : 1;
    if (x->e->end != y->e->end)
        return x->e->end < y->e->end ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* One sentence naming the file and the tensor; names are cut at 200 bytes
 * so that a hostile one cannot flood the message. */
#define TERR(f, nm, ...)                                                       \
    cl_error_wrap(cl_error(CL_ERR_FORMAT, __VA_ARGS__),                        \
                  "%s: tensor '%.200s': ", (f)->path, (nm))

static void shape_text(const entry *e, char *buf, size_t n)
{
    cl_shape_str(&e->shape, buf, n);
}

static cl_status parse_u64_pair(cl_st_file *f, const char *nm, const cl_json *v,
                                uint64_t *a, uint64_t *b)
{
    if (!v)
        return TERR(f, nm, "missing 'data_offsets'");
    if (v->type != CL_JSON_ARR || v->count != 2)
        return TERR(f, nm,
                    "'data_offsets' must be an array [begin, end], "
                    "found a %s of %zu",
                    cl_json_type_name(v->type), v->count);
    const cl_json *x = v->child, *y = x->next;
    if (x->type != CL_JSON_NUM || !x->is_int || x->i < 0 ||
        y->type != CL_JSON_NUM || !y->is_int || y->i < 0)
        return TERR(f, nm,
                    "'data_offsets' must hold two non-negative "
                    "integers below 2^63");
    *a = (uint64_t)x->i;
    *b = (uint64_t)y->i;
    return CL_OK;
}

static cl_status parse_entry(cl_st_file *f, const cl_json *v, entry *e)
{
    const char *nm = v->key;
    e->name = nm;
    if (strlen(nm) != v->key_len)
        return TERR(f, nm, "the name contains a NUL character");
    if (v->type != CL_JSON_OBJ)
        return TERR(f, nm, "entry must be an object, found a %s",
                    cl_json_type_name(v->type));
    const cl_json *dt = NULL, *sh = NULL, *off = NULL;
    for (const cl_json *m = v->child; m; m = m->next) {
        if (strcmp(m->key, "dtype") == 0 && !dt)
            dt = m;
        else if (strcmp(m->key, "shape") == 0 && !sh)
            sh = m;
        else if (strcmp(m->key, "data_offsets") == 0 && !off)
            off = m;
        else
            return TERR(f, nm, "unknown or repeated field '%.40s'", m->key);
    }
    if (!dt)
        return TERR(f, nm, "missing 'dtype'");
    if (dt->type != CL_JSON_STR)
        return TERR(f, nm, "'dtype' must be a string, found a %s",
                    cl_json_type_name(dt->type));
    if (cl_st_dtype_parse(dt->str, &e->dtype) != CL_OK)
        return TERR(f, nm, "unknown dtype '%.40s'", dt->str);
    if (!sh)
        return TERR(f, nm, "missing 'shape'");
    if (sh->type != CL_JSON_ARR)
        return TERR(f, nm, "'shape' must be an array, found a %s",
                    cl_json_type_name(sh->type));
    if (sh->count > CL_MAX_DIMS)
        return TERR(f, nm, "%zu dimensions, at most %d are supported",
                    sh->count, CL_MAX_DIMS);
    e->shape.ndim = (int)sh->count;
    uint64_t numel = 1;
    int overflow = 0;
    int k = 0;
    for (const cl_json *d = sh->child; d; d = d->next, k++) {
        if (d->type != CL_JSON_NUM || !d->is_int)
            return TERR(f, nm, "shape[%d] is not an integer", k);
        if (d->i < 0)
            return TERR(f, nm, "shape[%d] is negative (%lld)", k,
                        (long long)d->i);
        e->shape.d[k] = d->i;
        uint64_t dim = (uint64_t)d->i;
        if (dim != 0 && numel > UINT64_MAX / dim)
            overflow = 1;
        else
            numel *= dim;
    }
    /* A zero dimension makes an empty tensor even if others are huge. */
    for (k = 0; k < e->shape.ndim; k++)
        if (e->shape.d[k] == 0)
            overflow = 0, numel = 0;
    uint64_t esz = dtypes[e->dtype].size;
    char sbuf[160];
    shape_text(e, sbuf, sizeof sbuf);
    if (overflow || numel > UINT64_MAX / esz || numel * esz > SIZE_MAX)
        return TERR(f, nm, "shape %s %s overflows a byte count", sbuf,
                    dtypes[e->dtype].name);
    CL_TRY(parse_u64_pair(f, nm, off, &e->begin, &e->end));
    if (e->begin > e->end)
        return TERR(f, nm, "data_offsets [%llu, %llu] end before they begin",
                    (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end > f->buf_len)
        return TERR(f, nm,
                    "data_offsets [%llu, %llu] exceed the %llu-byte "
                    "data buffer",
                    (unsigned long long)e->begin, (unsigned long long)e->end,
                    (unsigned long long)f->buf_len);
    if (e->end - e->begin != numel * esz)
        return TERR(f, nm,
                    "data_offsets [%llu, %llu] hold %llu bytes, shape "
                    "%s %s needs %llu",
                    (unsigned long long)e->begin, (unsigned long long)e->end,
                    (unsigned long long)(e->end - e->begin), sbuf,
                    dtypes[e->dtype].name, (unsigned long long)(numel * esz));
    e->numel = (size_t)numel;
    return CL_OK;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static cl_status parse_metadata(cl_st_file *f, const cl_json *v)
{
    if (v->type != CL_JSON_OBJ)
        return cl_error(CL_ERR_FORMAT,
                        "%s: '__metadata__' must be an object "
                        "of strings, found a %s",
                        f->path, cl_json_type_name(v->type));
    size_t cnt = v->count ? v->count : 1;
    f->m = cl_alloc(cnt * sizeof *f->m, "metadata");
    if (!f->m)
        return CL_ERR_NOMEM;
    for (const cl_json *m = v->child; m; m = m->next) {
        if (m->type != CL_JSON_STR)
            return cl_error(CL_ERR_FORMAT,
                            "%s: __metadata__ '%.200s' must "
                            "be a string, found a %s",
                            f->path, m->key, cl_json_type_name(m->type));
        if (strlen(m->key) != m->key_len || strlen(m->str) != m->len)
            return cl_error(CL_ERR_FORMAT,
                            "%s: __metadata__ '%.200s' contains a NUL "
                            "character",
                            f->path, m->key);
        f->m[f->n_meta].key = m->key;
        f->m[f->n_meta].value = m->str;
        f->n_meta++;
    }
    /* Duplicates by sorting: a hostile header may hold millions of keys. */
    const char **keys = cl_alloc(cnt * sizeof *keys, "metadata keys");
    if (!keys)
        return CL_ERR_NOMEM;
    for (size_t j = 0; j < f->n_meta; j++)
        keys[j] = f->m[j].key;
    qsort(keys, f->n_meta, sizeof *keys, cmp_str);
    cl_status s = CL_OK;
    for (size_t j = 1; j < f->n_meta && s == CL_OK; j++)
        if (strcmp(keys[j], keys[j - 1]) == 0)
            s = cl_error(CL_ERR_FORMAT,
                         "%s: __metadata__ key '%.200s' appears twice", f->path,
                         keys[j]);
    cl_free(keys);
    return s;
}

/* Everything the header claims, checked against itself and the buffer. */
static cl_status validate(cl_st_file *f, const char *hdr, size_t hlen)
{
    cl_status s;
    sort_item *items = NULL;
    /* The format says the header starts with '{'; spaces pad its end. */
    if (hlen == 0 || hdr[0] != '{')
        return cl_error(CL_ERR_FORMAT,
                        "%s: header does not start with '{' "
                        "(not a safetensors file?)",
                        f->path);
    char name[600];
    snprintf(name, sizeof name, "%s: header", f->path);
    CL_TRY(cl_json_parse(&f->doc, hdr, hlen, NULL, name));
    const cl_json *root = cl_json_root(f->doc);
    if (root->type != CL_JSON_OBJ)
        return cl_error(CL_ERR_FORMAT,
                        "%s: header is a JSON %s, expected an "
                        "object",
                        f->path, cl_json_type_name(root->type));
    size_t n = 0;
    const cl_json *md = NULL;
    for (const cl_json *m = root->child; m; m = m->next) {
        if (strcmp(m->key, "__metadata__") == 0) {
            if (md)
                return cl_error(CL_ERR_FORMAT,
                                "%s: '__metadata__' appears "
                                "twice",
                                f->path);
            md = m;
        } else {
            n++;
        }
    }
    if (md)
        CL_TRY(parse_metadata(f, md));
    f->t = cl_alloc_zero((n ? n : 1) * sizeof *f->t, "tensor table");
    f->by_name = cl_alloc((n ? n : 1) * sizeof *f->by_name, "tensor index");
    items = cl_alloc((n ? n : 1) * sizeof *items, "tensor sort");
    if (!f->t || !f->by_name || !items) {
        s = CL_ERR_NOMEM;
        goto fail;
    }
    for (const cl_json *m = root->child; m; m = m->next) {
        if (m == md)
            continue;
        s = parse_entry(f, m, &f->t[f->n]);
        if (s != CL_OK)
            goto fail;
        f->n++;
    }
    for (size_t i = 0; i < n; i++)
        items[i] = (sort_item){&f->t[i], i};
    qsort(items, n, sizeof *items, cmp_name);
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && strcmp(items[i].e->name, items[i - 1].e->name) == 0) {
            s = TERR(f, items[i].e->name,
                     "the name appears twice in the "
                     "header");
            goto fail;
        }
        f->by_name[i] = items[i].idx;
    }
    /* In offset order each tensor must start where the previous ended and
     * the last end where the buffer does: the format forbids holes, so a
     * file cannot hide other content in its data. */
    qsort(items, n, sizeof *items, cmp_offset);
    uint64_t at = 0;
    const entry *prev = NULL;
    for (size_t i = 0; i < n; i++) {
        const entry *e = items[i].e;
        if (e->begin < at) {
            s = TERR(f, e->name,
                     "data_offsets [%llu, %llu] overlap tensor "
                     "'%.200s' [%llu, %llu]",
                     (unsigned long long)e->begin, (unsigned long long)e->end,
                     prev->name, (unsigned long long)prev->begin,
                     (unsigned long long)prev->end);
            goto fail;
        }
        if (e->begin > at) {
            s = TERR(f, e->name,
                     "data_offsets [%llu, %llu] leave a hole of "
                     "%llu bytes after offset %llu",
                     (unsigned long long)e->begin, (unsigned long long)e->end,
                     (unsigned long long)(e->begin - at),
                     (unsigned long long)at);
            goto fail;
        }
        at = e->end;
        if (e->end > e->begin)
            prev = e;
    }
    if (at != f->buf_len) {
        s = cl_error(CL_ERR_FORMAT,
                     "%s: tensors cover %llu bytes of the "
                     "%llu-byte data buffer (%llu trailing "
                     "bytes)",
                     f->path, (unsigned long long)at,
                     (unsigned long long)f->buf_len,
                     (unsigned long long)(f->buf_len - at));
        goto fail;
    }
    cl_free(items);
    return CL_OK;
fail:
    cl_free(items);
    return s;
}

cl_status cl_st_open(cl_st_file **out, const char *path)
{
    cl_status s;
    int fd = -1;
    *out = NULL;
    if (!host_is_little_endian())
        return cl_error(CL_ERR_UNSUPPORTED,
                        "%s: safetensors reading needs a "
                        "little-endian host",
                        path);
    cl_st_file *f = cl_alloc_zero(sizeof *f, "safetensors file");
    if (!f)
        return CL_ERR_NOMEM;
    size_t plen = strlen(path);
    f->path = cl_alloc(plen + 1, "safetensors path");
    if (!f->path) {
        s = CL_ERR_NOMEM;
        goto fail;
    }
    memcpy(f->path, path, plen + 1);
    fd = open(path, O_RDONLY);
    if (fd < 0) {
        s = cl_error(CL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        s = cl_error(CL_ERR_IO, "%s: not a regular file", path);
        goto fail;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8) {
        s = cl_error(CL_ERR_FORMAT,
                     "%s: file is %llu bytes, too short for "
                     "the 8-byte header length",
                     path, (unsigned long long)size);
        goto fail;
    }
    if (size > SIZE_MAX) {
        s = cl_error(CL_ERR_LIMIT, "%s: file too large to map", path);
        goto fail;
    }
    f->map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        s = cl_error(CL_ERR_IO, "%s: cannot map %llu bytes: %s", path,
                     (unsigned long long)size, strerror(errno));
        goto fail;
    }
    f->map_size = (size_t)size;
    close(fd);
    fd = -1;
    const unsigned char *b = f->map;
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--)
        hlen = (hlen << 8) | b[k];
    if (hlen > size - 8) {
        s = cl_error(CL_ERR_FORMAT,
                     "%s: header length %llu exceeds the %llu "
                     "bytes that follow it (truncated or not "
                     "a safetensors file)",
                     path, (unsigned long long)hlen,
                     (unsigned long long)(size - 8));
        goto fail;
    }
    if (hlen > CL_ST_MAX_HEADER) {
        s = cl_error(CL_ERR_LIMIT,
                     "%s: header length %llu exceeds the "
                     "format's limit of %llu bytes",
                     path, (unsigned long long)hlen,
                     (unsigned long long)CL_ST_MAX_HEADER);
        goto fail;
    }
    f->buf = b + 8 + hlen;
    f->buf_len = size - 8 - hlen;
    s = validate(f, (const char *)b + 8, (size_t)hlen);
    if (s != CL_OK)
        goto fail;
    *out = f;
    return CL_OK;
fail:
    if (fd >= 0)
        close(fd);
    cl_st_close(f);
    return s;
}

void cl_st_close(cl_st_file *f)
{
    if (!f)
        return;
    if (f->map)
        munmap(f->map, f->map_size);
    cl_json_free(f->doc);
    cl_free(f->t);
    cl_free(f->by_name);
    cl_free(f->m);
    cl_free(f->path);
    cl_free(f);
}

size_t cl_st_count(const cl_st_file *f)
{
    return f->n;
}

const char *cl_st_name(const cl_st_file *f, size_t i)
{
    CL_ASSERT(i < f->n);
    return f->t[i].name;
}

long cl_st_find(const cl_st_file *f, const char *name)
{
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->t[f->by_name[mid]].name, name);
        if (c == 0)
            return (long)f->by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

void cl_st_info(const cl_st_file *f, size_t i, cl_st_dtype *dtype,
                cl_shape *shape)
{
    CL_ASSERT(i < f->n);
    if (dtype)
        *dtype = f->t[i].dtype;
    if (shape)
        *shape = f->t[i].shape;
}

const void *cl_st_data(const cl_st_file *f, size_t i, size_t *nbytes)
{
    CL_ASSERT(i < f->n);
    if (nbytes)
        *nbytes = (size_t)(f->t[i].end - f->t[i].begin);
    return f->buf + f->t[i].begin;
}

static cl_status check_n(const cl_st_file *f, size_t i, size_t n)
{
    if (n != f->t[i].numel)
        return cl_error(CL_ERR_SHAPE,
                        "%s: tensor '%.200s' has %zu elements, "
                        "the caller expects %zu",
                        f->path, f->t[i].name, f->t[i].numel, n);
    return CL_OK;
}

cl_status cl_st_read_f32(const cl_st_file *f, size_t i, float *dst, size_t n)
{
    CL_ASSERT(i < f->n);
    CL_TRY(check_n(f, i, n));
    if (n == 0)
        return CL_OK; /* dst may be NULL for an empty tensor */
    const unsigned char *p = f->buf + f->t[i].begin;
    switch (f->t[i].dtype) {
    case CL_ST_F32:
        memcpy(dst, p, n * 4);
        return CL_OK;
    case CL_ST_BF16:
        for (size_t k = 0; k < n; k++) {
            uint32_t bits = ((uint32_t)p[2 * k] | (uint32_t)p[2 * k + 1] << 8)
                            << 16;
            memcpy(&dst[k], &bits, 4);
        }
        return CL_OK;
    case CL_ST_F16:
        for (size_t k = 0; k < n; k++)
            dst[k] = cl_f32_from_f16(
                (uint16_t)(p[2 * k] | (unsigned)p[2 * k + 1] << 8));
        return CL_OK;
    case CL_ST_F64:
        for (size_t k = 0; k < n; k++) {
            double d;
            memcpy(&d, p + 8 * k, 8);
            dst[k] = (float)d;
        }
        return CL_OK;
    default:
        return cl_error(CL_ERR_FORMAT,
                        "%s: tensor '%.200s' is %s, expected "
                        "a floating-point dtype (F32, BF16, "
                        "F16, F64)",
                        f->path, f->t[i].name, dtypes[f->t[i].dtype].name);
    }
}

cl_status cl_st_read_i64(const cl_st_file *f, size_t i, int64_t *dst, size_t n)
{
    CL_ASSERT(i < f->n);
    CL_TRY(check_n(f, i, n));
    const unsigned char *p = f->buf + f->t[i].begin;
    cl_st_dtype t = f->t[i].dtype;
    for (size_t k = 0; k < n; k++) {
        switch (t) {
        case CL_ST_I64:
        case CL_ST_U64: {
            int64_t v;
            memcpy(&v, p + 8 * k, 8);
            if (t == CL_ST_U64 && v < 0)
                return cl_error(CL_ERR_FORMAT,
                                "%s: tensor '%.200s'[%zu] "
                                "exceeds 2^63-1",
                                f->path, f->t[i].name, k);
            dst[k] = v;
            break;
        }
        case CL_ST_I32: {
            int32_t v;
            memcpy(&v, p + 4 * k, 4);
            dst[k] = v;
            break;
        }
        case CL_ST_U32: {
            uint32_t v;
            memcpy(&v, p + 4 * k, 4);
            dst[k] = v;
            break;
        }
        case CL_ST_I16: {
            int16_t v;
            memcpy(&v, p + 2 * k, 2);
            dst[k] = v;
            break;
        }
        case CL_ST_U16: {
            uint16_t v;
            memcpy(&v, p + 2 * k, 2);
            dst[k] = v;
            break;
        }
        case CL_ST_I8:
            dst[k] = (int8_t)p[k];
            break;
        case CL_ST_U8:
        case CL_ST_BOOL:
            dst[k] = p[k];
            break;
        default:
            return cl_error(CL_ERR_FORMAT,
                            "%s: tensor '%.200s' is %s, "
                            "expected an integer dtype",
                            f->path, f->t[i].name, dtypes[t].name);
        }
    }
    return CL_OK;
}

const char *cl_st_metadata(const cl_st_file *f, const char *key)
{
    for (size_t j = 0; j < f->n_meta; j++)
        if (strcmp(f->m[j].key, key) == 0)
            return f->m[j].value;
    return NULL;
}

size_t cl_st_metadata_count(const cl_st_file *f)
{
    return f->n_meta;
}

const char *cl_st_metadata_key(const cl_st_file *f, size_t i)
{
    CL_ASSERT(i < f->n_meta);
    return f->m[i].key;
}

const char *cl_st_metadata_value(const cl_st_file *f, size_t i)
{
    CL_ASSERT(i < f->n_meta);
    return f->m[i].value;
}

/* ---- writing ---- */

typedef struct wtensor {
    char *name;
    cl_st_dtype dtype;
    cl_shape shape;
    const void *data;
    size_t bytes;
} wtensor;

struct cl_st_writer {
    wtensor *t;
    size_t n, cap;
    char **mkey, **mval;
    size_t n_meta, cap_meta;
};

static char *str_dup(const char *s, const char *what)
{
    size_t n = strlen(s);
    char *p = cl_alloc(n + 1, what);
    if (p)
        memcpy(p, s, n + 1);
    return p;
}

/* Grows *arr (elements of `size` bytes) to hold one more than *cap. */
static cl_status grow(void **arr, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return CL_OK;
    size_t nc = *cap ? *cap * 2 : 16, bytes;
    CL_TRY(cl_mul_size(nc, size, &bytes, "safetensors writer table"));
    void *p = cl_alloc(bytes, "safetensors writer table");
    if (!p)
        return CL_ERR_NOMEM;
    if (n)
        memcpy(p, *arr, n * size);
    cl_free(*arr);
    *arr = p;
    *cap = nc;
    return CL_OK;
}

cl_status cl_st_writer_new(cl_st_writer **out)
{
    *out = cl_alloc_zero(sizeof **out, "safetensors writer");
    return *out ? CL_OK : CL_ERR_NOMEM;
}

void cl_st_writer_free(cl_st_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n; i++)
        cl_free(w->t[i].name);
    for (size_t i = 0; i < w->n_meta; i++) {
        cl_free(w->mkey[i]);
        cl_free(w->mval[i]);
    }
    cl_free(w->t);
    cl_free(w->mkey);
    cl_free(w->mval);
    cl_free(w);
}

cl_status cl_st_writer_add(cl_st_writer *w, const char *name, cl_st_dtype dtype,
                           cl_shape shape, const void *data)
{
    if ((unsigned)dtype >= CL_ST_DTYPE_COUNT)
        return cl_error(CL_ERR_ARG,
                        "safetensors writer: tensor '%.200s': "
                        "invalid dtype %d",
                        name, (int)dtype);
    if (name[0] == '\0' || strcmp(name, "__metadata__") == 0)
        return cl_error(CL_ERR_ARG,
                        "safetensors writer: '%s' cannot name a "
                        "tensor",
                        name);
    if (shape.ndim < 0 || shape.ndim > CL_MAX_DIMS)
        return cl_error(CL_ERR_ARG,
                        "safetensors writer: tensor '%.200s': "
                        "%d dimensions",
                        name, shape.ndim);
    size_t bytes = cl_st_dtype_size(dtype);
    for (int k = 0; k < shape.ndim; k++) {
        if (shape.d[k] < 0)
            return cl_error(CL_ERR_ARG,
                            "safetensors writer: tensor '%.200s': "
                            "dimension %d is negative",
                            name, k);
        CL_TRY(cl_mul_size(bytes, (size_t)shape.d[k], &bytes, name));
    }
    if (bytes > 0 && !data)
        return cl_error(CL_ERR_ARG,
                        "safetensors writer: tensor '%.200s' has "
                        "no data",
                        name);
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return cl_error(CL_ERR_ARG,
                            "safetensors writer: tensor '%.200s' "
                            "added twice",
                            name);
    CL_TRY(grow((void **)&w->t, &w->cap, w->n, sizeof *w->t));
    char *nm = str_dup(name, "tensor name");
    if (!nm)
        return CL_ERR_NOMEM;
    w->t[w->n++] = (wtensor){nm, dtype, shape, data, bytes};
    return CL_OK;
}

cl_status cl_st_writer_meta(cl_st_writer *w, const char *key, const char *value)
{
    char *v = str_dup(value, "metadata value");
    if (!v)
        return CL_ERR_NOMEM;
    for (size_t i = 0; i < w->n_meta; i++)
        if (strcmp(w->mkey[i], key) == 0) {
            cl_free(w->mval[i]);
            w->mval[i] = v;
            return CL_OK;
        }
    size_t cap = w->cap_meta;
    cl_status s = grow((void **)&w->mkey, &cap, w->n_meta, sizeof(char *));
    if (s == CL_OK) {
        cap = w->cap_meta;
        s = grow((void **)&w->mval, &cap, w->n_meta, sizeof(char *));
    }
    char *k = s == CL_OK ? str_dup(key, "metadata key") : NULL;
    if (!k) {
        cl_free(v);
        return s != CL_OK ? s : CL_ERR_NOMEM;
    }
    w->cap_meta = cap;
    w->mkey[w->n_meta] = k;
    w->mval[w->n_meta] = v;
    w->n_meta++;
    return CL_OK;
}

static cl_status build_header(const cl_st_writer *w, cl_strbuf *h)
{
    cl_strbuf_addc(h, '{');
    if (w->n_meta) {
        cl_strbuf_adds(h, "\"__metadata__\":{");
        for (size_t i = 0; i < w->n_meta; i++) {
            if (i)
                cl_strbuf_addc(h, ',');
            cl_strbuf_add_json_str(h, w->mkey[i], strlen(w->mkey[i]));
            cl_strbuf_addc(h, ':');
            cl_strbuf_add_json_str(h, w->mval[i], strlen(w->mval[i]));
        }
        cl_strbuf_addc(h, '}');
    }
    uint64_t at = 0;
    for (size_t i = 0; i < w->n; i++) {
        const wtensor *t = &w->t[i];
        if (i || w->n_meta)
            cl_strbuf_addc(h, ',');
        cl_strbuf_add_json_str(h, t->name, strlen(t->name));
        cl_strbuf_addf(h, ":{\"dtype\":\"%s\",\"shape\":[",
                       cl_st_dtype_name(t->dtype));
        for (int k = 0; k < t->shape.ndim; k++)
            cl_strbuf_addf(h, "%s%lld", k ? "," : "", (long long)t->shape.d[k]);
        cl_strbuf_addf(h, "],\"data_offsets\":[%llu,%llu]}",
                       (unsigned long long)at,
                       (unsigned long long)(at + t->bytes));
        at += t->bytes;
    }
    cl_strbuf_addc(h, '}');
    while (!h->failed && h->len % 8 != 0)
        cl_strbuf_addc(h, ' ');
    if (h->failed)
        return CL_ERR_NOMEM; /* the failed append set the detail */
    return CL_OK;
}

cl_status cl_st_writer_save(cl_st_writer *w, const char *path)
{
    cl_status s;
    cl_strbuf h;
    cl_atomic_file af;
    int opened = 0;
    cl_strbuf_init(&h);
    if (!host_is_little_endian()) {
        s = cl_error(CL_ERR_UNSUPPORTED,
                     "%s: safetensors writing needs a "
                     "little-endian host",
                     path);
        goto fail;
    }
    s = build_header(w, &h);
    if (s != CL_OK)
        goto fail;
    unsigned char len8[8];
    uint64_t hl = h.len;
    for (int k = 0; k < 8; k++)
        len8[k] = (unsigned char)(hl >> (8 * k));
    s = cl_atomic_open(&af, path);
    if (s != CL_OK)
        goto fail;
    opened = 1;
    s = cl_atomic_write(&af, len8, 8);
    if (s == CL_OK)
        s = cl_atomic_write(&af, h.data, h.len);
    for (size_t i = 0; s == CL_OK && i < w->n; i++)
        if (w->t[i].bytes)
            s = cl_atomic_write(&af, w->t[i].data, w->t[i].bytes);
    if (s != CL_OK)
        goto fail;
    opened = 0;
    s = cl_atomic_commit(&af);
    if (s != CL_OK)
        goto fail;
    cl_strbuf_free(&h);
    return CL_OK;
fail:
    if (opened)
        cl_atomic_abort(&af);
    cl_strbuf_free(&h);
    return s;
}
