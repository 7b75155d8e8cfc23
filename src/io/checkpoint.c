/* Model and training-state checkpoints on top of the safetensors format. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"

static int is_counter(const cl_gtensor *t)
{
    const char *s = strrchr(t->name, '.');
    return t->kind == CL_GT_BUFFER && s &&
           strcmp(s, ".num_batches_tracked") == 0;
}

static int is_state(const cl_gtensor *t)
{
    return cl_gtensor_saved(t);
}

/* An integer buffer: int64 in the graph and in the file. */
static int is_i64(const cl_gtensor *t)
{
    return t->kind == CL_GT_BUFFER && t->dtype == CL_I64;
}

/* Queues g's parameters and buffers, taken from the arenas params and
 * buffers (g's own, or an EMA of g's layout), under prefix + name; the
 * counters are converted into counters[0..n_counters). */
static cl_status add_tensors(cl_st_writer *w, const cl_graph *g,
                             const char *prefix, const float *params,
                             const float *buffers, int64_t *counters)
{
    char name[sizeof g->tensors[0].name + 8];
    int k = 0;
    for (int i = 0; i < g->n_tensors; i++) {
        const cl_gtensor *t = &g->tensors[i];
        if (!is_state(t))
            continue;
        const float *data =
            (t->kind == CL_GT_PARAM ? params : buffers) + t->offset;
        snprintf(name, sizeof name, "%s%s", prefix, t->name);
        cl_status s;
        if (is_counter(t)) {
            counters[k] = (int64_t)data[0];
            s = cl_st_writer_add(w, name, CL_ST_I64, cl_shape_make(0, NULL),
                                 &counters[k]);
            k++;
        } else if (is_i64(t)) {
            s = cl_st_writer_add(w, name, CL_ST_I64, t->shape, data);
        } else {
            s = cl_st_writer_add(w, name, CL_ST_F32, t->shape, data);
        }
        if (s != CL_OK)
            return s;
    }
    return CL_OK;
}

cl_status cl_ckpt_save_model(const char *path, const cl_graph *g,
                             const cl_ckpt_kv *meta, int n_meta)
{
    return cl_ckpt_save_model_ema(path, g, NULL, NULL, meta, n_meta);
}

cl_status cl_ckpt_save_model_ema(const char *path, const cl_graph *g,
                                 const float *ema_params,
                                 const float *ema_buffers,
                                 const cl_ckpt_kv *meta, int n_meta)
{
    cl_st_writer *w = NULL;
    int64_t *counters = NULL;
    cl_status s;
    int n_counters = 0;
    for (int i = 0; i < g->n_tensors; i++)
        n_counters += is_counter(&g->tensors[i]);
    /* Room for the weights' counters and the average's. */
    counters = cl_alloc((size_t)(2 * n_counters + 1) * sizeof *counters,
                        "checkpoint counters");
    if (!counters)
        return CL_ERR_NOMEM;
    if ((s = cl_st_writer_new(&w)) != CL_OK ||
        (s = add_tensors(w, g, "", g->params, g->buffers, counters)) != CL_OK)
        goto fail;
    if (ema_params &&
        (s = add_tensors(w, g, CL_CKPT_EMA_PREFIX, ema_params, ema_buffers,
                         counters + n_counters)) != CL_OK)
        goto fail;
    for (int i = 0; i < n_meta; i++)
        if ((s = cl_st_writer_meta(w, meta[i].key, meta[i].value)) != CL_OK)
            goto fail;
    s = cl_st_writer_save(w, path);
fail:
    cl_st_writer_free(w);
    cl_free(counters);
    return s;
}

/* Appends name to a "a, b, c" list of at most 8 names, counting the rest. */
static void list_add(char *buf, size_t n, int *count, const char *name)
{
    size_t len = strlen(buf);
    if (*count < 8)
        snprintf(buf + len, n - len, "%s'%s'", *count ? ", " : "", name);
    (*count)++;
}

static cl_status list_error(const char *path, const char *what, char *buf,
                            int count)
{
    if (count > 8)
        return cl_error(CL_ERR_FORMAT, "%s: %d %s: %s and %d more", path, count,
                        what, buf, count - 8);
    return cl_error(CL_ERR_FORMAT, "%s: %d %s: %s", path, count, what, buf);
}

static size_t st_count(const void *ctx)
{
    return cl_st_count(ctx);
}

static const char *st_name(const void *ctx, size_t i)
{
    return cl_st_name(ctx, i);
}

static long st_find(const void *ctx, const char *name)
{
    return cl_st_find(ctx, name);
}

static cl_shape st_shape(const void *ctx, size_t i)
{
    cl_shape s;
    cl_st_info(ctx, i, NULL, &s);
    return s;
}

static cl_status st_read_f32(const void *ctx, size_t i, float *dst, size_t n)
{
    return cl_st_read_f32(ctx, i, dst, n);
}

static cl_status st_read_i64(const void *ctx, size_t i, int64_t *dst, size_t n)
{
    return cl_st_read_i64(ctx, i, dst, n);
}

cl_ckpt_source cl_ckpt_source_st(const cl_st_file *f, const char *path)
{
    cl_ckpt_source src = {
        path,     f,           st_count,    st_name, st_find,
        st_shape, st_read_f32, st_read_i64, 0,       CL_CKPT_PICK_EMA};
    return src;
}

cl_status cl_ckpt_load_model(const char *path, cl_graph *g, cl_ckpt_mode mode,
                             cl_ckpt_load_report *rep)
{
    return cl_ckpt_load_model_pick(path, g, mode, CL_CKPT_PICK_EMA, rep);
}

cl_status cl_ckpt_load_model_pick(const char *path, cl_graph *g,
                                  cl_ckpt_mode mode, cl_ckpt_pick pick,
                                  cl_ckpt_load_report *rep)
{
    cl_st_file *f = NULL;
    CL_TRY(cl_st_open(&f, path));
    cl_ckpt_source src = cl_ckpt_source_st(f, path);
    src.pick = pick;
    cl_status s = cl_ckpt_load_source(&src, g, mode, rep);
    cl_st_close(f);
    return s;
}

static int ema_name(const char *name)
{
    return strncmp(name, CL_CKPT_EMA_PREFIX, strlen(CL_CKPT_EMA_PREFIX)) == 0;
}

int cl_ckpt_source_has_ema(const cl_ckpt_source *src)
{
    for (size_t i = 0; i < src->count(src->ctx); i++)
        if (ema_name(src->name(src->ctx, i)))
            return 1;
    return 0;
}

/* A ResNet's stem conv (conv1.weight, (64, C, k, k)) of another input
 * channel count or kernel than the model's: torchvision's ImageNet stem
 * (7x7 on RGB) against a CIFAR one (3x3, often on gray), the commonest
 * mismatch when fine-tuning, named as such. */
static int stem_differs(const cl_gtensor *gt, const cl_shape *fs)
{
    return strcmp(gt->name, "conv1.weight") == 0 && fs->ndim == 4 &&
           gt->shape.ndim == 4 && fs->d[0] == gt->shape.d[0] &&
           (fs->d[1] != gt->shape.d[1] || fs->d[2] != gt->shape.d[2]);
}

cl_status cl_ckpt_load_source(const cl_ckpt_source *src, cl_graph *g,
                              cl_ckpt_mode mode, cl_ckpt_load_report *rep)
{
    const char *path = src->path;
    const void *f = src->ctx;
    float *staging = NULL;
    char list[640] = "";
    char dims[2][96];
    int count = 0;
    cl_status s = CL_OK;
    cl_ckpt_load_report r;
    memset(&r, 0, sizeof r);
    /* The weights or their average: the same names, prefixed or not. */
    const int has_ema = cl_ckpt_source_has_ema(src);
    if (src->pick == CL_CKPT_PICK_EMA_ONLY && !has_ema)
        return cl_error(CL_ERR_FORMAT,
                        "%s: holds no EMA of its weights (no '%s' tensors)",
                        path, CL_CKPT_EMA_PREFIX);
    r.ema = has_ema && src->pick != CL_CKPT_PICK_RAW;
    const char *prefix = r.ema ? CL_CKPT_EMA_PREFIX : "";
    char fname[sizeof g->tensors[0].name + 8];
    /* Every name in the file must be known to the model. */
    for (size_t i = 0; i < src->count(f); i++) {
        const char *nm = src->name(f, i);
        int t = cl_graph_find(
            g, has_ema && ema_name(nm) ? nm + strlen(CL_CKPT_EMA_PREFIX) : nm);
        if (t < 0 || !is_state(&g->tensors[t]))
            list_add(list, sizeof list, &count, nm);
    }
    if (count) {
        s = list_error(path, "tensors unknown to the model", list, count);
        goto fail;
    }
    /* Every model tensor must be in the file with its shape (or be a head
     * left fresh when fine-tuning). */
    for (int t = 0; t < g->n_tensors; t++) {
        const cl_gtensor *gt = &g->tensors[t];
        if (!is_state(gt))
            continue;
        snprintf(fname, sizeof fname, "%s%s", prefix, gt->name);
        long i = src->find(f, fname);
        if (i < 0) {
            if (!(src->counters_optional && is_counter(gt)))
                list_add(list, sizeof list, &count, fname);
            continue;
        }
        cl_shape fs = src->shape(f, (size_t)i);
        int same = is_counter(gt) ? cl_shape_numel(&fs) == 1
                                  : cl_shape_equal(&fs, &gt->shape);
        if (same)
            continue;
        cl_shape_str(&fs, dims[0], sizeof dims[0]);
        cl_shape_str(&gt->shape, dims[1], sizeof dims[1]);
        if (mode == CL_CKPT_PRETRAINED && (gt->param_flags & CL_PARAM_HEAD)) {
            size_t len = strlen(r.head_note);
            snprintf(r.head_note + len, sizeof r.head_note - len,
                     "%s%s %s in the file, %s in the model", len ? "; " : "",
                     gt->name, dims[0], dims[1]);
            continue;
        }
        if (stem_differs(gt, &fs))
            s = cl_error(CL_ERR_SHAPE,
                         "%s: tensor '%s' has shape %s in the file but %s in "
                         "the model: the stems differ (the file's takes %lld "
                         "channel(s) through a %lldx%lld kernel, the "
                         "model's %lld through %lldx%lld); to start from "
                         "these weights give --stem %s --in_channels %lld",
                         path, gt->name, dims[0], dims[1], (long long)fs.d[1],
                         (long long)fs.d[2], (long long)fs.d[3],
                         (long long)gt->shape.d[1], (long long)gt->shape.d[2],
                         (long long)gt->shape.d[3],
                         fs.d[2] == 7 ? "imagenet" : "cifar_pool (or cifar)",
                         (long long)fs.d[1]);
        else
            s = cl_error(CL_ERR_SHAPE,
                         "%s: tensor '%s' has shape %s in the file but %s in "
                         "the model (another architecture or num_classes?)",
                         path, gt->name, dims[0], dims[1]);
        goto fail;
    }
    if (count) {
        s = list_error(path, "model tensors missing from the file", list,
                       count);
        goto fail;
    }
    /* Read into a staging copy first so that a failure leaves g as it was. */
    size_t total = g->n_param_floats + g->n_buffer_floats;
    staging = cl_alloc(total * sizeof(float), "checkpoint staging");
    if (!staging) {
        s = CL_ERR_NOMEM;
        goto fail;
    }
    memcpy(staging, g->params, g->n_param_floats * sizeof(float));
    memcpy(staging + g->n_param_floats, g->buffers,
           g->n_buffer_floats * sizeof(float));
    for (int t = 0; t < g->n_tensors; t++) {
        const cl_gtensor *gt = &g->tensors[t];
        if (!is_state(gt))
            continue;
        snprintf(fname, sizeof fname, "%s%s", prefix, gt->name);
        long i = src->find(f, fname);
        if (i < 0)
            continue; /* an optional counter the file lacks */
        cl_shape fs = src->shape(f, (size_t)i);
        float *dst = staging + gt->offset +
                     (gt->kind == CL_GT_BUFFER ? g->n_param_floats : 0);
        if (is_counter(gt)) {
            int64_t v = 0;
            if ((s = src->read_i64(f, (size_t)i, &v, 1)) != CL_OK) {
                /* Some writers keep the counter as a float. */
                if ((s = src->read_f32(f, (size_t)i, dst, 1)) != CL_OK)
                    goto fail;
            } else {
                dst[0] = (float)v;
            }
        } else if (!cl_shape_equal(&fs, &gt->shape)) {
            r.head_skipped++;
            continue;
        } else if (is_i64(gt)) {
            /* The staging arena keeps the graph's layout: 8 bytes each. */
            size_t n = (size_t)cl_shape_numel(&gt->shape);
            if ((s = src->read_i64(f, (size_t)i, (int64_t *)(void *)dst, n)) !=
                CL_OK)
                goto fail;
        } else {
            size_t n = (size_t)cl_shape_numel(&gt->shape);
            if ((s = src->read_f32(f, (size_t)i, dst, n)) != CL_OK)
                goto fail;
        }
        r.loaded++;
    }
    memcpy(g->params, staging, g->n_param_floats * sizeof(float));
    memcpy(g->buffers, staging + g->n_param_floats,
           g->n_buffer_floats * sizeof(float));
    if (rep)
        *rep = r;
    s = CL_OK;
fail:
    cl_free(staging);
    return s;
}

cl_status cl_ckpt_read_meta(const char *path, const char *key, char *buf,
                            size_t n)
{
    cl_st_file *f = NULL;
    CL_TRY(cl_st_open(&f, path));
    const char *v = cl_st_metadata(f, key);
    snprintf(buf, n, "%s", v ? v : "");
    cl_st_close(f);
    return CL_OK;
}
