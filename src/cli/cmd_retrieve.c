/* `classic retrieve`: the nearest gallery images of query images, and
 * recall@k of a features file of queries against a gallery. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/error.h"
#include "core/mem.h"
#include "io/strbuf.h"
#include "train/model.h"
#include "train/retrieval.h"

static void usage(void)
{
    printf("usage: classic retrieve --gallery FEATURES [--top K] [--json]\n"
           "                        [--checkpoint FILE] [--arch ARCH]\n"
           "                        [--precision f32|bf16|int8]\n"
           "                        IMAGE...\n"
           "       classic retrieve --gallery FEATURES --queries FEATURES\n"
           "                        [--recall 1,5] [--top K] [--json]\n\n"
           "FEATURES are files written by `classic embed`.  For each query "
           "the K\n(default 5) gallery rows of largest cosine similarity of "
           "their features,\nwith the similarity, the file name (or dataset, "
           "split and index for\nIDX and CIFAR data), the label and its class "
           "name.\n\n"
           "IMAGE queries (JPEG or PNG) are embedded with --checkpoint, by "
           "default the\ncheckpoint the gallery was embedded with, and the "
           "eval preprocessing of\n`classic predict`, at --precision, by "
           "default the precision the\n"
           "gallery was embedded at.  --queries takes the "
           "rows of another features file\ninstead; with --recall it prints "
           "recall@k for each k listed: the share\nof queries with a gallery "
           "row of their label among their k nearest.\n--json prints one JSON "
           "array with an object per query (an image that\nfailed: "
           "{\"query\", \"error\"} in its place), or one object for the "
           "recall.\n");
}

static const char *const own[] = {"--gallery",   "--top",     "--checkpoint",
                                  "--arch",      "--queries", "--recall",
                                  "--precision", NULL};

static const char *const flags[] = {"--json", NULL};

static int is_own(const char *a)
{
    for (int k = 0; own[k]; k++)
        if (strcmp(a, own[k]) == 0)
            return 1;
    return 0;
}

/* The k results of one query: a block of text or one object of the JSON
 * array (first: the array's first). */
static void print_query(const cl_gallery *g, const char *query, int64_t qlabel,
                        const int64_t *idx, const float *sim, int k, int json,
                        int first)
{
    char buf[160];
    if (!json) {
        printf("%s", query);
        if (qlabel >= 0)
            printf("  (label %lld %s)", (long long)qlabel,
                   cl_gallery_class_name(g, qlabel));
        printf("\n");
        for (int t = 0; t < k; t++) {
            int64_t j = idx[t];
            printf("  %2d. %.4f  %s  %lld %s\n", t + 1, sim[t],
                   cl_gallery_row_name(g, j, buf, sizeof buf),
                   (long long)g->labels[j],
                   cl_gallery_class_name(g, g->labels[j]));
        }
        return;
    }
    cl_strbuf b;
    cl_strbuf_init(&b);
    cl_strbuf_adds(&b, "{\"query\":");
    cl_strbuf_add_json_str(&b, query, strlen(query));
    if (qlabel >= 0)
        cl_strbuf_addf(&b, ",\"label\":%lld", (long long)qlabel);
    cl_strbuf_adds(&b, ",\"top\":[");
    for (int t = 0; t < k; t++) {
        int64_t j = idx[t];
        const char *name = cl_gallery_row_name(g, j, buf, sizeof buf);
        const char *cls = cl_gallery_class_name(g, g->labels[j]);
        cl_strbuf_addf(&b, "%s{\"rank\":%d,\"similarity\":", t ? "," : "",
                       t + 1);
        cl_strbuf_add_json_num(&b, sim[t]);
        cl_strbuf_addf(&b,
                       ",\"row\":%lld,\"index\":%lld,\"name\":", (long long)j,
                       (long long)g->indices[j]);
        cl_strbuf_add_json_str(&b, name, strlen(name));
        cl_strbuf_addf(&b,
                       ",\"label\":%lld,\"class\":", (long long)g->labels[j]);
        cl_strbuf_add_json_str(&b, cls, strlen(cls));
        cl_strbuf_addc(&b, '}');
    }
    cl_strbuf_adds(&b, "]}");
    printf("%s%s", first ? "" : ",\n", b.failed ? "{}" : cl_strbuf_str(&b));
    cl_strbuf_free(&b);
}

/* {"query": ..., "error": why} in the JSON array, for a query that
 * failed. */
static void print_failed(const char *query, const char *why, int first)
{
    cl_strbuf b;
    cl_strbuf_init(&b);
    cl_strbuf_adds(&b, "{\"query\":");
    cl_strbuf_add_json_str(&b, query, strlen(query));
    cl_strbuf_adds(&b, ",\"error\":");
    cl_strbuf_add_json_str(&b, why, strlen(why));
    cl_strbuf_addc(&b, '}');
    printf("%s%s", first ? "" : ",\n", b.failed ? "{}" : cl_strbuf_str(&b));
    cl_strbuf_free(&b);
}

/* Parses "1,5,10" into ks (at most 16, each >= 1); the largest in *kmax. */
static int parse_ks(const char *s, int *ks, int *kmax)
{
    int n = 0;
    *kmax = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 1000000 || n == 16 ||
            (*end && *end != ','))
            return 0;
        ks[n++] = (int)v;
        *kmax = (int)v > *kmax ? (int)v : *kmax;
        s = *end ? end + 1 : end;
    }
    return n;
}

/* --queries: the rows of a second features file. */
static int from_features(const cl_gallery *g, const char *path, int top,
                         const char *recall, int json)
{
    int ks[16], nk = 0, kmax = top;
    if (recall && !(nk = parse_ks(recall, ks, &kmax))) {
        fprintf(stderr, "classic: retrieve: --recall takes a list of "
                        "positive integers such as 1,5\n");
        return 2;
    }
    cl_gallery q;
    cl_status s = cl_gallery_open(&q, path);
    if (s != CL_OK)
        return cl_cli_fail("retrieve", s);
    int64_t *idx = NULL;
    float *sim = NULL;
    if (q.dim != g->dim) {
        s = cl_error(CL_ERR_SHAPE,
                     "%s has %d features per row but the gallery %d (embedded "
                     "by another network?)",
                     path, q.dim, g->dim);
        goto done;
    }
    if (!recall && kmax > g->n)
        kmax = (int)g->n;
    if (kmax > g->n) {
        s = cl_error(CL_ERR_ARG, "k of %d asked of a gallery of %lld rows",
                     kmax, (long long)g->n);
        goto done;
    }
    idx = cl_alloc((size_t)q.n * kmax * sizeof *idx, "top-k");
    sim = cl_alloc((size_t)q.n * kmax * sizeof *sim, "top-k");
    if (!idx || !sim) {
        s = CL_ERR_NOMEM;
        goto done;
    }
    if ((s = cl_retrieval_topk(g, q.feat, q.n, kmax, idx, sim)) != CL_OK)
        goto done;
    if (!recall) {
        char buf[160];
        if (json)
            printf("[");
        for (int64_t i = 0; i < q.n; i++)
            print_query(g, cl_gallery_row_name(&q, i, buf, sizeof buf),
                        q.labels[i], idx + (size_t)i * kmax,
                        sim + (size_t)i * kmax, kmax, json, i == 0);
        if (json)
            printf("]\n");
        goto done;
    }
    if (json)
        printf("{\"queries\":%lld,\"gallery\":%lld,\"recall\":{",
               (long long)q.n, (long long)g->n);
    for (int t = 0; t < nk; t++) {
        double r = cl_retrieval_recall(g, q.labels, idx, q.n, kmax, ks[t]);
        if (json)
            printf("%s\"%d\":%.6f", t ? "," : "", ks[t], r);
        else
            printf("recall@%-3d %6.2f%%  (%lld queries, gallery of %lld)\n",
                   ks[t], 100 * r, (long long)q.n, (long long)g->n);
    }
    if (json)
        printf("}}\n");
done:
    cl_free(idx);
    cl_free(sim);
    cl_gallery_close(&q);
    return s == CL_OK ? 0 : cl_cli_fail("retrieve", s);
}

/* Image files: embedded one by one with the checkpoint. */
static int from_images(const cl_gallery *g, int argc, char **argv,
                       const char *ckpt, const char *arch, int top, int json,
                       const char *precision)
{
    if (!ckpt || !ckpt[0]) {
        fprintf(stderr, "classic: retrieve: the gallery names no checkpoint; "
                        "give --checkpoint to embed the images\n");
        return 2;
    }
    if (top > g->n)
        top = (int)g->n;
    /* Queries embedded as the gallery was, unless told otherwise: the
     * nearest rows should not move with the precision alone. */
    if (!precision)
        precision = g->precision[0] ? g->precision : "f32";
    cl_precision prec;
    cl_model m;
    cl_status s = cl_precision_parse(precision, &prec);
    if (s != CL_OK ||
        (s = cl_model_open_weights(&m, ckpt, arch, 1, "onednn", CL_PLAN_INFER,
                                   0, 0, prec)) != CL_OK)
        return cl_cli_fail("retrieve", s);
    float *x = NULL, *q = NULL, *sim = NULL;
    int64_t *idx = NULL;
    int failed = 0, first = 1;
    if (cl_model_feature_dim(&m) != g->dim) {
        s = cl_error(CL_ERR_SHAPE,
                     "%s gives %d features per image but the gallery has %d "
                     "(embedded by another network?)",
                     ckpt, cl_model_feature_dim(&m), g->dim);
        goto done;
    }
    x = cl_alloc((size_t)m.in_c * m.side * m.side * sizeof *x, "input");
    q = cl_alloc((size_t)g->dim * sizeof *q, "query features");
    idx = cl_alloc((size_t)top * sizeof *idx, "top-k");
    sim = cl_alloc((size_t)top * sizeof *sim, "top-k");
    if (!x || !q || !idx || !sim) {
        s = CL_ERR_NOMEM;
        goto done;
    }
    if (json)
        printf("[");
    for (int i = 1; i < argc; i++) {
        if (is_own(argv[i])) {
            i++;
            continue;
        }
        if (strncmp(argv[i], "--", 2) == 0)
            continue;
        cl_status e = cl_model_infer_image(&m, argv[i], x, NULL, q);
        if (e == CL_OK)
            e = cl_retrieval_normalize(q, 1, g->dim, argv[i]);
        if (e == CL_OK)
            e = cl_retrieval_topk(g, q, 1, top, idx, sim);
        if (e != CL_OK) {
            fprintf(stderr, "classic: retrieve: %s\n", cl_last_error());
            failed = 1;
            if (json) /* the query's entry in its place, as predict's */
                print_failed(argv[i], cl_last_error(), first);
            first = 0;
            continue;
        }
        print_query(g, argv[i], -1, idx, sim, top, json, first);
        first = 0;
    }
    if (json)
        printf("]\n");
done:
    cl_free(x);
    cl_free(q);
    cl_free(idx);
    cl_free(sim);
    cl_model_close(&m);
    if (s != CL_OK)
        return cl_cli_fail("retrieve", s);
    return failed;
}

/* The checkpoint the gallery names: embed stores it absolute; a relative
 * path (a gallery written before that) is tried from the current folder,
 * then from the gallery's own folder. */
static const char *gallery_checkpoint(const cl_gallery *g, const char *gpath,
                                      char *buf, size_t n)
{
    const char *ck = g->checkpoint;
    const char *slash = strrchr(gpath, '/');
    if (!ck[0] || ck[0] == '/' || access(ck, F_OK) == 0 || !slash)
        return ck;
    snprintf(buf, n, "%.*s/%s", (int)(slash - gpath), gpath, ck);
    return access(buf, F_OK) == 0 ? buf : ck;
}

int cl_cmd_retrieve(int argc, char **argv)
{
    if (cl_cli_is_help(argc, argv)) {
        usage();
        return 0;
    }
    const char *gpath = cl_cli_option(argc, argv, "--gallery");
    const char *topk = cl_cli_option(argc, argv, "--top");
    const char *queries = cl_cli_option(argc, argv, "--queries");
    const char *recall = cl_cli_option(argc, argv, "--recall");
    int json = 0, n_images = 0;
    for (int i = 1; i < argc; i++) {
        if (is_own(argv[i])) {
            if (i + 1 == argc) {
                fprintf(stderr, "classic: retrieve: %s needs a value\n",
                        argv[i]);
                return 2;
            }
            i++;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strncmp(argv[i], "--", 2) == 0) {
            return cl_cli_refuse_options(argc, argv, "retrieve", own, flags, 0);
        } else {
            n_images++;
        }
    }
    if (!gpath || (!queries && n_images == 0) || (queries && n_images)) {
        fprintf(stderr, "classic: retrieve: --gallery FILE and either query "
                        "images or --queries FILE are required\n");
        return 2;
    }
    if (recall && !queries) {
        fprintf(stderr, "classic: retrieve: --recall needs --queries (a "
                        "features file with labels)\n");
        return 2;
    }
    int top = topk ? atoi(topk) : 5;
    if (top < 1) {
        fprintf(stderr, "classic: retrieve: --top must be >= 1\n");
        return 2;
    }
    const char *precision = NULL;
    if (cl_cli_precision(argc, argv, "retrieve", &precision))
        return 2;
    if (precision && queries) {
        fprintf(stderr, "classic: retrieve: --precision is how image queries "
                        "are embedded; --queries holds features embedded "
                        "already\n");
        return 2;
    }
    cl_gallery g;
    cl_status s = cl_gallery_open(&g, gpath);
    if (s != CL_OK)
        return cl_cli_fail("retrieve", s);
    int rc;
    if (queries) {
        rc = from_features(&g, queries, top, recall, json);
    } else {
        const char *ckpt = cl_cli_option(argc, argv, "--checkpoint");
        char near[2200];
        if (!ckpt)
            ckpt = gallery_checkpoint(&g, gpath, near, sizeof near);
        rc = from_images(&g, argc, argv, ckpt,
                         cl_cli_option(argc, argv, "--arch"), top, json,
                         precision);
    }
    cl_gallery_close(&g);
    return rc;
}
