/* Shared pieces of the report module: the parsed run log, the SVG chart
 * writers, HTML text helpers and the report-time evaluation. */
#ifndef CL_REPORT_REPORT_INTERNAL_H
#define CL_REPORT_REPORT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "io/config.h"
#include "io/strbuf.h"
#include "report/report.h"
#include "train/val_record.h"

/* ---- run log (runlog.c) ---- */

typedef struct cl__rl_train {
    int64_t step, epoch;
    double loss, loss_avg, lr, img_s, step_ms, data_wait; /* NaN if null */
    double comm_wait; /* MPI runs only: share of time in gradient sync */
} cl__rl_train;

typedef struct cl__rl_eval {
    int64_t step, epoch;
    double top1, top5, loss, samples, epoch_s;
    int topk;           /* the k top5 counts (min(5, K)); 0: not recorded */
    char precision[16]; /* "f32", "bf16", ...; "" when not recorded */
} cl__rl_eval;

/* A run directory as read at report time. */
typedef struct cl__runlog {
    char *dir;
    char name[256];      /* the directory's last component */
    cl__rl_train *train; /* train: (n_train), strictly increasing steps */
    size_t n_train, cap_train;
    cl__rl_eval *eval; /* eval: (n_eval), strictly increasing steps */
    size_t n_eval, cap_eval;
    int64_t bad_lines; /* complete lines that were not valid records */
    int partial_tail;  /* the file ended inside a line (run writing) */
    int64_t resumes;   /* times the steps went back (resumed run) */
    char *config_text; /* config.yaml as written, or NULL */
    char header[256];  /* its first comment line, "" if none */
    int have_config;   /* cfg parsed from config.yaml (cl_config_load_yaml_text)
                        */
    cl_config cfg;
    char ckpt[1024];   /* best (else last) checkpoint, "" if none */
    char ckpt_kind[8]; /* "best", "last" or "latest" */
    int has_last;      /* a -last checkpoint exists: training ended */
    char state[1024];  /* the newest training state (train/train_state.h),
                          "" if none */
} cl__runlog;

/* Reads run_dir/metrics.jsonl (required) and config.yaml (optional, parsed
 * into cfg) and finds the checkpoint and the newest training state.  CL_ERR_IO
 * naming the path when run_dir or the log cannot be read. */
cl_status cl__runlog_read(cl__runlog *rl, const char *run_dir);
void cl__runlog_free(cl__runlog *rl);
/* Parses a metrics.jsonl held in memory into rl (used by read, exposed
 * for tests through the page). */
cl_status cl__runlog_parse(cl__runlog *rl, const char *text, size_t len);

/* ---- HTML text (html.c) ---- */

/* s escaped for HTML text and attribute values (& < > " '); control
 * bytes other than tab and newline become U+FFFD. */
cl_status cl__html_esc(cl_strbuf *b, const char *s);
cl_status cl__html_escn(cl_strbuf *b, const char *s, size_t n);
/* data (n bytes) as standard base64 with padding. */
cl_status cl__base64(cl_strbuf *b, const uint8_t *data, size_t n);
/* An 8-bit gray (c = 1) or RGB (c = 3) image, (h, w, c) interleaved, as a
 * PNG file appended to b. */
cl_status cl__png_encode(cl_strbuf *b, const uint8_t *pix, int h, int w, int c);
/* A number for display: "1.23k", "0.000123" -> "1.23e-4", NaN -> "–". */
void cl__fmt_num(char *buf, size_t n, double v, int digits);

/* ---- SVG charts (svg.c) ---- */

typedef struct cl__svg_series {
    const char *name;    /* legend label (NULL: not in the legend) */
    const char *id;      /* id of the path element, or NULL */
    const double *x, *y; /* n points; a non-finite y breaks the line */
    size_t n;
    const char *color;
    double width;   /* stroke width, px */
    double opacity; /* 0 means 1 */
    int dashed;
    int markers; /* a dot (with a tooltip) at every point */
} cl__svg_series;

typedef struct cl__svg_chart {
    const char *id; /* id of the <svg> */
    const char *title;
    const char *xlabel, *ylabel;
    int width, height;
    int log_y;         /* 1 log, 0 linear, -1 log when the data span > 30x */
    int y_percent;     /* values in [0, 1] labelled as percentages */
    double y_lo, y_hi; /* fixed y range when y_lo < y_hi */
    int x_integer;     /* integer x ticks (epochs) */
} cl__svg_chart;

cl_status cl__svg_line_chart(cl_strbuf *b, const cl__svg_chart *c,
                             const cl__svg_series *s, int n_series);
/* A K x K confusion heatmap, rows = true class, colour = share of the
 * row; one <rect class="cm-cell"> per cell with a tooltip. */
cl_status cl__svg_confusion(cl_strbuf *b, const char *id, const int64_t *cm,
                            int k, const char *const *names);
/* Horizontal bars of per-class accuracy (NaN: no sample), worst first
 * when more than `max_rows` classes (then only those). */
cl_status cl__svg_class_bars(cl_strbuf *b, const char *id, const int64_t *cm,
                             int k, const char *const *names, int max_rows);

/* ---- evaluation (evalpart.c) ---- */

typedef cl_val_miss cl__miss;

typedef struct cl__report_eval {
    int done;       /* 1 when the evaluation ran */
    char note[640]; /* why it did not run, or "" */
    int k;
    char **names; /* names: (k) */
    int64_t *cm;  /* cm: (k, k), row true, column predicted */
    int64_t samples, correct, correct5;
    int hflip; /* each sample's logits averaged with its mirror's */
    double loss_sum;
    cl__miss *miss; /* miss: (n_miss), most confident first */
    int n_miss;
    char **miss_png;  /* base64 PNG of each miss */
    int img_w, img_h; /* size of the stored images */
    char ckpt_epoch[32], ckpt_step[32], ckpt_version[64];
    char split[96], dataset[64];
    double seconds;
    int from_training;  /* the training's own pass (its .val record) */
    char precision[16]; /* the pass's ("f32", "bf16"); "" if not known */
} cl__report_eval;

/* Evaluates rl->ckpt; failures are reported in ev->note, never returned,
 * except CL_ERR_NOMEM. */
cl_status cl__report_eval_run(const cl__runlog *rl, const cl_report_opts *o,
                              cl__report_eval *ev);
void cl__report_eval_free(cl__report_eval *ev);

#endif
