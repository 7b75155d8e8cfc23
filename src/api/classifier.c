/* The public inference API: a checkpoint opened through train/model.h,
 * images preprocessed as its eval pipeline, softmax and top-k here. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/opts.h"
#include "classic/classic.h"
#include "core/error.h"
#include "core/mem.h"
#include "io/config.h"
#include "models/arch.h"
#include "train/model.h"

/* The batch sizes of cl_classifier_forward after 1: 2, 4, ..., 64. */
enum { CL_FORWARD_PLANS = 6 };

struct cl_classifier {
    cl_model m;
    float *x;      /* x: (in_c, side, side), one preprocessed image */
    float *logits; /* logits: (num_classes) */
    int dim;       /* features per image, 0 when the graph has none */
    cl_image img;  /* the decoded or converted image, reused */
    cl_transforms *tf;
    int tf_h, tf_w;   /* the source size tf was made for */
    char backend[16]; /* what the model was planned on ("" for none) */
    /* The same network planned for CL_CLASSIFIER_BATCH images, made on the
     * first batch call: bx (B, in_c, side, side), blogits (B, K). */
    cl_graph bg;
    int bg_ready;
    cl_backend *bbe;
    float *bx, *blogits, *bfeat;
    /* cl_classifier_forward's plans: ladder[i] for 2 << i images (1 image
     * runs on m itself), each made on its first use. */
    struct forward_plan {
        cl_graph g;
        int g_ready;
        cl_backend *be;
        float *x, *logits; /* x: (B, in_c, side, side), logits: (B, K) */
    } ladder[CL_FORWARD_PLANS];
};

/* Images per forward of the batch calls. */
enum { CL_CLASSIFIER_BATCH = 16 };

/* "none": the graph only; NULL: oneDNN. */
static const char *backend_of(const char *backend)
{
    if (!backend)
        return "onednn";
    return strcmp(backend, "none") == 0 ? NULL : backend;
}

/* The buffers of a classifier whose model c->m is open; frees c on
 * failure. */
static cl_status finish(cl_classifier *c, const char *backend,
                        cl_classifier **out)
{
    cl_model *m = &c->m;
    snprintf(c->backend, sizeof c->backend, "%s", backend ? backend : "");
    if (m->g.features >= 0)
        c->dim = (int)m->g.tensors[m->g.features].shape.d[1];
    c->x = cl_alloc((size_t)m->in_c * m->side * m->side * sizeof(float),
                    "classifier input");
    c->logits =
        cl_alloc((size_t)m->num_classes * sizeof(float), "classifier logits");
    if (!c->x || !c->logits) {
        cl_classifier_free(c);
        return CL_ERR_NOMEM;
    }
    *out = c;
    return CL_OK;
}

cl_status cl_classifier_load(cl_classifier **out, const char *path,
                             const char *arch, const char *backend)
{
    cl_classifier_opts o = {.size = sizeof o, .arch = arch, .backend = backend};
    return cl_classifier_open(out, path, &o);
}

cl_status cl_classifier_open(cl_classifier **out, const char *path,
                             const cl_classifier_opts *opts)
{
    if (!out)
        return cl_error(CL_ERR_ARG, "cl_classifier_open: out is NULL");
    *out = NULL;
    if (!path)
        return cl_error(CL_ERR_ARG, "cl_classifier_open: path is NULL");
    cl_classifier_opts o;
    cl_precision prec;
    CL_TRY(cl_api_read_opts(&o, sizeof o, opts, "cl_classifier_open",
                            "cl_classifier_opts"));
    CL_TRY(cl_precision_parse(o.precision, &prec));
    cl_classifier *c = calloc(1, sizeof *c);
    if (!c)
        return cl_error(CL_ERR_NOMEM, "cl_classifier_open: out of memory");
    const char *be = backend_of(o.backend);
    cl_status s = cl_model_open_weights(&c->m, path, o.arch, 1, be,
                                        CL_PLAN_INFER, 0, o.raw_weights, prec);
    if (s != CL_OK) {
        free(c);
        return s;
    }
    return finish(c, be, out);
}

cl_status cl_classifier_create(cl_classifier **out, const char *config_text,
                               const char *const *overrides, int n_overrides,
                               const char *backend)
{
    const char *fn = "cl_classifier_create";
    if (!out)
        return cl_error(CL_ERR_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (n_overrides < 0 || (n_overrides > 0 && !overrides))
        return cl_error(CL_ERR_ARG, "%s: %d overrides given but the list is %s",
                        fn, n_overrides, overrides ? "there" : "NULL");
    cl_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cl_config_defaults(&cfg);
    if (config_text)
        CL_TRY(cl_config_merge_yaml_text(&cfg, config_text, strlen(config_text),
                                         "config text"));
    for (int i = 0; i < n_overrides; i++)
        CL_TRY(cl_config_set_pair(&cfg, overrides[i], fn));
    CL_TRY(cl_config_check(&cfg));
    cl_classifier *c = calloc(1, sizeof *c);
    if (!c)
        return cl_error(CL_ERR_NOMEM, "%s: out of memory", fn);
    const char *be = backend_of(backend);
    cl_status s =
        cl_model_create(&c->m, &cfg, 1, be, CL_PLAN_INFER, 0, CL_PRECISION_F32);
    if (s != CL_OK) {
        free(c);
        return s;
    }
    return finish(c, be, out);
}

const char *cl_classifier_precision(const cl_classifier *c)
{
    return c ? cl_precision_name(c->m.precision) : NULL;
}

long long cl_classifier_num_params(const cl_classifier *c)
{
    return c ? (long long)c->m.g.n_param_elems : 0;
}

long long cl_classifier_macs(const cl_classifier *c)
{
    return c ? (long long)cl_graph_macs(&c->m.g) : 0;
}

cl_status cl_classifier_print(const cl_classifier *c, FILE *f)
{
    if (!c || !f)
        return cl_error(CL_ERR_ARG,
                        "cl_classifier_print: classifier or file is NULL");
    const cl_model *m = &c->m;
    char name[32];
    const char *stem = cl_arch_stem(&m->arch);
    fprintf(f, "%s, %s%s%d input channel(s), %d classes, %dx%d input\n",
            cl_arch_name(&m->arch, name, sizeof name), stem ? stem : "",
            stem ? " stem, " : "", m->in_c, m->num_classes, m->side, m->side);
    cl_graph_print_layers(&m->g, f);
    long long macs = cl_classifier_macs(c);
    fprintf(f, "parameters: %lld\n", cl_classifier_num_params(c));
    fprintf(f, "forward: %.3f GFLOPs per image (%.3f G multiply-adds)\n",
            2e-9 * (double)macs, 1e-9 * (double)macs);
    return CL_OK;
}

void cl_classifier_free(cl_classifier *c)
{
    if (!c)
        return;
    cl_transforms_destroy(c->tf);
    cl_image_free(&c->img);
    cl_free(c->x);
    cl_free(c->logits);
    cl_backend_destroy(c->bbe);
    if (c->bg_ready)
        cl_graph_free(&c->bg);
    cl_free(c->bx);
    cl_free(c->blogits);
    cl_free(c->bfeat);
    for (int i = 0; i < CL_FORWARD_PLANS; i++) {
        struct forward_plan *p = &c->ladder[i];
        cl_backend_destroy(p->be);
        if (p->g_ready)
            cl_graph_free(&p->g);
        cl_free(p->x);
        cl_free(p->logits);
    }
    cl_model_close(&c->m);
    free(c);
}

int cl_classifier_num_classes(const cl_classifier *c)
{
    return c ? c->m.num_classes : 0;
}

const char *cl_classifier_class_name(const cl_classifier *c, int k)
{
    if (!c || k < 0 || k >= c->m.num_classes)
        return NULL;
    return c->m.class_names && c->m.class_names[k] ? c->m.class_names[k] : "";
}

int cl_classifier_embed_dim(const cl_classifier *c)
{
    return c ? c->dim : 0;
}

cl_status cl_classifier_input(const cl_classifier *c, int *channels, int *side)
{
    if (!c)
        return cl_error(CL_ERR_ARG, "cl_classifier_input: classifier is NULL");
    if (channels)
        *channels = c->m.in_c;
    if (side)
        *side = c->m.side;
    return CL_OK;
}

/* Softmax of logits (k) into probs, in double as `classic predict` did. */
static void softmax(const float *logits, int k, float *probs)
{
    double mx = logits[0], se = 0;
    for (int i = 1; i < k; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    for (int i = 0; i < k; i++)
        se += exp(logits[i] - mx);
    for (int i = 0; i < k; i++)
        probs[i] = (float)(exp(logits[i] - mx) / se);
}

/* c->img through the eval pipeline into x (in_c, side, side). */
static cl_status prepare(cl_classifier *c, float *x)
{
    cl_status s;
    if (!c->tf || c->tf_h != c->img.h || c->tf_w != c->img.w) {
        cl_transform_opts to;
        cl_transforms_destroy(c->tf);
        c->tf = NULL;
        if ((s = cl_model_transforms(&c->m, c->img.h, c->img.w, &to)) !=
                CL_OK ||
            (s = cl_transforms_create(&c->tf, &to)) != CL_OK)
            return s;
        c->tf_h = c->img.h;
        c->tf_w = c->img.w;
    }
    return cl_transforms_apply(c->tf, &c->img, NULL, NULL, x);
}

/* Runs c->img through the eval pipeline and the network; writes the
 * probabilities and/or the features (either may be NULL). */
static cl_status run(cl_classifier *c, float *probs, float *feat)
{
    cl_model *m = &c->m;
    cl_status s;
    if (!m->be)
        return cl_error(CL_ERR_ARG, "the model was opened with backend "
                                    "\"none\": it describes the network but "
                                    "does not run it");
    if (feat && c->dim == 0)
        return cl_error(CL_ERR_UNSUPPORTED,
                        "this model has no feature layer to embed with");
    if ((s = prepare(c, c->x)) != CL_OK ||
        (s = cl_backend_set_input(m->be, c->x, NULL, NULL)) != CL_OK ||
        (s = cl_backend_forward(m->be, 0, NULL)) != CL_OK)
        return s;
    if (feat && (s = cl_backend_read(m->be, m->g.features, feat)) != CL_OK)
        return s;
    if (probs) {
        if ((s = cl_backend_read(m->be, m->g.logits, c->logits)) != CL_OK)
            return s;
        softmax(c->logits, m->num_classes, probs);
    }
    return CL_OK;
}

static cl_status from_file(cl_classifier *c, const char *path, float *probs,
                           float *feat, const char *fn)
{
    if (!c)
        return cl_error(CL_ERR_ARG, "%s: classifier is NULL", fn);
    if (!path)
        return cl_error(CL_ERR_ARG, "%s: path is NULL", fn);
    if (!probs && !feat)
        return cl_error(CL_ERR_ARG, "%s: output buffer is NULL", fn);
    cl_status s = cl_image_load(path, 0, 0, &c->img);
    if (s != CL_OK)
        return s;
    return run(c, probs, feat);
}

/* Checks an in-memory image's description and copies it into c->img as
 * 8-bit pixels. */
static cl_status from_pixels(cl_classifier *c, const void *pixels,
                             cl_pixel_type type, int h, int w, int ch,
                             const char *fn)
{
    if (!c)
        return cl_error(CL_ERR_ARG, "%s: classifier is NULL", fn);
    if (!pixels)
        return cl_error(CL_ERR_ARG, "%s: pixels is NULL", fn);
    if (type != CL_PIXEL_U8 && type != CL_PIXEL_F32)
        return cl_error(CL_ERR_ARG,
                        "%s: pixel type %d: expected CL_PIXEL_U8 (0) or "
                        "CL_PIXEL_F32 (1)",
                        fn, (int)type);
    if (ch != 1 && ch != 3)
        return cl_error(CL_ERR_SHAPE,
                        "%s: image has %d channels: expected 1 (gray) or 3 "
                        "(RGB)",
                        fn, ch);
    if (h < 1 || w < 1)
        return cl_error(CL_ERR_SHAPE,
                        "%s: image is %d x %d pixels: both sides must be at "
                        "least 1",
                        fn, h, w);
    if ((uint64_t)h * (uint64_t)w > CL_DATA_DEFAULT_MAX_PIXELS)
        return cl_error(CL_ERR_LIMIT,
                        "%s: image is %d x %d pixels: more than the limit of "
                        "%u",
                        fn, h, w, (unsigned)CL_DATA_DEFAULT_MAX_PIXELS);
    CL_TRY(cl_image_reserve(&c->img, h, w, ch));
    size_t n = (size_t)h * w * ch;
    if (type == CL_PIXEL_U8) {
        memcpy(c->img.data, pixels, n);
        return CL_OK;
    }
    const float *f = pixels;
    for (size_t i = 0; i < n; i++) {
        float v = f[i] * 255.0f + 0.5f;
        /* NaN compares false both ways and becomes 0. */
        c->img.data[i] = v >= 255.0f ? 255 : v > 0.0f ? (uint8_t)v : 0;
    }
    return CL_OK;
}

cl_status cl_classifier_classify_file(cl_classifier *c, const char *path,
                                      float *probs)
{
    return from_file(c, path, probs, NULL, "cl_classifier_classify_file");
}

cl_status cl_classifier_embed_file(cl_classifier *c, const char *path,
                                   float *feat)
{
    return from_file(c, path, NULL, feat, "cl_classifier_embed_file");
}

cl_status cl_classifier_classify(cl_classifier *c, const void *pixels,
                                 cl_pixel_type type, int h, int w, int channels,
                                 float *probs)
{
    const char *fn = "cl_classifier_classify";
    if (c && !probs)
        return cl_error(CL_ERR_ARG, "%s: probs is NULL", fn);
    CL_TRY(from_pixels(c, pixels, type, h, w, channels, fn));
    return run(c, probs, NULL);
}

cl_status cl_classifier_embed(cl_classifier *c, const void *pixels,
                              cl_pixel_type type, int h, int w, int channels,
                              float *feat)
{
    const char *fn = "cl_classifier_embed";
    if (c && !feat)
        return cl_error(CL_ERR_ARG, "%s: feat is NULL", fn);
    CL_TRY(from_pixels(c, pixels, type, h, w, channels, fn));
    return run(c, NULL, feat);
}

/* The batch network: the same graph for CL_CLASSIFIER_BATCH images with
 * the batch-of-one network's weights, on the same backend. */
static cl_status batch_net(cl_classifier *c)
{
    cl_model *m = &c->m;
    if (c->bbe)
        return CL_OK;
    if (!m->be)
        return cl_error(CL_ERR_ARG, "the model was opened with backend "
                                    "\"none\": it describes the network but "
                                    "does not run it");
    enum { B = CL_CLASSIFIER_BATCH };
    CL_TRY(cl_graph_init(&c->bg, B));
    c->bg_ready = 1;
    CL_TRY(cl_arch_build(&c->bg, &m->arch, m->side, m->side, 0, 0));
    CL_TRY(cl_graph_copy_state(&c->bg, &m->g));
    size_t per = (size_t)m->in_c * m->side * m->side;
    c->bx = cl_alloc(B * per * sizeof(float), "batch input");
    c->blogits =
        cl_alloc((size_t)B * m->num_classes * sizeof(float), "batch logits");
    if (!c->bx || !c->blogits)
        return CL_ERR_NOMEM;
    return cl_model_plan_like(m, c->backend, &c->bg, &c->bbe);
}

/* Puts image i of a batch call into c->img. */
typedef cl_status (*image_fn)(cl_classifier *c, const void *ctx, int i);

/* n images through the batch network, CL_CLASSIFIER_BATCH per forward
 * (the last forward padded with zeros, whose rows are dropped); probs
 * receives (n, num_classes).  Errors name image i. */
static cl_status run_many(cl_classifier *c, int n, image_fn get,
                          const void *ctx, float *probs, float *feat,
                          const char *fn)
{
    cl_model *m = &c->m;
    int K = m->num_classes, D = c->dim;
    size_t per = (size_t)m->in_c * m->side * m->side;
    if (feat && D == 0)
        return cl_error(CL_ERR_UNSUPPORTED,
                        "%s: this model has no feature layer to embed with",
                        fn);
    cl_status s = batch_net(c);
    if (s != CL_OK)
        return cl_error_wrap(s, "%s: ", fn);
    if (feat && !c->bfeat &&
        !(c->bfeat = cl_alloc((size_t)CL_CLASSIFIER_BATCH * D * sizeof(float),
                              "batch features")))
        return CL_ERR_NOMEM;
    for (int i0 = 0; i0 < n; i0 += CL_CLASSIFIER_BATCH) {
        int nb = n - i0 < CL_CLASSIFIER_BATCH ? n - i0 : CL_CLASSIFIER_BATCH;
        for (int j = 0; j < nb; j++)
            if ((s = get(c, ctx, i0 + j)) != CL_OK ||
                (s = prepare(c, c->bx + j * per)) != CL_OK)
                return cl_error_wrap(s, "%s: image %d: ", fn, i0 + j);
        memset(c->bx + nb * per, 0,
               (CL_CLASSIFIER_BATCH - nb) * per * sizeof(float));
        if ((s = cl_backend_set_input(c->bbe, c->bx, NULL, NULL)) != CL_OK ||
            (s = cl_backend_forward(c->bbe, 0, NULL)) != CL_OK)
            return s;
        if (probs) {
            if ((s = cl_backend_read(c->bbe, c->bg.logits, c->blogits)) !=
                CL_OK)
                return s;
            for (int j = 0; j < nb; j++)
                softmax(c->blogits + (size_t)j * K, K,
                        probs + (size_t)(i0 + j) * K);
        }
        if (feat) {
            if ((s = cl_backend_read(c->bbe, c->bg.features, c->bfeat)) !=
                CL_OK)
                return s;
            memcpy(feat + (size_t)i0 * D, c->bfeat,
                   (size_t)nb * D * sizeof(float));
        }
    }
    return CL_OK;
}

typedef struct pixels_ctx {
    const char *p;
    cl_pixel_type type;
    int h, w, channels;
    size_t stride; /* bytes per image */
    const char *fn;
} pixels_ctx;

static cl_status image_from_pixels(cl_classifier *c, const void *ctx, int i)
{
    const pixels_ctx *x = ctx;
    return from_pixels(c, x->p + (size_t)i * x->stride, x->type, x->h, x->w,
                       x->channels, x->fn);
}

static cl_status image_from_file(cl_classifier *c, const void *ctx, int i)
{
    const char *const *paths = ctx;
    if (!paths[i])
        return cl_error(CL_ERR_ARG, "path is NULL");
    return cl_image_load(paths[i], 0, 0, &c->img);
}

/* n in-memory images of one size: probabilities and/or features. */
static cl_status pixels_many(cl_classifier *c, int n, const void *pixels,
                             cl_pixel_type type, int h, int w, int channels,
                             float *probs, float *feat, const char *fn)
{
    if (!c)
        return cl_error(CL_ERR_ARG, "%s: classifier is NULL", fn);
    if (n < 0)
        return cl_error(CL_ERR_ARG, "%s: n = %d is negative", fn, n);
    if (!probs && !feat)
        return cl_error(CL_ERR_ARG, "%s: the output is NULL", fn);
    if (n == 0)
        return CL_OK;
    /* The description is checked once, on the first image. */
    cl_status s = from_pixels(c, pixels, type, h, w, channels, fn);
    if (s != CL_OK)
        return cl_error_wrap(s, "image 0: ");
    size_t elem = type == CL_PIXEL_F32 ? sizeof(float) : 1;
    pixels_ctx x = {
        pixels, type, h, w, channels, (size_t)h * w * channels * elem, fn};
    if (n == 1)
        return run(c, probs, feat);
    return run_many(c, n, image_from_pixels, &x, probs, feat, fn);
}

/* n files: probabilities and/or features. */
static cl_status files_many(cl_classifier *c, int n, const char *const *paths,
                            float *probs, float *feat, const char *fn)
{
    if (!c)
        return cl_error(CL_ERR_ARG, "%s: classifier is NULL", fn);
    if (n < 0)
        return cl_error(CL_ERR_ARG, "%s: n = %d is negative", fn, n);
    if (n > 0 && !paths)
        return cl_error(CL_ERR_ARG, "%s: paths is NULL", fn);
    if (n > 0 && !probs && !feat)
        return cl_error(CL_ERR_ARG, "%s: the output is NULL", fn);
    if (n == 1)
        return from_file(c, paths[0], probs, feat, fn);
    return n == 0 ? CL_OK
                  : run_many(c, n, image_from_file, paths, probs, feat, fn);
}

cl_status cl_classifier_classify_batch(cl_classifier *c, int n,
                                       const void *pixels, cl_pixel_type type,
                                       int h, int w, int channels, float *probs)
{
    const char *fn = "cl_classifier_classify_batch";
    if (c && !probs)
        return cl_error(CL_ERR_ARG, "%s: probs is NULL", fn);
    return pixels_many(c, n, pixels, type, h, w, channels, probs, NULL, fn);
}

cl_status cl_classifier_classify_files(cl_classifier *c, int n,
                                       const char *const *paths, float *probs)
{
    const char *fn = "cl_classifier_classify_files";
    if (c && n > 0 && paths && !probs)
        return cl_error(CL_ERR_ARG, "%s: probs is NULL", fn);
    return files_many(c, n, paths, probs, NULL, fn);
}

cl_status cl_classifier_embed_batch(cl_classifier *c, int n, const void *pixels,
                                    cl_pixel_type type, int h, int w,
                                    int channels, float *feat)
{
    const char *fn = "cl_classifier_embed_batch";
    if (c && !feat)
        return cl_error(CL_ERR_ARG, "%s: feat is NULL", fn);
    return pixels_many(c, n, pixels, type, h, w, channels, NULL, feat, fn);
}

cl_status cl_classifier_embed_files(cl_classifier *c, int n,
                                    const char *const *paths, float *feat)
{
    const char *fn = "cl_classifier_embed_files";
    if (c && n > 0 && paths && !feat)
        return cl_error(CL_ERR_ARG, "%s: feat is NULL", fn);
    return files_many(c, n, paths, NULL, feat, fn);
}

int cl_classifier_top_k(const cl_classifier *c, const float *probs, int k,
                        cl_prediction *out)
{
    const char *fn = "cl_classifier_top_k";
    if (!c)
        return cl_error(CL_ERR_ARG, "%s: classifier is NULL", fn);
    if (!probs || !out)
        return cl_error(CL_ERR_ARG, "%s: probs or out is NULL", fn);
    if (k < 1)
        return cl_error(CL_ERR_ARG, "%s: k = %d: expected at least 1", fn, k);
    int K = c->m.num_classes;
    if (k > K)
        k = K;
    /* k passes of a linear scan: k is small and K at most thousands. */
    for (int t = 0; t < k; t++) {
        int best = -1;
        for (int j = 0; j < K; j++) {
            int taken = 0;
            for (int u = 0; u < t && !taken; u++)
                taken = out[u].index == j;
            if (!taken && (best < 0 || probs[j] > probs[best]))
                best = j;
        }
        out[t].index = best;
        out[t].prob = probs[best];
        out[t].name = cl_classifier_class_name(c, best);
    }
    return k;
}

cl_status cl_classifier_prepare(const cl_classifier *c, const void *data,
                                size_t len, unsigned long long max_pixels,
                                float *x)
{
    const char *fn = "cl_classifier_prepare";
    if (!c || !data || !x)
        return cl_error(CL_ERR_ARG, "%s: classifier, data or x is NULL", fn);
    /* Everything mutable is local: the image and the pipeline made for its
     * size, so that threads can prepare at once on one handle. */
    cl_image img;
    cl_transforms *tf = NULL;
    cl_transform_opts to;
    memset(&img, 0, sizeof img);
    cl_status s = cl_image_decode(data, len, "image", 0, max_pixels, &img);
    if (s == CL_OK &&
        (s = cl_model_transforms(&c->m, img.h, img.w, &to)) == CL_OK &&
        (s = cl_transforms_create(&tf, &to)) == CL_OK)
        s = cl_transforms_apply(tf, &img, NULL, NULL, x);
    cl_transforms_destroy(tf);
    cl_image_free(&img);
    return s;
}

/* The plan for 2 << i images, made on first use as batch_net makes its. */
static cl_status forward_plan(cl_classifier *c, int i)
{
    cl_model *m = &c->m;
    struct forward_plan *p = &c->ladder[i];
    if (p->be)
        return CL_OK;
    int B = 2 << i;
    size_t per = (size_t)m->in_c * m->side * m->side;
    CL_TRY(cl_graph_init(&p->g, B));
    p->g_ready = 1;
    CL_TRY(cl_arch_build(&p->g, &m->arch, m->side, m->side, 0, 0));
    CL_TRY(cl_graph_copy_state(&p->g, &m->g));
    p->x = cl_alloc(B * per * sizeof(float), "forward input");
    p->logits =
        cl_alloc((size_t)B * m->num_classes * sizeof(float), "forward logits");
    if (!p->x || !p->logits)
        return CL_ERR_NOMEM;
    return cl_model_plan_like(m, c->backend, &p->g, &p->be);
}

cl_status cl_classifier_forward(cl_classifier *c, int n, const float *x,
                                float *probs)
{
    const char *fn = "cl_classifier_forward";
    if (!c || (n > 0 && (!x || !probs)))
        return cl_error(CL_ERR_ARG, "%s: classifier, x or probs is NULL", fn);
    if (n < 0)
        return cl_error(CL_ERR_ARG, "%s: n = %d is negative", fn, n);
    cl_model *m = &c->m;
    if (!m->be)
        return cl_error(CL_ERR_ARG,
                        "%s: the model was opened with backend "
                        "\"none\": it describes the network but "
                        "does not run it",
                        fn);
    int K = m->num_classes;
    size_t per = (size_t)m->in_c * m->side * m->side;
    cl_status s;
    while (n > 0) {
        if (n == 1) {
            if ((s = cl_backend_set_input(m->be, x, NULL, NULL)) != CL_OK ||
                (s = cl_backend_forward(m->be, 0, NULL)) != CL_OK ||
                (s = cl_backend_read(m->be, m->g.logits, c->logits)) != CL_OK)
                return s;
            softmax(c->logits, K, probs);
            return CL_OK;
        }
        int i = 0;
        while (i < CL_FORWARD_PLANS - 1 && (2 << i) < n)
            i++;
        int B = 2 << i, nb = n < B ? n : B;
        if ((s = forward_plan(c, i)) != CL_OK)
            return cl_error_wrap(s, "%s: planning %d images: ", fn, B);
        struct forward_plan *p = &c->ladder[i];
        memcpy(p->x, x, nb * per * sizeof(float));
        memset(p->x + nb * per, 0, (B - nb) * per * sizeof(float));
        if ((s = cl_backend_set_input(p->be, p->x, NULL, NULL)) != CL_OK ||
            (s = cl_backend_forward(p->be, 0, NULL)) != CL_OK ||
            (s = cl_backend_read(p->be, p->g.logits, p->logits)) != CL_OK)
            return s;
        for (int j = 0; j < nb; j++)
            softmax(p->logits + (size_t)j * K, K, probs + (size_t)j * K);
        x += nb * per;
        probs += (size_t)nb * K;
        n -= nb;
    }
    return CL_OK;
}
