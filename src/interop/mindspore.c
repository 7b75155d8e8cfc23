/* MindSpore .ckpt import: an audited reader of the checkpoint protobuf and
 * the rules that map MindSpore names onto torchvision's: ResNet (mindcv,
 * model zoo) name by name, mindcv's Swin with its q, k, v stacked into
 * one qkv. */
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

/* Wrapper cells (TrainOneStepCell, WithLossCell) prefix the names. */
static const char *strip_wrappers(const char *ms)
{
    static const char *const wrapper[] = {"network.", "_backbone.", "backbone.",
                                          "model.", NULL};
    for (int again = 1; again;) {
        again = 0;
        for (int i = 0; wrapper[i]; i++)
            if (starts_with(ms, wrapper[i])) {
                ms += strlen(wrapper[i]);
                again = 1;
            }
    }
    return ms;
}

/* Optimizer state and step counters, in any network's checkpoint. */
static int is_bookkeeping(const char *ms)
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
    for (int i = 0; ignore_prefix[i]; i++)
        if (starts_with(ms, ignore_prefix[i]))
            return 1;
    for (int i = 0; ignore_exact[i]; i++)
        if (strcmp(ms, ignore_exact[i]) == 0)
            return 1;
    return 0;
}

int cl_ms_map_name(const char *ms, char *out, size_t n)
{
    ms = strip_wrappers(ms);
    if (is_bookkeeping(ms))
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

/* One rule: a mindcv name (the rest of it, within its scope) and its
 * torchvision name; part 0, 1, 2 for attn.q, .k, .v: rows of qkv. */
typedef struct swin_rule {
    const char *from, *to;
    int part;
} swin_rule;

static const swin_rule swin_top[] = {
    {"patch_embed.proj.weight", "features.0.0.weight", -1},
    {"patch_embed.proj.bias", "features.0.0.bias", -1},
    {"patch_embed.norm.gamma", "features.0.2.weight", -1},
    {"patch_embed.norm.beta", "features.0.2.bias", -1},
    {"norm.gamma", "norm.weight", -1},
    {"norm.beta", "norm.bias", -1},
    {"classifier.weight", "head.weight", -1},
    {"classifier.bias", "head.bias", -1},
    {NULL, NULL, 0}};

/* Within layers.S.blocks.B. (features.{2S+1}.B.). */
static const swin_rule swin_block[] = {
    {"norm1.gamma", "norm1.weight", -1},
    {"norm1.beta", "norm1.bias", -1},
    {"attn.relative_bias.relative_position_bias_table",
     "attn.relative_position_bias_table", -1},
    {"attn.q.weight", "attn.qkv.weight", 0},
    {"attn.k.weight", "attn.qkv.weight", 1},
    {"attn.v.weight", "attn.qkv.weight", 2},
    {"attn.q.bias", "attn.qkv.bias", 0},
    {"attn.k.bias", "attn.qkv.bias", 1},
    {"attn.v.bias", "attn.qkv.bias", 2},
    {"attn.proj.weight", "attn.proj.weight", -1},
    {"attn.proj.bias", "attn.proj.bias", -1},
    {"norm2.gamma", "norm2.weight", -1},
    {"norm2.beta", "norm2.bias", -1},
    {"mlp.fc1.weight", "mlp.0.weight", -1},
    {"mlp.fc1.bias", "mlp.0.bias", -1},
    {"mlp.fc2.weight", "mlp.3.weight", -1},
    {"mlp.fc2.bias", "mlp.3.bias", -1},
    {NULL, NULL, 0}};

/* Within layers.S.downsample. (the patch merging after stage S:
 * features.{2S+2}.). */
static const swin_rule swin_merge[] = {
    {"reduction.weight", "reduction.weight", -1},
    {"norm.gamma", "norm.weight", -1},
    {"norm.beta", "norm.bias", -1},
    {NULL, NULL, 0}};

static int swin_apply(const swin_rule *r, const char *rest, const char *pre,
                      char *out, size_t n, int *part)
{
    for (int i = 0; r[i].from; i++)
        if (strcmp(rest, r[i].from) == 0) {
            int w = snprintf(out, n, "%s%s", pre, r[i].to);
            if (w < 0 || (size_t)w >= n)
                return -1;
            *part = r[i].part;
            return 1;
        }
    return -1;
}

/* "layers.S.<what>." with S written plainly; the rest after it in *rest. */
static int swin_scope(const char *ms, const char *what, int *s, int *b,
                      const char **rest)
{
    char want[64];
    int used = 0;
    *b = -1;
    if (strcmp(what, "blocks") == 0) {
        if (sscanf(ms, "layers.%d.blocks.%d.%n", s, b, &used) != 2 ||
            used == 0 || *s < 0 || *s > 99 || *b < 0 || *b > 999)
            return 0;
        snprintf(want, sizeof want, "layers.%d.blocks.%d.", *s, *b);
    } else {
        if (sscanf(ms, "layers.%d.downsample.%n", s, &used) != 1 || used == 0 ||
            *s < 0 || *s > 99)
            return 0;
        snprintf(want, sizeof want, "layers.%d.downsample.", *s);
    }
    if ((size_t)used != strlen(want) || strncmp(ms, want, strlen(want)) != 0)
        return 0;
    *rest = ms + used;
    return 1;
}

int cl_ms_map_swin_name(const char *ms, char *out, size_t n, int *part)
{
    int s, b;
    const char *rest;
    char pre[48];
    *part = -1;
    ms = strip_wrappers(ms);
    if (is_bookkeeping(ms))
        return 0;
    if (swin_scope(ms, "blocks", &s, &b, &rest)) {
        /* Derived from the window: the one-hot of the bias table's index
         * and the shifted windows' mask. */
        if (strcmp(rest, "attn.relative_bias.index") == 0 ||
            strcmp(rest, "attn_mask") == 0)
            return 0;
        snprintf(pre, sizeof pre, "features.%d.%d.", 2 * s + 1, b);
        return swin_apply(swin_block, rest, pre, out, n, part);
    }
    if (swin_scope(ms, "downsample", &s, &b, &rest)) {
        snprintf(pre, sizeof pre, "features.%d.", 2 * s + 2);
        return swin_apply(swin_merge, rest, pre, out, n, part);
    }
    return swin_apply(swin_top, ms, "", out, n, part);
}

cl_ms_family cl_ms_ckpt_family(const cl_ms_ckpt *c)
{
    for (int i = 0; i < c->n; i++) {
        const char *ms = strip_wrappers(c->t[i].name);
        if (starts_with(ms, "patch_embed.") || starts_with(ms, "layers."))
            return CL_MS_SWIN;
    }
    return CL_MS_RESNET;
}

int cl_ms_map_name_as(const char *ms, cl_ms_family fam, char *out, size_t n,
                      int *part)
{
    *part = -1;
    return fam == CL_MS_SWIN ? cl_ms_map_swin_name(ms, out, n, part)
                             : cl_ms_map_name(ms, out, n);
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

/* ---- the plan: torchvision tensors from checkpoint tensors ------------- */

/* One torchvision tensor made from the checkpoint: one of its tensors, or
 * (Swin's attn.qkv) the rows of q, k and v stacked in that order, or (a
 * Swin's relative_position_index, which mindcv does not save) computed. */
typedef struct ms_entry {
    char name[160]; /* torchvision's; the checkpoint's when unmapped */
    char from[136]; /* the checkpoint's, for messages */
    int mapped;     /* 0: a name the rules do not know */
    int n_part;     /* 1, 3 (q, k, v), or 0 (computed) */
    int part[3];    /* checkpoint tensor of each part; -1: missing */
    int which;      /* before merging: the part (q 0, k 1, v 2) it holds */
    int index_ws;   /* n_part 0: the window of the computed index */
    cl_shape shape; /* the tensor's: the parts' rows added up */
    int dead;       /* merged into another entry */
} ms_entry;

typedef struct ms_plan {
    ms_entry *e;
    int n;
    cl_ms_family family;
} ms_plan;

static void ms_plan_free(ms_plan *p)
{
    cl_free(p->e);
    memset(p, 0, sizeof *p);
}

/* A name to sort by and the entry it belongs to. */
typedef struct name_ix {
    const char *name;
    int i;
} name_ix;

/* By torchvision name, then file order. */
static int by_entry(const void *a, const void *b)
{
    const name_ix *x = a, *y = b;
    int d = strcmp(x->name, y->name);
    return d ? d : (x->i > y->i) - (x->i < y->i);
}

/* The checkpoint name of part k (q, k or v) beside present, an attn.q /
 * attn.k / attn.v name. */
static void part_name(const char *present, int k, char *out, size_t n)
{
    snprintf(out, n, "%s", present);
    char *a = strstr(out, ".attn.");
    if (a && a[6] && a[7] == '.')
        a[6] = "qkv"[k];
}

/* Merges the q, k and v entries of each qkv (sorted next to each other),
 * checks that the three are there with one shape, and refuses two
 * checkpoint names mapping onto one torchvision name. */
static cl_status ms_plan_merge(ms_plan *p, const cl_ms_ckpt *c,
                               const char *path)
{
    if (p->n < 1)
        return CL_OK;
    name_ix *ix = cl_alloc((size_t)p->n * sizeof *ix, "checkpoint plan");
    if (!ix)
        return CL_ERR_NOMEM;
    for (int i = 0; i < p->n; i++)
        ix[i] = (name_ix){p->e[i].name, i};
    qsort(ix, (size_t)p->n, sizeof *ix, by_entry);
    char list[900] = "";
    int count = 0;
    for (int i = 0; i < p->n;) {
        int j = i + 1;
        while (j < p->n && strcmp(p->e[ix[i].i].name, p->e[ix[j].i].name) == 0)
            j++;
        ms_entry *lead = &p->e[ix[i].i];
        int stacked = 1, plain = 0;
        for (int k = i; k < j; k++) {
            stacked &= p->e[ix[k].i].n_part == 3;
            plain += p->e[ix[k].i].n_part != 3;
        }
        char item[640];
        if (plain && j - i > 1) {
            snprintf(item, sizeof item, "%s and %s both map to %s", lead->from,
                     p->e[ix[i + 1].i].from, lead->name);
            list_add(list, sizeof list, &count, item);
        }
        if (stacked) {
            /* Gather the run's parts into its first entry, the lead. */
            int got[3] = {-1, -1, -1}, twice = 0;
            for (int k = i; k < j; k++) {
                ms_entry *e = &p->e[ix[k].i];
                if (got[e->which] >= 0)
                    twice = 1;
                got[e->which] = e->part[0];
                if (e != lead)
                    e->dead = 1;
            }
            const char *any = c->t[got[0] >= 0   ? got[0]
                                   : got[1] >= 0 ? got[1]
                                                 : got[2]]
                                  .name;
            char nm[136], a[64], b[64];
            for (int k = 0; k < 3; k++)
                lead->part[k] = got[k];
            if (twice) {
                snprintf(item, sizeof item,
                         "two checkpoint names for one of q, k, v of %s",
                         lead->name);
                list_add(list, sizeof list, &count, item);
            }
            for (int k = 0; k < 3; k++)
                if (got[k] < 0) {
                    part_name(any, k, nm, sizeof nm);
                    snprintf(item, sizeof item,
                             "%s missing (%s stacks q, k and v)", nm,
                             lead->name);
                    list_add(list, sizeof list, &count, item);
                }
            int first = got[0] >= 0 ? 0 : got[1] >= 0 ? 1 : 2;
            const char first_c = "qkv"[first];
            const cl_shape *s0 = &c->t[got[first]].shape;
            for (int k = 0; k < 3; k++)
                if (got[k] >= 0 && !same_shape(&c->t[got[k]].shape, s0)) {
                    shape_str(&c->t[got[k]].shape, a, sizeof a);
                    shape_str(s0, b, sizeof b);
                    snprintf(item, sizeof item,
                             "%s is %s where %c is %s (q, k and v must "
                             "have one shape to stack into %s)",
                             c->t[got[k]].name, a, first_c, b, lead->name);
                    list_add(list, sizeof list, &count, item);
                }
            if (s0->ndim < 1 || s0->d[0] > ((int64_t)1 << 40)) {
                shape_str(s0, a, sizeof a);
                snprintf(item, sizeof item, "%s is %s: no rows to stack",
                         c->t[got[first]].name, a);
                list_add(list, sizeof list, &count, item);
            } else {
                lead->shape = *s0;
                lead->shape.d[0] = 3 * s0->d[0];
            }
            part_name(any, 0, nm, sizeof nm);
            char *a6 = strstr(nm, ".attn.");
            if (a6 && a6[6] && a6[7] == '.') {
                a6[6] = '\0';
                /* A longer name is cut, in a message only. */
                snprintf(lead->from, sizeof lead->from, "%.100s{q,k,v}%.28s",
                         nm, a6 + 7);
            }
        }
        i = j;
    }
    cl_free(ix);
    if (count)
        return cl_error(CL_ERR_FORMAT,
                        "%s: %d tensor(s) do not map one to one "
                        "[%s%s]",
                        path, count, list, count > 8 ? ", ..." : "");
    int o = 0;
    for (int i = 0; i < p->n; i++)
        if (!p->e[i].dead)
            p->e[o++] = p->e[i];
    p->n = o;
    return CL_OK;
}

/* The window whose bias table has rows rows ((2 ws - 1)^2); 0 if none. */
static int window_of(int64_t rows)
{
    for (int ws = 1; ws <= 64; ws++)
        if ((int64_t)(2 * ws - 1) * (2 * ws - 1) == rows)
            return ws;
    return 0;
}

/* The torchvision tensors of checkpoint c.  Ignored entries go to rep (may
 * be NULL); with_index adds, beside each Swin bias table, the
 * relative_position_index it is read by (computed: mindcv saves a one-hot
 * of it instead). */
static cl_status ms_plan_build(ms_plan *p, const cl_ms_ckpt *c,
                               const char *path, cl_ms_report *rep,
                               int with_index)
{
    memset(p, 0, sizeof *p);
    p->family = cl_ms_ckpt_family(c);
    size_t cap = (size_t)c->n * (with_index ? 2 : 1) + 1;
    p->e = cl_alloc(cap * sizeof *p->e, "checkpoint plan");
    if (!p->e)
        return CL_ERR_NOMEM;
    memset(p->e, 0, cap * sizeof *p->e);
    for (int i = 0; i < c->n; i++) {
        ms_entry *e = &p->e[p->n];
        int part = -1;
        int m = cl_ms_map_name_as(c->t[i].name, p->family, e->name,
                                  sizeof e->name, &part);
        if (m == 0) {
            if (rep)
                list_add(rep->ignored_list, sizeof rep->ignored_list,
                         &rep->ignored, c->t[i].name);
            continue;
        }
        if (m < 0)
            snprintf(e->name, sizeof e->name, "%s", c->t[i].name);
        snprintf(e->from, sizeof e->from, "%s", c->t[i].name);
        e->mapped = m > 0;
        e->n_part = part >= 0 ? 3 : 1;
        e->part[0] = i;
        e->which = part >= 0 ? part : 0;
        e->shape = c->t[i].shape;
        p->n++;
    }
    cl_status s = ms_plan_merge(p, c, path);
    if (s != CL_OK) {
        ms_plan_free(p);
        return s;
    }
    if (!with_index || p->family != CL_MS_SWIN)
        return CL_OK;
    const char *tb = "attn.relative_position_bias_table";
    for (int i = 0, n = p->n; i < n; i++) {
        const ms_entry *e = &p->e[i];
        size_t l = strlen(e->name), k = strlen(tb);
        int ws = e->shape.ndim == 2 ? window_of(e->shape.d[0]) : 0;
        if (!e->mapped || l < k || strcmp(e->name + l - k, tb) != 0 || !ws)
            continue;
        char pre[160];
        snprintf(pre, sizeof pre, "%.*s", (int)(l - k), e->name);
        ms_entry *x = &p->e[p->n];
        if (snprintf(x->name, sizeof x->name, "%sattn.relative_position_index",
                     pre) >= (int)sizeof x->name)
            continue; /* too long for a graph name: reported missing */
        p->n++;
        snprintf(x->from, sizeof x->from, "(computed for window %d)", ws);
        x->mapped = 1;
        x->n_part = 0;
        x->index_ws = ws;
        x->shape.ndim = 1;
        x->shape.d[0] = (int64_t)ws * ws * ws * ws;
    }
    return CL_OK;
}

static int is_rel_index(const char *name)
{
    const char *k = "attn.relative_position_index";
    size_t n = strlen(name), l = strlen(k);
    return n >= l && strcmp(name + n - l, k) == 0;
}

/* Entry e's parts as f32 into dst (its element count n), row blocks in
 * the order q, k, v. */
static void entry_to_f32(const cl_ms_ckpt *c, const ms_entry *e, float *dst,
                         size_t n)
{
    size_t each = n / (size_t)e->n_part;
    for (int k = 0; k < e->n_part; k++)
        to_f32(&c->t[e->part[k]], dst + (size_t)k * each, each);
}

cl_status cl_ms_load(const char *path, cl_graph *g, cl_ckpt_mode mode,
                     cl_ms_report *rep)
{
    cl_ms_ckpt c;
    cl_ms_report local;
    ms_plan p;
    if (!rep)
        rep = &local;
    memset(rep, 0, sizeof *rep);
    cl_status s = cl_ms_ckpt_open(&c, path);
    if (s != CL_OK)
        return s;
    if ((s = ms_plan_build(&p, &c, path, rep, 0)) != CL_OK) {
        cl_ms_ckpt_close(&c);
        return s;
    }
    int *src = cl_alloc((size_t)g->n_tensors * sizeof *src, "ckpt map");
    if (!src) {
        s = CL_ERR_NOMEM;
        goto done;
    }
    int swin_graph = cl_graph_find(g, "features.0.0.weight") >= 0;
    if ((p.family == CL_MS_SWIN) != swin_graph) {
        s = cl_error(CL_ERR_FORMAT,
                     "%s: a MindSpore %s checkpoint (by its names) for a "
                     "%s model",
                     path, p.family == CL_MS_SWIN ? "Swin" : "ResNet",
                     swin_graph ? "Swin" : "ResNet");
        goto done;
    }
    for (int t = 0; t < g->n_tensors; t++)
        src[t] = -1;
    char unknown[400] = "", bad[600] = "", missing[400] = "";
    int n_unknown = 0, n_bad = 0, n_missing = 0;
    for (int i = 0; i < p.n; i++) {
        const ms_entry *e = &p.e[i];
        int t = e->mapped ? cl_graph_find(g, e->name) : -1;
        if (t < 0 || ends_with_nbt(e->name) ||
            !cl_gtensor_saved(&g->tensors[t])) {
            list_add(unknown, sizeof unknown, &n_unknown, e->from);
            continue;
        }
        const cl_gtensor *gt = &g->tensors[t];
        int floats = 1;
        for (int k = 0; k < e->n_part; k++)
            if (!is_float(c.t[e->part[k]].dtype)) {
                char item[200];
                snprintf(item, sizeof item, "%s is %s", c.t[e->part[k]].name,
                         c.t[e->part[k]].dtype);
                list_add(bad, sizeof bad, &n_bad, item);
                floats = 0;
            }
        if (!floats)
            continue;
        if (!same_shape(&e->shape, &gt->shape)) {
            char a[64], b[64], item[300];
            shape_str(&e->shape, a, sizeof a);
            shape_str(&gt->shape, b, sizeof b);
            if (mode == CL_CKPT_PRETRAINED &&
                (gt->param_flags & CL_PARAM_HEAD)) {
                size_t l = strlen(rep->head_note);
                snprintf(rep->head_note + l, sizeof rep->head_note - l,
                         "%s%s %s in the file, %s in the model", l ? "; " : "",
                         e->name, a, b);
                rep->head_skipped++;
                src[t] = -2;
                continue;
            }
            snprintf(item, sizeof item, "%s %s in the file, %s in the model",
                     e->from, a, b);
            list_add(bad, sizeof bad, &n_bad, item);
            continue;
        }
        src[t] = i;
    }
    for (int t = 0; t < g->n_tensors; t++) {
        const cl_gtensor *gt = &g->tensors[t];
        /* mindcv saves no relative_position_index: the builder's stays. */
        if (cl_gtensor_saved(gt) && src[t] == -1 && !ends_with_nbt(gt->name) &&
            !(p.family == CL_MS_SWIN && is_rel_index(gt->name)))
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
    }
    for (int t = 0; t < g->n_tensors; t++) {
        if (src[t] < 0)
            continue;
        const cl_gtensor *gt = &g->tensors[t];
        float *dst = gt->kind == CL_GT_PARAM ? cl_graph_param(g, t)
                                             : cl_graph_buffer(g, t);
        entry_to_f32(&c, &p.e[src[t]], dst, (size_t)cl_graph_numel(g, t));
        rep->loaded++;
    }
done:
    cl_free(src);
    ms_plan_free(&p);
    cl_ms_ckpt_close(&c);
    return s;
}

/* ---- as named tensors ------------------------------------------------- */

struct cl_ms_named {
    cl_ms_ckpt c;
    ms_plan p;
};

cl_status cl_ms_named_open(cl_ms_named **out, const char *path)
{
    *out = NULL;
    cl_ms_named *m = calloc(1, sizeof *m);
    if (!m)
        return cl_error(CL_ERR_NOMEM, "%s: out of memory", path);
    cl_status s = cl_ms_ckpt_open(&m->c, path);
    if (s == CL_OK)
        s = ms_plan_build(&m->p, &m->c, path, NULL, 1);
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
    ms_plan_free(&m->p);
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
    const ms_entry *e = &m->p.e[i];
    if (e->n_part == 0)
        return cl_error(CL_ERR_FORMAT, "%s is an integer index, not floats",
                        e->name);
    for (int k = 0; k < e->n_part; k++) {
        const cl_ms_tensor *t = &m->c.t[e->part[k]];
        if (!is_float(t->dtype))
            return cl_error(CL_ERR_FORMAT, "%s is %s, not a floating type",
                            t->name, t->dtype);
    }
    if ((size_t)cl_shape_numel(&e->shape) != n)
        return cl_error(CL_ERR_SHAPE, "%s: %lld elements, %zu expected",
                        e->from, (long long)cl_shape_numel(&e->shape), n);
    entry_to_f32(&m->c, e, dst, n);
    return CL_OK;
}

static cl_status named_read_i64(const void *ctx, size_t i, int64_t *dst,
                                size_t n)
{
    const cl_ms_named *m = ctx;
    const ms_entry *e = &m->p.e[i];
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
