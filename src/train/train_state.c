/* The training-state file: optimizer state arenas as "<param>.<state>",
 * per-segment step counters and the caller's metadata, in safetensors. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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
    if ((s = cl_st_writer_meta(w, CL_STATE_OPTIMIZER_STEPS, buf)) != CL_OK)
        goto fail;
    snprintf(buf, sizeof buf, "%s",
             opt->cfg.kind == CL_OPT_ADAMW ? "adamw" : "sgd");
    if ((s = cl_st_writer_meta(w, CL_STATE_OPTIMIZER, buf)) != CL_OK)
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
    const char *kind = cl_st_metadata(f, CL_STATE_OPTIMIZER);
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
    const char *ns = cl_st_metadata(f, CL_STATE_OPTIMIZER_STEPS);
    s = cl_optim_set_steps(opt, steps, opt->n_segments,
                           ns ? strtoll(ns, NULL, 10) : 0);
fail:
    cl_free(steps);
    cl_st_close(f);
    return s;
}

/* Metadata key of f as an integer into *v; absent or "" leaves *v. */
static cl_status meta_int(const cl_st_file *f, const char *path,
                          const char *key, int64_t *v)
{
    const char *t = cl_st_metadata(f, key);
    if (!t || !t[0])
        return CL_OK;
    char *end;
    errno = 0;
    long long x = strtoll(t, &end, 10);
    if (errno || *end)
        return cl_error(CL_ERR_FORMAT,
                        "%s: '%s' in its training state is '%s', not a "
                        "whole number",
                        path, key, t);
    *v = x;
    return CL_OK;
}

/* global_batch with its parts: "256" beside its own keys, or the packed
 * "256 32 4 2" of older files. */
static cl_status read_global_batch(const cl_st_file *f, const char *path,
                                   cl_train_state_info *info)
{
    const char *gb = cl_st_metadata(f, CL_STATE_GLOBAL_BATCH);
    int g = 0, b = 0, n = 0, a = 0;
    char extra;
    if (gb && strchr(gb, ' ')) {
        if (sscanf(gb, "%d %d %d %d %c", &g, &b, &n, &a, &extra) != 4)
            g = -1;
    } else {
        int64_t v[4] = {0, 0, 0, 0};
        CL_TRY(meta_int(f, path, CL_STATE_GLOBAL_BATCH, &v[0]));
        CL_TRY(meta_int(f, path, CL_STATE_BATCH_SIZE, &v[1]));
        CL_TRY(meta_int(f, path, CL_STATE_PROCESSES, &v[2]));
        CL_TRY(meta_int(f, path, CL_STATE_ACCUMULATION, &v[3]));
        for (int i = 0; i < 4; i++)
            if (v[i] < 0 || v[i] > INT32_MAX)
                v[0] = -1;
        g = (int)v[0], b = (int)v[1], n = (int)v[2], a = (int)v[3];
    }
    if (g == 0) /* files from before the global batch was recorded */
        return CL_OK;
    if (g < 0 || b <= 0 || n <= 0 || a <= 0 || (int64_t)b * n * a != g)
        return cl_error(CL_ERR_FORMAT,
                        "%s: the global batch in its training state ('%s', "
                        "batch_size '%s', processes '%s', accumulation_steps "
                        "'%s') is not batch_size x processes x "
                        "accumulation_steps",
                        path, gb ? gb : "",
                        cl_st_metadata(f, CL_STATE_BATCH_SIZE)
                            ? cl_st_metadata(f, CL_STATE_BATCH_SIZE)
                            : "",
                        cl_st_metadata(f, CL_STATE_PROCESSES)
                            ? cl_st_metadata(f, CL_STATE_PROCESSES)
                            : "",
                        cl_st_metadata(f, CL_STATE_ACCUMULATION)
                            ? cl_st_metadata(f, CL_STATE_ACCUMULATION)
                            : "");
    info->global_batch = g;
    info->batch_size = b;
    info->processes = n;
    info->accumulation_steps = a;
    return CL_OK;
}

cl_status cl_train_state_read_info(const char *path, cl_train_state_info *info)
{
    memset(info, 0, sizeof *info);
    cl_st_file *f = NULL;
    CL_TRY(cl_st_open(&f, path));
    cl_status s;
    if ((s = meta_int(f, path, CL_STATE_EPOCH, &info->epoch)) != CL_OK ||
        (s = meta_int(f, path, CL_STATE_NEXT_BATCH, &info->next_batch)) !=
            CL_OK ||
        (s = meta_int(f, path, CL_STATE_STEP, &info->step)) != CL_OK ||
        (s = meta_int(f, path, CL_STATE_STEPS_PER_EPOCH,
                      &info->steps_per_epoch)) != CL_OK ||
        (s = meta_int(f, path, CL_STATE_EMA_AVERAGED, &info->ema_averaged)) !=
            CL_OK ||
        (s = meta_int(f, path, CL_STATE_EMA_UPDATES, &info->ema_updates)) !=
            CL_OK)
        goto done;
    s = read_global_batch(f, path, info);
done:
    cl_st_close(f);
    return s;
}
