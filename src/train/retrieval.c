/* Image retrieval: features files, cosine top-k and recall@k. */
#include "train/retrieval.h"

#include <dnnl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "io/json.h"
#include "io/safetensors.h"

/* Index of entry `name` after checking its dtype family and rank; n0 the
 * first dimension it must have (-1: any). */
static cl_status entry(const cl_st_file *f, const char *path, const char *name,
                       int want_float, int rank, int64_t n0, size_t *out)
{
    long i = cl_st_find(f, name);
    if (i < 0)
        return cl_error(CL_ERR_FORMAT,
                        "%s: no '%s' entry (not a features file written by "
                        "classic embed?)",
                        path, name);
    cl_st_dtype t;
    cl_shape s;
    cl_st_info(f, (size_t)i, &t, &s);
    int is_float =
        t == CL_ST_F32 || t == CL_ST_F16 || t == CL_ST_BF16 || t == CL_ST_F64;
    int is_int = t == CL_ST_I64 || t == CL_ST_I32 || t == CL_ST_I16 ||
                 t == CL_ST_I8 || t == CL_ST_U8 || t == CL_ST_U32;
    if ((want_float && !is_float) || (!want_float && !is_int))
        return cl_error(CL_ERR_FORMAT, "%s: '%s' is %s, expected %s", path,
                        name, cl_st_dtype_name(t),
                        want_float ? "floating point" : "integers");
    if (s.ndim != rank || (n0 >= 0 && s.d[0] != n0))
        return cl_error(CL_ERR_SHAPE,
                        "%s: '%s' has %d dimension(s) and %lld rows, "
                        "expected %d dimension(s)%s",
                        path, name, s.ndim, s.ndim ? (long long)s.d[0] : 0LL,
                        rank, n0 >= 0 ? " and one row per feature row" : "");
    *out = (size_t)i;
    return CL_OK;
}

/* The names entry: g->n strings, each ended by a NUL, nothing after. */
static cl_status read_names(cl_gallery *g, const cl_st_file *f,
                            const char *path)
{
    long i = cl_st_find(f, CL_GALLERY_NAMES);
    if (i < 0)
        return CL_OK;
    cl_st_dtype t;
    cl_shape s;
    cl_st_info(f, (size_t)i, &t, &s);
    if (t != CL_ST_U8 || s.ndim != 1)
        return cl_error(CL_ERR_FORMAT,
                        "%s: 'names' must be U8 bytes of one dimension (NUL-"
                        "ended file names)",
                        path);
    size_t nb = 0;
    const void *src = cl_st_data(f, (size_t)i, &nb);
    g->name_buf = cl_alloc(nb + 1, "gallery names");
    g->names = cl_alloc((size_t)g->n * sizeof *g->names, "gallery names");
    if (!g->name_buf || !g->names)
        return CL_ERR_NOMEM;
    memcpy(g->name_buf, src, nb);
    g->name_buf[nb] = '\0';
    int64_t k = 0;
    size_t start = 0;
    for (size_t b = 0; b < nb; b++) {
        if (g->name_buf[b] != '\0')
            continue;
        if (k == g->n)
            break;
        g->names[k++] = g->name_buf + start;
        start = b + 1;
    }
    if (k != g->n || start != nb)
        return cl_error(CL_ERR_FORMAT,
                        "%s: 'names' must hold %lld NUL-ended names, one per "
                        "feature row, and nothing else",
                        path, (long long)g->n);
    return CL_OK;
}

static void meta_copy(const cl_st_file *f, const char *key, char *dst, size_t n)
{
    const char *v = cl_st_metadata(f, key);
    snprintf(dst, n, "%s", v ? v : "");
}

/* Class names from the metadata's JSON array; absent or malformed: none
 * (labels are then printed as numbers). */
static cl_status read_class_names(cl_gallery *g, const cl_st_file *f,
                                  const char *path)
{
    const char *v = cl_st_metadata(f, CL_GALLERY_META_CLASS_NAMES);
    cl_json_doc *doc = NULL;
    if (!v || cl_json_parse(&doc, v, strlen(v), NULL, path) != CL_OK)
        return CL_OK;
    const cl_json *root = cl_json_root(doc);
    cl_status s = CL_OK;
    int n = 0;
    if (root->type == CL_JSON_ARR)
        for (const cl_json *it = root->child; it && n < 1000000; it = it->next)
            n++;
    if (n > 0) {
        g->class_names = calloc((size_t)n, sizeof *g->class_names);
        if (!g->class_names) {
            s = cl_error(CL_ERR_NOMEM, "class names");
            goto done;
        }
        g->num_classes = n;
        int k = 0;
        for (const cl_json *it = root->child; it && k < n; it = it->next, k++)
            if (!(g->class_names[k] =
                      strdup(it->type == CL_JSON_STR ? it->str : ""))) {
                s = cl_error(CL_ERR_NOMEM, "class names");
                goto done;
            }
    }
done:
    cl_json_free(doc);
    return s;
}

cl_status cl_gallery_open(cl_gallery *g, const char *path)
{
    memset(g, 0, sizeof *g);
    cl_st_file *f = NULL;
    size_t fi, li, ii;
    cl_status s = cl_st_open(&f, path);
    if (s != CL_OK)
        return s;
    if ((s = entry(f, path, CL_GALLERY_FEATURES, 1, 2, -1, &fi)) != CL_OK)
        goto fail;
    cl_shape fs;
    cl_st_info(f, fi, NULL, &fs);
    if (fs.d[0] < 1 || fs.d[1] < 1 || fs.d[1] > (1 << 20)) {
        s = cl_error(CL_ERR_SHAPE,
                     "%s: 'features' is (%lld, %lld): a gallery needs at "
                     "least one row of 1 to 2^20 features",
                     path, (long long)fs.d[0], (long long)fs.d[1]);
        goto fail;
    }
    g->n = fs.d[0];
    g->dim = (int)fs.d[1];
    if ((s = entry(f, path, CL_GALLERY_LABELS, 0, 1, g->n, &li)) != CL_OK ||
        (s = entry(f, path, CL_GALLERY_INDICES, 0, 1, g->n, &ii)) != CL_OK)
        goto fail;
    g->feat = cl_alloc((size_t)g->n * g->dim * sizeof(float), "gallery");
    g->labels = cl_alloc((size_t)g->n * sizeof(int64_t), "gallery labels");
    g->indices = cl_alloc((size_t)g->n * sizeof(int64_t), "gallery indices");
    if (!g->feat || !g->labels || !g->indices) {
        s = CL_ERR_NOMEM;
        goto fail;
    }
    if ((s = cl_st_read_f32(f, fi, g->feat, (size_t)g->n * g->dim)) != CL_OK ||
        (s = cl_st_read_i64(f, li, g->labels, (size_t)g->n)) != CL_OK ||
        (s = cl_st_read_i64(f, ii, g->indices, (size_t)g->n)) != CL_OK ||
        (s = read_names(g, f, path)) != CL_OK ||
        (s = read_class_names(g, f, path)) != CL_OK)
        goto fail;
    char what[1100];
    snprintf(what, sizeof what, "%s: 'features'", path);
    if ((s = cl_retrieval_normalize(g->feat, g->n, g->dim, what)) != CL_OK)
        goto fail;
    meta_copy(f, CL_GALLERY_META_DATASET, g->dataset, sizeof g->dataset);
    meta_copy(f, CL_GALLERY_META_SPLIT, g->split, sizeof g->split);
    meta_copy(f, CL_GALLERY_META_CHECKPOINT, g->checkpoint,
              sizeof g->checkpoint);
    meta_copy(f, CL_GALLERY_META_PRECISION, g->precision, sizeof g->precision);
    cl_st_close(f);
    return CL_OK;
fail:
    cl_st_close(f);
    cl_gallery_close(g);
    return s;
}

void cl_gallery_close(cl_gallery *g)
{
    cl_free(g->feat);
    cl_free(g->labels);
    cl_free(g->indices);
    cl_free(g->name_buf);
    cl_free(g->names);
    for (int k = 0; k < g->num_classes; k++)
        free(g->class_names[k]);
    free(g->class_names);
    memset(g, 0, sizeof *g);
}

const char *cl_gallery_row_name(const cl_gallery *g, int64_t i, char *buf,
                                size_t n)
{
    if (g->names)
        return g->names[i];
    snprintf(buf, n, "%s%s%s%s#%lld", g->dataset, g->dataset[0] ? " " : "",
             g->split, g->split[0] ? " " : "", (long long)g->indices[i]);
    return buf;
}

const char *cl_gallery_class_name(const cl_gallery *g, int64_t label)
{
    return label >= 0 && label < g->num_classes ? g->class_names[label] : "";
}

cl_status cl_retrieval_normalize(float *x, int64_t n, int dim, const char *what)
{
    for (int64_t i = 0; i < n; i++) {
        float *r = x + (size_t)i * dim;
        double ss = 0;
        for (int j = 0; j < dim; j++) {
            if (!isfinite(r[j]))
                return cl_error(CL_ERR_NUMERIC,
                                "%s: row %lld holds a NaN or an infinity", what,
                                (long long)i);
            ss += (double)r[j] * r[j];
        }
        if (ss > 0) {
            float inv = (float)(1.0 / sqrt(ss));
            for (int j = 0; j < dim; j++)
                r[j] *= inv;
        }
    }
    return CL_OK;
}

/* Offers gallery row j with similarity v to one query's sorted list of
 * the k best (ids, sims), m of them filled so far. */
static void offer(int64_t *ids, float *sims, int *m, int k, int64_t j, float v)
{
    if (*m == k && !(v > sims[k - 1]))
        return; /* ties keep the lower row, which came first */
    int p = *m < k ? (*m)++ : k - 1;
    while (p > 0 && v > sims[p - 1]) {
        ids[p] = ids[p - 1];
        sims[p] = sims[p - 1];
        p--;
    }
    ids[p] = j;
    sims[p] = v;
}

static cl_status check_k(const cl_gallery *g, int k)
{
    if (k < 1 || k > g->n)
        return cl_error(CL_ERR_ARG,
                        "top %d asked of a gallery of %lld rows (1 to %lld)", k,
                        (long long)g->n, (long long)g->n);
    return CL_OK;
}

cl_status cl_retrieval_topk_ref(const cl_gallery *g, const float *q, int64_t nq,
                                int k, int64_t *idx, float *sim)
{
    CL_TRY(check_k(g, k));
    for (int64_t i = 0; i < nq; i++) {
        int m = 0;
        for (int64_t j = 0; j < g->n; j++) {
            const float *a = q + (size_t)i * g->dim;
            const float *b = g->feat + (size_t)j * g->dim;
            double d = 0;
            for (int t = 0; t < g->dim; t++)
                d += (double)a[t] * b[t];
            offer(idx + (size_t)i * k, sim + (size_t)i * k, &m, k, j, (float)d);
        }
    }
    return CL_OK;
}

/* Queries and gallery rows per sgemm: a 256 x 4096 block of similarities
 * (4 MiB) stays in cache while the top-k lists take it in. */
#define QB 256
#define GB 4096

cl_status cl_retrieval_topk(const cl_gallery *g, const float *q, int64_t nq,
                            int k, int64_t *idx, float *sim)
{
    CL_TRY(check_k(g, k));
    float *block = cl_alloc((size_t)QB * GB * sizeof(float), "similarities");
    int *m = cl_alloc((size_t)QB * sizeof(int), "top-k counts");
    cl_status s = CL_OK;
    if (!block || !m) {
        s = CL_ERR_NOMEM;
        goto done;
    }
    for (int64_t q0 = 0; q0 < nq; q0 += QB) {
        int64_t qn = nq - q0 < QB ? nq - q0 : QB;
        memset(m, 0, (size_t)QB * sizeof(int));
        for (int64_t g0 = 0; g0 < g->n; g0 += GB) {
            int64_t gn = g->n - g0 < GB ? g->n - g0 : GB;
            /* block: (qn, gn) = q[q0:] (qn, dim) x gallery[g0:]^T */
            if (dnnl_sgemm('N', 'T', qn, gn, g->dim, 1.0f,
                           q + (size_t)q0 * g->dim, g->dim,
                           g->feat + (size_t)g0 * g->dim, g->dim, 0.0f, block,
                           gn) != dnnl_success) {
                s = cl_error(CL_ERR_BACKEND, "retrieval: oneDNN sgemm failed");
                goto done;
            }
            for (int64_t i = 0; i < qn; i++)
                for (int64_t j = 0; j < gn; j++)
                    offer(idx + (size_t)(q0 + i) * k,
                          sim + (size_t)(q0 + i) * k, &m[i], k, g0 + j,
                          block[(size_t)i * gn + j]);
        }
    }
done:
    cl_free(block);
    cl_free(m);
    return s;
}

double cl_retrieval_recall(const cl_gallery *g, const int64_t *ql,
                           const int64_t *idx, int64_t nq, int kmax, int k)
{
    if (nq < 1)
        return 0;
    int64_t hits = 0;
    for (int64_t i = 0; i < nq; i++)
        for (int t = 0; t < k && t < kmax; t++)
            if (g->labels[idx[(size_t)i * kmax + t]] == ql[i]) {
                hits++;
                break;
            }
    return (double)hits / (double)nq;
}
