/* Data: IDX reader (plain, gzip, every malformed case), the real
 * Fashion-MNIST, and the transforms on small images.
 * ctest-labels: unit data */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/mem.h"
#include "data/data.h"
#include "harness.h"
#include "io/config.h"
#include "test_data_fixtures.h"

/* A directory with train (n_train) and t10k (n_test) IDX files. */
static const char *make_idx_dir(const char *name, int n_train, int n_test,
                                int gz)
{
    static char dir[1024];
    char p[1200];
    snprintf(dir, sizeof dir, "%s", cl_test_path(name));
    mkdir(dir, 0755);
    const char *ext = gz ? ".gz" : "";
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte%s", dir, ext);
    fx_idx_images(p, n_train, 6, 5, gz, 0, 0, 0);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte%s", dir, ext);
    fx_idx_labels(p, n_train, 10, gz, -1);
    snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte%s", dir, ext);
    fx_idx_images(p, n_test, 6, 5, gz, 0, 0, 0);
    snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte%s", dir, ext);
    fx_idx_labels(p, n_test, 10, gz, -1);
    return dir;
}

static cl_status open_idx(cl_dataset **ds, const char *fmt, const char *path,
                          cl_data_usage usage)
{
    cl_dataset_spec sp = cl_dataset_spec_default();
    sp.format = fmt;
    sp.path = path;
    sp.usage = usage;
    return cl_dataset_open(ds, &sp);
}

static void check_idx_contents(int gz)
{
    const char *dir = make_idx_dir(gz ? "idxgz" : "idx", 20, 7, gz);
    cl_dataset *ds = NULL;
    REQUIRE_OK(open_idx(&ds, "fashion_mnist", dir, CL_USAGE_TRAIN));
    CHECK(cl_dataset_count(ds) == 20);
    CHECK(cl_dataset_num_classes(ds) == 10);
    CHECK(strcmp(cl_dataset_class_name(ds, 0), "T-shirt/top") == 0);
    CHECK(strcmp(cl_dataset_class_name(ds, 9), "Ankle boot") == 0);
    int h, w, c;
    cl_dataset_image_dims(ds, &h, &w, &c);
    CHECK(h == 6 && w == 5 && c == 1);
    cl_image img = {0};
    int bad = 0;
    for (int i = 0; i < 20; i++) {
        int32_t lab = -1;
        REQUIRE_OK(cl_dataset_get(ds, i, 0, &img, &lab));
        CHECK(lab == fx_label(i, 10));
        CHECK(cl_dataset_label(ds, i) == lab);
        for (int y = 0; y < 6; y++)
            for (int x = 0; x < 5; x++)
                bad += img.data[y * 5 + x] != fx_pix(i, y, x);
    }
    CHECK(bad == 0);
    cl_dataset_close(ds);

    REQUIRE_OK(open_idx(&ds, "mnist", dir, CL_USAGE_TEST));
    CHECK(cl_dataset_count(ds) == 7);
    CHECK(strcmp(cl_dataset_class_name(ds, 3), "3") == 0);
    cl_dataset_close(ds);

    REQUIRE_OK(open_idx(&ds, "mnist", dir, CL_USAGE_ALL));
    CHECK(cl_dataset_count(ds) == 27);
    int32_t lab;
    REQUIRE_OK(cl_dataset_get(ds, 21, 0, &img, &lab));
    CHECK(lab == fx_label(1, 10)); /* test sample 1 follows the 20 train */
    CHECK(img.data[0] == fx_pix(1, 0, 0));
    CHECK_ERR(cl_dataset_get(ds, 27, 0, &img, &lab), CL_ERR_ARG, "outside");
    cl_dataset_close(ds);
    cl_image_free(&img);
}

CL_TEST(idx_plain)
{
    check_idx_contents(0);
}

CL_TEST(idx_gzip)
{
    check_idx_contents(1);
}

CL_TEST(idx_file_and_prefix_paths)
{
    make_idx_dir("idxp", 9, 4, 1);
    char p[1200];
    cl_dataset *ds = NULL;
    snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte.gz", cl_test_path("idxp"));
    REQUIRE_OK(open_idx(&ds, NULL, p, CL_USAGE_TRAIN));
    CHECK(cl_dataset_count(ds) == 4);
    cl_dataset_close(ds);
    snprintf(p, sizeof p, "%s/train-", cl_test_path("idxp"));
    REQUIRE_OK(open_idx(&ds, "idx", p, CL_USAGE_TRAIN));
    CHECK(cl_dataset_count(ds) == 9);
    cl_dataset_close(ds);
    /* The format is guessed from a directory of IDX files. */
    REQUIRE_OK(open_idx(&ds, NULL, cl_test_path("idxp"), CL_USAGE_TEST));
    CHECK(cl_dataset_count(ds) == 4);
    CHECK(strcmp(cl_dataset_format(ds), "idx") == 0);
    cl_dataset_close(ds);
}

/* data/formats.def is the one list of formats: each opens by its name and
 * its other spelling and reports its name; an unknown one is refused with
 * the list; a recipe's dataset values are the lines marked for recipes. */
CL_TEST(formats_open_by_either_spelling)
{
    make_idx_dir("idxn", 6, 3, 0);
    const char *dir = cl_test_path("idxn");
    static const char *const cases[][2] = {
        {"mnist", "mnist"},
        {"idx", "idx"},
        {"fashion_mnist", "fashion_mnist"},
        {"fashion-mnist", "fashion_mnist"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cl_dataset *ds = NULL;
        REQUIRE_OK(open_idx(&ds, cases[i][0], dir, CL_USAGE_TRAIN));
        CHECK(strcmp(cl_dataset_format(ds), cases[i][1]) == 0);
        cl_dataset_close(ds);
    }
    cl_dataset *ds = NULL;
    CHECK_ERR(open_idx(&ds, "cifar1000", dir, CL_USAGE_TRAIN), CL_ERR_ARG,
              "'cifar1000': expected one of fashion_mnist, mnist, idx, "
              "cifar10, cifar100, imagefolder");
    CHECK(ds == NULL);
    CHECK(strcmp(cl_config_enum_name("dataset", CL_CFG_DATASET_MNIST),
                 "mnist") == 0);
    CHECK(strcmp(cl_config_enum_name("dataset", CL_CFG_DATASET_IMAGEFOLDER),
                 "imagefolder") == 0);
    CHECK(cl_config_enum_name("dataset", CL_CFG_DATASET_IMAGEFOLDER + 1) ==
          NULL);
}

/* Writes a broken images file next to good labels and opens it. */
static cl_status open_broken(const char *name, int gz, int extra, int cut,
                             uint32_t magic, int rows)
{
    char p[1200];
    const char *dir = cl_test_path(name);
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte%s", dir, gz ? ".gz" : "");
    fx_idx_images(p, 10, rows, 4, gz, extra, cut, magic);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte", dir);
    fx_idx_labels(p, 10, 10, 0, -1);
    cl_dataset *ds = NULL;
    cl_status s = open_idx(&ds, "mnist", dir, CL_USAGE_TRAIN);
    cl_dataset_close(ds);
    return s;
}

CL_TEST(idx_bad_magic)
{
    CHECK_ERR(open_broken("m1", 1, 0, 0, 0x00000801u, 4), CL_ERR_FORMAT,
              "train-images-idx3-ubyte.gz: IDX magic is 0x00000801, "
              "expected 0x00000803 (images)");
}

CL_TEST(idx_truncated)
{
    CHECK_ERR(open_broken("t1", 0, 0, 5, 0, 4), CL_ERR_FORMAT,
              "train-images-idx3-ubyte: truncated: header says 10 images "
              "of 4x4 (160 bytes of pixels), file holds 155");
    CHECK_ERR(open_broken("t2", 1, 0, 5, 0, 4), CL_ERR_FORMAT, "truncated");
    /* A file shorter than the header. */
    CHECK_ERR(open_broken("t3", 0, 0, 16 + 160 - 3, 0, 4), CL_ERR_FORMAT,
              "shorter than an IDX header");
}

CL_TEST(idx_truncated_gzip_stream)
{
    /* A gzip stream cut in the middle (not just short content). */
    char p[1200], q[1200];
    const char *dir = cl_test_path("tg");
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/full.gz", dir);
    fx_idx_images(p, 50, 20, 20, 1, 0, 0, 0);
    FILE *f = fopen(p, "rb");
    REQUIRE(f);
    static uint8_t buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    REQUIRE(n > 100);
    snprintf(q, sizeof q, "%s/train-images-idx3-ubyte.gz", dir);
    REQUIRE(fx_write(q, buf, n / 2, 0) == 0);
    snprintf(q, sizeof q, "%s/train-labels-idx1-ubyte", dir);
    fx_idx_labels(q, 50, 10, 0, -1);
    cl_dataset *ds = NULL;
    CHECK_ERR(open_idx(&ds, "mnist", dir, CL_USAGE_TRAIN), CL_ERR_FORMAT,
              "train-images-idx3-ubyte.gz: truncated");
    CHECK(ds == NULL);
}

CL_TEST(idx_oversized)
{
    CHECK_ERR(open_broken("o1", 0, 7, 0, 0, 4), CL_ERR_FORMAT,
              "train-images-idx3-ubyte: oversized: 7 bytes after the 10 "
              "images");
}

CL_TEST(idx_bad_dims)
{
    CHECK_ERR(open_broken("d1", 0, 0, 0, 0, 0), CL_ERR_FORMAT,
              "IDX dims 10 x 0 x 4 are out of range");
    /* Hostile dims: 2^31-1 images of 4096x4096 in a tiny file. */
    char p[1200];
    const char *dir = cl_test_path("d2");
    mkdir(dir, 0755);
    uint8_t h[16 + 64];
    memset(h, 0, sizeof h);
    fx_be32(h, 0x803);
    fx_be32(h + 4, 0x7fffffffu);
    fx_be32(h + 8, 4096);
    fx_be32(h + 12, 4096);
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", dir);
    REQUIRE(fx_write(p, h, sizeof h, 0) == 0);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte", dir);
    fx_idx_labels(p, 10, 10, 0, -1);
    cl_dataset *ds = NULL;
    CHECK_ERR(open_idx(&ds, "mnist", dir, CL_USAGE_TRAIN), CL_ERR_FORMAT,
              "truncated: header says 2147483647 images of 4096x4096");
    /* More than 3 dims in the magic. */
    CHECK_ERR(open_broken("d3", 0, 0, 0, 0x00000804u, 4), CL_ERR_FORMAT,
              "IDX magic is 0x00000804");
}

CL_TEST(idx_bad_labels)
{
    char p[1200];
    const char *dir = cl_test_path("l1");
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", dir);
    fx_idx_images(p, 10, 4, 4, 0, 0, 0, 0);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte", dir);
    fx_idx_labels(p, 10, 10, 0, 6);
    cl_dataset *ds = NULL;
    CHECK_ERR(open_idx(&ds, "fashion_mnist", dir, CL_USAGE_TRAIN),
              CL_ERR_FORMAT,
              "train-labels-idx1-ubyte: label 10 of sample 6 is >= 10 "
              "classes");
    fx_idx_labels(p, 9, 10, 0, -1);
    CHECK_ERR(open_idx(&ds, "mnist", dir, CL_USAGE_TRAIN), CL_ERR_FORMAT,
              "IDX dims say 9 labels, the images file has 10");
    /* Images and labels swapped. */
    char q[1200];
    snprintf(q, sizeof q, "%s/train-images-idx3-ubyte", dir);
    fx_idx_labels(q, 10, 10, 0, -1);
    CHECK_ERR(open_idx(&ds, "mnist", dir, CL_USAGE_TRAIN), CL_ERR_FORMAT,
              "IDX magic is 0x00000801, expected 0x00000803 (images)");
    CHECK_ERR(open_idx(&ds, "mnist", cl_test_path("nothing"), CL_USAGE_TRAIN),
              CL_ERR_IO, "no IDX files there");
}

CL_TEST(fashion_mnist_real)
{
    /* The install script installs Debian's dataset-fashion-mnist: its
     * absence is a failure, not a skip. */
    cl_dataset *ds = NULL;
    REQUIRE_OK(open_idx(&ds, "fashion_mnist", NULL, CL_USAGE_TRAIN));
    CHECK(cl_dataset_count(ds) == 60000);
    int64_t per[10] = {0};
    int out = 0;
    for (int64_t i = 0; i < cl_dataset_count(ds); i++) {
        int32_t l = cl_dataset_label(ds, i);
        if (l < 0 || l > 9)
            out++;
        else
            per[l]++;
    }
    CHECK(out == 0);
    for (int k = 0; k < 10; k++)
        CHECK(per[k] == 6000);
    int h, w, c;
    cl_dataset_image_dims(ds, &h, &w, &c);
    CHECK(h == 28 && w == 28 && c == 1);
    CHECK(strcmp(cl_dataset_class_name(ds, 7), "Sneaker") == 0);
    cl_dataset_close(ds);
    REQUIRE_OK(open_idx(&ds, "fashion_mnist", CL_DATASET_FASHION_MNIST_DIR,
                        CL_USAGE_TEST));
    CHECK(cl_dataset_count(ds) == 10000);
    /* Two shards of the test split through the train pipeline with
     * channel repetition (a 3-channel model): 5000 each, 19 full batches
     * of 256 with drop_remainder. */
    const float mean[3] = {0.2860f, 0.2860f, 0.2860f};
    const float std[3] = {0.3530f, 0.3530f, 0.3530f};
    cl_transform_opts to =
        cl_transform_opts_small_train(3, 28, 28, 4, 0.5f, mean, std);
    cl_transforms *tf = NULL;
    REQUIRE_OK(cl_transforms_create(&tf, &to));
    int64_t total = 0, bad = 0;
    for (int k = 0; k < 2; k++) {
        cl_loader_opts o;
        memset(&o, 0, sizeof o);
        o.dataset = ds;
        o.tf = tf;
        o.batch_size = 256;
        o.shuffle = 1;
        o.seed = 42;
        o.num_shards = 2;
        o.shard_id = k;
        o.drop_remainder = 1;
        o.workers = 2;
        cl_loader *ld = NULL;
        REQUIRE_OK(cl_loader_create(&ld, &o));
        CHECK(cl_loader_batches_per_epoch(ld) == 19);
        REQUIRE_OK(cl_loader_start_epoch(ld, 0));
        for (;;) {
            cl_batch b;
            REQUIRE_OK(cl_loader_next(ld, &b));
            if (b.n == 0)
                break;
            total += b.n;
            for (int i = 0; i < b.n; i++) {
                const float *x = b.x + (size_t)i * 3 * 784;
                bad += b.labels[i] < 0 || b.labels[i] > 9;
                bad += x[100] != x[784 + 100] || x[100] != x[2 * 784 + 100];
                bad += !(x[300] >= -0.82f && x[300] <= 2.03f);
            }
        }
        cl_loader_destroy(ld);
    }
    CHECK(total == 2 * 19 * 256);
    CHECK(bad == 0);
    cl_transforms_destroy(tf);
    cl_dataset_close(ds);
}

/* ---------------------------------------------------------- transforms */

static void fill_image(cl_image *img, int h, int w, int c)
{
    REQUIRE_OK(cl_image_reserve(img, h, w, c));
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++)
                img->data[(y * w + x) * c + k] =
                    (uint8_t)(y * 17 + x * 5 + k * 60);
}

CL_TEST(transforms_eval_identity_normalize)
{
    cl_image img = {0};
    fill_image(&img, 8, 6, 3);
    const float mean[3] = {0.1f, 0.2f, 0.3f}, std[3] = {0.5f, 0.25f, 2};
    cl_transform_opts o = cl_transform_opts_small_eval(3, 8, 6, mean, std);
    cl_transforms *tf = NULL;
    REQUIRE_OK(cl_transforms_create(&tf, &o));
    CHECK(!cl_transforms_is_random(tf));
    float out[3 * 8 * 6];
    REQUIRE_OK(cl_transforms_apply(tf, &img, NULL, NULL, out));
    double err = 0;
    for (int k = 0; k < 3; k++)
        for (int y = 0; y < 8; y++)
            for (int x = 0; x < 6; x++) {
                float v = img.data[(y * 6 + x) * 3 + k] / 255.0f;
                float e = (v - mean[k]) / std[k];
                err = fmax(err, fabs(out[(k * 8 + y) * 6 + x] - e));
            }
    CHECK(err < 1e-5);
    /* Wrong size without resize or crop is a clear error. */
    fill_image(&img, 9, 6, 3);
    CHECK_ERR(cl_transforms_apply(tf, &img, NULL, NULL, out), CL_ERR_SHAPE,
              "image is 9x6, the transforms want 8x6");
    cl_transforms_destroy(tf);
    cl_image_free(&img);
}

CL_TEST(transforms_channel_repeat)
{
    cl_image img = {0};
    fill_image(&img, 5, 5, 1);
    cl_transform_opts o = cl_transform_opts_small_eval(3, 5, 5, NULL, NULL);
    o.normalize = 0;
    cl_transforms *tf = NULL;
    REQUIRE_OK(cl_transforms_create(&tf, &o));
    float out[3 * 25];
    REQUIRE_OK(cl_transforms_apply(tf, &img, NULL, NULL, out));
    int bad = 0;
    for (int i = 0; i < 25; i++)
        for (int k = 0; k < 3; k++)
            bad += out[k * 25 + i] != img.data[i] / 255.0f;
    CHECK(bad == 0);
    cl_transforms_destroy(tf);
    /* RGB -> 1 channel is luma. */
    fill_image(&img, 5, 5, 3);
    o.out_c = 1;
    REQUIRE_OK(cl_transforms_create(&tf, &o));
    REQUIRE_OK(cl_transforms_apply(tf, &img, NULL, NULL, out));
    const uint8_t *p = img.data + 3 * 7;
    CHECK_NEAR(out[7], (0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2]) / 255,
               1e-5);
    cl_transforms_destroy(tf);
    cl_image_free(&img);
}

/* RandomCrop(ch x cw, padding) and flip, after a Resize to rh x rw when
 * rh > 0 (as torchvision composes them): every output is the resized
 * image (made by the same transforms without the crop) at an offset within
 * the padded image, zero where the crop leaves it, and maybe mirrored. */
static void random_crops(int H, int W, int C, int rh, int rw, int ch, int cw,
                         int pad, int interp)
{
    cl_image img = {0};
    fill_image(&img, H, W, C);
    const int RH = rh ? rh : H, RW = rw ? rw : W;
    cl_transform_opts e = cl_transform_opts_small_eval(C, RH, RW, NULL, NULL);
    e.normalize = 0;
    e.resize_h = rh;
    e.resize_w = rw;
    e.interpolation = interp;
    cl_transform_opts o = e;
    o.out_h = ch;
    o.out_w = cw;
    o.random_crop = 1;
    o.random_crop_pad = pad;
    o.hflip_prob = 0.5f;
    cl_transforms *te = NULL, *tf = NULL;
    REQUIRE_OK(cl_transforms_create(&te, &e));
    REQUIRE_OK(cl_transforms_create(&tf, &o));
    CHECK(cl_transforms_is_random(tf));
    float *ref = malloc((size_t)C * RH * RW * sizeof *ref),
          *out = malloc((size_t)C * ch * cw * sizeof *out);
    REQUIRE(ref && out);
    REQUIRE_OK(cl_transforms_apply(te, &img, NULL, NULL, ref));
    const int ylast = RH + pad - ch, xlast = RW + pad - cw;
    int mismatch = 0, flipped = 0, edge = 0;
    for (int t = 0; t < 100; t++) {
        cl_rng r;
        cl_rng_init(&r, 9, (uint64_t)t);
        REQUIRE_OK(cl_transforms_apply(tf, &img, &r, NULL, out));
        int found = 0;
        for (int f = 0; f < 2 && !found; f++)
            for (int dy = -pad; dy <= ylast && !found; dy++)
                for (int dx = -pad; dx <= xlast && !found; dx++) {
                    int good = 1;
                    for (int c = 0; c < C && good; c++)
                        for (int y = 0; y < ch && good; y++)
                            for (int x = 0; x < cw && good; x++) {
                                int sx = (f ? cw - 1 - x : x) + dx, sy = y + dy;
                                float want =
                                    (sy < 0 || sy >= RH || sx < 0 || sx >= RW)
                                        ? 0.0f
                                        : ref[((size_t)c * RH + sy) * RW + sx];
                                good =
                                    fabsf(out[((size_t)c * ch + y) * cw + x] -
                                          want) <= 1e-5f;
                            }
                    if (good) {
                        found = 1;
                        flipped += f;
                        edge += dy == -pad || dy == ylast;
                    }
                }
        mismatch += !found;
    }
    CHECK(mismatch == 0);
    CHECK(flipped > 25 && flipped < 75);
    CHECK(edge > 0);
    /* An RNG is required for a random pipeline. */
    CHECK_ERR(cl_transforms_apply(tf, &img, NULL, NULL, out), CL_ERR_ARG,
              "needs an RNG");
    free(ref);
    free(out);
    cl_transforms_destroy(te);
    cl_transforms_destroy(tf);
    cl_image_free(&img);
}

CL_TEST(transforms_random_crop_pad_and_flip)
{
    random_crops(12, 10, 1, 0, 0, 12, 10, 3, CL_INTERP_BILINEAR);
    random_crops(9, 7, 3, 0, 0, 9, 7, 2, CL_INTERP_BILINEAR);
    random_crops(12, 10, 1, 0, 0, 8, 6, 1, CL_INTERP_BILINEAR);
}

CL_TEST(transforms_resize_then_random_crop)
{
    /* Up and down, bilinear and bicubic, gray and RGB; crops of the
     * resized size, smaller (offsets past the padding) and larger (padding
     * on both sides at once). */
    random_crops(12, 10, 1, 18, 16, 18, 16, 3, CL_INTERP_BILINEAR);
    random_crops(12, 10, 3, 18, 16, 18, 16, 2, CL_INTERP_BICUBIC);
    random_crops(20, 24, 1, 9, 11, 9, 11, 2, CL_INTERP_BILINEAR);
    random_crops(20, 24, 3, 9, 11, 9, 11, 4, CL_INTERP_BICUBIC);
    random_crops(12, 10, 1, 18, 16, 14, 12, 2, CL_INTERP_BILINEAR);
    random_crops(20, 24, 3, 9, 11, 12, 13, 2, CL_INTERP_BICUBIC);
    /* A crop that no padding can fit is refused with the sizes. */
    cl_image img = {0};
    fill_image(&img, 12, 10, 1);
    cl_transform_opts o =
        cl_transform_opts_small_train(1, 20, 20, 1, 0.0f, NULL, NULL);
    o.resize = 12;
    cl_transforms *tf = NULL;
    REQUIRE_OK(cl_transforms_create(&tf, &o));
    float out[400];
    cl_rng r;
    cl_rng_init(&r, 1, 0);
    CHECK_ERR(cl_transforms_apply(tf, &img, &r, NULL, out), CL_ERR_SHAPE,
              "RandomCrop 20x20 is larger than the resized 14x12 image "
              "padded by 1");
    cl_transforms_destroy(tf);
    o.resize = 0;
    REQUIRE_OK(cl_transforms_create(&tf, &o));
    CHECK_ERR(cl_transforms_apply(tf, &img, &r, NULL, out), CL_ERR_SHAPE,
              "RandomCrop 20x20 is larger than the 12x10 image padded by 1");
    cl_transforms_destroy(tf);
    cl_image_free(&img);
}

/* The pipeline in torchvision's words, in the order its ops run, for the
 * ImageNet pair, a small-image recipe resized first, and none; cut to the
 * buffer like snprintf. */
static void check_describe(const cl_transform_opts *o, const char *want)
{
    cl_transforms *tf = NULL;
    char d[512];
    REQUIRE_OK(cl_transforms_create(&tf, o));
    cl_transforms_describe(tf, d, sizeof d);
    if (strcmp(d, want) != 0)
        cl_test_fail(__FILE__, __LINE__, "described as '%s', expected '%s'", d,
                     want);
    cl_transforms_destroy(tf);
}

CL_TEST(transforms_describe)
{
    cl_transform_opts o = cl_transform_opts_imagenet_train(224);
    o.auto_augment = CL_AUTO_AUGMENT_RANDAUGMENT;
    o.erase_prob = 0.25f;
    check_describe(&o, "RandomResizedCrop(224x224, scale=(0.08, 1), "
                       "ratio=(0.75, 1.33333), bilinear) -> "
                       "RandomHorizontalFlip(0.5) -> RandAugment(num_ops=2, "
                       "magnitude=9) -> Normalize((0.485, 0.456, 0.406), "
                       "(0.229, 0.224, 0.225)) -> RandomErasing(0.25)");
    o = cl_transform_opts_imagenet_eval(224);
    o.interpolation = CL_INTERP_BICUBIC;
    check_describe(&o, "Resize(256, bicubic) -> CenterCrop(224x224) -> "
                       "Normalize((0.485, 0.456, 0.406), (0.229, 0.224, "
                       "0.225))");
    const float m = 0.25f, sd = 0.5f;
    o = cl_transform_opts_small_train(1, 36, 36, 4, 0.5f, &m, &sd);
    o.resize_h = o.resize_w = 36;
    check_describe(&o, "Resize((36, 36), bilinear) -> RandomCrop(36x36, "
                       "padding=4) -> RandomHorizontalFlip(0.5) -> "
                       "Normalize(0.25, 0.5)");
    o = cl_transform_opts_small_eval(1, 36, 36, &m, &sd);
    o.resize_h = o.resize_w = 36;
    o.normalize = 0;
    check_describe(&o, "Resize((36, 36), bilinear)");
    o.resize_h = o.resize_w = 0;
    check_describe(&o, "no op");
    o = cl_transform_opts_small_train(3, 32, 32, 4, 0.5f, NULL, NULL);
    cl_transforms *tf = NULL;
    REQUIRE_OK(cl_transforms_create(&tf, &o));
    char d[20];
    memset(d, 'x', sizeof d);
    cl_transforms_describe(tf, d, 16);
    CHECK(strcmp(d, "RandomCrop(32x3") == 0);
    CHECK(d[16] == 'x');
    cl_transforms_describe(tf, d, 1);
    CHECK(d[0] == 0);
    /* Cut inside the arrow between two ops, and an exact fit. */
    const char *full = "RandomCrop(32x32, padding=4) -> "
                       "RandomHorizontalFlip(0.5) -> Normalize((0.5, 0.5, "
                       "0.5), (0.5, 0.5, 0.5))";
    char e[128];
    cl_transforms_describe(tf, e, 31);
    CHECK(strcmp(e, "RandomCrop(32x32, padding=4) -") == 0);
    cl_transforms_describe(tf, e, strlen(full) + 1);
    CHECK(strcmp(e, full) == 0);
    cl_transforms_describe(tf, e, strlen(full));
    CHECK(strlen(e) == strlen(full) - 1 && strncmp(e, full, strlen(e)) == 0);
    cl_transforms_destroy(tf);
}

/* A centre crop larger than the (resized) image pads it as torchvision's
 * center_crop: by the smaller half of the difference before, the larger
 * after; on the exact-copy path and on the resampling one. */
CL_TEST(transforms_center_crop_pads_like_torchvision)
{
    cl_image img = {0};
    fill_image(&img, 6, 6, 1);
    for (int resample = 0; resample < 2; resample++) {
        const int rs = resample ? 5 : 6, out = resample ? 8 : 9;
        cl_transform_opts e =
            cl_transform_opts_small_eval(1, rs, rs, NULL, NULL);
        e.normalize = 0;
        e.resize_h = e.resize_w = rs;
        cl_transform_opts o = e;
        o.out_h = o.out_w = out;
        o.center_crop = 1;
        float ref[36], got[81];
        cl_transforms *tf = NULL;
        REQUIRE_OK(cl_transforms_create(&tf, &e));
        REQUIRE_OK(cl_transforms_apply(tf, &img, NULL, NULL, ref));
        cl_transforms_destroy(tf);
        REQUIRE_OK(cl_transforms_create(&tf, &o));
        REQUIRE_OK(cl_transforms_apply(tf, &img, NULL, NULL, got));
        cl_transforms_destroy(tf);
        const int lo = (out - rs) / 2; /* 1 either way */
        int bad = 0;
        for (int y = 0; y < out; y++)
            for (int x = 0; x < out; x++) {
                const int sy = y - lo, sx = x - lo;
                const float want = sy < 0 || sy >= rs || sx < 0 || sx >= rs
                                       ? 0.0f
                                       : ref[sy * rs + sx];
                bad += fabsf(got[y * out + x] - want) > 1e-5f;
            }
        CHECK(bad == 0);
    }
    cl_image_free(&img);
}

CL_TEST(transforms_resize)
{
    /* A constant image stays constant at any scale; a 2x box-downscale of
     * a 2x2 checker gives its mean; upscale keeps values in range. */
    cl_image img = {0};
    REQUIRE_OK(cl_image_reserve(&img, 40, 60, 3));
    memset(img.data, 200, 40 * 60 * 3);
    cl_transform_opts o = cl_transform_opts_small_eval(3, 7, 9, NULL, NULL);
    o.normalize = 0;
    o.resize_h = 7;
    o.resize_w = 9;
    cl_transforms *tf = NULL;
    REQUIRE_OK(cl_transforms_create(&tf, &o));
    float out[3 * 64 * 64];
    REQUIRE_OK(cl_transforms_apply(tf, &img, NULL, NULL, out));
    double err = 0;
    for (int i = 0; i < 3 * 63; i++)
        err = fmax(err, fabs(out[i] - 200 / 255.0));
    CHECK(err < 1e-5);
    cl_transforms_destroy(tf);

    REQUIRE_OK(cl_image_reserve(&img, 8, 8, 1));
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 8; x++)
            img.data[y * 8 + x] = ((x + y) & 1) ? 255 : 0;
    o = cl_transform_opts_small_eval(1, 4, 4, NULL, NULL);
    o.normalize = 0;
    o.resize = 4; /* shorter side */
    REQUIRE_OK(cl_transforms_create(&tf, &o));
    REQUIRE_OK(cl_transforms_apply(tf, &img, NULL, NULL, out));
    /* Interior outputs (the filter is clipped at the borders). */
    err = 0;
    for (int y = 1; y < 3; y++)
        for (int x = 1; x < 3; x++)
            err = fmax(err, fabs(out[y * 4 + x] - 0.5));
    CHECK(err < 1e-5);
    cl_transforms_destroy(tf);

    /* Resize(shorter side 16) + CenterCrop 16x16 of a 32x64 image: the
     * crop is the middle 32x32 source columns 16..47. */
    REQUIRE_OK(cl_image_reserve(&img, 32, 64, 1));
    for (int y = 0; y < 32; y++)
        for (int x = 0; x < 64; x++)
            img.data[y * 64 + x] = (uint8_t)(x * 4);
    o = cl_transform_opts_small_eval(1, 16, 16, NULL, NULL);
    o.normalize = 0;
    o.resize = 16;
    o.center_crop = 1;
    REQUIRE_OK(cl_transforms_create(&tf, &o));
    REQUIRE_OK(cl_transforms_apply(tf, &img, NULL, NULL, out));
    /* Output column j averages source columns 16+2j and 17+2j. */
    err = 0;
    for (int j = 0; j < 16; j++)
        err = fmax(err, fabs(out[5 * 16 + j] * 255 - (4 * (16 + 2 * j) + 2)));
    CHECK(err < 1e-3);
    cl_transforms_destroy(tf);

    /* CenterCrop offsets round half to even as torchvision's round():
     * 9x5 -> 4x4 starts at column round(2.5) = 2, row round(0.5) = 0. */
    fill_image(&img, 5, 9, 1);
    o = cl_transform_opts_small_eval(1, 4, 4, NULL, NULL);
    o.normalize = 0;
    o.resize_h = 5;
    o.resize_w = 9;
    REQUIRE_OK(cl_transforms_create(&tf, &o));
    REQUIRE_OK(cl_transforms_apply(tf, &img, NULL, NULL, out));
    CHECK(out[0] == img.data[2] / 255.0f);
    CHECK(out[5] == img.data[9 + 3] / 255.0f);
    cl_transforms_destroy(tf);

    /* Upscale 2x2 -> 5x5: values stay within the source's range. */
    REQUIRE_OK(cl_image_reserve(&img, 2, 2, 1));
    img.data[0] = 10;
    img.data[1] = 250;
    img.data[2] = 30;
    img.data[3] = 90;
    o = cl_transform_opts_small_eval(1, 5, 5, NULL, NULL);
    o.normalize = 0;
    o.resize_h = o.resize_w = 5;
    REQUIRE_OK(cl_transforms_create(&tf, &o));
    REQUIRE_OK(cl_transforms_apply(tf, &img, NULL, NULL, out));
    int outside = 0;
    for (int i = 0; i < 25; i++)
        outside +=
            out[i] < 10 / 255.0f - 1e-6f || out[i] > 250 / 255.0f + 1e-6f;
    CHECK(outside == 0);
    CHECK_NEAR(out[0], 10 / 255.0, 1e-6); /* corner = corner pixel */
    cl_transforms_destroy(tf);
    cl_image_free(&img);
}

CL_TEST(transforms_bad_options)
{
    cl_transforms *tf = NULL;
    cl_transform_opts o = cl_transform_opts_small_eval(2, 8, 8, NULL, NULL);
    CHECK_ERR(cl_transforms_create(&tf, &o), CL_ERR_CONFIG, "out_c = 2");
    o = cl_transform_opts_imagenet_train(224);
    o.resize = 256;
    CHECK_ERR(cl_transforms_create(&tf, &o), CL_ERR_CONFIG,
              "random_resized_crop resizes and crops by itself: drop the "
              "resize");
    o = cl_transform_opts_imagenet_train(224);
    o.random_crop = 1;
    CHECK_ERR(cl_transforms_create(&tf, &o), CL_ERR_CONFIG, "drop random_crop");
    o = cl_transform_opts_imagenet_eval(224);
    o.resize_h = o.resize_w = 256;
    CHECK_ERR(cl_transforms_create(&tf, &o), CL_ERR_CONFIG,
              "resize 256 and resize_h/resize_w 256/256: give the shorter "
              "side or both sides, not both");
    o = cl_transform_opts_imagenet_train(224);
    o.random_crop = 1;
    o.resize = 256;
    CHECK_ERR(cl_transforms_create(&tf, &o), CL_ERR_CONFIG,
              "drop random_crop and the resize");
    o = cl_transform_opts_imagenet_eval(224);
    o.random_crop = 1;
    CHECK_ERR(cl_transforms_create(&tf, &o), CL_ERR_CONFIG,
              "choose one of random_crop and center_crop");
    o = cl_transform_opts_imagenet_train(224);
    o.rrc_scale[0] = 0.9f;
    o.rrc_scale[1] = 0.5f;
    CHECK_ERR(cl_transforms_create(&tf, &o), CL_ERR_CONFIG, "rrc scale");
    o = cl_transform_opts_imagenet_eval(224);
    o.std[1] = 0;
    CHECK_ERR(cl_transforms_create(&tf, &o), CL_ERR_CONFIG, "std[1] = 0");
    o = cl_transform_opts_small_train(1, 28, 28, 4, 1.5f, NULL, NULL);
    CHECK_ERR(cl_transforms_create(&tf, &o), CL_ERR_CONFIG, "hflip_prob");
    CHECK(tf == NULL);
}
