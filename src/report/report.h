/* Self-contained HTML reports of training runs: the curves of a run
 * directory's metrics.jsonl, its config and environment, and an evaluation
 * of its best checkpoint (confusion matrix, per-class accuracy, the most
 * confidently misclassified images); and the overlay of two runs. */
#ifndef CL_REPORT_REPORT_H
#define CL_REPORT_REPORT_H

#include <stdint.h>

#include "classic/status.h"

typedef struct cl_report_opts {
    /* Evaluate the best (else last) checkpoint at report time: 1 (the
     * default) or 0 to draw only the curves (cheap enough for every
     * epoch end of a long run). */
    int eval;
    /* Validation samples evaluated, at most (default 2000; the run's own
     * limit_val applies too). */
    int64_t limit;
    int batch;           /* inference batch (default 100) */
    int top_wrong;       /* misclassified images shown (default 16, <= 64) */
    const char *backend; /* "onednn" (default) or "ref" */
    int threads;         /* 0: OpenMP's default */
    /* Data location override for the evaluation when the run's data_dir
     * is not valid here (NULL: the checkpoint's config). */
    const char *data_dir;
} cl_report_opts;

/* The defaults above. */
cl_report_opts cl_report_opts_default(void);

/* Writes the report of run_dir to out_html (NULL: <run_dir>/report.html),
 * atomically.  A run still in progress is fine: a partial last line of
 * metrics.jsonl is ignored, and without a checkpoint the evaluation is
 * skipped with a note in the page.  A resumed run's repeated steps keep
 * their last occurrence.  When the evaluation itself fails (dataset moved,
 * checkpoint unreadable) the page says why and the call still succeeds.
 * Errors: CL_ERR_IO when run_dir or its metrics.jsonl cannot be read or
 * the page cannot be written. */
cl_status cl_report_write(const char *run_dir, const char *out_html,
                          const cl_report_opts *opts_or_null);

/* Overlays the loss, lr and accuracy curves of two runs, with their
 * config differences (out_html NULL: "compare.html"). */
cl_status cl_report_compare(const char *run_a, const char *run_b,
                            const char *out_html);

#endif
