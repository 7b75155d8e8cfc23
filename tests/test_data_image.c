/* Data: CIFAR-10/100 (folder and .tar.gz), JPEG/PNG decoding of every
 * colour type, ImageFolder with class_indexing, and bad input of each
 * kind (truncated, corrupt, hostile headers, unreadable, non-image).
 * ctest-labels: unit data */
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>
#include <png.h>

#include "core/error.h"
#include "core/mem.h"
#include "data/data.h"
#include "harness.h"
#include "test_data_fixtures.h"

/* ----------------------------------------------------------- fixtures */

enum {
    PNG_GRAY8,
    PNG_GRAY1,
    PNG_GA8,
    PNG_RGB8,
    PNG_RGBA8,
    PNG_PAL,
    PNG_RGB16,
    PNG_RGB8_INTERLACED
};

/* The value a decoder must produce for pixel (y, x, k) of a PNG kind. */
static uint8_t png_expect(int kind, int y, int x, int k)
{
    switch (kind) {
    case PNG_GRAY1:
        return ((x + y) & 1) ? 255 : 0;
    case PNG_PAL:
        return (uint8_t)(((x + y) % 4) * 60 + k * 10);
    default:
        return fx_px(y, x, k);
    }
}

static int write_png(const char *path, int kind, int h, int w)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    png_structp png =
        png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    if (setjmp(png_jmpbuf(png))) {
        fclose(f);
        return -1;
    }
    png_init_io(png, f);
    int ct = PNG_COLOR_TYPE_RGB, bd = 8, ch = 3;
    switch (kind) {
    case PNG_GRAY8:
        ct = PNG_COLOR_TYPE_GRAY;
        ch = 1;
        break;
    case PNG_GRAY1:
        ct = PNG_COLOR_TYPE_GRAY;
        bd = 1;
        ch = 1;
        break;
    case PNG_GA8:
        ct = PNG_COLOR_TYPE_GRAY_ALPHA;
        ch = 2;
        break;
    case PNG_RGBA8:
        ct = PNG_COLOR_TYPE_RGB_ALPHA;
        ch = 4;
        break;
    case PNG_PAL:
        ct = PNG_COLOR_TYPE_PALETTE;
        ch = 1;
        break;
    case PNG_RGB16:
        bd = 16;
        break;
    default:
        break;
    }
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, bd, ct,
                 kind == PNG_RGB8_INTERLACED ? PNG_INTERLACE_ADAM7
                                             : PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (kind == PNG_PAL) {
        png_color pal[4];
        for (int i = 0; i < 4; i++) {
            pal[i].red = (png_byte)(i * 60);
            pal[i].green = (png_byte)(i * 60 + 10);
            pal[i].blue = (png_byte)(i * 60 + 20);
        }
        png_set_PLTE(png, info, pal, 4);
    }
    png_write_info(png, info);
    int passes = png_set_interlace_handling(png);
    size_t stride = (size_t)w * ch * (bd == 16 ? 2 : 1);
    uint8_t *row = calloc(stride + 1, 1);
    for (int p = 0; p < passes; p++)
        for (int y = 0; y < h; y++) {
            memset(row, 0, stride);
            for (int x = 0; x < w; x++) {
                if (kind == PNG_GRAY1) {
                    if ((x + y) & 1)
                        row[x / 8] |= (uint8_t)(0x80 >> (x % 8));
                } else if (kind == PNG_PAL) {
                    row[x] = (uint8_t)((x + y) % 4);
                } else if (bd == 16) {
                    for (int k = 0; k < 3; k++) {
                        row[(x * 3 + k) * 2] = fx_px(y, x, k);
                        row[(x * 3 + k) * 2 + 1] = 0x11;
                    }
                } else {
                    int cc = ch == 2 ? 1 : (ch == 4 ? 3 : ch);
                    for (int k = 0; k < cc; k++)
                        row[x * ch + k] = fx_px(y, x, k);
                    if (ch == 2 || ch == 4)
                        row[x * ch + ch - 1] = (uint8_t)(x * 20);
                }
            }
            png_write_row(png, row);
        }
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(row);
    return fclose(f);
}

static size_t read_all(const char *path, uint8_t *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

/* Runs a decode with stderr redirected; *printed = bytes it wrote. */
static cl_status load_quiet(const char *path, uint64_t max_pixels,
                            cl_image *img, long *printed)
{
    fflush(stderr);
    int saved = dup(2);
    int fd = open(cl_test_path("stderr.txt"), O_CREAT | O_TRUNC | O_RDWR, 0644);
    dup2(fd, 2);
    cl_status s = cl_image_load(path, 0, max_pixels, img);
    fflush(stderr);
    *printed = lseek(fd, 0, SEEK_END);
    dup2(saved, 2);
    close(saved);
    close(fd);
    return s;
}

/* ---------------------------------------------------------------- CIFAR */

static cl_status open_fmt(cl_dataset **ds, const char *fmt, const char *path,
                          cl_data_usage usage)
{
    cl_dataset_spec sp = cl_dataset_spec_default();
    sp.format = fmt;
    sp.path = path;
    sp.usage = usage;
    return cl_dataset_open(ds, &sp);
}

/* Checks sample i against write_cifar10's record (batch b, record r). */
static int cifar_sample_ok(const cl_dataset *ds, int64_t i, int b, int r)
{
    cl_image img = {0};
    int32_t lab = -1;
    int id = b * 100 + r, ok = 1;
    if (cl_dataset_get(ds, i, 0, &img, &lab) != CL_OK)
        return 0;
    ok &= lab == id % 10 && img.h == 32 && img.w == 32 && img.c == 3;
    for (int q = 0; q < 1024 && ok; q++)
        for (int k = 0; k < 3; k++)
            ok &= img.data[q * 3 + k] == (uint8_t)(id + (k * 1024 + q) * 7);
    cl_image_free(&img);
    return ok;
}

static void check_cifar10(const char *path)
{
    cl_dataset *ds = NULL;
    REQUIRE_OK(open_fmt(&ds, "cifar10", path, CL_USAGE_TRAIN));
    CHECK(cl_dataset_count(ds) == 15);
    CHECK(cl_dataset_num_classes(ds) == 10);
    CHECK(strcmp(cl_dataset_class_name(ds, 9), "truck") == 0);
    CHECK(cifar_sample_ok(ds, 0, 0, 0));
    CHECK(cifar_sample_ok(ds, 7, 2, 1)); /* batch 3, record 1 */
    cl_dataset_close(ds);
    REQUIRE_OK(open_fmt(&ds, NULL, path, CL_USAGE_TEST));
    CHECK(strcmp(cl_dataset_format(ds), "cifar10") == 0);
    CHECK(cl_dataset_count(ds) == 4);
    CHECK(cifar_sample_ok(ds, 3, 5, 3));
    cl_dataset_close(ds);
    REQUIRE_OK(open_fmt(&ds, "cifar10", path, CL_USAGE_ALL));
    CHECK(cl_dataset_count(ds) == 19);
    CHECK(cifar_sample_ok(ds, 16, 5, 1));
    cl_dataset_close(ds);
}

CL_TEST(cifar10_folder)
{
    const char *base = cl_test_path("c10");
    fx_cifar10(base, 3, 4);
    check_cifar10(base); /* the parent folder */
    char p[1200];
    snprintf(p, sizeof p, "%s/cifar-10-batches-bin", base);
    check_cifar10(p); /* the extracted folder itself */
}

CL_TEST(cifar10_targz)
{
    const char *base = cl_test_path("c10t");
    fx_cifar10(base, 3, 4);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && tar czf cifar-10-binary.tar.gz cifar-10-batches-bin",
             base);
    REQUIRE(cl_test_run(cmd) == 0);
    char p[1200];
    snprintf(p, sizeof p, "%s/cifar-10-binary.tar.gz", base);
    check_cifar10(p);

    /* GNU long names (over 100 characters) and a pax archive. */
    snprintf(cmd, sizeof cmd,
             "cd %s && tar czf long.tar.gz --transform 's,^,%s/,' "
             "cifar-10-batches-bin && tar czf pax.tar.gz --format=pax "
             "cifar-10-batches-bin",
             base,
             "a-folder-name-long-enough-that-the-member-paths-need-gnu-"
             "long-name-records-in-the-archive-xxxxxxxxxxxxxxxxxxxxxxxxx");
    REQUIRE(cl_test_run(cmd) == 0);
    snprintf(p, sizeof p, "%s/long.tar.gz", base);
    check_cifar10(p);
    snprintf(p, sizeof p, "%s/pax.tar.gz", base);
    check_cifar10(p);
    snprintf(p, sizeof p, "%s/cifar-10-binary.tar.gz", base);

    /* A truncated download: half the archive. */
    static uint8_t buf[1 << 20];
    size_t n = read_all(p, buf, sizeof buf);
    REQUIRE(n > 1000);
    char q[1200];
    snprintf(q, sizeof q, "%s/half.tar.gz", base);
    REQUIRE(fx_write(q, buf, n / 2, 0) == 0);
    cl_dataset *ds = NULL;
    CHECK_ERR(open_fmt(&ds, "cifar10", q, CL_USAGE_ALL), CL_ERR_FORMAT,
              "half.tar.gz: truncated");
    /* Not a tar inside the gzip. */
    snprintf(q, sizeof q, "%s/junk.tar.gz", base);
    memset(buf, 'x', 4096);
    REQUIRE(fx_write(q, buf, 4096, 1) == 0);
    CHECK_ERR(open_fmt(&ds, "cifar10", q, CL_USAGE_TRAIN), CL_ERR_FORMAT,
              "not a tar archive");
    /* An archive without the test batch. */
    snprintf(cmd, sizeof cmd,
             "cd %s && tar czf part.tar.gz cifar-10-batches-bin/data_batch_1"
             ".bin",
             base);
    REQUIRE(cl_test_run(cmd) == 0);
    snprintf(q, sizeof q, "%s/part.tar.gz", base);
    CHECK_ERR(open_fmt(&ds, "cifar10", q, CL_USAGE_TEST), CL_ERR_FORMAT,
              "archive has no test_batch.bin");
}

CL_TEST(cifar100)
{
    const char *base = cl_test_path("c100");
    char dir[1024], p[1200];
    mkdir(base, 0755);
    snprintf(dir, sizeof dir, "%s/cifar-100-binary", base);
    mkdir(dir, 0755);
    static uint8_t buf[5 * 3074];
    for (int r = 0; r < 5; r++) {
        buf[r * 3074] = (uint8_t)(r * 4);      /* coarse */
        buf[r * 3074 + 1] = (uint8_t)(r * 21); /* fine */
        for (int i = 0; i < 3072; i++)
            buf[r * 3074 + 2 + i] = (uint8_t)(r + i);
    }
    snprintf(p, sizeof p, "%s/train.bin", dir);
    fx_write(p, buf, 5 * 3074, 0);
    snprintf(p, sizeof p, "%s/test.bin", dir);
    fx_write(p, buf, 2 * 3074, 0);
    char names[2000] = "";
    for (int k = 0; k < 100; k++) {
        char nm[32];
        snprintf(nm, sizeof nm, "class%02d\n", k);
        strcat(names, nm);
    }
    snprintf(p, sizeof p, "%s/fine_label_names.txt", dir);
    fx_write(p, names, strlen(names), 0);
    cl_dataset *ds = NULL;
    REQUIRE_OK(open_fmt(&ds, "cifar100", base, CL_USAGE_ALL));
    CHECK(cl_dataset_count(ds) == 7);
    CHECK(cl_dataset_num_classes(ds) == 100);
    CHECK(cl_dataset_label(ds, 4) == 84);
    CHECK(strcmp(cl_dataset_class_name(ds, 84), "class84") == 0);
    cl_image img = {0};
    int32_t lab;
    REQUIRE_OK(cl_dataset_get(ds, 1, 0, &img, &lab));
    CHECK(img.data[3 * 5 + 1] == (uint8_t)(1 + 1024 + 5)); /* G of px 5 */
    cl_image_free(&img);
    cl_dataset_close(ds);
    /* Coarse label out of range. */
    buf[0] = 20;
    snprintf(p, sizeof p, "%s/train.bin", dir);
    fx_write(p, buf, 5 * 3074, 0);
    CHECK_ERR(open_fmt(&ds, "cifar100", base, CL_USAGE_TRAIN), CL_ERR_FORMAT,
              "train.bin: coarse label 20 of record 0 is >= 20");
    buf[0] = 0;
    buf[3074 + 1] = 100;
    fx_write(p, buf, 5 * 3074, 0);
    CHECK_ERR(open_fmt(&ds, "cifar100", base, CL_USAGE_TRAIN), CL_ERR_FORMAT,
              "train.bin: label 100 of record 1 is >= 100 classes");
}

CL_TEST(cifar_bad_files)
{
    const char *base = cl_test_path("cbad");
    fx_cifar10(base, 2, 2);
    char p[1200];
    cl_dataset *ds = NULL;
    static uint8_t buf[3 * 3073];
    snprintf(p, sizeof p, "%s/cifar-10-batches-bin/data_batch_2.bin", base);
    size_t n = read_all(p, buf, sizeof buf);
    REQUIRE(n == 2 * 3073);
    fx_write(p, buf, n - 100, 0); /* truncated */
    CHECK_ERR(open_fmt(&ds, "cifar10", base, CL_USAGE_TRAIN), CL_ERR_FORMAT,
              "data_batch_2.bin: 6046 bytes is not a whole number of "
              "3073-byte records");
    fx_write(p, buf, n, 0);
    buf[3073] = 10; /* label of record 1 */
    snprintf(p, sizeof p, "%s/cifar-10-batches-bin/test_batch.bin", base);
    fx_write(p, buf, n, 0);
    CHECK_ERR(open_fmt(&ds, "cifar10", base, CL_USAGE_TEST), CL_ERR_FORMAT,
              "test_batch.bin: label 10 of record 1 is >= 10 classes");
    buf[3073] = 1;
    fx_write(p, buf, n + 1, 0); /* one byte too many */
    CHECK_ERR(open_fmt(&ds, "cifar10", base, CL_USAGE_TEST), CL_ERR_FORMAT,
              "1 bytes left over");
    fx_write(p, buf, 0, 0);
    CHECK_ERR(open_fmt(&ds, "cifar10", base, CL_USAGE_TEST), CL_ERR_FORMAT,
              "test_batch.bin: empty file");
    fx_write(p, buf, n, 0);
    snprintf(p, sizeof p, "%s/cifar-10-batches-bin/batches.meta.txt", base);
    fx_write(p, "a\nb\n", 4, 0);
    CHECK_ERR(open_fmt(&ds, "cifar10", base, CL_USAGE_TEST), CL_ERR_FORMAT,
              "batches.meta.txt: 2 class names, expected 10");
    snprintf(p, sizeof p, "%s/cifar-10-batches-bin/data_batch_4.bin", base);
    REQUIRE(unlink(p) == 0);
    CHECK_ERR(open_fmt(&ds, "cifar10", base, CL_USAGE_TRAIN), CL_ERR_IO,
              "no data_batch_4.bin there");
    CHECK(ds == NULL);
}

/* ------------------------------------------------------------ decoding */

CL_TEST(png_color_types)
{
    const int kinds[] = {PNG_GRAY8, PNG_GRAY1, PNG_GA8,   PNG_RGB8,
                         PNG_RGBA8, PNG_PAL,   PNG_RGB16, PNG_RGB8_INTERLACED};
    const int chans[] = {1, 1, 1, 3, 3, 3, 3, 3};
    cl_image img = {0};
    for (int t = 0; t < 8; t++) {
        char p[1200];
        snprintf(p, sizeof p, "%s/k%d.png", cl_test_tmpdir(), t);
        REQUIRE(write_png(p, kinds[t], 13, 11) == 0);
        REQUIRE_OK(cl_image_load(p, 0, 0, &img));
        CHECK(img.h == 13 && img.w == 11 && img.c == chans[t]);
        int bad = 0;
        for (int y = 0; y < 13; y++)
            for (int x = 0; x < 11; x++)
                for (int k = 0; k < img.c; k++)
                    bad += img.data[(y * 11 + x) * img.c + k] !=
                           png_expect(kinds[t], y, x, k);
        if (bad)
            fprintf(stderr, "png kind %d: %d pixels wrong\n", t, bad);
        CHECK(bad == 0);
        int w = 0, h = 0, c = 0;
        REQUIRE_OK(cl_image_probe(p, &w, &h, &c));
        CHECK(w == 11 && h == 13 && c == chans[t]);
    }
    cl_image_free(&img);
}

CL_TEST(jpeg_decode_and_dct_scaling)
{
    cl_image img = {0};
    const char *p = cl_test_path("rgb.jpg");
    REQUIRE(fx_jpeg(p, 48, 64, 3, 95) == 0);
    REQUIRE_OK(cl_image_load(p, 0, 0, &img));
    CHECK(img.h == 48 && img.w == 64 && img.c == 3);
    double err = 0;
    for (int y = 0; y < 48; y++)
        for (int x = 0; x < 64; x++)
            for (int k = 0; k < 3; k++)
                err += abs(img.data[(y * 64 + x) * 3 + k] - fx_px(y, x, k));
    CHECK(err / (48 * 64 * 3) < 3.0);
    /* Shorter side 48: a hint of 12 allows 1/4 scale (12x16), 13 only 1/2. */
    REQUIRE_OK(cl_image_load(p, 12, 0, &img));
    CHECK(img.h == 12 && img.w == 16);
    REQUIRE_OK(cl_image_load(p, 13, 0, &img));
    CHECK(img.h == 24 && img.w == 32);
    REQUIRE_OK(cl_image_load(p, 1, 0, &img));
    CHECK(img.h == 6 && img.w == 8); /* 1/8 at most */
    /* Scaled pixels still match the (smooth) image. */
    err = 0;
    for (int y = 0; y < 6; y++)
        for (int x = 0; x < 8; x++)
            err +=
                abs(img.data[(y * 8 + x) * 3] - fx_px(y * 8 + 4, x * 8 + 4, 0));
    CHECK(err / 48 < 6.0);
    /* CMYK (inverted, as Adobe writes it) comes out as RGB. */
    const char *cm = cl_test_path("cmyk.jpg");
    REQUIRE(fx_jpeg(cm, 16, 24, 4, 95) == 0);
    REQUIRE_OK(cl_image_load(cm, 0, 0, &img));
    CHECK(img.h == 16 && img.w == 24 && img.c == 3);
    err = 0;
    for (int y = 0; y < 16; y++)
        for (int x = 0; x < 24; x++)
            for (int k = 0; k < 3; k++)
                err += abs(img.data[(y * 24 + x) * 3 + k] - fx_px(y, x, k));
    CHECK(err / (16 * 24 * 3) < 3.0);
    const char *g = cl_test_path("gray.jpg");
    REQUIRE(fx_jpeg(g, 20, 30, 1, 90) == 0);
    REQUIRE_OK(cl_image_load(g, 0, 0, &img));
    CHECK(img.h == 20 && img.w == 30 && img.c == 1);
    cl_image_free(&img);
}

CL_TEST(corrupt_images_are_clear_errors)
{
    static uint8_t buf[1 << 16];
    cl_image img = {0};
    long printed = 0;
    const char *jp = cl_test_path("ok.jpg");
    REQUIRE(fx_jpeg(jp, 160, 200, 3, 90) == 0);
    size_t n = read_all(jp, buf, sizeof buf);
    REQUIRE(n > 2000);
    /* Truncated JPEG: libjpeg's warning becomes our error, unprinted. */
    const char *t = cl_test_path("trunc.jpg");
    fx_write(t, buf, n / 2, 0);
    CHECK_ERR(load_quiet(t, 0, &img, &printed), CL_ERR_FORMAT,
              "trunc.jpg: truncated JPEG: Premature end of JPEG file");
    CHECK(printed == 0);
    /* Garbage after the SOI marker: libjpeg's error_exit, via longjmp. */
    const char *gj = cl_test_path("garbage.jpg");
    uint8_t g[64] = {0xff, 0xd8, 0xff, 0x01, 0x02, 0x03};
    fx_write(gj, g, sizeof g, 0);
    CHECK_ERR(load_quiet(gj, 0, &img, &printed), CL_ERR_FORMAT,
              "garbage.jpg: corrupt JPEG:");
    CHECK(printed == 0);
    /* PNG truncated and with a broken CRC. */
    const char *pp = cl_test_path("ok.png");
    REQUIRE(write_png(pp, PNG_RGB8, 100, 120) == 0);
    n = read_all(pp, buf, sizeof buf);
    REQUIRE(n > 200);
    const char *tp = cl_test_path("trunc.png");
    fx_write(tp, buf, n - 30, 0);
    CHECK_ERR(load_quiet(tp, 0, &img, &printed), CL_ERR_FORMAT,
              "trunc.png: corrupt PNG:");
    CHECK(printed == 0);
    buf[60] ^= 0x55; /* inside IDAT's data */
    const char *cp = cl_test_path("crc.png");
    fx_write(cp, buf, n, 0);
    CHECK_ERR(load_quiet(cp, 0, &img, &printed), CL_ERR_FORMAT,
              "crc.png: corrupt PNG:");
    CHECK(printed == 0);
    /* Not an image at all, and an empty file. */
    const char *tx = cl_test_path("text.png");
    fx_write(tx, "hello world", 11, 0);
    CHECK_ERR(cl_image_load(tx, 0, 0, &img), CL_ERR_FORMAT,
              "text.png: not a JPEG or PNG file (starts with 68 65 6c 6c)");
    fx_write(tx, "", 0, 0);
    CHECK_ERR(cl_image_load(tx, 0, 0, &img), CL_ERR_FORMAT, "empty file");
    /* Unreadable: a dangling link (root may read any mode) and a folder. */
    const char *dl = cl_test_path("dangling.jpg");
    REQUIRE(symlink("/nonexistent/x.jpg", dl) == 0);
    CHECK_ERR(cl_image_load(dl, 0, 0, &img), CL_ERR_IO,
              "dangling.jpg: cannot open: No such file or directory");
    CHECK_ERR(cl_image_load(cl_test_tmpdir(), 0, 0, &img), CL_ERR_IO,
              "not a regular file");
    cl_image_free(&img);
}

static uint32_t be32r(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
           ((uint32_t)p[2] << 8) | p[3];
}

CL_TEST(hostile_headers_refused_before_allocating)
{
    static uint8_t buf[1 << 16];
    cl_image img = {0};
    /* PNG claiming 100000 x 100000 (IHDR patched, CRC recomputed). */
    const char *pp = cl_test_path("small.png");
    REQUIRE(write_png(pp, PNG_RGB8, 8, 8) == 0);
    size_t n = read_all(pp, buf, sizeof buf);
    REQUIRE(n > 33 && memcmp(buf + 12, "IHDR", 4) == 0);
    fx_be32(buf + 16, 100000);
    fx_be32(buf + 20, 100000);
    fx_be32(buf + 29, (uint32_t)crc32(0, buf + 12, 17));
    const char *hp = cl_test_path("huge.png");
    fx_write(hp, buf, n, 0);
    CHECK_ERR(cl_image_load(hp, 0, 0, &img), CL_ERR_LIMIT,
              "huge.png: image is 100000x100000 = 10000000000 pixels, above "
              "the limit of 67108864");
    CHECK(img.cap == 0); /* nothing allocated for pixels */
    /* JPEG claiming 60000 x 60000 (SOF0 patched). */
    const char *jp = cl_test_path("small.jpg");
    REQUIRE(fx_jpeg(jp, 8, 8, 3, 90) == 0);
    n = read_all(jp, buf, sizeof buf);
    size_t sof = 0;
    for (size_t i = 2; i + 9 < n; i++)
        if (buf[i] == 0xff && buf[i + 1] == 0xc0) {
            sof = i;
            break;
        }
    REQUIRE(sof > 0);
    buf[sof + 5] = 60000 >> 8;
    buf[sof + 6] = 60000 & 0xff;
    buf[sof + 7] = 60000 >> 8;
    buf[sof + 8] = 60000 & 0xff;
    const char *hj = cl_test_path("huge.jpg");
    fx_write(hj, buf, n, 0);
    CHECK_ERR(cl_image_load(hj, 0, 0, &img), CL_ERR_LIMIT,
              "huge.jpg: image is 60000x60000");
    CHECK(img.cap == 0);
    /* The limit is configurable. */
    CHECK_ERR(cl_image_load(jp, 0, 63, &img), CL_ERR_LIMIT,
              "above the limit of 63");
    REQUIRE_OK(cl_image_load(jp, 0, 64, &img));
    CHECK(be32r(buf) != 0);
    cl_image_free(&img);
}

/* ---------------------------------------------------------- imagefolder */

/* root/{dog,cat,bird} with JPEGs and PNGs, plus a stray text file. */
static const char *make_tree(const char *name)
{
    static char root[1024];
    char p[1400];
    snprintf(root, sizeof root, "%s", cl_test_path(name));
    mkdir(root, 0755);
    const char *cls[3] = {"dog", "cat", "bird"};
    const int count[3] = {3, 2, 4};
    for (int c = 0; c < 3; c++) {
        snprintf(p, sizeof p, "%s/%s", root, cls[c]);
        mkdir(p, 0755);
        for (int i = 0; i < count[c]; i++) {
            snprintf(p, sizeof p, "%s/%s/img%d.%s", root, cls[c], i,
                     i % 2 ? "PNG" : "jpg");
            if (i % 2)
                write_png(p, i == 1 ? PNG_RGBA8 : PNG_GRAY8, 20 + i, 24);
            else
                fx_jpeg(p, 20 + i, 24 + c, 3, 90);
        }
    }
    snprintf(p, sizeof p, "%s/cat/notes.txt", root);
    fx_write(p, "not an image", 12, 0);
    snprintf(p, sizeof p, "%s/.hidden", root);
    mkdir(p, 0755);
    return root;
}

CL_TEST(imagefolder_sorted_classes)
{
    const char *root = make_tree("tree");
    cl_dataset *ds = NULL;
    REQUIRE_OK(open_fmt(&ds, NULL, root, CL_USAGE_TRAIN));
    CHECK(strcmp(cl_dataset_format(ds), "imagefolder") == 0);
    CHECK(cl_dataset_count(ds) == 9);
    CHECK(cl_dataset_num_classes(ds) == 3);
    CHECK(strcmp(cl_dataset_class_name(ds, 0), "bird") == 0);
    CHECK(strcmp(cl_dataset_class_name(ds, 1), "cat") == 0);
    CHECK(strcmp(cl_dataset_class_name(ds, 2), "dog") == 0);
    CHECK(cl_dataset_ignored_files(ds) == 1);
    CHECK(strcmp(cl_dataset_path(ds, 0), "bird/img0.jpg") == 0);
    CHECK(strcmp(cl_dataset_path(ds, 5), "cat/img1.PNG") == 0);
    CHECK(cl_dataset_label(ds, 3) == 0 && cl_dataset_label(ds, 4) == 1 &&
          cl_dataset_label(ds, 8) == 2);
    cl_image img = {0};
    int32_t lab = -1;
    REQUIRE_OK(cl_dataset_get(ds, 5, 0, &img, &lab));
    CHECK(lab == 1 && img.h == 21 && img.w == 24 && img.c == 3);
    REQUIRE_OK(cl_dataset_get(ds, 3, 0, &img, &lab)); /* bird/img3: gray */
    CHECK(img.c == 1 && img.h == 23);
    cl_image_free(&img);
    cl_dataset_close(ds);
}

CL_TEST(imagefolder_class_indexing)
{
    const char *root = make_tree("tree2");
    char map[1200];
    snprintf(map, sizeof map, "%s/map.txt", cl_test_tmpdir());
    fx_write(map, "dog 0\ncat 2\n# comment\nbird 1\n", 29, 0);
    cl_dataset_spec sp = cl_dataset_spec_default();
    sp.format = "imagefolder";
    sp.path = root;
    sp.class_indexing = map;
    cl_dataset *ds = NULL;
    REQUIRE_OK(cl_dataset_open(&ds, &sp));
    CHECK(strcmp(cl_dataset_class_name(ds, 0), "dog") == 0);
    CHECK(strcmp(cl_dataset_class_name(ds, 2), "cat") == 0);
    CHECK(cl_dataset_label(ds, 0) == 0); /* dog's images come first */
    CHECK(strncmp(cl_dataset_path(ds, 0), "dog/", 4) == 0);
    cl_dataset_close(ds);
    /* A mapping naming a folder that does not exist. */
    fx_write(map, "dog 0\ncat 2\nbird 1\nfish 3\n", 26, 0);
    CHECK_ERR(cl_dataset_open(&ds, &sp), CL_ERR_FORMAT,
              "map.txt: class 'fish' has no folder");
    /* A folder the mapping misses. */
    fx_write(map, "dog 0\ncat 1\n", 12, 0);
    CHECK_ERR(cl_dataset_open(&ds, &sp), CL_ERR_FORMAT,
              "/bird: a class folder missing from");
    fx_write(map, "dog 0\ncat 0\nbird 1\n", 19, 0);
    CHECK_ERR(cl_dataset_open(&ds, &sp), CL_ERR_FORMAT,
              "index 0 given to "
              "both");
    fx_write(map, "dog zero\n", 9, 0);
    CHECK_ERR(cl_dataset_open(&ds, &sp), CL_ERR_FORMAT,
              "map.txt:1: expected `name index`");
    /* An empty or comments-only file is an error naming it, not the
     * sorted folder order without a word. */
    fx_write(map, "", 0, 0);
    CHECK_ERR(cl_dataset_open(&ds, &sp), CL_ERR_FORMAT,
              "map.txt: no `name index` lines in it");
    fx_write(map, "# classes\n\n   \n", 15, 0);
    CHECK_ERR(cl_dataset_open(&ds, &sp), CL_ERR_FORMAT,
              "map.txt: no `name index` lines in it");
    /* Long lines are read whole: a 4090-byte name is one (missing) class,
     * not two lines; past 4096 bytes the line is refused as such. */
    static char big[6000];
    int k = snprintf(big, sizeof big, "dog 0\ncat 2\nbird 1\n");
    memset(big + k, 'x', 4088);
    k += 4088;
    k += snprintf(big + k, sizeof big - (size_t)k, " 3\n");
    fx_write(map, big, (size_t)k, 0);
    CHECK_ERR(cl_dataset_open(&ds, &sp), CL_ERR_FORMAT, "xxx' has no folder");
    memset(big, 'y', 5000);
    memcpy(big + 5000, " 0\n", 3);
    fx_write(map, "dog 0\n", 6, 0);
    FILE *mf = fopen(map, "ab");
    REQUIRE(mf != NULL);
    fwrite(big, 1, 5003, mf);
    fclose(mf);
    CHECK_ERR(cl_dataset_open(&ds, &sp), CL_ERR_FORMAT,
              "map.txt:2: line of 5003 bytes, longer than the 4096");
    fx_write(map, "dog 0\ncat\0 1\n", 14, 0);
    CHECK_ERR(cl_dataset_open(&ds, &sp), CL_ERR_FORMAT,
              "map.txt:2: a NUL byte");
    /* Given programmatically. */
    const char *names[3] = {"cat", "dog", "bird"};
    const int idx[3] = {1, 2, 0};
    sp.class_indexing = NULL;
    sp.class_names = names;
    sp.class_indices = idx;
    sp.num_class_names = 3;
    REQUIRE_OK(cl_dataset_open(&ds, &sp));
    CHECK(strcmp(cl_dataset_class_name(ds, 1), "cat") == 0);
    CHECK(strcmp(cl_dataset_class_name(ds, 0), "bird") == 0);
    cl_dataset_close(ds);
}

CL_TEST(imagefolder_bad_trees)
{
    const char *root = make_tree("tree3");
    char p[1400];
    snprintf(p, sizeof p, "%s/empty", root);
    mkdir(p, 0755);
    cl_dataset *ds = NULL;
    CHECK_ERR(open_fmt(&ds, "imagefolder", root, CL_USAGE_TRAIN), CL_ERR_FORMAT,
              "/empty: class folder has no images");
    rmdir(p);
    const char *flat = cl_test_path("flat");
    mkdir(flat, 0755);
    CHECK_ERR(open_fmt(&ds, "imagefolder", flat, CL_USAGE_TRAIN), CL_ERR_FORMAT,
              "no class folders");
    CHECK_ERR(
        open_fmt(&ds, "imagefolder", cl_test_path("none"), CL_USAGE_TRAIN),
        CL_ERR_IO, "not a folder");
    CHECK(ds == NULL);
}

/* The loader over a tree with one corrupt, one non-image and one
 * unreadable file: fail names the file; skip drops and counts them. */
CL_TEST(imagefolder_bad_images_fail_or_skip)
{
    const char *root = make_tree("tree4");
    char p[1400];
    snprintf(p, sizeof p, "%s/dog/zz_fake.jpg", root);
    fx_write(p, "this is text", 12, 0);
    snprintf(p, sizeof p, "%s/cat/zz_cut.png", root);
    static uint8_t buf[1 << 14];
    char ok[1400];
    snprintf(ok, sizeof ok, "%s/cat/img1.PNG", root);
    size_t n = read_all(ok, buf, sizeof buf);
    fx_write(p, buf, n / 2, 0);
    snprintf(p, sizeof p, "%s/bird/zz_link.jpg", root);
    REQUIRE(symlink("/nonexistent.jpg", p) == 0);
    cl_transform_opts to = cl_transform_opts_imagenet_train(16);
    cl_transforms *tf = NULL;
    REQUIRE_OK(cl_transforms_create(&tf, &to));
    for (int policy = 0; policy < 2; policy++) {
        cl_dataset_spec sp = cl_dataset_spec_default();
        sp.path = root;
        sp.on_bad_image = policy ? CL_BAD_IMAGE_SKIP : CL_BAD_IMAGE_FAIL;
        cl_dataset *ds = NULL;
        REQUIRE_OK(cl_dataset_open(&ds, &sp));
        CHECK(cl_dataset_count(ds) == 12);
        cl_loader_opts o;
        memset(&o, 0, sizeof o);
        o.dataset = ds;
        o.tf = tf;
        o.batch_size = 4;
        o.workers = 2;
        o.shuffle = 0;
        cl_loader *ld = NULL;
        REQUIRE_OK(cl_loader_create(&ld, &o));
        REQUIRE_OK(cl_loader_start_epoch(ld, 0));
        int64_t got = 0;
        cl_status s = CL_OK;
        for (;;) {
            cl_batch b;
            s = cl_loader_next(ld, &b);
            if (s != CL_OK || b.n == 0)
                break;
            got += b.n;
        }
        cl_loader_stats st;
        cl_loader_get_stats(ld, &st);
        if (policy == 0) {
            /* bird/zz_link.jpg is the 5th sample: batch 1 fails. */
            CHECK(s == CL_ERR_IO);
            CHECK(strstr(cl_last_error(), "bird/zz_link.jpg: cannot open"));
            CHECK(strstr(cl_last_error(), "`on_bad_image: skip` drops"));
            CHECK(got == 4);
            /* Asking again repeats the error rather than hanging. */
            cl_batch b;
            CHECK_ERR(cl_loader_next(ld, &b), CL_ERR_IO, "zz_link.jpg");
        } else {
            CHECK_OK(s);
            CHECK(got == 9);
            CHECK(st.skipped == 3);
            /* The trainer reports the last one by name. */
            CHECK(strstr(st.last_skipped, "zz_") != NULL);
        }
        cl_loader_destroy(ld);
        cl_dataset_close(ds);
    }
    cl_transforms_destroy(tf);
}

/* on_bad_image: skip with every image of a batch unreadable: an error
 * naming the batch, not an empty batch that reads as the end of the
 * epoch (the trainer would cut the epoch short without a word). */
CL_TEST(imagefolder_skip_with_a_whole_batch_unreadable)
{
    const char *root = make_tree("tree_allbad");
    char p[1400];
    /* bird/ comes first in the sorted order: its 4 images are batch 0. */
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/bird/img%d.%s", root, i,
                 i % 2 ? "PNG" : "jpg");
        REQUIRE(fx_write(p, "broken", 6, 0) == 0);
    }
    cl_transform_opts to = cl_transform_opts_imagenet_train(16);
    cl_transforms *tf = NULL;
    REQUIRE_OK(cl_transforms_create(&tf, &to));
    cl_dataset_spec sp = cl_dataset_spec_default();
    sp.path = root;
    sp.on_bad_image = CL_BAD_IMAGE_SKIP;
    cl_dataset *ds = NULL;
    REQUIRE_OK(cl_dataset_open(&ds, &sp));
    cl_loader_opts o;
    memset(&o, 0, sizeof o);
    o.dataset = ds;
    o.tf = tf;
    o.batch_size = 4;
    o.workers = 1;
    cl_loader *ld = NULL;
    REQUIRE_OK(cl_loader_create(&ld, &o));
    REQUIRE_OK(cl_loader_start_epoch(ld, 0));
    cl_batch b;
    CHECK_ERR(cl_loader_next(ld, &b), CL_ERR_FORMAT,
              "batch 0 of epoch 1: all its 4 images are unreadable");
    CHECK(strstr(cl_last_error(), "bird/img") != NULL);
    cl_loader_destroy(ld);
    cl_dataset_close(ds);
    cl_transforms_destroy(tf);
}

CL_TEST(imagefolder_loader_deterministic)
{
    const char *root = make_tree("tree5");
    cl_dataset_spec sp = cl_dataset_spec_default();
    sp.path = root;
    cl_dataset *ds = NULL;
    REQUIRE_OK(cl_dataset_open(&ds, &sp));
    cl_transform_opts to = cl_transform_opts_imagenet_train(16);
    to.brightness = to.contrast = to.saturation = 0.4f;
    to.erase_prob = 0.5f;
    cl_transforms *tf = NULL;
    REQUIRE_OK(cl_transforms_create(&tf, &to));
    static float first[9 * 3 * 16 * 16];
    for (int nw = 0; nw < 3; nw++) {
        cl_loader_opts o;
        memset(&o, 0, sizeof o);
        o.dataset = ds;
        o.tf = tf;
        o.batch_size = 9;
        o.workers = nw * 4; /* 0, 4, 8 */
        o.shuffle = 1;
        o.seed = 7;
        cl_loader *ld = NULL;
        REQUIRE_OK(cl_loader_create(&ld, &o));
        REQUIRE_OK(cl_loader_start_epoch(ld, 3));
        cl_batch b;
        REQUIRE_OK(cl_loader_next(ld, &b));
        REQUIRE(b.n == 9);
        if (nw == 0)
            memcpy(first, b.x, sizeof first);
        else
            CHECK(memcmp(first, b.x, sizeof first) == 0);
        cl_loader_destroy(ld);
    }
    cl_transforms_destroy(tf);
    cl_dataset_close(ds);
}

/* --------------------------------------------- the ImageNet-style ops */

CL_TEST(random_resized_crop_full_is_resize)
{
    /* scale = ratio = 1 on a square image: the crop is the whole image,
     * so RandomResizedCrop equals an exact Resize. */
    cl_image img = {0};
    REQUIRE_OK(cl_image_reserve(&img, 40, 40, 3));
    for (int i = 0; i < 40 * 40 * 3; i++)
        img.data[i] = (uint8_t)(i * 7 + (i / 120) * 3);
    cl_transform_opts a = cl_transform_opts_imagenet_train(24);
    a.rrc_scale[0] = a.rrc_scale[1] = 1;
    a.rrc_ratio[0] = a.rrc_ratio[1] = 1;
    a.hflip_prob = 0;
    cl_transform_opts b = cl_transform_opts_imagenet_eval(24);
    b.resize = 0;
    b.center_crop = 0;
    b.resize_h = b.resize_w = 24;
    cl_transforms *ta = NULL, *tb = NULL;
    REQUIRE_OK(cl_transforms_create(&ta, &a));
    REQUIRE_OK(cl_transforms_create(&tb, &b));
    static float oa[3 * 24 * 24], ob[3 * 24 * 24];
    cl_rng r;
    cl_rng_init(&r, 1, 2);
    REQUIRE_OK(cl_transforms_apply(ta, &img, &r, NULL, oa));
    REQUIRE_OK(cl_transforms_apply(tb, &img, NULL, NULL, ob));
    CHECK(memcmp(oa, ob, sizeof oa) == 0);
    /* Default scale: crops vary with the stream, outputs stay finite. */
    cl_transforms_destroy(ta);
    a = cl_transform_opts_imagenet_train(24);
    REQUIRE_OK(cl_transforms_create(&ta, &a));
    cl_rng_init(&r, 1, 3);
    REQUIRE_OK(cl_transforms_apply(ta, &img, &r, NULL, ob));
    CHECK(memcmp(oa, ob, sizeof oa) != 0);
    int finite = 1;
    for (int i = 0; i < 3 * 24 * 24; i++)
        finite &= isfinite(ob[i]) && fabsf(ob[i]) < 3;
    CHECK(finite);
    /* An extreme aspect ratio takes the centre-crop fallback. */
    REQUIRE_OK(cl_image_reserve(&img, 4, 200, 3));
    memset(img.data, 128, 4 * 200 * 3);
    REQUIRE_OK(cl_transforms_apply(ta, &img, &r, NULL, ob));
    double err = 0;
    for (int i = 0; i < 3 * 24 * 24; i++) {
        int c = i / (24 * 24);
        float e = (128 / 255.0f - a.mean[c]) / a.std[c];
        err = fmax(err, fabs(ob[i] - e));
    }
    CHECK(err < 1e-5);
    CHECK(cl_transforms_decode_hint(ta) == 98); /* 24 / sqrt(.08 * .75) */
    cl_transforms_destroy(ta);
    cl_transforms_destroy(tb);
    cl_image_free(&img);
}

CL_TEST(color_jitter_and_erasing)
{
    cl_image img = {0};
    REQUIRE_OK(cl_image_reserve(&img, 16, 16, 3));
    for (int i = 0; i < 16 * 16 * 3; i++)
        img.data[i] = (uint8_t)(60 + (i % 97));
    cl_transform_opts o = cl_transform_opts_small_eval(3, 16, 16, NULL, NULL);
    o.normalize = 0;
    o.brightness = 0.5f;
    cl_transforms *tf = NULL;
    REQUIRE_OK(cl_transforms_create(&tf, &o));
    CHECK(cl_transforms_is_random(tf));
    float out[3 * 256];
    cl_rng r;
    cl_rng_init(&r, 3, 4);
    REQUIRE_OK(cl_transforms_apply(tf, &img, &r, NULL, out));
    /* Brightness alone scales every value by one factor in [0.5, 1.5]. */
    double f = out[0] / (img.data[0] / 255.0);
    int bad = 0;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 256; i++) {
            double v = img.data[i * 3 + k] / 255.0 * f;
            bad += fabs(out[k * 256 + i] - (v > 1 ? 1 : v)) > 1e-5;
        }
    CHECK(bad == 0);
    CHECK(f >= 0.5 && f <= 1.5 && fabs(f - 1) > 1e-6);
    cl_transforms_destroy(tf);
    /* Saturation 0..: a gray image is unchanged by saturation. */
    o.brightness = 0;
    o.saturation = 0.9f;
    REQUIRE_OK(cl_transforms_create(&tf, &o));
    for (int i = 0; i < 256; i++)
        img.data[i * 3] = img.data[i * 3 + 1] = img.data[i * 3 + 2] =
            (uint8_t)i;
    REQUIRE_OK(cl_transforms_apply(tf, &img, &r, NULL, out));
    bad = 0;
    for (int i = 0; i < 256; i++)
        bad += fabs(out[256 + i] - i / 255.0) > 1e-4;
    CHECK(bad == 0);
    cl_transforms_destroy(tf);
    /* RandomErasing(p=1): one zero rectangle of 2%..33% of the area. */
    o.saturation = 0;
    o.erase_prob = 1;
    REQUIRE_OK(cl_transforms_create(&tf, &o));
    memset(img.data, 200, 16 * 16 * 3);
    int erased_any = 0, bad_area = 0;
    for (int t = 0; t < 20; t++) {
        cl_rng_init(&r, 9, (uint64_t)t);
        REQUIRE_OK(cl_transforms_apply(tf, &img, &r, NULL, out));
        int z = 0;
        for (int i = 0; i < 256; i++)
            z += out[i] == 0;
        if (z) {
            erased_any++;
            bad_area += z < 256 * 0.02 - 2 || z > 256 * 0.33 + 16;
        }
    }
    CHECK(erased_any > 10);
    CHECK(bad_area == 0);
    cl_transforms_destroy(tf);
    cl_image_free(&img);
}

CL_TEST(random_resized_crop_statistics)
{
    /* R = x and G = y on a 256x256 image: the output's corner pixels give
     * back the crop box (bilinear is exact on a ramp), so the drawn area
     * and aspect ratio can be checked against scale (0.08, 1) and ratio
     * (3/4, 4/3). */
    cl_image img = {0};
    REQUIRE_OK(cl_image_reserve(&img, 256, 256, 3));
    for (int y = 0; y < 256; y++)
        for (int x = 0; x < 256; x++) {
            uint8_t *p = img.data + (y * 256 + x) * 3;
            p[0] = (uint8_t)x;
            p[1] = (uint8_t)y;
            p[2] = 0;
        }
    cl_transform_opts o = cl_transform_opts_imagenet_train(64);
    o.normalize = 0;
    o.hflip_prob = 0;
    cl_transforms *tf = NULL;
    REQUIRE_OK(cl_transforms_create(&tf, &o));
    static float out[3 * 64 * 64];
    double area_sum = 0;
    int bad = 0, n = 300;
    for (int t = 0; t < n; t++) {
        cl_rng r;
        cl_rng_init(&r, 11, (uint64_t)t);
        REQUIRE_OK(cl_transforms_apply(tf, &img, &r, NULL, out));
        /* Crop [x0, x1] x [y0, y1] from the ramp at the output's corners,
         * extended by half an output pixel on each side. */
        double x0 = out[0] * 255, x1 = out[63] * 255;
        double y0 = out[4096] * 255, y1 = out[4096 + 63 * 64] * 255;
        double cw = (x1 - x0) * 64 / 63, ch = (y1 - y0) * 64 / 63;
        double area = cw * ch / (256.0 * 256.0), ratio = cw / ch;
        area_sum += area;
        bad += area < 0.08 * 0.85 || area > 1.02;
        bad += ratio < 0.75 * 0.9 || ratio > 4.0 / 3.0 * 1.1;
        bad += x0 < -0.5 || y0 < -0.5 || x1 > 255.5 || y1 > 255.5;
    }
    CHECK(bad == 0);
    /* scale ~ U(0.08, 1) (some large draws rejected): mean about 0.5. */
    CHECK(area_sum / n > 0.4 && area_sum / n < 0.6);
    cl_transforms_destroy(tf);
    cl_image_free(&img);
}

CL_TEST(png_palette_with_transparency_decodes_to_rgb)
{
    /* A palette PNG with a tRNS chunk: libpng expands the transparency into
     * an alpha channel, which is dropped like any other alpha (found by the
     * PNG fuzzer's seed corpus). */
    cl_image img;
    memset(&img, 0, sizeof img);
    REQUIRE_OK(cl_image_load(CL_SOURCE_DIR "/tests/fuzz/corpus/png/pal2.png", 0,
                             0, &img));
    CHECK(img.c == 3 && img.w == 6 && img.h == 3);
    cl_image_free(&img);
}
