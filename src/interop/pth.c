/* Reader of PyTorch checkpoints in the zip format torch.save writes since
 * 1.6: a bounded zip reader of stored entries, a pickle machine for the
 * subset that state_dicts use, and strided, converting reads of the
 * tensors it finds.  Nothing in the pickle is ever executed: globals are
 * names, and only a fixed list of them means anything. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/error.h"
#include "interop/interop.h"
#include "tensor/tensor.h"

/* Bounds on what a state_dict needs; a file past them is refused. */
#define PTH_MAX_FILE ((uint64_t)1 << 36) /* 64 GiB */
#define PTH_MAX_ENTRIES 1000000          /* zip entries */
#define PTH_MAX_STACK (1 << 20)          /* pickle stack depth */
#define PTH_MAX_NUMEL ((int64_t)1 << 40) /* elements of one tensor */
#define PTH_MAX_NAME 127                 /* bytes of a tensor name */
/* data.pkl of a resnet152 state_dict is 115 KB; the cap keeps every
 * object, memo and item count (at most one per byte) far from 2^31. */
#define PTH_MAX_PICKLE ((uint64_t)1 << 28)

/* ---- the zip container -------------------------------------------------- */

typedef struct zentry {
    const char *name; /* into the central directory, not terminated */
    size_t name_len;
    const uint8_t *data;
    uint64_t size;
} zentry;

static uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p)
{
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

/* ---- pickle objects ------------------------------------------------------ */

typedef enum pkind {
    P_NONE,
    P_BOOL,
    P_INT,
    P_FLOAT,
    P_STR,
    P_TUPLE,
    P_LIST,
    P_DICT,
    P_GLOBAL,
    P_STORAGE,
    P_TENSOR,
    P_OPAQUE /* an object built by a callable outside the subset */
} pkind;

static const char *const kind_names[] = {
    "None", "bool", "int",    "float",   "str",    "tuple",
    "list", "dict", "global", "storage", "tensor", "object"};

/* Storage types torch.save names by their legacy classes. */
typedef enum pdtype { D_F32, D_F16, D_BF16, D_F64, D_I64, D_I32 } pdtype;

static const struct {
    const char *cls;
    const char *name;
    int size;
} dtypes[] = {
    {"FloatStorage", "float32", 4},     {"HalfStorage", "float16", 2},
    {"BFloat16Storage", "bfloat16", 2}, {"DoubleStorage", "float64", 8},
    {"LongStorage", "int64", 8},        {"IntStorage", "int32", 4}};

typedef struct pobj {
    uint8_t kind;
    uint8_t dtype; /* P_STORAGE */
    int64_t i;     /* P_INT, P_BOOL; P_STORAGE: elements */
    double f;      /* P_FLOAT */
    const char *s; /* P_STR; P_GLOBAL, P_OPAQUE: module */
    uint32_t len;
    const char *s2; /* P_GLOBAL, P_OPAQUE: name */
    uint32_t len2;
    const uint8_t *data; /* P_STORAGE */
    int32_t *items;      /* P_TUPLE, P_LIST; P_DICT: key, value pairs */
    int32_t n, cap;
    int32_t tensor; /* P_TENSOR: index into the tensor table */
} pobj;

typedef struct ptensor {
    char name[PTH_MAX_NAME + 1];
    uint8_t dtype;
    const uint8_t *data; /* the storage */
    int64_t storage_numel;
    int64_t offset;
    cl_shape shape;
    int64_t stride[CL_MAX_DIMS];
} ptensor;

struct cl_pth {
    char path[512];
    uint8_t *buf;
    size_t size;
    zentry *z;
    size_t nz;
    const char *prefix; /* "<archive>/" of data.pkl */
    size_t prefix_len;
    pobj *o;
    int32_t no, co;
    ptensor *t; /* every tensor the pickle built */
    int32_t nt, ct;
    int32_t *out; /* the tensors of the state_dict, in pickle order */
    int32_t nout;
    char where[160];
};

static const char *dtype_name(int d)
{
    return dtypes[d].name;
}

/* ---- zip ------------------------------------------------------------------
 */

/* Value of a zip64 extended-information field for a central-directory
 * field that is 0xFFFFFFFF; fields come in the order usize, csize, offset
 * and only those saturated are present. */
static int zip64_extra(const uint8_t *ex, size_t n, int want, int have_usize,
                       int have_csize, uint64_t *out)
{
    size_t p = 0;
    while (p + 4 <= n) {
        uint16_t id = rd16(ex + p), len = rd16(ex + p + 2);
        if (p + 4 + len > n)
            return -1;
        if (id == 1) {
            size_t at = (size_t)(want > 0 ? have_usize : 0) +
                        (size_t)(want > 1 ? have_csize : 0);
            if (8 * (at + 1) > len)
                return -1;
            *out = rd64(ex + p + 4 + 8 * at);
            return 0;
        }
        p += 4 + (size_t)len;
    }
    return -1;
}

static cl_status zip_fail(const cl_pth *p, const char *what, uint64_t off)
{
    return cl_error(CL_ERR_FORMAT, "%s: zip: %s (at byte %llu)", p->path, what,
                    (unsigned long long)off);
}

/* Finds the central directory from the end record (zip64 when saturated)
 * and records every entry, checking that each is stored (torch.save never
 * compresses), unencrypted, its local header and data inside the file, and
 * its CRC-32. */
static cl_status zip_read(cl_pth *p)
{
    const uint8_t *b = p->buf;
    size_t n = p->size;
    if (n >= 2 && b[0] == 0x80 && b[1] <= 5)
        return cl_error(CL_ERR_UNSUPPORTED,
                        "%s: a PyTorch checkpoint in the legacy format of "
                        "torch < 1.6 (a bare pickle); re-save it with "
                        "torch.save in PyTorch 1.6 or later",
                        p->path);
    if (n < 22 || rd32(b) != 0x04034b50)
        return cl_error(CL_ERR_FORMAT,
                        "%s: not a zip archive (a PyTorch checkpoint starts "
                        "with 'PK\\3\\4')",
                        p->path);
    size_t eocd = 0;
    int found = 0;
    size_t lo = n > 22 + 65535 ? n - 22 - 65535 : 0;
    for (size_t q = n - 22 + 1; q-- > lo;)
        if (rd32(b + q) == 0x06054b50 && q + 22 + rd16(b + q + 20) == n) {
            eocd = q;
            found = 1;
            break;
        }
    if (!found)
        return zip_fail(p,
                        "no end of central directory record (truncated "
                        "file?)",
                        n);
    uint64_t count = rd16(b + eocd + 10), cd_size = rd32(b + eocd + 12),
             cd_off = rd32(b + eocd + 16);
    if (rd16(b + eocd + 4) != 0 || rd16(b + eocd + 6) != 0)
        return zip_fail(p, "a multi-disk archive", eocd);
    if (count == 0xFFFF || cd_size == 0xFFFFFFFFu || cd_off == 0xFFFFFFFFu) {
        if (eocd < 20 || rd32(b + eocd - 20) != 0x07064b50)
            return zip_fail(p, "saturated end record without a zip64 locator",
                            eocd);
        uint64_t z = rd64(b + eocd - 20 + 8);
        if (z > n - 56 || n < 56 || rd32(b + z) != 0x06064b50)
            return zip_fail(p, "zip64 end record outside the file", eocd - 20);
        count = rd64(b + z + 32);
        cd_size = rd64(b + z + 40);
        cd_off = rd64(b + z + 48);
    }
    if (cd_off > n || cd_size > n - cd_off)
        return zip_fail(p, "central directory outside the file", eocd);
    if (count > PTH_MAX_ENTRIES || count > cd_size / 46 + 1)
        return zip_fail(p, "entry count does not fit the central directory",
                        eocd);
    p->z = calloc(count ? (size_t)count : 1, sizeof *p->z);
    if (!p->z)
        return cl_error(CL_ERR_NOMEM, "%s: zip directory", p->path);
    size_t at = (size_t)cd_off, end = (size_t)(cd_off + cd_size);
    for (uint64_t k = 0; k < count; k++) {
        if (end - at < 46 || rd32(b + at) != 0x02014b50)
            return zip_fail(p,
                            "central directory entry cut short or without "
                            "its signature",
                            at);
        uint16_t flags = rd16(b + at + 8), method = rd16(b + at + 10);
        uint32_t crc = rd32(b + at + 16);
        uint64_t csize = rd32(b + at + 20), usize = rd32(b + at + 24);
        size_t nl = rd16(b + at + 28), el = rd16(b + at + 30),
               cl = rd16(b + at + 32);
        uint64_t loc = rd32(b + at + 42);
        if (46 + nl + el + cl > end - at)
            return zip_fail(p,
                            "central directory entry runs past the "
                            "directory",
                            at);
        const uint8_t *ex = b + at + 46 + nl;
        int su = usize == 0xFFFFFFFFu, sc = csize == 0xFFFFFFFFu;
        if ((su && zip64_extra(ex, el, 0, su, sc, &usize)) ||
            (sc && zip64_extra(ex, el, 1, su, sc, &csize)) ||
            (loc == 0xFFFFFFFFu && zip64_extra(ex, el, 2, su, sc, &loc)))
            return zip_fail(p,
                            "saturated size or offset without its zip64 "
                            "field",
                            at);
        if (flags & 1)
            return zip_fail(p, "an encrypted entry", at);
        if (method != 0)
            return cl_error(CL_ERR_UNSUPPORTED,
                            "%s: zip: entry '%.*s' is compressed (method %u); "
                            "torch.save stores entries uncompressed",
                            p->path, (int)(nl > 100 ? 100 : nl),
                            (const char *)b + at + 46, method);
        if (csize != usize)
            return zip_fail(p, "a stored entry whose sizes differ", at);
        if (loc > n || n - loc < 30 || rd32(b + loc) != 0x04034b50)
            return zip_fail(p,
                            "local header outside the file or without its "
                            "signature",
                            at);
        uint64_t data = loc + 30 + rd16(b + loc + 26) + rd16(b + loc + 28);
        if (data > n || usize > n - data)
            return zip_fail(p, "entry data runs past the end of the file", loc);
        zentry *e = &p->z[p->nz++];
        e->name = (const char *)b + at + 46;
        e->name_len = nl;
        e->data = b + data;
        e->size = usize;
        uLong c = crc32(0L, Z_NULL, 0);
        for (uint64_t done = 0; done < usize;) {
            uInt step =
                usize - done > (1u << 30) ? (1u << 30) : (uInt)(usize - done);
            c = crc32(c, e->data + done, step);
            done += step;
        }
        if ((uint32_t)c != crc)
            return cl_error(CL_ERR_FORMAT,
                            "%s: zip: entry '%.*s' fails its CRC-32 check "
                            "(corrupt file)",
                            p->path, (int)(nl > 100 ? 100 : nl), e->name);
        at += 46 + nl + el + cl;
    }
    return CL_OK;
}

/* The entry called prefix + name, or NULL. */
static const zentry *zip_find(const cl_pth *p, const char *name, size_t len)
{
    for (size_t k = 0; k < p->nz; k++) {
        const zentry *e = &p->z[k];
        if (e->name_len == p->prefix_len + len &&
            memcmp(e->name, p->prefix, p->prefix_len) == 0 &&
            memcmp(e->name + p->prefix_len, name, len) == 0)
            return e;
    }
    return NULL;
}

/* ---- the pickle machine -------------------------------------------------- */

typedef struct vm {
    cl_pth *p;
    const uint8_t *code;
    size_t n, pc, op_at;
    int32_t *stack;
    int32_t sp;
    int32_t *marks;
    int32_t nmarks;
    int32_t *memo;
    int32_t nmemo, cmemo;
} vm;

static cl_status vm_fail(const vm *v, const char *fmt, ...) CL_PRINTF(2, 3);

/* One sentence naming the byte of data.pkl where the opcode starts. */
static cl_status vm_fail(const vm *v, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return cl_error(CL_ERR_FORMAT, "%s: data.pkl byte %zu: %s", v->p->path,
                    v->op_at, msg);
}

static cl_status vm_new(vm *v, pkind kind, int32_t *out)
{
    cl_pth *p = v->p;
    if ((size_t)p->no >= v->n + 256)
        return vm_fail(v, "%s", "more objects than opcodes");
    if (p->no == p->co) {
        /* At most one object per opcode byte: bounded by the pickle. */
        int32_t c = p->co ? p->co * 2 : 256;
        if (c < p->co || (size_t)c > v->n + 256)
            c = (int32_t)(v->n + 256);
        pobj *o = realloc(p->o, (size_t)c * sizeof *o);
        if (!o)
            return cl_error(CL_ERR_NOMEM, "%s: pickle objects", p->path);
        p->o = o;
        p->co = c;
    }
    memset(&p->o[p->no], 0, sizeof p->o[0]);
    p->o[p->no].kind = (uint8_t)kind;
    *out = p->no++;
    return CL_OK;
}

static cl_status vm_push(vm *v, int32_t id)
{
    if (v->sp >= PTH_MAX_STACK)
        return vm_fail(v, "%s", "the pickle stack grows past 2^20 entries");
    v->stack[v->sp++] = id;
    return CL_OK;
}

static cl_status vm_pop(vm *v, int32_t *id)
{
    int32_t floor = v->nmarks ? v->marks[v->nmarks - 1] : 0;
    if (v->sp <= floor)
        return vm_fail(v, "%s", "pops an empty stack (or past a MARK)");
    *id = v->stack[--v->sp];
    return CL_OK;
}

static cl_status vm_pop_mark(vm *v, int32_t *from)
{
    if (!v->nmarks)
        return vm_fail(v, "%s", "needs a MARK and there is none");
    *from = v->marks[--v->nmarks];
    return CL_OK;
}

static cl_status vm_add_item(vm *v, int32_t obj, int32_t item)
{
    pobj *o = &v->p->o[obj];
    if (o->n == o->cap) {
        int32_t c = o->cap ? o->cap * 2 : 4;
        if (c < o->cap)
            return vm_fail(v, "%s", "a container grows past 2^31 items");
        int32_t *it = realloc(o->items, (size_t)c * sizeof *it);
        if (!it)
            return cl_error(CL_ERR_NOMEM, "%s: pickle container", v->p->path);
        o->items = it;
        o->cap = c;
    }
    o->items[o->n++] = item;
    return CL_OK;
}

static int is_global(const pobj *o, const char *mod, const char *name)
{
    return o->kind == P_GLOBAL && o->len == strlen(mod) &&
           memcmp(o->s, mod, o->len) == 0 && o->len2 == strlen(name) &&
           memcmp(o->s2, name, o->len2) == 0;
}

/* "module.name" of a global or opaque object, for messages. */
static const char *gname(const pobj *o, char *buf, size_t n)
{
    snprintf(buf, n, "%.*s.%.*s", (int)(o->len > 80 ? 80 : o->len), o->s,
             (int)(o->len2 > 80 ? 80 : o->len2), o->s2);
    return buf;
}

static int get_int(const pobj *o, int64_t *x)
{
    if (o->kind != P_INT && o->kind != P_BOOL)
        return 0;
    *x = o->i;
    return 1;
}

/* A tuple whose every item is an int in [0, hi]: sizes or strides. */
static cl_status int_tuple(vm *v, const pobj *t, int64_t hi, int64_t *out,
                           int *n, const char *what)
{
    if (t->kind != P_TUPLE)
        return vm_fail(v, "_rebuild_tensor_v2's %s is not a tuple", what);
    if (t->n > CL_MAX_DIMS)
        return vm_fail(v, "a tensor of more than 5 dimensions (%s)", what);
    for (int32_t k = 0; k < t->n; k++) {
        const pobj *x = &v->p->o[t->items[k]];
        if (x->kind != P_INT || x->i < 0 || x->i > hi)
            return vm_fail(v,
                           "_rebuild_tensor_v2's %s holds a value that is "
                           "not an int in range",
                           what);
        out[k] = x->i;
    }
    *n = t->n;
    return CL_OK;
}

/* torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride,
 * requires_grad, backward_hooks[, metadata]): a view of the storage, every
 * element of which must lie inside it. */
static cl_status rebuild_tensor(vm *v, const pobj *args, int32_t *out)
{
    cl_pth *p = v->p;
    if (args->kind != P_TUPLE || args->n < 4)
        return vm_fail(v, "%s",
                       "_rebuild_tensor_v2 takes a tuple of at least "
                       "4 arguments");
    const pobj *st = &p->o[args->items[0]];
    if (st->kind != P_STORAGE)
        return vm_fail(v,
                       "_rebuild_tensor_v2's first argument is a %s, not "
                       "a storage",
                       kind_names[st->kind]);
    int64_t off = 0;
    if (!get_int(&p->o[args->items[1]], &off) || off < 0 || off > st->i)
        return vm_fail(v, "%s",
                       "_rebuild_tensor_v2's storage offset is not "
                       "an int inside the storage");
    ptensor t;
    memset(&t, 0, sizeof t);
    int nd = 0, ns = 0;
    CL_TRY(int_tuple(v, &p->o[args->items[2]], PTH_MAX_NUMEL, t.shape.d, &nd,
                     "size"));
    CL_TRY(int_tuple(v, &p->o[args->items[3]], INT64_MAX, t.stride, &ns,
                     "stride"));
    if (nd != ns)
        return vm_fail(v, "%s",
                       "_rebuild_tensor_v2's size and stride differ "
                       "in length");
    t.shape.ndim = nd;
    int64_t numel = 1;
    for (int k = 0; k < nd; k++) {
        if (t.shape.d[k] && numel > PTH_MAX_NUMEL / t.shape.d[k])
            return vm_fail(v, "%s", "a tensor of more than 2^40 elements");
        numel *= t.shape.d[k];
    }
    if (numel > 0) {
        /* The last element, offset + sum((size-1) * stride), must be
         * inside the storage; checked term by term without overflow. */
        if (st->i == 0)
            return vm_fail(v, "%s", "a non-empty tensor on an empty storage");
        int64_t last = off, limit = st->i - 1;
        if (last > limit)
            return vm_fail(v, "%s",
                           "a view whose storage offset is past its "
                           "storage");
        for (int k = 0; k < nd; k++) {
            int64_t span = t.shape.d[k] - 1;
            if (!span || !t.stride[k])
                continue;
            if (span > (limit - last) / t.stride[k])
                return vm_fail(v, "%s",
                               "a view that reaches past the end of "
                               "its storage (sizes, strides and "
                               "offset disagree with the storage "
                               "size)");
            last += span * t.stride[k];
        }
    }
    t.dtype = st->dtype;
    t.data = st->data;
    t.storage_numel = st->i;
    t.offset = off;
    if (p->nt == p->ct) {
        int32_t c = p->ct ? p->ct * 2 : 64;
        ptensor *nt = realloc(p->t, (size_t)c * sizeof *nt);
        if (!nt)
            return cl_error(CL_ERR_NOMEM, "%s: tensors", p->path);
        p->t = nt;
        p->ct = c;
    }
    p->t[p->nt] = t;
    CL_TRY(vm_new(v, P_TENSOR, out));
    p->o[*out].tensor = p->nt++;
    return CL_OK;
}

/* BINPERSID: ('storage', torch.<Type>Storage, key, location, numel) names
 * the zip entry data/<key>, whose size must be numel elements. */
static cl_status persistent_load(vm *v, int32_t pid, int32_t *out)
{
    cl_pth *p = v->p;
    const pobj *t = &p->o[pid];
    if (t->kind != P_TUPLE || t->n != 5)
        return vm_fail(v, "%s",
                       "a persistent id that is not a 5-tuple "
                       "('storage', type, key, location, numel)");
    const pobj *tag = &p->o[t->items[0]], *type = &p->o[t->items[1]],
               *key = &p->o[t->items[2]], *numel = &p->o[t->items[4]];
    if (tag->kind != P_STR || tag->len != 7 || memcmp(tag->s, "storage", 7))
        return vm_fail(v, "%s", "a persistent id whose tag is not 'storage'");
    if (type->kind != P_GLOBAL)
        return vm_fail(v, "a storage type that is a %s, not a global",
                       kind_names[type->kind]);
    int d = -1;
    for (int k = 0; k < (int)(sizeof dtypes / sizeof dtypes[0]); k++)
        if (is_global(type, "torch", dtypes[k].cls))
            d = k;
    if (d < 0) {
        char g[200];
        return vm_fail(v,
                       "storage type %s is not one classic reads (Float, "
                       "Half, BFloat16, Double, Long, Int)",
                       gname(type, g, sizeof g));
    }
    if (key->kind != P_STR || key->len == 0 || key->len > 64)
        return vm_fail(v, "%s", "a storage key that is not a short string");
    if (numel->kind != P_INT || numel->i < 0 || numel->i > PTH_MAX_NUMEL)
        return vm_fail(v, "%s",
                       "a storage size that is not an int in "
                       "[0, 2^40]");
    char name[80];
    int len = snprintf(name, sizeof name, "data/%.*s", (int)key->len, key->s);
    const zentry *e = zip_find(p, name, (size_t)len);
    if (!e) {
        char m[200];
        snprintf(m, sizeof m, "storage '%.64s' has no entry %.70s in the zip",
                 name + 5, name);
        return vm_fail(v, "%s", m);
    }
    if (e->size != (uint64_t)numel->i * (uint64_t)dtypes[d].size) {
        char m[200];
        snprintf(m, sizeof m,
                 "storage '%.64s' declares %lld %s elements, its entry "
                 "holds %llu bytes",
                 name + 5, (long long)numel->i, dtypes[d].name,
                 (unsigned long long)e->size);
        return vm_fail(v, "%s", m);
    }
    /* vm_new may move p->o: take what is needed from it first. */
    int64_t count = numel->i;
    CL_TRY(vm_new(v, P_STORAGE, out));
    pobj *o = &p->o[*out];
    o->dtype = (uint8_t)d;
    o->i = count;
    o->data = e->data;
    return CL_OK;
}

/* REDUCE: callable(*args) for the few callables a state_dict uses; any
 * other callable gives an opaque object that is an error only where the
 * state_dict needs a value (an argparse.Namespace beside it is fine). */
static cl_status reduce(vm *v, int32_t fn, int32_t args, int32_t *out)
{
    cl_pth *p = v->p;
    const pobj *f = &p->o[fn], *a = &p->o[args];
    if (f->kind != P_GLOBAL)
        return vm_fail(v, "REDUCE calls a %s, not a global",
                       kind_names[f->kind]);
    if (a->kind != P_TUPLE)
        return vm_fail(v, "REDUCE's arguments are a %s, not a tuple",
                       kind_names[a->kind]);
    if (is_global(f, "collections", "OrderedDict")) {
        if (a->n != 0)
            return vm_fail(v, "%s", "collections.OrderedDict with arguments");
        return vm_new(v, P_DICT, out);
    }
    if (is_global(f, "torch._utils", "_rebuild_tensor_v2"))
        return rebuild_tensor(v, a, out);
    if (is_global(f, "torch._utils", "_rebuild_parameter")) {
        if (a->n < 1 || p->o[a->items[0]].kind != P_TENSOR)
            return vm_fail(v, "%s", "_rebuild_parameter without a tensor");
        *out = a->items[0];
        return CL_OK;
    }
    CL_TRY(vm_new(v, P_OPAQUE, out));
    pobj *o = &p->o[*out];
    f = &p->o[fn];
    o->s = f->s;
    o->len = f->len;
    o->s2 = f->s2;
    o->len2 = f->len2;
    return CL_OK;
}

static cl_status need(vm *v, size_t k)
{
    if (v->n - v->pc < k)
        return vm_fail(v, "%s",
                       "the pickle ends inside an opcode "
                       "(truncated data.pkl)");
    return CL_OK;
}

static cl_status new_str(vm *v, const uint8_t *s, uint64_t len, int32_t *id)
{
    CL_TRY(vm_new(v, P_STR, id));
    v->p->o[*id].s = (const char *)s;
    v->p->o[*id].len = (uint32_t)len;
    return CL_OK;
}

static cl_status new_int(vm *v, pkind k, int64_t x)
{
    int32_t id = 0;
    CL_TRY(vm_new(v, k, &id));
    v->p->o[id].i = x;
    return vm_push(v, id);
}

/* Builds a tuple from the top n stack entries (n < 0: down to the MARK). */
static cl_status make_tuple(vm *v, int n)
{
    int32_t from = v->sp - n, id;
    if (n < 0)
        CL_TRY(vm_pop_mark(v, &from));
    else if (v->sp - (v->nmarks ? v->marks[v->nmarks - 1] : 0) < n)
        return vm_fail(v, "%s", "TUPLE1/2/3 with too few stack entries");
    CL_TRY(vm_new(v, P_TUPLE, &id));
    for (int32_t k = from; k < v->sp; k++)
        CL_TRY(vm_add_item(v, id, v->stack[k]));
    v->sp = from;
    return vm_push(v, id);
}

static cl_status memo_put(vm *v, uint64_t key)
{
    if (!v->sp)
        return vm_fail(v, "%s", "BINPUT on an empty stack");
    /* The pickler numbers memo entries 0, 1, 2...: a key past the next
     * one is refused rather than allocated. */
    if (key > (uint64_t)v->nmemo)
        return vm_fail(v, "%s", "a memo key past the next free one");
    if (key == (uint64_t)v->nmemo) {
        if (v->nmemo == v->cmemo) {
            int32_t c = v->cmemo ? v->cmemo * 2 : 256;
            int32_t *m = realloc(v->memo, (size_t)c * sizeof *m);
            if (!m)
                return cl_error(CL_ERR_NOMEM, "%s: pickle memo", v->p->path);
            v->memo = m;
            v->cmemo = c;
        }
        v->nmemo++;
    }
    v->memo[key] = v->stack[v->sp - 1];
    return CL_OK;
}

static cl_status memo_get(vm *v, uint64_t key)
{
    if (key >= (uint64_t)v->nmemo)
        return vm_fail(v, "%s", "BINGET of a memo key never stored");
    return vm_push(v, v->memo[key]);
}

static cl_status set_items(vm *v, int32_t from)
{
    int32_t d = from - 1;
    if (d < 0 || (v->nmarks && d < v->marks[v->nmarks - 1]) ||
        (v->sp - from) % 2)
        return vm_fail(v, "%s",
                       "SETITEM(S) without a dict or with an odd "
                       "number of entries");
    int32_t obj = v->stack[d];
    if (v->p->o[obj].kind != P_DICT)
        return vm_fail(v, "SETITEM(S) on a %s, not a dict",
                       kind_names[v->p->o[obj].kind]);
    for (int32_t k = from; k < v->sp; k++)
        CL_TRY(vm_add_item(v, obj, v->stack[k]));
    v->sp = from;
    return CL_OK;
}

static cl_status append_items(vm *v, int32_t from)
{
    int32_t d = from - 1;
    if (d < 0 || (v->nmarks && d < v->marks[v->nmarks - 1]))
        return vm_fail(v, "%s", "APPEND(S) without a list");
    int32_t obj = v->stack[d];
    if (v->p->o[obj].kind != P_LIST)
        return vm_fail(v, "APPEND(S) on a %s, not a list",
                       kind_names[v->p->o[obj].kind]);
    for (int32_t k = from; k < v->sp; k++)
        CL_TRY(vm_add_item(v, obj, v->stack[k]));
    v->sp = from;
    return CL_OK;
}

/* Runs data.pkl to its STOP; *root is the object it returns. */
static cl_status vm_run(vm *v, int32_t *root)
{
    while (v->pc < v->n) {
        v->op_at = v->pc;
        uint8_t op = v->code[v->pc++];
        const uint8_t *a = v->code + v->pc;
        int32_t x = 0, y = 0, id = 0;
        switch (op) {
        case 0x80: /* PROTO */
            CL_TRY(need(v, 1));
            if (a[0] > 5)
                return vm_fail(v, "%s", "pickle protocol above 5");
            v->pc++;
            break;
        case 0x95: /* FRAME (protocol 4): the frame length is advisory */
            CL_TRY(need(v, 8));
            v->pc += 8;
            break;
        case '.': /* STOP */
            if (v->sp != 1 || v->nmarks)
                return vm_fail(v, "%s",
                               "STOP with other than one object on "
                               "the stack");
            *root = v->stack[0];
            return CL_OK;
        case '(': /* MARK */
            if (v->nmarks >= PTH_MAX_STACK)
                return vm_fail(v, "%s", "more than 2^20 open MARKs");
            v->marks[v->nmarks++] = v->sp;
            break;
        case '}': /* EMPTY_DICT */
        case ']': /* EMPTY_LIST */
        case ')': /* EMPTY_TUPLE */
            CL_TRY(vm_new(v,
                          op == '}'   ? P_DICT
                          : op == ']' ? P_LIST
                                      : P_TUPLE,
                          &id));
            CL_TRY(vm_push(v, id));
            break;
        case 'N': /* NONE */
            CL_TRY(vm_new(v, P_NONE, &id));
            CL_TRY(vm_push(v, id));
            break;
        case 0x88: /* NEWTRUE */
        case 0x89: /* NEWFALSE */
            CL_TRY(new_int(v, P_BOOL, op == 0x88));
            break;
        case 'K': /* BININT1 */
            CL_TRY(need(v, 1));
            v->pc += 1;
            CL_TRY(new_int(v, P_INT, a[0]));
            break;
        case 'M': /* BININT2 */
            CL_TRY(need(v, 2));
            v->pc += 2;
            CL_TRY(new_int(v, P_INT, rd16(a)));
            break;
        case 'J': /* BININT */
            CL_TRY(need(v, 4));
            v->pc += 4;
            CL_TRY(new_int(v, P_INT, (int32_t)rd32(a)));
            break;
        case 0x8a: { /* LONG1: little-endian two's complement, n bytes */
            CL_TRY(need(v, 1));
            size_t nb = a[0];
            if (nb > 8)
                return vm_fail(v, "%s",
                               "LONG1 of more than 8 bytes (an int "
                               "past 64 bits)");
            v->pc++;
            CL_TRY(need(v, nb));
            uint64_t u = 0;
            for (size_t k = 0; k < nb; k++)
                u |= (uint64_t)a[1 + k] << (8 * k);
            if (nb && nb < 8 && (a[nb] & 0x80))
                u |= ~(uint64_t)0 << (8 * nb);
            v->pc += nb;
            int64_t s;
            memcpy(&s, &u, sizeof s);
            CL_TRY(new_int(v, P_INT, s));
            break;
        }
        case 'G': { /* BINFLOAT: big-endian double */
            CL_TRY(need(v, 8));
            uint64_t u = 0;
            for (int k = 0; k < 8; k++)
                u = u << 8 | a[k];
            v->pc += 8;
            CL_TRY(vm_new(v, P_FLOAT, &id));
            memcpy(&v->p->o[id].f, &u, sizeof u);
            CL_TRY(vm_push(v, id));
            break;
        }
        case 'X':   /* BINUNICODE */
        case 'T': { /* BINSTRING */
            CL_TRY(need(v, 4));
            uint64_t len = rd32(a);
            v->pc += 4;
            CL_TRY(need(v, len));
            CL_TRY(new_str(v, a + 4, len, &id));
            v->pc += len;
            CL_TRY(vm_push(v, id));
            break;
        }
        case 0x8c:  /* SHORT_BINUNICODE */
        case 'U':   /* SHORT_BINSTRING */
        case 'C': { /* SHORT_BINBYTES */
            CL_TRY(need(v, 1));
            uint64_t len = a[0];
            v->pc++;
            CL_TRY(need(v, len));
            CL_TRY(new_str(v, a + 1, len, &id));
            v->pc += len;
            CL_TRY(vm_push(v, id));
            break;
        }
        case 'c': { /* GLOBAL: "module\nname\n" */
            const uint8_t *nl1 = memchr(a, '\n', v->n - v->pc);
            const uint8_t *nl2 =
                nl1 ? memchr(nl1 + 1, '\n', (size_t)(v->code + v->n - nl1 - 1))
                    : NULL;
            if (!nl2)
                return vm_fail(v, "%s",
                               "GLOBAL without its two "
                               "newline-terminated names");
            CL_TRY(vm_new(v, P_GLOBAL, &id));
            pobj *o = &v->p->o[id];
            o->s = (const char *)a;
            o->len = (uint32_t)(nl1 - a);
            o->s2 = (const char *)nl1 + 1;
            o->len2 = (uint32_t)(nl2 - nl1 - 1);
            v->pc = (size_t)(nl2 + 1 - v->code);
            CL_TRY(vm_push(v, id));
            break;
        }
        case 'Q': /* BINPERSID */
            CL_TRY(vm_pop(v, &x));
            CL_TRY(persistent_load(v, x, &id));
            CL_TRY(vm_push(v, id));
            break;
        case 't': /* TUPLE */
            CL_TRY(make_tuple(v, -1));
            break;
        case 0x85: /* TUPLE1 */
        case 0x86: /* TUPLE2 */
        case 0x87: /* TUPLE3 */
            CL_TRY(make_tuple(v, op - 0x84));
            break;
        case 'l': /* LIST */
            CL_TRY(vm_pop_mark(v, &x));
            CL_TRY(vm_new(v, P_LIST, &id));
            for (int32_t k = x; k < v->sp; k++)
                CL_TRY(vm_add_item(v, id, v->stack[k]));
            v->sp = x;
            CL_TRY(vm_push(v, id));
            break;
        case 'R': /* REDUCE */
            CL_TRY(vm_pop(v, &y));
            CL_TRY(vm_pop(v, &x));
            CL_TRY(reduce(v, x, y, &id));
            CL_TRY(vm_push(v, id));
            break;
        case 0x81: { /* NEWOBJ: cls.__new__(cls, *args), kept opaque */
            CL_TRY(vm_pop(v, &y));
            CL_TRY(vm_pop(v, &x));
            const pobj *cls = &v->p->o[x];
            if (cls->kind != P_GLOBAL)
                return vm_fail(v, "NEWOBJ of a %s, not a global",
                               kind_names[cls->kind]);
            if (is_global(cls, "collections", "OrderedDict"))
                CL_TRY(vm_new(v, P_DICT, &id));
            else {
                CL_TRY(vm_new(v, P_OPAQUE, &id));
                cls = &v->p->o[x];
                v->p->o[id].s = cls->s;
                v->p->o[id].len = cls->len;
                v->p->o[id].s2 = cls->s2;
                v->p->o[id].len2 = cls->len2;
            }
            CL_TRY(vm_push(v, id));
            break;
        }
        case 'b': /* BUILD: the state (a state_dict's _metadata) is unused */
            CL_TRY(vm_pop(v, &y));
            if (!v->sp || (v->nmarks && v->sp <= v->marks[v->nmarks - 1]))
                return vm_fail(v, "%s", "BUILD without an object");
            break;
        case 's': /* SETITEM */
            if (v->sp < 3)
                return vm_fail(v, "%s", "SETITEM with too few stack entries");
            CL_TRY(set_items(v, v->sp - 2));
            break;
        case 'u': /* SETITEMS */
            CL_TRY(vm_pop_mark(v, &x));
            CL_TRY(set_items(v, x));
            break;
        case 'a': /* APPEND */
            if (v->sp < 2)
                return vm_fail(v, "%s", "APPEND with too few stack entries");
            CL_TRY(append_items(v, v->sp - 1));
            break;
        case 'e': /* APPENDS */
            CL_TRY(vm_pop_mark(v, &x));
            CL_TRY(append_items(v, x));
            break;
        case '0': /* POP */
            CL_TRY(vm_pop(v, &x));
            break;
        case '1': /* POP_MARK */
            CL_TRY(vm_pop_mark(v, &x));
            v->sp = x;
            break;
        case 'q': /* BINPUT */
            CL_TRY(need(v, 1));
            v->pc++;
            CL_TRY(memo_put(v, a[0]));
            break;
        case 'r': /* LONG_BINPUT */
            CL_TRY(need(v, 4));
            v->pc += 4;
            CL_TRY(memo_put(v, rd32(a)));
            break;
        case 0x94: /* MEMOIZE (protocol 4) */
            CL_TRY(memo_put(v, (uint64_t)v->nmemo));
            break;
        case 'h': /* BINGET */
            CL_TRY(need(v, 1));
            v->pc++;
            CL_TRY(memo_get(v, a[0]));
            break;
        case 'j': /* LONG_BINGET */
            CL_TRY(need(v, 4));
            v->pc += 4;
            CL_TRY(memo_get(v, rd32(a)));
            break;
        default: {
            char m[96];
            if (op >= 0x20 && op < 0x7f)
                snprintf(m, sizeof m, "opcode 0x%02x ('%c')", op, op);
            else
                snprintf(m, sizeof m, "opcode 0x%02x", op);
            return vm_fail(v,
                           "%s is outside the pickle subset that "
                           "state_dicts use",
                           m);
        }
        }
    }
    v->op_at = v->n;
    return vm_fail(v, "%s",
                   "the pickle ends without STOP (truncated "
                   "data.pkl)");
}

/* ---- the state_dict ---------------------------------------------------- */

static int str_is(const pobj *o, const char *s)
{
    return o->kind == P_STR && o->len == strlen(s) &&
           memcmp(o->s, s, o->len) == 0;
}

static const char *describe(const cl_pth *p, const pobj *o, char *buf, size_t n)
{
    if (o->kind == P_OPAQUE) {
        char g[200];
        snprintf(buf, n, "a %s object", gname(o, g, sizeof g));
    } else if (o->kind == P_GLOBAL) {
        char g[200];
        snprintf(buf, n, "the global %s", gname(o, g, sizeof g));
    } else
        snprintf(buf, n, "a %s", kind_names[o->kind]);
    (void)p;
    return buf;
}

/* Does the dict hold at least one tensor value? */
static int has_tensor(const cl_pth *p, const pobj *d)
{
    for (int32_t k = 1; k < d->n; k += 2)
        if (p->o[d->items[k]].kind == P_TENSOR)
            return 1;
    return 0;
}

/* The state_dict: the root dict itself, or the value of one of the keys
 * training scripts use for it. */
static cl_status find_state_dict(cl_pth *p, int32_t root, const pobj **sd)
{
    static const char *const keys[] = {"state_dict", "model",
                                       "model_state_dict", "net", NULL};
    const pobj *r = &p->o[root];
    char what[256];
    if (r->kind != P_DICT)
        return cl_error(CL_ERR_UNSUPPORTED,
                        "%s: the pickle holds %s, not a state_dict (a dict of "
                        "tensors); save model.state_dict() instead",
                        p->path, describe(p, r, what, sizeof what));
    if (has_tensor(p, r) || r->n == 0) {
        *sd = r;
        snprintf(p->where, sizeof p->where, "the state_dict at the root");
        return CL_OK;
    }
    for (int q = 0; keys[q]; q++)
        for (int32_t k = 0; k + 1 < r->n; k += 2) {
            const pobj *v = &p->o[r->items[k + 1]];
            if (!str_is(&p->o[r->items[k]], keys[q]))
                continue;
            if (v->kind != P_DICT)
                return cl_error(CL_ERR_UNSUPPORTED,
                                "%s: '%s' holds %s, not a state_dict (a dict "
                                "of tensors)",
                                p->path, keys[q],
                                describe(p, v, what, sizeof what));
            *sd = v;
            snprintf(p->where, sizeof p->where, "the state_dict under '%s'",
                     keys[q]);
            return CL_OK;
        }
    /* Tensors torch rebuilds by callables outside the subset (sparse,
     * quantized): the dict is a state_dict, and collect() names them. */
    for (int32_t k = 1; k < r->n; k += 2) {
        const pobj *v = &p->o[r->items[k]];
        if (v->kind == P_OPAQUE && v->len >= 5 &&
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

static cl_status collect(cl_pth *p, const pobj *sd)
{
    p->out = calloc((size_t)sd->n / 2 + 1, sizeof *p->out);
    if (!p->out)
        return cl_error(CL_ERR_NOMEM, "%s: tensor list", p->path);
    for (int32_t k = 0; k + 1 < sd->n; k += 2) {
        const pobj *key = &p->o[sd->items[k]], *val = &p->o[sd->items[k + 1]];
        char what[256];
        if (key->kind != P_STR)
            return cl_error(CL_ERR_FORMAT,
                            "%s: a state_dict key is %s, not a string", p->path,
                            describe(p, key, what, sizeof what));
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
        if (val->kind != P_TENSOR)
            return cl_error(CL_ERR_UNSUPPORTED,
                            "%s: state_dict entry '%.*s' is %s, not a tensor",
                            p->path, (int)len, s,
                            describe(p, val, what, sizeof what));
        for (int32_t j = 0; j < p->nout; j++) {
            const ptensor *t = &p->t[p->out[j]];
            if (strlen(t->name) == len && memcmp(t->name, s, len) == 0)
                return cl_error(CL_ERR_FORMAT,
                                "%s: state_dict name '%.*s' appears twice "
                                "(after removing 'module.')",
                                p->path, (int)len, s);
        }
        ptensor *t = &p->t[val->tensor];
        if (t->name[0]) {
            /* One tensor object under two names: copy its record. */
            if (p->nt == p->ct) {
                int32_t c = p->ct * 2;
                ptensor *nt = realloc(p->t, (size_t)c * sizeof *nt);
                if (!nt)
                    return cl_error(CL_ERR_NOMEM, "%s: tensors", p->path);
                p->t = nt;
                p->ct = c;
            }
            p->t[p->nt] = p->t[val->tensor];
            t = &p->t[p->nt++];
        }
        memcpy(t->name, s, len);
        t->name[len] = 0;
        p->out[p->nout++] = (int32_t)(t - p->t);
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

static cl_status parse(cl_pth *p)
{
    CL_TRY(zip_read(p));
    /* torch.save puts everything under one folder, named after the file
     * (torch 1.6-1.13) or "archive" (later): the one holding data.pkl. */
    const zentry *pkl = NULL;
    for (size_t k = 0; k < p->nz; k++) {
        const zentry *e = &p->z[k];
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
    const zentry *bo = zip_find(p, "byteorder", 9);
    if (bo && !(bo->size == 6 && memcmp(bo->data, "little", 6) == 0))
        return cl_error(CL_ERR_UNSUPPORTED,
                        "%s: tensors stored big-endian (byteorder entry)",
                        p->path);
    vm v;
    memset(&v, 0, sizeof v);
    v.p = p;
    v.code = pkl->data;
    v.n = (size_t)pkl->size;
    size_t depth = v.n + 1 < PTH_MAX_STACK ? v.n + 1 : PTH_MAX_STACK;
    v.stack = malloc(depth * sizeof *v.stack);
    v.marks = malloc(depth * sizeof *v.marks);
    int32_t root = -1;
    cl_status s = CL_OK;
    if (!v.stack || !v.marks)
        s = cl_error(CL_ERR_NOMEM, "%s: pickle stack", p->path);
    if (s == CL_OK)
        s = vm_run(&v, &root);
    free(v.stack);
    free(v.marks);
    free(v.memo);
    if (s != CL_OK)
        return s;
    const pobj *sd = NULL;
    CL_TRY(find_state_dict(p, root, &sd));
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
    if (p->o)
        for (int32_t k = 0; k < p->no; k++)
            free(p->o[k].items);
    free(p->o);
    p->o = NULL;
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
    if (p->o)
        for (int32_t k = 0; k < p->no; k++)
            free(p->o[k].items);
    free(p->o);
    free(p->t);
    free(p->out);
    free(p->z);
    free(p->buf);
    free(p);
}

size_t cl_pth_count(const cl_pth *p)
{
    return (size_t)p->nout;
}

const char *cl_pth_name(const cl_pth *p, size_t i)
{
    return p->t[p->out[i]].name;
}

cl_shape cl_pth_shape(const cl_pth *p, size_t i)
{
    return p->t[p->out[i]].shape;
}

const char *cl_pth_dtype(const cl_pth *p, size_t i)
{
    return dtype_name(p->t[p->out[i]].dtype);
}

const char *cl_pth_where(const cl_pth *p)
{
    return p->where;
}

long cl_pth_find(const cl_pth *p, const char *name)
{
    for (int32_t k = 0; k < p->nout; k++)
        if (strcmp(p->t[p->out[k]].name, name) == 0)
            return k;
    return -1;
}

/* Element at storage index k, as a double (exact for every dtype but
 * int64 past 2^53, which read_i64 reads directly). */
static double elem(const ptensor *t, int64_t k)
{
    const uint8_t *q = t->data + (size_t)k * (size_t)dtypes[t->dtype].size;
    switch (t->dtype) {
    case D_F32: {
        float f;
        memcpy(&f, q, 4);
        return f;
    }
    case D_F16:
        return cl_f32_from_f16(rd16(q));
    case D_BF16:
        return cl_f32_from_bf16(rd16(q));
    case D_F64: {
        double d;
        memcpy(&d, q, 8);
        return d;
    }
    case D_I64:
        return (double)(int64_t)rd64(q);
    default:
        return (double)(int32_t)rd32(q);
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

static cl_status check_n(const cl_pth *p, const ptensor *t, size_t n)
{
    if ((int64_t)n != cl_shape_numel(&t->shape))
        return cl_error(CL_ERR_SHAPE,
                        "%s: tensor '%s' has %lld elements, "
                        "%zu asked for",
                        p->path, t->name, (long long)cl_shape_numel(&t->shape),
                        n);
    return CL_OK;
}

cl_status cl_pth_read_f32(const cl_pth *p, size_t i, float *dst, size_t n)
{
    const ptensor *t = &p->t[p->out[i]];
    CL_TRY(check_n(p, t, n));
    if (t->dtype == D_I64 || t->dtype == D_I32)
        return cl_error(CL_ERR_FORMAT,
                        "%s: tensor '%s' is %s, not floating-point", p->path,
                        t->name, dtype_name(t->dtype));
    PTH_WALK(t, dst[out_i] = (float)elem(t, src));
    return CL_OK;
}

cl_status cl_pth_read_i64(const cl_pth *p, size_t i, int64_t *dst, size_t n)
{
    const ptensor *t = &p->t[p->out[i]];
    CL_TRY(check_n(p, t, n));
    if (t->dtype != D_I64 && t->dtype != D_I32)
        return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' is %s, not an integer",
                        p->path, t->name, dtype_name(t->dtype));
    if (t->dtype == D_I64)
        PTH_WALK(t, dst[out_i] = (int64_t)rd64(t->data + 8 * (size_t)src));
    else
        PTH_WALK(t, dst[out_i] = (int32_t)rd32(t->data + 4 * (size_t)src));
    return CL_OK;
}
