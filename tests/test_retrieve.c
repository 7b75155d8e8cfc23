/* Image retrieval: the blocked top-k against the plain loop, `classic
 * retrieve` against a brute-force search over the files `classic embed`
 * writes, and hostile gallery files.
 * ctest-labels: cli onednn */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/rng.h"
#include "data/data.h"
#include "harness.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "test_data_fixtures.h"
#include "train/retrieval.h"

/* ---- the library ------------------------------------------------------- */

/* A gallery of n random rows of dim (labels i % 7), normalised, with some
 * rows repeated so that exact ties occur. */
static int random_gallery(cl_gallery *g, int64_t n, int dim, uint64_t seed)
{
    memset(g, 0, sizeof *g);
    g->n = n;
    g->dim = dim;
    g->feat = malloc((size_t)n * dim * sizeof(float));
    g->labels = malloc((size_t)n * sizeof(int64_t));
    g->indices = malloc((size_t)n * sizeof(int64_t));
    if (!g->feat || !g->labels || !g->indices)
        return -1;
    uint64_t x = seed;
    for (int64_t i = 0; i < n; i++) {
        for (int j = 0; j < dim; j++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            g->feat[i * dim + j] =
                (float)((x >> 40) & 0xffff) / 65536.0f - 0.5f;
        }
        if (i % 97 == 50) /* a copy of an earlier row: a tie */
            memcpy(g->feat + i * dim, g->feat + (i - 50) * dim,
                   (size_t)dim * sizeof(float));
        g->labels[i] = i % 7;
        g->indices[i] = i;
    }
    return cl_retrieval_normalize(g->feat, n, dim, "gallery") == CL_OK ? 0 : -1;
}

static void free_gallery(cl_gallery *g)
{
    free(g->feat);
    free(g->labels);
    free(g->indices);
}

CL_TEST(topk_equals_the_plain_loop)
{
    /* 5000 rows cross the 4096-row sgemm block, 300 queries the 256-query
     * one; the queries are gallery rows and perturbed copies. */
    cl_gallery g;
    const int dim = 24, nq = 300, k = 7;
    REQUIRE(random_gallery(&g, 5000, dim, 3) == 0);
    float *q = malloc((size_t)nq * dim * sizeof(float));
    int64_t *ia = malloc((size_t)nq * k * sizeof(int64_t));
    int64_t *ib = malloc((size_t)nq * k * sizeof(int64_t));
    float *sa = malloc((size_t)nq * k * sizeof(float));
    float *sb = malloc((size_t)nq * k * sizeof(float));
    REQUIRE(q && ia && ib && sa && sb);
    for (int i = 0; i < nq; i++)
        for (int j = 0; j < dim; j++)
            q[i * dim + j] = g.feat[(size_t)(i * 13) * dim + j] +
                             (i % 2 ? 0.05f * (float)((j * 7 + i) % 5) : 0);
    REQUIRE_OK(cl_retrieval_normalize(q, nq, dim, "queries"));
    REQUIRE_OK(cl_retrieval_topk(&g, q, nq, k, ia, sa));
    REQUIRE_OK(cl_retrieval_topk_ref(&g, q, nq, k, ib, sb));
    int mism = 0;
    for (int i = 0; i < nq * k; i++) {
        CHECK(fabsf(sa[i] - sb[i]) < 1e-5f);
        /* The order may only differ between rows of equal similarity. */
        if (ia[i] != ib[i])
            mism += fabsf(sa[i] - sb[i]) > 1e-6f ||
                    fabsf(sb[i] - sb[i % k ? i - 1 : i + 1]) > 1e-6f;
    }
    CHECK(mism == 0);
    for (int i = 0; i < nq; i += 2) {
        /* An unperturbed query finds itself (or its earlier copy) first. */
        CHECK(sa[i * k] > 0.9999f);
        CHECK(ia[i * k] == i * 13 || (i * 13) % 97 == 50);
        for (int t = 1; t < k; t++)
            CHECK(sa[i * k + t] <= sa[i * k + t - 1]);
    }
    /* Ties go to the lower row: row 147 is a copy of row 97. */
    memcpy(q, g.feat + 147 * dim, (size_t)dim * sizeof(float));
    REQUIRE_OK(cl_retrieval_topk(&g, q, 1, 2, ia, sa));
    CHECK(ia[0] == 97 && ia[1] == 147);
    CHECK_ERR(cl_retrieval_topk(&g, q, 1, 5001, ia, sa), CL_ERR_ARG,
              "top 5001 asked of a gallery of 5000 rows");
    q[3] = NAN;
    CHECK_ERR(cl_retrieval_normalize(q, 1, dim, "q"), CL_ERR_NUMERIC,
              "q: row 0 holds a NaN or an infinity");
    free(q);
    free(ia);
    free(ib);
    free(sa);
    free(sb);
    free_gallery(&g);
}

/* ---- the command --------------------------------------------------------- */

#define NCLS 3
#define NTRAIN 6 /* per class */
#define NVAL 2

/* root/{train,val}/c<k>/<i>.png: 28x28 gray images, each class a pattern. */
static int write_folder(const char *root)
{
    cl_image img;
    memset(&img, 0, sizeof img);
    if (cl_image_reserve(&img, 28, 28, 1) != CL_OK)
        return -1;
    char path[800];
    int rc = 0;
    const char *split[2] = {"train", "val"};
    for (int s = 0; s < 2 && !rc; s++)
        for (int k = 0; k < NCLS && !rc; k++) {
            snprintf(path, sizeof path, "%s/%s/c%d", root, split[s], k);
            char cmd[900];
            snprintf(cmd, sizeof cmd, "mkdir -p %s", path);
            if (cl_test_run(cmd) != 0)
                return -1;
            for (int i = 0; i < (s ? NVAL : NTRAIN) && !rc; i++) {
                for (int y = 0; y < 28; y++)
                    for (int x = 0; x < 28; x++)
                        img.data[y * 28 + x] =
                            (uint8_t)(((k == 0   ? x
                                        : k == 1 ? y
                                                 : x + y) *
                                           9 +
                                       (i + 5 * s) * 17 +
                                       ((x * y + i) % 7) * 11) &
                                      0xff);
                snprintf(path, sizeof path, "%s/%s/c%d/%d.png", root, split[s],
                         k, i);
                rc = cl_image_save_png(path, &img) == CL_OK ? 0 : -1;
            }
        }
    cl_image_free(&img);
    return rc;
}

#define TINY                                                                   \
    "--model resnet18 --stem cifar_pool --in_channels 1 --image_size 28 "      \
    "--random_crop_padding 0 --hflip 0 --mean 0.5 --std 0.25 "                 \
    "--num_parallel_workers 1 --seed 3 "

/* A tiny checkpoint trained on the folder, the train split embedded as the
 * gallery, the val split as queries (val.safetensors) and an IDX test
 * split as queries without file names (idx.safetensors). */
static int setup(void)
{
    char args[3000];
    const char *root = cl_test_path("img");
    if (write_folder(root) != 0)
        return -1;
    snprintf(args, sizeof args,
             "train --dataset imagefolder --data_dir %s --train_split train "
             "--val_split val " TINY "--batch_size 6 --epoch_size 1 "
             "--val_interval 0 --ckpt_save_epochs 0 --ckpt_save_dir %s",
             root, cl_test_path("run"));
    if (cl_test_classic(args) != 0)
        return -1;
    const char *ck = cl_test_path("run/resnet18-last.safetensors");
    snprintf(args, sizeof args,
             "embed --checkpoint %s --out %s --split train --batch 4", ck,
             cl_test_path("gallery.safetensors"));
    if (cl_test_classic(args) != 0)
        return -1;
    snprintf(args, sizeof args,
             "embed --checkpoint %s --out %s --split val --batch 4", ck,
             cl_test_path("val.safetensors"));
    if (cl_test_classic(args) != 0)
        return -1;
    char p[700];
    mkdir(cl_test_path("idx"), 0755);
    snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte", cl_test_path("idx"));
    if (fx_idx_images(p, 5, 28, 28, 0, 0, 0, 0) != 0)
        return -1;
    snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte", cl_test_path("idx"));
    if (fx_idx_labels(p, 5, NCLS, 0, -1) != 0)
        return -1;
    snprintf(args, sizeof args,
             "embed --checkpoint %s --out %s --dataset mnist --data_dir %s "
             "--split test --batch 2",
             ck, cl_test_path("idx.safetensors"), cl_test_path("idx"));
    return cl_test_classic(args) == 0 ? 0 : -1;
}

/* Rows of a features file, as stored. */
typedef struct rows {
    int64_t n;
    int dim;
    float *f;
    int64_t *lab;
} rows;

static int read_rows(const char *path, rows *r)
{
    cl_st_file *f = NULL;
    if (cl_st_open(&f, path) != CL_OK)
        return -1;
    cl_shape s;
    long i = cl_st_find(f, "features"), l = cl_st_find(f, "labels");
    cl_st_info(f, (size_t)i, NULL, &s);
    r->n = s.d[0];
    r->dim = (int)s.d[1];
    r->f = malloc((size_t)r->n * r->dim * sizeof(float));
    r->lab = malloc((size_t)r->n * sizeof(int64_t));
    int rc = r->f && r->lab &&
                     cl_st_read_f32(f, (size_t)i, r->f,
                                    (size_t)r->n * r->dim) == CL_OK &&
                     cl_st_read_i64(f, (size_t)l, r->lab, (size_t)r->n) == CL_OK
                 ? 0
                 : -1;
    cl_st_close(f);
    return rc;
}

static double cosine(const float *a, const float *b, int d)
{
    double ab = 0, aa = 0, bb = 0;
    for (int j = 0; j < d; j++) {
        ab += (double)a[j] * b[j];
        aa += (double)a[j] * a[j];
        bb += (double)b[j] * b[j];
    }
    return ab / sqrt(aa * bb);
}

/* Gallery rows ordered by cosine similarity to q, best first, ties to the
 * lower row (a selection sort: the gallery is tiny). */
static void brute_force(const rows *g, const float *q, int64_t *order,
                        double *sim)
{
    for (int64_t j = 0; j < g->n; j++) {
        order[j] = j;
        sim[j] = cosine(q, g->f + j * g->dim, g->dim);
    }
    for (int64_t a = 0; a < g->n; a++)
        for (int64_t b = a + 1; b < g->n; b++)
            if (sim[b] > sim[a] || (sim[b] == sim[a] && order[b] < order[a])) {
                double t = sim[a];
                sim[a] = sim[b];
                sim[b] = t;
                int64_t o = order[a];
                order[a] = order[b];
                order[b] = o;
            }
}

CL_TEST(retrieve_matches_brute_force)
{
    REQUIRE(setup() == 0);
    rows g, q;
    REQUIRE(read_rows(cl_test_path("gallery.safetensors"), &g) == 0);
    REQUIRE(read_rows(cl_test_path("val.safetensors"), &q) == 0);
    REQUIRE(g.n == NCLS * NTRAIN && q.n == NCLS * NVAL && g.dim == 512);
    char args[2000];
    const int K = 4;
    snprintf(args, sizeof args,
             "retrieve --gallery %s --queries %s --top %d --json",
             cl_test_path("gallery.safetensors"),
             cl_test_path("val.safetensors"), K);
    REQUIRE(cl_test_classic(args) == 0);
    /* One JSON array, an object per query, in the file's order. */
    cl_json_doc *all = NULL;
    REQUIRE_OK(
        cl_json_parse(&all, cl_test_out, strlen(cl_test_out), NULL, "out"));
    REQUIRE(cl_json_root(all)->type == CL_JSON_ARR);
    int64_t order[NCLS * NTRAIN];
    double sim[NCLS * NTRAIN];
    int64_t i = 0;
    int hits1 = 0, hits2 = 0;
    for (const cl_json *obj = cl_json_root(all)->child; obj; obj = obj->next) {
        REQUIRE(i < q.n);
        const cl_json *top = cl_json_get(obj, "top");
        const cl_json *qn = cl_json_get(obj, "query");
        CHECK(qn && strstr(qn->str, "/img/val/c") != NULL);
        CHECK(top && top->count == (size_t)K);
        brute_force(&g, q.f + i * q.dim, order, sim);
        int t = 0;
        for (const cl_json *e = top ? top->child : NULL; e; e = e->next, t++) {
            const cl_json *row = cl_json_get(e, "row");
            const cl_json *s = cl_json_get(e, "similarity");
            const cl_json *lab = cl_json_get(e, "label");
            const cl_json *name = cl_json_get(e, "name");
            const cl_json *cls = cl_json_get(e, "class");
            REQUIRE(row && s && lab && name && cls);
            CHECK(fabs(s->num - sim[t]) < 1e-4);
            /* The same row, or one of (nearly) the same similarity. */
            CHECK(row->i == order[t] || fabs(sim[t] - s->num) < 1e-6);
            CHECK(lab->i == g.lab[row->i]);
            char want[64];
            snprintf(want, sizeof want, "/img/train/c%lld/", (long long)lab->i);
            CHECK(strstr(name->str, want) != NULL);
            snprintf(want, sizeof want, "c%lld", (long long)lab->i);
            CHECK(strcmp(cls->str, want) == 0);
        }
        hits1 += g.lab[order[0]] == q.lab[i];
        hits2 += g.lab[order[0]] == q.lab[i] || g.lab[order[1]] == q.lab[i];
        i++;
    }
    CHECK(i == q.n);
    cl_json_free(all);
    /* recall@1 and @2 as the brute force counts them. */
    snprintf(args, sizeof args,
             "retrieve --gallery %s --queries %s --recall 1,2 --json",
             cl_test_path("gallery.safetensors"),
             cl_test_path("val.safetensors"));
    REQUIRE(cl_test_classic(args) == 0);
    cl_json_doc *doc = NULL;
    REQUIRE_OK(
        cl_json_parse(&doc, cl_test_out, strlen(cl_test_out), NULL, "out"));
    const cl_json *rec = cl_json_get(cl_json_root(doc), "recall");
    REQUIRE(rec && cl_json_get(rec, "1") && cl_json_get(rec, "2"));
    CHECK(fabs(cl_json_get(rec, "1")->num - hits1 / (double)q.n) < 1e-9);
    CHECK(fabs(cl_json_get(rec, "2")->num - hits2 / (double)q.n) < 1e-9);
    cl_json_free(doc);
    snprintf(args, sizeof args, "retrieve --gallery %s --queries %s --recall 1",
             cl_test_path("gallery.safetensors"),
             cl_test_path("val.safetensors"));
    REQUIRE(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "recall@1 ") != NULL);
    CHECK(strstr(cl_test_out, "(6 queries, gallery of 18)") != NULL);

    /* IDX queries have no file names: dataset, split and index name them. */
    snprintf(args, sizeof args, "retrieve --gallery %s --queries %s --top 1",
             cl_test_path("gallery.safetensors"),
             cl_test_path("idx.safetensors"));
    REQUIRE(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "mnist test #4  (label ") != NULL);
    free(g.f);
    free(g.lab);
    free(q.f);
    free(q.lab);
}

CL_TEST(retrieve_image_queries)
{
    /* A gallery image as a query finds itself first, embedded by the
     * checkpoint the gallery names, through predict's preprocessing. */
    REQUIRE(setup() == 0);
    char args[2000], img[700], img2[700];
    snprintf(img, sizeof img, "%s/train/c1/3.png", cl_test_path("img"));
    snprintf(img2, sizeof img2, "%s/train/c2/0.png", cl_test_path("img"));
    snprintf(args, sizeof args, "retrieve --gallery %s --top 2 --json %s %s",
             cl_test_path("gallery.safetensors"), img, img2);
    REQUIRE(cl_test_classic(args) == 0);
    cl_json_doc *all = NULL;
    REQUIRE_OK(
        cl_json_parse(&all, cl_test_out, strlen(cl_test_out), NULL, "out"));
    REQUIRE(cl_json_root(all)->type == CL_JSON_ARR);
    const char *want[2] = {img, img2};
    int n = 0;
    for (const cl_json *obj = cl_json_root(all)->child; obj; obj = obj->next) {
        REQUIRE(n < 2);
        const cl_json *top = cl_json_get(obj, "top");
        REQUIRE(top && top->count == 2);
        CHECK(strcmp(cl_json_get(obj, "query")->str, want[n]) == 0);
        CHECK(strcmp(cl_json_get(top->child, "name")->str, want[n]) == 0);
        CHECK(cl_json_get(top->child, "similarity")->num > 0.9999);
        CHECK(cl_json_get(top->child, "label")->i == n + 1);
        n++;
    }
    CHECK(n == 2);
    cl_json_free(all);
    /* Text output, and --checkpoint given explicitly. */
    snprintf(args, sizeof args, "retrieve --gallery %s --checkpoint %s %s",
             cl_test_path("gallery.safetensors"),
             cl_test_path("run/resnet18-last.safetensors"), img);
    REQUIRE(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "   1. 1.0000  ") != NULL ||
          strstr(cl_test_out, "   1. 0.9999  ") != NULL);
    CHECK(strstr(cl_test_out, "c1/3.png  1 c1\n") != NULL);
    CHECK(strstr(cl_test_out, "   5. ") != NULL);
    /* An image that cannot be read: one sentence, exit status 1. */
    snprintf(args, sizeof args, "retrieve --gallery %s %s/nothing.png",
             cl_test_path("gallery.safetensors"), cl_test_tmpdir());
    CHECK(cl_test_classic(args) == 1);
    CHECK(strstr(cl_test_out, "nothing.png") != NULL);
}

/* A features file from the given entries (NULL data: left out). */
static void write_gallery(const char *path, const float *feat, int64_t n,
                          int64_t dim, const int64_t *labels, int64_t nl,
                          const char *names, int64_t names_len)
{
    cl_st_writer *w = NULL;
    int64_t fd[2] = {n, dim};
    int64_t *idx = calloc((size_t)(n > nl ? n : nl) + 1, sizeof(int64_t));
    REQUIRE(idx != NULL);
    REQUIRE_OK(cl_st_writer_new(&w));
    if (feat)
        REQUIRE_OK(cl_st_writer_add(w, "features", CL_ST_F32,
                                    cl_shape_make(dim ? 2 : 1, fd), feat));
    if (labels)
        REQUIRE_OK(cl_st_writer_add(w, "labels", CL_ST_I64,
                                    cl_shape_make(1, &nl), labels));
    REQUIRE_OK(
        cl_st_writer_add(w, "indices", CL_ST_I64, cl_shape_make(1, &n), idx));
    if (names)
        REQUIRE_OK(cl_st_writer_add(w, "names", CL_ST_U8,
                                    cl_shape_make(1, &names_len), names));
    REQUIRE_OK(cl_st_writer_save(w, path));
    cl_st_writer_free(w);
    free(idx);
}

/* `classic retrieve` on a hostile gallery fails with one line naming it. */
static void refused(const char *args, const char *what)
{
    int rc = cl_test_classic(args);
    CHECK(rc == 1 || rc == 2);
    CHECK(strstr(cl_test_out, what) != NULL);
    const char *nl = strchr(cl_test_out, '\n');
    CHECK(nl && nl[1] == '\0');
    if (!strstr(cl_test_out, what) || !nl || nl[1])
        fprintf(stderr, "expected one line with '%s', got: %s\n", what,
                cl_test_out);
}

CL_TEST(retrieve_refuses_hostile_galleries)
{
    float feat[12] = {1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1};
    int64_t lab[4] = {0, 1, 2, 0};
    char p[700], args[2000];
    const char *q = cl_test_path("ok.safetensors");
    write_gallery(q, feat, 4, 3, lab, 4, NULL, 0);
    struct {
        const char *file;
        const char *what;
    } cases[] = {
        {"nofeat", "no 'features' entry"},
        {"flat", "'features' has 1 dimension(s)"},
        {"nolab", "no 'labels' entry"},
        {"shortlab", "'labels' has 1 dimension(s) and 3 rows"},
        {"nan", "'features': row 2 holds a NaN or an infinity"},
        {"names", "'names' must hold 4 NUL-ended names"},
        {"empty", "a gallery needs at least one row"},
        {"notst", "not-a-gallery"},
    };
    float nanfeat[12];
    memcpy(nanfeat, feat, sizeof feat);
    nanfeat[7] = NAN;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        snprintf(p, sizeof p, "%s/%s.safetensors", cl_test_tmpdir(),
                 cases[c].file);
        switch (c) {
        case 0:
            write_gallery(p, NULL, 4, 3, lab, 4, NULL, 0);
            break;
        case 1:
            write_gallery(p, feat, 4, 0, lab, 4, NULL, 0);
            break;
        case 2:
            write_gallery(p, feat, 4, 3, NULL, 0, NULL, 0);
            break;
        case 3:
            write_gallery(p, feat, 4, 3, lab, 3, NULL, 0);
            break;
        case 4:
            write_gallery(p, nanfeat, 4, 3, lab, 4, NULL, 0);
            break;
        case 5:
            write_gallery(p, feat, 4, 3, lab, 4, "a\0b\0c", 6);
            break;
        case 6:
            write_gallery(p, feat, 0, 3, lab, 0, NULL, 0);
            break;
        default:
            snprintf(p, sizeof p, "%s/not-a-gallery.safetensors",
                     cl_test_tmpdir());
            fx_write(p, "hello", 5, 0);
        }
        snprintf(args, sizeof args,
                 "retrieve --gallery %s --queries %s --recall 1", p, q);
        refused(args, cases[c].what);
        /* The same file as the queries. */
        snprintf(args, sizeof args,
                 "retrieve --gallery %s --queries %s --recall 1", q, p);
        refused(args, cases[c].what);
    }
    /* Queries of another width, k above the gallery, bad lists. */
    write_gallery(cl_test_path("wide.safetensors"), feat, 3, 4, lab, 3, NULL,
                  0);
    snprintf(args, sizeof args, "retrieve --gallery %s --queries %s", q,
             cl_test_path("wide.safetensors"));
    refused(args, "has 4 features per row but the gallery 3");
    snprintf(args, sizeof args, "retrieve --gallery %s --queries %s --recall 5",
             q, q);
    refused(args, "k of 5 asked of a gallery of 4 rows");
    snprintf(args, sizeof args,
             "retrieve --gallery %s --queries %s --recall 1,x", q, q);
    refused(args, "--recall takes a list of positive integers");
    snprintf(args, sizeof args, "retrieve --gallery %s --recall 1 a.png", q);
    refused(args, "--recall needs --queries");
    snprintf(args, sizeof args, "retrieve --gallery %s a.png", q);
    refused(args, "the gallery names no checkpoint");
    refused("retrieve --queries x", "--gallery FILE and either query images");
    /* The valid file works: each row is its own nearest. */
    snprintf(args, sizeof args, "retrieve --gallery %s --queries %s --recall 1",
             q, q);
    CHECK(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "recall@1   100.00%") != NULL);
}
