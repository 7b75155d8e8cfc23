/* Reader of the int8 model file: its scales checked, its s8 weights served
 * dequantized to the strict loader, and the graph's int8 record filled. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "interop/quantized.h"
#include "io/safetensors.h"

struct cl_qfile {
    const cl_st_file *f;
    const char *path;
    size_t *vis;  /* visible index -> file index */
    size_t n_vis; /* tensors the loader sees */
    long *inv;    /* file index -> visible index, -1 for a scale tensor */
    long *scale;  /* file index of an I8 weight -> its weight_scale, else -1 */
};

int cl_qfile_is(const cl_st_file *f)
{
    const char *p = cl_st_metadata(f, CL_QUANT_META_PRECISION);
    return p && strcmp(p, "int8") == 0;
}

static int has_suffix(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n > m && strcmp(s + n - m, suf) == 0;
}

/* "P" + suffix for the layer of a "P.weight_scale" tensor. */
static void sibling(const char *scale_name, const char *suffix, char *out,
                    size_t n)
{
    size_t base = strlen(scale_name) - strlen(CL_QUANT_WEIGHT_SCALE);
    snprintf(out, n, "%.*s%s", (int)base, scale_name, suffix);
}

/* Every value of F32 tensor i finite and > 0 (n of them). */
static cl_status positive_f32(const cl_qfile *q, size_t i, size_t n)
{
    const char *name = cl_st_name(q->f, i);
    cl_st_dtype dt;
    cl_st_info(q->f, i, &dt, NULL);
    if (dt != CL_ST_F32)
        return cl_error(CL_ERR_FORMAT,
                        "%s: tensor '%s' is %s, expected F32 scales: the "
                        "file is damaged; quantize the checkpoint again",
                        q->path, name, cl_st_dtype_name(dt));
    float *v = cl_alloc(n * sizeof *v, "int8 scales");
    if (!v)
        return CL_ERR_NOMEM;
    cl_status s = cl_st_read_f32(q->f, i, v, n);
    for (size_t k = 0; s == CL_OK && k < n; k++)
        if (!isfinite(v[k]) || v[k] <= 0.0f)
            s = cl_error(CL_ERR_FORMAT,
                         "%s: tensor '%s' holds %g at %zu, and a scale must "
                         "be finite and > 0: the file is damaged; quantize "
                         "the checkpoint again",
                         q->path, name, (double)v[k], k);
    cl_free(v);
    return s;
}

/* The scales of the layer whose weight_scale is tensor i. */
static cl_status check_layer(cl_qfile *q, size_t i)
{
    const char *name = cl_st_name(q->f, i);
    char w[160], in_s[160], in_sg[160];
    sibling(name, ".weight", w, sizeof w);
    sibling(name, CL_QUANT_INPUT_SCALE, in_s, sizeof in_s);
    sibling(name, CL_QUANT_INPUT_SIGNED, in_sg, sizeof in_sg);
    long wi = cl_st_find(q->f, w), si = cl_st_find(q->f, in_s),
         gi = cl_st_find(q->f, in_sg);
    cl_st_dtype dt;
    cl_shape ws, ss, gs, is;
    cl_st_info(q->f, i, NULL, &ss);
    if (wi < 0 || si < 0 || gi < 0)
        return cl_error(CL_ERR_FORMAT,
                        "%s: tensor '%s' has no '%s' beside it: the file is "
                        "damaged; quantize the checkpoint again",
                        q->path, name,
                        wi < 0   ? w
                        : si < 0 ? in_s
                                 : in_sg);
    cl_st_info(q->f, (size_t)wi, &dt, &ws);
    if (dt != CL_ST_I8 || ws.ndim < 2)
        return cl_error(CL_ERR_FORMAT,
                        "%s: tensor '%s' is %s of %d dimension(s), expected "
                        "the I8 weights of a conv or linear layer: the file "
                        "is damaged; quantize the checkpoint again",
                        q->path, w, cl_st_dtype_name(dt), ws.ndim);
    if (ss.ndim != 1 || ss.d[0] != ws.d[0])
        return cl_error(CL_ERR_FORMAT,
                        "%s: tensor '%s' holds %lld scale(s) for the %lld "
                        "output channels of '%s': the file is damaged; "
                        "quantize the checkpoint again",
                        q->path, name, (long long)cl_shape_numel(&ss),
                        (long long)ws.d[0], w);
    CL_TRY(positive_f32(q, i, (size_t)ss.d[0]));
    cl_st_info(q->f, (size_t)si, NULL, &is);
    if (cl_shape_numel(&is) != 1)
        return cl_error(CL_ERR_FORMAT,
                        "%s: tensor '%s' holds %lld values, expected one "
                        "scale: the file is damaged; quantize the checkpoint "
                        "again",
                        q->path, in_s, (long long)cl_shape_numel(&is));
    CL_TRY(positive_f32(q, (size_t)si, 1));
    int64_t sign = -1;
    cl_st_info(q->f, (size_t)gi, &dt, &gs);
    if (cl_shape_numel(&gs) != 1 || (dt != CL_ST_U8 && dt != CL_ST_I8) ||
        cl_st_read_i64(q->f, (size_t)gi, &sign, 1) != CL_OK ||
        (sign != 0 && sign != 1))
        return cl_error(CL_ERR_FORMAT,
                        "%s: tensor '%s' must be one U8 that is 0 (u8 input) "
                        "or 1 (s8 input): the file is damaged; quantize the "
                        "checkpoint again",
                        q->path, in_sg);
    q->scale[wi] = (long)i;
    q->inv[i] = q->inv[si] = q->inv[gi] = -1;
    return CL_OK;
}

cl_status cl_qfile_open(cl_qfile **out, const cl_st_file *f, const char *path)
{
    *out = NULL;
    size_t n = cl_st_count(f);
    cl_qfile *q = cl_alloc_zero(sizeof *q, "int8 file");
    if (!q)
        return CL_ERR_NOMEM;
    q->f = f;
    q->path = path;
    q->vis = cl_alloc((n + 1) * sizeof *q->vis, "int8 file");
    q->inv = cl_alloc((n + 1) * sizeof *q->inv, "int8 file");
    q->scale = cl_alloc((n + 1) * sizeof *q->scale, "int8 file");
    cl_status s = CL_ERR_NOMEM;
    if (!q->vis || !q->inv || !q->scale)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        q->inv[i] = 0;
        q->scale[i] = -1;
    }
    for (size_t i = 0; i < n; i++)
        if (has_suffix(cl_st_name(f, i), CL_QUANT_WEIGHT_SCALE) &&
            (s = check_layer(q, i)) != CL_OK)
            goto fail;
    for (size_t i = 0; i < n; i++) {
        cl_st_dtype dt;
        cl_st_info(f, i, &dt, NULL);
        if (dt == CL_ST_I8 && q->scale[i] < 0 && q->inv[i] == 0) {
            s = cl_error(CL_ERR_FORMAT,
                         "%s: tensor '%s' is I8 with no '%s' beside it: the "
                         "file is damaged; quantize the checkpoint again",
                         path, cl_st_name(f, i), CL_QUANT_WEIGHT_SCALE);
            goto fail;
        }
        if (q->inv[i] == 0) {
            q->inv[i] = (long)q->n_vis;
            q->vis[q->n_vis++] = i;
        }
    }
    *out = q;
    return CL_OK;
fail:
    cl_qfile_close(q);
    return s;
}

void cl_qfile_close(cl_qfile *q)
{
    if (!q)
        return;
    cl_free(q->vis);
    cl_free(q->inv);
    cl_free(q->scale);
    cl_free(q);
}

static size_t q_count(const void *ctx)
{
    return ((const cl_qfile *)ctx)->n_vis;
}

static const char *q_name(const void *ctx, size_t i)
{
    const cl_qfile *q = ctx;
    return cl_st_name(q->f, q->vis[i]);
}

static long q_find(const void *ctx, const char *name)
{
    const cl_qfile *q = ctx;
    long i = cl_st_find(q->f, name);
    return i < 0 ? -1 : q->inv[i];
}

static cl_shape q_shape(const void *ctx, size_t i)
{
    const cl_qfile *q = ctx;
    cl_shape s;
    cl_st_info(q->f, q->vis[i], NULL, &s);
    return s;
}

/* An I8 weight as q * scale, the scale its output channel's: the same
 * f32 product the quantizer left in the graph. */
static cl_status q_read_f32(const void *ctx, size_t i, float *dst, size_t n)
{
    const cl_qfile *q = ctx;
    size_t fi = q->vis[i];
    if (q->scale[fi] < 0)
        return cl_st_read_f32(q->f, fi, dst, n);
    cl_shape ws, ss;
    size_t nbytes = 0;
    cl_st_info(q->f, fi, NULL, &ws);
    cl_st_info(q->f, (size_t)q->scale[fi], NULL, &ss);
    const signed char *v = cl_st_data(q->f, fi, &nbytes);
    if ((size_t)cl_shape_numel(&ws) != n || nbytes != n)
        return cl_error(CL_ERR_SHAPE,
                        "%s: tensor '%s' has %zu values, %zu "
                        "asked for",
                        q->path, cl_st_name(q->f, fi), nbytes, n);
    size_t out = (size_t)ss.d[0], per = n / out;
    float *s = cl_alloc(out * sizeof *s, "int8 scales");
    if (!s)
        return CL_ERR_NOMEM;
    cl_status st = cl_st_read_f32(q->f, (size_t)q->scale[fi], s, out);
    for (size_t o = 0; st == CL_OK && o < out; o++)
        for (size_t j = 0; j < per; j++)
            dst[o * per + j] = (float)v[o * per + j] * s[o];
    cl_free(s);
    return st;
}

static cl_status q_read_i64(const void *ctx, size_t i, int64_t *dst, size_t n)
{
    const cl_qfile *q = ctx;
    return cl_st_read_i64(q->f, q->vis[i], dst, n);
}

cl_ckpt_source cl_qfile_source(const cl_qfile *q)
{
    cl_ckpt_source s = {
        q->path, q,          q_count,    q_name, q_find,
        q_shape, q_read_f32, q_read_i64, 0,      CL_CKPT_PICK_EMA};
    return s;
}

/* Reads one f32 of tensor i (a checked scale). */
static float one_f32(const cl_qfile *q, long i)
{
    float v = 0.0f;
    if (cl_st_read_f32(q->f, (size_t)i, &v, 1) != CL_OK)
        v = 0.0f;
    return v;
}

cl_status cl_qfile_scales(const cl_qfile *q, cl_graph *g)
{
    char nm[192];
    int used = 0, total = 0;
    size_t n = cl_st_count(q->f);
    for (size_t i = 0; i < n; i++)
        total += q->scale[i] >= 0;
    /* No int8 layer (a file whose weights were all written as f32): the
     * model is an f32 one. */
    if (total == 0)
        return CL_OK;
    CL_TRY(cl_graph_quant_init(g));
    cl_graph_quant *gq = g->quant;
    /* Which node set each tensor's scale, for the message of a second
     * node that disagrees. */
    for (int i = 0; i < g->n_nodes; i++) {
        const cl_node *nd = &g->nodes[i];
        float *ws = cl_graph_quant_wscale(g, i);
        if (!ws || nd->n_param < 1 || nd->n_in < 1)
            continue;
        const char *wname = g->tensors[nd->param[0]].name;
        long wi = cl_st_find(q->f, wname);
        if (wi < 0 || q->scale[wi] < 0)
            continue; /* the layer stays in floating point */
        long si = q->scale[wi];
        cl_shape ss;
        cl_st_info(q->f, (size_t)si, NULL, &ss);
        if (ss.d[0] != g->tensors[nd->param[0]].shape.d[0])
            return cl_error(CL_ERR_FORMAT,
                            "%s: tensor '%s' holds %lld scales, and the "
                            "model's layer has %lld output channels",
                            q->path, cl_st_name(q->f, (size_t)si),
                            (long long)ss.d[0],
                            (long long)g->tensors[nd->param[0]].shape.d[0]);
        CL_TRY(cl_st_read_f32(q->f, (size_t)si, ws, (size_t)ss.d[0]));
        const char *sname = cl_st_name(q->f, (size_t)si);
        sibling(sname, CL_QUANT_INPUT_SCALE, nm, sizeof nm);
        float as = one_f32(q, cl_st_find(q->f, nm));
        sibling(sname, CL_QUANT_INPUT_SIGNED, nm, sizeof nm);
        int64_t sign = 0;
        CL_TRY(cl_st_read_i64(q->f, (size_t)cl_st_find(q->f, nm), &sign, 1));
        int t = nd->in[0];
        if (gq->act_scale[t] > 0.0f &&
            (gq->act_scale[t] != as || gq->act_signed[t] != (sign != 0))) {
            sibling(sname, CL_QUANT_INPUT_SCALE, nm, sizeof nm);
            return cl_error(CL_ERR_FORMAT,
                            "%s: tensor '%s' gives the input %s scale %g, "
                            "and another layer reading the same activation "
                            "gave it %s %g: the file is damaged; quantize the "
                            "checkpoint again",
                            q->path, nm, sign ? "s8" : "u8", (double)as,
                            gq->act_signed[t] ? "s8" : "u8",
                            (double)gq->act_scale[t]);
        }
        gq->act_scale[t] = as;
        gq->act_signed[t] = (unsigned char)(sign != 0);
        used++;
    }
    if (used != total)
        for (size_t i = 0; i < n; i++) {
            if (q->scale[i] < 0)
                continue;
            int t = cl_graph_find(g, cl_st_name(q->f, i));
            int owner = 0;
            for (int k = 0; t >= 0 && k < g->n_nodes; k++)
                owner |= cl_graph_quant_wscale(g, k) &&
                         g->nodes[k].n_param > 0 && g->nodes[k].param[0] == t;
            if (!owner)
                return cl_error(CL_ERR_FORMAT,
                                "%s: tensor '%s' is I8, and the model has no "
                                "conv or linear layer with that weight: the "
                                "file is damaged; quantize the checkpoint "
                                "again",
                                q->path, cl_st_name(q->f, i));
        }
    return CL_OK;
}

void cl_qfile_count(const cl_graph *g, int *n_int8, int *n_float)
{
    *n_int8 = *n_float = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].op != CL_OP_CONV2D && g->nodes[i].op != CL_OP_LINEAR)
            continue;
        if (cl_graph_quant_node(g, i))
            (*n_int8)++;
        else
            (*n_float)++;
    }
}
