/* Evaluation loop: padded last batch, exact-once counting, rank reduction,
 * optional flip test-time augmentation. */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "train/evaluate.h"

double cl_eval_ce_sum(const float *logits, const int32_t *labels, int n, int k)
{
    double sum = 0;
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t)i * k;
        double mx = z[0];
        for (int j = 1; j < k; j++)
            mx = z[j] > mx ? z[j] : mx;
        double se = 0;
        for (int j = 0; j < k; j++)
            se += exp(z[j] - mx);
        sum += log(se) + mx - z[labels[i]];
    }
    return sum;
}

void cl_eval_mirror(const float *x, float *out, int64_t rows, int w)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *src = x + r * w;
        float *dst = out + r * w;
        for (int j = 0; j < w; j++)
            dst[j] = src[w - 1 - j];
    }
}

/* logits <- the batch's logits, with hflip the mean of x's and its mirror's
 * (mirror is scratch of x's size, tmp of the logits'); feat (may be NULL)
 * <- x's features, read before the mirrored pass overwrites them. */
static cl_status forward_logits(cl_backend *be, const float *x, float *logits,
                                float *feat, int hflip, float *mirror,
                                float *tmp)
{
    cl_graph *g = be->g;
    cl_status s;
    if ((s = cl_backend_set_input(be, x, NULL, NULL)) != CL_OK ||
        (s = cl_backend_forward(be, 0, NULL)) != CL_OK ||
        (s = cl_backend_read(be, g->logits, logits)) != CL_OK ||
        (feat && (s = cl_backend_read(be, g->features, feat)) != CL_OK) ||
        !hflip)
        return s;
    const cl_shape *in = &g->tensors[g->input].shape;
    cl_eval_mirror(x, mirror, in->d[0] * in->d[1] * in->d[2], (int)in->d[3]);
    if ((s = cl_backend_set_input(be, mirror, NULL, NULL)) != CL_OK ||
        (s = cl_backend_forward(be, 0, NULL)) != CL_OK ||
        (s = cl_backend_read(be, g->logits, tmp)) != CL_OK)
        return s;
    const size_t n = (size_t)g->batch * (size_t)g->num_classes;
    for (size_t i = 0; i < n; i++)
        logits[i] = 0.5f * (logits[i] + tmp[i]);
    return CL_OK;
}

cl_status cl_evaluate(cl_backend *be, cl_loader *ld, cl_metrics *m, cl_dist *d,
                      int hflip, cl_eval_features_fn on_features, void *ctx)
{
    return cl_evaluate_progress(be, ld, m, d, hflip, on_features, ctx, NULL,
                                NULL);
}

cl_status cl_evaluate_progress(cl_backend *be, cl_loader *ld, cl_metrics *m,
                               cl_dist *d, int hflip,
                               cl_eval_features_fn on_features, void *ctx,
                               cl_eval_progress_fn progress, void *pctx)
{
    const long long total = (long long)cl_loader_samples_per_epoch(ld);
    long long done = 0;
    cl_graph *g = be->g;
    const int N = g->batch, K = g->num_classes;
    const cl_gtensor *in = &g->tensors[g->input];
    const size_t per =
        (size_t)(in->shape.d[1] * in->shape.d[2] * in->shape.d[3]);
    int dim = 0;
    if (on_features && g->features >= 0)
        dim = (int)g->tensors[g->features].shape.d[1];
    float *xpad = cl_alloc((size_t)N * per * sizeof(float), "eval batch");
    float *logits = cl_alloc((size_t)N * K * sizeof(float), "eval logits");
    float *feat =
        dim ? cl_alloc((size_t)N * dim * sizeof(float), "features") : NULL;
    float *mirror =
        hflip ? cl_alloc((size_t)N * per * sizeof(float), "mirrored batch")
              : NULL;
    float *tmp =
        hflip ? cl_alloc((size_t)N * K * sizeof(float), "mirrored logits")
              : NULL;
    cl_status s = CL_OK;
    if (!xpad || !logits || (dim && !feat) || (hflip && (!mirror || !tmp))) {
        s = CL_ERR_NOMEM;
        goto fail;
    }
    if ((s = cl_loader_start_epoch(ld, 0)) != CL_OK)
        goto fail;
    for (;;) {
        cl_batch b;
        if ((s = cl_loader_next(ld, &b)) != CL_OK)
            goto fail;
        if (b.n == 0)
            break;
        const float *x = b.x;
        if (b.n < N) {
            /* The graph is static: pad with zeros; BN in inference mode
             * treats samples independently, so padding changes nothing. */
            memcpy(xpad, b.x, (size_t)b.n * per * sizeof(float));
            memset(xpad + (size_t)b.n * per, 0,
                   (size_t)(N - b.n) * per * sizeof(float));
            x = xpad;
        }
        if ((s = forward_logits(be, x, logits, dim ? feat : NULL, hflip, mirror,
                                tmp)) != CL_OK)
            goto fail;
        double loss = cl_eval_ce_sum(logits, b.labels, b.n, K);
        if ((s = cl_metrics_add(m, logits, b.labels, b.n, loss)) != CL_OK)
            goto fail;
        if (dim) {
            for (int i = 0; i < b.n; i++)
                on_features(ctx, b.indices[i], feat + (size_t)i * dim, dim,
                            logits + (size_t)i * K, K);
        }
        done += b.n;
        if (progress)
            progress(pctx, done, total);
    }
    if (d && d->size > 1) {
        if ((s = cl_dist_allreduce_sum_i64(d, m->counts, m->n_counts)) !=
                CL_OK ||
            (s = cl_dist_allreduce_sum_f64(d, &m->loss_sum, 1)) != CL_OK)
            goto fail;
    }
fail:
    cl_free(xpad);
    cl_free(logits);
    cl_free(feat);
    cl_free(mirror);
    cl_free(tmp);
    return s;
}

int cl_eval_key_applies(const char *key)
{
    static const char *const keys[] = {"dataset",
                                       "data_dir",
                                       "train_split",
                                       "val_split",
                                       "class_indexing",
                                       "limit_train",
                                       "limit_val",
                                       "on_bad_image",
                                       "num_parallel_workers",
                                       "prefetch",
                                       "crop_pct",
                                       "eval_hflip",
                                       "interpolation",
                                       "load_ema",
                                       "log_level",
                                       "max_pixels",
                                       NULL};
    char norm[64];
    size_t n = strlen(key);
    if (n >= sizeof norm)
        return 0;
    for (size_t i = 0; i <= n; i++)
        norm[i] = key[i] == '-' ? '_' : key[i];
    for (int k = 0; keys[k]; k++)
        if (strcmp(norm, keys[k]) == 0)
            return 1;
    return 0;
}
