/* Inline SVG charts for the report: line charts with nice ticks (linear
 * or log y), the confusion heatmap and per-class accuracy bars.  Styling
 * lives in the page's CSS (classes), data colours in attributes. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "report/report_internal.h"

/* Series of more points than this are thinned (every k-th point, the last
 * always kept): the page stays small and a chart has ~500 px anyway. */
#define MAX_PATH_POINTS 4000

enum { M_LEFT = 62, M_RIGHT = 18, M_TOP = 40, M_BOTTOM = 46 };

/* Vertical room a 12 px tick label needs, px. */
#define LABEL_GAP 16.0

typedef struct axis {
    double lo, hi; /* data range shown */
    int log;
    double px0, px1; /* pixel range (px1 < px0 for y) */
} axis;

static double ax_map(const axis *a, double v)
{
    double t;
    if (a->log)
        t = (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo));
    else
        t = (v - a->lo) / (a->hi - a->lo);
    return a->px0 + t * (a->px1 - a->px0);
}

/* 1, 2 or 5 times a power of ten, about span / target. */
static double nice_step(double span, int target)
{
    double raw = span / target;
    double p = pow(10, floor(log10(raw)));
    double f = raw / p;
    double m = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
    return m * p;
}

/* A tick label with as many decimals as the step needs. */
static void tick_label(char *buf, size_t n, double v, double step, int percent)
{
    if (percent) {
        v *= 100;
        step *= 100;
    }
    if (fabs(v) < step * 1e-6)
        v = 0;
    double a = fabs(v);
    if (!percent && a != 0 && (a < 1e-3 || a >= 1e6)) {
        cl__fmt_num(buf, n, v, 3);
    } else {
        int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
        if (dec > 6)
            dec = 6;
        if (!percent && a >= 1e4 && step >= 1000)
            snprintf(buf, n, "%.*fk", dec > 3 ? dec - 3 : 0, v / 1000);
        else
            snprintf(buf, n, "%.*f", dec, v);
    }
    if (percent) {
        size_t l = strlen(buf);
        snprintf(buf + l, n - l, "%%");
    }
}

static int usable(const axis *a, double v)
{
    return isfinite(v) && (!a->log || v > 0);
}

static void data_range(const cl__svg_series *s, int ns, int x, int pos_only,
                       double *lo, double *hi)
{
    *lo = INFINITY;
    *hi = -INFINITY;
    for (int i = 0; i < ns; i++)
        for (size_t j = 0; j < s[i].n; j++) {
            double v = x ? s[i].x[j] : s[i].y[j];
            double other = x ? s[i].y[j] : s[i].x[j];
            if (!isfinite(v) || !isfinite(other) || (pos_only && v <= 0))
                continue;
            *lo = v < *lo ? v : *lo;
            *hi = v > *hi ? v : *hi;
        }
}

static cl_status add_text(cl_strbuf *b, const char *cls, double x, double y,
                          const char *anchor, const char *txt)
{
    CL_TRY(cl_strbuf_addf(b, "<text class=\"%s\" x=\"%.1f\" y=\"%.1f\"%s%s%s>",
                          cls, x, y, anchor ? " text-anchor=\"" : "",
                          anchor ? anchor : "", anchor ? "\"" : ""));
    CL_TRY(cl__html_esc(b, txt));
    return cl_strbuf_adds(b, "</text>");
}

/* Approximate width of a label at the page's 12 px sans-serif. */
static double text_w(const char *s, double px)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        n += (*p & 0xc0) != 0x80; /* count code points, not bytes */
    return (double)n * px * 0.58;
}

/* s cut to at most max code points, "…" marking the cut: axis labels
 * stay inside the chart, the tooltips keep the full name. */
static void short_label(const char *s, char *buf, size_t n, int max)
{
    int cp = 0;
    size_t i = 0;
    for (; s[i]; i++) {
        if (((unsigned char)s[i] & 0xc0) != 0x80 && cp++ == max)
            break;
    }
    if (!s[i] || i + 4 > n) {
        snprintf(buf, n, "%.*s", (int)(i < n ? i : n - 1), s);
        return;
    }
    /* Back off one code point for the ellipsis. */
    size_t j = i;
    do
        j--;
    while (j > 0 && ((unsigned char)s[j] & 0xc0) == 0x80);
    snprintf(buf, n, "%.*s\xe2\x80\xa6", (int)j, s);
}

static cl_status legend(cl_strbuf *b, const cl__svg_chart *c,
                        const cl__svg_series *s, int ns)
{
    double x = c->width - M_RIGHT;
    CL_TRY(cl_strbuf_adds(b, "<g class=\"legend\">"));
    for (int i = ns - 1; i >= 0; i--) {
        if (!s[i].name)
            continue;
        double w = text_w(s[i].name, 12);
        x -= w;
        CL_TRY(add_text(b, "legend-text", x, 20, NULL, s[i].name));
        x -= 24;
        CL_TRY(cl_strbuf_addf(
            b,
            "<line x1=\"%.1f\" y1=\"16\" x2=\"%.1f\" y2=\"16\" stroke=\"%s\" "
            "stroke-width=\"%.1f\"%s/>",
            x, x + 18, s[i].color, s[i].width < 2 ? 2.5 : s[i].width,
            s[i].dashed ? " stroke-dasharray=\"5 3\"" : ""));
        x -= 14;
    }
    return cl_strbuf_adds(b, "</g>");
}

static cl_status y_ticks(cl_strbuf *b, const cl__svg_chart *c, const axis *y,
                         double x0, double x1)
{
    double vals[64];
    int n = 0;
    double step = 0;
    if (y->log) {
        /* Labels at least LABEL_GAP px apart: 1, 2 and 5 per decade where
         * a decade is tall enough (2 sits 0.30 of a decade above 1), one
         * per decade below that, every m-th decade for a run whose loss
         * went from 0.1 to 1e30. */
        int d0 = (int)floor(log10(y->lo)), d1 = (int)ceil(log10(y->hi));
        static const double mult[] = {1, 2, 5};
        double decade = fabs(y->px1 - y->px0) /
                        (log10(y->hi) - log10(y->lo)); /* px per decade */
        int dense = decade * log10(2.0) >= LABEL_GAP;
        int every =
            dense || decade >= LABEL_GAP ? 1 : (int)ceil(LABEL_GAP / decade);
        for (int d = d0; d <= d1 && n < 60; d++) {
            if (((d % every) + every) % every != 0)
                continue;
            for (int m = 0; m < (dense ? 3 : 1); m++) {
                double v = mult[m] * pow(10, d);
                if (v >= y->lo * 0.999 && v <= y->hi * 1.001)
                    vals[n++] = v;
            }
        }
    } else {
        step = nice_step(y->hi - y->lo, 5);
        for (double v = ceil(y->lo / step - 1e-9) * step;
             v <= y->hi + step * 1e-9 && n < 60; v += step)
            vals[n++] = v;
    }
    CL_TRY(cl_strbuf_adds(b, "<g class=\"y-axis\">"));
    for (int i = 0; i < n; i++) {
        char lab[48];
        double py = ax_map(y, vals[i]);
        tick_label(lab, sizeof lab, vals[i], y->log ? vals[i] : step,
                   c->y_percent);
        CL_TRY(cl_strbuf_addf(b,
                              "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" "
                              "x2=\"%.1f\" y2=\"%.1f\"/>"
                              "<line class=\"tick\" x1=\"%.1f\" y1=\"%.1f\" "
                              "x2=\"%.1f\" y2=\"%.1f\"/>",
                              x0, py, x1, py, x0 - 5, py, x0, py));
        CL_TRY(add_text(b, "tick-label", x0 - 8, py + 4, "end", lab));
    }
    return cl_strbuf_adds(b, "</g>");
}

static cl_status x_ticks(cl_strbuf *b, const cl__svg_chart *c, const axis *x,
                         double y0)
{
    double step = nice_step(x->hi - x->lo, c->width > 420 ? 6 : 4);
    if (c->x_integer && step < 1)
        step = 1;
    CL_TRY(cl_strbuf_adds(b, "<g class=\"x-axis\">"));
    int n = 0;
    for (double v = ceil(x->lo / step - 1e-9) * step;
         v <= x->hi + step * 1e-9 && n < 60; v += step, n++) {
        char lab[48];
        double px = ax_map(x, v);
        tick_label(lab, sizeof lab, v, step, 0);
        CL_TRY(cl_strbuf_addf(b,
                              "<line class=\"tick\" x1=\"%.1f\" y1=\"%.1f\" "
                              "x2=\"%.1f\" y2=\"%.1f\"/>",
                              px, y0, px, y0 + 5));
        CL_TRY(add_text(b, "tick-label", px, y0 + 18, "middle", lab));
    }
    return cl_strbuf_adds(b, "</g>");
}

static cl_status series_path(cl_strbuf *b, const cl__svg_chart *c,
                             const cl__svg_series *s, const axis *x,
                             const axis *y)
{
    size_t every = s->n > MAX_PATH_POINTS
                       ? (s->n + MAX_PATH_POINTS - 1) / MAX_PATH_POINTS
                       : 1;
    CL_TRY(cl_strbuf_adds(b, "<path"));
    if (s->id)
        CL_TRY(cl_strbuf_addf(b, " id=\"%s\"", s->id));
    CL_TRY(cl_strbuf_addf(
        b,
        " class=\"series\" fill=\"none\" stroke=\"%s\" stroke-width=\"%.2f\" "
        "stroke-linejoin=\"round\" stroke-linecap=\"round\"",
        s->color, s->width > 0 ? s->width : 1.5));
    if (s->opacity > 0 && s->opacity < 1)
        CL_TRY(cl_strbuf_addf(b, " stroke-opacity=\"%.2f\"", s->opacity));
    if (s->dashed)
        CL_TRY(cl_strbuf_adds(b, " stroke-dasharray=\"6 4\""));
    CL_TRY(cl_strbuf_addf(b, " clip-path=\"url(#%s-clip)\" d=\"", c->id));
    int pen = 0;
    for (size_t j = 0; j < s->n; j++) {
        if (j % every != 0 && j + 1 != s->n)
            continue;
        if (!usable(y, s->y[j]) || !isfinite(s->x[j])) {
            pen = 0;
            continue;
        }
        CL_TRY(cl_strbuf_addf(b, "%c%.1f %.1f", pen ? 'L' : 'M',
                              ax_map(x, s->x[j]), ax_map(y, s->y[j])));
        pen = 1;
    }
    CL_TRY(cl_strbuf_adds(b, "\"/>"));
    if (!s->markers) {
        /* A point with no drawn neighbour is a path of one point, which
         * draws nothing (a run of 2 steps logs one): a dot shows it. */
        size_t prev = SIZE_MAX;
        for (size_t j = 0; j < s->n; j++) {
            if (j % every != 0 && j + 1 != s->n)
                continue;
            int ok = usable(y, s->y[j]) && isfinite(s->x[j]);
            size_t nx = j + every < s->n ? j + every : s->n - 1;
            int next_ok = nx != j && usable(y, s->y[nx]) && isfinite(s->x[nx]);
            int prev_ok = prev != SIZE_MAX && usable(y, s->y[prev]) &&
                          isfinite(s->x[prev]);
            prev = j;
            if (!ok || next_ok || prev_ok)
                continue;
            CL_TRY(cl_strbuf_addf(
                b,
                "<circle class=\"lone\" cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" "
                "fill=\"%s\"/>",
                ax_map(x, s->x[j]), ax_map(y, s->y[j]),
                (s->width > 0 ? s->width : 1.5) + 1.5, s->color));
        }
        return CL_OK;
    }
    for (size_t j = 0; j < s->n; j++) {
        if (!usable(y, s->y[j]) || !isfinite(s->x[j]))
            continue;
        char yv[48], xv[48];
        if (c->y_percent)
            snprintf(yv, sizeof yv, "%.2f%%", 100 * s->y[j]);
        else
            cl__fmt_num(yv, sizeof yv, s->y[j], 4);
        cl__fmt_num(xv, sizeof xv, s->x[j], 6);
        CL_TRY(cl_strbuf_addf(
            b,
            "<circle class=\"pt\" cx=\"%.1f\" cy=\"%.1f\" r=\"3.2\" "
            "fill=\"%s\"><title>",
            ax_map(x, s->x[j]), ax_map(y, s->y[j]), s->color));
        CL_TRY(cl__html_esc(b, s->name ? s->name : ""));
        CL_TRY(cl_strbuf_addf(b, " \xe2\x80\x94 %s %s: %s</title></circle>",
                              c->xlabel ? c->xlabel : "x", xv, yv));
    }
    return CL_OK;
}

cl_status cl__svg_line_chart(cl_strbuf *b, const cl__svg_chart *c,
                             const cl__svg_series *s, int ns)
{
    const double x0 = M_LEFT, x1 = c->width - M_RIGHT;
    const double y0 = c->height - M_BOTTOM, y1 = M_TOP;
    CL_TRY(cl_strbuf_addf(b,
                          "<svg id=\"%s\" class=\"chart\" "
                          "xmlns=\"http://www.w3.org/2000/svg\" "
                          "viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" "
                          "role=\"img\" aria-label=\"",
                          c->id, c->width, c->height, c->width, c->height));
    CL_TRY(cl__html_esc(b, c->title));
    CL_TRY(cl_strbuf_addf(b,
                          "\"><defs><clipPath id=\"%s-clip\"><rect x=\"%.1f\" "
                          "y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>"
                          "</clipPath></defs>",
                          c->id, x0, y1 - 4, x1 - x0, y0 - y1 + 8));
    CL_TRY(add_text(b, "chart-title", 4, 20, NULL, c->title));
    CL_TRY(legend(b, c, s, ns));

    axis x = {0, 1, 0, x0, x1}, y = {0, 1, 0, y0, y1};
    double lo, hi;
    data_range(s, ns, 1, 0, &x.lo, &x.hi);
    int have = isfinite(x.lo);
    if (have) {
        if (c->x_integer) {
            x.lo -= 0.4;
            x.hi += 0.4;
        } else if (x.hi == x.lo) {
            x.lo -= 1;
            x.hi += 1;
        } else if (x.lo >= 0 && x.lo <= 0.25 * (x.hi - x.lo)) {
            x.lo = 0; /* steps start at 0: the first points sit near it */
        }
        data_range(s, ns, 0, 0, &lo, &hi);
        have = isfinite(lo);
    }
    if (have) {
        double plo, phi;
        data_range(s, ns, 0, 1, &plo, &phi);
        y.log = c->log_y == 1 ||
                (c->log_y < 0 && lo > 0 && isfinite(plo) && phi > 30 * plo);
        if (c->y_lo < c->y_hi) {
            y.lo = c->y_lo;
            y.hi = c->y_hi;
        } else if (y.log) {
            double span = log10(phi) - log10(plo);
            y.lo = pow(10, log10(plo) - 0.04 * span);
            y.hi = pow(10, log10(phi) + 0.04 * span);
        } else {
            if (hi == lo) {
                double d = lo != 0 ? fabs(lo) * 0.1 : 1;
                lo -= d;
                hi += d;
            }
            double st = nice_step(hi - lo, 5);
            y.lo = floor(lo / st) * st;
            y.hi = ceil(hi / st) * st;
            /* A loss or a rate rarely needs the axis below zero, and an
             * accuracy never above 100%. */
            if (lo >= 0 && y.lo < 0)
                y.lo = 0;
            if (c->y_percent && hi <= 1 && y.hi > 1)
                y.hi = 1;
        }
    }
    CL_TRY(cl_strbuf_addf(b,
                          "<rect class=\"plot-bg\" x=\"%.1f\" y=\"%.1f\" "
                          "width=\"%.1f\" height=\"%.1f\"/>",
                          x0, y1, x1 - x0, y0 - y1));
    if (have) {
        CL_TRY(y_ticks(b, c, &y, x0, x1));
        CL_TRY(x_ticks(b, c, &x, y0));
    }
    CL_TRY(cl_strbuf_addf(b,
                          "<path class=\"axis\" d=\"M%.1f %.1fV%.1fH%.1f\"/>",
                          x0, y1, y0, x1));
    if (c->xlabel)
        CL_TRY(add_text(b, "axis-label", (x0 + x1) / 2, c->height - 8, "middle",
                        c->xlabel));
    if (c->ylabel) {
        CL_TRY(cl_strbuf_addf(b,
                              "<text class=\"axis-label\" "
                              "text-anchor=\"middle\" "
                              "transform=\"translate(14 %.1f) rotate(-90)\">",
                              (y0 + y1) / 2));
        CL_TRY(cl__html_esc(b, c->ylabel));
        if (y.log)
            CL_TRY(cl_strbuf_adds(b, " (log)"));
        CL_TRY(cl_strbuf_adds(b, "</text>"));
    }
    if (!have) {
        CL_TRY(add_text(b, "no-data", (x0 + x1) / 2, (y0 + y1) / 2, "middle",
                        "no data yet"));
    } else {
        for (int i = 0; i < ns; i++)
            CL_TRY(series_path(b, c, &s[i], &x, &y));
    }
    return cl_strbuf_adds(b, "</svg>");
}

/* ---- confusion heatmap ------------------------------------------------ */

/* Matplotlib's "Blues" at 9 stops, interpolated. */
static void blues(double t, char *buf, size_t n)
{
    static const unsigned char st[9][3] = {
        {247, 251, 255}, {222, 235, 247}, {198, 219, 239},
        {158, 202, 225}, {107, 174, 214}, {66, 146, 198},
        {33, 113, 181},  {8, 81, 156},    {8, 48, 107}};
    t = t < 0 ? 0 : t > 1 ? 1 : t;
    double f = t * 8;
    int i = (int)f;
    if (i >= 8)
        i = 7;
    f -= i;
    int rgb[3];
    for (int k = 0; k < 3; k++)
        rgb[k] = (int)lround(st[i][k] + f * (st[i + 1][k] - st[i][k]));
    snprintf(buf, n, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
}

/* Shares are shown through a square root so that the small off-diagonal
 * confusions, the interesting ones, stay visible next to the diagonal. */
static double shade(double share)
{
    return sqrt(share);
}

#define LABEL_MAX 18 /* code points of a class name on an axis */

static double max_label_w(const char *const *names, int k, double px)
{
    double w = 0;
    for (int i = 0; i < k; i++) {
        char lab[96];
        short_label(names[i], lab, sizeof lab, LABEL_MAX);
        double t = text_w(lab, px);
        w = t > w ? t : w;
    }
    return w;
}

cl_status cl__svg_confusion(cl_strbuf *b, const char *id, const int64_t *cm,
                            int k, const char *const *names)
{
    const double cell = k <= 10 ? 40 : k <= 20 ? 26 : k <= 50 ? 11 : 6;
    const int labels = cell >= 11;
    const double fpx = cell >= 26 ? 12 : 10;
    double lw = labels ? max_label_w(names, k, fpx) + 10 : 24;
    if (lw > 150)
        lw = 150;
    const double left = 26 + lw, top = 34, size = cell * k;
    const double bottom = (labels ? (lw - 10) * 0.72 : 20) + 30;
    const double legend_w = 70;
    static const char title[] = "Confusion matrix (row-normalised)";
    /* A matrix of 2 classes is narrower than its title: widen the
     * picture, not clip the title. */
    double W = left + size + legend_w, H = top + size + bottom;
    if (W < text_w(title, 15) + 12) /* 14 px, bold */
        W = text_w(title, 15) + 12;
    CL_TRY(cl_strbuf_addf(b,
                          "<svg id=\"%s\" class=\"heatmap\" "
                          "xmlns=\"http://www.w3.org/2000/svg\" "
                          "viewBox=\"0 0 %.0f %.0f\" width=\"%.0f\" "
                          "height=\"%.0f\" style=\"max-width:%.0fpx\" "
                          "role=\"img\" aria-label=\"confusion matrix\">",
                          id, W, H, W, H, W));
    CL_TRY(cl_strbuf_addf(
        b,
        "<defs><linearGradient id=\"%s-grad\" x1=\"0\" y1=\"1\" x2=\"0\" "
        "y2=\"0\">",
        id));
    for (int i = 0; i <= 10; i++) {
        char col[16];
        blues(shade(i / 10.0), col, sizeof col);
        CL_TRY(cl_strbuf_addf(b, "<stop offset=\"%d%%\" stop-color=\"%s\"/>",
                              i * 10, col));
    }
    CL_TRY(cl_strbuf_adds(b, "</linearGradient></defs>"));
    CL_TRY(add_text(b, "chart-title", 4, 20, NULL, title));
    for (int r = 0; r < k; r++) {
        int64_t row = 0;
        for (int j = 0; j < k; j++)
            row += cm[(size_t)r * k + j];
        for (int j = 0; j < k; j++) {
            int64_t v = cm[(size_t)r * k + j];
            double share = row > 0 ? (double)v / (double)row : NAN;
            char col[16];
            if (row > 0)
                blues(shade(share), col, sizeof col);
            else
                snprintf(col, sizeof col, "#eef0f3");
            CL_TRY(cl_strbuf_addf(
                b,
                "<rect class=\"cm-cell%s\" x=\"%.1f\" y=\"%.1f\" "
                "width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>true ",
                r == j ? " diag" : "", left + j * cell, top + r * cell, cell,
                cell, col));
            CL_TRY(cl__html_esc(b, names[r]));
            CL_TRY(cl_strbuf_adds(b, " \xe2\x86\x92 predicted "));
            CL_TRY(cl__html_esc(b, names[j]));
            CL_TRY(cl_strbuf_addf(b, ": %lld", (long long)v));
            if (row > 0)
                CL_TRY(
                    cl_strbuf_addf(b, " (%.1f%% of the class)", 100 * share));
            CL_TRY(cl_strbuf_adds(b, "</title></rect>"));
            if (cell >= 26 && v > 0) {
                CL_TRY(cl_strbuf_addf(
                    b,
                    "<text class=\"cm-count%s\" x=\"%.1f\" y=\"%.1f\" "
                    "text-anchor=\"middle\">%lld</text>",
                    shade(share) > 0.6 ? " light" : "", left + (j + 0.5) * cell,
                    top + (r + 0.5) * cell + 4, (long long)v));
            }
        }
    }
    if (labels) {
        for (int r = 0; r < k; r++) {
            char lab[96];
            short_label(names[r], lab, sizeof lab, LABEL_MAX);
            CL_TRY(cl_strbuf_addf(b,
                                  "<text class=\"cm-label\" x=\"%.1f\" "
                                  "y=\"%.1f\" text-anchor=\"end\" "
                                  "style=\"font-size:%.0fpx\">",
                                  left - 6, top + (r + 0.5) * cell + 4, fpx));
            CL_TRY(cl__html_esc(b, lab));
            CL_TRY(cl_strbuf_adds(b, "</text>"));
            double cx = left + (r + 0.5) * cell, cy = top + size + 8;
            CL_TRY(cl_strbuf_addf(b,
                                  "<text class=\"cm-label\" "
                                  "text-anchor=\"end\" "
                                  "style=\"font-size:%.0fpx\" "
                                  "transform=\"translate(%.1f %.1f) "
                                  "rotate(-45)\">",
                                  fpx, cx + 3, cy));
            CL_TRY(cl__html_esc(b, lab));
            CL_TRY(cl_strbuf_adds(b, "</text>"));
        }
    }
    CL_TRY(cl_strbuf_addf(b,
                          "<rect class=\"cm-frame\" x=\"%.1f\" y=\"%.1f\" "
                          "width=\"%.1f\" height=\"%.1f\"/>",
                          left, top, size, size));
    CL_TRY(cl_strbuf_addf(b,
                          "<text class=\"axis-label\" text-anchor=\"middle\" "
                          "transform=\"translate(12 %.1f) rotate(-90)\">"
                          "true class</text>",
                          top + size / 2));
    CL_TRY(add_text(b, "axis-label", left + size / 2, H - 8, "middle",
                    "predicted class"));
    /* Colour scale. */
    const double lx = left + size + 22, lh = size < 120 ? size : 160;
    CL_TRY(cl_strbuf_addf(b,
                          "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" "
                          "height=\"%.1f\" fill=\"url(#%s-grad)\" "
                          "class=\"cm-scale\"/>",
                          lx, top, lh, id));
    static const double marks[] = {0, 0.1, 0.5, 1};
    for (int i = 0; i < 4; i++) {
        double yy = top + lh - shade(marks[i]) * lh;
        char lab[16];
        snprintf(lab, sizeof lab, "%.0f%%", 100 * marks[i]);
        CL_TRY(cl_strbuf_addf(b,
                              "<line class=\"tick\" x1=\"%.1f\" y1=\"%.1f\" "
                              "x2=\"%.1f\" y2=\"%.1f\"/>",
                              lx + 12, yy, lx + 16, yy));
        CL_TRY(add_text(b, "tick-label", lx + 18, yy + 4, NULL, lab));
    }
    return cl_strbuf_adds(b, "</svg>");
}

/* ---- per-class accuracy ---------------------------------------------- */

typedef struct class_row {
    int c;
    int64_t n, ok;
    double acc;
} class_row;

static int by_acc(const void *a, const void *b)
{
    const class_row *x = a, *y = b;
    double ax = isnan(x->acc) ? 2 : x->acc, ay = isnan(y->acc) ? 2 : y->acc;
    if (ax != ay)
        return ax < ay ? -1 : 1;
    return x->c - y->c;
}

cl_status cl__svg_class_bars(cl_strbuf *b, const char *id, const int64_t *cm,
                             int k, const char *const *names, int max_rows)
{
    class_row *rows = cl_alloc((size_t)k * sizeof *rows, "class rows");
    if (!rows)
        return CL_ERR_NOMEM;
    int64_t total = 0, correct = 0;
    for (int c = 0; c < k; c++) {
        rows[c].c = c;
        rows[c].n = 0;
        for (int j = 0; j < k; j++)
            rows[c].n += cm[(size_t)c * k + j];
        rows[c].ok = cm[(size_t)c * k + c];
        rows[c].acc = rows[c].n ? (double)rows[c].ok / (double)rows[c].n : NAN;
        total += rows[c].n;
        correct += rows[c].ok;
    }
    int n = k;
    if (k > max_rows) {
        qsort(rows, (size_t)k, sizeof *rows, by_acc);
        n = max_rows;
    }
    const double rh = 22, lw_max = 150;
    double lw = 0;
    for (int i = 0; i < n; i++) {
        char lab[96];
        short_label(names[rows[i].c], lab, sizeof lab, LABEL_MAX);
        double t = text_w(lab, 12);
        lw = t > lw ? t : lw;
    }
    lw = (lw > lw_max ? lw_max : lw) + 12;
    const double W = 500, left = lw, bar = W - left - 118, top = 34;
    const double H = top + n * rh + 30;
    cl_status s = cl_strbuf_addf(
        b,
        "<svg id=\"%s\" class=\"bars\" xmlns=\"http://www.w3.org/2000/svg\" "
        "viewBox=\"0 0 %.0f %.0f\" width=\"%.0f\" height=\"%.0f\" "
        "style=\"max-width:%.0fpx\" role=\"img\" "
        "aria-label=\"per-class accuracy\">",
        id, W, H, W, H, W);
    char title[96];
    if (k > max_rows)
        snprintf(title, sizeof title,
                 "Per-class accuracy: the %d lowest of %d classes", n, k);
    else
        snprintf(title, sizeof title, "Per-class accuracy");
    if (s == CL_OK)
        s = add_text(b, "chart-title", 4, 20, NULL, title);
    for (int i = 0; i < n && s == CL_OK; i++) {
        const class_row *r = &rows[i];
        double y = top + i * rh;
        double a = isnan(r->acc) ? 0 : r->acc;
        const char *col = isnan(r->acc) ? "#9ca3af"
                          : a < 0.5     ? "#dc2626"
                          : a < 0.8     ? "#f59e0b"
                                        : "#16a34a";
        char val[64];
        if (isnan(r->acc))
            snprintf(val, sizeof val, "no samples");
        else
            snprintf(val, sizeof val, "%.1f%%  (%lld/%lld)", 100 * r->acc,
                     (long long)r->ok, (long long)r->n);
        s = cl_strbuf_addf(b,
                           "<text class=\"bar-label\" x=\"%.1f\" y=\"%.1f\" "
                           "text-anchor=\"end\">",
                           left - 8, y + 15);
        char lab[96];
        short_label(names[r->c], lab, sizeof lab, LABEL_MAX);
        if (s == CL_OK)
            s = cl__html_esc(b, lab);
        if (s == CL_OK)
            s = cl_strbuf_addf(
                b,
                "</text><rect class=\"bar-track\" x=\"%.1f\" y=\"%.1f\" "
                "width=\"%.1f\" height=\"14\" rx=\"2\"/>"
                "<rect class=\"class-bar\" x=\"%.1f\" y=\"%.1f\" "
                "width=\"%.1f\" height=\"14\" rx=\"2\" fill=\"%s\"><title>",
                left, y + 4, bar, left, y + 4, bar * a, col);
        if (s == CL_OK)
            s = cl__html_esc(b, names[r->c]);
        if (s == CL_OK)
            s = cl_strbuf_addf(b, ": %s</title></rect>", val);
        if (s == CL_OK)
            s = add_text(b, "bar-value", left + bar + 6, y + 15, NULL, val);
    }
    if (s == CL_OK && total > 0) {
        double acc = (double)correct / (double)total;
        double x = left + bar * acc;
        s = cl_strbuf_addf(b,
                           "<line class=\"bar-mean\" x1=\"%.1f\" y1=\"%.1f\" "
                           "x2=\"%.1f\" y2=\"%.1f\"/>",
                           x, top, x, top + n * rh + 2);
        char lab[48];
        snprintf(lab, sizeof lab, "overall %.1f%%", 100 * acc);
        if (s == CL_OK)
            s = add_text(b, "bar-mean-label", x, top + n * rh + 16, "middle",
                         lab);
    }
    if (s == CL_OK)
        s = cl_strbuf_adds(b, "</svg>");
    cl_free(rows);
    return s;
}
