/* Dataset inspection: per-channel statistics and a labelled PNG grid of
 * augmented samples drawn with a tiny built-in 3x5 bitmap font. */
#include <ctype.h>
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "data/data.h"

/* 3x5 glyphs, 15 bits each: five rows of three, top row in bits 14..12,
 * the leftmost pixel the highest bit of its row. */
#define G(a, b, c, d, e) ((a << 12) | (b << 9) | (c << 6) | (d << 3) | e)
static const struct glyph {
    char ch;
    unsigned short bits;
} font[] = {
    {'0', G(7, 5, 5, 5, 7)}, {'1', G(2, 6, 2, 2, 7)}, {'2', G(7, 1, 7, 4, 7)},
    {'3', G(7, 1, 7, 1, 7)}, {'4', G(5, 5, 7, 1, 1)}, {'5', G(7, 4, 7, 1, 7)},
    {'6', G(7, 4, 7, 5, 7)}, {'7', G(7, 1, 1, 1, 1)}, {'8', G(7, 5, 7, 5, 7)},
    {'9', G(7, 5, 7, 1, 7)}, {'A', G(2, 5, 7, 5, 5)}, {'B', G(6, 5, 6, 5, 6)},
    {'C', G(3, 4, 4, 4, 3)}, {'D', G(6, 5, 5, 5, 6)}, {'E', G(7, 4, 6, 4, 7)},
    {'F', G(7, 4, 6, 4, 4)}, {'G', G(3, 4, 5, 5, 3)}, {'H', G(5, 5, 7, 5, 5)},
    {'I', G(7, 2, 2, 2, 7)}, {'J', G(1, 1, 1, 5, 2)}, {'K', G(5, 5, 6, 5, 5)},
    {'L', G(4, 4, 4, 4, 7)}, {'M', G(5, 7, 7, 5, 5)}, {'N', G(6, 5, 5, 5, 5)},
    {'O', G(2, 5, 5, 5, 2)}, {'P', G(6, 5, 6, 4, 4)}, {'Q', G(2, 5, 5, 6, 3)},
    {'R', G(6, 5, 6, 5, 5)}, {'S', G(3, 4, 2, 1, 6)}, {'T', G(7, 2, 2, 2, 2)},
    {'U', G(5, 5, 5, 5, 7)}, {'V', G(5, 5, 5, 5, 2)}, {'W', G(5, 5, 7, 7, 5)},
    {'X', G(5, 5, 2, 5, 5)}, {'Y', G(5, 5, 2, 2, 2)}, {'Z', G(7, 1, 2, 4, 7)},
    {'-', G(0, 0, 7, 0, 0)}, {'/', G(1, 1, 2, 4, 4)}, {'_', G(0, 0, 0, 0, 7)},
    {'.', G(0, 0, 0, 0, 2)}, {':', G(0, 2, 0, 2, 0)}, {'(', G(2, 4, 4, 4, 2)},
    {')', G(2, 1, 1, 1, 2)}, {'?', G(7, 1, 2, 0, 2)}, {' ', 0},
};
#undef G

static unsigned glyph_bits(char ch)
{
    char u = (char)toupper((unsigned char)ch);
    for (size_t i = 0; i < sizeof font / sizeof font[0]; i++)
        if (font[i].ch == u)
            return font[i].bits;
    return glyph_bits('?');
}

/* Draws text at (x, y) in an RGB image, clipped to its bounds; each glyph
 * cell is 4x6 pixels at scale 1. */
static void draw_text(cl_image *img, int x, int y, const char *text, int scale,
                      const uint8_t rgb[3])
{
    for (const char *p = text; *p; p++, x += 4 * scale) {
        unsigned b = glyph_bits(*p);
        for (int r = 0; r < 5; r++)
            for (int c = 0; c < 3; c++) {
                if (!(b & (1u << (14 - (r * 3 + c)))))
                    continue;
                for (int dy = 0; dy < scale; dy++)
                    for (int dx = 0; dx < scale; dx++) {
                        int yy = y + r * scale + dy, xx = x + c * scale + dx;
                        if (yy < 0 || yy >= img->h || xx < 0 || xx >= img->w)
                            continue;
                        uint8_t *d = img->data + ((size_t)yy * img->w + xx) * 3;
                        d[0] = rgb[0];
                        d[1] = rgb[1];
                        d[2] = rgb[2];
                    }
            }
    }
}

cl_status cl_data_stats(const cl_dataset *ds, int64_t limit, int *channels,
                        double mean[3], double std[3])
{
    int64_t n = cl_dataset_count(ds);
    int64_t take = limit > 0 && limit < n ? limit : n;
    double sum[3] = {0, 0, 0}, sq[3] = {0, 0, 0};
    double pixels = 0;
    int C = 0;
    cl_image img = {0};
    cl_status s = CL_OK;
    for (int64_t t = 0; t < take; t++) {
        /* Evenly spaced samples when limited, so all classes show up. */
        int64_t i = take == n ? t : (int64_t)((double)t * n / take);
        s = cl_dataset_get(ds, i, 0, &img, NULL);
        if (s != CL_OK) {
            if (cl_dataset_bad_image_policy(ds) == CL_BAD_IMAGE_SKIP &&
                s != CL_ERR_NOMEM) {
                s = CL_OK;
                continue;
            }
            goto done;
        }
        if (C == 0)
            C = img.c;
        size_t np = (size_t)img.h * img.w;
        for (size_t q = 0; q < np; q++) {
            const uint8_t *p = img.data + q * img.c;
            for (int c = 0; c < C; c++) {
                double v;
                if (img.c == C)
                    v = p[c];
                else if (img.c == 1)
                    v = p[0];
                else
                    v = 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2];
                v /= 255.0;
                sum[c] += v;
                sq[c] += v * v;
            }
        }
        pixels += (double)np;
    }
    if (pixels == 0) {
        s = cl_error(CL_ERR_ARG, "data stats: no image could be read");
        goto done;
    }
    *channels = C;
    for (int c = 0; c < 3; c++) {
        mean[c] = c < C ? sum[c] / pixels : 0;
        double var = c < C ? sq[c] / pixels - mean[c] * mean[c] : 0;
        std[c] = var > 0 ? sqrt(var) : 0;
    }
done:
    cl_image_free(&img);
    return s;
}

cl_status cl_data_preview(cl_dataset *ds, const cl_transform_opts *opts, int n,
                          int cell, uint64_t seed, const char *out)
{
    cl_status s = CL_OK;
    cl_transforms *tf = NULL;
    cl_loader *ld = NULL;
    cl_image grid = {0};
    if (n < 1 || n > 1024 || cell < 8 || cell > 1024)
        return cl_error(CL_ERR_ARG,
                        "data preview: %d samples of %d px: expected 1..1024 "
                        "samples of 8..1024 px",
                        n, cell);
    int64_t count = cl_dataset_count(ds);
    if (n > count)
        n = (int)count;
    cl_transform_opts o = *opts;
    o.normalize = 0; /* show pixels, not normalised values */
    o.out_c = 3;
    s = cl_transforms_create(&tf, &o);
    if (s != CL_OK)
        return s;
    cl_loader_opts lo;
    memset(&lo, 0, sizeof lo);
    lo.dataset = ds;
    lo.tf = tf;
    lo.batch_size = n;
    lo.shuffle = 1;
    lo.seed = seed;
    lo.workers = 2;
    lo.prefetch = 1;
    s = cl_loader_create(&ld, &lo);
    if (s != CL_OK)
        goto done;
    s = cl_loader_start_epoch(ld, 0);
    if (s != CL_OK)
        goto done;
    cl_batch b;
    s = cl_loader_next(ld, &b);
    if (s != CL_OK)
        goto done;
    int cols = (int)ceil(sqrt((double)b.n));
    if (cols < 1)
        cols = 1;
    int rows = (b.n + cols - 1) / cols;
    int pad = 2, label_h = 8;
    int cw = cell + pad, ch = cell + label_h + pad;
    s = cl_image_reserve(&grid, rows * ch + pad, cols * cw + pad, 3);
    if (s != CL_OK)
        goto done;
    memset(grid.data, 32, (size_t)grid.h * grid.w * 3);
    const uint8_t white[3] = {240, 240, 240};
    int H = o.out_h, W = o.out_w;
    for (int i = 0; i < b.n; i++) {
        int gx = pad + (i % cols) * cw, gy = pad + (i / cols) * ch;
        const float *x = b.x + (size_t)i * 3 * H * W;
        /* Nearest-neighbour scaling into the cell. */
        for (int y = 0; y < cell; y++)
            for (int xx = 0; xx < cell; xx++) {
                int sy = y * H / cell, sx = xx * W / cell;
                uint8_t *d =
                    grid.data + ((size_t)(gy + y) * grid.w + gx + xx) * 3;
                for (int c = 0; c < 3; c++) {
                    float v = x[((size_t)c * H + sy) * W + sx];
                    v = v < 0 ? 0 : (v > 1 ? 1 : v);
                    d[c] = (uint8_t)lrintf(v * 255.0f);
                }
            }
        char text[64];
        int maxch = cell / 4;
        if (maxch > (int)sizeof text - 1)
            maxch = (int)sizeof text - 1;
        snprintf(text, sizeof text, "%d %s", b.labels[i],
                 cl_dataset_class_name(ds, b.labels[i]));
        text[maxch] = '\0';
        draw_text(&grid, gx, gy + cell + 2, text, 1, white);
    }
    s = cl_image_save_png(out, &grid);
done:
    cl_image_free(&grid);
    cl_loader_destroy(ld);
    cl_transforms_destroy(tf);
    return s;
}
