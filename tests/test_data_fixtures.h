/* Fixture writers for the data tests: tiny IDX, CIFAR and JPEG files made
 * at run time (header-only; each test program includes it once). */
#ifndef CL_TEST_DATA_FIXTURES_H
#define CL_TEST_DATA_FIXTURES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jpeglib.h>
#include <zlib.h>

static inline void fx_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Writes bytes to path, gzip-compressed when gz. Returns 0 on success. */
static inline int fx_write(const char *path, const void *data, size_t n, int gz)
{
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (!f)
            return -1;
        int ok = n == 0 || gzwrite(f, data, (unsigned)n) == (int)n;
        return gzclose(f) == Z_OK && ok ? 0 : -1;
    }
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(data, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

/* The pixel value of image i at (y, x) in the IDX fixtures. */
static inline uint8_t fx_pix(int i, int y, int x)
{
    return (uint8_t)(i * 7 + y * 13 + x * 3);
}

/* IDX images file: n images of rows x cols; `extra` trailing bytes, `cut`
 * bytes removed from the end, magic overridable (0 = the right one). */
static inline int fx_idx_images(const char *path, int n, int rows, int cols,
                                int gz, int extra, int cut, uint32_t magic)
{
    size_t sz = 16 + (size_t)n * rows * cols + (size_t)extra;
    uint8_t *b = calloc(sz, 1);
    if (!b)
        return -1;
    fx_be32(b, magic ? magic : 0x00000803u);
    fx_be32(b + 4, (uint32_t)n);
    fx_be32(b + 8, (uint32_t)rows);
    fx_be32(b + 12, (uint32_t)cols);
    for (int i = 0; i < n; i++)
        for (int y = 0; y < rows; y++)
            for (int x = 0; x < cols; x++)
                b[16 + ((size_t)i * rows + y) * cols + x] = fx_pix(i, y, x);
    int r = fx_write(path, b, sz - (size_t)cut, gz);
    free(b);
    return r;
}

/* Label of sample i in the fixtures. */
static inline int fx_label(int i, int classes)
{
    return (i * 3 + 1) % classes;
}

static inline int fx_idx_labels(const char *path, int n, int classes, int gz,
                                int bad_at)
{
    size_t sz = 8 + (size_t)n;
    uint8_t *b = calloc(sz, 1);
    if (!b)
        return -1;
    fx_be32(b, 0x00000801u);
    fx_be32(b + 4, (uint32_t)n);
    for (int i = 0; i < n; i++)
        b[8 + i] = (uint8_t)fx_label(i, classes);
    if (bad_at >= 0 && bad_at < n)
        b[8 + bad_at] = (uint8_t)classes;
    int r = fx_write(path, b, sz, gz);
    free(b);
    return r;
}

/* Pixel (y, x, k) of the synthetic test images. */
static inline uint8_t fx_px(int y, int x, int k)
{
    return (uint8_t)(10 + y + x * 2 + k * 30);
}

/* Encodes a smooth h x w image with c channels (1 or 3) as a JPEG; c = 4
 * writes Adobe-style inverted CMYK holding (R, G, B, K = 255). */
static inline int fx_jpeg(const char *path, int h, int w, int c, int quality)
{
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr jerr;
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    ci.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&ci);
    jpeg_stdio_dest(&ci, f);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = c;
    ci.in_color_space = c == 1 ? JCS_GRAYSCALE : (c == 4 ? JCS_CMYK : JCS_RGB);
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, quality, TRUE);
    jpeg_start_compress(&ci, TRUE);
    uint8_t *row = malloc((size_t)w * c);
    while (ci.next_scanline < ci.image_height) {
        int y = (int)ci.next_scanline;
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++)
                row[x * c + k] = k == 3 ? 255 : fx_px(y, x, k);
        JSAMPROW rp = row;
        jpeg_write_scanlines(&ci, &rp, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    free(row);
    return fclose(f);
}

/* Writes the CIFAR-10 folder cifar-10-batches-bin under base:
 * per_batch records in each of the 5 batches, n_test in test_batch. */
static inline void fx_cifar10(const char *base, int per_batch, int n_test)
{
    char dir[1024], p[1200];
    mkdir(base, 0755);
    if (snprintf(dir, sizeof dir, "%s/cifar-10-batches-bin", base) >=
        (int)sizeof dir)
        return;
    mkdir(dir, 0755);
    int most = per_batch > n_test ? per_batch : n_test;
    uint8_t *buf = calloc((size_t)(most > 0 ? most : 1), 3073);
    if (!buf)
        return;
    for (int b = 0; b < 6; b++) {
        int n = b < 5 ? per_batch : n_test;
        for (int r = 0; r < n; r++) {
            int id = b * 100 + r;
            uint8_t *rec = buf + r * 3073;
            rec[0] = (uint8_t)(id % 10);
            for (int i = 0; i < 3072; i++)
                rec[1 + i] = (uint8_t)(id + i * 7);
        }
        if (b < 5)
            snprintf(p, sizeof p, "%s/data_batch_%d.bin", dir, b + 1);
        else
            snprintf(p, sizeof p, "%s/test_batch.bin", dir);
        fx_write(p, buf, (size_t)n * 3073, 0);
    }
    const char *meta = "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\n"
                       "horse\nship\ntruck\n\n";
    snprintf(p, sizeof p, "%s/batches.meta.txt", dir);
    fx_write(p, meta, strlen(meta), 0);
    free(buf);
}

/* An ImageFolder split: n JPEGs (20x24 RGB) in root/<split>/{a,b}/,
 * alternating classes; 0 on success. */
static inline int fx_image_split(const char *root, const char *split, int n)
{
    char p[1400];
    mkdir(root, 0755);
    snprintf(p, sizeof p, "%s/%s", root, split);
    mkdir(p, 0755);
    for (int c = 0; c < 2; c++) {
        snprintf(p, sizeof p, "%s/%s/%c", root, split, 'a' + c);
        mkdir(p, 0755);
    }
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/%s/%c/%d.jpg", root, split, 'a' + i % 2, i);
        if (fx_jpeg(p, 20, 24, 3, 90) != 0)
            return -1;
    }
    return 0;
}

#endif
