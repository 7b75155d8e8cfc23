/* A validation pass's metrics and most confident mistakes, kept while the
 * pass runs, merged over ranks, and saved beside the checkpoint for the
 * report. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "io/safetensors.h"
#include "io/strbuf.h"
#include "train/val_record.h"

cl_status cl_val_misses_init(cl_val_misses *m, const cl_dataset *ds, int cap)
{
    memset(m, 0, sizeof *m);
    m->ds = ds;
    m->cap = cap < 0 ? 0 : cap > CL_VAL_MISS_MAX ? CL_VAL_MISS_MAX : cap;
    m->top = cl_alloc_zero((size_t)(m->cap ? m->cap : 1) * sizeof *m->top,
                           "misclassified samples");
    return m->top ? CL_OK : CL_ERR_NOMEM;
}

void cl_val_misses_free(cl_val_misses *m)
{
    cl_free(m->top);
    memset(m, 0, sizeof *m);
}

void cl_val_misses_reset(cl_val_misses *m)
{
    m->n = 0;
}

/* Puts x in the sorted list if it is among the cap most confident. */
static void keep(cl_val_misses *m, const cl_val_miss *x)
{
    if (m->cap == 0 || (m->n == m->cap && x->conf <= m->top[m->n - 1].conf))
        return;
    int at = m->n < m->cap ? m->n++ : m->n - 1;
    while (at > 0 && m->top[at - 1].conf < x->conf) {
        m->top[at] = m->top[at - 1];
        at--;
    }
    m->top[at] = *x;
}

void cl_val_misses_add(void *ctx, int64_t index, const float *row, int dim,
                       const float *logits, int k)
{
    (void)row;
    (void)dim;
    cl_val_misses *m = ctx;
    if (index < 0 || index >= cl_dataset_count(m->ds) || m->cap == 0)
        return;
    int truth = cl_dataset_label(m->ds, index);
    int pred = 0;
    for (int j = 1; j < k; j++)
        if (logits[j] > logits[pred])
            pred = j;
    if (pred == truth || truth < 0 || truth >= k || !isfinite(logits[pred]))
        return;
    double se = 0;
    for (int j = 0; j < k; j++)
        se += exp((double)logits[j] - logits[pred]);
    cl_val_miss x = {index, truth, pred, 1 / se,
                     exp((double)logits[truth] - logits[pred]) / se};
    keep(m, &x);
}

/* Five doubles per miss; a rank's row of the exchange holds cap of them,
 * and its n as a sixth value in front. */
enum { MISS_FIELDS = 5 };

cl_status cl_val_misses_gather(cl_val_misses *m, cl_dist *d)
{
    if (!d || d->size <= 1 || m->cap == 0)
        return CL_OK;
    /* A sum in which every rank fills only its own row is a gather. */
    size_t row = 1 + (size_t)m->cap * MISS_FIELDS;
    double *all = cl_alloc_zero((size_t)d->size * row * sizeof(double),
                                "misclassified samples of all ranks");
    if (!all)
        return CL_ERR_NOMEM;
    double *mine = all + (size_t)d->rank * row;
    mine[0] = m->n;
    for (int i = 0; i < m->n; i++) {
        double *v = mine + 1 + (size_t)i * MISS_FIELDS;
        v[0] = (double)m->top[i].index;
        v[1] = m->top[i].truth;
        v[2] = m->top[i].pred;
        v[3] = m->top[i].conf;
        v[4] = m->top[i].p_true;
    }
    cl_status s = cl_dist_allreduce_sum_f64(d, all, (size_t)d->size * row);
    if (s == CL_OK) {
        m->n = 0;
        for (int r = 0; r < d->size; r++) {
            const double *v = all + (size_t)r * row;
            int n = (int)v[0];
            for (int i = 0; i < n && i < m->cap; i++) {
                const double *f = v + 1 + (size_t)i * MISS_FIELDS;
                cl_val_miss x = {(int64_t)f[0], (int)f[1], (int)f[2], f[3],
                                 f[4]};
                keep(m, &x);
            }
        }
    }
    cl_free(all);
    return s;
}

void cl_val_record_path(const char *ckpt, char *out, size_t n)
{
    size_t l = strlen(ckpt), ext = strlen(".safetensors");
    if (l >= ext && strcmp(ckpt + l - ext, ".safetensors") == 0)
        l -= ext;
    snprintf(out, n, "%.*s.val.safetensors", (int)l, ckpt);
}

cl_status cl_val_record_save(const char *path, const cl_metrics *met,
                             const cl_val_misses *m,
                             const cl_val_record_info *info,
                             const char *const *class_names)
{
    cl_st_writer *w = NULL;
    cl_strbuf names;
    cl_strbuf_init(&names);
    int n = m ? m->n : 0;
    int64_t *mi =
        cl_alloc_zero((size_t)(n ? n : 1) * 3 * sizeof(int64_t), "misses");
    double *mf =
        cl_alloc_zero((size_t)(n ? n : 1) * 2 * sizeof(double), "misses");
    char v[5][48];
    cl_status s = mi && mf ? CL_OK : CL_ERR_NOMEM;
    for (int i = 0; s == CL_OK && i < n; i++) {
        mi[3 * i] = m->top[i].index;
        mi[3 * i + 1] = m->top[i].truth;
        mi[3 * i + 2] = m->top[i].pred;
        mf[2 * i] = m->top[i].conf;
        mf[2 * i + 1] = m->top[i].p_true;
    }
    for (int k = 0; s == CL_OK && class_names && k < met->num_classes; k++)
        s = cl_strbuf_add(&names, class_names[k], strlen(class_names[k]) + 1);
    int64_t dc[1] = {(int64_t)met->n_counts}, dm[2] = {n, 3}, df[2] = {n, 2};
    int64_t dn[1] = {(int64_t)names.len};
    snprintf(v[0], sizeof v[0], "%lld", (long long)info->step);
    snprintf(v[1], sizeof v[1], "%lld", (long long)info->epoch);
    snprintf(v[2], sizeof v[2], "%d", met->num_classes);
    snprintf(v[3], sizeof v[3], "%.17g", met->loss_sum);
    snprintf(v[4], sizeof v[4], "%d", info->hflip);
    if (s == CL_OK && (s = cl_st_writer_new(&w)) == CL_OK &&
        (s = cl_st_writer_add(w, "counts", CL_ST_I64, cl_shape_make(1, dc),
                              met->counts)) == CL_OK &&
        (s = cl_st_writer_add(w, "miss_ids", CL_ST_I64, cl_shape_make(2, dm),
                              mi)) == CL_OK &&
        (s = cl_st_writer_add(w, "miss_probs", CL_ST_F64, cl_shape_make(2, df),
                              mf)) == CL_OK &&
        (!names.len ||
         (s = cl_st_writer_add(w, "class_names", CL_ST_U8, cl_shape_make(1, dn),
                               cl_strbuf_str(&names))) == CL_OK) &&
        (s = cl_st_writer_meta(w, "step", v[0])) == CL_OK &&
        (s = cl_st_writer_meta(w, "epoch", v[1])) == CL_OK &&
        (s = cl_st_writer_meta(w, "num_classes", v[2])) == CL_OK &&
        (s = cl_st_writer_meta(w, "loss_sum", v[3])) == CL_OK &&
        (s = cl_st_writer_meta(w, "hflip", v[4])) == CL_OK &&
        (s = cl_st_writer_meta(w, "split", info->split)) == CL_OK &&
        (s = cl_st_writer_meta(w, "dataset", info->dataset)) == CL_OK &&
        (s = cl_st_writer_meta(w, "precision", info->precision)) == CL_OK)
        s = cl_st_writer_save(w, path);
    cl_st_writer_free(w);
    cl_strbuf_free(&names);
    cl_free(mi);
    cl_free(mf);
    return s;
}

/* Metadata key as an integer in [lo, hi]. */
static cl_status meta_i64(const cl_st_file *f, const char *path,
                          const char *key, int64_t lo, int64_t hi, int64_t *out)
{
    const char *v = cl_st_metadata(f, key);
    char *end = NULL;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || end == v || *end || x < lo || x > hi)
        return cl_error(CL_ERR_FORMAT,
                        "%s: metadata '%s' is %s%s%s, expected an integer in "
                        "[%lld, %lld]",
                        path, key, v ? "'" : "missing", v ? v : "",
                        v ? "'" : "", (long long)lo, (long long)hi);
    *out = x;
    return CL_OK;
}

/* The tensor called name: its data, checked to be dtype with n elements. */
static cl_status tensor(const cl_st_file *f, const char *path, const char *name,
                        cl_st_dtype dtype, int64_t n, const void **data)
{
    long i = cl_st_find(f, name);
    cl_st_dtype dt;
    cl_shape sh;
    if (i < 0)
        return cl_error(CL_ERR_FORMAT, "%s: no tensor '%s'", path, name);
    cl_st_info(f, (size_t)i, &dt, &sh);
    if (dt != dtype || cl_shape_numel(&sh) != n)
        return cl_error(CL_ERR_FORMAT,
                        "%s: tensor '%s' has %lld elements of another type "
                        "than the %lld expected",
                        path, name, (long long)cl_shape_numel(&sh),
                        (long long)n);
    size_t nb = 0;
    *data = cl_st_data(f, (size_t)i, &nb);
    return CL_OK;
}

void cl_val_record_names_free(char **names, int k)
{
    if (!names)
        return;
    for (int i = 0; i < k; i++)
        cl_free(names[i]);
    cl_free(names);
}

/* k names from the NUL-ended strings of the U8 tensor class_names; "" for
 * those it lacks. */
static cl_status read_names(const cl_st_file *f, int k, char ***out)
{
    char **names = cl_alloc_zero((size_t)k * sizeof *names, "class names");
    if (!names)
        return CL_ERR_NOMEM;
    long i = cl_st_find(f, "class_names");
    size_t len = 0, at = 0;
    const char *p = i >= 0 ? cl_st_data(f, (size_t)i, &len) : NULL;
    for (int c = 0; c < k; c++) {
        const char *end = p && at < len ? memchr(p + at, 0, len - at) : NULL;
        size_t l = end ? (size_t)(end - (p + at)) : 0;
        names[c] = cl_alloc(l + 1, "class name");
        if (!names[c]) {
            cl_val_record_names_free(names, k);
            return CL_ERR_NOMEM;
        }
        memcpy(names[c], end ? p + at : "", l);
        names[c][l] = '\0';
        at = end ? at + l + 1 : len;
    }
    *out = names;
    return CL_OK;
}

cl_status cl_val_record_load(const char *path, cl_metrics *met,
                             cl_val_miss **miss, int *n_miss, char ***names,
                             cl_val_record_info *info)
{
    cl_st_file *f = NULL;
    memset(met, 0, sizeof *met);
    memset(info, 0, sizeof *info);
    *miss = NULL;
    *n_miss = 0;
    *names = NULL;
    CL_TRY(cl_st_open(&f, path));
    int64_t k = 0, hflip = 0, nm = 0;
    const void *counts = NULL, *ids = NULL, *probs = NULL;
    const char *loss = cl_st_metadata(f, "loss_sum");
    const char *split = cl_st_metadata(f, "split");
    const char *dataset = cl_st_metadata(f, "dataset");
    long im = cl_st_find(f, "miss_ids");
    cl_status s;
    if ((s = meta_i64(f, path, "num_classes", 1, CL_METRICS_MAX_CLASSES, &k)) !=
            CL_OK ||
        (s = meta_i64(f, path, "step", 0, INT64_MAX, &info->step)) != CL_OK ||
        (s = meta_i64(f, path, "epoch", 0, INT64_MAX, &info->epoch)) != CL_OK ||
        (s = meta_i64(f, path, "hflip", 0, 1, &hflip)) != CL_OK)
        goto done;
    if (!loss || !split || !dataset || im < 0) {
        s = cl_error(CL_ERR_FORMAT,
                     "%s: lacks loss_sum, split, dataset or miss_ids: not a "
                     "validation record",
                     path);
        goto done;
    }
    cl_shape ms;
    cl_st_info(f, (size_t)im, NULL, &ms);
    nm = ms.ndim == 2 ? ms.d[0] : -1;
    if (nm < 0 || nm > CL_VAL_MISS_MAX) {
        s = cl_error(CL_ERR_FORMAT, "%s: miss_ids is not (n, 3) with n <= %d",
                     path, CL_VAL_MISS_MAX);
        goto done;
    }
    if ((s = cl_metrics_init(met, (int)k)) != CL_OK ||
        (s = tensor(f, path, "counts", CL_ST_I64, (int64_t)met->n_counts,
                    &counts)) != CL_OK ||
        (s = tensor(f, path, "miss_ids", CL_ST_I64, nm * 3, &ids)) != CL_OK ||
        (s = tensor(f, path, "miss_probs", CL_ST_F64, nm * 2, &probs)) != CL_OK)
        goto done;
    memcpy(met->counts, counts, met->n_counts * sizeof(int64_t));
    met->loss_sum = strtod(loss, NULL);
    /* samples >= correct-k >= correct >= 0, and the confusion matrix sums
     * to the samples: a record that says otherwise is not shown. */
    int64_t sum = 0, *c = met->counts;
    for (size_t i = 3; i < met->n_counts; i++)
        sum += c[i] >= 0 ? c[i] : INT64_MIN / 4;
    if (c[0] < 0 || c[1] < 0 || c[2] < c[1] || c[0] < c[2] || sum != c[0] ||
        !isfinite(met->loss_sum)) {
        s = cl_error(CL_ERR_FORMAT,
                     "%s: counts are inconsistent (samples %lld, top-1 "
                     "%lld, top-k %lld, confusion sum %lld)",
                     path, (long long)c[0], (long long)c[1], (long long)c[2],
                     (long long)sum);
        goto done;
    }
    *miss = cl_alloc_zero((size_t)(nm ? nm : 1) * sizeof **miss, "misses");
    if (!*miss) {
        s = CL_ERR_NOMEM;
        goto done;
    }
    const int64_t *id = ids;
    const double *p = probs;
    for (int64_t i = 0; i < nm; i++) {
        cl_val_miss *x = &(*miss)[i];
        x->index = id[3 * i];
        x->truth = (int)id[3 * i + 1];
        x->pred = (int)id[3 * i + 2];
        x->conf = p[2 * i];
        x->p_true = p[2 * i + 1];
        if (x->index < 0 || id[3 * i + 1] < 0 || id[3 * i + 1] >= k ||
            id[3 * i + 2] < 0 || id[3 * i + 2] >= k) {
            s = cl_error(CL_ERR_FORMAT,
                         "%s: miss %lld names sample %lld, class %lld "
                         "predicted %lld: outside the record's %lld classes",
                         path, (long long)i, (long long)x->index,
                         (long long)id[3 * i + 1], (long long)id[3 * i + 2],
                         (long long)k);
            goto done;
        }
    }
    if ((s = read_names(f, (int)k, names)) != CL_OK)
        goto done;
    *n_miss = (int)nm;
    info->hflip = (int)hflip;
    snprintf(info->split, sizeof info->split, "%s", split);
    snprintf(info->dataset, sizeof info->dataset, "%s", dataset);
    /* Absent in records of older versions: the precision is not known. */
    const char *prec = cl_st_metadata(f, "precision");
    snprintf(info->precision, sizeof info->precision, "%s", prec ? prec : "");
done:
    if (s != CL_OK) {
        cl_metrics_free(met);
        cl_free(*miss);
        *miss = NULL;
    }
    cl_st_close(f);
    return s;
}
