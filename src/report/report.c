/* The HTML pages: one run's report (summary, curves, evaluation, config,
 * environment) and the comparison of two runs, each one self-contained
 * file with inline CSS and SVG. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/onednn_info.h"
#include "core/error.h"
#include "core/mem.h"
#include "io/atomic.h"
#include "report/report_internal.h"
#include "train/metrics.h"
#include "train/train_state.h"

static const char css[] =
    ":root{--fg:#1f2937;--muted:#6b7280;--line:#e5e7eb;--bg:#f6f7f9}"
    "*{box-sizing:border-box}"
    "body{margin:0;background:var(--bg);color:var(--fg);"
    "font:14px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',"
    "sans-serif}"
    "main{max-width:1220px;margin:0 auto;padding:28px 24px 48px}"
    "h1{font-size:24px;margin:0 0 2px;font-weight:700;letter-spacing:-.01em}"
    "h2{font-size:17px;margin:34px 0 12px;font-weight:650;"
    "border-bottom:1px solid var(--line);padding-bottom:6px}"
    "h2 small{font-weight:400;color:var(--muted);font-size:13px;"
    "margin-left:8px}"
    ".sub{color:var(--muted);font-size:13px}"
    ".badge{display:inline-block;padding:1px 9px;border-radius:999px;"
    "font-size:12px;font-weight:600;vertical-align:middle;margin-left:8px}"
    ".badge.ok{background:#dcfce7;color:#166534}"
    ".badge.run{background:#fef3c7;color:#92400e}"
    ".notes{margin:10px 0 0;padding:0 0 0 18px;color:#92400e;font-size:13px}"
    ".note{background:#fffbeb;border:1px solid #fde68a;color:#92400e;"
    "padding:10px 14px;border-radius:8px;margin:8px 0}"
    ".cards{display:grid;grid-template-columns:repeat(auto-fill,"
    "minmax(172px,1fr));gap:12px;margin-top:20px}"
    ".card{background:#fff;border:1px solid var(--line);border-radius:10px;"
    "padding:11px 14px}"
    ".card .k{font-size:11px;color:var(--muted);text-transform:uppercase;"
    "letter-spacing:.05em}"
    ".card .v{font-size:22px;font-weight:700;"
    "font-variant-numeric:tabular-nums}"
    ".card .d{font-size:12px;color:var(--muted)}"
    ".grid2{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));"
    "gap:16px}"
    ".evalgrid{display:grid;grid-template-columns:minmax(0,1.2fr) "
    "minmax(0,1fr);gap:16px;align-items:start;margin-top:16px}"
    "svg.heatmap,svg.bars{width:100%;height:auto;display:block}"
    ".panel{background:#fff;border:1px solid var(--line);border-radius:10px;"
    "padding:10px 12px;overflow-x:auto}"
    "svg.chart{width:100%;height:auto;display:block}"
    "svg text{font-family:inherit}"
    ".chart-title{font-size:14px;font-weight:650;fill:#111827}"
    ".legend-text{font-size:12px;fill:#374151}"
    ".tick-label{font-size:11px;fill:#6b7280}"
    ".axis-label{font-size:12px;fill:#4b5563}"
    ".grid{stroke:#eef0f3}.tick{stroke:#9ca3af}"
    ".axis{stroke:#9ca3af;fill:none}.plot-bg{fill:#fff}"
    ".no-data{font-size:13px;fill:#9ca3af}"
    ".cm-count{font-size:11px;fill:#1f2937}.cm-count.light{fill:#fff}"
    ".cm-label{fill:#374151}.cm-frame{fill:none;stroke:#cbd5e1}"
    ".cm-cell:hover,.class-bar:hover{stroke:#111827;stroke-width:1.5}"
    ".bar-track{fill:#f1f5f9}.bar-label{font-size:12px;fill:#374151}"
    ".bar-value{font-size:12px;fill:#4b5563}"
    ".bar-mean{stroke:#111827;stroke-dasharray:3 3}"
    ".bar-mean-label{font-size:11px;fill:#111827}"
    ".miss-grid{display:grid;grid-template-columns:repeat(auto-fill,"
    "minmax(136px,1fr));gap:12px}"
    "figure.miss{margin:0;background:#fff;border:1px solid var(--line);"
    "border-radius:10px;padding:8px}"
    ".miss img{display:block;margin:0 auto;width:112px;height:112px;"
    "object-fit:contain;background:#111827;border-radius:6px}"
    ".miss img.px{image-rendering:pixelated}"
    "figcaption{font-size:12px;line-height:1.4;margin-top:6px;"
    "overflow-wrap:anywhere}"
    "figcaption b{font-weight:600}"
    ".t{color:#166534}.p{color:#b91c1c}.c{color:var(--muted)}"
    "table.kv{border-collapse:collapse;width:100%;font-size:13px}"
    "table.kv td,table.kv th{padding:3px 8px;border-bottom:1px solid "
    "#f1f5f9;vertical-align:top;text-align:left}"
    "table.kv th{font-weight:600;color:var(--muted);font-size:12px}"
    "table.kv td:first-child{color:var(--muted);white-space:nowrap}"
    "td.v{font-family:'DejaVu Sans Mono',ui-monospace,monospace;"
    "font-size:12px;word-break:break-all}"
    "tr.nondefault td.v{font-weight:700;color:#1d4ed8}"
    ".cfg{columns:3 300px;column-gap:16px}"
    ".cfg-group{break-inside:avoid;background:#fff;border:1px solid "
    "var(--line);border-radius:10px;padding:8px 10px;margin-bottom:16px}"
    ".cfg-group h3{font-size:12px;margin:2px 0 6px;text-transform:uppercase;"
    "letter-spacing:.06em;color:var(--muted)}"
    "details{margin-top:6px}summary{cursor:pointer;color:#2563eb}"
    "pre{background:#fff;border:1px solid var(--line);border-radius:8px;"
    "padding:10px;overflow:auto;font-size:12px;max-height:480px}"
    "footer{margin-top:36px;color:var(--muted);font-size:12px}"
    "@media (max-width:900px){.grid2,.evalgrid{grid-template-columns:1fr}}";

/* Colours: a run's blue, the other run's orange, then accents. */
#define C_BLUE "#2563eb"
#define C_BLUE_LIGHT "#93c5fd"
#define C_ORANGE "#ea580c"
#define C_ORANGE_LIGHT "#fdba74"
#define C_GREEN "#059669"
#define C_RED "#dc2626"
#define C_PURPLE "#7c3aed"

/* ---- small helpers --------------------------------------------------- */

static cl_status page_open(cl_strbuf *b, const char *title)
{
    CL_TRY(cl_strbuf_adds(b, "<!DOCTYPE html>\n<html lang=\"en\"><head>"
                             "<meta charset=\"utf-8\">"
                             "<meta name=\"viewport\" content=\"width="
                             "device-width,initial-scale=1\"><title>"));
    CL_TRY(cl__html_esc(b, title));
    CL_TRY(cl_strbuf_adds(b, "</title><style>"));
    CL_TRY(cl_strbuf_adds(b, css));
    return cl_strbuf_adds(b, "</style></head><body><main>\n");
}

static cl_status page_close(cl_strbuf *b)
{
    char when[64];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
    CL_TRY(cl_strbuf_addf(b,
                          "<footer>Generated %s by classic %s "
                          "(<code>classic report</code>). Self-contained: no "
                          "network, no scripts.</footer>\n",
                          when, cl_version()));
    return cl_strbuf_adds(b, "</main></body></html>\n");
}

static cl_status card(cl_strbuf *b, const char *id, const char *k,
                      const char *v, const char *detail)
{
    CL_TRY(cl_strbuf_addf(b, "<div class=\"card\" id=\"%s\"><div class=\"k\">",
                          id));
    CL_TRY(cl__html_esc(b, k));
    CL_TRY(cl_strbuf_adds(b, "</div><div class=\"v\">"));
    CL_TRY(cl__html_esc(b, v));
    CL_TRY(cl_strbuf_adds(b, "</div><div class=\"d\">"));
    CL_TRY(cl__html_esc(b, detail ? detail : ""));
    return cl_strbuf_adds(b, "</div></div>");
}

static void pct(char *buf, size_t n, double v)
{
    if (isfinite(v))
        snprintf(buf, n, "%.2f%%", 100 * v);
    else
        snprintf(buf, n, "\xe2\x80\x93");
}

static cl_status kv_row(cl_strbuf *b, const char *k, const char *v,
                        const char *cls)
{
    CL_TRY(cl_strbuf_addf(b, "<tr%s%s%s><td>", cls ? " class=\"" : "",
                          cls ? cls : "", cls ? "\"" : ""));
    CL_TRY(cl__html_esc(b, k));
    CL_TRY(cl_strbuf_adds(b, "</td><td class=\"v\">"));
    CL_TRY(cl__html_esc(b, v));
    return cl_strbuf_adds(b, "</td></tr>");
}

/* Columns of the run log as arrays for the charts. */
typedef struct cols {
    double *step, *loss, *avg, *lr, *ips, *wait, *comm; /* (n_train) */
    int have_comm;
    double *ep, *top1, *top5, *vloss; /* (n_eval) */
    double *tep, *tloss;              /* per epoch: (n_ep) */
    size_t n_ep;
} cols;

static void cols_free(cols *c)
{
    cl_free(c->step);
    memset(c, 0, sizeof *c);
}

/* One allocation holds every column. */
static cl_status cols_make(const cl__runlog *rl, cols *c)
{
    memset(c, 0, sizeof *c);
    size_t nt = rl->n_train, ne = rl->n_eval;
    size_t total = 7 * nt + 4 * ne + 2 * (nt + 1), bytes;
    CL_TRY(cl_mul_size(total, sizeof(double), &bytes, "chart columns"));
    double *p = cl_alloc(bytes, "chart columns");
    if (!p)
        return CL_ERR_NOMEM;
    c->step = p;
    c->loss = p + nt;
    c->avg = p + 2 * nt;
    c->lr = p + 3 * nt;
    c->ips = p + 4 * nt;
    c->wait = p + 5 * nt;
    c->comm = p + 6 * nt;
    c->ep = p + 7 * nt;
    c->top1 = c->ep + ne;
    c->top5 = c->ep + 2 * ne;
    c->vloss = c->ep + 3 * ne;
    c->tep = c->ep + 4 * ne;
    c->tloss = c->tep + nt + 1;
    for (size_t i = 0; i < nt; i++) {
        const cl__rl_train *t = &rl->train[i];
        c->step[i] = (double)t->step;
        c->loss[i] = t->loss;
        c->avg[i] = t->loss_avg;
        c->lr[i] = t->lr;
        c->ips[i] = t->img_s;
        c->wait[i] = t->data_wait;
        c->comm[i] = t->comm_wait;
        c->have_comm |= isfinite(t->comm_wait);
    }
    for (size_t i = 0; i < ne; i++) {
        const cl__rl_eval *e = &rl->eval[i];
        c->ep[i] = (double)e->epoch;
        c->top1[i] = e->top1;
        c->top5[i] = e->top5;
        c->vloss[i] = e->loss;
    }
    /* Train loss per epoch: the mean of the step losses logged in it. */
    size_t i = 0;
    while (i < nt) {
        int64_t e = rl->train[i].epoch;
        double sum = 0;
        size_t cnt = 0;
        for (; i < nt && rl->train[i].epoch == e; i++)
            if (isfinite(rl->train[i].loss)) {
                sum += rl->train[i].loss;
                cnt++;
            }
        c->tep[c->n_ep] = (double)e;
        c->tloss[c->n_ep] = cnt ? sum / (double)cnt : NAN;
        c->n_ep++;
    }
    return CL_OK;
}

static double median_finite(const double *v, size_t n)
{
    double *t = cl_alloc((n ? n : 1) * sizeof *t, "median");
    if (!t) {
        cl_clear_error();
        return NAN;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i]))
            t[m++] = v[i];
    /* Insertion sort: n is a few thousand at most and this runs once. */
    for (size_t i = 1; i < m; i++) {
        double x = t[i];
        size_t j = i;
        while (j > 0 && t[j - 1] > x) {
            t[j] = t[j - 1];
            j--;
        }
        t[j] = x;
    }
    double r = m ? (m % 2 ? t[m / 2] : (t[m / 2 - 1] + t[m / 2]) / 2) : NAN;
    cl_free(t);
    return r;
}

/* The processes the run trained on, as its newest training state records
 * them, or 0 when it has none. */
static int run_processes(const cl__runlog *rl)
{
    cl_train_state_info in;
    if (!rl->state[0] || cl_train_state_read_info(rl->state, &in) != CL_OK) {
        cl_clear_error();
        return 0;
    }
    return in.processes;
}

/* ---- the run report ---------------------------------------------------- */

/* The k of the log's top-k: min(5, K) as its eval lines record it, else
 * from the config's num_classes; 5 for logs of older versions. */
static int run_topk(const cl__runlog *rl)
{
    for (size_t i = rl->n_eval; i > 0; i--)
        if (rl->eval[i - 1].topk > 0)
            return rl->eval[i - 1].topk;
    if (rl->have_config && rl->cfg.num_classes > 0)
        return cl_metrics_topk_k(rl->cfg.num_classes);
    return 5;
}

static cl_status summary(cl_strbuf *b, const cl__runlog *rl, const cols *c)
{
    char v[64], d[128], k[32];
    const cl__rl_eval *last = rl->n_eval ? &rl->eval[rl->n_eval - 1] : NULL;
    const cl__rl_train *lt = rl->n_train ? &rl->train[rl->n_train - 1] : NULL;
    size_t best = 0;
    for (size_t i = 1; i < rl->n_eval; i++)
        if (rl->eval[i].top1 > rl->eval[best].top1)
            best = i;
    CL_TRY(cl_strbuf_adds(b, "<section class=\"cards\" id=\"summary\">"));
    pct(v, sizeof v, last ? last->top1 : NAN);
    /* The training's validation names its precision (bf16 at amp O2),
     * since `classic eval` of the same checkpoint at f32 differs. */
    snprintf(d, sizeof d, last ? "epoch %lld, %.0f samples%s%s" : "no eval yet",
             last ? (long long)last->epoch : 0LL, last ? last->samples : 0.0,
             last && last->precision[0] ? ", " : "",
             last ? last->precision : "");
    CL_TRY(card(b, "final-top1", "val top-1", v, d));
    pct(v, sizeof v, last ? last->top5 : NAN);
    snprintf(k, sizeof k, "val top-%d", run_topk(rl));
    CL_TRY(card(b, "final-top5", k, v, last ? "last eval" : ""));
    pct(v, sizeof v, rl->n_eval ? rl->eval[best].top1 : NAN);
    snprintf(d, sizeof d, "epoch %lld",
             rl->n_eval ? (long long)rl->eval[best].epoch : 0LL);
    CL_TRY(card(b, "best-top1", "best top-1", v, rl->n_eval ? d : ""));
    cl__fmt_num(v, sizeof v, last ? last->loss : NAN, 4);
    CL_TRY(card(b, "final-val-loss", "val loss", v, "cross-entropy"));
    cl__fmt_num(v, sizeof v, lt ? lt->loss_avg : NAN, 4);
    snprintf(d, sizeof d, "smoothed, step %lld",
             lt ? (long long)lt->step : 0LL);
    CL_TRY(card(b, "final-train-loss", "train loss", v, lt ? d : ""));
    int64_t epochs = lt ? lt->epoch : 0;
    if (rl->have_config)
        snprintf(v, sizeof v, "%lld / %d", (long long)epochs,
                 rl->cfg.epoch_size);
    else
        snprintf(v, sizeof v, "%lld", (long long)epochs);
    snprintf(d, sizeof d, "%lld steps", lt ? (long long)lt->step : 0LL);
    CL_TRY(card(b, "progress", "epochs", v, d));
    double ips = median_finite(c->ips, rl->n_train);
    cl__fmt_num(v, sizeof v, ips, 4);
    CL_TRY(card(b, "throughput", "img/s", v, "median over the log"));
    double w = 0;
    size_t nw = 0;
    for (size_t i = 0; i < rl->n_train; i++)
        if (isfinite(c->wait[i])) {
            w += c->wait[i];
            nw++;
        }
    pct(v, sizeof v, nw ? w / (double)nw : NAN);
    CL_TRY(card(b, "data-wait", "data wait", v, "share of step time"));
    double secs = 0;
    for (size_t i = 0; i < rl->n_eval; i++)
        if (isfinite(rl->eval[i].epoch_s))
            secs += rl->eval[i].epoch_s;
    if (secs > 0) {
        long t = (long)(secs + 0.5);
        if (t >= 3600)
            snprintf(v, sizeof v, "%ldh %02ldm", t / 3600, t / 60 % 60);
        else
            snprintf(v, sizeof v, "%ldm %02lds", t / 60, t % 60);
    } else {
        snprintf(v, sizeof v, "\xe2\x80\x93");
    }
    CL_TRY(card(b, "train-time", "train time", v, "sum of evaluated epochs"));
    return cl_strbuf_adds(b, "</section>\n");
}

static cl_status chart(cl_strbuf *b, const char *id, const char *title,
                       const char *xl, const char *yl, int log_y, int pctg,
                       int xint, const cl__svg_series *s, int n)
{
    cl__svg_chart c = {id, title, xl, yl, 580, 290, log_y, pctg, 0, 0, xint};
    CL_TRY(cl_strbuf_adds(b, "<div class=\"panel\">"));
    CL_TRY(cl__svg_line_chart(b, &c, s, n));
    return cl_strbuf_adds(b, "</div>\n");
}

static cl_status curves(cl_strbuf *b, const cl__runlog *rl, const cols *c)
{
    size_t nt = rl->n_train, ne = rl->n_eval;
    char topk[16], acc_title[96];
    const cl__rl_eval *last = ne ? &rl->eval[ne - 1] : NULL;
    snprintf(topk, sizeof topk, "top-%d", run_topk(rl));
    snprintf(acc_title, sizeof acc_title, "Validation accuracy%s%s%s",
             last && last->precision[0] ? " (" : "",
             last ? last->precision : "",
             last && last->precision[0] ? ")" : "");
    CL_TRY(cl_strbuf_adds(b, "<h2 id=\"curves\">Training curves</h2>"
                             "<div class=\"grid2\">\n"));
    cl__svg_series loss[2] = {
        {"raw", "loss-raw", c->step, c->loss, nt, C_BLUE_LIGHT, 1.2, 0.9, 0, 0},
        {"smoothed (EMA)", "loss-smooth", c->step, c->avg, nt, C_BLUE, 2.2, 0,
         0, 0}};
    CL_TRY(chart(b, "chart-loss", "Loss per step", "step", "loss", -1, 0, 0,
                 loss, 2));
    cl__svg_series lr = {"lr",     "lr-curve", c->step, c->lr, nt,
                         C_ORANGE, 2,          0,       0,     0};
    CL_TRY(
        chart(b, "chart-lr", "Learning rate", "step", "lr", 0, 0, 0, &lr, 1));
    cl__svg_series el[2] = {{"train (mean of logged steps)", "epoch-train-loss",
                             c->tep, c->tloss, c->n_ep, C_BLUE, 2, 0, 0, 1},
                            {"validation", "epoch-val-loss", c->ep, c->vloss,
                             ne, C_PURPLE, 2, 0, 0, 1}};
    CL_TRY(chart(b, "chart-epoch-loss", "Loss per epoch", "epoch", "loss", -1,
                 0, 1, el, 2));
    cl__svg_series acc[2] = {
        {"top-1", "acc-top1", c->ep, c->top1, ne, C_GREEN, 2.2, 0, 0, 1},
        {topk, "acc-top5", c->ep, c->top5, ne, C_GREEN, 1.6, 0, 1, 1}};
    CL_TRY(
        chart(b, "chart-acc", acc_title, "epoch", "accuracy", 0, 1, 1, acc, 2));
    cl__svg_series ips = {"img/s", "ips-curve", c->step, c->ips, nt,
                          C_GREEN, 1.8,         0,       0,      0};
    CL_TRY(chart(b, "chart-ips", "Throughput", "step", "images / s", 0, 0, 0,
                 &ips, 1));
    cl__svg_series wait[2] = {
        {"data wait", "wait-curve", c->step, c->wait, nt, C_RED, 1.8, 0, 0, 0},
        {"gradient sync wait", "comm-curve", c->step, c->comm, nt, C_PURPLE,
         1.8, 0, 0, 0}};
    CL_TRY(chart(b, "chart-wait",
                 c->have_comm ? "Wait shares of step time"
                              : "Data-wait share of step time",
                 "step", "share of step time", 0, 1, 0, wait,
                 c->have_comm ? 2 : 1));
    return cl_strbuf_adds(b, "</div>\n");
}

static cl_status misclassified(cl_strbuf *b, const cl__report_eval *ev)
{
    CL_TRY(cl_strbuf_addf(b,
                          "<h2>Most confidently misclassified<small>%d of "
                          "the %lld wrong predictions, by softmax "
                          "confidence</small></h2>",
                          ev->n_miss, (long long)(ev->samples - ev->correct)));
    if (ev->n_miss == 0)
        return cl_strbuf_adds(b, "<p class=\"note\">No sample of the "
                                 "evaluated split is misclassified.</p>");
    const int small = ev->img_w > 0 && ev->img_w <= 64 && ev->img_h <= 64;
    CL_TRY(cl_strbuf_adds(b, "<div class=\"miss-grid\" id=\"misclassified\">"));
    for (int i = 0; i < ev->n_miss; i++) {
        const cl__miss *m = &ev->miss[i];
        CL_TRY(cl_strbuf_adds(b, "<figure class=\"miss\">"));
        if (ev->miss_png[i]) {
            CL_TRY(cl_strbuf_addf(b,
                                  "<img class=\"miss-img%s\" "
                                  "src=\"data:image/png;base64,",
                                  small ? " px" : ""));
            CL_TRY(cl_strbuf_adds(b, ev->miss_png[i]));
            CL_TRY(cl_strbuf_adds(b, "\" alt=\"sample "));
            CL_TRY(cl_strbuf_addf(b, "%lld\">", (long long)m->index));
        }
        CL_TRY(cl_strbuf_adds(b, "<figcaption><div class=\"t\">true "
                                 "<b>"));
        CL_TRY(cl__html_esc(b, ev->names[m->truth]));
        CL_TRY(cl_strbuf_adds(b, "</b></div><div class=\"p\">pred <b>"));
        CL_TRY(cl__html_esc(b, ev->names[m->pred]));
        CL_TRY(cl_strbuf_addf(b,
                              "</b> %.1f%%</div><div class=\"c\">#%lld, "
                              "p(true) %.1f%%</div></figcaption></figure>",
                              100 * m->conf, (long long)m->index,
                              100 * m->p_true));
    }
    return cl_strbuf_adds(b, "</div>\n");
}

static cl_status evaluation(cl_strbuf *b, const cl__runlog *rl,
                            const cl__report_eval *ev)
{
    CL_TRY(cl_strbuf_adds(b, "<h2 id=\"evaluation\">Evaluation"));
    if (rl->ckpt[0]) {
        const char *base = strrchr(rl->ckpt, '/');
        CL_TRY(cl_strbuf_adds(b, "<small>"));
        CL_TRY(cl__html_esc(b, base ? base + 1 : rl->ckpt));
        if (ev->done) {
            CL_TRY(cl_strbuf_addf(b, " (%s checkpoint, epoch ", rl->ckpt_kind));
            CL_TRY(cl__html_esc(b, ev->ckpt_epoch));
            CL_TRY(cl_strbuf_adds(b, ", step "));
            CL_TRY(cl__html_esc(b, ev->ckpt_step));
            CL_TRY(cl_strbuf_addf(b, ") on %lld samples of ",
                                  (long long)ev->samples));
            CL_TRY(cl__html_esc(b, ev->dataset));
            CL_TRY(cl_strbuf_adds(b, " split "));
            CL_TRY(cl__html_esc(b, ev->split));
            if (ev->hflip)
                CL_TRY(cl_strbuf_adds(b, ", each averaged with its mirror"));
            if (ev->precision[0]) {
                CL_TRY(cl_strbuf_adds(b, ", precision "));
                CL_TRY(cl__html_esc(b, ev->precision));
            }
            if (ev->from_training)
                CL_TRY(cl_strbuf_adds(b, ", the training's own evaluation "
                                         "(not run again)"));
            else
                CL_TRY(cl_strbuf_addf(b, " in %.1f s", ev->seconds));
        }
        CL_TRY(cl_strbuf_adds(b, "</small>"));
    }
    CL_TRY(cl_strbuf_adds(b, "</h2>\n"));
    if (!ev->done) {
        CL_TRY(cl_strbuf_adds(b, "<p class=\"note\" id=\"eval-note\">"));
        CL_TRY(cl__html_esc(b, ev->note));
        return cl_strbuf_adds(b, "</p>\n");
    }
    char v[64], d[96], k[16];
    CL_TRY(cl_strbuf_adds(b, "<div class=\"cards\" id=\"eval-cards\">"));
    pct(v, sizeof v, ev->samples ? (double)ev->correct / ev->samples : NAN);
    snprintf(d, sizeof d, "%lld / %lld", (long long)ev->correct,
             (long long)ev->samples);
    CL_TRY(card(b, "eval-top1", "top-1", v, d));
    pct(v, sizeof v, ev->samples ? (double)ev->correct5 / ev->samples : NAN);
    snprintf(k, sizeof k, "top-%d", cl_metrics_topk_k(ev->k));
    CL_TRY(card(b, "eval-top5", k, v, ""));
    cl__fmt_num(v, sizeof v, ev->samples ? ev->loss_sum / ev->samples : NAN, 4);
    CL_TRY(card(b, "eval-loss", "loss", v, "cross-entropy"));
    CL_TRY(cl_strbuf_adds(b, "</div>\n<div class=\"evalgrid\">"));
    const char *const *names = (const char *const *)ev->names;
    if (ev->k <= 100) {
        CL_TRY(cl_strbuf_adds(b, "<div class=\"panel\">"));
        CL_TRY(cl__svg_confusion(b, "confusion", ev->cm, ev->k, names));
        CL_TRY(cl_strbuf_adds(b, "</div>"));
    } else {
        CL_TRY(cl_strbuf_addf(b,
                              "<p class=\"note\">The confusion matrix of %d "
                              "classes is too large to draw; `classic eval "
                              "--csv` writes it.</p>",
                              ev->k));
    }
    CL_TRY(cl_strbuf_adds(b, "<div class=\"panel\">"));
    CL_TRY(cl__svg_class_bars(b, "class-acc", ev->cm, ev->k, names, 40));
    CL_TRY(cl_strbuf_adds(b, "</div></div>\n"));
    return misclassified(b, ev);
}

/* The config the run resolved, key by key in the groups of the recipe
 * (io/config.h's table), each value as config.yaml writes it; bold where
 * it differs from the default.  A config.yaml this version does not load
 * is shown as written only. */
static cl_status config_section(cl_strbuf *b, const cl__runlog *rl)
{
    CL_TRY(cl_strbuf_adds(b, "<h2 id=\"config\">Configuration<small>bold: "
                             "differs from the default</small></h2>\n"));
    if (!rl->config_text)
        return cl_strbuf_adds(b, "<p class=\"note\">No config.yaml in the "
                                 "run directory.</p>\n");
    if (rl->have_config) {
        cl_config def;
        cl_config_defaults(&def);
        CL_TRY(cl_strbuf_adds(b, "<div class=\"cfg\">"));
        const char *group = NULL;
        char val[1024], dv[1024];
        for (int i = 0; i < cl_config_key_count(); i++) {
            const char *key = cl_config_key_name(i);
            const char *g = cl_config_key_group(i);
            if (i == 0 || g != group) {
                if (i)
                    CL_TRY(cl_strbuf_adds(b, "</table></div>"));
                CL_TRY(cl_strbuf_adds(b, "<div class=\"cfg-group\"><h3>"));
                CL_TRY(cl__html_esc(b, g ? g : "settings"));
                CL_TRY(cl_strbuf_adds(b, "</h3><table class=\"kv\">"));
                group = g;
            }
            CL_TRY(cl_config_get(&rl->cfg, key, val, sizeof val));
            CL_TRY(cl_config_get(&def, key, dv, sizeof dv));
            CL_TRY(kv_row(b, key, val,
                          strcmp(dv, val) != 0 ? "nondefault" : NULL));
        }
        if (cl_config_key_count() > 0)
            CL_TRY(cl_strbuf_adds(b, "</table></div>"));
        CL_TRY(cl_strbuf_adds(b, "</div>"));
    } else {
        CL_TRY(cl_strbuf_adds(b, "<p class=\"note\">config.yaml does not "
                                 "load as a recipe of this version of "
                                 "classic; it is shown as written.</p>"));
    }
    CL_TRY(cl_strbuf_adds(b, "<details><summary>config.yaml as "
                             "written</summary><pre>"));
    CL_TRY(cl__html_esc(b, rl->config_text));
    return cl_strbuf_adds(b, "</pre></details>\n");
}

static cl_status environment(cl_strbuf *b, const cl__runlog *rl,
                             const cl__report_eval *ev)
{
    char dnnl[160], v[256];
    cl_dnnl_version_string(dnnl, sizeof dnnl);
    CL_TRY(cl_strbuf_adds(b, "<h2 id=\"environment\">Environment</h2>"
                             "<div class=\"panel\"><table class=\"kv\" "
                             "id=\"env\">"));
    if (rl->header[0])
        CL_TRY(kv_row(b, "run", rl->header, NULL));
    if (ev->ckpt_version[0])
        CL_TRY(kv_row(b, "classic (checkpoint)", ev->ckpt_version, NULL));
    CL_TRY(kv_row(b, "classic (this report)", cl_version(), NULL));
    CL_TRY(kv_row(b, "oneDNN", dnnl, NULL));
    CL_TRY(kv_row(b, "CPU ISA (oneDNN)", cl_dnnl_isa_name(), NULL));
    int ranks = run_processes(rl);
    if (ranks > 0) {
        snprintf(v, sizeof v, "%d", ranks);
        CL_TRY(kv_row(b, "processes (MPI ranks)", v, NULL));
    }
    if (rl->have_config && rl->cfg.threads > 0)
        snprintf(v, sizeof v, "%d per process", rl->cfg.threads);
    else
        snprintf(v, sizeof v,
                 "OpenMP default (%d on the machine writing this report)",
                 omp_get_max_threads());
    CL_TRY(kv_row(b, "threads", v, NULL));
    if (rl->have_config) {
        CL_TRY(kv_row(b, "backend",
                      cl_config_enum_name("backend", rl->cfg.backend), NULL));
        CL_TRY(kv_row(b, "amp_level",
                      cl_config_enum_name("amp_level", rl->cfg.amp_level),
                      NULL));
    }
    CL_TRY(kv_row(b, "run directory", rl->dir, NULL));
    if (rl->ckpt[0])
        CL_TRY(kv_row(b, "checkpoint evaluated", rl->ckpt, NULL));
    return cl_strbuf_adds(b, "</table></div>\n");
}

static cl_status header(cl_strbuf *b, const cl__runlog *rl)
{
    const cl__rl_train *lt = rl->n_train ? &rl->train[rl->n_train - 1] : NULL;
    int done = rl->has_last &&
               (!rl->have_config || (lt && lt->epoch >= rl->cfg.epoch_size));
    CL_TRY(cl_strbuf_adds(b, "<header><h1>"));
    CL_TRY(cl__html_esc(b, rl->name));
    CL_TRY(cl_strbuf_addf(b,
                          "<span class=\"badge %s\" id=\"status\">%s"
                          "</span></h1><div class=\"sub\">",
                          done ? "ok" : "run",
                          done ? "complete" : "in progress or stopped"));
    if (rl->have_config) {
        char lr[32];
        cl__fmt_num(lr, sizeof lr, rl->cfg.lr, 4);
        CL_TRY(cl_strbuf_addf(
            b, "%s (%s stem) on %s, batch %d, %s lr %s, %s, %d epochs",
            cl_config_enum_name("model", rl->cfg.model),
            cl_config_enum_name("stem", rl->cfg.stem),
            cl_config_enum_name("dataset", rl->cfg.dataset), rl->cfg.batch_size,
            cl_config_enum_name("opt", rl->cfg.opt), lr,
            cl_config_enum_name("scheduler", rl->cfg.scheduler),
            rl->cfg.epoch_size));
        CL_TRY(cl_strbuf_adds(b, " &middot; "));
    }
    CL_TRY(cl__html_esc(b, rl->dir));
    CL_TRY(cl_strbuf_adds(b, "</div>"));
    int any = rl->partial_tail || rl->bad_lines || rl->resumes ||
              (!rl->n_train && !rl->n_eval);
    if (any) {
        CL_TRY(cl_strbuf_adds(b, "<ul class=\"notes\" id=\"log-notes\">"));
        if (!rl->n_train && !rl->n_eval)
            CL_TRY(cl_strbuf_adds(b, "<li>metrics.jsonl holds no record "
                                     "yet.</li>"));
        if (rl->partial_tail)
            CL_TRY(cl_strbuf_adds(b, "<li>The last line of metrics.jsonl is "
                                     "incomplete (being written) and was "
                                     "ignored.</li>"));
        if (rl->bad_lines)
            CL_TRY(cl_strbuf_addf(b,
                                  "<li>%lld line(s) of metrics.jsonl are not "
                                  "valid records and were skipped.</li>",
                                  (long long)rl->bad_lines));
        if (rl->resumes)
            CL_TRY(cl_strbuf_addf(b,
                                  "<li>The run was resumed (%lld time(s)): "
                                  "repeated steps keep their last "
                                  "occurrence.</li>",
                                  (long long)rl->resumes));
        CL_TRY(cl_strbuf_adds(b, "</ul>"));
    }
    return cl_strbuf_adds(b, "</header>\n");
}

cl_report_opts cl_report_opts_default(void)
{
    cl_report_opts o;
    memset(&o, 0, sizeof o);
    o.eval = 1;
    o.limit = 2000;
    o.batch = 100;
    o.top_wrong = 16;
    o.backend = "onednn";
    return o;
}

static cl_status write_page(const char *path, const cl_strbuf *b)
{
    if (b->failed)
        return cl_error(CL_ERR_NOMEM, "%s: the page could not be built", path);
    return cl_atomic_write_file(path, b->data, b->len);
}

cl_status cl_report_write(const char *run_dir, const char *out_html,
                          const cl_report_opts *opts_or_null)
{
    cl_report_opts o = opts_or_null ? *opts_or_null : cl_report_opts_default();
    cl__runlog rl;
    cl__report_eval ev;
    cols c;
    cl_strbuf b, title;
    memset(&ev, 0, sizeof ev);
    memset(&c, 0, sizeof c);
    cl_strbuf_init(&b);
    cl_strbuf_init(&title);
    char path[1100];
    cl_status s = cl__runlog_read(&rl, run_dir);
    if (s != CL_OK)
        goto fail;
    if (out_html)
        snprintf(path, sizeof path, "%s", out_html);
    else
        snprintf(path, sizeof path, "%s/report.html", rl.dir);
    if ((s = cols_make(&rl, &c)) != CL_OK ||
        (s = cl__report_eval_run(&rl, &o, &ev)) != CL_OK)
        goto fail;
    cl_strbuf_addf(&title, "%s \xe2\x80\x94 classic report", rl.name);
    if ((s = page_open(&b, cl_strbuf_str(&title))) != CL_OK ||
        (s = header(&b, &rl)) != CL_OK || (s = summary(&b, &rl, &c)) != CL_OK ||
        (s = curves(&b, &rl, &c)) != CL_OK ||
        (s = evaluation(&b, &rl, &ev)) != CL_OK ||
        (s = config_section(&b, &rl)) != CL_OK ||
        (s = environment(&b, &rl, &ev)) != CL_OK ||
        (s = page_close(&b)) != CL_OK)
        goto fail;
    s = write_page(path, &b);
fail:
    cl_strbuf_free(&b);
    cl_strbuf_free(&title);
    cols_free(&c);
    cl__report_eval_free(&ev);
    cl__runlog_free(&rl);
    return s;
}

/* ---- comparison ---------------------------------------------------------- */

/* Legend names: the directory names, or the full paths when they agree. */
static void run_labels(const cl__runlog *a, const cl__runlog *b, char *la,
                       char *lb, size_t n)
{
    int same = strcmp(a->name, b->name) == 0;
    snprintf(la, n, "%s", same ? a->dir : a->name);
    snprintf(lb, n, "%s", same ? b->dir : b->name);
    if (strcmp(la, lb) == 0) {
        snprintf(la, n, "A: %s", a->name);
        snprintf(lb, n, "B: %s", b->name);
    }
}

static cl_status cmp_table(cl_strbuf *b, const cl__runlog *r[2], const cols *c,
                           const char *la, const char *lb)
{
    CL_TRY(cl_strbuf_adds(b, "<div class=\"panel\"><table class=\"kv\" "
                             "id=\"cmp-metrics\"><tr><th>metric</th><th>"));
    CL_TRY(cl__html_esc(b, la));
    CL_TRY(cl_strbuf_adds(b, "</th><th>"));
    CL_TRY(cl__html_esc(b, lb));
    CL_TRY(cl_strbuf_adds(b, "</th></tr>"));
    int ka = run_topk(r[0]), kb = run_topk(r[1]);
    char row_k[32];
    if (ka == kb)
        snprintf(row_k, sizeof row_k, "val top-%d (last)", ka);
    else
        snprintf(row_k, sizeof row_k, "val top-k (last; k %d, %d)", ka, kb);
    const char *const rows[] = {"val top-1 (last)",
                                "best top-1",
                                row_k,
                                "val loss (last)",
                                "train loss (smoothed, last)",
                                "steps",
                                "epochs",
                                "img/s (median)"};
    for (int i = 0; i < 8; i++) {
        CL_TRY(cl_strbuf_adds(b, "<tr><td>"));
        CL_TRY(cl_strbuf_adds(b, rows[i]));
        CL_TRY(cl_strbuf_adds(b, "</td>"));
        for (int k = 0; k < 2; k++) {
            const cl__runlog *rl = r[k];
            const cl__rl_eval *e =
                rl->n_eval ? &rl->eval[rl->n_eval - 1] : NULL;
            const cl__rl_train *t =
                rl->n_train ? &rl->train[rl->n_train - 1] : NULL;
            double best = NAN;
            for (size_t j = 0; j < rl->n_eval; j++)
                if (isnan(best) || rl->eval[j].top1 > best)
                    best = rl->eval[j].top1;
            char v[64];
            switch (i) {
            case 0:
                pct(v, sizeof v, e ? e->top1 : NAN);
                break;
            case 1:
                pct(v, sizeof v, best);
                break;
            case 2:
                pct(v, sizeof v, e ? e->top5 : NAN);
                break;
            case 3:
                cl__fmt_num(v, sizeof v, e ? e->loss : NAN, 4);
                break;
            case 4:
                cl__fmt_num(v, sizeof v, t ? t->loss_avg : NAN, 4);
                break;
            case 5:
                snprintf(v, sizeof v, "%lld", t ? (long long)t->step : 0LL);
                break;
            case 6:
                snprintf(v, sizeof v, "%lld", t ? (long long)t->epoch : 0LL);
                break;
            default:
                cl__fmt_num(v, sizeof v, median_finite(c[k].ips, rl->n_train),
                            4);
            }
            CL_TRY(cl_strbuf_addf(b, "<td class=\"v\">%s</td>", v));
        }
        CL_TRY(cl_strbuf_adds(b, "</tr>"));
    }
    return cl_strbuf_adds(b, "</table></div>\n");
}

/* Keys whose values differ between the two runs' configs. */
static cl_status cmp_config(cl_strbuf *b, const cl__runlog *r[2],
                            const char *la, const char *lb)
{
    CL_TRY(cl_strbuf_adds(b, "<h2>Configuration differences</h2>"));
    if (!r[0]->config_text || !r[1]->config_text)
        return cl_strbuf_adds(b, "<p class=\"note\">A run has no "
                                 "config.yaml.</p>\n");
    if (!r[0]->have_config || !r[1]->have_config)
        return cl_strbuf_adds(b, "<p class=\"note\">A run's config.yaml "
                                 "does not load as a recipe of this version "
                                 "of classic.</p>\n");
    CL_TRY(cl_strbuf_adds(b, "<div class=\"panel\"><table class=\"kv\" "
                             "id=\"cmp-config\"><tr><th>key</th><th>"));
    CL_TRY(cl__html_esc(b, la));
    CL_TRY(cl_strbuf_adds(b, "</th><th>"));
    CL_TRY(cl__html_esc(b, lb));
    CL_TRY(cl_strbuf_adds(b, "</th></tr>"));
    int n = 0;
    char va[1024], vb[1024];
    for (int i = 0; i < cl_config_key_count(); i++) {
        const char *key = cl_config_key_name(i);
        if (strcmp(key, "ckpt_save_dir") == 0)
            continue; /* always differs, and the header names the runs */
        CL_TRY(cl_config_get(&r[0]->cfg, key, va, sizeof va));
        CL_TRY(cl_config_get(&r[1]->cfg, key, vb, sizeof vb));
        if (strcmp(va, vb) == 0)
            continue;
        CL_TRY(cl_strbuf_adds(b, "<tr><td>"));
        CL_TRY(cl__html_esc(b, key));
        CL_TRY(cl_strbuf_adds(b, "</td><td class=\"v\">"));
        CL_TRY(cl__html_esc(b, va));
        CL_TRY(cl_strbuf_adds(b, "</td><td class=\"v\">"));
        CL_TRY(cl__html_esc(b, vb));
        CL_TRY(cl_strbuf_adds(b, "</td></tr>"));
        n++;
    }
    if (n == 0)
        CL_TRY(cl_strbuf_adds(b, "<tr><td colspan=\"3\">The two configs "
                                 "agree on every key.</td></tr>"));
    return cl_strbuf_adds(b, "</table></div>\n");
}

cl_status cl_report_compare(const char *run_a, const char *run_b,
                            const char *out_html)
{
    cl__runlog ra, rb;
    cols c[2];
    cl_strbuf b, title;
    memset(&rb, 0, sizeof rb);
    memset(c, 0, sizeof c);
    cl_strbuf_init(&b);
    cl_strbuf_init(&title);
    cl_status s = cl__runlog_read(&ra, run_a);
    if (s != CL_OK)
        return s;
    if ((s = cl__runlog_read(&rb, run_b)) != CL_OK)
        goto fail;
    if ((s = cols_make(&ra, &c[0])) != CL_OK ||
        (s = cols_make(&rb, &c[1])) != CL_OK)
        goto fail;
    const cl__runlog *r[2] = {&ra, &rb};
    char la[300], lb[300];
    run_labels(&ra, &rb, la, lb, sizeof la);
    cl_strbuf_addf(&title, "%s vs %s \xe2\x80\x94 classic report", la, lb);
    if ((s = page_open(&b, cl_strbuf_str(&title))) != CL_OK)
        goto fail;
    cl_strbuf_adds(&b, "<header><h1>");
    cl__html_esc(&b, la);
    cl_strbuf_adds(&b, " <span style=\"color:#9ca3af;font-weight:400\">vs"
                       "</span> ");
    cl__html_esc(&b, lb);
    cl_strbuf_adds(&b, "</h1><div class=\"sub\">");
    cl__html_esc(&b, ra.dir);
    cl_strbuf_adds(&b, " &middot; ");
    cl__html_esc(&b, rb.dir);
    cl_strbuf_adds(&b, "</div></header>\n<h2>Final metrics</h2>");
    if ((s = cmp_table(&b, r, c, la, lb)) != CL_OK)
        goto fail;
    cl_strbuf_adds(&b, "<h2>Curves</h2><div class=\"grid2\">\n");
    size_t na = ra.n_train, nb = rb.n_train;
    cl__svg_series loss[4] = {
        {NULL, "cmp-loss-raw-a", c[0].step, c[0].loss, na, C_BLUE_LIGHT, 1, 0.7,
         0, 0},
        {NULL, "cmp-loss-raw-b", c[1].step, c[1].loss, nb, C_ORANGE_LIGHT, 1,
         0.7, 0, 0},
        {la, "cmp-loss-a", c[0].step, c[0].avg, na, C_BLUE, 2.2, 0, 0, 0},
        {lb, "cmp-loss-b", c[1].step, c[1].avg, nb, C_ORANGE, 2.2, 0, 0, 0}};
    if ((s = chart(&b, "cmp-chart-loss",
                   "Loss per step (smoothed; raw "
                   "faint)",
                   "step", "loss", -1, 0, 0, loss, 4)) != CL_OK)
        goto fail;
    cl__svg_series lr[2] = {
        {la, "cmp-lr-a", c[0].step, c[0].lr, na, C_BLUE, 2, 0, 0, 0},
        {lb, "cmp-lr-b", c[1].step, c[1].lr, nb, C_ORANGE, 2, 0, 1, 0}};
    if ((s = chart(&b, "cmp-chart-lr", "Learning rate", "step", "lr", 0, 0, 0,
                   lr, 2)) != CL_OK)
        goto fail;
    size_t ea = ra.n_eval, eb = rb.n_eval;
    char t5a[320], t5b[320], acc_title[96];
    int ka = run_topk(&ra), kb = run_topk(&rb);
    snprintf(t5a, sizeof t5a, "%s top-%d", la, ka);
    snprintf(t5b, sizeof t5b, "%s top-%d", lb, kb);
    if (ka == kb)
        snprintf(acc_title, sizeof acc_title,
                 "Validation top-1 (top-%d dashed)", ka);
    else
        snprintf(acc_title, sizeof acc_title,
                 "Validation top-1 (top-k dashed)");
    cl__svg_series acc[4] = {
        {la, "cmp-top1-a", c[0].ep, c[0].top1, ea, C_BLUE, 2.2, 0, 0, 1},
        {lb, "cmp-top1-b", c[1].ep, c[1].top1, eb, C_ORANGE, 2.2, 0, 0, 1},
        {NULL, "cmp-top5-a", c[0].ep, c[0].top5, ea, C_BLUE, 1.4, 0.6, 1, 0},
        {NULL, "cmp-top5-b", c[1].ep, c[1].top5, eb, C_ORANGE, 1.4, 0.6, 1, 0}};
    if ((s = chart(&b, "cmp-chart-acc", acc_title, "epoch", "accuracy", 0, 1, 1,
                   acc, 4)) != CL_OK)
        goto fail;
    cl__svg_series el[4] = {{la, "cmp-epoch-loss-a", c[0].tep, c[0].tloss,
                             c[0].n_ep, C_BLUE, 2, 0, 0, 1},
                            {lb, "cmp-epoch-loss-b", c[1].tep, c[1].tloss,
                             c[1].n_ep, C_ORANGE, 2, 0, 0, 1},
                            {NULL, "cmp-val-loss-a", c[0].ep, c[0].vloss, ea,
                             C_BLUE, 1.4, 0.6, 1, 0},
                            {NULL, "cmp-val-loss-b", c[1].ep, c[1].vloss, eb,
                             C_ORANGE, 1.4, 0.6, 1, 0}};
    if ((s = chart(&b, "cmp-chart-epoch-loss",
                   "Train loss per epoch (validation dashed)", "epoch", "loss",
                   -1, 0, 1, el, 4)) != CL_OK)
        goto fail;
    cl_strbuf_adds(&b, "</div>\n");
    if ((s = cmp_config(&b, r, la, lb)) != CL_OK ||
        (s = page_close(&b)) != CL_OK)
        goto fail;
    s = write_page(out_html ? out_html : "compare.html", &b);
fail:
    cl_strbuf_free(&b);
    cl_strbuf_free(&title);
    cols_free(&c[0]);
    cols_free(&c[1]);
    cl__runlog_free(&ra);
    cl__runlog_free(&rb);
    return s;
}
