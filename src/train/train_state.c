/* The training-state file: optimizer state arenas as "<param>.<state>",
 * per-segment step counters and the caller's metadata, in safetensors. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "io/safetensors.h"
#include "train/train_state.h"

void cl_train_state_path(const char *model_path, char *buf, size_t n)
{
    size_t len = strlen(model_path);
    const char *ext = ".safetensors";
    size_t el = strlen(ext);
    if (len > el && strcmp(model_path + len - el, ext) == 0)
        snprintf(buf, n, "%.*s.state%s", (int)(len - el), model_path, ext);
    else
        snprintf(buf, n, "%s.state", model_path);
}

cl_status cl_train_state_save(const char *path, const cl_graph *g,
                              const cl_optim *opt, const cl_ckpt_kv *meta,
                              int n_meta)
{
    cl_st_writer *w = NULL;
    int64_t *steps = NULL;
    char name[128];
    char buf[32];
    cl_status s = cl_st_writer_new(&w);
    if (s != CL_OK)
        return s;
    steps = cl_alloc((size_t)(opt->n_segments + 1) * sizeof *steps,
                     "optimizer steps");
    if (!steps) {
        s = CL_ERR_NOMEM;
        goto fail;
    }
    int64_t n_steps = 0;
    if ((s = cl_optim_get_steps(opt, steps, opt->n_segments, &n_steps)) !=
        CL_OK)
        goto fail;
    for (int k = 0; k < opt->n_states; k++) {
        for (int t = 0; t < g->n_tensors; t++) {
            const cl_gtensor *gt = &g->tensors[t];
            if (gt->kind != CL_GT_PARAM)
                continue;
            snprintf(name, sizeof name, "%s.%s", gt->name,
                     cl_optim_state_name(opt, k));
            s = cl_st_writer_add(w, name, CL_ST_F32, gt->shape,
                                 opt->state[k] + gt->offset);
            if (s != CL_OK)
                goto fail;
        }
    }
    int64_t nseg = opt->n_segments;
    s = cl_st_writer_add(w, "optimizer.segment_steps", CL_ST_I64,
                         cl_shape_make(1, &nseg), steps);
    if (s != CL_OK)
        goto fail;
    snprintf(buf, sizeof buf, "%lld", (long long)n_steps);
    if ((s = cl_st_writer_meta(w, "optimizer_steps", buf)) != CL_OK)
        goto fail;
    snprintf(buf, sizeof buf, "%s",
             opt->cfg.kind == CL_OPT_ADAMW ? "adamw" : "sgd");
    if ((s = cl_st_writer_meta(w, "optimizer", buf)) != CL_OK)
        goto fail;
    for (int i = 0; i < n_meta; i++)
        if ((s = cl_st_writer_meta(w, meta[i].key, meta[i].value)) != CL_OK)
            goto fail;
    s = cl_st_writer_save(w, path);
fail:
    cl_free(steps);
    cl_st_writer_free(w);
    return s;
}

cl_status cl_train_state_load(const char *path, const cl_graph *g,
                              cl_optim *opt)
{
    cl_st_file *f = NULL;
    int64_t *steps = NULL;
    char name[128];
    cl_status s = cl_st_open(&f, path);
    if (s != CL_OK)
        return s;
    const char *kind = cl_st_metadata(f, "optimizer");
    const char *want = opt->cfg.kind == CL_OPT_ADAMW ? "adamw" : "sgd";
    if (!kind || strcmp(kind, want) != 0) {
        s = cl_error(CL_ERR_FORMAT,
                     "%s: optimizer state is for '%s', this run uses '%s'",
                     path, kind ? kind : "(none)", want);
        goto fail;
    }
    long si = cl_st_find(f, "optimizer.segment_steps");
    cl_shape ss;
    if (si < 0) {
        s = cl_error(CL_ERR_FORMAT, "%s: no tensor 'optimizer.segment_steps'",
                     path);
        goto fail;
    }
    cl_st_info(f, (size_t)si, NULL, &ss);
    if (ss.ndim != 1 || ss.d[0] != opt->n_segments) {
        s = cl_error(CL_ERR_FORMAT,
                     "%s: state holds %lld parameter tensors, the model has "
                     "%d (another architecture?)",
                     path, (long long)cl_shape_numel(&ss), opt->n_segments);
        goto fail;
    }
    steps = cl_alloc((size_t)opt->n_segments * sizeof *steps, "optim steps");
    if (!steps) {
        s = CL_ERR_NOMEM;
        goto fail;
    }
    if ((s = cl_st_read_i64(f, (size_t)si, steps, (size_t)opt->n_segments)) !=
        CL_OK)
        goto fail;
    /* Check every state tensor before writing any. */
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < opt->n_states; k++) {
            for (int t = 0; t < g->n_tensors; t++) {
                const cl_gtensor *gt = &g->tensors[t];
                if (gt->kind != CL_GT_PARAM)
                    continue;
                snprintf(name, sizeof name, "%s.%s", gt->name,
                         cl_optim_state_name(opt, k));
                long i = cl_st_find(f, name);
                cl_shape fs;
                if (i < 0) {
                    s = cl_error(CL_ERR_FORMAT, "%s: no tensor '%s'", path,
                                 name);
                    goto fail;
                }
                cl_st_info(f, (size_t)i, NULL, &fs);
                if (!cl_shape_equal(&fs, &gt->shape)) {
                    s = cl_error(CL_ERR_SHAPE,
                                 "%s: '%s' does not match the model's shape",
                                 path, name);
                    goto fail;
                }
                if (pass == 1 && (s = cl_st_read_f32(
                                      f, (size_t)i, opt->state[k] + gt->offset,
                                      (size_t)cl_shape_numel(&fs))) != CL_OK)
                    goto fail;
            }
        }
    }
    const char *ns = cl_st_metadata(f, "optimizer_steps");
    s = cl_optim_set_steps(opt, steps, opt->n_segments,
                           ns ? strtoll(ns, NULL, 10) : 0);
fail:
    cl_free(steps);
    cl_st_close(f);
    return s;
}
