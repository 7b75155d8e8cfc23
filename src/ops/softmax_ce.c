/* softmax cross-entropy: label checks, the mean loss over the batch with
 * hard or soft targets and label smoothing, and its gradient. */
#include <math.h>

#include "ops/ops.h"
#include "ops/ops_internal.h"

cl_status cl_softmax_ce_infer(const cl_softmax_ce_attr *a,
                              const cl_shape *logits)
{
    if (a->num_classes < 1)
        return cl_error(CL_ERR_SHAPE,
                        "softmax_ce: attr.num_classes is %d, expected >= 1",
                        a->num_classes);
    if (!(a->label_smoothing >= 0.0f && a->label_smoothing <= 1.0f))
        return cl_error(CL_ERR_ARG,
                        "softmax_ce: attr.label_smoothing is %g, expected "
                        "0..1",
                        (double)a->label_smoothing);
    if (logits->ndim != 2)
        return cl_error(CL_ERR_SHAPE,
                        "softmax_ce: logits have %d dimensions, expected 2 "
                        "(N,K)",
                        logits->ndim);
    if (logits->d[0] < 1 || logits->d[0] > CL_OPS_MAX_DIM)
        return cl_error(CL_ERR_SHAPE,
                        "softmax_ce: logits batch is %lld, expected 1..%d",
                        (long long)logits->d[0], INT_MAX);
    if (logits->d[1] != a->num_classes)
        return cl_error(CL_ERR_SHAPE,
                        "softmax_ce: logits have %lld classes, "
                        "attr.num_classes is %d",
                        (long long)logits->d[1], a->num_classes);
    return CL_OK;
}

cl_status cl_softmax_ce_check_labels(const int32_t *labels, int N, int K)
{
    for (int i = 0; i < N; i++)
        if (labels[i] < 0 || labels[i] >= K)
            return cl_error(CL_ERR_ARG,
                            "softmax_ce: label of sample %d is %d, expected "
                            "0..%d",
                            i, (int)labels[i], K - 1);
    return CL_OK;
}

/* A label the caller did not check gives NaN (loss and that row's probs and
 * gradient) rather than a read out of bounds: the trainer's non-finite loss
 * check then stops the run. */
static int label_ok(int32_t y, int K)
{
    return y >= 0 && y < K;
}

float cl_softmax_ce_forward(float *probs, const float *logits,
                            const int32_t *labels, const float *targets, int N,
                            const cl_softmax_ce_attr *a)
{
    const int K = a->num_classes;
    const double s = a->label_smoothing, u = s / K;
    double total = 0.0;
    /* Rows in order, summed in double: the loss is the same whatever the
     * thread count. */
    for (int n = 0; n < N; n++) {
        const float *z = logits + (int64_t)n * K;
        float *p = probs + (int64_t)n * K;
        if (labels && !label_ok(labels[n], K)) {
            for (int k = 0; k < K; k++)
                p[k] = NAN;
            total += NAN;
            continue;
        }
        /* log-sum-exp shifted by the row maximum so exp never overflows. */
        float m = z[0];
        for (int k = 1; k < K; k++)
            m = z[k] > m ? z[k] : m;
        double se = 0.0;
        for (int k = 0; k < K; k++)
            se += exp((double)z[k] - m);
        const double lse = m + log(se);
        double row = 0.0;
        for (int k = 0; k < K; k++) {
            const double nll = lse - z[k]; /* -log softmax(z)_k */
            p[k] = (float)exp(-nll);
            double t = labels ? (k == labels[n] ? 1.0 : 0.0)
                              : targets[(int64_t)n * K + k];
            row += ((1.0 - s) * t + u) * nll;
        }
        total += row;
    }
    return (float)(total / N);
}

void cl_softmax_ce_backward(float *dlogits, const float *probs,
                            const int32_t *labels, const float *targets, int N,
                            float scale, const cl_softmax_ce_attr *a)
{
    if (!dlogits)
        return;
    const int K = a->num_classes;
    const float s = a->label_smoothing, u = s / K, g = scale / (float)N;
#pragma omp parallel for schedule(static) if ((int64_t)N * K >= CL_OPS_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *p = probs + (int64_t)n * K;
        float *d = dlogits + (int64_t)n * K;
        if (labels) {
            const int32_t y = labels[n];
            const float bad = label_ok(y, K) ? 0.0f : NAN;
            for (int k = 0; k < K; k++)
                d[k] = (p[k] - ((k == y ? 1.0f - s : 0.0f) + u) + bad) * g;
        } else {
            /* d/dz of -sum t' log softmax(z) is p * sum(t') - t'; equal to
             * p - t' when the target row sums to one. */
            const float *t = targets + (int64_t)n * K;
            float st = 0.0f;
            for (int k = 0; k < K; k++)
                st += (1.0f - s) * t[k] + u;
            for (int k = 0; k < K; k++)
                d[k] = (p[k] * st - ((1.0f - s) * t[k] + u)) * g;
        }
    }
}
