/* Fixture writers for the data tests: tiny IDX and CIFAR files made at run
 * time (header-only; each test program includes it once). */
#ifndef CL_TEST_DATA_FIXTURES_H
#define CL_TEST_DATA_FIXTURES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

#endif
