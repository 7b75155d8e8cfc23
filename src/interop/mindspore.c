/* MindSpore .ckpt import: an audited reader of the checkpoint protobuf and
 * the rules that map MindSpore ResNet names (mindcv, model zoo) onto
 * torchvision's. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "interop/interop.h"
#include "interop/protobuf.h"
#include "tensor/tensor.h"

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
                /* One varint, at most ten bytes, inside the field. */
                uint64_t v = 0;
                int i = 0, done = 0;
                for (; i < 10 && pr.pos < pr.n; i++) {
                    uint8_t b = pr.p[pr.pos++];
                    v |= (uint64_t)(b & 0x7f) << (7 * i);
                    if (!(b & 0x80)) {
                        done = 1;
                        break;
                    }
                }
                if (!done || t->shape.ndim == CL_MAX_DIMS ||
                    v > ((uint64_t)1 << 40))
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

/* ---- names ------------------------------------------------------------ */

static int starts_with(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

int cl_ms_map_name(const char *ms, char *out, size_t n)
{
    static const char *const ignore_prefix[] = {
        "moments.", "accu_grads.", "adam_m.",  "adam_v.",      "moment1.",
        "moment2.", "stat.",       "success.", "global_step_", NULL};
    static const char *const ignore_exact[] = {"learning_rate",
                                               "global_step",
                                               "momentum",
                                               "beta1_power",
                                               "beta2_power",
                                               "epoch_num",
                                               "step_num",
                                               "current_iterator_step",
                                               "last_overflow_iterator_step",
                                               "scale_sense",
                                               "loss_scale",
                                               NULL};
    static const char *const wrapper[] = {"network.", "_backbone.", "backbone.",
                                          "model.", NULL};
    /* Wrapper cells (TrainOneStepCell, WithLossCell) prefix the names. */
    for (int again = 1; again;) {
        again = 0;
        for (int i = 0; wrapper[i]; i++)
            if (starts_with(ms, wrapper[i])) {
                ms += strlen(wrapper[i]);
                again = 1;
            }
    }
    for (int i = 0; ignore_prefix[i]; i++)
        if (starts_with(ms, ignore_prefix[i]))
            return 0;
    for (int i = 0; ignore_exact[i]; i++)
        if (strcmp(ms, ignore_exact[i]) == 0)
            return 0;
    /* Segment by segment. */
    static const char *const seg_from[] = {"down_sample_layer",
                                           "down_sample",
                                           "end_point",
                                           "classifier",
                                           "bn1d",
                                           "bn2d",
                                           NULL};
    static const char *const seg_to[] = {"downsample", "downsample", "fc",
                                         "fc",         "bn1",        "bn2"};
    static const char *const leaf_from[] = {"gamma", "beta", "moving_mean",
                                            "moving_variance", NULL};
    static const char *const leaf_to[] = {"weight", "bias", "running_mean",
                                          "running_var"};
    size_t o = 0;
    const char *p = ms;
    out[0] = '\0';
    while (*p) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        char seg[128];
        if (len >= sizeof seg)
            return -1;
        memcpy(seg, p, len);
        seg[len] = '\0';
        const char *rep = seg;
        const char *const *from = dot ? seg_from : leaf_from;
        const char *const *to = dot ? seg_to : leaf_to;
        for (int i = 0; from[i]; i++)
            if (strcmp(seg, from[i]) == 0)
                rep = to[i];
        int w = snprintf(out + o, n - o, "%s%s", o ? "." : "", rep);
        if (w < 0 || (size_t)w >= n - o)
            return -1;
        o += (size_t)w;
        p = dot ? dot + 1 : p + len;
    }
    return 1;
}

/* ---- loading ---------------------------------------------------------- */

/* MindSpore has no num_batches_tracked; classic's stay as they are. */
static int ends_with_nbt(const char *s)
{
    size_t n = strlen(s), k = strlen("num_batches_tracked");
    return n >= k && strcmp(s + n - k, "num_batches_tracked") == 0;
}

static void to_f32(const cl_ms_tensor *t, float *dst, size_t n)
{
    const uint8_t *p = t->data;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(t->dtype, "Float32") == 0) {
            memcpy(&dst[i], p + 4 * i, 4);
        } else if (strcmp(t->dtype, "Float64") == 0) {
            double d;
            memcpy(&d, p + 8 * i, 8);
            dst[i] = (float)d;
        } else {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = strcmp(t->dtype, "Float16") == 0 ? cl_f32_from_f16(h)
                                                      : cl_f32_from_bf16(h);
        }
    }
}

static int is_float(const char *dtype)
{
    return strcmp(dtype, "Float32") == 0 || strcmp(dtype, "Float16") == 0 ||
           strcmp(dtype, "BFloat16") == 0 || strcmp(dtype, "Float64") == 0;
}

static void list_add(char *list, size_t n, int *count, const char *item)
{
    if (*count < 8) {
        size_t l = strlen(list);
        snprintf(list + l, n - l, "%s%s", l ? ", " : "", item);
    }
    (*count)++;
}

static void shape_str(const cl_shape *s, char *buf, size_t n)
{
    size_t o = 0;
    o += (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < s->ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "",
                              (long long)s->d[i]);
    if (o < n)
        snprintf(buf + o, n - o, ")");
}

static int same_shape(const cl_shape *a, const cl_shape *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->d[i] != b->d[i])
            return 0;
    return 1;
}

cl_status cl_ms_load(const char *path, cl_graph *g, cl_ckpt_mode mode,
                     cl_ms_report *rep)
{
    cl_ms_ckpt c;
    cl_ms_report local;
    cl_status s = cl_ms_ckpt_open(&c, path);
    if (s != CL_OK)
        return s;
    if (!rep)
        rep = &local;
    memset(rep, 0, sizeof *rep);
    int *src = cl_alloc((size_t)g->n_tensors * sizeof *src, "ckpt map");
    if (!src) {
        cl_ms_ckpt_close(&c);
        return CL_ERR_NOMEM;
    }
    for (int t = 0; t < g->n_tensors; t++)
        src[t] = -1;
    char unknown[400] = "", bad[600] = "", missing[400] = "";
    int n_unknown = 0, n_bad = 0, n_missing = 0;
    for (int i = 0; i < c.n; i++) {
        char name[160];
        int m = cl_ms_map_name(c.t[i].name, name, sizeof name);
        if (m == 0) {
            list_add(rep->ignored_list, sizeof rep->ignored_list, &rep->ignored,
                     c.t[i].name);
            continue;
        }
        int t = m > 0 ? cl_graph_find(g, name) : -1;
        if (t < 0 || ends_with_nbt(name)) {
            list_add(unknown, sizeof unknown, &n_unknown, c.t[i].name);
            continue;
        }
        const cl_gtensor *gt = &g->tensors[t];
        if (!is_float(c.t[i].dtype)) {
            char item[200];
            snprintf(item, sizeof item, "%s is %s", c.t[i].name, c.t[i].dtype);
            list_add(bad, sizeof bad, &n_bad, item);
            continue;
        }
        if (!same_shape(&c.t[i].shape, &gt->shape)) {
            char a[64], b[64], item[300];
            shape_str(&c.t[i].shape, a, sizeof a);
            shape_str(&gt->shape, b, sizeof b);
            if (mode == CL_CKPT_PRETRAINED &&
                (gt->param_flags & CL_PARAM_HEAD)) {
                size_t l = strlen(rep->head_note);
                snprintf(rep->head_note + l, sizeof rep->head_note - l,
                         "%s%s %s in the file, %s in the model", l ? "; " : "",
                         name, a, b);
                rep->head_skipped++;
                src[t] = -2;
                continue;
            }
            snprintf(item, sizeof item, "%s %s in the file, %s in the model",
                     c.t[i].name, a, b);
            list_add(bad, sizeof bad, &n_bad, item);
            continue;
        }
        src[t] = i;
    }
    for (int t = 0; t < g->n_tensors; t++) {
        const cl_gtensor *gt = &g->tensors[t];
        if (cl_gtensor_saved(gt) &&
            src[t] == -1 && !ends_with_nbt(gt->name))
            list_add(missing, sizeof missing, &n_missing, gt->name);
    }
    if (n_unknown || n_bad || n_missing) {
        s = cl_error(CL_ERR_FORMAT,
                     "%s: does not fit the model: %d unknown name(s)%s%s%s; "
                     "%d mismatch(es)%s%s%s; %d missing%s%s%s",
                     path, n_unknown, n_unknown ? " [" : "", unknown,
                     n_unknown ? "]" : "", n_bad, n_bad ? " [" : "", bad,
                     n_bad ? "]" : "", n_missing, n_missing ? " [" : "",
                     missing, n_missing ? "]" : "");
        goto done;
    }
    for (int t = 0; t < g->n_tensors; t++) {
        if (src[t] < 0)
            continue;
        const cl_gtensor *gt = &g->tensors[t];
        if (gt->dtype == CL_I64) {
            s = cl_error(CL_ERR_UNSUPPORTED,
                         "%s: %s is an integer buffer, which the MindSpore "
                         "reader does not convert",
                         path, gt->name);
            goto done;
        }
        float *dst = gt->kind == CL_GT_PARAM ? cl_graph_param(g, t)
                                             : cl_graph_buffer(g, t);
        to_f32(&c.t[src[t]], dst, (size_t)cl_graph_numel(g, t));
        rep->loaded++;
    }
done:
    cl_free(src);
    cl_ms_ckpt_close(&c);
    return s;
}

/* ---- as named tensors ------------------------------------------------- */

struct cl_ms_named {
    cl_ms_ckpt c;
    int n;
    int *idx;          /* the checkpoint tensor of each kept entry */
    char (*name)[160]; /* its torchvision name */
};

cl_status cl_ms_named_open(cl_ms_named **out, const char *path)
{
    *out = NULL;
    cl_ms_named *m = calloc(1, sizeof *m);
    if (!m)
        return cl_error(CL_ERR_NOMEM, "%s: out of memory", path);
    cl_status s = cl_ms_ckpt_open(&m->c, path);
    if (s != CL_OK) {
        free(m);
        return s;
    }
    m->idx = calloc((size_t)m->c.n + 1, sizeof *m->idx);
    m->name = calloc((size_t)m->c.n + 1, sizeof *m->name);
    if (!m->idx || !m->name) {
        cl_ms_named_close(m);
        return cl_error(CL_ERR_NOMEM, "%s: out of memory", path);
    }
    for (int i = 0; i < m->c.n; i++) {
        int r =
            cl_ms_map_name(m->c.t[i].name, m->name[m->n], sizeof m->name[m->n]);
        if (r == 0)
            continue; /* optimizer state, step counters */
        if (r < 0)    /* unmappable: kept as is, for a strict load to name */
            snprintf(m->name[m->n], sizeof m->name[m->n], "%s", m->c.t[i].name);
        m->idx[m->n++] = i;
    }
    *out = m;
    return CL_OK;
}

void cl_ms_named_close(cl_ms_named *m)
{
    if (!m)
        return;
    cl_ms_ckpt_close(&m->c);
    free(m->idx);
    free(m->name);
    free(m);
}

static size_t named_count(const void *ctx)
{
    return (size_t)((const cl_ms_named *)ctx)->n;
}

static const char *named_name(const void *ctx, size_t i)
{
    return ((const cl_ms_named *)ctx)->name[i];
}

static long named_find(const void *ctx, const char *name)
{
    const cl_ms_named *m = ctx;
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->name[i], name) == 0)
            return i;
    return -1;
}

static cl_shape named_shape(const void *ctx, size_t i)
{
    const cl_ms_named *m = ctx;
    return m->c.t[m->idx[i]].shape;
}

static cl_status named_read_f32(const void *ctx, size_t i, float *dst, size_t n)
{
    const cl_ms_named *m = ctx;
    const cl_ms_tensor *t = &m->c.t[m->idx[i]];
    if (!is_float(t->dtype))
        return cl_error(CL_ERR_FORMAT, "%s is %s, not a floating type", t->name,
                        t->dtype);
    if ((size_t)cl_shape_numel(&t->shape) != n)
        return cl_error(CL_ERR_SHAPE, "%s: %lld elements, %zu expected",
                        t->name, (long long)cl_shape_numel(&t->shape), n);
    to_f32(t, dst, n);
    return CL_OK;
}

static cl_status named_read_i64(const void *ctx, size_t i, int64_t *dst,
                                size_t n)
{
    const cl_ms_named *m = ctx;
    const cl_ms_tensor *t = &m->c.t[m->idx[i]];
    if (strcmp(t->dtype, "Int64") != 0)
        return cl_error(CL_ERR_FORMAT, "%s is %s, not Int64", t->name,
                        t->dtype);
    if ((size_t)cl_shape_numel(&t->shape) != n)
        return cl_error(CL_ERR_SHAPE, "%s: %lld elements, %zu expected",
                        t->name, (long long)cl_shape_numel(&t->shape), n);
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
