/* Evaluation over a loader: every sample of the shard counted exactly once,
 * the last partial batch padded (and the padding ignored), metrics summed
 * over ranks. */
#ifndef CL_TRAIN_EVALUATE_H
#define CL_TRAIN_EVALUATE_H

#include "backend/backend.h"
#include "data/data.h"
#include "dist/dist.h"
#include "train/metrics.h"

/* Runs forward in inference mode (BN running statistics) over one epoch of
 * ld (which must not drop its remainder) and adds every sample to m; with
 * d of size > 1 the counts of all ranks are summed into every rank's m.
 * hflip: each batch also runs mirrored left-right and the two logits are
 * averaged (the recipe's eval_hflip); features stay those of the image.
 * features (may be NULL): per sample, the g->features row is passed to
 * on_features(ctx, dataset_index, row, dim) — `classic embed` uses it. */
typedef void (*cl_eval_features_fn)(void *ctx, int64_t index, const float *row,
                                    int dim, const float *logits, int k);
cl_status cl_evaluate(cl_backend *be, cl_loader *ld, cl_metrics *m, cl_dist *d,
                      int hflip, cl_eval_features_fn on_features, void *ctx);

/* Non-zero when recipe key `key` (either spelling, '-' or '_') can change
 * how a trained checkpoint is evaluated: where the data is and how it is
 * read and preprocessed for evaluation, and which weights are read.  Every
 * other key (the network, the optimizer, the training loop) is fixed by the
 * checkpoint or has no meaning there, and eval and embed refuse it. */
int cl_eval_key_applies(const char *key);

/* cl_evaluate, calling progress(pctx, done, total) (may be NULL) after
 * each batch with the samples of this process's shard done so far and in
 * all: what lets `classic eval` and `embed` show progress. */
typedef void (*cl_eval_progress_fn)(void *ctx, long long done, long long total);
cl_status cl_evaluate_progress(cl_backend *be, cl_loader *ld, cl_metrics *m,
                               cl_dist *d, int hflip,
                               cl_eval_features_fn on_features, void *ctx,
                               cl_eval_progress_fn progress, void *pctx);

/* out <- x with each of its rows of w values reversed (NCHW: rows = N*C*H). */
void cl_eval_mirror(const float *x, float *out, int64_t rows, int w);

/* Per-sample softmax cross-entropy (no smoothing) of logits (n, K) with
 * labels, summed: what an eval loss reports. */
double cl_eval_ce_sum(const float *logits, const int32_t *labels, int n, int k);

#endif
