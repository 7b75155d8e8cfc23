/* Reader of PyTorch checkpoints in the zip format torch.save writes since
 * 1.6: data.pkl found in the zip (zip.c) and run by the pickle machine
 * (pickle.c), the state_dict taken from what it built, and strided,
 * converting reads of its tensors. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "interop/interop.h"
#include "interop/le.h"
#include "interop/pickle.h"
#include "interop/zip.h"
#include "tensor/tensor.h"

/* Bounds on what a state_dict needs; a file past them is refused. */
#define PTH_MAX_FILE ((uint64_t)1 << 36) /* 64 GiB */
#define PTH_MAX_NAME 127                 /* bytes of a tensor name */
/* data.pkl of a resnet152 state_dict is 115 KB; the cap keeps every
 * object, memo and item count (at most one per byte) far from 2^31. */
#define PTH_MAX_PICKLE ((uint64_t)1 << 28)

/* One tensor of the state_dict: its name (wrappers' prefixes removed) and
 * the view the pickle built (one view may have several names). */
typedef struct pth_item {
    char name[PTH_MAX_NAME + 1];
    int32_t t;
} pth_item;

struct cl_pth {
    char path[512];
    uint8_t *buf;
    size_t size;
    cl_zip z;
    const char *prefix; /* "<archive>/" of data.pkl */
    size_t prefix_len;
    cl_pickle pk;  /* its objects are freed once the tensors are listed */
    pth_item *out; /* the tensors of the state_dict, in pickle order */
    int32_t nout;
    char where[160];
};

/* ---- the state_dict ---------------------------------------------------- */

static int str_is(const cl_pk_obj *o, const char *s)
{
    return o->kind == CL_PK_STR && o->len == strlen(s) &&
           memcmp(o->s, s, o->len) == 0;
}

/* Does the dict hold at least one tensor value? */
static int has_tensor(const cl_pth *p, const cl_pk_obj *d)
{
    for (int32_t k = 1; k < d->n; k += 2)
        if (p->pk.o[d->items[k]].kind == CL_PK_TENSOR)
            return 1;
    return 0;
}

/* The state_dict: the root dict itself, or the value of one of the keys
 * training scripts use for it. */
static cl_status find_state_dict(cl_pth *p, int32_t root, const cl_pk_obj **sd)
{
    static const char *const keys[] = {"state_dict", "model",
                                       "model_state_dict", "net", NULL};
    const cl_pk_obj *r = &p->pk.o[root];
    char what[256];
    if (r->kind != CL_PK_DICT)
        return cl_error(CL_ERR_UNSUPPORTED,
                        "%s: the pickle holds %s, not a state_dict (a dict of "
                        "tensors); save model.state_dict() instead",
                        p->path, cl_pickle_describe(r, what, sizeof what));
    if (has_tensor(p, r) || r->n == 0) {
        *sd = r;
        snprintf(p->where, sizeof p->where, "the state_dict at the root");
        return CL_OK;
    }
    for (int q = 0; keys[q]; q++)
        for (int32_t k = 0; k + 1 < r->n; k += 2) {
            const cl_pk_obj *v = &p->pk.o[r->items[k + 1]];
            if (!str_is(&p->pk.o[r->items[k]], keys[q]))
                continue;
            if (v->kind != CL_PK_DICT)
                return cl_error(CL_ERR_UNSUPPORTED,
                                "%s: '%s' holds %s, not a state_dict (a dict "
                                "of tensors)",
                                p->path, keys[q],
                                cl_pickle_describe(v, what, sizeof what));
            *sd = v;
            snprintf(p->where, sizeof p->where, "the state_dict under '%s'",
                     keys[q]);
            return CL_OK;
        }
    /* Tensors torch rebuilds by callables outside the subset (sparse,
     * quantized): the dict is a state_dict, and collect() names them. */
    for (int32_t k = 1; k < r->n; k += 2) {
        const cl_pk_obj *v = &p->pk.o[r->items[k]];
        if (v->kind == CL_PK_OPAQUE && v->len >= 5 &&
            memcmp(v->s, "torch", 5) == 0) {
            *sd = r;
            snprintf(p->where, sizeof p->where, "the state_dict at the root");
            return CL_OK;
        }
    }
    return cl_error(CL_ERR_FORMAT,
                    "%s: a dict without tensors and without a 'state_dict' "
                    "or 'model' entry: not a state_dict or training "
                    "checkpoint",
                    p->path);
}

static cl_status collect(cl_pth *p, const cl_pk_obj *sd)
{
    int32_t cap = 0;
    for (int32_t k = 0; k + 1 < sd->n; k += 2) {
        const cl_pk_obj *key = &p->pk.o[sd->items[k]],
                        *val = &p->pk.o[sd->items[k + 1]];
        char what[256];
        if (key->kind != CL_PK_STR)
            return cl_error(CL_ERR_FORMAT,
                            "%s: a state_dict key is %s, not a string", p->path,
                            cl_pickle_describe(key, what, sizeof what));
        const char *s = key->s;
        size_t len = key->len;
        /* DataParallel / DistributedDataParallel and torch.compile
         * wrappers prefix every name. */
        static const char *const wrap[] = {"module.", "_orig_mod.", NULL};
        for (int w = 0; wrap[w]; w++) {
            size_t wl = strlen(wrap[w]);
            if (len > wl && memcmp(s, wrap[w], wl) == 0) {
                s += wl;
                len -= wl;
            }
        }
        if (len == 0 || len > PTH_MAX_NAME || memchr(s, 0, len))
            return cl_error(CL_ERR_FORMAT,
                            "%s: state_dict key '%.*s' is empty, longer than "
                            "%d bytes or holds a NUL",
                            p->path, (int)(len > 60 ? 60 : len), s,
                            PTH_MAX_NAME);
        if (val->kind != CL_PK_TENSOR)
            return cl_error(CL_ERR_UNSUPPORTED,
                            "%s: state_dict entry '%.*s' is %s, not a tensor",
                            p->path, (int)len, s,
                            cl_pickle_describe(val, what, sizeof what));
        for (int32_t j = 0; j < p->nout; j++) {
            const char *name = p->out[j].name;
            if (strlen(name) == len && memcmp(name, s, len) == 0)
                return cl_error(CL_ERR_FORMAT,
                                "%s: state_dict name '%.*s' appears twice "
                                "(after removing 'module.')",
                                p->path, (int)len, s);
        }
        if (p->nout == cap) {
            /* Grown as tensors are found: at most one per dict entry. */
            int32_t c = cap ? 2 * cap : 64;
            pth_item *o = realloc(p->out, (size_t)c * sizeof *o);
            if (!o)
                return cl_error(CL_ERR_NOMEM, "%s: tensor list", p->path);
            p->out = o;
            cap = c;
        }
        /* One view may have two names: the items are named, not the
         * views. */
        pth_item *it = &p->out[p->nout++];
        memcpy(it->name, s, len);
        it->name[len] = 0;
        it->t = val->tensor;
    }
    return CL_OK;
}

/* ---- the public reader ------------------------------------------------- */

static cl_status read_all(cl_pth *p)
{
    FILE *f = fopen(p->path, "rb");
    if (!f)
        return cl_error(CL_ERR_IO, "%s: cannot open (%s)", p->path,
                        strerror(errno));
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return cl_error(CL_ERR_IO, "%s: cannot seek", p->path);
    }
    if ((uint64_t)n > PTH_MAX_FILE) {
        fclose(f);
        return cl_error(CL_ERR_LIMIT, "%s: larger than 64 GiB", p->path);
    }
    p->size = (size_t)n;
    p->buf = malloc(p->size + 1);
    if (!p->buf) {
        fclose(f);
        return cl_error(CL_ERR_NOMEM, "%s: %zu bytes", p->path, p->size);
    }
    size_t got = fread(p->buf, 1, p->size, f);
    fclose(f);
    if (got != p->size)
        return cl_error(CL_ERR_IO, "%s: short read", p->path);
    return CL_OK;
}

/* The pickle machine's storages: the zip entries <archive>/data/<key>. */
static const uint8_t *storage(void *ctx, const char *key, size_t key_len,
                              uint64_t *size)
{
    const cl_pth *p = ctx;
    char name[80];
    int len = snprintf(name, sizeof name, "data/%.*s", (int)key_len, key);
    if (len < 0 || (size_t)len >= sizeof name)
        return NULL;
    const cl_zip_entry *e =
        cl_zip_find(&p->z, p->prefix, p->prefix_len, name, (size_t)len);
    if (!e)
        return NULL;
    *size = e->size;
    return e->data;
}

static cl_status parse(cl_pth *p)
{
    const uint8_t *b = p->buf;
    if (p->size >= 2 && b[0] == 0x80 && b[1] <= 5)
        return cl_error(CL_ERR_UNSUPPORTED,
                        "%s: a PyTorch checkpoint in the legacy format of "
                        "torch < 1.6 (a bare pickle); re-save it with "
                        "torch.save in PyTorch 1.6 or later",
                        p->path);
    CL_TRY(cl_zip_read(&p->z, p->buf, p->size, p->path));
    /* torch.save puts everything under one folder, named after the file
     * (torch 1.6-1.13) or "archive" (later): the one holding data.pkl. */
    const cl_zip_entry *pkl = NULL;
    for (size_t k = 0; k < p->z.n; k++) {
        const cl_zip_entry *e = &p->z.e[k];
        const char *slash = memchr(e->name, '/', e->name_len);
        if (slash && e->name_len - (size_t)(slash - e->name) == 9 &&
            memcmp(slash, "/data.pkl", 9) == 0) {
            if (pkl)
                return cl_error(CL_ERR_FORMAT, "%s: zip holds two data.pkl",
                                p->path);
            pkl = e;
            p->prefix = e->name;
            p->prefix_len = (size_t)(slash - e->name) + 1;
        }
    }
    if (!pkl)
        return cl_error(CL_ERR_FORMAT,
                        "%s: a zip without <folder>/data.pkl: not a PyTorch "
                        "checkpoint",
                        p->path);
    if (pkl->size > PTH_MAX_PICKLE)
        return cl_error(CL_ERR_LIMIT,
                        "%s: data.pkl is %llu bytes, more than the 256 MiB "
                        "a state_dict's pickle needs",
                        p->path, (unsigned long long)pkl->size);
    const cl_zip_entry *bo =
        cl_zip_find(&p->z, p->prefix, p->prefix_len, "byteorder", 9);
    if (bo && !(bo->size == 6 && memcmp(bo->data, "little", 6) == 0))
        return cl_error(CL_ERR_UNSUPPORTED,
                        "%s: tensors stored big-endian (byteorder entry)",
                        p->path);
    CL_TRY(cl_pickle_run(&p->pk, pkl->data, (size_t)pkl->size, p->path, storage,
                         p));
    const cl_pk_obj *sd = NULL;
    CL_TRY(find_state_dict(p, p->pk.root, &sd));
    return collect(p, sd);
}

cl_status cl_pth_open(cl_pth **out, const char *path)
{
    *out = NULL;
    cl_pth *p = calloc(1, sizeof *p);
    if (!p)
        return cl_error(CL_ERR_NOMEM, "%s: reader", path);
    snprintf(p->path, sizeof p->path, "%s", path);
    cl_status s = read_all(p);
    if (s == CL_OK)
        s = parse(p);
    /* The pickle's objects are not needed once the tensors are listed. */
    cl_pickle_free_objects(&p->pk);
    if (s != CL_OK) {
        cl_pth_close(p);
        return s;
    }
    *out = p;
    return CL_OK;
}

void cl_pth_close(cl_pth *p)
{
    if (!p)
        return;
    cl_pickle_free(&p->pk);
    free(p->out);
    cl_zip_free(&p->z);
    free(p->buf);
    free(p);
}

/* The view of the state_dict's tensor i. */
static const cl_pk_tensor *view(const cl_pth *p, size_t i)
{
    return &p->pk.t[p->out[i].t];
}

size_t cl_pth_count(const cl_pth *p)
{
    return (size_t)p->nout;
}

const char *cl_pth_name(const cl_pth *p, size_t i)
{
    return p->out[i].name;
}

cl_shape cl_pth_shape(const cl_pth *p, size_t i)
{
    return view(p, i)->shape;
}

const char *cl_pth_dtype(const cl_pth *p, size_t i)
{
    return cl_pk_dtypes[view(p, i)->dtype].name;
}

const char *cl_pth_where(const cl_pth *p)
{
    return p->where;
}

long cl_pth_find(const cl_pth *p, const char *name)
{
    for (int32_t k = 0; k < p->nout; k++)
        if (strcmp(p->out[k].name, name) == 0)
            return k;
    return -1;
}

/* Element at storage index k, as a double (exact for every dtype but
 * int64 past 2^53, which read_i64 reads directly). */
static double elem(const cl_pk_tensor *t, int64_t k)
{
    const uint8_t *q =
        t->data + (size_t)k * (size_t)cl_pk_dtypes[t->dtype].size;
    switch (t->dtype) {
    case CL_PK_F32: {
        float f;
        memcpy(&f, q, 4);
        return f;
    }
    case CL_PK_F16:
        return cl_f32_from_f16(cl_le16(q));
    case CL_PK_BF16:
        return cl_f32_from_bf16(cl_le16(q));
    case CL_PK_F64: {
        double d;
        memcpy(&d, q, 8);
        return d;
    }
    case CL_PK_I64:
        return (double)(int64_t)cl_le64(q);
    default:
        return (double)(int32_t)cl_le32(q);
    }
}

/* Calls visit(storage index, output index) over the view, row-major. */
#define PTH_WALK(t, body)                                                      \
    do {                                                                       \
        int64_t idx_[CL_MAX_DIMS] = {0}, at_ = (t)->offset;                    \
        int nd_ = (t)->shape.ndim;                                             \
        for (size_t o_ = 0; o_ < n; o_++) {                                    \
            int64_t src = at_;                                                 \
            size_t out_i = o_;                                                 \
            body;                                                              \
            for (int k_ = nd_ - 1; k_ >= 0; k_--) {                            \
                if (++idx_[k_] < (t)->shape.d[k_]) {                           \
                    at_ += (t)->stride[k_];                                    \
                    break;                                                     \
                }                                                              \
                at_ -= (t)->stride[k_] * (idx_[k_] - 1);                       \
                idx_[k_] = 0;                                                  \
            }                                                                  \
        }                                                                      \
    } while (0)

static cl_status check_n(const cl_pth *p, size_t i, size_t n)
{
    const cl_pk_tensor *t = view(p, i);
    if ((int64_t)n != cl_shape_numel(&t->shape))
        return cl_error(CL_ERR_SHAPE,
                        "%s: tensor '%s' has %lld elements, "
                        "%zu asked for",
                        p->path, p->out[i].name,
                        (long long)cl_shape_numel(&t->shape), n);
    return CL_OK;
}

cl_status cl_pth_read_f32(const cl_pth *p, size_t i, float *dst, size_t n)
{
    const cl_pk_tensor *t = view(p, i);
    CL_TRY(check_n(p, i, n));
    if (t->dtype == CL_PK_I64 || t->dtype == CL_PK_I32)
        return cl_error(CL_ERR_FORMAT,
                        "%s: tensor '%s' is %s, not floating-point", p->path,
                        p->out[i].name, cl_pk_dtypes[t->dtype].name);
    PTH_WALK(t, dst[out_i] = (float)elem(t, src));
    return CL_OK;
}

cl_status cl_pth_read_i64(const cl_pth *p, size_t i, int64_t *dst, size_t n)
{
    const cl_pk_tensor *t = view(p, i);
    CL_TRY(check_n(p, i, n));
    if (t->dtype != CL_PK_I64 && t->dtype != CL_PK_I32)
        return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' is %s, not an integer",
                        p->path, p->out[i].name, cl_pk_dtypes[t->dtype].name);
    if (t->dtype == CL_PK_I64)
        PTH_WALK(t, dst[out_i] = (int64_t)cl_le64(t->data + 8 * (size_t)src));
    else
        PTH_WALK(t, dst[out_i] = (int32_t)cl_le32(t->data + 4 * (size_t)src));
    return CL_OK;
}
