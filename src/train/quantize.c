/* Post-training int8 quantization: calibration statistics and thresholds,
 * BN folding, s8 weights per output channel, and writing the int8 file. */
/* realpath (quant.source, the checkpoint's absolute path) is XSI. */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/mem.h"
#include "interop/quantized.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "train/model.h"
#include "train/quantize.h"

/* The scale of an activation that was zero on every calibration sample:
 * any positive scale quantizes it to 0, and a tiny one keeps the int8
 * layer from inventing values it never saw. */
#define ZERO_TENSOR_SCALE 1e-8f

static const char *const method_names[] = {"minmax", "percentile", "entropy"};

cl_status cl_quant_method_parse(const char *s, cl_quant_method *out)
{
    for (int k = 0; k < 3; k++)
        if (s && strcmp(s, method_names[k]) == 0) {
            *out = (cl_quant_method)k;
            return CL_OK;
        }
    return cl_error(CL_ERR_ARG,
                    "--method '%s' is not one of minmax, percentile, entropy",
                    s ? s : "");
}

const char *cl_quant_method_name(cl_quant_method m)
{
    return m >= 0 && m <= CL_QUANT_ENTROPY ? method_names[m] : "?";
}

int cl_quant_node_rule(const cl_graph *g, int i)
{
    const cl_node *n = &g->nodes[i];
    if (n->n_in < 1 || n->n_param < 1)
        return 0;
    if (n->op == CL_OP_CONV2D)
        return n->in[0] != g->input;
    if (n->op == CL_OP_LINEAR)
        return n->out != g->logits;
    return 0;
}

/* ---- statistics ---------------------------------------------------------
 */

typedef struct tstat {
    int tensor;
    float min, max, absmax;
    double *hist; /* CL_QUANT_BINS counts of |x| over [0, absmax] */
} tstat;

struct cl_quant_calib {
    const cl_graph *g;
    cl_quant_opts o;
    tstat *t;
    int n;
    float *buf; /* the largest calibrated tensor */
    double *hist_arena;
};

cl_status cl_quant_calib_create(cl_quant_calib **out, const cl_graph *g,
                                const cl_quant_opts *o)
{
    *out = NULL;
    cl_quant_calib *c = cl_alloc_zero(sizeof *c, "calibration");
    if (!c)
        return CL_ERR_NOMEM;
    c->g = g;
    if (o)
        c->o = *o;
    if (c->o.percentile <= 0.0)
        c->o.percentile = 99.99;
    c->t =
        cl_alloc_zero(sizeof *c->t * (size_t)(g->n_nodes + 1), "calibration");
    if (!c->t)
        goto nomem;
    int64_t biggest = 1;
    for (int i = 0; i < g->n_nodes; i++) {
        if (!cl_quant_node_rule(g, i))
            continue;
        int t = g->nodes[i].in[0], seen = 0;
        for (int k = 0; k < c->n; k++)
            seen |= c->t[k].tensor == t;
        if (seen)
            continue;
        c->t[c->n].tensor = t;
        c->t[c->n].min = FLT_MAX;
        c->t[c->n].max = -FLT_MAX;
        c->n++;
        if (cl_graph_numel(g, t) > biggest)
            biggest = cl_graph_numel(g, t);
    }
    c->buf = cl_alloc((size_t)biggest * sizeof *c->buf, "calibration");
    if (c->o.method != CL_QUANT_MINMAX)
        c->hist_arena = cl_alloc_zero(sizeof *c->hist_arena * CL_QUANT_BINS *
                                          (size_t)(c->n ? c->n : 1),
                                      "calibration histograms");
    if (!c->buf || (c->o.method != CL_QUANT_MINMAX && !c->hist_arena))
        goto nomem;
    for (int k = 0; k < c->n && c->hist_arena; k++)
        c->t[k].hist = c->hist_arena + (size_t)k * CL_QUANT_BINS;
    *out = c;
    return CL_OK;
nomem:
    cl_quant_calib_free(c);
    return CL_ERR_NOMEM;
}

void cl_quant_calib_free(cl_quant_calib *c)
{
    if (!c)
        return;
    cl_free(c->t);
    cl_free(c->buf);
    cl_free(c->hist_arena);
    cl_free(c);
}

int cl_quant_calib_passes(const cl_quant_calib *c)
{
    return c->o.method == CL_QUANT_MINMAX ? 1 : 2;
}

/* The name of the tensor for messages: its producer's output. */
static const char *tensor_name(const cl_graph *g, int t)
{
    int p = g->tensors[t].producer;
    return p >= 0 ? g->nodes[p].name : "the input";
}

cl_status cl_quant_calib_observe(cl_quant_calib *c, cl_backend *be, int pass,
                                 int n_valid)
{
    const cl_graph *g = c->g;
    for (int k = 0; k < c->n; k++) {
        tstat *s = &c->t[k];
        const cl_shape *sh = &g->tensors[s->tensor].shape;
        size_t n = (size_t)cl_shape_numel(sh);
        /* The padding of a last, partial batch is left out where the
         * rows are the images' (any tensor whose rows come in batch
         * groups: (N, ...), Swin's windows (N * windows, ...)). */
        if (n_valid > 0 && n_valid < g->batch && sh->d[0] % g->batch == 0)
            n = n / (size_t)g->batch * (size_t)n_valid;
        CL_TRY(cl_backend_read(be, s->tensor, c->buf));
        if (pass == 0) {
            for (size_t j = 0; j < n; j++) {
                float v = c->buf[j];
                if (!isfinite(v))
                    return cl_error(CL_ERR_NUMERIC,
                                    "calibration: the output of %s holds %g: "
                                    "the model does not compute finite "
                                    "values on this data",
                                    tensor_name(g, s->tensor), (double)v);
                if (v < s->min)
                    s->min = v;
                if (v > s->max)
                    s->max = v;
            }
            float a = fmaxf(fabsf(s->min), fabsf(s->max));
            s->absmax = a;
        } else if (s->hist && s->absmax > 0.0f) {
            double per = CL_QUANT_BINS / (double)s->absmax;
            for (size_t j = 0; j < n; j++) {
                int b = (int)(fabs((double)c->buf[j]) * per);
                s->hist[b < CL_QUANT_BINS ? b : CL_QUANT_BINS - 1] += 1.0;
            }
        }
    }
    return CL_OK;
}

/* The smallest bin edge below which p percent of the counts lie. */
static double percentile_threshold(const tstat *s, double p)
{
    double total = 0, cum = 0, width = s->absmax / (double)CL_QUANT_BINS;
    for (int b = 0; b < CL_QUANT_BINS; b++)
        total += s->hist[b];
    double want = total * p / 100.0;
    for (int b = 0; b < CL_QUANT_BINS; b++) {
        cum += s->hist[b];
        if (cum >= want)
            return (b + 1) * width;
    }
    return s->absmax;
}

/* TensorRT's entropy calibration (Migacz, "8-bit Inference with
 * TensorRT", GTC 2017): for each candidate i of the 2048 bins, P is the
 * histogram's first i bins with the counts beyond folded into the last,
 * Q the same i bins merged into `levels` levels and spread back over the
 * non-empty bins; the threshold is the upper edge of the i with the least
 * KL(P || Q).  levels: 128 for s8 (|x| takes 0..127), 256 for u8. */
static double entropy_threshold(const tstat *s, int levels, double *scratch)
{
    const double *h = s->hist;
    double width = s->absmax / (double)CL_QUANT_BINS, best = INFINITY;
    int best_i = CL_QUANT_BINS;
    double *p = scratch, *q = scratch + CL_QUANT_BINS;
    double beyond = 0;
    for (int b = levels; b < CL_QUANT_BINS; b++)
        beyond += h[b];
    for (int i = levels; i <= CL_QUANT_BINS; i++) {
        double psum = 0;
        for (int b = 0; b < i; b++)
            p[b] = h[b];
        p[i - 1] += beyond;
        if (i < CL_QUANT_BINS)
            beyond -= h[i];
        for (int b = 0; b < i; b++)
            psum += p[b];
        if (psum <= 0)
            continue;
        double qsum = 0;
        for (int j = 0; j < levels; j++) {
            int lo = (int)((int64_t)j * i / levels);
            int hi = (int)((int64_t)(j + 1) * i / levels);
            double sum = 0;
            int nonzero = 0;
            /* Spread over the bins P holds values in (the last one
             * counts the outliers too), as TensorRT's reference does. */
            for (int b = lo; b < hi; b++) {
                sum += h[b];
                nonzero += p[b] > 0;
            }
            for (int b = lo; b < hi; b++)
                q[b] = p[b] > 0 ? sum / nonzero : 0.0;
            qsum += sum;
        }
        double kl = 0;
        for (int b = 0; b < i; b++) {
            if (p[b] <= 0)
                continue;
            double pb = p[b] / psum;
            /* A bin P holds and Q left empty (its level summed to 0:
             * only outliers there) costs as if Q held almost nothing. */
            double qb = qsum > 0 && q[b] > 0 ? q[b] / qsum : 1e-12;
            kl += pb * log(pb / qb);
        }
        if (kl < best) {
            best = kl;
            best_i = i;
        }
    }
    return best_i * width;
}

/* The activation scale of calibrated tensor s. */
static float act_scale(const cl_quant_calib *c, const tstat *s, double *scratch)
{
    int sgn = s->min < 0.0f;
    double t = s->absmax;
    if (c->o.method == CL_QUANT_PERCENTILE && t > 0)
        t = percentile_threshold(s, c->o.percentile);
    else if (c->o.method == CL_QUANT_ENTROPY && t > 0)
        t = entropy_threshold(s, sgn ? 128 : 256, scratch);
    if (t > s->absmax)
        t = s->absmax;
    if (!(t > 0))
        return ZERO_TENSOR_SCALE;
    return (float)(t / (sgn ? 127.0 : 255.0));
}

/* ---- BN folding and weights ---------------------------------------------
 */

/* The BatchNorm2d node that is the only reader of tensor t, or -1. */
static int only_bn_reader(const cl_graph *g, int t)
{
    int found = -1, readers = 0;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] == t) {
                readers++;
                found = i;
            }
    if (readers != 1 || g->nodes[found].op != CL_OP_BATCHNORM2D ||
        g->nodes[found].in[0] != t)
        return -1;
    return found;
}

/* A variance v with v + eps == 1.0f in f32, so that the backend's fold
 * (onednn/conv.c: gamma / sqrtf(var + eps)) multiplies by exactly 1. */
static cl_status unit_variance(float eps, const char *bn, float *out)
{
    float v = 1.0f - eps;
    for (int k = 0; k < 64 && v + eps != 1.0f; k++)
        v = nextafterf(v, v + eps < 1.0f ? 2.0f : -2.0f);
    if (v + eps != 1.0f)
        return cl_error(CL_ERR_NUMERIC,
                        "%s: no f32 variance makes var + eps (%g) exactly 1",
                        bn, (double)eps);
    *out = v;
    return CL_OK;
}

/* Folds BN node b into conv node i (onednn/conv.c's fold_bn in f32), and
 * leaves b the identity plus the folded bias. */
static cl_status fold_bn(cl_graph *g, int i, int b)
{
    const cl_node *n = &g->nodes[i], *bn = &g->nodes[b];
    const cl_conv2d_attr *a = &n->attr.conv2d;
    float *w = cl_graph_param(g, n->param[0]);
    float *bias = a->has_bias ? cl_graph_param(g, n->param[1]) : NULL;
    float *gamma = cl_graph_param(g, bn->param[0]);
    float *beta = cl_graph_param(g, bn->param[1]);
    float *rm = cl_graph_buffer(g, bn->buf[0]);
    float *rv = cl_graph_buffer(g, bn->buf[1]);
    const float eps = bn->attr.batchnorm2d.eps;
    float v1 = 1.0f;
    CL_TRY(unit_variance(eps, bn->name, &v1));
    size_t per = (size_t)cl_graph_numel(g, n->param[0]) / (size_t)a->out_ch;
    for (int o = 0; o < a->out_ch; o++) {
        float k = gamma[o] / sqrtf(rv[o] + eps);
        for (size_t j = 0; j < per; j++)
            w[(size_t)o * per + j] = w[(size_t)o * per + j] * k;
        beta[o] = beta[o] + ((bias ? bias[o] : 0.0f) - rm[o]) * k;
        gamma[o] = 1.0f;
        rm[o] = 0.0f;
        rv[o] = v1;
        if (bias)
            bias[o] = 0.0f;
    }
    return CL_OK;
}

/* s8 per output channel: s = max |w_o| / qmax (1 for a zero channel), the
 * weights replaced by q * s, q = round-half-even(w / s) in [-qmax, qmax]
 * (qmax 127, or 63 for 7-bit weights). */
static void quantize_weights(float *w, size_t out, size_t per, float *scale,
                             float qmax)
{
    for (size_t o = 0; o < out; o++) {
        float *r = w + o * per, m = 0.0f;
        for (size_t j = 0; j < per; j++)
            m = fmaxf(m, fabsf(r[j]));
        float s = m > 0.0f ? m / qmax : 1.0f;
        for (size_t j = 0; j < per; j++) {
            float q = rintf(r[j] / s);
            q = q > qmax ? qmax : q < -qmax ? -qmax : q;
            /* + 0: a -0 would not survive the file (an I8 has no -0). */
            r[j] = (q + 0.0f) * s;
        }
        scale[o] = s;
    }
}

cl_status cl_quant_calib_apply(const cl_quant_calib *c, cl_graph *g)
{
    if (g->quant)
        return cl_error(CL_ERR_ARG, "quantize: the model is quantized already");
    if (g->n_nodes != c->g->n_nodes || g->n_tensors != c->g->n_tensors)
        return cl_error(CL_ERR_ARG, "quantize: statistics of another graph");
    double *scratch =
        cl_alloc(2 * CL_QUANT_BINS * sizeof *scratch, "calibration");
    if (!scratch)
        return CL_ERR_NOMEM;
    cl_status s = cl_graph_quant_init(g);
    for (int k = 0; s == CL_OK && k < c->n; k++) {
        const tstat *t = &c->t[k];
        g->quant->act_scale[t->tensor] = act_scale(c, t, scratch);
        g->quant->act_signed[t->tensor] = t->min < 0.0f;
    }
    cl_free(scratch);
    for (int i = 0; s == CL_OK && i < g->n_nodes; i++) {
        if (!cl_quant_node_rule(g, i))
            continue;
        const cl_node *n = &g->nodes[i];
        int b = n->op == CL_OP_CONV2D ? only_bn_reader(g, n->out) : -1;
        if (b >= 0 && (s = fold_bn(g, i, b)) != CL_OK)
            break;
        size_t out = (size_t)g->tensors[n->param[0]].shape.d[0];
        size_t per = (size_t)cl_graph_numel(g, n->param[0]) / out;
        quantize_weights(cl_graph_param(g, n->param[0]), out, per,
                         cl_graph_quant_wscale(g, i),
                         c->o.weight_bits == 7 ? 63.0f : 127.0f);
    }
    /* On failure g's weights may be half folded: the caller drops g. */
    return s;
}

/* A training plan of g (whose forward keeps every tensor a backward
 * reads, each conv's and linear's input among them). */
static cl_status calib_plan(cl_graph *g, const char *backend, int threads,
                            cl_backend **be)
{
    cl_backend_opts bo;
    memset(&bo, 0, sizeof bo);
    bo.threads = threads;
    return cl_backend_create(be, backend, g, CL_PLAN_TRAIN, &bo);
}

/* One forward of batch x for the statistics. */
static cl_status calib_forward(cl_backend *be, const cl_graph *g,
                               const float *x, const int32_t *labels,
                               const float *targets)
{
    CL_TRY(cl_backend_set_input(be, x, g->labels >= 0 ? labels : NULL,
                                g->targets >= 0 ? targets : NULL));
    return cl_backend_forward(be, 0, NULL);
}

/* Labels and soft targets of zeros for a training plan's loss. */
static cl_status dummy_targets(const cl_graph *g, int32_t **labels,
                               float **targets)
{
    *labels = cl_alloc_zero(sizeof **labels * (size_t)g->batch, "calibration");
    *targets =
        cl_alloc_zero(sizeof **targets * (size_t)g->batch *
                          (size_t)(g->num_classes > 0 ? g->num_classes : 1),
                      "calibration");
    return *labels && *targets ? CL_OK : CL_ERR_NOMEM;
}

cl_status cl__quant_calibrate_on(cl_graph *g, const char *backend,
                                 const float *const *x, int n_batches,
                                 const cl_quant_opts *o, int threads)
{
    cl_quant_opts mm = {CL_QUANT_MINMAX, 0.0, 8};
    cl_quant_calib *c = NULL;
    cl_backend *be = NULL;
    int32_t *labels = NULL;
    float *targets = NULL;
    if (n_batches < 1)
        return cl_error(CL_ERR_ARG, "quantize: no calibration batch");
    cl_status s = cl_quant_calib_create(&c, g, o ? o : &mm);
    if (s == CL_OK)
        s = dummy_targets(g, &labels, &targets);
    if (s == CL_OK)
        s = calib_plan(g, backend, threads, &be);
    for (int p = 0; s == CL_OK && p < cl_quant_calib_passes(c); p++)
        for (int b = 0; s == CL_OK && b < n_batches; b++)
            if ((s = calib_forward(be, g, x[b], labels, targets)) == CL_OK)
                s = cl_quant_calib_observe(c, be, p, g->batch);
    cl_backend_destroy(be);
    if (s == CL_OK)
        s = cl_quant_calib_apply(c, g);
    cl_quant_calib_free(c);
    cl_free(labels);
    cl_free(targets);
    return s;
}

cl_status cl_quant_calibrate(cl_graph *g, const float *const *x, int n_batches,
                             const cl_quant_opts *o, int threads)
{
    return cl__quant_calibrate_on(g, "onednn", x, n_batches, o, threads);
}

/* ---- the file -----------------------------------------------------------
 */

cl_status cl_quant_save(const char *path, const cl_graph *g,
                        const char *const *keys, const char *const *values,
                        int n_meta)
{
    static const unsigned char sign_byte[2] = {0, 1};
    cl_st_writer *w = NULL;
    int *wnode = NULL;
    signed char *q8 = NULL;
    int64_t *counters = NULL;
    char name[sizeof g->tensors[0].name + 16];
    if (!g->quant)
        return cl_error(CL_ERR_ARG, "%s: the model is not quantized", path);
    cl_status s = CL_ERR_NOMEM;
    wnode = cl_alloc(sizeof *wnode * (size_t)g->n_tensors, "int8 file");
    q8 = cl_alloc(g->n_param_floats + 1, "int8 file");
    counters =
        cl_alloc(sizeof *counters * (size_t)(g->n_tensors + 1), "int8 file");
    if (!wnode || !q8 || !counters)
        goto fail;
    for (int t = 0; t < g->n_tensors; t++)
        wnode[t] = -1;
    for (int i = 0; i < g->n_nodes; i++)
        if (cl_graph_quant_node(g, i))
            wnode[g->nodes[i].param[0]] = i;
    if ((s = cl_st_writer_new(&w)) != CL_OK)
        goto fail;
    int nc = 0;
    for (int t = 0; s == CL_OK && t < g->n_tensors; t++) {
        const cl_gtensor *gt = &g->tensors[t];
        if (!cl_gtensor_saved(gt))
            continue;
        const float *data = gt->kind == CL_GT_PARAM ? cl_graph_param(g, t)
                                                    : g->buffers + gt->offset;
        const char *dot = strrchr(gt->name, '.');
        if (gt->kind == CL_GT_BUFFER && dot &&
            strcmp(dot, ".num_batches_tracked") == 0) {
            counters[nc] = (int64_t)data[0];
            s = cl_st_writer_add(w, gt->name, CL_ST_I64, cl_shape_make(0, NULL),
                                 &counters[nc]);
            nc++;
            continue;
        }
        if (gt->kind == CL_GT_BUFFER && gt->dtype == CL_I64) {
            s = cl_st_writer_add(w, gt->name, CL_ST_I64, gt->shape, data);
            continue;
        }
        if (wnode[t] < 0) {
            s = cl_st_writer_add(w, gt->name, CL_ST_F32, gt->shape, data);
            continue;
        }
        /* An int8 layer: q = w / s exactly, since w is q * s. */
        int i = wnode[t];
        const float *ws = cl_graph_quant_wscale(g, i);
        size_t out = (size_t)gt->shape.d[0];
        size_t per = (size_t)cl_shape_numel(&gt->shape) / out;
        signed char *q = q8 + gt->offset;
        for (size_t o = 0; o < out; o++)
            for (size_t j = 0; j < per; j++) {
                float v = rintf(data[o * per + j] / ws[o]);
                v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
                q[o * per + j] = (signed char)v;
            }
        int in = g->nodes[i].in[0];
        size_t base = strlen(gt->name) - strlen(".weight");
        int64_t one = 1, outd = (int64_t)out;
        if ((s = cl_st_writer_add(w, gt->name, CL_ST_I8, gt->shape, q)) !=
            CL_OK)
            break;
        snprintf(name, sizeof name, "%.*s%s", (int)base, gt->name,
                 CL_QUANT_WEIGHT_SCALE);
        if ((s = cl_st_writer_add(w, name, CL_ST_F32, cl_shape_make(1, &outd),
                                  ws)) != CL_OK)
            break;
        snprintf(name, sizeof name, "%.*s%s", (int)base, gt->name,
                 CL_QUANT_INPUT_SCALE);
        if ((s = cl_st_writer_add(w, name, CL_ST_F32, cl_shape_make(1, &one),
                                  &g->quant->act_scale[in])) != CL_OK)
            break;
        snprintf(name, sizeof name, "%.*s%s", (int)base, gt->name,
                 CL_QUANT_INPUT_SIGNED);
        s = cl_st_writer_add(w, name, CL_ST_U8, cl_shape_make(1, &one),
                             &sign_byte[g->quant->act_signed[in] ? 1 : 0]);
    }
    for (int k = 0; s == CL_OK && k < n_meta; k++)
        s = cl_st_writer_meta(w, keys[k], values[k]);
    if (s == CL_OK)
        s = cl_st_writer_save(w, path);
fail:
    cl_st_writer_free(w);
    cl_free(wnode);
    cl_free(q8);
    cl_free(counters);
    return s;
}

/* ---- the calibration data -----------------------------------------------
 */

typedef struct calib_data {
    const cl_model *m;
    const char *path;
    cl_dataset *ds;    /* a dataset train reads */
    cl_transforms *tf; /* its eval transforms */
    char **files;      /* or the image files of a plain folder */
    int n_files;
    int64_t count;
    cl_image img;
} calib_data;

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A folder's entries: whether it has subfolders, whether it holds the
 * files of an IDX or CIFAR dataset, and (when it has neither) its files,
 * sorted. */
static cl_status scan_folder(calib_data *d, int *subdirs, int *dataset)
{
    DIR *dir = opendir(d->path);
    char full[4096];
    int cap = 0;
    *subdirs = *dataset = 0;
    if (!dir)
        return cl_error(CL_ERR_IO, "--calib %s: cannot open the folder",
                        d->path);
    struct dirent *e;
    cl_status s = CL_OK;
    while ((e = readdir(dir)) != NULL && s == CL_OK) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(full, sizeof full, "%s/%s", d->path, e->d_name);
        if (is_dir(full)) {
            *subdirs = 1;
            continue;
        }
        if (strstr(e->d_name, "idx3-ubyte") || strstr(e->d_name, ".bin"))
            *dataset = 1;
        if (d->n_files == cap) {
            cap = cap ? 2 * cap : 64;
            char **nf = realloc(d->files, sizeof *nf * (size_t)cap);
            if (!nf) {
                s = cl_error(CL_ERR_NOMEM, "calibration file list");
                break;
            }
            d->files = nf;
        }
        if (!(d->files[d->n_files] = strdup(full)))
            s = cl_error(CL_ERR_NOMEM, "calibration file list");
        else
            d->n_files++;
    }
    closedir(dir);
    if (s == CL_OK && d->n_files > 1)
        qsort(d->files, (size_t)d->n_files, sizeof *d->files, name_cmp);
    return s;
}

static void calib_data_close(calib_data *d)
{
    for (int i = 0; i < d->n_files; i++)
        free(d->files[i]);
    free(d->files);
    cl_transforms_destroy(d->tf);
    cl_dataset_close(d->ds);
    cl_image_free(&d->img);
}

/* DATA: a dataset in a form `classic train` reads (its train split) or a
 * plain folder of images; what was opened goes in `what`. */
static cl_status calib_data_open(calib_data *d, const cl_model *m,
                                 const char *path, char *what, size_t n)
{
    char split_buf[4096];
    const char *split = NULL;
    int subdirs = 0, dataset = 0;
    memset(d, 0, sizeof *d);
    d->m = m;
    d->path = path;
    struct stat st;
    if (stat(path, &st) != 0)
        return cl_error(CL_ERR_IO,
                        "--calib %s: no such file or folder; give a dataset "
                        "`classic train` reads or a folder of images",
                        path);
    if (S_ISDIR(st.st_mode)) {
        CL_TRY(cl_imagefolder_split(path, CL_USAGE_TRAIN, split_buf,
                                    sizeof split_buf, &split));
        if (!split)
            CL_TRY(scan_folder(d, &subdirs, &dataset));
        if (!split && !subdirs && !dataset) {
            if (d->n_files == 0)
                return cl_error(CL_ERR_ARG,
                                "--calib %s: the folder is empty; give a "
                                "folder of images or a dataset `classic "
                                "train` reads",
                                path);
            d->count = d->n_files;
            snprintf(what, n, "the %d files of folder %s", d->n_files, path);
            return CL_OK;
        }
        for (int i = 0; i < d->n_files; i++)
            free(d->files[i]);
        free(d->files);
        d->files = NULL;
        d->n_files = 0;
    }
    cl_dataset_spec spec = cl_dataset_spec_default();
    spec.path = split ? split_buf : path;
    spec.usage = CL_USAGE_TRAIN;
    spec.max_pixels = m->cfg.max_pixels > 0 ? (uint64_t)m->cfg.max_pixels : 0;
    cl_status s = cl_dataset_open(&d->ds, &spec);
    if (s != CL_OK)
        return cl_error_wrap(s, "--calib %s: ", path);
    int h = 0, w = 0, c = 0;
    cl_dataset_image_dims(d->ds, &h, &w, &c);
    if (c > 0 && c != m->in_c)
        return cl_error(CL_ERR_SHAPE,
                        "--calib %s: its images have %d channel(s) and the "
                        "model takes %d; calibrate on data like the model's "
                        "own",
                        path, c, m->in_c);
    d->count = cl_dataset_count(d->ds);
    if (d->count <= 0)
        return cl_error(CL_ERR_ARG, "--calib %s: the dataset has no images",
                        spec.path);
    snprintf(what, n, "%s %s (train split)", cl_dataset_format(d->ds),
             spec.path);
    cl_transform_opts to;
    CL_TRY(cl_model_transforms(m, h, w, &to));
    return cl_transforms_create(&d->tf, &to);
}

/* Sample k through the model's eval transforms into x (in_c x side x
 * side floats). */
static cl_status calib_data_get(calib_data *d, int64_t k, float *x)
{
    const cl_model *m = d->m;
    const char *file = NULL;
    cl_status s;
    if (d->files) {
        file = d->files[k];
        s = cl_image_load(
            file, 0, m->cfg.max_pixels > 0 ? (uint64_t)m->cfg.max_pixels : 0,
            &d->img);
        if (s != CL_OK)
            return cl_error_wrap(s, "--calib: ");
    } else {
        int32_t label;
        file = cl_dataset_path(d->ds, k);
        if ((s = cl_dataset_get(d->ds, k, 0, &d->img, &label)) != CL_OK)
            return cl_error_wrap(s, "--calib %s: ", d->path);
    }
    if (d->img.c != m->in_c)
        return cl_error(CL_ERR_SHAPE,
                        "--calib: %s has %d channel(s) and the model takes "
                        "%d; convert the images or calibrate on others",
                        file ? file : d->path, d->img.c, m->in_c);
    if (d->tf)
        return cl_transforms_apply(d->tf, &d->img, NULL, NULL, x);
    cl_transform_opts to;
    cl_transforms *tf = NULL;
    if ((s = cl_model_transforms(m, d->img.h, d->img.w, &to)) == CL_OK &&
        (s = cl_transforms_create(&tf, &to)) == CL_OK)
        s = cl_transforms_apply(tf, &d->img, NULL, NULL, x);
    cl_transforms_destroy(tf);
    return s;
}

/* ---- classic quantize -----------------------------------------------------
 */

/* Whether a and b name one existing file. */
static int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    if (strcmp(a, b) == 0)
        return 1;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* Appends "name" of each conv and linear layer staying f32. */
static void float_layers(const cl_graph *g, cl_quantize_report *r)
{
    size_t len = 0;
    r->stay_float[0] = '\0';
    for (int i = 0; i < g->n_nodes; i++) {
        cl_op_kind op = g->nodes[i].op;
        if (op != CL_OP_CONV2D && op != CL_OP_LINEAR)
            continue;
        if (cl_graph_quant_node(g, i)) {
            r->n_int8++;
            continue;
        }
        r->n_float++;
        int w = snprintf(r->stay_float + len, sizeof r->stay_float - len,
                         "%s%s", len ? ", " : "", g->nodes[i].name);
        if (w > 0 && (size_t)w < sizeof r->stay_float - len)
            len += (size_t)w;
    }
}

/* The metadata of the int8 file: the source's, then the quant.* keys. */
static cl_status write_file(const cl_quantize_opts *o, const cl_graph *g,
                            int samples)
{
    enum { EXTRA = 6 };
    cl_st_file *f = NULL;
    char src[PATH_MAX], calib[PATH_MAX], method[64], nsamp[32];
    const char **keys = NULL, **vals = NULL;
    CL_TRY(cl_st_open(&f, o->checkpoint));
    size_t n = cl_st_metadata_count(f);
    int k = 0;
    cl_status s = CL_ERR_NOMEM;
    keys = cl_alloc(sizeof *keys * (n + EXTRA), "int8 metadata");
    vals = cl_alloc(sizeof *vals * (n + EXTRA), "int8 metadata");
    if (!keys || !vals)
        goto done;
    for (size_t i = 0; i < n; i++) {
        const char *key = cl_st_metadata_key(f, i);
        if (strcmp(key, CL_QUANT_META_PRECISION) == 0 ||
            strncmp(key, "quant.", 6) == 0)
            continue;
        keys[k] = key;
        vals[k++] = cl_st_metadata_value(f, i);
    }
    if (!realpath(o->checkpoint, src))
        snprintf(src, sizeof src, "%s", o->checkpoint);
    if (!realpath(o->calib, calib))
        snprintf(calib, sizeof calib, "%s", o->calib);
    if (o->q.method == CL_QUANT_PERCENTILE)
        snprintf(method, sizeof method, "percentile:%g",
                 o->q.percentile > 0 ? o->q.percentile : 99.99);
    else
        snprintf(method, sizeof method, "%s",
                 cl_quant_method_name(o->q.method));
    snprintf(nsamp, sizeof nsamp, "%d", samples);
    const char *extra[EXTRA][2] = {
        {CL_QUANT_META_PRECISION, "int8"},
        {CL_QUANT_META_METHOD, method},
        {CL_QUANT_META_SAMPLES, nsamp},
        {CL_QUANT_META_SOURCE, src},
        {CL_QUANT_META_CALIB, calib},
        {CL_QUANT_META_WEIGHTS, o->q.weight_bits == 7
                                    ? "s8 per output channel at 7 bits "
                                      "([-63, 63]), BN folded"
                                    : "s8 per output channel, BN folded"}};
    for (int e = 0; e < EXTRA; e++) {
        keys[k] = extra[e][0];
        vals[k++] = extra[e][1];
    }
    s = cl_quant_save(o->out, g, keys, vals, k);
done:
    cl_free(keys);
    cl_free(vals);
    cl_st_close(f);
    return s;
}

cl_status cl_quantize_run(const cl_quantize_opts *o, cl_quantize_report *rep)
{
    cl_model m;
    calib_data d;
    cl_quant_calib *c = NULL;
    cl_backend *be = NULL;
    float *x = NULL, *targets = NULL;
    int32_t *labels = NULL;
    memset(&m, 0, sizeof m);
    memset(&d, 0, sizeof d);
    memset(rep, 0, sizeof *rep);
    if (o->samples <= 0)
        return cl_error(CL_ERR_ARG,
                        "--samples %d: give a number of calibration images "
                        "above 0 (512 by default)",
                        o->samples);
    if (o->batch <= 0)
        return cl_error(CL_ERR_ARG, "--batch_size %d: give a batch above 0",
                        o->batch);
    if (same_file(o->out, o->checkpoint))
        return cl_error(CL_ERR_ARG,
                        "--out %s is the checkpoint itself: give another "
                        "file for the int8 model",
                        o->out);
    int batch = o->batch < o->samples ? o->batch : o->samples;
    cl_status s =
        cl_model_open_weights(&m, o->checkpoint, NULL, batch, NULL,
                              CL_PLAN_TRAIN, o->threads, 0, CL_PRECISION_F32);
    if (s != CL_OK)
        return s;
    if (m.foreign) {
        s = cl_error(CL_ERR_FORMAT,
                     "--checkpoint %s has no classic metadata, so no eval "
                     "pipeline (image size, normalization) to calibrate "
                     "through: make a classic checkpoint of it with `classic "
                     "convert %s OUT.safetensors` and quantize that",
                     o->checkpoint, o->checkpoint);
        goto done;
    }
    if (m.g.quant) {
        s = cl_error(CL_ERR_ARG,
                     "--checkpoint %s is quantized already: quantize the f32 "
                     "checkpoint it was made from",
                     o->checkpoint);
        goto done;
    }
    if ((s = calib_data_open(&d, &m, o->calib, rep->data, sizeof rep->data)) !=
        CL_OK)
        goto done;
    int64_t want = o->samples < d.count ? o->samples : d.count;
    size_t per = (size_t)m.in_c * (size_t)m.side * (size_t)m.side;
    x = cl_alloc(per * (size_t)batch * sizeof *x, "calibration batch");
    if (!x) {
        s = CL_ERR_NOMEM;
        goto done;
    }
    if ((s = cl_quant_calib_create(&c, &m.g, &o->q)) != CL_OK ||
        (s = dummy_targets(&m.g, &labels, &targets)) != CL_OK ||
        (s = calib_plan(&m.g, "onednn", o->threads, &be)) != CL_OK)
        goto done;
    for (int p = 0; s == CL_OK && p < cl_quant_calib_passes(c); p++)
        for (int64_t k0 = 0; s == CL_OK && k0 < want; k0 += batch) {
            int nb = (int)(want - k0 < batch ? want - k0 : batch);
            for (int j = 0; s == CL_OK && j < nb; j++)
                s = calib_data_get(&d, k0 + j, x + (size_t)j * per);
            /* A partial last batch is padded with its last image, which
             * observe leaves out. */
            for (int j = nb; s == CL_OK && j < batch; j++)
                memcpy(x + (size_t)j * per, x + (size_t)(nb - 1) * per,
                       per * sizeof *x);
            if (s == CL_OK &&
                (s = calib_forward(be, &m.g, x, labels, targets)) == CL_OK)
                s = cl_quant_calib_observe(c, be, p, nb);
        }
    cl_backend_destroy(be);
    be = NULL;
    if (s != CL_OK || (s = cl_quant_calib_apply(c, &m.g)) != CL_OK)
        goto done;
    rep->samples = (int)want;
    float_layers(&m.g, rep);
    s = write_file(o, &m.g, (int)want);
done:
    cl_backend_destroy(be);
    cl_quant_calib_free(c);
    cl_free(x);
    cl_free(labels);
    cl_free(targets);
    calib_data_close(&d);
    cl_model_close(&m);
    return s;
}
