/* Classification metrics accumulated over batches: top-1, top-k, mean loss,
 * confusion matrix and per-class accuracy; plus a smoothed-loss monitor. */
#ifndef CL_TRAIN_METRICS_H
#define CL_TRAIN_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "classic/status.h"

/* Above this a K x K int64 confusion matrix (800 MB) is not worth it. */
#define CL_METRICS_MAX_CLASSES 10000

/* Caller-owned.  All counts live in one int64 array so that a distributed
 * evaluation sums them with one MPI_Allreduce (MPI_INT64_T, MPI_SUM) over
 * counts[0 .. n_counts) plus one over loss_sum (MPI_DOUBLE). */
typedef struct cl_metrics {
    int num_classes; /* K */
    int k;           /* the k of top-k: min(5, K) */
    /* counts: (3 + K*K) = {samples, top-1 correct, top-k correct,
     * confusion}; confusion points into it: (K, K), row = true class,
     * column = predicted (arg-max) class. */
    int64_t *counts;
    size_t n_counts;
    int64_t *confusion;
    double loss_sum; /* sum of per-sample losses */
} cl_metrics;

/* CL_ERR_ARG for K < 1, CL_ERR_LIMIT above CL_METRICS_MAX_CLASSES.  On
 * failure *m is left freeable. */
cl_status cl_metrics_init(cl_metrics *m, int num_classes);
/* Frees the counts; safe on a zeroed or freed struct. */
void cl_metrics_free(cl_metrics *m);
/* Zeroes every count and the loss sum (a new evaluation, same K). */
void cl_metrics_reset(cl_metrics *m);

/* Adds n samples: logits (n, K) row-major, labels (n) in [0, K), and the
 * SUM of their losses.  A label outside [0, K) is CL_ERR_ARG naming the
 * sample, and nothing is added.
 * Ranking: class j ranks above the true class t when l_j > l_t, or
 * l_j == l_t and j < t (ties go to the lower index), or l_t is NaN and l_j
 * is not (NaN ranks below every number).  Top-k is correct when fewer than
 * k classes rank above t; the prediction (top-1, confusion column) is the
 * class nothing ranks above. */
cl_status cl_metrics_add(cl_metrics *m, const float *logits,
                         const int32_t *labels, int n, double loss_sum);
/* a += b; CL_ERR_SHAPE if the class counts differ. */
cl_status cl_metrics_merge(cl_metrics *a, const cl_metrics *b);

int64_t cl_metrics_count(const cl_metrics *m);
/* Fractions in [0, 1] and the mean loss; NaN when no sample was added. */
double cl_metrics_top1(const cl_metrics *m);
double cl_metrics_topk(const cl_metrics *m);
double cl_metrics_loss(const cl_metrics *m);
/* Accuracy of class c (diagonal / row sum); NaN if c has no sample or is
 * out of range. */
double cl_metrics_class_acc(const cl_metrics *m, int c);
/* Mean of the per-class accuracies over classes that have samples
 * (balanced accuracy); NaN if none. */
double cl_metrics_mean_class_acc(const cl_metrics *m);

/* A text report: one summary line, then a table of per-class count,
 * correct and accuracy (all classes when K <= 100, else the 10 classes of
 * lowest accuracy).  class_names may be NULL (indices are printed) and so
 * may any entry.  CL_ERR_IO if writing fails. */
cl_status cl_metrics_print(const cl_metrics *m, FILE *out,
                           const char *const *class_names);
/* The number of classes min(5, K) that top-k counts, for labels:
 * "top-%d" names it top-2 on a 2-class run, in training, eval and the
 * report alike. */
int cl_metrics_topk_k(int num_classes);

/* A loss for a person to read, into buf (returned): "%.4f" below 1e5,
 * "%.4g" from there on, so that a diverged run prints 8.376e+30 and not
 * 31 digits.  metrics.jsonl keeps the full number. */
const char *cl_metrics_fmt_loss(double loss, char *buf, size_t n);

/* The confusion matrix as CSV: header "true\pred,<name>...", then one row
 * per true class "<name>,<count>...", names quoted as RFC 4180 needs.
 * Written to "<path>.tmp" and renamed, so a reader never sees half a file.
 * CL_ERR_IO naming the path on failure. */
cl_status cl_metrics_write_csv(const cl_metrics *m, const char *path,
                               const char *const *class_names);

/* Exponential moving average for loss monitors, with Adam-style bias
 * correction so the first values are not pulled toward 0:
 * s_n = beta s_{n-1} + (1 - beta) x_n, reported as s_n / (1 - beta^n).
 * Non-finite samples are counted in n_skipped and otherwise ignored. */
typedef struct cl_ema {
    double beta;
    double value;    /* s_n, uncorrected */
    double beta_pow; /* beta^n */
    int64_t n;
    int64_t n_skipped;
} cl_ema;

/* beta in [0, 1): 0 reports the last sample; 0.98 averages ~50 samples. */
void cl_ema_init(cl_ema *e, double beta);
/* Adds x and returns the corrected average (NaN while n = 0). */
double cl_ema_add(cl_ema *e, double x);
double cl_ema_get(const cl_ema *e);

#endif
