/* The pickle machine of the .pth reader: runs torch.save's data.pkl over a
 * stack, a memo and an object table, building tensor views of the storages
 * it names; nothing in the pickle is ever executed. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "interop/le.h"
#include "interop/pickle.h"

const cl_pk_dtype_info cl_pk_dtypes[CL_PK_N_DTYPES] = {
    {"FloatStorage", "float32", 4},     {"HalfStorage", "float16", 2},
    {"BFloat16Storage", "bfloat16", 2}, {"DoubleStorage", "float64", 8},
    {"LongStorage", "int64", 8},        {"IntStorage", "int32", 4}};

static const char *const kind_names[] = {
    "None", "bool", "int",    "float",   "str",    "tuple",
    "list", "dict", "global", "storage", "tensor", "object"};

/* The machine while it runs: the program and its counter, the stack of
 * object ids with its MARKs, the memo; objects go to pk. */
typedef struct vm {
    cl_pickle *pk;
    const char *file;
    cl_pk_storage_fn storage;
    void *ctx;
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
    return cl_error(CL_ERR_FORMAT, "%s: data.pkl byte %zu: %s", v->file,
                    v->op_at, msg);
}

static cl_status vm_new(vm *v, cl_pk_kind kind, int32_t *out)
{
    cl_pickle *p = v->pk;
    if ((size_t)p->no >= v->n + 256)
        return vm_fail(v, "%s", "more objects than opcodes");
    if (p->no == p->co) {
        /* At most one object per opcode byte: bounded by the pickle. */
        int32_t c = p->co ? p->co * 2 : 256;
        if (c < p->co || (size_t)c > v->n + 256)
            c = (int32_t)(v->n + 256);
        cl_pk_obj *o = realloc(p->o, (size_t)c * sizeof *o);
        if (!o)
            return cl_error(CL_ERR_NOMEM, "%s: pickle objects", v->file);
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
    if (v->sp >= CL_PK_MAX_STACK)
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
    cl_pk_obj *o = &v->pk->o[obj];
    if (o->n == o->cap) {
        int32_t c = o->cap ? o->cap * 2 : 4;
        if (c < o->cap)
            return vm_fail(v, "%s", "a container grows past 2^31 items");
        int32_t *it = realloc(o->items, (size_t)c * sizeof *it);
        if (!it)
            return cl_error(CL_ERR_NOMEM, "%s: pickle container", v->file);
        o->items = it;
        o->cap = c;
    }
    o->items[o->n++] = item;
    return CL_OK;
}

static int is_global(const cl_pk_obj *o, const char *mod, const char *name)
{
    return o->kind == CL_PK_GLOBAL && o->len == strlen(mod) &&
           memcmp(o->s, mod, o->len) == 0 && o->len2 == strlen(name) &&
           memcmp(o->s2, name, o->len2) == 0;
}

/* "module.name" of a global or opaque object, for messages. */
static const char *gname(const cl_pk_obj *o, char *buf, size_t n)
{
    snprintf(buf, n, "%.*s.%.*s", (int)(o->len > 80 ? 80 : o->len), o->s,
             (int)(o->len2 > 80 ? 80 : o->len2), o->s2);
    return buf;
}

static int get_int(const cl_pk_obj *o, int64_t *x)
{
    if (o->kind != CL_PK_INT && o->kind != CL_PK_BOOL)
        return 0;
    *x = o->i;
    return 1;
}

/* A tuple whose every item is an int in [0, hi]: sizes or strides. */
static cl_status int_tuple(vm *v, const cl_pk_obj *t, int64_t hi, int64_t *out,
                           int *n, const char *what)
{
    if (t->kind != CL_PK_TUPLE)
        return vm_fail(v, "_rebuild_tensor_v2's %s is not a tuple", what);
    if (t->n > CL_MAX_DIMS)
        return vm_fail(v, "a tensor of more than 5 dimensions (%s)", what);
    for (int32_t k = 0; k < t->n; k++) {
        const cl_pk_obj *x = &v->pk->o[t->items[k]];
        if (x->kind != CL_PK_INT || x->i < 0 || x->i > hi)
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
static cl_status rebuild_tensor(vm *v, const cl_pk_obj *args, int32_t *out)
{
    cl_pickle *p = v->pk;
    if (args->kind != CL_PK_TUPLE || args->n < 4)
        return vm_fail(v, "%s",
                       "_rebuild_tensor_v2 takes a tuple of at least "
                       "4 arguments");
    const cl_pk_obj *st = &p->o[args->items[0]];
    if (st->kind != CL_PK_STORAGE)
        return vm_fail(v,
                       "_rebuild_tensor_v2's first argument is a %s, not "
                       "a storage",
                       kind_names[st->kind]);
    int64_t off = 0;
    if (!get_int(&p->o[args->items[1]], &off) || off < 0 || off > st->i)
        return vm_fail(v, "%s",
                       "_rebuild_tensor_v2's storage offset is not "
                       "an int inside the storage");
    cl_pk_tensor t;
    memset(&t, 0, sizeof t);
    int nd = 0, ns = 0;
    CL_TRY(int_tuple(v, &p->o[args->items[2]], CL_PK_MAX_NUMEL, t.shape.d, &nd,
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
        if (t.shape.d[k] && numel > CL_PK_MAX_NUMEL / t.shape.d[k])
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
        cl_pk_tensor *nt = realloc(p->t, (size_t)c * sizeof *nt);
        if (!nt)
            return cl_error(CL_ERR_NOMEM, "%s: tensors", v->file);
        p->t = nt;
        p->ct = c;
    }
    p->t[p->nt] = t;
    CL_TRY(vm_new(v, CL_PK_TENSOR, out));
    p->o[*out].tensor = p->nt++;
    return CL_OK;
}

/* BINPERSID: ('storage', torch.<Type>Storage, key, location, numel) names
 * the zip entry data/<key>, whose size must be numel elements. */
static cl_status persistent_load(vm *v, int32_t pid, int32_t *out)
{
    cl_pickle *p = v->pk;
    const cl_pk_obj *t = &p->o[pid];
    if (t->kind != CL_PK_TUPLE || t->n != 5)
        return vm_fail(v, "%s",
                       "a persistent id that is not a 5-tuple "
                       "('storage', type, key, location, numel)");
    const cl_pk_obj *tag = &p->o[t->items[0]], *type = &p->o[t->items[1]],
                    *key = &p->o[t->items[2]], *numel = &p->o[t->items[4]];
    if (tag->kind != CL_PK_STR || tag->len != 7 || memcmp(tag->s, "storage", 7))
        return vm_fail(v, "%s", "a persistent id whose tag is not 'storage'");
    if (type->kind != CL_PK_GLOBAL)
        return vm_fail(v, "a storage type that is a %s, not a global",
                       kind_names[type->kind]);
    int d = -1;
    for (int k = 0; k < (int)(CL_PK_N_DTYPES); k++)
        if (is_global(type, "torch", cl_pk_dtypes[k].cls))
            d = k;
    if (d < 0) {
        char g[200];
        return vm_fail(v,
                       "storage type %s is not one classic reads (Float, "
                       "Half, BFloat16, Double, Long, Int)",
                       gname(type, g, sizeof g));
    }
    if (key->kind != CL_PK_STR || key->len == 0 || key->len > 64)
        return vm_fail(v, "%s", "a storage key that is not a short string");
    if (numel->kind != CL_PK_INT || numel->i < 0 || numel->i > CL_PK_MAX_NUMEL)
        return vm_fail(v, "%s",
                       "a storage size that is not an int in "
                       "[0, 2^40]");
    uint64_t size = 0;
    const uint8_t *data = v->storage(v->ctx, key->s, key->len, &size);
    if (!data) {
        char m[200];
        snprintf(m, sizeof m,
                 "storage '%.*s' has no entry data/%.*s in the zip",
                 (int)key->len, key->s, (int)key->len, key->s);
        return vm_fail(v, "%s", m);
    }
    if (size != (uint64_t)numel->i * (uint64_t)cl_pk_dtypes[d].size) {
        char m[200];
        snprintf(m, sizeof m,
                 "storage '%.*s' declares %lld %s elements, its entry "
                 "holds %llu bytes",
                 (int)key->len, key->s, (long long)numel->i,
                 cl_pk_dtypes[d].name, (unsigned long long)size);
        return vm_fail(v, "%s", m);
    }
    /* vm_new may move p->o: take what is needed from it first. */
    int64_t count = numel->i;
    CL_TRY(vm_new(v, CL_PK_STORAGE, out));
    cl_pk_obj *o = &p->o[*out];
    o->dtype = (uint8_t)d;
    o->i = count;
    o->data = data;
    return CL_OK;
}

/* REDUCE: callable(*args) for the few callables a state_dict uses; any
 * other callable gives an opaque object that is an error only where the
 * state_dict needs a value (an argparse.Namespace beside it is fine). */
static cl_status reduce(vm *v, int32_t fn, int32_t args, int32_t *out)
{
    cl_pickle *p = v->pk;
    const cl_pk_obj *f = &p->o[fn], *a = &p->o[args];
    if (f->kind != CL_PK_GLOBAL)
        return vm_fail(v, "REDUCE calls a %s, not a global",
                       kind_names[f->kind]);
    if (a->kind != CL_PK_TUPLE)
        return vm_fail(v, "REDUCE's arguments are a %s, not a tuple",
                       kind_names[a->kind]);
    if (is_global(f, "collections", "OrderedDict")) {
        if (a->n != 0)
            return vm_fail(v, "%s", "collections.OrderedDict with arguments");
        return vm_new(v, CL_PK_DICT, out);
    }
    if (is_global(f, "torch._utils", "_rebuild_tensor_v2"))
        return rebuild_tensor(v, a, out);
    if (is_global(f, "torch._utils", "_rebuild_parameter")) {
        if (a->n < 1 || p->o[a->items[0]].kind != CL_PK_TENSOR)
            return vm_fail(v, "%s", "_rebuild_parameter without a tensor");
        *out = a->items[0];
        return CL_OK;
    }
    CL_TRY(vm_new(v, CL_PK_OPAQUE, out));
    cl_pk_obj *o = &p->o[*out];
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
    CL_TRY(vm_new(v, CL_PK_STR, id));
    v->pk->o[*id].s = (const char *)s;
    v->pk->o[*id].len = (uint32_t)len;
    return CL_OK;
}

static cl_status new_int(vm *v, cl_pk_kind k, int64_t x)
{
    int32_t id = 0;
    CL_TRY(vm_new(v, k, &id));
    v->pk->o[id].i = x;
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
    CL_TRY(vm_new(v, CL_PK_TUPLE, &id));
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
                return cl_error(CL_ERR_NOMEM, "%s: pickle memo", v->file);
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
    if (v->pk->o[obj].kind != CL_PK_DICT)
        return vm_fail(v, "SETITEM(S) on a %s, not a dict",
                       kind_names[v->pk->o[obj].kind]);
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
    if (v->pk->o[obj].kind != CL_PK_LIST)
        return vm_fail(v, "APPEND(S) on a %s, not a list",
                       kind_names[v->pk->o[obj].kind]);
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
            if (v->nmarks >= CL_PK_MAX_STACK)
                return vm_fail(v, "%s", "more than 2^20 open MARKs");
            v->marks[v->nmarks++] = v->sp;
            break;
        case '}': /* EMPTY_DICT */
        case ']': /* EMPTY_LIST */
        case ')': /* EMPTY_TUPLE */
            CL_TRY(vm_new(v,
                          op == '}'   ? CL_PK_DICT
                          : op == ']' ? CL_PK_LIST
                                      : CL_PK_TUPLE,
                          &id));
            CL_TRY(vm_push(v, id));
            break;
        case 'N': /* NONE */
            CL_TRY(vm_new(v, CL_PK_NONE, &id));
            CL_TRY(vm_push(v, id));
            break;
        case 0x88: /* NEWTRUE */
        case 0x89: /* NEWFALSE */
            CL_TRY(new_int(v, CL_PK_BOOL, op == 0x88));
            break;
        case 'K': /* BININT1 */
            CL_TRY(need(v, 1));
            v->pc += 1;
            CL_TRY(new_int(v, CL_PK_INT, a[0]));
            break;
        case 'M': /* BININT2 */
            CL_TRY(need(v, 2));
            v->pc += 2;
            CL_TRY(new_int(v, CL_PK_INT, cl_le16(a)));
            break;
        case 'J': /* BININT */
            CL_TRY(need(v, 4));
            v->pc += 4;
            CL_TRY(new_int(v, CL_PK_INT, (int32_t)cl_le32(a)));
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
            CL_TRY(new_int(v, CL_PK_INT, s));
            break;
        }
        case 'G': { /* BINFLOAT: big-endian double */
            CL_TRY(need(v, 8));
            uint64_t u = 0;
            for (int k = 0; k < 8; k++)
                u = u << 8 | a[k];
            v->pc += 8;
            CL_TRY(vm_new(v, CL_PK_FLOAT, &id));
            memcpy(&v->pk->o[id].f, &u, sizeof u);
            CL_TRY(vm_push(v, id));
            break;
        }
        case 'X':   /* BINUNICODE */
        case 'T': { /* BINSTRING */
            CL_TRY(need(v, 4));
            uint64_t len = cl_le32(a);
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
            CL_TRY(vm_new(v, CL_PK_GLOBAL, &id));
            cl_pk_obj *o = &v->pk->o[id];
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
            CL_TRY(vm_new(v, CL_PK_LIST, &id));
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
            const cl_pk_obj *cls = &v->pk->o[x];
            if (cls->kind != CL_PK_GLOBAL)
                return vm_fail(v, "NEWOBJ of a %s, not a global",
                               kind_names[cls->kind]);
            if (is_global(cls, "collections", "OrderedDict"))
                CL_TRY(vm_new(v, CL_PK_DICT, &id));
            else {
                CL_TRY(vm_new(v, CL_PK_OPAQUE, &id));
                cls = &v->pk->o[x];
                v->pk->o[id].s = cls->s;
                v->pk->o[id].len = cls->len;
                v->pk->o[id].s2 = cls->s2;
                v->pk->o[id].len2 = cls->len2;
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
            CL_TRY(memo_put(v, cl_le32(a)));
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
            CL_TRY(memo_get(v, cl_le32(a)));
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

/* ---- the public machine ------------------------------------------------ */

cl_status cl_pickle_run(cl_pickle *pk, const uint8_t *code, size_t n,
                        const char *file, cl_pk_storage_fn storage, void *ctx)
{
    memset(pk, 0, sizeof *pk);
    pk->root = -1;
    vm v;
    memset(&v, 0, sizeof v);
    v.pk = pk;
    v.file = file;
    v.storage = storage;
    v.ctx = ctx;
    v.code = code;
    v.n = n;
    size_t depth = n + 1 < CL_PK_MAX_STACK ? n + 1 : CL_PK_MAX_STACK;
    v.stack = malloc(depth * sizeof *v.stack);
    v.marks = malloc(depth * sizeof *v.marks);
    cl_status s = CL_OK;
    if (!v.stack || !v.marks)
        s = cl_error(CL_ERR_NOMEM, "%s: pickle stack", file);
    if (s == CL_OK)
        s = vm_run(&v, &pk->root);
    free(v.stack);
    free(v.marks);
    free(v.memo);
    return s;
}

void cl_pickle_free_objects(cl_pickle *pk)
{
    if (pk->o)
        for (int32_t k = 0; k < pk->no; k++)
            free(pk->o[k].items);
    free(pk->o);
    pk->o = NULL;
    pk->no = pk->co = 0;
}

void cl_pickle_free(cl_pickle *pk)
{
    cl_pickle_free_objects(pk);
    free(pk->t);
    memset(pk, 0, sizeof *pk);
    pk->root = -1;
}

const char *cl_pickle_describe(const cl_pk_obj *o, char *buf, size_t n)
{
    char g[200];
    if (o->kind == CL_PK_OPAQUE)
        snprintf(buf, n, "a %s object", gname(o, g, sizeof g));
    else if (o->kind == CL_PK_GLOBAL)
        snprintf(buf, n, "the global %s", gname(o, g, sizeof g));
    else
        snprintf(buf, n, "a %s", kind_names[o->kind]);
    return buf;
}
