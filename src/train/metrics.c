/* Top-1 / top-k / loss / confusion accumulation, text and CSV reports, and
 * the bias-corrected EMA used by loss monitors. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "train/metrics.h"

enum { CNT_SAMPLES = 0, CNT_TOP1 = 1, CNT_TOPK = 2, CNT_HEADER = 3 };

cl_status cl_metrics_init(cl_metrics *m, int num_classes)
{
    memset(m, 0, sizeof *m);
    if (num_classes < 1)
        return cl_error(CL_ERR_ARG,
                        "metrics: expected at least 1 class, found %d",
                        num_classes);
    if (num_classes > CL_METRICS_MAX_CLASSES)
        return cl_error(CL_ERR_LIMIT,
                        "metrics: %d classes exceed the limit of %d for a "
                        "confusion matrix",
                        num_classes, CL_METRICS_MAX_CLASSES);
    size_t kk = (size_t)num_classes * (size_t)num_classes, bytes;
    CL_TRY(cl_mul_size(CNT_HEADER + kk, sizeof(int64_t), &bytes,
                       "metrics counts"));
    m->counts = cl_alloc_zero(bytes, "metrics counts");
    if (!m->counts)
        return CL_ERR_NOMEM;
    m->num_classes = num_classes;
    m->k = cl_metrics_topk_k(num_classes);
    m->n_counts = CNT_HEADER + kk;
    m->confusion = m->counts + CNT_HEADER;
    m->loss_sum = 0.0;
    return CL_OK;
}

void cl_metrics_free(cl_metrics *m)
{
    if (!m)
        return;
    cl_free(m->counts);
    memset(m, 0, sizeof *m);
}

void cl_metrics_reset(cl_metrics *m)
{
    if (m->counts)
        memset(m->counts, 0, m->n_counts * sizeof *m->counts);
    m->loss_sum = 0.0;
}

/* Does (a, ia) rank above (b, ib)?  Larger first, NaN last, ties to the
 * lower index: a strict total order, so arg-max and rank agree. */
static int ranks_above(float a, int ia, float b, int ib)
{
    int na = isnan(a), nb = isnan(b);
    if (na || nb)
        return na && nb ? ia < ib : nb;
    if (a != b)
        return a > b;
    return ia < ib;
}

cl_status cl_metrics_add(cl_metrics *m, const float *logits,
                         const int32_t *labels, int n, double loss_sum)
{
    const int K = m->num_classes;
    if (n < 0)
        return cl_error(CL_ERR_ARG, "metrics: negative sample count %d", n);
    for (int s = 0; s < n; s++)
        if (labels[s] < 0 || labels[s] >= K)
            return cl_error(CL_ERR_ARG,
                            "metrics: label %d of sample %d is outside "
                            "0..%d",
                            (int)labels[s], s, K - 1);
    for (int s = 0; s < n; s++) {
        const float *l = logits + (size_t)s * (size_t)K; /* l: (K) */
        const int t = labels[s];
        int pred = 0, rank = 0;
        for (int j = 1; j < K; j++)
            if (ranks_above(l[j], j, l[pred], pred))
                pred = j;
        for (int j = 0; j < K && rank < m->k; j++)
            if (j != t && ranks_above(l[j], j, l[t], t))
                rank++;
        m->counts[CNT_SAMPLES]++;
        m->counts[CNT_TOP1] += pred == t;
        m->counts[CNT_TOPK] += rank < m->k;
        m->confusion[(size_t)t * (size_t)K + (size_t)pred]++;
    }
    m->loss_sum += loss_sum;
    return CL_OK;
}

cl_status cl_metrics_merge(cl_metrics *a, const cl_metrics *b)
{
    if (a->num_classes != b->num_classes)
        return cl_error(CL_ERR_SHAPE, "metrics merge: %d classes vs %d",
                        a->num_classes, b->num_classes);
    for (size_t i = 0; i < a->n_counts; i++)
        a->counts[i] += b->counts[i];
    a->loss_sum += b->loss_sum;
    return CL_OK;
}

int64_t cl_metrics_count(const cl_metrics *m)
{
    return m->counts ? m->counts[CNT_SAMPLES] : 0;
}

static double ratio(int64_t num, int64_t den)
{
    return den > 0 ? (double)num / (double)den : NAN;
}

double cl_metrics_top1(const cl_metrics *m)
{
    return ratio(m->counts[CNT_TOP1], m->counts[CNT_SAMPLES]);
}

double cl_metrics_topk(const cl_metrics *m)
{
    return ratio(m->counts[CNT_TOPK], m->counts[CNT_SAMPLES]);
}

double cl_metrics_loss(const cl_metrics *m)
{
    int64_t n = m->counts[CNT_SAMPLES];
    return n > 0 ? m->loss_sum / (double)n : NAN;
}

static int64_t row_sum(const cl_metrics *m, int c)
{
    const int64_t *row = m->confusion + (size_t)c * (size_t)m->num_classes;
    int64_t s = 0;
    for (int j = 0; j < m->num_classes; j++)
        s += row[j];
    return s;
}

static int64_t diag(const cl_metrics *m, int c)
{
    return m->confusion[(size_t)c * (size_t)m->num_classes + (size_t)c];
}

double cl_metrics_class_acc(const cl_metrics *m, int c)
{
    if (c < 0 || c >= m->num_classes)
        return NAN;
    return ratio(diag(m, c), row_sum(m, c));
}

double cl_metrics_mean_class_acc(const cl_metrics *m)
{
    double sum = 0.0;
    int n = 0;
    for (int c = 0; c < m->num_classes; c++) {
        int64_t r = row_sum(m, c);
        if (r > 0) {
            sum += (double)diag(m, c) / (double)r;
            n++;
        }
    }
    return n > 0 ? sum / n : NAN;
}

/* ---- reports ----------------------------------------------------------- */

static const char *class_name(const char *const *names, int c, char *buf,
                              size_t len)
{
    if (names && names[c])
        return names[c];
    snprintf(buf, len, "%d", c);
    return buf;
}

static void print_row(const cl_metrics *m, FILE *out, const char *const *names,
                      int c)
{
    char buf[16];
    int64_t r = row_sum(m, c), d = diag(m, c);
    fprintf(out, "  %-24.24s %10lld %10lld ",
            class_name(names, c, buf, sizeof buf), (long long)r, (long long)d);
    if (r > 0)
        fprintf(out, "%7.2f%%\n", 100.0 * (double)d / (double)r);
    else
        fprintf(out, "%8s\n", "-");
}

int cl_metrics_topk_k(int num_classes)
{
    return num_classes < 5 ? num_classes : 5;
}

const char *cl_metrics_fmt_loss(double loss, char *buf, size_t n)
{
    snprintf(buf, n, fabs(loss) < 1e5 || !isfinite(loss) ? "%.4f" : "%.4g",
             loss);
    return buf;
}

cl_status cl_metrics_print(const cl_metrics *m, FILE *out,
                           const char *const *class_names)
{
    const int K = m->num_classes;
    int64_t n = cl_metrics_count(m);
    char ls[32];
    fprintf(out,
            "%lld samples, loss %s, top-1 %.2f%% (%lld), top-%d %.2f%% "
            "(%lld), mean class accuracy %.2f%%\n",
            (long long)n,
            cl_metrics_fmt_loss(cl_metrics_loss(m), ls, sizeof ls),
            100.0 * cl_metrics_top1(m), (long long)m->counts[CNT_TOP1], m->k,
            100.0 * cl_metrics_topk(m), (long long)m->counts[CNT_TOPK],
            100.0 * cl_metrics_mean_class_acc(m));
    const int all = K <= 100;
    if (all)
        fprintf(out, "  %-24s %10s %10s %8s\n", "class", "count", "correct",
                "acc");
    else
        fprintf(out, "  %-24s %10s %10s %8s   (10 lowest of %d classes)\n",
                "class", "count", "correct", "acc", K);
    if (all) {
        for (int c = 0; c < K; c++)
            print_row(m, out, class_names, c);
    } else {
        /* Ten passes of selection: the lowest accuracy not yet printed,
         * ties to the lower index; classes without samples are skipped. */
        double last = -1.0;
        int last_c = -1;
        for (int r = 0; r < 10; r++) {
            int best = -1;
            double best_acc = 2.0;
            for (int c = 0; c < K; c++) {
                double a = cl_metrics_class_acc(m, c);
                if (isnan(a))
                    continue;
                int after = a > last || (a == last && c > last_c);
                if (after && a < best_acc) {
                    best = c;
                    best_acc = a;
                }
            }
            if (best < 0)
                break;
            print_row(m, out, class_names, best);
            last = best_acc;
            last_c = best;
        }
    }
    if (ferror(out))
        return cl_error(CL_ERR_IO, "metrics report: write failed");
    return CL_OK;
}

/* Writes s as one CSV field, quoted when it holds a comma, quote or line
 * break (RFC 4180). */
static void csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

cl_status cl_metrics_write_csv(const cl_metrics *m, const char *path,
                               const char *const *class_names)
{
    const int K = m->num_classes;
    cl_status st = CL_OK;
    size_t len = strlen(path);
    char *tmp = cl_alloc(len + 5, "metrics csv path");
    FILE *f = NULL;
    char buf[16];
    int rc;
    if (!tmp)
        return CL_ERR_NOMEM;
    memcpy(tmp, path, len);
    memcpy(tmp + len, ".tmp", 5);
    f = fopen(tmp, "w");
    if (!f) {
        st = cl_error(CL_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        goto fail;
    }
    fputs("true\\pred", f);
    for (int c = 0; c < K; c++) {
        fputc(',', f);
        csv_field(f, class_name(class_names, c, buf, sizeof buf));
    }
    fputc('\n', f);
    for (int t = 0; t < K; t++) {
        csv_field(f, class_name(class_names, t, buf, sizeof buf));
        const int64_t *row = m->confusion + (size_t)t * (size_t)K;
        for (int c = 0; c < K; c++)
            fprintf(f, ",%lld", (long long)row[c]);
        fputc('\n', f);
    }
    if (ferror(f)) {
        st = cl_error(CL_ERR_IO, "%s: write failed", tmp);
        goto fail;
    }
    rc = fclose(f);
    f = NULL;
    if (rc != 0) {
        st = cl_error(CL_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        st = cl_error(CL_ERR_IO, "%s: cannot rename into place: %s", path,
                      strerror(errno));
        goto fail;
    }
    cl_free(tmp);
    return CL_OK;
fail:
    if (f)
        fclose(f);
    remove(tmp);
    cl_free(tmp);
    return st;
}

/* ---- smoothed loss ----------------------------------------------------- */

void cl_ema_init(cl_ema *e, double beta)
{
    memset(e, 0, sizeof *e);
    e->beta = beta >= 0.0 && beta < 1.0 ? beta : 0.0;
    e->beta_pow = 1.0;
}

double cl_ema_get(const cl_ema *e)
{
    if (e->n == 0)
        return NAN;
    return e->value / (1.0 - e->beta_pow);
}

double cl_ema_add(cl_ema *e, double x)
{
    if (!isfinite(x)) {
        e->n_skipped++;
        return cl_ema_get(e);
    }
    e->value = e->beta * e->value + (1.0 - e->beta) * x;
    e->beta_pow *= e->beta;
    e->n++;
    return cl_ema_get(e);
}
