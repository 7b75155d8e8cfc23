/* The public API (include/classic/classic.h): a tiny model trained through
 * cl_train with a progress callback and a stop (and through cl_train_ex,
 * leaving signals and MPI to the host), then opened with
 * cl_classifier_load to classify and embed files and in-memory images, and
 * every function's failure paths.
 * ctest-labels: api */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "classic/classic.h"
#include "data/data.h"
#include "dist/dist.h"
#include "harness.h"
#include "io/json.h"
#include "test_data_fixtures.h"

/* An ImageFolder root (classes a and b) and a resnet18 trained on it for
 * `epochs` into dir through cl_train_ex with opts (NULL: as cl_train);
 * the model file's path, or NULL.  sum may be NULL. */
static const char *train_tiny_ex(const char *dir, int epochs, cl_progress_fn fn,
                                 void *ctx, const cl_train_opts *opts,
                                 cl_status *st, cl_train_summary *sum)
{
    static char ckpt[1200];
    char root[1024], o_root[1100], o_dir[1100], o_ep[64];
    snprintf(root, sizeof root, "%s", cl_test_path("folder"));
    if (fx_image_split(root, "train", 8) != 0 ||
        fx_image_split(root, "val", 4) != 0)
        return NULL;
    snprintf(o_root, sizeof o_root, "data_dir=%s", root);
    snprintf(o_dir, sizeof o_dir, "ckpt_save_dir=%s", cl_test_path(dir));
    snprintf(o_ep, sizeof o_ep, "epoch_size=%d", epochs);
    const char *ov[] = {o_root, o_dir, o_ep, "log_level=error"};
    const char *yaml = "dataset: imagefolder\n"
                       "model: resnet18\n"
                       "image_size: 32\n"
                       "batch_size: 4\n"
                       "num_parallel_workers: 0\n"
                       "per_print_times: 1\n"
                       "val_split: val\n"
                       "seed: 7\n";
    cl_train_summary own;
    if (!sum)
        sum = &own;
    *st = cl_train_ex(NULL, yaml, ov, 4, fn, ctx, opts, sum);
    if (*st != CL_OK)
        return NULL;
    snprintf(ckpt, sizeof ckpt, "%s", sum->last_checkpoint);
    return ckpt;
}

/* The same through cl_train. */
static const char *train_tiny(const char *dir, int epochs, cl_progress_fn fn,
                              void *ctx, cl_status *st)
{
    return train_tiny_ex(dir, epochs, fn, ctx, NULL, st, NULL);
}

typedef struct seen {
    int steps, epochs, evaluated, stop_at;
    double last_lr;
} seen;

static int on_progress(void *ctx, const cl_progress *p)
{
    seen *s = ctx;
    if (p->kind == CL_PROGRESS_STEP) {
        s->steps++;
        s->last_lr = p->lr;
    } else {
        s->epochs++;
        s->evaluated += p->evaluated && p->val_top1 >= 0 && p->val_top1 <= 1;
    }
    return s->stop_at && s->steps >= s->stop_at;
}

CL_TEST(train_reports_progress_and_stops)
{
    seen s = {0};
    cl_status st;
    const char *ck = train_tiny("run", 2, on_progress, &s, &st);
    REQUIRE_OK(st);
    REQUIRE(ck && ck[0]);
    CHECK(s.steps == 4); /* 8 images, batch 4, 2 epochs */
    CHECK(s.epochs == 2);
    CHECK(s.evaluated == 2);
    CHECK(s.last_lr > 0);
    /* A callback that returns non-zero stops the run after that step. */
    seen s2 = {.stop_at = 1};
    cl_train_summary sum;
    char o_root[1100], o_dir[1100];
    snprintf(o_root, sizeof o_root, "data_dir=%s", cl_test_path("folder"));
    snprintf(o_dir, sizeof o_dir, "ckpt_save_dir=%s", cl_test_path("stop"));
    const char *ov[] = {"dataset=imagefolder",
                        o_root,
                        o_dir,
                        "image_size=32",
                        "batch_size=4",
                        "epoch_size=3",
                        "per_print_times=1",
                        "log_level=error",
                        "num_parallel_workers=0",
                        "val_split=val"};
    st = cl_train(NULL, NULL, ov, 10, on_progress, &s2, &sum);
    CHECK(st == CL_ERR_INTERRUPTED);
    CHECK(sum.stopped == 1);
    CHECK(sum.steps == 1);
    CHECK(s2.steps == 1);
}

CL_TEST(train_failures_name_the_cause)
{
    const char *bad_key[] = {"batch_sise=4"};
    CHECK_ERR(cl_train(NULL, NULL, bad_key, 1, NULL, NULL, NULL), CL_ERR_CONFIG,
              "batch_sise");
    const char *no_eq[] = {"batch_size"};
    CHECK_ERR(cl_train(NULL, NULL, no_eq, 1, NULL, NULL, NULL), CL_ERR_ARG,
              "expected key=value");
    CHECK_ERR(cl_train(NULL, NULL, NULL, 2, NULL, NULL, NULL), CL_ERR_ARG,
              "NULL");
    cl_train_summary sum;
    CHECK(cl_train(NULL, "model: [unclosed\n", NULL, 0, NULL, NULL, &sum) !=
          CL_OK);
    CHECK(strstr(cl_last_error(), "config text") != NULL);
    CHECK(isnan(sum.val_top1) && sum.steps == 0);
    CHECK(cl_train(cl_test_path("missing.yaml"), NULL, NULL, 0, NULL, NULL,
                   NULL) == CL_ERR_IO);
    CHECK(strstr(cl_last_error(), "missing.yaml") != NULL);
}

/* ---- cl_train_ex: signals and MPI left to the host ------------------- */

static volatile sig_atomic_t host_signal;

static void host_handler(int sig)
{
    host_signal = sig;
}

typedef struct watch {
    int steps;
    int host_handlers; /* at the first step SIGINT and SIGTERM were the
                          host's */
    int raise_term;    /* raise SIGTERM at the first step */
} watch;

static int watch_signals(void *ctx, const cl_progress *p)
{
    watch *w = ctx;
    if (p->kind != CL_PROGRESS_STEP || w->steps++ > 0)
        return 0;
    struct sigaction si, st;
    sigaction(SIGINT, NULL, &si);
    sigaction(SIGTERM, NULL, &st);
    w->host_handlers =
        si.sa_handler == host_handler && st.sa_handler == host_handler;
    if (w->raise_term)
        raise(SIGTERM);
    return 0;
}

static int mpi_is_up(void)
{
#ifdef CL_HAVE_MPI
    int inited = 0;
    MPI_Initialized(&inited);
    return inited;
#else
    return 0;
#endif
}

CL_TEST(train_ex_leaves_signals_and_mpi_to_the_host)
{
    struct sigaction sa, old_int, old_term, now;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = host_handler;
    sigemptyset(&sa.sa_mask);
    REQUIRE(sigaction(SIGINT, &sa, &old_int) == 0);
    REQUIRE(sigaction(SIGTERM, &sa, &old_term) == 0);
    /* cl_train puts its own handlers in while it runs, and the host's
     * back on return. */
    watch w = {0};
    cl_status st;
    train_tiny_ex("plain", 1, watch_signals, &w, NULL, &st, NULL);
    CHECK_OK(st);
    CHECK(w.steps == 2 && !w.host_handlers);
    sigaction(SIGINT, NULL, &now);
    CHECK(now.sa_handler == host_handler);
    /* host_signals: the host's handlers stay, and a SIGTERM during the run
     * is the host's business: the run goes on to its end. */
    cl_train_opts o;
    memset(&o, 0, sizeof o);
    o.size = sizeof o;
    o.host_signals = 1;
    o.host_mpi = 1;
    cl_train_summary sum;
    watch wh = {.raise_term = 1};
    host_signal = 0;
    train_tiny_ex("hosted", 1, watch_signals, &wh, &o, &st, &sum);
    CHECK_OK(st);
    CHECK(wh.host_handlers);
    CHECK(host_signal == SIGTERM);
    CHECK(sum.steps == 2 && sum.stop_signal == 0 && !sum.stopped);
    CHECK(sum.world_size == 1);
    /* host_mpi under an MPI launcher whose MPI the host did not start:
     * refused, and MPI is left alone. */
    setenv("OMPI_COMM_WORLD_SIZE", "1", 1);
    train_tiny_ex("launched", 1, NULL, NULL, &o, &st, NULL);
    unsetenv("OMPI_COMM_WORLD_SIZE");
    CHECK(st == CL_ERR_CONFIG);
    CHECK(strstr(cl_last_error(), "MPI is not initialised") != NULL);
    CHECK(!mpi_is_up());
    /* A size this library does not know is refused with a sentence. */
    o.size = 0;
    train_tiny_ex("size0", 1, NULL, NULL, &o, &st, NULL);
    CHECK(st == CL_ERR_ARG && strstr(cl_last_error(), "opts->size") != NULL);
    o.size = sizeof o + 8;
    train_tiny_ex("size_big", 1, NULL, NULL, &o, &st, NULL);
    CHECK(st == CL_ERR_ARG && strstr(cl_last_error(), "newer") != NULL);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
}

/* A 3-channel h x w test picture, as bytes. */
static void picture(uint8_t *px, int h, int w, int c)
{
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++)
                px[(y * w + x) * c + k] = (uint8_t)((y * 7 + x * 3 + k * 50));
}

CL_TEST(classify_and_embed)
{
    cl_status st;
    const char *ck = train_tiny("run", 1, NULL, NULL, &st);
    REQUIRE_OK(st);
    cl_classifier *c = NULL;
    REQUIRE_OK(cl_classifier_load(&c, ck, NULL, NULL));
    int K = cl_classifier_num_classes(c), ch = 0, side = 0;
    CHECK(K == 2);
    CHECK(strcmp(cl_classifier_class_name(c, 0), "a") == 0);
    CHECK(strcmp(cl_classifier_class_name(c, 1), "b") == 0);
    CHECK(cl_classifier_embed_dim(c) == 512);
    CHECK_OK(cl_classifier_input(c, &ch, &side));
    CHECK(ch == 3 && side == 32);
    /* A PNG on disk and the same pixels in memory agree exactly. */
    enum { H = 40, W = 50 };
    static uint8_t px[2 * H * W * 3];
    static float pf[H * W * 3];
    picture(px, H, W, 3);
    picture(px + H * W * 3, H, W, 3);
    for (int i = 0; i < H * W * 3; i++)
        px[H * W * 3 + i] = (uint8_t)(255 - px[H * W * 3 + i]);
    for (int i = 0; i < H * W * 3; i++)
        pf[i] = px[i] / 255.0f;
    cl_image img;
    memset(&img, 0, sizeof img);
    REQUIRE_OK(cl_image_reserve(&img, H, W, 3));
    memcpy(img.data, px, sizeof(uint8_t) * H * W * 3);
    const char *png = cl_test_path("pic.png");
    REQUIRE_OK(cl_image_save_png(png, &img));
    cl_image_free(&img);
    float pfile[2], pmem[2], pflt[2], pbatch[4], pfiles[4], pgray[2];
    REQUIRE_OK(cl_classifier_classify_file(c, png, pfile));
    CHECK_NEAR(pfile[0] + pfile[1], 1.0, 1e-5);
    CHECK_OK(cl_classifier_classify(c, px, CL_PIXEL_U8, H, W, 3, pmem));
    CHECK(pmem[0] == pfile[0] && pmem[1] == pfile[1]);
    CHECK_OK(cl_classifier_classify(c, pf, CL_PIXEL_F32, H, W, 3, pflt));
    CHECK(pflt[0] == pfile[0] && pflt[1] == pfile[1]);
    /* A batch gives each image's own row.  It runs on a network planned
     * for 16 images, where oneDNN may choose other kernels than for one:
     * equal up to rounding. */
    CHECK_OK(
        cl_classifier_classify_batch(c, 2, px, CL_PIXEL_U8, H, W, 3, pbatch));
    CHECK_NEAR(pbatch[0], pmem[0], 1e-5);
    CHECK_NEAR(pbatch[1], pmem[1], 1e-5);
    float second[2];
    CHECK_OK(cl_classifier_classify(c, px + H * W * 3, CL_PIXEL_U8, H, W, 3,
                                    second));
    CHECK_NEAR(pbatch[2], second[0], 1e-5);
    CHECK_NEAR(pbatch[3], second[1], 1e-5);
    const char *paths[] = {png, png};
    CHECK_OK(cl_classifier_classify_files(c, 2, paths, pfiles));
    CHECK_NEAR(pfiles[0], pfile[0], 1e-5);
    CHECK_NEAR(pfiles[3], pfile[1], 1e-5);
    /* 37 images: two full forwards and a padded one, each row its own. */
    enum { MANY = 37 };
    static uint8_t many[MANY * H * W * 3];
    static float pmany[MANY * 2];
    for (int i = 0; i < MANY; i++)
        memcpy(many + (size_t)i * H * W * 3, px + (size_t)(i % 2) * H * W * 3,
               (size_t)H * W * 3);
    CHECK_OK(cl_classifier_classify_batch(c, MANY, many, CL_PIXEL_U8, H, W, 3,
                                          pmany));
    for (int i = 0; i < MANY; i++) {
        const float *want = i % 2 ? second : pmem;
        CHECK_NEAR(pmany[2 * i], want[0], 1e-5);
        CHECK_NEAR(pmany[2 * i + 1], want[1], 1e-5);
    }
    /* Gray and any size: the checkpoint's pipeline converts. */
    CHECK_OK(cl_classifier_classify(c, px, CL_PIXEL_U8, 7, 300, 1, pgray));
    CHECK_NEAR(pgray[0] + pgray[1], 1.0, 1e-5);
    /* Top-k: sorted, named, clamped to the class count. */
    cl_prediction top[5];
    CHECK(cl_classifier_top_k(c, pfile, 5, top) == 2);
    CHECK(top[0].prob >= top[1].prob);
    CHECK(top[0].index != top[1].index);
    CHECK(strcmp(top[0].name, top[0].index ? "b" : "a") == 0);
    CHECK(cl_classifier_top_k(c, pfile, 1, top) == 1);
    /* Embeddings: the file and the pixels agree. */
    float *e1 = calloc(512, sizeof(float)), *e2 = calloc(512, sizeof(float));
    REQUIRE(e1 && e2);
    CHECK_OK(cl_classifier_embed_file(c, png, e1));
    CHECK_OK(cl_classifier_embed(c, px, CL_PIXEL_U8, H, W, 3, e2));
    CHECK(memcmp(e1, e2, 512 * sizeof(float)) == 0);
    /* Batches of features: each row its image's, up to rounding. */
    float *eb = calloc(3 * 512, sizeof(float));
    REQUIRE(eb);
    const char *three[] = {png, png, png};
    CHECK_OK(cl_classifier_embed_files(c, 3, three, eb));
    double dmax = 0;
    for (int i = 0; i < 3 * 512; i++)
        dmax = fmax(dmax, fabs(eb[i] - e1[i % 512]));
    CHECK(dmax < 1e-4);
    CHECK_OK(cl_classifier_embed_batch(c, 2, px, CL_PIXEL_U8, H, W, 3, eb));
    dmax = 0;
    for (int i = 0; i < 512; i++)
        dmax = fmax(dmax, fabs(eb[i] - e1[i]));
    CHECK(dmax < 1e-4);
    CHECK_ERR(cl_classifier_embed_files(c, 3, three, NULL), CL_ERR_ARG,
              "feat is NULL");
    const char *bad3[] = {png, "/nonexistent/x.png", png};
    CHECK_ERR(cl_classifier_embed_files(c, 3, bad3, eb), CL_ERR_IO, "image 1");
    free(eb);
    double norm = 0;
    for (int i = 0; i < 512; i++)
        norm += e1[i] * e1[i];
    CHECK(norm > 0 && isfinite(norm));
    free(e1);
    free(e2);
    /* `classic predict` prints what the API computes. */
    char args[2600];
    snprintf(args, sizeof args, "predict --checkpoint %s --json --top 1 %s", ck,
             png);
    REQUIRE(cl_test_classic(args) == 0);
    cl_json_doc *doc = NULL;
    REQUIRE_OK(
        cl_json_parse(&doc, cl_test_out, strlen(cl_test_out), NULL, "json"));
    const cl_json *t = cl_json_get(cl_json_root(doc)->child, "top");
    REQUIRE(t && t->count == 1);
    CHECK((int)cl_json_get(t->child, "index")->num == top[0].index);
    CHECK_NEAR(cl_json_get(t->child, "prob")->num, top[0].prob, 1e-6);
    cl_json_free(doc);
    cl_classifier_free(c);
}

/* The evaluation API: the split counted once, the confusion matrix adds
 * up to the samples and top-1, the features are those the classifier
 * computes for the same files, and `classic eval` / `embed` print and
 * write what it holds. */
CL_TEST(evaluate_a_split_and_keep_features)
{
    cl_status st;
    const char *ck = train_tiny("run_eval", 1, NULL, NULL, &st);
    REQUIRE_OK(st);
    const char *ov[] = {"limit_val=0"};
    cl_eval_opts o = {.size = sizeof o,
                      .batch = 3,
                      .overrides = ov,
                      .n_overrides = 1,
                      .keep_features = 1};
    cl_evaluation *e = NULL;
    REQUIRE_OK(cl_evaluation_run(&e, ck, &o));
    cl_eval_summary sum;
    REQUIRE_OK(cl_evaluation_summary(e, &sum));
    /* 2 images per class in val/, batch 3: the last batch is partial. */
    CHECK(sum.samples == 4);
    CHECK(sum.num_classes == 2 && sum.rank == 0 && sum.world_size == 1);
    CHECK(sum.top1 >= 0 && sum.top1 <= 1 && sum.top5 == 1.0);
    CHECK(isfinite(sum.loss) && sum.loss > 0);
    long long total = 0, right = 0;
    for (int t = 0; t < 2; t++)
        for (int p = 0; p < 2; p++) {
            long long n = cl_evaluation_confusion(e, t, p);
            CHECK(n >= 0);
            total += n;
            right += t == p ? n : 0;
        }
    CHECK(total == 4);
    CHECK_NEAR(sum.top1, right / 4.0, 1e-12);
    CHECK(cl_evaluation_confusion(e, 2, 0) == -1);
    CHECK(strcmp(cl_evaluation_class_name(e, 1), "b") == 0);
    CHECK(cl_evaluation_class_name(e, 2) == NULL);
    long long n = 0;
    int dim = 0;
    const float *f = cl_evaluation_features(e, &n, &dim);
    const long long *lab = cl_evaluation_labels(e);
    REQUIRE(f && lab && n == 4 && dim == 512);
    int per_class[2] = {0, 0};
    for (long long i = 0; i < n; i++)
        if (lab[i] == 0 || lab[i] == 1)
            per_class[lab[i]]++;
    CHECK(per_class[0] == 2 && per_class[1] == 2);
    /* Row 0 is the split's first image: the classifier agrees. */
    const char *gallery = cl_test_path("g.safetensors");
    REQUIRE_OK(cl_evaluation_save_features(e, gallery));
    cl_classifier *c = NULL;
    REQUIRE_OK(cl_classifier_load(&c, ck, NULL, NULL));
    char first[1200];
    CHECK(lab[0] == 0);
    snprintf(first, sizeof first, "%s/val/a/0.jpg", cl_test_path("folder"));
    float one[512];
    if (cl_classifier_embed_file(c, first, one) == CL_OK) {
        double d = 0;
        for (int i = 0; i < 512; i++)
            d = fmax(d, fabs(one[i] - f[i]));
        CHECK(d < 1e-4);
    } else
        CHECK(!"the first gallery image opens");
    cl_classifier_free(c);
    char path[1400];
    snprintf(path, sizeof path, "%s", cl_test_path("confusion.csv"));
    CHECK_OK(cl_evaluation_write_csv(e, path));
    FILE *tmp = tmpfile();
    REQUIRE(tmp);
    CHECK_OK(cl_evaluation_print(e, tmp));
    fclose(tmp);
    cl_evaluation_free(e);

    /* The CLI prints the same top-1 and writes the same gallery rows. */
    char args[3000], want[64];
    snprintf(args, sizeof args, "eval --checkpoint %s --batch 3", ck);
    REQUIRE(cl_test_classic(args) == 0);
    snprintf(want, sizeof want, "(4 samples)");
    CHECK(strstr(cl_test_out, want) != NULL);
    snprintf(args, sizeof args, "embed --checkpoint %s --batch 5 --out %s", ck,
             cl_test_path("g2.safetensors"));
    REQUIRE(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "4 features of dimension 512") != NULL);

    /* Failures: one sentence each, nothing returned. */
    e = (cl_evaluation *)1;
    CHECK_ERR(cl_evaluation_run(&e, NULL, NULL), CL_ERR_ARG, "path is NULL");
    CHECK(e == NULL);
    CHECK_ERR(cl_evaluation_run(NULL, ck, NULL), CL_ERR_ARG, "out is NULL");
    const char *bad[] = {"no_equals_sign"};
    cl_eval_opts ob = {.size = sizeof ob, .overrides = bad, .n_overrides = 1};
    CHECK_ERR(cl_evaluation_run(&e, ck, &ob), CL_ERR_ARG, "expected key=value");
    const char *unknown[] = {"no_such_key=1"};
    ob.overrides = unknown;
    CHECK(cl_evaluation_run(&e, ck, &ob) != CL_OK);
    CHECK(strstr(cl_last_error(), "no_such_key") != NULL);
    cl_eval_opts os = {.size = sizeof os, .split = "nowhere"};
    CHECK(cl_evaluation_run(&e, ck, &os) != CL_OK);
    CHECK(strstr(cl_last_error(), "nowhere") != NULL);
    CHECK(e == NULL);
    cl_eval_opts nf = {.size = sizeof nf, .batch = 4};
    REQUIRE_OK(cl_evaluation_run(&e, ck, &nf));
    CHECK(cl_evaluation_features(e, &n, &dim) == NULL && n == 0);
    CHECK_ERR(cl_evaluation_save_features(e, gallery), CL_ERR_ARG,
              "keep_features");
    CHECK_ERR(cl_evaluation_summary(e, NULL), CL_ERR_ARG, "is NULL");
    cl_evaluation_free(e);
    cl_evaluation_free(NULL);
}

/* A network by name: torchvision's parameter counts and multiply-adds,
 * the layer table, a seeded initialisation, and backend "none" that
 * describes without running. */
CL_TEST(create_by_arch_name)
{
    const char *r50[] = {"model=resnet50", "num_classes=1000",
                         "image_size=224"};
    cl_classifier *c = NULL;
    REQUIRE_OK(cl_classifier_create(&c, NULL, r50, 3, "none"));
    CHECK(cl_classifier_num_params(c) == 25557032);
    CHECK(cl_classifier_macs(c) > 4080000000LL &&
          cl_classifier_macs(c) < 4110000000LL);
    CHECK(cl_classifier_num_classes(c) == 1000);
    CHECK(strcmp(cl_classifier_class_name(c, 0), "tench") == 0);
    CHECK(cl_classifier_embed_dim(c) == 2048);
    FILE *tmp = tmpfile();
    REQUIRE(tmp);
    CHECK_OK(cl_classifier_print(c, tmp));
    long len = ftell(tmp);
    fclose(tmp);
    CHECK(len > 5000);
    float probs[1000];
    uint8_t px[8 * 8 * 3] = {0};
    CHECK_ERR(cl_classifier_classify(c, px, CL_PIXEL_U8, 8, 8, 3, probs),
              CL_ERR_ARG, "backend \"none\"");
    cl_classifier_free(c);

    /* Runnable, from YAML text plus overrides; the same seed gives the
     * same network, another seed another. */
    const char *yaml = "model: resnet18\nstem: cifar\nin_channels: 1\n"
                       "image_size: 28\nnum_classes: 10\n";
    const char *s1[] = {"seed=3"}, *s2[] = {"seed=4"};
    cl_classifier *a = NULL, *b = NULL, *d = NULL;
    REQUIRE_OK(cl_classifier_create(&a, yaml, s1, 1, "ref"));
    REQUIRE_OK(cl_classifier_create(&b, yaml, s1, 1, "ref"));
    REQUIRE_OK(cl_classifier_create(&d, yaml, s2, 1, "ref"));
    CHECK(cl_classifier_num_params(a) == 11172810);
    int ch = 0, side = 0;
    CHECK_OK(cl_classifier_input(a, &ch, &side));
    CHECK(ch == 1 && side == 28);
    CHECK(strcmp(cl_classifier_class_name(a, 3), "class 3") == 0);
    uint8_t g[28 * 28];
    picture(g, 28, 28, 1);
    float pa[10], pb[10], pd[10];
    CHECK_OK(cl_classifier_classify(a, g, CL_PIXEL_U8, 28, 28, 1, pa));
    CHECK_OK(cl_classifier_classify(b, g, CL_PIXEL_U8, 28, 28, 1, pb));
    CHECK_OK(cl_classifier_classify(d, g, CL_PIXEL_U8, 28, 28, 1, pd));
    CHECK(memcmp(pa, pb, sizeof pa) == 0);
    CHECK(memcmp(pa, pd, sizeof pa) != 0);
    cl_classifier_free(a);
    cl_classifier_free(b);
    cl_classifier_free(d);

    const char *bad[] = {"model=resnet51"};
    CHECK_ERR(cl_classifier_create(&c, NULL, bad, 1, "none"), CL_ERR_CONFIG,
              "resnet51");
    CHECK(c == NULL);
    CHECK_ERR(cl_classifier_create(&c, NULL, NULL, 2, "none"), CL_ERR_ARG,
              "the list is NULL");
    CHECK_ERR(cl_classifier_create(NULL, NULL, NULL, 0, "none"), CL_ERR_ARG,
              "out is NULL");
    CHECK_ERR(cl_classifier_print(NULL, stdout), CL_ERR_ARG, "is NULL");
    CHECK(cl_classifier_num_params(NULL) == 0 && cl_classifier_macs(NULL) == 0);
}

CL_TEST(failures_are_one_sentence)
{
    cl_classifier *c = NULL;
    float probs[8], feat[8];
    uint8_t px[16 * 16 * 3] = {0};
    cl_prediction top[2];
    /* Before any model: NULL handles and bad files. */
    CHECK_ERR(cl_classifier_load(NULL, "x", NULL, NULL), CL_ERR_ARG, "out");
    CHECK_ERR(cl_classifier_load(&c, NULL, NULL, NULL), CL_ERR_ARG, "path");
    CHECK(cl_classifier_load(&c, cl_test_path("none.safetensors"), NULL,
                             NULL) != CL_OK);
    CHECK(c == NULL);
    CHECK(strstr(cl_last_error(), "none.safetensors") != NULL);
    FILE *f = fopen(cl_test_path("junk.safetensors"), "wb");
    REQUIRE(f);
    fputs("not a checkpoint at all", f);
    fclose(f);
    CHECK(cl_classifier_load(&c, cl_test_path("junk.safetensors"), NULL,
                             NULL) != CL_OK);
    CHECK(strstr(cl_last_error(), "junk.safetensors") != NULL);
    CHECK(cl_classifier_num_classes(NULL) == 0);
    CHECK(cl_classifier_embed_dim(NULL) == 0);
    CHECK(cl_classifier_class_name(NULL, 0) == NULL);
    CHECK_ERR(cl_classifier_input(NULL, NULL, NULL), CL_ERR_ARG, "NULL");
    CHECK_ERR(cl_classifier_classify_file(NULL, "x.png", probs), CL_ERR_ARG,
              "classifier is NULL");
    CHECK_ERR(cl_classifier_classify(NULL, px, CL_PIXEL_U8, 16, 16, 3, probs),
              CL_ERR_ARG, "classifier is NULL");
    CHECK_ERR(cl_classifier_embed(NULL, px, CL_PIXEL_U8, 16, 16, 3, feat),
              CL_ERR_ARG, "classifier is NULL");
    CHECK_ERR(cl_classifier_embed_file(NULL, "x.png", feat), CL_ERR_ARG,
              "classifier is NULL");
    CHECK_ERR(cl_classifier_top_k(NULL, probs, 1, top), CL_ERR_ARG,
              "classifier is NULL");
    cl_classifier_free(NULL);
    /* With a model: bad images and arguments. */
    cl_status st;
    const char *ck = train_tiny("run", 1, NULL, NULL, &st);
    REQUIRE_OK(st);
    CHECK(cl_classifier_load(&c, ck, "resnet50", NULL) != CL_OK && !c);
    CHECK(strstr(cl_last_error(), "resnet") != NULL);
    REQUIRE_OK(cl_classifier_load(&c, ck, NULL, NULL));
    CHECK(cl_classifier_class_name(c, 2) == NULL);
    CHECK(cl_classifier_class_name(c, -1) == NULL);
    CHECK(cl_classifier_classify_file(c, cl_test_path("no.png"), probs) ==
          CL_ERR_IO);
    CHECK(strstr(cl_last_error(), "no.png") != NULL);
    CHECK_ERR(cl_classifier_classify(c, px, CL_PIXEL_U8, 16, 16, 2, probs),
              CL_ERR_SHAPE, "2 channels");
    CHECK_ERR(cl_classifier_classify(c, px, CL_PIXEL_U8, 0, 16, 3, probs),
              CL_ERR_SHAPE, "0 x 16");
    CHECK_ERR(cl_classifier_classify(c, px, (cl_pixel_type)7, 16, 16, 3, probs),
              CL_ERR_ARG, "pixel type 7");
    CHECK_ERR(cl_classifier_classify(c, NULL, CL_PIXEL_U8, 16, 16, 3, probs),
              CL_ERR_ARG, "pixels is NULL");
    CHECK_ERR(cl_classifier_classify(c, px, CL_PIXEL_U8, 16, 16, 3, NULL),
              CL_ERR_ARG, "probs is NULL");
    CHECK_ERR(
        cl_classifier_classify(c, px, CL_PIXEL_U8, 100000, 100000, 3, probs),
        CL_ERR_LIMIT, "limit");
    CHECK_ERR(cl_classifier_embed(c, px, CL_PIXEL_U8, 16, 16, 4, feat),
              CL_ERR_SHAPE, "4 channels");
    CHECK_ERR(cl_classifier_embed_file(c, "x.png", NULL), CL_ERR_ARG, "NULL");
    CHECK_ERR(
        cl_classifier_classify_batch(c, 2, px, CL_PIXEL_U8, 4, 4, 5, probs),
        CL_ERR_SHAPE, "image 0");
    CHECK_ERR(
        cl_classifier_classify_batch(c, -1, px, CL_PIXEL_U8, 4, 4, 3, probs),
        CL_ERR_ARG, "negative");
    const char *paths[] = {cl_test_path("no.png")};
    CHECK(cl_classifier_classify_files(c, 1, paths, probs) == CL_ERR_IO);
    CHECK_ERR(cl_classifier_classify_files(c, 1, NULL, probs), CL_ERR_ARG,
              "paths is NULL");
    probs[0] = 0.25f;
    probs[1] = 0.75f;
    CHECK(cl_classifier_top_k(c, probs, 0, top) == CL_ERR_ARG);
    CHECK(strstr(cl_last_error(), "k = 0") != NULL);
    CHECK(cl_classifier_top_k(c, NULL, 1, top) == CL_ERR_ARG);
    CHECK(cl_classifier_top_k(c, probs, 2, top) == 2 && top[0].index == 1);
    /* The handle still works after the failures. */
    CHECK_OK(cl_classifier_classify(c, px, CL_PIXEL_U8, 16, 16, 3, probs));
    cl_classifier_free(c);
    CHECK(strcmp(cl_version(), CL_VERSION_STRING) == 0);
    CHECK(strcmp(cl_status_name(CL_ERR_SHAPE), "CL_ERR_SHAPE") == 0);
    CHECK(strcmp(cl_status_name((cl_status)-999), "CL_UNKNOWN") == 0);
    CHECK(strcmp(cl_status_message(CL_ERR_ARG), "invalid argument") == 0);
    CHECK(cl_last_error()[0] != '\0');
    cl_clear_error();
    CHECK(cl_last_error()[0] == '\0');
}

typedef struct worker {
    cl_classifier *c;
    const uint8_t *px;
    float probs[2];
    cl_status st;
} worker;

static void *classify_in_thread(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < 3 && w->st == CL_OK; i++)
        w->st = cl_classifier_classify(w->c, w->px, CL_PIXEL_U8, 24, 30, 3,
                                       w->probs);
    return NULL;
}

/* Distinct handles may run at once in distinct threads (the header's
 * promise): each gives what it gives alone. */
CL_TEST(two_handles_in_two_threads)
{
    cl_status st;
    const char *ck = train_tiny("run", 1, NULL, NULL, &st);
    REQUIRE_OK(st);
    static uint8_t px[2][24 * 30 * 3];
    picture(px[0], 24, 30, 3);
    for (int i = 0; i < 24 * 30 * 3; i++)
        px[1][i] = (uint8_t)(255 - px[0][i]);
    worker w[2];
    float alone[2][2];
    memset(w, 0, sizeof w);
    for (int k = 0; k < 2; k++) {
        REQUIRE_OK(cl_classifier_load(&w[k].c, ck, NULL, NULL));
        w[k].px = px[k];
        REQUIRE_OK(cl_classifier_classify(w[k].c, px[k], CL_PIXEL_U8, 24, 30, 3,
                                          alone[k]));
    }
    pthread_t t[2];
    for (int k = 0; k < 2; k++)
        REQUIRE(pthread_create(&t[k], NULL, classify_in_thread, &w[k]) == 0);
    for (int k = 0; k < 2; k++)
        pthread_join(t[k], NULL);
    for (int k = 0; k < 2; k++) {
        CHECK_OK(w[k].st);
        /* Near, not equal: OpenMP may give a nested team other sizes. */
        CHECK_NEAR(w[k].probs[0], alone[k][0], 1e-5);
        CHECK_NEAR(w[k].probs[1], alone[k][1], 1e-5);
        cl_classifier_free(w[k].c);
    }
}
