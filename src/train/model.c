/* A model for inference: a checkpoint opened from its own metadata (or
 * its tensors), or a recipe's network with its initial weights. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "interop/interop.h"
#include "interop/quantized.h"
#include "io/checkpoint.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "train/model.h"
#include "train/recipe.h"
#include "train/trainer.h"

static cl_status meta_int(const cl_st_file *f, const char *path,
                          const char *key, int lo, int hi, int *out)
{
    const char *v = cl_st_metadata(f, key);
    char *end = NULL;
    if (!v)
        return cl_error(CL_ERR_FORMAT,
                        "%s: metadata has no '%s' (not a classic model "
                        "checkpoint?)",
                        path, key);
    long x = strtol(v, &end, 10);
    if (end == v || *end || x < lo || x > hi)
        return cl_error(CL_ERR_FORMAT,
                        "%s: metadata '%s' is '%s', expected an integer in "
                        "[%d, %d]",
                        path, key, v, lo, hi);
    *out = (int)x;
    return CL_OK;
}

static cl_status class_names(cl_model *m, const cl_st_file *f, const char *path)
{
    m->class_names = calloc((size_t)m->num_classes, sizeof *m->class_names);
    if (!m->class_names)
        return cl_error(CL_ERR_NOMEM, "class names");
    const char *v = cl_st_metadata(f, CL_META_CLASS_NAMES);
    cl_json_doc *doc = NULL;
    const cl_json *it = NULL;
    if (v && cl_json_parse(&doc, v, strlen(v), NULL, path) == CL_OK) {
        const cl_json *root = cl_json_root(doc);
        if (root->type == CL_JSON_ARR)
            it = root->child;
    }
    cl_status s = CL_OK;
    for (int k = 0; k < m->num_classes; k++) {
        const char *name = it && it->type == CL_JSON_STR ? it->str : "";
        char buf[32];
        if (!name[0]) {
            snprintf(buf, sizeof buf, "class %d", k);
            name = buf;
        }
        m->class_names[k] = strdup(name);
        if (!m->class_names[k]) {
            s = cl_error(CL_ERR_NOMEM, "class names");
            break;
        }
        if (it)
            it = it->next;
    }
    cl_json_free(doc);
    return s;
}

/* A classic checkpoint: everything from its metadata. */
static cl_status from_metadata(cl_model *m, const cl_st_file *f,
                               const char *ckpt, const char *want)
{
    cl_status s;
    const char *yaml = cl_st_metadata(f, CL_META_CONFIG);
    if (yaml && (s = cl_config_load_yaml_text(&m->cfg, yaml, strlen(yaml),
                                              ckpt)) != CL_OK)
        return s;
    const char *arch = cl_st_metadata(f, CL_META_ARCH);
    const char *stem = cl_st_metadata(f, CL_META_STEM);
    if (!arch || (!stem && !cl_swin_is_arch(arch)))
        return cl_error(CL_ERR_FORMAT,
                        "%s: metadata lacks 'arch' or 'stem' (not a classic "
                        "model checkpoint?)",
                        ckpt);
    if ((s = cl_arch_parse(arch, stem, &m->arch)) != CL_OK)
        return cl_error_wrap(s, "%s: metadata: ", ckpt);
    if (want && strcmp(want, arch) != 0)
        return cl_error(CL_ERR_ARG, "%s: --arch %s, but the checkpoint is a %s",
                        ckpt, want, arch);
    CL_TRY(meta_int(f, ckpt, CL_META_IN_CHANNELS, 1, 3, &m->in_c));
    CL_TRY(meta_int(f, ckpt, CL_META_NUM_CLASSES, 1, 100000, &m->num_classes));
    CL_TRY(meta_int(f, ckpt, CL_META_IMAGE_SIZE, 8, 4096, &m->side));
    cl_arch_set_io(&m->arch, m->in_c, m->num_classes);
    return class_names(m, f, ckpt);
}

/* Names for a model whose file has none: ImageNet's for a 1000-class
 * head, "class k" otherwise. */
static cl_status default_class_names(cl_model *m)
{
    m->class_names = calloc((size_t)m->num_classes, sizeof *m->class_names);
    if (!m->class_names)
        return cl_error(CL_ERR_NOMEM, "class names");
    for (int k = 0; k < m->num_classes; k++) {
        char buf[32];
        snprintf(buf, sizeof buf, "class %d", k);
        m->class_names[k] =
            strdup(m->num_classes == 1000 ? cl_imagenet_classes[k] : buf);
        if (!m->class_names[k])
            return cl_error(CL_ERR_NOMEM, "class names");
    }
    return CL_OK;
}

/* Weights without classic's metadata (a .pth, a plain safetensors file):
 * the arch from the tensors, torchvision's ImageNet eval pipeline (224,
 * resize 256, centre crop, ImageNet mean/std) and, for a 1000-class head,
 * ImageNet's class names. */
static cl_status from_tensors(cl_model *m, const cl_weights *w,
                              const char *ckpt, const char *want)
{
    char yaml[1024];
    CL_TRY(cl_weights_infer(w, want, &m->arch));
    m->in_c = cl_arch_in_channels(&m->arch);
    m->num_classes = cl_arch_num_classes(&m->arch);
    m->side = cl_arch_default_side(&m->arch);
    char name[32];
    const char *stem = cl_arch_stem(&m->arch);
    int n = snprintf(yaml, sizeof yaml,
                     "dataset: imagefolder\ndata_dir: ./images\n"
                     "num_classes: %d\nimage_size: %d\ncrop_pct: 0.875\n"
                     "random_resized_crop: true\nmodel: %s\n"
                     "stem: %s\nin_channels: %d\n",
                     m->num_classes, m->side,
                     cl_arch_name(&m->arch, name, sizeof name),
                     stem ? stem : "imagenet", m->in_c);
    if (m->in_c == 3)
        snprintf(yaml + n, sizeof yaml - (size_t)n,
                 "mean: [0.485, 0.456, 0.406]\nstd: [0.229, 0.224, 0.225]\n");
    CL_TRY(cl_config_load_yaml_text(&m->cfg, yaml, strlen(yaml), ckpt));
    return default_class_names(m);
}

/* The backend for m's graph at precision prec; none when backend is NULL
 * (prec is still recorded).  A precision the backend or CPU cannot run
 * fast is refused here, where the backend is known. */
static cl_status plan(cl_model *m, const char *backend, cl_plan_mode mode,
                      int threads, cl_precision prec)
{
    if (prec == CL_PRECISION_AUTO)
        prec = m->g.quant && mode == CL_PLAN_INFER ? CL_PRECISION_INT8
                                                   : CL_PRECISION_F32;
    if (prec != CL_PRECISION_F32 && mode != CL_PLAN_INFER)
        return cl_error(CL_ERR_ARG,
                        "precision %s is for inference; training "
                        "chooses its own with amp_level",
                        cl_precision_name(prec));
    if (prec == CL_PRECISION_INT8 && !m->g.quant)
        return cl_error(CL_ERR_UNSUPPORTED,
                        "precision int8 runs a quantized model, and this one "
                        "holds f32 weights: make one with `classic quantize "
                        "--checkpoint CKPT --calib DATA --out Q.safetensors`");
    m->precision = prec;
    if (!backend)
        return CL_OK;
    CL_TRY(cl_precision_check(backend, prec));
    cl_backend_opts bo = {.threads = threads,
                          .amp_level = cl_precision_amp_level(prec),
                          .int8 = prec == CL_PRECISION_INT8};
    return cl_backend_create(&m->be, backend, &m->g, mode, &bo);
}

cl_status cl_model_plan_like(const cl_model *m, const char *backend,
                             cl_graph *g, cl_backend **out)
{
    cl_backend_opts bo = {.amp_level = cl_precision_amp_level(m->precision),
                          .int8 = m->precision == CL_PRECISION_INT8};
    return cl_backend_create(out, backend, g, CL_PLAN_INFER, &bo);
}

cl_status cl_model_open(cl_model *m, const char *ckpt, int batch,
                        const char *backend, cl_plan_mode mode, int threads)
{
    return cl_model_open_as(m, ckpt, NULL, batch, backend, mode, threads);
}

cl_status cl_model_open_as(cl_model *m, const char *ckpt, const char *arch,
                           int batch, const char *backend, cl_plan_mode mode,
                           int threads)
{
    return cl_model_open_weights(m, ckpt, arch, batch, backend, mode, threads,
                                 0, CL_PRECISION_F32);
}

cl_status cl_model_open_weights(cl_model *m, const char *ckpt, const char *arch,
                                int batch, const char *backend,
                                cl_plan_mode mode, int threads, int raw,
                                cl_precision prec)
{
    cl_weights w;
    cl_ckpt_load_report rep;
    memset(m, 0, sizeof *m);
    cl_status s = cl_weights_open(&w, ckpt);
    if (s != CL_OK)
        return s;
    cl_config_defaults(&m->cfg);
    m->foreign = !w.classic;
    s = w.classic ? from_metadata(m, w.st, ckpt, arch)
                  : from_tensors(m, &w, ckpt, arch);
    if (s != CL_OK)
        goto fail;
    if ((s = cl_graph_init(&m->g, batch)) != CL_OK)
        goto fail;
    m->graph_ready = 1;
    if ((s = cl_arch_build(&m->g, &m->arch, m->side, m->side, 0, 0)) != CL_OK ||
        (w.src.pick = raw ? CL_CKPT_PICK_RAW : CL_CKPT_PICK_EMA,
         s = cl_ckpt_load_source(&w.src, &m->g, CL_CKPT_STRICT, &rep)) != CL_OK)
        goto fail;
    /* An int8 file: the loaded weights are its dequantized ones, and its
     * scales make the graph quantized (what plan() runs at int8). */
    if (w.q && (s = cl_qfile_scales(w.q, &m->g)) != CL_OK)
        goto fail;
    m->ema = rep.ema;
    cl_weights_close(&w);
    if ((s = plan(m, backend, mode, threads, prec)) != CL_OK)
        goto fail;
    return CL_OK;
fail:
    cl_weights_close(&w);
    cl_model_close(m);
    return s;
}

cl_status cl_model_create(cl_model *m, const cl_config *cfg, int batch,
                          const char *backend, cl_plan_mode mode, int threads,
                          cl_precision prec)
{
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->in_c = cfg->in_channels;
    m->num_classes = cfg->num_classes > 0 ? cfg->num_classes : 1000;
    m->side = cfg->image_size;
    m->cfg.num_classes = m->num_classes;
    cl_status s;
    if ((s = cl_recipe_model(cfg, m->in_c, m->num_classes, &m->arch)) !=
            CL_OK ||
        (s = cl_arch_check(&m->arch)) != CL_OK ||
        (s = default_class_names(m)) != CL_OK ||
        (s = cl_graph_init(&m->g, batch)) != CL_OK)
        goto fail;
    m->graph_ready = 1;
    if ((s = cl_arch_build(&m->g, &m->arch, m->side, m->side, 0, 0)) != CL_OK ||
        (s = cl_arch_init(&m->g, &m->arch, (uint64_t)cfg->seed)) != CL_OK ||
        (s = plan(m, backend, mode, threads, prec)) != CL_OK)
        goto fail;
    return CL_OK;
fail:
    cl_model_close(m);
    return s;
}

void cl_model_close(cl_model *m)
{
    cl_backend_destroy(m->be);
    m->be = NULL;
    if (m->graph_ready)
        cl_graph_free(&m->g);
    m->graph_ready = 0;
    if (m->class_names)
        for (int k = 0; k < m->num_classes; k++)
            free(m->class_names[k]);
    free(m->class_names);
    m->class_names = NULL;
}

cl_status cl_model_transforms(const cl_model *m, int src_h, int src_w,
                              cl_transform_opts *out)
{
    /* A recipe of image folders evaluates an image as the folder loader
     * does (shorter side resized, centre cropped) whatever its size: the
     * same pixels whether the image comes alone or in its folder. */
    if (m->cfg.dataset == CL_CFG_DATASET_IMAGEFOLDER)
        src_h = src_w = 0;
    return cl_recipe_transforms(&m->cfg, src_h, src_w, m->in_c, m->side, 0,
                                out);
}

cl_status cl_model_infer_image(cl_model *m, const char *path, float *x,
                               float *logits, float *features)
{
    cl_image img;
    cl_transforms *tf = NULL;
    cl_transform_opts to;
    memset(&img, 0, sizeof img);
    cl_status s = cl_image_load(
        path, 0, m->cfg.max_pixels > 0 ? (uint64_t)m->cfg.max_pixels : 0, &img);
    if (s == CL_OK &&
        (s = cl_model_transforms(m, img.h, img.w, &to)) == CL_OK &&
        (s = cl_transforms_create(&tf, &to)) == CL_OK &&
        (s = cl_transforms_apply(tf, &img, NULL, NULL, x)) == CL_OK &&
        (s = cl_backend_set_input(m->be, x, NULL, NULL)) == CL_OK &&
        (s = cl_backend_forward(m->be, 0, NULL)) == CL_OK && logits)
        s = cl_backend_read(m->be, m->g.logits, logits);
    if (s == CL_OK && features)
        s = cl_backend_read(m->be, m->g.features, features);
    cl_transforms_destroy(tf);
    cl_image_free(&img);
    return s;
}

cl_status cl_model_data_open(const cl_model *m, int batch, int num_shards,
                             int shard_id, cl_model_data *out)
{
    char dir[CL_CFG_PATH_MAX + CL_CFG_NAME_MAX + 2];
    cl_dataset_spec spec;
    cl_transform_opts to;
    int h = 0, w = 0, c = 0;
    memset(out, 0, sizeof *out);
    cl_status s =
        cl_recipe_dataset(&m->cfg, CL_USAGE_TEST, dir, sizeof dir, &spec);
    if (s != CL_OK)
        return s;
    spec.num_classes = m->num_classes;
    if ((s = cl_dataset_open(&out->ds, &spec)) != CL_OK)
        goto fail;
    cl_dataset_image_dims(out->ds, &h, &w, &c);
    if ((s = cl_model_transforms(m, h, w, &to)) != CL_OK ||
        (s = cl_transforms_create(&out->tf, &to)) != CL_OK)
        goto fail;
    cl_loader_opts lo;
    memset(&lo, 0, sizeof lo);
    lo.dataset = out->ds;
    lo.tf = out->tf;
    lo.batch_size = batch;
    lo.num_shards = num_shards;
    lo.shard_id = shard_id;
    lo.workers = m->cfg.num_parallel_workers;
    lo.prefetch = m->cfg.prefetch;
    lo.num_classes = m->num_classes;
    lo.limit = m->cfg.limit_val;
    if ((s = cl_loader_create(&out->ld, &lo)) != CL_OK)
        goto fail;
    return CL_OK;
fail:
    cl_model_data_close(out);
    return s;
}

void cl_model_data_close(cl_model_data *md)
{
    cl_loader_destroy(md->ld);
    cl_transforms_destroy(md->tf);
    cl_dataset_close(md->ds);
    memset(md, 0, sizeof *md);
}

int cl_model_feature_dim(const cl_model *m)
{
    return (int)m->g.tensors[m->g.features].shape.d[1];
}
