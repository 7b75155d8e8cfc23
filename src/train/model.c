/* Opening a checkpoint for inference from its own metadata. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
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

cl_status cl_model_open(cl_model *m, const char *ckpt, int batch,
                        const char *backend, cl_plan_mode mode, int threads)
{
    cl_st_file *f = NULL;
    int depth = 0;
    memset(m, 0, sizeof *m);
    cl_status s = cl_st_open(&f, ckpt);
    if (s != CL_OK)
        return s;
    cl_config_defaults(&m->cfg);
    const char *yaml = cl_st_metadata(f, CL_META_CONFIG);
    if (yaml && (s = cl_config_load_yaml_text(&m->cfg, yaml, strlen(yaml),
                                              ckpt)) != CL_OK)
        goto fail;
    const char *arch = cl_st_metadata(f, CL_META_ARCH);
    const char *stem = cl_st_metadata(f, CL_META_STEM);
    if (!arch || !stem) {
        s = cl_error(CL_ERR_FORMAT,
                     "%s: metadata lacks 'arch' or 'stem' (not a classic "
                     "model checkpoint?)",
                     ckpt);
        goto fail;
    }
    m->arch = cl_resnet_config_default();
    if ((s = cl_resnet_arch_parse(arch, &depth)) != CL_OK ||
        (s = cl_resnet_stem_parse(stem, &m->arch.stem)) != CL_OK) {
        cl_error_wrap(s, "%s: metadata: ", ckpt);
        goto fail;
    }
    m->arch.depth = depth;
    if ((s = meta_int(f, ckpt, CL_META_IN_CHANNELS, 1, 3, &m->in_c)) != CL_OK ||
        (s = meta_int(f, ckpt, CL_META_NUM_CLASSES, 1, 100000,
                      &m->num_classes)) != CL_OK ||
        (s = meta_int(f, ckpt, CL_META_IMAGE_SIZE, 8, 4096, &m->side)) != CL_OK)
        goto fail;
    m->arch.in_channels = m->in_c;
    m->arch.num_classes = m->num_classes;
    if ((s = class_names(m, f, ckpt)) != CL_OK)
        goto fail;
    cl_st_close(f);
    f = NULL;
    if ((s = cl_graph_init(&m->g, batch)) != CL_OK)
        goto fail;
    m->graph_ready = 1;
    if ((s = cl_resnet_build(&m->g, &m->arch, m->side, m->side, 0, 0)) !=
            CL_OK ||
        (s = cl_ckpt_load_model(ckpt, &m->g, CL_CKPT_STRICT, NULL)) != CL_OK)
        goto fail;
    cl_backend_opts bo = {.threads = threads};
    if ((s = cl_backend_create(&m->be, backend, &m->g, mode, &bo)) != CL_OK)
        goto fail;
    return CL_OK;
fail:
    cl_st_close(f);
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
    return cl_recipe_transforms(&m->cfg, src_h, src_w, m->in_c, m->side, 0,
                                out);
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
