/* The exponential moving average of a graph's weights (model_ema.h). */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "train/model_ema.h"

static int is_counter(const cl_gtensor *t)
{
    const char *s = strrchr(t->name, '.');
    return s && strcmp(s, ".num_batches_tracked") == 0;
}

cl_status cl_model_ema_create(cl_model_ema *e, const cl_model_ema_config *cfg,
                              const cl_graph *g)
{
    memset(e, 0, sizeof *e);
    if (!(cfg->decay > 0 && cfg->decay < 1))
        return cl_error(CL_ERR_CONFIG,
                        "ema_decay %g is outside (0, 1): it is the weight of "
                        "the old average at each update (timm's 0.9998)",
                        cfg->decay);
    if (cfg->steps < 1)
        return cl_error(CL_ERR_CONFIG,
                        "ema_steps %d is below 1: the average is updated "
                        "every ema_steps optimizer steps",
                        cfg->steps);
    e->cfg = *cfg;
    e->n_params = g->n_param_floats;
    e->n_buffers = g->n_buffer_floats;
    int n = 0;
    for (int t = 0; t < g->n_tensors; t++) {
        const cl_gtensor *gt = &g->tensors[t];
        n += gt->kind == CL_GT_BUFFER &&
             (gt->dtype == CL_I64 || gt->derived || is_counter(gt));
    }
    /* One float more than asked, so an empty arena still allocates. */
    e->params = cl_alloc((e->n_params + 1) * sizeof(float), "EMA weights");
    e->buffers = cl_alloc((e->n_buffers + 1) * sizeof(float), "EMA buffers");
    e->copied = cl_alloc((size_t)(n + 1) * sizeof *e->copied, "EMA ranges");
    if (!e->params || !e->buffers || !e->copied) {
        cl_model_ema_destroy(e);
        return CL_ERR_NOMEM;
    }
    for (int t = 0; t < g->n_tensors; t++) {
        const cl_gtensor *gt = &g->tensors[t];
        /* Counters, indices and derived masks are copied, not averaged. */
        if (gt->kind != CL_GT_BUFFER ||
            !(gt->dtype == CL_I64 || gt->derived || is_counter(gt)))
            continue;
        size_t numel = (size_t)cl_shape_numel(&gt->shape);
        /* An i64 element takes two floats' room in the arena. */
        e->copied[e->n_copied].offset = gt->offset;
        e->copied[e->n_copied].n = gt->dtype == CL_I64 ? 2 * numel : numel;
        e->n_copied++;
    }
    cl_model_ema_set(e, g);
    return CL_OK;
}

void cl_model_ema_destroy(cl_model_ema *e)
{
    cl_free(e->params);
    cl_free(e->buffers);
    cl_free(e->copied);
    memset(e, 0, sizeof *e);
}

void cl_model_ema_set(cl_model_ema *e, const cl_graph *g)
{
    memcpy(e->params, g->params, e->n_params * sizeof(float));
    memcpy(e->buffers, g->buffers, e->n_buffers * sizeof(float));
    e->n_averaged = 0;
    e->n_updates = 0;
}

int cl_model_ema_due(const cl_model_ema *e, int64_t step_in_epoch)
{
    return step_in_epoch % e->cfg.steps == 0;
}

double cl_model_ema_next_decay(const cl_model_ema *e)
{
    if (e->n_averaged <= 0)
        return 0.0;
    double d = e->cfg.decay;
    if (e->cfg.warmup) {
        /* timm's ModelEmaV3.get_decay with use_warmup (gamma 1, power
         * 2/3): its step - 1 is the number of updates made before. */
        double w = 1.0 - pow(1.0 + (double)e->n_averaged, -2.0 / 3.0);
        if (w < d)
            d = w;
    }
    return d;
}

/* a <- d * a + (1 - d) * w over n floats. */
static void lerp(float *a, const float *w, size_t n, float d, float c)
{
    int64_t len = (int64_t)n;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < len; i++)
        a[i] = d * a[i] + c * w[i];
}

void cl_model_ema_update(cl_model_ema *e, const cl_graph *g)
{
    double dd = cl_model_ema_next_decay(e);
    if (dd == 0.0) {
        memcpy(e->params, g->params, e->n_params * sizeof(float));
        memcpy(e->buffers, g->buffers, e->n_buffers * sizeof(float));
    } else {
        /* The factors in double, then f32, as torch multiplies an f32
         * tensor by a Python float. */
        float d = (float)dd, c = (float)(1.0 - dd);
        lerp(e->params, g->params, e->n_params, d, c);
        lerp(e->buffers, g->buffers, e->n_buffers, d, c);
        for (int k = 0; k < e->n_copied; k++)
            memcpy(e->buffers + e->copied[k].offset,
                   g->buffers + e->copied[k].offset,
                   e->copied[k].n * sizeof(float));
    }
    e->n_averaged++;
    e->n_updates++;
}

void cl_model_ema_reset(cl_model_ema *e)
{
    e->n_averaged = 0;
}

static void swap(float *a, float *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float t = a[i];
        a[i] = b[i];
        b[i] = t;
    }
}

void cl_model_ema_swap(cl_model_ema *e, cl_graph *g)
{
    swap(e->params, g->params, e->n_params);
    swap(e->buffers, g->buffers, e->n_buffers);
}
